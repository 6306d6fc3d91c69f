//! Measuring the cost of derivatives: primal, forward and reverse time of one program at one
//! input, on the execution engine ([`crate::target::engine`]), and the benchmark suite.
//!
//! A [`Bench`] prepares, once, the three pieces of code the cheap-gradient principle compares
//! (DESIGN.md §7), through the library's pipeline ([`Optimized`], as `chad::Function` runs
//! programs):
//!
//! * the *primal*: the source program optimised ([`optimize`](crate::optimize::optimize): simplified, its called helper
//!   functions inlined), embedded in the target language ([`embed::entry`](crate::target::embed::entry)) and simplified,
//!   compiled with [`Code::compile`](crate::target::engine::Code::compile);
//! * the *forward* derivative: [`Jvp`](crate::ad::Jvp) of the optimised program with simplified code, run along
//!   a fixed tangent;
//! * the *reverse* derivative: [`Vjp`](crate::ad::Vjp) of the optimised program with simplified code, run with
//!   a fixed output cotangent;
//! * and, as the baseline reverse CHAD is measured against, *dual-numbers reverse* AD
//!   ([`DualReverse`], the taping algorithm of Smeding & Vákár 2023) of the optimised program,
//!   run at run time with the same cotangent. It interprets the source program (there is no
//!   compiled code), so its time includes interpretation as well as taping.
//!
//! Differentiating the optimised program rather than the program as written matters for
//! higher-order programs: the primal runs first-order once the simplifier has β-reduced its
//! closures, and so does the derivative of the optimised program, while the derivative of the
//! program as written carries the closures' tapes (see [`crate::optimize`]).
//!
//! The first three run on the same engine, so their times are comparable. The tangents and the
//! cotangent are deterministic pseudo-random values ([`Rng`]) shaped like the arguments and the
//! result; for a `Real` result the cotangent is `1.0`, so reverse mode computes the gradient.
//! [`Bench::measure`] warms each phase up and reports the median of interleaved repetitions as a
//! [`Report`] (`chad bench` prints it).
//!
//! ```
//! use chad::internals::bench::Bench;
//! use chad::Value;
//!
//! let program = chad::internals::source::load(
//!     "def f (xs : Array Real) : Real = sum (map (\\(x : Real) -> x * x) xs)",
//!     &chad::internals::prim::Registry::builtin(),
//! )?;
//! let entry = program.entry(0);
//! let bench = Bench::new(&entry, vec![Value::reals(vec![1.0, 2.0, 3.0])])?;
//! assert_eq!(bench.primal()?.expect_real(), 14.0);
//! let (_, grad) = bench.reverse()?; // the cotangent of a Real result is 1: the gradient
//! assert_eq!(grad[0].expect_reals(), &[2.0, 4.0, 6.0]);
//! let report = bench.measure(3)?;
//! assert!(report.primal_s > 0.0 && report.reverse_over_primal() > 0.0);
//! # Ok::<(), chad::Error>(())
//! ```
//!
//! The benchmark suite (`benches/programs/suite.json`: programs, sizes and argument shapes) is
//! read by [`suite`]; the programs that are generated rather than written live in [`programs`].
//! `cargo bench --bench suite` times every case with criterion, `cargo run --release --example
//! bench_suite -- write DIR` writes every case's program and arguments to files, and
//! `benches/perf_table.py` runs `chad bench` on those and regenerates the README's table.

#[path = "bench/programs.rs"]
pub mod programs;
#[path = "bench/suite.rs"]
pub mod suite;

use crate::ad::optimized::Optimized;
use crate::dual_reverse::{self, DualReverse};
use crate::error::{Error, ErrorKind, Result};
use crate::source::term::Entry;
use crate::types::Type;
use crate::value::Value;
use std::hint::black_box;
use std::time::Instant;

/// One program at one input, ready to time: primal, forward and reverse code compiled once.
pub struct Bench {
    args: Vec<Value>,
    code: Optimized,
    dual: DualReverse,
    tangents: Vec<Value>,
    cotangent: Value,
    compile_s: f64,
}

