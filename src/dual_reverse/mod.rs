//! Dual-numbers reverse AD (Smeding & Vákár, "Dual-Numbers Reverse AD, Efficiently", POPL
//! 2023) as a run-time engine: an independent oracle for reverse CHAD and the taping baseline it
//! is measured against (`chad grad --engine dual`, `chad bench`'s `dual_reverse_s`).
//!
//! Reverse mode at run time, with nothing from CHAD: no combinators, no target-language code, no
//! simplifier. The program (a typed source [`Entry`]) is evaluated on *dual values*
//! ([`eval`]): every `Real` is paired with a backpropagator, identified by an ID handed out in
//! creation order, and every primitive application records its backpropagator on a tape
//! ([`tape`]) as the list of its partial derivatives with respect to its arguments' IDs
//! ([`prims`]). The output cotangent is then propagated back through the tape.
//!
//! The paper's sequence of optimisations, and where each one is here:
//!
//! 1. **Naive** (§5): a backpropagator is a linear function that calls its arguments'
//!    backpropagators. Calls multiply under sharing: `x_k = op(x_{k-1}, x_{k-1})` calls the
//!    input's backpropagator 2^k times. Kept behind [`Options::naive`]
//!    ([`tape::Tape::resolve_naive`]).
//! 2. **Linear factoring by staging calls** (§6): `f a + f b = f (a + b)`; a call is staged
//!    (its argument added to the callee's pending argument) rather than made.
//! 3. **IDs, resolved from the highest down** (§6.2): IDs increase in evaluation order and a
//!    backpropagator only calls smaller IDs, so resolving from the highest ID down runs each one
//!    once, after all its calls have been staged.
//! 4. **Cayley transform** (§7): backpropagators update the accumulated state instead of
//!    returning values to be added, so combining contributions costs O(1).
//! 5. **Mutable arrays indexed by ID** (§8, §9.1): the staging map and the cotangent
//!    collector become one array of accumulators; an input's accumulator is its gradient.
//! 6. **Defunctionalisation and taping** (§9.2, §9.3): a backpropagator is data, the list of
//!    `(ID, partial derivative)` pairs, written to the tape in the forward pass.
//!
//! Together: O(T + I) for a run of T steps on an input of I scalars ([`tape::Tape::resolve`]).
//! `theory-notes/08-dual-numbers-reverse.md` derives the algorithm and measures it.
//!
//! The language is covered whole: higher-order functions and closures (the paper's point: dual
//! numbers are structure-preserving, so a closure just captures dual values), tuples, sums,
//! `if`/`case`, and arrays (an array is an array of dual values). Parameters and results must be
//! first-order. Primal values and runtime errors (message and position) are exactly those of the
//! direct evaluator ([`crate::eval`]).
//!
//! ```
//! use chad::internals::dual_reverse::{DualReverse, Options};
//! use chad::Value;
//! let program = chad::internals::source::load(
//!     "def f (x : Real) (ys : Array Real) : Real =
//!        let g = \\(y : Real) -> x * sin y in
//!        sum (map g ys)",
//!     &chad::internals::prim::Registry::builtin(),
//! )?;
//! let engine = DualReverse::new(&program.entry(0), Options::default())?;
//! let out = engine.grad(&[Value::Real(2.0), Value::reals(vec![0.0, 1.0])])?;
//! assert_eq!(out.value.expect_real(), 2.0 * 1f64.sin());
//! assert_eq!(out.gradient[0].expect_real(), 1f64.sin());
//! assert_eq!(out.gradient[1].expect_reals(), &[2.0, 2.0 * 1f64.cos()]);
//! // Two input scalars plus x, 2 sins, 2 products and the sum: one call each.
//! assert_eq!(out.stats.calls, 3 + 2 + 2 + 1);
//! # Ok::<(), chad::Error>(())
//! ```

pub mod eval;
pub mod prims;
pub mod tape;

pub use tape::Stats;

use crate::error::{Error, ErrorKind, Result};
use crate::source::term::{Entry, Term, TermKind};
use crate::types::Type;
use crate::value::Value;
use eval::{DVal, Env, Run};
use tape::{Id, NONE, Tape};

/// How the engine runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// Run backpropagators naively (§5: every call made at once, recursively) instead of by
    /// the final algorithm: exponential under sharing. For demonstrations and tests.
    pub naive: bool,
    /// Differentiate every primitive through its registered derivative (as user primitives
    /// always are) instead of this module's table for the builtins (tests the fallback).
    pub generic_prims: bool,
    /// In naive mode, the most backpropagator calls before giving up with an error.
    pub max_naive_calls: u64,
}

impl Default for Options {
    /// The final algorithm, the builtin table, and a naive-mode budget of 2^32 calls.
    fn default() -> Options {
        Options {
            naive: false,
            generic_prims: false,
            max_naive_calls: 1 << 32,
        }
    }
}

/// The result of a reverse-mode run.
#[derive(Clone, Debug)]
pub struct Output {
    /// The program's value.
    pub value: Value,
    /// One cotangent per argument (of type `param_ty.tangent()`, the argument's shape; `()` for
    /// discrete arguments).
    pub gradient: Vec<Value>,
    /// What the backwards run did (backpropagator calls among it).
    pub stats: Stats,
}

