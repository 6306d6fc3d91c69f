//! Derivatives of derivatives: CHAD's derivative code concretised back into the source language
//! ([`crate::target::concretize`]) and differentiated again (`theory-notes/12-nested-ad.md`).
//!
//! * [`vjp_entry`] and [`jvp_entry`]: the reverse and forward derivatives of a first-order
//!   entry as ordinary source entries, whose inputs and outputs are the (co)tangents the
//!   command line uses (dense, of type [`Type::tangent`]);
//! * [`Hvp`]: Hessian-vector products by forward over reverse (forward CHAD applied to the
//!   concretised reverse derivative), at a constant times the cost of the gradient;
//! * [`hessian`] (one Hessian-vector product per basis vector) and [`jacobian`] (one forward
//!   derivative per input component, or one reverse derivative per output component).
//!
//! Each runs its derivative code on a [`Backend`]: the execution engine ([`Engine`], what the
//! plain functions use) or native code (`crate::native::NativeBackend`, `--backend native`);
//! the derivative entries are built here once, whichever runs them.
//!
//! Each takes a selection of parameters (`wrt`, one flag per parameter, as
//! [`super::with_respect_to`]); the others are constants. Flattening (rows and columns of
//! Hessians and Jacobians): the `Real` components of the selected parameters in order, depth
//! first, arrays element by element ([`crate::oracle::fd::leaves`]).

use super::{Jvp, Vjp, with_respect_to};
use crate::error::{Error, ErrorKind, Result};
use crate::oracle::fd;
use crate::simplify::simplify;
use crate::source::term::{Entry, Lit, Pat, Term, TermKind as S, Var};
use crate::target::concretize;
use crate::target::linear::concrete::{self, bind, mk};
use crate::target::types::LTy;
use crate::types::Type;
use crate::value::Value;

fn fail(e: String) -> Error {
    Error::new(
        ErrorKind::Unsupported,
        format!("differentiating derivative code: {e}"),
    )
}

type R<T> = std::result::Result<T, String>;

/// The context tuple `((((), p1), p2), ..., pn)` the compiled entry takes.
fn context(params: &[Term]) -> R<Term> {
    params
        .iter()
        .try_fold(Term::lit(Lit::Unit), |g, p| mk(S::Pair(g, p.clone())))
}

/// The components of a value of a context type (concrete (co)tangent of the context).
fn components(mut c: Term, n: usize) -> R<Vec<Term>> {
    let mut out = vec![Term::lit(Lit::Unit); n];
    for k in (0..n).rev() {
        out[k] = mk(S::Snd(c.clone()))?;
        c = mk(S::Fst(c))?;
    }
    Ok(out)
}

