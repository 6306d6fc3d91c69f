//! `scatterAdd`: the source-level accumulation primitive that keeps concretised derivative code
//! as cheap as [`super`]'s sparse arrays (`theory-notes/12-nested-ad.md`, §Cost).
//!
//! ```text
//! scatterAdd : Int → Array Int → Array Real → Array Real
//! scatterAdd n is xs = r   where r has length n and r ! j = Σ { xs ! k | is ! k = j }
//! ```
//!
//! Entries whose index is outside `0 .. n` are dropped: exactly what the concrete one-hot
//! `build n (\j -> if j == i then x else 0)` of [`super::concrete::onehot`] does, so a sum of
//! one-hots is one `scatterAdd` of their entries, costing `O(n + k)` for `k` entries instead of
//! `O(n k)` for `k` dense one-hots. `is` and `xs` must have the same length (an error otherwise).
//!
//! It is linear in `xs` (and discrete in `n` and `is`), so its derivatives are
//!
//! ```text
//! forward:     D scatterAdd (n, is, xs; _, _, dxs) = lsum (lbuild (length is) (\k ->
//!                  if 0 <= is ! k < n then onehot n (is ! k) (dxs ! k) else 0))
//!              (= scatterAdd n is dxs: the primitive again, kept sparse in the engine)
//! transposed:  D scatterAdd^T (n, is, xs; v) = (0, 0, lbuild (length is) (\k -> v ! (is ! k)))
//!              (a gather; a linear index past the end or below 0 is zero)
//! ```
//!
//! The primitive is not one of the builtins of the source language (nothing in LANGUAGE.md
//! writes it): only the concretiser ([`crate::target::concretize`]) introduces it. It is
//! registered once ([`scatter_add`]), with the derivative above, and the registration
//! type-checks both rules like any primitive's.

use crate::error::Result;
use crate::prim::{Derivative, Primitive, op};
use crate::target::term::{LTerm, LTermKind, Lit, Pat, Term, TermKind, Var};
use crate::target::types::{LTy, Ty};
use crate::types::Type;
use crate::value::{Value, check_len};

/// The primitive's name.
pub const NAME: &str = "scatterAdd";

internal_primitive!(
    /// The `scatterAdd` primitive (the same shared handle every time on a thread).
    SCATTER_ADD,
    scatter_add
);

/// Evaluation: `scatterAdd n is xs` on the argument tuple `(n, (is, xs))`.
pub fn eval(arg: &Value) -> Result<Value> {
    let (n, rest) = arg.expect_pair();
    let (is, xs) = rest.expect_pair();
    let n = check_len(NAME, n.expect_int())?;
    let (is, xs) = (is.array_items(), xs.array_items());
    // The message of `value::check_same_len`, as the native code's check reports it.
    crate::value::check_same_len(NAME, is.len(), xs.len())?;
    let mut out = vec![0.0; n];
    for (i, x) in is.iter().zip(&xs) {
        let i = i.expect_int();
        if i >= 0 && (i as u64) < n as u64 {
            out[i as usize] += x.expect_real();
        }
    }
    Ok(Value::reals(out))
}

fn int(i: i64) -> Term {
    Term::lit(Lit::Int(i))
}

/// `0 <= j && j < n` as a target condition.
fn in_range(j: &Term, n: &Term) -> Term {
    let lo = Term::prim(&op("ige"), vec![j.clone(), int(0)]);
    let hi = Term::prim(&op("ilt"), vec![j.clone(), n.clone()]);
    Term::mk(TermKind::If(lo, hi, Term::lit(Lit::Bool(false))))
}

fn index(xs: &Term, k: &Var) -> Term {
    Term::mk(TermKind::Index(xs.clone(), Term::var(k)))
}

fn length(xs: &Term) -> Term {
    Term::mk(TermKind::Length(xs.clone()))
}

/// The forward rule: `lsum (lbuild (length is) (\k -> if 0 <= is ! k < n then onehot n (is !
/// k) (dxs ! k) else 0))`.
fn forward(x: &[Term], d: &[LTerm]) -> LTerm {
    let (n, is, dxs) = (&x[0], &x[1], &d[2]);
    let k = Var::fresh("k", Ty::Int);
    let j = Var::fresh("j", Ty::Int);
    let entry = LTerm::mk(LTermKind::OneHot(
        n.clone(),
        Term::var(&j),
        LTerm::mk(LTermKind::Index(dxs.clone(), Term::var(&k))),
    ));
    let guard = Term::prim(&op("decide"), vec![in_range(&Term::var(&j), n)]);
    let guarded = LTerm::mk(LTermKind::Case(
        guard,
        Box::new(Pat::Wild(Ty::Unit)),
        entry,
        Box::new(Pat::Wild(Ty::Unit)),
        LTerm::zero(LTy::array(LTy::Real)),
    ));
    let body = LTerm::let_(&j, index(is, &k), guarded);
    LTerm::mk(LTermKind::Sum(LTerm::mk(LTermKind::Build(
        length(is),
        k,
        body,
    ))))
}

/// The transposed rule: `((), (), lbuild (length is) (\k -> v ! (is ! k)))`, a gather.
fn transpose(x: &[Term], v: &LTerm) -> Vec<LTerm> {
    let is = &x[1];
    let k = Var::fresh("k", Ty::Int);
    let gathered = LTerm::mk(LTermKind::Index(v.clone(), index(is, &k)));
    vec![
        LTerm::zero(LTy::Unit),
        LTerm::zero(LTy::array(LTy::Unit)),
        LTerm::mk(LTermKind::Build(length(is), k, gathered)),
    ]
}

/// The primitive with its derivative, unregistered (tests register variants of it).
pub fn primitive() -> Primitive {
    Primitive::new(
        NAME,
        vec![Type::Int, Type::array(Type::Int), Type::array(Type::Real)],
        Type::array(Type::Real),
        crate::prim::Fixity::Internal,
        eval,
    )
    .with_derivative(Derivative::terms(forward, transpose))
}
