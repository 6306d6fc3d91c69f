//! Central finite differences over the direct evaluator: a derivative oracle that knows no
//! derivative rules at all.
//!
//! [`jvp`] estimates the directional derivative of a definition `f` at `x` along `t` as
//! `(f(x + h·t) − f(x − h·t)) / 2h`, leafwise on the `Real` leaves of the (first-order) result;
//! discrete leaves get the tangent `()`. The error of the estimate is `O(h²)` (truncation) plus
//! about `ε·|f| / h` (rounding), so `h` around `1e-5` suits values of moderate size.
//!
//! The estimate is only meaningful where `f` is differentiable. When the evaluations at `x`,
//! `x + h·t` and `x − h·t` differ in their discrete structure (a different sum side, array
//! length, `Int` or `Bool` value in the result), or one of the perturbed evaluations fails,
//! [`jvp`] returns an [`ErrorKind::Runtime`] error saying that the function is not differentiable
//! there. Kinks and jumps that leave no trace in the result's structure (`abs`, `max`, an `if`
//! choosing between two reals) are not detected; compare estimates at two step sizes to catch
//! most of them (see `tests/oracles.rs`).
//!
//! The helpers build and take apart tangents for full-Jacobian tests: [`basis`] gives one
//! tangent tuple per `Real` leaf of the arguments, [`leaves`] flattens a value or tangent in a
//! fixed order, and [`zero_tangent`], [`tangent_with`] and [`add_scaled`] make and apply
//! tangents of a value's shape.

use crate::deep::deep;
use crate::error::{Error, ErrorKind, Result};
use crate::eval::eval_entry;
use crate::source::term::Entry;
use crate::types::Type;
use crate::value::Value;

/// The central-difference estimate of the derivative of `entry` at `args` along `tangents`
/// (one per argument, each of type `param_ty.tangent()` with the argument's shape), with step
/// `h`. The result is a tangent of the result: type `result_ty.tangent()`, the result's shape.
///
/// Errors: those of [`super::check_jvp_inputs`] (arguments, tangents, first-order types); an
/// [`ErrorKind::Argument`] error if `h` is not positive and finite; the evaluator's error if
/// `f(x)` fails; and an [`ErrorKind::Runtime`] error if `f` is not differentiable at `x` as far
/// as the three evaluations can tell (see the module documentation).
pub fn jvp(entry: &Entry, args: &[Value], tangents: &[Value], h: f64) -> Result<Value> {
    super::check_jvp_inputs(entry, args, tangents)?;
    if !(h > 0.0 && h.is_finite()) {
        return Err(Error::new(
            ErrorKind::Argument,
            format!("finite differences need a positive finite step, not {h}"),
        ));
    }
    let shifted = |s: f64| -> Vec<Value> {
        entry
            .params
            .iter()
            .zip(args)
            .zip(tangents)
            .map(|((p, x), t)| add_scaled(&p.ty, x, t, s))
            .collect()
    };
    let center = eval_entry(entry, args)?;
    let not_differentiable = |why: String| {
        Error::new(
            ErrorKind::Runtime,
            format!(
                "finite differences: `{}` is not differentiable at this point along this \
                 direction (with step {h}): {why}",
                entry.name
            ),
        )
    };
    let plus = eval_entry(entry, &shifted(h))
        .map_err(|e| not_differentiable(format!("at x + h·t: {}", e.message())))?;
    let minus = eval_entry(entry, &shifted(-h))
        .map_err(|e| not_differentiable(format!("at x − h·t: {}", e.message())))?;
    difference(&entry.body.ty, &plus, &minus, &center, h).map_err(not_differentiable)
}