/// The dense (co)tangent (of type `ty.tangent()`) of `x : ty` from its concrete linear value
/// `c : C(l)`, `l` the (co)tangent type of `ty`: zeros expanded to `x`'s shape.
fn densify(ty: &Type, l: &LTy, x: Term, c: Term) -> R<Term> {
    crate::deep::deep(|| match (ty, l) {
        (Type::Real, _) => Ok(c),
        (Type::Int | Type::Bool | Type::Unit, _) => Ok(Term::lit(Lit::Unit)),
        (Type::Prod(p), LTy::Prod(q)) => bind("x", x, |x| {
            bind("c", c, |c| {
                mk(S::Pair(
                    densify(&p.0, &q.0, mk(S::Fst(x.clone()))?, mk(S::Fst(c.clone()))?)?,
                    densify(&p.1, &q.1, mk(S::Snd(x))?, mk(S::Snd(c))?)?,
                ))
            })
        }),
        (Type::Sum(p), LTy::Sum(q)) => bind("c", c, |c| {
            let (ta, tb) = (tangent(&p.0)?, tangent(&p.1)?);
            let u = Var::fresh("u", p.0.clone());
            let v = Var::fresh("v", p.1.clone());
            let left = densify(&p.0, &q.0, Term::var(&u), concrete::from_left(c.clone())?)?;
            let right = densify(&p.1, &q.1, Term::var(&v), concrete::from_right(c)?)?;
            mk(S::Case(
                x,
                Pat::Var(u),
                mk(S::Inl(left, tb))?,
                Pat::Var(v),
                mk(S::Inr(ta, right))?,
            ))
        }),
        (Type::Array(a), LTy::Array(e)) => bind("x", x, |x| {
            bind("c", c, |c| {
                // The element's densification, written once and called from both builds (one
                // copy per build made a `k`-deep array type cost `2^k` copies).
                let d = concrete::lam("x", (**a).clone(), |xe| {
                    concrete::lam("c", concrete::ty(e)?, |ce| densify(a, e, xe, ce))
                })?;
                bind("d", d, |d| {
                    let call = |xi: Term, ci: Term| -> R<Term> {
                        mk(S::App(mk(S::App(d.clone(), xi))?, ci))
                    };
                    let i = Var::fresh("i", Type::Int);
                    let xi = mk(S::Index(x.clone(), Term::var(&i)))?;
                    let ci = concrete::lindex(e, c.clone(), Term::var(&i))?;
                    let body = call(xi.clone(), ci)?;
                    let padded = mk(S::Build(
                        mk(S::Length(x.clone()))?,
                        mk(S::Lam(i.clone(), body))?,
                    ))?;
                    // Of the full length already (the common case): no test per element.
                    let full = if matches!(***a, Type::Real) {
                        c.clone()
                    } else {
                        let ci = mk(S::Index(c.clone(), Term::var(&i)))?;
                        let body = call(xi, ci)?;
                        mk(S::Build(mk(S::Length(x.clone()))?, mk(S::Lam(i, body))?))?
                    };
                    let same = mk(S::Prim(
                        crate::prim::op("ieq"),
                        vec![mk(S::Length(c))?, mk(S::Length(x))?],
                    ))?;
                    mk(S::If(same, full, padded))
                })
            })
        }),
        _ => Err(format!("no dense tangent for `{ty}` from `{l}`")),
    })
}

/// The concrete linear value (`C(l)`) of a dense (co)tangent `t` of a value of type `ty`.
fn undense(ty: &Type, l: &LTy, t: Term) -> R<Term> {
    crate::deep::deep(|| match (ty, l) {
        (Type::Real, _) => Ok(t),
        (Type::Int | Type::Bool | Type::Unit, _) => concrete::zero(l),
        (Type::Prod(p), LTy::Prod(q)) => bind("t", t, |t| {
            mk(S::Pair(
                undense(&p.0, &q.0, mk(S::Fst(t.clone()))?)?,
                undense(&p.1, &q.1, mk(S::Snd(t))?)?,
            ))
        }),
        (Type::Sum(p), LTy::Sum(q)) => {
            let u = Var::fresh("u", tangent(&p.0)?);
            let v = Var::fresh("v", tangent(&p.1)?);
            let left = concrete::inl(undense(&p.0, &q.0, Term::var(&u))?, &q.1)?;
            let right = concrete::inr(&q.0, undense(&p.1, &q.1, Term::var(&v))?)?;
            mk(S::Case(t, Pat::Var(u), left, Pat::Var(v), right))
        }
        (Type::Array(a), LTy::Array(e)) => {
            let u = Var::fresh("u", tangent(a)?);
            let body = undense(a, e, Term::var(&u))?;
            mk(S::Map(mk(S::Lam(u, body))?, t))
        }
        _ => Err(format!("no concrete form of a tangent of `{ty}` as `{l}`")),
    })
}

fn tangent(ty: &Type) -> R<Type> {
    ty.tangent()
        .ok_or_else(|| format!("`{ty}` has no tangents"))
}

/// Fresh parameters for a derivative entry of `entry`: a first-order parameter as it is, a
/// function parameter `A -> B` as the concrete form of its primal under the transformation
/// (`d1`: `R1` or `F1`, a function returning the value and the derivative at a point), which
/// the caller builds from the function's own derivatives ([`Elaborator`]).
fn fresh_params(entry: &Entry, d1: fn(&Type) -> crate::target::types::Ty) -> R<Vec<Var>> {
    entry
        .params
        .iter()
        .map(|p| {
            let ty = if p.ty.is_first_order() {
                p.ty.clone()
            } else {
                concrete::cty(&d1(&p.ty))?
            };
            Ok(Var::fresh(p.name.clone(), ty))
        })
        .collect()
}

