//! The `chad` command line: a thin layer over the library (see LANGUAGE.md for the contract).
//!
//! Exit status: 0 on success, 1 for program errors (syntax, type, argument, runtime, input),
//! 2 for command-line usage errors (from `clap`).
//!
//! The binary (`src/main.rs`) is [`main`] under a counting allocator. [`run_args`] runs one
//! command line in process and returns its exit status and output, exactly as the binary would
//! print them: the fuzz harnesses ([`crate::internals::fuzz`], `fuzz/`) drive the whole command line through
//! it, without a process per input.

use crate::Function;
use crate::ad::{self, TypeMaps};
use crate::bench::Bench;
use crate::ccc;
use crate::error::{Error, ErrorKind, Result, Source};
use crate::optimize::optimize;
use crate::simplify::simplify;
use crate::source::{self, term::Entry, term::Program};
use crate::value::Value;
use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

#[path = "cli/nested_cmd.rs"]
mod nested_cmd;
use std::process::ExitCode;
use std::rc::Rc;

#[derive(Parser)]
#[command(
    name = "chad",
    version,
    about = "Combinatory Homomorphic Automatic Differentiation for a typed higher-order language"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// The most memory a run may hold (heap and stack), e.g. `512M`, `4G`; past it the run
    /// stops with a runtime error. Default: 4 GiB, or less if the machine has less than 8 GiB
    /// or the address space is limited (`ulimit -v`).
    #[arg(long, global = true, value_name = "SIZE", value_parser = crate::budget::parse_size)]
    max_memory: Option<usize>,
}

