//! The curated public surface alone: a program loaded, run and differentiated through the crate
//! root only (`chad::{Program, Function, Value, ...}`, nothing from the internals module), end
//! to end: load, function, eval, gradient, a reusable pullback and pushforward, `wrt`, the
//! transposed route, and errors. Derivatives are checked against central finite differences
//! computed here from `Function::eval` (no AD involved) and against closed forms.

use chad::{
    Backend, Error, ErrorKind, Function, Program, Pullback, Pushforward, Result, Source, Span,
    Value, Via,
};

/// f(w, x, b) = Σ sin(w_i x_i) + b³, with a helper definition called from it.
const PROGRAM: &str = "def cube (b : Real) : Real = b * b * b
def f (w : Array Real) (x : Array Real) (b : Real) : Real =
  sum (map2 (\\p q -> sin (p * q)) w x) + cube b
";

const W: [f64; 3] = [0.5, -1.25, 2.0];
const X: [f64; 3] = [1.5, 0.75, -0.3];
const B: f64 = 1.1;

fn args(w: &[f64], x: &[f64], b: f64) -> Vec<Value> {
    vec![
        Value::from(w.to_vec()),
        Value::from(x.to_vec()),
        Value::from(b),
    ]
}

fn real(v: &Value) -> f64 {
    f64::try_from(v).expect("a Real")
}

fn reals(v: &Value) -> Vec<f64> {
    Vec::<f64>::try_from(v).expect("an Array Real")
}

fn close(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol * (1.0 + a.abs().max(b.abs()))
}

/// The function at (w, x, b) through `eval`.
fn at(f: &Function, w: &[f64], x: &[f64], b: f64) -> f64 {
    real(&f.eval(&args(w, x, b)).expect("eval"))
}

/// The gradient by central differences of `eval`, flattened as w, x, b.
fn fd_gradient(f: &Function) -> Vec<f64> {
    let h = 1e-6;
    let mut out = Vec::new();
    for which in 0..2 {
        for i in 0..3 {
            let (mut wp, mut xp, mut wm, mut xm) = (W, X, W, X);
            let (p, m) = if which == 0 {
                (&mut wp, &mut wm)
            } else {
                (&mut xp, &mut xm)
            };
            p[i] += h;
            m[i] -= h;
            out.push((at(f, &wp, &xp, B) - at(f, &wm, &xm, B)) / (2.0 * h));
        }
    }
    out.push((at(f, &W, &X, B + h) - at(f, &W, &X, B - h)) / (2.0 * h));
    out
}

fn flatten(grad: &[Value]) -> Vec<f64> {
    let mut out = reals(&grad[0]);
    out.extend(reals(&grad[1]));
    out.push(real(&grad[2]));
    out
}

fn function() -> Result<Function> {
    let program = Program::load(PROGRAM)?;
    assert_eq!(program.definitions().collect::<Vec<_>>(), ["cube", "f"]);
    program.function("f")
}

#[test]
fn load_eval_and_gradient_against_closed_form_and_finite_differences() -> Result<()> {
    let f = function()?;
    assert_eq!(f.params(), ["w", "x", "b"]);
    let a = args(&W, &X, B);
    let expected: f64 = W.iter().zip(&X).map(|(w, x)| (w * x).sin()).sum::<f64>() + B.powi(3);
    assert!(close(real(&f.eval(&a)?), expected, 1e-14));

    let (value, grad) = f.value_and_grad(&a)?;
    assert!(close(real(&value), expected, 1e-14));
    let got = flatten(&grad);
    let mut closed: Vec<f64> = W.iter().zip(&X).map(|(w, x)| x * (w * x).cos()).collect();
    closed.extend(W.iter().zip(&X).map(|(w, x)| w * (w * x).cos()));
    closed.push(3.0 * B * B);
    let fd = fd_gradient(&f);
    for ((g, c), d) in got.iter().zip(&closed).zip(&fd) {
        assert!(
            close(*g, *c, 1e-12),
            "gradient {got:?} vs closed form {closed:?}"
        );
        assert!(
            close(*g, *d, 1e-6),
            "gradient {got:?} vs finite differences {fd:?}"
        );
    }
    assert_eq!(flatten(&f.grad(&a)?), got);
    Ok(())
}

