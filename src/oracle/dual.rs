//! A forward-mode dual-number evaluator of the source language: an oracle for forward CHAD.
//!
//! The evaluator mirrors the direct evaluator ([`crate::eval`]) form by form, on [`Dual`] values:
//! every `Real` is a pair (primal, tangent), `Int` and `Bool` are plain (discrete values have no
//! tangent), and closures capture environments of dual values, so a function passed, returned,
//! stored in a tuple or mapped over an array carries the derivative of what it captured. The
//! primal part is computed exactly as the direct evaluator computes it (primitives run their
//! registered evaluation on the primal arguments, and evaluation order is the same), so the
//! primal result, and any runtime error with its message and location, are identical to
//! [`crate::eval::eval_entry`]'s.
//!
//! Nothing here comes from CHAD: no combinators, no target terms, no linear maps. The tangents
//! come from the hand-derived table below, one rule per builtin primitive, and the chain rule
//! is simply the evaluation order.
//!
//! ## The derivative table
//!
//! For arguments `x, y` with tangents `dx, dy` (and arrays `xs, ys` with tangents `dxs, dys`):
//!
//! | primitive | tangent of the result |
//! | --- | --- |
//! | `sin x` | `cos x · dx` |
//! | `cos x` | `−sin x · dx` |
//! | `tan x` | `dx / cos² x` |
//! | `exp x` | `exp x · dx` |
//! | `log x` | `dx / x` |
//! | `sqrt x` | `dx / (2 sqrt x)` |
//! | `tanh x` | `(1 − tanh² x) · dx` |
//! | `sigmoid x` | `s (1 − s) · dx` with `s = sigmoid x` |
//! | `abs x` | `dx` if `x ≥ 0`, else `−dx` (so `+dx` at 0, and `−dx` at NaN) |
//! | `pow x y` | `y · x^(y−1) · dx + x^y · ln x · dy`, see below |
//! | `max x y` | `dx` if `x ≥ y` or `y` is NaN (the branch `max` returns), else `dy` |
//! | `min x y` | `dx` if `x ≤ y` or `y` is NaN (the branch `min` returns), else `dy` |
//! | `x + y`, `x − y`, `−x` | `dx + dy`, `dx − dy`, `−dx` |
//! | `x * y` | `y · dx + x · dy` |
//! | `x / y` | `dx / y − (x / y) / y · dy` |
//! | `sum xs` | `Σ dxs_i` |
//! | `dot xs ys` | `Σ (ys_i · dxs_i + xs_i · dys_i)` |
//! | `toReal n` | `0` |
//! | `floor`, `not`, `decide`, comparisons, `i…` integer operations, `beq`, `bne` | discrete result: no tangent |
//!
//! Conventions at points where the derivative does not exist:
//!
//! * **Ties** of `max`/`min` follow LANGUAGE.md: the first argument is returned and the
//!   derivative is the first argument's tangent (a one-sided derivative).
//! * **`abs` at 0** has derivative `+1` (the sign is taken as `x ≥ 0 → 1`, the right-hand
//!   derivative).
//! * **`pow x y`**: the `dx` coefficient is `y · x^(y−1)`, except that it is `0` when `y = 0`
//!   (`x^0` is the constant 1, also at `x = 0` where `0 · 0^(−1)` would be NaN). The `dy`
//!   coefficient is `x^y · ln x` for `x > 0` and `0` for `x ≤ 0`: at `x = 0` (and `y > 0`) the
//!   function is 0 for every nearby `y`, so 0 is the true derivative; for `x < 0`, `x^y` is only
//!   defined at integer `y`, and we take the derivative along `y` to be 0.
//! * **Strong zero**: a term `c · d` whose input tangent `d` is exactly zero contributes exactly
//!   zero, even when the coefficient `c` is infinite or NaN. So `sqrt 0` or `log 0` along a
//!   direction that does not move their argument have tangent 0, not NaN; along one that does,
//!   the tangent is infinite, as the derivative is. (Plain IEEE arithmetic would give `inf · 0 =
//!   NaN`.)
//! * **Discrete operations** (`floor`, comparisons, `if`, `case`) contribute no derivative: the
//!   primal chooses the branch and the tangent follows it.
//!
//! A primitive not in the table (one a user registered) is accepted only if no derivative is
//! needed, i.e. if its parameters or its result contain no `Real`; otherwise [`jvp`] fails with
//! an [`ErrorKind::Unsupported`] error naming it. A primitive is recognised as a builtin only if
//! it is the builtin registry's own handle, so a user's same-named replacement is not mistaken
//! for it.

use crate::deep::{Deep, deep};
use crate::error::{Error, ErrorKind, Result, Span};
use crate::prim::{Prim, Registry};
use crate::source::term::{Entry, Pat, Term, TermKind, Var, VarId};
use crate::types::Type;
use crate::value::{self, Value};
use std::fmt;
use std::rc::Rc;

/// A value of the dual-number semantics: reals carry a tangent.
#[derive(Clone, Debug)]
pub enum Dual {
    /// A real number: (primal, tangent).
    Real(f64, f64),
    /// An integer (discrete: no tangent).
    Int(i64),
    /// A boolean (discrete: no tangent).
    Bool(bool),
    /// `()`.
    Unit,
    /// A pair.
    Pair(Rc<Deep<(Dual, Dual)>>),
    /// A left injection.
    Inl(Rc<Deep<Dual>>),
    /// A right injection.
    Inr(Rc<Deep<Dual>>),
    /// An array (of any element type, including `Real`).
    Array(Rc<Vec<Dual>>),
    /// A function value: a closure over a dual environment.
    Fun(Rc<Deep<DualClosure>>),
}

/// A closure of the dual-number evaluator: a lambda and the dual environment it captured.
pub struct DualClosure {
    param: Var,
    body: Term,
    env: Env,
    /// For `fix f` (a recursive function): the variable the body calls itself by (bound to
    /// this closure at each call) and the position of the definition.
    fix: Option<(Var, Span)>,
}

impl fmt::Debug for DualClosure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<function>")
    }
}

/// An environment of dual values.
pub type Env = im::HashMap<VarId, Dual>;

impl Dual {
    /// The pair `(a, b)`.
    pub fn pair(a: Dual, b: Dual) -> Dual {
        Dual::Pair(Rc::new(Deep::new((a, b))))
    }