#[derive(Subcommand)]
enum Command {
    /// Parse and type-check a program; print each definition with its type.
    Check {
        /// The program.
        file: PathBuf,
        /// Print `{"defs": {"name": "type", ...}}`.
        #[arg(long)]
        json: bool,
        /// Also test every custom derivative clause (`with jvp`, `with vjp`) against finite
        /// differences and the dot-product test at random points; fail naming those that
        /// disagree.
        #[arg(long)]
        derivatives: bool,
    },
    /// Evaluate a definition applied to arguments.
    Eval {
        #[command(flatten)]
        run: RunArgs,
        /// Which evaluator: the optimised program on the execution engine (default), the
        /// compiled combinators, or the direct term evaluator.
        #[arg(long, value_enum, default_value_t = Engine::Optimized)]
        engine: Engine,
        #[command(flatten)]
        native: NativeArgs,
        /// Print `{"value": V}`.
        #[arg(long)]
        json: bool,
    },
    /// Reverse-mode gradient of a Real-valued definition with respect to every argument.
    Grad {
        #[command(flatten)]
        run: RunArgs,
        #[command(flatten)]
        wrt: WrtArgs,
        /// Which reverse mode: reverse CHAD (default), or dual-numbers reverse AD at run time.
        #[arg(long, value_enum, default_value_t = GradEngine::Chad)]
        engine: GradEngine,
        /// With `--engine dual`: run the backpropagators naively (exponential under sharing;
        /// for demonstrations).
        #[arg(long, hide = true, requires = "engine")]
        naive: bool,
        /// How reverse CHAD's derivative is made: by the reverse functor (default), or as the
        /// transpose of the forward derivative (linearize, unzip, transpose).
        #[arg(long, value_enum, default_value_t = Via::Reverse)]
        via: Via,
        #[command(flatten)]
        native: NativeArgs,
        /// Print `{"value": V, "gradient": [G1, ...]}`.
        #[arg(long)]
        json: bool,
    },
    /// Forward mode: the value and the directional derivative along the given tangents.
    Jvp {
        #[command(flatten)]
        run: RunArgs,
        #[command(flatten)]
        wrt: WrtArgs,
        /// A tangent per argument (per selected argument with `--wrt`), in literal syntax (`()`
        /// for Int, Bool and Unit arguments).
        #[arg(
            long = "tangent",
            value_name = "T",
            allow_hyphen_values = true,
            conflicts_with = "tangents_file"
        )]
        tangents: Vec<String>,
        /// Read the tangents as a JSON array instead.
        #[arg(long, value_name = "PATH")]
        tangents_file: Option<PathBuf>,
        #[command(flatten)]
        native: NativeArgs,
        /// Print `{"value": V, "tangent": T}`.
        #[arg(long)]
        json: bool,
    },
    /// Reverse mode: the value and the cotangent of every argument for an output cotangent.
    Vjp {
        #[command(flatten)]
        run: RunArgs,
        #[command(flatten)]
        wrt: WrtArgs,
        /// The cotangent of the result, in literal syntax.
        #[arg(long, value_name = "C", allow_hyphen_values = true)]
        cotangent: String,
        /// How the reverse derivative is made: by the reverse functor (default), or as the
        /// transpose of the forward derivative (linearize, unzip, transpose).
        #[arg(long, value_enum, default_value_t = Via::Reverse)]
        via: Via,
        #[command(flatten)]
        native: NativeArgs,
        /// Print `{"value": V, "gradient": [G1, ...]}`.
        #[arg(long)]
        json: bool,
    },
    /// Hessian of a Real-valued definition (forward over reverse, one Hessian-vector product
    /// per row), over the Real components of the (selected) arguments.
    Hessian {
        #[command(flatten)]
        run: RunArgs,
        #[command(flatten)]
        wrt: WrtArgs,
        #[command(flatten)]
        native: NativeArgs,
        /// Print `{"value": V, "gradient": [..], "hessian": [[..], ..]}`.
        #[arg(long)]
        json: bool,
    },
    /// Hessian-vector product of a Real-valued definition (forward over reverse).
    Hvp {
        #[command(flatten)]
        run: RunArgs,
        #[command(flatten)]
        wrt: WrtArgs,
        /// A tangent per argument (per selected argument with `--wrt`), in literal syntax.
        #[arg(long = "tangent", value_name = "T", allow_hyphen_values = true)]
        tangents: Vec<String>,
        #[command(flatten)]
        native: NativeArgs,
        /// Print `{"value": V, "gradient": [G1, ..], "hvp": [H1, ..]}`.
        #[arg(long)]
        json: bool,
    },
    /// Full Jacobian of a first-order definition: rows the flattened result, columns the
    /// flattened (selected) arguments.
    Jacobian {
        #[command(flatten)]
        run: RunArgs,
        #[command(flatten)]
        wrt: WrtArgs,
        /// Forward (one JVP per column) or reverse (one VJP per row); by default the one
        /// with fewer runs.
        #[arg(long, value_enum)]
        mode: Option<nested_cmd::JacobianMode>,
        #[command(flatten)]
        native: NativeArgs,
        /// Print `{"value": V, "jacobian": [[..], ..]}`.
        #[arg(long)]
        json: bool,
    },
    /// Time the primal, forward mode and reverse mode of a definition at the given arguments.
    ///
    /// Each phase runs on the execution engine: the primal is the optimised source program
    /// (simplified, helper functions inlined), forward and reverse mode its derivatives;
    /// forward mode runs one JVP along a fixed pseudo-random tangent, reverse mode one VJP of a
    /// fixed pseudo-random cotangent (1 for a Real result: the gradient). Beside them, the
    /// baseline: dual-numbers reverse AD (run-time taping) of the optimised program with the same
    /// cotangent. Times are medians of `--repeat` interleaved rounds after a warm-up.
    Bench {
        #[command(flatten)]
        run: RunArgs,
        /// How many timed rounds (each runs every phase once).
        #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
        repeat: u64,
        /// Print `{"primal_s": .., "forward_s": .., "reverse_s": .., "forward_over_primal": ..,
        /// "reverse_over_primal": .., "compile_s": .., "dual_reverse_s": ..,
        /// "dual_over_reverse": ..}`.
        #[arg(long)]
        json: bool,
        /// Leave out the dual-numbers baseline (it interprets the program, so on big inputs it
        /// takes many times longer than the other phases together).
        #[arg(long)]
        no_dual: bool,
        /// Where the phases run: the execution engine, or native code compiled by rustc
        /// (adds `"backend": "native"` and `"rustc_s"` to the JSON; no dual baseline).
        #[arg(long, value_enum, default_value_t = Backend::Engine)]
        backend: Backend,
        /// Print where native code is cached.
        #[arg(long)]
        verbose: bool,
    },
    /// Write Rust source of the definitions' primal and derivatives (safe Rust, std only).
    EmitRust {
        /// The program.
        file: PathBuf,
        /// Only this definition (default: every definition with first-order parameters and
        /// result).
        #[arg(long)]
        def: Option<String>,
        /// Write to this file instead of standard output.
        #[arg(short, long, value_name = "OUT.rs")]
        output: Option<PathBuf>,
    },
    /// Act as a GradBench tool: speak the GradBench protocol (JSON lines) on standard input and
    /// output, with chad programs for the evals hello, lse, llsq, gmm and ode built in.
    Gradbench {
        /// Where the functions run: the execution engine, or native code compiled by rustc.
        #[arg(long, value_enum, default_value_t = Backend::Engine)]
        backend: Backend,
    },
    /// Print a definition at a stage of the pipeline.
    Show {
        /// The program.
        file: PathBuf,
        /// The definition (default: the last one).
        #[arg(long)]
        def: Option<String>,
        /// Which stage to print.
        #[arg(long, value_enum)]
        stage: Stage,
        /// Line width for printing.
        #[arg(long, default_value_t = 100)]
        width: usize,
        #[command(flatten)]
        wrt: WrtArgs,
        /// Show derivative code exactly as the AD functors produce it from the program as
        /// written, without simplification. (By default, derivative code is that of the
        /// optimised program, simplified, as `grad`, `jvp`, `vjp` and `bench` run it.)
        #[arg(long)]
        no_simplify: bool,
    },
}

#[derive(Args)]
struct WrtArgs {
    /// Differentiate with respect to these parameters only (comma-separated names); the others
    /// are constants: no tangent is given for them, and their gradient is `null` in JSON and
    /// left out of the text output.
    #[arg(long, value_name = "NAME,...", value_delimiter = ',')]
    wrt: Vec<String>,
}

