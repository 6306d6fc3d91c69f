//! Concretisation: any target term, linear parts included, as an ordinary source term (CHAD
//! paper §9.2-9.3), so that derivative code can be run by the source evaluator and
//! differentiated again (nested AD, Hessians: `theory-notes/12-nested-ad.md`).
//!
//! The linear types become source types by [`concrete::ty`] (a linear map a function, a copower
//! an array of pairs, `⊕` a pair, ...), and every linear form the source term
//! [`super::linear::concrete`] defines for its type. This module is the traversal: one
//! exhaustive match over the Cartesian forms and one over the linear forms, each computing the
//! (target) type of the term it concretises, which the type-directed operations (zero, plus,
//! scaling, indexing, sums) need. Its judgement:
//!
//! ```text
//! Γ ⊢ t : τ           gives   C(Γ) ⊢ C(t) : C(τ)
//! Γ; v : L ⊢ l : L'    gives   C(Γ), v : C(L) ⊢ C(l) : C(L')
//! ```
//!
//! (linear variables become ordinary variables, with the same identities). The rules, beside
//! their code below, are
//!
//! ```text
//! C(λ̲v. l) = \v -> C(l)           C(f • t) = C(f) C(t)           C(op t) = C(expand(op) t)
//! C(0 : L) = zero_L               C(l1 + l2 : L) = plus_L C(l1) C(l2)
//! C(!t ⊗ l) = [(C(t), C(l))]      C(copowfold t l) = Σ over the pairs (a, x) of C(t) a x
//! C(\b -> l) = \b -> C(l)         C(l @ t) = C(l) C(t)
//! C(linl l) = (C(l), 0)           C(fromLeft l) = fst C(l)
//! C(t * l : L) = scale_L C(t) C(l) C(l ! t) = C(l) ! C(t), zero past the end
//! C(loopTape f x) = loopTape C(f) C(x)   (the source's taped loop, what `scan` desugars to)
//! C(lchainScan fs d), C(lchainScanRev fs v) = taped loops / loops over fs (records kept)
//! C(lsum (lbuild m (\i -> body))) = let es = build m (\i -> E(body)) in A(body)
//!     (body a sum of one-hots of reals with pairs, lets, branches, scaling: each one-hot
//!      becomes one `scatterAdd` of its entries: `fused_sum` below)
//! ```
//!
//! and every other form is mapped to the source form of the same name. The result is checked
//! by the source's local typing rules as it is built ([`crate::source::term::Term::try_new`]).
//! A kernel without a definition as a term ([`LinPrim::expansion`]) has no concrete form: an
//! error naming it.

use super::linear::concrete::{self, mk};
use super::term::{LTerm, LTermKind, LinPrim, Pat, Term, TermKind, Var};
use super::types::{LTy, Ty};
use crate::deep::deep;
use crate::source::term::{self as src, TermKind as S};
use std::rc::Rc;

/// Why a target term has no concrete form.
pub type Error = String;
type R<T> = std::result::Result<T, Error>;

/// The concrete (source) variable of a target variable: same identity and name, type
/// [`concrete::cty`].
pub fn var(x: &Var) -> R<src::Var> {
    Ok(src::Var {
        id: x.id,
        name: x.name.clone(),
        ty: concrete::cty(&x.ty).map_err(|e| format!("variable `{}`: {e}", x.name))?,
    })
}

/// The concrete pattern of a target pattern.
pub fn pat(p: &Pat) -> R<src::Pat> {
    deep(|| {
        Ok(match p {
            Pat::Var(x) => src::Pat::Var(var(x)?),
            Pat::Wild(t) => src::Pat::Wild(concrete::cty(t)?),
            Pat::Pair(a, b) => src::Pat::Pair(Box::new(pat(a)?), Box::new(pat(b)?)),
        })
    })
}

/// The concrete form of a Cartesian target term.
pub fn term(t: &Term) -> R<src::Term> {
    Ok(cterm(t)?.0)
}

/// The concrete form of a linear target term.
pub fn linear(l: &LTerm) -> R<src::Term> {
    Ok(lterm(l)?.0)
}

fn ill(what: &str, ty: &dyn std::fmt::Display) -> Error {
    format!("concretisation: {what} of type `{ty}`")
}

