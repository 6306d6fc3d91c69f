//! Reverse mode two ways on the benchmark suite (`benches/programs/suite.json`): reverse CHAD
//! (`chad grad`) against the transpose of forward CHAD (`chad grad --via transpose`), both
//! optimised, simplified and run on the execution engine at the same arguments; the gradients
//! are compared and the run times (median of repeated runs, after compilation) printed.
//!
//! Run: `cargo run --release --example via_transpose [-- FAMILY...]` (default: every family,
//! smallest and middle size).

use chad::Value;
use chad::internals::ad::Vjp;
use chad::internals::bench::suite::Suite;
use chad::internals::linearize::vjp_via_transpose;
use chad::internals::optimize::optimize;
use chad::internals::simplify::simplify;
use std::time::Instant;

fn median_s(mut f: impl FnMut()) -> f64 {
    f();
    let start = Instant::now();
    f();
    let once = start.elapsed().as_secs_f64();
    let n = ((0.2 / once.max(1e-7)) as usize).clamp(3, 2000);
    let mut ts: Vec<f64> = (0..n)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .collect();
    ts.sort_by(f64::total_cmp);
    ts[n / 2]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let only: Vec<String> = std::env::args().skip(1).collect();
    let suite = Suite::load_default()?;
    println!(
        "{:<28} {:>12} {:>12} {:>7}  gradients",
        "case", "reverse (s)", "transp. (s)", "ratio"
    );
    for family in &suite.families {
        if !only.is_empty() && !only.contains(&family.name) {
            continue;
        }
        let cases: Vec<_> = family.cases().collect();
        let mut picks = vec![0, cases.len() / 2];
        picks.dedup();
        for case in picks.into_iter().map(|k| &cases[k]) {
            let entry = optimize(&case.entry()?);
            let args = case.args(&entry)?;
            let rev = match Vjp::new(&entry) {
                Ok(v) => v.map_body(simplify),
                Err(e) => {
                    println!("{:<28} reverse CHAD: {}", case.id(), e.message());
                    continue;
                }
            };
            let tr = match vjp_via_transpose(&entry) {
                Ok(v) => v,
                Err(e) => {
                    println!("{:<28} not transposed: {}", case.id(), e.message());
                    continue;
                }
            };
            let ct = match entry.body.ty {
                chad::internals::types::Type::Real => Value::Real(1.0),
                _ => {
                    println!("{:<28} (not Real-valued: skipped)", case.id());
                    continue;
                }
            };
            let (_, g1) = rev.vjp(&args, &ct)?;
            let (_, g2) = tr.vjp(&args, &ct)?;
            let (l1, l2): (Vec<f64>, Vec<f64>) = (
                g1.iter()
                    .flat_map(chad::internals::oracle::fd::leaves)
                    .collect(),
                g2.iter()
                    .flat_map(chad::internals::oracle::fd::leaves)
                    .collect(),
            );
            let agree = l1.len() == l2.len()
                && l1
                    .iter()
                    .zip(&l2)
                    .all(|(a, b)| (a - b).abs() <= 1e-9 * (1.0 + a.abs().max(b.abs())));
            let t1 = median_s(|| {
                rev.vjp(&args, &ct).expect("runs");
            });
            let t2 = median_s(|| {
                tr.vjp(&args, &ct).expect("runs");
            });
            println!(
                "{:<28} {:>12.3e} {:>12.3e} {:>7.2}  {}",
                case.id(),
                t1,
                t2,
                t2 / t1,
                if agree { "agree" } else { "DIFFER" }
            );
        }
    }
    Ok(())
}
