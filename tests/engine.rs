//! The execution engine ([`chad::target::engine`]) against the reference evaluator
//! ([`chad::target::eval`]), an independent implementation that looks variables up by name.
//!
//! * Embedded random source programs (first-order, deeper higher-order, array- and sum-heavy):
//!   the engine agrees exactly with the *source* evaluator (values, or errors with positions;
//!   functions compared by application).
//! * Random linear maps (every linear form): the engine's map and the reference map agree on
//!   random arguments of every representation, observed through the linear API.
//! * Raw and simplified forward and reverse derivative code of random programs: the engine
//!   and the reference evaluator give the same primal and the same derivative on random
//!   (co)tangents, or the same error.
//! * Hand-written terms for the engine's own mechanisms: moves out of slots (not inside loops,
//!   not for variables used twice), inlined loops, captures, deep let chains.
//!
//! Every AD oracle test (`tests/ad*.rs`, `tests/logical_relations.rs`, `tests/examples.rs`)
//! also runs through the engine, since `Jvp`, `Vjp` and `Mor::apply` do.

mod common;

use chad::ad::{TypeMaps, forward, reverse};
use chad::ccc;
use chad::random::{Config, TestProgram, program};
use chad::simplify::simplify;
use chad::target::embed;
use chad::target::engine::Code;
use chad::target::eval::{Env, eval};
use chad::target::linear::Lin;
use chad::target::random::{linear_map, small_lty};
use chad::target::term::{Term, TermKind as K, Var};
use chad::target::testing::{approx_eq, lin, observe, probes};
use chad::target::{LTy, Ty};
use chad::value::Value;
use common::same_at;
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::TestRunner;

const TOL: f64 = 1e-12;

// ----- embedded source programs -----

fn embedding_agrees(p: &TestProgram) -> Result<bool, TestCaseError> {
    let (params, body) = embed::entry(&p.entry);
    let source = chad::eval::eval_entry(&p.entry, &p.inputs);
    let engine = Code::compile(&params, &body).run(&p.inputs);
    let mut rng = TestRunner::deterministic();
    same_at(&p.entry.body.ty, &source, &engine, &mut rng, 2).map_err(TestCaseError::fail)?;
    Ok(source.is_ok())
}

fn check_embedding(cfg: Config, n: u32) {
    common::check_programs(cfg, n, embedding_agrees);
}

#[test]
fn engine_agrees_with_the_source_evaluator() {
    check_embedding(Config::default(), common::cases(400));
}

#[test]
fn engine_agrees_on_higher_order_programs() {
    let cfg = Config {
        depth: 6,
        higher_order_result: true,
        ..Config::default()
    };
    check_embedding(cfg, common::cases(200));
}

#[test]
fn engine_agrees_on_array_and_sum_programs() {
    for cfg in [
        Config {
            array_bias: true,
            ..Config::default()
        },
        Config {
            sum_bias: true,
            ..Config::default()
        },
    ] {
        check_embedding(cfg, common::cases(200));
    }
}

// ----- linear maps -----

#[test]
fn engine_linear_maps_agree_with_the_reference_evaluator() {
    let strategy = (small_lty(2), small_lty(2)).prop_flat_map(|(dom, cod)| {
        (
            Just(cod.clone()),
            linear_map(dom.clone(), cod, 6),
            lin(&dom),
            any::<u64>(),
        )
    });
    common::runner(common::cases(300))
        .run(&strategy, |(cod, term, x, seed)| {
            let reference = eval(&term, &Env::new()).and_then(|f| f.expect_lin_fun().apply(&x));
            let engine = Code::compile(&[], &term)
                .run(&[])
                .and_then(|f| f.expect_lin_fun().apply(&x));
            same_lin(&cod, &reference, &engine, seed).map_err(TestCaseError::fail)
        })
        .unwrap_or_else(|e| panic!("{e}"));
}