impl WrtArgs {
    /// One flag per parameter of `entry`: whether it is differentiated (all without `--wrt`).
    fn selection(&self, entry: &Entry) -> Result<Vec<bool>> {
        if self.wrt.is_empty() {
            Ok(vec![true; entry.params.len()])
        } else {
            ad::select(entry, &self.wrt)
        }
    }
}

#[derive(Args)]
struct RunArgs {
    /// The program.
    file: PathBuf,
    /// The definition to run (default: the last one).
    #[arg(long)]
    def: Option<String>,
    /// An argument value in literal syntax (repeat once per parameter).
    #[arg(
        long = "arg",
        value_name = "V",
        allow_hyphen_values = true,
        conflicts_with = "args_file"
    )]
    args: Vec<String>,
    /// Read the arguments as a JSON array instead.
    #[arg(long, value_name = "PATH")]
    args_file: Option<PathBuf>,
    /// Stop with a runtime error when loops (`loop`, `fold`, `scan`, `iterate`, `while`) and recursive
    /// calls (`def rec`) run more than N steps in total.
    #[arg(long, value_name = "N")]
    max_steps: Option<u64>,
}

/// Where `eval`, `grad`, `jvp` and `vjp` run.
#[derive(clap::Args, Clone, Copy)]
struct NativeArgs {
    /// Where the computation runs: the interpreters (default), or native code (the IR compiled
    /// to Rust, built by rustc and cached by content hash, loaded in process).
    #[arg(long, value_enum, default_value_t = Backend::Engine)]
    backend: Backend,
    /// With `--backend native`: print the cache folder, whether the library was cached and
    /// the build time, on standard error.
    #[arg(long)]
    verbose: bool,
}

#[derive(Clone, Copy, PartialEq, ValueEnum)]
enum Backend {
    /// The execution engine (interpreted, compiled in milliseconds).
    Engine,
    /// Native code: the IR compiled to Rust, built by rustc (cached), loaded in process.
    Native,
}

#[derive(Clone, Copy, ValueEnum)]
enum Stage {
    /// The type-checked program (with its dependencies), in surface syntax.
    Source,
    /// The combinator of the free cartesian closed category.
    Ccc,
    /// Forward-mode CHAD: primal and derivative (a linear map of tangents).
    Forward,
    /// Reverse-mode CHAD: primal and transposed derivative (a linear map of cotangents).
    Reverse,
    /// Reverse mode the other way: forward CHAD's derivative, simplified and transposed
    /// (`grad --via transpose`; always simplified).
    Transposed,
    /// The execution IR: the primal, forward and reverse code lowered to loops and
    /// accumulators (what the native backend compiles).
    Ir,
}

#[derive(Clone, Copy, ValueEnum)]
enum Engine {
    /// The optimised program on the execution engine (as `bench` runs the primal).
    Optimized,
    /// Compile to combinators and evaluate through `interpret`.
    Ccc,
    /// Walk the typed source term.
    Direct,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Via {
    /// Reverse CHAD: the reverse functor `Σ_C L^op`.
    Reverse,
    /// The transpose of forward CHAD's derivative (YOLO: linearize, unzip, transpose).
    Transpose,
}

/// `--via transpose` is for the execution engine: the native backend compiles reverse CHAD.
fn native_via(native: NativeArgs, via: Via) -> CliResult<()> {
    if via == Via::Transpose && native.backend == Backend::Native {
        return Err(Error::new(
            ErrorKind::Argument,
            "--via transpose runs on the execution engine; --backend native compiles reverse \
             CHAD's derivative (use one or the other)",
        )
        .into());
    }
    Ok(())
}

/// Where `hessian`, `hvp` and `jacobian` compile and run their derivative code.
fn nested_backend<'a>(
    native: NativeArgs,
    src: &'a Source,
) -> Box<dyn crate::ad::nested::Backend + 'a> {
    match native.backend {
        Backend::Engine => Box::new(crate::ad::nested::Engine),
        Backend::Native => Box::new(crate::native::NativeBackend {
            source: Some(src),
            verbose: native.verbose,
        }),
    }
}

