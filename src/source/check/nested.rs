//! `grad f x`, `jvp f x dx`, `vjp f x ct` inside programs (LANGUAGE.md, "Derivatives inside
//! programs"): checked here, elaborated by a [`Differentiate`] the caller supplies (AD lives
//! above the source language: [`crate::ad::nested::Elaborator`] differentiates and concretises
//! the derivative back into a core term, so the result is an ordinary term, itself
//! differentiable).
//!
//! The checker hands over the function as an [`Entry`] whose parameters are the first-order
//! variables `f` captures, then its argument: `E(c1, ..., ck, x) = f x`, with the top-level
//! definitions `f` uses bound by `let` in front. The derivative is taken with respect to `x`
//! only, but the captured variables are ordinary inputs of the derivative code (no
//! `stopGradient`), so an enclosing derivative sees how the inner result depends on them: no
//! perturbation confusion (`theory-notes/12-nested-ad.md`). A captured *local* function has no
//! term to differentiate through; that is a type error naming it.

use super::{Arg, Checker};
use crate::error::{Error, Result, Span};
use crate::source::syntax::{Expr, ExprKind};
use crate::source::term::{Entry, Pat, Term, TermKind, Var, VarId};
use crate::types::Type;
use std::collections::{BTreeMap, HashSet};

/// Which form.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Form {
    /// `grad f x : A`.
    Grad,
    /// `jvp f x dx : (B, B)`.
    Jvp,
    /// `vjp f x ct : (B, A)`.
    Vjp,
}

/// Differentiates a function given as an entry (captured variables, then the argument) and
/// returns the core term of the form's result, given the terms for the entry's parameters
/// (`args`) and the form's third argument (`dx` or `ct`), if any.
pub trait Differentiate {
    /// The elaborated form.
    fn elaborate(
        &self,
        form: Form,
        entry: &Entry,
        args: &[Term],
        extra: Option<Term>,
    ) -> Result<Term>;
}

/// Types whose tangents are themselves: `Real`, tuples and arrays of them.
fn self_tangent(t: &Type) -> bool {
    crate::deep::deep(|| match t {
        Type::Real => true,
        Type::Prod(p) => self_tangent(&p.0) && self_tangent(&p.1),
        Type::Array(a) => self_tangent(a),
        _ => false,
    })
}

/// The variables bound inside a term and those it uses.
fn bound_and_used(t: &Term) -> (HashSet<VarId>, Vec<Var>) {
    let mut bound = HashSet::new();
    let mut used = Vec::new();
    let mut seen = HashSet::new();
    let mut stack = vec![t];
    while let Some(t) = stack.pop() {
        match &t.kind {
            TermKind::Var(v) if seen.insert(v.id) => used.push(v.clone()),
            TermKind::Lam(x, _) => {
                bound.insert(x.id);
            }
            TermKind::Let(p, _, _) => bound.extend(p.vars().iter().map(|v| v.id)),
            TermKind::Case(_, p, _, q, _) => {
                bound.extend(p.vars().iter().map(|v| v.id));
                bound.extend(q.vars().iter().map(|v| v.id));
            }
            _ => {}
        }
        stack.extend(t.children());
    }
    (bound, used)
}

/// The free variables of a term, in order of first use.
fn free_vars(t: &Term) -> Vec<Var> {
    let (bound, used) = bound_and_used(t);
    used.into_iter()
        .filter(|v| !bound.contains(&v.id))
        .collect()
}

impl Checker<'_> {
    /// `grad f x`, `jvp f x dx`, `vjp f x ct`, with all their arguments.
    pub(super) fn nested(&mut self, name: &str, args: &[Arg], span: Span) -> Result<Term> {
        let form = match name {
            "grad" => Form::Grad,
            "jvp" => Form::Jvp,
            _ => Form::Vjp,
        };
        let unannotated = matches!(args[0], Arg::Src(Expr { kind: ExprKind::Lam(ps, _), .. }) if ps.iter().any(|p| p.ty.is_none()));
        let (f, x) = if unannotated {
            let x = self.infer_arg(args[1])?;
            (self.infer_fn_arg(args[0], std::slice::from_ref(&x.ty))?, x)
        } else {
            let f = self.infer_arg(args[0])?;
            let Some((a, _)) = f.ty.as_fun() else {
                return Err(Error::type_error(
                    args[0].span(),
                    format!("`{name}` differentiates a function, found `{}`", f.ty),
                ));
            };
            let a = a.clone();
            (f.clone(), self.check_arg(args[1], &a)?)
        };
        let (a, b) = f.ty.as_fun().expect("a function");
        let (a, b) = (a.clone(), b.clone());
        for (what, t) in [("argument", &a), ("result", &b)] {
            if !self_tangent(t) {
                return Err(Error::type_error(
                    args[0].span(),
                    format!(
                        "`{name}` differentiates functions between `Real`s, tuples and arrays \
                         of them, but this function's {what} has type `{t}`"
                    ),
                ));
            }
        }
        if form == Form::Grad && b != Type::Real {
            return Err(Error::type_error(
                args[0].span(),
                format!("`grad` needs a `Real`-valued function, found `{}`", f.ty),
            )
            .with_note("use `vjp f x ct` for other results"));
        }
        let extra = match form {
            Form::Grad => None,
            Form::Jvp => Some(self.check_arg(args[2], &a)?),
            Form::Vjp => Some(self.check_arg(args[2], &b)?),
        };
        let Some(nested) = self.nested else {
            return Err(Error::new(
                crate::error::ErrorKind::Unsupported,
                format!(
                    "`{name}` inside a program needs the differentiating loader \
                     (`chad::internals::ad::nested::load`)"
                ),
            )
            .with_span(span));
        };
        // The entry: captured first-order variables, then the argument; the top-level
        // definitions it uses bound in front.
        let mut params = Vec::new();
        let mut globals: BTreeMap<usize, (Var, Term)> = BTreeMap::new();
        let mut pending = free_vars(&f);
        while let Some(v) = pending.pop() {
            if let Some((index, value)) = self.values.get(&v.id) {
                if !globals.contains_key(index) {
                    globals.insert(*index, (v.clone(), value.clone()));
                    pending.extend(free_vars(value));
                }
            } else if v.ty.is_first_order() {
                if !params.iter().any(|p: &Var| p.id == v.id) {
                    params.push(v.clone());
                }
            } else {
                return Err(Error::type_error(
                    args[0].span(),
                    format!(
                        "the function `{name}` differentiates uses `{}`, a local function \
                         (of type `{}`), which cannot be differentiated through",
                        v.name, v.ty
                    ),
                )
                .with_note("define it at the top level, or inside the differentiated lambda"));
            }
        }
        params.reverse();
        let xv = Var::fresh("x", a.clone());
        let mut body = Term::new(
            TermKind::App(f.clone(), Term::new(TermKind::Var(xv.clone()), span)),
            span,
        );
        for (_, (g, value)) in globals.into_iter().rev() {
            body = Term::new(TermKind::Let(Pat::Var(g), value, body), span);
        }
        let mut args_t: Vec<Term> = params
            .iter()
            .map(|p| Term::new(TermKind::Var(p.clone()), span))
            .collect();
        args_t.push(x);
        params.push(xv);
        let entry = Entry {
            name: name.into(),
            params,
            body,
        };
        nested
            .elaborate(form, &entry, &args_t, extra)
            .map_err(|e| e.or_span(span))
    }
}
