//! Transposition of linear maps: from `λ̲d. l : L ⊸ L'` the map `λ̲c. lᵀ : L'* ⊸ L*` with
//! `<lᵀ[c], d> = <c, l[d]>` (YOLO: Radul, Paszke, Frostig, Johnson, Maclaurin, "You Only
//! Linearize Once", POPL 2023, §5; `theory-notes/09-transposition.md`).
//!
//! **Types.** Every linear type `L` has a dual `L*` ([`Transposer::dual`]): the finite ones are
//! self-dual, a power is dual to a copower. A Cartesian type is mapped by `T`, which transposes
//! every linear function type in it and leaves the rest alone ([`Transposer::ty`]):
//!
//! ```text
//! Real* = Real   1* = 1   (L × L')* = L* × L'*   (L ⊕ L')* = L* ⊕ L'*   (Array L)* = Array L*
//! (τ → L)* = !T(τ) ⊗ L*        (!τ ⊗ L)* = T(τ) → L*
//! T(L ⊸ L') = L'* ⊸ L*    T(A × B) = T A × T B   T(A → B) = T A → T B   ...   T(Real) = Real
//! ```
//!
//! On the forward-mode image of a first-order program, `T(F1 A × (F2 A ⊸ F2 B)) = R1 A × (R2 B ⊸
//! R2 A)`: transposing forward CHAD's output gives a term of reverse CHAD's type
//! ([`crate::linearize`]).
//!
//! **Judgements.** Two transformations, one exhaustive `match` each:
//!
//! ```text
//! Γ ⊢ t : τ              ⟹   T(Γ) ⊢ T(t) : T(τ)                      (Cartesian terms: [`Transposer::term`])
//! Γ; Δ ⊢ l : L, c : L*   ⟹   T(Γ); c : L* ⊢ lᵀ[c] : Δ*                (linear terms: [`Transposer::tr`])
//! ```
//!
//! `T` is a homomorphism on every Cartesian form except the three that make linear maps:
//! `T(λ̲d. l) = λ̲c. lᵀ[c]` (the cotangent of `d`), `T(k t)` for a derivative kernel is its
//! transposed kernel at `T(t)` (or the transpose of its expansion), and `T(f • t)` (a linear map
//! applied to data) has no transpose: an error. `lᵀ[c]` computes the cotangents of all the
//! linear variables `Δ` of `l` at once: it is a block of `let`s, emitted in the order they run,
//! with a list of contributions per linear variable that is summed where the variable is bound.
//!
//! **Rules** (YOLO's, extended to the whole linear fragment; `u += e` adds a contribution to
//! `u`'s list, `c` is atomised — bound to a variable by a linear `let` — where it is used more
//! than once):
//!
//! ```text
//! u            ⟹  u += c                               (a linear variable)
//! 0            ⟹  nothing                              (drop)
//! l1 + l2      ⟹  l1ᵀ[c]; l2ᵀ[c]                        (dup: the cotangent is used twice)
//! (l1, l2)     ⟹  l1ᵀ[fst c]; l2ᵀ[snd c]                fst l ⟹ lᵀ[(c, 0)]    snd l ⟹ lᵀ[(0, c)]
//! t * l        ⟹  lᵀ[T(t) * c]                          f • l ⟹ lᵀ[T(f) • c]
//! let p = t in l        ⟹  let T(p) = T(t); lᵀ[c]               (non-linear let: copied)
//! let u = l1 in l2      ⟹  l2ᵀ[c]; let cu = Σ(u +=); l1ᵀ[cu]   (linear let: reversed)
//! !t ⊗ l       ⟹  lᵀ[c @ T(t)]                          l @ t ⟹ lᵀ[!T(t) ⊗ c]
//! copowfold f l ⟹ lᵀ[\b -> T(f) b • c]                 \b -> l ⟹ Δ += copowfold (\b -> λ̲c'. lᵀ[c']) c
//! linl l       ⟹  lᵀ[fromLeft c]                        fromLeft l ⟹ lᵀ[linl c]     (and right)
//! replicate n l ⟹ lᵀ[lsum c]                           lsum l ⟹ lᵀ[replicate |l| c]
//! onehot n i l ⟹  lᵀ[c ! T(i)]                          l ! i ⟹ lᵀ[onehot |l| T(i) c]
//! lmap f l     ⟹  lᵀ[lmap T(f) c]                       zipWith fs l ⟹ lᵀ[zipWith T(fs) c]
//! lbuild n (\i -> l)   ⟹  Δ += lsum (lbuild T(n) (\i -> lᵀ[c ! i]))
//! case t of inl p -> l1 | inr q -> l2  ⟹  Δ += case T(t) of inl T(p) -> l1ᵀ[c] | inr T(q) -> l2ᵀ[c]
//! ```
//!
//! In the last three a binder scopes the body: its transpose is a block of its own whose
//! contributions to the outer variables are returned as a tuple (zeros filled in where a
//! branch contributes nothing). Before a block is transposed its Cartesian `let`s are floated
//! to its head (they cannot depend on linear variables), so everything a block binds is in
//! scope for all of its transposed code.
//!
//! **Lengths.** `lsum l` and `l ! i` transpose to a `replicate` and a `onehot` whose length is
//! that of the array `l`, which the linear term does not state: it is inferred ([`Shape`]) from
//! the forms that make arrays (`lbuild`, `onehot`, `replicate`, `zipWith`, `lmap`), through
//! linear `let`s, and for the variable of the linear map from a *witness* given by the caller: a
//! Cartesian value with the same shape (for a forward derivative `λ̲d. l` at `x`, the primal `x`
//! itself: `F2 A` has the shape of `F1 A`). A length that cannot be inferred is an error. An
//! index that is a literal beyond a literal length transposes to `0` (the original reads zero
//! padding); other indices are trusted to be in range, as in derivative code, where the primal
//! indexing checked them.
//!
//! **Cost.** Each linear form becomes a constant number of forms (YOLO's work conservation),
//! except that a binder returns one contribution per outer variable its body uses (which the
//! body's own work pays for); Cartesian subterms are copied once. The output is meant to be
//! simplified ([`crate::simplify`]): it contains zero pairs, sums of one-hots over `lbuild`
//! (`sumBuildOneHot` turns them into gathers) and single-use `let`s.

use super::term::{LNode, LTerm, LTermKind, LinPrim, Lit, Node, Pat, Term, TermKind, Var, VarId};
use super::types::{LTy, Ty};
use crate::deep::deep;
use crate::error::{Error, ErrorKind, Result};
use crate::ir::lower::TypeOf;
use rustc_hash::FxHashMap;
use std::rc::Rc;

