//! The IR (`chad::internals::ir`): programs lowered, checked and run on the reference interpreter,
//! against the execution engine running the same simplified code (values to 1e-12 relative,
//! derivatives to 1e-9; errors with the same message and position).

mod common;

use chad::Value;
use chad::internals::ad::{Jvp, Vjp};
use chad::internals::bench::{Rng, random_tangent};
use chad::internals::ir::compile::Compiled;
use chad::internals::optimize::optimize;
use chad::internals::random::{Config, TestProgram};
use chad::internals::simplify::simplify;
use chad::internals::target::embed;
use chad::internals::target::engine::Code;
use chad::internals::types::Type;
use proptest::test_runner::TestCaseError;

fn load(path: &str) -> chad::internals::source::term::Program {
    let text = std::fs::read_to_string(path).unwrap();
    chad::internals::source::load(&text, &chad::internals::prim::Registry::builtin()).unwrap()
}

/// `a` and `b` agree to `tol` relative (per real), with the same shape.
fn close(a: &Value, b: &Value, tol: f64) -> Result<(), String> {
    match (a, b) {
        (Value::Real(x), Value::Real(y)) => {
            let scale = x.abs().max(y.abs()).max(1.0);
            if x == y || (x - y).abs() <= tol * scale || (x.is_nan() && y.is_nan()) {
                Ok(())
            } else {
                Err(format!("{x} differs from {y}"))
            }
        }
        (Value::Pair(p), Value::Pair(q)) => {
            close(&p.0, &q.0, tol)?;
            close(&p.1, &q.1, tol)
        }
        (Value::Inl(x), Value::Inl(y)) | (Value::Inr(x), Value::Inr(y)) => close(x, y, tol),
        (Value::RealArray(_) | Value::Array(_), Value::RealArray(_) | Value::Array(_)) => {
            let (xs, ys) = (a.array_items(), b.array_items());
            if xs.len() != ys.len() {
                return Err(format!("lengths {} and {}", xs.len(), ys.len()));
            }
            for (x, y) in xs.iter().zip(&ys) {
                close(x, y, tol)?;
            }
            Ok(())
        }
        _ if a.same(b) == Some(true) => Ok(()),
        _ => Err(format!("{a} differs from {b}")),
    }
}

fn same_result<T>(
    what: &str,
    ir: &chad::Result<T>,
    engine: &chad::Result<T>,
    cmp: impl Fn(&T, &T) -> Result<(), String>,
) -> Result<(), String> {
    match (ir, engine) {
        (Ok(x), Ok(y)) => cmp(x, y).map_err(|e| format!("{what}: {e}")),
        (Err(x), Err(y)) if x.message() == y.message() && x.span() == y.span() => Ok(()),
        (Err(x), Err(y)) => Err(format!("{what}: error `{x}` versus `{y}`")),
        (Ok(_), Err(e)) => Err(format!("{what}: the IR ran, the engine failed with `{e}`")),
        (Err(e), Ok(_)) => Err(format!("{what}: the IR failed with `{e}`, the engine ran")),
    }
}

/// The IR agrees with the engine on the primal and, where AD applies, on one JVP and one VJP
/// at random (co)tangents. Returns whether the primal ran.
fn agrees(p: &TestProgram, seed: u64) -> Result<bool, String> {
    let entry = &p.entry;
    let mut ad = chad::internals::ad::check_supported(&entry.body).is_ok()
        && entry.body.ty.is_first_order()
        && entry.params.iter().all(|x| x.ty.is_first_order());
    let parts = chad::internals::ir::compile::Parts {
        jvp: ad,
        vjp: ad,
        required: true,
    };
    let c = match Compiled::with_parts(entry, parts) {
        // A recursive definition's derivatives are not lowered (note 10): its primal is.
        Err(e) if e.message().contains("derivatives of recursive definitions") => {
            ad = false;
            let primal = chad::internals::ir::compile::Parts {
                jvp: false,
                vjp: false,
                required: true,
            };
            Compiled::with_parts(entry, primal)
        }
        c => c,
    }
    .map_err(|e| format!("lowering: {e}"))?;
    chad::internals::ir::check::check(&c.program)
        .map_err(|e| format!("IR check: {e}\n{}", c.program))?;
    let optimized = optimize(entry);
    let (params, body) = embed::entry(&optimized);
    let engine = Code::compile(&params, &simplify(&body)).run(&p.inputs);
    let ir = c.eval(&p.inputs);
    same_result("primal", &ir, &engine, |a, b| close(a, b, 1e-12))?;
    if !ad {
        return Ok(ir.is_ok());
    }
    let Ok(y) = &engine else { return Ok(false) };
    let mut rng = Rng::new(seed);
    let tangents = tangents_for(entry, &p.inputs, &mut rng);
    let jvp = Jvp::new(&optimized).unwrap().map_body(simplify);
    let e = jvp.jvp(&p.inputs, &tangents);
    let i = c.jvp(&p.inputs, &tangents);
    same_result("jvp", &i, &e, |a, b| {
        close(&a.0, &b.0, 1e-12)?;
        close(&a.1, &b.1, 1e-9)
    })?;
    let ct = match entry.body.ty {
        Type::Real => Value::Real(1.0),
        ref ty => random_tangent(ty, y, &mut rng),
    };
    let vjp = Vjp::new(&optimized).unwrap().map_body(simplify);
    let e = vjp.vjp(&p.inputs, &ct);
    let i = c.vjp(&p.inputs, &ct);
    same_result("vjp", &i, &e, |a, b| {
        close(&a.0, &b.0, 1e-12)?;
        for (x, y) in a.1.iter().zip(&b.1) {
            close(x, y, 1e-9)?;
        }
        Ok(())
    })?;
    Ok(true)
}

fn check(cfg: Config, n: u32) {
    let seed = std::cell::Cell::new(1u64);
    common::check_programs(cfg, n, |p| {
        seed.set(seed.get() + 1);
        agrees(p, seed.get()).map_err(|e| TestCaseError::fail(format!("{e}\nprogram:\n{p:?}")))
    });
}

#[test]
fn the_ir_agrees_with_the_engine_on_random_programs() {
    check(Config::default(), common::cases(300));
}

#[test]
fn the_ir_agrees_on_array_programs() {
    check(
        Config {
            array_bias: true,
            ..Config::default()
        },
        common::cases(200),
    );
}

#[test]
fn the_ir_agrees_on_sum_programs() {
    check(
        Config {
            sum_bias: true,
            ..Config::default()
        },
        common::cases(200),
    );
}

#[test]
fn the_ir_agrees_on_loop_programs() {
    check(
        Config {
            loops: true,
            ..Config::default()
        },
        common::cases(200),
    );
    check(
        Config {
            loops: true,
            array_bias: true,
            depth: 5,
            ..Config::default()
        },
        common::cases(100),
    );
}

#[test]
fn the_ir_agrees_on_recursive_programs() {
    // `def rec`-style fixpoints (structural fuel, non-tail and tree-shaped calls): the primal
    // through the IR's recursive functions.
    check(
        Config {
            recursion: true,
            ..Config::default()
        },
        common::cases(100),
    );
}

#[test]
fn the_ir_agrees_on_deeper_higher_order_programs() {
    check(
        Config {
            depth: 6,
            ..Config::default()
        },
        common::cases(150),
    );
}

#[test]
fn fig2b_primal_and_gradient() {
    let prog = load("examples/fig2b.chad");
    let entry = prog.entry(prog.defs.len() - 1);
    let c = Compiled::new(&entry).unwrap();
    chad::internals::ir::check::check(&c.program).unwrap();
    let args = [Value::Real(2.0), Value::reals(vec![1.0, 2.0, 3.0])];
    assert_eq!(c.eval(&args).unwrap().expect_real(), 12.0);
    let (v, g) = c.grad(&args).unwrap();
    assert_eq!(v.expect_real(), 12.0);
    assert_eq!(g[0].expect_real(), 6.0);
    assert_eq!(g[1].expect_reals(), &[2.0, 2.0, 2.0]);
}

#[test]
fn fig2b_natively() {
    let prog = load("examples/fig2b.chad");
    let entry = prog.entry(prog.defs.len() - 1);
    let c = Compiled::new(&entry).unwrap();
    let n = chad::internals::native::Native::new(c, None, true)
        .unwrap_or_else(|e| panic!("{}", e.render(None)));
    let args = [Value::Real(2.0), Value::reals(vec![1.0, 2.0, 3.0])];
    assert_eq!(n.eval(&args).unwrap().expect_real(), 12.0);
    let (v, g) = n.grad(&args).unwrap();
    assert_eq!(v.expect_real(), 12.0);
    assert_eq!(g[0].expect_real(), 6.0);
    assert_eq!(g[1].expect_reals(), &[2.0, 2.0, 2.0]);
}

/// The native backend (`chad::internals::native`: the IR as Rust, built by rustc and loaded) against the
/// reference interpreter, on random programs compiled into one library: primal, JVP and VJP
/// values, or the same error at the same position.
/// The kinds of random programs the tests compile into one module: plain, array-heavy,
/// sum-heavy, deeper, with loops.
fn module_configs() -> Vec<Config> {
    vec![
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
            depth: 6,
            ..Config::default()
        },
        Config {
            loops: true,
            ..Config::default()
        },
    ]
}

/// `n` random programs of each kind, the same on every run.
fn random_programs(configs: &[Config], n: usize) -> Vec<TestProgram> {
    use proptest::strategy::{Strategy, ValueTree};
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let mut programs = Vec::new();
    for cfg in configs {
        let strategy = chad::internals::random::program(cfg.clone());
        for _ in 0..n {
            programs.push(strategy.new_tree(&mut runner).unwrap().current());
        }
    }
    programs
}

