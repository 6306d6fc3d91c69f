//! Hessian-vector products, Hessians and Jacobians on native code (`--backend native`,
//! `chad::internals::native::NativeBackend`) against the execution engine's and against finite
//! differences of gradients:
//!
//! * random `Real`-valued programs (higher-order inside): the concretised gradient of each
//!   ([`Hvp::gradient`]), all compiled into one library (rustc's time grows with the number of
//!   libraries, and the second-order code of higher-order programs is large: 5 programs by
//!   default, about two minutes of rustc on a shared 2-core machine; `CHAD_NATIVE_NESTED_CASES`
//!   sets the count, 24 passed), give the engine's value, gradient
//!   and Hessian-vector product; where the gradient is smooth, central differences of the
//!   gradient agree too;
//! * the Rosenbrock function through the public path (`nested::hessian_with`,
//!   `nested::jacobian_with`, `Hvp::with_backend` on `NativeBackend`) and the command line:
//!   native output byte-identical to the engine's, the Hessian the known one.

mod common;

use chad::Value;
use chad::internals::ad::Vjp;
use chad::internals::ad::nested::{self, Hvp, Mode};
use chad::internals::native::NativeBackend;
use chad::internals::oracle::fd;
use chad::internals::random::{self, Config};
use chad::internals::simplify::simplify;
use chad::internals::source::term::Entry;
use chad::internals::types::Type;
use proptest::strategy::{Strategy, ValueTree};

fn leaves(vs: &[Value]) -> Vec<f64> {
    vs.iter().flat_map(fd::leaves).collect()
}

use common::close_reals as close;

