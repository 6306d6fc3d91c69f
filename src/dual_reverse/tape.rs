//! The tape of backpropagators and the two ways of running it backwards.
//!
//! Every non-constant scalar of a run carries a backpropagator **ID**, handed out in creation
//! order (call-by-value order of evaluation). The backpropagator with ID `i` is stored
//! defunctionalised (the paper's §9.2 `Contrib`): the list of its *edges* `(j, ∂)`, meaning
//! "called with cotangent `z`, stage a call of backpropagator `j` with `z · ∂`". The partial
//! derivatives `∂` are computed in the forward pass (§9.3: "it was taping all along"). The
//! first [`Tape::inputs`] IDs belong to the program's input scalars and have no edges (§9.1: the
//! cotangent an input ID accumulates *is* that input's gradient).
//!
//! A primitive whose result has several scalars (a user's primitive returning a tuple or an
//! array, whose derivative is a registered linear map) is a [`Block`]: its result scalars get
//! consecutive IDs `first..=last`, and its backpropagator is one linear map from the cotangent
//! of the whole result to that of the argument, run once for all of them.
//!
//! **Invariant** (what makes resolving correct): every edge and every block input points to a
//! *smaller* ID. It holds by construction: a backpropagator is created after the values it
//! depends on, and [`Tape::push`] rejects anything else.
//!
//! Running the tape backwards:
//!
//! * [`Tape::resolve`], the paper's final algorithm: one mutable accumulator array indexed by ID
//!   (the staging array), calls *staged* by adding into it (linear factoring:
//!   `f a + f b = f (a + b)` happens in place), resolved from the highest ID down. When ID `i`
//!   is reached, every call to it has been staged (all its callers have higher IDs), so each
//!   backpropagator runs at most once: O(T + I) for a run of T steps on an input of I scalars.
//!   Running a backpropagator adds to the accumulator instead of returning a value to be added
//!   (the Cayley transform of §7, made mutable as in §8).
//! * [`Tape::resolve_naive`]: the naive semantics (§5, Fig. 5), kept to show what the above
//!   fixes: calling a backpropagator immediately calls every backpropagator it depends on, so
//!   a value used `k` times has its backpropagator run `k` times, and sharing multiplies:
//!   `x_k = op(x_{k-1}, x_{k-1})` runs the input's backpropagator 2^k times.
//!
//! Both count the backpropagator calls they make ([`Stats::calls`]).

use crate::deep::deep;
use crate::error::{Error, ErrorKind, Result};
use crate::target::linear::LinFun;
use crate::types::Type;
use crate::value::Value;
use rustc_hash::FxHashMap;

/// A backpropagator ID. [`NONE`] is the zero backpropagator of a constant (the paper gives
/// constants an ID whose `Contrib` is empty; leaving them off the tape is the same thing).
pub type Id = u32;

/// The ID of constants: nothing to propagate to.
pub const NONE: Id = u32::MAX;

/// One edge of a backpropagator: stage a call of `to` with the incoming cotangent times
/// `partial`.
#[derive(Clone, Copy, Debug)]
pub struct Edge {
    /// The backpropagator called (a smaller ID).
    pub to: Id,
    /// The partial derivative it is called with (per unit of incoming cotangent).
    pub partial: f64,
}

/// The backpropagator of a primitive with a structured result: one linear map for all its
/// result scalars.
pub struct Block {
    /// The IDs of the result's scalars are `first..=last`, in [`real_leaves`] order.
    pub first: Id,
    /// The last result ID.
    pub last: Id,
    /// The result's type and value (the shape its cotangent is built in).
    pub result_ty: Type,
    /// The primal result.
    pub result: Value,
    /// The argument tuple's type and value (the shape of the derivative's output).
    pub arg_ty: Type,
    /// The primal argument tuple.
    pub arg: Value,
    /// The IDs of the argument's scalars, in [`real_leaves`] order ([`NONE`] for constants).
    pub inputs: Vec<Id>,
    /// The transposed derivative at the argument: `R2(result) ⊸ R2(argument)`.
    pub derivative: LinFun,
}