/// The library's function for `function` with the command's settings: the parameters `wrt`
/// selects, where it runs and how reverse mode is made.
fn configure(function: &Function, wrt: &[bool], native: NativeArgs, via: Via) -> Function {
    function
        .with_selection(wrt.to_vec())
        .backend(match native.backend {
            Backend::Engine => crate::Backend::Engine,
            Backend::Native => crate::Backend::Native,
        })
        .via(match via {
            Via::Reverse => crate::Via::Reverse,
            Via::Transpose => crate::Via::Transpose,
        })
        .verbose(native.verbose)
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum GradEngine {
    /// Reverse CHAD: the derivative program, simplified, on the execution engine.
    Chad,
    /// Dual-numbers reverse AD (Smeding & Vákár 2023) on the program as written, at run time.
    Dual,
}

/// A failure and the source it refers to, for rendering.
struct Failure {
    error: Error,
    source: Option<Source>,
}

impl From<Error> for Failure {
    fn from(error: Error) -> Failure {
        Failure {
            error,
            source: None,
        }
    }
}

type CliResult<T> = std::result::Result<T, Failure>;

thread_local! {
    /// The program and definition being worked on, to place an error that stops a run from
    /// anywhere (out of stack or memory: `crate::deep::Exhausted`).
    static PLACE: std::cell::RefCell<Option<(Source, crate::Span)>> =
        const { std::cell::RefCell::new(None) };
}

/// Records the definition being worked on (see [`PLACE`]): the span of its name.
fn working_on(src: &Source, prog: &Program, index: usize) {
    let d = &prog.defs[index];
    let start = d.span.start as usize;
    let text = &src.text[start.min(src.text.len())..];
    let name = d.name();
    let at = text
        .find(name)
        .filter(|&k| k < 64)
        .map_or(crate::Span::new(start, start), |k| {
            crate::Span::new(start + k, start + k + name.len())
        });
    PLACE.with(|p| *p.borrow_mut() = Some((src.clone(), at)));
}

/// The `chad` binary: parses `std::env::args` (a usage error exits with status 2, as `clap`
/// does), runs the command and prints its output or error.
pub fn main() -> ExitCode {
    crate::budget::note_counting();
    let cli = Cli::parse();
    use std::io::Write;
    match execute(cli) {
        Ok(out) => {
            // A closed pipe (`chad show ... | head`) is not an error worth a panic.
            let mut stdout = std::io::stdout().lock();
            let _ = stdout
                .write_all(out.as_bytes())
                .and_then(|()| stdout.flush());
            ExitCode::SUCCESS
        }
        Err(f) => {
            let _ = std::io::stderr().write_all(f.error.render(f.source.as_ref()).as_bytes());
            ExitCode::from(1)
        }
    }
}

/// What one command line printed and its exit status (see [`run_args`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// 0 success, 1 program error, 2 usage error.
    pub status: i32,
    /// What the command printed on standard output.
    pub stdout: String,
    /// What it printed on standard error (a rendered error with its source snippet).
    pub stderr: String,
}

/// Runs one command line in process (`args` without the program name, e.g.
/// `["grad", "f.chad", "--arg", "2"]`) and returns what the binary would print and its exit
/// status. `--max-memory` applies for the rest of the process, as in the binary; the standard
/// input is the process's (only `chad gradbench` reads it).
pub fn run_args<I, S>(args: I) -> Outcome
where
    I: IntoIterator<Item = S>,
    S: Into<std::ffi::OsString> + Clone,
{
    let argv =
        std::iter::once(std::ffi::OsString::from("chad")).chain(args.into_iter().map(Into::into));
    match Cli::try_parse_from(argv) {
        Err(e) => {
            let text = e.render().to_string();
            let status = e.exit_code();
            if status == 0 {
                Outcome {
                    status,
                    stdout: text,
                    stderr: String::new(),
                }
            } else {
                Outcome {
                    status,
                    stdout: String::new(),
                    stderr: text,
                }
            }
        }
        Ok(cli) => match execute(cli) {
            Ok(stdout) => Outcome {
                status: 0,
                stdout,
                stderr: String::new(),
            },
            Err(f) => Outcome {
                status: 1,
                stdout: String::new(),
                stderr: f.error.render(f.source.as_ref()),
            },
        },
    }
}

/// Runs a parsed command line: the memory limit, then the command under
/// [`crate::deep::catch_exhausted`], so that running out of stack or memory anywhere becomes
/// an error placed at the definition being worked on.
fn execute(cli: Cli) -> CliResult<String> {
    if let Some(bytes) = cli.max_memory {
        crate::budget::set_limit(bytes);
    }
    // A testing knob: small stack segments make recursion that does not grow the stack
    // overflow early (tests/reliability.rs).
    let small_stacks = std::env::var("CHAD_STACK_KIB")
        .ok()
        .and_then(|k| k.parse::<usize>().ok());
    PLACE.with(|p| *p.borrow_mut() = None);
    crate::deep::catch_exhausted(|| match small_stacks {
        Some(kib) => {
            crate::deep::set_segment_size(kib * 1024);
            crate::deep::on_fresh_segment(|| run(cli))
        }
        None => run(cli),
    })
    .unwrap_or_else(|why| {
        let place = PLACE.with(|p| p.borrow_mut().take());
        let error = why.error();
        Err(match place {
            Some((src, at)) => Failure {
                error: error
                    .with_span(at)
                    .with_label("while running this definition"),
                source: Some(src),
            },
            None => Failure {
                error,
                source: None,
            },
        })
    })
}

fn read_source(path: &PathBuf) -> CliResult<Source> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        Error::new(
            ErrorKind::Input,
            format!("cannot read `{}`: {e}", path.display()),
        )
    })?;
    Ok(Source::new(path.display().to_string(), text))
}

