//! Forward-mode CHAD: the structure-preserving functor from the free category into the
//! Grothendieck construction `Σ_C L` (CHAD paper §6-7; DESIGN.md §5).
//!
//! **Typing judgement.** A combinator `c : A → B` becomes a term with one free variable
//!
//! ```text
//! x : F1(A)  ⊢  F(c) : F1(B) × (F2(A) ⊸ F2(B))
//! ```
//!
//! the primal result paired with the derivative at `x`, a linear map of tangents. The type maps
//! (the functor on objects; [`primal`] is `F1`, [`tangent`] is `F2`):
//!
//! ```text
//! F1(Real) = Real    F1(Int) = Int    F1(Bool) = Bool    F1(1) = 1
//! F1(A × B) = F1 A × F1 B        F1(A + B) = F1 A + F1 B        F1(Array A) = Array (F1 A)
//! F1(A ⇒ B) = F1 A → F1 B × (F2 A ⊸ F2 B)
//! F2(Real) = Real    F2(Int) = F2(Bool) = F2(1) = 1
//! F2(A × B) = F2 A × F2 B        F2(A + B) = F2 A ⊕ F2 B        F2(Array A) = Array (F2 A)
//! F2(A ⇒ B) = F1 A → F2 B                                       (a power)
//! ```
//!
//! **Rules** (the functor on morphisms), one per method of the structure traits below; `d` is
//! the tangent, `λ̲` a linear λ, `•` linear application, `@` power elimination:
//!
//! ```text
//! F(id)        = (x, λ̲d. d)
//! F(g ∘ f)     = let (y, f') = F(f)[x] in let (z, g') = F(g)[y] in (z, λ̲d. g' • (f' • d))
//! F(bang)      = ((), λ̲d. 0)
//! F(fst)       = (fst x, λ̲d. fst d)                 F(snd) = (snd x, λ̲d. snd d)
//! F(π)         = (π x, λ̲d. π d)                      (a chain of projections)
//! F(⟨f, g⟩)    = let (y, f') = F(f)[x] in let (z, g') = F(g)[x] in ((y, z), λ̲d. (f' • d, g' • d))
//! F(curry f)   = let h = λb. F(f)[(x, b)] in
//!                ( λb. let (c, f') = h b in (c, λ̲db. f' • (0, db)),
//!                  λ̲da. λb. (snd (h b)) • (da, 0) )
//! F(eval)      = let (g, b) = x in let (c, g') = g b in (c, λ̲d. (fst d) @ b + g' • (snd d))
//! F(c)         = (c, λ̲d. 0)                          (a literal constant)
//! F(op)        = (op x, λ̲d. Dop(x; d))               (or the native kernel `Dop x`)
//! F(map f)     = let (γ, as) = x in let rs = map (λa. F(f)[(γ, a)]) as in
//!                (map fst rs, λ̲d. lbuild (length as) (λi. (snd (rs ! i)) • (fst d, (snd d) ! i)))
//! F(replicate) = let (n, a) = x in (replicate n a, λ̲d. replicate n (snd d))
//! F(length)    = (length x, λ̲d. 0)
//! ```
//!
//! `F(f)[x]` is `f`'s term with its input bound to `x` by a `let` (or directly by the pattern
//! that receives it), so every subterm is computed once: the output is linear in the size of the
//! combinator, counting a projection chain `π` by its length (a variable `k` binders away is
//! `k` nested `fst`s, so a program that keeps using an early variable gets quadratic
//! derivative code; the simplifier is to remove this). Sums, conditionals and the array operations other than `map`, `replicate`,
//! `length` (and the primitives `sum`, `dot`) are reported as not yet supported.

