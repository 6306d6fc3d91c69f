//! Source optimisation before AD ([`chad::internals::optimize`]) and its parts: the unembedding of target
//! terms ([`chad::internals::target::unembed`]) and the `functionInline` rule
//! ([`chad::internals::simplify::inline`]).
//!
//! * unembedding inverts embedding on random programs, and the simplifier's output on a source
//!   program always unembeds (so `optimize` never falls back on them);
//! * the optimised program means what the original means;
//! * the derivative of the optimised program agrees with the derivative of the program as
//!   written, and with independent oracles (the dual-number evaluator for forward mode; for
//!   reverse mode the dot-product test against it), on random higher-order programs, half of
//!   them rewritten to call a helper function several times (so that the inlining fires);
//! * `functionInline` inlines called functions, leaves functions used as values, and respects
//!   its size budget;
//! * the benchmark's higher-order programs (nested closures, diag/trace) become first-order.

mod common;

use chad::Value;
use chad::internals::ad::{Jvp, Vjp};
use chad::internals::optimize::{Options, optimize, try_optimize, try_optimize_with};
use chad::internals::oracle::{all_approx_eq, dual, fd};
use chad::internals::prim::Registry;
use chad::internals::random::{self, Config, TestProgram};
use chad::internals::simplify::inline::{Budget, inline_functions};
use chad::internals::simplify::simplify;
use chad::internals::source::term::{Entry, TermKind, alpha_eq};
use chad::internals::target::{embed, unembed};
use common::{cases, runner};
use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::TestRunner;

fn entry_of(src: &str) -> Entry {
    let p = chad::internals::source::load(src, &Registry::builtin()).expect("the program checks");
    p.entry(p.defs.len() - 1)
}

fn finite(v: &Value) -> bool {
    fd::leaves(v).iter().all(|x| x.is_finite())
}

fn real(r: &mut TestRunner) -> f64 {
    (-2.0f64..2.0).new_tree(r).unwrap().current()
}

fn close(a: &Value, b: &Value, rel: f64) -> bool {
    a.same(b) == Some(true) || all_approx_eq(&fd::leaves(a), &fd::leaves(b), rel, rel)
}

/// Higher-order insides, first-order inputs and results: the programs AD takes.
fn ad_configs() -> Vec<(&'static str, Config)> {
    let base = Config {
        sums: false,
        conditionals: false,
        higher_order_result: false,
        ..Config::default()
    };
    vec![
        ("functions", base.clone()),
        (
            "arrays",
            Config {
                sums: true,
                conditionals: true,
                array_bias: true,
                ..base.clone()
            },
        ),
        (
            "sums",
            Config {
                sums: true,
                conditionals: true,
                sum_bias: true,
                ..base.clone()
            },
        ),
        (
            "loops",
            Config {
                sums: true,
                conditionals: true,
                loops: true,
                ..base
            },
        ),
    ]
}

fn programs(cfg: Config, n: u32, r: &mut TestRunner) -> Vec<TestProgram> {
    let s = random::program(cfg);
    (0..n).map(|_| s.new_tree(r).unwrap().current()).collect()
}

/// Whether `functionInline` changed the optimisation of `e` (compared with simplification
/// alone).
fn inlining_fired(e: &Entry) -> bool {
    let without = Options {
        inline: false,
        ..Options::default()
    };
    let plain = try_optimize_with(e, &without).expect("unembeds");
    let inlined = try_optimize(e).expect("unembeds");
    !alpha_eq(&plain.body, &inlined.body)
}

#[test]
fn unembedding_inverts_embedding_on_random_programs() {
    let mut r = runner(cases(300));
    for cfg in [
        Config::default(),
        Config {
            higher_order_result: true,
            ..Config::default()
        },
        Config {
            loops: true,
            higher_order_result: true,
            ..Config::default()
        },
    ] {
        for p in programs(cfg, cases(300), &mut r) {
            let (params, body) = embed::entry(&p.entry);
            let back = unembed::entry(&p.entry.name, &params, &body)
                .unwrap_or_else(|e| panic!("{e}\nprogram:\n{p:?}"));
            assert!(alpha_eq(&back.body, &p.entry.body), "program:\n{p:?}");
            // The same variables, not just alpha-equivalent ones.
            assert_eq!(back.body.to_string(), p.entry.body.to_string());
            for (a, b) in back.params.iter().zip(&p.entry.params) {
                assert!(a.id == b.id && a.ty == b.ty);
            }
            // And embedding the unembedding gives the same target term.
            assert_eq!(embed::term(&back.body).to_string(), body.to_string());
        }
    }
}

