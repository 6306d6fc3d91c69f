//! Flat scalar code: a run of consecutive let bindings of scalar work (see the module doc of
//! [`super`]) compiled into one vector of small instructions over a register file, run by one
//! loop, instead of one tree of boxed closures per binding.
//!
//! A binding is *flat* if it binds a variable of type Real to a tree of [`Scalar`] real
//! primitives over literals, variables and places (`let x = snd y * 0.5 + sqrt z`), or, in a
//! linear let chain, a linear variable of type Real to a tree of `0`, `+`, scaling by such a
//! real expression, linear variables and linear places (`let lin d = 0.5 / sqrt x * (x * e +
//! snd (fst t))`; a place is read by reference, as [`Compiler::lin_place`] does, so the
//! forward derivative's reads of the input tangent's components do not break a run).
//!
//! * Registers: one file of `f64` (Cartesian) and one of `Option<f64>` (linear reals, `None`
//!   for zero, with [`plus_opt`]/[`scale_opt`], i.e. exactly [`Lin::plus`]/[`Lin::scale`]).
//!   Literals get registers of their own, written once when the code is made. A variable of
//!   the enclosing frame is loaded into a register at its first read in the run, and kept there
//!   until its last.
//! * A variable bound in the run whose every use is a register read in the run lives in a
//!   register only; any other is also stored into its frame slot as soon as it is bound.
//!   Registers are reused once their last reader has run, so the file stays small.
//! * Only places (indexing) can fail; they run at their position in the order of the
//!   reference evaluator (left operand first, the scale factor before the scaled term).
//! * A straight run's adjacent instruction pairs whose intermediate register dies are fused
//!   into one instruction ([`fuse`]: a scaling into an `LAxpy`, chains of scalings, a captured
//!   real loaded for one use, a real computed and stored for a later closure), so derivative
//!   code pays one dispatch where it paid two.
//! * A *flat loop* ([`FlatLoop`]) runs a whole `lsum (lbuild ..)` or unzipped linear `lbuild`
//!   whose body is flat: its loop-invariant reads run once before the loop, the element at the
//!   loop's index is read from an array resolved before it, and the body's tuple leaves are
//!   outputs, summed in registers or stored in unboxed columns. Integer bindings run in a
//!   third register file (in the element state, with their checked arithmetic and errors), and
//!   a leaf that is a sum of one-hots adds into a dense accumulator at the computed index.

use super::{Compiler, Frame, IFn, LRFn, Place, RFn, plus_opt, scale_opt};
use crate::deep::deep;
use crate::error::{Error, Result, Span};
use crate::prim::{Prim, Scalar};
use crate::target::linear::Lin;
use crate::target::term::{LTerm, LTermKind, Pat, Term, TermKind, Var, VarId};
use crate::target::types::{LTy, Ty};
use crate::value::{self, Value};
use rustc_hash::FxHashMap;
use std::cell::RefCell;
use std::rc::Rc;

type Reg = u32;

/// How deep a right-hand side may nest to be flat (deeper ones take the general path).
const DEPTH: u32 = 1 << 20;

/// Fewest bindings worth a flat run.
const MIN_RUN: usize = 2;

/// One instruction (24 bytes).
#[derive(Clone, Copy, Debug)]
enum Ins {
    /// `r[dst] = frame[slot]` (a real).
    Load {
        slot: u32,
        dst: Reg,
    },
    /// `r[dst] = places[p]` (may fail).
    Place {
        p: u32,
        dst: Reg,
    },
    /// `r[dst] = calls[f](frame)` (may fail).
    Call {
        f: u32,
        dst: Reg,
    },
    Mov {
        a: Reg,
        dst: Reg,
    },
    R1 {
        f: fn(f64) -> f64,
        a: Reg,
        dst: Reg,
    },
    /// `r[dst] = -r[a]`: the primitive `neg`, inline rather than through a function pointer.
    Neg {
        a: Reg,
        dst: Reg,
    },
    R2 {
        f: fn(f64, f64) -> f64,
        a: Reg,
        b: Reg,
        dst: Reg,
    },
    /// The arithmetic of `+`, `-`, `*`, `/`, inline rather than through a function pointer.
    Arith {
        op: Arith,
        a: Reg,
        b: Reg,
        dst: Reg,
    },
    /// `frame[slot] = r[a]`.
    Store {
        a: Reg,
        slot: u32,
    },
    /// `l[dst] = frame[slot]` (a linear real).
    LLoad {
        slot: u32,
        dst: Reg,
    },
    LMov {
        a: Reg,
        dst: Reg,
    },
    LPlus {
        a: Reg,
        b: Reg,
        dst: Reg,
    },
    /// `l[dst] = r[c] · l[a] + l[b]` (a scaled term added to another: one instruction, not two).
    LAxpy {
        c: Reg,
        a: Reg,
        b: Reg,
        dst: Reg,
    },
    /// `l[dst] = r[c] · l[a]`.
    LScale {
        c: Reg,
        a: Reg,
        dst: Reg,
    },
    /// `frame[slot] = l[a]`.
    LStore {
        a: Reg,
        slot: u32,
    },
    /// `l[dst] = lplaces[p]`: a linear real under projections of a linear variable.
    LPlace {
        p: u32,
        dst: Reg,
    },
    /// `l[dst] = lcalls[f](frame)` (may fail): an element of a linear array.
    LCall {
        f: u32,
        dst: Reg,
    },
    /// In a loop: `r[dst] = cols[c][k]`, element `k` (the loop's index) of an unboxed real
    /// array resolved once before the loop; where that does not apply (out of range, a boxed
    /// array), the full place `places[p]` is read instead (and fails as it would).
    Col {
        c: u32,
        p: u32,
        dst: Reg,
    },
    /// In a loop: `l[dst] = lcols[c] ! k`, element `k` of a linear array resolved once before
    /// the loop (zero past its end, as [`Lin::index`]).
    LCol {
        c: u32,
        dst: Reg,
    },
    /// In a loop: output `o` of the element is `l[a]`.
    Out {
        a: Reg,
        o: u32,
    },
    /// `l[dst] = lplaces[p] ! k`: an element at a literal index of a linear array variable or
    /// place (zero past its end, as [`Lin::index`]; cannot fail).
    LIndex {
        p: u32,
        k: u32,
        dst: Reg,
    },
    /// In a loop: `i[dst] = icalls[f](frame)` (an integer term compiled on its own; may fail).
    ICall {
        f: u32,
        dst: Reg,
    },
    /// In a loop: `i[dst] = i[a] op i[b]` for the integer primitive `iops[f]` (fails as the
    /// primitive does, at its position).
    IArith {
        f: u32,
        a: Reg,
        b: Reg,
        dst: Reg,
    },
    /// In a loop: `frame[slot] = i[a]` (an integer bound in the loop, for the code that reads it
    /// from the frame: places indexed by it, integer terms compiled on their own).
    IStore {
        a: Reg,
        slot: u32,
    },
    /// In a loop: `i[a]` is a valid length for the one-hot `hots[h]` (fails as `onehot` does).
    ILen {
        a: Reg,
        h: u32,
    },
    /// In a loop: `r[dst] = cols[c][i[i]]`, an element at a computed index of an unboxed real
    /// array resolved before the loop; out of range or boxed, the full place `places[p]`.
    ColAt {
        c: u32,
        i: Reg,
        p: u32,
        dst: Reg,
    },
    /// In a loop: the one-hot `hots[h]` with length `i[n]`, index `i[i]` and value `l[a]` is
    /// added into its output's dense accumulator (fails as `onehot` does if out of range).
    OutAt {
        a: Reg,
        i: Reg,
        n: Reg,
        h: u32,
    },
    // Fused pairs (see [`fuse`]): each is two adjacent instructions of a straight-line run
    // whose intermediate register nothing reads again, run as one.
    /// `l[dst] = r[c] · l[a] + r[d] · l[b]` (`LScale` into `LAxpy`'s added term).
    LDot {
        c: Reg,
        a: Reg,
        d: Reg,
        b: Reg,
        dst: Reg,
    },
    /// `l[dst] = r[s] · (r[c] · l[a] + l[b])` (`LAxpy` into `LScale`).
    LAxpyScale {
        c: Reg,
        a: Reg,
        b: Reg,
        s: Reg,
        dst: Reg,
    },
    /// `l[dst] = r[c2] · (r[c1] · l[a])` (`LScale` into `LScale`).
    LScale2 {
        c1: Reg,
        c2: Reg,
        a: Reg,
        dst: Reg,
    },
    /// `l[dst] = r[c3] · (r[c2] · (r[c1] · l[a]))` (`LScale2` into `LScale`).
    LScale3 {
        c1: Reg,
        c2: Reg,
        c3: Reg,
        a: Reg,
        dst: Reg,
    },
    /// `l[dst] = frame[slot] · l[a]` (`Load` into `LScale`'s factor).
    LScaleLoad {
        slot: u32,
        a: Reg,
        dst: Reg,
    },
    // A `Load` into its first reader also writes the loaded register `x` (first), so it fuses
    // whether or not the register is read again (`x` is the reader's `dst` where it is not).
    /// `r[x] = frame[slot]; r[dst] = f(r[x])` (`Load` into `R1`).
    R1Load {
        f: fn(f64) -> f64,
        slot: u32,
        x: Reg,
        dst: Reg,
    },
    /// `r[x] = frame[slot]; r[dst] = r[a] op r[x]` (`Load` into `Arith`'s right operand).
    ArithLoad {
        op: Arith,
        a: Reg,
        slot: u32,
        x: Reg,
        dst: Reg,
    },
    /// `r[x] = frame[slot]; r[dst] = r[x] op r[b]` (`Load` into `Arith`'s left operand).
    LoadArith {
        op: Arith,
        slot: u32,
        b: Reg,
        x: Reg,
        dst: Reg,
    },
    /// `r[dst] = -f(r[a])` (`R1` into `Neg`: the derivative of `cos`).
    R1Neg {
        f: fn(f64) -> f64,
        a: Reg,
        dst: Reg,
    },
    /// `r[x] = frame[slot]; r[dst] = -f(r[x])` (`R1Load` into `Neg`).
    R1LoadNeg {
        f: fn(f64) -> f64,
        slot: u32,
        x: Reg,
        dst: Reg,
    },
    // A producer fused with the `Store` of its result (a real bound in the run and read
    // outside it, as the forward derivative's tangent reads the primal's reals): the register
    // is written as by the producer, and the slot as by `Store`.
    /// `r[dst] = r[a] op r[b]; frame[slot] = r[dst]`.
    ArithStore {
        op: Arith,
        a: Reg,
        b: Reg,
        dst: Reg,
        slot: u32,
    },
    /// `r[dst] = f(r[a]); frame[slot] = r[dst]`.
    R1Store {
        f: fn(f64) -> f64,
        a: Reg,
        dst: Reg,
        slot: u32,
    },
    /// `r[x] = frame[at]; r[dst] = r[a] op r[x]; frame[slot] = r[dst]` (`ArithLoad` into
    /// `Store`).
    ArithLoadStore {
        op: Arith,
        a: Reg,
        at: u32,
        x: Reg,
        dst: Reg,
        slot: u32,
    },
    /// `r[dst] = f(frame[at]); frame[slot] = r[dst]` (`R1Load` whose loaded register is not
    /// read again, into `Store`).
    R1LoadStore {
        f: fn(f64) -> f64,
        at: u32,
        dst: Reg,
        slot: u32,
    },
}

