//! Splitting long function bodies into parts, for compilers whose time grows faster than
//! linearly with the size of one function.
//!
//! A straight-line program of `n` lets lowers to functions of `O(n)` statements (its primal,
//! its JVP, its VJP with a tape of `O(n)` values), and rustc's optimiser spends time
//! quadratic in the size of one function or basic block on them (instruction scheduling of a
//! basic block, MIR destination propagation; note 07 §8): 10³ lets compiled in 13 s, 3·10³
//! in 113 s, 10⁴ not within 15 minutes. Nested AD makes such blocks too: the apply function
//! of one closure of saddle's `rr` is a `match` with one arm of 60 000 statements.
//! [`split_long_functions`] cuts every block with more than [`MAX_BODY`] statements (counted
//! at every depth) into *parts* of about [`PART`] statements, each its own function, so that
//! every function the backend sees is small and the total compile time grows linearly.
//!
//! # The rule
//!
//! Blocks are split innermost first (a long arm inside a long function is split before the
//! function's body is measured), and only between the statements of the block itself: a part
//! is a run of consecutive statements `S` of the block and becomes a function `f_partK` called
//! where `S` was; the block keeps what is not outlined (the statements after the last part,
//! and the *pinned* ones below) and its result. For each part:
//!
//! * its *inputs* are the variables `S` mentions (at any depth) that it does not bind: the
//!   block's earlier variables and the enclosing ones. They are passed as one tuple (or as the
//!   one value, or nothing);
//! * a `mut` variable among the inputs is passed by value: the block takes it (`let a = take
//!   m`, its last read before the call), the part starts with `mut m = a`, and if a later
//!   statement of the block mentions `m`, the part returns it (`take m` at its end) and the
//!   block sets it again (`set m = t.k`);
//! * its other *outputs* are the variables bound at `S`'s top level that a later statement or
//!   the block's result mentions (`let x = t.k`, `mut m = t.k` for a `mut` declared in `S`).
//!
//! A `mut` declared outside the block is never passed: a statement that mentions one is
//! *pinned* (it stays in the block, between parts), since what the enclosing code does with it
//! after the block is not visible here. So is a statement that may `break` out of a `loop`
//! around it (the `loop` is not in the part). And a run is only cut where every `mut` it passes holds
//! a value: a `take` leaves a `mut` without one until a `set` (reverse code applies a linear
//! function to an accumulator as `let a = take acc; let y = call acc_apply(f, v, a); set acc =
//! y`), so no part begins where a `mut` it mentions may have been taken, or ends where one
//! mentioned later may have been (a `take` inside a branch or a loop counts as one that
//! happened).
//!
//! The statements run in the same order with the same values, so every value and every
//! runtime error is the same: a call of a function that is not recursive takes no step of
//! the step budget and no level of the recursion depth limit, and `take` followed by `mut`
//! (or `set`) of the same value is a move. Variables keep their identities: an input or
//! output is bound in both the block and the part, which are different functions. What is
//! left of a passed `mut` is its representation in the Rust backend: an array accumulator
//! passed to a part is converted to a value and back (O(1) per array, an allocation) per call.

use super::{
    Atom, Block, Expr, Func, FuncId, MutVar, Occurrence, Program, Stmt, Var, for_each_var_mut,
};
use crate::deep::deep;
use rustc_hash::{FxHashMap, FxHashSet};

/// A block with more statements than this (at every depth) is split.
pub const MAX_BODY: usize = 1500;

/// The statements (at every depth) a part gets before it is cut.
pub const PART: usize = 500;

/// Splits every block of `p` longer than [`MAX_BODY`] statements into parts of about
/// [`PART`] statements (see the module doc).
pub fn split_long_functions(p: &mut Program) {
    split_functions(p, MAX_BODY, PART);
}