    /// `inl d`.
    pub fn inl(d: Dual) -> Dual {
        Dual::Inl(Rc::new(Deep::new(d)))
    }

    /// `inr d`.
    pub fn inr(d: Dual) -> Dual {
        Dual::Inr(Rc::new(Deep::new(d)))
    }

    /// A first-order value with zero tangent. Panics on a closure (first-order values only).
    pub fn constant(v: &Value) -> Dual {
        deep(|| match v {
            Value::Real(x) => Dual::Real(*x, 0.0),
            Value::Int(i) => Dual::Int(*i),
            Value::Bool(b) => Dual::Bool(*b),
            Value::Unit => Dual::Unit,
            Value::Pair(p) => Dual::pair(Dual::constant(&p.0), Dual::constant(&p.1)),
            Value::Inl(x) => Dual::inl(Dual::constant(x)),
            Value::Inr(x) => Dual::inr(Dual::constant(x)),
            Value::RealArray(xs) => {
                Dual::Array(Rc::new(xs.iter().map(|&x| Dual::Real(x, 0.0)).collect()))
            }
            Value::Array(xs) => Dual::Array(Rc::new(xs.iter().map(Dual::constant).collect())),
            Value::Closure(_) | Value::Lin(_) | Value::LinFun(_) => {
                panic!("internal error: Dual::constant of a non-first-order value {v}")
            }
        })
    }

    /// The dual value of `v : ty` moving along the tangent `t` (of type `ty.tangent()` and of
    /// `v`'s shape, see [`super::check_tangent`]). `ty` must be first-order.
    pub fn lift(ty: &Type, v: &Value, t: &Value) -> Result<Dual> {
        if !v.has_type(ty) {
            return Err(Error::new(
                ErrorKind::Argument,
                format!("`{v}` does not have type {ty}"),
            ));
        }
        super::check_tangent(ty, v, t)?;
        Ok(lift_checked(ty, v, t))
    }

    /// The primal part, as a value of the first-order type `ty`. Panics if the dual value
    /// does not have type `ty` or contains a closure.
    pub fn primal(&self, ty: &Type) -> Value {
        deep(|| match (self, ty) {
            (Dual::Real(x, _), Type::Real) => Value::Real(*x),
            (Dual::Int(i), Type::Int) => Value::Int(*i),
            (Dual::Bool(b), Type::Bool) => Value::Bool(*b),
            (Dual::Unit, Type::Unit) => Value::Unit,
            (Dual::Pair(p), Type::Prod(t)) => Value::pair(p.0.primal(&t.0), p.1.primal(&t.1)),
            (Dual::Inl(d), Type::Sum(t)) => Value::inl(d.primal(&t.0)),
            (Dual::Inr(d), Type::Sum(t)) => Value::inr(d.primal(&t.1)),
            (Dual::Array(xs), Type::Array(e)) => {
                Value::array(e, xs.iter().map(|x| x.primal(e)).collect())
            }
            _ => panic!("internal error: dual value {self:?} read at type {ty}"),
        })
    }

    /// The tangent part, as a value of type `ty.tangent()` with the primal's shape. Panics if
    /// the dual value does not have the first-order type `ty`.
    pub fn tangent(&self, ty: &Type) -> Value {
        deep(|| match (self, ty) {
            (Dual::Real(_, dx), Type::Real) => Value::Real(*dx),
            (Dual::Int(_), Type::Int) | (Dual::Bool(_), Type::Bool) | (Dual::Unit, Type::Unit) => {
                Value::Unit
            }
            (Dual::Pair(p), Type::Prod(t)) => Value::pair(p.0.tangent(&t.0), p.1.tangent(&t.1)),
            (Dual::Inl(d), Type::Sum(t)) => Value::inl(d.tangent(&t.0)),
            (Dual::Inr(d), Type::Sum(t)) => Value::inr(d.tangent(&t.1)),
            (Dual::Array(xs), Type::Array(e)) => {
                let de = e
                    .tangent()
                    .unwrap_or_else(|| panic!("internal error: tangent of type {ty}"));
                Value::array(&de, xs.iter().map(|x| x.tangent(e)).collect())
            }
            _ => panic!("internal error: dual value {self:?} read at type {ty}"),
        })
    }

    /// Applies a function value. Panics if the value is not a function (a typing invariant).
    pub fn apply(&self, arg: Dual) -> Result<Dual> {
        match self {
            Dual::Fun(c) => match &c.fix {
                None => {
                    let env = c.env.update(c.param.id, arg);
                    eval(&c.body, &env)
                }
                Some((g, at)) => crate::steps::recursive_call(*at, || {
                    let env = c
                        .env
                        .update(g.id, Dual::Fun(c.clone()))
                        .update(c.param.id, arg);
                    eval(&c.body, &env)
                }),
            },
            other => panic!("internal error: applying {other:?}"),
        }
    }

    fn expect_pair(&self) -> (&Dual, &Dual) {
        match self {
            Dual::Pair(p) => (&p.0, &p.1),
            other => panic!("internal error: expected a pair, found {other:?}"),
        }
    }

    fn expect_int(&self) -> i64 {
        match self {
            Dual::Int(i) => *i,
            other => panic!("internal error: expected an Int, found {other:?}"),
        }
    }

    fn expect_bool(&self) -> bool {
        match self {
            Dual::Bool(b) => *b,
            other => panic!("internal error: expected a Bool, found {other:?}"),
        }
    }

    fn expect_array(&self) -> &Rc<Vec<Dual>> {
        match self {
            Dual::Array(xs) => xs,
            other => panic!("internal error: expected an array, found {other:?}"),
        }
    }

    /// (primal, tangent) of a real.
    fn re(&self) -> (f64, f64) {
        match self {
            Dual::Real(x, dx) => (*x, *dx),
            other => panic!("internal error: expected a Real, found {other:?}"),
        }
    }
}

