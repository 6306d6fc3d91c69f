//! Forward and reverse CHAD through the library API, against derivatives worked out by hand:
//! the CHAD paper's Figures 1 and 2, higher-order programs (closures, partial application,
//! functions in tuples, returned functions, map with closures), the type maps (every AD output
//! type-checks at the type they predict), sharing (`x_k = x_{k-1} * 0.5 + x_{k-1} * 0.5` stays
//! linear), the primitive checker's ability to reject wrong derivatives, user primitives with
//! native and term derivatives (`examples/logsumexp.rs`), and errors.

use chad::Value;
use chad::internals::ad::forward::Forward;
use chad::internals::ad::reverse::Reverse;
use chad::internals::ad::{self, Jvp, TypeMaps, Vjp};
use chad::internals::ccc::{self, Comb};
use chad::internals::prim::{Derivative, Primitive, Registry, op};
use chad::internals::source::term::{Entry, Program};
use chad::internals::target::check::check;
use chad::internals::target::term::{LTerm, Term};
use chad::internals::target::types::Ty;
use chad::internals::types::Type;
use chad::{ErrorKind, Span};
use std::time::Instant;

#[path = "../examples/logsumexp.rs"]
#[allow(dead_code)]
mod logsumexp_example;

// ----- helpers -----

fn load_with(text: &str, reg: &Registry) -> Program {
    chad::internals::source::load(text, reg).unwrap_or_else(|e| panic!("{text}\n: {e:?}"))
}

fn load(text: &str) -> Program {
    load_with(text, &Registry::builtin())
}

/// The entry point of the definition `name`.
fn entry(program: &Program, name: &str) -> Entry {
    program.entry(program.find(name).unwrap_or_else(|| panic!("no `{name}`")))
}

/// The last definition of a program text.
fn last(text: &str) -> Entry {
    let p = load(text);
    p.entry(p.defs.len() - 1)
}

fn example_text(name: &str) -> String {
    let path = format!("{}/examples/{name}.chad", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The definition `name` of `examples/name.chad`.
fn example(name: &str) -> Entry {
    entry(&load(&example_text(name)), name)
}

fn r(x: f64) -> Value {
    Value::Real(x)
}

fn rs(xs: &[f64]) -> Value {
    Value::reals(xs.to_vec())
}

/// `a` and `b` agree to 1e-9 relative (exactly, if either is zero).
fn close(a: f64, b: f64) -> bool {
    a == b || (a - b).abs() <= 1e-9 * a.abs().max(b.abs())
}

fn assert_all_close(got: &[f64], want: &[f64], what: &str) {
    assert_eq!(
        got.len(),
        want.len(),
        "{what}: {got:?} vs expected {want:?}"
    );
    for (k, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            close(*g, *w),
            "{what}: component {k} is {g}, expected {w}\n  got      {got:?}\n  expected {want:?}"
        );
    }
}

/// A (co)tangent of `x : ty` (type `ty.tangent()`: same sum sides and array lengths) whose reals
/// are drawn from `next`, in order.
fn tangent_like(ty: &Type, x: &Value, next: &mut dyn FnMut() -> f64) -> Value {
    match ty {
        Type::Real => Value::Real(next()),
        Type::Int | Type::Bool | Type::Unit => Value::Unit,
        Type::Prod(_) => {
            let (ta, tb) = ty.as_prod().unwrap();
            let (xa, xb) = x.expect_pair();
            let a = tangent_like(ta, xa, next);
            Value::pair(a, tangent_like(tb, xb, next))
        }
        Type::Sum(_) => {
            let (ta, tb) = ty.as_sum().unwrap();
            match x {
                Value::Inl(a) => Value::inl(tangent_like(ta, a, next)),
                Value::Inr(b) => Value::inr(tangent_like(tb, b, next)),
                _ => panic!("{x} is not a sum value"),
            }
        }
        Type::Array(e) => {
            let items = x
                .array_items()
                .iter()
                .map(|xi| tangent_like(e, xi, next))
                .collect();
            Value::array(&e.tangent().unwrap(), items)
        }
        Type::Fun(_) => panic!("functions have no tangent values"),
    }
}

/// The number of reals in a tangent of `x : ty`.
fn dim(ty: &Type, x: &Value) -> usize {
    let mut n = 0;
    tangent_like(ty, x, &mut || {
        n += 1;
        0.0
    });
    n
}

/// The `k`-th basis (co)tangent of `x : ty`.
fn basis(ty: &Type, x: &Value, k: usize) -> Value {
    let mut i = 0;
    tangent_like(ty, x, &mut || {
        i += 1;
        if i - 1 == k { 1.0 } else { 0.0 }
    })
}

fn zero(ty: &Type, x: &Value) -> Value {
    tangent_like(ty, x, &mut || 0.0)
}

/// The reals of a first-order value, in order (units, ints and bools contribute nothing).
fn reals(v: &Value) -> Vec<f64> {
    fn go(v: &Value, out: &mut Vec<f64>) {
        match v {
            Value::Real(x) => out.push(*x),
            Value::Int(_) | Value::Bool(_) | Value::Unit => {}
            Value::Pair(p) => {
                go(&p.0, out);
                go(&p.1, out);
            }
            Value::Inl(a) | Value::Inr(a) => go(a, out),
            Value::RealArray(xs) => out.extend(xs.iter()),
            Value::Array(xs) => xs.iter().for_each(|x| go(x, out)),
            other => panic!("not a first-order value: {other}"),
        }
    }
    let mut out = Vec::new();
    go(v, &mut out);
    out
}

/// Checks the value and the whole Jacobian of `entry` at `args` in both modes: forward mode
/// gives one column per basis input tangent, reverse mode one row per basis output cotangent.
/// `value` lists the reals of the result; `jac[i][j]` is the derivative of the result's `i`-th
/// real with respect to the `j`-th real among all the arguments (in order). For a `Real`
/// result, `grad` must give the only row too.
fn check_derivatives(entry: &Entry, args: &[Value], value: &[f64], jac: &[Vec<f64>]) {
    let name = &entry.name;
    let jvp = Jvp::new(entry).unwrap_or_else(|e| panic!("{name}: {e:?}"));
    let vjp = Vjp::new(entry).unwrap_or_else(|e| panic!("{name}: {e:?}"));
    let tys = entry.param_types();
    let out_ty = entry.body.ty.clone();
    let dims: Vec<usize> = tys.iter().zip(args).map(|(t, a)| dim(t, a)).collect();
    let n_in: usize = dims.iter().sum();
    assert_eq!(
        jac.len(),
        value.len(),
        "{name}: one Jacobian row per output"
    );
    for row in jac {
        assert_eq!(
            row.len(),
            n_in,
            "{name}: one Jacobian column per input real"
        );
    }
    let zeros: Vec<Value> = tys.iter().zip(args).map(|(t, a)| zero(t, a)).collect();

    // Forward mode: column j.
    let mut j = 0;
    for (p, (t, a)) in tys.iter().zip(args).enumerate() {
        for k in 0..dims[p] {
            let mut tangents = zeros.clone();
            tangents[p] = basis(t, a, k);
            let (y, dy) = jvp
                .jvp(args, &tangents)
                .unwrap_or_else(|e| panic!("{name}: jvp: {e:?}"));
            let what = format!("{name} at {args:?}: jvp along input real {j}");
            assert_all_close(&reals(&y), value, &format!("{what}: value"));
            assert!(dy.has_type(&out_ty.tangent().unwrap()), "{what}: {dy}");
            let col: Vec<f64> = jac.iter().map(|row| row[j]).collect();
            assert_all_close(&reals(&dy), &col, &what);
            j += 1;
        }
    }
    // A tangent with no reals (all zero, or only discrete inputs) gives a zero tangent.
    let (_, dy) = jvp.jvp(args, &zeros).unwrap();
    assert!(reals(&dy).iter().all(|x| *x == 0.0), "{name}: {dy}");

    // Reverse mode: row i.
    let y = chad::internals::eval::eval_entry(entry, args).unwrap();
    assert_all_close(&reals(&y), value, &format!("{name}: value"));
    for (i, row) in jac.iter().enumerate() {
        let ct = basis(&out_ty, &y, i);
        let (y2, grads) = vjp
            .vjp(args, &ct)
            .unwrap_or_else(|e| panic!("{name}: vjp: {e:?}"));
        let what = format!("{name} at {args:?}: vjp with cotangent {ct}");
        assert_all_close(&reals(&y2), value, &format!("{what}: value"));
        assert_eq!(grads.len(), args.len(), "{what}");
        for ((g, t), a) in grads.iter().zip(&tys).zip(args) {
            assert!(g.has_type(&t.tangent().unwrap()), "{what}: {g} : {t}");
            assert_eq!(dim(t, a), reals(g).len(), "{what}: shape of {g}");
        }
        let flat: Vec<f64> = grads.iter().flat_map(reals).collect();
        assert_all_close(&flat, row, &what);
    }
    if matches!(out_ty, Type::Real) {
        let (y3, grads) = vjp.grad(args).unwrap();
        assert_all_close(&reals(&y3), value, &format!("{name}: grad value"));
        let flat: Vec<f64> = grads.iter().flat_map(reals).collect();
        assert_all_close(&flat, &jac[0], &format!("{name} at {args:?}: grad"));
    } else {
        let e = vjp.grad(args).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Argument);
        assert!(e.message().contains("vjp"), "{}", e.message());
    }
}

