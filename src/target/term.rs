//! Terms of the target language: Cartesian terms [`Term`] and linear terms [`LTerm`].
//!
//! Cartesian terms are the source language's core terms (over target types) plus
//!
//! * `λ̲v. l` ([`TermKind::LinLam`]), a linear function `L ⊸ L'` whose body is a linear term,
//! * `f • t` ([`TermKind::LinApp`]), applying a linear function to a value of linear type,
//! * `op t` ([`TermKind::LinPrim`]), a primitive's native derivative kernel (a [`LinPrim`]),
//!   which builds a linear map from Cartesian data.
//!
//! A linear term is linear in the *linear variables* in scope: the variable of the enclosing
//! `λ̲` and those bound by linear lets. Its forms (DESIGN.md §4) are
//!
//! ```text
//! l ::= v | 0 | l + l | (l, l) | fst l | snd l | f • l | let p = t in l | let v = l in l
//!     | !t ⊗ l | copowfold t l | \b -> l | l @ t | linl l | linr l | fromLeft l | fromRight l
//!     | replicate t l | lsum l | onehot t t l | l ! t | zipWith t l | lmap t l
//!     | lbuild t (\i -> l) | t * l | case t of inl p -> l | inr q -> l
//! ```
//!
//! where `t` and `f` are Cartesian terms, which may not mention linear variables. Linear
//! variables occur only in linear positions, so every linear term denotes a monoid homomorphism
//! in them; the checker ([`super::check`]) enforces this. Terms are untyped trees whose binders
//! carry types; [`super::check`] computes and checks types.
//!
//! As in the source core language, every variable has a unique [`VarId`], so no pass needs to
//! worry about shadowing or capture.

use super::linear::LinFun;
use super::types::{LTy, Ty};
use crate::deep::Deep;
use crate::error::{Result, Span};
use crate::prim::Prim;
pub use crate::source::term::{Lit, VarId};
use crate::value::Value;
use smallvec::SmallVec;
use std::cell::OnceCell;
use std::fmt;
use std::rc::Rc;

/// A variable of the target language: identity, display name, type. A linear variable of
/// linear type `L` has type `Lin L`.
#[derive(Clone)]
pub struct Var {
    /// The identity (what scoping uses).
    pub id: VarId,
    /// The name (for printing).
    pub name: Rc<str>,
    /// The type.
    pub ty: Ty,
}

impl Var {
    /// A fresh variable.
    pub fn fresh(name: impl Into<Rc<str>>, ty: Ty) -> Var {
        Var {
            id: VarId::fresh(),
            name: name.into(),
            ty,
        }
    }

    /// A fresh linear variable of linear type `l`.
    pub fn linear(name: impl Into<Rc<str>>, l: LTy) -> Var {
        Var::fresh(name, Ty::lin(l))
    }

    /// The linear type of a linear variable (`L` for `Lin L`), if it has one.
    pub fn lin_ty(&self) -> Option<&LTy> {
        self.ty.as_lin()
    }
}

impl fmt::Debug for Var {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}#{} : {}", self.name, self.id.0, self.ty)
    }
}

/// A binding pattern of a Cartesian `let` or `case`.
#[derive(Debug)]
pub enum Pat {
    /// Binds a variable.
    Var(Var),
    /// Binds nothing.
    Wild(Ty),
    /// Destructures a pair.
    Pair(Box<Pat>, Box<Pat>),
}

impl Pat {
    /// The type the pattern matches.
    pub fn ty(&self) -> Ty {
        crate::deep::deep(|| match self {
            Pat::Var(v) => v.ty.clone(),
            Pat::Wild(t) => t.clone(),
            Pat::Pair(a, b) => Ty::prod(a.ty(), b.ty()),
        })
    }

    /// The bound variables, left to right.
    pub fn vars(&self) -> Vec<&Var> {
        fn go<'a>(p: &'a Pat, out: &mut Vec<&'a Var>) {
            crate::deep::deep(|| match p {
                Pat::Var(v) => out.push(v),
                Pat::Wild(_) => {}
                Pat::Pair(a, b) => {
                    go(a, out);
                    go(b, out);
                }
            })
        }
        let mut out = Vec::new();
        go(self, &mut out);
        out
    }
}

/// How a [`LinPrim`] makes its linear map from its Cartesian argument.
type KernelFn = dyn Fn(&Value) -> Result<LinFun>;

/// A [`LinPrim`]'s definition as a term: from its argument (a term), a linear λ.
type ExpandFn = dyn Fn(&Term) -> Term;

/// A primitive's native derivative kernel: from Cartesian data of type `param`, a linear map
/// `dom ⊸ cod` implemented natively (see [`super::linear::LinearMap`]). In terms it appears as
/// [`TermKind::LinPrim`], printed `name t`.
pub struct LinPrim {
    name: String,
    param: Ty,
    dom: LTy,
    cod: LTy,
    make: Box<KernelFn>,
    expand: Option<Box<ExpandFn>>,
    /// The kernel of the transposed maps, if known ([`LinPrim::transposed`]).
    transposed: OnceCell<Transposed>,
}

