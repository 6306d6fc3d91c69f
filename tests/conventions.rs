//! Derivatives at the special points, and programs with near-duplicate subterms, in every
//! engine (issue 27, finding 6: a suite that caught 23 of 26 planted bugs let through `max`'s
//! tie sent to the second argument, `pow`'s `y = 0` case removed, and the simplifier's CSE
//! keying `snd` as `fst`).
//!
//! * [`derivatives_at_special_points_follow_the_documented_conventions`]: a table written from
//!   the README's "Derivatives at non-differentiable points" (not from the code): the value and
//!   gradient of each builtin at its ties, zeros and edges, checked in forward CHAD, reverse
//!   CHAD (both simplified, as the CLI runs them), dual-numbers reverse, the IR and the
//!   forward oracle.
//! * [`near_duplicate_subterms_stay_apart`]: programs applying one primitive to different
//!   components of one value (`cos (fst p) * cos (snd p)`, `sin (xs ! 0) * sin (xs ! 1)`, maps
//!   of one function over different arrays, ...), which random programs rarely contain: value
//!   and derivatives in every engine against the evaluator and the forward oracle on the
//!   unsimplified program.

mod common;

use chad::Value;
use chad::internals::ad::{Jvp, Vjp};
use chad::internals::ir::compile::{Compiled, Parts};
use chad::internals::optimize::optimize;
use chad::internals::oracle::{dual, fd};
use chad::internals::simplify::simplify;
use chad::internals::source::term::Entry;
use common::{args, entry};

/// A forward-mode engine: the value and tangent along a tangent of the arguments.
type Forward<'a> = &'a dyn Fn(&[Value]) -> chad::Result<(Value, Value)>;

/// Equal as IEEE numbers up to rounding: NaN only with NaN, infinities exactly.
fn close(a: f64, b: f64, tol: f64) -> bool {
    (a.is_nan() && b.is_nan())
        || a == b
        || (a.is_finite() && b.is_finite() && (a - b).abs() <= tol * (1.0 + a.abs().max(b.abs())))
}

fn all_close(a: &[f64], b: &[f64], tol: f64) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| close(*x, *y, tol))
}

/// Per engine, the value and the gradient (flattened leaves of every argument's cotangent)
/// of a `Real`-valued entry at `xs`. Forward engines give the gradient one basis tangent at
/// a time.
fn gradients(e: &Entry, xs: &[Value]) -> Vec<(&'static str, f64, Vec<f64>)> {
    let tys = e.param_types();
    let basis = fd::basis(&tys, xs);
    let optimized = optimize(e);
    let real = |v: &Value| match v {
        Value::Real(r) => *r,
        other => panic!("not a real: {other}"),
    };
    let flat = |gs: &[Value]| gs.iter().flat_map(fd::leaves).collect::<Vec<f64>>();
    let forward = |name: &'static str, f: Forward<'_>| -> (&'static str, f64, Vec<f64>) {
        let mut value = f64::NAN;
        let mut g = Vec::new();
        for dx in &basis {
            let (y, t) = f(dx).unwrap_or_else(|err| panic!("{name}: {err}"));
            value = real(&y);
            g.push(real(&t));
        }
        (name, value, g)
    };
    let mut out = Vec::new();
    let jvp = Jvp::new(&optimized).unwrap().map_body(simplify);
    out.push(forward("forward CHAD", &|dx| jvp.jvp(xs, dx)));
    out.push(forward("forward oracle", &|dx| dual::jvp(e, xs, dx)));
    let vjp = Vjp::new(&optimized).unwrap().map_body(simplify);
    let (y, g) = vjp.grad(xs).unwrap();
    out.push(("reverse CHAD", real(&y), flat(&g)));
    let (y, g) = chad::internals::dual_reverse::grad(e, xs).unwrap();
    out.push(("dual-numbers reverse", real(&y), flat(&g)));
    let ir = Compiled::with_parts(e, Parts::ALL).unwrap();
    out.push(forward("IR forward", &|dx| ir.jvp(xs, dx)));
    let (y, g) = ir.vjp(xs, &Value::Real(1.0)).unwrap();
    out.push(("IR reverse", real(&y), flat(&g)));
    out
}

