//! Index bounds: an IR pass (run last on every compiled module) that proves reads in range
//! and runtime checks true from the order facts the program itself establishes, so that
//! backends read without a test and drop the check.
//!
//! # Facts
//!
//! Facts are inequalities `a < b` and `a ≤ b` (an equality is both `≤`) between *keys*:
//! integer variables, integer constants, and `len xs` of an array variable. They come from
//!
//! ```text
//! for i in 0..n { B }, build n (i -> B), sum n (i -> B)   0 ≤ i,  i < n          inside B
//! let x = len xs                                          x = len xs, 0 ≤ x
//! let ys = build n (..), let ys = replicate n _           len ys = n
//! let x = y,  let x = k (a constant)                      x = y (and len x = len y), x = k
//! let x = y + k (iadd, prim iadd / isub of a constant)    y < x for k > 0 (x < y for k < 0)
//! let x = max(a, b)                                       a ≤ x, b ≤ x
//! check onehot(i, n)                                      0 ≤ i, i < n           after it
//! let x = xs[i] (a checked read)                          0 ≤ i, i < len xs      after it
//! check same_len(a, b)                                    a = b                  after it
//! check len(n)                                            0 ≤ n, n ≤ 2^28        after it
//! ```
//!
//! Each holds exactly where it is used: a loop's facts in its body, a check's after it in
//! its block (every later statement runs only if the check passed), a `let`'s after it (the
//! IR is in SSA form, checked: a variable has one definition, so `x = len xs` is a property
//! of `x`). Blocks are walked in order with the facts in scope on a stack.
//!
//! # What is proved
//!
//! `a < b` holds when a chain of facts leads from `a` to `b` with at least one strict step
//! (`a ≤ b`: any chain), where a constant steps to any larger constant. A bounded search
//! (`SEARCH` keys), so a proof may be missed but never made up.
//!
//! ```text
//! let x = xs[i] @s          ⟶  let x = xs[i] @internal   if 0 ≤ i and i < len xs (an array)
//! check onehot(i, n)        ⟶  (removed)                  if 0 ≤ i and i < n
//! check same_len(a, b)      ⟶  (removed)                  if a = b
//! ```
//!
//! A read at the internal site is one that cannot fail ([`super::Program::internal_site`]):
//! the Rust backend indexes without `at`'s test, and a read at a loop's own index lets it
//! slice the array to the loop's length before the loop. So that this stays true, a read at
//! a loop index `i` is proved from the facts in scope at the loop (and `i`'s own two) only,
//! not from facts its body establishes: then `n ≤ len xs` when the loop starts. `check len`
//! is never removed (the evaluators ask the memory budget there).
//!
//! # Integer ranges
//!
//! Beside the order facts, every integer variable has a range `[lo, hi]` (computed in
//! `i128`, so that the range of a sum or product of two `i64` ranges is exact):
//!
//! ```text
//! k (a constant)                  [k, k]
//! len xs (an array)               [0, 2^28]     (every array's length; arguments are checked
//!                                                on entry, `build`/`replicate` by check len),
//!                                                narrowed as below (a length's own range)
//! len ys, ys = build n ..         the range of n
//! len xs (a list, a tape)         [0, 2^63 - 1]
//! i of a loop over 0..n           [0, max(hi n - 1, 0)]                inside the body
//! a + b, a - b, a · b, -a, a / b  the range of the operation on the operands' ranges
//! max(a, b)                       [max(lo a, lo b), max(hi a, hi b)]
//! argmax xs, argmin xs            [0, 2^28 - 1]
//! check len(n)                    n ∩ [0, 2^28]                         after it
//! check onehot(i, n)              i ∩ [0, max(hi n - 1, 0)]             after it
//! let x = xs[i] (a checked read)  i ∩ [0, hi (len xs) - 1], len xs ∩ [max(lo i, 0) + 1, 2^28]
//!                                                                       after it
//! check same_len(a, b)            a, b ∩ each other                    after it
//! anything else                   [-2^63, 2^63 - 1]
//! ```
//!
//! A checked integer primitive (`iadd`, `isub`, `imul`, `ineg`, `idiv`) whose range lies
//! inside `i64` (and, for `idiv`, whose divisor's range excludes 0) cannot fail: its site
//! becomes the internal one, and the Rust backend computes it without `checked_*`. Index
//! arithmetic is where this pays (`d + c (2d - c - 1) / 2 + r - c - 1` for a triangular
//! matrix in a flat array: every operand is a length or a loop index).
//!
//! Reverse-mode code is where the order facts pay: a one-hot at a loop index lowers to `check
//! onehot(i, n); grow acc n; acc[i] += v`, and a read of the primal at the index of a
//! triangular loop (`for c in 0..r` inside `for r in 0..len q`) is in range through `c < r <
//! len q`. Nothing changes meaning: a removed check could not fail, a read marked internal
//! could not fail.
//!
//! The ranges prove too: a one-hot `check onehot(i, n)` with `0 ≤ lo i` and `hi i < lo n`
//! goes, and so does a read `xs[i]` with `0 ≤ lo i` and `hi i < lo (len xs)` (unless `i` is
//! a loop's index: the module doc above). A checked read at a constant narrows only its
//! array's length range, adding no fact, so that straight-line code reading `xs[0]`,
//! `xs[1]`, .., `xs[9999]` does not pile up facts for every proof to search: its reverse
//! code's one-hots at those constants against `len xs` are all proved by the ranges.