#[test]
fn the_native_backend_agrees_with_the_interpreter_on_random_programs() {
    assert!(
        chad::internals::native::available(),
        "the native backend needs rustc on the path"
    );
    // One library for all of them: rustc's time grows with the count (`CHAD_NATIVE_CASES`).
    let n = std::env::var("CHAD_NATIVE_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60usize);
    let programs = random_programs(&module_configs(), n);
    let entries: Vec<_> = programs.iter().map(|p| p.entry.clone()).collect();
    let parts = chad::internals::ir::compile::Parts {
        jvp: true,
        vjp: true,
        required: false,
    };
    let mut module = chad::internals::ir::compile::Module::new(&entries, parts).unwrap();
    // The longer functions in parts, as a long program's are (`ir::split`; the interpreter
    // runs the same parts, `split_functions_agree_bit_for_bit_with_the_whole_ones` checks
    // them against the whole functions): values, including `mut`s, cross Rust functions.
    let whole = module.program.funcs.len();
    chad::internals::ir::split::split_functions(&mut module.program, 60, 20);
    let made = module.program.funcs.len() - whole;
    assert!(made >= 100, "only {made} parts");
    chad::internals::ir::check::check(&module.program).unwrap();
    let native = chad::internals::native::Native::module(module, None, false)
        .unwrap_or_else(|e| panic!("{}", e.render(None)));
    let mut ran = 0;
    for (k, p) in programs.iter().enumerate() {
        let d = &native.defs[k];
        let prog = &native.program;
        let interp_eval = d
            .args(&p.inputs)
            .and_then(|xs| chad::internals::ir::interp::run(prog, d.primal, xs))
            .map(|v| chad::internals::ir::interp::to_value(&d.entry.body.ty, &v));
        let nat = native.eval_def(k, &p.inputs);
        let fail = |e: String| panic!("{e}\nprogram:\n{p:?}");
        same_result("native primal", &nat, &interp_eval, |a, b| {
            close(a, b, 1e-12)
        })
        .unwrap_or_else(fail);
        let Ok(y) = &interp_eval else { continue };
        ran += 1;
        let mut rng = Rng::new(k as u64 + 7);
        if let Some(f) = d.jvp {
            let tangents = tangents_for(&d.entry, &p.inputs, &mut rng);
            let i = d.context(&p.inputs).and_then(|x| {
                let dx = d.context_tangent(&p.inputs, &tangents)?;
                chad::internals::ir::interp::run(prog, f, vec![x, dx]).map(|r| d.jvp_result(&r))
            });
            let nv = native.jvp_def(k, &p.inputs, &tangents);
            same_result("native jvp", &nv, &i, |a, b| {
                close(&a.0, &b.0, 1e-12)?;
                close(&a.1, &b.1, 1e-12)
            })
            .unwrap_or_else(fail);
        }
        if let Some(f) = d.vjp {
            let ct = match d.entry.body.ty {
                Type::Real => Value::Real(1.0),
                ref ty => random_tangent(ty, y, &mut rng),
            };
            let i = d.context(&p.inputs).and_then(|x| {
                let c = d.cotangent(&ct)?;
                chad::internals::ir::interp::run(prog, f, vec![x, c])
                    .map(|r| d.vjp_result(&p.inputs, &r))
            });
            let nv = native.vjp_def(k, &p.inputs, &ct);
            same_result("native vjp", &nv, &i, |a, b| {
                close(&a.0, &b.0, 1e-12)?;
                for (x, y) in a.1.iter().zip(&b.1) {
                    close(x, y, 1e-12)?;
                }
                Ok(())
            })
            .unwrap_or_else(fail);
        }
    }
    assert!(ran * 2 >= programs.len(), "only {ran} programs ran");

    // Parallel loops: with 3 threads and every eligible `build`/`sum` split (no work bound),
    // every result and error is the sequential one, bit for bit.
    let outputs = |native: &chad::internals::native::Native| -> Vec<String> {
        programs
            .iter()
            .enumerate()
            .map(|(k, p)| {
                let d = &native.defs[k];
                let e = native.eval_def(k, &p.inputs);
                let mut rng = Rng::new(k as u64 + 7);
                let mut out = format!("{e:?}");
                if d.jvp.is_some() {
                    let tangents = tangents_for(&d.entry, &p.inputs, &mut rng);
                    out += &format!("\n{:?}", native.jvp_def(k, &p.inputs, &tangents));
                }
                if let (Some(_), Ok(y)) = (d.vjp, &e) {
                    let ct = match d.entry.body.ty {
                        Type::Real => Value::Real(1.0),
                        ref ty => random_tangent(ty, y, &mut rng),
                    };
                    out += &format!("\n{:?}", native.vjp_def(k, &p.inputs, &ct));
                }
                out
            })
            .collect()
    };
    let sequential = outputs(&native);
    native.set_parallelism(3, 0).unwrap();
    let parallel = outputs(&native);
    for (k, (s, p)) in sequential.iter().zip(&parallel).enumerate() {
        assert_eq!(s, p, "parallel differs on\n{:?}", programs[k]);
    }
}

/// Prints a definition's IR (a debugging aid: `IR_SHOW=file.chad cargo test --test ir -- --ignored show`).
#[test]
#[ignore]
fn show() {
    let path = std::env::var("IR_SHOW").unwrap();
    let prog = load(&path);
    let entry = prog.entry(prog.defs.len() - 1);
    println!("{}", Compiled::new(&entry).unwrap().program);
}

/// A random tangent per argument of `entry` (the native tests' directions).
fn tangents_for(
    entry: &chad::internals::source::term::Entry,
    inputs: &[Value],
    rng: &mut Rng,
) -> Vec<Value> {
    entry
        .params
        .iter()
        .zip(inputs)
        .map(|(x, a)| random_tangent(&x.ty, a, rng))
        .collect()
}

/// `ir::opt::fuse_sums`: Rosenbrock's reverse program needs the primal's `sum (build ..)` and
/// the array's length; the sum is computed without building the array (a `check` of the
/// length in its place), with the closed-form gradient, and a bad length fails in the
/// gradient exactly as in the primal.
#[test]
fn a_summed_build_is_not_materialised_in_reverse_code() {
    let prog = load("benches/programs/rosenbrock.chad");
    let entry = prog.entry(prog.defs.len() - 1);
    let c = Compiled::new(&entry).unwrap();
    chad::internals::ir::check::check(&c.program).unwrap();
    let text = c.program.to_string();
    let vjp = &text[text.find("fn rosenbrock_vjp").expect("a vjp function")..];
    let vjp = &vjp[..vjp[1..].find("\nfn ").map_or(vjp.len(), |k| k + 1)];
    assert!(vjp.contains("check build("), "{vjp}");
    assert!(
        !vjp.contains("= build "),
        "the array is still built:\n{vjp}"
    );
    let xs = [0.5, -1.0, 2.0, 0.3, 1.5];
    let (v, g) = c.grad(&[Value::reals(xs.to_vec())]).unwrap();
    let mut want = vec![0.0; xs.len()];
    let mut value = 0.0;
    for i in 0..xs.len() - 1 {
        let d = xs[i + 1] - xs[i] * xs[i];
        value += 100.0 * d * d + (1.0 - xs[i]) * (1.0 - xs[i]);
        want[i] += -400.0 * xs[i] * d - 2.0 * (1.0 - xs[i]);
        want[i + 1] += 200.0 * d;
    }
    assert!((v.expect_real() - value).abs() <= 1e-12 * value.abs());
    for (g, w) in g[0].expect_reals().iter().zip(&want) {
        assert!((g - w).abs() <= 1e-12 * (1.0 + w.abs()), "{g} against {w}");
    }
    let empty = [Value::reals(vec![])];
    let primal = c.eval(&empty).unwrap_err().render(None);
    let reverse = c.grad(&empty).unwrap_err().render(None);
    assert!(primal.contains("build"), "{primal}");
    assert_eq!(primal, reverse);
}

/// `ir::opt::lone_adds`: forward code reads the tangent of each row `w ! i` in full (a `dot`);
/// lowered, that tangent is materialised into a fresh accumulator receiving one term, a copy
/// of the row per use. The pass binds the row itself: no array accumulator is left in the
/// forward program, whose result is still `Σ_i dw_i · v + w_i · dv`.
#[test]
fn an_accumulator_of_one_term_is_that_term() {
    let src = "def f (w : Array (Array Real)) (v : Array Real) : Real = \
               sum (map (\\row -> dot row v) w)";
    let prog =
        chad::internals::source::load(src, &chad::internals::prim::Registry::builtin()).unwrap();
    let entry = prog.entry(0);
    let c = Compiled::new(&entry).unwrap();
    chad::internals::ir::check::check(&c.program).unwrap();
    let text = c.program.to_string();
    let jvp = &text[text.find("fn f_jvp").expect("a jvp function")..];
    let jvp = &jvp[..jvp[1..].find("\nfn ").map_or(jvp.len(), |k| k + 1)];
    assert!(!jvp.contains("= zero [f64]"), "a copy is left:\n{jvp}");
    let w = vec![vec![0.5, -1.0, 2.0], vec![0.25, 3.0, -0.5]];
    let v = vec![1.5, -2.0, 0.75];
    let dw = vec![vec![0.1, 0.2, -0.3], vec![-0.4, 0.0, 0.6]];
    let dv = vec![0.0, 1.0, -1.0];
    let row = Type::array(Type::Real);
    let arg =
        |m: &Vec<Vec<f64>>| Value::array(&row, m.iter().map(|r| Value::reals(r.clone())).collect());
    let (y, dy) = c
        .jvp(
            &[arg(&w), Value::reals(v.clone())],
            &[arg(&dw), Value::reals(dv.clone())],
        )
        .unwrap();
    let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f64>();
    let want_y: f64 = w.iter().map(|r| dot(r, &v)).sum();
    let want_dy: f64 = w
        .iter()
        .zip(&dw)
        .map(|(r, d)| dot(d, &v) + dot(r, &dv))
        .sum();
    assert!((y.expect_real() - want_y).abs() <= 1e-12 * (1.0 + want_y.abs()));
    assert!(
        (dy.expect_real() - want_dy).abs() <= 1e-12 * (1.0 + want_dy.abs()),
        "{dy:?} against {want_dy}"
    );
}

/// `ir::opt::hoist_invariants`: Rosenbrock's forward program projected the tangent array out
/// of the tangent tuple at every element; the projection (infallible, loop-invariant) now
/// precedes the loop, and the jvp is still the hand-computed `∇f · t`, also where the loop
/// runs zero times (n = 1: the sum is empty and nothing fails).
#[test]
fn loop_invariant_lets_move_before_the_loop() {
    let prog = load("benches/programs/rosenbrock.chad");
    let entry = prog.entry(prog.defs.len() - 1);
    let c = Compiled::new(&entry).unwrap();
    chad::internals::ir::check::check(&c.program).unwrap();
    let text = c.program.to_string();
    let jvp = &text[text.find("fn rosenbrock_jvp").expect("a jvp function")..];
    let jvp = &jvp[..jvp[1..].find("\nfn ").map_or(jvp.len(), |k| k + 1)];
    let tangent = jvp
        .lines()
        .find(|l| l.contains(": [f64] = d_"))
        .expect("the tangent array is projected");
    assert!(
        tangent.starts_with("  let"),
        "the projection is still inside a loop:\n{jvp}"
    );
    let xs = [0.5, -1.0, 2.0, 0.3, 1.5];
    let ts = [1.0, 0.5, -2.0, 0.25, 3.0];
    let (_, dy) = c
        .jvp(&[Value::reals(xs.to_vec())], &[Value::reals(ts.to_vec())])
        .unwrap();
    let mut want = 0.0;
    for i in 0..xs.len() - 1 {
        let d = xs[i + 1] - xs[i] * xs[i];
        want += (-400.0 * xs[i] * d - 2.0 * (1.0 - xs[i])) * ts[i] + 200.0 * d * ts[i + 1];
    }
    assert!(
        (dy.expect_real() - want).abs() <= 1e-12 * (1.0 + want.abs()),
        "{dy:?} against {want}"
    );
    let (y, dy) = c
        .jvp(&[Value::reals(vec![0.7])], &[Value::reals(vec![1.0])])
        .unwrap();
    assert_eq!((y.expect_real(), dy.expect_real()), (0.0, 0.0));
}

/// A source program's IR module (checked), with forward and/or reverse code, and the Rust the
/// backend writes for it.
fn emitted(src: &str, jvp: bool, vjp: bool) -> (chad::internals::ir::compile::Module, String) {
    let prog =
        chad::internals::source::load(src, &chad::internals::prim::Registry::builtin()).unwrap();
    let entries: Vec<_> = (0..prog.defs.len()).map(|k| prog.entry(k)).collect();
    let parts = chad::internals::ir::compile::Parts {
        jvp,
        vjp,
        required: false,
    };
    let module = chad::internals::ir::compile::Module::new(&entries, parts).unwrap();
    chad::internals::ir::check::check(&module.program).unwrap();
    let info = chad::internals::ir::rust::SourceInfo { source: None };
    let text = chad::internals::ir::rust::module(&module.program, &[], &info).unwrap();
    (module, text)
}

/// The emitted Rust function `fn f_{name}` (`name` with its suffix: `rosen_vjp`), up to the
/// next function.
fn emitted_fn<'a>(text: &'a str, name: &str) -> &'a str {
    let f = &text[text
        .find(&format!("fn f_{name}("))
        .unwrap_or_else(|| panic!("no function f_{name}"))..];
    &f[..f[1..].find("\nfn ").map_or(f.len(), |k| k + 1)]
}

