//! Derivatives inside programs, checked against a second route that shares nothing with CHAD
//! (issue 24; `theory-notes/12-nested-ad.md`, "A second route"): random programs with `grad`,
//! `jvp` and `vjp` inside (captures, depth 2, forms inside `map` closures, Siskind &
//! Pearlmutter's perturbation-confusion pattern) are built once as a skeleton and elaborated
//! twice: by CHAD ([`nested::Elaborator`]) and by the recording oracle
//! ([`tagged_eval::Recorder`]), whose forms the tagged evaluator runs with nested dual numbers
//! and a fresh tag per derivative instance. The value of `main` and its gradient (reverse CHAD
//! over the elaborated program; one more tagged `grad` around the tagged evaluation) agree.

mod common;

use chad::Value;
use chad::internals::ad::Vjp;
use chad::internals::ad::nested;
use chad::internals::oracle::{fd, tagged_eval};
use chad::internals::prim::Registry;
use chad::internals::random::{self, Config};
use chad::internals::simplify::simplify;
use chad::internals::source::check::{Differentiate, Form};
use chad::internals::source::term::{Entry, Lit, Pat, Term, TermKind as K, Var};
use chad::internals::types::Type;
use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::TestRunner;

fn sample<T>(s: impl Strategy<Value = T>, r: &mut TestRunner) -> T {
    s.new_tree(r).unwrap().current()
}

fn mk(k: K) -> Term {
    Term::new(k, Default::default())
}

fn var(v: &Var) -> Term {
    Term::var(v)
}

fn real(x: f64) -> Term {
    Term::lit(Lit::Real(x))
}

fn prim(name: &str, args: Vec<Term>) -> Term {
    let op = Registry::builtin().get(name).unwrap().clone();
    mk(K::Prim(op, args))
}

/// A `Real` that depends on every component of a value of a self-tangent type.
fn reduce(t: Term) -> Term {
    match t.ty.clone() {
        Type::Real => t,
        Type::Prod(_) => prim(
            "add",
            vec![reduce(mk(K::Fst(t.clone()))), reduce(mk(K::Snd(t)))],
        ),
        Type::Array(e) if matches!(**e, Type::Real) => prim("sum", vec![t]),
        Type::Array(e) => {
            let a = Var::fresh("a", (*e).clone());
            let f = mk(K::Lam(a.clone(), reduce(var(&a))));
            prim("sum", vec![mk(K::Map(f, t))])
        }
        other => panic!("reduce at {other}"),
    }
}

/// A nonlinear map of a self-tangent value to one of the same shape: `0.75 a + sin a` leafwise.
fn smap(t: Term) -> Term {
    match t.ty.clone() {
        Type::Real => prim(
            "add",
            vec![
                prim("mul", vec![real(0.75), t.clone()]),
                prim("sin", vec![t]),
            ],
        ),
        Type::Prod(_) => mk(K::Pair(smap(mk(K::Fst(t.clone()))), smap(mk(K::Snd(t))))),
        Type::Array(e) => {
            let a = Var::fresh("a", (*e).clone());
            mk(K::Map(mk(K::Lam(a.clone(), smap(var(&a)))), t))
        }
        other => panic!("smap at {other}"),
    }
}

/// One form: which, the type of its function's result, the function's body (over the
/// captures and its argument), and the third argument's term.
#[derive(Clone)]
struct Level {
    form: Form,
    body: Term,
    extra: Option<Term>,
}

impl Level {
    fn result(&self, a: &Type) -> Type {
        let b = self.body.ty.clone();
        match self.form {
            Form::Grad => a.clone(),
            Form::Jvp => Type::prod(b.clone(), b),
            Form::Vjp => Type::prod(b, a.clone()),
        }
    }

    /// The form elaborated by `d`, the function's parameters `caps` then `y`, at `arg`.
    fn elaborate(
        &self,
        d: &dyn Differentiate,
        caps: &[Var],
        y: &Var,
        arg: Term,
    ) -> chad::Result<Term> {
        let mut params = caps.to_vec();
        params.push(y.clone());
        let entry = Entry {
            name: "f".into(),
            params,
            body: self.body.clone(),
        };
        let mut args: Vec<Term> = caps.iter().map(var).collect();
        args.push(arg);
        d.elaborate(self.form, &entry, &args, self.extra.clone())
    }
}

