//! Dual-numbers reverse AD ([`chad::internals::dual_reverse`]) against independent routes to the same
//! derivatives, on the random well-typed programs of the logical-relation tests (higher-order
//! insides: closures, functions passed, returned and stored; sums; arrays):
//!
//! * its value is the direct evaluator's, exactly, and where the evaluator fails it fails with
//!   the same error at the same position;
//! * its vector-Jacobian products agree with reverse CHAD's (which shares nothing with it but
//!   the primitives' evaluation);
//! * the dot-product test against finite differences: `<vjp(v), dx> ≈ <v, (f(x+h dx) −
//!   f(x−h dx)) / 2h>`;
//! * the naive algorithm and the fallback through registered derivatives agree with it;
//! * the sharing chain `x_k = op(x_{k-1}, x_{k-1})` takes a number of backpropagator calls
//!   linear in `k`, and the naive algorithm 2^k.
//!
//! `CHAD_PROPTEST_CASES` raises the number of random programs (see `tests/common`).

mod common;

use chad::Error;
use chad::Value;
use chad::internals::ad::Vjp;
use chad::internals::dual_reverse::{DualReverse, Options, Output};
use chad::internals::oracle::fd;
use chad::internals::prim::{Derivative, Primitive, Registry};
use chad::internals::random::{self, Config, TestProgram};
use chad::internals::source::term::Entry;
use chad::internals::target::term::{LTerm, Term};
use chad::internals::types::Type;
use common::{ARRAYS, Coverage, Requirements, SUMS, cases, runner};
use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::TestRunner;
use std::panic::{AssertUnwindSafe, catch_unwind};

fn functions(arrays: bool) -> Config {
    Config {
        sums: false,
        conditionals: false,
        arrays,
        functions: true,
        higher_order_result: false,
        ..Config::default()
    }
}

fn array_heavy() -> Config {
    Config {
        sums: true,
        conditionals: true,
        array_bias: true,
        ..functions(true)
    }
}

fn sum_heavy() -> Config {
    Config {
        sums: true,
        conditionals: true,
        sum_bias: true,
        ..functions(true)
    }
}

const NONE: Requirements = &[];

fn close(a: f64, b: f64, rel: f64) -> bool {
    a == b || (a - b).abs() <= rel * (1.0 + a.abs().max(b.abs()))
}

fn all_close(a: &[f64], b: &[f64], rel: f64) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| close(*x, *y, rel))
}