#[test]
fn unembedding_rejects_target_only_forms_without_panicking() {
    use chad::internals::target::term::{LTerm, Term, Var};
    use chad::internals::target::types::{LTy, Ty};
    let v = Var::linear("v", LTy::Real);
    let lin = Term::lin_lam(&v, LTerm::var(&v));
    let x = Var::fresh("x", Ty::Real);
    for t in [
        lin.clone(),
        Term::lam(&x, Term::pair(Term::var(&x), lin.clone())),
        Term::lin_app(lin.clone(), Term::var(&Var::fresh("w", Ty::lin(LTy::Real)))),
        Term::var(&Var::fresh("f", Ty::lin_fun(LTy::Real, LTy::Real))),
        // Ill-typed: a real applied as a function.
        Term::app(Term::real(1.0), Term::real(2.0)),
    ] {
        assert!(unembed::term(&t).is_err(), "{t}");
    }
}

/// The simplifier never leaves the Cartesian fragment on a source program, so optimisation
/// never falls back; the result has the original type and means the same.
#[test]
fn optimised_random_programs_unembed_and_mean_the_same() {
    let mut r = runner(cases(400));
    let mut compared = 0;
    for cfg in [
        Config::default(),
        Config {
            higher_order_result: true,
            ..Config::default()
        },
        ad_configs()[1].1.clone(),
        ad_configs()[3].1.clone(),
    ] {
        for (k, p) in programs(cfg, cases(400), &mut r).into_iter().enumerate() {
            let p = if k % 2 == 0 { p } else { with_helper(&p) };
            let opt = try_optimize(&p.entry).unwrap_or_else(|e| panic!("{e}\nprogram:\n{p:?}"));
            assert_eq!(opt.body.ty, p.entry.body.ty);
            assert_eq!(opt.param_types(), p.entry.param_types());
            if !p.entry.body.ty.is_first_order() {
                continue;
            }
            // Where the original fails, the optimised program may not (dead code is dropped).
            let Ok(want) = chad::internals::eval::eval_entry(&p.entry, &p.inputs) else {
                continue;
            };
            let got = chad::internals::eval::eval_entry(&opt, &p.inputs).unwrap_or_else(|e| {
                panic!("{}\nprogram:\n{p:?}\noptimised:\n{}", e.message(), opt.body)
            });
            assert!(
                close(&want, &got, 1e-9),
                "{want} versus {got}\nprogram:\n{p:?}\noptimised:\n{}",
                opt.body
            );
            compared += 1;
        }
    }
    assert!(compared > cases(400), "only {compared} programs compared");
}

/// `p` with its body made a helper function of its first parameter, called several times:
/// `let h = \(z : T1) -> body[z/x1] in (h x1, h x1)`, with `map h xs` as a third component if
/// some parameter `xs` is an `Array T1`. Random programs seldom call one let-bound function
/// twice; these always do (and their derivatives are related to the original's).
fn with_helper(p: &TestProgram) -> TestProgram {
    use chad::Span;
    use chad::internals::source::term::{Pat, Term, Var, freshen};
    let x1 = &p.entry.params[0];
    let body = &p.entry.body;
    let node = |k| Term::new(k, Span::default());
    // Binding the parameter's identity again under the λ, then freshening every binder, gives
    // `\z -> body[z/x1]` with unique binders.
    let lam = freshen(&node(TermKind::Lam(x1.clone(), body.clone())));
    let h = Var::fresh("h", lam.ty.clone());
    let call = |a: &Var| node(TermKind::App(Term::var(&h), Term::var(a)));
    let mut result = node(TermKind::Pair(call(x1), call(x1)));
    if let Some(xs) = p
        .entry
        .params
        .iter()
        .find(|v| v.ty.as_array() == Some(&x1.ty))
    {
        let m = node(TermKind::Map(Term::var(&h), Term::var(xs)));
        result = node(TermKind::Pair(m, result));
    }
    TestProgram {
        entry: Entry {
            name: p.entry.name.clone(),
            params: p.entry.params.clone(),
            body: node(TermKind::Let(Pat::Var(h), lam, result)),
        },
        inputs: p.inputs.clone(),
    }
}