const _: () = assert!(std::mem::size_of::<Ins>() == 24);

/// `frame[slot] = x`, as [`Ins::Store`]: the slot mostly holds a real already (pooled frames
/// keep scalars), so only the number is written: no drop of the old value, no tag.
#[inline(always)]
fn store_real(fr: &mut Frame, slot: u32, x: f64) {
    match &mut fr[slot as usize] {
        Value::Real(y) => *y = x,
        v => store_other(v, x),
    }
}

#[cold]
#[inline(never)]
fn store_other(v: &mut Value, x: f64) {
    super::put(v, Value::Real(x))
}

/// The state of a flat loop's element (empty for a straight-line run).
#[derive(Default)]
struct Rt {
    /// The element's index.
    k: usize,
    cols: Vec<Option<Rc<Vec<f64>>>>,
    lcols: Vec<Option<Lin>>,
    out: Vec<Option<f64>>,
    /// The integer registers.
    ints: Vec<i64>,
    /// Dense accumulators of one-hot outputs.
    acc: Vec<Acc>,
    /// For [`FlatLoop::run_into`]: the caller's accumulators of [`Sink::Into`] outputs.
    into: Vec<Lin>,
    /// Running sums and columns of the outputs (by [`Sink`]).
    sums: Vec<Option<f64>>,
    columns: Vec<(Vec<f64>, bool)>,
}

/// The dense accumulator of a one-hot output: the values, which indices were added to, and
/// how many one-hots were (as the reference evaluator's sparse array's entries: it is dense
/// once it has more entries than elements, and zero without any).
#[derive(Default)]
struct Acc {
    vals: Vec<f64>,
    touched: Vec<bool>,
    count: usize,
}

impl Acc {
    /// The sum, represented as the reference evaluator's sum of the one-hots would be.
    fn take(&mut self) -> Result<Lin> {
        let n = self.vals.len();
        if self.count == 0 {
            return Ok(Lin::zero());
        }
        // With every element touched, the reference's sparse array has an entry at every index,
        // none of them the strong zero: the dense array is the same linear value, and cheaper
        // to use downstream (the sums of GMM's triangular loops, the index chain's gradient).
        if self.count > n || self.touched.iter().all(|&t| t) {
            return Ok(Lin::reals(std::mem::take(&mut self.vals)));
        }
        let mut v = Lin::zero();
        for (i, &t) in self.touched.iter().enumerate() {
            if t {
                v.add_one_hot_in_place(n, i as i64, Lin::real(self.vals[i]))?;
            }
        }
        Ok(v)
    }
}

/// A compiled flat run.
pub(super) struct Flat {
    ins: Vec<Ins>,
    places: Vec<Place>,
    /// Linear places: a frame slot and the projections from it (`true` for `fst`).
    lplaces: Vec<(usize, Vec<bool>)>,
    calls: Vec<RFn>,
    lcalls: Vec<LRFn>,
    /// The register files, kept between runs (literals stay in place).
    regs: RefCell<(Vec<f64>, Vec<Option<f64>>)>,
    /// Fresh register files, for a run that starts while another one is under way.
    init: (Vec<f64>, usize),
    /// For a loop: instructions run once before it (loop-invariant reads, into registers no
    /// other instruction writes), the array places of [`Ins::Col`] (their index-free
    /// prefixes) and the linear ones of [`Ins::LCol`].
    pre: Vec<Ins>,
    colp: Vec<Place>,
    lcolp: Vec<(usize, Vec<bool>)>,
    /// Integer code of a loop: terms compiled on their own, primitives, one-hots (their
    /// output and position), the initial integer registers (literals in place) and the
    /// registers kept between runs.
    icalls: Vec<IFn>,
    iops: Vec<IOp>,
    hots: Vec<(u32, Span)>,
    iinit: Vec<i64>,
    /// A loop's element state, kept between runs (its vectors' allocations are reused; the
    /// arrays it read are dropped at the end of each run).
    rt: RefCell<Option<Box<Rt>>>,
}

/// An integer primitive in a loop: its function, the primitive (for its error) and position.
type IOp = (fn(i64, i64) -> Option<i64>, Prim, Span);

impl Flat {
    pub(super) fn run(&self, fr: &mut Frame) -> Result<()> {
        match self.regs.try_borrow_mut() {
            Ok(mut regs) => {
                let (r, l) = &mut *regs;
                self.exec_straight(fr, r, l)
            }
            Err(_) => {
                let mut r = self.init.0.clone();
                let mut l = vec![None; self.init.1];
                self.exec_straight(fr, &mut r, &mut l)
            }
        }
    }

    /// A straight-line run: one out-of-line copy of the dispatch loop (a flat loop inlines
    /// its own copy into its element loop).
    #[inline(never)]
    fn exec_straight(&self, fr: &mut Frame, r: &mut [f64], l: &mut [Option<f64>]) -> Result<()> {
        self.exec::<true>(&self.ins, fr, r, l, &mut Rt::default())
    }

    /// Runs `ins`; `FUSED` if they may hold fused instructions (only straight runs do: a
    /// loop's copy leaves their arms out).
    #[inline(always)]
    fn exec<const FUSED: bool>(
        &self,
        ins: &[Ins],
        fr: &mut Frame,
        r: &mut [f64],
        l: &mut [Option<f64>],
        rt: &mut Rt,
    ) -> Result<()> {
        for ins in ins {
            match *ins {
                Ins::Load { slot, dst } => r[dst as usize] = fr[slot as usize].expect_real(),
                Ins::Place { p, dst } => {
                    r[dst as usize] = self.places[p as usize].read(fr, |g| g.real())?
                }
                Ins::Call { f, dst } => r[dst as usize] = (self.calls[f as usize])(fr)?,
                Ins::Mov { a, dst } => r[dst as usize] = r[a as usize],
                Ins::R1 { f, a, dst } => r[dst as usize] = f(r[a as usize]),
                Ins::Neg { a, dst } => {
                    fused::<FUSED>();
                    r[dst as usize] = -r[a as usize]
                }
                Ins::R2 { f, a, b, dst } => r[dst as usize] = f(r[a as usize], r[b as usize]),
                Ins::Arith { op, a, b, dst } => {
                    r[dst as usize] = op.apply(r[a as usize], r[b as usize])
                }
                Ins::Store { a, slot } => store_real(fr, slot, r[a as usize]),
                Ins::LLoad { slot, dst } => {
                    l[dst as usize] = match &fr[slot as usize] {
                        Value::Lin(x) => super::lin_opt(x),
                        other => panic!("internal error: expected a linear value, found {other}"),
                    }
                }
                Ins::LMov { a, dst } => l[dst as usize] = l[a as usize],
                Ins::LPlus { a, b, dst } => {
                    l[dst as usize] = plus_opt(l[a as usize], l[b as usize])
                }
                Ins::LAxpy { c, a, b, dst } => {
                    l[dst as usize] =
                        plus_opt(scale_opt(r[c as usize], l[a as usize]), l[b as usize])
                }
                Ins::LScale { c, a, dst } => {
                    l[dst as usize] = scale_opt(r[c as usize], l[a as usize])
                }
                Ins::LStore { a, slot } => {
                    fr[slot as usize] = Value::Lin(super::opt_lin(l[a as usize]))
                }
                Ins::LCall { f, dst } => l[dst as usize] = (self.lcalls[f as usize])(fr)?,
                Ins::LPlace { p, dst } => {
                    let (slot, path) = &self.lplaces[p as usize];
                    l[dst as usize] = super::lin_at(fr, *slot, path).and_then(super::lin_opt)
                }
                Ins::Col { c, p, dst } => {
                    r[dst as usize] = match &rt.cols[c as usize] {
                        Some(xs) if rt.k < xs.len() => xs[rt.k],
                        _ => self.places[p as usize].read(fr, |g| g.real())?,
                    }
                }
                Ins::LCol { c, dst } => {
                    l[dst as usize] = rt.lcols[c as usize]
                        .as_ref()
                        .and_then(|xs| super::lin_opt(&xs.index(rt.k as i64)))
                }
                Ins::Out { a, o } => rt.out[o as usize] = l[a as usize],
                Ins::LIndex { p, k, dst } => {
                    let (slot, path) = &self.lplaces[p as usize];
                    l[dst as usize] = super::lin_at(fr, *slot, path)
                        .and_then(|xs| super::lin_opt(&xs.index(i64::from(k))))
                }
                Ins::ICall { f, dst } => rt.ints[dst as usize] = (self.icalls[f as usize])(fr)?,
                Ins::IArith { f, a, b, dst } => {
                    let (x, y) = (rt.ints[a as usize], rt.ints[b as usize]);
                    let (g, op, span) = &self.iops[f as usize];
                    rt.ints[dst as usize] = match g(x, y) {
                        Some(z) => z,
                        None => op
                            .eval_args(vec![Value::Int(x), Value::Int(y)])
                            .map_err(|e| e.or_span(*span))?
                            .expect_int(),
                    }
                }
                Ins::IStore { a, slot } => fr[slot as usize] = Value::Int(rt.ints[a as usize]),
                Ins::ILen { a, h } => {
                    value::check_len("onehot", rt.ints[a as usize])
                        .map_err(|e| e.or_span(self.hots[h as usize].1))?;
                }
                Ins::ColAt { c, i, p, dst } => {
                    let k = rt.ints[i as usize];
                    r[dst as usize] = match &rt.cols[c as usize] {
                        Some(xs) if k >= 0 && (k as u64) < xs.len() as u64 => xs[k as usize],
                        _ => self.places[p as usize].read(fr, |g| g.real())?,
                    }
                }
                Ins::OutAt { a, i, n, h } => {
                    let (n, i) = (rt.ints[n as usize] as usize, rt.ints[i as usize]);
                    let (o, span) = self.hots[h as usize];
                    if i < 0 || i as u64 >= n as u64 {
                        return Err(Error::runtime(format!(
                            "onehot: index {i} out of range for an array of length {n}"
                        ))
                        .or_span(span));
                    }
                    if let Some(x) = l[a as usize] {
                        if let Some(acc) = rt.into.get_mut(o as usize) {
                            // `Sink::Into`: in range, so this cannot fail.
                            acc.add_one_hot_in_place(n, i, Lin::real(x))?;
                            continue;
                        }
                        let acc = &mut rt.acc[o as usize];
                        if acc.vals.len() < n {
                            acc.vals.resize(n, 0.0);
                            acc.touched.resize(n, false);
                        }
                        let i = i as usize;
                        if acc.touched[i] {
                            acc.vals[i] += x;
                        } else {
                            // The first entry is the value itself (`-0` stays `-0`).
                            acc.vals[i] = x;
                            acc.touched[i] = true;
                        }
                        acc.count += 1;
                    }
                }
                Ins::LDot { c, a, d, b, dst } => {
                    fused::<FUSED>();
                    let y = scale_opt(r[d as usize], l[b as usize]);
                    l[dst as usize] = plus_opt(scale_opt(r[c as usize], l[a as usize]), y)
                }
                Ins::LAxpyScale { c, a, b, s, dst } => {
                    fused::<FUSED>();
                    let y = plus_opt(scale_opt(r[c as usize], l[a as usize]), l[b as usize]);
                    l[dst as usize] = scale_opt(r[s as usize], y)
                }
                Ins::LScale2 { c1, c2, a, dst } => {
                    fused::<FUSED>();
                    let y = scale_opt(r[c1 as usize], l[a as usize]);
                    l[dst as usize] = scale_opt(r[c2 as usize], y)
                }
                Ins::LScale3 { c1, c2, c3, a, dst } => {
                    fused::<FUSED>();
                    let y = scale_opt(r[c1 as usize], l[a as usize]);
                    let y = scale_opt(r[c2 as usize], y);
                    l[dst as usize] = scale_opt(r[c3 as usize], y)
                }
                Ins::LScaleLoad { slot, a, dst } => {
                    fused::<FUSED>();
                    l[dst as usize] = scale_opt(fr[slot as usize].expect_real(), l[a as usize])
                }
                Ins::R1Load { f, slot, x, dst } => {
                    fused::<FUSED>();
                    let v = fr[slot as usize].expect_real();
                    r[x as usize] = v;
                    r[dst as usize] = f(v)
                }
                Ins::ArithLoad {
                    op,
                    a,
                    slot,
                    x,
                    dst,
                } => {
                    fused::<FUSED>();
                    r[x as usize] = fr[slot as usize].expect_real();
                    r[dst as usize] = op.apply(r[a as usize], r[x as usize])
                }
                Ins::LoadArith {
                    op,
                    slot,
                    b,
                    x,
                    dst,
                } => {
                    fused::<FUSED>();
                    r[x as usize] = fr[slot as usize].expect_real();
                    r[dst as usize] = op.apply(r[x as usize], r[b as usize])
                }
                Ins::R1Neg { f, a, dst } => {
                    fused::<FUSED>();
                    r[dst as usize] = -f(r[a as usize])
                }
                Ins::R1LoadNeg { f, slot, x, dst } => {
                    fused::<FUSED>();
                    let v = fr[slot as usize].expect_real();
                    r[x as usize] = v;
                    r[dst as usize] = -f(v)
                }
                Ins::ArithStore {
                    op,
                    a,
                    b,
                    dst,
                    slot,
                } => {
                    fused::<FUSED>();
                    let x = op.apply(r[a as usize], r[b as usize]);
                    r[dst as usize] = x;
                    store_real(fr, slot, x)
                }
                Ins::R1Store { f, a, dst, slot } => {
                    fused::<FUSED>();
                    let x = f(r[a as usize]);
                    r[dst as usize] = x;
                    store_real(fr, slot, x)
                }
                Ins::ArithLoadStore {
                    op,
                    a,
                    at,
                    x,
                    dst,
                    slot,
                } => {
                    fused::<FUSED>();
                    r[x as usize] = fr[at as usize].expect_real();
                    let y = op.apply(r[a as usize], r[x as usize]);
                    r[dst as usize] = y;
                    store_real(fr, slot, y)
                }
                Ins::R1LoadStore { f, at, dst, slot } => {
                    fused::<FUSED>();
                    let x = f(fr[at as usize].expect_real());
                    r[dst as usize] = x;
                    store_real(fr, slot, x)
                }
            }
        }
        Ok(())
    }
}

