//! The language's conveniences (issue 23): the builtins `asin acos atan sinh cosh atan2 log1p
//! expm1 erf relu softplus sign argmax argmin`, the operators `^` and `%`, the elaborated forms
//! `pi mean maximum minimum reverse zip unzip slice concat`, type aliases, and the errors that
//! hint.
//!
//! * values: through both engines (direct evaluator and combinators), against hand-computed
//!   ones, including each non-differentiable point's convention;
//! * derivatives: a program using every one of them is differentiated by forward and reverse
//!   CHAD, the dual-number oracle, the dual-numbers reverse engine and the native backend
//!   (primal, JVP, VJP), all against central finite differences;
//! * errors: messages, positions and hints.

use chad::Value;
use chad::internals::ccc;
use chad::internals::dual_reverse::{DualReverse, Options};
use chad::internals::prim::Registry;
use chad::internals::source::term::{Entry, Program};
use chad::{Error, Source};

fn load(src: &str) -> Result<Program, Error> {
    chad::internals::source::load(src, &Registry::builtin())
}

/// Evaluates the last definition of `src` (no parameters) with both engines, which must agree.
fn run(src: &str) -> Result<Value, Error> {
    let prog = load(src).unwrap_or_else(|e| panic!("{src}: {}", render(src, &e)));
    let entry = prog.entry(prog.defs.len() - 1);
    let direct = chad::internals::eval::eval_entry(&entry, &[]);
    let via = ccc::eval::run(&ccc::compile_entry(&entry), &Value::Unit);
    match (&direct, &via) {
        (Ok(a), Ok(b)) => assert_eq!(a.same(b), Some(true), "{src}: {a} vs {b}"),
        (Err(a), Err(b)) => {
            assert_eq!(a.message(), b.message(), "{src}");
            assert_eq!(a.span(), b.span(), "{src}");
        }
        _ => panic!("{src}: engines disagree: {direct:?} vs {via:?}"),
    }
    direct
}

fn render(src: &str, e: &Error) -> String {
    e.render(Some(&Source::new("t.chad", src)))
}

fn value(expr: &str) -> String {
    run(&format!("def t = {expr}"))
        .unwrap_or_else(|e| panic!("{expr}: {e:?}"))
        .to_string()
}

fn real(expr: &str) -> f64 {
    run(&format!("def t : Real = {expr}"))
        .unwrap_or_else(|e| panic!("{expr}: {e:?}"))
        .expect_real()
}

fn close(expr: &str, expected: f64) {
    let got = real(expr);
    assert!(
        got == expected || (got - expected).abs() <= 2e-16 * expected.abs().max(1.0),
        "{expr} = {got}, expected {expected}"
    );
}

#[test]
fn new_real_builtins() {
    close("asin 0.5", 0.5f64.asin());
    close("acos 0.5", 0.5f64.acos());
    close("atan 2", 2f64.atan());
    close("sinh 1.5", 1.5f64.sinh());
    close("cosh 1.5", 1.5f64.cosh());
    close("atan2 1 (-1)", 3.0 * std::f64::consts::FRAC_PI_4);
    close("atan2 0 0", 0.0);
    close("log1p 1e-10", 1e-10f64.ln_1p());
    close("expm1 1e-10", 1e-10f64.exp_m1());
    close("pi", std::f64::consts::PI);
    close("2 * pi", std::f64::consts::TAU);
    // relu, softplus, sign, at and around their kinks.
    close("relu 2.5", 2.5);
    close("relu (-2.5)", 0.0);
    close("relu 0", 0.0);
    close("softplus 0", std::f64::consts::LN_2);
    close("softplus 800", 800.0); // no overflow
    close("softplus (-800)", 0.0);
    close("sign (-3)", -1.0);
    close("sign 0", 0.0);
    close("sign 1e-300", 1.0);
    assert!(real("asin 2").is_nan());
    assert!(real("sign (0 / 0)").is_nan());
}

