//! The two derivative oracles agree with each other on random programs.
//!
//! For random well-typed programs (higher-order functions and closures, tuples, sums, `case`,
//! conditionals, arrays with map/map2/build/index, every builtin primitive) with first-order
//! inputs and results, at random points along random directions:
//!
//! * the dual-number evaluator's primal is exactly the direct evaluator's value, and its
//!   runtime errors are exactly the direct evaluator's (message and source location);
//! * its tangent is a tangent of the result (right type and shape);
//! * it agrees with central finite differences on every Real leaf of the result, up to the
//!   error of the finite-difference estimate.
//!
//! Finite differences are only trusted where they are reliable. A leaf is skipped when a
//! value is non-finite or huge, when finite differences report the function not
//! differentiable (the discrete structure of the result changes within the step), or when the
//! estimates at two step sizes disagree, which is what a nearby kink or jump (`abs`, `max`,
//! `floor`, an `if` on a comparison) or extreme curvature looks like. Every other leaf must
//! agree to within a relative 1e-5 (plus a small absolute floor and the estimates' own
//! spread). The tests also require that most cases compare a non-zero derivative, so that
//! skipping cannot make them vacuous.
//!
//! `CHAD_PROPTEST_CASES` sets the number of cases (see `tests/common/mod.rs`).

mod common;

use chad::Value;
use chad::internals::oracle::{check_tangent, dual, fd};
use chad::internals::random::{Config, TestProgram, program};
use chad::internals::types::Type;
use proptest::prelude::*;
use std::cell::RefCell;

/// The two finite-difference steps: their estimates must agree before either is trusted.
const H_COARSE: f64 = 1e-4;
const H_FINE: f64 = 1e-5;

/// What happened across the cases of one property test.
#[derive(Default, Debug)]
struct Stats {
    cases: u32,
    /// The program failed at run time (both evaluators agreeing on the error).
    runtime_errors: u32,
    /// Finite differences reported the function not differentiable at the point.
    not_differentiable: u32,
    /// Leaves compared and found in agreement.
    leaves_agreed: u32,
    /// Leaves skipped as unreliable for finite differences.
    leaves_skipped: u32,
    /// Cases in which some compared leaf had a derivative of magnitude at least 1e-3.
    nontrivial_cases: u32,
}

/// A deterministic stream of reals in [-1, 1] (SplitMix64), for random directions.
struct Directions(u64);

impl Directions {
    fn next(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
    }
}

fn random_tangents(p: &TestProgram, seed: u64) -> Vec<Value> {
    let mut dirs = Directions(seed);
    p.entry
        .params
        .iter()
        .zip(&p.inputs)
        .map(|(x, v)| fd::tangent_with(&x.ty, v, &mut || dirs.next()))
        .collect()
}

/// The outcome of comparing one Real leaf.
enum Leaf {
    Agreed { nontrivial: bool },
    Skipped,
    Disagreed(String),
}

/// Compares the dual-number tangent `d` of a leaf with value `f` against the finite-difference
/// estimates `coarse` and `fine`.
fn compare_leaf(d: f64, coarse: f64, fine: f64, f: f64) -> Leaf {
    if ![d, coarse, fine, f].iter().all(|x| x.is_finite()) {
        return Leaf::Skipped;
    }
    if d.abs().max(fine.abs()).max(f.abs()) > 1e8 {
        return Leaf::Skipped;
    }
    let spread = (coarse - fine).abs();
    if spread > 1e-3 * (1.0 + fine.abs()) {
        return Leaf::Skipped;
    }
    let tol = 1e-6 + 1e-5 * d.abs().max(fine.abs()) + 1e-10 * f.abs() + 4.0 * spread;
    if (d - fine).abs() <= tol {
        Leaf::Agreed {
            nontrivial: fine.abs() >= 1e-3,
        }
    } else {
        Leaf::Disagreed(format!(
            "dual-number tangent {d} but finite differences give {fine} (step {H_FINE}) and \
             {coarse} (step {H_COARSE}); tolerance {tol:e}"
        ))
    }
}

