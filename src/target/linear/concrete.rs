//! Concrete representations of the linear types as ordinary source types (CHAD paper §9.2-9.3):
//! what [`crate::target::concretize`] turns derivative code into, so that it can be run by the
//! source evaluator and differentiated again.
//!
//! The abstract types of [`super`] become source types, and each linear operation a source
//! term over them, defined by type:
//!
//! | linear type `L` | `C(L)` | zero | `a + b` |
//! | --- | --- | --- | --- |
//! | `Real` | `Real` | `0.0` | `a + b` |
//! | `1` | `Unit` | `()` | `()` |
//! | `L × L'`, `L ⊕ L'` | `C(L) × C(L')` | `(0, 0)` | componentwise |
//! | `Array L` | `Array C(L)` | `[]` | elementwise (`map2` for equal lengths), the shorter padded with zeros |
//! | `!τ ⊗ L` | `Array (C(τ) × C(L))` | `[]` | concatenation |
//! | `τ → L` (power) | `C(τ) → C(L)` | `\_ -> 0` | pointwise |
//!
//! and on Cartesian types `C(L ⊸ L') = C(L) → C(L')`, `C(Lin L) = C(L)`, the identity on the
//! source type formers. These are the run-time representations of [`super`] written in the
//! source language: the linear sum `⊕` is a pair (as [`super::Lin`] stores it: `linl a` is
//! `(a, 0)`), arrays denote finitely supported sequences (the zero array `[]` has every length;
//! indexing past the end gives zero), a copower is the list of its pairs, a linear map is a
//! function. Dense, though: a one-hot array costs its length here (O(1) in [`super`]), and a
//! copower sum is a copy (O(1) there); see `theory-notes/12-nested-ad.md`.
//!
//! Every function here builds a well-typed source term or returns an error saying which type
//! has no concrete form; none panics.

use crate::deep::deep;
use crate::error::Span;
use crate::prim::op;
use crate::source::term::{Lit, Pat, Term, TermKind as S, Var};
use crate::target::types::{LTy, Ty};
use crate::types::Type;
use crate::value::Value;

/// Why a term could not be concretised.
pub type Error = String;
type R<T> = std::result::Result<T, Error>;

/// A source node typed by the local rule (an error if ill-typed: an internal mistake or an
/// ill-typed target term).
pub fn mk(kind: S) -> R<Term> {
    Term::try_new(kind, Span::default()).map_err(|e| format!("concretisation is ill-typed: {e}"))
}

fn var(x: &Var) -> Term {
    Term::var(x)
}

fn int(i: i64) -> Term {
    Term::lit(Lit::Int(i))
}

fn prim(name: &str, args: Vec<Term>) -> R<Term> {
    mk(S::Prim(op(name), args))
}

/// `let x = e in body(x)` with a fresh `x` (no binding when `e` is already a variable or a
/// literal).
pub fn bind(name: &str, e: Term, body: impl FnOnce(Term) -> R<Term>) -> R<Term> {
    if matches!(e.kind, S::Var(_) | S::Lit(_)) {
        return body(e);
    }
    let x = Var::fresh(name, e.ty.clone());
    let b = body(var(&x))?;
    mk(S::Let(Pat::Var(x), e, b))
}

/// `\(x : ty) -> body(x)`.
pub fn lam(name: &str, ty: Type, body: impl FnOnce(Term) -> R<Term>) -> R<Term> {
    let x = Var::fresh(name, ty);
    let b = body(var(&x))?;
    mk(S::Lam(x, b))
}

fn fst(e: Term) -> R<Term> {
    mk(S::Fst(e))
}

fn snd(e: Term) -> R<Term> {
    mk(S::Snd(e))
}

fn pair(a: Term, b: Term) -> R<Term> {
    mk(S::Pair(a, b))
}

fn app(f: Term, a: Term) -> R<Term> {
    mk(S::App(f, a))
}

