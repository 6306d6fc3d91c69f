//! Forward and reverse CHAD: automatic differentiation as structure-preserving functors out of
//! the free cartesian closed category (CHAD paper §6-7; DESIGN.md §5).
//!
//! Each mode is a *model* of the categorical structure ([`crate::ccc::model::Model`]) whose
//! morphisms are target-language terms, so the generic [`crate::ccc::interpret`] *is* the AD
//! transformation:
//!
//! * [`forward::Forward`] is the Grothendieck construction `Σ_C L`: a combinator `c : A → B`
//!   becomes `x : F1(A) ⊢ F(c) : F1(B) × (F2(A) ⊸ F2(B))`, the primal result paired with the
//!   derivative (a linear map of tangents);
//! * [`reverse::Reverse`] is `Σ_C L^op`: `x : R1(A) ⊢ R(c) : R1(B) × (R2(B) ⊸ R2(A))`, the
//!   primal result paired with the transposed derivative (a linear map of cotangents).
//!
//! Both use the "combined" form, primal and derivative computed by one term, sharing work through
//! `let`. Each module states its typing judgement and its type maps beside the rules; every term
//! they produce type-checks ([`crate::target::check`]) at exactly the type the maps predict.
//!
//! The entry points for programs are [`jvp`], [`vjp`] and [`grad`] (and [`Jvp`], [`Vjp`] to
//! transform once and evaluate many times). Every construct of the language is differentiated:
//! functions, tuples, sums and conditionals, and the array operations. Primitives supply their derivatives through their
//! registration ([`crate::prim::Derivative`]); [`check_primitive`] tests one. [`with_respect_to`]
//! restricts differentiation to some parameters (`--wrt`).

pub mod check;
pub mod clauses;
pub mod forward;
pub mod nested;
pub mod optimized;
pub mod reverse;
pub(crate) mod tangent;
pub mod transpose;
pub mod wrt;

pub use check::{check_kernels, check_primitive};
pub use tangent::{from_tangent, to_tangent};
pub use wrt::{select, with_respect_to};

use crate::ccc;
use crate::ccc::model::Primitives;
use crate::deep::deep;
use crate::error::{Error, ErrorKind, Result, Span};
use crate::prim::{Derivative, Prim};
use crate::source::term::{Entry, Term as STerm, TermKind as SKind};
use crate::target::engine::Code;
use crate::target::linear::{Lin, LinFun};
use crate::target::print;
use crate::target::term::{LTerm, LTermKind, Pat, Term, TermKind, Var};
use crate::target::types::{LTy, Ty};
use crate::types::Type;
use crate::value::Value;
use rustc_hash::FxHashMap;
use std::cell::{OnceCell, RefCell};
use std::fmt;
use std::rc::Rc;

/// A morphism of an AD model: `x ⊢ body`, the image of a combinator `dom → cod`.
///
/// For forward mode `x : F1(dom)` and `body : F1(cod) × (F2(dom) ⊸ F2(cod))`; for reverse mode
/// `x : R1(dom)` and `body : R1(cod) × (R2(cod) ⊸ R2(dom))`.
#[derive(Clone)]
pub struct Mor {
    /// The source domain.
    pub dom: Type,
    /// The source codomain.
    pub cod: Type,
    /// The input variable.
    pub x: Var,
    /// The combined primal-and-derivative term.
    pub body: Term,
}

impl Mor {
    /// The morphism as one closed Cartesian term `\x -> body`.
    pub fn to_term(&self) -> Term {
        Term::lam(&self.x, self.body.clone())
    }

    /// Evaluates the morphism at a primal input (a value of `F1(dom)` or `R1(dom)`): the primal
    /// result and the (transposed) derivative there.
    pub fn apply(&self, x: Value) -> Result<(Value, LinFun)> {
        run(self, x)
    }

    /// The same morphism with its body rewritten by `f`, which must preserve its meaning and
    /// type (e.g. [`crate::simplify::simplify`]; AD itself never simplifies).
    pub fn map_body(&self, f: impl FnOnce(&Term) -> Term) -> Mor {
        Mor {
            body: f(&self.body),
            ..self.clone()
        }
    }

    /// The morphism compiled for the execution engine: run it at `x` with `code.run(&[x])`.
    pub fn compile(&self) -> Code {
        Code::compile(std::slice::from_ref(&self.x), &self.body)
    }
}

impl fmt::Display for Mor {
    /// `\x -> body`, pretty-printed at width 100.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&print::lambda_to_string(&self.x, &self.body, 100))
    }
}

impl fmt::Debug for Mor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self} : {} → {}", self.dom, self.cod)
    }
}

/// The object part of an AD functor: the primal type map (`F1` or `R1`) and the type of the
/// derivative part of a morphism `A → B` (`F2 A ⊸ F2 B` or `R2 B ⊸ R2 A`).
pub trait TypeMaps {
    /// `F1(A)` or `R1(A)`.
    fn primal(&self, a: &Type) -> Ty;

    /// The type of the derivative of a morphism `a → b`.
    fn derivative(&self, a: &Type, b: &Type) -> Ty;

    /// The type of the image of a morphism `a → b`: the primal result and the derivative.
    fn image(&self, a: &Type, b: &Type) -> Ty {
        Ty::prod(self.primal(b), self.derivative(a, b))
    }
}

/// A morphism `a → b` of a model, from its body in a fresh input variable `x : primal(a)`.
pub(crate) fn new_mor(
    maps: &impl TypeMaps,
    a: &Type,
    b: &Type,
    body: impl FnOnce(&Var) -> Term,
) -> Result<Mor> {
    let x = Var::fresh(name("x"), maps.primal(a));
    let body = body(&x);
    Ok(Mor {
        dom: a.clone(),
        cod: b.clone(),
        x,
        body,
    })
}

