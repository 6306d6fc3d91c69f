//! Reverse-mode CHAD: the structure-preserving functor from the free category into the
//! Grothendieck construction `Σ_C L^op` (CHAD paper §6-7; DESIGN.md §5).
//!
//! **Typing judgement.** A combinator `c : A → B` becomes a term with one free variable
//!
//! ```text
//! x : R1(A)  ⊢  R(c) : R1(B) × (R2(B) ⊸ R2(A))
//! ```
//!
//! the primal result paired with the transposed derivative at `x`, a linear map from output
//! cotangents to input cotangents. The type maps ([`primal`] is `R1`, [`cotangent`] is `R2`):
//!
//! ```text
//! R1(Real) = Real    R1(Int) = Int    R1(Bool) = Bool    R1(1) = 1
//! R1(A × B) = R1 A × R1 B        R1(A + B) = R1 A + R1 B        R1(Array A) = Array (R1 A)
//! R1(A ⇒ B) = R1 A → R1 B × (R2 B ⊸ R2 A)
//! R2(Real) = Real    R2(Int) = R2(Bool) = R2(1) = 1
//! R2(A × B) = R2 A × R2 B        R2(A + B) = R2 A ⊕ R2 B        R2(Array A) = Array (R2 A)
//! R2(A ⇒ B) = !(R1 A) ⊗ R2 B                                    (a copower)
//! ```
//!
//! The cotangent of a function is a copower: a formal sum of (argument, output cotangent) pairs,
//! one per call, which `curry`'s transposed derivative folds back into a cotangent of the
//! captured environment. The paper's fold re-runs the closure body `h b` for every pair; here
//! `curry` and `eval` use three native kernels of [`crate::target::linear`] that mean exactly
//! the terms beside them in the rules below but keep each call's derivative `f'` as a *tape* on
//! its copower pair, so the fold reuses `f'` (and the application `f' • v` already made for the
//! argument half) instead (`theory-notes/06-performance.md`).
//!
//! **Rules** (`v` the output cotangent, `λ̲` a linear λ, `•` linear application, `!b ⊗ v` a
//! copower singleton):
//!
//! ```text
//! R(id)        = (x, λ̲v. v)
//! R(g ∘ f)     = let (y, f') = R(f)[x] in let (z, g') = R(g)[y] in (z, λ̲v. f' • (g' • v))
//! R(bang)      = ((), λ̲v. 0)
//! R(fst)       = (fst x, λ̲v. (v, 0))                R(snd) = (snd x, λ̲v. (0, v))
//! R(π)         = (π x, λ̲v. ι v)                      (ι: the cotangent injected along π)
//! R(τ)         = (τ x, λ̲v. τᵀ v)       (τ a tuple of chains πᵢ; τᵀ v = Σᵢ ιᵢ (vᵢ), summands
//!                                        of disjoint chains paired, not added)
//! R(⟨f, g⟩)    = let (y, f') = R(f)[x] in let (z, g') = R(g)[x] in
//!                ((y, z), λ̲v. f' • fst v + g' • snd v)
//! R(curry f)   = let h = λb. R(f)[(x, b)] in
//!                ( λb. let (c, f') = h b in (c, λ̲v. snd (f' • v)),         -- closureArg (h, f')
//!                  λ̲w. copowfold (λb. λ̲v. fst ((snd (h b)) • v)) w )      -- closureEnv h
//! R(eval)      = let (g, b) = x in let (c, g') = g b in
//!                (c, λ̲v. (!b ⊗ v, g' • v))                  -- !b ⊗ v is recordCall (b, g') • v
//! R(c)         = (c, λ̲v. 0)                          (a literal constant)
//! R(op)        = let y = op x in (y, λ̲v. DopT(x; v)[y / op x])  (or the native kernel `DopT x`)
//! R(inl)       = (inl x, λ̲v. fromLeft v)             R(inr) = (inr x, λ̲v. fromRight v)
//! R([f, g])    = case x of inl a → let (c, f') = R(f)[a] in (c, λ̲v. linl (f' • v))
//!                        | inr b → let (c, g') = R(g)[b] in (c, λ̲v. linr (g' • v))
//! R(dist)      = let (a, s) = x in case s of
//!                  inl b → (inl (a, b), λ̲v. let u = fromLeft v in (fst u, linl (snd u)))
//!                | inr c → (inr (a, c), λ̲v. let u = fromRight v in (fst u, linr (snd u)))
//! R([f, g] ∘ dist) = let (a, s) = x in case s of            (the derived `case`: one `case`)
//!                  inl b → let (d, f') = R(f)[(a, b)] in (d, λ̲v. let u = f' • v in (fst u, linl (snd u)))
//!                | inr c → let (d, g') = R(g)[(a, c)] in (d, λ̲v. let u = g' • v in (fst u, linr (snd u)))
//! R(map f)     = let (γ, as) = x in let rs = map (λa. R(f)[(γ, a)]) as in
//!                (map fst rs, λ̲v. let cs = zipWith (map snd rs) v in (lsum (lmap fst cs), lmap snd cs))
//! R(map2 f)    = let (γ, (as, bs)) = x in let rs = map2 (λa b. R(f)[(γ, (a, b))]) as bs in
//!                (map fst rs, λ̲v. let cs = zipWith (map snd rs) v in
//!                   (lsum (lmap fst cs), (lmap (fst ∘ snd) cs, lmap (snd ∘ snd) cs)))
//! R(build f)   = let (γ, n) = x in let rs = build n (λi. R(f)[(γ, i)]) in
//!                (map fst rs, λ̲v. (lsum (lmap fst (zipWith (map snd rs) v)), 0))
//! R(index)     = let (xs, i) = x in (xs ! i, λ̲v. (onehot (length xs) i v, 0))
//! R([-]ₙ)      = let (x1, ..., xn) = x in ([x1, ..., xn], λ̲v. (v ! 0, ..., v ! (n-1)))
//! R(replicate) = let (n, a) = x in (replicate n a, λ̲v. (0, lsum v))
//! R(length)    = (length x, λ̲v. 0)
//! R(it f)      = let (γ, a₀) = x in let (b, fs) = loopTape (λa. R(f)[(γ, a)]) a₀ in
//!                (b, λ̲v. lchainRev fs v)
//! ```
//!
//! In `R(it f)` the primal loop records each step's transposed derivative
//! `f'ₖ : R2 A ⊕ R2 B ⊸ R2 Γ × R2 A`; `lchainRev fs v` runs back through them from the last
//! step to the first: `w = linr v` enters the last step on the right, each step's
//! `(g, a) = f'ₖ • w` adds `g` to the environment's cotangent (an accumulator the chain owns,
//! so sparse one-hots are added in place) and passes `w = linl a` on to the step before it;
//! the result is `(acc, fromLeft w)`. So the gradient costs one pass over the recorded steps:
//! time O(primal), memory O(steps × state) (`theory-notes/10-iteration.md`).
//!
//! As in forward mode, every subterm is computed once; the output is linear in the size of the
//! combinator, counting a projection chain by its length (`ι v` is as deep as `π`; the
//! compiler keeps a variable `k` binders away O(log k) projections deep,
//! [`crate::ccc::compile()`]), and a tuple of chains `τ` by their total length (`τᵀ v` is a tree
//! with one leaf per chain).
//!
//! **Sparse cotangents.** Array cotangents are where reverse mode can lose its complexity
//! (DESIGN.md §7). `onehot n i v` is O(1) (a sparse array, [`crate::target::linear`]), `zipWith`
//! over a sparse cotangent touches only its entries, `lsum` of k one-hots is O(k) (the
//! accumulator is updated in place, also inside pairs: the environment cotangents of `build` and
//! `map`), and a sparse array is densified at most once, when it has more entries than elements.
//! So the gradient of `sum (build n (λi. xs ! i * xs ! i))` is O(n), not O(n²).

