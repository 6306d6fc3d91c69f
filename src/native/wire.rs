//! Source values in the native binary form, written and read in one pass.
//!
//! A native library's arguments and results cross in the binary form of IR values
//! ([`super::encode`], [`super::decode`], generated side [`crate::ir::rust::ffi`]). Converting
//! a source value to an IR value first ([`interp::from_value`]) and encoding that builds a
//! boxed IR value per array element, and so does the way back: for a large array of reals
//! that was most of a call's time through the library (a gradient of `logsumexp` at 1.28·10⁶
//! reals: 125 ms, of which 11 ms computing). The functions here write what
//! `encode(from_value(ty, v))` writes and read what `to_value(ty, decode(..))` reads
//! (tangents: [`interp::tangent_from_value`], [`interp::tangent_to_value`]), the same bytes and
//! values, directly, an array of reals as one block.
//!
//! Each follows the source type and the IR type together; where the IR type does not have the
//! layout the source type gives it (which the lowering does not produce for a definition's
//! parameters and results), that part goes through IR values as before.

use super::{decode, encode, take, u64_le};
use crate::error::Result;
use crate::ir::interp;
use crate::ir::{Program, Ty, TyKind};
use crate::types::Type;
use crate::value::Value;

/// Whether `t` is the IR's real type.
fn is_f64(p: &Program, t: Ty) -> bool {
    matches!(p.types.kind(t), TyKind::F64)
}

/// An argument array's length, checked against the limit [`interp::check_lengths`] applies.
fn put_len(n: usize, out: &mut Vec<u8>) -> Result<()> {
    if n > crate::value::MAX_ARRAY_LEN as usize {
        return Err(crate::error::Error::runtime(format!(
            "an argument's array has {n} elements, over the limit of {} elements",
            crate::value::MAX_ARRAY_LEN
        )));
    }
    out.extend_from_slice(&(n as u64).to_le_bytes());
    Ok(())
}

fn put_reals(xs: &[f64], out: &mut Vec<u8>) -> Result<()> {
    put_len(xs.len(), out)?;
    let k = out.len();
    out.resize(k + 8 * xs.len(), 0);
    for (b, x) in out[k..].chunks_exact_mut(8).zip(xs) {
        b.copy_from_slice(&x.to_le_bytes());
    }
    Ok(())
}

/// Writes `v : ty` as the IR value `from_value(ty, v)` of type `t` (checking array lengths as
/// [`interp::check_lengths`] does).
pub fn put_value(p: &Program, t: Ty, ty: &Type, v: &Value, out: &mut Vec<u8>) -> Result<()> {
    crate::deep::deep(|| match (p.types.kind(t), ty, v) {
        (TyKind::F64, Type::Real, Value::Real(x)) => {
            out.extend_from_slice(&x.to_le_bytes());
            Ok(())
        }
        (TyKind::I64, Type::Int, Value::Int(i)) => {
            out.extend_from_slice(&i.to_le_bytes());
            Ok(())
        }
        (TyKind::Bool, Type::Bool, Value::Bool(b)) => {
            out.push(u8::from(*b));
            Ok(())
        }
        (TyKind::Unit, Type::Unit, _) => Ok(()),
        (TyKind::Tuple(cs), Type::Prod(pt), Value::Pair(q)) if cs.len() == 2 => {
            put_value(p, cs[0], &pt.0, &q.0, out)?;
            put_value(p, cs[1], &pt.1, &q.1, out)
        }
        (TyKind::Enum(e), Type::Sum(pt), Value::Inl(x) | Value::Inr(x)) => {
            let (tag, side) = match v {
                Value::Inl(_) => (0u32, &pt.0),
                _ => (1u32, &pt.1),
            };
            match p.types.enums()[*e as usize].variants.get(tag as usize) {
                Some(&(_, payload)) => {
                    out.extend_from_slice(&tag.to_le_bytes());
                    put_value(p, payload, side, x, out)
                }
                None => through_ir(p, t, ty, v, out),
            }
        }
        (TyKind::Array(e), Type::Array(a), Value::RealArray(xs))
            if is_f64(p, *e) && matches!(***a, Type::Real) =>
        {
            put_reals(xs, out)
        }
        (TyKind::Array(e), Type::Array(a), Value::Array(xs)) => {
            put_len(xs.len(), out)?;
            xs.iter().try_for_each(|x| put_value(p, *e, a, x, out))
        }
        _ => through_ir(p, t, ty, v, out),
    })
}