fn finite(xs: &[f64]) -> bool {
    xs.iter().all(|x| x.is_finite())
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn real(r: &mut TestRunner) -> f64 {
    (-2.0f64..2.0).new_tree(r).unwrap().current()
}

fn leaves(vs: &[Value]) -> Vec<f64> {
    vs.iter().flat_map(fd::leaves).collect()
}

fn same_error(got: &Error, want: &Error) -> Result<(), String> {
    if got.kind() == want.kind() && got.message() == want.message() && got.span() == want.span() {
        Ok(())
    } else {
        Err(format!(
            "dual numbers fail with `{}` ({:?}, {:?}), the evaluator with `{}` ({:?}, {:?})",
            got.message(),
            got.kind(),
            got.span(),
            want.message(),
            want.kind(),
            want.span()
        ))
    }
}

/// Runs the engine with a random output cotangent `v` on `n` random programs (drawn until
/// reverse CHAD supports them), then `check(program, v, output)` where the value and the
/// gradient are finite; the value must be the evaluator's, and where the evaluator fails the
/// engine must fail alike. Returns how many programs `check` accepted (`Ok(true)`).
fn for_programs(
    cfg: Config,
    n: u32,
    options: Options,
    required: Requirements,
    mut check: impl FnMut(&TestProgram, &Value, &Output, &mut TestRunner) -> Result<bool, String>,
) -> u32 {
    let mut r = runner(n);
    let mut rng = runner(n);
    let strategy = random::program(cfg);
    let mut coverage = Coverage::default();
    let (mut failing, mut nonzero) = (0, 0);
    for _ in 0..n {
        let p = common::supported_program(&strategy, &mut r);
        let outcome = catch_unwind(AssertUnwindSafe(|| -> Result<bool, String> {
            let engine =
                DualReverse::new(&p.entry, options.clone()).map_err(|e| format!("new: {e:?}"))?;
            let want = chad::internals::eval::eval_entry(&p.entry, &p.inputs);
            let ty = p.entry.body.ty.clone();
            match want {
                Err(e) => {
                    failing += 1;
                    // The cotangent is never looked at: the primal fails first.
                    match engine.vjp(&p.inputs, &Value::Unit) {
                        Ok(out) => Err(format!("dual numbers give {} where it fails", out.value)),
                        Err(got) => same_error(&got, &e).map(|()| false),
                    }
                }
                Ok(y) => {
                    let v = fd::tangent_with(&ty, &y, &mut || real(&mut rng));
                    let out = engine
                        .vjp(&p.inputs, &v)
                        .map_err(|e| format!("dual numbers failed: {e:?}"))?;
                    if out.value.same(&y) != Some(true) {
                        return Err(format!("value {} but the evaluator gives {y}", out.value));
                    }
                    if !finite(&fd::leaves(&y)) || !finite(&leaves(&out.gradient)) {
                        return Ok(false);
                    }
                    let accepted = check(&p, &v, &out, &mut rng)?;
                    nonzero += (accepted && leaves(&out.gradient).iter().any(|g| *g != 0.0)) as u32;
                    Ok(accepted)
                }
            }
        }))
        .unwrap_or_else(|e| Err(format!("panic: {}", common::panic_message(&e))));
        match outcome {
            Ok(true) => coverage.record(random::features(&p)),
            Ok(false) => {}
            Err(e) => panic!("{e}\nprogram:\n{p:?}"),
        }
    }
    eprintln!(
        "{} programs checked ({nonzero} with a gradient not zero), {failing} failed alike at \
         their inputs",
        coverage.programs
    );
    // Not vacuous: random programs often ignore their inputs, but a quarter of those compared
    // must have a gradient that is not zero (about 40% do: `sign`, `argmax`, `%` and the other
    // builtins with a zero derivative or a discrete result make some constant).
    assert!(4 * nonzero >= coverage.programs, "too many zero gradients");
    coverage.require(required);
    coverage.programs
}

/// The engine's vector-Jacobian products are reverse CHAD's.
fn agrees_with_reverse_chad(cfg: Config, n: u32, required: Requirements) {
    let checked = for_programs(cfg, n, Options::default(), required, |p, v, out, _| {
        let vjp = Vjp::new(&p.entry).map_err(|e| e.to_string())?;
        let (_, want) = vjp
            .vjp(&p.inputs, v)
            .map_err(|e| format!("reverse CHAD failed: {e:?}"))?;
        let got = &out.gradient;
        let (g, w) = (leaves(got), leaves(&want));
        if !finite(&w) || !finite(&g) {
            return Ok(false);
        }
        if !all_close(&g, &w, 1e-9) {
            return Err(format!(
                "cotangent {v}: dual numbers give {got:?}, reverse CHAD {want:?}"
            ));
        }
        Ok(true)
    });
    // Programs whose gradient is not finite (the newer builtins with restricted domains,
    // `asin`, `acos`, `log1p`, ..., meet points outside them) or that fail are not compared:
    // 74 of 100 are at the fixed seed.
    assert!(
        checked >= n * 2 / 3,
        "only {checked} of {n} programs checked"
    );
}

#[test]
fn agrees_with_reverse_chad_on_higher_order_programs() {
    agrees_with_reverse_chad(functions(false), cases(200), NONE);
}

#[test]
fn agrees_with_reverse_chad_on_programs_with_arrays() {
    agrees_with_reverse_chad(functions(true), cases(200), NONE);
}

#[test]
fn agrees_with_reverse_chad_on_array_programs() {
    agrees_with_reverse_chad(array_heavy(), cases(200), ARRAYS);
}

#[test]
fn agrees_with_reverse_chad_on_sum_programs() {
    agrees_with_reverse_chad(sum_heavy(), cases(200), SUMS);
}

/// Richardson-extrapolated central differences along `dx`; `None` where two step sizes
/// disagree (a kink or a jump nearby) or a value is not finite.
fn finite_difference(p: &TestProgram, dx: &[Value]) -> Option<Vec<f64>> {
    let d = |h: f64| -> Option<Vec<f64>> {
        let t = fd::jvp(&p.entry, &p.inputs, dx, h).ok()?;
        let l = fd::leaves(&t);
        finite(&l).then_some(l)
    };
    let (d1, d2, d3) = (d(1e-3)?, d(5e-4)?, d(2.5e-4)?);
    let rich = |a: &[f64], b: &[f64]| -> Vec<f64> {
        a.iter().zip(b).map(|(a, b)| (4.0 * b - a) / 3.0).collect()
    };
    let (r1, r2) = (rich(&d1, &d2), rich(&d2, &d3));
    (all_close(&r1, &r2, 1e-7) && r2.iter().all(|x| x.abs() < 1e6)).then_some(r2)
}

/// `<vjp(v), dx> = <v, J dx>` with `J dx` by finite differences (reverse CHAD not involved).
fn dot_product_test_with_finite_differences(cfg: Config, n: u32) {
    let (mut skipped, mut compared) = (0, 0);
    let checked = for_programs(cfg, n, Options::default(), NONE, |p, v, g, rng| {
        let tys = p.entry.param_types();
        let dx: Vec<Value> = tys
            .iter()
            .zip(&p.inputs)
            .map(|(t, x)| fd::tangent_with(t, x, &mut || real(rng)))
            .collect();
        let Some(jdx) = finite_difference(p, &dx) else {
            skipped += 1;
            return Ok(false);
        };
        let lhs = dot(&leaves(&g.gradient), &leaves(&dx));
        let rhs = dot(&fd::leaves(v), &jdx);
        if !lhs.is_finite() {
            return Ok(false);
        }
        if !close(lhs, rhs, 1e-5) {
            return Err(format!(
                "<vjp(v), dx> = {lhs}, <v, J dx> = {rhs} by finite differences (v = {v}, \
                 dx = {dx:?}, gradient {:?})",
                g.gradient
            ));
        }
        compared += 1;
        Ok(true)
    });
    eprintln!("{compared} compared with finite differences, {skipped} skipped");
    assert!(checked >= n / 2, "only {checked} of {n} programs checked");
    assert!(compared >= 4 * skipped, "too many programs skipped");
}

#[test]
fn dot_product_test_with_finite_differences_on_higher_order_programs() {
    dot_product_test_with_finite_differences(functions(true), cases(200));
}

#[test]
fn dot_product_test_with_finite_differences_on_array_and_sum_programs() {
    let both = Config {
        sum_bias: true,
        ..array_heavy()
    };
    dot_product_test_with_finite_differences(both, cases(200));
}

/// Another configuration of the engine gives the same derivatives, to rounding.
fn agrees_with(options: Options, cfg: Config, n: u32) {
    let checked = for_programs(cfg, n, Options::default(), NONE, |p, v, a, _| {
        let b = DualReverse::new(&p.entry, options.clone())
            .and_then(|e| e.vjp(&p.inputs, v))
            .map_err(|e| e.to_string())?;
        let (ga, gb) = (leaves(&a.gradient), leaves(&b.gradient));
        if !finite(&ga) || !finite(&gb) {
            return Ok(false);
        }
        if !all_close(&ga, &gb, 1e-12) {
            return Err(format!(
                "{options:?} gives {:?}, the default {:?}",
                b.gradient, a.gradient
            ));
        }
        // Each backpropagator runs at most once in the final algorithm, at least once naively.
        if a.stats.calls > a.stats.ids as u64 || (options.naive && b.stats.calls < a.stats.calls) {
            return Err(format!("calls: {:?} and {:?}", a.stats, b.stats));
        }
        Ok(true)
    });
    // Programs whose gradient is not finite (the newer builtins with restricted domains,
    // `asin`, `acos`, `log1p`, ..., meet points outside them) or that fail are not compared:
    // 74 of 100 are at the fixed seed.
    assert!(
        checked >= n * 2 / 3,
        "only {checked} of {n} programs checked"
    );
}

#[test]
fn the_naive_algorithm_agrees() {
    let naive = Options {
        naive: true,
        max_naive_calls: 1 << 24,
        ..Options::default()
    };
    agrees_with(naive, array_heavy(), cases(100));
}

#[test]
fn registered_derivatives_agree_with_the_table() {
    let generic = Options {
        generic_prims: true,
        ..Options::default()
    };
    agrees_with(generic, functions(true), cases(100));
}

fn entry_in(src: &str, reg: &Registry) -> Entry {
    let p = chad::internals::source::load(src, reg).unwrap_or_else(|e| panic!("{src}: {e:?}"));
    p.entry(p.defs.len() - 1)
}

fn entry(src: &str) -> Entry {
    entry_in(src, &Registry::builtin())
}

/// `def chain (x : Real) : Real = let x1 = x * x in ... xk` with each step using the previous
/// value twice.
fn sharing_chain(k: usize) -> Entry {
    let mut s = String::from("def chain (x : Real) : Real =\n  let x0 = x in\n");
    for i in 1..=k {
        s.push_str(&format!(
            "  let x{i} = x{p} * x{p} * 0.5 + 0.5 in\n",
            p = i - 1
        ));
    }
    s.push_str(&format!("  x{k}\n"));
    entry(&s)
}

fn calls(e: &Entry, naive: bool) -> u64 {
    let options = Options {
        naive,
        ..Options::default()
    };
    DualReverse::new(e, options)
        .unwrap()
        .grad(&[Value::Real(0.75)])
        .unwrap()
        .stats
        .calls
}

/// The paper's `t_bad`: the final algorithm makes a number of backpropagator calls linear in
/// `k` (exactly three per step: the product, the scaling and the addition; plus the input),
/// the naive one doubles with every step.
#[test]
fn sharing_stays_linear_and_naive_is_exponential() {
    for k in [1, 2, 5, 10, 100, 1000, 10_000] {
        assert_eq!(calls(&sharing_chain(k), false), 3 * k as u64 + 1, "k = {k}");
    }
    let naive: Vec<u64> = (1..=14).map(|k| calls(&sharing_chain(k), true)).collect();
    for (k, w) in naive.windows(2).enumerate() {
        // calls(k) = 2 calls(k - 1) + 3: doubling, plus the step's own three.
        assert_eq!(w[1], 2 * w[0] + 3, "k = {}", k + 2);
    }
    assert!(naive[13] > 1 << 15);
    // Both give the same gradient: d/dx of the chain at 0.75.
    let e = sharing_chain(12);
    let g = |naive| {
        let o = Options {
            naive,
            ..Options::default()
        };
        DualReverse::new(&e, o)
            .unwrap()
            .grad(&[Value::Real(0.75)])
            .unwrap()
            .gradient[0]
            .expect_real()
    };
    let (mut x, mut d) = (0.75f64, 1.0f64);
    for _ in 0..12 {
        d *= x; // d/dx (x² / 2 + 1/2) = x
        x = x * x * 0.5 + 0.5;
    }
    assert!(close(g(false), d, 1e-14) && close(g(true), d, 1e-14));
    // The naive budget is an error, not a hang.
    let o = Options {
        naive: true,
        max_naive_calls: 1000,
        ..Options::default()
    };
    let err = DualReverse::new(&sharing_chain(20), o)
        .unwrap()
        .grad(&[Value::Real(0.75)])
        .unwrap_err();
    assert!(err.message().contains("more than 1000"), "{err:?}");
}

/// Every partial operation failing inside each kind of context: the engine fails with the
/// evaluator's runtime error at the same position, and does not panic.
#[test]
fn fails_like_the_evaluator_inside_every_context() {
    let failing = [
        "[x, 2.0] ! 2",
        "[x] ! (0 - 1)",
        "sum (map2 (\\(a : Real) (b : Real) -> a * b) [x] [x, 1.0])",
        "sum (build (0 - 1) (\\(i : Int) -> x))",
        "sum (replicate (0 - 2) x)",
        "dot [x] [x, 2.0]",
        "toReal (1 / (2 - 2))",
        "toReal (floor (x / 0.0))",
    ];
    let contexts = [
        "E",
        "sum (map (\\(y : Real) -> y * x + E) [1.0, 2.0])",
        "sum (build 2 (\\(i : Int) -> x * toReal i + E))",
        "case (if x > 0.0 then (inl x : Real + Real) else (inr x : Real + Real)) of \
         inl a -> a * E | inr b -> b",
        "let f = \\(y : Real) -> y * E in f x + f 2.0",
        "sum (map2 (\\(r : Array Real) (c : Real) -> c * sum r + E) [[x], [1.0]] [x, 2.0])",
    ];
    for e in failing {
        for c in contexts {
            let src = format!(
                "def main (x : Real) : Real =\n  {}\n",
                c.replace('E', &format!("({e})"))
            );
            let entry = entry(&src);
            let args = [Value::Real(0.75)];
            let want = chad::internals::eval::eval_entry(&entry, &args).expect_err(&src);
            assert!(want.span().is_some());
            for naive in [false, true] {
                let o = Options {
                    naive,
                    ..Options::default()
                };
                let got = catch_unwind(AssertUnwindSafe(|| {
                    DualReverse::new(&entry, o).unwrap().grad(&args)
                }))
                .unwrap_or_else(|p| panic!("panics ({}) on\n{src}", common::panic_message(&p)))
                .expect_err(&src);
                same_error(&got, &want).unwrap_or_else(|m| panic!("{m} on\n{src}"));
            }
        }
    }
}

#[test]
fn bad_inputs_and_unsupported_programs_are_errors() {
    use chad::ErrorKind;
    let e = entry("def f (x : Real) (n : Int) : (Real, Array Real) = (x, [x])");
    let d = DualReverse::new(&e, Options::default()).unwrap();
    let args = [Value::Real(1.0), Value::Int(2)];
    // Wrong argument count and types: the evaluator's messages.
    let err = d.vjp(&args[..1], &Value::Unit).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Argument);
    let err = d
        .vjp(&[Value::Int(1), Value::Int(2)], &Value::Unit)
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Argument);
    // A cotangent of the wrong shape.
    let ct = Value::pair(Value::Real(1.0), Value::reals(vec![1.0, 2.0]));
    let err = d.vjp(&args, &ct).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Argument);
    assert!(err.message().starts_with("cotangent: "), "{err:?}");
    // grad of a non-Real result.
    assert_eq!(d.grad(&args).unwrap_err().kind(), ErrorKind::Argument);
    // vjp with a good cotangent; the Int argument's cotangent is ().
    let ct = Value::pair(Value::Real(2.0), Value::reals(vec![3.0]));
    let out = d.vjp(&args, &ct).unwrap();
    assert_eq!(out.gradient[0].expect_real(), 5.0);
    assert!(matches!(out.gradient[1], Value::Unit));
    // Higher-order parameters and results.
    for src in [
        "def f (g : Real -> Real) : Real = g 1.0",
        "def f (x : Real) : Real -> Real = \\(y : Real) -> x * y",
    ] {
        let err = DualReverse::new(&entry(src), Options::default())
            .err()
            .unwrap();
        assert_eq!(err.kind(), ErrorKind::Unsupported, "{src}");
    }
    // A primitive without a derivative, reported at its position even where not reached.
    let mut reg = Registry::builtin();
    reg.register(Primitive::function(
        "logcosh",
        vec![Type::Real],
        Type::Real,
        |x| Ok(Value::Real(x.expect_real().cosh().ln())),
    ))
    .unwrap();
    let e = entry_in(
        "def f (x : Real) : Real = if x > 5.0 then logcosh x else x",
        &reg,
    );
    let err = DualReverse::new(&e, Options::default()).err().unwrap();
    assert_eq!(err.kind(), ErrorKind::Unsupported);
    assert_eq!(err.message(), "primitive `logcosh` has no derivative");
    assert!(err.span().is_some());
}