/// The documented conventions (README, "Derivatives at non-differentiable points"): program,
/// arguments, value, gradient.
const TABLE: &[(&str, &[&str], f64, &[f64])] = &[
    // abs'(0) = 1, the right derivative.
    ("def f (x : Real) : Real = abs x", &["0.0"], 0.0, &[1.0]),
    ("def f (x : Real) : Real = abs x", &["-2.0"], 2.0, &[-1.0]),
    ("def f (x : Real) : Real = abs x", &["3.0"], 3.0, &[1.0]),
    // max and min return their first argument on ties, and differentiate the one returned.
    (
        "def f (x : Real) (y : Real) : Real = max x y",
        &["1.5", "1.5"],
        1.5,
        &[1.0, 0.0],
    ),
    (
        "def f (x : Real) (y : Real) : Real = max x y",
        &["1.0", "2.0"],
        2.0,
        &[0.0, 1.0],
    ),
    (
        "def f (x : Real) (y : Real) : Real = max x y",
        &["2.0", "1.0"],
        2.0,
        &[1.0, 0.0],
    ),
    (
        "def f (x : Real) (y : Real) : Real = min x y",
        &["1.5", "1.5"],
        1.5,
        &[1.0, 0.0],
    ),
    (
        "def f (x : Real) (y : Real) : Real = min x y",
        &["1.0", "2.0"],
        1.0,
        &[1.0, 0.0],
    ),
    (
        "def f (x : Real) (y : Real) : Real = min x y",
        &["2.0", "1.0"],
        1.0,
        &[0.0, 1.0],
    ),
    // A tie inside a larger expression: max x x = x has derivative 1, all of it via x.
    (
        "def f (x : Real) : Real = max x x + min x x",
        &["0.5"],
        1.0,
        &[2.0],
    ),
    // pow x y: ∂x = y·x^(y-1), exactly 0 when y = 0 (x^0 = 1 for every x, 0 included);
    // ∂y = x^y·log x where x > 0, else 0.
    (
        "def f (x : Real) (y : Real) : Real = pow x y",
        &["0.0", "0.0"],
        1.0,
        &[0.0, 0.0],
    ),
    (
        "def f (x : Real) (y : Real) : Real = pow x y",
        &["2.0", "0.0"],
        1.0,
        &[0.0, std::f64::consts::LN_2],
    ),
    (
        "def f (x : Real) (y : Real) : Real = pow x y",
        &["-2.0", "0.0"],
        1.0,
        &[0.0, 0.0],
    ),
    (
        "def f (x : Real) (y : Real) : Real = pow x y",
        &["0.0", "2.0"],
        0.0,
        &[0.0, 0.0],
    ),
    (
        "def f (x : Real) (y : Real) : Real = pow x y",
        &["0.0", "1.0"],
        0.0,
        &[1.0, 0.0],
    ),
    (
        "def f (x : Real) (y : Real) : Real = pow x y",
        &["-2.0", "2.0"],
        4.0,
        &[-4.0, 0.0],
    ),
    (
        "def f (x : Real) (y : Real) : Real = pow x y",
        &["2.0", "3.0"],
        8.0,
        &[12.0, 8.0 * std::f64::consts::LN_2],
    ),
    ("def f (x : Real) : Real = pow x 0.0", &["0.0"], 1.0, &[0.0]),
    // sqrt'(0) and log'(0) are +inf (IEEE: 0.5 / sqrt 0, 1 / 0).
    (
        "def f (x : Real) : Real = sqrt x",
        &["0.0"],
        0.0,
        &[f64::INFINITY],
    ),
    (
        "def f (x : Real) : Real = log x",
        &["0.0"],
        f64::NEG_INFINITY,
        &[f64::INFINITY],
    ),
    // Comparisons have no tangent; at equality the branch taken is differentiated.
    (
        "def f (x : Real) (y : Real) : Real = if x >= y then x else y",
        &["1.0", "1.0"],
        1.0,
        &[1.0, 0.0],
    ),
    (
        "def f (x : Real) (y : Real) : Real = if x > y then x else y",
        &["1.0", "1.0"],
        1.0,
        &[0.0, 1.0],
    ),
    (
        "def f (x : Real) (y : Real) : Real = if x <= y then 2.0 * x else 3.0 * y",
        &["1.0", "1.0"],
        2.0,
        &[2.0, 0.0],
    ),
    (
        "def f (x : Real) (y : Real) : Real = if x < y then 2.0 * x else 3.0 * y",
        &["1.0", "1.0"],
        3.0,
        &[0.0, 3.0],
    ),
    (
        "def f (x : Real) (y : Real) : Real = if x == y then x * y else x + y",
        &["2.0", "2.0"],
        4.0,
        &[2.0, 2.0],
    ),
    (
        "def f (x : Real) (y : Real) : Real = if x != y then x * y else x - y",
        &["2.0", "2.0"],
        0.0,
        &[1.0, -1.0],
    ),
    // floor has no tangent (its result is an Int).
    (
        "def f (x : Real) : Real = toReal (floor x) * x",
        &["2.0"],
        4.0,
        &[2.0],
    ),
];