/// The module built natively (rustc must be there).
fn built(module: chad::internals::ir::compile::Module) -> chad::internals::native::Native {
    assert!(
        chad::internals::native::available(),
        "the native backend needs rustc"
    );
    chad::internals::native::Native::module(module, None, false)
        .unwrap_or_else(|e| panic!("{}", e.render(None)))
}

/// Two values equal bit for bit (`{:?}` prints the shortest representation that reads back
/// exactly, and tells `-0.0` from `0.0`).
fn same_bits<T: std::fmt::Debug>(a: &T, b: &T) -> Result<(), String> {
    let (a, b) = (format!("{a:?}"), format!("{b:?}"));
    if a == b {
        Ok(())
    } else {
        Err(format!("{a} against {b}"))
    }
}

/// Definition `k`'s native primal against the IR interpreter's, bit for bit, or the same
/// error. Returns whether the native one ran.
fn primal_bit_for_bit(
    native: &chad::internals::native::Native,
    k: usize,
    inputs: &[Value],
) -> Result<bool, String> {
    let d = &native.defs[k];
    let interp = d.args(inputs).and_then(|x| {
        chad::internals::ir::interp::run(&native.program, d.primal, x)
            .map(|v| chad::internals::ir::interp::to_value(&d.entry.body.ty, &v))
    });
    let nat = native.eval_def(k, inputs);
    same_result("native primal", &nat, &interp, same_bits)?;
    Ok(nat.is_ok())
}

/// Definition `k`'s native VJP against the IR interpreter's, bit for bit (`{:?}` prints the
/// shortest representation that reads back exactly), or the same error. Returns whether the
/// native one ran.
fn vjp_bit_for_bit(
    native: &chad::internals::native::Native,
    k: usize,
    inputs: &[Value],
    ct: &Value,
) -> Result<bool, String> {
    let d = &native.defs[k];
    let f = d.vjp.expect("a vjp");
    let interp = d.context(inputs).and_then(|x| {
        let c = d.cotangent(ct)?;
        chad::internals::ir::interp::run(&native.program, f, vec![x, c])
            .map(|r| d.vjp_result(inputs, &r))
    });
    let nat = native.vjp_def(k, inputs, ct);
    same_result("native vjp", &nat, &interp, same_bits)?;
    Ok(nat.is_ok())
}

/// Definition `k`'s native JVP against the IR interpreter's, bit for bit, or the same error.
fn jvp_bit_for_bit(
    native: &chad::internals::native::Native,
    k: usize,
    inputs: &[Value],
    tangents: &[Value],
) -> Result<(), String> {
    let d = &native.defs[k];
    let interp = d.context(inputs).and_then(|x| {
        let dx = d.context_tangent(inputs, tangents)?;
        chad::internals::ir::interp::run(&native.program, d.jvp.expect("a jvp"), vec![x, dx])
            .map(|r| d.jvp_result(&r))
    });
    let nat = native.jvp_def(k, inputs, tangents);
    same_result("native jvp", &nat, &interp, same_bits)
}

/// A real for test data at position `i` (shift `s`): with `special`, `-0.0`, an infinity
/// and NaN at fixed positions modulo 29.
fn special_val(i: usize, s: f64, special: bool) -> f64 {
    match i % 29 {
        7 if special => -0.0,
        13 if special => f64::INFINITY,
        19 if special => f64::NAN,
        _ => ((i as f64 + 1.0) * 0.37 + s).sin(),
    }
}

/// The Rust backend's sliding windows (`Emitter::window` in `ir/rust.rs`): in reverse code of
/// a stencil, `acc[i + k] += ..` for a few constant `k` at the top level of a loop over `i`
/// keeps the elements `i + lo ..= i + hi` in locals, storing the oldest at the end of each
/// iteration. The rewrite fires on each of these programs (offsets {0, 1}, {0, 2} with a gap,
/// {1, 3} after a read that may fail, {0, 1} into an accumulator an earlier loop added to),
/// and the gradients are the interpreter's bit for bit at
/// every size from the empty loop up, with the same error where `ys` is too short.
#[test]
fn sliding_window_accumulators_agree_bit_for_bit() {
    let src = "\
def rosen (xs : Array Real) : Real =
  sum (build (length xs - 1) (\\(i : Int) ->
    let x = xs ! i in
    let d = xs ! (i + 1) - x * x in
    100.0 * d * d + (1.0 - x) * (1.0 - x)))

def gap (xs : Array Real) : Real =
  sum (build (length xs - 2) (\\(i : Int) -> xs ! i * xs ! (i + 2)))

def mixed (xs : Array Real) (ys : Array Real) : Real =
  sum (build (length xs - 3) (\\(i : Int) ->
    (xs ! (i + 1) * ys ! (i + 3)) / (1.0 + xs ! (i + 3) * xs ! (i + 3))))

def both (xs : Array Real) : Real =
  sum (map (\\(x : Real) -> sin x) xs) + sum (build (length xs - 1) (\\(i : Int) -> xs ! i * xs ! (i + 1)))
";
    let (module, text) = emitted(src, false, true);
    for (name, newest) in [
        ("rosen", "_w1: f64 = "),
        ("gap", "_w2: f64 = "),
        ("mixed", "_w2: f64 = "),
        ("both", "_w1: f64 = "),
    ] {
        let f = emitted_fn(&text, &format!("{name}_vjp"));
        assert!(f.contains(newest), "no sliding window in {name}:\n{f}");
    }
    let native = built(module);
    let xs = |n: usize| -> Vec<f64> { (0..n).map(|i| (i as f64 * 0.37).sin() * 1.5).collect() };
    let mut ran = 0;
    for n in [0usize, 1, 2, 3, 4, 5, 8, 37] {
        let mut cases: Vec<(usize, Vec<Value>)> =
            [0, 1, 3].map(|k| (k, vec![Value::reals(xs(n))])).into();
        for m in [n, n.saturating_sub(1)] {
            let ys: Vec<f64> = (0..m).map(|i| 0.5 + i as f64).collect();
            cases.push((2, vec![Value::reals(xs(n)), Value::reals(ys)]));
        }
        for (k, inputs) in cases {
            let ok = vjp_bit_for_bit(&native, k, &inputs, &Value::Real(1.0))
                .unwrap_or_else(|e| panic!("{} at n = {n}: {e}", native.defs[k].entry.name));
            ran += usize::from(ok);
        }
    }
    assert!(ran >= 18, "only {ran} gradients ran");
}

/// The Rust backend's loop versioning on invariant scale factors (`Emitter::for_loop` and
/// `Emitter::invariant_scales` in `ir/rust.rs`): a reverse loop that scales by the output
/// cotangent (the same in every iteration) is emitted twice, the copy without zero tests
/// taken only when the factor is finite and nonzero. It fires on both programs, and the
/// gradients are the interpreter's bit for bit for cotangents that are ordinary, negative,
/// `±0`, `∞` and NaN, and for inputs holding `∞` and NaN (where the strong zero of a zero
/// cotangent must win). The same programs check store-or-accumulate
/// (`Emitter::fresh_fills`): a gradient array that one loop fills element by element is
/// allocated zeroed and stored into, with `-0.0` cotangents stored as the addition gives them;
/// and a local array that is only read is a `Vec` (`centred`).
#[test]
fn versioned_loops_agree_bit_for_bit() {
    let src = "\
def squares (xs : Array Real) : Real = sum (build (length xs) (\\(i : Int) -> xs ! i * xs ! i))

def scaled (xs : Array Real) (y : Real) : Real = sum (map (\\(x : Real) -> x * y + sin x) xs)

def shift (xs : Array Real) : Array Real = map (\\(x : Real) -> x + 1.0) xs

def centred (xs : Array Real) : Real =
  let c = build (length xs) (\\(i : Int) -> xs ! i - 1.0) in
  sum (build (length xs) (\\(i : Int) -> c ! i * c ! (length xs - 1 - i)))
";
    let (module, text) = emitted(src, false, true);
    for name in ["squares", "scaled"] {
        let f = emitted_fn(&text, &format!("{name}_vjp"));
        assert!(
            f.contains(" != 0.0 && ") && f.contains(".is_finite() {"),
            "no versioned loop in {name}:\n{f}"
        );
    }
    // An array built and only read is a plain `Vec` (no shared handle).
    let f = emitted_fn(&text, "centred");
    assert!(
        f.contains(": Vec<f64> = {"),
        "no local Vec in centred:\n{f}"
    );
    // The gradients' arrays are allocated zeroed and stored into, not added to.
    for name in ["squares", "shift"] {
        let f = emitted_fn(&text, &format!("{name}_vjp"));
        assert!(
            f.contains("= vec![0.0; ") && f.contains("as usize] = ") && !f.contains("as usize] +="),
            "no store into a fresh accumulator in {name}:\n{f}"
        );
    }
    let native = built(module);
    let mut ran = 0;
    for n in [0usize, 1, 3, 17] {
        let plain: Vec<f64> = (0..n).map(|i| (i as f64 * 0.37).sin() * 1.5).collect();
        let mut odd = plain.clone();
        if n > 2 {
            odd[1] = f64::INFINITY;
            odd[2] = f64::NAN;
        }
        for xs in [plain, odd] {
            for ct in [1.0, -2.5, 0.0, -0.0, f64::INFINITY, f64::NAN] {
                for (k, inputs) in [
                    (0, vec![Value::reals(xs.clone())]),
                    (1, vec![Value::reals(xs.clone()), Value::Real(0.75)]),
                    (3, vec![Value::reals(xs.clone())]),
                ] {
                    let ok = vjp_bit_for_bit(&native, k, &inputs, &Value::Real(ct)).unwrap_or_else(
                        |e| {
                            let name = &native.defs[k].entry.name;
                            panic!("{name} at {xs:?}, cotangent {ct:?}: {e}")
                        },
                    );
                    ran += usize::from(ok);
                }
            }
        }
    }
    assert!(ran >= 130, "only {ran} gradients ran");
    // Stores of `-0.0` cotangents: the addition to a zero gives `0.0`.
    for n in [0usize, 1, 4] {
        let xs: Vec<f64> = (0..n).map(|i| i as f64 - 1.5).collect();
        let ct: Vec<f64> = (0..n)
            .map(|i| if i % 2 == 0 { -0.0 } else { 2.5 })
            .collect();
        vjp_bit_for_bit(&native, 2, &[Value::reals(xs)], &Value::reals(ct))
            .unwrap_or_else(|e| panic!("shift at n = {n}: {e}"));
    }
}

