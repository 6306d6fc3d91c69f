//! Custom derivatives (LANGUAGE.md, "Custom derivatives"): checking a definition's `with jvp`
//! and `with vjp` clauses, and registering the definition as a primitive that is evaluated by
//! running its body and differentiated by its clauses (theory-notes/13-custom-derivatives.md).
//!
//! ## Typing
//!
//! For `def f (x1 : A1) ... (xn : An) : B = body with jvp (d1 : A1') ... (dk : Ak') = e`:
//!
//! ```text
//!   n ≥ 1    k = n    Ai' = Ai (the tangent type of a first-order type of reals is itself)
//!   Ai, B built from Real, tuples and arrays
//!   x1 : A1, ..., xn : An, result : B, d1 : A1, ..., dn : An ⊢ e : B     e linear in d1..dn
//! ```
//!
//! and for the optional `with vjp (ct : B') = e'`: `B' = B` and
//! `x1 : A1, ..., xn : An, result : B, ct : B ⊢ e' : A1 × (... × An)` (right-nested; the bare
//! `A1` for one parameter), `e'` linear in `ct`.
//!
//! ## Linearity
//!
//! A clause is elaborated into the target language's linear fragment (the forms of
//! [`crate::target::term`]), a term `l` with the tangents as its linear variables. The
//! elaboration is syntactic and follows the type of every subterm: a subterm that mentions no
//! tangent is Cartesian (it is embedded as it is, [`crate::target::embed`]); one that does must
//! be one of
//!
//! ```text
//! L(d)                      = d                              (a tangent, or a linear let's variable)
//! L(a * e), L(e * a)        = a * L(e)                       (a Cartesian)
//! L(e / a)                  = (1 / a) * L(e)
//! L(-e)                     = -1 * L(e)
//! L(e1 + e2), L(e1 - e2)    = P(e1) + P(e2), P(e1) + -1 * P(e2)
//! L((e1, e2))               = (P(e1), P(e2))
//! L(fst e), L(snd e)        = fst L(e), snd L(e)
//! L(let p = a in e)         = let p = a in P(e)              (a Cartesian: copied)
//! L(let p = e1 in e2)       = let u = L(e1) in P(e2)[p := projections of u]
//! L(if c then e1 else e2)   = case decide c of inl _ -> P(e1) | inr _ -> P(e2)
//! L(case a of ...)          = case a of inl p -> P(e1) | inr q -> P(e2)
//! L(e ! i)                  = L(e) ! i
//! L(sum e)                  = lsum L(e)
//! L(replicate n e)          = replicate n L(e)
//! L(build n (\i -> e))      = lbuild n (\i -> P(e))
//! L(map (\y -> e) es)       = lmap (λ̲y. P(e)) L(es)          (e mentions no other tangent)
//! L(map (\a -> e) as)       = let v = as in lbuild (length v) (\i -> let a = v ! i in P(e))
//! L(map2 (\a y -> e) as es) = zipWith (map (\a -> λ̲y. P(e)) as) L(es)   (and symmetrically)
//! ```
//!
//! where `P(e)` ("a linear position") is `L(e)` if `e` mentions a tangent, `0` if `e` is a zero
//! literal (`0.0`, a tuple of them, `replicate n 0.0`), and an error otherwise (a constant term
//! is affine, not linear). Anything else that mentions a tangent (a product of two tangent
//! terms, a tangent under `sin`, a tangent passed to a function or a loop, a branch on a
//! tangent) is a type error at its position. Every rule produces a form of the linear
//! fragment, so a clause that elaborates is linear by construction; the target checker then
//! type-checks both AD images of the primitive at registration ([`crate::ad`]).
//!
//! The elaboration is repeated at every use of the definition (on a freshened copy of the
//! clause, so that every binder in a derivative program stays unique), with the parameters and
//! `result` bound by Cartesian `let`s to the call's arguments and primal result.

