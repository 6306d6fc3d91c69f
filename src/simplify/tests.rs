//! Each rule on a small term where it applies: the expected result (derived by hand), the same
//! term left alone with the rule switched off, and the value unchanged (by the target
//! evaluator). Plus the cost guarantees: no work is moved into a λ or duplicated.

use super::{Rules, simplify, simplify_with};
use crate::prim::op;
use crate::target::check::check;
use crate::target::eval::{Env, eval};
use crate::target::linear::Lin;
use crate::target::term::{LTerm, LTermKind, Lit, Pat, Term, TermKind, Var};
use crate::target::types::{LTy, Ty};
use crate::value::Value;

fn real(name: &str) -> Var {
    Var::fresh(name, Ty::Real)
}

fn lin(name: &str) -> Var {
    Var::linear(name, LTy::Real)
}

fn v(x: &Var) -> Term {
    Term::var(x)
}

fn lv(x: &Var) -> LTerm {
    LTerm::var(x)
}

fn prim(name: &str, args: Vec<Term>) -> Term {
    Term::prim(&op(name), args)
}

fn zero() -> LTerm {
    LTerm::zero(LTy::Real)
}

fn lk(k: LTermKind) -> LTerm {
    LTerm::mk(k)
}

/// `\v ⊸ body` as a closed linear function of a real.
fn dlam(body: impl FnOnce(&Var) -> LTerm) -> Term {
    let d = lin("v");
    Term::lin_lam(&d, body(&d))
}

/// Simplifies `t` with `rule` on (everything else on too) and off: the results, after checking
/// both type-check at the original type, evaluate to the same value at `x = 0.7`, and that the
/// rule fired.
fn both(t: &Term, x: &Var, rule: &str) -> (String, String) {
    let ty = check(t, std::slice::from_ref(x)).expect("the test term type-checks");
    let mut env = Env::new();
    env.insert(x.id, Value::Real(0.7));
    let expect = observe(&eval(t, &env).expect("the test term evaluates"));
    let mut out = Vec::new();
    for rules in [Rules::all(), Rules::all().without(rule)] {
        let (s, stats) = simplify_with(t, &rules);
        assert_eq!(check(&s, std::slice::from_ref(x)).unwrap(), ty, "{s}");
        assert_eq!(observe(&eval(&s, &env).unwrap()), expect, "{s}");
        if rules == Rules::all() {
            assert!(
                stats.fired.contains_key(rule),
                "{rule} did not fire on {t}: {stats:?}"
            );
        }
        out.push(flat(&s.to_string()));
    }
    (out.remove(0), out.remove(0))
}

