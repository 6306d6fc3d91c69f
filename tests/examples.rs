//! The example programs (`examples/*.chad`), differentiated both ways and checked against
//! independent oracles, and the training example (`examples/train_mlp.rs`).
//!
//! The `.chad` files are found by reading the directory, so a new example is covered without
//! touching this file. Every definition with first-order parameters and a first-order result is
//! run at deterministic sample arguments (a generic sampler by type, overridden per definition
//! where shapes or domains must fit together, see [`OVERRIDES`] and [`ARGS_FILES`]) and:
//!
//! * (a) the value from forward and reverse CHAD (raw and simplified derivative code) and from
//!   the dual-number evaluator is exactly `chad::internals::eval::eval_entry`'s;
//! * (b) forward CHAD along every basis tangent (one per real of the arguments; the raw code
//!   along about 12 of them on large points) agrees with the dual-number oracle ([`chad::internals::oracle::dual`]) to rounding and with central finite differences
//!   ([`chad::internals::oracle::fd`], Richardson-extrapolated) to truncation error;
//! * (c) reverse CHAD for every basis cotangent of the result gives the rows of the Jacobian whose
//!   columns forward mode gave: the full Jacobian agrees between the modes (and so, through (b),
//!   with finite differences).
//!
//! Finite differences are skipped for a column only with a reason (the oracle detects a
//! non-differentiable point, or two step sizes disagree); skips are counted, printed, and
//! bounded. Definitions that take or return functions are listed as not checked. The same
//! value, columns and rows are also computed by the definition compiled to the IR
//! ([`chad::internals::ir`]) on its reference interpreter.
//!
//! Independent of all that, the GMM and MLP values are compared with direct Rust loops of the
//! same formulas (the hand-written baselines of `benches/native`), `lgamma`'s derivative with
//! known digamma values, and the gradients with the invariances of the models (shifting all
//! `alphas`, translating data and means, shifting all logits); the CLI's `grad` on the argument
//! files agrees with the library; and a few steps of `train_mlp`'s training loop lower the loss
//! (and steps up the gradient raise it).

use chad::Value;
use chad::internals::ad::{Jvp, Vjp};
use chad::internals::oracle::{dual, fd};
use chad::internals::source::term::{Entry, Program};
use chad::internals::types::Type;
use std::path::{Path, PathBuf};

#[path = "../examples/train_mlp.rs"]
#[allow(dead_code)]
mod train_mlp;

#[path = "../benches/native/mod.rs"]
#[allow(dead_code)]
mod native;

// ----- finding and loading the examples -----

fn examples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples")
}

/// The `.chad` files in `examples/`, by file name.
fn chad_files() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(examples_dir())
        .expect("examples/ is readable")
        .map(|e| {
            e.expect("a directory entry")
                .file_name()
                .into_string()
                .expect("UTF-8")
        })
        .filter(|n| n.ends_with(".chad"))
        .collect();
    names.sort();
    names
}

fn load(file: &str) -> Program {
    let path = examples_dir().join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    chad::internals::source::load(&text, &chad::internals::prim::Registry::builtin())
        .unwrap_or_else(|e| {
            let src = chad::Source::new(file, text.as_str());
            panic!("{}", e.render(Some(&src)))
        })
}

fn entry(prog: &Program, name: &str) -> Entry {
    prog.entry(
        prog.find(name)
            .unwrap_or_else(|| panic!("no definition `{name}`")),
    )
}

/// The arguments in a JSON argument file of `examples/` (the CLI's `--args-file` format).
fn args_file(entry: &Entry, file: &str) -> Vec<Value> {
    let path = examples_dir().join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    let json: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    let items = json.as_array().expect("a JSON array of arguments");
    assert_eq!(
        items.len(),
        entry.params.len(),
        "{file}: one value per parameter"
    );
    entry
        .params
        .iter()
        .zip(items)
        .map(|(p, j)| Value::from_json(j, &p.ty).unwrap_or_else(|e| panic!("{file}: {e:?}")))
        .collect()
}

// ----- sample arguments -----

