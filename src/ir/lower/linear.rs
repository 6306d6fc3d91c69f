//! Lowering linear terms in destination-passing style (see [`super`] and note 07).
//!
//! `linear(l, d)` emits code that adds the value of `l` into the destination `d` ([`Dest`]):
//!
//! | destination | meaning |
//! | --- | --- |
//! | `places [p * c, ..]` | `p += c * value` for every place (reals, copowers, powers) |
//! | `(d1, d2)` | the first component into `d1`, the second into `d2` (`×`, `⊕`) |
//! | `array {whole, sum, each, at}` | the array added at whole array places; every element into `sum`; element `i` into `each(i)`; element `j` into `at(j)` |
//! | `apply f d` | `f • value` into `d` |
//! | `fold t d` | for each pair `(a, l)` of a copower, `t a • l` into `d` |
//! | `both [d, ..]` | into every one |
//!
//! Each form of `l` pushes its structure into `d` (`fst l` into `d` is `l` into `(d, 0)`,
//! `lsum l` into `d` is `l` into `array {sum: d}`, `l ! i` is `l` into `array {at: [(i, d)]}`,
//! `lmap f l` is `l` into `array {each: i ↦ apply f (each(i))}`, `copowfold t l` is `l` into
//! `fold t d`), and each constructor consumes it (`lbuild n (\i -> b)` into an array
//! destination is a loop over `i` adding `b` into `each(i)` and `sum`; `onehot n i l` is `l`
//! into `each(i)`; `(l1, l2)` into `(d1, d2)` is two lowerings). A constructor meeting a
//! destination of another shape (an unknown linear function, several destinations) is
//! materialised once into a fresh accumulator and added from there.
//!
//! Linear `let`s (and linear λ parameters at a known application) are *sunk* when every
//! occurrence of the variable is outside the loops, branches and powers of its scope
//! ([`Occurrences`]): the body is lowered first, the destinations of the variable's
//! occurrences are merged, and the bound term is lowered into the merge: transposition. If an
//! occurrence turns out to be nested after all, the body's code is discarded and the variable
//! is materialised.

use super::super::{Atom, Block, Check, Expr, Op, Place, Stmt, Ty, Var};
use super::{Env, Lowering, SVal};
use crate::deep::deep;
use crate::error::Result;
use crate::target::term::{Child, LTerm, LTermKind, TermKind, Var as TVar, VarId};
use crate::target::types::{LTy, Ty as TTy};
use rustc_hash::FxHashMap;
use std::rc::Rc;

/// How a linear variable is known during lowering.
#[derive(Clone)]
pub(crate) enum LBind {
    /// Its value, materialised.
    Mat(Atom),
    /// Sunk: its occurrences' destinations are collected in `sinks[k]`.
    Sink(usize),
    /// Zero (bound to `0`, or never used).
    Zero,
}

/// The linear variables in scope.
pub(crate) type LEnv = im::HashMap<VarId, LBind>;

/// A sunk variable being lowered: where it was bound, the destinations of its occurrences so
/// far, and its bound term, lowered into their merge once the last occurrence is seen.
#[derive(Clone)]
pub(crate) struct Sink {
    /// The block depth of the binding: every occurrence must be in that block.
    depth: usize,
    /// The destinations, each with the materialisation it was recorded in (if any).
    dests: Vec<(Dest, Option<u64>)>,
    /// How many occurrences the variable has (all of them must be seen).
    expected: u32,
    /// The bound term, until it is lowered.
    term: Option<(LTerm, Env, LEnv, LTy)>,
    /// Only collecting destinations (see [`Lowering::apply_dest`]): never lowered here.
    collect: bool,
    failed: bool,
}

/// The sinks being collected, innermost last, with an undo log so that a failed sinking
/// attempt restores what the enclosing sinks had before it started. (Copying the whole stack
/// per attempt instead made a chain of n nested linear `let`s cost O(n²) copies.)
#[derive(Default)]
pub(crate) struct Sinks {
    stack: Vec<Sink>,
    /// The changes to `stack`'s entries since the outermost open attempt began, oldest first.
    log: Vec<SinkUndo>,
    /// Sinking attempts in progress ([`Sinks::begin`] without [`Sinks::end`]).
    open: usize,
    /// The outermost sink that failed while its attempt is open. That attempt discards
    /// everything lowered since it began, so nothing more is lowered until it ends (without
    /// this, every failure lowered the rest of its scope to the end before discarding it,
    /// and a chain of n nested linear `let`s took O(n²) steps: 50 s at n = 3000).
    ///
    /// This decides: a sink that fails is materialised, even when the failure happened
    /// inside an attempt above it that would itself have failed later (whose undo would
    /// have restored the sink). Waiting for those attempts to end before aborting keeps
    /// the earlier decisions exactly, but lowers their whole scopes first, which is the
    /// quadratic cost again (4.2 s at n = 3000, 62 s at 10⁴; 0.5 s and 2.4 s this way).
    abort: Option<usize>,
}

/// A sinking attempt in progress: its sink, the log mark and the failed sink at its start.
struct Attempt {
    id: usize,
    mark: usize,
    abort: Option<usize>,
}

/// One logged change to a sink, undone when an attempt fails (see [`Sinks::end`]).
enum SinkUndo {
    /// It failed (it had not).
    Failed(usize),
    /// A destination was pushed onto it.
    Pushed(usize),
    /// Its term was taken (lowered into its destinations, which were taken too).
    Lowered(usize, (LTerm, Env, LEnv, LTy), Vec<(Dest, Option<u64>)>),
}

impl Sinks {
    /// Starts an attempt: pushes `s` and returns its index and what to undo to.
    fn begin(&mut self, s: Sink) -> (usize, Attempt) {
        self.open += 1;
        self.stack.push(s);
        let id = self.stack.len() - 1;
        (
            id,
            Attempt {
                id,
                mark: self.log.len(),
                abort: self.abort,
            },
        )
    }

    /// Ends attempt `a` (every sink pushed after its own is gone already), returning its sink;
    /// with `undo`, also restores the sinks below it, and which of them failed, to what they
    /// were when it began.
    fn end(&mut self, a: Attempt, undo: bool) -> Sink {
        let Attempt { id, mark, abort } = a;
        self.stack.truncate(id + 1);
        let sink = self.stack.pop().expect("the attempt's sink");
        if undo {
            while self.log.len() > mark {
                // Entries of sinks at `id` or above concern sinks that are gone.
                match self.log.pop().expect("checked") {
                    SinkUndo::Failed(k) if k < id => self.stack[k].failed = false,
                    SinkUndo::Pushed(k) if k < id => {
                        self.stack[k].dests.pop();
                    }
                    SinkUndo::Lowered(k, term, dests) if k < id => {
                        self.stack[k].term = Some(term);
                        self.stack[k].dests = dests;
                    }
                    _ => {}
                }
            }
            // A failure recorded in what is undone is undone too.
            self.abort = abort;
        } else if self.abort == Some(id) {
            self.abort = abort;
        }
        self.open -= 1;
        if self.open == 0 {
            self.log.clear();
        }
        if self.abort.is_none() && self.stack.last().is_some_and(|s| s.failed) {
            self.abort = Some(self.stack.len() - 1);
        }
        sink
    }

    /// Marks sink `k` failed, which fails its attempt.
    fn fail(&mut self, k: usize) {
        if !self.stack[k].failed {
            self.stack[k].failed = true;
            self.abort = Some(self.abort.map_or(k, |a| a.min(k)));
            if self.open > 0 {
                self.log.push(SinkUndo::Failed(k));
            }
        }
    }
}

/// Per linear binder: how often its variable occurs and whether some occurrence is nested
/// (inside an `lbuild` body, a linear `case` branch or a power) relative to the binder.
#[derive(Default)]
pub(crate) struct Occurrences {
    info: FxHashMap<VarId, (u32, bool)>,
    levels: FxHashMap<VarId, u32>,
}

impl Occurrences {
    /// Records the linear binders and occurrences under `root` (once per binder).
    pub(crate) fn analyse(&mut self, root: Child<'_>) {
        if let Child::C(t) = root
            && let TermKind::LinLam(v, _) = &t.kind
            && self.levels.contains_key(&v.id)
        {
            return;
        }
        let mut stack = vec![(root, 0u32)];
        while let Some((c, level)) = stack.pop() {
            match c {
                Child::C(t) => {
                    if let TermKind::LinLam(v, _) = &t.kind {
                        self.levels.insert(v.id, level);
                        self.info.entry(v.id).or_insert((0, false));
                    }
                    stack.extend(t.children().into_iter().map(|c| (c, level)));
                }
                Child::L(l) => {
                    use LTermKind as K;
                    match &l.kind {
                        K::Var(u) => {
                            let bound = self.levels.get(&u.id).copied().unwrap_or(0);
                            let e = self.info.entry(u.id).or_insert((0, false));
                            e.0 += 1;
                            e.1 |= level > bound;
                        }
                        K::LinLet(u, ..) => {
                            self.levels.insert(u.id, level);
                            self.info.entry(u.id).or_insert((0, false));
                        }
                        _ => {}
                    }
                    let nested = |k: usize| match &l.kind {
                        K::Build(..) => k == 1,
                        K::Case(..) => k >= 1,
                        K::PowLam(..) => true,
                        _ => false,
                    };
                    for (k, c) in l.children().into_iter().enumerate() {
                        stack.push((c, level + u32::from(nested(k))));
                    }
                }
            }
        }
    }