// ----- (a) the paper's examples, against hand-derived derivatives -----

#[test]
fn fig1a_first_order_r_to_r3() {
    // y = 2x, z = x y = 2x², w = cos z:  d(y, z, w)/dx = (2, 4x, -4x sin(2x²)).
    let e = example("fig1a");
    for x in [0.3, -1.7, 2.5] {
        let z = 2.0 * x * x;
        check_derivatives(
            &e,
            &[r(x)],
            &[2.0 * x, z, z.cos()],
            &[vec![2.0], vec![4.0 * x], vec![-4.0 * x * z.sin()]],
        );
    }
}

#[test]
fn fig1b_first_order_r4_to_r() {
    // v = sin w, w = (x1 x4 + 2 x2) x3 + x4:
    // ∂v/∂x1 = cos w · x3 x4, ∂x2 = cos w · 2 x3, ∂x3 = cos w · (x1 x4 + 2 x2),
    // ∂x4 = cos w · (x1 x3 + 1).
    let e = example("fig1b");
    for [x1, x2, x3, x4] in [
        [1.0f64, 2.0, 3.0, 4.0],
        [0.5, -1.2, 0.7, 2.0],
        [-0.3, 0.8, -1.5, 0.25],
    ] {
        let y = x1 * x4 + 2.0 * x2;
        let w = y * x3 + x4;
        let c = w.cos();
        check_derivatives(
            &e,
            &[r(x1), r(x2), r(x3), r(x4)],
            &[w.sin()],
            &[vec![c * x3 * x4, c * 2.0 * x3, c * y, c * (x1 * x3 + 1.0)]],
        );
    }
}

#[test]
fn fig2a_closure_mapped_over_a_replicated_array() {
    // ys = map (\z -> x z + 1) (replicate n x) = n copies of x² + 1; each has derivative 2x.
    // n is discrete: it has no reals, and its gradient is ().
    let e = example("fig2a");
    for (n, x) in [(3, 0.7), (1, -2.0), (4, 1.25)] {
        let value = vec![x * x + 1.0; n];
        let jac = vec![vec![2.0 * x]; n];
        check_derivatives(&e, &[Value::Int(n as i64), r(x)], &value, &jac);
        let (_, g) = ad::vjp(&e, &[Value::Int(n as i64), r(x)], &rs(&vec![1.0; n])).unwrap();
        assert!(matches!(g[0], Value::Unit), "gradient of n: {}", g[0]);
        assert!(close(g[1].expect_real(), 2.0 * x * n as f64));
    }
    // n = 0: an empty result; the derivative is zero, and there is no basis cotangent.
    check_derivatives(&e, &[Value::Int(0), r(0.5)], &[], &[]);
    let (y, g) = ad::vjp(&e, &[Value::Int(0), r(0.5)], &rs(&[])).unwrap();
    assert_eq!(y.array_len(), 0);
    assert_eq!(g[1].expect_real(), 0.0);
}

#[test]
fn fig2b_map_of_a_closure_then_sum() {
    // w = Σ_i x1 x2_i:  ∂w/∂x1 = Σ_i x2_i, ∂w/∂x2_i = x1.
    let e = example("fig2b");
    for (x1, x2) in [
        (1.5, vec![0.5, -2.0, 3.0]),
        (-0.25, vec![1.0]),
        (2.0, vec![]),
        (0.1, vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]),
    ] {
        let mut row = vec![x2.iter().sum::<f64>()];
        row.extend(vec![x1; x2.len()]);
        let value = x1 * x2.iter().sum::<f64>();
        check_derivatives(&e, &[r(x1), rs(&x2)], &[value], &[row]);
    }
    // The free functions agree with the transformed-once API.
    let args = [r(1.5), rs(&[0.5, -2.0, 3.0])];
    let (v, g) = ad::grad(&e, &args).unwrap();
    assert!(close(v.expect_real(), 1.5 * 1.5));
    assert_all_close(g[1].expect_reals(), &[1.5; 3], "grad x2");
    let (_, t) = ad::jvp(&e, &args, &[r(2.0), rs(&[1.0, 0.0, -1.0])]).unwrap();
    // 2 · Σ x2 + x1 · (1 - 1) = 3
    assert!(close(t.expect_real(), 3.0));
}

// ----- higher-order programs, against hand-derived gradients -----

/// A higher-order program whose last definition `Real^n -> Real` (arrays allowed) has the
/// given value and gradient at the given arguments.
struct Case {
    src: &'static str,
    args: Vec<Value>,
    value: f64,
    grad: Vec<f64>,
}

