//! The command line fuzzed in process (`chad::internals::fuzz`): generated and mutated programs through
//! `check`, every engine of `eval`, `grad`, `jvp`, `vjp`, `hessian`, `hvp`, `jacobian` and `show`
//! at every stage. No input may panic; each command ends with status 0 or an error (1, or 2
//! for an argument clap rejects) that says what went wrong.
//!
//! CI runs `CHAD_FUZZ_INPUTS` inputs (default 1000) from a fixed seed; `CHAD_FUZZ_SEED` picks
//! another campaign (the offline driver, `examples/fuzz_campaign.rs`, runs millions and also
//! catches crashes and hangs, in child processes).

use chad::internals::fuzz;

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[test]
fn no_input_panics_any_command() {
    let seed = env("CHAD_FUZZ_SEED", 1);
    let n = env("CHAD_FUZZ_INPUTS", 1000);
    let dir = std::env::temp_dir().join(format!("chad-fuzz-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("input.chad");
    let (mut checked, mut commands, mut ok) = (0, 0, 0);
    let mut failures = Vec::new();
    for i in 0..n {
        let text = fuzz::input(seed, i);
        let report = fuzz::exercise(&text, &file, i);
        if report.runs.len() > 1 {
            checked += 1;
        }
        commands += report.runs.len();
        ok += report.count(0);
        for (args, o) in &report.runs {
            if let Some(o) = o {
                // An error is reported, never silent: a failing command prints a message.
                if o.status != 0 && o.stderr.trim().is_empty() {
                    failures.push(format!(
                        "input {i}: `{}` exited {} with no message",
                        args.join(" "),
                        o.status
                    ));
                }
            }
        }
        for f in report.findings {
            failures.push(format!(
                "input {i} (replay: chad::internals::fuzz::input({seed}, {i})): `chad {}` panicked: {}\n{text}",
                f.command.join(" "),
                f.message
            ));
        }
    }
    std::fs::remove_dir_all(&dir).ok();
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    eprintln!("{n} inputs, {checked} type-checked, {commands} commands, {ok} succeeded");
    // The campaign must reach the derivative commands, not only the front end's errors.
    assert!(
        checked * 4 >= n as usize,
        "only {checked} of {n} inputs type-checked"
    );
    assert!(
        ok * 4 >= commands,
        "only {ok} of {commands} commands succeeded"
    );
}

#[test]
fn inputs_replay_and_mutants_differ() {
    assert_eq!(fuzz::input(7, 123), fuzz::input(7, 123));
    let distinct: std::collections::BTreeSet<String> = (0..50).map(|i| fuzz::input(7, i)).collect();
    assert!(distinct.len() >= 45, "{} distinct of 50", distinct.len());
    let base = fuzz::corpus()[3];
    let mut rng = fuzz::Rng::new(5);
    let changed = (0..50)
        .filter(|_| fuzz::mutate(base, base, &mut rng) != base)
        .count();
    assert!(
        changed >= 45,
        "only {changed} of 50 mutants differ from their base"
    );
}

/// Every corpus entry is a program that checks, so that mutation starts from well-typed text.
#[test]
fn the_corpus_checks() {
    for (k, text) in fuzz::corpus().iter().enumerate() {
        if let Err(e) = chad::Program::load(text).and_then(|p| p.terms().map(|_| ())) {
            panic!("corpus entry {k}: {}", e.render(None));
        }
    }
}

/// What the fuzzer found, each now an error with a message instead of a panic.
#[test]
fn fuzzer_findings_are_errors() {
    let dir = std::env::temp_dir().join(format!("chad-fuzz-found-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("f.chad");
    // `chad jacobian` of a function-valued result panicked listing the result's components
    // (input 57 of seed 1).
    std::fs::write(
        &file,
        "def main (x : Real) : Real -> Real = \\(y : Real) -> x * y\n",
    )
    .unwrap();
    let path = file.display().to_string();
    for mode in [&[][..], &["--mode", "forward"], &["--mode", "reverse"]] {
        let mut args = vec!["jacobian", &path, "--arg", "1.5"];
        args.extend_from_slice(mode);
        let o = chad::internals::cli::run_args(args);
        assert_eq!(o.status, 1, "{o:?}");
        assert!(
            o.stderr
                .contains("a Jacobian needs first-order parameters and result"),
            "{}",
            o.stderr
        );
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// `hessian` and `hvp` of a program that fails where it is evaluated fail at once with the
/// evaluator's error at the failing operation (found by the campaign: an MLP whose arguments
/// did not fit spent 50-90 s building second-order code, then failed with the error placed at
/// the start of the file).
#[test]
fn second_order_commands_fail_where_the_program_fails() {
    let dir = std::env::temp_dir().join(format!("chad-fuzz-fail-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("f.chad");
    std::fs::write(
        &file,
        "def rec p (n : Int) (x : Real) : Real = if n <= 0 then x else x * p (n - 1) x\n\
         def main (x : Real) : Real = p 2 x + [x] ! 3\n",
    )
    .unwrap();
    let path = file.display().to_string();
    for cmd in [
        vec!["hessian", &path, "--arg", "1.0"],
        vec!["hvp", &path, "--arg", "1.0", "--tangent", "1.0"],
    ] {
        let o = chad::internals::cli::run_args(&cmd);
        assert_eq!(o.status, 1, "{o:?}");
        assert!(
            o.stderr.contains("index 3 out of range") && o.stderr.contains("f.chad:2:38"),
            "{}: {}",
            cmd[0],
            o.stderr
        );
    }
    std::fs::remove_dir_all(&dir).ok();
}