/// `(plus − minus) / 2h` on Real leaves; discrete leaves of all three must agree.
fn difference(
    ty: &Type,
    plus: &Value,
    minus: &Value,
    center: &Value,
    h: f64,
) -> Result<Value, String> {
    deep(|| {
        let differ = || {
            Err(format!(
                "the results `{minus}`, `{center}`, `{plus}` at x − h·t, x, x + h·t differ in \
                 their discrete structure"
            ))
        };
        Ok(match (ty, plus, minus, center) {
            (Type::Real, Value::Real(p), Value::Real(m), Value::Real(_)) => {
                Value::Real((p - m) / (2.0 * h))
            }
            (Type::Int | Type::Bool | Type::Unit, _, _, _) => {
                if plus.same(center) == Some(true) && minus.same(center) == Some(true) {
                    Value::Unit
                } else {
                    return differ();
                }
            }
            (Type::Prod(t), Value::Pair(p), Value::Pair(m), Value::Pair(c)) => Value::pair(
                difference(&t.0, &p.0, &m.0, &c.0, h)?,
                difference(&t.1, &p.1, &m.1, &c.1, h)?,
            ),
            (Type::Sum(t), Value::Inl(p), Value::Inl(m), Value::Inl(c)) => {
                Value::inl(difference(&t.0, p, m, c, h)?)
            }
            (Type::Sum(t), Value::Inr(p), Value::Inr(m), Value::Inr(c)) => {
                Value::inr(difference(&t.1, p, m, c, h)?)
            }
            (Type::Sum(_), _, _, _) => return differ(),
            (Type::Array(e), _, _, _) => {
                let n = center.array_len();
                if plus.array_len() != n || minus.array_len() != n {
                    return differ();
                }
                let items = plus
                    .array_items()
                    .iter()
                    .zip(minus.array_items().iter())
                    .zip(center.array_items().iter())
                    .map(|((p, m), c)| difference(e, p, m, c, h))
                    .collect::<Result<Vec<_>, String>>()?;
                Value::array(&tangent_type(e), items)
            }
            _ => panic!("internal error: finite differences of {center} at type {ty}"),
        })
    })
}

fn tangent_type(ty: &Type) -> Type {
    ty.tangent()
        .unwrap_or_else(|| panic!("internal error: {ty} has no tangent type (not first-order)"))
}

/// A tangent of `v : ty` (first-order) whose Real leaves are successive results of `next`, in
/// the order of [`leaves`]. Panics if `v` does not have type `ty` or `ty` is not first-order.
pub fn tangent_with(ty: &Type, v: &Value, next: &mut dyn FnMut() -> f64) -> Value {
    deep(|| match (ty, v) {
        (Type::Real, Value::Real(_)) => Value::Real(next()),
        (Type::Int, Value::Int(_)) | (Type::Bool, Value::Bool(_)) | (Type::Unit, Value::Unit) => {
            Value::Unit
        }
        (Type::Prod(t), Value::Pair(p)) => {
            let a = tangent_with(&t.0, &p.0, next);
            Value::pair(a, tangent_with(&t.1, &p.1, next))
        }
        (Type::Sum(t), Value::Inl(x)) => Value::inl(tangent_with(&t.0, x, next)),
        (Type::Sum(t), Value::Inr(x)) => Value::inr(tangent_with(&t.1, x, next)),
        (Type::Array(e), Value::RealArray(_) | Value::Array(_)) => Value::array(
            &tangent_type(e),
            v.array_items()
                .iter()
                .map(|x| tangent_with(e, x, next))
                .collect(),
        ),
        _ => panic!("tangent_with: `{v}` is not a first-order value of type {ty}"),
    })
}

/// The zero tangent of `v : ty` (first-order): zero on every Real leaf, with `v`'s shape (same
/// sum side, same array lengths). Panics if `v` does not have type `ty`.
pub fn zero_tangent(ty: &Type, v: &Value) -> Value {
    tangent_with(ty, v, &mut || 0.0)
}

/// The Real leaves of a first-order value or tangent, in a fixed order: depth first, left to
/// right (pair components in order, array elements in order, a sum's payload); discrete leaves
/// contribute nothing. A value and its tangents list their leaves in the same order. Panics
/// on a function value.
pub fn leaves(v: &Value) -> Vec<f64> {
    fn go(v: &Value, out: &mut Vec<f64>) {
        deep(|| match v {
            Value::Real(x) => out.push(*x),
            Value::Int(_) | Value::Bool(_) | Value::Unit => {}
            Value::Pair(p) => {
                go(&p.0, out);
                go(&p.1, out);
            }
            Value::Inl(x) | Value::Inr(x) => go(x, out),
            Value::RealArray(xs) => out.extend(xs.iter()),
            Value::Array(xs) => xs.iter().for_each(|x| go(x, out)),
            Value::Closure(_) | Value::Lin(_) | Value::LinFun(_) => {
                panic!("leaves: `{v}` is not a first-order value")
            }
        })
    }
    let mut out = Vec::new();
    go(v, &mut out);
    out
}

/// One tangent tuple per Real leaf of the arguments (in argument order, then [`leaves`] order):
/// the unit vector of that leaf, zero on every other leaf of every argument. Applying a
/// derivative to each gives the columns of the Jacobian, whose rows are the [`leaves`] of the
/// result's tangent. `types[k]` is the (first-order) type of `args[k]`.
pub fn basis(types: &[Type], args: &[Value]) -> Vec<Vec<Value>> {
    let zeros: Vec<Value> = types
        .iter()
        .zip(args)
        .map(|(t, a)| zero_tangent(t, a))
        .collect();
    let mut out = Vec::new();
    for (k, (ty, a)) in types.iter().zip(args).enumerate() {
        for j in 0..leaves(a).len() {
            let mut i = 0;
            let unit = tangent_with(ty, a, &mut || {
                i += 1;
                if i - 1 == j { 1.0 } else { 0.0 }
            });
            let mut tuple = zeros.clone();
            tuple[k] = unit;
            out.push(tuple);
        }
    }
    out
}