/// `lift` after `check_tangent` succeeded.
fn lift_checked(ty: &Type, v: &Value, t: &Value) -> Dual {
    deep(|| match (ty, v, t) {
        (Type::Real, _, _) => Dual::Real(v.expect_real(), t.expect_real()),
        (Type::Int, _, _) => Dual::Int(v.expect_int()),
        (Type::Bool, _, _) => Dual::Bool(v.expect_bool()),
        (Type::Unit, _, _) => Dual::Unit,
        (Type::Prod(p), _, _) => {
            let ((a, b), (da, db)) = (v.expect_pair(), t.expect_pair());
            Dual::pair(lift_checked(&p.0, a, da), lift_checked(&p.1, b, db))
        }
        (Type::Sum(p), Value::Inl(a), Value::Inl(da)) => Dual::inl(lift_checked(&p.0, a, da)),
        (Type::Sum(p), Value::Inr(a), Value::Inr(da)) => Dual::inr(lift_checked(&p.1, a, da)),
        (Type::Array(e), _, _) => Dual::Array(Rc::new(
            v.array_items()
                .iter()
                .zip(t.array_items().iter())
                .map(|(x, dx)| lift_checked(e, x, dx))
                .collect(),
        )),
        _ => panic!("internal error: lifting unchecked tangent {t} of {v} : {ty}"),
    })
}

/// The directional derivative of a definition: its value at `args` and the derivative along
/// `tangents` (one per argument, each of type `param_ty.tangent()` with the argument's shape).
/// The result's tangent has type `result_ty.tangent()` and the result's shape.
///
/// Errors: the argument errors of [`crate::eval::check_args`] and [`super::check_jvp_inputs`]
/// (wrong tangents), [`ErrorKind::Unsupported`] for higher-order parameters or results and for a
/// primitive that needs a derivative this module does not have, and exactly the runtime errors
/// the direct evaluator reports (same message, same span).
pub fn jvp(entry: &Entry, args: &[Value], tangents: &[Value]) -> Result<(Value, Value)> {
    super::check_jvp_inputs(entry, args, tangents)?;
    check_prims(&entry.body)?;
    let env: Env = entry
        .params
        .iter()
        .zip(args)
        .zip(tangents)
        .map(|((p, a), t)| (p.id, lift_checked(&p.ty, a, t)))
        .collect();
    let out = eval(&entry.body, &env)?;
    let ty = &entry.body.ty;
    Ok((out.primal(ty), out.tangent(ty)))
}

/// [`jvp`] for an open term: each input binds a free variable of `t` to a value and a tangent.
/// Every free variable of `t` must be bound (as for [`crate::eval::eval`]); the inputs and the
/// result must be first-order.
pub fn jvp_term(t: &Term, inputs: &[(Var, Value, Value)]) -> Result<(Value, Value)> {
    if !t.ty.is_first_order() {
        return Err(Error::new(
            ErrorKind::Unsupported,
            format!(
                "the term has the higher-order type {}; derivatives of first-order results only",
                t.ty
            ),
        ));
    }
    let mut env = Env::new();
    for (x, v, dv) in inputs {
        if !x.ty.is_first_order() {
            return Err(Error::new(
                ErrorKind::Unsupported,
                format!("input `{}` has the higher-order type {}", x.name, x.ty),
            ));
        }
        let d = Dual::lift(&x.ty, v, dv).map_err(|e| e.prefixed(&format!("`{}`: ", x.name)))?;
        env.insert(x.id, d);
    }
    check_prims(t)?;
    let out = eval(t, &env)?;
    Ok((out.primal(&t.ty), out.tangent(&t.ty)))
}

/// Checks that every primitive in `t` has a derivative rule (or needs none); the error is
/// [`ErrorKind::Unsupported`] at the first offending primitive application.
pub fn check_prims(t: &Term) -> Result<()> {
    let mut stack = vec![t];
    while let Some(t) = stack.pop() {
        if let TermKind::Prim(op, _) = &t.kind
            && rule(op).is_none()
        {
            return Err(no_derivative(op).with_span(t.span));
        }
        stack.extend(t.children());
    }
    Ok(())
}

/// Evaluates a term in a dual environment binding its free variables.
pub fn eval(t: &Term, env: &Env) -> Result<Dual> {
    deep(|| {
        // Chains of lets are walked in a loop rather than by recursion.
        let mut env = env.clone();
        let mut t = t;
        while let TermKind::Let(p, e, b) = &t.kind {
            let v = eval(e, &env)?;
            bind(p, v, &mut env);
            t = b;
        }
        eval_node(t, &env)
    })
}

fn bind(pat: &Pat, v: Dual, env: &mut Env) {
    deep(|| match pat {
        Pat::Var(x) => {
            env.insert(x.id, v);
        }
        Pat::Wild(_) => {}
        Pat::Pair(a, b) => {
            let (x, y) = v.expect_pair();
            let (x, y) = (x.clone(), y.clone());
            bind(a, x, env);
            bind(b, y, env);
        }
    })
}