fn cond(c: Term, a: Term, b: Term) -> R<Term> {
    mk(S::If(c, a, b))
}

fn length(xs: Term) -> R<Term> {
    mk(S::Length(xs))
}

fn index(xs: Term, i: Term) -> R<Term> {
    mk(S::Index(xs, i))
}

fn build(n: Term, f: impl FnOnce(Term) -> R<Term>) -> R<Term> {
    mk(S::Build(n, lam("i", Type::Int, f)?))
}

/// `C(L)`: the source type representing the linear type `l`.
pub fn ty(l: &LTy) -> R<Type> {
    deep(|| {
        Ok(match l {
            LTy::Real => Type::Real,
            LTy::Unit => Type::Unit,
            LTy::Prod(p) | LTy::Sum(p) => Type::prod(ty(&p.0)?, ty(&p.1)?),
            LTy::Array(e) => Type::array(ty(e)?),
            LTy::Copower(p) => Type::array(Type::prod(cty(&p.0)?, ty(&p.1)?)),
            LTy::Power(p) => Type::fun(cty(&p.0)?, ty(&p.1)?),
        })
    })
}

/// `C(τ)`: the source type representing the Cartesian type `t` (linear maps become functions).
pub fn cty(t: &Ty) -> R<Type> {
    deep(|| {
        Ok(match t {
            Ty::Real => Type::Real,
            Ty::Int => Type::Int,
            Ty::Bool => Type::Bool,
            Ty::Unit => Type::Unit,
            Ty::Prod(p) => Type::prod(cty(&p.0)?, cty(&p.1)?),
            Ty::Fun(p) => Type::fun(cty(&p.0)?, cty(&p.1)?),
            Ty::Sum(p) => Type::sum(cty(&p.0)?, cty(&p.1)?),
            Ty::Array(e) => Type::array(cty(e)?),
            Ty::LinFun(p) => Type::fun(ty(&p.0)?, ty(&p.1)?),
            Ty::Lin(l) => ty(l)?,
        })
    })
}

/// `0 : L`.
pub fn zero(l: &LTy) -> R<Term> {
    deep(|| match l {
        LTy::Real => Ok(Term::lit(Lit::Real(0.0))),
        LTy::Unit => Ok(Term::lit(Lit::Unit)),
        LTy::Prod(p) | LTy::Sum(p) => pair(zero(&p.0)?, zero(&p.1)?),
        LTy::Array(_) | LTy::Copower(_) => {
            let elem = ty(l)?.as_array().cloned().ok_or("array")?;
            mk(S::Array(elem, vec![]))
        }
        LTy::Power(p) => lam("_b", cty(&p.0)?, |_| zero(&p.1)),
    })
}