/// The tape: for each ID its edges (compressed: the edges of ID `i` are
/// `edges[ends[i-1]..ends[i]]`), and the blocks.
#[derive(Default)]
pub struct Tape {
    ends: Vec<usize>,
    edges: Vec<Edge>,
    inputs: usize,
    blocks: Vec<Block>,
    /// For each block's result ID, the block.
    block_of: FxHashMap<Id, usize>,
}

/// What a backwards run did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Backpropagator IDs created (input scalars included).
    pub ids: usize,
    /// Edges on the tape.
    pub edges: usize,
    /// Backpropagator calls made by the backwards run (each call runs one backpropagator's
    /// edges, or one block's linear map).
    pub calls: u64,
}

fn too_long() -> Error {
    Error::new(
        ErrorKind::Runtime,
        format!(
            "dual-numbers reverse AD: the run needs more than {} backpropagators",
            NONE - 1
        ),
    )
}

impl Tape {
    /// An empty tape.
    pub fn new() -> Tape {
        Tape::default()
    }

    /// Number of IDs handed out.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether no ID has been handed out.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Number of IDs that belong to input scalars (the first ones).
    pub fn inputs(&self) -> usize {
        self.inputs
    }

    fn next_id(&self) -> Result<Id> {
        Id::try_from(self.ends.len())
            .ok()
            .filter(|&i| i < NONE)
            .ok_or_else(too_long)
    }

    /// A new input scalar's ID. Inputs come before everything else.
    pub fn input(&mut self) -> Result<Id> {
        debug_assert_eq!(self.inputs, self.ends.len(), "inputs come first");
        let id = self.next_id()?;
        self.ends.push(self.edges.len());
        self.inputs += 1;
        Ok(id)
    }

    /// A new backpropagator with the given edges (those to [`NONE`] are dropped); [`NONE`] if
    /// no edge is left (the result depends on no input: a constant).
    pub fn push(&mut self, edges: impl IntoIterator<Item = Edge>) -> Result<Id> {
        let id = self.next_id()?;
        let start = self.edges.len();
        for e in edges {
            if e.to == NONE {
                continue;
            }
            if e.to >= id {
                // The invariant resolving relies on; a violation is a bug in the evaluator.
                return Err(Error::new(
                    ErrorKind::Runtime,
                    format!(
                        "internal error: backpropagator {id} calls a later one, {}",
                        e.to
                    ),
                ));
            }
            self.edges.push(e);
        }
        if self.edges.len() == start {
            return Ok(NONE);
        }
        self.ends.push(self.edges.len());
        Ok(id)
    }

    /// A block of `n ≥ 1` result IDs (see [`Block`]); `make` receives `first..=last` and
    /// returns the block. Returns the first ID.
    pub fn push_block(&mut self, n: usize, make: impl FnOnce(Id, Id) -> Block) -> Result<Id> {
        let first = self.next_id()?;
        let last = Id::try_from(self.ends.len() + n - 1)
            .ok()
            .filter(|&i| i < NONE)
            .ok_or_else(too_long)?;
        let block = make(first, last);
        let index = self.blocks.len();
        for id in first..=last {
            self.ends.push(self.edges.len());
            self.block_of.insert(id, index);
        }
        self.blocks.push(block);
        Ok(first)
    }

    fn edges_of(&self, id: Id) -> &[Edge] {
        let i = id as usize;
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.edges[start..self.ends[i]]
    }

    fn stats(&self, calls: u64) -> Stats {
        Stats {
            ids: self.len(),
            edges: self.edges.len(),
            calls,
        }
    }