/// Two linear results agree: both errors with the same message and position, or values
/// that agree under every observation.
fn same_lin(
    l: &LTy,
    a: &chad::Result<Lin>,
    b: &chad::Result<Lin>,
    seed: u64,
) -> Result<(), String> {
    match (a, b) {
        (Err(x), Err(y)) if x.message() == y.message() && x.span() == y.span() => Ok(()),
        (Ok(x), Ok(y)) => {
            let p = probes(seed);
            let (ox, oy) = (observe(l, x, &p), observe(l, y, &p));
            if approx_eq(&ox, &oy, TOL) {
                Ok(())
            } else {
                Err(format!("{x:?} observed {ox:?}, {y:?} observed {oy:?}"))
            }
        }
        (x, y) => Err(format!(
            "reference {:?}, engine {:?}",
            x.as_ref().map(|_| "value").map_err(|e| e.to_string()),
            y.as_ref().map(|_| "value").map_err(|e| e.to_string())
        )),
    }
}

// ----- derivative code -----

/// The engine and the reference evaluator on the derivative code of `p` (mode by mode, raw
/// and simplified): same primal, same derivative at a random (co)tangent, or the same error.
fn derivatives_agree(p: &TestProgram, seed: u64) -> Result<(), TestCaseError> {
    let comb = ccc::compile_entry(&p.entry);
    let x = ccc::eval::context_value(&p.inputs);
    let fwd = forward::Forward::new();
    let rev = reverse::Reverse::new();
    let cases = [
        (
            forward::transform(&comb),
            fwd.derivative(&comb.dom, &comb.cod),
        ),
        (
            reverse::transform(&comb),
            rev.derivative(&comb.dom, &comb.cod),
        ),
    ];
    let mut rng = TestRunner::deterministic();
    for (m, dty) in cases {
        let Ok(m) = m else { continue };
        let (dom, cod) = dty.as_lin_fun().expect("a derivative is a linear map");
        let arg = lin(dom)
            .new_tree(&mut rng)
            .map_err(|e| TestCaseError::fail(e.to_string()))?
            .current();
        for body in [m.body.clone(), simplify(&m.body)] {
            let run = |v: chad::Result<Value>| -> chad::Result<(Value, Lin)> {
                let v = v?;
                let (y, f) = v.expect_pair();
                Ok((y.clone(), f.expect_lin_fun().apply(&arg)?))
            };
            let reference = run(eval(&body, &Env::new().update(m.x.id, x.clone())));
            let engine =
                run(Code::compile(std::slice::from_ref(&m.x), &body).run(std::slice::from_ref(&x)));
            let split = |r: &chad::Result<(Value, Lin)>| match r {
                Ok((y, d)) => (Ok(y.clone()), Ok(d.clone())),
                Err(e) => (Err(e.clone()), Err(e.clone())),
            };
            let ((ry, rd), (ey, ed)) = (split(&reference), split(&engine));
            let primal = comb.cod.clone();
            same_at(&primal, &ry, &ey, &mut rng, 1)
                .map_err(|e| TestCaseError::fail(format!("primal: {e}\nin {body}")))?;
            same_lin(cod, &rd, &ed, seed)
                .map_err(|e| TestCaseError::fail(format!("derivative: {e}\nin {body}")))?;
        }
    }
    Ok(())
}

#[test]
fn engine_runs_derivative_code_like_the_reference_evaluator() {
    for cfg in [
        Config::default(),
        Config {
            array_bias: true,
            ..Config::default()
        },
        Config {
            sum_bias: true,
            ..Config::default()
        },
    ] {
        common::runner(common::cases(120))
            .run(&(program(cfg), any::<u64>()), |(p, seed)| {
                derivatives_agree(&p, seed)
            })
            .unwrap_or_else(|e| panic!("{e}"));
    }
}

// ----- the engine's mechanisms, by hand -----

fn load(src: &str) -> chad::source::term::Entry {
    let prog = chad::source::load(src, &chad::prim::Registry::builtin()).expect("loads");
    prog.entry(prog.defs.len() - 1)
}

fn run_source(src: &str, args: &[Value]) -> chad::Result<Value> {
    let entry = load(src);
    let (params, body) = embed::entry(&entry);
    Code::compile(&params, &body).run(args)
}

fn reals(xs: &[f64]) -> Value {
    Value::reals(xs.to_vec())
}