/// The reverse derivative of a first-order entry `f(p1, ..., pn) : B` as a source entry
/// `f'(p1, ..., pn, ct : tangent B) = (f(p..), (g1, (g2, ... gn)))`, the gradients dense (of
/// type `tangent Ai`; the tuple is right-nested, a single one bare). Optimised first
/// ([`crate::optimize`], as every command's pipeline does: the top-level `f` of an entry
/// `let f = \x -> .. in f x` is inlined, so no function value, and no copower for its
/// cotangent, reaches the derivative), then reverse CHAD, simplified, concretised: an
/// ordinary program, which can be differentiated again.
pub fn vjp_entry(entry: &Entry) -> Result<Entry> {
    let opt = crate::optimize::optimize(entry);
    let vjp = Vjp::with_function_inputs(&opt)?.map_body(simplify);
    let mor = vjp.mor();
    let f = concretize::term(&mor.to_term()).map_err(fail)?;
    let params = fresh_params(entry, super::reverse::primal).map_err(fail)?;
    let ct = Var::fresh("ct", tangent(&entry.body.ty).map_err(fail)?);
    let body = (|| -> R<Term> {
        let ps: Vec<Term> = params.iter().map(Term::var).collect();
        let r = mk(S::App(f, context(&ps)?))?;
        bind("r", r, |r| {
            let lb = super::reverse::cotangent(&entry.body.ty);
            let dct = undense(&entry.body.ty, &lb, Term::var(&ct))?;
            let d = mk(S::App(mk(S::Snd(r.clone()))?, dct))?;
            bind("d", d, |d| {
                let comps = components(d, params.len())?;
                let mut gs = Vec::new();
                for ((p, q), c) in params.iter().zip(&entry.params).zip(comps) {
                    if !q.ty.is_first_order() {
                        // A function input's cotangent (a copower) is not returned.
                        gs.push(Term::lit(Lit::Unit));
                        continue;
                    }
                    let l = super::reverse::cotangent(&p.ty);
                    gs.push(densify(&p.ty, &l, Term::var(p), c)?);
                }
                mk(S::Pair(mk(S::Fst(r))?, tuple(gs)?))
            })
        })
    })()
    .map_err(fail)?;
    let mut all = params;
    all.push(ct);
    Ok(Entry {
        name: format!("{}'", entry.name).into(),
        params: all,
        body,
    })
}

/// The forward derivative of a first-order entry `f(p1, ..., pn) : B` as a source entry
/// `f'(p1, ..., pn, t1, ..., tn) = (f(p..), dy)`, tangents dense. Optimised (as in
/// [`vjp_entry`]), forward CHAD, simplified, concretised.
pub fn jvp_entry(entry: &Entry) -> Result<Entry> {
    let opt = crate::optimize::optimize(entry);
    let jvp = Jvp::with_function_inputs(&opt)?.map_body(simplify);
    let f = concretize::term(&jvp.mor().to_term()).map_err(fail)?;
    let params = fresh_params(entry, super::forward::primal).map_err(fail)?;
    // One tangent per first-order parameter; a function input's tangent is zero.
    let tans = entry
        .params
        .iter()
        .filter(|p| p.ty.is_first_order())
        .map(|p| Ok(Var::fresh(format!("d{}", p.name), tangent(&p.ty)?)))
        .collect::<R<Vec<_>>>()
        .map_err(fail)?;
    let body = (|| -> R<Term> {
        let ps: Vec<Term> = params.iter().map(Term::var).collect();
        let r = mk(S::App(f, context(&ps)?))?;
        let mut given = tans.iter();
        let ts = entry
            .params
            .iter()
            .map(|p| {
                let l = super::forward::tangent(&p.ty);
                if p.ty.is_first_order() {
                    undense(&p.ty, &l, Term::var(given.next().expect("counted")))
                } else {
                    concrete::zero(&l)
                }
            })
            .collect::<R<Vec<_>>>()?;
        bind("r", r, |r| {
            let d = mk(S::App(mk(S::Snd(r.clone()))?, context(&ts)?))?;
            let lb = super::forward::tangent(&entry.body.ty);
            bind("y", mk(S::Fst(r))?, |y| {
                let dy = densify(&entry.body.ty, &lb, y.clone(), d)?;
                mk(S::Pair(y, dy))
            })
        })
    })()
    .map_err(fail)?;
    let mut all = params;
    all.extend(tans);
    Ok(Entry {
        name: format!("{}'", entry.name).into(),
        params: all,
        body,
    })
}

