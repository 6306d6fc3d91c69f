//! Build-script API: compile a chad program into Rust source in a crate's `OUT_DIR`, to be
//! `include!`d, so the crate calls the program's definitions and their derivatives as plain
//! Rust functions (no chad at run time, no `unsafe`, `std` only).
//!
//! ```text
//! // build.rs (a build script needs its `fn main`, which clippy's needless_doctest_main flags)
//! fn main() {
//!     chad::build::compile("model.chad").unwrap_or_else(|e| panic!("{e}"));
//! }
//! ```
//!
//! ```ignore
//! // src/main.rs
//! mod model {
//!     include!(concat!(env!("OUT_DIR"), "/model.rs"));
//! }
//! let (value, grad) = model::loss_grad(&xs)?;
//! ```
//!
//! For each definition with first-order parameters and result, the module has `NAME`,
//! `NAME_jvp`, `NAME_vjp` and, for a `Real` result, `NAME_grad` (see [`crate::ir::rust`] for
//! the types). The example crate `examples/native-crate` does exactly this.

use crate::error::Source;
use crate::prim::Registry;
use std::path::{Path, PathBuf};

/// A failed build: the rendered message (with the source position), ready to print.
#[derive(Debug)]
pub struct BuildError(pub String);

impl std::fmt::Display for BuildError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BuildError {}

/// Compiles `path` (relative to the crate being built) into `$OUT_DIR/<stem>.rs` and tells
/// Cargo to rerun when the program changes. Returns the path written.
pub fn compile(path: impl AsRef<Path>) -> Result<PathBuf, BuildError> {
    let out_dir = std::env::var_os("OUT_DIR").ok_or_else(|| {
        BuildError("chad::build::compile: OUT_DIR is not set (call it from a build script)".into())
    })?;
    let path = path.as_ref();
    println!("cargo:rerun-if-changed={}", path.display());
    compile_to(path, Path::new(&out_dir), &Registry::builtin())
}

/// Compiles `path` into `<out_dir>/<stem>.rs` with the primitives of `registry` (user
/// primitives need a Rust implementation, [`crate::prim::Primitive::with_rust`]).
pub fn compile_to(path: &Path, out_dir: &Path, registry: &Registry) -> Result<PathBuf, BuildError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| BuildError(format!("cannot read `{}`: {e}", path.display())))?;
    let src = Source::new(path.display().to_string(), text);
    let rust = emit(&src, registry)?;
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "chad".into());
    let out = out_dir.join(format!("{stem}.rs"));
    std::fs::write(&out, rust)
        .map_err(|e| BuildError(format!("cannot write `{}`: {e}", out.display())))?;
    Ok(out)
}

/// The Rust module of every definition of `src` with first-order parameters and result.
pub fn emit(src: &Source, registry: &Registry) -> Result<String, BuildError> {
    let render = |e: crate::error::Error| BuildError(e.render(Some(src)));
    let prog = crate::source::load(&src.text, registry).map_err(render)?;
    let indices: Vec<usize> = (0..prog.defs.len())
        .filter(|&i| {
            let e = prog.entry(i);
            e.params.iter().all(|p| p.ty.is_first_order()) && e.body.ty.is_first_order()
        })
        .collect();
    crate::native::emit_rust(&prog, &indices, src).map_err(render)
}
