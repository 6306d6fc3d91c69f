//! Helpers shared by the timing examples (`array_scaling`, `closure_scaling`, `fusion_scaling`).

use std::time::Instant;

/// The median wall time of `repeat` runs of `f`, after one warm-up run.
pub fn median(repeat: usize, mut f: impl FnMut()) -> f64 {
    f();
    let mut ts: Vec<f64> = (0..repeat.max(1))
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .collect();
    ts.sort_by(f64::total_cmp);
    ts[ts.len() / 2]
}

/// The value after `name` on the command line.
pub fn flag(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    let i = args.iter().position(|a| a == name)?;
    args.get(i + 1).cloned()
}
