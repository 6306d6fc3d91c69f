//! The type checker of the target language, which also enforces the linear discipline.
//!
//! Two judgements, computed bottom-up (every binder carries its type, `0` carries its type, so
//! every term has a unique type):
//!
//! ```text
//! Γ ⊢ t : τ           a Cartesian term in a context of Cartesian variables
//! Γ; Δ ⊢ l : L        a linear term, linear in the linear variables Δ
//! ```
//!
//! The linear discipline is scoping: the linear variables Δ are visible only in *linear
//! positions* (the linear subterms of a linear term). A Cartesian subterm of a linear term (the
//! `f` of `f • l`, the `t` of `!t ⊗ l`, a scaling factor, an index, ...) is checked in `Γ` alone,
//! and the body of a linear λ nested inside it starts a new Δ with only its own variable. Since
//! every linear form is a monoid homomorphism in its linear subterms, a term that checks is a
//! homomorphism in Δ: nothing can multiply two linear values, branch on one, or use one as data.
//! A linear let `let u = l1 in l2` extends Δ with `u` (`l2` is jointly linear in Δ and `u`, so
//! substituting `l1` for `u` keeps it linear).
//!
//! Errors name the offending subterm (printed, and shortened); they are `ErrorKind::Type`.

use super::term::{Child, LTerm, LTermKind, Pat, Term, TermKind, Var, VarId};
use super::types::{LTy, Ty};
use crate::deep::deep;
use crate::error::{Error, ErrorKind, Result};
use std::collections::HashSet;

/// Cartesian variables in scope.
type Cart = im::HashMap<VarId, Ty>;
/// Linear variables in scope.
type Linear = im::HashMap<VarId, LTy>;

/// The type of a Cartesian term whose free variables are among `free`.
pub fn check(t: &Term, free: &[Var]) -> Result<Ty> {
    let mut c = Checker::default();
    let cart = c.bind_all(&Cart::new(), free);
    c.term(t, &cart)
}

/// The type of a linear term whose free Cartesian variables are among `free` and that is
/// linear in the linear variables `linear` (each of type `Lin L`).
pub fn check_linear(l: &LTerm, free: &[Var], linear: &[Var]) -> Result<LTy> {
    let mut c = Checker::default();
    let cart = c.bind_all(&Cart::new(), free);
    let mut lin = Linear::new();
    for v in linear {
        lin.insert(
            v.id,
            c.linear_binder(v, || format!("linear variable `{}`", v.name))?,
        );
    }
    c.linear(l, &cart, &lin)
}

#[derive(Default)]
struct Checker {
    /// Every linear variable bound so far, to explain out-of-scope uses.
    seen_linear: HashSet<VarId>,
}

fn err(msg: String) -> Error {
    Error::new(ErrorKind::Type, format!("target term: {msg}"))
}

/// A short rendering of a subterm for error messages.
fn show(c: Child<'_>) -> String {
    let s = match c {
        Child::C(t) => super::print::to_string(t, 1000),
        Child::L(l) => super::print::linear_to_string(l, 1000),
    };
    let s = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if s.chars().count() > 60 {
        format!("{}…", s.chars().take(59).collect::<String>())
    } else {
        s
    }
}

fn expect_eq<T: PartialEq + std::fmt::Display>(
    what: &str,
    expected: &T,
    found: &T,
    at: Child<'_>,
) -> Result<()> {
    if expected == found {
        Ok(())
    } else {
        Err(err(format!(
            "{what} in `{}`: expected {expected}, found {found}",
            show(at)
        )))
    }
}

fn mismatch<T>(what: &str, found: impl std::fmt::Display, at: Child<'_>) -> Result<T> {
    Err(err(format!(
        "`{}` needs {what}, but has type {found}",
        show(at)
    )))
}

impl Checker {
    fn bind_all(&mut self, cart: &Cart, vars: &[Var]) -> Cart {
        let mut cart = cart.clone();
        for v in vars {
            cart.insert(v.id, v.ty.clone());
        }
        cart
    }

    fn bind_pat(&mut self, cart: &Cart, p: &Pat) -> Cart {
        let mut cart = cart.clone();
        for v in p.vars() {
            cart.insert(v.id, v.ty.clone());
        }
        cart
    }

    fn linear_binder(&mut self, v: &Var, what: impl FnOnce() -> String) -> Result<LTy> {
        self.seen_linear.insert(v.id);
        v.lin_ty().cloned().ok_or_else(|| {
            err(format!(
                "{} must have a linear type `Lin L`, but has type {}",
                what(),
                v.ty
            ))
        })
    }