fn eval_node(t: &Term, env: &Env) -> Result<Dual> {
    use TermKind as K;
    let at = |e: Error| e.or_span(t.span);
    Ok(match &t.kind {
        K::Var(x) => env
            .get(&x.id)
            .cloned()
            .unwrap_or_else(|| panic!("internal error: unbound variable {x:?}")),
        K::Lit(l) => Dual::constant(&l.value()),
        K::Lam(x, b) => Dual::Fun(Rc::new(Deep::new(DualClosure {
            param: x.clone(),
            body: b.clone(),
            env: env.clone(),
            fix: None,
        }))),
        K::App(f, a) => {
            let f = eval(f, env)?;
            let a = eval(a, env)?;
            f.apply(a)?
        }
        K::Let(..) => eval(t, env)?,
        K::Pair(a, b) => Dual::pair(eval(a, env)?, eval(b, env)?),
        K::Fst(e) => eval(e, env)?.expect_pair().0.clone(),
        K::Snd(e) => eval(e, env)?.expect_pair().1.clone(),
        K::If(c, a, b) => {
            if eval(c, env)?.expect_bool() {
                eval(a, env)?
            } else {
                eval(b, env)?
            }
        }
        K::Inl(e, _) => Dual::inl(eval(e, env)?),
        K::Inr(_, e) => Dual::inr(eval(e, env)?),
        K::Case(e, p, a, q, b) => {
            let (pat, v, body) = match eval(e, env)? {
                Dual::Inl(v) => (p, (**v).clone(), a),
                Dual::Inr(v) => (q, (**v).clone(), b),
                other => panic!("internal error: case on {other:?}"),
            };
            let mut env = env.clone();
            bind(pat, v, &mut env);
            eval(body, &env)?
        }
        K::Prim(op, args) => {
            let ds = args
                .iter()
                .map(|a| eval(a, env))
                .collect::<Result<Vec<_>>>()?;
            apply_prim(op, &ds).map_err(at)?
        }
        K::Array(_, items) => Dual::Array(Rc::new(
            items
                .iter()
                .map(|a| eval(a, env))
                .collect::<Result<Vec<_>>>()?,
        )),
        K::Map(f, xs) => {
            let f = eval(f, env)?;
            let xs = eval(xs, env)?;
            let out = xs
                .expect_array()
                .iter()
                .map(|x| f.apply(x.clone()))
                .collect::<Result<Vec<_>>>()?;
            Dual::Array(Rc::new(out))
        }
        K::Map2(f, xs, ys) => {
            let f = eval(f, env)?;
            let xs = eval(xs, env)?;
            let ys = eval(ys, env)?;
            let (xs, ys) = (xs.expect_array(), ys.expect_array());
            value::check_same_len("map2", xs.len(), ys.len()).map_err(at)?;
            let out = xs
                .iter()
                .zip(ys.iter())
                .map(|(x, y)| f.apply(x.clone())?.apply(y.clone()))
                .collect::<Result<Vec<_>>>()?;
            Dual::Array(Rc::new(out))
        }
        K::Build(n, f) => {
            let n = eval(n, env)?.expect_int();
            let f = eval(f, env)?;
            let n = value::check_len("build", n).map_err(at)?;
            let out = (0..n as i64)
                .map(|i| f.apply(Dual::Int(i)))
                .collect::<Result<Vec<_>>>()?;
            Dual::Array(Rc::new(out))
        }
        K::Index(xs, i) => {
            let xs = eval(xs, env)?;
            let i = eval(i, env)?.expect_int();
            let xs = xs.expect_array();
            let i = value::check_index(i, xs.len()).map_err(at)?;
            xs[i].clone()
        }
        K::Length(xs) => Dual::Int(eval(xs, env)?.expect_array().len() as i64),
        K::Replicate(n, x) => {
            let n = eval(n, env)?.expect_int();
            let x = eval(x, env)?;
            let n = value::check_len("replicate", n).map_err(at)?;
            Dual::Array(Rc::new(vec![x; n]))
        }
        K::Loop(f, x, tape) => {
            // The iterations actually run, each on dual numbers: primal and tangent together;
            // with a tape, each step's record is kept, in order.
            let f = eval(f, env)?;
            let mut state = eval(x, env)?;
            let mut records = Vec::new();
            loop {
                let mut next = f.apply(state)?;
                if *tape {
                    let Dual::Pair(p) = next else {
                        panic!("internal error: a taped loop step returned {next:?}")
                    };
                    records.push(p.1.clone());
                    next = p.0.clone();
                }
                match next {
                    Dual::Inl(v) => {
                        crate::steps::step(t.span)?;
                        state = (*v).clone();
                    }
                    Dual::Inr(v) if *tape => {
                        break Dual::pair((*v).clone(), Dual::Array(Rc::new(records)));
                    }
                    Dual::Inr(v) => break (*v).clone(),
                    other => panic!("internal error: a loop step returned {other:?}"),
                }
            }
        }
        K::Fix(f) => {
            let (g, x, body) = crate::source::term::fix_parts(f);
            Dual::Fun(Rc::new(Deep::new(DualClosure {
                param: x,
                body,
                env: env.clone(),
                fix: Some((g, t.span)),
            })))
        }
    })
}

/// How the tangent of a primitive's result is computed.
#[derive(Clone, Copy)]
enum Rule {
    /// No tangent flows: the parameters or the result have no `Real` in them. The result is
    /// a constant.
    Constant,
    /// A `Real` result whose tangent is this function of the (dual) arguments.
    Real(fn(&[Dual]) -> f64),
}

thread_local! {
    static BUILTINS: Registry = Registry::builtin();
}

/// The rule for a primitive: the table for builtins; `Constant` for any primitive whose
/// parameters or result contain no `Real`; `None` otherwise.
fn rule(op: &Prim) -> Option<Rule> {
    let is_builtin = BUILTINS.with(|r| r.get(op.name()).is_some_and(|b| Rc::ptr_eq(b, op)));
    if is_builtin && let Some(r) = builtin_rule(op.name()) {
        return Some(r);
    }
    if !op.params().iter().any(has_real) || !has_real(op.result()) {
        return Some(Rule::Constant);
    }
    None
}

fn has_real(ty: &Type) -> bool {
    deep(|| match ty {
        Type::Real => true,
        Type::Int | Type::Bool | Type::Unit => false,
        Type::Prod(p) | Type::Sum(p) | Type::Fun(p) => has_real(&p.0) || has_real(&p.1),
        Type::Array(e) => has_real(e),
    })
}

fn no_derivative(op: &Prim) -> Error {
    Error::new(
        ErrorKind::Unsupported,
        format!(
            "dual-number oracle: no derivative for primitive `{}`",
            op.name()
        ),
    )
}

/// `c · d` with a strong zero: exactly 0 when the tangent `d` is 0, whatever `c` is.
fn lin(c: f64, d: f64) -> f64 {
    if d == 0.0 { 0.0 } else { c * d }
}