/// A Cartesian term's concrete form and its target type.
fn cterm(t: &Term) -> R<(src::Term, Ty)> {
    deep(|| {
        use TermKind as K;
        let sub = |e: &Term| cterm(e);
        Ok(match &t.kind {
            K::Var(x) => (mk(S::Var(var(x)?))?, x.ty.clone()),
            K::Lit(l) => (mk(S::Lit(*l))?, Ty::from_source(&l.ty())),
            K::Lam(x, b) => {
                let (b, tb) = sub(b)?;
                (mk(S::Lam(var(x)?, b))?, Ty::fun(x.ty.clone(), tb))
            }
            K::App(f, a) => {
                let (f, tf) = sub(f)?;
                let (a, _) = sub(a)?;
                let cod = tf
                    .as_fun()
                    .ok_or_else(|| ill("application", &tf))?
                    .1
                    .clone();
                (mk(S::App(f, a))?, cod)
            }
            K::Let(..) => return let_chain(t),
            K::Pair(a, b) => {
                let ((a, ta), (b, tb)) = (sub(a)?, sub(b)?);
                (mk(S::Pair(a, b))?, Ty::prod(ta, tb))
            }
            K::Fst(e) => {
                let (e, te) = sub(e)?;
                let c = te.as_prod().ok_or_else(|| ill("fst", &te))?.0.clone();
                (mk(S::Fst(e))?, c)
            }
            K::Snd(e) => {
                let (e, te) = sub(e)?;
                let c = te.as_prod().ok_or_else(|| ill("snd", &te))?.1.clone();
                (mk(S::Snd(e))?, c)
            }
            K::If(c, a, b) => {
                let ((c, _), (a, ta), (b, _)) = (sub(c)?, sub(a)?, sub(b)?);
                (mk(S::If(c, a, b))?, ta)
            }
            K::Inl(e, r) => {
                let (e, te) = sub(e)?;
                (mk(S::Inl(e, concrete::cty(r)?))?, Ty::sum(te, r.clone()))
            }
            K::Inr(l, e) => {
                let (e, te) = sub(e)?;
                (mk(S::Inr(concrete::cty(l)?, e))?, Ty::sum(l.clone(), te))
            }
            K::Case(e, p, a, q, b) => {
                let ((e, _), (a, ta), (b, _)) = (sub(e)?, sub(a)?, sub(b)?);
                (mk(S::Case(e, pat(p)?, a, pat(q)?, b))?, ta)
            }
            K::Prim(op, args) => {
                let args = args.iter().map(|a| Ok(sub(a)?.0)).collect::<R<Vec<_>>>()?;
                let ty = Ty::from_source(op.result());
                (mk(S::Prim(op.clone(), args))?, ty)
            }
            K::Array(elem, items) => {
                let items = items.iter().map(|a| Ok(sub(a)?.0)).collect::<R<Vec<_>>>()?;
                (
                    mk(S::Array(concrete::cty(elem)?, items))?,
                    Ty::array(elem.clone()),
                )
            }
            K::Map(f, xs) => {
                let ((f, tf), (xs, _)) = (sub(f)?, sub(xs)?);
                let b = tf.as_fun().ok_or_else(|| ill("map", &tf))?.1.clone();
                (mk(S::Map(f, xs))?, Ty::array(b))
            }
            K::Map2(f, xs, ys) => {
                let ((f, tf), (xs, _), (ys, _)) = (sub(f)?, sub(xs)?, sub(ys)?);
                let c = tf
                    .as_fun()
                    .and_then(|(_, bc)| bc.as_fun())
                    .ok_or_else(|| ill("map2", &tf))?
                    .1
                    .clone();
                (mk(S::Map2(f, xs, ys))?, Ty::array(c))
            }
            K::Build(n, f) => {
                let ((n, _), (f, tf)) = (sub(n)?, sub(f)?);
                let a = tf.as_fun().ok_or_else(|| ill("build", &tf))?.1.clone();
                (mk(S::Build(n, f))?, Ty::array(a))
            }
            K::Index(xs, i) => {
                let ((xs, txs), (i, _)) = (sub(xs)?, sub(i)?);
                let a = txs.as_array().ok_or_else(|| ill("index", &txs))?.clone();
                (mk(S::Index(xs, i))?, a)
            }
            K::Length(xs) => (mk(S::Length(sub(xs)?.0))?, Ty::Int),
            K::Replicate(n, x) => {
                let ((n, _), (x, tx)) = (sub(n)?, sub(x)?);
                (mk(S::Replicate(n, x))?, Ty::array(tx))
            }
            K::Fix(f, _) => {
                // `fix F : A → B` for `F : (A → B) → (A → B)`: the same form in the source.
                let (f, tf) = sub(f)?;
                let ab = tf.as_fun().ok_or_else(|| ill("fix", &tf))?.1.clone();
                (mk(S::Fix(f))?, ab)
            }
            K::Loop(f, x, tape) => {
                // `loop` and `loopTape` are the same forms in the source.
                let ((f, tf), (x, _)) = (sub(f)?, sub(x)?);
                let step = tf.as_fun().ok_or_else(|| ill("loop", &tf))?.1.clone();
                let ty = if *tape {
                    // loopTape f x : B × Array T for f : A → (A + B) × T.
                    let (ab, tt) = step.as_prod().ok_or_else(|| ill("loopTape", &tf))?;
                    let b = ab.as_sum().ok_or_else(|| ill("loopTape", &tf))?.1.clone();
                    Ty::prod(b, Ty::array(tt.clone()))
                } else {
                    step.as_sum().ok_or_else(|| ill("loop", &tf))?.1.clone()
                };
                (mk(S::Loop(f, x, *tape))?, ty)
            }
            // C(λ̲v. l) = \v -> C(l)
            K::LinLam(v, body) => {
                let dom = v.lin_ty().ok_or_else(|| ill("linear λ", &v.ty))?.clone();
                let (b, cod) = lterm(body)?;
                (mk(S::Lam(var(v)?, b))?, Ty::lin_fun(dom, cod))
            }
            // C(f • t) = C(f) C(t)
            K::LinApp(f, a) => {
                let ((f, tf), (a, _)) = (sub(f)?, sub(a)?);
                let cod = tf.as_lin_fun().ok_or_else(|| ill("•", &tf))?.1.clone();
                (mk(S::App(f, a))?, Ty::lin(cod))
            }
            // C(op t) = C(let p = t in expand(op) p)
            K::LinPrim(k, a) => kernel(k, a)?,
        })
    })
}

