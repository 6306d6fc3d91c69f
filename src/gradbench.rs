//! A [GradBench](https://github.com/gradbench/gradbench) tool: `chad gradbench` speaks the
//! GradBench protocol (one JSON object per line on stdin, one answer per line on stdout) and
//! evaluates the benchmark's functions with chad programs bundled in the binary
//! (`gradbench/*.chad`).
//!
//! * `start` → `{"id", "tool": "chad", "config": {"backend": ..}}`;
//! * `define` of a module loads its program and compiles the primal and the gradient once
//!   (`success: false` with an error for a module chad does not implement); its answer's
//!   `backend` says where the functions run: `--backend native` falls back to the engine for
//!   a program the native backend cannot lower (recursion, for now) and for forward mode
//!   (ht's Jacobian); a module whose functions take their own derivatives (`kmeans`,
//!   `particle`, `saddle`: `grad`/`jvp` inside the program) compiles each function's
//!   definition instead (`src/gradbench/programs.rs`) and names each one's backend;
//! * `evaluate` converts the JSON input into chad values, runs the function until both
//!   `min_runs` and `min_seconds` are reached (one `evaluate` timing per run; the conversions
//!   are not timed) and converts the result into the eval's JSON output;
//! * `analysis` (the eval's verdict) is acknowledged.
//!
//! Every failure (bad JSON, an unknown module or function, a malformed input, a runtime error)
//! is answered with `success: false` and a message; nothing the eval sends can make it panic.

#[path = "gradbench/ba.rs"]
mod ba;
#[path = "gradbench/ht.rs"]
mod ht;
#[path = "gradbench/programs.rs"]
mod programs;

use crate::ad::{self, Jvp, Vjp};
use crate::error::{Error, ErrorKind, Result};
use crate::ir::compile::{Compiled, Parts};
use crate::native::Native;
use crate::optimize::optimize;
use crate::prim::Registry;
use crate::simplify::simplify;
use crate::source::term::Entry;
use crate::target::{embed, engine::Code};
use crate::value::Value;
use serde_json::{Map, Value as Json, json};
use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::time::Instant;

/// Where the functions run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// chad's execution engine (closure-compiled target code).
    Engine,
    /// Native code: the IR compiled to Rust by rustc (cached), loaded in process.
    Native,
}

impl Backend {
    fn name(self) -> &'static str {
        match self {
            Backend::Engine => "engine",
            Backend::Native => "native",
        }
    }
}

/// What a function of a module computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// The definition's value.
    Primal,
    /// Its gradient with respect to the parameters named in [`Spec::wrt`].
    Gradient,
    /// `ba`'s sparse Jacobian: three reverse passes of `grad_def` on per-observation copies
    /// (see [`ba`]).
    BaJacobian,
    /// `ht`'s dense Jacobian: forward passes of `def`, one per column (see [`ht`]).
    HtJacobian,
    /// The value of the named definition, which has the same parameters as `def` and takes
    /// the derivatives it needs itself (see [`programs`]); a module whose functions are all of
    /// this kind compiles no gradient.
    Program(&'static str),
    /// A Newton direction `J / H` elementwise, as the named definition computes it with
    /// `jvp` of `grad` inside the program: `J` the gradient of the module's `def` with
    /// respect to parameter `k`, `H` its Hessian-vector product along the all-ones direction
    /// (the Hessian's diagonal where, as for kmeans, the Hessian is diagonal). With `--backend
    /// native` both come from one native Hessian-vector product of `def`
    /// ([`crate::ad::nested::Hvp`], dual numbers on the compiled gradient, note 12); on the
    /// engine the definition runs as written.
    NewtonDirection(&'static str, usize),
}

/// How the eval's input becomes the definition's arguments.
#[derive(Clone, Copy, Debug)]
enum Input {
    /// The input is the single argument itself (`hello`).
    Bare,
    /// An object; these fields are the arguments, in parameter order.
    Fields(&'static [&'static str]),
    /// `ba`'s input, expanded to its n cameras, m points and p observations ([`ba::arguments`]).
    Ba,
    /// An object; these `/`-separated paths into it are the arguments (`ht`'s nested model).
    Paths(&'static [&'static str]),
}

