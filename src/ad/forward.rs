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
//! F(τ)         = (τ x, λ̲d. τ d)                      (a tuple of chains of projections)
//! F(⟨f, g⟩)    = let (y, f') = F(f)[x] in let (z, g') = F(g)[x] in ((y, z), λ̲d. (f' • d, g' • d))
//! F(curry f)   = let h = λb. F(f)[(x, b)] in
//!                ( λb. let (c, f') = h b in (c, λ̲db. f' • (0, db)),     -- closureTan (h, f')
//!                  λ̲da. λb. (snd (h b)) • (da, 0) )                     -- closureEnvTan h
//! F(eval)      = let (g, b) = x in let (c, g') = g b in
//!                (c, λ̲d. (fst d) @ b + g' • (snd d))                    -- callTan (b, g')
//! F(c)         = (c, λ̲d. 0)                          (a literal constant)
//! F(op)        = let y = op x in (y, λ̲d. Dop(x; d)[y / op x])   (or the native kernel `Dop x`)
//! F(inl)       = (inl x, λ̲d. linl d)                 F(inr) = (inr x, λ̲d. linr d)
//! F([f, g])    = case x of inl a → let (c, f') = F(f)[a] in (c, λ̲d. f' • fromLeft d)
//!                        | inr b → let (c, g') = F(g)[b] in (c, λ̲d. g' • fromRight d)
//! F(dist)      = let (a, s) = x in case s of
//!                  inl b → (inl (a, b), λ̲d. linl (fst d, fromLeft (snd d)))
//!                | inr c → (inr (a, c), λ̲d. linr (fst d, fromRight (snd d)))
//! F([f, g] ∘ dist) = let (a, s) = x in case s of            (the derived `case`: one `case`)
//!                  inl b → let (d, f') = F(f)[(a, b)] in (d, λ̲t. f' • (fst t, fromLeft (snd t)))
//!                | inr c → let (d, g') = F(g)[(a, c)] in (d, λ̲t. g' • (fst t, fromRight (snd t)))
//! F(map f)     = let (γ, as) = x in let rs = map (λa. F(f)[(γ, a)]) as in
//!                (map fst rs, λ̲d. lbuild (length as) (λi. (snd (rs ! i)) • (fst d, (snd d) ! i)))
//! F(map2 f)    = let (γ, (as, bs)) = x in let rs = map2 (λa b. F(f)[(γ, (a, b))]) as bs in
//!                (map fst rs, λ̲d. lbuild (length as)
//!                   (λi. (snd (rs ! i)) • (fst d, ((fst (snd d)) ! i, (snd (snd d)) ! i))))
//! F(build f)   = let (γ, n) = x in let rs = build n (λi. F(f)[(γ, i)]) in
//!                (map fst rs, λ̲d. lbuild n (λi. (snd (rs ! i)) • (fst d, 0)))
//! F(index)     = let (xs, i) = x in (xs ! i, λ̲d. (fst d) ! i)
//! F([-]ₙ)      = let (x1, ..., xn) = x in ([x1, ..., xn], λ̲d. Σₖ onehot n k dₖ)
//! F(replicate) = let (n, a) = x in (replicate n a, λ̲d. replicate n (snd d))
//! F(length)    = (length x, λ̲d. 0)
//! F(it f)      = let (γ, a₀) = x in let (b, fs) = loopTape (λa. F(f)[(γ, a)]) a₀ in
//!                (b, λ̲d. lchain fs d)
//! ```
//!
//! In `F(it f)` the primal loop records each step's derivative `f'ₖ : F2 Γ × F2 A ⊸ F2 A ⊕
//! F2 B`; `lchain fs d` pushes the tangent through them in order, `w₀ = linl (snd d)`,
//! `wₖ₊₁ = f'ₖ • (fst d, fromLeft wₖ)`, and returns `fromRight wₙ` (the last step ran `inr`).
//! Per step that is O(1) work besides `f'` itself (`theory-notes/10-iteration.md`).
//!
//! `curry` and `eval` are written with three native kernels of [`crate::target::linear`] that
//! mean exactly the terms beside them but keep each closure call's derivative `f'` as a *tape*:
//! `callTan` then gets `(fst d) @ b` for the called closure's own tangent from `f'`, in one
//! application `f' • (da, snd d)`, instead of re-running its body `h b`
//! (`theory-notes/06-performance.md`).
//!
//! `F(f)[x]` is `f`'s term with its input bound to `x` by a `let` (or directly by the pattern
//! that receives it), so every subterm is computed once: the output is linear in the size of the
//! combinator, counting a projection chain `π` by its length (the compiler keeps a variable `k`
//! binders away O(log k) projections deep, [`crate::ccc::compile()`]; `τ`, a tuple of chains,
//! counts by its chains' total length). `if` is `[f, g] ∘ dist ∘ ⟨id, decide c⟩` with
//! `Bool = 1 + 1`; `decide`, comparisons and the other discrete primitives have zero
//! derivatives. The tangent of a sum is on the same side as its primal (`F2(A + B) = F2 A ⊕ F2 B`,
//! whose `fromLeft` of a right injection is zero).

