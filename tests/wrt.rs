//! Differentiating with respect to some parameters (`--wrt`, `chad::internals::ad::with_respect_to`):
//!
//! * on random first-order programs with a random selection, reverse CHAD, forward CHAD and the
//!   dual-numbers reverse engine give the full derivative's components for the selected
//!   parameters and zero for the others, and the value is unchanged;
//! * the unselected parameters' cotangents are not computed: in a logistic regression's
//!   gradient with respect to the weights, the data matrix's cotangent (the weights scaled per
//!   row) is absent from the simplified derivative code;
//! * the CLI: `grad`, `vjp`, `jvp` (tangents for the selected parameters only), `show`, and the
//!   errors for unknown or repeated names.

mod common;

use chad::Value;
use chad::internals::ad::{self, Jvp, Vjp};
use chad::internals::dual_reverse::{DualReverse, Options};
use chad::internals::oracle::fd;
use chad::internals::random::{self, Config};
use proptest::strategy::{Strategy, ValueTree};
use std::process::Command;

fn leaves(vs: &[Value]) -> Vec<f64> {
    vs.iter().flat_map(fd::leaves).collect()
}

fn close(a: &[f64], b: &[f64]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| {
            (x.is_nan() && y.is_nan()) || (x - y).abs() <= 1e-9 * (1.0 + x.abs().max(y.abs()))
        })
}

#[test]
fn selected_derivatives_are_the_full_ones_and_the_others_zero() {
    let cfg = Config {
        sums: true,
        conditionals: true,
        arrays: true,
        functions: true,
        higher_order_result: false,
        ..Config::default()
    };
    let strategy = random::program(cfg);
    let mut r = common::runner(200);
    let mut rng = proptest::test_runner::TestRunner::deterministic();
    let (mut compared, mut with_unselected_nonzero) = (0, 0);
    for _ in 0..common::cases(200) {
        let p = common::supported_program(&strategy, &mut r);
        let e = &p.entry;
        let n = e.params.len();
        if n == 0 {
            continue;
        }
        let Ok(y) = chad::internals::eval::eval_entry(e, &p.inputs) else {
            continue;
        };
        if !fd::leaves(&y).iter().all(|x| x.is_finite()) {
            continue;
        }
        let sel: Vec<bool> = (0..n)
            .map(|_| proptest::bool::ANY.new_tree(&mut rng).unwrap().current())
            .collect();
        let w = ad::with_respect_to(e, &sel);
        let mut real = || (-2.0f64..2.0).new_tree(&mut rng).unwrap().current();
        let v = fd::tangent_with(&e.body.ty, &y, &mut real);
        // Reverse CHAD.
        let (y_full, g_full) = Vjp::new(e).unwrap().vjp(&p.inputs, &v).unwrap();
        let (y_w, g_w) = Vjp::new(&w).unwrap().vjp(&p.inputs, &v).unwrap();
        assert_eq!(y_w.same(&y_full), Some(true), "{p:?}");
        if !leaves(&g_full).iter().all(|x| x.is_finite()) {
            continue;
        }
        let masked = |gs: &[Value]| -> Vec<Value> {
            gs.iter()
                .zip(&p.inputs)
                .zip(&e.params)
                .zip(&sel)
                .map(|(((g, a), q), &s)| {
                    if s {
                        g.clone()
                    } else {
                        fd::zero_tangent(&q.ty, a)
                    }
                })
                .collect()
        };
        let want = masked(&g_full);
        assert!(
            close(&leaves(&g_w), &leaves(&want)),
            "reverse, selection {sel:?}: {g_w:?} vs {want:?}\n{p:?}"
        );
        if leaves(&g_full) != leaves(&want) {
            with_unselected_nonzero += 1;
        }
        // The dual-numbers reverse engine.
        let out = DualReverse::new(&w, Options::default())
            .unwrap()
            .vjp(&p.inputs, &v)
            .unwrap();
        assert!(
            close(&leaves(&out.gradient), &leaves(&want)),
            "dual reverse, selection {sel:?}\n{p:?}"
        );
        // Forward CHAD: the unselected tangents are ignored.
        let ts: Vec<Value> = e
            .params
            .iter()
            .zip(&p.inputs)
            .map(|(q, a)| fd::tangent_with(&q.ty, a, &mut real))
            .collect();
        let (_, t_w) = Jvp::new(&w).unwrap().jvp(&p.inputs, &ts).unwrap();
        let (_, t_masked) = Jvp::new(e).unwrap().jvp(&p.inputs, &masked(&ts)).unwrap();
        assert!(
            close(&fd::leaves(&t_w), &fd::leaves(&t_masked)),
            "forward, selection {sel:?}: {t_w} vs {t_masked}\n{p:?}"
        );
        compared += 1;
    }
    assert!(compared >= 100, "only {compared} programs compared");
    assert!(
        with_unselected_nonzero >= 10,
        "only {with_unselected_nonzero} programs had a nonzero unselected derivative"
    );
}

const LOGISTIC: &str = "
def loss (w : Array Real) (xs : Array (Array Real)) (ys : Array Real) : Real =
  sum (map2 (\\x y -> softplus (dot w x) - y * dot w x) xs ys)
";

