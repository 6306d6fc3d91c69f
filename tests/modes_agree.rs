//! Every mode fails where the evaluator fails (issue 27, finding 5): on random programs, the
//! pipeline the CLI runs for `eval`, `jvp`, `vjp` and `grad --engine dual` (optimised source,
//! CHAD, simplified derivative code on the engine) either fails in every mode with the
//! evaluator's error, or succeeds in every mode with the evaluator's value. Before the
//! simplifier kept computations that may fail (theory-notes/09), 4.2% of random programs
//! failed in `eval` but printed a derivative in the AD modes; here the count must be 0. Also
//! on programs with near-duplicate subterms (`Config::near_duplicates`), where a CSE that
//! confuses them gives a wrong value.

mod common;

use chad::Value;
use chad::internals::ad::{Jvp, Vjp};
use chad::internals::optimize::optimize;
use chad::internals::oracle::fd;
use chad::internals::random::{self, Config, TestProgram};
use chad::internals::simplify::simplify;
use std::panic::{AssertUnwindSafe, catch_unwind};

/// How one mode ended: the value, or the error's message and position.
#[derive(Debug, PartialEq)]
enum Outcome {
    Value(Vec<f64>),
    Error(String, Option<chad::Span>),
}

fn outcome(r: chad::Result<Value>) -> Outcome {
    match r {
        Ok(v) => Outcome::Value(fd::leaves(&v)),
        Err(e) => Outcome::Error(e.message().to_string(), e.span()),
    }
}

/// Values agree up to rounding (the simplifier may reassociate), NaN with NaN.
fn agree(a: &Outcome, b: &Outcome) -> bool {
    match (a, b) {
        (Outcome::Value(x), Outcome::Value(y)) => {
            x.len() == y.len()
                && x.iter().zip(y).all(|(p, q)| {
                    (p.is_nan() && q.is_nan())
                        || p == q
                        || (p - q).abs() <= 1e-9 * (1.0 + p.abs().max(q.abs()))
                })
        }
        (Outcome::Error(m, _), Outcome::Error(n, _)) => m == n,
        _ => false,
    }
}

/// The modes' outcomes on `p` at its inputs, in the order eval, jvp, vjp, dual (if the dual
/// engine takes the program).
fn modes(p: &TestProgram) -> Vec<(&'static str, Outcome)> {
    let entry = &p.entry;
    let args = &p.inputs;
    let mut out = vec![(
        "eval",
        outcome(chad::internals::eval::eval_entry(entry, args)),
    )];
    let optimized = optimize(entry);
    let zeros: Vec<Value> = entry
        .param_types()
        .iter()
        .zip(args)
        .map(|(t, x)| fd::zero_tangent(t, x))
        .collect();
    let jvp = Jvp::new(&optimized).map(|j| j.map_body(simplify));
    out.push((
        "jvp",
        outcome(jvp.and_then(|j| j.jvp(args, &zeros).map(|r| r.0))),
    ));
    // The cotangent: zero of the result's shape, where the evaluator gives one; where it fails
    // the primal part fails first and never looks at it.
    let ct = match chad::internals::eval::eval_entry(entry, args) {
        Ok(y) => fd::zero_tangent(&entry.body.ty, &y),
        Err(_) => Value::Unit,
    };
    let vjp = Vjp::new(&optimized).map(|v| v.map_body(simplify));
    out.push((
        "vjp",
        outcome(vjp.and_then(|v| v.vjp(args, &ct).map(|r| r.0))),
    ));
    if let Ok(d) = chad::internals::dual_reverse::DualReverse::new(
        entry,
        chad::internals::dual_reverse::Options::default(),
    ) {
        out.push(("dual", outcome(d.vjp(args, &ct).map(|o| o.value))));
    }
    out
}

/// Runs `n` random programs of `cfg`; panics on the first disagreement. Returns how many
/// failed in the evaluator (all modes agreeing).
fn check(cfg: Config, n: u32) -> (u32, u32) {
    let strategy = random::program(cfg);
    let mut r = common::runner(n);
    let mut failing = 0;
    for _ in 0..n {
        let p = common::supported_program(&strategy, &mut r);
        let outs = catch_unwind(AssertUnwindSafe(|| modes(&p)))
            .unwrap_or_else(|e| panic!("panic: {}\n{p:?}", common::panic_message(&e)));
        let (_, want) = &outs[0];
        for (mode, got) in &outs[1..] {
            assert!(
                agree(want, got),
                "{mode} disagrees with eval: eval gives {want:?}, {mode} gives {got:?}\n\
                 program:\n{}\ninputs: {:?}",
                p.source(),
                p.inputs
            );
        }
        if matches!(want, Outcome::Error(..)) {
            failing += 1;
        }
    }
    (failing, n)
}

#[test]
fn all_modes_fail_where_eval_fails_on_random_programs() {
    let n = common::cases(400);
    let (failing, ran) = check(Config::default(), n);
    eprintln!("{failing} of {ran} programs failed in every mode alike");
    // The property means little unless some programs fail (indexing out of range, map2 of
    // different lengths, negative build sizes, integer division by zero, ...).
    assert!(failing * 50 >= ran, "only {failing} of {ran} failed");
}

#[test]
fn all_modes_agree_on_array_programs() {
    let n = common::cases(200);
    let cfg = Config {
        array_bias: true,
        ..Config::default()
    };
    check(cfg, n);
}

#[test]
fn all_modes_agree_on_programs_with_near_duplicates() {
    // `op (fst p) ⋆ op (snd p)` and the like (Config::near_duplicates): a CSE that confuses
    // the components gives a wrong value in the simplified modes.
    let n = common::cases(300);
    let cfg = Config {
        near_duplicates: true,
        ..Config::default()
    };
    check(cfg, n);
}
