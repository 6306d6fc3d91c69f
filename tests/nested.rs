//! Derivatives of derivatives (`chad::internals::ad::nested`, `chad::internals::target::concretize`):
//!
//! * concretisation: on random programs (higher-order inside, sums, arrays, loops), the
//!   concretised reverse and forward derivatives ([`nested::vjp_entry`], [`nested::jvp_entry`]),
//!   run by the *source* evaluator, give what the target engine gives for the derivative code
//!   they come from;
//! * Hessian-vector products (forward over reverse) agree with central finite differences of
//!   the gradient, and Hessians are symmetric, on random `Real`-valued programs;
//! * the Jacobian by forward mode equals the one by reverse mode, and finite differences;
//! * fixed examples with known Hessians (Rosenbrock, a product, `--wrt`).

mod common;

use chad::Value;
use chad::internals::ad::nested::{self, Hvp, Mode};
use chad::internals::ad::{Jvp, Vjp};
use chad::internals::oracle::fd;
use chad::internals::random::{self, Config};
use chad::internals::simplify::simplify;
use chad::internals::types::Type;
use proptest::strategy::{Strategy, ValueTree};

fn leaves(vs: &[Value]) -> Vec<f64> {
    vs.iter().flat_map(fd::leaves).collect()
}

fn finite(xs: &[f64]) -> bool {
    xs.iter().all(|x| x.is_finite())
}

/// The positions to compare of the engine's derivative `a` and the concretised one's `b`
/// (equally long, or both returned whole). The engine's zero (co)tangents are structural:
/// `0 * ∞` (an infinite partial derivative, as of `x2 / (x1 - x1)` or `pow 0.0 (-2.875)`,
/// met with a zero (co)tangent) is `0` there, but `NaN` in the concretised program's numbers,
/// as in dual numbers. So positions where the concretised value is not finite are left out;
/// every finite value is compared.
fn comparable(a: &[f64], b: &[f64]) -> (Vec<f64>, Vec<f64>) {
    if a.len() != b.len() {
        return (a.to_vec(), b.to_vec());
    }
    a.iter()
        .zip(b)
        .filter(|(_, y)| y.is_finite())
        .map(|(x, y)| (*x, *y))
        .unzip()
}

fn close(a: &[f64], b: &[f64], tol: f64) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| (x - y).abs() <= tol * (1.0 + x.abs().max(y.abs())))
}

fn config(loops: bool) -> Config {
    Config {
        loops,
        ..Config::default()
    }
}

/// The concretised reverse derivative, run by the source evaluator, agrees with reverse CHAD
/// run by the engine (on random cotangents), and the concretised forward derivative with
/// forward CHAD (on random tangents).
fn concretisation_agrees(loops: bool, cases: u32) {
    let strategy = random::program(config(loops));
    let mut r = common::runner(cases);
    let mut rng = proptest::test_runner::TestRunner::deterministic();
    let (mut compared, mut higher_order) = (0, 0);
    for _ in 0..common::cases(cases) {
        let p = common::supported_program(&strategy, &mut r);
        let e = &p.entry;
        let Ok(y) = chad::internals::eval::eval_entry(e, &p.inputs) else {
            continue;
        };
        let mut real = || (-2.0f64..2.0).new_tree(&mut rng).unwrap().current();
        let ct = fd::tangent_with(&e.body.ty, &y, &mut real);
        let ts: Vec<Value> = e
            .params
            .iter()
            .zip(&p.inputs)
            .map(|(q, a)| fd::tangent_with(&q.ty, a, &mut real))
            .collect();
        // Reverse.
        let (y1, g1) = Vjp::new(e)
            .unwrap()
            .map_body(simplify)
            .vjp(&p.inputs, &ct)
            .unwrap();
        let ve = nested::vjp_entry(e).unwrap_or_else(|err| panic!("{err}\n{p:?}"));
        let mut args = p.inputs.clone();
        args.push(ct.clone());
        let out = chad::internals::eval::eval_entry(&ve, &args)
            .unwrap_or_else(|err| panic!("{err}\n{p:?}"));
        let (y2, g2) = out.expect_pair();
        let g2 = if e.params.len() == 1 {
            vec![g2.clone()]
        } else {
            let mut v = Vec::new();
            let mut cur = g2.clone();
            for _ in 1..e.params.len() {
                let (a, b) = cur.expect_pair();
                let (a, b) = (a.clone(), b.clone());
                v.push(a);
                cur = b;
            }
            v.push(cur);
            v
        };
        let (l1, l2) = comparable(&leaves(&g1), &leaves(&g2));
        if !finite(&l1) || !finite(&fd::leaves(&y1)) {
            continue;
        }
        assert_eq!(y1.same(y2), Some(true), "value\n{p:?}");
        assert!(
            close(&l1, &l2, 1e-9),
            "reverse: engine {l1:?} vs concretised {l2:?}\n{p:?}"
        );
        // Forward.
        let (_, d1) = Jvp::new(e)
            .unwrap()
            .map_body(simplify)
            .jvp(&p.inputs, &ts)
            .unwrap();
        let je = nested::jvp_entry(e).unwrap_or_else(|err| panic!("{err}\n{p:?}"));
        let mut args = p.inputs.clone();
        args.extend(ts.iter().cloned());
        let out = chad::internals::eval::eval_entry(&je, &args)
            .unwrap_or_else(|err| panic!("{err}\n{p:?}"));
        let (f1, f2) = comparable(&fd::leaves(&d1), &fd::leaves(out.expect_pair().1));
        if finite(&f1) {
            assert!(
                close(&f1, &f2, 1e-9),
                "forward: engine {f1:?} vs concretised {f2:?}\n{p:?}"
            );
        }
        compared += 1;
        if p.source().contains("\\") {
            higher_order += 1;
        }
    }
    let n = common::cases(cases);
    assert!(
        compared * 2 >= n,
        "only {compared} of {n} programs compared"
    );
    assert!(
        higher_order * 5 >= compared,
        "only {higher_order} with lambdas"
    );
}