/// A kernel applied to its argument, through its definition as a term.
fn kernel(k: &Rc<LinPrim>, a: &Term) -> R<(src::Term, Ty)> {
    let p = Var::fresh("k", k.param().clone());
    let Some(def) = k.expansion(&Term::var(&p)) else {
        return Err(format!(
            "the derivative kernel `{}` has no definition as a term, so it cannot be \
             concretised (differentiated again)",
            k.name()
        ));
    };
    cterm(&Term::let_(&p, a.clone(), def))
}

/// Let-chains are concretised in a loop (they can be very long).
fn let_chain(t: &Term) -> R<(src::Term, Ty)> {
    let mut bindings = Vec::new();
    let mut cur = t;
    while let TermKind::Let(p, e, b) = &cur.kind {
        bindings.push((pat(p)?, term(e)?));
        cur = b;
    }
    let (mut out, ty) = cterm(cur)?;
    for (p, e) in bindings.into_iter().rev() {
        out = mk(S::Let(p, e, out))?;
    }
    Ok((out, ty))
}

/// A linear term's concrete form and its linear type.
fn lterm(l: &LTerm) -> R<(src::Term, LTy)> {
    deep(|| {
        use LTermKind as K;
        let c = |t: &Term| cterm(t);
        let sub = |e: &LTerm| lterm(e);
        Ok(match &l.kind {
            K::Var(v) => {
                let ty = v.lin_ty().ok_or_else(|| ill("linear variable", &v.ty))?;
                (mk(S::Var(var(v)?))?, ty.clone())
            }
            K::Zero(ty) => (concrete::zero(ty)?, ty.clone()),
            K::Plus(a, b) => {
                let ((a, ta), (b, _)) = (sub(a)?, sub(b)?);
                (concrete::plus(&ta, a, b)?, ta)
            }
            K::Pair(a, b) => {
                let ((a, ta), (b, tb)) = (sub(a)?, sub(b)?);
                (mk(S::Pair(a, b))?, LTy::prod(ta, tb))
            }
            K::Fst(e) => {
                let (e, te) = sub(e)?;
                let f = te
                    .as_prod()
                    .ok_or_else(|| ill("linear fst", &te))?
                    .0
                    .clone();
                (mk(S::Fst(e))?, f)
            }
            K::Snd(e) => {
                let (e, te) = sub(e)?;
                let s = te
                    .as_prod()
                    .ok_or_else(|| ill("linear snd", &te))?
                    .1
                    .clone();
                (mk(S::Snd(e))?, s)
            }
            K::App(f, e) => {
                let ((f, tf), (e, _)) = (c(f)?, sub(e)?);
                let cod = tf.as_lin_fun().ok_or_else(|| ill("•", &tf))?.1.clone();
                (mk(S::App(f, e))?, cod)
            }
            K::Let(..) | K::LinLet(..) => return linear_let_chain(l),
            // C(!t ⊗ l) = [(C(t), C(l))]
            K::Copower(t, e) => {
                let ((t, tt), (e, te)) = (c(t)?, sub(e)?);
                (concrete::copower(t, e)?, LTy::copower(tt, te))
            }
            K::CopowFold(f, e) => {
                let ((f, tf), (e, _)) = (c(f)?, sub(e)?);
                let m = tf
                    .as_fun()
                    .and_then(|(_, lm)| lm.as_lin_fun())
                    .ok_or_else(|| ill("copowfold", &tf))?
                    .1
                    .clone();
                (concrete::copowfold(&m, f, e)?, m)
            }
            K::PowLam(b, body) => {
                let (body, tb) = sub(body)?;
                (mk(S::Lam(var(b)?, body))?, LTy::power(b.ty.clone(), tb))
            }
            K::PowApp(e, t) => {
                let ((e, te), (t, _)) = (sub(e)?, c(t)?);
                let r = te.as_power().ok_or_else(|| ill("@", &te))?.1.clone();
                (mk(S::App(e, t))?, r)
            }
            K::Inl(e, r) => {
                let (e, te) = sub(e)?;
                (concrete::inl(e, r)?, LTy::sum(te, r.clone()))
            }
            K::Inr(lt, e) => {
                let (e, te) = sub(e)?;
                (concrete::inr(lt, e)?, LTy::sum(lt.clone(), te))
            }
            K::FromLeft(e) => {
                let (e, te) = sub(e)?;
                let a = te.as_sum().ok_or_else(|| ill("fromLeft", &te))?.0.clone();
                (concrete::from_left(e)?, a)
            }
            K::FromRight(e) => {
                let (e, te) = sub(e)?;
                let b = te.as_sum().ok_or_else(|| ill("fromRight", &te))?.1.clone();
                (concrete::from_right(e)?, b)
            }
            K::Replicate(n, e) => {
                let ((n, _), (e, te)) = (c(n)?, sub(e)?);
                (concrete::replicate(n, e)?, LTy::array(te))
            }
            // C(lsum (lbuild m (\i -> Σ onehot n_c j_c x_c))) = Σ_c scatterAdd n_c js_c xs_c
            K::Sum(e) if let Some(r) = fused_sum(e)? => r,
            K::Sum(e) => {
                let (e, te) = sub(e)?;
                let a = te.as_array().ok_or_else(|| ill("lsum", &te))?.clone();
                (concrete::sum(&a, e)?, a)
            }
            K::OneHot(n, i, e) => {
                let ((n, _), (i, _), (e, te)) = (c(n)?, c(i)?, sub(e)?);
                (concrete::onehot(&te, n, i, e)?, LTy::array(te))
            }
            K::Index(e, i) => {
                let ((e, te), (i, _)) = (sub(e)?, c(i)?);
                let a = te
                    .as_array()
                    .ok_or_else(|| ill("linear index", &te))?
                    .clone();
                (concrete::lindex(&a, e, i)?, a)
            }
            K::ZipWith(fs, e) => {
                let ((fs, tfs), (e, te)) = (c(fs)?, sub(e)?);
                let m = tfs
                    .as_array()
                    .and_then(|f| f.as_lin_fun())
                    .ok_or_else(|| ill("zipWith", &tfs))?
                    .1
                    .clone();
                let a = te.as_array().ok_or_else(|| ill("zipWith", &te))?.clone();
                (concrete::zip_with(&a, fs, e)?, LTy::array(m))
            }
            K::Map(f, e) => {
                let ((f, tf), (e, _)) = (c(f)?, sub(e)?);
                let m = tf.as_lin_fun().ok_or_else(|| ill("lmap", &tf))?.1.clone();
                (concrete::lmap(f, e)?, LTy::array(m))
            }
            K::Build(n, i, body) => {
                let ((n, _), (body, tb)) = (c(n)?, sub(body)?);
                (concrete::lbuild(n, var(i)?, body)?, LTy::array(tb))
            }
            K::Scale(t, e) => {
                let ((t, _), (e, te)) = (c(t)?, sub(e)?);
                (concrete::scale(&te, t, e)?, te)
            }
            K::Case(t, p, a, q, b) => {
                let ((t, _), (a, ta), (b, _)) = (c(t)?, sub(a)?, sub(b)?);
                (mk(S::Case(t, pat(p)?, a, pat(q)?, b))?, ta)
            }
            K::Chain(fs, e, rev, outs) => {
                let ((fs, tfs), (e, _)) = (c(fs)?, sub(e)?);
                let (dom, cod) = tfs
                    .as_array()
                    .and_then(|f| f.as_lin_fun())
                    .ok_or_else(|| ill("lchain", &tfs))?;
                let sum = |t: &LTy| {
                    t.as_sum()
                        .map(|(a, b)| (a.clone(), b.clone()))
                        .ok_or_else(|| ill("lchain", &tfs))
                };
                let prod = |t: &LTy| {
                    t.as_prod()
                        .map(|(a, b)| (a.clone(), b.clone()))
                        .ok_or_else(|| ill("lchain", &tfs))
                };
                match (*rev, *outs) {
                    // fs : Array (A ⊕ B ⊸ G × A)
                    (true, false) => {
                        let ((a, b), (g, _)) = (sum(dom)?, prod(cod)?);
                        let out = LTy::prod(g.clone(), a.clone());
                        (concrete::chain_reverse(&g, &a, &b, fs, e)?, out)
                    }
                    // fs : Array ((A ⊕ B) × C ⊸ G × A)
                    (true, true) => {
                        let ((ab, cc), (g, _)) = (prod(dom)?, prod(cod)?);
                        let (a, b) = sum(&ab)?;
                        let out = LTy::prod(g.clone(), a.clone());
                        let t = concrete::chain_reverse_records(&g, &a, &b, &cc, fs, e)?;
                        (t, out)
                    }
                    // fs : Array (G × A ⊸ A ⊕ B)
                    (false, false) => {
                        let (a, b) = sum(cod)?;
                        (concrete::chain_forward(&a, &b, fs, e)?, b)
                    }
                    // fs : Array (G × A ⊸ (A ⊕ B) × C)
                    (false, true) => {
                        let (ab, cc) = prod(cod)?;
                        let (a, b) = sum(&ab)?;
                        let t = concrete::chain_forward_records(&a, &b, &cc, fs, e)?;
                        (t, LTy::prod(b, LTy::array(cc)))
                    }
                }
            }
        })
    })
}

