//! `padAdd` (`chad::internals::target::linear::padadd`), the concretiser's addition of two
//! arrays of reals padded with zeros (theory note 07 §8):
//!
//! * its values by hand (unequal lengths, an empty side kept as it is, signed zeros);
//! * its registered derivatives: forward against central finite differences, the transposed
//!   one against the forward one by the dot-product test (`check_primitive`);
//! * its lowering: the IR interpreter and the native code give the evaluator's values bit for
//!   bit on every combination of lengths;
//! * programs whose reverse derivatives add array cotangents: the concretised derivative uses
//!   `padAdd`, and its values and Hessian-vector products agree with the engine's gradient and
//!   with central differences of it.

mod common;

use chad::Value;
use chad::internals::ad::check_primitive;
use chad::internals::ir::compile::Compiled;
use chad::internals::source::term::{Entry, Term, TermKind as S, Var};
use chad::internals::target::linear::padadd::{eval, pad_add};
use chad::internals::types::Type;

fn args(xs: &[f64], ys: &[f64]) -> Value {
    Value::pair(Value::reals(xs.to_vec()), Value::reals(ys.to_vec()))
}

fn bits(v: &Value) -> Vec<u64> {
    v.expect_reals().iter().map(|x| x.to_bits()).collect()
}

#[test]
fn values_by_hand() {
    let add = |a: &[f64], b: &[f64]| eval(&args(a, b)).unwrap();
    assert_eq!(
        add(&[1.0, 2.0, 3.0], &[10.0]).expect_reals(),
        &[11.0, 2.0, 3.0]
    );
    assert_eq!(add(&[1.0], &[10.0, 20.0]).expect_reals(), &[11.0, 20.0]);
    assert_eq!(add(&[], &[]).expect_reals(), &[] as &[f64]);
    // An empty side: the other as it is, -0.0 kept; a padded element is 0.0 + x.
    assert_eq!(
        bits(&add(&[], &[-0.0, 1.0])),
        bits(&Value::reals(vec![-0.0, 1.0]))
    );
    assert_eq!(bits(&add(&[-0.0], &[])), bits(&Value::reals(vec![-0.0])));
    assert_eq!(
        bits(&add(&[5.0], &[1.0, -0.0])),
        bits(&Value::reals(vec![6.0, 0.0]))
    );
    assert_eq!(
        bits(&add(&[-0.0], &[-0.0])),
        bits(&Value::reals(vec![-0.0]))
    );
}

#[test]
fn derivatives_pass_finite_differences_and_the_dot_product_test() {
    let p = pad_add();
    for seed in 1..6 {
        check_primitive(&p, 30, seed).unwrap();
    }
}

fn node(k: S) -> Term {
    Term::try_new(k, Default::default()).unwrap()
}

/// `f xs ys = padAdd xs ys`.
fn pad_entry() -> Entry {
    let xs = Var::fresh("xs", Type::array(Type::Real));
    let ys = Var::fresh("ys", Type::array(Type::Real));
    let body = node(S::Prim(pad_add(), vec![Term::var(&xs), Term::var(&ys)]));
    Entry {
        name: "f".into(),
        params: vec![xs, ys],
        body,
    }
}

#[test]
fn the_lowering_gives_the_evaluators_values_bit_for_bit() {
    let c = Compiled::new(&pad_entry()).unwrap();
    chad::internals::ir::check::check(&c.program).unwrap();
    let native =
        chad::internals::native::Native::new(Compiled::new(&pad_entry()).unwrap(), None, true)
            .unwrap_or_else(|e| panic!("{}", e.render(None)));
    let a = [1.5, -0.0, 2.25, -3.0, 0.0];
    let b = [-0.0, 4.0, -2.25, 0.5, 7.0, -0.0, 1.0];
    for n in 0..=a.len() {
        for m in 0..=b.len() {
            let (xs, ys) = (Value::reals(a[..n].to_vec()), Value::reals(b[..m].to_vec()));
            let want = eval(&Value::pair(xs.clone(), ys.clone())).unwrap();
            let ir = c.eval(&[xs.clone(), ys.clone()]).unwrap();
            let nat = native.eval(&[xs, ys]).unwrap();
            assert_eq!(bits(&ir), bits(&want), "IR at lengths {n}, {m}");
            assert_eq!(bits(&nat), bits(&want), "native at lengths {n}, {m}");
        }
    }
}

/// Programs whose reverse derivatives add cotangents of one array from several uses of it.
const SHARED_ARRAYS: &[&str] = &[
    "def f (x : Array Real) : Real = sum (map (\\a -> a * a * a) x) + sum x * sum x",
    "def f (x : Array Real) : Real =
       let y = map (\\a -> sin a) x in
       dot y x + sum (map2 (\\a b -> a * b * b) y x)",
];

#[test]
fn concretised_derivatives_use_it_and_agree_with_the_engine_and_finite_differences() {
    for src in SHARED_ARRAYS {
        common::concretised_gradient_and_hvp_agree(src, "padAdd", &[0, 1, 2, 7, 40], 1e-6);
    }
}