    /// (occurrences, some nested); unknown binders count as used and nested.
    fn get(&self, v: VarId) -> (u32, bool) {
        self.info.get(&v).copied().unwrap_or((1, true))
    }
}

/// Where a linear value goes (see the module doc).
#[derive(Clone)]
pub(crate) struct Dest {
    /// The linear type of the values it takes.
    pub(crate) ty: LTy,
    kind: DK,
    /// Whether some addition it makes is scaled: a sum lowered into it is added up first,
    /// so that `c * (a + b)` keeps the strong zero of `Lin::scale` (a NaN or infinite `c`
    /// times an exactly cancelling `a + b` is 0, not `c * a + c * b`).
    scaled: bool,
}

#[derive(Clone)]
enum DK {
    Zero,
    Places(Vec<Target>),
    Pair(Box<Dest>, Box<Dest>),
    Array(Box<ArrDest>),
    Apply(FunRef, Box<Dest>),
    Fold(SVal, TTy, Box<Dest>),
    Both(Vec<Dest>),
}

/// `place += scale * value`.
#[derive(Clone)]
struct Target {
    place: Place,
    scale: Option<Atom>,
}

#[derive(Clone)]
struct ArrDest {
    /// Array places the whole value is added to.
    whole: Vec<Target>,
    /// Where every element goes.
    sum: Dest,
    /// Where element `i` goes (`i` a placeholder variable) and the array places it writes,
    /// to be grown first.
    each: Option<Each>,
    /// Where element `j` goes.
    at: Vec<(Atom, Dest)>,
}

#[derive(Clone)]
struct Each {
    i: Var,
    dest: Dest,
    grow: Vec<Place>,
}

/// A linear function to apply: a value, or element `k` of an array of them.
#[derive(Clone)]
enum FunRef {
    Static(SVal, TTy),
    Elem(Atom, Atom, TTy),
}

impl FunRef {
    fn same(&self, other: &FunRef) -> bool {
        match (self, other) {
            (FunRef::Static(a, _), FunRef::Static(b, _)) => same_sval(a, b),
            (FunRef::Elem(a, i, _), FunRef::Elem(b, j, _)) => same_atom(a, b) && same_atom(i, j),
            _ => false,
        }
    }
}

fn same_atom(a: &Atom, b: &Atom) -> bool {
    match (a, b) {
        (Atom::Var(x), Atom::Var(y)) => x.id == y.id,
        _ => false,
    }
}

fn same_sval(a: &SVal, b: &SVal) -> bool {
    match (a, b) {
        (SVal::Dyn(x), SVal::Dyn(y)) => same_atom(x, y),
        (SVal::LinLam(x), SVal::LinLam(y)) | (SVal::Lam(x), SVal::Lam(y)) => Rc::ptr_eq(x, y),
        _ => false,
    }
}

/// An argument of a linear function: a term still to lower, or a materialised value.
#[derive(Clone)]
pub(crate) enum LArg {
    Term(LTerm, Env, LEnv),
    Mat(Atom),
}

impl Dest {
    /// A sketch of the destination's structure (for debugging).
    pub(crate) fn shape(&self) -> String {
        match &self.kind {
            DK::Zero => "0".into(),
            DK::Places(ts) => format!("places{}", ts.len()),
            DK::Pair(a, b) => format!("({}, {})", a.shape(), b.shape()),
            DK::Array(ad) => format!(
                "array{{whole{} sum:{} each:{} at{}}}",
                ad.whole.len(),
                ad.sum.shape(),
                ad.each.as_ref().map_or("-".into(), |e| e.dest.shape()),
                ad.at.len()
            ),
            DK::Apply(_, d) => format!("apply({})", d.shape()),
            DK::Fold(_, _, d) => format!("fold({})", d.shape()),
            DK::Both(ds) => format!(
                "both[{}]",
                ds.iter().map(Dest::shape).collect::<Vec<_>>().join(", ")
            ),
        }
    }

    fn new(ty: LTy, kind: DK) -> Dest {
        let scaled = match &kind {
            DK::Zero => false,
            DK::Places(ts) => ts.iter().any(|t| t.scale.is_some()),
            DK::Pair(a, b) => a.scaled || b.scaled,
            DK::Array(ad) => {
                ad.whole.iter().any(|t| t.scale.is_some())
                    || ad.sum.scaled
                    || ad.each.as_ref().is_some_and(|e| e.dest.scaled)
                    || ad.at.iter().any(|(_, d)| d.scaled)
            }
            DK::Apply(_, d) | DK::Fold(_, _, d) => d.scaled,
            DK::Both(ds) => ds.iter().any(|d| d.scaled),
        };
        Dest { ty, kind, scaled }
    }

    fn zero(ty: LTy) -> Dest {
        Dest::new(ty, DK::Zero)
    }

    fn is_zero(&self) -> bool {
        matches!(self.kind, DK::Zero)
    }

    fn pair(ty: LTy, a: Dest, b: Dest) -> Dest {
        if a.is_zero() && b.is_zero() {
            return Dest::zero(ty);
        }
        Dest::new(ty, DK::Pair(Box::new(a), Box::new(b)))
    }

    fn array(ty: LTy, ad: ArrDest) -> Dest {
        if ad.whole.is_empty()
            && ad.sum.is_zero()
            && ad.each.as_ref().is_none_or(|e| e.dest.is_zero())
            && ad.at.iter().all(|(_, d)| d.is_zero())
        {
            return Dest::zero(ty);
        }
        Dest::new(ty, DK::Array(Box::new(ad)))
    }

    fn apply(ty: LTy, f: FunRef, d: Dest) -> Dest {
        if d.is_zero() {
            return Dest::zero(ty);
        }
        Dest::new(ty, DK::Apply(f, Box::new(d)))
    }

    /// The same destination with every atom `Var(from)` replaced by `to`.
    fn subst(&self, from: &Var, to: &Atom) -> Dest {
        deep(|| {
            let a = |x: &Atom| match x {
                Atom::Var(v) if v.id == from.id => to.clone(),
                _ => x.clone(),
            };
            let place = |p: &Place| Place {
                root: p.root.clone(),
                path: p
                    .path
                    .iter()
                    .map(|s| match s {
                        super::super::Step::Elem(i) => super::super::Step::Elem(a(i)),
                        other => other.clone(),
                    })
                    .collect(),
            };
            let target = |t: &Target| Target {
                place: place(&t.place),
                scale: t.scale.as_ref().map(a),
            };
            let kind = match &self.kind {
                DK::Zero => DK::Zero,
                DK::Places(ts) => DK::Places(ts.iter().map(target).collect()),
                DK::Pair(x, y) => {
                    DK::Pair(Box::new(x.subst(from, to)), Box::new(y.subst(from, to)))
                }
                DK::Array(ad) => DK::Array(Box::new(ArrDest {
                    whole: ad.whole.iter().map(target).collect(),
                    sum: ad.sum.subst(from, to),
                    each: ad.each.as_ref().map(|e| Each {
                        i: e.i.clone(),
                        dest: e.dest.subst(from, to),
                        grow: e.grow.iter().map(place).collect(),
                    }),
                    at: ad
                        .at
                        .iter()
                        .map(|(j, d)| (a(j), d.subst(from, to)))
                        .collect(),
                })),
                DK::Apply(f, d) => {
                    let f = match f {
                        FunRef::Elem(fs, k, t) => FunRef::Elem(a(fs), a(k), t.clone()),
                        other => other.clone(),
                    };
                    DK::Apply(f, Box::new(d.subst(from, to)))
                }
                DK::Fold(t, tt, d) => DK::Fold(t.clone(), tt.clone(), Box::new(d.subst(from, to))),
                DK::Both(ds) => DK::Both(ds.iter().map(|d| d.subst(from, to)).collect()),
            };
            Dest::new(self.ty.clone(), kind)
        })
    }
}

/// `a + b`: both destinations, merged structurally where they have the same shape.
fn merge(a: Dest, b: Dest) -> Dest {
    deep(|| {
        let ty = a.ty.clone();
        match (a.kind, b.kind) {
            (DK::Zero, k) | (k, DK::Zero) => Dest::new(ty, k),
            (DK::Places(mut x), DK::Places(y)) => {
                x.extend(y);
                Dest::new(ty, DK::Places(x))
            }
            (DK::Pair(a1, a2), DK::Pair(b1, b2)) => Dest::new(
                ty,
                DK::Pair(Box::new(merge(*a1, *b1)), Box::new(merge(*a2, *b2))),
            ),
            (DK::Array(x), DK::Array(y)) => {
                let (x, y) = (*x, *y);
                let mut whole = x.whole;
                whole.extend(y.whole);
                let mut at = x.at;
                at.extend(y.at);
                let each = match (x.each, y.each) {
                    (None, e) | (e, None) => e,
                    (Some(e1), Some(e2)) => {
                        let d2 = e2.dest.subst(&e2.i, &Atom::Var(e1.i.clone()));
                        let mut grow = e1.grow;
                        grow.extend(e2.grow);
                        Some(Each {
                            i: e1.i,
                            dest: merge(e1.dest, d2),
                            grow,
                        })
                    }
                };
                Dest::new(
                    ty,
                    DK::Array(Box::new(ArrDest {
                        whole,
                        sum: merge(x.sum, y.sum),
                        each,
                        at,
                    })),
                )
            }
            (DK::Apply(f, d1), DK::Apply(g, d2)) if f.same(&g) => {
                Dest::new(ty, DK::Apply(f, Box::new(merge(*d1, *d2))))
            }
            (DK::Fold(t, tt, d1), DK::Fold(u, _, d2)) if same_sval(&t, &u) => {
                Dest::new(ty, DK::Fold(t, tt, Box::new(merge(*d1, *d2))))
            }
            (DK::Both(mut xs), k) => {
                xs.push(Dest::new(ty.clone(), k));
                Dest::new(ty, DK::Both(xs))
            }
            (k1, k2) => Dest::new(
                ty.clone(),
                DK::Both(vec![Dest::new(ty.clone(), k1), Dest::new(ty, k2)]),
            ),
        }
    })
}