/// `a + b : L`.
pub fn plus(l: &LTy, a: Term, b: Term) -> R<Term> {
    deep(|| match l {
        LTy::Real => prim("add", vec![a, b]),
        LTy::Unit => Ok(Term::lit(Lit::Unit)),
        LTy::Prod(p) | LTy::Sum(p) => bind("p", a, |a| {
            bind("q", b, |b| {
                pair(
                    plus(&p.0, fst(a.clone())?, fst(b.clone())?)?,
                    plus(&p.1, snd(a)?, snd(b)?)?,
                )
            })
        }),
        // Arrays of reals by one primitive (`padAdd`, the same values as the general case
        // below): this code is differentiated again by nested derivatives.
        LTy::Array(e) if matches!(***e, LTy::Real) => {
            mk(S::Prim(super::padadd::pad_add(), vec![a, b]))
        }
        LTy::Array(e) => bind("xs", a, |xs| {
            bind("ys", b, |ys| {
                bind("n", length(xs.clone())?, |n| {
                    bind("m", length(ys.clone())?, |m| {
                        // Elementwise by one `map2`, the shorter padded with zeros (the zero
                        // `[]` costs O(1)) only when the lengths differ. One `map2`, not a
                        // `map2` for equal lengths beside a `build` for unequal ones: each
                        // holds the element's sum, so a `k`-deep array type gave `2^k` copies.
                        // The test is per array, never per element (a test per element costs
                        // a linear map per element when this code is differentiated again).
                        bind(
                            "big",
                            cond(
                                prim("ilt", vec![n.clone(), m.clone()])?,
                                m.clone(),
                                n.clone(),
                            )?,
                            |big| {
                                let pad = |xs: Term, n: Term| {
                                    let long = build(big.clone(), |i| {
                                        padded(e, xs.clone(), n.clone(), i)
                                    })?;
                                    cond(prim("ieq", vec![n, big.clone()])?, xs, long)
                                };
                                let f = lam("x", ty(e)?, |x| lam("y", ty(e)?, |y| plus(e, x, y)))?;
                                let sum = mk(S::Map2(
                                    f,
                                    pad(xs.clone(), n.clone())?,
                                    pad(ys.clone(), m.clone())?,
                                ))?;
                                let if_m = cond(prim("ieq", vec![m, int(0)])?, xs.clone(), sum)?;
                                cond(prim("ieq", vec![n, int(0)])?, ys.clone(), if_m)
                            },
                        )
                    })
                })
            })
        }),
        LTy::Copower(_) => concat(a, b),
        LTy::Power(p) => bind("f", a, |f| {
            bind("g", b, |g| {
                lam("b", cty(&p.0)?, |x| {
                    plus(&p.1, app(f, x.clone())?, app(g, x)?)
                })
            })
        }),
    })
}

/// Element `i` of `xs` (of length `n`) as an element of a finitely supported sequence: zero
/// outside `0 .. n`.
fn padded(e: &LTy, xs: Term, n: Term, i: Term) -> R<Term> {
    bind("i", i, |i| {
        let inside = prim("ilt", vec![i.clone(), n])?;
        let nonneg = prim("ige", vec![i.clone(), int(0)])?;
        let both = cond(nonneg, inside, Term::lit(Lit::Bool(false)))?;
        cond(both, index(xs, i)?, zero(e)?)
    })
}

/// The concatenation of two arrays (a copower's sum).
fn concat(a: Term, b: Term) -> R<Term> {
    bind("xs", a, |xs| {
        bind("ys", b, |ys| {
            bind("n", length(xs.clone())?, |n| {
                bind("m", length(ys.clone())?, |m| {
                    let total = prim("iadd", vec![n.clone(), m.clone()])?;
                    let both = build(total, |k| {
                        let left = index(xs.clone(), k.clone())?;
                        let right = index(ys.clone(), prim("isub", vec![k.clone(), n.clone()])?)?;
                        cond(prim("ilt", vec![k, n.clone()])?, left, right)
                    })?;
                    let if_m = cond(prim("ieq", vec![m, int(0)])?, xs.clone(), both)?;
                    cond(prim("ieq", vec![n, int(0)])?, ys.clone(), if_m)
                })
            })
        })
    })
}

/// `c * x : L` for a real `c`.
pub fn scale(l: &LTy, c: Term, x: Term) -> R<Term> {
    deep(|| match l {
        LTy::Real => prim("mul", vec![c, x]),
        LTy::Unit => Ok(Term::lit(Lit::Unit)),
        LTy::Prod(p) | LTy::Sum(p) => bind("c", c, |c| {
            bind("p", x, |x| {
                pair(
                    scale(&p.0, c.clone(), fst(x.clone())?)?,
                    scale(&p.1, c, snd(x)?)?,
                )
            })
        }),
        LTy::Array(e) => bind("c", c, |c| {
            let f = lam("x", ty(e)?, |y| scale(e, c, y))?;
            mk(S::Map(f, x))
        }),
        LTy::Copower(p) => bind("c", c, |c| {
            let elem = Type::prod(cty(&p.0)?, ty(&p.1)?);
            let f = lam("ax", elem, |ax| {
                bind("ax", ax, |ax| {
                    pair(fst(ax.clone())?, scale(&p.1, c, snd(ax)?)?)
                })
            })?;
            mk(S::Map(f, x))
        }),
        LTy::Power(p) => bind("c", c, |c| {
            bind("f", x, |f| {
                lam("b", cty(&p.0)?, |b| scale(&p.1, c, app(f, b)?))
            })
        }),
    })
}