#[test]
fn concretised_derivatives_agree_with_the_engine() {
    concretisation_agrees(false, 150);
}

#[test]
fn concretised_derivatives_of_loops_agree_with_the_engine() {
    concretisation_agrees(true, 80);
}

/// Central differences of the gradient along `t`: `(∇f(x + h t) - ∇f(x - h t)) / 2h`.
fn fd_of_gradient(
    e: &chad::internals::source::term::Entry,
    args: &[Value],
    t: &[Value],
) -> Option<Vec<f64>> {
    let h = 1e-5;
    let shifted = |s: f64| -> Vec<Value> {
        e.params
            .iter()
            .zip(args)
            .zip(t)
            .map(|((p, a), d)| fd::add_scaled(&p.ty, a, d, s))
            .collect()
    };
    let vjp = Vjp::new(e).ok()?.map_body(simplify);
    let (_, gp) = vjp.grad(&shifted(h)).ok()?;
    let (_, gm) = vjp.grad(&shifted(-h)).ok()?;
    let (gp, gm) = (leaves(&gp), leaves(&gm));
    Some(
        gp.iter()
            .zip(&gm)
            .map(|(a, b)| (a - b) / (2.0 * h))
            .collect(),
    )
}

#[test]
fn hessians_agree_with_finite_differences_of_gradients_and_are_symmetric() {
    let cfg = Config {
        result: Some(Type::Real),
        ..config(false)
    };
    let strategy = random::program(cfg);
    let mut r = common::runner(120);
    let mut rng = proptest::test_runner::TestRunner::deterministic();
    let (mut compared, mut higher_order) = (0, 0);
    for _ in 0..common::cases(120) {
        let p = common::supported_program(&strategy, &mut r);
        let e = &p.entry;
        let Ok(y) = chad::internals::eval::eval_entry(e, &p.inputs) else {
            continue;
        };
        if !y.expect_real().is_finite() {
            continue;
        }
        let all = vec![true; e.params.len()];
        let Ok((v, g, h)) = nested::hessian(e, &all, &p.inputs) else {
            panic!("hessian failed\n{p:?}");
        };
        assert_eq!(v.to_bits(), y.expect_real().to_bits(), "{p:?}");
        if !finite(&g) || !h.iter().all(|row| finite(row)) {
            continue;
        }
        // Symmetric (exactly in exact arithmetic; to rounding here).
        for (i, row) in h.iter().enumerate() {
            for (j, &a) in row.iter().enumerate().take(i) {
                let b = h[j][i];
                assert!(
                    (a - b).abs() <= 1e-8 * (1.0 + a.abs().max(b.abs())),
                    "H[{i}][{j}] = {a} but H[{j}][{i}] = {b}\n{p:?}"
                );
            }
        }
        // Against central differences of the gradient along a random direction (the
        // Hessian-vector product); skipped where the gradient is not smooth there.
        let mut real = || (-1.0f64..1.0).new_tree(&mut rng).unwrap().current();
        let t: Vec<Value> = e
            .params
            .iter()
            .zip(&p.inputs)
            .map(|(q, a)| fd::tangent_with(&q.ty, a, &mut real))
            .collect();
        let tl = leaves(&t);
        let hv: Vec<f64> = h
            .iter()
            .map(|row| row.iter().zip(&tl).map(|(a, b)| a * b).sum())
            .collect();
        let direct = Hvp::new(e, &all).unwrap().hvp(&p.inputs, &t).unwrap();
        let direct: Vec<f64> = direct.hvp.iter().flatten().flat_map(fd::leaves).collect();
        assert!(
            close(&hv, &direct, 1e-9),
            "H t {hv:?} vs hvp {direct:?}\n{p:?}"
        );
        let Some(numeric) = fd_of_gradient(e, &p.inputs, &t) else {
            continue;
        };
        if !finite(&numeric) {
            continue;
        }
        // Central differences are accurate to O(h²) only where the gradient is smooth; a
        // kink (`if`, `max`, `abs`) within h shows as a large disagreement, so compare with a
        // loose tolerance and only count the smooth cases.
        if close(&hv, &numeric, 1e-4) {
            compared += 1;
            if p.source().contains("\\") {
                higher_order += 1;
            }
        } else {
            // A kink: the finite difference must then disagree in the same way with a second,
            // smaller step; otherwise the Hessian is wrong.
            let h2 = fd_of_gradient_step(e, &p.inputs, &t, 1e-7);
            let smooth = h2.is_some_and(|n2| close(&numeric, &n2, 1e-3));
            assert!(
                !smooth,
                "hvp {hv:?} vs finite differences {numeric:?} (smooth there)\n{p:?}"
            );
        }
    }
    let n = common::cases(120);
    assert!(compared * 3 >= n, "only {compared} of {n} compared");
    assert!(
        higher_order * 5 >= compared,
        "only {higher_order} with lambdas"
    );
}

fn fd_of_gradient_step(
    e: &chad::internals::source::term::Entry,
    args: &[Value],
    t: &[Value],
    h: f64,
) -> Option<Vec<f64>> {
    let shifted = |s: f64| -> Vec<Value> {
        e.params
            .iter()
            .zip(args)
            .zip(t)
            .map(|((p, a), d)| fd::add_scaled(&p.ty, a, d, s))
            .collect()
    };
    let vjp = Vjp::new(e).ok()?.map_body(simplify);
    let (_, gp) = vjp.grad(&shifted(h)).ok()?;
    let (_, gm) = vjp.grad(&shifted(-h)).ok()?;
    let (gp, gm) = (leaves(&gp), leaves(&gm));
    Some(
        gp.iter()
            .zip(&gm)
            .map(|(a, b)| (a - b) / (2.0 * h))
            .collect(),
    )
}

