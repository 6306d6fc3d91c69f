//! `scan` end to end: values by hand (the empty array, tuple states, a function in the
//! state), forward and reverse CHAD against dual numbers and central finite differences, a
//! Hessian through a `scan` (second-order code: the taped loop concretised) against finite
//! differences of gradients, the derivative code's size linear in nothing but the program,
//! and the native backend against the engine. Random taped loops (what `scan` becomes) are in
//! the logical-relation, oracle, IR and simplifier tests.

mod common;

use chad::Value;
use chad::internals::oracle::fd;
use common::{args, entry};

fn reals(v: &Value) -> Vec<f64> {
    fd::leaves(v)
}

fn close(a: &[f64], b: &[f64], tol: f64) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| (x - y).abs() <= tol * (1.0 + x.abs().max(y.abs())))
}

/// `scan f z xs` with a step that uses the accumulator twice and a captured parameter.
const RECURRENCE: &str = "def f (c : Real) (z : Real) (xs : Array Real) : Array Real =\n  \
    scan (\\(acc : Real) (x : Real) -> acc * x + sin (c * acc)) z xs\n";

#[test]
fn values_by_hand() {
    let e = entry("def f (xs : Array Real) : Array Real = scan (\\a x -> a + x) 1.0 xs\n");
    let v = chad::internals::eval::eval_entry(&e, &args(&e, &["[2.0, 3.0, 4.0]"])).unwrap();
    assert_eq!(reals(&v), [1.0, 3.0, 6.0, 10.0]);
    let v = chad::internals::eval::eval_entry(&e, &args(&e, &["[]"])).unwrap();
    assert_eq!(reals(&v), [1.0], "the empty array: just z");
    let e = entry(
        "def f (xs : Array Real) : Array (Real, Real) =\n  \
         scan (\\(s : (Real, Real)) (x : Real) -> (snd s, fst s * x)) (1.0, 2.0) xs\n",
    );
    let v = chad::internals::eval::eval_entry(&e, &args(&e, &["[3.0, 5.0]"])).unwrap();
    assert_eq!(format!("{v}"), "[(1.0, 2.0), (2.0, 3.0), (3.0, 10.0)]");
    // A function in the state: the composition of the prefixes, applied afterwards.
    let e = entry(
        "def f (x : Real) (ks : Array Real) : Real =\n  \
         let fs = scan (\\(g : Real -> Real) (k : Real) -> \\(y : Real) -> k * g y)\n    \
         (\\(y : Real) -> y) ks in\n  \
         sum (map (\\(g : Real -> Real) -> g x) fs)\n",
    );
    let v = chad::internals::eval::eval_entry(&e, &args(&e, &["2.0", "[3.0, 5.0]"])).unwrap();
    assert_eq!(v.expect_real(), 2.0 + 6.0 + 30.0);
}

/// Forward CHAD (`jvp`), reverse CHAD (`vjp` with a random cotangent, through the dot
/// product with the tangent) and dual numbers agree with central finite differences.
#[test]
fn derivatives_agree_with_dual_numbers_and_finite_differences() {
    let e = entry(RECURRENCE);
    let a = args(&e, &["0.8", "0.7", "[0.3, -1.2, 0.9, 2.0, -0.4]"]);
    let t = args(&e, &["-0.6", "0.5", "[1.0, -0.3, 0.2, 0.7, -1.1]"]);
    let (v, jt) = chad::internals::ad::jvp(&e, &a, &t).unwrap();
    let (dv, dt) = chad::internals::oracle::dual::jvp(&e, &a, &t).unwrap();
    let fdt = fd::jvp(&e, &a, &t, 1e-6).unwrap();
    assert_eq!(reals(&v), reals(&dv));
    assert_eq!(reals(&jt).len(), 6, "length xs + 1 tangents");
    assert!(close(&reals(&jt), &reals(&dt), 1e-12), "{jt} vs {dt}");
    assert!(close(&reals(&jt), &reals(&fdt), 1e-6), "{jt} vs {fdt}");
    // ⟨w, J t⟩ = ⟨Jᵀ w, t⟩ for a cotangent w.
    let cot =
        chad::internals::source::parse_value("[0.5, -1.0, 2.0, 0.25, -0.75, 1.5]", &e.body.ty)
            .unwrap();
    let (_, grads) = chad::internals::ad::vjp(&e, &a, &cot).unwrap();
    let lhs: f64 = reals(&cot).iter().zip(reals(&jt)).map(|(x, y)| x * y).sum();
    let rhs: f64 = grads
        .iter()
        .zip(&t)
        .map(|(g, t)| {
            reals(g)
                .iter()
                .zip(reals(t))
                .map(|(x, y)| x * y)
                .sum::<f64>()
        })
        .sum();
    assert!(
        (lhs - rhs).abs() < 1e-12 * (1.0 + lhs.abs()),
        "{lhs} vs {rhs}"
    );
}