use super::{
    Lets, Memo, Mor, PairParts, TypeMaps, apply, case_split, constant_image, lin_lam, lin_lam_ty,
    map_proj, map2_images, name, new_mor, pair_parts, per_element, projs_term, results, split_args,
    take_branch, tuple_linear,
};
use crate::ccc::model::{Arrays, Cartesian, Category, Closed, Coproducts, Iteration, Primitives};
use crate::ccc::{Comb, Path, Projs, Step, interpret};
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

/// `R1(A)`: the type of reverse primals.
pub fn primal(a: &Type) -> Ty {
    Reverse::new().primal(a)
}

/// `R2(A)`: the type of cotangents.
pub fn cotangent(a: &Type) -> LTy {
    Reverse::new().cotangent(a)
}

/// Reverse CHAD of a combinator `c : A → B`: `x : R1(A) ⊢ R(c) : R1(B) × (R2(B) ⊸ R2(A))`.
pub fn transform(c: &Comb) -> Result<Mor> {
    interpret(c, &Reverse::new())
}

/// The reverse-mode model `Σ_C L^op`. Holds memo tables for the type maps.
pub struct Reverse {
    r1: Memo<Ty>,
    r2: Memo<LTy>,
    /// `Lin R2(A)`, the type of a cotangent variable.
    lin: Memo<Ty>,
}

impl Default for Reverse {
    fn default() -> Self {
        Reverse::new()
    }
}

impl Reverse {
    /// A fresh model.
    pub fn new() -> Reverse {
        Reverse {
            r1: Memo::new(),
            r2: Memo::new(),
            lin: Memo::new(),
        }
    }

    /// `R2(A)`.
    pub fn cotangent(&self, a: &Type) -> LTy {
        self.r2.get(a, || {
            deep(|| match a {
                Type::Real => LTy::Real,
                Type::Int | Type::Bool | Type::Unit => LTy::Unit,
                Type::Prod(p) => LTy::prod(self.cotangent(&p.0), self.cotangent(&p.1)),
                Type::Sum(p) => LTy::sum(self.cotangent(&p.0), self.cotangent(&p.1)),
                Type::Array(e) => LTy::array(self.cotangent(e)),
                Type::Fun(p) => LTy::copower(self.primal(&p.0), self.cotangent(&p.1)),
            })
        })
    }

    /// `linl l : R2 B ⊕ R2 C` (on the left) or `linr l`.
    fn inject(&self, left: bool, l: LTerm, b: &Type, c: &Type) -> LTerm {
        if left {
            LTerm::mk(LTermKind::Inl(l, self.cotangent(c)))
        } else {
            LTerm::mk(LTermKind::Inr(self.cotangent(b), l))
        }
    }

