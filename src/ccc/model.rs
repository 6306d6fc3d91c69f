//! The universal property of the free category, as code.
//!
//! The structure is split the way the category theory is: a [`Category`] (identities,
//! composition), [`Cartesian`] (terminal object, products), [`Closed`] (exponentials),
//! [`Coproducts`] (with distributivity), [`Arrays`] (the array operations, including the
//! "elementary" second-order `map`, `map2` and `build` of CHAD §10) and [`Primitives`] (literal
//! constants and primitive operations). A [`Model`] is anything with all of them.
//!
//! [`interpret`] is the unique structure-preserving functor from the free category into a
//! model: one fold over the combinator that calls the model's operation for each constructor.
//! Evaluation ([`crate::ccc::eval`]), type reconstruction ([`crate::ccc::typing`]) and printing
//! ([`crate::ccc::print`]) are models; forward and reverse CHAD are models too, with target-
//! language terms as morphisms.
//!
//! Objects are passed to the operations as source [`Type`]s (the objects of the free
//! category); a model applies its own object map where it needs one. Each operation receives
//! exactly the objects that determine the morphism, e.g. `fst(A, B) : A × B → A`.

use super::{Comb, CombKind, Path, Projs, Step};
use crate::deep::deep;
use crate::error::Span;
use crate::prim::Prim;
use crate::source::term::Lit;
use crate::types::Type;

/// A category: objects are (images of) types, morphisms are `Self::Mor`.
pub trait Category {
    /// Morphisms of the model.
    type Mor;
    /// Why a morphism could not be built (e.g. a construct the model does not support).
    type Error;

    /// `id_A`.
    fn id(&self, a: &Type) -> Result<Self::Mor, Self::Error>;

    /// `g ∘ f`.
    fn compose(&self, g: Self::Mor, f: Self::Mor) -> Result<Self::Mor, Self::Error>;

    /// Attaches a source location to a morphism (for runtime error reports). Most models
    /// ignore it.
    fn located(&self, m: Self::Mor, _at: Span) -> Self::Mor {
        m
    }
}

/// Finite products: a terminal object `1` and binary products `A × B`.
pub trait Cartesian: Category {
    /// `bang_A : A → 1`.
    fn bang(&self, a: &Type) -> Result<Self::Mor, Self::Error>;

    /// `fst : A × B → A`.
    fn fst(&self, a: &Type, b: &Type) -> Result<Self::Mor, Self::Error>;

    /// `snd : A × B → B`.
    fn snd(&self, a: &Type, b: &Type) -> Result<Self::Mor, Self::Error>;

    /// `⟨f, g⟩ : A → B × C`.
    fn pair(&self, f: Self::Mor, g: Self::Mor) -> Result<Self::Mor, Self::Error>;

    /// A chain of projections from `dom`. The default composes `fst`s and `snd`s.
    fn proj(&self, dom: &Type, path: &Path) -> Result<Self::Mor, Self::Error> {
        let mut cur = dom.clone();
        let mut acc = self.id(dom)?;
        for s in path.expanded() {
            let (a, b) = cur
                .as_prod()
                .map(|(a, b)| (a.clone(), b.clone()))
                .expect("projection paths follow products");
            let (p, next) = match s {
                Step::Fst => (self.fst(&a, &b)?, a),
                Step::Snd => (self.snd(&a, &b)?, b),
            };
            acc = self.compose(p, acc)?;
            cur = next;
        }
        Ok(acc)
    }

    /// A tuple of projection chains from `dom`. The default pairs [`Cartesian::proj`]s.
    fn tuple(&self, dom: &Type, projs: &Projs) -> Result<Self::Mor, Self::Error> {
        deep(|| match projs {
            Projs::Leaf(p) => self.proj(dom, p),
            Projs::Pair(a, b) => {
                let a = self.tuple(dom, a)?;
                let b = self.tuple(dom, b)?;
                self.pair(a, b)
            }
        })
    }
}

/// Exponentials `B ⇒ C`.
pub trait Closed: Cartesian {
    /// `curry(f) : A → (B ⇒ C)` for `f : A × B → C`.
    fn curry(&self, f: Self::Mor, a: &Type, b: &Type, c: &Type) -> Result<Self::Mor, Self::Error>;

    /// `eval : (B ⇒ C) × B → C`.
    fn eval(&self, b: &Type, c: &Type) -> Result<Self::Mor, Self::Error>;
}

/// Binary coproducts, distributing over products.
pub trait Coproducts: Cartesian {
    /// `inl : A → A + B`.
    fn inl(&self, a: &Type, b: &Type) -> Result<Self::Mor, Self::Error>;

    /// `inr : B → A + B`.
    fn inr(&self, a: &Type, b: &Type) -> Result<Self::Mor, Self::Error>;

    /// `[f, g] : A + B → C`.
    fn copair(
        &self,
        f: Self::Mor,
        g: Self::Mor,
        a: &Type,
        b: &Type,
        c: &Type,
    ) -> Result<Self::Mor, Self::Error>;