use super::Checker;
use crate::ad::forward::tangent;
use crate::deep::deep;
use crate::error::{Error, Result, Span};
use crate::prim::{Derivative, JvpArgs, Prim, Primitive, VjpArgs, op};
use crate::source::syntax as ast;
use crate::source::term::{Custom, Def, Entry, Lit, Pat, Term, TermKind, Var, VarId, freshen};
use crate::target::embed;
use crate::target::term::{self as tt, LTerm, LTermKind};
use crate::target::types::Ty;
use crate::types::Type;
use crate::value::Value;
use std::collections::HashMap;
use std::rc::Rc;

/// Is `t` built from `Real`, products and arrays only?
fn smooth(t: &Type) -> bool {
    deep(|| match t {
        Type::Real => true,
        Type::Prod(p) => smooth(&p.0) && smooth(&p.1),
        Type::Array(a) => smooth(a),
        _ => false,
    })
}

/// The definitions `direct` refers to, transitively, in file order.
fn closure(defs: &[Def], direct: &[usize]) -> Vec<usize> {
    let mut needed = vec![false; defs.len()];
    let mut stack = direct.to_vec();
    while let Some(d) = stack.pop() {
        if d < defs.len() && !needed[d] {
            needed[d] = true;
            stack.extend(defs[d].deps.iter().copied());
        }
    }
    (0..defs.len()).filter(|&d| needed[d]).collect()
}

/// `let d1 = .. in .. let dk = .. in body` for the definitions `deps`.
fn with_deps(defs: &[Def], deps: &[usize], body: Term) -> Term {
    let plain = deps.iter().filter(|&&d| defs[d].custom.is_none());
    plain.rev().fold(body, |body, &d| {
        let dep = &defs[d];
        Term::new(
            TermKind::Let(Pat::Var(dep.var.clone()), dep.value(), body),
            dep.span,
        )
    })
}

/// A clause ready to instantiate: `let deps in \x1 .. \xn -> \result -> \d1 .. \dk -> e`.
struct Template {
    term: Term,
    /// The number of Cartesian binders (`n + 1`, the parameters and `result`).
    cartesian: usize,
    /// The number of linear binders (tangents, or the cotangent).
    linear: usize,
}

impl Template {
    fn new(defs: &[Def], deps: &[usize], cartesian: &[Var], linear: &[Var], e: &Term) -> Self {
        let lam = cartesian
            .iter()
            .chain(linear)
            .rev()
            .fold(e.clone(), |b, v| {
                Term::new(TermKind::Lam(v.clone(), b), e.span)
            });
        Template {
            term: with_deps(defs, deps, lam),
            cartesian: cartesian.len(),
            linear: linear.len(),
        }
    }

    /// The clause as a linear term, with the Cartesian binders bound to `cartesian` and the
    /// linear ones replaced by `linear` (all of them variables, so copying them is free).
    fn instantiate(&self, cartesian: &[tt::Term], linear: &[LTerm]) -> Result<LTerm> {
        let t = freshen(&self.term);
        let mut lets = Vec::new();
        let mut cur = &t;
        while let TermKind::Let(p, e, b) = &cur.kind {
            lets.push((embed::pat(p), embed::term(e), cur.span));
            cur = b;
        }
        let mut binders = Vec::new();
        for _ in 0..self.cartesian + self.linear {
            match &cur.kind {
                TermKind::Lam(x, b) => {
                    binders.push(x.clone());
                    cur = b;
                }
                _ => unreachable!("a template has its binders"),
            }
        }
        let env: HashMap<VarId, LTerm> = binders[self.cartesian..]
            .iter()
            .zip(linear)
            .map(|(v, l)| (v.id, l.clone()))
            .collect();
        let mut l = Elab { env }.position(cur)?;
        for (x, a) in binders[..self.cartesian].iter().zip(cartesian).rev() {
            l = LTerm::mk(LTermKind::Let(tt::Pat::Var(embed::var(x)), a.clone(), l));
        }
        for (p, e, span) in lets.into_iter().rev() {
            l = LTerm::new(LTermKind::Let(p, e, l), span);
        }
        Ok(l)
    }
}

