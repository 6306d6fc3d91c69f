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
//! * [`fuse_sums`]: `let ys = build n (i -> B)` whose only use is a later `let s = prim
//!   sum(ys)` in the same block becomes `check len("build", n); let s = sum n (i -> B)` at
//!   the build's place, and the `prim sum` goes: the array is never materialised. A reverse
//!   program computes the primal's `sum (build ..)` this way when the derivative also needs
//!   the array's length (the simplifier does not fuse a `build` that another term reads;
//!   here the length was already resolved to `n` by the lowering). Same value bit for bit
//!   (`sum` and the `sum` primitive add in one fixed order), same errors: the check fails
//!   exactly where `build` would, the body's errors arise in the same order (increasing `i`)
//!   at the same point of the block, and `s`, bound earlier, is still bound before its uses.
//! * [`hoist_invariants`]: a `let` at the top level of a `for`, `build` or `sum` body whose
//!   operands are all bound outside the loop (or by `let`s hoisted before it) and whose
//!   expression cannot fail, has no effect and reads no mutable variable (an operand, a
//!   projection, a length, a tuple or variant, an operation of the lowering, a real
//!   primitive, zero, an addition or scaling) moves before the loop, innermost loops first.
//!   Its value is the same at every iteration, so the loop computes the same values; if the
//!   loop runs zero times the moved `let` is computed once for nothing, which changes no
//!   value and raises no error. Forward and reverse code re-project the (co)tangent of the
//!   environment in every iteration (`d.1` of the tangent tuple, once per element); moved out,
//!   that array is visibly loop-invariant, which the Rust backend's padded reads need.
//! * [`fold_zeros`] (run on dual-number code, [`super::dual`], whose constants have literal
//!   zero tangents): `let x = y` and `let x = c` (a real literal) are forwarded to `x`'s uses;
//!   `c * a` with a literal zero factor is `0.0` (scaling is strong-zero: exactly 0 whatever
//!   the other factor, infinities and NaN included), `1.0 * a` is `a`, `a + 0.0` is `a` (a
//!   real `-0.0` stays `-0.0`, where the addition would give `+0.0`, as in
//!   [`lone_adds`]), and `p += 0.0`, `p += 0.0 * v` for a real `v` go. Nothing removed can fail.
//! * [`lone_adds`]: `mut a = zero τ; ..; a += [c *] y; ..; let v = take a` (or `get a`), where
//!   `a` has no other use at any depth and the `+=` and the read are statements of the block
//!   that declares it, becomes `..; ..; let v = [c *] y`. Linear code materialises a linear
//!   term into a fresh accumulator this way wherever a value is needed (note 07's
//!   sink-or-materialise); when only one term arrives, that is a copy of `y` (an allocation
//!   and a pass over an array) or, for reals, one addition. `zero + y = y` for every additive
//!   type (arrays pad, lists concatenate), so the value is `y`'s, except that a real `-0.0`
//!   stays `-0.0` (as the engine's structural zero plus `y` is `y`). Nothing can fail, and
//!   `y` and `c`, used at the `+=`, are bound at the later read.

use super::{
    Atom, Block, Check, Expr, MutVar, Place, Program, Step, Stmt, Ty, for_each_block,
    for_each_block_mut, same_atom, same_step,
};
use crate::deep::deep;
use rustc_hash::{FxHashMap, FxHashSet};

/// Fuses `prim sum` of a `build` used nowhere else into a `sum` loop (module doc).
pub fn fuse_sums(p: &mut Program) {
    for f in &mut p.funcs {
        let mut uses = FxHashMap::default();
        for x in &f.params {
            uses.entry(x.id).or_insert(0u32);
        }
        count_block(&f.body, &mut uses);
        fuse_block(&mut f.body, &uses);
    }
}