/// Per-definition sample points, in the literal syntax, where the generic sampler's shapes
/// (arrays of 3, `Int`s 2) would not fit together or would leave the domain: `(file, def,
/// points)`, each point one text per parameter.
const OVERRIDES: &[(&str, &str, &[&[&str]])] = &[
    // Square matrices for the determinant by recursion (3 x 3 and 4 x 4), indices in range.
    (
        "recursion.chad",
        "det",
        &[
            &["[[2.0, 0.5, 1.0], [0.3, 1.5, -0.7], [1.2, -0.4, 0.9]]"],
            &[
                "[[1.0, 0.2, -0.5, 0.3], [0.4, 2.0, 0.1, -0.6], [-0.3, 0.8, 1.5, 0.2], [0.7, -0.1, 0.4, 1.2]]",
            ],
        ],
    ),
    (
        "recursion.chad",
        "det_rows",
        &[&["3", "[2.0, 0.5, 1.0, 0.3, 1.5, -0.7, 1.2, -0.4, 0.9]"]],
    ),
    (
        "recursion.chad",
        "minor",
        &[&["[[2.0, 0.5, 1.0], [0.3, 1.5, -0.7], [1.2, -0.4, 0.9]]", "1"]],
    ),
    (
        "recursion.chad",
        "cfrac",
        &[&["[1.5, 2.0, 0.7, 3.0]", "0"], &["[0.5, -2.5, 1.25]", "1"]],
    ),
    ("recursion.chad", "power", &[&["1.1", "13"], &["-0.7", "6"]]),
    // A generic point, and a tie for the first place (a kink of `maximum`; `logsumexp` is
    // smooth there).
    (
        "gmm.chad",
        "logsumexp",
        &[&["[0.3, -0.8, 1.1]"], &["[0.5, 0.5, -1.0]"]],
    ),
    (
        "mlp.chad",
        "maximum",
        &[&["[-0.4, 0.9, 0.2]"], &["[0.7, -0.2, 0.7]"]],
    ),
    (
        "mlp.chad",
        "logsumexp",
        &[&["[-0.4, 0.9, 0.2]"], &["[0.7, -0.2, 0.7]"]],
    ),
    // Lanczos' formula needs x ≥ 1/2.
    ("gmm.chad", "lgamma", &[&["0.75"], &["3.7"], &["11.2"]]),
    (
        "gmm.chad",
        "logGammaDistrib",
        &[&["2.5", "3"], &["1.3", "1"]],
    ),
    // The icf row must hold D + D(D-1)/2 entries for a vector of D, the diagonal D.
    (
        "gmm.chad",
        "qtimesv",
        &[
            &[
                "[1.3, 0.8, 1.6]",
                "[0.3, -0.2, 0.5, 0.1, -0.4, 0.2]",
                "[0.7, -1.1, 0.4]",
            ],
            &["[0.9, 1.8]", "[-0.1, 0.6, 0.9]", "[0.5, -0.3]"],
            &["[1.2]", "[0.2]", "[1.3]"],
        ],
    ),
    // gamma > 0 (log gamma); rows of D + D(D-1)/2.
    (
        "gmm.chad",
        "logWishartPrior",
        &[
            &["[[0.1, -0.2, 0.3], [-0.3, 0.4, 0.2]]", "2", "0.8", "1"],
            &["[[0.2, -0.1, 0.5, 0.3, -0.6, 0.4]]", "3", "1.4", "0"],
        ],
    ),
    // A second GMM point beside gmm.args.json: K = 2, D = 2, N = 3, other Wishart parameters.
    (
        "gmm.chad",
        "gmm",
        &[&[
            "[0.2, -0.4]",
            "[[0.5, -0.3], [-0.2, 0.8]]",
            "[[0.1, 0.3, -0.5], [-0.2, 0.1, 0.4]]",
            "[[0.4, 0.1], [-0.6, 0.9], [1.1, -0.2]]",
            "1.3",
            "2",
        ]],
    ),
    // A smaller MLP beside mlp.args.json: I = 2, H = 2, C = 3, B = 2.
    (
        "mlp.chad",
        "loss",
        &[&[
            "[[0.4, -0.7], [0.9, 0.2]]",
            "[0.1, -0.3]",
            "[[0.5, -0.2], [-0.6, 0.8], [0.3, 0.4]]",
            "[0.0, 0.2, -0.1]",
            "[[0.3, -0.5], [1.2, 0.7]]",
            "[2, 0]",
        ]],
    ),
];

/// Definitions where finite differences may be skipped: the points above with ties put
/// `maximum` at a kink on purpose (the one-sided derivative that AD takes there is checked
/// against the dual-number oracle, and `logsumexp`, smooth through the same tie, against finite
/// differences too). A skip anywhere else fails the test.
const KINKS: &[&str] = &["mlp.chad:maximum"];

/// Sample points read from the CLI argument files: `(file, def, args file)`.
const ARGS_FILES: &[(&str, &str, &str)] = &[
    ("gmm.chad", "gmm", "gmm.args.json"),
    ("mlp.chad", "loss", "mlp.args.json"),
];

/// The generic sampler: reals from a deterministic sequence in (-1.2, 1.2) (distinct, so no
/// ties for `max`/comparisons, and away from 0), `Int`s 2, arrays of length 3 (nested arrays
/// rectangular), sums on the left for even seeds and on the right for odd ones.
struct Sampler {
    k: u32,
    seed: u32,
}