/// A random program skeleton with forms inside (see [`Case::build`]).
struct Case {
    shape: usize,
    caps: Vec<Var>,
    x: Var,
    inputs: Vec<Value>,
    y: Var,
    z: Var,
    t: Var,
    outer: Level,
    inner: Option<Level>,
    /// The body over the inner form's result, for depth 2.
    mid: Option<(Var, Term)>,
    g: Var,
    rest: Term,
    smap_arg: bool,
}

const SHAPES: [&str; 4] = [
    "depth 1",
    "depth 2",
    "Siskind-Pearlmutter",
    "form inside map",
];

fn form_of(k: usize) -> Form {
    [Form::Grad, Form::Jvp, Form::Vjp][k]
}

fn cfg(loops: bool) -> Config {
    Config {
        depth: 3,
        max_params: 2,
        loops,
        ..Config::default()
    }
}

/// A random level: the form, its body of a random result type over `ctx` (whose last
/// variable is the function's argument `arg`), and the third argument over `outer_ctx`.
fn level(
    loops: bool,
    r: &mut TestRunner,
    ctx: &[Var],
    outer_ctx: &[Var],
    arg: &Term,
    body_real: Option<Term>,
) -> Level {
    let form = form_of(sample(0..3usize, r));
    let b = if form == Form::Grad || sample(0..2usize, r) == 0 {
        Type::Real
    } else {
        Type::prod(Type::Real, Type::Real)
    };
    let body = match body_real {
        Some(t) => t,
        None => sample(random::term(cfg(loops), ctx.to_vec(), b.clone()), r),
    };
    let b = body.ty.clone();
    let extra = match form {
        Form::Grad => None,
        Form::Jvp => Some(smap(arg.clone())),
        Form::Vjp => Some(sample(random::term(cfg(loops), outer_ctx.to_vec(), b), r)),
    };
    Level { form, body, extra }
}

impl Case {
    fn draw(r: &mut TestRunner, loops: bool) -> Case {
        let c = cfg(loops);
        let shape = sample(0..SHAPES.len(), r);
        let ncaps = sample(0..3usize, r);
        let mut caps = Vec::new();
        let mut inputs = Vec::new();
        for k in 0..ncaps {
            let ty = sample(random::input_type(&c), r);
            inputs.push(sample(random::value(&ty), r));
            caps.push(Var::fresh(format!("c{k}"), ty));
        }
        let a = if shape == 3 {
            Type::array(Type::Real)
        } else {
            [
                Type::Real,
                Type::array(Type::Real),
                Type::prod(Type::Real, Type::Real),
            ][sample(0..3usize, r)]
            .clone()
        };
        let x = Var::fresh("x", a.clone());
        inputs.push(sample(random::value(&a), r));
        // The forms' argument type: `a`, or `Real` for the form inside `map`.
        let fa = if shape == 3 { Type::Real } else { a.clone() };
        let y = Var::fresh("y", fa.clone());
        let z = Var::fresh("z", fa.clone());
        let t = Var::fresh("t", Type::Real);
        let smap_arg = sample(0..2usize, r) == 0;
        let mut ctx0 = caps.clone();
        ctx0.push(x.clone());
        let (outer, inner, mid) = match shape {
            0 => {
                let mut ctx = caps.clone();
                ctx.push(y.clone());
                (level(loops, r, &ctx, &ctx0, &var(&x), None), None, None)
            }
            1 | 2 => {
                // grad (\y -> B1(c, y, h)) x, h = form (\z -> B2(c, y, z)) (smap y)
                let mut ictx = caps.clone();
                ictx.extend([y.clone(), z.clone()]);
                let mut octx = caps.clone();
                octx.push(y.clone());
                let sp_inner =
                    (shape == 2).then(|| prim("add", vec![reduce(var(&y)), reduce(var(&z))]));
                let inner = level(loops, r, &ictx, &octx, &smap(var(&y)), sp_inner);
                let h = Var::fresh("h", inner.result(&fa));
                let mut mctx = octx.clone();
                mctx.push(h.clone());
                let sp_mid =
                    (shape == 2).then(|| prim("mul", vec![reduce(var(&y)), reduce(var(&h))]));
                // The outer body is drawn over `mctx`; `build` puts `let h = inner in` in
                // front of it.
                let outer = level(loops, r, &mctx, &ctx0, &var(&x), sp_mid);
                let mid = outer.body.clone();
                (outer, Some(inner), Some((h, mid)))
            }
            _ => {
                // sum (map (\t -> reduce (form (\y -> B(c, x, t, y)) (t * 0.5))) x)
                let mut ctx = ctx0.clone();
                ctx.extend([t.clone(), y.clone()]);
                let mut tctx = ctx0.clone();
                tctx.push(t.clone());
                (level(loops, r, &ctx, &tctx, &var(&t), None), None, None)
            }
        };
        let g_ty = if shape == 3 {
            Type::Real
        } else {
            outer.result(&a)
        };
        let g = Var::fresh("g", g_ty);
        let mut rctx = ctx0.clone();
        rctx.push(g.clone());
        let rest = if shape == 2 {
            prim("mul", vec![reduce(var(&g)), reduce(var(&x))])
        } else {
            sample(random::term(c, rctx, Type::Real), r)
        };
        Case {
            shape,
            caps,
            x,
            inputs,
            y,
            z,
            t,
            outer,
            inner,
            mid,
            g,
            rest,
            smap_arg,
        }
    }