/// Fresh variables for the primal result and the derivative of `m`.
pub(crate) fn results(
    maps: &impl TypeMaps,
    m: &Mor,
    y: &'static str,
    d: &'static str,
) -> (Var, Var) {
    (
        Var::fresh(name(y), maps.primal(&m.cod)),
        Var::fresh(name(d), maps.derivative(&m.dom, &m.cod)),
    )
}

/// The part of the image of a pairing `⟨f, g⟩` that both modes share: the lets binding the two
/// sub-images' results, β-reduced where `f` is the identity (the `let` of every source line is
/// `⟨id, g⟩`) and where an image is a constant's `(c, λ̲d. 0)`; the two primal components; and
/// the derivative variables of `f` and `g` where they are bound (`None` for the identity and
/// for constants: the caller builds `d` or `0` there).
pub(crate) struct PairParts {
    pub(crate) lets: Lets,
    pub(crate) first: Term,
    pub(crate) second: Term,
    pub(crate) df: Option<Var>,
    pub(crate) dg: Option<Var>,
    /// Whether `f` is the identity.
    pub(crate) id: bool,
}

pub(crate) fn pair_parts(maps: &impl TypeMaps, f: &Mor, g: &Mor) -> PairParts {
    let id = is_identity(f);
    let (y, df) = results(maps, f, "y", "df");
    let (z, dg) = results(maps, g, "z", "dg");
    let mut lets = Lets::new();
    let (first, df) = if id {
        (Term::var(&f.x), None)
    } else if let Some(c) = constant_image(f) {
        (c.clone(), None)
    } else {
        lets.push_pair(&y, &df, f.body.clone());
        (Term::var(&y), Some(df))
    };
    let (second, dg) = match constant_image(g) {
        Some(c) => (c.clone(), None),
        None => {
            lets.push(Pat::Var(g.x.clone()), Term::var(&f.x));
            lets.push_pair(&z, &dg, g.body.clone());
            (Term::var(&z), Some(dg))
        }
    };
    PairParts {
        lets,
        first,
        second,
        df,
        dg,
        id,
    }
}

/// The error for a primitive without a registered derivative.
pub(crate) fn no_derivative(op: &Prim) -> Error {
    Error::new(
        ErrorKind::Unsupported,
        format!("primitive `{}` has no derivative", op.name()),
    )
    .with_note("register one with `Primitive::with_derivative`")
}

/// `deriv` (a primitive's `Dop` or `DopT` term) with every application of `op` to the
/// primal's own arguments (`value`, syntactically: [`Term::syn_eq`]) replaced by `y`, the variable the rules bind to the primal
/// result: `F(op) = let y = op x in (y, λ̲d. Dop(x; d)[y / op x])`, and `R(op)` alike. The
/// derivatives of `tanh` (`1 - tanh x · tanh x`), `exp`, `sqrt`, `sigmoid`, `tan` apply `op`
/// again; sharing `y` computes it once, and a derivative closure then captures the result
/// rather than the argument (so over an array, the tape holds the results the primal made).
/// The simplifier's `cse` cannot see this: `y` occurs once before the rewrite, so it is inlined
/// first. `None` where `deriv` does not apply `op` (then the rules keep `(op x, λ̲d. ..)`).
pub(crate) fn share_result(deriv: &Term, value: &Term, y: &Var) -> Option<Term> {
    struct Share<'a> {
        value: &'a Term,
        y: &'a Var,
        hit: bool,
    }
    impl crate::target::term::Rewrite for Share<'_> {
        fn term(&mut self, t: &Term) -> Term {
            if Term::syn_eq(t, self.value) {
                self.hit = true;
                return Term::new(TermKind::Var(self.y.clone()), t.span);
            }
            t.map_children(self)
        }
        fn linear(&mut self, l: &LTerm) -> LTerm {
            l.map_children(self)
        }
    }
    let mut share = Share {
        value,
        y,
        hit: false,
    };
    let out = deep(|| deriv.map_children(&mut share));
    share.hit.then_some(out)
}

/// `deriv` with the primal result shared ([`share_result`]): where it applies the primitive
/// to the same arguments as `value` again, binds `y = value` (of type `ty`) in `lets`, makes
/// `value` that variable, and returns the derivative reading it; else `deriv` as it is.
pub(crate) fn with_shared_result(deriv: Term, ty: Ty, lets: &mut Lets, value: &mut Term) -> Term {
    let y = Var::fresh(name("y"), ty);
    match share_result(&deriv, value, &y) {
        Some(shared) => {
            lets.push(Pat::Var(y.clone()), std::mem::replace(value, Term::var(&y)));
            shared
        }
        None => deriv,
    }
}

/// `λ̲d. Dop(x; d)` for a primitive whose derivative is given alone ([`Derivative::Jvp`]), at
/// the argument variables `args` with the primal result `y`.
pub(crate) fn jvp_rule(
    op: &Prim,
    rule: &crate::prim::JvpRule,
    args: &[Term],
    y: &Var,
    tangent: LTy,
) -> Term {
    let n = op.params().len();
    lin_lam("d", tangent, |d| {
        rule(&crate::prim::JvpArgs {
            this: op,
            args,
            result: &Term::var(y),
            tangents: &split_linear(d, n),
        })
    })
}

/// `DopT`, the transpose of `fwd = λ̲d. Dop(x; d)` (whose input has the shape of the argument
/// tuple `x`), for a primitive whose derivative is given alone. Fails (an error naming the
/// primitive) where `Dop` is ill-typed, not linear, or does not transpose.
pub(crate) fn transpose_jvp(
    op: &Prim,
    fwd: &Term,
    x: &Var,
    args: &[Term],
    y: &Var,
) -> Result<Term> {
    let mut free = vec![x.clone(), y.clone()];
    free.extend(args.iter().filter_map(|a| match &a.kind {
        TermKind::Var(v) => Some(v.clone()),
        _ => None,
    }));
    let shape = crate::target::transpose::Shape::of(Term::var(x), x.ty.clone());
    crate::target::transpose::transpose_map(fwd, &free, shape).map_err(|e| {
        Error::new(
            ErrorKind::Unsupported,
            format!(
                "the forward derivative of primitive `{}` cannot be transposed: {}",
                op.name(),
                e.message()
            ),
        )
    })
}

