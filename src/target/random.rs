//! Random well-typed linear terms, for property tests of the checker, the evaluator, the printer
//! and (later) the simplifier.
//!
//! [`linear_map`] builds a closed linear λ `λ̲v. l : L ⊸ L'` whose body uses every linear form:
//! zero, plus, pairs and projections, linear application of nested linear λs, Cartesian and
//! linear lets, scaling, copower singletons and folds, power introduction and elimination, linear
//! sums, and the array forms. The generator is type-directed, so its output is well-typed and
//! linear by construction; the tests check that the checker agrees and that the evaluated map is
//! a homomorphism, which is the checker's soundness claim.
//!
//! Generation is driven by a seeded deterministic generator (a proptest strategy maps seeds to
//! terms), so failures are reproducible from the seed.

use super::term::{LTerm, LTermKind as L, Lit, Pat, Term, TermKind as K, Var};
use super::types::{LTy, Ty};
use crate::prim::op;
use proptest::prelude::*;

/// A strategy for closed linear maps `λ̲v. l : dom ⊸ cod` of the given size budget.
pub fn linear_map(dom: LTy, cod: LTy, depth: u32) -> BoxedStrategy<Term> {
    any::<u64>()
        .prop_map(move |seed| Gen::new(seed).linear_map(&dom, &cod, depth))
        .boxed()
}

/// A strategy for small linear types whose copowers and powers are indexed by ground types (so
/// that the generator can write values of them).
pub fn small_lty(depth: u32) -> BoxedStrategy<LTy> {
    any::<u64>()
        .prop_map(move |seed| Gen::new(seed).lty(depth))
        .boxed()
}

/// The generator's state: a xorshift random number generator, and the length of every array
/// if the terms are to be well-shaped.
pub struct Gen(u64, Option<u64>);

impl Gen {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Gen {
        Gen(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1, None)
    }

    /// A generator of *well-shaped* terms: every array it makes has length `len`, and every
    /// index is below it, so that `+` adds arrays of the same length and no index reads past
    /// the end (as in derivative code, where (co)tangents have the shape of primals).
    /// Transposition ([`super::transpose`]) is exact on such terms.
    pub fn well_shaped(seed: u64, len: u64) -> Gen {
        Gen(
            seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1,
            Some(len.max(1)),
        )
    }

    /// The length of a new array: `len` for a well-shaped generator, else random below
    /// `1 + max`.
    fn length(&mut self, max: u64) -> u64 {
        match self.1 {
            Some(n) => n,
            None => 1 + self.below(max),
        }
    }

