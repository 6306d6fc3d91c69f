//! One simplifier pass: a single traversal that applies every enabled rule.
//!
//! * **Input and output.** The traversal reads the pass's *input* term and builds its *output*.
//!   Each input node is simplified at most once. Smart constructors (`fst`, `plus`, ...) apply
//!   the local rules to already-simplified children.
//! * **Blocks and floating.** Bindings are pushed on one stack and wrapped around the result when
//!   the enclosing *block* (a λ body, a branch, the whole term) closes. A `let` in a strict
//!   position therefore floats out of it for free (`letRotate`, `letProj`, `plusLet`,
//!   `letFloat`); with the rule off, that position is simplified as a block of its own.
//! * **Inlining.** A variable used once, safely (see [`super::occur`]), is mapped to its
//!   *unsimplified* bound term, which is simplified where it is used (so a `let`-bound `λ` used
//!   once is β-reduced as input, and nothing is simplified twice). Atoms are copied (`Cheap`),
//!   and the components of a split pair that are used once are moved (`Moved`). A β-redex that
//!   only appears after simplification binds its argument instead of substituting into the
//!   already simplified body (facts recorded about that body mention the parameter); the next
//!   pass inlines the binding.
//! * **Use counts.** The pass counts the uses of each variable in the output as it builds it.
//!   It copies atoms and decrements the counts of dropped subterms (and of moved terms whose use
//!   was never reached). When a block closes, bindings whose variables have no uses are dropped
//!   (`deadLet`), innermost first, so a chain of dead bindings disappears in one pass; then
//!   bindings whose variables turned out to be used once are inlined ([`late`]).
//! * **Per-variable state** (occurrences, uses, substitution, known pairs) is one record per
//!   variable in a table indexed by identity ([`super::table`]).
//! * **Sharing.** A node that comes out with the same form and pointer-equal children as the
//!   input node it was read from is that node, so a pass that changes nothing allocates nothing.
//! * **Dirty or clean.** The pass records whether it left anything another pass would rewrite
//!   (see [`late`]); if not, its output is the fixed point and no further pass runs.

use super::Rules;
use super::occur::{Occ, OccEntry, Occurrences, projection};
use super::table::IdTable;
use super::types;
use crate::deep::deep;
use crate::error::Span;
use crate::prim::Prim;
use crate::target::term::{
    Child, LNode, LTerm, LTermKind, Lit, Node, Pat, Rewrite, Term, TermKind, Var, VarId,
};
use crate::target::types::{LTy, Ty};
use crate::value::Value;
use rustc_hash::FxHashMap as HashMap;
use std::collections::BTreeMap;
use std::rc::Rc;

mod late;

/// What one pass did.
pub(super) struct Outcome {
    /// The output.
    pub(super) term: Term,
    /// How often each rule fired.
    pub(super) fired: BTreeMap<&'static str, usize>,
    /// Whether another pass might fire a rule on the output (if not, it is a fixed point).
    pub(super) dirty: bool,
    /// Whether the output may hold the forms the fusion rules rewrite (`build`, `map`, `map2`,
    /// `lsum`, `lbuild`, `onehot`): if not, [`super::fuse`] has nothing to do but `caseProj`.
    pub(super) arrays: bool,
    /// Whether the output may hold an `if` or a `case`: without array forms, `caseProj` is the
    /// only fusion rule that might apply ([`super::fuse::case_proj_redex`] looks).
    pub(super) branches: bool,
}

/// Runs one pass over `t`.
pub(super) fn run(t: &Term, rules: &Rules) -> Outcome {
    let mut occ = Occurrences::<VarState>::analyse(t);
    let unique;
    let t = if occ.has_duplicates() {
        unique = super::unique::uniquify(t);
        occ = Occurrences::analyse(&unique);
        debug_assert!(!occ.has_duplicates());
        &unique
    } else {
        t
    };
    let n = occ.binders();
    let mut p = Pass {
        rules,
        vars: occ.into_table(),
        lam_split: HashMap::default(),
        map_split: HashMap::default(),
        stack: Vec::with_capacity(n.min(1 << 16)),
        // With a floating rule off, a strict position is a block of its own, and a rule that
        // returns a child (`0 + l ~> l`) can bring that block's `let`s into a strict position
        // the next pass floats them out of; the passes then run to the fixed point as before.
        dirty: !(rules.let_rotate && rules.let_proj && rules.let_float && rules.plus_let),
        open: 0,
        arrays: false,
        branches: false,
        once: Vec::new(),
        moved: Vec::new(),
        failing: Default::default(),
        total_fns: Default::default(),
        in_range: Vec::new(),
        late_failing: Default::default(),
        lengths: Default::default(),
        fail_memo: Default::default(),
        late_branch: 0,
        lin: 0,
        avail: HashMap::default(),
        fired: HashMap::default(),
    };
    let out = p.block(t);
    debug_assert!(p.stack.is_empty());
    let mut fired = BTreeMap::new();
    for (name, n) in p.fired.into_values() {
        *fired.entry(name).or_default() += n;
    }
    Outcome {
        term: out,
        fired,
        dirty: p.dirty,
        arrays: p.arrays,
        branches: p.branches,
    }
}

/// What an inlined variable stands for.
enum Subst<T> {
    /// An input term, to be simplified at the (single) use.
    Input(T),
    /// An output term, moved to the (single) use.
    Moved(T),
    /// An output atom, copied to every use.
    Cheap(T),
}

/// What a pass knows about one variable.
#[derive(Default)]
struct VarState {
    /// Its occurrences in the input (not bound there: a fresh or free variable).
    occ: Occ,
    /// Its uses in the output built so far.
    uses: u32,
    /// What it stands for or is bound to.
    slot: Slot,
}

impl OccEntry for VarState {
    fn occ(&self) -> &Occ {
        &self.occ
    }
    fn occ_mut(&mut self) -> &mut Occ {
        &mut self.occ
    }
}

/// What a variable stands for (it is inlined) or is bound to (a pair of atoms).
#[derive(Default)]
enum Slot {
    #[default]
    None,
    /// A Cartesian variable inlined.
    Subst(Subst<Term>),
    /// A linear variable inlined.
    LSubst(Subst<LTerm>),
    /// A Cartesian variable bound to a pair of atoms.
    Known(Term, Term),
    /// A linear variable bound to a pair of atoms.
    LKnown(LTerm, LTerm),
    /// While its block closes: a variable used once, bound to this output term, waiting for
    /// its use to be found ([`Pass::late`]).
    Late(Core),
    /// A late variable whose use was found where it could be replaced.
    Taken,
    /// A late variable whose use was found where the term would make a new redex.
    Blocked,
    /// A late variable whose use was found as a component of a let-bound pair (replaced after
    /// all if that pair is inlined).
    Component(Core),
}

/// A binding waiting on the stack for its block to close.
enum Binding {
    Cart(Pat, Term, Span, Orig),
    Lin(Var, LTerm, Span, Orig),
    /// Dropped or inlined when its block closed.
    Gone,
}

/// A Cartesian or a linear output term (the core of a block being closed, a late variable's
/// term).
enum Core {
    C(Term),
    L(LTerm),
}

/// The `let` node a binding was read from, when its pattern and bound term are unchanged: if
/// its body comes out unchanged too, the node is reused rather than rebuilt.
enum Orig {
    None,
    C(Term),
    L(LTerm),
}

struct Pass<'r> {
    rules: &'r Rules,
    /// Per variable: occurrences in the input, uses in the output, substitution or facts.
    vars: IdTable<VarState>,
    /// Functions split by `letLamPairSplit` into their two halves.
    lam_split: HashMap<VarId, (Var, Var)>,
    /// Arrays split by `mapPairSplit` into their two halves.
    map_split: HashMap<VarId, (Var, Var)>,
    stack: Vec<Binding>,
    /// Whether the output may hold a redex this pass did not reduce (so another pass must run):
    /// see [`Pass::late`].
    dirty: bool,
    /// Late-inlining candidates whose use has not been found yet ([`Pass::late`]).
    open: usize,
    /// Whether an array form the fusion rules rewrite was met (see [`Outcome::arrays`]).
    arrays: bool,
    /// Whether an `if` or a `case` was met (see [`Outcome::branches`]).
    branches: bool,
    /// Variables left used once by late inlining's `l + l ~> 2 * l` (see [`Pass::late`]).
    once: Vec<VarId>,
    /// The variables inlined as output terms (`Subst::Moved`), per open block, with their types
    /// (for a residual `let _ =` when the use is never reached: see [`Pass::unmoved`]).
    moved: Vec<(VarId, Ty)>,
    /// Variables inlined with a term that may fail (see [`Pass::may_fail`]).
    failing: rustc_hash::FxHashSet<VarId>,
    /// Variables bound to a λ whose body cannot fail: applying one cannot fail.
    total_fns: rustc_hash::FxHashSet<VarId>,
    /// The index and array of each enclosing `build (length xs) (\i -> ..)`: `xs ! i` is in
    /// range there.
    in_range: Vec<(VarId, VarId)>,
    /// [`Pass::fails`]'s answers.
    fail_memo: std::cell::RefCell<rustc_hash::FxHashMap<usize, (Term, bool)>>,
    /// Variables bound to (or inlined with) a `length`: never negative.
    lengths: rustc_hash::FxHashSet<VarId>,
    /// Late-inlining candidates whose term may fail ([`Pass::late`]).
    late_failing: rustc_hash::FxHashSet<VarId>,
    /// How many branches enclose the point late inlining is looking at.
    late_branch: u32,
    /// How many linear terms enclose the point being simplified. Inside one (derivative code)
    /// a Cartesian computation only repeats one the primal made (an index the primal read, a
    /// value it computed), so it may be discarded even if it could fail (theory-notes/09).
    lin: u32,
    /// `cse`: output primitive applications on atoms bound by a `let` on the stack, with the
    /// variable and its stack position (checked at lookup: a closed block's bindings are gone).
    avail: HashMap<String, (Var, usize)>,
    /// Firings per rule, keyed by the address of the rule's name (cheap to hash; equal names
    /// at different addresses are merged at the end).
    fired: HashMap<*const u8, (&'static str, usize)>,
}

/// One step of walking an atom: the forms atoms are made of, in either kind of term.
enum Step<'a, T> {
    /// A variable (`Some`) or a constant (a literal, linear `0`: `None`).
    Leaf(Option<VarId>),
    /// `fst` (`true`) or `snd` of a subterm.
    Proj(bool, &'a T),
    /// Anything else: not an atom.
    Other,
}

/// Terms of either kind, as far as atoms are concerned.
trait Atomic: Sized {
    fn step(&self) -> Step<'_, Self>;
}

impl Atomic for Term {
    fn step(&self) -> Step<'_, Term> {
        match &self.kind {
            TermKind::Var(x) => Step::Leaf(Some(x.id)),
            TermKind::Lit(_) => Step::Leaf(None),
            TermKind::Fst(e) => Step::Proj(true, e),
            TermKind::Snd(e) => Step::Proj(false, e),
            _ => Step::Other,
        }
    }
}

impl Atomic for LTerm {
    fn step(&self) -> Step<'_, LTerm> {
        match &self.kind {
            LTermKind::Var(u) => Step::Leaf(Some(u.id)),
            LTermKind::Zero(_) => Step::Leaf(None),
            LTermKind::Fst(e) => Step::Proj(true, e),
            LTermKind::Snd(e) => Step::Proj(false, e),
            _ => Step::Other,
        }
    }
}

/// Whether a term is an atom: a variable, a constant (a literal; linear `0`), or a projection of
/// an atom. Atoms are the only terms the simplifier copies.
fn atom<T: Atomic>(t: &T) -> bool {
    atom_leaf(t).is_some()
}

/// The variable at the bottom of an atom (`Some(None)` for a constant); `None` for a non-atom.
fn atom_leaf<T: Atomic>(t: &T) -> Option<Option<VarId>> {
    let mut t = t;
    loop {
        match t.step() {
            Step::Leaf(v) => return Some(v),
            Step::Proj(_, e) => t = e,
            Step::Other => return None,
        }
    }
}