/// The right-nested tuple of terms (a single one bare, `()` for none).
fn tuple(mut ts: Vec<Term>) -> R<Term> {
    let Some(mut out) = ts.pop() else {
        return Ok(Term::lit(Lit::Unit));
    };
    while let Some(t) = ts.pop() {
        out = mk(S::Pair(t, out))?;
    }
    Ok(out)
}

/// The components of a right-nested tuple value of `n` components.
fn untuple(v: &Value, n: usize) -> Vec<Value> {
    let mut out = Vec::with_capacity(n);
    let mut cur = v.clone();
    for _ in 1..n {
        let (a, b) = cur.expect_pair();
        let (a, b) = (a.clone(), b.clone());
        out.push(a);
        cur = b;
    }
    if n > 0 {
        out.push(cur);
    }
    out
}

/// Forward-mode code of an entry, ready to run: the value and the result's dense tangent
/// along one dense tangent per parameter (as [`Jvp::jvp`]).
pub trait Forward {
    /// The value at `args` and its derivative along `tangents` (one per parameter).
    fn jvp(&self, args: &[Value], tangents: &[Value]) -> Result<(Value, Value)>;
}

/// Reverse-mode code of an entry, ready to run: the value and every parameter's dense
/// cotangent for one result cotangent (as [`Vjp::vjp`]).
pub trait Reverse {
    /// The value at `args` and the cotangent of every parameter for `cotangent`.
    fn vjp(&self, args: &[Value], cotangent: &Value) -> Result<(Value, Vec<Value>)>;
}

/// Where the derivative code of [`Hvp`], [`hessian_with`] and [`jacobian_with`] is compiled
/// and run. Each takes an entry as the command line differentiates it (optimised already) and
/// applies forward or reverse CHAD to it (for [`Hvp`], to the concretised gradient).
pub trait Backend {
    /// Forward CHAD of `entry`, compiled.
    fn forward(&self, entry: &Entry) -> Result<Box<dyn Forward>>;
    /// Reverse CHAD of `entry`, compiled.
    fn reverse(&self, entry: &Entry) -> Result<Box<dyn Reverse>>;
    /// Hessian-vector products of `entry` (`Real`-valued, optimised; `wrt` applied) by a
    /// route of the backend's own, if it has one: a [`Forward`] whose `jvp` returns what
    /// forward CHAD of the concretised gradient does, `((y, (g1, ..)), (dy, (h1, ..)))`,
    /// except that `dy`, which [`Hvp`] does not use, may be left out (`()`).
    /// `None` (the default): [`Hvp`] differentiates the concretised gradient by
    /// [`Backend::forward`].
    fn hvp(&self, entry: &Entry) -> Result<Option<Box<dyn Forward>>> {
        let _ = entry;
        Ok(None)
    }
}

/// The execution engine: forward and reverse CHAD simplified ([`Jvp`], [`Vjp`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct Engine;

impl Forward for Jvp {
    fn jvp(&self, args: &[Value], tangents: &[Value]) -> Result<(Value, Value)> {
        Jvp::jvp(self, args, tangents)
    }
}

impl Reverse for Vjp {
    fn vjp(&self, args: &[Value], cotangent: &Value) -> Result<(Value, Vec<Value>)> {
        Vjp::vjp(self, args, cotangent)
    }
}

impl Backend for Engine {
    fn forward(&self, entry: &Entry) -> Result<Box<dyn Forward>> {
        Ok(Box::new(Jvp::new(entry)?.map_body(simplify)))
    }
    fn reverse(&self, entry: &Entry) -> Result<Box<dyn Reverse>> {
        Ok(Box::new(Vjp::new(entry)?.map_body(simplify)))
    }
}

/// Hessian-vector products of a `Real`-valued entry by forward over reverse: forward CHAD of
/// the concretised gradient ([`vjp_entry`] at cotangent 1). Transformed once; run
/// [`Hvp::hvp`] many times.
pub struct Hvp {
    entry: Entry,
    wrt: Vec<bool>,
    gradient: Entry,
    jvp: Box<dyn Forward>,
}

/// The result of [`Hvp::hvp`]: the value, and per parameter the gradient and the
/// Hessian-vector product (`None` for parameters not selected).
#[derive(Debug, Clone)]
pub struct HvpResult {
    /// The value of the function.
    pub value: Value,
    /// The gradient, one per parameter.
    pub gradient: Vec<Option<Value>>,
    /// The Hessian-vector product, one per parameter.
    pub hvp: Vec<Option<Value>>,
}