/// `linl a : L ⊕ L'` (`(a, 0)`).
pub fn inl(a: Term, right: &LTy) -> R<Term> {
    pair(a, zero(right)?)
}

/// `linr b : L ⊕ L'` (`(0, b)`).
pub fn inr(left: &LTy, b: Term) -> R<Term> {
    pair(zero(left)?, b)
}

/// `fromLeft s`.
pub fn from_left(s: Term) -> R<Term> {
    fst(s)
}

/// `fromRight s`.
pub fn from_right(s: Term) -> R<Term> {
    snd(s)
}

/// `l ! i` for a linear array of elements of type `e` (zero past the end).
pub fn lindex(e: &LTy, xs: Term, i: Term) -> R<Term> {
    bind("xs", xs, |xs| {
        let n = length(xs.clone())?;
        padded(e, xs, n, i)
    })
}

/// `replicate n l`.
pub fn replicate(n: Term, x: Term) -> R<Term> {
    mk(S::Replicate(n, x))
}

/// `lbuild n (\i -> body)` (the index variable is the caller's).
pub fn lbuild(n: Term, i: Var, body: Term) -> R<Term> {
    mk(S::Build(n, mk(S::Lam(i, body))?))
}

/// `onehot n i x : Array L`.
pub fn onehot(e: &LTy, n: Term, i: Term, x: Term) -> R<Term> {
    bind("i", i, |i| {
        bind("x", x, |x| {
            build(n, |j| cond(prim("ieq", vec![j, i])?, x, zero(e)?))
        })
    })
}

/// `for k in 0 .. n: acc = step(k, acc)`, from `init` (a `loop`, so differentiable again).
fn fold_loop(n: Term, init: Term, step: impl FnOnce(Term, Term) -> R<Term>) -> R<Term> {
    let acc_ty = init.ty.clone();
    bind("n", n, |n| {
        let state = Type::prod(Type::Int, acc_ty.clone());
        let f = lam("s", state.clone(), |s| {
            let k = Var::fresh("k", Type::Int);
            let acc = Var::fresh("acc", acc_ty.clone());
            let next = step(var(&k), var(&acc))?;
            let more = mk(S::Inl(
                pair(prim("iadd", vec![var(&k), int(1)])?, next)?,
                acc_ty.clone(),
            ))?;
            let done = mk(S::Inr(state.clone(), var(&acc)))?;
            let body = cond(prim("ieq", vec![var(&k), n])?, done, more)?;
            mk(S::Let(
                Pat::Pair(Box::new(Pat::Var(k)), Box::new(Pat::Var(acc))),
                s,
                body,
            ))
        })?;
        mk(S::Loop(f, pair(int(0), init)?, false))
    })
}