/// The hand-derived table (see the module documentation).
fn builtin_rule(name: &str) -> Option<Rule> {
    use Rule::{Constant, Real};
    fn x1(a: &[Dual]) -> (f64, f64) {
        a[0].re()
    }
    fn x2(a: &[Dual]) -> ((f64, f64), (f64, f64)) {
        (a[0].re(), a[1].re())
    }
    Some(match name {
        "sin" => Real(|a| {
            let (x, dx) = x1(a);
            lin(x.cos(), dx)
        }),
        "cos" => Real(|a| {
            let (x, dx) = x1(a);
            lin(-x.sin(), dx)
        }),
        "tan" => Real(|a| {
            let (x, dx) = x1(a);
            let c = x.cos();
            lin(1.0 / (c * c), dx)
        }),
        "exp" => Real(|a| {
            let (x, dx) = x1(a);
            lin(x.exp(), dx)
        }),
        "log" => Real(|a| {
            let (x, dx) = x1(a);
            lin(1.0 / x, dx)
        }),
        "sqrt" => Real(|a| {
            let (x, dx) = x1(a);
            lin(0.5 / x.sqrt(), dx)
        }),
        "tanh" => Real(|a| {
            let (x, dx) = x1(a);
            let t = x.tanh();
            lin(1.0 - t * t, dx)
        }),
        "sigmoid" => Real(|a| {
            let (x, dx) = x1(a);
            let s = crate::prim::sigmoid(x);
            lin(s * (1.0 - s), dx)
        }),
        "abs" => Real(|a| {
            let (x, dx) = x1(a);
            if x >= 0.0 { dx } else { -dx }
        }),
        "pow" => Real(|a| {
            let ((x, dx), (y, dy)) = x2(a);
            let cx = if y == 0.0 { 0.0 } else { y * x.powf(y - 1.0) };
            let cy = if x > 0.0 { x.powf(y) * x.ln() } else { 0.0 };
            lin(cx, dx) + lin(cy, dy)
        }),
        "max" => Real(|a| {
            let ((x, dx), (y, dy)) = x2(a);
            if x >= y || y.is_nan() { dx } else { dy }
        }),
        "min" => Real(|a| {
            let ((x, dx), (y, dy)) = x2(a);
            if x <= y || y.is_nan() { dx } else { dy }
        }),
        "add" => Real(|a| {
            let ((_, dx), (_, dy)) = x2(a);
            dx + dy
        }),
        "sub" => Real(|a| {
            let ((_, dx), (_, dy)) = x2(a);
            dx - dy
        }),
        "mul" => Real(|a| {
            let ((x, dx), (y, dy)) = x2(a);
            lin(y, dx) + lin(x, dy)
        }),
        "div" => Real(|a| {
            let ((x, dx), (y, dy)) = x2(a);
            lin(1.0 / y, dx) + lin(-(x / y) / y, dy)
        }),
        "neg" => Real(|a| -x1(a).1),
        "sum" => Real(|a| a[0].expect_array().iter().map(|x| x.re().1).sum()),
        "dot" => Real(|a| {
            let (xs, ys) = (a[0].expect_array(), a[1].expect_array());
            xs.iter()
                .zip(ys.iter())
                .map(|(x, y)| {
                    let ((x, dx), (y, dy)) = (x.re(), y.re());
                    lin(y, dx) + lin(x, dy)
                })
                .sum()
        }),
        "asin" => Real(|a| {
            let (x, dx) = x1(a);
            lin(1.0 / (1.0 - x * x).sqrt(), dx)
        }),
        "acos" => Real(|a| {
            let (x, dx) = x1(a);
            lin(-1.0 / (1.0 - x * x).sqrt(), dx)
        }),
        "atan" => Real(|a| {
            let (x, dx) = x1(a);
            lin(1.0 / (1.0 + x * x), dx)
        }),
        "sinh" => Real(|a| {
            let (x, dx) = x1(a);
            lin(x.cosh(), dx)
        }),
        "cosh" => Real(|a| {
            let (x, dx) = x1(a);
            lin(x.sinh(), dx)
        }),
        "atan2" => Real(|a| {
            let ((y, dy), (x, dx)) = x2(a);
            let r2 = x * x + y * y;
            if r2 == 0.0 {
                0.0
            } else {
                lin(x / r2, dy) + lin(-y / r2, dx)
            }
        }),
        "log1p" => Real(|a| {
            let (x, dx) = x1(a);
            lin(1.0 / (1.0 + x), dx)
        }),
        "expm1" => Real(|a| {
            let (x, dx) = x1(a);
            lin(x.exp(), dx)
        }),
        "erf" => Real(|a| {
            let (x, dx) = x1(a);
            lin(std::f64::consts::FRAC_2_SQRT_PI * (-(x * x)).exp(), dx)
        }),
        "relu" => Real(|a| {
            let (x, dx) = x1(a);
            if x > 0.0 { dx } else { 0.0 }
        }),
        "softplus" => Real(|a| {
            let (x, dx) = x1(a);
            lin(crate::prim::sigmoid(x), dx)
        }),
        "toReal" | "sign" => Real(|_| 0.0),
        "floor" | "not" | "decide" | "iadd" | "isub" | "imul" | "idiv" | "irem" | "ipow"
        | "ineg" | "lt" | "le" | "gt" | "ge" | "eq" | "ne" | "ilt" | "ile" | "igt" | "ige"
        | "ieq" | "ine" | "beq" | "bne" | "argmax" | "argmin" => Constant,
        _ => return None,
    })
}

