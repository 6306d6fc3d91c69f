//! Types of the target language: Cartesian types [`Ty`] and linear types [`LTy`].
//!
//! ```text
//! τ ::= Real | Int | Bool | Unit | τ × τ | τ → τ | τ + τ | Array τ     (the source types)
//!     | L ⊸ L'                                                          (linear functions)
//!     | Lin L                                                           (a linear type as a value)
//! L ::= Real | Unit | L × L | !τ ⊗ L | τ → L | L ⊕ L | Array L
//! ```
//!
//! Cartesian types denote sets; linear types denote commutative monoids (in fact real vector
//! spaces): `L × L` is the biproduct, `!τ ⊗ L` the copower (formal sums of pairs), `τ → L` the
//! power (functions into `L`, pointwise addition), `L ⊕ L` the linear sum (the cotangent of a sum
//! type: a left part and a right part, either of them possibly zero), `Array L` arrays with
//! elementwise addition (and a zero of every length). Both kinds of type are cheap-to-clone
//! handles like [`crate::types::Type`], with equality that short-circuits on shared pointers and
//! recursion that is safe at any depth.

use crate::deep::{Deep, deep};
use crate::types::Type;
use std::fmt;
use std::rc::Rc;

/// A Cartesian type of the target language.
#[derive(Clone)]
pub enum Ty {
    /// Real numbers.
    Real,
    /// Integers.
    Int,
    /// Booleans.
    Bool,
    /// The unit type.
    Unit,
    /// A product `A × B`.
    Prod(Rc<Deep<(Ty, Ty)>>),
    /// A function type `A → B`.
    Fun(Rc<Deep<(Ty, Ty)>>),
    /// A sum type `A + B`.
    Sum(Rc<Deep<(Ty, Ty)>>),
    /// Arrays.
    Array(Rc<Deep<Ty>>),
    /// Linear functions `L ⊸ L'` (monoid homomorphisms), an abstract type.
    LinFun(Rc<Deep<(LTy, LTy)>>),
    /// A linear type used as a value, `Lin L`.
    Lin(Rc<Deep<LTy>>),
}

/// A linear type: denotes a commutative monoid.
#[derive(Clone)]
pub enum LTy {
    /// The reals under addition.
    Real,
    /// The one-element monoid.
    Unit,
    /// The biproduct `L × L'`.
    Prod(Rc<Deep<(LTy, LTy)>>),
    /// The copower `!τ ⊗ L`: finite formal sums of pairs `(a, l)`, an abstract type.
    Copower(Rc<Deep<(Ty, LTy)>>),
    /// The power `τ → L`: functions into `L`, added pointwise.
    Power(Rc<Deep<(Ty, LTy)>>),
    /// The linear sum `L ⊕ L'`, with injections `linl`, `linr` and partial inverses
    /// `fromLeft`, `fromRight`.
    Sum(Rc<Deep<(LTy, LTy)>>),
    /// Arrays, added elementwise.
    Array(Rc<Deep<LTy>>),
}

fn pair<A, B>(a: A, b: B) -> Rc<Deep<(A, B)>> {
    Rc::new(Deep::new((a, b)))
}

impl Ty {
    /// `A × B`.
    pub fn prod(a: Ty, b: Ty) -> Ty {
        Ty::Prod(pair(a, b))
    }
    /// `A → B`.
    pub fn fun(a: Ty, b: Ty) -> Ty {
        Ty::Fun(pair(a, b))
    }
    /// `A + B`.
    pub fn sum(a: Ty, b: Ty) -> Ty {
        Ty::Sum(pair(a, b))
    }
    /// `Array A`.
    pub fn array(a: Ty) -> Ty {
        Ty::Array(Rc::new(Deep::new(a)))
    }
    /// `L ⊸ L'`.
    pub fn lin_fun(a: LTy, b: LTy) -> Ty {
        Ty::LinFun(pair(a, b))
    }
    /// `Lin L`: values of the linear type `L`.
    pub fn lin(l: LTy) -> Ty {
        Ty::Lin(Rc::new(Deep::new(l)))
    }

    /// The right-nested tuple of the given types (`Unit` for none).
    pub fn tuple(tys: &[Ty]) -> Ty {
        deep(|| match tys {
            [] => Ty::Unit,
            [a] => a.clone(),
            [a, rest @ ..] => Ty::prod(a.clone(), Ty::tuple(rest)),
        })
    }

