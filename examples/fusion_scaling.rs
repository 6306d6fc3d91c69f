//! Forward/primal and reverse/primal time ratios of array programs, with the simplifier's array
//! fusion rules off ("before") and on ("after"), in the same run (issue 7: the cheap gradient
//! principle asks for reverse/primal ≤ 4 and forward/primal ≤ 3).
//!
//! Without the fusion rules CHAD's derivative of an array program allocates a linear closure
//! per element and applies it; `closureConvert` stores the closure's environment instead, and
//! the `lsum`/`lbuild`/`onehot` laws turn a sum of n one-hot cotangents into one array.
//!
//! Every phase runs through the engine: the primal is the embedded source program, the
//! derivatives are the simplified CHAD code (via `Jvp`/`Vjp`). Each time is the median of
//! `--repeat` runs (default 5) after a warm-up.
//!
//! Run: `cargo run --release --example fusion_scaling [-- --scale 1 --repeat 5]` (`--scale 10`
//! multiplies every size by 10).

use chad::Value;
use chad::internals::ad::{Jvp, Vjp};
use chad::internals::prim::Registry;
use chad::internals::simplify::{Rules, simplify_with};
use chad::internals::target::embed;
use chad::internals::target::engine::Code;
use chad::internals::target::testing::approx_eq;

mod common;
use common::{flag, median};

/// The rules of `simplify::fuse`.
const FUSION: [&str; 5] = [
    "closureConvert",
    "sumBuildProj",
    "sumBuildSplit",
    "sumBuildOneHot",
    "plusOneHot",
];

struct Case {
    name: &'static str,
    text: &'static str,
    /// The number of real arguments before the array(s), and the number of arrays.
    scalars: usize,
    arrays: usize,
    sizes: [usize; 3],
}

const CASES: [Case; 5] = [
    Case {
        name: "index-sum",
        text: "def f (xs : Array Real) : Real = sum (build (length xs) (\\(i : Int) -> xs ! i * xs ! i))",
        scalars: 0,
        arrays: 1,
        sizes: [1_000, 10_000, 100_000],
    },
    Case {
        name: "diag-trace",
        text: "
def tr (a : Array (Array Real)) : Real = sum (build (length a) (\\(i : Int) -> a ! i ! i))
def f (x : Array Real) : Real =
  let n = length x in
  let a = build n (\\(i : Int) -> build n (\\(j : Int) -> if i == j then x ! i else 0.0)) in
  tr a + tr a + tr a + tr a",
        scalars: 0,
        arrays: 1,
        sizes: [100, 300, 1_000],
    },
    Case {
        name: "rosenbrock",
        text: "def f (xs : Array Real) : Real =
  sum (build (length xs - 1) (\\(i : Int) ->
    let d = xs ! (i + 1) - xs ! i * xs ! i in
    let e = 1.0 - xs ! i in
    100.0 * d * d + e * e))",
        scalars: 0,
        arrays: 1,
        sizes: [1_000, 10_000, 100_000],
    },
    Case {
        name: "map-closure",
        text: "def f (a : Real) (b : Real) (xs : Array Real) : Real =
  sum (map (\\(x : Real) -> a * x + sin (b * x)) xs)",
        scalars: 2,
        arrays: 1,
        sizes: [1_000, 10_000, 100_000],
    },
    Case {
        name: "map2",
        text: "def f (xs : Array Real) (ys : Array Real) : Real =
  sum (map2 (\\(x : Real) (y : Real) -> x * y + sin x) xs ys)",
        scalars: 0,
        arrays: 2,
        sizes: [1_000, 10_000, 100_000],
    },
];

fn main() {
    let repeat = flag("--repeat").map_or(5, |s| s.parse().expect("a count"));
    let scale: f64 = flag("--scale").map_or(1.0, |s| s.parse().expect("a factor"));
    let mut off = Rules::all();
    for r in FUSION {
        off = off.without(r);
    }
    println!(
        "{:<12} {:>6} {:>9} | {:>9} {:>9} {:>7} {:>7} | {:>9} {:>9} {:>7} {:>7}",
        "program",
        "n",
        "primal ms",
        "fwd ms",
        "rev ms",
        "fwd/pri",
        "rev/pri",
        "fwd ms",
        "rev ms",
        "fwd/pri",
        "rev/pri"
    );
    println!(
        "{:<12} {:>6} {:>9} | {:^35} | {:^35}",
        "", "", "", "before (fusion rules off)", "after (fusion rules on)"
    );
    for case in &CASES {
        let prog = chad::internals::source::load(case.text, &Registry::builtin())
            .expect("the program checks");
        let entry = prog.entry(prog.defs.len() - 1);
        let (params, body) = embed::entry(&entry);
        let code = Code::compile(&params, &simplify_with(&body, &Rules::all()).0);
        let derivs = |rules: &Rules| {
            let jvp = Jvp::new(&entry)
                .expect("differentiable")
                .map_body(|t| simplify_with(t, rules).0);
            let vjp = Vjp::new(&entry)
                .expect("differentiable")
                .map_body(|t| simplify_with(t, rules).0);
            (jvp, vjp)
        };
        let (jvp0, vjp0) = derivs(&off);
        let (jvp1, vjp1) = derivs(&Rules::all());
        for &n in &case.sizes {
            let n = ((n as f64) * scale) as usize;
            let xs: Vec<f64> = (0..n)
                .map(|i| ((i * 7919) % 1000) as f64 / 500.0 - 1.0)
                .collect();
            let mut args: Vec<Value> = (0..case.scalars)
                .map(|k| Value::Real(0.3 + k as f64))
                .collect();
            let mut tangent: Vec<Value> = (0..case.scalars).map(|_| Value::Real(1.0)).collect();
            for _ in 0..case.arrays {
                args.push(Value::reals(xs.clone()));
                tangent.push(Value::reals(vec![1.0; n]));
            }
            let t_p = median(repeat, || drop(code.run(&args).expect("runs")));
            let time = |jvp: &Jvp, vjp: &Vjp| {
                let f = median(repeat, || drop(jvp.jvp(&args, &tangent).expect("runs")));
                let r = median(repeat, || drop(vjp.grad(&args).expect("runs")));
                (f, r)
            };
            let (f0, r0) = time(&jvp0, &vjp0);
            let (f1, r1) = time(&jvp1, &vjp1);
            // The same derivatives either way.
            let reals = |(_, g): (Value, Vec<Value>)| -> Vec<f64> {
                g.iter()
                    .flat_map(|v| match v {
                        Value::Real(x) => vec![*x],
                        v => v.expect_reals().to_vec(),
                    })
                    .collect()
            };
            let (g0, g1) = (
                reals(vjp0.grad(&args).expect("runs")),
                reals(vjp1.grad(&args).expect("runs")),
            );
            assert!(approx_eq(&g0, &g1, 1e-9), "the gradients differ");
            let (d0, d1) = (
                jvp0.jvp(&args, &tangent).expect("runs").1,
                jvp1.jvp(&args, &tangent).expect("runs").1,
            );
            assert!(
                approx_eq(&[d0.expect_real()], &[d1.expect_real()], 1e-9),
                "the tangents differ"
            );
            println!(
                "{:<12} {:>6} {:>9.3} | {:>9.3} {:>9.3} {:>7.2} {:>7.2} | {:>9.3} {:>9.3} {:>7.2} {:>7.2}",
                case.name,
                n,
                t_p * 1e3,
                f0 * 1e3,
                r0 * 1e3,
                f0 / t_p,
                r0 / t_p,
                f1 * 1e3,
                r1 * 1e3,
                f1 / t_p,
                r1 / t_p
            );
        }
    }
}
