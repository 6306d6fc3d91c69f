//! Lowering Cartesian target terms (see [`super`]): straight-line code, loops for the array
//! forms, conditionals and matches, with static pairs and closures.
//!
//! | term | IR |
//! | --- | --- |
//! | `let p = e in b` | the value of `e`, its pattern's parts bound (projections), then `b` |
//! | `(a, b)`, `fst`, `snd` | a static pair (no tuple built until one is needed), projections |
//! | `\x -> b` | a static closure; `f a` with a static `f` inlines `b` with `x := a` |
//! | `f a`, `f` not static | `call apply_E(f, a)` (defunctionalised) |
//! | `map f xs`, `map2`, `build n f` | `build n (i -> f (xs[i]))`, `f` inlined when static |
//! | `sum (map f xs)` (and of `map2`, `build`), `dot xs ys` | one `sum` loop, no array |
//! | `if`, `case` | `if` / `match` with materialised results |
//! | `fix F` | a closure variant whose apply calls `rec fn(env, a) = F (variant env) a` |
//! | `f • a` (Cartesian) | the linear lowering of `f` applied to `a` into a fresh accumulator |

use super::super::{Arm, Atom, Check, Expr, Op, Place, Stmt, Ty};
use super::{Env, Lowering, SVal};
use crate::deep::deep;
use crate::error::Result;
use crate::target::term::{Pat, Term, TermKind};
use crate::target::types::Ty as TTy;
use std::rc::Rc;

impl Lowering {
    /// Lowers a Cartesian term; its value.
    pub(super) fn term(&mut self, t: &Term, env: &Env) -> Result<SVal> {
        deep(|| {
            // Let chains are lowered in a loop (they can be very long).
            let mut env = env.clone();
            let mut t = t;
            while let TermKind::Let(p, e, b) = &t.kind {
                let v = self.term(e, &env)?;
                let pt = self.type_of.term(e);
                self.bind(p, v, &pt, &mut env)?;
                t = b;
            }
            self.node(t, &env)
        })
    }

    /// Binds a pattern to a value.
    pub(super) fn bind(&mut self, p: &Pat, v: SVal, t: &TTy, env: &mut Env) -> Result<()> {
        match p {
            Pat::Var(x) => {
                env.insert(x.id, v);
            }
            Pat::Wild(_) => {}
            Pat::Pair(a, b) => {
                let (ta, tb) = t
                    .as_prod()
                    .unwrap_or_else(|| panic!("internal error: a pair pattern at type {t}"));
                let (ta, tb) = (ta.clone(), tb.clone());
                if !matches!(**a, Pat::Wild(_)) {
                    let va = self.proj(&v, 0, t)?;
                    self.bind(a, va, &ta, env)?;
                }
                if !matches!(**b, Pat::Wild(_)) {
                    let vb = self.proj(&v, 1, t)?;
                    self.bind(b, vb, &tb, env)?;
                }
            }
        }
        Ok(())
    }

    /// Component `k` of a pair value of type `t`.
    pub(super) fn proj(&mut self, v: &SVal, k: u32, t: &TTy) -> Result<SVal> {
        let (ta, tb) = t
            .as_prod()
            .unwrap_or_else(|| panic!("internal error: a projection at type {t}"));
        let ct = if k == 0 { ta.clone() } else { tb.clone() };
        Ok(match v {
            SVal::Pair(p) => {
                if k == 0 {
                    p.0.clone()
                } else {
                    p.1.clone()
                }
            }
            SVal::Dyn(a) => {
                let it = self.ty(&ct);
                let x = self.let_("p", it, Expr::Proj(a.clone(), k));
                SVal::Dyn(x)
            }
            SVal::Lam(_) | SVal::LinLam(_) => panic!("internal error: projection of a closure"),
        })
    }

    /// The run-time value of a term.
    pub(super) fn atom(&mut self, t: &Term, env: &Env) -> Result<Atom> {
        let v = self.term(t, env)?;
        let ty = self.type_of.term(t);
        self.materialise(&v, &ty)
    }

    /// `f a` for the value `f` of a function of type `ft`.
    pub(super) fn app(&mut self, f: &SVal, a: SVal, ft: &TTy) -> Result<SVal> {
        let (at, bt) = ft
            .as_fun()
            .unwrap_or_else(|| panic!("internal error: application of a {ft}"));
        let (at, bt) = (at.clone(), bt.clone());
        if let SVal::Lam(c) = f {
            let TermKind::Lam(x, body) = &c.term.kind else {
                panic!("internal error: a static closure is not a λ")
            };
            let size = body.size();
            if self.inlined + size <= self.inline_budget {
                self.inlined += size;
                let mut env = c.env.clone();
                env.insert(x.id, a);
                return self.term(body, &env);
            }
        }
        let fa = self.materialise(f, ft)?;
        let aa = self.materialise(&a, &at)?;
        let e = self.ty(ft);
        let (apply, _) = self.apply_of(e);
        let rt = self.ty(&bt);
        let r = self.let_("r", rt, Expr::Call(apply, vec![fa, aa]));
        Ok(SVal::Dyn(r))
    }