/// How the gradient becomes the eval's output.
#[derive(Clone, Copy, Debug)]
enum GradOutput {
    /// The gradient of the first parameter.
    First,
    /// An object: these fields hold the gradients of the first parameters, in order.
    Fields(&'static [&'static str]),
    /// One flat array: the gradients of the first `n` parameters (arrays of arrays of reals),
    /// each flattened row by row, concatenated (`lstm`).
    Flattened(usize),
}

/// One GradBench module implemented by a bundled chad program.
#[derive(Debug)]
struct Spec {
    module: &'static str,
    file: &'static str,
    source: &'static str,
    /// The definition the primal function evaluates.
    def: &'static str,
    /// The definition the gradient function differentiates (`Real`-valued, with the same
    /// parameters as `def`).
    grad_def: &'static str,
    input: Input,
    /// The parameters the gradient is taken with respect to (the others are constants).
    wrt: &'static [&'static str],
    functions: &'static [(&'static str, Kind)],
    gradient: GradOutput,
}

const SPECS: &[Spec] = &[
    Spec {
        module: "hello",
        file: "gradbench/hello.chad",
        source: include_str!("../gradbench/hello.chad"),
        def: "square",
        grad_def: "square",
        input: Input::Bare,
        wrt: &["x"],
        functions: &[("square", Kind::Primal), ("double", Kind::Gradient)],
        gradient: GradOutput::First,
    },
    Spec {
        module: "lse",
        file: "gradbench/lse.chad",
        source: include_str!("../gradbench/lse.chad"),
        def: "logsumexp",
        grad_def: "logsumexp",
        input: Input::Fields(&["x"]),
        wrt: &["x"],
        functions: &[("primal", Kind::Primal), ("gradient", Kind::Gradient)],
        gradient: GradOutput::First,
    },
    Spec {
        module: "llsq",
        file: "gradbench/llsq.chad",
        source: include_str!("../gradbench/llsq.chad"),
        def: "llsq",
        grad_def: "llsq",
        input: Input::Fields(&["x", "n"]),
        wrt: &["x"],
        functions: &[("primal", Kind::Primal), ("gradient", Kind::Gradient)],
        gradient: GradOutput::First,
    },
    Spec {
        module: "gmm",
        file: "gradbench/gmm.chad",
        source: include_str!("../gradbench/gmm.chad"),
        def: "gmm",
        grad_def: "gmm",
        input: Input::Fields(&["alpha", "mu", "q", "l", "x", "gamma", "m"]),
        wrt: &["alpha", "mu", "q", "l"],
        functions: &[("objective", Kind::Primal), ("jacobian", Kind::Gradient)],
        gradient: GradOutput::Fields(&["alpha", "mu", "q", "l"]),
    },
    Spec {
        module: "ode",
        file: "gradbench/ode.chad",
        source: include_str!("../gradbench/ode.chad"),
        def: "ode",
        grad_def: "odeLast",
        input: Input::Fields(&["x", "s"]),
        wrt: &["x"],
        functions: &[("primal", Kind::Primal), ("gradient", Kind::Gradient)],
        gradient: GradOutput::First,
    },
    Spec {
        module: "lstm",
        file: "gradbench/lstm.chad",
        source: include_str!("../gradbench/lstm.chad"),
        def: "lstmObjective",
        grad_def: "lstmObjective",
        input: Input::Fields(&["main_params", "extra_params", "state", "sequence"]),
        wrt: &["mainParams", "extraParams"],
        functions: &[("objective", Kind::Primal), ("jacobian", Kind::Gradient)],
        gradient: GradOutput::Flattened(2),
    },
    Spec {
        module: "det",
        file: "gradbench/det.chad",
        source: include_str!("../gradbench/det.chad"),
        def: "det",
        grad_def: "det",
        input: Input::Fields(&["A", "ell"]),
        wrt: &["a"],
        functions: &[("primal", Kind::Primal), ("gradient", Kind::Gradient)],
        gradient: GradOutput::First,
    },
    Spec {
        module: "ba",
        file: "gradbench/ba.chad",
        source: include_str!("../gradbench/ba.chad"),
        def: "baObjective",
        grad_def: "baRows",
        input: Input::Ba,
        wrt: &["camsObs", "xsObs", "ws"],
        functions: &[("objective", Kind::Primal), ("jacobian", Kind::BaJacobian)],
        gradient: GradOutput::First,
    },
    Spec {
        module: "ht",
        file: "gradbench/ht.chad",
        source: include_str!("../gradbench/ht.chad"),
        def: "htObjective",
        grad_def: "htObjective",
        input: Input::Paths(&[
            "theta",
            "us",
            "data/model/parents",
            "data/model/base_relatives",
            "data/model/inverse_base_absolutes",
            "data/model/base_positions",
            "data/model/weights",
            "data/model/triangles",
            "data/model/is_mirrored",
            "data/correspondences",
            "data/points",
        ]),
        wrt: &["theta", "us"],
        functions: &[("objective", Kind::Primal), ("jacobian", Kind::HtJacobian)],
        gradient: GradOutput::First,
    },
    Spec {
        module: "kmeans",
        file: "gradbench/kmeans.chad",
        source: include_str!("../gradbench/kmeans.chad"),
        def: "cost",
        grad_def: "cost",
        input: Input::Fields(&["points", "centroids"]),
        wrt: &[],
        functions: &[
            ("cost", Kind::Program("cost")),
            ("dir", Kind::NewtonDirection("dir", 1)),
        ],
        gradient: GradOutput::First,
    },
    Spec {
        module: "particle",
        file: "gradbench/particle.chad",
        source: include_str!("../gradbench/particle.chad"),
        def: "rr",
        grad_def: "rr",
        input: Input::Fields(&["w"]),
        wrt: &[],
        functions: &[
            ("rr", Kind::Program("rr")),
            ("rf", Kind::Program("rf")),
            ("fr", Kind::Program("fr")),
            ("ff", Kind::Program("ff")),
        ],
        gradient: GradOutput::First,
    },
    Spec {
        module: "saddle",
        file: "gradbench/saddle.chad",
        source: include_str!("../gradbench/saddle.chad"),
        def: "rr",
        grad_def: "rr",
        input: Input::Fields(&["start"]),
        wrt: &[],
        functions: &[
            ("rr", Kind::Program("rr")),
            ("rf", Kind::Program("rf")),
            ("fr", Kind::Program("fr")),
            ("ff", Kind::Program("ff")),
        ],
        gradient: GradOutput::First,
    },
];