/// The derivative of the optimised program against the derivative of the program as written
/// (forward and reverse) and against the dual-number oracle (forward directly; reverse by the
/// dot-product test `<R'(v), dx> = <v, D(dx)>` with the oracle's `D`).
#[test]
fn optimised_derivatives_agree_with_raw_derivatives_and_the_dual_number_oracle() {
    let n = cases(400);
    for (name, cfg) in ad_configs() {
        let mut r = runner(n);
        let mut rng = runner(n);
        let strategy = random::program(cfg);
        let (mut checked, mut inlined) = (0, 0);
        for k in 0..n {
            let p = common::supported_program(&strategy, &mut r);
            let p = if k % 2 == 0 { p } else { with_helper(&p) };
            let Ok(y) = chad::internals::eval::eval_entry(&p.entry, &p.inputs) else {
                continue;
            };
            if !finite(&y) {
                continue;
            }
            let opt = optimize(&p.entry);
            let ctx = || format!("program:\n{p:?}\noptimised:\n{}", opt.body);
            let tys = p.entry.param_types();
            let dx: Vec<Value> = tys
                .iter()
                .zip(&p.inputs)
                .map(|(t, x)| fd::tangent_with(t, x, &mut || real(&mut rng)))
                .collect();
            let jvp = |e: &Entry| {
                Jvp::new(e)
                    .and_then(|j| j.map_body(simplify).jvp(&p.inputs, &dx))
                    .unwrap_or_else(|e| panic!("forward: {}\n{}", e.message(), ctx()))
            };
            let (y_raw, t_raw) = jvp(&p.entry);
            let (y_opt, t_opt) = jvp(&opt);
            let (_, t_dual) = dual::jvp(&p.entry, &p.inputs, &dx)
                .unwrap_or_else(|e| panic!("dual: {}\n{}", e.message(), ctx()));
            assert!(
                close(&y_raw, &y_opt, 1e-9),
                "values {y_raw} {y_opt}\n{}",
                ctx()
            );
            if !(finite(&t_raw) && finite(&t_opt) && finite(&t_dual)) {
                continue;
            }
            assert!(
                close(&t_raw, &t_opt, 1e-8),
                "tangents {t_raw} {t_opt}\n{}",
                ctx()
            );
            assert!(
                close(&t_dual, &t_opt, 1e-8),
                "tangents {t_dual} {t_opt}\n{}",
                ctx()
            );

            let v = fd::tangent_with(&p.entry.body.ty, &y, &mut || real(&mut rng));
            let vjp = |e: &Entry| {
                Vjp::new(e)
                    .and_then(|j| j.map_body(simplify).vjp(&p.inputs, &v))
                    .unwrap_or_else(|e| panic!("reverse: {}\n{}", e.message(), ctx()))
                    .1
            };
            let (g_raw, g_opt) = (vjp(&p.entry), vjp(&opt));
            // At a singular point (`sqrt 0`, say) reverse mode meets 0 · ∞ where forward mode
            // may not: the derivative does not exist there, as with non-finite tangents above.
            if !(g_raw.iter().all(finite) && g_opt.iter().all(finite)) {
                continue;
            }
            for (a, b) in g_raw.iter().zip(&g_opt) {
                assert!(close(a, b, 1e-8), "cotangents {a} {b}\n{}", ctx());
            }
            let dot = |a: &Value, b: &Value| -> f64 {
                let (a, b) = (fd::leaves(a), fd::leaves(b));
                a.iter().zip(&b).map(|(x, y)| x * y).sum()
            };
            let lhs: f64 = g_opt.iter().zip(&dx).map(|(g, d)| dot(g, d)).sum();
            let rhs = dot(&v, &t_dual);
            assert!(
                chad::internals::oracle::approx_eq(lhs, rhs, 1e-8, 1e-8),
                "dot-product test: <R'(v), dx> = {lhs}, <v, D(dx)> = {rhs}\n{}",
                ctx()
            );
            checked += 1;
            if inlining_fired(&p.entry) {
                inlined += 1;
            }
        }
        eprintln!("{name}: {checked} programs checked, inlining changed {inlined}");
        assert!(
            checked >= n / 2,
            "{name}: only {checked} of {n} programs checked"
        );
        assert!(
            inlined * 4 >= checked,
            "{name}: inlining changed only {inlined} of {checked} programs"
        );
    }
}

