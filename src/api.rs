//! The library's front door: load a program once, pick a definition, and run it and its
//! derivatives through one pipeline that compiles each piece of code once and keeps it.
//!
//! ```text
//! Program::load(text) / Program::from_file(path)     parse and type-check (errors with positions)
//!   .function("f")?                                  a Function: the definition, wrt, backend
//!     .eval(&args) .grad(&args) .value_and_grad(&args) .jvp(&args, &tangents) .vjp(&args, &ct)
//!     .vjp_at(&args)?  -> Pullback     (apply to many cotangents; the primal ran once)
//!     .linearize(&args)? -> Pushforward (apply to many tangents; the primal ran once)
//! ```
//!
//! On the execution engine (the default [`Backend`]), a [`Function`] runs the recipe of
//! [`crate::ad::optimized`]: the definition is optimised ([`crate::optimize`]), then
//! differentiated (forward or reverse CHAD), then simplified ([`crate::simplify`]), then compiled
//! for the engine ([`crate::target::engine`]); each piece (primal, forward, reverse) is made the
//! first time it is used and kept. With [`Backend::Native`] the same code is lowered to the IR
//! and compiled by `rustc` ([`crate::native`]; libraries are cached on disk by content hash).
//! Every `chad` command that runs a program (`eval`, `grad`, `jvp`, `vjp`) goes through a
//! `Function`, and `chad bench` through the same recipe.
//!
//! ## Selection: `wrt`
//!
//! [`Function::wrt`] differentiates with respect to some parameters only; the others are
//! constants in the derivative code (their cotangents are never computed). The derivative
//! methods then take tangents for, and return cotangents of, the selected parameters only, in
//! parameter order.
//!
//! ## Threads
//!
//! [`Program`] and [`Function`] are `Send + Sync` and cheap to clone: share one between threads
//! (e.g. with `std::thread::scope`) to evaluate a batch in parallel. Run-time [`Value`]s and the
//! compiled code share structure through reference counts that are not atomic (`Rc`: most of
//! the engine's time goes into them), so they stay on one thread: each thread that uses a
//! `Function` compiles its own copy of the code on first use (kept in a per-thread cache for as
//! long as the `Function` lives) and makes its own `Value`s (from plain Rust data: see the
//! `From`/`TryFrom` conversions in [`crate::value`]). [`Pullback`] and [`Pushforward`] hold
//! run-time values and are therefore not `Send`: make one per thread.
//!
//! ```
//! use chad::{Program, Value};
//!
//! let program = Program::load(
//!     "def f (x : Real) (ys : Array Real) : Real = sum (map (\\(y : Real) -> x * sin y) ys)",
//! )?;
//! let f = program.function("f")?;
//! let args = [Value::from(2.0), Value::from(vec![0.0, 1.0])];
//! let (value, grad) = f.value_and_grad(&args)?;
//! assert_eq!(f64::try_from(&value)?, 2.0 * 1f64.sin());
//! assert_eq!(f64::try_from(&grad[0])?, 1f64.sin());
//! assert_eq!(Vec::<f64>::try_from(&grad[1])?, vec![2.0, 2.0 * 1f64.cos()]);
//!
//! // Only with respect to `x`: `ys` is a constant.
//! let fx = f.wrt(&["x"])?;
//! assert_eq!(fx.grad(&args)?.len(), 1);
//!
//! // One pullback, many cotangents (the primal ran once).
//! let pullback = f.vjp_at(&args)?;
//! let g3 = pullback.apply(&Value::from(3.0))?;
//! assert_eq!(f64::try_from(&g3[0])?, 3.0 * 1f64.sin());
//! # Ok::<(), chad::Error>(())
//! ```

use crate::ad::optimized::Optimized;
use crate::ad::{self, Vjp};
use crate::error::{Error, ErrorKind, Result, Source};
use crate::ir::compile::Parts;
use crate::native::Native;
use crate::prim::Registry;
use crate::source::term;
use crate::value::Value;
use rustc_hash::FxHashMap;
use std::cell::{OnceCell, RefCell};
use std::path::Path;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

/// Where a [`Function`] runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Backend {
    /// The execution engine: interpreted closures, compiled in milliseconds (the default).
    #[default]
    Engine,
    /// Native code: the IR compiled to Rust, built by `rustc` (cached by content hash), loaded
    /// in process. Needs `rustc` on the `PATH`; [`Function::vjp_at`] and
    /// [`Function::linearize`] still run on the engine.
    Native,
}

