//! Parse and type-check (with type aliases, custom derivatives and `grad` inside programs
//! elaborated, as every command loads a program): an error or typed terms, never a panic.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(program) = chad::Program::load(text) {
            let _ = program.terms();
        }
    }
});