use super::{
    Lets, Memo, Mor, TypeMaps, apply, lin_lam, new_mor, results, split_args, split_linear,
    unsupported,
};
use crate::ccc::model::{Arrays, Cartesian, Category, Closed, Primitives};
use crate::ccc::{Comb, Path, Step, interpret};
use crate::deep::deep;
use crate::error::{Error, Result, Span};
use crate::prim::{Derivative, Prim};
use crate::source::term::Lit;
use crate::target::term::{LTerm, LTermKind, Pat, Term, TermKind, Var};
use crate::target::types::{LTy, Ty};
use crate::types::Type;

/// `F1(A)`: the type of forward primals.
pub fn primal(a: &Type) -> Ty {
    Forward::new().primal(a)
}

/// `F2(A)`: the type of tangents.
pub fn tangent(a: &Type) -> LTy {
    Forward::new().tangent(a)
}

/// Forward CHAD of a combinator `c : A → B`: `x : F1(A) ⊢ F(c) : F1(B) × (F2(A) ⊸ F2(B))`.
pub fn transform(c: &Comb) -> Result<Mor> {
    interpret(c, &Forward::new())
}

/// The forward-mode model `Σ_C L`. Holds memo tables for the type maps.
pub struct Forward {
    f1: Memo<Ty>,
    f2: Memo<LTy>,
}

impl Default for Forward {
    fn default() -> Self {
        Forward::new()
    }
}

impl Forward {
    /// A fresh model.
    pub fn new() -> Forward {
        Forward {
            f1: Memo::new(),
            f2: Memo::new(),
        }
    }

    /// `F2(A)`.
    pub fn tangent(&self, a: &Type) -> LTy {
        self.f2.get(a, || {
            deep(|| match a {
                Type::Real => LTy::Real,
                Type::Int | Type::Bool | Type::Unit => LTy::Unit,
                Type::Prod(p) => LTy::prod(self.tangent(&p.0), self.tangent(&p.1)),
                Type::Sum(p) => LTy::sum(self.tangent(&p.0), self.tangent(&p.1)),
                Type::Array(e) => LTy::array(self.tangent(e)),
                Type::Fun(p) => LTy::power(self.primal(&p.0), self.tangent(&p.1)),
            })
        })
    }

    /// `(y, λ̲d. lin(d))` with `d : F2(a)`.
    fn combined(&self, a: &Type, y: Term, lin: impl FnOnce(LTerm) -> LTerm) -> Term {
        Term::pair(y, lin_lam("d", self.tangent(a), lin))
    }
}

impl TypeMaps for Forward {
    /// `F1(A)`.
    fn primal(&self, a: &Type) -> Ty {
        self.f1.get(a, || {
            deep(|| match a {
                Type::Real => Ty::Real,
                Type::Int => Ty::Int,
                Type::Bool => Ty::Bool,
                Type::Unit => Ty::Unit,
                Type::Prod(p) => Ty::prod(self.primal(&p.0), self.primal(&p.1)),
                Type::Sum(p) => Ty::sum(self.primal(&p.0), self.primal(&p.1)),
                Type::Array(e) => Ty::array(self.primal(e)),
                Type::Fun(p) => Ty::fun(
                    self.primal(&p.0),
                    Ty::prod(self.primal(&p.1), self.derivative(&p.0, &p.1)),
                ),
            })
        })
    }

    /// The type of the derivative of a morphism `A → B`: `F2(A) ⊸ F2(B)`.
    fn derivative(&self, a: &Type, b: &Type) -> Ty {
        Ty::lin_fun(self.tangent(a), self.tangent(b))
    }
}

impl Category for Forward {
    type Mor = Mor;
    type Error = Error;

    fn id(&self, a: &Type) -> Result<Mor> {
        new_mor(self, a, a, |x| self.combined(a, Term::var(x), |d| d))
    }