    /// The elements of the arrays of a `map`/`map2`/`build`: its length and, in a loop over
    /// `i`, the mapped function's value at `i`.
    fn array_form(&mut self, t: &Term, env: &Env) -> Result<Option<ArrayForm>> {
        Ok(Some(match &t.kind {
            TermKind::Map(f, xs) => {
                let fv = self.term(f, env)?;
                let ft = self.type_of.term(f);
                let xs = self.atom(xs, env)?;
                let n = self.let_("n", Ty::I64, Expr::Len(xs.clone()));
                ArrayForm {
                    n,
                    f: fv,
                    ft,
                    arrays: vec![xs],
                    checked: false,
                }
            }
            TermKind::Map2(f, xs, ys) => {
                let fv = self.term(f, env)?;
                let ft = self.type_of.term(f);
                let xs = self.atom(xs, env)?;
                let ys = self.atom(ys, env)?;
                let n = self.let_("n", Ty::I64, Expr::Len(xs.clone()));
                let m = self.let_("m", Ty::I64, Expr::Len(ys.clone()));
                let s = self.site(t.span);
                self.emit(Stmt::Check(Check::SameLen("map2", n.clone(), m), s));
                ArrayForm {
                    n,
                    f: fv,
                    ft,
                    arrays: vec![xs, ys],
                    checked: false,
                }
            }
            TermKind::Build(n, f) => {
                let fv = self.term(f, env)?;
                let ft = self.type_of.term(f);
                let n = self.atom(n, env)?;
                ArrayForm {
                    n,
                    f: fv,
                    ft,
                    arrays: vec![],
                    checked: true,
                }
            }
            _ => return Ok(None),
        }))
    }

    /// Inside a loop over `i`: the mapped function at element `i`.
    fn element(&mut self, form: &ArrayForm, i: &Atom) -> Result<SVal> {
        let mut f = form.f.clone();
        let mut ft = form.ft.clone();
        if form.arrays.is_empty() {
            return self.app(&f, SVal::Dyn(i.clone()), &ft);
        }
        for xs in &form.arrays {
            let site = self.internal_site();
            let et = ft
                .as_fun()
                .unwrap_or_else(|| panic!("internal error: mapped non-function"))
                .0
                .clone();
            let it = self.ty(&et);
            let x = self.let_("x", it, Expr::Index(xs.clone(), i.clone(), site));
            let next = ft.as_fun().expect("checked").1.clone();
            f = self.app(&f, SVal::Dyn(x), &ft)?;
            ft = next;
        }
        Ok(f)
    }

