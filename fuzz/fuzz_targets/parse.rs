//! The parser on arbitrary text: a syntax error or a program, never a panic.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = chad::internals::source::parser::parse_program(text);
    }
});
