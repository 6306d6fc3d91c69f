//! Source-to-source optimisation before AD: the program is simplified, and its helper functions
//! inlined, *before* it is differentiated, exactly as the primal is simplified before it runs.
//!
//! ```text
//! source entry --embed--> target term --simplify, functionInline, simplify, ...-->
//!     target term of the Cartesian fragment --unembed--> source entry
//! ```
//!
//! **Why.** The simplifier β-reduces and inlines the closures of a program: a primal written
//! with closures (a function returning a function, a helper called four times) runs first-order.
//! AD applied to the program *as written* differentiates the closures: every call becomes, in
//! the derivative, a closure call carrying a tape (CHAD's `F/R(curry)`, `F/R(eval)`), and the
//! derivative costs many times the first-order primal. Optimising the source first gives AD the
//! program the primal actually runs.
//!
//! **Why it is sound.** The rewrites are βη-conversions and let-manipulations, equalities of the
//! free cartesian closed category (with coproducts and arrays) that the source compiles into.
//! CHAD's forward and reverse AD are structure-preserving functors *out of that free category*:
//! equal morphisms have equal images. So differentiating the optimised program gives the same
//! derivative, as a function, as differentiating the original one (up to floating-point
//! reassociation by `algebra`, and runtime errors in code that is dead: see
//! [`crate::simplify`]); only its cost changes. `theory-notes/06-performance.md` measures it.
//!
//! **Fallback.** The simplifier's output on a source program is in the Cartesian fragment (it
//! introduces no linear forms there), so it unembeds; if it ever did not, or the result failed
//! the type check against the original, [`optimize`] returns the entry unchanged
//! ([`try_optimize`] says why). It never panics.
//!
//! ```
//! let program = chad::internals::source::load(
//!     "def tr (a : Array (Array Real)) : Real = sum (build (length a) (\\(i : Int) -> a ! i ! i))
//!      def f (a : Array (Array Real)) : Real = tr a + tr a",
//!     &chad::internals::prim::Registry::builtin(),
//! )?;
//! let entry = program.entry(1);
//! let opt = chad::internals::optimize::optimize(&entry);
//! // `tr` is gone: its two calls were inlined and β-reduced (and then shared).
//! assert!(entry.body.to_string().contains("let tr"));
//! assert!(!opt.body.to_string().contains("let tr"));
//! assert_eq!(opt.body.ty, entry.body.ty);
//! # Ok::<(), chad::Error>(())
//! ```

use crate::simplify::inline::{Budget, inline_functions};
use crate::simplify::simplify;
use crate::source::term::Entry;
use crate::target::{check, embed, unembed};

/// How [`try_optimize_with`] optimises.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Options {
    /// Whether to inline let-bound functions that are only called (`functionInline`, see
    /// [`crate::simplify::inline`]); without it, only [`simplify`] runs.
    pub inline: bool,
    /// The size budget of each inlining round.
    pub budget: Budget,
    /// The most inlining rounds (each followed by [`simplify`]; a round can expose more calls,
    /// e.g. of a function passed to an inlined one).
    pub rounds: usize,
}

impl Default for Options {
    /// Inlining on, [`Budget::default`], 4 rounds.
    fn default() -> Options {
        Options {
            inline: true,
            budget: Budget::default(),
            rounds: 4,
        }
    }
}

/// The entry with its body simplified and its called helper functions inlined (with
/// [`Options::default`]); the entry unchanged if that fails (see [`try_optimize`]).
pub fn optimize(entry: &Entry) -> Entry {
    try_optimize(entry).unwrap_or_else(|_| entry.clone())
}

/// [`optimize`], or why the optimised term could not be read back as the entry's body.
pub fn try_optimize(entry: &Entry) -> Result<Entry, String> {
    try_optimize_with(entry, &Options::default())
}

/// The optimisation with the given options, or why its result could not be read back as the
/// entry's body (a target-only form, or a type or scope error, which would be a bug of the
/// simplifier). The result has the same name and parameters (the same variables) as `entry`,
/// and a body of the same type.
pub fn try_optimize_with(entry: &Entry, opts: &Options) -> Result<Entry, String> {
    let (params, body) = embed::entry(entry);
    let mut t = simplify(&body);
    if opts.inline {
        for _ in 0..opts.rounds {
            let (inlined, n) = inline_functions(&t, &opts.budget);
            if n == 0 {
                break;
            }
            t = simplify(&inlined);
        }
    }
    // Internal invariants, checked rather than assumed: the term is well-scoped in the
    // parameters and has the original type.
    let ty = check::check(&t, &params).map_err(|e| e.message().to_string())?;
    if ty.to_source().as_ref() != Some(&entry.body.ty) {
        return Err(format!(
            "the optimised body has type `{ty}`, the original `{}`",
            entry.body.ty
        ));
    }
    let out = unembed::entry(&entry.name, &params, &t)?;
    debug_assert_eq!(out.body.ty, entry.body.ty);
    Ok(out)
}
