//! Programs for the plants of the mutation campaign (`mutants/`, theory-notes/11-reliability.md
//! "Mutation run") that the rest of the suite let through. Each test runs small programs
//! through every route to a derivative — the CLI's pipeline on the engine (forward, reverse
//! CHAD, transposed forward), forward and reverse CHAD unsimplified, dual-numbers reverse, the
//! IR, and the concretised derivatives run by the source evaluator — and compares each with the
//! forward dual-number oracle (`chad::internals::oracle::dual`, its own derivative table), itself checked
//! against central finite differences. Nothing here looks at how a rule is written: a test
//! fails if any route computes a different value or gradient.

mod common;

use chad::Value;
use chad::api::Via;
use chad::internals::ad::nested;
use chad::internals::ad::{Jvp, Vjp};
use chad::internals::ir::compile::{Compiled, Parts};
use chad::internals::optimize::optimize;
use chad::internals::oracle::{dual, fd};
use chad::internals::simplify::simplify;
use chad::internals::source::term::Entry;
use common::{args, entry};

fn close(a: f64, b: f64, tol: f64) -> bool {
    a == b
        || (a.is_finite() && b.is_finite() && (a - b).abs() <= tol * (1.0 + a.abs().max(b.abs())))
}

fn all_close(a: &[f64], b: &[f64], tol: f64) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| close(*x, *y, tol))
}

/// The leaves of a list of argument cotangents (or of one value).
fn flat(gs: &[Value]) -> Vec<f64> {
    gs.iter().flat_map(fd::leaves).collect()
}

/// The gradient of a `Real`-valued entry by the forward dual-number oracle, one basis tangent
/// at a time, checked against central finite differences; with the value.
fn oracle(e: &Entry, xs: &[Value]) -> (f64, Vec<f64>) {
    let basis = fd::basis(&e.param_types(), xs);
    let mut value = f64::NAN;
    let mut g = Vec::new();
    for dx in &basis {
        let (y, t) = dual::jvp(e, xs, dx).unwrap();
        value = fd::leaves(&y)[0];
        let t = fd::leaves(&t)[0];
        let by_fd = fd::leaves(&fd::jvp(e, xs, dx, 1e-6).unwrap())[0];
        assert!(
            close(t, by_fd, 1e-4),
            "oracle {t} vs finite differences {by_fd}"
        );
        g.push(t);
    }
    (value, g)
}