/// Linear let-chains (Cartesian and linear lets) are concretised in a loop.
fn linear_let_chain(l: &LTerm) -> R<(src::Term, LTy)> {
    let mut bindings = Vec::new();
    let mut cur = l;
    loop {
        match &cur.kind {
            LTermKind::Let(p, e, b) => {
                bindings.push((pat(p)?, term(e)?));
                cur = b;
            }
            LTermKind::LinLet(u, e, b) => {
                bindings.push((src::Pat::Var(var(u)?), linear(e)?));
                cur = b;
            }
            _ => break,
        }
    }
    let (mut out, ty) = lterm(cur)?;
    for (p, e) in bindings.into_iter().rev() {
        out = mk(S::Let(p, e, out))?;
    }
    Ok((out, ty))
}

/// What a body of `lsum (lbuild m (\i -> body))` contributes per iteration, when it is built
/// from one-hots of reals by `+`, `0`, pairs, scaling, `case` and `let` (with reals and units
/// anywhere): a tree following the body's form, beside the concrete term computing the tree's
/// entries for one iteration. A one-hot's entry is `(index, value)` (in an untaken branch
/// `(-1, 0.0)`, which `scatterAdd` drops), a real's its value, the rest `()`.
enum Entries {
    /// A zero of this type (entry `()`).
    Zero(LTy),
    /// `onehot n j x` (entry `(j, x)`), `n` a target term independent of the iteration.
    Hot(Term),
    /// A real (entry: the real).
    Scalar,
    /// A unit (entry `()`).
    Unit,
    /// A pair (entry: the pair of the components' entries).
    Pair(Box<Entries>, Box<Entries>),
    /// A sum of two of this type (entry: the pair of the summands' entries).
    Plus(Box<Entries>, Box<Entries>, LTy),
}

