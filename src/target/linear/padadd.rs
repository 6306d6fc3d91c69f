//! `padAdd`: the addition of two arrays of reals padded with zeros, as one primitive, so that
//! concretised derivative code stays small when it is differentiated again
//! (`theory-notes/07-ir-and-codegen.md` §8, `theory-notes/12-nested-ad.md`).
//!
//! ```text
//! padAdd : Array Real → Array Real → Array Real
//! padAdd xs ys = ys                                     if length xs = 0
//!              = xs                                     if length ys = 0
//!              = build (max n m) (\i -> xs!?i + ys!?i)  otherwise
//! ```
//!
//! where `n`, `m` are the lengths and `a!?i` is `a ! i` below the length and `0.0` past it:
//! the linear arrays' addition (arrays denote finitely supported sequences), exactly as
//! [`super::concrete::plus`] wrote it out before for `Array Real` (two padding `build`s and a
//! `map2`, about 30 nodes, bit for bit the same values, `-0.0` included). Each level of nested
//! reverse mode differentiated that expansion again; the primitive is one node and one loop.
//!
//! It is linear in both arguments, so its derivatives are
//!
//! ```text
//! forward:     D padAdd (xs, ys; dxs, dys) = dxs + dys        (the linear arrays' plus)
//! transposed:  D padAdd^T (xs, ys; v) = (lbuild (length xs) (\k -> v ! k),
//!                                        lbuild (length ys) (\k -> v ! k))
//! ```
//!
//! Like [`super::scatter`] it is not a builtin of the source language: only the concretiser
//! introduces it, and its registration type-checks both rules.

use crate::error::Result;
use crate::prim::{Derivative, Primitive};
use crate::target::term::{LTerm, LTermKind, Term, TermKind, Var};
use crate::target::types::Ty;
use crate::types::Type;
use crate::value::Value;

/// The primitive's name.
pub const NAME: &str = "padAdd";

internal_primitive!(
    /// The `padAdd` primitive (the same shared handle every time on a thread).
    PAD_ADD,
    pad_add
);

/// Evaluation: `padAdd xs ys` on the argument pair `(xs, ys)`.
pub fn eval(arg: &Value) -> Result<Value> {
    let (xs, ys) = arg.expect_pair();
    let (a, b) = (xs.expect_reals(), ys.expect_reals());
    if a.is_empty() {
        return Ok(ys.clone());
    }
    if b.is_empty() {
        return Ok(xs.clone());
    }
    let at = |v: &[f64], i: usize| v.get(i).copied().unwrap_or(0.0);
    Ok(Value::reals(
        (0..a.len().max(b.len()))
            .map(|i| at(a, i) + at(b, i))
            .collect(),
    ))
}

/// `lbuild (length a) (\k -> v ! k)`: the part of the cotangent `v` over `a`'s elements.
fn over(a: &Term, v: &LTerm) -> LTerm {
    let k = Var::fresh("k", Ty::Int);
    let read = LTerm::mk(LTermKind::Index(v.clone(), Term::var(&k)));
    LTerm::mk(LTermKind::Build(
        Term::mk(TermKind::Length(a.clone())),
        k,
        read,
    ))
}

/// The forward rule: `dxs + dys`.
fn forward(_: &[Term], d: &[LTerm]) -> LTerm {
    LTerm::plus(d[0].clone(), d[1].clone())
}

/// The transposed rule: each argument's part of the cotangent.
fn transpose(x: &[Term], v: &LTerm) -> Vec<LTerm> {
    vec![over(&x[0], v), over(&x[1], v)]
}

/// The primitive with its derivative, unregistered.
pub fn primitive() -> Primitive {
    let arr = || Type::array(Type::Real);
    Primitive::new(
        NAME,
        vec![arr(), arr()],
        arr(),
        crate::prim::Fixity::Internal,
        eval,
    )
    .with_derivative(Derivative::terms(forward, transpose))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bits(v: &Value) -> Vec<u64> {
        v.expect_reals().iter().map(|x| x.to_bits()).collect()
    }

    #[test]
    fn pads_with_zeros_and_keeps_an_argument_when_the_other_is_empty() {
        let add = |a: &[f64], b: &[f64]| {
            eval(&Value::pair(
                Value::reals(a.to_vec()),
                Value::reals(b.to_vec()),
            ))
            .unwrap()
        };
        assert_eq!(add(&[1.0, 2.0], &[10.0]).expect_reals(), &[11.0, 2.0]);
        assert_eq!(
            add(&[1.0], &[10.0, 20.0, 30.0]).expect_reals(),
            &[11.0, 20.0, 30.0]
        );
        // An empty side returns the other as it is; a padded element is 0.0 + x (-0.0 -> +0.0).
        assert_eq!(bits(&add(&[], &[-0.0])), vec![(-0.0f64).to_bits()]);
        assert_eq!(bits(&add(&[-0.0], &[])), vec![(-0.0f64).to_bits()]);
        assert_eq!(
            bits(&add(&[1.0], &[2.0, -0.0])),
            vec![3.0f64.to_bits(), 0.0f64.to_bits()]
        );
    }
}
