//! The evaluator of target terms: a big-step interpreter over a persistent environment, like
//! the source evaluator ([`crate::eval`]), reusing its values. Linear values are
//! [`Value::Lin`], linear maps [`Value::LinFun`].
//!
//! Evaluating a linear λ `λ̲v. l` gives a linear map (a [`LinFun`] around the closure): the only
//! way besides the [`super::linear`] API and native kernels to make one, and a sound one, since
//! the checker has verified that `l` is linear in `v`. A linear term is evaluated with its linear
//! variables bound to linear values; like every linear map, a linear λ applied to zero gives zero
//! without evaluating its body.
//!
//! Evaluation order is left to right ([`Term::children`]); runtime errors (index out of range,
//! lengths, integer arithmetic) carry the source position of the node they come from.

use super::linear::{Copower, Lin, LinFun, LinearMap};
use super::term::{LTerm, LTermKind, Pat, Term, TermKind, Var, VarId};
use crate::deep::deep;
use crate::error::{Error, Result};
use crate::value::{self, Closure, Value};
use std::rc::Rc;

/// A variable environment (linear variables are bound to [`Value::Lin`]).
pub type Env = im::HashMap<VarId, Value>;

/// Evaluates a Cartesian term in an environment binding its free variables.
pub fn eval(t: &Term, env: &Env) -> Result<Value> {
    deep(|| {
        let mut env = env.clone();
        let mut t = t;
        while let TermKind::Let(p, e, b) = &t.kind {
            let v = eval(e, &env)?;
            bind(p, v, &mut env);
            t = b;
        }
        node(t, &env)
    })
}

/// Evaluates a linear term in an environment binding its free variables, linear ones included.
pub fn eval_linear(l: &LTerm, env: &Env) -> Result<Lin> {
    deep(|| {
        let mut env = env.clone();
        let mut l = l;
        loop {
            match &l.kind {
                LTermKind::Let(p, t, body) => {
                    let v = eval(t, &env)?;
                    bind(p, v, &mut env);
                    l = body;
                }
                LTermKind::LinLet(u, l1, body) => {
                    let v = eval_linear(l1, &env)?;
                    env.insert(u.id, Value::Lin(v));
                    l = body;
                }
                _ => return linear_node(l, &env),
            }
        }
    })
}