/// The elaboration of a clause into a linear term (the module docs' `L` and `P`). `env` maps
/// the tangents (and linear `let`s' variables) to linear terms.
struct Elab {
    env: HashMap<VarId, LTerm>,
}

fn not_linear(span: Span, what: &str) -> Error {
    Error::type_error(
        span,
        format!("the derivative clause is not linear in the tangents: {what}"),
    )
    .with_label("not linear")
    .with_note(
        "a clause may add and subtract tangents, scale them by (or divide them by) terms \
         without tangents, take tuples and components, index, sum, map and build; see \
         theory-notes/13-custom-derivatives.md",
    )
}

/// Is `t` a zero literal: `0.0`, a tuple of them, `replicate n 0.0`, `[0.0, ...]`?
fn is_zero(t: &Term) -> bool {
    deep(|| match &t.kind {
        TermKind::Lit(Lit::Real(x)) => *x == 0.0,
        TermKind::Pair(a, b) => is_zero(a) && is_zero(b),
        TermKind::Replicate(_, x) => is_zero(x),
        TermKind::Array(_, items) => items.iter().all(is_zero),
        _ => false,
    })
}

fn is_op(p: &Prim, name: &str) -> bool {
    Rc::ptr_eq(p, &op(name))
}

impl Elab {
    /// Does `t` mention a linear variable?
    fn mentions(&self, t: &Term) -> bool {
        let mut stack = vec![t];
        while let Some(t) = stack.pop() {
            if let TermKind::Var(v) = &t.kind
                && self.env.contains_key(&v.id)
            {
                return true;
            }
            stack.extend(t.children());
        }
        false
    }

    /// `P(t)`: `t` in a linear position.
    fn position(&mut self, t: &Term) -> Result<LTerm> {
        if self.mentions(t) {
            self.linear(t)
        } else if is_zero(t) {
            Ok(LTerm::new(LTermKind::Zero(tangent(&t.ty)), t.span))
        } else {
            Err(not_linear(
                t.span,
                "this term does not depend on the tangents, so the clause would add a constant \
                 (only `0.0` may stand for a zero tangent)",
            ))
        }
    }

    /// A Cartesian subterm (checked not to mention a tangent).
    fn cartesian(&self, t: &Term, what: &str) -> Result<tt::Term> {
        if self.mentions(t) {
            return Err(not_linear(t.span, what));
        }
        Ok(embed::term(t))
    }

