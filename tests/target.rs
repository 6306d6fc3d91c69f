//! The target language: embedding, type checking (with the linear discipline) and evaluation.
//!
//! * The embedding of every random well-typed source program type-checks at the embedded type,
//!   and evaluating it agrees exactly with the source evaluator (values, or errors and their
//!   positions; function results by applying both to random arguments).
//! * The checker rejects hand-written ill-typed and non-linear terms, each with its own message.
//! * Hand-written derivative-style terms evaluate to hand-computed numbers.

mod common;

use chad::Value;
use chad::internals::prim::op;
use chad::internals::random::{Config, TestProgram};
use chad::internals::target::check::{check, check_linear};
use chad::internals::target::embed;
use chad::internals::target::eval::{Env, eval, eval_linear};
use chad::internals::target::linear::Lin;
use chad::internals::target::term::{
    LTerm, LTermKind as L, LinPrim, Pat, Term, TermKind as K, Var,
};
use chad::internals::target::{LTy, Ty};
use common::same_at;
use proptest::prelude::*;
use proptest::test_runner::TestRunner;

// ----- the embedding -----

fn embedding_agrees(p: &TestProgram) -> Result<bool, TestCaseError> {
    let (params, body) = embed::entry(&p.entry);
    let ty = check(&body, &params).map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert_eq!(&ty, &Ty::from_source(&p.entry.body.ty));
    let source = chad::internals::eval::eval_entry(&p.entry, &p.inputs);
    let env: Env = params
        .iter()
        .zip(&p.inputs)
        .map(|(x, v)| (x.id, v.clone()))
        .collect();
    let target = eval(&body, &env);
    let mut rng = TestRunner::deterministic();
    same_at(&p.entry.body.ty, &source, &target, &mut rng, 2).map_err(TestCaseError::fail)?;
    Ok(source.is_ok())
}

fn check_embedding(cfg: Config, n: u32) {
    common::check_programs(cfg, n, embedding_agrees);
}

#[test]
fn embedding_type_checks_and_agrees_with_the_source_evaluator() {
    check_embedding(Config::default(), common::cases(500));
}

#[test]
fn embedding_agrees_on_deeper_higher_order_programs() {
    let cfg = Config {
        depth: 6,
        higher_order_result: true,
        ..Config::default()
    };
    check_embedding(cfg, common::cases(200));
}

#[test]
fn embedding_of_a_long_let_chain() {
    let src = chad::internals::random::straight_line_source(20_000, 7);
    let prog =
        chad::internals::source::load(&src, &chad::internals::prim::Registry::builtin()).unwrap();
    let entry = prog.entry(prog.defs.len() - 1);
    let (params, body) = embed::entry(&entry);
    assert_eq!(
        check(&body, &params).unwrap(),
        Ty::from_source(&entry.body.ty)
    );
    let args: Vec<Value> = entry
        .params
        .iter()
        .map(|p| match p.ty {
            chad::internals::types::Type::Real => Value::Real(0.5),
            _ => Value::reals(vec![0.25, 0.5, 0.75]),
        })
        .collect();
    let env: Env = params
        .iter()
        .zip(&args)
        .map(|(x, v)| (x.id, v.clone()))
        .collect();
    let expected = chad::internals::eval::eval_entry(&entry, &args).unwrap();
    assert_eq!(eval(&body, &env).unwrap().same(&expected), Some(true));
}

// ----- builders for hand-written terms -----

fn r() -> LTy {
    LTy::Real
}
fn rr() -> LTy {
    LTy::prod(r(), r())
}
fn cvar(x: &Var) -> Term {
    Term::var(x)
}
fn lvar(v: &Var) -> LTerm {
    LTerm::var(v)
}
fn mul(a: Term, b: Term) -> Term {
    Term::prim(&op("mul"), vec![a, b])
}
fn int(i: i64) -> Term {
    Term::lit(chad::internals::source::term::Lit::Int(i))
}
fn lmk(k: L) -> LTerm {
    LTerm::mk(k)
}
fn mk(k: K) -> Term {
    Term::mk(k)
}

/// Applies a closed linear map term to a linear value through the evaluator.
fn apply(f: &Term, env: &Env, x: Lin) -> chad::Result<Lin> {
    match eval(f, env)? {
        Value::LinFun(f) => f.apply(&x),
        other => panic!("not a linear map: {other}"),
    }
}

fn type_error(t: &Term, free: &[Var]) -> String {
    match check(t, free) {
        Ok(ty) => panic!("`{t}` was accepted at type {ty}"),
        Err(e) => e.message().to_string(),
    }
}