#[test]
fn jacobian_forward_equals_reverse_and_finite_differences() {
    let strategy = random::program(config(false));
    let mut r = common::runner(120);
    let mut compared = 0;
    for _ in 0..common::cases(120) {
        let p = common::supported_program(&strategy, &mut r);
        let e = &p.entry;
        if chad::internals::eval::eval_entry(e, &p.inputs).is_err() {
            continue;
        }
        let all = vec![true; e.params.len()];
        let (y1, jf) = nested::jacobian(e, &all, &p.inputs, Some(Mode::Forward)).unwrap();
        let (y2, jr) = nested::jacobian(e, &all, &p.inputs, Some(Mode::Reverse)).unwrap();
        assert_eq!(y1.same(&y2), Some(true));
        if !jf.iter().chain(&jr).all(|row| finite(row)) {
            continue;
        }
        assert_eq!(jf.len(), jr.len(), "{p:?}");
        for (a, b) in jf.iter().zip(&jr) {
            assert!(close(a, b, 1e-9), "forward {jf:?} vs reverse {jr:?}\n{p:?}");
        }
        compared += 1;
    }
    let n = common::cases(120);
    assert!(compared * 2 >= n, "only {compared} of {n} compared");
}

fn load(src: &str) -> chad::internals::source::term::Entry {
    let program =
        chad::internals::source::load(src, &chad::internals::prim::Registry::builtin()).unwrap();
    program.entry(program.defs.len() - 1)
}

const ROSENBROCK: &str = "def rosenbrock (x : Array Real) : Real =
  let n = length x in
  sum (build (n - 1) (\\i -> 100.0 * (x ! (i + 1) - x ! i * x ! i) * (x ! (i + 1) - x ! i * x ! i)
                            + (1.0 - x ! i) * (1.0 - x ! i)))";

/// Rosenbrock's Hessian, by hand: H[i][i] = 1200 x_i² - 400 x_{i+1} + 2 (for i < n-1) + 200
/// (for i > 0); H[i][i+1] = H[i+1][i] = -400 x_i.
#[test]
fn rosenbrock_hessian_is_the_analytic_one() {
    let e = load(ROSENBROCK);
    let xs = vec![0.5, -1.25, 2.0, 0.75];
    let n = xs.len();
    let (_, _, h) = nested::hessian(&e, &[true], &[Value::reals(xs.clone())]).unwrap();
    for i in 0..n {
        for j in 0..n {
            let mut want = 0.0;
            if i == j {
                if i + 1 < n {
                    want += 1200.0 * xs[i] * xs[i] - 400.0 * xs[i + 1] + 2.0;
                }
                if i > 0 {
                    want += 200.0;
                }
            } else if j == i + 1 {
                want = -400.0 * xs[i];
            } else if i == j + 1 {
                want = -400.0 * xs[j];
            }
            assert!(
                (h[i][j] - want).abs() < 1e-9 * (1.0 + want.abs()),
                "H[{i}][{j}] = {} but should be {want}",
                h[i][j]
            );
        }
    }
}

#[test]
fn hvp_with_respect_to_some_parameters() {
    // f(x, y) = x² y³: ∂²f/∂x² = 2 y³, with y a constant.
    let e = load("def f (x : Real) (y : Real) : Real = x * x * y * y * y");
    let h = Hvp::new(&e, &[true, false]).unwrap();
    let r = h
        .hvp(&[Value::Real(3.0), Value::Real(2.0)], &[Value::Real(1.0)])
        .unwrap();
    assert_eq!(r.value.expect_real(), 72.0);
    assert_eq!(r.gradient[0].as_ref().unwrap().expect_real(), 48.0);
    assert!(r.gradient[1].is_none() && r.hvp[1].is_none());
    assert_eq!(r.hvp[0].as_ref().unwrap().expect_real(), 16.0);
    // Both: H = [[2y³, 6xy²], [6xy², 6x²y]] at (3, 2) = [[16, 72], [72, 108]].
    let (_, g, h) =
        nested::hessian(&e, &[true, true], &[Value::Real(3.0), Value::Real(2.0)]).unwrap();
    assert_eq!(g, vec![48.0, 108.0]);
    assert_eq!(h, vec![vec![16.0, 72.0], vec![72.0, 108.0]]);
}

// ----- derivatives inside programs -----

fn run(src: &str, args: &[Value]) -> Value {
    let program = nested::load(src, &chad::internals::prim::Registry::builtin())
        .unwrap_or_else(|e| panic!("{}", e.render(None)));
    let entry = program.entry(program.defs.len() - 1);
    chad::internals::eval::eval_entry(&entry, args).unwrap()
}

fn real(src: &str) -> f64 {
    run(src, &[]).expect_real()
}

#[test]
fn no_perturbation_confusion() {
    // The example and Siskind & Pearlmutter's: d/dx (x · d/dy (x + y)) = 1.
    assert_eq!(
        real("def main : Real = grad (\\x -> x * grad (\\y -> x + y) 1.0) 2.0"),
        1.0
    );
    assert_eq!(
        real("def main : Real = grad (\\x -> grad (\\y -> x * y) 1.0) 2.0"),
        1.0
    );
    // d/dx (x · d/dy (x · y)) = d/dx x² = 2x.
    assert_eq!(
        real("def main : Real = grad (\\x -> x * grad (\\y -> x * y) 2.0) 1.0"),
        2.0
    );
    // The same with forward mode inside reverse and reverse inside forward.
    assert_eq!(
        real("def main : Real = grad (\\x -> x * snd (jvp (\\y -> x + y) 1.0 1.0)) 2.0"),
        1.0
    );
    assert_eq!(
        real("def main : Real = snd (jvp (\\x -> x * snd (vjp (\\y -> x * y) 2.0 1.0)) 1.0 1.0)"),
        2.0
    );
}

