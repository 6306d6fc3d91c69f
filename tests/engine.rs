//! The execution engine ([`chad::internals::target::engine`]) against the reference evaluator
//! ([`chad::internals::target::eval`]), an independent implementation that looks variables up by name.
//!
//! * Embedded random source programs (first-order, deeper higher-order, array- and sum-heavy):
//!   the engine agrees exactly with the *source* evaluator (values, or errors with positions;
//!   functions compared by application).
//! * Random linear maps (every linear form): the engine's map and the reference map agree on
//!   random arguments of every representation, observed through the linear API.
//! * Raw and simplified forward and reverse derivative code of random programs: the engine
//!   and the reference evaluator give the same primal and the same derivative on random
//!   (co)tangents, or the same error.
//! * Hand-written terms for the engine's own mechanisms: moves out of slots (not inside loops,
//!   not for variables used twice), inlined loops, captures, deep let chains.
//!
//! Every AD oracle test (`tests/ad*.rs`, `tests/logical_relations.rs`, `tests/examples.rs`)
//! also runs through the engine, since `Jvp`, `Vjp` and `Mor::apply` do.

mod common;

use chad::Value;
use chad::internals::ad::{TypeMaps, forward, reverse};
use chad::internals::ccc;
use chad::internals::random::{Config, TestProgram, program};
use chad::internals::simplify::simplify;
use chad::internals::target::embed;
use chad::internals::target::engine::Code;
use chad::internals::target::eval::{Env, eval};
use chad::internals::target::linear::Lin;
use chad::internals::target::random::{linear_map, small_lty};
use chad::internals::target::term::{LTerm, LTermKind as L, Term, TermKind as K, Var};
use chad::internals::target::testing::{approx_eq, lin, observe, probes};
use chad::internals::target::{LTy, Ty};
use common::same_at;
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::TestRunner;

const TOL: f64 = 1e-12;

// ----- embedded source programs -----

fn embedding_agrees(p: &TestProgram) -> Result<bool, TestCaseError> {
    let (params, body) = embed::entry(&p.entry);
    let source = chad::internals::eval::eval_entry(&p.entry, &p.inputs);
    let engine = Code::compile(&params, &body).run(&p.inputs);
    let mut rng = TestRunner::deterministic();
    same_at(&p.entry.body.ty, &source, &engine, &mut rng, 2).map_err(TestCaseError::fail)?;
    Ok(source.is_ok())
}

fn check_embedding(cfg: Config, n: u32) {
    common::check_programs(cfg, n, embedding_agrees);
}

#[test]
fn engine_agrees_with_the_source_evaluator() {
    check_embedding(Config::default(), common::cases(400));
}

#[test]
fn engine_agrees_on_higher_order_programs() {
    let cfg = Config {
        depth: 6,
        higher_order_result: true,
        ..Config::default()
    };
    check_embedding(cfg, common::cases(200));
}

#[test]
fn engine_agrees_on_array_and_sum_programs() {
    for cfg in [
        Config {
            array_bias: true,
            ..Config::default()
        },
        Config {
            sum_bias: true,
            ..Config::default()
        },
        Config {
            loops: true,
            higher_order_result: true,
            ..Config::default()
        },
    ] {
        check_embedding(cfg, common::cases(200));
    }
}

// ----- linear maps -----

#[test]
fn engine_linear_maps_agree_with_the_reference_evaluator() {
    let strategy = (small_lty(2), small_lty(2)).prop_flat_map(|(dom, cod)| {
        (
            Just(cod.clone()),
            linear_map(dom.clone(), cod, 6),
            lin(&dom),
            any::<u64>(),
        )
    });
    common::runner(common::cases(300))
        .run(&strategy, |(cod, term, x, seed)| {
            let reference = eval(&term, &Env::new()).and_then(|f| f.expect_lin_fun().apply(&x));
            let engine = Code::compile(&[], &term)
                .run(&[])
                .and_then(|f| f.expect_lin_fun().apply(&x));
            same_lin(&cod, &reference, &engine, seed).map_err(TestCaseError::fail)
        })
        .unwrap_or_else(|e| panic!("{e}"));
}

/// Two linear results agree: both errors with the same message and position, or values
/// that agree under every observation.
fn same_lin(
    l: &LTy,
    a: &chad::Result<Lin>,
    b: &chad::Result<Lin>,
    seed: u64,
) -> Result<(), String> {
    match (a, b) {
        (Err(x), Err(y)) if x.message() == y.message() && x.span() == y.span() => Ok(()),
        (Ok(x), Ok(y)) => {
            let p = probes(seed);
            let (ox, oy) = (observe(l, x, &p), observe(l, y, &p));
            if approx_eq(&ox, &oy, TOL) {
                Ok(())
            } else {
                Err(format!("{x:?} observed {ox:?}, {y:?} observed {oy:?}"))
            }
        }
        (x, y) => Err(format!(
            "reference {:?}, engine {:?}",
            x.as_ref().map(|_| "value").map_err(|e| e.to_string()),
            y.as_ref().map(|_| "value").map_err(|e| e.to_string())
        )),
    }
}

// ----- derivative code -----

/// The engine and the reference evaluator on the derivative code of `p` (mode by mode, raw
/// and simplified): same primal, same derivative at a random (co)tangent, or the same error.
fn derivatives_agree(p: &TestProgram, seed: u64) -> Result<(), TestCaseError> {
    let comb = ccc::compile_entry(&p.entry);
    let x = ccc::eval::context_value(&p.inputs);
    let fwd = forward::Forward::new();
    let rev = reverse::Reverse::new();
    let cases = [
        (
            forward::transform(&comb),
            fwd.derivative(&comb.dom, &comb.cod),
        ),
        (
            reverse::transform(&comb),
            rev.derivative(&comb.dom, &comb.cod),
        ),
    ];
    let mut rng = TestRunner::deterministic();
    for (m, dty) in cases {
        let Ok(m) = m else { continue };
        let (dom, cod) = dty.as_lin_fun().expect("a derivative is a linear map");
        let arg = lin(dom)
            .new_tree(&mut rng)
            .map_err(|e| TestCaseError::fail(e.to_string()))?
            .current();
        for body in [m.body.clone(), simplify(&m.body)] {
            let run = |v: chad::Result<Value>| -> chad::Result<(Value, Lin)> {
                let v = v?;
                let (y, f) = v.expect_pair();
                Ok((y.clone(), f.expect_lin_fun().apply(&arg)?))
            };
            let reference = run(eval(&body, &Env::new().update(m.x.id, x.clone())));
            let engine =
                run(Code::compile(std::slice::from_ref(&m.x), &body).run(std::slice::from_ref(&x)));
            let split = |r: &chad::Result<(Value, Lin)>| match r {
                Ok((y, d)) => (Ok(y.clone()), Ok(d.clone())),
                Err(e) => (Err(e.clone()), Err(e.clone())),
            };
            let ((ry, rd), (ey, ed)) = (split(&reference), split(&engine));
            let primal = comb.cod.clone();
            same_at(&primal, &ry, &ey, &mut rng, 1)
                .map_err(|e| TestCaseError::fail(format!("primal: {e}\nin {body}")))?;
            same_lin(cod, &rd, &ed, seed)
                .map_err(|e| TestCaseError::fail(format!("derivative: {e}\nin {body}")))?;
        }
    }
    Ok(())
}

#[test]
fn engine_runs_derivative_code_like_the_reference_evaluator() {
    for cfg in [
        Config::default(),
        Config {
            array_bias: true,
            ..Config::default()
        },
        Config {
            sum_bias: true,
            ..Config::default()
        },
        Config {
            loops: true,
            ..Config::default()
        },
    ] {
        common::runner(common::cases(120))
            .run(&(program(cfg), any::<u64>()), |(p, seed)| {
                derivatives_agree(&p, seed)
            })
            .unwrap_or_else(|e| panic!("{e}"));
    }
}

// ----- the engine's mechanisms, by hand -----

fn load(src: &str) -> chad::internals::source::term::Entry {
    let prog = chad::internals::source::load(src, &chad::internals::prim::Registry::builtin())
        .expect("loads");
    prog.entry(prog.defs.len() - 1)
}

fn run_source(src: &str, args: &[Value]) -> chad::Result<Value> {
    let entry = load(src);
    let (params, body) = embed::entry(&entry);
    Code::compile(&params, &body).run(args)
}

fn reals(xs: &[f64]) -> Value {
    Value::reals(xs.to_vec())
}

#[test]
fn a_variable_used_once_inside_a_loop_is_not_moved_out() {
    // `ys` occurs once, inside the body of `build`: every iteration must still see it.
    let src = "def f (xs : Array Real) : Array Real =
                 let ys = map (\\x -> 2.0 * x) xs in build 3 (\\i -> ys ! i + 1.0)";
    let v = run_source(src, &[reals(&[1.0, 2.0, 3.0])]).unwrap();
    assert_eq!(v.expect_reals(), &[3.0, 5.0, 7.0]);
    // ... and inside a closure applied several times.
    let src = "def g (a : Real) (xs : Array Real) : Array Real =
                 let b = a * a in let f = \\(x : Real) -> b * x in map f xs";
    let v = run_source(src, &[Value::Real(3.0), reals(&[1.0, 2.0])]).unwrap();
    assert_eq!(v.expect_reals(), &[9.0, 18.0]);
}