/// Reads and one-hot checks proved in range (`ir::bounds`): in reverse code of a triangular
/// loop (`for j in 0..i` inside `for i in 0..len xs`), the reads of `xs` at either index and
/// the one-hots at them need no test, and the emitted code has none; a read past the end
/// (`xs ! (i + 1)`) keeps its test. The gradients are the interpreter's bit for bit, and where
/// an array is too short (`q` one short of the triangle, every `offby`) the error is the same.
#[test]
fn proved_bounds_agree_bit_for_bit() {
    let src = "\
def tri (q : Array Real) (v : Array Real) : Real =
  let d = length v in
  sum (build d (\\(r : Int) ->
    let s = sum (build r (\\(c : Int) -> q ! (d + c * (2 * d - c - 1) / 2 + r - c - 1) * v ! c)) in
    (q ! r * v ! r + s) * (q ! r * v ! r + s)))

def pairs (xs : Array Real) : Real =
  sum (build (length xs) (\\(i : Int) -> sum (build i (\\(j : Int) -> xs ! i * xs ! j))))

def offby (xs : Array Real) : Real = sum (build (length xs) (\\(i : Int) -> xs ! i * xs ! (i + 1)))
";
    let (module, text) = emitted(src, false, true);
    let tests = |f: &str| {
        (
            f.matches("ErrorKind::OneHot").count(),
            f.matches("at(&").count() + f.matches("at_ref(&").count(),
        )
    };
    let pairs = emitted_fn(&text, "pairs_vjp");
    assert_eq!(tests(pairs), (0, 0), "tests left in pairs_vjp:\n{pairs}");
    // Of tri's six one-hots, those at the loop indices go; the triangular index keeps its.
    let tri = emitted_fn(&text, "tri_vjp");
    assert!(
        tests(tri).0 <= 4 && tests(tri).1 <= 7,
        "tests left in tri_vjp:\n{tri}"
    );
    let offby = emitted_fn(&text, "offby_vjp");
    assert!(
        tests(offby).1 >= 1,
        "a read past the end lost its test:\n{offby}"
    );
    let native = built(module);
    let xs = |n: usize| -> Vec<f64> {
        (0..n)
            .map(|i| (i as f64 * 0.37).sin() * 1.5 - 0.2)
            .collect()
    };
    let (mut ran, mut failed) = (0, 0);
    for n in [0usize, 1, 2, 3, 5, 8] {
        let tri = n + n * n.saturating_sub(1) / 2;
        let mut cases = vec![
            (0, vec![Value::reals(xs(tri)), Value::reals(xs(n))]),
            (1, vec![Value::reals(xs(n))]),
            (2, vec![Value::reals(xs(n))]),
        ];
        if tri > 0 {
            cases.push((0, vec![Value::reals(xs(tri - 1)), Value::reals(xs(n))]));
        }
        for (k, inputs) in cases {
            for ct in [1.0, -0.5] {
                let ok = vjp_bit_for_bit(&native, k, &inputs, &Value::Real(ct))
                    .unwrap_or_else(|e| panic!("{} at n = {n}: {e}", native.defs[k].entry.name));
                ran += usize::from(ok);
                failed += usize::from(!ok);
            }
        }
    }
    assert!(
        ran >= 24 && failed >= 10,
        "{ran} gradients ran, {failed} failed"
    );
}

/// Integer ranges (`ir/bounds.rs`, "Integer ranges"): index arithmetic on lengths and loop
/// indices (a triangle in a flat array, a row-major matrix) is computed without overflow
/// checks, in the primal and the gradient; arithmetic with an `Int` argument keeps its check,
/// and where it overflows, native code fails with the interpreter's error at the same
/// position. Values and gradients are the interpreter's bit for bit.
#[test]
fn proved_integer_ranges_agree_bit_for_bit() {
    let src = "\
def tri (q : Array Real) (v : Array Real) : Real =
  let d = length v in
  sum (build d (\\(r : Int) ->
    sum (build r (\\(c : Int) -> q ! (d + c * (2 * d - c - 1) / 2 + r - c - 1) * v ! c))))

def matvec (a : Array Real) (v : Array Real) : Real =
  let n = length v in
  sum (build (length a / n) (\\(r : Int) -> sum (build n (\\(c : Int) -> a ! (r * n + c) * v ! c))))

def strided (xs : Array Real) (k : Int) : Real =
  sum (build (length xs) (\\(i : Int) -> xs ! (i * k - i * k + i) * xs ! i))
";
    let (module, text) = emitted(src, false, true);
    for f in ["tri", "tri_vjp", "matvec", "matvec_vjp"] {
        // Only matvec's division by a length, which may be 0, keeps its test.
        let body = emitted_fn(&text, f);
        let want = usize::from(f.starts_with("matvec"));
        assert_eq!(
            body.matches("checked_").count(),
            want,
            "overflow checks in {f}:\n{body}"
        );
    }
    for f in ["strided", "strided_vjp"] {
        let body = emitted_fn(&text, f);
        assert!(
            body.contains("checked_mul"),
            "the check of i * k is gone from {f}:\n{body}"
        );
    }
    let native = built(module);
    let xs = |n: usize| -> Value {
        Value::reals(
            (0..n)
                .map(|i| (i as f64 * 0.37).sin() * 1.5 - 0.2)
                .collect(),
        )
    };
    let (mut ran, mut failed) = (0, 0);
    for n in [0usize, 1, 2, 3, 5] {
        let tri = n + n * n.saturating_sub(1) / 2;
        let mut cases = vec![
            (0, vec![xs(tri), xs(n)]),
            (1, vec![xs(3 * n), xs(n)]),
            (2, vec![xs(n), Value::Int(3)]),
            // i * k overflows from i = 2 on.
            (2, vec![xs(n), Value::Int(1 << 62)]),
        ];
        if tri > 0 {
            cases.push((0, vec![xs(tri - 1), xs(n)]));
        }
        for (k, inputs) in cases {
            let name = &native.defs[k].entry.name;
            primal_bit_for_bit(&native, k, &inputs)
                .unwrap_or_else(|e| panic!("{name} at n = {n}: {e}"));
            let ok = vjp_bit_for_bit(&native, k, &inputs, &Value::Real(1.0))
                .unwrap_or_else(|e| panic!("{name} at n = {n}: {e}"));
            ran += usize::from(ok);
            failed += usize::from(!ok);
        }
    }
    assert!(
        ran >= 15 && failed >= 6,
        "{ran} gradients ran, {failed} failed"
    );
}

/// The Rust backend keeps a tuple of real arrays taken from an accumulator and only read
/// through its fields in the accumulator's spelling (`Vec`s, `Emitter::read_only_take`)
/// instead of freezing it into shared arrays: it fires in GMM's reverse sweep (the cotangent
/// of `qtimesv`'s three arrays, per point and component), and the gradients are the
/// interpreter's bit for bit, as is the error of a point of the wrong dimension.
#[test]
fn read_only_cotangent_tuples_are_not_frozen() {
    let src = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/gmm.chad"),
    )
    .unwrap();
    let (module, text) = emitted(&src, false, true);
    let vjp = emitted_fn(&text, "gmm_vjp");
    assert!(
        vjp.contains(": ((Vec<f64>, Vec<f64>,), Vec<f64>,) = acc_"),
        "the cotangent tuple is frozen:\n{vjp}"
    );
    let native = built(module);
    let k = native
        .defs
        .iter()
        .position(|d| &*d.entry.name == "gmm")
        .unwrap();
    let mut seed = 0.25f64;
    let mut next = || {
        seed = (seed * 3.7 + 0.13).fract();
        seed * 2.0 - 1.0
    };
    let mut reals = |n: usize| Value::reals((0..n).map(|_| next()).collect());
    let mut matrix = |rows: usize, cols: usize| {
        Value::Array(std::rc::Rc::new((0..rows).map(|_| reals(cols)).collect()))
    };
    let (d, kk, n) = (3, 2, 4);
    let alphas = matrix(1, kk);
    let Value::Array(alphas) = alphas else {
        unreachable!()
    };
    let ok: Vec<Value> = vec![
        alphas[0].clone(),
        matrix(kk, d),
        matrix(kk, d + d * (d - 1) / 2),
        matrix(n, d),
        Value::Real(1.0),
        Value::Int(0),
    ];
    let mut bad = ok.clone();
    bad[3] = matrix(n, d + 1);
    for (inputs, runs) in [(ok, true), (bad, false)] {
        let ran = vjp_bit_for_bit(&native, k, &inputs, &Value::Real(1.0)).unwrap();
        assert_eq!(ran, runs);
    }
}

/// The Rust backend's speculative sums (`Emitter::speculable` in `ir/rust.rs`): a `sum` whose
/// body scales (co)tangents with strong zeros runs first with plain products and only if the
/// sum is NaN again with the strong zeros. It fires on Rosenbrock's and `sqrt`'s forward
/// sums, and the tangents are the interpreter's bit for bit: on ordinary inputs, with `-0.0`
/// and zero tangents (signs of zero), and where a plain product is `∞ · 0` (`sqrt` at 0: the
/// strong zero gives a number, the plain sum NaN, so the exact sum is taken).
#[test]
fn speculative_sums_agree_bit_for_bit() {
    let src = "\
def rosen (xs : Array Real) : Real =
  sum (build (length xs - 1) (\\(i : Int) ->
    let x = xs ! i in
    let d = xs ! (i + 1) - x * x in
    100.0 * d * d + (1.0 - x) * (1.0 - x)))

def roots (xs : Array Real) : Real =
  sum (build (length xs) (\\(i : Int) -> 3.0 * sqrt (xs ! i) + xs ! i))
";
    let (module, text) = emitted(src, true, false);
    for name in ["rosen", "roots"] {
        let f = emitted_fn(&text, &format!("{name}_jvp"));
        assert!(
            f.contains("if s.is_nan()"),
            "no speculative sum in {name}:\n{f}"
        );
    }
    let native = built(module);
    let prog = &native.program;
    let mut cases: Vec<(usize, Vec<f64>, Vec<f64>)> = Vec::new();
    for n in [1usize, 2, 3, 9, 40] {
        let xs: Vec<f64> = (0..n).map(|i| (i as f64 * 0.37).sin() * 1.5).collect();
        let ts: Vec<f64> = (0..n).map(|i| (i as f64 * 0.11).cos()).collect();
        let signed: Vec<f64> = (0..n)
            .map(|i| if i % 2 == 0 { -0.0 } else { 0.0 })
            .collect();
        cases.push((0, xs.clone(), ts));
        cases.push((0, xs.clone(), signed.clone()));
        let pos: Vec<f64> = xs.iter().map(|x| x.abs()).collect();
        cases.push((1, pos.clone(), signed));
        // A zero where the tangent is zero: ∞ · 0 in the plain sum.
        let mut zs = pos;
        zs[n / 2] = 0.0;
        let mut ts: Vec<f64> = (0..n).map(|i| 1.0 + i as f64).collect();
        ts[n / 2] = 0.0;
        cases.push((1, zs, ts));
    }
    for (k, xs, ts) in cases {
        let d = &native.defs[k];
        let f = d.jvp.expect("a jvp");
        let (args, tangents) = ([Value::reals(xs.clone())], [Value::reals(ts.clone())]);
        let interp = d.context(&args).and_then(|x| {
            let dx = d.context_tangent(&args, &tangents)?;
            chad::internals::ir::interp::run(prog, f, vec![x, dx]).map(|r| d.jvp_result(&r))
        });
        let nat = native.jvp_def(k, &args, &tangents);
        same_result("native jvp", &nat, &interp, same_bits)
            .unwrap_or_else(|e| panic!("{} at {xs:?}, {ts:?}: {e}", d.entry.name));
        if let Ok((_, dy)) = &nat {
            assert!(!dy.expect_real().is_nan(), "{}: NaN tangent", d.entry.name);
        }
    }
}