use super::{
    Lets, Memo, Mor, PairParts, TypeMaps, apply, case_split, constant_image, lin_lam, lin_lam_ty,
    map_proj, map2_images, name, new_mor, pair_parts, path_lterm, path_term, per_element,
    projs_lterm, projs_term, results, split_args, split_linear, take_branch,
};
use crate::ccc::model::{Arrays, Cartesian, Category, Closed, Coproducts, Iteration, Primitives};
use crate::ccc::{Comb, Path, Projs, interpret};
use crate::deep::deep;
use crate::error::{Error, Result, Span};
use crate::prim::{Derivative, Prim};
use crate::source::term::Lit;
use crate::target::linear::LinFun;
use crate::target::term::{LTerm, LTermKind, LinPrim, Pat, Term, TermKind, Var};
use crate::target::types::{LTy, Ty};
use crate::types::Type;
use crate::value::Value;
use std::rc::Rc;

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
    /// `Lin F2(A)`, the type of a tangent variable.
    lin: Memo<Ty>,
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
            lin: Memo::new(),
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
        let ty = self.lin.get(a, || Ty::lin(self.tangent(a)));
        Term::pair(y, lin_lam_ty("d", ty, lin))
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
        // For constant images (c ∘ bang), β-reduced: (c, λ̲d. 0).
        if let (Some(c), Some(_)) = (constant_image(&g), constant_image(&f)) {
            let body = self.combined(&f.dom, c.clone(), |_| LTerm::zero(self.tangent(&g.cod)));
            return Ok(Mor {
                dom: f.dom,
                cod: g.cod,
                x: f.x,
                body,
            });
        }
        let df = Var::fresh(name("df"), self.derivative(&f.dom, &f.cod));
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
        // β-reduced for F(f) = (x, λ̲d. d) (the let of every source line is ⟨id, g⟩):
        // ((x, z), λ̲d. (d, g' • d)); and for a constant image F(g) = (c, λ̲d. 0):
        // ((y, c), λ̲d. (f' • d, 0)) (and the same for a constant image F(f)).
        let PairParts {
            lets,
            first: ty,
            second: tz,
            df: fv,
            dg: gv,
            id,
        } = pair_parts(self, &f, &g);
        let body = lets.finish(self.combined(&f.dom, Term::pair(ty, tz), |d| {
            let first = match &fv {
                Some(df) => apply(df, d.clone()),
                None if id => d.clone(),
                None => LTerm::zero(self.tangent(&f.cod)),
            };
            let second = match &gv {
                Some(dg) => apply(dg, d),
                None => LTerm::zero(self.tangent(&g.cod)),
            };
            LTerm::pair(first, second)
        }));
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
            self.combined(dom, path_term(path, Term::var(x)), |d| path_lterm(path, d))
        })
    }

    fn tuple(&self, dom: &Type, projs: &Projs) -> Result<Mor> {
        // (τ x, λ̲d. τ d): the same tuple of projection chains on primals and on tangents.
        let cod = projs.target(dom).expect("typed combinator");
        new_mor(self, dom, &cod, |x| {
            self.combined(dom, projs_term(projs, &Term::var(x)), |d| {
                projs_lterm(projs, &d)
            })
        })
    }
}

