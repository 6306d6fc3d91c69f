//! The benchmark suite (`benches/programs/suite.json`, read by `chad::internals::bench::suite`): primal,
//! forward and reverse time of every program family at every size, through `chad::internals::bench::Bench`
//! (the same code `chad bench` and `benches/perf_table.py` time).
//!
//! Benchmark ids are `FAMILY/PHASE/SIZE`, e.g. `rosenbrock/reverse/n=1000`, so
//! `cargo bench --bench suite -- rosenbrock` runs one family and `-- /reverse/` one phase. A
//! case is prepared (transformed, simplified, compiled) only if one of its ids is selected.
//! `CHAD_SUITE_SMALLEST=1` keeps only each family's smallest size. Criterion takes at least 11
//! runs per id, so while a case's reverse pass takes seconds (the largest GMM and MLP sizes on
//! the reference evaluator) the whole suite takes far longer than its 2 s budget per id;
//! `benches/perf_table.py --quick` is the quick overview.
//!
//! Run: `cargo bench --bench suite [-- FILTER]`.

use chad::internals::bench::Bench;
use chad::internals::bench::suite::Suite;
use criterion::{BenchmarkId, Criterion, SamplingMode, criterion_group, criterion_main};
use std::cell::OnceCell;
use std::hint::black_box;
use std::time::Duration;

fn bench(c: &mut Criterion) {
    let suite = Suite::load_default().unwrap_or_else(|e| panic!("{}", e.render(None)));
    let smallest = std::env::var_os("CHAD_SUITE_SMALLEST").is_some();
    for family in &suite.families {
        let mut g = c.benchmark_group(&family.name);
        // Flat sampling: the same iteration count per sample, the fewest runs for slow cases.
        g.sample_size(10)
            .sampling_mode(SamplingMode::Flat)
            .warm_up_time(Duration::from_millis(500))
            .measurement_time(Duration::from_secs(2));
        let cases: Vec<_> = if smallest {
            vec![family.smallest()]
        } else {
            family.cases().collect()
        };
        for case in cases {
            let prepared: OnceCell<Bench> = OnceCell::new();
            let get = || {
                prepared.get_or_init(|| {
                    case.bench()
                        .unwrap_or_else(|e| panic!("{}", e.render(None)))
                })
            };
            let label = case.label();
            g.bench_function(BenchmarkId::new("primal", &label), |b| {
                let bench = get();
                b.iter(|| black_box(bench.primal().expect("runs")))
            });
            g.bench_function(BenchmarkId::new("forward", &label), |b| {
                let bench = get();
                b.iter(|| black_box(bench.forward().expect("runs")))
            });
            g.bench_function(BenchmarkId::new("reverse", &label), |b| {
                let bench = get();
                b.iter(|| black_box(bench.reverse().expect("runs")))
            });
        }
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
