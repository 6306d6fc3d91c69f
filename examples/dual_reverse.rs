//! Dual-numbers reverse AD against reverse CHAD on the benchmark suite, in one run, and the
//! sharing chain's backpropagator calls (the README's and theory note 08's tables).
//!
//! For every case of the suite (`benches/programs/suite.json`, every size):
//!
//! * *compiled*: [`Bench::measure`] times the primal, forward and reverse CHAD on the execution
//!   engine and dual-numbers reverse AD of the same optimised program, interleaved;
//! * *interpreted*: then, interleaved again, the direct evaluator on the optimised source program
//!   (the interpreter the dual engine's forward pass is built like), reverse CHAD's simplified
//!   derivative code run by the tree-walking target evaluator (`target::eval`, an interpreter of
//!   the same design), and dual-numbers reverse AD once more.
//!
//! Dual-numbers reverse AD interprets the program, so "dual / reverse CHAD" on the engine compares
//! an interpreter with compiled code; the interpreted columns compare taping with source
//! transformation on equal terms. Medians of `--repeat` rounds.
//!
//! ```text
//! cargo run --release --example dual_reverse -- [--repeat N] [--only FAMILY]... [--quick]
//!                                               [--readme] [--calls]
//! ```
//!
//! `--quick`: each family's smallest size only. `--readme`: replace the table between
//! `<!-- dual-table:begin -->` and `<!-- dual-table:end -->` in README.md. `--calls`: only the
//! sharing-chain table (backpropagator calls of the final and the naive algorithm).

use chad::Value;
use chad::internals::ad::Vjp;
use chad::internals::bench::Bench;
use chad::internals::bench::suite::Suite;
use chad::internals::dual_reverse::{DualReverse, Options};
use std::time::Instant;

/// The allocator `chad` itself uses (src/main.rs), so times compare with `chad bench`'s.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    if n % 2 == 1 {
        xs[n / 2]
    } else {
        (xs[n / 2 - 1] + xs[n / 2]) / 2.0
    }
}

fn seconds(t: f64) -> String {
    if t >= 1.0 {
        format!("{t:.2} s")
    } else if t >= 1e-3 {
        format!("{:.3} ms", t * 1e3)
    } else {
        format!("{:.3} µs", t * 1e6)
    }
}

/// Medians over `repeat` interleaved rounds of each of `fs`, after one warm-up run of each.
fn interleaved(
    repeat: usize,
    fs: &mut [&mut dyn FnMut() -> chad::Result<()>],
) -> chad::Result<Vec<f64>> {
    for f in fs.iter_mut() {
        f()?;
    }
    let mut times = vec![Vec::new(); fs.len()];
    for _ in 0..repeat {
        for (f, t) in fs.iter_mut().zip(&mut times) {
            let start = Instant::now();
            f()?;
            t.push(start.elapsed().as_secs_f64().max(1e-9));
        }
    }
    Ok(times.into_iter().map(median).collect())
}

fn calls_table() -> chad::Result<String> {
    let mut out = String::from("| k | final algorithm | naive |\n| ---: | ---: | ---: |\n");
    for k in [1usize, 2, 4, 8, 12, 16, 20, 100, 1000, 10000] {
        let src =
            chad::internals::bench::programs::generate("sharing_chain", k).expect("a generator");
        let prog =
            chad::internals::source::load(&src, &chad::internals::prim::Registry::builtin())?;
        let entry = prog.entry(prog.defs.len() - 1);
        let calls = |naive| -> chad::Result<String> {
            let o = Options {
                naive,
                max_naive_calls: 1 << 26,
                ..Options::default()
            };
            Ok(
                match DualReverse::new(&entry, o)?.grad(&[Value::Real(0.75)]) {
                    Ok(out) => out.stats.calls.to_string(),
                    Err(_) => format!("> {}", 1u64 << 26),
                },
            )
        };
        out.push_str(&format!("| {k} | {} | {} |\n", calls(false)?, calls(true)?));
    }
    Ok(out)
}

