//! Independent derivative oracles: routes to a program's derivative that share nothing with
//! CHAD, for testing forward and reverse CHAD against.
//!
//! Both oracles work directly on typed source terms ([`crate::source::term`]) and run-time
//! [`Value`]s; neither compiles to combinators or builds target-language code, so a bug in the
//! compiler, the AD functors, the linear API or the simplifier cannot hide in them.
//!
//! * [`dual`]: a forward-mode **dual-number evaluator** of the whole source language. Every
//!   `Real` carries a (primal, tangent) pair; closures capture dual environments, so higher-order
//!   programs are differentiated exactly like first-order ones. Its derivative table for the
//!   builtin primitives is written out by hand in that module. It gives the exact (up to
//!   rounding) directional derivative `J(x)·t`, so forward CHAD must agree with it to rounding
//!   error, and reverse CHAD through the dot-product identity `<vjp(x; v), t> = <v, J(x)·t>`.
//! * [`fd`]: **central finite differences** over the direct evaluator
//!   ([`crate::eval::eval_entry`]): `(f(x + h·t) − f(x − h·t)) / 2h`, leafwise. It knows no
//!   derivative rule at all, so it checks the dual-number table (and everything else) at the
//!   cost of truncation and rounding error and of failing near kinks and jumps, which it reports
//!   as errors when it can see them. Also helpers for full Jacobians: [`fd::basis`],
//!   [`fd::zero_tangent`], [`fd::leaves`], [`fd::add_scaled`], [`fd::tangent_with`].
//! * [`tagged`] and [`tagged_eval`]: for derivatives *inside* programs (`grad`, `jvp`, `vjp`
//!   nested in one another), Siskind & Pearlmutter's nested dual numbers with a fresh
//!   perturbation tag per derivative instance, and an evaluator of source programs over them
//!   whose forms the checker records ([`tagged_eval::Recorder`]) instead of differentiating.
//!
//! Both take a definition ([`Entry`]) with first-order parameters and result, its arguments,
//! and one tangent per argument. The tangent of a value of first-order type `A` is a value of
//! type `A.tangent()` ([`Type::tangent`]) with the value's shape: `Real` leaves become reals,
//! discrete leaves (`Int`, `Bool`, `Unit`) become `()`, a sum's tangent is on the same side as
//! the value, and an array's tangent has the same length. [`check_tangent`] enforces this.
//!
//! ## Conventions
//!
//! Where a primitive is not differentiable, the dual-number oracle takes the one-sided
//! derivative that LANGUAGE.md prescribes (the full table is in [`dual`]): `max`/`min` return
//! their first argument on ties and the derivative follows the same branch; `abs` has
//! derivative `+1` at `0`; `pow x y` contributes `y·x^(y−1)·dx` (zero when `y = 0`) and
//! `x^y·ln x·dy` only for `x > 0`. A zero input tangent contributes exactly zero even where the
//! partial derivative is infinite or NaN ("strong zero": `sqrt 0` along a direction that does
//! not move its argument has tangent 0, not NaN). Discrete values carry no tangent, so comparisons,
//! `if`, `case` and `floor` have derivative zero and follow the primal's branch.
//!
//! Finite differences make no such choice: at a kink they give the average of the one-sided
//! slopes, and at a jump something huge. Comparing the two oracles therefore needs tolerance
//! and care near such points; `tests/oracles.rs` shows how.

pub mod dual;
pub mod fd;
pub mod tagged;
pub mod tagged_eval;

use crate::error::{Error, ErrorKind, Result};
use crate::eval::check_args;
use crate::source::term::Entry;
use crate::types::Type;
use crate::value::Value;

/// Checks that `t` is a tangent of the value `v` of first-order type `ty`: of type
/// `ty.tangent()` and of `v`'s shape (same sum side, same array lengths). The error
/// ([`ErrorKind::Argument`]) says where they differ.
pub fn check_tangent(ty: &Type, v: &Value, t: &Value) -> Result<()> {
    match tangent_mismatch(ty, v, t) {
        None => Ok(()),
        Some(why) => Err(Error::new(
            ErrorKind::Argument,
            format!("`{t}` is not a tangent of `{v}` : {ty}: {why}"),
        )),
    }
}

fn tangent_mismatch(ty: &Type, v: &Value, t: &Value) -> Option<String> {
    crate::deep::deep(|| match (ty, v, t) {
        (Type::Real, Value::Real(_), Value::Real(_)) => None,
        (Type::Real, _, _) => Some(format!("expected a Real tangent, found `{t}`")),
        (Type::Int | Type::Bool | Type::Unit, _, Value::Unit) => None,
        (Type::Int | Type::Bool | Type::Unit, _, _) => Some(format!(
            "the tangent of a value of type {ty} is `()`, found `{t}`"
        )),
        (Type::Prod(p), Value::Pair(a), Value::Pair(b)) => {
            tangent_mismatch(&p.0, &a.0, &b.0).or_else(|| tangent_mismatch(&p.1, &a.1, &b.1))
        }
        (Type::Sum(p), Value::Inl(a), Value::Inl(b)) => tangent_mismatch(&p.0, a, b),
        (Type::Sum(p), Value::Inr(a), Value::Inr(b)) => tangent_mismatch(&p.1, a, b),
        (Type::Sum(_), Value::Inl(_), _) => Some(format!("expected an `inl` tangent, found `{t}`")),
        (Type::Sum(_), Value::Inr(_), _) => Some(format!("expected an `inr` tangent, found `{t}`")),
        (Type::Array(e), Value::RealArray(_) | Value::Array(_), _) => {
            if !matches!(t, Value::RealArray(_) | Value::Array(_)) {
                return Some(format!("expected an array tangent, found `{t}`"));
            }
            let (n, m) = (v.array_len(), t.array_len());
            if n != m {
                return Some(format!(
                    "an array of length {n} needs a tangent of length {n}, not {m}"
                ));
            }
            v.array_items()
                .iter()
                .zip(t.array_items().iter())
                .find_map(|(x, dx)| tangent_mismatch(e, x, dx))
        }
        (Type::Fun(_), _, _) => Some(format!("values of function type {ty} have no tangent")),
        _ => Some(format!("`{v}` does not have type {ty}")),
    })
}

