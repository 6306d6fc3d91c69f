//! The generated programs of the benchmark suite: families whose program text grows with the
//! size, so that one definition serves the criterion benchmark, the suite writer and the tests.
//!
//! Each generator takes the value of its family's size variable (see [`super::suite`]) and
//! returns the text of a program whose last definition is the entry point. Every program keeps
//! its values bounded at any size (no overflow, no underflow to subnormals in the values or the
//! derivatives), so times measure the code and not floating-point exceptions.

use super::Rng;
use std::fmt::Write;

/// The generators by name, as the suite manifest names them: `straight_line`, `sharing_chain`,
/// `nested_closures` and `index_chain`.
pub fn generate(name: &str, size: usize) -> Option<String> {
    Some(match name {
        "straight_line" => straight_line(size),
        "sharing_chain" => sharing_chain(size),
        "nested_closures" => nested_closures(size),
        "index_chain" => index_chain(size),
        _ => return None,
    })
}

/// The names [`generate`] knows.
pub const GENERATORS: &[&str] = &[
    "straight_line",
    "sharing_chain",
    "nested_closures",
    "index_chain",
];

/// A long straight-line scalar program of `lines` lets (at least one):
///
/// ```text
/// def straight (x : Real) (y : Real) : Real =
///   let v0 = x * 0.5 + y in
///   let v1 = sin v0 + 0.25 * y in
///   ...
///   v{lines-1}
/// ```
///
/// Line `i` combines the line before with a pseudo-random one of the four before it (or `x` or
/// `y`) by one of `sin a + 0.25 * b`, `tanh (a * b)`, `a * b * 0.25`, `cos a * b`,
/// `0.5 * a - 0.25 * b`, `sigmoid (a - b)`. Each maps inputs in `[-2, 2]` into `[-2, 2]`, so
/// values stay bounded for inputs `x, y` in `[-1, 1]`; every line is used by the next one, so
/// none is dead code. The sequence of choices is fixed (seeded by the name `straight_line`).
pub fn straight_line(lines: usize) -> String {
    let n = lines.max(1);
    let mut rng = Rng::from_name("straight_line");
    let mut s = String::with_capacity(n * 32);
    s.push_str("def straight (x : Real) (y : Real) : Real =\n  let v0 = x * 0.5 + y in\n");
    for i in 1..n {
        let a = format!("v{}", i - 1);
        let b = match rng.below(8) {
            0 => "x".to_string(),
            1 => "y".to_string(),
            _ => format!("v{}", i - 1 - rng.below(i.min(4) as u64) as usize),
        };
        let line = match rng.below(6) {
            0 => format!("sin {a} + 0.25 * {b}"),
            1 => format!("tanh ({a} * {b})"),
            2 => format!("{a} * {b} * 0.25"),
            3 => format!("cos {a} * {b}"),
            4 => format!("0.5 * {a} - 0.25 * {b}"),
            _ => format!("sigmoid ({a} - {b})"),
        };
        let _ = writeln!(s, "  let v{i} = {line} in");
    }
    let _ = writeln!(s, "  v{}", n - 1);
    s
}

/// A sharing chain of length `k`: `x_i = op(x_{i-1}, x_{i-1})`, each variable used twice, so
/// naive AD (tree-shaped derivatives, or dual numbers without sharing) takes 2^k steps and CHAD
/// must stay linear in `k` (DESIGN.md §7, "sharing"):
///
/// ```text
/// def chain (x : Real) : Real =
///   let x1 = x + x in
///   let x2 = sqrt (x1 * x1) in
///   let x3 = x2 * 0.25 + x2 * 0.25 in
///   ...
/// ```
///
/// The operations cycle through `u + u` (doubling), `sqrt (u * u)` (|u|) and
/// `u * 0.25 + u * 0.25` (halving): for a nonzero `x` every third value is `|x|` and the
/// derivative stays ±1, 2 or 1, at any length.
pub fn sharing_chain(k: usize) -> String {
    let mut s = String::with_capacity(k * 40 + 64);
    s.push_str("def chain (x : Real) : Real =\n  let x0 = x in\n");
    for i in 1..=k {
        let u = format!("x{}", i - 1);
        let line = match i % 3 {
            1 => format!("{u} + {u}"),
            2 => format!("sqrt ({u} * {u})"),
            _ => format!("{u} * 0.25 + {u} * 0.25"),
        };
        let _ = writeln!(s, "  let x{i} = {line} in");
    }
    let _ = writeln!(s, "  x{k}");
    s
}

