//! The native backend: a definition's IR compiled to Rust ([`crate::ir::rust`]), built by
//! `rustc` into a shared library, loaded in process and run (`--backend native`).
//!
//! Building is cached by content: the library's file name is a hash of the generated source,
//! the compiler's version and the flags, in the cache folder ([`cache_dir`]: `$CHAD_CACHE`, or
//! `$XDG_CACHE_HOME/chad`, or `~/.cache/chad`), so a second run of the same program loads the
//! library without compiling. Arguments and results cross the boundary in the binary format
//! of [`crate::ir::rust::ffi`]; runs are timed inside the library, so the times measure the
//! computation, not the conversions.

use crate::budget::Mimalloc;
use crate::ccc::eval::context_value;
use crate::error::{Error, ErrorKind, Result, Source};
use crate::ir::compile::{Compiled, DefCode, Module};
use crate::ir::interp::Val;
use crate::ir::{FuncId, Program, Ty, TyKind};
use crate::value::Value;
use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_void;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Instant;

#[path = "native/wire.rs"]
mod wire;

/// Compiled definitions loaded as native code.
pub struct Native {
    /// The IR program (types for conversions, error sites).
    pub program: Program,
    /// The definitions' functions.
    pub defs: Vec<DefCode>,
    lib: libloading::Library,
    /// The library's path.
    pub path: PathBuf,
    /// Seconds spent generating Rust and running `rustc` (0 if the library was cached).
    pub rustc_s: f64,
    /// Whether the library came from the cache.
    pub cached: bool,
    /// Whether the library allocates with the allocator the host hands it (`HOST_ALLOCATOR`:
    /// mimalloc); it does unless it had allocated before it was offered it.
    pub host_allocator: bool,
}

/// The folder compiled libraries are cached in.
pub fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("CHAD_CACHE") {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(d).join("chad");
    }
    if let Some(h) = std::env::var_os("HOME") {
        return PathBuf::from(h).join(".cache").join("chad");
    }
    std::env::temp_dir().join("chad-cache")
}

/// The Rust compiler (`$RUSTC`, or `rustc` on the path).
fn rustc() -> String {
    std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into())
}

/// `rustc -vV`, once per process.
fn rustc_version() -> Result<&'static str> {
    static V: OnceLock<std::result::Result<String, String>> = OnceLock::new();
    V.get_or_init(|| {
        let out = std::process::Command::new(rustc())
            .arg("-vV")
            .output()
            .map_err(|e| format!("cannot run `{}`: {e}", rustc()))?;
        if !out.status.success() {
            return Err(format!("`{} -vV` failed", rustc()));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    })
    .as_deref()
    .map_err(|e| {
        Error::new(
            ErrorKind::Unsupported,
            format!("the native backend needs a Rust compiler: {e}"),
        )
    })
}

/// The flags libraries are built with.
const FLAGS: &[&str] = &[
    "--edition",
    "2021",
    "--crate-type",
    "cdylib",
    "-C",
    "opt-level=3",
    "-C",
    "target-cpu=native",
    "-C",
    "panic=unwind",
    "-C",
    "debuginfo=0",
    "--cap-lints",
    "warn",
];