impl Bench {
    /// Prepares `entry` at `args`: checks the arguments, optimises the program ([`optimize`](crate::optimize::optimize)),
    /// builds the primal code (the simplified embedding of the optimised program) and the
    /// simplified forward and reverse derivatives of the optimised program (the time this takes
    /// is [`Bench::compile_s`]), fixes the tangents and runs the primal once to
    /// fix an output cotangent of the result's shape. Fails on bad arguments, on entries AD does
    /// not support (higher-order parameters or results, primitives without derivatives) and on
    /// runtime errors of the primal.
    pub fn new(entry: &Entry, args: Vec<Value>) -> Result<Bench> {
        crate::eval::check_args(entry, &args)?;
        let start = Instant::now();
        // All three phases run the optimised program (simplified, its called helper functions
        // inlined: see `crate::optimize`), so the ratios compare derivatives to the primal
        // they differentiate.
        // The library's pipeline (`Optimized`), as `chad::Function` runs it.
        let code = Optimized::new(entry);
        code.primal();
        code.jvp()?;
        code.vjp()?;
        let compile_s = start.elapsed().as_secs_f64();
        let dual = DualReverse::new(code.differentiated(), dual_reverse::Options::default())?;

        let mut rng = Rng::new(TANGENT_SEED);
        let tangents = entry
            .params
            .iter()
            .zip(&args)
            .map(|(p, a)| random_tangent(&p.ty, a, &mut rng))
            .collect();
        let result = code.primal().run(&args)?;
        let cotangent = match entry.body.ty {
            Type::Real => Value::Real(1.0),
            ref ty => random_tangent(ty, &result, &mut Rng::new(COTANGENT_SEED)),
        };
        Ok(Bench {
            args,
            code,
            dual,
            tangents,
            cotangent,
            compile_s,
        })
    }

    /// Seconds spent building the primal, forward and reverse code (optimisation, embedding,
    /// AD, simplification and compilation).
    pub fn compile_s(&self) -> f64 {
        self.compile_s
    }

    /// The arguments.
    pub fn args(&self) -> &[Value] {
        &self.args
    }

    /// The fixed tangents [`Bench::forward`] uses, one per argument (`()` for discrete ones).
    pub fn tangents(&self) -> &[Value] {
        &self.tangents
    }

    /// The fixed output cotangent [`Bench::reverse`] uses (`1.0` for a `Real` result).
    pub fn cotangent(&self) -> &Value {
        &self.cotangent
    }

    /// One run of the primal code: the program's value.
    pub fn primal(&self) -> Result<Value> {
        self.code.primal().run(&self.args)
    }

    /// One forward-mode run ([`Jvp::jvp`](crate::ad::Jvp::jvp)) along the fixed tangents: the value and the
    /// result's tangent.
    pub fn forward(&self) -> Result<(Value, Value)> {
        self.code.jvp()?.jvp(&self.args, &self.tangents)
    }

    /// One reverse-mode run ([`Vjp::vjp`](crate::ad::Vjp::vjp)) with the fixed cotangent: the value and every
    /// argument's cotangent (the gradient, for a `Real` result).
    pub fn reverse(&self) -> Result<(Value, Vec<Value>)> {
        self.code.vjp()?.vjp(&self.args, &self.cotangent)
    }

    /// One run of dual-numbers reverse AD ([`DualReverse::vjp`]) with the fixed cotangent: the
    /// value and every argument's cotangent (those of [`Bench::reverse`], up to rounding).
    pub fn dual_reverse(&self) -> Result<(Value, Vec<Value>)> {
        let out = self.dual.vjp(&self.args, &self.cotangent)?;
        Ok((out.value, out.gradient))
    }

    /// Times the phases: one warm-up run of each, then `repeat` rounds running primal,
    /// forward, reverse and dual-numbers reverse once each (interleaved, so that drift in the
    /// machine's speed affects all of them alike); each time is the median over the rounds.
    /// Fails if `repeat` is 0 or a run fails.
    pub fn measure(&self, repeat: usize) -> Result<Report> {
        self.measure_with(repeat, true)
    }

