//! The whole command line on a program: `check`, then `eval`, `grad`, `jvp`, `vjp`, `show` and
//! a second-order command on the last definition ([`chad::internals::fuzz::exercise`]), under a 1 GiB
//! memory budget. A command may fail with an error; a panic is a bug (libFuzzer reports it and
//! saves the input).
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::hash::{Hash, Hasher};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if text.len() > chad::internals::fuzz::MAX_LEN {
        return;
    }
    chad::internals::budget::set_limit(1 << 30);
    let file = std::env::temp_dir().join(format!("chad-libfuzzer-{}.chad", std::process::id()));
    let mut h = std::collections::hash_map::DefaultHasher::new();
    text.hash(&mut h);
    let report = chad::internals::fuzz::exercise(text, &file, h.finish());
    if let Some(f) = report.findings.first() {
        panic!("`chad {}` panicked: {}", f.command.join(" "), f.message);
    }
});