fn is_atom(t: &Term) -> bool {
    atom(t)
}

/// An atom, or an index of an atom by an atom, under projections: cheap to evaluate twice.
fn cheap_index(t: &Term) -> bool {
    match &t.kind {
        TermKind::Fst(e) | TermKind::Snd(e) => cheap_index(e),
        TermKind::Index(a, i) => is_atom(a) && is_atom(i),
        _ => is_atom(t),
    }
}

/// Whether two cheap Cartesian terms are equal: the same atom or real literal, or the same atom
/// indexed by the same atom, under the same projections.
fn same_cheap(a: &Term, b: &Term) -> bool {
    match (&a.kind, &b.kind) {
        (TermKind::Index(x, i), TermKind::Index(y, j)) => same_atom(x, y) && same_atom(i, j),
        (TermKind::Fst(x), TermKind::Fst(y)) | (TermKind::Snd(x), TermKind::Snd(y)) => {
            same_cheap(x, y)
        }
        (TermKind::Lit(Lit::Real(x)), TermKind::Lit(Lit::Real(y))) => x.to_bits() == y.to_bits(),
        _ => same_atom(a, b),
    }
}

/// Whether two small linear terms are equal: atoms, indexes of them by atoms, scalings of them by
/// cheap terms, and sums of those. Deliberately shallow: it is asked of every `+`.
fn lsame_cheap(a: &LTerm, b: &LTerm) -> bool {
    use LTermKind as K;
    match (&a.kind, &b.kind) {
        (K::Index(x, i), K::Index(y, j)) => lsame_cheap(x, y) && same_atom(i, j),
        (K::Fst(x), K::Fst(y)) | (K::Snd(x), K::Snd(y)) => lsame_cheap(x, y),
        (K::Scale(t, x), K::Scale(u, y)) => same_cheap(t, u) && lsame_cheap(x, y),
        (K::Plus(x1, x2), K::Plus(y1, y2)) => lsame_cheap(x1, y1) && lsame_cheap(x2, y2),
        // A linear primitive at the same cheap argument (`scaleArray x • v`).
        (K::App(f, x), K::App(g, y)) => match (&f.kind, &g.kind) {
            (TermKind::LinPrim(k, s), TermKind::LinPrim(j, t)) => {
                // Kernels are built per use; one is known by its name and types (as `show`
                // prints it).
                (Rc::ptr_eq(k, j)
                    || (k.name() == j.name()
                        && k.param() == j.param()
                        && k.dom() == j.dom()
                        && k.cod() == j.cod()))
                    && same_cheap(s, t)
                    && lsame_cheap(x, y)
            }
            _ => false,
        },
        _ => same_atom(a, b),
    }
}

fn is_latom(l: &LTerm) -> bool {
    atom(l)
}

/// Whether two terms are the same variable under the same projections.
fn same_atom<T: Atomic>(a: &T, b: &T) -> bool {
    let (mut a, mut b) = (a, b);
    loop {
        match (a.step(), b.step()) {
            (Step::Leaf(Some(x)), Step::Leaf(Some(y))) => return x == y,
            (Step::Proj(p, x), Step::Proj(q, y)) if p == q => (a, b) = (x, y),
            _ => return false,
        }
    }
}

/// The variables occurring under a node (free or bound; ids are unique, so for finding which
/// bindings a term needs the difference does not matter).
fn vars_of(root: Child<'_>) -> rustc_hash::FxHashSet<VarId> {
    let mut out = rustc_hash::FxHashSet::default();
    let mut stack = vec![root];
    while let Some(c) = stack.pop() {
        match c {
            Child::C(t) => {
                if let TermKind::Var(x) = &t.kind {
                    out.insert(x.id);
                }
                stack.extend(t.children());
            }
            Child::L(l) => {
                if let LTermKind::Var(u) = &l.kind {
                    out.insert(u.id);
                }
                stack.extend(l.children());
            }
        }
    }
    out
}

// ----- reusing unchanged nodes -----
//
// A pass rebuilds the term, but where a node comes out with the same form, binders and
// (pointer-equal) children as the input node it was read from, the input node is returned
// instead. A pass that fires nothing (the last one) then allocates nothing and returns its input,
// and a pass that changes little shares the unchanged subterms with its input.

/// Whether two handles are the same node.
#[inline]
fn same(a: &Term, b: &Term) -> bool {
    std::ptr::eq::<Node>(&**a, &**b)
}

#[inline]
fn lsame(a: &LTerm, b: &LTerm) -> bool {
    std::ptr::eq::<LNode>(&**a, &**b)
}

/// Whether two patterns bind the same variables in the same places.
fn same_pat(p: &Pat, q: &Pat) -> bool {
    match (p, q) {
        (Pat::Var(x), Pat::Var(y)) => x.id == y.id,
        (Pat::Wild(_), Pat::Wild(_)) => true,
        (Pat::Pair(a, b), Pat::Pair(c, d)) => same_pat(a, c) && same_pat(b, d),
        _ => false,
    }
}

/// Whether a node of kind `new` would equal `old`: the same form, binders and data, and
/// pointer-equal children. Only kinds built from `old`'s own data are compared, so types are
/// not.
fn same_kind(old: &TermKind, new: &TermKind) -> bool {
    use TermKind as K;
    let s = same;
    match (old, new) {
        (K::Var(x), K::Var(y)) => x.id == y.id,
        (K::Lam(x, b), K::Lam(y, c)) => x.id == y.id && s(b, c),
        (K::App(a, b), K::App(c, d))
        | (K::Pair(a, b), K::Pair(c, d))
        | (K::Map(a, b), K::Map(c, d))
        | (K::Build(a, b), K::Build(c, d))
        | (K::Index(a, b), K::Index(c, d))
        | (K::Replicate(a, b), K::Replicate(c, d))
        | (K::LinApp(a, b), K::LinApp(c, d)) => s(a, c) && s(b, d),
        (K::Loop(a, b, t), K::Loop(c, d, u)) => t == u && s(a, c) && s(b, d),
        (K::Fix(a, _), K::Fix(b, _)) => s(a, b),
        (K::Let(p, a, b), K::Let(q, c, d)) => same_pat(p, q) && s(a, c) && s(b, d),
        (K::Fst(a), K::Fst(b))
        | (K::Snd(a), K::Snd(b))
        | (K::Inl(a, _), K::Inl(b, _))
        | (K::Inr(_, a), K::Inr(_, b))
        | (K::Length(a), K::Length(b)) => s(a, b),
        (K::If(a, b, c), K::If(d, e, f)) | (K::Map2(a, b, c), K::Map2(d, e, f)) => {
            s(a, d) && s(b, e) && s(c, f)
        }
        (K::Case(e, p, a, q, b), K::Case(f, r, c, u, d)) => {
            s(e, f) && same_pat(p, r) && s(a, c) && same_pat(q, u) && s(b, d)
        }
        (K::Prim(o, xs), K::Prim(p, ys)) => {
            o.name() == p.name() && xs.len() == ys.len() && xs.iter().zip(ys).all(|(a, b)| s(a, b))
        }
        (K::Array(_, xs), K::Array(_, ys)) => {
            xs.len() == ys.len() && xs.iter().zip(ys).all(|(a, b)| s(a, b))
        }
        (K::LinLam(v, l), K::LinLam(u, m)) => v.id == u.id && lsame(l, m),
        (K::LinPrim(k, a), K::LinPrim(j, b)) => Rc::ptr_eq(k, j) && s(a, b),
        _ => false,
    }
}

fn lsame_kind(old: &LTermKind, new: &LTermKind) -> bool {
    use LTermKind as K;
    let (s, ls) = (same, lsame);
    match (old, new) {
        (K::Var(x), K::Var(y)) => x.id == y.id,
        (K::Plus(a, b), K::Plus(c, d)) | (K::Pair(a, b), K::Pair(c, d)) => ls(a, c) && ls(b, d),
        (K::Fst(a), K::Fst(b))
        | (K::Snd(a), K::Snd(b))
        | (K::Inl(a, _), K::Inl(b, _))
        | (K::Inr(_, a), K::Inr(_, b))
        | (K::FromLeft(a), K::FromLeft(b))
        | (K::FromRight(a), K::FromRight(b))
        | (K::Sum(a), K::Sum(b)) => ls(a, b),
        (K::App(f, a), K::App(g, b))
        | (K::Copower(f, a), K::Copower(g, b))
        | (K::CopowFold(f, a), K::CopowFold(g, b))
        | (K::Replicate(f, a), K::Replicate(g, b))
        | (K::ZipWith(f, a), K::ZipWith(g, b))
        | (K::Map(f, a), K::Map(g, b))
        | (K::Scale(f, a), K::Scale(g, b)) => s(f, g) && ls(a, b),
        (K::Chain(f, a, r, o), K::Chain(g, b, q, p)) => r == q && o == p && s(f, g) && ls(a, b),
        (K::PowApp(a, f), K::PowApp(b, g)) | (K::Index(a, f), K::Index(b, g)) => {
            ls(a, b) && s(f, g)
        }
        (K::Let(p, t, a), K::Let(q, u, b)) => same_pat(p, q) && s(t, u) && ls(a, b),
        (K::LinLet(u, a, b), K::LinLet(w, c, d)) => u.id == w.id && ls(a, c) && ls(b, d),
        (K::PowLam(x, a), K::PowLam(y, b)) => x.id == y.id && ls(a, b),
        (K::OneHot(n, i, a), K::OneHot(m, j, b)) => s(n, m) && s(i, j) && ls(a, b),
        (K::Build(n, i, a), K::Build(m, j, b)) => s(n, m) && i.id == j.id && ls(a, b),
        (K::Case(e, p, a, q, b), K::Case(f, r, c, u, d)) => {
            s(e, f) && same_pat(p, r) && ls(a, c) && same_pat(q, u) && ls(b, d)
        }
        _ => false,
    }
}

/// A node of kind `kind` read from `old`: `old` itself if unchanged.
pub(super) fn reuse(old: &Term, kind: TermKind) -> Term {
    if same_kind(&old.kind, &kind) {
        old.clone()
    } else {
        Term::new(kind, old.span)
    }
}

pub(super) fn lreuse(old: &LTerm, kind: LTermKind) -> LTerm {
    if lsame_kind(&old.kind, &kind) {
        old.clone()
    } else {
        LTerm::new(kind, old.span)
    }
}

/// The node a smart constructor built from `old`'s simplified children, or `old` itself if
/// that node equals it.
fn keep(old: &Term, new: Term) -> Term {
    if !same(old, &new) && same_kind(&old.kind, &new.kind) {
        old.clone()
    } else {
        new
    }
}

fn lkeep(old: &LTerm, new: LTerm) -> LTerm {
    if !lsame(old, &new) && lsame_kind(&old.kind, &new.kind) {
        old.clone()
    } else {
        new
    }
}

/// `t` with its children rewritten by `r`: `t` itself if they all come back unchanged (so a
/// rewrite that changes little shares the rest of the term).
pub(super) fn map_shared(t: &Term, r: &mut impl Rewrite) -> Term {
    keep(t, t.map_children(r))
}

/// [`map_shared`] for linear terms.
pub(super) fn lmap_shared(l: &LTerm, r: &mut impl Rewrite) -> LTerm {
    lkeep(l, l.map_children(r))
}

/// Whether an input term is a value, so that moving it under a λ cannot duplicate work.
fn is_value(t: &Term) -> bool {
    matches!(
        t.kind,
        TermKind::Lam(..) | TermKind::LinLam(..) | TermKind::Lit(_)
    )
}

fn real_lit(t: &Term) -> Option<f64> {
    match t.kind {
        TermKind::Lit(Lit::Real(x)) => Some(x),
        _ => None,
    }
}