impl Sampler {
    fn real(&mut self) -> f64 {
        self.k += 1;
        let x = (2.3 * f64::from(self.k) + 0.9 * f64::from(self.seed)).sin() * 1.2;
        if x.abs() < 0.05 { x + 0.1 } else { x }
    }

    fn value(&mut self, ty: &Type) -> Value {
        match ty {
            Type::Real => Value::Real(self.real()),
            Type::Int => Value::Int(2),
            Type::Bool => Value::Bool(self.seed % 2 == 0),
            Type::Unit => Value::Unit,
            Type::Prod(p) => {
                let a = self.value(&p.0);
                Value::pair(a, self.value(&p.1))
            }
            Type::Sum(s) => {
                if self.seed % 2 == 0 {
                    Value::inl(self.value(&s.0))
                } else {
                    Value::inr(self.value(&s.1))
                }
            }
            Type::Array(e) => Value::array(e, (0..3).map(|_| self.value(e)).collect()),
            Type::Fun(_) => unreachable!("only first-order parameters are sampled"),
        }
    }
}

/// The sample points of a definition: its overrides and argument files, or else two generic
/// points. Marks the overrides used in `used`.
fn points(file: &str, entry: &Entry, used: &mut Vec<String>) -> Vec<Vec<Value>> {
    let mut out = Vec::new();
    for (f, def, pts) in OVERRIDES {
        if *f == file && **def == *entry.name {
            used.push(format!("{f}:{def}"));
            for pt in *pts {
                assert_eq!(pt.len(), entry.params.len(), "{f}:{def}: arity");
                out.push(
                    entry
                        .params
                        .iter()
                        .zip(*pt)
                        .map(|(p, text)| {
                            chad::internals::source::parse_value(text, &p.ty)
                                .unwrap_or_else(|e| panic!("{f}:{def}: `{text}`: {e:?}"))
                        })
                        .collect(),
                );
            }
        }
    }
    for (f, def, args) in ARGS_FILES {
        if *f == file && **def == *entry.name {
            used.push(format!("{f}:{def}"));
            out.push(args_file(entry, args));
        }
    }
    if out.is_empty() {
        for seed in 0..2 {
            let mut s = Sampler { k: 0, seed };
            out.push(entry.params.iter().map(|p| s.value(&p.ty)).collect());
        }
    }
    out
}

// ----- comparisons -----

fn close(a: f64, b: f64, rel: f64) -> bool {
    a == b || (a - b).abs() <= rel * (1.0 + a.abs().max(b.abs()))
}

fn all_close(a: &[f64], b: &[f64], rel: f64) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| close(*x, *y, rel))
}

fn finite(xs: &[f64]) -> bool {
    xs.iter().all(|x| x.is_finite())
}

/// The largest gap between the one-sided difference quotients `(f(x + h·t) − f(x)) / h` and
/// `(f(x) − f(x − h·t)) / h` over the reals of the result. Smooth functions have a gap of about
/// `h·f''`, halving with `h`; at a kink the gap is the jump in slope, whatever `h`.
fn one_sided_gap(entry: &Entry, args: &[Value], dx: &[Value], h: f64) -> Result<f64, String> {
    let at = |s: f64| -> Result<Vec<f64>, String> {
        let shifted: Vec<Value> = entry
            .params
            .iter()
            .zip(args)
            .zip(dx)
            .map(|((p, x), t)| fd::add_scaled(&p.ty, x, t, s))
            .collect();
        let y = chad::internals::eval::eval_entry(entry, &shifted)
            .map_err(|e| e.message().to_string())?;
        Ok(fd::leaves(&y))
    };
    let (plus, centre, minus) = (at(h)?, at(0.0)?, at(-h)?);
    Ok(plus
        .iter()
        .zip(&centre)
        .zip(&minus)
        .map(|((p, c), m)| ((p - c) / h - (c - m) / h).abs())
        .fold(0.0, f64::max))
}

