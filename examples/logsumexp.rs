//! User-defined primitives with derivatives, registered from Rust:
//!
//! * `logsumexp : Array Real -> Real`, computed stably, with a *native* derivative: the forward
//!   kernel is `dotWith (softmax xs)` (`d ↦ Σ_i softmax(xs)_i d_i`) and the transposed kernel is
//!   `scaleArray (softmax xs)` (`v ↦ v · softmax xs`), built with `LinPrim::new` from `LinFun`
//!   combinators;
//! * `logcosh : Real -> Real` (`log (cosh x)`) with a *term* derivative, `tanh x`.
//!
//! Both are checked with `ad::check_primitive` (finite differences and the dot-product test), then
//! a `.chad` program uses them with a closure and `map`; its gradient (reverse CHAD) is printed
//! beside central finite differences.
//!
//! `cargo run --release --example logsumexp`

use chad::Value;
use chad::internals::ad;
use chad::internals::prim::{Derivative, Primitive, Registry, op};
use chad::internals::source::term::Entry;
use chad::internals::target::linear::LinFun;
use chad::internals::target::term::{LinPrim, Term};
use chad::internals::target::types::{LTy, Ty};
use chad::internals::types::Type;
use std::rc::Rc;

/// The program: a closure over `a`, mapped, then both primitives.
pub const PROGRAM: &str = "\
def model (a : Real) (xs : Array Real) : Real =
  let act = \\(x : Real) -> logcosh (a * x) in
  logsumexp (map act xs) + logcosh a
";

/// `softmax xs`, computed stably (shifted by the maximum). Empty for an empty array.
pub fn softmax(xs: &[f64]) -> Vec<f64> {
    let m = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let es: Vec<f64> = xs.iter().map(|x| (x - m).exp()).collect();
    let total: f64 = es.iter().sum();
    es.iter().map(|e| e / total).collect()
}

/// `log Σ_i exp xs_i`, computed stably; `-∞` for an empty array.
pub fn logsumexp(xs: &[f64]) -> f64 {
    let m = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if m.is_infinite() {
        return m;
    }
    m + xs.iter().map(|x| (x - m).exp()).sum::<f64>().ln()
}

/// `log (cosh x)`, computed stably: `|x| + log (1 + exp (-2|x|)) - log 2`.
pub fn logcosh(x: f64) -> f64 {
    let a = x.abs();
    a + (-2.0 * a).exp().ln_1p() - std::f64::consts::LN_2
}

/// The builtins plus `logsumexp` and `logcosh`.
pub fn registry() -> Registry {
    let mut reg = Registry::builtin();
    let softmax_of = |xs: &Value| Rc::new(softmax(xs.expect_reals()));
    // Dop(xs; d) = <softmax xs, d> : Array Real ⊸ Real.
    let forward = LinPrim::new(
        "dotSoftmax",
        Ty::array(Ty::Real),
        LTy::array(LTy::Real),
        LTy::Real,
        move |xs| Ok(LinFun::dot_with(softmax_of(xs))),
    );
    // DopT(xs; v) = v · softmax xs : Real ⊸ Array Real.
    let transpose = LinPrim::new(
        "scaleSoftmax",
        Ty::array(Ty::Real),
        LTy::Real,
        LTy::array(LTy::Real),
        move |xs| Ok(LinFun::scale_array(softmax_of(xs))),
    );
    let lse = Primitive::function(
        "logsumexp",
        vec![Type::array(Type::Real)],
        Type::Real,
        |xs| Ok(Value::Real(logsumexp(xs.expect_reals()))),
    )
    .with_derivative(Derivative::native(forward, transpose));
    reg.register(lse).expect("logsumexp registers");
    let lc = Primitive::function("logcosh", vec![Type::Real], Type::Real, |x| {
        Ok(Value::Real(logcosh(x.expect_real())))
    })
    .with_derivative(Derivative::scalar(|x| {
        Term::prim(&op("tanh"), vec![x.clone()])
    }));
    reg.register(lc).expect("logcosh registers");
    reg
}

/// Central finite differences of a `Real`-valued entry with respect to every real of its
/// (`Real` and `Array Real`) arguments, in order.
pub fn finite_differences(entry: &Entry, args: &[Value]) -> Vec<f64> {
    let h = 1e-6;
    let f = |args: &[Value]| {
        chad::internals::eval::eval_entry(entry, args)
            .expect("evaluates")
            .expect_real()
    };
    let mut out = Vec::new();
    for k in 0..args.len() {
        let n = match &args[k] {
            Value::Real(_) => 1,
            v => v.expect_reals().len(),
        };
        for i in 0..n {
            let shifted = |s: f64| {
                let mut a = args.to_vec();
                a[k] = match &args[k] {
                    Value::Real(x) => Value::Real(x + s),
                    v => {
                        let mut xs = v.expect_reals().to_vec();
                        xs[i] += s;
                        Value::reals(xs)
                    }
                };
                a
            };
            out.push((f(&shifted(h)) - f(&shifted(-h))) / (2.0 * h));
        }
    }
    out
}

fn main() {
    let reg = registry();
    for name in ["logsumexp", "logcosh"] {
        match ad::check_primitive(reg.get(name).expect("registered"), 50, 1) {
            Ok(c) => println!(
                "check_primitive {name}: ok at {} points ({} skipped)",
                c.points, c.skipped
            ),
            Err(e) => {
                eprintln!("check_primitive {name}: {e}");
                std::process::exit(1);
            }
        }
    }

    let program = chad::internals::source::load(PROGRAM, &reg).unwrap_or_else(|e| {
        eprintln!("{}", e.render(None));
        std::process::exit(1)
    });
    let entry = program.entry(program.find("model").expect("defined"));
    println!("\n{PROGRAM}");
    let args = [Value::Real(0.8), Value::reals(vec![0.5, -1.5, 2.0, 0.25])];
    let (value, grads) = ad::grad(&entry, &args).unwrap_or_else(|e| {
        eprintln!("{}", e.render(None));
        std::process::exit(1)
    });
    println!("model {} {} = {value}\n", args[0], args[1]);

    let ad_grad: Vec<f64> = grads
        .iter()
        .flat_map(|g| match g {
            Value::Real(x) => vec![*x],
            v => v.expect_reals().to_vec(),
        })
        .collect();
    let names: Vec<String> = std::iter::once("a".to_string())
        .chain((0..args[1].array_len()).map(|i| format!("xs[{i}]")))
        .collect();
    let fd = finite_differences(&entry, &args);
    println!(
        "{:>6}  {:>22}  {:>22}  {:>9}",
        "", "reverse CHAD", "finite differences", "|diff|"
    );
    let mut worst: f64 = 0.0;
    for ((name, g), f) in names.iter().zip(&ad_grad).zip(&fd) {
        let diff = (g - f).abs();
        worst = worst.max(diff / (1.0 + g.abs()));
        println!("{name:>6}  {g:>22.15}  {f:>22.15}  {diff:>9.2e}");
    }
    if worst > 1e-6 {
        eprintln!("gradient and finite differences disagree (relative {worst:.2e})");
        std::process::exit(1);
    }
}