/// Closures capturing closures, `depth` deep (at least 1), mapped over an array:
///
/// ```text
/// def nested (a : Real) (xs : Array Real) : Real =
///   let mk1 = \(c : Real) -> \(x : Real) -> sin (c * x) in
///   let mk2 = \(c : Real) -> let g = mk1 (c * 0.75) in \(x : Real) -> g (c * x) + sin (c + x) in
///   ...
///   let f = mk{depth} a in
///   sum (map f xs)
/// ```
///
/// `mk{j}` returns a closure capturing the closure `mk{j-1}` returned, so `f` is `depth` closures
/// nested inside each other, each called once per element; every level's constant depends on
/// `a`, so the derivative with respect to `a` passes through all of them. This is the shape
/// where reverse CHAD re-runs the derivative of a captured function for every stored argument
/// (DESIGN.md §7, "copower recomputation").
pub fn nested_closures(depth: usize) -> String {
    let depth = depth.max(1);
    let mut s = String::from(
        "def nested (a : Real) (xs : Array Real) : Real =\n  \
         let mk1 = \\(c : Real) -> \\(x : Real) -> sin (c * x) in\n",
    );
    for j in 2..=depth {
        let _ = writeln!(
            s,
            "  let mk{j} = \\(c : Real) -> let g = mk{} (c * 0.75) in \
             \\(x : Real) -> g (c * x) + sin (c + x) in",
            j - 1
        );
    }
    let _ = write!(s, "  let f = mk{depth} a in\n  sum (map f xs)\n");
    s
}

/// `xs ! 0 + xs ! 1 + ... + xs ! (n-1)` written out (at least one term): n one-hot cotangents
/// summed through the environment of a long expression (the tensor-language paper's third
/// example; `examples/array_scaling.rs` measures it too).
pub fn index_chain(n: usize) -> String {
    let terms: Vec<String> = (0..n.max(1)).map(|i| format!("xs ! {i}")).collect();
    format!(
        "def indexChain (xs : Array Real) : Real = {}\n",
        terms.join(" + ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prim::Registry;
    use crate::value::Value;

    fn run(text: &str, args: &[Value]) -> f64 {
        let prog = crate::source::load(text, &Registry::builtin()).expect("the program checks");
        let entry = prog.entry(prog.defs.len() - 1);
        crate::eval::eval_entry(&entry, args)
            .expect("runs")
            .expect_real()
    }

    #[test]
    fn every_generator_gives_a_program_that_checks() {
        for name in GENERATORS {
            for size in [1, 2, 5] {
                let text = generate(name, size).unwrap();
                crate::source::load(&text, &Registry::builtin())
                    .unwrap_or_else(|e| panic!("{name} {size}: {}\n{text}", e.message()));
            }
        }
        assert!(generate("nope", 1).is_none());
    }

    #[test]
    fn values_stay_bounded_and_chains_keep_their_scale() {
        let v = run(&straight_line(2000), &[Value::Real(0.9), Value::Real(-0.7)]);
        assert!(v.abs() <= 2.0 && v.abs() > 1e-300, "{v}");
        // Every third link of the chain restores |x|.
        assert_eq!(run(&sharing_chain(3000), &[Value::Real(-0.75)]), 0.75);
        assert_eq!(run(&sharing_chain(3001), &[Value::Real(0.75)]), 1.5);
        assert_eq!(
            run(&index_chain(4), &[Value::reals(vec![1.0, 2.0, 3.0, 4.0])]),
            10.0
        );
    }

    #[test]
    fn nested_closures_compute_the_nested_function() {
        // depth 2 at a = 0.5: f x = sin (0.375 * (0.5 x)) + sin (0.5 + x).
        let xs = [0.3f64, -1.2];
        let want: f64 = xs
            .iter()
            .map(|x| (0.375 * 0.5 * x).sin() + (0.5 + x).sin())
            .sum();
        let got = run(
            &nested_closures(2),
            &[Value::Real(0.5), Value::reals(xs.to_vec())],
        );
        assert!((got - want).abs() < 1e-15, "{got} vs {want}");
    }
}