fn fuse_block(b: &mut Block, uses: &FxHashMap<u32, u32>) {
    deep(|| {
        let mut k = 0;
        while k < b.stmts.len() {
            if let Stmt::Let(ys, Expr::Build(..)) = &b.stmts[k]
                && uses.get(&ys.id) == Some(&1)
                && let Some(j) = (k + 1..b.stmts.len()).find(|&j| is_sum_of(&b.stmts[j], ys.id))
            {
                let Stmt::Let(s, _) = b.stmts.remove(j) else {
                    unreachable!("is_sum_of matched a let")
                };
                let Stmt::Let(_, Expr::Build(n, i, body, site)) = b.stmts.remove(k) else {
                    unreachable!("matched above")
                };
                b.stmts
                    .insert(k, Stmt::Check(Check::Len("build", n.clone()), site));
                b.stmts.insert(k + 1, Stmt::Let(s, Expr::Sum(n, i, body)));
                k += 1;
                continue;
            }
            match &mut b.stmts[k] {
                Stmt::Let(_, e) | Stmt::Mut(_, e) | Stmt::Do(e) => {
                    for_each_block_mut(e, &mut |b| fuse_block(b, uses))
                }
                Stmt::For(_, _, body) | Stmt::Loop(body) => fuse_block(body, uses),
                _ => {}
            }
            k += 1;
        }
    })
}

fn is_sum_of(s: &Stmt, ys: u32) -> bool {
    matches!(s, Stmt::Let(_, Expr::Prim(p, args, _))
        if p.name() == "sum" && matches!(args.as_slice(), [Atom::Var(x)] if x.id == ys))
}

/// Counts the occurrences of every variable as an operand, at any depth.
fn count_block(b: &Block, uses: &mut FxHashMap<u32, u32>) {
    deep(|| {
        for s in &b.stmts {
            match s {
                Stmt::Let(_, e) | Stmt::Mut(_, e) | Stmt::Do(e) => count_expr(e, uses),
                Stmt::Set(_, a) => count(a, uses),
                Stmt::AddTo {
                    place,
                    value,
                    scale,
                } => {
                    count_place(place, uses);
                    count(value, uses);
                    scale.iter().for_each(|c| count(c, uses));
                }
                Stmt::Grow(place, n) => {
                    count_place(place, uses);
                    count(n, uses);
                }
                Stmt::For(_, n, body) => {
                    count(n, uses);
                    count_block(body, uses);
                }
                Stmt::Loop(body) => count_block(body, uses),
                Stmt::Break => {}
                Stmt::Check(c, _) => c.atoms().into_iter().for_each(|a| count(a, uses)),
            }
        }
        count(&b.result, uses);
    })
}

fn count(a: &Atom, uses: &mut FxHashMap<u32, u32>) {
    if let Atom::Var(x) = a {
        *uses.entry(x.id).or_insert(0) += 1;
    }
}

fn count_place(p: &Place, uses: &mut FxHashMap<u32, u32>) {
    for s in &p.path {
        if let Step::Elem(a) = s {
            count(a, uses);
        }
    }
}

fn count_expr(e: &Expr, uses: &mut FxHashMap<u32, u32>) {
    match e {
        Expr::Atom(a) | Expr::Proj(a, _) | Expr::Variant(_, _, a) | Expr::Len(a) => count(a, uses),
        Expr::Op(_, xs)
        | Expr::Prim(_, xs, _)
        | Expr::Tuple(xs)
        | Expr::Array(_, xs)
        | Expr::Call(_, xs) => xs.iter().for_each(|a| count(a, uses)),
        Expr::Index(a, i, _)
        | Expr::IndexOr0(a, i)
        | Expr::Add(a, i)
        | Expr::Scale(a, i)
        | Expr::Replicate(a, i, _) => {
            count(a, uses);
            count(i, uses);
        }
        Expr::Build(n, _, b, _) | Expr::Sum(n, _, b) | Expr::Iterate(n, _, b, _, _) => {
            count(n, uses);
            count_block(b, uses);
        }
        Expr::If(c, a, b) => {
            count(c, uses);
            count_block(a, uses);
            count_block(b, uses);
        }
        Expr::Match(a, arms) => {
            count(a, uses);
            arms.iter().for_each(|arm| count_block(&arm.body, uses));
        }
        Expr::Zero(_) | Expr::Get(_) | Expr::Take(_) => {}
    }
}

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
                Stmt::Let(_, e) | Stmt::Mut(_, e) | Stmt::Do(e) => {
                    for_each_block_mut(e, &mut block)
                }
                _ => {}
            }
            out.push(s);
        }
        b.stmts = out;
    })
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