    fn compose(&self, g: Mor, f: Mor) -> Result<Mor> {
        // let (y, f') = F(f)[x] in let (z, g') = F(g)[y] in (z, λ̲d. g' • (f' • d)),
        // with g's input variable receiving y directly.
        let df = Var::fresh("df", self.derivative(&f.dom, &f.cod));
        let (z, dg) = results(self, &g, "z", "dg");
        let mut lets = Lets::new();
        lets.push_pair(&g.x, &df, f.body);
        lets.push_pair(&z, &dg, g.body);
        let body = lets.finish(self.combined(&f.dom, Term::var(&z), |d| apply(&dg, apply(&df, d))));
        Ok(Mor {
            dom: f.dom,
            cod: g.cod,
            x: f.x,
            body,
        })
    }

    fn located(&self, m: Mor, at: Span) -> Mor {
        super::located(m, at)
    }
}

impl Cartesian for Forward {
    fn bang(&self, a: &Type) -> Result<Mor> {
        new_mor(self, a, &Type::Unit, |_| {
            self.combined(a, Term::unit(), |_| LTerm::zero(LTy::Unit))
        })
    }

    fn fst(&self, a: &Type, b: &Type) -> Result<Mor> {
        let ab = Type::prod(a.clone(), b.clone());
        new_mor(self, &ab, a, |x| {
            self.combined(&ab, Term::fst(Term::var(x)), LTerm::fst)
        })
    }

    fn snd(&self, a: &Type, b: &Type) -> Result<Mor> {
        let ab = Type::prod(a.clone(), b.clone());
        new_mor(self, &ab, b, |x| {
            self.combined(&ab, Term::snd(Term::var(x)), LTerm::snd)
        })
    }

    fn pair(&self, f: Mor, g: Mor) -> Result<Mor> {
        // let (y, f') = F(f)[x] in let (z, g') = F(g)[x] in ((y, z), λ̲d. (f' • d, g' • d))
        let (y, df) = results(self, &f, "y", "df");
        let (z, dg) = results(self, &g, "z", "dg");
        let mut lets = Lets::new();
        lets.push_pair(&y, &df, f.body);
        lets.push(Pat::Var(g.x.clone()), Term::var(&f.x));
        lets.push_pair(&z, &dg, g.body);
        let body = lets.finish(self.combined(
            &f.dom,
            Term::pair(Term::var(&y), Term::var(&z)),
            |d| LTerm::pair(apply(&df, d.clone()), apply(&dg, d)),
        ));
        Ok(Mor {
            cod: Type::prod(f.cod, g.cod),
            dom: f.dom,
            x: f.x,
            body,
        })
    }

    fn proj(&self, dom: &Type, path: &Path) -> Result<Mor> {
        // (π x, λ̲d. π d): the same chain of projections on primals and on tangents.
        let cod = path.target(dom).expect("typed combinator");
        new_mor(self, dom, &cod, |x| {
            let mut p = Term::var(x);
            for s in path.expanded() {
                p = match s {
                    Step::Fst => Term::fst(p),
                    Step::Snd => Term::snd(p),
                };
            }
            self.combined(dom, p, |mut d| {
                for s in path.expanded() {
                    d = match s {
                        Step::Fst => LTerm::fst(d),
                        Step::Snd => LTerm::snd(d),
                    };
                }
                d
            })
        })
    }
}