/// How a [`LinPrim`] finds the kernel of its transposed maps.
enum Transposed {
    /// Made on demand (the builtin kernels name each other).
    Make(fn() -> Rc<LinPrim>),
    /// Held (the forward kernel of a registered derivative holds its transposed one).
    Strong(Rc<LinPrim>),
    /// Pointed at (the transposed kernel points back, without a reference cycle).
    Weak(std::rc::Weak<LinPrim>),
}

impl LinPrim {
    /// A kernel named `name` taking `param` to a linear map `dom ⊸ cod`.
    pub fn new(
        name: impl Into<String>,
        param: Ty,
        dom: LTy,
        cod: LTy,
        make: impl Fn(&Value) -> Result<LinFun> + 'static,
    ) -> Rc<LinPrim> {
        Rc::new(LinPrim {
            name: name.into(),
            param,
            dom,
            cod,
            make: Box::new(make),
            expand: None,
            transposed: OnceCell::new(),
        })
    }

    /// A kernel with its definition as a term: `expand(t)` is a linear λ of type `dom ⊸ cod`
    /// with the same meaning as `make` at the value of `t` (the IR compiles it; the engine runs
    /// `make`). `t` is a variable, so the expansion may use it several times.
    pub fn with_expansion(
        name: impl Into<String>,
        param: Ty,
        dom: LTy,
        cod: LTy,
        make: impl Fn(&Value) -> Result<LinFun> + 'static,
        expand: impl Fn(&Term) -> Term + 'static,
    ) -> Rc<LinPrim> {
        Rc::new(LinPrim {
            name: name.into(),
            param,
            dom,
            cod,
            make: Box::new(make),
            expand: Some(Box::new(expand)),
            transposed: OnceCell::new(),
        })
    }

    /// The kernel whose map at every argument is the transpose of this one's there (same
    /// argument type, domain and codomain swapped), if known: the builtin pair `dotWith` /
    /// `scaleArray`, and the two kernels of a registered [`crate::prim::Derivative::Native`]
    /// ([`LinPrim::pair_transposes`]). Transposition ([`super::transpose`]) uses it, and
    /// otherwise transposes the kernel's expansion.
    pub fn transposed(&self) -> Option<Rc<LinPrim>> {
        match self.transposed.get()? {
            Transposed::Make(f) => Some(f()),
            Transposed::Strong(k) => Some(k.clone()),
            Transposed::Weak(k) => k.upgrade(),
        }
    }

    /// Declares `forward` and `transpose` transposes of each other (at every argument). A
    /// kernel that already has a transpose keeps it.
    pub fn pair_transposes(forward: &Rc<LinPrim>, transpose: &Rc<LinPrim>) {
        let _ = forward
            .transposed
            .set(Transposed::Strong(transpose.clone()));
        let _ = transpose
            .transposed
            .set(Transposed::Weak(Rc::downgrade(forward)));
    }

    /// The kernel's definition as a linear λ at the argument `t`, if it has one.
    pub fn expansion(&self, t: &Term) -> Option<Term> {
        self.expand.as_ref().map(|e| e(t))
    }

    /// The name.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// The type of the Cartesian argument.
    pub fn param(&self) -> &Ty {
        &self.param
    }
    /// The domain of the linear maps it makes.
    pub fn dom(&self) -> &LTy {
        &self.dom
    }
    /// The codomain of the linear maps it makes.
    pub fn cod(&self) -> &LTy {
        &self.cod
    }
    /// The linear map for an argument.
    pub fn make(&self, arg: &Value) -> Result<LinFun> {
        (self.make)(arg)
    }

    /// `dotWith ys : Array Real ⊸ Real`, the inner product with `ys`.
    pub fn dot_with() -> Rc<LinPrim> {
        let k = LinPrim::with_expansion(
            "dotWith",
            Ty::array(Ty::Real),
            LTy::array(LTy::Real),
            LTy::Real,
            |ys| Ok(LinFun::dot_with(Rc::new(ys.expect_reals().to_vec()))),
            // λ̲d. lsum (lbuild (length ys) (\i -> (ys ! i) * d ! i))
            |ys| {
                let d = Var::linear("d", LTy::array(LTy::Real));
                let i = Var::fresh("i", Ty::Int);
                let yi = Term::mk(TermKind::Index(ys.clone(), Term::var(&i)));
                let di = LTerm::mk(LTermKind::Index(LTerm::var(&d), Term::var(&i)));
                let n = Term::mk(TermKind::Length(ys.clone()));
                let b = LTerm::mk(LTermKind::Build(n, i, LTerm::scale(yi, di)));
                Term::lin_lam(&d, LTerm::mk(LTermKind::Sum(b)))
            },
        );
        let _ = k.transposed.set(Transposed::Make(LinPrim::scale_array));
        k
    }