#[test]
fn inlined_loops_nest_and_shadow_nothing() {
    let src = "def f (n : Int) : Array (Array Real) =
                 build n (\\i -> build n (\\j -> toReal (i * 10 + j)))";
    let v = run_source(src, &[Value::Int(2)]).unwrap();
    assert_eq!(v.to_string(), "[[0.0, 1.0], [10.0, 11.0]]");
    let src = "def g (xs : Array Real) (ys : Array Real) : Array Real =
                 map2 (\\x y -> x * y + sum (map (\\z -> z * x) ys)) xs ys";
    let v = run_source(src, &[reals(&[1.0, 2.0]), reals(&[3.0, 4.0])]).unwrap();
    assert_eq!(v.expect_reals(), &[3.0 + 7.0, 8.0 + 14.0]);
}

#[test]
fn closures_capture_their_environment_at_creation() {
    let src = "def f (x : Real) : Real =
                 let adders = build 3 (\\i -> \\(y : Real) -> y + toReal i * x) in
                 (adders ! 0) 1.0 + (adders ! 2) 1.0";
    let v = run_source(src, &[Value::Real(5.0)]).unwrap();
    assert_eq!(v.expect_real(), 1.0 + 11.0);
}

#[test]
fn runtime_errors_carry_the_position_of_their_node() {
    let src = "def f (xs : Array Real) : Real =\n  xs ! 5";
    let e = run_source(src, &[reals(&[1.0])]).unwrap_err();
    assert!(e.message().contains("index 5"), "{}", e.message());
    let span = e.span().expect("a position");
    assert_eq!(&src[span.start as usize..span.end as usize], "xs ! 5");
    let e = run_source(
        "def g (n : Int) : Array Real = build (n - 5) (\\i -> 1.0)",
        &[Value::Int(2)],
    )
    .unwrap_err();
    assert!(e.message().contains("build"), "{}", e.message());
    let e = run_source("def h (n : Int) : Int = n * n", &[Value::Int(i64::MAX)]).unwrap_err();
    assert!(e.message().contains("overflow"), "{}", e.message());
}

#[test]
fn a_long_let_chain_runs_without_overflowing_the_stack() {
    let src = chad::internals::random::straight_line_source(20_000, 7);
    let entry = load(&src);
    let (params, body) = embed::entry(&entry);
    let args: Vec<Value> = entry
        .params
        .iter()
        .map(|p| match p.ty {
            chad::internals::types::Type::Real => Value::Real(0.5),
            _ => reals(&[0.25, -1.5, 2.0]),
        })
        .collect();
    let reference = chad::internals::eval::eval_entry(&entry, &args).unwrap();
    let engine = Code::compile(&params, &body).run(&args).unwrap();
    assert_eq!(reference.same(&engine), Some(true));
}

#[test]
fn a_term_with_an_unbound_variable_is_an_internal_error() {
    let x = Var::fresh("x", Ty::Real);
    let t = Term::mk(K::Var(x));
    let e = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        Code::compile(&[], &t);
    }))
    .expect_err("compiling must panic");
    let msg = common::panic_message(&e);
    assert!(msg.contains("internal error"), "{msg}");
}

// ----- places, unzipped arrays of tuples, unboxed scalar code -----

/// `xs ! i` with a position of its own (so that an out-of-range error names it).
fn idx(xs: Term, i: Term, pos: u32) -> Term {
    let span = chad::Span {
        start: pos,
        end: pos + 1,
    };
    Term::new(K::Index(xs, i), span)
}

fn call(name: &str, args: Vec<Term>) -> Term {
    let reg = chad::internals::prim::Registry::builtin();
    Term::prim(reg.get(name).expect("a builtin"), args)
}

fn length(xs: Term) -> Term {
    Term::mk(K::Length(xs))
}

/// Use `u` of an array of tuples `rs` bound by `let rs = e`: the shapes the engine compiles
/// specially (reading leaves from columns, rebuilding a tuple node, binding a pattern against
/// one, a column mapped out and summed, a closure or a linear map capturing the columns,
/// unboxed linear reals) and, last, a use of the whole array (which keeps it zipped).
/// Element shape: `(a, (sin a, (xs, (a, c))))`, the last leaf a pair-valued variable.
fn tuple_use(u: usize, rs: &Var, xs: &Var, j: &Var, k: &Var) -> Term {
    use chad::internals::target::term::Pat;
    let r = || Term::var(rs);
    let at = |i: &Var, pos| idx(r(), Term::var(i), pos);
    let fresh = |name: &str, ty: Ty| Var::fresh(name, ty);
    match u {
        0 => {
            let x = fresh("r", Ty::Unit);
            call(
                "sum",
                vec![Term::mk(K::Map(
                    Term::lam(&x, Term::fst(Term::snd(Term::var(&x)))),
                    r(),
                ))],
            )
        }
        1 => {
            let (a, w) = (fresh("u", Ty::Real), fresh("w", Ty::Real));
            let p = Pat::Pair(
                Box::new(Pat::Var(a.clone())),
                Box::new(Pat::Pair(
                    Box::new(Pat::Var(w.clone())),
                    Box::new(Pat::Wild(Ty::Unit)),
                )),
            );
            Term::let_pat(
                p,
                at(j, 10),
                call("mul", vec![Term::var(&a), Term::var(&w)]),
            )
        }
        2 => Term::fst(Term::snd(Term::snd(Term::snd(at(j, 20))))),
        3 => Term::snd(Term::snd(at(k, 30))),
        4 => length(r()),
        5 => idx(Term::fst(Term::snd(Term::snd(at(j, 40)))), Term::var(k), 41),
        6 => {
            let (f, y) = (fresh("f", Ty::Unit), fresh("y", Ty::Int));
            let g = Term::lam(&y, Term::fst(at(&y, 50)));
            let apply = |i: &Var| Term::app(Term::var(&f), Term::var(i));
            Term::let_(&f, g, call("add", vec![apply(j), apply(k)]))
        }
        7 => {
            // \v ⊸ lsum (lbuild (length rs) (\i -> let (u, (w, _)) = rs ! i in
            //                                  u * v + (w * v + 0)))
            let v = Var::linear("v", LTy::Real);
            let i = fresh("i", Ty::Int);
            let (a, w) = (fresh("u", Ty::Real), fresh("w", Ty::Real));
            let p = Pat::Pair(
                Box::new(Pat::Var(a.clone())),
                Box::new(Pat::Pair(
                    Box::new(Pat::Var(w.clone())),
                    Box::new(Pat::Wild(Ty::Unit)),
                )),
            );
            let body = LTerm::mk(L::Let(
                p,
                at(&i, 60),
                LTerm::plus(
                    LTerm::scale(Term::var(&a), LTerm::var(&v)),
                    LTerm::plus(
                        LTerm::scale(Term::var(&w), LTerm::var(&v)),
                        LTerm::zero(LTy::Real),
                    ),
                ),
            ));
            let n = length(r());
            Term::lin_lam(&v, LTerm::mk(L::Sum(LTerm::mk(L::Build(n, i, body)))))
        }
        8 => {
            let q = fresh("q", Ty::Real);
            let p = Pat::Pair(Box::new(Pat::Var(q.clone())), Box::new(Pat::Wild(Ty::Real)));
            Term::let_pat(p, Term::snd(Term::snd(Term::snd(at(k, 70)))), Term::var(&q))
        }
        9 => {
            let x = fresh("r", Ty::Unit);
            Term::mk(K::Map(Term::lam(&x, Term::fst(Term::var(&x))), r()))
        }
        10 => {
            // \v ⊸ let lin d = replicate (length xs - 1) v in
            //      lsum (lbuild (length xs) (\i -> (xs ! i) * (d ! i) + fst (rs ! j) * 0))
            let v = Var::linear("v", LTy::Real);
            let d = Var::linear("d", LTy::array(LTy::Real));
            let i = fresh("i", Ty::Int);
            let one = Term::lit(chad::internals::target::term::Lit::Int(1));
            let n1 = call("isub", vec![length(Term::var(xs)), one]);
            let body = LTerm::plus(
                LTerm::scale(
                    idx(Term::var(xs), Term::var(&i), 80),
                    LTerm::mk(L::Index(LTerm::var(&d), Term::var(&i))),
                ),
                LTerm::scale(Term::fst(at(j, 81)), LTerm::zero(LTy::Real)),
            );
            let n = length(Term::var(xs));
            let sum = LTerm::mk(L::Sum(LTerm::mk(L::Build(n, i, body))));
            let rep = LTerm::mk(L::Replicate(n1, LTerm::var(&v)));
            Term::lin_lam(&v, LTerm::mk(L::LinLet(d, rep, sum)))
        }
        _ => Term::pair(r(), Term::fst(at(j, 90))),
    }
}

