//! Parse + type-check + compile to combinators, on generated straight-line programs of
//! 10^3, 10^4 and 10^5 lines (`random::straight_line_source`). Linear growth is the goal.
//!
//! Run: `cargo bench --bench frontend`. Besides criterion's report, prints a one-shot timing
//! table of each phase so the ratios between sizes can be read directly.

use chad::prim::Registry;
use chad::random::straight_line_source;
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use std::hint::black_box;
use std::time::Instant;

fn frontend(text: &str) -> usize {
    let prog = chad::source::load(text, &Registry::builtin()).expect("generated programs check");
    let entry = prog.entry(prog.defs.len() - 1);
    chad::ccc::compile_entry(&entry).size()
}

fn phases(n: usize) {
    let text = straight_line_source(n, 7);
    let reg = Registry::builtin();
    let t0 = Instant::now();
    let ast = chad::source::parser::parse_program(&text).unwrap();
    let t1 = Instant::now();
    let prog = chad::source::check::check_program(&ast, &reg).unwrap();
    let t2 = Instant::now();
    let comb = chad::ccc::compile_entry(&prog.entry(0));
    let t3 = Instant::now();
    let size = comb.size();
    drop((ast, prog, comb));
    let t4 = Instant::now();
    eprintln!(
        "n = {n:>6} lines: parse {:>8.2} ms, check {:>8.2} ms, compile {:>8.2} ms, drop {:>7.2} ms, total {:>8.2} ms ({} combinator nodes)",
        ms(t1 - t0),
        ms(t2 - t1),
        ms(t3 - t2),
        ms(t4 - t3),
        ms(t4 - t0),
        size
    );
}

fn ms(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn bench(c: &mut Criterion) {
    for n in [1_000, 10_000, 100_000] {
        phases(n);
    }
    let mut g = c.benchmark_group("parse+check+compile");
    g.sample_size(10);
    for n in [1_000usize, 10_000, 100_000] {
        let text = straight_line_source(n, 7);
        g.bench_with_input(BenchmarkId::from_parameter(n), &text, |b, t| {
            b.iter(|| frontend(black_box(t)))
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