/// `lsum xs : L` for a linear array of elements of type `e`, by type, without a loop where
/// the type allows (a `loop` is costly to differentiate again: a linear map per step):
///
/// ```text
/// sum_Real xs = sum xs                     sum_1 xs = ()
/// sum_{L × L'} xs = (sum_L (map fst xs), sum_L' (map snd xs))        (⊕ likewise)
/// sum_{Array L} xs = build n (\j -> sum_L (build (length xs) (\i -> (xs ! i) ! j, 0 past the end)))
///                    for n the greatest length of the xs ! i (0 if there are none), and
///                    without the test past the end if they all have length n
/// sum_{τ → L} xs = \b -> sum_L (map (\f -> f b) xs)
/// ```
///
/// and for copowers a loop of concatenations.
pub fn sum(e: &LTy, xs: Term) -> R<Term> {
    deep(|| match e {
        LTy::Real => prim("sum", vec![xs]),
        LTy::Unit => Ok(Term::lit(Lit::Unit)),
        LTy::Prod(p) | LTy::Sum(p) => bind("xs", xs, |xs| {
            let (a, b) = (ty(&p.0)?, ty(&p.1)?);
            let firsts = mk(S::Map(
                lam("x", Type::prod(a.clone(), b.clone()), fst)?,
                xs.clone(),
            ))?;
            let seconds = mk(S::Map(lam("x", Type::prod(a, b), snd)?, xs))?;
            pair(sum(&p.0, firsts)?, sum(&p.1, seconds)?)
        }),
        LTy::Array(a) => bind("xs", xs, |xs| {
            let elem = ty(e)?;
            bind("m", length(xs.clone())?, |m| {
                // The greatest length: that of the element `argmax` of the lengths picks.
                let lens = mk(S::Map(
                    lam("x", elem.clone(), |x| prim("toReal", vec![length(x)?]))?,
                    xs.clone(),
                ))?;
                bind("lens", lens, |lens| {
                    let longest = length(index(xs.clone(), prim("argmax", vec![lens.clone()])?)?)?;
                    let shortest = length(index(xs.clone(), prim("argmin", vec![lens])?)?)?;
                    let empty = prim("ieq", vec![m.clone(), int(0)])?;
                    let n = cond(empty.clone(), int(0), longest)?;
                    let k = cond(empty, int(0), shortest)?;
                    bind("n", n, |n| {
                        bind("k", k, |k| {
                            // All of one length (the common case): no test per element.
                            let same = build(n.clone(), |j| {
                                bind("j", j, |j| {
                                    let column =
                                        build(m.clone(), |i| index(index(xs.clone(), i)?, j))?;
                                    sum(a, column)
                                })
                            })?;
                            let padded = build(n.clone(), |j| {
                                bind("j", j, |j| {
                                    let column = build(m, |i| lindex(a, index(xs, i)?, j))?;
                                    sum(a, column)
                                })
                            })?;
                            cond(prim("ieq", vec![n, k])?, same, padded)
                        })
                    })
                })
            })
        }),
        LTy::Power(p) => bind("xs", xs, |xs| {
            lam("b", cty(&p.0)?, |b| {
                let f = lam("f", ty(e)?, |f| app(f, b))?;
                sum(&p.1, mk(S::Map(f, xs))?)
            })
        }),
        LTy::Copower(_) => sum_loop(e, xs),
    })
}

/// `lsum xs` by a loop adding the elements in order.
fn sum_loop(e: &LTy, xs: Term) -> R<Term> {
    bind("xs", xs, |xs| {
        fold_loop(length(xs.clone())?, zero(e)?, |k, acc| {
            plus(e, acc, index(xs, k)?)
        })
    })
}

/// `scatterAdd n js xs : Array Real` ([`super::scatter`]): the one-hots `onehot n (js ! k)
/// (xs ! k)` summed, in `O(n + length js)`.
pub fn scatter_add(n: Term, js: Term, xs: Term) -> R<Term> {
    mk(S::Prim(super::scatter::scatter_add(), vec![n, js, xs]))
}

/// `!a ⊗ l`: the one-pair list.
pub fn copower(a: Term, l: Term) -> R<Term> {
    let p = pair(a, l)?;
    mk(S::Array(p.ty.clone(), vec![p]))
}

/// `copowfold f c : M`: the sum of `f a l` over the pairs `(a, l)` of `c`, for
/// `f : C(τ) → C(L) → C(M)`.
pub fn copowfold(m: &LTy, f: Term, c: Term) -> R<Term> {
    bind("f", f, |f| {
        bind("c", c, |c| {
            fold_loop(length(c.clone())?, zero(m)?, |k, acc| {
                bind("al", index(c, k)?, |al| {
                    let fa = app(f, fst(al.clone())?)?;
                    plus(m, acc, app(fa, snd(al)?)?)
                })
            })
        })
    })
}