/// FNV-1a, 64 bits: a stable content hash for cache names.
fn fnv(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for b in p.iter().chain(&(p.len() as u64).to_le_bytes()) {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

/// Builds (or finds in the cache) the shared library of a Rust crate root `source`; its
/// path and whether it was cached.
pub fn build(source: &str, verbose: bool) -> Result<(PathBuf, bool)> {
    let version = rustc_version()?;
    let key = fnv(&[
        source.as_bytes(),
        version.as_bytes(),
        FLAGS.join(" ").as_bytes(),
    ]);
    let dir = cache_dir();
    let name = format!(
        "{}chad_{key:016x}{}",
        std::env::consts::DLL_PREFIX,
        std::env::consts::DLL_SUFFIX
    );
    let lib = dir.join(&name);
    if verbose {
        eprintln!("native code cache: {}", dir.display());
    }
    if lib.exists() {
        return Ok((lib, true));
    }
    let io = |what: &str, e: std::io::Error| {
        Error::new(
            ErrorKind::Input,
            format!("native backend: cannot {what} in {}: {e}", dir.display()),
        )
    };
    std::fs::create_dir_all(&dir).map_err(|e| io("create the cache folder", e))?;
    // A private work folder, renamed into place at the end: concurrent builds of the same
    // program do not see each other's half-written files, whether they run in other
    // processes or on other threads of this one (the counter: a thread that finished first
    // would otherwise remove the folder another thread's rustc is writing into).
    static BUILDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let build = BUILDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let work = dir.join(format!("build-{key:016x}-{}-{build}", std::process::id()));
    std::fs::create_dir_all(&work).map_err(|e| io("create a build folder", e))?;
    let src = work.join("lib.rs");
    std::fs::write(&src, source).map_err(|e| io("write the generated source", e))?;
    let out = work.join(&name);
    let result = std::process::Command::new(rustc())
        .args(FLAGS)
        .arg("--crate-name")
        .arg("chad_native")
        .arg("-o")
        .arg(&out)
        .arg(&src)
        .output()
        .map_err(|e| {
            Error::new(
                ErrorKind::Unsupported,
                format!("the native backend cannot run `{}`: {e}", rustc()),
            )
        })?;
    if !result.status.success() {
        let stderr = String::from_utf8_lossy(&result.stderr);
        return Err(Error::new(
            ErrorKind::Unsupported,
            format!(
                "internal error: rustc rejected the generated code (kept in {}):\n{}",
                src.display(),
                stderr.chars().take(4000).collect::<String>()
            ),
        ));
    }
    std::fs::rename(&out, &lib).map_err(|e| io("store the library", e))?;
    let _ = std::fs::remove_dir_all(&work);
    Ok((lib, false))
}

type PrepareFn = unsafe extern "C" fn(u32, *const u8, usize) -> *mut c_void;
type RunFn = unsafe extern "C" fn(*mut c_void, u64, *mut f64, *mut Buf) -> i32;
type FreePreparedFn = unsafe extern "C" fn(*mut c_void);
type FreeBufFn = unsafe extern "C" fn(Buf);

type UseAllocatorFn = unsafe extern "C" fn(*const HostAllocator) -> u32;

/// The allocator handed to each native library as it is loaded (`chad_use_allocator` of
/// [`crate::ir::rust::ffi`]): mimalloc ([`Mimalloc`]), the `chad` binary's, whatever the host
/// process's global allocator is. A library (std only, built by plain `rustc`) would otherwise
/// allocate with glibc's malloc, which in the `chad` binary nothing else uses: its trim threshold
/// never adapted, so a free that left more than 128 KiB at the top of the heap gave the memory back
/// to the system and the next run page-faulted it in again (diag_trace's forward mode at n = 1000:
/// 7.7 ms instead of 2.2), and a library user's process can be in the same state. Blocks never
/// cross the boundary (arguments are copied in, results out), so native code may use another
/// allocator than its host. Its memory is not counted by the memory budget (counting every call
/// through [`crate::budget::Counting`] cost GMM's derivatives 3-5%).
#[repr(C)]
struct HostAllocator {
    alloc: unsafe extern "C" fn(usize, usize) -> *mut u8,
    alloc_zeroed: unsafe extern "C" fn(usize, usize) -> *mut u8,
    dealloc: unsafe extern "C" fn(*mut u8, usize, usize),
    realloc: unsafe extern "C" fn(*mut u8, usize, usize, usize) -> *mut u8,
}

static HOST_ALLOCATOR: HostAllocator = HostAllocator {
    alloc: native_alloc,
    alloc_zeroed: native_alloc_zeroed,
    dealloc: native_dealloc,
    realloc: native_realloc,
};

/// Blocks of at least [`LARGE_BLOCK`] bytes native libraries allocated through
/// [`HOST_ALLOCATOR`] (a statistic for tests; counting only large blocks costs nothing
/// measurable).
static LARGE_BLOCKS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
const LARGE_BLOCK: usize = 1 << 20;

/// How many blocks of at least 1 MiB native libraries have allocated, in this process, with
/// the allocator they are handed (`Native::host_allocator`).
pub fn large_native_blocks() -> u64 {
    LARGE_BLOCKS.load(std::sync::atomic::Ordering::Relaxed)
}

#[inline]
fn note_block(size: usize) {
    if size >= LARGE_BLOCK {
        LARGE_BLOCKS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

// The library calls these with the layouts its own global allocator was given (non-zero
// sizes, valid alignments), so each is `GlobalAlloc`'s method with the same contract.
unsafe extern "C" fn native_alloc(size: usize, align: usize) -> *mut u8 {
    note_block(size);
    // SAFETY: a layout the library's allocator received, so valid and of non-zero size.
    unsafe { GlobalAlloc::alloc(&Mimalloc, Layout::from_size_align_unchecked(size, align)) }
}

unsafe extern "C" fn native_alloc_zeroed(size: usize, align: usize) -> *mut u8 {
    note_block(size);
    // SAFETY: as in `native_alloc`.
    unsafe { GlobalAlloc::alloc_zeroed(&Mimalloc, Layout::from_size_align_unchecked(size, align)) }
}

unsafe extern "C" fn native_dealloc(p: *mut u8, size: usize, align: usize) {
    // SAFETY: `p` was allocated by `native_alloc*`/`native_realloc` with this layout.
    unsafe { GlobalAlloc::dealloc(&Mimalloc, p, Layout::from_size_align_unchecked(size, align)) }
}

unsafe extern "C" fn native_realloc(p: *mut u8, size: usize, align: usize, new: usize) -> *mut u8 {
    note_block(new);
    // SAFETY: as in `native_dealloc`; `new` is non-zero and valid for `align`.
    unsafe {
        GlobalAlloc::realloc(
            &Mimalloc,
            p,
            Layout::from_size_align_unchecked(size, align),
            new,
        )
    }
}

#[repr(C)]
struct Buf {
    ptr: *mut u8,
    len: usize,
    cap: usize,
}

impl Native {
    /// Generates, builds (or finds cached) and loads the native code of a compiled
    /// definition. `source` gives error positions in the generated code's messages.
    pub fn new(code: Compiled, source: Option<&Source>, verbose: bool) -> Result<Native> {
        let module = Module {
            program: code.program,
            defs: vec![code.def],
        };
        Native::module(module, source, verbose)
    }

    /// The code `parts` asks for of one entry ([`Compiled::with_parts`]: optimised,
    /// differentiated, simplified, lowered), built and loaded: what `--backend native` runs
    /// for `eval`, `jvp`, `vjp`, `grad` ([`crate::Function`]) and, through
    /// [`NativeBackend`], for `hvp`, `hessian` and `jacobian`. With `verbose`, reports the
    /// library (cached, or built in how long) on standard error.
    pub fn compile(
        entry: &crate::source::term::Entry,
        parts: crate::ir::compile::Parts,
        source: Option<&Source>,
        verbose: bool,
    ) -> Result<Native> {
        let code = Compiled::with_parts(entry, parts)?;
        let n = Native::new(code, source, verbose)?;
        if verbose {
            if n.cached {
                eprintln!("native library (cached): {}", n.path.display());
            } else {
                eprintln!(
                    "native library built in {:.2} s: {}",
                    n.rustc_s,
                    n.path.display()
                );
            }
        }
        Ok(n)
    }

    /// [`Native::new`] for several definitions in one library.
    pub fn module(m: Module, source: Option<&Source>, verbose: bool) -> Result<Native> {
        Native::module_with(m, &[], source, verbose)
    }

    /// [`Native::module`], with more functions of the program callable ([`Native::call`]).
    pub fn module_with(
        m: Module,
        extra: &[FuncId],
        source: Option<&Source>,
        verbose: bool,
    ) -> Result<Native> {
        let start = Instant::now();
        let mut funcs = Vec::new();
        for d in &m.defs {
            funcs.push(d.primal);
            funcs.extend(d.jvp);
            funcs.extend(d.vjp);
        }
        funcs.extend_from_slice(extra);
        let src = crate::ir::rust::SourceInfo { source };
        // The crate root. Closures of parallel loops are checked `Send`/`Sync` through every
        // type they capture, and the closure enums of a derivative nest types deeply: rustc's
        // default limit (128) rejected random programs of the native test.
        let mut text = String::from("#![recursion_limit = \"2048\"]\n");
        text.push_str(&crate::ir::rust::module(&m.program, &[], &src)?);
        text.push_str(&crate::ir::rust::ffi(&m.program, &funcs)?);
        let (path, cached) = build(&text, verbose)?;
        // SAFETY: the library is one this module generated and built; loading runs no code
        // but the Rust runtime's initialisers of a cdylib.
        let lib = unsafe { libloading::Library::new(&path) }.map_err(|e| {
            Error::new(
                ErrorKind::Unsupported,
                format!("cannot load the native library {}: {e}", path.display()),
            )
        })?;
        // Before anything else runs in the library: it allocates with `HOST_ALLOCATOR`.
        let use_allocator: libloading::Symbol<'_, UseAllocatorFn> =
            // SAFETY: the generated interface's function, with this signature.
            unsafe { lib.get(b"chad_use_allocator") }.map_err(|e| {
                Error::new(ErrorKind::Unsupported, format!("native library: {e}"))
            })?;
        // SAFETY: `HOST_ALLOCATOR` is a static table of functions implementing an allocator
        // (mimalloc's); it outlives the library.
        let host_allocator = unsafe { use_allocator(&HOST_ALLOCATOR) } == 1;
        Ok(Native {
            host_allocator,
            program: m.program,
            defs: m.defs,
            lib,
            path,
            rustc_s: if cached {
                0.0
            } else {
                start.elapsed().as_secs_f64()
            },
            cached,
        })
    }

    fn symbol<T: Copy>(&self, name: &str) -> Result<T> {
        // SAFETY: the symbols are the generated interface's, with these signatures.
        unsafe { self.lib.get::<T>(name.as_bytes()) }
            .map(|s| *s)
            .map_err(|e| Error::new(ErrorKind::Unsupported, format!("native library: {e}")))
    }

    /// Function `f` with its arguments (IR values), ready to run.
    pub fn prepare(&self, f: FuncId, args: &[Val]) -> Result<Prepared<'_>> {
        let func = self.program.func(f);
        let mut bytes = Vec::new();
        for (x, a) in func.params.iter().zip(args) {
            crate::ir::interp::check_lengths(&self.program.types, x.ty, a)?;
            encode(&self.program, x.ty, a, &mut bytes);
        }
        self.prepare_bytes(f, &bytes)
    }

    /// Function `f` with its arguments in the binary form ([`encode`], [`wire`]), ready to
    /// run.
    fn prepare_bytes(&self, f: FuncId, bytes: &[u8]) -> Result<Prepared<'_>> {
        let func = self.program.func(f);
        let prepare: PrepareFn = self.symbol("chad_prepare")?;
        // SAFETY: `bytes` is a valid buffer for the call's duration.
        let h = unsafe { prepare(f.0, bytes.as_ptr(), bytes.len()) };
        if h.is_null() {
            return Err(Error::new(
                ErrorKind::Unsupported,
                "internal error: the native library rejected the arguments",
            ));
        }
        Ok(Prepared {
            native: self,
            handle: h,
            ret: func.ret,
        })
    }

    /// Sets the threads the library's parallel loops use (0: `$CHAD_THREADS`, or all the
    /// machine has) and the estimated work from which a loop runs in parallel (`u64::MAX`:
    /// `$CHAD_PAR_WORK`, or 4·10^6 simple operations; 0: every `build` and `sum` whose body
    /// allows it). Results do not depend on either (note 07).
    pub fn set_parallelism(&self, threads: usize, min_work: u64) -> Result<()> {
        let f: unsafe extern "C" fn(u64, u64) = self.symbol("chad_set_parallelism")?;
        // SAFETY: the generated interface's function, taking two integers.
        unsafe { f(threads as u64, min_work) };
        Ok(())
    }

    /// Runs function `f` once.
    pub fn call(&self, f: FuncId, args: &[Val]) -> Result<Val> {
        Ok(self.prepare(f, args)?.run(1)?.0)
    }

    /// The primal of the first definition at `args`.
    pub fn eval(&self, args: &[Value]) -> Result<Value> {
        self.eval_def(0, args)
    }

    /// The primal of definition `k` at `args`.
    pub fn eval_def(&self, k: usize, args: &[Value]) -> Result<Value> {
        let d = &self.defs[k];
        crate::eval::check_args(&d.entry, args)?;
        let p = &self.program;
        let func = p.func(d.primal);
        let mut bytes = Vec::new();
        for ((x, ty), a) in func.params.iter().zip(d.param_types()).zip(args) {
            wire::put_value(p, x.ty, &ty, a, &mut bytes)?;
        }
        let mut run = self.prepare_bytes(d.primal, &bytes)?;
        run.run_with(1, |mut r| {
            wire::get_value(p, func.ret, &d.entry.body.ty, &mut r)
        })?
        .0
        .ok_or_else(bad_result)
    }

    /// Forward mode (first definition): the value and the result's tangent along `tangents`.
    pub fn jvp(&self, args: &[Value], tangents: &[Value]) -> Result<(Value, Value)> {
        self.jvp_def(0, args, tangents)
    }

    /// Forward mode for definition `k`.
    pub fn jvp_def(&self, k: usize, args: &[Value], tangents: &[Value]) -> Result<(Value, Value)> {
        let d = &self.defs[k];
        let f = d.jvp.ok_or_else(|| missing("forward mode"))?;
        crate::eval::check_args(&d.entry, args)?;
        d.check_tangents(args, tangents)?;
        let p = &self.program;
        let func = p.func(f);
        let ctx = d.context_type();
        let mut bytes = Vec::new();
        wire::put_value(p, func.params[0].ty, &ctx, &context_value(args), &mut bytes)?;
        wire::put_tangent(
            p,
            func.params[1].ty,
            &ctx,
            &context_value(tangents),
            &mut bytes,
        )?;
        let (yt, dyt) = result_pair(p, func.ret);
        let ty = &d.entry.body.ty;
        let mut run = self.prepare_bytes(f, &bytes)?;
        let read = |mut r: &[u8]| {
            let y = wire::get_value(p, yt, ty, &mut r)?;
            let dy = wire::get_tangent(p, dyt, ty, &y, &mut r)?;
            Some((y, dy))
        };
        run.run_with(1, read)?.0.ok_or_else(bad_result)
    }

    /// Reverse mode (first definition): the value and every argument's cotangent.
    pub fn vjp(&self, args: &[Value], cotangent: &Value) -> Result<(Value, Vec<Value>)> {
        self.vjp_def(0, args, cotangent)
    }

    /// Reverse mode for definition `k`.
    pub fn vjp_def(
        &self,
        k: usize,
        args: &[Value],
        cotangent: &Value,
    ) -> Result<(Value, Vec<Value>)> {
        let d = &self.defs[k];
        let f = d.vjp.ok_or_else(|| missing("reverse mode"))?;
        crate::eval::check_args(&d.entry, args)?;
        d.check_cotangent(cotangent)?;
        let p = &self.program;
        let func = p.func(f);
        let (ctx, ty) = (d.context_type(), &d.entry.body.ty);
        let x = context_value(args);
        let mut bytes = Vec::new();
        wire::put_value(p, func.params[0].ty, &ctx, &x, &mut bytes)?;
        wire::put_tangent(p, func.params[1].ty, ty, cotangent, &mut bytes)?;
        let (yt, dxt) = result_pair(p, func.ret);
        let mut run = self.prepare_bytes(f, &bytes)?;
        let read = |mut r: &[u8]| {
            let y = wire::get_value(p, yt, ty, &mut r)?;
            // The context's cotangent `((((), d1), d2) .., dn)`, one per argument.
            let dx = wire::get_tangent(p, dxt, &ctx, &x, &mut r)?;
            Some((y, dx))
        };
        let (y, mut dx) = run.run_with(1, read)?.0.ok_or_else(bad_result)?;
        let mut out = vec![Value::Unit; args.len()];
        for k in (0..args.len()).rev() {
            let (rest, dk) = dx.expect_pair();
            out[k] = dk.clone();
            dx = rest.clone();
        }
        Ok((y, out))
    }

    /// The gradient of a `Real`-valued (first) definition.
    pub fn grad(&self, args: &[Value]) -> Result<(Value, Vec<Value>)> {
        self.vjp(args, &Value::Real(1.0))
    }
}

/// Derivatives of derivatives on native code ([`crate::ad::nested::Backend`]): the forward
/// or reverse derivative of each entry [`crate::ad::nested`] builds (for a Hessian-vector
/// product, the concretised gradient) compiled by [`Native::compile`], as `jvp` and `vjp` are.
#[derive(Clone, Copy, Default)]
pub struct NativeBackend<'a> {
    /// The program's source, for error positions.
    pub source: Option<&'a Source>,
    /// Report each library on standard error.
    pub verbose: bool,
}

impl crate::ad::nested::Backend for NativeBackend<'_> {
    /// Hessian-vector products by dual numbers on the compiled gradient
    /// ([`crate::ir::compile::HvpCode`]); `None` (the concretising route) where that
    /// transformation does not apply.
    fn hvp(
        &self,
        entry: &crate::source::term::Entry,
    ) -> Result<Option<Box<dyn crate::ad::nested::Forward>>> {
        let code = match crate::ir::compile::HvpCode::new(entry) {
            Ok(c) => c,
            Err(e) if e.kind() == ErrorKind::Unsupported => {
                if self.verbose {
                    eprintln!(
                        "hvp by forward CHAD of the concretised gradient: {}",
                        e.message()
                    );
                }
                return Ok(None);
            }
            Err(e) => return Err(e),
        };
        let crate::ir::compile::HvpCode { program, def, hvp } = code;
        let module = Module {
            program,
            defs: vec![def.clone()],
        };
        let native = Native::module_with(module, &[hvp], self.source, self.verbose)?;
        if self.verbose {
            let how = if native.cached {
                "(cached)".to_string()
            } else {
                format!("built in {:.2} s", native.rustc_s)
            };
            eprintln!(
                "native library {how}: {} (Hessian-vector products by dual numbers on the \
                 compiled gradient)",
                native.path.display()
            );
        }
        Ok(Some(Box::new(NativeHvp { native, hvp })))
    }

    fn forward(
        &self,
        entry: &crate::source::term::Entry,
    ) -> Result<Box<dyn crate::ad::nested::Forward>> {
        let parts = crate::ir::compile::Parts::JVP;
        Ok(Box::new(Native::compile(
            entry,
            parts,
            self.source,
            self.verbose,
        )?))
    }

    fn reverse(
        &self,
        entry: &crate::source::term::Entry,
    ) -> Result<Box<dyn crate::ad::nested::Reverse>> {
        let parts = crate::ir::compile::Parts::VJP;
        Ok(Box::new(Native::compile(
            entry,
            parts,
            self.source,
            self.verbose,
        )?))
    }
}