/// Whether a linear term is a variable or zero (lowered again at no cost).
/// Whether a linear term is built from materialised variables, zeros, pairs and injections
/// only (so that [`Lowering::construct`] builds its value without an accumulator).
fn constructible(l: &LTerm, lenv: &LEnv) -> bool {
    deep(|| match &l.kind {
        LTermKind::Var(u) => matches!(lenv.get(&u.id), Some(LBind::Mat(_))),
        LTermKind::Zero(_) => true,
        LTermKind::Pair(a, b) => constructible(a, lenv) && constructible(b, lenv),
        LTermKind::Inl(a, _) | LTermKind::Inr(_, a) => constructible(a, lenv),
        _ => false,
    })
}

fn trivial(l: &LTerm) -> bool {
    matches!(l.kind, LTermKind::Var(_) | LTermKind::Zero(_))
}

impl Lowering {
    /// The destination adding a value of type `ty` into `place` (of its representation type).
    pub(super) fn dest_of_place(&mut self, place: &Place, ty: &LTy) -> Dest {
        deep(|| match ty {
            LTy::Unit => Dest::zero(ty.clone()),
            LTy::Real | LTy::Copower(_) | LTy::Power(_) => Dest::new(
                ty.clone(),
                DK::Places(vec![Target {
                    place: place.clone(),
                    scale: None,
                }]),
            ),
            LTy::Prod(p) | LTy::Sum(p) => {
                let a = self.dest_of_place(&place.field(0), &p.0);
                let b = self.dest_of_place(&place.field(1), &p.1);
                Dest::pair(ty.clone(), a, b)
            }
            LTy::Array(_) => Dest::new(
                ty.clone(),
                DK::Array(Box::new(ArrDest {
                    whole: vec![Target {
                        place: place.clone(),
                        scale: None,
                    }],
                    sum: Dest::zero(ty.as_array().expect("array").clone()),
                    each: None,
                    at: Vec::new(),
                })),
            ),
        })
    }

    /// `d` scaled by `c`: every addition it makes is multiplied by `c` (strong zero).
    fn scaled(&mut self, d: Dest, c: &Atom) -> Dest {
        if matches!(c, Atom::F64(x) if *x == 1.0) {
            return d;
        }
        deep(|| {
            let ty = d.ty.clone();
            let kind = match d.kind {
                DK::Zero => DK::Zero,
                DK::Places(ts) => {
                    DK::Places(ts.into_iter().map(|t| self.scale_target(t, c)).collect())
                }
                DK::Pair(a, b) => {
                    DK::Pair(Box::new(self.scaled(*a, c)), Box::new(self.scaled(*b, c)))
                }
                DK::Array(ad) => {
                    let ad = *ad;
                    DK::Array(Box::new(ArrDest {
                        whole: ad
                            .whole
                            .into_iter()
                            .map(|t| self.scale_target(t, c))
                            .collect(),
                        sum: self.scaled(ad.sum, c),
                        each: ad.each.map(|e| Each {
                            i: e.i,
                            dest: self.scaled(e.dest, c),
                            grow: e.grow,
                        }),
                        at: ad
                            .at
                            .into_iter()
                            .map(|(j, d)| (j, self.scaled(d, c)))
                            .collect(),
                    }))
                }
                DK::Apply(f, d) => DK::Apply(f, Box::new(self.scaled(*d, c))),
                DK::Fold(t, tt, d) => DK::Fold(t, tt, Box::new(self.scaled(*d, c))),
                DK::Both(ds) => DK::Both(ds.into_iter().map(|d| self.scaled(d, c)).collect()),
            };
            Dest::new(ty, kind)
        })
    }

    fn scale_target(&mut self, t: Target, c: &Atom) -> Target {
        let scale = match t.scale {
            None => c.clone(),
            Some(s) => self.let_("c", Ty::F64, Expr::Scale(c.clone(), s)),
        };
        Target {
            place: t.place,
            scale: Some(scale),
        }
    }

    /// Turns an array destination's whole places into element places (`each`), so that it
    /// can be written element by element.
    fn each_of(&mut self, ad: &mut ArrDest, elem: &LTy) {
        if ad.whole.is_empty() && ad.each.is_some() {
            return;
        }
        let (i, mut dest, mut grow) = match ad.each.take() {
            Some(e) => (e.i, e.dest, e.grow),
            None => (
                self.prog.var("i", Ty::I64),
                Dest::zero(elem.clone()),
                Vec::new(),
            ),
        };
        for t in std::mem::take(&mut ad.whole) {
            let d = self.dest_of_place(&t.place.elem(Atom::Var(i.clone())), elem);
            let d = match &t.scale {
                Some(c) => self.scaled(d, c),
                None => d,
            };
            dest = merge(dest, d);
            grow.push(t.place);
        }
        ad.each = Some(Each { i, dest, grow });
    }

    /// A loop over `i < n` lowering element `i` (by `body`) into `sum` and `each(i)` of `ad`
    /// (which has no whole places). A `sum` into one real place is one `sum` loop in the
    /// fixed summation order.
    fn array_loop(
        &mut self,
        ad: ArrDest,
        elem: &LTy,
        n: &Atom,
        body: &mut dyn FnMut(&mut Self, Atom, Dest) -> Result<()>,
    ) -> Result<()> {
        if let Some(e) = &ad.each {
            for p in &e.grow {
                self.emit(Stmt::Grow(p.clone(), n.clone()));
            }
        }
        let i = self.prog.var("i", Ty::I64);
        self.loop_bound(&i, n);
        let ia = Atom::Var(i.clone());
        let each = match &ad.each {
            Some(e) => e.dest.subst(&e.i, &ia),
            None => Dest::zero(elem.clone()),
        };
        let lane_sum = match (&ad.sum.kind, elem) {
            (DK::Places(ts), LTy::Real) if ts.len() == 1 => Some(ts[0].clone()),
            _ => None,
        };
        match lane_sum {
            Some(target) => {
                let blk = self.block(|this| {
                    let a = this.mut_("a", Ty::F64, Expr::Atom(Atom::F64(0.0)));
                    let local = Dest::new(
                        LTy::Real,
                        DK::Places(vec![Target {
                            place: Place::of(&a),
                            scale: None,
                        }]),
                    );
                    body(this, ia.clone(), merge(local, each))?;
                    Ok(this.let_("t", Ty::F64, Expr::Take(a)))
                })?;
                let s = self.let_("s", Ty::F64, Expr::Sum(n.clone(), i, blk));
                self.emit(Stmt::AddTo {
                    place: target.place,
                    value: s,
                    scale: target.scale,
                });
            }
            None => {
                let d = merge(ad.sum, each);
                if d.is_zero() {
                    return Ok(());
                }
                let blk = self.block(|this| {
                    body(this, ia.clone(), d)?;
                    Ok(Atom::Unit)
                })?;
                self.emit(Stmt::For(i, n.clone(), blk));
            }
        }
        Ok(())
    }

    /// `if 0 <= j < n { f }`.
    pub(super) fn if_in_range(
        &mut self,
        j: &Atom,
        n: &Atom,
        f: impl FnOnce(&mut Self) -> Result<()>,
    ) -> Result<()> {
        let below = self.let_("b", Ty::BOOL, Expr::Op(Op::ILt, vec![j.clone(), n.clone()]));
        let neg = self.let_(
            "b",
            Ty::BOOL,
            Expr::Op(Op::ILt, vec![j.clone(), Atom::I64(0)]),
        );
        let inner = self.block(|this| {
            f(this)?;
            Ok(Atom::Unit)
        })?;
        let none = Block::unit(vec![]);
        let outer = self.block(|this| {
            this.emit(Stmt::Do(Expr::If(below, inner, Block::unit(vec![]))));
            Ok(Atom::Unit)
        })?;
        self.emit(Stmt::Do(Expr::If(neg, none, outer)));
        Ok(())
    }

    /// The value of a linear term of type `ty`, materialised.
    pub(super) fn lin_value(
        &mut self,
        l: &LTerm,
        env: &Env,
        lenv: &LEnv,
        ty: &LTy,
    ) -> Result<Atom> {
        match &l.kind {
            LTermKind::Var(u) => {
                if let Some(LBind::Mat(a)) = lenv.get(&u.id) {
                    return Ok(a.clone());
                }
            }
            LTermKind::Zero(_) => {
                let t = self.lin_ty(ty);
                return Ok(self.let_("z", t, Expr::Zero(t)));
            }
            _ => {}
        }
        // Tuples and injections of materialised values are built directly: the values are
        // shared, not copied into a fresh accumulator (a loop's tangent `(dγ, ds)` would
        // otherwise copy every array of `dγ` at every step).
        if constructible(l, lenv) {
            return Ok(self.construct(l, lenv, ty));
        }
        let t = self.lin_ty(ty);
        let acc = self.mut_("acc", t, Expr::Zero(t));
        let d = self.dest_of_place(&Place::of(&acc), ty);
        self.enter_barrier();
        let r = self.linear(l, env, lenv, d);
        self.exit_barrier();
        r?;
        Ok(self.let_("v", t, Expr::Take(acc)))
    }

