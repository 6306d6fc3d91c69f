//! Modules whose functions are each a definition of the bundled program run as it stands
//! (`kmeans`, `particle`, `saddle`): the derivatives they need are inside the programs (`grad`
//! and `jvp` as expressions, nested in loops), so the tool only compiles and runs primals.
//!
//! Each function's definition is compiled once at `define`; `--backend native` falls back to
//! the engine, per definition, for one the native backend cannot lower (the answer to
//! `define` names the backend of each function).

use super::Backend;
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

    /// The definition's value at `args`.
    pub(super) fn run(&self, args: &[Value]) -> Result<Value> {
        match self {
            Program::Engine(code) => code.run(args),
            Program::Native(n) => n.eval(args),
        }
    }
}
