//! Which variables of a function hold additive values in their *accumulator* representation:
//! an analysis for backends that keep a separate, in-place representation of additive values
//! (the Rust backend: `Vec` for arrays, where values are shared `Arc`s; note 07 §5).
//!
//! Accumulators (the roots of `+=` and `grow`) always have it. Converting a value into one
//! (`thaw`) or back (`freeze`) is O(1) per array for an unshared value but still costs an
//! allocation, and an accumulator threaded through a loop of [`Func::accumulates`] calls (a
//! reverse loop: `acc = acc_apply(f_k, w, acc)` per step) would convert twice per step. So
//! the accumulator representation also flows, where nothing needs a value, along the moves of
//! a function: `let x = y`, `let x = y.k`, `let x = (.., y, ..)`, `set m = y` (a `mut` that
//! is not an accumulator), the results of `if`/`match` arms, and into and out of accumulating
//! calls (their last argument and result, and the accumulating function's own last parameter
//! and result).
//!
//! # The analysis
//!
//! Only *sensitive* types matter: those whose two representations differ, i.e. tuples that
//! contain an array or list outside an enum, and arrays and lists. The moves above join
//! variables of sensitive types into classes (union-find). A class *prefers* the accumulator
//! representation if it meets an accumulating call's argument or result, an accumulating
//! function's parameter or result, or an accumulator (a `take` of one, a `set` or `mut` of
//! one). It *needs* a value if any member is used any other way (passed to another function,
//! stored in a closure or array, added with `+`, read by index, ...) or if a member could not
//! be moved at its use (used more than once, other than by projections of distinct fields, or
//! inside a loop deeper than its definition: the accumulator representation is owned, so a
//! copy would copy the arrays). A class is in the accumulator representation iff it prefers it
//! and needs no value. Between classes (at `take`/`get` of a `mut`, at a `mut`'s
//! initialisation and at a `set` of an accumulator) and at accumulating calls whose operands'
//! class is a value, the backend converts: exactly where it converted before this analysis, so
//! no program converts more often than without it.

use super::{Atom, Block, Expr, Func, Program, Stmt, Ty, TyKind};
use crate::deep::deep;
use rustc_hash::{FxHashMap, FxHashSet};

/// Whether values of `t` have a separate accumulator representation.
pub fn sensitive(p: &Program, t: Ty) -> bool {
    deep(|| match p.types.kind(t) {
        TyKind::Array(_) | TyKind::List(..) => true,
        TyKind::Tuple(cs) => cs.iter().any(|c| sensitive(p, *c)),
        _ => false,
    })
}

/// The variables (and `mut` variables) of `f` in the accumulator representation, given its
/// accumulators `accs` (which are always in it).
pub fn analyse(p: &Program, f: &Func, accs: &FxHashSet<u32>) -> FxHashSet<u32> {
    let mut a = Analysis {
        p,
        accs,
        parent: FxHashMap::default(),
        prefer: FxHashSet::default(),
        need: FxHashSet::default(),
        uses: FxHashMap::default(),
        sens: FxHashMap::default(),
    };
    let last = f.params.len().saturating_sub(1);
    for (k, x) in f.params.iter().enumerate() {
        a.def(x.id, x.ty, 0, true);
        if f.accumulates && k == last {
            a.prefer(x.id, x.ty);
        } else {
            a.need(x.id, x.ty);
        }
    }
    a.block(&f.body, 0);
    if f.accumulates {
        a.prefer_atom(&f.body.result);
    } else {
        a.need_atom(&f.body.result);
    }
    a.owned(&f.body.result, 0);
    a.solve()
}

#[derive(Default)]
struct Uses {
    /// Loop depth of the definition.
    depth: u32,
    /// Uses that consume the whole value.
    owned: u32,
    /// Other reads of the whole value.
    reads: u32,
    /// Fields moved out by projections.
    fields: Vec<u32>,
    /// Projections of fields of insensitive types (copies or clones, never moves of the
    /// accumulator's arrays).
    copies: u32,
    /// Used inside a loop deeper than its definition.
    deeper: bool,
    /// A `let`-bound variable or parameter (a `mut` is moved out by `take` and refilled by
    /// `set`, so it needs none of this).
    checked: bool,
}

struct Analysis<'a> {
    p: &'a Program,
    accs: &'a FxHashSet<u32>,
    parent: FxHashMap<u32, u32>,
    prefer: FxHashSet<u32>,
    need: FxHashSet<u32>,
    uses: FxHashMap<u32, Uses>,
    sens: FxHashMap<u32, bool>,
}