/// Richardson-extrapolated central differences along `dx`; `Err(reason)` where the function is
/// not differentiable as far as the evaluations show: the oracle sees the result's discrete
/// structure change, the one-sided slopes differ by a jump that does not shrink with the step
/// (a kink, where central differences average the two slopes), or two step sizes disagree.
fn finite_difference(entry: &Entry, args: &[Value], dx: &[Value]) -> Result<Vec<f64>, String> {
    let d = |h: f64| -> Result<Vec<f64>, String> {
        let t = fd::jvp(entry, args, dx, h).map_err(|e| e.message().to_string())?;
        let l = fd::leaves(&t);
        if finite(&l) {
            Ok(l)
        } else {
            Err(format!("non-finite difference quotient {t} at step {h}"))
        }
    };
    let (d1, d2, d3) = (d(1e-3)?, d(5e-4)?, d(2.5e-4)?);
    let scale = 1.0 + d3.iter().fold(0.0f64, |m, x| m.max(x.abs()));
    let (g1, g2) = (
        one_sided_gap(entry, args, dx, 1e-4)?,
        one_sided_gap(entry, args, dx, 5e-5)?,
    );
    if g1 > 1e-6 * scale && g2 > 0.75 * g1 {
        return Err(format!(
            "a kink: the one-sided slopes differ by {g1:.3e} at step 1e-4 and {g2:.3e} at 5e-5"
        ));
    }
    let rich = |a: &[f64], b: &[f64]| -> Vec<f64> {
        a.iter().zip(b).map(|(a, b)| (4.0 * b - a) / 3.0).collect()
    };
    let (r1, r2) = (rich(&d1, &d2), rich(&d2, &d3));
    if all_close(&r1, &r2, 1e-7) {
        Ok(r2)
    } else {
        Err(format!(
            "two step sizes disagree ({r1:?} vs {r2:?}): not smooth here"
        ))
    }
}

// ----- the Jacobian check -----

#[derive(Default)]
struct Tally {
    defs: usize,
    points: usize,
    columns: usize,
    raw_columns: usize,
    rows: usize,
    fd_checked: usize,
    /// (file:def, why) for every finite-difference column skipped.
    fd_skipped: Vec<(String, String)>,
    not_checked: Vec<String>,
}

