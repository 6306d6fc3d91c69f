//! Late inlining: `letInline` for the bindings of a block that turn out to be used once only
//! when the block closes.
//!
//! A pass decides to inline a `let` from the occurrence analysis of its *input*, before it
//! simplifies the body. Simplification then removes code (dead bindings, the discarded half of a
//! projected pair, derivatives of constants), and with it occurrences: in the reverse derivative
//! of `max a b / 2`, the first operand occurs in the primal and in the cotangent of the divisor
//! `2`, which is dropped. Such a binding is left used once, and the next pass would inline it,
//! and a pass after that would be needed to see that nothing fires any more: three passes over
//! the whole term where one does the work.
//!
//! So when a block closes (its bindings' use counts are then final), each surviving binding
//! `let x = e` with `e` not an atom and `x` used once is a *candidate*. One traversal of the
//! block's bindings (outermost first) and core, not entering λs, finds each candidate's use and
//! replaces it by `e` (which may already hold earlier candidates' terms), as the next pass would.
//! The rest of the pass's rules are not run again on the result, so a use is replaced only where
//! no rule inspects the form of that subterm (the argument of a primitive, a component of a pair,
//! an operand of `+`, ...); in a position where some rule does (`fst _`, the function of an
//! application, a scrutinee, ...) the binding stays and the pass is marked *dirty*: another pass
//! runs and inlines it with every rule applying. A use not found outside λs is under one: a pass
//! would not inline a computation there (the binding stays, clean), but would inline a λ value
//! (dirty). A use as a component of a let-bound pair stays, as in the occurrence analysis
//! (`Occ::pair_component`).
//!
//! The pass is marked dirty, too, wherever it leaves other work for a next pass: a β-redex on an
//! already simplified λ binds its argument (`Pass::app`), a split function drops bindings from a
//! simplified body, a type synthesis gave up, and below: a binding of an atom, or of a function
//! or `map` a next pass might split. A pass that ends clean has reached the fixed point, so
//! straight-line derivative code needs one pass, not three.

use super::{Binding, Core, Pass, Slot, is_atom, is_latom, is_value};
use crate::deep::deep;
use crate::target::term::{Child, LTerm, LTermKind, Pat, Rewrite, Term, TermKind, VarId};
use smallvec::SmallVec;

/// Where a subterm sits, as far as replacing a variable there by a term goes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Pos {
    /// No rule inspects the form of a subterm here (beyond being an atom, a literal or `0`,
    /// which a candidate's term is not).
    Free,
    /// Some rule inspects the form of a subterm here.
    Shape,
    /// An operand of a linear `+` (`plusPair` inspects it for a pair).
    PlusArg,
    /// The bound term of `let x = (a, b)` (Cartesian or linear), whose components are `Component`.
    BoundPair,
    /// A component of a let-bound pair.
    Component,
    /// Under a λ: not entered.
    Skip,
}

/// Rebuilds a node from its children rewritten by [`Pass::fix`] (in `children()` order).
struct Replay {
    kids: SmallVec<[Option<Core>; 4]>,
    next: usize,
}

impl Replay {
    fn take(&mut self) -> Option<Core> {
        let k = self.kids.get_mut(self.next).and_then(Option::take);
        self.next += 1;
        k
    }
}

impl Rewrite for Replay {
    fn term(&mut self, t: &Term) -> Term {
        match self.take() {
            Some(Core::C(t2)) => t2,
            _ => t.clone(),
        }
    }
    fn linear(&mut self, l: &LTerm) -> LTerm {
        match self.take() {
            Some(Core::L(l2)) => l2,
            _ => l.clone(),
        }
    }
}

/// The position of child `i` of a Cartesian node of kind `k` that is itself at `pos`.
fn term_child(k: &TermKind, i: usize, pos: Pos) -> Pos {
    use TermKind as K;
    match k {
        K::Lam(..) | K::LinLam(..) => Pos::Skip,
        K::App(..) | K::Case(..) if i == 0 => Pos::Shape,
        K::Fst(_) | K::Snd(_) => Pos::Shape,
        K::Prim(op, _) if op.name() == "neg" => Pos::Shape,
        K::Let(p, e, _) if i == 0 => bound(p, matches!(e.kind, K::Pair(..))),
        K::Pair(..) if pos == Pos::BoundPair => Pos::Component,
        _ => Pos::Free,
    }
}