impl Analysis<'_> {
    fn sensitive(&mut self, t: Ty) -> bool {
        if let Some(s) = self.sens.get(&t.0) {
            return *s;
        }
        let s = sensitive(self.p, t);
        self.sens.insert(t.0, s);
        s
    }

    fn find(&mut self, x: u32) -> u32 {
        let mut r = x;
        while let Some(&q) = self.parent.get(&r) {
            if q == r {
                break;
            }
            r = q;
        }
        // Path compression.
        let mut y = x;
        while y != r {
            let q = self.parent[&y];
            self.parent.insert(y, r);
            y = q;
        }
        r
    }

    fn union(&mut self, x: u32, y: u32) {
        let (a, b) = (self.find(x), self.find(y));
        if a != b {
            self.parent.insert(a, b);
        }
    }

    fn def(&mut self, x: u32, t: Ty, depth: u32, checked: bool) {
        if self.sensitive(t) {
            self.parent.entry(x).or_insert(x);
            let u = self.uses.entry(x).or_default();
            u.depth = depth;
            u.checked = checked;
        }
    }

    fn prefer(&mut self, x: u32, t: Ty) {
        if self.sensitive(t) {
            self.prefer.insert(x);
        }
    }

    fn need(&mut self, x: u32, t: Ty) {
        if self.sensitive(t) {
            self.need.insert(x);
        }
    }

    fn prefer_atom(&mut self, a: &Atom) {
        if let Atom::Var(x) = a {
            self.prefer(x.id, x.ty);
        }
    }

    fn need_atom(&mut self, a: &Atom) {
        if let Atom::Var(x) = a {
            self.need(x.id, x.ty);
        }
    }

    fn join(&mut self, x: u32, a: &Atom) {
        if let Atom::Var(y) = a
            && self.sensitive(y.ty)
        {
            self.union(x, y.id);
        }
    }

    fn use_mut(&mut self, a: &Atom, depth: u32) -> Option<&mut Uses> {
        let Atom::Var(x) = a else { return None };
        let u = self.uses.get_mut(&x.id)?;
        if depth > u.depth {
            u.deeper = true;
        }
        Some(u)
    }

    /// A use consuming the operand.
    fn owned(&mut self, a: &Atom, depth: u32) {
        if let Some(u) = self.use_mut(a, depth) {
            u.owned += 1;
        }
    }

    /// A use reading the operand in place.
    fn read(&mut self, a: &Atom, depth: u32) {
        if let Some(u) = self.use_mut(a, depth) {
            u.reads += 1;
        }
    }

    /// A use that needs a value.
    fn other(&mut self, a: &Atom, depth: u32) {
        self.need_atom(a);
        self.read(a, depth);
    }

    fn block(&mut self, b: &Block, depth: u32) {
        deep(|| {
            for s in &b.stmts {
                self.stmt(s, depth);
            }
        })
    }

    /// A nested block whose result is consumed by a value-needing construct.
    fn value_block(&mut self, b: &Block, depth: u32) {
        self.block(b, depth);
        self.need_atom(&b.result);
        self.owned(&b.result, depth);
    }

    fn stmt(&mut self, s: &Stmt, depth: u32) {
        match s {
            Stmt::Let(x, e) => {
                self.bind(x.id, x.ty, e, depth);
                self.def(x.id, x.ty, depth, true);
            }
            Stmt::Mut(m, e) => {
                self.bind(m.0.id, m.0.ty, e, depth);
                self.def(m.0.id, m.0.ty, depth, false);
            }
            Stmt::Set(m, a) => {
                if self.accs.contains(&m.0.id) {
                    self.prefer_atom(a);
                } else {
                    self.join(m.0.id, a);
                }
                self.owned(a, depth);
            }
            Stmt::AddTo { value, scale, .. } => {
                self.other(value, depth);
                if let Some(c) = scale {
                    self.read(c, depth);
                }
            }
            Stmt::Grow(..) | Stmt::Break | Stmt::Check(..) => {}
            Stmt::For(_, _, body) | Stmt::Loop(body) => self.block(body, depth + 1),
            Stmt::Do(e) => self.value(e, depth),
        }
    }

    /// `x = e` (a `let` or a `mut`'s initialisation).
    fn bind(&mut self, x: u32, t: Ty, e: &Expr, depth: u32) {
        let acc = self.accs.contains(&x);
        if !self.sensitive(t) {
            return self.value(e, depth);
        }
        self.parent.entry(x).or_insert(x);
        match e {
            Expr::Atom(a) => {
                if acc {
                    self.prefer_atom(a);
                } else {
                    self.join(x, a);
                }
                self.owned(a, depth);
            }
            Expr::Proj(a, k) if !acc => {
                self.join(x, a);
                if let Some(u) = self.use_mut(a, depth) {
                    u.fields.push(*k);
                }
            }
            Expr::Tuple(xs) if !acc => {
                for a in xs {
                    self.join(x, a);
                    self.owned(a, depth);
                }
            }
            Expr::Zero(_) => {}
            Expr::Take(m) | Expr::Get(m) => {
                if self.accs.contains(&m.0.id) {
                    self.prefer(x, t);
                }
            }
            Expr::If(c, a, b) if !acc => {
                self.read(c, depth);
                for b in [a, b] {
                    self.block(b, depth);
                    self.join(x, &b.result);
                    self.owned(&b.result, depth);
                }
            }
            Expr::Match(a, arms) if !acc => {
                self.other(a, depth);
                for arm in arms {
                    if let Some(v) = &arm.bind {
                        self.def(v.id, v.ty, depth, true);
                        self.need(v.id, v.ty);
                    }
                    self.block(&arm.body, depth);
                    self.join(x, &arm.body.result);
                    self.owned(&arm.body.result, depth);
                }
            }
            Expr::Call(f, xs) if self.p.func(*f).accumulates => {
                self.prefer(x, t);
                if let Some((last, rest)) = xs.split_last() {
                    for a in rest {
                        self.other(a, depth);
                    }
                    self.prefer_atom(last);
                    self.owned(last, depth);
                }
            }
            _ => {
                if !acc {
                    self.need(x, t);
                }
                self.value(e, depth);
            }
        }
    }

    /// An expression whose operands are used as values.
    fn value(&mut self, e: &Expr, depth: u32) {
        match e {
            Expr::Atom(a) | Expr::Variant(_, _, a) => self.other(a, depth),
            // The same in both representations.
            Expr::Len(a) => self.read(a, depth),
            Expr::Proj(a, k) => {
                let field = match self.p.types.kind(a.ty()) {
                    TyKind::Tuple(cs) => cs[*k as usize],
                    _ => a.ty(),
                };
                if self.sensitive(field) {
                    self.other(a, depth);
                } else if let Some(u) = self.use_mut(a, depth) {
                    u.copies += 1;
                }
            }
            Expr::Op(_, xs) | Expr::Prim(_, xs, _) | Expr::Tuple(xs) | Expr::Array(_, xs) => {
                for a in xs {
                    self.other(a, depth);
                }
            }
            Expr::Call(f, xs) => {
                let acc = self.p.func(*f).accumulates;
                for (k, a) in xs.iter().enumerate() {
                    if acc && k + 1 == xs.len() {
                        self.prefer_atom(a);
                        self.owned(a, depth);
                    } else {
                        self.other(a, depth);
                    }
                }
            }
            Expr::Index(a, i, _) | Expr::IndexOr0(a, i) | Expr::Add(a, i) | Expr::Scale(a, i) => {
                self.other(a, depth);
                self.other(i, depth);
            }
            Expr::Replicate(n, x, _) => {
                self.other(n, depth);
                self.other(x, depth);
            }
            Expr::Build(n, i, b, _) | Expr::Sum(n, i, b) => {
                self.other(n, depth);
                self.def(i.id, i.ty, depth + 1, true);
                self.value_block(b, depth + 1);
            }
            Expr::Iterate(init, s, b, _, _) => {
                self.other(init, depth);
                self.def(s.id, s.ty, depth + 1, true);
                self.need(s.id, s.ty);
                self.value_block(b, depth + 1);
            }
            Expr::If(c, a, b) => {
                self.read(c, depth);
                self.value_block(a, depth);
                self.value_block(b, depth);
            }
            Expr::Match(a, arms) => {
                self.other(a, depth);
                for arm in arms {
                    if let Some(v) = &arm.bind {
                        self.def(v.id, v.ty, depth, true);
                        self.need(v.id, v.ty);
                    }
                    self.value_block(&arm.body, depth);
                }
            }
            Expr::Zero(_) | Expr::Get(_) | Expr::Take(_) => {}
        }
    }

    fn solve(mut self) -> FxHashSet<u32> {
        // A variable that could not be moved at its uses needs a value (a copy of an
        // accumulator would copy its arrays).
        let stuck: Vec<u32> = self
            .uses
            .iter()
            .filter(|(_, u)| u.checked && !movable(u))
            .map(|(x, _)| *x)
            .collect();
        self.need.extend(stuck);
        let ids: Vec<u32> = self.parent.keys().copied().collect();
        let mut prefer = FxHashSet::default();
        let mut need = FxHashSet::default();
        for x in &ids {
            let r = self.find(*x);
            if self.prefer.contains(x) {
                prefer.insert(r);
            }
            if self.need.contains(x) {
                need.insert(r);
            }
        }
        let mut out: FxHashSet<u32> = self.accs.clone();
        for x in ids {
            let r = self.find(x);
            if prefer.contains(&r) && !need.contains(&r) {
                out.insert(x);
            }
        }
        out
    }
}

/// Whether a variable in the accumulator representation can be moved at each of its uses:
/// not inside a deeper loop, and either used once or only by projections of distinct
/// sensitive fields, besides reads that work on either representation (lengths, fields of
/// insensitive types) and never conflict with moving another field.
fn movable(u: &Uses) -> bool {
    if u.deeper {
        return false;
    }
    let mut fields = u.fields.clone();
    fields.sort_unstable();
    let distinct = fields.windows(2).all(|w| w[0] != w[1]);
    let total = u.owned + u.reads + u.copies + u.fields.len() as u32;
    total <= 1 || (u.owned == 0 && distinct)
}