/// The Hessian of a loss through a `scan` (forward over reverse: the reverse derivative's
/// taped loop concretised into the source's `loopTape`, then differentiated again) is
/// symmetric and agrees with central differences of the gradient.
#[test]
fn hessians_through_scan_agree_with_differences_of_gradients() {
    let e = entry(
        "def g (c : Real) (xs : Array Real) : Real =\n  \
         let s = scan (\\(acc : Real) (x : Real) -> acc * x + sin (c * acc)) 0.5 xs in\n  \
         sum (map (\\(y : Real) -> y * y) s)\n",
    );
    let a = args(&e, &["0.8", "[0.3, -1.2, 0.9]"]);
    let (_, _, h) = chad::internals::ad::nested::hessian(&e, &[true, true], &a).unwrap();
    assert_eq!(h.len(), 4);
    let grad_at = |c: f64, xs: &[f64]| {
        let xs = Value::array_of(xs.iter().map(|x| Value::Real(*x)).collect());
        let (_, g) = chad::internals::ad::grad(&e, &[Value::Real(c), xs]).unwrap();
        g.iter().flat_map(reals).collect::<Vec<f64>>()
    };
    let (c, xs) = (0.8, [0.3, -1.2, 0.9]);
    let step = 1e-5;
    for j in 0..4 {
        let shift = |s: f64| {
            let mut c2 = c;
            let mut xs2 = xs;
            if j == 0 {
                c2 += s;
            } else {
                xs2[j - 1] += s;
            }
            grad_at(c2, &xs2)
        };
        let (p, m) = (shift(step), shift(-step));
        for i in 0..4 {
            let fdij = (p[i] - m[i]) / (2.0 * step);
            assert!(
                (h[j][i] - fdij).abs() < 1e-5 * (1.0 + fdij.abs()),
                "H[{j}][{i}] = {} vs {fdij}",
                h[j][i]
            );
            assert!((h[j][i] - h[i][j]).abs() < 1e-8 * (1.0 + h[i][j].abs()));
        }
    }
}

/// A `scan` is one taped loop: its forward and reverse derivative code does not grow with
/// the number of elements (there is no unrolling), and differentiates 10⁵ elements.
#[test]
fn long_scans_differentiate_in_both_modes() {
    let e = entry(
        "def f (c : Real) (xs : Array Real) : Real =\n  \
         sum (scan (\\(acc : Real) (x : Real) -> 0.5 * acc + c * x) 0.0 xs)\n",
    );
    let n = 100_000;
    let xs = Value::array_of((0..n).map(|i| Value::Real((i % 7) as f64)).collect());
    let a = [Value::Real(0.5), xs];
    let (_, g) = chad::internals::ad::grad(&e, &a).unwrap();
    // d/dc Σ_k acc_k with acc_k = Σ_{i<k} 0.5^{k-1-i} c x_i: Σ_i x_i Σ_{m<n-i} 0.5^m.
    let xs: Vec<f64> = (0..n).map(|i| (i % 7) as f64).collect();
    let dc: f64 = (0..n)
        .map(|i| xs[i] * (2.0 - 2.0 * 0.5f64.powi((n - i) as i32)))
        .sum();
    let got = g[0].expect_real();
    assert!((got - dc).abs() < 1e-9 * dc.abs(), "{got} vs {dc}");
    let dx = reals(&g[1]);
    assert!((dx[0] - 0.5 * (2.0 - 2.0 * 0.5f64.powi(n as i32))).abs() < 1e-12);
    assert!(
        (dx[n - 1] - 0.5).abs() < 1e-12,
        "the last element enters one state"
    );
}

