//! The pipeline's stages, for research use and for chad's own tests, benches and tools.
//!
//! **No stability promise**: everything here may change in any release. A Rust user who loads
//! programs, runs them and differentiates them needs only the crate root ([`crate::Program`],
//! [`crate::Function`], [`crate::Value`], [`crate::Error`], ...) and [`crate::build`] for
//! build scripts. What is here is what those are made of: the typed terms, the combinators,
//! the AD functors, the simplifier, the engine, the IR, the oracles. Registering a user
//! primitive with its derivative goes through [`prim`] (with [`source::load`] and
//! [`ad::grad`]), since [`crate::Program`] loads programs with the builtin primitives only.
//!
//! ```
//! use chad::internals::prim::Registry;
//! use chad::Value;
//!
//! let program = chad::internals::source::load(
//!     "def f (x : Real) (ys : Array Real) : Real =
//!        let g = \\(y : Real) -> x * sin y in
//!        sum (map g ys)",
//!     &Registry::builtin(),
//! )?;
//! let entry = program.entry(program.find("f").unwrap());
//! let args = [Value::Real(2.0), Value::reals(vec![0.0, 1.0])];
//!
//! // Route 1: evaluate the typed source term directly.
//! let direct = chad::internals::eval::eval_entry(&entry, &args)?;
//!
//! // Route 2: compile to combinators and evaluate through the generic `interpret`.
//! let comb = chad::internals::ccc::compile_entry(&entry);
//! assert_eq!(comb.dom.to_string(), "((Unit, Real), Array Real)");
//! let via_ccc = chad::internals::ccc::eval::run(
//!     &comb,
//!     &chad::internals::ccc::eval::context_value(&args),
//! )?;
//!
//! assert_eq!(direct.expect_real(), 2.0 * 1f64.sin());
//! assert_eq!(direct.same(&via_ccc), Some(true));
//!
//! // Reverse CHAD of the program as written, unsimplified: the AD functor alone.
//! let vjp = chad::internals::ad::Vjp::new(&entry)?;
//! let (value, grad) = vjp.grad(&args)?;
//! assert_eq!(value.expect_real(), 2.0 * 1f64.sin());
//! assert_eq!(grad[0].expect_real(), 1f64.sin());
//! # Ok::<(), chad::Error>(())
//! ```
//!
//! ## Modules
//!
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
//! * [`ir`]: the first-order IR derivatives are lowered to, its checker, interpreter and
//!   optimiser, and the Rust code generator; [`native`] compiles that Rust with `rustc` and
//!   loads it.
//! * [`oracle`]: derivative oracles independent of CHAD, for testing it: a dual-number
//!   forward-mode evaluator of source terms and central finite differences.
//! * [`dual_reverse`]: reverse mode by dual numbers at run time (Smeding & Vákár, POPL 2023):
//!   every scalar carries a backpropagator ID, the final algorithm resolves the tape from the
//!   highest ID down in O(T + I); an oracle for reverse CHAD and a taping baseline.
//! * [`bench`](mod@bench): measuring primal, forward and reverse time on the execution engine
//!   (`chad bench`), and the benchmark suite: its manifest, argument shapes and generated
//!   programs.
//! * [`value`]: run-time values ([`crate::Value`]) and their helpers.
//! * [`random`]: random well-typed programs and inputs, for property tests; [`fuzz`]: the
//!   fuzzing harness.
//! * [`error`]: errors with source positions ([`crate::Error`]).
//! * [`cli`]: the command line (`src/main.rs` calls [`cli::main`]); [`gradbench`]: the
//!   GradBench tool.
//! * [`budget`], [`steps`], [`deep`]: the memory budget, step counting, and the growable stack
//!   that keeps deep recursion over terms from overflowing.
//!
//! The internal modules are not at the crate root (the surface there is curated):
//!
//! ```compile_fail
//! use chad::{ad as _}; // private at the root now: chad::internals::ad is the path
//! ```
//!
//! The modules are declared here (with `#[path]`, their files staying where they are) and
//! re-exported to the rest of the crate at its root (`crate::ad`, ...), so that code inside
//! the crate names them as before.

#[path = "ad/mod.rs"]
pub mod ad;
#[path = "bench.rs"]
pub mod bench;
#[path = "budget.rs"]
pub mod budget;
#[path = "ccc/mod.rs"]
pub mod ccc;
#[path = "cli.rs"]
pub mod cli;
#[path = "deep.rs"]
pub mod deep;
#[path = "dual_reverse/mod.rs"]
pub mod dual_reverse;
#[path = "error.rs"]
pub mod error;
#[path = "eval.rs"]
pub mod eval;
#[path = "fuzz.rs"]
pub mod fuzz;
#[path = "gradbench.rs"]
pub mod gradbench;
#[path = "ir/mod.rs"]
pub mod ir;
#[path = "linearize.rs"]
pub mod linearize;
#[path = "native.rs"]
pub mod native;
#[path = "optimize.rs"]
pub mod optimize;
#[path = "oracle/mod.rs"]
pub mod oracle;
#[path = "prim.rs"]
pub mod prim;
#[path = "random.rs"]
pub mod random;
#[path = "simplify/mod.rs"]
pub mod simplify;
#[path = "source/mod.rs"]
pub mod source;
#[path = "steps.rs"]
pub mod steps;
#[path = "target/mod.rs"]
pub mod target;
#[path = "types.rs"]
pub mod types;
#[path = "value.rs"]
pub mod value;