/// The shape of a linear array value, as far as it is known: what its length (and its
/// elements' lengths) are, as Cartesian terms of the *input* (untransposed) term.
#[derive(Clone)]
pub enum Shape {
    /// Not known.
    Unknown,
    /// The value is zero (e.g. an element a sum of one-hots does not set): any shape will do,
    /// and its transpose contributes nothing.
    Zero,
    /// The shape of a Cartesian value of the given type: arrays of the same lengths, pairs
    /// componentwise (a witness: `x` for the tangent of `x`).
    Of(Term, Ty),
    /// An array of the given length whose elements have the given shape.
    Array(Term, Rc<Shape>),
    /// An array of a literal length whose elements have the given shapes, one per index (a
    /// sum of one-hots at literal indices, the tangent of an array literal: the elements of a
    /// ragged array differ).
    Items(Rc<Vec<Shape>>),
    /// A pair of the given shapes.
    Pair(Rc<Shape>, Rc<Shape>),
}

impl Shape {
    /// The shape of a value whose witness is the Cartesian term `t : ty`.
    pub fn of(t: Term, ty: Ty) -> Shape {
        Shape::Of(t, ty)
    }

    fn len(&self) -> Option<Term> {
        match self {
            Shape::Of(t, Ty::Array(_)) => Some(length_of(t)),
            Shape::Array(n, _) => Some(n.clone()),
            Shape::Items(items) => Some(Term::lit(Lit::Int(items.len() as i64))),
            _ => None,
        }
    }

    /// The length, if it is a literal.
    fn literal_len(&self) -> Option<i64> {
        match self.len().map(|t| t.kind.clone()) {
            Some(TermKind::Lit(Lit::Int(n))) => Some(n),
            _ => None,
        }
    }

    fn elem(&self, i: &Term) -> Shape {
        match self {
            Shape::Of(t, Ty::Array(e)) => {
                let item = match (&t.kind, &i.kind) {
                    (TermKind::Array(_, items), TermKind::Lit(Lit::Int(j)))
                        if (0..items.len() as i64).contains(j) =>
                    {
                        items[*j as usize].clone()
                    }
                    _ => Term::mk(TermKind::Index(t.clone(), i.clone())),
                };
                Shape::Of(item, (**e).clone())
            }
            Shape::Array(_, e) => (**e).clone(),
            Shape::Zero => Shape::Zero,
            Shape::Items(items) => match &i.kind {
                // Past the end: zero padding.
                TermKind::Lit(Lit::Int(j)) => usize::try_from(*j)
                    .ok()
                    .and_then(|j| items.get(j))
                    .cloned()
                    .unwrap_or(Shape::Zero),
                // An index not known here: the elements' shape if they are alike; else, for
                // arrays, the length looked up by the index (`[n0, n1, ..] ! i`).
                _ => Shape::items_at(items, i),
            },
            _ => Shape::Unknown,
        }
    }

    /// The shape of element `i` (not a literal) of an array whose elements have the shapes
    /// `items` (zero ones have any shape).
    fn items_at(items: &[Shape], i: &Term) -> Shape {
        let set: Vec<&Shape> = items.iter().filter(|s| !matches!(s, Shape::Zero)).collect();
        let Some(first) = set.first() else {
            return Shape::Zero;
        };
        if !first.known() {
            return Shape::Unknown;
        }
        let first_len = first.literal_len();
        if first_len.is_some() && set.iter().all(|s| s.literal_len() == first_len) {
            if set.len() == items.len() && set.iter().all(|s| s.same_literal(first)) {
                return (*first).clone();
            }
            return Shape::Array(first.len().expect("a length"), Rc::new(Shape::Unknown));
        }
        if first_len.is_none() && set.len() == 1 && items.len() == 1 {
            return (*first).clone();
        }
        let lens: Option<Vec<Term>> = items
            .iter()
            .map(|s| match s {
                Shape::Zero => Some(Term::lit(Lit::Int(0))),
                s => s.len(),
            })
            .collect();
        match lens {
            Some(lens) => Shape::Array(
                Term::mk(TermKind::Index(
                    Term::mk(TermKind::Array(Ty::Int, lens)),
                    i.clone(),
                )),
                Rc::new(Shape::Unknown),
            ),
            None => Shape::Unknown,
        }
    }

    /// Whether two shapes are the same and all their lengths literals (so equal everywhere).
    fn same_literal(&self, other: &Shape) -> bool {
        match (self, other) {
            (Shape::Array(..) | Shape::Items(_) | Shape::Of(..), _) => {
                let (m, n) = (self.literal_len(), other.literal_len());
                m.is_some()
                    && m == n
                    && (0..m.unwrap_or(0)).all(|k| {
                        let k = Term::lit(Lit::Int(k));
                        let (a, b) = (self.elem(&k), other.elem(&k));
                        // Elements that are not arrays (reals) have no lengths to differ.
                        a.len().is_none() && b.len().is_none() && !matches!(a, Shape::Pair(..))
                            || a.same_literal(&b)
                    })
            }
            _ => false,
        }
    }

    fn proj(&self, second: bool) -> Shape {
        match self {
            Shape::Of(t, Ty::Prod(p)) => {
                let part = match &t.kind {
                    TermKind::Pair(a, b) => if second { b } else { a }.clone(),
                    _ if second => Term::snd(t.clone()),
                    _ => Term::fst(t.clone()),
                };
                Shape::Of(part, if second { &p.1 } else { &p.0 }.clone())
            }
            Shape::Pair(a, b) => (**if second { b } else { a }).clone(),
            Shape::Zero => Shape::Zero,
            _ => Shape::Unknown,
        }
    }

    fn known(&self) -> bool {
        !matches!(self, Shape::Unknown | Shape::Zero)
    }

    /// The shape of `a + b`: either side's (the summands have the same shape in derivative
    /// code; where both lengths are literals the longer one, as zero padding makes the sum).
    /// Per-index items and pairs are joined componentwise (`onehot 3 0 a + onehot 3 1 b` knows
    /// both elements' shapes, `(a, 0) + (0, b)` both components').
    fn join(a: Shape, b: Shape) -> Shape {
        match (&a, &b) {
            (Shape::Zero, _) => b,
            (_, Shape::Zero) => a,
            (Shape::Unknown, _) => b,
            (_, Shape::Unknown) => a,
            (Shape::Items(_), _) | (_, Shape::Items(_)) => {
                let n = a
                    .literal_len()
                    .unwrap_or(0)
                    .max(b.literal_len().unwrap_or(0));
                let items = (0..n)
                    .map(|k| {
                        let k = Term::lit(Lit::Int(k));
                        Shape::join(a.elem(&k), b.elem(&k))
                    })
                    .collect();
                Shape::Items(Rc::new(items))
            }
            (Shape::Pair(a0, a1), Shape::Pair(b0, b1)) => Shape::Pair(
                Rc::new(Shape::join((**a0).clone(), (**b0).clone())),
                Rc::new(Shape::join((**a1).clone(), (**b1).clone())),
            ),
            _ => match (a.literal_len(), b.literal_len()) {
                (Some(m), Some(n)) if n > m => b,
                _ => a,
            },
        }
    }
}

