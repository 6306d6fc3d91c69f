//! Times the hand-written Rust version of a benchmark objective (`benches/native/mod.rs`) on a
//! chad argument file, the baseline that `chad bench`'s primal time is compared with:
//!
//! ```text
//! cargo run --release --example native_baselines -- PROGRAM ARGS_FILE [--repeat N]
//! ```
//!
//! PROGRAM is `rosenbrock`, `mlp` or `gmm`; ARGS_FILE is in the `--args-file` format (a JSON
//! array of the arguments of `benches/programs/rosenbrock.chad`, `examples/mlp.chad`'s `loss` or
//! `examples/gmm.chad`'s `gmm`). After one warm-up run it times N runs (default 10) and prints
//! one JSON line, `{"native_s": S, "value": V}`, with S the median time of a run in seconds and
//! V the objective's value. Errors go to stderr with exit status 1.

// `pub` so that `tests/native.rs`, which includes this file to test `run`, uses this copy.
#[path = "../benches/native/mod.rs"]
pub mod native;

use std::hint::black_box;
use std::process::ExitCode;
use std::time::Instant;

const USAGE: &str = "usage: native_baselines PROGRAM ARGS_FILE [--repeat N] \
                     (PROGRAM: rosenbrock, mlp or gmm)";

struct Options {
    program: String,
    args_file: String,
    repeat: usize,
}

fn parse_options(args: &[String]) -> Result<Options, String> {
    let mut positional = Vec::new();
    let mut repeat = 10;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--repeat" => {
                let n = it.next().ok_or("--repeat needs a number")?;
                repeat = n
                    .parse()
                    .ok()
                    .filter(|&n| n > 0)
                    .ok_or(format!("--repeat {n}: expected a positive integer"))?;
            }
            "-h" | "--help" => return Err(USAGE.into()),
            _ if a.starts_with("--") => return Err(format!("unknown option {a}\n{USAGE}")),
            _ => positional.push(a.clone()),
        }
    }
    let [program, args_file]: [String; 2] = positional
        .try_into()
        .map_err(|_| format!("expected PROGRAM and ARGS_FILE\n{USAGE}"))?;
    Ok(Options {
        program,
        args_file,
        repeat,
    })
}

pub fn run(args: &[String]) -> Result<String, String> {
    let opts = parse_options(args)?;
    let text =
        std::fs::read_to_string(&opts.args_file).map_err(|e| format!("{}: {e}", opts.args_file))?;
    let json: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", opts.args_file))?;
    let program = native::Program::decode(&opts.program, &json)
        .map_err(|e| format!("{}: {e}", opts.args_file))?;

    let value = black_box(black_box(&program).eval());
    let mut times: Vec<f64> = (0..opts.repeat)
        .map(|_| {
            let start = Instant::now();
            black_box(black_box(&program).eval());
            start.elapsed().as_secs_f64()
        })
        .collect();
    times.sort_by(f64::total_cmp);
    let n = times.len();
    let median = if n % 2 == 1 {
        times[n / 2]
    } else {
        0.5 * (times[n / 2 - 1] + times[n / 2])
    };
    // Non-finite values are not JSON numbers: write them as chad does, as strings.
    let value_json = serde_json::Number::from_f64(value)
        .map(serde_json::Value::Number)
        .unwrap_or_else(|| {
            serde_json::Value::String(
                if value.is_nan() {
                    "NaN"
                } else if value > 0.0 {
                    "Infinity"
                } else {
                    "-Infinity"
                }
                .into(),
            )
        });
    Ok(serde_json::json!({ "native_s": median, "value": value_json }).to_string())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("native_baselines: {e}");
            ExitCode::FAILURE
        }
    }
}
