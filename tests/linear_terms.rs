//! The checker's soundness claim, tested: every linear λ it accepts evaluates to a monoid
//! homomorphism.
//!
//! Random well-typed linear maps `λ̲v. l : L ⊸ L'` (every linear form, nested linear λs, linear
//! and Cartesian lets, copowers, powers, sums, arrays; `target::random`) must type-check at
//! exactly `L ⊸ L'`, print, and evaluate to maps that are additive, homogeneous and send zero
//! (sparse or built densely) to zero, on random arguments of every representation
//! (`target::testing`). Values are compared through `testing::observe`, which uses only the
//! linear API.

mod common;

use chad::Value;
use chad::internals::target::check::check;
use chad::internals::target::eval::{Env, eval};
use chad::internals::target::linear::{Lin, LinFun, LinearMap};
use chad::internals::target::random::{linear_map, small_lty};
use chad::internals::target::testing::{Probes, approx_eq, lin, observe, probes, zero_like};
use chad::internals::target::{LTy, Term, Ty};
use proptest::prelude::*;

const TOL: f64 = 1e-9;

/// Checks that `f : dom ⊸ cod` is additive and homogeneous at `x`, `y`, `c`, and sends `zero`
/// (a value equal to zero) to zero. Returns a description of the first failure.
fn homomorphism_at(
    f: &LinFun,
    cod: &LTy,
    (x, y, zero, c): (&Lin, &Lin, &Lin, f64),
    p: &Probes,
) -> Result<(), String> {
    let obs = |v: &Lin| observe(cod, v, p);
    let run = |v: &Lin| {
        f.apply(v)
            .map_err(|e| format!("runtime error: {}", e.message()))
    };
    let (fx, fy) = (run(x)?, run(y)?);
    let sum = run(&Lin::plus(x.clone(), y.clone()))?;
    if !approx_eq(&obs(&sum), &obs(&Lin::plus(fx.clone(), fy)), TOL) {
        return Err(format!("not additive at x = {x:?}, y = {y:?}"));
    }
    let scaled = run(&Lin::scale(c, x))?;
    if !approx_eq(&obs(&scaled), &obs(&Lin::scale(c, &fx)), TOL) {
        return Err(format!("not homogeneous at x = {x:?}, c = {c}"));
    }
    let z = obs(&run(zero)?);
    if !z.iter().all(|&v| v.abs() <= TOL) {
        return Err(format!("f({zero:?}) = {z:?} is not zero"));
    }
    if !run(&Lin::zero())?.is_zero() {
        return Err("f(0) is not the zero value".into());
    }
    Ok(())
}

/// A random linear map term with arguments for it.
#[derive(Debug)]
struct Case {
    dom: LTy,
    cod: LTy,
    term: Term,
    x: Lin,
    y: Lin,
    zero: Lin,
    c: f64,
    seed: u64,
}

fn cases(depth: u32) -> impl Strategy<Value = Case> {
    (small_lty(2), small_lty(2)).prop_flat_map(move |(dom, cod)| {
        (
            linear_map(dom.clone(), cod.clone(), depth),
            lin(&dom),
            lin(&dom),
            zero_like(&dom),
            -3.0..3.0f64,
            any::<u64>(),
        )
            .prop_map(move |(term, x, y, zero, c, seed)| Case {
                dom: dom.clone(),
                cod: cod.clone(),
                term,
                x,
                y,
                zero,
                c,
                seed,
            })
    })
}

#[test]
fn accepted_linear_terms_denote_homomorphisms() {
    let forms = std::cell::Cell::new(0usize);
    common::runner(common::cases(300))
        .run(&cases(6), |case| {
            let ty = check(&case.term, &[]).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(ty, Ty::lin_fun(case.dom.clone(), case.cod.clone()));
            let printed = case.term.to_string();
            prop_assert!(printed.contains('⊸'));
            forms.set(forms.get() + case.term.size());
            let Value::LinFun(f) =
                eval(&case.term, &Env::new()).map_err(|e| TestCaseError::fail(e.to_string()))?
            else {
                return Err(TestCaseError::fail(
                    "a linear λ did not evaluate to a linear map",
                ));
            };
            let args = (&case.x, &case.y, &case.zero, case.c);
            homomorphism_at(&f, &case.cod, args, &probes(case.seed))
                .map_err(|e| TestCaseError::fail(format!("{e}\nin {printed}")))
        })
        .unwrap_or_else(|e| panic!("{e}"));
    eprintln!("checked terms with {} nodes in total", forms.get());
}

/// The check above can fail: a map that is not linear is caught.
#[test]
fn the_homomorphism_check_catches_non_linear_maps() {
    struct Square;
    impl LinearMap for Square {
        fn apply(&self, x: &Lin) -> chad::Result<Lin> {
            Ok(Lin::real(x.to_real() * x.to_real()))
        }
    }
    struct Shift;
    impl LinearMap for Shift {
        fn apply(&self, x: &Lin) -> chad::Result<Lin> {
            Ok(Lin::real(x.to_real() + 1.0))
        }
    }
    let p = probes(1);
    let (x, y) = (Lin::real(2.0), Lin::real(3.0));
    let zero = Lin::real(0.0);
    let square = LinFun::new(Square);
    assert!(homomorphism_at(&square, &LTy::Real, (&x, &y, &zero, 2.0), &p).is_err());
    let shift = LinFun::new(Shift);
    let err = homomorphism_at(&shift, &LTy::Real, (&x, &y, &zero, 1.0), &p).unwrap_err();
    assert!(err.contains("not additive"), "{err}");
}
