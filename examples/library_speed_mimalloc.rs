//! `examples/library_speed.rs` with the allocator the `chad` binary uses (mimalloc), so that
//! the library and the CLI are compared with the same allocator.

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[path = "library_speed.rs"]
mod library_speed;

fn main() {
    library_speed::main()
}
