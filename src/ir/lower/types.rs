//! Types for the lowering: IR types of source types, and type synthesis for target terms.
//!
//! Every target binder carries its type, so the type of a term can be read off it bottom-up;
//! [`TypeOf`] does that with a memo per node (the lowering asks for the types of lambda bodies
//! and linear terms it materialises, and nested terms would otherwise be walked again and again).

use super::super::{Ty, TyKind, Types};
use crate::deep::deep;
use crate::target::term::{LNode, LTerm, LTermKind, Node, Term, TermKind};
use crate::target::types::{LTy, Ty as TTy};
use crate::types::Type;
use rustc_hash::FxHashMap;

/// The IR type of a first-order source type (`Real` is `f64`, a sum an enum, ...).
pub fn source_ty(types: &mut Types, t: &Type) -> Ty {
    deep(|| match t {
        Type::Real => Ty::F64,
        Type::Int => Ty::I64,
        Type::Bool => Ty::BOOL,
        Type::Unit => Ty::UNIT,
        Type::Prod(p) => {
            let (a, b) = (source_ty(types, &p.0), source_ty(types, &p.1));
            types.tuple(vec![a, b])
        }
        Type::Sum(p) => {
            let (a, b) = (source_ty(types, &p.0), source_ty(types, &p.1));
            types.sum(a, b)
        }
        Type::Array(a) => {
            let a = source_ty(types, a);
            types.array(a)
        }
        Type::Fun(_) => panic!("internal error: source_ty of a function type"),
    })
}

/// [`source_ty`] without interning: the IR type if it exists already.
pub fn lookup_source_ty(types: &Types, t: &Type) -> Option<Ty> {
    deep(|| match t {
        Type::Real => Some(Ty::F64),
        Type::Int => Some(Ty::I64),
        Type::Bool => Some(Ty::BOOL),
        Type::Unit => Some(Ty::UNIT),
        Type::Prod(p) => {
            let (a, b) = (
                lookup_source_ty(types, &p.0)?,
                lookup_source_ty(types, &p.1)?,
            );
            types.lookup(&TyKind::Tuple(vec![a, b]))
        }
        Type::Sum(p) => types.lookup_sum(
            lookup_source_ty(types, &p.0)?,
            lookup_source_ty(types, &p.1)?,
        ),
        Type::Array(a) => types.lookup(&TyKind::Array(lookup_source_ty(types, a)?)),
        Type::Fun(_) => None,
    })
}

/// Type synthesis for target terms, memoised per node.
#[derive(Default)]
pub struct TypeOf {
    terms: FxHashMap<*const Node, (Term, TTy)>,
    linear: FxHashMap<*const LNode, (LTerm, LTy)>,
}

fn invariant(what: &str) -> ! {
    panic!("internal error: ill-typed target term ({what}; the target checker rules this out)")
}

impl TypeOf {
    /// The type of a Cartesian term.
    pub fn term(&mut self, t: &Term) -> TTy {
        let key: *const Node = &**t;
        if let Some((_, ty)) = self.terms.get(&key) {
            return ty.clone();
        }
        let ty = deep(|| self.term_(t));
        // The term is kept with its type so that its address is not reused while cached.
        self.terms.insert(key, (t.clone(), ty.clone()));
        ty
    }

    fn term_(&mut self, t: &Term) -> TTy {
        use TermKind as K;
        match &t.kind {
            K::Var(x) => x.ty.clone(),
            K::Lit(l) => TTy::from_source(&l.ty()),
            K::Lam(x, b) => TTy::fun(x.ty.clone(), self.term(b)),
            K::App(f, _) => self
                .term(f)
                .as_fun()
                .unwrap_or_else(|| invariant("app"))
                .1
                .clone(),
            K::Let(_, _, b) => {
                // Let chains can be long: walk them without recursion.
                let mut b = b;
                while let K::Let(_, _, next) = &b.kind {
                    b = next;
                }
                self.term(b)
            }
            K::Pair(a, b) => TTy::prod(self.term(a), self.term(b)),
            K::Fst(e) => self
                .term(e)
                .as_prod()
                .unwrap_or_else(|| invariant("fst"))
                .0
                .clone(),
            K::Snd(e) => self
                .term(e)
                .as_prod()
                .unwrap_or_else(|| invariant("snd"))
                .1
                .clone(),
            K::If(_, a, _) | K::Case(_, _, a, _, _) => self.term(a),
            K::Inl(e, r) => TTy::sum(self.term(e), r.clone()),
            K::Inr(l, e) => TTy::sum(l.clone(), self.term(e)),
            K::Prim(op, _) => TTy::from_source(op.result()),
            K::Array(a, _) => TTy::array(a.clone()),
            K::Map(f, _) | K::Build(_, f) => TTy::array(self.cod(f)),
            K::Map2(f, _, _) => {
                let g = self.cod(f);
                TTy::array(g.as_fun().unwrap_or_else(|| invariant("map2")).1.clone())
            }
            K::Index(xs, _) => self
                .term(xs)
                .as_array()
                .unwrap_or_else(|| invariant("index"))
                .clone(),
            K::Length(_) => TTy::Int,
            K::Replicate(_, x) => TTy::array(self.term(x)),
            K::Loop(f, _, tape) => {
                let r = self
                    .term(f)
                    .as_fun()
                    .unwrap_or_else(|| invariant("loop"))
                    .1
                    .clone();
                if *tape {
                    let (s, e) = r.as_prod().unwrap_or_else(|| invariant("loopTape"));
                    let b = s
                        .as_sum()
                        .unwrap_or_else(|| invariant("loopTape"))
                        .1
                        .clone();
                    TTy::prod(b, TTy::array(e.clone()))
                } else {
                    r.as_sum().unwrap_or_else(|| invariant("loop")).1.clone()
                }
            }
            K::Fix(f, _) => self
                .term(f)
                .as_fun()
                .unwrap_or_else(|| invariant("fix"))
                .1
                .clone(),
            K::LinLam(v, l) => TTy::lin_fun(
                v.lin_ty().unwrap_or_else(|| invariant("linear λ")).clone(),
                self.linear(l),
            ),
            K::LinApp(f, _) => TTy::lin(self.lin_cod(f)),
            K::LinPrim(k, _) => TTy::lin_fun(k.dom().clone(), k.cod().clone()),
        }
    }