    /// `L(t)` for a `t` that mentions a tangent.
    fn linear(&mut self, t: &Term) -> Result<LTerm> {
        deep(|| {
            let span = t.span;
            let mk = |k: LTermKind| Ok(LTerm::new(k, span));
            match &t.kind {
                TermKind::Var(v) => Ok(self.env[&v.id].clone()),
                TermKind::Prim(p, args) if is_op(p, "mul") => {
                    let (a, b) = (&args[0], &args[1]);
                    match (self.mentions(a), self.mentions(b)) {
                        (true, true) => Err(not_linear(
                            span,
                            "this multiplies two terms that both depend on the tangents",
                        )),
                        (false, _) => mk(LTermKind::Scale(embed::term(a), self.linear(b)?)),
                        (true, false) => mk(LTermKind::Scale(embed::term(b), self.linear(a)?)),
                    }
                }
                TermKind::Prim(p, args) if is_op(p, "div") => {
                    let b = self.cartesian(&args[1], "this divides by a tangent")?;
                    let inv = tt::Term::prim(&op("div"), vec![tt::Term::real(1.0), b]);
                    mk(LTermKind::Scale(inv, self.linear(&args[0])?))
                }
                TermKind::Prim(p, args) if is_op(p, "add") => mk(LTermKind::Plus(
                    self.position(&args[0])?,
                    self.position(&args[1])?,
                )),
                TermKind::Prim(p, args) if is_op(p, "sub") => {
                    let b = self.position(&args[1])?;
                    mk(LTermKind::Plus(
                        self.position(&args[0])?,
                        LTerm::scale(tt::Term::real(-1.0), b),
                    ))
                }
                TermKind::Prim(p, args) if is_op(p, "neg") => mk(LTermKind::Scale(
                    tt::Term::real(-1.0),
                    self.linear(&args[0])?,
                )),
                TermKind::Prim(p, args) if is_op(p, "sum") => {
                    mk(LTermKind::Sum(self.linear(&args[0])?))
                }
                TermKind::Prim(p, _) => Err(not_linear(
                    span,
                    &format!(
                        "`{}` is applied to a term that depends on the tangents",
                        p.name()
                    ),
                )),
                TermKind::Pair(a, b) => mk(LTermKind::Pair(self.position(a)?, self.position(b)?)),
                TermKind::Fst(e) => mk(LTermKind::Fst(self.linear(e)?)),
                TermKind::Snd(e) => mk(LTermKind::Snd(self.linear(e)?)),
                TermKind::Let(p, e, b) if !self.mentions(e) => mk(LTermKind::Let(
                    embed::pat(p),
                    embed::term(e),
                    self.position(b)?,
                )),
                TermKind::Let(p, e, b) => {
                    let l = self.linear(e)?;
                    let u = tt::Var::linear("u", tangent(&e.ty));
                    self.bind(p, LTerm::var(&u));
                    mk(LTermKind::LinLet(u, l, self.position(b)?))
                }
                TermKind::If(c, a, b) => {
                    let c = self.cartesian(c, "this branches on a tangent")?;
                    let unit = || Box::new(tt::Pat::Wild(Ty::Unit));
                    mk(LTermKind::Case(
                        tt::Term::prim(&op("decide"), vec![c]),
                        unit(),
                        self.position(a)?,
                        unit(),
                        self.position(b)?,
                    ))
                }
                TermKind::Case(e, p, a, q, b) => {
                    let e = self.cartesian(e, "this branches on a tangent")?;
                    mk(LTermKind::Case(
                        e,
                        Box::new(embed::pat(p)),
                        self.position(a)?,
                        Box::new(embed::pat(q)),
                        self.position(b)?,
                    ))
                }
                TermKind::Index(xs, i) => {
                    let i = self.cartesian(i, "this indexes with a tangent")?;
                    mk(LTermKind::Index(self.linear(xs)?, i))
                }
                TermKind::Replicate(n, x) => {
                    let n = self.cartesian(n, "this replicates a tangent number of times")?;
                    mk(LTermKind::Replicate(n, self.linear(x)?))
                }
                TermKind::Build(n, f) => match &f.kind {
                    TermKind::Lam(i, body) => {
                        let n = self.cartesian(n, "this builds a tangent number of elements")?;
                        mk(LTermKind::Build(n, embed::var(i), self.position(body)?))
                    }
                    _ => Err(not_linear(
                        span,
                        "`build` needs a literal `\\i -> ...` here",
                    )),
                },
                TermKind::Map(f, xs) if !self.mentions(xs) => {
                    // The tangents are in the function: `lbuild (length as) (\i -> P(e)[a :=
                    // as ! i])`.
                    let (params, body) = lambdas(f, 1).ok_or_else(|| {
                        not_linear(f.span, "the function mapped must be a literal lambda")
                    })?;
                    let arr = tt::Var::fresh("as", Ty::from_source(&xs.ty));
                    let i = tt::Var::fresh("i", Ty::Int);
                    let elem = tt::Term::new(
                        tt::TermKind::Index(tt::Term::var(&arr), tt::Term::var(&i)),
                        span,
                    );
                    let body = LTerm::mk(LTermKind::Let(
                        tt::Pat::Var(embed::var(&params[0])),
                        elem,
                        self.position(body)?,
                    ));
                    let n = tt::Term::new(tt::TermKind::Length(tt::Term::var(&arr)), span);
                    mk(LTermKind::Let(
                        tt::Pat::Var(arr),
                        embed::term(xs),
                        LTerm::mk(LTermKind::Build(n, i, body)),
                    ))
                }
                TermKind::Map(f, xs) => {
                    let f = self.linear_map(f, 1, 0)?;
                    mk(LTermKind::Map(f, self.linear(xs)?))
                }
                TermKind::Map2(f, xs, ys) => match (self.mentions(xs), self.mentions(ys)) {
                    (true, true) => Err(not_linear(
                        span,
                        "`map2` over two arrays that both depend on the tangents",
                    )),
                    (_, true) => {
                        let fs = self.linear_maps(f, 1, xs)?;
                        mk(LTermKind::ZipWith(fs, self.linear(ys)?))
                    }
                    _ => {
                        let fs = self.linear_maps(f, 0, ys)?;
                        mk(LTermKind::ZipWith(fs, self.linear(xs)?))
                    }
                },
                _ => Err(not_linear(
                    span,
                    "this form may not take a term that depends on the tangents",
                )),
            }
        })
    }