#[test]
fn higher_derivatives_by_nesting() {
    // (x³)'' = 6x.
    assert_eq!(
        real("def main : Real = grad (\\x -> grad (\\y -> y * y * y) x) 2.0"),
        12.0
    );
    // (x^4)'' = 12x^2 (a third level works too, but its code grows geometrically with the
    // depth: theory-notes/12-nested-ad.md).
    assert_eq!(
        real("def main : Real = grad (\\y -> grad (\\z -> z * z * z * z) y) 1.0"),
        12.0
    );
    // A top-level definition as the function, and arrays.
    let v = run(
        "def cube (x : Real) : Real = x * x * x\n\
         def sq (v : Array Real) : Real = sum (map (\\a -> a * cube a) v)\n\
         def main (v : Array Real) : Array Real = grad sq v",
        &[Value::reals(vec![1.0, 2.0, -1.0])],
    );
    assert_eq!(v.expect_reals(), &[4.0, 32.0, -4.0]);
    let v = run(
        "def main : ((Real, Real), (Real, Real)) = jvp (\\(x : Real) -> (x * x, sin x)) 0.0 1.0",
        &[],
    );
    assert_eq!(fd::leaves(&v), vec![0.0, 0.0, 0.0, 1.0]);
    let v = run(
        "def main : ((Real, Real), Real) = vjp (\\(x : Real) -> (x * x, 3.0 * x)) 2.0 (1.0, 1.0)",
        &[],
    );
    assert_eq!(format!("{v}"), "((4.0, 6.0), 7.0)");
}

#[test]
fn nested_forms_are_checked() {
    let err = |src: &str| {
        nested::load(src, &chad::internals::prim::Registry::builtin())
            .err()
            .unwrap_or_else(|| panic!("`{src}` should not check"))
            .message()
            .to_string()
    };
    assert!(err("def main : Real = grad (\\(x : Real) -> (x, x)) 1.0").contains("Real"));
    assert!(err("def main : Int = grad (\\(i : Int) -> 1.0) 1").contains("`Int`"));
    // A function known only at run time (a lambda's parameter) is differentiated through the
    // derivatives its value carries (`check::carry`, tests below), and so is a function value
    // that applies one (`\y -> h y * y`) or differentiates one of another type, but not one
    // that differentiates one of its own type: values of that type would have to carry one
    // more order of derivatives than themselves.
    assert!(
        err(
            "def k (x : Real) : Real = let d = \\(f : Real -> Real) -> grad f x in \
             let c = \\(h : Real -> Real) -> d (\\(y : Real) -> grad h y * y) in c sin"
        )
        .contains("derivatives of ever higher order")
    );
    // A run-time function passed on as a value by a function value is not an input CHAD can
    // take.
    assert!(
        err("def k (x : Real) : Real = \
             let fs = [\\(y : Real) -> x * y] in \
             let hs = map (\\(g : Real -> Real) -> \\(y : Real) -> ([g, g] ! 0) y) fs in \
             sum (map (\\(h : Real -> Real) -> grad h x) hs)")
        .contains("known only at run time, other than by applying it")
    );
    // A recursive definition is specialised with its function parameters fixed: its
    // recursive calls must pass them on unchanged.
    assert!(
        err(
            "def rec nt (f : Real -> Real) (n : Int) (x : Real) : Real =\n\
             if n <= 0 then x else nt (\\(y : Real) -> 2.0 * f y) (n - 1) (x - f x / grad f x)\n\
             def main (x : Real) : Real = nt sin 3 x"
        )
        .contains("must pass `f` on unchanged")
    );
    // A definition specialised to its function argument must be given it.
    assert!(
        err(
            "def nt (f : Real -> Real) (x : Real) : Real = x - f x / grad f x\n\
             def main (x : Real) : Real = let n = nt in n sin x"
        )
        .contains("each use must give it")
    );
    // Specialisations are bounded: a chain of definitions each calling the next twice would
    // need 2^30 copies (checking the chain alone needs none: a call with a placeholder
    // function argument is a placeholder too).
    let mut chain = String::from("def t0 (f : Real -> Real) (x : Real) : Real = grad f x\n");
    for k in 1..30 {
        chain += &format!(
            "def t{k} (f : Real -> Real) (x : Real) : Real = t{} f x + t{} f x\n",
            k - 1,
            k - 1
        );
    }
    nested::load(&chain, &chad::internals::prim::Registry::builtin()).unwrap();
    // A long chain each calling the next once is checked with one specialisation per call
    // (not one per definition and level), and a first-order argument may use any function.
    let mut line = String::from(
        "def t0 (f : Real -> Real) (x : Real) : Real = grad f x\n\
         def t1 (f : Real -> Real) (h : Real -> Real) (x : Real) : Real = t0 f (h x)\n",
    );
    for k in 2..3000 {
        line += &format!(
            "def t{k} (f : Real -> Real) (h : Real -> Real) (x : Real) : Real = t{} f h (h x)\n",
            k - 1
        );
    }
    let v = run(
        &format!("{line}def main (x : Real) : Real = t2999 sin (\\(y : Real) -> y) x"),
        &[Value::Real(0.5)],
    );
    assert_eq!(v.expect_real(), 0.5_f64.cos());
    assert!(
        err(&format!("{chain}def main (x : Real) : Real = t29 sin x")).contains("specialisations")
    );
    // Its type errors are found once, at the definition, not at each call.
    assert!(
        err("def nt (f : Real -> Real) (x : Real) : Real = x - f x / grad f x + true")
            .contains("expected `Real`, found `Bool`")
    );
    // Without the differentiating loader, a clear error.
    let e = chad::internals::source::load(
        "def main : Real = grad (\\x -> x) 1.0",
        &chad::internals::prim::Registry::builtin(),
    )
    .unwrap_err();
    assert!(e.message().contains("loader"), "{}", e.message());
}

/// Functions known only at run time (a lambda's parameter, a pattern, a `case` branch, a
/// loop's state, an array's element: `check::carry`) are differentiated through the
/// derivatives their values carry: values against closed forms, and the derivative of the
/// whole program (CHAD over the rewritten program) against central differences.
#[test]
fn functions_known_only_at_run_time_are_differentiated() {
    for (src, a, closed) in common::run_time_functions() {
        let v = run(src, &[Value::Real(a)]).expect_real();
        assert!(
            (v - closed(a)).abs() <= 1e-12 * (1.0 + v.abs()),
            "{src}: {v} vs {}",
            closed(a)
        );
        let program = nested::load(src, &chad::internals::prim::Registry::builtin()).unwrap();
        let entry = program.entry(program.defs.len() - 1);
        let (_, g) = Vjp::new(&entry)
            .unwrap()
            .map_body(simplify)
            .grad(&[Value::Real(a)])
            .unwrap();
        let h = 1e-6;
        let fd = (closed(a + h) - closed(a - h)) / (2.0 * h);
        let g = g[0].expect_real();
        assert!(
            (g - fd).abs() <= 1e-6 * (1.0 + fd.abs()),
            "{src}: {g} vs {fd}"
        );
    }
}