    fn cod(&mut self, f: &Term) -> TTy {
        self.term(f)
            .as_fun()
            .unwrap_or_else(|| invariant("function"))
            .1
            .clone()
    }

    /// The codomain of a linear function.
    pub fn lin_cod(&mut self, f: &Term) -> LTy {
        self.term(f)
            .as_lin_fun()
            .unwrap_or_else(|| invariant("linear function"))
            .1
            .clone()
    }

    /// The type of a linear term.
    pub fn linear(&mut self, l: &LTerm) -> LTy {
        let key: *const LNode = &**l;
        if let Some((_, ty)) = self.linear.get(&key) {
            return ty.clone();
        }
        let ty = deep(|| self.linear_(l));
        self.linear.insert(key, (l.clone(), ty.clone()));
        ty
    }

    fn linear_(&mut self, l: &LTerm) -> LTy {
        use LTermKind as K;
        match &l.kind {
            K::Var(u) => u
                .lin_ty()
                .unwrap_or_else(|| invariant("linear var"))
                .clone(),
            K::Zero(t) => t.clone(),
            K::Plus(a, _) => self.linear(a),
            K::Pair(a, b) => LTy::prod(self.linear(a), self.linear(b)),
            K::Fst(a) => self
                .linear(a)
                .as_prod()
                .unwrap_or_else(|| invariant("fst"))
                .0
                .clone(),
            K::Snd(a) => self
                .linear(a)
                .as_prod()
                .unwrap_or_else(|| invariant("snd"))
                .1
                .clone(),
            K::App(f, _) => self.lin_cod(f),
            K::Let(_, _, b) | K::LinLet(_, _, b) => {
                let mut b = b;
                while let K::Let(_, _, next) | K::LinLet(_, _, next) = &b.kind {
                    b = next;
                }
                self.linear(b)
            }
            K::Copower(t, a) => LTy::copower(self.term(t), self.linear(a)),
            K::CopowFold(f, _) => {
                let g = self.cod(f);
                g.as_lin_fun()
                    .unwrap_or_else(|| invariant("copowfold"))
                    .1
                    .clone()
            }
            K::PowLam(b, a) => LTy::power(b.ty.clone(), self.linear(a)),
            K::PowApp(a, _) => self
                .linear(a)
                .as_power()
                .unwrap_or_else(|| invariant("power"))
                .1
                .clone(),
            K::Inl(a, r) => LTy::sum(self.linear(a), r.clone()),
            K::Inr(r, a) => LTy::sum(r.clone(), self.linear(a)),
            K::FromLeft(a) => self
                .linear(a)
                .as_sum()
                .unwrap_or_else(|| invariant("sum"))
                .0
                .clone(),
            K::FromRight(a) => self
                .linear(a)
                .as_sum()
                .unwrap_or_else(|| invariant("sum"))
                .1
                .clone(),
            K::Replicate(_, a) | K::OneHot(_, _, a) | K::Build(_, _, a) => {
                LTy::array(self.linear(a))
            }
            K::Sum(a) | K::Index(a, _) => self
                .linear(a)
                .as_array()
                .unwrap_or_else(|| invariant("array"))
                .clone(),
            K::ZipWith(fs, _) => {
                let fs = self.term(fs);
                let f = fs.as_array().unwrap_or_else(|| invariant("zipWith"));
                LTy::array(
                    f.as_lin_fun()
                        .unwrap_or_else(|| invariant("zipWith"))
                        .1
                        .clone(),
                )
            }
            K::Map(f, _) => LTy::array(self.lin_cod(f)),
            K::Scale(_, a) => self.linear(a),
            K::Chain(fs, _, rev, outs) => {
                let ft = self.term(fs);
                let f = ft.as_array().and_then(TTy::as_lin_fun);
                let (_, cod) = f.unwrap_or_else(|| invariant("lchain"));
                let b = |next: &LTy| {
                    next.as_sum()
                        .unwrap_or_else(|| invariant("lchain"))
                        .1
                        .clone()
                };
                match (*rev, *outs) {
                    (true, _) => cod.clone(),
                    (false, false) => b(cod),
                    (false, true) => {
                        let (next, c) = cod.as_prod().unwrap_or_else(|| invariant("lchainScan"));
                        LTy::prod(b(next), LTy::array(c.clone()))
                    }
                }
            }
            K::Case(_, _, a, _, _) => self.linear(a),
        }
    }
}