    /// The value of a [`constructible`] term.
    fn construct(&mut self, l: &LTerm, lenv: &LEnv, ty: &LTy) -> Atom {
        deep(|| {
            let t = self.lin_ty(ty);
            match &l.kind {
                LTermKind::Var(u) => match lenv.get(&u.id) {
                    Some(LBind::Mat(a)) => a.clone(),
                    _ => unreachable!("checked by `constructible`"),
                },
                LTermKind::Zero(_) => self.let_("z", t, Expr::Zero(t)),
                LTermKind::Pair(a, b) => {
                    let (ta, tb) = ty.as_prod().expect("a pair type");
                    let (ta, tb) = (ta.clone(), tb.clone());
                    let x = self.construct(a, lenv, &ta);
                    let y = self.construct(b, lenv, &tb);
                    self.let_("p", t, Expr::Tuple(vec![x, y]))
                }
                LTermKind::Inl(a, _) | LTermKind::Inr(_, a) => {
                    let (ta, tb) = ty.as_sum().expect("a sum type");
                    let (ta, tb) = (ta.clone(), tb.clone());
                    let left = matches!(l.kind, LTermKind::Inl(..));
                    let (inner, other) = if left { (ta, tb) } else { (tb, ta) };
                    let x = self.construct(a, lenv, &inner);
                    let ot = self.lin_ty(&other);
                    let z = self.let_("z", ot, Expr::Zero(ot));
                    let parts = if left { vec![x, z] } else { vec![z, x] };
                    self.let_("p", t, Expr::Tuple(parts))
                }
                _ => unreachable!("checked by `constructible`"),
            }
        })
    }

    /// A mutable variable that a destination adds into as a whole, at a path of pair
    /// components whose siblings are zero-dimensional (unit) and dropped.
    fn root_in(&mut self, d: &Dest) -> Option<(super::super::MutVar, Vec<u32>)> {
        fn unit_only(t: &LTy) -> bool {
            match t {
                LTy::Unit => true,
                LTy::Prod(p) | LTy::Sum(p) => unit_only(&p.0) && unit_only(&p.1),
                _ => false,
            }
        }
        if let Some(m) = self.whole_root(d)
            && m.0.ty == self.lin_ty(&d.ty)
        {
            return Some((m, Vec::new()));
        }
        if d.scaled {
            return None;
        }
        let DK::Pair(a, b) = &d.kind else {
            return None;
        };
        for (k, x, y) in [(0, a, b), (1, b, a)] {
            if y.is_zero() && unit_only(&y.ty) {
                if let Some((m, mut p)) = self.root_in(x) {
                    p.insert(0, k);
                    return Some((m, p));
                }
            }
        }
        None
    }

    /// `a` at `path` inside a value of type `ty`, zeros elsewhere.
    fn wrap(&mut self, a: Atom, ty: &LTy, path: &[u32]) -> Atom {
        let Some((&k, rest)) = path.split_first() else {
            return a;
        };
        let (t0, t1) = ty
            .as_prod()
            .or_else(|| ty.as_sum())
            .map(|(x, y)| (x.clone(), y.clone()))
            .expect("a pair type on the path");
        let (inner, other) = if k == 0 { (&t0, &t1) } else { (&t1, &t0) };
        let x = self.wrap(a, inner, rest);
        let ot = self.lin_ty(other);
        let z = self.let_("z", ot, Expr::Zero(ot));
        let parts = if k == 0 { vec![x, z] } else { vec![z, x] };
        let t = self.lin_ty(ty);
        self.let_("p", t, Expr::Tuple(parts))
    }

    /// The mutable variable a destination adds into as a whole (every component at its own
    /// field path, unscaled), if it is one.
    fn whole_root(&self, d: &Dest) -> Option<super::super::MutVar> {
        fn leaf(d: &Dest) -> Option<&Place> {
            match &d.kind {
                DK::Places(ts) => ts.first().map(|t| &t.place),
                DK::Array(ad) => ad.whole.first().map(|t| &t.place),
                DK::Pair(a, b) => leaf(a).or_else(|| leaf(b)),
                _ => None,
            }
        }
        fn matches(d: &Dest, root: u32, path: &mut Vec<u32>) -> bool {
            if d.scaled {
                return false;
            }
            let at = |p: &Place, path: &[u32]| {
                p.root.0.id == root
                    && p.path.len() == path.len()
                    && p.path
                        .iter()
                        .zip(path)
                        .all(|(s, k)| matches!(s, super::super::Step::Field(j) if j == k))
            };
            match &d.kind {
                DK::Zero => matches!(d.ty, LTy::Unit),
                DK::Places(ts) => ts.len() == 1 && ts[0].scale.is_none() && at(&ts[0].place, path),
                DK::Array(ad) => {
                    ad.whole.len() == 1
                        && ad.whole[0].scale.is_none()
                        && at(&ad.whole[0].place, path)
                        && ad.sum.is_zero()
                        && ad.each.is_none()
                        && ad.at.is_empty()
                }
                DK::Pair(a, b) => {
                    path.push(0);
                    let ok = matches(a, root, path);
                    path.pop();
                    path.push(1);
                    let ok = ok && matches(b, root, path);
                    path.pop();
                    ok
                }
                _ => false,
            }
        }
        let p = leaf(d)?;
        let root = p.root.clone();
        matches(d, root.0.id, &mut Vec::new()).then_some(root)
    }

    /// Starts a materialisation: an accumulator that is read when it ends.
    fn enter_barrier(&mut self) {
        self.next_barrier += 1;
        self.barriers.push((self.next_barrier, Vec::new()));
    }

    /// Ends a materialisation: a sunk variable with a destination inside it whose term is
    /// not lowered yet can no longer be sunk (its contribution would come after the read).
    fn exit_barrier(&mut self) {
        let (b, mut ks) = self.barriers.pop().expect("a materialisation in progress");
        // Only sinks given a destination inside it can have one (the list may name sinks that
        // have gone or lost it since: the test is on their state now).
        ks.sort_unstable();
        ks.dedup();
        for k in ks {
            let Some(s) = self.sinks.stack.get(k) else {
                continue;
            };
            if s.term.is_some() && s.dests.iter().any(|(_, x)| *x == Some(b)) {
                self.sinks.fail(k);
            }
        }
    }

    /// The materialised value of a linear variable captured by a power.
    pub(super) fn linear_var_value(&mut self, x: &TVar, lenv: &LEnv) -> Result<Atom> {
        let ty = x
            .lin_ty()
            .unwrap_or_else(|| panic!("internal error: {x:?} is not linear"))
            .clone();
        match lenv.get(&x.id) {
            Some(LBind::Mat(a)) => Ok(a.clone()),
            Some(LBind::Zero) => {
                let t = self.lin_ty(&ty);
                Ok(self.let_("z", t, Expr::Zero(t)))
            }
            Some(LBind::Sink(k)) => {
                // A sunk variable captured by a power is a nested occurrence: give up sinking.
                self.sinks.fail(*k);
                let t = self.lin_ty(&ty);
                Ok(self.let_("z", t, Expr::Zero(t)))
            }
            None => panic!("internal error: unbound linear variable {x:?}"),
        }
    }

    /// `f • x` for a materialised `x`, materialised (`f` of type `dom ⊸ cod`).
    pub(super) fn lin_apply_value(
        &mut self,
        f: &SVal,
        x: Atom,
        dom: &LTy,
        cod: &LTy,
    ) -> Result<Atom> {
        let t = self.lin_ty(cod);
        let acc = self.mut_("acc", t, Expr::Zero(t));
        let d = self.dest_of_place(&Place::of(&acc), cod);
        let ft = TTy::lin_fun(dom.clone(), cod.clone());
        self.enter_barrier();
        let r = self.lin_app(&FunRef::Static(f.clone(), ft), LArg::Mat(x), d);
        self.exit_barrier();
        r?;
        Ok(self.let_("v", t, Expr::Take(acc)))
    }

