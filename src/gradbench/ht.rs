//! GradBench's `ht` eval (hand tracking): the Jacobian of the residuals by forward passes.
//!
//! The residuals depend on the 26 pose parameters theta and, in the "complicated" variant, on
//! each point's own barycentric coordinates (u0, u1). GradBench's layout (after ADBench's) has
//! one row per residual and the columns du0, du1 (each the derivative along all points' u0,
//! resp. u1, at once: point i's residuals depend on point i's coordinates only), then one per
//! theta component. So the Jacobian is 28 forward passes (26 without `us`) of the compiled
//! `htObjective`, one per column, each along a unit tangent; the model's arrays, constants for
//! differentiation, get zero tangents.

use crate::ad::Jvp;
use crate::error::{Error, ErrorKind, Result};
use crate::types::Type;
use crate::value::Value;

fn runtime(msg: String) -> Error {
    Error::new(ErrorKind::Runtime, format!("ht: {msg}"))
}

fn items(v: &Value) -> Result<Vec<Value>> {
    match v {
        Value::RealArray(_) | Value::Array(_) => Ok(v.array_items()),
        other => Err(runtime(format!("expected an array, found {other}"))),
    }
}

/// The zero tangent of a value of type `ty` (first-order: reals, discrete values, arrays).
fn zero_tangent(ty: &Type, v: &Value) -> Result<Value> {
    match ty {
        Type::Real => Ok(Value::Real(0.0)),
        Type::Int | Type::Bool | Type::Unit => Ok(Value::Unit),
        Type::Array(elem) => {
            let elem: &Type = elem;
            let tangent = elem
                .tangent()
                .ok_or_else(|| runtime(format!("`{ty}` has no tangent")))?;
            let zs = items(v)?
                .iter()
                .map(|x| zero_tangent(elem, x))
                .collect::<Result<Vec<_>>>()?;
            Ok(Value::array(&tangent, zs))
        }
        other => Err(runtime(format!("no zero tangent for `{other}`"))),
    }
}

/// The Jacobian, row by row (one row per residual), of `htObjective` at `args` (theta and us
/// first).
pub(super) fn jacobian(jvp: &Jvp, types: &[Type], args: &[Value]) -> Result<Vec<Vec<f64>>> {
    if args.len() != types.len() || args.len() < 2 {
        return Err(runtime("the arguments do not match the parameters".into()));
    }
    let mut tangents = types
        .iter()
        .zip(args)
        .map(|(t, v)| zero_tangent(t, v))
        .collect::<Result<Vec<_>>>()?;
    let theta_len = args[0].array_len();
    let npts = args[1].array_len();
    let pair = |a: f64, b: f64| Value::reals(vec![a, b]);
    let us_along = |a: f64, b: f64| {
        Value::array(
            &Type::array(Type::Real),
            (0..npts).map(|_| pair(a, b)).collect(),
        )
    };
    let mut columns: Vec<Vec<f64>> = Vec::new();
    let mut column = |tangents: &[Value]| -> Result<()> {
        let (_, dy) = jvp.jvp(args, tangents)?;
        let col = match dy {
            Value::RealArray(xs) => xs.as_ref().clone(),
            other => return Err(runtime(format!("expected reals, found {other}"))),
        };
        columns.push(col);
        Ok(())
    };
    if npts > 0 {
        for (a, b) in [(1.0, 0.0), (0.0, 1.0)] {
            tangents[1] = us_along(a, b);
            column(&tangents)?;
        }
        tangents[1] = us_along(0.0, 0.0);
    }
    for k in 0..theta_len {
        let mut e = vec![0.0; theta_len];
        e[k] = 1.0;
        tangents[0] = Value::reals(e);
        column(&tangents)?;
    }
    let rows = columns.first().map_or(0, Vec::len);
    Ok((0..rows)
        .map(|i| columns.iter().map(|c| c[i]).collect())
        .collect())
}
