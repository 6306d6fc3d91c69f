//! Parse + type-check + compile to combinators, on generated straight-line programs of
//! 10^3, 10^4 and 10^5 lines (`random::straight_line_source`). Linear growth is the goal.
//!
//! Run: `cargo bench --bench frontend`. For a per-phase breakdown (parse, check, compile, drop)
//! run `cargo run --release --example frontend_timing`.

use chad::internals::prim::Registry;
use chad::internals::random::straight_line_source;
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use std::hint::black_box;

fn frontend(text: &str) -> usize {
    let prog = chad::internals::source::load(text, &Registry::builtin())
        .expect("generated programs check");
    let entry = prog.entry(prog.defs.len() - 1);
    chad::internals::ccc::compile_entry(&entry).size()
}

fn bench(c: &mut Criterion) {
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