fn main() -> chad::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |f: &str| args.iter().any(|a| a == f);
    let repeat: usize = args
        .iter()
        .position(|a| a == "--repeat")
        .and_then(|i| args.get(i + 1)?.parse().ok())
        .unwrap_or(5);
    let only: Vec<&String> = args
        .iter()
        .enumerate()
        .filter(|(i, _)| *i > 0 && args[i - 1] == "--only")
        .map(|(_, a)| a)
        .collect();
    if flag("--calls") {
        print!("{}", calls_table()?);
        return Ok(());
    }
    let suite = Suite::load_default()?;
    let mut table = String::from(
        "| program | size | primal (compiled) | reverse CHAD / primal (compiled) | dual / reverse \
         CHAD (compiled) | primal (interpreted) | reverse CHAD / primal (interpreted) | dual / \
         primal (interpreted) | dual / reverse CHAD (interpreted) | tape (IDs) |\n| --- | --- | \
         ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
    );
    for family in &suite.families {
        if !only.is_empty() && !only.contains(&&family.name) {
            continue;
        }
        let smallest = family.smallest().size;
        for case in family.cases() {
            if flag("--quick") && case.size != smallest {
                continue;
            }
            let entry = case.entry()?;
            let args = case.args(&entry)?;
            let bench = Bench::new(&entry, args.clone())?;
            let r = bench.measure(repeat)?;
            let dual = r.dual_reverse_s.expect("measured");
            // The interpreters, on the program the engine runs (the optimised one).
            let optimized = chad::internals::optimize::optimize(&entry);
            let engine = DualReverse::new(&optimized, Options::default())?;
            let vjp = Vjp::new(&optimized)?.map_body(chad::internals::simplify::simplify);
            let mor = vjp.mor();
            let x = chad::internals::ccc::eval::context_value(&args);
            let ty = optimized.body.ty.clone();
            let ct = bench.cotangent().clone();
            let mut direct = || chad::internals::eval::eval_entry(&optimized, &args).map(drop);
            let mut chad_interpreted = || -> chad::Result<()> {
                let env = chad::internals::target::eval::Env::new().update(mor.x.id, x.clone());
                let image = chad::internals::target::eval::eval(&mor.body, &env)?;
                let (y, f) = image.expect_pair();
                let v = chad::internals::ad::to_tangent(&ty, y, &ct)?;
                std::hint::black_box(f.expect_lin_fun().apply(&v)?);
                Ok(())
            };
            let mut dual_run = || engine.vjp(&args, &ct).map(drop);
            let t = interleaved(
                repeat,
                &mut [&mut direct, &mut chad_interpreted, &mut dual_run],
            )?;
            let (direct, chad_i, dual_i) = (t[0], t[1], t[2]);
            let ids = engine.vjp(&args, &ct)?.stats.ids;
            let row = format!(
                "| {} | {} | {} | {:.2} | {:.1} | {} | {:.2} | {:.2} | {:.2} | {ids} |\n",
                family.name,
                case.label().replace('=', " = "),
                seconds(r.primal_s),
                r.reverse_over_primal(),
                dual / r.reverse_s,
                seconds(direct),
                chad_i / direct,
                dual_i / direct,
                dual_i / chad_i,
            );
            eprint!("{row}");
            table.push_str(&row);
        }
    }
    table.push_str(&format!(
        "\nMedians of {repeat} interleaved rounds, one run: `cargo run --release --example \
         dual_reverse -- --repeat {repeat}{}`. The tape holds one ID per input scalar and per \
         primitive application that depends on one.\n",
        if flag("--readme") { " --readme" } else { "" }
    ));
    print!("{table}");
    if flag("--readme") {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md");
        let text = std::fs::read_to_string(&path).expect("README.md");
        let (begin, end) = ("<!-- dual-table:begin -->", "<!-- dual-table:end -->");
        let (Some(b), Some(e)) = (text.find(begin), text.find(end)) else {
            panic!("README.md has no {begin} ... {end} markers");
        };
        let new = format!("{}\n{table}{}", &text[..b + begin.len()], &text[e..]);
        std::fs::write(&path, new).expect("write README.md");
        eprintln!("updated {}", path.display());
    }
    Ok(())
}