fn higher_order_cases() -> Vec<Case> {
    let x = 0.7;
    let y = -1.3;
    let ys = [0.5, -2.0, 1.25];
    let sum_ys: f64 = ys.iter().sum();
    vec![
        // A closure, called twice: 3x + x².
        Case {
            src: "def f (x : Real) : Real = let g = \\(y : Real) -> x * y in g 3.0 + g x",
            args: vec![r(x)],
            value: 3.0 * x + x * x,
            grad: vec![3.0 + 2.0 * x],
        },
        // Partial application of a definition: (x + y x) + (x + 2 y).
        Case {
            src: "def add3 (a : Real) (b : Real) (c : Real) : Real = a + b * c\n\
                  def f (x : Real) (y : Real) : Real = let h = add3 x in h y x + h 2.0 y",
            args: vec![r(x), r(y)],
            value: 2.0 * x + x * y + 2.0 * y,
            grad: vec![2.0 + y, x + 2.0],
        },
        // Partial application of a builtin, mapped: Σ x^(y_i).
        Case {
            src: "def f (x : Real) (ys : Array Real) : Real = sum (map (pow x) ys)",
            args: vec![r(1.5), rs(&ys)],
            value: ys.iter().map(|y| 1.5f64.powf(*y)).sum(),
            grad: std::iter::once(ys.iter().map(|y| y * 1.5f64.powf(y - 1.0)).sum())
                .chain(ys.iter().map(|y| 1.5f64.powf(*y) * 1.5f64.ln()))
                .collect(),
        },
        // Functions stored in a tuple: sin (x · x) + sin x.
        Case {
            src: "def f (x : Real) : Real =\n  \
                    let ops = (sin, \\(y : Real) -> x * y) in\n  \
                    let (s, m) = ops in\n  \
                    s (m x) + fst ops x",
            args: vec![r(x)],
            value: (x * x).sin() + x.sin(),
            grad: vec![2.0 * x * (x * x).cos() + x.cos()],
        },
        // A returned function: (mk x) y = x y², so 4x + x³.
        Case {
            src: "def mk (a : Real) : Real -> Real = \\(y : Real) -> a * y * y\n\
                  def f (x : Real) : Real = let g = mk x in g 2.0 + g x",
            args: vec![r(x)],
            value: 4.0 * x + x * x * x,
            grad: vec![4.0 + 3.0 * x * x],
        },
        // A closure capturing a closure: g (g 2) + x = 2x² + x.
        Case {
            src: "def f (x : Real) : Real =\n  \
                    let g = \\(y : Real) -> x * y in\n  \
                    let h = \\(z : Real) -> g (g z) + x in\n  \
                    h 2.0",
            args: vec![r(x)],
            value: 2.0 * x * x + x,
            grad: vec![4.0 * x + 1.0],
        },
        // Map with a closure: Σ x sin y_i.
        Case {
            src: "def f (x : Real) (ys : Array Real) : Real =\n  \
                    let g = \\(y : Real) -> x * sin y in\n  \
                    sum (map g ys)",
            args: vec![r(x), rs(&ys)],
            value: x * ys.iter().map(|y| y.sin()).sum::<f64>(),
            grad: std::iter::once(ys.iter().map(|y| y.sin()).sum())
                .chain(ys.iter().map(|y| x * y.cos()))
                .collect(),
        },
        // Higher-order definitions (function parameters and results), used first-order:
        // h y = y² + x, twice h x = (x² + x)² + x.
        Case {
            src: "def compose (f : Real -> Real) (g : Real -> Real) : Real -> Real =\n  \
                    \\(x : Real) -> f (g x)\n\
                  def twice (f : Real -> Real) : Real -> Real = compose f f\n\
                  def main (x : Real) : Real = twice (\\(y : Real) -> y * y + x) x",
            args: vec![r(x)],
            value: (x * x + x).powi(2) + x,
            grad: vec![2.0 * (x * x + x) * (2.0 * x + 1.0) + 1.0],
        },
        // A curried lambda, partially applied: (3x + x) + (x² + x).
        Case {
            src: "def f (x : Real) : Real =\n  \
                    let k = \\(a : Real) (b : Real) -> a * b + x in\n  \
                    let k1 = k x in\n  \
                    k1 3.0 + k1 x",
            args: vec![r(x)],
            value: x * x + 5.0 * x,
            grad: vec![2.0 * x + 5.0],
        },
        // A closure capturing an array, mapped over a replicated array, and `length`,
        // `replicate`, `dot`: 2 x Σ ys + x Σ ys.
        Case {
            src: "def f (ys : Array Real) (x : Real) : Real =\n  \
                    let g = \\(a : Real) -> a * sum ys in\n  \
                    sum (map g (replicate 2 x)) + dot (replicate (length ys) x) ys",
            args: vec![rs(&ys), r(x)],
            value: 3.0 * x * sum_ys,
            grad: vec![3.0 * x; 3].into_iter().chain([3.0 * sum_ys]).collect(),
        },
        // Curried closures three deep, partially applied and mapped:
        // x² Σ y + x Σ y² (the second map calls `k y x y`).
        Case {
            src: "def f (x : Real) (ys : Array Real) : Real =\n  \
                    let k = \\(a : Real) -> \\(b : Real) -> \\(c : Real) -> a * b * c in\n  \
                    sum (map (k x x) ys) + sum (map (\\(y : Real) -> k y x y) ys)",
            args: vec![r(x), rs(&ys)],
            value: x * x * sum_ys + x * ys.iter().map(|y| y * y).sum::<f64>(),
            grad: std::iter::once(2.0 * x * sum_ys + ys.iter().map(|y| y * y).sum::<f64>())
                .chain(ys.iter().map(|y| x * x + 2.0 * x * y))
                .collect(),
        },
        // A higher-order definition applied to closures, partially applied, and to a partial
        // application of itself: Σ x y_i + x².
        Case {
            src: "def app (g : Real -> Real) (x : Real) : Real = g x\n\
                  def f (x : Real) (ys : Array Real) : Real =\n  \
                    sum (map (app (\\(y : Real) -> x * y)) ys) + app (app (\\(z : Real) -> z * x)) x",
            args: vec![r(x), rs(&ys)],
            value: x * sum_ys + x * x,
            grad: std::iter::once(sum_ys + 2.0 * x)
                .chain(ys.iter().map(|_| x))
                .collect(),
        },
        // A function-valued let used at two different arguments inside map's closure:
        // Σ_i (x y_i)² .
        Case {
            src: "def f (x : Real) (ys : Array Real) : Real =\n  \
                    let sq = \\(t : Real) -> t * t in\n  \
                    let scale = \\(t : Real) -> x * t in\n  \
                    sum (map (\\(y : Real) -> sq (scale y)) ys)",
            args: vec![r(x), rs(&ys)],
            value: ys.iter().map(|y| (x * y) * (x * y)).sum(),
            grad: std::iter::once(ys.iter().map(|y| 2.0 * x * y * y).sum())
                .chain(ys.iter().map(|y| 2.0 * x * x * y))
                .collect(),
        },
    ]
}

#[test]
fn higher_order_programs_match_hand_derived_gradients() {
    for c in higher_order_cases() {
        let e = last(c.src);
        check_derivatives(&e, &c.args, &[c.value], &[c.grad]);
    }
}