    /// `Σᵢ ιᵢ lᵢ : R2(ty)`: each `lᵢ` injected along its chain of steps `ιᵢ`, zeros beside it.
    /// Where chains part the sum is a pair of the two sides' sums; only chains that end at the
    /// same place (or one inside another) are added.
    fn scatter(&self, ty: &Type, leaves: Vec<(&[Step], LTerm)>) -> LTerm {
        deep(|| {
            let mut here: Option<LTerm> = None;
            let (mut fsts, mut snds) = (Vec::new(), Vec::new());
            for (path, l) in leaves {
                match path.split_first() {
                    None => here = Some(here.map_or(l.clone(), |h| LTerm::plus(h, l))),
                    Some((Step::Fst, rest)) => fsts.push((rest, l)),
                    Some((Step::Snd, rest)) => snds.push((rest, l)),
                }
            }
            let inner = (!fsts.is_empty() || !snds.is_empty()).then(|| {
                let (a, b) = ty.as_prod().expect("typed combinator");
                LTerm::pair(self.scatter(a, fsts), self.scatter(b, snds))
            });
            match (here, inner) {
                (Some(h), Some(i)) => LTerm::plus(h, i),
                (Some(l), None) | (None, Some(l)) => l,
                (None, None) => LTerm::zero(self.cotangent(ty)),
            }
        })
    }

    /// `(y, λ̲v. lin(v))` with `v : R2(b)`.
    fn combined(&self, b: &Type, y: Term, lin: impl FnOnce(LTerm) -> LTerm) -> Term {
        let ty = self.lin.get(b, || Ty::lin(self.cotangent(b)));
        Term::pair(y, lin_lam_ty("v", ty, lin))
    }
}