    /// `scaleArray ys : Real ⊸ Array Real`, `v ↦ ys · v` (the transpose of `dotWith ys`).
    pub fn scale_array() -> Rc<LinPrim> {
        let k = LinPrim::with_expansion(
            "scaleArray",
            Ty::array(Ty::Real),
            LTy::Real,
            LTy::array(LTy::Real),
            |ys| Ok(LinFun::scale_array(Rc::new(ys.expect_reals().to_vec()))),
            // λ̲v. lbuild (length ys) (\i -> (ys ! i) * v)
            |ys| {
                let v = Var::linear("v", LTy::Real);
                let i = Var::fresh("i", Ty::Int);
                let yi = Term::mk(TermKind::Index(ys.clone(), Term::var(&i)));
                let n = Term::mk(TermKind::Length(ys.clone()));
                let b = LTerm::mk(LTermKind::Build(n, i, LTerm::scale(yi, LTerm::var(&v))));
                Term::lin_lam(&v, b)
            },
        );
        let _ = k.transposed.set(Transposed::Make(LinPrim::dot_with));
        k
    }
}

impl fmt::Debug for LinPrim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} : {} -> {}",
            self.name,
            self.param,
            Ty::lin_fun(self.dom.clone(), self.cod.clone())
        )
    }
}

/// The forms of Cartesian terms.
#[derive(Clone)]
pub enum TermKind {
    /// A variable (never a linear one: the checker rejects that).
    Var(Var),
    /// A literal.
    Lit(Lit),
    /// `\x -> body`.
    Lam(Var, Term),
    /// `f a`.
    App(Term, Term),
    /// `let p = e in body`.
    Let(Pat, Term, Term),
    /// `(a, b)`.
    Pair(Term, Term),
    /// `fst e`.
    Fst(Term),
    /// `snd e`.
    Snd(Term),
    /// `if c then a else b`.
    If(Term, Term, Term),
    /// `inl e : A + B`, with `B` given.
    Inl(Term, Ty),
    /// `inr e : A + B`, with `A` given.
    Inr(Ty, Term),
    /// `case e of inl p -> a | inr q -> b`.
    Case(Term, Pat, Term, Pat, Term),
    /// A source primitive applied to all its arguments.
    Prim(Prim, Vec<Term>),
    /// An array literal with its element type.
    Array(Ty, Vec<Term>),
    /// `map f xs`.
    Map(Term, Term),
    /// `map2 f xs ys` (with `f` curried).
    Map2(Term, Term, Term),
    /// `build n f`.
    Build(Term, Term),
    /// `xs ! i`.
    Index(Term, Term),
    /// `length xs`.
    Length(Term),
    /// `replicate n x`.
    Replicate(Term, Term),
    /// `loop f x` (`f : A -> A + B`, `x : A`, result `B`): applies `f` while it returns `inl`;
    /// its first `inr` is the result. With the flag set (written `loopTape f x`), the step
    /// also returns a tape entry, `f : A -> (A + B) × T`, and the result is `B × Array T`: the
    /// entries of every step run, in order (CHAD's iteration rules record each step's
    /// derivative this way; `theory-notes/10-iteration.md`).
    Loop(Term, Term, bool),
    /// `fix F` (`F : (A -> B) -> (A -> B)`, result `A -> B`): the recursive function `g` with
    /// `g a = F g a`, as a closure; each call counts against the recursion depth limit and the
    /// step budget at the given position (the recursive definition). What `def rec` embeds to,
    /// and the primal of its CHAD derivative (`theory-notes/10-iteration.md`).
    Fix(Term, Span),
    /// The linear λ `λ̲v. l : L ⊸ L'` (`v` a linear variable of type `Lin L`).
    LinLam(Var, LTerm),
    /// `f • t`: a linear function applied to a value `t : Lin L`.
    LinApp(Term, Term),
    /// A native derivative kernel applied to its Cartesian argument: a linear map.
    LinPrim(Rc<LinPrim>, Term),
}