/// Marks the arm of a fused instruction: a loop's copy of the dispatch loop never meets one
/// (only straight runs are fused), so there the arm is only this panic, kept out of the way.
#[inline(always)]
fn fused<const FUSED: bool>() {
    if !FUSED {
        cold_fused()
    }
}

#[cold]
#[inline(never)]
fn cold_fused() -> ! {
    unreachable!("a fused instruction outside a straight run")
}

/// A register: `true` for the linear file.
type At = (bool, Reg);

/// The registers an instruction reads (in operand order) and the one it writes.
fn operands(i: &Ins) -> ([Option<At>; 3], Option<At>) {
    let (r, l) = (|x: Reg| Some((false, x)), |x: Reg| Some((true, x)));
    match *i {
        Ins::Load { dst, .. } | Ins::Place { dst, .. } | Ins::Call { dst, .. } => {
            ([None; 3], r(dst))
        }
        Ins::Col { dst, .. } => ([None; 3], r(dst)),
        Ins::Mov { a, dst } | Ins::R1 { a, dst, .. } | Ins::Neg { a, dst } => {
            ([r(a), None, None], r(dst))
        }
        Ins::R2 { a, b, dst, .. } | Ins::Arith { a, b, dst, .. } => ([r(a), r(b), None], r(dst)),
        Ins::Store { a, .. } => ([r(a), None, None], None),
        Ins::LLoad { dst, .. } | Ins::LPlace { dst, .. } | Ins::LCall { dst, .. } => {
            ([None; 3], l(dst))
        }
        Ins::LCol { dst, .. } | Ins::LIndex { dst, .. } => ([None; 3], l(dst)),
        Ins::LMov { a, dst } => ([l(a), None, None], l(dst)),
        Ins::LPlus { a, b, dst } => ([l(a), l(b), None], l(dst)),
        Ins::LAxpy { c, a, b, dst } => ([r(c), l(a), l(b)], l(dst)),
        Ins::LScale { c, a, dst } => ([r(c), l(a), None], l(dst)),
        Ins::LStore { a, .. } | Ins::Out { a, .. } => ([l(a), None, None], None),
        // Loops only (never fused); their integer registers are a file of their own.
        Ins::ColAt { dst, .. } => ([None; 3], r(dst)),
        Ins::OutAt { a, .. } => ([l(a), None, None], None),
        Ins::ICall { .. } | Ins::IArith { .. } | Ins::IStore { .. } | Ins::ILen { .. } => {
            ([None; 3], None)
        }
        Ins::LDot { .. }
        | Ins::LAxpyScale { .. }
        | Ins::LScale2 { .. }
        | Ins::LScale3 { .. }
        | Ins::LScaleLoad { .. }
        | Ins::R1Load { .. }
        | Ins::ArithLoad { .. }
        | Ins::LoadArith { .. }
        | Ins::R1Neg { .. }
        | Ins::R1LoadNeg { .. }
        | Ins::ArithStore { .. }
        | Ins::R1Store { .. }
        | Ins::ArithLoadStore { .. }
        | Ins::R1LoadStore { .. } => unreachable!("fused instructions are made only by `fuse`"),
    }
}

/// Fuses adjacent pairs of a straight-line run into one instruction (the `LDot` .. `ArithLoad`
/// variants of [`Ins`]) where the first writes a register that the second reads once and
/// nothing reads after it: derivative code is mostly such pairs (a scaling into an `LAxpy`, a
/// chain of scalings, a captured real loaded for one use), and each fused pair saves one
/// dispatch. The fused instruction computes exactly what the pair did (same operations, same
/// order; none of them can fail), and never writes the intermediate register. A producer of a
/// real and the `Store` of its result into its frame slot (`ArithStore` .. `R1LoadStore`) fuse
/// whether or not the register is read again: the fused instruction writes both.
fn fuse(ins: Vec<Ins>) -> Vec<Ins> {
    // dead[j]: bit k set if the k-th register instruction j reads is read by no later
    // instruction before being written (or is written by j itself).
    let mut dead = vec![0u8; ins.len()];
    let mut next_read: FxHashMap<At, bool> = FxHashMap::default();
    for (j, i) in ins.iter().enumerate().rev() {
        let (reads, write) = operands(i);
        for (k, x) in reads.iter().enumerate() {
            if let Some(x) = x
                && (Some(*x) == write || !next_read.get(x).copied().unwrap_or(false))
            {
                dead[j] |= 1 << k;
            }
        }
        if let Some(w) = write {
            next_read.insert(w, false);
        }
        for x in reads.iter().flatten() {
            next_read.insert(*x, true);
        }
    }
    // Whether instruction j reads `t` exactly once, at operand `k`, for the last time.
    let last_use = |j: usize, k: usize, t: At| {
        let (reads, _) = operands(&ins[j]);
        reads.iter().filter(|x| **x == Some(t)).count() == 1
            && reads[k] == Some(t)
            && dead[j] & (1 << k) != 0
    };
    let mut out: Vec<Ins> = Vec::with_capacity(ins.len());
    for (j, &x) in ins.iter().enumerate() {
        let fused = out.last().and_then(|&e| {
            Some(match (e, x) {
                (Ins::LScale { c: d, a: b, dst: t }, Ins::LAxpy { c, a, b: t2, dst })
                    if t2 == t && last_use(j, 2, (true, t)) =>
                {
                    Ins::LDot { c, a, d, b, dst }
                }
                (Ins::LAxpy { c, a, b, dst: t }, Ins::LScale { c: s, a: t2, dst })
                    if t2 == t && last_use(j, 1, (true, t)) =>
                {
                    Ins::LAxpyScale { c, a, b, s, dst }
                }
                (Ins::LScale { c: c1, a, dst: t }, Ins::LScale { c: c2, a: t2, dst })
                    if t2 == t && last_use(j, 1, (true, t)) =>
                {
                    Ins::LScale2 { c1, c2, a, dst }
                }
                (Ins::LScale2 { c1, c2, a, dst: t }, Ins::LScale { c: c3, a: t2, dst })
                    if t2 == t && last_use(j, 1, (true, t)) =>
                {
                    Ins::LScale3 { c1, c2, c3, a, dst }
                }
                (Ins::Load { slot, dst: t }, Ins::LScale { c, a, dst })
                    if c == t && last_use(j, 0, (false, t)) =>
                {
                    Ins::LScaleLoad { slot, a, dst }
                }
                // A load into a real reader, whether or not it is read again (the fused
                // instruction writes the loaded register first, so a reader of it in both
                // operands sees it); where it is not, `R1Load` writes its `dst` twice instead,
                // so it can fuse with a `Store` or `Neg`.
                (Ins::Load { slot, dst: t }, Ins::R1 { f, a, dst }) if a == t => {
                    let x = if last_use(j, 0, (false, t)) { dst } else { t };
                    Ins::R1Load { f, slot, x, dst }
                }
                (Ins::Load { slot, dst: t }, Ins::Arith { op, a, b, dst }) if b == t => {
                    Ins::ArithLoad {
                        op,
                        a,
                        slot,
                        x: t,
                        dst,
                    }
                }
                (Ins::Load { slot, dst: t }, Ins::Arith { op, a, b, dst }) if a == t => {
                    Ins::LoadArith {
                        op,
                        slot,
                        b,
                        x: t,
                        dst,
                    }
                }
                (Ins::R1 { f, a, dst: t }, Ins::Neg { a: t2, dst })
                    if t2 == t && last_use(j, 0, (false, t)) =>
                {
                    Ins::R1Neg { f, a, dst }
                }
                (Ins::R1Load { f, slot, x, dst: t }, Ins::Neg { a: t2, dst })
                    if t2 == t && last_use(j, 0, (false, t)) =>
                {
                    Ins::R1LoadNeg { f, slot, x, dst }
                }
                // A producer and the store of its result (the register is still written:
                // whether it is read again does not matter).
                (Ins::Arith { op, a, b, dst }, Ins::Store { a: t, slot }) if t == dst => {
                    Ins::ArithStore {
                        op,
                        a,
                        b,
                        dst,
                        slot,
                    }
                }
                (Ins::R1 { f, a, dst }, Ins::Store { a: t, slot }) if t == dst => {
                    Ins::R1Store { f, a, dst, slot }
                }
                (
                    Ins::ArithLoad {
                        op,
                        a,
                        slot: at,
                        x,
                        dst,
                    },
                    Ins::Store { a: t, slot },
                ) if t == dst => Ins::ArithLoadStore {
                    op,
                    a,
                    at,
                    x,
                    dst,
                    slot,
                },
                (
                    Ins::R1Load {
                        f,
                        slot: at,
                        x,
                        dst,
                    },
                    Ins::Store { a: t, slot },
                ) if t == dst && x == dst => Ins::R1LoadStore { f, at, dst, slot },
                _ => return None,
            })
        });
        match fused {
            Some(f) => *out.last_mut().expect("a fused pair's first half") = f,
            None => out.push(x),
        }
    }
    out
}

