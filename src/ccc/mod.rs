//! The free cartesian closed category (with distributive coproducts and arrays) as typed
//! combinators.
//!
//! A [`Comb`] is a morphism `dom → cod`. The generators and constructors (DESIGN.md §3):
//!
//! ```text
//! id_A : A → A                      g ∘ f : A → C            (f : A → B, g : B → C)
//! bang_A : A → 1                    ⟨f, g⟩ : A → B × C       (f : A → B, g : A → C)
//! fst : A × B → A                   snd : A × B → B
//! curry(f) : A → (B ⇒ C)            (f : A × B → C)
//! eval : (B ⇒ C) × B → C
//! c : 1 → T  (a literal constant)   op : A1 × (... × An) → B (a primitive)
//! inl : A → A + B   inr : B → A + B   [f, g] : A + B → C   (f : A → C, g : B → C)
//! dist : A × (B + C) → (A × B) + (A × C)
//! map(f)  : Γ × Array A → Array B                (f : Γ × A → B)
//! map2(f) : Γ × (Array A × Array B) → Array C    (f : Γ × (A × B) → C)
//! build(f): Γ × Int → Array A                    (f : Γ × Int → A)
//! index : Array A × Int → A     length : Array A → Int     replicate : Int × A → Array A
//! array_n : A × (... × A) → Array A              (an array literal of n elements)
//! it(f)   : Γ × A → B                            (f : Γ × A → A + B; iteration)
//! fix(h)  : Z → B                                (h : (Z ⇒ B) × Z → B; recursion)
//! ```
//!
//! `fix(h)` is the closed fixpoint: `fix(h) = h ∘ ⟨curry(fix(h) ∘ snd) ∘ bang, id⟩`, i.e. `h`
//! is given the recursive function itself (a closed function value) and the argument. A
//! `def rec` compiles to it after lambda lifting: its captured context is part of `Z`
//! (`theory-notes/10-iteration.md`).
//!
//! `it(f)` is the iteration combinator of CHAD §11.2: from `(γ, a)` it applies `f` to
//! `(γ, a)` while the result is `inl a'` (continuing from `a'`), and returns `b` at the first
//! `inr b`. `loop`, `fold`, `iterate` and `while` compile to it, and `scan` to its taped
//! form `itTape(f)`, which also returns every step's record (`theory-notes/10-iteration.md`).
//!
//! plus two *derived* forms: [`CombKind::Proj`], a chain of projections `π = sₖ ∘ ... ∘ s₁`
//! (each `sᵢ` a `fst` or `snd`) stored as one node, so that a variable deep in a context costs
//! O(1) space instead of one node per enclosing binder; and [`CombKind::Tuple`], a tuple of
//! projection chains `⟨π₁, ⟨π₂, π₃⟩⟩` (any nesting) stored as one node, which is how the
//! compiler rearranges a context ([`compile()`]). [`model::Cartesian::proj`] and
//! [`model::Cartesian::tuple`] have default implementations in terms of `fst`, `snd`, `⟨-, -⟩`
//! and `∘`, so models need not know about them.
//!
//! Every node stores its domain and codomain. The smart constructors check that the pieces fit
//! (equality on shared types is O(1)) and panic otherwise: a mis-typed combinator is a bug in
//! the code that built it, never the user's fault.

pub mod compile;
pub mod eval;
pub mod model;
pub mod print;
pub mod typing;

use crate::deep::Deep;
use crate::error::Span;
use crate::prim::Prim;
use crate::source::term::Lit;
use crate::types::Type;
use smallvec::SmallVec;
use std::fmt;
use std::rc::Rc;

pub use compile::{compile, compile_entry, context_type};
pub use model::interpret;

/// One projection step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// `fst`.
    Fst,
    /// `snd`.
    Snd,
}

/// A chain of projections: `skip` times `fst`, then `steps` in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Path {
    /// Leading `fst`s (walking out of a snoc-list context).
    pub skip: usize,
    /// Further steps.
    pub steps: SmallVec<[Step; 4]>,
}

