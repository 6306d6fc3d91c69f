//! Shared helpers for the integration tests.
#![allow(dead_code)]

use chad::Value;
use chad::internals::random::{Config, any_value};
use chad::internals::types::Type;
use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::{Config as ProptestConfig, TestRunner};

/// Number of random cases for a property test: `CHAD_PROPTEST_CASES` if set, else `default`.
/// CI runs the defaults; set e.g. `CHAD_PROPTEST_CASES=20000` for a heavy run.
pub fn cases(default: u32) -> u32 {
    std::env::var("CHAD_PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// The seed every runner of the current test derives its own from (the k-th runner a test
/// makes gets `seed + k`): `PROPTEST_RNG_SEED` if set; else a fresh random one if
/// `CHAD_PROPTEST_RANDOM=1`; else a fixed one, so that CI runs are reproducible and coverage
/// floors ([`Coverage::require`]) hold or fail deterministically. Printed once per test (on
/// stderr, which the test harness shows when the test fails), with how to replay it.
fn base_seed() -> (u64, bool) {
    thread_local! {
        static BASE: std::cell::Cell<Option<(u64, bool)>> = const { std::cell::Cell::new(None) };
    }
    BASE.with(|b| {
        if let Some(s) = b.get() {
            return s;
        }
        let from_env = std::env::var("PROPTEST_RNG_SEED")
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok());
        let random = std::env::var("CHAD_PROPTEST_RANDOM").is_ok_and(|v| v == "1");
        let s = match from_env {
            Some(seed) => (seed, false),
            None if random => {
                use std::hash::{BuildHasher, Hasher};
                let mut h = std::collections::hash_map::RandomState::new().build_hasher();
                h.write_u128(
                    std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |d| d.as_nanos()),
                );
                (h.finish(), true)
            }
            None => (FIXED_SEED, false),
        };
        eprintln!(
            "proptest seed {}: replay with PROPTEST_RNG_SEED={}",
            s.0, s.0
        );
        b.set(Some(s));
        s
    })
}

/// The seed of CI runs (see [`base_seed`]).
pub const FIXED_SEED: u64 = 27;

/// Whether this test's seed was drawn at random (`CHAD_PROPTEST_RANDOM=1`).
pub fn random_seed() -> bool {
    base_seed().1
}

/// A proptest runner for `n` cases that does not write regression files, seeded from
/// [`base_seed`] (the k-th runner of a test gets `seed + k`, so a replay makes the same ones).
pub fn runner(n: u32) -> TestRunner {
    thread_local! {
        static MADE: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    }
    let k = MADE.with(|m| {
        let k = m.get();
        m.set(k + 1);
        k
    });
    TestRunner::new(ProptestConfig {
        cases: n,
        failure_persistence: None,
        rng_seed: proptest::test_runner::RngSeed::Fixed(base_seed().0.wrapping_add(k)),
        ..ProptestConfig::default()
    })
}