fn assert_rejects(t: &Term, free: &[Var], needle: &str) {
    let msg = type_error(t, free);
    assert!(msg.contains(needle), "message `{msg}` lacks `{needle}`");
}

// ----- rejections: the linear discipline -----

#[test]
fn rejects_a_cartesian_variable_in_a_linear_position() {
    // λ̲v. v + c, where c is a Cartesian variable of linear type: a constant, not linear.
    let v = Var::linear("v", r());
    let c = Var::fresh("c", Ty::lin(r()));
    let t = Term::lin_lam(&v, LTerm::plus(lvar(&v), lvar(&c)));
    assert_rejects(
        &t,
        &[c],
        "`c` is a Cartesian variable used in a linear position",
    );
}

#[test]
fn rejects_multiplying_by_the_linear_variable() {
    // λ̲v. v * v: the scaling factor is a Cartesian position.
    let v = Var::linear("v", r());
    let t = Term::lin_lam(&v, LTerm::scale(cvar(&v), lvar(&v)));
    assert_rejects(&t, &[], "linear variable `v` used in a non-linear position");
}

#[test]
fn rejects_the_linear_variable_as_copower_data() {
    // λ̲v. !v ⊗ v
    let v = Var::linear("v", r());
    let t = Term::lin_lam(&v, lmk(L::Copower(cvar(&v), lvar(&v))));
    assert_rejects(&t, &[], "linear variable `v` used in a non-linear position");
}

#[test]
fn rejects_binding_the_linear_variable_in_a_cartesian_let() {
    // λ̲v. let x = v in 0
    let v = Var::linear("v", r());
    let x = Var::fresh("x", Ty::lin(r()));
    let t = Term::lin_lam(&v, LTerm::let_(&x, cvar(&v), LTerm::zero(r())));
    assert_rejects(&t, &[], "linear variable `v` used in a non-linear position");
}

#[test]
fn rejects_the_linear_variable_inside_a_nested_linear_lambda() {
    // λ̲v. (λ̲u. v) • v : the inner λ may only use u.
    let v = Var::linear("v", r());
    let u = Var::linear("u", r());
    let inner = Term::lin_lam(&u, lvar(&v));
    let t = Term::lin_lam(&v, LTerm::app(inner, lvar(&v)));
    assert_rejects(&t, &[], "linear variable `v` is not in scope here");
}

#[test]
fn rejects_the_linear_variable_outside_its_lambda() {
    // (λ̲v. v, v)
    let v = Var::linear("v", r());
    let t = Term::pair(Term::lin_lam(&v, lvar(&v)), cvar(&v));
    assert_rejects(&t, &[], "linear variable `v` used in a non-linear position");
}

#[test]
fn rejects_a_linear_lambda_over_a_cartesian_type() {
    let x = Var::fresh("x", Ty::Real);
    let t = Term::lin_lam(&x, lvar(&x));
    assert_rejects(&t, &[], "must have a linear type `Lin L`");
}

#[test]
fn rejects_a_linear_let_with_a_cartesian_binder() {
    let v = Var::linear("v", r());
    let u = Var::fresh("u", Ty::Real);
    let t = Term::lin_lam(&v, LTerm::lin_let(&u, lvar(&v), lvar(&u)));
    assert_rejects(
        &t,
        &[],
        "the variable `u` of a linear let must have a linear type",
    );
}

#[test]
fn rejects_applying_a_linear_map_to_a_cartesian_value() {
    // (λ̲v. v) • 1.0 : the argument must be a linear value.
    let v = Var::linear("v", r());
    let t = Term::lin_app(Term::lin_lam(&v, lvar(&v)), Term::real(1.0));
    assert_rejects(&t, &[], "argument of a linear map");
}

// ----- rejections: ill-typed terms -----

#[test]
fn rejects_adding_values_of_different_linear_types() {
    let v = Var::linear("v", r());
    let t = Term::lin_lam(&v, LTerm::plus(lvar(&v), LTerm::zero(rr())));
    assert_rejects(&t, &[], "right summand");
}

#[test]
fn rejects_projecting_from_a_linear_non_pair() {
    let v = Var::linear("v", r());
    let t = Term::lin_lam(&v, LTerm::fst(lvar(&v)));
    assert_rejects(&t, &[], "needs a linear pair");
}

#[test]
fn rejects_a_linear_application_at_the_wrong_domain() {
    let v = Var::linear("v", r());
    let w = Var::linear("w", rr());
    let f = Term::lin_lam(&w, LTerm::fst(lvar(&w)));
    let t = Term::lin_lam(&v, LTerm::app(f, lvar(&v)));
    assert_rejects(&t, &[], "argument of a linear map");
}

