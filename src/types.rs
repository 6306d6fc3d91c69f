//! Types of the source language: the objects of the free cartesian closed category.
//!
//! `τ ::= Real | Int | Bool | Unit | τ × τ | τ → τ | τ + τ | Array τ`.
//!
//! A [`Type`] is a cheap-to-clone handle (leaves inline, composite types behind `Rc`), so a
//! typing context of n variables, a nested product `((1 × A1) × A2) × ... × An`, is built in O(1)
//! per variable by sharing the prefix, and equality checks short-circuit on shared pointers.

use crate::deep::{Deep, deep};
use std::fmt;
use std::hash::{Hash, Hasher};
use std::rc::Rc;

/// A source type.
#[derive(Clone)]
pub enum Type {
    /// Real numbers (`f64`).
    Real,
    /// Integers (`i64`); discrete, no tangent.
    Int,
    /// Booleans; discrete, no tangent.
    Bool,
    /// The unit type `1` (written `Unit` or `()`).
    Unit,
    /// A product `A × B`; n-ary tuples are right-nested.
    Prod(Rc<Deep<(Type, Type)>>),
    /// A function type `A → B`.
    Fun(Rc<Deep<(Type, Type)>>),
    /// A sum type `A + B`.
    Sum(Rc<Deep<(Type, Type)>>),
    /// Arrays of any length.
    Array(Rc<Deep<Type>>),
}

impl Type {
    /// `A × B`.
    pub fn prod(a: Type, b: Type) -> Type {
        Type::Prod(Rc::new(Deep::new((a, b))))
    }

    /// `A → B`.
    pub fn fun(a: Type, b: Type) -> Type {
        Type::Fun(Rc::new(Deep::new((a, b))))
    }

    /// `A + B`.
    pub fn sum(a: Type, b: Type) -> Type {
        Type::Sum(Rc::new(Deep::new((a, b))))
    }

    /// `Array A`.
    pub fn array(a: Type) -> Type {
        Type::Array(Rc::new(Deep::new(a)))
    }

    /// The right-nested tuple of the given types: `()` for none, `A` for one,
    /// `A × (B × C)` for three.
    pub fn tuple(tys: &[Type]) -> Type {
        deep(|| match tys {
            [] => Type::Unit,
            [a] => a.clone(),
            [a, rest @ ..] => Type::prod(a.clone(), Type::tuple(rest)),
        })
    }

    /// `A1 → A2 → ... → B`.
    pub fn curried(params: &[Type], result: Type) -> Type {
        params
            .iter()
            .rev()
            .fold(result, |acc, p| Type::fun(p.clone(), acc))
    }

    /// The components of a product type.
    pub fn as_prod(&self) -> Option<(&Type, &Type)> {
        match self {
            Type::Prod(p) => Some((&p.0, &p.1)),
            _ => None,
        }
    }

    /// Domain and codomain of a function type.
    pub fn as_fun(&self) -> Option<(&Type, &Type)> {
        match self {
            Type::Fun(p) => Some((&p.0, &p.1)),
            _ => None,
        }
    }

    /// The two sides of a sum type.
    pub fn as_sum(&self) -> Option<(&Type, &Type)> {
        match self {
            Type::Sum(p) => Some((&p.0, &p.1)),
            _ => None,
        }
    }

    /// The element type of an array type.
    pub fn as_array(&self) -> Option<&Type> {
        match self {
            Type::Array(a) => Some(a),
            _ => None,
        }
    }

    /// True for types built without `→`: values of these types can be printed, compared and
    /// given on the command line.
    pub fn is_first_order(&self) -> bool {
        deep(|| match self {
            Type::Real | Type::Int | Type::Bool | Type::Unit => true,
            Type::Fun(_) => false,
            Type::Prod(p) | Type::Sum(p) => p.0.is_first_order() && p.1.is_first_order(),
            Type::Array(a) => a.is_first_order(),
        })
    }

    /// The source type of (co)tangents of a first-order type: `Real` stays `Real`, the discrete
    /// types `Int`, `Bool` and `Unit` become `Unit`, and products, sums and arrays are mapped
    /// componentwise. (On first-order types the forward tangent type `F2` and the reverse
    /// cotangent type `R2` agree, and this is their source-level reading: a tangent of a sum
    /// value lies on the same side as the value.) `None` for types containing functions.
    pub fn tangent(&self) -> Option<Type> {
        deep(|| {
            Some(match self {
                Type::Real => Type::Real,
                Type::Int | Type::Bool | Type::Unit => Type::Unit,
                Type::Prod(p) => Type::prod(p.0.tangent()?, p.1.tangent()?),
                Type::Sum(p) => Type::sum(p.0.tangent()?, p.1.tangent()?),
                Type::Array(a) => Type::array(a.tangent()?),
                Type::Fun(_) => return None,
            })
        })
    }

    /// True if the two handles share their representation (an O(1) sufficient test for
    /// equality).
    pub fn ptr_eq(&self, other: &Type) -> bool {
        match (self, other) {
            (Type::Prod(a), Type::Prod(b))
            | (Type::Fun(a), Type::Fun(b))
            | (Type::Sum(a), Type::Sum(b)) => Rc::ptr_eq(a, b),
            (Type::Array(a), Type::Array(b)) => Rc::ptr_eq(a, b),
            _ => false,
        }
    }

    /// Number of constructors in the type (for generators and size limits).
    pub fn size(&self) -> usize {
        deep(|| match self {
            Type::Real | Type::Int | Type::Bool | Type::Unit => 1,
            Type::Prod(p) | Type::Fun(p) | Type::Sum(p) => 1 + p.0.size() + p.1.size(),
            Type::Array(a) => 1 + a.size(),
        })
    }
}

