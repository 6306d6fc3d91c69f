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

fn close(a: &[f64], b: &[f64], tol: f64) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| {
            (x.is_nan() && y.is_nan()) || (x - y).abs() <= tol * (1.0 + x.abs().max(y.abs()))
        })
}

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