    fn var(&self, x: &Var, cart: &Cart, at: Child<'_>) -> Result<Ty> {
        match cart.get(&x.id) {
            Some(ty) => {
                expect_eq(&format!("variable `{}`", x.name), ty, &x.ty, at)?;
                Ok(ty.clone())
            }
            None if self.seen_linear.contains(&x.id) => Err(err(format!(
                "linear variable `{}` used in a non-linear position (in a Cartesian subterm, or \
                 inside a linear λ it is not the variable of)",
                x.name
            ))),
            None => Err(err(format!("unbound variable `{}`", x.name))),
        }
    }

    fn term(&mut self, t: &Term, cart: &Cart) -> Result<Ty> {
        deep(|| {
            // Let-chains are walked in a loop.
            let mut cart = cart.clone();
            let mut t = t;
            while let TermKind::Let(p, e, b) = &t.kind {
                let te = self.term(e, &cart)?;
                expect_eq("let pattern", &p.ty(), &te, Child::C(t))?;
                cart = self.bind_pat(&cart, p);
                t = b;
            }
            self.node(t, &cart)
        })
    }

    fn node(&mut self, t: &Term, cart: &Cart) -> Result<Ty> {
        use TermKind as K;
        let at = Child::C(t);
        Ok(match &t.kind {
            K::Var(x) => self.var(x, cart, at)?,
            K::Lit(l) => Ty::from_source(&l.ty()),
            K::Lam(x, b) => {
                let cart = cart.update(x.id, x.ty.clone());
                Ty::fun(x.ty.clone(), self.term(b, &cart)?)
            }
            K::App(f, a) => {
                let tf = self.term(f, cart)?;
                let ta = self.term(a, cart)?;
                let Some((dom, cod)) = tf.as_fun() else {
                    return mismatch("a function", tf, Child::C(f));
                };
                expect_eq("argument", dom, &ta, at)?;
                cod.clone()
            }
            K::Let(..) => self.term(t, cart)?,
            K::Pair(a, b) => Ty::prod(self.term(a, cart)?, self.term(b, cart)?),
            K::Fst(e) | K::Snd(e) => {
                let te = self.term(e, cart)?;
                let Some((a, b)) = te.as_prod() else {
                    return mismatch("a pair", te, Child::C(e));
                };
                if matches!(t.kind, K::Fst(_)) { a } else { b }.clone()
            }
            K::If(c, a, b) => {
                let tc = self.term(c, cart)?;
                expect_eq("condition", &Ty::Bool, &tc, at)?;
                let ta = self.term(a, cart)?;
                let tb = self.term(b, cart)?;
                expect_eq("else branch", &ta, &tb, at)?;
                ta
            }
            K::Inl(e, r) => Ty::sum(self.term(e, cart)?, r.clone()),
            K::Inr(l, e) => Ty::sum(l.clone(), self.term(e, cart)?),
            K::Case(e, p, a, q, b) => {
                let te = self.term(e, cart)?;
                let Some((l, r)) = te.as_sum() else {
                    return mismatch("a sum", te, Child::C(e));
                };
                expect_eq("inl pattern", l, &p.ty(), at)?;
                expect_eq("inr pattern", r, &q.ty(), at)?;
                let ca = self.bind_pat(cart, p);
                let ta = self.term(a, &ca)?;
                let cb = self.bind_pat(cart, q);
                let tb = self.term(b, &cb)?;
                expect_eq("inr branch", &ta, &tb, at)?;
                ta
            }
            K::Prim(op, args) => {
                if args.len() != op.params().len() {
                    return Err(err(format!(
                        "`{}` takes {} arguments, but is applied to {} in `{}`",
                        op.name(),
                        op.params().len(),
                        args.len(),
                        show(at)
                    )));
                }
                for (a, p) in args.iter().zip(op.params()) {
                    let ta = self.term(a, cart)?;
                    expect_eq(
                        &format!("argument of `{}`", op.name()),
                        &Ty::from_source(p),
                        &ta,
                        at,
                    )?;
                }
                Ty::from_source(op.result())
            }
            K::Array(elem, items) => {
                for it in items {
                    let ti = self.term(it, cart)?;
                    expect_eq("array element", elem, &ti, at)?;
                }
                Ty::array(elem.clone())
            }
            K::Map(f, xs) => {
                let (a, b) = self.fun(f, cart)?;
                let txs = self.term(xs, cart)?;
                expect_eq("map array", &Ty::array(a), &txs, at)?;
                Ty::array(b)
            }
            K::Map2(f, xs, ys) => {
                let (a, bc) = self.fun(f, cart)?;
                let Some((b, c)) = bc.as_fun() else {
                    return mismatch("a function of two arguments", bc, Child::C(f));
                };
                let txs = self.term(xs, cart)?;
                expect_eq("map2 first array", &Ty::array(a), &txs, at)?;
                let tys = self.term(ys, cart)?;
                expect_eq("map2 second array", &Ty::array(b.clone()), &tys, at)?;
                Ty::array(c.clone())
            }
            K::Build(n, f) => {
                self.int(n, cart)?;
                let (i, a) = self.fun(f, cart)?;
                expect_eq("build index", &Ty::Int, &i, at)?;
                Ty::array(a)
            }
            K::Index(xs, i) => {
                let e = self.array(xs, cart)?;
                self.int(i, cart)?;
                e
            }
            K::Length(xs) => {
                self.array(xs, cart)?;
                Ty::Int
            }
            K::Replicate(n, x) => {
                self.int(n, cart)?;
                Ty::array(self.term(x, cart)?)
            }
            K::Loop(f, x, tape) => {
                let (a, r) = self.fun(f, cart)?;
                let tx = self.term(x, cart)?;
                expect_eq("loop state", &a, &tx, at)?;
                let (step, entry) = if *tape {
                    let Some((s, e)) = r.as_prod() else {
                        return mismatch("a step returning `(A + B, T)`", r, Child::C(f));
                    };
                    (s.clone(), Some(e.clone()))
                } else {
                    (r, None)
                };
                let Some((a2, b)) = step.as_sum() else {
                    return mismatch("a step returning a sum `A + B`", step, Child::C(f));
                };
                expect_eq("loop next state", &a, a2, at)?;
                match entry {
                    Some(e) => Ty::prod(b.clone(), Ty::array(e)),
                    None => b.clone(),
                }
            }
            K::Fix(f, _) => {
                let (g, r) = self.fun(f, cart)?;
                let Some((a, b)) = g.as_fun() else {
                    return mismatch("a functional `(A -> B) -> (A -> B)`", &g, Child::C(f));
                };
                expect_eq("fix: the functional's result", &g, &r, at)?;
                Ty::fun(a.clone(), b.clone())
            }
            K::LinLam(v, body) => {
                let l =
                    self.linear_binder(v, || format!("the variable `{}` of a linear λ", v.name))?;
                let lin = Linear::new().update(v.id, l.clone());
                Ty::lin_fun(l, self.linear(body, cart, &lin)?)
            }
            K::LinApp(f, a) => {
                let (dom, cod) = self.lin_fun(f, cart)?;
                let ta = self.term(a, cart)?;
                expect_eq("argument of a linear map", &Ty::lin(dom), &ta, at)?;
                Ty::lin(cod)
            }
            K::LinPrim(op, a) => {
                let ta = self.term(a, cart)?;
                expect_eq(&format!("argument of `{}`", op.name()), op.param(), &ta, at)?;
                Ty::lin_fun(op.dom().clone(), op.cod().clone())
            }
        })
    }

