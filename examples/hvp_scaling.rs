//! Hessian-vector products by forward over reverse (`chad::internals::ad::nested::Hvp`: forward CHAD of
//! the concretised reverse derivative) against the gradient (reverse CHAD), at several sizes:
//! the hvp/grad time ratio should be a constant (issue 24: ≤ 4, flat across sizes).
//!
//! Programs: Rosenbrock's function of n variables, and the MLP of `examples/mlp.chad` with H
//! hidden units (the inputs and weights made up deterministically; 2 inputs, 3 classes, a
//! batch of 64 points). Both derivatives run on the execution engine, after the same
//! optimisation and simplification as `chad grad` and `chad hvp`. Each time is the median of
//! `--repeat` runs (default 5) after a warm-up.
//!
//! Run: `cargo run --release --example hvp_scaling [-- --sizes 1000,10000 --repeat 5]`.

use chad::Value;
use chad::internals::ad::Vjp;
use chad::internals::ad::nested::Hvp;
use chad::internals::optimize::optimize;
use chad::internals::prim::Registry;

mod common;
use common::{flag, median};

const ROSENBROCK: &str = "
def rosenbrock (x : Array Real) : Real =
  let n = length x in
  sum (build (n - 1) (\\i -> 100.0 * (x ! (i + 1) - x ! i * x ! i) * (x ! (i + 1) - x ! i * x ! i)
                            + (1.0 - x ! i) * (1.0 - x ! i)))
";

fn pseudo(k: usize) -> f64 {
    ((k * 7919 + 13) % 1000) as f64 / 500.0 - 1.0
}

fn matrix(rows: usize, cols: usize, seed: usize) -> Value {
    Value::array_of(
        (0..rows)
            .map(|i| {
                Value::reals(
                    (0..cols)
                        .map(|j| 0.5 * pseudo(seed + i * cols + j))
                        .collect(),
                )
            })
            .collect(),
    )
}

fn main() {
    let repeat = flag("--repeat").map_or(5, |s| s.parse().expect("a count"));
    let sizes: Vec<usize> = flag("--sizes").map_or(vec![1_000, 10_000, 100_000], |s| {
        s.split(',').map(|n| n.parse().expect("a size")).collect()
    });
    println!(
        "{:<11} {:>7} {:>11} {:>11} {:>9}",
        "program", "n", "grad ms", "hvp ms", "hvp/grad"
    );
    let reg = Registry::builtin();
    // Rosenbrock.
    let prog = chad::internals::source::load(ROSENBROCK, &reg).expect("checks");
    let entry = optimize(&prog.entry(0));
    let vjp = Vjp::new(&entry)
        .expect("differentiable")
        .map_body(chad::internals::simplify::simplify);
    let hvp = Hvp::new(&entry, &[true]).expect("twice differentiable");
    for &n in &sizes {
        let args = [Value::reals((0..n).map(pseudo).collect())];
        let v = [Value::reals((0..n).map(|i| pseudo(i + 5)).collect())];
        let t_g = median(repeat, || drop(vjp.grad(&args).expect("runs")));
        let t_h = median(repeat, || drop(hvp.hvp(&args, &v).expect("runs")));
        println!(
            "{:<11} {:>7} {:>11.3} {:>11.3} {:>9.2}",
            "rosenbrock",
            n,
            t_g * 1e3,
            t_h * 1e3,
            t_h / t_g
        );
    }
    // The MLP, differentiated with respect to its weights (the data are constants).
    let text = std::fs::read_to_string("examples/mlp.chad").expect("examples/mlp.chad");
    let prog = chad::internals::source::load(&text, &reg).expect("checks");
    let entry = optimize(&prog.entry(prog.defs.len() - 1));
    let wrt = [true, true, true, true, false, false];
    let w = chad::internals::ad::with_respect_to(&entry, &wrt);
    let vjp = Vjp::new(&w)
        .expect("differentiable")
        .map_body(chad::internals::simplify::simplify);
    let hvp = Hvp::new(&entry, &wrt).expect("twice differentiable");
    let (inputs, classes, batch) = (2, 3, 64);
    for &h in &[16usize, 64, 256] {
        let args = vec![
            matrix(h, inputs, 1),
            Value::reals((0..h).map(|i| 0.1 * pseudo(i + 7)).collect()),
            matrix(classes, h, 3),
            Value::reals((0..classes).map(|i| 0.1 * pseudo(i + 11)).collect()),
            matrix(batch, inputs, 17),
            Value::array_of(
                (0..batch)
                    .map(|b| Value::Int((b % classes) as i64))
                    .collect(),
            ),
        ];
        let v = vec![
            matrix(h, inputs, 23),
            Value::reals((0..h).map(|i| pseudo(i + 29)).collect()),
            matrix(classes, h, 31),
            Value::reals((0..classes).map(|i| pseudo(i + 37)).collect()),
        ];
        let t_g = median(repeat, || drop(vjp.grad(&args).expect("runs")));
        let t_h = median(repeat, || drop(hvp.hvp(&args, &v).expect("runs")));
        println!(
            "{:<11} {:>7} {:>11.3} {:>11.3} {:>9.2}",
            "mlp (H)",
            h,
            t_g * 1e3,
            t_h * 1e3,
            t_h / t_g
        );
    }
}