/// `zipWith fs l : Array M`: element `i` is `fs ! i` applied to `l ! i`.
pub fn zip_with(e: &LTy, fs: Term, l: Term) -> R<Term> {
    bind("fs", fs, |fs| {
        bind("l", l, |l| {
            build(length(fs.clone())?, |i| {
                bind("i", i, |i| app(index(fs, i.clone())?, lindex(e, l, i)?))
            })
        })
    })
}

/// `lmap f l`.
pub fn lmap(f: Term, l: Term) -> R<Term> {
    mk(S::Map(f, l))
}

/// `lchain fs d` (forward) for `fs : Array (G × A ⊸ A ⊕ B)`, `d : G × A`: the tangent pushed
/// through the steps in order.
pub fn chain_forward(a: &LTy, b: &LTy, fs: Term, d: Term) -> R<Term> {
    let _ = a;
    bind("fs", fs, |fs| {
        bind("d", d, |d| {
            let init = pair(snd(d.clone())?, zero(b)?)?;
            let w = fold_loop(length(fs.clone())?, init, |k, w| {
                app(index(fs, k)?, pair(fst(d)?, fst(w)?)?)
            })?;
            snd(w)
        })
    })
}

/// `lchainRev fs v` (reverse) for `fs : Array (A ⊕ B ⊸ G × A)`, `v : B`: the cotangent pulled
/// back through the steps from the last to the first, the environment's share accumulated.
pub fn chain_reverse(g: &LTy, a: &LTy, b: &LTy, fs: Term, v: Term) -> R<Term> {
    bind("fs", fs, |fs| {
        bind("n", length(fs.clone())?, |n| {
            let init = pair(zero(g)?, pair(zero(a)?, v)?)?;
            // State (acc, w), step k runs map n-1-k.
            let out = fold_loop(n.clone(), init, |k, s| {
                bind("s", s, |s| {
                    let j = prim("isub", vec![prim("isub", vec![n, k])?, int(1)])?;
                    bind("ga", app(index(fs, j)?, snd(s.clone())?)?, |ga| {
                        pair(
                            plus(g, fst(s)?, fst(ga.clone())?)?,
                            pair(snd(ga)?, zero(b)?)?,
                        )
                    })
                })
            })?;
            bind("out", out, |out| pair(fst(out.clone())?, fst(snd(out)?)?))
        })
    })
}

/// `lchainScan fs d` (forward, a taped loop's) for `fs : Array (G × A ⊸ (A ⊕ B) × C)`,
/// `d : G × A`: the tangent pushed through the steps in order, each step's record tangent
/// kept. A `loopTape` over `(k, w)` records `snd (fs ! k • (fst d, fst w))` per step; its last
/// step (`k = n`) records a zero that is dropped (`build n`), so it is O(steps).
pub fn chain_forward_records(a: &LTy, b: &LTy, c: &LTy, fs: Term, d: Term) -> R<Term> {
    let w_ty = Type::prod(ty(a)?, ty(b)?);
    let state = Type::prod(Type::Int, w_ty.clone());
    bind("fs", fs, |fs| {
        bind("d", d, |d| {
            bind("n", length(fs.clone())?, |n| {
                let dg = fst(d.clone())?;
                let step = lam("s", state.clone(), |s| {
                    bind("s", s, |s| {
                        let k = fst(s.clone())?;
                        let w = snd(s)?;
                        let r = app(index(fs, k.clone())?, pair(dg, fst(w.clone())?)?)?;
                        let more = bind("r", r, |r| {
                            let next =
                                pair(prim("iadd", vec![k.clone(), int(1)])?, fst(r.clone())?)?;
                            pair(mk(S::Inl(next, ty(b)?))?, snd(r)?)
                        })?;
                        let done = pair(mk(S::Inr(state.clone(), snd(w)?))?, zero(c)?)?;
                        cond(prim("ilt", vec![k, n.clone()])?, more, done)
                    })
                })?;
                let init = pair(int(0), pair(snd(d)?, zero(b)?)?)?;
                let taped = mk(S::Loop(step, init, true))?;
                bind("out", taped, |out| {
                    bind("rs", snd(out.clone())?, |rs| {
                        pair(fst(out)?, build(n, |i| index(rs, i))?)
                    })
                })
            })
        })
    })
}