    /// The paper's final algorithm. `seeds` are the staged calls the output cotangent makes
    /// (ID and cotangent; repeated IDs are added). Returns the accumulated cotangent of every
    /// ID (those of the inputs are the gradient) and the statistics.
    pub fn resolve(&self, seeds: &[(Id, f64)]) -> Result<(Vec<f64>, Stats)> {
        let n = self.len();
        // The staging array: the accumulated argument of every staged call, and whether the
        // backpropagator was called at all (an unstaged one is never run, so an infinite
        // partial derivative behind it cannot turn a zero into NaN).
        let mut acc = vec![0.0; n];
        let mut staged = vec![false; n];
        for &(id, ct) in seeds {
            if id != NONE {
                acc[id as usize] += ct;
                staged[id as usize] = true;
            }
        }
        let mut calls = 0u64;
        // From the highest ID down to the first non-input: every caller of `i` has a higher
        // ID, so when `i` is reached its staged calls are all in `acc[i]`.
        let mut i = n;
        while i > self.inputs {
            i -= 1;
            let id = i as Id;
            if !self.blocks.is_empty()
                && let Some(&b) = self.block_of.get(&id)
            {
                let block = &self.blocks[b];
                // A block runs once, at its last ID, for all its result IDs (whose callers all
                // come after the block, so they are complete too).
                let first = block.first as usize;
                if staged[first..=i].iter().any(|&s| s) {
                    calls += 1;
                    let cts = acc[first..=i].to_vec();
                    run_block(block, &cts, |to, ct| {
                        acc[to as usize] += ct;
                        staged[to as usize] = true;
                    })?;
                }
                i = first;
                continue;
            }
            if !staged[i] {
                continue;
            }
            calls += 1;
            let z = acc[i];
            for e in self.edges_of(id) {
                acc[e.to as usize] += z * e.partial;
                staged[e.to as usize] = true;
            }
        }
        // The input IDs' own calls (each adds its cotangent to the gradient, §9.1).
        calls += staged[..self.inputs].iter().filter(|&&s| s).count() as u64;
        Ok((acc, self.stats(calls)))
    }

    /// The naive semantics: every call runs at once, recursively. Fails if more than
    /// `max_calls` calls would be made (the count is exponential in the sharing depth).
    pub fn resolve_naive(&self, seeds: &[(Id, f64)], max_calls: u64) -> Result<(Vec<f64>, Stats)> {
        let mut run = Naive {
            tape: self,
            acc: vec![0.0; self.inputs],
            calls: 0,
            max_calls,
        };
        for &(id, ct) in seeds {
            if id != NONE {
                run.call(id, ct)?;
            }
        }
        let calls = run.calls;
        let mut acc = run.acc;
        acc.resize(self.len(), 0.0);
        Ok((acc, self.stats(calls)))
    }
}

struct Naive<'a> {
    tape: &'a Tape,
    acc: Vec<f64>,
    calls: u64,
    max_calls: u64,
}

impl Naive<'_> {
    fn call(&mut self, id: Id, z: f64) -> Result<()> {
        deep(|| {
            self.calls += 1;
            if self.calls > self.max_calls {
                return Err(Error::new(
                    ErrorKind::Runtime,
                    format!(
                        "naive dual-numbers reverse AD: more than {} backpropagator calls",
                        self.max_calls
                    ),
                ));
            }
            let i = id as usize;
            if i < self.tape.inputs {
                self.acc[i] += z;
                return Ok(());
            }
            if let Some(&b) = self.tape.block_of.get(&id) {
                // One output of a block: its linear map applied to the one-hot cotangent.
                let block = &self.tape.blocks[b];
                let mut cts = vec![0.0; (block.last - block.first + 1) as usize];
                cts[(id - block.first) as usize] = z;
                let mut calls = Vec::new();
                run_block(block, &cts, |to, ct| calls.push((to, ct)))?;
                for (to, ct) in calls {
                    self.call(to, ct)?;
                }
                return Ok(());
            }
            for e in self.tape.edges_of(id) {
                self.call(e.to, z * e.partial)?;
            }
            Ok(())
        })
    }
}

/// Runs a block's linear map on the cotangents of its result scalars and stages a call for
/// every input scalar of its argument.
fn run_block(block: &Block, cts: &[f64], mut stage: impl FnMut(Id, f64)) -> Result<()> {
    let mut next = cts.iter().copied();
    let ct = with_leaves(&block.result_ty, &block.result, &mut || {
        next.next().unwrap_or(0.0)
    });
    let lin = crate::ad::to_tangent(&block.result_ty, &block.result, &ct)?;
    let out = block.derivative.apply(&lin)?;
    let arg_ct = crate::ad::from_tangent(&block.arg_ty, &block.arg, &out);
    for (&to, ct) in block.inputs.iter().zip(real_leaves(&arg_ct)) {
        if to != NONE {
            stage(to, ct);
        }
    }
    Ok(())
}