    fn int(&mut self, t: &Term, cart: &Cart) -> Result<()> {
        let ty = self.term(t, cart)?;
        expect_eq("size or index", &Ty::Int, &ty, Child::C(t))
    }

    fn real(&mut self, t: &Term, cart: &Cart) -> Result<()> {
        let ty = self.term(t, cart)?;
        expect_eq("scaling factor", &Ty::Real, &ty, Child::C(t))
    }

    fn fun(&mut self, t: &Term, cart: &Cart) -> Result<(Ty, Ty)> {
        let ty = self.term(t, cart)?;
        match ty.as_fun() {
            Some((a, b)) => Ok((a.clone(), b.clone())),
            None => mismatch("a function", ty, Child::C(t)),
        }
    }

    fn array(&mut self, t: &Term, cart: &Cart) -> Result<Ty> {
        let ty = self.term(t, cart)?;
        match ty.as_array() {
            Some(e) => Ok(e.clone()),
            None => mismatch("an array", ty, Child::C(t)),
        }
    }

    fn lin_fun(&mut self, t: &Term, cart: &Cart) -> Result<(LTy, LTy)> {
        let ty = self.term(t, cart)?;
        match ty.as_lin_fun() {
            Some((a, b)) => Ok((a.clone(), b.clone())),
            None => mismatch("a linear map `L ⊸ L'`", ty, Child::C(t)),
        }
    }

