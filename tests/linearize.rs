//! Reverse mode by linearize, unzip, transpose (`chad::internals::linearize`, `--via transpose`) against
//! reverse CHAD and finite differences, on random programs with first-order inputs and results:
//!
//! * the three routes agree: every row of the Jacobian by the transposed forward derivative
//!   equals reverse CHAD's, and its entries match central finite differences;
//! * the dot-product test `<transpose(l)(v), d> = <v, l(d)>` for the linear map `l` that
//!   [`chad::internals::linearize::linearize`] returns, at random tangents `d` and cotangents `v`;
//! * where a program fails at its inputs, the transposed route fails with the same error.
//!
//! Programs are those of `tests/ad_oracles.rs`: first-order ones, ones with higher-order
//! insides (closures), array-heavy and sum-heavy ones. Like `grad --via transpose`, the route
//! differentiates the optimised program. `CHAD_PROPTEST_CASES` raises the counts.

mod common;

use chad::Value;
use chad::internals::ad::Vjp;
use chad::internals::linearize::{linear_transpose, linearize, vjp_via_transpose};
use chad::internals::optimize::optimize;
use chad::internals::oracle::fd;
use chad::internals::random::{self, Config, TestProgram};
use chad::internals::simplify::simplify;
use chad::internals::types::Type;
use common::{ARRAYS, Coverage, Requirements, SUMS, cases, runner};
use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::TestRunner;
use std::panic::{AssertUnwindSafe, catch_unwind};

fn first_order() -> Config {
    Config {
        functions: false,
        higher_order_result: false,
        ..Config::default()
    }
}

fn with_closures() -> Config {
    Config {
        sums: false,
        conditionals: false,
        higher_order_result: false,
        ..Config::default()
    }
}

fn array_heavy() -> Config {
    Config {
        array_bias: true,
        ..Config::default()
    }
}

fn sum_heavy() -> Config {
    Config {
        sum_bias: true,
        ..Config::default()
    }
}

fn finite(v: &Value) -> bool {
    fd::leaves(v).iter().all(|x| x.is_finite())
}

fn close(a: f64, b: f64, rel: f64) -> bool {
    a == b || (a - b).abs() <= rel * (1.0 + a.abs().max(b.abs()))
}

fn all_close(a: &[f64], b: &[f64], rel: f64) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| close(*x, *y, rel))
}

fn real(r: &mut TestRunner) -> f64 {
    (-2.0f64..2.0).new_tree(r).unwrap().current()
}

/// Richardson-extrapolated central differences along `dx`; `None` where not smooth enough.
fn finite_difference(p: &TestProgram, dx: &[Value]) -> Option<Vec<f64>> {
    let d = |h: f64| -> Option<Vec<f64>> {
        let t = fd::jvp(&p.entry, &p.inputs, dx, h).ok()?;
        let l = fd::leaves(&t);
        l.iter().all(|x| x.is_finite()).then_some(l)
    };
    let (d1, d2, d3) = (d(1e-3)?, d(5e-4)?, d(2.5e-4)?);
    let rich = |a: &[f64], b: &[f64]| -> Vec<f64> {
        a.iter().zip(b).map(|(a, b)| (4.0 * b - a) / 3.0).collect()
    };
    let (r1, r2) = (rich(&d1, &d2), rich(&d2, &d3));
    (all_close(&r1, &r2, 1e-7) && r2.iter().all(|x| x.abs() < 1e6)).then_some(r2)
}

/// What happened to one program.
enum Outcome {
    /// Checked.
    Ran,
    /// Not comparable (non-finite values or derivatives).
    Skipped,
    /// The derivative could not be transposed (an unknown length).
    Untransposed(String),
}

