//! Deeply nested programs never overflow the stack, in any pass, on any thread: the whole
//! pipeline runs on a 256 KiB thread stack over a 10 000-line let-chain and a 10 000-deep
//! expression.

use chad::Value;
use chad::internals::prim::Registry;
use chad::internals::random::straight_line_source;

fn pipeline(text: &str, args: &[Value]) -> String {
    let prog = chad::internals::source::load(text, &Registry::builtin()).unwrap();
    let entry = prog.entry(prog.defs.len() - 1);
    let direct = chad::internals::eval::eval_entry(&entry, args).unwrap();
    let comb = chad::internals::ccc::compile_entry(&entry);
    let via =
        chad::internals::ccc::eval::run(&comb, &chad::internals::ccc::eval::context_value(args))
            .unwrap();
    assert_eq!(direct.same(&via), Some(true));
    let printed =
        chad::internals::source::print::defs_to_string(&prog, &[prog.defs.len() - 1], 100);
    let ccc = chad::internals::ccc::print::to_string(&comb, 100);
    assert!(!printed.is_empty() && !ccc.is_empty());
    direct.to_string()
}

#[test]
fn whole_pipeline_on_a_small_thread_stack() {
    let h = std::thread::Builder::new()
        .stack_size(256 * 1024)
        .spawn(|| {
            let lets = straight_line_source(10_000, 3);
            let args = [Value::Real(0.5), Value::reals(vec![1.0, -2.0, 0.25])];
            let v = pipeline(&lets, &args);
            assert!(v.parse::<f64>().is_ok(), "{v}");

            let n = 10_000;
            let nested = format!(
                "def f (x : Real) : Real = {}x{}",
                "(x + ".repeat(n),
                ")".repeat(n)
            );
            assert_eq!(
                pipeline(&nested, &[Value::Real(1.0)]),
                format!("{}.0", n + 1)
            );
        })
        .unwrap();
    h.join().expect("no stack overflow or panic");
}