/// `length t`, a literal for an array literal.
fn length_of(t: &Term) -> Term {
    match &t.kind {
        TermKind::Array(_, items) => Term::lit(Lit::Int(items.len() as i64)),
        _ => Term::mk(TermKind::Length(t.clone())),
    }
}

fn unsupported(msg: String) -> Error {
    Error::new(ErrorKind::Unsupported, format!("transposition: {msg}"))
}

fn short(l: &LTerm) -> String {
    let s = super::print::linear_to_string(l, 1000);
    let s = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if s.chars().count() > 60 {
        format!("{}…", s.chars().take(59).collect::<String>())
    } else {
        s
    }
}

/// A binding of a transposed block.
enum Bind {
    /// A Cartesian `let p = t`.
    Cart(Pat, Term),
    /// A linear `let u = l`.
    Lin(Var, LTerm),
}

/// The `let`s of a transposed block, in the order they run.
#[derive(Default)]
struct Block(Vec<Bind>);

impl Block {
    fn finish(self, body: LTerm) -> LTerm {
        self.0.into_iter().rev().fold(body, |b, bind| match bind {
            Bind::Cart(p, t) => LTerm::mk(LTermKind::Let(p, t, b)),
            Bind::Lin(u, l) => LTerm::lin_let(&u, l, b),
        })
    }
}

/// The contributions to each linear variable, in the order the variables were first met.
#[derive(Default)]
struct Acc {
    order: Vec<Var>,
    parts: FxHashMap<VarId, Vec<LTerm>>,
}

impl Acc {
    fn push(&mut self, u: &Var, c: LTerm) {
        let parts = self.parts.entry(u.id).or_insert_with(|| {
            self.order.push(u.clone());
            Vec::new()
        });
        parts.push(c);
    }

    /// The contributions to `u` (removed), if any.
    fn take(&mut self, u: &Var) -> Option<Vec<LTerm>> {
        let parts = self.parts.remove(&u.id)?;
        self.order.retain(|v| v.id != u.id);
        Some(parts)
    }

    /// The variables with contributions, in order, and theirs.
    fn drain(self) -> Vec<(Var, Vec<LTerm>)> {
        let mut parts = self.parts;
        self.order
            .into_iter()
            .map(|v| {
                let p = parts.remove(&v.id).unwrap_or_default();
                (v, p)
            })
            .collect()
    }
}

/// The sum of some contributions (`0 : ty` for none).
fn sum(parts: Vec<LTerm>, ty: LTy) -> LTerm {
    parts
        .into_iter()
        .reduce(LTerm::plus)
        .unwrap_or_else(|| LTerm::zero(ty))
}

/// The right-nested tuple of some linear terms and the projections out of a variable of it.
fn tuple(ls: Vec<LTerm>) -> LTerm {
    let mut it = ls.into_iter().rev();
    let last = it.next().unwrap_or_else(|| LTerm::zero(LTy::Unit));
    it.fold(last, |acc, l| LTerm::pair(l, acc))
}

fn tuple_ty(ts: Vec<LTy>) -> LTy {
    let mut it = ts.into_iter().rev();
    let last = it.next().unwrap_or(LTy::Unit);
    it.fold(last, |acc, l| LTy::prod(l, acc))
}

fn projections(s: &Var, n: usize) -> Vec<LTerm> {
    let mut out = Vec::with_capacity(n);
    let mut rest = LTerm::var(s);
    for k in 0..n {
        if k + 1 == n {
            out.push(rest.clone());
        } else {
            out.push(LTerm::fst(rest.clone()));
            rest = LTerm::snd(rest);
        }
    }
    out
}

/// The transposer: type maps with their memo tables, the renaming of variables whose types
/// `T` changes, the shapes of linear variables, and the witnesses given for linear λs.
#[derive(Default)]
pub struct Transposer {
    types: TypeOf,
    rename: FxHashMap<VarId, Var>,
    ty_memo: FxHashMap<usize, (Ty, Option<Ty>)>,
    dual_memo: FxHashMap<usize, (LTy, LTy)>,
    shapes: FxHashMap<VarId, Shape>,
    shape_memo: FxHashMap<*const LNode, (LTerm, Shape)>,
    /// The shapes of the outputs of linear maps bound to variables: `let (y, f) = ..` in forward
    /// mode pairs a primal `y` with its derivative `f`, whose outputs have `y`'s shape.
    outputs: FxHashMap<VarId, Shape>,
    witnesses: FxHashMap<*const Node, (Term, Shape)>,
}

/// The address of the shared node of a type, if it has one (the key of the memo tables).
fn ty_key(t: &Ty) -> Option<usize> {
    Some(match t {
        Ty::Prod(p) | Ty::Fun(p) | Ty::Sum(p) => Rc::as_ptr(p) as *const () as usize,
        Ty::Array(a) => Rc::as_ptr(a) as *const () as usize,
        Ty::LinFun(p) => Rc::as_ptr(p) as *const () as usize,
        Ty::Lin(l) => Rc::as_ptr(l) as *const () as usize,
        Ty::Real | Ty::Int | Ty::Bool | Ty::Unit => return None,
    })
}

fn lty_key(t: &LTy) -> Option<usize> {
    Some(match t {
        LTy::Prod(p) | LTy::Sum(p) => Rc::as_ptr(p) as *const () as usize,
        LTy::Copower(p) | LTy::Power(p) => Rc::as_ptr(p) as *const () as usize,
        LTy::Array(a) => Rc::as_ptr(a) as *const () as usize,
        LTy::Real | LTy::Unit => return None,
    })
}

impl Transposer {
    /// A transposer with no witnesses.
    pub fn new() -> Transposer {
        Transposer::default()
    }

