//! The `chad` binary: commands, output formats, exit statuses and error messages
//! (LANGUAGE.md's command-line contract). Golden files live in `tests/golden/`; run with
//! `CHAD_BLESS=1` to rewrite them after an intended change.

use std::path::{Path, PathBuf};
use std::process::Command;

struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

fn chad(args: &[&str]) -> Out {
    let out = Command::new(env!("CARGO_BIN_EXE_chad"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run chad");
    let o = Out {
        code: out.status.code().expect("exited normally, not by a signal"),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    };
    assert!(
        !o.stderr.contains("panicked"),
        "chad panicked: {}",
        o.stderr
    );
    o
}

/// Writes a temporary program file and returns its path.
fn file(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("chad-cli-tests-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn golden(name: &str, actual: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name);
    if std::env::var_os("CHAD_BLESS").is_some() {
        std::fs::write(&path, actual).unwrap();
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|_| {
        panic!(
            "missing golden file {}; run with CHAD_BLESS=1",
            path.display()
        )
    });
    assert_eq!(actual, expected, "output differs from {}", path.display());
}

// ----- successful commands -----

#[test]
fn check_prints_each_definition_with_its_type() {
    let o = chad(&["check", "examples/ml.chad"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(
        o.stdout,
        "compose : (Real -> Real) -> (Real -> Real) -> Real -> Real\n\
         twice : (Real -> Real) -> Real -> Real\n\
         safeDiv : Real -> Real -> Real + Unit\n\
         orElse : Real -> Real + Unit -> Real\n\
         poly : Array Real -> Real -> Real\n\
         main : Real -> Array Real -> Real\n"
    );
}

#[test]
fn check_json() {
    let o = chad(&["check", "examples/fig2b.chad", "--json"]);
    assert_eq!(o.code, 0);
    assert_eq!(
        o.stdout,
        "{\"defs\":{\"fig2b\":\"Real -> Array Real -> Real\"}}\n"
    );
}

#[test]
fn eval_text_and_json() {
    let o = chad(&[
        "eval",
        "examples/fig1b.chad",
        "--arg",
        "1",
        "--arg",
        "2",
        "--arg",
        "3",
        "--arg",
        "4",
    ]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    // y = 1*4 + 2*2 = 8, z = 24, w = 28, v = sin 28
    assert_eq!(o.stdout.trim().parse::<f64>().unwrap(), 28f64.sin());
    let o = chad(&["eval", "examples/fig1a.chad", "--arg", "1.5", "--json"]);
    assert_eq!(o.code, 0);
    let j: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    let v = j["value"].as_array().unwrap();
    assert_eq!(v[0], 3.0);
    assert_eq!(v[1], 4.5);
    assert_eq!(v[2].as_f64().unwrap(), 4.5f64.cos());
}

#[test]
fn eval_structured_values_and_negative_numbers() {
    let p = file(
        "values.chad",
        "def f (x : Real) (p : (Int, Array Real)) (s : Real + Unit) : (Real, Real + Unit, Int) =\n  \
           (x * sum (snd p), s, fst p)\n",
    );
    let o = chad(&[
        "eval",
        s(&p),
        "--arg",
        "-2",
        "--arg",
        "(3, [1.0, 2e-1])",
        "--arg",
        "inl -1",
    ]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(o.stdout, "(-2.4, inl (-1.0), 3)\n");
    let o = chad(&[
        "eval",
        s(&p),
        "--arg=-2",
        "--arg",
        "(3, [0.5])",
        "--arg",
        "inr ()",
        "--json",
    ]);
    assert_eq!(o.stdout, "{\"value\":[-1.0,{\"inr\":null},3]}\n");
}

#[test]
fn eval_args_file() {
    let args = file("args.json", "[2.0, [1, 2, 3]]");
    let o = chad(&["eval", "examples/fig2b.chad", "--args-file", s(&args)]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(o.stdout, "12.0\n");
    let o = chad(&[
        "eval",
        "examples/fig2b.chad",
        "--args-file",
        s(&args),
        "--json",
    ]);
    assert_eq!(o.stdout, "{\"value\":12.0}\n");
}

#[test]
fn eval_selects_a_definition_and_both_engines_agree() {
    let a = chad(&[
        "eval",
        "examples/ml.chad",
        "--def",
        "poly",
        "--arg",
        "[1, 2, 3]",
        "--arg",
        "2",
    ]);
    assert_eq!(a.code, 0, "{}", a.stderr);
    assert_eq!(a.stdout, "17.0\n"); // 1 + 2*2 + 3*4
    let b = chad(&[
        "eval",
        "examples/ml.chad",
        "--def",
        "poly",
        "--engine",
        "direct",
        "--arg",
        "[1, 2, 3]",
        "--arg",
        "2",
    ]);
    assert_eq!(a.stdout, b.stdout);
}

#[test]
fn eval_of_a_function_valued_definition() {
    let o = chad(&["eval", "examples/ml.chad", "--def", "twice", "--arg", "1"]);
    assert_eq!(o.code, 1);
    assert!(
        o.stderr.contains(
            "argument 1: a value of function type `Real -> Real` cannot be given as an argument"
        ),
        "{}",
        o.stderr
    );
    let p = file(
        "fn.chad",
        "def f (x : Real) : Real -> Real = \\(y : Real) -> x * y\n",
    );
    let o = chad(&["eval", s(&p), "--arg", "1"]);
    assert_eq!((o.code, o.stdout.as_str()), (0, "<function>\n"));
}

#[test]
fn show_stages_match_golden_files() {
    for ex in ["fig1a", "fig1b", "fig2a", "fig2b", "ml"] {
        let path = format!("examples/{ex}.chad");
        for stage in ["source", "ccc"] {
            let o = chad(&["show", &path, "--stage", stage]);
            assert_eq!(o.code, 0, "{}", o.stderr);
            golden(&format!("{ex}.{stage}.txt"), &o.stdout);
        }
    }
}

// ----- errors: exit status 1 with one clear message; 2 for usage -----

fn fails(args: &[&str], code: i32, needles: &[&str]) {
    let o = chad(args);
    assert_eq!(
        o.code, code,
        "{args:?}: stdout {} stderr {}",
        o.stdout, o.stderr
    );
    for n in needles {
        assert!(
            o.stderr.contains(n),
            "{args:?}: expected `{n}` in:\n{}",
            o.stderr
        );
    }
}

#[test]
fn syntax_errors_name_file_line_and_column() {
    let p = file(
        "syntax.chad",
        "def f (x : Real) : Real =\n  let y = x * in y\n",
    );
    fails(
        &["check", s(&p)],
        1,
        &[
            "syntax error: expected an expression, found keyword `in`",
            "syntax.chad:2:15",
        ],
    );
    let p = file("lex.chad", "def f (x : Real) = x @ 2\n");
    fails(
        &["eval", s(&p), "--arg", "1"],
        1,
        &["unexpected character `@`", "lex.chad:1:22"],
    );
}

#[test]
fn type_errors_name_file_line_and_column() {
    let p = file("unknown.chad", "def f (x : Real) : Real =\n  x + y\n");
    fails(
        &["check", s(&p)],
        1,
        &["type error: unknown variable `y`", "unknown.chad:2:7"],
    );
    let p = file("mismatch.chad", "def f (n : Int) : Real = n * 2\n");
    fails(
        &["check", s(&p)],
        1,
        &[
            "type mismatch: expected `Real`, found `Int`",
            "mismatch.chad:1:26",
            "toReal",
        ],
    );
}

#[test]
fn bad_argument_values() {
    fails(
        &["eval", "examples/fig1a.chad", "--arg", "true"],
        1,
        &[
            "argument 1: expected a value of type `Real`",
            "argument 1:1:1",
        ],
    );
    fails(
        &[
            "eval",
            "examples/fig2b.chad",
            "--arg",
            "1",
            "--arg",
            "[1.0,",
        ],
        1,
        &["argument 2: expected an expression, found end of input"],
    );
    fails(
        &[
            "eval",
            "examples/fig2b.chad",
            "--arg",
            "1",
            "--arg",
            "[1.0, (2.0, 3.0)]",
        ],
        1,
        &[
            "argument 2: expected a value of type `Real`",
            "argument 2:1:7",
        ],
    );
}

#[test]
fn wrong_argument_count() {
    fails(
        &["eval", "examples/fig2b.chad", "--arg", "1"],
        1,
        &["the definition takes 2 arguments, but 1 was given"],
    );
    let args = file("three.json", "[1, [2], 3]");
    fails(
        &["eval", "examples/fig2b.chad", "--args-file", s(&args)],
        1,
        &["takes 2 arguments, but 3 were given"],
    );
}

#[test]
fn bad_args_files() {
    let bad = file("bad.json", "[1, ");
    fails(
        &["eval", "examples/fig2b.chad", "--args-file", s(&bad)],
        1,
        &["is not valid JSON"],
    );
    let obj = file("obj.json", "{\"x\": 1}");
    fails(
        &["eval", "examples/fig2b.chad", "--args-file", s(&obj)],
        1,
        &["must hold a JSON array of arguments"],
    );
    let wrong = file("wrong.json", "[1, [true]]");
    fails(
        &["eval", "examples/fig2b.chad", "--args-file", s(&wrong)],
        1,
        &["argument 2: expected a JSON value of type Real, found `true`"],
    );
    fails(
        &[
            "eval",
            "examples/fig2b.chad",
            "--args-file",
            "/nonexistent/args.json",
        ],
        1,
        &["cannot read `/nonexistent/args.json`"],
    );
}

#[test]
fn runtime_errors_with_positions() {
    let p = file("index.chad", "def f (xs : Array Real) : Real =\n  xs ! 3\n");
    fails(
        &["eval", s(&p), "--arg", "[1.0, 2.0]"],
        1,
        &[
            "runtime error: index 3 out of range for an array of length 2",
            "index.chad:2:3",
        ],
    );
    let p = file(
        "map2.chad",
        "def f (xs : Array Real) (ys : Array Real) =\n  map2 (\\(a : Real) (b : Real) -> a * b) xs ys\n",
    );
    fails(
        &["eval", s(&p), "--arg", "[1.0]", "--arg", "[1.0, 2.0]"],
        1,
        &[
            "map2: arrays have different lengths (1 and 2)",
            "map2.chad:2:3",
        ],
    );
    fails(
        &[
            "eval",
            s(&p),
            "--engine",
            "direct",
            "--arg",
            "[1.0]",
            "--arg",
            "[1.0, 2.0]",
        ],
        1,
        &["map2.chad:2:3"],
    );
    let p = file("div.chad", "def f (n : Int) : Int = 10 / n\n");
    fails(
        &["eval", s(&p), "--arg", "0"],
        1,
        &["integer division by zero (10 / 0)", "div.chad:1:25"],
    );
}

#[test]
fn missing_file_definition_or_definitions() {
    fails(
        &["check", "no/such/file.chad"],
        1,
        &["cannot read `no/such/file.chad`"],
    );
    fails(
        &["eval", "examples/ml.chad", "--def", "nope"],
        1,
        &["no definition named `nope`", "definitions: compose, twice"],
    );
    let empty = file("empty.chad", "# nothing here\n");
    fails(&["eval", s(&empty)], 1, &["has no definitions"]);
}

#[test]
fn usage_errors_exit_with_status_2() {
    fails(&["frobnicate", "x.chad"], 2, &["unrecognized subcommand"]);
    fails(
        &["show", "examples/fig1a.chad", "--stage", "bogus"],
        2,
        &["invalid value 'bogus'"],
    );
    fails(&["show", "examples/fig1a.chad"], 2, &["--stage"]);
    let args = file("ok.json", "[1.0]");
    fails(
        &[
            "eval",
            "examples/fig1a.chad",
            "--arg",
            "1",
            "--args-file",
            s(&args),
        ],
        2,
        &["cannot be used with"],
    );
    fails(&["eval"], 2, &["<FILE>"]);
}

#[test]
fn deeply_nested_programs_do_not_crash() {
    let n = 50_000;
    let p = file(
        "deep.chad",
        &format!(
            "def f (x : Real) : Real = {}x{}\n",
            "(".repeat(n),
            ")".repeat(n)
        ),
    );
    let o = chad(&["eval", s(&p), "--arg", "1"]);
    assert_eq!((o.code, o.stdout.as_str()), (0, "1.0\n"), "{}", o.stderr);
    let mut lets = String::from("def f (x : Real) : Real =\n");
    for i in 0..20_000 {
        lets.push_str(&format!("  let x{i} = x * 1.0001 + {i} in\n"));
    }
    lets.push_str("  x19999\n");
    let p = file("lets.chad", &lets);
    let o = chad(&["eval", s(&p), "--arg", "1"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let p = file(
        "toodeep.chad",
        &format!(
            "def f : Real = {}1.0{}\n",
            "[".repeat(200_000),
            "]".repeat(200_000)
        ),
    );
    fails(&["check", s(&p)], 1, &["nested too deeply"]);
}