/// Central differences of the engine's gradient along `t`, with step `h`.
fn fd_of_gradient(e: &Entry, args: &[Value], t: &[Value], h: f64) -> Option<Vec<f64>> {
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
fn native_hvp_agrees_with_the_engine_and_finite_differences_on_random_programs() {
    assert!(
        chad::internals::native::available(),
        "the native backend needs rustc on the path"
    );
    let n: usize = std::env::var("CHAD_NATIVE_NESTED_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let strategy = random::program(Config {
        result: Some(Type::Real),
        ..Config::default()
    });
    let mut r = common::runner(n as u32);
    let mut rng = proptest::test_runner::TestRunner::deterministic();
    // The programs that run, with their Hessian-vector product code and a tangent.
    let mut cases = Vec::new();
    while cases.len() < n {
        let p = common::supported_program(&strategy, &mut r);
        let e = &p.entry;
        let Ok(y) = chad::internals::eval::eval_entry(e, &p.inputs) else {
            continue;
        };
        if !y.expect_real().is_finite() {
            continue;
        }
        let all = vec![true; e.params.len()];
        let hvp = Hvp::new(e, &all).unwrap_or_else(|err| panic!("{err}\n{p:?}"));
        let mut real = || (-1.0f64..1.0).new_tree(&mut rng).unwrap().current();
        let t: Vec<Value> = e
            .params
            .iter()
            .zip(&p.inputs)
            .map(|(q, a)| fd::tangent_with(&q.ty, a, &mut real))
            .collect();
        cases.push((p, hvp, t));
    }
    // One library: forward mode of every concretised gradient (as `NativeBackend::forward`
    // compiles each alone).
    let gradients: Vec<Entry> = cases.iter().map(|(_, h, _)| h.gradient().clone()).collect();
    let module = chad::internals::ir::compile::Module::new(
        &gradients,
        chad::internals::ir::compile::Parts::JVP,
    )
    .unwrap();
    chad::internals::ir::check::check(&module.program).unwrap();
    let native = chad::internals::native::Native::module(module, None, false)
        .unwrap_or_else(|e| panic!("{}", e.render(None)));
    let (mut agreed, mut smooth, mut higher_order) = (0, 0, 0);
    for (k, (p, hvp, t)) in cases.iter().enumerate() {
        let engine = hvp.hvp(&p.inputs, t);
        let nat = native.jvp_def(k, &p.inputs, t);
        let (engine, (v, dv)) = match (engine, nat) {
            (Ok(e), Ok(n)) => (e, n),
            (Err(a), Err(b)) => {
                assert_eq!(a.message(), b.message(), "different errors\n{p:?}");
                continue;
            }
            (a, b) => panic!("engine {a:?} but native {b:?}\n{p:?}"),
        };
        // `(value, (g1, .. gn))` and its tangent `(dvalue, (h1, .. hn))`.
        let (y, g) = v.expect_pair();
        let (_, h) = dv.expect_pair();
        assert_eq!(
            y.expect_real().to_bits(),
            engine.value.expect_real().to_bits(),
            "value\n{p:?}"
        );
        let (eg, eh) = (
            leaves(
                &engine
                    .gradient
                    .iter()
                    .flatten()
                    .cloned()
                    .collect::<Vec<_>>(),
            ),
            leaves(&engine.hvp.iter().flatten().cloned().collect::<Vec<_>>()),
        );
        let (ng, nh) = (fd::leaves(g), fd::leaves(h));
        assert!(
            close(&eg, &ng, 1e-9),
            "gradient {eg:?} vs native {ng:?}\n{p:?}"
        );
        assert!(close(&eh, &nh, 1e-9), "hvp {eh:?} vs native {nh:?}\n{p:?}");
        agreed += 1;
        if !nh.iter().all(|x| x.is_finite()) {
            continue;
        }
        // Finite differences of the gradient, where it is smooth (two steps agree).
        let (Some(d1), Some(d2)) = (
            fd_of_gradient(&p.entry, &p.inputs, t, 1e-5),
            fd_of_gradient(&p.entry, &p.inputs, t, 1e-6),
        ) else {
            continue;
        };
        if d1.iter().all(|x| x.is_finite()) && close(&d1, &d2, 1e-4) {
            assert!(
                close(&nh, &d1, 1e-3),
                "native hvp {nh:?} vs fd {d1:?}\n{p:?}"
            );
            smooth += 1;
            if p.source().contains('\\') {
                higher_order += 1;
            }
        }
    }
    assert!(agreed * 4 >= n * 3, "only {agreed} of {n} agreed");
    assert!(smooth * 3 >= n, "only {smooth} of {n} compared with fd");
    assert!(smooth >= 1, "none compared with finite differences");
    assert!(higher_order >= 1, "no program with lambdas compared");
}

const ROSENBROCK: &str = "
def rosenbrock (x : Array Real) : Real =
  let n = length x in
  sum (build (n - 1) (\\i -> 100.0 * (x ! (i + 1) - x ! i * x ! i) * (x ! (i + 1) - x ! i * x ! i)
                            + (1.0 - x ! i) * (1.0 - x ! i)))
";

/// Rosenbrock's Hessian at `x`, by hand.
fn rosenbrock_hessian(x: &[f64]) -> Vec<Vec<f64>> {
    let n = x.len();
    let mut h = vec![vec![0.0; n]; n];
    for i in 0..n - 1 {
        h[i][i] += 1200.0 * x[i] * x[i] - 400.0 * x[i + 1] + 2.0;
        h[i + 1][i + 1] += 200.0;
        h[i][i + 1] -= 400.0 * x[i];
        h[i + 1][i] -= 400.0 * x[i];
    }
    h
}