impl Entries {
    fn ty(&self) -> LTy {
        match self {
            Entries::Zero(l) | Entries::Plus(_, _, l) => l.clone(),
            Entries::Hot(_) => LTy::array(LTy::Real),
            Entries::Scalar => LTy::Real,
            Entries::Unit => LTy::Unit,
            Entries::Pair(a, b) => LTy::prod(a.ty(), b.ty()),
        }
    }

    fn hot(&self) -> bool {
        match self {
            Entries::Hot(_) => true,
            Entries::Pair(a, b) | Entries::Plus(a, b, _) => a.hot() || b.hot(),
            _ => false,
        }
    }

    /// The entry of an untaken branch.
    fn none(&self) -> R<src::Term> {
        deep(|| match self {
            Entries::Zero(_) | Entries::Unit => Ok(src::Term::lit(src::Lit::Unit)),
            Entries::Hot(_) => mk(S::Pair(
                src::Term::lit(src::Lit::Int(-1)),
                src::Term::lit(src::Lit::Real(0.0)),
            )),
            Entries::Scalar => Ok(src::Term::lit(src::Lit::Real(0.0))),
            Entries::Pair(a, b) | Entries::Plus(a, b, _) => mk(S::Pair(a.none()?, b.none()?)),
        })
    }

    /// The entry `e` (of this tree) with every value multiplied by `c`.
    fn scaled(&self, c: src::Term, e: src::Term) -> R<src::Term> {
        let mul = |x| mk(S::Prim(crate::prim::op("mul"), vec![c.clone(), x]));
        deep(|| match self {
            Entries::Zero(_) | Entries::Unit => Ok(e),
            Entries::Scalar => mul(e),
            Entries::Hot(_) => concrete::bind("e", e, |e| {
                mk(S::Pair(mk(S::Fst(e.clone()))?, mul(mk(S::Snd(e))?)?))
            }),
            Entries::Pair(a, b) | Entries::Plus(a, b, _) => concrete::bind("e", e, |e| {
                mk(S::Pair(
                    a.scaled(c.clone(), mk(S::Fst(e.clone()))?)?,
                    b.scaled(c.clone(), mk(S::Snd(e))?)?,
                ))
            }),
        })
    }