const TUPLE_USES: usize = 12;

/// `let rs = build (length xs) (\i -> ..)` (or `map (\x -> ..) xs`) producing
/// `(a, (sin a, (xs, (a, c))))` with `a = x * c`, then `uses` of `rs` in a tuple.
fn tuple_program(by_map: bool, uses: &[usize]) -> (Vec<Var>, Term) {
    let xs = Var::fresh("xs", Ty::array(Ty::Real));
    let c = Var::fresh("c", Ty::Real);
    let (j, k) = (Var::fresh("j", Ty::Int), Var::fresh("k", Ty::Int));
    let rs = Var::fresh("rs", Ty::Unit);
    let (a, p) = (Var::fresh("a", Ty::Real), Var::fresh("p", Ty::Unit));
    let elem = |x: Term| {
        Term::let_(
            &a,
            call("mul", vec![x, Term::var(&c)]),
            Term::let_(
                &p,
                Term::pair(Term::var(&a), Term::var(&c)),
                Term::pair(
                    Term::var(&a),
                    Term::pair(
                        call("sin", vec![Term::var(&a)]),
                        Term::pair(Term::var(&xs), Term::var(&p)),
                    ),
                ),
            ),
        )
    };
    let e = if by_map {
        let x = Var::fresh("x", Ty::Real);
        Term::mk(K::Map(Term::lam(&x, elem(Term::var(&x))), Term::var(&xs)))
    } else {
        let i = Var::fresh("i", Ty::Int);
        let body = elem(idx(Term::var(&xs), Term::var(&i), 1));
        Term::mk(K::Build(length(Term::var(&xs)), Term::lam(&i, body)))
    };
    let body = uses
        .iter()
        .map(|&u| tuple_use(u, &rs, &xs, &j, &k))
        .reduce(|acc, t| Term::pair(t, acc))
        .unwrap_or_else(Term::unit);
    (vec![xs, c, j, k], Term::let_(&rs, e, body))
}

/// Engine and reference evaluator agree exactly: equal values (linear maps compared by
/// applying them to the same arguments, results compared by their rendering), or the same
/// error at the same position.
fn same_exactly(
    a: &chad::Result<Value>,
    b: &chad::Result<Value>,
    probes: &[Lin],
) -> Result<(), String> {
    fn agree(x: &Value, y: &Value, probes: &[Lin]) -> Result<(), String> {
        match (x, y) {
            (Value::Pair(p), Value::Pair(q)) => {
                agree(&p.0, &q.0, probes)?;
                agree(&p.1, &q.1, probes)
            }
            (Value::LinFun(f), Value::LinFun(g)) => {
                for l in probes {
                    let (fx, gx) = (f.apply(l), g.apply(l));
                    let show = |r: &chad::Result<Lin>| match r {
                        Ok(v) => format!("{v:?}"),
                        Err(e) => format!("error {} at {:?}", e.message(), e.span()),
                    };
                    if show(&fx) != show(&gx) {
                        return Err(format!("at {l:?}: {} vs {}", show(&fx), show(&gx)));
                    }
                }
                Ok(())
            }
            _ if x.same(y) == Some(true) => Ok(()),
            _ => Err(format!("{x} vs {y}")),
        }
    }
    match (a, b) {
        (Ok(x), Ok(y)) => agree(x, y, probes),
        (Err(x), Err(y)) if x.message() == y.message() && x.span() == y.span() => Ok(()),
        (x, y) => Err(format!(
            "reference {:?}, engine {:?}",
            x.as_ref().map(|v| v.to_string()).map_err(|e| e.to_string()),
            y.as_ref().map(|v| v.to_string()).map_err(|e| e.to_string())
        )),
    }
}

#[test]
fn unzipped_arrays_places_and_unboxed_code_agree_with_the_reference_evaluator() {
    let strategy = (
        any::<bool>(),
        proptest::collection::vec(0..TUPLE_USES, 1..4),
        proptest::collection::vec(-2.0..2.0f64, 0..4),
        -2.0..2.0f64,
        -1i64..5,
        -1i64..5,
    );
    common::runner(common::cases(600))
        .run(&strategy, |(by_map, uses, xs, c, j, k)| {
            let (params, t) = tuple_program(by_map, &uses);
            let args = [reals(&xs), Value::Real(c), Value::Int(j), Value::Int(k)];
            let mut env = Env::new();
            for (p, a) in params.iter().zip(&args) {
                env = env.update(p.id, a.clone());
            }
            let reference = eval(&t, &env);
            let engine = Code::compile(&params, &t).run(&args);
            let probes = [Lin::zero(), Lin::real(1.5), Lin::real(0.0), Lin::real(c)];
            same_exactly(&reference, &engine, &probes).map_err(TestCaseError::fail)
        })
        .unwrap_or_else(|e| panic!("{e}"));
}

// ----- linear accumulation: one-hots summed in place, unzipped linear arrays -----

/// Random linear terms of the shapes the engine accumulates in place, read from a list of
/// choices: `lsum (lbuild n (\i -> body))` whose body is a sum tree (under lets, linear lets
/// and pairs) of one-hots, reals, zeros, linear variables of pair type and other arrays; and
/// `let lin cs = lbuild n (\i -> pairs) in uses` with uses that sum, index or map a leaf
/// out (the unzipped form) or need the whole array (the zipped one). Lengths and indices
/// come from parameters, so length and range errors occur, at their own positions.
struct LinGen<'a> {
    choices: &'a [u8],
    pos: usize,
    /// Parameters: `xs : Array Real`, `c : Real`, `j, k, m : Int`; the linear variable `v : Real`.
    xs: Var,
    c: Var,
    j: Var,
    k: Var,
    m: Var,
    v: Var,
    /// Source positions handed out to nodes that can fail.
    next_pos: u32,
}