/// A Hessian-vector product compiled natively ([`NativeBackend`]'s `hvp`).
pub struct NativeHvp {
    native: Native,
    hvp: FuncId,
}

impl crate::ad::nested::Forward for NativeHvp {
    fn jvp(&self, args: &[Value], tangents: &[Value]) -> Result<(Value, Value)> {
        let def = &self.native.defs[0];
        let xs = def.hvp_args(args, tangents)?;
        let r = self.native.call(self.hvp, &xs)?;
        Ok(def.hvp_result(args, &r))
    }
}

impl crate::ad::nested::Forward for Native {
    fn jvp(&self, args: &[Value], tangents: &[Value]) -> Result<(Value, Value)> {
        Native::jvp(self, args, tangents)
    }
}

impl crate::ad::nested::Reverse for Native {
    fn vjp(&self, args: &[Value], cotangent: &Value) -> Result<(Value, Vec<Value>)> {
        Native::vjp(self, args, cotangent)
    }
}

/// The IR types of a derivative's result pair.
fn result_pair(p: &Program, t: Ty) -> (Ty, Ty) {
    match p.types.kind(t) {
        TyKind::Tuple(cs) if cs.len() == 2 => (cs[0], cs[1]),
        k => panic!("internal error: a derivative's result of type {k:?}"),
    }
}