/// [`split_long_functions`] with the bounds given: blocks with more than `max_body`
/// statements, parts of about `part`.
pub fn split_functions(p: &mut Program, max_body: usize, part: usize) {
    let n = p.funcs.len();
    for k in 0..n {
        if weight(&p.funcs[k].body) > max_body {
            let mut body = std::mem::replace(&mut p.funcs[k].body, Block::unit(Vec::new()));
            let name = p.funcs[k].name.clone();
            let mut s = Splitter {
                p,
                name,
                made: 0,
                max_body,
                part: part.max(1),
            };
            s.block(&mut body);
            p.funcs[k].body = body;
        }
    }
}

/// The statements of a block, at every depth.
fn weight(b: &Block) -> usize {
    deep(|| b.stmts.iter().map(stmt_weight).sum())
}

fn stmt_weight(s: &Stmt) -> usize {
    let mut w = 1;
    match s {
        Stmt::Let(_, e) | Stmt::Mut(_, e) | Stmt::Do(e) => {
            super::for_each_block(e, &mut |b| w += weight(b));
        }
        Stmt::For(_, _, b) | Stmt::Loop(b) => w += weight(b),
        _ => {}
    }
    w
}

/// Updates `open`, the `mut`s that may not hold a value after the statements so far, by
/// statement `s`: a `take` at the top level of `s` opens its `mut`, a `set` or `mut` closes
/// it, and a `take` anywhere inside `s`'s blocks (a branch, a loop) opens it too, as it may
/// have run; nothing inside a block closes one.
fn unsettled(s: &Stmt, open: &mut FxHashSet<u32>) {
    let nested = |e: &Expr, open: &mut FxHashSet<u32>| {
        super::for_each_block(e, &mut |b| {
            super::for_each_expr(b, &mut |e| {
                if let Expr::Take(m) = e {
                    open.insert(m.0.id);
                }
            })
        });
    };
    match s {
        Stmt::Let(_, e) | Stmt::Mut(_, e) | Stmt::Do(e) => {
            nested(e, open);
            if let Expr::Take(m) = e {
                open.insert(m.0.id);
            }
            if let Stmt::Mut(m, _) = s {
                open.remove(&m.0.id);
            }
        }
        Stmt::Set(m, _) => {
            open.remove(&m.0.id);
        }
        Stmt::For(_, _, b) | Stmt::Loop(b) => super::for_each_expr(b, &mut |e| {
            if let Expr::Take(m) = e {
                open.insert(m.0.id);
            }
        }),
        _ => {}
    }
}

/// Whether `s` may leave a `loop` around it: it is a `break`, or has one outside any `loop`
/// of its own.
fn breaks_out(s: &Stmt) -> bool {
    let block = |b: &Block| deep(|| b.stmts.iter().any(breaks_out));
    match s {
        Stmt::Break => true,
        Stmt::Loop(_) => false,
        Stmt::For(_, _, b) => block(b),
        Stmt::Let(_, e) | Stmt::Mut(_, e) | Stmt::Do(e) => {
            let mut any = false;
            super::for_each_block(e, &mut |b| any |= block(b));
            any
        }
        _ => false,
    }
}

/// Calls `f` on every variable of a statement (at every depth, binders included).
fn vars_of(s: &mut Stmt, f: &mut dyn FnMut(&mut Var, Occurrence)) {
    let mut b = Block::unit(vec![std::mem::replace(s, Stmt::Break)]);
    for_each_var_mut(&mut b, f);
    *s = b.stmts.pop().expect("the statement just wrapped");
}

struct Splitter<'a> {
    p: &'a mut Program,
    /// The function being split: parts are named after it.
    name: String,
    /// Parts made so far.
    made: usize,
    max_body: usize,
    part: usize,
}