/// Replaces accumulators that receive a single `+=` by the added value (module doc).
pub fn lone_adds(p: &mut Program) {
    for f in &mut p.funcs {
        let mut uses = FxHashMap::default();
        count_muts(&f.body, &mut uses);
        lone_block(&mut f.body, &uses);
    }
}

fn lone_block(b: &mut Block, uses: &FxHashMap<u32, u32>) {
    deep(|| {
        for s in &mut b.stmts {
            match s {
                Stmt::Let(_, e) | Stmt::Mut(_, e) | Stmt::Do(e) => {
                    for_each_block_mut(e, &mut |b| lone_block(b, uses))
                }
                Stmt::For(_, _, body) | Stmt::Loop(body) => lone_block(body, uses),
                _ => {}
            }
        }
        // The candidates of this block: zero-initialised accumulators used exactly three
        // times (declaration, one `+=` at the root, one read), all at this level.
        let mut decl: FxHashMap<u32, usize> = FxHashMap::default();
        let mut add: FxHashMap<u32, usize> = FxHashMap::default();
        let mut read: FxHashMap<u32, usize> = FxHashMap::default();
        for (k, s) in b.stmts.iter().enumerate() {
            match s {
                Stmt::Mut(m, e) if is_zero(e) && uses.get(&m.0.id) == Some(&3) => {
                    decl.insert(m.0.id, k);
                }
                Stmt::AddTo { place, .. } if place.path.is_empty() => {
                    add.insert(place.root.0.id, k);
                }
                Stmt::Let(_, Expr::Take(m) | Expr::Get(m)) => {
                    read.insert(m.0.id, k);
                }
                _ => {}
            }
        }
        let mut drop = FxHashSet::default();
        for (m, &k) in &decl {
            let (Some(&j), Some(&t)) = (add.get(m), read.get(m)) else {
                continue;
            };
            if !(k < j && j < t) {
                continue;
            }
            let Stmt::AddTo { value, scale, .. } = &b.stmts[j] else {
                unreachable!("indexed as an add")
            };
            let e = match scale {
                None => Expr::Atom(value.clone()),
                Some(c) => Expr::Scale(c.clone(), value.clone()),
            };
            let Stmt::Let(_, r) = &mut b.stmts[t] else {
                unreachable!("indexed as a read")
            };
            *r = e;
            drop.insert(k);
            drop.insert(j);
        }
        if !drop.is_empty() {
            let mut k = 0;
            b.stmts.retain(|_| {
                k += 1;
                !drop.contains(&(k - 1))
            });
        }
    })
}

/// `zero τ`, or the real `0.0` (not `-0.0`).
fn is_zero(e: &Expr) -> bool {
    match e {
        Expr::Zero(_) => true,
        Expr::Atom(Atom::F64(z)) => *z == 0.0 && z.is_sign_positive(),
        _ => false,
    }
}

/// Counts the occurrences of every mutable variable (declaration, `set`, places, reads), at
/// any depth.
fn count_muts(b: &Block, uses: &mut FxHashMap<u32, u32>) {
    fn one(m: &MutVar, uses: &mut FxHashMap<u32, u32>) {
        *uses.entry(m.0.id).or_insert(0) += 1;
    }
    fn expr(e: &Expr, uses: &mut FxHashMap<u32, u32>) {
        if let Expr::Get(m) | Expr::Take(m) = e {
            one(m, uses);
        }
        for_each_block(e, &mut |b| count_muts(b, uses));
    }
    deep(|| {
        for s in &b.stmts {
            match s {
                Stmt::Let(_, e) | Stmt::Do(e) => expr(e, uses),
                Stmt::Mut(m, e) => {
                    one(m, uses);
                    expr(e, uses);
                }
                Stmt::Set(m, _) => one(m, uses),
                Stmt::AddTo { place, .. } | Stmt::Grow(place, _) => one(&place.root, uses),
                Stmt::For(_, _, body) | Stmt::Loop(body) => count_muts(body, uses),
                Stmt::Break | Stmt::Check(..) => {}
            }
        }
    })
}

