//! Differentiate and simplify generated straight-line programs of 10^2, 10^3 and 10^4 lets
//! (`random::straight_line_ad_source`, every line using the one before and one of the last
//! four): compile, reverse (or forward) CHAD, then the simplifier to its fixed point. The goal
//! is near-linear growth and under 1 s at 10^4. For the sizes of the derivative code (raw,
//! simplified, per line) and a split of the time, run
//! `cargo run --release --example simplify_scaling`.
//!
//! The terms are dropped outside the timed region, as in the example: freeing the 1.65 M-node
//! raw reverse term of 10^4 lines costs about 0.3 s with the system allocator, about as much as
//! the AD itself, and is the caller's.
//!
//! Run: `cargo bench --bench simplify`.

use chad::internals::prim::Registry;
use chad::internals::random::straight_line_ad_source;
use chad::internals::simplify::simplify;
use chad::internals::target::term::Term;
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use std::hint::black_box;

/// The combinator, the raw derivative and the simplified one (returned, so that criterion drops
/// them outside the timed region).
fn differentiate_and_simplify(
    entry: &chad::internals::source::term::Entry,
    reverse: bool,
) -> (chad::internals::ccc::Comb, chad::internals::ad::Mor, Term) {
    let comb = chad::internals::ccc::compile_entry(entry);
    let mor = if reverse {
        chad::internals::ad::reverse::transform(&comb)
    } else {
        chad::internals::ad::forward::transform(&comb)
    }
    .expect("straight-line programs are differentiable");
    let simple = simplify(&mor.body);
    (comb, mor, simple)
}

fn bench(c: &mut Criterion) {
    for (name, reverse) in [("reverse+simplify", true), ("forward+simplify", false)] {
        let mut g = c.benchmark_group(name);
        g.sample_size(10);
        for n in [100usize, 1_000, 10_000] {
            let text = straight_line_ad_source(n, 7, false, false);
            let prog =
                chad::internals::source::load(&text, &Registry::builtin()).expect("programs check");
            let entry = prog.entry(prog.defs.len() - 1);
            g.bench_with_input(BenchmarkId::from_parameter(n), &entry, |b, e| {
                b.iter_with_large_drop(|| differentiate_and_simplify(black_box(e), reverse))
            });
        }
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