/// Makes both AD modes' images of a primitive and type-checks them (at registration: a
/// derivative rule of the wrong type is reported there, not when a program is differentiated).
pub(crate) fn check_rules(op: &Prim) -> std::result::Result<(), String> {
    if matches!(op.derivative(), Derivative::Missing | Derivative::Zero) {
        return Ok(());
    }
    let (dom, cod) = (op.domain(), op.result().clone());
    let (f, r) = (forward::Forward::new(), reverse::Reverse::new());
    let fwd = f.prim(op).map_err(|e| e.message().to_string())?;
    let rev = r.prim(op).map_err(|e| e.message().to_string())?;
    let image = |x: Ty, y: Ty, d: LTy, e: LTy| Ty::fun(x, Ty::prod(y, Ty::lin_fun(d, e)));
    let want = [
        (
            "forward",
            &fwd,
            image(
                f.primal(&dom),
                f.primal(&cod),
                f.tangent(&dom),
                f.tangent(&cod),
            ),
        ),
        (
            "reverse",
            &rev,
            image(
                r.primal(&dom),
                r.primal(&cod),
                r.cotangent(&cod),
                r.cotangent(&dom),
            ),
        ),
    ];
    for (mode, m, want) in want {
        let ty = crate::deep::deep(|| crate::target::check::check(&m.to_term(), &[]))
            .map_err(|e| format!("its {mode} derivative is ill-typed: {}", e.message()))?;
        if ty != want {
            return Err(format!(
                "its {mode} derivative is ill-typed: the image has type `{ty}`, not `{want}`"
            ));
        }
    }
    Ok(())
}

/// Checks that every primitive a source term uses has a registered derivative, reporting the
/// first one without, at its position. (The models reject such a primitive too; this check
/// exists to point at the source.)
pub fn check_supported(t: &STerm) -> Result<()> {
    let mut stack = vec![t];
    while let Some(t) = stack.pop() {
        if let SKind::Prim(op, _) = &t.kind
            && matches!(op.derivative(), Derivative::Missing)
        {
            return Err(no_derivative(op).with_span(t.span));
        }
        // Children in reverse, so that the first construct in source order is reported.
        stack.extend(t.children().into_iter().rev());
    }
    Ok(())
}

/// A memo table for a type map, keyed by the identity of shared type nodes, so that mapping a
/// context type of n variables (built by sharing) costs O(n) once rather than per combinator.
pub(crate) struct Memo<T> {
    /// Keyed by address: Fx hashing (SipHash was a tenth of reverse AD of a 10⁴-line program).
    map: RefCell<FxHashMap<usize, (Type, T)>>,
}

impl<T: Clone> Memo<T> {
    pub(crate) fn new() -> Memo<T> {
        Memo {
            map: RefCell::new(FxHashMap::default()),
        }
    }

    /// The image of `t`, computing it with `f` (which may call back into the memo) if needed.
    pub(crate) fn get(&self, t: &Type, f: impl FnOnce() -> T) -> T {
        let key = memo_key(t);
        if let Some((_, v)) = self.map.borrow().get(&key) {
            return v.clone();
        }
        let v = f();
        // A small node only the caller holds (a type just made, e.g. the domain `A × B` of
        // `fst`) cannot be asked about again once dropped: not worth an entry (a fifth of
        // reverse AD's type lookups, each an insertion that kept the type alive). A big one is
        // worth it even so: it may become a component of the next type made (the codomain of
        // a pair is made from its components' codomains), and mapping it again there would
        // make a tuple of n components cost O(n²).
        if unshared(t) && small(t, 3) {
            return v;
        }
        // Keeping `t` alive keeps its address from being reused by another type.
        self.map.borrow_mut().insert(key, (t.clone(), v.clone()));
        v
    }
}

/// Whether `t` is a node nobody but the caller holds.
fn unshared(t: &Type) -> bool {
    match t {
        Type::Prod(p) | Type::Fun(p) | Type::Sum(p) => Rc::strong_count(p) == 1,
        Type::Array(a) => Rc::strong_count(a) == 1,
        Type::Real | Type::Int | Type::Bool | Type::Unit => false,
    }
}

/// Whether `t` has no path longer than `depth` nodes.
fn small(t: &Type, depth: usize) -> bool {
    if depth == 0 {
        return false;
    }
    match t {
        Type::Prod(p) | Type::Fun(p) | Type::Sum(p) => {
            small(&p.0, depth - 1) && small(&p.1, depth - 1)
        }
        Type::Array(a) => small(a, depth - 1),
        Type::Real | Type::Int | Type::Bool | Type::Unit => true,
    }
}

/// The key of a type in a [`Memo`]: the address of a shared node, or for the types without one
/// a small number no node has as its address (so scalar types are memoised too, and their
/// images, e.g. the `Ty` of a linear variable, are allocated once, not per use).
fn memo_key(t: &Type) -> usize {
    match t {
        Type::Prod(p) | Type::Fun(p) | Type::Sum(p) => Rc::as_ptr(p) as *const () as usize,
        Type::Array(a) => Rc::as_ptr(a) as *const () as usize,
        Type::Real => 1,
        Type::Int => 2,
        Type::Bool => 3,
        Type::Unit => 4,
    }
}