/// Removes the `let`s of a function whose variable is never used and whose expression cannot
/// fail and has no effect (those [`hoist_invariants`] may move), or is one of `also`
/// (expressions known to fail only where code that stays fails first), with the `let`s only
/// they used.
pub fn dead_lets(f: &mut super::Func, also: &std::collections::HashSet<u32>) {
    loop {
        let mut uses = FxHashMap::default();
        count_block(&f.body, &mut uses);
        let mut removed = false;
        dead_block(&mut f.body, &mut uses, also, &mut removed);
        if !removed {
            break;
        }
    }
}

fn dead_block(
    b: &mut Block,
    uses: &mut FxHashMap<u32, u32>,
    also: &std::collections::HashSet<u32>,
    removed: &mut bool,
) {
    deep(|| {
        // Last statement first, so that a chain of dead `let`s goes in one pass.
        let mut keep = Vec::with_capacity(b.stmts.len());
        for mut s in std::mem::take(&mut b.stmts).into_iter().rev() {
            if let Stmt::Let(x, e) = &s
                && uses.get(&x.id).copied().unwrap_or(0) == 0
                && (infallible(e) || also.contains(&x.id))
            {
                let mut gone = FxHashMap::default();
                count_expr(e, &mut gone);
                for (v, n) in gone {
                    if let Some(u) = uses.get_mut(&v) {
                        *u = u.saturating_sub(n);
                    }
                }
                *removed = true;
                continue;
            }
            match &mut s {
                Stmt::For(_, _, body) | Stmt::Loop(body) => dead_block(body, uses, also, removed),
                Stmt::Let(_, e) | Stmt::Mut(_, e) | Stmt::Do(e) => {
                    for_each_block_mut(e, &mut |b| dead_block(b, uses, also, removed))
                }
                _ => {}
            }
            keep.push(s);
        }
        keep.reverse();
        b.stmts = keep;
    })
}

/// Folds strong zeros and forwards copies in a function (module doc, [`fold_zeros`]).
pub fn fold_zeros(f: &mut super::Func) {
    let mut sub = FxHashMap::default();
    fold_block(&mut f.body, &mut sub);
}

fn lit_zero(a: &Atom) -> bool {
    matches!(a, Atom::F64(c) if *c == 0.0)
}

fn fold_block(b: &mut Block, sub: &mut FxHashMap<u32, Atom>) {
    deep(|| {
        let subst = |a: &mut Atom, sub: &FxHashMap<u32, Atom>| {
            if let Atom::Var(v) = a
                && let Some(x) = sub.get(&v.id)
            {
                *a = x.clone();
            }
        };
        let stmts = std::mem::take(&mut b.stmts);
        let mut out = Vec::with_capacity(stmts.len());
        for mut s in stmts {
            super::for_each_stmt_operand_mut(&mut s, &mut |a| subst(a, sub));
            match &mut s {
                Stmt::Let(_, e) | Stmt::Mut(_, e) | Stmt::Do(e) => {
                    for_each_block_mut(e, &mut |b| fold_block(b, sub))
                }
                Stmt::For(_, _, body) | Stmt::Loop(body) => fold_block(body, sub),
                _ => {}
            }
            match &mut s {
                Stmt::Let(x, e) => {
                    let real = x.ty == Ty::F64;
                    let to = match e {
                        Expr::Atom(a @ (Atom::Var(_) | Atom::F64(_))) => Some(a.clone()),
                        Expr::Scale(c, a) if real && (lit_zero(c) || lit_zero(a)) => {
                            Some(Atom::F64(0.0))
                        }
                        Expr::Scale(Atom::F64(one), a) if *one == 1.0 => Some(a.clone()),
                        Expr::Add(z, a) | Expr::Add(a, z) if real && lit_zero(z) => Some(a.clone()),
                        _ => None,
                    };
                    if let Some(a) = to {
                        sub.insert(x.id, a);
                        continue;
                    }
                }
                Stmt::AddTo { value, scale, .. } => {
                    // (Only reals: adding a zero array could still grow the place.)
                    if lit_zero(value)
                        || (value.ty() == Ty::F64 && scale.as_ref().is_some_and(lit_zero))
                    {
                        continue;
                    }
                    if matches!(scale, Some(Atom::F64(one)) if *one == 1.0) {
                        *scale = None;
                    }
                }
                _ => {}
            }
            out.push(s);
        }
        subst(&mut b.result, sub);
        b.stmts = out;
    })
}