/// Reads and checks a program: its source, the library's program, and its typed terms.
fn load(path: &PathBuf) -> CliResult<(Source, crate::Program, Rc<Program>)> {
    let src = read_source(path)?;
    let program = with_source(crate::Program::from_source(src.clone()), &src)?;
    let terms = with_source(program.terms(), &src)?;
    Ok((src, program, terms))
}

fn select(src: &Source, prog: &Program, def: Option<&str>) -> Result<usize> {
    let names = || {
        prog.defs
            .iter()
            .map(|d| d.name().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    match def {
        Some(name)
            if prog.find(name).is_none() && prog.templates.iter().any(|t| *t.name == *name) =>
        {
            Err(crate::api::template_error(name))
        }
        Some(name) => prog.find(name).ok_or_else(|| {
            Error::new(
                ErrorKind::Input,
                format!("no definition named `{name}` in {}", src.name),
            )
            .with_note(format!("definitions: {}", names()))
        }),
        None if prog.defs.is_empty() => Err(Error::new(
            ErrorKind::Input,
            format!("{} has no definitions", src.name),
        )),
        None => Ok(prog.defs.len() - 1),
    }
}

/// Reads the arguments for an entry point from `--arg` texts or an `--args-file`.
/// (Every command that runs a program reads its arguments here, so this is also where the
/// step budget of `--max-steps` is set.)
fn arguments(run: &RunArgs, types: &[crate::types::Type]) -> CliResult<Vec<Value>> {
    crate::steps::set_max_steps(run.max_steps);
    values(&run.args, run.args_file.as_ref(), types, "argument")
}

/// Reads one value per type from literal texts or a JSON file holding an array; `what` names
/// them in errors ("argument", "tangent").
fn values(
    texts: &[String],
    file: Option<&PathBuf>,
    types: &[crate::types::Type],
    what: &str,
) -> CliResult<Vec<Value>> {
    if let Some(path) = file {
        let text = std::fs::read_to_string(path).map_err(|e| {
            Error::new(
                ErrorKind::Input,
                format!("cannot read `{}`: {e}", path.display()),
            )
        })?;
        let json: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
            Error::new(
                ErrorKind::Argument,
                format!("`{}` is not valid JSON: {e}", path.display()),
            )
        })?;
        let items = json.as_array().ok_or_else(|| {
            Error::new(
                ErrorKind::Argument,
                format!("`{}` must hold a JSON array of {what}s", path.display()),
            )
        })?;
        if items.len() != types.len() {
            return Err(count_error(types.len(), items.len(), what).into());
        }
        return items
            .iter()
            .zip(types)
            .enumerate()
            .map(|(k, (j, t))| {
                Value::from_json(j, t)
                    .map_err(|e| e.prefixed(&format!("{what} {}: ", k + 1)).into())
            })
            .collect();
    }
    if texts.len() != types.len() {
        return Err(count_error(types.len(), texts.len(), what).into());
    }
    texts
        .iter()
        .zip(types)
        .enumerate()
        .map(|(k, (text, t))| literal(text, t, &format!("{what} {}", k + 1)))
        .collect()
}

/// Parses one value in literal syntax; `name` says which (for errors).
fn literal(text: &str, ty: &crate::types::Type, name: &str) -> CliResult<Value> {
    source::parse_value(text, ty).map_err(|error| Failure {
        error: error.prefixed(&format!("{name}: ")),
        source: Some(Source::new(name.to_string(), text.to_string())),
    })
}

fn count_error(expected: usize, given: usize, what: &str) -> Error {
    if what == "argument" {
        return Error::new(
            ErrorKind::Argument,
            format!(
                "the definition takes {expected} argument{}, but {given} {} given",
                if expected == 1 { "" } else { "s" },
                if given == 1 { "was" } else { "were" }
            ),
        );
    }
    Error::new(
        ErrorKind::Argument,
        format!(
            "the definition takes {expected} argument{} and so needs {expected} {what}{}, but \
             {given} {} given",
            if expected == 1 { "" } else { "s" },
            if expected == 1 { "" } else { "s" },
            if given == 1 { "was" } else { "were" }
        ),
    )
}

/// The tangent types of an entry's parameters (they are first-order: AD checked that).
fn tangent_types(entry: &Entry) -> Vec<crate::types::Type> {
    entry
        .params
        .iter()
        .map(|p| p.ty.tangent().unwrap_or(crate::types::Type::Unit))
        .collect()
}

/// The tangent types of the parameters `sel` selects (`--wrt`), in order.
fn selected_tangent_types(entry: &Entry, sel: &[bool]) -> Vec<crate::types::Type> {
    tangent_types(entry)
        .into_iter()
        .zip(sel)
        .filter(|(_, s)| **s)
        .map(|(t, _)| t)
        .collect()
}

/// Loads the program and selects the entry point (as the library's function and as a term)
/// and its arguments.
fn prepare(run: &RunArgs) -> CliResult<(Source, Function, Entry, Vec<Value>)> {
    let (src, program, prog) = load(&run.file)?;
    let index = with_source(select(&src, &prog, run.def.as_deref()), &src)?;
    working_on(&src, &prog, index);
    let function = with_source(program.function_at(index), &src)?;
    let entry = prog.entry(index);
    let args = arguments(run, &entry.param_types())?;
    with_source(crate::eval::check_args(&entry, &args), &src)?;
    Ok((src, function, entry, args))
}