/// The names of the modules `chad gradbench` implements.
pub fn modules() -> Vec<&'static str> {
    SPECS.iter().map(|s| s.module).collect()
}

/// The bundled chad program of a module (its file name and text).
pub fn program(module: &str) -> Option<(&'static str, &'static str)> {
    SPECS
        .iter()
        .find(|s| s.module == module)
        .map(|s| (s.file, s.source))
}

/// The compiled code of one module.
enum Runner {
    Engine {
        primal: Box<Code>,
        vjp: Box<Vjp>,
        /// Forward mode, for a module whose Jacobian is computed by forward passes.
        jvp: Option<Box<Jvp>>,
    },
    /// The gradient's library (with its primal), and the primal's when that is another
    /// definition.
    Native(Box<Native>, Option<Box<Native>>),
    /// One compiled definition per [`Kind::Program`] function: the function's name, the
    /// definition's, its code and where it runs.
    Programs(Vec<(&'static str, &'static str, programs::Program, Backend)>),
}

/// A defined module: its program's entry point and code.
pub struct Module {
    spec: &'static Spec,
    entry: Entry,
    runner: Runner,
    backend: Backend,
}

impl Module {
    /// Where the module's functions run: the requested backend, or the engine for a program
    /// the native backend does not support.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Where each function runs, for a module whose functions are definitions run as they
    /// stand (empty for the others, whose functions all run on [`Module::backend`]).
    pub fn function_backends(&self) -> Vec<(&'static str, Backend)> {
        match &self.runner {
            Runner::Programs(ps) => ps.iter().map(|p| (p.0, p.3)).collect(),
            _ => Vec::new(),
        }
    }