    /// `f • arg` into `d`.
    fn lin_app(&mut self, f: &FunRef, arg: LArg, d: Dest) -> Result<()> {
        if d.is_zero() {
            return Ok(());
        }
        let (fv, ft) = match f {
            FunRef::Static(v, t) => (v.clone(), t.clone()),
            FunRef::Elem(fs, k, t) => {
                // `zipWith`'s result has the length of the function array: elements past it
                // are dropped.
                let (fs, k, t) = (fs.clone(), k.clone(), t.clone());
                let n = self.let_("n", Ty::I64, Expr::Len(fs.clone()));
                let inside = self.let_("b", Ty::BOOL, Expr::Op(Op::ILt, vec![k.clone(), n]));
                let blk = self.block(|this| {
                    let site = this.internal_site();
                    let et = this.ty(&t);
                    let g = this.let_("f", et, Expr::Index(fs, k, site));
                    this.lin_app(&FunRef::Static(SVal::Dyn(g), t), arg, d)?;
                    Ok(Atom::Unit)
                })?;
                self.emit(Stmt::Do(Expr::If(inside, blk, Block::unit(vec![]))));
                return Ok(());
            }
        };
        let (dom, cod) = ft
            .as_lin_fun()
            .unwrap_or_else(|| panic!("internal error: • of a {ft}"));
        let (dom, cod) = (dom.clone(), cod.clone());
        match &fv {
            SVal::LinLam(c) => {
                let TermKind::LinLam(v, body) = &c.term.kind else {
                    panic!("internal error: a static linear function is not a λ̲")
                };
                let (v, body, env) = (v.clone(), body.clone(), c.env.clone());
                self.bind_linear(&v, arg, &dom, &mut |this, b| {
                    let mut lenv = LEnv::new();
                    lenv.insert(v.id, b);
                    this.linear(&body, &env, &lenv, d.clone())
                })
            }
            SVal::Dyn(fa) => {
                let x = self.arg_value(arg, &dom)?;
                let e = self.ty(&ft);
                if let Some((m, path)) = self.root_in(&d) {
                    // Into a whole accumulator (beside zero-dimensional parts): passed to the
                    // function, which adds into it.
                    let g = self.acc_apply_of(e);
                    let rt = self.lin_ty(&cod);
                    let a = self.let_("a", m.0.ty, Expr::Take(m.clone()));
                    let a = self.wrap(a, &cod, &path);
                    let y = self.let_("y", rt, Expr::Call(g, vec![fa.clone(), x, a]));
                    let mut v = y;
                    let mut t = cod.clone();
                    for k in path {
                        let (t0, t1) = t
                            .as_prod()
                            .or_else(|| t.as_sum())
                            .map(|(a, b)| (a.clone(), b.clone()))
                            .expect("a pair type on the path");
                        t = if k == 0 { t0 } else { t1 };
                        let it = self.lin_ty(&t);
                        v = self.let_("y", it, Expr::Proj(v, k));
                    }
                    self.emit(Stmt::Set(m, v));
                    return Ok(());
                }
                let (apply, _) = self.apply_of(e);
                let rt = self.lin_ty(&cod);
                let y = self.let_("y", rt, Expr::Call(apply, vec![fa.clone(), x]));
                self.add_value(&y, d)
            }
            SVal::Pair(_) | SVal::Lam(_) => panic!("internal error: • of a non-linear value"),
        }
    }

    fn arg_value(&mut self, arg: LArg, ty: &LTy) -> Result<Atom> {
        match arg {
            LArg::Mat(a) => Ok(a),
            LArg::Term(l, env, lenv) => self.lin_value(&l, &env, &lenv, ty),
        }
    }

    /// Binds the linear variable `v` to `arg` for `k`: zero if unused, sunk if every
    /// occurrence is straight-line (see the module doc), materialised otherwise.
    fn bind_linear(
        &mut self,
        v: &TVar,
        arg: LArg,
        ty: &LTy,
        k: &mut dyn FnMut(&mut Self, LBind) -> Result<()>,
    ) -> Result<()> {
        let (l, env, lenv) = match arg {
            LArg::Mat(a) => return k(self, LBind::Mat(a)),
            LArg::Term(l, env, lenv) => (l, env, lenv),
        };
        let (count, nested) = self.occ.get(v.id);
        if count == 0 {
            return k(self, LBind::Zero);
        }
        match &l.kind {
            LTermKind::Zero(_) => return k(self, LBind::Zero),
            LTermKind::Var(u) => {
                let b = lenv
                    .get(&u.id)
                    .cloned()
                    .unwrap_or_else(|| panic!("internal error: unbound linear {u:?}"));
                return k(self, b);
            }
            _ => {}
        }
        if !nested && !self.must_materialise.contains(&v.id) {
            let mark = self.blocks.last().map_or(0, Vec::len);
            let cse = self.cse_mark();
            // What the enclosing sinks have collected so far: a discarded attempt must not
            // leave its destinations (or its early lowering of their terms) behind.
            let (id, attempt) = self.sinks.begin(Sink {
                depth: self.blocks.len(),
                dests: Vec::new(),
                expected: count,
                term: Some((l.clone(), env.clone(), lenv.clone(), ty.clone())),
                collect: false,
                failed: false,
            });
            let r = k(self, LBind::Sink(id));
            let failed = r.is_ok() && self.sinks.stack[id].failed;
            let sink = self.sinks.end(attempt, failed);
            r?;
            if self.sinks.abort.is_some() {
                // An enclosing attempt failed: it discards this and lowers it again.
                return Ok(());
            }
            if !failed {
                match sink.term {
                    // Lowered when its last occurrence was (inside a materialisation).
                    None => return Ok(()),
                    // Occurrences missing (a use with nowhere to go is skipped): lower the term
                    // into what was recorded, all of it live (a destination inside a
                    // materialisation that ended failed the sink).
                    Some((l, env, lenv, ty)) => {
                        let d = sink
                            .dests
                            .into_iter()
                            .map(|(d, _)| d)
                            .fold(Dest::zero(ty), merge);
                        return self.linear(&l, &env, &lenv, d);
                    }
                }
            }
            // An occurrence was nested after all: undo and materialise.
            self.blocks
                .last_mut()
                .expect("the binding block")
                .truncate(mark);
            self.cse_undo(cse);
            self.must_materialise.insert(v.id);
        }
        let x = self.lin_value(&l, &env, &lenv, ty)?;
        k(self, LBind::Mat(x))
    }

    /// Records an occurrence of a sunk variable into `d`; with its last occurrence, lowers
    /// its term into all of them here (so that a materialisation in progress, whose
    /// accumulator some of them target, sees the contributions before it is read).
    fn sink_occurrence(&mut self, k: usize, d: Dest) -> Result<()> {
        let blocks = self.blocks.len();
        let barrier = self.barriers.last_mut().map(|(b, ks)| {
            ks.push(k);
            *b
        });
        let logged = self.sinks.open > 0;
        let s = &mut self.sinks.stack[k];
        if s.depth != blocks || (s.term.is_none() && !s.collect) {
            self.sinks.fail(k);
            return Ok(());
        }
        s.dests.push((d, barrier));
        if s.collect {
            if logged {
                self.sinks.log.push(SinkUndo::Pushed(k));
            }
            return Ok(());
        }
        if s.dests.len() as u32 == s.expected {
            let term = s.term.take().expect("checked");
            let dests = std::mem::take(&mut s.dests);
            let d = dests
                .iter()
                .map(|(d, _)| d.clone())
                .fold(Dest::zero(term.3.clone()), merge);
            let (l, env, lenv) = (term.0.clone(), term.1.clone(), term.2.clone());
            if logged {
                self.sinks.log.push(SinkUndo::Pushed(k));
                self.sinks.log.push(SinkUndo::Lowered(k, term, dests));
            }
            self.linear(&l, &env, &lenv, d)?;
        } else if logged {
            self.sinks.log.push(SinkUndo::Pushed(k));
        }
        Ok(())
    }