/// `value` and the gradients of the selected parameters (one each, in order), as text or
/// JSON (`null` for the others).
fn gradient_output(
    entry: &Entry,
    value: &Value,
    grads: &[Value],
    wrt: &[bool],
    json: bool,
) -> String {
    if json {
        let mut given = grads.iter();
        let gs: Vec<serde_json::Value> = wrt
            .iter()
            .map(|&s| match s.then(|| given.next()).flatten() {
                Some(g) => g.to_json(),
                None => serde_json::Value::Null,
            })
            .collect();
        return format!(
            "{}\n",
            serde_json::json!({ "value": value.to_json(), "gradient": gs })
        );
    }
    let mut out = format!("value: {value}\ngradient:\n");
    let selected = entry.params.iter().zip(wrt).filter(|(_, s)| **s);
    for ((p, _), g) in selected.zip(grads) {
        out.push_str(&format!("  {} = {g}\n", p.name));
    }
    out
}

/// A `chad bench` report as a table (or JSON).
fn bench_output(r: &crate::bench::Report, repeat: u64, json: bool) -> String {
    if json {
        return format!("{}\n", r.to_json());
    }
    let mut out = format!("{:<8} {:>14} {:>10}\n", "phase", "median (s)", "/ primal");
    for (phase, t) in [
        ("primal", Some(r.primal_s)),
        ("forward", Some(r.forward_s)),
        ("reverse", Some(r.reverse_s)),
        ("dual", r.dual_reverse_s),
    ]
    .into_iter()
    .filter_map(|(p, t)| Some((p, t?)))
    {
        out.push_str(&format!("{phase:<8} {t:>14.6e} {:>10.2}\n", t / r.primal_s));
    }
    out.push_str(&format!(
        "compile: {:.6e} s (primal, forward and reverse code{}); medians of {repeat} run{}\n",
        r.compile_s,
        match r.rustc_s {
            Some(t) if t > 0.0 => "; native, rustc included".to_string(),
            Some(_) => "; native, loaded from the cache".to_string(),
            None => String::new(),
        },
        if repeat == 1 { "" } else { "s" }
    ));
    out
}

/// A derivative morphism printed like the `ccc` stage: its name and type, then the term.
fn show_mor(
    name: &str,
    m: &crate::ad::Mor,
    image: crate::target::types::Ty,
    width: usize,
) -> String {
    let x_ty = &m.x.ty;
    format!(
        "{name} : {x_ty} → {image}\n{name} =\n  {}\n",
        crate::target::print::lambda_to_string(&m.x, &m.body, width.saturating_sub(2))
            .replace('\n', "\n  ")
    )
}

fn with_source<T>(r: Result<T>, src: &Source) -> CliResult<T> {
    r.map_err(|error| Failure {
        error,
        source: Some(src.clone()),
    })
}