/// `erf` against reference values (correctly rounded, from 50-digit arithmetic).
#[test]
fn erf_is_accurate() {
    let table = [
        (0.0, 0.0),
        (1e-8, 1.128_379_167_095_512_6e-8),
        (0.1, 0.112_462_916_018_284_9),
        (0.5, 0.520_499_877_813_046_5),
        (1.0, 0.842_700_792_949_714_9),
        (1.5, 0.966_105_146_475_310_7),
        (2.0, 0.995_322_265_018_952_7),
        (3.0, 0.999_977_909_503_001_4),
        (5.0, 0.999_999_999_998_462_5),
        (7.0, 1.0),
    ];
    for (x, e) in table {
        for (x, e) in [(x, e), (-x, -e)] {
            let got = chad::internals::prim::erf(x);
            assert!(
                (got - e).abs() <= 4.0 * f64::EPSILON * e.abs().max(1e-300),
                "erf {x} = {got}, expected {e}"
            );
        }
    }
    close("erf 1", chad::internals::prim::erf(1.0));
    assert!(chad::internals::prim::erf(f64::NAN).is_nan());
    // Monotone across the table's seams (multiples of 1/8).
    let mut last = -1.0;
    for k in -400..=400 {
        let x = k as f64 / 64.0;
        let y = chad::internals::prim::erf(x);
        assert!(y >= last, "erf not monotone at {x}");
        last = y;
    }
}

/// chad's own `tanh` (not libm's) against reference values (correctly rounded, from 60-digit
/// arithmetic), within 2 units in the last place; against `f64::tanh` on a sweep across the
/// switch between its two formulas (|x| = 0.625); odd, monotone, and exact at the edges.
#[test]
fn tanh_is_accurate() {
    let tanh = chad::internals::prim::tanh;
    let ulps = |a: f64, b: f64| (a.to_bits() as i64 - b.to_bits() as i64).unsigned_abs();
    let table = [
        (1e-300, 1e-300),
        (1e-08, 1e-08),
        (0.001, 0.000_999_999_666_666_8),
        (0.1, 0.099_667_994_624_955_82),
        (0.3, 0.291_312_612_451_590_9),
        (0.5, 0.462_117_157_260_009_74),
        (0.6, 0.537_049_566_998_035_3),
        (0.624, 0.553_906_919_203_914_5),
        (0.625, 0.554_599_722_349_382_3),
        (0.626, 0.555_291_757_464_191_3),
        (0.75, 0.635_148_952_387_287_3),
        (1.0, 0.761_594_155_955_764_9),
        (1.5, 0.905_148_253_644_866_4),
        (2.0, 0.964_027_580_075_816_9),
        (3.0, 0.995_054_753_686_730_5),
        (5.0, 0.999_909_204_262_595_1),
        (10.0, 0.999_999_995_877_692_7),
        (18.0, 0.999_999_999_999_999_6),
        (19.0, 0.999_999_999_999_999_9),
        (21.9, 1.0),
        (22.5, 1.0),
    ];
    for (x, e) in table {
        for (x, e) in [(x, e), (-x, -e)] {
            let got = tanh(x);
            assert!(ulps(got, e) <= 2, "tanh {x} = {got}, expected {e}");
        }
    }
    let mut last = -1.0;
    for k in -40_000..=40_000 {
        let x = k as f64 / 8192.0 + 1e-7;
        let y = tanh(x);
        assert!(ulps(y, x.tanh()) <= 3, "tanh {x} = {y}, libm {}", x.tanh());
        assert_eq!(tanh(-x).to_bits(), (-y).to_bits(), "tanh not odd at {x}");
        assert!(y >= last, "tanh not monotone at {x}");
        last = y;
    }
    assert_eq!(tanh(0.0).to_bits(), 0.0f64.to_bits());
    assert_eq!(tanh(-0.0).to_bits(), (-0.0f64).to_bits());
    assert_eq!(tanh(f64::INFINITY), 1.0);
    assert_eq!(tanh(f64::NEG_INFINITY), -1.0);
    assert_eq!(tanh(f64::MIN_POSITIVE / 4.0), f64::MIN_POSITIVE / 4.0);
    assert!(tanh(f64::NAN).is_nan());
    close("tanh 1", 0.761_594_155_955_764_9);
}