    fn node(&mut self, t: &Term, env: &Env) -> Result<SVal> {
        use TermKind as K;
        Ok(match &t.kind {
            K::Var(x) => env
                .get(&x.id)
                .cloned()
                .unwrap_or_else(|| panic!("internal error: unbound target variable {x:?}")),
            K::Lit(l) => {
                use crate::source::term::Lit;
                let a = match *l {
                    Lit::Real(x) => Atom::F64(x),
                    Lit::Int(i) => Atom::I64(i),
                    Lit::Bool(b) => Atom::Bool(b),
                    Lit::Unit => Atom::Unit,
                };
                SVal::Dyn(a)
            }
            K::Lam(..) => SVal::Lam(Rc::new(super::Closure {
                term: t.clone(),
                env: env.clone(),
            })),
            K::LinLam(..) => SVal::LinLam(Rc::new(super::Closure {
                term: t.clone(),
                env: env.clone(),
            })),
            K::App(f, a) => {
                let fv = self.term(f, env)?;
                let av = self.term(a, env)?;
                let ft = self.type_of.term(f);
                self.app(&fv, av, &ft)?
            }
            K::Let(..) => self.term(t, env)?,
            K::Pair(a, b) => {
                let a = self.term(a, env)?;
                let b = self.term(b, env)?;
                SVal::Pair(Rc::new((a, b)))
            }
            K::Fst(e) | K::Snd(e) => {
                let v = self.term(e, env)?;
                let et = self.type_of.term(e);
                self.proj(&v, u32::from(matches!(t.kind, K::Snd(_))), &et)?
            }
            K::If(c, a, b) => {
                let c = self.atom(c, env)?;
                let rt = self.type_of.term(t);
                let a = self.block(|this| this.atom(a, env))?;
                let b = self.block(|this| this.atom(b, env))?;
                let it = self.ty(&rt);
                SVal::Dyn(self.let_("r", it, Expr::If(c, a, b)))
            }
            K::Inl(e, _) | K::Inr(_, e) => {
                let rt = self.type_of.term(t);
                let st = self.ty(&rt);
                let a = self.atom(e, env)?;
                let tag = u32::from(matches!(t.kind, K::Inr(..)));
                SVal::Dyn(self.let_("s", st, Expr::Variant(st, tag, a)))
            }
            K::Case(e, p, a, q, b) => {
                let s = self.atom(e, env)?;
                let st = self.type_of.term(e);
                let (lt, rt_) = st
                    .as_sum()
                    .unwrap_or_else(|| panic!("internal error: case on a {st}"));
                let (lt, rt_) = (lt.clone(), rt_.clone());
                let rt = self.type_of.term(t);
                let mut arms = Vec::new();
                for (pat, body, pt) in [(p, a, lt), (q, b, rt_)] {
                    let it = self.ty(&pt);
                    let x = self.prog.var("c", it);
                    let mut env = env.clone();
                    let body = self.block(|this| {
                        this.bind(pat, SVal::Dyn(Atom::Var(x.clone())), &pt, &mut env)?;
                        this.atom(body, &env)
                    })?;
                    arms.push(Arm {
                        bind: Some(x),
                        body,
                    });
                }
                let it = self.ty(&rt);
                SVal::Dyn(self.let_("r", it, Expr::Match(s, arms)))
            }
            K::Prim(op, args) => self.prim(t, op, args, env)?,
            K::Array(et, items) => {
                let mut xs = Vec::with_capacity(items.len());
                for x in items {
                    xs.push(self.atom(x, env)?);
                }
                let at = TTy::array(et.clone());
                let ait = self.ty(&at);
                SVal::Dyn(self.let_("xs", ait, Expr::Array(ait, xs)))
            }
            K::Map(..) | K::Map2(..) | K::Build(..) => {
                let form = self.array_form(t, env)?.expect("an array form");
                let rt = self.type_of.term(t);
                let et = rt.as_array().expect("an array type").clone();
                let i = self.prog.var("i", Ty::I64);
                self.loop_bound(&i, &form.n);
                let ia = Atom::Var(i.clone());
                let body = self.block(|this| {
                    let v = this.element(&form, &ia)?;
                    this.materialise(&v, &et)
                })?;
                let site = if form.checked {
                    self.site(t.span)
                } else {
                    self.internal_site()
                };
                let it = self.ty(&rt);
                SVal::Dyn(self.let_("ys", it, Expr::Build(form.n, i, body, site)))
            }
            K::Index(xs, i) => {
                let xs = self.atom(xs, env)?;
                let i = self.atom(i, env)?;
                let rt = self.type_of.term(t);
                let it = self.ty(&rt);
                let s = if self.in_range(&xs, &i) {
                    self.internal_site()
                } else {
                    self.site(t.span)
                };
                SVal::Dyn(self.let_("x", it, Expr::Index(xs, i, s)))
            }
            K::Length(xs) => {
                let xs = self.atom(xs, env)?;
                SVal::Dyn(self.let_("n", Ty::I64, Expr::Len(xs)))
            }
            K::Loop(f, x, tape) => {
                // The step applied to the state inside an `iterate` (inlined when static).
                let fv = self.term(f, env)?;
                let ft = self.type_of.term(f);
                let init = self.atom(x, env)?;
                let (st, rt) = ft
                    .as_fun()
                    .map(|(a, b)| (a.clone(), b.clone()))
                    .unwrap_or_else(|| panic!("internal error: a loop step of type {ft}"));
                let sit = self.ty(&st);
                let s = self.prog.var("s", sit);
                let sa = Atom::Var(s.clone());
                let body = self.block(|this| {
                    let r = this.app(&fv, SVal::Dyn(sa), &ft)?;
                    this.materialise(&r, &rt)
                })?;
                let result = self.type_of.term(t);
                let it = self.ty(&result);
                let site = self.site(t.span);
                SVal::Dyn(self.let_("r", it, Expr::Iterate(init, s, body, *tape, site)))
            }
            K::Fix(..) => {
                // `fix F`: a variant of the closure enum of `A → B` whose payload is `F`'s
                // captured variables; its apply calls the recursive function `rec(env, a) =
                // F (the variant itself) a` (see `Lowering::fix_arm`).
                let ft = self.type_of.term(t);
                let e = self.ty(&ft);
                let (tag, captured) = self.variant(e, crate::target::term::Child::C(t));
                let payload = self.captured(&captured, env, None)?;
                SVal::Dyn(self.let_("rec", e, Expr::Variant(e, tag, payload)))
            }
            K::Replicate(n, x) => {
                let n = self.atom(n, env)?;
                let x = self.atom(x, env)?;
                let rt = self.type_of.term(t);
                let it = self.ty(&rt);
                let s = self.site(t.span);
                SVal::Dyn(self.let_("xs", it, Expr::Replicate(n, x, s)))
            }
            K::LinApp(f, a) => {
                let fv = self.term(f, env)?;
                let a = self.atom(a, env)?;
                let ft = self.type_of.term(f);
                let (dom, cod) = ft
                    .as_lin_fun()
                    .unwrap_or_else(|| panic!("internal error: • of a {ft}"));
                let (dom, cod) = (dom.clone(), cod.clone());
                let r = self.lin_apply_value(&fv, a, &dom, &cod)?;
                SVal::Dyn(r)
            }
            K::LinPrim(k, a) => {
                let av = self.term(a, env)?;
                self.kernel(t, k, av, env)?
            }
        })
    }