#[test]
fn structured_and_nested_programs_match_hand_derived_jacobians() {
    let x = 0.6;
    let ys = [1.5, -0.5, 2.0];
    let sy: f64 = ys.iter().sum();

    // Nested maps, the inner closure capturing the outer element: x (Σ y)².
    let e = last(
        "def f (x : Real) (ys : Array Real) : Real =\n  \
           sum (map (\\(y : Real) -> sum (map (\\(z : Real) -> y * z * x) ys)) ys)",
    );
    let mut row = vec![sy * sy];
    row.extend(vec![2.0 * x * sy; 3]);
    check_derivatives(&e, &[r(x), rs(&ys)], &[x * sy * sy], &[row]);

    // An array of pairs (boxed tangents): Σ a_i b_i.
    let e = last(
        "def f (ps : Array (Real, Real)) : Real =\n  \
           sum (map (\\(p : (Real, Real)) -> fst p * snd p) ps)",
    );
    let ps = [(1.0, 2.0), (-3.0, 0.5)];
    let arg = Value::array(
        &Type::prod(Type::Real, Type::Real),
        ps.iter().map(|(a, b)| Value::pair(r(*a), r(*b))).collect(),
    );
    check_derivatives(&e, &[arg], &[0.5], &[vec![2.0, 1.0, 0.5, -3.0]]);

    // A map returning pairs: [(x y_i, y_i)]; rows are (x y_0, y_0, x y_1, y_1, ...).
    let e = last(
        "def f (x : Real) (ys : Array Real) : Array (Real, Real) =\n  \
           map (\\(y : Real) -> (x * y, y)) ys",
    );
    let mut value = Vec::new();
    let mut jac = Vec::new();
    for (i, y) in ys.iter().enumerate() {
        value.extend([x * y, *y]);
        let mut d_xy = vec![*y, 0.0, 0.0, 0.0];
        d_xy[1 + i] = x;
        let mut d_y = vec![0.0; 4];
        d_y[1 + i] = 1.0;
        jac.extend([d_xy, d_y]);
    }
    check_derivatives(&e, &[r(x), rs(&ys)], &value, &jac);

    // Arrays of arrays: Σ_i Σ_j xss_ij², and a tuple result (total, count as Real).
    let e = last(
        "def f (xss : Array (Array Real)) : (Real, Real) =\n  \
           (sum (map (\\(xs : Array Real) -> dot xs xs) xss), toReal (length xss))",
    );
    let xss = Value::array(
        &Type::array(Type::Real),
        vec![rs(&[1.0, 2.0]), rs(&[]), rs(&[-3.0])],
    );
    check_derivatives(
        &e,
        &[xss],
        &[14.0, 3.0],
        &[vec![2.0, 4.0, -6.0], vec![0.0, 0.0, 0.0]],
    );

    // Closures stored in an array and applied in a map: 2 · (3x) + x · Σ y.
    let e = last(
        "def f (x : Real) (ys : Array Real) : Real =\n  \
           let fs = replicate 2 (\\(y : Real) -> x * y) in\n  \
           sum (map (\\(g : Real -> Real) -> g 3.0) fs) + sum (map (\\(y : Real) -> x * y) ys)",
    );
    let mut row = vec![6.0 + sy];
    row.extend(vec![x; 3]);
    check_derivatives(&e, &[r(x), rs(&ys)], &[6.0 * x + x * sy], &[row]);

    // A returned closure mapped: map (mk x) ys with mk a y = a y², summed: x Σ y².
    let e = last(
        "def mk (a : Real) : Real -> Real = \\(y : Real) -> a * y * y\n\
         def f (x : Real) (ys : Array Real) : Real = sum (map (mk x) ys)",
    );
    let mut row = vec![ys.iter().map(|y| y * y).sum::<f64>()];
    row.extend(ys.iter().map(|y| 2.0 * x * y));
    check_derivatives(&e, &[r(x), rs(&ys)], &[x * row[0]], &[row]);

    // Discrete, unit and tuple parameters: toReal n · x · fst p + snd p.
    let e = last(
        "def f (n : Int) (u : Unit) (b : Bool) (x : Real) (p : (Real, Real)) : Real =\n  \
           toReal n * x * fst p + snd p",
    );
    let args = [
        Value::Int(3),
        Value::Unit,
        Value::Bool(true),
        r(x),
        Value::pair(r(2.0), r(5.0)),
    ];
    check_derivatives(
        &e,
        &args,
        &[3.0 * x * 2.0 + 5.0],
        &[vec![6.0, 3.0 * x, 1.0]],
    );
    let (_, g) = ad::grad(&e, &args).unwrap();
    assert_eq!(
        g[..3].iter().map(|v| v.to_string()).collect::<Vec<_>>(),
        ["()"; 3]
    );
}

// ----- (b) typing: AD output has exactly the type the type maps predict -----

/// Both transforms of `comb` type-check, closed, at `F1(A) → F1(B) × (F2(A) ⊸ F2(B))` and
/// `R1(A) → R1(B) × (R2(B) ⊸ R2(A))`.
fn assert_typed(what: &str, comb: &Comb) {
    let (f, rv) = (Forward::new(), Reverse::new());
    let fwd = ad::forward::transform(comb).unwrap_or_else(|e| panic!("{what}: {e:?}"));
    let rev = ad::reverse::transform(comb).unwrap_or_else(|e| panic!("{what}: {e:?}"));
    for (mode, m, primal, image) in [
        (
            "forward",
            &fwd,
            f.primal(&comb.dom),
            f.image(&comb.dom, &comb.cod),
        ),
        (
            "reverse",
            &rev,
            rv.primal(&comb.dom),
            rv.image(&comb.dom, &comb.cod),
        ),
    ] {
        assert_eq!(m.dom, comb.dom, "{what} ({mode}): domain");
        assert_eq!(m.cod, comb.cod, "{what} ({mode}): codomain");
        let want = Ty::fun(primal, image);
        let got = check(&m.to_term(), &[])
            .unwrap_or_else(|e| panic!("{what} ({mode}) does not type-check: {e:?}\n{m}"));
        assert_eq!(got, want, "{what} ({mode})");
    }
}

#[test]
fn every_example_definition_type_checks_at_the_predicted_type() {
    // Every definition of every bundled example (found by listing `examples/`, so new ones are
    // covered), in both modes.
    let mut files: Vec<_> = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/examples"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "chad"))
        .collect();
    files.sort();
    assert!(files.len() >= 5, "{files:?}");
    let mut typed = 0;
    for path in files {
        let p = load(&std::fs::read_to_string(&path).unwrap());
        for i in 0..p.defs.len() {
            let e = p.entry(i);
            let what = format!("{}: {}", path.display(), e.name);
            assert_typed(&what, &ccc::compile_entry(&e));
            typed += 1;
        }
    }
    assert!(typed >= 10, "{typed} definitions");
}

#[test]
fn higher_order_programs_type_check_at_the_predicted_type() {
    let extra = [
        // A definition returning a closure that captures a closure.
        "def f (x : Real) : Real -> Real =\n  \
           let g = \\(y : Real) -> x * y in\n  \
           \\(z : Real) -> g (g z)",
        // Functions in and out of tuples and arrays of functions' results.
        "def f (p : (Real -> Real, Real)) : (Real, Real -> Real) =\n  \
           let (g, a) = p in (g a, \\(b : Real) -> g (a * b))",
        // A function-typed parameter mapped over an array.
        "def f (g : Real -> Real) (xs : Array Real) : Array Real = map g xs",
        // Partially applied builtins and curried results.
        "def f (x : Real) : Real -> Real -> Real = \\(a : Real) -> pow (x * a)",
        // Functions in arrays.
        "def f (x : Real) (n : Int) : Array (Real -> Real) =\n  \
           replicate n (\\(y : Real) -> x * y)",
        "def f (fs : Array (Real -> Real)) (x : Real) : Array Real =\n  \
           map (\\(g : Real -> Real) -> g x) fs",
        // Higher-order values stored in tuples in arrays; unit and discrete types.
        "def f (u : Unit) (b : Bool) (xs : Array (Int, Real)) : Array (Real, Unit -> Real) =\n  \
           map (\\(p : (Int, Real)) -> (snd p, \\(v : Unit) -> snd p * toReal (fst p))) xs",
    ];
    for c in higher_order_cases() {
        let p = load(c.src);
        for i in 0..p.defs.len() {
            let e = p.entry(i);
            assert_typed(&format!("{}\n({})", c.src, e.name), &ccc::compile_entry(&e));
        }
    }
    for src in extra {
        let e = last(src);
        assert!(ad::check_supported(&e.body).is_ok(), "{src}");
        assert_typed(src, &ccc::compile_entry(&e));
    }
}

// ----- (c) sharing: x_k = x_{k-1} * 0.5 + x_{k-1} * 0.5 -----

/// `k` steps, each using the previous step twice.
fn doubling_program(k: usize) -> String {
    let mut s = String::from("def f (x0 : Real) : Real =\n");
    for i in 1..=k {
        s.push_str(&format!(
            "  let x{i} = x{j} * 0.5 + x{j} * 0.5 in\n",
            j = i - 1
        ));
    }
    s.push_str(&format!("  x{k}\n"));
    s
}