/// The primitives of [`Ins::Arith`] (their [`Scalar::Real2`] functions are exactly these).
#[derive(Clone, Copy, Debug)]
enum Arith {
    Add,
    Sub,
    Mul,
    Div,
}

impl Arith {
    fn of(name: &str) -> Option<Arith> {
        Some(match name {
            "add" => Arith::Add,
            "sub" => Arith::Sub,
            "mul" => Arith::Mul,
            "div" => Arith::Div,
            _ => return None,
        })
    }

    #[inline(always)]
    fn apply(self, x: f64, y: f64) -> f64 {
        match self {
            Arith::Add => x + y,
            Arith::Sub => x - y,
            Arith::Mul => x * y,
            Arith::Div => x / y,
        }
    }
}

/// What becomes of one output of a flat loop's elements.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Sink {
    /// Added up (from zero, as [`plus_opt`]: `lsum` over the elements).
    Sum,
    /// Stored: the linear array of the outputs (as [`Lin::build_reals`]).
    Column,
    /// Always zero: not computed.
    Zero,
    /// One-hots, added at their indices into a dense accumulator (set by [`Compiler::flat_loop`]
    /// for a summed output whose leaf is a sum of one-hots).
    Dense,
    /// One-hots, each added into the caller's linear accumulator in place, as
    /// [`Lin::add_one_hot_in_place`] (see [`FlatLoop::run_into`]); every output of such a loop
    /// is one of these or [`Sink::Zero`].
    Into,
}

/// `lsum (lbuild n (\i -> body))` or an unzipped `lbuild n (\i -> body)` whose body is a
/// linear let chain of flat bindings ending in a tuple of flat linear reals: the whole loop
/// runs in one flat run, with the loop-invariant reads hoisted before it, the element of an
/// array at the loop's index read directly, and each leaf of the tuple summed into a register
/// or stored into an unboxed column.
pub(super) struct FlatLoop {
    /// The number of elements (`None`: one, with no index: a lone sum of one-hots).
    n: Option<IFn>,
    /// The index's slot and integer register.
    var: Option<(usize, Reg)>,
    span: Span,
    flat: Flat,
    sinks: Vec<Sink>,
}

impl FlatLoop {
    /// Runs a loop whose outputs are [`Sink::Into`] (or zero): the one-hots of output `o` are
    /// added into `accs[o]` in place, one by one, exactly as the enclosing accumulation would
    /// add them.
    pub(super) fn run_into(&self, fr: &mut Frame, accs: &mut [Lin]) -> Result<()> {
        self.with_rt(|rt| {
            rt.into
                .extend(accs.iter_mut().map(|a| std::mem::replace(a, Lin::zero())));
            let res = self.run_with(fr, rt);
            for (a, x) in accs.iter_mut().zip(rt.into.drain(..)) {
                *a = x;
            }
            res.map(drop)
        })
    }

    /// Runs the loop: the value of each output (zero for [`Sink::Zero`]).
    pub(super) fn run(&self, fr: &mut Frame) -> Result<Vec<Lin>> {
        self.with_rt(|rt| self.run_with(fr, rt))
    }

    /// Runs `go` with the loop's state (kept between runs; a fresh one for a run that starts
    /// while another is under way).
    fn with_rt<T>(&self, go: impl FnOnce(&mut Rt) -> T) -> T {
        let f = &self.flat;
        let mut rt =
            f.rt.try_borrow_mut()
                .ok()
                .and_then(|mut rt| rt.take())
                .unwrap_or_else(|| {
                    Box::new(Rt {
                        ints: f.iinit.clone(),
                        ..Rt::default()
                    })
                });
        let res = go(&mut rt);
        rt.cols.clear();
        rt.lcols.clear();
        if let Ok(mut slot) = f.rt.try_borrow_mut() {
            *slot = Some(rt);
        }
        res
    }

    fn run_with(&self, fr: &mut Frame, rt: &mut Rt) -> Result<Vec<Lin>> {
        let n = match &self.n {
            Some(n) => value::check_len("lbuild", n(fr)?).map_err(|e| e.or_span(self.span))?,
            None => 1,
        };
        let f = &self.flat;
        let m = self.sinks.len();
        rt.k = 0;
        rt.lcols.extend(
            f.lcolp
                .iter()
                .map(|(s, path)| super::lin_at(fr, *s, path).cloned()),
        );
        rt.out.clear();
        rt.out.resize(m, None);
        rt.sums.clear();
        rt.sums.resize(m, None);
        rt.acc.resize_with(m, Default::default);
        rt.columns.resize_with(m, Default::default);
        for (o, sink) in self.sinks.iter().enumerate() {
            rt.acc[o].vals.clear();
            rt.acc[o].touched.clear();
            rt.acc[o].count = 0;
            if *sink == Sink::Column {
                rt.columns[o] = (Vec::with_capacity(n), false);
            }
        }
        for p in &f.colp {
            let c = p.read(fr, |g| match g.value() {
                Value::RealArray(xs) => Some(xs.clone()),
                _ => None,
            })?;
            rt.cols.push(c);
        }
        // Locals in the element loop (kept in the state between runs).
        let (mut sums, mut columns) = (
            std::mem::take(&mut rt.sums),
            std::mem::take(&mut rt.columns),
        );
        let mut go = |r: &mut [f64], l: &mut [Option<f64>], rt: &mut Rt| -> Result<()> {
            f.exec::<false>(&f.pre, fr, r, l, rt)?;
            for k in 0..n {
                if let Some((slot, reg)) = self.var {
                    fr[slot] = Value::Int(k as i64);
                    rt.ints[reg as usize] = k as i64;
                }
                rt.k = k;
                f.exec::<false>(&f.ins, fr, r, l, rt)?;
                for (o, sink) in self.sinks.iter().enumerate() {
                    match sink {
                        Sink::Sum => sums[o] = plus_opt(sums[o], rt.out[o]),
                        Sink::Column => {
                            let x = rt.out[o];
                            columns[o].0.push(x.unwrap_or(0.0));
                            columns[o].1 |= x.is_some();
                        }
                        Sink::Zero | Sink::Dense | Sink::Into => {}
                    }
                }
            }
            Ok(())
        };
        match f.regs.try_borrow_mut() {
            Ok(mut regs) => {
                let (r, l) = &mut *regs;
                go(r, l, rt)?
            }
            Err(_) => {
                let mut r = f.init.0.clone();
                let mut l = vec![None; f.init.1];
                go(&mut r, &mut l, rt)?
            }
        }
        let out = self
            .sinks
            .iter()
            .enumerate()
            .map(|(o, sink)| {
                Ok(match sink {
                    Sink::Sum => super::opt_lin(sums[o]),
                    // As `Lin::build_reals`: unboxed if any element is a real.
                    Sink::Column if columns[o].1 => Lin::reals(std::mem::take(&mut columns[o].0)),
                    Sink::Column => Lin::array(vec![Lin::zero(); n]),
                    Sink::Zero | Sink::Into => Lin::zero(),
                    // As a sum of one-hots: zero, sparse or dense as the reference evaluator's.
                    Sink::Dense => rt.acc[o].take()?,
                })
            })
            .collect::<Result<Vec<Lin>>>()?;
        (rt.sums, rt.columns) = (sums, columns);
        Ok(out)
    }
}

/// A binding of a flat run.
#[derive(Clone, Copy)]
pub(super) enum Item<'t> {
    Real(&'t Var, &'t Term),
    Lin(&'t Var, &'t LTerm),
    /// An integer (in a loop only): in a register, and stored into its slot.
    Int(&'t Var, &'t Term),
}

/// Whether `t` (of type Real) is a tree of real scalar primitives over literals, variables
/// and places.
fn flat_real(t: &Term, depth: u32) -> bool {
    deep(|| {
        use TermKind as K;
        if depth == 0 {
            return false;
        }
        match &t.kind {
            K::Lit(l) => matches!(l.value(), Value::Real(_)),
            K::Var(_) => true,
            K::Fst(_) | K::Snd(_) | K::Index(..) => {
                let mut cur = t;
                loop {
                    match &cur.kind {
                        K::Fst(e) | K::Snd(e) | K::Index(e, _) => cur = e,
                        K::Var(_) => return true,
                        _ => return false,
                    }
                }
            }
            K::Prim(op, args) => match (op.scalar(), args.len()) {
                (Some(Scalar::Real1(_)), 1) => flat_real(&args[0], depth - 1),
                (Some(Scalar::Real2(_)), 2) => {
                    flat_real(&args[0], depth - 1) && flat_real(&args[1], depth - 1)
                }
                _ => false,
            },
            _ => false,
        }
    })
}

/// Whether the linear term `l` (of type Real) is a tree of `0`, `+`, flat scaling, variables
/// and linear places (`snd (fst d)`).
fn flat_lin(l: &LTerm, depth: u32) -> bool {
    deep(|| {
        use LTermKind as K;
        if depth == 0 {
            return false;
        }
        match &l.kind {
            K::Var(_) | K::Zero(_) => true,
            K::Plus(a, b) => flat_lin(a, depth - 1) && flat_lin(b, depth - 1),
            K::Scale(c, e) => flat_real(c, depth - 1) && flat_lin(e, depth - 1),
            K::Fst(_) | K::Snd(_) => lin_path(l).is_some(),
            // An element of a linear array variable or place (`snd d ! i`), by index.
            K::Index(e, i) => {
                (matches!(e.kind, K::Var(_)) || lin_path(e).is_some())
                    && matches!(i.kind, TermKind::Var(_) | TermKind::Lit(_))
            }
            _ => false,
        }
    })
}

/// A linear place: the variable under `fst`/`snd`, and the projections from it outwards.
fn lin_path(l: &LTerm) -> Option<(&Var, Vec<bool>)> {
    let (path, root) = super::lin_path(l);
    Some((super::lin_var(root)?, path))
}