/// Compares two results of type `ty`: first-order values exactly; functions by applying both to
/// the same random arguments and comparing the results (errors must match too).
pub fn same_at(
    ty: &Type,
    a: &chad::Result<Value>,
    b: &chad::Result<Value>,
    rng: &mut TestRunner,
    fuel: u32,
) -> Result<(), String> {
    match (a, b) {
        (Err(x), Err(y)) if x.message() == y.message() && x.span() == y.span() => Ok(()),
        (Ok(x), Ok(y)) => match ty {
            _ if ty.is_first_order() => {
                if x.same(y) == Some(true) {
                    Ok(())
                } else {
                    Err(format!("{x} differs from {y}"))
                }
            }
            Type::Fun(f) => {
                for _ in 0..if fuel > 0 { 3 } else { 0 } {
                    let arg = any_value(&Config::default(), &f.0)
                        .new_tree(rng)
                        .map_err(|e| e.to_string())?
                        .current();
                    same_at(
                        &f.1,
                        &x.apply(arg.clone()),
                        &y.apply(arg.clone()),
                        rng,
                        fuel - 1,
                    )
                    .map_err(|e| format!("applied to {arg}: {e}"))?;
                }
                Ok(())
            }
            Type::Prod(p) => {
                let ((x1, x2), (y1, y2)) = (x.expect_pair(), y.expect_pair());
                same_at(&p.0, &Ok(x1.clone()), &Ok(y1.clone()), rng, fuel)?;
                same_at(&p.1, &Ok(x2.clone()), &Ok(y2.clone()), rng, fuel)
            }
            Type::Sum(s) => match (x, y) {
                (Value::Inl(u), Value::Inl(v)) => {
                    same_at(&s.0, &Ok((**u).clone()), &Ok((**v).clone()), rng, fuel)
                }
                (Value::Inr(u), Value::Inr(v)) => {
                    same_at(&s.1, &Ok((**u).clone()), &Ok((**v).clone()), rng, fuel)
                }
                _ => Err(format!("{x} and {y} are different injections")),
            },
            Type::Array(e) => {
                let (xs, ys) = (x.array_items(), y.array_items());
                if xs.len() != ys.len() {
                    return Err(format!("arrays of lengths {} and {}", xs.len(), ys.len()));
                }
                for (u, v) in xs.into_iter().zip(ys) {
                    same_at(e, &Ok(u), &Ok(v), rng, fuel)?;
                }
                Ok(())
            }
            _ => unreachable!("first-order handled above"),
        },
        _ => Err(format!("{a:?} versus {b:?}")),
    }
}

/// A random program that AD supports (drawn until one is; not a proptest filter, whose
/// rejection budget long runs would exhaust).
pub fn supported_program(
    strategy: &impl Strategy<Value = chad::internals::random::TestProgram>,
    r: &mut TestRunner,
) -> chad::internals::random::TestProgram {
    loop {
        let p = strategy.new_tree(r).unwrap().current();
        if chad::internals::ad::check_supported(&p.entry.body).is_ok() {
            return p;
        }
    }
}

/// The message of a caught panic.
pub fn panic_message(e: &Box<dyn std::any::Any + Send>) -> String {
    e.downcast_ref::<String>()
        .cloned()
        .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "(no message)".to_string())
}

/// Coverage a test requires of the programs it checked: the least share that must contain each
/// construct of [`chad::internals::random::features`].
pub type Requirements = &'static [(&'static str, f64)];

/// What the array-heavy AD tests ([`Config::array_bias`]) require.
pub const ARRAYS: Requirements = &[
    ("build", 0.3),
    ("index by a build's index", 0.12),
    ("map2", 0.15),
    ("nested array", 0.3),
    ("array of tuples", 0.3),
    ("array input", 0.5),
    ("array result", 0.3),
    ("closure in map/build", 0.3),
    ("captured function in map/build", 0.08),
];

/// What the sum-heavy AD tests ([`Config::sum_bias`]) require.
pub const SUMS: Requirements = &[
    ("case", 0.5),
    ("if on a comparison", 0.4),
    ("inl", 0.4),
    ("inr", 0.4),
    ("sum input", 0.3),
    ("sum result", 0.25),
];

/// How many checked programs contained each construct.
#[derive(Debug, Default)]
pub struct Coverage {
    /// Programs recorded.
    pub programs: u32,
    /// Per construct, the programs containing it.
    pub seen: std::collections::BTreeMap<&'static str, u32>,
}

impl Coverage {
    /// Records one checked program with its constructs.
    pub fn record(&mut self, constructs: impl IntoIterator<Item = &'static str>) {
        self.programs += 1;
        for f in constructs {
            *self.seen.entry(f).or_default() += 1;
        }
    }