impl Closed for Forward {
    fn curry(&self, f: Mor, a: &Type, b: &Type, c: &Type) -> Result<Mor> {
        // let h = λb. F(f)[(x, b)] in
        // ( λb. let (c, f') = h b in (c, closureTan (h, f')),      -- = λ̲db. f' • (0, db), taped
        //   closureEnvTan h )                         -- = λ̲da. λb. (snd (h b)) • (da, 0)
        let bc = Type::fun(b.clone(), c.clone());
        let x = Var::fresh(name("x"), self.primal(a));
        let h_ty = Ty::fun(self.primal(b), self.image(&f.dom, c));
        let h = Var::fresh(name("h"), h_ty.clone());
        let b1 = Var::fresh(name("b"), self.primal(b));
        let h_def = Term::lam(
            &b1,
            Term::let_(&f.x, Term::pair(Term::var(&x), Term::var(&b1)), f.body),
        );
        let b2 = Var::fresh(name("b"), self.primal(b));
        let df_ty = self.derivative(&f.dom, c);
        let (cv, df) = (
            Var::fresh(name("c"), self.primal(c)),
            Var::fresh(name("df"), df_ty.clone()),
        );
        let (ta, tb, tc) = (self.tangent(a), self.tangent(b), self.tangent(c));
        let (ta2, tb2) = (ta.clone(), tb.clone());
        let tan = LinPrim::with_expansion(
            "closureTan",
            Ty::prod(h_ty.clone(), df_ty),
            tb.clone(),
            tc.clone(),
            |hf| {
                let (h, f) = hf.expect_pair();
                Ok(LinFun::closure_tan(h.clone(), lin_fun(f)))
            },
            // λ̲db. snd hf • (0, db)
            move |hf| {
                let db = Var::linear("db", tb2.clone());
                let d = LTerm::pair(LTerm::zero(ta2.clone()), LTerm::var(&db));
                Term::lin_lam(&db, LTerm::app(Term::snd(hf.clone()), d))
            },
        );
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
                    Term::mk(TermKind::LinPrim(
                        tan,
                        Term::pair(Term::var(&h), Term::var(&df)),
                    )),
                ),
            ),
        );
        let (ta2, pb) = (ta.clone(), self.primal(b));
        let env = LinPrim::with_expansion(
            "closureEnvTan",
            h_ty,
            ta,
            LTy::power(self.primal(b), tc),
            |h| Ok(LinFun::closure_env_tan(h.clone())),
            // λ̲da. \b -> snd (h b) • (da, 0)
            move |h| {
                let da = Var::linear("da", ta2.clone());
                let bv = Var::fresh("b", pb.clone());
                let hb = Term::snd(Term::app(h.clone(), Term::var(&bv)));
                let d = LTerm::pair(LTerm::var(&da), LTerm::zero(tb.clone()));
                let body = LTerm::mk(LTermKind::PowLam(bv, LTerm::app(hb, d)));
                Term::lin_lam(&da, body)
            },
        );
        let deriv = Term::mk(TermKind::LinPrim(env, Term::var(&h)));
        let body = Term::let_(&h, h_def, Term::pair(fun, deriv));
        Ok(Mor {
            dom: a.clone(),
            cod: bc,
            x,
            body,
        })
    }

    fn eval(&self, b: &Type, c: &Type) -> Result<Mor> {
        // let (g, b) = x in let (c, g') = g b in (c, callTan (b, g')),
        // where callTan (b, g') = λ̲d. (fst d) @ b + g' • (snd d) (one application of the
        // call's tape for both, if g' has one)
        let dom = Type::prod(Type::fun(b.clone(), c.clone()), b.clone());
        new_mor(self, &dom, c, |x| {
            let g = Var::fresh(name("g"), self.primal(&Type::fun(b.clone(), c.clone())));
            let bv = Var::fresh(name("b"), self.primal(b));
            let cv = Var::fresh(name("c"), self.primal(c));
            let dg = Var::fresh(name("dg"), self.derivative(b, c));
            let mut lets = Lets::new();
            lets.push_pair(&g, &bv, Term::var(x));
            lets.push_pair(&cv, &dg, Term::app(Term::var(&g), Term::var(&bv)));
            let td = self.tangent(&dom);
            let call = LinPrim::with_expansion(
                "callTan",
                Ty::prod(self.primal(b), self.derivative(b, c)),
                self.tangent(&dom),
                self.tangent(c),
                |bg| {
                    let (b, g) = bg.expect_pair();
                    Ok(LinFun::call_tan(b.clone(), &lin_fun(g)))
                },
                // λ̲d. (fst d) @ (fst bg) + snd bg • snd d
                move |bg| {
                    let d = Var::linear("d", td.clone());
                    let at = LTerm::mk(LTermKind::PowApp(
                        LTerm::fst(LTerm::var(&d)),
                        Term::fst(bg.clone()),
                    ));
                    let call = LTerm::app(Term::snd(bg.clone()), LTerm::snd(LTerm::var(&d)));
                    Term::lin_lam(&d, LTerm::plus(at, call))
                },
            );
            let call = Term::mk(TermKind::LinPrim(
                call,
                Term::pair(Term::var(&bv), Term::var(&dg)),
            ));
            lets.finish(self.combined(&dom, Term::var(&cv), |d| LTerm::app(call, d)))
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
        let x = Var::fresh(name("x"), self.primal(&dom));
        let mut lets = Lets::new();
        let tys: Vec<Ty> = op.params().iter().map(|p| self.primal(p)).collect();
        let args = split_args(&x, &tys, &mut lets);
        let mut value = Term::prim(op, args.clone());
        let deriv = match op.derivative() {
            Derivative::Missing => return Err(super::no_derivative(op)),
            Derivative::Zero => {
                lin_lam("d", self.tangent(&dom), |_| LTerm::zero(self.tangent(&cod)))
            }
            Derivative::Terms { forward, .. } => {
                let deriv = lin_lam("d", self.tangent(&dom), |d| {
                    forward(&args, &split_linear(d, op.params().len()))
                });
                // Where `Dop` applies `op` to the same arguments (tanh' = 1 - tanh x · tanh x,
                // exp' = exp x), it reads the primal result instead.
                let ty = self.primal(&cod);
                super::with_shared_result(deriv, ty, &mut lets, &mut value)
            }
            Derivative::JvpVjp { jvp, vjp } => {
                // `Dop` as a kernel whose declared transpose is the given `DopT`, so that
                // reverse mode by transposition uses the `vjp` rule too.
                let y = Var::fresh(name("y"), self.primal(&cod));
                lets.push(Pat::Var(y.clone()), value);
                let k = custom_kernel(op, jvp, vjp, self.primal(&dom), self.primal(&cod));
                let deriv = Term::mk(TermKind::LinPrim(
                    k,
                    Term::pair(Term::var(&x), Term::var(&y)),
                ));
                return Ok(Mor {
                    dom,
                    cod,
                    body: lets.finish(Term::pair(Term::var(&y), deriv)),
                    x,
                });
            }
            Derivative::Jvp(rule) => {
                // The primal result is shared with the rule.
                let y = Var::fresh(name("y"), self.primal(&cod));
                lets.push(Pat::Var(y.clone()), value);
                let deriv = super::jvp_rule(op, &**rule, &args, &y, self.tangent(&dom));
                return Ok(Mor {
                    dom,
                    cod,
                    body: lets.finish(Term::pair(Term::var(&y), deriv)),
                    x,
                });
            }
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

/// The kernels of a primitive whose `Dop` and `DopT` are both given
/// ([`Derivative::JvpVjp`]): at `(x, y)` (arguments and primal result), `λ̲d. Dop(x; d)` and,
/// declared its transpose, `λ̲v. DopT(x; v)`. Their expansions are the rules' terms; their
/// maps are those terms evaluated ([`crate::target::eval`]).
fn custom_kernel(
    op: &Prim,
    jvp: &Rc<crate::prim::JvpRule>,
    vjp: &Rc<crate::prim::VjpRule>,
    dom: Ty,
    cod: Ty,
) -> Rc<LinPrim> {
    let n = op.params().len();
    let (tdom, tcod) = (tangent(&op.domain()), tangent(op.result()));
    // The arguments: the components of `fst t`.
    let args = move |t: &Term| {
        let mut out = Vec::with_capacity(n);
        let mut rest = Term::fst(t.clone());
        for k in 0..n {
            if k + 1 == n {
                out.push(rest.clone());
            } else {
                out.push(Term::fst(rest.clone()));
                rest = Term::snd(rest);
            }
        }
        out
    };
    let kernel = |name: String, a: LTy, b: LTy, expand: Rc<dyn Fn(&Term) -> Term>| {
        let e = expand.clone();
        let param = Ty::prod(dom.clone(), cod.clone());
        let p = Var::fresh("k", param.clone());
        LinPrim::with_expansion(
            name,
            param,
            a,
            b,
            move |v| {
                let env = crate::target::eval::Env::unit(p.id, v.clone());
                match crate::target::eval::eval(&e(&Term::var(&p)), &env)? {
                    crate::value::Value::LinFun(f) => Ok(f),
                    _ => Err(crate::error::Error::runtime(
                        "internal error: a derivative rule is not a linear map",
                    )),
                }
            },
            move |t| expand(t),
        )
    };
    let (op1, jvp, tdom1) = (op.clone(), jvp.clone(), tdom.clone());
    let fwd = kernel(
        format!("{}Jvp", op.source_name()),
        tdom.clone(),
        tcod.clone(),
        Rc::new(move |t: &Term| {
            let a = args(t);
            let result = Term::snd(t.clone());
            lin_lam("d", tdom1.clone(), |d| {
                jvp(&crate::prim::JvpArgs {
                    this: &op1,
                    args: &a,
                    result: &result,
                    tangents: &super::split_linear(d, n),
                })
            })
        }),
    );
    let (op2, vjp, tcod2) = (op.clone(), vjp.clone(), tcod.clone());
    let rev = kernel(
        format!("{}Vjp", op.source_name()),
        tcod,
        tdom,
        Rc::new(move |t: &Term| {
            let a = args(t);
            let result = Term::snd(t.clone());
            lin_lam("v", tcod2.clone(), |v| {
                super::tuple_linear(vjp(&crate::prim::VjpArgs {
                    this: &op2,
                    args: &a,
                    result: &result,
                    cotangent: &v,
                }))
            })
        }),
    );
    LinPrim::pair_transposes(&fwd, &rev);
    fwd
}

impl Coproducts for Forward {
    fn inl(&self, a: &Type, b: &Type) -> Result<Mor> {
        // (inl x, λ̲d. linl d)
        let ab = Type::sum(a.clone(), b.clone());
        let tb = self.tangent(b);
        new_mor(self, a, &ab, |x| {
            let primal = Term::mk(TermKind::Inl(Term::var(x), self.primal(b)));
            self.combined(a, primal, |d| LTerm::mk(LTermKind::Inl(d, tb)))
        })
    }

    fn inr(&self, a: &Type, b: &Type) -> Result<Mor> {
        // (inr x, λ̲d. linr d)
        let ab = Type::sum(a.clone(), b.clone());
        let ta = self.tangent(a);
        new_mor(self, b, &ab, |x| {
            let primal = Term::mk(TermKind::Inr(self.primal(a), Term::var(x)));
            self.combined(b, primal, |d| LTerm::mk(LTermKind::Inr(ta, d)))
        })
    }

    fn copair(&self, f: Mor, g: Mor, a: &Type, b: &Type, c: &Type) -> Result<Mor> {
        // case x of inl a → let (c, f') = F(f)[a] in (c, λ̲d. f' • fromLeft d)
        //         | inr b → let (c, g') = F(g)[b] in (c, λ̲d. g' • fromRight d)
        let ab = Type::sum(a.clone(), b.clone());
        let branch = |m: Mor, left: bool| {
            let (y, dm) = results(self, &m, "c", "df");
            let mut lets = Lets::new();
            lets.push_pair(&y, &dm, m.body);
            let body = lets.finish(self.combined(&ab, Term::var(&y), |d| {
                let part = if left {
                    LTerm::mk(LTermKind::FromLeft(d))
                } else {
                    LTerm::mk(LTermKind::FromRight(d))
                };
                apply(&dm, part)
            }));
            (Pat::Var(m.x), body)
        };
        new_mor(self, &ab, c, |x| {
            let (p, l) = branch(f, true);
            let (q, r) = branch(g, false);
            Term::mk(TermKind::Case(Term::var(x), p, l, q, r))
        })
    }

    fn case(&self, f: Mor, g: Mor, (a, b, c, d): (&Type, &Type, &Type, &Type)) -> Result<Mor> {
        // F([f, g] ∘ dist) = let (a, s) = x in case s of
        //   inl b → let (d, f') = F(f)[(a, b)] in (d, λ̲t. f' • (fst t, fromLeft (snd t)))
        // | inr c → let (d, g') = F(g)[(a, c)] in (d, λ̲t. g' • (fst t, fromRight (snd t)))
        let dom = Type::prod(a.clone(), Type::sum(b.clone(), c.clone()));
        let mut fg = (Some(f), Some(g));
        new_mor(self, &dom, d, |x| {
            case_split(self, x, (a, b, c), |left, arg| {
                let m = take_branch(&mut fg, left);
                let (y, dm) = results(self, &m, "d", "df");
                let mut lets = Lets::new();
                lets.push(Pat::Var(m.x.clone()), arg);
                lets.push_pair(&y, &dm, m.body);
                lets.finish(self.combined(&dom, Term::var(&y), |t| {
                    let side = LTerm::snd(t.clone());
                    let side = if left {
                        LTerm::mk(LTermKind::FromLeft(side))
                    } else {
                        LTerm::mk(LTermKind::FromRight(side))
                    };
                    apply(&dm, LTerm::pair(LTerm::fst(t), side))
                }))
            })
        })
    }

    fn dist(&self, a: &Type, b: &Type, c: &Type) -> Result<Mor> {
        // let (a, s) = x in case s of
        //   inl b → (inl (a, b), λ̲d. linl (fst d, fromLeft (snd d)))
        // | inr c → (inr (a, c), λ̲d. linr (fst d, fromRight (snd d)))
        let (ab, ac) = (
            Type::prod(a.clone(), b.clone()),
            Type::prod(a.clone(), c.clone()),
        );
        let dom = Type::prod(a.clone(), Type::sum(b.clone(), c.clone()));
        let cod = Type::sum(ab.clone(), ac.clone());
        let (tab, tac) = (self.tangent(&ab), self.tangent(&ac));
        new_mor(self, &dom, &cod, |x| {
            case_split(self, x, (a, b, c), |left, arg| {
                let primal = if left {
                    TermKind::Inl(arg, self.primal(&ac))
                } else {
                    TermKind::Inr(self.primal(&ab), arg)
                };
                self.combined(&dom, Term::mk(primal), |d| {
                    let side = LTerm::snd(d.clone());
                    if left {
                        let from = LTerm::mk(LTermKind::FromLeft(side));
                        LTerm::mk(LTermKind::Inl(
                            LTerm::pair(LTerm::fst(d), from),
                            tac.clone(),
                        ))
                    } else {
                        let from = LTerm::mk(LTermKind::FromRight(side));
                        LTerm::mk(LTermKind::Inr(
                            tab.clone(),
                            LTerm::pair(LTerm::fst(d), from),
                        ))
                    }
                })
            })
        })
    }
}

/// `lbuild n (λi. (snd (rs ! i)) • arg(i))`: every element's derivative applied to its tangent.
fn element_tangents(n: Term, rs: &Var, arg: impl FnOnce(&Var) -> LTerm) -> LTerm {
    let i = Var::fresh(name("i"), Ty::Int);
    let deriv_i = Term::snd(Term::mk(TermKind::Index(Term::var(rs), Term::var(&i))));
    let body = LTerm::app(deriv_i, arg(&i));
    LTerm::mk(LTermKind::Build(n, i, body))
}

/// `l ! i` for a linear array `l`.
fn lindex(l: LTerm, i: &Var) -> LTerm {
    LTerm::mk(LTermKind::Index(l, Term::var(i)))
}

impl Arrays for Forward {
    fn map(&self, f: Mor, gamma: &Type, a: &Type, b: &Type) -> Result<Mor> {
        // let (γ, as) = x in let rs = map (λa. F(f)[(γ, a)]) as in
        // (map fst rs, λ̲d. lbuild (length as) (λi. (snd (rs ! i)) • (fst d, (snd d) ! i)))
        let dom = Type::prod(gamma.clone(), Type::array(a.clone()));
        let cod = Type::array(b.clone());
        let image = self.image(&f.dom, b);
        new_mor(self, &dom, &cod, |x| {
            let g = Var::fresh(name("γ"), self.primal(gamma));
            let xs = Var::fresh(name("as"), self.primal(&Type::array(a.clone())));
            let rs = Var::fresh(name("rs"), Ty::array(image));
            let ai = Var::fresh(name("a"), self.primal(a));
            let mut lets = Lets::new();
            lets.push_pair(&g, &xs, Term::var(x));
            let mapped = Term::mk(TermKind::Map(per_element(f, &g, &ai), Term::var(&xs)));
            lets.push(Pat::Var(rs.clone()), mapped);
            lets.finish(self.combined(&dom, map_proj(&rs, false), |d| {
                let n = Term::mk(TermKind::Length(Term::var(&xs)));
                element_tangents(n, &rs, |i| {
                    LTerm::pair(LTerm::fst(d.clone()), lindex(LTerm::snd(d), i))
                })
            }))
        })
    }

    fn map2(&self, f: Mor, gamma: &Type, a: &Type, b: &Type, c: &Type) -> Result<Mor> {
        // let (γ, (as, bs)) = x in let rs = map2 (λa b. F(f)[(γ, (a, b))]) as bs in
        // (map fst rs, λ̲d. lbuild (length as)
        //                    (λi. (snd (rs ! i)) • (fst d, ((fst (snd d)) ! i, (snd (snd d)) ! i))))
        let (aa, ab) = (Type::array(a.clone()), Type::array(b.clone()));
        let dom = Type::prod(gamma.clone(), Type::prod(aa.clone(), ab.clone()));
        let cod = Type::array(c.clone());
        let image = self.image(&f.dom, c);
        new_mor(self, &dom, &cod, |x| {
            let g = Var::fresh(name("γ"), self.primal(gamma));
            let xs = Var::fresh(name("as"), self.primal(&aa));
            let ys = Var::fresh(name("bs"), self.primal(&ab));
            let rs = Var::fresh(name("rs"), Ty::array(image));
            let mut lets = Lets::new();
            lets.push(
                Pat::Pair(
                    Box::new(Pat::Var(g.clone())),
                    Box::new(Pat::Pair(
                        Box::new(Pat::Var(xs.clone())),
                        Box::new(Pat::Var(ys.clone())),
                    )),
                ),
                Term::var(x),
            );
            lets.push(
                Pat::Var(rs.clone()),
                map2_images(self, f, &g, a, b, &xs, &ys),
            );
            lets.finish(self.combined(&dom, map_proj(&rs, false), |d| {
                let n = Term::mk(TermKind::Length(Term::var(&xs)));
                element_tangents(n, &rs, |i| {
                    let ds = LTerm::snd(d.clone());
                    LTerm::pair(
                        LTerm::fst(d),
                        LTerm::pair(lindex(LTerm::fst(ds.clone()), i), lindex(LTerm::snd(ds), i)),
                    )
                })
            }))
        })
    }

    fn build(&self, f: Mor, gamma: &Type, a: &Type) -> Result<Mor> {
        // let (γ, n) = x in let rs = build n (λi. F(f)[(γ, i)]) in
        // (map fst rs, λ̲d. lbuild n (λi. (snd (rs ! i)) • (fst d, 0)))
        let dom = Type::prod(gamma.clone(), Type::Int);
        let cod = Type::array(a.clone());
        let image = self.image(&f.dom, a);
        new_mor(self, &dom, &cod, |x| {
            let g = Var::fresh(name("γ"), self.primal(gamma));
            let n = Var::fresh(name("n"), Ty::Int);
            let i = Var::fresh(name("i"), Ty::Int);
            let rs = Var::fresh(name("rs"), Ty::array(image));
            let mut lets = Lets::new();
            lets.push_pair(&g, &n, Term::var(x));
            let built = Term::mk(TermKind::Build(Term::var(&n), per_element(f, &g, &i)));
            lets.push(Pat::Var(rs.clone()), built);
            lets.finish(self.combined(&dom, map_proj(&rs, false), |d| {
                element_tangents(Term::var(&n), &rs, |_| {
                    LTerm::pair(LTerm::fst(d), LTerm::zero(LTy::Unit))
                })
            }))
        })
    }

    fn index(&self, a: &Type) -> Result<Mor> {
        // let (xs, i) = x in (xs ! i, λ̲d. (fst d) ! i)
        let dom = Type::prod(Type::array(a.clone()), Type::Int);
        new_mor(self, &dom, a, |x| {
            let xs = Var::fresh(name("xs"), self.primal(&Type::array(a.clone())));
            let i = Var::fresh(name("i"), Ty::Int);
            let mut lets = Lets::new();
            lets.push_pair(&xs, &i, Term::var(x));
            let primal = Term::mk(TermKind::Index(Term::var(&xs), Term::var(&i)));
            lets.finish(self.combined(&dom, primal, |d| lindex(LTerm::fst(d), &i)))
        })
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
            let n = Var::fresh(name("n"), Ty::Int);
            let e = Var::fresh(name("a"), self.primal(a));
            let mut lets = Lets::new();
            lets.push_pair(&n, &e, Term::var(x));
            let primal = Term::mk(TermKind::Replicate(Term::var(&n), Term::var(&e)));
            lets.finish(self.combined(&dom, primal, |d| {
                LTerm::mk(LTermKind::Replicate(Term::var(&n), LTerm::snd(d)))
            }))
        })
    }

    fn array(&self, a: &Type, n: usize) -> Result<Mor> {
        // let (x1, ..., xn) = x in
        // ([x1, ..., xn], λ̲d. let lin r1 = snd d in ... let lin r(n-1) = snd r(n-2) in
        //                    onehot n 0 (fst d) + onehot n 1 (fst r1) + ... + onehot n (n-1) r(n-1))
        // The tangent's components are named by a chain of linear lets: `fst (snd (.. d))`
        // written out per component would be quadratic in n.
        let dom = Type::tuple(&vec![a.clone(); n]);
        let cod = Type::array(a.clone());
        new_mor(self, &dom, &cod, |x| {
            let mut lets = Lets::new();
            let items = split_args(x, &vec![self.primal(a); n], &mut lets);
            let primal = Term::mk(TermKind::Array(self.primal(a), items));
            lets.finish(self.combined(&dom, primal, |d| {
                let len = Term::lit(Lit::Int(n as i64));
                let mut rests = Vec::new();
                let mut comps = Vec::with_capacity(n);
                let mut rest = d;
                // The tangent type of the components after the k-th (shared subtrees of the
                // domain's tangent type: building each anew would be quadratic too).
                let mut rest_ty = self.tangent(&dom);
                for k in 0..n {
                    if k + 1 == n {
                        comps.push(rest.clone());
                        break;
                    }
                    comps.push(LTerm::fst(rest.clone()));
                    rest_ty = match rest_ty.as_prod() {
                        Some((_, tail)) => tail.clone(),
                        None => unreachable!("the tangent of a tuple of {n} components"),
                    };
                    if k + 2 < n {
                        let r = Var::linear(name("r"), rest_ty.clone());
                        rests.push((r.clone(), LTerm::snd(rest)));
                        rest = LTerm::var(&r);
                    } else {
                        rest = LTerm::snd(rest);
                    }
                }
                let sum = comps
                    .into_iter()
                    .enumerate()
                    .map(|(k, dk)| {
                        let at = Term::lit(Lit::Int(k as i64));
                        LTerm::mk(LTermKind::OneHot(len.clone(), at, dk))
                    })
                    .reduce(LTerm::plus)
                    .unwrap_or_else(|| LTerm::zero(self.tangent(&cod)));
                rests
                    .into_iter()
                    .rev()
                    .fold(sum, |body, (r, def)| LTerm::lin_let(&r, def, body))
            }))
        })
    }
}

fn lin_fun(v: &Value) -> LinFun {
    match v {
        Value::LinFun(f) => f.clone(),
        other => panic!("internal error: expected a linear map, found {other}"),
    }
}

impl Iteration for Forward {
    fn iter(&self, f: Mor, gamma: &Type, a: &Type, b: &Type) -> Result<Mor> {
        // let (γ, a₀) = x in let (b, fs) = loopTape (λa. F(f)[(γ, a)]) a₀ in (b, λ̲d. lchain fs d)
        let dom = Type::prod(gamma.clone(), a.clone());
        let entry_ty = self.derivative(&dom, &Type::sum(a.clone(), b.clone()));
        new_mor(self, &dom, b, |x| {
            let mut lets = Lets::new();
            let (bv, fs) = super::taped_loop(
                self,
                f,
                x,
                (gamma, a, b),
                entry_ty,
                super::pair_vars,
                &mut lets,
            );
            lets.finish(self.combined(&dom, Term::var(&bv), |d| {
                LTerm::mk(LTermKind::Chain(Term::var(&fs), d, false, false))
            }))
        })
    }

    fn iter_tape(&self, f: Mor, gamma: &Type, a: &Type, b: &Type, c: &Type) -> Result<Mor> {
        // let (γ, a₀) = x in let (b, t) = loopTape (λa. let (y, f') = F(f)[(γ, a)] in
        //   (fst y, (snd y, f'))) a₀ in ((b, map fst t), λ̲d. lchainScan (map snd t) d)
        let dom = Type::prod(gamma.clone(), a.clone());
        let step = Type::prod(Type::sum(a.clone(), b.clone()), c.clone());
        let entry_ty = self.derivative(&dom, &step);
        let cod = Type::prod(b.clone(), Type::array(c.clone()));
        new_mor(self, &dom, &cod, |x| {
            let mut lets = Lets::new();
            let (bv, cs, fs) =
                super::taped_loop_records(self, f, x, (gamma, a, b, c), entry_ty, &mut lets);
            let primal = Term::pair(Term::var(&bv), Term::var(&cs));
            lets.finish(self.combined(&dom, primal, |d| {
                LTerm::mk(LTermKind::Chain(Term::var(&fs), d, false, true))
            }))
        })
    }

    fn fix(&self, h: Mor, z: &Type, b: &Type, at: Span) -> Result<Mor> {
        // F(fix h) = (fix (λg. λz. let (c, f') = F(h)[(g, z)] in (c, λ̲dz. f' • (0, dz)))) x
        // The recursive function is closed, so its tangent is 0: each call's tangent is its
        // argument's pushed through the call's own derivative (`F(eval)` uses it).
        let zb = Type::fun(z.clone(), b.clone());
        let g = Var::fresh(name("g"), self.primal(&zb));
        let zv = Var::fresh(name("z"), self.primal(z));
        let cv = Var::fresh(name("c"), self.primal(b));
        let df = Var::fresh(name("df"), self.derivative(&h.dom, b));
        let dz = Var::linear(name("dz"), self.tangent(z));
        let d = LTerm::pair(LTerm::zero(self.tangent(&zb)), LTerm::var(&dz));
        let arg = Term::lin_lam(&dz, LTerm::app(Term::var(&df), d));
        let call = Term::let_(&h.x, Term::pair(Term::var(&g), Term::var(&zv)), h.body);
        let step = Term::let_pat(
            Pat::Pair(Box::new(Pat::Var(cv.clone())), Box::new(Pat::Var(df))),
            call,
            Term::pair(Term::var(&cv), arg),
        );
        let fixed = Term::mk(TermKind::Fix(Term::lam(&g, Term::lam(&zv, step)), at));
        new_mor(self, z, b, |x| Term::app(fixed, Term::var(x)))
    }
}