#[test]
fn unselected_cotangents_are_not_computed() {
    let prog = chad::internals::source::load(LOGISTIC, &chad::internals::prim::Registry::builtin())
        .unwrap();
    let e = chad::internals::optimize::optimize(&prog.entry(0));
    let code = |sel: &[bool]| {
        let vjp = Vjp::new(&ad::with_respect_to(&e, sel))
            .unwrap()
            .map_body(chad::internals::simplify::simplify);
        vjp.mor().to_string()
    };
    // The data's cotangent: each row's `w * v`, scaled by the weights (`snd (fst (fst x))`).
    let data_cotangent = "scaleArray (snd (fst (fst x)))";
    assert!(code(&[true, true, true]).contains(data_cotangent));
    let only_w = code(&[true, false, false]);
    assert!(!only_w.contains(data_cotangent), "{only_w}");
    assert!(!only_w.contains("lmap"), "{only_w}");
    assert_eq!(only_w.matches("lbuild").count(), 1, "{only_w}");
    // And the gradient is the full one's first component.
    let args = [
        Value::reals(vec![0.5, -1.0]),
        Value::from_json(
            &serde_json::json!([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]),
            &e.params[1].ty,
        )
        .unwrap(),
        Value::reals(vec![1.0, 0.0, 1.0]),
    ];
    let (_, full) = ad::grad(&e, &args).unwrap();
    let (_, part) = ad::grad(&ad::with_respect_to(&e, &[true, false, false]), &args).unwrap();
    assert!(close(&fd::leaves(&part[0]), &fd::leaves(&full[0])));
    assert_eq!(part[1].to_string(), "[[0.0, 0.0], [0.0, 0.0], [0.0, 0.0]]");
}

#[test]
fn selection_errors() {
    let prog = chad::internals::source::load(LOGISTIC, &chad::internals::prim::Registry::builtin())
        .unwrap();
    let e = prog.entry(0);
    assert_eq!(ad::select(&e, &["ys", "w"]).unwrap(), [true, false, true]);
    let err = ad::select(&e, &["v"]).unwrap_err();
    assert_eq!(
        err.message(),
        "--wrt: `loss` has no parameter `v` (its parameters: w, xs, ys)"
    );
    let err = ad::select(&e, &["w", "w"]).unwrap_err();
    assert_eq!(err.message(), "--wrt: `w` is selected twice");
    assert!(ad::select::<&str>(&e, &[]).is_err());
}

fn chad(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_chad"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    (
        out.status.code().unwrap(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[test]
fn the_command_line() {
    let dir = std::env::temp_dir().join(format!("chad-wrt-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("lr.chad");
    std::fs::write(&f, LOGISTIC).unwrap();
    let f = f.to_str().unwrap();
    let args = [
        "--arg",
        "[0.5, -1]",
        "--arg",
        "[[1, 2], [3, 4], [5, 6]]",
        "--arg",
        "[1, 0, 1]",
    ];
    let run = |extra: &[&str]| {
        let mut a = extra.to_vec();
        a.insert(1, f);
        a.extend(args);
        chad(&a)
    };
    let (code, full, _) = run(&["grad", "--json"]);
    assert_eq!(code, 0);
    let full: serde_json::Value = serde_json::from_str(&full).unwrap();
    let (code, out, err) = run(&["grad", "--wrt", "w", "--json"]);
    assert_eq!(code, 0, "{err}");
    let part: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(part["value"], full["value"]);
    let floats = |j: &serde_json::Value| -> Vec<f64> {
        j.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect()
    };
    assert!(close(
        &floats(&part["gradient"][0]),
        &floats(&full["gradient"][0])
    ));
    assert_eq!(part["gradient"][1], serde_json::Value::Null);
    assert_eq!(part["gradient"][2], serde_json::Value::Null);
    // Text: only the selected parameters; two of three with `--wrt w,ys`.
    let (_, out, _) = run(&["grad", "--wrt", "w,ys"]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 4, "{out}");
    assert!(lines[2].starts_with("  w = [") && lines[3] == "  ys = [1.5, 2.5, 3.5]");
    let (_, dual, _) = run(&["grad", "--wrt", "w,ys", "--engine", "dual"]);
    assert_eq!(dual.lines().nth(3), Some("  ys = [1.5, 2.5, 3.5]"));
    let (_, vjp, _) = run(&["vjp", "--wrt", "ys", "--cotangent", "2"]);
    assert_eq!(vjp.lines().nth(2), Some("  ys = [3.0, 5.0, 7.0]"));
    // jvp: one tangent per selected parameter.
    let (code, out, err) = run(&["jvp", "--wrt", "ys", "--tangent", "[1, 0, 0]"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.lines().nth(1), Some("tangent: 1.5"));
    let (code, _, err) = run(&[
        "jvp",
        "--wrt",
        "ys",
        "--tangent",
        "[1, 0]",
        "--tangent",
        "()",
    ]);
    assert_eq!(code, 1);
    assert!(
        err.contains("--wrt selects 1 parameter and so needs 1 tangent, but 2 were given"),
        "{err}"
    );
    let (code, _, err) = run(&["grad", "--wrt", "v"]);
    assert_eq!(code, 1);
    assert!(
        err.contains("--wrt: `loss` has no parameter `v` (its parameters: w, xs, ys)"),
        "{err}"
    );
    // show: the derivative code of the selection.
    let (code, out, _) = chad(&["show", f, "--stage", "reverse", "--wrt", "w"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("stopGradient") && !out.contains("lmap"),
        "{out}"
    );
}