/// The forms of linear terms.
#[derive(Clone)]
pub enum LTermKind {
    /// A linear variable.
    Var(Var),
    /// `0` of a linear type.
    Zero(LTy),
    /// `l1 + l2`.
    Plus(LTerm, LTerm),
    /// `(l1, l2)` in a biproduct.
    Pair(LTerm, LTerm),
    /// `fst l`.
    Fst(LTerm),
    /// `snd l`.
    Snd(LTerm),
    /// `f • l`, with `f : L ⊸ L'` Cartesian.
    App(Term, LTerm),
    /// A Cartesian `let p = t in l`.
    Let(Pat, Term, LTerm),
    /// A linear `let u = l1 in l2`: `u` is a new linear variable of `l2`.
    LinLet(Var, LTerm, LTerm),
    /// The copower singleton `!t ⊗ l`.
    Copower(Term, LTerm),
    /// `copowfold t l`: with `t : τ → (L ⊸ M)` and `l : !τ ⊗ L`, the sum of `t a • l'` over the
    /// pairs `(a, l')` of `l`.
    CopowFold(Term, LTerm),
    /// Power introduction `\b -> l : τ → L`.
    PowLam(Var, LTerm),
    /// Power elimination `l @ t`.
    PowApp(LTerm, Term),
    /// `linl l : L ⊕ L'`, with `L'` given.
    Inl(LTerm, LTy),
    /// `linr l : L ⊕ L'`, with `L` given.
    Inr(LTy, LTerm),
    /// `fromLeft l`: the left part of a linear sum.
    FromLeft(LTerm),
    /// `fromRight l`: the right part of a linear sum.
    FromRight(LTerm),
    /// `replicate n l`.
    Replicate(Term, LTerm),
    /// `lsum l`: the sum of a linear array.
    Sum(LTerm),
    /// `onehot n i l`: length `n`, `l` at `i`, zero elsewhere.
    OneHot(Term, Term, LTerm),
    /// `l ! i`.
    Index(LTerm, Term),
    /// `zipWith fs l`: element `i` is `fs ! i • l ! i` (length of `fs`).
    ZipWith(Term, LTerm),
    /// `lmap f l`: applies one linear map `f` to every element.
    Map(Term, LTerm),
    /// `lbuild n (\i -> l)`.
    Build(Term, Var, LTerm),
    /// Scaling `t * l` by a Cartesian real `t`.
    Scale(Term, LTerm),
    /// `case t of inl p -> l1 | inr q -> l2`: a branch on a Cartesian sum `t` whose branches are
    /// linear terms of the same type (linear in the same variables). Lets a linear map chosen by
    /// a branch be stored as the sum's value instead of a closure (DESIGN.md §7).
    /// (The patterns are boxed to keep linear nodes small.)
    Case(Term, Box<Pat>, LTerm, Box<Pat>, LTerm),
    /// A loop's recorded step derivatives run over, in a Rust loop (`fs` has one per step):
    /// * `lchain fs d` (flag unset), `fs : Array (G × A ⊸ A ⊕ B)`, `d : G × A`: with
    ///   `w₀ = linl (snd d)` and `wₖ₊₁ = fs ! k • (fst d, fromLeft wₖ)`, the result
    ///   `fromRight wₙ : B` (forward mode: the tangent pushed through the steps in order);
    /// * `lchainRev fs v` (set), `fs : Array (A ⊕ B ⊸ G × A)`, `v : B`: with `w = linr v` and,
    ///   from the last step to the first, `(g, a) = fs ! k • w; acc += g; w = linl a`, the
    ///   result `(acc, fromLeft w) : G × A` (reverse mode: the cotangent pulled back through
    ///   the steps in reverse order, the environment's share accumulated in place).
    ///
    /// With the second flag (outputs: a taped loop's, `itTape`/`scan`), every step also has a
    /// tangent or cotangent of its record `C`:
    /// * `lchainScan fs d`, `fs : Array (G × A ⊸ (A ⊕ B) × C)`: `(wₖ₊₁, cₖ) = fs ! k • (fst d,
    ///   fromLeft wₖ)`, the result `(fromRight wₙ, [c₀, .., cₙ₋₁]) : B × Array C`;
    /// * `lchainScanRev fs v`, `fs : Array ((A ⊕ B) × C ⊸ G × A)`, `v : B × Array C`: with
    ///   `w = linr (fst v)` and, from the last step to the first,
    ///   `(g, a) = fs ! k • (w, snd v ! k); acc += g; w = linl a`, the result
    ///   `(acc, fromLeft w) : G × A`.
    Chain(Term, LTerm, bool, bool),
}

/// A Cartesian term: a cheap-to-clone immutable handle.
#[derive(Clone)]
pub struct Term(Rc<Deep<Node>>);

/// A node of a Cartesian term.
pub struct Node {
    /// The form.
    pub kind: TermKind,
    /// The source position it derives from (for runtime errors), if any.
    pub span: Span,
}

/// A linear term: a cheap-to-clone immutable handle.
#[derive(Clone)]
pub struct LTerm(Rc<Deep<LNode>>);

/// A node of a linear term.
pub struct LNode {
    /// The form.
    pub kind: LTermKind,
    /// The source position it derives from (for runtime errors), if any.
    pub span: Span,
}

impl std::ops::Deref for Term {
    type Target = Node;
    fn deref(&self) -> &Node {
        &self.0
    }
}

impl std::ops::Deref for LTerm {
    type Target = LNode;
    fn deref(&self) -> &LNode {
        &self.0
    }
}

/// An immediate subterm of either kind.
#[derive(Clone, Copy)]
pub enum Child<'a> {
    /// A Cartesian subterm.
    C(&'a Term),
    /// A linear subterm.
    L(&'a LTerm),
}

impl Child<'_> {
    /// Calls `f` with every variable occurrence (Cartesian or linear) in the term, in no
    /// particular order, with an explicit stack (no recursion, however deep the term).
    pub fn each_var(self, mut f: impl FnMut(&Var)) {
        let mut stack = vec![self];
        while let Some(c) = stack.pop() {
            match c {
                Child::C(t) => {
                    if let TermKind::Var(x) = &t.kind {
                        f(x);
                    }
                    stack.extend(t.children());
                }
                Child::L(l) => {
                    if let LTermKind::Var(x) = &l.kind {
                        f(x);
                    }
                    stack.extend(l.children());
                }
            }
        }
    }
}

impl Term {
    /// A node.
    pub fn new(kind: TermKind, span: Span) -> Term {
        Term(Rc::new(Deep::new(Node { kind, span })))
    }