impl Closed for Forward {
    fn curry(&self, f: Mor, a: &Type, b: &Type, c: &Type) -> Result<Mor> {
        // let h = λb. F(f)[(x, b)] in
        // ( λb. let (c, f') = h b in (c, λ̲db. f' • (0, db)),  λ̲da. λb. (snd (h b)) • (da, 0) )
        let bc = Type::fun(b.clone(), c.clone());
        let x = Var::fresh("x", self.primal(a));
        let h_ty = Ty::fun(self.primal(b), self.image(&f.dom, c));
        let h = Var::fresh("h", h_ty);
        let b1 = Var::fresh("b", self.primal(b));
        let h_def = Term::lam(
            &b1,
            Term::let_(&f.x, Term::pair(Term::var(&x), Term::var(&b1)), f.body),
        );
        let b2 = Var::fresh("b", self.primal(b));
        let (cv, df) = (
            Var::fresh("c", self.primal(c)),
            Var::fresh("df", self.derivative(&f.dom, c)),
        );
        let (ta, tb) = (self.tangent(a), self.tangent(b));
        let fun = Term::lam(
            &b2,
            Term::let_pat(
                Pat::Pair(
                    Box::new(Pat::Var(cv.clone())),
                    Box::new(Pat::Var(df.clone())),
                ),
                Term::app(Term::var(&h), Term::var(&b2)),
                Term::pair(
                    Term::var(&cv),
                    lin_lam("db", tb.clone(), |db| {
                        apply(&df, LTerm::pair(LTerm::zero(ta.clone()), db))
                    }),
                ),
            ),
        );
        let b3 = Var::fresh("b", self.primal(b));
        let deriv = lin_lam("da", ta, |da| {
            let hb = Term::snd(Term::app(Term::var(&h), Term::var(&b3)));
            LTerm::mk(LTermKind::PowLam(
                b3.clone(),
                LTerm::app(hb, LTerm::pair(da, LTerm::zero(tb))),
            ))
        });
        let body = Term::let_(&h, h_def, Term::pair(fun, deriv));
        Ok(Mor {
            dom: a.clone(),
            cod: bc,
            x,
            body,
        })
    }

    fn eval(&self, b: &Type, c: &Type) -> Result<Mor> {
        // let (g, b) = x in let (c, g') = g b in (c, λ̲d. (fst d) @ b + g' • (snd d))
        let dom = Type::prod(Type::fun(b.clone(), c.clone()), b.clone());
        new_mor(self, &dom, c, |x| {
            let g = Var::fresh("g", self.primal(&Type::fun(b.clone(), c.clone())));
            let bv = Var::fresh("b", self.primal(b));
            let cv = Var::fresh("c", self.primal(c));
            let dg = Var::fresh("dg", self.derivative(b, c));
            let mut lets = Lets::new();
            lets.push_pair(&g, &bv, Term::var(x));
            lets.push_pair(&cv, &dg, Term::app(Term::var(&g), Term::var(&bv)));
            lets.finish(self.combined(&dom, Term::var(&cv), |d| {
                LTerm::plus(
                    LTerm::mk(LTermKind::PowApp(LTerm::fst(d.clone()), Term::var(&bv))),
                    apply(&dg, LTerm::snd(d)),
                )
            }))
        })
    }
}

impl Primitives for Forward {
    fn constant(&self, lit: &Lit) -> Result<Mor> {
        let ty = lit.ty();
        new_mor(self, &Type::Unit, &ty, |_| {
            self.combined(&Type::Unit, Term::lit(*lit), |_| {
                LTerm::zero(self.tangent(&ty))
            })
        })
    }

    fn prim(&self, op: &Prim) -> Result<Mor> {
        let (dom, cod) = (op.domain(), op.result().clone());
        let x = Var::fresh("x", self.primal(&dom));
        let mut lets = Lets::new();
        let tys: Vec<Ty> = op.params().iter().map(|p| self.primal(p)).collect();
        let args = split_args(&x, &tys, &mut lets);
        let value = Term::prim(op, args.clone());
        let deriv = match op.derivative() {
            Derivative::Missing => return Err(super::no_derivative(op)),
            Derivative::Zero => {
                lin_lam("d", self.tangent(&dom), |_| LTerm::zero(self.tangent(&cod)))
            }
            Derivative::Terms { forward, .. } => lin_lam("d", self.tangent(&dom), |d| {
                forward(&args, &split_linear(d, op.params().len()))
            }),
            Derivative::Native { forward, .. } => {
                Term::mk(TermKind::LinPrim(forward.clone(), Term::var(&x)))
            }
        };
        Ok(Mor {
            dom,
            cod,
            body: lets.finish(Term::pair(value, deriv)),
            x,
        })
    }
}

