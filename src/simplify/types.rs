//! Bounded type synthesis for the few rules that must name a type (`f • 0 ~> 0` needs the
//! codomain of `f`). Every variable and binder carries its type, so a type can be read off a term
//! without a context; the synthesis gives up (`None`, and the rule does not fire) after a fixed
//! number of nodes, so each call is O(1).

use crate::target::term::{LTerm, LTermKind, Term, TermKind};
use crate::target::types::{LTy, Ty};

/// Nodes visited before giving up.
const FUEL: u32 = 48;

/// The type of a Cartesian term, if found cheaply.
pub fn ty(t: &Term) -> Option<Ty> {
    let mut fuel = FUEL;
    ty_(t, &mut fuel)
}

/// The type of a linear term, if found cheaply.
pub fn lty(l: &LTerm) -> Option<LTy> {
    let mut fuel = FUEL;
    lty_(l, &mut fuel)
}

/// The codomain `M` of a linear function `f : L ⊸ M`, if found cheaply.
pub fn lin_cod(f: &Term) -> Option<LTy> {
    Some(ty(f)?.as_lin_fun()?.1.clone())
}

fn ty_(t: &Term, fuel: &mut u32) -> Option<Ty> {
    use TermKind as K;
    *fuel = fuel.checked_sub(1)?;
    Some(match &t.kind {
        K::Var(x) => x.ty.clone(),
        K::Lit(l) => Ty::from_source(&l.ty()),
        K::Lam(x, b) => Ty::fun(x.ty.clone(), ty_(b, fuel)?),
        K::App(f, _) => ty_(f, fuel)?.as_fun()?.1.clone(),
        K::Let(_, _, b) => ty_(b, fuel)?,
        K::Pair(a, b) => Ty::prod(ty_(a, fuel)?, ty_(b, fuel)?),
        K::Fst(e) => ty_(e, fuel)?.as_prod()?.0.clone(),
        K::Snd(e) => ty_(e, fuel)?.as_prod()?.1.clone(),
        K::If(_, a, _) | K::Case(_, _, a, _, _) => ty_(a, fuel)?,
        K::Inl(e, r) => Ty::sum(ty_(e, fuel)?, r.clone()),
        K::Inr(l, e) => Ty::sum(l.clone(), ty_(e, fuel)?),
        K::Prim(op, _) => Ty::from_source(op.result()),
        K::Array(a, _) => Ty::array(a.clone()),
        K::Map(f, _) | K::Build(_, f) => Ty::array(ty_(f, fuel)?.as_fun()?.1.clone()),
        K::Map2(f, _, _) => {
            let g = ty_(f, fuel)?.as_fun()?.1.clone();
            Ty::array(g.as_fun()?.1.clone())
        }
        K::Index(xs, _) => ty_(xs, fuel)?.as_array()?.clone(),
        K::Length(_) => Ty::Int,
        K::Replicate(_, x) => Ty::array(ty_(x, fuel)?),
        K::Loop(f, _, tape) => {
            let r = ty_(f, fuel)?.as_fun()?.1.clone();
            if *tape {
                let (s, e) = r.as_prod()?;
                Ty::prod(s.as_sum()?.1.clone(), Ty::array(e.clone()))
            } else {
                r.as_sum()?.1.clone()
            }
        }
        K::Fix(f, _) => ty_(f, fuel)?.as_fun()?.1.clone(),
        K::LinLam(v, l) => Ty::lin_fun(v.lin_ty()?.clone(), lty_(l, fuel)?),
        K::LinApp(f, _) => Ty::lin(ty_(f, fuel)?.as_lin_fun()?.1.clone()),
        K::LinPrim(k, _) => Ty::lin_fun(k.dom().clone(), k.cod().clone()),
    })
}

fn lty_(l: &LTerm, fuel: &mut u32) -> Option<LTy> {
    use LTermKind as K;
    *fuel = fuel.checked_sub(1)?;
    let cod = |f: &Term, fuel: &mut u32| Some(ty_(f, fuel)?.as_lin_fun()?.1.clone());
    Some(match &l.kind {
        K::Var(u) => u.lin_ty()?.clone(),
        K::Zero(t) => t.clone(),
        K::Plus(a, b) => lty_(a, fuel).or_else(|| lty_(b, fuel))?,
        K::Pair(a, b) => LTy::prod(lty_(a, fuel)?, lty_(b, fuel)?),
        K::Fst(a) => lty_(a, fuel)?.as_prod()?.0.clone(),
        K::Snd(a) => lty_(a, fuel)?.as_prod()?.1.clone(),
        K::App(f, _) => cod(f, fuel)?,
        K::Let(_, _, b) | K::LinLet(_, _, b) => lty_(b, fuel)?,
        K::Copower(t, l) => LTy::copower(ty_(t, fuel)?, lty_(l, fuel)?),
        K::CopowFold(f, _) => ty_(f, fuel)?.as_fun()?.1.as_lin_fun()?.1.clone(),
        K::PowLam(b, l) => LTy::power(b.ty.clone(), lty_(l, fuel)?),
        K::PowApp(l, _) => lty_(l, fuel)?.as_power()?.1.clone(),
        K::Inl(l, r) => LTy::sum(lty_(l, fuel)?, r.clone()),
        K::Inr(a, l) => LTy::sum(a.clone(), lty_(l, fuel)?),
        K::FromLeft(l) => lty_(l, fuel)?.as_sum()?.0.clone(),
        K::FromRight(l) => lty_(l, fuel)?.as_sum()?.1.clone(),
        K::Replicate(_, l) | K::OneHot(_, _, l) | K::Build(_, _, l) => LTy::array(lty_(l, fuel)?),
        K::Sum(l) | K::Index(l, _) => lty_(l, fuel)?.as_array()?.clone(),
        K::ZipWith(fs, _) => LTy::array(ty_(fs, fuel)?.as_array()?.as_lin_fun()?.1.clone()),
        K::Map(f, _) => LTy::array(cod(f, fuel)?),
        K::Scale(_, l) => lty_(l, fuel)?,
        K::Chain(fs, _, rev, outs) => {
            let cod = ty_(fs, fuel)?.as_array()?.as_lin_fun()?.1.clone();
            match (*rev, *outs) {
                (true, _) => cod,
                (false, false) => cod.as_sum()?.1.clone(),
                (false, true) => {
                    let (next, c) = cod.as_prod()?;
                    LTy::prod(next.as_sum()?.1.clone(), LTy::array(c.clone()))
                }
            }
        }
        K::Case(_, _, a, _, b) => lty_(a, fuel).or_else(|| lty_(b, fuel))?,
    })
}