impl Path {
    /// All steps in order, expanded.
    pub fn expanded(&self) -> impl Iterator<Item = Step> + '_ {
        std::iter::repeat_n(Step::Fst, self.skip).chain(self.steps.iter().copied())
    }

    /// Number of steps.
    pub fn len(&self) -> usize {
        self.skip + self.steps.len()
    }

    /// True if the path is the identity.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The type reached from `dom` (walks the path: O(length)).
    pub fn target(&self, dom: &Type) -> Option<Type> {
        let mut t = dom.clone();
        for s in self.expanded() {
            let (a, b) = t.as_prod()?;
            let next = if s == Step::Fst { a.clone() } else { b.clone() };
            t = next;
        }
        Some(t)
    }
}

/// A tuple of projection chains, `⟨π₁, ⟨π₂, π₃⟩⟩` in any nesting: the body of
/// [`CombKind::Tuple`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Projs {
    /// One chain.
    Leaf(Path),
    /// A pair of tuples.
    Pair(Box<Projs>, Box<Projs>),
}

impl Projs {
    /// `⟨a, b⟩`.
    pub fn pair(a: Projs, b: Projs) -> Projs {
        Projs::Pair(Box::new(a), Box::new(b))
    }

    /// The chain `skip` `fst`s, then `steps`.
    pub fn leaf(skip: usize, steps: &[Step]) -> Projs {
        Projs::Leaf(Path {
            skip,
            steps: steps.iter().copied().collect(),
        })
    }

    /// The same tuple after one more `fst` first (each chain gets a leading `fst`).
    pub fn after_fst(&self) -> Projs {
        match self {
            Projs::Leaf(p) => Projs::Leaf(Path {
                skip: p.skip + 1,
                steps: p.steps.clone(),
            }),
            Projs::Pair(a, b) => Projs::pair(a.after_fst(), b.after_fst()),
        }
    }

    /// The type reached from `dom`, or `None` if a chain does not fit it.
    pub fn target(&self, dom: &Type) -> Option<Type> {
        match self {
            Projs::Leaf(p) => p.target(dom),
            Projs::Pair(a, b) => Some(Type::prod(a.target(dom)?, b.target(dom)?)),
        }
    }
}

/// The forms of combinators.
#[derive(Clone)]
pub enum CombKind {
    /// `id`
    Id,
    /// `g ∘ f` (stored as `Compose(g, f)`).
    Compose(Comb, Comb),
    /// `bang : A → 1`
    Bang,
    /// `fst : A × B → A`
    Fst,
    /// `snd : A × B → B`
    Snd,
    /// `⟨f, g⟩`
    Pair(Comb, Comb),
    /// A chain of projections (derived form).
    Proj(Path),
    /// A tuple of chains of projections (derived form).
    Tuple(Projs),
    /// `curry(f)`
    Curry(Comb),
    /// `eval : (B ⇒ C) × B → C`
    Eval,
    /// A literal constant `1 → T`.
    Const(Lit),
    /// A primitive operation, with the source location of its use (for runtime errors).
    Prim(Prim, Span),
    /// `inl : A → A + B`
    Inl,
    /// `inr : B → A + B`
    Inr,
    /// `[f, g] : A + B → C`
    Copair(Comb, Comb),
    /// `dist : A × (B + C) → (A × B) + (A × C)`
    Dist,
    /// `map(f)`
    Map(Comb),
    /// `map2(f)`, with the location of the `map2` (unequal lengths are a runtime error).
    Map2(Comb, Span),
    /// `build(f)`, with its location (a negative length is a runtime error).
    Build(Comb, Span),
    /// `index`, with its location (out of range is a runtime error).
    Index(Span),
    /// `length`
    Length,
    /// `replicate`, with its location (a negative length is a runtime error).
    Replicate(Span),
    /// An array literal of the given number of elements.
    Array(usize),
    /// `it(f)`, with the location of the loop (for the step limit's error); with the tape
    /// flag `itTape(f) : Γ × A → B × Array C` for `f : Γ × A → (A + B) × C`, which also
    /// returns the `C` of every step run (what `scan` compiles to).
    Iter(Comb, Span, bool),
    /// `fix(h) : Z → B` for `h : (Z ⇒ B) × Z → B`, with the location of the recursive
    /// definition (for the depth and step limits' errors).
    Fix(Comb, Span),
}