unsupported_coproducts!(Forward);

impl Arrays for Forward {
    fn map(&self, f: Mor, gamma: &Type, a: &Type, b: &Type) -> Result<Mor> {
        // let (γ, as) = x in let rs = map (λa. F(f)[(γ, a)]) as in
        // (map fst rs, λ̲d. lbuild (length as) (λi. (snd (rs ! i)) • (fst d, (snd d) ! i)))
        let dom = Type::prod(gamma.clone(), Type::array(a.clone()));
        let cod = Type::array(b.clone());
        let image = self.image(&f.dom, b);
        new_mor(self, &dom, &cod, |x| {
            let g = Var::fresh("γ", self.primal(gamma));
            let xs = Var::fresh("as", self.primal(&Type::array(a.clone())));
            let rs = Var::fresh("rs", Ty::array(image.clone()));
            let ai = Var::fresh("a", self.primal(a));
            let per_elem = Term::lam(
                &ai,
                Term::let_(&f.x, Term::pair(Term::var(&g), Term::var(&ai)), f.body),
            );
            let mut lets = Lets::new();
            lets.push_pair(&g, &xs, Term::var(x));
            lets.push(
                Pat::Var(rs.clone()),
                Term::mk(TermKind::Map(per_elem, Term::var(&xs))),
            );
            let r = Var::fresh("r", image.clone());
            let primal = Term::mk(TermKind::Map(
                Term::lam(&r, Term::fst(Term::var(&r))),
                Term::var(&rs),
            ));
            let i = Var::fresh("i", Ty::Int);
            lets.finish(self.combined(&dom, primal, |d| {
                let deriv_i = Term::snd(Term::mk(TermKind::Index(Term::var(&rs), Term::var(&i))));
                let arg = LTerm::pair(
                    LTerm::fst(d.clone()),
                    LTerm::mk(LTermKind::Index(LTerm::snd(d), Term::var(&i))),
                );
                LTerm::mk(LTermKind::Build(
                    Term::mk(TermKind::Length(Term::var(&xs))),
                    i.clone(),
                    LTerm::app(deriv_i, arg),
                ))
            }))
        })
    }
    fn map2(&self, _: Mor, _: &Type, _: &Type, _: &Type, _: &Type) -> Result<Mor> {
        Err(unsupported("`map2`"))
    }
    fn build(&self, _: Mor, _: &Type, _: &Type) -> Result<Mor> {
        Err(unsupported("`build`"))
    }
    fn index(&self, _: &Type) -> Result<Mor> {
        Err(unsupported("array indexing"))
    }
    fn length(&self, a: &Type) -> Result<Mor> {
        // (length x, λ̲d. 0)
        let dom = Type::array(a.clone());
        new_mor(self, &dom, &Type::Int, |x| {
            self.combined(&dom, Term::mk(TermKind::Length(Term::var(x))), |_| {
                LTerm::zero(LTy::Unit)
            })
        })
    }
    fn replicate(&self, a: &Type) -> Result<Mor> {
        // let (n, a) = x in (replicate n a, λ̲d. replicate n (snd d))
        let dom = Type::prod(Type::Int, a.clone());
        new_mor(self, &dom, &Type::array(a.clone()), |x| {
            let n = Var::fresh("n", Ty::Int);
            let e = Var::fresh("a", self.primal(a));
            let mut lets = Lets::new();
            lets.push_pair(&n, &e, Term::var(x));
            let primal = Term::mk(TermKind::Replicate(Term::var(&n), Term::var(&e)));
            lets.finish(self.combined(&dom, primal, |d| {
                LTerm::mk(LTermKind::Replicate(Term::var(&n), LTerm::snd(d)))
            }))
        })
    }
    fn array(&self, _: &Type, _: usize) -> Result<Mor> {
        Err(unsupported("array literals"))
    }
}