    /// A primitive: `sum` and `dot` of array forms fuse into one `sum` loop; others are calls.
    fn prim(&mut self, t: &Term, op: &crate::prim::Prim, args: &[Term], env: &Env) -> Result<SVal> {
        match (op.name(), args) {
            // `--wrt`'s identity with a zero derivative: only the derivative code differs.
            (crate::ad::wrt::STOP_GRADIENT, [x]) => return self.term(x, env),
            ("sum", [xs]) if op.params().len() == 1 => {
                if let Some(form) = self.array_form(xs, env)? {
                    let site = self.site(xs.span);
                    if form.checked {
                        self.emit(Stmt::Check(Check::Len("build", form.n.clone()), site));
                    }
                    let i = self.prog.var("i", Ty::I64);
                    self.loop_bound(&i, &form.n);
                    let ia = Atom::Var(i.clone());
                    let body = self.block(|this| {
                        let v = this.element(&form, &ia)?;
                        this.materialise(&v, &TTy::Real)
                    })?;
                    let s = self.let_("s", Ty::F64, Expr::Sum(form.n, i, body));
                    return Ok(SVal::Dyn(s));
                }
            }
            ("dot", [xs, ys]) => {
                let xs = self.atom(xs, env)?;
                let ys = self.atom(ys, env)?;
                let n = self.let_("n", Ty::I64, Expr::Len(xs.clone()));
                let m = self.let_("m", Ty::I64, Expr::Len(ys.clone()));
                let s = self.site(t.span);
                // `dot`'s own message ("dot: arrays have different lengths").
                self.emit(Stmt::Check(Check::SameLen("dot", n.clone(), m), s));
                let i = self.prog.var("i", Ty::I64);
                let ia = Atom::Var(i.clone());
                let site = self.internal_site();
                let body = self.block(|this| {
                    let x = this.let_("x", Ty::F64, Expr::Index(xs, ia.clone(), site));
                    let y = this.let_("y", Ty::F64, Expr::Index(ys, ia, site));
                    Ok(this.let_("xy", Ty::F64, Expr::Op(Op::FMul, vec![x, y])))
                })?;
                let s = self.let_("s", Ty::F64, Expr::Sum(n, i, body));
                return Ok(SVal::Dyn(s));
            }
            (crate::target::linear::scatter::NAME, [n, is, xs]) => {
                return self.scatter_add(t, op, n, is, xs, env);
            }
            (crate::target::linear::padadd::NAME, [xs, ys]) => {
                return self.pad_add(op, xs, ys, env);
            }
            _ => {}
        }
        let mut xs = Vec::with_capacity(args.len());
        for a in args {
            xs.push(self.atom(a, env)?);
        }
        // Parameter and result types are first-order source types: intern their IR forms.
        for p in op.params() {
            super::source_ty(&mut self.prog.types, p);
        }
        let it = super::source_ty(&mut self.prog.types, op.result());
        let s = self.site(t.span);
        Ok(SVal::Dyn(self.let_(
            op.name(),
            it,
            Expr::Prim(op.clone(), xs, s),
        )))
    }
}