/// Whether the integer term `t` is literals, variables and lengths of places of projections
/// under integer primitives: its compiled code reads the frame and moves nothing out of it.
fn simple_int(t: &Term) -> bool {
    deep(|| match &t.kind {
        TermKind::Lit(_) | TermKind::Var(_) => true,
        TermKind::Length(xs) => proj_path(xs).is_some(),
        TermKind::Prim(op, args) => {
            matches!(op.scalar(), Some(Scalar::Int2(_))) && args.iter().all(simple_int)
        }
        _ => false,
    })
}

/// A flat Cartesian binding `let x = e in b` (or `(\x -> b) e`): `(x, e, b)`.
fn real_let(t: &Term) -> Option<(&Var, &Term, &Term)> {
    let (x, e, b) = match &t.kind {
        TermKind::Let(Pat::Var(x), e, b) => (x, e, b),
        TermKind::App(f, e) => match &f.kind {
            TermKind::Lam(x, b) => (x, e, b),
            _ => return None,
        },
        _ => return None,
    };
    (matches!(x.ty, Ty::Real) && flat_real(e, DEPTH)).then_some((x, e, b))
}

/// The flat run of a Cartesian let chain starting at `t`, and what follows it.
pub(super) fn run_of_term(mut t: &Term) -> (Vec<Item<'_>>, &Term) {
    let mut items = Vec::new();
    while let Some((x, e, b)) = real_let(t) {
        items.push(Item::Real(x, e));
        t = b;
    }
    (items, t)
}

/// The flat run of a linear let chain starting at `l`, and what follows it.
pub(super) fn run_of_lterm(mut l: &LTerm) -> (Vec<Item<'_>>, &LTerm) {
    use LTermKind as K;
    let mut items = Vec::new();
    loop {
        match &l.kind {
            K::Let(Pat::Var(x), e, b) if matches!(x.ty, Ty::Real) && flat_real(e, DEPTH) => {
                items.push(Item::Real(x, e));
                l = b;
            }
            K::LinLet(u, e, b) if matches!(u.lin_ty(), Some(LTy::Real)) && flat_lin(e, DEPTH) => {
                items.push(Item::Lin(u, e));
                l = b;
            }
            _ => return (items, l),
        }
    }
}

/// The flat bindings of a loop body (as [`run_of_lterm`], and integer bindings), and what
/// follows them.
fn loop_run(mut l: &LTerm) -> (Vec<Item<'_>>, &LTerm) {
    let mut items = Vec::new();
    loop {
        let (mut run, rest) = run_of_lterm(l);
        items.append(&mut run);
        match &rest.kind {
            LTermKind::Let(Pat::Var(x), e, b) if matches!(x.ty, Ty::Int) => {
                items.push(Item::Int(x, e));
                l = b;
            }
            _ => return (items, rest),
        }
    }
}

/// A leaf of a loop body's tuple.
enum Leaf<'t> {
    /// A literal `0`.
    Zero,
    /// A flat linear real.
    Real(&'t LTerm),
    /// A sum of one-hots `onehot n i e` of flat linear reals `e` (and zeros), in order.
    Hots(Vec<&'t LTerm>),
}

/// The leaves of a loop body's tuple, if each is a literal `0`, a flat linear real or a sum
/// of one-hots of flat linear reals.
fn loop_leaves<'t>(l: &'t LTerm, out: &mut Vec<Leaf<'t>>) -> bool {
    match &l.kind {
        LTermKind::Pair(a, b) => loop_leaves(a, out) && loop_leaves(b, out),
        LTermKind::Zero(_) => {
            out.push(Leaf::Zero);
            true
        }
        LTermKind::Plus(..) | LTermKind::OneHot(..)
            if let Some(hots) = one_hots(l).filter(|h| !h.is_empty()) =>
        {
            out.push(Leaf::Hots(hots));
            true
        }
        _ if matches!(super::lty(l, 32), Some(LTy::Real)) && flat_lin(l, DEPTH) => {
            out.push(Leaf::Real(l));
            true
        }
        _ => false,
    }
}

/// The one-hots of a `+`-tree of one-hots of flat linear reals and zeros, left to right.
fn one_hots(l: &LTerm) -> Option<Vec<&LTerm>> {
    let mut hots = Vec::new();
    let mut stack = vec![l];
    while let Some(l) = stack.pop() {
        match &l.kind {
            LTermKind::Plus(a, b) => stack.extend([b, a]),
            LTermKind::Zero(_) => {}
            LTermKind::OneHot(_, _, e)
                if matches!(super::lty(e, 32), Some(LTy::Real)) && flat_lin(e, DEPTH) =>
            {
                hots.push(l)
            }
            _ => return None,
        }
    }
    Some(hots)
}

/// Whether the body of a linear let chain, of type Real, can end its last flat run.
pub(super) fn flat_tail(l: &LTerm) -> bool {
    flat_lin(l, DEPTH)
}

/// Whether a linear-real expression with no `let`s is big enough to be a flat run of its own
/// (a small one is faster as closures: index sums' loop bodies), and flat.
pub(super) fn big_flat_lin(l: &LTerm) -> bool {
    /// Linear nodes below which a lone expression stays closures.
    const BIG: usize = 32;
    let mut stack = vec![l];
    let mut n = 0;
    while let Some(l) = stack.pop() {
        n += 1;
        if n >= BIG {
            break;
        }
        match &l.kind {
            LTermKind::Plus(a, b) => stack.extend([a, b]),
            LTermKind::Scale(_, e) => stack.push(e),
            _ => {}
        }
    }
    n >= BIG && flat_lin(l, DEPTH)
}

/// Whether a real expression with no `let`s is big enough to be a flat run of its own (as
/// [`big_flat_lin`]: the primal sum of a written-out index chain), and flat.
pub(super) fn big_flat_real(t: &Term) -> bool {
    /// Nodes below which a lone expression stays closures.
    const BIG: usize = 32;
    let mut stack = vec![t];
    let mut n = 0;
    while let Some(t) = stack.pop() {
        n += 1;
        if n >= BIG {
            break;
        }
        if let TermKind::Prim(_, args) = &t.kind {
            stack.extend(args.iter());
        }
    }
    n >= BIG && flat_real(t, DEPTH)
}

/// Whether a run is long enough to be compiled flat.
pub(super) fn worth(items: &[Item<'_>]) -> bool {
    items.len() >= MIN_RUN
}

/// What a register holds across reads: a variable, or a place of projections from one (`snd
/// (fst x)`, Cartesian or linear: the path's bits, innermost projection first, `1` for `fst`,
/// and its length). Variables are never rebound, so a place's value is the same at every read
/// in a run, and projections cannot fail: it is read once and kept, like a variable.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Key {
    Var(VarId),
    Place(VarId, u64, u8),
}

/// The key of a place of projections, Cartesian or linear (`None` for longer paths).
fn place_key(v: &Var, path: impl Iterator<Item = bool>) -> Option<Key> {
    let (mut bits, mut len) = (0u64, 0u8);
    for fst in path {
        if len == 64 {
            return None;
        }
        bits |= u64::from(fst) << len;
        len += 1;
    }
    Some(Key::Place(v.id, bits, len))
}

/// The key of a Cartesian place of projections only (no indexing).
fn real_place_key(t: &Term) -> Option<Key> {
    let mut path = Vec::new();
    let mut cur = t;
    loop {
        match &cur.kind {
            TermKind::Fst(e) | TermKind::Snd(e) => {
                path.push(matches!(cur.kind, TermKind::Fst(_)));
                cur = e;
            }
            TermKind::Var(v) => return place_key(v, path.into_iter().rev()),
            _ => return None,
        }
    }
}

/// Counts the register reads of variables and projection places in a real expression.
fn count_real(t: &Term, reads: &mut FxHashMap<Key, u32>) {
    deep(|| match &t.kind {
        TermKind::Var(x) => *reads.entry(Key::Var(x.id)).or_default() += 1,
        TermKind::Prim(_, args) => args.iter().for_each(|a| count_real(a, reads)),
        TermKind::Fst(_) | TermKind::Snd(_) => {
            if let Some(k) = real_place_key(t) {
                *reads.entry(k).or_default() += 1;
            }
        }
        _ => {}
    })
}

fn count_lin(l: &LTerm, reads: &mut FxHashMap<Key, u32>) {
    deep(|| match &l.kind {
        LTermKind::Var(x) => *reads.entry(Key::Var(x.id)).or_default() += 1,
        LTermKind::Fst(_) | LTermKind::Snd(_) => {
            if let Some((v, path)) = lin_path(l)
                && let Some(k) = place_key(v, path.into_iter())
            {
                *reads.entry(k).or_default() += 1;
            }
        }
        LTermKind::Plus(a, b) => {
            count_lin(a, reads);
            count_lin(b, reads);
        }
        LTermKind::Scale(c, e) => {
            count_real(c, reads);
            count_lin(e, reads);
        }
        _ => {}
    })
}

/// An operand: its register, and whether the reader is its last (then it is freed after the
/// reading instruction, or taken over by the variable being bound).
#[derive(Clone, Copy)]
struct Opd {
    reg: Reg,
    last: bool,
}

/// A register file being allocated.
#[derive(Default)]
struct File {
    size: u32,
    free: Vec<Reg>,
    /// Variables and places held in registers, with their remaining register reads.
    vars: FxHashMap<Key, (Reg, u32)>,
    /// Registers of variables whose last read is in the binding being compiled.
    dying: Vec<Reg>,
}

impl File {
    fn alloc(&mut self) -> Reg {
        self.free.pop().unwrap_or_else(|| {
            self.size += 1;
            self.size - 1
        })
    }

    /// A register never handed out before (for literals and zero, written once).
    fn fresh(&mut self) -> Reg {
        self.size += 1;
        self.size - 1
    }

    fn release(&mut self, o: Opd) {
        if o.last {
            self.free.push(o.reg);
        }
    }

    /// A read of a variable held in a register, if it is.
    fn read(&mut self, id: Key) -> Option<Opd> {
        let e = self.vars.get_mut(&id)?;
        e.1 -= 1;
        let reg = e.0;
        if e.1 == 0 {
            // Free only once the binding is compiled: an earlier read of the same variable
            // in it may be consumed by a later instruction.
            self.vars.remove(&id);
            self.dying.push(reg);
        }
        Some(Opd { reg, last: false })
    }

    /// Keeps `key`, just read into `reg`, there for `rest` more reads.
    fn keep(&mut self, key: Key, reg: Reg, rest: u32) -> Opd {
        if rest > 0 {
            self.vars.insert(key, (reg, rest));
        }
        Opd {
            reg,
            last: rest == 0,
        }
    }

    /// The end of a binding: registers of variables read for the last time are free.
    fn settle(&mut self) {
        self.free.append(&mut self.dying);
    }

    /// Holds a variable in register `reg` for `reads` reads (freeing it if there are none).
    fn hold(&mut self, id: Key, reg: Reg, reads: u32) {
        if reads == 0 {
            self.free.push(reg);
        } else {
            self.vars.insert(id, (reg, reads));
        }
    }
}