    /// `def main (c..) (x) = let g = E[form] in rest`, the forms elaborated by `d`.
    fn build(&self, d: &dyn Differentiate) -> chad::Result<Entry> {
        let arg = if self.smap_arg {
            smap(var(&self.x))
        } else {
            var(&self.x)
        };
        let form = match self.shape {
            0 => self.outer.elaborate(d, &self.caps, &self.y, arg)?,
            1 | 2 => {
                let inner = self.inner.as_ref().expect("depth 2");
                let (h, mid) = self.mid.as_ref().expect("depth 2");
                let mut icaps = self.caps.clone();
                icaps.push(self.y.clone());
                let h_t = inner.elaborate(d, &icaps, &self.z, smap(var(&self.y)))?;
                let outer = Level {
                    body: mk(K::Let(Pat::Var(h.clone()), h_t, mid.clone())),
                    ..self.outer.clone()
                };
                outer.elaborate(d, &self.caps, &self.y, arg)?
            }
            _ => {
                let mut caps = self.caps.clone();
                caps.extend([self.x.clone(), self.t.clone()]);
                let f = self.outer.elaborate(
                    d,
                    &caps,
                    &self.y,
                    prim("mul", vec![var(&self.t), real(0.5)]),
                )?;
                let lam = mk(K::Lam(self.t.clone(), reduce(f)));
                prim("sum", vec![mk(K::Map(lam, var(&self.x)))])
            }
        };
        let mut params = self.caps.clone();
        params.push(self.x.clone());
        Ok(Entry {
            name: "main".into(),
            params,
            body: mk(K::Let(Pat::Var(self.g.clone()), form, self.rest.clone())),
        })
    }
}

fn close(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol * a.abs().max(b.abs()).max(1e-3)
}

#[derive(Default, Debug)]
struct Counts {
    compared: usize,
    gradients: usize,
    both_failed: usize,
    chad_unsupported: usize,
    not_finite: usize,
    /// The tagged route failed (the primal of a form's function fails) and CHAD's did not.
    only_tagged_failed: usize,
    per_shape: [usize; 4],
}

#[test]
fn nested_ad_agrees_with_tagged_dual_numbers_on_random_programs() {
    let k = agree(common::cases(60), false);
    assert_eq!(k.only_tagged_failed, 0, "{k:?}");
}

/// With loops in the random bodies. A form whose function fails where it is evaluated (an
/// index out of range inside a loop step) fails in the tagged route, which evaluates it, but
/// CHAD's simplified derivative code may no longer contain the failing part when the
/// derivative does not need it; such cases are counted, not compared. The opposite (CHAD
/// failing where the oracle does not) is a failure.
#[test]
fn nested_ad_agrees_with_tagged_dual_numbers_on_random_programs_with_loops() {
    let n = common::cases(20);
    let k = agree(n, true);
    assert!(k.only_tagged_failed * 10 <= n as usize, "{k:?}");
}

