//! The language's conveniences, elaborated into the core forms they stand for, so that
//! evaluation, AD, the IR and native code handle them with no case of their own:
//!
//! | written | elaborated (`a`, `b`, `n`, ... bound once by `let`) |
//! | --- | --- |
//! | `pi` | the literal `3.141592653589793` |
//! | `mean xs` | `sum a / toReal (length a)` (`NaN` for `[]`) |
//! | `maximum xs`, `minimum xs` | `a ! argmax a`, `a ! argmin a` (an error for `[]`) |
//! | `reverse xs` | `build n (\i -> a ! (n - 1 - i))` |
//! | `zip xs ys` | `build (min n m) (\i -> (a ! i, b ! i))` (the shorter length, as Haskell's) |
//! | `unzip ps` | `(map fst p, map snd p)` |
//! | `slice xs i j` | `build (max 0 (j - i)) (\k -> a ! (i + k))`: elements `i` to `j - 1` |
//! | `concat xs ys` | `build (n + length b) (\i -> if i < n then a ! i else b ! (i - n))` |
//! | `x ^ y` | `pow x y` on `Real`; `x * x` and `x * x * x` for the exponents 2 and 3 written as literals; `pow x (toReal k)` for an `Int` exponent `k`; the primitive `ipow` on `Int` |
//! | `i % n` | the primitive `irem` (`Int` only) |
//!
//! `mean`, `maximum` and `minimum` have fixed types (`Array Real -> Real`) and can be passed as
//! values anywhere; the polymorphic ones are applied where they appear, or passed where the
//! expected type says what they are (`map reverse m`, `map2 zip xs ys`).

use super::{Arg, Checker, POLY};
use crate::error::{Error, Result, Span};
use crate::prim::op;
use crate::source::syntax::{Expr, ExprKind};
use crate::source::term::{Lit, Pat, Term, TermKind, Var};
use crate::types::Type;

/// Whether `name` is one of the conveniences elaborated here.
pub(super) fn is_sugar(name: &str) -> bool {
    matches!(
        name,
        "pi" | "mean" | "maximum" | "minimum" | "reverse" | "zip" | "unzip" | "slice" | "concat"
    )
}

/// The parameter types of the conveniences whose types are fixed.
pub(super) fn fixed_params(name: &str) -> Option<Vec<Type>> {
    match name {
        "mean" | "maximum" | "minimum" => Some(vec![Type::array(Type::Real)]),
        _ => None,
    }
}

/// A hint for a name from another language (`len`, `ln`, `mod`, ...) that chad spells
/// differently.
pub(super) fn synonym(name: &str) -> Option<String> {
    let to = |s: &str| Some(s.to_string());
    match name {
        "len" | "size" | "numel" => to("the length of an array is `length xs`"),
        "ln" => to("the natural logarithm is `log`"),
        "log2" | "log10" => to("write `log x / log 2.0` (`log` is the natural logarithm)"),
        "mod" | "rem" | "fmod" | "modulo" => to("the remainder of Int division is `i % n`"),
        "power" | "powf" | "powi" => to("a power is `x ^ y` (or `pow x y`)"),
        "sqr" | "square" => to("a square is `x ^ 2` (or `x * x`)"),
        "arcsin" => to("did you mean `asin`?"),
        "arccos" => to("did you mean `acos`?"),
        "arctan" => to("did you mean `atan`?"),
        "arctan2" => to("did you mean `atan2`?"),
        "fabs" => to("did you mean `abs`?"),
        "head" => to("the first element of an array is `xs ! 0`"),
        "fromIntegral" | "float" | "toFloat" | "double" | "real" | "toDouble" => {
            to("convert an Int to a Real with `toReal`")
        }
        "int" | "round" | "truncate" | "ceil" | "ceiling" | "toInt" => {
            to("`floor` converts a Real to an Int (`floor (x + 0.5)` rounds)")
        }
        "lambda" | "fun" | "fn" => to("a function is written `\\(x : T) -> e`"),
        "average" | "avg" => to("did you mean `mean`?"),
        "amax" | "max_elem" => to("did you mean `maximum`?"),
        "amin" | "min_elem" => to("did you mean `minimum`?"),
        "append" | "concatenate" => to("did you mean `concat`?"),
        "take" => to("the first n elements of xs are `slice xs 0 n`"),
        "drop" => to("xs without its first n elements is `slice xs n (length xs)`"),
        "logistic" | "expit" => to("did you mean `sigmoid`?"),
        _ => None,
    }
}