    /// A node with no source position.
    pub fn mk(kind: TermKind) -> Term {
        Term::new(kind, Span::default())
    }

    /// The immediate subterms, left to right (the order of evaluation).
    pub fn children(&self) -> SmallVec<[Child<'_>; 4]> {
        use Child::{C, L};
        use TermKind as K;
        match &self.kind {
            K::Var(_) | K::Lit(_) => SmallVec::new(),
            K::Lam(_, b)
            | K::Fst(b)
            | K::Snd(b)
            | K::Inl(b, _)
            | K::Inr(_, b)
            | K::Length(b)
            | K::Fix(b, _)
            | K::LinPrim(_, b) => SmallVec::from_slice(&[C(b)]),
            K::App(a, b)
            | K::Let(_, a, b)
            | K::Pair(a, b)
            | K::Map(a, b)
            | K::Build(a, b)
            | K::Index(a, b)
            | K::Replicate(a, b)
            | K::Loop(a, b, _)
            | K::LinApp(a, b) => SmallVec::from_slice(&[C(a), C(b)]),
            K::If(a, b, c) | K::Case(a, _, b, _, c) | K::Map2(a, b, c) => {
                SmallVec::from_slice(&[C(a), C(b), C(c)])
            }
            K::Prim(_, args) | K::Array(_, args) => args.iter().map(C).collect(),
            K::LinLam(_, l) => SmallVec::from_slice(&[L(l)]),
        }
    }

    /// Syntactic equality of small Cartesian terms: variables by identity, literals bit for
    /// bit (`0.0` is not `-0.0`), projections, lengths, indexes and primitive applications of
    /// such terms; any other form is unequal. Recursive, so for small terms (atoms, the
    /// arguments of a primitive).
    pub fn syn_eq(a: &Term, b: &Term) -> bool {
        use TermKind as K;
        match (&a.kind, &b.kind) {
            (K::Var(x), K::Var(y)) => x.id == y.id,
            (K::Lit(x), K::Lit(y)) => match (x, y) {
                (Lit::Int(p), Lit::Int(q)) => p == q,
                (Lit::Bool(p), Lit::Bool(q)) => p == q,
                (Lit::Unit, Lit::Unit) => true,
                (Lit::Real(p), Lit::Real(q)) => p.to_bits() == q.to_bits(),
                _ => false,
            },
            (K::Fst(x), K::Fst(y)) | (K::Snd(x), K::Snd(y)) | (K::Length(x), K::Length(y)) => {
                Term::syn_eq(x, y)
            }
            (K::Index(x, i), K::Index(y, j)) => Term::syn_eq(x, y) && Term::syn_eq(i, j),
            (K::Prim(p, xs), K::Prim(q, ys)) => {
                p.name() == q.name()
                    && xs.len() == ys.len()
                    && xs.iter().zip(ys).all(|(x, y)| Term::syn_eq(x, y))
            }
            _ => false,
        }
    }

    /// Number of nodes, linear ones included (iteratively, so any depth is fine).
    pub fn size(&self) -> usize {
        size(Child::C(self))
    }

    // ----- builders -----

    /// A variable occurrence.
    pub fn var(v: &Var) -> Term {
        Term::mk(TermKind::Var(v.clone()))
    }
    /// A literal.
    pub fn lit(l: Lit) -> Term {
        Term::mk(TermKind::Lit(l))
    }
    /// A real literal.
    pub fn real(x: f64) -> Term {
        Term::lit(Lit::Real(x))
    }
    /// `()`.
    pub fn unit() -> Term {
        Term::lit(Lit::Unit)
    }
    /// `\x -> body`.
    pub fn lam(x: &Var, body: Term) -> Term {
        Term::mk(TermKind::Lam(x.clone(), body))
    }
    /// `f a`.
    pub fn app(f: Term, a: Term) -> Term {
        Term::mk(TermKind::App(f, a))
    }
    /// `let x = e in body`.
    pub fn let_(x: &Var, e: Term, body: Term) -> Term {
        Term::mk(TermKind::Let(Pat::Var(x.clone()), e, body))
    }
    /// `let p = e in body`.
    pub fn let_pat(p: Pat, e: Term, body: Term) -> Term {
        Term::mk(TermKind::Let(p, e, body))
    }
    /// `(a, b)`.
    pub fn pair(a: Term, b: Term) -> Term {
        Term::mk(TermKind::Pair(a, b))
    }
    /// `fst e`.
    pub fn fst(e: Term) -> Term {
        Term::mk(TermKind::Fst(e))
    }
    /// `snd e`.
    pub fn snd(e: Term) -> Term {
        Term::mk(TermKind::Snd(e))
    }
    /// A primitive applied to its arguments.
    pub fn prim(op: &Prim, args: Vec<Term>) -> Term {
        Term::mk(TermKind::Prim(op.clone(), args))
    }
    /// `λ̲v. l`.
    pub fn lin_lam(v: &Var, body: LTerm) -> Term {
        Term::mk(TermKind::LinLam(v.clone(), body))
    }
    /// `f • t` (Cartesian).
    pub fn lin_app(f: Term, t: Term) -> Term {
        Term::mk(TermKind::LinApp(f, t))
    }
}