    /// Declares `witness` (a Cartesian term in scope where `f` is) to have the shape of the
    /// input of the linear map `f` (a [`TermKind::LinLam`] node of the term to be transposed).
    pub fn witness(&mut self, f: &Term, witness: Shape) {
        self.witnesses
            .insert(&**f as *const Node, (f.clone(), witness));
    }

    // ----- types -----

    /// `T(τ)`: every linear function type in `τ` transposed.
    pub fn ty(&mut self, t: &Ty) -> Ty {
        self.changed(t).unwrap_or_else(|| t.clone())
    }

    /// `T(τ)` if it differs from `τ`.
    fn changed(&mut self, t: &Ty) -> Option<Ty> {
        let key = ty_key(t)?;
        if let Some((_, r)) = self.ty_memo.get(&key) {
            return r.clone();
        }
        let r = deep(|| match t {
            Ty::Real | Ty::Int | Ty::Bool | Ty::Unit => None,
            Ty::Prod(p) | Ty::Fun(p) | Ty::Sum(p) => {
                let (a, b) = (self.changed(&p.0), self.changed(&p.1));
                if a.is_none() && b.is_none() {
                    return None;
                }
                let a = a.unwrap_or_else(|| p.0.clone());
                let b = b.unwrap_or_else(|| p.1.clone());
                Some(match t {
                    Ty::Prod(_) => Ty::prod(a, b),
                    Ty::Fun(_) => Ty::fun(a, b),
                    _ => Ty::sum(a, b),
                })
            }
            Ty::Array(e) => self.changed(e).map(Ty::array),
            Ty::LinFun(p) => Some(Ty::lin_fun(self.dual(&p.1), self.dual(&p.0))),
            // Linear values as data are not transposed (only maps are).
            Ty::Lin(_) => None,
        });
        self.ty_memo.insert(key, (t.clone(), r.clone()));
        r
    }

    /// `L*`, the dual of a linear type.
    pub fn dual(&mut self, l: &LTy) -> LTy {
        let Some(key) = lty_key(l) else {
            return l.clone();
        };
        if let Some((_, r)) = self.dual_memo.get(&key) {
            return r.clone();
        }
        let r = deep(|| match l {
            LTy::Real | LTy::Unit => l.clone(),
            LTy::Prod(p) => LTy::prod(self.dual(&p.0), self.dual(&p.1)),
            LTy::Sum(p) => LTy::sum(self.dual(&p.0), self.dual(&p.1)),
            LTy::Array(e) => LTy::array(self.dual(e)),
            LTy::Power(p) => LTy::copower(self.ty(&p.0), self.dual(&p.1)),
            LTy::Copower(p) => LTy::power(self.ty(&p.0), self.dual(&p.1)),
        });
        self.dual_memo.insert(key, (l.clone(), r.clone()));
        r
    }

    fn lty_of(&mut self, l: &LTerm) -> LTy {
        self.types.linear(l)
    }

    // ----- variables -----

    /// The variable `v` binds in the transposed term (a fresh one if `T` changes its type).
    fn bind(&mut self, v: &Var) -> Var {
        match self.changed(&v.ty) {
            None => v.clone(),
            Some(ty) => {
                let w = Var::fresh(v.name.clone(), ty);
                self.rename.insert(v.id, w.clone());
                w
            }
        }
    }

    fn var(&self, v: &Var) -> Var {
        self.rename.get(&v.id).cloned().unwrap_or_else(|| v.clone())
    }

    fn pat(&mut self, p: &Pat) -> Pat {
        match p {
            Pat::Var(v) => Pat::Var(self.bind(v)),
            Pat::Wild(t) => Pat::Wild(self.ty(t)),
            Pat::Pair(a, b) => Pat::Pair(Box::new(self.pat(a)), Box::new(self.pat(b))),
        }
    }

    /// Notes what a Cartesian `let p = ..` tells about shapes: a pattern `(y, f)` with `f` a
    /// linear map into arrays shaped like `y`'s type is a primal paired with its derivative
    /// (forward mode's image), so `f`'s outputs have `y`'s shape.
    fn note_let(&mut self, p: &Pat) {
        if let Pat::Pair(a, b) = p
            && let (Pat::Var(y), Pat::Var(f)) = (&**a, &**b)
            && let Some((_, cod)) = f.ty.as_lin_fun()
            && tangent_like(&y.ty, cod)
        {
            self.outputs
                .insert(f.id, Shape::of(Term::var(y), y.ty.clone()));
        }
    }

    // ----- Cartesian terms -----

    /// `T(t)`: the term with every linear map in it transposed.
    pub fn term(&mut self, t: &Term) -> Result<Term> {
        deep(|| self.term_(t))
    }

    fn term_(&mut self, t: &Term) -> Result<Term> {
        use TermKind as K;
        let kind = match &t.kind {
            K::Var(x) => K::Var(self.var(x)),
            K::Lit(l) => K::Lit(*l),
            K::Lam(x, b) => {
                let x = self.bind(x);
                K::Lam(x, self.term(b)?)
            }
            K::App(f, a) => K::App(self.term(f)?, self.term(a)?),
            K::Loop(f, x, tape) => K::Loop(self.term(f)?, self.term(x)?, *tape),
            K::Fix(f, at) => K::Fix(self.term(f)?, *at),
            K::Let(..) => {
                // Let chains are long: iteratively.
                let mut binds = Vec::new();
                let mut b = t;
                while let K::Let(p, e, body) = &b.kind {
                    let e = self.term(e)?;
                    self.note_let(p);
                    binds.push((self.pat(p), e, b.span));
                    b = body;
                }
                let body = self.term(b)?;
                return Ok(binds.into_iter().rev().fold(body, |body, (p, e, span)| {
                    Term::new(K::Let(p, e, body), span)
                }));
            }
            K::Pair(a, b) => K::Pair(self.term(a)?, self.term(b)?),
            K::Fst(e) => K::Fst(self.term(e)?),
            K::Snd(e) => K::Snd(self.term(e)?),
            K::If(c, a, b) => K::If(self.term(c)?, self.term(a)?, self.term(b)?),
            K::Inl(e, r) => K::Inl(self.term(e)?, self.ty(r)),
            K::Inr(l, e) => K::Inr(self.ty(l), self.term(e)?),
            K::Case(e, p, a, q, b) => {
                let e = self.term(e)?;
                let p = self.pat(p);
                let a = self.term(a)?;
                let q = self.pat(q);
                K::Case(e, p, a, q, self.term(b)?)
            }
            K::Prim(op, args) => K::Prim(
                op.clone(),
                args.iter().map(|a| self.term(a)).collect::<Result<_>>()?,
            ),
            K::Array(ty, items) => K::Array(
                self.ty(ty),
                items.iter().map(|a| self.term(a)).collect::<Result<_>>()?,
            ),
            K::Map(f, xs) => K::Map(self.term(f)?, self.term(xs)?),
            K::Map2(f, xs, ys) => K::Map2(self.term(f)?, self.term(xs)?, self.term(ys)?),
            K::Build(n, f) => K::Build(self.term(n)?, self.term(f)?),
            K::Index(xs, i) => K::Index(self.term(xs)?, self.term(i)?),
            K::Length(xs) => K::Length(self.term(xs)?),
            K::Replicate(n, x) => K::Replicate(self.term(n)?, self.term(x)?),
            K::LinLam(v, l) => {
                let shape = self
                    .witnesses
                    .get(&(&**t as *const Node))
                    .map_or(Shape::Unknown, |(_, s)| s.clone());
                return self.lin_lam(v, l, shape);
            }
            K::LinApp(..) => {
                return Err(unsupported(
                    "a linear map applied to a value (`f • t` in a Cartesian term) has no \
                     transpose"
                        .into(),
                ));
            }
            K::LinPrim(k, a) => return self.kernel(k, a),
        };
        Ok(Term::new(kind, t.span))
    }