#[test]
fn powers_and_remainders() {
    close("3 ^ 2", 9.0);
    close("let x = 1.5 in x ^ 3", 3.375);
    close("2 ^ 0.5", std::f64::consts::SQRT_2);
    close("2 ^ -1", 0.5);
    close("-2 ^ 2", -4.0); // -(2 ^ 2)
    close("2 ^ 3 ^ 2", 512.0); // 2 ^ (3 ^ 2)
    close("let k = 3 in 2.0 ^ k", 8.0); // an Int exponent of a Real base
    close("2 * 3 ^ 2 + 1", 19.0);
    assert_eq!(value("let n = 3 in n ^ 4"), "81");
    assert_eq!(value("let n = 3 in 2 ^ n"), "8");
    assert_eq!(value("(-2) ^ 3"), "-8");
    assert_eq!(
        value("let n = 7 in (n % 3, -7 % 3, 7 % -3, 6 % 3)"),
        "(1, -1, 1, 0)"
    );
    assert_eq!(value("let i = 7 in i / 2 * 2 + i % 2"), "7");
    assert_eq!(value("1 + 10 % 4 * 2"), "5");
}

#[test]
fn array_conveniences() {
    close("mean [1, 2, 3, 6]", 3.0);
    assert!(real("mean []").is_nan());
    close("maximum [1, 5, -2, 5]", 5.0);
    close("minimum [1, 5, -2, 5]", -2.0);
    assert_eq!(value("argmax [1, 5, -2, 5]"), "1"); // the first of equal ones
    assert_eq!(value("argmin [3, -2, 5, -2]"), "1");
    assert_eq!(value("reverse [1, 2, 3]"), "[3, 2, 1]");
    assert_eq!(value("(reverse [] : Array Real)"), "[]");
    assert_eq!(
        value("zip [1.0, 2.0, 3.0] [true, false]"),
        "[(1.0, true), (2.0, false)]"
    );
    assert_eq!(value("unzip [(1, 2.0), (3, 4.0)]"), "([1, 3], [2.0, 4.0])");
    assert_eq!(value("slice [0, 1, 2, 3, 4] 1 3"), "[1, 2]");
    assert_eq!(value("slice [0, 1, 2] 2 1"), "[]");
    assert_eq!(value("concat [1, 2] [3]"), "[1, 2, 3]");
    assert_eq!(value("concat [[1.0]] []"), "[[1.0]]");
    // Passed as functions.
    assert_eq!(
        value("map reverse [[1, 2], [3, 4, 5]]"),
        "[[2, 1], [5, 4, 3]]"
    );
    assert_eq!(value("map maximum [[1.0, 3.0], [2.0]]"), "[3.0, 2.0]");
    assert_eq!(
        value("map2 zip [[1, 2]] [[true, false]]"),
        "[[(1, true), (2, false)]]"
    );
    // Arguments are evaluated once.
    assert_eq!(
        value("let xs = build 3 (\\i -> toReal i) in concat (reverse xs) (slice xs 1 3)"),
        "[2.0, 1.0, 0.0, 1.0, 2.0]"
    );
}

#[test]
fn type_aliases() {
    let src = "type Vector = Array Real
type Matrix = Array Vector
def rowsums (m : Matrix) : Vector = map sum m
def t : Vector = rowsums [[1, 2], [3, 4]]
";
    assert_eq!(run(src).unwrap().to_string(), "[3.0, 7.0]");
    // `type` is still an ordinary name elsewhere.
    assert_eq!(
        run("def t = let type = 2 in type + 1").unwrap().to_string(),
        "3"
    );
    let e = load("type Real = Int\ndef t = 1").unwrap_err();
    assert_eq!(
        e.message(),
        "`Real` is a built-in type and cannot be redefined"
    );
    let e = load("type V = Array Real\ntype V = Real\ndef t = 1").unwrap_err();
    assert_eq!(e.message(), "type `V` is defined twice");
    // Used before its definition: unknown, with a suggestion.
    let e = load("def f (x : Vec) : Real = 1\ntype Vec = Array Real").unwrap_err();
    assert_eq!(e.message(), "unknown type `Vec`");
    let e = load("type Matrix = Array (Array Real)\ndef f (m : Matrx) = 1.0").unwrap_err();
    assert_eq!(e.notes(), ["did you mean `Matrix`?"]);
    let e = load("def f (x : Float) = x").unwrap_err();
    assert_eq!(e.notes(), ["did you mean `Real`?"]);
}