impl LinGen<'_> {
    fn pick(&mut self, n: usize) -> usize {
        // Past the end of the choices, a fixed pseudo-random sequence.
        let c = self.choices.get(self.pos).map_or_else(
            || (self.pos as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40,
            |&c| c as u64,
        ) as usize;
        self.pos += 1;
        c % n
    }

    fn span(&mut self) -> chad::Span {
        self.next_pos += 2;
        chad::Span {
            start: self.next_pos,
            end: self.next_pos + 1,
        }
    }

    fn int(&mut self, i: &Var) -> Term {
        let one = Term::lit(chad::internals::target::term::Lit::Int(1));
        match self.pick(5) {
            0 | 1 => Term::var(i),
            2 => call("iadd", vec![Term::var(i), one]),
            3 => Term::var(&self.j),
            _ => Term::var(&self.k),
        }
    }

    fn len(&mut self) -> Term {
        match self.pick(4) {
            0 => Term::var(&self.m),
            _ => length(Term::var(&self.xs)),
        }
    }

    fn scalar(&mut self, i: &Var) -> Term {
        match self.pick(4) {
            0 => Term::var(&self.c),
            1 => Term::lit(chad::internals::target::term::Lit::Real(0.0)),
            _ => {
                let (ix, pos) = (self.int(i), self.span().start);
                idx(Term::var(&self.xs), ix, pos)
            }
        }
    }

    /// A term of type Real, linear in `v` (and in `w : Real` if given).
    fn real(&mut self, i: &Var, w: Option<&Var>, depth: u32) -> LTerm {
        match self.pick(if depth == 0 { 3 } else { 5 }) {
            0 => LTerm::zero(LTy::Real),
            1 => {
                let s = self.scalar(i);
                LTerm::scale(s, LTerm::var(&self.v))
            }
            2 => LTerm::var(w.unwrap_or(&self.v)),
            3 => LTerm::plus(self.real(i, w, depth - 1), self.real(i, w, depth - 1)),
            _ => {
                let s = self.scalar(i);
                LTerm::scale(s, self.real(i, w, depth - 1))
            }
        }
    }

    /// A term of type `Array Real`.
    fn array(&mut self, i: &Var, w: Option<&Var>, depth: u32) -> LTerm {
        match self.pick(if depth == 0 { 3 } else { 7 }) {
            0 => LTerm::zero(LTy::array(LTy::Real)),
            1 | 2 => {
                let (n, ix) = (self.len(), self.int(i));
                let e = self.real(i, w, 1);
                let span = self.span();
                LTerm::new(L::OneHot(n, ix, e), span)
            }
            3 | 4 => LTerm::plus(self.array(i, w, depth - 1), self.array(i, w, depth - 1)),
            5 => {
                // A dense array among the one-hots.
                let q = Var::fresh("q", Ty::Int);
                let s = self.scalar(&q);
                let n = self.len();
                let span = self.span();
                LTerm::new(L::Build(n, q, LTerm::scale(s, LTerm::var(&self.v))), span)
            }
            _ => {
                let s = self.scalar(i);
                LTerm::scale(s, self.array(i, w, depth - 1))
            }
        }
    }

    /// A body of type `body_ty(kind)`: `Array Real`, `(Array Real, Real)` or
    /// `((Real, Array Real), Real)`, with lets around it.
    fn body(&mut self, kind: usize, i: &Var, p: &Var, depth: u32) -> LTerm {
        let w = Var::linear("w", LTy::Real);
        let inner = match self.pick(if depth == 0 { 2 } else { 6 }) {
            0 | 1 => self.literal(kind, i, Some(&w), depth),
            2 => LTerm::plus(
                self.body(kind, i, p, depth - 1),
                self.body(kind, i, p, depth - 1),
            ),
            3 => self.forwarded(kind, i, &w, depth - 1),
            4 => {
                // A sum nested in the body (added into the enclosing accumulators).
                let q = Var::fresh("q", Ty::Int);
                let n = self.len();
                let e = self.value(&body_ty(kind), &q, Some(&w), depth - 1);
                let span = self.span();
                LTerm::mk(L::Sum(LTerm::new(L::Build(n, q, e), span)))
            }
            _ if kind > 0 => LTerm::plus(LTerm::var(p), self.body(kind, i, p, depth - 1)),
            _ => LTerm::zero(body_ty(kind)),
        };
        let wv = self.real(i, None, 1);
        let body = LTerm::lin_let(&w, wv, inner);
        match self.pick(3) {
            0 => {
                let x = Var::fresh("x", Ty::Real);
                let s = self.scalar(i);
                LTerm::let_(&x, s, body)
            }
            _ => body,
        }
    }

    /// A term of type `ty` (reals, arrays of reals and pairs of them): a literal tuple, a sum
    /// of two, or a nested `lsum (lbuild ..)` of one.
    fn value(&mut self, ty: &LTy, i: &Var, w: Option<&Var>, depth: u32) -> LTerm {
        match (self.pick(if depth == 0 { 1 } else { 4 }), ty) {
            (1, _) => LTerm::plus(
                self.value(ty, i, w, depth - 1),
                self.value(ty, i, w, depth - 1),
            ),
            (2, _) => {
                let q = Var::fresh("q", Ty::Int);
                let n = self.len();
                let e = self.value(ty, &q, w, depth - 1);
                let span = self.span();
                LTerm::mk(L::Sum(LTerm::new(L::Build(n, q, e), span)))
            }
            (_, LTy::Prod(ab)) => LTerm::pair(
                self.value(&ab.0, i, w, depth),
                self.value(&ab.1, i, w, depth),
            ),
            (_, LTy::Real) => self.real(i, w, depth.min(1)),
            _ => self.array(i, w, depth.min(2)),
        }
    }

    /// `let lin u = e in t` of type `body_ty(kind)`, where `t` is pairs, zeros and projections
    /// of `u`: each leaf of `u` placed once (possibly rearranged, some unread), or one placed
    /// twice.
    fn forwarded(&mut self, kind: usize, i: &Var, w: &Var, depth: u32) -> LTerm {
        let (r, a) = (LTy::Real, LTy::array(LTy::Real));
        let u_ty = |c: usize| match (kind, c) {
            (0, _) => LTy::prod(a.clone(), r.clone()),
            (1, 0) => LTy::prod(a.clone(), r.clone()),
            (1, _) => LTy::prod(r.clone(), a.clone()),
            (_, 0) => LTy::prod(r.clone(), LTy::prod(a.clone(), r.clone())),
            (_, 1) => LTy::prod(a.clone(), r.clone()),
            (_, 2) => LTy::prod(LTy::prod(r.clone(), a.clone()), r.clone()),
            (_, 3) => LTy::prod(a.clone(), LTy::prod(r.clone(), r.clone())),
            _ => LTy::prod(r.clone(), a.clone()),
        };
        let c = self.pick(if kind == 2 { 5 } else { 2 });
        let ty = u_ty(c);
        let u = Var::linear("u", ty.clone());
        let e = self.value(&ty, i, Some(w), depth);
        let v = || LTerm::var(&u);
        let (f, sn) = (LTerm::fst, LTerm::snd);
        let t = match (kind, c) {
            (0, _) => f(v()),
            (1, 0) => LTerm::pair(f(v()), sn(v())),
            (1, _) => LTerm::pair(sn(v()), f(v())),
            (_, 0) => LTerm::pair(LTerm::pair(f(v()), f(sn(v()))), sn(sn(v()))),
            (_, 1) => LTerm::pair(LTerm::pair(LTerm::zero(LTy::Real), f(v())), sn(v())),
            (_, 2) if self.pick(2) == 0 => v(),
            (_, 2) => LTerm::pair(LTerm::pair(f(f(v())), sn(f(v()))), sn(v())),
            (_, 3) => LTerm::pair(LTerm::pair(f(sn(v())), f(v())), LTerm::zero(LTy::Real)),
            _ => LTerm::pair(LTerm::pair(f(v()), sn(v())), f(v())),
        };
        LTerm::lin_let(&u, e, t)
    }

    fn literal(&mut self, kind: usize, i: &Var, w: Option<&Var>, depth: u32) -> LTerm {
        match kind {
            0 => self.array(i, w, depth),
            1 => LTerm::pair(self.array(i, w, depth), self.real(i, w, depth)),
            _ => LTerm::pair(
                LTerm::pair(self.real(i, w, depth), self.array(i, w, depth)),
                self.real(i, w, depth),
            ),
        }
    }

    /// `\v ⊸ ..` of type `Real ⊸ body_ty(kind)` or of the uses' type.
    fn term(&mut self) -> (LTy, Term) {
        let kind = self.pick(3);
        let i = Var::fresh("i", Ty::Int);
        let p = Var::linear("p", body_ty(kind));
        let pv = if kind == 0 {
            LTerm::zero(body_ty(kind))
        } else {
            let j = self.j.clone();
            self.literal(kind, &j, None, 1)
        };
        // The uses first, so that they do not all fall on the default choices.
        let cs = Var::linear("cs", LTy::array(body_ty(kind)));
        let summed = self.pick(2) == 0;
        let mut uses = Vec::new();
        if !summed {
            for _ in 0..1 + self.pick(3) {
                uses.push(self.array_use(kind, &cs));
            }
        }
        let n = self.len();
        let body = self.body(kind, &i, &p, 2);
        let span = self.span();
        let build = LTerm::new(L::Build(n, i, body), span);
        let (ty, l) = if summed {
            (body_ty(kind), LTerm::mk(L::Sum(build)))
        } else {
            let (ty, l) = uses
                .into_iter()
                .reduce(|(ta, a), (tb, b)| (LTy::prod(ta, tb), LTerm::pair(a, b)))
                .expect("a use");
            (ty, LTerm::lin_let(&cs, build, l))
        };
        (
            ty,
            Term::lin_lam(&self.v, LTerm::lin_let(&p, pv.clone(), l)),
        )
    }

    /// A use of the linear array `cs` of elements of type `body_ty(kind)`.
    fn array_use(&mut self, kind: usize, cs: &Var) -> (LTy, LTerm) {
        let ty = body_ty(kind);
        let proj = |ty: &LTy, fst: bool| match ty {
            LTy::Prod(p) => Some(if fst { p.0.clone() } else { p.1.clone() }),
            _ => None,
        };
        // A projection path into the element type.
        let mut path = Vec::new();
        let mut t = ty.clone();
        while self.pick(3) > 0 {
            let fst = self.pick(2) == 0;
            match proj(&t, fst) {
                Some(u) => {
                    t = u;
                    path.push(fst);
                }
                None => break,
            }
        }
        let project = |mut l: LTerm| {
            for &fst in &path {
                l = if fst { LTerm::fst(l) } else { LTerm::snd(l) };
            }
            l
        };
        match self.pick(4) {
            0 => (t, project(LTerm::mk(L::Sum(LTerm::var(cs))))),
            1 => {
                let ix = Term::var(&self.k);
                (t, project(LTerm::mk(L::Index(LTerm::var(cs), ix))))
            }
            2 => {
                let q = Var::linear("q", ty.clone());
                let f = Term::lin_lam(&q, project(LTerm::var(&q)));
                (LTy::array(t), LTerm::mk(L::Map(f, LTerm::var(cs))))
            }
            _ => (LTy::array(ty), LTerm::var(cs)),
        }
    }
}

fn body_ty(kind: usize) -> LTy {
    let arr = LTy::array(LTy::Real);
    match kind {
        0 => arr,
        1 => LTy::prod(arr, LTy::Real),
        _ => LTy::prod(LTy::prod(LTy::Real, arr), LTy::Real),
    }
}

