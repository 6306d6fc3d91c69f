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
    if actual != expected {
        panic!("{}", golden_diff(&path, &expected, actual));
    }
}

/// Describes how `actual` differs from a golden file: the changed block of lines (after the
/// common prefix and suffix) with some context, `-` expected and `+` actual.
fn golden_diff(path: &Path, expected: &str, actual: &str) -> String {
    let (e, a): (Vec<&str>, Vec<&str>) = (expected.lines().collect(), actual.lines().collect());
    let mut m = format!(
        "output differs from {} ({} lines expected, {} lines actual)\n",
        path.display(),
        e.len(),
        a.len()
    );
    if e == a {
        m.push_str("the lines agree: the difference is in line endings or the final newline\n");
    } else {
        let prefix = e.iter().zip(&a).take_while(|(x, y)| x == y).count();
        let max_suffix = e.len().min(a.len()) - prefix;
        let suffix = e
            .iter()
            .rev()
            .zip(a.iter().rev())
            .take(max_suffix)
            .take_while(|(x, y)| x == y)
            .count();
        const CONTEXT: usize = 3;
        const SHOWN: usize = 25;
        m.push_str(&format!("first difference at line {}:\n", prefix + 1));
        for line in &e[prefix.saturating_sub(CONTEXT)..prefix] {
            m.push_str(&format!("   {line}\n"));
        }
        for (sign, lines) in [
            ("-", &e[prefix..e.len() - suffix]),
            ("+", &a[prefix..a.len() - suffix]),
        ] {
            for line in lines.iter().take(SHOWN) {
                m.push_str(&format!("{sign}  {line}\n"));
            }
            if lines.len() > SHOWN {
                m.push_str(&format!(
                    "{sign}  ... ({} more lines)\n",
                    lines.len() - SHOWN
                ));
            }
        }
        for line in e[e.len() - suffix..].iter().take(CONTEXT) {
            m.push_str(&format!("   {line}\n"));
        }
    }
    m.push_str("(- expected, + actual) If the change is intended, rerun with CHAD_BLESS=1 to update the file.");
    m
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
fn json_reals_round_trip_exactly() {
    // Shortest-form doubles read from JSON are the same doubles (serde_json's default parser is
    // off by one ulp on some of them; `float_roundtrip` makes it exact), so `--json` output can be
    // fed back through `--args-file`.
    let p = file("id.chad", "def id (x : Array Real) : Array Real = x\n");
    let xs = "[-0.9761296905457033,0.1,2.2250738585072014e-308,1.7976931348623157e308,0.30000000000000004]";
    let args = file("id.json", &format!("[{xs}]"));
    let o = chad(&["eval", s(&p), "--args-file", s(&args), "--json"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let back: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    let want: serde_json::Value = serde_json::from_str(xs).unwrap();
    assert_eq!(back["value"], want, "{}", o.stdout);
    let text = chad(&["eval", s(&p), "--args-file", s(&args)]);
    assert!(
        text.stdout.contains("-0.9761296905457033"),
        "{}",
        text.stdout
    );
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

#[test]
fn show_derivative_stages_match_golden_files() {
    // Simplified by default; `--no-simplify` is the raw output of the AD functors.
    for ex in ["fig1a", "fig1b", "fig2a", "fig2b"] {
        let path = format!("examples/{ex}.chad");
        for stage in ["forward", "reverse"] {
            let o = chad(&["show", &path, "--stage", stage]);
            assert_eq!(o.code, 0, "{}", o.stderr);
            golden(&format!("{ex}.{stage}.txt"), &o.stdout);
            let raw = chad(&["show", &path, "--stage", stage, "--no-simplify"]);
            assert_eq!(raw.code, 0, "{}", raw.stderr);
            golden(&format!("{ex}.{stage}.raw.txt"), &raw.stdout);
            assert!(
                o.stdout.len() * 2 < raw.stdout.len(),
                "{ex} {stage}: simplified output is not much smaller than the raw output"
            );
        }
    }
}

#[test]
fn show_transposed_stage_matches_golden_files() {
    // Reverse mode as the transpose of the simplified forward derivative (`grad --via
    // transpose`): the paper's Figure 1 and 2 programs.
    for ex in ["fig1a", "fig1b", "fig2a", "fig2b"] {
        let path = format!("examples/{ex}.chad");
        let o = chad(&["show", &path, "--stage", "transposed"]);
        assert_eq!(o.code, 0, "{}", o.stderr);
        golden(&format!("{ex}.transposed.txt"), &o.stdout);
    }
}

#[test]
fn golden_diff_points_at_the_changed_lines() {
    let m = golden_diff(Path::new("g.txt"), "a\nb\nc\nd\n", "a\nb\nX\nd\n");
    assert!(m.contains("first difference at line 3"), "{m}");
    assert!(m.contains("-  c\n+  X\n   d\n"), "{m}");
    assert!(m.contains("CHAD_BLESS=1"), "{m}");
    let m = golden_diff(Path::new("g.txt"), "a\nb\n", "a\nb");
    assert!(m.contains("final newline"), "{m}");
    let m = golden_diff(Path::new("g.txt"), "a\n", "a\nb\nc\n");
    assert!(m.contains("(1 lines expected, 3 lines actual)"), "{m}");
    assert!(m.contains("+  b\n+  c\n"), "{m}");
}

// ----- AD commands -----

/// Runs each command and returns a transcript: `$ chad ARGS` followed by its output.
fn transcript(commands: &[Vec<&str>]) -> String {
    let mut out = String::new();
    for args in commands {
        let o = chad(args);
        assert_eq!(o.code, 0, "{args:?}: {}", o.stderr);
        let shown: Vec<String> = args
            .iter()
            .map(|a| {
                if a.contains([' ', '(', ')', '[', ']']) {
                    format!("\"{a}\"")
                } else {
                    a.to_string()
                }
            })
            .collect();
        out.push_str(&format!("$ chad {}\n{}", shown.join(" "), o.stdout));
    }
    out
}

#[test]
fn grad_jvp_vjp_text_on_the_paper_examples_match_golden_files() {
    let f1a = "examples/fig1a.chad";
    let f1b = "examples/fig1b.chad";
    let f2a = "examples/fig2a.chad";
    let f2b = "examples/fig2b.chad";
    let cases: [(&str, Vec<Vec<&str>>); 4] = [
        (
            "fig1a",
            vec![
                vec!["jvp", f1a, "--arg", "0.5", "--tangent", "1"],
                vec!["jvp", f1a, "--arg", "0.5", "--tangent", "-2"],
                vec!["vjp", f1a, "--arg", "0.5", "--cotangent", "(1, 0, 0)"],
                vec!["vjp", f1a, "--arg", "0.5", "--cotangent", "(0, 1, 0)"],
                vec!["vjp", f1a, "--arg", "0.5", "--cotangent", "(0, 0, 1)"],
                vec!["vjp", f1a, "--arg", "0.5", "--cotangent", "(1, 2, 3)"],
            ],
        ),
        (
            "fig1b",
            vec![
                vec![
                    "grad", f1b, "--arg", "1", "--arg", "2", "--arg", "3", "--arg", "4",
                ],
                vec![
                    "jvp",
                    f1b,
                    "--arg",
                    "1",
                    "--arg",
                    "2",
                    "--arg",
                    "3",
                    "--arg",
                    "4",
                    "--tangent",
                    "1",
                    "--tangent",
                    "0",
                    "--tangent",
                    "0",
                    "--tangent",
                    "0",
                ],
                vec![
                    "vjp",
                    f1b,
                    "--arg",
                    "1",
                    "--arg",
                    "2",
                    "--arg",
                    "3",
                    "--arg",
                    "4",
                    "--cotangent",
                    "2",
                ],
            ],
        ),
        (
            "fig2a",
            vec![
                vec![
                    "jvp",
                    f2a,
                    "--arg",
                    "3",
                    "--arg",
                    "0.5",
                    "--tangent",
                    "()",
                    "--tangent",
                    "1",
                ],
                vec![
                    "vjp",
                    f2a,
                    "--arg",
                    "3",
                    "--arg",
                    "0.5",
                    "--cotangent",
                    "[1, 0, 2]",
                ],
                vec![
                    "vjp",
                    f2a,
                    "--arg",
                    "0",
                    "--arg",
                    "0.5",
                    "--cotangent",
                    "[]",
                ],
            ],
        ),
        (
            "fig2b",
            vec![
                vec!["grad", f2b, "--arg", "1.5", "--arg", "[1, 2, 3]"],
                vec![
                    "jvp",
                    f2b,
                    "--arg",
                    "1.5",
                    "--arg",
                    "[1, 2, 3]",
                    "--tangent",
                    "1",
                    "--tangent",
                    "[0, 0, 0]",
                ],
                vec![
                    "vjp",
                    f2b,
                    "--arg",
                    "1.5",
                    "--arg",
                    "[1, 2, 3]",
                    "--cotangent",
                    "-2",
                ],
            ],
        ),
    ];
    for (name, commands) in cases {
        golden(&format!("{name}.ad.txt"), &transcript(&commands));
    }
}

fn json(args: &[&str]) -> serde_json::Value {
    let o = chad(args);
    assert_eq!(o.code, 0, "{args:?}: {}", o.stderr);
    serde_json::from_str(&o.stdout).unwrap_or_else(|e| panic!("{args:?}: {e}: {}", o.stdout))
}

fn reals_of(j: &serde_json::Value) -> Vec<f64> {
    match j {
        serde_json::Value::Number(n) => vec![n.as_f64().unwrap()],
        serde_json::Value::Array(items) => items.iter().flat_map(reals_of).collect(),
        serde_json::Value::Null => vec![],
        other => panic!("unexpected JSON {other}"),
    }
}

fn assert_close(j: &serde_json::Value, want: &[f64]) {
    let got = reals_of(j);
    assert_eq!(got.len(), want.len(), "{j} vs {want:?}");
    for (g, w) in got.iter().zip(want) {
        assert!(
            g == w || (g - w).abs() <= 1e-12 * g.abs().max(w.abs()),
            "{j} vs {want:?}"
        );
    }
}

#[test]
fn grad_jvp_vjp_json_on_the_paper_examples_match_hand_derived_values() {
    // fig1a: (y, z, w) = (2x, 2x², cos 2x²), derivative (2, 4x, -4x sin 2x²).
    let x: f64 = 0.5;
    let z = 2.0 * x * x;
    let j = json(&[
        "jvp",
        "examples/fig1a.chad",
        "--arg",
        "0.5",
        "--tangent",
        "1",
        "--json",
    ]);
    assert_close(&j["value"], &[2.0 * x, z, z.cos()]);
    assert_close(&j["tangent"], &[2.0, 4.0 * x, -4.0 * x * z.sin()]);
    let j = json(&[
        "vjp",
        "examples/fig1a.chad",
        "--arg",
        "0.5",
        "--cotangent",
        "(1, 2, 3)",
        "--json",
    ]);
    assert_close(
        &j["gradient"],
        &[2.0 + 2.0 * 4.0 * x - 3.0 * 4.0 * x * z.sin()],
    );

    // fig1b: v = sin w, w = (x1 x4 + 2 x2) x3 + x4 = 28 at (1, 2, 3, 4).
    let fig1b_args = ["--arg", "1", "--arg", "2", "--arg", "3", "--arg", "4"];
    let c = 28f64.cos();
    let grad = [c * 12.0, c * 6.0, c * 8.0, c * 4.0];
    let mut args = vec!["grad", "examples/fig1b.chad", "--json"];
    args.extend(fig1b_args);
    let j = json(&args);
    assert_close(&j["value"], &[28f64.sin()]);
    assert_close(&j["gradient"], &grad);
    let mut args = vec!["jvp", "examples/fig1b.chad", "--json"];
    args.extend(fig1b_args);
    args.extend([
        "--tangent",
        "1",
        "--tangent",
        "0.5",
        "--tangent",
        "-1",
        "--tangent",
        "2",
    ]);
    let j = json(&args);
    assert_close(
        &j["tangent"],
        &[grad[0] + 0.5 * grad[1] - grad[2] + 2.0 * grad[3]],
    );

    // fig2a: n copies of x² + 1; n's tangent and gradient are null.
    let j = json(&[
        "vjp",
        "examples/fig2a.chad",
        "--arg",
        "3",
        "--arg",
        "0.5",
        "--cotangent",
        "[1, 0, 2]",
        "--json",
    ]);
    assert_close(&j["value"], &[1.25, 1.25, 1.25]);
    assert_eq!(j["gradient"][0], serde_json::Value::Null);
    assert_close(&j["gradient"][1], &[3.0 * 2.0 * 0.5]);
    let j = json(&[
        "jvp",
        "examples/fig2a.chad",
        "--arg",
        "3",
        "--arg",
        "0.5",
        "--tangent",
        "()",
        "--tangent",
        "2",
        "--json",
    ]);
    assert_close(&j["tangent"], &[2.0, 2.0, 2.0]);

    // fig2b: Σ x1 x2_i; ∂x1 = Σ x2, ∂x2_i = x1.
    let j = json(&[
        "grad",
        "examples/fig2b.chad",
        "--arg",
        "1.5",
        "--arg",
        "[1, 2, 3]",
        "--json",
    ]);
    assert_close(&j["value"], &[9.0]);
    assert_close(&j["gradient"], &[6.0, 1.5, 1.5, 1.5]);
    assert_eq!(
        j["gradient"].as_array().unwrap().len(),
        2,
        "one gradient per argument"
    );
    let j = json(&[
        "vjp",
        "examples/fig2b.chad",
        "--arg",
        "1.5",
        "--arg",
        "[1, 2, 3]",
        "--cotangent",
        "-2",
        "--json",
    ]);
    assert_close(&j["gradient"], &[-12.0, -3.0, -3.0, -3.0]);
}

#[test]
fn gradients_of_discrete_arguments_are_unit_in_text_and_null_in_json() {
    let p = file(
        "discrete.chad",
        "def f (n : Int) (b : Bool) (u : Unit) (x : Real) : Real = toReal n * x\n",
    );
    let args = ["--arg", "3", "--arg", "true", "--arg", "()", "--arg", "2"];
    let mut cmd = vec!["grad", s(&p)];
    cmd.extend(args);
    let o = chad(&cmd);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(
        o.stdout,
        "value: 6.0\ngradient:\n  n = ()\n  b = ()\n  u = ()\n  x = 3.0\n"
    );
    cmd.push("--json");
    let o = chad(&cmd);
    assert_eq!(
        o.stdout,
        "{\"value\":6.0,\"gradient\":[null,null,null,3.0]}\n"
    );
    let mut cmd = vec!["vjp", s(&p), "--cotangent", "0.5"];
    cmd.extend(args);
    let o = chad(&cmd);
    assert_eq!(
        o.stdout,
        "value: 6.0\ngradient:\n  n = ()\n  b = ()\n  u = ()\n  x = 1.5\n"
    );
    let mut cmd = vec!["jvp", s(&p), "--json"];
    cmd.extend(args);
    cmd.extend([
        "--tangent",
        "()",
        "--tangent",
        "()",
        "--tangent",
        "()",
        "--tangent",
        "1",
    ]);
    let o = chad(&cmd);
    assert_eq!(o.stdout, "{\"value\":6.0,\"tangent\":3.0}\n");
    // A discrete result: its tangent is () / null.
    let p = file("length.chad", "def f (xs : Array Real) : Int = length xs\n");
    let o = chad(&["jvp", s(&p), "--arg", "[1, 2]", "--tangent", "[1, 1]"]);
    assert_eq!(o.stdout, "value: 2\ntangent: ()\n");
    let o = chad(&[
        "jvp",
        s(&p),
        "--arg",
        "[1, 2]",
        "--tangent",
        "[1, 1]",
        "--json",
    ]);
    assert_eq!(o.stdout, "{\"value\":2,\"tangent\":null}\n");
}

#[test]
fn args_and_tangents_files() {
    let args = file("ad-args.json", "[1.5, [1, 2, 3]]");
    let tangents = file("ad-tangents.json", "[2, [1, 0, -1]]");
    // 2 · Σ x2 + 1.5 · (1 - 1) = 12
    let o = chad(&[
        "jvp",
        "examples/fig2b.chad",
        "--args-file",
        s(&args),
        "--tangents-file",
        s(&tangents),
        "--json",
    ]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(o.stdout, "{\"value\":9.0,\"tangent\":12.0}\n");
    let o = chad(&["grad", "examples/fig2b.chad", "--args-file", s(&args)]);
    assert_eq!(
        o.stdout,
        "value: 9.0\ngradient:\n  x1 = 6.0\n  x2 = [1.5, 1.5, 1.5]\n"
    );
    let o = chad(&[
        "vjp",
        "examples/fig2b.chad",
        "--args-file",
        s(&args),
        "--cotangent",
        "2",
        "--json",
    ]);
    assert_eq!(
        o.stdout,
        "{\"value\":9.0,\"gradient\":[12.0,[3.0,3.0,3.0]]}\n"
    );
    // JSON null is the tangent of a discrete argument.
    let args = file("ad-args2.json", "[2, 0.5]");
    let tangents = file("ad-tangents2.json", "[null, 1]");
    let o = chad(&[
        "jvp",
        "examples/fig2a.chad",
        "--args-file",
        s(&args),
        "--tangents-file",
        s(&tangents),
    ]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(o.stdout, "value: [1.25, 1.25]\ntangent: [1.0, 1.0]\n");
    // Errors in tangents files.
    let short = file("ad-short.json", "[2]");
    let args = file("ad-args3.json", "[1.5, [1, 2, 3]]");
    fails(
        &[
            "jvp",
            "examples/fig2b.chad",
            "--args-file",
            s(&args),
            "--tangents-file",
            s(&short),
        ],
        1,
        &["takes 2 arguments and so needs 2 tangents, but 1 was given"],
    );
    let wrong = file("ad-wrong.json", "[1, [1, 2]]");
    fails(
        &[
            "jvp",
            "examples/fig2b.chad",
            "--args-file",
            s(&args),
            "--tangents-file",
            s(&wrong),
        ],
        1,
        &["length 3"],
    );
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

#[test]
fn ad_of_conditionals_sums_and_arrays_through_the_cli() {
    let p = file(
        "cond.chad",
        "def f (x : Real) : Real =\n  if x > 0 then x * x else 0 - x\n",
    );
    // Both branches, both modes: 2x for x > 0, -1 otherwise.
    for (x, grad) in [("1.5", "3.0"), ("-2", "-1.0")] {
        let o = chad(&["grad", s(&p), "--arg", x, "--json"]);
        assert_eq!(o.code, 0, "{}", o.stderr);
        assert!(
            o.stdout.contains(&format!("\"gradient\":[{grad}]")),
            "{}",
            o.stdout
        );
        let o = chad(&["jvp", s(&p), "--arg", x, "--tangent", "1", "--json"]);
        assert!(
            o.stdout.contains(&format!("\"tangent\":{grad}")),
            "{}",
            o.stdout
        );
    }
    // A sum-typed argument and result, and an array indexed by an argument.
    let p = file(
        "sums.chad",
        "def f (s : Real + (Real, Real)) (xs : Array Real) (k : Int) : Real + Unit =\n  \
           case s of\n    inl a -> inl (a * xs ! k)\n  | inr p -> inr ()\n",
    );
    let o = chad(&[
        "vjp",
        s(&p),
        "--arg",
        "inl 2.0",
        "--arg",
        "[1.0, 5.0]",
        "--arg",
        "1",
        "--cotangent",
        "inl 1.0",
    ]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stdout.contains("s = inl 5.0"), "{}", o.stdout);
    assert!(o.stdout.contains("xs = [0.0, 2.0]"), "{}", o.stdout);
    // The derivative code of an array program prints.
    for stage in ["forward", "reverse"] {
        let o = chad(&["show", s(&p), "--stage", stage]);
        assert_eq!(o.code, 0, "{}", o.stderr);
        assert!(o.stdout.contains("case"), "{}", o.stdout);
    }
}

#[test]
fn runtime_errors_of_ad_point_at_the_source() {
    let p = file(
        "oob.chad",
        "def f (xs : Array Real) : Real =\n  let y = 2.0 in\n  y * (xs ! 3)\n",
    );
    for cmd in [
        vec!["grad", s(&p), "--arg", "[1]"],
        vec!["jvp", s(&p), "--arg", "[1]", "--tangent", "[1]"],
        vec!["vjp", s(&p), "--arg", "[1]", "--cotangent", "1"],
        vec!["eval", s(&p), "--arg", "[1]"],
    ] {
        fails(
            &cmd,
            1,
            &[
                "index 3 out of range for an array of length 1",
                "oob.chad:3:7",
            ],
        );
    }
}

#[test]
fn ad_argument_errors() {
    fails(
        &["grad", "examples/fig2a.chad", "--arg", "2", "--arg", "1"],
        1,
        &["grad needs a Real-valued definition", "use vjp"],
    );
    fails(
        &[
            "jvp",
            "examples/fig1b.chad",
            "--arg",
            "1",
            "--arg",
            "2",
            "--arg",
            "3",
            "--arg",
            "4",
            "--tangent",
            "1",
        ],
        1,
        &["takes 4 arguments and so needs 4 tangents, but 1 was given"],
    );
    fails(
        &[
            "jvp",
            "examples/fig2b.chad",
            "--arg",
            "1",
            "--arg",
            "[1, 2]",
            "--tangent",
            "1",
            "--tangent",
            "[1]",
        ],
        1,
        &["length 2"],
    );
    fails(
        &[
            "jvp",
            "examples/fig2b.chad",
            "--arg",
            "1",
            "--arg",
            "[1, 2]",
            "--tangent",
            "1",
            "--tangent",
            "true",
        ],
        1,
        &["tangent 2: expected a value of type `Array Real`"],
    );
    fails(
        &[
            "vjp",
            "examples/fig2a.chad",
            "--arg",
            "2",
            "--arg",
            "1",
            "--cotangent",
            "[1]",
        ],
        1,
        &["cotangent", "length 2"],
    );
    fails(
        &[
            "vjp",
            "examples/fig1a.chad",
            "--arg",
            "1",
            "--cotangent",
            "(1, 2)",
        ],
        1,
        &["cotangent: expected a value of type"],
    );
    fails(
        &["grad", "examples/ml.chad", "--def", "twice", "--arg", "1"],
        1,
        &["argument 1: a value of function type"],
    );
    let p = file(
        "ho.chad",
        "def f (x : Real) : Real -> Real = \\(y : Real) -> x * y\n",
    );
    fails(
        &["jvp", s(&p), "--arg", "1", "--tangent", "1"],
        1,
        &["not supported: forward mode needs a first-order result"],
    );
}

#[test]
fn ad_usage_errors_exit_with_status_2() {
    fails(
        &["vjp", "examples/fig1a.chad", "--arg", "1"],
        2,
        &["--cotangent"],
    );
    let t = file("t.json", "[1.0]");
    fails(
        &[
            "jvp",
            "examples/fig1a.chad",
            "--arg",
            "1",
            "--tangent",
            "1",
            "--tangents-file",
            s(&t),
        ],
        2,
        &["cannot be used with"],
    );
    fails(&["grad"], 2, &["<FILE>"]);
    fails(&["grad", "examples/fig1a.chad", "--bogus"], 2, &["--bogus"]);
}

// ----- bench -----

#[test]
fn bench_json_reports_every_phase_with_consistent_ratios() {
    let p = file(
        "bench_sq.chad",
        "def f (xs : Array Real) : Real = sum (map (\\(x : Real) -> x * x) xs)\n",
    );
    let j = json(&[
        "bench",
        s(&p),
        "--arg",
        "[1.0, 2.0, 3.0]",
        "--repeat",
        "3",
        "--json",
    ]);
    let obj = j.as_object().unwrap();
    let keys: Vec<&str> = obj.keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "primal_s",
            "forward_s",
            "reverse_s",
            "forward_over_primal",
            "reverse_over_primal",
            "compile_s",
            "dual_reverse_s",
            "dual_over_reverse"
        ]
    );
    let t = |k: &str| j[k].as_f64().unwrap();
    for k in keys {
        assert!(t(k) > 0.0 && t(k).is_finite(), "{k}: {j}");
    }
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-12 * a.abs().max(b.abs());
    assert!(
        close(t("forward_over_primal"), t("forward_s") / t("primal_s")),
        "{j}"
    );
    assert!(
        close(t("reverse_over_primal"), t("reverse_s") / t("primal_s")),
        "{j}"
    );
    assert!(
        close(t("dual_over_reverse"), t("dual_reverse_s") / t("reverse_s")),
        "{j}"
    );
}

#[test]
fn bench_text_is_a_table_and_reads_args_files() {
    let args = file("bench_args.json", "[[0.5, -1.5], 2]");
    let p = file(
        "bench_two.chad",
        "def f (xs : Array Real) (n : Int) : (Real, Real) = (sum xs * toReal n, xs ! 0)\n",
    );
    let o = chad(&["bench", s(&p), "--args-file", s(&args), "--repeat", "1"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let lines: Vec<&str> = o.stdout.lines().collect();
    assert_eq!(lines.len(), 6, "{}", o.stdout);
    assert!(lines[0].starts_with("phase") && lines[0].contains("/ primal"));
    for (line, phase) in lines[1..5]
        .iter()
        .zip(["primal", "forward", "reverse", "dual"])
    {
        let cells: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(cells[0], phase, "{}", o.stdout);
        assert!(cells[1].parse::<f64>().unwrap() > 0.0, "{}", o.stdout);
    }
    assert!(lines[1].ends_with(" 1.00"), "{}", o.stdout);
    assert!(lines[5].starts_with("compile: ") && lines[5].contains("1 run"));
    // The definition is selectable.
    let o = chad(&[
        "bench",
        "examples/fig1a.chad",
        "--def",
        "fig1a",
        "--arg",
        "3",
        "--repeat",
        "2",
    ]);
    assert_eq!(o.code, 0, "{}", o.stderr);
}

#[test]
fn bench_errors() {
    let p = file("bench_sq2.chad", "def f (x : Real) : Real = x * x\n");
    fails(
        &["bench", s(&p), "--arg", "1", "--repeat", "0"],
        2,
        &["--repeat"],
    );
    fails(
        &["bench", s(&p), "--arg", "1", "--repeat", "x"],
        2,
        &["--repeat"],
    );
    fails(
        &["bench", s(&p), "--arg", "true"],
        1,
        &["argument 1: expected a value of type `Real`"],
    );
    fails(
        &["bench", s(&p)],
        1,
        &["the definition takes 1 argument, but 0 were given"],
    );
    fails(
        &["bench", s(&p), "--arg", "1", "--def", "g"],
        1,
        &["no definition named `g`"],
    );
    let h = file(
        "bench_ho.chad",
        "def f (x : Real) : Real -> Real = \\(y : Real) -> x * y\n",
    );
    fails(
        &["bench", s(&h), "--arg", "1"],
        1,
        &["needs a first-order result", "`f` returns `Real -> Real`"],
    );
    let r = file(
        "bench_oob.chad",
        "def f (xs : Array Real) : Real =\n  xs ! 3\n",
    );
    fails(
        &["bench", s(&r), "--arg", "[1.0]"],
        1,
        &["runtime error", "bench_oob.chad:2:"],
    );
}

/// `--backend native` on eval, grad, jvp and vjp (with `--wrt` too): the same output as the interpreters (the
/// values here are exact in floating point), the same error message with the same source
/// position, `--verbose` names the cache, and `--engine dual` refuses it.
#[test]
fn native_backend_matches_the_interpreters() {
    if Command::new("rustc").arg("-V").output().is_err() {
        eprintln!("no rustc: skipped");
        return;
    }
    let args = ["--arg", "2.0", "--arg", "[1.0, 2.0, 3.5]", "--json"];
    let cases: [&[&str]; 6] = [
        &["eval"],
        &["grad"],
        &["grad", "--wrt", "x2"],
        &["jvp", "--wrt", "x1", "--tangent", "0.5"],
        &["jvp", "--tangent", "1.0", "--tangent", "[0.5, 0.0, -1.0]"],
        &["vjp", "--cotangent", "-3.0"],
    ];
    for cmd in cases {
        let mut a: Vec<&str> = cmd.to_vec();
        a.push("examples/fig2b.chad");
        a.extend(args);
        let engine = chad(&a);
        a.extend(["--backend", "native"]);
        let native = chad(&a);
        assert_eq!(engine.code, 0, "{}", engine.stderr);
        assert_eq!(native.code, 0, "{}", native.stderr);
        assert_eq!(native.stdout, engine.stdout, "{cmd:?}");
    }
    let ros = ["benches/programs/rosenbrock.chad", "--arg", "[]"];
    let engine = chad(&[&["grad"][..], &ros].concat());
    let native = chad(&[&["grad"][..], &ros, &["--backend", "native", "--verbose"]].concat());
    assert_eq!(engine.code, 1);
    assert_eq!(native.code, 1);
    assert!(
        native.stderr.contains("native code cache: "),
        "{}",
        native.stderr
    );
    assert!(
        native.stderr.ends_with(&engine.stderr),
        "native:\n{}\nengine:\n{}",
        native.stderr,
        engine.stderr
    );
    let dual = chad(
        &[
            &["grad", "--engine", "dual"][..],
            &ros,
            &["--backend", "native"],
        ]
        .concat(),
    );
    assert_eq!(dual.code, 1);
    assert!(
        dual.stderr.contains("no --backend native"),
        "{}",
        dual.stderr
    );
}

/// `$CHAD_THREADS` and `$CHAD_PAR_WORK` choose how native loops are shared out, never what
/// they compute: Rosenbrock's value, gradient and tangent at 30 000 elements (sums of eight
/// 4096-term chunks, which three threads take whole when no work bound holds them back; the
/// elements' scale changes from chunk to chunk, so that the order in which the chunk sums are
/// added shows) are the same text on one thread, on three with every loop split, and with a
/// bound that does not parse (the default then).
#[test]
fn native_results_do_not_depend_on_the_threads_or_the_work_bound() {
    if Command::new("rustc").arg("-V").output().is_err() {
        eprintln!("no rustc: skipped");
        return;
    }
    let xs: Vec<String> = (0..30_000i32)
        .map(|i| format!("{}", ((i as f64) * 0.37).sin() * 10f64.powi(i / 4096 % 4)))
        .collect();
    let args = file("rosenbrock30000.json", &format!("[[{}]]", xs.join(", ")));
    let tangents = file(
        "rosenbrock30000.tangents.json",
        &format!("[[{}]]", vec!["0.25"; 30_000].join(", ")),
    );
    let run = |cmd: &[&str], env: &[(&str, &str)]| -> String {
        let mut c = Command::new(env!("CARGO_BIN_EXE_chad"));
        c.args(cmd)
            .args([
                "benches/programs/rosenbrock.chad",
                "--args-file",
                s(&args),
                "--backend",
                "native",
                "--json",
            ])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .env_remove("CHAD_THREADS")
            .env_remove("CHAD_PAR_WORK");
        for (k, v) in env {
            c.env(k, v);
        }
        let out = c.output().expect("run chad");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{cmd:?} {env:?}: {stderr}");
        String::from_utf8(out.stdout).unwrap()
    };
    for cmd in [
        &["eval"][..],
        &["grad"],
        &["jvp", "--tangents-file", s(&tangents)],
    ] {
        let one = run(cmd, &[("CHAD_THREADS", "1")]);
        assert!(one.len() > 20, "{one}");
        let split = run(cmd, &[("CHAD_THREADS", "3"), ("CHAD_PAR_WORK", "0")]);
        assert_eq!(
            one, split,
            "{:?} on three threads, every loop split",
            cmd[0]
        );
        let garbled = run(cmd, &[("CHAD_THREADS", "3"), ("CHAD_PAR_WORK", "lots")]);
        assert_eq!(one, garbled, "{:?} with an unreadable work bound", cmd[0]);
    }
}

/// `--max-steps` turns a runaway loop into a runtime error at the loop, in every command that
/// runs the program; within the budget the result is unchanged; a million steps run on the
/// engine without overflowing the stack.
#[test]
fn max_steps_stops_runaway_loops_with_a_position() {
    let p = file(
        "runaway.chad",
        "def forever (x : Real) : Real =\n  while (\\(y : Real) -> y > 0.0) (\\(y : Real) -> y + 1.0) x\n\n\
         def count (n : Int) : Real = iterate n (\\(y : Real) -> y + 0.5) 0.0\n",
    );
    for cmd in [&["eval"][..], &["grad"], &["jvp", "--tangent", "1.0"]] {
        let mut args = cmd.to_vec();
        args.extend([
            "--def",
            "forever",
            "--arg",
            "1.0",
            "--max-steps",
            "1000",
            s(&p),
        ]);
        let o = chad(&args);
        assert_eq!(o.code, 1, "{cmd:?}: {}", o.stderr);
        assert!(
            o.stderr.contains("more than 1000 loop steps"),
            "{}",
            o.stderr
        );
        assert!(o.stderr.contains("runaway.chad:2:3"), "{}", o.stderr);
    }
    let o = chad(&[
        "eval",
        "--def",
        "count",
        "--arg",
        "4",
        "--max-steps",
        "4",
        s(&p),
    ]);
    assert_eq!((o.code, o.stdout.trim()), (0, "2.0"), "{}", o.stderr);
    let o = chad(&[
        "eval",
        "--def",
        "count",
        "--arg",
        "5",
        "--max-steps",
        "4",
        s(&p),
    ]);
    assert_eq!(o.code, 1, "{}", o.stderr);
    let o = chad(&["eval", "--def", "count", "--arg", "1000000", s(&p)]);
    assert_eq!((o.code, o.stdout.trim()), (0, "500000.0"), "{}", o.stderr);
    let o = chad(&["grad", "--def", "count", "--arg", "1000000", s(&p)]);
    assert_eq!(o.code, 0, "{}", o.stderr);
}

/// The iteration forms' errors: a fold function of the wrong type, recursion without `rec`,
/// and misuses of the iteration forms, each with its position.
#[test]
fn iteration_errors_are_clear() {
    let cases: &[(&str, &str)] = &[
        (
            "def f (xs : Array Real) : Real = fold (\\(a : Real) -> a) 0.0 xs\n",
            "`fold` expects a function of two arguments",
        ),
        (
            "def f (xs : Array Real) : Real = fold (\\(a : Real) (x : Int) -> a) 0.0 xs\n",
            "expected `Array Int`",
        ),
        (
            "def f (x : Real) : Real = iterate 3 (\\(y : Real) -> y > 0.0) x\n",
            "`iterate` expects a function `Real -> Real`",
        ),
        (
            "def f (x : Real) : Real = loop (\\(y : Real) -> y) x\n",
            "`loop` expects a step function `Real -> Real + B`",
        ),
        (
            "def f (x : Real) : Real = f x\n",
            "a plain `def` cannot be recursive",
        ),
        (
            "def rec f (x : Real) = f x\n",
            "the recursive definition `f` needs its result type",
        ),
        (
            "def f (xs : Array Real) : Array Real = scan (\\(a : Real) -> a) 0.0 xs\n",
            "`scan` expects a function of two arguments `B -> A -> B`",
        ),
    ];
    for (k, (src, want)) in cases.iter().enumerate() {
        let p = file(&format!("iter_err{k}.chad"), src);
        let o = chad(&["check", s(&p)]);
        assert_eq!(o.code, 1, "{src}: {}", o.stderr);
        assert!(
            o.stderr.contains(want),
            "{src}: expected {want:?} in\n{}",
            o.stderr
        );
        assert!(
            o.stderr.contains(":1:"),
            "{src}: no position in\n{}",
            o.stderr
        );
    }
}

/// A definition that differentiates its function parameter is listed by `check` in source
/// order, and running it on its own says why it cannot be.
#[test]
fn specialised_definitions_are_listed_and_explained() {
    let o = chad(&["check", "examples/nested/newton.chad"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(
        o.stdout,
        "f : Real -> Real\nnewton : Real -> Real\nstep : (Real -> Real) -> Real -> Real\n\
         cube_root : Real -> Real -> Real\n"
    );
    fails(
        &[
            "eval",
            "examples/nested/newton.chad",
            "--def",
            "step",
            "--arg",
            "1",
        ],
        1,
        &[
            "`step` differentiates its function parameter inside",
            "call it from another",
        ],
    );
}