#[test]
fn rejects_a_copower_fold_with_a_non_linear_family() {
    // copowfold (\b -> b) l : the family must return linear maps.
    let v = Var::linear("v", LTy::copower(Ty::Real, r()));
    let b = Var::fresh("b", Ty::Real);
    let t = Term::lin_lam(&v, lmk(L::CopowFold(Term::lam(&b, cvar(&b)), lvar(&v))));
    assert_rejects(&t, &[], "a function into linear maps");
}

#[test]
fn rejects_a_copower_fold_at_the_wrong_copower() {
    let v = Var::linear("v", LTy::copower(Ty::Int, r()));
    let b = Var::fresh("b", Ty::Real);
    let u = Var::linear("u", r());
    let fam = Term::lam(&b, Term::lin_lam(&u, lvar(&u)));
    let t = Term::lin_lam(&v, lmk(L::CopowFold(fam, lvar(&v))));
    assert_rejects(&t, &[], "copowfold argument");
}

#[test]
fn rejects_power_application_at_the_wrong_point() {
    let v = Var::linear("v", LTy::power(Ty::Int, r()));
    let t = Term::lin_lam(&v, lmk(L::PowApp(lvar(&v), Term::real(1.0))));
    assert_rejects(&t, &[], "power argument");
}

#[test]
fn rejects_from_left_of_a_product() {
    let v = Var::linear("v", rr());
    let t = Term::lin_lam(&v, lmk(L::FromLeft(lvar(&v))));
    assert_rejects(&t, &[], "needs a linear sum");
}

#[test]
fn rejects_zip_with_of_non_linear_maps() {
    let v = Var::linear("v", LTy::array(r()));
    let fs = Var::fresh("fs", Ty::array(Ty::fun(Ty::Real, Ty::Real)));
    let t = Term::lin_lam(&v, lmk(L::ZipWith(cvar(&fs), lvar(&v))));
    assert_rejects(&t, &[fs], "needs an array of linear maps");
}

#[test]
fn rejects_indexing_with_a_real() {
    let v = Var::linear("v", LTy::array(r()));
    let t = Term::lin_lam(&v, lmk(L::Index(lvar(&v), Term::real(0.0))));
    assert_rejects(&t, &[], "size or index");
}

#[test]
fn rejects_ill_typed_cartesian_terms() {
    let x = Var::fresh("x", Ty::Real);
    assert_rejects(
        &Term::app(Term::real(1.0), Term::real(2.0)),
        &[],
        "needs a function",
    );
    assert_rejects(&cvar(&x), &[], "unbound variable `x`");
    let x_int = Var {
        ty: Ty::Int,
        ..x.clone()
    };
    assert_rejects(&cvar(&x_int), std::slice::from_ref(&x), "variable `x`");
    assert_rejects(
        &Term::prim(&op("sin"), vec![]),
        &[],
        "`sin` takes 1 arguments",
    );
    assert_rejects(&mul(Term::real(1.0), int(2)), &[], "argument of `mul`");
    assert_rejects(
        &mk(K::LinPrim(LinPrim::dot_with(), Term::real(1.0))),
        &[],
        "argument of `dotWith`",
    );
    let p = Var::fresh("p", Ty::Real);
    assert_rejects(
        &Term::let_pat(Pat::Var(p), int(1), Term::unit()),
        &[],
        "let pattern",
    );
}

// ----- acceptance and evaluation of derivative-style terms -----

/// `x : (Real, Real) ⊢ (x1 * x2, λ̲v. (x2 * v, x1 * v))`: reverse CHAD of multiplication.
#[test]
fn reverse_derivative_of_multiplication() {
    let x = Var::fresh("x", Ty::prod(Ty::Real, Ty::Real));
    let v = Var::linear("v", r());
    let (x1, x2) = (Term::fst(cvar(&x)), Term::snd(cvar(&x)));
    let t = Term::pair(
        mul(x1.clone(), x2.clone()),
        Term::lin_lam(
            &v,
            LTerm::pair(LTerm::scale(x2, lvar(&v)), LTerm::scale(x1, lvar(&v))),
        ),
    );
    assert_eq!(
        check(&t, std::slice::from_ref(&x)).unwrap().to_string(),
        "(Real, Real ⊸ (Real, Real))"
    );
    let env: Env = [(x.id, Value::pair(Value::Real(3.0), Value::Real(4.0)))]
        .into_iter()
        .collect();
    let out = eval(&t, &env).unwrap();
    let (y, df) = out.expect_pair();
    assert_eq!(y.expect_real(), 12.0);
    let Value::LinFun(df) = df else { panic!() };
    let g = df.apply(&Lin::real(1.5)).unwrap();
    assert_eq!((g.fst().to_real(), g.snd().to_real()), (6.0, 4.5));
}

