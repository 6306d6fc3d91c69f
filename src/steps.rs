//! The step budget of loops (`--max-steps`): every iteration of a `loop` (and of `fold`,
//! `iterate` and `while`, which are loops), in every evaluator, takes one step from a
//! thread-local budget; a program that runs more steps in total than the budget allows stops
//! with a runtime error at the loop's position instead of running forever.
//!
//! The budget is unlimited unless [`set_max_steps`] sets one (the command line does so for
//! `--max-steps N`). [`Budget`] scopes a limit for a test.

use crate::error::{Error, Result, Span};
use std::cell::Cell;

thread_local! {
    static LIMIT: Cell<Option<u64>> = const { Cell::new(None) };
    static USED: Cell<u64> = const { Cell::new(0) };
}

/// Sets (or with `None` clears) the maximum number of loop steps in total, and resets the count.
pub fn set_max_steps(limit: Option<u64>) {
    LIMIT.with(|l| l.set(limit));
    USED.with(|u| u.set(0));
}

/// The steps taken since the budget was last set.
pub fn used() -> u64 {
    USED.with(|u| u.get())
}

/// The steps left in the budget (`None`: unlimited); the native backend runs with this
/// budget.
pub fn remaining() -> Option<u64> {
    LIMIT
        .with(|l| l.get())
        .map(|limit| limit.saturating_sub(used()))
}

/// The error of a program that ran more than `limit` loop steps.
pub fn exceeded(limit: u64) -> Error {
    Error::runtime(format!(
        "the program ran more than {limit} loop steps and recursive calls (the limit set by \
         --max-steps)"
    ))
}

/// Takes one loop step (a loop continuing with a next state: `iterate n` takes `n`, a `fold`
/// one per element): an error at `at` if the budget is exhausted.
#[inline]
pub fn step(at: Span) -> Result<()> {
    let Some(limit) = LIMIT.with(|l| l.get()) else {
        return Ok(());
    };
    let used = USED.with(|u| {
        let n = u.get() + 1;
        u.set(n);
        n
    });
    if used > limit {
        let e = exceeded(limit);
        // An unknown position (`Span::default()`) is left for the caller to fill in.
        return Err(if at == Span::default() {
            e
        } else {
            e.with_span(at)
        });
    }
    Ok(())
}

/// A scoped step limit: sets it on creation and clears it when dropped.
pub struct Budget(());

impl Budget {
    /// Limits the loops run until the value is dropped to `limit` steps in total.
    pub fn new(limit: u64) -> Budget {
        set_max_steps(Some(limit));
        Budget(())
    }
}

impl Drop for Budget {
    fn drop(&mut self) {
        set_max_steps(None);
    }
}

/// Runs the iteration combinator on values: applies `f` to the state while it returns
/// `inl` (the next state) and returns the payload of its first `inr`, taking one step of the
/// budget per `inl` (an error at `at` past the limit). A loop of the program is a loop
/// here, never recursion on the Rust stack.
pub fn run_loop(
    mut f: impl FnMut(crate::value::Value) -> Result<crate::value::Value>,
    x: crate::value::Value,
    at: Span,
) -> Result<crate::value::Value> {
    use crate::value::Value;
    let mut state = x;
    loop {
        match f(state)? {
            Value::Inl(v) => {
                step(at)?;
                state = take(v);
            }
            Value::Inr(v) => return Ok(take(v)),
            other => panic!("internal error: a loop step returned {other}, not a sum"),
        }
    }
}

/// The value inside a sum's payload (moved out when unshared).
pub fn take(v: std::rc::Rc<crate::deep::Deep<crate::value::Value>>) -> crate::value::Value {
    match std::rc::Rc::try_unwrap(v) {
        Ok(d) => d.into_inner(),
        Err(rc) => (**rc).clone(),
    }
}

/// [`run_loop`] with a tape: each application of `f` returns `(A + B, T)`; the result is
/// `(B, [T₀, .., Tₙ])`, one entry per step run (the `loopTape` form of the target language).
pub fn run_loop_tape(
    mut f: impl FnMut(crate::value::Value) -> Result<crate::value::Value>,
    x: crate::value::Value,
    at: Span,
) -> Result<crate::value::Value> {
    use crate::value::Value;
    let mut state = x;
    let mut tape = Vec::new();
    loop {
        let (next, entry) = match f(state)? {
            Value::Pair(p) => match std::rc::Rc::try_unwrap(p) {
                Ok(d) => d.into_inner(),
                Err(rc) => (rc.0.clone(), rc.1.clone()),
            },
            other => panic!("internal error: a taped loop step returned {other}, not a pair"),
        };
        tape.push(entry);
        match next {
            Value::Inl(v) => {
                step(at)?;
                state = take(v);
            }
            Value::Inr(v) => return Ok(Value::pair(take(v), Value::array_of(tape))),
            other => panic!("internal error: a loop step returned {other}, not a sum"),
        }
    }
}