/// The position of child `i` of a linear node of kind `k` that is itself at `pos`.
fn lterm_child(k: &LTermKind, i: usize, pos: Pos) -> Pos {
    use LTermKind as K;
    match k {
        K::PowLam(..) => Pos::Skip,
        K::Build(..) if i == 1 => Pos::Skip,
        K::Plus(..) => Pos::PlusArg,
        K::Fst(_) | K::Snd(_) | K::FromLeft(_) | K::FromRight(_) | K::Sum(_) => Pos::Shape,
        K::CopowFold(..) => Pos::Shape,
        K::App(..) | K::PowApp(..) | K::Map(..) | K::Case(..) if i == 0 => Pos::Shape,
        K::Let(p, e, _) if i == 0 => bound(p, matches!(e.kind, TermKind::Pair(..))),
        K::LinLet(_, a, _) if i == 0 => lin_bound_pos(a),
        K::Pair(..) if pos == Pos::BoundPair => Pos::Component,
        _ => Pos::Free,
    }
}

/// The position of the bound term of a `let` with pattern `p`.
fn bound(p: &Pat, pair: bool) -> Pos {
    if pair && matches!(p, Pat::Var(_)) {
        Pos::BoundPair
    } else {
        // A variable alone is never bound to a variable in the output (that is `letInline` of an
        // atom); `Shape` is the safe answer anyway.
        Pos::Shape
    }
}

/// The position of the bound term of a linear `let`.
fn lin_bound_pos(l: &LTerm) -> Pos {
    if matches!(l.kind, LTermKind::Pair(..)) {
        Pos::BoundPair
    } else {
        Pos::Shape
    }
}