/// The reverse rules for `eval` and `curry` (DESIGN.md §5) on `f = λb. a * b` with `a`
/// captured: the cotangent of the closure is a copower, folded back into `a`'s cotangent.
#[test]
fn copowers_carry_function_cotangents() {
    // fam = \b -> λ̲w. b * w  (the derivative of `a * b` w.r.t. a, transposed, at b)
    let b = Var::fresh("b", Ty::Real);
    let w = Var::linear("w", r());
    let fam = Term::lam(&b, Term::lin_lam(&w, LTerm::scale(cvar(&b), lvar(&w))));
    // λ̲c. copowfold fam c : !Real ⊗ Real ⊸ Real
    let c = Var::linear("c", LTy::copower(Ty::Real, r()));
    let fold = Term::lin_lam(&c, lmk(L::CopowFold(fam, lvar(&c))));
    assert_eq!(
        check(&fold, &[]).unwrap().to_string(),
        "!Real ⊗ Real ⊸ Real"
    );
    // λ̲v. !2 ⊗ v + !5 ⊗ (3 * v): two uses of the closure, at b = 2 and b = 5.
    let v = Var::linear("v", r());
    let uses = Term::lin_lam(
        &v,
        LTerm::plus(
            lmk(L::Copower(Term::real(2.0), lvar(&v))),
            lmk(L::Copower(
                Term::real(5.0),
                LTerm::scale(Term::real(3.0), lvar(&v)),
            )),
        ),
    );
    let composed = Term::lin_lam(&v, LTerm::app(fold, LTerm::app(uses, lvar(&v))));
    assert_eq!(check(&composed, &[]).unwrap().to_string(), "Real ⊸ Real");
    let got = apply(&composed, &Env::new(), Lin::real(1.0)).unwrap();
    assert_eq!(got.to_real(), 2.0 + 5.0 * 3.0);
}

#[test]
fn powers_carry_function_tangents() {
    // λ̲v. (\b -> b * v) @ 3 + (\b -> v) @ 0
    let v = Var::linear("v", r());
    let b = Var::fresh("b", Ty::Real);
    let b2 = Var::fresh("b", Ty::Real);
    let p1 = lmk(L::PowLam(b.clone(), LTerm::scale(cvar(&b), lvar(&v))));
    let p2 = lmk(L::PowLam(b2, lvar(&v)));
    let t = Term::lin_lam(
        &v,
        LTerm::plus(
            lmk(L::PowApp(p1, Term::real(3.0))),
            lmk(L::PowApp(p2, Term::real(0.0))),
        ),
    );
    assert_eq!(check(&t, &[]).unwrap().to_string(), "Real ⊸ Real");
    assert_eq!(
        apply(&t, &Env::new(), Lin::real(2.0)).unwrap().to_real(),
        8.0
    );
}

#[test]
fn array_forms_evaluate() {
    let n = Var::fresh("n", Ty::Int);
    let env: Env = [(n.id, Value::Int(4))].into_iter().collect();
    let v = Var::linear("v", r());
    let i = Var::fresh("i", Ty::Int);
    // λ̲v. lsum (lbuild n (\i -> toReal i * v)) + lsum (onehot n 2 v) + replicate n v ! 3
    let build = lmk(L::Build(
        cvar(&n),
        i.clone(),
        LTerm::scale(Term::prim(&op("toReal"), vec![cvar(&i)]), lvar(&v)),
    ));
    let t = Term::lin_lam(
        &v,
        LTerm::plus(
            LTerm::plus(
                lmk(L::Sum(build)),
                lmk(L::Sum(lmk(L::OneHot(cvar(&n), int(2), lvar(&v))))),
            ),
            lmk(L::Index(lmk(L::Replicate(cvar(&n), lvar(&v))), int(3))),
        ),
    );
    assert_eq!(
        check(&t, std::slice::from_ref(&n)).unwrap().to_string(),
        "Real ⊸ Real"
    );
    let got = apply(&t, &env, Lin::real(2.0)).unwrap().to_real();
    assert_eq!(got, (0.0 + 1.0 + 2.0 + 3.0) * 2.0 + 2.0 + 2.0);
}

