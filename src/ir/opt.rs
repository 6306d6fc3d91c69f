//! IR-to-IR passes run on every lowered program (before checking and every backend).
//!
//! * [`hoist_grows`]: `grow p n` at the top level of a `for` loop's body, with `p` and `n`
//!   defined outside the loop, moves before the loop. A one-hot in reverse-mode code lowers to
//!   `grow acc n; acc[i] += v` where it occurs, so a loop of one-hots would test the
//!   accumulator's length at every iteration; hoisted, the Rust backend can also borrow the
//!   accumulator as a slice for the whole loop (note 07). Growing is adding zeros: arrays add
//!   by padding with zeros and read zero past their end, so an accumulator grown before a
//!   loop that then runs zero times denotes the same value, and growing cannot fail, so no
//!   error moves.

use super::{Atom, Block, Expr, Place, Program, Step, Stmt, same_atom, same_step};
use crate::deep::deep;
use rustc_hash::FxHashSet;

/// Hoists loop-invariant `grow`s out of `for` loops, innermost first.
pub fn hoist_grows(p: &mut Program) {
    for f in &mut p.funcs {
        block(&mut f.body);
    }
}

fn block(b: &mut Block) {
    deep(|| {
        let stmts = std::mem::take(&mut b.stmts);
        let mut out = Vec::with_capacity(stmts.len());
        for mut s in stmts {
            match &mut s {
                Stmt::For(i, _, body) => {
                    block(body);
                    let mut defined = FxHashSet::default();
                    defined.insert(i.id);
                    defs(body, &mut defined);
                    let mut hoisted: Vec<Stmt> = Vec::new();
                    body.stmts.retain(|s| match s {
                        Stmt::Grow(p, n) if invariant(p, n, &defined) => {
                            if !hoisted.iter().any(|h| same_grow(h, s)) {
                                hoisted.push(s.clone());
                            }
                            false
                        }
                        _ => true,
                    });
                    out.extend(hoisted);
                }
                Stmt::Loop(body) => block(body),
                Stmt::Let(_, e) | Stmt::Mut(_, e) | Stmt::Do(e) => expr(e),
                _ => {}
            }
            out.push(s);
        }
        b.stmts = out;
    })
}

fn expr(e: &mut Expr) {
    match e {
        Expr::Build(_, _, b, _) | Expr::Sum(_, _, b) | Expr::Iterate(_, _, b, _, _) => block(b),
        Expr::If(_, a, b) => {
            block(a);
            block(b);
        }
        Expr::Match(_, arms) => arms.iter_mut().for_each(|a| block(&mut a.body)),
        _ => {}
    }
}

/// Every variable (and mutable variable) a block binds, at any depth.
fn defs(b: &Block, out: &mut FxHashSet<u32>) {
    deep(|| {
        for s in &b.stmts {
            match s {
                Stmt::Let(x, e) => {
                    out.insert(x.id);
                    expr_defs(e, out);
                }
                Stmt::Mut(m, e) => {
                    out.insert(m.0.id);
                    expr_defs(e, out);
                }
                Stmt::Do(e) => expr_defs(e, out),
                Stmt::For(i, _, body) => {
                    out.insert(i.id);
                    defs(body, out);
                }
                Stmt::Loop(body) => defs(body, out),
                _ => {}
            }
        }
    })
}

fn expr_defs(e: &Expr, out: &mut FxHashSet<u32>) {
    match e {
        Expr::Build(_, i, b, _) | Expr::Sum(_, i, b) | Expr::Iterate(_, i, b, _, _) => {
            out.insert(i.id);
            defs(b, out);
        }
        Expr::If(_, a, b) => {
            defs(a, out);
            defs(b, out);
        }
        Expr::Match(_, arms) => {
            for a in arms {
                if let Some(x) = &a.bind {
                    out.insert(x.id);
                }
                defs(&a.body, out);
            }
        }
        _ => {}
    }
}

fn outside(a: &Atom, defined: &FxHashSet<u32>) -> bool {
    match a {
        Atom::Var(x) => !defined.contains(&x.id),
        _ => true,
    }
}

fn invariant(p: &Place, n: &Atom, defined: &FxHashSet<u32>) -> bool {
    !defined.contains(&p.root.0.id)
        && outside(n, defined)
        && p.path.iter().all(|s| match s {
            Step::Field(_) => true,
            Step::Elem(a) => outside(a, defined),
        })
}

fn same_grow(a: &Stmt, b: &Stmt) -> bool {
    match (a, b) {
        (Stmt::Grow(p, n), Stmt::Grow(q, m)) => {
            p.root.0.id == q.root.0.id
                && same_atom(n, m)
                && p.path.len() == q.path.len()
                && p.path.iter().zip(&q.path).all(|(s, t)| same_step(s, t))
        }
        _ => false,
    }
}
