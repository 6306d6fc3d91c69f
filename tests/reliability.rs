//! No input crashes chad, and its resources are bounded (issue 27): the `chad` binary, run in a
//! child process (a crash cannot take the test runner down), on generated deep and large
//! programs. Each run must end within its time bound with status 0 and the right output, or
//! status 1 and a clear error; never a signal (stack overflow, abort) or a hang.
//!
//! * Stack safety (finding 1): every command on programs nested a few thousand deep, run with
//!   `CHAD_STACK_KIB=512`, i.e. on 512 KiB stack segments: a recursion that does not grow the
//!   stack through `chad::internals::deep` overflows such a segment within a few hundred levels, so these
//!   sizes find it as surely as the issue's sizes (10⁴–10⁵) on the default segments, in a
//!   fraction of the time. One full-size run per shape on the default stack, and all the
//!   issue's sizes under `CHAD_STRESS=1`.
//! * Memory limits (findings 2 and 4): under `ulimit -v`, and with `--max-memory`, a run that
//!   needs too much stops with "out of stack" / "memory budget exceeded" / "out of memory".
//! * Linear memory and output (finding 3): measured with the budget itself (`--max-memory`
//!   well below what the quadratic behaviour used) and by the size of the output.
//! * Strictness (finding 5): a failing unused subterm fails every command alike.

use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How a run ended.
#[derive(Debug)]
struct Run {
    status: Option<i32>,
    stdout: String,
    stderr: String,
    secs: f64,
}

impl Run {
    fn ok(&self) -> bool {
        self.status == Some(0)
    }
}

fn stress() -> bool {
    std::env::var("CHAD_STRESS").is_ok_and(|v| v == "1")
}

/// Writes `text` to a fresh file under the target directory and returns its path.
fn file(name: &str, text: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("reliability");
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(format!("{name}-{}.chad", std::process::id()));
    std::fs::write(&p, text).unwrap();
    p
}