    /// Binds the variables of a pattern to the projections of a linear term.
    fn bind(&mut self, p: &Pat, l: LTerm) {
        deep(|| match p {
            Pat::Var(v) => {
                self.env.insert(v.id, l);
            }
            Pat::Wild(_) => {}
            Pat::Pair(a, b) => {
                self.bind(a, LTerm::fst(l.clone()));
                self.bind(b, LTerm::snd(l));
            }
        })
    }

    /// `f = \y1 -> .. -> \yk -> e` (`k = arity`) as the linear map `λ̲yj. P(e)` in its
    /// argument number `j` (the others must be absent: `arity` 1).
    fn linear_map(&mut self, f: &Term, arity: usize, j: usize) -> Result<tt::Term> {
        let (params, body) = lambdas(f, arity).ok_or_else(|| {
            not_linear(
                f.span,
                "the function applied to tangents must be a literal lambda",
            )
        })?;
        self.linear_body(&params, j, body, f.span)
    }

    /// The function mapped over a tangent may use no other tangent: its body is elaborated
    /// with only its own parameter linear.
    fn linear_body(
        &mut self,
        params: &[Var],
        j: usize,
        body: &Term,
        span: Span,
    ) -> Result<tt::Term> {
        if self.mentions(body) {
            return Err(not_linear(
                span,
                "a function applied elementwise to tangents may use no other tangent",
            ));
        }
        let u = tt::Var::linear(params[j].name.clone(), tangent(&params[j].ty));
        let mut inner = Elab {
            env: HashMap::from([(params[j].id, LTerm::var(&u))]),
        };
        let l = inner.position(body)?;
        let mut lam = tt::Term::lin_lam(&u, l);
        for (k, p) in params.iter().enumerate().rev() {
            if k != j {
                lam = tt::Term::lam(&embed::var(p), lam);
            }
        }
        Ok(lam)
    }

    /// `map2 f as ls` with `ls` linear in argument `j` of `f`: the array of linear maps
    /// `map (\a -> λ̲y. P(e)) as`.
    fn linear_maps(&mut self, f: &Term, j: usize, other: &Term) -> Result<tt::Term> {
        let (params, body) = lambdas(f, 2).ok_or_else(|| {
            not_linear(
                f.span,
                "the function applied to tangents must be a literal lambda",
            )
        })?;
        let lam = self.linear_body(&params, j, body, f.span)?;
        let other = self.cartesian(other, "`map2` over two tangent arrays")?;
        Ok(tt::Term::new(tt::TermKind::Map(lam, other), f.span))
    }
}

/// `\y1 -> .. -> \yk -> e` as its parameters and body.
fn lambdas(f: &Term, k: usize) -> Option<(Vec<Var>, &Term)> {
    let mut params = Vec::new();
    let mut cur = f;
    for _ in 0..k {
        match &cur.kind {
            TermKind::Lam(x, b) => {
                params.push(x.clone());
                cur = b;
            }
            _ => return None,
        }
    }
    Some((params, cur))
}

