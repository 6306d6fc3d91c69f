//! The README's command-line transcripts cannot go stale: every command shown in it is run (the
//! `chad` binary, from the repository's root) and its output compared with the README's.
//!
//! Two forms are recognised:
//!
//! * a ```` ```text ```` block of `$ chad ARGS` lines, each followed by its output (up to the
//!   next `$ ` line or the end of the block);
//! * a ```` ```sh ```` block holding the single line `cargo run --release -- ARGS`, followed
//!   (after prose) by a ```` ```text ```` block: the output of `chad ARGS`.
//!
//! In an expected output, a line `...` (after indentation) stands for any number of lines, and
//! `...` inside a line for any text there (`means = [[-1.4, ...], ...]`). Arguments are split at
//! spaces, with `"..."` quoting. Timings are not transcribed.

use std::path::Path;
use std::process::Command;

/// One documented command: its arguments, the expected output, and where the README shows it.
struct Transcript {
    args: Vec<String>,
    expected: Vec<String>,
    line: usize,
}

fn split_args(s: &str) -> Vec<String> {
    let mut args = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut any = false;
    for c in s.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                any = true;
            }
            ' ' if !quoted => {
                if any {
                    args.push(std::mem::take(&mut cur));
                    any = false;
                }
            }
            c => {
                cur.push(c);
                any = true;
            }
        }
    }
    assert!(!quoted, "unbalanced quotes in `{s}`");
    if any {
        args.push(cur);
    }
    args
}

/// The fenced blocks of a Markdown text: (info string, first line number, lines).
fn blocks(text: &str) -> Vec<(String, usize, Vec<String>)> {
    let mut out = Vec::new();
    let mut cur: Option<(String, usize, Vec<String>)> = None;
    for (i, line) in text.lines().enumerate() {
        if let Some(info) = line.strip_prefix("```") {
            match cur.take() {
                Some(b) => out.push(b),
                None => cur = Some((info.trim().to_string(), i + 2, Vec::new())),
            }
        } else if let Some((_, _, lines)) = &mut cur {
            lines.push(line.to_string());
        }
    }
    out
}

fn transcripts(text: &str) -> Vec<Transcript> {
    let bs = blocks(text);
    let mut out = Vec::new();
    for (k, (info, first, lines)) in bs.iter().enumerate() {
        if info == "sh"
            && let [one] = &lines[..]
            && let Some(args) = one.strip_prefix("cargo run --release -- ")
            && let Some((next, _, expected)) = bs.get(k + 1)
            && next == "text"
        {
            out.push(Transcript {
                args: split_args(args),
                expected: expected.clone(),
                line: *first,
            });
        }
        if info != "text" {
            continue;
        }
        for (i, l) in lines.iter().enumerate() {
            let Some(cmd) = l.strip_prefix("$ chad ") else {
                continue;
            };
            let expected = lines[i + 1..]
                .iter()
                .take_while(|l| !l.starts_with("$ "))
                .cloned()
                .collect();
            out.push(Transcript {
                args: split_args(cmd),
                expected,
                line: first + i,
            });
        }
    }
    out
}

/// Whether `actual` matches the line pattern `pat` (`...` matching any text).
fn line_matches(pat: &str, actual: &str) -> bool {
    let parts: Vec<&str> = pat.split("...").collect();
    if parts.len() == 1 {
        return pat == actual;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !actual.starts_with(first) || actual.len() < first.len() + last.len() {
        return false;
    }
    let mut rest = &actual[first.len()..];
    for mid in &parts[1..parts.len() - 1] {
        match rest.find(mid) {
            Some(i) => rest = &rest[i + mid.len()..],
            None => return false,
        }
    }
    rest.ends_with(last)
}

/// Whether the output lines `actual` match the expected lines (`...` lines matching any
/// number of lines).
fn matches(expected: &[String], actual: &[&str]) -> bool {
    match expected.split_first() {
        None => actual.is_empty(),
        Some((p, rest)) if p.trim() == "..." => {
            (0..=actual.len()).any(|k| matches(rest, &actual[k..]))
        }
        Some((p, rest)) => match actual.split_first() {
            Some((a, more)) => line_matches(p, a) && matches(rest, more),
            None => false,
        },
    }
}

#[test]
fn readme_transcripts_are_current() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(root.join("README.md")).unwrap();
    let ts = transcripts(&text);
    assert!(ts.len() >= 9, "only {} transcripts found", ts.len());
    let mut failures = Vec::new();
    for t in &ts {
        let out = Command::new(env!("CARGO_BIN_EXE_chad"))
            .args(&t.args)
            .current_dir(root)
            .output()
            .unwrap();
        let mut got = String::from_utf8_lossy(&out.stdout).into_owned();
        got.push_str(&String::from_utf8_lossy(&out.stderr));
        let lines: Vec<&str> = got.lines().collect();
        if !out.status.success() || !matches(&t.expected, &lines) {
            failures.push(format!(
                "README.md:{}: chad {}\n--- expected\n{}\n--- got ({})\n{}",
                t.line,
                t.args.join(" "),
                t.expected.join("\n"),
                out.status,
                got
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn the_matcher_can_fail() {
    let e = |s: &[&str]| s.iter().map(|l| l.to_string()).collect::<Vec<_>>();
    assert!(matches(&e(&["a", "...", "d"]), &["a", "b", "c", "d"]));
    assert!(matches(&e(&["a", "...", "d"]), &["a", "d"]));
    assert!(!matches(&e(&["a", "...", "d"]), &["a", "b"]));
    assert!(!matches(&e(&["a"]), &["a", "b"]));
    assert!(matches(&e(&["x = [1, ...], ..."]), &["x = [1, 2], [3]"]));
    assert!(!matches(&e(&["x = [1, ...]"]), &["x = [2, 1]"]));
    assert_eq!(
        split_args(r#"grad f --arg "[1, 2]" --arg 3"#),
        ["grad", "f", "--arg", "[1, 2]", "--arg", "3"]
    );
    let ts = transcripts("```text\n$ chad a \"()\"\nout\n$ chad b\n```\n");
    assert_eq!(ts.len(), 2);
    assert_eq!(ts[0].args, ["a", "()"]);
    assert_eq!(ts[0].expected, ["out"]);
    assert_eq!(ts[1].line, 4);
}
