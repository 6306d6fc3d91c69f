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
            Ok(l) => format!("lin {}", zeros_as_reals(&l.to_string())),
            Err(e) => format!("error {e}"),
        },
        Value::Closure(_) => observe(&val.apply(Value::Real(1.5)).unwrap()),
        other => format!("{other}"),
    }
}

/// A printed linear value with its symbolic zeros (`0`) written as the real `0.0` they are
/// equal to, so that representations compare by value.
fn zeros_as_reals(s: &str) -> String {
    let mut out = String::new();
    let mut token = String::new();
    for c in s.chars().chain(std::iter::once(' ')) {
        if c.is_alphanumeric() || c == '.' || c == '-' {
            token.push(c);
            continue;
        }
        out.push_str(if token == "0" { "0.0" } else { &token });
        token.clear();
        out.push(c);
    }
    out.pop();
    out
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
    // The product rule of x * x: x * v + x * v ~> 2 * (x * v); different scalars stay a sum.
    let t = dlam(|d| LTerm::plus(LTerm::scale(v(&x), lv(d)), LTerm::scale(v(&x), lv(d))));
    let (on, off) = both(&t, &x, "algebra");
    assert_eq!(on, "\\v ⊸ 2.0 * (x * v)");
    assert_eq!(off, "\\v ⊸ x * v + x * v");
    let t = dlam(|d| {
        LTerm::plus(
            LTerm::scale(v(&x), lv(d)),
            LTerm::scale(Term::real(0.5), lv(d)),
        )
    });
    assert_eq!(simple(&t), "\\v ⊸ x * v + 0.5 * v");
    // Also through a linear primitive at the same argument (kernels are built per use).
    let ys = Var::fresh("ys", Ty::array(Ty::Real));
    let sa = || {
        Term::mk(TermKind::LinPrim(
            crate::target::term::LinPrim::scale_array(),
            v(&ys),
        ))
    };
    let t = Term::let_(
        &ys,
        Term::mk(TermKind::Array(Ty::Real, vec![v(&x), Term::real(3.0)])),
        dlam(|d| LTerm::plus(LTerm::app(sa(), lv(d)), LTerm::app(sa(), lv(d)))),
    );
    let (on, off) = both(&t, &x, "algebra");
    assert!(on.ends_with("\\v ⊸ 2.0 * scaleArray ys • v"), "{on}");
    assert!(
        off.ends_with("\\v ⊸ scaleArray ys • v + scaleArray ys • v"),
        "{off}"
    );
}

