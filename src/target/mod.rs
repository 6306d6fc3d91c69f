//! The target language: the source language extended with linear types, the language CHAD's
//! derivatives are written in (DESIGN.md §4; CHAD paper §4 and §9).
//!
//! * [`types`]: Cartesian types [`Ty`] (the source types, linear functions `L ⊸ L'`, and
//!   `Lin L`) and linear types [`LTy`], which denote commutative monoids.
//! * [`term`]: Cartesian terms [`Term`] and linear terms [`LTerm`] (terms linear in the linear
//!   variables in scope).
//! * [`check`]: the type checker, which also enforces the linear discipline.
//! * [`linear`]: run-time linear values, linear maps (an abstract trait) and copowers (an
//!   abstract list type). The only module that sees their representation.
//! * [`eval`]: the reference evaluator (a tree-walking interpreter).
//! * [`engine`]: the execution engine: terms compiled once, run many times.
//! * [`mod@print`]: the pretty printer.
//! * [`embed`]: the embedding of source terms; [`unembed`], its inverse on the Cartesian
//!   fragment.
//! * [`testing`]: random linear types, values and maps, and observations of linear values, for
//!   property tests.
//! * [`random`]: random well-typed linear terms, for property tests.
//! * [`concretize`]: any target term as an ordinary source term (linear types represented by
//!   source types, [`linear::concrete`]), for differentiating derivative code again.
//! * [`transpose`]: transposition of linear maps (YOLO), and of the linear maps inside any term.

pub mod check;
pub mod concretize;
pub mod embed;
pub mod engine;
pub mod eval;
pub mod linear;
pub mod print;
pub mod random;
pub mod term;
pub mod testing;
pub mod transpose;
pub mod types;
pub mod unembed;

pub use term::{LTerm, Term};
pub use types::{LTy, Ty};