fn lit_value(t: &Term) -> Option<Value> {
    match &t.kind {
        TermKind::Lit(Lit::Real(x)) => Some(Value::Real(*x)),
        TermKind::Lit(Lit::Int(n)) => Some(Value::Int(*n)),
        TermKind::Lit(Lit::Bool(b)) => Some(Value::Bool(*b)),
        TermKind::Lit(Lit::Unit) => Some(Value::Unit),
        _ => None,
    }
}

fn value_lit(v: &Value) -> Option<Lit> {
    Some(match v {
        Value::Real(x) => Lit::Real(*x),
        Value::Int(n) => Lit::Int(*n),
        Value::Bool(b) => Lit::Bool(*b),
        Value::Unit => Lit::Unit,
        _ => return None,
    })
}

/// Replaces a variable by an atom throughout an output term, counting the copies.
struct Replace<'a, 'r> {
    pass: &'a mut Pass<'r>,
    var: VarId,
    by: Child<'a>,
}

impl Rewrite for Replace<'_, '_> {
    fn term(&mut self, t: &Term) -> Term {
        deep(|| match (&t.kind, self.by) {
            (TermKind::Var(x), Child::C(a)) if x.id == self.var => self.pass.copy(a),
            _ => t.map_children(self),
        })
    }
    fn linear(&mut self, l: &LTerm) -> LTerm {
        deep(|| match (&l.kind, self.by) {
            (LTermKind::Var(u), Child::L(a)) if u.id == self.var => self.pass.lcopy(a),
            _ => l.map_children(self),
        })
    }
}

impl super::strict::Known for Pass<'_> {
    fn total_fn(&self, f: VarId) -> bool {
        self.total_fns.contains(&f)
    }
    fn in_range(&self, xs: VarId, i: VarId) -> bool {
        self.in_range.iter().any(|&(j, ys)| j == i && ys == xs)
    }
    fn length(&self, n: VarId) -> bool {
        self.lengths.contains(&n)
    }
    fn failing(&self, x: VarId) -> bool {
        self.failing.contains(&x)
    }
}

