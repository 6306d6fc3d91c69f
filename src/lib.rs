//! # chad: Combinatory Homomorphic Automatic Differentiation
//!
//! `chad` implements CHAD (Vákár & Smeding, TOPLAS 2022) for a small typed higher-order
//! functional language. Source programs are compiled into typed combinators of the free
//! cartesian closed category (with coproducts and arrays); anything that implements the
//! categorical structure ([`ccc::model::Model`]) then gets a structure-preserving functor out of
//! it for free ([`ccc::interpret`]). Evaluation is one such model; forward and reverse AD are
//! others.
//!
//! The pipeline:
//!
//! ```text
//! text --source::parser--> syntax --source::check--> typed core terms (source::term)
//!      --ccc::compile--> combinators --ccc::interpret--> any model (eval, typing, printing, ...)
//!      (AD models produce target::Term: the source language plus linear types)
//!      --simplify--> legible derivative code of the program's size (never called by `ad`)
//! ```
//!
//! ## Using it
//!
//! [`Program`] loads and checks a program once; [`Function`] is one of its definitions, ready to
//! run and differentiate: the first call of each kind optimises the definition
//! ([`optimize`]), differentiates it (forward or reverse CHAD), simplifies the derivative
//! ([`simplify`]) and compiles it for the execution engine ([`target::engine`]), and later
//! calls reuse that code ([`api`] has the details: `wrt`, backends, threads). Every `chad`
//! command that runs a program goes through it.
//!
//! ```
//! use chad::{Program, Value};
//!
//! let program = Program::load(
//!     "def f (x : Real) (ys : Array Real) : Real =
//!        let g = \\(y : Real) -> x * sin y in
//!        sum (map g ys)",
//! )?;
//! let f = program.function("f")?;
//! let args = [Value::from(2.0), Value::from(vec![0.0, 1.0])];
//! assert_eq!(f64::try_from(&f.eval(&args)?)?, 2.0 * 1f64.sin());
//!
//! // Reverse mode: the gradient with respect to both inputs.
//! let (value, grad) = f.value_and_grad(&args)?;
//! assert_eq!(f64::try_from(&value)?, 2.0 * 1f64.sin());
//! assert_eq!(f64::try_from(&grad[0])?, 1f64.sin()); // ∂/∂x = sin 0 + sin 1
//! let dys = Vec::<f64>::try_from(&grad[1])?; // ∂/∂ys_i = x cos ys_i
//! assert_eq!(dys, vec![2.0 * 0f64.cos(), 2.0 * 1f64.cos()]);
//!
//! // Forward mode along a tangent per input; a pullback for many cotangents.
//! let (_, dy) = f.jvp(&args, &[Value::from(1.0), Value::from(vec![0.0, 0.0])])?;
//! assert_eq!(f64::try_from(&dy)?, 1f64.sin());
//! let pullback = f.vjp_at(&args)?;
//! assert_eq!(f64::try_from(&pullback.apply(&Value::from(2.0))?[0])?, 2.0 * 1f64.sin());
//! # Ok::<(), chad::Error>(())
//! ```
//!
//! ## The internals
//!
//! Underneath, the stages (typed terms, combinators, the AD functors, the simplifier, the
//! engine, the IR, the oracles) are separate modules, public for research use under
//! [`internals`], with no stability promise; its documentation lists them and shows them at
//! work. User primitives with their derivatives are registered there
//! ([`internals::prim::Registry`]).
//!
//! ## Modules
//!
//! * The crate root: [`Program`], [`Function`], [`Backend`], [`Via`], [`Pullback`],
//!   [`Pushforward`], [`Value`], [`Error`], [`ErrorKind`], [`Result`], [`Source`], [`Span`].
//! * [`api`]: the front door's documentation: `wrt`, backends, threads.
//! * [`build`]: the build-script API: a program compiled to Rust in a crate's `OUT_DIR`.
//! * [`internals`]: everything else.

#![warn(missing_docs)]

pub mod api;
pub mod build;
pub mod internals;

// The internals under their old names, for the crate's own paths (`crate::ad::Vjp`, ...).
pub(crate) use internals::{
    ad, bench, budget, ccc, cli, deep, dual_reverse, error, eval, gradbench, ir, linearize, native,
    optimize, oracle, prim, random, simplify, source, steps, target, types, value,
};

#[doc(inline)]
pub use api::{Backend, Function, Program, Pullback, Pushforward, Via};
#[doc(inline)]
pub use internals::error::{Error, ErrorKind, Result, Source, Span};
#[doc(inline)]
pub use internals::value::Value;

/// The README's code examples, compiled and run as doctests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
