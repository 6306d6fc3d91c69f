//! `scatterAdd` (`chad::internals::target::linear::scatter`), the accumulation primitive concretisation
//! turns sums of one-hots into (`theory-notes/12-nested-ad.md`, §Cost):
//!
//! * its values, by hand, and its errors;
//! * its registered derivatives: forward against central finite differences, the transposed
//!   one (a gather) against the forward one by the dot-product test, at random points
//!   (`chad::internals::ad::check_primitive`) and in a program with repeated and dropped indices, in both
//!   modes and twice (Hessian-vector products through its concretised derivative);
//! * programs whose gradients sum many one-hots (in `build`, behind branches, scaled, with
//!   repeated indices): their concretised gradients use `scatterAdd`, and agree with the
//!   engine's gradients and their Hessian-vector products with finite differences of them.

mod common;

use chad::Value;
use chad::internals::ad::nested;
use chad::internals::ad::{Jvp, Vjp, check_primitive};
use chad::internals::oracle::fd;
use chad::internals::simplify::simplify;
use chad::internals::source::term::{Entry, Lit, Term, TermKind as S, Var};
use chad::internals::target::linear::scatter::{eval, scatter_add};
use chad::internals::types::Type;

fn ints(is: &[i64]) -> Value {
    Value::array_of(is.iter().map(|&i| Value::Int(i)).collect())
}

fn args(n: i64, is: &[i64], xs: &[f64]) -> Value {
    Value::pair(
        Value::Int(n),
        Value::pair(ints(is), Value::reals(xs.to_vec())),
    )
}

#[test]
fn values_by_hand_and_errors() {
    // Index 2 twice (added), -1 and 7 outside 0 .. 5 (dropped).
    let r = eval(&args(
        5,
        &[0, 2, 2, 4, -1, 7],
        &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
    ))
    .unwrap();
    assert_eq!(r.expect_reals(), &[1.0, 0.0, 5.0, 0.0, 4.0]);
    assert_eq!(eval(&args(3, &[], &[])).unwrap().expect_reals(), &[0.0; 3]);
    let e = eval(&args(3, &[0, 1], &[1.0])).unwrap_err();
    assert!(
        e.message()
            .contains("scatterAdd: arrays have different lengths (2 and 1)"),
        "{}",
        e.message()
    );
    let e = eval(&args(-1, &[], &[])).unwrap_err();
    assert!(e.message().contains("negative length"), "{}", e.message());
}

#[test]
fn derivatives_pass_finite_differences_and_the_dot_product_test() {
    let p = scatter_add();
    for seed in 1..6 {
        check_primitive(&p, 30, seed).unwrap();
    }
}

fn close(a: &[f64], b: &[f64], tol: f64) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| (x - y).abs() <= tol * (1.0 + x.abs().max(y.abs())))
}

fn node(k: S) -> Term {
    Term::try_new(k, Default::default()).unwrap()
}

/// `f xs = dot ws (scatterAdd 5 is (map (\x -> x * x * x) xs))` for fixed `ws` and `is` with
/// a repeated and two dropped indices: its gradient is `3 x_k² ws_(is_k)` (0 where dropped)
/// and its Hessian diagonal `6 x_k ws_(is_k)`.
#[test]
fn a_program_using_it_differentiates_once_and_twice() {
    let is = [0i64, 2, 2, 4, -1, 7];
    let ws = [1.5, -2.0, 0.5, 3.0, -1.0];
    let xs = Var::fresh("xs", Type::array(Type::Real));
    let x = Var::fresh("x", Type::Real);
    let cube = node(S::Prim(
        chad::internals::prim::op("mul"),
        vec![
            node(S::Prim(
                chad::internals::prim::op("mul"),
                vec![Term::var(&x), Term::var(&x)],
            )),
            Term::var(&x),
        ],
    ));
    let mapped = node(S::Map(node(S::Lam(x, cube)), Term::var(&xs)));
    let idx = node(S::Array(
        Type::Int,
        is.iter().map(|&i| Term::lit(Lit::Int(i))).collect(),
    ));
    let weights = node(S::Array(
        Type::Real,
        ws.iter().map(|&w| Term::lit(Lit::Real(w))).collect(),
    ));
    let scattered = node(S::Prim(
        scatter_add(),
        vec![Term::lit(Lit::Int(5)), idx, mapped],
    ));
    let body = node(S::Prim(
        chad::internals::prim::op("dot"),
        vec![weights, scattered],
    ));
    let e = Entry {
        name: "f".into(),
        params: vec![xs],
        body,
    };
    let at = [0.5, -1.0, 2.0, 0.25, 3.0, -0.75];
    let w_of = |k: usize| {
        let i = is[k];
        if (0..5).contains(&i) {
            ws[i as usize]
        } else {
            0.0
        }
    };
    let grad: Vec<f64> = (0..6).map(|k| 3.0 * at[k] * at[k] * w_of(k)).collect();
    let hdiag: Vec<f64> = (0..6).map(|k| 6.0 * at[k] * w_of(k)).collect();
    let a = [Value::reals(at.to_vec())];
    // Reverse: the gather.
    let (_, g) = Vjp::new(&e).unwrap().map_body(simplify).grad(&a).unwrap();
    assert!(close(&fd::leaves(&g[0]), &grad, 1e-12), "{g:?} vs {grad:?}");
    // Forward, along each basis vector: the primitive again.
    let jvp = Jvp::new(&e).unwrap().map_body(simplify);
    for k in 0..6 {
        let mut t = vec![0.0; 6];
        t[k] = 1.0;
        let (_, d) = jvp.jvp(&a, &[Value::reals(t)]).unwrap();
        assert!((d.expect_real() - grad[k]).abs() < 1e-12, "{k}: {d}");
    }
    // Twice: the Hessian (through the concretised gather) is diagonal.
    let (_, _, h) = nested::hessian(&e, &[true], &a).unwrap();
    for (k, row) in h.iter().enumerate() {
        for (j, &v) in row.iter().enumerate() {
            let want = if j == k { hdiag[k] } else { 0.0 };
            assert!((v - want).abs() < 1e-12, "H[{k}][{j}] = {v}, not {want}");
        }
    }
}

/// Programs whose gradients are sums of many one-hots, each with the forms `fused_sum` goes
/// through: lets (Rosenbrock), a branch, scaling, repeated indices.
const MANY_ONE_HOTS: &[&str] = &[
    "def f (x : Array Real) : Real =
       let n = length x in
       sum (build (n - 1) (\\i -> 100.0 * (x ! (i + 1) - x ! i * x ! i) * (x ! (i + 1) - x ! i * x ! i)
                                 + (1.0 - x ! i) * (1.0 - x ! i)))",
    "def f (x : Array Real) : Real =
       let n = length x in
       sum (build n (\\i -> if x ! i > 0.0 then x ! i * x ! ((i * 7 + 3) % n) else 2.0 * x ! i * x ! i))",
    "def f (x : Array Real) : Real =
       let n = length x in
       sum (build (3 * n) (\\i -> 0.5 * sin (x ! (i % n)) * x ! ((i + 1) % n)))",
];

#[test]
fn gradients_of_many_one_hots_use_it_and_agree_with_the_engine_and_finite_differences() {
    for src in MANY_ONE_HOTS {
        common::concretised_gradient_and_hvp_agree(src, "scatterAdd", &[1, 2, 7, 40], 1e-5);
    }
}
