//! Splitting long function bodies into parts, for compilers whose time grows faster than
//! linearly with the size of one function.
//!
//! A straight-line program of `n` lets lowers to functions of `O(n)` statements (its primal,
//! its JVP, its VJP with a tape of `O(n)` values), and rustc's optimiser spends time
//! quadratic in the size of one function or basic block on them (instruction scheduling of a
//! basic block, MIR destination propagation; note 07 §8): 10³ lets compiled in 13 s, 3·10³
//! in 113 s, 10⁴ not within 15 minutes. [`split_long_functions`] cuts every function whose
//! body has more than [`MAX_BODY`] statements (counted at every depth) into *parts* of about
//! [`PART`] statements, each its own function, so that every function the backend sees is
//! small and the total compile time grows linearly.
//!
//! # The rule
//!
//! Only the top level of a function body is cut, between statements; a part is a run of
//! consecutive top-level statements `S` and becomes a function `f_partK`, the function's body
//! keeping its last run (the tail) and its result. For each part, in order:
//!
//! * its *inputs* are the variables `S` mentions (at any depth) that are defined outside it:
//!   the function's parameters and the outputs of earlier parts (no other variable defined
//!   before `S` is still in scope in the function: every statement before it moved into an
//!   earlier part). They are passed as one tuple (or as the one value, or nothing);
//! * a `mut` variable among the inputs is passed by value: the function takes it (`let a =
//!   take m`, its last read there), the part starts with `mut m = a`;
//! * its *outputs* are the variables bound at `S`'s top level and the `mut`s it was passed
//!   or declares that a later statement or the result mentions (liveness by a backward pass,
//!   computed once). A `mut` output is read at the part's end by `take` and declared again
//!   in the function, `mut m' = t.k`, under a fresh identity `m'` that every later mention
//!   of `m` is renamed to (a variable is defined once per function); an immutable output
//!   keeps its identity (`let x = t.k`): it was defined in the part, a different function.
//!
//! The statements run in the same order with the same values, so every value and every
//! runtime error is the same: a call of a function that is not recursive takes no step of
//! the step budget and no level of the recursion depth limit, and a `take` followed by `mut`
//! of the same value is a move. `take` is the last read of the variable: after the call only
//! the fresh `m'` is read. What is left of a cut `mut` is its representation in the Rust
//! backend: an array accumulator passed between parts is converted to a value and back
//! (O(1) per array, an allocation), once per part and never inside a loop, since only the top
//! level is cut.

use super::{Atom, Block, Expr, Func, FuncId, MutVar, Program, Stmt, Var, for_each_var_mut};
use crate::deep::deep;
use rustc_hash::{FxHashMap, FxHashSet};

/// A function whose body has more statements than this (at every depth) is split.
pub const MAX_BODY: usize = 1500;

/// The statements (at every depth) a part gets before it is cut.
pub const PART: usize = 500;

/// Splits every function of `p` whose body is longer than [`MAX_BODY`] statements into parts
/// of about [`PART`] statements (see the module doc).
pub fn split_long_functions(p: &mut Program) {
    split_functions(p, MAX_BODY, PART);
}

