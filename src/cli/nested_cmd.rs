//! `chad hessian`, `chad hvp`, `chad jacobian`: second derivatives and full Jacobians
//! (LANGUAGE.md, "New commands and flags"), over [`crate::ad::nested`].

use crate::ad::nested::{self, Backend, Mode};
use crate::error::Result;
use crate::source::term::Entry;
use crate::value::{Value, format_real};

/// `--mode` of `jacobian`.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum JacobianMode {
    /// One forward derivative per input component (columns).
    Forward,
    /// One reverse derivative per output component (rows).
    Reverse,
}

fn reals(xs: &[f64]) -> serde_json::Value {
    serde_json::Value::Array(xs.iter().map(|&x| Value::Real(x).to_json()).collect())
}

fn matrix(rows: &[Vec<f64>]) -> serde_json::Value {
    serde_json::Value::Array(rows.iter().map(|r| reals(r)).collect())
}

fn text_row(xs: &[f64]) -> String {
    let items: Vec<String> = xs.iter().map(|&x| format_real(x)).collect();
    format!("[{}]", items.join(", "))
}

fn text_matrix(rows: &[Vec<f64>]) -> String {
    let mut out = String::new();
    for r in rows {
        out.push_str(&format!("  {}\n", text_row(r)));
    }
    out
}

/// `chad hessian`.
pub fn hessian(
    entry: &Entry,
    wrt: &[bool],
    args: &[Value],
    backend: &dyn Backend,
    json: bool,
) -> Result<String> {
    let (value, gradient, h) = nested::hessian_with(entry, wrt, args, backend)?;
    if json {
        return Ok(format!(
            "{}\n",
            serde_json::json!({
                "value": Value::Real(value).to_json(),
                "gradient": reals(&gradient),
                "hessian": matrix(&h),
            })
        ));
    }
    Ok(format!(
        "value: {}\ngradient: {}\nhessian:\n{}",
        format_real(value),
        text_row(&gradient),
        text_matrix(&h)
    ))
}

/// `chad hvp`: `tangents` one per selected parameter.
pub fn hvp(
    entry: &Entry,
    wrt: &[bool],
    args: &[Value],
    tangents: &[Value],
    backend: &dyn Backend,
    json: bool,
) -> Result<String> {
    nested::runs_at(entry, args)?;
    let r = nested::Hvp::with_backend(entry, wrt, backend)?.hvp(args, tangents)?;
    if json {
        let opt = |vs: &[Option<Value>]| -> serde_json::Value {
            serde_json::Value::Array(
                vs.iter()
                    .map(|v| v.as_ref().map_or(serde_json::Value::Null, Value::to_json))
                    .collect(),
            )
        };
        return Ok(format!(
            "{}\n",
            serde_json::json!({
                "value": r.value.to_json(),
                "gradient": opt(&r.gradient),
                "hvp": opt(&r.hvp),
            })
        ));
    }
    let mut out = format!("value: {}\ngradient:\n", r.value);
    let sel = || {
        entry
            .params
            .iter()
            .zip(wrt)
            .filter(|(_, s)| **s)
            .map(|(p, _)| p)
    };
    for (p, g) in sel().zip(r.gradient.iter().flatten()) {
        out.push_str(&format!("  {} = {g}\n", p.name));
    }
    out.push_str("hvp:\n");
    for (p, h) in sel().zip(r.hvp.iter().flatten()) {
        out.push_str(&format!("  {} = {h}\n", p.name));
    }
    Ok(out)
}

/// `chad jacobian`.
pub fn jacobian(
    entry: &Entry,
    wrt: &[bool],
    args: &[Value],
    mode: Option<JacobianMode>,
    backend: &dyn Backend,
    json: bool,
) -> Result<String> {
    let mode = mode.map(|m| match m {
        JacobianMode::Forward => Mode::Forward,
        JacobianMode::Reverse => Mode::Reverse,
    });
    let (value, j) = nested::jacobian_with(entry, wrt, args, mode, backend)?;
    if json {
        return Ok(format!(
            "{}\n",
            serde_json::json!({ "value": value.to_json(), "jacobian": matrix(&j) })
        ));
    }
    Ok(format!("value: {value}\njacobian:\n{}", text_matrix(&j)))
}