    /// `T(k t)`: the transposed kernel at `T(t)`, or the transpose of the kernel's expansion.
    fn kernel(&mut self, k: &Rc<LinPrim>, a: &Term) -> Result<Term> {
        if let Some(kt) = k.transposed()
            && self.changed(k.param()).is_none()
        {
            let (dom, cod) = (self.dual(k.cod()), self.dual(k.dom()));
            if kt.param() != k.param() || kt.dom() != &dom || kt.cod() != &cod {
                return Err(unsupported(format!(
                    "the kernel `{}` declared as the transpose of `{}` has the wrong type",
                    kt.name(),
                    k.name()
                )));
            }
            return Ok(Term::mk(TermKind::LinPrim(kt, self.term(a)?)));
        }
        let p = Var::fresh("k", k.param().clone());
        let Some(e) = k.expansion(&Term::var(&p)) else {
            return Err(unsupported(format!(
                "the derivative kernel `{}` has neither a transposed kernel nor an expansion",
                k.name()
            )));
        };
        self.term(&Term::let_(&p, a.clone(), e))
    }

    /// `T(λ̲v. l) = λ̲c. lᵀ[c]`, given the shape of `v`.
    fn lin_lam(&mut self, v: &Var, l: &LTerm, shape: Shape) -> Result<Term> {
        let Some(lv) = v.lin_ty().cloned() else {
            return Err(unsupported(format!(
                "`{}` is not a linear variable",
                v.name
            )));
        };
        let cod = self.lty_of(l);
        let c = Var::linear("c", self.dual(&cod));
        self.shapes.insert(v.id, shape);
        let (block, mut acc) = self.block(l, LTerm::var(&c))?;
        let parts = acc.take(v).unwrap_or_default();
        if let Some((u, _)) = acc.drain().into_iter().next() {
            return Err(unsupported(format!(
                "the linear λ of `{}` uses the linear variable `{}`, which is not its own",
                v.name, u.name
            )));
        }
        let dual = self.dual(&lv);
        Ok(Term::lin_lam(&c, block.finish(sum(parts, dual))))
    }

    /// The transpose of a block (a linear term with its own scope) at the cotangent `c`: its
    /// `let`s and the contributions to the linear variables from outside it.
    fn block(&mut self, l: &LTerm, c: LTerm) -> Result<(Block, Acc)> {
        let mut lets = Vec::new();
        let l = float(l, &mut lets);
        let mut block = Block::default();
        for (p, t) in lets {
            let t = self.term(&t)?;
            self.note_let(&p);
            let p = self.pat(&p);
            block.0.push(Bind::Cart(p, t));
        }
        let mut acc = Acc::default();
        self.tr(&l, c, &mut block, &mut acc)?;
        Ok((block, acc))
    }

    /// A sub-block's contributions to outer variables, as one term (a tuple for several) with
    /// the variables; `wrap` makes the term that runs the sub-block from its tuple.
    fn distribute(
        &mut self,
        outer: Vec<(Var, LTerm)>,
        wrap: impl FnOnce(LTerm) -> LTerm,
        block: &mut Block,
        acc: &mut Acc,
    ) {
        match outer.len() {
            0 => {}
            1 => {
                let (u, part) = outer.into_iter().next().expect("one");
                acc.push(&u, wrap(part));
            }
            n => {
                let tys: Vec<LTy> = outer
                    .iter()
                    .map(|(u, _)| {
                        let l = u.lin_ty().expect("linear variable").clone();
                        self.dual(&l)
                    })
                    .collect();
                let (vars, parts): (Vec<Var>, Vec<LTerm>) = outer.into_iter().unzip();
                let s = Var::linear("cs", tuple_ty(tys));
                block.0.push(Bind::Lin(s.clone(), wrap(tuple(parts))));
                for (u, p) in vars.iter().zip(projections(&s, n)) {
                    acc.push(u, p);
                }
            }
        }
    }

    /// The sums of a sub-block's contributions, one per variable.
    fn sums(&mut self, acc: Acc) -> Vec<(Var, LTerm)> {
        acc.drain()
            .into_iter()
            .map(|(u, parts)| {
                let ty = self.dual(u.lin_ty().expect("linear variable"));
                (u, sum(parts, ty))
            })
            .collect()
    }

    /// `c` as an atom (a variable or zero), bound by a linear `let` if it is not one; `l` is the
    /// term `c` is the cotangent of (for its type).
    fn atom(&mut self, c: LTerm, l: &LTerm, block: &mut Block) -> LTerm {
        if matches!(c.kind, LTermKind::Var(_) | LTermKind::Zero(_)) {
            return c;
        }
        let ty = self.lty_of(l);
        let ty = self.dual(&ty);
        let v = Var::linear("c", ty);
        block.0.push(Bind::Lin(v.clone(), c));
        LTerm::var(&v)
    }

    /// `lᵀ[c]`: adds the block's `let`s and the contributions to `Δ`.
    fn tr(&mut self, l: &LTerm, c: LTerm, block: &mut Block, acc: &mut Acc) -> Result<()> {
        deep(|| self.tr_(l, c, block, acc))
    }