/// User-registered primitives go through their registered derivatives: a scalar one, one
/// with a tuple result (a block on the tape) and a native array kernel (sum of squares, with
/// its transposed derivative as a native linear map). Checked against reverse CHAD and, on
/// every input direction, finite differences.
#[test]
fn user_primitives_use_their_registered_derivatives() {
    use chad::internals::target::linear::LinFun;
    use chad::internals::target::term::LinPrim;
    use chad::internals::target::types::{LTy, Ty};
    let mut reg = Registry::builtin();
    reg.register(
        Primitive::function("logcosh", vec![Type::Real], Type::Real, |x| {
            Ok(Value::Real(x.expect_real().cosh().ln()))
        })
        .with_derivative(Derivative::scalar(|x| {
            Term::prim(&chad::internals::prim::op("tanh"), vec![x.clone()])
        })),
    )
    .unwrap();
    // polar r t = (r cos t, r sin t).
    let call = |name: &str, args: Vec<Term>| Term::prim(&chad::internals::prim::op(name), args);
    reg.register(
        Primitive::function(
            "polar",
            vec![Type::Real, Type::Real],
            Type::prod(Type::Real, Type::Real),
            |x| {
                let (r, t) = x.expect_pair();
                let (r, t) = (r.expect_real(), t.expect_real());
                Ok(Value::pair(
                    Value::Real(r * t.cos()),
                    Value::Real(r * t.sin()),
                ))
            },
        )
        .with_derivative(Derivative::terms(
            move |x, d| {
                let (r, t) = (&x[0], &x[1]);
                let (c, s) = (call("cos", vec![t.clone()]), call("sin", vec![t.clone()]));
                let rs = call("mul", vec![r.clone(), s.clone()]);
                let rc = call("mul", vec![r.clone(), c.clone()]);
                LTerm::pair(
                    LTerm::plus(
                        LTerm::scale(c, d[0].clone()),
                        LTerm::scale(call("neg", vec![rs]), d[1].clone()),
                    ),
                    LTerm::plus(
                        LTerm::scale(s, d[0].clone()),
                        LTerm::scale(rc, d[1].clone()),
                    ),
                )
            },
            move |x, v| {
                let (r, t) = (&x[0], &x[1]);
                let (c, s) = (call("cos", vec![t.clone()]), call("sin", vec![t.clone()]));
                let (vx, vy) = (LTerm::fst(v.clone()), LTerm::snd(v.clone()));
                let rs = call("mul", vec![r.clone(), s.clone()]);
                let rc = call("mul", vec![r.clone(), c.clone()]);
                vec![
                    LTerm::plus(LTerm::scale(c, vx.clone()), LTerm::scale(s, vy.clone())),
                    LTerm::plus(
                        LTerm::scale(call("neg", vec![rs]), vx),
                        LTerm::scale(rc, vy),
                    ),
                ]
            },
        )),
    )
    .unwrap();
    // sumsq xs = Σ xs_i², with native kernels (`<2 xs, ·>` and `v ↦ v · 2 xs`).
    let twice = |xs: &Value| std::rc::Rc::new(xs.expect_reals().iter().map(|x| 2.0 * x).collect());
    let arr = Type::array(Type::Real);
    reg.register(
        Primitive::function("sumsq", vec![arr], Type::Real, |x| {
            Ok(Value::Real(x.expect_reals().iter().map(|a| a * a).sum()))
        })
        .with_derivative(Derivative::native(
            LinPrim::new(
                "dsumsq",
                Ty::array(Ty::Real),
                LTy::array(LTy::Real),
                LTy::Real,
                move |x| Ok(LinFun::dot_with(twice(x))),
            ),
            LinPrim::new(
                "dsumsqT",
                Ty::array(Ty::Real),
                LTy::Real,
                LTy::array(LTy::Real),
                move |x| Ok(LinFun::scale_array(twice(x))),
            ),
        )),
    )
    .unwrap();
    let e = entry_in(
        "def f (r : Real) (t : Real) (xs : Array Real) : Real =
           let p = polar (logcosh r) (t * r) in
           let q = polar (fst p) (snd p) in
           fst q * snd p + sumsq (map (\\(x : Real) -> x * fst q) xs) + snd q",
        &reg,
    );
    let args = [
        Value::Real(0.3),
        Value::Real(-0.7),
        Value::reals(vec![0.5, -1.5, 2.0]),
    ];
    let want = Vjp::new(&e).unwrap().grad(&args).unwrap();
    for naive in [false, true] {
        let o = Options {
            naive,
            ..Options::default()
        };
        let out = DualReverse::new(&e, o).unwrap().grad(&args).unwrap();
        assert_eq!(out.value.same(&want.0), Some(true));
        assert!(
            all_close(&leaves(&out.gradient), &leaves(&want.1), 1e-12),
            "{:?} vs reverse CHAD {:?}",
            out.gradient,
            want.1
        );
    }
    let g = leaves(
        &DualReverse::new(&e, Options::default())
            .unwrap()
            .grad(&args)
            .unwrap()
            .gradient,
    );
    for (k, dx) in fd::basis(&e.param_types(), &args).iter().enumerate() {
        let t = fd::jvp(&e, &args, dx, 1e-6).unwrap().expect_real();
        assert!(
            close(g[k], t, 1e-6),
            "∂{k}: {} vs finite differences {t}",
            g[k]
        );
    }
}