    /// Panics unless every construct of `required` was in at least its share of the programs.
    /// The floors are exact at the fixed seed of CI runs (deterministic: they hold or fail the
    /// same way every run). At a random seed (`CHAD_PROPTEST_RANDOM=1`) a count is random too,
    /// so it only has to come within four standard deviations of a binomial count at the floor
    /// (a false alarm about once in 30,000 floors), which still catches a construct the
    /// generator has stopped making.
    pub fn require(&self, required: Requirements) {
        let n = f64::from(self.programs);
        for (f, frac) in required {
            let k = self.seen.get(f).copied().unwrap_or(0);
            let margin = if random_seed() {
                4.0 * (n * frac * (1.0 - frac)).sqrt()
            } else {
                0.0
            };
            assert!(
                f64::from(k) >= frac * n - margin,
                "too few programs with {f}: {k} of {} (floor {frac}{})",
                self.programs,
                if margin > 0.0 {
                    format!(", less {margin:.1} at a random seed")
                } else {
                    String::new()
                }
            );
        }
    }
}

/// Runs `agrees` on `n` random programs of `cfg`; it returns whether the program ran (rather
/// than failing the same way on both sides). The agreement must mostly be on values, not on
/// errors: at least half the programs must run.
pub fn check_programs(
    cfg: Config,
    n: u32,
    agrees: impl Fn(
        &chad::internals::random::TestProgram,
    ) -> Result<bool, proptest::test_runner::TestCaseError>,
) {
    let ok = std::cell::Cell::new(0u32);
    runner(n)
        .run(&chad::internals::random::program(cfg), |p| {
            if agrees(&p)? {
                ok.set(ok.get() + 1);
            }
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(ok.get() * 2 >= n, "only {} of {n} programs ran", ok.get());
}

/// The last definition of a program, as an entry (panics with the message on an error).
pub fn entry(src: &str) -> chad::internals::source::term::Entry {
    let prog = chad::internals::source::load(src, &chad::internals::prim::Registry::builtin())
        .unwrap_or_else(|e| panic!("{src}: {e}"));
    prog.entry(prog.defs.len() - 1)
}

/// Arguments for `e` from literals, one per parameter.
pub fn args(e: &chad::internals::source::term::Entry, vals: &[&str]) -> Vec<Value> {
    e.param_types()
        .iter()
        .zip(vals)
        .map(|(t, v)| chad::internals::source::parse_value(v, t).unwrap())
        .collect()
}

/// The program's concretised reverse derivative (`nested::vjp_entry`) uses the internal
/// primitive `uses`, and at arrays of each of `sizes` it gives the engine's value and gradient
/// (to 1e-9), and its Hessian-vector products equal central differences of the engine's
/// gradient (to `hvp_tol`).
pub fn concretised_gradient_and_hvp_agree(src: &str, uses: &str, sizes: &[usize], hvp_tol: f64) {
    use chad::internals::ad::Vjp;
    use chad::internals::ad::nested::{self, Hvp};
    use chad::internals::oracle::fd;
    let e = entry(src);
    let ve = nested::vjp_entry(&e).unwrap();
    let printed = chad::internals::source::print::term_to_string(&ve.body, 100);
    assert!(printed.contains(uses), "no {uses} in\n{printed}");
    let vjp = Vjp::new(&e)
        .unwrap()
        .map_body(chad::internals::simplify::simplify);
    let hvp = Hvp::new(&e, &[true]).unwrap();
    for &n in sizes {
        let xs: Vec<f64> = (0..n).map(|k| ((k * 37 % 11) as f64) / 5.0 - 1.1).collect();
        let ts: Vec<f64> = (0..n).map(|k| ((k * 13 % 7) as f64) / 3.0 - 1.0).collect();
        let a = [Value::reals(xs.clone())];
        let (y1, g1) = vjp.grad(&a).unwrap();
        let out =
            chad::internals::eval::eval_entry(&ve, &[a[0].clone(), Value::Real(1.0)]).unwrap();
        let (y2, g2) = out.expect_pair();
        assert_eq!(y1.same(y2), Some(true), "{src} at n = {n}");
        let (g1, g2) = (fd::leaves(&g1[0]), fd::leaves(g2));
        assert!(
            close_reals(&g1, &g2, 1e-9),
            "{src} at n = {n}: {g1:?} vs {g2:?}"
        );
        let r = hvp.hvp(&a, &[Value::reals(ts.clone())]).unwrap();
        let hv = fd::leaves(r.hvp[0].as_ref().unwrap());
        let shifted = |s: f64| {
            let x: Vec<f64> = xs.iter().zip(&ts).map(|(x, t)| x + s * t).collect();
            fd::leaves(&vjp.grad(&[Value::reals(x)]).unwrap().1[0])
        };
        let h = 1e-5;
        let (gp, gm) = (shifted(h), shifted(-h));
        let want: Vec<f64> = gp
            .iter()
            .zip(&gm)
            .map(|(a, b)| (a - b) / (2.0 * h))
            .collect();
        assert!(
            close_reals(&hv, &want, hvp_tol),
            "{src} at n = {n}: {hv:?} vs {want:?}"
        );
    }
}

/// Same length, and each pair equal to `tol` relative to `1 + max(|x|, |y|)` (NaN with NaN).
pub fn close_reals(a: &[f64], b: &[f64], tol: f64) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| {
            (x.is_nan() && y.is_nan()) || (x - y).abs() <= tol * (1.0 + x.abs().max(y.abs()))
        })
}

