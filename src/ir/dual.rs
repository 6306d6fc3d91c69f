//! Forward mode on the IR by dual numbers: a program transformation that turns a function
//! `f : X → Y` of the IR into `f_dual : D X → D Y`, where every real carries its tangent.
//! Hessian-vector products are this applied to a compiled gradient (forward over reverse,
//! `theory-notes/12-nested-ad.md`): the gradient keeps its accumulators, loops and sparse
//! updates, and the dual version runs the same code on pairs, so it costs a small constant
//! times the gradient whatever the program (no concretisation, no closure tangents).
//!
//! # The type map
//!
//! ```text
//! D f64 = (f64, f64)        D τ = τ  for τ without f64 (i64, bool, unit, ...)
//! D (τ1, .., τn) = (D τ1, .., D τn)     D [τ] = [D τ]     D list(κ, λ) = list(D κ, D λ)
//! D E = E_d, the enum with the same variants and payloads D τ (a sum `A + B` to `D A + D B`)
//! ```
//!
//! `D τ` is additive when `τ` is, with the same zero (the empty array is still the zero
//! array, `xs[i]?0` still reads a zero pair past the end) and the same `+` (componentwise,
//! concatenation for lists): the primal and tangent parts add separately, as they must.
//!
//! # The rules
//!
//! Everything is mapped structurally (variables keep their identity with the `D` of their
//! type; loops, branches, matches, iterations, calls, accumulators and places keep their
//! shape; a call calls the callee's dual) except where reals are combined:
//!
//! ```text
//! c (a real constant)   ↦ (c, 0)
//! fadd (a, b)           ↦ (a.0 + b.0, a.1 + b.1)          fneg a ↦ (-a.0, -a.1)
//! fmul (a, b)           ↦ (a.0 · b.0, a.0 · b.1 + a.1 · b.0)   itof i ↦ (itof i, 0)
//! c * a   (scale)       ↦ S(c, a): at each real (p, t) of a, (c.0 * p, c.0 * t + c.1 * p)
//! place += a * c        ↦ place += S(c, a)
//! prim p(a..)           ↦ p(primal a..)   if p's result has no reals (comparisons, floor)
//!                       ↦ join(p_jvp(primal a.., tangent a..))   otherwise
//! ```
//!
//! where `p_jvp` is the primitive's own forward derivative (its registered rule, through
//! forward CHAD of the entry `x ⊢ p x`, compiled into the same program), so every
//! primitive with a forward derivative works, user primitives included. A partial
//! primitive is also called itself, at its own site, so that it fails where the program says.
//! The products keep `*`'s strong zero (`0 * NaN = 0`), as the original program has it.
//!
//! What cannot be mapped (a primitive's argument or result a list or an enum with reals in
//! it, an input or output of that kind) is an [`ErrorKind::Unsupported`] error: callers fall
//! back to the concretising route.

use super::{
    Arm, Atom, Block, Check, Expr, Func, FuncId, MutVar, Op, Place, Program, SiteId, Step, Stmt,
    Ty, TyKind, Var,
};
use crate::error::{Error, ErrorKind, Result};
use std::collections::{HashMap, HashSet};

/// The forward derivatives of primitives available to [`Dual`]: `name ↦ p_jvp`, a function
/// `(ctx, dctx) ↦ (y, dy)` over the left-nested context `((), x1), .., xn)` of the
/// primitive's parameters and its tangent ([`crate::ir::compile::DefCode::jvp`]).
pub type PrimJvps = HashMap<String, FuncId>;

/// The dual-number transformation of (part of) one program.
pub struct Dual<'a> {
    p: &'a mut Program,
    tys: HashMap<Ty, Ty>,
    funcs: HashMap<FuncId, FuncId>,
    prims: &'a PrimJvps,
    out: Vec<Vec<Stmt>>,
    site: SiteId,
    /// Inside a second copy of a block (a `sum`'s tangent part): the fresh ids of the
    /// variables the copy defines.
    renames: Option<HashMap<u32, u32>>,
    /// The components of the tuples the dual code binds (projections of them are forwarded).
    tuples: HashMap<u32, Vec<Atom>>,
    /// The tangent halves of `sum`s: they fail only where their primal halves, run first, do.
    shadows: HashSet<u32>,
}

/// Whether values of `t` contain reals (through tuples, arrays, lists and enum payloads).
pub fn has_reals(p: &Program, t: Ty) -> bool {
    let mut seen = HashSet::new();
    let mut stack = vec![t];
    while let Some(t) = stack.pop() {
        if !seen.insert(t) {
            continue;
        }
        match p.types.kind(t) {
            TyKind::F64 => return true,
            TyKind::I64 | TyKind::Bool | TyKind::Unit => {}
            TyKind::Tuple(cs) => stack.extend(cs.iter().copied()),
            TyKind::Array(e) => stack.push(*e),
            TyKind::List(k, v) => stack.extend([*k, *v]),
            TyKind::Enum(e) => {
                stack.extend(p.types.enums()[*e as usize].variants.iter().map(|v| v.1))
            }
        }
    }
    false
}