/// Newton's method written once, for any function: the forms differentiate the function each
/// call passes (the definitions are specialised to it), checked against the same programs
/// with the functions written in place, and against central differences.
#[test]
fn functions_passed_to_definitions_are_differentiated() {
    const NEWTON: &str = "def newton (f : Real -> Real) (x : Real) : Real = x - f x / grad f x
def steps (f : Real -> Real) (x : Real) : Real = newton f (newton f x)
def both (f : Real -> Real) (g : Real -> Real) (x : Real) : (Real, Real) =
  (snd (jvp f x 1.0), snd (vjp g x 2.0))
";
    // Two Newton steps for the cube root of c: through the definitions, and written out.
    let through = format!(
        "{NEWTON}def main (c : Real) (x : Real) : Real = steps (\\(y : Real) -> y * y * y - c) x"
    );
    let by_hand = "def main (c : Real) (x : Real) : Real =
  let x1 = x - (x * x * x - c) / grad (\\(y : Real) -> y * y * y - c) x in
  x1 - (x1 * x1 * x1 - c) / grad (\\(y : Real) -> y * y * y - c) x1";
    let plain = |c: f64, x: f64| {
        let step = |x: f64| x - (x * x * x - c) / (3.0 * x * x);
        step(step(x))
    };
    for (c, x) in [(8.0, 1.5), (2.0, 1.0), (-3.0, -1.2)] {
        let args = [Value::Real(c), Value::Real(x)];
        let a = run(&through, &args).expect_real();
        let b = run(by_hand, &args).expect_real();
        assert_eq!(a, b, "c = {c}, x = {x}");
        assert!((a - plain(c, x)).abs() < 1e-12 * a.abs().max(1.0));
    }
    // Its derivative (the forms are differentiated again), against central differences.
    let d = format!(
        "{through}\ndef dmain (c : Real) (x : Real) : Real = grad (\\(c2 : Real) -> main c2 x) c"
    );
    for (c, x) in [(8.0, 1.5), (2.0, 1.0)] {
        let got = run(&d, &[Value::Real(c), Value::Real(x)]).expect_real();
        let h = 1e-5;
        let want = (plain(c + h, x) - plain(c - h, x)) / (2.0 * h);
        assert!((got - want).abs() < 1e-7, "c = {c}: {got} against {want}");
    }
    // `jvp` and `vjp` over two function parameters, with captures, inside `iterate` (partial
    // application: the missing first-order parameter is eta-expanded).
    let src = format!(
        "{NEWTON}def main (a : Real) (x : Real) : Real =
  let (p, q) = both (\\(y : Real) -> a * y * y) (\\(y : Real) -> sin (a * y)) x in
  p * q + iterate 3 (newton (\\(y : Real) -> y * y - a)) 1.0"
    );
    let (a, x) = (1.5_f64, 0.7_f64);
    let mut r = 1.0_f64;
    for _ in 0..3 {
        r -= (r * r - a) / (2.0 * r);
    }
    let want = (2.0 * a * x) * (2.0 * a * (a * x).cos()) + r;
    let got = run(&src, &[Value::Real(a), Value::Real(x)]).expect_real();
    assert!((got - want).abs() < 1e-12, "{got} against {want}");
    // A recursive definition: `solve f n x` is n Newton steps, specialised once per call with
    // `f` fixed and the recursion over `n` and `x` (the same values as `steps` above, and
    // partially applied).
    let rec = format!(
        "{NEWTON}def rec solve (f : Real -> Real) (n : Int) (x : Real) : Real =
  if n <= 0 then x else solve f (n - 1) (x - f x / grad f x)
def main (c : Real) (x : Real) : (Real, Real) =
  let g = solve (\\(y : Real) -> y * y * y - c) 2 in
  (g x, steps (\\(y : Real) -> y * y * y - c) x)"
    );
    let v = run(&rec, &[Value::Real(8.0), Value::Real(1.5)]);
    let (a, b) = v.expect_pair();
    assert_eq!(a.expect_real(), b.expect_real());
    assert!((a.expect_real() - plain(8.0, 1.5)).abs() < 1e-12);
    let d = format!(
        "{rec}\ndef dr (c : Real) (x : Real) : Real = grad (\\(c2 : Real) -> fst (main c2 x)) c"
    );
    let got = run(&d, &[Value::Real(8.0), Value::Real(1.5)]).expect_real();
    let h = 1e-5;
    let want = (plain(8.0 + h, 1.5) - plain(8.0 - h, 1.5)) / (2.0 * h);
    assert!((got - want).abs() < 1e-7, "{got} against {want}");
    // The specialised body sees the definition's scope, not the caller's: its `k` is the
    // top-level one even where the call's `k` is a parameter.
    let scoped = "def k : Real = 10.0
def t (f : Real -> Real) (x : Real) : Real = k * grad f x
def main (k : Real) (x : Real) : Real = t (\\(y : Real) -> k * y * y) x";
    let got = run(scoped, &[Value::Real(3.0), Value::Real(2.0)]).expect_real();
    assert_eq!(got, 10.0 * 3.0 * 2.0 * 2.0);
}

