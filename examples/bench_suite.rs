//! The benchmark suite (`benches/programs/suite.json`, read by `chad::internals::bench::suite`) as files.
//!
//! * `write DIR [--only FAMILY]...`: writes every case's arguments (`FAMILY-SIZE.args.json`),
//!   the generated programs (`FAMILY-SIZE.chad`) and an index `DIR/index.json` listing, per case,
//!   the program, the definition, the arguments file and the native baseline's name, for
//!   `chad bench FILE --def NAME --args-file ARGS` (this is what `benches/perf_table.py` runs);
//! * `list`: prints every case id (`family/size=value`) with its description.
//!
//! Run: `cargo run --release --example bench_suite -- write target/bench-suite`.

use chad::internals::bench::suite::Suite;
use std::path::Path;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: bench_suite write DIR [--only FAMILY]... | bench_suite list";
    let suite = match Suite::load_default() {
        Ok(s) => s,
        Err(e) => {
            eprint!("{}", e.render(None));
            return ExitCode::from(1);
        }
    };
    match args.first().map(String::as_str) {
        Some("list") if args.len() == 1 => {
            for case in suite.cases() {
                println!("{:<28} {}", case.id(), case.family.description);
            }
            ExitCode::SUCCESS
        }
        Some("write") if args.len() >= 2 => {
            let dir = Path::new(&args[1]);
            let mut only = Vec::new();
            let mut rest = args[2..].iter();
            while let Some(a) = rest.next() {
                match (a.as_str(), rest.next()) {
                    ("--only", Some(f)) if suite.family(f).is_some() => only.push(f.clone()),
                    ("--only", Some(f)) => {
                        let names: Vec<&str> =
                            suite.families.iter().map(|f| f.name.as_str()).collect();
                        eprintln!("no family `{f}` (families: {})", names.join(", "));
                        return ExitCode::from(2);
                    }
                    _ => {
                        eprintln!("{usage}");
                        return ExitCode::from(2);
                    }
                }
            }
            match suite.write(dir, |f| only.is_empty() || only.contains(&f.name)) {
                Ok(index) => {
                    let n = index["cases"].as_array().map_or(0, Vec::len);
                    println!("wrote {n} cases to {}", dir.join("index.json").display());
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprint!("{}", e.render(None));
                    ExitCode::from(1)
                }
            }
        }
        _ => {
            eprintln!("{usage}");
            ExitCode::from(2)
        }
    }
}