/// How reverse mode is made (on the engine).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Via {
    /// Reverse CHAD: the reverse functor (the default).
    #[default]
    Reverse,
    /// The transpose of forward CHAD's derivative (linearize, unzip, transpose).
    Transpose,
}

static NEXT_ID: AtomicU64 = AtomicU64::new(0);

fn next_id() -> u64 {
    NEXT_ID.fetch_add(1, Ordering::Relaxed)
}

/// A thread's cache: per owner id, the owner (to tell when it is gone) and what this thread
/// made for it.
type Cache<O, T> = RefCell<FxHashMap<u64, (Weak<O>, Rc<T>)>>;

thread_local! {
    static PROGRAMS: Cache<ProgramData, term::Program> = RefCell::new(FxHashMap::default());
    static FUNCTIONS: Cache<FunctionData, Artefacts> = RefCell::new(FxHashMap::default());
}

/// What `owner` (with id `id`) has in this thread's `cache`, made by `make` if nothing yet.
/// Entries of owners that are gone are dropped whenever something is added.
fn cached<O, T>(
    cache: &'static std::thread::LocalKey<Cache<O, T>>,
    id: u64,
    owner: &Arc<O>,
    make: impl FnOnce() -> Result<T>,
) -> Result<Rc<T>> {
    if let Some(t) = cache.with(|c| c.borrow().get(&id).map(|(_, t)| t.clone())) {
        return Ok(t);
    }
    let t = Rc::new(make()?);
    cache.with(|c| {
        let mut c = c.borrow_mut();
        c.retain(|_, (o, _)| o.strong_count() > 0);
        c.insert(id, (Arc::downgrade(owner), t.clone()));
    });
    Ok(t)
}

/// Removes `id`'s entry from this thread's `cache` (when its owner is dropped).
fn forget<O, T>(cache: &'static std::thread::LocalKey<Cache<O, T>>, id: u64) {
    // During thread teardown the cache may be gone already: nothing to do then. The entry is
    // moved out before it is dropped, so that dropping it cannot reenter the cache.
    let _ = cache.try_with(|c| c.try_borrow_mut().ok().and_then(|mut c| c.remove(&id)));
}

struct ProgramData {
    id: u64,
    source: Source,
    /// Each definition's name and type, in order.
    defs: Vec<(String, String)>,
    /// The definitions specialised at each call (`term::Program::templates`), by name.
    templates: Vec<String>,
}

/// The error for running a definition that differentiates its function parameter inside: it
/// has no code of its own, only its specialisations at each call.
pub(crate) fn template_error(name: &str) -> Error {
    Error::new(
        ErrorKind::Input,
        format!(
            "`{name}` differentiates its function parameter inside, so it is specialised at \
             each call and cannot be run on its own"
        ),
    )
    .with_note(format!(
        "call it from another definition: `def main (x : Real) : Real = {name} (\\(y : Real) -> \
         ..) x`"
    ))
}

impl Drop for ProgramData {
    fn drop(&mut self) {
        forget(&PROGRAMS, self.id);
    }
}

/// A parsed and type-checked program (with the builtin primitives): the definitions to make
/// [`Function`]s of. Cheap to clone; `Send + Sync`.
#[derive(Clone)]
pub struct Program {
    data: Arc<ProgramData>,
}

impl Program {
    /// Parses and type-checks program text (named `<input>` in error messages).
    pub fn load(text: &str) -> Result<Program> {
        Program::from_source(Source::new("<input>".to_string(), text.to_string()))
    }