/// Runs `check` on `n` random programs; panics on a failed check, and unless at least
/// `min_transposed` of the programs that ran could be transposed.
fn for_programs(
    cfg: Config,
    n: u32,
    required: Requirements,
    min_transposed: f64,
    mut check: impl FnMut(&TestProgram, &mut TestRunner) -> Result<Outcome, String>,
) {
    let mut r = runner(n);
    let mut rng = runner(n);
    let strategy = random::program(cfg);
    let mut coverage = Coverage::default();
    let (mut untransposed, mut failing, mut examples) = (0u32, 0u32, Vec::new());
    for _ in 0..n {
        let p = common::supported_program(&strategy, &mut r);
        let outcome = catch_unwind(AssertUnwindSafe(
            || match chad::internals::eval::eval_entry(&p.entry, &p.inputs) {
                Ok(y) if finite(&y) => check(&p, &mut rng),
                Ok(_) => Ok(Outcome::Skipped),
                Err(want) => {
                    failing += 1;
                    fails_alike(&p, &want)
                }
            },
        ))
        .unwrap_or_else(|e| Err(format!("panic: {}", common::panic_message(&e))));
        match outcome {
            Ok(Outcome::Ran) => coverage.record(random::features(&p)),
            Ok(Outcome::Skipped) => {}
            Ok(Outcome::Untransposed(e)) => {
                untransposed += 1;
                if examples.len() < 3 {
                    examples.push(format!("{e}\n{p:?}"));
                }
            }
            Err(e) => panic!("{e}\nprogram:\n{p:?}"),
        }
    }
    let ran = coverage.programs;
    eprintln!(
        "{ran} programs agree; {untransposed} not transposed; {failing} failed alike at their \
         inputs"
    );
    coverage.require(required);
    assert!(
        f64::from(ran) >= min_transposed * f64::from(ran + untransposed),
        "only {ran} of {} programs transposed; e.g.\n{}",
        ran + untransposed,
        examples.join("\n\n")
    );
    assert!(ran * 2 >= n, "only {ran} of {n} programs ran");
}

/// Where the evaluator fails at the inputs, the transposed route behaves as reverse CHAD on
/// the same (optimised, simplified) program: both fail with the same error, or both drop the
/// failing dead code alike and then reject the `()` cotangent alike; or it fails as the
/// evaluator does. (The optimiser and the
/// simplifier may delete dead code that fails, so the evaluator of the source program is not
/// the oracle here; the other route is.)
fn fails_alike(p: &TestProgram, want: &chad::Error) -> Result<Outcome, String> {
    let entry = optimize(&p.entry);
    let tvjp = match vjp_via_transpose(&entry) {
        Ok(v) => v,
        Err(e) if e.kind() == chad::ErrorKind::Unsupported => {
            return Ok(Outcome::Skipped);
        }
        Err(e) => return Err(format!("transposition failed: {}", e.message())),
    };
    let rvjp = Vjp::new(&entry)
        .map_err(|e| e.message().to_string())?
        .map_body(simplify);
    let outcome = |r: chad::Result<(Value, Vec<Value>)>| match r {
        Ok((y, _)) => format!("value {y}"),
        Err(e) => format!("error {:?}: {}", e.kind(), e.message()),
    };
    let got = outcome(tvjp.vjp(&p.inputs, &Value::Unit));
    let reverse = outcome(rvjp.vjp(&p.inputs, &Value::Unit));
    let evaluator = format!("error {:?}: {}", want.kind(), want.message());
    // (The routes may order independent failing computations differently: matching either
    // oracle is enough.)
    if got != reverse && got != evaluator {
        return Err(format!(
            "where the evaluator fails with `{}`, --via transpose gives {got}, reverse CHAD \
             {reverse}",
            want.message()
        ));
    }
    Ok(Outcome::Skipped)
}

/// The transposed route for a program, or why it does not apply.
fn transposed(p: &TestProgram) -> Result<Result<Vjp, String>, String> {
    match vjp_via_transpose(&optimize(&p.entry)) {
        Ok(v) => Ok(Ok(v)),
        Err(e) if e.kind() == chad::ErrorKind::Unsupported => Ok(Err(e.message().to_string())),
        Err(e) => Err(format!("transposition failed: {}", e.message())),
    }
}