    /// The components of a product type.
    pub fn as_prod(&self) -> Option<(&Ty, &Ty)> {
        match self {
            Ty::Prod(p) => Some((&p.0, &p.1)),
            _ => None,
        }
    }
    /// Domain and codomain of a function type.
    pub fn as_fun(&self) -> Option<(&Ty, &Ty)> {
        match self {
            Ty::Fun(p) => Some((&p.0, &p.1)),
            _ => None,
        }
    }
    /// The sides of a sum type.
    pub fn as_sum(&self) -> Option<(&Ty, &Ty)> {
        match self {
            Ty::Sum(p) => Some((&p.0, &p.1)),
            _ => None,
        }
    }
    /// The element type of an array type.
    pub fn as_array(&self) -> Option<&Ty> {
        match self {
            Ty::Array(a) => Some(a),
            _ => None,
        }
    }
    /// Domain and codomain of a linear function type.
    pub fn as_lin_fun(&self) -> Option<(&LTy, &LTy)> {
        match self {
            Ty::LinFun(p) => Some((&p.0, &p.1)),
            _ => None,
        }
    }
    /// The linear type of `Lin L`.
    pub fn as_lin(&self) -> Option<&LTy> {
        match self {
            Ty::Lin(l) => Some(l),
            _ => None,
        }
    }

    /// The embedding of a source type (every source type is a Cartesian target type).
    pub fn from_source(t: &Type) -> Ty {
        deep(|| match t {
            Type::Real => Ty::Real,
            Type::Int => Ty::Int,
            Type::Bool => Ty::Bool,
            Type::Unit => Ty::Unit,
            Type::Prod(p) => Ty::prod(Ty::from_source(&p.0), Ty::from_source(&p.1)),
            Type::Fun(p) => Ty::fun(Ty::from_source(&p.0), Ty::from_source(&p.1)),
            Type::Sum(p) => Ty::sum(Ty::from_source(&p.0), Ty::from_source(&p.1)),
            Type::Array(a) => Ty::array(Ty::from_source(a)),
        })
    }

    /// The source type this is the embedding of, if it is one.
    pub fn to_source(&self) -> Option<Type> {
        deep(|| {
            Some(match self {
                Ty::Real => Type::Real,
                Ty::Int => Type::Int,
                Ty::Bool => Type::Bool,
                Ty::Unit => Type::Unit,
                Ty::Prod(p) => Type::prod(p.0.to_source()?, p.1.to_source()?),
                Ty::Fun(p) => Type::fun(p.0.to_source()?, p.1.to_source()?),
                Ty::Sum(p) => Type::sum(p.0.to_source()?, p.1.to_source()?),
                Ty::Array(a) => Type::array(a.to_source()?),
                Ty::LinFun(_) | Ty::Lin(_) => return None,
            })
        })
    }
}

impl LTy {
    /// `L × L'`.
    pub fn prod(a: LTy, b: LTy) -> LTy {
        LTy::Prod(pair(a, b))
    }
    /// `!τ ⊗ L`.
    pub fn copower(t: Ty, l: LTy) -> LTy {
        LTy::Copower(pair(t, l))
    }
    /// `τ → L`.
    pub fn power(t: Ty, l: LTy) -> LTy {
        LTy::Power(pair(t, l))
    }
    /// `L ⊕ L'`.
    pub fn sum(a: LTy, b: LTy) -> LTy {
        LTy::Sum(pair(a, b))
    }
    /// `Array L`.
    pub fn array(a: LTy) -> LTy {
        LTy::Array(Rc::new(Deep::new(a)))
    }

    /// The components of a biproduct.
    pub fn as_prod(&self) -> Option<(&LTy, &LTy)> {
        match self {
            LTy::Prod(p) => Some((&p.0, &p.1)),
            _ => None,
        }
    }
    /// The parts of a copower `!τ ⊗ L`.
    pub fn as_copower(&self) -> Option<(&Ty, &LTy)> {
        match self {
            LTy::Copower(p) => Some((&p.0, &p.1)),
            _ => None,
        }
    }
    /// The parts of a power `τ → L`.
    pub fn as_power(&self) -> Option<(&Ty, &LTy)> {
        match self {
            LTy::Power(p) => Some((&p.0, &p.1)),
            _ => None,
        }
    }
    /// The sides of a linear sum.
    pub fn as_sum(&self) -> Option<(&LTy, &LTy)> {
        match self {
            LTy::Sum(p) => Some((&p.0, &p.1)),
            _ => None,
        }
    }
    /// The element type of a linear array type.
    pub fn as_array(&self) -> Option<&LTy> {
        match self {
            LTy::Array(a) => Some(a),
            _ => None,
        }
    }
}

