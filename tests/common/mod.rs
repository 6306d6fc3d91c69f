//! Shared helpers for the integration tests.
#![allow(dead_code)]

use proptest::test_runner::{Config as ProptestConfig, TestRunner};

/// Number of random cases for a property test: `CHAD_PROPTEST_CASES` if set, else `default`.
/// CI runs the defaults; set e.g. `CHAD_PROPTEST_CASES=20000` for a heavy run.
pub fn cases(default: u32) -> u32 {
    std::env::var("CHAD_PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// A proptest runner for `n` cases that does not write regression files.
pub fn runner(n: u32) -> TestRunner {
    TestRunner::new(ProptestConfig {
        cases: n,
        failure_persistence: None,
        ..ProptestConfig::default()
    })
}
