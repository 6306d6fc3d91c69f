//! Reverse/primal and forward/primal time ratios of array programs at several sizes (issue:
//! "no O(n²) gradient for an O(n) primal"; DESIGN.md §7, one-hot cotangents from indexing).
//!
//! Programs:
//! * `index-sum`: `sum (build n (\i -> xs ! i * xs ! i))`, an O(n) primal whose gradient sums n
//!   pairs of one-hot cotangents;
//! * `diag-trace`: `let a = build n (\i -> build n (\j -> if i == j then x ! i else 0.0)) in
//!   tr a + ... + tr a` with k = 4 traces, an O(n²) primal whose gradient adds k·n nested
//!   one-hots into the cotangent of an n × n matrix;
//! * `index-chain`: `xs ! 0 + xs ! 1 + ... + xs ! (n-1)` written out (n one-hots summed through
//!   the environment cotangents of a long expression; the tensor-language paper's third
//!   example). The program text grows with n, so each size is transformed separately.
//!
//! Every phase runs through the same engine (the target evaluator): the primal is the embedded
//! source program, the derivatives are the simplified CHAD code. Each time is the median of
//! `--repeat` runs (default 5) after a warm-up.
//!
//! Run: `cargo run --release --example array_scaling [-- --sizes 100,1000 --repeat 5]`.

use chad::Value;
use chad::internals::ad::{Jvp, Vjp};
use chad::internals::prim::Registry;
use chad::internals::target::embed;
use chad::internals::target::engine::Code;

mod common;
use common::{flag, median};

const INDEX_SUM: &str = "
def f (xs : Array Real) : Real = sum (build (length xs) (\\(i : Int) -> xs ! i * xs ! i))
";

const DIAG_TRACE: &str = "
def tr (a : Array (Array Real)) : Real = sum (build (length a) (\\(i : Int) -> a ! i ! i))
def f (x : Array Real) : Real =
  let n = length x in
  let a = build n (\\(i : Int) -> build n (\\(j : Int) -> if i == j then x ! i else 0.0)) in
  tr a + tr a + tr a + tr a
";

fn main() {
    let repeat = flag("--repeat").map_or(5, |s| s.parse().expect("a count"));
    let sizes = flag("--sizes").map(|s| {
        s.split(',')
            .map(|n| n.parse().expect("a size"))
            .collect::<Vec<usize>>()
    });
    println!(
        "{:<11} {:>6} {:>11} {:>11} {:>11} {:>9} {:>9}",
        "program", "n", "primal ms", "forward ms", "reverse ms", "fwd/pri", "rev/pri"
    );
    let cases: [(&str, Option<&str>, Vec<usize>); 3] = [
        (
            "index-sum",
            Some(INDEX_SUM),
            vec![100, 1_000, 10_000, 100_000],
        ),
        ("diag-trace", Some(DIAG_TRACE), vec![100, 300, 1_000]),
        ("index-chain", None, vec![100, 1_000, 10_000]),
    ];
    for (name, fixed, default) in cases {
        for &n in sizes.as_ref().unwrap_or(&default) {
            let text = fixed.map_or_else(|| index_chain(n), str::to_string);
            let prog = chad::internals::source::load(&text, &Registry::builtin())
                .expect("the program checks");
            let entry = prog.entry(prog.defs.len() - 1);
            let simplify = chad::internals::simplify::simplify;
            let jvp = Jvp::new(&entry).expect("differentiable").map_body(simplify);
            let vjp = Vjp::new(&entry).expect("differentiable").map_body(simplify);
            let (params, body) = embed::entry(&entry);
            let code = Code::compile(&params, &simplify(&body));
            let xs: Vec<f64> = (0..n)
                .map(|i| ((i * 7919) % 1000) as f64 / 500.0 - 1.0)
                .collect();
            let args = [Value::reals(xs)];
            let primal = || code.run(&args).expect("runs");
            let tangent = [Value::reals(vec![1.0; n])];
            let t_p = median(repeat, || drop(primal()));
            let t_f = median(repeat, || drop(jvp.jvp(&args, &tangent).expect("runs")));
            let t_r = median(repeat, || drop(vjp.grad(&args).expect("runs")));
            println!(
                "{:<11} {:>6} {:>11.3} {:>11.3} {:>11.3} {:>9.2} {:>9.2}",
                name,
                n,
                t_p * 1e3,
                t_f * 1e3,
                t_r * 1e3,
                t_f / t_p,
                t_r / t_p
            );
        }
    }
}

/// `def f (xs : Array Real) : Real = xs ! 0 + ... + xs ! (n-1)`.
fn index_chain(n: usize) -> String {
    let terms: Vec<String> = (0..n).map(|i| format!("xs ! {i}")).collect();
    format!("def f (xs : Array Real) : Real = {}\n", terms.join(" + "))
}
