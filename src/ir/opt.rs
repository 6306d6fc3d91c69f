//! IR-to-IR passes run on every lowered program (before checking and every backend).
//!
//! * [`hoist_grows`]: `grow p n` at the top level of a `for` loop's body, with `p` and `n`
//!   defined outside the loop, moves before the loop. A one-hot in reverse-mode code lowers to
//!   `grow acc n; acc[i] += v` where it occurs, so a loop of one-hots would test the
//!   accumulator's length at every iteration; hoisted, the Rust backend can also borrow the
//!   accumulator as a slice for the whole loop (note 07). Growing is adding zeros: arrays add
//!   by padding with zeros and read zero past their end, so an accumulator grown before a
//!   loop that then runs zero times denotes the same value, and growing cannot fail, so no
//!   error moves. Then a `grow p n` that an identical `grow p n` before it already did goes:
//!   one before it in its block or an enclosing one, with no `set` or `take` of `p`'s
//!   variable in between (nor anywhere in a loop around it that the earlier grow is outside
//!   of, whose next iteration would come after such a `take`). Only `set` and `take` make an
//!   array shorter: `+=` and `grow` only lengthen it. A chain of one-hots at constant
//!   indices (`xs ! 0 + xs ! 1 + ..` differentiated) lowers to one `grow` per one-hot.
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
//!   the other factor, infinities and NaN included), `1.0 * a` and `a * 1.0` are `a`, `a + 0.0` is `a` (a
//!   real `-0.0` stays `-0.0`, where the addition would give `+0.0`, as in
//!   [`lone_adds`]), `p += 0.0`, `p += 0.0 * v` for a real `v` go, and `mut a = 0.0 * v` starts
//!   at `0.0`. Nothing removed can fail.
//! * [`lone_adds`]: `mut a = zero τ; ..; a += [c *] y; ..; let v = take a` (or `get a`), where
//!   `a` has no other use at any depth and the `+=` and the read are statements of the block
//!   that declares it, becomes `..; ..; let v = [c *] y`. Linear code materialises a linear
//!   term into a fresh accumulator this way wherever a value is needed (note 07's
//!   sink-or-materialise); when only one term arrives, that is a copy of `y` (an allocation
//!   and a pass over an array) or, for reals, one addition. `zero + y = y` for every additive
//!   type (arrays pad, lists concatenate), so the value is `y`'s, except that a real `-0.0`
//!   stays `-0.0` (as the engine's structural zero plus `y` is `y`). Nothing can fail, and
//!   `y` and `c`, used at the `+=`, are bound at the later read.
//! * [`first_adds`]: `mut a = zero τ; ..; a += [c *] y` for `τ` a real or a tuple of reals,
//!   where no statement between mentions `a` and the `+=` (to the whole of `a`) is a
//!   statement of the block that declares it, becomes `..; mut a = [c *] y`: the
//!   accumulation starts with its first term rather than adding it to zero. Linear code
//!   declares an accumulator per cotangent it sums (`acc += a * v; acc += b * w`), so the
//!   first term cost an addition of `0.0`, which the Rust compiler must keep (`0.0 + -0.0`
//!   is `+0.0`). `zero + y = y`, except for a real `-0.0`, which stays `-0.0` (as in
//!   [`lone_adds`] and the engine's structural zeros). Nothing moves that can fail, and `a`
//!   is unread until its first addition.
//! * [`unzip_arrays`] (run last on every compiled module, and on the Hessian-vector product's
//!   program after the dual-number transformation, whose arrays of reals are arrays of pairs
//!   `[(f64, f64)]`): keeps arrays of tuples apart where that costs nothing, by three
//!   passes, each exact on its own:
//!   * [`split_accumulators`]: an accumulator `mut a = zero τ` whose array of tuples at a
//!     field path `P` is only grown and added to element-wise (`grow a.P n`, `a.P[i] += v`,
//!     `a.P[i].k.. += v`; no `+=` of a whole value containing it, no `set`) becomes an
//!     accumulator of the tuple of arrays at `P`: `grow` grows each array, `a.P[i] += v`
//!     adds `v.k` to `a.P.k[i]` (and a place inside an element, `a.P[i].k..`, is
//!     `a.P.k[i]..`), and `take a`/`get a` rebuilds the value, zipping the arrays
//!     with `build` (they were grown together: one length, checked by a `check same_len`
//!     that cannot fail). Adding is componentwise and arrays pad with zeros, so the zipped
//!     arrays are the array of tuples the accumulator held; nothing new can fail.
//!   * [`inline_views`]: `let m = build n (i -> B)` whose body only moves data (operands,
//!     tuples, projections, lengths, in-range and padded reads; at most [`VIEW_STMTS`]
//!     `let`s) and whose every use is an in-range read `let x = m[j]` or `let x = len m` is
//!     not built: the reads become a copy of `B` at `i = j` (fresh variables), the length
//!     `n`, and a `check len("build", n)` stays where the build was. `B` cannot fail at any
//!     `i < n` and `j < n`, so no error moves; the dual code's zip of `x` and `dx` into an
//!     array of pairs, read in the loops that follow, is the case this is for.
//!   * [`forward`]: copies and projections of tuples bound in scope are forwarded to their
//!     uses, and `build n (i -> ..; let e = a[i]; ..; e)` with `n = len a` (or a length a
//!     `check same_len` equates with it) and nothing else that can fail is `a` (arrays are
//!     values: sharing one is copying it). With [`dead_lets`] after each, the unzipping
//!     builds that read a rebuilt accumulator go, and the arrays of reals are returned as
//!     they were accumulated.
use super::{
    Atom, Block, Check, Expr, MutVar, Place, Program, Step, Stmt, Ty, for_each_block,
    for_each_block_mut, for_each_stmt_block_mut, same_atom, same_step,
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
            for_each_stmt_block_mut(&mut b.stmts[k], &mut |b| fuse_block(b, uses));
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

/// Hoists loop-invariant `grow`s out of `for` loops, innermost first, then drops the
/// `grow`s an identical earlier one already did (module doc).
pub fn hoist_grows(p: &mut Program) {
    for f in &mut p.funcs {
        block(&mut f.body);
        regrows(&mut f.body, Vec::new());
    }
}

/// Drops the `grow`s of `b` that one in `grown` (done before `b`, still in force) or an
/// earlier one of `b` already did.
fn regrows(b: &mut Block, mut grown: Vec<Stmt>) {
    deep(|| {
        let stmts = std::mem::take(&mut b.stmts);
        let mut out = Vec::with_capacity(stmts.len());
        for mut s in stmts {
            if let Stmt::Grow(..) = &s {
                if !grown.iter().any(|g| same_grow(g, &s)) {
                    grown.push(s.clone());
                    out.push(s);
                }
                continue;
            }
            let mut cut = FxHashSet::default();
            shortened(&s, &mut cut);
            if !cut.is_empty() {
                grown.retain(|g| !matches!(g, Stmt::Grow(p, _) if cut.contains(&p.root.0.id)));
            }
            // What holds after the statements before `s` and throughout `s` holds at the start
            // of each of its blocks, in every iteration.
            for_each_stmt_block_mut(&mut s, &mut |b| regrows(b, grown.clone()));
            out.push(s);
        }
        b.stmts = out;
    })
}

/// The mutable variables a statement may make shorter: those it `set`s or `take`s, at any
/// depth.
fn shortened(s: &Stmt, out: &mut FxHashSet<u32>) {
    let expr = |e: &Expr, out: &mut FxHashSet<u32>| {
        if let Expr::Take(m) = e {
            out.insert(m.0.id);
        }
        for_each_block(e, &mut |b| b.stmts.iter().for_each(|s| shortened(s, out)));
    };
    match s {
        Stmt::Set(m, _) => {
            out.insert(m.0.id);
        }
        Stmt::Let(_, e) | Stmt::Mut(_, e) | Stmt::Do(e) => expr(e, out),
        Stmt::For(_, _, body) | Stmt::Loop(body) => {
            deep(|| body.stmts.iter().for_each(|s| shortened(s, out)))
        }
        Stmt::AddTo { .. } | Stmt::Grow(..) | Stmt::Break | Stmt::Check(..) => {}
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
            for_each_stmt_block_mut(s, &mut |b| lone_block(b, uses));
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

/// Starts accumulators of reals with their first addition (module doc).
pub fn first_adds(p: &mut Program) {
    let types = &p.types;
    for f in &mut p.funcs {
        first_block(&mut f.body, types);
    }
}

/// A real, or a tuple of reals and units (the accumulators whose start is a plain copy).
fn reals(types: &super::Types, t: Ty) -> bool {
    deep(|| match types.kind(t) {
        super::TyKind::F64 | super::TyKind::Unit => true,
        super::TyKind::Tuple(ts) => ts.iter().all(|&t| reals(types, t)),
        _ => false,
    })
}

fn first_block(b: &mut Block, types: &super::Types) {
    deep(|| {
        for s in &mut b.stmts {
            for_each_stmt_block_mut(s, &mut |b| first_block(b, types));
        }
        // One sweep: each zero-initialised accumulator of reals waits for the first statement
        // that mentions it (at any depth); if that is a `+=` to the whole of it at this level,
        // the pair becomes one declaration there.
        let mut waiting: FxHashMap<u32, usize> = FxHashMap::default();
        let mut starts: Vec<(usize, usize)> = Vec::new();
        let mut mentioned = FxHashMap::default();
        for (k, s) in b.stmts.iter().enumerate() {
            if !waiting.is_empty() {
                mentioned.clear();
                count_stmt_muts(s, &mut mentioned);
                for m in mentioned.keys() {
                    let Some(d) = waiting.remove(m) else { continue };
                    if let Stmt::AddTo { place, .. } = s
                        && place.path.is_empty()
                        && place.root.0.id == *m
                    {
                        starts.push((d, k));
                    }
                }
            }
            if let Stmt::Mut(m, e) = s
                && is_zero(e)
                && reals(types, m.0.ty)
            {
                waiting.insert(m.0.id, k);
            }
        }
        if starts.is_empty() {
            return;
        }
        let mut gone = FxHashSet::default();
        for (d, k) in starts {
            let Stmt::Mut(m, _) = &b.stmts[d] else {
                unreachable!("indexed as a declaration")
            };
            let m = m.clone();
            let Stmt::AddTo { value, scale, .. } = &b.stmts[k] else {
                unreachable!("indexed as an add")
            };
            let e = match scale {
                None => Expr::Atom(value.clone()),
                Some(c) => Expr::Scale(c.clone(), value.clone()),
            };
            b.stmts[k] = Stmt::Mut(m, e);
            gone.insert(d);
        }
        let mut k = 0;
        b.stmts.retain(|_| {
            k += 1;
            !gone.contains(&(k - 1))
        });
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
    deep(|| {
        for s in &b.stmts {
            count_stmt_muts(s, uses);
        }
    })
}

/// [`count_muts`] of one statement.
fn count_stmt_muts(s: &Stmt, uses: &mut FxHashMap<u32, u32>) {
    fn one(m: &MutVar, uses: &mut FxHashMap<u32, u32>) {
        *uses.entry(m.0.id).or_insert(0) += 1;
    }
    fn expr(e: &Expr, uses: &mut FxHashMap<u32, u32>) {
        if let Expr::Get(m) | Expr::Take(m) = e {
            one(m, uses);
        }
        for_each_block(e, &mut |b| count_muts(b, uses));
    }
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
            for_each_stmt_block_mut(&mut s, &mut |b| dead_block(b, uses, also, removed));
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
            for_each_stmt_block_mut(&mut s, &mut |b| fold_block(b, sub));
            match &mut s {
                Stmt::Let(x, e) => {
                    let real = x.ty == Ty::F64;
                    let to = match e {
                        Expr::Atom(a @ (Atom::Var(_) | Atom::F64(_))) => Some(a.clone()),
                        Expr::Scale(c, a) if real && (lit_zero(c) || lit_zero(a)) => {
                            Some(Atom::F64(0.0))
                        }
                        Expr::Scale(Atom::F64(one), a) if *one == 1.0 => Some(a.clone()),
                        Expr::Scale(c, Atom::F64(one)) if real && *one == 1.0 => Some(c.clone()),
                        Expr::Add(z, a) | Expr::Add(a, z) if real && lit_zero(z) => Some(a.clone()),
                        _ => None,
                    };
                    if let Some(a) = to {
                        sub.insert(x.id, a);
                        continue;
                    }
                }
                // An accumulator started with its first term ([`first_adds`]).
                Stmt::Mut(m, e @ Expr::Scale(..)) if m.0.ty == Ty::F64 => {
                    if let Expr::Scale(c, a) = e
                        && (lit_zero(c) || lit_zero(a))
                    {
                        *e = Expr::Atom(Atom::F64(0.0));
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

/// Inlines views at their reads (module doc, [`inline_views`]).
pub fn inline_views(p: &mut Program) {
    let Some(internal) = p.internal_site else {
        return;
    };
    for k in 0..p.funcs.len() {
        let mut body = std::mem::replace(&mut p.funcs[k].body, Block::unit(Vec::new()));
        let mut uses = FxHashMap::default();
        count_block(&body, &mut uses);
        let mut reads = FxHashMap::default();
        count_reads(&body, internal, &mut reads);
        let mut views = Views {
            p,
            internal,
            uses: &uses,
            reads: &reads,
            found: FxHashMap::default(),
        };
        views.block(&mut body);
        p.funcs[k].body = body;
    }
}

/// The most statements a view's body may have (each read copies them).
pub const VIEW_STMTS: usize = 12;

/// Counts, for every variable, its reads `let x = v[j]` (at the internal site) and `let x =
/// len v`, at any depth.
fn count_reads(b: &Block, internal: super::SiteId, reads: &mut FxHashMap<u32, u32>) {
    deep(|| {
        for s in &b.stmts {
            match s {
                Stmt::Let(_, e) => {
                    match e {
                        Expr::Index(Atom::Var(v), _, site) if *site == internal => {
                            *reads.entry(v.id).or_insert(0) += 1
                        }
                        Expr::Len(Atom::Var(v)) => *reads.entry(v.id).or_insert(0) += 1,
                        _ => {}
                    }
                    for_each_block(e, &mut |b| count_reads(b, internal, reads));
                }
                Stmt::Mut(_, e) | Stmt::Do(e) => {
                    for_each_block(e, &mut |b| count_reads(b, internal, reads))
                }
                Stmt::For(_, _, body) | Stmt::Loop(body) => count_reads(body, internal, reads),
                _ => {}
            }
        }
    })
}

/// A `build`'s body that only moves data: `let`s of operands, tuples, projections, lengths,
/// reads at the internal site (in range whatever the index the build gives them) and
/// padded reads, at most [`VIEW_STMTS`] of them.
fn moves_data(b: &Block, internal: super::SiteId) -> bool {
    b.stmts.len() <= VIEW_STMTS
        && b.stmts.iter().all(|s| {
            matches!(s, Stmt::Let(_, e) if match e {
                Expr::Atom(_) | Expr::Tuple(_) | Expr::Proj(..) | Expr::Len(_) | Expr::IndexOr0(..) => true,
                Expr::Index(_, _, site) => *site == internal,
                _ => false,
            })
        })
}

/// Rewrites a block statement by statement, each becoming the statements `f` emits for it.
fn expand(b: &mut Block, f: &mut dyn FnMut(Stmt, &mut Vec<Stmt>)) {
    deep(|| {
        let mut out = Vec::with_capacity(b.stmts.len());
        for s in std::mem::take(&mut b.stmts) {
            f(s, &mut out);
        }
        b.stmts = out;
    })
}

struct Views<'a> {
    p: &'a mut Program,
    internal: super::SiteId,
    uses: &'a FxHashMap<u32, u32>,
    reads: &'a FxHashMap<u32, u32>,
    /// The views met so far: array ↦ (length, index variable, body).
    found: FxHashMap<u32, (Atom, super::Var, Block)>,
}

impl Views<'_> {
    fn block(&mut self, b: &mut Block) {
        expand(b, &mut |s, out| self.stmt(s, out));
    }

    fn stmt(&mut self, mut s: Stmt, out: &mut Vec<Stmt>) {
        match s {
            Stmt::Let(m, Expr::Build(n, i, body, site))
                if moves_data(&body, self.internal)
                    && self.uses.get(&m.id).copied().unwrap_or(0)
                        == self.reads.get(&m.id).copied().unwrap_or(0) =>
            {
                // The array is never materialised; its length is still checked here.
                out.push(Stmt::Check(Check::Len("build", n.clone()), site));
                self.found.insert(m.id, (n, i, body));
            }
            Stmt::Let(x, Expr::Len(Atom::Var(m))) if self.found.contains_key(&m.id) => {
                out.push(Stmt::Let(x, Expr::Atom(self.found[&m.id].0.clone())));
            }
            Stmt::Let(x, Expr::Index(Atom::Var(m), j, site))
                if site == self.internal && self.found.contains_key(&m.id) =>
            {
                let (_, i, body) = self.found[&m.id].clone();
                let mut sub: FxHashMap<u32, Atom> = FxHashMap::default();
                sub.insert(i.id, j);
                for s in body.stmts {
                    let Stmt::Let(v, mut e) = s else {
                        unreachable!("moves_data admits lets only")
                    };
                    super::for_each_operand_mut(&mut e, &mut |a| {
                        if let Atom::Var(y) = a
                            && let Some(b) = sub.get(&y.id)
                        {
                            *a = b.clone();
                        }
                    });
                    let fresh = self.p.var(&v.name, v.ty);
                    sub.insert(v.id, Atom::Var(fresh.clone()));
                    // A copied read may itself read a view.
                    self.stmt(Stmt::Let(fresh, e), out);
                }
                let r = match &body.result {
                    Atom::Var(y) => sub.get(&y.id).cloned().unwrap_or(body.result.clone()),
                    a => a.clone(),
                };
                out.push(Stmt::Let(x, Expr::Atom(r)));
            }
            _ => {
                for_each_stmt_block_mut(&mut s, &mut |b| self.block(b));
                out.push(s);
            }
        }
    }
}

/// Forwards copies and projections of known tuples, and replaces identity builds, in a
/// function (module doc, [`forward`]).
pub fn forward(f: &mut super::Func, internal: super::SiteId) {
    let mut fw = Forward {
        internal,
        sub: FxHashMap::default(),
        tuples: FxHashMap::default(),
        lens: FxHashMap::default(),
    };
    fw.block(&mut f.body);
}

struct Forward {
    internal: super::SiteId,
    /// Variables replaced by operands.
    sub: FxHashMap<u32, Atom>,
    /// Variables bound to tuples: their components.
    tuples: FxHashMap<u32, Vec<Atom>>,
    /// Variables bound to `len a`: the ids of `a` and of the arrays a `check same_len` showed
    /// to have that length.
    lens: FxHashMap<u32, FxHashSet<u32>>,
}

impl Forward {
    fn subst(&self, a: &mut Atom) {
        if let Atom::Var(v) = a
            && let Some(x) = self.sub.get(&v.id)
        {
            *a = x.clone();
        }
    }

    /// `build n (i -> ..; let e = a[i]; ..; e)` with `n = len a` and nothing else that can
    /// fail or has an effect: the array `a` itself.
    fn identity(&self, e: &Expr) -> Option<Atom> {
        let Expr::Build(Atom::Var(n), i, b, _) = e else {
            return None;
        };
        let Atom::Var(r) = &b.result else {
            return None;
        };
        let arrays = self.lens.get(&n.id)?;
        let mut found = None;
        for s in &b.stmts {
            match s {
                Stmt::Let(x, Expr::Index(Atom::Var(xs), Atom::Var(j), site))
                    if x.id == r.id
                        && arrays.contains(&xs.id)
                        && j.id == i.id
                        && *site == self.internal =>
                {
                    found = Some(Atom::Var(xs.clone()))
                }
                Stmt::Let(_, Expr::Index(_, _, site)) if *site == self.internal => {}
                Stmt::Let(_, e) if infallible(e) => {}
                _ => return None,
            }
        }
        found
    }

    fn block(&mut self, b: &mut Block) {
        deep(|| {
            let stmts = std::mem::take(&mut b.stmts);
            let mut out = Vec::with_capacity(stmts.len());
            for mut s in stmts {
                super::for_each_stmt_operand_mut(&mut s, &mut |a| self.subst(a));
                for_each_stmt_block_mut(&mut s, &mut |b| self.block(b));
                if let Stmt::Check(Check::SameLen(_, Atom::Var(x), Atom::Var(y)), _) = &s
                    && let (Some(a), Some(b)) = (self.lens.get(&x.id), self.lens.get(&y.id))
                {
                    let both: FxHashSet<u32> = a.union(b).copied().collect();
                    self.lens.insert(x.id, both.clone());
                    self.lens.insert(y.id, both);
                }
                if let Stmt::Let(x, e) = &s {
                    let to = match e {
                        Expr::Atom(a) => Some(a.clone()),
                        Expr::Proj(Atom::Var(t), k) => {
                            self.tuples.get(&t.id).map(|cs| cs[*k as usize].clone())
                        }
                        Expr::Build(..) => self.identity(e),
                        Expr::Tuple(cs) => {
                            self.tuples.insert(x.id, cs.clone());
                            None
                        }
                        Expr::Len(Atom::Var(a)) => {
                            self.lens.insert(x.id, [a.id].into_iter().collect());
                            None
                        }
                        _ => None,
                    };
                    if let Some(a) = to {
                        self.sub.insert(x.id, a);
                        continue;
                    }
                }
                out.push(s);
            }
            self.subst(&mut b.result);
            b.stmts = out;
        })
    }
}

/// Splits zero-initialised accumulators' arrays of tuples into tuples of arrays (module doc,
/// [`split_accumulators`]).
pub fn split_accumulators(p: &mut Program) {
    let Some(internal) = p.internal_site else {
        return;
    };
    for k in 0..p.funcs.len() {
        let mut body = std::mem::replace(&mut p.funcs[k].body, Block::unit(Vec::new()));
        let mut scan = SplitScan::default();
        scan.block(&body, &p.types);
        scan.decide(&p.types);
        let mut plans = FxHashMap::default();
        for (m, (ty, path)) in scan.decls {
            if let Some(path) = path
                && !scan.bad.contains(&m)
            {
                let split = split_ty(&mut p.types, ty, &path);
                let name = scan.names[&m].clone();
                let new = p.mut_var(&name, split);
                plans.insert(m, (new, ty, path));
            }
        }
        if !plans.is_empty() {
            let mut s = Split {
                p,
                internal,
                plans: &plans,
            };
            s.block(&mut body);
        }
        p.funcs[k].body = body;
    }
}

/// `t` with its array of tuples at field path `path` replaced by the tuple of arrays.
fn split_ty(types: &mut super::Types, t: Ty, path: &[u32]) -> Ty {
    match path.split_first() {
        None => {
            let e = types.elem(t);
            let cs: Vec<Ty> = types.components(e).to_vec();
            let arrays = cs.into_iter().map(|c| types.array(c)).collect();
            types.tuple(arrays)
        }
        Some((f, rest)) => {
            let mut cs: Vec<Ty> = types.components(t).to_vec();
            cs[*f as usize] = split_ty(types, cs[*f as usize], rest);
            types.tuple(cs)
        }
    }
}

/// What [`split_accumulators`] learns about a function's accumulators.
#[derive(Default)]
struct SplitScan {
    /// Accumulators declared `mut m = zero τ`: `τ` and the field path of the array of
    /// tuples to split (the first one met at an element or `grow` place).
    decls: FxHashMap<u32, (Ty, Option<Vec<u32>>)>,
    names: FxHashMap<u32, String>,
    /// Accumulators used otherwise than through places, `take` and `get`.
    bad: FxHashSet<u32>,
    /// The places of each accumulator: their leading fields, and whether they are an
    /// element step or a `grow` (an array there) rather than a `+=` of the whole value there.
    places: FxHashMap<u32, Vec<(Vec<u32>, bool)>>,
}

impl SplitScan {
    /// A place's leading fields (up to its first element step).
    fn fields(p: &Place) -> Vec<u32> {
        p.path
            .iter()
            .map_while(|s| match s {
                Step::Field(k) => Some(*k),
                Step::Elem(_) => None,
            })
            .collect()
    }

    fn place(&mut self, p: &Place, grow: bool) {
        let m = p.root.0.id;
        if self.decls.contains_key(&m) {
            let fields = Self::fields(p);
            let array = grow || fields.len() < p.path.len();
            self.places.entry(m).or_default().push((fields, array));
        }
    }

    /// Chooses each accumulator's path: the first array of tuples met at an element step or
    /// a `grow`, provided no `+=` adds a whole value containing it and every element step or
    /// `grow` at it or around it is at it.
    fn decide(&mut self, types: &super::Types) {
        for (m, (ty, path)) in &mut self.decls {
            let places = self.places.get(m).map_or(&[][..], |v| &v[..]);
            *path = places.iter().find_map(|(fields, array)| {
                let t = at_path(types, *ty, fields);
                let splittable = *array
                    && matches!(types.kind(t), super::TyKind::Array(e)
                        if matches!(types.kind(*e), super::TyKind::Tuple(cs) if cs.len() >= 2));
                splittable.then(|| fields.clone())
            });
            if let Some(q) = path
                && places.iter().any(|(fields, array)| {
                    if *array {
                        fields != q && (q.starts_with(fields) || fields.starts_with(q))
                    } else {
                        q.starts_with(fields)
                    }
                })
            {
                self.bad.insert(*m);
            }
        }
    }

    /// `whole`: `e` is a `let`'s or `do`'s expression, where [`Split`] rewrites a `take` or
    /// `get`; anywhere else one keeps its accumulator unsplit.
    fn expr(&mut self, e: &Expr, whole: bool, types: &super::Types) {
        if let Expr::Get(m) | Expr::Take(m) = e
            && !whole
        {
            self.bad.insert(m.0.id);
        }
        for_each_block(e, &mut |b| self.block(b, types));
    }

    fn block(&mut self, b: &Block, types: &super::Types) {
        deep(|| {
            for s in &b.stmts {
                match s {
                    Stmt::Mut(m, e) => {
                        if matches!(e, Expr::Zero(_)) {
                            self.decls.insert(m.0.id, (m.0.ty, None));
                            self.names.insert(m.0.id, m.0.name.to_string());
                        } else {
                            self.bad.insert(m.0.id);
                        }
                        self.expr(e, false, types);
                    }
                    Stmt::Let(_, e) => self.expr(e, true, types),
                    Stmt::Do(e) => self.expr(e, true, types),
                    Stmt::Set(m, _) => {
                        self.bad.insert(m.0.id);
                    }
                    Stmt::AddTo { place, .. } => self.place(place, false),
                    Stmt::Grow(place, _) => self.place(place, true),
                    Stmt::For(_, _, body) | Stmt::Loop(body) => self.block(body, types),
                    Stmt::Break | Stmt::Check(..) => {}
                }
            }
        })
    }
}

struct Split<'a> {
    p: &'a mut Program,
    internal: super::SiteId,
    /// Accumulator ↦ (its split replacement, its type, the path of its array of tuples).
    plans: &'a FxHashMap<u32, (MutVar, Ty, Vec<u32>)>,
}

impl Split<'_> {
    fn block(&mut self, b: &mut Block) {
        expand(b, &mut |s, out| self.stmt(s, out));
    }

    fn let_(&mut self, out: &mut Vec<Stmt>, name: &str, t: Ty, e: Expr) -> Atom {
        let v = self.p.var(name, t);
        out.push(Stmt::Let(v.clone(), e));
        Atom::Var(v)
    }

    /// The value of type `t` whose component at `path` is the array of tuples zipped from the
    /// tuple of arrays at `path` of `x` (of the split type).
    fn rebuild(&mut self, out: &mut Vec<Stmt>, x: Atom, t: Ty, path: &[u32]) -> Atom {
        match path.split_first() {
            None => {
                let e = self.p.types.elem(t);
                let cs: Vec<Ty> = self.p.types.components(e).to_vec();
                let mut arrays = Vec::new();
                for (f, c) in cs.iter().enumerate() {
                    let at = self.p.types.array(*c);
                    arrays.push(self.let_(out, "a", at, Expr::Proj(x.clone(), f as u32)));
                }
                // The arrays were grown together: one length, checked (it cannot fail) so that
                // [`forward`] knows it.
                let n = self.let_(out, "n", Ty::I64, Expr::Len(arrays[0].clone()));
                for a in &arrays[1..] {
                    let m = self.let_(out, "n", Ty::I64, Expr::Len(a.clone()));
                    out.push(Stmt::Check(
                        Check::SameLen("zip", n.clone(), m),
                        self.internal,
                    ));
                }
                let i = self.p.var("i", Ty::I64);
                let mut inner = Vec::new();
                let mut parts = Vec::new();
                for (a, c) in arrays.iter().zip(&cs) {
                    let v = self.p.var("e", *c);
                    inner.push(Stmt::Let(
                        v.clone(),
                        Expr::Index(a.clone(), Atom::Var(i.clone()), self.internal),
                    ));
                    parts.push(Atom::Var(v));
                }
                let d = self.p.var("d", e);
                inner.push(Stmt::Let(d.clone(), Expr::Tuple(parts)));
                let body = Block {
                    stmts: inner,
                    result: Atom::Var(d),
                };
                self.let_(out, "z", t, Expr::Build(n, i, body, self.internal))
            }
            Some((f, rest)) => {
                let cs: Vec<Ty> = self.p.types.components(t).to_vec();
                let mut parts = Vec::new();
                for (k, c) in cs.iter().enumerate() {
                    let ck = if k == *f as usize {
                        split_ty(&mut self.p.types, *c, rest)
                    } else {
                        *c
                    };
                    let xk = self.let_(out, "c", ck, Expr::Proj(x.clone(), k as u32));
                    parts.push(if k == *f as usize {
                        self.rebuild(out, xk, *c, rest)
                    } else {
                        xk
                    });
                }
                self.let_(out, "r", t, Expr::Tuple(parts))
            }
        }
    }

    fn stmt(&mut self, mut s: Stmt, out: &mut Vec<Stmt>) {
        let plan = |m: &MutVar| self.plans.get(&m.0.id).cloned();
        match &mut s {
            Stmt::Mut(m, _) if let Some((new, ..)) = plan(m) => {
                out.push(Stmt::Mut(new.clone(), Expr::Zero(new.0.ty)));
                return;
            }
            Stmt::Let(x, Expr::Get(m) | Expr::Take(m)) if let Some((new, t, path)) = plan(m) => {
                let take = matches!(s, Stmt::Let(_, Expr::Take(_)));
                let Stmt::Let(x, _) = s else {
                    unreachable!("matched above")
                };
                let e = if take {
                    Expr::Take(new.clone())
                } else {
                    Expr::Get(new.clone())
                };
                let v = self.let_(out, "v", new.0.ty, e);
                let r = self.rebuild(out, v, t, &path);
                out.push(Stmt::Let(x, Expr::Atom(r)));
                return;
            }
            Stmt::Do(Expr::Get(m) | Expr::Take(m)) if let Some((new, ..)) = plan(m) => {
                let take = matches!(s, Stmt::Do(Expr::Take(_)));
                out.push(Stmt::Do(if take {
                    Expr::Take(new)
                } else {
                    Expr::Get(new)
                }));
                return;
            }
            Stmt::Grow(place, n) if let Some((new, t, path)) = plan(&place.root) => {
                let fields = SplitScan::fields(place);
                if fields == path && fields.len() == place.path.len() {
                    let k = self
                        .p
                        .types
                        .components(self.p.types.elem(at_path(&self.p.types, t, &path)))
                        .len();
                    for f in 0..k {
                        let mut q = place.clone();
                        q.root = new.clone();
                        q.path.push(Step::Field(f as u32));
                        out.push(Stmt::Grow(q, n.clone()));
                    }
                    return;
                }
                *place = moved(place, &new, &path);
            }
            Stmt::AddTo {
                place,
                value,
                scale,
            } if let Some((new, t, path)) = plan(&place.root) => {
                let fields = SplitScan::fields(place);
                if fields == path && fields.len() < place.path.len() {
                    let elem = self.p.types.elem(at_path(&self.p.types, t, &path));
                    let cs: Vec<Ty> = self.p.types.components(elem).to_vec();
                    let i = place.path[fields.len()].clone();
                    let rest = place.path[fields.len() + 1..].to_vec();
                    let mut targets: Vec<(u32, Vec<Step>, Atom)> = Vec::new();
                    match rest.split_first() {
                        Some((Step::Field(f), tail)) => {
                            targets.push((*f, tail.to_vec(), value.clone()))
                        }
                        Some((Step::Elem(_), _)) => unreachable!("an element of a tuple"),
                        None => {
                            for (f, c) in cs.iter().enumerate() {
                                let vf =
                                    self.let_(out, "s", *c, Expr::Proj(value.clone(), f as u32));
                                targets.push((f as u32, Vec::new(), vf));
                            }
                        }
                    }
                    for (f, tail, v) in targets {
                        let mut q = Place::of(&new);
                        q.path = fields.iter().map(|k| Step::Field(*k)).collect();
                        q.path.push(Step::Field(f));
                        q.path.push(i.clone());
                        q.path.extend(tail);
                        out.push(Stmt::AddTo {
                            place: q,
                            value: v,
                            scale: scale.clone(),
                        });
                    }
                    return;
                }
                *place = moved(place, &new, &path);
            }
            _ => {}
        }
        for_each_stmt_block_mut(&mut s, &mut |b| self.block(b));
        out.push(s);
    }
}

/// A place of a split accumulator, in the split one: `a.P[i].k..` is `a.P.k[i]..`; places
/// beside `P` are unchanged.
fn moved(p: &Place, new: &MutVar, path: &[u32]) -> Place {
    let fields = SplitScan::fields(p);
    let mut q = Place::of(new);
    q.path = p.path.clone();
    if fields == path
        && let [Step::Elem(i), Step::Field(k), ..] = &p.path[fields.len()..]
    {
        let n = fields.len();
        q.path[n] = Step::Field(*k);
        q.path[n + 1] = Step::Elem(i.clone());
    }
    q
}

/// The type at a field path.
fn at_path(types: &super::Types, mut t: Ty, path: &[u32]) -> Ty {
    for f in path {
        t = types.components(t)[*f as usize];
    }
    t
}

/// [`split_accumulators`], then [`inline_views`], each followed by [`forward`] and
/// [`dead_lets`] on every function (module doc).
pub fn unzip_arrays(p: &mut Program) {
    let Some(internal) = p.internal_site else {
        return;
    };
    let none = std::collections::HashSet::new();
    split_accumulators(p);
    for f in &mut p.funcs {
        forward(f, internal);
        dead_lets(f, &none);
    }
    inline_views(p);
    for f in &mut p.funcs {
        forward(f, internal);
        dead_lets(f, &none);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{Func, TyKind, Var};

    #[test]
    fn a_grow_done_before_and_still_in_force_goes() {
        let mut p = Program::default();
        let arr = p.types.intern(TyKind::Array(Ty::F64));
        let (n, m, x) = (
            p.var("n", Ty::I64),
            p.var("m", Ty::I64),
            p.var("x", Ty::F64),
        );
        let a = MutVar(p.var("a", arr));
        let v = |x: &Var| Atom::Var(x.clone());
        let grow = |k: &Var| Stmt::Grow(Place::of(&a), v(k));
        let add = |i: Atom| Stmt::AddTo {
            place: Place::of(&a).elem(i),
            value: v(&x),
            scale: None,
        };
        let (i, j, t) = (p.var("i", Ty::I64), p.var("j", Ty::I64), p.var("t", arr));
        let mut body = Block::unit(vec![
            Stmt::Mut(a.clone(), Expr::Zero(arr)),
            grow(&n), // kept: the first
            add(Atom::I64(0)),
            grow(&n), // dropped
            grow(&m), // kept: another length
            // Dropped inside: nothing in the loop shortens `a`.
            Stmt::For(i.clone(), v(&n), Block::unit(vec![grow(&n), add(v(&i))])),
            // Kept inside: the loop takes `a` (its next iteration comes after the take),
            // and after it.
            Stmt::For(
                j.clone(),
                v(&n),
                Block::unit(vec![
                    grow(&n),
                    add(v(&j)),
                    Stmt::Let(t.clone(), Expr::Take(a.clone())),
                    Stmt::Set(a.clone(), v(&t)),
                ]),
            ),
            grow(&n),
            // Kept after a grow in a branch only.
            Stmt::Do(Expr::If(
                Atom::Bool(true),
                Block::unit(vec![Stmt::Set(a.clone(), Atom::Unit), grow(&m)]),
                Block::unit(vec![]),
            )),
            grow(&m),
        ]);
        regrows(&mut body, Vec::new());
        p.funcs.push(Func {
            name: "f".into(),
            params: vec![n, m, x],
            ret: Ty::UNIT,
            body,
            accumulates: false,
            rec: None,
        });
        let text = p.to_string();
        let lines: Vec<&str> = text.lines().map(str::trim).collect();
        let grows: Vec<&str> = lines
            .iter()
            .copied()
            .filter(|l| l.starts_with("grow"))
            .collect();
        assert_eq!(
            grows,
            [
                "grow a_3 n_0",
                "grow a_3 m_1",
                "grow a_3 n_0",
                "grow a_3 n_0",
                "grow a_3 m_1",
                "grow a_3 m_1"
            ],
            "{text}"
        );
        let first_loop = text.find("for i_4").expect("the first loop");
        let second_loop = text.find("for j_5").expect("the second loop");
        assert!(!text[first_loop..second_loop].contains("grow"), "{text}");
    }
}