/// Counts the nodes of `e`'s body satisfying `pred`.
fn count(e: &Entry, pred: &dyn Fn(&TermKind) -> bool) -> usize {
    let mut n = 0;
    let mut stack = vec![&e.body];
    while let Some(t) = stack.pop() {
        if pred(&t.kind) {
            n += 1;
        }
        stack.extend(t.children());
    }
    n
}

/// No application, and no function-typed binding: nothing left for AD to build closures from.
fn first_order(e: &Entry) -> bool {
    count(e, &|k| match k {
        TermKind::App(..) => true,
        TermKind::Let(p, ..) => !p.ty().is_first_order(),
        _ => false,
    }) == 0
}

#[test]
fn nested_closures_and_diag_trace_become_first_order() {
    let mut progs: Vec<String> = (1..=6)
        .map(chad::internals::bench::programs::nested_closures)
        .collect();
    progs.push(include_str!("../benches/programs/diag_trace.chad").to_string());
    for src in &progs {
        let e = entry_of(src);
        assert!(!first_order(&e));
        let opt = optimize(&e);
        assert!(first_order(&opt), "{src}\noptimised:\n{}", opt.body);
        // Reverse mode of the optimised program stores no closures: no copower of a closure
        // argument, no linear function per call.
        let rev = Vjp::new(&opt).unwrap().map_body(simplify);
        let code = rev.mor().to_term().to_string();
        assert!(!code.contains("copowfold"), "{code}");
        let raw = Vjp::new(&e).unwrap().map_body(simplify);
        // ... while the program as written does use closures in its derivative.
        assert!(raw.mor().to_term().size() > rev.mor().to_term().size());
    }
}

/// The embedded body of the last definition, simplified or not.
fn body_of(src: &str) -> chad::internals::target::term::Term {
    embed::entry(&entry_of(src)).1
}

/// Local functions called in every call position (`map`, `map2`, `build`, direct calls).
const CALLS: &str = "def f (a : Real) (xs : Array Real) : Real =
   let g = \\(x : Real) -> sin (a * x) in
   let h = \\(x : Real) (y : Real) -> x * y in
   let k = \\(i : Int) -> toReal i in
   g a + sum (map g xs) + sum (map2 h xs xs) + h a a + sum (build 3 k) + k 2";

#[test]
fn function_inline_inlines_calls_in_every_call_position() {
    let t = body_of(CALLS);
    let (out, n) = inline_functions(&t, &Budget::default());
    assert_eq!(n, 3);
    let s = simplify(&out).to_string();
    for name in ["g", "h", "k"] {
        assert!(!s.contains(&format!("{name} ")), "{s}");
    }
    // The meaning is unchanged.
    let e = entry_of(CALLS);
    let args = [Value::Real(0.5), Value::reals(vec![1.0, -2.0])];
    let want = chad::internals::eval::eval_entry(&e, &args).unwrap();
    let got = chad::internals::eval::eval_entry(&optimize(&e), &args).unwrap();
    assert!(close(&want, &got, 1e-12), "{want} {got}");
}

