//! The library's one recipe for running a definition and its derivatives fast: optimise, then
//! differentiate, then simplify, then compile for the execution engine, each once.
//!
//! ```text
//! entry --optimize--> optimised entry --embed, simplify, compile--> primal Code
//!                     optimised entry --with_respect_to, forward CHAD, simplify--> Jvp
//!                     optimised entry --with_respect_to, reverse CHAD, simplify--> Vjp
//! ```
//!
//! [`Optimized`] holds the optimised entry ([`crate::optimize`]: simplified, its called helper
//! functions inlined, so that AD differentiates the first-order program the primal runs) and
//! makes each piece of code the first time it is asked for, then keeps it. Every route that
//! runs programs goes through it: `chad::Function` (and so every CLI command on the engine),
//! `chad bench` ([`crate::bench::Bench`]) and the one-call [`super::grad`], [`super::jvp`] and
//! [`super::vjp`]. (The `--via transpose` route adds the transposed forward derivative on top,
//! in `chad::Function`, since [`crate::linearize`] depends on this module.)

use super::{Jvp, Vjp, with_respect_to};
use crate::error::Result;
use crate::optimize::optimize;
use crate::simplify::simplify;
use crate::source::term::Entry;
use crate::target::embed;
use crate::target::engine::Code;
use crate::value::Value;
use std::cell::OnceCell;

/// A definition optimised once, with its primal and derivative code made on first use.
pub struct Optimized {
    entry: Entry,
    optimized: Entry,
    /// The optimised entry with the unselected parameters made constants.
    selected: Entry,
    primal: OnceCell<Code>,
    jvp: OnceCell<Jvp>,
    vjp: OnceCell<Vjp>,
}

impl Optimized {
    /// Optimises `entry` (differentiating with respect to every parameter).
    pub fn new(entry: &Entry) -> Optimized {
        Optimized::with_respect_to(entry, &vec![true; entry.params.len()])
    }

    /// Optimises `entry`; its derivatives are with respect to the parameters `wrt` selects
    /// (one flag per parameter; the others are constants: [`with_respect_to`]).
    pub fn with_respect_to(entry: &Entry, wrt: &[bool]) -> Optimized {
        let optimized = optimize(entry);
        let selected = with_respect_to(&optimized, wrt);
        Optimized {
            entry: entry.clone(),
            optimized,
            selected,
            primal: OnceCell::new(),
            jvp: OnceCell::new(),
            vjp: OnceCell::new(),
        }
    }

    /// The definition as given.
    pub fn entry(&self) -> &Entry {
        &self.entry
    }

    /// The optimised definition, with the unselected parameters made constants: what the
    /// derivatives differentiate.
    pub fn differentiated(&self) -> &Entry {
        &self.selected
    }

    /// The primal code: the optimised definition embedded in the target language, simplified
    /// and compiled.
    pub fn primal(&self) -> &Code {
        self.primal.get_or_init(|| {
            let (params, body) = embed::entry(&self.optimized);
            Code::compile(&params, &simplify(&body))
        })
    }

    /// The value of the definition at `args` (checked against the parameter types), on the
    /// primal code.
    pub fn eval(&self, args: &[Value]) -> Result<Value> {
        crate::eval::check_args(&self.entry, args)?;
        self.primal().run(args)
    }

    /// Forward mode: forward CHAD of the optimised definition, simplified, its code compiled.
    /// Fails on what forward mode does not support (see [`Jvp::new`]).
    pub fn jvp(&self) -> Result<&Jvp> {
        if let Some(j) = self.jvp.get() {
            return Ok(j);
        }
        let j = Jvp::new(&self.selected)?.map_body(simplify);
        j.code();
        Ok(self.jvp.get_or_init(|| j))
    }

    /// Reverse mode: reverse CHAD of the optimised definition, simplified, its code compiled.
    /// Fails on what reverse mode does not support (see [`Vjp::new`]).
    pub fn vjp(&self) -> Result<&Vjp> {
        if let Some(v) = self.vjp.get() {
            return Ok(v);
        }
        let v = Vjp::new(&self.selected)?.map_body(simplify);
        v.code();
        Ok(self.vjp.get_or_init(|| v))
    }
}