    /// Loads the module's bundled program and compiles its primal and gradient for `backend`.
    pub fn define(module: &str, backend: Backend) -> Result<Module> {
        let spec = SPECS.iter().find(|s| s.module == module).ok_or_else(|| {
            Error::new(
                ErrorKind::Input,
                format!(
                    "chad does not implement the GradBench module `{module}` (it has: {})",
                    modules().join(", ")
                ),
            )
        })?;
        let prog = crate::ad::nested::load(spec.source, &Registry::builtin())
            .map_err(|e| e.prefixed(&format!("{}: ", spec.file)))?;
        let find = |name: &str| {
            prog.find(name).map(|i| prog.entry(i)).ok_or_else(|| {
                Error::new(
                    ErrorKind::Input,
                    format!("{} has no definition `{name}`", spec.file),
                )
            })
        };
        let entry = find(spec.def)?;
        if spec
            .functions
            .iter()
            .all(|f| matches!(f.1, Kind::Program(_) | Kind::NewtonDirection(..)))
        {
            let mut compiled = Vec::new();
            for &(function, kind) in spec.functions {
                let def = match kind {
                    Kind::Program(def) => def,
                    Kind::NewtonDirection(def, k) if backend == Backend::Native => {
                        let program = programs::Program::newton_direction(&entry, k)?;
                        compiled.push((function, def, program, Backend::Native));
                        continue;
                    }
                    Kind::NewtonDirection(def, _) => def,
                    _ => continue,
                };
                let e = find(def)?;
                if e.param_types() != entry.param_types() {
                    return Err(Error::new(
                        ErrorKind::Input,
                        format!(
                            "{}: `{}` and `{def}` must have the same parameters",
                            spec.file, spec.def
                        ),
                    ));
                }
                let (program, ran_on) = programs::Program::compile(&e, backend)?;
                compiled.push((function, def, program, ran_on));
            }
            let all_native = compiled.iter().all(|c| c.3 == Backend::Native);
            return Ok(Module {
                spec,
                entry,
                runner: Runner::Programs(compiled),
                backend: if all_native {
                    Backend::Native
                } else {
                    Backend::Engine
                },
            });
        }
        let grad_entry = find(spec.grad_def)?;
        let jacobian_by_rows = spec.functions.iter().any(|f| f.1 == Kind::BaJacobian);
        // Forward passes run on the engine (the native library has no JVP entry here).
        let forward = spec.functions.iter().any(|f| f.1 == Kind::HtJacobian);
        if !jacobian_by_rows && grad_entry.param_types() != entry.param_types() {
            return Err(Error::new(
                ErrorKind::Input,
                format!(
                    "{}: `{}` and `{}` must have the same parameters",
                    spec.file, spec.def, spec.grad_def
                ),
            ));
        }
        let sel = ad::wrt::select(&grad_entry, spec.wrt)?;
        let engine = || -> Result<Runner> {
            let optimized = optimize(&entry);
            let (params, body) = embed::entry(&optimized);
            let primal = Code::compile(&params, &simplify(&body));
            let vjp =
                Vjp::new(&ad::with_respect_to(&optimize(&grad_entry), &sel))?.map_body(simplify);
            vjp.code();
            let jvp = if forward {
                let jvp =
                    Jvp::new(&ad::with_respect_to(&optimize(&entry), &sel))?.map_body(simplify);
                jvp.code();
                Some(Box::new(jvp))
            } else {
                None
            };
            Ok(Runner::Engine {
                primal: Box::new(primal),
                vjp: Box::new(vjp),
                jvp,
            })
        };
        let native = || -> Result<Runner> {
            let code = Compiled::with_parts(&ad::with_respect_to(&grad_entry, &sel), Parts::VJP)?;
            let grad = Box::new(Native::new(code, None, false)?);
            let primal = if spec.def == spec.grad_def {
                None
            } else {
                let code = Compiled::with_parts(&entry, Parts::PRIMAL)?;
                Some(Box::new(Native::new(code, None, false)?))
            };
            Ok(Runner::Native(grad, primal))
        };
        let (runner, ran_on) = match backend {
            Backend::Engine => (engine()?, Backend::Engine),
            // A program the native backend cannot lower (recursion, for now) runs on the
            // engine; `define` says so in its answer.
            Backend::Native if forward => (engine()?, Backend::Engine),
            Backend::Native => match native() {
                Ok(r) => (r, Backend::Native),
                Err(e) if e.kind() == ErrorKind::Unsupported => (engine()?, Backend::Engine),
                Err(e) => return Err(e),
            },
        };
        Ok(Module {
            spec,
            entry,
            runner,
            backend: ran_on,
        })
    }