/// Applies a primitive to dual arguments: the primal by the primitive's own evaluation, the
/// tangent by the table.
fn apply_prim(op: &Prim, args: &[Dual]) -> Result<Dual> {
    let rule = rule(op).ok_or_else(|| no_derivative(op))?;
    let primals = args
        .iter()
        .zip(op.params())
        .map(|(a, ty)| a.primal(ty))
        .collect();
    let out = op.eval_args(primals)?;
    Ok(match rule {
        Rule::Constant => Dual::constant(&out),
        Rule::Real(d) => Dual::Real(out.expect_real(), d(args)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prim::Primitive;
    use crate::source::load;

    fn entry_in(src: &str, reg: &Registry) -> Entry {
        let p = load(src, reg).unwrap_or_else(|e| panic!("{src}: {e:?}"));
        p.entry(p.defs.len() - 1)
    }

    fn entry(src: &str) -> Entry {
        entry_in(src, &Registry::builtin())
    }

    /// Value and derivative of a Real expression in `x` at `x0`.
    fn d1(expr: &str, x0: f64) -> (f64, f64) {
        let e = entry(&format!("def f (x : Real) : Real = {expr}"));
        let (v, t) = jvp(&e, &[Value::Real(x0)], &[Value::Real(1.0)]).unwrap();
        (v.expect_real(), t.expect_real())
    }

    /// Value and the two partial derivatives of a Real expression in `x` and `y`.
    fn d2(expr: &str, x0: f64, y0: f64) -> (f64, f64, f64) {
        let e = entry(&format!("def f (x : Real) (y : Real) : Real = {expr}"));
        let args = [Value::Real(x0), Value::Real(y0)];
        let run = |dx: f64, dy: f64| {
            jvp(&e, &args, &[Value::Real(dx), Value::Real(dy)])
                .unwrap_or_else(|e| panic!("{expr}: {e:?}"))
        };
        let (v, tx) = run(1.0, 0.0);
        let (_, ty) = run(0.0, 1.0);
        (v.expect_real(), tx.expect_real(), ty.expect_real())
    }

    fn close(got: f64, want: f64, what: &str) {
        assert!(
            super::super::approx_eq(got, want, 1e-12, 1e-14),
            "{what}: got {got}, want {want}"
        );
    }

    #[test]
    fn unary_builtins_against_hand_derivatives() {
        // Expected derivatives are written in a different form from the table where possible.
        type Case = (&'static str, fn(f64) -> f64, fn(f64) -> f64, &'static [f64]);
        let cases: [Case; 10] = [
            ("sin x", f64::sin, f64::cos, &[-2.0, 0.0, 0.5, 3.0]),
            ("cos x", f64::cos, |x| -x.sin(), &[-2.0, 0.0, 0.5, 3.0]),
            (
                "tan x",
                f64::tan,
                |x| 1.0 + x.tan() * x.tan(),
                &[-1.0, 0.0, 0.5, 1.2],
            ),
            ("exp x", f64::exp, f64::exp, &[-2.0, 0.0, 1.5]),
            ("log x", f64::ln, |x| x.recip(), &[0.1, 1.0, 7.5]),
            (
                "sqrt x",
                f64::sqrt,
                |x| 0.5 * x.powf(-0.5),
                &[0.25, 1.0, 9.0],
            ),
            (
                "tanh x",
                f64::tanh,
                |x| 1.0 / (x.cosh() * x.cosh()),
                &[-1.5, 0.0, 0.7],
            ),
            (
                "sigmoid x",
                |x| 1.0 / (1.0 + (-x).exp()),
                |x| (-x).exp() / ((1.0 + (-x).exp()) * (1.0 + (-x).exp())),
                &[-3.0, 0.0, 0.5, 4.0],
            ),
            (
                "abs x",
                f64::abs,
                |x| if x < 0.0 { -1.0 } else { 1.0 },
                &[-2.0, 0.0, 1.5],
            ),
            ("-x", |x| -x, |_| -1.0, &[-2.0, 0.0, 1.5]),
        ];
        for (expr, f, df, points) in cases {
            for &x in points {
                let (v, d) = d1(expr, x);
                close(v, f(x), &format!("{expr} at {x}"));
                close(d, df(x), &format!("d/dx {expr} at {x}"));
            }
        }
    }

    #[test]
    fn binary_builtins_against_hand_partials() {
        type Case = (&'static str, fn(f64, f64) -> (f64, f64));
        let cases: [Case; 5] = [
            ("x + y", |_, _| (1.0, 1.0)),
            ("x - y", |_, _| (1.0, -1.0)),
            ("x * y", |x, y| (y, x)),
            ("x / y", |x, y| (1.0 / y, -x / (y * y))),
            ("pow x y", |x, y| (y * x.powf(y - 1.0), x.powf(y) * x.ln())),
        ];
        for (expr, df) in cases {
            for (x, y) in [(0.5, 2.0), (1.5, -0.75), (3.0, 0.25)] {
                let (_, dx, dy) = d2(expr, x, y);
                let (wx, wy) = df(x, y);
                close(dx, wx, &format!("d/dx {expr} at ({x}, {y})"));
                close(dy, wy, &format!("d/dy {expr} at ({x}, {y})"));
            }
        }
        // max and min follow the branch they return.
        assert_eq!(d2("max x y", 1.0, 2.0), (2.0, 0.0, 1.0));
        assert_eq!(d2("max x y", 3.0, 2.0), (3.0, 1.0, 0.0));
        assert_eq!(d2("min x y", 1.0, 2.0), (1.0, 1.0, 0.0));
        assert_eq!(d2("min x y", 3.0, 2.0), (2.0, 0.0, 1.0));
    }

    #[test]
    fn conventions_at_non_differentiable_points() {
        // Ties go to the first argument, and so does the derivative.
        assert_eq!(d2("max x y", 2.0, 2.0), (2.0, 1.0, 0.0));
        assert_eq!(d2("min x y", 2.0, 2.0), (2.0, 1.0, 0.0));
        assert_eq!(d2("max y x", 2.0, 2.0), (2.0, 0.0, 1.0));
        // NaN in the second argument: the first is returned.
        assert_eq!(d2("max x (y / 0.0 * 0.0)", 1.0, 1.0).1, 1.0);
        // abs has derivative +1 at 0 (also at -0).
        assert_eq!(d1("abs x", 0.0), (0.0, 1.0));
        assert_eq!(d1("abs x", -0.0), (0.0, 1.0));
        // pow: the dy term vanishes for x <= 0; the dx term for y = 0.
        assert_eq!(d2("pow x y", 0.0, 2.0), (0.0, 0.0, 0.0));
        assert_eq!(d2("pow x y", 0.0, 1.0), (0.0, 1.0, 0.0));
        assert_eq!(d2("pow x y", 0.0, 0.0), (1.0, 0.0, 0.0));
        assert_eq!(d2("pow x y", -2.0, 3.0), (-8.0, 12.0, 0.0));
        assert_eq!(d2("pow x y", 5.0, 0.0).1, 0.0);
        // Strong zero: a tangent that does not move sqrt's argument gives 0, not NaN...
        assert_eq!(d2("sqrt y + x", 1.0, 0.0).1, 1.0);
        assert_eq!(d2("log y * 0.0 + x", 1.0, 0.0).1, 1.0);
        // ...but one that does gives the infinite derivative.
        assert_eq!(d1("sqrt x", 0.0).1, f64::INFINITY);
    }

    #[test]
    fn array_kernels_and_conversions() {
        let e = entry("def f (xs : Array Real) (ys : Array Real) : Real = dot xs ys + sum xs");
        let xs = Value::reals(vec![1.0, 2.0, 3.0]);
        let ys = Value::reals(vec![-1.0, 0.5, 4.0]);
        let dxs = Value::reals(vec![1.0, 0.0, 2.0]);
        let dys = Value::reals(vec![0.0, 3.0, 1.0]);
        let (v, t) = jvp(&e, &[xs, ys], &[dxs, dys]).unwrap();
        assert_eq!(v.expect_real(), (-1.0 + 1.0 + 12.0) + 6.0);
        // Σ y_i dx_i + x_i dy_i + Σ dx_i
        assert_eq!(t.expect_real(), (-1.0 + 8.0) + (6.0 + 3.0) + 3.0);
        // floor and toReal have no derivative: toReal (floor x) * x has derivative floor x.
        assert_eq!(d1("toReal (floor x) * x", 2.5), (5.0, 2.0));
        let e = entry("def f (x : Real) (n : Int) : Real = toReal (n * 2 - 1) * x");
        let (v, t) = jvp(
            &e,
            &[Value::Real(1.5), Value::Int(3)],
            &[Value::Real(1.0), Value::Unit],
        )
        .unwrap();
        assert_eq!((v.expect_real(), t.expect_real()), (7.5, 5.0));
    }

    #[test]
    fn comparisons_and_discrete_operations_choose_the_branch() {
        let f = "if x < 1.0 && not (x == 0.5) then x * x else 3 * x";
        assert_eq!(d1(f, 0.25), (0.0625, 0.5));
        assert_eq!(d1(f, 0.5), (1.5, 3.0));
        assert_eq!(d1(f, 2.0), (6.0, 3.0));
        let g = "if (x >= 0.0) != (x > 1.0) || floor x / 2 == 3 then sin x else x";
        close(d1(g, 0.5).1, 0.5f64.cos(), "g at 0.5");
        assert_eq!(d1(g, 1.5).1, 1.0);
        close(d1(g, 6.5).1, 6.5f64.cos(), "g at 6.5");
    }

    #[test]
    fn higher_order_programs() {
        // (x²)² = x⁴.
        assert_eq!(
            d1(
                "(\\(f : Real -> Real) -> f (f x)) (\\(y : Real) -> y * y)",
                1.5
            )
            .1,
            4.0 * 1.5f64.powi(3)
        );
        // A closure capturing x, applied twice: x·(x·2) = 2x².
        assert_eq!(
            d1("let g = \\(y : Real) -> x * y in g (g 2.0)", 3.0),
            (18.0, 12.0)
        );
        // A function stored in a tuple, and a function returning a closure.
        assert_eq!(
            d1(
                "let p = (\\(y : Real) -> y * x, 2.0) in (fst p) (snd p)",
                3.0
            ),
            (6.0, 2.0)
        );
        assert_eq!(
            d1(
                "let add = \\(a : Real) (b : Real) -> a * b + a in add x x",
                2.0
            ),
            (6.0, 5.0)
        );
        // Partial application of a builtin, mapped.
        let e = entry("def f (xs : Array Real) : Array Real = map (pow 2.0) xs");
        let (v, t) = jvp(
            &e,
            &[Value::reals(vec![1.0, 3.0])],
            &[Value::reals(vec![1.0, 2.0])],
        )
        .unwrap();
        assert_eq!(v.to_string(), "[2.0, 8.0]");
        let want = [2.0 * 2f64.ln(), 8.0 * 2f64.ln() * 2.0];
        for (g, w) in t.expect_reals().iter().zip(want) {
            close(*g, w, "map (pow 2.0)");
        }
    }

    #[test]
    fn map_with_a_closure_map2_build_index_replicate() {
        let e = entry(
            "def f (x : Real) (ys : Array Real) : Real = sum (map (\\(y : Real) -> x * sin y) ys)",
        );
        let ys = vec![0.5, -1.0, 2.0];
        let args = [Value::Real(1.5), Value::reals(ys.clone())];
        // d/dx = Σ sin y
        let (_, t) = jvp(&e, &args, &[Value::Real(1.0), Value::reals(vec![0.0; 3])]).unwrap();
        close(t.expect_real(), ys.iter().map(|y| y.sin()).sum(), "d/dx");
        // d/dy_1 = x cos y_1
        let (_, t) = jvp(
            &e,
            &args,
            &[Value::Real(0.0), Value::reals(vec![0.0, 1.0, 0.0])],
        )
        .unwrap();
        close(t.expect_real(), 1.5 * (-1.0f64).cos(), "d/dy1");

        let e = entry(
            "def f (xs : Array Real) : Array Real =
               let ws = build (length xs) (\\(i : Int) -> xs ! i * toReal i) in
               map2 (\\(a : Real) (b : Real) -> a * b) ws (replicate (length xs) (xs ! 0))",
        );
        // out_i = i · x_i · x_0
        let xs = Value::reals(vec![2.0, 3.0, 5.0]);
        let (v, t) = jvp(&e, &[xs], &[Value::reals(vec![1.0, 1.0, 1.0])]).unwrap();
        assert_eq!(v.to_string(), "[0.0, 6.0, 20.0]");
        // d out_i = i (x_0 + x_i)
        assert_eq!(t.to_string(), "[0.0, 5.0, 14.0]");
    }

    #[test]
    fn sums_case_tuples_and_structured_results() {
        let e = entry(
            "def f (s : Real + Unit) (x : Real) : (Real, Array Real, Real + Int) =
               let (a, b) = (x, x * x) in
               case s of
                 inl v -> (v * a * b, [a, 2 * b], inl (v + x))
               | inr u -> (b, [a], inr 3)",
        );
        let (v, t) = jvp(
            &e,
            &[Value::inl(Value::Real(2.0)), Value::Real(3.0)],
            &[Value::inl(Value::Real(1.0)), Value::Real(1.0)],
        )
        .unwrap();
        assert_eq!(v.to_string(), "(54.0, [3.0, 18.0], inl 5.0)");
        // d(v x³) = x³ dv + 3 v x² dx = 27 + 54
        assert_eq!(t.to_string(), "(81.0, [1.0, 12.0], inl 2.0)");
        let (v, t) = jvp(
            &e,
            &[Value::inr(Value::Unit), Value::Real(3.0)],
            &[Value::inr(Value::Unit), Value::Real(1.0)],
        )
        .unwrap();
        assert_eq!(v.to_string(), "(9.0, [3.0], inr 3)");
        assert_eq!(t.to_string(), "(6.0, [1.0], inr ())");
        // An Array Int result has an Array Unit tangent.
        let e = entry("def f (x : Real) : Array Int = [floor x, 2]");
        let (_, t) = jvp(&e, &[Value::Real(1.5)], &[Value::Real(1.0)]).unwrap();
        assert!(t.has_type(&Type::array(Type::Unit)), "{t}");
        assert_eq!(t.to_string(), "[(), ()]");
    }

    #[test]
    fn runtime_errors_are_the_evaluators() {
        for src in [
            "def f (xs : Array Real) : Real = xs ! 3",
            "def f (xs : Array Real) : Real = sum (build (0 - 1) (\\(i : Int) -> 1.0))",
            "def f (xs : Array Real) : Array Real = map2 (\\(a : Real) (b : Real) -> a) xs [1.0]",
            "def f (xs : Array Real) : Real = dot xs [1.0]",
            "def f (xs : Array Real) : Real = toReal (length xs / (length xs - 2))",
        ] {
            let e = entry(src);
            let xs = Value::reals(vec![1.0, 2.0]);
            let want = crate::eval::eval_entry(&e, std::slice::from_ref(&xs)).unwrap_err();
            let got = jvp(&e, &[xs], &[Value::reals(vec![1.0, 1.0])]).unwrap_err();
            assert_eq!(got.kind(), ErrorKind::Runtime, "{src}");
            assert_eq!(got.message(), want.message(), "{src}");
            assert_eq!(got.span(), want.span(), "{src}");
            assert!(got.span().is_some(), "{src}");
        }
    }

    #[test]
    fn unsupported_and_bad_inputs_are_errors() {
        let mut reg = Registry::builtin();
        reg.register(Primitive::function(
            "logcosh",
            vec![Type::Real],
            Type::Real,
            |x| Ok(Value::Real(x.expect_real().cosh().ln())),
        ))
        .unwrap();
        reg.register(Primitive::function(
            "sgn",
            vec![Type::Real],
            Type::Int,
            |x| Ok(Value::Int(x.expect_real().signum() as i64)),
        ))
        .unwrap();
        let e = entry_in(
            "def f (x : Real) : Real = if x > 5.0 then logcosh x else x",
            &reg,
        );
        // Reported even where the primitive would not be reached.
        let err = jvp(&e, &[Value::Real(1.0)], &[Value::Real(1.0)]).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unsupported);
        assert_eq!(
            err.message(),
            "dual-number oracle: no derivative for primitive `logcosh`"
        );
        assert!(err.span().is_some());
        // A primitive with a discrete result needs no derivative.
        let e = entry_in("def f (x : Real) : Real = toReal (sgn x) * x", &reg);
        assert_eq!(
            jvp(&e, &[Value::Real(-2.0)], &[Value::Real(1.0)])
                .unwrap()
                .1
                .expect_real(),
            -1.0
        );
        // A replacement `sin` is not the builtin.
        let mut own = Registry::empty();
        own.register(Primitive::function(
            "sin",
            vec![Type::Real],
            Type::Real,
            |x| Ok(Value::Real(x.expect_real())),
        ))
        .unwrap();
        let e = entry_in("def f (x : Real) : Real = sin x", &own);
        let err = jvp(&e, &[Value::Real(1.0)], &[Value::Real(1.0)]).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unsupported);

        let e = entry("def f (g : Real -> Real) (x : Real) : Real = g x");
        let err = jvp(&e, &[], &[]).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Argument);
        let e = entry("def f (x : Real) : Real -> Real = \\(y : Real) -> x * y");
        let err = jvp(&e, &[Value::Real(1.0)], &[Value::Real(1.0)]).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unsupported);
        let e = entry("def f (x : Real) (n : Int) : Real = x");
        let args = [Value::Real(1.0), Value::Int(2)];
        let err = jvp(&e, &args, &[Value::Real(1.0)]).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Argument);
        let err = jvp(&e, &args, &[Value::Real(1.0), Value::Real(1.0)]).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Argument);
        assert!(
            err.message().starts_with("tangent 2 (of `n`)"),
            "{}",
            err.message()
        );
    }

    #[test]
    fn every_builtin_has_a_rule() {
        for p in Registry::builtin().all() {
            assert!(
                builtin_rule(p.name()).is_some(),
                "no rule for `{}`",
                p.name()
            );
            assert!(
                rule(p).is_some(),
                "`{}` not recognised as a builtin",
                p.name()
            );
        }
    }

    #[test]
    fn every_comparison_is_discrete() {
        for (op, want) in [
            ("<", 1.0),
            ("<=", 1.0),
            (">", 3.0),
            (">=", 3.0),
            ("==", 3.0),
            ("!=", 1.0),
        ] {
            let f = format!("if x {op} 2.0 && 1 {op} 2 == (x {op} 2.0) then x else 3 * x");
            assert_eq!(d1(&f, 1.0).1, want, "{f}");
        }
    }

    #[test]
    fn deep_programs_on_a_small_thread_stack() {
        let h = std::thread::Builder::new()
            .stack_size(256 * 1024)
            .spawn(|| {
                let e = entry(&crate::random::straight_line_source(10_000, 3));
                let args = [Value::Real(0.5), Value::reals(vec![1.0, -2.0, 0.25])];
                let want = crate::eval::eval_entry(&e, &args).unwrap();
                let tangents = [Value::Real(1.0), Value::reals(vec![0.0, 1.0, 0.0])];
                let (v, _) = jvp(&e, &args, &tangents).unwrap();
                assert_eq!(v.same(&want), Some(true));

                let n = 10_000;
                let nested = format!(
                    "def f (x : Real) : Real = {}x{}",
                    "(x + ".repeat(n),
                    ")".repeat(n)
                );
                let (v, t) =
                    jvp(&entry(&nested), &[Value::Real(1.0)], &[Value::Real(1.0)]).unwrap();
                assert_eq!(
                    (v.expect_real(), t.expect_real()),
                    ((n + 1) as f64, (n + 1) as f64)
                );

                // A chain of closures, each calling the previous one.
                let n = 5_000;
                let mut src = String::from(
                    "def f (x : Real) : Real =\n  let g0 = \\(y : Real) -> y * x in\n",
                );
                for k in 1..n {
                    src.push_str(&format!(
                        "  let g{k} = \\(y : Real) -> g{} y + x in\n",
                        k - 1
                    ));
                }
                src.push_str(&format!("  g{} 1.0\n", n - 1));
                let (v, t) = jvp(&entry(&src), &[Value::Real(1.0)], &[Value::Real(1.0)]).unwrap();
                assert_eq!((v.expect_real(), t.expect_real()), (n as f64, n as f64));
            })
            .unwrap();
        h.join().expect("no stack overflow or panic");
    }

    #[test]
    fn open_terms() {
        let e = entry("def f (x : Real) (y : Real) : Real = x * y + sin x");
        let inputs = [
            (e.params[0].clone(), Value::Real(2.0), Value::Real(1.0)),
            (e.params[1].clone(), Value::Real(3.0), Value::Real(0.5)),
        ];
        let (v, t) = jvp_term(&e.body, &inputs).unwrap();
        close(v.expect_real(), 6.0 + 2f64.sin(), "value");
        close(t.expect_real(), 3.0 + 1.0 + 2f64.cos(), "tangent");
    }
}