fn bad_result() -> Error {
    Error::new(ErrorKind::Unsupported, "internal error: bad native result")
}

fn missing(what: &str) -> Error {
    Error::new(
        ErrorKind::Unsupported,
        format!("{what} was not compiled for this definition"),
    )
}

/// A native function with decoded arguments.
pub struct Prepared<'a> {
    native: &'a Native,
    handle: *mut c_void,
    ret: Ty,
}

impl Prepared<'_> {
    /// Runs it `reps` times (at least once); the last result and each run's seconds.
    pub fn run(&mut self, reps: usize) -> Result<(Val, Vec<f64>)> {
        let (program, ret) = (&self.native.program, self.ret);
        let (v, times) = self.run_with(reps, |mut b| decode(program, ret, &mut b))?;
        Ok((v.ok_or_else(bad_result)?, times))
    }

    /// [`Prepared::run`] with the result in the binary form, read by `read` in place.
    fn run_with<T>(&mut self, reps: usize, read: impl FnOnce(&[u8]) -> T) -> Result<(T, Vec<f64>)> {
        let reps = reps.max(1);
        // The host's `--max-steps` budget, what is left of it.
        let steps: unsafe extern "C" fn(u64) = self.native.symbol("chad_set_max_steps")?;
        // SAFETY: the generated interface's function, taking one integer.
        unsafe { steps(crate::steps::remaining().unwrap_or(u64::MAX)) };
        // The host's recursion depth limit.
        let depth: unsafe extern "C" fn(u64) = self.native.symbol("chad_set_max_depth")?;
        // SAFETY: the generated interface's function, taking one integer.
        unsafe { depth(crate::steps::max_depth()) };
        let run: RunFn = self.native.symbol("chad_run")?;
        let free: FreeBufFn = self.native.symbol("chad_free_buf")?;
        let mut times = vec![0.0; reps];
        let mut out = Buf {
            ptr: std::ptr::null_mut(),
            len: 0,
            cap: 0,
        };
        // SAFETY: a live handle, `times` has `reps` slots, `out` is writable.
        let status = unsafe { run(self.handle, reps as u64, times.as_mut_ptr(), &mut out) };
        let bytes: &[u8] = if out.ptr.is_null() {
            &[]
        } else {
            // SAFETY: the library wrote a buffer of `len` bytes; it is read before freeing.
            unsafe { std::slice::from_raw_parts(out.ptr, out.len) }
        };
        let result = match status {
            0 => Ok((read(bytes), times)),
            1 => Err(decode_error(&self.native.program, bytes)),
            _ => Err(Error::new(
                ErrorKind::Unsupported,
                "internal error: the native code panicked",
            )),
        };
        if !out.ptr.is_null() {
            // SAFETY: the buffer came from `chad_run` and is freed once, after its last read.
            unsafe { free(out) };
        }
        result
    }
}

