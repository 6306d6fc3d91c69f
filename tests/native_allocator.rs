//! Native code allocates with the host process's global allocator (`chad_use_allocator`,
//! `crate::native`'s `HOST_ALLOCATOR`): this test binary installs an allocator that records
//! the sizes it is asked for, loads a program that builds a large array natively, and finds
//! that array's buffer among them.

use chad::Value;
use chad::internals::ir::compile::Compiled;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

/// The system allocator, counting the requests of one watched size.
struct Watching;

static WATCHED: AtomicUsize = AtomicUsize::new(0);
static SEEN: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards every call to `System` unchanged; the bookkeeping allocates nothing.
unsafe impl GlobalAlloc for Watching {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        if l.size() == WATCHED.load(Relaxed) {
            SEEN.fetch_add(1, Relaxed);
        }
        // SAFETY: the caller's guarantees, forwarded.
        unsafe { System.alloc(l) }
    }

    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(p, l) }
    }
}

#[global_allocator]
static GLOBAL: Watching = Watching;

#[test]
fn native_code_allocates_with_the_hosts_allocator() {
    // A local array of n reals, read twice (so built, not fused into its readers), that no
    // buffer of the host's (arguments, result) has the size of: n·8 bytes.
    const N: usize = 123_457;
    let text = "def spread (n : Int) : Real =
                  let xs = build n (\\i -> sin (toReal i)) in maximum xs - minimum xs";
    let prog = chad::internals::source::load(text, &chad::internals::prim::Registry::builtin())
        .unwrap_or_else(|e| panic!("{}", e.render(None)));
    let entry = prog.entry(0);
    let native = chad::internals::native::Native::new(Compiled::new(&entry).unwrap(), None, false)
        .unwrap_or_else(|e| panic!("{}", e.render(None)));
    assert!(
        native.host_allocator,
        "the library had allocated before it was given the host's allocator"
    );
    WATCHED.store(N * 8, Relaxed);
    let before = SEEN.load(Relaxed);
    let v = native.eval(&[Value::Int(N as i64)]).unwrap();
    let seen = SEEN.load(Relaxed) - before;
    WATCHED.store(0, Relaxed);
    let (lo, hi) = (0..N)
        .map(|i| (i as f64).sin())
        .fold((f64::MAX, f64::MIN), |(a, b), x| (a.min(x), b.max(x)));
    assert_eq!(v.expect_real(), hi - lo);
    assert!(
        seen >= 1,
        "no allocation of {} bytes reached the host's allocator",
        N * 8
    );
}