fn agree(n: u32, loops: bool) -> Counts {
    let mut r = common::runner(n);
    let mut k = Counts::default();
    for _ in 0..n {
        let case = Case::draw(&mut r, loops);
        let rec = tagged_eval::Recorder::new();
        let te = case.build(&rec).expect("recording never fails");
        let forms = rec.finish();
        let show = || {
            let recorded: String = forms
                .all()
                .iter()
                .map(|f| {
                    format!(
                        "{} = {:?} of \\{:?} -> {}\n",
                        f.prim.name(),
                        f.form,
                        f.entry
                            .params
                            .iter()
                            .map(|p| p.name.to_string())
                            .collect::<Vec<_>>(),
                        f.entry.body
                    )
                })
                .collect();
            format!(
                "shape {}\n{recorded}{}\ninputs {:?}",
                SHAPES[case.shape],
                te.body,
                case.inputs
                    .iter()
                    .map(|v| v.to_string())
                    .collect::<Vec<_>>()
            )
        };
        let ce = match case.build(&nested::Elaborator) {
            Ok(e) => e,
            Err(e) => {
                k.chad_unsupported += 1;
                eprintln!("CHAD elaboration failed: {}\n{}", e.render(None), show());
                continue;
            }
        };
        let cv = chad::internals::eval::eval_entry(&ce, &case.inputs);
        let tv = tagged_eval::eval_entry(&forms, &te, &case.inputs);
        let (cv, tv) = match (cv, tv) {
            (Ok(c), Ok(t)) => (c.expect_real(), t.expect_real()),
            (Err(a), Err(b)) => {
                // The primal fails where it is evaluated, the same way by both routes.
                assert_eq!(a.message(), b.message(), "{}", show());
                k.both_failed += 1;
                continue;
            }
            (Ok(_), Err(e)) if loops && e.kind() == chad::internals::error::ErrorKind::Runtime => {
                eprintln!("only the tagged route failed: {}", e.message());
                k.only_tagged_failed += 1;
                continue;
            }
            (c, t) => panic!("one route failed: CHAD {c:?}, tagged {t:?}\n{}", show()),
        };
        if !cv.is_finite() || !tv.is_finite() {
            k.not_finite += 1;
            continue;
        }
        assert!(
            close(cv, tv, 1e-9),
            "value: CHAD {cv}, tagged {tv}\n{}",
            show()
        );
        k.compared += 1;
        k.per_shape[case.shape] += 1;
        let (ty, tg) = tagged_eval::grad_entry(&forms, &te, &case.inputs)
            .unwrap_or_else(|e| panic!("tagged gradient: {e:?}\n{}", show()));
        assert_eq!(ty.to_bits(), tv.to_bits(), "the gradient's value");
        let (_, cg) = Vjp::new(&ce)
            .unwrap_or_else(|e| panic!("reverse CHAD of the elaborated program: {e:?}\n{}", show()))
            .map_body(simplify)
            .grad(&case.inputs)
            .unwrap_or_else(|e| panic!("reverse CHAD: {e:?}\n{}", show()));
        let cg: Vec<f64> = cg.iter().flat_map(fd::leaves).collect();
        assert_eq!(cg.len(), tg.len(), "gradient lengths\n{}", show());
        if cg.iter().chain(&tg).any(|x| !x.is_finite()) {
            continue;
        }
        for (i, (a, b)) in cg.iter().zip(&tg).enumerate() {
            assert!(
                close(*a, *b, 1e-7),
                "gradient component {i}: CHAD {cg:?}, tagged {tg:?}\n{}",
                show()
            );
        }
        k.gradients += 1;
    }
    eprintln!("{k:?} of {n}");
    assert!(k.compared * 3 >= n as usize * 2, "{k:?} of {n}");
    assert!(k.gradients * 10 >= k.compared * 8, "{k:?} of {n}");
    assert!(k.per_shape.iter().all(|&s| s > 0), "{k:?}");
    k
}