    /// [`Bench::measure`], with or without the dual-numbers baseline (which interprets the
    /// program, so it can take many times longer than the other phases together).
    pub fn measure_with(&self, repeat: usize, dual: bool) -> Result<Report> {
        if repeat == 0 {
            return Err(Error::new(
                ErrorKind::Argument,
                "the number of repetitions must be at least 1",
            ));
        }
        black_box(self.primal()?);
        black_box(self.forward()?);
        black_box(self.reverse()?);
        if dual {
            black_box(self.dual_reverse()?);
        }
        let (mut p, mut f, mut r, mut d) = (
            Vec::with_capacity(repeat),
            Vec::with_capacity(repeat),
            Vec::with_capacity(repeat),
            Vec::with_capacity(repeat),
        );
        for _ in 0..repeat {
            p.push(time(|| self.primal())?);
            f.push(time(|| self.forward())?);
            r.push(time(|| self.reverse())?);
            if dual {
                d.push(time(|| self.dual_reverse())?);
            }
        }
        Ok(Report {
            compile_s: self.compile_s,
            primal_s: median(p),
            forward_s: median(f),
            reverse_s: median(r),
            dual_reverse_s: dual.then(|| median(d)),
            rustc_s: None,
        })
    }
}

/// One program at one input compiled to native code ([`crate::native`]): the same three
/// phases as [`Bench`], built from the same optimised, differentiated and simplified code,
/// lowered to the IR and compiled by `rustc`; runs are timed inside the library.
pub struct NativeBench {
    native: crate::native::Native,
    args: Vec<crate::ir::interp::Val>,
    forward_args: Vec<crate::ir::interp::Val>,
    reverse_args: Vec<crate::ir::interp::Val>,
    compile_s: f64,
}

impl NativeBench {
    /// Prepares `entry` at `args` with the fixed tangents and cotangent of [`Bench`]:
    /// compiles (or loads from the cache) the native code and runs the primal once.
    pub fn new(entry: &Entry, args: Vec<Value>, verbose: bool) -> Result<NativeBench> {
        crate::eval::check_args(entry, &args)?;
        let start = Instant::now();
        let code = crate::ir::compile::Compiled::new(entry)?;
        let native = crate::native::Native::new(code, None, verbose)?;
        let compile_s = start.elapsed().as_secs_f64();
        let d = &native.defs[0];
        let mut rng = Rng::new(TANGENT_SEED);
        let tangents: Vec<Value> = entry
            .params
            .iter()
            .zip(&args)
            .map(|(p, a)| random_tangent(&p.ty, a, &mut rng))
            .collect();
        let result = native.eval(&args)?;
        let cotangent = match entry.body.ty {
            Type::Real => Value::Real(1.0),
            ref ty => random_tangent(ty, &result, &mut Rng::new(COTANGENT_SEED)),
        };
        let x = d.context(&args)?;
        let forward_args = vec![x.clone(), d.context_tangent(&args, &tangents)?];
        let reverse_args = vec![x, d.cotangent(&cotangent)?];
        Ok(NativeBench {
            args: d.args(&args)?,
            native,
            forward_args,
            reverse_args,
            compile_s,
        })
    }

    /// The native code (to run the phases directly).
    pub fn native(&self) -> &crate::native::Native {
        &self.native
    }

    /// Times the phases like [`Bench::measure`]: a warm-up run of each, then `repeat`
    /// interleaved rounds; each time is the median over the rounds, measured inside the
    /// library (argument conversion excluded).
    pub fn measure(&self, repeat: usize) -> Result<Report> {
        if repeat == 0 {
            return Err(Error::new(
                ErrorKind::Argument,
                "the number of repetitions must be at least 1",
            ));
        }
        let d = &self.native.defs[0];
        let jvp = d.jvp.expect("forward mode compiled");
        let vjp = d.vjp.expect("reverse mode compiled");
        let mut phases = [
            self.native.prepare(d.primal, &self.args)?,
            self.native.prepare(jvp, &self.forward_args)?,
            self.native.prepare(vjp, &self.reverse_args)?,
        ];
        for p in &mut phases {
            p.run(1)?;
        }
        let mut times = [Vec::new(), Vec::new(), Vec::new()];
        for _ in 0..repeat {
            for (p, t) in phases.iter_mut().zip(&mut times) {
                t.push(p.run(1)?.1[0].max(1e-9));
            }
        }
        let [p, f, r] = times;
        Ok(Report {
            compile_s: self.compile_s,
            primal_s: median(p),
            forward_s: median(f),
            reverse_s: median(r),
            dual_reverse_s: None,
            rustc_s: Some(self.native.rustc_s),
        })
    }
}