fn three_routes_agree(cfg: Config, n: u32, required: Requirements, min: f64) {
    let (mut fd_checked, mut fd_skipped) = (0u32, 0u32);
    for_programs(cfg, n, required, min, |p, _| {
        let tvjp = match transposed(p)? {
            Ok(v) => v,
            Err(e) => return Ok(Outcome::Untransposed(e)),
        };
        let rvjp = Vjp::new(&p.entry).map_err(|e| e.message().to_string())?;
        let y = chad::internals::eval::eval_entry(&p.entry, &p.inputs).expect("evaluates");
        let ty = p.entry.body.ty.clone();
        let tys = p.entry.param_types();
        let inputs = fd::basis(&tys, &p.inputs);
        let mut rows = Vec::new();
        for v in fd::basis(std::slice::from_ref(&ty), std::slice::from_ref(&y)) {
            let (y1, g1) = rvjp
                .vjp(&p.inputs, &v[0])
                .map_err(|e| format!("reverse CHAD failed: {}", e.message()))?;
            let (y2, g2) = tvjp
                .vjp(&p.inputs, &v[0])
                .map_err(|e| format!("--via transpose failed: {}", e.message()))?;
            if y1.same(&y2) != Some(true) {
                return Err(format!("values differ: reverse CHAD {y1}, transposed {y2}"));
            }
            let (r1, r2): (Vec<f64>, Vec<f64>) = (
                g1.iter().flat_map(fd::leaves).collect(),
                g2.iter().flat_map(fd::leaves).collect(),
            );
            if r1.iter().chain(&r2).any(|x| !x.is_finite()) {
                return Ok(Outcome::Skipped);
            }
            if !all_close(&r1, &r2, 1e-9) {
                return Err(format!(
                    "cotangent {:?}: reverse CHAD gives {r1:?}, the transposed forward \
                     derivative {r2:?}",
                    v[0]
                ));
            }
            rows.push(r2);
        }
        // Columns of the transposed route's Jacobian against finite differences.
        for (j, dx) in inputs.iter().enumerate() {
            match finite_difference(p, dx) {
                Some(col) => {
                    let mine: Vec<f64> = rows.iter().map(|r| r[j]).collect();
                    if !all_close(&col, &mine, 1e-5) {
                        return Err(format!(
                            "column {j}: --via transpose gives {mine:?}, finite differences \
                             {col:?}"
                        ));
                    }
                    fd_checked += 1;
                }
                None => fd_skipped += 1,
            }
        }
        Ok(Outcome::Ran)
    });
    eprintln!("{fd_checked} columns checked by finite differences, {fd_skipped} skipped");
    assert!(
        fd_checked >= 4 * fd_skipped,
        "too many finite-difference columns skipped"
    );
}

#[test]
fn three_routes_agree_on_first_order_programs() {
    // Nearly every first-order program's derivative transposes: the exceptions are lengths of
    // linear arrays the shape inference cannot see (a derivative bound by a pattern and
    // applied to a tangent that is not the whole input's; see `target::transpose`).
    three_routes_agree(first_order(), cases(300), &[], 0.97);
}

#[test]
fn three_routes_agree_on_programs_with_closures() {
    three_routes_agree(with_closures(), cases(300), &[], 0.9);
}

#[test]
fn three_routes_agree_on_array_programs() {
    three_routes_agree(array_heavy(), cases(300), ARRAYS, 0.9);
}

#[test]
fn three_routes_agree_on_sum_programs() {
    three_routes_agree(sum_heavy(), cases(300), SUMS, 0.9);
}