    /// Reads, parses and type-checks a program file (named by its path in error messages).
    pub fn from_file(path: impl AsRef<Path>) -> Result<Program> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|e| {
            Error::new(
                ErrorKind::Input,
                format!("cannot read `{}`: {e}", path.display()),
            )
        })?;
        Program::from_source(Source::new(path.display().to_string(), text))
    }

    /// Parses and type-checks a named source. Errors carry positions in it: render them with
    /// [`Error::render`] and [`Program`]'s source (or `source`).
    pub fn from_source(source: Source) -> Result<Program> {
        let terms = crate::ad::nested::load(&source.text, &Registry::builtin())?;
        let defs = terms
            .defs
            .iter()
            .map(|d| (d.name().to_string(), d.var.ty.to_string()))
            .collect();
        let templates = terms.templates.iter().map(|t| t.name.to_string()).collect();
        let data = Arc::new(ProgramData {
            id: next_id(),
            source,
            defs,
            templates,
        });
        let terms = Rc::new(terms);
        cached(&PROGRAMS, data.id, &data, || Ok(Rc::unwrap_or_clone(terms)))?;
        Ok(Program { data })
    }

    /// The program's source (name and text).
    pub fn source(&self) -> &Source {
        &self.data.source
    }

    /// The definitions' names, in order.
    pub fn definitions(&self) -> impl Iterator<Item = &str> {
        self.data.defs.iter().map(|(n, _)| n.as_str())
    }

    /// The type of definition `name`, as printed (`Real -> Array Real -> Real`), if there is
    /// one.
    pub fn type_of(&self, name: &str) -> Option<&str> {
        self.data
            .defs
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, t)| t.as_str())
    }

    /// The typed core terms (for the internals; parsed again on each thread that asks).
    pub fn terms(&self) -> Result<Rc<term::Program>> {
        cached(&PROGRAMS, self.data.id, &self.data, || {
            crate::ad::nested::load(&self.data.source.text, &Registry::builtin())
        })
    }

    /// The definition `name` as a [`Function`] (with respect to every parameter, on the
    /// engine). Fails if there is no such definition, naming the ones there are.
    pub fn function(&self, name: &str) -> Result<Function> {
        match self.data.defs.iter().position(|(n, _)| n == name) {
            Some(k) => self.function_at(k),
            None if self.data.templates.iter().any(|t| t == name) => Err(template_error(name)),
            None => Err(Error::new(
                ErrorKind::Input,
                format!("no definition named `{name}` in {}", self.data.source.name),
            )
            .with_note(format!(
                "definitions: {}",
                self.definitions().collect::<Vec<_>>().join(", ")
            ))),
        }
    }

    /// The last definition as a [`Function`] (the CLI's default). Fails if there is none.
    pub fn last(&self) -> Result<Function> {
        match self.data.defs.len() {
            0 => Err(Error::new(
                ErrorKind::Input,
                format!("{} has no definitions", self.data.source.name),
            )),
            n => self.function_at(n - 1),
        }
    }

    /// Definition number `index` (in order) as a [`Function`].
    pub fn function_at(&self, index: usize) -> Result<Function> {
        let terms = self.terms()?;
        let entry = terms.entry(index);
        Ok(Function::new(FunctionData {
            id: next_id(),
            program: self.clone(),
            index,
            name: entry.name.to_string(),
            params: entry.params.iter().map(|p| p.name.to_string()).collect(),
            wrt: vec![true; entry.params.len()],
            backend: Backend::Engine,
            via: Via::Reverse,
            verbose: false,
        }))
    }
}

struct FunctionData {
    id: u64,
    program: Program,
    index: usize,
    name: String,
    params: Vec<String>,
    wrt: Vec<bool>,
    backend: Backend,
    via: Via,
    verbose: bool,
}

impl Drop for FunctionData {
    fn drop(&mut self) {
        forget(&FUNCTIONS, self.id);
    }
}

/// What one thread compiled for a [`Function`], each piece on first use.
struct Artefacts {
    entry: term::Entry,
    wrt: Vec<bool>,
    optimized: OnceCell<Optimized>,
    transposed: OnceCell<Vjp>,
    /// Native code for the primal, forward and reverse parts.
    native: [OnceCell<Native>; 3],
    /// Hessian-vector products ([`Function::hvp`]).
    hvp: OnceCell<ad::nested::Hvp>,
}

/// A definition of a [`Program`] ready to run and differentiate: which parameters to
/// differentiate ([`Function::wrt`]) and where to run ([`Function::backend`]); the compiled
/// code is made on first use and kept. Cheap to clone; `Send + Sync` (see the module doc).
#[derive(Clone)]
pub struct Function {
    data: Arc<FunctionData>,
}

impl Function {
    fn new(data: FunctionData) -> Function {
        Function {
            data: Arc::new(data),
        }
    }

    /// A copy with other settings (and so its own compiled code).
    fn with(&self, change: impl FnOnce(&mut FunctionData)) -> Function {
        let d = &self.data;
        let mut data = FunctionData {
            id: next_id(),
            program: d.program.clone(),
            index: d.index,
            name: d.name.clone(),
            params: d.params.clone(),
            wrt: d.wrt.clone(),
            backend: d.backend,
            via: d.via,
            verbose: d.verbose,
        };
        change(&mut data);
        Function::new(data)
    }

    /// The definition's name.
    pub fn name(&self) -> &str {
        &self.data.name
    }

