//! Forward/primal and reverse/primal time ratios of higher-order programs, by size and by
//! closure nesting depth (issue 7, item 4: the cheap gradient principle for closures; DESIGN.md
//! §7, copower recomputation and environment cotangents). Findings: `theory-notes/06-performance.md`.
//!
//! Families (each derivative is the CHAD code simplified by `simplify::simplify`; the primal is
//! the embedded source program, simplified the same way; all three run through
//! `target::engine::Code`):
//!
//! * `chain d`: closures `g0 … gd`, each capturing the previous one and the parameter `a` and
//!   using both (`gk x = g(k-1) (x + a) * a + x`), `sum (map gd xs)` at n = 1000;
//! * `nest d`: `d` lexically nested λs, each level a closure created per call that captures the
//!   enclosing level's argument (`λx. (λy. (λz. … ) (y * a)) (x + a)`), mapped over n = 1000;
//! * `map n`: `sum (map (λx. sin (a * x)) xs)` at n = 10³ … 10⁵;
//! * `wrap k`: `k` wrapper definitions `wk a x = w(k-1) a x` around `w0 a x = sin (a * x)`,
//!   `sum (map (λx. wk a x) xs)` at n = 1000;
//! * `mlp B`: `examples/mlp.chad`'s loss (2 inputs, 16 hidden units, 3 classes) on B points.
//!
//! Each time is the median of `--repeat` runs (default 5) after a warm-up. The ratios are what
//! matters: the engine behind `Code` changes, the *growth* of a ratio with size or depth does not.
//!
//! Every program is first optimised ([`chad::internals::optimize`]: simplified, its called helper functions
//! inlined), as `chad bench` does, and all three phases run the optimised program; with
//! `--as-written`, AD differentiates the program as written (its closures included) and the
//! primal is the simplified embedding of it, as before the optimisation existed.
//!
//! Run: `cargo run --release --example closure_scaling [-- --repeat 5 --only chain,map]
//! [--as-written]`.

use chad::Value;
use chad::internals::ad::{Jvp, Vjp};
use chad::internals::prim::Registry;
use chad::internals::source::term::Entry;
use chad::internals::target::{embed, engine::Code};
use chad::internals::types::Type;

mod common;
use common::{flag, median};

fn main() {
    let repeat = flag("--repeat").map_or(5, |s| s.parse().expect("a count"));
    let only = flag("--only");
    let wanted = |family: &str| {
        only.as_ref()
            .is_none_or(|o| o.split(',').any(|f| f == family))
    };
    println!(
        "{:<8} {:>7} {:>11} {:>11} {:>11} {:>9} {:>9}",
        "family", "size", "primal ms", "forward ms", "reverse ms", "fwd/pri", "rev/pri"
    );
    if wanted("chain") {
        for d in [1, 2, 3, 4, 5, 6] {
            measure("chain", d, &chain(d), &real_and_points(1000), repeat);
        }
    }
    if wanted("nest") {
        for d in [1, 2, 3, 4, 5, 6] {
            measure("nest", d, &nest(d), &real_and_points(1000), repeat);
        }
    }
    if wanted("map") {
        for n in [1_000, 10_000, 100_000] {
            measure("map", n, MAP, &real_and_points(n), repeat);
        }
    }
    if wanted("wrap") {
        for k in [0, 1, 2, 5, 10] {
            measure("wrap", k, &wrappers(k), &real_and_points(1000), repeat);
        }
    }
    if wanted("mlp") {
        for b in [10, 100, 1000] {
            measure("mlp", b, MLP, &mlp_args(b), repeat);
        }
    }
}

const MAP: &str = "
def f (a : Real) (xs : Array Real) : Real = sum (map (\\(x : Real) -> sin (a * x)) xs)
";

const MLP: &str = include_str!("mlp.chad");

/// `g0 x = sin (a * x)`, `gk x = g(k-1) (x + a) * a + x`, `f a xs = sum (map gd xs)`.
fn chain(d: usize) -> String {
    let mut s = String::from("def f (a : Real) (xs : Array Real) : Real =\n");
    s += "  let g0 = \\(x : Real) -> sin (a * x) in\n";
    for k in 1..=d {
        s += &format!(
            "  let g{k} = \\(x : Real) -> g{} (x + a) * a + x in\n",
            k - 1
        );
    }
    s += &format!("  sum (map g{d} xs)\n");
    s
}

