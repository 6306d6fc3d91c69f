//! The library's front door (`chad::Program`, `chad::Function`): its results against
//! independent oracles (the direct evaluator, finite differences, reverse CHAD of the program
//! as written without optimisation or simplification), the reusable pullback and pushforward
//! against one-shot calls and each other (the dot-product test), `wrt` against the full
//! gradient, parallel use from several threads against sequential use, and the `Value`
//! conversions.

use chad::internals::oracle::fd;
use chad::{Function, Program, Value};
use std::path::Path;

fn example(name: &str) -> (Function, Vec<Value>) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    let program = Program::from_file(root.join(format!("{name}.chad"))).unwrap();
    let f = program.last().unwrap();
    let text = std::fs::read_to_string(root.join(format!("{name}.args.json"))).unwrap();
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    let types = f.entry().unwrap().param_types();
    let args = json
        .as_array()
        .unwrap()
        .iter()
        .zip(&types)
        .map(|(j, t)| Value::from_json(j, t).unwrap())
        .collect();
    (f, args)
}

fn close(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol * (1.0 + a.abs().max(b.abs()))
}

fn assert_close(a: &Value, b: &Value, tol: f64, what: &str) {
    let (la, lb) = (fd::leaves(a), fd::leaves(b));
    assert_eq!(la.len(), lb.len(), "{what}: shapes differ: {a} vs {b}");
    for (x, y) in la.iter().zip(&lb) {
        assert!(close(*x, *y, tol), "{what}: {x} vs {y}\n{a}\nvs\n{b}");
    }
}

fn dot(a: &[Value], b: &[Value]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| {
            fd::leaves(x)
                .iter()
                .zip(fd::leaves(y))
                .map(|(p, q)| p * q)
                .sum::<f64>()
        })
        .sum()
}