#[test]
fn native_hessian_hvp_and_jacobian_of_rosenbrock() {
    let prog =
        chad::internals::source::load(ROSENBROCK, &chad::internals::prim::Registry::builtin())
            .unwrap();
    let e = chad::internals::optimize::optimize(&prog.entry(0));
    let x = [0.5, -1.25, 2.0, 0.75];
    let args = [Value::reals(x.to_vec())];
    let backend = NativeBackend::default();
    let (v, g, h) = nested::hessian_with(&e, &[true], &args, &backend).unwrap();
    assert_eq!(
        (v, g.clone(), h.clone()),
        nested::hessian(&e, &[true], &args).unwrap()
    );
    let want = rosenbrock_hessian(&x);
    for (row, w) in h.iter().zip(&want) {
        assert!(close(row, w, 1e-12), "{h:?} vs {want:?}");
    }
    let t = [Value::reals(vec![1.0, 0.5, -2.0, 0.25])];
    let r = Hvp::with_backend(&e, &[true], &backend)
        .unwrap()
        .hvp(&args, &t)
        .unwrap();
    let hv: Vec<f64> = want
        .iter()
        .map(|row| {
            row.iter()
                .zip([1.0, 0.5, -2.0, 0.25])
                .map(|(a, b)| a * b)
                .sum()
        })
        .collect();
    assert!(close(&fd::leaves(r.hvp[0].as_ref().unwrap()), &hv, 1e-12));
    for mode in [Mode::Forward, Mode::Reverse] {
        let (y, j) = nested::jacobian_with(&e, &[true], &args, Some(mode), &backend).unwrap();
        let (y2, j2) = nested::jacobian(&e, &[true], &args, Some(mode)).unwrap();
        assert_eq!(y.same(&y2), Some(true));
        assert_eq!(j, j2, "{mode:?}");
        assert!(close(&j[0], &g, 1e-12));
    }
}

/// The library's `Function::{hvp, hessian, jacobian}`: natively what the engine gives.
#[test]
fn function_hvp_hessian_and_jacobian_natively() {
    let f = chad::Program::load(ROSENBROCK)
        .unwrap()
        .function("rosenbrock")
        .unwrap();
    let native = f.backend(chad::Backend::Native);
    let x = [0.5, -1.25, 2.0, 0.75];
    let args = [Value::reals(x.to_vec())];
    let t = [Value::reals(vec![1.0, 0.5, -2.0, 0.25])];
    let (e, n) = (f.hvp(&args, &t).unwrap(), native.hvp(&args, &t).unwrap());
    assert_eq!(format!("{e:?}"), format!("{n:?}"));
    assert_eq!(n.hvp.len(), 1);
    let (_, _, h) = native.hessian(&args).unwrap();
    assert_eq!(h, rosenbrock_hessian(&x));
    assert_eq!(f.hessian(&args).unwrap(), native.hessian(&args).unwrap());
    let (_, j) = native.jacobian(&args, Some(Mode::Reverse)).unwrap();
    assert_eq!(j, f.jacobian(&args, Some(Mode::Reverse)).unwrap().1);
}

/// The command line: `--backend native` prints what the engine prints.
#[test]
fn native_commands_print_the_engines_output() {
    let dir = std::env::temp_dir().join(format!("chad-native-nested-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("rosenbrock.chad");
    std::fs::write(&file, ROSENBROCK).unwrap();
    let f = file.to_str().unwrap();
    // Standard output; with `--verbose`, standard error must name the native library (the
    // command did run natively).
    let run = |args: &[&str]| -> String {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_chad"))
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{args:?}: {err}");
        if args.contains(&"--verbose") {
            assert!(err.contains("native library"), "{args:?} not native: {err}");
        }
        String::from_utf8(out.stdout).unwrap()
    };
    let x = "[0.5, -1.25, 2.0, 0.75]";
    for cmd in [
        vec!["hvp", f, "--arg", x, "--tangent", "[1.0, 0.5, -2.0, 0.25]"],
        vec!["hessian", f, "--arg", x, "--json"],
        vec!["jacobian", f, "--arg", x, "--mode", "reverse"],
        vec!["jacobian", f, "--arg", x, "--mode", "forward", "--json"],
    ] {
        let engine = run(&cmd);
        let mut native = cmd.clone();
        native.extend(["--backend", "native", "--verbose"]);
        assert_eq!(run(&native), engine, "{cmd:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
