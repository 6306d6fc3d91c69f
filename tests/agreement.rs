//! The two evaluation routes agree, and compiled combinators are typed as their source terms.
//!
//! For random well-typed programs (higher-order functions, closures, tuples, sums,
//! conditionals, arrays with map/map2/build/index): evaluating the typed source term directly
//! and evaluating its compiled combinator through the generic `interpret` give exactly the same
//! value, or exactly the same runtime error at the same source location.

mod common;

use chad::Value;
use chad::internals::ccc::{self, typing::Typing};
use chad::internals::random::{Config, TestProgram, program};
use common::same_at;
use proptest::prelude::*;
use proptest::test_runner::TestRunner;
use std::cell::Cell;

fn run_both(p: &TestProgram) -> (chad::Result<Value>, chad::Result<Value>) {
    let direct = chad::internals::eval::eval_entry(&p.entry, &p.inputs);
    let comb = ccc::compile_entry(&p.entry);
    let via = ccc::eval::run(&comb, &ccc::eval::context_value(&p.inputs));
    (direct, via)
}

/// Checks one program; returns whether evaluation succeeded (as opposed to a runtime error).
fn agree(p: &TestProgram) -> Result<bool, TestCaseError> {
    let comb = ccc::compile_entry(&p.entry);
    // The combinator's type is the typing judgement of the source term...
    prop_assert_eq!(&comb.dom, &ccc::context_type(&p.entry.params));
    prop_assert_eq!(&comb.cod, &p.entry.body.ty);
    // ...and rebuilding it from the structure alone, checking every composition, agrees.
    let sig = ccc::interpret(&comb, &Typing).map_err(TestCaseError::fail)?;
    prop_assert_eq!(sig, (comb.dom.clone(), comb.cod.clone()));

    let (direct, via) = run_both(p);
    if let Ok(v) = &direct {
        prop_assert!(
            v.has_type(&p.entry.body.ty),
            "direct result {} has the wrong type",
            v
        );
    }
    let mut rng = TestRunner::deterministic();
    same_at(&p.entry.body.ty, &direct, &via, &mut rng, 2).map_err(TestCaseError::fail)?;
    if let Err(e) = &direct {
        ERRORS.with(|m| {
            *m.borrow_mut()
                .entry(e.message().split(':').next().unwrap_or("").to_string())
                .or_insert(0) += 1
        });
    }
    Ok(direct.is_ok())
}

thread_local! {
    static ERRORS: std::cell::RefCell<std::collections::BTreeMap<String, u32>> = Default::default();
}

fn check_config(cfg: Config, n: u32, min_success: f64) {
    let ok = Cell::new(0u32);
    let total = Cell::new(0u32);
    let mut runner = common::runner(n);
    runner
        .run(&program(cfg), |p| {
            total.set(total.get() + 1);
            if agree(&p)? {
                ok.set(ok.get() + 1);
            }
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{e}"));
    let frac = f64::from(ok.get()) / f64::from(total.get());
    eprintln!(
        "{} of {} programs evaluated without runtime error",
        ok.get(),
        total.get()
    );
    ERRORS.with(|m| eprintln!("runtime errors: {:?}", m.borrow()));
    // Most generated programs must run to a value, or the agreement on values proves little.
    assert!(
        frac >= min_success,
        "only {:.0}% of programs ran without error",
        frac * 100.0
    );
}

#[test]
fn direct_and_combinator_evaluation_agree_on_random_programs() {
    check_config(Config::default(), common::cases(500), 0.6);
}

#[test]
fn agree_on_deeper_higher_order_programs() {
    let cfg = Config {
        depth: 6,
        higher_order_result: true,
        ..Config::default()
    };
    check_config(cfg, common::cases(200), 0.5);
}

#[test]
fn agree_on_first_order_scalar_programs() {
    let cfg = Config {
        functions: false,
        arrays: false,
        sums: false,
        depth: 6,
        ..Config::default()
    };
    check_config(cfg, common::cases(200), 0.9);
}

#[test]
fn agree_on_loop_programs() {
    // Loops (counted, over arrays, on real conditions; any state type) through `it(f)`.
    let cfg = Config {
        loops: true,
        higher_order_result: true,
        ..Config::default()
    };
    check_config(cfg, common::cases(200), 0.5);
}

#[test]
fn agree_on_recursive_programs() {
    // Recursion (`fix` with structural fuel, non-tail and tree-shaped) through `fix(h)`.
    let cfg = Config {
        recursion: true,
        higher_order_result: true,
        ..Config::default()
    };
    check_config(cfg, common::cases(200), 0.5);
}