/// Checks one program along the direction `tangents`.
fn check_direction(
    p: &TestProgram,
    tangents: &[Value],
    stats: &mut Stats,
) -> Result<(), TestCaseError> {
    let ty = &p.entry.body.ty;
    let direct = chad::internals::eval::eval_entry(&p.entry, &p.inputs);
    let dual = dual::jvp(&p.entry, &p.inputs, tangents);
    let (value, tangent) = match (direct, dual) {
        (Err(want), Err(got)) => {
            prop_assert_eq!(got.kind(), want.kind());
            prop_assert_eq!(got.message(), want.message());
            prop_assert_eq!(got.span(), want.span());
            stats.runtime_errors += 1;
            return Ok(());
        }
        (Ok(want), Ok((value, tangent))) => {
            prop_assert!(
                value.same(&want) == Some(true),
                "dual-number primal {} differs from the value {}",
                value,
                want
            );
            (value, tangent)
        }
        (want, got) => {
            return Err(TestCaseError::fail(format!(
                "direct evaluation gives {want:?} but the dual-number evaluator {got:?}"
            )));
        }
    };
    check_tangent(ty, &value, &tangent)
        .map_err(|e| TestCaseError::fail(format!("bad output tangent: {}", e.message())))?;

    let (coarse, fine) = match (
        fd::jvp(&p.entry, &p.inputs, tangents, H_COARSE),
        fd::jvp(&p.entry, &p.inputs, tangents, H_FINE),
    ) {
        (Ok(c), Ok(f)) => (c, f),
        (Err(e), _) | (_, Err(e)) => {
            prop_assert_eq!(e.kind(), chad::ErrorKind::Runtime, "{}", e.message());
            stats.not_differentiable += 1;
            return Ok(());
        }
    };
    let (ds, cs, fs, vs) = (
        fd::leaves(&tangent),
        fd::leaves(&coarse),
        fd::leaves(&fine),
        fd::leaves(&value),
    );
    prop_assert!(ds.len() == cs.len() && ds.len() == fs.len() && ds.len() == vs.len());
    let mut nontrivial = false;
    for (k, (((&d, &c), &f), &v)) in ds.iter().zip(&cs).zip(&fs).zip(&vs).enumerate() {
        match compare_leaf(d, c, f, v) {
            Leaf::Agreed { nontrivial: n } => {
                stats.leaves_agreed += 1;
                nontrivial |= n;
            }
            Leaf::Skipped => stats.leaves_skipped += 1,
            Leaf::Disagreed(why) => {
                return Err(TestCaseError::fail(format!(
                    "Real leaf {k} of the result {value}: {why}\n  dual-number tangent: \
                     {tangent}\n  finite differences: {fine}"
                )));
            }
        }
    }
    if nontrivial {
        stats.nontrivial_cases += 1;
    }
    Ok(())
}

/// Runs `n` random programs of `cfg`, each along `directions(p, seed)`; then requires that at
/// least `min_nontrivial` of the cases compared a non-zero derivative.
fn run(
    name: &str,
    cfg: Config,
    n: u32,
    min_nontrivial: f64,
    directions: fn(&TestProgram, u64) -> Vec<Vec<Value>>,
) {
    let stats = RefCell::new(Stats::default());
    common::runner(n)
        .run(&(program(cfg), any::<u64>()), |(p, seed)| {
            // Shrinking re-runs cases; only the statistics of the last run matter.
            let mut s = Stats::default();
            for tangents in directions(&p, seed) {
                check_direction(&p, &tangents, &mut s).map_err(|e| {
                    TestCaseError::fail(format!(
                        "{e}\n  program:\n{}\n  inputs: {:?}\n  tangents: {:?}",
                        p.source(),
                        p.inputs,
                        tangents
                    ))
                })?;
            }
            let mut all = stats.borrow_mut();
            all.cases += 1;
            all.runtime_errors += s.runtime_errors.min(1);
            all.not_differentiable += s.not_differentiable.min(1);
            all.leaves_agreed += s.leaves_agreed;
            all.leaves_skipped += s.leaves_skipped;
            all.nontrivial_cases += s.nontrivial_cases.min(1);
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    let s = stats.into_inner();
    eprintln!("{name}: {s:?}");
    let frac = f64::from(s.nontrivial_cases) / f64::from(s.cases.max(1));
    // (Too few cases say nothing about the fraction.)
    assert!(
        s.cases < 50 || frac >= min_nontrivial,
        "{name}: only {:.0}% of the cases compared a non-zero derivative ({s:?})",
        frac * 100.0
    );
}

fn one_random_direction(p: &TestProgram, seed: u64) -> Vec<Vec<Value>> {
    vec![random_tangents(p, seed)]
}

fn full_jacobian(p: &TestProgram, _seed: u64) -> Vec<Vec<Value>> {
    fd::basis(&p.entry.param_types(), &p.inputs)
}

#[test]
fn dual_numbers_agree_with_finite_differences_on_random_programs() {
    run(
        "default programs",
        Config::default(),
        common::cases(300),
        0.15,
        one_random_direction,
    );
}

#[test]
fn agree_on_deeper_higher_order_programs() {
    let cfg = Config {
        depth: 6,
        type_depth: 3,
        ..Config::default()
    };
    run(
        "deeper programs",
        cfg,
        common::cases(600),
        0.15,
        one_random_direction,
    );
}

#[test]
fn agree_on_real_valued_scalar_programs_with_sums_and_conditionals() {
    let cfg = Config {
        arrays: false,
        depth: 5,
        result: Some(Type::Real),
        ..Config::default()
    };
    run(
        "scalar programs",
        cfg,
        common::cases(200),
        0.3,
        one_random_direction,
    );
}

#[test]
fn full_jacobians_agree() {
    run(
        "full Jacobians",
        Config::default(),
        common::cases(100),
        0.1,
        full_jacobian,
    );
}