fn through_ir(p: &Program, t: Ty, ty: &Type, v: &Value, out: &mut Vec<u8>) -> Result<()> {
    let x = interp::from_value(ty, v);
    interp::check_lengths(&p.types, t, &x)?;
    encode(p, t, &x, out);
    Ok(())
}

/// Writes the tangent `d : ty.tangent()` as the IR value `tangent_from_value(ty, d)` of type
/// `t`.
pub fn put_tangent(p: &Program, t: Ty, ty: &Type, d: &Value, out: &mut Vec<u8>) -> Result<()> {
    crate::deep::deep(|| match (p.types.kind(t), ty, d) {
        (TyKind::F64, Type::Real, Value::Real(x)) => {
            out.extend_from_slice(&x.to_le_bytes());
            Ok(())
        }
        (TyKind::Unit, Type::Int | Type::Bool | Type::Unit, _) => Ok(()),
        (TyKind::Tuple(cs), Type::Prod(pt), Value::Pair(q)) if cs.len() == 2 => {
            put_tangent(p, cs[0], &pt.0, &q.0, out)?;
            put_tangent(p, cs[1], &pt.1, &q.1, out)
        }
        // Both sides, the other one zero.
        (TyKind::Tuple(cs), Type::Sum(pt), Value::Inl(x)) if cs.len() == 2 => {
            put_tangent(p, cs[0], &pt.0, x, out)?;
            put_ir(p, cs[1], &interp::zero_tangent(&pt.1), out)
        }
        (TyKind::Tuple(cs), Type::Sum(pt), Value::Inr(x)) if cs.len() == 2 => {
            put_ir(p, cs[0], &interp::zero_tangent(&pt.0), out)?;
            put_tangent(p, cs[1], &pt.1, x, out)
        }
        (TyKind::Array(e), Type::Array(a), Value::RealArray(xs))
            if is_f64(p, *e) && matches!(***a, Type::Real) =>
        {
            put_reals(xs, out)
        }
        (TyKind::Array(e), Type::Array(a), Value::Array(xs)) => {
            put_len(xs.len(), out)?;
            xs.iter().try_for_each(|x| put_tangent(p, *e, a, x, out))
        }
        _ => put_ir(p, t, &interp::tangent_from_value(ty, d), out),
    })
}

fn put_ir(p: &Program, t: Ty, x: &interp::Val, out: &mut Vec<u8>) -> Result<()> {
    interp::check_lengths(&p.types, t, x)?;
    encode(p, t, x, out);
    Ok(())
}

/// `n` reals.
fn get_reals(r: &mut &[u8], n: usize) -> Option<Vec<f64>> {
    let bytes = take(r, n.checked_mul(8)?)?;
    Some(
        bytes
            .chunks_exact(8)
            .map(|b| f64::from_le_bytes(b.try_into().expect("eight bytes")))
            .collect(),
    )
}