    /// The sum over the iterations, from `es` (every iteration's entries) and the projection
    /// `path` from an iteration's entries to this tree's.
    fn assemble(&self, es: &src::Term, path: &mut Vec<bool>) -> R<src::Term> {
        let project = |path: &[bool], last: Option<bool>| {
            concrete::lam("e", per_ty(es)?, |mut x| {
                for &right in path.iter().chain(&last) {
                    x = mk(if right { S::Snd(x) } else { S::Fst(x) })?;
                }
                Ok(x)
            })
        };
        let both = |a: &Entries, b: &Entries, path: &mut Vec<bool>| -> R<_> {
            path.push(false);
            let a = a.assemble(es, path)?;
            path.pop();
            path.push(true);
            let b = b.assemble(es, path)?;
            path.pop();
            Ok((a, b))
        };
        deep(|| match self {
            Entries::Zero(l) => concrete::zero(l),
            Entries::Unit => Ok(src::Term::lit(src::Lit::Unit)),
            Entries::Scalar => {
                concrete::sum(&LTy::Real, mk(S::Map(project(path, None)?, es.clone()))?)
            }
            Entries::Hot(n) => {
                let js = mk(S::Map(project(path, Some(false))?, es.clone()))?;
                let xs = mk(S::Map(project(path, Some(true))?, es.clone()))?;
                concrete::scatter_add(term(n)?, js, xs)
            }
            Entries::Pair(a, b) => {
                let (a, b) = both(a, b, path)?;
                mk(S::Pair(a, b))
            }
            Entries::Plus(a, b, l) => {
                let (a, b) = both(a, b, path)?;
                concrete::plus(l, a, b)
            }
        })
    }
}