/// Checks (a), (b), (c) of the module documentation for one definition at one point.
fn check_point(
    label: &str,
    entry: &Entry,
    args: &[Value],
    tally: &mut Tally,
) -> Result<(), String> {
    let tys = entry.param_types();
    let out_ty = entry.body.ty.clone();
    let err = |what: &str, e: chad::Error| format!("{what} failed: {e:?}");
    let jvps = [
        ("raw", Jvp::new(entry).map_err(|e| err("Jvp::new", e))?),
        (
            "simplified",
            Jvp::new(entry)
                .map_err(|e| err("Jvp::new", e))?
                .map_body(chad::internals::simplify::simplify),
        ),
    ];
    let vjps = [
        ("raw", Vjp::new(entry).map_err(|e| err("Vjp::new", e))?),
        (
            "simplified",
            Vjp::new(entry)
                .map_err(|e| err("Vjp::new", e))?
                .map_body(chad::internals::simplify::simplify),
        ),
    ];

    // The same primal and derivatives compiled to the IR, on its reference interpreter.
    // (Recursion is not lowered to the IR yet: such definitions skip the IR's checks.)
    let ir = match chad::internals::ir::compile::Compiled::new(entry) {
        Ok(ir) => Some(ir),
        Err(e) if e.kind() == chad::ErrorKind::Unsupported && e.message().contains("recursive") => {
            None
        }
        Err(e) => return Err(err("IR lowering", e)),
    };
    if let Some(ir) = &ir {
        chad::internals::ir::check::check(&ir.program)
            .map_err(|e| format!("the IR does not check: {e}"))?;
    }

    // (a) the value.
    let y = chad::internals::eval::eval_entry(entry, args).map_err(|e| err("eval", e))?;
    if let Some(ir) = &ir {
        let y_ir = ir.eval(args).map_err(|e| err("IR eval", e))?;
        if !all_close(&fd::leaves(&y_ir), &fd::leaves(&y), 1e-12) {
            return Err(format!("the IR gives the value {y_ir}, the evaluator {y}"));
        }
    }
    let same = |what: &str, v: &Value| -> Result<(), String> {
        if v.same(&y) == Some(true) {
            Ok(())
        } else {
            Err(format!("{what} gives the value {v}, the evaluator {y}"))
        }
    };

    // (b) the Jacobian's columns by forward mode, against dual numbers and finite differences.
    let basis = fd::basis(&tys, args);
    // The raw derivative code is an order of magnitude slower than the simplified one (the
    // simplifier's own tests compare the two on random programs), so on large points it runs
    // along every `stride`-th basis tangent only, about 12 of them.
    let stride = basis.len().div_ceil(12).max(1);
    let mut columns: Vec<Vec<f64>> = Vec::new();
    for (j, dx) in basis.iter().enumerate() {
        let (y2, exact) = dual::jvp(entry, args, dx).map_err(|e| err("dual numbers", e))?;
        same("the dual-number evaluator", &y2)?;
        let exact_l = fd::leaves(&exact);
        let mut col = None;
        for (mode, jvp) in &jvps {
            if *mode == "raw" && j % stride != 0 {
                continue;
            }
            let (y1, t) = jvp
                .jvp(args, dx)
                .map_err(|e| err(&format!("{mode} jvp"), e))?;
            same(&format!("{mode} forward CHAD"), &y1)?;
            if !t.has_type(&out_ty.tangent().expect("first-order")) {
                return Err(format!(
                    "{mode} jvp: tangent {t} is not of type {out_ty}'s tangent"
                ));
            }
            let l = fd::leaves(&t);
            if !all_close(&l, &exact_l, 1e-9) {
                return Err(format!(
                    "{mode} forward CHAD along {dx:?} gives {t}, dual numbers {exact}"
                ));
            }
            if *mode == "raw" {
                tally.raw_columns += 1;
            }
            col = Some(l);
        }
        let col = col.expect("the simplified derivative ran");
        if let Some(ir) = &ir {
            let (_, t_ir) = ir.jvp(args, dx).map_err(|e| err("IR jvp", e))?;
            if !all_close(&fd::leaves(&t_ir), &col, 1e-9) {
                return Err(format!(
                    "the IR's jvp along {dx:?} gives {t_ir}, forward CHAD {col:?}"
                ));
            }
        }
        match finite_difference(entry, args, dx) {
            Ok(approx) => {
                if !all_close(&col, &approx, 1e-6) {
                    return Err(format!(
                        "forward CHAD along {dx:?} gives {col:?}, finite differences {approx:?}"
                    ));
                }
                tally.fd_checked += 1;
            }
            Err(why) => tally.fd_skipped.push((
                label.to_string(),
                format!("{label} at {args:?} along {dx:?}: {why}"),
            )),
        }
        columns.push(col);
        tally.columns += 1;
    }

    // (c) the rows by reverse mode, against the columns.
    let out_basis = fd::basis(std::slice::from_ref(&out_ty), std::slice::from_ref(&y));
    for (i, ct) in out_basis.iter().enumerate() {
        for (mode, vjp) in &vjps {
            let (y1, grads) = vjp
                .vjp(args, &ct[0])
                .map_err(|e| err(&format!("{mode} vjp"), e))?;
            same(&format!("{mode} reverse CHAD"), &y1)?;
            if grads.len() != args.len() {
                return Err(format!(
                    "{mode} vjp: {} gradients for {} arguments",
                    grads.len(),
                    args.len()
                ));
            }
            for ((g, t), a) in grads.iter().zip(&tys).zip(args) {
                let ok = g.has_type(&t.tangent().expect("first-order"))
                    && fd::leaves(g).len() == fd::leaves(a).len();
                if !ok {
                    return Err(format!("{mode} vjp: {g} is not a cotangent of {a} : {t}"));
                }
            }
            let row: Vec<f64> = grads.iter().flat_map(fd::leaves).collect();
            let col_i: Vec<f64> = columns.iter().map(|c| c[i]).collect();
            if !all_close(&row, &col_i, 1e-9) {
                return Err(format!(
                    "Jacobian row {i}: {mode} reverse CHAD gives {row:?}, forward {col_i:?}"
                ));
            }
            if matches!(out_ty, Type::Real) {
                let (y2, g2) = vjp
                    .grad(args)
                    .map_err(|e| err(&format!("{mode} grad"), e))?;
                same(&format!("{mode} grad"), &y2)?;
                let flat: Vec<f64> = g2.iter().flat_map(fd::leaves).collect();
                if flat != row {
                    return Err(format!("{mode} grad gives {flat:?}, vjp with 1 {row:?}"));
                }
            }
        }
        if let Some(ir) = &ir {
            let (_, g_ir) = ir.vjp(args, &ct[0]).map_err(|e| err("IR vjp", e))?;
            let row: Vec<f64> = g_ir.iter().flat_map(fd::leaves).collect();
            let col_i: Vec<f64> = columns.iter().map(|c| c[i]).collect();
            if !all_close(&row, &col_i, 1e-9) {
                return Err(format!(
                    "Jacobian row {i}: the IR's vjp gives {row:?}, forward CHAD {col_i:?}"
                ));
            }
        }
        tally.rows += 1;
    }
    tally.points += 1;
    Ok(())
}