/// `lchainScanRev fs v` (reverse, a taped loop's) for `fs : Array ((A ⊕ B) × C ⊸ G × A)`,
/// `v : B × Array C`: [`chain_reverse`] with step `k` also given element `k` of `snd v`
/// (zero past its end: a concrete array may be shorter than the steps).
pub fn chain_reverse_records(g: &LTy, a: &LTy, b: &LTy, c: &LTy, fs: Term, v: Term) -> R<Term> {
    bind("fs", fs, |fs| {
        bind("v", v, |v| {
            bind("cs", snd(v.clone())?, |cs| {
                bind("n", length(fs.clone())?, |n| {
                    let init = pair(zero(g)?, pair(zero(a)?, fst(v)?)?)?;
                    let out = fold_loop(n.clone(), init, |k, s| {
                        bind("s", s, |s| {
                            let j = prim("isub", vec![prim("isub", vec![n, k])?, int(1)])?;
                            bind("j", j, |j| {
                                let arg = pair(snd(s.clone())?, lindex(c, cs, j.clone())?)?;
                                bind("ga", app(index(fs, j)?, arg)?, |ga| {
                                    pair(
                                        plus(g, fst(s)?, fst(ga.clone())?)?,
                                        pair(snd(ga)?, zero(b)?)?,
                                    )
                                })
                            })
                        })
                    })?;
                    bind("out", out, |out| pair(fst(out.clone())?, fst(snd(out)?)?))
                })
            })
        })
    })
}

/// The concrete value (of type `C(L)`) of a linear value of a first-order linear type (reals,
/// unit, products, sums, arrays); `None` for copowers and powers.
pub fn to_value(l: &LTy, x: &super::Lin) -> Option<Value> {
    deep(|| {
        Some(match l {
            LTy::Real => Value::Real(x.to_real()),
            LTy::Unit => Value::Unit,
            LTy::Prod(p) | LTy::Sum(p) => {
                Value::pair(to_value(&p.0, &x.fst())?, to_value(&p.1, &x.snd())?)
            }
            LTy::Array(e) => {
                let n = x.stored_len();
                let items = (0..n)
                    .map(|i| to_value(e, &x.index(i as i64)))
                    .collect::<Option<Vec<_>>>()?;
                Value::array(&ty(e).ok()?, items)
            }
            LTy::Copower(_) | LTy::Power(_) => return None,
        })
    })
}

/// The linear value a concrete value (of type `C(L)`) of a first-order linear type represents;
/// `None` for copowers, powers, or a value of the wrong shape.
pub fn from_value(l: &LTy, v: &Value) -> Option<super::Lin> {
    use super::Lin;
    deep(|| {
        Some(match (l, v) {
            (LTy::Real, Value::Real(x)) => Lin::real(*x),
            (LTy::Unit, Value::Unit) => Lin::zero(),
            (LTy::Prod(p) | LTy::Sum(p), Value::Pair(q)) => {
                Lin::pair(from_value(&p.0, &q.0)?, from_value(&p.1, &q.1)?)
            }
            (LTy::Array(e), Value::RealArray(xs)) if matches!(***e, LTy::Real) => {
                Lin::reals(xs.to_vec())
            }
            (LTy::Array(e), Value::Array(xs)) => Lin::array(
                xs.iter()
                    .map(|x| from_value(e, x))
                    .collect::<Option<Vec<_>>>()?,
            ),
            _ => return None,
        })
    })
}