impl PartialEq for Type {
    fn eq(&self, other: &Type) -> bool {
        deep(|| match (self, other) {
            (Type::Real, Type::Real)
            | (Type::Int, Type::Int)
            | (Type::Bool, Type::Bool)
            | (Type::Unit, Type::Unit) => true,
            (Type::Prod(a), Type::Prod(b))
            | (Type::Fun(a), Type::Fun(b))
            | (Type::Sum(a), Type::Sum(b)) => Rc::ptr_eq(a, b) || (a.0 == b.0 && a.1 == b.1),
            (Type::Array(a), Type::Array(b)) => Rc::ptr_eq(a, b) || ***a == ***b,
            _ => false,
        })
    }
}

impl Eq for Type {}

impl Hash for Type {
    fn hash<H: Hasher>(&self, h: &mut H) {
        deep(|| {
            std::mem::discriminant(self).hash(h);
            match self {
                Type::Real | Type::Int | Type::Bool | Type::Unit => {}
                Type::Prod(p) | Type::Fun(p) | Type::Sum(p) => {
                    p.0.hash(h);
                    p.1.hash(h);
                }
                Type::Array(a) => a.hash(h),
            }
        })
    }
}

/// Precedence levels for printing: `->` < `+` < `Array` application < atoms.
#[derive(Clone, Copy, PartialEq, PartialOrd)]
enum Prec {
    Arrow,
    Sum,
    App,
}

fn write_type(t: &Type, prec: Prec, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    deep(|| match t {
        Type::Real => f.write_str("Real"),
        Type::Int => f.write_str("Int"),
        Type::Bool => f.write_str("Bool"),
        Type::Unit => f.write_str("Unit"),
        Type::Prod(_) => {
            // (A, B, C) for A × (B × C): n-ary tuples are right-nested.
            f.write_str("(")?;
            let mut cur = t;
            let mut first = true;
            while let Type::Prod(p) = cur {
                if !first {
                    f.write_str(", ")?;
                }
                first = false;
                write_type(&p.0, Prec::Arrow, f)?;
                cur = &p.1;
            }
            f.write_str(", ")?;
            write_type(cur, Prec::Arrow, f)?;
            f.write_str(")")
        }
        Type::Fun(p) => {
            let paren = prec > Prec::Arrow;
            if paren {
                f.write_str("(")?;
            }
            write_type(&p.0, Prec::Sum, f)?;
            f.write_str(" -> ")?;
            write_type(&p.1, Prec::Arrow, f)?;
            if paren {
                f.write_str(")")?;
            }
            Ok(())
        }
        Type::Sum(p) => {
            let paren = prec > Prec::Sum;
            if paren {
                f.write_str("(")?;
            }
            write_type(&p.0, Prec::App, f)?;
            f.write_str(" + ")?;
            write_type(&p.1, Prec::Sum, f)?;
            if paren {
                f.write_str(")")?;
            }
            Ok(())
        }
        Type::Array(a) => {
            let paren = prec > Prec::App;
            if paren {
                f.write_str("(")?;
            }
            f.write_str("Array ")?;
            // The argument of `Array` must be atomic: `Array (Array Real)`.
            match &***a {
                Type::Fun(_) | Type::Sum(_) | Type::Array(_) => {
                    f.write_str("(")?;
                    write_type(a, Prec::Arrow, f)?;
                    f.write_str(")")?;
                }
                _ => write_type(a, Prec::Arrow, f)?,
            }
            if paren {
                f.write_str(")")?;
            }
            Ok(())
        }
    })
}

impl fmt::Display for Type {
    /// Prints in the surface syntax, e.g. `(Real, Array Real) -> Real + Int`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_type(self, Prec::Arrow, f)
    }
}

impl fmt::Debug for Type {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_uses_surface_syntax_with_minimal_parentheses() {
        let r = Type::Real;
        let f = Type::fun(r.clone(), Type::fun(r.clone(), r.clone()));
        assert_eq!(f.to_string(), "Real -> Real -> Real");
        let g = Type::fun(Type::fun(r.clone(), r.clone()), r.clone());
        assert_eq!(g.to_string(), "(Real -> Real) -> Real");
        let t = Type::tuple(&[r.clone(), Type::Int, Type::array(r.clone())]);
        assert_eq!(t.to_string(), "(Real, Int, Array Real)");
        let s = Type::sum(Type::array(r.clone()), Type::sum(Type::Int, Type::Unit));
        assert_eq!(s.to_string(), "Array Real + Int + Unit");
        let s2 = Type::sum(Type::sum(Type::Int, Type::Unit), r.clone());
        assert_eq!(s2.to_string(), "(Int + Unit) + Real");
        let a = Type::array(Type::array(Type::fun(r.clone(), r.clone())));
        assert_eq!(a.to_string(), "Array (Array (Real -> Real))");
        let nested = Type::prod(Type::prod(r.clone(), r.clone()), r.clone());
        assert_eq!(nested.to_string(), "((Real, Real), Real)");
    }

    #[test]
    fn equality_is_structural() {
        let a = Type::prod(Type::Real, Type::array(Type::Int));
        let b = Type::prod(Type::Real, Type::array(Type::Int));
        assert_eq!(a, b);
        assert!(!a.ptr_eq(&b));
        assert_ne!(a, Type::prod(Type::Real, Type::array(Type::Real)));
        assert_ne!(
            Type::fun(Type::Real, Type::Real),
            Type::sum(Type::Real, Type::Real)
        );
    }

    #[test]
    fn deep_context_types_compare_and_drop() {
        let mut a = Type::Unit;
        let mut b = Type::Unit;
        for _ in 0..200_000 {
            a = Type::prod(a, Type::Real);
            b = Type::prod(b, Type::Real);
        }
        assert_eq!(a, b);
    }
}