#[test]
fn shared_subterms_stay_linear() {
    // Each step is the identity, with derivative 0.5 + 0.5 = 1; halving and adding halves are
    // exact in binary floating point, so the value is exactly x0 and the derivative exactly 1.
    // Without sharing the derivative would have 2^k paths (each contributing 2^-k).
    let mut sizes = Vec::new();
    for k in [20, 40, 80] {
        let e = last(&doubling_program(k));
        let t0 = Instant::now();
        let jvp = Jvp::new(&e).unwrap();
        let vjp = Vjp::new(&e).unwrap();
        let t1 = Instant::now();
        for x in [1.3, -0.7] {
            let (y, g) = vjp.grad(&[r(x)]).unwrap();
            assert_eq!((y.expect_real(), g[0].expect_real()), (x, 1.0), "k = {k}");
            let (y, t) = jvp.jvp(&[r(x)], &[r(2.5)]).unwrap();
            assert_eq!((y.expect_real(), t.expect_real()), (x, 2.5), "k = {k}");
        }
        let t2 = Instant::now();
        let (fs, rs) = (jvp.mor().body.size(), vjp.mor().body.size());
        println!(
            "sharing k = {k}: forward term {fs} nodes, reverse term {rs} nodes; \
             transform {:.2} ms, 2 grads + 2 jvps {:.2} ms",
            (t1 - t0).as_secs_f64() * 1e3,
            (t2 - t1).as_secs_f64() * 1e3
        );
        sizes.push((fs, rs));
    }
    // Linear growth: doubling k about doubles the size (quadratic would give 4, exponential
    // 2^k).
    for w in sizes.windows(2) {
        for (a, b) in [(w[0].0, w[1].0), (w[0].1, w[1].1)] {
            let ratio = b as f64 / a as f64;
            assert!(
                (1.8..=2.2).contains(&ratio),
                "sizes {sizes:?}: ratio {ratio}"
            );
        }
    }
}

/// The longest projection chain in `c` (a variable's path into its context).
fn longest_path(c: &Comb) -> usize {
    let mut longest = 0;
    let mut stack = vec![c];
    while let Some(c) = stack.pop() {
        match &c.kind {
            ccc::CombKind::Proj(p) => longest = longest.max(p.len()),
            ccc::CombKind::Tuple(_) => longest = longest.max(4),
            _ => {}
        }
        stack.extend(c.children());
    }
    longest
}

#[test]
fn far_back_variables_keep_derivative_code_near_linear() {
    // Every line mentions the parameter (`x` is `k` binders back at line `k`), or a random
    // earlier line. With the context a snoc-list, a variable `k` binders back was a chain of
    // `k` projections, and reverse mode injected its cotangent into a `k`-deep tuple of zeros:
    // raw derivative code Θ(n²) (1.7 M reverse nodes at 2000 lines of the suite's program,
    // 11 GB at 10⁴). The compiler's skew-binary contexts make a chain O(log k) long.
    let param = |n: usize| {
        let mut s = String::from("def f (x : Real) : Real =\n  let v0 = x in\n");
        for i in 1..n {
            s.push_str(&format!("  let v{i} = sin v{} * x in\n", i - 1));
        }
        s.push_str(&format!("  v{}\n", n - 1));
        s
    };
    let random = |n: usize| chad::internals::random::straight_line_ad_source(n, 11, true, false);
    let suite = chad::internals::bench::programs::straight_line;
    let programs: [(&str, &dyn Fn(usize) -> String); 3] = [
        ("parameter", &param),
        ("random", &random),
        ("suite", &suite),
    ];
    for (name, program) in programs {
        let mut per_line = Vec::new();
        for n in [250, 1000, 4000] {
            let e = last(&program(n));
            let comb = ccc::compile_entry(&e);
            let longest = longest_path(&comb);
            let fs = ad::forward::transform(&comb).unwrap().body.size();
            let rs = ad::reverse::transform(&comb).unwrap().body.size();
            println!(
                "{name} n = {n}: longest chain {longest}, raw forward {fs} nodes, reverse {rs}"
            );
            // Out along a spine of at most log n trees, then down one (two steps a level),
            // plus the parameters.
            let log = (n as f64).log2().ceil() as usize;
            assert!(
                longest <= 3 * log + 4,
                "{name} n = {n}: a chain of {longest}"
            );
            per_line.push((fs as f64 / n as f64, rs as f64 / n as f64));
        }
        // Per line the size grows at most like log n (quadratic code would grow 4× per 4× n).
        for w in per_line.windows(2) {
            for (a, b) in [(w[0].0, w[1].0), (w[0].1, w[1].1)] {
                assert!(b / a < 1.3, "{name}: nodes per line {per_line:?}");
            }
        }
    }
}

/// Every kind of binder (`let`, tuple `let`, λ, `case`, `map`, two-argument `map2`, `build`)
/// deep inside a long context, where the compiler merges the context's trees (its
/// rearrangements at every binder kind): the combinator evaluates as the source does, and both
/// AD modes agree with the dual-number oracle's Jacobian.
#[test]
fn binders_in_long_contexts_evaluate_and_differentiate_correctly() {
    let mut src = String::from(
        "def deep (x : Real) (y : Real) (xs : Array Real) : Real =\n  let a0 = x * y in\n",
    );
    for i in 1..13 {
        src.push_str(&format!(
            "  let a{i} = sin a{} * 0.5 + x * 0.25 in\n",
            i - 1
        ));
    }
    src.push_str(
        "  let (p, q) = (a5 * x, a9 + y) in
  let f = \\(z : Real) -> let w = z * a3 in let u = w + p in let t = u * q in sin t + a1 * x in
  let c : Real + Real = (if a4 > 0.0 then inl (a7 * y) else inr a8) in
  let s = (case c of inl l -> let l2 = l * a2 in let l3 = l2 + q in f l3 | inr r -> f r * y) in
  let m = sum (map (\\(e : Real) -> let g = e * a2 in let h = g + x in let k = h * a10 in f k) xs) in
  let m2 = sum (map2 (\\(e1 : Real) (e2 : Real) ->
    let g = e1 * e2 in let h = g * a6 in let k = h + q in k * x) xs xs) in
  let b = sum (build (length xs) (\\(i : Int) ->
    let e = xs ! i in let g = e * a11 in let h = g + p in let k = h * y in k)) in
  s + m + m2 + b + a12
",
    );
    let e = last(&src);
    let args = [r(0.7), r(-0.4), rs(&[0.3, -1.2, 0.9])];
    let direct = chad::internals::eval::eval_entry(&e, &args).unwrap();
    let comb = ccc::compile_entry(&e);
    assert!(
        longest_path(&comb) < 13,
        "the 20 binders are in trees: {comb}"
    );
    let via = ccc::eval::run(&comb, &ccc::eval::context_value(&args)).unwrap();
    assert_eq!(direct.expect_real().to_bits(), via.expect_real().to_bits());
    // The Jacobian (one row) by the dual-number evaluator of the source, column by column.
    let tys = e.param_types();
    let zeros: Vec<Value> = tys.iter().zip(&args).map(|(t, a)| zero(t, a)).collect();
    let mut row = Vec::new();
    for (p, (t, a)) in tys.iter().zip(&args).enumerate() {
        for k in 0..dim(t, a) {
            let mut tangents = zeros.clone();
            tangents[p] = basis(t, a, k);
            let (_, dy) = chad::internals::oracle::dual::jvp(&e, &args, &tangents).unwrap();
            row.push(dy.expect_real());
        }
    }
    assert_eq!(row.len(), 5);
    check_derivatives(&e, &args, &[direct.expect_real()], &[row]);
}

// ----- (d) check_primitive rejects wrong derivatives -----

fn register(p: Primitive) -> chad::internals::prim::Prim {
    let mut reg = Registry::builtin();
    reg.register(p).unwrap()
}

fn real_fn(name: &str, f: fn(f64) -> f64) -> Primitive {
    Primitive::function(name, vec![Type::Real], Type::Real, move |x| {
        Ok(Value::Real(f(x.expect_real())))
    })
}

fn call(name: &str, x: &Term) -> Term {
    Term::prim(&op(name), vec![x.clone()])
}