impl Pass<'_> {
    fn uses_of(&self, v: VarId) -> u32 {
        self.vars.get(v).map_or(0, |s| s.uses)
    }

    /// The late-inlining half of closing the block opened at `start` (see the module doc).
    pub(super) fn late(&mut self, start: usize, core: Core) -> Core {
        let inline = self.rules.let_inline;
        let mut candidates = 0;
        for b in &self.stack[start..] {
            match b {
                Binding::Cart(Pat::Var(x), e, ..) => {
                    let uses = self.uses_of(x.id);
                    if is_atom(e) {
                        self.dirty |= inline && uses > 0;
                    } else if uses == 1 {
                        candidates += 1;
                    }
                    self.dirty |= self.splittable(x, e);
                }
                Binding::Lin(u, l, ..) => {
                    let uses = self.uses_of(u.id);
                    if is_latom(l) {
                        self.dirty |= inline && uses > 0;
                    } else if uses == 1 {
                        candidates += 1;
                    }
                }
                Binding::Cart(..) | Binding::Gone => {}
            }
        }
        if !inline || candidates == 0 {
            return core;
        }
        // Outermost first: a candidate's use comes after its binding.
        let mut pending = Vec::with_capacity(candidates);
        for i in start..self.stack.len() {
            if self.open == 0 && pending.len() == candidates {
                break;
            }
            let b = std::mem::replace(&mut self.stack[i], Binding::Gone);
            self.stack[i] = match b {
                Binding::Cart(p, e, span, orig) => {
                    let e = match self.fix(Child::C(&e), bound_pos(&p, &e)) {
                        Some(Core::C(e2)) => e2,
                        _ => e,
                    };
                    if let Pat::Var(x) = &p
                        && self.uses_of(x.id) == 1
                        && !is_atom(&e)
                    {
                        // A computation that may fail does not go into a branch, where it would
                        // run only if the branch is taken (theory-notes/09; `use_of`).
                        if self.may_fail(&e) {
                            self.late_failing.insert(x.id);
                        }
                        self.vars.slot(x.id).slot = Slot::Late(Core::C(e.clone()));
                        self.open += 1;
                        pending.push(i);
                    }
                    Binding::Cart(p, e, span, orig)
                }
                Binding::Lin(u, l, span, orig) => {
                    let l = match self.fix(Child::L(&l), lin_bound_pos(&l)) {
                        Some(Core::L(l2)) => l2,
                        _ => l,
                    };
                    if self.uses_of(u.id) == 1 && !is_latom(&l) {
                        if self.lmay_fail(&l) {
                            self.late_failing.insert(u.id);
                        }
                        self.vars.slot(u.id).slot = Slot::Late(Core::L(l.clone()));
                        self.open += 1;
                        pending.push(i);
                    }
                    Binding::Lin(u, l, span, orig)
                }
                Binding::Gone => Binding::Gone,
            };
        }
        let core = match core {
            Core::C(t) => match self.fix(Child::C(&t), Pos::Free) {
                Some(Core::C(t2)) => Core::C(t2),
                _ => Core::C(t),
            },
            Core::L(l) => match self.fix(Child::L(&l), Pos::Free) {
                Some(Core::L(l2)) => Core::L(l2),
                _ => Core::L(l),
            },
        };
        if !self.once.is_empty() {
            let once = std::mem::take(&mut self.once);
            for b in &self.stack[start..] {
                let (id, atom) = match b {
                    Binding::Cart(Pat::Var(x), e, ..) => (x.id, is_atom(e)),
                    Binding::Lin(u, l, ..) => (u.id, is_latom(l)),
                    _ => continue,
                };
                if !atom && once.contains(&id) && self.uses_of(id) == 1 {
                    self.dirty = true;
                }
            }
        }
        for i in pending {
            let (id, value) = match &self.stack[i] {
                Binding::Cart(Pat::Var(x), e, ..) => (x.id, is_value(e)),
                Binding::Lin(u, ..) => (u.id, false),
                _ => unreachable!("a candidate is a variable binding"),
            };
            let state = std::mem::take(&mut self.vars.slot(id).slot);
            match state {
                Slot::Taken => {
                    self.fire("letInline");
                    self.stack[i] = Binding::Gone;
                }
                Slot::Blocked => self.dirty = true,
                // Not found outside λs: the use is under one.
                Slot::Late(_) => {
                    self.open -= 1;
                    self.dirty |= value;
                }
                _ => {}
            }
        }
        debug_assert_eq!(self.open, 0, "every pending candidate is resolved");
        core
    }

    /// Whether a next pass might split the function or `map` bound to `x`
    /// (`letLamPairSplit`, `mapPairSplit` decide by the occurrences, which may have changed).
    fn splittable(&self, x: &crate::target::term::Var, e: &Term) -> bool {
        match &e.kind {
            TermKind::Lam(..) => {
                self.rules.let_lam_pair_split
                    && x.ty.as_fun().is_some_and(|(_, r)| r.as_prod().is_some())
            }
            TermKind::Map(f, _) => {
                self.rules.map_pair_split
                    && matches!(f.kind, TermKind::Lam(..))
                    && x.ty.as_array().is_some_and(|a| a.as_prod().is_some())
            }
            _ => false,
        }
    }

    /// Replaces the uses of pending candidates under `c` (at `pos`), not entering λs; `None` if
    /// nothing changed.
    fn fix(&mut self, c: Child<'_>, pos: Pos) -> Option<Core> {
        if self.open == 0 || pos == Pos::Skip {
            return None;
        }
        match c {
            Child::C(t) => {
                if let TermKind::Var(x) = &t.kind {
                    return self.use_of(x.id, pos);
                }
                if matches!(t.kind, TermKind::Lit(_)) {
                    return None;
                }
                deep(|| {
                    let kids = t.children();
                    let mut out: SmallVec<[Option<Core>; 4]> = SmallVec::new();
                    let mut changed = false;
                    let branching = matches!(t.kind, TermKind::If(..) | TermKind::Case(..));
                    for (i, k) in kids.iter().enumerate() {
                        let branch = branching && i > 0;
                        self.late_branch += u32::from(branch);
                        let r = self.fix(*k, term_child(&t.kind, i, pos));
                        self.late_branch -= u32::from(branch);
                        changed |= r.is_some();
                        out.push(r);
                    }
                    changed.then(|| Core::C(t.map_children(&mut Replay { kids: out, next: 0 })))
                })
            }
            Child::L(l) => {
                if let LTermKind::Var(u) = &l.kind {
                    return self.use_of(u.id, pos);
                }
                if matches!(l.kind, LTermKind::Zero(_)) {
                    return None;
                }
                deep(|| {
                    let kids = l.children();
                    let mut out: SmallVec<[Option<Core>; 4]> = SmallVec::new();
                    let mut changed = false;
                    let branching = matches!(l.kind, LTermKind::Case(..));
                    for (i, k) in kids.iter().enumerate() {
                        let branch = branching && i > 0;
                        self.late_branch += u32::from(branch);
                        let r = self.fix(*k, lterm_child(&l.kind, i, pos));
                        self.late_branch -= u32::from(branch);
                        changed |= r.is_some();
                        out.push(r);
                    }
                    changed.then(|| {
                        let l = l.map_children(&mut Replay { kids: out, next: 0 });
                        // Operands made equal by the replacement: `l + l ~> 2 * l` here, as
                        // `Pass::plus` would (no rule before it applies: neither operand is `0`
                        // or a pair, and a term equal to a cheap one is no pair).
                        if let LTermKind::Plus(a, b) = &l.kind
                            && self.rules.algebra
                            && super::lsame_cheap(a, b)
                        {
                            return Core::L(self.twice(a, b, l.span));
                        }
                        Core::L(l)
                    })
                })
            }
        }
    }

    /// `a + b ~> 2 * a` for equal cheap operands (`algebra`), met where late inlining made them
    /// equal. Dropping `b` takes a use from each of its variables (each occurs in `a` too, so
    /// none becomes dead); one left used once is noted in `once`: if this block binds it, the
    /// block has passed its binding already, and the next pass inlines it (dirty).
    fn twice(&mut self, a: &LTerm, b: &LTerm, span: crate::error::Span) -> LTerm {
        self.fire("algebra");
        self.ldrop(b);
        let mut once = std::mem::take(&mut self.once);
        Child::L(b).each_var(|x| {
            if self.uses_of(x.id) == 1 {
                once.push(x.id);
            }
        });
        self.once = once;
        LTerm::new(
            LTermKind::Scale(crate::target::term::Term::real(2.0), a.clone()),
            span,
        )
    }

    /// The use of variable `v` at `pos`: its term if it is a pending candidate that may go there.
    fn use_of(&mut self, v: VarId, pos: Pos) -> Option<Core> {
        if self.late_branch > 0 && self.late_failing.contains(&v) {
            // Left pending: resolved at the end as a use under a λ is (the binding stays).
            return None;
        }
        let state = self.vars.get_mut(v)?;
        let (late, pair) = match &state.slot {
            Slot::Late(e) => (true, is_pair(e)),
            // Found before as a component of a pair now being inlined itself.
            Slot::Component(_) if pos == Pos::Free => (false, false),
            _ => return None,
        };
        let term = match (std::mem::replace(&mut state.slot, Slot::Taken), pos) {
            (Slot::Late(e), Pos::Component) => {
                state.slot = Slot::Component(e);
                None
            }
            (Slot::Late(_), Pos::PlusArg) if pair => {
                state.slot = Slot::Blocked;
                None
            }
            (Slot::Late(e) | Slot::Component(e), Pos::Free | Pos::PlusArg) => Some(e),
            _ => {
                state.slot = Slot::Blocked;
                None
            }
        };
        if late {
            self.open -= 1;
        }
        // A pair moved out of a `let` is no longer let-bound: its components' candidates,
        // found as components, may now go in.
        match term {
            Some(e) if is_pair(&e) => {
                let child = match &e {
                    Core::C(t) => Child::C(t),
                    Core::L(l) => Child::L(l),
                };
                Some(self.fix_components(child).unwrap_or(e))
            }
            other => other,
        }
    }

    /// Replaces, in a pair just inlined, the candidates found before as its components.
    fn fix_components(&mut self, c: Child<'_>) -> Option<Core> {
        // Not stopping early: the components found are no longer counted as open.
        self.open += 1;
        let r = self.fix(c, Pos::Free);
        self.open -= 1;
        r
    }
}

/// Whether an output term is a pair.
fn is_pair(e: &Core) -> bool {
    match e {
        Core::C(t) => matches!(t.kind, TermKind::Pair(..)),
        Core::L(l) => matches!(l.kind, LTermKind::Pair(..)),
    }
}

/// The position of a binding's bound term.
fn bound_pos(p: &Pat, e: &Term) -> Pos {
    bound(p, matches!(e.kind, TermKind::Pair(..)))
}