/// A random cotangent of `y : ty` (same shape).
fn cotangent(r: &mut TestRunner, ty: &Type, y: &Value) -> Value {
    fd::tangent_with(ty, y, &mut || real(r))
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn dot_product(cfg: Config, n: u32, min: f64) {
    for_programs(cfg, n, &[], min, |p, r| {
        let entry = optimize(&p.entry);
        let lin = match linearize(&entry, &p.inputs) {
            Ok(l) => l,
            Err(e) if e.kind() == chad::ErrorKind::Unsupported => {
                return Ok(Outcome::Untransposed(e.message().to_string()));
            }
            Err(e) => return Err(format!("linearize failed: {}", e.message())),
        };
        let back = linear_transpose(&lin.map);
        assert!(!lin.map.is_transposed() && back.is_transposed());
        let tys = p.entry.param_types();
        // The same map applied several times (no primal recomputation in between).
        for _ in 0..3 {
            let d: Vec<Value> = tys
                .iter()
                .zip(&p.inputs)
                .map(|(t, x)| fd::tangent_with(t, x, &mut || real(r)))
                .collect();
            let v = cotangent(r, &p.entry.body.ty, &lin.value);
            let ld = lin.map.apply(&d).map_err(|e| e.message().to_string())?;
            let tv = back
                .apply(std::slice::from_ref(&v))
                .map_err(|e| e.message().to_string())?;
            let lhs: f64 = tv
                .iter()
                .zip(&d)
                .map(|(g, d)| dot(&fd::leaves(g), &fd::leaves(d)))
                .sum();
            let rhs = dot(&fd::leaves(&v), &fd::leaves(&ld[0]));
            if !lhs.is_finite() || !rhs.is_finite() {
                return Ok(Outcome::Skipped);
            }
            if !close(lhs, rhs, 1e-8) {
                return Err(format!(
                    "dot-product test: <transpose(l)(v), d> = {lhs}, <v, l(d)> = {rhs} \
                     (d = {d:?}, v = {v})"
                ));
            }
        }
        // Transposing twice is the map itself.
        let again = linear_transpose(&back);
        let d: Vec<Value> = tys
            .iter()
            .zip(&p.inputs)
            .map(|(t, x)| fd::tangent_with(t, x, &mut || real(r)))
            .collect();
        let (a, b) = (lin.map.apply(&d), again.apply(&d));
        match (a, b) {
            (Ok(a), Ok(b)) if a[0].same(&b[0]) == Some(true) => {}
            (a, b) => return Err(format!("T(T(l)) differs from l: {a:?} vs {b:?}")),
        }
        Ok(Outcome::Ran)
    });
}

#[test]
fn dot_product_test_on_linearized_programs() {
    dot_product(first_order(), cases(200), 0.97);
    dot_product(array_heavy(), cases(200), 0.9);
}

#[test]
fn linear_maps_reject_wrong_inputs() {
    let prog = chad::internals::source::load(
        "def f (x : Real) (ys : Array Real) : Real = x * sum ys",
        &chad::internals::prim::Registry::builtin(),
    )
    .unwrap();
    let entry = prog.entry(0);
    let lin = linearize(&entry, &[Value::Real(2.0), Value::reals(vec![1.0, 2.0])]).unwrap();
    assert_eq!(lin.value.expect_real(), 6.0);
    assert_eq!(lin.map.input_types().len(), 2);
    // Wrong arity, wrong length of an array tangent: errors, not panics.
    assert!(lin.map.apply(&[Value::Real(1.0)]).is_err());
    let e = lin
        .map
        .apply(&[Value::Real(1.0), Value::reals(vec![1.0])])
        .unwrap_err();
    assert!(e.message().contains("length"), "{}", e.message());
    let t = linear_transpose(&lin.map);
    let g = t.apply(&[Value::Real(1.0)]).unwrap();
    assert_eq!(g[0].expect_real(), 3.0);
    assert_eq!(g[1].expect_reals(), &[2.0, 2.0]);
    assert!(t.apply(&[Value::reals(vec![1.0])]).is_err());
}

/// Programs whose derivatives index ragged arrays (elements of different lengths) and take
/// the lengths of the elements: the transposer must not assume the elements alike. Each is
/// checked against reverse CHAD on every basis cotangent. (Found by the random tests.)
#[test]
fn ragged_arrays_transpose_like_reverse_chad() {
    let programs = [
        // `lsum (d ! i)` in an `lbuild` over a ragged literal: per-index lengths.
        (
            "def main (x1 : Real) (x2 : Real) : Array Real =
               let xs = [[x1, x2], [x1, x1, x2], [2.0]] in
               build (length xs) (\\(i : Int) -> sum (xs ! i) * x2)",
            vec![Value::Real(-1.5), Value::Real(0.7)],
        ),
        // A sum of one-hots into a ragged literal, indexed at a literal.
        (
            "def main (x1 : Real) (x2 : Array Real) (x3 : Array Real) : Real =
               [x2, x3, [0.25, x1, 2.0]] ! 2 ! 1 * sum ([x2, x3, [x1]] ! 1)",
            vec![
                Value::Real(1.6),
                Value::reals(vec![]),
                Value::reals(vec![1.0, 2.0, 3.0]),
            ],
        ),
        // A derivative chosen by a branch, bound by a pattern, its outputs summed.
        (
            "def main (b : Bool) (x2 : Real) (x3 : Real) : Real =
               sum (if b then ([] : Array Real) else [x3, x2 * x3, 0.0])",
            vec![Value::Bool(false), Value::Real(0.5), Value::Real(-2.0)],
        ),
    ];
    for (src, args) in programs {
        let prog = chad::internals::source::load(src, &chad::internals::prim::Registry::builtin())
            .unwrap();
        let entry = optimize(&prog.entry(0));
        let tvjp = vjp_via_transpose(&entry).unwrap_or_else(|e| panic!("{src}: {e}"));
        let rvjp = Vjp::new(&entry).unwrap();
        let y = chad::internals::eval::eval_entry(&entry, &args).unwrap();
        let ty = entry.body.ty.clone();
        for v in fd::basis(std::slice::from_ref(&ty), std::slice::from_ref(&y)) {
            let (_, g1) = rvjp.vjp(&args, &v[0]).unwrap();
            let (_, g2) = tvjp.vjp(&args, &v[0]).unwrap();
            let (r1, r2): (Vec<f64>, Vec<f64>) = (
                g1.iter().flat_map(fd::leaves).collect(),
                g2.iter().flat_map(fd::leaves).collect(),
            );
            assert!(
                all_close(&r1, &r2, 1e-12),
                "{src}\ncotangent {:?}: reverse CHAD {r1:?}, transposed {r2:?}",
                v[0]
            );
        }
    }
}

// ----- Primitives registered with only their forward derivative -----

mod jvp_only {
    use super::*;
    use chad::internals::ad::check_primitive;
    use chad::internals::prim::{Derivative, JvpArgs, Prim, Primitive, Registry, op};
    use chad::internals::target::term::{LTerm, LTermKind, Term};

    fn real2(name: &str, f: fn(f64, f64) -> f64) -> Primitive {
        Primitive::function(name, vec![Type::Real, Type::Real], Type::Real, move |x| {
            let (a, b) = x.expect_pair();
            Ok(Value::Real(f(a.expect_real(), b.expect_real())))
        })
    }

    /// `hypot a b`, its derivative `(a da + b db) / hypot a b` reusing the primal result.
    fn hypot(scale: f64) -> Primitive {
        real2("hypot", f64::hypot).with_derivative(Derivative::jvp(move |j: &JvpArgs<'_>| {
            let div = |t: &Term| {
                let q = Term::prim(&op("div"), vec![t.clone(), j.result.clone()]);
                Term::prim(&op("mul"), vec![Term::real(scale), q])
            };
            LTerm::plus(
                LTerm::scale(div(&j.args[0]), j.tangents[0].clone()),
                LTerm::scale(div(&j.args[1]), j.tangents[1].clone()),
            )
        }))
    }

    /// `myexp x`, whose derivative calls `myexp` itself.
    fn myexp() -> Primitive {
        Primitive::function("myexp", vec![Type::Real], Type::Real, |x| {
            Ok(Value::Real(x.expect_real().exp()))
        })
        .with_derivative(Derivative::jvp(|j| {
            LTerm::scale(Term::prim(j.this, j.args.to_vec()), j.tangents[0].clone())
        }))
    }

    /// `total xs = Σ xs`: its transpose needs the length of the tangent (`replicate`).
    fn total() -> Primitive {
        Primitive::function("total", vec![Type::array(Type::Real)], Type::Real, |x| {
            Ok(Value::Real(x.expect_reals().iter().sum()))
        })
        .with_derivative(Derivative::jvp(|j| {
            LTerm::mk(LTermKind::Sum(j.tangents[0].clone()))
        }))
    }

    fn registry() -> (Registry, Vec<Prim>) {
        let mut reg = Registry::builtin();
        let ps = [hypot(1.0), myexp(), total()]
            .into_iter()
            .map(|p| reg.register(p).unwrap())
            .collect();
        (reg, ps)
    }

    #[test]
    fn derived_transposes_pass_check_primitive() {
        let (_, ps) = registry();
        for p in &ps {
            let c = check_primitive(p, 30, 7).unwrap_or_else(|e| panic!("{e}"));
            assert!(c.points >= 30, "{}: {c:?}", p.name());
        }
        // The check is not vacuous: a wrong forward derivative fails it.
        let mut reg = Registry::builtin();
        let wrong = reg.register(hypot(1.5)).unwrap();
        let e = check_primitive(&wrong, 30, 7).unwrap_err();
        assert!(e.contains("hypot"), "{e}");
    }

    /// Programs using the primitives: reverse CHAD (its derivative derived by transposition),
    /// the transposed forward route and finite differences agree.
    #[test]
    fn programs_with_jvp_only_primitives() {
        let (reg, _) = registry();
        let src = "def f (x : Real) (y : Real) (xs : Array Real) : Real =
                     hypot (myexp x) (y * total (map (\\(z : Real) -> z * hypot z y) xs))";
        let prog = chad::internals::source::load(src, &reg).unwrap();
        let entry = prog.entry(0);
        let args = vec![
            Value::Real(0.3),
            Value::Real(-1.2),
            Value::reals(vec![0.5, -2.0, 1.5]),
        ];
        let (_, g1) = Vjp::new(&entry).unwrap().grad(&args).unwrap();
        let (_, g2) = vjp_via_transpose(&optimize(&entry))
            .unwrap()
            .grad(&args)
            .unwrap();
        let (r1, r2): (Vec<f64>, Vec<f64>) = (
            g1.iter().flat_map(fd::leaves).collect(),
            g2.iter().flat_map(fd::leaves).collect(),
        );
        assert!(all_close(&r1, &r2, 1e-10), "{r1:?} vs {r2:?}");
        let tys = entry.param_types();
        let fd: Vec<f64> = fd::basis(&tys, &args)
            .iter()
            .map(|dx| fd::jvp(&entry, &args, dx, 1e-6).unwrap().expect_real())
            .collect();
        assert!(
            all_close(&r1, &fd, 1e-6),
            "reverse {r1:?} vs finite differences {fd:?}"
        );
    }

    /// Derivative rules of the wrong type are registration errors (not panics later).
    #[test]
    fn ill_typed_rules_are_registration_errors() {
        let bad_jvp = real2("bad1", |a, _| a).with_derivative(Derivative::jvp(|j| {
            LTerm::pair(j.tangents[0].clone(), j.tangents[1].clone())
        }));
        let bad_terms = real2("bad2", |a, _| a).with_derivative(Derivative::terms(
            |_, d| d[0].clone(),
            |_, v| vec![v.clone()], // one cotangent for two parameters
        ));
        for p in [bad_jvp, bad_terms] {
            let name = p.name().to_string();
            let e = Registry::builtin().register(p).unwrap_err();
            assert!(
                e.message().contains(&name) && e.message().contains("ill-typed"),
                "{}",
                e.message()
            );
        }
    }
}
