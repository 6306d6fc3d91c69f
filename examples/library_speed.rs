//! A Rust user's gradient through the library against `chad bench`'s, measured in one run.
//!
//! For `examples/gmm.chad` and `examples/mlp.chad`, at their argument files and at the
//! benchmark suite's sizes (`benches/programs/suite.json`), this times
//!
//! * `chad bench --json --no-dual`'s reverse phase (the CLI, run as a subprocess: the binary
//!   next to this example, `target/release/chad`, which must be built);
//! * `chad::Function::grad` in this process (the library's pipeline: the code compiled once,
//!   then the median of the timed calls);
//! * reverse CHAD of the program as written, unoptimised and unsimplified (`ad::Vjp::new`:
//!   what `chad::internals::ad::grad` ran before it went through the pipeline; timed once, after one
//!   warm-up run, as it is slow),
//!
//! and prints each time with its ratio to the CLI's. `cargo run --release --example
//! library_speed [-- REPEAT]` uses the system allocator (a library user's default);
//! `--example library_speed_mimalloc` the allocator the `chad` binary uses.

use chad::internals::bench::suite::Suite;
use chad::{Function, Program, Value};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

fn time<T>(repeat: usize, mut f: impl FnMut() -> T) -> f64 {
    std::hint::black_box(f());
    median(
        (0..repeat)
            .map(|_| {
                let t = Instant::now();
                std::hint::black_box(f());
                t.elapsed().as_secs_f64()
            })
            .collect(),
    )
}

/// `chad bench`'s reverse time, or why there is none.
fn cli_reverse(
    chad: &Path,
    file: &Path,
    def: &str,
    args: &Path,
    repeat: usize,
) -> Result<f64, String> {
    let out = Command::new(chad)
        .arg("bench")
        .arg(file)
        .args(["--def", def, "--json", "--no-dual", "--repeat"])
        .arg(repeat.to_string())
        .arg("--args-file")
        .arg(args)
        .output()
        .map_err(|e| format!("cannot run {}: {e}", chad.display()))?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).map_err(|e| e.to_string())?;
    json["reverse_s"]
        .as_f64()
        .ok_or_else(|| "no reverse_s".to_string())
}

fn parse_args(f: &Function, json: &[serde_json::Value]) -> Vec<Value> {
    let types = f.entry().expect("entry").param_types();
    json.iter()
        .zip(&types)
        .map(|(j, t)| Value::from_json(j, t).expect("arguments of the right types"))
        .collect()
}

pub fn main() {
    let repeat: usize = std::env::args()
        .nth(1)
        .and_then(|r| r.parse().ok())
        .unwrap_or(10);
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let chad = std::env::current_exe()
        .ok()
        .and_then(|p| Some(p.parent()?.parent()?.join("chad")))
        .filter(|p| p.exists())
        .unwrap_or_else(|| root.join("target/release/chad"));
    let tmp = std::env::temp_dir().join(format!("chad-library-speed-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).expect("a temporary folder");
    let suite = Suite::load_default().expect("the benchmark suite");
    println!(
        "{:<16} {:>12} {:>12} {:>8} {:>12} {:>8}",
        "case", "chad bench", "Function", "/ CLI", "unoptimised", "/ CLI"
    );
    for (name, def) in [("gmm", "gmm"), ("mlp", "loss")] {
        let file = root.join(format!("examples/{name}.chad"));
        let program = Program::from_file(&file).expect("the example program");
        let f = program.function(def).expect("the definition");
        let entry = f.entry().expect("entry").clone();
        let mut cases: Vec<(String, Vec<serde_json::Value>)> = Vec::new();
        let args_file = root.join(format!("examples/{name}.args.json"));
        let text = std::fs::read_to_string(&args_file).expect("the argument file");
        let json: serde_json::Value = serde_json::from_str(&text).expect("JSON");
        cases.push((
            format!("{name}/args.json"),
            json.as_array().expect("an array").clone(),
        ));
        let family = suite.family(name).expect("a suite family");
        for case in family.cases() {
            cases.push((case.id(), case.args_json().expect("generated arguments")));
        }
        for (label, json) in cases {
            let path = tmp.join(format!("{}.json", label.replace('/', "_")));
            std::fs::write(&path, serde_json::Value::Array(json.clone()).to_string())
                .expect("a temporary file");
            let args = parse_args(&f, &json);
            let cli = cli_reverse(&chad, &file, def, &path, repeat);
            let lib = time(repeat, || f.grad(&args).expect("a gradient"));
            let plain = chad::internals::ad::Vjp::new(&entry).expect("reverse mode");
            // Slow (a minute at gmm N=1000): one run, after the warm-up `time` does.
            let old = time(1, || plain.grad(&args).expect("a gradient"));
            match cli {
                Ok(c) => println!(
                    "{label:<16} {c:>12.3e} {lib:>12.3e} {:>8.2} {old:>12.3e} {:>8.2}",
                    lib / c,
                    old / c
                ),
                Err(why) => println!(
                    "{label:<16} {:>12} {lib:>12.3e} {:>8} {old:>12.3e} {:>8}   ({})",
                    "-",
                    "-",
                    "-",
                    why.trim()
                ),
            }
        }
    }
    let _ = std::fs::remove_dir_all(&tmp);
}