/// A `case` over a sum holding functions (both branches are run: `a > 1` and not).
const CASE: &str = "def main (a : Real) : Real = \
     let (g, h) = (\\(y : Real) -> a * y * y, \\(y : Real) -> sin (a + y)) in \
     let s : (Real -> Real) + (Real, Real -> Real) = \
       if a > 1.0 then inl g else inr (a, h) in \
     case s of inl f -> grad f a | inr p -> fst p * grad (snd p) a";

/// A program, a point, and the closed form of the program's value there.
pub type ClosedCase = (&'static str, f64, fn(f64) -> f64);

/// Programs differentiating functions known only at run time (`check::carry`; a lambda's
/// parameter, a pattern, a `case` branch, a loop's state, an array's element), each with a
/// point and the closed form of its value there: `tests/nested.rs` checks them against the
/// closed forms and central differences, `tests/nested_tagged.rs` against the tagged oracle.
pub fn run_time_functions() -> Vec<ClosedCase> {
    vec![
        (
            "def sq (y : Real) : Real = y * y * y\n\
             def scale (a : Real) (y : Real) : Real = a * sin y\n\
             def main (x : Real) : Real = \
             let fs = [sq, scale x, \\(y : Real) -> x * exp y] in \
             let js = map (\\(g : Real -> Real) -> snd (jvp g x x)) fs in \
             let vs = map (\\(g : Real -> Real) -> snd (vjp g (2.0 * x) 0.5)) fs in \
             sum js * sum vs + sum (map (\\(g : Real -> Real) -> grad g x) fs)",
            0.7,
            |x| {
                let js = 3.0 * x * x * x + x * x.cos() * x + x * x.exp() * x;
                let y = 2.0 * x;
                let vs = 0.5 * (3.0 * y * y + x * y.cos() + x * y.exp());
                js * vs + 3.0 * x * x + x * x.cos() + x * x.exp()
            },
        ),
        (CASE, 0.8, |a| a * (2.0 * a).cos()),
        (CASE, 1.5, |a| 2.0 * a * a),
        (
            "def main (a : Real) : Real = \
             let p = iterate 3 (\\(q : (Real -> Real, Real -> Real)) -> (snd q, fst q)) \
                       (\\(y : Real) -> a * y * y * y, \\(y : Real) -> cos (a * y)) in \
             grad (fst p) a + grad (snd p) (2.0 * a)",
            1.3,
            |a| -a * (a * a).sin() + 12.0 * a * a * a,
        ),
        (
            "def newton (g : Real -> Real) (x : Real) : Real = x - g x / grad g x\n\
             def main (a : Real) : Real = \
             let d = \\(f : Real -> Real) -> grad f a in \
             d (\\(y : Real) -> newton (\\(z : Real) -> z * z - y) y) + \
             grad (\\(z : Real) -> d (\\(y : Real) -> z * y * sin y)) a",
            1.1,
            |a| 0.5 + a.sin() + a * a.cos(),
        ),
        (
            "def main (x : Real) : Real = \
             let fs = build 3 (\\i -> \\(y : (Real, Real)) -> toReal i * x * fst y * snd y) in \
             sum (map (\\(f : (Real, Real) -> Real) -> snd (grad f (x, x * x))) fs)",
            0.6,
            |x| 3.0 * x * x,
        ),
        (
            "def main (x : Real) : Real = \
             let fs = [\\(y : (Real, Real)) -> (fst y * snd y * x, fst y)] in \
             sum (map (\\(g : (Real, Real) -> (Real, Real)) -> \
               let t = snd (jvp g (x, 2.0) (1.0, 0.0)) in \
               let c = snd (vjp g (x, 2.0) (1.0, 0.0)) in \
               fst t + snd t * 10.0 + fst c * 100.0 + snd c * 1000.0) fs)",
            0.9,
            |x| 202.0 * x + 10.0 + 1000.0 * x * x,
        ),
        (
            // A `def rec` template specialised to a run-time function (its recursive wrapper
            // is only ever applied, so it stays a plain function).
            "def rec nt (g : Real -> Real) (n : Int) (x : Real) : Real = \
               if n <= 0 then x else nt g (n - 1) (x - g x / grad g x)\n\
             def main (x : Real) : Real = \
             let fs = [\\(y : Real) -> y * y - 2.0, \\(y : Real) -> y * y * y - x] in \
             sum (map (\\(g : Real -> Real) -> nt g 3 x) fs)",
            1.3,
            |x| {
                let (mut a, mut b) = (x, x);
                for _ in 0..3 {
                    a -= (a * a - 2.0) / (2.0 * a);
                    b -= (b * b * b - x) / (3.0 * b * b);
                }
                a + b
            },
        ),
        // Run-time functions calling run-time functions (`check::carry`: the derivative of
        // the outer one goes through the derivatives the inner one carries).
        (
            "def main (x : Real) : Real = \
             let fs = [sin, \\(y : Real) -> x * y * y] in \
             let gs = map (\\(g : Real -> Real) -> \\(y : Real) -> y * g y) fs in \
             sum (map (\\(h : Real -> Real) -> grad h x) gs)",
            0.7,
            |x| x.sin() + x * x.cos() + 3.0 * x * x * x,
        ),
        (
            // Through a closure's parameter, into a `let`-bound function.
            "def main (x : Real) : Real = \
             let d = \\(f : Real -> Real) -> grad f x in \
             let c = \\(h : Real -> Real) -> d (\\(y : Real) -> h y * y) in c sin",
            0.9,
            |x| x.sin() + x * x.cos(),
        ),
        (
            // A loop's state calling the previous state.
            "def main (a : Real) : Real = \
             let f = iterate 2 (\\(g : Real -> Real) -> \\(y : Real) -> a * y * g y) \
                       (\\(y : Real) -> sin y) in \
             grad f a",
            0.7,
            |a| 2.0 * a * a * a * a.sin() + a * a * a * a * a.cos(),
        ),
        (
            // Pairs, forward and reverse together.
            "def main (x : Real) : Real = \
             let fs = [\\(y : (Real, Real)) -> (fst y * snd y * x, fst y)] in \
             let hs = map (\\(g : (Real, Real) -> (Real, Real)) -> \\(y : (Real, Real)) -> \
               let z = g y in (snd z, fst z * fst y)) fs in \
             sum (map (\\(h : (Real, Real) -> (Real, Real)) -> \
               let t = snd (jvp h (x, 2.0) (1.0, 0.0)) in \
               let c = snd (vjp h (x, 2.0) (0.0, 1.0)) in \
               fst t + snd t * 10.0 + fst c * 100.0 + snd c * 1000.0) hs)",
            0.7,
            |x| 1.0 + 440.0 * x * x + 1000.0 * x * x * x,
        ),
        (
            // Arrays.
            "def main (x : Real) : Real = \
             let fs = [\\(v : Array Real) -> sum v * x] in \
             let hs = map (\\(g : Array Real -> Real) -> \\(v : Array Real) -> \
               g (map (\\(e : Real) -> e * e) v) * v ! 0) fs in \
             sum (map (\\(h : Array Real -> Real) -> sum (grad h [x, 1.0, 2.0])) hs)",
            0.7,
            |x| 3.0 * x * x * x + 5.0 * x + 6.0 * x * x,
        ),
        // Derivatives of derivatives of run-time functions: a form over a lambda written in
        // place differentiates it there, through the derivatives of the run-time function's
        // derivative, which its values then carry too (`check::carry`).
        (
            "def main (x : Real) : Real = \
             sum (map (\\(f : Real -> Real) -> grad (\\(y : Real) -> grad f y) x) [tanh, sigmoid])",
            0.7,
            |x| {
                let (t, s) = (x.tanh(), 1.0 / (1.0 + (-x).exp()));
                -2.0 * t * (1.0 - t * t) + s * (1.0 - s) * (1.0 - 2.0 * s)
            },
        ),
        (
            // Third derivatives.
            "def main (x : Real) : Real = \
             sum (map (\\(f : Real -> Real) -> \
               grad (\\(z : Real) -> grad (\\(y : Real) -> grad f y) z) x) [tanh, sin])",
            0.7,
            |x| {
                let t = x.tanh();
                -2.0 * (1.0 - t * t) * (1.0 - 3.0 * t * t) - x.cos()
            },
        ),
        (
            // Forward over reverse, with a captured variable.
            "def main (x : Real) : Real = \
             sum (map (\\(f : Real -> Real) -> snd (jvp (\\(y : Real) -> grad f y) x 1.0)) \
               [\\(y : Real) -> x * y * y * y, cos])",
            0.7,
            |x| 6.0 * x * x - x.cos(),
        ),
        (
            // Reverse over reverse on pairs.
            "def main (x : Real) : Real = \
             sum (map (\\(g : (Real, Real) -> Real) -> \
               let c = snd (vjp (\\(y : (Real, Real)) -> grad g y) (x, 2.0) (1.0, 0.0)) in \
               fst c + 10.0 * snd c) [\\(p : (Real, Real)) -> fst p * fst p * snd p * x])",
            0.9,
            |x| 4.0 * x + 20.0 * x * x,
        ),
        (
            // A function value that differentiates a run-time function of another type.
            "def main (x : Real) : Real = \
             let gs = [\\(p : (Real, Real)) -> fst p * snd p * snd p] in \
             let hs = map (\\(g : (Real, Real) -> Real) -> \\(y : Real) -> \
               let (a, b) = grad g (y, 2.0 * y) in a + b) gs in \
             sum (map (\\(h : Real -> Real) -> grad h x) hs)",
            0.7,
            |x| 16.0 * x,
        ),
        (
            // `map2` over a function computed under a `let` (a loop's result) whose partial
            // applications are of a carried type: they are opened (this was an ill-typed term
            // and a panic, found by the random test).
            "def main (x : Real) : Real = \
             let fs = [\\(y : Real) -> x * y * y] in \
             let d = sum (map (\\(g : Real -> Real) -> grad g x) fs) in \
             d + sum (map2 (let k = x in iterate 1 (\\(h : Real -> Real -> Real) -> h) \
               (\\(a : Real) (y : Real) -> k * a * y)) [1.0, 2.0] [3.0, 4.0])",
            0.7,
            |x| 2.0 * x * x + 11.0 * x,
        ),
    ]
}
