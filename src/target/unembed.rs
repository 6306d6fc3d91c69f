//! The inverse of [`super::embed`]: a target term of the Cartesian fragment read back as a
//! source core term.
//!
//! The source language and the Cartesian fragment of the target language have the same forms
//! (the embedding is the identity on every form), so a target term that uses no target-only
//! form (no linear λ `λ̲v. l`, linear application, native derivative kernel, and no variable or
//! annotation of a linear type `L ⊸ L'` or `Lin L`) *is* a source term. Unembedding rebuilds it
//! with the source constructors, which type every node by the source's local typing rule
//! ([`src::Term::try_new`]); variables keep their identities and names, and types are mapped
//! by [`Ty::to_source`]. So `unembed(embed(t))` is `t` (alpha-equal, in fact with the same
//! variables), and `embed(unembed(t))` is `t` whenever the unembedding exists.
//!
//! It never panics: a target-only form, a type with no source counterpart or an ill-typed node
//! (which a target term that passed [`super::check`] does not have) is an [`Err`] naming it.
//! Scoping is not checked here (the caller checks the target term with [`super::check`]).
//!
//! ```
//! use chad::internals::target::{embed, unembed};
//!
//! let program = chad::internals::source::load(
//!     "def f (x : Real) : Real = let g = \\(y : Real) -> x * y in g 2.0",
//!     &chad::internals::prim::Registry::builtin(),
//! )?;
//! let entry = program.entry(0);
//! let (_, body) = embed::entry(&entry);
//! let back = unembed::term(&body).expect("a Cartesian term");
//! assert!(chad::internals::source::term::alpha_eq(&back, &entry.body));
//!
//! // A linear λ is target-only.
//! use chad::internals::target::term::{LTerm, Term, Var};
//! use chad::internals::target::types::LTy;
//! let v = Var::linear("v", LTy::Real);
//! assert!(unembed::term(&Term::lin_lam(&v, LTerm::var(&v))).is_err());
//! # Ok::<(), chad::Error>(())
//! ```

use super::term::{Pat, Term, TermKind, Var};
use super::types::Ty;
use crate::deep::deep;
use crate::error::Span;
use crate::source::term::{self as src, Entry};
use crate::types::Type;

/// Why a target term is not the embedding of a source term.
pub type Error = String;

/// The source type a target type embeds, or why there is none.
fn ty(t: &Ty) -> Result<Type, Error> {
    t.to_source()
        .ok_or_else(|| format!("the type `{t}` has no source counterpart"))
}

/// The source variable a target variable embeds (same identity and name).
pub fn var(x: &Var) -> Result<src::Var, Error> {
    Ok(src::Var {
        id: x.id,
        name: x.name.clone(),
        ty: ty(&x.ty).map_err(|e| format!("variable `{}`: {e}", x.name))?,
    })
}

/// The source pattern a target pattern embeds.
pub fn pat(p: &Pat) -> Result<src::Pat, Error> {
    deep(|| {
        Ok(match p {
            Pat::Var(x) => src::Pat::Var(var(x)?),
            Pat::Wild(t) => src::Pat::Wild(ty(t)?),
            Pat::Pair(a, b) => src::Pat::Pair(Box::new(pat(a)?), Box::new(pat(b)?)),
        })
    })
}

/// The source term a target term embeds, or why it is not an embedding.
pub fn term(t: &Term) -> Result<src::Term, Error> {
    deep(|| {
        use TermKind as K;
        use src::TermKind as S;
        let kind = match &t.kind {
            K::Var(x) => S::Var(var(x)?),
            K::Lit(l) => S::Lit(*l),
            K::Lam(x, b) => S::Lam(var(x)?, term(b)?),
            K::App(f, a) => S::App(term(f)?, term(a)?),
            K::Let(..) => return let_chain(t),
            K::Pair(a, b) => S::Pair(term(a)?, term(b)?),
            K::Fst(e) => S::Fst(term(e)?),
            K::Snd(e) => S::Snd(term(e)?),
            K::If(c, a, b) => S::If(term(c)?, term(a)?, term(b)?),
            K::Inl(e, r) => S::Inl(term(e)?, ty(r)?),
            K::Inr(l, e) => S::Inr(ty(l)?, term(e)?),
            K::Case(e, p, a, q, b) => S::Case(term(e)?, pat(p)?, term(a)?, pat(q)?, term(b)?),
            K::Prim(op, args) => {
                S::Prim(op.clone(), args.iter().map(term).collect::<Result<_, _>>()?)
            }
            K::Array(elem, items) => {
                S::Array(ty(elem)?, items.iter().map(term).collect::<Result<_, _>>()?)
            }
            K::Map(f, xs) => S::Map(term(f)?, term(xs)?),
            K::Map2(f, xs, ys) => S::Map2(term(f)?, term(xs)?, term(ys)?),
            K::Build(n, f) => S::Build(term(n)?, term(f)?),
            K::Index(xs, i) => S::Index(term(xs)?, term(i)?),
            K::Length(xs) => S::Length(term(xs)?),
            K::Replicate(n, x) => S::Replicate(term(n)?, term(x)?),
            K::Loop(f, x, tape) => S::Loop(term(f)?, term(x)?, *tape),
            K::Fix(f, _) => S::Fix(term(f)?),
            K::LinLam(..) => return Err("a linear λ is target-only".into()),
            K::LinApp(..) => return Err("a linear application is target-only".into()),
            K::LinPrim(k, _) => {
                return Err(format!(
                    "the derivative kernel `{}` is target-only",
                    k.name()
                ));
            }
        };
        node(kind, t.span)
    })
}

/// A source node, or why it is ill-typed.
fn node(kind: src::TermKind, span: Span) -> Result<src::Term, Error> {
    src::Term::try_new(kind, span).map_err(|e| format!("ill-typed: {e}"))
}

/// Let-chains are unembedded in a loop (they can be very long).
fn let_chain(t: &Term) -> Result<src::Term, Error> {
    let mut bindings = Vec::new();
    let mut cur = t;
    while let TermKind::Let(p, e, b) = &cur.kind {
        bindings.push((pat(p)?, term(e)?, cur.span));
        cur = b;
    }
    let mut out = term(cur)?;
    for (p, e, span) in bindings.into_iter().rev() {
        out = node(src::TermKind::Let(p, e, out), span)?;
    }
    Ok(out)
}

/// The entry point whose embedding ([`super::embed::entry`]) is `params` and `body`, named
/// `name`.
pub fn entry(name: &str, params: &[Var], body: &Term) -> Result<Entry, Error> {
    Ok(Entry {
        name: name.into(),
        params: params.iter().map(var).collect::<Result<_, _>>()?,
        body: term(body)?,
    })
}