    fn linear(&mut self, l: &LTerm, cart: &Cart, lin: &Linear) -> Result<LTy> {
        deep(|| {
            let mut cart = cart.clone();
            let mut lin = lin.clone();
            let mut l = l;
            loop {
                match &l.kind {
                    LTermKind::Let(p, t, body) => {
                        let tt = self.term(t, &cart)?;
                        expect_eq("let pattern", &p.ty(), &tt, Child::L(l))?;
                        cart = self.bind_pat(&cart, p);
                        l = body;
                    }
                    LTermKind::LinLet(u, l1, body) => {
                        let t1 = self.linear(l1, &cart, &lin)?;
                        let lu = self.linear_binder(u, || {
                            format!("the variable `{}` of a linear let", u.name)
                        })?;
                        expect_eq("linear let", &lu, &t1, Child::L(l))?;
                        lin.insert(u.id, lu);
                        l = body;
                    }
                    _ => return self.linear_node(l, &cart, &lin),
                }
            }
        })
    }

    fn linear_node(&mut self, l: &LTerm, cart: &Cart, lin: &Linear) -> Result<LTy> {
        use LTermKind as K;
        let at = Child::L(l);
        Ok(match &l.kind {
            K::Var(v) => match lin.get(&v.id) {
                Some(ty) => {
                    expect_eq(
                        &format!("linear variable `{}`", v.name),
                        &Ty::lin(ty.clone()),
                        &v.ty,
                        at,
                    )?;
                    ty.clone()
                }
                None if cart.contains_key(&v.id) => {
                    return Err(err(format!(
                        "`{}` is a Cartesian variable used in a linear position: a linear term \
                         may only use its linear variables there",
                        v.name
                    )));
                }
                None if self.seen_linear.contains(&v.id) => {
                    return Err(err(format!(
                        "linear variable `{}` is not in scope here (a linear λ may only use its \
                         own variable)",
                        v.name
                    )));
                }
                None => return Err(err(format!("unbound linear variable `{}`", v.name))),
            },
            K::Zero(ty) => ty.clone(),
            K::Plus(a, b) => {
                let ta = self.linear(a, cart, lin)?;
                let tb = self.linear(b, cart, lin)?;
                expect_eq("right summand", &ta, &tb, at)?;
                ta
            }
            K::Pair(a, b) => LTy::prod(self.linear(a, cart, lin)?, self.linear(b, cart, lin)?),
            K::Fst(e) | K::Snd(e) => {
                let te = self.linear(e, cart, lin)?;
                let Some((a, b)) = te.as_prod() else {
                    return mismatch("a linear pair", te, Child::L(e));
                };
                if matches!(l.kind, K::Fst(_)) { a } else { b }.clone()
            }
            K::App(f, a) => {
                let (dom, cod) = self.lin_fun(f, cart)?;
                let ta = self.linear(a, cart, lin)?;
                expect_eq("argument of a linear map", &dom, &ta, at)?;
                cod
            }
            K::Let(..) | K::LinLet(..) => self.linear(l, cart, lin)?,
            K::Copower(t, e) => LTy::copower(self.term(t, cart)?, self.linear(e, cart, lin)?),
            K::CopowFold(f, e) => {
                let (tau, g) = self.fun(f, cart)?;
                let Some((dom, cod)) = g.as_lin_fun() else {
                    return mismatch("a function into linear maps `τ -> (L ⊸ M)`", g, Child::C(f));
                };
                let te = self.linear(e, cart, lin)?;
                expect_eq(
                    "copowfold argument",
                    &LTy::copower(tau, dom.clone()),
                    &te,
                    at,
                )?;
                cod.clone()
            }
            K::PowLam(b, body) => {
                let cart = cart.update(b.id, b.ty.clone());
                LTy::power(b.ty.clone(), self.linear(body, &cart, lin)?)
            }
            K::PowApp(e, t) => {
                let te = self.linear(e, cart, lin)?;
                let Some((tau, m)) = te.as_power() else {
                    return mismatch("a power `τ -> L`", te, Child::L(e));
                };
                let tt = self.term(t, cart)?;
                expect_eq("power argument", tau, &tt, at)?;
                m.clone()
            }
            K::Inl(e, r) => LTy::sum(self.linear(e, cart, lin)?, r.clone()),
            K::Inr(le, e) => LTy::sum(le.clone(), self.linear(e, cart, lin)?),
            K::FromLeft(e) | K::FromRight(e) => {
                let te = self.linear(e, cart, lin)?;
                let Some((a, b)) = te.as_sum() else {
                    return mismatch("a linear sum `L ⊕ L'`", te, Child::L(e));
                };
                if matches!(l.kind, K::FromLeft(_)) {
                    a
                } else {
                    b
                }
                .clone()
            }
            K::Replicate(n, e) => {
                self.int(n, cart)?;
                LTy::array(self.linear(e, cart, lin)?)
            }
            K::Sum(e) => self.linear_array(e, cart, lin)?,
            K::OneHot(n, i, e) => {
                self.int(n, cart)?;
                self.int(i, cart)?;
                LTy::array(self.linear(e, cart, lin)?)
            }
            K::Index(e, i) => {
                let te = self.linear_array(e, cart, lin)?;
                self.int(i, cart)?;
                te
            }
            K::ZipWith(fs, e) => {
                let tf = self.array(fs, cart)?;
                let Some((dom, cod)) = tf.as_lin_fun() else {
                    return mismatch("an array of linear maps", Ty::array(tf), Child::C(fs));
                };
                let te = self.linear(e, cart, lin)?;
                expect_eq("zipWith array", &LTy::array(dom.clone()), &te, at)?;
                LTy::array(cod.clone())
            }
            K::Map(f, e) => {
                let (dom, cod) = self.lin_fun(f, cart)?;
                let te = self.linear(e, cart, lin)?;
                expect_eq("lmap array", &LTy::array(dom), &te, at)?;
                LTy::array(cod)
            }
            K::Build(n, i, body) => {
                self.int(n, cart)?;
                expect_eq("lbuild index", &Ty::Int, &i.ty, at)?;
                let cart = cart.update(i.id, Ty::Int);
                LTy::array(self.linear(body, &cart, lin)?)
            }
            K::Scale(c, e) => {
                self.real(c, cart)?;
                self.linear(e, cart, lin)?
            }
            K::Case(e, p, a, q, b) => {
                let te = self.term(e, cart)?;
                let Some((tl, tr)) = te.as_sum() else {
                    return mismatch("a sum", te, Child::C(e));
                };
                expect_eq("inl pattern", tl, &p.ty(), at)?;
                expect_eq("inr pattern", tr, &q.ty(), at)?;
                let ca = self.bind_pat(cart, p);
                let ta = self.linear(a, &ca, lin)?;
                let cb = self.bind_pat(cart, q);
                let tb = self.linear(b, &cb, lin)?;
                expect_eq("inr branch", &ta, &tb, at)?;
                ta
            }
            K::Chain(fs, e, rev, outs) => {
                let tf = self.array(fs, cart)?;
                let Some((dom, cod)) = tf.as_lin_fun() else {
                    return mismatch("an array of linear maps", Ty::array(tf), Child::C(fs));
                };
                let te = self.linear(e, cart, lin)?;
                let shape = match (*rev, *outs) {
                    // Array (A ⊕ B ⊸ G × A), a cotangent of B: gives G × A.
                    (true, false) => dom
                        .as_sum()
                        .zip(cod.as_prod())
                        .filter(|((a, _), (_, a2))| a == a2)
                        .map(|((_, b), _)| (b.clone(), cod.clone())),
                    // Array ((A ⊕ B) × C ⊸ G × A), a cotangent of B × Array C: gives G × A.
                    (true, true) => dom
                        .as_prod()
                        .and_then(|(ab, c)| Some((ab.as_sum()?, c)))
                        .zip(cod.as_prod())
                        .filter(|(((a, _), _), (_, a2))| a == a2)
                        .map(|(((_, b), c), _)| {
                            (LTy::prod(b.clone(), LTy::array(c.clone())), cod.clone())
                        }),
                    // Array (G × A ⊸ A ⊕ B), a tangent of G × A: gives B.
                    (false, false) => dom
                        .as_prod()
                        .zip(cod.as_sum())
                        .filter(|((_, a), (a2, _))| a == a2)
                        .map(|(_, (_, b))| (dom.clone(), b.clone())),
                    // Array (G × A ⊸ (A ⊕ B) × C), a tangent of G × A: gives B × Array C.
                    (false, true) => dom
                        .as_prod()
                        .zip(cod.as_prod().and_then(|(ab, c)| Some((ab.as_sum()?, c))))
                        .filter(|((_, a), ((a2, _), _))| a == a2)
                        .map(|(_, ((_, b), c))| {
                            (dom.clone(), LTy::prod(b.clone(), LTy::array(c.clone())))
                        }),
                };
                let Some((arg, out)) = shape else {
                    return mismatch(
                        "an array of loop-step derivatives",
                        Ty::array(tf),
                        Child::C(fs),
                    );
                };
                expect_eq("lchain argument", &arg, &te, at)?;
                out
            }
        })
    }

    fn linear_array(&mut self, l: &LTerm, cart: &Cart, lin: &Linear) -> Result<LTy> {
        let ty = self.linear(l, cart, lin)?;
        match ty.as_array() {
            Some(e) => Ok(e.clone()),
            None => mismatch("a linear array", ty, Child::L(l)),
        }
    }
}