/// A long chain of linear `let`s (the reverse pass of the bench's generated straight-line
/// program, whose cotangents are used more than once): sinking attempts that fail are
/// abandoned at once, which keeps the lowering linear (it lowered the rest of each failed
/// attempt's scope first, 50 s for 3000 lets); and the gradient it produces still agrees with
/// finite differences.
#[test]
fn a_long_straight_line_program_lowers_and_differentiates() {
    let text = chad::internals::bench::programs::straight_line(1500);
    let prog =
        chad::internals::source::load(&text, &chad::internals::prim::Registry::builtin()).unwrap();
    let entry = prog.entry(prog.defs.len() - 1);
    let c = Compiled::new(&entry).unwrap();
    chad::internals::ir::check::check(&c.program).unwrap();
    let (x, y) = (0.3, -0.2);
    let f = |x: f64, y: f64| {
        c.eval(&[Value::Real(x), Value::Real(y)])
            .unwrap()
            .expect_real()
    };
    let (v, g) = c.grad(&[Value::Real(x), Value::Real(y)]).unwrap();
    assert_eq!(v.expect_real(), f(x, y));
    let h = 1e-6;
    let fd = [
        (f(x + h, y) - f(x - h, y)) / (2.0 * h),
        (f(x, y + h) - f(x, y - h)) / (2.0 * h),
    ];
    for (k, d) in fd.iter().enumerate() {
        let gk = g[k].expect_real();
        assert!(
            (gk - d).abs() <= 1e-5 * (1.0 + d.abs()),
            "∂{k}: {gk} against finite differences {d}"
        );
    }
}

/// Native sums follow the crate's one summation order (`value::sum_reals`: chunks of 4096,
/// eight lanes, a fixed combination) bit for bit at every edge of a block of eight and of a
/// chunk, for `sum` of an array, `dot`, and a summed `build` (the emitted `sum_by` loop), on
/// terms spread over 18 orders of magnitude so that any other order rounds differently.
#[test]
fn native_sums_keep_the_fixed_order_at_block_and_chunk_edges() {
    let src = "\
def total (xs : Array Real) : Real = sum xs

def dotted (xs : Array Real) (ys : Array Real) : Real = dot xs ys

def squares (xs : Array Real) : Real = sum (build (length xs) (\\(i : Int) -> xs ! i * xs ! i))

def strided (xs : Array Real) : Real =
  sum (build (length xs) (\\(i : Int) -> xs ! (length xs - 1 - 3 * i) * 2.0))
";
    let (module, _) = emitted(src, false, false);
    let native = built(module);
    let term = |i: usize| (i as f64 * 0.37).sin() * 10f64.powi((i % 7) as i32 * 3 - 9);
    let lengths = (0..=17).chain([4095, 4096, 4097, 4103, 4104, 8191, 8192, 8193, 12295]);
    // Then on three threads with every sum parallel (no work bound): long sums (from six
    // chunks, twice the threads) give whole chunks to the threads and add their sums in
    // order, shorter ones compute their terms in parallel; both must be `sum_by`'s sum, and
    // fail at its first failing term, which lies in the second thread's chunks from
    // n = 24577 on.
    let parallel = [4097, 24575, 24576, 24577, 24581, 28672, 40000, 49153];
    let runs = lengths
        .map(|n| (n, false))
        .chain(parallel.map(|n| (n, true)));
    for (n, par) in runs {
        if par {
            native.set_parallelism(3, 0).unwrap();
        }
        // Every short length (a sum of fewer than eight terms has its own path in the
        // prelude's `sum_by`), with ordinary terms, then with the first eight -0.0 (a lane
        // starts at +0.0, so a sum of -0.0s is +0.0) and infinities and NaN after them.
        for special in [false, true] {
            let val = |i: usize| match i % 5 {
                _ if special && i < 8 => -0.0,
                4 if special => [f64::INFINITY, f64::NAN][i % 2],
                _ => term(i),
            };
            let xs: Vec<f64> = (0..n).map(val).collect();
            let ys: Vec<f64> = (0..n).map(|i| val(i + 3)).collect();
            let want = [
                chad::internals::value::sum_reals(xs.iter().copied()),
                chad::internals::value::sum_reals(xs.iter().zip(&ys).map(|(x, y)| x * y)),
                chad::internals::value::sum_reals(xs.iter().map(|x| x * x)),
            ];
            let inputs = [
                vec![Value::reals(xs.clone())],
                vec![Value::reals(xs.clone()), Value::reals(ys.clone())],
                vec![Value::reals(xs.clone())],
            ];
            for (k, (args, want)) in inputs.iter().zip(want).enumerate() {
                let got = native
                    .eval_def(k, args)
                    .unwrap_or_else(|e| panic!("{}", e.render(None)));
                same_bits(&got, &Value::Real(want)).unwrap_or_else(|e| {
                    panic!(
                        "{} at n = {n}, parallel {par}: {e}",
                        native.defs[k].entry.name
                    )
                });
            }
            // Terms that fail, each at its own negative index, from i = (n - 1) / 3 + 1 on:
            // the native sum stops at the interpreter's first failing term.
            let ran = primal_bit_for_bit(&native, 3, &inputs[0])
                .unwrap_or_else(|e| panic!("strided at n = {n}, parallel {par}: {e}"));
            assert_eq!(ran, n < 2, "strided at n = {n}, parallel {par}");
        }
    }
}

/// Buffer reuse (`Emitter::loop_pools`): the reverse sweep's per-row accumulators of a map
/// over ragged rows take their buffer from the previous row's, and the gradients stay the
/// interpreter's bit for bit while the rows grow, shrink to nothing and grow again (a
/// reused buffer that kept its old elements, or kept its old length, shows here).
#[test]
fn loop_local_accumulators_reuse_their_buffer() {
    let src = "\
def g (xs : Array (Array Real)) : Real =
  sum (map (\\x -> let c = map (\\a -> a * a - 1.0) x in sum (map (\\y -> y * y) c) * sum c) xs)

def h (xs : Array (Array Real)) : Real =
  sum (map (\\x -> let c = map (\\a -> a * a - 1.0) x in c ! 0 * c ! (length c - 1)) xs)
";
    let (module, text) = emitted(src, false, true);
    // g's accumulators are filled by stores, h's by two one-hot additions.
    for f in ["g_vjp", "h_vjp"] {
        let body = emitted_fn(&text, f);
        assert!(
            body.contains("pooled("),
            "no reused accumulator in {f}:\n{body}"
        );
    }
    let native = built(module);
    let row = |n: usize, s: f64| -> Value {
        Value::reals((0..n).map(|i| (i as f64 * 0.7 + s).sin() * 2.0).collect())
    };
    let rows = |lens: &[usize]| -> Value {
        Value::array(
            &chad::internals::types::Type::array(chad::internals::types::Type::Real),
            lens.iter()
                .enumerate()
                .map(|(k, &n)| row(n, k as f64))
                .collect(),
        )
    };
    for lens in [
        &[3usize, 0, 5, 1, 4][..],
        &[6, 2, 2, 7],
        &[4, 1, 3, 3, 8, 2],
        &[0, 0, 3],
        &[1],
        &[],
    ] {
        for ct in [1.0, -0.5, 0.0, f64::NAN] {
            // h indexes every row at 0: its rows are not empty.
            for k in [0, 1].into_iter().filter(|&k| k == 0 || !lens.contains(&0)) {
                let ran = vjp_bit_for_bit(&native, k, &[rows(lens)], &Value::Real(ct))
                    .unwrap_or_else(|e| panic!("def {k}, rows {lens:?}, cotangent {ct}: {e}"));
                assert!(ran, "def {k}, rows {lens:?}: the native VJP failed");
            }
        }
    }
}

/// Buffer reuse for tuples of accumulator arrays (`Emitter::loop_pools`, `pool_tuple`): GMM's
/// reverse sweep accumulates the cotangents of each (point, component) call of `qtimesv`
/// (its three array arguments) in a tuple local to the iteration, which now reuses the
/// previous iteration's buffers. The gradients stay the interpreter's bit for bit at several
/// shapes (a buffer that kept an element of the previous component shows here).
#[test]
fn loop_local_accumulator_tuples_reuse_their_buffers() {
    let src = include_str!("../examples/gmm.chad");
    let (module, text) = emitted(src, false, true);
    let body = emitted_fn(&text, "gmm_vjp");
    assert!(
        body.contains(") = Default::default();") && body.contains("pooled(&mut pool"),
        "no reused accumulator tuple in gmm_vjp"
    );
    let native = built(module);
    let k = native.defs.len() - 1;
    let val = |i: usize, s: f64| ((i as f64 + 1.0) * 0.37 + s).sin();
    let rows = |r: usize, c: usize, s: f64| {
        Value::array_of(
            (0..r)
                .map(|i| Value::reals((0..c).map(|j| val(i * c + j, s)).collect()))
                .collect(),
        )
    };
    for (d, kk, n) in [
        (1usize, 1usize, 1usize),
        (2, 3, 4),
        (3, 2, 5),
        (5, 4, 3),
        (10, 3, 7),
    ] {
        let args = [
            Value::reals((0..kk).map(|i| val(i, 0.5)).collect()),
            rows(kk, d, 1.0),
            rows(kk, d * (d + 1) / 2, 2.0),
            rows(n, d, 3.0),
            Value::Real(1.3),
            Value::Int(1),
        ];
        for ct in [1.0, -0.25] {
            let ran = vjp_bit_for_bit(&native, k, &args, &Value::Real(ct))
                .unwrap_or_else(|e| panic!("D = {d}, K = {kk}, N = {n}: {e}"));
            assert!(ran, "D = {d}, K = {kk}, N = {n}: the native VJP failed");
        }
    }
}

/// Splitting long functions into parts (`ir::split`, for rustc's sake) changes no value and no
/// error: random programs of every kind (arrays, sums, loops, recursion, deeper higher-order
/// ones) compiled into one module, then split with bounds so small that most functions are
/// cut (more than 10 statements, parts of 4), run on the IR interpreter bit for bit like the
/// whole ones, primal, JVP and VJP. The counts make sure the rule fired: parts were made, and
/// some took over a `mut` from the function they were cut from.
#[test]
fn split_functions_agree_bit_for_bit_with_the_whole_ones() {
    use chad::internals::ir::{Expr, Stmt, interp, split};
    let mut configs = module_configs();
    configs.push(Config {
        recursion: true,
        ..Config::default()
    });
    let programs = random_programs(&configs, 40);
    let entries: Vec<_> = programs.iter().map(|p| p.entry.clone()).collect();
    let parts = chad::internals::ir::compile::Parts {
        jvp: true,
        vjp: true,
        required: false,
    };
    let module = chad::internals::ir::compile::Module::new(&entries, parts).unwrap();
    let whole = &module.program;
    let mut cut = whole.clone();
    split::split_functions(&mut cut, 10, 4);
    chad::internals::ir::check::check(&cut).unwrap_or_else(|e| panic!("{e}\n{cut}"));
    let made = &cut.funcs[whole.funcs.len()..];
    let handed_over = made
        .iter()
        .filter(|f| {
            f.body
                .stmts
                .iter()
                .any(|s| matches!(s, Stmt::Mut(_, Expr::Atom(_))))
        })
        .count();
    assert!(made.len() >= 1000, "only {} parts", made.len());
    assert!(handed_over >= 100, "only {handed_over} parts took a mut");
    let mut ran = 0;
    for (k, p) in programs.iter().enumerate() {
        let d = &module.defs[k];
        let fail = |e: String| panic!("{e}\nprogram:\n{p:?}");
        let run = |prog: &chad::internals::ir::Program, f, args: chad::Result<Vec<_>>| {
            args.and_then(|xs| interp::run(prog, f, xs))
                .map(|v| format!("{v:?}"))
        };
        let primal = |prog| run(prog, d.primal, d.args(&p.inputs));
        same_result("primal", &primal(&cut), &primal(whole), same_bits).unwrap_or_else(fail);
        let Ok(y) = d
            .args(&p.inputs)
            .and_then(|xs| interp::run(whole, d.primal, xs))
            .map(|v| interp::to_value(&d.entry.body.ty, &v))
        else {
            continue;
        };
        ran += 1;
        let mut rng = Rng::new(k as u64 + 11);
        if let Some(f) = d.jvp {
            let tangents = tangents_for(&d.entry, &p.inputs, &mut rng);
            let jvp = |prog| {
                let xs = d
                    .context(&p.inputs)
                    .and_then(|x| Ok(vec![x, d.context_tangent(&p.inputs, &tangents)?]));
                run(prog, f, xs)
            };
            same_result("jvp", &jvp(&cut), &jvp(whole), same_bits).unwrap_or_else(fail);
        }
        if let Some(f) = d.vjp {
            let ct = match d.entry.body.ty {
                Type::Real => Value::Real(1.0),
                ref ty => random_tangent(ty, &y, &mut rng),
            };
            let vjp = |prog| {
                let xs = d
                    .context(&p.inputs)
                    .and_then(|x| Ok(vec![x, d.cotangent(&ct)?]));
                run(prog, f, xs)
            };
            same_result("vjp", &vjp(&cut), &vjp(whole), same_bits).unwrap_or_else(fail);
        }
    }
    assert!(ran * 2 >= programs.len(), "only {ran} programs ran");
}