#[test]
fn deep_programs_on_a_small_thread_stack() {
    let h = std::thread::Builder::new()
        .stack_size(256 * 1024)
        .spawn(|| {
            let e = entry(&chad::internals::random::straight_line_source(10_000, 3));
            let args = [Value::Real(0.5), Value::reals(vec![1.0, -2.0, 0.25])];
            let want = chad::internals::eval::eval_entry(&e, &args).unwrap();
            let out = DualReverse::new(&e, Options::default())
                .unwrap()
                .grad(&args)
                .unwrap();
            assert_eq!(out.value.same(&want), Some(true));
            // A nested expression 10⁴ deep, run naively too (one call per node: no sharing).
            let n = 10_000;
            let nested = entry(&format!(
                "def f (x : Real) : Real = {}x{}",
                "(x + ".repeat(n),
                ")".repeat(n)
            ));
            for naive in [false, true] {
                let o = Options {
                    naive,
                    ..Options::default()
                };
                let out = DualReverse::new(&nested, o)
                    .unwrap()
                    .grad(&[Value::Real(1.0)])
                    .unwrap();
                assert_eq!(out.gradient[0].expect_real(), (n + 1) as f64);
            }
            // A chain of closures, each calling the previous one.
            let n = 5_000;
            let mut src =
                String::from("def f (x : Real) : Real =\n  let g0 = \\(y : Real) -> y * x in\n");
            for k in 1..n {
                src.push_str(&format!(
                    "  let g{k} = \\(y : Real) -> g{} y + x in\n",
                    k - 1
                ));
            }
            src.push_str(&format!("  g{} 1.0\n", n - 1));
            let out = DualReverse::new(&entry(&src), Options::default())
                .unwrap()
                .grad(&[Value::Real(1.0)])
                .unwrap();
            assert_eq!(out.gradient[0].expect_real(), n as f64);
        })
        .unwrap();
    h.join().expect("no stack overflow or panic");
}