impl Drop for Prepared<'_> {
    fn drop(&mut self) {
        if let Ok(free) = self.native.symbol::<FreePreparedFn>("chad_free_prepared") {
            // SAFETY: the handle came from `chad_prepare` and is freed once.
            unsafe { free(self.handle) };
        }
    }
}

/// Appends the binary form of an IR value (see [`crate::ir::rust::ffi`]).
pub fn encode(p: &Program, t: Ty, v: &Val, out: &mut Vec<u8>) {
    crate::deep::deep(|| match (p.types.kind(t), v) {
        (TyKind::F64, Val::F64(x)) => out.extend_from_slice(&x.to_le_bytes()),
        (TyKind::I64, Val::I64(x)) => out.extend_from_slice(&x.to_le_bytes()),
        (TyKind::Bool, Val::Bool(b)) => out.push(u8::from(*b)),
        (TyKind::Unit, _) => {}
        (TyKind::Tuple(cs), Val::Tuple(xs)) => {
            for (c, x) in cs.iter().zip(xs.iter()) {
                encode(p, *c, x, out);
            }
        }
        (TyKind::Array(e), Val::Array(xs)) => {
            out.extend_from_slice(&(xs.len() as u64).to_le_bytes());
            for x in xs.iter() {
                encode(p, *e, x, out);
            }
        }
        (TyKind::List(k, w), Val::Array(xs)) => {
            out.extend_from_slice(&(xs.len() as u64).to_le_bytes());
            let kv = p
                .types
                .lookup(&TyKind::Tuple(vec![*k, *w]))
                .expect("a list's entry type");
            for x in xs.iter() {
                encode(p, kv, x, out);
            }
        }
        (TyKind::Enum(e), Val::Enum(tag, x)) => {
            out.extend_from_slice(&tag.to_le_bytes());
            let payload = p.types.enums()[*e as usize].variants[*tag as usize].1;
            encode(p, payload, x, out);
        }
        (k, v) => panic!("internal error: encoding {v:?} as {k:?}"),
    })
}