#[test]
fn zip_with_lmap_and_linear_let_evaluate() {
    // fs = [λ̲u. 2 * u, λ̲u. 3 * u]; λ̲v. let lin w = zipWith fs v in lsum (lmap (λ̲u. 10 * u) w)
    let u = Var::linear("u", r());
    let scale = |c: f64| Term::lin_lam(&u, LTerm::scale(Term::real(c), lvar(&u)));
    let fs = mk(K::Array(
        Ty::lin_fun(r(), r()),
        vec![scale(2.0), scale(3.0)],
    ));
    let v = Var::linear("v", LTy::array(r()));
    let w = Var::linear("w", LTy::array(r()));
    let t = Term::lin_lam(
        &v,
        LTerm::lin_let(
            &w,
            lmk(L::ZipWith(fs, lvar(&v))),
            lmk(L::Sum(lmk(L::Map(scale(10.0), lvar(&w))))),
        ),
    );
    assert_eq!(check(&t, &[]).unwrap().to_string(), "Array Real ⊸ Real");
    let got = apply(&t, &Env::new(), Lin::reals(vec![1.0, 1.0, 100.0])).unwrap();
    // zipWith has the length of fs: the third element is dropped.
    assert_eq!(got.to_real(), 10.0 * (2.0 + 3.0));
    // A sparse argument only touches its entries.
    let one_hot = Lin::onehot(3, 1, Lin::real(1.0)).unwrap();
    assert_eq!(apply(&t, &Env::new(), one_hot).unwrap().to_real(), 30.0);
}

#[test]
fn linear_sums_and_native_kernels_evaluate() {
    // λ̲v. fromLeft (linl v : Real ⊕ Real) + fromRight (linl v) + dotWith ys • (scaleArray ys • v)
    let ys = Var::fresh("ys", Ty::array(Ty::Real));
    let env: Env = [(ys.id, Value::reals(vec![1.0, 2.0, 3.0]))]
        .into_iter()
        .collect();
    let v = Var::linear("v", r());
    let inl = || lmk(L::Inl(lvar(&v), r()));
    let kernel = |k| mk(K::LinPrim(k, cvar(&ys)));
    let t = Term::lin_lam(
        &v,
        LTerm::plus(
            LTerm::plus(lmk(L::FromLeft(inl())), lmk(L::FromRight(inl()))),
            LTerm::app(
                kernel(LinPrim::dot_with()),
                LTerm::app(kernel(LinPrim::scale_array()), lvar(&v)),
            ),
        ),
    );
    assert_eq!(
        check(&t, std::slice::from_ref(&ys)).unwrap().to_string(),
        "Real ⊸ Real"
    );
    let got = apply(&t, &env, Lin::real(2.0)).unwrap().to_real();
    assert_eq!(got, 2.0 + 0.0 + 2.0 * (1.0 + 4.0 + 9.0));
}

#[test]
fn linear_maps_skip_zero_and_report_runtime_errors_with_positions() {
    // λ̲v. onehot 2 5 v fails on a non-zero argument, and is zero on zero without running.
    let v = Var::linear("v", r());
    let span = chad::Span::new(3, 9);
    let body = LTerm::new(L::OneHot(int(2), int(5), lvar(&v)), span);
    let t = Term::lin_lam(&v, body);
    assert!(apply(&t, &Env::new(), Lin::zero()).unwrap().is_zero());
    let e = apply(&t, &Env::new(), Lin::real(1.0)).unwrap_err();
    assert!(e.message().contains("out of range"), "{}", e.message());
    assert_eq!(e.span(), Some(span));
}

#[test]
fn check_linear_checks_open_linear_terms() {
    let x = Var::fresh("x", Ty::Real);
    let d = Var::linear("d", rr());
    let l = LTerm::plus(
        LTerm::scale(cvar(&x), LTerm::fst(lvar(&d))),
        LTerm::snd(lvar(&d)),
    );
    assert_eq!(
        check_linear(&l, std::slice::from_ref(&x), std::slice::from_ref(&d)).unwrap(),
        r()
    );
    let env: Env = [
        (x.id, Value::Real(3.0)),
        (d.id, Value::Lin(Lin::pair(Lin::real(2.0), Lin::real(1.0)))),
    ]
    .into_iter()
    .collect();
    assert_eq!(eval_linear(&l, &env).unwrap().to_real(), 7.0);
    // The same term is rejected when `d` is not declared linear.
    let d_cart = Var::fresh("d", Ty::lin(rr()));
    let l2 = LTerm::fst(lvar(&d_cart));
    let e = check_linear(&l2, &[d_cart], &[]).unwrap_err();
    assert!(
        e.message()
            .contains("Cartesian variable used in a linear position")
    );
}