impl Lowering {
    /// `padAdd xs ys` (the concretiser's addition of arrays of reals,
    /// `crate::target::linear::padadd`), the evaluator's cases in order:
    ///
    /// ```text
    /// let n = len xs; let m = len ys
    /// if n == 0 { ys } else if m == 0 { xs } else { build (max n m) (i -> xs[i]?0 + ys[i]?0) }
    /// ```
    fn pad_add(&mut self, op: &crate::prim::Prim, xs: &Term, ys: &Term, env: &Env) -> Result<SVal> {
        let xs = self.atom(xs, env)?;
        let ys = self.atom(ys, env)?;
        let it = super::source_ty(&mut self.prog.types, op.result());
        let n = self.let_("n", Ty::I64, Expr::Len(xs.clone()));
        let m = self.let_("m", Ty::I64, Expr::Len(ys.clone()));
        let n0 = self.let_(
            "e",
            Ty::BOOL,
            Expr::Op(Op::IEq, vec![n.clone(), Atom::I64(0)]),
        );
        let m0 = self.let_(
            "e",
            Ty::BOOL,
            Expr::Op(Op::IEq, vec![m.clone(), Atom::I64(0)]),
        );
        let big = self.let_("big", Ty::I64, Expr::Op(Op::IMax, vec![n, m]));
        let i = self.prog.var("i", Ty::I64);
        let ia = Atom::Var(i.clone());
        let site = self.internal_site();
        let (xa, ya) = (xs.clone(), ys.clone());
        let body = self.block(|this| {
            let x = this.let_("x", Ty::F64, Expr::IndexOr0(xa, ia.clone()));
            let y = this.let_("y", Ty::F64, Expr::IndexOr0(ya, ia));
            Ok(this.let_("s", Ty::F64, Expr::Op(Op::FAdd, vec![x, y])))
        })?;
        let both = self.block(|this| Ok(this.let_("r", it, Expr::Build(big, i, body, site))))?;
        let keep = |a: Atom| crate::ir::Block {
            stmts: Vec::new(),
            result: a,
        };
        let rest = self.block(|this| Ok(this.let_("r", it, Expr::If(m0, keep(xs), both))))?;
        Ok(SVal::Dyn(self.let_("r", it, Expr::If(n0, keep(ys), rest))))
    }

    /// `scatterAdd n is xs` (the concretiser's accumulation, `crate::target::linear::scatter`)
    /// as one accumulator loop, `O(n + length is)`, with the evaluator's checks:
    ///
    /// ```text
    /// check len n; check same len (len is) (len xs)
    /// mut acc = replicate n 0.0
    /// for k in 0..len is { let j = is[k]; if 0 <= j < n { acc[j] += xs[k] } }
    /// take acc
    /// ```
    fn scatter_add(
        &mut self,
        t: &Term,
        op: &crate::prim::Prim,
        n: &Term,
        is: &Term,
        xs: &Term,
        env: &Env,
    ) -> Result<SVal> {
        const NAME: &str = crate::target::linear::scatter::NAME;
        let n = self.atom(n, env)?;
        let is = self.atom(is, env)?;
        let xs = self.atom(xs, env)?;
        let it = super::source_ty(&mut self.prog.types, op.result());
        let s = self.site(t.span);
        self.emit(Stmt::Check(Check::Len(NAME, n.clone()), s));
        let k = self.let_("k", Ty::I64, Expr::Len(is.clone()));
        let m = self.let_("m", Ty::I64, Expr::Len(xs.clone()));
        self.emit(Stmt::Check(Check::SameLen(NAME, k.clone(), m), s));
        let acc = self.mut_("acc", it, Expr::Replicate(n.clone(), Atom::F64(0.0), s));
        let i = self.prog.var("i", Ty::I64);
        let ia = Atom::Var(i.clone());
        let site = self.internal_site();
        let body = self.block(|this| {
            let j = this.let_("j", Ty::I64, Expr::Index(is, ia.clone(), site));
            let x = this.let_("x", Ty::F64, Expr::Index(xs, ia, site));
            let place = Place::of(&acc).elem(j.clone());
            this.if_in_range(&j, &n, |this| {
                this.emit(Stmt::AddTo {
                    place,
                    value: x,
                    scale: None,
                });
                Ok(())
            })?;
            Ok(Atom::Unit)
        })?;
        self.emit(Stmt::For(i, k, body));
        Ok(SVal::Dyn(self.let_("r", it, Expr::Take(acc))))
    }
}

/// A `map`, `map2` or `build` about to be looped over.
struct ArrayForm {
    /// The length.
    n: Atom,
    /// The mapped function and its type.
    f: SVal,
    ft: TTy,
    /// The arrays mapped over (none for `build`, whose function takes the index).
    arrays: Vec<Atom>,
    /// Whether the length must be checked (`build`).
    checked: bool,
}
