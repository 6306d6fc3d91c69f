//! The native code cache under concurrency: several threads of one process building the
//! library of the same, not yet cached program at once each get a working library (each
//! build has its own work folder; the first to finish stores the library, the others
//! replace it with an identical one).

use chad::Value;
use chad::internals::ir::compile::Compiled;
use chad::internals::native::Native;

#[test]
fn threads_building_the_same_program_at_once_all_succeed() {
    // A constant no earlier run has compiled, so that the library is not in the cache.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let c = 1.0 + (nanos % 1_000_000_007) as f64 / 1e12 + std::process::id() as f64 / 1e15;
    let text = format!("def f (x : Real) : Real = x * {c:?} + sin x");
    let results: Vec<Result<f64, String>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|_| {
                s.spawn(|| {
                    // Each thread loads the program itself (terms are not shared between
                    // threads); the generated source, and so the library's name, is the same.
                    let prog = chad::internals::source::load(
                        &text,
                        &chad::internals::prim::Registry::builtin(),
                    )
                    .map_err(|e| e.render(None))?;
                    let entry = prog.entry(0);
                    let native = Native::new(Compiled::new(&entry).unwrap(), None, false)
                        .map_err(|e| e.render(None))?;
                    native
                        .eval(&[Value::Real(2.0)])
                        .map(|v| v.expect_real())
                        .map_err(|e| e.render(None))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for r in results {
        let v = r.unwrap_or_else(|e| panic!("a concurrent build failed: {e}"));
        assert_eq!(v, 2.0 * c + 2.0f64.sin());
    }
}