    fn tr_(&mut self, l: &LTerm, c: LTerm, block: &mut Block, acc: &mut Acc) -> Result<()> {
        use LTermKind as K;
        if matches!(c.kind, K::Zero(_)) {
            // A zero cotangent contributes nothing.
            return Ok(());
        }
        match &l.kind {
            K::Chain(..) => {
                return Err(unsupported(
                    "a loop's derivative (`lchain`) chains the steps' derivatives recorded at \
                     run time as closures, which cannot be transposed syntactically; \
                     differentiate loops with reverse CHAD (without --via transpose)"
                        .into(),
                ));
            }
            K::Var(u) => acc.push(u, c),
            K::Zero(_) => {}
            K::Plus(a, b) => {
                let c = self.atom(c, l, block);
                self.tr(a, c.clone(), block, acc)?;
                self.tr(b, c, block, acc)?;
            }
            K::Pair(a, b) => {
                let c = self.atom(c, l, block);
                self.tr(a, LTerm::fst(c.clone()), block, acc)?;
                self.tr(b, LTerm::snd(c), block, acc)?;
            }
            K::Fst(a) | K::Snd(a) => {
                let ty = self.lty_of(a);
                let (x, y) = ty.as_prod().expect("a pair (checked)");
                let pair = if matches!(l.kind, K::Fst(_)) {
                    LTerm::pair(c, LTerm::zero(self.dual(y)))
                } else {
                    LTerm::pair(LTerm::zero(self.dual(x)), c)
                };
                self.tr(a, pair, block, acc)?;
            }
            K::App(f, a) => {
                if let TermKind::LinLam(u, body) = &f.kind {
                    // (λ̲u. body) • a is let u = a in body (so that u's shape is known); the
                    // body's Cartesian lets float to the block's head, as the block's own did.
                    let mut lets = Vec::new();
                    let body = float(body, &mut lets);
                    for (p, t) in lets {
                        let t = self.term(&t)?;
                        self.note_let(&p);
                        let p = self.pat(&p);
                        block.0.push(Bind::Cart(p, t));
                    }
                    let redex = LTerm::lin_let(u, a.clone(), body);
                    return self.tr(&redex, c, block, acc);
                }
                let f = self.term(f)?;
                self.tr(a, LTerm::app(f, c), block, acc)?;
            }
            K::Let(p, t, body) => {
                let t = self.term(t)?;
                self.note_let(p);
                let p = self.pat(p);
                block.0.push(Bind::Cart(p, t));
                self.tr(body, c, block, acc)?;
            }
            K::LinLet(u, a, b) => {
                let s = self.shape(a);
                self.shapes.insert(u.id, s);
                self.tr(b, c, block, acc)?;
                if let Some(parts) = acc.take(u) {
                    let ty = self.dual(u.lin_ty().expect("linear variable"));
                    let cu = self.atom(sum(parts, ty), a, block);
                    self.tr(a, cu, block, acc)?;
                }
            }
            K::Copower(t, a) => {
                let t = self.term(t)?;
                self.tr(a, LTerm::mk(K::PowApp(c, t)), block, acc)?;
            }
            K::CopowFold(f, a) => {
                let c = self.atom(c, l, block);
                let tf = self.term(f)?;
                let tau = match self.types.term(f).as_fun() {
                    Some((tau, _)) => tau.clone(),
                    None => return Err(unsupported("copowfold of a non-function".into())),
                };
                let b = Var::fresh("b", self.ty(&tau));
                let at = LTerm::app(Term::app(tf, Term::var(&b)), c);
                self.tr(a, LTerm::mk(K::PowLam(b, at)), block, acc)?;
            }
            K::PowLam(b, body) => {
                let c = self.atom(c, l, block);
                let b = self.bind(b);
                let cod = self.lty_of(body);
                let w = Var::linear("c", self.dual(&cod));
                let (sub, sub_acc) = self.block(body, LTerm::var(&w))?;
                let outer = self.sums(sub_acc);
                let wrap = |parts: LTerm| {
                    let f = Term::lam(&b, Term::lin_lam(&w, sub.finish(parts)));
                    LTerm::mk(K::CopowFold(f, c))
                };
                self.distribute(outer, wrap, block, acc);
            }
            K::PowApp(a, t) => {
                let t = self.term(t)?;
                self.tr(a, LTerm::mk(K::Copower(t, c)), block, acc)?;
            }
            K::Inl(a, _) => self.tr(a, LTerm::mk(K::FromLeft(c)), block, acc)?,
            K::Inr(_, a) => self.tr(a, LTerm::mk(K::FromRight(c)), block, acc)?,
            K::FromLeft(a) | K::FromRight(a) => {
                let ty = self.lty_of(a);
                let (x, y) = ty.as_sum().expect("a linear sum (checked)");
                let inj = if matches!(l.kind, K::FromLeft(_)) {
                    K::Inl(c, self.dual(y))
                } else {
                    K::Inr(self.dual(x), c)
                };
                self.tr(a, LTerm::mk(inj), block, acc)?;
            }
            K::Replicate(_, a) => self.tr(a, LTerm::mk(K::Sum(c)), block, acc)?,
            K::Sum(a) if matches!(self.shape(a), Shape::Zero) => {}
            K::Sum(a) => {
                let n = self.length(a)?;
                let n = self.term(&n)?;
                self.tr(a, LTerm::mk(K::Replicate(n, c)), block, acc)?;
            }
            K::OneHot(_, i, a) => {
                let i = self.term(i)?;
                self.tr(a, LTerm::mk(K::Index(c, i)), block, acc)?;
            }
            K::Index(a, _) if matches!(self.shape(a), Shape::Zero) => {}
            K::Index(a, i) => {
                let n = self.length(a)?;
                if let (TermKind::Lit(Lit::Int(n)), TermKind::Lit(Lit::Int(i))) = (&n.kind, &i.kind)
                    && !(0..*n).contains(i)
                {
                    // A literal index past a literal length reads zero padding.
                    return Ok(());
                }
                let (n, i) = (self.term(&n)?, self.term(i)?);
                self.tr(a, LTerm::mk(K::OneHot(n, i, c)), block, acc)?;
            }
            K::ZipWith(fs, a) => {
                let fs = self.term(fs)?;
                self.tr(a, LTerm::mk(K::ZipWith(fs, c)), block, acc)?;
            }
            K::Map(f, a) => {
                let f = self.term(f)?;
                self.tr(a, LTerm::mk(K::Map(f, c)), block, acc)?;
            }
            K::Build(n, i, body) => {
                let c = self.atom(c, l, block);
                let n = self.term(n)?;
                let ci = LTerm::mk(K::Index(c, Term::var(i)));
                let (sub, sub_acc) = self.block(body, ci)?;
                let outer = self.sums(sub_acc);
                let i = i.clone();
                let wrap =
                    |parts: LTerm| LTerm::mk(K::Sum(LTerm::mk(K::Build(n, i, sub.finish(parts)))));
                self.distribute(outer, wrap, block, acc);
            }
            K::Scale(t, a) => {
                let t = self.term(t)?;
                self.tr(a, LTerm::scale(t, c), block, acc)?;
            }
            K::Case(t, p, a, q, b) => {
                let c = self.atom(c, l, block);
                let t = self.term(t)?;
                let p = self.pat(p);
                let (sa, acc_a) = self.block(a, c.clone())?;
                let q = self.pat(q);
                let (sb, acc_b) = self.block(b, c)?;
                let (mut ca, mut cb) = (self.sums(acc_a), self.sums(acc_b));
                // Both branches return the same tuple: every variable either contributes to.
                let mut vars: Vec<Var> = ca.iter().map(|(u, _)| u.clone()).collect();
                for (u, _) in &cb {
                    if !vars.iter().any(|v| v.id == u.id) {
                        vars.push(u.clone());
                    }
                }
                let mut outer_a = Vec::with_capacity(vars.len());
                let mut outer_b = Vec::with_capacity(vars.len());
                for u in &vars {
                    let zero = LTerm::zero(self.dual(u.lin_ty().expect("linear variable")));
                    let take = |side: &mut Vec<(Var, LTerm)>| match side
                        .iter()
                        .position(|(v, _)| v.id == u.id)
                    {
                        Some(k) => side.remove(k).1,
                        None => zero.clone(),
                    };
                    outer_a.push(take(&mut ca));
                    outer_b.push(take(&mut cb));
                }
                let la = sa.finish(tuple(outer_a));
                let lb = sb.finish(tuple(outer_b));
                // `distribute` wants one part per variable; the tuple is already built.
                let outer: Vec<(Var, LTerm)> = vars
                    .into_iter()
                    .map(|u| (u, LTerm::zero(LTy::Unit)))
                    .collect();
                let wrap =
                    move |_parts: LTerm| LTerm::mk(K::Case(t, Box::new(p), la, Box::new(q), lb));
                self.distribute(outer, wrap, block, acc);
            }
        }
        Ok(())
    }