/// `x + s·t` on the Real leaves of `x : ty` (first-order), for a tangent `t` of `x`'s shape;
/// discrete leaves are unchanged. Panics if `t` is not a tangent of `x` (see
/// [`super::check_tangent`]).
pub fn add_scaled(ty: &Type, x: &Value, t: &Value, s: f64) -> Value {
    deep(|| match (ty, x, t) {
        (Type::Real, Value::Real(a), Value::Real(da)) => Value::Real(a + s * da),
        (Type::Int | Type::Bool | Type::Unit, _, Value::Unit) => x.clone(),
        (Type::Prod(p), Value::Pair(a), Value::Pair(da)) => Value::pair(
            add_scaled(&p.0, &a.0, &da.0, s),
            add_scaled(&p.1, &a.1, &da.1, s),
        ),
        (Type::Sum(p), Value::Inl(a), Value::Inl(da)) => Value::inl(add_scaled(&p.0, a, da, s)),
        (Type::Sum(p), Value::Inr(a), Value::Inr(da)) => Value::inr(add_scaled(&p.1, a, da, s)),
        (Type::Array(e), _, _) if x.array_len() == t.array_len() => Value::array(
            e,
            x.array_items()
                .iter()
                .zip(t.array_items().iter())
                .map(|(a, da)| add_scaled(e, a, da, s))
                .collect(),
        ),
        _ => panic!("add_scaled: `{t}` is not a tangent of `{x}` : {ty}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oracle::{all_approx_eq, dual};
    use crate::prim::Registry;
    use crate::source::load;

    fn entry(src: &str) -> Entry {
        let p = load(src, &Registry::builtin()).unwrap_or_else(|e| panic!("{src}: {e:?}"));
        p.entry(p.defs.len() - 1)
    }

    #[test]
    fn central_differences_of_smooth_functions() {
        let e = entry("def f (x : Real) (y : Real) : (Real, Int) = (x * x * sin y, 2)");
        let args = [Value::Real(3.0), Value::Real(0.5)];
        let t = jvp(&e, &args, &[Value::Real(1.0), Value::Real(0.0)], 1e-5).unwrap();
        let (dx, dn) = t.expect_pair();
        assert!((dx.expect_real() - 6.0 * 0.5f64.sin()).abs() < 1e-8, "{t}");
        assert!(matches!(dn, Value::Unit));
        let t = jvp(&e, &args, &[Value::Real(0.0), Value::Real(1.0)], 1e-5).unwrap();
        assert!((t.expect_pair().0.expect_real() - 9.0 * 0.5f64.cos()).abs() < 1e-8);
    }

    #[test]
    fn discrete_changes_are_not_differentiable() {
        let not_diff = |src: &str, x: f64| {
            let e = entry(src);
            let err = jvp(&e, &[Value::Real(x)], &[Value::Real(1.0)], 1e-6).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Runtime, "{src}");
            assert!(
                err.message().contains("not differentiable"),
                "{src}: {err:?}"
            );
        };
        let fine = |src: &str, x: f64| {
            let e = entry(src);
            jvp(&e, &[Value::Real(x)], &[Value::Real(1.0)], 1e-6)
                .unwrap_or_else(|err| panic!("{src}: {err:?}"));
        };
        let int_jump = "def f (x : Real) : Int = if x > 0.0 then 1 else 0";
        not_diff(int_jump, 0.0);
        fine(int_jump, 1.0);
        let side = "def f (x : Real) : Real + Real = if x > 0.0 then inl x else inr x";
        not_diff(side, 0.0);
        fine(side, -1.0);
        let length = "def f (x : Real) : Array Real = build (floor x) (\\(i : Int) -> x)";
        not_diff(length, 2.0);
        fine(length, 2.5);
        let boolean = "def f (x : Real) : (Real, Bool) = (x, x >= 1.0)";
        not_diff(boolean, 1.0);
        // Only one perturbed point fails to evaluate.
        let error = "def f (x : Real) : Real = [1.0, 2.0] ! floor (x + 1.0)";
        not_diff(error, 1.0 - 1e-7);
        // A failure at the point itself is the evaluator's error.
        let e = entry(error);
        let err = jvp(&e, &[Value::Real(1.5)], &[Value::Real(1.0)], 1e-6).unwrap_err();
        assert!(err.message().starts_with("index 2 out of range"), "{err:?}");
    }

    #[test]
    fn bad_steps_and_tangents_are_errors() {
        let e = entry("def f (x : Real) : Real = x");
        for h in [0.0, -1e-6, f64::NAN, f64::INFINITY] {
            let err = jvp(&e, &[Value::Real(1.0)], &[Value::Real(1.0)], h).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Argument);
        }
        let err = jvp(&e, &[Value::Real(1.0)], &[Value::Unit], 1e-6).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Argument);
    }

    fn sample() -> (Vec<Type>, Vec<Value>) {
        let types = vec![
            Type::Real,
            Type::array(Type::prod(Type::Real, Type::Int)),
            Type::Int,
            Type::sum(Type::Unit, Type::prod(Type::Real, Type::Real)),
            Type::array(Type::Real),
        ];
        let args = vec![
            Value::Real(1.5),
            Value::array(
                &types[1].as_array().unwrap().clone(),
                vec![
                    Value::pair(Value::Real(2.0), Value::Int(1)),
                    Value::pair(Value::Real(3.0), Value::Int(2)),
                ],
            ),
            Value::Int(7),
            Value::inr(Value::pair(Value::Real(4.0), Value::Real(5.0))),
            Value::reals(vec![6.0]),
        ];
        (types, args)
    }

    #[test]
    fn leaves_zero_tangents_and_scaling() {
        let (types, args) = sample();
        let all: Vec<f64> = args.iter().flat_map(leaves).collect();
        assert_eq!(all, [1.5, 2.0, 3.0, 4.0, 5.0, 6.0]);
        for (t, a) in types.iter().zip(&args) {
            let z = zero_tangent(t, a);
            assert!(
                z.has_type(&t.tangent().unwrap()),
                "{z} : {}",
                t.tangent().unwrap()
            );
            assert!(crate::oracle::check_tangent(t, a, &z).is_ok());
            assert!(leaves(&z).iter().all(|&x| x == 0.0));
            assert_eq!(leaves(&z).len(), leaves(a).len());
            let mut k = 0.0;
            let dt = tangent_with(t, a, &mut || {
                k += 1.0;
                k
            });
            let moved = add_scaled(t, a, &dt, 0.5);
            assert!(moved.has_type(t));
            let want: Vec<f64> = leaves(a)
                .iter()
                .zip(leaves(&dt))
                .map(|(x, d)| x + 0.5 * d)
                .collect();
            assert_eq!(leaves(&moved), want);
        }
        assert_eq!(
            zero_tangent(&types[3], &args[3]).to_string(),
            "inr (0.0, 0.0)"
        );
        assert_eq!(
            add_scaled(&types[1], &args[1], &zero_tangent(&types[1], &args[1]), 3.0).to_string(),
            "[(2.0, 1), (3.0, 2)]"
        );
    }

    #[test]
    fn basis_has_one_unit_vector_per_real_leaf() {
        let (types, args) = sample();
        let b = basis(&types, &args);
        assert_eq!(b.len(), 6);
        for (j, tuple) in b.iter().enumerate() {
            assert_eq!(tuple.len(), args.len());
            let flat: Vec<f64> = tuple.iter().flat_map(leaves).collect();
            let want: Vec<f64> = (0..6).map(|i| if i == j { 1.0 } else { 0.0 }).collect();
            assert_eq!(flat, want);
            for ((t, a), dt) in types.iter().zip(&args).zip(tuple) {
                assert!(crate::oracle::check_tangent(t, a, dt).is_ok());
            }
        }
    }

    #[test]
    fn jacobians_by_finite_differences_and_dual_numbers_agree() {
        let e = entry(
            "def f (x : Real) (ps : Array (Real, Int)) (n : Int) (s : () + (Real, Real))
                   (ys : Array Real) : (Real, Array Real) =
               let g = \\(p : (Real, Int)) -> sin (fst p * x) * toReal (snd p + n) in
               let w = case s of inl u -> 1.0 | inr q -> fst q / snd q in
               (w * sum (map g ps), map (\\(y : Real) -> exp (y * w) + x) ys)",
        );
        let (types, args) = sample();
        for tangents in basis(&types, &args) {
            let (_, exact) = dual::jvp(&e, &args, &tangents).unwrap();
            let approx = jvp(&e, &args, &tangents, 1e-5).unwrap();
            assert!(
                all_approx_eq(&leaves(&exact), &leaves(&approx), 1e-7, 1e-7),
                "{exact} vs {approx}"
            );
        }
    }
}