/// The name `s` as a shared string: the AD functors make a few hundred thousand variables for a
/// 10⁴-line program, nearly all named from a handful of literals, and a fresh `Rc<str>` for each
/// was an allocation (and a page of memory touched) per variable.
pub(crate) fn name(s: &'static str) -> Rc<str> {
    thread_local! {
        static NAMES: RefCell<FxHashMap<&'static str, Rc<str>>> =
            RefCell::new(FxHashMap::default());
    }
    NAMES.with(|n| {
        n.borrow_mut()
            .entry(s)
            .or_insert_with(|| Rc::from(s))
            .clone()
    })
}

/// A chain of `let`s under construction: `let p1 = e1 in ... let pn = en in body`.
pub(crate) struct Lets(Vec<(Pat, Term)>);

impl Lets {
    pub(crate) fn new() -> Lets {
        Lets(Vec::new())
    }

    /// Adds `let p = e`.
    pub(crate) fn push(&mut self, p: Pat, e: Term) {
        self.0.push((p, e));
    }

    /// Adds `let (a, b) = e`.
    pub(crate) fn push_pair(&mut self, a: &Var, b: &Var, e: Term) {
        self.push(
            Pat::Pair(Box::new(Pat::Var(a.clone())), Box::new(Pat::Var(b.clone()))),
            e,
        );
    }

    /// The chain around `body`.
    pub(crate) fn finish(self, body: Term) -> Term {
        self.0
            .into_iter()
            .rev()
            .fold(body, |b, (p, e)| Term::let_pat(p, e, b))
    }
}

/// Whether `m` is the image of `id` as both functors build it, `(x, λ̲v. v)`. The rules for
/// `⟨f, g⟩` use it to build `R(⟨id, g⟩)` (the image of every source `let`) with `id`'s
/// derivative already applied: `(λ̲v. v) • l` is `l` by β, nothing the simplifier must find.
pub(crate) fn is_identity(m: &Mor) -> bool {
    let TermKind::Pair(y, d) = &m.body.kind else {
        return false;
    };
    matches!(&y.kind, TermKind::Var(x) if x.id == m.x.id)
        && matches!(&d.kind, TermKind::LinLam(v, l)
            if matches!(&l.kind, LTermKind::Var(u) if u.id == v.id))
}

/// The literal of `m` if it is the image of a constant, `(c, λ̲v. 0)` (`bang`'s `((), λ̲v. 0)`
/// included): a value whose derivative is the zero map, with no computation to share. The
/// rules for `g ∘ f` and `⟨f, g⟩` build their β-reduced form directly when such an image is
/// composed or paired: `(λ̲v. 0) • l` is `0`, and a sum with it is the other summand.
pub(crate) fn constant_image(m: &Mor) -> Option<&Term> {
    let TermKind::Pair(y, d) = &m.body.kind else {
        return None;
    };
    let zero = matches!(&d.kind, TermKind::LinLam(_, l) if matches!(l.kind, LTermKind::Zero(_)));
    (zero && matches!(y.kind, TermKind::Lit(_))).then_some(y)
}

/// `λ̲v. body(v)` for a fresh linear variable `v : Lin l`.
pub(crate) fn lin_lam(nm: &'static str, l: LTy, body: impl FnOnce(LTerm) -> LTerm) -> Term {
    lin_lam_ty(nm, Ty::lin(l), body)
}

/// [`lin_lam`] with the variable's type `Lin l` given (memoised by the models).
pub(crate) fn lin_lam_ty(nm: &'static str, ty: Ty, body: impl FnOnce(LTerm) -> LTerm) -> Term {
    let v = Var::fresh(name(nm), ty);
    Term::lin_lam(&v, body(LTerm::var(&v)))
}

/// `f • l` for a Cartesian variable `f`.
pub(crate) fn apply(f: &Var, l: LTerm) -> LTerm {
    LTerm::app(Term::var(f), l)
}

/// `Category::located` for both models: gives the primitive (and array) operations on the spine
/// of the morphism's body a source position, so runtime errors of the primal computation point
/// at the source.
pub(crate) fn located(m: Mor, at: Span) -> Mor {
    Mor {
        body: respan(&m.body, at),
        ..m
    }
}

fn respan(t: &Term, at: Span) -> Term {
    let kind = match &t.kind {
        TermKind::Let(p, e, b) => TermKind::Let(p.clone(), respan(e, at), respan(b, at)),
        TermKind::Pair(a, b) => TermKind::Pair(respan(a, at), respan(b, at)),
        TermKind::Prim(..)
        | TermKind::Loop(..)
        | TermKind::Replicate(..)
        | TermKind::Map2(..)
        | TermKind::Build(..)
        | TermKind::Index(..)
            if t.span == Span::default() =>
        {
            t.kind.clone()
        }
        _ => return t.clone(),
    };
    Term::new(kind, at)
}

/// `π t`: a chain of projections of a primal.
pub(crate) fn path_term(path: &ccc::Path, mut t: Term) -> Term {
    for s in path.expanded() {
        t = match s {
            ccc::Step::Fst => Term::fst(t),
            ccc::Step::Snd => Term::snd(t),
        };
    }
    t
}

/// `π l`: a chain of projections of a (co)tangent.
pub(crate) fn path_lterm(path: &ccc::Path, mut l: LTerm) -> LTerm {
    for s in path.expanded() {
        l = match s {
            ccc::Step::Fst => LTerm::fst(l),
            ccc::Step::Snd => LTerm::snd(l),
        };
    }
    l
}

/// `τ t` for a tuple of projection chains `τ` (the primal of [`ccc::CombKind::Tuple`]).
pub(crate) fn projs_term(projs: &ccc::Projs, t: &Term) -> Term {
    deep(|| match projs {
        ccc::Projs::Leaf(p) => path_term(p, t.clone()),
        ccc::Projs::Pair(a, b) => Term::pair(projs_term(a, t), projs_term(b, t)),
    })
}