#[test]
fn function_inline_leaves_functions_used_as_values() {
    // `f` is passed to `g`: not a call, so `f` stays (g, called once, is inlined).
    let src = "def m (a : Real) : Real =
                 let f = \\(x : Real) -> x * a in
                 let g = \\(k : Real -> Real) -> k 1.0 + k 2.0 in
                 g f + f 3.0 + f 4.0";
    let t = body_of(src);
    let (out, n) = inline_functions(&t, &Budget::default());
    assert_eq!(n, 1);
    assert!(out.to_string().contains("let f ="), "{out}");
    // Once `g` is β-reduced, every use of `f` is a call: the next round inlines it, so
    // `optimize` ends first-order.
    let opt = optimize(&entry_of(src));
    assert!(first_order(&opt), "{}", opt.body);
    let args = [Value::Real(1.5)];
    let want = chad::internals::eval::eval_entry(&entry_of(src), &args).unwrap();
    assert!(close(
        &want,
        &chad::internals::eval::eval_entry(&opt, &args).unwrap(),
        1e-12
    ));
}

/// A λ of about `terms` × 6 nodes used `uses` times.
fn big_lambda_program(terms: usize, uses: usize) -> String {
    let body: Vec<String> = (0..terms).map(|k| format!("sin (x * {k}.5)")).collect();
    let calls: Vec<String> = (0..uses).map(|k| format!("f (a + {k}.0)")).collect();
    format!(
        "def m (a : Real) : Real =\n  let f = \\(x : Real) -> {} in\n  {}",
        body.join(" + "),
        calls.join(" + ")
    )
}

#[test]
fn function_inline_respects_its_budget() {
    let budget = Budget::default();
    // Small, used many times: inlined.
    let (_, n) = inline_functions(&body_of(&big_lambda_program(2, 20)), &budget);
    assert_eq!(n, 1);
    // Huge, used many times: not inlined (too big), and optimisation keeps the closure.
    let huge = big_lambda_program(100, 20);
    let t = body_of(&huge);
    assert!(t.size() > budget.max_size);
    let (out, n) = inline_functions(&t, &budget);
    assert_eq!(n, 0);
    assert!(out.to_string().contains("let f ="));
    assert!(!first_order(&optimize(&entry_of(&huge))));
    // Within the size limit but too many copies: `(uses - 1) × size` exceeds the growth limit.
    let mid = body_of(&big_lambda_program(20, 40));
    let (_, n) = inline_functions(&mid, &budget);
    assert_eq!(n, 0);
    // ... which a larger budget allows.
    let generous = Budget {
        max_size: 10_000,
        max_growth: 100_000,
        max_total_growth: 100_000,
    };
    let (_, n) = inline_functions(&mid, &generous);
    assert_eq!(n, 1);
    // The total limit bounds a run: two such functions, room for one.
    let two = body_of(
        "def m (a : Real) : Real =
           let f = \\(x : Real) -> sin x + cos x in
           let g = \\(x : Real) -> exp x + log x in
           f a + f 1.0 + g a + g 2.0",
    );
    let chad::internals::target::term::TermKind::Let(_, f, _) = &two.kind else {
        panic!("{two}")
    };
    let one = Budget {
        max_total_growth: f.size(), // one copy of `f`, not also one of `g` (of the same size)
        ..budget
    };
    let (_, n) = inline_functions(&two, &one);
    assert_eq!(n, 1);
    let (_, n) = inline_functions(&two, &budget);
    assert_eq!(n, 2);
}

#[test]
fn optimised_entries_keep_their_parameters_and_type() {
    for src in [
        include_str!("../examples/gmm.chad"),
        include_str!("../examples/mlp.chad"),
        include_str!("../examples/fig2a.chad"),
        include_str!("../examples/fig2b.chad"),
    ] {
        let p = chad::internals::source::load(src, &Registry::builtin()).unwrap();
        for i in 0..p.defs.len() {
            let e = p.entry(i);
            let opt = try_optimize(&e).unwrap_or_else(|err| panic!("{}: {err}", e.name));
            assert_eq!(opt.body.ty, e.body.ty);
            assert_eq!(opt.name, e.name);
            assert!(opt.params.iter().zip(&e.params).all(|(a, b)| a.id == b.id));
        }
    }
}