#[test]
fn a_variable_used_once_inside_a_loop_is_not_moved_out() {
    // `ys` occurs once, inside the body of `build`: every iteration must still see it.
    let src = "def f (xs : Array Real) : Array Real =
                 let ys = map (\\x -> 2.0 * x) xs in build 3 (\\i -> ys ! i + 1.0)";
    let v = run_source(src, &[reals(&[1.0, 2.0, 3.0])]).unwrap();
    assert_eq!(v.expect_reals(), &[3.0, 5.0, 7.0]);
    // ... and inside a closure applied several times.
    let src = "def g (a : Real) (xs : Array Real) : Array Real =
                 let b = a * a in let f = \\(x : Real) -> b * x in map f xs";
    let v = run_source(src, &[Value::Real(3.0), reals(&[1.0, 2.0])]).unwrap();
    assert_eq!(v.expect_reals(), &[9.0, 18.0]);
}

#[test]
fn inlined_loops_nest_and_shadow_nothing() {
    let src = "def f (n : Int) : Array (Array Real) =
                 build n (\\i -> build n (\\j -> toReal (i * 10 + j)))";
    let v = run_source(src, &[Value::Int(2)]).unwrap();
    assert_eq!(v.to_string(), "[[0.0, 1.0], [10.0, 11.0]]");
    let src = "def g (xs : Array Real) (ys : Array Real) : Array Real =
                 map2 (\\x y -> x * y + sum (map (\\z -> z * x) ys)) xs ys";
    let v = run_source(src, &[reals(&[1.0, 2.0]), reals(&[3.0, 4.0])]).unwrap();
    assert_eq!(v.expect_reals(), &[3.0 + 7.0, 8.0 + 14.0]);
}

#[test]
fn closures_capture_their_environment_at_creation() {
    let src = "def f (x : Real) : Real =
                 let adders = build 3 (\\i -> \\(y : Real) -> y + toReal i * x) in
                 (adders ! 0) 1.0 + (adders ! 2) 1.0";
    let v = run_source(src, &[Value::Real(5.0)]).unwrap();
    assert_eq!(v.expect_real(), 1.0 + 11.0);
}

#[test]
fn runtime_errors_carry_the_position_of_their_node() {
    let src = "def f (xs : Array Real) : Real =\n  xs ! 5";
    let e = run_source(src, &[reals(&[1.0])]).unwrap_err();
    assert!(e.message().contains("index 5"), "{}", e.message());
    let span = e.span().expect("a position");
    assert_eq!(&src[span.start as usize..span.end as usize], "xs ! 5");
    let e = run_source(
        "def g (n : Int) : Array Real = build (n - 5) (\\i -> 1.0)",
        &[Value::Int(2)],
    )
    .unwrap_err();
    assert!(e.message().contains("build"), "{}", e.message());
    let e = run_source("def h (n : Int) : Int = n * n", &[Value::Int(i64::MAX)]).unwrap_err();
    assert!(e.message().contains("overflow"), "{}", e.message());
}

#[test]
fn a_long_let_chain_runs_without_overflowing_the_stack() {
    let src = chad::random::straight_line_source(20_000, 7);
    let entry = load(&src);
    let (params, body) = embed::entry(&entry);
    let args: Vec<Value> = entry
        .params
        .iter()
        .map(|p| match p.ty {
            chad::types::Type::Real => Value::Real(0.5),
            _ => reals(&[0.25, -1.5, 2.0]),
        })
        .collect();
    let reference = chad::eval::eval_entry(&entry, &args).unwrap();
    let engine = Code::compile(&params, &body).run(&args).unwrap();
    assert_eq!(reference.same(&engine), Some(true));
}

#[test]
fn a_term_with_an_unbound_variable_is_an_internal_error() {
    let x = Var::fresh("x", Ty::Real);
    let t = Term::mk(K::Var(x));
    let e = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        Code::compile(&[], &t);
    }))
    .expect_err("compiling must panic");
    let msg = common::panic_message(&e);
    assert!(msg.contains("internal error"), "{msg}");
}