/// Runs the `chad` binary; (exit status, stdout, stderr).
fn chad_cli(args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_chad"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run chad");
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(!err.contains("panicked"), "chad panicked: {err}");
    (
        out.status.code().expect("exited normally"),
        String::from_utf8(out.stdout).unwrap(),
        err,
    )
}

fn json_leaves(j: &serde_json::Value, out: &mut Vec<f64>) {
    match j {
        serde_json::Value::Number(n) => out.push(n.as_f64().unwrap()),
        serde_json::Value::Array(xs) => xs.iter().for_each(|x| json_leaves(x, out)),
        serde_json::Value::Object(o) => o.values().for_each(|x| json_leaves(x, out)),
        _ => {}
    }
}

/// `chad grad --engine dual` prints what `chad grad` prints (to rounding: reverse CHAD runs the
/// optimised program, the engine the program as written), in text and JSON, on the examples.
#[test]
fn cli_grad_engine_dual_prints_what_grad_prints() {
    let cases: [&[&str]; 5] = [
        &[
            "examples/fig1b.chad",
            "--arg",
            "1",
            "--arg",
            "2",
            "--arg",
            "3",
            "--arg",
            "4",
        ],
        &["examples/fig2b.chad", "--arg", "1.5", "--arg", "[1, 2, 3]"],
        &[
            "examples/ml.chad",
            "--arg",
            "0.7",
            "--arg",
            "[0.5, -1.0, 2.0]",
        ],
        &["examples/gmm.chad", "--args-file", "examples/gmm.args.json"],
        &["examples/mlp.chad", "--args-file", "examples/mlp.args.json"],
    ];
    for case in cases {
        let run = |extra: &[&str]| {
            let mut args = vec!["grad"];
            args.extend_from_slice(case);
            args.extend_from_slice(extra);
            let (code, out, err) = chad_cli(&args);
            assert_eq!(code, 0, "{args:?}: {err}");
            out
        };
        let (chad, dual) = (run(&["--json"]), run(&["--engine", "dual", "--json"]));
        let parse = |s: &str| {
            let j: serde_json::Value = serde_json::from_str(s).unwrap();
            let mut l = Vec::new();
            json_leaves(&j, &mut l);
            (l, j["gradient"].as_array().unwrap().len())
        };
        let ((a, n), (b, m)) = (parse(&chad), parse(&dual));
        assert_eq!(n, m, "{case:?}");
        assert!(all_close(&a, &b, 1e-10), "{case:?}:\n{chad}\n{dual}");
        // The text output has the same lines (names), whatever the last digits.
        let names = |s: &str| -> Vec<String> {
            s.lines()
                .map(|l| l.split('=').next().unwrap().to_string())
                .collect()
        };
        assert_eq!(names(&run(&[])), names(&run(&["--engine", "dual"])));
    }
    // Naively too, on a program without much sharing.
    let naive = run_naive(&[
        "grad",
        "examples/fig2b.chad",
        "--arg",
        "1.5",
        "--arg",
        "[1, 2, 3]",
    ]);
    assert!(naive.contains("x1 = 6.0"), "{naive}");
}