/// A typed combinator (cheap to clone; immutable).
#[derive(Clone)]
pub struct Comb(Rc<Deep<Node>>);

/// A combinator node.
pub struct Node {
    /// The form.
    pub kind: CombKind,
    /// The domain.
    pub dom: Type,
    /// The codomain.
    pub cod: Type,
}

impl std::ops::Deref for Comb {
    type Target = Node;
    fn deref(&self) -> &Node {
        &self.0
    }
}

#[track_caller]
fn fits(what: &str, expected: &Type, found: &Type) {
    if expected != found {
        panic!("internal error: ill-typed combinator {what}: expected {expected}, found {found}");
    }
}

#[track_caller]
fn prod(what: &str, t: &Type) -> (Type, Type) {
    match t.as_prod() {
        Some((a, b)) => (a.clone(), b.clone()),
        None => panic!("internal error: ill-typed combinator {what}: {t} is not a product"),
    }
}

impl Comb {
    fn node(kind: CombKind, dom: Type, cod: Type) -> Comb {
        Comb(Rc::new(Deep::new(Node { kind, dom, cod })))
    }

    /// `id_A`.
    pub fn id(a: &Type) -> Comb {
        Comb::node(CombKind::Id, a.clone(), a.clone())
    }

    /// `g ∘ f`.
    #[track_caller]
    pub fn compose(g: Comb, f: Comb) -> Comb {
        fits("g ∘ f", &g.dom, &f.cod);
        let (dom, cod) = (f.dom.clone(), g.cod.clone());
        Comb::node(CombKind::Compose(g, f), dom, cod)
    }

    /// `bang_A : A → 1`.
    pub fn bang(a: &Type) -> Comb {
        Comb::node(CombKind::Bang, a.clone(), Type::Unit)
    }

    /// `fst : A × B → A`.
    pub fn fst(a: &Type, b: &Type) -> Comb {
        Comb::node(CombKind::Fst, Type::prod(a.clone(), b.clone()), a.clone())
    }

    /// `snd : A × B → B`.
    pub fn snd(a: &Type, b: &Type) -> Comb {
        Comb::node(CombKind::Snd, Type::prod(a.clone(), b.clone()), b.clone())
    }

    /// `fst` with its domain given as a product type (shares the type).
    #[track_caller]
    pub fn fst_of(ab: &Type) -> Comb {
        let (a, _) = prod("fst", ab);
        Comb::node(CombKind::Fst, ab.clone(), a)
    }

    /// `snd` with its domain given as a product type (shares the type).
    #[track_caller]
    pub fn snd_of(ab: &Type) -> Comb {
        let (_, b) = prod("snd", ab);
        Comb::node(CombKind::Snd, ab.clone(), b)
    }

    /// `⟨f, g⟩`.
    #[track_caller]
    pub fn pair(f: Comb, g: Comb) -> Comb {
        fits("⟨f, g⟩", &f.dom, &g.dom);
        let (dom, cod) = (f.dom.clone(), Type::prod(f.cod.clone(), g.cod.clone()));
        Comb::node(CombKind::Pair(f, g), dom, cod)
    }

    /// A projection chain from `dom`. Returns `None` if the path does not fit the type.
    pub fn proj(dom: &Type, path: Path) -> Option<Comb> {
        let cod = path.target(dom)?;
        Some(Comb::node(CombKind::Proj(path), dom.clone(), cod))
    }

    /// A projection chain whose target type the caller knows (O(1); the compiler's variables).
    pub(crate) fn proj_to(dom: &Type, path: Path, cod: Type) -> Comb {
        debug_assert_eq!(path.target(dom).as_ref(), Some(&cod));
        Comb::node(CombKind::Proj(path), dom.clone(), cod)
    }