/// Binds the variables of a pattern to the parts of a value.
pub fn bind(pat: &Pat, v: Value, env: &mut Env) {
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

struct TargetClosure {
    param: Var,
    body: Term,
    env: Env,
}

impl Closure for TargetClosure {
    fn apply(&self, arg: Value) -> Result<Value> {
        eval(&self.body, &self.env.update(self.param.id, arg))
    }
}

/// The value of a linear λ: a linear map.
struct LinearClosure {
    param: Var,
    body: LTerm,
    env: Env,
}

impl LinearMap for LinearClosure {
    fn apply(&self, x: &Lin) -> Result<Lin> {
        eval_linear(
            &self.body,
            &self.env.update(self.param.id, Value::Lin(x.clone())),
        )
    }
    fn describe(&self) -> String {
        format!("\\{} ⊸ ...", self.param.name)
    }
}

fn lookup(x: &Var, env: &Env) -> Value {
    env.get(&x.id)
        .cloned()
        .unwrap_or_else(|| panic!("internal error: unbound target variable {x:?}"))
}

fn expect_lin(v: Value) -> Lin {
    v.into_lin()
}

fn expect_lin_fun(v: &Value) -> LinFun {
    v.expect_lin_fun().clone()
}

fn node(t: &Term, env: &Env) -> Result<Value> {
    use TermKind as K;
    let at = |e: Error| e.or_span(t.span);
    Ok(match &t.kind {
        K::Var(x) => lookup(x, env),
        K::Lit(l) => l.value(),
        K::Lam(x, b) => Value::Closure(Rc::new(TargetClosure {
            param: x.clone(),
            body: b.clone(),
            env: env.clone(),
        })),
        K::App(f, a) => {
            let f = eval(f, env)?;
            let a = eval(a, env)?;
            f.apply(a)?
        }
        K::Let(..) => eval(t, env)?,
        K::Pair(a, b) => Value::pair(eval(a, env)?, eval(b, env)?),
        K::Fst(e) => eval(e, env)?.expect_pair().0.clone(),
        K::Snd(e) => eval(e, env)?.expect_pair().1.clone(),
        K::If(c, a, b) => {
            if eval(c, env)?.expect_bool() {
                eval(a, env)?
            } else {
                eval(b, env)?
            }
        }
        K::Inl(e, _) => Value::inl(eval(e, env)?),
        K::Inr(_, e) => Value::inr(eval(e, env)?),
        K::Case(e, p, a, q, b) => {
            let (env, body) = branch(e, env, (p, a), (q, b))?;
            eval(body, &env)?
        }
        K::Prim(op, args) => {
            let vs = args
                .iter()
                .map(|a| eval(a, env))
                .collect::<Result<Vec<_>>>()?;
            op.eval_args(vs).map_err(at)?
        }
        K::Array(_, items) => Value::array_of(
            items
                .iter()
                .map(|a| eval(a, env))
                .collect::<Result<Vec<_>>>()?,
        ),
        K::Map(f, xs) => {
            let f = eval(f, env)?;
            let xs = eval(xs, env)?;
            let out = xs
                .array_items()
                .into_iter()
                .map(|x| f.apply(x))
                .collect::<Result<Vec<_>>>()?;
            Value::array_of(out)
        }
        K::Map2(f, xs, ys) => {
            let f = eval(f, env)?;
            let xs = eval(xs, env)?;
            let ys = eval(ys, env)?;
            value::check_same_len("map2", xs.array_len(), ys.array_len()).map_err(at)?;
            let out = xs
                .array_items()
                .into_iter()
                .zip(ys.array_items())
                .map(|(x, y)| f.apply(x)?.apply(y))
                .collect::<Result<Vec<_>>>()?;
            Value::array_of(out)
        }
        K::Build(n, f) => {
            let n = eval(n, env)?.expect_int();
            let f = eval(f, env)?;
            let n = value::check_len("build", n).map_err(at)?;
            let out = (0..n as i64)
                .map(|i| f.apply(Value::Int(i)))
                .collect::<Result<Vec<_>>>()?;
            Value::array_of(out)
        }
        K::Index(xs, i) => {
            let xs = eval(xs, env)?;
            let i = eval(i, env)?.expect_int();
            xs.index(i).map_err(at)?
        }
        K::Length(xs) => Value::Int(eval(xs, env)?.array_len() as i64),
        K::Replicate(n, x) => {
            let n = eval(n, env)?.expect_int();
            let x = eval(x, env)?;
            let n = value::check_len("replicate", n).map_err(at)?;
            Value::array_of(vec![x; n])
        }
        K::Loop(f, x, tape) => {
            let f = eval(f, env)?;
            let x = eval(x, env)?;
            if *tape {
                crate::steps::run_loop_tape(|s| f.apply(s), x, t.span)?
            } else {
                crate::steps::run_loop(|s| f.apply(s), x, t.span)?
            }
        }
        K::Fix(f, at) => crate::steps::FixClosure::value(eval(f, env)?, *at),
        K::LinLam(v, body) => Value::LinFun(LinFun::new(LinearClosure {
            param: v.clone(),
            body: body.clone(),
            env: env.clone(),
        })),
        K::LinApp(f, a) => {
            let f = expect_lin_fun(&eval(f, env)?);
            let a = expect_lin(eval(a, env)?);
            Value::Lin(f.apply(&a).map_err(at)?)
        }
        K::LinPrim(op, a) => Value::LinFun(op.make(&eval(a, env)?).map_err(at)?),
    })
}

/// The branch of `case e of inl p -> a | inr q -> b` that `e` takes, and the environment with
/// its pattern bound (for Cartesian and linear branches alike).
fn branch<'b, B>(
    e: &Term,
    env: &Env,
    left: (&'b Pat, &'b B),
    right: (&'b Pat, &'b B),
) -> Result<(Env, &'b B)> {
    let ((pat, body), v) = match eval(e, env)? {
        Value::Inl(v) => (left, (**v).clone()),
        Value::Inr(v) => (right, (**v).clone()),
        other => panic!("internal error: case on {other}"),
    };
    let mut env = env.clone();
    bind(pat, v, &mut env);
    Ok((env, body))
}