#[test]
fn check_primitive_rejects_a_wrong_forward_derivative() {
    // sin with derivative sin x instead of cos x.
    let p = register(
        real_fn("mysin", f64::sin).with_derivative(Derivative::scalar(|x| call("sin", x))),
    );
    let e = ad::check_primitive(&p, 20, 1).unwrap_err();
    assert!(e.contains("mysin"), "{e}");
    assert!(e.contains("finite differences"), "{e}");
}

#[test]
fn check_primitive_rejects_a_wrong_transpose() {
    // Forward derivative cos x · d (right), transposed derivative 2 cos x · v (wrong).
    let p = register(
        real_fn("mysin2", f64::sin).with_derivative(Derivative::terms(
            |x, d| LTerm::scale(call("cos", &x[0]), d[0].clone()),
            |x, v| {
                let two_cos = Term::prim(&op("mul"), vec![Term::real(2.0), call("cos", &x[0])]);
                vec![LTerm::scale(two_cos, v.clone())]
            },
        )),
    );
    let e = ad::check_primitive(&p, 20, 1).unwrap_err();
    assert!(e.contains("mysin2"), "{e}");
    assert!(e.contains("dot-product test"), "{e}");
}

#[test]
fn check_primitive_accepts_correct_user_primitives() {
    let p = register(
        real_fn("mysin3", f64::sin).with_derivative(Derivative::scalar(|x| call("cos", x))),
    );
    let ok = ad::check_primitive(&p, 20, 1).unwrap();
    assert_eq!(ok.points, 20);
    // A two-argument one: hypot-like a² b, with partials (2ab, a²).
    let mut reg = Registry::builtin();
    let q = reg
        .register(
            Primitive::function("a2b", vec![Type::Real, Type::Real], Type::Real, |x| {
                let (a, b) = x.expect_pair();
                let (a, b) = (a.expect_real(), b.expect_real());
                Ok(Value::Real(a * a * b))
            })
            .with_derivative(Derivative::scalar2(|a, b| {
                let mul = |s: &Term, t: &Term| Term::prim(&op("mul"), vec![s.clone(), t.clone()]);
                (mul(&Term::real(2.0), &mul(a, b)), mul(a, a))
            })),
        )
        .unwrap();
    assert_eq!(ad::check_primitive(&q, 20, 3).unwrap().points, 20);
    // The same with a wrong partial in the second argument is caught.
    let bad = reg
        .register(
            Primitive::function("a2b_bad", vec![Type::Real, Type::Real], Type::Real, |x| {
                let (a, b) = x.expect_pair();
                let (a, b) = (a.expect_real(), b.expect_real());
                Ok(Value::Real(a * a * b))
            })
            .with_derivative(Derivative::scalar2(|a, b| {
                let mul = |s: &Term, t: &Term| Term::prim(&op("mul"), vec![s.clone(), t.clone()]);
                (mul(&Term::real(2.0), &mul(a, b)), mul(a, b))
            })),
        )
        .unwrap();
    assert!(ad::check_primitive(&bad, 20, 3).is_err());
    // Used in a program, the user primitive differentiates like its formula:
    // f x = a2b x (mysin3 x) = x² sin x, f' = 2x sin x + x² cos x.
    reg.register(
        real_fn("mysin3", f64::sin).with_derivative(Derivative::scalar(|x| call("cos", x))),
    )
    .unwrap();
    let p = load_with("def f (x : Real) : Real = a2b x (mysin3 x)", &reg);
    let x = 0.9;
    check_derivatives(
        &entry(&p, "f"),
        &[r(x)],
        &[x * x * x.sin()],
        &[vec![2.0 * x * x.sin() + x * x * x.cos()]],
    );
}

// ----- (e) errors -----

/// The span of the first occurrence of `needle` in `text`.
fn span_of(text: &str, needle: &str) -> Span {
    let start = text
        .find(needle)
        .unwrap_or_else(|| panic!("`{needle}` not in {text}"));
    Span::new(start, start + needle.len())
}