impl LTerm {
    /// A node.
    pub fn new(kind: LTermKind, span: Span) -> LTerm {
        LTerm(Rc::new(Deep::new(LNode { kind, span })))
    }

    /// A node with no source position.
    pub fn mk(kind: LTermKind) -> LTerm {
        LTerm::new(kind, Span::default())
    }

    /// The immediate subterms, left to right.
    pub fn children(&self) -> SmallVec<[Child<'_>; 4]> {
        use Child::{C, L};
        use LTermKind as K;
        match &self.kind {
            K::Var(_) | K::Zero(_) => SmallVec::new(),
            K::Fst(l)
            | K::Snd(l)
            | K::PowLam(_, l)
            | K::Inl(l, _)
            | K::Inr(_, l)
            | K::FromLeft(l)
            | K::FromRight(l)
            | K::Sum(l) => SmallVec::from_slice(&[L(l)]),
            K::Plus(a, b) | K::Pair(a, b) | K::LinLet(_, a, b) => {
                SmallVec::from_slice(&[L(a), L(b)])
            }
            K::App(t, l)
            | K::Let(_, t, l)
            | K::Copower(t, l)
            | K::CopowFold(t, l)
            | K::Replicate(t, l)
            | K::ZipWith(t, l)
            | K::Map(t, l)
            | K::Build(t, _, l)
            | K::Chain(t, l, ..)
            | K::Scale(t, l) => SmallVec::from_slice(&[C(t), L(l)]),
            K::PowApp(l, t) | K::Index(l, t) => SmallVec::from_slice(&[L(l), C(t)]),
            K::OneHot(n, i, l) => SmallVec::from_slice(&[C(n), C(i), L(l)]),
            K::Case(t, _, a, _, b) => SmallVec::from_slice(&[C(t), L(a), L(b)]),
        }
    }

    /// Number of nodes, Cartesian ones included.
    pub fn size(&self) -> usize {
        size(Child::L(self))
    }

    // ----- builders -----

    /// A linear variable occurrence.
    pub fn var(v: &Var) -> LTerm {
        LTerm::mk(LTermKind::Var(v.clone()))
    }
    /// `0 : L`.
    pub fn zero(l: LTy) -> LTerm {
        LTerm::mk(LTermKind::Zero(l))
    }
    /// `a + b`.
    pub fn plus(a: LTerm, b: LTerm) -> LTerm {
        LTerm::mk(LTermKind::Plus(a, b))
    }
    /// `(a, b)`.
    pub fn pair(a: LTerm, b: LTerm) -> LTerm {
        LTerm::mk(LTermKind::Pair(a, b))
    }
    /// `fst l`.
    pub fn fst(l: LTerm) -> LTerm {
        LTerm::mk(LTermKind::Fst(l))
    }
    /// `snd l`.
    pub fn snd(l: LTerm) -> LTerm {
        LTerm::mk(LTermKind::Snd(l))
    }
    /// `f • l`.
    pub fn app(f: Term, l: LTerm) -> LTerm {
        LTerm::mk(LTermKind::App(f, l))
    }
    /// `let x = t in l` (Cartesian `x`).
    pub fn let_(x: &Var, t: Term, l: LTerm) -> LTerm {
        LTerm::mk(LTermKind::Let(Pat::Var(x.clone()), t, l))
    }
    /// `let u = l1 in l2` (linear `u`).
    pub fn lin_let(u: &Var, l1: LTerm, l2: LTerm) -> LTerm {
        LTerm::mk(LTermKind::LinLet(u.clone(), l1, l2))
    }
    /// `t * l`.
    pub fn scale(t: Term, l: LTerm) -> LTerm {
        LTerm::mk(LTermKind::Scale(t, l))
    }
}

/// A rewriting of both kinds of terms, used by [`Term::map_children`] and
/// [`LTerm::map_children`] to rebuild a node from rewritten immediate subterms.
pub trait Rewrite {
    /// The rewritten Cartesian subterm.
    fn term(&mut self, t: &Term) -> Term;
    /// The rewritten linear subterm.
    fn linear(&mut self, l: &LTerm) -> LTerm;
}

/// Whether two Cartesian handles are the same node.
#[inline]
fn same(a: &Term, b: &Term) -> bool {
    Rc::ptr_eq(&a.0, &b.0)
}

/// Whether two linear handles are the same node.
#[inline]
fn lsame(a: &LTerm, b: &LTerm) -> bool {
    Rc::ptr_eq(&a.0, &b.0)
}