/// A deterministic pseudo-random tangent per argument.
fn tangents(f: &Function, args: &[Value], seed: u64) -> Vec<Value> {
    let mut s = seed;
    let mut next = move || {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((s >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
    };
    let entry = f.entry().unwrap();
    entry
        .params
        .iter()
        .zip(args)
        .map(|(p, a)| fd::tangent_with(&p.ty, a, &mut next))
        .collect()
}

#[test]
fn value_and_gradient_agree_with_independent_oracles() {
    for name in ["gmm", "mlp"] {
        let (f, args) = example(name);
        let entry = f.entry().unwrap();
        let (value, grad) = f.value_and_grad(&args).unwrap();
        // The value: the direct evaluator of the program as written.
        let direct = chad::internals::eval::eval_entry(&entry, &args).unwrap();
        assert_close(&value, &direct, 1e-12, name);
        assert_close(&f.eval(&args).unwrap(), &direct, 1e-12, name);
        // The gradient: reverse CHAD of the unoptimised program, unsimplified.
        let (_, plain) = chad::internals::ad::Vjp::new(&entry)
            .unwrap()
            .grad(&args)
            .unwrap();
        assert_eq!(grad.len(), plain.len());
        for (g, p) in grad.iter().zip(&plain) {
            assert_close(g, p, 1e-10, name);
        }
        // And finite differences along random directions: <grad, t> = d/dh f(x + h t).
        for seed in 1..4 {
            let t = tangents(&f, &args, seed);
            let numeric = fd::jvp(&entry, &args, &t, 1e-6).unwrap();
            let numeric = numeric.expect_real();
            let analytic = dot(&grad, &t);
            assert!(
                close(numeric, analytic, 1e-6),
                "{name}: fd {numeric} vs <grad, t> {analytic}"
            );
        }
    }
}

#[test]
fn pullback_and_pushforward_are_reusable_and_transposes_of_each_other() {
    let (f, args) = example("mlp");
    let (value, grad) = f.value_and_grad(&args).unwrap();
    let pullback = f.vjp_at(&args).unwrap();
    assert_eq!(pullback.value().same(&value), Some(true));
    for c in [1.0, -2.5, 0.3, 0.0] {
        let g = pullback.apply(&Value::from(c)).unwrap();
        let (_, once) = f.vjp(&args, &Value::from(c)).unwrap();
        for ((a, b), full) in g.iter().zip(&once).zip(&grad) {
            assert_eq!(a.same(b), Some(true), "pullback reused vs vjp at {c}");
            let scaled: Vec<f64> = fd::leaves(full).iter().map(|x| c * x).collect();
            for (x, y) in fd::leaves(a).iter().zip(&scaled) {
                assert!(close(*x, *y, 1e-12), "linearity: {x} vs {y}");
            }
        }
    }
    let pushforward = f.linearize(&args).unwrap();
    assert_eq!(pushforward.value().same(&value), Some(true));
    for seed in 10..14 {
        let t = tangents(&f, &args, seed);
        let dy = pushforward.apply(&t).unwrap();
        let (_, once) = f.jvp(&args, &t).unwrap();
        assert_eq!(dy.same(&once), Some(true), "pushforward reused vs jvp");
        // The dot-product test: <1, J t> = <Jᵀ 1, t>.
        let analytic = dot(&grad, &t);
        assert!(
            close(dy.expect_real(), analytic, 1e-10),
            "{dy} vs {analytic}"
        );
    }
    assert!(pushforward.apply(&t_short(&args)).is_err());
}

fn t_short(args: &[Value]) -> Vec<Value> {
    args[..1].to_vec()
}

#[test]
fn wrt_selects_components_of_the_full_derivatives() {
    let (f, args) = example("gmm");
    let full = f.grad(&args).unwrap();
    // Not a prefix of the parameters, so that the selected ones' places matter.
    let part = f.wrt(&["icf", "alphas"]).unwrap();
    assert_eq!(part.selection(), &[true, false, true, false, false, false]);
    let g = part.grad(&args).unwrap();
    assert_eq!(g.len(), 2);
    assert_close(&g[0], &full[0], 1e-12, "alphas");
    assert_close(&g[1], &full[2], 1e-12, "icf");
    // Tangents for the selected parameters only: the others are zero.
    let t = tangents(&f, &args, 7);
    let mut zeroed = t.clone();
    for (k, z) in zeroed.iter_mut().enumerate() {
        if k != 0 && k != 2 {
            *z = fd::zero_tangent(&f.entry().unwrap().params[k].ty, &args[k]);
        }
    }
    let (_, dy_part) = part.jvp(&args, &[t[0].clone(), t[2].clone()]).unwrap();
    let (_, dy_full) = f.jvp(&args, &zeroed).unwrap();
    assert_close(&dy_part, &dy_full, 1e-12, "jvp wrt");
    let err = part.jvp(&args, &t).unwrap_err();
    assert!(err.message().contains("6 tangents given for 2"), "{err}");
    let pb = part.vjp_at(&args).unwrap();
    assert_eq!(pb.apply(&Value::from(1.0)).unwrap().len(), 2);
    let err = f.wrt(&["nope"]).unwrap_err();
    assert!(err.message().contains("nope"), "{err}");
}

#[test]
fn functions_are_shared_between_threads() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Program>();
    send_sync::<Function>();
    let program = Program::load(
        "def rosenbrock (xs : Array Real) : Real =
           sum (build (length xs - 1) (\\i ->
             let x = xs ! i in
             let a = xs ! (i + 1) - x * x in
             100.0 * a * a + (1.0 - x) * (1.0 - x)))",
    )
    .unwrap();
    let f = program.function("rosenbrock").unwrap();
    let batch: Vec<Vec<f64>> = (0..16)
        .map(|k| {
            (0..20)
                .map(|i| ((k * 20 + i) as f64 * 0.37).sin())
                .collect()
        })
        .collect();
    let run = |f: &Function, xs: &[Vec<f64>]| -> Vec<(f64, Vec<f64>)> {
        xs.iter()
            .map(|x| {
                let (v, g) = f.value_and_grad(&[Value::from(x.clone())]).unwrap();
                (
                    f64::try_from(&v).unwrap(),
                    Vec::<f64>::try_from(&g[0]).unwrap(),
                )
            })
            .collect()
    };
    let sequential = run(&f, &batch);
    let parallel: Vec<(f64, Vec<f64>)> = std::thread::scope(|s| {
        let handles: Vec<_> = batch
            .chunks(4)
            .map(|chunk| {
                let f = f.clone();
                s.spawn(move || run(&f, chunk))
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    assert_eq!(sequential, parallel);
    // And the derivative is right: rosenbrock's gradient by hand.
    for (x, (_, g)) in batch.iter().zip(&sequential) {
        for i in 0..x.len() {
            let mut d = 0.0;
            if i + 1 < x.len() {
                d += -400.0 * x[i] * (x[i + 1] - x[i] * x[i]) - 2.0 * (1.0 - x[i]);
            }
            if i > 0 {
                d += 200.0 * (x[i] - x[i - 1] * x[i - 1]);
            }
            assert!(close(g[i], d, 1e-12), "{} vs {d}", g[i]);
        }
    }
}

#[test]
fn errors_are_results() {
    let program = Program::load("def f (x : Real) : Array Real = [x, x]\n").unwrap();
    let err = program.function("g").unwrap_err();
    assert_eq!(err.message(), "no definition named `g` in <input>");
    let f = program.function("f").unwrap();
    let err = f.grad(&[Value::from(1.0)]).unwrap_err();
    assert!(err.message().contains("grad needs a Real-valued"), "{err}");
    let err = f.eval(&[Value::from(1i64)]).unwrap_err();
    assert!(err.message().contains("argument 1"), "{err}");
    let (_, g) = f
        .vjp(&[Value::from(2.0)], &Value::from(vec![1.0, 3.0]))
        .unwrap();
    assert_eq!(f64::try_from(&g[0]).unwrap(), 4.0);
    let err = Program::load("def f (x : Real) : Real = x +\n").unwrap_err();
    assert!(err.span().is_some(), "{err}");
    let err = Program::from_file("/nonexistent/x.chad").unwrap_err();
    assert!(err.message().contains("cannot read"), "{err}");
}

#[test]
fn values_convert_to_and_from_rust_data() {
    assert_eq!(f64::try_from(Value::from(2.5)).unwrap(), 2.5);
    assert_eq!(i64::try_from(Value::from(-3i64)).unwrap(), -3);
    assert!(bool::try_from(Value::from(true)).unwrap());
    let m = vec![vec![1.0, 2.0], vec![], vec![3.0]];
    assert_eq!(
        Vec::<Vec<f64>>::try_from(Value::from(m.clone())).unwrap(),
        m
    );
    let t: (f64, (i64, bool)) = Value::from((1.0, (2i64, false))).try_into().unwrap();
    assert_eq!(t, (1.0, (2, false)));
    let t3: (Vec<f64>, f64, i64) = Value::from((vec![1.0], 2.0, 3i64)).try_into().unwrap();
    assert_eq!(t3, (vec![1.0], 2.0, 3));
    // The shape chad programs use: a 3-tuple is right-nested pairs.
    let program = Program::load("def f (x : Real) : (Real, Int, Bool) = (x, 1, true)\n").unwrap();
    let v = program.last().unwrap().eval(&[Value::from(0.5)]).unwrap();
    let t: (f64, i64, bool) = (&v).try_into().unwrap();
    assert_eq!(t, (0.5, 1, true));
    // Mismatches are errors naming both sides, not panics.
    let err = f64::try_from(Value::from(vec![1.0])).unwrap_err();
    assert_eq!(err.message(), "expected a Real, found `[1.0]`");
    assert!(Vec::<f64>::try_from(Value::from(1.0)).is_err());
    assert!(<(f64, f64)>::try_from(Value::from(1.0)).is_err());
    assert!(<(f64, f64, f64)>::try_from(Value::from((1.0, 2.0))).is_err());
}