/// Through the checker: the same source text loaded by both routes.
#[test]
fn source_programs_agree_with_tagged_dual_numbers() {
    let cases: [(&str, &[f64]); 6] = [
        (
            "def main (a : Real) : Real = grad (\\x -> x * grad (\\y -> x + y) 1.0) a",
            &[2.0],
        ),
        (
            "def main (a : Real) : Real = grad (\\x -> x * snd (vjp (\\y -> x * y * a) 2.0 1.0)) a",
            &[1.5],
        ),
        (
            "def f (x : Real) : Real = x * x * sin x\n\
             def newton (g : Real -> Real) (x : Real) : Real = x - g x / grad g x\n\
             def main (a : Real) : Real = newton f (newton f a)",
            &[0.7],
        ),
        (
            "def main (a : Real) (b : Real) : Real = \
             let h = \\(p : (Real, Real)) -> fst p * snd p * a + exp (snd p) in \
             let (u, v) = grad h (a, b) in u * v + snd (jvp h (b, a) (1.0, a))",
            &[0.3, -0.4],
        ),
        (
            "def main (xs : Array Real) : Real = \
             sum (map (\\t -> grad (\\y -> sin (y * t) * sum xs) t) xs)",
            &[0.5, -1.0, 2.0],
        ),
        // A `build` of closures over an input array, known only at run time (`check::carry`).
        (
            "def main (xs : Array Real) : Real = \
             let fs = build (length xs) (\\i -> \\(y : (Real, Real)) -> xs ! i * fst y * snd y) in \
             sum (map2 (\\(f : (Real, Real) -> Real) (x : Real) -> snd (grad f (x, x * x))) fs xs)",
            &[0.5, -1.0, 2.0],
        ),
    ];
    // And the programs over functions known only at run time (`check::carry`, which both
    // routes share; `tests/nested.rs` checks them against closed forms).
    let run_time = common::run_time_functions();
    let run_time = run_time
        .iter()
        .map(|(src, a, _)| (*src, std::slice::from_ref(a)));
    for (src, args) in cases.into_iter().chain(run_time) {
        let reg = Registry::builtin();
        let cp = nested::load(src, &reg).unwrap_or_else(|e| panic!("{}", e.render(None)));
        let ce = cp.entry(cp.defs.len() - 1);
        let (tp, forms) = tagged_eval::load(src, &reg).unwrap();
        let te = tp.entry(tp.defs.len() - 1);
        let args: Vec<Value> = if ce.params[0].ty == Type::Real {
            args.iter().map(|&a| Value::Real(a)).collect()
        } else {
            vec![Value::reals(args.to_vec())]
        };
        let cv = chad::internals::eval::eval_entry(&ce, &args)
            .unwrap()
            .expect_real();
        let (tv, tg) = tagged_eval::grad_entry(&forms, &te, &args).unwrap();
        assert!(close(cv, tv, 1e-12), "{src}: {cv} vs {tv}");
        let (_, cg) = Vjp::new(&ce)
            .unwrap()
            .map_body(simplify)
            .grad(&args)
            .unwrap();
        let cg: Vec<f64> = cg.iter().flat_map(fd::leaves).collect();
        assert_eq!(cg.len(), tg.len());
        for (a, b) in cg.iter().zip(&tg) {
            assert!(close(*a, *b, 1e-9), "{src}: {cg:?} vs {tg:?}");
        }
    }
}

/// `e : ty` reduced to a `Real` in source text (sums of leaves), with fresh names from `n`.
fn reduce_text(ty: &Type, e: &str, n: &mut usize) -> String {
    match ty {
        Type::Real => format!("({e})"),
        Type::Array(_) => format!("sum ({e})"),
        Type::Prod(p) => {
            *n += 1;
            let (u, v) = (format!("u{n}"), format!("v{n}"));
            format!(
                "(let ({u}, {v}) = {e} in {} + {})",
                reduce_text(&p.0, &u, n),
                reduce_text(&p.1, &v, n)
            )
        }
        other => panic!("reduce_text at {other}"),
    }
}