/// A tangent of `v : ty` (first-order) with its Real leaves drawn from `next` in
/// [`real_leaves`] order.
pub fn with_leaves(ty: &Type, v: &Value, next: &mut dyn FnMut() -> f64) -> Value {
    deep(|| match ty {
        Type::Real => Value::Real(next()),
        Type::Int | Type::Bool | Type::Unit | Type::Fun(_) => Value::Unit,
        Type::Prod(p) => {
            let (a, b) = v.expect_pair();
            let ta = with_leaves(&p.0, a, next);
            Value::pair(ta, with_leaves(&p.1, b, next))
        }
        Type::Sum(p) => match v {
            Value::Inl(a) => Value::inl(with_leaves(&p.0, a, next)),
            Value::Inr(b) => Value::inr(with_leaves(&p.1, b, next)),
            _ => Value::Unit,
        },
        Type::Array(e) => {
            let t = e.tangent().unwrap_or(Type::Unit);
            let items = v
                .array_items()
                .iter()
                .map(|x| with_leaves(e, x, next))
                .collect();
            Value::array(&t, items)
        }
    })
}

/// The Real leaves of a first-order value, depth first, left to right.
pub fn real_leaves(v: &Value) -> Vec<f64> {
    fn go(v: &Value, out: &mut Vec<f64>) {
        deep(|| match v {
            Value::Real(x) => out.push(*x),
            Value::Pair(p) => {
                go(&p.0, out);
                go(&p.1, out);
            }
            Value::Inl(x) | Value::Inr(x) => go(x, out),
            Value::RealArray(xs) => out.extend(xs.iter()),
            Value::Array(xs) => xs.iter().for_each(|x| go(x, out)),
            _ => {}
        })
    }
    let mut out = Vec::new();
    go(v, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edge(to: Id, partial: f64) -> Edge {
        Edge { to, partial }
    }

    /// The paper's §6 example: f4 = f2 z + f3 (2z), f3 = f2 (4z) + f1 (5z), f2 = f1 (2z) +
    /// f1 (3z), with f1 an input.
    #[test]
    fn resolving_runs_each_backpropagator_once() {
        let mut t = Tape::new();
        let f1 = t.input().unwrap();
        let f2 = t.push([edge(f1, 2.0), edge(f1, 3.0)]).unwrap();
        let f3 = t.push([edge(f2, 4.0), edge(f1, 5.0)]).unwrap();
        let f4 = t.push([edge(f2, 1.0), edge(f3, 2.0)]).unwrap();
        let (acc, stats) = t.resolve(&[(f4, 1.0)]).unwrap();
        // df4/df1 = 5 (through f2) + 2 (4 · 5 + 5) (through f3) = 55.
        assert_eq!(acc[f1 as usize], 55.0);
        assert_eq!(stats.calls, 4);
        let (acc, naive) = t.resolve_naive(&[(f4, 1.0)], 1000).unwrap();
        assert_eq!(acc[f1 as usize], 55.0);
        // f4, f2 twice, f3, f1 five times.
        assert_eq!(naive.calls, 9);
        assert!(t.resolve_naive(&[(f4, 1.0)], 8).is_err());
    }

    #[test]
    fn constants_and_unreached_backpropagators() {
        let mut t = Tape::new();
        let x = t.input().unwrap();
        assert_eq!(t.push([edge(NONE, 2.0)]).unwrap(), NONE);
        t.push([edge(x, f64::INFINITY)]).unwrap();
        let y = t.push([edge(x, 3.0)]).unwrap();
        let (acc, stats) = t.resolve(&[(y, 1.0)]).unwrap();
        // The backpropagator with the infinite partial is never called (a call with cotangent
        // 0 would add 0 · inf = NaN).
        assert_eq!(acc[x as usize], 3.0);
        assert_eq!(stats.calls, 2);
        assert!(t.push([edge(7, 1.0)]).is_err());
    }
}