/// The first note of the error of loading `src`, with the error's message and position.
fn error(src: &str) -> (String, String, Vec<String>) {
    let e = load(src).expect_err(src);
    let loc = e.location(&Source::new("t.chad", src)).unwrap_or_default();
    (e.message().to_string(), loc, e.notes().to_vec())
}

#[test]
fn errors_hint() {
    // `xs[0]` as in Python.
    let (m, loc, notes) = error("def f (xs : Array Real) : Real = xs[0]");
    assert_eq!(
        m,
        "`xs` has type `Array Real` and cannot be applied to an argument"
    );
    assert_eq!(loc, "t.chad:1:36");
    assert_eq!(notes, ["arrays are indexed with `!`: `xs ! 0`"]);
    // `pow x -1` is a subtraction.
    let (m, _, notes) = error("def f (x : Real) : Real = pow x -1");
    assert_eq!(m, "`pow` takes 2 arguments, but is given 1");
    assert_eq!(
        notes.last().unwrap(),
        "`pow x -1` is the subtraction `(pow x) - 1`: a negative argument needs parentheses, `pow x (-1)`"
    );
    let (m, loc, notes) = error("def f (x : Real) : Real = x ^ 2 + pow x -1 + 3");
    assert_eq!(m, "`pow` takes 2 arguments, but is given 1");
    assert_eq!(loc, "t.chad:1:35");
    assert_eq!(
        notes.last().unwrap(),
        "`pow x -1` is the subtraction `(pow x) - 1`: a negative argument needs parentheses, `pow x (-1)`"
    );
    // `**` is not an operator.
    let (m, loc, notes) = error("def f (x : Real) : Real = x ** 2");
    assert_eq!(m, "`**` is not an operator");
    assert_eq!(loc, "t.chad:1:29");
    assert_eq!(notes, ["write a power as `x ^ y` (or `pow x y`)"]);
    // `%` is on Ints only.
    let (m, _, notes) = error("def f (x : Real) : Real = x % 2.0");
    assert_eq!(m, "operator `%` expects Int operands, found `Real`");
    assert!(notes[0].contains("floor"), "{notes:?}");
    // An arity error names the definition, with too many arguments or too few.
    let (m, loc, _) = error("def g (x : Real) : Real = x\ndef f : Real = g 1 2");
    assert_eq!(m, "`g` takes 1 argument, but is given 2");
    assert_eq!(loc, "t.chad:2:20");
    let (m, loc, notes) = error(
        "def g (x : Real) (y : Real) (z : Real) : Real = x\ndef f (x : Real) : Real = 1 + g x",
    );
    assert_eq!(m, "`g` takes 3 arguments, but is given 1");
    assert_eq!(loc, "t.chad:2:31");
    assert_eq!(notes, ["a `Real` is expected here"]);
    // No far-fetched suggestions for short names: `n` is not "`inl`?".
    let (m, _, notes) = error("def f (x : Real) : Real = x * n");
    assert_eq!(m, "unknown variable `n`");
    assert!(notes.is_empty(), "{notes:?}");
    let (_, _, notes) = error("def f (xs : Array Real) : Real = maximun xs");
    assert_eq!(notes, ["did you mean `maximum`?"]);
    let (_, _, notes) = error("def f (xs : Array Real) : Real = sin (xz ! 0)");
    assert_eq!(notes, ["did you mean `xs`?"]);
    // Names from other languages.
    let (_, _, notes) = error("def f (xs : Array Real) : Int = len xs");
    assert_eq!(notes, ["the length of an array is `length xs`"]);
    let (_, _, notes) = error("def f (x : Real) : Real = ln x");
    assert_eq!(notes, ["the natural logarithm is `log`"]);
    let (_, _, notes) = error("def f (i : Int) : Int = mod i 2");
    assert_eq!(notes, ["the remainder of Int division is `i % n`"]);
}