impl Hvp {
    /// Differentiates `entry` twice, with respect to the parameters `wrt` selects (one flag
    /// per parameter), for the execution engine.
    pub fn new(entry: &Entry, wrt: &[bool]) -> Result<Hvp> {
        Hvp::with_backend(entry, wrt, &Engine)
    }

    /// [`Hvp::new`] with the forward derivative of the gradient compiled by `backend`.
    pub fn with_backend(entry: &Entry, wrt: &[bool], backend: &dyn Backend) -> Result<Hvp> {
        super::check_real_valued(entry)?;
        if wrt.len() != entry.params.len() {
            return Err(Error::new(
                ErrorKind::Argument,
                "one wrt flag per parameter is needed",
            ));
        }
        let w = with_respect_to(entry, wrt);
        let g = vjp_entry(&w)?;
        // Fix the cotangent to 1: `let ct = 1.0 in ...`, the gradient as a function of the
        // parameters alone.
        let mut params = g.params.clone();
        let ct = params.pop().expect("vjp_entry adds the cotangent");
        let body = mk(S::Let(Pat::Var(ct), Term::lit(Lit::Real(1.0)), g.body)).map_err(fail)?;
        let grad = Entry {
            name: g.name,
            params,
            body,
        };
        let jvp = match backend.hvp(&w)? {
            Some(f) => f,
            // Optimised as every command's pipeline does (the concretised gradient applies
            // a lambda to its context and a returned closure to its cotangent: inlined here,
            // so forward CHAD meets no function values).
            None => backend.forward(&crate::optimize::optimize(&grad))?,
        };
        Ok(Hvp {
            entry: entry.clone(),
            wrt: wrt.to_vec(),
            gradient: grad,
            jvp,
        })
    }

    /// The concretised gradient, a source entry of the original's parameters returning
    /// `(value, (g1, (g2, ... gn)))`: what forward CHAD differentiates.
    pub fn gradient(&self) -> &Entry {
        &self.gradient
    }

    /// The value, gradient and Hessian-vector product at `args` along `tangents`, one tangent
    /// per *selected* parameter, in order.
    pub fn hvp(&self, args: &[Value], tangents: &[Value]) -> Result<HvpResult> {
        crate::eval::check_args(&self.entry, args)?;
        let selected = self.wrt.iter().filter(|&&s| s).count();
        if tangents.len() != selected {
            return Err(Error::new(
                ErrorKind::Argument,
                format!(
                    "{} tangent{} given for {selected} selected parameter{}",
                    tangents.len(),
                    if tangents.len() == 1 { "" } else { "s" },
                    if selected == 1 { "" } else { "s" },
                ),
            ));
        }
        let mut given = tangents.iter();
        let full: Vec<Value> = self
            .entry
            .params
            .iter()
            .zip(args)
            .zip(&self.wrt)
            .map(|((p, a), &s)| {
                if s {
                    given.next().expect("counted").clone()
                } else {
                    fd::zero_tangent(&p.ty, a)
                }
            })
            .collect();
        let (v, t) = self.jvp.jvp(args, &full)?;
        let n = args.len();
        let (y, gs) = v.expect_pair();
        let (_, hs) = t.expect_pair();
        let pick = |vs: Vec<Value>| -> Vec<Option<Value>> {
            vs.into_iter()
                .zip(&self.wrt)
                .map(|(v, &s)| s.then_some(v))
                .collect()
        };
        Ok(HvpResult {
            value: y.clone(),
            gradient: pick(untuple(gs, n)),
            hvp: pick(untuple(hs, n)),
        })
    }
}

/// The selected parameters' types and arguments.
fn selected<'a>(entry: &'a Entry, wrt: &'a [bool], args: &'a [Value]) -> (Vec<Type>, Vec<Value>) {
    entry
        .params
        .iter()
        .zip(args)
        .zip(wrt)
        .filter(|(_, s)| **s)
        .map(|((p, a), _)| (p.ty.clone(), a.clone()))
        .unzip()
}

/// The flat leaves of the selected components of a per-parameter result.
fn flat(vs: &[Option<Value>]) -> Vec<f64> {
    vs.iter().flatten().flat_map(fd::leaves).collect()
}