macro_rules! pair_eq {
    ($a:expr, $b:expr) => {
        Rc::ptr_eq($a, $b) || ($a.0 == $b.0 && $a.1 == $b.1)
    };
}

impl PartialEq for Ty {
    fn eq(&self, other: &Ty) -> bool {
        deep(|| match (self, other) {
            (Ty::Real, Ty::Real)
            | (Ty::Int, Ty::Int)
            | (Ty::Bool, Ty::Bool)
            | (Ty::Unit, Ty::Unit) => true,
            (Ty::Prod(a), Ty::Prod(b)) | (Ty::Fun(a), Ty::Fun(b)) | (Ty::Sum(a), Ty::Sum(b)) => {
                pair_eq!(a, b)
            }
            (Ty::Array(a), Ty::Array(b)) => Rc::ptr_eq(a, b) || ***a == ***b,
            (Ty::LinFun(a), Ty::LinFun(b)) => pair_eq!(a, b),
            (Ty::Lin(a), Ty::Lin(b)) => Rc::ptr_eq(a, b) || ***a == ***b,
            _ => false,
        })
    }
}

impl Eq for Ty {}

impl PartialEq for LTy {
    fn eq(&self, other: &LTy) -> bool {
        deep(|| match (self, other) {
            (LTy::Real, LTy::Real) | (LTy::Unit, LTy::Unit) => true,
            (LTy::Prod(a), LTy::Prod(b)) | (LTy::Sum(a), LTy::Sum(b)) => pair_eq!(a, b),
            (LTy::Copower(a), LTy::Copower(b)) | (LTy::Power(a), LTy::Power(b)) => pair_eq!(a, b),
            (LTy::Array(a), LTy::Array(b)) => Rc::ptr_eq(a, b) || ***a == ***b,
            _ => false,
        })
    }
}

impl Eq for LTy {}

/// Printing precedence: arrows (`->`, `⊸`) < sums (`+`, `⊕`, `⊗`) < application (`Array`,
/// `Lin`, `!`) < atoms.
#[derive(Clone, Copy, PartialEq, PartialOrd)]
enum Prec {
    Arrow,
    Sum,
    App,
    Atom,
}