#[test]
fn sums_conditionals_and_arrays_match_hand_derived_jacobians() {
    let sum_l = |x: f64| Value::inl(r(x));
    let sum_r = |x: f64| Value::inr(r(x));
    // (source, arguments, value reals, Jacobian rows), all derived by hand.
    type Case = (&'static str, Vec<Value>, Vec<f64>, Vec<Vec<f64>>);
    let cases: Vec<Case> = vec![
        // `case` on a sum-typed input: x · a (either side).
        (
            "def f (s : Real + Real) (x : Real) : Real =\n  \
               x * (case s of inl a -> a | inr b -> b)",
            vec![sum_l(2.0), r(3.0)],
            vec![6.0],
            vec![vec![3.0, 2.0]],
        ),
        (
            "def f (s : Real + Real) (x : Real) : Real =\n  \
               x * (case s of inl a -> a | inr b -> b * b)",
            vec![sum_r(-1.5), r(2.0)],
            vec![4.5],
            vec![vec![2.0 * 2.0 * -1.5, 2.25]],
        ),
        // A sum-typed result.
        (
            "def f (x : Real) : Real + Unit = if x > 0 then inl (x * x) else inr ()",
            vec![r(1.5)],
            vec![2.25],
            vec![vec![3.0]],
        ),
        // `if` on data, both branches.
        (
            "def f (x : Real) (y : Real) : Real = if x > y then x * y else sin y",
            vec![r(2.0), r(1.0)],
            vec![2.0],
            vec![vec![1.0, 2.0]],
        ),
        (
            "def f (x : Real) (y : Real) : Real = if x > y then x * y else sin y",
            vec![r(1.0), r(2.0)],
            vec![2f64.sin()],
            vec![vec![0.0, 2f64.cos()]],
        ),
        // `if` inside a closure that is called later: g 1 + g (3x).
        (
            "def f (x : Real) : Real =\n  \
               let g = \\(y : Real) -> if y > x then y else x in\n  g 1.0 + g (x * 3)",
            vec![r(2.0)],
            vec![8.0],
            vec![vec![4.0]],
        ),
        // Functions chosen by a condition: x² or 2x.
        (
            "def f (b : Bool) (x : Real) : Real =\n  \
               let g = if b then (\\(y : Real) -> y * x) else (\\(y : Real) -> y + x) in g x",
            vec![Value::Bool(true), r(3.0)],
            vec![9.0],
            vec![vec![6.0]],
        ),
        (
            "def f (b : Bool) (x : Real) : Real =\n  \
               let g = if b then (\\(y : Real) -> y * x) else (\\(y : Real) -> y + x) in g x",
            vec![Value::Bool(false), r(3.0)],
            vec![6.0],
            vec![vec![2.0]],
        ),
        // A case on a sum built from a condition (dist with a pair payload).
        (
            "def f (x : Real) : Real =\n  \
               let s : Real + (Real, Real) = if x > 0 then inl x else inr (x, x) in\n  \
               case s of\n    \
                 inl a -> a * a\n  | inr p -> fst p * 3 + snd p",
            vec![r(-1.0)],
            vec![-4.0],
            vec![vec![4.0]],
        ),
        // build and map with a closure: [0, x, 2x].
        (
            "def f (x : Real) : Array Real =\n  \
               let g = \\(y : Real) -> y in\n  map g (build 3 (\\(i : Int) -> x * toReal i))",
            vec![r(0.7)],
            vec![0.0, 0.7, 1.4],
            vec![vec![0.0], vec![1.0], vec![2.0]],
        ),
        // Indexing.
        (
            "def f (xs : Array Real) : Real = sin (xs ! 1)",
            vec![rs(&[0.3, 0.5, 0.7])],
            vec![0.5f64.sin()],
            vec![vec![0.0, 0.5f64.cos(), 0.0]],
        ),
        // An array literal: 3x + x².
        (
            "def f (x : Real) : Real = sum [x, 2 * x, x * x]",
            vec![r(1.5)],
            vec![4.5 + 2.25],
            vec![vec![6.0]],
        ),
        // map2: Σ a_i b_i c.
        (
            "def f (xs : Array Real) (ys : Array Real) (c : Real) : Real =\n  \
               sum (map2 (\\(a : Real) (b : Real) -> a * b * c) xs ys)",
            vec![rs(&[1.0, 2.0]), rs(&[3.0, 4.0]), r(2.0)],
            vec![22.0],
            vec![vec![6.0, 8.0, 2.0, 4.0, 11.0]],
        ),
        // A matrix: Σ_i m_ii m_i0.
        (
            "def f (m : Array (Array Real)) : Real =\n  \
               sum (build (length m) (\\(i : Int) -> m ! i ! i * m ! i ! 0))",
            vec![Value::array(
                &Type::array(Type::Real),
                vec![rs(&[1.0, 2.0]), rs(&[3.0, 4.0])],
            )],
            vec![13.0],
            vec![vec![2.0, 0.0, 4.0, 3.0]],
        ),
        // An array of tuples indexed by an input: fst ps_k · snd ps_0.
        (
            "def f (ps : Array (Real, Real)) (k : Int) : Real = fst (ps ! k) * snd (ps ! 0)",
            vec![
                Value::array(
                    &Type::prod(Type::Real, Type::Real),
                    vec![Value::pair(r(1.0), r(2.0)), Value::pair(r(3.0), r(4.0))],
                ),
                Value::Int(1),
            ],
            vec![6.0],
            vec![vec![0.0, 3.0, 2.0, 0.0]],
        ),
        // The diagonal matrix of x, traced twice and multiplied: (Σ x)².
        (
            "def tr (a : Array (Array Real)) : Real = sum (build (length a) (\\(i : Int) -> a ! i ! i))\n\
             def f (x : Array Real) : Real =\n  \
               let n = length x in\n  \
               let a = build n (\\(i : Int) -> build n (\\(j : Int) -> if i == j then x ! i else 0.0)) in\n  \
               tr a * tr a",
            vec![rs(&[1.0, 2.0, 3.0])],
            vec![36.0],
            vec![vec![12.0, 12.0, 12.0]],
        ),
        // Captured functions inside build: Σ_i g(x_i) with g = (* c).
        (
            "def f (c : Real) (xs : Array Real) : Real =\n  \
               let g = \\(y : Real) -> y * c in\n  \
               sum (build (length xs) (\\(i : Int) -> g (xs ! i)))",
            vec![r(2.0), rs(&[1.0, -3.0])],
            vec![-4.0],
            vec![vec![-2.0, 2.0, 2.0]],
        ),
    ];
    for (src, args, value, jac) in cases {
        check_derivatives(&last(src), &args, &value, &jac);
    }
}

#[test]
fn runtime_errors_of_derivative_code_point_at_the_source() {
    // The primal part of derivative code fails where the program does, at the same position.
    let cases = [
        (
            "def f (xs : Array Real) : Real =\n  let y = 2.0 in\n  y * (xs ! 3)",
            vec![rs(&[1.0])],
            "(xs ! 3)",
            "index 3 out of range",
        ),
        (
            "def f (xs : Array Real) (ys : Array Real) : Real =\n  \
               sum (map2 (\\(a : Real) (b : Real) -> a * b) xs ys)",
            vec![rs(&[1.0]), rs(&[1.0, 2.0])],
            "map2 (\\(a : Real) (b : Real) -> a * b) xs ys",
            "different lengths",
        ),
        (
            "def f (x : Real) (n : Int) : Real = sum (build n (\\(i : Int) -> x))",
            vec![r(1.0), Value::Int(-2)],
            "build n (\\(i : Int) -> x)",
            "",
        ),
    ];
    for (src, args, at, word) in cases {
        let e = last(src);
        let want = span_of(src, at);
        let eval_err = chad::internals::eval::eval_entry(&e, &args).unwrap_err();
        let tangents: Vec<Value> = e
            .param_types()
            .iter()
            .zip(&args)
            .map(|(t, a)| zero(t, a))
            .collect();
        let errors = [
            ("grad", ad::grad(&e, &args).unwrap_err()),
            ("jvp", ad::jvp(&e, &args, &tangents).unwrap_err()),
            ("eval", eval_err),
        ];
        for (what, err) in errors {
            assert_eq!(err.kind(), ErrorKind::Runtime, "{what}: {src}: {err:?}");
            assert!(err.message().contains(word), "{what}: {}", err.message());
            let got = err.span().map(|s| &src[s.start as usize..s.end as usize]);
            let paren = Span::new(want.start as usize - 1, want.end as usize + 1);
            assert!(
                err.span() == Some(want) || err.span() == Some(paren),
                "{what}: {src}\npoints at {got:?} instead of `{at}`"
            );
        }
    }
}

#[test]
fn a_primitive_without_derivative_is_a_clear_error() {
    let mut reg = Registry::builtin();
    reg.register(real_fn("myf", |x| x * x)).unwrap();
    // Int -> Real primitives need no derivative (their tangent is zero).
    reg.register(Primitive::function(
        "half",
        vec![Type::Int],
        Type::Real,
        |n| Ok(Value::Real(n.expect_int() as f64 / 2.0)),
    ))
    .unwrap();
    let src = "def f (x : Real) : Real = 2 * myf x";
    let e = entry(&load_with(src, &reg), "f");
    for err in [Vjp::new(&e).err(), Jvp::new(&e).err()] {
        let err = err.unwrap();
        assert_eq!(err.kind(), ErrorKind::Unsupported);
        assert_eq!(err.message(), "primitive `myf` has no derivative");
        assert!(
            err.notes().iter().any(|n| n.contains("with_derivative")),
            "{:?}",
            err.notes()
        );
        let s = err.span().expect("a position");
        assert!(src[s.start as usize..].starts_with("myf"), "{s:?}");
    }
    // Passed as a function value.
    let src = "def f (xs : Array Real) : Real = sum (map myf xs)";
    let e = entry(&load_with(src, &reg), "f");
    let err = ad::grad(&e, &[rs(&[1.0])]).unwrap_err();
    assert_eq!(err.message(), "primitive `myf` has no derivative");
    // check_primitive says so rather than panicking.
    let p = reg.get("myf").unwrap().clone();
    assert!(
        ad::check_primitive(&p, 5, 1)
            .unwrap_err()
            .contains("no derivative")
    );
    // A discrete-argument primitive differentiates (to zero).
    let src = "def f (n : Int) (x : Real) : Real = x * half n";
    let e = entry(&load_with(src, &reg), "f");
    check_derivatives(&e, &[Value::Int(3), r(2.0)], &[3.0], &[vec![1.5]]);
}

#[test]
fn wrong_tangents_and_cotangents_are_argument_errors() {
    let fig1b = example("fig1b");
    let args = [r(1.0), r(2.0), r(3.0), r(4.0)];
    let err = ad::jvp(&fig1b, &args, &[r(1.0), r(0.0), r(0.0)]).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Argument);
    assert!(
        err.message().contains("3 tangents given for 4 arguments"),
        "{err:?}"
    );

    let fig2b = example("fig2b");
    let args = [r(1.0), rs(&[1.0, 2.0, 3.0])];
    // An array tangent of the wrong length.
    let err = ad::jvp(&fig2b, &args, &[r(1.0), rs(&[1.0, 2.0])]).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Argument);
    assert!(err.message().contains("length 3"), "{err:?}");
    assert!(err.message().contains("x2"), "names the parameter: {err:?}");
    // A tangent of the wrong type.
    let err = ad::jvp(&fig2b, &args, &[rs(&[1.0]), rs(&[1.0, 2.0, 3.0])]).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Argument);
    assert!(err.message().contains("not a tangent"), "{err:?}");
    // Wrong arguments are caught before tangents.
    let err = ad::jvp(&fig2b, &[r(1.0)], &[r(1.0)]).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Argument);

    // A sum argument's tangent on the other side. (The entry only passes the sum through:
    // injections and `case` are not differentiated yet, but values of sum types are.)
    let e = last("def f (s : Real + Real) (x : Real) : (Real + Real, Real) = (s, x * 3)");
    let args = [Value::inl(r(2.0)), r(1.0)];
    let err = ad::jvp(&e, &args, &[Value::inr(r(1.0)), r(0.0)]).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Argument);
    assert!(err.message().contains("inl"), "{err:?}");
    // On the right side it passes through, and the result's tangent is on the same side.
    let (_, t) = ad::jvp(&e, &args, &[Value::inl(r(0.5)), r(2.0)]).unwrap();
    assert_eq!(t.to_string(), "(inl 0.5, 6.0)");
    let (_, g) = ad::vjp(&e, &args, &Value::pair(Value::inl(r(1.5)), r(1.0))).unwrap();
    assert_eq!(g[0].to_string(), "inl 1.5");
    assert_eq!(g[1].expect_real(), 3.0);
    let err = ad::vjp(&e, &args, &Value::pair(Value::inr(r(1.5)), r(1.0))).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Argument);

    // A cotangent of the wrong length.
    let fig2a = example("fig2a");
    let err = ad::vjp(&fig2a, &[Value::Int(3), r(1.0)], &rs(&[1.0, 1.0])).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Argument);
    assert!(err.message().contains("cotangent"), "{err:?}");
}