/// Value, flat gradient and Hessian (row `i` is the Hessian-vector product with the `i`-th
/// basis vector) of a `Real`-valued entry at `args`, with respect to the selected parameters.
pub fn hessian(
    entry: &Entry,
    wrt: &[bool],
    args: &[Value],
) -> Result<(f64, Vec<f64>, Vec<Vec<f64>>)> {
    hessian_with(entry, wrt, args, &Engine)
}

/// [`hessian`] with the Hessian-vector products compiled by `backend`.
pub fn hessian_with(
    entry: &Entry,
    wrt: &[bool],
    args: &[Value],
    backend: &dyn Backend,
) -> Result<(f64, Vec<f64>, Vec<Vec<f64>>)> {
    runs_at(entry, args)?;
    let h = Hvp::with_backend(entry, wrt, backend)?;
    let (types, sel) = selected(entry, wrt, args);
    let mut value = None;
    let mut rows = Vec::new();
    let mut gradient = Vec::new();
    let basis = fd::basis(&types, &sel);
    if basis.is_empty() {
        let r = h.hvp(
            args,
            &sel.iter()
                .zip(&types)
                .map(|(a, t)| fd::zero_tangent(t, a))
                .collect::<Vec<_>>(),
        )?;
        return Ok((r.value.expect_real(), vec![], vec![]));
    }
    for b in basis {
        let r = h.hvp(args, &b)?;
        value = Some(r.value.expect_real());
        gradient = flat(&r.gradient);
        rows.push(flat(&r.hvp));
    }
    Ok((value.expect("a basis vector"), gradient, rows))
}

/// How [`jacobian`] computes: one forward derivative per input component, or one reverse
/// derivative per output component.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Forward mode (columns).
    Forward,
    /// Reverse mode (rows).
    Reverse,
}

/// Checks, before any second-order code is built, that `entry` is `Real`-valued, that `args`
/// fit its parameters and that it runs at them: a program that fails where it is evaluated
/// fails at once with the evaluator's error. (Building a Hessian-vector product's code costs
/// far more than the primal; the fuzzer found programs that spent 50 s compiling it, then
/// failed on an index out of range.)
pub fn runs_at(entry: &Entry, args: &[Value]) -> Result<()> {
    super::check_real_valued(entry)?;
    crate::eval::check_args(entry, args)?;
    crate::eval::eval_entry(entry, args).map(drop)
}

/// Value and Jacobian of a first-order entry at `args`, with respect to the selected
/// parameters: rows are the flattened result, columns the flattened selected arguments. With
/// no `mode`, forward when there are no more inputs than outputs, else reverse.
pub fn jacobian(
    entry: &Entry,
    wrt: &[bool],
    args: &[Value],
    mode: Option<Mode>,
) -> Result<(Value, Vec<Vec<f64>>)> {
    jacobian_with(entry, wrt, args, mode, &Engine)
}