    /// The parameters' names, in order.
    pub fn params(&self) -> &[String] {
        &self.data.params
    }

    /// The program the definition is in.
    pub fn program(&self) -> &Program {
        &self.data.program
    }

    /// One flag per parameter: whether it is differentiated.
    pub fn selection(&self) -> &[bool] {
        &self.data.wrt
    }

    /// The same function differentiated with respect to the named parameters only (the
    /// others are constants). Fails on unknown or repeated names.
    pub fn wrt<S: AsRef<str>>(&self, names: &[S]) -> Result<Function> {
        let sel = ad::select(&*self.entry()?, names)?;
        Ok(self.with_selection(sel))
    }

    /// The same function differentiated with respect to the parameters `wrt` flags (one flag
    /// per parameter).
    pub fn with_selection(&self, wrt: Vec<bool>) -> Function {
        assert_eq!(wrt.len(), self.data.params.len(), "one flag per parameter");
        self.with(|d| d.wrt = wrt)
    }

    /// The same function run on `backend`.
    pub fn backend(&self, backend: Backend) -> Function {
        self.with(|d| d.backend = backend)
    }

    /// The same function with reverse mode made as `via` says (on the engine).
    pub fn via(&self, via: Via) -> Function {
        self.with(|d| d.via = via)
    }

    /// The same function reporting native builds on standard error (with
    /// [`Backend::Native`]: the cache folder, whether the library was cached, the build time).
    pub fn verbose(&self, verbose: bool) -> Function {
        self.with(|d| d.verbose = verbose)
    }

    /// What this thread compiled for the function.
    fn artefacts(&self) -> Result<Rc<Artefacts>> {
        cached(&FUNCTIONS, self.data.id, &self.data, || {
            let entry = self.data.program.terms()?.entry(self.data.index);
            Ok(Artefacts {
                entry,
                wrt: self.data.wrt.clone(),
                optimized: OnceCell::new(),
                transposed: OnceCell::new(),
                native: Default::default(),
                hvp: OnceCell::new(),
            })
        })
    }

    /// The definition as a typed core term (for the internals).
    pub fn entry(&self) -> Result<impl std::ops::Deref<Target = term::Entry>> {
        struct EntryOf(Rc<Artefacts>);
        impl std::ops::Deref for EntryOf {
            type Target = term::Entry;
            fn deref(&self) -> &term::Entry {
                &self.0.entry
            }
        }
        Ok(EntryOf(self.artefacts()?))
    }

    /// The value of the definition at `args` (one per parameter, checked against the
    /// parameter types): the optimised program on the engine, or native code.
    pub fn eval(&self, args: &[Value]) -> Result<Value> {
        let a = self.artefacts()?;
        crate::eval::check_args(&a.entry, args)?;
        match self.data.backend {
            Backend::Engine => a.optimized().eval(args),
            Backend::Native => self.native(&a, 0)?.eval(args),
        }
    }

    /// The value and the gradient (one per selected parameter) of a `Real`-valued
    /// definition.
    pub fn value_and_grad(&self, args: &[Value]) -> Result<(Value, Vec<Value>)> {
        let a = self.artefacts()?;
        crate::eval::check_args(&a.entry, args)?;
        ad::check_real_valued(&a.entry)?;
        let (value, grads) = match self.data.backend {
            Backend::Native => self.native(&a, 2)?.grad(args)?,
            Backend::Engine => self.reverse(&a)?.grad(args)?,
        };
        Ok((value, self.selected(grads)))
    }

    /// The gradient (one per selected parameter) of a `Real`-valued definition.
    pub fn grad(&self, args: &[Value]) -> Result<Vec<Value>> {
        Ok(self.value_and_grad(args)?.1)
    }

    /// Forward mode: the value and its tangent along `tangents`, one per selected parameter
    /// (of the parameter's tangent type: `()` for `Int`, `Bool` and `Unit`).
    pub fn jvp(&self, args: &[Value], tangents: &[Value]) -> Result<(Value, Value)> {
        let a = self.artefacts()?;
        crate::eval::check_args(&a.entry, args)?;
        let ts = self.all_tangents(&a, args, tangents)?;
        match self.data.backend {
            Backend::Native => self.native(&a, 1)?.jvp(args, &ts),
            Backend::Engine => a.optimized().jvp()?.jvp(args, &ts),
        }
    }

