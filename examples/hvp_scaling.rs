//! Hessian-vector products by forward over reverse (`chad::internals::ad::nested::Hvp`: forward CHAD of
//! the concretised reverse derivative) against the gradient (reverse CHAD), at several sizes:
//! the hvp/grad time ratio should be a constant (issue 24: ≤ 4, flat across sizes).
//!
//! Programs: Rosenbrock's function of n variables (twice: as written below, and as the benchmark
//! suite writes it, with `let`s, `rosen-let`), and the MLP of `examples/mlp.chad` with H
//! hidden units (the inputs and weights made up deterministically; 2 inputs, 3 classes, a
//! batch of 64 points). Both derivatives run on the execution engine, after the same
//! optimisation and simplification as `chad grad` and `chad hvp`; with `--backend native`, on
//! native code as `chad grad --backend native` and `chad hvp --backend native` run them
//! (reverse CHAD of the entry; the Hessian-vector product by dual numbers on the compiled
//! gradient, `ir::compile::HvpCode`, or with `--route concretised` forward CHAD of the
//! concretised gradient, [`Hvp::gradient`]), timed inside the library (argument conversion
//! excluded, as `chad bench --backend native`).
//! Each time is the median of `--repeat` runs (default 5) after a warm-up.
//!
//! Run: `cargo run --release --example hvp_scaling [-- --sizes 1000,10000 --repeat 5]
//! [--backend native [--route dual|concretised]] [--only rosenbrock|mlp]` (set
//! `CHAD_THREADS=1` for stable native numbers). By the concretised route the MLP's
//! second-order code is not practical natively: its generated Rust (14.6 MB) takes rustc
//! about 8 minutes, and it runs thousands of times slower than the gradient (note 12).

use chad::Value;
use chad::internals::ad::Vjp;
use chad::internals::ad::nested::Hvp;
use chad::internals::ir::FuncId;
use chad::internals::ir::compile::{HvpCode, Module, Parts};
use chad::internals::native::Native;
use chad::internals::optimize::optimize;
use chad::internals::prim::Registry;
use chad::internals::source::term::Entry;

mod common;
use common::{flag, median};

const ROSENBROCK: &str = "
def rosenbrock (x : Array Real) : Real =
  let n = length x in
  sum (build (n - 1) (\\i -> 100.0 * (x ! (i + 1) - x ! i * x ! i) * (x ! (i + 1) - x ! i * x ! i)
                            + (1.0 - x ! i) * (1.0 - x ! i)))
";

fn pseudo(k: usize) -> f64 {
    ((k * 7919 + 13) % 1000) as f64 / 500.0 - 1.0
}

fn matrix(rows: usize, cols: usize, seed: usize) -> Value {
    Value::array_of(
        (0..rows)
            .map(|i| {
                Value::reals(
                    (0..cols)
                        .map(|j| 0.5 * pseudo(seed + i * cols + j))
                        .collect(),
                )
            })
            .collect(),
    )
}

/// Times the gradient and the Hessian-vector product of `entry` at `args` along `v` (one tangent
/// per selected parameter): seconds of each, medians of `repeat` runs.
struct Timer {
    native: bool,
    repeat: usize,
    wrt: Vec<bool>,
    vjp: Vjp,
    hvp: Hvp,
    /// Native reverse mode of the entry and the native Hessian-vector product: forward mode
    /// of the concretised gradient, or (with a function) the dual-number transform of the
    /// compiled gradient (`ir::compile::HvpCode`).
    code: Option<(Native, Native, Option<FuncId>)>,
}