impl TypeMaps for Reverse {
    /// `R1(A)`.
    fn primal(&self, a: &Type) -> Ty {
        self.r1.get(a, || {
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

    /// The type of the transposed derivative of a morphism `A → B`: `R2(B) ⊸ R2(A)`.
    fn derivative(&self, a: &Type, b: &Type) -> Ty {
        Ty::lin_fun(self.cotangent(b), self.cotangent(a))
    }
}

impl Category for Reverse {
    type Mor = Mor;
    type Error = Error;

    fn id(&self, a: &Type) -> Result<Mor> {
        new_mor(self, a, a, |x| self.combined(a, Term::var(x), |v| v))
    }

    fn compose(&self, g: Mor, f: Mor) -> Result<Mor> {
        // let (y, f') = R(f)[x] in let (z, g') = R(g)[y] in (z, λ̲v. f' • (g' • v))
        // For constant images (c ∘ bang) that is (c, λ̲v. (λ̲v. 0) • ((λ̲v. 0) • v)) after
        // β for the lets, and (c, λ̲v. 0) after β for the applications: built directly.
        if let (Some(c), Some(_)) = (constant_image(&g), constant_image(&f)) {
            let body = self.combined(&g.cod, c.clone(), |_| LTerm::zero(self.cotangent(&f.dom)));
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
        let body = lets.finish(self.combined(&g.cod, Term::var(&z), |v| apply(&df, apply(&dg, v))));
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

impl Cartesian for Reverse {
    fn bang(&self, a: &Type) -> Result<Mor> {
        new_mor(self, a, &Type::Unit, |_| {
            self.combined(&Type::Unit, Term::unit(), |_| {
                LTerm::zero(self.cotangent(a))
            })
        })
    }

    fn fst(&self, a: &Type, b: &Type) -> Result<Mor> {
        let ab = Type::prod(a.clone(), b.clone());
        new_mor(self, &ab, a, |x| {
            self.combined(a, Term::fst(Term::var(x)), |v| {
                LTerm::pair(v, LTerm::zero(self.cotangent(b)))
            })
        })
    }

    fn snd(&self, a: &Type, b: &Type) -> Result<Mor> {
        let ab = Type::prod(a.clone(), b.clone());
        new_mor(self, &ab, b, |x| {
            self.combined(b, Term::snd(Term::var(x)), |v| {
                LTerm::pair(LTerm::zero(self.cotangent(a)), v)
            })
        })
    }

    fn pair(&self, f: Mor, g: Mor) -> Result<Mor> {
        // let (y, f') = R(f)[x] in let (z, g') = R(g)[x] in ((y, z), λ̲v. f' • fst v + g' • snd v)
        // The let of every source line is ⟨id, g⟩: for R(f) = (x, λ̲v. v) the lets of y and f'
        // are β-reduced, ((x, z), λ̲v. fst v + g' • snd v); for a constant image R(g) =
        // (c, λ̲v. 0) those of z and g', ((y, c), λ̲v. f' • fst v + 0), and the + 0 dropped
        // (the same for a constant image R(f)).
        let cod = Type::prod(f.cod.clone(), g.cod.clone());
        let PairParts {
            lets,
            first: ty,
            second: tz,
            df: fv,
            dg: gv,
            id,
        } = pair_parts(self, &f, &g);
        let body = lets.finish(self.combined(&cod, Term::pair(ty, tz), |v| {
            let first = match &fv {
                Some(df) => Some(apply(df, LTerm::fst(v.clone()))),
                None if id => Some(LTerm::fst(v.clone())),
                None => None,
            };
            let second = gv.as_ref().map(|dg| apply(dg, LTerm::snd(v)));
            match (first, second) {
                (Some(a), Some(b)) => LTerm::plus(a, b),
                (Some(a), None) | (None, Some(a)) => a,
                (None, None) => LTerm::zero(self.cotangent(&f.dom)),
            }
        }));
        Ok(Mor {
            dom: f.dom,
            cod,
            x: f.x,
            body,
        })
    }

    fn proj(&self, dom: &Type, path: &Path) -> Result<Mor> {
        // (π x, λ̲v. ι v): ι puts v where π looks and zeros beside it.
        let mut sides = Vec::with_capacity(path.len());
        let mut cur = dom.clone();
        for s in path.expanded() {
            let (a, b) = {
                let (a, b) = cur.as_prod().expect("typed combinator");
                (a.clone(), b.clone())
            };
            let (next, other) = match s {
                Step::Fst => (a, b),
                Step::Snd => (b, a),
            };
            sides.push((s, self.cotangent(&other)));
            cur = next;
        }
        let cod = cur;
        new_mor(self, dom, &cod, |x| {
            let mut t = Term::var(x);
            for (s, _) in &sides {
                t = match s {
                    Step::Fst => Term::fst(t),
                    Step::Snd => Term::snd(t),
                };
            }
            self.combined(&cod, t, |mut v| {
                for (s, other) in sides.into_iter().rev() {
                    let z = LTerm::zero(other);
                    v = match s {
                        Step::Fst => LTerm::pair(v, z),
                        Step::Snd => LTerm::pair(z, v),
                    };
                }
                v
            })
        })
    }

    fn tuple(&self, dom: &Type, projs: &Projs) -> Result<Mor> {
        // (τ x, λ̲v. τᵀ v): each chain's component of v goes where the chain looks.
        let cod = projs.target(dom).expect("typed combinator");
        new_mor(self, dom, &cod, |x| {
            self.combined(&cod, projs_term(projs, &Term::var(x)), |v| {
                let mut leaves = Vec::new();
                transpose_leaves(projs, v, &mut leaves);
                self.scatter(
                    dom,
                    leaves.iter().map(|(p, l)| (&p[..], l.clone())).collect(),
                )
            })
        })
    }
}

/// The chains of `projs` (expanded) with the component of `v` each one produced.
fn transpose_leaves(projs: &Projs, v: LTerm, out: &mut Vec<(Vec<Step>, LTerm)>) {
    deep(|| match projs {
        Projs::Leaf(p) => out.push((p.expanded().collect(), v)),
        Projs::Pair(a, b) => {
            transpose_leaves(a, LTerm::fst(v.clone()), out);
            transpose_leaves(b, LTerm::snd(v), out);
        }
    })
}

impl Closed for Reverse {
    fn curry(&self, f: Mor, a: &Type, b: &Type, c: &Type) -> Result<Mor> {
        // let h = λb. R(f)[(x, b)] in
        // ( λb. let (c, f') = h b in (c, closureArg (h, f')),     -- = λ̲v. snd (f' • v), taped
        //   closureEnv h )                        -- = λ̲w. copowfold (λb. λ̲v. fst (snd (h b) • v)) w
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
        let cv = Var::fresh(name("c"), self.primal(c));
        let df_ty = self.derivative(&f.dom, c);
        let df = Var::fresh(name("df"), df_ty.clone());
        let arg = closure_arg(&h_ty, &df_ty, self.cotangent(c), self.cotangent(b));
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
                        arg,
                        Term::pair(Term::var(&h), Term::var(&df)),
                    )),
                ),
            ),
        );
        let env = closure_env(&h_ty, self.cotangent(&bc), self.cotangent(a));
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
        // let (g, b) = x in let (c, g') = g b in (c, λ̲v. (recordCall (b, g') • v, g' • v)),
        // where recordCall (b, g') • v = !b ⊗ v (with the call's tape, if g' has one)
        let dom = Type::prod(Type::fun(b.clone(), c.clone()), b.clone());
        new_mor(self, &dom, c, |x| {
            let g = Var::fresh(name("g"), self.primal(&Type::fun(b.clone(), c.clone())));
            let bv = Var::fresh(name("b"), self.primal(b));
            let cv = Var::fresh(name("c"), self.primal(c));
            let dg = Var::fresh(name("dg"), self.derivative(b, c));
            let mut lets = Lets::new();
            lets.push_pair(&g, &bv, Term::var(x));
            lets.push_pair(&cv, &dg, Term::app(Term::var(&g), Term::var(&bv)));
            let rec = record_call(&self.primal(b), &self.derivative(b, c), self.cotangent(c));
            let rec = Term::mk(TermKind::LinPrim(
                rec,
                Term::pair(Term::var(&bv), Term::var(&dg)),
            ));
            lets.finish(self.combined(c, Term::var(&cv), |v| {
                LTerm::pair(LTerm::app(rec, v.clone()), apply(&dg, v))
            }))
        })
    }
}

impl Primitives for Reverse {
    fn constant(&self, lit: &Lit) -> Result<Mor> {
        let ty = lit.ty();
        new_mor(self, &Type::Unit, &ty, |_| {
            self.combined(&ty, Term::lit(*lit), |_| LTerm::zero(LTy::Unit))
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
            Derivative::Zero => lin_lam("v", self.cotangent(&cod), |_| {
                LTerm::zero(self.cotangent(&dom))
            }),
            Derivative::Terms { transpose, .. } => {
                let deriv = lin_lam("v", self.cotangent(&cod), |v| {
                    tuple_linear(transpose(&args, &v))
                });
                // Where `DopT` applies `op` to the same arguments, it reads the primal result
                // instead.
                let ty = self.primal(&cod);
                super::with_shared_result(deriv, ty, &mut lets, &mut value)
            }
            Derivative::Jvp(rule) => {
                // DopT = transpose (λ̲d. Dop(x; d)), sharing the primal result with it.
                let y = Var::fresh(name("y"), self.primal(&cod));
                lets.push(Pat::Var(y.clone()), value);
                let fwd = super::jvp_rule(op, &**rule, &args, &y, super::forward::tangent(&dom));
                let deriv = super::transpose_jvp(op, &fwd, &x, &args, &y)?;
                return Ok(Mor {
                    dom,
                    cod,
                    body: lets.finish(Term::pair(Term::var(&y), deriv)),
                    x,
                });
            }
            Derivative::JvpVjp { vjp, .. } => {
                // DopT as given, sharing the primal result with it.
                let y = Var::fresh(name("y"), self.primal(&cod));
                lets.push(Pat::Var(y.clone()), value);
                let result = Term::var(&y);
                let deriv = lin_lam("v", self.cotangent(&cod), |v| {
                    tuple_linear(vjp(&crate::prim::VjpArgs {
                        this: op,
                        args: &args,
                        result: &result,
                        cotangent: &v,
                    }))
                });
                return Ok(Mor {
                    dom,
                    cod,
                    body: lets.finish(Term::pair(Term::var(&y), deriv)),
                    x,
                });
            }
            Derivative::Native { transpose, .. } => {
                Term::mk(TermKind::LinPrim(transpose.clone(), Term::var(&x)))
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

impl Coproducts for Reverse {
    fn inl(&self, a: &Type, b: &Type) -> Result<Mor> {
        // (inl x, λ̲v. fromLeft v)
        let ab = Type::sum(a.clone(), b.clone());
        new_mor(self, a, &ab, |x| {
            let primal = Term::mk(TermKind::Inl(Term::var(x), self.primal(b)));
            self.combined(&ab, primal, |v| LTerm::mk(LTermKind::FromLeft(v)))
        })
    }

    fn inr(&self, a: &Type, b: &Type) -> Result<Mor> {
        // (inr x, λ̲v. fromRight v)
        let ab = Type::sum(a.clone(), b.clone());
        new_mor(self, b, &ab, |x| {
            let primal = Term::mk(TermKind::Inr(self.primal(a), Term::var(x)));
            self.combined(&ab, primal, |v| LTerm::mk(LTermKind::FromRight(v)))
        })
    }

    fn copair(&self, f: Mor, g: Mor, a: &Type, b: &Type, c: &Type) -> Result<Mor> {
        // case x of inl a → let (c, f') = R(f)[a] in (c, λ̲v. linl (f' • v))
        //         | inr b → let (c, g') = R(g)[b] in (c, λ̲v. linr (g' • v))
        let branch = |m: Mor, left: bool| {
            let (y, dm) = results(self, &m, "c", "df");
            let mut lets = Lets::new();
            lets.push_pair(&y, &dm, m.body);
            let body = lets.finish(
                self.combined(c, Term::var(&y), |v| self.inject(left, apply(&dm, v), a, b)),
            );
            (Pat::Var(m.x), body)
        };
        let ab = Type::sum(a.clone(), b.clone());
        new_mor(self, &ab, c, |x| {
            let (p, l) = branch(f, true);
            let (q, r) = branch(g, false);
            Term::mk(TermKind::Case(Term::var(x), p, l, q, r))
        })
    }

    fn case(&self, f: Mor, g: Mor, (a, b, c, d): (&Type, &Type, &Type, &Type)) -> Result<Mor> {
        // R([f, g] ∘ dist) = let (a, s) = x in case s of
        //   inl b → let (d, f') = R(f)[(a, b)] in (d, λ̲v. let u = f' • v in (fst u, linl (snd u)))
        // | inr c → let (d, g') = R(g)[(a, c)] in (d, λ̲v. let u = g' • v in (fst u, linr (snd u)))
        let dom = Type::prod(a.clone(), Type::sum(b.clone(), c.clone()));
        let mut fg = (Some(f), Some(g));
        new_mor(self, &dom, d, |x| {
            case_split(self, x, (a, b, c), |left, arg| {
                let m = take_branch(&mut fg, left);
                let (y, dm) = results(self, &m, "d", "df");
                let mut lets = Lets::new();
                lets.push(Pat::Var(m.x.clone()), arg);
                lets.push_pair(&y, &dm, m.body);
                let u = Var::linear(name("u"), self.cotangent(&m.dom));
                lets.finish(self.combined(d, Term::var(&y), |v| {
                    let inj = self.inject(left, LTerm::snd(LTerm::var(&u)), b, c);
                    LTerm::lin_let(
                        &u,
                        apply(&dm, v),
                        LTerm::pair(LTerm::fst(LTerm::var(&u)), inj),
                    )
                }))
            })
        })
    }

    fn dist(&self, a: &Type, b: &Type, c: &Type) -> Result<Mor> {
        // let (a, s) = x in case s of
        //   inl b → (inl (a, b), λ̲v. let u = fromLeft v in (fst u, linl (snd u)))
        // | inr c → (inr (a, c), λ̲v. let u = fromRight v in (fst u, linr (snd u)))
        let (ab, ac) = (
            Type::prod(a.clone(), b.clone()),
            Type::prod(a.clone(), c.clone()),
        );
        let dom = Type::prod(a.clone(), Type::sum(b.clone(), c.clone()));
        let cod = Type::sum(ab.clone(), ac.clone());
        new_mor(self, &dom, &cod, |x| {
            case_split(self, x, (a, b, c), |left, arg| {
                let (primal, u) = if left {
                    let u = Var::linear(name("u"), self.cotangent(&ab));
                    (TermKind::Inl(arg, self.primal(&ac)), u)
                } else {
                    let u = Var::linear(name("u"), self.cotangent(&ac));
                    (TermKind::Inr(self.primal(&ab), arg), u)
                };
                self.combined(&cod, Term::mk(primal), |v| {
                    let from = if left {
                        LTerm::mk(LTermKind::FromLeft(v))
                    } else {
                        LTerm::mk(LTermKind::FromRight(v))
                    };
                    let inj = self.inject(left, LTerm::snd(LTerm::var(&u)), b, c);
                    LTerm::lin_let(&u, from, LTerm::pair(LTerm::fst(LTerm::var(&u)), inj))
                })
            })
        })
    }
}

/// The kernel `closureArg : (h, f') ↦ λ̲v. snd (f' • v)` (argument half of a closure call's
/// derivative `f' : C ⊸ Γ × B`, keeping `f'` as the call's tape; [`LinFun::closure_arg`]).
fn closure_arg(h: &Ty, df: &Ty, c: LTy, b: LTy) -> Rc<LinPrim> {
    let ct = c.clone();
    LinPrim::with_expansion(
        "closureArg",
        Ty::prod(h.clone(), df.clone()),
        c,
        b,
        |hf| {
            let (h, f) = hf.expect_pair();
            Ok(LinFun::closure_arg(h.clone(), lin_fun(f)))
        },
        // λ̲v. snd (snd hf • v)
        move |hf| {
            let v = Var::linear("v", ct.clone());
            let fv = LTerm::app(Term::snd(hf.clone()), LTerm::var(&v));
            Term::lin_lam(&v, LTerm::snd(fv))
        },
    )
}

/// The kernel `recordCall : (b, g') ↦ λ̲v. !b ⊗ v` (with the tape of `g'`, if any;
/// [`LinFun::record_call`]).
fn record_call(b: &Ty, dg: &Ty, c: LTy) -> Rc<LinPrim> {
    let ct = c.clone();
    LinPrim::with_expansion(
        "recordCall",
        Ty::prod(b.clone(), dg.clone()),
        c.clone(),
        LTy::copower(b.clone(), c),
        |bg| {
            let (b, g) = bg.expect_pair();
            Ok(LinFun::record_call(b.clone(), &lin_fun(g)))
        },
        // λ̲v. !(fst bg) ⊗ v
        move |bg| {
            let v = Var::linear("v", ct.clone());
            let cp = LTerm::mk(LTermKind::Copower(Term::fst(bg.clone()), LTerm::var(&v)));
            Term::lin_lam(&v, cp)
        },
    )
}

/// The kernel `closureEnv : h ↦ λ̲w. copowfold (λb. λ̲v. fst (snd (h b) • v)) w` (through the
/// calls' tapes where they are `h`'s own; [`LinFun::closure_env`]).
fn closure_env(h: &Ty, w: LTy, gamma: LTy) -> Rc<LinPrim> {
    let wt = w.clone();
    LinPrim::with_expansion(
        "closureEnv",
        h.clone(),
        w,
        gamma,
        |h| Ok(LinFun::closure_env(h.clone())),
        // λ̲w. copowfold (\b -> λ̲v. fst (snd (h b) • v)) w
        move |h| {
            let (bt, ct) = wt.as_copower().expect("a copower type");
            let w = Var::linear("w", wt.clone());
            let b = Var::fresh("b", bt.clone());
            let v = Var::linear("v", ct.clone());
            let hb = Term::snd(Term::app(h.clone(), Term::var(&b)));
            let f = Term::lam(
                &b,
                Term::lin_lam(&v, LTerm::fst(LTerm::app(hb, LTerm::var(&v)))),
            );
            Term::lin_lam(&w, LTerm::mk(LTermKind::CopowFold(f, LTerm::var(&w))))
        },
    )
}

fn lin_fun(v: &Value) -> LinFun {
    match v {
        Value::LinFun(f) => f.clone(),
        other => panic!("internal error: expected a linear map, found {other}"),
    }
}

/// `let cs = zipWith (map snd rs) v in k(cs)`: every element's transposed derivative applied to
/// its element of the output cotangent `v` (sparse `v`, sparse `cs`), with `cs : Array p`.
fn element_cotangents(rs: &Var, v: LTerm, p: LTy, k: impl FnOnce(&Var) -> LTerm) -> LTerm {
    let cs = Var::linear(name("cs"), LTy::array(p));
    let body = k(&cs);
    let zipped = LTerm::mk(LTermKind::ZipWith(map_proj(rs, true), v));
    LTerm::lin_let(&cs, zipped, body)
}

/// `lmap (λ̲p. sel(p)) cs` for a linear array `cs` of element type `p`.
fn lmap(cs: &Var, p: &LTy, sel: impl FnOnce(LTerm) -> LTerm) -> LTerm {
    let f = lin_lam("p", p.clone(), sel);
    LTerm::mk(LTermKind::Map(f, LTerm::var(cs)))
}

impl Arrays for Reverse {
    fn map(&self, f: Mor, gamma: &Type, a: &Type, b: &Type) -> Result<Mor> {
        // let (γ, as) = x in let rs = map (λa. R(f)[(γ, a)]) as in
        // (map fst rs, λ̲v. let cs = zipWith (map snd rs) v in (lsum (lmap fst cs), lmap snd cs))
        let dom = Type::prod(gamma.clone(), Type::array(a.clone()));
        let cod = Type::array(b.clone());
        let image = self.image(&f.dom, b);
        let p = LTy::prod(self.cotangent(gamma), self.cotangent(a));
        new_mor(self, &dom, &cod, |x| {
            let g = Var::fresh(name("γ"), self.primal(gamma));
            let xs = Var::fresh(name("as"), self.primal(&Type::array(a.clone())));
            let rs = Var::fresh(name("rs"), Ty::array(image));
            let ai = Var::fresh(name("a"), self.primal(a));
            let mut lets = Lets::new();
            lets.push_pair(&g, &xs, Term::var(x));
            let mapped = Term::mk(TermKind::Map(per_element(f, &g, &ai), Term::var(&xs)));
            lets.push(Pat::Var(rs.clone()), mapped);
            lets.finish(self.combined(&cod, map_proj(&rs, false), |v| {
                element_cotangents(&rs, v, p.clone(), |cs| {
                    LTerm::pair(
                        LTerm::mk(LTermKind::Sum(lmap(cs, &p, LTerm::fst))),
                        lmap(cs, &p, LTerm::snd),
                    )
                })
            }))
        })
    }

    fn map2(&self, f: Mor, gamma: &Type, a: &Type, b: &Type, c: &Type) -> Result<Mor> {
        // let (γ, (as, bs)) = x in let rs = map2 (λa b. R(f)[(γ, (a, b))]) as bs in
        // (map fst rs, λ̲v. let cs = zipWith (map snd rs) v in
        //                  (lsum (lmap fst cs), (lmap (fst ∘ snd) cs, lmap (snd ∘ snd) cs)))
        let (aa, ab) = (Type::array(a.clone()), Type::array(b.clone()));
        let dom = Type::prod(gamma.clone(), Type::prod(aa.clone(), ab.clone()));
        let cod = Type::array(c.clone());
        let image = self.image(&f.dom, c);
        let p = LTy::prod(
            self.cotangent(gamma),
            LTy::prod(self.cotangent(a), self.cotangent(b)),
        );
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
            lets.finish(self.combined(&cod, map_proj(&rs, false), |v| {
                element_cotangents(&rs, v, p.clone(), |cs| {
                    LTerm::pair(
                        LTerm::mk(LTermKind::Sum(lmap(cs, &p, LTerm::fst))),
                        LTerm::pair(
                            lmap(cs, &p, |q| LTerm::fst(LTerm::snd(q))),
                            lmap(cs, &p, |q| LTerm::snd(LTerm::snd(q))),
                        ),
                    )
                })
            }))
        })
    }

    fn build(&self, f: Mor, gamma: &Type, a: &Type) -> Result<Mor> {
        // let (γ, n) = x in let rs = build n (λi. R(f)[(γ, i)]) in
        // (map fst rs, λ̲v. (lsum (lmap fst (zipWith (map snd rs) v)), 0))
        let dom = Type::prod(gamma.clone(), Type::Int);
        let cod = Type::array(a.clone());
        let image = self.image(&f.dom, a);
        let p = LTy::prod(self.cotangent(gamma), LTy::Unit);
        new_mor(self, &dom, &cod, |x| {
            let g = Var::fresh(name("γ"), self.primal(gamma));
            let n = Var::fresh(name("n"), Ty::Int);
            let i = Var::fresh(name("i"), Ty::Int);
            let rs = Var::fresh(name("rs"), Ty::array(image));
            let mut lets = Lets::new();
            lets.push_pair(&g, &n, Term::var(x));
            let built = Term::mk(TermKind::Build(Term::var(&n), per_element(f, &g, &i)));
            lets.push(Pat::Var(rs.clone()), built);
            lets.finish(self.combined(&cod, map_proj(&rs, false), |v| {
                let env = element_cotangents(&rs, v, p.clone(), |cs| {
                    LTerm::mk(LTermKind::Sum(lmap(cs, &p, LTerm::fst)))
                });
                LTerm::pair(env, LTerm::zero(LTy::Unit))
            }))
        })
    }

    fn index(&self, a: &Type) -> Result<Mor> {
        // let (xs, i) = x in (xs ! i, λ̲v. (onehot (length xs) i v, 0))
        let dom = Type::prod(Type::array(a.clone()), Type::Int);
        new_mor(self, &dom, a, |x| {
            let xs = Var::fresh(name("xs"), self.primal(&Type::array(a.clone())));
            let i = Var::fresh(name("i"), Ty::Int);
            let mut lets = Lets::new();
            lets.push_pair(&xs, &i, Term::var(x));
            let primal = Term::mk(TermKind::Index(Term::var(&xs), Term::var(&i)));
            lets.finish(self.combined(a, primal, |v| {
                let n = Term::mk(TermKind::Length(Term::var(&xs)));
                let hot = LTerm::mk(LTermKind::OneHot(n, Term::var(&i), v));
                LTerm::pair(hot, LTerm::zero(LTy::Unit))
            }))
        })
    }

    fn length(&self, a: &Type) -> Result<Mor> {
        // (length x, λ̲v. 0)
        let dom = Type::array(a.clone());
        new_mor(self, &dom, &Type::Int, |x| {
            self.combined(&Type::Int, Term::mk(TermKind::Length(Term::var(x))), |_| {
                LTerm::zero(self.cotangent(&dom))
            })
        })
    }

    fn replicate(&self, a: &Type) -> Result<Mor> {
        // let (n, a) = x in (replicate n a, λ̲v. (0, lsum v))
        let dom = Type::prod(Type::Int, a.clone());
        let cod = Type::array(a.clone());
        new_mor(self, &dom, &cod, |x| {
            let n = Var::fresh(name("n"), Ty::Int);
            let e = Var::fresh(name("a"), self.primal(a));
            let mut lets = Lets::new();
            lets.push_pair(&n, &e, Term::var(x));
            let primal = Term::mk(TermKind::Replicate(Term::var(&n), Term::var(&e)));
            lets.finish(self.combined(&cod, primal, |v| {
                LTerm::pair(LTerm::zero(LTy::Unit), LTerm::mk(LTermKind::Sum(v)))
            }))
        })
    }

    fn array(&self, a: &Type, n: usize) -> Result<Mor> {
        // let (x1, ..., xn) = x in ([x1, ..., xn], λ̲v. (v ! 0, ..., v ! (n-1)))
        let dom = Type::tuple(&vec![a.clone(); n]);
        let cod = Type::array(a.clone());
        new_mor(self, &dom, &cod, |x| {
            let mut lets = Lets::new();
            let items = split_args(x, &vec![self.primal(a); n], &mut lets);
            let primal = Term::mk(TermKind::Array(self.primal(a), items));
            lets.finish(self.combined(&cod, primal, |v| {
                tuple_linear(
                    (0..n)
                        .map(|k| {
                            LTerm::mk(LTermKind::Index(v.clone(), Term::lit(Lit::Int(k as i64))))
                        })
                        .collect(),
                )
            }))
        })
    }
}

impl Iteration for Reverse {
    fn iter(&self, f: Mor, gamma: &Type, a: &Type, b: &Type) -> Result<Mor> {
        // let (γ, a₀) = x in let (b, fs) = loopTape (λa. R(f)[(γ, a)]) a₀ in (b, λ̲v. lchainRev fs v)
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
            lets.finish(self.combined(b, Term::var(&bv), |v| {
                LTerm::mk(LTermKind::Chain(Term::var(&fs), v, true, false))
            }))
        })
    }

    fn iter_tape(&self, f: Mor, gamma: &Type, a: &Type, b: &Type, c: &Type) -> Result<Mor> {
        // let (γ, a₀) = x in let (b, t) = loopTape (λa. let (y, f') = R(f)[(γ, a)] in
        //   (fst y, (snd y, f'))) a₀ in ((b, map fst t), λ̲v. lchainScanRev (map snd t) v)
        let dom = Type::prod(gamma.clone(), a.clone());
        let step = Type::prod(Type::sum(a.clone(), b.clone()), c.clone());
        let entry_ty = self.derivative(&dom, &step);
        let cod = Type::prod(b.clone(), Type::array(c.clone()));
        new_mor(self, &dom, &cod, |x| {
            let mut lets = Lets::new();
            let (bv, cs, fs) =
                super::taped_loop_records(self, f, x, (gamma, a, b, c), entry_ty, &mut lets);
            let primal = Term::pair(Term::var(&bv), Term::var(&cs));
            lets.finish(self.combined(&cod, primal, |v| {
                LTerm::mk(LTermKind::Chain(Term::var(&fs), v, true, true))
            }))
        })
    }

    fn fix(&self, h: Mor, z: &Type, b: &Type, at: Span) -> Result<Mor> {
        // R(fix h) = (fix (λg. λz. let (c, f') = R(h)[(g, z)] in (c, λ̲v. snd (f' • v)))) x
        // The recursive function is closed: the cotangent `h` returns for it (the copower of
        // its calls) is dropped, and each call's cotangent reaches its argument through the
        // call's own derivative (`R(eval)` applies it), so every call is backpropagated once.
        let zb = Type::fun(z.clone(), b.clone());
        let g = Var::fresh(name("g"), self.primal(&zb));
        let zv = Var::fresh(name("z"), self.primal(z));
        let cv = Var::fresh(name("c"), self.primal(b));
        let df = Var::fresh(name("df"), self.derivative(&h.dom, b));
        let v = Var::linear(name("v"), self.cotangent(b));
        let arg = Term::lin_lam(&v, LTerm::snd(LTerm::app(Term::var(&df), LTerm::var(&v))));
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
