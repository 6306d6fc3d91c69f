//! Custom derivatives in the language (LANGUAGE.md, "Custom derivatives";
//! theory-notes/13-custom-derivatives.md): `with jvp` / `with vjp` clauses are checked linear,
//! used by every mode at every call (higher-order code and loops included), and tested by
//! `chad check --derivatives`.
//!
//! Oracles: central finite differences of the body (which knows no clause), and the other AD
//! routes (forward CHAD, reverse CHAD, `--via transpose`, the dual-numbers reverse engine).
//! Clauses that deliberately differ from the true derivative show that the clause, not the
//! body, is differentiated.

use chad::Value;
use chad::internals::ad;
use chad::internals::oracle::{all_approx_eq, fd};
use chad::internals::prim::Registry;
use chad::internals::source::term::Program;
use std::process::Command;

fn load(src: &str) -> Program {
    chad::internals::source::load(src, &Registry::builtin()).unwrap_or_else(|e| panic!("{e:?}"))
}

/// The LANGUAGE.md examples, used inside higher-order code and loops.
const EXAMPLES: &str = "
def softplus (x : Real) : Real = log (1.0 + exp x)
  with jvp (dx : Real) = dx * sigmoid x

def hypot (x : Real) (y : Real) : Real = sqrt (x * x + y * y)
  with jvp (dx : Real) (dy : Real) = (x * dx + y * dy) / result

def norm3 (v : (Real, Real, Real)) : Real =
  let (a, b, c) = v in sqrt (a * a + b * b + c * c)
  with jvp (dv : (Real, Real, Real)) =
    let (a, b, c) = v in
    let (da, db, dc) = dv in (a * da + b * db + c * dc) / result
  with vjp (ct : Real) =
    let (a, b, c) = v in (a * ct / result, b * ct / result, c * ct / result)

def dot2 (xs : Array Real) (ys : Array Real) : Real = sum (map2 (\\x y -> x * y) xs ys)
  with jvp (dxs : Array Real) (dys : Array Real) =
    sum (map2 (\\y dx -> y * dx) ys dxs) + sum (map2 (\\dy x -> x * dy) dys xs)
  with vjp (ct : Real) = (map (\\y -> y * ct) ys, build (length xs) (\\i -> ct * xs ! i))

def mapped (a : Real) (xs : Array Real) : Real =
  let h = \\(y : Real) -> softplus (a * y) + hypot a y in
  sum (map h xs)

def looped (a : Real) (xs : Array Real) : Real =
  fold (\\(acc : Real) (y : Real) -> hypot acc (softplus (a * y))) 1.0 xs
    + iterate 3 (\\(s : Real) -> 0.5 * softplus (a * s) + xs ! 0) a

def tupled (a : Real) (b : Real) (xs : Array Real) : Real =
  norm3 (a, b, softplus a) * dot2 xs (map (\\x -> x * b) xs)
";

/// Every reverse route: reverse CHAD, `--via transpose`, the dual-numbers engine. (Reverse
/// mode by transposition does not support loops, with or without custom derivatives: the
/// loop's derivative chains closures recorded at run time. That route is left out there.)
fn reverse_routes(
    entry: &chad::internals::source::term::Entry,
    args: &[Value],
    ct: &Value,
) -> Vec<Vec<Value>> {
    let chad = ad::vjp(entry, args, ct).unwrap().1;
    let dual = chad::internals::dual_reverse::vjp(entry, args, ct)
        .unwrap()
        .1;
    match chad::internals::linearize::vjp_via_transpose(entry) {
        Ok(v) => vec![chad, v.vjp(args, ct).unwrap().1, dual],
        Err(e) => {
            assert!(
                &*entry.name == "looped" && e.message().contains("loop"),
                "{}",
                e.message()
            );
            vec![chad, dual]
        }
    }
}

fn flat(vs: &[Value]) -> Vec<f64> {
    vs.iter().flat_map(fd::leaves).collect()
}