/// Whether a primitive's result has reals in it (else its dual is the primitive on the
/// arguments' primal parts).
pub fn prim_has_real_result(p: &crate::prim::Prim) -> bool {
    fn reals(t: &crate::types::Type) -> bool {
        use crate::types::Type;
        crate::deep::deep(|| match t {
            Type::Real => true,
            Type::Int | Type::Bool | Type::Unit => false,
            Type::Prod(p) | Type::Sum(p) | Type::Fun(p) => reals(&p.0) || reals(&p.1),
            Type::Array(a) => reals(a),
        })
    }
    reals(p.result())
}

fn unsupported(what: String) -> Error {
    Error::new(
        ErrorKind::Unsupported,
        format!("dual numbers on the IR: {what}"),
    )
}

impl<'a> Dual<'a> {
    /// A transformation of `p`, with the primitives' derivatives `prims` (functions of `p`).
    pub fn new(p: &'a mut Program, prims: &'a PrimJvps) -> Dual<'a> {
        let site = p.internal();
        Dual {
            p,
            tys: HashMap::new(),
            funcs: HashMap::new(),
            prims,
            out: Vec::new(),
            site,
            renames: None,
            tuples: HashMap::new(),
            shadows: HashSet::new(),
        }
    }

    /// `D t`.
    pub fn ty(&mut self, t: Ty) -> Ty {
        if let Some(&d) = self.tys.get(&t) {
            return d;
        }
        if !has_reals(self.p, t) {
            self.tys.insert(t, t);
            return t;
        }
        let d = match self.p.types.kind(t).clone() {
            TyKind::F64 => self.p.types.tuple(vec![Ty::F64, Ty::F64]),
            TyKind::Tuple(cs) => {
                let ds = cs.iter().map(|&c| self.ty(c)).collect();
                self.p.types.tuple(ds)
            }
            TyKind::Array(e) => {
                let de = self.ty(e);
                self.p.types.array(de)
            }
            TyKind::List(k, v) => {
                let (dk, dv) = (self.ty(k), self.ty(v));
                self.p.types.tuple(vec![dk, dv]);
                self.p.types.list(dk, dv)
            }
            TyKind::Enum(_) => {
                if let Some((a, b)) = self.p.types.sum_sides(t) {
                    let (da, db) = (self.ty(a), self.ty(b));
                    self.p.types.sum(da, db)
                } else {
                    // Closure enums may reach themselves through payloads: the new enum is
                    // registered before its variants are mapped.
                    let def = self.p.types.enum_def(t).clone();
                    let d = self.p.types.new_enum(format!("{}D", def.name));
                    self.tys.insert(t, d);
                    for (name, payload) in def.variants {
                        let dp = self.ty(payload);
                        self.p.types.add_variant(d, name, dp);
                    }
                    d
                }
            }
            TyKind::I64 | TyKind::Bool | TyKind::Unit => unreachable!("no reals"),
        };
        self.tys.insert(t, d);
        d
    }

    fn var(&mut self, v: &Var) -> Var {
        let id = match &self.renames {
            Some(r) => r.get(&v.id).copied().unwrap_or(v.id),
            None => v.id,
        };
        Var {
            id,
            name: v.name.clone(),
            ty: self.ty(v.ty),
        }
    }

    /// A variable at its definition (renamed inside a copy).
    fn def(&mut self, v: &Var) -> Var {
        let fresh = self.p.next_var;
        if let Some(r) = &mut self.renames {
            self.p.next_var += 1;
            r.insert(v.id, fresh);
        }
        self.var(v)
    }

    fn def_mut(&mut self, m: &MutVar) -> MutVar {
        MutVar(self.def(&m.0))
    }

    fn mut_var(&mut self, m: &MutVar) -> MutVar {
        MutVar(self.var(&m.0))
    }

    fn emit(&mut self, s: Stmt) {
        self.out.last_mut().expect("inside a block").push(s);
    }

    fn let_(&mut self, name: &str, t: Ty, e: Expr) -> Atom {
        let v = self.p.var(name, t);
        self.bind(v.clone(), e);
        Atom::Var(v)
    }

    /// `let v = e`, remembering a tuple's components.
    fn bind(&mut self, v: Var, e: Expr) {
        match &e {
            Expr::Tuple(xs) => {
                self.tuples.insert(v.id, xs.clone());
            }
            Expr::Atom(Atom::Var(y)) => {
                if let Some(xs) = self.tuples.get(&y.id).cloned() {
                    self.tuples.insert(v.id, xs);
                }
            }
            _ => {}
        }
        self.emit(Stmt::Let(v, e));
    }

    /// Component `k` of a dual tuple: the component itself if the tuple was built here.
    fn proj(&mut self, a: &Atom, k: u32, t: Ty) -> Atom {
        if let Atom::Var(v) = a
            && let Some(xs) = self.tuples.get(&v.id)
        {
            return xs[k as usize].clone();
        }
        self.let_("q", t, Expr::Proj(a.clone(), k))
    }

    /// A block built by `f` (its statements collected, its value returned).
    fn block(&mut self, f: impl FnOnce(&mut Self) -> Result<Atom>) -> Result<Block> {
        self.out.push(Vec::new());
        let r = f(self);
        let stmts = self.out.pop().expect("pushed");
        Ok(Block { stmts, result: r? })
    }

    /// `build (len xs) (i -> f(i))` of element type `elem`.
    fn map_array(
        &mut self,
        xs: &Atom,
        elem: Ty,
        f: impl FnOnce(&mut Self, Atom) -> Result<Atom>,
    ) -> Result<Atom> {
        let n = self.let_("n", Ty::I64, Expr::Len(xs.clone()));
        let i = self.p.var("i", Ty::I64);
        let ia = Atom::Var(i.clone());
        let body = self.block(|s| f(s, ia))?;
        let at = self.p.types.array(elem);
        let site = self.site;
        Ok(self.let_("m", at, Expr::Build(n, i, body, site)))
    }

    fn atom(&mut self, a: &Atom) -> Atom {
        match a {
            Atom::Var(v) => Atom::Var(self.var(v)),
            Atom::F64(c) => {
                let t = self.ty(Ty::F64);
                self.let_("c", t, Expr::Tuple(vec![Atom::F64(*c), Atom::F64(0.0)]))
            }
            other => other.clone(),
        }
    }

    /// The dual of function `f` (made on first use, with everything it calls).
    pub fn func(&mut self, f: FuncId) -> Result<FuncId> {
        if let Some(&d) = self.funcs.get(&f) {
            return Ok(d);
        }
        let orig = self.p.func(f).clone();
        let params: Vec<Var> = orig.params.iter().map(|v| self.var(v)).collect();
        let ret = self.ty(orig.ret);
        let mut name = format!("{}_dual", orig.name);
        while self.p.find(&name).is_some() {
            name.push('_');
        }
        self.p.funcs.push(Func {
            name,
            params,
            ret,
            body: Block::unit(Vec::new()),
            accumulates: orig.accumulates,
            rec: orig.rec,
        });
        let d = FuncId(self.p.funcs.len() as u32 - 1);
        self.funcs.insert(f, d);
        // A callee is dualised once, outside whatever block (or renamed copy) asked for it.
        let saved = std::mem::take(&mut self.out);
        let renames = self.renames.take();
        let body = self.dual_block(&orig.body);
        self.out = saved;
        self.renames = renames;
        self.p.funcs[d.0 as usize].body = body?;
        Ok(d)
    }

    fn dual_block(&mut self, b: &Block) -> Result<Block> {
        crate::deep::deep(|| {
            self.block(|s| {
                for st in &b.stmts {
                    s.stmt(st)?;
                }
                Ok(s.atom(&b.result))
            })
        })
    }

    fn place(&mut self, pl: &Place) -> Place {
        let root = self.mut_var(&pl.root);
        let mut path = Vec::new();
        for s in &pl.path {
            path.push(match s {
                Step::Field(k) => Step::Field(*k),
                Step::Elem(i) => Step::Elem(self.atom(i)),
            });
        }
        Place { root, path }
    }

    fn stmt(&mut self, s: &Stmt) -> Result<()> {
        let out = match s {
            Stmt::Let(x, e) => {
                let e = self.expr(e, x.ty)?;
                let x = self.def(x);
                self.bind(x, e);
                return Ok(());
            }
            Stmt::Mut(m, e) => {
                let e = self.expr(e, m.0.ty)?;
                Stmt::Mut(self.def_mut(m), e)
            }
            Stmt::Set(m, a) => {
                let a = self.atom(a);
                Stmt::Set(self.mut_var(m), a)
            }
            Stmt::AddTo {
                place,
                value,
                scale,
            } => {
                let mut v = self.atom(value);
                if let Some(c) = scale {
                    let c = self.atom(c);
                    v = self.scale(&c, &v, value.ty())?;
                }
                Stmt::AddTo {
                    place: self.place(place),
                    value: v,
                    scale: None,
                }
            }
            Stmt::Grow(pl, n) => Stmt::Grow(self.place(pl), self.atom(n)),
            Stmt::For(i, n, b) => {
                let n = self.atom(n);
                let i = self.def(i);
                Stmt::For(i, n, self.dual_block(b)?)
            }
            Stmt::Do(e) => Stmt::Do(self.expr(e, Ty::UNIT)?),
            Stmt::Loop(b) => Stmt::Loop(self.dual_block(b)?),
            Stmt::Break => Stmt::Break,
            Stmt::Check(c, site) => {
                let c = match c {
                    Check::OneHot(a, b) => Check::OneHot(self.atom(a), self.atom(b)),
                    Check::SameLen(op, a, b) => Check::SameLen(op, self.atom(a), self.atom(b)),
                    Check::Len(op, a) => Check::Len(op, self.atom(a)),
                };
                Stmt::Check(c, *site)
            }
        };
        self.emit(out);
        Ok(())
    }

    /// The dual of `e`, whose value has type `t`; statements it needs first are emitted.
    fn expr(&mut self, e: &Expr, t: Ty) -> Result<Expr> {
        Ok(match e {
            Expr::Atom(a) => Expr::Atom(self.atom(a)),
            Expr::Op(op, args) => {
                let xs: Vec<Atom> = args.iter().map(|a| self.atom(a)).collect();
                let part = |s: &mut Self, a: &Atom, k| s.proj(a, k, Ty::F64);
                let f = |s: &mut Self, op, xs: Vec<Atom>| s.let_("r", Ty::F64, Expr::Op(op, xs));
                match op {
                    Op::FAdd => {
                        let (a0, a1) = (part(self, &xs[0], 0), part(self, &xs[0], 1));
                        let (b0, b1) = (part(self, &xs[1], 0), part(self, &xs[1], 1));
                        let p = f(self, Op::FAdd, vec![a0, b0]);
                        let t = f(self, Op::FAdd, vec![a1, b1]);
                        Expr::Tuple(vec![p, t])
                    }
                    Op::FMul => {
                        let (a0, a1) = (part(self, &xs[0], 0), part(self, &xs[0], 1));
                        let (b0, b1) = (part(self, &xs[1], 0), part(self, &xs[1], 1));
                        let p = f(self, Op::FMul, vec![a0.clone(), b0.clone()]);
                        let t1 = f(self, Op::FMul, vec![a0, b1]);
                        let t2 = f(self, Op::FMul, vec![a1, b0]);
                        let t = f(self, Op::FAdd, vec![t1, t2]);
                        Expr::Tuple(vec![p, t])
                    }
                    Op::FNeg => {
                        let (a0, a1) = (part(self, &xs[0], 0), part(self, &xs[0], 1));
                        let p = f(self, Op::FNeg, vec![a0]);
                        let t = f(self, Op::FNeg, vec![a1]);
                        Expr::Tuple(vec![p, t])
                    }
                    Op::IToF => {
                        let p = f(self, Op::IToF, xs);
                        Expr::Tuple(vec![p, Atom::F64(0.0)])
                    }
                    Op::IEq | Op::ILt | Op::IAdd | Op::IMax | Op::Not => Expr::Op(*op, xs),
                }
            }
            Expr::Prim(prim, args, site) => {
                let xs: Vec<Atom> = args.iter().map(|a| self.atom(a)).collect();
                let mut ps = Vec::new();
                for (x, a) in xs.iter().zip(args) {
                    ps.push(self.primal(x, a.ty())?);
                }
                if !has_reals(self.p, t) {
                    return Ok(Expr::Prim(prim.clone(), ps, *site));
                }
                let j = *self.prims.get(prim.name()).ok_or_else(|| {
                    unsupported(format!("no forward derivative of `{}`", prim.name()))
                })?;
                let jf = self.p.func(j).clone();
                let (xt, dt) = (jf.params[0].ty, jf.params[1].ty);
                // The left-nested contexts `((), x1), .., xn)` and their tangents.
                let mut ctx = Atom::Unit;
                let mut dctx = Atom::Unit;
                let (mut xts, mut dts) = (Vec::new(), Vec::new());
                let (mut xc, mut dc) = (xt, dt);
                for _ in 0..args.len() {
                    let (a, b) = match (self.p.types.kind(xc), self.p.types.kind(dc)) {
                        (TyKind::Tuple(a), TyKind::Tuple(b)) if a.len() == 2 && b.len() == 2 => {
                            ((a[0], a[1]), (b[0], b[1]))
                        }
                        _ => return Err(unsupported(format!("the context of `{}`", prim.name()))),
                    };
                    xts.push((xc, a.1));
                    dts.push((dc, b.1));
                    xc = a.0;
                    dc = b.0;
                }
                xts.reverse();
                dts.reverse();
                for (k, x) in xs.iter().enumerate() {
                    let tan = self.tangent(x, args[k].ty(), dts[k].1)?;
                    ctx = self.let_("ctx", xts[k].0, Expr::Tuple(vec![ctx, ps[k].clone()]));
                    dctx = self.let_("dctx", dts[k].0, Expr::Tuple(vec![dctx, tan]));
                }
                let r = match self.inline(&jf, &[ctx.clone(), dctx.clone()]) {
                    Some(r) => r,
                    None => self.let_("j", jf.ret, Expr::Call(j, vec![ctx, dctx])),
                };
                let (yt, dyt) = match self.p.types.kind(jf.ret) {
                    TyKind::Tuple(cs) if cs.len() == 2 => (cs[0], cs[1]),
                    _ => return Err(unsupported(format!("the derivative of `{}`", prim.name()))),
                };
                let y = if prim.is_total() {
                    self.proj(&r, 0, yt)
                } else {
                    // The primitive itself, at its site: it fails where the program does.
                    self.let_("y", yt, Expr::Prim(prim.clone(), ps, *site))
                };
                let dy = self.proj(&r, 1, dyt);
                Expr::Atom(self.join(&y, &dy, t, dyt)?)
            }
            Expr::Tuple(xs) => Expr::Tuple(xs.iter().map(|a| self.atom(a)).collect()),
            Expr::Proj(a, k) => {
                let a = self.atom(a);
                let c = self.ty(t);
                Expr::Atom(self.proj(&a, *k, c))
            }
            Expr::Variant(ty, k, a) => {
                let a = self.atom(a);
                Expr::Variant(self.ty(*ty), *k, a)
            }
            Expr::Array(ty, xs) => {
                let xs = xs.iter().map(|a| self.atom(a)).collect();
                Expr::Array(self.ty(*ty), xs)
            }
            Expr::Index(a, i, site) => Expr::Index(self.atom(a), self.atom(i), *site),
            Expr::IndexOr0(a, i) => Expr::IndexOr0(self.atom(a), self.atom(i)),
            Expr::Len(a) => Expr::Len(self.atom(a)),
            Expr::Build(n, i, b, site) => {
                self.ty(t);
                let n = self.atom(n);
                let i = self.def(i);
                Expr::Build(n, i, self.dual_block(b)?, *site)
            }
            Expr::Sum(n, i, b) => {
                // `sum` adds reals only, in its fixed order: one sum of the primal parts and
                // one of the tangent parts, each running the dual body (so the primal is
                // the original sum bit for bit).
                let n = self.atom(n);
                let part = |s: &mut Self, k: u32| -> Result<Atom> {
                    let i = s.def(i);
                    let mut body = s.dual_block(b)?;
                    let r = body.result.clone();
                    let v = s.p.var("part", Ty::F64);
                    body.stmts.push(Stmt::Let(v.clone(), Expr::Proj(r, k)));
                    body.result = Atom::Var(v);
                    Ok(s.let_("sum", Ty::F64, Expr::Sum(n.clone(), i, body)))
                };
                let p = part(self, 0)?;
                let saved = self
                    .renames
                    .replace(self.renames.clone().unwrap_or_default());
                let t = part(self, 1);
                self.renames = saved;
                let t = t?;
                if let Atom::Var(v) = &t {
                    self.shadows.insert(v.id);
                }
                Expr::Tuple(vec![p, t])
            }
            Expr::Replicate(n, x, site) => {
                self.ty(t);
                Expr::Replicate(self.atom(n), self.atom(x), *site)
            }
            Expr::If(c, a, b) => Expr::If(self.atom(c), self.dual_block(a)?, self.dual_block(b)?),
            Expr::Match(a, arms) => {
                let a = self.atom(a);
                let mut out = Vec::new();
                for arm in arms {
                    out.push(Arm {
                        bind: arm.bind.as_ref().map(|v| self.def(v)),
                        body: self.dual_block(&arm.body)?,
                    });
                }
                Expr::Match(a, out)
            }
            Expr::Iterate(init, s, b, tape, site) => {
                // Intern the result (and with a tape, the tape's array) type.
                self.ty(t);
                let init = self.atom(init);
                let s = self.def(s);
                Expr::Iterate(init, s, self.dual_block(b)?, *tape, *site)
            }
            Expr::Call(f, args) => {
                let xs = args.iter().map(|a| self.atom(a)).collect();
                Expr::Call(self.func(*f)?, xs)
            }
            Expr::Zero(ty) => Expr::Zero(self.ty(*ty)),
            Expr::Add(a, b) => Expr::Add(self.atom(a), self.atom(b)),
            Expr::Scale(c, a) => {
                let (dc, da) = (self.atom(c), self.atom(a));
                Expr::Atom(self.scale(&dc, &da, a.ty())?)
            }
            Expr::Get(m) => Expr::Get(self.mut_var(m)),
            Expr::Take(m) => Expr::Take(self.mut_var(m)),
        })
    }

    /// The body of `f` (a primitive's derivative) at `args`, copied here with its variables
    /// renamed, if it is straight-line code (`let`s, `mut`s, `+=` at a variable's root,
    /// checks): the Rust compiler then sees one loop body, and code after it treats it as
    /// straight-line (speculative sums, note 07). `None`: call it.
    fn inline(&mut self, f: &Func, args: &[Atom]) -> Option<Atom> {
        let straight = f.body.stmts.iter().all(|s| match s {
            Stmt::Let(_, e) | Stmt::Mut(_, e) => {
                let mut nested = false;
                super::for_each_block(e, &mut |_| nested = true);
                !nested && !matches!(e, Expr::Call(..))
            }
            Stmt::AddTo { place, .. } => place.path.is_empty(),
            Stmt::Check(..) => true,
            _ => false,
        });
        if !straight || f.rec.is_some() || f.accumulates {
            return None;
        }
        let mut sub: HashMap<u32, Atom> = HashMap::new();
        for (p, a) in f.params.iter().zip(args) {
            sub.insert(p.id, a.clone());
        }
        let at = |a: &Atom, sub: &HashMap<u32, Atom>| match a {
            Atom::Var(v) => sub.get(&v.id).cloned().unwrap_or_else(|| a.clone()),
            _ => a.clone(),
        };
        let fresh = |p: &mut Program, v: &Var, sub: &mut HashMap<u32, Atom>| {
            let n = p.var(&v.name, v.ty);
            sub.insert(v.id, Atom::Var(n.clone()));
            n
        };
        let mv = |m: &MutVar, sub: &HashMap<u32, Atom>| match sub.get(&m.0.id) {
            Some(Atom::Var(v)) => MutVar(v.clone()),
            _ => m.clone(),
        };
        for st in &f.body.stmts {
            let st = match st {
                Stmt::Let(x, e) | Stmt::Mut(MutVar(x), e) => {
                    let e = map_atoms(e, &|a| at(a, &sub));
                    let e = match e {
                        Expr::Get(m) => Expr::Get(mv(&m, &sub)),
                        Expr::Take(m) => Expr::Take(mv(&m, &sub)),
                        Expr::Proj(Atom::Var(v), k) if self.tuples.contains_key(&v.id) => {
                            Expr::Atom(self.tuples[&v.id][k as usize].clone())
                        }
                        e => e,
                    };
                    let n = fresh(self.p, x, &mut sub);
                    match st {
                        Stmt::Let(..) => {
                            self.bind(n, e);
                            continue;
                        }
                        _ => Stmt::Mut(MutVar(n), e),
                    }
                }
                Stmt::AddTo {
                    place,
                    value,
                    scale,
                } => Stmt::AddTo {
                    place: Place::of(&mv(&place.root, &sub)),
                    value: at(value, &sub),
                    scale: scale.as_ref().map(|c| at(c, &sub)),
                },
                Stmt::Check(c, site) => Stmt::Check(
                    match c {
                        Check::OneHot(a, b) => Check::OneHot(at(a, &sub), at(b, &sub)),
                        Check::SameLen(op, a, b) => Check::SameLen(op, at(a, &sub), at(b, &sub)),
                        Check::Len(op, a) => Check::Len(op, at(a, &sub)),
                    },
                    *site,
                ),
                _ => unreachable!("straight-line"),
            };
            self.emit(st);
        }
        Some(at(&f.body.result, &sub))
    }

    /// `S(c, a)` for a dual real `c` and a dual `a : D t` (`t` additive): the product rule at
    /// every real of `a`.
    fn scale(&mut self, c: &Atom, a: &Atom, t: Ty) -> Result<Atom> {
        if !has_reals(self.p, t) {
            return Ok(a.clone());
        }
        let dt = self.ty(t);
        match self.p.types.kind(t).clone() {
            TyKind::F64 => {
                let (c0, c1) = (self.proj(c, 0, Ty::F64), self.proj(c, 1, Ty::F64));
                let (a0, a1) = (self.proj(a, 0, Ty::F64), self.proj(a, 1, Ty::F64));
                let p = self.let_("s", Ty::F64, Expr::Scale(c0.clone(), a0.clone()));
                let t1 = self.let_("s", Ty::F64, Expr::Scale(c0, a1));
                let t2 = self.let_("s", Ty::F64, Expr::Scale(c1, a0));
                let tt = self.let_("s", Ty::F64, Expr::Add(t1, t2));
                Ok(self.let_("s", dt, Expr::Tuple(vec![p, tt])))
            }
            TyKind::Tuple(cs) => {
                let mut xs = Vec::new();
                for (k, ct) in cs.iter().enumerate() {
                    let dct = self.ty(*ct);
                    let x = self.proj(a, k as u32, dct);
                    xs.push(self.scale(c, &x, *ct)?);
                }
                Ok(self.let_("s", dt, Expr::Tuple(xs)))
            }
            TyKind::Array(e) => {
                let de = self.ty(e);
                let c = c.clone();
                let a2 = a.clone();
                self.map_array(a, de, move |s, i| {
                    let site = s.site;
                    let x = s.let_("x", de, Expr::Index(a2, i, site));
                    s.scale(&c, &x, e)
                })
            }
            TyKind::List(_, v) => {
                // Scale each entry's value; keys are unchanged.
                let dv = self.ty(v);
                let entry = match self.p.types.kind(dt) {
                    TyKind::List(k, v) => self.p.types.tuple(vec![*k, *v]),
                    _ => unreachable!("D of a list is a list"),
                };
                let dk = self.p.types.components(entry)[0];
                let acc = self.p.mut_var("acc", dt);
                self.emit(Stmt::Mut(acc.clone(), Expr::Zero(dt)));
                let n = self.let_("n", Ty::I64, Expr::Len(a.clone()));
                let i = self.p.var("i", Ty::I64);
                let (a2, c2, acc2) = (a.clone(), c.clone(), acc.clone());
                let body = self.block(|s| {
                    let site = s.site;
                    let e = s.let_("e", entry, Expr::Index(a2, Atom::Var(i.clone()), site));
                    let k = s.proj(&e, 0, dk);
                    let x = s.proj(&e, 1, dv);
                    let y = s.scale(&c2, &x, v)?;
                    let e2 = s.let_("e", entry, Expr::Tuple(vec![k, y]));
                    let one = s.let_("l", dt, Expr::Array(dt, vec![e2]));
                    s.emit(Stmt::AddTo {
                        place: Place::of(&acc2),
                        value: one,
                        scale: None,
                    });
                    Ok(Atom::Unit)
                })?;
                self.emit(Stmt::For(i, n, body));
                Ok(self.let_("s", dt, Expr::Take(acc)))
            }
            other => Err(unsupported(format!("scaling a value of kind {other:?}"))),
        }
    }

    /// The primal part (of type `t`) of a dual value `a : D t`.
    fn primal(&mut self, a: &Atom, t: Ty) -> Result<Atom> {
        self.part(a, t, None)
    }

    /// The tangent part, of the type `tt` a forward derivative gives `t`'s tangents.
    fn tangent(&mut self, a: &Atom, t: Ty, tt: Ty) -> Result<Atom> {
        self.part(a, t, Some(tt))
    }

    /// The primal part of `a : D t` (`tt` none), or its tangent part of type `tt`.
    fn part(&mut self, a: &Atom, t: Ty, tt: Option<Ty>) -> Result<Atom> {
        if !has_reals(self.p, t) {
            return Ok(match tt {
                None => a.clone(),
                Some(tt) if tt == Ty::UNIT => Atom::Unit,
                Some(tt) if self.p.types.is_additive(tt) => self.let_("z", tt, Expr::Zero(tt)),
                Some(tt) => {
                    return Err(unsupported(format!(
                        "a tangent of type {}",
                        self.p.types.show(tt)
                    )));
                }
            });
        }
        let tk = tt.map(|x| self.p.types.kind(x).clone());
        match (self.p.types.kind(t).clone(), tk) {
            (TyKind::F64, None) => Ok(self.proj(a, 0, Ty::F64)),
            (TyKind::F64, Some(TyKind::F64)) => Ok(self.proj(a, 1, Ty::F64)),
            (TyKind::Tuple(cs), tk) => {
                let tcs = match tk {
                    None => None,
                    Some(TyKind::Tuple(ts)) if ts.len() == cs.len() => Some(ts),
                    Some(_) => return Err(unsupported("a tuple's tangent".into())),
                };
                let mut xs = Vec::new();
                for (k, c) in cs.iter().enumerate() {
                    let dc = self.ty(*c);
                    let x = self.proj(a, k as u32, dc);
                    xs.push(self.part(&x, *c, tcs.as_ref().map(|ts| ts[k]))?);
                }
                let rt = tt.unwrap_or(t);
                Ok(self.let_("p", rt, Expr::Tuple(xs)))
            }
            (TyKind::Array(e), tk) => {
                let te = match tk {
                    None => None,
                    Some(TyKind::Array(te)) => Some(te),
                    Some(_) => return Err(unsupported("an array's tangent".into())),
                };
                let de = self.ty(e);
                let a2 = a.clone();
                self.map_array(a, te.unwrap_or(e), move |s, i| {
                    let site = s.site;
                    let x = s.let_("x", de, Expr::Index(a2, i, site));
                    s.part(&x, e, te)
                })
            }
            (k, _) => Err(unsupported(format!("the parts of a value of kind {k:?}"))),
        }
    }

    /// The dual value `D t` of `x : t` with tangent `dx : tt` (a forward derivative's
    /// representation of `t`'s tangents; `unit` for a zero tangent).
    fn join(&mut self, x: &Atom, dx: &Atom, t: Ty, tt: Ty) -> Result<Atom> {
        if !has_reals(self.p, t) {
            return Ok(x.clone());
        }
        let dt = self.ty(t);
        match (self.p.types.kind(t).clone(), self.p.types.kind(tt).clone()) {
            (TyKind::F64, TyKind::F64) => {
                Ok(self.let_("d", dt, Expr::Tuple(vec![x.clone(), dx.clone()])))
            }
            (TyKind::F64, TyKind::Unit) => {
                Ok(self.let_("d", dt, Expr::Tuple(vec![x.clone(), Atom::F64(0.0)])))
            }
            (TyKind::Tuple(cs), tk) => {
                let ts = match tk {
                    TyKind::Tuple(ts) if ts.len() == cs.len() => Some(ts),
                    TyKind::Unit => None,
                    _ => return Err(unsupported("a tuple's tangent".into())),
                };
                let mut xs = Vec::new();
                for (k, c) in cs.iter().enumerate() {
                    let xk = self.proj(x, k as u32, *c);
                    let (dk, tk) = match &ts {
                        Some(ts) => (self.proj(dx, k as u32, ts[k]), ts[k]),
                        None => (Atom::Unit, Ty::UNIT),
                    };
                    xs.push(self.join(&xk, &dk, *c, tk)?);
                }
                Ok(self.let_("d", dt, Expr::Tuple(xs)))
            }
            (TyKind::Array(e), tk) => {
                let te = match tk {
                    TyKind::Array(te) if self.p.types.is_additive(tt) => Some(te),
                    TyKind::Unit => None,
                    _ => return Err(unsupported("an array's tangent".into())),
                };
                let de = self.ty(e);
                let (x2, dx2) = (x.clone(), dx.clone());
                self.map_array(x, de, move |s, i| {
                    let site = s.site;
                    let xi = s.let_("x", e, Expr::Index(x2, i.clone(), site));
                    match te {
                        Some(te) => {
                            let di = s.let_("t", te, Expr::IndexOr0(dx2, i));
                            s.join(&xi, &di, e, te)
                        }
                        None => s.join(&xi, &Atom::Unit, e, Ty::UNIT),
                    }
                })
            }
            (TyKind::Enum(_), tk) => {
                // A sum's tangent is a tuple of one tangent per side (`unit`: zero).
                let variants = self.p.types.enum_def(t).variants.clone();
                let ts = match tk {
                    TyKind::Tuple(ts) if ts.len() == variants.len() => Some(ts),
                    TyKind::Unit => None,
                    _ => return Err(unsupported("a sum's tangent".into())),
                };
                let mut arms = Vec::new();
                for (k, (_, payload)) in variants.iter().enumerate() {
                    let v = self.p.var("v", *payload);
                    let (x2, dx2, ts2) = (Atom::Var(v.clone()), dx.clone(), ts.clone());
                    let body = self.block(|s| {
                        let (dk, tk) = match &ts2 {
                            Some(ts) => (s.proj(&dx2, k as u32, ts[k]), ts[k]),
                            None => (Atom::Unit, Ty::UNIT),
                        };
                        let d = s.join(&x2, &dk, *payload, tk)?;
                        Ok(s.let_("d", dt, Expr::Variant(dt, k as u32, d)))
                    })?;
                    arms.push(Arm {
                        bind: Some(v),
                        body,
                    });
                }
                Ok(self.let_("d", dt, Expr::Match(x.clone(), arms)))
            }
            (k, _) => Err(unsupported(format!("an input of kind {k:?}"))),
        }
    }

    /// The tangent of `a : D t` as a value of `t` (reals their tangent, the rest as is): how
    /// the derivative of a result leaves.
    fn tangent_as(&mut self, a: &Atom, t: Ty) -> Result<Atom> {
        if !has_reals(self.p, t) {
            return Ok(a.clone());
        }
        match self.p.types.kind(t).clone() {
            TyKind::F64 => Ok(self.proj(a, 1, Ty::F64)),
            TyKind::Tuple(cs) => {
                let mut xs = Vec::new();
                for (k, c) in cs.iter().enumerate() {
                    let dc = self.ty(*c);
                    let x = self.proj(a, k as u32, dc);
                    xs.push(self.tangent_as(&x, *c)?);
                }
                Ok(self.let_("p", t, Expr::Tuple(xs)))
            }
            TyKind::Array(e) => {
                let de = self.ty(e);
                let a2 = a.clone();
                self.map_array(a, e, move |s, i| {
                    let site = s.site;
                    let x = s.let_("x", de, Expr::Index(a2, i, site));
                    s.tangent_as(&x, e)
                })
            }
            k => Err(unsupported(format!("a result of kind {k:?}"))),
        }
    }

    /// Adds `NAME_hvp(x, dx) = ((y, g), h)` for a reverse derivative `vjp(x, ct) = (y, ct ·
    /// ∇f(x))` of a real-valued `f` and the tangent type `dxt` of `x` (a forward derivative's
    /// second parameter): the value, the gradient `g = ∇f(x)` and its derivative along `dx`,
    /// the Hessian-vector product `h = H dx`. The dual of `vjp`'s body is built in place with
    /// the seed `ct = (1, 0)` a known constant (so products by it fold away,
    /// [`crate::ir::opt::fold_zeros`]), and what only the tangent of `y` needed is removed
    /// ([`crate::ir::opt::dead_lets`]).
    pub fn hvp(&mut self, vjp: FuncId, dxt: Ty) -> Result<FuncId> {
        let f = self.p.func(vjp).clone();
        if f.rec.is_some() || f.params.len() != 2 {
            return Err(unsupported("a recursive reverse derivative".into()));
        }
        let (xt, ctt) = (f.params[0].ty, f.params[1].ty);
        if ctt != Ty::F64 {
            return Err(unsupported(
                "a reverse derivative of a non-real result".into(),
            ));
        }
        let (yt, ctxt) = match self.p.types.kind(f.ret) {
            TyKind::Tuple(cs) if cs.len() == 2 => (cs[0], cs[1]),
            _ => return Err(unsupported("a reverse derivative's result".into())),
        };
        let x = self.p.var("x", xt);
        let dx = self.p.var("dx", dxt);
        let (xa, dxa, cta) = (Atom::Var(x.clone()), Atom::Var(dx.clone()), Atom::F64(1.0));
        let ret = self.p.types.tuple(vec![f.ret, ctxt]);
        let saved = std::mem::take(&mut self.out);
        let body = self.block(|s| {
            let dxx = s.join(&xa, &dxa, xt, dxt)?;
            let dct = s.join(&cta, &Atom::Unit, ctt, Ty::UNIT)?;
            let (p0, p1) = (s.var(&f.params[0]), s.var(&f.params[1]));
            s.bind(p0, Expr::Atom(dxx));
            s.bind(p1, Expr::Atom(dct));
            for st in &f.body.stmts {
                s.stmt(st)?;
            }
            let r = s.atom(&f.body.result);
            let (dyt, dctxt) = (s.ty(yt), s.ty(ctxt));
            let y = s.proj(&r, 0, dyt);
            let c = s.proj(&r, 1, dctxt);
            let y = s.primal(&y, yt)?;
            let g = s.primal(&c, ctxt)?;
            let h = s.tangent_as(&c, ctxt)?;
            let yg = s.let_("yg", f.ret, Expr::Tuple(vec![y, g]));
            Ok(s.let_("hvp", ret, Expr::Tuple(vec![yg, h])))
        });
        self.out = saved;
        let mut name = format!("{}_hvp", f.name.trim_end_matches("_vjp"));
        while self.p.find(&name).is_some() {
            name.push('_');
        }
        let mut func = Func {
            name,
            params: vec![x, dx],
            ret,
            body: body?,
            accumulates: false,
            rec: None,
        };
        // Constants' tangents are literal zeros: fold the products and sums they meet.
        crate::ir::opt::fold_zeros(&mut func);
        for d in self.funcs.values() {
            crate::ir::opt::fold_zeros(&mut self.p.funcs[d.0 as usize]);
        }
        crate::ir::opt::dead_lets(&mut func, &self.shadows);
        self.p.funcs.push(func);
        Ok(FuncId(self.p.funcs.len() as u32 - 1))
    }
}

/// `e` with every operand mapped by `f` (expressions without blocks).
fn map_atoms(e: &Expr, f: &dyn Fn(&Atom) -> Atom) -> Expr {
    let mut e = e.clone();
    super::for_each_block(&e, &mut |_| unreachable!("an expression with blocks"));
    super::for_each_operand_mut(&mut e, &mut |a| *a = f(a));
    e
}
