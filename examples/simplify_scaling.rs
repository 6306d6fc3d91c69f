//! How the simplifier scales on generated straight-line programs (issue: "simplified reverse
//! size / n roughly constant; differentiate + simplify under 1 s at n = 10^4").
//!
//! For n = 10^2, 10^3, 10^4 lets (`random::straight_line_ad_source`), prints the size of the raw
//! and simplified derivative code, the simplified size per source line, the passes, and the
//! times to transform (compile + AD) and to simplify, for reverse and forward mode.
//!
//! Run: `cargo run --release --example simplify_scaling [-- --far-back] [--sizes 1000,3000]
//! [--mode reverse|forward] [--cpu] [--suite]`. With `--far-back`,
//! one operand in ten is a variable from anywhere earlier in the program. With `--suite`, the
//! programs are the benchmark suite's `straight_line` family (`bench::programs::straight_line`:
//! one operand in four is a parameter, so a variable up to n binders back).

use chad::internals::prim::Registry;
use chad::internals::random::straight_line_ad_source;
use chad::internals::simplify::{Rules, simplify_with};
use std::time::Instant;

/// The CLI's allocator (`src/main.rs`), so the times are those `chad` pays. With glibc's malloc
/// about a quarter of reverse mode at 10⁴ lines was first-touch page faults and free-list
/// consolidation on the ~1.8·10⁶-node raw derivative (theory-notes/06, "Differentiate + simplify
/// at 10⁴ lines").
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Transparent huge pages off for this process (Linux): mimalloc asks for them, and on a
/// machine where a huge-page fault has to zero (or compact) 2 MiB at a time, reverse mode at
/// 10⁴ lines took 1.2–1.4 s instead of 0.85 s, from one run to the next (theory-notes/06).
#[cfg(target_os = "linux")]
fn no_huge_pages() {
    use std::ffi::{c_int, c_ulong};
    unsafe extern "C" {
        fn prctl(option: c_int, ...) -> c_int;
    }
    const PR_SET_THP_DISABLE: c_int = 41;
    // SAFETY: prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0) only sets a flag of this process; on
    // failure (an old kernel) nothing changes, which is fine.
    unsafe {
        prctl(
            PR_SET_THP_DISABLE,
            1 as c_ulong,
            0 as c_ulong,
            0 as c_ulong,
            0 as c_ulong,
        );
    }
}

#[cfg(not(target_os = "linux"))]
fn no_huge_pages() {}

fn main() {
    no_huge_pages();
    let far_back = std::env::args().any(|a| a == "--far-back");
    let maps = std::env::args().any(|a| a == "--maps");
    let cpu = std::env::args().any(|a| a == "--cpu");
    let suite = std::env::args().any(|a| a == "--suite");
    println!(
        "{:<8} {:>5} {:>10} {:>10} {:>8} {:>6} {:>10} {:>10} {:>10}",
        "mode", "n", "raw", "simplified", "simp/n", "passes", "AD ms", "simp ms", "total ms"
    );
    let modes: &[bool] = match mode() {
        Some("reverse") => &[true],
        Some("forward") => &[false],
        _ => &[true, false],
    };
    for &reverse in modes {
        for n in sizes(&[100, 1_000, 10_000]) {
            let text = if suite {
                chad::internals::bench::programs::straight_line(n)
            } else {
                straight_line_ad_source(n, 7, far_back, maps)
            };
            let prog = chad::internals::source::load(&text, &Registry::builtin())
                .expect("generated programs check");
            let entry = prog.entry(prog.defs.len() - 1);
            let t0 = Clock::now(cpu);
            let comb = chad::internals::ccc::compile_entry(&entry);
            let mor = if reverse {
                chad::internals::ad::reverse::transform(&comb)
            } else {
                chad::internals::ad::forward::transform(&comb)
            }
            .expect("straight-line programs are differentiable");
            let t1 = Clock::now(cpu);
            let (simple, stats) = simplify_with(&mor.body, &Rules::all());
            let t2 = Clock::now(cpu);
            let (raw, size) = (mor.body.size(), simple.size());
            println!(
                "{:<8} {:>5} {:>10} {:>10} {:>8.1} {:>6} {:>10.1} {:>10.1} {:>10.1}",
                if reverse { "reverse" } else { "forward" },
                n,
                raw,
                size,
                size as f64 / n as f64,
                stats.passes,
                (t1 - t0) * 1e3,
                (t2 - t1) * 1e3,
                (t2 - t0) * 1e3,
            );
        }
    }
}

/// Seconds on a clock: wall time, or with `--cpu` this thread's CPU time (Linux
/// `/proc/thread-self/schedstat`; steadier than wall time on a loaded machine).
struct Clock;

impl Clock {
    fn now(cpu: bool) -> f64 {
        static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        if cpu {
            let stat = std::fs::read_to_string("/proc/thread-self/schedstat")
                .expect("--cpu needs /proc/thread-self/schedstat (Linux)");
            let ns: f64 = stat
                .split_whitespace()
                .next()
                .and_then(|s| s.parse().ok())
                .expect("schedstat starts with the CPU time in ns");
            ns * 1e-9
        } else {
            START.get_or_init(Instant::now).elapsed().as_secs_f64()
        }
    }
}

/// `--mode reverse` or `--mode forward` runs one mode only (for profiling).
fn mode() -> Option<&'static str> {
    let args: Vec<String> = std::env::args().collect();
    let i = args.iter().position(|a| a == "--mode")?;
    match args.get(i + 1).map(String::as_str) {
        Some("reverse") => Some("reverse"),
        Some("forward") => Some("forward"),
        other => panic!("--mode reverse|forward, not {other:?}"),
    }
}

/// The sizes to run: `--sizes 100,200` on the command line, or the defaults.
fn sizes(default: &[usize]) -> Vec<usize> {
    let args: Vec<String> = std::env::args().collect();
    match args.iter().position(|a| a == "--sizes") {
        Some(i) => args[i + 1]
            .split(',')
            .map(|s| s.parse().expect("a size"))
            .collect(),
        None => default.to_vec(),
    }
}