fn run_naive(args: &[&str]) -> String {
    let mut a = args.to_vec();
    a.extend_from_slice(&["--engine", "dual", "--naive"]);
    let (code, out, err) = chad_cli(&a);
    assert_eq!(code, 0, "{err}");
    out
}

/// Runtime errors are reported as `chad grad` reports them (the evaluator's message and
/// position), with exit status 1; `--naive` needs `--engine dual`.
#[test]
fn cli_grad_engine_dual_errors() {
    let dir = std::env::temp_dir().join(format!("chad-dual-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("oob.chad");
    std::fs::write(
        &path,
        "def f (xs : Array Real) : Real =\n  let g = \\(i : Int) -> xs ! i in\n  g 0 + g 3\n",
    )
    .unwrap();
    let p = path.to_str().unwrap();
    let (c1, _, e1) = chad_cli(&["grad", p, "--arg", "[1.0, 2.0]"]);
    let (c2, _, e2) = chad_cli(&["grad", p, "--arg", "[1.0, 2.0]", "--engine", "dual"]);
    assert_eq!((c1, c2), (1, 1));
    assert!(
        e2.contains("index 3 out of range") && e2.contains("oob.chad:2:"),
        "{e2}"
    );
    assert_eq!(e1, e2);
    let (c, _, e) = chad_cli(&["grad", p, "--arg", "[1.0, 2.0]", "--naive"]);
    assert_eq!(c, 2, "{e}");
    let (c, _, e) = chad_cli(&["grad", p, "--arg", "[1.0]", "--engine", "chad", "--naive"]);
    assert_eq!(c, 1, "{e}");
    assert!(e.contains("--naive needs --engine dual"), "{e}");
    let (c, _, e) = chad_cli(&["grad", p, "--arg", "[1.0, 2.0]", "--engine", "tape"]);
    assert_eq!(c, 2, "{e}");
}

/// `chad bench` times the baseline beside reverse CHAD, unless told not to.
#[test]
fn cli_bench_reports_the_baseline() {
    let args = [
        "bench",
        "examples/fig2b.chad",
        "--arg",
        "1.5",
        "--arg",
        "[1, 2, 3]",
    ];
    let json = |extra: &[&str]| -> serde_json::Value {
        let mut a = args.to_vec();
        a.extend_from_slice(&["--repeat", "2", "--json"]);
        a.extend_from_slice(extra);
        let (code, out, err) = chad_cli(&a);
        assert_eq!(code, 0, "{err}");
        serde_json::from_str(&out).unwrap()
    };
    let j = json(&[]);
    let (d, r) = (
        j["dual_reverse_s"].as_f64().unwrap(),
        j["reverse_s"].as_f64().unwrap(),
    );
    assert!(d > 0.0 && close(j["dual_over_reverse"].as_f64().unwrap(), d / r, 1e-12));
    let j = json(&["--no-dual"]);
    assert!(j.get("dual_reverse_s").is_none() && j.get("dual_over_reverse").is_none());
    let (code, out, _) = chad_cli(&args);
    assert_eq!(code, 0);
    assert!(out.lines().any(|l| l.starts_with("dual ")), "{out}");
}

#[test]
fn agrees_with_reverse_chad_on_loop_programs() {
    // (Sums off: with them, too few of these programs have a gradient that is not zero.)
    let loops = Config {
        sums: false,
        conditionals: true,
        loops: true,
        ..functions(true)
    };
    agrees_with_reverse_chad(loops, cases(200), &[("loop", 0.5)]);
}

#[test]
fn agrees_with_reverse_chad_on_recursive_programs() {
    // (Sums off, as for loops: enough non-zero gradients.)
    let rec = Config {
        sums: false,
        conditionals: true,
        recursion: true,
        ..functions(true)
    };
    agrees_with_reverse_chad(rec, cases(200), &[("recursion", 0.5)]);
}