#[test]
fn algebra_on_operands_made_equal_by_late_inlining_in_one_pass() {
    let x = real("x");
    let pty = LTy::prod(LTy::Real, LTy::Real);
    // \v ⊸ let lin p = (x * v, v) in let lin q = (x * v, v) in (fst p + fst q) + (snd p + snd q):
    // the pairs' non-atomic components get variables of their own, which are inlined late
    // (when `p` and `q` are dead); the sum of the two equal operands is doubled there, not by a
    // second pass.
    let t = dlam(|d| {
        let (p, q) = (Var::linear("p", pty.clone()), Var::linear("q", pty.clone()));
        let pair = || LTerm::pair(LTerm::scale(v(&x), lv(d)), lv(d));
        LTerm::lin_let(
            &p,
            pair(),
            LTerm::lin_let(
                &q,
                pair(),
                LTerm::plus(
                    LTerm::plus(LTerm::fst(lv(&p)), LTerm::fst(lv(&q))),
                    LTerm::plus(LTerm::snd(lv(&p)), LTerm::snd(lv(&q))),
                ),
            ),
        )
    });
    let (on, off) = both(&t, &x, "algebra");
    assert_eq!(on, "\\v ⊸ 2.0 * (x * v) + 2.0 * v");
    assert_eq!(off, "\\v ⊸ x * v + x * v + (v + v)");
    assert_eq!(simplify_with(&t, &Rules::all()).1.passes, 1);
    // \v ⊸ let lin p = (x * v, x * v) in fst p + snd p (the product rule of `x * x`): the
    // equal components share one variable, so the sum is doubled when it is built.
    let t = dlam(|d| {
        let p = Var::linear("p", pty.clone());
        let xv = || LTerm::scale(v(&x), lv(d));
        LTerm::lin_let(
            &p,
            LTerm::pair(xv(), xv()),
            LTerm::plus(LTerm::fst(lv(&p)), LTerm::snd(lv(&p))),
        )
    });
    let (on, off) = both(&t, &x, "algebra");
    assert_eq!(on, "\\v ⊸ 2.0 * (x * v)");
    assert_eq!(off, "\\v ⊸ x * v + x * v");
    assert_eq!(simplify_with(&t, &Rules::all()).1.passes, 1);
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
fn case_proj_moves_projections_into_branches() {
    let x = real("x");
    let (y, z) = (real("y"), real("z"));
    let dl = |k: f64| dlam(|d| LTerm::scale(Term::real(k), lv(d)));
    // let (y, _) = if x > 0 then (x * 2, λ̲v. 2 v) else (0, λ̲v. 0 v) in y + 1: the closures go.
    let branches = Term::mk(TermKind::If(
        prim("gt", vec![v(&x), Term::real(0.0)]),
        Term::pair(prim("mul", vec![v(&x), Term::real(2.0)]), dl(2.0)),
        Term::pair(Term::real(0.0), dl(0.0)),
    ));
    let wild = Pat::Wild(branches_ty());
    let t = Term::mk(TermKind::Let(
        Pat::Pair(Box::new(Pat::Var(y.clone())), Box::new(wild)),
        branches.clone(),
        prim("add", vec![v(&y), Term::real(1.0)]),
    ));
    let (on, off) = both(&t, &x, "caseProj");
    assert_eq!(on, "(if x > 0.0 then x * 2.0 else 0.0) + 1.0");
    assert!(off.contains('⊸'), "{off}");
    // snd (case inr x of inl a -> (a, a) | inr b -> (b, b * 3)): the case stays (caseKnown is
    // what resolves a known scrutinee; with it off the projection still moves in).
    let (a, b) = (real("a"), real("b"));
    let t = Term::snd(Term::mk(TermKind::Case(
        Term::mk(TermKind::Inr(Ty::Real, v(&x))),
        Pat::Var(a.clone()),
        Term::pair(v(&a), v(&a)),
        Pat::Var(b.clone()),
        Term::pair(v(&b), prim("mul", vec![v(&b), Term::real(3.0)])),
    )));
    let (s, stats) = simplify_with(&t, &Rules::all().without("caseKnown"));
    assert!(stats.fired.contains_key("caseProj"), "{stats:?}");
    assert_eq!(
        flat(&s.to_string()),
        "case inr x of inl a -> a | inr b -> b * 3.0"
    );
    // Both components used: nothing moves.
    let t = Term::mk(TermKind::Let(
        Pat::Pair(Box::new(Pat::Var(y.clone())), Box::new(Pat::Var(z.clone()))),
        Term::mk(TermKind::If(
            prim("gt", vec![v(&x), Term::real(0.0)]),
            Term::pair(v(&x), Term::real(1.0)),
            Term::pair(Term::real(0.0), v(&x)),
        )),
        prim("add", vec![v(&y), v(&z)]),
    ));
    let (_, stats) = simplify_with(&t, &Rules::all());
    assert!(!stats.fired.contains_key("caseProj"), "{stats:?}");
}

/// The type of the branches in [`case_proj_moves_projections_into_branches`]'s second component.
fn branches_ty() -> Ty {
    Ty::lin_fun(LTy::Real, LTy::Real)
}

#[test]
fn cse_reads_a_primitive_already_bound_in_scope() {
    let (x, y) = (real("x"), real("y"));
    // let y = sqrt x in (y * y, \v ⊸ (0.5 / sqrt x) * v): the derivative reads y.
    let d = dlam(|u| {
        LTerm::scale(
            prim("div", vec![Term::real(0.5), prim("sqrt", vec![v(&x)])]),
            lv(u),
        )
    });
    let t = Term::let_(
        &y,
        prim("sqrt", vec![v(&x)]),
        Term::pair(prim("mul", vec![v(&y), v(&y)]), d),
    );
    let (on, off) = both(&t, &x, "cse");
    assert_eq!(on, "let y = sqrt x in (y * y, \\v ⊸ 0.5 / y * v)");
    assert!(off.contains("0.5 / sqrt x"), "{off}");
    // Other arguments, or a binding in the other branch, are not the same computation.
    let z = real("z");
    let t = Term::mk(TermKind::If(
        prim("gt", vec![v(&x), Term::real(0.0)]),
        Term::let_(
            &z,
            prim("exp", vec![v(&x)]),
            prim(
                "mul",
                vec![v(&z), prim("exp", vec![prim("neg", vec![v(&x)])])],
            ),
        ),
        prim("exp", vec![v(&x)]),
    ));
    let (s, stats) = simplify_with(&t, &Rules::all());
    assert!(!stats.fired.contains_key("cse"), "{s}: {stats:?}");
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

// ----- array fusion (`fuse.rs`) -----

fn arr(name: &str) -> Var {
    Var::fresh(name, Ty::array(Ty::Real))
}

fn int(name: &str) -> Var {
    Var::fresh(name, Ty::Int)
}

fn tk(k: TermKind) -> Term {
    Term::mk(k)
}

fn len(xs: &Var) -> Term {
    tk(TermKind::Length(v(xs)))
}

fn at(xs: Term, i: Term) -> Term {
    tk(TermKind::Index(xs, i))
}

fn lbuild(n: Term, i: &Var, body: LTerm) -> LTerm {
    lk(LTermKind::Build(n, i.clone(), body))
}

fn lsum(l: LTerm) -> LTerm {
    lk(LTermKind::Sum(l))
}

fn onehot(n: Term, i: Term, l: LTerm) -> LTerm {
    lk(LTermKind::OneHot(n, i, l))
}

/// `\r -> fst r` or `\r -> snd r` over pairs of type `ty`.
fn proj_fn(first: bool, ty: Ty) -> Term {
    let r = Var::fresh("r", ty);
    Term::lam(
        &r,
        if first {
            Term::fst(v(&r))
        } else {
            Term::snd(v(&r))
        },
    )
}

/// Simplifies `t` (free `xs : Array Real`, at `[0.5, -1.25, 2.0]`) with every rule on and with
/// `rule` off: both type-check at `t`'s type and agree with `t` in value; `rule` fired (if
/// `fires`) or did not. The two results, on one line.
fn fused(t: &Term, xs: &Var, rule: &str, fires: bool) -> (String, String) {
    let ty = check(t, std::slice::from_ref(xs)).expect("the test term type-checks");
    let mut env = Env::new();
    env.insert(xs.id, Value::reals(vec![0.5, -1.25, 2.0]));
    let expect = observe(&eval(t, &env).expect("the test term evaluates"));
    let mut out = Vec::new();
    for rules in [Rules::all(), Rules::all().without(rule)] {
        let (s, stats) = simplify_with(t, &rules);
        assert_eq!(check(&s, std::slice::from_ref(xs)).unwrap(), ty, "{s}");
        assert_eq!(observe(&eval(&s, &env).unwrap()), expect, "{s}");
        if rules == Rules::all() {
            assert_eq!(
                stats.fired.contains_key(rule),
                fires,
                "{rule} on {t}: {stats:?}"
            );
        }
        // Simplifying again fires nothing (the fusion rules reach their fixed point too).
        let (_, again) = simplify_with(&s, &rules);
        assert!(again.fired.is_empty(), "{s}: {again:?}");
        out.push(flat(&s.to_string()));
    }
    (out.remove(0), out.remove(0))
}

/// `rs = build (length xs) (\i -> let y = xs ! i in (y * y, λ̲v. onehot (length xs) i (y * v)))`
/// and the pair type of its elements.
fn closures(xs: &Var) -> (Var, Term) {
    closures_of(xs, |e| prim("sin", vec![e]))
}

/// [`closures`] with `y = g (xs ! i)`.
fn closures_of(xs: &Var, g: impl FnOnce(Term) -> Term) -> (Var, Term) {
    let (i, y) = (int("i"), real("y"));
    let clo = dlam(|d| onehot(len(xs), v(&i), LTerm::scale(v(&y), lv(d))));
    let elem = Term::let_(
        &y,
        g(at(v(xs), v(&i))),
        Term::pair(prim("mul", vec![v(&y), v(&y)]), clo),
    );
    let pair = Ty::prod(Ty::Real, Ty::lin_fun(LTy::Real, LTy::array(LTy::Real)));
    let rs = Var::fresh("rs", Ty::array(pair));
    (rs, tk(TermKind::Build(len(xs), Term::lam(&i, elem))))
}

#[test]
fn closure_convert_stores_the_environment_and_sums_of_one_hots_become_arrays() {
    let xs = arr("xs");
    let (rs, def) = closures(&xs);
    let pair = rs.ty.as_array().unwrap().clone();
    // The reverse derivative of an index-sum: zipWith (map snd rs) (replicate n v).
    let back = dlam(|d| {
        lsum(lk(LTermKind::ZipWith(
            tk(TermKind::Map(proj_fn(false, pair.clone()), v(&rs))),
            lk(LTermKind::Replicate(len(&xs), lv(d))),
        )))
    });
    let t = Term::let_(
        &rs,
        def,
        Term::pair(tk(TermKind::Map(proj_fn(true, pair), v(&rs))), back),
    );
    let (on, off) = fused(&t, &xs, "closureConvert", true);
    assert_eq!(
        on,
        "let rs = build (length xs) (\\i -> let y = sin (xs ! i) in (y * y, y)) in \
         (map (\\r -> fst r) rs, \\v ⊸ lbuild (length xs) (\\i -> snd (rs ! i) * v))"
    );
    // With y = xs ! i, y is recomputed at the use rather than stored.
    let (rs2, def2) = closures_of(&xs, |e| e);
    let t2 = Term::let_(
        &rs2,
        def2,
        Term::pair(
            tk(TermKind::Map(
                proj_fn(true, rs2.ty.as_array().unwrap().clone()),
                v(&rs2),
            )),
            {
                let pair = rs2.ty.as_array().unwrap().clone();
                dlam(|d| {
                    lsum(lk(LTermKind::ZipWith(
                        tk(TermKind::Map(proj_fn(false, pair), v(&rs2))),
                        lk(LTermKind::Replicate(len(&xs), lv(d))),
                    )))
                })
            },
        ),
    );
    let (on, _) = fused(&t2, &xs, "closureConvert", true);
    assert_eq!(
        on,
        "( build (length xs) (\\i -> let y = xs ! i in y * y), \
         \\v ⊸ lbuild (length xs) (\\i -> xs ! i * v) )"
    );
    assert!(off.contains("zipWith"), "{off}");
    let (_, off) = fused(&t, &xs, "sumBuildOneHot", true);
    assert!(off.contains("lsum (lbuild"), "{off}");
}

/// The index-sum shape of [`closure_convert_stores_the_environment_and_sums_of_one_hots_become_arrays`]
/// over `rs = def`.
fn index_sum_shape(rs: &Var, def: Term, xs: &Var) -> Term {
    let back = dlam(|d| apply_all(xs, rs, lv(d)));
    tape_shape(rs, def, back)
}

#[test]
fn closure_convert_recomputes_cheap_arithmetic_and_map_parameters() {
    let xs = arr("xs");
    // y = 2 * xs ! i: a little arithmetic on an index is recomputed, nothing is stored, and the
    // array of first components is all that is left.
    let (rs, def) = closures_of(&xs, |e| prim("mul", vec![Term::lit(Lit::Real(2.0)), e]));
    let (on, _) = fused(&index_sum_shape(&rs, def, &xs), &xs, "closureConvert", true);
    assert_eq!(
        on,
        "( build (length xs) (\\i -> let y = 2.0 * xs ! i in y * y), \
         \\v ⊸ lbuild (length xs) (\\i -> 2.0 * xs ! i * v) )"
    );
    // y = sin (xs ! i) is stored; z = 3 * y is recomputed from it rather than stored as well
    // (the closure uses both).
    let (i, y, z) = (int("i"), real("y"), real("z"));
    let clo = dlam(|d| {
        let both = LTerm::plus(LTerm::scale(v(&y), lv(d)), LTerm::scale(v(&z), lv(d)));
        onehot(len(&xs), v(&i), both)
    });
    let elem = Term::let_(
        &y,
        prim("sin", vec![at(v(&xs), v(&i))]),
        Term::let_(
            &z,
            prim("mul", vec![Term::lit(Lit::Real(3.0)), v(&y)]),
            Term::pair(prim("mul", vec![v(&y), v(&z)]), clo),
        ),
    );
    let pair = Ty::prod(Ty::Real, Ty::lin_fun(LTy::Real, LTy::array(LTy::Real)));
    let rs = Var::fresh("rs", Ty::array(pair));
    let def = tk(TermKind::Build(len(&xs), Term::lam(&i, elem)));
    let (on, _) = fused(&index_sum_shape(&rs, def, &xs), &xs, "closureConvert", true);
    assert!(on.contains("(y * (3.0 * y), y)"), "{on}");
    assert!(on.contains("3.0 * y"), "{on}");
    assert!(!on.contains(", z)"), "{on}");
    // A map's parameter is recomputed as the element of its array.
    let a = real("a");
    let clo = dlam(|d| LTerm::scale(v(&a), lv(d)));
    let elem = Term::pair(prim("sin", vec![v(&a)]), clo);
    let pair = Ty::prod(Ty::Real, Ty::lin_fun(LTy::Real, LTy::Real));
    let rs = Var::fresh("rs", Ty::array(pair));
    let def = tk(TermKind::Map(Term::lam(&a, elem), v(&xs)));
    // (With only `map fst rs` and `map snd rs` as uses, mapPairSplit would split the pairs.)
    let t = match &index_sum_shape(&rs, def, &xs).kind {
        TermKind::Let(p, def, body) => match &body.kind {
            TermKind::Pair(_, back) => Term::let_(
                &p.vars()[0].clone(),
                def.clone(),
                Term::pair(Term::fst(at(v(&rs), Term::lit(Lit::Int(1)))), back.clone()),
            ),
            _ => unreachable!(),
        },
        _ => unreachable!(),
    };
    let (on, off) = fused(&t, &xs, "closureConvert", true);
    assert_eq!(
        on,
        "(map (\\a -> sin a) xs ! 1, \\v ⊸ lsum (lbuild (length xs) (\\i -> xs ! i * v)))"
    );
    assert!(off.contains("zipWith"), "{off}");
}

#[test]
fn snd_unused_keeps_only_first_components() {
    let xs = arr("xs");
    let (i, y) = (int("i"), real("y"));
    let elem = Term::let_(
        &y,
        at(v(&xs), v(&i)),
        Term::pair(
            prim("mul", vec![v(&y), Term::lit(Lit::Real(2.0))]),
            prim("sin", vec![v(&y)]),
        ),
    );
    let rs = Var::fresh("rs", Ty::array(Ty::prod(Ty::Real, Ty::Real)));
    let def = tk(TermKind::Build(len(&xs), Term::lam(&i, elem)));
    let pair = Ty::prod(Ty::Real, Ty::Real);
    let one = Term::lit(Lit::Int(1));
    // Uses: map fst rs, fst (rs ! 1), length rs.
    let t = Term::let_(
        &rs,
        def.clone(),
        Term::pair(
            tk(TermKind::Map(proj_fn(true, pair.clone()), v(&rs))),
            Term::pair(
                Term::fst(at(v(&rs), one.clone())),
                tk(TermKind::Length(v(&rs))),
            ),
        ),
    );
    let (on, off) = fused(&t, &xs, "sndUnused", true);
    assert_eq!(
        on,
        "let rs = build (length xs) (\\i -> xs ! i * 2.0) in (rs, rs ! 1, length rs)"
    );
    assert!(off.contains("sin"), "{off}");
    // A use of a second component keeps the pairs.
    let t = Term::let_(
        &rs,
        def,
        Term::pair(
            tk(TermKind::Map(proj_fn(true, pair), v(&rs))),
            Term::snd(at(v(&rs), one)),
        ),
    );
    fused(&t, &xs, "sndUnused", false);
}

#[test]
fn closure_convert_rewrites_applications_at_any_index() {
    let xs = arr("xs");
    let (rs, def) = closures(&xs);
    let j = int("j");
    // The forward shape: \u ⊸ lsum (lbuild (length xs) (\j -> snd (rs ! j) • (xs ! j * u))).
    let fwd = dlam(|u| {
        lsum(lbuild(
            len(&xs),
            &j,
            LTerm::app(
                Term::snd(at(v(&rs), v(&j))),
                LTerm::scale(at(v(&xs), v(&j)), lv(u)),
            ),
        ))
    });
    let t = Term::let_(
        &rs,
        def,
        Term::pair(Term::fst(at(v(&rs), Term::lit(Lit::Int(1)))), fwd),
    );
    let (on, off) = fused(&t, &xs, "closureConvert", true);
    assert!(!on.contains('•'), "{on}");
    assert!(off.contains('•'), "{off}");
    assert_eq!(
        on,
        "let rs = build (length xs) (\\i -> let y = sin (xs ! i) in (y * y, y)) in \
         (fst (rs ! 1), \\v ⊸ lbuild (length xs) (\\j -> snd (rs ! j) * (xs ! j * v)))"
    );
}

#[test]
fn closure_convert_leaves_arrays_used_otherwise() {
    let xs = arr("xs");
    // The closures escape: the array itself is the result.
    let (rs, def) = closures(&xs);
    let t = Term::let_(&rs, def, v(&rs));
    let ty = check(&t, std::slice::from_ref(&xs)).unwrap();
    let (s, stats) = simplify_with(&t, &Rules::all());
    assert!(!stats.fired.contains_key("closureConvert"), "{s}");
    assert_eq!(check(&s, std::slice::from_ref(&xs)).unwrap(), ty);
    // A closure taken out of the array without being applied.
    let (rs, def) = closures(&xs);
    let t = Term::let_(&rs, def, Term::snd(at(v(&rs), Term::lit(Lit::Int(0)))));
    let (on, _) = fused(&t, &xs, "closureConvert", false);
    assert!(on.contains('⊸'), "{on}");
    // The closures mapped out of the array, not as zipWith's argument.
    let (rs, def) = closures(&xs);
    let pair = rs.ty.as_array().unwrap().clone();
    let fs = tk(TermKind::Map(proj_fn(false, pair), v(&rs)));
    let t = Term::let_(
        &rs,
        def,
        dlam(|d| LTerm::app(at(fs, Term::lit(Lit::Int(2))), lv(d))),
    );
    let (on, _) = fused(&t, &xs, "closureConvert", false);
    assert!(on.contains('•'), "{on}");
}

#[test]
fn sum_build_one_hot_needs_the_same_length_and_the_lbuild_index() {
    let (xs, ys, j) = (arr("xs"), arr("ys"), int("j"));
    let body = |n: Term, i: Term| {
        dlam(|d| {
            lsum(lbuild(
                len(&xs),
                &j,
                onehot(n, i, LTerm::scale(at(v(&xs), v(&j)), lv(d))),
            ))
        })
    };
    let (on, off) = fused(&body(len(&xs), v(&j)), &xs, "sumBuildOneHot", true);
    assert_eq!(on, "\\v ⊸ lbuild (length xs) (\\j -> xs ! j * v)");
    assert_eq!(
        off,
        "\\v ⊸ lsum (lbuild (length xs) (\\j -> onehot (length xs) j (xs ! j * v)))"
    );
    // A let-bound length is unfolded.
    let n = int("n");
    let t = Term::let_(&n, len(&xs), Term::pair(v(&n), body(v(&n), v(&j))));
    let (on, _) = fused(&t, &xs, "sumBuildOneHot", true);
    assert!(!on.contains("onehot"), "{on}");
    // Another index: stays.
    let (on, _) = fused(
        &body(len(&xs), Term::lit(Lit::Int(1))),
        &xs,
        "sumBuildOneHot",
        false,
    );
    assert!(on.contains("onehot"), "{on}");
    // Another length (ys may be longer): stays.
    let (s, stats) = simplify_with(&Term::lam(&ys, body(len(&ys), v(&j))), &Rules::all());
    assert!(!stats.fired.contains_key("sumBuildOneHot"), "{s}");
}

#[test]
fn sum_build_proj_and_split() {
    let (xs, j) = (arr("xs"), int("j"));
    // fst (lsum (lbuild n (\j -> (xs ! j * v, onehot n j v)))) ~> lsum (lbuild n (\j -> xs ! j * v))
    let sum_of_pairs = |d: &Var| {
        lsum(lbuild(
            len(&xs),
            &j,
            LTerm::pair(
                LTerm::scale(at(v(&xs), v(&j)), lv(d)),
                onehot(len(&xs), v(&j), lv(d)),
            ),
        ))
    };
    // (With a binding both halves need, so that sumBuildSplit does not fire first.)
    let y = real("y");
    let shared = |d: &Var| {
        lsum(lbuild(
            len(&xs),
            &j,
            LTerm::let_(
                &y,
                prim("sin", vec![at(v(&xs), v(&j))]),
                LTerm::pair(
                    LTerm::scale(v(&y), lv(d)),
                    onehot(len(&xs), v(&j), LTerm::scale(v(&y), lv(d))),
                ),
            ),
        ))
    };
    let t = dlam(|d| LTerm::fst(shared(d)));
    let (on, off) = fused(&t, &xs, "sumBuildProj", true);
    assert_eq!(
        on,
        "\\v ⊸ lsum (lbuild (length xs) (\\j -> sin (xs ! j) * v))"
    );
    assert!(off.contains("fst (lsum"), "{off}");
    // The pair of sums.
    let t = dlam(sum_of_pairs);
    let (on, off) = fused(&t, &xs, "sumBuildSplit", true);
    assert_eq!(
        on,
        "\\v ⊸ (lsum (lbuild (length xs) (\\j -> xs ! j * v)), lbuild (length xs) (\\j -> v))"
    );
    assert!(
        off.contains("lsum (lbuild (length xs) (\\j -> (xs ! j * v, onehot"),
        "{off}"
    );
    // A binding both halves need that is not cheap: no split (it would be computed twice).
    let (on, _) = fused(&dlam(shared), &xs, "sumBuildSplit", false);
    assert_eq!(on.matches("sin").count(), 1, "{on}");
}

#[test]
fn plus_one_hot_gathers_equal_indices() {
    let xs = arr("xs");
    let one = || Term::lit(Lit::Int(1));
    let t = dlam(|d| {
        LTerm::plus(
            onehot(len(&xs), one(), LTerm::scale(Term::real(2.0), lv(d))),
            LTerm::plus(
                onehot(len(&xs), Term::lit(Lit::Int(0)), lv(d)),
                onehot(len(&xs), one(), LTerm::scale(Term::real(3.0), lv(d))),
            ),
        )
    });
    let (on, off) = fused(&t, &xs, "plusOneHot", true);
    assert_eq!(
        on,
        "\\v ⊸ onehot (length xs) 1 (2.0 * v + 3.0 * v) + onehot (length xs) 0 v"
    );
    assert_eq!(
        off,
        "\\v ⊸ onehot (length xs) 1 (2.0 * v) + (onehot (length xs) 0 v + onehot (length xs) 1 (3.0 * v))"
    );
}

/// The reverse derivative of definition `def` of the program `text`, simplified with every
/// rule but closureConvert, and with every rule.
fn reverse_without_and_with_closure_convert(
    text: &str,
    def: usize,
) -> (crate::ad::Vjp, crate::ad::Vjp) {
    use crate::ad::Vjp;
    let prog = crate::source::load(text, &crate::prim::Registry::builtin()).unwrap();
    let entry = prog.entry(def);
    let before = Vjp::new(&entry)
        .unwrap()
        .map_body(|t| simplify_with(t, &Rules::all().without("closureConvert")).0);
    let after = Vjp::new(&entry).unwrap().map_body(simplify);
    (before, after)
}

#[test]
fn fusion_removes_the_closures_from_ad_output_of_array_programs() {
    for text in [
        "def f (xs : Array Real) : Real = sum (build (length xs) (\\(i : Int) -> xs ! i * xs ! i))",
        "def f (a : Real) (xs : Array Real) : Real = sum (map (\\(x : Real) -> a * sin x) xs)",
        "def f (xs : Array Real) (ys : Array Real) : Real = sum (map2 (\\(x : Real) (y : Real) -> x * y) xs ys)",
    ] {
        let (before, after) = reverse_without_and_with_closure_convert(text, 0);
        let printed = after.mor().body.to_string();
        assert!(
            !printed.contains('•') && !printed.contains("zipWith"),
            "{printed}"
        );
        let n = text.matches("Array").count();
        let mut args: Vec<Value> = Vec::new();
        if text.contains("(a : Real)") {
            args.push(Value::Real(0.3));
        }
        for k in 0..n {
            args.push(Value::reals(vec![0.5, -1.25 + k as f64, 2.0]));
        }
        let (g0, g1) = (before.grad(&args).unwrap(), after.grad(&args).unwrap());
        assert_eq!(format!("{g0:?}"), format!("{g1:?}"), "{text}");
    }
}

#[test]
fn fusion_converts_every_closure_array_of_a_let_chain_in_one_round() {
    // A straight-line program mapping a closure every 50th line (20 maps): after converting one
    // closure array the fusion pass goes on into the `let`'s body, so the arrays further down
    // the chain are converted in the same round, not one per round (28 passes before, and the
    // 64-pass guard at 3000 lines).
    let text = crate::random::straight_line_ad_source(1000, 7, false, true);
    let prog = crate::source::load(&text, &crate::prim::Registry::builtin()).unwrap();
    let comb = crate::ccc::compile_entry(&prog.entry(prog.defs.len() - 1));
    for mor in [
        crate::ad::reverse::transform(&comb).unwrap(),
        crate::ad::forward::transform(&comb).unwrap(),
    ] {
        let (s, stats) = simplify_with(&mor.body, &Rules::all());
        assert!(stats.fired.get("closureConvert") >= Some(&19), "{stats:?}");
        assert!(stats.passes <= 12, "{stats:?}");
        assert!(!s.to_string().contains("zipWith"));
    }
}

#[test]
fn binding_deeply_nested_pairs_does_not_overflow_the_stack() {
    // `let y = ((..(sin x, sin x)..), sin x) in (y, y)` and, linearly,
    // `\v ⊸ let lin u = ((..(x * v, x * v)..), x * v) in u + u`: binding a pair whose
    // components are not atoms gives each component a variable, recursively (atomize and
    // bind_var, latomize and bind_lin), as deep as the pair. A context cotangent of a long
    // let chain is such a pair. On a 256 KiB thread.
    const DEPTH: usize = 20_000;
    std::thread::Builder::new()
        .stack_size(256 * 1024)
        .spawn(|| {
            let x = real("x");
            let (mut e, mut ty) = (prim("sin", vec![v(&x)]), Ty::Real);
            let d = lin("v");
            let (mut l, mut lty) = (LTerm::scale(v(&x), lv(&d)), LTy::Real);
            for _ in 0..DEPTH {
                e = Term::pair(e, prim("sin", vec![v(&x)]));
                ty = Ty::prod(ty, Ty::Real);
                l = LTerm::pair(l, LTerm::scale(v(&x), lv(&d)));
                lty = LTy::prod(lty, LTy::Real);
            }
            let y = Var::fresh("y", ty);
            let u = Var::linear("u", lty);
            let t = Term::pair(
                Term::let_(&y, e, Term::pair(v(&y), v(&y))),
                Term::lin_lam(&d, LTerm::lin_let(&u, l, LTerm::plus(lv(&u), lv(&u)))),
            );
            let size = t.size();
            let s = simplify(&t);
            assert!(
                s.size() > size / 2,
                "nothing was lost: {} of {size}",
                s.size()
            );
        })
        .expect("a thread")
        .join()
        .expect("no overflow");
}

/// `rs = build (length xs) (\i -> case decide (xs ! i > 0) of inl _ -> let y = g (xs ! i) in
/// (y * y, λ̲v. onehot (length xs) i (y * v)) | inr _ -> (0.0, λ̲v. 0))`: an array of branch-chosen
/// linear closures (the derivative of an `if` in a loop).
fn branch_closures(xs: &Var, g: impl FnOnce(Term) -> Term) -> (Var, Term) {
    let (i, y) = (int("i"), real("y"));
    let taken = Term::let_(
        &y,
        g(at(v(xs), v(&i))),
        Term::pair(
            prim("mul", vec![v(&y), v(&y)]),
            dlam(|d| onehot(len(xs), v(&i), LTerm::scale(v(&y), lv(d)))),
        ),
    );
    let other = Term::pair(
        Term::lit(Lit::Real(0.0)),
        dlam(|_| LTerm::zero(LTy::array(LTy::Real))),
    );
    let test = prim(
        "decide",
        vec![prim(
            "gt",
            vec![at(v(xs), v(&i)), Term::lit(Lit::Real(0.0))],
        )],
    );
    let elem = tk(TermKind::Case(
        test,
        Pat::Wild(Ty::Unit),
        taken,
        Pat::Wild(Ty::Unit),
        other,
    ));
    let pair = Ty::prod(Ty::Real, Ty::lin_fun(LTy::Real, LTy::array(LTy::Real)));
    let rs = Var::fresh("rs", Ty::array(pair));
    (rs, tk(TermKind::Build(len(xs), Term::lam(&i, elem))))
}

#[test]
fn case_split_lets_closure_convert_store_a_branch_choice() {
    let xs = arr("xs");
    // y = xs ! i is cheap to index again: nothing but the values is stored, and the linear map
    // is a linear case in the lbuild.
    let (rs, def) = branch_closures(&xs, |e| e);
    let t = index_sum_shape(&rs, def, &xs);
    let (on, off) = fused(&t, &xs, "caseSplit", true);
    assert_eq!(
        on,
        "( build (length xs) (\\i -> case decide (xs ! i > 0.0) of inl _ -> let y = xs ! i in \
         y * y | inr _ -> 0.0), \\v ⊸ lbuild (length xs) (\\i -> case decide (xs ! i > 0.0) of \
         inl _ -> xs ! i * v | inr _ -> 0) )"
    );
    assert!(
        off.contains("zipWith"),
        "without caseSplit the closures stay: {off}"
    );
    // y = sin (xs ! i) is stored: the tape is a sum carrying y on the left.
    let (rs, def) = branch_closures(&xs, |e| prim("sin", vec![e]));
    let t = index_sum_shape(&rs, def, &xs);
    let (on, off) = fused(&t, &xs, "caseSplit", true);
    assert!(!on.contains("zipWith") && !on.contains('•'), "{on}");
    assert!(on.contains("inl (y * y, y)"), "{on}");
    assert!(off.contains("zipWith"), "{off}");
}

#[test]
fn case_split_leaves_a_projected_branch_to_case_proj() {
    // fst (case ..): only the values are wanted, so the branches are projected and no linear
    // map is split off (or built).
    let xs = arr("xs");
    let (rs, def) = branch_closures(&xs, |e| prim("sin", vec![e]));
    let pair = rs.ty.as_array().unwrap().clone();
    let t = Term::let_(&rs, def, tk(TermKind::Map(proj_fn(true, pair), v(&rs))));
    let (s, stats) = simplify_with(&t, &Rules::all());
    assert!(!stats.fired.contains_key("caseSplit"), "{s}: {stats:?}");
    assert!(!s.to_string().contains('⊸'), "{s}");
}

#[test]
fn linear_case_rules() {
    // A linear case of a known injection is its branch; one with two zero branches is zero;
    // a projection moves into the branches.
    let x = real("x");
    let known = dlam(|d| {
        lk(LTermKind::Case(
            tk(TermKind::Inl(v(&x), Ty::Real)),
            Box::new(Pat::Var(real("a"))),
            LTerm::scale(v(&x), lv(d)),
            Box::new(Pat::Wild(Ty::Real)),
            LTerm::zero(LTy::Real),
        ))
    });
    assert_eq!(simple(&known), "\\v ⊸ x * v");
    let test = || {
        prim(
            "decide",
            vec![prim("gt", vec![v(&x), Term::lit(Lit::Real(0.0))])],
        )
    };
    let zeros = dlam(|_| {
        lk(LTermKind::Case(
            test(),
            Box::new(Pat::Wild(Ty::Unit)),
            LTerm::zero(LTy::Real),
            Box::new(Pat::Wild(Ty::Unit)),
            LTerm::zero(LTy::Real),
        ))
    });
    assert_eq!(simple(&zeros), "\\v ⊸ 0");
    let proj = dlam(|d| {
        LTerm::fst(lk(LTermKind::Case(
            test(),
            Box::new(Pat::Wild(Ty::Unit)),
            LTerm::pair(lv(d), LTerm::zero(LTy::Real)),
            Box::new(Pat::Wild(Ty::Unit)),
            LTerm::pair(LTerm::scale(v(&x), lv(d)), lv(d)),
        )))
    });
    let (on, _) = both(&proj, &x, "caseProj");
    assert_eq!(
        on,
        "\\v ⊸ case decide (x > 0.0) of inl _ -> v | inr _ -> x * v"
    );
}

// ----- closure arrays carried in the tuples of an outer array -----

/// `rs = build (length xs) (\i -> let y = sin (xs ! i) in (y * m, λ̲v. onehot (length xs) i
/// (y * (c * v))))`: closures whose code reads `y` (bound in the element) and `c` (bound
/// outside it).
fn closures_reading(xs: &Var, m: &Var, c: Term) -> (Var, Term) {
    let (i, y) = (int("i"), real("y"));
    let clo = dlam(|d| {
        let s = LTerm::scale(v(&y), LTerm::scale(c, lv(d)));
        onehot(len(xs), v(&i), s)
    });
    let elem = Term::let_(
        &y,
        prim("sin", vec![at(v(xs), v(&i))]),
        Term::pair(prim("mul", vec![v(&y), v(m)]), clo),
    );
    let pair = Ty::prod(Ty::Real, Ty::lin_fun(LTy::Real, LTy::array(LTy::Real)));
    let rs = Var::fresh("rs", Ty::array(pair));
    (rs, tk(TermKind::Build(len(xs), Term::lam(&i, elem))))
}

/// `build 2 (\k -> let m = xs ! k in let rs = def in (sum (map fst rs) * m, (rs, m)))`: an
/// array whose elements carry the array `rs` in their tuples (the tape of a loop), with the
/// element's `m`; `def` is made from `m`.
fn carrier(xs: &Var, m: &Var, make: impl FnOnce(&Var) -> (Var, Term)) -> (Var, Term) {
    let k = int("k");
    let (rs, def) = make(m);
    let pair = rs.ty.as_array().unwrap().clone();
    let first = prim(
        "mul",
        vec![
            prim("sum", vec![tk(TermKind::Map(proj_fn(true, pair), v(&rs)))]),
            v(m),
        ],
    );
    let elem = Term::let_(
        m,
        at(v(xs), v(&k)),
        Term::let_(&rs, def, Term::pair(first, Term::pair(v(&rs), v(m)))),
    );
    let ty = Ty::prod(Ty::Real, Ty::prod(rs.ty.clone(), Ty::Real));
    let outer = Var::fresh("outer", Ty::array(ty));
    let two = Term::lit(Lit::Int(2));
    (outer, tk(TermKind::Build(two, Term::lam(&k, elem))))
}

/// `lsum (lbuild 2 (\j -> let (r, c) = snd (outer ! j) in body r c))`, with `_` for `r` unless
/// `read`.
fn each_carried(outer: &Var, read: bool, body: impl FnOnce(&Var, &Var) -> LTerm) -> LTerm {
    let (j, m) = (int("j"), real("c"));
    let inner = outer.ty.as_array().unwrap().as_prod().unwrap().1;
    let r = Var::fresh("r", inner.as_prod().unwrap().0.clone());
    let rp = if read {
        Pat::Var(r.clone())
    } else {
        Pat::Wild(r.ty.clone())
    };
    let pat = Pat::Pair(Box::new(rp), Box::new(Pat::Var(m.clone())));
    let use_ = LTerm::mk(LTermKind::Let(
        pat,
        Term::snd(at(v(outer), v(&j))),
        body(&r, &m),
    ));
    lsum(lbuild(Term::lit(Lit::Int(2)), &j, use_))
}

/// `lsum (zipWith (map snd r) (replicate (length xs) l))`.
fn apply_all(xs: &Var, r: &Var, l: LTerm) -> LTerm {
    let pair = r.ty.as_array().unwrap().clone();
    lsum(lk(LTermKind::ZipWith(
        tk(TermKind::Map(proj_fn(false, pair), v(r))),
        lk(LTermKind::Replicate(len(xs), l)),
    )))
}

/// [`carrier`] of [`closures_reading`] `m`.
fn tape_of_closures(xs: &Var, m: &Var) -> (Var, Term) {
    carrier(xs, m, |m| closures_reading(xs, m, v(m)))
}

/// `let outer = def in (map fst outer, back)`.
fn tape_shape(outer: &Var, def: Term, back: Term) -> Term {
    let pair = outer.ty.as_array().unwrap().clone();
    Term::let_(
        outer,
        def,
        Term::pair(tk(TermKind::Map(proj_fn(true, pair), v(outer))), back),
    )
}

#[test]
fn closure_convert_reaches_closures_carried_in_an_outer_tape() {
    let xs = arr("xs");
    // The closures read `m`, bound in the outer element: it is stored in the outer tuple, once
    // per outer element, next to the array of environments (`y`).
    let m = real("m");
    let (outer, def) = tape_of_closures(&xs, &m);
    let back = dlam(|d| {
        each_carried(&outer, true, |r, c| {
            apply_all(&xs, r, LTerm::scale(v(c), lv(d)))
        })
    });
    converted_tape(
        &tape_shape(&outer, def, back),
        &xs,
        &[
            "(y * m, y)",
            "(rs, m), m)",
            "let ((r, m), c) = snd (outer ! j)",
        ],
    );
}

/// With the rule, no closure is applied any more and the result contains each of `parts`;
/// without it, the closures are applied by `zipWith`. Values agree (see [`fused`]).
fn converted_tape(t: &Term, xs: &Var, parts: &[&str]) {
    let (on, off) = fused(t, xs, "closureConvert", true);
    assert!(!on.contains("zipWith") && !on.contains('•'), "{on}");
    for part in parts {
        assert!(on.contains(part), "{part} in {on}");
    }
    assert!(off.contains("zipWith"), "{off}");
}

#[test]
fn closure_convert_reaches_closures_carried_two_levels_deep() {
    let xs = arr("xs");
    // outer's elements carry mid, whose elements carry the closures; the code reads m0 (bound
    // in outer's element) and m1 (in mid's): each is stored at its own level.
    let (m0, m1) = (real("m0"), real("m1"));
    let (outer, def) = carrier(&xs, &m0, |m0| {
        carrier(&xs, &m1, |m1| {
            closures_reading(&xs, m1, prim("mul", vec![v(m0), v(m1)]))
        })
    });
    let back = dlam(|d| {
        each_carried(&outer, true, |mid, c0| {
            each_carried(mid, true, |r, c1| {
                apply_all(&xs, r, LTerm::scale(v(c0), LTerm::scale(v(c1), lv(d))))
            })
        })
    });
    converted_tape(
        &tape_shape(&outer, def, back),
        &xs,
        &[
            "(rs, m1), m1)",
            "(outer, m0), m0)",
            "let ((r_1, m1), c_1) = snd (r ! j_1)",
        ],
    );
}

#[test]
fn closure_convert_leaves_carried_closures_used_otherwise() {
    let xs = arr("xs");
    let m = real("m");
    // At the use, a closure is taken out of `map snd r` and applied: not a form the rule
    // rewrites, so neither the carried array nor the outer one changes.
    let (outer, def) = tape_of_closures(&xs, &m);
    let back = dlam(|d| {
        each_carried(&outer, true, |r, c| {
            let pair = r.ty.as_array().unwrap().clone();
            let fs = tk(TermKind::Map(proj_fn(false, pair), v(r)));
            let one = LTerm::app(at(fs, Term::lit(Lit::Int(1))), LTerm::scale(v(c), lv(d)));
            LTerm::plus(apply_all(&xs, r, lv(d)), one)
        })
    });
    let (on, _) = fused(&tape_shape(&outer, def, back), &xs, "closureConvert", false);
    assert!(on.contains('•') && on.contains('⊸'), "{on}");
    // The use binds the component's pair to one variable instead of destructuring it: the
    // carried array is read as `fst p`, not a form the rule follows.
    let (outer, def) = tape_of_closures(&xs, &m);
    let (j, p) = (int("j"), {
        let elem = outer.ty.as_array().unwrap().as_prod().unwrap().1.clone();
        Var::fresh("p", elem)
    });
    let back = dlam(|d| {
        let r = Term::fst(v(&p));
        let pair = r_ty(&outer);
        let fs = tk(TermKind::Map(proj_fn(false, pair), r));
        let w = lk(LTermKind::Replicate(
            len(&xs),
            LTerm::scale(Term::snd(v(&p)), lv(d)),
        ));
        let body = lsum(lk(LTermKind::ZipWith(fs, w)));
        let use_ = LTerm::let_(&p, Term::snd(at(v(&outer), v(&j))), body);
        lsum(lbuild(Term::lit(Lit::Int(2)), &j, use_))
    });
    let (on, _) = fused(&tape_shape(&outer, def, back), &xs, "closureConvert", false);
    assert!(on.contains("zipWith"), "{on}");
}

/// The element type of the array that `outer`'s elements carry.
fn r_ty(outer: &Var) -> Ty {
    let inner = outer.ty.as_array().unwrap().as_prod().unwrap().1;
    inner.as_prod().unwrap().0.as_array().unwrap().clone()
}

#[test]
fn fusion_converts_the_closures_on_the_tape_of_a_map_over_rows() {
    // A logsumexp per row, GMM's shape: the closures of the inner `map` end up on the tape of
    // the outer one, and the backward pass applies them there.
    let text = "
        def lse (xs : Array Real) : Real =
          let m = sum (build (length xs) (\\(i : Int) -> if i == 0 then xs ! i else 0.0)) in
          log (sum (map (\\(x : Real) -> exp (x - m)) xs)) + m
        def f (c : Real) (xss : Array (Array Real)) : Real =
          sum (map (\\(row : Array Real) -> lse row * c) xss)";
    let (before, after) = reverse_without_and_with_closure_convert(text, 1);
    let printed = after.mor().body.to_string();
    assert!(!printed.contains("zipWith"), "{printed}");
    let kept = before.mor().body.to_string();
    assert!(kept.contains("zipWith"), "{kept}");
    let rows = Value::Array(
        [vec![0.5, -1.25, 2.0], vec![0.25, 1.0, -0.5]]
            .into_iter()
            .map(Value::reals)
            .collect::<Vec<_>>()
            .into(),
    );
    let args = vec![Value::Real(0.3), rows];
    let (g0, g1) = (before.grad(&args).unwrap(), after.grad(&args).unwrap());
    assert_eq!(format!("{g0:?}"), format!("{g1:?}"));
}

#[test]
fn snd_unused_drops_a_component_of_a_tape_that_no_use_reads() {
    let xs = arr("xs");
    let (m, m0) = (real("m"), real("m0"));
    // outer's elements carry an array of pairs that the use binds to `_`: the component
    // becomes `()`, and the array, now used only through `map fst`, keeps its first components.
    let pairs = |m: &Var| {
        let (i, y) = (int("i"), real("y"));
        let elem = Term::let_(
            &y,
            prim("sin", vec![at(v(&xs), v(&i))]),
            Term::pair(prim("mul", vec![v(&y), v(m)]), prim("cos", vec![v(&y)])),
        );
        let rs = Var::fresh("rs", Ty::array(Ty::prod(Ty::Real, Ty::Real)));
        (rs, tk(TermKind::Build(len(&xs), Term::lam(&i, elem))))
    };
    let (outer, def) = carrier(&xs, &m, pairs);
    let back = dlam(|d| each_carried(&outer, false, |_, c| LTerm::scale(v(c), lv(d))));
    let (on, off) = fused(&tape_shape(&outer, def, back), &xs, "sndUnused", true);
    assert!(on.contains("* m, (), m)") && !on.contains("cos"), "{on}");
    assert!(off.contains("* m, rs, m)") && off.contains("cos"), "{off}");
    // One level deeper: outer carries mid, whose elements carry the pairs, unread at mid's use.
    let (outer, def) = carrier(&xs, &m0, |_| carrier(&xs, &m, pairs));
    let back = dlam(|d| {
        each_carried(&outer, true, |mid, c0| {
            each_carried(mid, false, |_, c1| {
                LTerm::scale(v(c0), LTerm::scale(v(c1), lv(d)))
            })
        })
    });
    let (on, off) = fused(&tape_shape(&outer, def, back), &xs, "sndUnused", true);
    assert!(on.contains("* m, (), m)") && !on.contains("cos"), "{on}");
    assert!(off.contains("* m, rs, m)") && off.contains("cos"), "{off}");
}

/// `rs = build (length xs) (\i -> let j = e i in (sin (xs ! j), λ̲v. onehot (length xs) j (y *
/// v)))` with `y = xs ! i`, for an index expression `e`.
fn closures_at(xs: &Var, e: impl FnOnce(&Var) -> Term) -> (Var, Term) {
    let (i, j, y) = (int("i"), int("j"), real("y"));
    let clo = dlam(|d| onehot(len(xs), v(&j), LTerm::scale(v(&y), lv(d))));
    let elem = Term::let_(
        &y,
        at(v(xs), v(&i)),
        Term::let_(
            &j,
            e(&i),
            Term::pair(prim("sin", vec![at(v(xs), v(&j))]), clo),
        ),
    );
    let pair = Ty::prod(Ty::Real, Ty::lin_fun(LTy::Real, LTy::array(LTy::Real)));
    let rs = Var::fresh("rs", Ty::array(pair));
    (rs, tk(TermKind::Build(len(xs), Term::lam(&i, elem))))
}

#[test]
fn closure_convert_recomputes_integer_index_arithmetic() {
    let xs = arr("xs");
    let lit = |n| Term::lit(Lit::Int(n));
    // j = ((length xs - 1) * 2 - 2 * i) / 2 = length xs - 1 - i: five integer operations, more
    // than the budget for reals, but index arithmetic is recomputed rather than stored.
    let mirror = |i: &Var| {
        let top = prim("imul", vec![prim("isub", vec![len(&xs), lit(1)]), lit(2)]);
        let twice = prim("imul", vec![lit(2), v(i)]);
        prim("idiv", vec![prim("isub", vec![top, twice]), lit(2)])
    };
    let (rs, def) = closures_at(&xs, mirror);
    let (on, _) = fused(&index_sum_shape(&rs, def, &xs), &xs, "closureConvert", true);
    assert_eq!(
        on,
        "( build (length xs) (\\i -> sin (xs ! (((length xs - 1) * 2 - 2 * i) / 2))), \
         \\v ⊸ lsum (lbuild (length xs) (\\i -> \
         onehot (length xs) (((length xs - 1) * 2 - 2 * i) / 2) (xs ! i * v))) )"
    );
    // Thirteen operations are over the budget: `j` is stored.
    let long = |i: &Var| (0..13).fold(v(i), |acc, _| prim("iadd", vec![acc, lit(0)]));
    let (rs, def) = closures_at(&xs, long);
    let (on, _) = fused(&index_sum_shape(&rs, def, &xs), &xs, "closureConvert", true);
    assert!(on.contains("snd (rs ! i)"), "{on}");
}

#[test]
fn snd_unused_tries_every_component_a_carried_array_does_not_read() {
    let xs = arr("xs");
    let m = real("m");
    // mid's elements are `((a + b) * m, (a, b))` with `a = cos y`, `b = exp y`; inside outer's
    // element neither component is
    // read, but the use of outer reads `cos y`: the rule must pass over it and drop `exp y`.
    let pairs = |m: &Var| {
        let (i, y, a, b) = (int("i"), real("y"), real("a"), real("b"));
        let first = prim("mul", vec![prim("add", vec![v(&a), v(&b)]), v(m)]);
        let core = Term::pair(first, Term::pair(v(&a), v(&b)));
        let elem = Term::let_(
            &y,
            prim("sin", vec![at(v(&xs), v(&i))]),
            Term::let_(
                &a,
                prim("cos", vec![v(&y)]),
                Term::let_(&b, prim("exp", vec![v(&y)]), core),
            ),
        );
        let ty = Ty::prod(Ty::Real, Ty::prod(Ty::Real, Ty::Real));
        let rs = Var::fresh("rs", Ty::array(ty));
        (rs, tk(TermKind::Build(len(&xs), Term::lam(&i, elem))))
    };
    let (outer, def) = carrier(&xs, &m, pairs);
    let back = dlam(|d| {
        each_carried(&outer, true, |r, c| {
            let a = Term::fst(Term::snd(at(v(r), Term::lit(Lit::Int(1)))));
            LTerm::scale(prim("mul", vec![a, v(c)]), lv(d))
        })
    });
    let (on, off) = fused(&tape_shape(&outer, def, back), &xs, "sndUnused", true);
    assert!(on.contains("* m, a, ())"), "{on}");
    assert!(off.contains("* m, a, b)"), "{off}");
}

/// `map (\a -> λ̲v. sin a * (c * v)) xs`: an array of bare closures (no first components).
fn bare_closures(xs: &Var, c: Term) -> Term {
    let a = real("a");
    let clo = dlam(|d| LTerm::scale(prim("sin", vec![v(&a)]), LTerm::scale(c, lv(d))));
    tk(TermKind::Map(Term::lam(&a, clo), v(xs)))
}

#[test]
fn closure_convert_takes_arrays_of_bare_closures() {
    let xs = arr("xs");
    let fty = Ty::array(Ty::lin_fun(LTy::Real, LTy::Real));
    // let rs = map (\a -> λ̲v. ..) xs in (0.0, \v ⊸ lsum (zipWith rs (replicate n v)) + rs ! 1 • v)
    let rs = Var::fresh("rs", fty.clone());
    let back = dlam(|d| {
        let all = lsum(lk(LTermKind::ZipWith(
            v(&rs),
            lk(LTermKind::Replicate(len(&xs), lv(d))),
        )));
        let one = LTerm::app(at(v(&rs), Term::lit(Lit::Int(1))), lv(d));
        LTerm::plus(all, one)
    });
    let t = Term::let_(
        &rs,
        bare_closures(&xs, Term::lit(Lit::Real(2.0))),
        Term::pair(Term::lit(Lit::Real(0.0)), back),
    );
    let (on, off) = fused(&t, &xs, "closureConvert", true);
    assert!(!on.contains("zipWith") && !on.contains('•'), "{on}");
    assert!(
        on.contains("sin (xs ! i)") && on.contains("sin (xs ! 1)"),
        "{on}"
    );
    assert!(off.contains("zipWith") && off.contains('•'), "{off}");
    // Carried: written straight into the tuple of an outer array's elements (as the main pass
    // leaves a `let` used once), next to the element's m, which the code reads.
    let (k, m) = (int("k"), real("m"));
    let elem = Term::let_(
        &m,
        at(v(&xs), v(&k)),
        Term::pair(
            prim("mul", vec![v(&m), v(&m)]),
            Term::pair(bare_closures(&xs, v(&m)), v(&m)),
        ),
    );
    let ety = Ty::prod(Ty::Real, Ty::prod(fty, Ty::Real));
    let outer = Var::fresh("outer", Ty::array(ety));
    let def = tk(TermKind::Build(Term::lit(Lit::Int(2)), Term::lam(&k, elem)));
    let back = dlam(|d| {
        each_carried(&outer, true, |r, c| {
            lsum(lk(LTermKind::ZipWith(
                v(r),
                lk(LTermKind::Replicate(len(&xs), LTerm::scale(v(c), lv(d)))),
            )))
        })
    });
    let (on, off) = fused(&tape_shape(&outer, def, back), &xs, "closureConvert", true);
    // No closure per element (`\a -> \v ⊸`) is built any more.
    assert!(!on.contains("zipWith") && !on.contains("-> \\v ⊸"), "{on}");
    assert!(on.contains("sin (xs ! i)"), "{on}");
    // The environments are empty (`a` is `xs ! i`, `m` is stored once per outer element): the
    // array of units left is dropped from the tuple (`sndUnused`).
    assert!(on.contains("(m * m, ((), m), m)"), "{on}");
    assert!(off.contains("zipWith"), "{off}");
    // Used otherwise (taken out of the array and returned), the closures stay.
    let rs = Var::fresh("rs", Ty::array(Ty::lin_fun(LTy::Real, LTy::Real)));
    let t = Term::let_(
        &rs,
        bare_closures(&xs, Term::lit(Lit::Real(2.0))),
        at(v(&rs), Term::lit(Lit::Int(0))),
    );
    let ty = check(&t, std::slice::from_ref(&xs)).unwrap();
    let (s, stats) = simplify_with(&t, &Rules::all());
    assert_eq!(check(&s, std::slice::from_ref(&xs)).unwrap(), ty);
    assert!(!stats.fired.contains_key("closureConvert"), "{s}");
}

/// `map (\a -> body a) xs`.
fn map_of(xs: &Var, body: impl FnOnce(&Var) -> Term) -> Term {
    let a = real("a");
    let b = body(&a);
    tk(TermKind::Map(Term::lam(&a, b), v(xs)))
}

/// `1.0 - p a * p a` (the shape of `tanh'`).
fn one_minus_square(p: &str, a: &Var) -> Term {
    let pa = || prim(p, vec![v(a)]);
    prim(
        "sub",
        vec![Term::lit(Lit::Real(1.0)), prim("mul", vec![pa(), pa()])],
    )
}

#[test]
fn map_cse_reads_a_map_of_the_same_primitive_in_scope() {
    let xs = arr("xs");
    let r = arr("r");
    let s = arr("s");
    let tanhs = |xs: &Var| map_of(xs, |b| prim("tanh", vec![v(b)]));
    // let r = map tanh xs in let s = map (\a -> 1 - tanh a * tanh a) xs in (r, s)
    let t = Term::let_(
        &r,
        tanhs(&xs),
        Term::let_(
            &s,
            map_of(&xs, |a| one_minus_square("tanh", a)),
            Term::pair(v(&r), Term::pair(v(&s), v(&r))),
        ),
    );
    let (on, off) = fused(&t, &xs, "mapCse", true);
    assert_eq!(
        on,
        "let r = map (\\a -> tanh a) xs in (r, map2 (\\a -> \\t -> 1.0 - t * t) xs r, r)"
    );
    assert!(off.contains("tanh a * tanh a"), "{off}");
    // The same map again is `r` itself.
    let t = Term::let_(
        &r,
        tanhs(&xs),
        Term::pair(v(&r), Term::pair(tanhs(&xs), v(&r))),
    );
    let (on, _) = fused(&t, &xs, "mapCse", true);
    assert_eq!(on, "let r = map (\\a -> tanh a) xs in (r, r, r)");
    // Not over another array, not another primitive, not out of `r`'s scope.
    let ys = arr("ys");
    let a = || Ty::array(Ty::Real);
    let ty = Ty::prod(Ty::prod(a(), a()), a());
    let c = real("c");
    let twice = |r: &Var| Term::pair(v(r), v(r));
    for t in [
        Term::let_(
            &r,
            tanhs(&xs),
            Term::pair(twice(&r), map_of(&ys, |a| one_minus_square("tanh", a))),
        ),
        Term::let_(
            &r,
            tanhs(&xs),
            Term::pair(twice(&r), map_of(&xs, |a| one_minus_square("sin", a))),
        ),
        // (In a branch: the main pass does not float the `let` out of it.)
        Term::pair(
            tk(TermKind::If(
                prim("gt", vec![at(v(&xs), Term::lit(Lit::Int(0))), v(&c)]),
                Term::let_(&r, tanhs(&xs), twice(&r)),
                twice(&ys),
            )),
            map_of(&xs, |a| one_minus_square("tanh", a)),
        ),
    ] {
        let (s, stats) = simplify_with(&t, &Rules::all());
        let free = [xs.clone(), ys.clone(), c.clone()];
        assert_eq!(check(&s, &free).unwrap(), ty, "{s}");
        assert!(!stats.fired.contains_key("mapCse"), "{s}");
    }
    // Closures (a derivative): after closure conversion the code reads `r ! i`, not
    // `tanh (xs ! i)`: let r = map tanh xs in let rs = map (\a -> λ̲v. (1 - tanh a * tanh a) * v)
    // xs in (r, \v ⊸ lsum (zipWith rs (replicate n v))).
    let rs = Var::fresh("rs", Ty::array(Ty::lin_fun(LTy::Real, LTy::Real)));
    let clo = |a: &Var| dlam(|d| LTerm::scale(one_minus_square("tanh", a), lv(d)));
    let back = dlam(|d| {
        lsum(lk(LTermKind::ZipWith(
            v(&rs),
            lk(LTermKind::Replicate(len(&xs), lv(d))),
        )))
    });
    let t = Term::let_(
        &r,
        tanhs(&xs),
        Term::let_(&rs, map_of(&xs, clo), Term::pair(twice(&r), back)),
    );
    let (on, off) = fused(&t, &xs, "mapCse", true);
    assert!(on.contains("= r ! i") && !on.contains("tanh a *"), "{on}");
    assert!(!on.contains("zipWith"), "{on}");
    assert!(off.contains("tanh a * tanh a"), "{off}");
}

#[test]
fn map_cse_on_a_tape_leaves_no_array_of_units() {
    // The MLP's tanh layer: per outer element, `r = map tanh xs` and the bare closures of
    // `tanh'` (reading `r` after `mapCse`) in the tuple; the converted closures have empty
    // environments, and the `map2 (\a -> \t -> ()) xs r` left is dropped (`sndUnused`: `r` is a
    // map over `xs`, so the `map2` cannot fail).
    let xs = arr("xs");
    let (k, m) = (int("k"), real("m"));
    let r = arr("r");
    let fty = Ty::array(Ty::lin_fun(LTy::Real, LTy::Real));
    let clo = |a: &Var| dlam(|d| LTerm::scale(one_minus_square("tanh", a), lv(d)));
    let elem = Term::let_(
        &m,
        at(v(&xs), v(&k)),
        Term::let_(
            &r,
            map_of(&xs, |b| prim("tanh", vec![v(b)])),
            Term::pair(
                prim(
                    "mul",
                    vec![prim("sum", vec![v(&r)]), prim("sum", vec![v(&r)])],
                ),
                Term::pair(map_of(&xs, clo), v(&m)),
            ),
        ),
    );
    let ety = Ty::prod(Ty::Real, Ty::prod(fty, Ty::Real));
    let outer = Var::fresh("outer", Ty::array(ety));
    let def = tk(TermKind::Build(Term::lit(Lit::Int(2)), Term::lam(&k, elem)));
    let back = dlam(|d| {
        each_carried(&outer, true, |rr, c| {
            lsum(lk(LTermKind::ZipWith(
                v(rr),
                lk(LTermKind::Replicate(len(&xs), LTerm::scale(v(c), lv(d)))),
            )))
        })
    });
    let (on, off) = fused(&tape_shape(&outer, def, back), &xs, "mapCse", true);
    assert!(!on.contains("tanh a *") && !on.contains("zipWith"), "{on}");
    assert!(on.contains("((), r)") && !on.contains("\\t -> ()"), "{on}");
    assert!(off.contains("tanh a * tanh a"), "{off}");
}

/// `\v ⊸ let lin cs = lbuild (length xs) (\i -> let y = g (xs ! i) in ((0, y * v), (-y) * v))
/// in uses cs` (paired with `0.0`), for `uses` of `cs` and the element's type.
fn shared_triples(
    xs: &Var,
    g: impl FnOnce(Term) -> Term,
    uses: impl FnOnce(&Var, &LTy) -> LTerm,
) -> Term {
    let (i, y) = (int("i"), real("y"));
    let ety = LTy::prod(LTy::prod(LTy::Real, LTy::Real), LTy::Real);
    let cs = Var::linear("cs", LTy::array(ety.clone()));
    Term::pair(
        Term::lit(Lit::Real(0.0)),
        dlam(|d| {
            let core = LTerm::pair(
                LTerm::pair(zero(), LTerm::scale(v(&y), lv(d))),
                LTerm::scale(prim("neg", vec![v(&y)]), lv(d)),
            );
            let body = lk(LTermKind::Let(
                Pat::Var(y.clone()),
                g(at(v(xs), v(&i))),
                core,
            ));
            lk(LTermKind::LinLet(
                cs.clone(),
                lbuild(len(xs), &i, body),
                uses(&cs, &ety),
            ))
        }),
    )
}

/// `lmap (λ̲p. snd (fst p)) cs`.
fn middle_column(cs: &Var, ety: &LTy) -> LTerm {
    let p = Var::linear("p", ety.clone());
    lk(LTermKind::Map(
        Term::lin_lam(&p, LTerm::snd(LTerm::fst(lv(&p)))),
        lv(cs),
    ))
}

#[test]
fn build_proj_splits_a_shared_array_of_tuples_into_the_used_components() {
    let xs = arr("xs");
    // ((fst (fst (lsum cs)), lmap (λ̲p. snd (fst p)) cs), (snd (lsum cs), snd (fst (lsum cs)))):
    // the first is zero, the others are an array and sums of their own (`y = xs ! i` is cheap
    // to copy).
    let uses = |cs: &Var, ety: &LTy| {
        LTerm::pair(
            LTerm::pair(LTerm::fst(LTerm::fst(lsum(lv(cs)))), middle_column(cs, ety)),
            LTerm::pair(
                LTerm::snd(lsum(lv(cs))),
                LTerm::snd(LTerm::fst(lsum(lv(cs)))),
            ),
        )
    };
    let t = shared_triples(&xs, |e| e, uses);
    let (on, off) = fused(&t, &xs, "buildProj", true);
    assert!(!on.contains("cs") && !on.contains("lmap"), "{on}");
    assert!(
        on.contains("(0, lbuild (length xs) (\\i -> xs ! i * v))")
            && on.contains("lsum (lbuild (length xs) (\\i -> -xs ! i * v))"),
        "{on}"
    );
    assert!(off.contains("lmap") && off.contains("lsum cs"), "{off}");
    // With one use left that is not zero, a binding that is not cheap moves too (it is not
    // copied).
    // (`lmap (λ̲p. fst (fst p)) cs` is the zero array.)
    let one = |cs: &Var, ety: &LTy| {
        let p = Var::linear("p", ety.clone());
        let zeros = lk(LTermKind::Map(
            Term::lin_lam(&p, LTerm::fst(LTerm::fst(lv(&p)))),
            lv(cs),
        ));
        LTerm::pair(
            LTerm::pair(LTerm::fst(LTerm::fst(lsum(lv(cs)))), zeros),
            middle_column(cs, ety),
        )
    };
    let t = shared_triples(&xs, |e| prim("sin", vec![e]), one);
    let ty = check(&t, std::slice::from_ref(&xs)).unwrap();
    let (on, stats) = simplify_with(&t, &Rules::all());
    assert!(stats.fired.contains_key("buildProj"), "{on}");
    assert_eq!(check(&on, std::slice::from_ref(&xs)).unwrap(), ty, "{on}");
    let mut env = Env::new();
    env.insert(xs.id, Value::reals(vec![0.5, -1.25, 2.0]));
    // The zero array is a structural zero after the rule, an array of zeros before.
    let seen =
        |t: &Term| observe(&eval(t, &env).unwrap()).replace("((0.0, [0.0, 0.0, 0.0])", "(0.0");
    assert_eq!(seen(&on), seen(&t), "{on}");
    assert!(!on.to_string().contains("lmap"), "{on}");
    // Not with two such uses (the sine would be computed twice), nor with a use in a loop (the
    // array would be built per iteration), nor with another kind of use.
    let in_loop = |cs: &Var, ety: &LTy| {
        let j = int("j");
        LTerm::pair(
            middle_column(cs, ety),
            lsum(lbuild(Term::lit(Lit::Int(2)), &j, LTerm::snd(lsum(lv(cs))))),
        )
    };
    let indexed = |cs: &Var, ety: &LTy| {
        LTerm::pair(
            middle_column(cs, ety),
            LTerm::snd(lk(LTermKind::Index(lv(cs), Term::lit(Lit::Int(1))))),
        )
    };
    for t in [
        shared_triples(&xs, |e| prim("sin", vec![e]), uses),
        shared_triples(&xs, |e| e, in_loop),
        shared_triples(&xs, |e| e, indexed),
    ] {
        fused(&t, &xs, "buildProj", false);
    }
}

#[test]
fn closure_convert_reads_captured_first_components_back() {
    let xs = arr("xs");
    let pair = Ty::prod(Ty::Real, Ty::lin_fun(LTy::Real, LTy::Real));
    // rs = map (\a -> let t = sin a in let y = exp t in (y, λ̲v. (y * t) * v)) xs: the closure
    // captures `y`, the first component, and `t`, which is not; `y` is read back from the
    // first component and only `t` is stored (a real of the same type as `y`, so that reading
    // the wrong leaf would type-check but give other values).
    let element = |both: bool| {
        let (a, t, y) = (real("a"), real("t"), real("y"));
        let code = if both {
            prim("mul", vec![v(&y), v(&t)])
        } else {
            v(&y)
        };
        let clo = dlam(|d| LTerm::scale(code, lv(d)));
        let body = Term::let_(
            &t,
            prim("sin", vec![v(&a)]),
            Term::let_(&y, prim("exp", vec![v(&t)]), Term::pair(v(&y), clo)),
        );
        tk(TermKind::Map(Term::lam(&a, body), v(&xs)))
    };
    let back = |rs: &Var| dlam(|d| apply_all(&xs, rs, lv(d)));
    let rs = Var::fresh("rs", Ty::array(pair.clone()));
    let shape = tape_shape(&rs, element(true), back(&rs));
    let (on, _) = fused(&shape, &xs, "closureConvert", true);
    assert!(
        on.contains("(exp t, t)") && on.contains("fst (rs ! i) * snd (rs ! i)"),
        "t is not stored alone, or y not read back: {on}"
    );
    // Only `y` captured: no environment is left, and the array holds the first components
    // alone (`map fst rs` is the array itself, the use reads `rs ! i`).
    let rs = Var::fresh("rs", Ty::array(pair));
    let shape = tape_shape(&rs, element(false), back(&rs));
    let (on, _) = fused(&shape, &xs, "closureConvert", true);
    assert!(
        !on.contains("fst") && !on.contains("()") && on.contains("rs ! i"),
        "the first components are not stored alone: {on}"
    );
}