    /// A tuple of projection chains from `dom`. Returns `None` if a chain does not fit.
    pub fn tuple(dom: &Type, projs: Projs) -> Option<Comb> {
        let cod = projs.target(dom)?;
        Some(Comb::node(CombKind::Tuple(projs), dom.clone(), cod))
    }

    /// A tuple of projection chains whose target type the caller knows (the compiler's
    /// rearrangements of contexts).
    pub(crate) fn tuple_to(dom: &Type, projs: Projs, cod: Type) -> Comb {
        debug_assert_eq!(projs.target(dom).as_ref(), Some(&cod));
        Comb::node(CombKind::Tuple(projs), dom.clone(), cod)
    }

    /// `curry(f) : A → (B ⇒ C)` for `f : A × B → C`.
    #[track_caller]
    pub fn curry(f: Comb) -> Comb {
        let (a, b) = prod("curry", &f.dom);
        let cod = Type::fun(b, f.cod.clone());
        Comb::node(CombKind::Curry(f), a, cod)
    }

    /// `eval : (B ⇒ C) × B → C`.
    pub fn eval(b: &Type, c: &Type) -> Comb {
        let dom = Type::prod(Type::fun(b.clone(), c.clone()), b.clone());
        Comb::node(CombKind::Eval, dom, c.clone())
    }

    /// A literal constant `1 → T`.
    pub fn constant(lit: Lit) -> Comb {
        Comb::node(CombKind::Const(lit), Type::Unit, lit.ty())
    }

    /// A primitive `A1 × (... × An) → B`.
    pub fn prim(op: Prim, at: Span) -> Comb {
        let (dom, cod) = (op.domain(), op.result().clone());
        Comb::node(CombKind::Prim(op, at), dom, cod)
    }

    /// `inl : A → A + B`.
    pub fn inl(a: &Type, b: &Type) -> Comb {
        Comb::node(CombKind::Inl, a.clone(), Type::sum(a.clone(), b.clone()))
    }

    /// `inr : B → A + B`.
    pub fn inr(a: &Type, b: &Type) -> Comb {
        Comb::node(CombKind::Inr, b.clone(), Type::sum(a.clone(), b.clone()))
    }

    /// `[f, g] : A + B → C`.
    #[track_caller]
    pub fn copair(f: Comb, g: Comb) -> Comb {
        fits("[f, g]", &f.cod, &g.cod);
        let (dom, cod) = (Type::sum(f.dom.clone(), g.dom.clone()), f.cod.clone());
        Comb::node(CombKind::Copair(f, g), dom, cod)
    }

    /// `dist : A × (B + C) → (A × B) + (A × C)`.
    pub fn dist(a: &Type, b: &Type, c: &Type) -> Comb {
        let dom = Type::prod(a.clone(), Type::sum(b.clone(), c.clone()));
        let cod = Type::sum(
            Type::prod(a.clone(), b.clone()),
            Type::prod(a.clone(), c.clone()),
        );
        Comb::node(CombKind::Dist, dom, cod)
    }

    /// `map(f) : Γ × Array A → Array B` for `f : Γ × A → B`.
    #[track_caller]
    pub fn map(f: Comb) -> Comb {
        let (g, a) = prod("map", &f.dom);
        let (dom, cod) = (Type::prod(g, Type::array(a)), Type::array(f.cod.clone()));
        Comb::node(CombKind::Map(f), dom, cod)
    }

    /// `map2(f) : Γ × (Array A × Array B) → Array C` for `f : Γ × (A × B) → C`.
    #[track_caller]
    pub fn map2(f: Comb, at: Span) -> Comb {
        let (g, ab) = prod("map2", &f.dom);
        let (a, b) = prod("map2", &ab);
        let dom = Type::prod(g, Type::prod(Type::array(a), Type::array(b)));
        let cod = Type::array(f.cod.clone());
        Comb::node(CombKind::Map2(f, at), dom, cod)
    }

