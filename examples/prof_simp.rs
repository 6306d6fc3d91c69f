use chad::prim::Registry;
use std::time::Instant;
fn main() {
    let n: usize = std::env::args().nth(1).unwrap().parse().unwrap();
    let text = chad::random::straight_line_ad_source(n, 7, false, false);
    let prog = chad::source::load(&text, &Registry::builtin()).unwrap();
    let entry = prog.entry(prog.defs.len() - 1);
    let comb = chad::ccc::compile_entry(&entry);
    let mor = chad::ad::reverse::transform(&comb).unwrap();
    let t0 = Instant::now();
    let u = chad::simplify::unique::uniquify(&mor.body);
    let t1 = Instant::now();
    let o = chad::simplify::occur::Occurrences::of(&u);
    let t2 = Instant::now();
    drop(o);
    let t3 = Instant::now();
    for k in 1..=3 {
        let s = Instant::now();
        let (r, st) = chad::simplify::simplify_passes(&mor.body, &chad::simplify::Rules::all(), k);
        println!(
            "{k} passes: {:.0} ms size {} fired {}",
            s.elapsed().as_secs_f64() * 1e3,
            r.size(),
            st.fired.values().sum::<usize>()
        );
    }
    println!(
        "uniquify {:.0} ms, occur {:.0} ms, drop occ {:.0} ms",
        (t1 - t0).as_secs_f64() * 1e3,
        (t2 - t1).as_secs_f64() * 1e3,
        (t3 - t2).as_secs_f64() * 1e3
    );
}