#[test]
fn every_example_definition_has_consistent_derivatives() {
    let files = chad_files();
    for required in ["gmm.chad", "mlp.chad", "fig2b.chad"] {
        assert!(
            files.iter().any(|f| f == required),
            "{required} not found in {files:?}"
        );
    }
    let mut tally = Tally::default();
    let mut used = Vec::new();
    let mut failures = Vec::new();
    for file in &files {
        let prog = load(file);
        for i in 0..prog.defs.len() {
            let entry = prog.entry(i);
            let name = format!("{file}:{}", entry.name);
            let first_order = entry.params.iter().all(|p| p.ty.is_first_order())
                && entry.body.ty.is_first_order();
            if !first_order {
                tally
                    .not_checked
                    .push(format!("{name} (functions as parameters or result)"));
                continue;
            }
            tally.defs += 1;
            for args in points(file, &entry, &mut used) {
                let shown: Vec<String> = args.iter().map(|a| a.to_string()).collect();
                if let Err(e) = check_point(&name, &entry, &args, &mut tally) {
                    failures.push(format!("{name} at ({}): {e}", shown.join(") (")));
                }
            }
        }
    }
    eprintln!(
        "{} example files: {} definitions at {} points; {} Jacobian columns by forward mode \
         (simplified; {} also raw), each against dual numbers; {} rows by reverse mode (raw and \
         simplified); finite differences checked {} columns, skipped {}",
        files.len(),
        tally.defs,
        tally.points,
        tally.columns,
        tally.raw_columns,
        tally.rows,
        tally.fd_checked,
        tally.fd_skipped.len()
    );
    for (_, why) in &tally.fd_skipped {
        eprintln!("  finite differences skipped: {why}");
    }
    for s in &tally.not_checked {
        eprintln!("  not differentiated: {s}");
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    // Every override names a definition that exists (and was checked).
    for (f, def, _) in OVERRIDES {
        assert!(
            used.iter().any(|u| *u == format!("{f}:{def}")),
            "unused override {f}:{def}"
        );
    }
    for (f, def, _) in ARGS_FILES {
        assert!(
            used.iter().any(|u| *u == format!("{f}:{def}")),
            "unused args file {f}:{def}"
        );
    }
    assert!(tally.defs >= 20, "only {} definitions checked", tally.defs);
    for (label, why) in &tally.fd_skipped {
        assert!(KINKS.contains(&label.as_str()), "unexpected skip: {why}");
    }
    for kink in KINKS {
        assert!(
            tally.fd_skipped.iter().any(|(l, _)| l == kink),
            "{kink}: the tie was not detected as a kink"
        );
    }
    assert!(
        tally.fd_skipped.len() * 20 <= tally.fd_checked,
        "too many finite-difference skips"
    );
}

// ----- independent implementations of the GMM and MLP -----

fn reals(v: &Value) -> Vec<f64> {
    v.expect_reals().to_vec()
}

fn matrix(v: &Value) -> Vec<Vec<f64>> {
    v.array_items().iter().map(reals).collect()
}

/// The arguments as `benches/native`'s objective `program` takes them (decoded from the JSON
/// argument format, which every `Value` here converts to).
fn native_args(program: &str, args: &[Value]) -> native::Program {
    let json = serde_json::Value::Array(args.iter().map(Value::to_json).collect());
    native::Program::decode(program, &json).unwrap_or_else(|e| panic!("{program}: {e}"))
}

/// ADBench's `gmm_objective`, hand-written in Rust (`benches/native`, also the baseline of the
/// benchmarks).
fn gmm_reference(args: &[Value]) -> f64 {
    native_args("gmm", args).eval()
}

/// The MLP loss of `mlp.chad`, in loops (`benches/native`).
fn mlp_reference(args: &[Value]) -> f64 {
    native_args("mlp", args).eval()
}

/// Random GMM arguments of the given sizes (deterministic in `seed`).
fn gmm_args(k: usize, d: usize, n: usize, gamma: f64, m: i64, seed: u64) -> Vec<Value> {
    let mut rng = train_mlp::SplitMix64::new(seed);
    let mut mat = |rows: usize, cols: usize| {
        let rows =
            (0..rows).map(|_| Value::reals((0..cols).map(|_| rng.uniform(-1.0, 1.0)).collect()));
        Value::array(&Type::array(Type::Real), rows.collect())
    };
    let means = mat(k, d);
    let icf = mat(k, d + d * (d - 1) / 2);
    let x = mat(n, d);
    let alphas = mat(1, k).array_items()[0].clone();
    vec![alphas, means, icf, x, Value::Real(gamma), Value::Int(m)]
}

#[test]
fn gmm_is_adbench_objective() {
    let prog = load("gmm.chad");
    let e = entry(&prog, "gmm");
    let mut cases = vec![args_file(&e, "gmm.args.json")];
    for (i, (k, d, n, gamma, m)) in [
        (1, 1, 2, 1.0, 0),
        (2, 2, 3, 1.3, 2),
        (3, 4, 5, 0.7, 1),
        (5, 3, 10, 1.0, 0),
    ]
    .into_iter()
    .enumerate()
    {
        cases.push(gmm_args(k, d, n, gamma, m, 100 + i as u64));
    }
    for args in &cases {
        let got = chad::internals::eval::eval_entry(&e, args)
            .expect("evaluates")
            .expect_real();
        let want = gmm_reference(args);
        assert!(
            close(got, want, 1e-12),
            "gmm.chad gives {got}, the reference {want}"
        );
    }
    // An extreme point: the stable logsumexp keeps it finite where exp would overflow.
    let mut far = cases[0].clone();
    far[0] = Value::reals(vec![800.0, 790.0, -5.0]);
    let got = chad::internals::eval::eval_entry(&e, &far)
        .expect("evaluates")
        .expect_real();
    assert!(
        got.is_finite() && close(got, gmm_reference(&far), 1e-12),
        "{got}"
    );
}

#[test]
fn lgamma_and_its_derivative_are_the_known_values() {
    let prog = load("gmm.chad");
    let e = entry(&prog, "lgamma");
    let vjp = Vjp::new(&e)
        .expect("differentiable")
        .map_body(chad::internals::simplify::simplify);
    let euler = 0.577_215_664_901_532_9;
    // (x, log Γ(x), digamma(x))
    let known = [
        (
            0.5,
            0.5 * std::f64::consts::PI.ln(),
            -euler - 2.0 * 2f64.ln(),
        ),
        (1.0, 0.0, -euler),
        (
            1.5,
            native::lgamma_half_integer(1.5),
            2.0 - euler - 2.0 * 2f64.ln(),
        ),
        (2.0, 0.0, 1.0 - euler),
        (5.0, 24f64.ln(), 1.0 + 0.5 + 1.0 / 3.0 + 0.25 - euler),
        (10.5, native::lgamma_half_integer(10.5), {
            // ψ(n + 1/2) = -γ - 2 ln 2 + Σ_{k=1..n} 2/(2k - 1)
            (1..=10).map(|k| 2.0 / (2.0 * k as f64 - 1.0)).sum::<f64>() - euler - 2.0 * 2f64.ln()
        }),
    ];
    for (x, lg, psi) in known {
        let (v, g) = vjp.grad(&[Value::Real(x)]).expect("runs");
        assert!(
            close(v.expect_real(), lg, 1e-13),
            "lgamma {x} = {v}, want {lg}"
        );
        assert!(
            close(g[0].expect_real(), psi, 1e-11),
            "lgamma' {x} = {}, want {psi}",
            g[0]
        );
    }
}

#[test]
fn gmm_gradient_respects_the_invariances() {
    let prog = load("gmm.chad");
    let e = entry(&prog, "gmm");
    let vjp = Vjp::new(&e)
        .expect("differentiable")
        .map_body(chad::internals::simplify::simplify);
    for args in [args_file(&e, "gmm.args.json"), gmm_args(3, 2, 6, 1.0, 0, 7)] {
        let (_, g) = vjp.grad(&args).expect("runs");
        // Adding a constant to every alpha leaves the objective unchanged.
        let s: f64 = reals(&g[0]).iter().sum();
        assert!(s.abs() < 1e-10, "Σ ∂/∂alphas = {s}");
        // So does translating every mean and every point by the same vector.
        let (gm, gx) = (matrix(&g[1]), matrix(&g[3]));
        for j in 0..gm[0].len() {
            let s: f64 = gm.iter().chain(&gx).map(|r| r[j]).sum();
            assert!(s.abs() < 1e-10, "Σ ∂/∂(means, x) along dimension {j} = {s}");
        }
        // m is an Int: no gradient.
        assert!(matches!(g[5], Value::Unit));
    }
}

#[test]
fn mlp_loss_is_the_direct_computation_and_its_gradient_is_softmax_invariant() {
    let prog = load("mlp.chad");
    let e = entry(&prog, "loss");
    let vjp = Vjp::new(&e)
        .expect("differentiable")
        .map_body(chad::internals::simplify::simplify);
    let data = train_mlp::two_moons(5, 0.1, 3);
    let [xs, ys] = data.args();
    let mut cases = vec![args_file(&e, "mlp.args.json")];
    for (i, (h, c)) in [(4, 2), (3, 3)].into_iter().enumerate() {
        let mut w = train_mlp::initial_weights(2, h, c, 50 + i as u64);
        w[1] = Value::reals((0..h).map(|j| 0.1 * j as f64 - 0.2).collect());
        w.extend([xs.clone(), ys.clone()]);
        cases.push(w);
    }
    for args in &cases {
        let got = chad::internals::eval::eval_entry(&e, args)
            .expect("evaluates")
            .expect_real();
        let want = mlp_reference(args);
        assert!(
            close(got, want, 1e-13),
            "mlp.chad gives {got}, the reference {want}"
        );
        let (v, g) = vjp.grad(args).expect("runs");
        assert_eq!(v.expect_real(), got);
        // Adding a constant to all logits changes no softmax: Σ_c ∂/∂b2_c = 0, and the same
        // for every column of w2.
        let s: f64 = reals(&g[3]).iter().sum();
        assert!(s.abs() < 1e-12, "Σ ∂/∂b2 = {s}");
        let gw2 = matrix(&g[2]);
        for j in 0..gw2[0].len() {
            let s: f64 = gw2.iter().map(|r| r[j]).sum();
            assert!(s.abs() < 1e-12, "Σ_c ∂/∂w2_cj = {s}");
        }
    }
    // Large logits: the stable logsumexp keeps the loss finite and right.
    let mut big = cases[0].clone();
    big[3] = Value::reals(vec![900.0, -900.0]);
    let got = chad::internals::eval::eval_entry(&e, &big)
        .expect("evaluates")
        .expect_real();
    assert!(
        got.is_finite() && close(got, mlp_reference(&big), 1e-12),
        "{got}"
    );
}

// ----- the command line on the argument files -----

#[test]
fn cli_grad_on_the_argument_files_agrees_with_the_library() {
    // The text output, read back with the literal-syntax parser (which reads the shortest
    // round-trip form of every real exactly), must be the library's result bit for bit.
    for (file, def, args) in ARGS_FILES {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_chad"))
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .args([
                "grad",
                &format!("examples/{file}"),
                "--def",
                def,
                "--args-file",
            ])
            .arg(format!("examples/{args}"))
            .output()
            .expect("runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{file}: {stderr}");
        let stdout = String::from_utf8(out.stdout).expect("UTF-8");
        let prog = load(file);
        let e = entry(&prog, def);
        let a = args_file(&e, args);
        let (v, g) = Vjp::new(&e)
            .expect("AD")
            .map_body(chad::internals::simplify::simplify)
            .grad(&a)
            .expect("runs");
        let mut lines = stdout.lines();
        let value = lines
            .next()
            .and_then(|l| l.strip_prefix("value: "))
            .expect("value line");
        let value = chad::internals::source::parse_value(value, &Type::Real).expect("a real");
        assert_eq!(
            value.same(&v),
            Some(true),
            "{file}: value {value}, library {v}"
        );
        assert_eq!(lines.next(), Some("gradient:"));
        for ((p, gi), line) in e.params.iter().zip(&g).zip(lines) {
            let text = line
                .strip_prefix(&format!("  {} = ", p.name))
                .unwrap_or_else(|| panic!("{file}: `{line}`"));
            let cli =
                chad::internals::source::parse_value(text, &p.ty.tangent().expect("first-order"))
                    .unwrap_or_else(|e| panic!("{file}: `{text}`: {e:?}"));
            assert_eq!(
                cli.same(gi),
                Some(true),
                "{file}: {}: {cli} vs {gi}",
                p.name
            );
        }
    }
}

// ----- training -----

#[test]
fn training_the_mlp_lowers_the_loss() {
    use train_mlp::*;
    let data = two_moons(PER_CLASS, 0.1, 7);
    let start = initial_weights(2, HIDDEN, 2, 42);
    let mut trainer = Trainer::new(PROGRAM, start.clone(), RATE, MOMENTUM).expect("loads");
    let initial = trainer.loss(&data).expect("runs");
    // The loss a step reports is the loss of its batch before the step.
    let batch = data.batch(0, BATCH);
    let before = trainer.loss(&batch).expect("runs");
    assert_eq!(trainer.step(&batch).expect("runs"), before);
    for step in 1..30 {
        trainer
            .step(&data.batch(step * BATCH, BATCH))
            .expect("runs");
    }
    let after = trainer.loss(&data).expect("runs");
    assert!(after < 0.5 * initial, "loss {initial} → {after}");
    assert!(trainer.accuracy(&data).expect("runs") > 0.8);

    // The decrease comes from the gradient: a zero rate leaves the weights alone, and steps up
    // the gradient (a negative rate) raise the loss.
    for (rate, rises) in [(0.0, None), (-0.05, Some(true))] {
        let mut t = Trainer::new(PROGRAM, start.clone(), rate, 0.0).expect("loads");
        for step in 0..5 {
            t.step(&data.batch(step * BATCH, BATCH)).expect("runs");
        }
        let l = t.loss(&data).expect("runs");
        match rises {
            None => assert_eq!(l, initial),
            Some(_) => assert!(l > initial, "gradient ascent: {initial} → {l}"),
        }
    }
}

#[test]
fn training_reports_a_missing_definition_as_an_error() {
    let weights = train_mlp::initial_weights(2, 2, 2, 1);
    let text = "def logits (v : Array Real) : Array Real = v";
    let e = train_mlp::Trainer::new(text, weights.clone(), 0.1, 0.0)
        .err()
        .expect("an error");
    assert!(e.message().contains("no definition `loss`"), "{e:?}");
    let e = train_mlp::Trainer::new("def loss = ", weights, 0.1, 0.0)
        .err()
        .expect("an error");
    assert_eq!(e.kind(), chad::ErrorKind::Syntax, "{e:?}");
}