    /// Reverse mode: the value and the cotangents of the selected parameters for the output
    /// cotangent `cotangent` (of the result's tangent type).
    pub fn vjp(&self, args: &[Value], cotangent: &Value) -> Result<(Value, Vec<Value>)> {
        let a = self.artefacts()?;
        crate::eval::check_args(&a.entry, args)?;
        let (value, grads) = match self.data.backend {
            Backend::Native => self.native(&a, 2)?.vjp(args, cotangent)?,
            Backend::Engine => self.reverse(&a)?.vjp(args, cotangent)?,
        };
        Ok((value, self.selected(grads)))
    }

    /// Reverse mode at one point: runs the primal at `args` once and returns the value with
    /// the transposed derivative there, to apply to many cotangents (on the engine).
    pub fn vjp_at(&self, args: &[Value]) -> Result<Pullback> {
        let a = self.artefacts()?;
        Ok(Pullback {
            inner: self.reverse(&a)?.pullback(args)?,
            wrt: self.data.wrt.clone(),
        })
    }

    /// Forward mode at one point: runs the primal at `args` once and returns the value with
    /// the derivative there, to apply to many tangents (on the engine).
    pub fn linearize(&self, args: &[Value]) -> Result<Pushforward> {
        let a = self.artefacts()?;
        let inner = a.optimized().jvp()?.pushforward(args)?;
        Ok(Pushforward {
            inner,
            zeros: self.zero_tangents(&a, args),
        })
    }

    /// Hessian-vector product of a `Real`-valued definition by forward over reverse
    /// ([`ad::nested::Hvp`]), on the function's backend: the value, and per selected parameter
    /// its gradient and its Hessian-vector product along `tangents` (one per selected
    /// parameter). The second-order code is compiled on first use and kept.
    pub fn hvp(&self, args: &[Value], tangents: &[Value]) -> Result<ad::nested::HvpResult> {
        let a = self.artefacts()?;
        let opt = crate::optimize::optimize(&a.entry);
        ad::nested::runs_at(&opt, args)?;
        let h = match a.hvp.get() {
            Some(h) => h,
            None => {
                let h = ad::nested::Hvp::with_backend(&opt, &a.wrt, &*self.nested_backend())?;
                a.hvp.get_or_init(|| h)
            }
        };
        let mut r = h.hvp(args, tangents)?;
        r.gradient.retain(Option::is_some);
        r.hvp.retain(Option::is_some);
        Ok(r)
    }

    /// Value, flat gradient and Hessian of a `Real`-valued definition with respect to the
    /// selected parameters ([`ad::nested::hessian_with`]), on the function's backend.
    pub fn hessian(&self, args: &[Value]) -> Result<(f64, Vec<f64>, Vec<Vec<f64>>)> {
        let a = self.artefacts()?;
        let opt = crate::optimize::optimize(&a.entry);
        ad::nested::hessian_with(&opt, &a.wrt, args, &*self.nested_backend())
    }

    /// Value and Jacobian of a first-order definition with respect to the selected parameters
    /// ([`ad::nested::jacobian_with`]; `mode` `None` picks the one with fewer runs), on the
    /// function's backend.
    pub fn jacobian(
        &self,
        args: &[Value],
        mode: Option<ad::nested::Mode>,
    ) -> Result<(Value, Vec<Vec<f64>>)> {
        let a = self.artefacts()?;
        let opt = crate::optimize::optimize(&a.entry);
        ad::nested::jacobian_with(&opt, &a.wrt, args, mode, &*self.nested_backend())
    }