use super::{Atom, Block, Check, Expr, Op, Program, SiteId, Stmt, TyKind, Var};
use crate::deep::deep;
use crate::value::MAX_ARRAY_LEN;
use rustc_hash::{FxHashMap, FxHashSet};

/// The most keys one proof visits (and an eighth of the facts it may look at).
const SEARCH: usize = 256;

/// An integer range `[lo, hi]` (module doc, "Integer ranges").
type Range = (i128, i128);

/// The range of any `i64`.
const FULL: Range = (i64::MIN as i128, i64::MAX as i128);

/// The range of an array's length.
const LENGTH: Range = (0, MAX_ARRAY_LEN as i128);

/// Whether a range lies inside `i64`.
fn fits(r: Range) -> bool {
    FULL.0 <= r.0 && r.1 <= FULL.1
}

/// The range of a checked integer primitive's result on operands of the given ranges, if it
/// cannot fail (module doc).
fn int_prim(name: &str, xs: &[Range]) -> Option<Range> {
    let corners = |f: &dyn Fn(i128, i128) -> i128, a: Range, b: Range| {
        let c = [f(a.0, b.0), f(a.0, b.1), f(a.1, b.0), f(a.1, b.1)];
        (
            *c.iter().min().expect("4 corners"),
            *c.iter().max().expect("4 corners"),
        )
    };
    let r = match (name, xs) {
        ("iadd", [a, b]) => (a.0 + b.0, a.1 + b.1),
        ("isub", [a, b]) => (a.0 - b.1, a.1 - b.0),
        ("imul", [a, b]) => corners(&|x, y| x * y, *a, *b),
        ("ineg", [a]) => (-a.1, -a.0),
        // Truncating division is monotone in each operand on either side of a divisor's 0.
        ("idiv", [a, b]) if b.0 > 0 || b.1 < 0 => corners(&|x, y| x / y, *a, *b),
        _ => return None,
    };
    fits(r).then_some(r)
}

/// Proves reads in range and checks true in every function of `p` (module doc).
pub fn prove(p: &mut Program) {
    let internal = p.internal();
    let mut funcs = std::mem::take(&mut p.funcs);
    for f in &mut funcs {
        let mut pr = Prover {
            p,
            facts: Facts::default(),
            loops: FxHashMap::default(),
            internal,
            ranges: FxHashMap::default(),
            undo: Vec::new(),
        };
        pr.block(&mut f.body);
    }
    p.funcs = funcs;
}

/// What facts relate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Key {
    /// An integer variable.
    Var(u32),
    /// The length of an array variable.
    Len(u32),
    /// An integer.
    Const(i64),
}

fn key(a: &Atom) -> Option<Key> {
    match a {
        Atom::Var(x) => Some(Key::Var(x.id)),
        Atom::I64(k) => Some(Key::Const(*k)),
        _ => None,
    }
}

/// The facts in scope, as a stack of edges `a < b` / `a ≤ b` (strict flag), indexed by `a`.
#[derive(Default)]
struct Facts {
    edges: Vec<(Key, Key, bool)>,
    /// The edges from a key, and into it.
    from: FxHashMap<Key, Vec<usize>>,
    into: FxHashMap<Key, Vec<usize>>,
}

impl Facts {
    fn push(&mut self, a: Key, b: Key, strict: bool) {
        let k = self.edges.len();
        self.edges.push((a, b, strict));
        self.from.entry(a).or_default().push(k);
        self.into.entry(b).or_default().push(k);
    }

    fn le(&mut self, a: Key, b: Key) {
        self.push(a, b, false);
    }

    fn lt(&mut self, a: Key, b: Key) {
        self.push(a, b, true);
    }

    fn eq(&mut self, a: Key, b: Key) {
        self.le(a, b);
        self.le(b, a);
    }

    fn mark(&self) -> usize {
        self.edges.len()
    }