#[test]
fn linear_accumulation_and_unzipped_linear_arrays_agree_with_the_reference_evaluator() {
    let strategy = (
        proptest::collection::vec(any::<u8>(), 0..120),
        proptest::collection::vec(-2.0..2.0f64, 0..5),
        -2.0..2.0f64,
        (-1i64..6, -1i64..6, -1i64..7),
        any::<u64>(),
    );
    common::runner(common::cases(1500))
        .run(&strategy, |(choices, xs, c, (j, k, m), seed)| {
            let mut g = LinGen {
                choices: &choices,
                pos: 0,
                xs: Var::fresh("xs", Ty::array(Ty::Real)),
                c: Var::fresh("c", Ty::Real),
                j: Var::fresh("j", Ty::Int),
                k: Var::fresh("k", Ty::Int),
                m: Var::fresh("m", Ty::Int),
                v: Var::linear("v", LTy::Real),
                next_pos: 0,
            };
            let (ty, t) = g.term();
            let params = [g.xs, g.c, g.j, g.k, g.m];
            let args = [
                reals(&xs),
                Value::Real(c),
                Value::Int(j),
                Value::Int(k),
                Value::Int(m),
            ];
            let mut env = Env::new();
            for (p, a) in params.iter().zip(&args) {
                env = env.update(p.id, a.clone());
            }
            let reference = eval(&t, &env);
            let engine = Code::compile(&params, &t).run(&args);
            for x in [Lin::zero(), Lin::real(1.5), Lin::real(c)] {
                let apply =
                    |r: &chad::Result<Value>| r.clone().and_then(|f| f.expect_lin_fun().apply(&x));
                same_lin(&ty, &apply(&reference), &apply(&engine), seed)
                    .map_err(|e| TestCaseError::fail(format!("at {x:?}: {e}\nin {t}")))?;
            }
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{e}"));
}

// ----- flat runs of scalar let bindings -----

/// Random long let chains of scalar work, the runs the engine compiles to flat code: real
/// bindings (trees of real primitives over literals, including `0`, `-0` and infinities,
/// variables and places, some of which fail), interleaved with bindings that are not flat
/// (integers, pairs, sums over loops whose bodies are scalar chains themselves), then a
/// linear map whose body is a chain of linear-real bindings (`0`, `+`, scaling, variables)
/// mixed with Cartesian scalar bindings and non-flat linear ones (pairs and arrays, with
/// projections and elements of them, which are flat).
/// Variables are used zero, one or several times, inside and outside the runs.
struct ChainGen<'a> {
    choices: &'a [u8],
    pos: usize,
    /// Parameters: `xs : Array Real`, `p : Real × Real`, `c : Real`, `j : Int`.
    xs: Var,
    p: Var,
    c: Var,
    j: Var,
    /// Real variables in scope (parameters included), linear-real ones in scope.
    reals: Vec<Var>,
    lins: Vec<Var>,
    next_pos: u32,
}

impl ChainGen<'_> {
    fn pick(&mut self, n: usize) -> usize {
        let c = self.choices.get(self.pos).map_or_else(
            || (self.pos as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40,
            |&c| c as u64,
        ) as usize;
        self.pos += 1;
        c % n
    }

    fn pos(&mut self) -> u32 {
        self.next_pos += 2;
        self.next_pos
    }

    /// A recent real variable (most uses are of the last few, as in derivative code).
    fn real_var(&mut self) -> Term {
        let n = self.reals.len();
        let back = if self.pick(4) == 0 {
            self.pick(n)
        } else {
            self.pick(n.min(3))
        };
        Term::var(&self.reals[n - 1 - back])
    }

    fn real(&mut self, depth: u32) -> Term {
        let leaf = depth == 0 || self.pick(3) == 0;
        if leaf {
            return match self.pick(7) {
                0 => {
                    let lits = [0.0, -0.0, 0.25, 1.5, -2.0, f64::INFINITY];
                    Term::real(lits[self.pick(lits.len())])
                }
                1 => match self.pick(3) {
                    0 => Term::fst(Term::var(&self.p)),
                    1 => Term::snd(Term::var(&self.p)),
                    _ => {
                        let pos = self.pos();
                        idx(Term::var(&self.xs), Term::var(&self.j), pos)
                    }
                },
                _ => self.real_var(),
            };
        }
        match self.pick(8) {
            0 => call(
                ["sqrt", "sin", "neg", "exp"][self.pick(4)],
                vec![self.real(depth - 1)],
            ),
            7 => {
                // The shapes of derivative code over a recent variable (read again nearby):
                // `-sin v`, `v * (1 - v)`, `1 - v * v`, `sin v`.
                let v = self.real_var();
                let one = || Term::real(1.0);
                match self.pick(4) {
                    0 => call("neg", vec![call("sin", vec![v])]),
                    1 => call("mul", vec![v.clone(), call("sub", vec![one(), v])]),
                    2 => call("sub", vec![one(), call("mul", vec![v.clone(), v])]),
                    _ => call("sin", vec![v]),
                }
            }
            k => {
                let name = ["add", "mul", "sub", "div", "max", "add"][k - 1];
                let a = self.real(depth - 1);
                let b = self.real(depth - 1);
                call(name, vec![a, b])
            }
        }
    }

    /// A Cartesian let chain of `n` bindings ending in `body`.
    fn chain(&mut self, n: usize, body: &mut dyn FnMut(&mut Self) -> Term) -> Term {
        if n == 0 {
            return body(self);
        }
        let x = Var::fresh("x", Ty::Real);
        match self.pick(10) {
            0 => {
                // Not flat: a pair, taken apart by places later.
                let (a, b) = (self.real(1), self.real(1));
                let q = Var::fresh("q", Ty::prod(Ty::Real, Ty::Real));
                let old = std::mem::replace(&mut self.p, q.clone());
                let rest = self.chain(n - 1, body);
                self.p = old;
                Term::let_(&q, Term::pair(a, b), rest)
            }
            1 => {
                // Not flat: an integer.
                let k = Var::fresh("k", Ty::Int);
                let e = call(
                    "iadd",
                    vec![
                        Term::var(&self.j),
                        Term::lit(chad::internals::target::term::Lit::Int(1)),
                    ],
                );
                let old = std::mem::replace(&mut self.j, k.clone());
                let rest = self.chain(n - 1, body);
                self.j = old;
                Term::let_(&k, e, rest)
            }
            2 => {
                // Not flat: a sum over a loop whose body is a scalar chain.
                let i = Var::fresh("i", Ty::Int);
                let len = 1 + self.pick(5);
                let inner = self.pick(5);
                let saved = self.reals.len();
                let f = self.chain(inner, &mut |g| g.real(2));
                self.reals.truncate(saved);
                let n_ = Term::lit(chad::internals::target::term::Lit::Int(len as i64));
                let e = call("sum", vec![Term::mk(K::Build(n_, Term::lam(&i, f)))]);
                self.reals.push(x.clone());
                Term::let_(&x, e, self.chain(n - 1, body))
            }
            _ => {
                let depth = self.pick(4) as u32;
                let e = self.real(depth);
                self.reals.push(x.clone());
                Term::let_(&x, e, self.chain(n - 1, body))
            }
        }
    }

    fn lin_var(&mut self) -> LTerm {
        let n = self.lins.len();
        let back = if self.pick(4) == 0 {
            self.pick(n)
        } else {
            self.pick(n.min(3))
        };
        LTerm::var(&self.lins[n - 1 - back])
    }

    fn lin(&mut self, depth: u32) -> LTerm {
        let leaf = depth == 0 || self.pick(3) == 0;
        if leaf {
            return match self.pick(6) {
                0 => LTerm::zero(LTy::Real),
                _ => self.lin_var(),
            };
        }
        match self.pick(2) {
            0 => LTerm::plus(self.lin(depth - 1), self.lin(depth - 1)),
            _ => {
                let k = self.pick(3) as u32;
                let c = self.real(k);
                LTerm::scale(c, self.lin(depth - 1))
            }
        }
    }

    /// A linear let chain of `n` bindings, ending in a pair of recent linear reals.
    fn lin_chain(&mut self, n: usize) -> LTerm {
        if n == 0 {
            return LTerm::pair(self.lin(1), self.lin(1));
        }
        match self.pick(9) {
            8 => {
                // A linear array (not flat) and an element of it (flat), at the index `j`
                // (out of range when it is -1: the run fails there) or a literal (in range or
                // past the end).
                let a = Var::linear("a", LTy::array(LTy::Real));
                let d = Var::linear("d", LTy::Real);
                let arr = if self.pick(2) == 0 {
                    LTerm::mk(L::Replicate(
                        Term::lit(chad::internals::target::term::Lit::Int(2)),
                        self.lin(1),
                    ))
                } else {
                    // Distinct elements: `[l, l', 0]`.
                    let three = || Term::lit(chad::internals::target::term::Lit::Int(3));
                    let at = |k| Term::lit(chad::internals::target::term::Lit::Int(k));
                    let (x, y) = (self.lin(1), self.lin(1));
                    LTerm::plus(
                        LTerm::mk(L::OneHot(three(), at(0), x)),
                        LTerm::mk(L::OneHot(three(), at(1), y)),
                    )
                };
                let i = if self.pick(2) == 0 {
                    Term::var(&self.j)
                } else {
                    // A literal, sometimes past the end (the element is zero).
                    let k = [0, 1, 1, 2, 5][self.pick(5)];
                    Term::lit(chad::internals::target::term::Lit::Int(k))
                };
                let elem = LTerm::mk(L::Index(LTerm::var(&a), i));
                let elem = if self.pick(2) == 0 {
                    elem
                } else {
                    LTerm::scale(self.real(1), elem)
                };
                self.lins.push(d.clone());
                LTerm::lin_let(&a, arr, LTerm::lin_let(&d, elem, self.lin_chain(n - 1)))
            }
            0 => {
                // A linear pair (not flat) and a projection out of it (a linear place, flat).
                let q = Var::linear("q", LTy::prod(LTy::Real, LTy::Real));
                let d = Var::linear("d", LTy::Real);
                let pair = LTerm::pair(self.lin(1), self.lin(1));
                let proj = if self.pick(2) == 0 {
                    LTerm::fst(LTerm::var(&q))
                } else {
                    LTerm::snd(LTerm::var(&q))
                };
                self.lins.push(d.clone());
                LTerm::lin_let(&q, pair, LTerm::lin_let(&d, proj, self.lin_chain(n - 1)))
            }
            1 => {
                let x = Var::fresh("y", Ty::Real);
                let k = self.pick(3) as u32;
                let e = self.real(k);
                self.reals.push(x.clone());
                LTerm::let_(&x, e, self.lin_chain(n - 1))
            }
            _ => {
                let d = Var::linear("d", LTy::Real);
                let k = self.pick(4) as u32;
                let e = self.lin(k);
                self.lins.push(d.clone());
                LTerm::lin_let(&d, e, self.lin_chain(n - 1))
            }
        }
    }

    /// The whole program: a Cartesian chain, then `(x, \v ⊸ linear chain)`.
    fn term(&mut self, n: usize, m: usize) -> Term {
        self.chain(n, &mut |g| {
            let v = Var::linear("v", LTy::Real);
            g.lins.push(v.clone());
            let x = g.real_var();
            let l = g.lin_chain(m);
            Term::pair(x, Term::lin_lam(&v, l))
        })
    }
}

#[test]
fn flat_scalar_runs_agree_with_the_reference_evaluator() {
    let strategy = (
        proptest::collection::vec(any::<u8>(), 0..400),
        (5usize..60, 1usize..40),
        proptest::collection::vec(-2.0..2.0f64, 0..3),
        (-2.0..2.0f64, -2.0..2.0f64, -2.0..2.0f64),
        -1i64..3,
    );
    common::runner(common::cases(600))
        .run(&strategy, |(choices, (n, m), xs, (a, b, c), j)| {
            let mut g = ChainGen {
                choices: &choices,
                pos: 0,
                xs: Var::fresh("xs", Ty::array(Ty::Real)),
                p: Var::fresh("p", Ty::prod(Ty::Real, Ty::Real)),
                c: Var::fresh("c", Ty::Real),
                j: Var::fresh("j", Ty::Int),
                reals: Vec::new(),
                lins: Vec::new(),
                next_pos: 0,
            };
            g.reals.push(g.c.clone());
            let t = g.term(n, m);
            let params = [g.xs, g.p, g.c, g.j];
            let args = [
                reals(&xs),
                Value::pair(Value::Real(a), Value::Real(b)),
                Value::Real(c),
                Value::Int(j),
            ];
            let mut env = Env::new();
            for (p, a) in params.iter().zip(&args) {
                env = env.update(p.id, a.clone());
            }
            let reference = eval(&t, &env);
            let engine = Code::compile(&params, &t).run(&args);
            let probes = [
                Lin::zero(),
                Lin::real(1.5),
                Lin::real(0.0),
                Lin::real(-0.75),
            ];
            same_exactly(&reference, &engine, &probes)
                .map_err(|e| TestCaseError::fail(format!("{e}\nin {t}")))
        })
        .unwrap_or_else(|e| panic!("{e}"));
}

// ----- flat loops: lsum (lbuild ..) and unzipped lbuild of tuples of linear reals -----

/// Random loops of the shape the engine runs as one flat loop: `lsum (lbuild n (\i -> body))`
/// and `let lin cs = lbuild n (\i -> body) in uses`, whose body is a chain of real and
/// linear-real bindings ending in a tuple of linear reals (or literal zeros). The bindings read
/// what the loop hoists (variables bound outside it, projections of them: `fst p`, `snd q`),
/// elements at the loop's index of arrays bound outside (`xs ! i`, `ds ! i`; out of range when
/// the length is the parameter `m`) and at other indices (`xs ! j`), literals including `-0`
/// and infinity. The uses sum, index or map columns out, or need the whole array; sometimes a
/// binding that is not flat keeps the loop on the general path, for comparison.
struct LoopGen<'a> {
    choices: &'a [u8],
    pos: usize,
    /// Parameters: `xs : Array Real`, `p : Real × Real`, `c : Real`, `j, k, m : Int`.
    xs: Var,
    p: Var,
    c: Var,
    j: Var,
    k: Var,
    m: Var,
    /// `v : Real` (the argument), `q : (Real, Real)`, `ds : Array Real` (linear, outside).
    v: Var,
    q: Var,
    ds: Var,
    /// Real and linear-real variables in scope in the loop body.
    reals: Vec<Var>,
    lins: Vec<Var>,
    /// Integer variables bound in the body.
    ints: Vec<Var>,
    next_pos: u32,
}