/// Checks the inputs of a `jvp`: the arguments fit the parameters ([`check_args`]), the
/// parameters and the result are first-order ([`ErrorKind::Unsupported`] otherwise), and there
/// is one tangent per argument, each fitting its argument ([`check_tangent`]).
pub fn check_jvp_inputs(entry: &Entry, args: &[Value], tangents: &[Value]) -> Result<()> {
    check_args(entry, args)?;
    for p in &entry.params {
        if !p.ty.is_first_order() {
            return Err(Error::new(
                ErrorKind::Unsupported,
                format!(
                    "`{}`: parameter `{}` has the higher-order type {}; derivatives are taken with \
                     respect to first-order parameters only",
                    entry.name, p.name, p.ty
                ),
            ));
        }
    }
    if !entry.body.ty.is_first_order() {
        return Err(Error::new(
            ErrorKind::Unsupported,
            format!(
                "`{}` returns the higher-order type {}; derivatives of first-order results only",
                entry.name, entry.body.ty
            ),
        ));
    }
    if tangents.len() != args.len() {
        return Err(Error::new(
            ErrorKind::Argument,
            format!(
                "`{}` takes {} argument{}, so it needs as many tangents, but {} {} given",
                entry.name,
                args.len(),
                if args.len() == 1 { "" } else { "s" },
                tangents.len(),
                if tangents.len() == 1 { "was" } else { "were" }
            ),
        ));
    }
    for (k, ((p, a), t)) in entry.params.iter().zip(args).zip(tangents).enumerate() {
        check_tangent(&p.ty, a, t)
            .map_err(|e| e.prefixed(&format!("tangent {} (of `{}`): ", k + 1, p.name)))?;
    }
    Ok(())
}

/// `a ≈ b`: `|a − b| ≤ abs + rel · max(|a|, |b|)`. Equal values (infinities included) and two
/// NaNs are approximately equal; a NaN and a number are not.
pub fn approx_eq(a: f64, b: f64, rel: f64, abs: f64) -> bool {
    a == b || (a.is_nan() && b.is_nan()) || (a - b).abs() <= abs + rel * a.abs().max(b.abs())
}

/// [`approx_eq`] on every pair of corresponding elements; slices of different lengths are not
/// approximately equal.
pub fn all_approx_eq(a: &[f64], b: &[f64], rel: f64, abs: f64) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(&x, &y)| approx_eq(x, y, rel, abs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tangents_must_have_the_value_shape() {
        let ty = Type::tuple(&[
            Type::Real,
            Type::Int,
            Type::sum(Type::Real, Type::Unit),
            Type::array(Type::Real),
        ]);
        let v = Value::tuple(vec![
            Value::Real(1.0),
            Value::Int(2),
            Value::inl(Value::Real(3.0)),
            Value::reals(vec![1.0, 2.0]),
        ]);
        let good = Value::tuple(vec![
            Value::Real(0.5),
            Value::Unit,
            Value::inl(Value::Real(1.0)),
            Value::reals(vec![0.0, 1.0]),
        ]);
        assert!(check_tangent(&ty, &v, &good).is_ok());
        let wrong_side = Value::tuple(vec![
            Value::Real(0.5),
            Value::Unit,
            Value::inr(Value::Unit),
            Value::reals(vec![0.0, 1.0]),
        ]);
        let e = check_tangent(&ty, &v, &wrong_side).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Argument);
        assert!(e.message().contains("expected an `inl` tangent"), "{e:?}");
        let short = Value::tuple(vec![
            Value::Real(0.5),
            Value::Unit,
            Value::inl(Value::Real(1.0)),
            Value::reals(vec![0.0]),
        ]);
        let e = check_tangent(&ty, &v, &short).unwrap_err();
        assert!(e.message().contains("length 2"), "{e:?}");
        let int_tangent = Value::tuple(vec![
            Value::Real(0.5),
            Value::Int(1),
            Value::inl(Value::Real(1.0)),
            Value::reals(vec![0.0, 1.0]),
        ]);
        assert!(check_tangent(&ty, &v, &int_tangent).is_err());
    }

    #[test]
    fn approx_eq_has_relative_and_absolute_parts() {
        assert!(approx_eq(1.0, 1.0 + 1e-9, 1e-8, 0.0));
        assert!(!approx_eq(1.0, 1.0 + 1e-7, 1e-8, 0.0));
        assert!(approx_eq(0.0, 1e-9, 0.0, 1e-8));
        assert!(approx_eq(f64::NAN, f64::NAN, 0.0, 0.0));
        assert!(!approx_eq(f64::NAN, 1.0, 1.0, 1.0));
        assert!(approx_eq(f64::INFINITY, f64::INFINITY, 0.0, 0.0));
        assert!(!all_approx_eq(&[1.0], &[1.0, 2.0], 1.0, 1.0));
    }
}