/// Reads an IR value of type `t` as the source value `to_value(ty, ..)` of it.
pub fn get_value(p: &Program, t: Ty, ty: &Type, r: &mut &[u8]) -> Option<Value> {
    crate::deep::deep(|| match (p.types.kind(t), ty) {
        (TyKind::F64, Type::Real) => Some(Value::Real(f64::from_bits(u64_le(r)?))),
        (TyKind::I64, Type::Int) => Some(Value::Int(u64_le(r)? as i64)),
        (TyKind::Bool, Type::Bool) => Some(Value::Bool(take(r, 1)?[0] != 0)),
        (TyKind::Unit, Type::Unit) => Some(Value::Unit),
        (TyKind::Tuple(cs), Type::Prod(pt)) if cs.len() == 2 => {
            let a = get_value(p, cs[0], &pt.0, r)?;
            let b = get_value(p, cs[1], &pt.1, r)?;
            Some(Value::pair(a, b))
        }
        (TyKind::Enum(e), Type::Sum(pt)) => {
            let tag = u32::from_le_bytes(take(r, 4)?.try_into().ok()?);
            let payload = p.types.enums()[*e as usize].variants.get(tag as usize)?.1;
            Some(if tag == 0 {
                Value::inl(get_value(p, payload, &pt.0, r)?)
            } else {
                Value::inr(get_value(p, payload, &pt.1, r)?)
            })
        }
        (TyKind::Array(e), Type::Array(a)) => {
            let n = u64_le(r)? as usize;
            if is_f64(p, *e) && matches!(***a, Type::Real) {
                return Some(Value::reals(get_reals(r, n)?));
            }
            let mut xs = Vec::with_capacity(n.min(r.len()));
            for _ in 0..n {
                xs.push(get_value(p, *e, a, r)?);
            }
            Some(Value::array(a, xs))
        }
        _ => Some(interp::to_value(ty, &decode(p, t, r)?)),
    })
}

