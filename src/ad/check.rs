//! Checking a primitive's registered derivative (DESIGN.md §5): finite differences for the
//! forward derivative `Dop`, and the dot-product test `<DopT(x; v), d> = <v, Dop(x; d)>` tying
//! the transposed derivative to it. Both go through the same path AD uses (the forward and
//! reverse models' `prim` rules and the target evaluator), so they test what programs get.

use super::forward::Forward;
use super::reverse::Reverse;
use super::{from_tangent, run, to_tangent};
use crate::ccc::model::Primitives;
use crate::error::{Error, ErrorKind, Result};
use crate::oracle::fd::{add_scaled, leaves, tangent_with};
use crate::prim::{Derivative, Prim, Primitive, Registry};
use crate::target::term::LinPrim;
use crate::target::testing::sample_value;
use crate::target::types::Ty;
use crate::types::Type;
use crate::value::Value;

impl Registry {
    /// Adds a primitive. Fails if the name is taken or reserved, or if a parameter or the result
    /// is not first-order; and, so that a derivative rule of the wrong type (or, given alone,
    /// one that does not transpose) is an error here rather than when a program is
    /// differentiated, if native kernels have the wrong types ([`check_kernels`]) or the AD
    /// modes' images of the primitive do not type-check. (Implemented here rather than in
    /// [`crate::prim`], so that `prim` does not depend on `ad`.)
    pub fn register(&mut self, p: Primitive) -> Result<Prim> {
        let err = |m: String| Error::new(ErrorKind::Input, m);
        self.validate(&p)?;
        if let Derivative::Native { forward, transpose } = p.derivative() {
            check_kernels(&p, forward, transpose).map_err(err)?;
        }
        let p = std::rc::Rc::new(p);
        super::check_rules(&p).map_err(|m| err(format!("primitive `{}`: {m}", p.name())))?;
        self.insert(p.clone());
        Ok(p)
    }

    /// Registers `p`, named `source_name` followed by [`crate::prim::SHADOW_MARK`], and makes it the function
    /// called `source_name` from source in this registry, in place of the builtin function of
    /// that name (a definition with derivative clauses named like a builtin, e.g. `softplus`).
    /// Fails if `source_name` is not a function of this registry or the shadowing name is
    /// taken.
    pub fn shadow(&mut self, source_name: &str, p: Primitive) -> Result<Prim> {
        if self.function(source_name).is_none()
            || p.name() != format!("{source_name}{}", crate::prim::SHADOW_MARK)
        {
            return Err(Error::new(
                ErrorKind::Input,
                format!("`{source_name}` is not a function primitive that can be shadowed"),
            ));
        }
        let prim = self.register(p)?;
        self.alias(source_name, prim.clone());
        Ok(prim)
    }
}

/// Checks that native kernels have the types the AD modes need: the forward kernel maps the
/// argument tuple `x : A` to `F2 A ⊸ F2 B`, the transposed one to `R2 B ⊸ R2 A`.
pub fn check_kernels(
    p: &Primitive,
    forward: &LinPrim,
    transpose: &LinPrim,
) -> std::result::Result<(), String> {
    let (dom, cod) = (p.domain(), p.result().clone());
    let (f, r) = (Forward::new(), Reverse::new());
    let want = [
        (
            "forward",
            forward,
            (Ty::from_source(&dom), f.tangent(&dom), f.tangent(&cod)),
        ),
        (
            "transposed",
            transpose,
            (Ty::from_source(&dom), r.cotangent(&cod), r.cotangent(&dom)),
        ),
    ];
    for (what, k, (param, kd, kc)) in want {
        if k.param() != &param || k.dom() != &kd || k.cod() != &kc {
            return Err(format!(
                "the {what} derivative kernel `{}` of primitive `{}` must take `{param}` to \
                 `{kd} ⊸ {kc}`, but it takes `{}` to `{} ⊸ {}`",
                k.name(),
                p.name(),
                k.param(),
                k.dom(),
                k.cod()
            ));
        }
    }
    Ok(())
}

/// What [`check_primitive`] tested.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Checked {
    /// Points at which both tests ran.
    pub points: usize,
    /// Sampled points skipped because the primitive failed or was not finite there.
    pub skipped: usize,
}