/// [`jacobian`] with the derivative code compiled by `backend`.
pub fn jacobian_with(
    entry: &Entry,
    wrt: &[bool],
    args: &[Value],
    mode: Option<Mode>,
    backend: &dyn Backend,
) -> Result<(Value, Vec<Vec<f64>>)> {
    crate::eval::check_args(entry, args)?;
    // Rows and columns are the `Real` components of the result and the parameters: a
    // function has none to list (found by the command-line fuzzer, `chad::internals::fuzz`).
    if !entry.body.ty.is_first_order() || entry.params.iter().any(|p| !p.ty.is_first_order()) {
        return Err(Error::new(
            ErrorKind::Unsupported,
            format!(
                "a Jacobian needs first-order parameters and result; `{}` has type {}",
                entry.name,
                Type::curried(&entry.param_types(), entry.body.ty.clone())
            ),
        ));
    }
    let w = with_respect_to(entry, wrt);
    let (types, sel) = selected(entry, wrt, args);
    let y = crate::eval::eval_entry(entry, args)?;
    let out_ty = &entry.body.ty;
    let n_in: usize = sel.iter().map(|a| fd::leaves(a).len()).sum();
    let n_out = fd::leaves(&y).len();
    let mode = mode.unwrap_or(if n_in <= n_out {
        Mode::Forward
    } else {
        Mode::Reverse
    });
    let zeros: Vec<Value> = entry
        .params
        .iter()
        .zip(args)
        .map(|(p, a)| fd::zero_tangent(&p.ty, a))
        .collect();
    let mut rows = vec![vec![0.0; n_in]; n_out];
    match mode {
        Mode::Forward => {
            let jvp = backend.forward(&w)?;
            for (j, b) in fd::basis(&types, &sel).into_iter().enumerate() {
                let mut given = b.into_iter();
                let full: Vec<Value> = zeros
                    .iter()
                    .zip(wrt)
                    .map(|(z, &s)| {
                        if s {
                            given.next().expect("one per selected")
                        } else {
                            z.clone()
                        }
                    })
                    .collect();
                let (_, dy) = jvp.jvp(args, &full)?;
                for (i, x) in fd::leaves(&dy).into_iter().enumerate() {
                    rows[i][j] = x;
                }
            }
        }
        Mode::Reverse => {
            let vjp = backend.reverse(&w)?;
            for (i, ct) in fd::basis(std::slice::from_ref(out_ty), std::slice::from_ref(&y))
                .into_iter()
                .enumerate()
            {
                let (_, gs) = vjp.vjp(args, &ct[0])?;
                let picked: Vec<Option<Value>> = gs
                    .into_iter()
                    .zip(wrt)
                    .map(|(g, &s)| s.then_some(g))
                    .collect();
                rows[i] = flat(&picked);
            }
        }
    }
    Ok((y, rows))
}

/// Loads a program with `grad`, `jvp` and `vjp` inside it elaborated ([`Elaborator`]): what
/// the command line uses.
pub fn load(text: &str, reg: &crate::prim::Registry) -> Result<crate::source::term::Program> {
    crate::source::load_with(text, reg, &Elaborator)
}

/// Elaborates `grad f x`, `jvp f x dx` and `vjp f x ct` inside programs (for the checker,
/// [`crate::source::check::Differentiate`]): the function, as an entry of its captured
/// variables and its argument, is differentiated ([`vjp_entry`], [`jvp_entry`]) and the
/// concretised derivative applied to the actual arguments. Every parameter of the entry is an
/// input of the derivative code, so enclosing derivatives see how the inner result depends on
/// the captured variables (no `stopGradient`, no perturbation confusion); only the argument's
/// (co)tangent is returned.
pub struct Elaborator;

impl crate::source::check::Differentiate for Elaborator {
    fn elaborate(
        &self,
        form: crate::source::check::Form,
        entry: &Entry,
        args: &[Term],
        extra: Option<Term>,
    ) -> Result<Term> {
        use crate::source::check::Form;
        let n = entry.params.len();
        let reverse = form != Form::Jvp;
        // A function input given as `(f, (rev, fwd))`: its primal under the transformation.
        let mut vals = Vec::with_capacity(n + 1);
        for (p, a) in entry.params.iter().zip(args) {
            vals.push(match p.ty.as_fun() {
                Some((x, y)) => function_input(reverse, x, y, a.clone()).map_err(fail)?,
                None => a.clone(),
            });
        }
        {
            match form {
                Form::Grad | Form::Vjp => {
                    let d = vjp_entry(entry)?;
                    let ct = match extra {
                        Some(ct) => ct,
                        None => Term::lit(Lit::Real(1.0)),
                    };
                    vals.push(ct);
                    let body = bind("r", d.body.clone(), |r| {
                        let mut g = mk(S::Snd(r.clone()))?;
                        for _ in 1..n {
                            g = mk(S::Snd(g))?;
                        }
                        if form == Form::Grad {
                            Ok(g)
                        } else {
                            mk(S::Pair(mk(S::Fst(r))?, g))
                        }
                    })
                    .map_err(fail)?;
                    bind_params(&d.params, vals, body)
                }
                Form::Jvp => {
                    let d = jvp_entry(entry)?;
                    // Zero tangents for the captured first-order variables, the given one for
                    // the argument (a function input has none: [`jvp_entry`]).
                    for (p, a) in entry.params.iter().zip(args).take(n - 1) {
                        if p.ty.is_first_order() {
                            vals.push(zero_like(&p.ty, a.clone()).map_err(fail)?);
                        }
                    }
                    vals.push(extra.ok_or_else(|| fail("jvp needs a tangent".into()))?);
                    bind_params(&d.params, vals, d.body.clone())
                }
            }
        }
    }
}

