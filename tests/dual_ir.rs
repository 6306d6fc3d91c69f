//! Hessian-vector products by dual numbers on the IR (`chad::internals::ir::dual`, forward
//! mode of the compiled gradient) against the concretising route (`Hvp`, forward CHAD of the
//! concretised gradient, on the engine), on random `Real`-valued programs (higher-order ones
//! included) run by the IR's reference interpreter, and against Rosenbrock's Hessian by hand.

mod common;

use chad::Value;
use chad::internals::ad::nested::Hvp;
use chad::internals::ir::compile::HvpCode;
use chad::internals::oracle::fd;
use chad::internals::random::{self, Config};
use chad::internals::types::Type;
use proptest::strategy::{Strategy, ValueTree};

use common::close_reals as close;

#[test]
fn dual_ir_hvp_agrees_with_the_concretising_route_on_random_programs() {
    let n: usize = std::env::var("CHAD_PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    let strategy = random::program(Config {
        result: Some(Type::Real),
        ..Config::default()
    });
    let mut r = common::runner(n as u32);
    let mut rng = proptest::test_runner::TestRunner::deterministic();
    let (mut agreed, mut higher_order, mut tried) = (0, 0, 0);
    while tried < n {
        let p = common::supported_program(&strategy, &mut r);
        let e = &p.entry;
        let Ok(y) = chad::internals::eval::eval_entry(e, &p.inputs) else {
            continue;
        };
        if !y.expect_real().is_finite() {
            continue;
        }
        tried += 1;
        let all = vec![true; e.params.len()];
        let hvp = Hvp::new(e, &all).unwrap_or_else(|err| panic!("{err}\n{p:?}"));
        let code = HvpCode::new(e).unwrap_or_else(|err| panic!("{err}\n{p:?}"));
        chad::internals::ir::check::check(&code.program)
            .unwrap_or_else(|err| panic!("{err}\n{}\n{p:?}", code.program));
        let mut real = || (-1.0f64..1.0).new_tree(&mut rng).unwrap().current();
        let t: Vec<Value> = e
            .params
            .iter()
            .zip(&p.inputs)
            .map(|(q, a)| fd::tangent_with(&q.ty, a, &mut real))
            .collect();
        let (engine, (v, dv)) = match (hvp.hvp(&p.inputs, &t), code.run(&p.inputs, &t)) {
            (Ok(a), Ok(b)) => (a, b),
            (Err(a), Err(b)) => {
                assert_eq!(a.message(), b.message(), "different errors\n{p:?}");
                continue;
            }
            (a, b) => panic!("concretised {a:?} but dual {b:?}\n{p:?}"),
        };
        let (y, g) = v.expect_pair();
        let (_, h) = dv.expect_pair();
        assert_eq!(
            y.expect_real().to_bits(),
            engine.value.expect_real().to_bits(),
            "value\n{p:?}"
        );
        let flat = |vs: &[Option<Value>]| -> Vec<f64> {
            vs.iter().flatten().flat_map(fd::leaves).collect()
        };
        let (eg, eh) = (flat(&engine.gradient), flat(&engine.hvp));
        let (dg, dh) = (fd::leaves(g), fd::leaves(h));
        assert!(
            close(&eg, &dg, 1e-9),
            "gradient {eg:?} vs dual {dg:?}\n{p:?}"
        );
        assert!(close(&eh, &dh, 1e-9), "hvp {eh:?} vs dual {dh:?}\n{p:?}");
        agreed += 1;
        if p.source().contains('\\') {
            higher_order += 1;
        }
    }
    assert!(agreed * 4 >= n * 3, "only {agreed} of {n} agreed");
    assert!(higher_order >= 1, "no program with lambdas compared");
}

/// The dual route of one entry: value, gradient and Hessian-vector product, on the IR's
/// interpreter, with the concretising route's on the engine beside it.
fn both_routes(
    e: &chad::internals::source::term::Entry,
    args: &[Value],
    t: &[Value],
) -> (Vec<f64>, Vec<f64>) {
    let code = HvpCode::new(e).unwrap_or_else(|err| panic!("{err}"));
    chad::internals::ir::check::check(&code.program).unwrap();
    let (_, dv) = code.run(args, t).unwrap();
    let h = fd::leaves(dv.expect_pair().1);
    let all = vec![true; e.params.len()];
    let engine = Hvp::new(e, &all).unwrap().hvp(args, t).unwrap();
    let eh = engine.hvp.iter().flatten().flat_map(fd::leaves).collect();
    (h, eh)
}

fn entry(
    src: &str,
    def: &str,
    reg: &chad::internals::prim::Registry,
) -> chad::internals::source::term::Entry {
    let prog = chad::internals::source::load(src, reg).unwrap();
    let k = prog.find(def).unwrap();
    chad::internals::optimize::optimize(&prog.entry(k))
}

#[test]
fn dual_ir_hessian_of_rosenbrock_is_the_known_one() {
    let src = "def rosenbrock (x : Array Real) : Real =
  sum (build (length x - 1) (\\i -> 100.0 * (x ! (i + 1) - x ! i * x ! i) * (x ! (i + 1) - x ! i * x ! i)
                            + (1.0 - x ! i) * (1.0 - x ! i)))";
    let e = entry(
        src,
        "rosenbrock",
        &chad::internals::prim::Registry::builtin(),
    );
    rosenbrock_hessian(&e);
}