    /// The length of the linear array `a`, as a term of the input.
    fn length(&mut self, a: &LTerm) -> Result<Term> {
        self.shape(a).len().ok_or_else(|| {
            unsupported(format!(
                "the length of the linear array `{}` is not known here (it is needed to \
                 transpose `lsum` and `!`)",
                short(a)
            ))
        })
    }

    /// What is known of the shape of the value of `l` (memoised per node).
    fn shape(&mut self, l: &LTerm) -> Shape {
        let key: *const LNode = &**l;
        if let Some((_, s)) = self.shape_memo.get(&key) {
            return s.clone();
        }
        let s = deep(|| self.shape_(l));
        self.shape_memo.insert(key, (l.clone(), s.clone()));
        s
    }

    /// The shape of `l` (under the binders `bound` and the Cartesian `let`s at its head) as
    /// seen from outside them: `Unknown` if it mentions their variables.
    fn shape_outside(&mut self, l: &LTerm, bound: &[Var]) -> Shape {
        let mut ids: Vec<VarId> = bound.iter().map(|v| v.id).collect();
        let mut body = l;
        while let LTermKind::Let(p, _, b) = &body.kind {
            ids.extend(p.vars().iter().map(|v| v.id));
            body = b;
        }
        let s = self.shape(body);
        if shape_mentions(&s, &ids) {
            Shape::Unknown
        } else {
            s
        }
    }

    fn shape_(&mut self, l: &LTerm) -> Shape {
        use LTermKind as K;
        match &l.kind {
            K::Var(u) => self.shapes.get(&u.id).cloned().unwrap_or(Shape::Unknown),
            K::Chain(..) => Shape::Unknown,
            K::Zero(_) => Shape::Zero,
            K::Plus(a, b) => {
                let (sa, sb) = (self.shape(a), self.shape(b));
                Shape::join(sa, sb)
            }
            K::Pair(a, b) => Shape::Pair(Rc::new(self.shape(a)), Rc::new(self.shape(b))),
            K::Fst(a) => self.shape(a).proj(false),
            K::Snd(a) => self.shape(a).proj(true),
            K::App(f, a) => match &f.kind {
                TermKind::LinLam(u, body) => {
                    let s = self.shape(a);
                    self.shapes.insert(u.id, s);
                    self.shape(body)
                }
                TermKind::LinPrim(k, t) if k.name() == "scaleArray" => {
                    let n = Term::mk(TermKind::Length(t.clone()));
                    Shape::Array(n, Rc::new(Shape::Unknown))
                }
                TermKind::Var(f) => self.outputs.get(&f.id).cloned().unwrap_or(Shape::Unknown),
                _ => Shape::Unknown,
            },
            // Cartesian lets were floated out of the block; one still here is under a binder.
            // Its body's shape is known outside only if it does not use the let's variables.
            K::Let(..) => self.shape_outside(l, &[]),
            K::LinLet(u, a, b) => {
                let s = self.shape(a);
                self.shapes.insert(u.id, s);
                self.shape(b)
            }
            K::Copower(..) | K::CopowFold(..) | K::PowLam(..) | K::PowApp(..) => Shape::Unknown,
            K::Inl(a, _) => Shape::Pair(Rc::new(self.shape(a)), Rc::new(Shape::Unknown)),
            K::Inr(_, a) => Shape::Pair(Rc::new(Shape::Unknown), Rc::new(self.shape(a))),
            K::FromLeft(a) => match self.shape(a) {
                Shape::Pair(x, _) => (*x).clone(),
                _ => Shape::Unknown,
            },
            K::FromRight(a) => match self.shape(a) {
                Shape::Pair(_, y) => (*y).clone(),
                _ => Shape::Unknown,
            },
            K::Replicate(n, a) => Shape::Array(n.clone(), Rc::new(self.shape(a))),
            K::Sum(a) => match self.shape(a) {
                Shape::Array(_, e) => (*e).clone(),
                Shape::Zero => Shape::Zero,
                Shape::Items(items) => items
                    .iter()
                    .cloned()
                    .reduce(Shape::join)
                    .unwrap_or(Shape::Unknown),
                // The sum of arrays is as long as the longest: known only where the elements
                // are of a literal length (sums of reals have no shape to know).
                Shape::Of(t, Ty::Array(e)) => match &t.kind {
                    TermKind::Array(_, items) if !items.is_empty() => {
                        let items: Vec<Shape> = items
                            .iter()
                            .map(|x| Shape::Of(x.clone(), (*e).clone()))
                            .collect();
                        items
                            .into_iter()
                            .reduce(Shape::join)
                            .unwrap_or(Shape::Unknown)
                    }
                    _ => Shape::Unknown,
                },
                _ => Shape::Unknown,
            },
            K::OneHot(n, i, a) => match (&n.kind, &i.kind) {
                (TermKind::Lit(Lit::Int(n)), TermKind::Lit(Lit::Int(i)))
                    if (0..*n).contains(i) && *n <= 1 << 16 =>
                {
                    let mut items = vec![Shape::Zero; *n as usize];
                    items[*i as usize] = self.shape(a);
                    Shape::Items(Rc::new(items))
                }
                _ => Shape::Array(n.clone(), Rc::new(self.shape(a))),
            },
            K::Index(a, i) => self.shape(a).elem(i),
            K::ZipWith(fs, _) => Shape::Array(length_of(fs), Rc::new(Shape::Unknown)),
            K::Map(_, a) => match self.shape(a).len() {
                Some(n) => Shape::Array(n, Rc::new(Shape::Unknown)),
                None => Shape::Unknown,
            },
            // The elements are alike where their shape does not depend on the index.
            K::Build(n, i, body) => {
                let e = self.shape_outside(body, std::slice::from_ref(i));
                Shape::Array(n.clone(), Rc::new(e))
            }
            K::Scale(_, a) => self.shape(a),
            K::Case(..) => Shape::Unknown,
        }
    }
}