/// Straight-line reads at constant indices (`xs ! 0 + xs ! 1 + ..`, the suite's index_chain):
/// in reverse code the one-hots need no test (the primal's reads proved `len xs` large
/// enough: `ir/bounds.rs`) and the accumulator is grown once (`ir::opt::hoist_grows`); in
/// forward code the tangent is padded once and read without a test per element
/// (`Emitter::pad_constants`). Values, tangents and gradients are the interpreter's bit for
/// bit at every length, the arrays too short included (the same error at the same read); the
/// tangent is also given sparse (shorter than `xs`: zeros past its end, as forward code
/// passes an array's zero), straight to the compiled function.
#[test]
fn reads_at_constant_indices_are_tested_once() {
    use chad::internals::ir::interp::Val;
    let src = "\
def chain (xs : Array Real) : Real = xs ! 0 * xs ! 1 + xs ! 2 + xs ! 3 * xs ! 5 + xs ! 4 + sin (xs ! 6)

def shuffled (xs : Array Real) : Real = xs ! 6 + xs ! 2 * xs ! 0 + xs ! 1 - xs ! 5 + xs ! 3 * xs ! 4
";
    let (module, text) = emitted(src, true, true);
    for f in ["chain_vjp", "shuffled_vjp"] {
        let body = emitted_fn(&text, f);
        assert_eq!(body.matches("ErrorKind::OneHot").count(), 0, "{f}:\n{body}");
        assert_eq!(body.matches("resize_with").count(), 0, "{f}:\n{body}");
    }
    for f in ["chain_jvp", "shuffled_jvp"] {
        let body = emitted_fn(&text, f);
        assert_eq!(body.matches("pad_f64(&").count(), 1, "{f}:\n{body}");
        assert_eq!(body.matches("at_or(").count(), 0, "{f}:\n{body}");
    }
    let native = built(module);
    let prog = &native.program;
    let xs = |n: usize| -> Vec<f64> { (0..n).map(|i| (i as f64 * 0.61).cos() * 1.3).collect() };
    let (mut ran, mut failed) = (0, 0);
    for k in 0..2 {
        let d = &native.defs[k];
        let f = d.jvp.expect("a jvp");
        for n in 0..=9 {
            let args = [Value::reals(xs(n))];
            for ct in [1.0, -0.5] {
                let ok = vjp_bit_for_bit(&native, k, &args, &Value::Real(ct))
                    .unwrap_or_else(|e| panic!("{} at n = {n}: {e}", d.entry.name));
                ran += usize::from(ok);
                failed += usize::from(!ok);
            }
            // Tangents of every length up to n: the shorter ones are zeros past their end.
            for m in 0..=n {
                let Ok(x) = d.context(&args) else { continue };
                let t = Val::Array(std::rc::Rc::new(
                    xs(m).iter().map(|v| Val::F64(v * 0.5 - 0.25)).collect(),
                ));
                let dx = Val::Tuple(vec![Val::Unit, t].into());
                let interp = chad::internals::ir::interp::run(prog, f, vec![x.clone(), dx.clone()]);
                let nat = native.call(f, &[x.clone(), dx]);
                same_result("native jvp", &nat, &interp, same_bits)
                    .unwrap_or_else(|e| panic!("{} at n = {n}, tangent of {m}: {e}", d.entry.name));
            }
        }
    }
    assert!(
        ran >= 12 && failed >= 12,
        "{ran} gradients ran, {failed} failed"
    );
}

/// Local arrays of reals built inside a loop's body (`Emitter::stmt`, `Scratch` in the
/// emitted module) take their buffer from the thread's pool and give it back when dropped.
/// Rows of different lengths (growing, shrinking, empty) in one call make every buffer serve
/// arrays of other lengths, whose old elements must not show; a row that is too short fails
/// in the middle of a build (the buffer is dropped there), and the next call still agrees.
/// Values are the interpreter's bit for bit, primal and gradient.
#[test]
fn local_arrays_in_loops_reuse_pooled_buffers() {
    let src = "\
def f (xs : Array (Array Real)) : Real =
  sum (map (\\x ->
    let c = build (length x) (\\i -> x ! i * 2.0 - 1.0) in
    let d = build (length c) (\\i -> c ! i * c ! (length c - 1 - i)) in
    sum d + d ! 0 * sum c) xs)

def g (xs : Array (Array Real)) : Real =
  sum (map (\\x -> let c = build 3 (\\i -> x ! i + x ! 0) in c ! 0 * c ! 2) xs)
";
    let (module, text) = emitted(src, false, true);
    for f in ["f", "g"] {
        let body = emitted_fn(&text, f);
        assert!(
            body.contains("scratch_build("),
            "no pooled array in {f}:\n{body}"
        );
    }
    let native = built(module);
    let rows = |lens: &[usize]| -> Value {
        Value::array(
            &chad::internals::types::Type::array(chad::internals::types::Type::Real),
            lens.iter()
                .enumerate()
                .map(|(k, &n)| {
                    Value::reals((0..n).map(|i| ((i + 3 * k) as f64 * 0.9).sin()).collect())
                })
                .collect(),
        )
    };
    let (mut ran, mut failed) = (0, 0);
    for lens in [
        &[3usize, 7, 1, 5, 5, 2][..],
        &[6, 2, 9, 4],
        &[4, 1, 3, 2, 8, 3],
        &[5, 2, 6],
        &[1],
        &[],
    ] {
        for k in 0..2 {
            let d = &native.defs[k];
            let inputs = [rows(lens)];
            let ok = primal_bit_for_bit(&native, k, &inputs)
                .unwrap_or_else(|e| panic!("{} at rows {lens:?}: {e}", d.entry.name));
            ran += usize::from(ok);
            failed += usize::from(!ok);
            vjp_bit_for_bit(&native, k, &inputs, &Value::Real(1.0))
                .unwrap_or_else(|e| panic!("{} at rows {lens:?}: {e}", d.entry.name));
        }
    }
    // f fails on no row but an empty one's `d ! 0`; g on rows shorter than 3.
    assert!(ran >= 6 && failed >= 4, "{ran} ran, {failed} failed");
}

/// Sums of arithmetic on reads at the loop index run in lanes (`Emitter::lane_sum` in
/// `ir/rust.rs`): over `chunks_exact(8)` of the slices read, every term in the lane `sum_by`
/// gives it. Dot products, a body reading three slices of which two are sparse tangents
/// (shorter, zero past their end: padded first), a dot inside a map, and squares scaled by a
/// constant (whose tangent terms drop `+ 0.0`: `Emitter::sign_free`), primal, forward and
/// reverse, at every length from 0 to 40 and around the 4096-term chunks (4095 to 4097, 8193),
/// with `-0.0`, infinities and NaN among the terms (where the plain products are NaN and the
/// strong zeros decide): the interpreter's values bit for bit.
#[test]
fn arithmetic_sums_run_in_lanes_bit_for_bit() {
    use chad::internals::ir::interp::Val;
    let src = "\
def dot2 (xs : Array Real) (ys : Array Real) : Real = dot xs ys

def three (xs : Array Real) (ys : Array Real) : Real =
  sum (map2 (\\x y -> x * y - x / (y + 3.0)) xs ys) + sum (map (\\x -> x * x) xs)

def rows (xss : Array (Array Real)) (ys : Array Real) : Real =
  sum (map (\\r -> dot r ys * 0.5) xss)

def squares (xs : Array Real) (ys : Array Real) : Real =
  sum (build (length xs) (\\i -> 3.0 * xs ! i * xs ! i + ys ! i))
";
    let (module, text) = emitted(src, true, true);
    for f in [
        "dot2",
        "three",
        "dot2_jvp",
        "three_jvp",
        "rows",
        "squares_jvp",
    ] {
        let body = emitted_fn(&text, f);
        assert!(body.contains("chunks_exact(8)"), "no lanes in {f}:\n{body}");
    }
    // The tangent's terms scale by constants without `+ 0.0` (`Emitter::sign_free`): a
    // term's zero sign never shows in a sum. The gradient's stores keep it.
    let jvp = emitted_fn(&text, "squares_jvp");
    assert!(!jvp.contains("+ 0.0"), "{jvp}");
    assert!(emitted_fn(&text, "squares_vjp").contains("+ 0.0"));
    let native = built(module);
    let prog = &native.program;
    let reals = |n: usize, phase: f64, special: bool| -> Vec<f64> {
        (0..n)
            .map(|i| match i % 23 {
                5 if special => -0.0,
                11 if special && n > 20 => f64::INFINITY,
                17 if special && n > 30 => f64::NAN,
                _ => ((i as f64 + phase) * 0.37).sin() * 2.0,
            })
            .collect()
    };
    let mut lens: Vec<usize> = (0..=40).collect();
    lens.extend([4095, 4096, 4097, 8193]);
    let mut checked = 0;
    for &n in &lens {
        for special in [false, true] {
            let (xs, ys) = (reals(n, 0.0, special), reals(n, 1.5, false));
            let cases = [
                (0, vec![Value::reals(xs.clone()), Value::reals(ys.clone())]),
                (1, vec![Value::reals(xs.clone()), Value::reals(ys.clone())]),
                (3, vec![Value::reals(xs.clone()), Value::reals(ys.clone())]),
            ];
            for (k, inputs) in cases {
                let d = &native.defs[k];
                let what = format!("{} at n = {n}, special {special}", d.entry.name);
                primal_bit_for_bit(&native, k, &inputs).unwrap_or_else(|e| panic!("{what}: {e}"));
                // (A positive cotangent keeps the sign of `3 · -0.0 · ct`.)
                let ct = if k == 3 { 0.75 } else { -1.25 };
                vjp_bit_for_bit(&native, k, &inputs, &Value::Real(ct))
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                // Tangents: xs's as long as xs, ys's one shorter (a sparse zero past its end),
                // with a zero tangent against an infinite primal term.
                let f = d.jvp.expect("a jvp");
                let x = d.context(&inputs).expect("a context");
                let arr = |v: Vec<f64>| {
                    Val::Array(std::rc::Rc::new(v.into_iter().map(Val::F64).collect()))
                };
                let dxs = arr((0..n)
                    .map(|i| {
                        if i % 23 == 11 {
                            0.0
                        } else {
                            (i as f64 * 0.11).cos()
                        }
                    })
                    .collect());
                let dys = arr(reals(n.saturating_sub(1), 3.0, false));
                let dx = Val::Tuple(vec![Val::Tuple(vec![Val::Unit, dxs].into()), dys].into());
                let interp = chad::internals::ir::interp::run(prog, f, vec![x.clone(), dx.clone()]);
                let nat = native.call(f, &[x, dx]);
                same_result("native jvp", &nat, &interp, same_bits)
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                checked += 1;
            }
            if n <= 40 {
                let xss = Value::array(
                    &chad::internals::types::Type::array(chad::internals::types::Type::Real),
                    (0..3)
                        .map(|r| Value::reals(reals(n, r as f64, special)))
                        .collect(),
                );
                let inputs = [xss, Value::reals(ys.clone())];
                let what = format!("rows at n = {n}, special {special}");
                primal_bit_for_bit(&native, 2, &inputs).unwrap_or_else(|e| panic!("{what}: {e}"));
                vjp_bit_for_bit(&native, 2, &inputs, &Value::Real(0.75))
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
            }
        }
    }
    assert_eq!(checked, 6 * lens.len());
}