/// The seed of the tangents' generator.
const TANGENT_SEED: u64 = 0x7a6e_6765_6e74;
/// The seed of the cotangent's generator.
const COTANGENT_SEED: u64 = 0xc07a_6e67;

/// The wall time of one call, in seconds (at least a nanosecond, so ratios stay finite).
fn time<T>(f: impl FnOnce() -> Result<T>) -> Result<f64> {
    let start = Instant::now();
    black_box(f()?);
    Ok(start.elapsed().as_secs_f64().max(1e-9))
}

/// The median (the mean of the middle two for an even count) of a non-empty sample.
fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    if n % 2 == 1 {
        xs[n / 2]
    } else {
        (xs[n / 2 - 1] + xs[n / 2]) / 2.0
    }
}

/// The times [`Bench::measure`] reports, in seconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Report {
    /// Building the primal, forward and reverse code (once).
    pub compile_s: f64,
    /// The median primal run.
    pub primal_s: f64,
    /// The median forward-mode run.
    pub forward_s: f64,
    /// The median reverse-mode run.
    pub reverse_s: f64,
    /// The median dual-numbers reverse-mode run (the baseline), if it was measured.
    pub dual_reverse_s: Option<f64>,
    /// For native code: the seconds `rustc` took (0 when the library was cached), part of
    /// `compile_s`.
    pub rustc_s: Option<f64>,
}

impl Report {
    /// Forward time over primal time.
    pub fn forward_over_primal(&self) -> f64 {
        self.forward_s / self.primal_s
    }

    /// Reverse time over primal time (the cheap gradient principle asks for a small constant).
    pub fn reverse_over_primal(&self) -> f64 {
        self.reverse_s / self.primal_s
    }

    /// Dual-numbers reverse time over reverse CHAD time, if the baseline was measured.
    pub fn dual_over_reverse(&self) -> Option<f64> {
        self.dual_reverse_s.map(|d| d / self.reverse_s)
    }

    /// `{"primal_s": .., "forward_s": .., "reverse_s": .., "forward_over_primal": ..,
    /// "reverse_over_primal": .., "compile_s": .., "dual_reverse_s": ..,
    /// "dual_over_reverse": ..}`, in that order (the last two only if the baseline was
    /// measured).
    pub fn to_json(&self) -> serde_json::Value {
        let mut j = serde_json::json!({
            "primal_s": self.primal_s,
            "forward_s": self.forward_s,
            "reverse_s": self.reverse_s,
            "forward_over_primal": self.forward_over_primal(),
            "reverse_over_primal": self.reverse_over_primal(),
            "compile_s": self.compile_s,
        });
        if let (Some(d), Some(r), Some(o)) = (
            self.dual_reverse_s,
            self.dual_over_reverse(),
            j.as_object_mut(),
        ) {
            o.insert("dual_reverse_s".into(), d.into());
            o.insert("dual_over_reverse".into(), r.into());
        }
        if let (Some(r), Some(o)) = (self.rustc_s, j.as_object_mut()) {
            o.insert("rustc_s".into(), r.into());
            o.insert("backend".into(), "native".into());
        }
        j
    }
}

