//! `def rec` end to end through the command line: the checker's errors, deep recursion in both
//! AD modes without a stack overflow (against the closed form of the derivative), the
//! recursion depth limit and `--max-steps` as runtime errors with the definition's position,
//! and the native backend (values, limits and errors as the engine's; derivatives refused). (Random recursive programs are in the logical-relation,
//! oracle and agreement tests; `examples/recursion.chad` in tests/examples.rs.)

use std::path::PathBuf;
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

/// Writes `src` to a fresh file named after the test.
fn program(name: &str, src: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("chad-recursion-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{name}.chad"));
    std::fs::write(&path, src).unwrap();
    path
}

/// `down n x = n + x * 0.9999^n`, one recursive call per level (non-tail: `1.0 + ..`).
const DOWN: &str = "def rec down (n : Int) (x : Real) : Real =\n  \
    if n <= 0 then x else 1.0 + down (n - 1) (x * 0.9999)\n";

fn number_after(out: &str, key: &str) -> f64 {
    let line = out
        .lines()
        .find(|l| l.trim_start().starts_with(key))
        .unwrap_or_else(|| panic!("no `{key}` in {out}"));
    line.split(['=', ':'])
        .next_back()
        .unwrap()
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("not a number: {line}"))
}

#[test]
fn deep_recursion_differentiates_in_both_modes_without_overflow() {
    let p = program("down", DOWN);
    let p = p.to_str().unwrap();
    let n = 50_000;
    let expected = 0.9999f64.powi(n);
    let ns = n.to_string();
    let e = chad(&["eval", p, "--arg", &ns, "--arg", "2.0"]);
    assert_eq!(e.code, 0, "{}", e.stderr);
    let v: f64 = e.stdout.trim().parse().unwrap();
    assert!((v - (n as f64 + 2.0 * expected)).abs() < 1e-6, "{v}");
    let g = chad(&["grad", p, "--arg", &ns, "--arg", "2.0"]);
    assert_eq!(g.code, 0, "{}", g.stderr);
    let dx = number_after(&g.stdout, "x");
    assert!(
        (dx - expected).abs() < 1e-9 * expected.max(1.0),
        "{dx} vs {expected}"
    );
    let j = chad(&[
        "jvp",
        p,
        "--arg",
        &ns,
        "--arg",
        "2.0",
        "--tangent",
        "()",
        "--tangent",
        "1.0",
    ]);
    assert_eq!(j.code, 0, "{}", j.stderr);
    let t = number_after(&j.stdout, "tangent");
    assert!(
        (t - expected).abs() < 1e-9 * expected.max(1.0),
        "{t} vs {expected}"
    );
}

#[test]
fn the_depth_limit_and_max_steps_are_runtime_errors_at_the_definition() {
    let p = program("limits", DOWN);
    let p = p.to_str().unwrap();
    for cmd in ["eval", "grad"] {
        let o = chad(&[cmd, p, "--arg", "300000", "--arg", "1.0"]);
        assert_eq!(o.code, 1, "{cmd}: {}{}", o.stdout, o.stderr);
        assert!(o.stderr.contains("recursion depth limit"), "{}", o.stderr);
        assert!(o.stderr.contains("limits.chad:1:"), "{}", o.stderr);
    }
    let o = chad(&[
        "eval",
        p,
        "--arg",
        "100",
        "--arg",
        "1.0",
        "--max-steps",
        "50",
    ]);
    assert_eq!(o.code, 1, "{}", o.stderr);
    assert!(o.stderr.contains("recursive calls"), "{}", o.stderr);
    assert!(o.stderr.contains("limits.chad:1:"), "{}", o.stderr);
    // Within both limits, the same program runs.
    let o = chad(&[
        "eval",
        p,
        "--arg",
        "40",
        "--arg",
        "1.0",
        "--max-steps",
        "50",
    ]);
    assert_eq!(o.code, 0, "{}", o.stderr);
}