impl Splitter<'_> {
    /// Splits the long blocks inside `b`, then `b` itself. A branch (of an `if` or `match`)
    /// still as long as a part afterwards becomes a part as a whole: nested AD makes trees of
    /// branches each shorter than a part but long together.
    fn block(&mut self, b: &mut Block) {
        deep(|| {
            for s in &mut b.stmts {
                if stmt_weight(s) <= self.part {
                    continue;
                }
                let branches = matches!(
                    s,
                    Stmt::Let(_, Expr::If(..) | Expr::Match(..))
                        | Stmt::Mut(_, Expr::If(..) | Expr::Match(..))
                        | Stmt::Do(Expr::If(..) | Expr::Match(..))
                );
                super::for_each_stmt_block_mut(s, &mut |inner| {
                    self.block(inner);
                    if branches && weight(inner) >= self.part {
                        self.whole(inner);
                    }
                });
            }
            if weight(b) > self.max_body {
                self.cut(b);
            }
        })
    }

    /// Makes all of branch `b` a part, unless a statement of it is pinned.
    fn whole(&mut self, b: &mut Block) {
        if b.stmts.iter().any(breaks_out) {
            return;
        }
        let stmts = std::mem::take(&mut b.stmts);
        let result = match &b.result {
            Atom::Var(x) => Some(x.id),
            _ => None,
        };
        let mut out = Vec::new();
        self.outline(stmts, &|id| Some(id) == result, None, &mut out);
        b.stmts = out;
    }

    /// Outlines runs of `b`'s statements (the module doc's rule).
    fn cut(&mut self, b: &mut Block) {
        let mut stmts = std::mem::take(&mut b.stmts);
        // The `mut`s declared in the block (at any depth); a statement that mentions another
        // is pinned. The last statement that mentions each variable.
        // (A variable is bound before it is mentioned, so one pass in order sees each `mut`'s
        // declaration before its uses.)
        let mut own_muts: FxHashSet<u32> = FxHashSet::default();
        let mut last: FxHashMap<u32, usize> = FxHashMap::default();
        let mut pinned: Vec<bool> = stmts.iter().map(breaks_out).collect();
        for (i, s) in stmts.iter_mut().enumerate() {
            vars_of(s, &mut |x, o| {
                if o.binds && o.mutable {
                    own_muts.insert(x.id);
                } else if o.mutable && !own_muts.contains(&x.id) {
                    pinned[i] = true;
                }
                last.insert(x.id, i);
            });
        }
        if let Atom::Var(x) = &b.result {
            last.insert(x.id, usize::MAX);
        }
        // Runs: `[start, end)` and the `mut`s that may have been taken at `start`, each ending
        // once it has `part` statements (where every `mut` mentioned later holds a value) or,
        // with half that, before a pinned statement.
        let mut runs: Vec<(usize, usize, FxHashSet<u32>)> = Vec::new();
        let mut open: FxHashSet<u32> = FxHashSet::default();
        let mut open_at_start = FxHashSet::default();
        let (mut start, mut run) = (0, 0);
        let settled = |open: &FxHashSet<u32>, end: usize| {
            open.iter().all(|m| last.get(m).is_none_or(|&l| l < end))
        };
        for (i, s) in stmts.iter().enumerate() {
            if pinned[i] {
                if run * 2 >= self.part && settled(&open, i) {
                    runs.push((start, i, std::mem::take(&mut open_at_start)));
                }
                unsettled(s, &mut open);
                (start, run) = (i + 1, 0);
                open_at_start = open.clone();
                continue;
            }
            unsettled(s, &mut open);
            run += stmt_weight(s);
            if run >= self.part && i + 1 < stmts.len() && settled(&open, i + 1) {
                runs.push((start, i + 1, std::mem::take(&mut open_at_start)));
                (start, run) = (i + 1, 0);
                open_at_start = open.clone();
            }
        }
        let mut out = Vec::with_capacity(stmts.len());
        let mut rest = stmts.into_iter().enumerate().peekable();
        for (a, e, open_at_start) in runs {
            while rest.peek().is_some_and(|(i, _)| *i < a) {
                out.push(rest.next().expect("peeked").1);
            }
            let seg: Vec<Stmt> = rest.by_ref().take(e - a).map(|(_, s)| s).collect();
            let live = |id: u32| last.get(&id).is_some_and(|&l| l >= e);
            self.outline(seg, &live, Some(&open_at_start), &mut out);
        }
        out.extend(rest.map(|(_, s)| s));
        b.stmts = out;
    }

    /// Makes the run `seg` a part and pushes its call onto `out`, `live` saying which
    /// variables the block mentions after the run; or pushes the run itself when it would
    /// pass a `mut` that may have been taken before it (`open_at_start`; with `None`, any
    /// `mut`).
    fn outline(
        &mut self,
        mut seg: Vec<Stmt>,
        live: &dyn Fn(u32) -> bool,
        open_at_start: Option<&FxHashSet<u32>>,
        out: &mut Vec<Stmt>,
    ) {
        // What the run binds, and the inputs: what else it mentions, in order of first mention
        // (one pass: a variable is bound before it is mentioned).
        let mut bound = FxHashSet::default();
        let mut inputs: Vec<(Var, bool)> = Vec::new();
        let mut seen = FxHashSet::default();
        for s in &mut seg {
            vars_of(s, &mut |x, o| {
                if o.binds {
                    bound.insert(x.id);
                } else if !bound.contains(&x.id) && seen.insert(x.id) {
                    inputs.push((x.clone(), o.mutable));
                }
            });
        }
        if inputs
            .iter()
            .any(|(x, mutable)| *mutable && open_at_start.is_none_or(|o| o.contains(&x.id)))
        {
            out.extend(seg);
            return;
        }
        let p = &mut *self.p;

        // The part: its inputs unpacked, the `mut`s passed declared, the run, the outputs.
        let in_ty = p.types.tuple(inputs.iter().map(|(x, _)| x.ty).collect());
        let inp = p.var("inp", in_ty);
        let mut body = Vec::new();
        let mut args = Vec::new();
        // Each output and how the block binds it: `let`, `mut` or `set`.
        #[derive(Clone, Copy, PartialEq)]
        enum Bind {
            Let,
            Mut,
            Set,
        }
        let mut outputs: Vec<(Var, Bind)> = Vec::new();
        for (j, (x, mutable)) in inputs.iter().enumerate() {
            if *mutable {
                // The block hands the `mut` over: its last read before the call.
                let a = p.var(&x.name, x.ty);
                out.push(Stmt::Let(a.clone(), Expr::Take(MutVar(x.clone()))));
                args.push(Atom::Var(a));
            } else {
                args.push(Atom::Var(x.clone()));
            }
            let unpacked = if *mutable {
                p.var(&x.name, x.ty)
            } else {
                x.clone()
            };
            if inputs.len() > 1 {
                body.push(Stmt::Let(
                    unpacked.clone(),
                    Expr::Proj(Atom::Var(inp.clone()), j as u32),
                ));
            }
            if *mutable {
                let from = if inputs.len() > 1 { &unpacked } else { &inp };
                body.push(Stmt::Mut(
                    MutVar(x.clone()),
                    Expr::Atom(Atom::Var(from.clone())),
                ));
                if live(x.id) {
                    outputs.push((x.clone(), Bind::Set));
                }
            }
        }
        let param = match inputs.as_slice() {
            [] => None,
            [(x, false)] => Some(x.clone()),
            _ => Some(inp),
        };
        for s in &seg {
            match s {
                Stmt::Let(x, _) if live(x.id) => outputs.push((x.clone(), Bind::Let)),
                Stmt::Mut(m, _) if live(m.0.id) => outputs.push((m.0.clone(), Bind::Mut)),
                _ => {}
            }
        }
        body.extend(seg);
        let mut results = Vec::new();
        for (x, bind) in &outputs {
            if *bind == Bind::Let {
                results.push(Atom::Var(x.clone()));
            } else {
                let v = p.var(&x.name, x.ty);
                body.push(Stmt::Let(v.clone(), Expr::Take(MutVar(x.clone()))));
                results.push(Atom::Var(v));
            }
        }
        let out_ty = p.types.tuple(outputs.iter().map(|(x, _)| x.ty).collect());
        let result = match results.len() {
            0 => Atom::Unit,
            1 => results.pop().expect("one output"),
            _ => {
                let t = p.var("out", out_ty);
                body.push(Stmt::Let(t.clone(), Expr::Tuple(results)));
                Atom::Var(t)
            }
        };
        self.made += 1;
        let mut name = format!("{}_part{}", self.name, self.made);
        while p.find(&name).is_some() {
            name.push('_');
        }
        p.funcs.push(Func {
            name,
            params: param.into_iter().collect(),
            ret: out_ty,
            body: Block {
                stmts: body,
                result,
            },
            accumulates: false,
            rec: None,
        });
        let id = FuncId(p.funcs.len() as u32 - 1);

        // The call, and the outputs bound in the block.
        let arg = if args.len() > 1 {
            let a = p.var("args", in_ty);
            out.push(Stmt::Let(a.clone(), Expr::Tuple(args)));
            vec![Atom::Var(a)]
        } else {
            args
        };
        let t = p.var("part", out_ty);
        out.push(Stmt::Let(t.clone(), Expr::Call(id, arg)));
        for (j, (x, bind)) in outputs.iter().enumerate() {
            let value = if outputs.len() > 1 {
                Expr::Proj(Atom::Var(t.clone()), j as u32)
            } else {
                Expr::Atom(Atom::Var(t.clone()))
            };
            match bind {
                Bind::Let => out.push(Stmt::Let(x.clone(), value)),
                Bind::Mut => {
                    // Through a `let`: a backend moves a field out of a `let`-bound
                    // projection (no copy of the arrays of an accumulator).
                    let v = p.var(&x.name, x.ty);
                    out.push(Stmt::Let(v.clone(), value));
                    out.push(Stmt::Mut(MutVar(x.clone()), Expr::Atom(Atom::Var(v))));
                }
                Bind::Set => {
                    let v = p.var(&x.name, x.ty);
                    out.push(Stmt::Let(v.clone(), value));
                    out.push(Stmt::Set(MutVar(x.clone()), Atom::Var(v)));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::interp::{Val, run};
    use crate::ir::{Op, Ty};

    /// `f(x, c)`: `mut m = 1.0; m = take m + 0.5; [if c { take m }]; <fillers>; set m = 2.0;
    /// get m + Σ fillers`, with `n` fillers `y_k = x + k; s_k = s_(k-1) + y_k`: 2n + 8
    /// statements at the top level (2n + 7 without the conditional `take`).
    fn program(n: usize, conditional_take: bool) -> Program {
        let mut p = Program::default();
        let (x, c) = (p.var("x", Ty::F64), p.var("c", Ty::BOOL));
        let m = p.mut_var("m", Ty::F64);
        let (a, b) = (p.var("a", Ty::F64), p.var("b", Ty::F64));
        let mut stmts = vec![
            Stmt::Mut(m.clone(), Expr::Atom(Atom::F64(1.0))),
            Stmt::Let(a.clone(), Expr::Take(m.clone())),
            Stmt::Let(
                b.clone(),
                Expr::Op(Op::FAdd, vec![Atom::Var(a), Atom::F64(0.5)]),
            ),
            Stmt::Set(m.clone(), Atom::Var(b)),
        ];
        if conditional_take {
            stmts.push(Stmt::Do(Expr::If(
                Atom::Var(c.clone()),
                Block::unit(vec![Stmt::Let(p.var("t", Ty::F64), Expr::Take(m.clone()))]),
                Block::unit(Vec::new()),
            )));
        }
        let mut total = Atom::F64(0.0);
        for k in 0..n {
            let y = p.var("y", Ty::F64);
            stmts.push(Stmt::Let(
                y.clone(),
                Expr::Op(Op::FAdd, vec![Atom::Var(x.clone()), Atom::F64(k as f64)]),
            ));
            let s = p.var("s", Ty::F64);
            stmts.push(Stmt::Let(
                s.clone(),
                Expr::Op(Op::FAdd, vec![total, Atom::Var(y)]),
            ));
            total = Atom::Var(s);
        }
        let (g, r) = (p.var("g", Ty::F64), p.var("r", Ty::F64));
        stmts.extend([
            Stmt::Set(m.clone(), Atom::F64(2.0)),
            Stmt::Let(g.clone(), Expr::Get(m)),
            Stmt::Let(r.clone(), Expr::Op(Op::FAdd, vec![Atom::Var(g), total])),
        ]);
        define_f(&mut p, [x, c], stmts, Atom::Var(r));
        p
    }

    fn value(p: &Program, c: bool) -> f64 {
        match run(p, FuncId(0), vec![Val::F64(0.25), Val::Bool(c)]) {
            Ok(Val::F64(v)) => v,
            other => panic!("{other:?}"),
        }
    }

    /// Adds `f(x, c) = { stmts; result }` to `p`, a real-valued function.
    fn define_f(p: &mut Program, params: [Var; 2], stmts: Vec<Stmt>, result: Atom) {
        p.funcs.push(Func {
            name: "f".into(),
            params: params.into(),
            ret: Ty::F64,
            body: Block { stmts, result },
            accumulates: false,
            rec: None,
        });
    }

    /// `whole` split with these bounds: checked, and computing what `whole` does bit for bit
    /// for both values of `c`.
    fn split_and_compare(whole: &Program, max_body: usize, part: usize) -> Program {
        let mut cut = whole.clone();
        split_functions(&mut cut, max_body, part);
        crate::ir::check::check(&cut).unwrap_or_else(|e| panic!("{e}\n{cut}"));
        for c in [false, true] {
            assert_eq!(value(&cut, c).to_bits(), value(whole, c).to_bits(), "{cut}");
        }
        cut
    }

    #[test]
    fn parts_have_about_the_size_asked_and_compute_the_same() {
        let whole = program(100, false);
        let cut = split_and_compare(&whole, 50, 20);
        // 207 statements, a part per 20 (none cut between `take m` and `set m`): 10 parts,
        // each of its 20 and at most 4 to unpack its inputs and pack its outputs.
        assert_eq!(cut.funcs.len(), 11, "{cut}");
        for f in &cut.funcs[1..] {
            assert!((20..=24).contains(&weight(&f.body)), "{}", f.name);
        }
        // Up to the bound nothing is cut.
        let mut same = whole.clone();
        split_functions(&mut same, 207, 20);
        assert_eq!(same.funcs.len(), 1);
    }

    /// No cut falls where a `mut` mentioned later may have been taken, even with parts of
    /// one statement: not between the top-level `take` and `set`, and not between the `if`
    /// that may take `m` and the `set` after the fillers.
    #[test]
    fn no_cut_where_a_mut_may_have_no_value() {
        let whole = program(10, true);
        let cut = split_and_compare(&whole, 0, 1);
        let has = |f: &Func, which: &dyn Fn(&Stmt) -> bool| f.body.stmts.iter().any(which);
        let take_set = cut.funcs.iter().find(|f| {
            has(f, &|s| matches!(s, Stmt::Let(_, Expr::Take(_))))
                && has(f, &|s| matches!(s, Stmt::Set(_, Atom::Var(_))))
        });
        assert!(take_set.is_some(), "{cut}");
        let conditional = cut
            .funcs
            .iter()
            .find(|f| has(f, &|s| matches!(s, Stmt::Do(_))))
            .expect("the conditional");
        assert!(
            has(conditional, &|s| matches!(s, Stmt::Set(_, Atom::F64(_)))),
            "{cut}"
        );
        assert!(cut.funcs.len() >= 4, "{cut}");
    }

    /// A long branch is split inside: `mut acc = 0.0; let r = if c { <fillers, every tenth
    /// adding to acc> } else { 0.0 }; get acc + r`. The additions to the `mut` declared outside
    /// the branch stay in it (pinned), between parts.
    #[test]
    fn long_branches_are_split_around_outer_muts() {
        let mut p = Program::default();
        let (x, c) = (p.var("x", Ty::F64), p.var("c", Ty::BOOL));
        let acc = p.mut_var("acc", Ty::F64);
        let mut branch = Vec::new();
        let mut total = Atom::F64(0.0);
        for k in 0..200 {
            let y = p.var("y", Ty::F64);
            branch.push(Stmt::Let(
                y.clone(),
                Expr::Op(Op::FAdd, vec![Atom::Var(x.clone()), Atom::F64(k as f64)]),
            ));
            if k % 10 == 0 {
                branch.push(Stmt::AddTo {
                    place: crate::ir::Place::of(&acc),
                    value: Atom::Var(y.clone()),
                    scale: None,
                });
            }
            let s = p.var("s", Ty::F64);
            branch.push(Stmt::Let(
                s.clone(),
                Expr::Op(Op::FAdd, vec![total, Atom::Var(y)]),
            ));
            total = Atom::Var(s);
        }
        let (r, g, sum) = (
            p.var("r", Ty::F64),
            p.var("g", Ty::F64),
            p.var("t", Ty::F64),
        );
        let stmts = vec![
            Stmt::Mut(acc.clone(), Expr::Atom(Atom::F64(0.0))),
            Stmt::Let(
                r.clone(),
                Expr::If(
                    Atom::Var(c.clone()),
                    Block {
                        stmts: branch,
                        result: total,
                    },
                    Block {
                        stmts: Vec::new(),
                        result: Atom::F64(0.0),
                    },
                ),
            ),
            Stmt::Let(g.clone(), Expr::Get(acc)),
            Stmt::Let(
                sum.clone(),
                Expr::Op(Op::FAdd, vec![Atom::Var(g), Atom::Var(r)]),
            ),
        ];
        define_f(&mut p, [x, c], stmts, Atom::Var(sum));
        let p = split_and_compare(&p, 50, 20);
        assert!(p.funcs.len() >= 10, "{p}");
        for f in &p.funcs[1..] {
            assert!(
                !f.body.stmts.iter().any(|s| matches!(s, Stmt::AddTo { .. })),
                "{p}"
            );
        }
    }

    /// A `break` never moves into a part: `loop { if c { <fillers>; break } else { break } }`
    /// split with parts of 4 keeps each `break` in its loop.
    #[test]
    fn breaks_stay_in_their_loop() {
        let mut p = Program::default();
        let (x, c) = (p.var("x", Ty::F64), p.var("c", Ty::BOOL));
        let mut branch = Vec::new();
        let mut total = Atom::Var(x.clone());
        for k in 0..10 {
            let y = p.var("y", Ty::F64);
            branch.push(Stmt::Let(
                y.clone(),
                Expr::Op(Op::FAdd, vec![total, Atom::F64(k as f64)]),
            ));
            total = Atom::Var(y);
        }
        branch.push(Stmt::Break);
        let body = vec![Stmt::Loop(Block::unit(vec![Stmt::Do(Expr::If(
            Atom::Var(c.clone()),
            Block::unit(branch),
            Block::unit(vec![Stmt::Break]),
        ))]))];
        define_f(&mut p, [x.clone(), c], body, Atom::Var(x));
        let p = split_and_compare(&p, 0, 4);
        assert!(p.funcs.len() >= 2, "{p}");
    }
}