/// Runs `chad args...` (with `CHAD_STACK_KIB` = `stack_kib` if given, under `ulimit -v
/// vmem_kib` if given), killing it after `limit`. Panics on a timeout or a signal.
fn chad(args: &[&str], stack_kib: Option<u32>, vmem_kib: Option<u64>, limit: f64) -> Run {
    let exe = env!("CARGO_BIN_EXE_chad");
    let mut cmd = match vmem_kib {
        Some(kib) => {
            let mut c = Command::new("sh");
            c.arg("-c")
                .arg(format!("ulimit -v {kib} && exec \"$0\" \"$@\""))
                .arg(exe);
            c
        }
        None => Command::new(exe),
    };
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(k) = stack_kib {
        cmd.env("CHAD_STACK_KIB", k.to_string());
    }
    let start = Instant::now();
    let mut child = cmd.spawn().unwrap();
    // Drain the pipes on threads (a large output would otherwise block the child).
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let t_out = std::thread::spawn(move || {
        let mut s = Vec::new();
        out.read_to_end(&mut s).unwrap();
        s
    });
    let t_err = std::thread::spawn(move || {
        let mut s = Vec::new();
        err.read_to_end(&mut s).unwrap();
        s
    });
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > Duration::from_secs_f64(limit) {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("chad {args:?} ran longer than {limit} s");
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let secs = start.elapsed().as_secs_f64();
    let run = Run {
        status: status.code(),
        stdout: String::from_utf8_lossy(&t_out.join().unwrap()).into_owned(),
        stderr: String::from_utf8_lossy(&t_err.join().unwrap()).into_owned(),
        secs,
    };
    assert!(
        matches!(run.status, Some(0 | 1)),
        "chad {args:?} crashed: {status:?}\nstderr: {}",
        &run.stderr[..run.stderr.len().min(2000)]
    );
    assert!(
        !run.stderr.contains("panicked"),
        "chad {args:?} panicked: {}",
        run.stderr
    );
    run
}

// ---------------------------------------------------------------------------------------------
// The shapes of finding 1, as one-line generators (`n` is the nesting depth or length).

fn plus_chain(n: usize) -> String {
    format!("def f (x : Real) : Real = {}\n", vec!["x"; n].join(" + "))
}

fn sum_literal(n: usize) -> String {
    format!(
        "def f (x : Real) : Real = sum [{}]\n",
        vec!["x"; n].join(", ")
    )
}

fn chained_defs(n: usize) -> String {
    let mut s = String::from("def f0 (x : Real) : Real = sin x\n");
    for i in 1..n {
        s += &format!("def f{i} (x : Real) : Real = f{} x\n", i - 1);
    }
    s
}

fn nested_ifs(n: usize) -> String {
    let mut s = String::from("def f (x : Real) : Real = ");
    for i in 0..n {
        s += &format!("if x > {i}.0 then x * {i}.0 else ");
    }
    s + "x\n"
}

fn nested_sins(n: usize) -> String {
    format!(
        "def f (x : Real) : Real = {}x{}\n",
        "sin (".repeat(n),
        ")".repeat(n)
    )
}

fn let_chain(n: usize) -> String {
    let mut s = String::from("def f (x : Real) : Real =\n");
    for i in 0..n {
        let prev = if i == 0 {
            "x".to_string()
        } else {
            format!("y{}", i - 1)
        };
        s += &format!("  let y{i} = {prev} * 1.0001 in\n");
    }
    s + &format!("  y{}\n", n - 1)
}

fn and_chain(n: usize) -> String {
    format!(
        "def f (x : Real) : Bool = {}\n",
        vec!["x > 0.0"; n].join(" && ")
    )
}

/// `(name, generator, the value at x = 1, the derivative at x = 1)` (`None`: Bool result).
type Shape = (
    &'static str,
    fn(usize) -> String,
    fn(usize) -> (String, String),
);

fn shapes() -> Vec<Shape> {
    vec![
        ("plus", plus_chain, |n| (format!("{n}.0"), format!("{n}.0"))),
        ("sum", sum_literal, |n| (format!("{n}.0"), format!("{n}.0"))),
        ("defs", chained_defs, |_| {
            ("0.8414709848078965".into(), "0.5403023058681398".into())
        }),
        ("ifs", nested_ifs, |_| ("0.0".into(), "0.0".into())),
        ("sins", nested_sins, |_| (String::new(), String::new())),
        ("lets", let_chain, |_| (String::new(), String::new())),
        ("ands", and_chain, |_| ("true".into(), String::new())),
    ]
}

/// Every command on `shape` at size `n`: no crash, the right answer where the table has one.
fn every_command(shape: &Shape, n: usize, stack_kib: Option<u32>, limit: f64, all: bool) {
    let (name, make, want) = shape;
    let path = file(&format!("{name}-{n}"), &make(n));
    let p = path.to_str().unwrap();
    let real = *name != "ands";
    let (value, deriv) = want(n);
    let mut cmds: Vec<Vec<&str>> = vec![
        vec!["eval", p, "--arg", "1.0"],
        vec!["jvp", p, "--arg", "1.0", "--tangent", "1.0"],
    ];
    if real {
        cmds.push(vec!["grad", p, "--arg", "1.0"]);
        cmds.push(vec!["vjp", p, "--arg", "1.0", "--cotangent", "1.0"]);
    } else {
        cmds.push(vec!["vjp", p, "--arg", "1.0", "--cotangent", "()"]);
    }
    if all {
        cmds.push(vec!["check", p]);
        cmds.push(vec!["eval", p, "--arg", "1.0", "--engine", "direct"]);
        if real {
            cmds.push(vec!["grad", p, "--arg", "1.0", "--engine", "dual"]);
        }
        for stage in ["source", "ccc", "forward", "reverse"] {
            cmds.push(vec!["show", p, "--stage", stage]);
        }
        // Raw derivative code is large (13 KB per level of `if` in reverse mode, printed in
        // 6.7 s at 2,000 levels): forward only, and not of the branching shapes.
        if !matches!(*name, "ifs" | "ands") {
            cmds.push(vec!["show", p, "--stage", "forward", "--no-simplify"]);
        }
        // The IR of nested `if`s grows quadratically (an enum case per branch), and so does
        // `emit-rust` of a chain of definitions (each definition compiled with its inlined
        // dependencies: 7.8 s at 2,000): left open (theory-notes/09), not run here.
        if *name != "ifs" {
            cmds.push(vec!["show", p, "--stage", "ir"]);
        }
        if !matches!(*name, "ifs" | "defs") {
            cmds.push(vec!["emit-rust", p]);
        }
    }
    for args in cmds {
        let r = chad(&args, stack_kib, None, limit);
        assert!(r.ok(), "{name} {n}: chad {args:?}: {}", r.stderr);
        if r.secs > 0.5 {
            eprintln!(
                "{name} {n}: {:?} took {:.2} s",
                &args[..args.len().min(4)],
                r.secs
            );
        }
        let out = &r.stdout;
        match args[0] {
            "eval" if !value.is_empty() => assert_eq!(out.trim(), value, "{name} {n} {args:?}"),
            "grad" | "jvp" | "vjp" if !value.is_empty() => {
                assert!(
                    out.contains(&format!("value: {value}")) && out.contains(&deriv),
                    "{name} {n} {args:?}: {out}"
                );
            }
            _ => assert!(!out.is_empty()),
        }
    }
}

#[test]
fn every_command_on_deep_programs_with_small_stack_segments() {
    let n = if stress() { 20_000 } else { 2_000 };
    for shape in shapes() {
        every_command(&shape, n, Some(512), 120.0, true);
    }
}

#[test]
fn the_issues_sizes_on_the_default_stack() {
    // Before: SIGABRT (stack overflow) at these sizes; `x + .. + x` at 27,000 terms overflowed
    // in grad. Now (release build, 2 cores): `lets 100000` takes about 7 s per AD command, the
    // rest 0.1-4 s. CI runs one size per shape, a fifth of the issue's; CHAD_STRESS=1 all.
    let sizes: &[(&str, usize)] = if stress() {
        &[
            ("plus", 27_000),
            ("sum", 87_500),
            ("defs", 13_200),
            ("ifs", 9_750),
            ("sins", 53_600),
            ("lets", 100_000),
            ("ands", 17_700),
        ]
    } else {
        &[
            ("plus", 5_400),
            ("sum", 17_500),
            ("defs", 2_640),
            ("ifs", 1_950),
            ("sins", 10_720),
            ("lets", 20_000),
            ("ands", 3_540),
        ]
    };
    for (name, n) in sizes {
        let shape = shapes().into_iter().find(|s| s.0 == *name).unwrap();
        every_command(&shape, *n, None, 120.0, false);
    }
}

#[test]
fn out_of_stack_under_an_address_space_limit_is_an_error() {
    // Before: under `ulimit -v 4000000`, `jvp` of a 45,000-element literal panicked in the
    // stack-growth crate ("mmap failed to allocate stack") and then hung. Now the segments are
    // counted against the budget, which the address-space limit lowers: a clear error.
    let n = if stress() { 100_000 } else { 40_000 };
    let path = file("ulimit-lets", &let_chain(n));
    let p = path.to_str().unwrap();
    let r = chad(&["grad", p, "--arg", "1.0"], None, Some(300_000), 60.0);
    assert_eq!(r.status, Some(1), "{r:?}");
    assert!(
        r.stderr.contains("out of stack") || r.stderr.contains("memory budget exceeded"),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr.contains("ulimit-lets"),
        "names the file: {}",
        r.stderr
    );
    // The 45,000-element literal runs within 4 GB of address space.
    let lit = format!(
        "def f (x : Real) : Array Real = [{}]\n",
        vec!["x"; 45_000].join(", ")
    );
    let path = file("ulimit-literal", &lit);
    let p = path.to_str().unwrap();
    let r = chad(
        &["jvp", p, "--arg", "1.0", "--tangent", "1.0"],
        None,
        Some(4_000_000),
        60.0,
    );
    assert!(r.ok(), "{}", r.stderr);
}

#[test]
fn forward_mode_on_a_literal_array_is_linear() {
    // Before: 1.6 GB at 5,000 elements, 6.2 GB at 10,000 (forward), and `show --stage forward
    // --no-simplify` printed 369 MB for 1,000. Now 106 MB at 10,000, and 1.7 MB printed for
    // 1,000 (17.9 MB for 10,000). The budget measures it: 10,000 elements in 300 MB.
    let n = 10_000;
    let lit = format!(
        "def f (x : Real) : Array Real = [{}]\n",
        vec!["x"; n].join(", ")
    );
    let path = file("literal", &lit);
    let p = path.to_str().unwrap();
    let r = chad(
        &[
            "--max-memory",
            "300M",
            "jvp",
            p,
            "--arg",
            "1.0",
            "--tangent",
            "1.0",
        ],
        None,
        None,
        30.0,
    );
    assert!(r.ok(), "{}", r.stderr);
    assert!(
        r.stdout.starts_with("value: [1.0, 1.0"),
        "{}",
        &r.stdout[..100]
    );
    let ct = format!("[{}]", vec!["1.0"; n].join(", "));
    let r = chad(
        &[
            "--max-memory",
            "300M",
            "vjp",
            p,
            "--arg",
            "1.0",
            "--cotangent",
            &ct,
        ],
        None,
        None,
        30.0,
    );
    assert!(
        r.ok() && r.stdout.contains(&format!("x = {n}.0")),
        "{}",
        r.stderr
    );
    let small = file(
        "literal-1000",
        &format!(
            "def f (x : Real) : Array Real = [{}]\n",
            vec!["x"; 1000].join(", ")
        ),
    );
    for stage in ["forward", "reverse"] {
        let r = chad(
            &[
                "show",
                small.to_str().unwrap(),
                "--stage",
                stage,
                "--no-simplify",
            ],
            None,
            None,
            30.0,
        );
        assert!(r.ok(), "{}", r.stderr);
        assert!(
            r.stdout.len() < 4_000_000,
            "{stage}: {} bytes",
            r.stdout.len()
        );
    }
}

#[test]
fn show_of_deep_ifs_is_linear() {
    // Before: 349 MB printed for `if` nested 2,000 deep. Now 0.5-4 MB per stage.
    let path = file("ifs-show", &nested_ifs(2_000));
    let p = path.to_str().unwrap();
    for stage in ["source", "ccc", "forward", "reverse"] {
        let r = chad(&["show", p, "--stage", stage], None, None, 30.0);
        assert!(r.ok(), "{}", r.stderr);
        assert!(
            r.stdout.len() < 10_000_000,
            "{stage}: {} bytes",
            r.stdout.len()
        );
    }
}

#[test]
fn grad_checks_the_result_type_first() {
    // Before: 19-38 s and 4.8 GB before reporting that the result is not Real. Now 0.05 s.
    let n = 10_000;
    let src = format!(
        "def f (x : Real) : Int = length {}x{}\n",
        "[".repeat(n),
        "]".repeat(n)
    );
    let path = file("length-nest", &src);
    let p = path.to_str().unwrap();
    for extra in [&[][..], &["--engine", "dual"][..]] {
        let mut args = vec!["grad", p, "--arg", "1.0"];
        args.extend_from_slice(extra);
        let r = chad(&args, None, None, 10.0);
        assert_eq!(r.status, Some(1));
        assert!(
            r.stderr.contains("grad needs a Real-valued definition"),
            "{}",
            r.stderr
        );
        assert!(r.secs < 5.0, "took {} s", r.secs);
    }
}

#[test]
fn eval_is_linear_in_tuple_width_and_parameter_count() {
    // Before: the default `eval` of a 40,000-element tuple took 17-29 s, of a 40,000-parameter
    // lambda over 60 s. Now 0.1 s and 0.4 s.
    let n = 40_000;
    let tuple = format!("def f (x : Real) = ({})\n", vec!["x"; n].join(", "));
    let lambda = format!(
        "def f (x : Real) : Real = (\\{} -> a0) {}\n",
        (0..n)
            .map(|i| format!("(a{i} : Real)"))
            .collect::<Vec<_>>()
            .join(" "),
        vec!["x"; n].join(" ")
    );
    for (name, src, want) in [("tuple", tuple, "(1.0, 1.0"), ("lambda", lambda, "1.0")] {
        let path = file(name, &src);
        let r = chad(
            &["eval", path.to_str().unwrap(), "--arg", "1.0"],
            None,
            None,
            30.0,
        );
        assert!(r.ok() && r.stdout.starts_with(want), "{name}: {}", r.stderr);
        assert!(r.secs < 10.0, "{name}: {} s", r.secs);
    }
}

#[test]
fn the_memory_budget_is_global() {
    // Before: the length limit was per `build` call, so this grew past 5 GB with no error,
    // and a build at the limit allocated 8.4 GB. Now every array allocation asks one budget.
    let nested = "def f (x : Real) : Real =\n  \
                  sum (map sum (build 100000 (\\(i : Int) -> build 100000 (\\(j : Int) -> x))))\n";
    let path = file("nested-build", nested);
    let p = path.to_str().unwrap();
    for cmd in [
        &["eval"][..],
        &["grad"][..],
        &["jvp", "--tangent", "1.0"][..],
    ] {
        let mut args = vec!["--max-memory", "64M", cmd[0], p, "--arg", "1.0"];
        args.extend_from_slice(&cmd[1..]);
        let r = chad(&args, None, None, 30.0);
        assert_eq!(r.status, Some(1), "{args:?}: {}", r.stdout);
        assert!(
            r.stderr.contains("memory budget exceeded") && r.stderr.contains("64.0 MiB"),
            "{}",
            r.stderr
        );
        assert!(
            r.stderr.contains("build 100000"),
            "points at the build: {}",
            r.stderr
        );
    }
    // A single build past the budget is refused before allocating.
    let big = "def f (x : Real) : Real = sum (build 268435456 (\\(i : Int) -> x))\n";
    let path = file("big-build", big);
    let r = chad(
        &[
            "--max-memory",
            "1G",
            "eval",
            path.to_str().unwrap(),
            "--arg",
            "1.0",
        ],
        None,
        None,
        10.0,
    );
    assert_eq!(r.status, Some(1));
    assert!(r.stderr.contains("memory budget exceeded"), "{}", r.stderr);
    assert!(r.secs < 5.0);
}

#[test]
fn an_allocation_the_system_refuses_is_an_error() {
    // With the budget set above what the address space allows, the system refuses an
    // allocation first. Before: "memory allocation of 800000 bytes failed" and SIGABRT. Now
    // the emergency reserve is given back, and the run stops with an error.
    let nested = "def f (x : Real) : Real =\n  \
                  sum (map sum (build 100000 (\\(i : Int) -> build 100000 (\\(j : Int) -> x))))\n";
    let path = file("refused", nested);
    let p = path.to_str().unwrap();
    for cmd in [
        &["eval"][..],
        &["grad"][..],
        &["jvp", "--tangent", "1.0"][..],
    ] {
        let mut args = vec!["--max-memory", "100G", cmd[0], p, "--arg", "1.0"];
        args.extend_from_slice(&cmd[1..]);
        let r = chad(&args, None, Some(400_000), 60.0);
        assert_eq!(r.status, Some(1), "{args:?}");
        assert!(r.stderr.contains("out of memory"), "{}", r.stderr);
    }
}

#[test]
fn a_failing_unused_subterm_fails_every_command() {
    // Before: eval failed, grad/jvp/vjp printed value 1 and gradient 1.
    let path = file(
        "strict",
        "def f (x : Real) : Real = let a = [1.0] ! 5 in x\n",
    );
    let p = path.to_str().unwrap();
    let cmds: [&[&str]; 5] = [
        &["eval"],
        &["grad"],
        &["grad", "--engine", "dual"],
        &["jvp", "--tangent", "1.0"],
        &["vjp", "--cotangent", "1.0"],
    ];
    for cmd in cmds {
        let mut args = vec![cmd[0], p, "--arg", "1.0"];
        args.extend_from_slice(&cmd[1..]);
        let r = chad(&args, None, None, 10.0);
        assert_eq!(r.status, Some(1), "{args:?}: {}", r.stdout);
        assert!(
            r.stderr.contains("index 5 out of range") && r.stderr.contains(":1:"),
            "{args:?}: {}",
            r.stderr
        );
    }
}
