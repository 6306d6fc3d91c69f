//! Differentiating with respect to some parameters only (`--wrt`, LANGUAGE.md): the others are
//! constants in the derivative code, so their cotangents are never computed and their tangents
//! never looked at.
//!
//! [`with_respect_to`] rebinds every unselected parameter `p` as `let p = stopGradient p0 in
//! body`, where `stopGradient` is the identity with a zero derivative
//! ([`Derivative::Zero`]): forward mode sends `p0`'s tangent to nothing, and in reverse mode
//! the cotangent flowing into `p` meets `\v ⊸ 0`, so the simplifier removes the code that
//! would have accumulated it (for a logistic regression's data matrix, all of the gradient's
//! work but a dot product per row). Every engine (reverse and forward CHAD, the dual-numbers
//! reverse engine) handles it as any primitive with a zero derivative.

use crate::error::{Error, ErrorKind, Result};
use crate::prim::{Derivative, Primitive};
use crate::source::term::{Entry, Pat, Term, TermKind, Var};
use crate::types::Type;
use crate::value::Value;
use std::rc::Rc;

/// The name `stopGradient` primitives print with.
pub const STOP_GRADIENT: &str = "stopGradient";

/// The identity on `ty` with a zero derivative.
pub fn stop_gradient(ty: &Type) -> crate::prim::Prim {
    Rc::new(
        Primitive::function(STOP_GRADIENT, vec![ty.clone()], ty.clone(), |x: &Value| {
            Ok(x.clone())
        })
        .with_derivative(Derivative::Zero),
    )
}

/// One flag per parameter of `entry`: whether `names` selects it. An unknown or repeated name
/// is an error ([`ErrorKind::Argument`]), and so is an empty selection.
pub fn select<S: AsRef<str>>(entry: &Entry, names: &[S]) -> Result<Vec<bool>> {
    let mut sel = vec![false; entry.params.len()];
    if names.is_empty() {
        return Err(Error::new(
            ErrorKind::Argument,
            "--wrt: no parameter selected",
        ));
    }
    for n in names {
        let n = n.as_ref().trim();
        let Some(k) = entry.params.iter().position(|p| &*p.name == n) else {
            let all: Vec<&str> = entry.params.iter().map(|p| &*p.name).collect();
            return Err(Error::new(
                ErrorKind::Argument,
                format!(
                    "--wrt: `{}` has no parameter `{n}` (its parameters: {})",
                    entry.name,
                    if all.is_empty() {
                        "none".to_string()
                    } else {
                        all.join(", ")
                    }
                ),
            ));
        };
        if sel[k] {
            return Err(Error::new(
                ErrorKind::Argument,
                format!("--wrt: `{n}` is selected twice"),
            ));
        }
        sel[k] = true;
    }
    Ok(sel)
}

/// `entry` with the parameters not selected by `wrt` (one flag per parameter) made constants
/// for differentiation: the same function, whose derivatives with respect to those parameters
/// are zero and cost nothing. Parameters without a `Real` in their type need nothing.
pub fn with_respect_to(entry: &Entry, wrt: &[bool]) -> Entry {
    assert_eq!(wrt.len(), entry.params.len(), "one flag per parameter");
    let mut params = Vec::with_capacity(entry.params.len());
    let mut body = entry.body.clone();
    let span = entry.body.span;
    for (p, &selected) in entry.params.iter().zip(wrt).rev() {
        if selected || p.ty.tangent().is_none_or(|t| t == Type::Unit) {
            params.push(p.clone());
            continue;
        }
        let outer = Var::fresh(p.name.clone(), p.ty.clone());
        let arg = Term::new(TermKind::Var(outer.clone()), span);
        let rhs = Term::new(TermKind::Prim(stop_gradient(&p.ty), vec![arg]), span);
        body = Term::new(TermKind::Let(Pat::Var(p.clone()), rhs, body), span);
        params.push(outer);
    }
    params.reverse();
    Entry {
        name: entry.name.clone(),
        params,
        body,
    }
}