/// A function bound by `let` is differentiated through, capturing its own free variables.
#[test]
fn let_bound_functions_are_differentiated() {
    let src = "def main (a : Real) (x : Real) : Real =
  let h = \\(y : Real) -> a * y * y in
  let k = \\(y : Real) -> h y + sin y in
  grad k x + snd (jvp h x 1.0)";
    for (a, x) in [(2.0_f64, 0.5_f64), (-1.0, 3.0)] {
        let got = run(src, &[Value::Real(a), Value::Real(x)]).expect_real();
        let want = 2.0 * a * x + x.cos() + 2.0 * a * x;
        assert!((got - want).abs() < 1e-12, "{got} against {want}");
    }
    // And its derivative with respect to what it captures: d/da = 4x.
    let d = format!(
        "{}\ndef da (a : Real) (x : Real) : Real = grad (\\(b : Real) -> main b x) a",
        src
    );
    let got = run(&d, &[Value::Real(2.0), Value::Real(0.5)]).expect_real();
    assert!((got - 2.0).abs() < 1e-12, "{got}");
}

/// The elaborator on random programs: `grad` of the last parameter inside a program gives the
/// gradient reverse CHAD gives, and differentiating that program again (forward CHAD over the
/// concretised reverse derivative) agrees with central differences of it.
#[test]
fn nested_gradients_on_random_programs() {
    use chad::internals::source::check::{Differentiate, Form};
    use chad::internals::source::term::{Entry, Term, Var};
    let cfg = Config {
        result: Some(Type::Real),
        ..config(false)
    };
    let strategy = random::program(cfg);
    let mut r = common::runner(100);
    let mut rng = proptest::test_runner::TestRunner::deterministic();
    let (mut compared, mut second) = (0, 0);
    for _ in 0..common::cases(100) {
        let p = common::supported_program(&strategy, &mut r);
        let e = &p.entry;
        let n = e.params.len();
        let last = &e.params[n - 1].ty;
        if !matches!(last, Type::Real) && last.as_array() != Some(&Type::Real) {
            continue;
        }
        let Ok(y) = chad::internals::eval::eval_entry(e, &p.inputs) else {
            continue;
        };
        if !y.expect_real().is_finite() {
            continue;
        }
        let (_, g) = Vjp::new(e)
            .unwrap()
            .map_body(simplify)
            .grad(&p.inputs)
            .unwrap();
        let want = fd::leaves(&g[n - 1]);
        if !finite(&want) {
            continue;
        }
        let outer: Vec<Var> = e
            .params
            .iter()
            .map(|q| Var::fresh(q.name.clone(), q.ty.clone()))
            .collect();
        let args: Vec<Term> = outer.iter().map(Term::var).collect();
        let body = nested::Elaborator
            .elaborate(Form::Grad, e, &args, None)
            .unwrap_or_else(|err| panic!("{err:?}\n{p:?}"));
        let outer_entry = Entry {
            name: "outer".into(),
            params: outer,
            body,
        };
        let got = chad::internals::eval::eval_entry(&outer_entry, &p.inputs).unwrap();
        assert!(
            close(&want, &fd::leaves(&got), 1e-9),
            "grad inside {:?} vs reverse CHAD {want:?}\n{p:?}",
            fd::leaves(&got)
        );
        compared += 1;
        // Second order: forward mode of the program with `grad` inside, against central
        // differences of it.
        let mut real = || (-1.0f64..1.0).new_tree(&mut rng).unwrap().current();
        let ts: Vec<Value> = e
            .params
            .iter()
            .zip(&p.inputs)
            .map(|(q, a)| fd::tangent_with(&q.ty, a, &mut real))
            .collect();
        let Ok(jvp) = Jvp::new(&outer_entry) else {
            panic!("forward mode of the nested program\n{p:?}");
        };
        let (_, d) = jvp.map_body(simplify).jvp(&p.inputs, &ts).unwrap();
        let Ok(num) = fd::jvp(&outer_entry, &p.inputs, &ts, 1e-5) else {
            continue;
        };
        let (d, num) = (fd::leaves(&d), fd::leaves(&num));
        if finite(&d) && finite(&num) && close(&d, &num, 1e-4) {
            second += 1;
        }
    }
    let n = common::cases(100);
    assert!(compared * 4 >= n, "only {compared} of {n} compared");
    assert!(
        second * 2 >= compared,
        "second order agreed on {second} of {compared}"
    );
}

// ----- the size of second-order code -----

/// `newton x = x - f x / grad f x / ... / grad f x`, with `k` inner gradients.
fn newton_source(f: &str, k: usize) -> String {
    format!(
        "def f (x : Real) : Real = {f}\ndef newton (x : Real) : Real = x - f x{}",
        " / grad f x".repeat(k)
    )
}

fn newton_entry(f: &str, k: usize) -> chad::internals::source::term::Entry {
    let program = nested::load(
        &newton_source(f, k),
        &chad::internals::prim::Registry::builtin(),
    )
    .unwrap_or_else(|e| panic!("{}", e.render(None)));
    program.entry(program.defs.len() - 1)
}

const CUBIC: &str = "x * x * x - 2.0";
const HORNER: &str = "fold (\\(a : Real) (c : Real) -> a * x + c) 0.0 [1.0, 0.0, 0.0, -2.0]";

/// `grad f x` of a top-level `f` differentiates `let f = \x -> .. in f x`; optimised first
/// (as every command's pipeline does), `f` is inlined and the derivative is first-order code.
/// Differentiated as written, the function value's cotangent was a one-element copower folded
/// by a `loop` at every inner `grad`.
#[test]
fn inner_gradients_of_a_definition_are_first_order() {
    let e = newton_entry(CUBIC, 1);
    let body = e.body.to_string();
    assert!(!body.contains("loop"), "{body}");
    let v = chad::internals::eval::eval_entry(&e, &[Value::Real(1.5)]).unwrap();
    // 1.5 - (1.5³ - 2) / (3 · 1.5²)
    assert!((v.expect_real() - (1.5 - 1.375 / 6.75)).abs() < 1e-12);
}