    /// The function named `function`, or an error naming the module's functions.
    fn kind(&self, function: &str) -> Result<Kind> {
        self.spec
            .functions
            .iter()
            .find(|(n, _)| *n == function)
            .map(|&(_, k)| k)
            .ok_or_else(|| {
                let names: Vec<&str> = self.spec.functions.iter().map(|(n, _)| *n).collect();
                Error::new(
                    ErrorKind::Input,
                    format!(
                        "the module `{}` has no function `{function}` (it has: {})",
                        self.spec.module,
                        names.join(", ")
                    ),
                )
            })
    }

    /// The definition's arguments from the eval's JSON input.
    fn arguments(&self, input: &Json) -> Result<Vec<Value>> {
        let types = self.entry.param_types();
        let args = match self.spec.input {
            Input::Bare => vec![Value::from_json(input, &types[0])?],
            Input::Ba => ba::arguments(input)?,
            Input::Paths(paths) => paths
                .iter()
                .zip(&types)
                .map(|(path, ty)| {
                    let v = path
                        .split('/')
                        .try_fold(input, |j, key| j.get(key))
                        .ok_or_else(|| {
                            Error::new(ErrorKind::Argument, format!("the input has no `{path}`"))
                        })?;
                    Value::from_json(v, ty).map_err(|e| e.prefixed(&format!("`{path}`: ")))
                })
                .collect::<Result<Vec<_>>>()?,
            Input::Fields(fields) => {
                let obj = input.as_object().ok_or_else(|| {
                    Error::new(
                        ErrorKind::Argument,
                        format!("the input of `{}` must be a JSON object", self.spec.module),
                    )
                })?;
                fields
                    .iter()
                    .zip(&types)
                    .map(|(f, ty)| {
                        let v = obj.get(*f).ok_or_else(|| {
                            Error::new(ErrorKind::Argument, format!("the input has no field `{f}`"))
                        })?;
                        Value::from_json(v, ty).map_err(|e| e.prefixed(&format!("field `{f}`: ")))
                    })
                    .collect::<Result<Vec<_>>>()?
            }
        };
        crate::eval::check_args(&self.entry, &args)?;
        Ok(args)
    }