/// The engine for one entry point: checked once, run many times.
pub struct DualReverse {
    entry: Entry,
    options: Options,
    prims: prims::Prims,
}

impl DualReverse {
    /// Prepares `entry`. Fails ([`ErrorKind::Unsupported`]) on higher-order parameters or
    /// results and on a primitive without a derivative (at its position).
    pub fn new(entry: &Entry, options: Options) -> Result<DualReverse> {
        for p in &entry.params {
            if !p.ty.is_first_order() {
                return Err(Error::new(
                    ErrorKind::Unsupported,
                    format!(
                        "reverse mode needs first-order inputs, but parameter `{}` has type `{}`",
                        p.name, p.ty
                    ),
                ));
            }
        }
        if !entry.body.ty.is_first_order() {
            return Err(Error::new(
                ErrorKind::Unsupported,
                format!(
                    "reverse mode needs a first-order result, but `{}` returns `{}`",
                    entry.name, entry.body.ty
                ),
            ));
        }
        check_prims(&entry.body)?;
        Ok(DualReverse {
            entry: entry.clone(),
            prims: prims::Prims::new(options.generic_prims),
            options,
        })
    }

    /// The value at `args` and every argument's cotangent for the output cotangent
    /// `cotangent` (of type `result_ty.tangent()`, the result's shape).
    pub fn vjp(&self, args: &[Value], cotangent: &Value) -> Result<Output> {
        crate::eval::check_args(&self.entry, args)?;
        let mut run = Run {
            tape: Tape::new(),
            prims: &self.prims,
            scratch: Vec::new(),
        };
        // The inputs' backpropagators come first: IDs 0 .. I, in argument order (the paper's
        // Interleave).
        let mut env = Env::new();
        for (p, a) in self.entry.params.iter().zip(args) {
            let tape = &mut run.tape;
            env.insert(p.id, DVal::lift(&p.ty, a, &mut || tape.input())?);
        }
        let out = eval::eval(&self.entry.body, &env, &mut run)?;
        let ty = &self.entry.body.ty;
        let value = out.primal(ty);
        crate::oracle::check_tangent(ty, &value, cotangent)
            .map_err(|e| e.prefixed("cotangent: "))?;
        // The output's backpropagators called with their cotangents (Deinterleave).
        let mut ids = Vec::new();
        out.ids(&mut ids);
        let seeds: Vec<(Id, f64)> = ids
            .into_iter()
            .zip(tape::real_leaves(cotangent))
            .filter(|&(id, _)| id != NONE)
            .collect();
        let (acc, stats) = if self.options.naive {
            run.tape
                .resolve_naive(&seeds, self.options.max_naive_calls)?
        } else {
            run.tape.resolve(&seeds)?
        };
        // The gradient from the inputs' accumulators, in the arguments' shapes (Rebuild).
        let mut next = acc.iter().copied();
        let gradient = self
            .entry
            .params
            .iter()
            .zip(args)
            .map(|(p, a)| tape::with_leaves(&p.ty, a, &mut || next.next().unwrap_or(0.0)))
            .collect();
        Ok(Output {
            value,
            gradient,
            stats,
        })
    }

    /// The value and the gradient with respect to every argument, for a `Real`-valued entry.
    pub fn grad(&self, args: &[Value]) -> Result<Output> {
        if !matches!(self.entry.body.ty, Type::Real) {
            return Err(Error::new(
                ErrorKind::Argument,
                format!(
                    "grad needs a Real-valued definition, but `{}` returns `{}` (use vjp with a \
                     cotangent)",
                    self.entry.name, self.entry.body.ty
                ),
            ));
        }
        self.vjp(args, &Value::Real(1.0))
    }
}

/// The first primitive (in source order) this engine cannot differentiate.
fn check_prims(t: &Term) -> Result<()> {
    let mut stack = vec![t];
    while let Some(t) = stack.pop() {
        if let TermKind::Prim(op, _) = &t.kind
            && !prims::supported(op)
        {
            return Err(Error::new(
                ErrorKind::Unsupported,
                format!("primitive `{}` has no derivative", op.name()),
            )
            .with_span(t.span)
            .with_note("register one with `Primitive::with_derivative`"));
        }
        stack.extend(t.children().into_iter().rev());
    }
    Ok(())
}

/// Reverse mode by dual numbers (the final algorithm): the value of `entry` at `args` and the
/// cotangent of every argument for the output cotangent `cotangent`.
pub fn vjp(entry: &Entry, args: &[Value], cotangent: &Value) -> Result<(Value, Vec<Value>)> {
    let out = DualReverse::new(entry, Options::default())?.vjp(args, cotangent)?;
    Ok((out.value, out.gradient))
}

/// Reverse mode by dual numbers for a `Real`-valued entry: the value and the gradient.
pub fn grad(entry: &Entry, args: &[Value]) -> Result<(Value, Vec<Value>)> {
    let out = DualReverse::new(entry, Options::default())?.grad(args)?;
    Ok((out.value, out.gradient))
}
