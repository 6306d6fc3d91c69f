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
use crate::oracle::fd;
use crate::simplify::simplify;
use crate::source::term::Entry;
use crate::target::{embed, engine::Code};
use crate::types::Type;
use crate::value::Value;

/// One definition compiled for running.
pub(super) enum Program {
    Engine(Box<Code>),
    Native(Box<Native>),
    /// [`super::Kind::NewtonDirection`] natively: the Hessian-vector product of the module's
    /// definition with respect to parameter `k`, of type `ty`.
    Newton(Box<Hvp>, usize, Type),
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
        Ok(Program::Newton(
            Box::new(hvp),
            k,
            entry.params[k].ty.clone(),
        ))
    }

    /// The definition's value at `args`.
    pub(super) fn run(&self, args: &[Value]) -> Result<Value> {
        match self {
            Program::Engine(code) => code.run(args),
            Program::Native(n) => n.eval(args),
            Program::Newton(hvp, k, ty) => {
                // The all-ones direction, and `J / H` leaf by leaf in `x`'s shape (`leaves`
                // and `tangent_with` take the reals in one order).
                if args.len() <= *k || !args[*k].has_type(ty) {
                    return Err(crate::error::Error::new(
                        ErrorKind::Argument,
                        format!("the argument to differentiate must have type {ty}"),
                    ));
                }
                let ones = fd::tangent_with(ty, &args[*k], &mut || 1.0);
                let r = hvp.hvp(args, &[ones])?;
                let (Some(j), Some(h)) = (&r.gradient[*k], &r.hvp[*k]) else {
                    return Err(crate::error::Error::new(
                        ErrorKind::Runtime,
                        "internal error: no gradient for the selected parameter",
                    ));
                };
                let (j, h) = (fd::leaves(j), fd::leaves(h));
                let mut q = j.iter().zip(&h).map(|(a, b)| a / b);
                Ok(fd::tangent_with(ty, &args[*k], &mut || {
                    q.next().expect("one quotient per real")
                }))
            }
        }
    }
}