/// Reads an IR value of type `t` as the tangent `tangent_to_value(ty, x, ..)` at `x : ty`
/// (arrays zero-padded to `x`'s length, a sum's tangent on `x`'s side).
pub fn get_tangent(p: &Program, t: Ty, ty: &Type, x: &Value, r: &mut &[u8]) -> Option<Value> {
    crate::deep::deep(|| match (p.types.kind(t), ty) {
        (TyKind::F64, Type::Real) => Some(Value::Real(f64::from_bits(u64_le(r)?))),
        (TyKind::Unit, Type::Int | Type::Bool | Type::Unit) => Some(Value::Unit),
        (TyKind::Tuple(cs), Type::Prod(pt)) if cs.len() == 2 => {
            let (xa, xb) = x.expect_pair();
            let a = get_tangent(p, cs[0], &pt.0, xa, r)?;
            let b = get_tangent(p, cs[1], &pt.1, xb, r)?;
            Some(Value::pair(a, b))
        }
        // Both sides are there; `x`'s is read, the other skipped.
        (TyKind::Tuple(cs), Type::Sum(pt)) if cs.len() == 2 => match x {
            Value::Inl(a) => {
                let d = get_tangent(p, cs[0], &pt.0, a, r)?;
                decode(p, cs[1], r)?;
                Some(Value::inl(d))
            }
            Value::Inr(b) => {
                decode(p, cs[0], r)?;
                Some(Value::inr(get_tangent(p, cs[1], &pt.1, b, r)?))
            }
            other => panic!("internal error: a value of a sum type is {other}"),
        },
        (TyKind::Array(e), Type::Array(a)) => {
            let n = u64_le(r)? as usize;
            let m = x.array_len();
            if is_f64(p, *e) && matches!(***a, Type::Real) {
                let mut ds = get_reals(r, n)?;
                ds.resize(m, 0.0);
                return Some(Value::reals(ds));
            }
            let xs = x.array_items();
            let mut out = Vec::with_capacity(m);
            for k in 0..n {
                match xs.get(k) {
                    Some(xk) => out.push(get_tangent(p, *e, a, xk, r)?),
                    None => {
                        decode(p, *e, r)?;
                    }
                }
            }
            for xk in xs.iter().skip(n) {
                out.push(interp::tangent_to_value(a, xk, &interp::zero_tangent(a)));
            }
            let tt = a.tangent().expect("first-order");
            Some(Value::array(&tt, out))
        }
        _ => Some(interp::tangent_to_value(ty, x, &decode(p, t, r)?)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::Types;
    use crate::ir::lower::source_ty;
    use proptest::prelude::*;

    /// First-order types up to three levels deep.
    fn types() -> impl Strategy<Value = Type> {
        let leaf = prop_oneof![
            3 => Just(Type::Real),
            1 => Just(Type::Int),
            1 => Just(Type::Bool),
            1 => Just(Type::Unit),
        ];
        leaf.prop_recursive(3, 12, 2, |t| {
            prop_oneof![
                (t.clone(), t.clone()).prop_map(|(a, b)| Type::prod(a, b)),
                (t.clone(), t.clone()).prop_map(|(a, b)| Type::sum(a, b)),
                t.prop_map(Type::array),
            ]
        })
    }

    /// The IR type of `tangent_from_value(ty, ..)`'s values.
    fn tangent_ty(types: &mut Types, ty: &Type) -> Ty {
        match ty {
            Type::Real => Ty::F64,
            Type::Int | Type::Bool | Type::Unit => Ty::UNIT,
            Type::Prod(p) | Type::Sum(p) => {
                let (a, b) = (tangent_ty(types, &p.0), tangent_ty(types, &p.1));
                types.tuple(vec![a, b])
            }
            Type::Array(a) => {
                let a = tangent_ty(types, a);
                types.array(a)
            }
            Type::Fun(_) => unreachable!(),
        }
    }

    /// A type with a value of it, another value (a point), and a tangent.
    fn cases() -> impl Strategy<Value = (Type, Value, Value, Value)> {
        types().prop_flat_map(|ty| {
            let tt = ty.tangent().expect("first-order");
            (
                Just(ty.clone()),
                crate::random::value(&ty),
                crate::random::value(&ty),
                crate::random::value(&tt),
            )
        })
    }

    fn same(a: &Value, b: &Value) -> bool {
        format!("{a:?}") == format!("{b:?}")
    }

    proptest! {
        /// Each function writes the bytes, and reads the value, of the route through IR values.
        #[test]
        fn the_wire_is_the_route_through_ir_values((ty, v, x, d) in cases()) {
            let mut p = Program::default();
            let t = source_ty(&mut p.types, &ty);
            let dt = tangent_ty(&mut p.types, &ty);

            let mut direct = Vec::new();
            put_value(&p, t, &ty, &v, &mut direct).unwrap();
            let mut via = Vec::new();
            encode(&p, t, &interp::from_value(&ty, &v), &mut via);
            prop_assert_eq!(&direct, &via);
            let back = get_value(&p, t, &ty, &mut &direct[..]).unwrap();
            let back_via = interp::to_value(&ty, &decode(&p, t, &mut &via[..]).unwrap());
            prop_assert!(same(&back, &back_via), "{back:?} / {back_via:?}");
            prop_assert!(same(&back, &v));

            let mut direct = Vec::new();
            put_tangent(&p, dt, &ty, &d, &mut direct).unwrap();
            let mut via = Vec::new();
            encode(&p, dt, &interp::tangent_from_value(&ty, &d), &mut via);
            prop_assert_eq!(&direct, &via);
            // Read at a point of another shape: arrays padded or cut, sums on its side.
            let back = get_tangent(&p, dt, &ty, &x, &mut &direct[..]).unwrap();
            let ir = decode(&p, dt, &mut &via[..]).unwrap();
            let back_via = interp::tangent_to_value(&ty, &x, &ir);
            prop_assert!(same(&back, &back_via), "{back:?} / {back_via:?}");
        }
    }

    #[test]
    fn arrays_over_the_limit_are_refused() {
        let n = crate::value::MAX_ARRAY_LEN as usize;
        let mut out = Vec::new();
        put_len(n, &mut out).unwrap();
        let e = put_len(n + 1, &mut out).unwrap_err();
        assert_eq!(
            e.message(),
            format!(
                "an argument's array has {} elements, over the limit of {n} elements",
                n + 1
            )
        );
    }
}