/// A small deterministic pseudo-random generator (SplitMix64): the same seed gives the same
/// numbers on every platform, so benchmark inputs are reproducible.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// A generator seeded by a string (its 64-bit FNV-1a hash).
    pub fn from_name(name: &str) -> Rng {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in name.bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        Rng(h)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`, with 53 random bits.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in `[lo, hi)`.
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.unit()
    }

    /// Uniform in `0 .. n` (`n` at least 1).
    pub fn below(&mut self, n: u64) -> u64 {
        // The bias of a plain modulus is below 2^-40 for the small bounds used here.
        self.next_u64() % n.max(1)
    }
}

/// A pseudo-random (co)tangent of the value `x : ty`: a value of type `ty.tangent()` of the same
/// shape (arrays of the same lengths, sums on the same side), with every real uniform in
/// `[-1, 1)` and `()` for every `Int`, `Bool` and `Unit`. `ty` must be first-order.
pub fn random_tangent(ty: &Type, x: &Value, rng: &mut Rng) -> Value {
    crate::deep::deep(|| match ty {
        Type::Real => Value::Real(rng.uniform(-1.0, 1.0)),
        Type::Int | Type::Bool | Type::Unit => Value::Unit,
        Type::Prod(p) => {
            let (a, b) = x.expect_pair();
            let ta = random_tangent(&p.0, a, rng);
            Value::pair(ta, random_tangent(&p.1, b, rng))
        }
        Type::Sum(p) => match x {
            Value::Inl(a) => Value::inl(random_tangent(&p.0, a, rng)),
            Value::Inr(b) => Value::inr(random_tangent(&p.1, b, rng)),
            other => panic!("internal error: a value of a sum type is {other}"),
        },
        Type::Array(a) => {
            if matches!(***a, Type::Real) {
                let n = x.array_len();
                return Value::reals((0..n).map(|_| rng.uniform(-1.0, 1.0)).collect());
            }
            let t = a.tangent().expect("first-order");
            let items = x
                .array_items()
                .iter()
                .map(|xi| random_tangent(a, xi, rng))
                .collect();
            Value::array(&t, items)
        }
        Type::Fun(_) => panic!("internal error: random_tangent of a function type"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prim::Registry;

    fn entry(text: &str) -> Entry {
        let prog = crate::source::load(text, &Registry::builtin()).expect("the program checks");
        prog.entry(prog.defs.len() - 1)
    }

    #[test]
    fn phases_compute_the_value_and_the_derivatives_of_a_square() {
        let e = entry("def f (x : Real) : Real = x * x");
        let b = Bench::new(&e, vec![Value::Real(3.0)]).unwrap();
        assert_eq!(b.primal().unwrap().expect_real(), 9.0);
        let t = b.tangents()[0].expect_real();
        assert!((-1.0..1.0).contains(&t) && t != 0.0);
        let (y, dy) = b.forward().unwrap();
        assert_eq!(y.expect_real(), 9.0);
        assert_eq!(dy.expect_real(), 6.0 * t); // d(x²) = 2x dx at x = 3
        assert_eq!(b.cotangent().expect_real(), 1.0);
        let (y, g) = b.reverse().unwrap();
        assert_eq!(y.expect_real(), 9.0);
        assert_eq!(g[0].expect_real(), 6.0);
    }

    #[test]
    fn phases_agree_with_the_library_entry_points() {
        let e = entry(
            "def f (a : Real) (n : Int) (xs : Array Real) : (Real, Array Real) =
               (a * toReal n, map (\\(x : Real) -> a * sin x) xs)",
        );
        let args = vec![
            Value::Real(0.5),
            Value::Int(3),
            Value::reals(vec![0.1, -0.2, 0.3]),
        ];
        let b = Bench::new(&e, args.clone()).unwrap();
        let direct = crate::eval::eval_entry(&e, &args).unwrap();
        assert_eq!(b.primal().unwrap().same(&direct), Some(true));
        // The tangents and the cotangent are shaped like the arguments and the result.
        assert!(matches!(b.tangents()[1], Value::Unit));
        assert_eq!(b.tangents()[2].expect_reals().len(), 3);
        let (c0, c1) = b.cotangent().expect_pair();
        assert!(c0.expect_real().abs() <= 1.0);
        assert_eq!(c1.expect_reals().len(), 3);

        let (y, t) = b.forward().unwrap();
        let (y2, t2) = crate::ad::jvp(&e, &args, b.tangents()).unwrap();
        assert_eq!(y.same(&y2), Some(true));
        assert_eq!(t.same(&t2), Some(true));
        // Independently: d(a n) = n da, d(a sin x_i) = sin x_i da + a cos x_i dx_i.
        let (ta, txs) = (
            b.tangents()[0].expect_real(),
            b.tangents()[2].expect_reals(),
        );
        let (d0, d1) = t.expect_pair();
        assert!((d0.expect_real() - 3.0 * ta).abs() < 1e-12);
        for (i, x) in [0.1f64, -0.2, 0.3].iter().enumerate() {
            let want = x.sin() * ta + 0.5 * x.cos() * txs[i];
            assert!((d1.expect_reals()[i] - want).abs() < 1e-12);
        }

        let (y, g) = b.reverse().unwrap();
        let (y2, g2) = crate::ad::vjp(&e, &args, b.cotangent()).unwrap();
        assert_eq!(y.same(&y2), Some(true));
        for (a, b) in g.iter().zip(&g2) {
            assert_eq!(a.same(b), Some(true));
        }
        // The baseline computes the same cotangents.
        let (y3, g3) = b.dual_reverse().unwrap();
        assert_eq!(y.same(&y3), Some(true));
        for (a, b) in g.iter().zip(&g3) {
            let (a, b) = (crate::oracle::fd::leaves(a), crate::oracle::fd::leaves(b));
            assert!(
                a.iter().zip(&b).all(|(x, y)| (x - y).abs() < 1e-12),
                "{a:?} {b:?}"
            );
        }
        // The dot-product test: <cotangent, J t> = <J^T cotangent, t>.
        let lhs = c0.expect_real() * d0.expect_real() + dot(c1.expect_reals(), d1.expect_reals());
        let rhs = g[0].expect_real() * ta + dot(g[2].expect_reals(), txs);
        assert!((lhs - rhs).abs() < 1e-12, "{lhs} vs {rhs}");
    }

    fn dot(a: &[f64], b: &[f64]) -> f64 {
        a.iter().zip(b).map(|(x, y)| x * y).sum()
    }

    #[test]
    fn measure_reports_positive_times_and_consistent_ratios() {
        let e = entry("def f (xs : Array Real) : Real = sum (map (\\(x : Real) -> x * x) xs)");
        let b = Bench::new(&e, vec![Value::reals(vec![1.0; 100])]).unwrap();
        let r = b.measure(3).unwrap();
        for t in [
            r.compile_s,
            r.primal_s,
            r.forward_s,
            r.reverse_s,
            r.dual_reverse_s.unwrap(),
        ] {
            assert!(t > 0.0 && t.is_finite());
        }
        assert_eq!(r.forward_over_primal(), r.forward_s / r.primal_s);
        let j = r.to_json();
        let keys: Vec<&str> = j.as_object().unwrap().keys().map(|k| k.as_str()).collect();
        assert_eq!(
            keys,
            [
                "primal_s",
                "forward_s",
                "reverse_s",
                "forward_over_primal",
                "reverse_over_primal",
                "compile_s",
                "dual_reverse_s",
                "dual_over_reverse"
            ]
        );
        assert_eq!(j["reverse_over_primal"], r.reverse_s / r.primal_s);
        assert_eq!(b.measure(0).unwrap_err().kind(), ErrorKind::Argument);
        let r = b.measure_with(2, false).unwrap();
        assert_eq!(r.dual_reverse_s, None);
        assert!(r.to_json().get("dual_reverse_s").is_none());
    }

    #[test]
    fn bad_inputs_are_errors() {
        let e = entry("def f (x : Real) : Real = x");
        let err = Bench::new(&e, vec![Value::Int(1)]).err().unwrap();
        assert_eq!(err.kind(), ErrorKind::Argument);
        let e = entry("def f (g : Real -> Real) : Real = g 1.0");
        assert!(Bench::new(&e, vec![]).is_err()); // wrong count
        let e = entry("def f (xs : Array Real) : Real = xs ! 5");
        let err = Bench::new(&e, vec![Value::reals(vec![1.0])]).err().unwrap();
        assert_eq!(err.kind(), ErrorKind::Runtime);
    }

    #[test]
    fn medians_and_the_generator() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
        let (mut a, mut b) = (Rng::from_name("x"), Rng::from_name("x"));
        let xs: Vec<u64> = (0..5).map(|_| a.next_u64()).collect();
        assert_eq!(xs, (0..5).map(|_| b.next_u64()).collect::<Vec<_>>());
        assert_ne!(Rng::from_name("y").next_u64(), xs[0]);
        // SplitMix64's published first output for seed 0.
        assert_eq!(Rng::new(0).next_u64(), 0xe220_a839_7b1d_cdaf);
        let mut r = Rng::new(1);
        for _ in 0..1000 {
            let u = r.uniform(-1.0, 1.0);
            assert!((-1.0..1.0).contains(&u));
            assert!(r.below(7) < 7);
        }
    }
}