/// `τ l` for a tuple of projection chains `τ`, on (co)tangents.
pub(crate) fn projs_lterm(projs: &ccc::Projs, l: &LTerm) -> LTerm {
    deep(|| match projs {
        ccc::Projs::Leaf(p) => path_lterm(p, l.clone()),
        ccc::Projs::Pair(a, b) => LTerm::pair(projs_lterm(a, l), projs_lterm(b, l)),
    })
}

/// `λa. F(f)[(γ, a)]` (or `R(f)`): the body of a morphism `Γ × A → B` as a function of its
/// second component, with the first fixed to `γ`.
pub(crate) fn per_element(f: Mor, gamma: &Var, a: &Var) -> Term {
    Term::lam(
        a,
        Term::let_(&f.x, Term::pair(Term::var(gamma), Term::var(a)), f.body),
    )
}

/// `map (λr. fst r) rs` or `map (λr. snd r) rs` for an array `rs` of primal-derivative pairs.
pub(crate) fn map_proj(rs: &Var, second: bool) -> Term {
    let image = rs.ty.as_array().expect("an array of images").clone();
    let r = Var::fresh(name("r"), image);
    let body = if second {
        Term::snd(Term::var(&r))
    } else {
        Term::fst(Term::var(&r))
    };
    Term::mk(TermKind::Map(Term::lam(&r, body), Term::var(rs)))
}

/// `map2 (λa. λb. m[(γ, (a, b))]) as bs`: the images of a morphism `Γ × (A × B) → C` at every
/// pair of elements, in either mode.
pub(crate) fn map2_images(
    maps: &impl TypeMaps,
    m: Mor,
    g: &Var,
    a: &Type,
    b: &Type,
    xs: &Var,
    ys: &Var,
) -> Term {
    let ai = Var::fresh(name("a"), maps.primal(a));
    let bi = Var::fresh(name("b"), maps.primal(b));
    let arg = Term::pair(Term::var(g), Term::pair(Term::var(&ai), Term::var(&bi)));
    let f = Term::lam(&ai, Term::lam(&bi, Term::let_(&m.x, arg, m.body)));
    Term::mk(TermKind::Map2(f, Term::var(xs), Term::var(ys)))
}

/// `let (a, s) = x in case s of inl b → branch(true, (a, b)) | inr c → branch(false, (a, c))`
/// for `x : A × (B + C)`: the shape of the images of `dist` and of the derived `case`, in either
/// mode. `branch` gets the side and the term pairing the context with the payload.
pub(crate) fn case_split(
    maps: &impl TypeMaps,
    x: &Var,
    (a, b, c): (&Type, &Type, &Type),
    mut branch: impl FnMut(bool, Term) -> Term,
) -> Term {
    let av = Var::fresh(name("a"), maps.primal(a));
    let s = Var::fresh(name("s"), maps.primal(&Type::sum(b.clone(), c.clone())));
    let (bv, cv) = (
        Var::fresh(name("b"), maps.primal(b)),
        Var::fresh(name("c"), maps.primal(c)),
    );
    let l = branch(true, Term::pair(Term::var(&av), Term::var(&bv)));
    let r = branch(false, Term::pair(Term::var(&av), Term::var(&cv)));
    let mut lets = Lets::new();
    lets.push_pair(&av, &s, Term::var(x));
    lets.finish(Term::mk(TermKind::Case(
        Term::var(&s),
        Pat::Var(bv),
        l,
        Pat::Var(cv),
        r,
    )))
}

/// The morphism of one `case` branch, `f` on the left and `g` on the right, each taken once.
pub(crate) fn take_branch(fg: &mut (Option<Mor>, Option<Mor>), left: bool) -> Mor {
    if left { fg.0.take() } else { fg.1.take() }.expect("each branch is built once")
}

/// Binds the components of a primitive's argument tuple `x : A1 × (... × An)` to variables:
/// returns them (as terms) with the `let`s that bind them. `tys` are the component types.
pub(crate) fn split_args(x: &Var, tys: &[Ty], lets: &mut Lets) -> Vec<Term> {
    match tys.len() {
        0 => vec![],
        1 => vec![Term::var(x)],
        _ => {
            let vars: Vec<Var> = tys
                .iter()
                .enumerate()
                .map(|(i, t)| Var::fresh(format!("{}{}", x.name, i + 1), t.clone()))
                .collect();
            fn pat(vars: &[Var]) -> Pat {
                deep(|| match vars {
                    [v] => Pat::Var(v.clone()),
                    [v, rest @ ..] => Pat::Pair(Box::new(Pat::Var(v.clone())), Box::new(pat(rest))),
                    [] => unreachable!("at least two components"),
                })
            }
            lets.push(pat(&vars), Term::var(x));
            vars.iter().map(Term::var).collect()
        }
    }
}