    /// Forgets the facts pushed since `mark`.
    fn reset(&mut self, mark: usize) {
        while self.edges.len() > mark {
            let (a, b, _) = self.edges.pop().expect("an edge above the mark");
            for (m, k) in [(&mut self.from, a), (&mut self.into, b)] {
                if let Some(v) = m.get_mut(&k) {
                    v.pop();
                }
            }
        }
    }

    /// Whether `a < b` (`strict`) or `a ≤ b` follows from the first `limit` facts. From a
    /// constant (`0 ≤ i`) the search runs backwards from `b`, over the few facts that end
    /// there (every nonnegative key's fact starts at 0); otherwise forwards from `a`. Either
    /// way it stops after [`SEARCH`] keys or `8 · SEARCH` edges.
    fn holds(&self, a: Key, b: Key, strict: bool, limit: usize) -> bool {
        let backward = matches!(a, Key::Const(_));
        let (start, goal, adj) = if backward {
            (b, a, &self.into)
        } else {
            (a, b, &self.from)
        };
        let mut seen: FxHashSet<(Key, bool)> = FxHashSet::default();
        let mut todo = vec![(start, false)];
        let mut work = 0;
        while let Some((k, s)) = todo.pop() {
            if !seen.insert((k, s)) {
                continue;
            }
            if seen.len() > SEARCH {
                return false;
            }
            let done = s || !strict;
            // The chain so far relates `lo` and `hi` (`lo < hi` if `s`, else `lo ≤ hi`).
            let (lo, hi) = if backward { (goal, k) } else { (k, goal) };
            match (lo, hi) {
                _ if k == goal && done => return true,
                (Key::Const(c), Key::Const(d)) if c < d || (c == d && done) => return true,
                _ => {}
            }
            for &e in adj.get(&k).into_iter().flatten() {
                work += 1;
                if work > 8 * SEARCH {
                    return false;
                }
                if e < limit {
                    let (x, y, st) = self.edges[e];
                    todo.push((if backward { x } else { y }, s || st));
                }
            }
        }
        false
    }
}

struct Prover<'a> {
    p: &'a Program,
    facts: Facts,
    /// A loop index ↦ the facts in scope at its loop, its own included.
    loops: FxHashMap<u32, usize>,
    internal: SiteId,
    /// The integer variables' ranges where narrower than [`FULL`], and the arrays' lengths'
    /// where narrower than [`LENGTH`] (`Key::Var`, `Key::Len`).
    ranges: FxHashMap<Key, Range>,
    /// The ranges narrowed in the blocks entered: the key and its range before.
    undo: Vec<(Key, Option<Range>)>,
}