/// Printed text on one line (the printer breaks `let` chains over lines).
fn flat(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// [`simplify`], printed on one line.
fn simple(t: &Term) -> String {
    flat(&simplify(t).to_string())
}

/// A comparable rendering of a value: reals, pairs, and linear maps applied to 1.0.
fn observe(val: &Value) -> String {
    match val {
        Value::Pair(p) => format!("({}, {})", observe(&p.0), observe(&p.1)),
        Value::LinFun(f) => match f.apply(&Lin::real(1.0)) {
            Ok(l) => format!("lin {l}"),
            Err(e) => format!("error {e}"),
        },
        Value::Closure(_) => observe(&val.apply(Value::Real(1.5)).unwrap()),
        other => format!("{other}"),
    }
}

#[test]
fn lam_app_let_and_let_inline() {
    let (x, y) = (real("x"), real("y"));
    // (\y -> y * y) (sin x) ~> let y = sin x in y * y: shared, not inlined twice.
    let t = Term::app(
        Term::lam(&y, prim("mul", vec![v(&y), v(&y)])),
        prim("sin", vec![v(&x)]),
    );
    let (on, off) = both(&t, &x, "lamAppLet");
    assert_eq!(on, "let y = sin x in y * y");
    assert_eq!(off, "(\\y -> y * y) (sin x)");
    // Used once: inlined.
    let t = Term::let_(&y, prim("sin", vec![v(&x)]), prim("neg", vec![v(&y)]));
    let (on, off) = both(&t, &x, "letInline");
    assert_eq!(on, "-sin x");
    assert_eq!(off, "let y = sin x in -y");
}

#[test]
fn let_inline_never_moves_work_under_a_lambda_or_duplicates_it() {
    let (x, y, z) = (real("x"), real("y"), real("z"));
    let sin = prim("sin", vec![v(&x)]);
    // Used once, but under a λ that may run many times: stays.
    let t = Term::let_(
        &y,
        sin.clone(),
        Term::lam(&z, prim("mul", vec![v(&y), v(&z)])),
    );
    assert_eq!(simple(&t), "let y = sin x in \\z -> y * z");
    // Used twice: stays.
    let t = Term::let_(&y, sin.clone(), Term::pair(v(&y), v(&y)));
    assert_eq!(simple(&t), "let y = sin x in (y, y)");
    // Under a linear λ (the backward pass may run many times): stays.
    let t = Term::let_(&y, sin, dlam(|d| LTerm::scale(v(&y), lv(d))));
    assert_eq!(simple(&t), "let y = sin x in \\v ⊸ y * v");
    // A λ used once moves under a λ (a value: no work moves).
    let f = Var::fresh("f", Ty::fun(Ty::Real, Ty::Real));
    let t = Term::let_(
        &f,
        Term::lam(&y, prim("sin", vec![v(&y)])),
        Term::lam(&z, Term::app(v(&f), v(&z))),
    );
    assert_eq!(simple(&t), "\\z -> sin z");
}

#[test]
fn let_rotate_and_let_proj() {
    let (x, y, z) = (real("x"), real("y"), real("z"));
    // let z = (let y = sin x in y * y) in z + z
    let inner = Term::let_(
        &y,
        prim("sin", vec![v(&x)]),
        prim("mul", vec![v(&y), v(&y)]),
    );
    let t = Term::let_(&z, inner, prim("add", vec![v(&z), v(&z)]));
    let (on, off) = both(&t, &x, "letRotate");
    assert_eq!(on, "let y = sin x in let z = y * y in z + z");
    assert_eq!(off, "let z = let y = sin x in y * y in z + z");
    // fst (let y = sin x in (y * y, y)) ~> let y = sin x in y * y
    let inner = Term::let_(
        &y,
        prim("sin", vec![v(&x)]),
        Term::pair(prim("mul", vec![v(&y), v(&y)]), v(&y)),
    );
    let (on, off) = both(&Term::fst(inner), &x, "letProj");
    assert_eq!(on, "let y = sin x in y * y");
    assert_eq!(off, "fst (let y = sin x in (y * y, y))");
}

#[test]
fn let_pair_split_pair_proj_and_pair_eta() {
    let (x, a, b) = (real("x"), real("a"), real("b"));
    let sin = prim("sin", vec![v(&x)]);
    let cos = prim("cos", vec![v(&x)]);
    // let (a, b) = (sin x, cos x) in b * a * a
    let p = Pat::Pair(Box::new(Pat::Var(a.clone())), Box::new(Pat::Var(b.clone())));
    let body = prim("mul", vec![prim("mul", vec![v(&b), v(&a)]), v(&a)]);
    let t = Term::let_pat(p, Term::pair(sin.clone(), cos.clone()), body);
    let (on, off) = both(&t, &x, "letPairSplit");
    assert_eq!(on, "let a = sin x in cos x * a * a");
    assert_eq!(off, "let (a, b) = (sin x, cos x) in b * a * a");
    // let p = (sin x, cos x) in (fst p * fst p, snd p): the pair is taken apart statically.
    let pv = Var::fresh("p", Ty::prod(Ty::Real, Ty::Real));
    let body = Term::pair(
        prim("mul", vec![Term::fst(v(&pv)), Term::fst(v(&pv))]),
        Term::snd(v(&pv)),
    );
    let t = Term::let_(&pv, Term::pair(sin, cos), body);
    let (on, _) = both(&t, &x, "pairProj");
    assert_eq!(on, "let p = sin x in (p * p, cos x)");
    // (fst q, snd q) ~> q
    let q = Var::fresh("q", Ty::prod(Ty::Real, Ty::Real));
    let t = Term::lam(&q, Term::pair(Term::fst(v(&q)), Term::snd(v(&q))));
    assert_eq!(simple(&t), "\\q -> q");
    let off = simplify_with(&t, &Rules::all().without("pairEta")).0;
    assert_eq!(flat(&off.to_string()), "\\q -> (fst q, snd q)");
}

#[test]
fn plus_rules_and_zero_propagation() {
    let x = real("x");
    // \v ⊸ (0, v) + (v, 0) ~> \v ⊸ (v, v)
    let t = dlam(|d| LTerm::plus(LTerm::pair(zero(), lv(d)), LTerm::pair(lv(d), zero())));
    let t = Term::pair(v(&x), t);
    let (on, off) = both(&t, &x, "plusPair");
    assert_eq!(on, "(x, \\v ⊸ (v, v))");
    assert_eq!(off, "(x, \\v ⊸ (0, v) + (v, 0))");
    let (_, off) = both(&t, &x, "plusZero");
    assert_eq!(off, "(x, \\v ⊸ (0 + v, v + 0))");
    // \v ⊸ fst ((0, v)) + x * (let y = sin x in y * v) ~> plusLet floats the let.
    let y = real("y");
    let t = dlam(|d| {
        LTerm::plus(
            LTerm::scale(v(&x), lv(d)),
            LTerm::let_(
                &y,
                prim("sin", vec![v(&x)]),
                LTerm::scale(v(&y), LTerm::scale(v(&y), lv(d))),
            ),
        )
    });
    let (on, off) = both(&t, &x, "plusLet");
    assert_eq!(on, "\\v ⊸ let y = sin x in x * v + y * (y * v)");
    assert_eq!(off, "\\v ⊸ x * v + (let y = sin x in y * (y * v))");
    // zeroProp: fst 0, f • 0, t * 0.
    let g = Var::fresh("g", Ty::lin_fun(LTy::Real, LTy::Real));
    let t = Term::let_(
        &g,
        dlam(|d| LTerm::scale(v(&x), lv(d))),
        dlam(|d| {
            LTerm::plus(
                LTerm::app(
                    v(&g),
                    LTerm::fst(LTerm::zero(LTy::prod(LTy::Real, LTy::Real))),
                ),
                lv(d),
            )
        }),
    );
    let (on, _) = both(&t, &x, "zeroProp");
    assert_eq!(on, "\\v ⊸ v");
    // linl 0 ~> 0, linr 0 ~> 0 (an `if`'s cotangent of `Bool = 1 + 1`).
    let t = dlam(|d| {
        LTerm::pair(
            lv(d),
            LTerm::plus(
                LTerm::mk(LTermKind::Inl(zero(), LTy::Unit)),
                LTerm::mk(LTermKind::Inr(LTy::Real, LTerm::zero(LTy::Unit))),
            ),
        )
    });
    let (on, off) = both(&t, &x, "zeroProp");
    assert_eq!(on, "\\v ⊸ (v, 0)");
    assert_eq!(off, "\\v ⊸ (v, linl 0 + linr 0)");
}

#[test]
fn algebra_folds_literals_and_units() {
    let x = real("x");
    let t = prim(
        "add",
        vec![
            prim("mul", vec![Term::real(1.0), v(&x)]),
            prim("mul", vec![Term::real(2.0), Term::real(3.0)]),
        ],
    );
    let (on, off) = both(&t, &x, "algebra");
    assert_eq!(on, "x + 6.0");
    assert_eq!(off, "1.0 * x + 2.0 * 3.0");
    // 0 * l is the strong zero, like Lin::scale.
    let t = dlam(|d| LTerm::plus(LTerm::scale(Term::real(0.0), lv(d)), lv(d)));
    let (on, _) = both(&t, &x, "algebra");
    assert_eq!(on, "\\v ⊸ v");
}

#[test]
fn lin_beta_eta_and_copower_singleton() {
    let x = real("x");
    // \v ⊸ (\u ⊸ x * u) • v ~> \v ⊸ x * v
    let t = dlam(|d| LTerm::app(dlam(|u| LTerm::scale(v(&x), lv(u))), lv(d)));
    let (on, off) = both(&t, &x, "linBeta");
    assert_eq!(on, "\\v ⊸ x * v");
    assert_eq!(off, "\\v ⊸ (\\v_1 ⊸ x * v_1) • v");
    // \v ⊸ f • v ~> f
    let f = Var::fresh("f", Ty::lin_fun(LTy::Real, LTy::Real));
    let t = Term::let_(
        &f,
        dlam(|d| LTerm::scale(prim("sin", vec![v(&x)]), lv(d))),
        Term::pair(dlam(|d| LTerm::app(v(&f), lv(d))), v(&f)),
    );
    let (on, _) = both(&t, &x, "linEta");
    assert_eq!(on, "let f = \\v ⊸ sin x * v in (f, f)");
    // copowfold (\b -> \w ⊸ b * w) (!x ⊗ v) ~> x * v
    let b = real("b");
    let fold = Term::lam(&b, dlam(|w| LTerm::scale(v(&b), lv(w))));
    let t = dlam(|d| {
        lk(LTermKind::CopowFold(
            fold,
            lk(LTermKind::Copower(v(&x), lv(d))),
        ))
    });
    let (on, _) = both(&t, &x, "copowSingleton");
    assert_eq!(on, "\\v ⊸ x * v");
}

#[test]
fn dead_let_removes_chains_in_one_pass_and_case_known_picks_a_branch() {
    let x = real("x");
    let vars: Vec<Var> = (0..5).map(|k| real(&format!("a{k}"))).collect();
    // let a0 = sin x in let a1 = sin a0 in ... in x: all dead.
    let mut t = v(&x);
    for k in (0..5).rev() {
        let arg = if k == 0 { v(&x) } else { v(&vars[k - 1]) };
        t = Term::let_(&vars[k], prim("sin", vec![arg]), t);
    }
    let (on, _) = both(&t, &x, "deadLet");
    assert_eq!(on, "x");
    let (_, stats) = simplify_with(&t, &Rules::only(&["deadLet"]));
    assert_eq!(
        stats.passes, 2,
        "one pass removes the chain, one finds nothing left (with the floating rules off a pass \
         cannot tell it left nothing)"
    );
    let floating = ["deadLet", "letRotate", "letProj", "letFloat", "plusLet"];
    let (_, stats) = simplify_with(&t, &Rules::only(&floating));
    assert_eq!(
        stats.passes, 1,
        "one pass removes the chain and knows nothing is left"
    );
    // case inl x of inl a -> a * 2 | inr b -> b ~> x * 2
    let (a, bb) = (real("a"), Var::fresh("b", Ty::Int));
    let t = Term::mk(TermKind::Case(
        Term::mk(TermKind::Inl(v(&x), Ty::Int)),
        Pat::Var(a.clone()),
        prim("mul", vec![v(&a), Term::real(2.0)]),
        Pat::Var(bb.clone()),
        Term::real(0.0),
    ));
    let (on, _) = both(&t, &x, "caseKnown");
    assert_eq!(on, "x * 2.0");
    let t = Term::mk(TermKind::If(
        Term::lit(Lit::Bool(false)),
        v(&x),
        prim("neg", vec![v(&x)]),
    ));
    let (on, _) = both(&t, &x, "caseKnown");
    assert_eq!(on, "-x");
}

#[test]
fn let_lam_pair_split_serves_each_half_separately() {
    let (x, z) = (real("x"), real("z"));
    let fty = Ty::fun(Ty::Real, Ty::prod(Ty::Real, Ty::Real));
    let f = Var::fresh("f", fty);
    // let f = \z -> (sin z, cos z) in fst (f x) * fst (f x) + snd (f x)
    let lam = Term::lam(
        &z,
        Term::pair(prim("sin", vec![v(&z)]), prim("cos", vec![v(&z)])),
    );
    let body = prim(
        "add",
        vec![
            prim(
                "mul",
                vec![
                    Term::fst(Term::app(v(&f), v(&x))),
                    Term::fst(Term::app(v(&f), v(&x))),
                ],
            ),
            Term::snd(Term::app(v(&f), v(&x))),
        ],
    );
    let t = Term::let_(&f, lam, body);
    let (on, _) = both(&t, &x, "letLamPairSplit");
    assert_eq!(on, "let f = \\z -> sin z in f x * f x + cos x");
}

#[test]
fn array_rules_sum_and_map() {
    let x = real("x");
    let n = || Term::lit(Lit::Int(3));
    let arr = |l: LTerm| lk(LTermKind::Replicate(n(), l));
    // lsum (onehot 3 1 v) ~> v
    let t = dlam(|d| {
        lk(LTermKind::Sum(lk(LTermKind::OneHot(
            n(),
            Term::lit(Lit::Int(1)),
            lv(d),
        ))))
    });
    let (on, _) = both(&t, &x, "sumSingleton");
    assert_eq!(on, "\\v ⊸ v");
    // lsum (lbuild 3 (\i -> 0)) + v ~> v (mapZero, then sumZero, then plusZero)
    let i = Var::fresh("i", Ty::Int);
    let t = dlam(|d| {
        LTerm::plus(
            lk(LTermKind::Sum(lk(LTermKind::Build(n(), i.clone(), zero())))),
            lv(d),
        )
    });
    let (on, off) = both(&t, &x, "mapZero");
    assert_eq!(on, "\\v ⊸ v");
    assert_eq!(off, "\\v ⊸ lsum (lbuild 3 (\\i -> 0)) + v");
    let (_, off) = both(&t, &x, "sumZero");
    assert_eq!(off, "\\v ⊸ lsum 0 + v");
    // lsum (lmap (\p ⊸ x * p) (replicate 3 v)) ~> x * lsum (replicate 3 v)
    let t = dlam(|d| {
        let f = dlam(|p| LTerm::scale(v(&x), lv(p)));
        lk(LTermKind::Sum(lk(LTermKind::Map(f, arr(lv(d))))))
    });
    let (on, off) = both(&t, &x, "sumZip");
    assert_eq!(on, "\\v ⊸ x * lsum (replicate 3 v)");
    assert_eq!(off, "\\v ⊸ lsum (lmap (\\v_1 ⊸ x * v_1) (replicate 3 v))");
    // sin (let y = cos x in y * y) ~> let y = cos x in sin (y * y)
    let y = real("y");
    let t = prim(
        "sin",
        vec![Term::let_(
            &y,
            prim("cos", vec![v(&x)]),
            prim("mul", vec![v(&y), v(&y)]),
        )],
    );
    let (on, off) = both(&t, &x, "letFloat");
    assert_eq!(on, "let y = cos x in sin (y * y)");
    assert_eq!(off, "sin (let y = cos x in y * y)");
}