#[test]
fn pullback_and_pushforward_are_reusable_and_agree_with_one_shot_calls() -> Result<()> {
    let f = function()?.backend(Backend::Engine);
    let a = args(&W, &X, B);
    let grad = flatten(&f.grad(&a)?);

    // One pullback, many cotangents: each is the cotangent times the gradient, as `vjp` says.
    let pullback: Pullback = f.vjp_at(&a)?;
    assert!(close(real(pullback.value()), real(&f.eval(&a)?), 1e-14));
    for c in [1.0, -2.5, 0.0] {
        let got = flatten(&pullback.apply(&Value::from(c))?);
        let (_, one_shot) = f.vjp(&a, &Value::from(c))?;
        assert_eq!(got, flatten(&one_shot));
        for (g, d) in got.iter().zip(&grad) {
            assert!(
                close(*g, c * d, 1e-12),
                "pullback({c}) = {got:?}, gradient {grad:?}"
            );
        }
    }

    // One pushforward, many tangents: the directional derivative, as `jvp` says, and the
    // transpose of the pullback (⟨pullback(1), t⟩ = pushforward(t)).
    let pushforward: Pushforward = f.linearize(&a)?;
    for (k, t) in [[1.0, 0.0, -0.5], [0.25, 2.0, 1.0]].iter().enumerate() {
        let dt = [t[0], -t[1], t[2]];
        let tangents = [
            Value::from(t.to_vec()),
            Value::from(dt.to_vec()),
            Value::from(t[1]),
        ];
        let dy = real(&pushforward.apply(&tangents)?);
        let (_, one_shot) = f.jvp(&a, &tangents)?;
        assert!(close(dy, real(&one_shot), 1e-14));
        let flat_t: Vec<f64> = t.iter().chain(&dt).chain([&t[1]]).copied().collect();
        let dot: f64 = flat_t.iter().zip(&grad).map(|(a, b)| a * b).sum();
        assert!(
            close(dy, dot, 1e-12),
            "tangent {k}: pushforward {dy} vs ⟨grad, t⟩ {dot}"
        );
    }
    Ok(())
}

#[test]
fn wrt_and_the_transposed_route_select_and_reproduce_the_gradient() -> Result<()> {
    let f = function()?;
    let a = args(&W, &X, B);
    let full = flatten(&f.grad(&a)?);

    let fb = f.wrt(&["b"])?;
    assert_eq!(fb.selection(), [false, false, true]);
    let gb = fb.grad(&a)?;
    assert_eq!(gb.len(), 1);
    assert!(close(real(&gb[0]), full[6], 1e-14));
    let (_, dy) = fb.jvp(&a, &[Value::from(1.0)])?;
    assert!(close(real(&dy), full[6], 1e-14));

    let transposed = flatten(&f.via(Via::Transpose).grad(&a)?);
    for (g, t) in full.iter().zip(&transposed) {
        assert!(
            close(*g, *t, 1e-12),
            "{full:?} vs via transpose {transposed:?}"
        );
    }
    Ok(())
}

#[test]
fn errors_are_values_with_kinds_and_positions() {
    let text = "def f (x : Real) : Real = x +\n";
    let err: Error = Program::load(text).expect_err("a syntax error");
    assert_eq!(err.kind(), ErrorKind::Syntax);
    let span: Span = err.span().expect("a position");
    assert!(span.start as usize <= text.len(), "{span:?}");
    let source = Source::new("model.chad", text);
    assert!(err.render(Some(&source)).contains("model.chad"), "{err}");

    let err = Program::load("def f (x : Real) : Real = x && true\n").err();
    assert_eq!(err.map(|e| e.kind()), Some(ErrorKind::Type));

    let f = function().expect("loads");
    let err = f.grad(&[Value::from(1.0)]).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Argument, "{err}");
    assert!(f.wrt(&["nope"]).is_err());
}

#[test]
fn this_file_uses_only_the_crate_root() {
    // The point of this test file: everything above compiles against the curated surface.
    let me = include_str!("curated_api.rs");
    let internal = concat!("chad::", "internals");
    assert!(
        !me.contains(internal),
        "tests/curated_api.rs must not use {internal}"
    );
    assert!(!me.contains(concat!("chad::", "api::")));
}