/// `d` nested closures, each created per call of the enclosing one and capturing its argument:
/// `λx1. (λx2. … (λxd. sin (a * xd) + x(d-1)) (x(d-1) * a) … ) (x1 + a)`.
fn nest(d: usize) -> String {
    fn level(k: usize, d: usize) -> String {
        if k == d {
            return format!("sin (a * x{k}) + x{}", k - 1);
        }
        let prev = if k == 0 {
            "a".to_string()
        } else {
            format!("x{}", k)
        };
        format!(
            "(\\(x{} : Real) -> {}) ({prev} * a + x{k})",
            k + 1,
            level(k + 1, d)
        )
    }
    format!(
        "def f (a : Real) (xs : Array Real) : Real =\n  sum (map (\\(x0 : Real) -> {}) xs)\n",
        level(0, d)
    )
}

/// `w0 a x = sin (a * x)`, `wk a x = w(k-1) a x`, `f a xs = sum (map (λx. wk a x) xs)`.
fn wrappers(k: usize) -> String {
    let mut s = String::from("def w0 (a : Real) (x : Real) : Real = sin (a * x)\n");
    for j in 1..=k {
        s += &format!("def w{j} (a : Real) (x : Real) : Real = w{} a x\n", j - 1);
    }
    s += &format!(
        "def f (a : Real) (xs : Array Real) : Real = sum (map (\\(x : Real) -> w{k} a x) xs)\n"
    );
    s
}

fn points(n: usize) -> Vec<f64> {
    (0..n)
        .map(|i| ((i * 7919) % 1000) as f64 / 500.0 - 1.0)
        .collect()
}

fn real_and_points(n: usize) -> Vec<Value> {
    vec![Value::Real(0.7), Value::reals(points(n))]
}

/// MLP arguments: 2 inputs, 16 hidden units, 3 classes, `b` points.
fn mlp_args(b: usize) -> Vec<Value> {
    let (i, h, c) = (2, 16, 3);
    let mut seed = 1u64;
    let mut rnd = move || {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((seed >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
    };
    let mut matrix = |rows: usize, cols: usize| {
        Value::array_of(
            (0..rows)
                .map(|_| Value::reals((0..cols).map(|_| rnd()).collect()))
                .collect(),
        )
    };
    let w1 = matrix(h, i);
    let b1 = matrix(1, h).index(0).unwrap();
    let w2 = matrix(c, h);
    let b2 = matrix(1, c).index(0).unwrap();
    let xs = matrix(b, i);
    let ys = Value::array_of((0..b).map(|k| Value::Int((k % c) as i64)).collect());
    vec![w1, b1, w2, b2, xs, ys]
}

/// A tangent of the same shape as `v` (ones on every real).
fn ones_like(ty: &Type, v: &Value) -> Value {
    match ty {
        Type::Real => Value::Real(1.0),
        Type::Int | Type::Bool | Type::Unit => Value::Unit,
        Type::Prod(p) => {
            let (a, b) = v.expect_pair();
            Value::pair(ones_like(&p.0, a), ones_like(&p.1, b))
        }
        Type::Array(e) if matches!(***e, Type::Real) => Value::reals(vec![1.0; v.array_len()]),
        Type::Array(e) => {
            Value::array_of(v.array_items().iter().map(|x| ones_like(e, x)).collect())
        }
        _ => panic!("no tangent for {ty}"),
    }
}

fn measure(family: &str, size: usize, text: &str, args: &[Value], repeat: usize) {
    let prog =
        chad::internals::source::load(text, &Registry::builtin()).expect("the program checks");
    let entry: Entry = prog.entry(prog.defs.len() - 1);
    let entry = if std::env::args().any(|a| a == "--as-written") {
        entry
    } else {
        chad::internals::optimize::optimize(&entry)
    };
    let simplify = chad::internals::simplify::simplify;
    let jvp = Jvp::new(&entry).expect("differentiable").map_body(simplify);
    let vjp = Vjp::new(&entry).expect("differentiable").map_body(simplify);
    let (params, body) = embed::entry(&entry);
    let primal = Code::compile(&params, &simplify(&body));
    let tangents: Vec<Value> = entry
        .params
        .iter()
        .zip(args)
        .map(|(p, a)| ones_like(&p.ty, a))
        .collect();
    let t_p = median(repeat, || drop(primal.run(args).expect("runs")));
    let t_f = median(repeat, || drop(jvp.jvp(args, &tangents).expect("runs")));
    let t_r = median(repeat, || drop(vjp.grad(args).expect("runs")));
    println!(
        "{:<8} {:>7} {:>11.3} {:>11.3} {:>11.3} {:>9.2} {:>9.2}",
        family,
        size,
        t_p * 1e3,
        t_f * 1e3,
        t_r * 1e3,
        t_f / t_p,
        t_r / t_p
    );
}