#[test]
fn derivatives_at_special_points_follow_the_documented_conventions() {
    let mut wrong = Vec::new();
    for (src, xs, value, grad) in TABLE {
        let e = entry(src);
        let xs = args(&e, xs);
        for (engine, y, g) in gradients(&e, &xs) {
            if !close(y, *value, 1e-12) || !all_close(&g, grad, 1e-12) {
                wrong.push(format!(
                    "{engine}: {src} at {xs:?} gives {y}, {g:?}; documented {value}, {grad:?}"
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Programs with near-duplicate subterms, and arguments.
const NEAR_DUPLICATES: &[(&str, &[&str])] = &[
    (
        "def f (p : (Real, Real)) : Real = cos (fst p) * cos (snd p)",
        &["(0.5, 1.5)"],
    ),
    (
        "def f (p : (Real, Real)) : Real = cos (snd p) * cos (fst p) + cos (fst p)",
        &["(0.5, 1.5)"],
    ),
    (
        "def f (x : Real) (y : Real) : Real = let p = (x, y) in sin (fst p) + 2.0 * sin (snd p)",
        &["0.3", "1.1"],
    ),
    (
        "def f (p : ((Real, Real), Real)) : Real =\n  \
           exp (fst (fst p)) * exp (snd (fst p)) + exp (snd p)",
        &["((0.1, 0.2), 0.3)"],
    ),
    (
        "def f (p : (Real, Real)) : Real = let a = sin (fst p) in let b = sin (snd p) in a * b - b",
        &["(0.4, 0.9)"],
    ),
    (
        "def f (x : Real) (y : Real) : Real = pow x y - pow y x",
        &["2.0", "3.0"],
    ),
    (
        "def f (x : Real) (y : Real) : Real = x * y + y * x + x * x",
        &["2.0", "3.0"],
    ),
    (
        "def f (p : (Real, Real)) : Real = max (fst p) (snd p) * min (fst p) (snd p)",
        &["(0.5, 1.5)"],
    ),
    (
        "def f (p : (Real, Real)) : Real = max (fst p) (snd p) + max (snd p) (fst p)",
        &["(2.5, 1.5)"],
    ),
    (
        "def f (xs : Array Real) : Real = sin (xs ! 0) * sin (xs ! 1)",
        &["[0.3, 0.7]"],
    ),
    (
        "def f (xs : Array Real) : Real = sum (map sin xs) * sum (map cos xs)",
        &["[0.3, 0.7, 1.2]"],
    ),
    (
        "def f (xs : Array Real) (ys : Array Real) : Real = sum (map exp xs) + 2.0 * sum (map exp ys)",
        &["[0.3, 0.7]", "[1.0, -1.0, 0.5]"],
    ),
    (
        "def f (xs : Array Real) (ys : Array Real) : Real =\n  \
           toReal (length xs) * sum xs + toReal (length ys) * sum ys",
        &["[0.3, 0.7]", "[1.0, -1.0, 0.5]"],
    ),
    (
        "def f (ps : Array (Real, Real)) : Real =\n  \
           sum (map (\\(p : (Real, Real)) -> tanh (fst p) * tanh (snd p)) ps)",
        &["[(0.1, 0.2), (0.3, -0.4)]"],
    ),
    (
        "def f (s : Real + Real) (x : Real) : Real =\n  \
           case s of inl a -> sin a * sin x | inr b -> sin b * sin x",
        &["inr 0.4", "1.3"],
    ),
];

#[test]
fn near_duplicate_subterms_stay_apart() {
    let mut wrong = Vec::new();
    for (src, xs) in NEAR_DUPLICATES {
        let e = entry(src);
        let xs = args(&e, xs);
        let want = chad::internals::eval::eval_entry(&e, &xs).unwrap();
        let want = fd::leaves(&want)[0];
        // The value: simplified on the engine, and the IR.
        let opt = optimize(&e);
        let (params, body) = chad::internals::target::embed::entry(&opt);
        let engine = chad::internals::target::engine::Code::compile(&params, &simplify(&body))
            .run(&xs)
            .unwrap();
        let ir = Compiled::with_parts(&e, Parts::ALL)
            .unwrap()
            .eval(&xs)
            .unwrap();
        for (name, v) in [("engine", &engine), ("IR", &ir)] {
            if !close(fd::leaves(v)[0], want, 1e-12) {
                wrong.push(format!("{name}: {src} gives {v}, the evaluator {want}"));
            }
        }
        // The gradient: every engine against the forward oracle on the program as written.
        let all = gradients(&e, &xs);
        let (_, _, oracle) = all
            .iter()
            .find(|(n, _, _)| *n == "forward oracle")
            .unwrap()
            .clone();
        for (engine, y, g) in &all {
            if !close(*y, want, 1e-12) || !all_close(g, &oracle, 1e-10) {
                wrong.push(format!(
                    "{engine}: {src} gives {y}, {g:?}; the evaluator {want}, the oracle {oracle:?}"
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
