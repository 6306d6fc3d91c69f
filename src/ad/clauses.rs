//! Testing the custom derivative clauses of a program (`chad check --derivatives`;
//! LANGUAGE.md, "Custom derivatives"): a user's rule is used as given, so a wrong one is
//! reported here rather than silently trusted.
//!
//! For every definition `f` with clauses, at random points `x` (each `Real` uniform in
//! `[-1.5, 1.5]`, arrays of length 3) with random tangents `d` and result cotangents `c`:
//!
//! * the `jvp` clause (forward CHAD, which runs it) against central finite differences of the
//!   body: `jvp f x d ≈ (f(x + h d) - f(x - h d)) / 2h`;
//! * the dot-product test between the reverse derivative (reverse CHAD: the `vjp` clause, or
//!   the transposed `jvp` clause) and the forward one: `<vjp f x c, d> = <c, jvp f x d>`.
//!
//! Points where the body is not finite or not differentiable (as far as finite differences can
//! tell) are skipped; a definition with no usable point is reported as untested.

use crate::error::{Error, ErrorKind, Result, Span};
use crate::oracle::{approx_eq, fd};
use crate::source::term::Program;
use crate::types::Type;
use crate::value::Value;

/// A clause that disagrees with its definition.
#[derive(Clone, Debug)]
pub struct Disagreement {
    /// The definition's name.
    pub def: String,
    /// The definition's position.
    pub span: Span,
    /// What disagrees, with the point.
    pub message: String,
}

/// A small deterministic generator (SplitMix64).
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[-1, 1)`.
    fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 52) as f64 - 1.0
    }
}

/// A random value of a type built from `Real`, tuples and arrays (length 3).
fn random_value(ty: &Type, rng: &mut Rng) -> Value {
    crate::deep::deep(|| match ty {
        Type::Real => Value::Real(1.5 * rng.unit()),
        Type::Prod(p) => Value::pair(random_value(&p.0, rng), random_value(&p.1, rng)),
        Type::Array(e) => Value::array(e, (0..3).map(|_| random_value(e, rng)).collect()),
        Type::Int => Value::Int(0),
        Type::Bool => Value::Bool(false),
        _ => Value::Unit,
    })
}

fn dot(a: &Value, b: &Value) -> f64 {
    fd::leaves(a)
        .iter()
        .zip(fd::leaves(b))
        .map(|(x, y)| x * y)
        .sum()
}

fn finite(v: &Value) -> bool {
    fd::leaves(v).iter().all(|x| x.is_finite())
}

fn show(args: &[Value]) -> String {
    args.iter()
        .map(|a| a.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Tests the clauses of every definition that has them at `points` random points (seeded by
/// `seed`), returning those that disagree. Errors are those of running the program.
pub fn check_clauses(prog: &Program, points: usize, seed: u64) -> Result<Vec<Disagreement>> {
    let mut out = Vec::new();
    let mut rng = Rng(seed);
    for (i, def) in prog.defs.iter().enumerate() {
        let Some(custom) = &def.custom else { continue };
        let entry = prog.entry(i);
        let types: Vec<Type> = def.params.iter().map(|p| p.ty.clone()).collect();
        let report = |message: String| Disagreement {
            def: def.name().to_string(),
            span: def.span,
            message: format!("`{}`: {message}", def.name()),
        };
        let mut tested = 0;
        let mut found = None;
        for _ in 0..points.max(1) * 4 {
            if tested == points.max(1) {
                break;
            }
            let args: Vec<Value> = types.iter().map(|t| random_value(t, &mut rng)).collect();
            let Ok(y) = crate::eval::eval_entry(&entry, &args) else {
                continue;
            };
            if !finite(&y) {
                continue;
            }
            let d: Vec<Value> = types
                .iter()
                .zip(&args)
                .map(|(t, a)| fd::tangent_with(t, a, &mut || rng.unit()))
                .collect();
            let Ok(estimate) = fd::jvp(&entry, &args, &d, 1e-5) else {
                continue;
            };
            if !finite(&estimate) {
                continue;
            }
            tested += 1;
            let (_, jv) = super::jvp(&entry, &args, &d)?;
            let (a, b) = (fd::leaves(&jv), fd::leaves(&estimate));
            let scale = b.iter().fold(1.0f64, |m, x| m.max(x.abs()));
            if let Some(k) = (0..a.len()).find(|&k| !approx_eq(a[k], b[k], 1e-4, 1e-5 * scale)) {
                found = Some(report(format!(
                    "its `jvp` clause gives {jv} but finite differences of its body give \
                     {estimate} (component {k}), at {} along {}",
                    show(&args),
                    show(&d)
                )));
                break;
            }
            let c = fd::tangent_with(&def.ret, &y, &mut || rng.unit());
            let (_, g) = super::vjp(&entry, &args, &c)?;
            let lhs: f64 = g.iter().zip(&d).map(|(g, d)| dot(g, d)).sum();
            let rhs = dot(&c, &jv);
            let size = fd::leaves(&c).len() + d.iter().map(|t| fd::leaves(t).len()).sum::<usize>();
            if !approx_eq(lhs, rhs, 1e-8, 1e-12 * size as f64) {
                let which = if custom.vjp.is_some() {
                    "`vjp` clause"
                } else {
                    "transposed `jvp` clause"
                };
                found = Some(report(format!(
                    "its {which} fails the dot-product test: <vjp({c}), d> = {lhs} but \
                     <{c}, jvp(d)> = {rhs}, at {} along {}",
                    show(&args),
                    show(&d)
                )));
                break;
            }
        }
        if found.is_none() && tested == 0 {
            found = Some(report(
                "no random point where the body is finite and differentiable; the clauses \
                 are untested"
                    .to_string(),
            ));
        }
        out.extend(found);
    }
    Ok(out)
}

/// The error `chad check --derivatives` reports for disagreeing clauses: at the first one,
/// naming each.
pub fn disagreement_error(found: &[Disagreement]) -> Option<Error> {
    let first = found.first()?;
    let names: Vec<String> = found.iter().map(|d| format!("`{}`", d.def)).collect();
    let mut e = Error::new(
        ErrorKind::Type,
        format!(
            "{} derivative clause{} disagree{} with {} definition{}: {}",
            found.len(),
            if found.len() == 1 { "" } else { "s" },
            if found.len() == 1 { "s" } else { "" },
            if found.len() == 1 { "its" } else { "their" },
            if found.len() == 1 { "" } else { "s" },
            names.join(", ")
        ),
    )
    .with_span(first.span);
    for d in found {
        e = e.with_note(d.message.clone());
    }
    Some(e)
}
