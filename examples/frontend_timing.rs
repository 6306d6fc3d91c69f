//! Times each front-end phase (parse, check, compile, drop) on generated straight-line programs.
//! `cargo run --release --example frontend_timing -- 1000 10000 100000`
use chad::internals::prim::Registry;
use chad::internals::random::straight_line_source;
use std::time::Instant;

fn main() {
    let sizes: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let sizes = if sizes.is_empty() {
        vec![1_000, 10_000, 100_000]
    } else {
        sizes
    };
    for n in sizes {
        let text = straight_line_source(n, 7);
        let reg = Registry::builtin();
        let t0 = Instant::now();
        let ast = chad::internals::source::parser::parse_program(&text).unwrap();
        let t1 = Instant::now();
        let prog = chad::internals::source::check::check_program(&ast, &reg).unwrap();
        let t2 = Instant::now();
        let comb = chad::internals::ccc::compile_entry(&prog.entry(0));
        let t3 = Instant::now();
        let nodes = comb.size();
        drop((ast, prog, comb));
        let t4 = Instant::now();
        let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
        println!(
            "n = {n:>7}: parse {:>8.2} ms  check {:>8.2} ms  compile {:>8.2} ms  drop {:>8.2} ms  total {:>8.2} ms  ({nodes} nodes)",
            ms(t1 - t0),
            ms(t2 - t1),
            ms(t3 - t2),
            ms(t4 - t3),
            ms(t4 - t0)
        );
    }
}
