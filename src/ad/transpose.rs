//! Reverse mode as the transpose of forward mode: a forward-mode image
//! `x : F1(A) ⊢ F(c) : F1(B) × (F2(A) ⊸ F2(B))` becomes, by transposing its derivative
//! ([`crate::target::transpose`]), `x : T(F1 A) ⊢ T(F(c)) : T(F1 B) × (F2(B)* ⊸ F2(A)*)`. For
//! first-order `A` and `B`, `T(F1 A) = R1 A` and `F2(A)* = R2 A`: the type of reverse CHAD's
//! image `R(c)`, and (the tests check) the same map.
//!
//! **Judgement.** `x : F1 A ⊢ e : F1 B × (F2 A ⊸ F2 B)  ⟹  x : R1 A ⊢ T(e) : R1 B × (R2 B ⊸ R2 A)`
//! (first-order `A`, `B`), with one rule: `T` of [`crate::target::transpose`] applied to the
//! whole term, where the derivatives in *tail position* (the second components of the pairs
//! the term returns, through `let`s and branches) are the maps of `x`'s tangent: their input
//! has the shape of `x`, which is what transposing `lsum` and `!` needs.
//!
//! The forward image should be simplified first (the AD functors' raw output keeps every
//! combinator's derivative as a separate linear λ whose input shape is not known; the
//! simplifier inlines them into the one in tail position). [`crate::linearize`] runs the whole
//! route: forward CHAD, simplification, this, simplification.
//!
//! [`both`] is the variant that keeps the forward derivative beside its transpose, sharing the
//! primal: `(y, λ̲d. l) ~> (y, (λ̲d. l, λ̲c. lᵀ))` at every tail pair (the linear maps of
//! [`crate::linearize::linearize`]).

use super::Mor;
use crate::error::Result;
use crate::target::term::{Pat, Term, TermKind, Var};
use crate::target::transpose::{Shape, Transposer};
use rustc_hash::FxHashMap;

/// The tail derivatives of `body`: the linear λs that are the second components of the pairs
/// it returns (directly, or through a variable let-bound to one on the way there).
fn tails(body: &Term) -> Vec<Term> {
    let mut out = Vec::new();
    let mut bound: FxHashMap<crate::target::term::VarId, Term> = FxHashMap::default();
    let mut stack = vec![body.clone()];
    while let Some(t) = stack.pop() {
        match &t.kind {
            TermKind::Let(p, e, b) => {
                if let (Pat::Var(v), TermKind::LinLam(..)) = (p, &e.kind) {
                    bound.insert(v.id, e.clone());
                }
                stack.push(b.clone());
            }
            TermKind::If(_, a, b) | TermKind::Case(_, _, a, _, b) => {
                stack.push(a.clone());
                stack.push(b.clone());
            }
            TermKind::Pair(_, d) => match &d.kind {
                TermKind::LinLam(..) => out.push(d.clone()),
                TermKind::Var(v) => out.extend(bound.get(&v.id).cloned()),
                _ => {}
            },
            _ => {}
        }
    }
    out
}

/// A transposer that knows the tail derivatives of `m` take `x`'s tangent.
fn transposer(m: &Mor) -> Transposer {
    let mut t = Transposer::new();
    for d in tails(&m.body) {
        t.witness(&d, Shape::of(Term::var(&m.x), m.x.ty.clone()));
    }
    t
}

/// `T(m)`: the forward-mode image `m` with its derivative transposed (see the module doc).
pub fn transpose_mor(m: &Mor) -> Result<Mor> {
    let mut t = transposer(m);
    let x = Var {
        ty: t.ty(&m.x.ty),
        ..m.x.clone()
    };
    let body = t.term(&m.body)?;
    Ok(Mor {
        dom: m.dom.clone(),
        cod: m.cod.clone(),
        x,
        body,
    })
}

/// The forward-mode image `m` with each tail derivative `λ̲d. l` replaced by the pair
/// `(λ̲d. l, λ̲c. lᵀ)`, both closing over the same primal computation: `x ⊢ F1 B × ((F2 A ⊸
/// F2 B) × (F2 B* ⊸ F2 A*))`. `None` if the primal computation itself holds linear maps (a
/// higher-order program whose closures stay closures): then only [`transpose_mor`] applies.
pub fn both(m: &Mor) -> Result<Option<Mor>> {
    let mut t = transposer(m);
    if t.ty(&m.x.ty) != m.x.ty {
        return Ok(None);
    }
    match pair_tails(&m.body, &mut t)? {
        Some(body) => Ok(Some(Mor { body, ..m.clone() })),
        None => Ok(None),
    }
}

/// `body` with its tail pairs `(y, d)` made `(y, (d, T(d)))`, if no binder on the way changes
/// type under `T` (so `T(d)` can use the same variables as `d`).
fn pair_tails(body: &Term, t: &mut Transposer) -> Result<Option<Term>> {
    crate::deep::deep(|| {
        let unchanged = |t: &mut Transposer, p: &Pat| t.ty(&p.ty()) == p.ty();
        let kind = match &body.kind {
            TermKind::Let(p, e, b) => {
                if !unchanged(t, p) {
                    return Ok(None);
                }
                let Some(b) = pair_tails(b, t)? else {
                    return Ok(None);
                };
                TermKind::Let(p.clone(), e.clone(), b)
            }
            TermKind::If(c, a, b) => {
                let (Some(a), Some(b)) = (pair_tails(a, t)?, pair_tails(b, t)?) else {
                    return Ok(None);
                };
                TermKind::If(c.clone(), a, b)
            }
            TermKind::Case(e, p, a, q, b) => {
                if !unchanged(t, p) || !unchanged(t, q) {
                    return Ok(None);
                }
                let (Some(a), Some(b)) = (pair_tails(a, t)?, pair_tails(b, t)?) else {
                    return Ok(None);
                };
                TermKind::Case(e.clone(), p.clone(), a, q.clone(), b)
            }
            TermKind::Pair(y, d) if matches!(d.kind, TermKind::LinLam(..)) => {
                let dt = t.term(d)?;
                TermKind::Pair(y.clone(), Term::pair(d.clone(), dt))
            }
            _ => return Ok(None),
        };
        Ok(Some(Term::new(kind, body.span)))
    })
}