/// Programs that define functions with the new builtins' names keep working: definitions and
/// locals shadow builtins.
#[test]
fn definitions_shadow_the_new_builtins() {
    let src = "def softplus (x : Real) : Real = log (1.0 + exp x) + 100.0
def mean (xs : Array Real) : Real = sum xs
def pi = 3.0
def t = (softplus 0.0, mean [1.0, 2.0], pi, let relu = 5.0 in relu, let zip = 1 in zip % 2)";
    assert_eq!(
        run(src).unwrap().to_string(),
        format!("({}, 3.0, 3.0, 5.0, 1)", std::f64::consts::LN_2 + 100.0)
    );
}

/// Runtime errors of the new forms, with positions.
#[test]
fn runtime_errors() {
    let fail = |expr: &str| {
        let src = format!("def t = {expr}");
        let e = run(&src).expect_err(expr);
        let loc = e.location(&Source::new("t.chad", src.clone())).unwrap();
        (e.message().to_string(), loc)
    };
    assert_eq!(
        fail("let n = 0 in 7 % n"),
        (
            "integer remainder by zero (7 % 0)".into(),
            "t.chad:1:22".into()
        )
    );
    assert_eq!(
        fail("let n = 0 - 1 in 2 ^ n").0,
        "negative exponent in 2 ^ (-1): an Int power needs an exponent >= 0"
    );
    assert_eq!(
        fail("let n = 3 in n ^ 100").0,
        "integer overflow in 3 ^ 100"
    );
    assert_eq!(
        fail("maximum ([] : Array Real)"),
        ("argmax of an empty array".into(), "t.chad:1:9".into())
    );
    assert_eq!(
        fail("slice [1.0, 2.0] 1 3").0,
        "index 2 out of range for an array of length 2"
    );
}

/// A program using every new builtin and form, with three inputs.
const EVERYTHING: &str = "
type Vec = Array Real
def everything (x : Real) (y : Real) (xs : Vec) : Real =
  let a = asin (0.5 * tanh x) + acos (0.3 * tanh y) + atan x + sinh y + cosh x in
  let b = atan2 y x + log1p (x * x) + expm1 y + erf x + relu x + relu (0 - y) in
  let c = softplus y + sign x * x + x ^ 2 + y ^ 3 + (1.5 + tanh x) ^ y + x ^ -1 in
  let d = pi * mean xs + maximum xs * minimum xs + toReal (argmax xs) * x in
  let e = sum (map (\\p -> fst p * snd p) (zip xs (reverse xs))) in
  let f = sum (fst (unzip (zip xs xs))) * y + sum (slice xs 1 3) * x in
  let g = dot (concat xs [x, y]) (concat [y, x] xs) in
  let h = toReal (7 % 3 + 2 ^ 3) * x * y in
  a + b + c + d + e + f + g + h
";

fn everything() -> Entry {
    let p = load(EVERYTHING).unwrap_or_else(|e| panic!("{}", render(EVERYTHING, &e)));
    p.entry(p.defs.len() - 1)
}

fn points() -> Vec<Vec<Value>> {
    [
        (0.7, -0.4, vec![0.5, 2.0, -1.5, 1.0]),
        (-1.3, 0.9, vec![-0.25, 0.75, 3.0]),
        (2.1, 1.7, vec![1.0, -2.0, 0.5, 0.3, -0.8]),
    ]
    .into_iter()
    .map(|(x, y, xs)| vec![Value::Real(x), Value::Real(y), Value::reals(xs)])
    .collect()
}