impl Timer {
    fn new(entry: &Entry, wrt: &[bool], native: bool, dual: bool, repeat: usize) -> Timer {
        let w = chad::internals::ad::with_respect_to(entry, wrt);
        let vjp = Vjp::new(&w)
            .expect("differentiable")
            .map_body(chad::internals::simplify::simplify);
        let hvp = Hvp::new(entry, wrt).expect("twice differentiable");
        let code = native.then(|| {
            let g = Native::compile(&w, Parts::VJP, None, false).expect("native reverse mode");
            if dual {
                let code = HvpCode::new(&w).expect("the dual-number route applies");
                let f = code.hvp;
                let m = Module {
                    program: code.program,
                    defs: vec![code.def],
                };
                let h = Native::module_with(m, &[f], None, false).expect("native hvp");
                return (g, h, Some(f));
            }
            let h = Native::compile(hvp.gradient(), Parts::JVP, None, false)
                .expect("native forward mode of the gradient");
            (g, h, None)
        });
        Timer {
            native,
            repeat,
            wrt: wrt.to_vec(),
            vjp,
            hvp,
            code,
        }
    }

    fn times(&self, entry: &Entry, args: &[Value], v: &[Value]) -> (f64, f64) {
        let Some((g, h, dual)) = &self.code else {
            let t_g = median(self.repeat, || drop(self.vjp.grad(args).expect("runs")));
            let t_h = median(self.repeat, || drop(self.hvp.hvp(args, v).expect("runs")));
            return (t_g, t_h);
        };
        assert!(self.native);
        // One tangent per parameter: `v` for the selected ones, zero for the others.
        let mut given = v.iter();
        let full: Vec<Value> = entry
            .params
            .iter()
            .zip(args)
            .zip(&self.wrt)
            .map(|((p, a), &s)| {
                if s {
                    given.next().expect("one per selected").clone()
                } else {
                    chad::internals::oracle::fd::zero_tangent(&p.ty, a)
                }
            })
            .collect();
        // The native results agree with the engine's (a check that the timed code is right).
        let e = self.hvp.hvp(args, v).expect("runs");
        let (_, t) = match dual {
            Some(f) => {
                let d = &h.defs[0];
                let r = h
                    .call(*f, &d.hvp_args(args, &full).expect("args"))
                    .expect("runs");
                d.hvp_result(args, &r)
            }
            None => chad::internals::ad::nested::Forward::jvp(h, args, &full).expect("runs"),
        };
        let hv: Vec<f64> = e
            .hvp
            .iter()
            .flatten()
            .flat_map(chad::internals::oracle::fd::leaves)
            .collect();
        // The tangent of the gradient: one component per parameter (a right-nested tuple);
        // the selected ones, in order.
        let mut parts = Vec::new();
        let mut rest = t.expect_pair().1;
        for _ in 1..args.len() {
            let (a, b) = rest.expect_pair();
            parts.push(a);
            rest = b;
        }
        parts.push(rest);
        let nv: Vec<f64> = parts
            .into_iter()
            .zip(&self.wrt)
            .filter(|(_, s)| **s)
            .flat_map(|(p, _)| chad::internals::oracle::fd::leaves(p))
            .collect();
        assert_eq!(nv.len(), hv.len(), "one hvp entry per selected real");
        let err = hv
            .iter()
            .zip(nv)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f64::max);
        let scale = hv.iter().map(|a| a.abs()).fold(1.0, f64::max);
        assert!(
            err <= 1e-9 * scale,
            "native hvp differs from the engine's by {err}"
        );
        let time = |n: &Native, f, xs: Vec<chad::internals::ir::interp::Val>| {
            let mut p = n.prepare(f, &xs).expect("prepares");
            // One warm-up, the timed runs, and a last run whose time also counts encoding
            // the result for the host (left out).
            let (_, mut ts) = p.run(self.repeat + 2).expect("runs");
            ts.pop();
            ts.remove(0);
            ts.sort_by(f64::total_cmp);
            ts[ts.len() / 2]
        };
        let dg = &g.defs[0];
        let ct = dg.cotangent(&Value::Real(1.0)).expect("a cotangent");
        let t_g = time(
            g,
            dg.vjp.expect("compiled"),
            vec![dg.context(args).expect("args"), ct],
        );
        let dh = &h.defs[0];
        let t_h = match dual {
            Some(f) => time(h, *f, dh.hvp_args(args, &full).expect("args")),
            None => {
                let dx = dh.context_tangent(args, &full).expect("tangents");
                time(
                    h,
                    dh.jvp.expect("compiled"),
                    vec![dh.context(args).expect("args"), dx],
                )
            }
        };
        (t_g, t_h)
    }
}