    /// `lchain fs a` (forward) or `lchainRev fs a` (reverse) into `d` (note 10): a loop over the
    /// recorded step derivatives `fs`, the carried tangent (cotangent) in a mutable variable,
    /// and, in reverse, the environment's cotangent added up in an accumulator. With `outs` (a
    /// taped loop's `lchainScan`/`lchainScanRev`), each step also outputs its record's tangent
    /// (added into element `k` of an array grown once to the number of steps) or takes its
    /// record's cotangent (element `k` of the second half of `a`, zero past its end).
    fn chain(
        &mut self,
        fs: &crate::target::term::Term,
        a: &LTerm,
        (rev, outs): (bool, bool),
        env: &Env,
        lenv: &LEnv,
        d: Dest,
    ) -> Result<()> {
        let fst = self.type_of.term(fs);
        let ft = fst
            .as_array()
            .unwrap_or_else(|| panic!("internal error: lchain over a {fst}"))
            .clone();
        let (dom, cod) = ft
            .as_lin_fun()
            .map(|(x, y)| (x.clone(), y.clone()))
            .unwrap_or_else(|| panic!("internal error: lchain of a {ft}"));
        let et = self.ty(&ft);
        let fsa = self.atom(fs, env)?;
        let n = self.let_("n", Ty::I64, Expr::Len(fsa.clone()));
        let site = self.internal_site();
        let (dom_t, cod_t) = (self.lin_ty(&dom), self.lin_ty(&cod));
        // The steps' sum `A ⊕ B` and record type `C` (unit without records), on the output
        // side forward and the input side in reverse.
        let (sum, ct) = {
            let side = if rev { &dom } else { &cod };
            if outs {
                let (ab, c) = side.as_prod().expect("(A ⊕ B) × C");
                (ab.clone(), Some(c.clone()))
            } else {
                (side.clone(), None)
            }
        };
        let (at, bt) = sum
            .as_sum()
            .map(|(x, y)| (x.clone(), y.clone()))
            .expect("A ⊕ B");
        let (sum_t, ait, bit) = (self.lin_ty(&sum), self.lin_ty(&at), self.lin_ty(&bt));
        let cit = ct.as_ref().map(|c| self.lin_ty(c));
        let outs_ty = ct.as_ref().map(|c| LTy::array(c.clone()));
        let outs_t = outs_ty.as_ref().map(|t| self.lin_ty(t));
        if !rev {
            // fs : Array (G × A ⊸ (A ⊕ B) [× C]), a : G × A; result B [× Array C].
            let git = self.lin_ty(dom.as_prod().expect("G × A").0);
            let da = self.lin_value(a, env, lenv, &dom)?;
            let dg = self.let_("dg", git, Expr::Proj(da.clone(), 0));
            let ds = self.let_("ds", ait, Expr::Proj(da, 1));
            let w = self.mut_("w", ait, Expr::Atom(ds));
            let out = self.mut_("wb", bit, Expr::Zero(bit));
            let cs = outs_t.map(|t| {
                let cs = self.mut_("cs", t, Expr::Zero(t));
                self.emit(Stmt::Grow(Place::of(&cs), n.clone()));
                cs
            });
            let i = self.prog.var("k", Ty::I64);
            self.loop_bound(&i, &n);
            let ia = Atom::Var(i.clone());
            let body = self.block(|this| {
                let f = this.let_("f", et, Expr::Index(fsa.clone(), ia.clone(), site));
                let s = this.let_("s", ait, Expr::Take(w.clone()));
                let x = this.let_("x", dom_t, Expr::Tuple(vec![dg.clone(), s]));
                let r = this.lin_apply_value(&SVal::Dyn(f), x, &dom, &cod)?;
                let ab = match (&cs, cit) {
                    (Some(cs), Some(cit)) => {
                        let c = this.let_("c", cit, Expr::Proj(r.clone(), 1));
                        this.emit(Stmt::AddTo {
                            place: Place::of(cs).elem(ia.clone()),
                            value: c,
                            scale: None,
                        });
                        this.let_("ab", sum_t, Expr::Proj(r, 0))
                    }
                    _ => r,
                };
                let next = this.let_("s", ait, Expr::Proj(ab.clone(), 0));
                let b = this.let_("b", bit, Expr::Proj(ab, 1));
                this.emit(Stmt::Set(w.clone(), next));
                this.emit(Stmt::Set(out.clone(), b));
                Ok(Atom::Unit)
            })?;
            self.emit(Stmt::For(i, n, body));
            let b = self.let_("b", bit, Expr::Take(out));
            let r = match (cs, outs_ty, outs_t) {
                (Some(cs), Some(oty), Some(ot)) => {
                    let c = self.let_("cs", ot, Expr::Take(cs));
                    let rt = self.lin_ty(&LTy::prod(bt, oty));
                    self.let_("r", rt, Expr::Tuple(vec![b, c]))
                }
                _ => b,
            };
            self.add_value(&r, d)
        } else {
            // fs : Array ((A ⊕ B) [× C] ⊸ G × A), a : B [× Array C]; result G × A.
            let git = self.lin_ty(cod.as_prod().expect("G × A").0);
            let (v, vcs) = match (&outs_ty, outs_t) {
                (Some(oty), Some(ot)) => {
                    let arg = LTy::prod(bt.clone(), oty.clone());
                    let v = self.lin_value(a, env, lenv, &arg)?;
                    let vb = self.let_("vb", bit, Expr::Proj(v.clone(), 0));
                    (vb, Some(self.let_("vcs", ot, Expr::Proj(v, 1))))
                }
                _ => (self.lin_value(a, env, lenv, &bt)?, None),
            };
            let za = self.let_("z", ait, Expr::Zero(ait));
            let w0 = self.let_("w", sum_t, Expr::Tuple(vec![za, v]));
            let w = self.mut_("w", sum_t, Expr::Atom(w0));
            // The environment's cotangent, added to in place by each step's derivative
            // (`acc_apply`: destination passing across the call, so that a step adding a
            // one-hot costs O(1), not the length of the array).
            let acc = self.mut_("acc", cod_t, Expr::Zero(cod_t));
            let acc_apply = self.acc_apply_of(et);
            let k = self.mut_("k", Ty::I64, Expr::Atom(n));
            let body = self.block(|this| {
                let kk = this.let_("k", Ty::I64, Expr::Get(k.clone()));
                let stop = this.let_(
                    "b",
                    Ty::BOOL,
                    Expr::Op(Op::ILt, vec![kk.clone(), Atom::I64(1)]),
                );
                this.emit(Stmt::Do(Expr::If(
                    stop,
                    Block::unit(vec![Stmt::Break]),
                    Block::unit(vec![]),
                )));
                let j = this.let_("j", Ty::I64, Expr::Op(Op::IAdd, vec![kk, Atom::I64(-1)]));
                this.emit(Stmt::Set(k.clone(), j.clone()));
                let f = this.let_("f", et, Expr::Index(fsa.clone(), j.clone(), site));
                let wv = this.let_("w", sum_t, Expr::Take(w.clone()));
                let x = match (&vcs, cit) {
                    (Some(vcs), Some(cit)) => {
                        let c = this.let_("c", cit, Expr::IndexOr0(vcs.clone(), j));
                        this.let_("x", dom_t, Expr::Tuple(vec![wv, c]))
                    }
                    _ => wv,
                };
                let a0 = this.let_("a", cod_t, Expr::Take(acc.clone()));
                let r = this.let_("r", cod_t, Expr::Call(acc_apply, vec![f, x, a0]));
                let g = this.let_("g", git, Expr::Proj(r.clone(), 0));
                let s = this.let_("s", ait, Expr::Proj(r, 1));
                let za = this.let_("z", ait, Expr::Zero(ait));
                let a1 = this.let_("a", cod_t, Expr::Tuple(vec![g, za]));
                this.emit(Stmt::Set(acc.clone(), a1));
                let zb = this.let_("z", bit, Expr::Zero(bit));
                let next = this.let_("w", sum_t, Expr::Tuple(vec![s, zb]));
                this.emit(Stmt::Set(w.clone(), next));
                Ok(Atom::Unit)
            })?;
            self.emit(Stmt::Loop(body));
            let a = self.let_("a", cod_t, Expr::Take(acc));
            let g = self.let_("g", git, Expr::Proj(a, 0));
            let wl = self.let_("w", sum_t, Expr::Take(w));
            let s = self.let_("s", ait, Expr::Proj(wl, 0));
            let r = self.let_("r", cod_t, Expr::Tuple(vec![g, s]));
            self.add_value(&r, d)
        }
    }

    /// Adds a materialised linear value into a destination.
    fn add_value(&mut self, x: &Atom, d: Dest) -> Result<()> {
        deep(|| {
            let ty = d.ty.clone();
            match d.kind {
                DK::Zero => {}
                DK::Places(ts) => {
                    for t in ts {
                        self.emit(Stmt::AddTo {
                            place: t.place,
                            value: x.clone(),
                            scale: t.scale,
                        });
                    }
                }
                DK::Pair(a, b) => {
                    for (k, d) in [(0, *a), (1, *b)] {
                        if !d.is_zero() {
                            let t = self.lin_ty(&d.ty);
                            let c = self.let_("c", t, Expr::Proj(x.clone(), k));
                            self.add_value(&c, d)?;
                        }
                    }
                }
                DK::Array(ad) => {
                    let mut ad = *ad;
                    let elem = ty.as_array().expect("an array destination").clone();
                    for t in std::mem::take(&mut ad.whole) {
                        self.emit(Stmt::AddTo {
                            place: t.place,
                            value: x.clone(),
                            scale: t.scale,
                        });
                    }
                    let at = std::mem::take(&mut ad.at);
                    let et = self.lin_ty(&elem);
                    for (j, dj) in at {
                        let y = self.let_("y", et, Expr::IndexOr0(x.clone(), j));
                        self.add_value(&y, dj)?;
                    }
                    if !ad.sum.is_zero() || ad.each.is_some() {
                        let n = self.let_("n", Ty::I64, Expr::Len(x.clone()));
                        let site = self.internal_site();
                        self.array_loop(ad, &elem, &n, &mut |this, i, d| {
                            let y = this.let_("y", et, Expr::Index(x.clone(), i, site));
                            this.add_value(&y, d)
                        })?;
                    }
                }
                DK::Apply(f, d) => self.lin_app(&f, LArg::Mat(x.clone()), *d)?,
                DK::Fold(t, tt, d) => {
                    let (kt, vt) = ty.as_copower().expect("a copower destination");
                    let (kt, vt) = (kt.clone(), vt.clone());
                    let n = self.let_("n", Ty::I64, Expr::Len(x.clone()));
                    let i = self.prog.var("i", Ty::I64);
                    let ia = Atom::Var(i.clone());
                    let site = self.internal_site();
                    let kit = self.ty(&kt);
                    let vit = self.lin_ty(&vt);
                    let et = self.prog.types.tuple(vec![kit, vit]);
                    let blk = self.block(|this| {
                        let e = this.let_("e", et, Expr::Index(x.clone(), ia, site));
                        let key = this.let_("k", kit, Expr::Proj(e.clone(), 0));
                        let val = this.let_("l", vit, Expr::Proj(e, 1));
                        let g = this.app(&t, SVal::Dyn(key), &tt)?;
                        let gt = tt.as_fun().expect("a function").1.clone();
                        this.lin_app(&FunRef::Static(g, gt), LArg::Mat(val), (*d).clone())?;
                        Ok(Atom::Unit)
                    })?;
                    self.emit(Stmt::For(i, n, blk));
                }
                DK::Both(ds) => {
                    for d in ds {
                        self.add_value(x, d)?;
                    }
                }
            }
            Ok(())
        })
    }

    /// Lowers the linear term `l` into `d`.
    pub(super) fn linear(&mut self, l: &LTerm, env: &Env, lenv: &LEnv, d: Dest) -> Result<()> {
        if d.is_zero() || self.sinks.abort.is_some() {
            return Ok(());
        }
        deep(|| {
            let mut env = env.clone();
            let mut l = l;
            while let LTermKind::Let(p, t, b) = &l.kind {
                let v = self.term(t, &env)?;
                let pt = self.type_of.term(t);
                self.bind(p, v, &pt, &mut env)?;
                l = b;
            }
            self.linear_node(l, &env, lenv, d)
        })
    }