/// The Rust backend's tiled builds (`Emitter::tiled_build`): a build of reals whose body is a
/// sum in lanes between straight-line statements runs four rows at once, the four sums in one
/// pass over their slices. The tile fires on each of these (a dense layer, its reverse code's
/// forward sweep and its forward code, whose tangent loop is jammed with its sums,
/// `Emitter::jam_loop`; a row scalar inside the sum's body; a read that may fail before the
/// sum) and every value and error is the interpreter's, bit for bit: row
/// counts around multiples of four, row lengths below, at and above the lanes' threshold and
/// past a 4096-term chunk, rows of unequal length (the tile declines), a failing read at each
/// row, `-0.0`, infinities and NaN among the terms.
#[test]
fn tiled_builds_agree_bit_for_bit() {
    let src = "\
def dense (w : Array (Array Real)) (b : Array Real) (v : Array Real) : Array Real =
  map2 (\\row bias -> dot row v + bias) w b

def layer (w : Array (Array Real)) (b : Array Real) (v : Array Real) : Real =
  sum (map tanh (dense w b v))

def scaled (w : Array (Array Real)) (cs : Array Real) : Array Real =
  map2 (\\row c -> sum (map (\\x -> c * x * x - x) row)) w cs

def pick (w : Array (Array Real)) (xs : Array Real) (v : Array Real) : Array Real =
  build (length w) (\\i -> 2.0 * (dot (w ! i) v + xs ! (3 * i)))
";
    let (module, text) = emitted(src, true, true);
    for f in ["dense", "layer_vjp", "scaled", "pick", "dense_jvp"] {
        let body = emitted_fn(&text, f);
        assert!(
            body.contains("|tile_i: i64|"),
            "no tiled build in {f}:\n{body}"
        );
    }
    // The tangent's loop over rows (two sums per row, `acc[i] += ..`) is jammed, its sums
    // with plain products where a NaN declines (`Emitter::jam_sum`).
    let jvp = emitted_fn(&text, "dense_jvp");
    assert!(
        jvp.contains("jam_i += 4;") && jvp.contains("if lane_t.iter().any(|t| t.is_nan())"),
        "{jvp}"
    );
    let native = built(module);
    let val = special_val;
    let rows = |lens: &[usize], s: f64, special: bool| {
        Value::array_of(
            lens.iter()
                .enumerate()
                .map(|(r, &m)| Value::reals((0..m).map(|j| val(r * 131 + j, s, special)).collect()))
                .collect(),
        )
    };
    let reals = |n: usize, s: f64| Value::reals((0..n).map(|i| val(i, s, false)).collect());
    let mut shapes: Vec<(usize, usize)> = Vec::new();
    for r in [0, 1, 3, 4, 5, 7, 8, 9, 13, 16] {
        for m in [0, 5, 15, 16, 17, 40] {
            shapes.push((r, m));
        }
    }
    shapes.extend([(5, 4097), (4, 8200)]);
    let (mut ran, mut failed) = (0, 0);
    for (r, m) in shapes {
        // Equal rows; then rows of unequal length (row 5 one longer), where `dense` fails at
        // that row and `scaled` runs untiled.
        let mut ragged = vec![m; r];
        if r > 5 {
            ragged[5] += 1;
        }
        for lens in [vec![m; r], ragged] {
            for special in [false, true] {
                let what = format!("{r} rows of {lens:?}, special {special}");
                let w = rows(&lens, 0.5, special);
                let cases = [
                    (0, vec![w.clone(), reals(r, 1.0), reals(m, 2.0)]),
                    (2, vec![w.clone(), reals(r, 3.0)]),
                    // `xs ! (3 i)` fails from row r / 3 on (before the last row for r ≥ 2).
                    (3, vec![w.clone(), reals(r, 1.0), reals(m, 2.0)]),
                    (3, vec![w.clone(), reals(3 * r, 1.0), reals(m, 2.0)]),
                    // Row 4 fails after its sum, row 5 (if ragged) before: row 4's error.
                    (3, vec![w.clone(), reals(12, 1.0), reals(m, 2.0)]),
                ];
                for (k, inputs) in &cases {
                    let ok = primal_bit_for_bit(&native, *k, inputs)
                        .unwrap_or_else(|e| panic!("def {k}, {what}: {e}"));
                    if ok {
                        ran += 1;
                    } else {
                        failed += 1;
                    }
                }
                let inputs = [w.clone(), reals(r, 1.0), reals(m, 2.0)];
                // Forward: `dot row dv + dot drow v` per row, one sum over four slices.
                // (Zeros of `dv` meet infinities of `w`: plain products are NaN there.)
                let dv = Value::reals((0..m).map(|i| val(i, 6.0, special)).collect());
                let tangents = [rows(&lens, 4.0, special), reals(r, 5.0), dv];
                jvp_bit_for_bit(&native, 0, &inputs, &tangents)
                    .unwrap_or_else(|e| panic!("dense, {what}: {e}"));
                for ct in [1.0, -0.5] {
                    vjp_bit_for_bit(&native, 1, &inputs, &Value::Real(ct))
                        .unwrap_or_else(|e| panic!("layer, {what}: {e}"));
                }
            }
        }
    }
    assert!(ran > 300 && failed > 100, "{ran} ran, {failed} failed");
    // Infinities in `w` (no NaN) against zeros of `dv` inside jammed rows: the plain
    // products' sum is NaN where the exact one is not, so the jam must decline there.
    for (r, m) in [(16, 16), (16, 40), (32, 64)] {
        let w = Value::array_of(
            (0..r)
                .map(|k| {
                    Value::reals(
                        (0..m)
                            .map(|j| {
                                if (k * 131 + j) % 29 == 13 {
                                    f64::INFINITY
                                } else {
                                    val(k * 131 + j, 0.5, false)
                                }
                            })
                            .collect(),
                    )
                })
                .collect(),
        );
        let dv = Value::reals(
            (0..m)
                .map(|j| if j % 29 == 7 { 0.0 } else { val(j, 6.0, false) })
                .collect(),
        );
        let inputs = [w.clone(), reals(r, 1.0), reals(m, 2.0)];
        let tangents = [rows(&vec![m; r], 4.0, false), reals(r, 5.0), dv];
        jvp_bit_for_bit(&native, 0, &inputs, &tangents)
            .unwrap_or_else(|e| panic!("dense, {r} rows of {m} with infinities: {e}"));
    }
}

/// The Rust backend's jammed loops (`Emitter::jam_loop`): reverse code's transposed
/// products (`acc[j] += w[i][j] * y_i` over rows `i`) add four rows to each element in one
/// pass. The rule fires on a dense layer's gradient (with the rows' own additions after the
/// shared one), on two shared products in one loop, and on a matrix-vector product's VJP,
/// and the gradients are the interpreter's bit for bit: row counts around multiples of
/// four, scale factors that are zero, infinite or NaN (`tanh'` of an infinity, a NaN row,
/// such cotangents: the jam stops there), and both cotangent signs.
#[test]
fn jammed_loops_agree_bit_for_bit() {
    let src = "\
def layer (w : Array (Array Real)) (b : Array Real) (v : Array Real) : Real =
  sum (map2 (\\row bias -> tanh (dot row v + bias)) w b)

def two (w1 : Array (Array Real)) (w2 : Array (Array Real)) (u : Array Real) (v : Array Real) : Real =
  sum (map2 (\\r s -> tanh (dot r u + dot s v)) w1 w2)

def dense (w : Array (Array Real)) (v : Array Real) : Array Real = map (\\row -> dot row v) w
";
    let (module, text) = emitted(src, false, true);
    for f in ["layer_vjp", "two_vjp", "dense_vjp"] {
        let body = emitted_fn(&text, f);
        assert!(
            body.contains("jam_i += 4;"),
            "no jammed loop in {f}:\n{body}"
        );
    }
    let native = built(module);
    let val = |i: usize, s: f64, special: bool| match i % 31 {
        7 if special => -0.0,
        13 if special => f64::INFINITY,
        23 if special => f64::NAN,
        _ => ((i as f64 + 1.0) * 0.37 + s).sin(),
    };
    let rows = |r: usize, m: usize, s: f64, special: bool| {
        Value::array_of(
            (0..r)
                .map(|k| Value::reals((0..m).map(|j| val(k * 131 + j, s, special)).collect()))
                .collect(),
        )
    };
    let reals = |n: usize, s: f64, special: bool| {
        Value::reals((0..n).map(|i| val(i, s, special)).collect())
    };
    let mut ran = 0;
    for r in [0, 1, 3, 4, 5, 7, 8, 9, 12, 13, 40] {
        for m in [0, 1, 5, 16, 17, 40] {
            for special in [false, true] {
                let what = format!("{r} rows of {m}, special {special}");
                let w = rows(r, m, 0.5, special);
                let cases = [
                    (
                        0,
                        vec![w.clone(), reals(r, 1.0, false), reals(m, 2.0, false)],
                    ),
                    (
                        1,
                        vec![
                            w.clone(),
                            rows(r, m + 3, 1.5, false),
                            reals(m, 2.0, false),
                            reals(m + 3, 2.5, special),
                        ],
                    ),
                ];
                for (k, inputs) in &cases {
                    for ct in [1.0, -0.5] {
                        let ok = vjp_bit_for_bit(&native, *k, inputs, &Value::Real(ct))
                            .unwrap_or_else(|e| panic!("def {k}, {what}: {e}"));
                        ran += usize::from(ok);
                    }
                }
                // Cotangents with zeros, infinities and NaN among them.
                let inputs = [w.clone(), reals(m, 2.0, false)];
                for s in [0.0, 3.0] {
                    let ok = vjp_bit_for_bit(&native, 2, &inputs, &reals(r, s, special))
                        .unwrap_or_else(|e| panic!("dense, {what}: {e}"));
                    ran += usize::from(ok);
                }
            }
        }
    }
    assert!(ran > 600, "only {ran} ran");
}