impl Checker<'_> {
    /// One of the conveniences of [`is_sugar`], applied to exactly its arguments.
    pub(super) fn sugar(
        &mut self,
        name: &str,
        args: &[Arg],
        expected: Option<&Type>,
        span: Span,
    ) -> Result<Term> {
        let mk = |kind| Term::new(kind, span);
        let reals = Type::array(Type::Real);
        Ok(match name {
            "pi" => mk(TermKind::Lit(Lit::Real(std::f64::consts::PI))),
            "mean" => {
                let xs = self.check_arg(args[0], &reals)?;
                bind(xs, "xs", span, |a| {
                    let n = prim("toReal", vec![mk(TermKind::Length(a.clone()))], span);
                    prim("div", vec![prim("sum", vec![a], span), n], span)
                })
            }
            "maximum" | "minimum" => {
                let xs = self.check_arg(args[0], &reals)?;
                let arg = if name == "maximum" {
                    "argmax"
                } else {
                    "argmin"
                };
                bind(xs, "xs", span, |a| {
                    let i = prim(arg, vec![a.clone()], span);
                    mk(TermKind::Index(a, i))
                })
            }
            "reverse" => {
                let xs = self.array_arg(name, args[0], expected)?;
                bind(xs, "xs", span, |a| {
                    let n = mk(TermKind::Length(a.clone()));
                    bind(n, "n", span, |n| {
                        let last = prim("isub", vec![n.clone(), int(1, span)], span);
                        let f = lam("i", Type::Int, span, |i| {
                            mk(TermKind::Index(a, prim("isub", vec![last, i], span)))
                        });
                        mk(TermKind::Build(n, f))
                    })
                })
            }
            "zip" => {
                let (exp_a, exp_b) = match expected.and_then(Type::as_array).and_then(Type::as_prod)
                {
                    Some((l, r)) => (Some(Type::array(l.clone())), Some(Type::array(r.clone()))),
                    None => (None, None),
                };
                let xs = self.array_arg(name, args[0], exp_a.as_ref())?;
                let ys = self.array_arg(name, args[1], exp_b.as_ref())?;
                bind(xs, "xs", span, |a| {
                    bind(ys, "ys", span, |b| {
                        let n = mk(TermKind::Length(a.clone()));
                        let m = mk(TermKind::Length(b.clone()));
                        bind(n, "n", span, |n| {
                            bind(m, "m", span, |m| {
                                let shorter = prim("ilt", vec![n.clone(), m.clone()], span);
                                let len = mk(TermKind::If(shorter, n, m));
                                let f = lam("i", Type::Int, span, |i| {
                                    let x = mk(TermKind::Index(a, i.clone()));
                                    let y = mk(TermKind::Index(b, i));
                                    mk(TermKind::Pair(x, y))
                                });
                                mk(TermKind::Build(len, f))
                            })
                        })
                    })
                })
            }
            "unzip" => {
                let exp = match expected.and_then(Type::as_prod) {
                    Some((Type::Array(l), Type::Array(r))) => {
                        Some(Type::array(Type::prod((**l).clone(), (**r).clone())))
                    }
                    _ => None,
                };
                let ps = self.array_arg(name, args[0], exp.as_ref())?;
                let elem = ps.ty.as_array().expect("array_arg").clone();
                if elem.as_prod().is_none() {
                    return Err(Error::type_error(
                        args[0].span(),
                        format!("`unzip` expects an array of pairs, found `{}`", ps.ty),
                    )
                    .with_label(format!("this has type `{}`", ps.ty)));
                }
                bind(ps, "ps", span, |p| {
                    let fst = lam("q", elem.clone(), span, |q| mk(TermKind::Fst(q)));
                    let snd = lam("q", elem.clone(), span, |q| mk(TermKind::Snd(q)));
                    mk(TermKind::Pair(
                        mk(TermKind::Map(fst, p.clone())),
                        mk(TermKind::Map(snd, p)),
                    ))
                })
            }
            "slice" => {
                let xs = self.array_arg(name, args[0], expected)?;
                let i = self.check_arg(args[1], &Type::Int)?;
                let j = self.check_arg(args[2], &Type::Int)?;
                bind(xs, "xs", span, |a| {
                    bind(i, "i", span, |i| {
                        bind(j, "j", span, |j| {
                            let empty = prim("ilt", vec![j.clone(), i.clone()], span);
                            let diff = prim("isub", vec![j, i.clone()], span);
                            let len = mk(TermKind::If(empty, int(0, span), diff));
                            let f = lam("k", Type::Int, span, |k| {
                                mk(TermKind::Index(a, prim("iadd", vec![i, k], span)))
                            });
                            mk(TermKind::Build(len, f))
                        })
                    })
                })
            }
            "concat" => {
                let xs = self.array_arg(name, args[0], expected)?;
                let ys = self.check_arg(args[1], &xs.ty.clone())?;
                bind(xs, "xs", span, |a| {
                    bind(ys, "ys", span, |b| {
                        let n = mk(TermKind::Length(a.clone()));
                        bind(n, "n", span, |n| {
                            let m = mk(TermKind::Length(b.clone()));
                            let len = prim("iadd", vec![n.clone(), m], span);
                            let f = lam("i", Type::Int, span, |i| {
                                let first = prim("ilt", vec![i.clone(), n.clone()], span);
                                let x = mk(TermKind::Index(a, i.clone()));
                                let y = mk(TermKind::Index(b, prim("isub", vec![i, n], span)));
                                mk(TermKind::If(first, x, y))
                            });
                            mk(TermKind::Build(len, f))
                        })
                    })
                })
            }
            _ => unreachable!("is_sugar({name})"),
        })
    }

    /// An argument that must be an array: checked against `expected` if given, else inferred.
    fn array_arg(&mut self, name: &str, a: Arg, expected: Option<&Type>) -> Result<Term> {
        let t = match expected {
            Some(t @ Type::Array(_)) => self.check_arg(a, t)?,
            _ => self.infer_arg(a)?,
        };
        if t.ty.as_array().is_none() {
            return Err(Error::type_error(
                a.span(),
                format!("`{name}` expects an array, found `{}`", t.ty),
            )
            .with_label(format!("this has type `{}`", t.ty)));
        }
        Ok(t)
    }

    /// `a ^ b`: a `Real` power (`pow`; products for the literal exponents 2 and 3; an `Int`
    /// exponent converted with `toReal`) or an `Int` power (`ipow`).
    pub(super) fn power(
        &mut self,
        a: &Expr,
        b: &Expr,
        expected: Option<&Type>,
        span: Span,
    ) -> Result<Term> {
        let base = match expected {
            Some(t @ (Type::Real | Type::Int)) => self.check(a, t)?,
            _ if super::is_flexible(a) && !super::is_flexible(b) => {
                // `2 ^ x`: the exponent decides.
                let tb = self.infer(b)?;
                let t = if tb.ty == Type::Int {
                    Type::Int
                } else {
                    Type::Real
                };
                let ta = self.check(a, &t)?;
                return self.power_of(ta, b, Some(tb), span);
            }
            _ => self.infer(a)?,
        };
        self.power_of(base, b, None, span)
    }

    fn power_of(&mut self, base: Term, b: &Expr, exp: Option<Term>, span: Span) -> Result<Term> {
        let mk = |kind| Term::new(kind, span);
        match base.ty {
            Type::Real => {
                // `x ^ 2` and `x ^ 3`, literally: products (as fast as writing them out).
                let small = match b.kind {
                    ExprKind::Int(k @ (2 | 3)) if exp.is_none() => Some(k),
                    ExprKind::Real(k) if exp.is_none() && (k == 2.0 || k == 3.0) => Some(k as i64),
                    _ => None,
                };
                if let Some(k) = small {
                    return Ok(bind(base, "x", span, |x| {
                        let sq = prim("mul", vec![x.clone(), x.clone()], span);
                        if k == 2 {
                            sq
                        } else {
                            prim("mul", vec![sq, x], span)
                        }
                    }));
                }
                let e = match exp {
                    Some(e) => e,
                    None if matches!(b.kind, ExprKind::Int(_)) => self.check(b, &Type::Real)?,
                    None => self.infer(b)?,
                };
                let e = match e.ty {
                    Type::Real => e,
                    Type::Int => prim("toReal", vec![e], span),
                    _ => {
                        return Err(Error::type_error(
                            b.span,
                            format!(
                                "the exponent of `^` must be a Real or an Int, found `{}`",
                                e.ty
                            ),
                        )
                        .with_label(format!("this has type `{}`", e.ty)));
                    }
                };
                Ok(prim("pow", vec![base, e], span))
            }
            Type::Int => {
                let e = match exp {
                    Some(e) => e,
                    None => self.check(b, &Type::Int).map_err(|e| {
                        e.with_note("an Int power takes an Int exponent; for a Real power, make the base a Real: `toReal n ^ y`")
                    })?,
                };
                if e.ty != Type::Int {
                    return Err(super::mismatch(b.span, &Type::Int, &e.ty));
                }
                Ok(mk(TermKind::Prim(op("ipow"), vec![base, e])))
            }
            _ => Err(Error::type_error(
                base.span,
                format!(
                    "operator `^` expects a Real or an Int base, found `{}`",
                    base.ty
                ),
            )
            .with_label(format!("this has type `{}`", base.ty))),
        }
    }

    /// `a % b`, on `Int` only.
    pub(super) fn remainder(&mut self, a: &Expr, b: &Expr, span: Span) -> Result<Term> {
        let ta = self.infer(a)?;
        if ta.ty != Type::Int {
            let mut e = Error::type_error(
                a.span,
                format!("operator `%` expects Int operands, found `{}`", ta.ty),
            )
            .with_label(format!("this has type `{}`", ta.ty));
            if ta.ty == Type::Real {
                e = e.with_note(
                    "`%` is the remainder of Int division; for Reals, write `x - y * toReal (floor (x / y))`",
                );
            }
            return Err(e);
        }
        let tb = self.check(b, &Type::Int)?;
        Ok(prim("irem", vec![ta, tb], span))
    }

    /// `map f xs` with `f` a polymorphic builtin named bare (`map reverse m`, `map fst ps`,
    /// `map2 zip xs ys`): `\x -> f x` at the element types.
    pub(super) fn builtin_as_function(
        &mut self,
        name: &str,
        params: &[Type],
        span: Span,
    ) -> Result<Term> {
        let vars: Vec<Var> = params
            .iter()
            .zip(["x", "y", "z"].iter().cycle())
            .map(|(t, n)| Var::fresh(*n, t.clone()))
            .collect();
        let core: Vec<Term> = vars
            .iter()
            .map(|v| Term::new(TermKind::Var(v.clone()), span))
            .collect();
        let refs: Vec<Arg> = core.iter().map(Arg::Core).collect();
        let body = self.builtin(name, &refs, None, span)?;
        Ok(vars
            .into_iter()
            .rev()
            .fold(body, |b, v| Term::new(TermKind::Lam(v, b), span)))
    }

    /// Whether `e` is a polymorphic builtin named bare, taking `n` arguments.
    pub(super) fn bare_poly(&self, e: &Expr, n: usize) -> Option<std::rc::Rc<str>> {
        match &e.kind {
            ExprKind::Var(x)
                if self.builtin_name(x) && POLY.iter().any(|(p, k)| **p == **x && *k == n) =>
            {
                Some(x.clone())
            }
            _ => None,
        }
    }
}

/// `name args` with a builtin primitive.
fn prim(name: &str, args: Vec<Term>, span: Span) -> Term {
    Term::new(TermKind::Prim(op(name), args), span)
}

fn int(i: i64, span: Span) -> Term {
    Term::new(TermKind::Lit(Lit::Int(i)), span)
}

/// `\(name : ty) -> body x`.
fn lam(name: &str, ty: Type, span: Span, body: impl FnOnce(Term) -> Term) -> Term {
    let v = Var::fresh(name, ty);
    let b = body(Term::new(TermKind::Var(v.clone()), span));
    Term::new(TermKind::Lam(v, b), span)
}

/// `body t`, with `t` bound by a `let` first unless it is a variable or a literal (so that it
/// is evaluated once, where written).
fn bind(t: Term, name: &str, span: Span, body: impl FnOnce(Term) -> Term) -> Term {
    if matches!(t.kind, TermKind::Var(_) | TermKind::Lit(_)) {
        return body(t);
    }
    let v = Var::fresh(name, t.ty.clone());
    let b = body(Term::new(TermKind::Var(v.clone()), span));
    Term::new(TermKind::Let(Pat::Var(v), t, b), span)
}