    /// One run of a function: its result as chad values (the value, or the gradients).
    fn run(&self, kind: Kind, args: &[Value]) -> Result<Outcome> {
        let grad = |args: &[Value]| match &self.runner {
            Runner::Engine { vjp, .. } => vjp.grad(args),
            Runner::Native(n, _) => n.grad(args),
            Runner::Programs(_) => Err(Error::new(
                ErrorKind::Unsupported,
                "this module compiles no gradient (its programs take their own derivatives)",
            )),
        };
        Ok(match (kind, &self.runner) {
            (Kind::Program(def) | Kind::NewtonDirection(def, _), Runner::Programs(ps)) => {
                let (_, _, program, _) = ps.iter().find(|p| p.1 == def).ok_or_else(|| {
                    Error::new(ErrorKind::Runtime, format!("`{def}` was not compiled"))
                })?;
                Outcome::Value(program.run(args)?)
            }
            (Kind::Program(_) | Kind::NewtonDirection(..), _) | (_, Runner::Programs(_)) => {
                return Err(Error::new(
                    ErrorKind::Unsupported,
                    "this function's definition was not compiled for this module",
                ));
            }
            (Kind::BaJacobian, _) => {
                let mut rows_args = ba::observation_copies(args)?;
                let mut pass = |r: i64| -> Result<Vec<Value>> {
                    rows_args.push(Value::Int(r));
                    let g = grad(&rows_args)?.1;
                    rows_args.pop();
                    Ok(g)
                };
                let passes = [pass(0)?, pass(1)?, pass(2)?];
                Outcome::Jacobian(ba::assemble(args, &passes)?)
            }
            (Kind::HtJacobian, Runner::Engine { jvp: Some(jvp), .. }) => {
                Outcome::Dense(ht::jacobian(jvp, &self.entry.param_types(), args)?)
            }
            (Kind::HtJacobian, _) => {
                return Err(Error::new(
                    ErrorKind::Unsupported,
                    "this module's Jacobian needs forward mode, compiled on the engine only",
                ));
            }
            (Kind::Primal, Runner::Engine { primal, .. }) => Outcome::Value(primal.run(args)?),
            (Kind::Primal, Runner::Native(_, Some(n))) => Outcome::Value(n.eval(args)?),
            (Kind::Primal, Runner::Native(n, None)) => Outcome::Value(n.eval(args)?),
            (Kind::Gradient, _) => Outcome::Gradient(grad(args)?.1),
        })
    }

    /// The eval's JSON output for a result.
    fn output(&self, out: Outcome) -> Result<Json> {
        match out {
            Outcome::Value(v) if matches!(self.spec.input, Input::Ba) => ba::objective_json(&v),
            Outcome::Value(v) => Ok(v.to_json()),
            Outcome::Jacobian(coo) => Ok(ba::jacobian_json(&coo)),
            Outcome::Dense(rows) => Ok(json!(rows)),
            Outcome::Gradient(gs) => match self.spec.gradient {
                GradOutput::First => Ok(gs[0].to_json()),
                GradOutput::Fields(fields) => Ok(Json::Object(
                    fields
                        .iter()
                        .zip(&gs)
                        .map(|(f, g)| (f.to_string(), g.to_json()))
                        .collect::<Map<_, _>>(),
                )),
                GradOutput::Flattened(n) => {
                    let mut flat = Vec::new();
                    for g in gs.iter().take(n) {
                        let rows = match g.to_json() {
                            Json::Array(rows) => rows,
                            other => vec![other],
                        };
                        for row in rows {
                            match row {
                                Json::Array(xs) => flat.extend(xs),
                                x => flat.push(x),
                            }
                        }
                    }
                    Ok(Json::Array(flat))
                }
            },
        }
    }

    /// Evaluates `function` at the eval's `input`: the JSON output and one time per run in
    /// nanoseconds. Runs until `min_runs` runs and `min_seconds` seconds are reached (once for
    /// an input that is not an object, as `hello`'s).
    pub fn evaluate(&self, function: &str, input: &Json) -> Result<(Json, Vec<u128>)> {
        let kind = self.kind(function)?;
        let args = self.arguments(input)?;
        let field = |name: &str| input.as_object().and_then(|o| o.get(name));
        let min_runs = match field("min_runs") {
            None => 1,
            Some(v) => v.as_u64().ok_or_else(|| {
                Error::new(
                    ErrorKind::Argument,
                    format!("`min_runs` must be a non-negative integer, not `{v}`"),
                )
            })?,
        }
        .max(1);
        let min_seconds = match field("min_seconds") {
            None if input.is_object() => 1.0,
            None => 0.0,
            Some(v) => v.as_f64().filter(|s| s.is_finite()).ok_or_else(|| {
                Error::new(
                    ErrorKind::Argument,
                    format!("`min_seconds` must be a number, not `{v}`"),
                )
            })?,
        };
        let mut timings = Vec::new();
        let mut elapsed = 0.0;
        loop {
            let start = Instant::now();
            let out = self.run(kind, &args)?;
            let t = start.elapsed();
            timings.push(t.as_nanos());
            elapsed += t.as_secs_f64();
            if timings.len() as u64 >= min_runs && elapsed >= min_seconds {
                return Ok((self.output(out)?, timings));
            }
        }
    }
}