impl LoopGen<'_> {
    fn pick(&mut self, n: usize) -> usize {
        let c = self.choices.get(self.pos).map_or_else(
            || (self.pos as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40,
            |&c| c as u64,
        ) as usize;
        self.pos += 1;
        c % n
    }

    fn pos(&mut self) -> u32 {
        self.next_pos += 2;
        self.next_pos
    }

    fn real(&mut self, i: &Var, depth: u32) -> Term {
        if depth == 0 || self.pick(3) == 0 {
            return match self.pick(8) {
                0 => {
                    let lits = [0.0, -0.0, 0.25, 1.5, -2.0, f64::INFINITY];
                    Term::real(lits[self.pick(lits.len())])
                }
                1 => Term::fst(Term::var(&self.p)),
                2 => Term::snd(Term::var(&self.p)),
                3 | 4 => {
                    let pos = self.pos();
                    idx(Term::var(&self.xs), Term::var(i), pos)
                }
                5 => {
                    let pos = self.pos();
                    let ix = if self.pick(2) == 0 {
                        Term::var(&self.j)
                    } else {
                        // A computed index (`xs ! (i + 1)`, `xs ! t`).
                        self.int(i, 2)
                    };
                    idx(Term::var(&self.xs), ix, pos)
                }
                _ => {
                    let n = self.reals.len();
                    let back = self.pick(n.min(3));
                    Term::var(&self.reals[n - 1 - back])
                }
            };
        }
        match self.pick(7) {
            0 => call(
                ["sqrt", "sin", "neg", "exp"][self.pick(4)],
                vec![self.real(i, depth - 1)],
            ),
            k => {
                let name = ["add", "mul", "sub", "div", "max", "mul"][k - 1];
                let a = self.real(i, depth - 1);
                let b = self.real(i, depth - 1);
                call(name, vec![a, b])
            }
        }
    }

    fn lin(&mut self, i: &Var, depth: u32) -> LTerm {
        if depth == 0 || self.pick(3) == 0 {
            return match self.pick(8) {
                0 => LTerm::zero(LTy::Real),
                1 => LTerm::fst(LTerm::var(&self.q)),
                2 => LTerm::snd(LTerm::var(&self.q)),
                3 => LTerm::mk(L::Index(LTerm::var(&self.ds), Term::var(i))),
                4 => LTerm::mk(L::Index(LTerm::var(&self.ds), Term::var(&self.j))),
                _ => {
                    let n = self.lins.len();
                    let back = self.pick(n.min(3));
                    LTerm::var(&self.lins[n - 1 - back])
                }
            };
        }
        match self.pick(2) {
            0 => LTerm::plus(self.lin(i, depth - 1), self.lin(i, depth - 1)),
            _ => {
                let d = self.pick(3) as u32;
                let c = self.real(i, d);
                LTerm::scale(c, self.lin(i, depth - 1))
            }
        }
    }

    /// An integer: literals (one that overflows), the index, the parameters, integers bound in
    /// the body, a length, primitives over them (which may overflow or divide by zero), and a
    /// term the loop compiles on its own (`fst (i, j)`).
    fn int(&mut self, i: &Var, depth: u32) -> Term {
        if depth == 0 || self.pick(3) == 0 {
            return match self.pick(9) {
                0 => {
                    let lits = [-1, 0, 1, 2, 3, i64::MAX];
                    let x = lits[self.pick(lits.len())];
                    Term::lit(chad::internals::target::term::Lit::Int(x))
                }
                1 | 2 => Term::var(i),
                3 => Term::var(&self.j),
                4 => Term::var(&self.m),
                5 => length(Term::var(&self.xs)),
                6 | 7 if !self.ints.is_empty() => {
                    let n = self.ints.len();
                    let back = self.pick(n.min(3));
                    Term::var(&self.ints[n - 1 - back])
                }
                6 | 7 => Term::var(i),
                _ => Term::fst(Term::pair(Term::var(i), Term::var(&self.k))),
            };
        }
        let name = ["iadd", "isub", "imul", "idiv", "iadd", "isub"][self.pick(6)];
        let a = self.int(i, depth - 1);
        let b = self.int(i, depth - 1);
        let reg = chad::internals::prim::Registry::builtin();
        let op = reg.get(name).expect("a builtin").clone();
        let pos = self.pos();
        let span = chad::Span {
            start: pos,
            end: pos + 1,
        };
        Term::new(K::Prim(op, vec![a, b]), span)
    }

    /// A sum of `at_least` or more one-hots of linear reals (`onehot n t v`, at computed
    /// lengths and indices, sometimes out of range), sometimes with a zero among them.
    fn hots(&mut self, i: &Var, at_least: usize) -> LTerm {
        let arr = LTy::array(LTy::Real);
        let count = at_least + self.pick(3);
        let mut acc: Option<LTerm> = None;
        for _ in 0..count {
            let n = match self.pick(4) {
                0 => Term::var(&self.m),
                1 => Term::lit(chad::internals::target::term::Lit::Int(3)),
                2 => self.int(i, 1),
                _ => length(Term::var(&self.xs)),
            };
            let ix = self.int(i, 2);
            let d = self.pick(3) as u32;
            let v = self.lin(i, d);
            let pos = self.pos();
            let span = chad::Span {
                start: pos,
                end: pos + 1,
            };
            let mut h = LTerm::new(L::OneHot(n, ix, v), span);
            if self.pick(6) == 0 {
                h = LTerm::plus(LTerm::zero(arr.clone()), h);
            }
            acc = Some(match acc {
                None => h,
                Some(a) => LTerm::plus(a, h),
            });
        }
        acc.expect("a one-hot")
    }

    /// A leaf of the body's tuple: a linear real, sometimes a literal zero.
    fn leaf(&mut self, i: &Var) -> LTerm {
        if self.pick(5) == 0 {
            LTerm::zero(LTy::Real)
        } else {
            let d = self.pick(3) as u32;
            self.lin(i, d)
        }
    }

    /// The tuple ending the body, of type `tuple_ty(kind)`.
    fn tuple(&mut self, kind: usize, i: &Var) -> LTerm {
        match kind {
            0 => self.leaf(i),
            1 => LTerm::pair(self.leaf(i), self.leaf(i)),
            3 => self.hots(i, 1),
            4 => {
                let a = self.leaf(i);
                LTerm::pair(a, self.hots(i, 1))
            }
            _ => {
                let a = if self.pick(5) == 0 {
                    LTerm::zero(LTy::prod(LTy::Real, LTy::Real))
                } else {
                    LTerm::pair(self.leaf(i), self.leaf(i))
                };
                LTerm::pair(a, self.leaf(i))
            }
        }
    }

    /// A loop body: `n` bindings, then the tuple.
    fn body(&mut self, n: usize, kind: usize, i: &Var) -> LTerm {
        if n == 0 {
            return self.tuple(kind, i);
        }
        match self.pick(9) {
            0 => {
                // Not flat: a linear pair, taken apart by a projection.
                let z = Var::linear("z", LTy::prod(LTy::Real, LTy::Real));
                let d = Var::linear("d", LTy::Real);
                let pair = LTerm::pair(self.lin(i, 1), self.lin(i, 1));
                self.lins.push(d.clone());
                let rest = self.body(n - 1, kind, i);
                LTerm::lin_let(
                    &z,
                    pair,
                    LTerm::lin_let(&d, LTerm::snd(LTerm::var(&z)), rest),
                )
            }
            1..=3 => {
                let x = Var::fresh("a", Ty::Real);
                let d = self.pick(3) as u32;
                let e = self.real(i, d);
                self.reals.push(x.clone());
                LTerm::let_(&x, e, self.body(n - 1, kind, i))
            }
            4 => {
                // An integer binding (`let i_1 = i + 1`, a packed index).
                let t = Var::fresh("t", Ty::Int);
                let d = self.pick(3) as u32;
                let e = self.int(i, d);
                self.ints.push(t.clone());
                LTerm::let_(&t, e, self.body(n - 1, kind, i))
            }
            _ => {
                let u = Var::linear("w", LTy::Real);
                let d = self.pick(4) as u32;
                let e = self.lin(i, d);
                self.lins.push(u.clone());
                LTerm::lin_let(&u, e, self.body(n - 1, kind, i))
            }
        }
    }

    fn len(&mut self) -> Term {
        match self.pick(5) {
            0 => Term::var(&self.m),
            _ => length(Term::var(&self.xs)),
        }
    }

    /// A use of `cs : Array (tuple_ty(kind))`, and its type.
    fn array_use(&mut self, kind: usize, cs: &Var) -> (LTy, LTerm) {
        let ty = tuple_ty(kind);
        let mut path = Vec::new();
        let mut t = ty.clone();
        while self.pick(3) > 0 {
            let fst = self.pick(2) == 0;
            match &t {
                LTy::Prod(p) => {
                    t = if fst { p.0.clone() } else { p.1.clone() };
                    path.push(fst);
                }
                _ => break,
            }
        }
        let project = |mut l: LTerm| {
            for &fst in &path {
                l = if fst { LTerm::fst(l) } else { LTerm::snd(l) };
            }
            l
        };
        match self.pick(7) {
            0..=2 => (t, project(LTerm::mk(L::Sum(LTerm::var(cs))))),
            3 => {
                let ix = Term::var(&self.k);
                (t, project(LTerm::mk(L::Index(LTerm::var(cs), ix))))
            }
            4 | 5 => {
                let r = Var::linear("r", ty.clone());
                let f = Term::lin_lam(&r, project(LTerm::var(&r)));
                (LTy::array(t), LTerm::mk(L::Map(f, LTerm::var(cs))))
            }
            _ => (LTy::array(ty), LTerm::var(cs)),
        }
    }

    /// `\v ⊸ let lin q = .. in let lin ds = .. in loop`, and the loop's type; sometimes,
    /// instead of the loop, a chain of bindings ending in a sum of two or more one-hots.
    fn term(&mut self) -> (LTy, Term) {
        let kind = self.pick(5);
        let i = Var::fresh("i", Ty::Int);
        self.reals.push(self.c.clone());
        self.lins.push(self.v.clone());
        if self.pick(6) == 0 {
            let steps = self.pick(4);
            let j = self.j.clone();
            let mut body = self.hots(&j, 2);
            for _ in 0..steps {
                body = match self.pick(2) {
                    0 => {
                        let t = Var::fresh("t", Ty::Int);
                        let e = self.int(&j, 2);
                        LTerm::let_(&t, e, body)
                    }
                    _ => {
                        let x = Var::fresh("a", Ty::Real);
                        let e = self.real(&j, 2);
                        LTerm::let_(&x, e, body)
                    }
                };
            }
            let l = self.outside(body);
            return (LTy::array(LTy::Real), l);
        }
        let summed = self.pick(3) == 0;
        let cs = Var::linear("cs", LTy::array(tuple_ty(kind)));
        let mut uses = Vec::new();
        if !summed {
            for _ in 0..1 + self.pick(3) {
                uses.push(self.array_use(kind, &cs));
            }
        }
        let n = self.len();
        let steps = self.pick(6);
        let body = self.body(steps, kind, &i);
        let span = chad::Span {
            start: self.pos(),
            end: self.next_pos + 1,
        };
        let build = LTerm::new(L::Build(n, i, body), span);
        let (ty, l) = if summed {
            (tuple_ty(kind), LTerm::mk(L::Sum(build)))
        } else {
            let (ty, l) = uses
                .into_iter()
                .reduce(|(ta, a), (tb, b)| (LTy::prod(ta, tb), LTerm::pair(a, b)))
                .expect("a use");
            (ty, LTerm::lin_let(&cs, build, l))
        };
        // The linear pair and array the loop reads, bound outside it.
        let v = LTerm::var(&self.v);
        let qv = match self.pick(3) {
            0 => LTerm::zero(LTy::prod(LTy::Real, LTy::Real)),
            1 => LTerm::pair(LTerm::zero(LTy::Real), v.clone()),
            _ => LTerm::pair(v.clone(), LTerm::scale(Term::var(&self.c), v.clone())),
        };
        let t = Var::fresh("t", Ty::Int);
        let dv = match self.pick(4) {
            0 => LTerm::zero(LTy::array(LTy::Real)),
            1 => LTerm::mk(L::Replicate(
                Term::lit(chad::internals::target::term::Lit::Int(2)),
                v.clone(),
            )),
            _ => {
                let pos = self.pos();
                let e = idx(Term::var(&self.xs), Term::var(&t), pos);
                LTerm::mk(L::Build(
                    length(Term::var(&self.xs)),
                    t,
                    LTerm::scale(e, v.clone()),
                ))
            }
        };
        let l = LTerm::lin_let(&self.q, qv, LTerm::lin_let(&self.ds, dv, l));
        (ty, Term::lin_lam(&self.v, l))
    }

    /// `\v ⊸ let lin q = .. in let lin ds = .. in l` (as [`LoopGen::term`]'s).
    fn outside(&mut self, l: LTerm) -> Term {
        let v = LTerm::var(&self.v);
        let qv = LTerm::pair(v.clone(), LTerm::scale(Term::var(&self.c), v.clone()));
        let dv = LTerm::mk(L::Replicate(length(Term::var(&self.xs)), v));
        let l = LTerm::lin_let(&self.q, qv, LTerm::lin_let(&self.ds, dv, l));
        Term::lin_lam(&self.v, l)
    }
}