/// The concretised gradient of a program with `k` inner gradients is O(k). A loop's step
/// used to capture the whole context (compiled as `it(body) ∘ ⟨id, x⟩`), so its derivative's
/// environment cotangent, spelled out as a tuple by concretisation, held every earlier inner
/// gradient's intermediate values: O(k) per loop, O(k²) in all (`hvp` at k = 8 took 12 s and
/// 1.4 GB with the Horner polynomial, 16 ran out of memory). Sizes, never times: printed
/// lengths of the concretised gradient at k = 4 and 8.
#[test]
fn second_order_code_grows_linearly_with_inner_gradients() {
    for f in [CUBIC, HORNER] {
        let size = |k| {
            nested::vjp_entry(&newton_entry(f, k))
                .unwrap()
                .body
                .to_string()
                .len()
        };
        let (s4, s8) = (size(4), size(8));
        assert!(
            s8 * 10 <= s4 * 23,
            "{f}: the gradient's code grew from {s4} to {s8} characters from 4 to 8 inner gradients"
        );
        // And the Hessian-vector product is right: newton' = f f'' / f'² at one inner
        // gradient, here checked against central differences of the gradient at k = 4.
        let e = newton_entry(f, 4);
        let h = Hvp::new(&e, &[true]).unwrap();
        let r = h.hvp(&[Value::Real(1.5)], &[Value::Real(1.0)]).unwrap();
        let g = |x: f64| {
            let v = Vjp::new(&e).unwrap().map_body(simplify);
            let (_, gs) = v.vjp(&[Value::Real(x)], &Value::Real(1.0)).unwrap();
            gs[0].expect_real()
        };
        let eps = 1e-5;
        let fd = (g(1.5 + eps) - g(1.5 - eps)) / (2.0 * eps);
        let got = r.hvp[0].as_ref().unwrap().expect_real();
        assert!(
            (got - fd).abs() < 1e-5 * (1.0 + fd.abs()),
            "{f}: hvp {got}, differences {fd}"
        );
    }
}

// ----- a second route: nested dual numbers with perturbation tags -----

/// A family of programs with derivatives inside, written twice: in the source language (two
/// real parameters `x`, `w`; `A`, `B` the literals of the case) and as the same function over
/// tagged nested dual numbers (`chad::internals::oracle::tagged`), whose `grad`/`jvp`/`vjp` are forward
/// passes with fresh tags, nothing from CHAD.
struct Family {
    src: &'static str,
    oracle: fn(
        &[chad::internals::oracle::tagged::Num],
        f64,
        f64,
    ) -> chad::internals::oracle::tagged::Num,
}

fn families() -> Vec<Family> {
    use chad::internals::oracle::tagged::{Num, derivative, grad, jvp, vjp};
    fn c(x: f64) -> Num {
        Num::c(x)
    }
    vec![
        // grad capturing both parameters, depth 1.
        Family {
            src: "def f (x : Real) (w : Real) : Real = x * grad (\\y -> sin (x * y) + w * y * y) A",
            oracle: |v, a, _| {
                let (x, w) = (&v[0], &v[1]);
                x.mul(&derivative(|y| x.mul(y).sin().add(&w.mul(y).mul(y)), &c(a)))
            },
        },
        // grad inside grad (depth 2), the inner one capturing the outer lambda's variable and x.
        Family {
            src: "def f (x : Real) (w : Real) : Real = \
                  grad (\\y -> y * grad (\\z -> exp (x * z) * y + w * z) (x + B)) (x * A)",
            oracle: |v, a, b| {
                let (x, w) = (&v[0], &v[1]);
                derivative(
                    |y| {
                        y.mul(&derivative(
                            |z| x.mul(z).exp().mul(y).add(&w.mul(z)),
                            &x.add(&c(b)),
                        ))
                    },
                    &x.mul(&c(a)),
                )
            },
        },
        // jvp inside vjp, both capturing.
        Family {
            src: "def f (x : Real) (w : Real) : Real = \
                  snd (vjp (\\y -> y * snd (jvp (\\z -> tanh (w * z + y)) x A)) w B)",
            oracle: |v, a, b| {
                let (x, w) = (v[0].clone(), v[1].clone());
                let (_, g) = vjp(
                    |y| {
                        let (_, t) = jvp(
                            |z| vec![w.mul(&z[0]).add(&y[0]).tanh()],
                            std::slice::from_ref(&x),
                            &[c(a)],
                        );
                        vec![y[0].mul(&t[0])]
                    },
                    std::slice::from_ref(&w),
                    &[c(b)],
                );
                g[0].clone()
            },
        },
        // grad of a function of a pair, depth 2 (a gradient with two components).
        Family {
            src: "def f (x : Real) (w : Real) : Real = \
                  let g = grad (\\p -> fst p * snd p * x + grad (\\z -> w * z * z * fst p) (snd p)) (x, A) in \
                  fst g * B + snd g * w",
            oracle: |v, a, b| {
                let (x, w) = (v[0].clone(), v[1].clone());
                let g = grad(
                    |p| {
                        let inner = derivative(|z| w.mul(z).mul(z).mul(&p[0]), &p[1]);
                        p[0].mul(&p[1]).mul(&x).add(&inner)
                    },
                    &[x.clone(), c(a)],
                );
                g[0].mul(&c(b)).add(&g[1].mul(&w))
            },
        },
    ]
}