/// The primal of a function input `f : a -> b` under reverse (`R1(a -> b) = a -> b × (R2 b ⊸
/// R2 a)`) or forward CHAD (`F1(a -> b) = a -> b × (F2 a ⊸ F2 b)`), concretised, from `g =
/// (f, (rev, fwd))`: `f` and the derivatives its value carries (`rev : a -> b -> (b, a)`,
/// `fwd : a -> a -> (b, b)` on dense (co)tangents, the one not carried `()`):
///
/// ```text
/// reverse:  \x -> let y = f x in (y, \c -> undense (snd (rev x (densify y c))))
/// forward:  \x -> (f x, \t -> undense (snd (fwd x (densify x t))))
/// ```
///
/// so the derivative code of a function that calls `f` calls `f`'s own derivative where CHAD
/// applies the linear part of `f`'s primal (`source::check::carry`).
fn function_input(reverse: bool, a: &Type, b: &Type, g: Term) -> R<Term> {
    bind("g", g, |g| {
        let f = mk(S::Fst(g.clone()))?;
        let ds = mk(S::Snd(g))?;
        let d = mk(if reverse { S::Fst(ds) } else { S::Snd(ds) })?;
        if d.ty == Type::Unit {
            return Err(format!(
                "a function of type `{a} -> {b}` was differentiated inside another one, but \
                 its value carries no {} derivative",
                if reverse { "reverse" } else { "forward" }
            ));
        }
        bind("f", f, |f| {
            bind("d", d, |d| {
                concrete::lam("x", a.clone(), |x| {
                    let y = mk(S::App(f, x.clone()))?;
                    bind("y", y, |y| {
                        let (l_in, l_out) = if reverse {
                            (super::reverse::cotangent(b), super::reverse::cotangent(a))
                        } else {
                            (super::forward::tangent(a), super::forward::tangent(b))
                        };
                        let linear = concrete::lam("c", concrete::ty(&l_in)?, |c| {
                            let dense = if reverse {
                                densify(b, &l_in, y.clone(), c)?
                            } else {
                                densify(a, &l_in, x.clone(), c)?
                            };
                            let r = mk(S::App(mk(S::App(d, x))?, dense))?;
                            undense(if reverse { a } else { b }, &l_out, mk(S::Snd(r))?)
                        })?;
                        mk(S::Pair(y, linear))
                    })
                })
            })
        })
    })
}

/// `let p1 = v1 in ... let pn = vn in body`.
fn bind_params(params: &[Var], vals: Vec<Term>, body: Term) -> Result<Term> {
    let mut out = body;
    for (p, v) in params.iter().zip(vals).rev() {
        out = mk(S::Let(Pat::Var(p.clone()), v, out)).map_err(fail)?;
    }
    Ok(out)
}

/// The zero tangent (of type `ty.tangent()`) of the value of `x : ty`.
fn zero_like(ty: &Type, x: Term) -> R<Term> {
    crate::deep::deep(|| match ty {
        Type::Real => Ok(Term::lit(Lit::Real(0.0))),
        Type::Int | Type::Bool | Type::Unit => Ok(Term::lit(Lit::Unit)),
        Type::Prod(p) => bind("x", x, |x| {
            mk(S::Pair(
                zero_like(&p.0, mk(S::Fst(x.clone()))?)?,
                zero_like(&p.1, mk(S::Snd(x))?)?,
            ))
        }),
        Type::Sum(p) => {
            let (ta, tb) = (tangent(&p.0)?, tangent(&p.1)?);
            let u = Var::fresh("u", p.0.clone());
            let v = Var::fresh("v", p.1.clone());
            let left = mk(S::Inl(zero_like(&p.0, Term::var(&u))?, tb))?;
            let right = mk(S::Inr(ta, zero_like(&p.1, Term::var(&v))?))?;
            mk(S::Case(x, Pat::Var(u), left, Pat::Var(v), right))
        }
        Type::Array(a) => {
            let u = Var::fresh("u", (**a).clone());
            let body = zero_like(a, Term::var(&u))?;
            mk(S::Map(mk(S::Lam(u, body))?, x))
        }
        Type::Fun(_) => Err(format!("`{ty}` has no tangents")),
    })
}