impl Term {
    /// The same node (same binders, same span) over rewritten immediate subterms, left to right.
    /// When every subterm comes back as the same node, this is `self` (shared, not rebuilt), so
    /// a rewrite that changes little allocates only along the paths it changes.
    pub fn map_children(&self, r: &mut impl Rewrite) -> Term {
        use TermKind as K;
        // `$new` is built only if some child changed.
        macro_rules! rebuild {
            ($($old:expr => $new:ident),+ ; $kind:expr) => {{
                if $(same($old, &$new))&&+ {
                    return self.clone();
                }
                $kind
            }};
        }
        let kind = match &self.kind {
            K::Var(_) | K::Lit(_) => return self.clone(),
            K::Lam(x, b) => {
                let b2 = r.term(b);
                rebuild!(b => b2; K::Lam(x.clone(), b2))
            }
            K::App(f, a) => {
                let (f2, a2) = (r.term(f), r.term(a));
                rebuild!(f => f2, a => a2; K::App(f2, a2))
            }
            K::Let(p, e, b) => {
                let (e2, b2) = (r.term(e), r.term(b));
                rebuild!(e => e2, b => b2; K::Let(p.clone(), e2, b2))
            }
            K::Pair(a, b) => {
                let (a2, b2) = (r.term(a), r.term(b));
                rebuild!(a => a2, b => b2; K::Pair(a2, b2))
            }
            K::Fst(e) => {
                let e2 = r.term(e);
                rebuild!(e => e2; K::Fst(e2))
            }
            K::Snd(e) => {
                let e2 = r.term(e);
                rebuild!(e => e2; K::Snd(e2))
            }
            K::If(c, a, b) => {
                let (c2, a2, b2) = (r.term(c), r.term(a), r.term(b));
                rebuild!(c => c2, a => a2, b => b2; K::If(c2, a2, b2))
            }
            K::Inl(e, t) => {
                let e2 = r.term(e);
                rebuild!(e => e2; K::Inl(e2, t.clone()))
            }
            K::Inr(t, e) => {
                let e2 = r.term(e);
                rebuild!(e => e2; K::Inr(t.clone(), e2))
            }
            K::Case(e, p, a, q, b) => {
                let (e2, a2, b2) = (r.term(e), r.term(a), r.term(b));
                rebuild!(e => e2, a => a2, b => b2; K::Case(e2, p.clone(), a2, q.clone(), b2))
            }
            K::Prim(op, args) => {
                let args2: Vec<Term> = args.iter().map(|a| r.term(a)).collect();
                if args.iter().zip(&args2).all(|(a, b)| same(a, b)) {
                    return self.clone();
                }
                K::Prim(op.clone(), args2)
            }
            K::Array(t, xs) => {
                let xs2: Vec<Term> = xs.iter().map(|x| r.term(x)).collect();
                if xs.iter().zip(&xs2).all(|(a, b)| same(a, b)) {
                    return self.clone();
                }
                K::Array(t.clone(), xs2)
            }
            K::Map(f, xs) => {
                let (f2, xs2) = (r.term(f), r.term(xs));
                rebuild!(f => f2, xs => xs2; K::Map(f2, xs2))
            }
            K::Map2(f, xs, ys) => {
                let (f2, xs2, ys2) = (r.term(f), r.term(xs), r.term(ys));
                rebuild!(f => f2, xs => xs2, ys => ys2; K::Map2(f2, xs2, ys2))
            }
            K::Build(n, f) => {
                let (n2, f2) = (r.term(n), r.term(f));
                rebuild!(n => n2, f => f2; K::Build(n2, f2))
            }
            K::Index(xs, i) => {
                let (xs2, i2) = (r.term(xs), r.term(i));
                rebuild!(xs => xs2, i => i2; K::Index(xs2, i2))
            }
            K::Length(xs) => {
                let xs2 = r.term(xs);
                rebuild!(xs => xs2; K::Length(xs2))
            }
            K::Replicate(n, x) => {
                let (n2, x2) = (r.term(n), r.term(x));
                rebuild!(n => n2, x => x2; K::Replicate(n2, x2))
            }
            K::Loop(f, x, tape) => {
                let (f2, x2) = (r.term(f), r.term(x));
                rebuild!(f => f2, x => x2; K::Loop(f2, x2, *tape))
            }
            K::Fix(f, at) => {
                let f2 = r.term(f);
                rebuild!(f => f2; K::Fix(f2, *at))
            }
            K::LinLam(v, l) => {
                let l2 = r.linear(l);
                if lsame(l, &l2) {
                    return self.clone();
                }
                K::LinLam(v.clone(), l2)
            }
            K::LinApp(f, t) => {
                let (f2, t2) = (r.term(f), r.term(t));
                rebuild!(f => f2, t => t2; K::LinApp(f2, t2))
            }
            K::LinPrim(k, t) => {
                let t2 = r.term(t);
                rebuild!(t => t2; K::LinPrim(k.clone(), t2))
            }
        };
        Term::new(kind, self.span)
    }
}

