//! Native code allocates with the allocator the host hands it as the library is loaded
//! (`chad_use_allocator`; `chad::internals::native` hands over mimalloc): a program that builds
//! a large array natively allocates it there, as the host's statistic of large blocks shows.

use chad::Value;
use chad::internals::ir::compile::Compiled;
use chad::internals::native::{Native, large_native_blocks};

#[test]
fn native_code_allocates_with_the_allocator_it_is_handed() {
    // A local array of 2·10^5 reals (1.6 MB), read twice, so built rather than fused into
    // its readers.
    const N: usize = 200_000;
    let text = "def spread (n : Int) : Real =
                  let xs = build n (\\i -> sin (toReal i)) in maximum xs - minimum xs";
    let prog = chad::internals::source::load(text, &chad::internals::prim::Registry::builtin())
        .unwrap_or_else(|e| panic!("{}", e.render(None)));
    let entry = prog.entry(0);
    let native = Native::new(Compiled::new(&entry).unwrap(), None, false)
        .unwrap_or_else(|e| panic!("{}", e.render(None)));
    assert!(
        native.host_allocator,
        "the library had allocated before it was handed the host's allocator"
    );
    let before = large_native_blocks();
    let v = native.eval(&[Value::Int(N as i64)]).unwrap();
    let blocks = large_native_blocks() - before;
    let (lo, hi) = (0..N)
        .map(|i| (i as f64).sin())
        .fold((f64::MAX, f64::MIN), |(a, b), x| (a.min(x), b.max(x)));
    assert_eq!(v.expect_real(), hi - lo);
    assert!(
        blocks >= 1,
        "the native build's {} bytes did not come from the allocator handed over",
        N * 8
    );
}