/// Value and gradient of a `Real`-valued entry by every route, named.
/// One route's name, value and gradient.
type Route = (&'static str, f64, Vec<f64>);

/// A forward-mode route: the value and tangent along a tangent of the arguments.
type Forward<'a> = &'a dyn Fn(&[Value]) -> chad::Result<(Value, Value)>;

fn routes(src: &str, xs: &[&str]) -> (Entry, Vec<Value>, Vec<Route>) {
    let e = entry(src);
    let xs = args(&e, xs);
    let basis = fd::basis(&e.param_types(), &xs);
    let real = |v: &Value| fd::leaves(v)[0];
    let forward = |name: &'static str, f: Forward<'_>| -> Route {
        let mut value = f64::NAN;
        let mut g = Vec::new();
        for dx in &basis {
            let (y, t) = f(dx).unwrap_or_else(|err| panic!("{name}: {err}"));
            value = real(&y);
            g.push(real(&t));
        }
        (name, value, g)
    };
    let mut out = Vec::new();
    let program = chad::Program::load(src).unwrap();
    let f = program.last().unwrap();
    out.push(forward("CLI jvp (engine)", &|dx| f.jvp(&xs, dx)));
    let (y, g) = f.value_and_grad(&xs).unwrap();
    out.push(("CLI grad (engine)", real(&y), flat(&g)));
    let (y, g) = f.via(Via::Transpose).value_and_grad(&xs).unwrap();
    out.push(("CLI grad via transpose (engine)", real(&y), flat(&g)));
    let jvp = Jvp::new(&e).unwrap();
    out.push(forward("forward CHAD, unsimplified", &|dx| {
        jvp.jvp(&xs, dx)
    }));
    let (y, g) = Vjp::new(&e).unwrap().grad(&xs).unwrap();
    out.push(("reverse CHAD, unsimplified", real(&y), flat(&g)));
    let optimized = optimize(&e);
    let jvp = Jvp::new(&optimized).unwrap().map_body(simplify);
    out.push(forward("forward CHAD, simplified", &|dx| jvp.jvp(&xs, dx)));
    let (y, g) = Vjp::new(&optimized)
        .unwrap()
        .map_body(simplify)
        .grad(&xs)
        .unwrap();
    out.push(("reverse CHAD, simplified", real(&y), flat(&g)));
    let (y, g) = chad::internals::dual_reverse::grad(&e, &xs).unwrap();
    out.push(("dual-numbers reverse", real(&y), flat(&g)));
    let ir = Compiled::with_parts(&e, Parts::ALL).unwrap();
    out.push(forward("IR forward", &|dx| ir.jvp(&xs, dx)));
    let (y, g) = ir.vjp(&xs, &Value::Real(1.0)).unwrap();
    out.push(("IR reverse", real(&y), flat(&g)));
    // The concretised derivatives, source programs run by the source evaluator.
    let je = nested::jvp_entry(&e).unwrap();
    out.push(forward("concretised forward", &|dx| {
        let mut a = xs.clone();
        a.extend(dx.iter().cloned());
        let out = chad::internals::eval::eval_entry(&je, &a)?;
        let (y, t) = out.expect_pair();
        Ok((y.clone(), t.clone()))
    }));
    let ve = nested::vjp_entry(&e).unwrap();
    let mut a = xs.clone();
    a.push(Value::Real(1.0));
    let out_v = chad::internals::eval::eval_entry(&ve, &a).unwrap();
    let (y, g) = out_v.expect_pair();
    out.push(("concretised reverse", real(y), fd::leaves(g)));
    (e, xs, out)
}

/// Every route gives the oracle's value and gradient for each program at its arguments.
fn check_all(cases: &[(&str, &[&str])]) {
    let mut wrong = Vec::new();
    for (src, xs) in cases {
        let (e, vals, got) = routes(src, xs);
        let (value, grad) = oracle(&e, &vals);
        for (name, y, g) in got {
            if !close(y, value, 1e-9) || !all_close(&g, &grad, 1e-7) {
                wrong.push(format!(
                    "{src} at {xs:?}: {name} gives {y}, {g:?}; the oracle {value}, {grad:?}"
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Closures whose context moves, called at several arguments, passed to other functions,
/// chosen by an `if` or returned from one: the derivative of a call sends the closure's own
/// tangent (`(fst d) @ b` in forward mode) as well as the argument's.
#[test]
fn closures_capturing_the_input_differentiate_in_every_route() {
    check_all(&[
        (
            "def f (x : Real) : Real = let g = \\(y : Real) -> x * y in g 2.0 + g x",
            &["0.7"],
        ),
        (
            "def f (x : Real) (z : Real) : Real =
               let h = \\(k : Real -> Real) -> \\(y : Real) -> k (k y) in
               h (\\(y : Real) -> sin (x * y)) z",
            &["0.7", "-1.3"],
        ),
        (
            "def f (x : Real) (z : Real) : Real =
               let g = if x > 0.0 then (\\(y : Real) -> x * y * z) else (\\(y : Real) -> y - x) in
               g z + g x",
            &["0.4", "1.5"],
        ),
        (
            "def f (xs : Array Real) (x : Real) : Real =
               sum (map (\\(a : Real) -> let g = \\(y : Real) -> a * y + x in g x * g a) xs)",
            &["[0.5, -1.0, 2.0]", "0.3"],
        ),
    ]);
}

/// One primitive applied to one variable and different literals: the literals are part of
/// what makes two applications the same.
#[test]
fn applications_differing_only_in_a_literal_stay_apart() {
    check_all(&[
        ("def f (x : Real) : Real = pow x 2.0 + pow x 3.0", &["1.3"]),
        (
            "def f (x : Real) : Real = x * 2.0 + x * 3.0 * (x * 2.0)",
            &["0.6"],
        ),
        (
            "def f (x : Real) : Real = max x 1.0 * max x 2.0 + min x 0.5",
            &["1.5"],
        ),
        (
            "def f (x : Real) (y : Real) : Real = (x - 1.0) * (x - 2.0) / (y + 1.0) - (y + 2.0)",
            &["0.25", "0.75"],
        ),
    ]);
}

/// Straight-line scalar code with non-commutative operators between values computed earlier
/// and read again (the engine's flat runs load them into registers, fuse loads with the
/// arithmetic, and fuse scalings of tangents).
#[test]
fn scalar_chains_with_noncommutative_operators_differentiate_in_every_route() {
    check_all(&[
        (
            "def f (x : Real) (y : Real) : Real =
               let a = sin x in
               let b = y - a in
               let c = a / b in
               let d = c - x * y in
               d / (x - 3.0) - cos b",
            &["0.7", "2.1"],
        ),
        (
            "def f (x : Real) (y : Real) (z : Real) : Real =
               let a = x * y in
               let b = a - z in
               let c = z / a in
               let e = exp b - cos c in
               e * (c - b) / (y - x)",
            &["0.3", "1.2", "-0.4"],
        ),
        (
            "def f (xs : Array Real) (y : Real) : Real =
               sum (map (\\a -> (a - y) / (y - cos a) - sin (y / a)) xs)",
            &["[0.5, 1.5, -2.0]", "0.9"],
        ),
    ]);
}

/// Arrays read at repeated and shifted indices, summed in loops: cotangents accumulate at
/// the same index several times.
#[test]
fn repeated_indices_accumulate_in_every_route() {
    check_all(&[
        (
            "def f (xs : Array Real) : Real =
               sum (build (2 * length xs) (\\i -> xs ! (i / 2) * xs ! (i / 2)))",
            &["[0.5, -1.5, 2.0]"],
        ),
        (
            "def f (xs : Array Real) (y : Real) : Real =
               sum (build 6 (\\i -> y * xs ! (i % 2) + xs ! 0))",
            &["[0.5, -1.5, 2.0]", "1.7"],
        ),
    ]);
}

/// A program that fails where the evaluator says fails in every mode, also when the failing
/// subterm's value is unused (the language is strict).
#[test]
fn unused_failing_subterms_fail_in_every_mode() {
    let cases: &[(&str, &[&str])] = &[
        (
            "def f (xs : Array Real) (ys : Array Real) : Real =
               let _ = map2 (\\a b -> a * b) xs ys in sum xs",
            &["[1.0, 2.0]", "[3.0]"],
        ),
        (
            "def f (xs : Array Real) (ys : Array Real) : Real =
               let p = (map2 (\\a b -> a + b) xs ys, sum ys) in snd p * 2.0",
            &["[1.0, 2.0]", "[3.0]"],
        ),
    ];
    for (src, xs) in cases {
        let e = entry(src);
        let vals = args(&e, xs);
        let expected = chad::internals::eval::eval_entry(&e, &vals)
            .unwrap_err()
            .to_string();
        let f = chad::Program::load(src).unwrap().last().unwrap();
        let basis = fd::basis(&e.param_types(), &vals);
        let results = [
            ("eval", f.eval(&vals).map(|_| ())),
            ("grad", f.value_and_grad(&vals).map(|_| ())),
            (
                "grad via transpose",
                f.via(Via::Transpose).value_and_grad(&vals).map(|_| ()),
            ),
            ("jvp", f.jvp(&vals, &basis[0]).map(|_| ())),
            (
                "IR",
                Compiled::with_parts(&e, Parts::ALL)
                    .and_then(|c| c.vjp(&vals, &Value::Real(1.0)))
                    .map(|_| ()),
            ),
        ];
        for (mode, r) in results {
            match r {
                Ok(()) => panic!("{src}: {mode} succeeds where eval fails with {expected}"),
                Err(err) => assert!(
                    err.to_string().contains("map2") || err.to_string() == expected,
                    "{src}: {mode} fails with {err}, eval with {expected}"
                ),
            }
        }
    }
}

/// The forward kernel `callTan (b, g) = λ̲d. (fst d) @ b + g • (snd d)` (the tangent of a call
/// `g b`: the function's own tangent at `b` plus the argument's through the call's derivative),
/// for a derivative `g` with a closure's call tape and for one without (through programs, only
/// the derivatives of recursive functions, which are closed, come without a tape: there
/// `fst d` is zero and no program can tell the two terms apart).
#[test]
fn the_call_tangent_kernel_adds_the_function_tangent_with_or_without_a_tape() {
    use chad::internals::target::linear::{Lin, LinFun};
    let b = Value::Real(3.0);
    // The function's tangent, a power: at `b` it is 10 b.
    let p = Lin::power(|b: &Value| Ok(Lin::real(10.0 * b.expect_real())));
    let d = Lin::pair(p.clone(), Lin::real(0.5));
    // An untaped derivative of the call: the argument's tangent doubled.
    let g = LinFun::scale(2.0, &LinFun::id());
    let by_definition = Lin::plus(
        p.apply_power(&b).unwrap(),
        g.apply(&Lin::real(0.5)).unwrap(),
    );
    let kernel = LinFun::call_tan(b.clone(), &g).apply(&d).unwrap();
    assert_eq!(by_definition.to_real(), 31.0);
    assert_eq!(kernel.to_real(), 31.0, "callTan without a tape");
}