    /// `build(f) : Γ × Int → Array A` for `f : Γ × Int → A`.
    #[track_caller]
    pub fn build(f: Comb, at: Span) -> Comb {
        let (_, i) = prod("build", &f.dom);
        fits("build index", &Type::Int, &i);
        let (dom, cod) = (f.dom.clone(), Type::array(f.cod.clone()));
        Comb::node(CombKind::Build(f, at), dom, cod)
    }

    /// `index : Array A × Int → A`.
    pub fn index(a: &Type, at: Span) -> Comb {
        Comb::node(
            CombKind::Index(at),
            Type::prod(Type::array(a.clone()), Type::Int),
            a.clone(),
        )
    }

    /// `length : Array A → Int`.
    pub fn length(a: &Type) -> Comb {
        Comb::node(CombKind::Length, Type::array(a.clone()), Type::Int)
    }

    /// `replicate : Int × A → Array A`.
    pub fn replicate(a: &Type, at: Span) -> Comb {
        Comb::node(
            CombKind::Replicate(at),
            Type::prod(Type::Int, a.clone()),
            Type::array(a.clone()),
        )
    }

    /// `array_n : A × (... × A) → Array A` (n copies of `A`, right-nested; `1` for n = 0).
    pub fn array(a: &Type, n: usize) -> Comb {
        let dom = Type::tuple(&vec![a.clone(); n]);
        Comb::node(CombKind::Array(n), dom, Type::array(a.clone()))
    }

    /// `it(f) : Γ × A → B` for `f : Γ × A → A + B`, or with `tape`
    /// `itTape(f) : Γ × A → B × Array C` for `f : Γ × A → (A + B) × C`.
    #[track_caller]
    pub fn iter(f: Comb, at: Span, tape: bool) -> Comb {
        let (_, a) = prod("it", &f.dom);
        let (next, c) = if tape {
            let (next, c) = prod("itTape", &f.cod);
            (next, Some(c))
        } else {
            (f.cod.clone(), None)
        };
        let Some((a2, b)) = next.as_sum() else {
            panic!(
                "internal error: it(f) with f : {} → {}, not into a sum",
                f.dom, f.cod
            )
        };
        fits("it state", &a, a2);
        let cod = match c {
            Some(c) => Type::prod(b.clone(), Type::array(c)),
            None => b.clone(),
        };
        let dom = f.dom.clone();
        Comb::node(CombKind::Iter(f, at, tape), dom, cod)
    }

    /// `fix(h) : Z → B` for `h : (Z ⇒ B) × Z → B`.
    #[track_caller]
    pub fn fix(h: Comb, at: Span) -> Comb {
        let (zb, z) = prod("fix", &h.dom);
        let Some((z2, b)) = zb.as_fun() else {
            panic!(
                "internal error: fix(h) with h : {} → {}, not taking a function",
                h.dom, h.cod
            )
        };
        fits("fix argument", &z, z2);
        fits("fix result", b, &h.cod);
        let (dom, cod) = (z.clone(), h.cod.clone());
        Comb::node(CombKind::Fix(h, at), dom, cod)
    }

    /// The immediate sub-combinators.
    pub fn children(&self) -> SmallVec<[&Comb; 2]> {
        use CombKind::*;
        match &self.kind {
            Compose(a, b) | Pair(a, b) | Copair(a, b) => SmallVec::from_slice(&[a, b]),
            Curry(a) | Map(a) | Map2(a, _) | Build(a, _) | Iter(a, _, _) | Fix(a, _) => {
                SmallVec::from_slice(&[a])
            }
            _ => SmallVec::new(),
        }
    }

    /// Number of nodes (iteratively).
    pub fn size(&self) -> usize {
        let mut n = 0;
        let mut stack = vec![self];
        while let Some(c) = stack.pop() {
            n += 1;
            stack.extend(c.children());
        }
        n
    }
}

impl fmt::Display for Comb {
    /// The combinator in the notation of the module documentation (see [`mod@print`]).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&print::to_string(self, 100))
    }
}

impl fmt::Debug for Comb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self} : {} → {}", self.dom, self.cod)
    }
}