/// Functions known only at run time (`check::carry`) on random programs: two or three random
/// functions (over captured inputs) in an array, each differentiated by the same form through
/// `map`'s lambda parameter, against the same forms written over each function in place (the
/// checker's static route: values and CHAD's gradient of the whole program agree), and
/// against the tagged-dual oracle (value and gradient).
#[test]
fn run_time_functions_agree_with_static_ones_and_tagged_dual_numbers() {
    use chad::internals::source::print::term_to_string;
    let n = common::cases(40);
    let mut r = common::runner(n);
    let (mut compared, mut gradients, mut nested) = (0, 0, 0);
    for _ in 0..n {
        let c = cfg(sample(0..2usize, &mut r) == 1);
        let mut caps = Vec::new();
        let mut inputs = Vec::new();
        for k in 0..sample(0..3usize, &mut r) {
            let ty = sample(random::input_type(&c), &mut r);
            inputs.push(sample(random::value(&ty), &mut r));
            caps.push(Var::fresh(format!("c{k}"), ty));
        }
        let a = [
            Type::Real,
            Type::array(Type::Real),
            Type::prod(Type::Real, Type::Real),
        ][sample(0..3usize, &mut r)]
        .clone();
        let x = Var::fresh("x", a.clone());
        inputs.push(sample(random::value(&a), &mut r));
        let form = form_of(sample(0..3usize, &mut r));
        let b = if form == Form::Grad || sample(0..2usize, &mut r) == 0 {
            Type::Real
        } else {
            Type::prod(Type::Real, Type::Real)
        };
        let y = Var::fresh("y", a.clone());
        let mut ctx = caps.clone();
        ctx.push(y.clone());
        // (The taped loop `scan` desugars to is a core form without surface syntax of its
        // own: drawn again.)
        let printable = |t: &Term| Some(term_to_string(t, 100)).filter(|s| !s.contains("loopTape"));
        let lams: Vec<Term> = (0..sample(2..4usize, &mut r))
            .map(|_| {
                loop {
                    let body = sample(random::term(c.clone(), ctx.clone(), b.clone()), &mut r);
                    let lam = mk(K::Lam(y.clone(), body));
                    if printable(&lam).is_some() {
                        break lam;
                    }
                }
            })
            .collect();
        // Half the time the forms differentiate run-time functions that call them:
        // `\y -> let z = g y in w` for each `g`, `w` random over the inputs, `y` and `z`.
        let fty = Type::fun(a.clone(), b.clone());
        let wrap = (sample(0..2usize, &mut r) == 1).then(|| {
            let z = Var::fresh("z", b.clone());
            let mut wctx = ctx.clone();
            wctx.push(z.clone());
            loop {
                let w = sample(random::term(c.clone(), wctx.clone(), b.clone()), &mut r);
                if printable(&w).is_some() {
                    break move |g: Term| {
                        let call = mk(K::App(g, mk(K::Var(y.clone()))));
                        mk(K::Lam(
                            y.clone(),
                            mk(K::Let(Pat::Var(z.clone()), call, w.clone())),
                        ))
                    };
                }
            }
        });
        let show = |t: &Term| printable(t).expect("printable");
        let inner: Vec<String> = lams.iter().map(show).collect();
        // The functions the static program differentiates in place, and the array the run-time
        // one maps its form over.
        let (in_place, hs): (Vec<String>, String) = match &wrap {
            None => (inner.clone(), "fs".into()),
            Some(wrap) => {
                let g = Var::fresh("g", fty.clone());
                let wrapped = show(&wrap(mk(K::Var(g.clone()))));
                (
                    lams.iter().map(|l| show(&wrap(l.clone()))).collect(),
                    format!("(map (\\({} : {fty}) -> {wrapped}) fs)", g.name),
                )
            }
        };
        let mut xctx = caps.clone();
        xctx.push(x.clone());
        let extra = match form {
            Form::Grad => String::new(),
            Form::Jvp => "x".into(),
            Form::Vjp => loop {
                let ct = sample(random::term(c.clone(), xctx.clone(), b.clone()), &mut r);
                if let Some(s) = printable(&ct) {
                    break format!("({s})");
                }
            },
        };
        let result = match form {
            Form::Grad => a.clone(),
            Form::Jvp => Type::prod(b.clone(), b.clone()),
            Form::Vjp => Type::prod(b.clone(), a.clone()),
        };
        let name = ["grad", "jvp", "vjp"][form as usize];
        // For a `Real` result, half the time the form differentiates a derivative of each
        // function, written in place over it (`grad (\u -> grad g u) x`, reduced to a
        // `Real`): second derivatives, of run-time functions on one route.
        let nest = b == Type::Real && sample(0..2usize, &mut r) == 1;
        let mut fresh = 0;
        let mut applied = |f: &str| {
            let f = if nest {
                let inner = reduce_text(&a, &format!("grad ({f}) u"), &mut fresh);
                format!("\\(u : {a}) -> {inner}")
            } else {
                f.to_string()
            };
            reduce_text(&result, &format!("{name} ({f}) x {extra}"), &mut fresh)
        };
        let params: String = caps
            .iter()
            .chain([&x])
            .map(|v| format!("({} : {}) ", v.name, v.ty))
            .collect();
        let dynamic = format!(
            "def main {params}: Real =\n  let fs = [{}] in\n  sum (map (\\(g : {fty}) -> {}) {hs})",
            inner.join(", "),
            applied("g")
        );
        let stat = format!(
            "def main {params}: Real =\n  {}",
            in_place
                .iter()
                .map(|l| applied(l))
                .collect::<Vec<_>>()
                .join(" + ")
        );
        let reg = Registry::builtin();
        let load = |src: &str| {
            let p = nested::load(src, &reg).unwrap_or_else(|e| panic!("{}\n{src}", e.render(None)));
            p.entry(p.defs.len() - 1)
        };
        let (de, se) = (load(&dynamic), load(&stat));
        let eval = chad::internals::eval::eval_entry;
        let (dv, sv) = match (eval(&de, &inputs), eval(&se, &inputs)) {
            (Ok(d), Ok(s)) => (d.expect_real(), s.expect_real()),
            (Err(d), Err(s)) => {
                // (With a wrapper or a nested form, which of two errors comes first may
                // differ, as below.)
                if wrap.is_none() && !nest {
                    assert_eq!(d.message(), s.message(), "{dynamic}");
                }
                continue;
            }
            // An error in code whose value is unused may vanish on either route (README,
            // "Runtime errors"): `let z = g y in w` with `w` not using `z` keeps the call on
            // the run-time route (`g`'s code is not known there), not on the static one; so
            // does `grad g u` differentiated again (the derivative through `g`'s carried
            // derivatives computes `g u`, whose value the static route drops).
            (Err(e), Ok(_)) | (Ok(_), Err(e))
                if (wrap.is_some() || nest)
                    && e.kind() == chad::internals::error::ErrorKind::Runtime =>
            {
                continue;
            }
            (d, s) => panic!("one route failed: run time {d:?}, static {s:?}\n{dynamic}"),
        };
        if !dv.is_finite() || !sv.is_finite() {
            continue;
        }
        assert!(
            close(dv, sv, 1e-12),
            "run time {dv}, static {sv}\n{dynamic}"
        );
        let (tp, forms) = tagged_eval::load(&dynamic, &reg).unwrap();
        let te = tp.entry(tp.defs.len() - 1);
        if nest {
            // Values only: the whole program's gradient would be a third derivative of
            // random loops, which costs seconds per case on every route (the closed-form
            // cases of `tests/nested.rs` check third derivatives).
            let tv = match tagged_eval::eval_entry(&forms, &te, &inputs) {
                Ok(v) => v.expect_real(),
                Err(e) if e.kind() == chad::internals::error::ErrorKind::Runtime => continue,
                Err(e) => panic!("tagged: {e:?}\n{dynamic}"),
            };
            if tv.is_finite() {
                assert!(close(dv, tv, 1e-9), "run time {dv}, tagged {tv}\n{dynamic}");
                compared += 1;
                nested += 1;
            }
            continue;
        }
        let (tv, tg) = match tagged_eval::grad_entry(&forms, &te, &inputs) {
            Ok(r) => r,
            // An error in code whose value is unused may vanish on CHAD's route, never appear
            // (README, "Runtime errors"): the tagged route runs a form's function in full.
            Err(e) if e.kind() == chad::internals::error::ErrorKind::Runtime => continue,
            Err(e) => panic!("tagged: {e:?}\n{dynamic}"),
        };
        if !tv.is_finite() {
            // A non-finite cotangent times a zero derivative: NaN with dual numbers, a strong
            // zero in CHAD's code (as `nested_ad_agrees_..` skips).
            continue;
        }
        assert!(close(dv, tv, 1e-9), "run time {dv}, tagged {tv}\n{dynamic}");
        compared += 1;
        let grad = |e: &Entry| -> Vec<f64> {
            let (_, g) = Vjp::new(e)
                .unwrap()
                .map_body(simplify)
                .grad(&inputs)
                .unwrap();
            g.iter().flat_map(fd::leaves).collect()
        };
        let (dg, sg) = (grad(&de), grad(&se));
        if dg.iter().chain(&sg).chain(&tg).any(|g| !g.is_finite()) {
            continue;
        }
        for ((d, s), t) in dg.iter().zip(&sg).zip(&tg) {
            assert!(
                close(*d, *s, 1e-9),
                "gradients: run time {dg:?}, static {sg:?}\n{dynamic}"
            );
            assert!(
                close(*d, *t, 1e-7),
                "gradients: run time {dg:?}, tagged {tg:?}\n{dynamic}"
            );
        }
        gradients += 1;
    }
    eprintln!("compared {compared} ({nested} nested), gradients {gradients} of {n}");
    assert!(compared * 3 >= n as usize * 2, "compared {compared} of {n}");
    assert!(
        gradients * 10 >= (compared - nested) * 8,
        "gradients {gradients} of {}",
        compared - nested
    );
    assert!(nested * 8 >= compared, "nested {nested} of {compared}");
}