fn take<'b>(r: &mut &'b [u8], n: usize) -> Option<&'b [u8]> {
    if r.len() < n {
        return None;
    }
    let (x, rest) = r.split_at(n);
    *r = rest;
    Some(x)
}

fn u64_le(r: &mut &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(take(r, 8)?.try_into().ok()?))
}

/// Reads an IR value of type `t` in the binary form.
pub fn decode(p: &Program, t: Ty, r: &mut &[u8]) -> Option<Val> {
    crate::deep::deep(|| {
        Some(match p.types.kind(t) {
            TyKind::F64 => Val::F64(f64::from_bits(u64_le(r)?)),
            TyKind::I64 => Val::I64(u64_le(r)? as i64),
            TyKind::Bool => Val::Bool(take(r, 1)?[0] != 0),
            TyKind::Unit => Val::Unit,
            TyKind::Tuple(cs) => {
                let mut xs = Vec::with_capacity(cs.len());
                for c in cs {
                    xs.push(decode(p, *c, r)?);
                }
                Val::Tuple(xs.into())
            }
            TyKind::Array(e) => {
                let n = u64_le(r)? as usize;
                let mut xs = Vec::with_capacity(n.min(r.len()));
                for _ in 0..n {
                    xs.push(decode(p, *e, r)?);
                }
                Val::Array(xs.into())
            }
            TyKind::List(k, w) => {
                let n = u64_le(r)? as usize;
                let kv = p.types.lookup(&TyKind::Tuple(vec![*k, *w]))?;
                let mut xs = Vec::with_capacity(n.min(r.len()));
                for _ in 0..n {
                    xs.push(decode(p, kv, r)?);
                }
                Val::Array(xs.into())
            }
            TyKind::Enum(e) => {
                let tag = u32::from_le_bytes(take(r, 4)?.try_into().ok()?);
                let payload = p.types.enums()[*e as usize].variants.get(tag as usize)?.1;
                Val::Enum(tag, std::rc::Rc::new(decode(p, payload, r)?))
            }
        })
    })
}