impl Prover<'_> {
    fn block(&mut self, b: &mut Block) {
        deep(|| {
            let mark = self.facts.mark();
            let ranges = self.undo.len();
            let stmts = std::mem::take(&mut b.stmts);
            let mut out = Vec::with_capacity(stmts.len());
            for mut s in stmts {
                match &mut s {
                    Stmt::Let(x, e) => {
                        self.expr(e);
                        self.learn(x, e);
                        self.range_of_let(x, e);
                        self.read_passed(e);
                    }
                    Stmt::Mut(_, e) | Stmt::Do(e) => self.expr(e),
                    Stmt::For(i, n, body) => self.loop_body(i, n, body, false),
                    Stmt::Loop(body) => self.block(body),
                    Stmt::Check(c, _) => {
                        if self.proved(c) {
                            continue;
                        }
                        self.assume(c);
                    }
                    Stmt::Set(..) | Stmt::AddTo { .. } | Stmt::Grow(..) | Stmt::Break => {}
                }
                out.push(s);
            }
            b.stmts = out;
            self.facts.reset(mark);
            self.reset_ranges(ranges);
        })
    }

    /// A loop's body; `built`: the loop of a `build`, whose body runs only if `n` is a
    /// valid length.
    fn loop_body(&mut self, i: &Var, n: &Atom, body: &mut Block, built: bool) {
        let mark = self.facts.mark();
        self.facts.le(Key::Const(0), Key::Var(i.id));
        if let Some(n) = key(n) {
            self.facts.lt(Key::Var(i.id), n);
        }
        self.loops.insert(i.id, self.facts.mark());
        let ranges = self.undo.len();
        let below = self.below(n);
        self.narrow(Key::Var(i.id), below);
        if built {
            self.narrow(Key::Var(i.id), (0, LENGTH.1 - 1));
        }
        self.block(body);
        self.facts.reset(mark);
        self.reset_ranges(ranges);
    }

    /// The range of an integer operand.
    fn range(&self, a: &Atom) -> Range {
        match a {
            Atom::I64(k) => (*k as i128, *k as i128),
            Atom::Var(x) => self.ranges.get(&Key::Var(x.id)).copied().unwrap_or(FULL),
            _ => FULL,
        }
    }

    /// `[0, max(hi n - 1, 0)]`: an index below `n` (a loop's, a one-hot's).
    fn below(&self, n: &Atom) -> Range {
        (0, (self.range(n).1 - 1).max(0))
    }

    /// The range of the length of `xs`, an array or a list.
    fn len_range(&self, xs: &Var) -> Range {
        match self.p.types.kind(xs.ty) {
            TyKind::Array(_) => self.ranges.get(&Key::Len(xs.id)).copied().unwrap_or(LENGTH),
            _ => (0, FULL.1),
        }
    }

    /// Narrows the range of `x` (an integer variable's or an array's length) to its
    /// intersection with `r`, until the enclosing block ends.
    fn narrow(&mut self, x: Key, r: Range) {
        let old = self.ranges.get(&x).copied();
        let now = old.unwrap_or(if matches!(x, Key::Len(_)) {
            LENGTH
        } else {
            FULL
        });
        let new = (now.0.max(r.0), now.1.min(r.1));
        if new != now {
            self.undo.push((x, old));
            self.ranges.insert(x, new);
        }
    }

    /// Forgets the narrowings made since `mark`.
    fn reset_ranges(&mut self, mark: usize) {
        while self.undo.len() > mark {
            let (x, old) = self.undo.pop().expect("an entry above the mark");
            match old {
                Some(r) => self.ranges.insert(x, r),
                None => self.ranges.remove(&x),
            };
        }
    }

    /// The range of `let x = e` (module doc), marking a checked integer primitive that
    /// cannot fail internal.
    fn range_of_let(&mut self, x: &Var, e: &mut Expr) {
        if let Expr::Build(n, ..) | Expr::Replicate(n, ..) = e {
            // Past a `build` or `replicate`, its length was valid, and is the array's.
            if let Atom::Var(n) = n {
                self.narrow(Key::Var(n.id), LENGTH);
            }
            if matches!(self.p.types.kind(x.ty), TyKind::Array(_)) {
                let r = self.range(n);
                self.narrow(Key::Len(x.id), r);
            }
        }
        if !matches!(self.p.types.kind(x.ty), TyKind::I64) {
            return;
        }
        let r = match e {
            Expr::Atom(a) => self.range(a),
            Expr::Len(Atom::Var(xs)) => self.len_range(xs),
            // The lowering's own addition wraps rather than fails.
            Expr::Op(Op::IAdd, xs) => {
                let rs = [self.range(&xs[0]), self.range(&xs[1])];
                int_prim("iadd", &rs).unwrap_or(FULL)
            }
            Expr::Op(Op::IMax, xs) => {
                let (a, b) = (self.range(&xs[0]), self.range(&xs[1]));
                (a.0.max(b.0), a.1.max(b.1))
            }
            Expr::Prim(p, xs, site) => match p.name() {
                "argmax" | "argmin" => (0, LENGTH.1 - 1),
                name => {
                    let rs: Vec<Range> = xs.iter().map(|a| self.range(a)).collect();
                    match int_prim(name, &rs) {
                        Some(r) => {
                            *site = self.internal;
                            r
                        }
                        None => FULL,
                    }
                }
            },
            _ => FULL,
        };
        if r != FULL {
            // `x` is defined once (SSA): its range holds wherever it is in scope.
            self.ranges.insert(Key::Var(x.id), r);
        }
    }

    fn expr(&mut self, e: &mut Expr) {
        match e {
            Expr::Build(n, i, b, _) => self.loop_body(i, n, b, true),
            Expr::Sum(n, i, b) => self.loop_body(i, n, b, false),
            Expr::Iterate(_, _, b, _, _) => self.block(b),
            Expr::If(_, a, b) => {
                self.block(a);
                self.block(b);
            }
            Expr::Match(_, arms) => arms.iter_mut().for_each(|a| self.block(&mut a.body)),
            Expr::Index(Atom::Var(xs), i, site)
                if *site != self.internal
                    && matches!(self.p.types.kind(xs.ty), TyKind::Array(_)) =>
            {
                if let Some(k) = key(i) {
                    let at_loop = match i {
                        Atom::Var(v) => self.loops.get(&v.id).copied(),
                        _ => None,
                    };
                    let limit = at_loop.unwrap_or(self.facts.mark());
                    // Ranges narrowed inside the loop's body must not prove a read at its
                    // own index (module doc): the facts do, up to the loop's.
                    if (at_loop.is_none() && self.in_range(i, self.len_range(xs)))
                        || (self.facts.holds(Key::Const(0), k, false, limit)
                            && self.facts.holds(k, Key::Len(xs.id), true, limit))
                    {
                        *site = self.internal;
                    }
                }
            }
            _ => {}
        }
    }

    /// The facts `let x = e` establishes.
    fn learn(&mut self, x: &Var, e: &Expr) {
        let (x, f) = (Key::Var(x.id), &mut self.facts);
        match e {
            Expr::Len(Atom::Var(xs)) => {
                f.eq(x, Key::Len(xs.id));
                f.le(Key::Const(0), x);
            }
            Expr::Build(n, ..) | Expr::Replicate(n, ..) => {
                if let (Key::Var(x), Some(n)) = (x, key(n)) {
                    f.eq(Key::Len(x), n);
                }
            }
            Expr::Atom(Atom::Var(y)) => {
                f.eq(x, Key::Var(y.id));
                if let Key::Var(x) = x {
                    f.eq(Key::Len(x), Key::Len(y.id));
                }
            }
            Expr::Atom(Atom::I64(k)) => f.eq(x, Key::Const(*k)),
            Expr::Op(Op::IAdd, xs) => added(f, x, xs),
            Expr::Prim(p, xs, _) if p.name() == "iadd" => added(f, x, xs),
            Expr::Prim(p, xs, _) if p.name() == "isub" => {
                if let [a, Atom::I64(k)] = xs.as_slice() {
                    if let Some(y) = key(a) {
                        shifted(f, x, y, -k.signum());
                    }
                }
            }
            Expr::Op(Op::IMax, xs) => {
                for a in xs.iter().filter_map(key) {
                    f.le(a, x);
                }
            }
            _ => {}
        }
    }

    /// The facts a checked read that did not fail establishes: `0 ≤ i < len xs`. A constant
    /// index only narrows the length's range (a chain of reads at constants 0, 1, 2, .. would
    /// otherwise pile up facts that every later proof searches through).
    fn read_passed(&mut self, e: &Expr) {
        let Expr::Index(Atom::Var(xs), i, site) = e else {
            return;
        };
        if *site == self.internal || !matches!(self.p.types.kind(xs.ty), TyKind::Array(_)) {
            return;
        }
        let (ri, rn) = (self.range(i), self.len_range(xs));
        self.narrow(Key::Len(xs.id), (ri.0.max(0) + 1, LENGTH.1));
        if let Atom::Var(i) = i {
            self.narrow(Key::Var(i.id), (0, rn.1 - 1));
            self.facts.le(Key::Const(0), Key::Var(i.id));
            self.facts.lt(Key::Var(i.id), Key::Len(xs.id));
        }
    }

    /// Whether the ranges alone put `i` in `0..n` (`n` the range of a length).
    fn in_range(&self, i: &Atom, n: Range) -> bool {
        let r = self.range(i);
        r.0 >= 0 && r.1 < n.0
    }

    /// Whether a check is proved to pass.
    fn proved(&self, c: &Check) -> bool {
        let all = self.facts.mark();
        match c {
            Check::OneHot(i, n) => {
                self.in_range(i, self.range(n))
                    || match (key(i), key(n)) {
                        (Some(i), Some(n)) => {
                            self.facts.holds(Key::Const(0), i, false, all)
                                && self.facts.holds(i, n, true, all)
                        }
                        _ => false,
                    }
            }
            Check::SameLen(_, a, b) => match (key(a), key(b)) {
                (Some(a), Some(b)) => {
                    self.facts.holds(a, b, false, all) && self.facts.holds(b, a, false, all)
                }
                _ => false,
            },
            Check::Len(..) => false,
        }
    }

    /// The facts a check that passed establishes.
    fn assume(&mut self, c: &Check) {
        match c {
            Check::OneHot(Atom::Var(i), n) => {
                let below = self.below(n);
                self.narrow(Key::Var(i.id), below);
            }
            Check::SameLen(_, a, b) => {
                let (ra, rb) = (self.range(a), self.range(b));
                for (x, r) in [(a, rb), (b, ra)] {
                    if let Atom::Var(x) = x {
                        self.narrow(Key::Var(x.id), r);
                    }
                }
            }
            Check::Len(_, Atom::Var(n)) => self.narrow(Key::Var(n.id), LENGTH),
            _ => {}
        }
        let f = &mut self.facts;
        match c {
            Check::OneHot(i, n) => {
                if let Some(i) = key(i) {
                    f.le(Key::Const(0), i);
                    if let Some(n) = key(n) {
                        f.lt(i, n);
                    }
                }
            }
            Check::SameLen(_, a, b) => {
                if let (Some(a), Some(b)) = (key(a), key(b)) {
                    f.eq(a, b);
                }
            }
            Check::Len(_, n) => {
                if let Some(n) = key(n) {
                    f.le(Key::Const(0), n);
                    f.le(n, Key::Const(MAX_ARRAY_LEN));
                }
            }
        }
    }
}