fn tuple_ty(kind: usize) -> LTy {
    match kind {
        0 => LTy::Real,
        1 => LTy::prod(LTy::Real, LTy::Real),
        3 => LTy::array(LTy::Real),
        4 => LTy::prod(LTy::Real, LTy::array(LTy::Real)),
        _ => LTy::prod(LTy::prod(LTy::Real, LTy::Real), LTy::Real),
    }
}

#[test]
fn flat_loops_agree_with_the_reference_evaluator() {
    let strategy = (
        proptest::collection::vec(any::<u8>(), 0..160),
        proptest::collection::vec(-2.0..2.0f64, 0..5),
        (-2.0..2.0f64, -2.0..2.0f64, -2.0..2.0f64),
        (-1i64..6, -1i64..6, -1i64..7),
        any::<u64>(),
    );
    common::runner(common::cases(1500))
        .run(&strategy, |(choices, xs, (a, b, c), (j, k, m), seed)| {
            let mut g = LoopGen {
                choices: &choices,
                pos: 0,
                xs: Var::fresh("xs", Ty::array(Ty::Real)),
                p: Var::fresh("p", Ty::prod(Ty::Real, Ty::Real)),
                c: Var::fresh("c", Ty::Real),
                j: Var::fresh("j", Ty::Int),
                k: Var::fresh("k", Ty::Int),
                m: Var::fresh("m", Ty::Int),
                v: Var::linear("v", LTy::Real),
                q: Var::linear("q", LTy::prod(LTy::Real, LTy::Real)),
                ds: Var::linear("ds", LTy::array(LTy::Real)),
                reals: Vec::new(),
                lins: Vec::new(),
                ints: Vec::new(),
                next_pos: 0,
            };
            let (ty, t) = g.term();
            let params = [g.xs, g.p, g.c, g.j, g.k, g.m];
            let args = [
                reals(&xs),
                Value::pair(Value::Real(a), Value::Real(b)),
                Value::Real(c),
                Value::Int(j),
                Value::Int(k),
                Value::Int(m),
            ];
            let mut env = Env::new();
            for (p, a) in params.iter().zip(&args) {
                env = env.update(p.id, a.clone());
            }
            let reference = eval(&t, &env);
            let engine = Code::compile(&params, &t).run(&args);
            for x in [Lin::zero(), Lin::real(1.5), Lin::real(-0.0), Lin::real(c)] {
                let apply =
                    |r: &chad::Result<Value>| r.clone().and_then(|f| f.expect_lin_fun().apply(&x));
                same_lin(&ty, &apply(&reference), &apply(&engine), seed)
                    .map_err(|e| TestCaseError::fail(format!("at {x:?}: {e}\nin {t}")))?;
            }
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{e}"));
}

// ----- a lone deep linear expression -----

/// `\p ⊸ e` where `e` nests one scaling or sum per step, as forward mode of a long chain of
/// products does when every line's tangent is used once (`2 * (x * (0.5 / y * (.. snd p)))`):
/// the engine runs a big one as one flat run. Its values, zeros included, are the reference
/// evaluator's.
#[test]
fn a_lone_deep_linear_expression_agrees_with_the_reference_evaluator() {
    let strategy = (
        proptest::collection::vec((0usize..5, -2.0f64..2.0), 1..90),
        -2.0f64..2.0,
        -2.0f64..2.0,
        -2.0f64..2.0,
        any::<bool>(),
    );
    common::runner(common::cases(300))
        .run(&strategy, |(steps, x0, a, b, zero_first)| {
            let x = Var::fresh("x", Ty::Real);
            let p = Var::linear("p", LTy::prod(LTy::Real, LTy::Real));
            let lp = || LTerm::var(&p);
            let mut e = LTerm::snd(lp());
            for (k, c) in &steps {
                let c = if *k == 4 { 0.0 } else { *c };
                e = match k {
                    0 => LTerm::scale(Term::real(c), e),
                    1 => LTerm::scale(
                        Term::prim(
                            &chad::internals::prim::op("mul"),
                            vec![Term::var(&x), Term::real(c)],
                        ),
                        e,
                    ),
                    2 => LTerm::plus(e, LTerm::scale(Term::real(c), LTerm::fst(lp()))),
                    3 => LTerm::plus(LTerm::scale(Term::var(&x), LTerm::snd(lp())), e),
                    _ => LTerm::scale(Term::real(c), e),
                };
            }
            let term = Term::lin_lam(&p, e);
            let arg = Lin::pair(
                if zero_first {
                    Lin::zero()
                } else {
                    Lin::real(a)
                },
                Lin::real(b),
            );
            let mut env = Env::new();
            env.insert(x.id, Value::Real(x0));
            let reference = eval(&term, &env).and_then(|f| f.expect_lin_fun().apply(&arg));
            let engine = Code::compile(std::slice::from_ref(&x), &term)
                .run(&[Value::Real(x0)])
                .and_then(|f| f.expect_lin_fun().apply(&arg));
            let (r, g) = (reference.unwrap(), engine.unwrap());
            prop_assert_eq!(r.to_real().to_bits(), g.to_real().to_bits(), "{}", term);
            prop_assert_eq!(r.is_zero(), g.is_zero(), "{}", term);
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{e}"));
}

/// A lone real expression of 32 nodes or more with no `let`s, as the primal of a written-out
/// index chain (`xs ! 0 + xs ! 1 + ..`), is one flat run: its value (bit for bit) and its
/// errors (the first out-of-range index, at its position) are the reference evaluator's.
#[test]
fn a_lone_deep_real_expression_agrees_with_the_reference_evaluator() {
    let strategy = (
        proptest::collection::vec((0usize..6, -2.0f64..2.0, 0i64..6), 1..90),
        proptest::collection::vec(-2.0f64..2.0, 0..6),
        -2.0f64..2.0,
    );
    common::runner(common::cases(300))
        .run(&strategy, |(steps, xs, x0)| {
            let x = Var::fresh("x", Ty::Real);
            let a = Var::fresh("xs", Ty::array(Ty::Real));
            let mut e = Term::var(&x);
            for (n, (k, c, j)) in steps.iter().enumerate() {
                let pos = 2 * n as u32 + 1;
                let at = || {
                    idx(
                        Term::var(&a),
                        Term::lit(chad::internals::target::term::Lit::Int(*j)),
                        pos,
                    )
                };
                e = match k {
                    0 | 1 => call("add", vec![e, at()]),
                    2 => call("mul", vec![Term::real(*c), e]),
                    3 => call("sub", vec![at(), e]),
                    4 => call("sin", vec![e]),
                    _ => call("div", vec![e, Term::var(&x)]),
                };
            }
            // As a component of a pair (a derivative's primal), so the term is compiled whole.
            let term = Term::pair(e, Term::var(&x));
            let mut env = Env::new();
            env.insert(x.id, Value::Real(x0));
            env.insert(a.id, reals(&xs));
            let reference = eval(&term, &env);
            let engine =
                Code::compile(&[x.clone(), a.clone()], &term).run(&[Value::Real(x0), reals(&xs)]);
            match (&reference, &engine) {
                (Ok(r), Ok(g)) => {
                    let first = |v: &Value| v.clone().expect_pair().0.clone().expect_real();
                    prop_assert_eq!(first(r).to_bits(), first(g).to_bits());
                }
                (Err(r), Err(g)) => {
                    prop_assert_eq!(r.message(), g.message());
                    prop_assert_eq!(r.span(), g.span());
                }
                _ => prop_assert!(false, "reference {:?}, engine {:?}", reference, engine),
            }
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{e}"));
}