/// A function's result.
enum Outcome {
    Value(Value),
    Gradient(Vec<Value>),
    Jacobian(ba::Coo),
    Dense(Vec<Vec<f64>>),
}

/// The protocol's state: the backend and the defined modules.
pub struct Tool {
    backend: Backend,
    modules: HashMap<String, Module>,
}

impl Tool {
    /// A tool with no module defined yet.
    pub fn new(backend: Backend) -> Tool {
        Tool {
            backend,
            modules: HashMap::new(),
        }
    }

    /// The answer to one message (a line of JSON).
    pub fn respond(&mut self, line: &str) -> Json {
        let msg: Json = match serde_json::from_str(line) {
            Ok(m) => m,
            Err(e) => {
                return json!({"id": null, "success": false,
                              "error": format!("the message is not JSON: {e}")});
            }
        };
        let id = msg.get("id").cloned().unwrap_or(Json::Null);
        let text = |name: &str| msg.get(name).and_then(|v| v.as_str());
        let fail = |id: Json, e: String| json!({"id": id, "success": false, "error": e});
        match text("kind") {
            Some("start") => json!({
                "id": id,
                "tool": "chad",
                "config": {"backend": self.backend.name()},
            }),
            Some("define") => {
                let Some(module) = text("module") else {
                    return fail(id, "a define message needs a `module`".into());
                };
                let start = Instant::now();
                match Module::define(module, self.backend) {
                    Ok(m) => {
                        let ns = start.elapsed().as_nanos();
                        let backend = m.backend().name();
                        let per_function = m.function_backends();
                        self.modules.insert(module.to_string(), m);
                        let mut answer = json!({"id": id, "success": true, "backend": backend,
                               "timings": [{"name": "compile", "nanoseconds": ns}]});
                        if !per_function.is_empty() {
                            answer["functions"] = Json::Object(
                                per_function
                                    .into_iter()
                                    .map(|(f, b)| (f.to_string(), json!(b.name())))
                                    .collect(),
                            );
                        }
                        answer
                    }
                    Err(e) => fail(id, e.render(None).trim_end().to_string()),
                }
            }
            Some("evaluate") => {
                let (Some(module), Some(function)) = (text("module"), text("function")) else {
                    return fail(
                        id,
                        "an evaluate message needs `module` and `function`".into(),
                    );
                };
                let Some(m) = self.modules.get(module) else {
                    return fail(
                        id,
                        format!("the module `{module}` has not been defined (send define first)"),
                    );
                };
                let input = msg.get("input").unwrap_or(&Json::Null);
                match m.evaluate(function, input) {
                    Ok((output, timings)) => {
                        let timings: Vec<Json> = timings
                            .into_iter()
                            .map(|ns| json!({"name": "evaluate", "nanoseconds": ns as u64}))
                            .collect();
                        json!({"id": id, "success": true, "output": output, "timings": timings})
                    }
                    Err(e) => fail(id, e.render(None).trim_end().to_string()),
                }
            }
            Some("analysis") => json!({ "id": id }),
            Some(other) => fail(id, format!("unknown message kind `{other}`")),
            None => fail(id, "the message has no `kind`".into()),
        }
    }
}

/// Runs the protocol on `input` until it ends, answering on `output`.
pub fn serve(backend: Backend, input: impl BufRead, mut output: impl Write) -> Result<()> {
    let io = |e: std::io::Error| Error::new(ErrorKind::Input, format!("gradbench I/O: {e}"));
    let mut tool = Tool::new(backend);
    for line in input.lines() {
        let line = line.map_err(io)?;
        if line.trim().is_empty() {
            continue;
        }
        let answer = tool.respond(&line);
        writeln!(output, "{answer}").map_err(io)?;
        output.flush().map_err(io)?;
    }
    Ok(())
}