impl LTerm {
    /// The same node (same binders, same span) over rewritten immediate subterms, left to right.
    /// When every subterm comes back as the same node, this is `self` (shared, not rebuilt).
    pub fn map_children(&self, r: &mut impl Rewrite) -> LTerm {
        use LTermKind as K;
        // Children are `C` (Cartesian) or `L` (linear); `$kind` is built only if one changed.
        macro_rules! rebuild {
            ($($how:ident $old:expr => $new:ident),+ ; $kind:expr) => {{
                $(let $new = rebuild!(@map $how $old);)+
                if $(rebuild!(@same $how $old, &$new))&&+ {
                    return self.clone();
                }
                $kind
            }};
            (@map C $old:expr) => { r.term($old) };
            (@map L $old:expr) => { r.linear($old) };
            (@same C $a:expr, $b:expr) => { same($a, $b) };
            (@same L $a:expr, $b:expr) => { lsame($a, $b) };
        }
        let kind = match &self.kind {
            K::Var(_) | K::Zero(_) => return self.clone(),
            K::Plus(a, b) => rebuild!(L a => a2, L b => b2; K::Plus(a2, b2)),
            K::Pair(a, b) => rebuild!(L a => a2, L b => b2; K::Pair(a2, b2)),
            K::Fst(l) => rebuild!(L l => l2; K::Fst(l2)),
            K::Snd(l) => rebuild!(L l => l2; K::Snd(l2)),
            K::App(f, l) => rebuild!(C f => f2, L l => l2; K::App(f2, l2)),
            K::Let(p, t, l) => rebuild!(C t => t2, L l => l2; K::Let(p.clone(), t2, l2)),
            K::LinLet(u, a, b) => rebuild!(L a => a2, L b => b2; K::LinLet(u.clone(), a2, b2)),
            K::Copower(t, l) => rebuild!(C t => t2, L l => l2; K::Copower(t2, l2)),
            K::CopowFold(t, l) => rebuild!(C t => t2, L l => l2; K::CopowFold(t2, l2)),
            K::PowLam(b, l) => rebuild!(L l => l2; K::PowLam(b.clone(), l2)),
            K::PowApp(l, t) => rebuild!(L l => l2, C t => t2; K::PowApp(l2, t2)),
            K::Inl(l, t) => rebuild!(L l => l2; K::Inl(l2, t.clone())),
            K::Inr(t, l) => rebuild!(L l => l2; K::Inr(t.clone(), l2)),
            K::FromLeft(l) => rebuild!(L l => l2; K::FromLeft(l2)),
            K::FromRight(l) => rebuild!(L l => l2; K::FromRight(l2)),
            K::Replicate(n, l) => rebuild!(C n => n2, L l => l2; K::Replicate(n2, l2)),
            K::Sum(l) => rebuild!(L l => l2; K::Sum(l2)),
            K::OneHot(n, i, l) => {
                rebuild!(C n => n2, C i => i2, L l => l2; K::OneHot(n2, i2, l2))
            }
            K::Index(l, i) => rebuild!(L l => l2, C i => i2; K::Index(l2, i2)),
            K::ZipWith(fs, l) => rebuild!(C fs => fs2, L l => l2; K::ZipWith(fs2, l2)),
            K::Map(f, l) => rebuild!(C f => f2, L l => l2; K::Map(f2, l2)),
            K::Build(n, i, l) => rebuild!(C n => n2, L l => l2; K::Build(n2, i.clone(), l2)),
            K::Scale(t, l) => rebuild!(C t => t2, L l => l2; K::Scale(t2, l2)),
            K::Chain(t, l, rev, outs) => {
                rebuild!(C t => t2, L l => l2; K::Chain(t2, l2, *rev, *outs))
            }
            K::Case(t, p, a, q, b) => rebuild!(C t => t2, L a => a2, L b => b2;
                K::Case(t2, p.clone(), a2, q.clone(), b2)),
        };
        LTerm::new(kind, self.span)
    }
}

/// Number of nodes of either kind under a root, iteratively.
fn size(root: Child<'_>) -> usize {
    let mut n = 0;
    let mut stack = vec![root];
    while let Some(c) = stack.pop() {
        n += 1;
        match c {
            Child::C(t) => stack.extend(t.children()),
            Child::L(l) => stack.extend(l.children()),
        }
    }
    n
}

impl fmt::Display for Term {
    /// Pretty-printed at width 100 (see [`super::print`]).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&super::print::to_string(self, 100))
    }
}

impl fmt::Debug for Term {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

impl fmt::Display for LTerm {
    /// Pretty-printed at width 100 (see [`super::print`]).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&super::print::linear_to_string(self, 100))
    }
}

impl fmt::Debug for LTerm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

/// Patterns as deep as the program (a tuple pattern of 10⁴ components) are cloned under
/// [`crate::deep::deep`] and dropped under [`crate::deep::deep_drop`].
impl Clone for Pat {
    fn clone(&self) -> Pat {
        crate::deep::deep(|| match self {
            Pat::Var(v) => Pat::Var(v.clone()),
            Pat::Wild(t) => Pat::Wild(t.clone()),
            Pat::Pair(a, b) => Pat::Pair(a.clone(), b.clone()),
        })
    }
}

impl Drop for Pat {
    fn drop(&mut self) {
        if let Pat::Pair(a, b) = self {
            let a = std::mem::replace(&mut **a, Pat::Wild(Ty::Unit));
            let b = std::mem::replace(&mut **b, Pat::Wild(Ty::Unit));
            crate::deep::deep_drop(move || drop((a, b)));
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn linear_nodes_stay_small() {
        // Every node of derivative code is one of these; a wide variant (two inline patterns)
        // made them 104 bytes and differentiate + simplify of 10⁴ lines 3–5% slower.
        assert!(std::mem::size_of::<super::LTermKind>() <= 64);
    }
}