/// A deterministic sequence in [-1, 1).
fn sequence(seed: u64) -> impl FnMut() -> f64 {
    let mut s = seed;
    move || {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((s >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
    }
}

#[test]
fn examples_agree_with_finite_differences_in_every_mode() {
    let prog = load(EXAMPLES);
    let mut next = sequence(7);
    let mut checked = 0;
    for (i, def) in prog.defs.iter().enumerate() {
        let entry = prog.entry(i);
        for _ in 0..5 {
            let args: Vec<Value> = def
                .params
                .iter()
                .map(|p| {
                    let shape = match &p.ty {
                        chad::internals::types::Type::Array(_) => Value::reals(vec![0.0; 3]),
                        chad::internals::types::Type::Real => Value::Real(0.0),
                        _ => Value::tuple(vec![Value::Real(0.0); 3]),
                    };
                    fd::tangent_with(&p.ty, &shape, &mut || 1.5 * next())
                })
                .collect();
            let d: Vec<Value> = def
                .params
                .iter()
                .zip(&args)
                .map(|(p, a)| fd::tangent_with(&p.ty, a, &mut next))
                .collect();
            let estimate = fd::jvp(&entry, &args, &d, 1e-5).unwrap();
            // Forward mode (the jvp clauses).
            let (y, jv) = ad::jvp(&entry, &args, &d).unwrap();
            assert!(
                all_approx_eq(&fd::leaves(&jv), &fd::leaves(&estimate), 1e-5, 1e-6),
                "{}: jvp {jv} vs finite differences {estimate}",
                def.name()
            );
            // Every reverse route, through the dot-product identity and against each other.
            let ct = fd::tangent_with(&def.ret, &y, &mut next);
            let routes = reverse_routes(&entry, &args, &ct);
            let rhs: f64 = fd::leaves(&ct)
                .iter()
                .zip(fd::leaves(&estimate))
                .map(|(a, b)| a * b)
                .sum();
            for g in &routes {
                let lhs: f64 = flat(g).iter().zip(flat(&d)).map(|(a, b)| a * b).sum();
                assert!(
                    (lhs - rhs).abs() <= 1e-5 * (1.0 + rhs.abs()),
                    "{}: <vjp ct, d> = {lhs}, <ct, fd> = {rhs}",
                    def.name()
                );
                assert!(all_approx_eq(&flat(g), &flat(&routes[0]), 1e-10, 1e-12));
            }
            checked += 1;
        }
    }
    assert_eq!(checked, 5 * prog.defs.len());
}

/// Clauses that are not the derivative of the body: whatever the body, every mode uses them.
const RULES: &str = "
def stopgrad (x : Real) : Real = x
  with jvp (dx : Real) = 0.0

def clipgrad (x : Real) : Real = x
  with jvp (dx : Real) = if dx > 1.0 then 1.0 else dx

def halved (x : Real) : Real = x * x
  with jvp (dx : Real) = x * dx
  with vjp (ct : Real) = 3.0 * x * ct

def g (x : Real) : Real = x * stopgrad x
def h (xs : Array Real) : Real = sum (map (\\x -> halved (x + 1.0)) xs)
";

#[test]
fn clauses_not_the_body_are_used() {
    // (A clause branching on its tangent is not linear, and rejected; see below.)
    let err = chad::internals::source::load(RULES, &Registry::builtin()).unwrap_err();
    assert!(
        err.message().contains("branches on a tangent"),
        "{}",
        err.message()
    );
    let rules = RULES.replace(
        "with jvp (dx : Real) = if dx > 1.0 then 1.0 else dx",
        "with jvp (dx : Real) = if x > 1.0 then 0.0 else dx",
    );
    let prog = load(&rules);
    let x = Value::Real(2.5);
    // g x = x * stopgrad x: the gradient is stopgrad x = x, not 2x.
    let g = prog.entry(prog.find("g").unwrap());
    for grad in reverse_routes(&g, std::slice::from_ref(&x), &Value::Real(1.0)) {
        assert_eq!(grad[0].expect_real(), 2.5);
    }
    assert_eq!(
        ad::jvp(&g, std::slice::from_ref(&x), &[Value::Real(1.0)])
            .unwrap()
            .1
            .expect_real(),
        2.5
    );
    // clipgrad: the gradient is 0 above 1, 1 below.
    let clip = prog.entry(prog.find("clipgrad").unwrap());
    for (at, want) in [(2.5, 0.0), (0.5, 1.0)] {
        for grad in reverse_routes(&clip, &[Value::Real(at)], &Value::Real(1.0)) {
            assert_eq!(grad[0].expect_real(), want);
        }
    }
    // halved: forward mode uses the jvp clause (x dx), every reverse route the vjp clause
    // (3 x ct), inside a map with a closure: not the body's 2x.
    let h = prog.entry(prog.find("h").unwrap());
    let xs = Value::reals(vec![1.0, -2.0]);
    let (_, jv) = ad::jvp(
        &h,
        std::slice::from_ref(&xs),
        &[Value::reals(vec![1.0, 1.0])],
    )
    .unwrap();
    assert_eq!(jv.expect_real(), 2.0 + -1.0);
    for grad in reverse_routes(&h, std::slice::from_ref(&xs), &Value::Real(1.0)) {
        assert_eq!(grad[0].expect_reals(), &[6.0, -3.0]);
    }
    // Primal evaluation runs the body.
    assert_eq!(
        chad::internals::eval::eval_entry(&h, &[xs])
            .unwrap()
            .expect_real(),
        4.0 + 1.0
    );
    // And `check --derivatives` reports both deliberately wrong rules, and only them.
    let found = ad::clauses::check_clauses(&prog, 10, 3).unwrap();
    let names: Vec<&str> = found.iter().map(|d| d.def.as_str()).collect();
    assert_eq!(names, ["stopgrad", "clipgrad", "halved"], "{found:?}");
    assert!(
        found[2].message.contains("finite differences"),
        "{}",
        found[2].message
    );
}

#[test]
fn check_derivatives_reports_only_wrong_rules() {
    let good = load(EXAMPLES);
    assert!(ad::clauses::check_clauses(&good, 20, 1).unwrap().is_empty());
    // A wrong jvp (off by a factor), and a vjp that is not the jvp's transpose (the jvp is
    // right, so only the dot-product test can catch it).
    let bad = load(
        "def cube (x : Real) : Real = x * x * x
           with jvp (dx : Real) = 2.0 * x * x * dx
         def hyp (x : Real) (y : Real) : Real = sqrt (x * x + y * y)
           with jvp (dx : Real) (dy : Real) = (x * dx + y * dy) / result
           with vjp (ct : Real) = (x * ct / result, x * ct / result)
         def fine (x : Real) : Real = exp x
           with jvp (dx : Real) = result * dx",
    );
    let found = ad::clauses::check_clauses(&bad, 20, 1).unwrap();
    assert_eq!(found.len(), 2, "{found:?}");
    assert_eq!(found[0].def, "cube");
    assert!(found[0].message.contains("`jvp` clause"));
    assert_eq!(found[1].def, "hyp");
    assert!(
        found[1].message.contains("dot-product"),
        "{}",
        found[1].message
    );
    let e = ad::clauses::disagreement_error(&found).unwrap();
    assert!(e.message().contains("`cube`, `hyp`"), "{}", e.message());
    assert_eq!(e.span(), Some(bad.defs[0].span));
}

/// The position of the first occurrence of `needle` in `src`.
fn at(src: &str, needle: &str) -> usize {
    src.find(needle).unwrap()
}

#[test]
fn non_linear_and_ill_typed_clauses_are_type_errors_with_positions() {
    let cases = [
        (
            "with jvp (dx : Real) = dx * dx",
            "dx * dx",
            "multiplies two terms",
        ),
        (
            "with jvp (dx : Real) = 2.0 * x * dx + 1.0",
            "1.0",
            "add a constant",
        ),
        (
            "with jvp (dx : Real) = sin dx",
            "sin dx",
            "`sin` is applied",
        ),
        (
            "with jvp (dx : Real) = x / dx",
            "dx\n",
            "divides by a tangent",
        ),
        ("with jvp (dx : Real) = 3.0", "3.0", "add a constant"),
        (
            "with jvp (dx : Real) = (\\(t : Real) -> t) dx",
            "(\\(",
            "this form",
        ),
        (
            "with jvp (dx : Real) (dy : Real) = dx",
            "with jvp",
            "binds 2 tangents",
        ),
        (
            "with jvp (dx : Array Real) = x",
            "Array Real",
            "has type `Real`, not `Array Real`",
        ),
        ("with jvp (dx : Real) = true", "true", "expected"),
        (
            "with jvp (dx : Real) = dx with vjp (ct : Real) = ct * ct",
            "ct * ct",
            "multiplies",
        ),
        (
            "with jvp (dx : Real) = dx with vjp (ct : Real) = (ct, ct)",
            "(ct, ct)",
            "expected",
        ),
    ];
    for (clause, needle, message) in cases {
        let src = format!("def f (x : Real) : Real = x * x\n  {clause}\n");
        let e = chad::internals::source::load(&src, &Registry::builtin()).unwrap_err();
        assert_eq!(e.kind(), chad::ErrorKind::Type, "{clause}: {}", e.message());
        let full = format!("{} {:?}", e.message(), e.notes());
        assert!(full.contains(message), "{clause}: {full}");
        let span = e.span().unwrap_or_else(|| panic!("{clause}: no position"));
        let want = at(&src[30..], needle) + 30;
        assert_eq!(span.start as usize, want, "{clause}: {}", e.message());
    }
    // Parameters that are not reals, and clauses with nothing to differentiate.
    for (src, message) in [
        (
            "def f (n : Int) : Real = toReal n with jvp (dn : Int) = 0.0",
            "parameter `n`",
        ),
        (
            "def f (x : Real) : Bool = x > 0.0 with jvp (dx : Real) = true",
            "returns a `Bool`",
        ),
        (
            "def f (x : Real) : Real = x with vjp (ct : Real) = ct",
            "with vjp",
        ),
        (
            "def f (x : Real) : Real = x with jvp (dx : Real) = dx with jvp (dx : Real) = dx",
            "at most one",
        ),
        (
            "def add (x : Real) (y : Real) : Real = x with jvp (dx : Real) (dy : Real) = dx",
            "names a builtin",
        ),
    ] {
        let e = chad::internals::source::load(src, &Registry::builtin()).unwrap_err();
        let full = format!("{} {:?}", e.message(), e.notes());
        assert!(full.contains(message), "{src}: {full}");
        assert!(e.span().is_some(), "{src}");
    }
}

#[test]
fn clauses_print_and_read_back() {
    let prog = load(EXAMPLES);
    let all: Vec<usize> = (0..prog.defs.len()).collect();
    let text = chad::internals::source::print::defs_to_string(&prog, &all, 80);
    assert!(
        text.contains("with jvp (dx : Real) = dx * sigmoid x"),
        "{text}"
    );
    assert!(text.contains("with vjp (ct : Real) ="), "{text}");
    let again = load(&text);
    let again_text = chad::internals::source::print::defs_to_string(&again, &all, 80);
    assert_eq!(text, again_text);
}

fn chad_cli(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_chad"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn cli_check_derivatives_and_reverse_routes() {
    let dir = std::env::temp_dir().join(format!("chad-custom-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("good.chad");
    std::fs::write(&good, EXAMPLES).unwrap();
    let (code, out, err) = chad_cli(&["check", "--derivatives", good.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("softplus : Real -> Real"), "{out}");
    let bad = dir.join("bad.chad");
    std::fs::write(
        &bad,
        "def ok (x : Real) : Real = exp x\n  with jvp (dx : Real) = result * dx\n\
         def cube (x : Real) : Real = x * x * x\n  with jvp (dx : Real) = 2.0 * x * x * dx\n",
    )
    .unwrap();
    let (code, _, err) = chad_cli(&["check", "--derivatives", bad.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(
        err.contains("`cube`") && err.contains("bad.chad:3:1"),
        "{err}"
    );
    assert!(!err.contains("`ok`"), "{err}");
    // Without --derivatives, the wrong rule type-checks (it is linear).
    assert_eq!(chad_cli(&["check", bad.to_str().unwrap()]).0, 0);
    // The three reverse routes print the same gradient (the vjp clause's).
    let rules = dir.join("rules.chad");
    std::fs::write(&rules, "def halved (x : Real) : Real = x * x\n  with jvp (dx : Real) = x * dx\n  with vjp (ct : Real) = 3.0 * x * ct\n").unwrap();
    let r = rules.to_str().unwrap();
    for extra in [&[][..], &["--via", "transpose"], &["--engine", "dual"]] {
        let mut args = vec!["grad", r, "--arg", "2", "--json"];
        args.extend_from_slice(extra);
        let (code, out, err) = chad_cli(&args);
        assert_eq!(code, 0, "{extra:?}: {err}");
        assert!(out.contains("\"gradient\":[6.0]"), "{extra:?}: {out}");
    }
    // The native backend: a clear error, no panic.
    let (code, _, err) = chad_cli(&["grad", r, "--arg", "2", "--backend", "native"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("not supported") && !err.contains("panicked"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).ok();
}