struct Builder {
    ins: Vec<Ins>,
    places: Vec<Place>,
    lplaces: Vec<(usize, Vec<bool>)>,
    calls: Vec<RFn>,
    lcalls: Vec<LRFn>,
    r: File,
    l: File,
    consts: FxHashMap<u64, Reg>,
    zero: Option<Reg>,
    /// Register reads of each variable and projection place in the run.
    reads: FxHashMap<Key, u32>,
    /// In a loop: what is hoisted out of it.
    hoist: Option<Hoist>,
    /// In a loop: its integer code (see [`Ints`]).
    ints: Ints,
}

/// The integer code of a flat loop. Integer registers are never reused (a loop has few).
#[derive(Default)]
struct Ints {
    size: u32,
    /// Integers bound in the loop (and its index), in registers.
    vars: FxHashMap<VarId, Reg>,
    consts: FxHashMap<i64, Reg>,
    /// Hoisted loop-invariant reads: a variable, or the length of an index-free place.
    hoisted: FxHashMap<(VarId, Vec<bool>, bool), Reg>,
    calls: Vec<IFn>,
    ops: Vec<IOp>,
    hots: Vec<(u32, Span)>,
}

impl Ints {
    fn fresh(&mut self) -> Reg {
        self.size += 1;
        self.size - 1
    }
}

/// The loop-invariant part of a flat loop: reads of variables bound outside it and of their
/// index-free places (`snd (fst x)`), run once before the loop into registers of their own
/// (one per distinct read), and the arrays indexed at the loop's index.
struct Hoist {
    /// The loop's index variable.
    index: VarId,
    pre: Vec<Ins>,
    /// Registers of hoisted reads: variable, projections, linear or not.
    regs: FxHashMap<(VarId, Vec<bool>, bool), Reg>,
    colp: Vec<Place>,
    lcolp: Vec<(usize, Vec<bool>)>,
}

/// `t` as projections (outermost last, `true` for `fst`) of a variable, if it is one.
fn proj_path(t: &Term) -> Option<(&Var, Vec<bool>)> {
    let mut path = Vec::new();
    let mut cur = t;
    loop {
        match &cur.kind {
            TermKind::Fst(e) => {
                path.push(true);
                cur = e;
            }
            TermKind::Snd(e) => {
                path.push(false);
                cur = e;
            }
            TermKind::Var(x) => {
                path.reverse();
                return Some((x, path));
            }
            _ => return None,
        }
    }
}

impl Builder {
    fn ins(&mut self, i: Ins) {
        self.ins.push(i);
    }

    /// After the first read of `key` into `dst`: keeps it there for the run's other reads.
    fn keep_real(&mut self, key: Key, dst: Reg) -> Opd {
        let rest = self.rest(key);
        self.r.keep(key, dst, rest)
    }

    fn keep_lin(&mut self, key: Key, dst: Reg) -> Opd {
        let rest = self.rest(key);
        self.l.keep(key, dst, rest)
    }

    /// The reads of `key` after its first.
    fn rest(&self, key: Key) -> u32 {
        self.reads.get(&key).copied().unwrap_or(1) - 1
    }
}

fn index(n: usize) -> u32 {
    u32::try_from(n).expect("internal error: flat code too large")
}

