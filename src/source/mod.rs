//! The source language: syntax, parser, type checker, typed core terms, printer.
//!
//! ```text
//! text --parser--> syntax::Program --check--> term::Program (typed core terms)
//! ```

pub mod check;
pub mod lexer;
pub mod parser;
pub mod print;
pub mod syntax;
pub mod term;

use crate::error::{Error, ErrorKind, Result};
use crate::prim::Registry;
use crate::types::Type;
use crate::value::{Value, tuple_components};
use syntax::{Expr, ExprKind};

/// The candidate closest to a misspelt `name`, if one is close enough to be worth suggesting:
/// the same up to case, or within an edit distance that grows with the length (1 for names
/// of up to 2 characters, 2 up to 5, 3 beyond), so that a one-letter name is never "corrected"
/// into an unrelated builtin. Ties go to the earliest candidate (callers list the most likely
/// first: locals, then definitions, then builtins).
pub(crate) fn suggest(name: &str, candidates: impl IntoIterator<Item = String>) -> Option<String> {
    let len = name.chars().count();
    let limit = match len {
        0..=2 => 1,
        3..=5 => 2,
        _ => 3,
    };
    let lower = name.to_lowercase();
    let mut best: Option<(usize, String)> = None;
    for c in candidates {
        if c == name {
            continue;
        }
        // Twice the edit distance; 1 for a difference of case only.
        let d = if c.to_lowercase() == lower {
            1
        } else {
            2 * edit_distance(name, &c)
        };
        if d <= 2 * limit
            && d < 2 * c.chars().count().max(len)
            && best.as_ref().is_none_or(|b| d < b.0)
        {
            best = Some((d, c));
        }
    }
    best.map(|(_, c)| c)
}

/// Levenshtein distance (insertions, deletions, substitutions), in characters.
pub(crate) fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur.push(sub.min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}

/// Parses and type-checks a program text.
pub fn load(text: &str, reg: &Registry) -> Result<term::Program> {
    let ast = parser::parse_program(text)?;
    check::check_program(&ast, reg)
}

/// [`load`], with `grad`, `jvp` and `vjp` inside the program elaborated by `nested`
/// ([`crate::ad::nested::load`] supplies AD).
pub fn load_with(
    text: &str,
    reg: &Registry,
    nested: &dyn check::Differentiate,
) -> Result<term::Program> {
    let ast = parser::parse_program(text)?;
    check::check_program_with(&ast, reg, Some(nested))
}

/// Reads a value of type `ty` written in the literal syntax: `1.5`, `-2`, `true`, `()`,
/// `[1.0, 2.0]`, `(1.0, [2.0, 3.0])`, `inl 2.0`, `inr (1.0, 2.0)`. An integer is accepted where a
/// `Real` is expected. Errors are [`ErrorKind::Argument`] with a span into `text`.
pub fn parse_value(text: &str, ty: &Type) -> Result<Value> {
    let e = parser::parse_expr(text).map_err(|e| {
        Error::at(
            ErrorKind::Argument,
            e.span().unwrap_or_default(),
            e.message().to_string(),
        )
    })?;
    value_of_expr(&e, ty)
}