/// Sums over one length in one pass (`Emitter::sum_group` in `ir/rust.rs`): forward code's
/// primal and tangent sums of one array, two sums of a primal with a projection between
/// them, four sums of a ratio's forward code, and a scaled sum whose plain products are
/// speculative. The group forms where it should (not where the second sum uses the first:
/// a variance), and values and tangents are the interpreter's bit for bit at lengths
/// around the lanes' thresholds and chunks, with `-0.0`, infinities and NaN in the data
/// and infinities against zero tangents (where the speculative sum is NaN and the exact
/// one is not).
#[test]
fn grouped_sums_agree_bit_for_bit() {
    let src = "\
def sq (xs : Array Real) : Real = sum (map (\\x -> x * x) xs)

def ratio (xs : Array Real) (ys : Array Real) : Real =
  let a = sum (map2 (\\x y -> x * y) xs ys) in
  let b = sum (map (\\x -> x * x + 1.0) xs) in
  a / b

def var (xs : Array Real) : Real =
  let m = sum xs in
  sum (map (\\x -> (x - m) * (x - m)) xs)

def scaled (c : Real) (xs : Array Real) : Real =
  sum (map (\\x -> c * x) xs) + sum (map (\\x -> x * x) xs)
";
    let (module, text) = emitted(src, true, false);
    for (f, groups) in [
        ("sq_jvp", 1),
        ("ratio", 1),
        ("ratio_jvp", 1),
        ("scaled_jvp", 1),
    ] {
        let body = emitted_fn(&text, f);
        assert_eq!(
            body.matches("(lane_total0, lane_total1").count(),
            groups,
            "{f}:\n{body}"
        );
    }
    assert!(!emitted_fn(&text, "var").contains("lane_total0"));
    let native = built(module);
    let val = special_val;
    let reals = |n: usize, s: f64, special: bool| {
        Value::reals((0..n).map(|i| val(i, s, special)).collect())
    };
    // Infinities only (no NaN) in the primal, zeros in the tangent at the same places.
    let infs = |n: usize| {
        Value::reals(
            (0..n)
                .map(|i| {
                    if i % 29 == 13 {
                        f64::INFINITY
                    } else {
                        val(i, 0.5, false)
                    }
                })
                .collect(),
        )
    };
    let zeros = |n: usize| {
        Value::reals(
            (0..n)
                .map(|i| {
                    if i % 29 == 13 {
                        0.0
                    } else {
                        val(i, 2.5, false)
                    }
                })
                .collect(),
        )
    };
    let mut ran = 0;
    for n in [0, 1, 7, 8, 9, 15, 16, 17, 31, 40, 4095, 4096, 4097, 8200] {
        for special in [false, true] {
            let what = format!("n = {n}, special {special}");
            let xs = reals(n, 0.5, special);
            let cases: Vec<(usize, Vec<Value>, Vec<Value>)> = vec![
                (0, vec![xs.clone()], vec![reals(n, 1.5, special)]),
                (0, vec![infs(n)], vec![zeros(n)]),
                (
                    1,
                    vec![xs.clone(), reals(n, 3.0, special)],
                    vec![reals(n, 1.0, false), reals(n, 2.0, special)],
                ),
                (1, vec![infs(n), zeros(n)], vec![zeros(n), infs(n)]),
                (2, vec![xs.clone()], vec![reals(n, 4.0, special)]),
                (
                    3,
                    vec![Value::Real(0.75), xs.clone()],
                    vec![Value::Real(-1.25), reals(n, 2.0, special)],
                ),
                (
                    3,
                    vec![Value::Real(0.0), infs(n)],
                    vec![Value::Real(1.0), zeros(n)],
                ),
                (
                    3,
                    vec![Value::Real(f64::INFINITY), xs.clone()],
                    vec![Value::Real(0.0), zeros(n)],
                ),
            ];
            for (k, inputs, tangents) in &cases {
                if primal_bit_for_bit(&native, *k, inputs)
                    .unwrap_or_else(|e| panic!("def {k}, {what}: {e}"))
                {
                    ran += 1;
                }
                jvp_bit_for_bit(&native, *k, inputs, tangents)
                    .unwrap_or_else(|e| panic!("def {k} jvp, {what}: {e}"));
            }
        }
    }
    assert!(ran >= 200, "{ran} ran");
}

/// A reverse program's tape of arrays (here a pair of arrays per point) built by a parallel
/// loop is freed through `par_drop` before the VJP returns (`Emitter::drops`), and on three
/// threads with every loop parallel (no work bound) the gradients stay the interpreter's bit
/// for bit at lengths around the thread split, including none and one point.
#[test]
fn reverse_tapes_of_arrays_are_dropped_in_parallel() {
    let src = "\
def f (xs : Array (Array Real)) (w : Array Real) : Real =
  sum (map (\\(x : Array Real) ->
    let c = map2 (\\a b -> a - b) x w in
    let q = build (length c) (\\(i : Int) -> c ! i * (1.0 + toReal i)) in
    log (1.0 + dot q c) + sum (map sin q)) xs)
";
    let (module, text) = emitted(src, false, true);
    let vjp = emitted_fn(&text, "f_vjp");
    assert!(
        vjp.contains("par_drop(ys_"),
        "the VJP's tape is not dropped through par_drop:\n{vjp}"
    );
    let native = built(module);
    native.set_parallelism(3, 0).unwrap();
    for n in [0usize, 1, 2, 3, 4, 7, 40] {
        let xs = Value::array(
            &chad::internals::types::Type::array(chad::internals::types::Type::Real),
            (0..n)
                .map(|i| Value::reals((0..5).map(|j| ((i * 5 + j) as f64 * 0.3).cos()).collect()))
                .collect(),
        );
        let w = Value::reals((0..5).map(|j| 0.1 * j as f64).collect());
        vjp_bit_for_bit(&native, 0, &[xs, w], &Value::Real(1.5))
            .unwrap_or_else(|e| panic!("n = {n}: {e}"));
    }
}

/// chad's own `sin`, `cos` and `exp` in vector lanes (note 07 §4, "elementary functions in
/// lanes"): sums of them run in buffered lanes on the threads (`lane_chunks`), builds of
/// reals a block at a time (`par_build_lanes`), and a `for` loop computes its calls ahead a
/// block at a time (`fiss_ahead`: `cos` for `sin`'s derivative, `exp` for `erf`'s); `waves`
/// mixes `cos`, `tanh` and `sigmoid` (whose lane forms never flag, and flag past 512). Values, tangents and
/// cotangents natively equal the IR interpreter's bit for bit: at lengths around the lanes,
/// blocks and chunks; with arguments outside the core ranges (the lanes' flag, then the
/// plain forms: `sin` of 10⁷, `exp` of -1.3·10⁷ and of -546 and below), with NaN and
/// infinities; on one thread and on three.
#[test]
fn elementary_functions_in_lanes_agree_bit_for_bit() {
    let src = "\
def wave (a : Real) (b : Real) (xs : Array Real) : Real =
  sum (map (\\(x : Real) -> a * x + sin (b * x)) xs)

def waves (xs : Array Real) (ys : Array Real) : Real =
  sum (map2 (\\(x : Real) (y : Real) -> cos x * y + tanh (x * y) + sigmoid (x - y)) xs ys)

def bump (c : Real) (xs : Array Real) : Real =
  let m = maximum xs in
  log (sum (map (\\(x : Real) -> exp (c * (x - m))) xs)) + m

def soft (c : Real) (xs : Array Real) : Array Real =
  map (\\(x : Real) -> exp (c * x) + sin x) xs

def tot (c : Real) (xs : Array Real) : Real =
  let ys = map (\\(x : Real) -> exp (c * x)) xs in
  sum (map2 (\\(y : Real) (x : Real) -> y * cos (x * y)) ys xs)

def bell (c : Real) (xs : Array Real) : Real =
  sum (map (\\(x : Real) -> erf (c * x)) xs)
";
    let (module, text) = emitted(src, true, true);
    let wave = emitted_fn(&text, "wave");
    assert!(
        wave.contains("lane_chunks(") && wave.contains("sin_lane("),
        "no lanes in wave:\n{wave}"
    );
    let jvp = emitted_fn(&text, "wave_jvp");
    assert!(
        jvp.contains("lane_chunks(") && jvp.contains("cos_lane("),
        "{jvp}"
    );
    let vjp = emitted_fn(&text, "wave_vjp");
    assert!(
        vjp.contains("fiss_ahead(") && vjp.contains("cos_lane("),
        "no calls computed ahead in wave's VJP:\n{vjp}"
    );
    let bump = emitted_fn(&text, "bump");
    assert!(
        bump.contains("lane_chunks(") && bump.contains("exp_lane("),
        "{bump}"
    );
    // `exp`'s derivative is its result (`ad::share_result`): the primal stores the exps, in
    // a build in lanes, and the sweep reads them; `erf`'s derivative calls `exp`, which the
    // sweep computes ahead.
    let vjp = emitted_fn(&text, "bump_vjp");
    assert!(
        vjp.contains("par_build_lanes(")
            && vjp.contains("exp_lane(")
            && !vjp.contains("fiss_ahead("),
        "the exps are not stored in lanes in bump's VJP:\n{vjp}"
    );
    let vjp = emitted_fn(&text, "bell_vjp");
    assert!(
        vjp.contains("fiss_ahead(") && vjp.contains("exp_lane("),
        "no calls computed ahead in bell's VJP:\n{vjp}"
    );
    for f in ["soft", "tot"] {
        let code = emitted_fn(&text, f);
        assert!(
            code.contains("par_build_lanes("),
            "no build in lanes in {f}:\n{code}"
        );
    }
    let native = built(module);
    let lengths = [
        0usize, 1, 7, 15, 16, 17, 40, 511, 512, 513, 1030, 4105, 9000,
    ];
    for par in [false, true] {
        if par {
            native.set_parallelism(3, 0).unwrap();
        }
        for n in lengths {
            for special in 0..3 {
                let val = |i: usize| match (special, i) {
                    // Outside the core range: the lanes flag it, the plain forms call libm.
                    (1, _) if i == n / 2 => 1.0e7,
                    (2, _) if i % 97 == 5 => [f64::NAN, f64::INFINITY, -0.0][i % 3],
                    // The maximum: `exp`'s arguments reach -546 and below, past its core range.
                    (2, _) if i % 89 == 3 => 420.0,
                    _ => (i as f64 * 0.37).sin() * 3.0 + i as f64 * 1e-3,
                };
                let xs: Vec<f64> = (0..n).map(val).collect();
                let ys: Vec<f64> = (0..n).map(|i| val(i + 11) * 0.5).collect();
                let ts: Vec<f64> = (0..n).map(|i| (i as f64 * 0.11).cos()).collect();
                // With `a = 0` in case 1 (the loops' versions for a zero factor), so that
                // `a x` does not swamp the huge argument's `sin`.
                let a = if special == 1 { 0.0 } else { 0.7 };
                let cases = [
                    (
                        0,
                        vec![Value::Real(a), Value::Real(1.3), Value::reals(xs.clone())],
                    ),
                    (1, vec![Value::reals(xs.clone()), Value::reals(ys.clone())]),
                    (2, vec![Value::Real(1.3), Value::reals(xs.clone())]),
                    (3, vec![Value::Real(0.9), Value::reals(xs.clone())]),
                    (4, vec![Value::Real(-0.6), Value::reals(xs.clone())]),
                    (5, vec![Value::Real(0.8), Value::reals(xs.clone())]),
                ];
                for (k, args) in cases {
                    let at = format!(
                        "{} at n = {n}, case {special}, parallel {par}",
                        native.defs[k].entry.name
                    );
                    primal_bit_for_bit(&native, k, &args).unwrap_or_else(|e| panic!("{at}: {e}"));
                    // `soft`'s result is an array.
                    let ct = if k == 3 {
                        Value::reals(ts.clone())
                    } else {
                        Value::Real(1.5)
                    };
                    vjp_bit_for_bit(&native, k, &args, &ct).unwrap_or_else(|e| panic!("{at}: {e}"));
                    let tangents: Vec<Value> = args
                        .iter()
                        .map(|a| match a {
                            Value::Real(_) => Value::Real(0.25),
                            _ => Value::reals(ts.clone()),
                        })
                        .collect();
                    jvp_bit_for_bit(&native, k, &args, &tangents)
                        .unwrap_or_else(|e| panic!("{at}: {e}"));
                }
            }
        }
    }
}
