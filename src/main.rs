//! The `chad` binary: [`chad::internals::cli::main`] under the memory budget's counting allocator.

/// mimalloc rather than the system allocator: derivative code allocates many small, short-lived
/// values, and glibc's malloc handed large freed arrays back to the OS only to page-fault them in
/// again on the next run (theory-notes/06-performance.md).
/// Wrapped in the memory budget's counter, so `--max-memory` bounds the heap held
/// (`chad::internals::budget`).
#[global_allocator]
static GLOBAL: chad::internals::budget::Counting<chad::internals::budget::Mimalloc> =
    chad::internals::budget::Counting(chad::internals::budget::Mimalloc);

fn main() -> std::process::ExitCode {
    chad::internals::cli::main()
}