fn value_of_expr(e: &Expr, ty: &Type) -> Result<Value> {
    crate::deep::deep(|| {
        let bad = || {
            Error::at(
                ErrorKind::Argument,
                e.span,
                format!("expected a value of type `{ty}`"),
            )
        };
        Ok(match (&e.kind, ty) {
            (ExprKind::Real(x), Type::Real) => Value::Real(*x),
            (ExprKind::Int(i), Type::Real) => Value::Real(*i as f64),
            (ExprKind::Int(i), Type::Int) => Value::Int(*i),
            (ExprKind::Var(x), Type::Real) if matches!(&**x, "inf" | "NaN" | "nan") => {
                Value::Real(if &**x == "inf" {
                    f64::INFINITY
                } else {
                    f64::NAN
                })
            }
            (ExprKind::Neg(x), Type::Real | Type::Int) => match value_of_expr(x, ty)? {
                Value::Real(r) => Value::Real(-r),
                Value::Int(i) => Value::Int(i.checked_neg().ok_or_else(bad)?),
                _ => unreachable!("numeric types give numbers"),
            },
            (ExprKind::Bool(b), Type::Bool) => Value::Bool(*b),
            (ExprKind::Unit, Type::Unit) => Value::Unit,
            (ExprKind::Tuple(items), Type::Prod(_)) => {
                let comps = tuple_components(ty, items.len());
                if comps.len() != items.len() {
                    return Err(bad().with_note(format!(
                        "a tuple of type `{ty}` has {} components, this one has {}",
                        comps.len(),
                        items.len()
                    )));
                }
                Value::tuple(
                    items
                        .iter()
                        .zip(&comps)
                        .map(|(i, t)| value_of_expr(i, t))
                        .collect::<Result<_>>()?,
                )
            }
            (ExprKind::Array(items), Type::Array(elem)) => Value::array(
                elem,
                items
                    .iter()
                    .map(|i| value_of_expr(i, elem))
                    .collect::<Result<_>>()?,
            ),
            (ExprKind::App(h, args), Type::Sum(s)) if args.len() == 1 => match &h.kind {
                ExprKind::Var(x) if &**x == "inl" => Value::inl(value_of_expr(&args[0], &s.0)?),
                ExprKind::Var(x) if &**x == "inr" => Value::inr(value_of_expr(&args[0], &s.1)?),
                _ => return Err(bad()),
            },
            // `inl -1` parses as `inl - 1`; as a value it can only mean `inl (-1)`.
            (ExprKind::Binary(syntax::BinOp::Sub, h, n), Type::Sum(s))
                if matches!(&h.kind, ExprKind::Var(x) if &**x == "inl" || &**x == "inr")
                    && matches!(n.kind, ExprKind::Int(_) | ExprKind::Real(_)) =>
            {
                let neg = |t: &Type| match (value_of_expr(n, t)?, t) {
                    (Value::Real(x), _) => Ok(Value::Real(-x)),
                    (Value::Int(i), _) => Ok(Value::Int(-i)),
                    _ => Err(bad()),
                };
                match &h.kind {
                    ExprKind::Var(x) if &**x == "inl" => Value::inl(neg(&s.0)?),
                    _ => Value::inr(neg(&s.1)?),
                }
            }
            (ExprKind::Annot(x, t), _) if t.ty == *ty => value_of_expr(x, ty)?,
            (_, Type::Fun(_)) => {
                return Err(Error::at(
                    ErrorKind::Argument,
                    e.span,
                    format!("a value of function type `{ty}` cannot be given as an argument"),
                ));
            }
            _ => return Err(bad()),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Type;

    #[test]
    fn values_in_literal_syntax() {
        let ty = Type::tuple(&[
            Type::Real,
            Type::array(Type::Real),
            Type::sum(Type::Real, Type::prod(Type::Real, Type::Real)),
            Type::Int,
            Type::Bool,
            Type::Unit,
        ]);
        let v = parse_value("(1, [2.0, -3], inr (1.0, 2e-3), -7, true, ())", &ty).unwrap();
        let s = Type::sum(Type::Real, Type::Int);
        assert_eq!(parse_value("inl -1", &s).unwrap().to_string(), "inl (-1.0)");
        assert_eq!(parse_value("inr -2", &s).unwrap().to_string(), "inr (-2)");
        assert_eq!(
            v.to_string(),
            "(1.0, [2.0, -3.0], inr (1.0, 0.002), -7, true, ())"
        );
        assert!(v.has_type(&ty));
        let e = parse_value("[1.0, true]", &Type::array(Type::Real)).unwrap_err();
        assert_eq!(e.message(), "expected a value of type `Real`");
        assert_eq!(e.span().unwrap().start, 6);
        let e = parse_value("(1.0, 2.0, 3.0)", &Type::prod(Type::Real, Type::Real)).unwrap_err();
        assert!(e.notes()[0].contains("has 2 components"), "{:?}", e.notes());
        let e = parse_value("1.0 +", &Type::Real).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Argument);
        assert!(parse_value("2.5", &Type::Int).is_err());
        assert!(parse_value("sin 1.0", &Type::Real).is_err());
    }
}