    fn linear_node(&mut self, l: &LTerm, env: &Env, lenv: &LEnv, d: Dest) -> Result<()> {
        use LTermKind as K;
        match &l.kind {
            K::Var(u) => match lenv.get(&u.id) {
                Some(LBind::Mat(a)) => {
                    let a = a.clone();
                    self.add_value(&a, d)
                }
                Some(LBind::Sink(k)) => self.sink_occurrence(*k, d),
                Some(LBind::Zero) => Ok(()),
                None => panic!("internal error: unbound linear variable {u:?}"),
            },
            K::Zero(_) => Ok(()),
            K::Chain(fs, a, rev, outs) => self.chain(fs, a, (*rev, *outs), env, lenv, d),
            K::Plus(..) if d.scaled => {
                // c * (a + b): the sum first (see `Dest::scaled`).
                let ty = d.ty.clone();
                let x = self.lin_value(l, env, lenv, &ty)?;
                self.add_value(&x, d)
            }
            K::Plus(a, b) => {
                self.linear(a, env, lenv, d.clone())?;
                self.linear(b, env, lenv, d)
            }
            K::Fst(a) | K::Snd(a) | K::FromLeft(a) | K::FromRight(a) => {
                let at = self.type_of.linear(a);
                let (t0, t1) = at
                    .as_prod()
                    .or_else(|| at.as_sum())
                    .map(|(x, y)| (x.clone(), y.clone()))
                    .unwrap_or_else(|| panic!("internal error: projection of a {at}"));
                let first = matches!(l.kind, K::Fst(_) | K::FromLeft(_));
                let pd = if first {
                    Dest::pair(at, d, Dest::zero(t1))
                } else {
                    Dest::pair(at, Dest::zero(t0), d)
                };
                self.linear(a, env, lenv, pd)
            }
            K::Let(..) => self.linear(l, env, lenv, d),
            K::LinLet(u, a, b) => {
                let ty = u.lin_ty().expect("a linear variable").clone();
                let arg = LArg::Term(a.clone(), env.clone(), lenv.clone());
                let (uid, b) = (u.id, b.clone());
                self.bind_linear(u, arg, &ty, &mut |this, bind| {
                    let lenv = lenv.update(uid, bind);
                    this.linear(&b, env, &lenv, d.clone())
                })
            }
            K::App(f, a) => {
                let fv = self.term(f, env)?;
                let ft = self.type_of.term(f);
                self.lin_app(
                    &FunRef::Static(fv, ft),
                    LArg::Term(a.clone(), env.clone(), lenv.clone()),
                    d,
                )
            }
            K::Scale(c, a) => {
                let c = self.atom(c, env)?;
                let d = self.scaled(d, &c);
                self.linear(a, env, lenv, d)
            }
            K::Sum(a) => {
                let at = self.type_of.linear(a);
                let ad = ArrDest {
                    whole: Vec::new(),
                    sum: d,
                    each: None,
                    at: Vec::new(),
                };
                let d = Dest::array(at, ad);
                self.linear(a, env, lenv, d)
            }
            K::Index(a, i) => {
                let i = self.atom(i, env)?;
                let at = self.type_of.linear(a);
                let elem = at.as_array().expect("an array").clone();
                let ad = ArrDest {
                    whole: Vec::new(),
                    sum: Dest::zero(elem),
                    each: None,
                    at: vec![(i, d)],
                };
                let d = Dest::array(at, ad);
                self.linear(a, env, lenv, d)
            }
            K::CopowFold(t, a) => {
                let tv = self.term(t, env)?;
                let tt = self.type_of.term(t);
                let at = self.type_of.linear(a);
                let d = Dest::new(at, DK::Fold(tv, tt, Box::new(d)));
                self.linear(a, env, lenv, d)
            }
            K::PowApp(a, t) => {
                if let K::PowLam(b, body) = &a.kind {
                    let tv = self.term(t, env)?;
                    let mut env = env.clone();
                    env.insert(b.id, tv);
                    return self.linear(body, &env, lenv, d);
                }
                let pt = self.type_of.linear(a);
                let p = self.lin_value(a, env, lenv, &pt)?;
                let (bt, vt) = pt.as_power().expect("a power");
                let (bt, vt) = (bt.clone(), vt.clone());
                let b = self.atom(t, env)?;
                let list_ty = self.lin_ty(&pt);
                let kt = match self.prog.types.kind(list_ty) {
                    super::super::TyKind::List(k, _) => *k,
                    _ => panic!("internal error: a power is not a list"),
                };
                let (apply, _) = self.apply_of(kt);
                let _ = bt;
                let n = self.let_("n", Ty::I64, Expr::Len(p.clone()));
                let i = self.prog.var("i", Ty::I64);
                let ia = Atom::Var(i.clone());
                let site = self.internal_site();
                let et = self.prog.types.tuple(vec![kt, Ty::F64]);
                let rt = self.lin_ty(&vt);
                let blk = self.block(|this| {
                    let e = this.let_("e", et, Expr::Index(p, ia, site));
                    let g = this.let_("g", kt, Expr::Proj(e.clone(), 0));
                    let c = this.let_("c", Ty::F64, Expr::Proj(e, 1));
                    let y = this.let_("y", rt, Expr::Call(apply, vec![g, b]));
                    let d = this.scaled(d, &c);
                    this.add_value(&y, d)?;
                    Ok(Atom::Unit)
                })?;
                self.emit(Stmt::For(i, n, blk));
                Ok(())
            }
            K::Case(t, p, a, q, b) => {
                if matches!(d.kind, DK::Both(_)) {
                    let x = self.lin_value(l, env, lenv, &d.ty.clone())?;
                    return self.add_value(&x, d);
                }
                let s = self.atom(t, env)?;
                let st = self.type_of.term(t);
                let (lt, rt) = st
                    .as_sum()
                    .map(|(x, y)| (x.clone(), y.clone()))
                    .unwrap_or_else(|| panic!("internal error: case on a {st}"));
                let mut arms = Vec::new();
                for (pat, body, pt) in [(p, a, lt), (q, b, rt)] {
                    let it = self.ty(&pt);
                    let x = self.prog.var("c", it);
                    let mut env = env.clone();
                    let d = d.clone();
                    let body = self.block(|this| {
                        this.bind(pat, SVal::Dyn(Atom::Var(x.clone())), &pt, &mut env)?;
                        this.linear(body, &env, lenv, d)?;
                        Ok(Atom::Unit)
                    })?;
                    arms.push(super::super::Arm {
                        bind: Some(x),
                        body,
                    });
                }
                self.emit(Stmt::Do(Expr::Match(s, arms)));
                Ok(())
            }
            _ => self.constructor(l, env, lenv, d),
        }
    }

    /// A constructor form (pairs, injections, array forms, copowers, powers) into `d`.
    fn constructor(&mut self, l: &LTerm, env: &Env, lenv: &LEnv, d: Dest) -> Result<()> {
        use LTermKind as K;
        let ty = d.ty.clone();
        let matches = matches!(
            (&l.kind, &d.kind),
            (K::Pair(..) | K::Inl(..) | K::Inr(..), DK::Pair(..))
                | (
                    K::Replicate(..) | K::OneHot(..) | K::ZipWith(..) | K::Map(..) | K::Build(..),
                    DK::Array(_),
                )
                | (K::Copower(..) | K::PowLam(..), DK::Places(_))
                | (K::Copower(..), DK::Fold(..))
        );
        if !matches {
            if let DK::Apply(f, d2) = d.kind {
                return self.lin_app(&f, LArg::Term(l.clone(), env.clone(), lenv.clone()), *d2);
            }
            if std::env::var("IRDBG").is_ok() {
                eprintln!("materialise {} into {}", l, d.shape());
            }
            let x = self.lin_value(l, env, lenv, &ty)?;
            return self.add_value(&x, d);
        }
        match (&l.kind, d.kind) {
            (K::Pair(a, b), DK::Pair(da, db)) => {
                self.linear(a, env, lenv, *da)?;
                self.linear(b, env, lenv, *db)
            }
            (K::Inl(a, _), DK::Pair(da, _)) => self.linear(a, env, lenv, *da),
            (K::Inr(_, b), DK::Pair(_, db)) => self.linear(b, env, lenv, *db),
            (K::Copower(t, a), DK::Fold(f, ft, d2)) => {
                let tv = self.term(t, env)?;
                let g = self.app(&f, tv, &ft)?;
                let gt = ft.as_fun().expect("a function").1.clone();
                self.lin_app(
                    &FunRef::Static(g, gt),
                    LArg::Term(a.clone(), env.clone(), lenv.clone()),
                    *d2,
                )
            }
            (K::Copower(t, a), DK::Places(ts)) => {
                let (kt, vt) = ty.as_copower().expect("a copower");
                let (kt, vt) = (kt.clone(), vt.clone());
                let key = self.atom(t, env)?;
                let val = self.lin_value(a, env, lenv, &vt)?;
                let kit = self.ty(&kt);
                let vit = self.lin_ty(&vt);
                let et = self.prog.types.tuple(vec![kit, vit]);
                let e = self.let_("e", et, Expr::Tuple(vec![key, val]));
                let lt = self.lin_ty(&ty);
                let list = self.let_("cp", lt, Expr::Array(lt, vec![e]));
                self.add_places(&list, ts);
                Ok(())
            }
            (K::PowLam(..), DK::Places(ts)) => {
                let lt = self.lin_ty(&ty);
                let kt = match self.prog.types.kind(lt) {
                    super::super::TyKind::List(k, _) => *k,
                    _ => panic!("internal error: a power is not a list"),
                };
                let (tag, captured) = self.variant(kt, Child::L(l));
                let payload = self.captured(&captured, env, Some(lenv))?;
                let clo = self.let_("clo", kt, Expr::Variant(kt, tag, payload));
                let et = self.prog.types.tuple(vec![kt, Ty::F64]);
                let e = self.let_("e", et, Expr::Tuple(vec![clo, Atom::F64(1.0)]));
                let list = self.let_("pw", lt, Expr::Array(lt, vec![e]));
                self.add_places(&list, ts);
                Ok(())
            }
            (_, DK::Array(ad)) => self.array_constructor(l, env, lenv, ty, *ad),
            _ => unreachable!("matched above"),
        }
    }