fn leaves(vs: &[Value]) -> Vec<f64> {
    vs.iter()
        .flat_map(chad::internals::oracle::fd::leaves)
        .collect()
}

fn assert_close(what: &str, a: &[f64], b: &[f64], rel: f64) {
    assert_eq!(a.len(), b.len(), "{what}");
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!(
            (x - y).abs() <= rel * (1.0 + x.abs().max(y.abs())),
            "{what}, component {i}: {x} vs {y}\n{a:?}\n{b:?}"
        );
    }
}

/// The gradient by central differences.
fn fd_gradient(e: &Entry, args: &[Value]) -> Vec<f64> {
    let types: Vec<_> = e.params.iter().map(|p| p.ty.clone()).collect();
    chad::internals::oracle::fd::basis(&types, args)
        .iter()
        .map(|dir| {
            chad::internals::oracle::fd::jvp(e, args, dir, 1e-6)
                .unwrap()
                .expect_real()
        })
        .collect()
}

#[test]
fn every_engine_differentiates_the_new_forms() {
    let e = everything();
    let types: Vec<_> = e.params.iter().map(|p| p.ty.clone()).collect();
    let dual_rev = DualReverse::new(&e, Options::default()).unwrap();
    for args in points() {
        let y = chad::internals::eval::eval_entry(&e, &args)
            .unwrap()
            .expect_real();
        assert!(y.is_finite());
        let fd = fd_gradient(&e, &args);
        // Reverse CHAD.
        let (v, g) = chad::internals::ad::grad(&e, &args).unwrap();
        assert_eq!(v.expect_real(), y);
        let g = leaves(&g);
        assert_close("reverse CHAD vs finite differences", &g, &fd, 1e-6);
        // Forward CHAD and the dual-number oracle, one basis direction at a time.
        let basis = chad::internals::oracle::fd::basis(&types, &args);
        let fwd: Vec<f64> = basis
            .iter()
            .map(|d| {
                chad::internals::ad::jvp(&e, &args, d)
                    .unwrap()
                    .1
                    .expect_real()
            })
            .collect();
        assert_close("forward CHAD vs reverse CHAD", &fwd, &g, 1e-12);
        let dual: Vec<f64> = basis
            .iter()
            .map(|d| {
                chad::internals::oracle::dual::jvp(&e, &args, d)
                    .unwrap()
                    .1
                    .expect_real()
            })
            .collect();
        assert_close("dual numbers vs reverse CHAD", &dual, &g, 1e-12);
        // The dual-numbers reverse engine.
        let out = dual_rev.vjp(&args, &Value::Real(1.0)).unwrap();
        assert_close(
            "dual-numbers reverse vs reverse CHAD",
            &leaves(&out.gradient),
            &g,
            1e-12,
        );
    }
}

/// The conventions at the non-differentiable points: relu'(0) = 0, sign' = 0, atan2's
/// derivative 0 at the origin; argmax (an Int) has none, so `maximum`'s derivative is 1 at the
/// first largest element only.
#[test]
fn conventions_at_kinks() {
    let src = "def k (x : Real) (y : Real) (xs : Array Real) : Real =
      relu x + sign x * 3.0 + atan2 y x + maximum xs";
    let e = load(src).unwrap().entry(0);
    let args = [
        Value::Real(0.0),
        Value::Real(0.0),
        Value::reals(vec![1.0, 4.0, 4.0]),
    ];
    let expected = vec![0.0, 0.0, 0.0, 1.0, 0.0];
    let (_, g) = chad::internals::ad::grad(&e, &args).unwrap();
    assert_eq!(leaves(&g), expected);
    let out = DualReverse::new(&e, Options::default())
        .unwrap()
        .vjp(&args, &Value::Real(1.0))
        .unwrap();
    assert_eq!(leaves(&out.gradient), expected);
    let types: Vec<_> = e.params.iter().map(|p| p.ty.clone()).collect();
    for (d, want) in chad::internals::oracle::fd::basis(&types, &args)
        .iter()
        .zip(&expected)
    {
        assert_eq!(
            chad::internals::ad::jvp(&e, &args, d)
                .unwrap()
                .1
                .expect_real(),
            *want
        );
        assert_eq!(
            chad::internals::oracle::dual::jvp(&e, &args, d)
                .unwrap()
                .1
                .expect_real(),
            *want
        );
    }
    // relu' is 1 just right of 0 and 0 just left of it.
    let relu = load("def r (x : Real) : Real = relu x").unwrap().entry(0);
    for (x, d) in [(1e-300, 1.0), (-1e-300, 0.0), (0.0, 0.0), (-0.0, 0.0)] {
        let (_, g) = chad::internals::ad::grad(&relu, &[Value::Real(x)]).unwrap();
        assert_eq!(g[0].expect_real(), d, "relu' {x}");
    }
}

