//! Modules whose functions are each a definition of the bundled program run as it stands
//! (`kmeans`, `particle`, `saddle`): the derivatives they need are inside the programs (`grad`
//! and `jvp` as expressions, nested in loops), so the tool only compiles and runs primals.
//!
//! kmeans's `dir` with `--backend native` is the exception: the gradient and the
//! Hessian-vector product its program computes with `jvp` of `grad` come from one native
//! Hessian-vector product of `cost` (dual numbers on the compiled gradient, note 12), which
//! the in-program route, concretised, cannot match.
//!
//! Each function's definition is compiled once at `define`; `--backend native` falls back to
//! the engine, per definition, for one the native backend cannot lower (the answer to
//! `define` names the backend of each function).

use super::Backend;
use crate::ad::nested::Hvp;
use crate::error::{ErrorKind, Result};
use crate::ir::compile::{Compiled, Parts};
use crate::native::Native;
use crate::optimize::optimize;
use crate::simplify::simplify;
use crate::source::term::Entry;
use crate::target::{embed, engine::Code};
use crate::value::Value;

/// One definition compiled for running.
pub(super) enum Program {
    Engine(Box<Code>),
    Native(Box<Native>),
    /// [`super::Kind::NewtonDirection`] natively: the Hessian-vector product of the module's
    /// definition with respect to parameter `k`.
    Newton(Box<Hvp>, usize),
}

impl Program {
    /// Compiles `entry` for `backend`, or for the engine when native code cannot be built for
    /// it; the second component says which.
    pub(super) fn compile(entry: &Entry, backend: Backend) -> Result<(Program, Backend)> {
        let engine = || {
            let optimized = optimize(entry);
            let (params, body) = embed::entry(&optimized);
            Program::Engine(Box::new(Code::compile(&params, &simplify(&body))))
        };
        match backend {
            Backend::Engine => Ok((engine(), Backend::Engine)),
            Backend::Native => {
                let native = Compiled::with_parts(entry, Parts::PRIMAL)
                    .and_then(|code| Native::new(code, None, false));
                match native {
                    Ok(n) => Ok((Program::Native(Box::new(n)), Backend::Native)),
                    Err(e) if e.kind() == ErrorKind::Unsupported => Ok((engine(), Backend::Engine)),
                    Err(e) => Err(e),
                }
            }
        }
    }

    /// `J / H` elementwise for `entry`'s gradient `J` with respect to parameter `k` and its
    /// Hessian-vector product `H` along the all-ones direction, natively.
    pub(super) fn newton_direction(entry: &Entry, k: usize) -> Result<Program> {
        let wrt: Vec<bool> = (0..entry.params.len()).map(|i| i == k).collect();
        let backend = crate::native::NativeBackend::default();
        let hvp = Hvp::with_backend(&optimize(entry), &wrt, &backend)?;
        Ok(Program::Newton(Box::new(hvp), k))
    }

    /// The definition's value at `args`.
    pub(super) fn run(&self, args: &[Value]) -> Result<Value> {
        match self {
            Program::Engine(code) => code.run(args),
            Program::Native(n) => n.eval(args),
            Program::Newton(hvp, k) => {
                let ones = ones_like(&args[*k]);
                let r = hvp.hvp(args, &[ones])?;
                match (&r.gradient[*k], &r.hvp[*k]) {
                    (Some(j), Some(h)) => divide(j, h),
                    _ => Err(crate::error::Error::new(
                        ErrorKind::Runtime,
                        "internal error: no gradient for the selected parameter",
                    )),
                }
            }
        }
    }
}

/// The value of the shape of `v` (reals, arrays of them) with every real 1.
fn ones_like(v: &Value) -> Value {
    match v {
        Value::Real(_) => Value::Real(1.0),
        Value::RealArray(xs) => Value::reals(vec![1.0; xs.len()]),
        Value::Array(xs) => Value::Array(std::rc::Rc::new(xs.iter().map(ones_like).collect())),
        Value::Pair(p) => Value::pair(ones_like(&p.0), ones_like(&p.1)),
        other => other.clone(),
    }
}

/// `a / b` elementwise, for values of one shape.
fn divide(a: &Value, b: &Value) -> Result<Value> {
    Ok(match (a, b) {
        (Value::Real(x), Value::Real(y)) => Value::Real(x / y),
        (Value::RealArray(x), Value::RealArray(y)) if x.len() == y.len() => {
            Value::reals(x.iter().zip(y.iter()).map(|(a, b)| a / b).collect())
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => Value::Array(std::rc::Rc::new(
            x.iter()
                .zip(y.iter())
                .map(|(a, b)| divide(a, b))
                .collect::<Result<_>>()?,
        )),
        (Value::Pair(x), Value::Pair(y)) => Value::pair(divide(&x.0, &y.0)?, divide(&x.1, &y.1)?),
        _ => {
            return Err(crate::error::Error::new(
                ErrorKind::Runtime,
                "internal error: a gradient and a Hessian-vector product of different shapes",
            ));
        }
    })
}