/// [`split_long_functions`] with the bounds given: functions whose body has more than
/// `max_body` statements, parts of about `part`.
pub fn split_functions(p: &mut Program, max_body: usize, part: usize) {
    let n = p.funcs.len();
    for k in 0..n {
        if weight(&p.funcs[k].body) > max_body {
            split_func(p, k, part.max(1));
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
/// statement `s`: a `take` leaves a `mut` without a value until a `set` or `mut` gives it one
/// (`take acc; let y = call acc_apply(f, v, a); set acc = y` is how reverse code applies a
/// linear function to an accumulator). A `take` at the top level of `s` opens its `mut`; a
/// `set` or `mut` closes it; a `take` anywhere inside `s`'s blocks (a branch, a loop) opens
/// it too, as it may have run, and nothing inside a block closes one.
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

/// Calls `f` on every variable of a statement (at every depth, binders included).
fn vars_of(s: &mut Stmt, f: &mut dyn FnMut(&mut Var)) {
    let mut b = Block::unit(vec![std::mem::replace(s, Stmt::Break)]);
    for_each_var_mut(&mut b, f);
    *s = b.stmts.pop().expect("the statement just wrapped");
}

fn split_func(p: &mut Program, k: usize, part: usize) {
    let mut stmts = std::mem::take(&mut p.funcs[k].body.stmts);
    let mut result = p.funcs[k].body.result.clone();
    let params = p.funcs[k].params.clone();
    let name = p.funcs[k].name.clone();

    // The cuts: a part ends at the first cut point once it has `part` statements, and a
    // tail of at least one statement stays in the function. A cut point is one where every
    // `mut` mentioned later holds a value (see `unsettled`).
    let mut last: FxHashMap<u32, usize> = FxHashMap::default();
    for (i, s) in stmts.iter_mut().enumerate() {
        vars_of(s, &mut |x| {
            last.insert(x.id, i);
        });
    }
    let mut cuts = Vec::new();
    let mut run = 0;
    let mut open: FxHashSet<u32> = FxHashSet::default();
    for (i, s) in stmts.iter().enumerate() {
        unsettled(s, &mut open);
        run += stmt_weight(s);
        if run >= part && i + 1 < stmts.len() && open.iter().all(|m| last[m] <= i) {
            cuts.push(i + 1);
            run = 0;
        }
    }
    if cuts.is_empty() {
        p.funcs[k].body.stmts = stmts;
        return;
    }

    // Liveness at each cut: the variables mentioned from there on (original identities).
    let mut live_after: Vec<FxHashSet<u32>> = vec![FxHashSet::default(); cuts.len()];
    let mut live = FxHashSet::default();
    if let Atom::Var(x) = &result {
        live.insert(x.id);
    }
    let mut c = cuts.len();
    for i in (0..stmts.len()).rev() {
        vars_of(&mut stmts[i], &mut |x| {
            live.insert(x.id);
        });
        if c > 0 && i == cuts[c - 1] {
            live_after[c - 1] = live.clone();
            c -= 1;
        }
    }

    // What the function has in scope between parts: identity -> (variable, mutable).
    let mut scope: FxHashMap<u32, (Var, bool)> =
        params.iter().map(|x| (x.id, (x.clone(), false))).collect();
    // The `mut`s declared again in the function: original identity -> current variable,
    // and back.
    let mut renamed: FxHashMap<u32, Var> = FxHashMap::default();
    let mut original: FxHashMap<u32, u32> = FxHashMap::default();
    let mut body: Vec<Stmt> = Vec::new();
    let mut rest = stmts.into_iter();
    let mut start = 0;
    for (n, (&end, after)) in cuts.iter().zip(&live_after).enumerate() {
        let mut seg: Vec<Stmt> = rest.by_ref().take(end - start).collect();
        start = end;
        // Mentions of `mut`s the function declared again, and the inputs in order of first
        // mention.
        let mut inputs: Vec<(Var, bool)> = Vec::new();
        let mut seen = FxHashSet::default();
        for s in &mut seg {
            vars_of(s, &mut |x| {
                if let Some(v) = renamed.get(&x.id) {
                    *x = v.clone();
                }
                if let Some((v, m)) = scope.get(&x.id)
                    && seen.insert(x.id)
                {
                    inputs.push((v.clone(), *m));
                }
            });
        }
        let is_live = |id: u32| after.contains(original.get(&id).unwrap_or(&id));

        // The part's statements: its inputs unpacked, the `mut`s declared, the run.
        let mut part_stmts = Vec::new();
        let mut args = Vec::new();
        let in_ty = p.types.tuple(inputs.iter().map(|(x, _)| x.ty).collect());
        let inp = p.var("inp", in_ty);
        let mut outputs: Vec<(Var, bool)> = Vec::new();
        for (j, (x, mutable)) in inputs.iter().enumerate() {
            let value = if *mutable {
                // The function hands the `mut` over: its last read there.
                let a = p.var(&x.name, x.ty);
                body.push(Stmt::Let(a.clone(), Expr::Take(MutVar(x.clone()))));
                scope.remove(&x.id);
                a
            } else {
                x.clone()
            };
            args.push(Atom::Var(value.clone()));
            let unpacked = if *mutable {
                p.var(&x.name, x.ty)
            } else {
                x.clone()
            };
            if inputs.len() > 1 {
                part_stmts.push(Stmt::Let(
                    unpacked.clone(),
                    Expr::Proj(Atom::Var(inp.clone()), j as u32),
                ));
            }
            if *mutable {
                let from = if inputs.len() > 1 { &unpacked } else { &inp };
                part_stmts.push(Stmt::Mut(
                    MutVar(x.clone()),
                    Expr::Atom(Atom::Var(from.clone())),
                ));
                if is_live(x.id) {
                    outputs.push((x.clone(), true));
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
                Stmt::Let(x, _) if is_live(x.id) => outputs.push((x.clone(), false)),
                Stmt::Mut(m, _) if is_live(m.0.id) => outputs.push((m.0.clone(), true)),
                _ => {}
            }
        }
        part_stmts.extend(seg);
        let mut out_atoms = Vec::new();
        for (x, mutable) in &outputs {
            if *mutable {
                let v = p.var(&x.name, x.ty);
                part_stmts.push(Stmt::Let(v.clone(), Expr::Take(MutVar(x.clone()))));
                out_atoms.push(Atom::Var(v));
            } else {
                out_atoms.push(Atom::Var(x.clone()));
            }
        }
        let out_ty = p.types.tuple(outputs.iter().map(|(x, _)| x.ty).collect());
        let part_result = match out_atoms.len() {
            0 => Atom::Unit,
            1 => out_atoms.pop().expect("one output"),
            _ => {
                let t = p.var("out", out_ty);
                part_stmts.push(Stmt::Let(t.clone(), Expr::Tuple(out_atoms)));
                Atom::Var(t)
            }
        };
        let mut part_name = format!("{name}_part{}", n + 1);
        while p.find(&part_name).is_some() {
            part_name.push('_');
        }
        p.funcs.push(Func {
            name: part_name,
            params: param.into_iter().collect(),
            ret: out_ty,
            body: Block {
                stmts: part_stmts,
                result: part_result,
            },
            accumulates: false,
            rec: None,
        });
        let id = FuncId(p.funcs.len() as u32 - 1);

        // The call, and the outputs bound in the function.
        let arg = match args.len() {
            0 | 1 => args,
            _ => {
                let a = p.var("args", in_ty);
                body.push(Stmt::Let(a.clone(), Expr::Tuple(args)));
                vec![Atom::Var(a)]
            }
        };
        let t = p.var("part", out_ty);
        body.push(Stmt::Let(t.clone(), Expr::Call(id, arg)));
        for (j, (x, mutable)) in outputs.iter().enumerate() {
            let value = if outputs.len() > 1 {
                Expr::Proj(Atom::Var(t.clone()), j as u32)
            } else {
                Expr::Atom(Atom::Var(t.clone()))
            };
            if *mutable {
                let fresh = p.var(&x.name, x.ty);
                let orig = *original.get(&x.id).unwrap_or(&x.id);
                renamed.insert(orig, fresh.clone());
                original.insert(fresh.id, orig);
                scope.insert(fresh.id, (fresh.clone(), true));
                body.push(Stmt::Mut(MutVar(fresh), value));
            } else {
                scope.insert(x.id, (x.clone(), false));
                body.push(Stmt::Let(x.clone(), value));
            }
        }
    }
    // The tail stays, with the renamed `mut`s.
    for mut s in rest {
        vars_of(&mut s, &mut |x| {
            if let Some(v) = renamed.get(&x.id) {
                *x = v.clone();
            }
        });
        body.push(s);
    }
    if let Atom::Var(x) = &mut result
        && let Some(v) = renamed.get(&x.id)
    {
        *x = v.clone();
    }
    let f = &mut p.funcs[k];
    f.body = Block {
        stmts: body,
        result,
    };
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
        p.funcs.push(Func {
            name: "f".into(),
            params: vec![x, c],
            ret: Ty::F64,
            body: Block {
                stmts,
                result: Atom::Var(r),
            },
            accumulates: false,
            rec: None,
        });
        p
    }

    fn value(p: &Program, c: bool) -> f64 {
        match run(p, FuncId(0), vec![Val::F64(0.25), Val::Bool(c)]) {
            Ok(Val::F64(v)) => v,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn parts_have_about_the_size_asked_and_compute_the_same() {
        let whole = program(100, false);
        let mut cut = whole.clone();
        split_functions(&mut cut, 50, 20);
        crate::ir::check::check(&cut).unwrap_or_else(|e| panic!("{e}\n{cut}"));
        // 207 statements, a part per 20 (none cut between `take m` and `set m`): 10 parts,
        // each of its 20 and at most 4 to unpack its inputs and pack its outputs.
        assert_eq!(cut.funcs.len(), 11, "{cut}");
        for f in &cut.funcs[1..] {
            assert!((20..=24).contains(&weight(&f.body)), "{}", f.name);
        }
        for c in [false, true] {
            assert_eq!(value(&cut, c).to_bits(), value(&whole, c).to_bits());
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
        let mut cut = whole.clone();
        split_functions(&mut cut, 0, 1);
        crate::ir::check::check(&cut).unwrap_or_else(|e| panic!("{e}\n{cut}"));
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
        for c in [false, true] {
            assert_eq!(value(&cut, c).to_bits(), value(&whole, c).to_bits());
        }
    }
}
