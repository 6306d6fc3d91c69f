//! (Co)tangents of first-order values, converted between linear values ([`Lin`]) and source
//! values of the type [`Type::tangent`] (what the command line reads and prints).
//!
//! On first-order types forward tangents and reverse cotangents have the same type, so one
//! conversion serves both. The primal value supplies what a sparse linear value leaves out: the
//! side of a sum and the length of an array.

use crate::deep::deep;
use crate::error::{Error, ErrorKind, Result};
use crate::target::linear::Lin;
use crate::types::Type;
use crate::value::Value;

/// The linear value of the (co)tangent `t` of a value `x : ty`. Fails (as an argument error) if
/// `t` does not fit: wrong shape, a sum tangent on the other side, an array of another length.
pub fn to_tangent(ty: &Type, x: &Value, t: &Value) -> Result<Lin> {
    match ty.tangent() {
        Some(tt) if t.has_type(&tt) => convert(ty, x, t),
        Some(tt) => Err(Error::new(
            ErrorKind::Argument,
            format!("`{t}` is not a tangent: it must have type `{tt}`"),
        )),
        None => Err(Error::new(
            ErrorKind::Argument,
            format!("values of type `{ty}` have no tangents given as values"),
        )),
    }
}

/// [`to_tangent`] for a `t` of the right type.
fn convert(ty: &Type, x: &Value, t: &Value) -> Result<Lin> {
    let fail = |msg: String| Err(Error::new(ErrorKind::Argument, msg));
    deep(|| match (ty, t) {
        (Type::Real, Value::Real(d)) => Ok(Lin::real(*d)),
        (Type::Int | Type::Bool | Type::Unit, Value::Unit) => Ok(Lin::zero()),
        (Type::Prod(p), Value::Pair(q)) => {
            let (xa, xb) = x.expect_pair();
            Ok(Lin::pair(
                convert(&p.0, xa, &q.0)?,
                convert(&p.1, xb, &q.1)?,
            ))
        }
        (Type::Sum(p), Value::Inl(d)) => match x {
            Value::Inl(a) => Ok(Lin::left(convert(&p.0, a, d)?)),
            _ => fail("the tangent of an `inr` value must be an `inr`".into()),
        },
        (Type::Sum(p), Value::Inr(d)) => match x {
            Value::Inr(b) => Ok(Lin::right(convert(&p.1, b, d)?)),
            _ => fail("the tangent of an `inl` value must be an `inl`".into()),
        },
        (Type::Array(a), _) => {
            let (n, m) = (x.array_len(), t.array_len());
            if n != m {
                return fail(format!(
                    "the tangent of an array of length {n} must have length {n}, not {m}"
                ));
            }
            if let Value::RealArray(ts) = t {
                return Ok(Lin::reals(ts.to_vec()));
            }
            let xs = x.array_items();
            let ts = t.array_items();
            Ok(Lin::array(
                xs.iter()
                    .zip(&ts)
                    .map(|(x, t)| convert(a, x, t))
                    .collect::<Result<Vec<_>>>()?,
            ))
        }
        _ => panic!("internal error: tangent {t} checked against type {ty}"),
    })
}

/// The (co)tangent `l` of a value `x : ty` as a source value of type `ty.tangent()`: zeros
/// are expanded to the shape of `x`. `ty` must be first-order.
pub fn from_tangent(ty: &Type, x: &Value, l: &Lin) -> Value {
    deep(|| match ty {
        Type::Real => Value::Real(l.to_real()),
        Type::Int | Type::Bool | Type::Unit => Value::Unit,
        Type::Prod(p) => {
            let (xa, xb) = x.expect_pair();
            Value::pair(
                from_tangent(&p.0, xa, &l.fst()),
                from_tangent(&p.1, xb, &l.snd()),
            )
        }
        Type::Sum(p) => match x {
            Value::Inl(a) => Value::inl(from_tangent(&p.0, a, &l.from_left())),
            Value::Inr(b) => Value::inr(from_tangent(&p.1, b, &l.from_right())),
            other => panic!("internal error: a value of a sum type is {other}"),
        },
        Type::Array(a) => {
            let n = x.array_len();
            if matches!(***a, Type::Real) {
                return Value::reals((0..n).map(|i| l.index(i as i64).to_real()).collect());
            }
            let t = a.tangent().expect("first-order");
            let items = x
                .array_items()
                .iter()
                .enumerate()
                .map(|(i, xi)| from_tangent(a, xi, &l.index(i as i64)))
                .collect();
            Value::array(&t, items)
        }
        Type::Fun(_) => panic!("internal error: from_tangent of a function type"),
    })
}
