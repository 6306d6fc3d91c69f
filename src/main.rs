//! The `chad` command line: a thin layer over the library (see LANGUAGE.md for the contract).
//!
//! Exit status: 0 on success, 1 for program errors (syntax, type, argument, runtime, input),
//! 2 for command-line usage errors (from `clap`).

use chad::ccc;
use chad::error::{Error, ErrorKind, Result, Source};
use chad::prim::Registry;
use chad::source::{self, term::Program};
use chad::value::Value;
use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "chad",
    version,
    about = "Combinatory Homomorphic Automatic Differentiation for a typed higher-order language"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
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
    },
    /// Evaluate a definition applied to arguments.
    Eval {
        #[command(flatten)]
        run: RunArgs,
        /// Which evaluator: the compiled combinators (default) or the direct term evaluator.
        #[arg(long, value_enum, default_value_t = Engine::Ccc)]
        engine: Engine,
        /// Print `{"value": V}`.
        #[arg(long)]
        json: bool,
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
    },
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
}

#[derive(Clone, Copy, ValueEnum)]
enum Stage {
    /// The type-checked program (with its dependencies), in surface syntax.
    Source,
    /// The combinator of the free cartesian closed category.
    Ccc,
}

#[derive(Clone, Copy, ValueEnum)]
enum Engine {
    /// Compile to combinators and evaluate through `interpret`.
    Ccc,
    /// Walk the typed source term.
    Direct,
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

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(out) => {
            print!("{out}");
            ExitCode::SUCCESS
        }
        Err(f) => {
            eprint!("{}", f.error.render(f.source.as_ref()));
            ExitCode::from(1)
        }
    }
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

fn load(path: &PathBuf) -> CliResult<(Source, Program)> {
    let src = read_source(path)?;
    match source::load(&src.text, &Registry::builtin()) {
        Ok(p) => Ok((src, p)),
        Err(error) => Err(Failure {
            error,
            source: Some(src),
        }),
    }
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
fn arguments(run: &RunArgs, types: &[chad::types::Type]) -> CliResult<Vec<Value>> {
    if let Some(path) = &run.args_file {
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
                format!("`{}` must hold a JSON array of arguments", path.display()),
            )
        })?;
        if items.len() != types.len() {
            return Err(count_error(types.len(), items.len()).into());
        }
        return items
            .iter()
            .zip(types)
            .enumerate()
            .map(|(k, (j, t))| {
                Value::from_json(j, t)
                    .map_err(|e| e.prefixed(&format!("argument {}: ", k + 1)).into())
            })
            .collect();
    }
    if run.args.len() != types.len() {
        return Err(count_error(types.len(), run.args.len()).into());
    }
    run.args
        .iter()
        .zip(types)
        .enumerate()
        .map(|(k, (text, t))| {
            source::parse_value(text, t).map_err(|error| Failure {
                error: error.prefixed(&format!("argument {}: ", k + 1)),
                source: Some(Source::new(format!("argument {}", k + 1), text.clone())),
            })
        })
        .collect()
}

fn count_error(expected: usize, given: usize) -> Error {
    Error::new(
        ErrorKind::Argument,
        format!(
            "the definition takes {expected} argument{}, but {given} {} given",
            if expected == 1 { "" } else { "s" },
            if given == 1 { "was" } else { "were" }
        ),
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
        Command::Check { file, json } => {
            let (_, prog) = load(&file)?;
            if json {
                let defs: serde_json::Map<String, serde_json::Value> = prog
                    .defs
                    .iter()
                    .map(|d| (d.name().to_string(), d.var.ty.to_string().into()))
                    .collect();
                Ok(format!("{}\n", serde_json::json!({ "defs": defs })))
            } else {
                Ok(prog
                    .defs
                    .iter()
                    .map(|d| format!("{} : {}\n", d.name(), d.var.ty))
                    .collect())
            }
        }
        Command::Eval { run, engine, json } => {
            let (src, prog) = load(&run.file)?;
            let index = with_source(select(&src, &prog, run.def.as_deref()), &src)?;
            let entry = prog.entry(index);
            let args = arguments(&run, &entry.param_types())?;
            with_source(chad::eval::check_args(&entry, &args), &src)?;
            let value = with_source(
                match engine {
                    Engine::Ccc => {
                        let comb = ccc::compile_entry(&entry);
                        ccc::eval::run(&comb, &ccc::eval::context_value(&args))
                    }
                    Engine::Direct => chad::eval::eval_entry(&entry, &args),
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
        Command::Show {
            file,
            def,
            stage,
            width,
        } => {
            let (src, prog) = load(&file)?;
            let index = with_source(select(&src, &prog, def.as_deref()), &src)?;
            match stage {
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
            }
        }
    }
}