/// The components of a right-nested tuple value of `n` components.
fn components(v: &Value, n: usize) -> Vec<Value> {
    let mut out = Vec::with_capacity(n);
    let mut rest = v;
    for k in 0..n {
        if k + 1 == n {
            out.push(rest.clone());
        } else {
            let (a, b) = rest.expect_pair();
            out.push(a.clone());
            rest = b;
        }
    }
    out
}

impl Checker<'_> {
    /// Checks the derivative clauses of `def` (checked, not yet in `defs`) and registers it as
    /// a primitive.
    pub(super) fn custom(
        &mut self,
        d: &ast::Def,
        jvp: &ast::Clause,
        def: &Def,
        defs: &[Def],
    ) -> Result<Rc<Custom>> {
        let name = def.name().to_string();
        if def.params.is_empty() {
            return Err(Error::type_error(
                jvp.span,
                format!("`{name}` has a derivative clause but no parameters"),
            ));
        }
        let only = "a definition with derivative clauses takes and returns only `Real`s and \
                    tuples and arrays of them";
        for (p, ap) in def.params.iter().zip(&d.params) {
            if !smooth(&p.ty) {
                return Err(Error::type_error(
                    ap.name.span,
                    format!("parameter `{}` of `{name}` has type `{}`", p.name, p.ty),
                )
                .with_note(only));
            }
        }
        if !smooth(&def.ret) {
            let span = d.ret.as_ref().map_or(d.name.span, |t| t.span);
            return Err(
                Error::type_error(span, format!("`{name}` returns a `{}`", def.ret))
                    .with_note(only),
            );
        }
        let n = def.params.len();
        if jvp.params.len() != n {
            return Err(Error::type_error(
                jvp.span,
                format!(
                    "the `jvp` clause of `{name}` binds {} tangent{}, but `{name}` has {n} \
                     parameter{}",
                    jvp.params.len(),
                    if jvp.params.len() == 1 { "" } else { "s" },
                    if n == 1 { "" } else { "s" },
                ),
            )
            .with_note("the clause binds one tangent per parameter, in order"));
        }
        let annotated = |p: &ast::Param, want: &Type, what: String| -> Result<Var> {
            let t = p.ty.as_ref().expect("the parser requires annotations");
            if t.ty != *want {
                return Err(Error::type_error(
                    t.span,
                    format!("{what} has type `{want}`, not `{}`", t.ty),
                )
                .with_label(format!("expected `{want}`")));
            }
            Ok(Var::fresh(p.name.name.clone(), want.clone()))
        };
        let tangents = jvp
            .params
            .iter()
            .zip(&def.params)
            .map(|(t, p)| {
                annotated(
                    t,
                    &p.ty,
                    format!("the tangent `{}` of parameter `{}`", t.name.name, p.name),
                )
            })
            .collect::<Result<Vec<_>>>()?;
        let result = Var::fresh("result", def.ret.clone());
        let jvp_body = self.in_clause(&def.params, &result, &tangents, |c| {
            c.check(&jvp.body, &def.ret)
        })?;
        let vjp = match &d.vjp {
            None => None,
            Some(v) => {
                if v.params.len() != 1 {
                    return Err(Error::type_error(
                        v.span,
                        format!(
                            "the `vjp` clause of `{name}` binds {} cotangents; it binds one, \
                             the cotangent of the result",
                            v.params.len()
                        ),
                    ));
                }
                let ct = annotated(
                    &v.params[0],
                    &def.ret,
                    format!("the cotangent `{}` of the result", v.params[0].name.name),
                )?;
                let want =
                    Type::tuple(&def.params.iter().map(|p| p.ty.clone()).collect::<Vec<_>>());
                let body =
                    self.in_clause(&def.params, &result, std::slice::from_ref(&ct), |c| {
                        c.check(&v.body, &want)
                    })?;
                Some((ct, body, v.span))
            }
        };
        // The body, and the clauses' Cartesian parts, may use the definitions above.
        let deps = closure(defs, &self.deps.iter().copied().collect::<Vec<_>>());
        let mut cartesian = def.params.clone();
        cartesian.push(result.clone());
        let jvp_t = Rc::new(Template::new(defs, &deps, &cartesian, &tangents, &jvp_body));
        let vjp_t = vjp.as_ref().map(|(ct, body, _)| {
            Rc::new(Template::new(
                defs,
                &deps,
                &cartesian,
                std::slice::from_ref(ct),
                body,
            ))
        });
        // The linearity check, with the positions of the source (the rules below repeat the
        // elaboration, which then succeeds).
        let dummy = |v: &Var| tt::Term::var(&embed::var(v));
        let dummies: Vec<tt::Term> = cartesian.iter().map(dummy).collect();
        let lin = |v: &Var| LTerm::var(&tt::Var::linear(v.name.clone(), tangent(&v.ty)));
        jvp_t.instantiate(&dummies, &tangents.iter().map(lin).collect::<Vec<_>>())?;
        if let (Some(t), Some((ct, _, _))) = (&vjp_t, &vjp) {
            t.instantiate(&dummies, &[lin(ct)])?;
        }
        let entry = Entry {
            name: def.var.name.clone(),
            params: def.params.clone(),
            body: with_deps(defs, &deps, def.body.clone()),
        };
        // Named like a builtin function (LANGUAGE.md's `softplus`): the primitive shadows it.
        let shadows = self.reg.function(&name).is_some();
        let internal = if shadows {
            format!("{name}{}", crate::prim::SHADOW_MARK)
        } else {
            name.clone()
        };
        let prim = Primitive::function(
            internal,
            def.params.iter().map(|p| p.ty.clone()).collect(),
            def.ret.clone(),
            move |x| crate::eval::eval_entry(&entry, &components(x, n)),
        );
        let jvp_rule = {
            let t = jvp_t.clone();
            move |j: &JvpArgs<'_>| {
                let mut c = j.args.to_vec();
                c.push(j.result.clone());
                t.instantiate(&c, j.tangents)
                    .expect("internal error: a checked clause elaborates")
            }
        };
        let derivative = match vjp_t {
            None => Derivative::jvp(jvp_rule),
            Some(t) => Derivative::jvp_vjp(jvp_rule, move |v: &VjpArgs<'_>| {
                let mut c = v.args.to_vec();
                c.push(v.result.clone());
                let l = t
                    .instantiate(&c, std::slice::from_ref(v.cotangent))
                    .expect("internal error: a checked clause elaborates");
                crate::ad::split_linear(l, n)
            }),
        };
        let clause_span = match &vjp {
            Some((_, _, s)) => jvp.span.to(*s),
            None => jvp.span,
        };
        let prim = prim.with_derivative(derivative);
        let reg = self.reg.to_mut();
        let prim = if shadows {
            reg.shadow(&name, prim)
        } else {
            reg.register(prim)
        };
        let prim = prim.map_err(|e| {
            let m = e.message();
            if m.contains("already registered") || m.contains("reserved") {
                Error::type_error(
                    d.name.span,
                    format!(
                        "`{name}` names a builtin operation: a definition with derivative \
                             clauses becomes a primitive and needs a name of its own"
                    ),
                )
            } else {
                Error::type_error(clause_span, format!("the derivative clauses of {m}"))
            }
        })?;
        Ok(Rc::new(Custom {
            prim,
            result,
            tangents,
            jvp: jvp_body,
            vjp: vjp.map(|(ct, body, _)| (ct, body)),
        }))
    }

    /// Runs `f` with the parameters, `result` and the clause's own variables in scope.
    fn in_clause<T>(
        &mut self,
        params: &[Var],
        result: &Var,
        own: &[Var],
        f: impl FnOnce(&mut Self) -> Result<T>,
    ) -> Result<T> {
        let vars: Vec<&Var> = params.iter().chain([result]).chain(own).collect();
        for v in &vars {
            self.push(v);
        }
        let r = f(self);
        for v in vars.iter().rev() {
            self.pop(v);
        }
        r
    }
}