impl Compiler {
    /// Compiles a flat run (see [`worth`]).
    pub(super) fn flat(&mut self, items: &[Item<'_>]) -> Flat {
        let mut b = Self::builder(items, &[], None);
        self.flat_items(&mut b, items);
        Self::finish(b)
    }

    fn builder(items: &[Item<'_>], tail: &[&LTerm], hoist: Option<Hoist>) -> Builder {
        let mut reads = FxHashMap::default();
        for it in items {
            match *it {
                Item::Real(_, e) => count_real(e, &mut reads),
                Item::Lin(_, e) => count_lin(e, &mut reads),
                Item::Int(..) => {}
            }
        }
        for l in tail {
            count_lin(l, &mut reads);
        }
        Builder {
            ins: Vec::new(),
            places: Vec::new(),
            lplaces: Vec::new(),
            lcalls: Vec::new(),
            calls: Vec::new(),
            r: File::default(),
            l: File::default(),
            consts: FxHashMap::default(),
            zero: None,
            reads,
            hoist,
            ints: Ints::default(),
        }
    }

    fn flat_items(&mut self, b: &mut Builder, items: &[Item<'_>]) {
        for it in items {
            match *it {
                Item::Real(x, e) => {
                    let o = self.flat_real(b, e);
                    let reg = if o.last {
                        o.reg
                    } else {
                        let dst = b.r.alloc();
                        b.ins(Ins::Mov { a: o.reg, dst });
                        dst
                    };
                    let n = self.own_reads(b, x);
                    if let Some(slot) = self.stored(b, x) {
                        b.ins(Ins::Store { a: reg, slot });
                    }
                    b.r.settle();
                    b.l.settle();
                    b.r.hold(Key::Var(x.id), reg, n);
                }
                Item::Lin(u, e) => {
                    let o = self.flat_lin(b, e);
                    let reg = if o.last {
                        o.reg
                    } else {
                        let dst = b.l.alloc();
                        b.ins(Ins::LMov { a: o.reg, dst });
                        dst
                    };
                    let n = self.own_reads(b, u);
                    if let Some(slot) = self.stored(b, u) {
                        b.ins(Ins::LStore { a: reg, slot });
                    }
                    b.r.settle();
                    b.l.settle();
                    b.l.hold(Key::Var(u.id), reg, n);
                }
                Item::Int(x, e) => {
                    // Integer registers are written once per element (or once before the
                    // loop) and never reused, so the variable can share its value's register.
                    let reg = self.flat_int(b, e);
                    let slot = index(self.bind(x));
                    b.ins(Ins::IStore { a: reg, slot });
                    b.ints.vars.insert(x.id, reg);
                }
            }
        }
    }

    fn finish(b: Builder) -> Flat {
        let mut r = vec![0.0; b.r.size as usize];
        for (&bits, &reg) in &b.consts {
            r[reg as usize] = f64::from_bits(bits);
        }
        let nl = b.l.size as usize;
        // A loop's body runs again with its hoisted registers live: only straight runs fuse.
        let ins = if b.hoist.is_none() {
            fuse(b.ins)
        } else {
            b.ins
        };
        let (pre, colp, lcolp) = match b.hoist {
            Some(h) => (h.pre, h.colp, h.lcolp),
            None => Default::default(),
        };
        let mut iinit = vec![0; b.ints.size as usize];
        for (&x, &reg) in &b.ints.consts {
            iinit[reg as usize] = x;
        }
        Flat {
            ins,
            places: b.places,
            lplaces: b.lplaces,
            lcalls: b.lcalls,
            calls: b.calls,
            regs: RefCell::new((r.clone(), vec![None; nl])),
            init: (r, nl),
            pre,
            colp,
            lcolp,
            icalls: b.ints.calls,
            iops: b.ints.ops,
            hots: b.ints.hots,
            rt: RefCell::new(None),
            iinit,
        }
    }

    /// A flat loop (see [`FlatLoop`]) for `lbuild n (\i -> body)`, whose outputs (one per
    /// leaf of the body's tuple) go to `sinks` (a literal `0` leaf is never computed; a summed
    /// leaf that is a sum of one-hots is added into a dense accumulator); `None` if the body is
    /// not a chain of flat bindings (real, linear real and integer) ending in such a tuple.
    /// Without `n` and `i`, `body` is run once (a lone sum of one-hots, outside any loop).
    pub(super) fn flat_loop(
        &mut self,
        n: Option<&Term>,
        i: Option<&Var>,
        body: &LTerm,
        span: Span,
        mut sinks: Vec<Sink>,
    ) -> Option<FlatLoop> {
        let (items, rest) = loop_run(body);
        if matches!(rest.kind, LTermKind::Let(..) | LTermKind::LinLet(..)) {
            return None;
        }
        let mut leaves = Vec::new();
        if !loop_leaves(rest, &mut leaves) || leaves.len() != sinks.len() {
            return None;
        }
        for (s, leaf) in sinks.iter_mut().zip(&leaves) {
            match leaf {
                Leaf::Zero => *s = Sink::Zero,
                Leaf::Hots(_) if *s == Sink::Sum => *s = Sink::Dense,
                Leaf::Hots(_) if *s == Sink::Into => {}
                Leaf::Hots(_) => return None,
                Leaf::Real(_) if *s == Sink::Into => return None,
                Leaf::Real(_) => {}
            }
        }
        let n = n.map(|n| self.int(n));
        let (var, flat) = self.in_loop(|c| {
            let var = i.map(|i| c.bind(i));
            let hoist = Hoist {
                index: i.map_or_else(VarId::fresh, |i| i.id),
                pre: Vec::new(),
                regs: FxHashMap::default(),
                colp: Vec::new(),
                lcolp: Vec::new(),
            };
            // The register reads of the outputs: flat linear reals, one-hots' values.
            let mut ls: Vec<&LTerm> = Vec::new();
            for (leaf, s) in leaves.iter().zip(&sinks) {
                match leaf {
                    Leaf::Real(l) if *s != Sink::Zero => ls.push(l),
                    Leaf::Hots(hs) => ls.extend(hs.iter().map(|h| match &h.kind {
                        LTermKind::OneHot(_, _, e) => e,
                        _ => unreachable!("a one-hot"),
                    })),
                    _ => {}
                }
            }
            let mut b = Self::builder(&items, &ls, Some(hoist));
            let var = var.zip(i).map(|(slot, i)| {
                let reg = b.ints.fresh();
                b.ints.vars.insert(i.id, reg);
                (slot, reg)
            });
            c.flat_items(&mut b, &items);
            for (o, leaf) in leaves.iter().enumerate() {
                match leaf {
                    Leaf::Real(l) if sinks[o] != Sink::Zero => {
                        let a = c.flat_lin(&mut b, l);
                        b.ins(Ins::Out {
                            a: a.reg,
                            o: index(o),
                        });
                        b.l.release(a);
                        b.r.settle();
                        b.l.settle();
                    }
                    Leaf::Hots(hs) => {
                        for h in hs {
                            let LTermKind::OneHot(n, i, e) = &h.kind else {
                                unreachable!("a one-hot")
                            };
                            // The reference evaluator's order: the length (checked), the
                            // index, the value, then the index's range.
                            b.ints.hots.push((index(o), h.span));
                            let h = index(b.ints.hots.len() - 1);
                            let n = c.flat_int(&mut b, n);
                            b.ins(Ins::ILen { a: n, h });
                            let i = c.flat_int(&mut b, i);
                            let a = c.flat_lin(&mut b, e);
                            b.ins(Ins::OutAt { a: a.reg, i, n, h });
                            b.l.release(a);
                            b.r.settle();
                            b.l.settle();
                        }
                    }
                    _ => {}
                }
            }
            (var, Self::finish(b))
        });
        Some(FlatLoop {
            n,
            var,
            span,
            flat,
            sinks,
        })
    }

    /// An integer term in a loop, in a register: literals, the index and integers bound in the
    /// loop, primitives over them inline; variables bound outside and lengths of their
    /// index-free places hoisted before the loop; anything else compiled on its own (reading
    /// the integers bound in the loop from their slots).
    fn flat_int(&mut self, b: &mut Builder, t: &Term) -> Reg {
        deep(|| {
            use TermKind as K;
            match &t.kind {
                K::Lit(l) if let Value::Int(x) = l.value() => {
                    let ints = &mut b.ints;
                    if let Some(&r) = ints.consts.get(&x) {
                        return r;
                    }
                    let r = ints.fresh();
                    ints.consts.insert(x, r);
                    r
                }
                K::Var(x) => match b.ints.vars.get(&x.id) {
                    Some(&r) => r,
                    None => self.int_hoisted(b, t, (x.id, Vec::new(), false)),
                },
                K::Length(xs) if let Some((x, path)) = proj_path(xs) => {
                    self.int_hoisted(b, t, (x.id, path, true))
                }
                K::Prim(op, args) if let (Some(Scalar::Int2(f)), 2) = (op.scalar(), args.len()) => {
                    let a = self.flat_int(b, &args[0]);
                    let c = self.flat_int(b, &args[1]);
                    b.ints.ops.push((f, op.clone(), t.span));
                    let f = index(b.ints.ops.len() - 1);
                    let dst = b.ints.fresh();
                    b.ins(Ins::IArith { f, a, b: c, dst });
                    dst
                }
                _ => {
                    let f = self.int(t);
                    b.ints.calls.push(f);
                    let f = index(b.ints.calls.len() - 1);
                    let dst = b.ints.fresh();
                    b.ins(Ins::ICall { f, dst });
                    dst
                }
            }
        })
    }

    /// A loop-invariant integer that cannot fail (a variable bound outside the loop, the length
    /// of an index-free place of one), read once before the loop.
    fn int_hoisted(&mut self, b: &mut Builder, t: &Term, key: (VarId, Vec<bool>, bool)) -> Reg {
        if let Some(&r) = b.ints.hoisted.get(&key) {
            return r;
        }
        let f = self.int(t);
        b.ints.calls.push(f);
        let f = index(b.ints.calls.len() - 1);
        let dst = b.ints.fresh();
        b.hoist
            .as_mut()
            .expect("in a loop")
            .pre
            .push(Ins::ICall { f, dst });
        b.ints.hoisted.insert(key, dst);
        dst
    }

    /// A register holding a loop-invariant read (hoisted before the loop, once per distinct
    /// read): `t` (a variable or an index-free place) when `lin` is false, else the linear
    /// variable `x` under `path`.
    fn hoisted(&mut self, b: &mut Builder, x: &Var, path: Vec<bool>, t: Option<&Term>) -> Opd {
        let lin = t.is_none();
        let key = (x.id, path, lin);
        let h = b.hoist.as_ref().expect("in a loop");
        if let Some(&reg) = h.regs.get(&key) {
            return Opd { reg, last: false };
        }
        let reg = if lin { b.l.fresh() } else { b.r.fresh() };
        let (slot, _) = self.read(x);
        let ins = match t {
            None if key.1.is_empty() => Ins::LLoad {
                slot: index(slot),
                dst: reg,
            },
            None => {
                b.lplaces.push((slot, key.1.clone()));
                Ins::LPlace {
                    p: index(b.lplaces.len() - 1),
                    dst: reg,
                }
            }
            Some(_) if key.1.is_empty() => Ins::Load {
                slot: index(slot),
                dst: reg,
            },
            Some(t) => match self.place(t, 1) {
                Some(p) => {
                    b.places.push(p);
                    Ins::Place {
                        p: index(b.places.len() - 1),
                        dst: reg,
                    }
                }
                None => {
                    let f = self.real(t);
                    b.calls.push(f);
                    Ins::Call {
                        f: index(b.calls.len() - 1),
                        dst: reg,
                    }
                }
            },
        };
        let h = b.hoist.as_mut().expect("in a loop");
        h.pre.push(ins);
        h.regs.insert(key, reg);
        Opd { reg, last: false }
    }

    fn own_reads(&self, b: &Builder, x: &Var) -> u32 {
        b.reads.get(&Key::Var(x.id)).copied().unwrap_or(0)
    }

    /// The frame slot a variable bound in the run is stored to: unless every use of it is a
    /// register read in the run.
    fn stored(&mut self, b: &Builder, x: &Var) -> Option<u32> {
        let all = self.uses.get(&x.id).copied().unwrap_or(0);
        (all != self.own_reads(b, x)).then(|| index(self.bind(x)))
    }

    fn flat_real(&mut self, b: &mut Builder, t: &Term) -> Opd {
        deep(|| {
            use TermKind as K;
            match &t.kind {
                K::Lit(l) => {
                    let Value::Real(x) = l.value() else {
                        unreachable!("a real literal")
                    };
                    let r = &mut b.r;
                    let reg = *b.consts.entry(x.to_bits()).or_insert_with(|| r.fresh());
                    Opd { reg, last: false }
                }
                K::Var(x) => {
                    let key = Key::Var(x.id);
                    if let Some(o) = b.r.read(key) {
                        return o;
                    }
                    if b.hoist.is_some() {
                        // Bound outside the loop (every variable bound in it is in a register).
                        return self.hoisted(b, x, Vec::new(), Some(t));
                    }
                    let (slot, _) = self.read(x);
                    let dst = b.r.alloc();
                    b.ins(Ins::Load {
                        slot: index(slot),
                        dst,
                    });
                    b.keep_real(key, dst)
                }
                K::Prim(op, args) => {
                    let o = match (op.scalar(), args.len()) {
                        (Some(Scalar::Real1(f)), 1) => {
                            let a = self.flat_real(b, &args[0]);
                            b.r.release(a);
                            let dst = b.r.alloc();
                            if op.name() == "neg" && b.hoist.is_none() {
                                Ins::Neg { a: a.reg, dst }
                            } else {
                                Ins::R1 { f, a: a.reg, dst }
                            }
                        }
                        (Some(Scalar::Real2(f)), 2) => {
                            let a = self.flat_real(b, &args[0]);
                            let c = self.flat_real(b, &args[1]);
                            b.r.release(a);
                            b.r.release(c);
                            let dst = b.r.alloc();
                            match Arith::of(op.name()) {
                                Some(op) => Ins::Arith {
                                    op,
                                    a: a.reg,
                                    b: c.reg,
                                    dst,
                                },
                                None => Ins::R2 {
                                    f,
                                    a: a.reg,
                                    b: c.reg,
                                    dst,
                                },
                            }
                        }
                        _ => unreachable!("a flat primitive"),
                    };
                    b.ins(o);
                    let (Ins::R1 { dst, .. }
                    | Ins::Neg { dst, .. }
                    | Ins::R2 { dst, .. }
                    | Ins::Arith { dst, .. }) = o
                    else {
                        unreachable!()
                    };
                    Opd {
                        reg: dst,
                        last: true,
                    }
                }
                _ => {
                    // A place.
                    if let Some(h) = &b.hoist {
                        // Loop-invariant (its root is bound outside the loop), or the element
                        // at the loop's index of an array that is.
                        if let Some((x, path)) = proj_path(t) {
                            return self.hoisted(b, x, path, Some(t));
                        }
                        // The element at the loop's index, or at a computed index (`xs ! (i +
                        // 1)`, `xs ! i_12`). A computed index is compiled twice (in registers,
                        // and in the fallback place), so only one whose code moves nothing out
                        // of the frame.
                        let at_loop = |i: &Term| matches!(&i.kind, K::Var(i) if i.id == h.index);
                        if let K::Index(e, i) = &t.kind
                            && (at_loop(i) || simple_int(i))
                            && proj_path(e).is_some()
                            && let Some(prefix) = self.place(e, 0)
                            && prefix.indices == 0
                            && let Some(p) = self.place(t, 1)
                        {
                            let at = (!at_loop(i)).then(|| self.flat_int(b, i));
                            let h = b.hoist.as_mut().expect("in a loop");
                            h.colp.push(prefix);
                            let c = index(h.colp.len() - 1);
                            b.places.push(p);
                            let p = index(b.places.len() - 1);
                            let dst = b.r.alloc();
                            b.ins(match at {
                                None => Ins::Col { c, p, dst },
                                Some(i) => Ins::ColAt { c, i, p, dst },
                            });
                            return Opd {
                                reg: dst,
                                last: true,
                            };
                        }
                    }
                    let key = real_place_key(t);
                    if let Some(o) = key.and_then(|k| b.r.read(k)) {
                        return o;
                    }
                    let dst = b.r.alloc();
                    if let Some(p) = self.place(t, 1) {
                        b.places.push(p);
                        let p = index(b.places.len() - 1);
                        b.ins(Ins::Place { p, dst });
                        if let Some(key) = key {
                            return b.keep_real(key, dst);
                        }
                    } else {
                        let f = self.real(t);
                        b.calls.push(f);
                        let f = index(b.calls.len() - 1);
                        b.ins(Ins::Call { f, dst });
                    }
                    Opd {
                        reg: dst,
                        last: true,
                    }
                }
            }
        })
    }

    fn flat_lin(&mut self, b: &mut Builder, l: &LTerm) -> Opd {
        deep(|| {
            use LTermKind as K;
            match &l.kind {
                K::Var(x) => {
                    let key = Key::Var(x.id);
                    if let Some(o) = b.l.read(key) {
                        return o;
                    }
                    if b.hoist.is_some() {
                        return self.hoisted(b, x, Vec::new(), None);
                    }
                    let (slot, _) = self.read(x);
                    let dst = b.l.alloc();
                    b.ins(Ins::LLoad {
                        slot: index(slot),
                        dst,
                    });
                    b.keep_lin(key, dst)
                }
                K::Zero(_) => {
                    // A register never written: `None` from the start.
                    let l = &mut b.l;
                    let reg = *b.zero.get_or_insert_with(|| l.fresh());
                    Opd { reg, last: false }
                }
                K::Plus(x, y)
                    if matches!(x.kind, K::Scale(..)) || matches!(y.kind, K::Scale(..)) =>
                {
                    // `c · e + y` (or `x + c · e`) as one instruction. The operands are compiled in
                    // the order of the reference evaluator; only places can fail, and the product
                    // has no effect, so computing it after `y`'s operands is not observable (and
                    // float `+` is commutative).
                    let (k, e, a) = match (&x.kind, &y.kind) {
                        (K::Scale(k, e), _) => {
                            let k = self.flat_real(b, k);
                            let e = self.flat_lin(b, e);
                            (k, e, self.flat_lin(b, y))
                        }
                        (_, K::Scale(k, e)) => {
                            let a = self.flat_lin(b, x);
                            let k = self.flat_real(b, k);
                            (k, self.flat_lin(b, e), a)
                        }
                        _ => unreachable!("a sum with a scaled operand"),
                    };
                    b.r.release(k);
                    b.l.release(e);
                    b.l.release(a);
                    let dst = b.l.alloc();
                    b.ins(Ins::LAxpy {
                        c: k.reg,
                        a: e.reg,
                        b: a.reg,
                        dst,
                    });
                    Opd {
                        reg: dst,
                        last: true,
                    }
                }
                K::Plus(x, y) => {
                    let a = self.flat_lin(b, x);
                    let c = self.flat_lin(b, y);
                    b.l.release(a);
                    b.l.release(c);
                    let dst = b.l.alloc();
                    b.ins(Ins::LPlus {
                        a: a.reg,
                        b: c.reg,
                        dst,
                    });
                    Opd {
                        reg: dst,
                        last: true,
                    }
                }
                K::Scale(c, e) => {
                    let c = self.flat_real(b, c);
                    let a = self.flat_lin(b, e);
                    b.r.release(c);
                    b.l.release(a);
                    let dst = b.l.alloc();
                    b.ins(Ins::LScale {
                        c: c.reg,
                        a: a.reg,
                        dst,
                    });
                    Opd {
                        reg: dst,
                        last: true,
                    }
                }
                K::Fst(_) | K::Snd(_) => {
                    // A linear place, read by reference (it may be read again, so never moved).
                    let (v, path) = lin_path(l).expect("a flat linear place");
                    if b.hoist.is_some() {
                        return self.hoisted(b, v, path, None);
                    }
                    let key = place_key(v, path.iter().copied());
                    if let Some(o) = key.and_then(|k| b.l.read(k)) {
                        return o;
                    }
                    let (slot, _) = self.read(v);
                    b.lplaces.push((slot, path));
                    let dst = b.l.alloc();
                    b.ins(Ins::LPlace {
                        p: index(b.lplaces.len() - 1),
                        dst,
                    });
                    match key {
                        Some(key) => b.keep_lin(key, dst),
                        None => Opd {
                            reg: dst,
                            last: true,
                        },
                    }
                }
                K::Index(e, i)
                    if let Some(h) = &b.hoist
                        && matches!(&i.kind, TermKind::Var(i) if i.id == h.index) =>
                {
                    // The element at the loop's index of a linear array bound outside the loop.
                    let (v, path) = lin_path(e).expect("a flat linear array");
                    let (slot, _) = self.read(v);
                    let h = b.hoist.as_mut().expect("in a loop");
                    h.lcolp.push((slot, path));
                    let c = index(h.lcolp.len() - 1);
                    let dst = b.l.alloc();
                    b.ins(Ins::LCol { c, dst });
                    Opd {
                        reg: dst,
                        last: true,
                    }
                }
                K::Index(e, i)
                    if let TermKind::Lit(k) = &i.kind
                        && let Value::Int(k) = k.value()
                        && let Ok(k) = u32::try_from(k)
                        && let Some((v, path)) = match &e.kind {
                            K::Var(v) => Some((v, Vec::new())),
                            _ => lin_path(e),
                        } =>
                {
                    // An element at a literal index (`snd d ! 7`, the forward derivative of a
                    // written-out index chain): read along the place, no closure.
                    let (slot, _) = self.read(v);
                    b.lplaces.push((slot, path));
                    let dst = b.l.alloc();
                    b.ins(Ins::LIndex {
                        p: index(b.lplaces.len() - 1),
                        k,
                        dst,
                    });
                    Opd {
                        reg: dst,
                        last: true,
                    }
                }
                K::Index(..) => {
                    // Compiled on its own (its array and index are not registers: an array
                    // variable is never bound in a run, an index is an integer).
                    let f = self.lin_real(l);
                    b.lcalls.push(f);
                    let dst = b.l.alloc();
                    b.ins(Ins::LCall {
                        f: index(b.lcalls.len() - 1),
                        dst,
                    });
                    Opd {
                        reg: dst,
                        last: true,
                    }
                }
                _ => unreachable!("a flat linear term"),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    /// `Ins::Arith` computes what the builtin primitives' own functions compute.
    #[test]
    fn arith_is_the_primitives_arithmetic() {
        use super::Arith;
        use crate::prim::{Scalar, op};
        let xs = [0.0, -0.0, 1.5, -2.25, 3.0e300, f64::INFINITY, f64::NAN];
        for name in ["add", "sub", "mul", "div"] {
            let Some(Scalar::Real2(f)) = op(name).scalar() else {
                panic!("{name} is a scalar primitive");
            };
            let a = Arith::of(name).expect("an inline primitive");
            for x in xs {
                for y in xs {
                    assert_eq!(a.apply(x, y).to_bits(), f(x, y).to_bits(), "{name} {x} {y}");
                }
            }
        }
        assert!(Arith::of("pow").is_none());
    }

    /// `fuse` merges a pair only where the intermediate register is read once, by the second
    /// instruction, and never again before it is written; chains of scalings fuse up to three.
    #[test]
    fn pairs_fuse_only_where_the_intermediate_register_dies() {
        use super::{Ins, fuse};
        let kinds = |ins: &[Ins]| -> Vec<&'static str> {
            ins.iter()
                .map(|i| match i {
                    Ins::LScale { .. } => "LScale",
                    Ins::LAxpy { .. } => "LAxpy",
                    Ins::LStore { .. } => "LStore",
                    Ins::LDot { .. } => "LDot",
                    Ins::LScale2 { .. } => "LScale2",
                    Ins::LScale3 { .. } => "LScale3",
                    Ins::LScaleLoad { .. } => "LScaleLoad",
                    Ins::Load { .. } => "Load",
                    _ => "other",
                })
                .collect()
        };
        // l1 = r0 · l0; l2 = r1 · l3 + l1: l1 dies, one LDot.
        let dot = [
            Ins::LScale { c: 0, a: 0, dst: 1 },
            Ins::LAxpy {
                c: 1,
                a: 3,
                b: 1,
                dst: 2,
            },
            Ins::LStore { a: 2, slot: 0 },
        ];
        assert_eq!(kinds(&fuse(dot.to_vec())), ["LDot", "LStore"]);
        // The same, but l1 is stored afterwards: no fusion.
        let mut kept = dot.to_vec();
        kept.push(Ins::LStore { a: 1, slot: 1 });
        assert_eq!(kinds(&fuse(kept)), ["LScale", "LAxpy", "LStore", "LStore"]);
        // l1 read twice by the second instruction: no fusion.
        let twice = [
            Ins::LScale { c: 0, a: 0, dst: 1 },
            Ins::LAxpy {
                c: 1,
                a: 1,
                b: 1,
                dst: 2,
            },
        ];
        assert_eq!(kinds(&fuse(twice.to_vec())), ["LScale", "LAxpy"]);
        // Four scalings in a chain (each overwriting its input): LScale3, then the fourth.
        let chain: Vec<Ins> = (0..4).map(|c| Ins::LScale { c, a: 0, dst: 0 }).collect();
        assert_eq!(kinds(&fuse(chain)), ["LScale3", "LScale"]);
        // A load whose register is read again later is not folded into its first reader.
        let load = [
            Ins::Load { slot: 3, dst: 5 },
            Ins::LScale { c: 5, a: 0, dst: 1 },
            Ins::LScale { c: 5, a: 1, dst: 2 },
        ];
        assert_eq!(kinds(&fuse(load.to_vec())), ["Load", "LScale2"]);
        let load1 = [
            Ins::Load { slot: 3, dst: 5 },
            Ins::LScale { c: 5, a: 0, dst: 1 },
        ];
        assert_eq!(kinds(&fuse(load1.to_vec())), ["LScaleLoad"]);
    }

    /// Fused code computes what the code it was fused from computes: random straight runs of
    /// loads, unary functions (and `neg`), arithmetic and stores over a few registers and
    /// slots (so loaded and stored registers are read again, or not), run fused and unfused;
    /// every register is stored at the end, and the frames must agree bit for bit. Every
    /// fused real form is made along the way.
    #[test]
    fn fused_real_code_computes_what_it_was_fused_from() {
        use super::{Arith, Flat, Ins, Rt, fuse};
        use crate::value::Value;
        let flat = |ins: Vec<Ins>| Flat {
            ins,
            places: Vec::new(),
            lplaces: Vec::new(),
            calls: Vec::new(),
            lcalls: Vec::new(),
            regs: Default::default(),
            init: (Vec::new(), 0),
            pre: Vec::new(),
            colp: Vec::new(),
            lcolp: Vec::new(),
            icalls: Vec::new(),
            iops: Vec::new(),
            hots: Vec::new(),
            iinit: Vec::new(),
            rt: Default::default(),
        };
        let run = |f: &Flat| {
            let mut fr: Vec<Value> = (0..12)
                .map(|k| Value::Real([0.5, -0.0, 2.0, -1.25][k % 4]))
                .collect();
            let mut r = vec![0.0; 4];
            f.exec::<true>(&f.ins, &mut fr, &mut r, &mut [], &mut Rt::default())
                .expect("no failing instructions");
            fr.iter()
                .map(|v| v.expect_real().to_bits())
                .collect::<Vec<u64>>()
        };
        let fs: [fn(f64) -> f64; 2] = [f64::sin, f64::exp];
        let ops = [Arith::Add, Arith::Sub, Arith::Mul, Arith::Div];
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut pick = |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n) as u32
        };
        let mut made = std::collections::BTreeSet::new();
        for _ in 0..3000 {
            let mut ins = Vec::new();
            for _ in 0..2 + pick(10) {
                let (a, b, dst) = (pick(4), pick(4), pick(4));
                ins.push(match pick(6) {
                    0 | 1 => Ins::Load { slot: pick(8), dst },
                    2 => Ins::R1 {
                        f: fs[pick(2) as usize],
                        a,
                        dst,
                    },
                    3 => Ins::Neg { a, dst },
                    4 => Ins::Arith {
                        op: ops[pick(4) as usize],
                        a,
                        b,
                        dst,
                    },
                    _ => Ins::Store { a, slot: pick(8) },
                });
            }
            ins.extend((0..4).map(|a| Ins::Store { a, slot: 8 + a }));
            let fused = fuse(ins.clone());
            for i in &fused {
                made.insert(format!("{i:?}").split([' ', '{']).next().map(str::to_owned));
            }
            assert_eq!(run(&flat(fused)), run(&flat(ins.clone())), "{ins:?}");
        }
        // `neg` inline is the primitive's function, zeros' signs included.
        let Some(crate::prim::Scalar::Real1(neg)) = crate::prim::op("neg").scalar() else {
            panic!("neg is a scalar primitive");
        };
        let negs = vec![
            Ins::Load { slot: 1, dst: 0 },
            Ins::Neg { a: 0, dst: 1 },
            Ins::Store { a: 1, slot: 9 },
            Ins::Load { slot: 0, dst: 0 },
            Ins::Neg { a: 0, dst: 2 },
            Ins::Store { a: 2, slot: 10 },
        ];
        let out = run(&flat(negs));
        assert_eq!(out[9], neg(-0.0).to_bits());
        assert_eq!(out[10], neg(0.5).to_bits());
        for k in [
            "R1Load",
            "ArithLoad",
            "LoadArith",
            "R1Neg",
            "R1LoadNeg",
            "ArithStore",
            "R1Store",
            "ArithLoadStore",
            "R1LoadStore",
        ] {
            assert!(made.contains(&Some(k.to_owned())), "{k} never made");
        }
    }

    #[test]
    fn instructions_are_small() {
        assert!(std::mem::size_of::<super::Ins>() <= 24);
    }
}