/// Moves loop-invariant, infallible `let`s out of counted loops (module doc).
pub fn hoist_invariants(p: &mut Program) {
    for f in &mut p.funcs {
        invariant_block(&mut f.body);
    }
}

fn invariant_block(b: &mut Block) {
    deep(|| {
        let stmts = std::mem::take(&mut b.stmts);
        let mut out = Vec::with_capacity(stmts.len());
        for mut s in stmts {
            match &mut s {
                Stmt::For(i, _, body) => {
                    invariant_block(body);
                    out.extend(hoist_from(i, body));
                }
                Stmt::Let(_, Expr::Build(_, i, body, _) | Expr::Sum(_, i, body)) => {
                    invariant_block(body);
                    out.extend(hoist_from(i, body));
                }
                Stmt::Loop(body) => invariant_block(body),
                Stmt::Let(_, e) | Stmt::Mut(_, e) | Stmt::Do(e) => {
                    for_each_block_mut(e, &mut invariant_block)
                }
                _ => {}
            }
            out.push(s);
        }
        b.stmts = out;
    })
}

/// The invariant `let`s of a loop body over `i`, removed from it, in order.
fn hoist_from(i: &super::Var, body: &mut Block) -> Vec<Stmt> {
    let mut defined = FxHashSet::default();
    defined.insert(i.id);
    defs(body, &mut defined);
    let mut hoisted = Vec::new();
    body.stmts.retain(|s| match s {
        Stmt::Let(x, e) if infallible(e) && operands(e).all(|a| outside(a, &defined)) => {
            defined.remove(&x.id);
            hoisted.push(s.clone());
            false
        }
        _ => true,
    });
    hoisted
}

/// Expressions that cannot fail, have no effect and read no mutable variable.
pub(crate) fn infallible(e: &Expr) -> bool {
    use crate::prim::Scalar;
    match e {
        Expr::Atom(_)
        | Expr::Op(..)
        | Expr::Tuple(_)
        | Expr::Proj(..)
        | Expr::Variant(..)
        | Expr::Len(_)
        | Expr::Zero(_)
        | Expr::Add(..)
        | Expr::Scale(..) => true,
        Expr::Prim(p, _, _) => matches!(
            p.scalar(),
            Some(Scalar::Real1(_) | Scalar::Real2(_) | Scalar::RealCmp(_))
        ),
        _ => false,
    }
}

/// The operands of an expression without blocks.
pub(crate) fn operands(e: &Expr) -> impl Iterator<Item = &Atom> {
    let v: Vec<&Atom> = match e {
        Expr::Atom(a) | Expr::Proj(a, _) | Expr::Variant(_, _, a) | Expr::Len(a) => vec![a],
        Expr::Op(_, xs) | Expr::Prim(_, xs, _) | Expr::Tuple(xs) => xs.iter().collect(),
        Expr::Add(a, b) | Expr::Scale(a, b) => vec![a, b],
        _ => Vec::new(),
    };
    v.into_iter()
}
