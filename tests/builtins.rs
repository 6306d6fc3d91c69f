//! Every builtin and construct, evaluated through the whole pipeline by both engines (the
//! direct evaluator and the combinator model), against hand-computed values; and every runtime
//! error, with its message and source position.

use chad::Value;
use chad::internals::ccc;
use chad::internals::prim::Registry;
use chad::{Error, Source};

/// Evaluates the last definition of `src` (no parameters) with both engines, which must agree.
fn run(src: &str) -> Result<Value, Error> {
    let prog = chad::internals::source::load(src, &Registry::builtin())
        .unwrap_or_else(|e| panic!("{src}: {e:?}"));
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

fn value(expr: &str) -> String {
    let src = format!("def t = {expr}");
    run(&src)
        .unwrap_or_else(|e| panic!("{expr}: {e:?}"))
        .to_string()
}

fn real(expr: &str) -> f64 {
    let src = format!("def t : Real = {expr}");
    run(&src)
        .unwrap_or_else(|e| panic!("{expr}: {e:?}"))
        .expect_real()
}

fn close(expr: &str, expected: f64) {
    let got = real(expr);
    assert!(
        got == expected || (got - expected).abs() <= 1e-15 * expected.abs().max(1.0),
        "{expr} = {got}, expected {expected}"
    );
}

#[test]
fn real_builtins() {
    close("sin 0.5", 0.479_425_538_604_203);
    close("cos 0.5", 0.877_582_561_890_372_8);
    close("tan 0.5", 0.546_302_489_843_790_5);
    close("exp 1", std::f64::consts::E);
    close("log 10", std::f64::consts::LN_10);
    close("sqrt 2", std::f64::consts::SQRT_2);
    close("tanh 0.5", 0.462_117_157_260_009_8);
    close("sigmoid 0", 0.5);
    close("sigmoid 2", 0.880_797_077_977_882_3);
    close("abs (-2.5)", 2.5);
    close("pow 2 10", 1024.0);
    close("pow 9 0.5", 3.0);
    close("max 1 2", 2.0);
    close("min 1 2", 1.0);
    close("max (-1) (-2)", -1.0);
    close("toReal 7", 7.0);
    close("sum [1, 2, 3.5]", 6.5);
    close("sum []", 0.0);
    close("dot [1, 2, 3] [4, 5, 6]", 32.0);
    close("1.5 + 2 * 3 - 4 / 8", 7.0);
    close("-(2 - 5)", 3.0);
    close("1 / 0", f64::INFINITY);
    assert_eq!(value("floor 2.7"), "2");
    assert_eq!(value("floor (-2.5)"), "-3");
}

#[test]
fn int_and_bool_builtins() {
    assert_eq!(value("7 / 2"), "3");
    assert_eq!(value("-7 / 2"), "-3");
    assert_eq!(value("2 + 3 * 4 - 1"), "13");
    assert_eq!(value("-(3)"), "-3");
    assert_eq!(
        value("(1 < 2, 2 <= 2, 3 > 4, 4 >= 5, 1 == 1, 1 != 1)"),
        "(true, true, false, false, true, false)"
    );
    assert_eq!(
        value("(1.5 < 2, 2.0 <= 1, 0.1 + 0.2 == 0.3, 1.0 != 2.0)"),
        "(true, false, false, true)"
    );
    assert_eq!(
        value("(true == false, true != false, not true)"),
        "(false, true, false)"
    );
    assert_eq!(
        value("(true && false, true || false, false || false && true)"),
        "(false, true, false)"
    );
}

#[test]
fn arrays_and_polymorphic_builtins() {
    assert_eq!(
        value("map (\\(x : Real) -> x * x) [1, 2, 3]"),
        "[1.0, 4.0, 9.0]"
    );
    assert_eq!(value("map exp []"), "[]");
    assert_eq!(
        value("map2 (\\(a : Real) (b : Int) -> a * toReal b) [1, 2] [3, 4]"),
        "[3.0, 8.0]"
    );
    assert_eq!(value("map2 max [1, 5] [3, 4]"), "[3.0, 5.0]");
    assert_eq!(value("build 4 (\\(i : Int) -> i * i)"), "[0, 1, 4, 9]");
    assert_eq!(value("build 0 (\\(i : Int) -> 1.0)"), "[]");
    assert_eq!(value("length [true, false, true]"), "3");
    assert_eq!(
        value("replicate 3 (1, true)"),
        "[(1, true), (1, true), (1, true)]"
    );
    assert_eq!(value("[[1.0, 2.0], [3.0]] ! 1 ! 0"), "3.0");
    assert_eq!(value("(fst (1, 2.0), snd (1, 2.0))"), "(1, 2.0)");
    assert_eq!(
        value("((inl 1 : Int + Bool), (inr true : Int + Bool))"),
        "(inl 1, inr true)"
    );
    assert_eq!(
        value("case (inr 2.0 : Int + Real) of inl n -> toReal n | inr x -> x * 10"),
        "20.0"
    );
    assert_eq!(value("if 1 < 2 then [1.0] else []"), "[1.0]");
    assert_eq!(
        value("let (a, (b, c)) = (1, 2, 3) in a * 100 + b * 10 + c"),
        "123"
    );
    // Higher-order: partial application, closures, functions in tuples and arrays.
    assert_eq!(
        value("let add = \\(a : Real) (b : Real) -> a + b in map (add 10) [1, 2]"),
        "[11.0, 12.0]"
    );
    assert_eq!(
        value("let fs = [sin, cos, \\(x : Real) -> x] in map (\\(f : Real -> Real) -> f 0) fs"),
        "[0.0, 1.0, 0.0]"
    );
    assert_eq!(value("let p = (exp, 2.0) in (fst p) 0 + snd p"), "3.0");
    assert_eq!(
        value("let k = \\(x : Real) -> \\(y : Real) -> x in (k 1) 2"),
        "1.0"
    );
}

#[test]
fn short_circuit_avoids_evaluating_the_right_operand() {
    assert_eq!(
        value("let xs = [1.0] in length xs > 5 && xs ! 5 > 0.0"),
        "false"
    );
    assert_eq!(
        value("let xs = [1.0] in length xs < 5 || xs ! 5 > 0.0"),
        "true"
    );
}

#[test]
fn definitions_use_earlier_definitions() {
    let v = run("def sq (x : Real) : Real = x * x\ndef k = 3.0\ndef t = sq k + sq 2").unwrap();
    assert_eq!(v.to_string(), "13.0");
}

/// The runtime error of `expr` and its `line:column` in the file `def t = expr`.
fn failure(expr: &str) -> (String, String) {
    let src = format!("def t = {expr}");
    let e = run(&src).expect_err(expr);
    let source = Source::new("t.chad", src.clone());
    let loc = e.location(&source).expect("runtime errors have a position");
    (e.message().to_string(), loc)
}

#[test]
fn runtime_errors_are_errors_with_positions() {
    assert_eq!(
        failure("[1.0, 2.0] ! 2"),
        (
            "index 2 out of range for an array of length 2".into(),
            "t.chad:1:9".into()
        )
    );
    assert_eq!(
        failure("[1.0] ! (0 - 1)").0,
        "index -1 out of range for an array of length 1"
    );
    assert_eq!(
        failure("map2 (\\(a : Real) (b : Real) -> a) [1.0] [1.0, 2.0]"),
        (
            "map2: arrays have different lengths (1 and 2)".into(),
            "t.chad:1:9".into()
        )
    );
    assert_eq!(
        failure("1 + 7 / (2 - 2)"),
        (
            "integer division by zero (7 / 0)".into(),
            "t.chad:1:13".into()
        )
    );
    assert_eq!(
        failure("replicate (0 - 2) 1.0").0,
        "replicate: negative length -2"
    );
    assert_eq!(
        failure("build (0 - 1) (\\(i : Int) -> i)").0,
        "build: negative length -1"
    );
    assert_eq!(
        failure("build 1000000000 (\\(i : Int) -> i)").0,
        "build: length 1000000000 exceeds the limit of 268435456 elements"
    );
    assert_eq!(
        failure("dot [1.0] [1.0, 2.0]").0,
        "dot: arrays have different lengths (1 and 2)"
    );
    assert_eq!(
        failure("floor (1.0 / 0.0)").0,
        "floor: inf is not in the range of Int"
    );
    assert_eq!(
        failure("9223372036854775807 + 1").0,
        "integer overflow in 9223372036854775807 + 1"
    );
    // An error inside a mapped closure points at the operation inside the closure.
    let (msg, loc) = failure("map (\\(i : Int) -> [1, 2] ! i) [0, 5]");
    assert_eq!(msg, "index 5 out of range for an array of length 2");
    assert_eq!(loc, "t.chad:1:28");
}
