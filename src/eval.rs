//! The direct evaluator of typed source terms: a big-step interpreter over an environment.
//!
//! This is one of the two independent routes to a program's value; the other compiles to
//! combinators and evaluates them through the generic `interpret` ([`crate::ccc::eval`]).
//! Property tests require the two to agree exactly, errors included. Both evaluate left to right
//! (the order of [`Term::children`]), function before argument, and `build n f` evaluates `n`
//! before `f`.
//!
//! Environments are persistent maps from variable identities to values (`im::HashMap`), so a
//! closure captures its environment in O(1).

use crate::deep::deep;
use crate::error::{Error, ErrorKind, Result};
use crate::source::term::{Entry, Pat, Term, TermKind, Var, VarId};
use crate::value::{self, Closure, Value};
use std::rc::Rc;

/// A variable environment.
pub type Env = im::HashMap<VarId, Value>;

/// Checks that `args` fit the entry's parameters (count and types).
pub fn check_args(entry: &Entry, args: &[Value]) -> Result<()> {
    if args.len() != entry.params.len() {
        return Err(Error::new(
            ErrorKind::Argument,
            format!(
                "`{}` takes {} argument{}, but {} {} given",
                entry.name,
                entry.params.len(),
                if entry.params.len() == 1 { "" } else { "s" },
                args.len(),
                if args.len() == 1 { "was" } else { "were" }
            ),
        ));
    }
    for (k, (p, a)) in entry.params.iter().zip(args).enumerate() {
        if !a.has_type(&p.ty) {
            return Err(Error::new(
                ErrorKind::Argument,
                format!(
                    "argument {} (`{}`) must have type `{}`, but `{a}` does not",
                    k + 1,
                    p.name,
                    p.ty
                ),
            ));
        }
    }
    Ok(())
}

/// Evaluates an entry point applied to its arguments.
pub fn eval_entry(entry: &Entry, args: &[Value]) -> Result<Value> {
    check_args(entry, args)?;
    let env: Env = entry
        .params
        .iter()
        .zip(args)
        .map(|(p, a)| (p.id, a.clone()))
        .collect();
    eval(&entry.body, &env)
}

struct SourceClosure {
    param: Var,
    body: Term,
    env: Env,
}

impl Closure for SourceClosure {
    fn apply(&self, arg: Value) -> Result<Value> {
        let env = self.env.update(self.param.id, arg);
        eval(&self.body, &env)
    }
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

/// Evaluates a term in an environment that binds its free variables.
pub fn eval(t: &Term, env: &Env) -> Result<Value> {
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

fn eval_node(t: &Term, env: &Env) -> Result<Value> {
    use TermKind as K;
    let at = |e: Error| e.or_span(t.span);
    Ok(match &t.kind {
        K::Var(x) => env
            .get(&x.id)
            .cloned()
            .unwrap_or_else(|| panic!("internal error: unbound variable {x:?}")),
        K::Lit(l) => l.value(),
        K::Lam(x, b) => Value::Closure(Rc::new(SourceClosure {
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
            let (pat, v, body) = match eval(e, env)? {
                Value::Inl(v) => (p, (**v).clone(), a),
                Value::Inr(v) => (q, (**v).clone(), b),
                other => panic!("internal error: case on {other}"),
            };
            let mut env = env.clone();
            bind(pat, v, &mut env);
            eval(body, &env)?
        }
        K::Prim(op, args) => {
            let vs = args
                .iter()
                .map(|a| eval(a, env))
                .collect::<Result<Vec<_>>>()?;
            op.eval_args(vs).map_err(at)?
        }
        K::Array(elem, items) => {
            let vs = items
                .iter()
                .map(|a| eval(a, env))
                .collect::<Result<Vec<_>>>()?;
            Value::array(elem, vs)
        }
        K::Map(f, xs) => {
            let f = eval(f, env)?;
            let xs = eval(xs, env)?;
            let out = xs
                .array_items()
                .into_iter()
                .map(|x| f.apply(x))
                .collect::<Result<Vec<_>>>()?;
            Value::array(result_elem(t), out)
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
            Value::array(result_elem(t), out)
        }
        K::Build(n, f) => {
            let n = eval(n, env)?.expect_int();
            let f = eval(f, env)?;
            let n = value::check_len("build", n).map_err(at)?;
            let out = (0..n as i64)
                .map(|i| f.apply(Value::Int(i)))
                .collect::<Result<Vec<_>>>()?;
            Value::array(result_elem(t), out)
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
            value::replicate(result_elem(t), n, &x)
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
        K::Fix(f) => crate::steps::FixClosure::value(eval(f, env)?, t.span),
    })
}

fn result_elem(t: &Term) -> &crate::types::Type {
    t.ty.as_array().expect("array-typed node")
}