/// The components of a linear value of a right-nested tuple type of `n` components, as linear
/// terms (`fst l`, `fst (snd l)`, ..., `snd (... (snd l))`).
pub(crate) fn split_linear(l: LTerm, n: usize) -> Vec<LTerm> {
    let mut out = Vec::with_capacity(n);
    let mut rest = l;
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

/// The right-nested tuple of linear terms (`0` of type `Unit` for none).
pub(crate) fn tuple_linear(mut ls: Vec<LTerm>) -> LTerm {
    match ls.len() {
        0 => LTerm::zero(LTy::Unit),
        1 => ls.pop().expect("one"),
        _ => {
            let last = ls.pop().expect("two");
            ls.into_iter()
                .rev()
                .fold(last, |acc, l| LTerm::pair(l, acc))
        }
    }
}

/// The value of a context `((1 × A1) × ...) × An` (see [`crate::ccc::compile`]).
pub(crate) fn context(args: &[Value]) -> Value {
    ccc::eval::context_value(args)
}

/// The components of a linear value of a context type `((1 × A1) × ...) × An`.
pub(crate) fn context_components(mut l: Lin, n: usize) -> Vec<Lin> {
    let mut out = vec![Lin::zero(); n];
    for k in (0..n).rev() {
        out[k] = l.snd();
        l = l.fst();
    }
    out
}

/// The linear value of a context type holding the given components.
pub(crate) fn context_linear(ls: Vec<Lin>) -> Lin {
    ls.into_iter().fold(Lin::zero(), Lin::pair)
}

/// Evaluates a closed morphism at a point: the primal result and the derivative.
fn run(m: &Mor, x: Value) -> Result<(Value, LinFun)> {
    split_image(m.compile().run(&[x])?)
}

/// The primal result and the derivative of an image value.
pub(crate) fn split_image(v: Value) -> Result<(Value, LinFun)> {
    let (y, d) = v.expect_pair();
    match d {
        Value::LinFun(f) => Ok((y.clone(), f.clone())),
        other => panic!("internal error: AD derivative is not a linear map: {other}"),
    }
}

pub(crate) fn first_order_entry(entry: &Entry, what: &str) -> Result<()> {
    entry_with_inputs(entry, what, false)
}

/// As [`first_order_entry`], but a parameter may also be a function between first-order types
/// when `functions` is set (the run-time functions a nested form's entry uses: `ad::nested`).
fn entry_with_inputs(entry: &Entry, what: &str, functions: bool) -> Result<()> {
    check_supported(&entry.body)?;
    for p in &entry.params {
        let function = functions
            && p.ty
                .as_fun()
                .is_some_and(|(a, b)| a.is_first_order() && b.is_first_order());
        if !p.ty.is_first_order() && !function {
            return Err(Error::new(
                ErrorKind::Unsupported,
                format!(
                    "{what} needs first-order inputs, but parameter `{}` has type `{}`",
                    p.name, p.ty
                ),
            ));
        }
    }
    if !entry.body.ty.is_first_order() {
        return Err(Error::new(
            ErrorKind::Unsupported,
            format!(
                "{what} needs a first-order result, but `{}` returns `{}`",
                entry.name, entry.body.ty
            ),
        ));
    }
    Ok(())
}

/// Forward mode for an entry point, transformed once: evaluate with [`Jvp::jvp`] many times.
pub struct Jvp {
    entry: Entry,
    mor: Mor,
    /// The compiled code, compiled on first use (after any `map_body`).
    code: OnceCell<Code>,
}

impl Jvp {
    /// Compiles the entry point and applies forward CHAD. Fails on unsupported constructs,
    /// primitives without derivatives, and higher-order inputs or results.
    pub fn new(entry: &Entry) -> Result<Jvp> {
        Jvp::with_inputs(entry, false)
    }

    /// [`Jvp::new`], where a parameter may also be a function between first-order types (its
    /// primal `F1(A -> B)` given by the caller: `ad::nested`'s run-time functions).
    pub(crate) fn with_function_inputs(entry: &Entry) -> Result<Jvp> {
        Jvp::with_inputs(entry, true)
    }

    fn with_inputs(entry: &Entry, functions: bool) -> Result<Jvp> {
        entry_with_inputs(entry, "forward mode", functions)?;
        let mor = forward::transform(&ccc::compile_entry(entry))?;
        Ok(Jvp {
            entry: entry.clone(),
            mor,
            code: OnceCell::new(),
        })
    }

    /// The forward derivative as a morphism (for printing).
    pub fn mor(&self) -> &Mor {
        &self.mor
    }

    /// The derivative code compiled for the engine (compiled on first use; call it to pay
    /// for compilation up front).
    pub fn code(&self) -> &Code {
        self.code.get_or_init(|| self.mor.compile())
    }

    /// The same derivative with its code rewritten by `f` (see [`Mor::map_body`]).
    pub fn map_body(self, f: impl FnOnce(&Term) -> Term) -> Jvp {
        Jvp {
            mor: self.mor.map_body(f),
            entry: self.entry,
            code: OnceCell::new(),
        }
    }

    /// The value at `args` and the directional derivative along `tangents` (one per argument,
    /// each of type `Type::tangent` of the parameter type; a sum's tangent on the same side as
    /// the argument, an array's of the same length).
    pub fn jvp(&self, args: &[Value], tangents: &[Value]) -> Result<(Value, Value)> {
        crate::eval::check_args(&self.entry, args)?;
        if tangents.len() != args.len() {
            return Err(Error::new(
                ErrorKind::Argument,
                format!(
                    "{} tangent{} given for {} argument{}",
                    tangents.len(),
                    if tangents.len() == 1 { "" } else { "s" },
                    args.len(),
                    if args.len() == 1 { "" } else { "s" },
                ),
            ));
        }
        let mut ds = Vec::with_capacity(args.len());
        for (k, ((p, a), t)) in self.entry.params.iter().zip(args).zip(tangents).enumerate() {
            let d = to_tangent(&p.ty, a, t)
                .map_err(|e| e.prefixed(&format!("tangent {} (of `{}`): ", k + 1, p.name)))?;
            ds.push(d);
        }
        let (y, f) = split_image(self.code().run(&[context(args)])?)?;
        let dy = f.apply(&context_linear(ds))?;
        let t = from_tangent(&self.entry.body.ty, &y, &dy);
        Ok((y, t))
    }

    /// Runs the primal at `args` once and keeps the derivative there: a [`Pushforward`] maps
    /// many tangents without running the primal again.
    pub fn pushforward(&self, args: &[Value]) -> Result<Pushforward> {
        crate::eval::check_args(&self.entry, args)?;
        let (value, map) = split_image(self.code().run(&[context(args)])?)?;
        Ok(Pushforward {
            entry: self.entry.clone(),
            args: args.to_vec(),
            value,
            map,
        })
    }
}

/// Forward mode at one point ([`Jvp::pushforward`]): the value and the derivative, a linear
/// map of the arguments' tangents evaluated by [`Pushforward::apply`] without rerunning the
/// primal.
pub struct Pushforward {
    entry: Entry,
    args: Vec<Value>,
    value: Value,
    map: LinFun,
}

impl Pushforward {
    /// The value of the entry at the point.
    pub fn value(&self) -> &Value {
        &self.value
    }

    /// The result's tangent along `tangents` (one per argument, as [`Jvp::jvp`] takes them).
    pub fn apply(&self, tangents: &[Value]) -> Result<Value> {
        if tangents.len() != self.args.len() {
            return Err(Error::new(
                ErrorKind::Argument,
                format!(
                    "{} tangent{} given for {} argument{}",
                    tangents.len(),
                    if tangents.len() == 1 { "" } else { "s" },
                    self.args.len(),
                    if self.args.len() == 1 { "" } else { "s" },
                ),
            ));
        }
        let mut ds = Vec::with_capacity(tangents.len());
        for (k, ((p, a), t)) in self
            .entry
            .params
            .iter()
            .zip(&self.args)
            .zip(tangents)
            .enumerate()
        {
            let d = to_tangent(&p.ty, a, t)
                .map_err(|e| e.prefixed(&format!("tangent {} (of `{}`): ", k + 1, p.name)))?;
            ds.push(d);
        }
        let dy = self.map.apply(&context_linear(ds))?;
        Ok(from_tangent(&self.entry.body.ty, &self.value, &dy))
    }
}

/// Reverse mode at one point ([`Vjp::pullback`]): the value and the transposed derivative, a
/// linear map of output cotangents evaluated by [`Pullback::apply`] without rerunning the
/// primal.
pub struct Pullback {
    entry: Entry,
    args: Vec<Value>,
    value: Value,
    map: LinFun,
}

impl Pullback {
    /// The value of the entry at the point.
    pub fn value(&self) -> &Value {
        &self.value
    }

    /// Every argument's cotangent for the output cotangent `cotangent` (of type
    /// `Type::tangent` of the result type).
    pub fn apply(&self, cotangent: &Value) -> Result<Vec<Value>> {
        let v = to_tangent(&self.entry.body.ty, &self.value, cotangent)
            .map_err(|e| e.prefixed("cotangent: "))?;
        let g = self.map.apply(&v)?;
        Ok(context_components(g, self.args.len())
            .iter()
            .zip(&self.entry.params)
            .zip(&self.args)
            .map(|((g, p), a)| from_tangent(&p.ty, a, g))
            .collect())
    }
}

/// Reverse mode for an entry point, transformed once: evaluate with [`Vjp::vjp`] or
/// [`Vjp::grad`] many times.
pub struct Vjp {
    entry: Entry,
    mor: Mor,
    /// The compiled code, compiled on first use (after any `map_body`).
    code: OnceCell<Code>,
}

impl Vjp {
    /// Compiles the entry point and applies reverse CHAD. Fails on unsupported constructs,
    /// primitives without derivatives, and higher-order inputs or results.
    pub fn new(entry: &Entry) -> Result<Vjp> {
        Vjp::with_inputs(entry, false)
    }

    /// [`Vjp::new`], where a parameter may also be a function between first-order types (its
    /// primal `R1(A -> B)` given by the caller: `ad::nested`'s run-time functions).
    pub(crate) fn with_function_inputs(entry: &Entry) -> Result<Vjp> {
        Vjp::with_inputs(entry, true)
    }

    fn with_inputs(entry: &Entry, functions: bool) -> Result<Vjp> {
        entry_with_inputs(entry, "reverse mode", functions)?;
        let mor = reverse::transform(&ccc::compile_entry(entry))?;
        Ok(Vjp {
            entry: entry.clone(),
            mor,
            code: OnceCell::new(),
        })
    }

    /// Reverse mode for an entry point from a reverse derivative made another way: `mor` must
    /// be a morphism of reverse CHAD's type for the entry (`R1(Γ) → R1(B) × (R2(B) ⊸ R2(Γ))`
    /// for the context `Γ` of its parameters), e.g. the transpose of forward mode
    /// ([`crate::linearize::vjp_via_transpose`]). Fails like [`Vjp::new`] on higher-order
    /// inputs or results.
    pub fn from_mor(entry: &Entry, mor: Mor) -> Result<Vjp> {
        first_order_entry(entry, "reverse mode")?;
        Ok(Vjp {
            entry: entry.clone(),
            mor,
            code: OnceCell::new(),
        })
    }

    /// The reverse derivative as a morphism (for printing).
    pub fn mor(&self) -> &Mor {
        &self.mor
    }

    /// The derivative code compiled for the engine (compiled on first use; call it to pay
    /// for compilation up front).
    pub fn code(&self) -> &Code {
        self.code.get_or_init(|| self.mor.compile())
    }

    /// The same derivative with its code rewritten by `f` (see [`Mor::map_body`]).
    pub fn map_body(self, f: impl FnOnce(&Term) -> Term) -> Vjp {
        Vjp {
            mor: self.mor.map_body(f),
            entry: self.entry,
            code: OnceCell::new(),
        }
    }

    /// The value at `args` and the cotangent of every argument for the output cotangent
    /// `cotangent` (of type `Type::tangent` of the result type).
    pub fn vjp(&self, args: &[Value], cotangent: &Value) -> Result<(Value, Vec<Value>)> {
        let p = self.pullback(args)?;
        let gs = p.apply(cotangent)?;
        Ok((p.value, gs))
    }

    /// Runs the primal at `args` once and keeps the transposed derivative there: a
    /// [`Pullback`] maps many output cotangents without running the primal again.
    pub fn pullback(&self, args: &[Value]) -> Result<Pullback> {
        crate::eval::check_args(&self.entry, args)?;
        let (value, map) = split_image(self.code().run(&[context(args)])?)?;
        Ok(Pullback {
            entry: self.entry.clone(),
            args: args.to_vec(),
            value,
            map,
        })
    }

    /// The value and the gradient with respect to every argument, for a `Real`-valued entry.
    pub fn grad(&self, args: &[Value]) -> Result<(Value, Vec<Value>)> {
        check_real_valued(&self.entry)?;
        self.vjp(args, &Value::Real(1.0))
    }
}

/// Forward mode: the value of `entry` at `args` and its derivative along `tangents`. Goes
/// through the library's pipeline ([`optimized::Optimized`]: optimise, differentiate, simplify,
/// compile), as `chad jvp` does; to differentiate many times, keep a `chad::Function`.
pub fn jvp(entry: &Entry, args: &[Value], tangents: &[Value]) -> Result<(Value, Value)> {
    optimized::Optimized::new(entry).jvp()?.jvp(args, tangents)
}

/// Reverse mode: the value of `entry` at `args` and the cotangent of every argument for the
/// output cotangent `cotangent`, through the library's pipeline (see [`jvp`]).
pub fn vjp(entry: &Entry, args: &[Value], cotangent: &Value) -> Result<(Value, Vec<Value>)> {
    optimized::Optimized::new(entry).vjp()?.vjp(args, cotangent)
}

/// Reverse mode for a `Real`-valued entry: the value and the gradient for every argument
/// (`()` for discrete arguments), through the library's pipeline (see [`jvp`]).
pub fn grad(entry: &Entry, args: &[Value]) -> Result<(Value, Vec<Value>)> {
    check_real_valued(entry)?;
    optimized::Optimized::new(entry).vjp()?.grad(args)
}

/// The taped loop of both iteration rules: with `F(f)` or `R(f)` the image of the step
/// `f : Γ × A → A + B` (or `(A + B) × C` for `itTape`), `let (γ, a₀) = x in let (b, fs) =
/// loopTape (λa. let (y, f') = f[(γ, a)] in out(y, f')) a₀`, pushed onto `lets`; returns `b`
/// and `fs`, the array of each step's tape entry of type `entry_ty` (`out` builds the step's
/// result: its sum and its entry, built from the step's derivative `f'`).
pub(crate) fn taped_loop(
    maps: &impl TypeMaps,
    f: Mor,
    x: &Var,
    (gamma, a, b): (&Type, &Type, &Type),
    entry_ty: Ty,
    out: impl FnOnce(&Var, &Var) -> Term,
    lets: &mut Lets,
) -> (Var, Var) {
    let g = Var::fresh(name("γ"), maps.primal(gamma));
    let a0 = Var::fresh(name("a"), maps.primal(a));
    lets.push_pair(&g, &a0, Term::var(x));
    let s = Var::fresh(name("s"), maps.primal(a));
    let (y, df) = results(maps, &f, "y", "df");
    let mut inner = Lets::new();
    inner.push(
        Pat::Var(f.x.clone()),
        Term::pair(Term::var(&g), Term::var(&s)),
    );
    inner.push_pair(&y, &df, f.body);
    let step = Term::lam(&s, inner.finish(out(&y, &df)));
    let bv = Var::fresh(name("b"), maps.primal(b));
    let fs = Var::fresh(name("fs"), Ty::array(entry_ty));
    lets.push_pair(
        &bv,
        &fs,
        Term::mk(TermKind::Loop(step, Term::var(&a0), true)),
    );
    (bv, fs)
}

/// A taped loop step's result `(y, f')` (its sum and its derivative as the tape entry).
pub(crate) fn pair_vars(y: &Var, df: &Var) -> Term {
    Term::pair(Term::var(y), Term::var(df))
}

/// The taped loop of both `itTape` rules (`f : Γ × A → (A + B) × C`): [`taped_loop`] with
/// each step's entry the pair of its record and its derivative, then unzipped:
/// `let (b, t) = loopTape (λa. let (y, f') = f[(γ, a)] in (fst y, (snd y, f'))) a₀ in
/// let cs = map fst t in let fs = map snd t`; returns `b`, `cs` and `fs`.
pub(crate) fn taped_loop_records(
    maps: &impl TypeMaps,
    f: Mor,
    x: &Var,
    (gamma, a, b, c): (&Type, &Type, &Type, &Type),
    entry_ty: Ty,
    lets: &mut Lets,
) -> (Var, Var, Var) {
    let (cp, dp) = (maps.primal(c), entry_ty);
    let (bv, t) = taped_loop(
        maps,
        f,
        x,
        (gamma, a, b),
        Ty::prod(cp.clone(), dp.clone()),
        |y, df| {
            let (y, df) = (Term::var(y), Term::var(df));
            Term::pair(Term::fst(y.clone()), Term::pair(Term::snd(y), df))
        },
        lets,
    );
    let half = |second: bool| {
        let p = Var::fresh(name("p"), Ty::prod(cp.clone(), dp.clone()));
        let body = if second {
            Term::snd(Term::var(&p))
        } else {
            Term::fst(Term::var(&p))
        };
        Term::mk(TermKind::Map(Term::lam(&p, body), Term::var(&t)))
    };
    let cs = Var::fresh(name("cs"), Ty::array(cp.clone()));
    let fs = Var::fresh(name("fs"), Ty::array(dp.clone()));
    lets.push(Pat::Var(cs.clone()), half(false));
    lets.push(Pat::Var(fs.clone()), half(true));
    (bv, cs, fs)
}

/// `grad`'s precondition: the entry returns `Real`. Checked before differentiating, which may
/// be costly (issue 27: a 10⁴-deep `Array` result type took 40 s to reject).
pub fn check_real_valued(entry: &Entry) -> Result<()> {
    if matches!(entry.body.ty, Type::Real) {
        return Ok(());
    }
    Err(Error::new(
        ErrorKind::Argument,
        format!(
            "grad needs a Real-valued definition, but `{}` returns `{}` (use vjp with a \
             cotangent)",
            entry.name, entry.body.ty
        ),
    ))
}