/// Tests a primitive's derivative at `points` random points (seeded): the forward derivative
/// against central finite differences (relative tolerance `1e-5`), and the transposed
/// derivative against the forward one by the dot-product test (relative tolerance `1e-9`).
/// Points where the primitive fails (e.g. `dot` of different lengths) or gives non-finite
/// values (e.g. `log` of a negative number) are skipped; it is an error if too few remain.
pub fn check_primitive(p: &Prim, points: usize, seed: u64) -> std::result::Result<Checked, String> {
    let fail = |m: String| Err(format!("primitive `{}`: {m}", p.name()));
    let fwd = Forward::new()
        .prim(p)
        .map_err(|e| e.message().to_string())?;
    let rev = Reverse::new()
        .prim(p)
        .map_err(|e| e.message().to_string())?;
    let (dom, cod) = (p.domain(), p.result().clone());
    let dom_t = Ty::from_source(&dom);
    let mut done = Checked {
        points: 0,
        skipped: 0,
    };
    let mut k = 0u64;
    while done.points < points && k < 20 * points as u64 + 20 {
        k += 1;
        let s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15).wrapping_add(k);
        let x = sample_value(&dom_t, s);
        let y = match p.eval(&x) {
            Ok(y) if finite(&y) => y,
            _ => {
                done.skipped += 1;
                continue;
            }
        };
        let d = direction(&dom, &x, s ^ 0xd1b5);
        let h = 1e-6;
        let (plus, minus) = (
            p.eval(&add_scaled(&dom, &x, &d, h)),
            p.eval(&add_scaled(&dom, &x, &d, -h)),
        );
        let (Ok(plus), Ok(minus)) = (plus, minus) else {
            done.skipped += 1;
            continue;
        };
        let (lp, lm) = (leaves(&plus), leaves(&minus));
        if lp.len() != lm.len() || !lp.iter().chain(&lm).all(|v| v.is_finite()) {
            done.skipped += 1;
            continue;
        }
        let fd: Vec<f64> = lp
            .iter()
            .zip(&lm)
            .map(|(a, b)| (a - b) / (2.0 * h))
            .collect();

        let eval = |m| run(m, x.clone()).map_err(|e| e.message().to_string());
        let (y_f, dop) = eval(&fwd)?;
        let (y_r, dopt) = eval(&rev)?;
        if y_f.same(&y).is_none_or(|s| !s) || y_r.same(&y).is_none_or(|s| !s) {
            return fail(format!("AD's primal at {x} is not its value {y}"));
        }
        let d_lin = to_tangent(&dom, &x, &d).map_err(|e| e.message().to_string())?;
        let tangent = from_tangent(&cod, &y, &dop.apply(&d_lin).map_err(|e| e.to_string())?);
        let jd = leaves(&tangent);
        if jd.len() != fd.len() {
            return fail(format!("Dop at {x} has the wrong shape: {tangent}"));
        }
        for (a, b) in jd.iter().zip(&fd) {
            // Finite differences lose about half the digits; allow for that.
            if (a - b).abs() > 1e-5 * (1.0 + a.abs().max(b.abs())) {
                return fail(format!(
                    "Dop(x; d) disagrees with finite differences at x = {x}, d = {d}: \
                     {tangent} vs {fd:?}"
                ));
            }
        }
        let v = direction(&cod, &y, s ^ 0x5bd1);
        let v_lin = to_tangent(&cod, &y, &v).map_err(|e| e.message().to_string())?;
        let back = from_tangent(&dom, &x, &dopt.apply(&v_lin).map_err(|e| e.to_string())?);
        let lhs = dot(&leaves(&back), &leaves(&d));
        let rhs = dot(&leaves(&v), &jd);
        if (lhs - rhs).abs() > 1e-9 * (1.0 + lhs.abs().max(rhs.abs())) {
            return fail(format!(
                "dot-product test fails at x = {x}: <DopT(x; v), d> = {lhs} but <v, Dop(x; d)> \
                 = {rhs} (d = {d}, v = {v})"
            ));
        }
        done.points += 1;
    }
    if done.points < points {
        return fail(format!(
            "only {} of {points} sampled points were usable",
            done.points
        ));
    }
    Ok(done)
}

fn finite(v: &Value) -> bool {
    leaves(v).iter().all(|x| x.is_finite())
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// A random tangent of `x : ty` (same sum sides and array lengths), seeded.
fn direction(ty: &Type, x: &Value, seed: u64) -> Value {
    let mut k = seed;
    tangent_with(ty, x, &mut || {
        k = k.wrapping_add(0x9e37_79b9_7f4a_7c15);
        sample_value(&Ty::Real, k).expect_real()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prim::Registry;

    #[test]
    fn every_builtin_passes() {
        for p in Registry::builtin().all() {
            let r = check_primitive(p, 30, 7);
            assert!(r.is_ok(), "{}", r.unwrap_err());
        }
    }
}