    /// A literal index: below the fixed length for a well-shaped generator, else below `max`.
    fn index(&mut self, max: u64) -> u64 {
        match self.1 {
            Some(n) => self.below(n),
            None => self.below(max),
        }
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn coin(&mut self) -> bool {
        self.below(2) == 0
    }

    fn real(&mut self) -> f64 {
        (self.below(41) as f64 - 20.0) / 4.0
    }

    /// A ground Cartesian type (copowers and powers are indexed by these).
    fn ground(&mut self) -> Ty {
        match self.below(4) {
            0 | 1 => Ty::Real,
            2 => Ty::Int,
            _ => Ty::Bool,
        }
    }

    /// A literal of a ground type.
    fn literal(&mut self, t: &Ty) -> Term {
        Term::lit(match t {
            Ty::Real => Lit::Real(self.real()),
            Ty::Int => Lit::Int(self.below(5) as i64),
            Ty::Bool => Lit::Bool(self.coin()),
            _ => Lit::Unit,
        })
    }

    /// A random small linear type.
    pub fn lty(&mut self, depth: u32) -> LTy {
        if depth == 0 {
            return if self.below(4) == 0 {
                LTy::Unit
            } else {
                LTy::Real
            };
        }
        match self.below(9) {
            0..=2 => LTy::Real,
            3 => LTy::prod(self.lty(depth - 1), self.lty(depth - 1)),
            4 => LTy::copower(self.ground(), self.lty(depth - 1)),
            5 => LTy::power(self.ground(), self.lty(depth - 1)),
            6 => LTy::sum(self.lty(depth - 1), self.lty(depth - 1)),
            7 => LTy::array(self.lty(depth - 1)),
            _ => LTy::Unit,
        }
    }

    /// A closed linear map `λ̲v. l : dom ⊸ cod`.
    pub fn linear_map(&mut self, dom: &LTy, cod: &LTy, depth: u32) -> Term {
        let v = Var::linear("v", dom.clone());
        let body = self.linear(&mut Vec::new(), std::slice::from_ref(&v), cod, depth);
        Term::lin_lam(&v, body)
    }

    /// A Cartesian real built from literals and the real variables in scope.
    fn scalar(&mut self, cart: &[Var]) -> Term {
        let reals: Vec<&Var> = cart.iter().filter(|x| x.ty == Ty::Real).collect();
        if !reals.is_empty() && self.coin() {
            let x = reals[self.below(reals.len() as u64) as usize];
            if self.coin() {
                Term::var(x)
            } else {
                Term::prim(&op("mul"), vec![Term::var(x), Term::real(self.real())])
            }
        } else {
            Term::real(self.real())
        }
    }

    /// A linear term of type `ty`, linear in `lin`, with Cartesian variables `cart` in scope.
    pub fn linear(&mut self, cart: &mut Vec<Var>, lin: &[Var], ty: &LTy, depth: u32) -> LTerm {
        let vars: Vec<&Var> = lin.iter().filter(|v| v.lin_ty() == Some(ty)).collect();
        if depth == 0 || self.below(8) == 0 {
            // Leaves: a linear variable, turned into a term of type `ty` by eliminations and
            // introductions if its type differs, or (rarely) zero.
            return if !vars.is_empty() && self.below(4) != 0 {
                LTerm::var(vars[self.below(vars.len() as u64) as usize])
            } else if !lin.is_empty() && self.below(8) != 0 {
                let u = &lin[self.below(lin.len() as u64) as usize];
                let from = u
                    .lin_ty()
                    .expect("linear variables have linear types")
                    .clone();
                self.convert(cart, LTerm::var(u), &from, ty)
            } else {
                LTerm::zero(ty.clone())
            };
        }
        let d = depth - 1;
        // Forms that fit any type, then the introduction forms of `ty`.
        match self.below(13) {
            0 => LTerm::plus(self.linear(cart, lin, ty, d), self.linear(cart, lin, ty, d)),
            1 => {
                let other = self.lty(1);
                if self.coin() {
                    let p = LTy::prod(ty.clone(), other);
                    LTerm::fst(self.linear(cart, lin, &p, d))
                } else {
                    let p = LTy::prod(other, ty.clone());
                    LTerm::snd(self.linear(cart, lin, &p, d))
                }
            }
            2 => {
                // (λ̲u. l') • l, a nested linear λ with its own variable.
                let mid = self.lty(1);
                let u = Var::linear("u", mid.clone());
                let mut inner_cart = cart.clone();
                let f = Term::lin_lam(
                    &u,
                    self.linear(&mut inner_cart, std::slice::from_ref(&u), ty, d),
                );
                LTerm::app(f, self.linear(cart, lin, &mid, d))
            }
            3 => {
                // let x = scalar in l
                let x = Var::fresh("x", Ty::Real);
                let e = self.scalar(cart);
                cart.push(x.clone());
                let body = self.linear(cart, lin, ty, d);
                cart.pop();
                LTerm::let_(&x, e, body)
            }
            4 => {
                // let lin u = l1 in l2
                let mid = self.lty(1);
                let u = Var::linear("u", mid.clone());
                let l1 = self.linear(cart, lin, &mid, d);
                let mut lin2 = lin.to_vec();
                lin2.push(u.clone());
                LTerm::lin_let(&u, l1, self.linear(cart, &lin2, ty, d))
            }
            5 => LTerm::scale(self.scalar(cart), self.linear(cart, lin, ty, d)),
            6 => {
                // copowfold (\b -> λ̲w. l) c
                let tau = self.ground();
                let inner = self.lty(1);
                let b = Var::fresh("b", tau.clone());
                let w = Var::linear("w", inner.clone());
                let mut fam_cart = cart.clone();
                fam_cart.push(b.clone());
                let fam_body = self.linear(&mut fam_cart, std::slice::from_ref(&w), ty, d);
                let fam = Term::lam(&b, Term::lin_lam(&w, fam_body));
                let c = self.linear(cart, lin, &LTy::copower(tau, inner), d);
                LTerm::mk(L::CopowFold(fam, c))
            }
            7 => {
                // p @ t
                let tau = self.ground();
                let p = self.linear(cart, lin, &LTy::power(tau.clone(), ty.clone()), d);
                let t = self.literal(&tau);
                LTerm::mk(L::PowApp(p, t))
            }
            8 => {
                let other = self.lty(1);
                if self.coin() {
                    let s = LTy::sum(ty.clone(), other);
                    LTerm::mk(L::FromLeft(self.linear(cart, lin, &s, d)))
                } else {
                    let s = LTy::sum(other, ty.clone());
                    LTerm::mk(L::FromRight(self.linear(cart, lin, &s, d)))
                }
            }
            9 => {
                let arr = LTy::array(ty.clone());
                if self.coin() {
                    LTerm::mk(L::Sum(self.linear(cart, lin, &arr, d)))
                } else {
                    let i = Term::lit(Lit::Int(self.index(4) as i64));
                    LTerm::mk(L::Index(self.linear(cart, lin, &arr, d), i))
                }
            }
            10 => {
                // case s of inl x -> l1 | inr y -> l2, on a comparison or an injection of reals
                let (scrutinee, p, q) = if self.coin() {
                    let c = Term::prim(&op("gt"), vec![self.scalar(cart), Term::real(0.0)]);
                    let s = Term::prim(&op("decide"), vec![c]);
                    (s, Pat::Wild(Ty::Unit), Pat::Wild(Ty::Unit))
                } else {
                    let e = self.scalar(cart);
                    let s = if self.coin() {
                        Term::mk(K::Inl(e, Ty::Real))
                    } else {
                        Term::mk(K::Inr(Ty::Real, e))
                    };
                    let (x, y) = (Var::fresh("x", Ty::Real), Var::fresh("y", Ty::Real));
                    (s, Pat::Var(x), Pat::Var(y))
                };
                let mut branch = |this: &mut Self, pat: &Pat| {
                    let bound = pat.vars().into_iter().cloned().collect::<Vec<_>>();
                    let n = cart.len();
                    cart.extend(bound);
                    let l = this.linear(cart, lin, ty, d);
                    cart.truncate(n);
                    l
                };
                let a = branch(self, &p);
                let b = branch(self, &q);
                LTerm::mk(L::Case(scrutinee, Box::new(p), a, Box::new(q), b))
            }
            _ => self.intro(cart, lin, ty, d),
        }
    }

    /// Turns `l : from` into a term of type `to` that depends linearly on it: eliminate `from`
    /// down to a real (or unit), then build `to` from that.
    fn convert(&mut self, cart: &[Var], l: LTerm, from: &LTy, to: &LTy) -> LTerm {
        if from == to {
            return l;
        }
        match from {
            LTy::Real | LTy::Unit => self.lift(l, from, to),
            LTy::Prod(p) => {
                if self.coin() {
                    self.convert(cart, LTerm::fst(l), &p.0, to)
                } else {
                    self.convert(cart, LTerm::snd(l), &p.1, to)
                }
            }
            LTy::Sum(p) => {
                if self.coin() {
                    self.convert(cart, LTerm::mk(L::FromLeft(l)), &p.0, to)
                } else {
                    self.convert(cart, LTerm::mk(L::FromRight(l)), &p.1, to)
                }
            }
            LTy::Array(e) => {
                let l = if self.coin() {
                    LTerm::mk(L::Sum(l))
                } else {
                    LTerm::mk(L::Index(l, Term::lit(Lit::Int(self.index(3) as i64))))
                };
                self.convert(cart, l, e, to)
            }
            LTy::Power(p) => {
                let t = self.literal(&p.0);
                self.convert(cart, LTerm::mk(L::PowApp(l, t)), &p.1, to)
            }
            LTy::Copower(p) => {
                // copowfold (\b -> λ̲w. convert w) l, scaled by b when b is a real.
                let b = Var::fresh("b", p.0.clone());
                let w = Var::linear("w", p.1.clone());
                let mut inner = cart.to_vec();
                inner.push(b.clone());
                let mut body = self.convert(&inner, LTerm::var(&w), &p.1, to);
                if p.0 == Ty::Real {
                    body = LTerm::scale(Term::var(&b), body);
                }
                let fam = Term::lam(&b, Term::lin_lam(&w, body));
                LTerm::mk(L::CopowFold(fam, l))
            }
        }
    }

    /// Builds a term of type `to` from `l` of type `Real` or `Unit` (which it may use several
    /// times: duplication is linear).
    fn lift(&mut self, l: LTerm, from: &LTy, to: &LTy) -> LTerm {
        match to {
            _ if from == to => l,
            LTy::Real | LTy::Unit => LTerm::zero(to.clone()),
            LTy::Prod(p) => LTerm::pair(self.lift(l.clone(), from, &p.0), self.lift(l, from, &p.1)),
            LTy::Sum(p) => {
                if self.coin() {
                    LTerm::mk(L::Inl(self.lift(l, from, &p.0), p.1.clone()))
                } else {
                    LTerm::mk(L::Inr(p.0.clone(), self.lift(l, from, &p.1)))
                }
            }
            LTy::Array(e) => {
                let n = Term::lit(Lit::Int(self.length(3) as i64));
                if self.coin() {
                    LTerm::mk(L::Replicate(n, self.lift(l, from, e)))
                } else {
                    let i = Term::lit(Lit::Int(0));
                    LTerm::mk(L::OneHot(n, i, self.lift(l, from, e)))
                }
            }
            LTy::Power(p) => {
                let b = Var::fresh("b", p.0.clone());
                let mut body = self.lift(l, from, &p.1);
                if p.0 == Ty::Real {
                    body = LTerm::scale(Term::var(&b), body);
                }
                LTerm::mk(L::PowLam(b, body))
            }
            LTy::Copower(p) => {
                let t = self.literal(&p.0);
                LTerm::mk(L::Copower(t, self.lift(l, from, &p.1)))
            }
        }
    }

    /// An introduction form of `ty` (or a leaf if it has none).
    fn intro(&mut self, cart: &mut Vec<Var>, lin: &[Var], ty: &LTy, d: u32) -> LTerm {
        let int = |i: u64| Term::lit(Lit::Int(i as i64));
        match ty {
            LTy::Real | LTy::Unit => self.linear(cart, lin, ty, 0),
            LTy::Prod(p) => LTerm::pair(
                self.linear(cart, lin, &p.0, d),
                self.linear(cart, lin, &p.1, d),
            ),
            LTy::Copower(p) => {
                let t = self.literal(&p.0);
                LTerm::mk(L::Copower(t, self.linear(cart, lin, &p.1, d)))
            }
            LTy::Power(p) => {
                let b = Var::fresh("b", p.0.clone());
                cart.push(b.clone());
                let body = self.linear(cart, lin, &p.1, d);
                cart.pop();
                LTerm::mk(L::PowLam(b, body))
            }
            LTy::Sum(p) => {
                if self.coin() {
                    LTerm::mk(L::Inl(self.linear(cart, lin, &p.0, d), p.1.clone()))
                } else {
                    LTerm::mk(L::Inr(p.0.clone(), self.linear(cart, lin, &p.1, d)))
                }
            }
            LTy::Array(e) => {
                let n = self.length(4);
                match self.below(5) {
                    0 => LTerm::mk(L::Replicate(int(n), self.linear(cart, lin, e, d))),
                    1 => {
                        let i = int(self.below(n));
                        LTerm::mk(L::OneHot(int(n), i, self.linear(cart, lin, e, d)))
                    }
                    2 => {
                        let i = Var::fresh("i", Ty::Int);
                        cart.push(i.clone());
                        let body = self.linear(cart, lin, e, d);
                        cart.pop();
                        LTerm::mk(L::Build(int(n), i, body))
                    }
                    3 => {
                        // lmap (λ̲u. l) xs
                        let src = self.lty(1);
                        let f = self.linear_map(&src, e, d);
                        let xs = self.linear(cart, lin, &LTy::array(src), d);
                        LTerm::mk(L::Map(f, xs))
                    }
                    _ => {
                        // zipWith [λ̲u. l, ...] xs
                        let src = self.lty(1);
                        let fs = (0..n).map(|_| self.linear_map(&src, e, d)).collect();
                        let fs = Term::mk(K::Array(Ty::lin_fun(src.clone(), (**e).clone()), fs));
                        let xs = self.linear(cart, lin, &LTy::array(src), d);
                        LTerm::mk(L::ZipWith(fs, xs))
                    }
                }
            }
        }
    }
}