/// Whether the linear type `l` is the tangent type of `ty` (arrays where `ty` has arrays, `1`
/// for discrete types) and contains an array (so that shapes matter).
fn tangent_like(ty: &Ty, l: &LTy) -> bool {
    fn alike(ty: &Ty, l: &LTy) -> bool {
        match (ty, l) {
            (Ty::Real, LTy::Real) => true,
            (Ty::Int | Ty::Bool | Ty::Unit, LTy::Unit) => true,
            (Ty::Array(a), LTy::Array(b)) => alike(a, b),
            (Ty::Prod(p), LTy::Prod(q)) | (Ty::Sum(p), LTy::Sum(q)) => {
                alike(&p.0, &q.0) && alike(&p.1, &q.1)
            }
            _ => false,
        }
    }
    fn has_array(l: &LTy) -> bool {
        match l {
            LTy::Array(_) => true,
            LTy::Prod(p) | LTy::Sum(p) => has_array(&p.0) || has_array(&p.1),
            _ => false,
        }
    }
    alike(ty, l) && has_array(l)
}

/// Whether a term in `s` mentions one of the variables `ids`.
fn shape_mentions(s: &Shape, ids: &[VarId]) -> bool {
    let term = |t: &Term| {
        let mut found = false;
        super::term::Child::C(t).each_var(|v| found |= ids.contains(&v.id));
        found
    };
    deep(|| match s {
        Shape::Unknown | Shape::Zero => false,
        Shape::Of(t, _) => term(t),
        Shape::Array(n, e) => term(n) || shape_mentions(e, ids),
        Shape::Items(items) => items.iter().any(|e| shape_mentions(e, ids)),
        Shape::Pair(a, b) => shape_mentions(a, ids) || shape_mentions(b, ids),
    })
}

/// `l` with the Cartesian `let`s in its strict positions (those not under a binder) moved
/// into `lets`, in order. They cannot mention linear variables, so they may run first.
fn float(l: &LTerm, lets: &mut Vec<(Pat, Term)>) -> LTerm {
    deep(|| {
        use LTermKind as K;
        let kind = match &l.kind {
            K::Let(p, t, body) => {
                lets.push((p.clone(), t.clone()));
                return float(body, lets);
            }
            K::Var(_) | K::Zero(_) | K::PowLam(..) | K::Build(..) | K::Case(..) | K::Chain(..) => {
                return l.clone();
            }
            K::Plus(a, b) => K::Plus(float(a, lets), float(b, lets)),
            K::Pair(a, b) => K::Pair(float(a, lets), float(b, lets)),
            K::Fst(a) => K::Fst(float(a, lets)),
            K::Snd(a) => K::Snd(float(a, lets)),
            K::App(f, a) => K::App(f.clone(), float(a, lets)),
            K::LinLet(u, a, b) => K::LinLet(u.clone(), float(a, lets), float(b, lets)),
            K::Copower(t, a) => K::Copower(t.clone(), float(a, lets)),
            K::CopowFold(f, a) => K::CopowFold(f.clone(), float(a, lets)),
            K::PowApp(a, t) => K::PowApp(float(a, lets), t.clone()),
            K::Inl(a, r) => K::Inl(float(a, lets), r.clone()),
            K::Inr(r, a) => K::Inr(r.clone(), float(a, lets)),
            K::FromLeft(a) => K::FromLeft(float(a, lets)),
            K::FromRight(a) => K::FromRight(float(a, lets)),
            K::Replicate(n, a) => K::Replicate(n.clone(), float(a, lets)),
            K::Sum(a) => K::Sum(float(a, lets)),
            K::OneHot(n, i, a) => K::OneHot(n.clone(), i.clone(), float(a, lets)),
            K::Index(a, i) => K::Index(float(a, lets), i.clone()),
            K::ZipWith(fs, a) => K::ZipWith(fs.clone(), float(a, lets)),
            K::Map(f, a) => K::Map(f.clone(), float(a, lets)),
            K::Scale(t, a) => K::Scale(t.clone(), float(a, lets)),
        };
        LTerm::new(kind, l.span)
    })
}

/// The transpose `λ̲c. lᵀ` of a linear map `f : L ⊸ L'` (any Cartesian term of that type whose
/// free variables are among `free`), given what is known of the shape of its input. The term
/// is checked first (ill-typed or non-linear input is an error, not a panic); free variables
/// whose types `T` changes are an error.
pub fn transpose_map(f: &Term, free: &[Var], input: Shape) -> Result<Term> {
    let ty = super::check::check(f, free)?;
    if ty.as_lin_fun().is_none() {
        return Err(unsupported(format!("`{ty}` is not a linear function type")));
    }
    let mut t = Transposer::new();
    if free.iter().any(|v| t.changed(&v.ty).is_some()) {
        return Err(unsupported(
            "a free variable holds a linear map; transpose the term that binds it".into(),
        ));
    }
    if matches!(f.kind, TermKind::LinLam(..)) {
        t.witness(f, input);
    }
    t.term(f)
}