fn parens(
    f: &mut fmt::Formatter<'_>,
    yes: bool,
    body: impl FnOnce(&mut fmt::Formatter<'_>) -> fmt::Result,
) -> fmt::Result {
    if yes {
        f.write_str("(")?;
    }
    body(f)?;
    if yes {
        f.write_str(")")?;
    }
    Ok(())
}

/// A type of either kind, for the shared printing code.
#[derive(Clone, Copy)]
enum Either<'a> {
    C(&'a Ty),
    L(&'a LTy),
}

fn write_tuple<'a>(
    f: &mut fmt::Formatter<'_>,
    first: Either<'a>,
    mut rest: Either<'a>,
) -> fmt::Result {
    f.write_str("(")?;
    write(f, first, Prec::Arrow)?;
    loop {
        f.write_str(", ")?;
        match rest {
            Either::C(Ty::Prod(p)) => {
                write(f, Either::C(&p.0), Prec::Arrow)?;
                rest = Either::C(&p.1);
            }
            Either::L(LTy::Prod(p)) => {
                write(f, Either::L(&p.0), Prec::Arrow)?;
                rest = Either::L(&p.1);
            }
            last => {
                write(f, last, Prec::Arrow)?;
                return f.write_str(")");
            }
        }
    }
}

fn binary(
    f: &mut fmt::Formatter<'_>,
    prec: Prec,
    level: Prec,
    (a, op, b): (Either<'_>, &str, Either<'_>),
) -> fmt::Result {
    let left = if level == Prec::Arrow {
        Prec::Sum
    } else {
        Prec::App
    };
    parens(f, prec > level, |f| {
        write(f, a, left)?;
        f.write_str(op)?;
        write(f, b, level)
    })
}

fn write(f: &mut fmt::Formatter<'_>, t: Either<'_>, prec: Prec) -> fmt::Result {
    use Either::{C, L};
    deep(|| match t {
        C(Ty::Real) | L(LTy::Real) => f.write_str("Real"),
        C(Ty::Int) => f.write_str("Int"),
        C(Ty::Bool) => f.write_str("Bool"),
        C(Ty::Unit) | L(LTy::Unit) => f.write_str("Unit"),
        C(Ty::Prod(p)) => write_tuple(f, C(&p.0), C(&p.1)),
        L(LTy::Prod(p)) => write_tuple(f, L(&p.0), L(&p.1)),
        C(Ty::Fun(p)) => binary(f, prec, Prec::Arrow, (C(&p.0), " -> ", C(&p.1))),
        L(LTy::Power(p)) => binary(f, prec, Prec::Arrow, (C(&p.0), " -> ", L(&p.1))),
        C(Ty::LinFun(p)) => binary(f, prec, Prec::Arrow, (L(&p.0), " ⊸ ", L(&p.1))),
        C(Ty::Sum(p)) => binary(f, prec, Prec::Sum, (C(&p.0), " + ", C(&p.1))),
        L(LTy::Sum(p)) => binary(f, prec, Prec::Sum, (L(&p.0), " ⊕ ", L(&p.1))),
        L(LTy::Copower(p)) => parens(f, prec > Prec::Sum, |f| {
            f.write_str("!")?;
            write(f, C(&p.0), Prec::Atom)?;
            f.write_str(" ⊗ ")?;
            write(f, L(&p.1), Prec::Sum)
        }),
        C(Ty::Array(a)) => parens(f, prec > Prec::App, |f| {
            f.write_str("Array ")?;
            write(f, C(a), Prec::Atom)
        }),
        L(LTy::Array(a)) => parens(f, prec > Prec::App, |f| {
            f.write_str("Array ")?;
            write(f, L(a), Prec::Atom)
        }),
        C(Ty::Lin(l)) => parens(f, prec > Prec::App, |f| {
            f.write_str("Lin ")?;
            write(f, L(l), Prec::Atom)
        }),
    })
}

impl fmt::Display for Ty {
    /// Source syntax for source types; `L ⊸ L'` and `Lin L` for the rest.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write(f, Either::C(self), Prec::Arrow)
    }
}

impl fmt::Debug for Ty {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

impl fmt::Display for LTy {
    /// `Real`, `Unit`, `(L, L')`, `!τ ⊗ L`, `τ -> L`, `L ⊕ L'`, `Array L`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write(f, Either::L(self), Prec::Arrow)
    }
}

impl fmt::Debug for LTy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_types_embed_and_print_the_same() {
        let src = crate::source::parser::parse_type("(Real -> Array (Int + Bool), Unit) -> Real")
            .unwrap();
        let t = Ty::from_source(&src);
        assert_eq!(t.to_string(), src.to_string());
        assert_eq!(t.to_source(), Some(src));
    }

    #[test]
    fn linear_types_print_like_the_paper() {
        let r = LTy::Real;
        let cop = LTy::copower(Ty::fun(Ty::Real, Ty::Real), r.clone());
        assert_eq!(cop.to_string(), "!(Real -> Real) ⊗ Real");
        let f = Ty::lin_fun(LTy::prod(r.clone(), LTy::Unit), LTy::array(cop.clone()));
        assert_eq!(
            f.to_string(),
            "(Real, Unit) ⊸ Array (!(Real -> Real) ⊗ Real)"
        );
        let g = Ty::fun(
            Ty::Real,
            Ty::prod(Ty::Real, Ty::lin_fun(r.clone(), r.clone())),
        );
        assert_eq!(g.to_string(), "Real -> (Real, Real ⊸ Real)");
        let p = LTy::power(Ty::Int, LTy::sum(r.clone(), LTy::Unit));
        assert_eq!(p.to_string(), "Int -> Real ⊕ Unit");
        assert_eq!(
            Ty::lin(LTy::array(r.clone())).to_string(),
            "Lin (Array Real)"
        );
        assert_ne!(Ty::lin(r.clone()), Ty::Real);
        assert_eq!(LTy::sum(r.clone(), r.clone()), LTy::sum(r.clone(), r));
    }

    #[test]
    fn deep_types_compare() {
        let (mut a, mut b) = (LTy::Unit, LTy::Unit);
        for _ in 0..200_000 {
            a = LTy::prod(a, LTy::Real);
            b = LTy::prod(b, LTy::Real);
        }
        assert_eq!(a, b);
    }
}