fn linear_node(l: &LTerm, env: &Env) -> Result<Lin> {
    use LTermKind as K;
    let at = |e: Error| e.or_span(l.span);
    let lin = |e: &LTerm| eval_linear(e, env);
    let int = |t: &Term| Ok::<i64, Error>(eval(t, env)?.expect_int());
    let len = |t: &Term, op: &str| value::check_len(op, int(t)?).map_err(at);
    Ok(match &l.kind {
        K::Var(v) => expect_lin(lookup(v, env)),
        K::Zero(_) => Lin::zero(),
        K::Plus(a, b) => Lin::plus(lin(a)?, lin(b)?),
        K::Pair(a, b) => Lin::pair(lin(a)?, lin(b)?),
        K::Fst(e) => lin(e)?.fst(),
        K::Snd(e) => lin(e)?.snd(),
        K::App(f, e) => {
            let f = expect_lin_fun(&eval(f, env)?);
            f.apply(&lin(e)?).map_err(at)?
        }
        K::Let(..) | K::LinLet(..) => eval_linear(l, env)?,
        K::Copower(t, e) => {
            let a = eval(t, env)?;
            Lin::copower(Copower::singleton(a, lin(e)?))
        }
        K::CopowFold(f, e) => {
            let f = eval(f, env)?;
            lin(e)?
                .to_copower()
                .fold(|a| Ok(expect_lin_fun(&f.apply(a.clone())?)))
                .map_err(at)?
        }
        K::PowLam(b, body) => {
            let (b, body, env) = (b.clone(), body.clone(), env.clone());
            Lin::power(move |x| eval_linear(&body, &env.update(b.id, x.clone())))
        }
        K::PowApp(e, t) => {
            let p = lin(e)?;
            p.apply_power(&eval(t, env)?).map_err(at)?
        }
        K::Inl(e, _) => Lin::left(lin(e)?),
        K::Inr(_, e) => Lin::right(lin(e)?),
        K::FromLeft(e) => lin(e)?.from_left(),
        K::FromRight(e) => lin(e)?.from_right(),
        K::Replicate(n, e) => {
            let n = len(n, "replicate")?;
            Lin::replicate(n, &lin(e)?)
        }
        K::Sum(e) => lin(e)?.sum(),
        K::OneHot(n, i, e) => {
            let n = len(n, "onehot")?;
            let i = int(i)?;
            Lin::onehot(n, i, lin(e)?).map_err(at)?
        }
        K::Index(e, i) => {
            let xs = lin(e)?;
            xs.index(int(i)?)
        }
        K::ZipWith(fs, e) => {
            let fs = eval(fs, env)?;
            let xs = lin(e)?;
            xs.zip_with(fs.array_len(), |i| Ok(expect_lin_fun(&fs.index(i as i64)?)))
                .map_err(at)?
        }
        K::Map(f, e) => {
            let f = expect_lin_fun(&eval(f, env)?);
            lin(e)?.map(&f).map_err(at)?
        }
        K::Build(n, i, body) => {
            let n = len(n, "lbuild")?;
            Lin::build(n, |k| {
                eval_linear(body, &env.update(i.id, Value::Int(k as i64)))
            })?
        }
        K::Scale(c, e) => {
            let c = eval(c, env)?.expect_real();
            Lin::scale(c, &lin(e)?)
        }
        K::Case(e, p, a, q, b) => {
            let (env, body) = branch(e, env, (p, a), (q, b))?;
            eval_linear(body, &env)?
        }
        K::Chain(fs, e, rev, outs) => {
            let fs = eval(fs, env)?;
            crate::steps::chain(&fs, lin(e)?, *rev, *outs).map_err(at)?
        }
    })
}