fn main() {
    let native = flag("--backend").is_some_and(|b| b == "native");
    let dual = flag("--route").is_none_or(|r| r == "dual");
    let repeat = flag("--repeat").map_or(5, |s| s.parse().expect("a count"));
    let sizes: Vec<usize> = flag("--sizes").map_or(vec![1_000, 10_000, 100_000], |s| {
        s.split(',').map(|n| n.parse().expect("a size")).collect()
    });
    println!(
        "{:<11} {:>7} {:>11} {:>11} {:>9}",
        "program", "n", "grad ms", "hvp ms", "hvp/grad"
    );
    let only = flag("--only");
    let reg = Registry::builtin();
    if only.as_deref() != Some("mlp") {
        rosenbrock(
            &reg,
            ("rosenbrock", ROSENBROCK),
            &sizes,
            native,
            dual,
            repeat,
        );
        // The benchmark suite's Rosenbrock: the same function, with `let`s.
        let suite = std::fs::read_to_string("benches/programs/rosenbrock.chad")
            .expect("benches/programs/rosenbrock.chad");
        rosenbrock(&reg, ("rosen-let", &suite), &sizes, native, dual, repeat);
    }
    if only.as_deref() != Some("rosenbrock") {
        mlp(&reg, native, dual, repeat);
    }
}

fn rosenbrock(
    reg: &Registry,
    (label, source): (&str, &str),
    sizes: &[usize],
    native: bool,
    dual: bool,
    repeat: usize,
) {
    let prog = chad::internals::source::load(source, reg).expect("checks");
    let entry = optimize(&prog.entry(0));
    let timer = Timer::new(&entry, &[true], native, dual, repeat);
    for &n in sizes {
        let args = [Value::reals((0..n).map(pseudo).collect())];
        let v = [Value::reals((0..n).map(|i| pseudo(i + 5)).collect())];
        let (t_g, t_h) = timer.times(&entry, &args, &v);
        println!(
            "{:<11} {:>7} {:>11.3} {:>11.3} {:>9.2}",
            label,
            n,
            t_g * 1e3,
            t_h * 1e3,
            t_h / t_g
        );
    }
}

/// The MLP, differentiated with respect to its weights (the data are constants).
fn mlp(reg: &Registry, native: bool, dual: bool, repeat: usize) {
    let text = std::fs::read_to_string("examples/mlp.chad").expect("examples/mlp.chad");
    let prog = chad::internals::source::load(&text, reg).expect("checks");
    let entry = optimize(&prog.entry(prog.defs.len() - 1));
    let wrt = [true, true, true, true, false, false];
    let timer = Timer::new(&entry, &wrt, native, dual, repeat);
    let (inputs, classes, batch) = (2, 3, 64);
    for &h in &[16usize, 64, 256] {
        let args = vec![
            matrix(h, inputs, 1),
            Value::reals((0..h).map(|i| 0.1 * pseudo(i + 7)).collect()),
            matrix(classes, h, 3),
            Value::reals((0..classes).map(|i| 0.1 * pseudo(i + 11)).collect()),
            matrix(batch, inputs, 17),
            Value::array_of(
                (0..batch)
                    .map(|b| Value::Int((b % classes) as i64))
                    .collect(),
            ),
        ];
        let v = vec![
            matrix(h, inputs, 23),
            Value::reals((0..h).map(|i| pseudo(i + 29)).collect()),
            matrix(classes, h, 31),
            Value::reals((0..classes).map(|i| pseudo(i + 37)).collect()),
        ];
        let (t_g, t_h) = timer.times(&entry, &args, &v);
        println!(
            "{:<11} {:>7} {:>11.3} {:>11.3} {:>9.2}",
            "mlp (H)",
            h,
            t_g * 1e3,
            t_h * 1e3,
            t_h / t_g
        );
    }
}