    /// Where [`Function::hvp`], [`Function::hessian`] and [`Function::jacobian`] compile.
    fn nested_backend(&self) -> Box<dyn ad::nested::Backend + '_> {
        match self.data.backend {
            Backend::Engine => Box::new(ad::nested::Engine),
            Backend::Native => Box::new(crate::native::NativeBackend {
                source: Some(self.data.program.source()),
                verbose: self.data.verbose,
            }),
        }
    }

    /// The engine's reverse mode, made as `via` says.
    fn reverse<'a>(&self, a: &'a Artefacts) -> Result<&'a Vjp> {
        match self.data.via {
            Via::Reverse => a.optimized().vjp(),
            Via::Transpose => {
                if let Some(v) = a.transposed.get() {
                    return Ok(v);
                }
                let v = crate::linearize::vjp_via_transpose(a.optimized().differentiated())?;
                Ok(a.transposed.get_or_init(|| v))
            }
        }
    }

    /// The native code of part `k` (0 primal, 1 forward, 2 reverse).
    fn native<'a>(&self, a: &'a Artefacts, k: usize) -> Result<&'a Native> {
        if let Some(n) = a.native[k].get() {
            return Ok(n);
        }
        let parts = [Parts::PRIMAL, Parts::JVP, Parts::VJP][k];
        let entry = if k == 0 {
            a.entry.clone()
        } else {
            ad::with_respect_to(&a.entry, &a.wrt)
        };
        let source = Some(self.data.program.source());
        let n = Native::compile(&entry, parts, source, self.data.verbose)?;
        Ok(a.native[k].get_or_init(|| n))
    }

    /// The selected parameters' entries of `all`.
    fn selected(&self, all: Vec<Value>) -> Vec<Value> {
        all.into_iter()
            .zip(&self.data.wrt)
            .filter_map(|(g, &s)| s.then_some(g))
            .collect()
    }

    /// A zero tangent per parameter (`None` for the selected ones).
    fn zero_tangents(&self, a: &Artefacts, args: &[Value]) -> Vec<Option<Value>> {
        a.entry
            .params
            .iter()
            .zip(args)
            .zip(&self.data.wrt)
            .map(|((p, x), &s)| (!s).then(|| crate::oracle::fd::zero_tangent(&p.ty, x)))
            .collect()
    }

    /// One tangent per parameter: `given` for the selected ones, zero for the others.
    fn all_tangents(&self, a: &Artefacts, args: &[Value], given: &[Value]) -> Result<Vec<Value>> {
        expand(&self.zero_tangents(a, args), given)
    }
}

/// One tangent per parameter from those `given` for the selected ones (`None` in `zeros`).
fn expand(zeros: &[Option<Value>], given: &[Value]) -> Result<Vec<Value>> {
    let k = zeros.iter().filter(|z| z.is_none()).count();
    if given.len() != k {
        return Err(Error::new(
            ErrorKind::Argument,
            format!(
                "{} tangent{} given for {k} differentiated parameter{}",
                given.len(),
                if given.len() == 1 { "" } else { "s" },
                if k == 1 { "" } else { "s" },
            ),
        ));
    }
    let mut given = given.iter();
    Ok(zeros
        .iter()
        .map(|z| match z {
            Some(zero) => zero.clone(),
            None => given.next().cloned().unwrap_or(Value::Unit),
        })
        .collect())
}

impl Artefacts {
    fn optimized(&self) -> &Optimized {
        self.optimized
            .get_or_init(|| Optimized::with_respect_to(&self.entry, &self.wrt))
    }
}

/// Reverse mode at one point ([`Function::vjp_at`]): the value, and the transposed derivative
/// to apply to many output cotangents without running the primal again.
pub struct Pullback {
    inner: ad::Pullback,
    wrt: Vec<bool>,
}

impl Pullback {
    /// The value of the definition at the point.
    pub fn value(&self) -> &Value {
        self.inner.value()
    }

    /// The cotangents of the selected parameters for the output cotangent `cotangent`.
    pub fn apply(&self, cotangent: &Value) -> Result<Vec<Value>> {
        Ok(self
            .inner
            .apply(cotangent)?
            .into_iter()
            .zip(&self.wrt)
            .filter_map(|(g, &s)| s.then_some(g))
            .collect())
    }
}

/// Forward mode at one point ([`Function::linearize`]): the value, and the derivative to apply
/// to many tangents without running the primal again.
pub struct Pushforward {
    inner: ad::Pushforward,
    zeros: Vec<Option<Value>>,
}

impl Pushforward {
    /// The value of the definition at the point.
    pub fn value(&self) -> &Value {
        self.inner.value()
    }

    /// The result's tangent along `tangents`, one per selected parameter.
    pub fn apply(&self, tangents: &[Value]) -> Result<Value> {
        self.inner.apply(&expand(&self.zeros, tangents)?)
    }
}

impl std::fmt::Debug for Program {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Program")
            .field("source", &self.data.source.name)
            .field("definitions", &self.data.defs)
            .finish()
    }
}

impl std::fmt::Debug for Function {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let d = &self.data;
        f.debug_struct("Function")
            .field("name", &d.name)
            .field("params", &d.params)
            .field("wrt", &d.wrt)
            .field("backend", &d.backend)
            .field("via", &d.via)
            .finish()
    }
}

impl std::fmt::Debug for Pullback {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pullback")
            .field("value", self.value())
            .field("wrt", &self.wrt)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Pushforward {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pushforward")
            .field("value", self.value())
            .finish_non_exhaustive()
    }
}
