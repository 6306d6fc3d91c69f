//! Shared helpers for the integration tests.
#![allow(dead_code)]

use chad::random::{Config, any_value};
use chad::types::Type;
use chad::value::Value;
use proptest::strategy::{Strategy, ValueTree};
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

/// Compares two results of type `ty`: first-order values exactly; functions by applying both to
/// the same random arguments and comparing the results (errors must match too).
pub fn same_at(
    ty: &Type,
    a: &chad::Result<Value>,
    b: &chad::Result<Value>,
    rng: &mut TestRunner,
    fuel: u32,
) -> Result<(), String> {
    match (a, b) {
        (Err(x), Err(y)) if x.message() == y.message() && x.span() == y.span() => Ok(()),
        (Ok(x), Ok(y)) => match ty {
            _ if ty.is_first_order() => {
                if x.same(y) == Some(true) {
                    Ok(())
                } else {
                    Err(format!("{x} differs from {y}"))
                }
            }
            Type::Fun(f) => {
                for _ in 0..if fuel > 0 { 3 } else { 0 } {
                    let arg = any_value(&Config::default(), &f.0)
                        .new_tree(rng)
                        .map_err(|e| e.to_string())?
                        .current();
                    same_at(
                        &f.1,
                        &x.apply(arg.clone()),
                        &y.apply(arg.clone()),
                        rng,
                        fuel - 1,
                    )
                    .map_err(|e| format!("applied to {arg}: {e}"))?;
                }
                Ok(())
            }
            Type::Prod(p) => {
                let ((x1, x2), (y1, y2)) = (x.expect_pair(), y.expect_pair());
                same_at(&p.0, &Ok(x1.clone()), &Ok(y1.clone()), rng, fuel)?;
                same_at(&p.1, &Ok(x2.clone()), &Ok(y2.clone()), rng, fuel)
            }
            Type::Sum(s) => match (x, y) {
                (Value::Inl(u), Value::Inl(v)) => {
                    same_at(&s.0, &Ok((**u).clone()), &Ok((**v).clone()), rng, fuel)
                }
                (Value::Inr(u), Value::Inr(v)) => {
                    same_at(&s.1, &Ok((**u).clone()), &Ok((**v).clone()), rng, fuel)
                }
                _ => Err(format!("{x} and {y} are different injections")),
            },
            Type::Array(e) => {
                let (xs, ys) = (x.array_items(), y.array_items());
                if xs.len() != ys.len() {
                    return Err(format!("arrays of lengths {} and {}", xs.len(), ys.len()));
                }
                for (u, v) in xs.into_iter().zip(ys) {
                    same_at(e, &Ok(u), &Ok(v), rng, fuel)?;
                }
                Ok(())
            }
            _ => unreachable!("first-order handled above"),
        },
        _ => Err(format!("{a:?} versus {b:?}")),
    }
}

/// A random program that AD supports (drawn until one is; not a proptest filter, whose
/// rejection budget long runs would exhaust).
pub fn supported_program(
    strategy: &impl Strategy<Value = chad::random::TestProgram>,
    r: &mut TestRunner,
) -> chad::random::TestProgram {
    loop {
        let p = strategy.new_tree(r).unwrap().current();
        if chad::ad::check_supported(&p.entry.body).is_ok() {
            return p;
        }
    }
}

/// The message of a caught panic.
pub fn panic_message(e: &Box<dyn std::any::Any + Send>) -> String {
    e.downcast_ref::<String>()
        .cloned()
        .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "(no message)".to_string())
}

/// Coverage a test requires of the programs it checked: the least share that must contain each
/// construct of [`chad::random::features`].
pub type Requirements = &'static [(&'static str, f64)];

/// What the array-heavy AD tests ([`Config::array_bias`]) require.
pub const ARRAYS: Requirements = &[
    ("build", 0.3),
    ("index by a build's index", 0.12),
    ("map2", 0.15),
    ("nested array", 0.3),
    ("array of tuples", 0.3),
    ("array input", 0.5),
    ("array result", 0.3),
    ("closure in map/build", 0.3),
    ("captured function in map/build", 0.08),
];

/// What the sum-heavy AD tests ([`Config::sum_bias`]) require.
pub const SUMS: Requirements = &[
    ("case", 0.5),
    ("if on a comparison", 0.4),
    ("inl", 0.4),
    ("inr", 0.4),
    ("sum input", 0.3),
    ("sum result", 0.25),
];

/// How many checked programs contained each construct.
#[derive(Debug, Default)]
pub struct Coverage {
    /// Programs recorded.
    pub programs: u32,
    /// Per construct, the programs containing it.
    pub seen: std::collections::BTreeMap<&'static str, u32>,
}

impl Coverage {
    /// Records one checked program with its constructs.
    pub fn record(&mut self, constructs: impl IntoIterator<Item = &'static str>) {
        self.programs += 1;
        for f in constructs {
            *self.seen.entry(f).or_default() += 1;
        }
    }

    /// Panics unless every construct of `required` was in at least its share of the programs.
    pub fn require(&self, required: Requirements) {
        for (f, frac) in required {
            let k = self.seen.get(f).copied().unwrap_or(0);
            assert!(
                f64::from(k) >= frac * f64::from(self.programs),
                "too few programs with {f}: {k} of {}",
                self.programs
            );
        }
    }
}

/// Runs `agrees` on `n` random programs of `cfg`; it returns whether the program ran (rather
/// than failing the same way on both sides). The agreement must mostly be on values, not on
/// errors: at least half the programs must run.
pub fn check_programs(
    cfg: Config,
    n: u32,
    agrees: impl Fn(&chad::random::TestProgram) -> Result<bool, proptest::test_runner::TestCaseError>,
) {
    let ok = std::cell::Cell::new(0u32);
    runner(n)
        .run(&chad::random::program(cfg), |p| {
            if agrees(&p)? {
                ok.set(ok.get() + 1);
            }
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(ok.get() * 2 >= n, "only {} of {n} programs ran", ok.get());
}