#[test]
fn grad_of_a_non_real_result_suggests_vjp() {
    for name in ["fig1a", "fig2a"] {
        let e = example(name);
        let args = if name == "fig1a" {
            vec![r(1.0)]
        } else {
            vec![Value::Int(2), r(1.0)]
        };
        let err = ad::grad(&e, &args).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Argument);
        assert!(err.message().contains("Real-valued"), "{err:?}");
        assert!(err.message().contains("use vjp"), "{err:?}");
    }
}

#[test]
fn higher_order_inputs_and_results_are_unsupported() {
    let e = last("def f (g : Real -> Real) (x : Real) : Real = g x");
    for err in [Jvp::new(&e).err(), Vjp::new(&e).err()] {
        let err = err.unwrap();
        assert_eq!(err.kind(), ErrorKind::Unsupported);
        assert!(err.message().contains("parameter `g`"), "{err:?}");
    }
    let e = last("def f (x : Real) : Real -> Real = \\(y : Real) -> x * y");
    for err in [Jvp::new(&e).err(), Vjp::new(&e).err()] {
        let err = err.unwrap();
        assert_eq!(err.kind(), ErrorKind::Unsupported);
        assert!(err.message().contains("first-order result"), "{err:?}");
    }
    // A function nested in a tuple counts too.
    let e = last("def f (p : (Real, Real -> Real)) : Real = snd p (fst p)");
    assert_eq!(Vjp::new(&e).err().unwrap().kind(), ErrorKind::Unsupported);
}

// ----- user primitives with native and term derivatives (examples/logsumexp.rs) -----

#[test]
fn logsumexp_example_primitives_pass_the_checker() {
    let reg = logsumexp_example::registry();
    for name in ["logsumexp", "logcosh"] {
        let p = reg.get(name).unwrap();
        let ok = ad::check_primitive(p, 30, 11).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(ok.points, 30, "{name}");
    }
}

#[test]
fn logsumexp_example_gradient_matches_closed_form_and_finite_differences() {
    use logsumexp_example::{PROGRAM, finite_differences, logcosh, logsumexp, registry, softmax};
    let reg = registry();
    let p = load_with(PROGRAM, &reg);
    let e = p.entry(p.defs.len() - 1);
    let (a, xs) = (0.8, vec![0.5, -1.5, 2.0, 0.25]);
    let args = [r(a), rs(&xs)];

    // model a xs = logsumexp (map (\x -> logcosh (a x)) xs) + logcosh a. With u_i =
    // logcosh (a x_i) and s = softmax u: ∂/∂a = Σ_i s_i tanh(a x_i) x_i + tanh(a),
    // ∂/∂x_i = s_i tanh(a x_i) a.
    let th = f64::tanh;
    let u: Vec<f64> = xs.iter().map(|x| logcosh(a * x)).collect();
    let s = softmax(&u);
    let value = logsumexp(&u) + logcosh(a);
    let mut grad = vec![
        xs.iter()
            .zip(&s)
            .map(|(x, si)| si * th(a * x) * x)
            .sum::<f64>()
            + th(a),
    ];
    grad.extend(xs.iter().zip(&s).map(|(x, si)| si * th(a * x) * a));
    check_derivatives(&e, &args, &[value], std::slice::from_ref(&grad));

    // And against central differences, as the example prints them.
    let (_, g) = ad::grad(&e, &args).unwrap();
    let ad_flat: Vec<f64> = g.iter().flat_map(reals).collect();
    let fd = finite_differences(&e, &args);
    assert_eq!(fd.len(), ad_flat.len());
    for (x, y) in ad_flat.iter().zip(&fd) {
        assert!(
            (x - y).abs() <= 1e-6 * (1.0 + x.abs()),
            "{ad_flat:?} vs {fd:?}"
        );
    }
}

#[test]
fn logsumexp_is_stable_for_large_inputs() {
    use logsumexp_example::{logsumexp, registry};
    let reg = registry();
    let p = load_with("def f (xs : Array Real) : Real = logsumexp xs", &reg);
    let e = p.entry(0);
    // exp 1000 overflows; logsumexp [1000, 1000] = 1000 + log 2, gradient [1/2, 1/2].
    let (v, g) = ad::grad(&e, &[rs(&[1000.0, 1000.0])]).unwrap();
    assert!(close(v.expect_real(), 1000.0 + 2f64.ln()));
    assert_eq!(g[0].expect_reals(), &[0.5, 0.5]);
    assert_eq!(logsumexp(&[]), f64::NEG_INFINITY);
    // Forward mode through the native kernel: tangent Σ softmax_i d_i.
    let (_, t) = ad::jvp(
        &e,
        &[rs(&[0.0, 0.0, 0.0, 0.0])],
        &[rs(&[1.0, 2.0, 3.0, 6.0])],
    )
    .unwrap();
    assert!(close(t.expect_real(), 3.0));
}

/// Random loop programs (counted, folds over captured arrays, real-valued conditions, function
/// states) and `loop` of a step that is a function value (`it(eval)`): both transforms
/// type-check at the predicted types.
#[test]
fn loop_programs_type_check_at_the_predicted_type() {
    use chad::internals::random::{self, Config};
    use proptest::strategy::{Strategy, ValueTree};
    let cfg = Config {
        loops: true,
        higher_order_result: true,
        ..Config::default()
    };
    let strategy = random::program(cfg);
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let n = std::env::var("CHAD_PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100);
    for _ in 0..n {
        let p = strategy.new_tree(&mut runner).unwrap().current();
        assert_typed(&format!("{p:?}"), &ccc::compile_entry(&p.entry));
    }
    let e = last(
        "def f (x : Real) : Real =
           let g = \\(s : (Int, Real)) -> let (k, y) = s in
             if k >= 3 then (inr y : (Int, Real) + Real) else inl (k + 1, y * x) in
           loop g (0, 1.0)",
    );
    assert_typed("loop of a function value", &ccc::compile_entry(&e));
    let (y, g) = ad::grad(&e, &[r(2.0)]).unwrap();
    assert_eq!((y.expect_real(), g[0].expect_real()), (8.0, 12.0));
}