fn run(cli: Cli) -> CliResult<String> {
    match cli.command {
        Command::Gradbench { backend } => {
            let backend = match backend {
                Backend::Engine => crate::gradbench::Backend::Engine,
                Backend::Native => crate::gradbench::Backend::Native,
            };
            crate::gradbench::serve(backend, std::io::stdin().lock(), std::io::stdout().lock())?;
            Ok(String::new())
        }
        Command::Check {
            file,
            json,
            derivatives,
        } => {
            let (src, _, prog) = load(&file)?;
            if derivatives {
                let found = with_source(crate::ad::clauses::check_clauses(&prog, 20, 1), &src)?;
                if let Some(error) = crate::ad::clauses::disagreement_error(&found) {
                    return Err(Failure {
                        error,
                        source: Some(src),
                    });
                }
            }
            // Definitions and templates (definitions specialised at each call), in source order.
            let mut signatures: Vec<(String, String)> = Vec::new();
            let mut templates = prog.templates.iter().peekable();
            for (i, d) in prog.defs.iter().enumerate() {
                while let Some(t) = templates.next_if(|t| t.position == i) {
                    signatures.push((t.name.to_string(), t.ty.to_string()));
                }
                signatures.push((d.name().to_string(), d.var.ty.to_string()));
            }
            signatures.extend(templates.map(|t| (t.name.to_string(), t.ty.to_string())));
            if json {
                let defs: serde_json::Map<String, serde_json::Value> = signatures
                    .into_iter()
                    .map(|(name, ty)| (name, ty.into()))
                    .collect();
                Ok(format!("{}\n", serde_json::json!({ "defs": defs })))
            } else {
                Ok(signatures
                    .iter()
                    .map(|(name, ty)| format!("{name} : {ty}\n"))
                    .collect())
            }
        }
        Command::Eval {
            run,
            engine,
            native,
            json,
        } => {
            let (src, function, entry, args) = prepare(&run)?;
            let value = with_source(
                match engine {
                    _ if native.backend == Backend::Native => {
                        let all = vec![true; entry.params.len()];
                        configure(&function, &all, native, Via::Reverse).eval(&args)
                    }
                    Engine::Optimized => function.eval(&args),
                    Engine::Ccc => {
                        let comb = ccc::compile_entry(&entry);
                        ccc::eval::run(&comb, &ccc::eval::context_value(&args))
                    }
                    Engine::Direct => crate::eval::eval_entry(&entry, &args),
                },
                &src,
            )?;
            if json {
                Ok(format!(
                    "{}\n",
                    serde_json::json!({ "value": value.to_json() })
                ))
            } else {
                Ok(format!("{value}\n"))
            }
        }
        Command::Grad {
            run,
            wrt,
            engine: GradEngine::Dual,
            naive,
            via,
            native,
            json,
        } => {
            if via == Via::Transpose {
                return Err(Error::new(
                    ErrorKind::Argument,
                    "--via transpose makes reverse CHAD's derivative; it does not apply to \
                     --engine dual",
                )
                .into());
            }
            if native.backend == Backend::Native {
                return Err(Error::new(
                    ErrorKind::Argument,
                    "--engine dual runs in its own run-time evaluator; it has no --backend native",
                )
                .into());
            }
            let (src, _, entry, args) = prepare(&run)?;
            let sel = wrt.selection(&entry)?;
            with_source(ad::check_real_valued(&entry), &src)?;
            let options = crate::dual_reverse::Options {
                naive,
                ..Default::default()
            };
            let out = with_source(
                crate::dual_reverse::DualReverse::new(&ad::with_respect_to(&entry, &sel), options)
                    .and_then(|d| d.grad(&args)),
                &src,
            )?;
            let grads: Vec<Value> = out
                .gradient
                .into_iter()
                .zip(&sel)
                .filter_map(|(g, &s)| s.then_some(g))
                .collect();
            Ok(gradient_output(&entry, &out.value, &grads, &sel, json))
        }
        Command::Grad {
            run,
            wrt,
            naive,
            via,
            native,
            json,
            ..
        } => {
            if naive {
                return Err(Error::new(ErrorKind::Argument, "--naive needs --engine dual").into());
            }
            native_via(native, via)?;
            let (src, function, entry, args) = prepare(&run)?;
            let sel = wrt.selection(&entry)?;
            with_source(ad::check_real_valued(&entry), &src)?;
            let function = configure(&function, &sel, native, via);
            let (value, grads) = with_source(function.value_and_grad(&args), &src)?;
            Ok(gradient_output(&entry, &value, &grads, &sel, json))
        }
        Command::Jvp {
            run,
            wrt,
            tangents,
            tangents_file,
            native,
            json,
        } => {
            let (src, function, entry, args) = prepare(&run)?;
            let sel = wrt.selection(&entry)?;
            // Tangents for the selected parameters only (the library makes the others zero).
            let types = selected_tangent_types(&entry, &sel);
            if !wrt.wrt.is_empty() && tangents_file.is_none() && tangents.len() != types.len() {
                let k = types.len();
                return Err(Error::new(
                    ErrorKind::Argument,
                    format!(
                        "--wrt selects {k} parameter{} and so needs {k} tangent{}, but {} {} given",
                        if k == 1 { "" } else { "s" },
                        if k == 1 { "" } else { "s" },
                        tangents.len(),
                        if tangents.len() == 1 { "was" } else { "were" }
                    ),
                )
                .into());
            }
            let given = values(&tangents, tangents_file.as_ref(), &types, "tangent")?;
            let function = configure(&function, &sel, native, Via::Reverse);
            let (value, tangent) = with_source(function.jvp(&args, &given), &src)?;
            if json {
                Ok(format!(
                    "{}\n",
                    serde_json::json!({ "value": value.to_json(), "tangent": tangent.to_json() })
                ))
            } else {
                Ok(format!("value: {value}\ntangent: {tangent}\n"))
            }
        }
        Command::Vjp {
            run,
            wrt,
            cotangent,
            via,
            native,
            json,
        } => {
            native_via(native, via)?;
            let (src, function, entry, args) = prepare(&run)?;
            let sel = wrt.selection(&entry)?;
            let ct_ty = entry.body.ty.tangent().unwrap_or(crate::types::Type::Unit);
            let ct = literal(&cotangent, &ct_ty, "cotangent")?;
            let function = configure(&function, &sel, native, via);
            let (value, grads) = with_source(function.vjp(&args, &ct), &src)?;
            Ok(gradient_output(&entry, &value, &grads, &sel, json))
        }
        Command::Hessian {
            run,
            wrt,
            native,
            json,
        } => {
            let (src, _, entry, args) = prepare(&run)?;
            let sel = wrt.selection(&entry)?;
            let backend = nested_backend(native, &src);
            with_source(
                nested_cmd::hessian(&optimize(&entry), &sel, &args, &*backend, json),
                &src,
            )
        }
        Command::Hvp {
            run,
            wrt,
            tangents,
            native,
            json,
        } => {
            let (src, _, entry, args) = prepare(&run)?;
            let sel = wrt.selection(&entry)?;
            let types = selected_tangent_types(&entry, &sel);
            let ts = values(&tangents, None, &types, "tangent")?;
            let backend = nested_backend(native, &src);
            with_source(
                nested_cmd::hvp(&optimize(&entry), &sel, &args, &ts, &*backend, json),
                &src,
            )
        }
        Command::Jacobian {
            run,
            wrt,
            mode,
            native,
            json,
        } => {
            let (src, _, entry, args) = prepare(&run)?;
            let sel = wrt.selection(&entry)?;
            let backend = nested_backend(native, &src);
            with_source(
                nested_cmd::jacobian(&optimize(&entry), &sel, &args, mode, &*backend, json),
                &src,
            )
        }
        Command::Bench {
            run,
            repeat,
            json,
            no_dual,
            backend,
            verbose,
        } => {
            let (src, _, entry, args) = prepare(&run)?;
            let report = if backend == Backend::Native {
                let bench =
                    with_source(crate::bench::NativeBench::new(&entry, args, verbose), &src)?;
                with_source(bench.measure(repeat as usize), &src)?
            } else {
                let bench = with_source(Bench::new(&entry, args), &src)?;
                with_source(bench.measure_with(repeat as usize, !no_dual), &src)?
            };
            Ok(bench_output(&report, repeat, json))
        }
        Command::EmitRust { file, def, output } => {
            let (src, _, prog) = load(&file)?;
            let indices: Vec<usize> = match def {
                Some(name) => vec![with_source(select(&src, &prog, Some(&name)), &src)?],
                None => (0..prog.defs.len())
                    .filter(|&i| {
                        let e = prog.entry(i);
                        e.params.iter().all(|p| p.ty.is_first_order()) && e.body.ty.is_first_order()
                    })
                    .collect(),
            };
            let text = with_source(crate::native::emit_rust(&prog, &indices, &src), &src)?;
            match output {
                Some(path) => {
                    std::fs::write(&path, text).map_err(|e| {
                        Error::new(
                            ErrorKind::Input,
                            format!("cannot write `{}`: {e}", path.display()),
                        )
                    })?;
                    Ok(String::new())
                }
                None => Ok(text),
            }
        }
        Command::Show {
            file,
            def,
            stage,
            width,
            wrt,
            no_simplify,
        } => {
            let (src, _, prog) = load(&file)?;
            let index = with_source(select(&src, &prog, def.as_deref()), &src)?;
            working_on(&src, &prog, index);
            match stage {
                Stage::Ir => {
                    let entry = prog.entry(index);
                    let parts = crate::ir::compile::Parts {
                        jvp: true,
                        vjp: true,
                        required: false,
                    };
                    let m = with_source(crate::ir::compile::Module::new(&[entry], parts), &src)?;
                    Ok(m.program.to_string())
                }
                Stage::Source => {
                    let mut which = prog.dependencies(index);
                    which.push(index);
                    Ok(source::print::defs_to_string(&prog, &which, width))
                }
                Stage::Ccc => {
                    let entry = prog.entry(index);
                    let comb = ccc::compile_entry(&entry);
                    Ok(format!(
                        "{} : {} → {}\n{} =\n  {}\n",
                        entry.name,
                        comb.dom,
                        comb.cod,
                        entry.name,
                        ccc::print::to_string(&comb, width.saturating_sub(2)).replace('\n', "\n  ")
                    ))
                }
                Stage::Transposed => {
                    let entry = optimize(&prog.entry(index));
                    with_source(ad::check_supported(&entry.body), &src)?;
                    let m = with_source(crate::linearize::transposed_mor(&entry), &src)?;
                    let comb = ccc::compile_entry(&entry);
                    let image = ad::reverse::Reverse::new().image(&comb.dom, &comb.cod);
                    Ok(show_mor(&entry.name, &m, image, width))
                }
                Stage::Forward | Stage::Reverse => {
                    let entry = prog.entry(index);
                    with_source(ad::check_supported(&entry.body), &src)?;
                    // Simplified derivative code is the derivative of the optimised program
                    // (as `grad`, `jvp`, `vjp` and `bench` run it); `--no-simplify` shows the
                    // raw AD of the program as written.
                    let sel = with_source(wrt.selection(&entry), &src)?;
                    let entry = if no_simplify { entry } else { optimize(&entry) };
                    let entry = ad::with_respect_to(&entry, &sel);
                    let comb = ccc::compile_entry(&entry);
                    let (m, image) = if matches!(stage, Stage::Forward) {
                        let maps = ad::forward::Forward::new();
                        (
                            ad::forward::transform(&comb),
                            maps.image(&comb.dom, &comb.cod),
                        )
                    } else {
                        let maps = ad::reverse::Reverse::new();
                        (
                            ad::reverse::transform(&comb),
                            maps.image(&comb.dom, &comb.cod),
                        )
                    };
                    let mut m = with_source(m, &src)?;
                    if !no_simplify {
                        m = m.map_body(simplify);
                    }
                    Ok(show_mor(&entry.name, &m, image, width))
                }
            }
        }
    }
}