/// `ir::opt::unzip_arrays` on the benchmark suite's Rosenbrock: the dual code of its gradient
/// reads `x` and `dx` where they are (no array of pairs zipped from them), accumulates into
/// two arrays of reals, and returns them (no unzipping builds), with the known Hessian.
#[test]
fn dual_ir_hvp_keeps_arrays_of_reals_apart() {
    let src = std::fs::read_to_string("benches/programs/rosenbrock.chad").unwrap();
    let e = entry(
        &src,
        "rosenbrock",
        &chad::internals::prim::Registry::builtin(),
    );
    let code = HvpCode::new(&e).unwrap();
    chad::internals::ir::check::check(&code.program).unwrap();
    let text = code.program.to_string();
    let hvp = &text[text.find("fn rosenbrock_hvp").expect("an hvp function")..];
    assert!(!hvp.contains("[(f64, f64)]"), "an array of pairs:\n{hvp}");
    assert!(!hvp.contains("= build "), "a build:\n{hvp}");
    rosenbrock_hessian(&e);
}

fn rosenbrock_hessian(e: &chad::internals::source::term::Entry) {
    let x = [0.5, -1.25, 2.0, 0.75, 0.1];
    let n = x.len();
    for k in 0..n {
        let mut basis = vec![0.0; n];
        basis[k] = 1.0;
        let (h, eh) = both_routes(e, &[Value::reals(x.to_vec())], &[Value::reals(basis)]);
        // Column k of the Hessian, by hand.
        let mut col = vec![0.0; n];
        for i in 0..n - 1 {
            let (a, b) = (x[i], x[i + 1]);
            if k == i {
                col[i] += 1200.0 * a * a - 400.0 * b + 2.0;
                col[i + 1] -= 400.0 * a;
            }
            if k == i + 1 {
                col[i + 1] += 200.0;
                col[i] -= 400.0 * a;
            }
        }
        assert!(close(&h, &col, 1e-12), "column {k}: {h:?} vs {col:?}");
        assert!(close(&h, &eh, 1e-12), "column {k}: {h:?} vs engine {eh:?}");
    }
}

/// Iteration (`fold`, `iterate`, `while`, `scan`): the IR's `iterate` and the closures the
/// steps are, in dual numbers.
#[test]
fn dual_ir_hvp_of_loops_agrees_with_the_concretising_route() {
    let src = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/loops.chad"))
        .unwrap();
    let reg = chad::internals::prim::Registry::builtin();
    let r = |xs: &[f64]| Value::reals(xs.to_vec());
    let cases: Vec<(&str, Vec<Value>, Vec<Value>)> = vec![
        (
            "rnn_loss",
            vec![r(&[0.5, -0.3, 0.8]), r(&[1.0, 0.5, -0.2])],
            vec![r(&[1.0, -0.5, 0.25]), r(&[0.3, 0.2, -1.0])],
        ),
        (
            "rk4",
            vec![Value::Real(0.7), Value::Real(1.5)],
            vec![Value::Real(1.0), Value::Real(-0.5)],
        ),
        (
            "newton_sqrt",
            vec![Value::Real(1.3)],
            vec![Value::Real(1.0)],
        ),
        (
            "smoothed_loss",
            vec![Value::Real(0.3), r(&[1.0, 2.0, 0.5, -1.0])],
            vec![Value::Real(0.5), r(&[0.1, -0.2, 0.3, 0.4])],
        ),
    ];
    for (def, args, t) in cases {
        let e = entry(&src, def, &reg);
        let (h, eh) = both_routes(&e, &args, &t);
        assert!(!h.is_empty() && h.iter().any(|x| *x != 0.0), "{def}: {h:?}");
        assert!(
            close(&h, &eh, 1e-9),
            "{def}: dual {h:?} vs concretised {eh:?}"
        );
    }
}

/// Primitives registered by the user with their derivatives: the gradient of `logcosh` calls
/// `th` (a user's `tanh`), whose dual the code gets from `th`'s own registered derivative,
/// compiled into the program.
#[test]
fn dual_ir_uses_a_user_primitives_derivative() {
    use chad::internals::prim::{Derivative, Primitive, Registry, op};
    use chad::internals::target::term::Term;
    let mut reg = Registry::builtin();
    let th = Primitive::function("th", vec![Type::Real], Type::Real, |x| {
        Ok(Value::Real(x.expect_real().tanh()))
    })
    .with_derivative(Derivative::scalar(|x| {
        let t = Term::prim(&op("tanh"), vec![x.clone()]);
        let t2 = Term::prim(&op("mul"), vec![t.clone(), t]);
        Term::prim(&op("sub"), vec![Term::real(1.0), t2])
    }));
    let reg_th = reg.register(th).unwrap();
    let logcosh = Primitive::function("logcosh", vec![Type::Real], Type::Real, |x| {
        Ok(Value::Real(x.expect_real().cosh().ln()))
    })
    .with_derivative(Derivative::scalar(move |x| {
        Term::prim(&reg_th, vec![x.clone()])
    }));
    reg.register(logcosh).unwrap();
    let e = entry(
        "def f (xs : Array Real) : Real = sum (map (\\x -> logcosh (2.0 * x)) xs)",
        "f",
        &reg,
    );
    let x = [0.3, -1.1, 0.8];
    let v = [1.0, 0.5, -2.0];
    let (h, eh) = both_routes(&e, &[Value::reals(x.to_vec())], &[Value::reals(v.to_vec())]);
    // d²/dx² logcosh (2x) = 4 (1 - tanh² (2x)): the Hessian is diagonal.
    let want: Vec<f64> = x
        .iter()
        .zip(&v)
        .map(|(x, v)| 4.0 * (1.0 - (2.0 * x).tanh().powi(2)) * v)
        .collect();
    assert!(close(&h, &want, 1e-12), "{h:?} vs {want:?}");
    assert!(close(&h, &eh, 1e-12), "{h:?} vs engine {eh:?}");
}