/// The native backend compiles every new builtin and agrees with the interpreter on the primal,
/// a JVP and a VJP; and reports the new runtime errors as the interpreter does.
#[test]
fn natively() {
    assert!(
        chad::internals::native::available(),
        "the native backend needs rustc"
    );
    let errs = "
def rem0 (n : Int) : Int = 7 % n
def pow_neg (n : Int) : Int = 2 ^ n
def empty_max (xs : Array Real) : Real = maximum xs
def ints (n : Int) (k : Int) : Int = n % 3 + (n - 5) % 4 + k ^ 3 + argmin [3.0, toReal n, 1.0]
";
    let prog = load(&format!("{EVERYTHING}{errs}")).unwrap();
    let entries: Vec<Entry> = (0..prog.defs.len()).map(|k| prog.entry(k)).collect();
    let parts = chad::internals::ir::compile::Parts {
        jvp: true,
        vjp: true,
        required: false,
    };
    let module = chad::internals::ir::compile::Module::new(&entries, parts).unwrap();
    let native = chad::internals::native::Native::module(module, None, false)
        .unwrap_or_else(|e| panic!("{}", e.render(None)));
    let e = &entries[0];
    for args in points() {
        let y = chad::internals::eval::eval_entry(e, &args).unwrap();
        let ny = native.eval_def(0, &args).unwrap();
        assert_close(
            "native primal",
            &[ny.expect_real()],
            &[y.expect_real()],
            1e-14,
        );
        let (_, g) = chad::internals::ad::grad(e, &args).unwrap();
        let (nv, ng) = native.vjp_def(0, &args, &Value::Real(1.0)).unwrap();
        assert_close(
            "native value",
            &[nv.expect_real()],
            &[y.expect_real()],
            1e-14,
        );
        assert_close("native gradient", &leaves(&ng), &leaves(&g), 1e-12);
        let types: Vec<_> = e.params.iter().map(|p| p.ty.clone()).collect();
        for (d, gi) in chad::internals::oracle::fd::basis(&types, &args)
            .iter()
            .zip(leaves(&g))
        {
            let (_, t) = native.jvp_def(0, &args, d).unwrap();
            assert_close("native jvp", &[t.expect_real()], &[gi], 1e-12);
        }
    }
    let int = Value::Int;
    let cases: [(usize, Vec<Value>); 4] = [
        (1, vec![int(0)]),
        (2, vec![int(-2)]),
        (3, vec![Value::reals(vec![])]),
        (4, vec![int(-7), int(5)]),
    ];
    for (k, args) in cases {
        let interp = chad::internals::eval::eval_entry(&entries[k], &args);
        let nat = native.eval_def(k, &args);
        match (&interp, &nat) {
            (Ok(a), Ok(b)) => assert_eq!(a.same(b), Some(true), "{}", entries[k].name),
            (Err(a), Err(b)) => {
                assert_eq!(a.message(), b.message(), "{}", entries[k].name);
                assert_eq!(a.span(), b.span(), "{}", entries[k].name);
            }
            _ => panic!("{}: {interp:?} vs {nat:?}", entries[k].name),
        }
    }
    assert_eq!(
        native.eval_def(4, &[int(-7), int(5)]).unwrap().to_string(),
        "125"
    );
}