/// On random literals and points: the value of each family's program, its gradient by reverse
/// CHAD and its directional derivative by forward CHAD (each differentiating the elaborated
/// nested derivatives again) agree with the tagged nested dual numbers.
#[test]
fn nested_programs_agree_with_tagged_dual_numbers() {
    use chad::internals::oracle::tagged::{Num, fresh_tag};
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut real = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
    };
    let mut compared = 0;
    let cases = common::cases(12);
    for fam in families() {
        for _ in 0..cases {
            let (a, b) = (real() * 1.5, real() * 1.5);
            let src = fam
                .src
                .replace('A', &format!("({a:?})"))
                .replace('B', &format!("({b:?})"));
            let program = nested::load(&src, &chad::internals::prim::Registry::builtin())
                .unwrap_or_else(|e| panic!("{}\n{src}", e.render(None)));
            let e = program.entry(program.defs.len() - 1);
            let (x, w) = (real(), real());
            let inputs = [Value::Real(x), Value::Real(w)];
            let y = chad::internals::eval::eval_entry(&e, &inputs)
                .unwrap()
                .expect_real();
            let want = (fam.oracle)(&[Num::c(x), Num::c(w)], a, b).primal();
            assert!(close(&[y], &[want], 1e-9), "value {y} vs {want}\n{src}");
            // The oracle's first derivatives: one fresh tag per input component.
            let d: Vec<f64> = (0..2)
                .map(|k| {
                    let t = fresh_tag();
                    let mut v = vec![Num::c(x), Num::c(w)];
                    v[k] = Num::D(
                        t,
                        std::rc::Rc::new(v[k].clone()),
                        std::rc::Rc::new(Num::c(1.0)),
                    );
                    (fam.oracle)(&v, a, b).tangent(t).primal()
                })
                .collect();
            let (_, g) = Vjp::new(&e)
                .unwrap()
                .map_body(simplify)
                .grad(&inputs)
                .unwrap();
            let g: Vec<f64> = g.iter().map(|v| v.expect_real()).collect();
            assert!(
                close(&g, &d, 1e-8),
                "reverse CHAD {g:?} vs tagged {d:?}\n{src}"
            );
            let (t0, t1) = (real(), real());
            let (_, dy) = Jvp::new(&e)
                .unwrap()
                .map_body(simplify)
                .jvp(&inputs, &[Value::Real(t0), Value::Real(t1)])
                .unwrap();
            let want = d[0] * t0 + d[1] * t1;
            assert!(
                close(&[dy.expect_real()], &[want], 1e-8),
                "forward CHAD {dy:?} vs tagged {want}\n{src}"
            );
            compared += 1;
        }
    }
    // Nothing is skipped: every case of every family is compared.
    assert_eq!(compared, 4 * cases);
}

/// The same families through the tagged evaluator of source programs
/// (`chad::internals::oracle::tagged_eval`: the forms recorded by the checker, run with tagged
/// `grad`/`jvp`/`vjp`): its value and gradient are those of the closures written by hand.
#[test]
fn tagged_evaluator_runs_the_families_as_written_by_hand() {
    use chad::internals::oracle::tagged::{Num, fresh_tag};
    use chad::internals::oracle::tagged_eval;
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut real = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
    };
    let cases = common::cases(6);
    for fam in families() {
        for _ in 0..cases {
            let (a, b) = (real() * 1.5, real() * 1.5);
            let src = fam
                .src
                .replace('A', &format!("({a:?})"))
                .replace('B', &format!("({b:?})"));
            let (program, forms) =
                tagged_eval::load(&src, &chad::internals::prim::Registry::builtin())
                    .unwrap_or_else(|e| panic!("{}\n{src}", e.render(None)));
            let e = program.entry(program.defs.len() - 1);
            let (x, w) = (real(), real());
            let inputs = [Value::Real(x), Value::Real(w)];
            let want = (fam.oracle)(&[Num::c(x), Num::c(w)], a, b).primal();
            let y = tagged_eval::eval_entry(&forms, &e, &inputs)
                .unwrap()
                .expect_real();
            assert!(close(&[y], &[want], 1e-12), "value {y} vs {want}\n{src}");
            let d: Vec<f64> = (0..2)
                .map(|k| {
                    let t = fresh_tag();
                    let mut v = vec![Num::c(x), Num::c(w)];
                    v[k] = Num::D(
                        t,
                        std::rc::Rc::new(v[k].clone()),
                        std::rc::Rc::new(Num::c(1.0)),
                    );
                    (fam.oracle)(&v, a, b).tangent(t).primal()
                })
                .collect();
            let (y2, g) = tagged_eval::grad_entry(&forms, &e, &inputs).unwrap();
            assert_eq!(y2, y);
            assert!(
                close(&g, &d, 1e-12),
                "tagged evaluator {g:?} vs closures {d:?}\n{src}"
            );
        }
    }
}

/// Code written per type (dense gradients, `plus` of concrete linear values) is linear in the
/// type's depth, not exponential. Each wrote the element's code twice per array level (one copy for
/// arrays of the full length, one for shorter ones), so a parameter of type `Array` nested 10
/// deep took 1 s to `hvp` and 13 deep 13 s (a fuzzer's input); sizes here, never times.
#[test]
fn code_per_type_is_linear_in_the_depth_of_array_types() {
    use chad::internals::source::term::{Term, Var};
    use chad::internals::target::linear::concrete;
    use chad::internals::target::types::LTy;
    let gradient = |d: usize| {
        let ty = "Array ".repeat(d) + "Real";
        let e = load(&format!(
            "def main (x1 : {ty}) (x2 : Real) : Real = x2 * x2"
        ));
        nested::vjp_entry(&e).unwrap().body.to_string().len()
    };
    let plus = |d: usize| {
        let l = (0..d).fold(LTy::Real, |l, _| LTy::array(l));
        let t = concrete::ty(&l).unwrap();
        let (a, b) = (Var::fresh("a", t.clone()), Var::fresh("b", t));
        concrete::plus(&l, Term::var(&a), Term::var(&b))
            .unwrap()
            .to_string()
            .len()
    };
    for (what, size) in [
        ("gradient", &gradient as &dyn Fn(usize) -> usize),
        ("plus", &plus),
    ] {
        // Printed types grow with the depth too, so the text is at most quadratic in it: at
        // most 4 times longer at twice the depth (it was 2^8 = 256 times).
        let (s8, s16) = (size(8), size(16));
        assert!(
            s16 <= 5 * s8,
            "{what}: {s8} characters at depth 8, {s16} at depth 16"
        );
    }
    // And the Hessian through such a parameter is right: x2² has H = 2 along x2.
    let e = load("def main (x1 : Array (Array (Array Real))) (x2 : Real) : Real = x2 * x2");
    let x1 = chad::internals::source::parse_value("[[[1.0], []], [[2.0, 3.0]]]", &e.params[0].ty)
        .unwrap();
    let (_, _, h) = nested::hessian(&e, &[false, true], &[x1, Value::Real(3.0)]).unwrap();
    assert_eq!(h, vec![vec![2.0]]);
}
