//! Conversions between [`Value`] and plain Rust data: `From` into values, `TryFrom` out of them
//! (a [`ErrorKind::Argument`] error naming what was expected and what was found, never a panic).
//!
//! | Rust | chad type |
//! | --- | --- |
//! | `f64` | `Real` |
//! | `i64` | `Int` |
//! | `bool` | `Bool` |
//! | `()` | `Unit` |
//! | `Vec<f64>` | `Array Real` |
//! | `Vec<Vec<f64>>` | `Array (Array Real)` |
//! | `(A, B)`, `(A, B, C)` | `(A, B)`, `(A, B, C)` (right-nested pairs) |
//!
//! Out of a value, `TryFrom<&Value>` and `TryFrom<Value>` are both implemented.
//!
//! ```
//! use chad::Value;
//!
//! let v = Value::from((1.0, vec![2.0, 3.0], true));
//! assert_eq!(v.to_string(), "(1.0, [2.0, 3.0], true)");
//! let (x, ys, b): (f64, Vec<f64>, bool) = v.try_into()?;
//! assert_eq!((x, ys, b), (1.0, vec![2.0, 3.0], true));
//! assert!(f64::try_from(&Value::from(3i64)).is_err());
//! # Ok::<(), chad::Error>(())
//! ```

use super::Value;
use crate::error::{Error, ErrorKind, Result};
use std::rc::Rc;

fn mismatch(expected: &str, found: &Value) -> Error {
    let mut shown = found.to_string();
    if shown.len() > 60 {
        let cut = (0..=60)
            .rev()
            .find(|&k| shown.is_char_boundary(k))
            .unwrap_or(0);
        shown.truncate(cut);
        shown.push_str("...");
    }
    Error::new(
        ErrorKind::Argument,
        format!("expected {expected}, found `{shown}`"),
    )
}

impl From<f64> for Value {
    fn from(x: f64) -> Value {
        Value::Real(x)
    }
}

impl From<i64> for Value {
    fn from(x: i64) -> Value {
        Value::Int(x)
    }
}

impl From<bool> for Value {
    fn from(b: bool) -> Value {
        Value::Bool(b)
    }
}

impl From<()> for Value {
    fn from((): ()) -> Value {
        Value::Unit
    }
}

impl From<Vec<f64>> for Value {
    fn from(xs: Vec<f64>) -> Value {
        Value::RealArray(Rc::new(xs))
    }
}

impl From<&[f64]> for Value {
    fn from(xs: &[f64]) -> Value {
        Value::RealArray(Rc::new(xs.to_vec()))
    }
}

impl From<Vec<Vec<f64>>> for Value {
    fn from(rows: Vec<Vec<f64>>) -> Value {
        Value::Array(Rc::new(rows.into_iter().map(Value::from).collect()))
    }
}

impl<A: Into<Value>, B: Into<Value>> From<(A, B)> for Value {
    fn from((a, b): (A, B)) -> Value {
        Value::pair(a.into(), b.into())
    }
}

impl<A: Into<Value>, B: Into<Value>, C: Into<Value>> From<(A, B, C)> for Value {
    fn from((a, b, c): (A, B, C)) -> Value {
        Value::pair(a.into(), Value::pair(b.into(), c.into()))
    }
}

impl TryFrom<&Value> for f64 {
    type Error = Error;
    fn try_from(v: &Value) -> Result<f64> {
        match v {
            Value::Real(x) => Ok(*x),
            other => Err(mismatch("a Real", other)),
        }
    }
}

impl TryFrom<&Value> for i64 {
    type Error = Error;
    fn try_from(v: &Value) -> Result<i64> {
        match v {
            Value::Int(x) => Ok(*x),
            other => Err(mismatch("an Int", other)),
        }
    }
}

impl TryFrom<&Value> for bool {
    type Error = Error;
    fn try_from(v: &Value) -> Result<bool> {
        match v {
            Value::Bool(b) => Ok(*b),
            other => Err(mismatch("a Bool", other)),
        }
    }
}

impl TryFrom<&Value> for () {
    type Error = Error;
    fn try_from(v: &Value) -> Result<()> {
        match v {
            Value::Unit => Ok(()),
            other => Err(mismatch("()", other)),
        }
    }
}

impl TryFrom<&Value> for Vec<f64> {
    type Error = Error;
    fn try_from(v: &Value) -> Result<Vec<f64>> {
        match v {
            Value::RealArray(xs) => Ok(xs.as_ref().clone()),
            // An empty array of another element type is not an `Array Real`; an array of
            // reals is always stored unboxed.
            other => Err(mismatch("an Array Real", other)),
        }
    }
}

impl TryFrom<&Value> for Vec<Vec<f64>> {
    type Error = Error;
    fn try_from(v: &Value) -> Result<Vec<Vec<f64>>> {
        match v {
            Value::Array(rows) => rows.iter().map(Vec::<f64>::try_from).collect(),
            other => Err(mismatch("an Array (Array Real)", other)),
        }
    }
}

fn pair(v: &Value) -> Result<(&Value, &Value)> {
    match v {
        Value::Pair(p) => Ok((&p.0, &p.1)),
        other => Err(mismatch("a pair", other)),
    }
}

impl<'a, A, B> TryFrom<&'a Value> for (A, B)
where
    A: TryFrom<&'a Value, Error = Error>,
    B: TryFrom<&'a Value, Error = Error>,
{
    type Error = Error;
    fn try_from(v: &'a Value) -> Result<(A, B)> {
        let (a, b) = pair(v)?;
        Ok((A::try_from(a)?, B::try_from(b)?))
    }
}

impl<'a, A, B, C> TryFrom<&'a Value> for (A, B, C)
where
    A: TryFrom<&'a Value, Error = Error>,
    B: TryFrom<&'a Value, Error = Error>,
    C: TryFrom<&'a Value, Error = Error>,
{
    type Error = Error;
    fn try_from(v: &'a Value) -> Result<(A, B, C)> {
        let (a, bc) = pair(v)?;
        let (b, c) = pair(bc)?;
        Ok((A::try_from(a)?, B::try_from(b)?, C::try_from(c)?))
    }
}

/// `TryFrom<Value>` for the types with `TryFrom<&Value>`.
macro_rules! by_value {
    ($($t:ty),*) => {$(
        impl TryFrom<Value> for $t {
            type Error = Error;
            fn try_from(v: Value) -> Result<$t> {
                <$t>::try_from(&v)
            }
        }
    )*};
}

by_value!(f64, i64, bool, (), Vec<f64>, Vec<Vec<f64>>);

impl<A, B> TryFrom<Value> for (A, B)
where
    A: for<'a> TryFrom<&'a Value, Error = Error>,
    B: for<'a> TryFrom<&'a Value, Error = Error>,
{
    type Error = Error;
    fn try_from(v: Value) -> Result<(A, B)> {
        let (a, b) = pair(&v)?;
        Ok((A::try_from(a)?, B::try_from(b)?))
    }
}

impl<A, B, C> TryFrom<Value> for (A, B, C)
where
    A: for<'a> TryFrom<&'a Value, Error = Error>,
    B: for<'a> TryFrom<&'a Value, Error = Error>,
    C: for<'a> TryFrom<&'a Value, Error = Error>,
{
    type Error = Error;
    fn try_from(v: Value) -> Result<(A, B, C)> {
        let (a, bc) = pair(&v)?;
        let (b, c) = pair(bc)?;
        Ok((A::try_from(a)?, B::try_from(b)?, C::try_from(c)?))
    }
}
