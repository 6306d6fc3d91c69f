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
//! Underneath, the stages are separate and public, for research use:
//!
//! ```
//! use chad::prim::Registry;
//! use chad::value::Value;
//!
//! let program = chad::source::load(
//!     "def f (x : Real) (ys : Array Real) : Real =
//!        let g = \\(y : Real) -> x * sin y in
//!        sum (map g ys)",
//!     &Registry::builtin(),
//! )?;
//! let entry = program.entry(program.find("f").unwrap());
//! let args = [Value::Real(2.0), Value::reals(vec![0.0, 1.0])];
//!
//! // Route 1: evaluate the typed source term directly.
//! let direct = chad::eval::eval_entry(&entry, &args)?;
//!
//! // Route 2: compile to combinators and evaluate through the generic `interpret`.
//! let comb = chad::ccc::compile_entry(&entry);
//! assert_eq!(comb.dom.to_string(), "((Unit, Real), Array Real)");
//! let via_ccc = chad::ccc::eval::run(&comb, &chad::ccc::eval::context_value(&args))?;
//!
//! assert_eq!(direct.expect_real(), 2.0 * 1f64.sin());
//! assert_eq!(direct.same(&via_ccc), Some(true));
//!
//! // Reverse CHAD of the program as written, unsimplified: the AD functor alone.
//! let vjp = chad::ad::Vjp::new(&entry)?;
//! let (value, grad) = vjp.grad(&args)?;
//! assert_eq!(value.expect_real(), 2.0 * 1f64.sin());
//! assert_eq!(grad[0].expect_real(), 1f64.sin());
//! # Ok::<(), chad::error::Error>(())
//! ```
//!
//! ## Modules
//!
//! * [`api`]: the front door: [`Program`], [`Function`], [`Pullback`], [`Pushforward`].
//! * [`types`]: source types, the objects of the category.
//! * [`source`]: surface syntax, parser, bidirectional checker, typed core terms, printer.
//! * [`prim`]: primitive operations, registered once with their derivatives.
//! * [`ccc`]: combinators, the compiler, the structure traits and `interpret`, and the models
//!   (evaluation, type reconstruction, printing).
//! * [`eval`]: the direct evaluator of source terms.
//! * [`ad`]: forward and reverse CHAD as models of the combinator structure (`Σ_C L` and
//!   `Σ_C L^op`), `jvp`/`vjp`/`grad` for programs, and `check_primitive` for derivatives.
//! * [`linearize`]: reverse mode the other way (YOLO): forward CHAD, unzipped into a primal
//!   and a linear map, transposed ([`target::transpose`]); `linearize` gives a reusable linear
//!   map of tangents and `linear_transpose` its transpose.
//! * [`simplify`]: the simplifier of target terms: named, switchable rewrite rules (the CHAD
//!   paper's Table 1 and those the linear fragment needs) run to a fixed point in linear-time
//!   passes.
//! * [`target`]: the target language derivatives are written in: linear types, linear terms, a
//!   checker enforcing linearity, an evaluator, a printer, the embedding of source terms, and
//!   [`target::linear`], where linear maps and copowers are abstract types.
//! * [`optimize`]: the source-to-source pass run before AD: the program simplified and its
//!   called helper functions inlined, so that AD differentiates the first-order program the
//!   primal runs.
//! * [`oracle`]: derivative oracles independent of CHAD, for testing it: a dual-number
//!   forward-mode evaluator of source terms and central finite differences.
//! * [`dual_reverse`]: reverse mode by dual numbers at run time (Smeding & Vákár, POPL 2023):
//!   every scalar carries a backpropagator ID, the final algorithm resolves the tape from the
//!   highest ID down in O(T + I); an oracle for reverse CHAD and a taping baseline.
//! * [`bench`](mod@bench): measuring primal, forward and reverse time on the execution engine (`chad
//!   bench`), and the benchmark suite: its manifest, argument shapes and generated programs.
//! * [`value`]: run-time values.
//! * [`random`]: random well-typed programs and inputs, for property tests.
//! * [`error`]: errors with source positions.

#![warn(missing_docs)]

pub mod ad;
pub mod api;
pub mod bench;
pub mod budget;
pub mod build;
pub mod ccc;
pub mod cli;
pub mod deep;
pub mod dual_reverse;
pub mod error;
pub mod eval;
pub mod fuzz;
pub mod gradbench;
pub mod ir;
pub mod linearize;
pub mod native;
pub mod optimize;
pub mod oracle;
pub mod prim;
pub mod random;
pub mod simplify;
pub mod source;
pub mod steps;
pub mod target;
pub mod types;
pub mod value;

pub use api::{Backend, Function, Program, Pullback, Pushforward, Via};
pub use error::{Error, ErrorKind, Result, Source, Span};
pub use value::Value;

/// The README's code examples, compiled and run as doctests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