/// The chad error a native error stands for: the same message and position as the
/// reference evaluators'.
fn decode_error(p: &Program, bytes: &[u8]) -> Error {
    let parse = || -> Option<Error> {
        let mut r = bytes;
        let site = u32::from_le_bytes(take(&mut r, 4)?.try_into().ok()?) as usize;
        let kind = take(&mut r, 1)?[0];
        let a = u64_le(&mut r)? as i64;
        let b = u64_le(&mut r)? as i64;
        let real = f64::from_bits(u64_le(&mut r)?);
        let n = u32::from_le_bytes(take(&mut r, 4)?.try_into().ok()?) as usize;
        let name = std::str::from_utf8(take(&mut r, n)?).ok()?;
        let e = match kind {
            0 => crate::value::check_index(a, b as usize).err()?,
            1 => crate::value::check_len(name, a).err()?,
            2 => crate::value::check_same_len(name, a as usize, b as usize).err()?,
            3 => crate::ir::Check::OneHot(crate::ir::Atom::Unit, crate::ir::Atom::Unit)
                .failure(&[a, b])?,
            5 => crate::steps::exceeded(a as u64),
            6 => crate::steps::depth_exceeded(a as u64),
            7 => crate::deep::Exhausted::Stack.error(),
            4 => {
                let prim = crate::prim::Registry::builtin().get(name)?.clone();
                let args = if name == "floor" {
                    vec![Value::Real(real)]
                } else if name == "argmax" || name == "argmin" {
                    // They fail on an empty array only.
                    vec![Value::reals(vec![])]
                } else if name == "ineg" {
                    vec![Value::Int(a)]
                } else {
                    vec![Value::Int(a), Value::Int(b)]
                };
                prim.eval_args(args).err()?
            }
            _ => return None,
        };
        Some(match p.sites.get(site) {
            Some(s) => e.or_span(s.span),
            None => e,
        })
    };
    parse().unwrap_or_else(|| {
        Error::new(
            ErrorKind::Unsupported,
            "internal error: an undecodable native error",
        )
    })
}