    /// `dist : A × (B + C) → (A × B) + (A × C)`.
    fn dist(&self, a: &Type, b: &Type, c: &Type) -> Result<Self::Mor, Self::Error>;

    /// `[f, g] ∘ dist : A × (B + C) → D` for `f : A × B → D` and `g : A × C → D`: a case split
    /// that keeps its context, which is how `case` and `if` compile. A derived operation: the
    /// default composes [`Coproducts::copair`] after [`Coproducts::dist`], and [`interpret`]
    /// calls it for every such composite; a model may give it directly (the AD models do, so
    /// that an `if` is one `case` rather than one building a sum and one taking it apart).
    fn case(
        &self,
        f: Self::Mor,
        g: Self::Mor,
        (a, b, c, d): (&Type, &Type, &Type, &Type),
    ) -> Result<Self::Mor, Self::Error> {
        let ab = Type::prod(a.clone(), b.clone());
        let ac = Type::prod(a.clone(), c.clone());
        let dist = self.dist(a, b, c)?;
        let copair = self.copair(f, g, &ab, &ac, d)?;
        self.compose(copair, dist)
    }
}

/// Arrays and their operations.
pub trait Arrays: Cartesian {
    /// `map(f) : Γ × Array A → Array B` for `f : Γ × A → B`.
    fn map(&self, f: Self::Mor, gamma: &Type, a: &Type, b: &Type)
    -> Result<Self::Mor, Self::Error>;

    /// `map2(f) : Γ × (Array A × Array B) → Array C` for `f : Γ × (A × B) → C`.
    fn map2(
        &self,
        f: Self::Mor,
        gamma: &Type,
        a: &Type,
        b: &Type,
        c: &Type,
    ) -> Result<Self::Mor, Self::Error>;

    /// `build(f) : Γ × Int → Array A` for `f : Γ × Int → A`.
    fn build(&self, f: Self::Mor, gamma: &Type, a: &Type) -> Result<Self::Mor, Self::Error>;

    /// `index : Array A × Int → A`.
    fn index(&self, a: &Type) -> Result<Self::Mor, Self::Error>;

    /// `length : Array A → Int`.
    fn length(&self, a: &Type) -> Result<Self::Mor, Self::Error>;

    /// `replicate : Int × A → Array A`.
    fn replicate(&self, a: &Type) -> Result<Self::Mor, Self::Error>;

    /// `array_n : A × (... × A) → Array A`.
    fn array(&self, a: &Type, n: usize) -> Result<Self::Mor, Self::Error>;
}

/// Iteration (CHAD §11.2).
pub trait Iteration: Category {
    /// `it(f) : Γ × A → B` for `f : Γ × A → A + B`: apply `f` while it returns `inl` (the next
    /// state), return its first `inr`.
    fn iter(
        &self,
        f: Self::Mor,
        gamma: &Type,
        a: &Type,
        b: &Type,
    ) -> Result<Self::Mor, Self::Error>;

    /// `itTape(f) : Γ × A → B × Array C` for `f : Γ × A → (A + B) × C`: [`Iteration::iter`]
    /// on the sum, which also returns the `C` of every step run, in order (the step that
    /// returns `inr` included).
    fn iter_tape(
        &self,
        f: Self::Mor,
        gamma: &Type,
        a: &Type,
        b: &Type,
        c: &Type,
    ) -> Result<Self::Mor, Self::Error>;

    /// `fix(h) : Z → B` for `h : (Z ⇒ B) × Z → B`: the recursive function `g` with
    /// `g z = h (g, z)` (a closed function value), at `z`; `at` is the recursive definition
    /// (every call counts against the depth limit there).
    fn fix(&self, h: Self::Mor, z: &Type, b: &Type, at: Span) -> Result<Self::Mor, Self::Error>;
}

/// The generators: literal constants and primitive operations.
pub trait Primitives: Category {
    /// A constant `1 → T`.
    fn constant(&self, lit: &Lit) -> Result<Self::Mor, Self::Error>;

    /// A primitive operation `A1 × (... × An) → B`.
    fn prim(&self, op: &Prim) -> Result<Self::Mor, Self::Error>;
}

/// A model of all the structure of the free category.
pub trait Model: Closed + Coproducts + Arrays + Iteration + Primitives {}

impl<M: Closed + Coproducts + Arrays + Iteration + Primitives> Model for M {}

/// `[l, r] ∘ dist` or `[l, r] ∘ (dist ∘ h)`: the copair's branches, the `dist` and `h`.
#[allow(clippy::type_complexity)]
fn as_case<'a>(
    g: &'a Comb,
    f: &'a Comb,
) -> Option<(&'a Comb, &'a Comb, &'a Comb, Option<&'a Comb>)> {
    let CombKind::Copair(l, r) = &g.kind else {
        return None;
    };
    match &f.kind {
        CombKind::Dist => Some((l, r, f, None)),
        CombKind::Compose(d, h) if matches!(d.kind, CombKind::Dist) => Some((l, r, d, Some(h))),
        _ => None,
    }
}