/// The native backend runs `scan` and both its derivatives like the engine.
#[test]
fn the_native_backend_agrees_with_the_engine() {
    let dir = std::env::temp_dir().join(format!("chad-scan-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("scan.chad");
    std::fs::write(
        &path,
        "def f (c : Real) (xs : Array Real) : Real =\n  \
         sum (scan (\\(acc : Real) (x : Real) -> acc * x + sin (c * acc)) 0.5 xs)\n",
    )
    .unwrap();
    let p = path.to_str().unwrap();
    let run = |backend: &str| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_chad"))
            .args([
                "grad",
                p,
                "--arg",
                "0.8",
                "--arg",
                "[0.3, -1.2, 0.9]",
                "--backend",
                backend,
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let numbers = |s: String| -> Vec<f64> {
        s.split(|c: char| !(c.is_ascii_digit() || "-.e".contains(c)))
            .filter_map(|w| w.parse().ok())
            .collect()
    };
    let (native, engine) = (numbers(run("native")), numbers(run("engine")));
    assert_eq!(native.len(), 5, "{native:?}");
    assert!(close(&native, &engine, 1e-12), "{native:?} vs {engine:?}");
}

/// The last definition of a program with derivatives inside, as an entry.
fn nested_entry(src: &str) -> chad::internals::source::term::Entry {
    let prog = chad::internals::ad::nested::load(src, &chad::internals::prim::Registry::builtin())
        .unwrap_or_else(|e| panic!("{src}: {e}"));
    prog.entry(prog.defs.len() - 1)
}

/// `jvp` and `vjp` of a `scan` inside a program (its derivative code concretised, run by the
/// source evaluator) agree with the tool's own derivatives of the same function.
#[test]
fn derivatives_of_scan_inside_programs() {
    let f = entry(RECURRENCE);
    let a = args(&f, &["0.8", "0.7", "[0.3, -1.2, 0.9, 2.0]"]);
    let t = args(&f, &["1.0", "0.0", "[0.0, 0.0, 0.0, 0.0]"]);
    let (_, jt) = chad::internals::ad::jvp(&f, &a, &t).unwrap();
    let e = nested_entry(&format!(
        "{RECURRENCE}\ndef h (c : Real) (xs : Array Real) : Array Real =\n  \
         snd (jvp (\\(c2 : Real) -> f c2 0.7 xs) c 1.0)\n"
    ));
    let v = chad::internals::eval::eval_entry(&e, &args(&e, &["0.8", "[0.3, -1.2, 0.9, 2.0]"]))
        .unwrap();
    assert!(close(&reals(&v), &reals(&jt), 1e-12), "{v} vs {jt}");
    let ct = "[0.5, -1.0, 2.0, 0.25, -0.75]";
    let (_, g) = chad::internals::ad::vjp(
        &f,
        &a,
        &chad::internals::source::parse_value(ct, &f.body.ty).unwrap(),
    )
    .unwrap();
    let e = nested_entry(&format!(
        "{RECURRENCE}\ndef h (c : Real) (xs : Array Real) : Array Real =\n  \
         snd (vjp (\\(ys : Array Real) -> f c 0.7 ys) xs {ct})\n"
    ));
    let v = chad::internals::eval::eval_entry(&e, &args(&e, &["0.8", "[0.3, -1.2, 0.9, 2.0]"]))
        .unwrap();
    assert!(close(&reals(&v), &reals(&g[2]), 1e-12), "{v} vs {}", g[2]);
}

/// `--max-steps` counts a `scan`'s steps (one per element) and stops it with a runtime error
/// at its position, in both the primal and the derivative.
#[test]
fn max_steps_stops_a_scan_at_its_position() {
    let dir = std::env::temp_dir().join(format!("chad-scan-steps-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("scan.chad");
    std::fs::write(
        &path,
        "def f (c : Real) (xs : Array Real) : Real =\n  \
         sum (scan (\\a x -> a * c + x * x) 1.0 xs)\n",
    )
    .unwrap();
    let p = path.to_str().unwrap();
    for (cmd, steps, ok) in [
        ("eval", "3", true),
        ("eval", "2", false),
        ("grad", "2", false),
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_chad"))
            .args([
                cmd,
                p,
                "--arg",
                "0.5",
                "--arg",
                "[1, 2, 3]",
                "--max-steps",
                steps,
            ])
            .output()
            .unwrap();
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(out.status.success(), ok, "{cmd} --max-steps {steps}: {err}");
        if !ok {
            assert!(err.contains("more than 2 loop steps"), "{err}");
            assert!(err.contains("scan.chad:2:7"), "{err}");
        }
    }
}