/// The Rust module of `chad emit-rust`: the definitions `indices` of `prog` (each with
/// first-order parameters and result) with their primal, forward and reverse code and the
/// public API of [`crate::ir::rust`].
pub fn emit_rust(
    prog: &crate::source::term::Program,
    indices: &[usize],
    source: &Source,
) -> Result<String> {
    let entries: Vec<_> = indices.iter().map(|&i| prog.entry(i)).collect();
    for e in &entries {
        if !(e.params.iter().all(|p| p.ty.is_first_order()) && e.body.ty.is_first_order()) {
            return Err(Error::new(
                ErrorKind::Unsupported,
                format!(
                    "`{}` takes or returns functions, which the Rust API cannot type",
                    e.name
                ),
            ));
        }
    }
    let parts = crate::ir::compile::Parts {
        jvp: true,
        vjp: true,
        required: false,
    };
    let m = Module::new(&entries, parts)?;
    let exports: Vec<crate::ir::rust::Export<'_>> = m
        .defs
        .iter()
        .map(|d| crate::ir::rust::Export {
            name: &d.entry.name,
            params: d.entry.param_types(),
            param_names: d.entry.params.iter().map(|p| p.name.to_string()).collect(),
            result: d.entry.body.ty.clone(),
            primal: d.primal,
            jvp: d.jvp,
            vjp: d.vjp,
        })
        .collect();
    let src = crate::ir::rust::SourceInfo {
        source: Some(source),
    };
    crate::ir::rust::module(&m.program, &exports, &src)
}

/// Whether native code can be built here (a working `rustc`).
pub fn available() -> bool {
    rustc_version().is_ok()
}