impl Pass<'_> {
    // ----- per-variable state -----

    /// The occurrences in the input of a variable bound there.
    #[inline]
    fn occ(&self, v: VarId) -> Option<Occ> {
        self.vars.get(v).map(|s| s.occ).filter(Occ::bound)
    }

    #[inline]
    fn uses_add(&mut self, v: VarId, delta: i32) {
        let n = &mut self.vars.slot(v).uses;
        *n = n.saturating_add_signed(delta);
    }

    #[inline]
    fn subst(&self, v: VarId) -> Option<&Subst<Term>> {
        match self.vars.get(v).map(|s| &s.slot) {
            Some(Slot::Subst(s)) => Some(s),
            _ => None,
        }
    }

    #[inline]
    fn lsubst(&self, v: VarId) -> Option<&Subst<LTerm>> {
        match self.vars.get(v).map(|s| &s.slot) {
            Some(Slot::LSubst(s)) => Some(s),
            _ => None,
        }
    }

    fn set_slot(&mut self, v: VarId, slot: Slot) {
        self.vars.slot(v).slot = slot;
    }

    /// Takes the substitution of a Cartesian variable (leaving none).
    fn take_subst(&mut self, v: VarId) -> Option<Subst<Term>> {
        let state = self.vars.get_mut(v)?;
        match std::mem::take(&mut state.slot) {
            Slot::Subst(s) => Some(s),
            other => {
                state.slot = other;
                None
            }
        }
    }

    fn take_lsubst(&mut self, v: VarId) -> Option<Subst<LTerm>> {
        let state = self.vars.get_mut(v)?;
        match std::mem::take(&mut state.slot) {
            Slot::LSubst(s) => Some(s),
            other => {
                state.slot = other;
                None
            }
        }
    }

    /// A rule whose other conditions held did not fire because [`types`] gave up on a type
    /// (`missed`): a later pass, on a smaller term, might find it.
    fn untyped(&mut self, missed: bool) {
        self.dirty |= missed;
    }

    fn fire(&mut self, rule: &'static str) {
        self.fired.entry(rule.as_ptr()).or_insert((rule, 0)).1 += 1;
    }

    // ----- use counts -----

    /// Adds `delta` to the use count of every variable occurrence under `root`.
    fn adjust(&mut self, root: Child<'_>, delta: i32) {
        // Atoms (nearly every call: copies and drops of atoms) need no stack.
        let leaf = match root {
            Child::C(t) => atom_leaf(t),
            Child::L(l) => atom_leaf(l),
        };
        match leaf {
            Some(Some(id)) => return self.uses_add(id, delta),
            Some(None) => return,
            None => {}
        }
        let mut stack = vec![root];
        while let Some(c) = stack.pop() {
            let id = match c {
                Child::C(t) => {
                    stack.extend(t.children());
                    match &t.kind {
                        TermKind::Var(x) => Some(x.id),
                        _ => None,
                    }
                }
                Child::L(l) => {
                    stack.extend(l.children());
                    match &l.kind {
                        LTermKind::Var(u) => Some(u.id),
                        _ => None,
                    }
                }
            };
            if let Some(id) = id {
                self.uses_add(id, delta);
            }
        }
    }

    /// A copy of an output term (an atom, in practice), counted.
    fn copy(&mut self, t: &Term) -> Term {
        self.adjust(Child::C(t), 1);
        t.clone()
    }

    fn lcopy(&mut self, l: &LTerm) -> LTerm {
        self.adjust(Child::L(l), 1);
        l.clone()
    }

    /// Forgets an output term that will not appear in the result.
    fn drop(&mut self, t: &Term) {
        self.adjust(Child::C(t), -1);
    }

    fn ldrop(&mut self, l: &LTerm) {
        self.adjust(Child::L(l), -1);
    }

    /// Whether `t` may fail when evaluated ([`super::strict`]), counting a variable inlined
    /// with a term that may fail (its term runs where the variable is used) as failing too.
    fn may_fail(&self, t: &Term) -> bool {
        self.lin == 0 && self.fails(Child::C(t))
    }

    /// [`Self::may_fail`] for the Cartesian parts of a linear term.
    fn lmay_fail(&self, l: &LTerm) -> bool {
        self.lin == 0 && self.fails(Child::L(l))
    }

    /// [`super::strict::fails`], remembering the answer for each Cartesian node (a pass asks
    /// about terms that contain the terms it asked about before: `x + x + .. + x` would cost
    /// O(n²)). What a node's answer depends on (the variables bound to failing terms, to total
    /// λs, to lengths, the enclosing builds) is fixed before any term in its scope is asked
    /// about, so the answers stay true; the table holds the nodes, so addresses are not reused.
    fn fails(&self, c: Child<'_>) -> bool {
        deep(|| {
            let key = match c {
                Child::C(t) => {
                    let key = &**t as *const crate::target::term::Node as usize;
                    if let Some((_, r)) = self.fail_memo.borrow().get(&key) {
                        return *r;
                    }
                    Some((key, t.clone()))
                }
                Child::L(_) => None,
            };
            let r = match super::strict::step(c, self) {
                super::strict::Step::Fails => true,
                super::strict::Step::Parts(ps) => ps.into_iter().any(|p| self.fails(p)),
            };
            if let Some((key, t)) = key {
                self.fail_memo.borrow_mut().insert(key, (t, r));
            }
            r
        })
    }

    fn used(&self, v: &Var) -> bool {
        self.vars.get(v.id).is_some_and(|s| s.uses > 0)
    }

    fn var(&mut self, v: &Var, span: Span) -> Term {
        self.uses_add(v.id, 1);
        Term::new(TermKind::Var(v.clone()), span)
    }

    fn lvar_out(&mut self, v: &Var, span: Span) -> LTerm {
        self.uses_add(v.id, 1);
        LTerm::new(LTermKind::Var(v.clone()), span)
    }

    // ----- blocks -----

    fn block(&mut self, t: &Term) -> Term {
        let (start, moved) = (self.stack.len(), self.moved.len());
        let core = self.term(t);
        self.unmoved(moved);
        self.wrap(start, core)
    }

    fn lblock(&mut self, l: &LTerm) -> LTerm {
        self.lin += 1;
        let (start, moved) = (self.stack.len(), self.moved.len());
        let core = self.linear(l);
        self.unmoved(moved);
        let out = self.lwrap(start, core);
        self.lin -= 1;
        out
    }

    /// Forgets the terms of the variables inlined (`Subst::Moved`) since `mark` whose use was
    /// never reached (it was in input code discarded unsimplified, such as a dead binding): their
    /// uses no longer count, so what only they used is dead when the block closes.
    fn unmoved(&mut self, mark: usize) {
        while self.moved.len() > mark {
            let (v, ty) = self.moved.pop().expect("longer than the mark");
            if let Some(Subst::Moved(e)) = self.take_subst(v) {
                if self.may_fail(&e) {
                    // Strict: it still runs where it was bound (theory-notes/09).
                    self.stack
                        .push(Binding::Cart(Pat::Wild(ty), e.clone(), e.span, Orig::None));
                } else {
                    self.drop(&e);
                }
            } else if let Some(Subst::Moved(l)) = self.take_lsubst(v) {
                self.ldrop(&l);
            }
        }
    }

    /// The pattern with unused variables made `_`, or `None` if nothing of it is used.
    fn live(&mut self, p: Pat) -> Option<Pat> {
        if !self.rules.dead_let {
            return Some(p);
        }
        self.live_or_dead(p).ok()
    }

    /// [`Self::live`], giving back a dead pattern (for its type).
    fn live_or_dead(&mut self, mut p: Pat) -> Result<Pat, Pat> {
        deep(|| match &mut p {
            Pat::Var(x) => {
                if self.used(x) {
                    Ok(p)
                } else {
                    self.fire("deadLet");
                    Err(p)
                }
            }
            Pat::Wild(_) => Err(p),
            Pat::Pair(a, b) => {
                // (Taken out of their boxes and put back: `Pat` drops under `deep`, so it
                // cannot be destructured by value.)
                let take = |q: &mut Box<Pat>| std::mem::replace(&mut **q, Pat::Wild(Ty::Unit));
                let (a2, b2) = (self.live_or_dead(take(a)), self.live_or_dead(take(b)));
                let dead = a2.is_err() && b2.is_err();
                **a = a2.unwrap_or_else(|d| Pat::Wild(d.ty()));
                **b = b2.unwrap_or_else(|d| Pat::Wild(d.ty()));
                if dead { Err(p) } else { Ok(p) }
            }
        })
    }

    /// Closes the block opened at `start` around its simplified `core`: drops the bindings
    /// nothing uses (innermost first, so a chain of dead bindings goes at once), inlines those
    /// that turned out to be used once ([`Self::late`]), and wraps the rest around the core.
    fn wrap(&mut self, start: usize, core: Term) -> Term {
        let Core::C(mut body) = self.close(start, Core::C(core)) else {
            unreachable!("close returns the kind of core it is given")
        };
        while self.stack.len() > start {
            match self.stack.pop() {
                Some(Binding::Gone) => {}
                Some(Binding::Cart(p, e, span, orig)) => {
                    body = match orig {
                        Orig::C(o) => reuse(&o, TermKind::Let(p, e, body)),
                        _ => Term::new(TermKind::Let(p, e, body), span),
                    }
                }
                Some(Binding::Lin(..)) | None => {
                    panic!("internal error: a linear binding outside a linear term")
                }
            }
        }
        body
    }

    fn lwrap(&mut self, start: usize, core: LTerm) -> LTerm {
        let Core::L(mut body) = self.close(start, Core::L(core)) else {
            unreachable!("close returns the kind of core it is given")
        };
        while self.stack.len() > start {
            match self.stack.pop().expect("the stack is longer than start") {
                Binding::Gone => {}
                Binding::Cart(p, e, span, orig) => {
                    body = match orig {
                        Orig::L(o) => lreuse(&o, LTermKind::Let(p, e, body)),
                        _ => LTerm::new(LTermKind::Let(p, e, body), span),
                    }
                }
                Binding::Lin(u, l, span, orig) => {
                    body = match orig {
                        Orig::L(o) => lreuse(&o, LTermKind::LinLet(u, l, body)),
                        _ => LTerm::new(LTermKind::LinLet(u, l, body), span),
                    }
                }
            }
        }
        body
    }

    /// The dead-binding half of closing a block: each binding of the block nothing uses becomes
    /// [`Binding::Gone`] (innermost first: dropping one may leave an outer one unused), and the
    /// unused variables of the others' patterns become `_`. Then [`Self::late`].
    fn close(&mut self, start: usize, core: Core) -> Core {
        for i in (start..self.stack.len()).rev() {
            let b = std::mem::replace(&mut self.stack[i], Binding::Gone);
            self.stack[i] = match b {
                Binding::Cart(p, e, span, orig) if self.rules.dead_let => {
                    let binds = !p.vars().is_empty();
                    match self.live_or_dead(p) {
                        Ok(p) => Binding::Cart(p, e, span, orig),
                        // Strict: a computation that may fail stays, bound to nothing. Found
                        // dead only here, on the way out (its uses went in this pass): the
                        // next pass, seeing `_` from the start, may know more about it (an
                        // index in range) and drop it.
                        Err(dead) if self.may_fail(&e) => {
                            self.dirty |= binds;
                            Binding::Cart(Pat::Wild(dead.ty()), e, span, Orig::None)
                        }
                        Err(_) => {
                            self.drop(&e);
                            Binding::Gone
                        }
                    }
                }
                b @ Binding::Cart(..) => b,
                Binding::Lin(u, l, span, orig) => {
                    if self.rules.dead_let && !self.used(&u) && !self.lmay_fail(&l) {
                        self.fire("deadLet");
                        self.ldrop(&l);
                        Binding::Gone
                    } else {
                        Binding::Lin(u, l, span, orig)
                    }
                }
                Binding::Gone => Binding::Gone,
            };
        }
        self.late(start, core)
    }

    /// Pushes the leading bindings of an output term and returns the rest (its bindings join
    /// the current block; their uses are already counted).
    fn peel(&mut self, t: Term) -> Term {
        let mut t = t;
        while let TermKind::Let(p, e, b) = &t.kind {
            let orig = Orig::C(t.clone());
            self.stack
                .push(Binding::Cart(p.clone(), e.clone(), t.span, orig));
            t = b.clone();
        }
        t
    }

    fn lpeel(&mut self, l: LTerm) -> LTerm {
        let mut l = l;
        loop {
            let next = match &l.kind {
                LTermKind::Let(p, e, b) => {
                    let orig = Orig::L(l.clone());
                    self.stack
                        .push(Binding::Cart(p.clone(), e.clone(), l.span, orig));
                    b.clone()
                }
                LTermKind::LinLet(u, a, b) => {
                    let orig = Orig::L(l.clone());
                    self.stack
                        .push(Binding::Lin(u.clone(), a.clone(), l.span, orig));
                    b.clone()
                }
                _ => return l,
            };
            l = next;
        }
    }

    /// Simplifies a child in a strict position: its bindings float into the current block when
    /// `on`, firing `rule` if there were any; otherwise it is a block of its own.
    fn float(&mut self, t: &Term, on: bool, rule: &'static str) -> Term {
        if !on {
            return self.block(t);
        }
        let n = self.stack.len();
        let r = self.term(t);
        if self.stack.len() > n {
            self.fire(rule);
        }
        r
    }

    fn lfloat(&mut self, l: &LTerm, on: bool, rule: &'static str) -> LTerm {
        if !on {
            return self.lblock(l);
        }
        let n = self.stack.len();
        let r = self.linear(l);
        if self.stack.len() > n {
            self.fire(rule);
        }
        r
    }

    /// A Cartesian child in an ordinary strict position.
    fn c(&mut self, t: &Term) -> Term {
        self.float(t, self.rules.let_float, "letFloat")
    }

    /// A linear child in an ordinary strict position.
    fn l(&mut self, l: &LTerm) -> LTerm {
        self.lfloat(l, self.rules.let_float, "letFloat")
    }

    // ----- bindings -----

    /// An input `let p = e` (its body follows in the same block).
    fn let_(&mut self, p: &Pat, e: &Term, span: Span) {
        deep(|| {
            // letRotate and letPairSplit on the input, before anything is simplified: the
            // components of a pair (typically an AD rule's `(primal, \v ⊸ ...)`) are then bound
            // as input terms, so a λ̲ used once is inlined unsimplified and β-reduced where it is
            // used, and its body is simplified exactly once.
            let mut e = e;
            while self.rules.let_rotate
                && let TermKind::Let(q, a, b) = &e.kind
            {
                self.fire("letRotate");
                self.let_(q, a, e.span);
                e = b;
            }
            if self.rules.let_pair_split
                && let (Pat::Pair(p1, p2), TermKind::Pair(a, b)) = (p, &e.kind)
            {
                self.fire("letPairSplit");
                self.let_(p1, a, span);
                self.let_(p2, b, span);
                return;
            }
            if self.rules.dead_let && self.unused(p) && !self.may_fail(e) {
                self.fire("deadLet");
                return;
            }
            if let Pat::Var(x) = p
                && self.rules.let_inline
                && self
                    .occ(x.id)
                    .is_some_and(|o| o.inline_once(is_value(e), || !self.may_fail(e)))
            {
                self.fire("letInline");
                if self.may_fail(e) {
                    self.failing.insert(x.id);
                }
                if matches!(e.kind, TermKind::Length(_)) {
                    self.lengths.insert(x.id);
                }
                self.set_slot(x.id, Slot::Subst(Subst::Input(e.clone())));
                return;
            }
            let e2 = self.float(e, self.rules.let_rotate, "letRotate");
            self.bind(p, e2, span);
        })
    }

    /// Whether no variable of an input pattern occurs (per the occurrence analysis).
    fn unused(&self, p: &Pat) -> bool {
        deep(|| match p {
            Pat::Var(x) => self.occ(x.id).is_some_and(|o| o.count == 0),
            Pat::Wild(_) => true,
            Pat::Pair(a, b) => self.unused(a) && self.unused(b),
        })
    }

    /// Binds a pattern to an output term.
    fn bind(&mut self, p: &Pat, e: Term, span: Span) {
        deep(|| match p {
            Pat::Wild(_) if self.rules.dead_let && !self.may_fail(&e) => {
                self.fire("deadLet");
                self.drop(&e);
            }
            Pat::Var(x) => self.bind_var(x, e, span),
            Pat::Pair(p1, p2) if self.rules.let_pair_split => {
                if let TermKind::Pair(a, b) = &e.kind {
                    self.fire("letPairSplit");
                    self.bind(p1, a.clone(), span);
                    self.bind(p2, b.clone(), span);
                } else if let Some((a, b)) = self.known_pair(&e) {
                    self.fire("letPairSplit");
                    self.drop(&e);
                    let (a, b) = (self.copy(&a), self.copy(&b));
                    self.bind(p1, a, span);
                    self.bind(p2, b, span);
                } else if self.rules.let_inline && is_atom(&e) {
                    self.fire("letPairSplit");
                    let e1 = self.copy(&e);
                    let a = self.fst(e1, span);
                    let b = self.snd(e, span);
                    self.bind(p1, a, span);
                    self.bind(p2, b, span);
                } else {
                    self.stack
                        .push(Binding::Cart(p.clone(), e, span, Orig::None));
                }
            }
            _ => self
                .stack
                .push(Binding::Cart(p.clone(), e, span, Orig::None)),
        })
    }

    fn known_pair(&self, e: &Term) -> Option<(Term, Term)> {
        match &e.kind {
            TermKind::Var(x) if self.rules.pair_proj => {
                match self.vars.get(x.id).map(|s| &s.slot) {
                    Some(Slot::Known(a, b)) => Some((a.clone(), b.clone())),
                    _ => None,
                }
            }
            _ => None,
        }
    }

    fn bind_var(&mut self, x: &Var, e: Term, span: Span) {
        if matches!(e.kind, TermKind::Length(_)) {
            self.lengths.insert(x.id);
        }
        if self.rules.let_inline {
            if is_atom(&e) {
                self.fire("letInline");
                self.drop(&e);
                self.set_slot(x.id, Slot::Subst(Subst::Cheap(e)));
                return;
            }
            if self
                .occ(x.id)
                .is_some_and(|o| o.inline_once(is_value(&e), || !self.may_fail(&e)))
            {
                self.fire("letInline");
                if self.may_fail(&e) {
                    self.failing.insert(x.id);
                }
                self.set_slot(x.id, Slot::Subst(Subst::Moved(e)));
                self.moved.push((x.id, x.ty.clone()));
                return;
            }
        }
        let comps = || x.ty.as_prod();
        if self.rules.let_pair_split
            && let TermKind::Pair(a, b) = &e.kind
            && (is_atom(a) && is_atom(b) || comps().is_some())
        {
            // Non-atomic components get variables of their own; the occurrence analysis keeps
            // `letInline` from putting them back (see `Occ::pair_component`), so the split is
            // stable and not counted as a firing. (Their types are looked up only then.)
            let a2 = match comps() {
                Some((ta, _)) if !is_atom(a) => self.atomize(a, &x.name, &ta.clone(), span),
                _ => a.clone(),
            };
            let b2 = match comps() {
                Some((_, tb)) if !is_atom(b) => self.atomize(b, &x.name, &tb.clone(), span),
                _ => b.clone(),
            };
            self.set_slot(x.id, Slot::Known(a2.clone(), b2.clone()));
            let e = Term::new(TermKind::Pair(a2, b2), e.span);
            self.stack
                .push(Binding::Cart(Pat::Var(x.clone()), e, span, Orig::None));
            return;
        }
        if self.rules.let_lam_pair_split
            && self
                .occ(x.id)
                .is_some_and(|o| o.count > 0 && o.applied == o.count)
            && let TermKind::Lam(y, body) = &e.kind
            && let Some((_, tab)) = x.ty.as_fun()
            && let Some((ta, tb)) = tab.as_prod()
            // Strict: a call `fst (f t)` then runs only the first half's work; if the other
            // half may fail, the call must still fail (theory-notes/09).
            && !self.may_fail(body)
            && let Some((l1, l2)) = self.split_lambda(y, body)
        {
            self.fire("letLamPairSplit");
            // Splitting drops the bindings neither half needs from a body already simplified.
            self.dirty = true;
            let f1 = Var::fresh(x.name.clone(), Ty::fun(y.ty.clone(), ta.clone()));
            let f2 = Var::fresh(format!("{}'", x.name), Ty::fun(y.ty.clone(), tb.clone()));
            self.stack
                .push(Binding::Cart(Pat::Var(f1.clone()), l1, span, Orig::None));
            self.stack
                .push(Binding::Cart(Pat::Var(f2.clone()), l2, span, Orig::None));
            // (Halves of a body that cannot fail.)
            self.total_fns.extend([f1.id, f2.id]);
            self.lam_split.insert(x.id, (f1, f2));
            return;
        }
        if self.rules.map_pair_split
            && let TermKind::Map(f, xs) = &e.kind
            && let TermKind::Lam(y, body) = &f.kind
            && let Some((ta, tb)) = x.ty.as_array().and_then(Ty::as_prod)
            && self
                .occ(x.id)
                .is_some_and(|o| o.count > 0 && o.map_proj == o.count)
            && let Some((l1, l2)) = self.split_lambda(y, body)
        {
            self.fire("mapPairSplit");
            self.dirty = true;
            let r1 = Var::fresh(x.name.clone(), Ty::array(ta.clone()));
            let r2 = Var::fresh(x.name.clone(), Ty::array(tb.clone()));
            let xs1 = self.atomize(xs, &"xs".into(), &Ty::array(y.ty.clone()), span);
            let xs2 = self.copy(&xs1);
            let m1 = Term::new(TermKind::Map(l1, xs1), e.span);
            let m2 = Term::new(TermKind::Map(l2, xs2), e.span);
            self.stack
                .push(Binding::Cart(Pat::Var(r1.clone()), m1, span, Orig::None));
            self.stack
                .push(Binding::Cart(Pat::Var(r2.clone()), m2, span, Orig::None));
            self.map_split.insert(x.id, (r1, r2));
            return;
        }
        if let Some(y) = self.push_var(x, e, span) {
            // `x` is `y`: its occurrences read `y`.
            self.set_slot(
                x.id,
                Slot::Subst(Subst::Cheap(Term::new(TermKind::Var(y), span))),
            );
        }
    }

    /// Pushes the binding `x = e`, making `e` available to `cse` if it is a primitive on atoms.
    /// If a `let` on the stack already binds the same application, nothing is pushed: `e` is
    /// dropped and that binding's variable returned (`cse`), for the caller to use instead.
    fn push_var(&mut self, x: &Var, e: Term, span: Span) -> Option<Var> {
        if self.rules.cse
            && let TermKind::Prim(op, args) = &e.kind
            && let Some(k) = prim_key(op, args)
        {
            if let Some(y) = self.available(&k) {
                self.fire("cse");
                self.drop(&e);
                return Some(y);
            }
            self.avail.insert(k, (x.clone(), self.stack.len()));
        }
        if let TermKind::Lam(_, body) = &e.kind
            && !self.may_fail(body)
        {
            self.total_fns.insert(x.id);
        }
        self.stack
            .push(Binding::Cart(Pat::Var(x.clone()), e, span, Orig::None));
        None
    }

    /// `cse`: the variable of a `let` on the stack that binds the application with this key.
    fn available(&self, key: &str) -> Option<Var> {
        let (x, at) = self.avail.get(key)?;
        match self.stack.get(*at) {
            Some(Binding::Cart(Pat::Var(y), ..)) if y.id == x.id => Some(x.clone()),
            _ => None,
        }
    }

    /// Splits `\y -> let bs in (a, b)` into `\y -> let bs_a in a` and
    /// `\y' -> (let bs_b in b)[y'/y]` (a fresh binder for the second, so binders stay unique),
    /// where `bs_a` are the bindings `a` needs and `bs_b` those `b` needs. `None` if the body is
    /// not of that form or a binding is needed by both halves (splitting would compute it
    /// twice).
    fn split_lambda(&mut self, y: &Var, body: &Term) -> Option<(Term, Term)> {
        let mut bindings = Vec::new();
        let mut core = body;
        while let TermKind::Let(p, e, rest) = &core.kind {
            bindings.push((p, e, core.span));
            core = rest;
        }
        let TermKind::Pair(a, b) = &core.kind else {
            return None;
        };
        let (mut need_a, mut need_b) = (vars_of(Child::C(a)), vars_of(Child::C(b)));
        let mut side: Vec<Option<bool>> = vec![None; bindings.len()];
        for (k, (p, e, _)) in bindings.iter().enumerate().rev() {
            let vars = p.vars();
            let in_a = vars.iter().any(|v| need_a.contains(&v.id));
            let in_b = vars.iter().any(|v| need_b.contains(&v.id));
            match (in_a, in_b) {
                (true, true) => return None,
                (true, false) => need_a.extend(vars_of(Child::C(e))),
                (false, true) => need_b.extend(vars_of(Child::C(e))),
                (false, false) => {}
            }
            side[k] = in_a.then_some(true).or(in_b.then_some(false));
        }
        let wrap = |first: bool, core: &Term| {
            bindings
                .iter()
                .zip(&side)
                .rev()
                .fold(core.clone(), |acc, ((p, e, span), s)| {
                    if *s == Some(first) {
                        Term::new(TermKind::Let((*p).clone(), (*e).clone(), acc), *span)
                    } else {
                        acc
                    }
                })
        };
        // Strict: the bindings neither half needs are dropped; not if one may fail.
        if bindings
            .iter()
            .zip(&side)
            .any(|((_, e, _), s)| s.is_none() && self.may_fail(e))
        {
            return None;
        }
        let (body_a, body_b) = (wrap(true, a), wrap(false, b));
        for ((_, e, _), s) in bindings.iter().zip(&side) {
            if s.is_none() {
                self.drop(e);
            }
        }
        let y2 = Var::fresh(y.name.clone(), y.ty.clone());
        let y2v = self.var(&y2, Span::default());
        let body_b = Replace {
            pass: self,
            var: y.id,
            by: Child::C(&y2v),
        }
        .term(&body_b);
        self.drop(&y2v);
        Some((Term::lam(y, body_a), Term::lam(&y2, body_b)))
    }

    /// The term itself if it is an atom; otherwise a fresh variable bound to it. (Under
    /// [`deep`]: binding a nested pair recurses through `bind_var` as deep as the pair.)
    fn atomize(&mut self, t: &Term, name: &Rc<str>, ty: &Ty, span: Span) -> Term {
        deep(|| self.atomize_(t, name, ty, span))
    }

    fn atomize_(&mut self, t: &Term, name: &Rc<str>, ty: &Ty, span: Span) -> Term {
        if is_atom(t) {
            return t.clone();
        }
        let v = Var::fresh(name.clone(), ty.clone());
        if let TermKind::Pair(..) = t.kind {
            // A nested pair is bound as a known pair of atoms in turn.
            self.bind_var(&v, t.clone(), span);
        } else {
            // Bound as it is (not split by `bind_var`: the result must be an atom).
            if let Some(y) = self.push_var(&v, t.clone(), span) {
                return self.var(&y, span);
            }
        }
        self.var(&v, span)
    }

    /// [`Pass::atomize`] for linear terms (under [`deep`]: `bind_lin` recurses through it).
    fn latomize(&mut self, l: &LTerm, name: &Rc<str>, ty: &LTy, span: Span) -> LTerm {
        deep(|| self.latomize_(l, name, ty, span))
    }

    fn latomize_(&mut self, l: &LTerm, name: &Rc<str>, ty: &LTy, span: Span) -> LTerm {
        if is_latom(l) {
            return l.clone();
        }
        let v = Var::linear(name.clone(), ty.clone());
        self.bind_lin(&v, l.clone(), span);
        self.lvar_out(&v, span)
    }

    /// An input linear `let u = l` (its body follows in the same block).
    fn lin_let_(&mut self, u: &Var, l: &LTerm, span: Span) {
        let occ = self.occ(u.id);
        if self.rules.dead_let && occ.is_some_and(|o| o.count == 0) && !self.lmay_fail(l) {
            self.fire("deadLet");
            return;
        }
        if self.rules.let_inline && occ.is_some_and(|o| o.inline_once(false, || !self.lmay_fail(l)))
        {
            self.fire("letInline");
            self.set_slot(u.id, Slot::LSubst(Subst::Input(l.clone())));
            return;
        }
        let l2 = self.lfloat(l, self.rules.let_rotate, "letRotate");
        self.bind_lin(u, l2, span);
    }

    fn bind_lin(&mut self, u: &Var, l: LTerm, span: Span) {
        if self.rules.let_inline {
            if is_latom(&l) {
                self.fire("letInline");
                self.ldrop(&l);
                self.set_slot(u.id, Slot::LSubst(Subst::Cheap(l)));
                return;
            }
            if self
                .occ(u.id)
                .is_some_and(|o| o.inline_once(false, || !self.lmay_fail(&l)))
            {
                self.fire("letInline");
                self.set_slot(u.id, Slot::LSubst(Subst::Moved(l)));
                self.moved.push((u.id, u.ty.clone()));
                return;
            }
        }
        // The components' types are looked up only for a component that needs a variable (a
        // type is a pointer away: on a large term, a cache miss).
        let comps = || u.lin_ty().and_then(LTy::as_prod);
        if self.rules.let_pair_split
            && let LTermKind::Pair(a, b) = &l.kind
            && (is_latom(a) && is_latom(b) || comps().is_some())
        {
            let a2 = match comps() {
                Some((ta, _)) if !is_latom(a) => self.latomize(a, &u.name, &ta.clone(), span),
                _ => a.clone(),
            };
            let b2 = match comps() {
                // Equal cheap components share one variable: the product rule's `(x • v, x • v)`
                // (of `y * y`) is summed to `u + u ~> 2 * u` here, not found equal only when
                // late inlining puts both back (and `u`'s operand left used once for a next pass).
                Some(_) if !is_latom(b) && self.rules.algebra && lsame_cheap(a, b) => {
                    self.ldrop(b);
                    self.lcopy(&a2)
                }
                Some((_, tb)) if !is_latom(b) => self.latomize(b, &u.name, &tb.clone(), span),
                _ => b.clone(),
            };
            self.set_slot(u.id, Slot::LKnown(a2.clone(), b2.clone()));
            let l = LTerm::new(LTermKind::Pair(a2, b2), l.span);
            self.stack
                .push(Binding::Lin(u.clone(), l, span, Orig::None));
            return;
        }
        self.stack
            .push(Binding::Lin(u.clone(), l, span, Orig::None));
    }

    // ----- Cartesian terms -----

    fn term(&mut self, t: &Term) -> Term {
        deep(|| self.term_(t))
    }

    fn term_(&mut self, t: &Term) -> Term {
        let mut t = t;
        while let TermKind::Let(p, e, b) = &t.kind {
            let n = self.stack.len();
            self.let_(p, e, t.span);
            self.mark(n, p, e, || Orig::C(t.clone()));
            t = b;
        }
        let out = self.core(t);
        keep(t, out)
    }

    /// Notes the input `let` node a binding was read from, if `let_` pushed exactly that
    /// binding (same pattern, bound term unchanged), so that `wrap` can reuse the node.
    fn mark(&mut self, n: usize, p: &Pat, e: &Term, orig: impl FnOnce() -> Orig) {
        if self.stack.len() == n + 1
            && let Some(Binding::Cart(q, e2, _, slot)) = self.stack.last_mut()
            && same(e2, e)
            && same_pat(q, p)
        {
            *slot = orig();
        }
    }

    /// [`Self::mark`] for a linear `let`.
    fn lmark(&mut self, n: usize, u: &Var, a: &LTerm, orig: &LTerm) {
        if self.stack.len() == n + 1
            && let Some(Binding::Lin(w, a2, _, slot)) = self.stack.last_mut()
            && lsame(a2, a)
            && w.id == u.id
        {
            *slot = Orig::L(orig.clone());
        }
    }

    /// A Cartesian term that is not a `let`.
    fn core(&mut self, t: &Term) -> Term {
        use TermKind as K;
        let span = t.span;
        let mk = |k: TermKind| reuse(t, k);
        match &t.kind {
            K::Let(..) => unreachable!("lets are consumed above"),
            K::Var(x) => self.cvar(x, Some(t), span),
            K::Lit(_) => t.clone(),
            K::Lam(x, b) => mk(K::Lam(x.clone(), self.block(b))),
            K::App(f, a) => {
                if self.rules.lam_app_let
                    && let Some(lam) = self.input_lambda(f)
                    && let K::Lam(x, body) = &lam.kind
                {
                    self.fire("lamAppLet");
                    self.let_(&Pat::Var(x.clone()), a, span);
                    return self.term(body);
                }
                if let K::Var(g) = &f.kind
                    && self.subst(g.id).is_none()
                    && let Some((f1, f2)) = self.lam_split.get(&g.id).cloned()
                {
                    self.fire("letLamPairSplit");
                    let a2 = self.c(a);
                    let ty = f1.ty.as_fun().map(|(d, _)| d.clone()).unwrap_or(Ty::Unit);
                    let a1 = self.atomize(&a2, &"a".into(), &ty, span);
                    let a2 = self.copy(&a1);
                    let l = Term::app(self.var(&f1, span), a1);
                    let r = Term::app(self.var(&f2, span), a2);
                    return self.pair(l, r, span);
                }
                let f2 = self.c(f);
                let a2 = self.c(a);
                self.app(f2, a2, span)
            }
            K::Pair(a, b) => {
                let a2 = self.c(a);
                let b2 = self.c(b);
                self.pair(a2, b2, span)
            }
            K::Fst(e) => {
                let e2 = self.float(e, self.rules.let_proj, "letProj");
                self.fst(e2, span)
            }
            K::Snd(e) => {
                let e2 = self.float(e, self.rules.let_proj, "letProj");
                self.snd(e2, span)
            }
            K::If(c, a, b) => {
                self.branches = true;
                let c2 = self.c(c);
                if self.rules.case_known
                    && let K::Lit(Lit::Bool(v)) = c2.kind
                {
                    self.fire("caseKnown");
                    return self.term(if v { a } else { b });
                }
                let (a2, b2) = (self.block(a), self.block(b));
                mk(K::If(c2, a2, b2))
            }
            K::Inl(e, ty) => mk(K::Inl(self.c(e), ty.clone())),
            K::Inr(ty, e) => mk(K::Inr(ty.clone(), self.c(e))),
            K::Case(e, p, a, q, b) => {
                self.branches = true;
                let e2 = self.c(e);
                if self.rules.case_known {
                    let known = match &e2.kind {
                        K::Inl(v, _) => Some((p, v.clone(), a)),
                        K::Inr(_, v) => Some((q, v.clone(), b)),
                        _ => None,
                    };
                    if let Some((pat, v, branch)) = known {
                        self.fire("caseKnown");
                        self.bind(pat, v, span);
                        return self.term(branch);
                    }
                }
                let a2 = self.block(a);
                let b2 = self.block(b);
                let p2 = self.live(p.clone()).unwrap_or_else(|| Pat::Wild(p.ty()));
                let q2 = self.live(q.clone()).unwrap_or_else(|| Pat::Wild(q.ty()));
                mk(K::Case(e2, p2, a2, q2, b2))
            }
            K::Prim(op, args) => {
                let args2 = args.iter().map(|a| self.c(a)).collect();
                self.prim(op, args2, span)
            }
            K::Array(ty, xs) => mk(K::Array(ty.clone(), xs.iter().map(|x| self.c(x)).collect())),
            K::Map(f, xs) => {
                self.arrays = true;
                if let K::Var(x) = &xs.kind
                    && self.subst(x.id).is_none()
                    && let Some(first) = projection(f)
                    && let Some((r1, r2)) = self.map_split.get(&x.id).cloned()
                {
                    self.fire("mapPairSplit");
                    return self.var(if first { &r1 } else { &r2 }, span);
                }
                let f2 = self.c(f);
                mk(K::Map(f2, self.c(xs)))
            }
            K::Map2(f, xs, ys) => {
                self.arrays = true;
                let f2 = self.c(f);
                let xs2 = self.c(xs);
                mk(K::Map2(f2, xs2, self.c(ys)))
            }
            K::Build(n, f) => {
                self.arrays = true;
                let n2 = self.c(n);
                // In `build (length xs) (\i -> ..)`, `xs ! i` cannot fail (see `may_fail`).
                let range = match (&n2.kind, &f.kind) {
                    (K::Length(a), K::Lam(i, _)) => match &a.kind {
                        K::Var(xs) => Some((i.id, xs.id)),
                        _ => None,
                    },
                    _ => None,
                };
                if let Some(r) = range {
                    self.in_range.push(r);
                }
                let f2 = self.c(f);
                if range.is_some() {
                    self.in_range.pop();
                }
                mk(K::Build(n2, f2))
            }
            K::Index(xs, i) => {
                let xs2 = self.c(xs);
                mk(K::Index(xs2, self.c(i)))
            }
            K::Length(xs) => mk(K::Length(self.c(xs))),
            K::Replicate(n, x) => {
                let n2 = self.c(n);
                mk(K::Replicate(n2, self.c(x)))
            }
            K::Loop(f, x, tape) => {
                self.branches = true;
                let f2 = self.c(f);
                mk(K::Loop(f2, self.c(x), *tape))
            }
            K::Fix(f, at) => {
                self.branches = true;
                mk(K::Fix(self.c(f), *at))
            }
            K::LinLam(v, l) => {
                let body = self.lblock(l);
                self.lin_lam(v, body, span)
            }
            K::LinApp(f, a) => {
                let f2 = self.c(f);
                mk(K::LinApp(f2, self.c(a)))
            }
            K::LinPrim(k, a) => mk(K::LinPrim(k.clone(), self.c(a))),
        }
    }

    /// A variable occurrence: its substitution, or the variable (reusing the input node
    /// `node` when there is one, to save an allocation).
    fn cvar(&mut self, x: &Var, node: Option<&Term>, span: Span) -> Term {
        match self.subst(x.id) {
            None if self.lam_split.is_empty() && self.map_split.is_empty() => {
                self.uses_add(x.id, 1);
                return match node {
                    Some(t) => t.clone(),
                    None => Term::new(TermKind::Var(x.clone()), span),
                };
            }
            Some(Subst::Cheap(a)) => {
                let a = a.clone();
                return self.copy(&a);
            }
            _ => {}
        }
        match self.take_subst(x.id) {
            Some(Subst::Cheap(_)) => unreachable!("handled above"),
            Some(Subst::Moved(e)) => e,
            Some(Subst::Input(e)) => self.term(&e),
            None => {
                if let Some((f1, f2)) = self.lam_split.get(&x.id).cloned() {
                    // Any other use of a split function: \y -> (f1 y, f2 y).
                    let ty = f1.ty.as_fun().map(|(d, _)| d.clone()).unwrap_or(Ty::Unit);
                    let y = Var::fresh("y", ty);
                    let l = Term::app(self.var(&f1, span), self.var(&y, span));
                    let r = Term::app(self.var(&f2, span), self.var(&y, span));
                    return Term::lam(&y, Term::pair(l, r));
                }
                if let Some((r1, r2)) = self.map_split.get(&x.id).cloned() {
                    // Unreachable when the occurrence analysis is right; rebuilt for safety.
                    let (a, b) = (r1.ty.as_array().cloned(), r2.ty.as_array().cloned());
                    let (a, b) = (a.unwrap_or(Ty::Unit), b.unwrap_or(Ty::Unit));
                    let (p, q) = (Var::fresh("p", a), Var::fresh("q", b));
                    let zip =
                        Term::lam(&p, Term::lam(&q, Term::pair(Term::var(&p), Term::var(&q))));
                    let (v1, v2) = (self.var(&r1, span), self.var(&r2, span));
                    return Term::new(TermKind::Map2(zip, v1, v2), span);
                }
                self.var(x, span)
            }
        }
    }

    /// The input λ (a `Lam` node) a function position holds, directly or through a variable
    /// inlined once.
    fn input_lambda(&mut self, f: &Term) -> Option<Term> {
        self.input_value(f, |t| matches!(t.kind, TermKind::Lam(..)))
    }

    /// [`Self::input_lambda`] for linear λs (a `LinLam` node).
    fn input_lin_lambda(&mut self, f: &Term) -> Option<Term> {
        self.input_value(f, |t| matches!(t.kind, TermKind::LinLam(..)))
    }

    /// The input term `f`, or the input term a variable `f` is inlined once to (consuming that
    /// inlining), if it is of the form `is`.
    fn input_value(&mut self, f: &Term, is: impl Fn(&Term) -> bool) -> Option<Term> {
        if let TermKind::Var(g) = &f.kind {
            let Some(Subst::Input(e)) = self.subst(g.id) else {
                return None;
            };
            if !is(e) {
                return None;
            }
            let Some(Subst::Input(e)) = self.take_subst(g.id) else {
                unreachable!("just found")
            };
            return Some(e);
        }
        is(f).then(|| f.clone())
    }

    fn app(&mut self, f: Term, a: Term, span: Span) -> Term {
        if self.rules.lam_app_let
            && let TermKind::Lam(x, body) = &f.kind
        {
            self.fire("lamAppLet");
            self.dirty = true;
            // The body is already simplified: bind the argument rather than substitute it, since
            // facts recorded about the body's bindings (known pairs) mention `x`. The next pass
            // inlines the binding if it is an atom or used once.
            self.stack
                .push(Binding::Cart(Pat::Var(x.clone()), a, span, Orig::None));
            let body = body.clone();
            return self.peel(body);
        }
        Term::new(TermKind::App(f, a), span)
    }

    fn pair(&mut self, a: Term, b: Term, span: Span) -> Term {
        if self.rules.pair_eta
            && let (TermKind::Fst(x), TermKind::Snd(y)) = (&a.kind, &b.kind)
            && is_atom(x)
            && same_atom(x, y)
        {
            self.fire("pairEta");
            self.drop(&b);
            return x.clone();
        }
        Term::new(TermKind::Pair(a, b), span)
    }

    fn fst(&mut self, e: Term, span: Span) -> Term {
        self.proj(e, true, span)
    }

    fn snd(&mut self, e: Term, span: Span) -> Term {
        self.proj(e, false, span)
    }

    fn proj(&mut self, e: Term, first: bool, span: Span) -> Term {
        if self.rules.pair_proj {
            if let TermKind::Pair(a, b) = &e.kind {
                let (keep, lose) = if first { (a, b) } else { (b, a) };
                if !self.may_fail(lose) {
                    self.fire("pairProj");
                    self.drop(lose);
                    return keep.clone();
                }
                // Strict: the other half still runs (and may fail), bound to nothing.
                if let Some(ty) = types::ty(lose) {
                    self.fire("pairProj");
                    self.stack
                        .push(Binding::Cart(Pat::Wild(ty), lose.clone(), span, Orig::None));
                    return keep.clone();
                }
            }
            if let Some((a, b)) = self.known_pair(&e) {
                self.fire("pairProj");
                self.drop(&e);
                return self.copy(if first { &a } else { &b });
            }
        }
        Term::new(
            if first {
                TermKind::Fst(e)
            } else {
                TermKind::Snd(e)
            },
            span,
        )
    }

    fn prim(&mut self, op: &Prim, args: Vec<Term>, span: Span) -> Term {
        if self.rules.algebra {
            if let Some(vals) = args.iter().map(lit_value).collect::<Option<Vec<_>>>()
                && let Ok(v) = op.eval_args(vals)
                && let Some(l) = value_lit(&v)
            {
                self.fire("algebra");
                return Term::new(TermKind::Lit(l), span);
            }
            let one = |t: &Term| real_lit(t) == Some(1.0);
            let zero =
                |t: &Term| matches!(real_lit(t), Some(z) if z == 0.0 && z.is_sign_positive());
            let keep = match (op.name(), args.as_slice()) {
                ("mul", [a, b]) if one(a) => Some(b),
                ("mul", [a, b]) if one(b) => Some(a),
                ("div", [a, b]) if one(b) => Some(a),
                ("sub", [a, b]) if zero(b) => Some(a),
                ("neg", [a]) => match &a.kind {
                    TermKind::Prim(op2, inner) if op2.name() == "neg" && inner.len() == 1 => {
                        Some(&inner[0])
                    }
                    _ => None,
                },
                _ => None,
            };
            if let Some(k) = keep {
                self.fire("algebra");
                return k.clone();
            }
        }
        if self.rules.cse
            && let Some(x) = prim_key(op, &args).and_then(|k| self.available(&k))
        {
            // The same application is bound by a `let` in scope: read its variable.
            self.fire("cse");
            for a in &args {
                self.drop(a);
            }
            return self.var(&x, span);
        }
        Term::new(TermKind::Prim(op.clone(), args), span)
    }

    fn lin_lam(&mut self, v: &Var, body: LTerm, span: Span) -> Term {
        if self.rules.lin_eta
            && let LTermKind::App(f, arg) = &body.kind
            && let LTermKind::Var(u) = &arg.kind
            && u.id == v.id
            && is_atom(f)
        {
            self.fire("linEta");
            return f.clone();
        }
        Term::new(TermKind::LinLam(v.clone(), body), span)
    }

    // ----- linear terms -----

    fn linear(&mut self, l: &LTerm) -> LTerm {
        self.lin += 1;
        let out = deep(|| self.linear_(l));
        self.lin -= 1;
        out
    }

    fn linear_(&mut self, l: &LTerm) -> LTerm {
        use LTermKind as K;
        let mut l = l;
        loop {
            let n = self.stack.len();
            match &l.kind {
                K::Let(p, e, b) => {
                    self.let_(p, e, l.span);
                    self.mark(n, p, e, || Orig::L(l.clone()));
                    l = b;
                }
                K::LinLet(u, a, b) => {
                    self.lin_let_(u, a, l.span);
                    self.lmark(n, u, a, l);
                    l = b;
                }
                _ => break,
            }
        }
        let out = self.lcore(l);
        lkeep(l, out)
    }

    /// A linear term that is not a `let`.
    fn lcore(&mut self, l: &LTerm) -> LTerm {
        use LTermKind as K;
        let span = l.span;
        let mk = |k: LTermKind| lreuse(l, k);
        match &l.kind {
            K::Let(..) | K::LinLet(..) => unreachable!("lets are consumed above"),
            K::Var(u) => self.lvar(u, Some(l), span),
            K::Zero(_) => l.clone(),
            K::Plus(a, b) => {
                let a2 = self.lfloat(a, self.rules.plus_let, "plusLet");
                let b2 = self.lfloat(b, self.rules.plus_let, "plusLet");
                self.plus(a2, b2, span)
            }
            K::Pair(a, b) => {
                let a2 = self.l(a);
                let b2 = self.l(b);
                self.lpair(a2, b2, span)
            }
            K::Fst(e) | K::Snd(e) => {
                let e2 = self.lfloat(e, self.rules.let_proj, "letProj");
                self.lproj(e2, matches!(l.kind, K::Fst(_)), span)
            }
            K::App(f, a) => {
                if self.rules.lin_beta
                    && let Some(lam) = self.input_lin_lambda(f)
                    && let TermKind::LinLam(v, body) = &lam.kind
                {
                    self.fire("linBeta");
                    self.lin_let_(v, a, span);
                    return self.linear(body);
                }
                let f2 = self.c(f);
                let a2 = self.l(a);
                self.lapp(f2, a2, span)
            }
            K::Copower(t, a) => {
                let t2 = self.c(t);
                let a2 = self.l(a);
                if self.rules.zero_prop
                    && let K::Zero(m) = &a2.kind
                    && let Some(ty) = types::ty(&t2)
                    && !self.may_fail(&t2)
                {
                    self.fire("zeroProp");
                    self.drop(&t2);
                    return LTerm::zero(LTy::copower(ty, m.clone()));
                }
                self.untyped(self.rules.zero_prop && matches!(a2.kind, K::Zero(_)));
                mk(K::Copower(t2, a2))
            }
            K::CopowFold(f, a) => {
                let a2 = self.l(a);
                if self.rules.copow_singleton
                    && let K::Copower(t, x) = &a2.kind
                {
                    self.fire("copowSingleton");
                    let (t, x) = (t.clone(), x.clone());
                    if let Some(lam) = self.input_lambda(f)
                        && let TermKind::Lam(b, body) = &lam.kind
                    {
                        self.bind(&Pat::Var(b.clone()), t, span);
                        if let Some(llam) = self.input_lin_lambda(body)
                            && let TermKind::LinLam(v, lbody) = &llam.kind
                        {
                            self.bind_lin(v, x, span);
                            return self.linear(lbody);
                        }
                        let g = self.c(body);
                        return self.lapp(g, x, span);
                    }
                    let f2 = self.c(f);
                    let g = self.app(f2, t, span);
                    return self.lapp(g, x, span);
                }
                let f2 = self.c(f);
                if self.rules.zero_prop
                    && let K::Zero(_) = &a2.kind
                    && let Some(m) = types::ty(&f2).and_then(|t| {
                        t.as_fun()
                            .and_then(|(_, r)| r.as_lin_fun())
                            .map(|(_, m)| m.clone())
                    })
                    && !self.may_fail(&f2)
                {
                    self.fire("zeroProp");
                    self.drop(&f2);
                    return LTerm::zero(m);
                }
                self.untyped(self.rules.zero_prop && matches!(a2.kind, K::Zero(_)));
                mk(K::CopowFold(f2, a2))
            }
            K::PowLam(b, body) => {
                let body2 = self.lblock(body);
                if self.rules.zero_prop
                    && let K::Zero(m) = &body2.kind
                {
                    self.fire("zeroProp");
                    return LTerm::zero(LTy::power(b.ty.clone(), m.clone()));
                }
                mk(K::PowLam(b.clone(), body2))
            }
            K::PowApp(a, t) => {
                if self.rules.lin_beta
                    && let K::PowLam(b, body) = &a.kind
                {
                    self.fire("linBeta");
                    self.let_(&Pat::Var(b.clone()), t, span);
                    return self.linear(body);
                }
                let a2 = self.l(a);
                let t2 = self.c(t);
                if self.rules.zero_prop
                    && let K::Zero(p) = &a2.kind
                    && let Some((_, m)) = p.as_power()
                    && !self.may_fail(&t2)
                {
                    self.fire("zeroProp");
                    self.drop(&t2);
                    return LTerm::zero(m.clone());
                }
                if self.rules.lin_beta
                    && let K::PowLam(b, body) = &a2.kind
                {
                    self.fire("linBeta");
                    self.dirty = true;
                    self.stack
                        .push(Binding::Cart(Pat::Var(b.clone()), t2, span, Orig::None));
                    return self.lpeel(body.clone());
                }
                mk(K::PowApp(a2, t2))
            }
            K::Inl(a, ty) | K::Inr(ty, a) => {
                let left = matches!(l.kind, K::Inl(..));
                let a2 = self.l(a);
                if self.rules.zero_prop
                    && let K::Zero(m) = &a2.kind
                {
                    self.fire("zeroProp");
                    let (lt, rt) = if left { (m, ty) } else { (ty, m) };
                    return LTerm::zero(LTy::sum(lt.clone(), rt.clone()));
                }
                if left {
                    mk(K::Inl(a2, ty.clone()))
                } else {
                    mk(K::Inr(ty.clone(), a2))
                }
            }
            K::FromLeft(a) | K::FromRight(a) => {
                let left = matches!(l.kind, K::FromLeft(_));
                let a2 = self.l(a);
                self.side_of(a2, left, span)
            }
            K::Replicate(n, a) => {
                let n2 = self.c(n);
                let a2 = self.l(a);
                if self.rules.map_zero
                    && let K::Zero(m) = &a2.kind
                    && !self.may_fail(&n2)
                {
                    self.fire("mapZero");
                    self.drop(&n2);
                    return LTerm::zero(LTy::array(m.clone()));
                }
                mk(K::Replicate(n2, a2))
            }
            K::Sum(a) => {
                self.arrays = true;
                let a2 = self.l(a);
                self.sum(a2, span)
            }
            K::OneHot(n, i, a) => {
                self.arrays = true;
                let n2 = self.c(n);
                let i2 = self.c(i);
                let a2 = self.l(a);
                if self.rules.map_zero
                    && let K::Zero(m) = &a2.kind
                    && !self.may_fail(&n2)
                    && !self.may_fail(&i2)
                {
                    self.fire("mapZero");
                    self.drop(&n2);
                    self.drop(&i2);
                    return LTerm::zero(LTy::array(m.clone()));
                }
                mk(K::OneHot(n2, i2, a2))
            }
            K::Index(a, i) => {
                let a2 = self.l(a);
                let i2 = self.c(i);
                if self.rules.zero_prop
                    && let K::Zero(arr) = &a2.kind
                    && let Some(m) = arr.as_array()
                    && !self.may_fail(&i2)
                {
                    self.fire("zeroProp");
                    self.drop(&i2);
                    return LTerm::zero(m.clone());
                }
                mk(K::Index(a2, i2))
            }
            K::ZipWith(fs, a) => {
                let fs2 = self.c(fs);
                let a2 = self.l(a);
                if self.rules.map_zero
                    && let K::Zero(_) = &a2.kind
                    && let Some(m) = types::ty(&fs2).and_then(|t| {
                        t.as_array()
                            .and_then(Ty::as_lin_fun)
                            .map(|(_, m)| m.clone())
                    })
                    && !self.may_fail(&fs2)
                {
                    self.fire("mapZero");
                    self.drop(&fs2);
                    return LTerm::zero(LTy::array(m));
                }
                self.untyped(self.rules.map_zero && matches!(a2.kind, K::Zero(_)));
                mk(K::ZipWith(fs2, a2))
            }
            K::Map(f, a) => {
                let f2 = self.c(f);
                let a2 = self.l(a);
                self.lmap(f2, a2, span)
            }
            K::Build(n, i, body) => {
                self.arrays = true;
                let n2 = self.c(n);
                let body2 = self.lblock(body);
                if self.rules.map_zero
                    && let K::Zero(m) = &body2.kind
                    && !self.may_fail(&n2)
                {
                    self.fire("mapZero");
                    self.drop(&n2);
                    return LTerm::zero(LTy::array(m.clone()));
                }
                mk(K::Build(n2, i.clone(), body2))
            }
            K::Scale(t, a) => {
                let t2 = self.c(t);
                let a2 = self.l(a);
                self.scale(t2, a2, span)
            }
            K::Chain(t, a, rev, outs) => {
                let t2 = self.c(t);
                let a2 = self.l(a);
                mk(K::Chain(t2, a2, *rev, *outs))
            }
            K::Case(e, p, a, q, b) => {
                self.branches = true;
                let e2 = self.c(e);
                if self.rules.case_known {
                    let known = match &e2.kind {
                        TermKind::Inl(v, _) => Some((p, v.clone(), a)),
                        TermKind::Inr(_, v) => Some((q, v.clone(), b)),
                        _ => None,
                    };
                    if let Some((pat, v, branch)) = known {
                        self.fire("caseKnown");
                        self.bind(pat, v, span);
                        return self.linear(branch);
                    }
                }
                let a2 = self.lblock(a);
                let b2 = self.lblock(b);
                if self.rules.zero_prop
                    && let (K::Zero(_), K::Zero(_)) = (&a2.kind, &b2.kind)
                {
                    return self.lcase(e2, p, a2, q, b2, span);
                }
                let p2 = self
                    .live((**p).clone())
                    .unwrap_or_else(|| Pat::Wild(p.ty()));
                let q2 = self
                    .live((**q).clone())
                    .unwrap_or_else(|| Pat::Wild(q.ty()));
                // A case of pairs on an atom (or an index of one), binding nothing, is a pair
                // of cases (each half then simplifies on its own: a zero half vanishes).
                self.lcase(e2, &p2, a2, &q2, b2, span)
            }
        }
    }

    /// The halves of a linear pair, or of a zero of product type.
    fn lhalves(&mut self, l: &LTerm) -> Option<(LTerm, LTerm)> {
        match &l.kind {
            LTermKind::Pair(a, b) => Some((a.clone(), b.clone())),
            LTermKind::Zero(t) => {
                let (a, b) = t.as_prod()?;
                Some((LTerm::zero(a.clone()), LTerm::zero(b.clone())))
            }
            _ => None,
        }
    }

    /// A linear case on an output scrutinee with output branches: zero if both are zero; a
    /// pair of cases if both are pairs (or zeros of a product), the scrutinee is an atom or an
    /// index of one, and the patterns bind nothing (each half then simplifies on its own).
    fn lcase(&mut self, e: Term, p: &Pat, a: LTerm, q: &Pat, b: LTerm, span: Span) -> LTerm {
        deep(|| {
            if self.rules.zero_prop
                && let (LTermKind::Zero(m), LTermKind::Zero(_)) = (&a.kind, &b.kind)
                && !self.may_fail(&e)
            {
                self.fire("zeroProp");
                self.drop(&e);
                return LTerm::zero(m.clone());
            }
            if self.rules.case_proj
                && cheap_index(&e)
                && matches!((p, q), (Pat::Wild(_), Pat::Wild(_)))
                && let Some((a1, a2)) = self.lhalves(&a)
                && let Some((b1, b2)) = self.lhalves(&b)
            {
                self.fire("caseProj");
                self.dirty = true;
                let e2 = self.copy(&e);
                let first = self.lcase(e, p, a1, q, b1, span);
                let second = self.lcase(e2, p, a2, q, b2, span);
                return self.lpair(first, second, span);
            }
            let (p, q) = (Box::new(p.clone()), Box::new(q.clone()));
            LTerm::new(LTermKind::Case(e, p, a, q, b), span)
        })
    }

    /// [`Self::cvar`] for linear variables.
    fn lvar(&mut self, u: &Var, node: Option<&LTerm>, span: Span) -> LTerm {
        match self.lsubst(u.id) {
            None => {
                self.uses_add(u.id, 1);
                return match node {
                    Some(l) => l.clone(),
                    None => LTerm::new(LTermKind::Var(u.clone()), span),
                };
            }
            Some(Subst::Cheap(a)) => {
                let a = a.clone();
                return self.lcopy(&a);
            }
            _ => {}
        }
        match self.take_lsubst(u.id) {
            Some(Subst::Moved(l)) => l,
            Some(Subst::Input(l)) => self.linear(&l),
            Some(Subst::Cheap(_)) | None => unreachable!("handled above"),
        }
    }

    fn lknown_pair(&self, l: &LTerm) -> Option<(LTerm, LTerm)> {
        match &l.kind {
            LTermKind::Var(u) if self.rules.pair_proj => match self.vars.get(u.id).map(|s| &s.slot)
            {
                Some(Slot::LKnown(a, b)) => Some((a.clone(), b.clone())),
                _ => None,
            },
            _ => None,
        }
    }

    fn lproj(&mut self, e: LTerm, first: bool, span: Span) -> LTerm {
        use LTermKind as K;
        if self.rules.pair_proj {
            if let K::Pair(a, b) = &e.kind {
                self.fire("pairProj");
                let (keep, lose) = if first { (a, b) } else { (b, a) };
                self.ldrop(lose);
                return keep.clone();
            }
            if let Some((a, b)) = self.lknown_pair(&e) {
                self.fire("pairProj");
                self.ldrop(&e);
                return self.lcopy(if first { &a } else { &b });
            }
        }
        if self.rules.zero_prop
            && let K::Zero(t) = &e.kind
            && let Some((a, b)) = t.as_prod()
        {
            self.fire("zeroProp");
            return LTerm::zero(if first { a.clone() } else { b.clone() });
        }
        if self.rules.plus_pair
            && let K::Plus(a, b) = &e.kind
        {
            // `fst (l + l') ~> fst l + fst l'`: the other halves are dropped unevaluated (a
            // parameter left out by `--wrt` gets no cotangent computed).
            self.fire("plusPair");
            let a2 = self.lproj(a.clone(), first, span);
            let b2 = self.lproj(b.clone(), first, span);
            return self.plus(a2, b2, span);
        }
        if self.rules.case_proj
            && let K::Case(c, p, a, q, b) = &e.kind
        {
            self.fire("caseProj");
            // The projected branches may have become redexes of rules applied before (a
            // `copowfold` of a now-zero argument): another pass looks.
            self.dirty = true;
            let a2 = self.lproj_under(a.clone(), first);
            let b2 = self.lproj_under(b.clone(), first);
            return lreuse(&e, K::Case(c.clone(), p.clone(), a2, q.clone(), b2));
        }
        LTerm::new(if first { K::Fst(e) } else { K::Snd(e) }, span)
    }

    /// The projection of an output term, moved under its lets (`caseProj` on linear branches).
    fn lproj_under(&mut self, e: LTerm, first: bool) -> LTerm {
        use LTermKind as K;
        deep(|| match &e.kind {
            K::Let(p, t, body) => {
                let body2 = self.lproj_under(body.clone(), first);
                lreuse(&e, K::Let(p.clone(), t.clone(), body2))
            }
            K::LinLet(u, a, body) => {
                let body2 = self.lproj_under(body.clone(), first);
                lreuse(&e, K::LinLet(u.clone(), a.clone(), body2))
            }
            _ => {
                let span = e.span;
                self.lproj(e.clone(), first, span)
            }
        })
    }

    fn lpair(&mut self, a: LTerm, b: LTerm, span: Span) -> LTerm {
        use LTermKind as K;
        if self.rules.zero_prop
            && let (K::Zero(ta), K::Zero(tb)) = (&a.kind, &b.kind)
        {
            self.fire("zeroProp");
            return LTerm::zero(LTy::prod(ta.clone(), tb.clone()));
        }
        if self.rules.pair_eta
            && let (K::Fst(x), K::Snd(y)) = (&a.kind, &b.kind)
            && is_latom(x)
            && same_atom(x, y)
        {
            self.fire("pairEta");
            self.ldrop(&b);
            return x.clone();
        }
        LTerm::new(K::Pair(a, b), span)
    }

    /// The components of a linear pair: a literal one, or a variable bound to one.
    fn lcomponents(&mut self, l: &LTerm) -> Option<(LTerm, LTerm)> {
        match &l.kind {
            LTermKind::Pair(a, b) => Some((a.clone(), b.clone())),
            LTermKind::Var(_) => {
                let (a, b) = self.lknown_pair(l)?;
                self.ldrop(l);
                Some((self.lcopy(&a), self.lcopy(&b)))
            }
            _ => None,
        }
    }

    fn plus(&mut self, a: LTerm, b: LTerm, span: Span) -> LTerm {
        use LTermKind as K;
        if self.rules.plus_zero {
            if let K::Zero(_) = a.kind {
                self.fire("plusZero");
                return b;
            }
            if let K::Zero(_) = b.kind {
                self.fire("plusZero");
                return a;
            }
        }
        if self.rules.plus_pair
            && (matches!(a.kind, K::Pair(..)) || matches!(b.kind, K::Pair(..)))
            && (matches!(a.kind, K::Pair(..)) || self.lknown_pair(&a).is_some())
            && (matches!(b.kind, K::Pair(..)) || self.lknown_pair(&b).is_some())
            && let (Some((a1, a2)), Some((b1, b2))) = (self.lcomponents(&a), self.lcomponents(&b))
        {
            self.fire("plusPair");
            let x = self.plus(a1, b1, span);
            let y = self.plus(a2, b2, span);
            return self.lpair(x, y, span);
        }
        if self.rules.algebra && lsame_cheap(&a, &b) {
            // The product rule of `x * x` gives `x • dx + x • dx`: one copy, scaled by 2.
            self.fire("algebra");
            self.ldrop(&b);
            return LTerm::new(K::Scale(Term::real(2.0), a), span);
        }
        LTerm::new(K::Plus(a, b), span)
    }

    fn lapp(&mut self, f: Term, a: LTerm, span: Span) -> LTerm {
        if self.rules.lin_beta
            && let TermKind::LinLam(v, body) = &f.kind
        {
            self.fire("linBeta");
            self.dirty = true;
            // As in `app`: bind, do not substitute into the simplified body.
            self.stack
                .push(Binding::Lin(v.clone(), a, span, Orig::None));
            let body = body.clone();
            return self.lpeel(body);
        }
        if self.rules.zero_prop
            && let LTermKind::Zero(_) = a.kind
            && let Some(m) = types::lin_cod(&f)
            && !self.may_fail(&f)
        {
            self.fire("zeroProp");
            self.drop(&f);
            return LTerm::zero(m);
        }
        self.untyped(self.rules.zero_prop && matches!(a.kind, LTermKind::Zero(_)));
        LTerm::new(LTermKind::App(f, a), span)
    }

    fn scale(&mut self, t: Term, a: LTerm, span: Span) -> LTerm {
        if self.rules.zero_prop
            && let LTermKind::Zero(_) = a.kind
            && !self.may_fail(&t)
        {
            self.fire("zeroProp");
            self.drop(&t);
            return a;
        }
        if self.rules.algebra {
            let c = real_lit(&t);
            if c == Some(1.0) {
                self.fire("algebra");
                return a;
            }
            if c == Some(0.0)
                && let Some(m) = types::lty(&a)
            {
                self.fire("algebra");
                self.ldrop(&a);
                return LTerm::zero(m);
            }
            self.untyped(c == Some(0.0));
        }
        LTerm::new(LTermKind::Scale(t, a), span)
    }

    fn side_of(&mut self, a: LTerm, left: bool, span: Span) -> LTerm {
        use LTermKind as K;
        if self.rules.case_known {
            match (&a.kind, left) {
                (K::Inl(x, _), true) | (K::Inr(_, x), false) => {
                    self.fire("caseKnown");
                    return x.clone();
                }
                (K::Inl(x, other), false) | (K::Inr(other, x), true) => {
                    self.fire("caseKnown");
                    self.ldrop(x);
                    return LTerm::zero(other.clone());
                }
                _ => {}
            }
        }
        if self.rules.zero_prop
            && let K::Zero(t) = &a.kind
            && let Some((l, r)) = t.as_sum()
        {
            self.fire("zeroProp");
            return LTerm::zero(if left { l.clone() } else { r.clone() });
        }
        LTerm::new(
            if left {
                K::FromLeft(a)
            } else {
                K::FromRight(a)
            },
            span,
        )
    }

    fn sum(&mut self, a: LTerm, span: Span) -> LTerm {
        use LTermKind as K;
        match &a.kind {
            K::Zero(t) if self.rules.sum_zero => {
                if let Some(m) = t.as_array() {
                    self.fire("sumZero");
                    return LTerm::zero(m.clone());
                }
            }
            K::OneHot(n, i, x) if self.rules.sum_singleton => {
                self.fire("sumSingleton");
                self.drop(n);
                self.drop(i);
                return x.clone();
            }
            K::Map(f, x) if self.rules.sum_zip => {
                self.fire("sumZip");
                let (f, x) = (f.clone(), x.clone());
                let s = self.sum(x, span);
                return self.lapp(f, s, span);
            }
            _ => {}
        }
        LTerm::new(K::Sum(a), span)
    }

    fn lmap(&mut self, f: Term, a: LTerm, span: Span) -> LTerm {
        use LTermKind as K;
        if self.rules.map_zero {
            if let K::Zero(_) = a.kind
                && let Some(m) = types::lin_cod(&f)
                && !self.may_fail(&f)
            {
                self.fire("mapZero");
                self.drop(&f);
                return LTerm::zero(LTy::array(m));
            }
            self.untyped(matches!(a.kind, K::Zero(_)));
            if let TermKind::LinLam(_, body) = &f.kind
                && let K::Zero(m) = &body.kind
            {
                self.fire("mapZero");
                self.ldrop(&a);
                return LTerm::zero(LTy::array(m.clone()));
            }
        }
        LTerm::new(K::Map(f, a), span)
    }
}

/// A key for a primitive applied to atoms (variables, literals, projections of atoms), equal for
/// syntactically equal applications (`cse`).
fn prim_key(op: &Prim, args: &[Term]) -> Option<String> {
    fn atom_key(t: &Term, out: &mut String) -> Option<()> {
        use std::fmt::Write;
        match &t.kind {
            TermKind::Var(x) => write!(out, "v{}", x.id.0).ok(),
            TermKind::Lit(Lit::Real(r)) => write!(out, "r{}", r.to_bits()).ok(),
            TermKind::Lit(Lit::Int(n)) => write!(out, "i{n}").ok(),
            TermKind::Lit(Lit::Bool(b)) => write!(out, "b{b}").ok(),
            TermKind::Lit(Lit::Unit) => write!(out, "u").ok(),
            TermKind::Fst(e) => {
                out.push_str("f.");
                atom_key(e, out)
            }
            TermKind::Snd(e) => {
                out.push_str("s.");
                atom_key(e, out)
            }
            _ => None,
        }
    }
    let mut k = format!("{}(", op.name());
    for a in args {
        atom_key(a, &mut k)?;
        k.push(',');
    }
    Some(k)
}