/// The unique structure-preserving functor from the free category into `m`: interprets `c`
/// by structural recursion, sub-combinators before the node that uses them.
pub fn interpret<M: Model>(c: &Comb, m: &M) -> Result<M::Mor, M::Error> {
    deep(|| {
        let prod = |t: &Type| {
            let (a, b) = t.as_prod().expect("typed combinator");
            (a.clone(), b.clone())
        };
        let (mor, at) = match &c.kind {
            CombKind::Id => (m.id(&c.dom)?, None),
            CombKind::Compose(g, f) if as_case(g, f).is_some() => {
                let (l, r, d, h) = as_case(g, f).expect("just matched");
                let (a, bc) = prod(&d.dom);
                let (b, cc) = bc.as_sum().expect("typed combinator");
                let hm = h.map(|h| interpret(h, m)).transpose()?;
                let lm = interpret(l, m)?;
                let rm = interpret(r, m)?;
                let case = m.case(lm, rm, (&a, b, cc, &g.cod))?;
                match hm {
                    Some(hm) => (m.compose(case, hm)?, None),
                    None => (case, None),
                }
            }
            CombKind::Compose(g, f) => {
                let f = interpret(f, m)?;
                let g = interpret(g, m)?;
                (m.compose(g, f)?, None)
            }
            CombKind::Bang => (m.bang(&c.dom)?, None),
            CombKind::Fst => {
                let (a, b) = prod(&c.dom);
                (m.fst(&a, &b)?, None)
            }
            CombKind::Snd => {
                let (a, b) = prod(&c.dom);
                (m.snd(&a, &b)?, None)
            }
            CombKind::Pair(f, g) => {
                let f = interpret(f, m)?;
                let g = interpret(g, m)?;
                (m.pair(f, g)?, None)
            }
            CombKind::Proj(path) => (m.proj(&c.dom, path)?, None),
            CombKind::Tuple(projs) => (m.tuple(&c.dom, projs)?, None),
            CombKind::Curry(f) => {
                let (a, b) = prod(&f.dom);
                let fm = interpret(f, m)?;
                (m.curry(fm, &a, &b, &f.cod)?, None)
            }
            CombKind::Eval => {
                let (_, b) = prod(&c.dom);
                (m.eval(&b, &c.cod)?, None)
            }
            CombKind::Const(l) => (m.constant(l)?, None),
            CombKind::Prim(op, at) => (m.prim(op)?, Some(*at)),
            CombKind::Inl => {
                let (a, b) = c.cod.as_sum().expect("typed combinator");
                (m.inl(a, b)?, None)
            }
            CombKind::Inr => {
                let (a, b) = c.cod.as_sum().expect("typed combinator");
                (m.inr(a, b)?, None)
            }
            CombKind::Copair(f, g) => {
                let (a, b) = (f.dom.clone(), g.dom.clone());
                let fm = interpret(f, m)?;
                let gm = interpret(g, m)?;
                (m.copair(fm, gm, &a, &b, &c.cod)?, None)
            }
            CombKind::Dist => {
                let (a, bc) = prod(&c.dom);
                let (b, cc) = bc.as_sum().expect("typed combinator");
                (m.dist(&a, b, cc)?, None)
            }
            CombKind::Map(f) => {
                let (g, a) = prod(&f.dom);
                let fm = interpret(f, m)?;
                (m.map(fm, &g, &a, &f.cod)?, None)
            }
            CombKind::Map2(f, at) => {
                let (g, ab) = prod(&f.dom);
                let (a, b) = prod(&ab);
                let fm = interpret(f, m)?;
                (m.map2(fm, &g, &a, &b, &f.cod)?, Some(*at))
            }
            CombKind::Build(f, at) => {
                let (g, _) = prod(&f.dom);
                let fm = interpret(f, m)?;
                (m.build(fm, &g, &f.cod)?, Some(*at))
            }
            CombKind::Index(at) => (m.index(&c.cod)?, Some(*at)),
            CombKind::Length => (m.length(c.dom.as_array().expect("typed combinator"))?, None),
            CombKind::Replicate(at) => {
                let (_, a) = prod(&c.dom);
                (m.replicate(&a)?, Some(*at))
            }
            CombKind::Array(n) => (
                m.array(c.cod.as_array().expect("typed combinator"), *n)?,
                None,
            ),
            CombKind::Iter(f, at, false) => {
                let (g, a) = prod(&f.dom);
                let fm = interpret(f, m)?;
                (m.iter(fm, &g, &a, &c.cod)?, Some(*at))
            }
            CombKind::Iter(f, at, true) => {
                let (g, a) = prod(&f.dom);
                let (b, cs) = prod(&c.cod);
                let cc = cs.as_array().expect("typed combinator").clone();
                let fm = interpret(f, m)?;
                (m.iter_tape(fm, &g, &a, &b, &cc)?, Some(*at))
            }
            CombKind::Fix(h, at) => {
                let hm = interpret(h, m)?;
                (m.fix(hm, &c.dom, &c.cod, *at)?, Some(*at))
            }
        };
        Ok(match at {
            Some(s) => m.located(mor, s),
            None => mor,
        })
    })
}