/// The entries of `l`, or `None` if it is not of the form [`Entries`] describes. `bound`
/// collects the variables bound on the way (the loop index first): a one-hot whose length
/// mentions one of them is not accumulated (`None`).
fn entries(
    l: &LTerm,
    bound: &mut Vec<crate::source::term::VarId>,
) -> R<Option<(Entries, src::Term)>> {
    deep(|| {
        use LTermKind as K;
        let depends = |t: &Term, bound: &[crate::source::term::VarId]| {
            let mut hit = false;
            super::term::Child::C(t).each_var(|x| hit |= bound.contains(&x.id));
            hit
        };
        macro_rules! sub {
            ($e:expr) => {
                match entries($e, bound)? {
                    Some(r) => r,
                    None => return Ok(None),
                }
            };
        }
        Ok(Some(match &l.kind {
            K::Zero(ty) => (Entries::Zero(ty.clone()), src::Term::lit(src::Lit::Unit)),
            K::OneHot(n, i, x) if !depends(n, bound) => {
                let (x, tx) = lterm(x)?;
                if !matches!(tx, LTy::Real) {
                    return Ok(None);
                }
                (Entries::Hot(n.clone()), mk(S::Pair(term(i)?, x))?)
            }
            K::Plus(a, b) => {
                let ((ta, a), (tb, b)) = (sub!(a), sub!(b));
                let ty = ta.ty();
                (
                    Entries::Plus(Box::new(ta), Box::new(tb), ty),
                    mk(S::Pair(a, b))?,
                )
            }
            K::Pair(a, b) => {
                let ((ta, a), (tb, b)) = (sub!(a), sub!(b));
                (
                    Entries::Pair(Box::new(ta), Box::new(tb)),
                    mk(S::Pair(a, b))?,
                )
            }
            K::Scale(c, e) => {
                let (te, e) = sub!(e);
                let e = concrete::bind("c", term(c)?, |c| te.scaled(c, e))?;
                (te, e)
            }
            K::Let(p, t, b) => {
                bound.extend(p.vars().iter().map(|v| v.id));
                let (tb, b) = sub!(b);
                (tb, mk(S::Let(pat(p)?, term(t)?, b))?)
            }
            K::LinLet(u, e, b) => {
                bound.push(u.id);
                let (tb, b) = sub!(b);
                (tb, mk(S::Let(src::Pat::Var(var(u)?), linear(e)?, b))?)
            }
            K::Case(t, p, a, q, b) => {
                bound.extend(p.vars().iter().chain(q.vars().iter()).map(|v| v.id));
                let ((ta, a), (tb, b)) = (sub!(a), sub!(b));
                let left = mk(S::Pair(a, tb.none()?))?;
                let right = mk(S::Pair(ta.none()?, b))?;
                let e = mk(S::Case(term(t)?, pat(p)?, left, pat(q)?, right))?;
                let ty = ta.ty();
                (Entries::Plus(Box::new(ta), Box::new(tb), ty), e)
            }
            _ => {
                let (e, te) = lterm(l)?;
                match te {
                    LTy::Real => (Entries::Scalar, e),
                    LTy::Unit => (Entries::Unit, src::Term::lit(src::Lit::Unit)),
                    _ => return Ok(None),
                }
            }
        }))
    })
}

/// `lsum (lbuild m (\i -> body))` for a body of the form [`Entries`] describes with at least
/// one one-hot: every iteration's entries in one array, then one `scatterAdd` per one-hot of
/// the body (`O(m + n)` each) and one `sum` per real, assembled by the body's form. `None` for
/// other sums (concretised by [`concrete::sum`]).
fn fused_sum(e: &LTerm) -> R<Option<(src::Term, LTy)>> {
    let LTermKind::Build(m, i, body) = &e.kind else {
        return Ok(None);
    };
    let mut bound = vec![i.id];
    let Some((tree, per)) = entries(body, &mut bound)? else {
        return Ok(None);
    };
    if !tree.hot() {
        return Ok(None);
    }
    let all = mk(S::Build(term(m)?, mk(S::Lam(var(i)?, per))?))?;
    let out = concrete::bind("es", all, |es| tree.assemble(&es, &mut Vec::new()))?;
    Ok(Some((out, tree.ty())))
}

/// The element type of an array term.
fn per_ty(es: &src::Term) -> R<crate::types::Type> {
    es.ty
        .as_array()
        .cloned()
        .ok_or_else(|| "concretisation: entries not an array".to_string())
}
