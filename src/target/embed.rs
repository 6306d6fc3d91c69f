//! The embedding of source terms into the target language: the identity on every form, with
//! types embedded by [`Ty::from_source`]. Variables keep their identities, so an environment for
//! the source term is an environment for its embedding, and source positions are kept for
//! runtime errors.
//!
//! It is type-preserving (`Γ ⊢ t : τ` gives `Γ ⊢ embed(t) : τ`, checked by [`super::check`]) and
//! meaning-preserving (the target evaluator agrees with the source evaluator); both are property
//! tested on random programs.

use super::term::{Pat, Term, TermKind, Var};
use super::types::Ty;
use crate::deep::deep;
use crate::source::term::{self as src, Entry};

/// The embedding of a source variable (same identity and name).
pub fn var(x: &src::Var) -> Var {
    Var {
        id: x.id,
        name: x.name.clone(),
        ty: Ty::from_source(&x.ty),
    }
}

/// The embedding of a source pattern.
pub fn pat(p: &src::Pat) -> Pat {
    deep(|| match p {
        src::Pat::Var(x) => Pat::Var(var(x)),
        src::Pat::Wild(t) => Pat::Wild(Ty::from_source(t)),
        src::Pat::Pair(a, b) => Pat::Pair(Box::new(pat(a)), Box::new(pat(b))),
    })
}

/// The embedding of a source term.
pub fn term(t: &src::Term) -> Term {
    deep(|| {
        use TermKind as K;
        use src::TermKind as S;
        let kind = match &t.kind {
            S::Var(x) => K::Var(var(x)),
            S::Lit(l) => K::Lit(*l),
            S::Lam(x, b) => K::Lam(var(x), term(b)),
            S::App(f, a) => K::App(term(f), term(a)),
            S::Let(..) => return let_chain(t),
            S::Pair(a, b) => K::Pair(term(a), term(b)),
            S::Fst(e) => K::Fst(term(e)),
            S::Snd(e) => K::Snd(term(e)),
            S::If(c, a, b) => K::If(term(c), term(a), term(b)),
            S::Inl(e, r) => K::Inl(term(e), Ty::from_source(r)),
            S::Inr(l, e) => K::Inr(Ty::from_source(l), term(e)),
            S::Case(e, p, a, q, b) => K::Case(term(e), pat(p), term(a), pat(q), term(b)),
            S::Prim(op, args) => K::Prim(op.clone(), args.iter().map(term).collect()),
            S::Array(elem, items) => {
                K::Array(Ty::from_source(elem), items.iter().map(term).collect())
            }
            S::Map(f, xs) => K::Map(term(f), term(xs)),
            S::Map2(f, xs, ys) => K::Map2(term(f), term(xs), term(ys)),
            S::Build(n, f) => K::Build(term(n), term(f)),
            S::Index(xs, i) => K::Index(term(xs), term(i)),
            S::Length(xs) => K::Length(term(xs)),
            S::Replicate(n, x) => K::Replicate(term(n), term(x)),
            S::Loop(f, x, tape) => K::Loop(term(f), term(x), *tape),
            S::Fix(f) => K::Fix(term(f), t.span),
        };
        Term::new(kind, t.span)
    })
}

/// Let-chains are embedded in a loop (they can be very long).
fn let_chain(t: &src::Term) -> Term {
    let mut bindings = Vec::new();
    let mut cur = t;
    while let src::TermKind::Let(p, e, b) = &cur.kind {
        bindings.push((pat(p), term(e), cur.span));
        cur = b;
    }
    let mut out = term(cur);
    for (p, e, span) in bindings.into_iter().rev() {
        out = Term::new(TermKind::Let(p, e, out), span);
    }
    out
}

/// The embedding of an entry point: its parameters and its body.
pub fn entry(e: &Entry) -> (Vec<Var>, Term) {
    (e.params.iter().map(var).collect(), term(&e.body))
}