#[test]
fn checker_errors_for_recursion() {
    let p = program(
        "noret",
        "def rec f (x : Real) = if x < 0.0 then x else f (x - 1.0)\n",
    );
    let o = chad(&["check", p.to_str().unwrap()]);
    assert_eq!(o.code, 1);
    assert!(o.stderr.contains("needs its result type"), "{}", o.stderr);
    let p = program(
        "plain",
        "def f (x : Real) : Real = if x < 0.0 then x else f (x - 1.0)\n",
    );
    let o = chad(&["check", p.to_str().unwrap()]);
    assert_eq!(o.code, 1);
    assert!(
        o.stderr.contains("a plain `def` cannot be recursive"),
        "{}",
        o.stderr
    );
    assert!(o.stderr.contains("def rec"), "{}", o.stderr);
    let p = program("noparam", "def rec f : Real = f\n");
    let o = chad(&["check", p.to_str().unwrap()]);
    assert_eq!(o.code, 1);
    assert!(o.stderr.contains("at least one parameter"), "{}", o.stderr);
    // A recursive definition is in scope in its own body and in later ones.
    let p = program(
        "ok",
        "def rec f (x : Real) (n : Int) : Real = if n <= 0 then x else f (x * x) (n - 1)\n\
         def g (y : Real) : Real = f y 3\n",
    );
    let o = chad(&["eval", p.to_str().unwrap(), "--arg", "1.1"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let v: f64 = o.stdout.trim().parse().unwrap();
    assert!((v - 1.1f64.powi(8)).abs() < 1e-12, "{v}");
}

#[test]
fn the_native_backend_runs_recursion_like_the_engine() {
    let p = program("native", DOWN);
    let p = p.to_str().unwrap();
    let eval = |backend: &str, n: &str, extra: &[&str]| {
        let mut args = vec!["eval", p, "--arg", n, "--arg", "2.0", "--backend", backend];
        args.extend_from_slice(extra);
        chad(&args)
    };
    // Values: shallow, and 100 000 nested calls (the depth limit) without a stack overflow.
    for n in ["0", "3", "1000", "100000"] {
        let (a, b) = (eval("native", n, &[]), eval("engine", n, &[]));
        assert_eq!(a.code, 0, "{}", a.stderr);
        assert_eq!(a.stdout, b.stdout, "n = {n}");
    }
    // One call past the depth limit, and --max-steps: the engine's errors, at the definition.
    for (n, extra, what) in [
        ("100001", &[][..], "recursion depth limit"),
        ("100", &["--max-steps", "50"][..], "recursive calls"),
    ] {
        let (a, b) = (eval("native", n, extra), eval("engine", n, extra));
        assert_eq!(a.code, 1, "{}{}", a.stdout, a.stderr);
        assert!(a.stderr.contains(what), "{}", a.stderr);
        assert!(a.stderr.contains("native.chad:1:"), "{}", a.stderr);
        assert_eq!(a.stderr, b.stderr);
    }
    // The last budget that suffices is the engine's.
    for steps in ["50", "51"] {
        let (a, b) = (
            eval("native", "49", &["--max-steps", steps]),
            eval("engine", "49", &["--max-steps", steps]),
        );
        assert_eq!((a.code, &a.stdout), (b.code, &b.stdout), "{}", a.stderr);
    }
    // Derivatives are refused clearly (see note 10, "Native backend").
    let o = chad(&[
        "grad",
        p,
        "--arg",
        "3",
        "--arg",
        "1.0",
        "--backend",
        "native",
    ]);
    assert_eq!(o.code, 1, "{}", o.stderr);
    assert!(
        o.stderr
            .contains("derivatives of recursive definitions (`def rec`) are not compiled"),
        "{}",
        o.stderr
    );
}

#[test]
fn the_examples_recursions_run_natively_like_the_engine() {
    let run = |backend: &str, def: &str, args: &[&str]| {
        let mut a = vec![
            "eval",
            "examples/recursion.chad",
            "--def",
            def,
            "--backend",
            backend,
        ];
        for x in args {
            a.extend_from_slice(&["--arg", x]);
        }
        chad(&a)
    };
    let cases: [(&str, &[&str]); 5] = [
        (
            "det",
            &["[[2.0, 0.5, 1.0], [0.3, 1.5, -0.7], [1.2, -0.4, 0.9]]"],
        ),
        (
            "det_rows",
            &[
                "5",
                "[2.0, 0.5, 1.0, 0.1, 0.2, 0.3, 1.5, -0.7, 0.4, 0.5, 1.2, -0.4, 0.9, 0.6, 0.7, 0.8, 0.9, 1.0, 2.5, 1.1, -1.2, 1.3, 1.4, 1.5, 3.0]",
            ],
        ),
        ("power", &["1.01", "1000"]),
        ("cfrac", &["[1.0, 2.0, 3.0, 4.0, 5.0]", "0"]),
        ("cfrac", &["[1.0, 2.0]", "5"]),
    ];
    for (def, args) in cases {
        let (a, b) = (run("native", def, args), run("engine", def, args));
        assert_eq!(a.code, b.code, "{def}: {}{}", a.stderr, b.stderr);
        if a.code == 0 {
            let (x, y): (f64, f64) = (
                a.stdout.trim().parse().unwrap(),
                b.stdout.trim().parse().unwrap(),
            );
            assert!(
                (x - y).abs() <= 1e-12 * y.abs().max(1.0),
                "{def}: {x} vs {y}"
            );
        } else {
            assert_eq!(a.stderr, b.stderr, "{def}");
        }
    }
}