/// `x = a + k` or `x = k + a` for a constant `k` (a checked addition, past which it did not
/// overflow, or one of the lowering's, which cannot).
fn added(f: &mut Facts, x: Key, xs: &[Atom]) {
    if let [a, Atom::I64(k)] | [Atom::I64(k), a] = xs {
        if let Some(y) = key(a) {
            shifted(f, x, y, k.signum());
        }
    }
}

/// `x = y + d` for a `d` of sign `sign`.
fn shifted(f: &mut Facts, x: Key, y: Key, sign: i64) {
    match sign {
        1 => f.lt(y, x),
        -1 => f.lt(x, y),
        _ => f.eq(x, y),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Span;
    use crate::ir::{Func, Ty};

    /// The printed function of parameters `ys, zs : [f64]` and `n : i64` whose statements
    /// `make` gives (with the error site `@0`), after the pass; the internal site is `@1`.
    fn proved(make: impl FnOnce(&mut Program, [&Var; 3], SiteId) -> Vec<Stmt>) -> String {
        let mut p = Program::default();
        let arr = p.types.intern(TyKind::Array(Ty::F64));
        let (ys, zs, n) = (p.var("ys", arr), p.var("zs", arr), p.var("n", Ty::I64));
        let s = p.site(Span::default());
        let stmts = make(&mut p, [&ys, &zs, &n], s);
        p.funcs.push(Func {
            name: "f".into(),
            params: vec![ys, zs, n],
            ret: Ty::UNIT,
            body: Block::unit(stmts),
            accumulates: false,
            rec: None,
        });
        prove(&mut p);
        assert_eq!(p.internal_site, Some(SiteId(1)));
        p.to_string()
    }

    fn v(x: &Var) -> Atom {
        Atom::Var(x.clone())
    }

    fn read(p: &mut Program, xs: &Var, i: &Atom, s: SiteId) -> Stmt {
        Stmt::Let(p.var("x", Ty::F64), Expr::Index(v(xs), i.clone(), s))
    }

    fn len(p: &mut Program, xs: &Var) -> (Var, Stmt) {
        let m = p.var("m", Ty::I64);
        (m.clone(), Stmt::Let(m, Expr::Len(v(xs))))
    }

    fn for_(i: &Var, n: Atom, stmts: Vec<Stmt>) -> Stmt {
        Stmt::For(i.clone(), n, Block::unit(stmts))
    }

    fn onehot(i: Atom, n: Atom, s: SiteId) -> Stmt {
        Stmt::Check(Check::OneHot(i, n), s)
    }

    #[test]
    fn a_loop_over_the_length_reads_in_range() {
        let text = proved(|p, [ys, _, _], s| {
            let (m, lm) = len(p, ys);
            let i = p.var("i", Ty::I64);
            let body = vec![read(p, ys, &v(&i), s), onehot(v(&i), v(&m), s)];
            vec![lm, for_(&i, v(&m), body)]
        });
        assert!(text.contains("ys_0[i_4] @1"), "{text}");
        assert!(!text.contains("onehot"), "{text}");
    }

    #[test]
    fn a_triangular_loop_reads_in_range() {
        let text = proved(|p, [ys, _, _], s| {
            let (m, lm) = len(p, ys);
            let (r, c) = (p.var("r", Ty::I64), p.var("c", Ty::I64));
            let inner = vec![read(p, ys, &v(&c), s), onehot(v(&c), v(&m), s)];
            vec![lm, for_(&r, v(&m), vec![for_(&c, v(&r), inner)])]
        });
        assert!(text.contains("ys_0[c_5] @1"), "{text}");
        assert!(!text.contains("onehot"), "{text}");
    }

    #[test]
    fn a_loop_index_is_proved_from_the_facts_at_its_loop_only() {
        // In the body, after the check, `i < len ys` holds, but the loop's bound `n` is not
        // known to be at most `len ys`: the read at `i` itself stays checked (the Rust
        // backend would slice `ys` to `n` before the loop), a copy of `i` is in range.
        let text = proved(|p, [ys, _, n], s| {
            let (m, lm) = len(p, ys);
            let (i, j) = (p.var("i", Ty::I64), p.var("j", Ty::I64));
            let body = vec![
                onehot(v(&i), v(&m), s),
                read(p, ys, &v(&i), s),
                Stmt::Let(j.clone(), Expr::Atom(v(&i))),
                read(p, ys, &v(&j), s),
            ];
            vec![lm, for_(&i, v(n), body)]
        });
        assert!(text.contains("onehot(i_4, m_3) @0"), "{text}");
        assert!(text.contains("ys_0[i_4] @0"), "{text}");
        assert!(text.contains("ys_0[j_5] @1"), "{text}");
    }

    #[test]
    fn what_does_not_follow_is_not_proved() {
        let text = proved(|p, [ys, zs, n], s| {
            let (m, lm) = len(p, ys);
            let (i, up, down) = (
                p.var("i", Ty::I64),
                p.var("up", Ty::I64),
                p.var("down", Ty::I64),
            );
            let body = vec![
                // i + 1 ≤ len ys only; i - 1 may be negative; zs has another length.
                Stmt::Let(up.clone(), Expr::Op(Op::IAdd, vec![v(&i), Atom::I64(1)])),
                read(p, ys, &v(&up), s),
                Stmt::Let(down.clone(), Expr::Op(Op::IAdd, vec![v(&i), Atom::I64(-1)])),
                read(p, ys, &v(&down), s),
                read(p, zs, &v(&i), s),
            ];
            // A check inside a branch says nothing after the branch.
            let branch = Stmt::Do(Expr::If(
                Atom::Bool(true),
                Block::unit(vec![onehot(v(n), v(&m), s)]),
                Block::unit(vec![]),
            ));
            // The length itself is one past the end.
            let end = read(p, ys, &v(&m), s);
            vec![
                lm,
                for_(&i, v(&m), body),
                branch,
                read(p, ys, &v(n), s),
                end,
            ]
        });
        assert!(!text.contains("@1"), "{text}");
    }

    #[test]
    fn a_checked_read_bounds_the_length_after_it() {
        // After reads at 0 and 5 passed, `len ys > 5`: a one-hot at 3 against `len ys` and a
        // read at 4 cannot fail; a read at 6 can. After a read at `n` passed, a one-hot at `n`
        // cannot fail. A read in a branch says nothing after the branch, a read at a
        // constant nothing about another array.
        let text = proved(|p, [ys, zs, n], s| {
            let (m, lm) = len(p, ys);
            let branch = Stmt::Do(Expr::If(
                Atom::Bool(true),
                Block::unit(vec![read(p, zs, &Atom::I64(9), s)]),
                Block::unit(vec![]),
            ));
            vec![
                read(p, ys, &Atom::I64(0), s),
                read(p, ys, &Atom::I64(5), s),
                lm,
                onehot(Atom::I64(3), v(&m), s),
                read(p, ys, &Atom::I64(4), s),
                read(p, ys, &Atom::I64(6), s),
                onehot(Atom::I64(7), v(&m), s),
                read(p, ys, &v(n), s),
                onehot(v(n), v(&m), s),
                branch,
                read(p, zs, &Atom::I64(8), s),
            ]
        });
        assert!(text.contains("ys_0[4] @1"), "{text}");
        for kept in [
            "ys_0[0] @0",
            "ys_0[5] @0",
            "ys_0[6] @0",
            "onehot(7, m_3) @0",
            "ys_0[n_2] @0",
            "zs_1[9] @0",
            "zs_1[8] @0",
        ] {
            assert!(text.contains(kept), "{kept} in {text}");
        }
        assert_eq!(text.matches("onehot").count(), 1, "{text}");
    }

    #[test]
    fn equal_lengths_need_one_check() {
        let text = proved(|p, [ys, zs, _], s| {
            let (m, lm) = len(p, ys);
            let (k, lk) = len(p, zs);
            let i = p.var("i", Ty::I64);
            vec![
                lm,
                lk,
                Stmt::Check(Check::SameLen("map2", v(&m), v(&k)), s),
                Stmt::Check(Check::SameLen("map2", v(&k), v(&m)), s),
                for_(&i, v(&m), vec![read(p, zs, &v(&i), s)]),
            ]
        });
        assert_eq!(text.matches("check map2").count(), 1, "{text}");
        assert!(text.contains("zs_1[i_5] @1"), "{text}");
    }

    #[test]
    fn integer_primitives_have_the_ranges_of_their_operations() {
        let r = |name: &str, xs: &[Range]| int_prim(name, xs);
        assert_eq!(r("iadd", &[(0, 10), (-3, 5)]), Some((-3, 15)));
        assert_eq!(r("isub", &[(0, 10), (3, 5)]), Some((-5, 7)));
        assert_eq!(r("imul", &[(-2, 3), (-7, 5)]), Some((-21, 15)));
        assert_eq!(r("ineg", &[(-2, 3)]), Some((-3, 2)));
        assert_eq!(r("idiv", &[(-7, 9), (2, 4)]), Some((-3, 4)));
        assert_eq!(r("idiv", &[(-7, 9), (-4, -2)]), Some((-4, 3)));
        // A divisor that may be 0, a quotient that may overflow, operands that may overflow.
        assert_eq!(r("idiv", &[(1, 9), (-1, 1)]), None);
        assert_eq!(r("idiv", &[FULL, (-1, -1)]), None);
        assert_eq!(r("imul", &[LENGTH, (0, 1 << 40)]), None);
        assert_eq!(r("iadd", &[(0, FULL.1), (1, 1)]), None);
        assert_eq!(r("isub", &[(FULL.0, 0), (1, 1)]), None);
        assert_eq!(r("ineg", &[FULL]), None);
        assert_eq!(r("irem", &[(0, 1), (1, 2)]), None);
    }

    #[test]
    fn index_arithmetic_on_lengths_and_loop_indices_cannot_overflow() {
        // For r < len ys, c < r: d + c (2d - c - 1) / 2 + r is proved, as is len · len;
        // anything with the parameter n, a division by c (which may be 0) and a product of
        // two triangle offsets (up to 2^114) stay checked.
        let text = proved(|p, [ys, _, n], s| {
            let reg = crate::prim::Registry::builtin();
            let prim = |p: &mut Program, name: &str, xs: Vec<Atom>, out: &mut Vec<Stmt>| {
                let x = p.var(name, Ty::I64);
                let f = reg.get(name).expect("a builtin").clone();
                out.push(Stmt::Let(x.clone(), Expr::Prim(f, xs, s)));
                v(&x)
            };
            let (m, lm) = len(p, ys);
            let (r, c) = (p.var("r", Ty::I64), p.var("c", Ty::I64));
            let mut inner = Vec::new();
            let two_d = prim(p, "imul", vec![Atom::I64(2), v(&m)], &mut inner);
            let a = prim(p, "isub", vec![two_d, v(&c)], &mut inner);
            let a = prim(p, "isub", vec![a, Atom::I64(1)], &mut inner);
            let a = prim(p, "imul", vec![v(&c), a], &mut inner);
            let off = prim(p, "idiv", vec![a, Atom::I64(2)], &mut inner);
            let a = prim(p, "iadd", vec![v(&m), off.clone()], &mut inner);
            prim(p, "iadd", vec![a, v(&r)], &mut inner);
            prim(p, "imul", vec![v(&m), v(&m)], &mut inner);
            prim(p, "ineg", vec![v(&c)], &mut inner);
            let mut risky = Vec::new();
            prim(p, "imul", vec![v(n), v(&c)], &mut risky);
            prim(p, "idiv", vec![v(&m), v(&c)], &mut risky);
            prim(p, "imul", vec![off.clone(), off], &mut risky);
            inner.extend(risky);
            vec![lm, for_(&r, v(&m), vec![for_(&c, v(&r), inner)])]
        });
        assert_eq!(text.matches("@1").count(), 9, "{text}");
        assert_eq!(text.matches("@0").count(), 3, "{text}");
        for risky in [
            "imul(n_2, c_5) @0",
            "idiv(m_3, c_5) @0",
            "idiv_10, idiv_10) @0",
        ] {
            assert!(text.contains(risky), "{risky} in {text}");
        }
    }

    #[test]
    fn a_checked_length_bounds_what_follows_it_only() {
        // n · n is safe after `check len(n)` (n ≤ 2^28), not before it, and not after a
        // check in a branch; a loop index is below its bound.
        let text = proved(|p, [_, _, n], s| {
            let reg = crate::prim::Registry::builtin();
            let imul = reg.get("imul").expect("imul").clone();
            let sq = |p: &mut Program, a: &Var| {
                Stmt::Let(
                    p.var("sq", Ty::I64),
                    Expr::Prim(imul.clone(), vec![v(a), v(a)], s),
                )
            };
            let i = p.var("i", Ty::I64);
            let before = sq(p, n);
            let branch = Stmt::Do(Expr::If(
                Atom::Bool(true),
                Block::unit(vec![Stmt::Check(Check::Len("build", v(n)), s)]),
                Block::unit(vec![]),
            ));
            let after_branch = sq(p, n);
            let check = Stmt::Check(Check::Len("build", v(n)), s);
            let after = sq(p, n);
            let in_loop = sq(p, &i);
            vec![
                before,
                branch,
                after_branch,
                check,
                after,
                for_(&i, v(n), vec![in_loop]),
            ]
        });
        assert!(
            text.contains("sq_4: i64 = prim imul(n_2, n_2) @0"),
            "{text}"
        );
        assert!(
            text.contains("sq_5: i64 = prim imul(n_2, n_2) @0"),
            "{text}"
        );
        assert!(
            text.contains("sq_6: i64 = prim imul(n_2, n_2) @1"),
            "{text}"
        );
        assert!(
            text.contains("sq_7: i64 = prim imul(i_3, i_3) @1"),
            "{text}"
        );
    }
}