    fn add_places(&mut self, x: &Atom, ts: Vec<Target>) {
        for t in ts {
            self.emit(Stmt::AddTo {
                place: t.place,
                value: x.clone(),
                scale: t.scale,
            });
        }
    }

    /// `lbuild`, `replicate`, `onehot`, `zipWith` and `lmap` into an array destination.
    fn array_constructor(
        &mut self,
        l: &LTerm,
        env: &Env,
        lenv: &LEnv,
        ty: LTy,
        mut ad: ArrDest,
    ) -> Result<()> {
        use LTermKind as K;
        let elem = ty.as_array().expect("an array type").clone();
        match &l.kind {
            K::Build(n, i, body) => {
                let n = self.atom(n, env)?;
                for (j, dj) in std::mem::take(&mut ad.at) {
                    let (i, body) = (i.clone(), body.clone());
                    self.if_in_range(&j.clone(), &n, |this| {
                        let mut env = env.clone();
                        env.insert(i.id, SVal::Dyn(j));
                        this.linear(&body, &env, lenv, dj)
                    })?;
                }
                if !ad.whole.is_empty() || ad.each.is_some() || !ad.sum.is_zero() {
                    if !ad.whole.is_empty() {
                        self.each_of(&mut ad, &elem);
                    }
                    let (iv, body) = (i.clone(), body.clone());
                    self.array_loop(ad, &elem, &n, &mut |this, ia, d| {
                        let mut env = env.clone();
                        env.insert(iv.id, SVal::Dyn(ia));
                        this.linear(&body, &env, lenv, d)
                    })?;
                }
                Ok(())
            }
            K::Replicate(n, a) => {
                let n = self.atom(n, env)?;
                let uses = usize::from(!ad.sum.is_zero())
                    + usize::from(!ad.whole.is_empty() || ad.each.is_some())
                    + ad.at.len();
                let needs_value = !ad.whole.is_empty() || ad.each.is_some();
                let arg = if (uses > 1 || needs_value) && !trivial(a) {
                    LArg::Mat(self.lin_value(a, env, lenv, &elem)?)
                } else {
                    LArg::Term(a.clone(), env.clone(), lenv.clone())
                };
                if !ad.sum.is_zero() {
                    let nf = self.let_("nf", Ty::F64, Expr::Op(Op::IToF, vec![n.clone()]));
                    let sum = std::mem::replace(&mut ad.sum, Dest::zero(elem.clone()));
                    let d = self.scaled(sum, &nf);
                    self.lower_arg(&arg, d)?;
                }
                for (j, dj) in std::mem::take(&mut ad.at) {
                    let arg = arg.clone();
                    self.if_in_range(&j, &n, |this| this.lower_arg(&arg, dj))?;
                }
                if needs_value {
                    self.each_of(&mut ad, &elem);
                    self.array_loop(ad, &elem, &n, &mut |this, _, d| this.lower_arg(&arg, d))?;
                }
                Ok(())
            }
            K::OneHot(n, i, a) => {
                let n = self.atom(n, env)?;
                let i = self.atom(i, env)?;
                let site = self.site(l.span);
                if !self.index_below(&i, &n) {
                    self.emit(Stmt::Check(Check::OneHot(i.clone(), n.clone()), site));
                }
                let uses = usize::from(!ad.sum.is_zero())
                    + usize::from(!ad.whole.is_empty() || ad.each.is_some())
                    + ad.at.len();
                let arg = if uses > 1 && !trivial(a) {
                    LArg::Mat(self.lin_value(a, env, lenv, &elem)?)
                } else {
                    LArg::Term(a.clone(), env.clone(), lenv.clone())
                };
                let mut d = std::mem::replace(&mut ad.sum, Dest::zero(elem.clone()));
                if !ad.whole.is_empty() || ad.each.is_some() {
                    self.each_of(&mut ad, &elem);
                    let e = ad.each.take().expect("each");
                    for p in &e.grow {
                        self.emit(Stmt::Grow(p.clone(), n.clone()));
                    }
                    d = merge(d, e.dest.subst(&e.i, &i));
                }
                for (j, dj) in std::mem::take(&mut ad.at) {
                    let eq = self.let_("b", Ty::BOOL, Expr::Op(Op::IEq, vec![i.clone(), j]));
                    let arg = arg.clone();
                    let blk = self.block(|this| {
                        this.lower_arg(&arg, dj)?;
                        Ok(Atom::Unit)
                    })?;
                    self.emit(Stmt::Do(Expr::If(eq, blk, Block::unit(vec![]))));
                }
                self.lower_arg(&arg, d)
            }
            K::ZipWith(fs, a) => {
                let fsv = self.atom(fs, env)?;
                let fst = self.type_of.term(fs);
                let ft = fst.as_array().expect("an array of functions").clone();
                self.elementwise(a, env, lenv, ad, &elem, &mut |k| {
                    FunRef::Elem(fsv.clone(), k.clone(), ft.clone())
                })
            }
            K::Map(f, a) => {
                let fv = self.term(f, env)?;
                let ft = self.type_of.term(f);
                self.elementwise(a, env, lenv, ad, &elem, &mut |_| {
                    FunRef::Static(fv.clone(), ft.clone())
                })
            }
            _ => unreachable!("an array constructor"),
        }
    }

    /// `a` (an array) with element `k` first applied to the function `f(k)`, into `ad`.
    fn elementwise(
        &mut self,
        a: &LTerm,
        env: &Env,
        lenv: &LEnv,
        mut ad: ArrDest,
        elem: &LTy,
        f: &mut dyn FnMut(&Atom) -> FunRef,
    ) -> Result<()> {
        let at = self.type_of.linear(a);
        let src = at.as_array().expect("an array").clone();
        if !ad.whole.is_empty() {
            self.each_of(&mut ad, elem);
        }
        let sum = std::mem::replace(&mut ad.sum, Dest::zero(elem.clone()));
        let each = match ad.each {
            Some(e) => {
                let k = Atom::Var(e.i.clone());
                let d = merge(e.dest, sum);
                Some(Each {
                    dest: self.apply_dest(src.clone(), f(&k), d)?,
                    i: e.i,
                    grow: e.grow,
                })
            }
            None if !sum.is_zero() => {
                let i = self.prog.var("i", Ty::I64);
                let k = Atom::Var(i.clone());
                Some(Each {
                    dest: self.apply_dest(src.clone(), f(&k), sum)?,
                    i,
                    grow: Vec::new(),
                })
            }
            None => None,
        };
        let mut at_ = Vec::new();
        for (j, dj) in ad.at {
            let fj = f(&j);
            at_.push((j.clone(), self.apply_dest(src.clone(), fj, dj)?));
        }
        let d = Dest::array(
            at.clone(),
            ArrDest {
                whole: Vec::new(),
                sum: Dest::zero(src),
                each,
                at: at_,
            },
        );
        self.linear(a, env, lenv, d)
    }

    /// `apply f d`, or for a known linear λ whose parameter only flows through structure
    /// (projections, pairs, scalings, ...) the destination of its parameter: the body
    /// lowered into `d` with the parameter collecting destinations (`apply (\p ⊸ snd p) d` is
    /// `(0, d)`), so that values given to it go straight to their places.
    fn apply_dest(&mut self, src: LTy, f: FunRef, d: Dest) -> Result<Dest> {
        let FunRef::Static(SVal::LinLam(c), _) = &f else {
            return Ok(Dest::apply(src, f, d));
        };
        let TermKind::LinLam(v, body) = &c.term.kind else {
            return Ok(Dest::apply(src, f, d));
        };
        let mark = self.blocks.last().map_or(0, Vec::len);
        let cse = self.cse_mark();
        let (id, attempt) = self.sinks.begin(Sink {
            depth: self.blocks.len(),
            dests: Vec::new(),
            expected: u32::MAX,
            term: None,
            collect: true,
            failed: false,
        });
        let mut lenv = LEnv::new();
        lenv.insert(v.id, LBind::Sink(id));
        let (body, env) = (body.clone(), c.env.clone());
        let r = self.linear(&body, &env, &lenv, d.clone());
        let failed = r.is_ok() && self.sinks.stack[id].failed;
        let sink = self.sinks.end(attempt, failed);
        r?;
        if self.sinks.abort.is_some() {
            // An enclosing attempt failed: it discards this and lowers it again.
            return Ok(Dest::apply(src, f, d));
        }
        // (The destinations are used at once, so materialisations in progress do not matter.)
        if !failed {
            return Ok(sink
                .dests
                .into_iter()
                .map(|(d, _)| d)
                .fold(Dest::zero(src), merge));
        }
        self.blocks.last_mut().expect("a block").truncate(mark);
        self.cse_undo(cse);
        Ok(Dest::apply(src, f, d))
    }

    fn lower_arg(&mut self, arg: &LArg, d: Dest) -> Result<()> {
        match arg {
            LArg::Mat(x) => self.add_value(x, d),
            LArg::Term(l, env, lenv) => self.linear(l, env, lenv, d),
        }
    }
}