/// `lchain fs d` or `lchainRev fs v` (see [`crate::target::term::LTermKind::Chain`]): the
/// recorded step derivatives of a loop run over in a Rust loop; in reverse, the environment's
/// cotangent is accumulated in a value this loop owns, so sparse contributions (one-hots of a
/// folded array) are added in place. With `outs` (a taped loop's `lchainScan`/`lchainScanRev`)
/// every step also outputs the tangent of its record (collected into an array), or takes the
/// cotangent of its record (element `k` of the second half of the argument).
pub fn chain(
    fs: &crate::value::Value,
    init: crate::target::linear::Lin,
    rev: bool,
    outs: bool,
) -> Result<crate::target::linear::Lin> {
    use crate::target::linear::Lin;
    let n = fs.array_len();
    let step = |k: usize| -> Result<crate::target::linear::LinFun> {
        Ok(fs.index(k as i64)?.expect_lin_fun().clone())
    };
    if rev {
        let (init, records) = if outs {
            let (v, cs) = init.split();
            (v, Some(cs))
        } else {
            (init, None)
        };
        let mut acc = Lin::zero();
        let mut w = Lin::right(init);
        for k in (0..n).rev() {
            let arg = match &records {
                Some(cs) => Lin::pair(w, cs.index(k as i64)),
                None => w,
            };
            let r = step(k)?.apply_owned(arg)?;
            let (g, a) = r.split();
            acc = Lin::plus(acc, g);
            w = Lin::left(a);
        }
        Ok(Lin::pair(acc, w.from_left()))
    } else {
        let (g, a) = init.split();
        let mut w = Lin::left(a);
        let mut records = Vec::with_capacity(if outs { n } else { 0 });
        for k in 0..n {
            w = step(k)?.apply_owned(Lin::pair(g.clone(), w.from_left()))?;
            if outs {
                let (next, c) = w.split();
                records.push(c);
                w = next;
            }
        }
        Ok(if outs {
            Lin::pair(w.from_right(), Lin::array(records))
        } else {
            w.from_right()
        })
    }
}

// ----- recursion (`def rec`) -----

/// The default recursion depth limit: nested calls of recursive functions (`def rec`) that
/// may be active at once.
pub const DEFAULT_MAX_DEPTH: u64 = 100_000;

thread_local! {
    static MAX_DEPTH: Cell<u64> = const { Cell::new(DEFAULT_MAX_DEPTH) };
    static DEPTH: Cell<u64> = const { Cell::new(0) };
}

/// Sets the recursion depth limit (nested active calls of recursive functions).
pub fn set_max_depth(limit: u64) {
    MAX_DEPTH.with(|l| l.set(limit));
}

/// The recursion depth limit in force.
pub fn max_depth() -> u64 {
    MAX_DEPTH.with(|l| l.get())
}

/// The error of a recursion nested deeper than `limit` calls (every backend reports this one).
pub fn depth_exceeded(limit: u64) -> Error {
    Error::runtime(format!(
        "recursion deeper than {limit} nested calls (the recursion depth limit) in this \
         recursive definition"
    ))
}

/// Restores the depth counter when a call returns (or unwinds).
struct DepthGuard;

impl Drop for DepthGuard {
    fn drop(&mut self) {
        DEPTH.with(|d| d.set(d.get().saturating_sub(1)));
    }
}

/// Runs one call of a recursive function defined at `at`: takes one step of the
/// `--max-steps` budget, counts the call against the recursion depth limit (a runtime error
/// at `at` past it), and runs `body` through [`crate::deep::deep`], so the Rust stack grows
/// by segments instead of overflowing. Every evaluator's fixpoint goes through here.
pub fn recursive_call<T>(at: Span, body: impl FnOnce() -> Result<T>) -> Result<T> {
    step(at)?;
    let limit = max_depth();
    let depth = DEPTH.with(|d| d.get()) + 1;
    if depth > limit {
        let e = depth_exceeded(limit);
        return Err(if at == Span::default() {
            e
        } else {
            e.with_span(at)
        });
    }
    DEPTH.with(|d| d.set(depth));
    let _guard = DepthGuard;
    crate::deep::deep(body)
}

/// `fix F` on values, for a functional `F : (A → B) → (A → B)` (a closure): the function
/// `g` with `g a = F g a`. Each application is one [`recursive_call`] at `at`. Shared by the
/// evaluators whose function values are [`crate::value::Closure`]s (source, target, engine).
pub struct FixClosure {
    /// The functional `F`.
    pub functional: crate::value::Value,
    /// The recursive definition's position (for the depth and step limits' errors).
    pub at: Span,
}

impl FixClosure {
    /// The fixpoint `fix F` as a function value.
    pub fn value(functional: crate::value::Value, at: Span) -> crate::value::Value {
        crate::value::Value::Closure(std::rc::Rc::new(FixClosure { functional, at }))
    }
}

impl crate::value::Closure for FixClosure {
    fn apply(&self, arg: crate::value::Value) -> Result<crate::value::Value> {
        recursive_call(self.at, || {
            let me = FixClosure::value(self.functional.clone(), self.at);
            self.functional.apply(me)?.apply(arg)
        })
    }
}
