//! `grad f x`, `jvp f x dx`, `vjp f x ct` inside programs (LANGUAGE.md, "Derivatives inside
//! programs"): checked here, elaborated by a [`Differentiate`] the caller supplies (AD lives
//! above the source language: [`crate::ad::nested::Elaborator`] differentiates and concretises
//! the derivative back into a core term, so the result is an ordinary term, itself
//! differentiable).
//!
//! The checker hands over the function as an [`Entry`] whose parameters are the first-order
//! variables `f` captures, then its argument: `E(c1, ..., ck, x) = f x`, with the top-level
//! definitions `f` uses bound by `let` in front. The derivative is taken with respect to `x`
//! only, but the captured variables are ordinary inputs of the derivative code (no
//! `stopGradient`), so an enclosing derivative sees how the inner result depends on them: no
//! perturbation confusion (`theory-notes/12-nested-ad.md`).
//!
//! A function the form uses must have a known term to differentiate through:
//! * a top-level definition, or a local function bound by `let` (the checker records both
//!   values, and they are bound by `let` in front of the entry);
//! * a function *parameter* of a definition (`def newton (f : Real -> Real) (x : Real) = x - f x
//!   / grad f x`): such a definition is a [`Template`]. It is checked once with placeholders
//!   for the forms over its parameters, to learn its type, and checked again at each call with
//!   the arguments' terms as the parameters' values ([`Checker::instantiate`]), so the form
//!   differentiates the function actually passed (specialisation, as in Futhark's
//!   defunctionalisation). A template that passes its parameter on to another template is one
//!   too. A `def rec` template is specialised with its function parameters fixed: its
//!   recursive calls, which must pass them on unchanged, call the instance's fixpoint over the
//!   other parameters ([`Instance`]);
//! * any other function (a lambda's parameter, a pattern's or `case` branch's variable, an
//!   element of a tuple or array, a loop's state) is known only at run time: the form becomes
//!   a marker, and `check::carry` makes the values of its type carry their derivatives.

use super::{Arg, Checker};
use crate::error::{Error, Result, Span};
use crate::source::syntax::{self as ast, Expr, ExprKind};
use crate::source::term::{Entry, Pat, Term, TermKind, Var, VarId};
use crate::types::Type;
use std::collections::{BTreeMap, HashSet};
use std::rc::Rc;

/// Which form.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Form {
    /// `grad f x : A`.
    Grad,
    /// `jvp f x dx : (B, B)`.
    Jvp,
    /// `vjp f x ct : (B, A)`.
    Vjp,
}

/// Differentiates a function given as an entry (captured variables, then the argument) and
/// returns the core term of the form's result, given the terms for the entry's parameters
/// (`args`) and the form's third argument (`dx` or `ct`), if any.
///
/// A parameter is first-order (a captured variable, the argument), or, in the entries
/// `check::carry` builds, a function `A -> B` between first-order types known only at run
/// time: its term is then `(f, (rev, fwd))`, `f : A -> B` and the derivatives its value
/// carries (`rev : A -> B -> (B, A)`, `fwd : A -> A -> (B, B)`, on dense (co)tangents; `()`
/// for one it does not carry), through which the derivative of the entry goes.
pub trait Differentiate {
    /// The elaborated form.
    fn elaborate(
        &self,
        form: Form,
        entry: &Entry,
        args: &[Term],
        extra: Option<Term>,
    ) -> Result<Term>;
}

/// Types whose tangents are themselves: `Real`, tuples and arrays of them.
pub(super) fn self_tangent(t: &Type) -> bool {
    crate::deep::deep(|| match t {
        Type::Real => true,
        Type::Prod(p) => self_tangent(&p.0) && self_tangent(&p.1),
        Type::Array(a) => self_tangent(a),
        _ => false,
    })
}

/// The variables bound inside a term and those it uses.
fn bound_and_used(t: &Term) -> (HashSet<VarId>, Vec<Var>) {
    let mut bound = HashSet::new();
    let mut used = Vec::new();
    let mut seen = HashSet::new();
    let mut stack = vec![t];
    while let Some(t) = stack.pop() {
        match &t.kind {
            TermKind::Var(v) if seen.insert(v.id) => used.push(v.clone()),
            TermKind::Lam(x, _) => {
                bound.insert(x.id);
            }
            TermKind::Let(p, _, _) => bound.extend(p.vars().iter().map(|v| v.id)),
            TermKind::Case(_, p, _, q, _) => {
                bound.extend(p.vars().iter().map(|v| v.id));
                bound.extend(q.vars().iter().map(|v| v.id));
            }
            _ => {}
        }
        stack.extend(t.children());
    }
    (bound, used)
}

/// The free variables of a term, in order of first use.
pub(super) fn free_vars(t: &Term) -> Vec<Var> {
    let (bound, used) = bound_and_used(t);
    used.into_iter()
        .filter(|v| !bound.contains(&v.id))
        .collect()
}

impl Checker<'_> {
    /// `grad f x`, `jvp f x dx`, `vjp f x ct`, with all their arguments.
    pub(super) fn nested(&mut self, name: &str, args: &[Arg], span: Span) -> Result<Term> {
        let form = match name {
            "grad" => Form::Grad,
            "jvp" => Form::Jvp,
            _ => Form::Vjp,
        };
        let unannotated = matches!(args[0], Arg::Src(Expr { kind: ExprKind::Lam(ps, _), .. }) if ps.iter().any(|p| p.ty.is_none()));
        let (f, x) = if unannotated {
            let x = self.infer_arg(args[1])?;
            (self.infer_fn_arg(args[0], std::slice::from_ref(&x.ty))?, x)
        } else {
            let f = self.infer_arg(args[0])?;
            let Some((a, _)) = f.ty.as_fun() else {
                return Err(Error::type_error(
                    args[0].span(),
                    format!("`{name}` differentiates a function, found `{}`", f.ty),
                ));
            };
            let a = a.clone();
            (f.clone(), self.check_arg(args[1], &a)?)
        };
        let (a, b) = f.ty.as_fun().expect("a function");
        let (a, b) = (a.clone(), b.clone());
        for (what, t) in [("argument", &a), ("result", &b)] {
            if !self_tangent(t) {
                return Err(Error::type_error(
                    args[0].span(),
                    format!(
                        "`{name}` differentiates functions between `Real`s, tuples and arrays \
                         of them, but this function's {what} has type `{t}`"
                    ),
                ));
            }
        }
        if form == Form::Grad && b != Type::Real {
            return Err(Error::type_error(
                args[0].span(),
                format!("`grad` needs a `Real`-valued function, found `{}`", f.ty),
            )
            .with_note("use `vjp f x ct` for other results"));
        }
        let extra = match form {
            Form::Grad => None,
            Form::Jvp => Some(self.check_arg(args[2], &a)?),
            Form::Vjp => Some(self.check_arg(args[2], &b)?),
        };
        let Some(nested) = self.nested else {
            return Err(Error::new(
                crate::error::ErrorKind::Unsupported,
                format!(
                    "`{name}` inside a program needs the differentiating loader \
                     (`chad::internals::ad::nested::load`)"
                ),
            )
            .with_span(span));
        };
        let result_ty = match form {
            Form::Grad => a.clone(),
            Form::Jvp => Type::prod(b.clone(), b.clone()),
            Form::Vjp => Type::prod(b.clone(), a.clone()),
        };
        let (entry, captured) = match self.resolve(name, &f, &a, span) {
            Resolved::Entry(entry, captured) => (entry, captured),
            // A template checked for its type only: the form's value is never used.
            Resolved::Placeholder => {
                return Ok(Term::new(
                    TermKind::Var(Var::fresh("template", result_ty)),
                    span,
                ));
            }
            Resolved::Unknown(v) => {
                // A function parameter of the definition being checked: the definition is a
                // template (specialised per call).
                let Some(v) = self
                    .uses_def_param(&f)
                    .or_else(|| self.def_params.contains(&v.id).then_some(v))
                else {
                    // A function known only at run time (or one that takes such a
                    // function's derivative): its value carries its derivative
                    // (`check::carry`).
                    return Ok(self.dynamic.form(form, &f, x, extra, span));
                };
                self.unresolved = Some(v.id);
                return Err(Error::type_error(
                    args[0].span(),
                    format!(
                        "the function `{name}` differentiates uses `{}`, a local function \
                         (of type `{}`), which cannot be differentiated through",
                        v.name, v.ty
                    ),
                )
                .with_note(
                    "bind it with `let`, define it at the top level, make it a parameter of a \
                     (non-recursive) definition, or write it inside the differentiated lambda",
                ));
            }
        };
        // The user's argument terms bound first, so that the elaborated derivative is a term
        // of its own (`check::carry` leaves it as it is).
        let mut lets = Vec::new();
        let bound = |t: Term, what: &str, lets: &mut Vec<(Var, Term)>| -> Term {
            if matches!(t.kind, TermKind::Var(_) | TermKind::Lit(_)) {
                return t;
            }
            let v = Var::fresh(what, t.ty.clone());
            lets.push((v.clone(), t));
            Term::new(TermKind::Var(v), span)
        };
        let x = bound(x, "x", &mut lets);
        let extra = extra.map(|e| bound(e, "d", &mut lets));
        let mut args_t = captured;
        args_t.push(x);
        let elaborated = nested
            .elaborate(form, &entry, &args_t, extra)
            .map_err(|e| e.or_span(span))?;
        self.dynamic.opaque(&elaborated);
        Ok(lets.into_iter().rev().fold(elaborated, |body, (v, t)| {
            Term::new(TermKind::Let(Pat::Var(v), t, body), span)
        }))
    }

    /// The entry `E(c1, .., ck, x) = f x` of a function `f : a -> _`: its captured first-order
    /// variables `c1 .. ck` (returned as terms, the form's first arguments) and the argument,
    /// with the definitions and `let`-bound functions it uses bound by `let` in front; or why
    /// there is none.
    pub(super) fn resolve(&self, name: &str, f: &Term, a: &Type, span: Span) -> Resolved {
        let mut params = Vec::new();
        let mut globals: BTreeMap<usize, (Var, Term)> = BTreeMap::new();
        let mut pending = free_vars(f);
        while let Some(v) = pending.pop() {
            if let Some((index, value)) = self.values.get(&v.id) {
                if !globals.contains_key(index) {
                    globals.insert(*index, (v.clone(), value.clone()));
                    pending.extend(free_vars(value));
                }
            } else if v.ty.is_first_order() {
                if !params.iter().any(|p: &Var| p.id == v.id) {
                    params.push(v.clone());
                }
            } else if self.placeholders.contains(&v.id) {
                return Resolved::Placeholder;
            } else {
                return Resolved::Unknown(v);
            }
        }
        params.reverse();
        let (entry, captured) = entry_of(name, f, a, params, globals, span);
        Resolved::Entry(entry, captured)
    }
}

/// The entry `E(c1, .., ck, x) = f x` from the variables `f` captures (in order of first
/// use) and the functions it uses (by their order, bound by `let` in front), and the terms
/// of its captured parameters.
pub(super) fn entry_of(
    name: &str,
    f: &Term,
    a: &Type,
    mut params: Vec<Var>,
    globals: BTreeMap<usize, (Var, Term)>,
    span: Span,
) -> (Entry, Vec<Term>) {
    let xv = Var::fresh("x", a.clone());
    let mut body = Term::new(
        TermKind::App(f.clone(), Term::new(TermKind::Var(xv.clone()), span)),
        span,
    );
    for (_, (g, value)) in globals.into_iter().rev() {
        body = Term::new(TermKind::Let(Pat::Var(g), value, body), span);
    }
    let captured: Vec<Term> = params
        .iter()
        .map(|p| Term::new(TermKind::Var(p.clone()), span))
        .collect();
    params.push(xv);
    let entry = Entry {
        name: name.into(),
        params,
        body,
    };
    (entry, captured)
}

impl Checker<'_> {
    /// A function parameter of the definition being checked that `f` uses (through the
    /// known values of the functions it uses).
    fn uses_def_param(&self, f: &Term) -> Option<Var> {
        if self.def_params.is_empty() {
            return None;
        }
        let mut seen = HashSet::new();
        let mut pending = free_vars(f);
        while let Some(v) = pending.pop() {
            if !seen.insert(v.id) {
                continue;
            }
            if self.def_params.contains(&v.id) {
                return Some(v);
            }
            if let Some((_, value)) = self.values.get(&v.id) {
                pending.extend(free_vars(value));
            }
        }
        None
    }
}

/// What [`Checker::resolve`] found.
pub(super) enum Resolved {
    /// The entry and the terms of its captured parameters.
    Entry(Entry, Vec<Term>),
    /// The function uses a placeholder (a template checked for its type).
    Placeholder,
    /// The function uses this function variable, whose value is not known.
    Unknown(Var),
}

/// A definition that differentiates one of its function parameters inside: checked again at
/// each call (see the module doc).
#[derive(Clone)]
pub(super) struct Template<'a> {
    /// Its source.
    pub(super) def: &'a ast::Def,
    /// Its parameters (their names and types; each instance binds fresh ones).
    pub(super) params: Vec<Var>,
    /// Its result type.
    pub(super) ret: Type,
}

/// The most specialisations a program may need: each is a copy of a definition's body, so a
/// chain of definitions each calling the next twice needs exponentially many.
pub(super) const MAX_INSTANCES: usize = 10_000;

impl<'a> Checker<'a> {
    /// Records the value of a local function bound by `let`, for the forms that use it.
    pub(super) fn local_value(&mut self, v: &Var, value: &Term) {
        if !v.ty.is_first_order() {
            self.values.insert(v.id, (self.next_local, value.clone()));
            self.next_local += 1;
        }
    }

    /// A call of the template `name` (with some or all of its arguments, or more): `let p1 = a1
    /// in .. let pk = ak in \pk+1 .. pn -> body`, the body checked again in the definition's
    /// own scope with the function arguments as the parameters' values. Missing arguments are
    /// eta-expanded; they must be first-order.
    pub(super) fn instantiate(
        &mut self,
        name: &str,
        t: &Template<'a>,
        args: &[Expr],
        span: Span,
    ) -> Result<Term> {
        let n = t.params.len();
        let given = args.len().min(n);
        let mut terms = Vec::with_capacity(given);
        for (a, p) in args[..given].iter().zip(&t.params) {
            terms.push(self.check(a, &p.ty)?);
        }
        if let Some(p) = t.params[given..].iter().find(|p| !p.ty.is_first_order()) {
            return Err(Error::type_error(
                span,
                format!(
                    "`{name}` differentiates its function parameter `{}` inside, so each use \
                     must give it (and the parameters before it)",
                    p.name
                ),
            )
            .with_note(format!(
                "the definition is specialised to the function it is given; write \
                 `{name} f ..` rather than passing `{name}` itself"
            )));
        }
        // Checking a template for its type, with a function argument that is itself only a
        // placeholder: the call's value is never used either, and its type is known.
        let unknown = |a: &Term| {
            free_vars(a)
                .iter()
                .any(|v| self.placeholders.contains(&v.id))
        };
        if terms.iter().any(unknown) {
            let rest: Vec<Type> = t.params[given..].iter().map(|p| p.ty.clone()).collect();
            let ty = Type::curried(&rest, t.ret.clone());
            let placeholder = Term::new(TermKind::Var(Var::fresh("template", ty)), span);
            return self.extra_args(placeholder, name, args, n, span);
        }
        // A function argument using a function parameter of the definition being checked (its
        // first check, which decides whether it is a template): the specialised body would
        // stop at the same variable, so stop here, without specialising a chain of templates
        // to learn it. (Other function variables without a known value are known at run
        // time: the instance's forms over them are `check::carry`'s.)
        if self.active.iter().all(|a| *a.name != *name) {
            for (a, p) in terms.iter().zip(&t.params) {
                if p.ty.is_first_order() {
                    continue;
                }
                let unknown = free_vars(a)
                    .into_iter()
                    .find(|v| self.def_params.contains(&v.id));
                if let Some(v) = unknown {
                    self.unresolved = Some(v.id);
                    return Err(Error::type_error(
                        a.span,
                        format!(
                            "`{name}` differentiates its parameter `{}`, given here a function \
                             that uses `{}`, a local function (of type `{}`), which cannot be \
                             differentiated through",
                            p.name, v.name, v.ty
                        ),
                    ));
                }
            }
        }
        // A recursive call inside an instance of a `def rec` template: a call of the instance.
        if let Some(k) = self.active.iter().rposition(|a| *a.name == *name) {
            return self.recursive_call(name, k, &terms, args, span);
        }
        self.instances += 1;
        if self.instances > MAX_INSTANCES {
            return Err(Error::new(
                crate::error::ErrorKind::Unsupported,
                format!(
                    "this program needs more than {MAX_INSTANCES} specialisations of \
                     definitions that differentiate a function parameter (here `{name}`)"
                ),
            )
            .with_span(span)
            .with_note(
                "each call of such a definition is checked and compiled as a copy of its body; \
                 pass the function to fewer calls, or differentiate a top-level definition",
            ));
        }
        let fresh: Vec<Var> = t
            .params
            .iter()
            .map(|p| Var::fresh(p.name.clone(), p.ty.clone()))
            .collect();
        for (v, a) in fresh.iter().zip(&terms) {
            self.local_value(v, a);
        }
        // The body sees the definition's parameters and the top level, not the caller's
        // locals.
        let saved = std::mem::take(&mut self.scope);
        for v in &fresh {
            self.push(v);
        }
        // A `def rec`: its function parameters are fixed for the instance (each recursive call
        // must pass them on unchanged), the others are the parameters of a recursive function.
        let own = t.def.rec.then(|| {
            let dynamic: Vec<Type> = fresh
                .iter()
                .filter(|v| v.ty.is_first_order())
                .map(|v| v.ty.clone())
                .collect();
            Var::fresh(name, Type::curried(&dynamic, t.ret.clone()))
        });
        if let Some(own) = &own {
            self.active.push(Instance {
                name: name.into(),
                own: own.clone(),
                params: fresh.clone(),
            });
        }
        let body = match &t.def.ret {
            Some(r) => self.check(&t.def.body, &r.ty),
            None => self.infer(&t.def.body),
        };
        if own.is_some() {
            self.active.pop();
        }
        self.scope = saved;
        let mut body = body.map_err(|e| {
            if e.kind() != crate::error::ErrorKind::Type {
                return e;
            }
            e.with_note(format!(
                "while checking `{name}` specialised to the function arguments of a call"
            ))
        })?;
        if let Some(own) = own {
            // `let f = e in (fix ..) a1 .. ak` over the first-order arguments given.
            let (dynamic, fixed): (Vec<_>, Vec<_>) = fresh
                .iter()
                .cloned()
                .zip(terms.into_iter().map(Some).chain(std::iter::repeat(None)))
                .partition(|(v, _)| v.ty.is_first_order());
            let def = crate::source::term::Def {
                var: own,
                params: dynamic.iter().map(|(v, _)| v.clone()).collect(),
                ret: t.ret.clone(),
                body,
                deps: Vec::new(),
                rec: true,
                span: t.def.span,
                custom: None,
            };
            let mut call = def.value();
            for (_, a) in dynamic {
                let Some(a) = a else { break };
                call = Term::new(TermKind::App(call, a), span);
            }
            for (v, a) in fixed.into_iter().rev() {
                let a = a.expect("function arguments are given");
                call = Term::new(TermKind::Let(Pat::Var(v), a, call), span);
            }
            return self.extra_args(call, name, args, n, span);
        }
        for v in fresh[given..].iter().rev() {
            body = Term::new(TermKind::Lam(v.clone(), body), span);
        }
        for (v, a) in fresh[..given].iter().zip(terms).rev() {
            body = Term::new(TermKind::Let(Pat::Var(v.clone()), a, body), span);
        }
        self.extra_args(body, name, args, n, span)
    }

    /// `t` (a call of `name` with its `n` parameters given) applied to the arguments past them.
    fn extra_args(
        &mut self,
        t: Term,
        name: &str,
        args: &[Expr],
        n: usize,
        span: Span,
    ) -> Result<Term> {
        if args.len() > n {
            self.apply_rest(t, &format!("`{name}`"), &args[n..], n, span)
        } else {
            Ok(t)
        }
    }
}

/// An instance of a `def rec` template being checked: its recursive calls call `own`.
pub(super) struct Instance {
    /// The definition's name.
    pub(super) name: Rc<str>,
    /// The recursive function over the first-order parameters.
    pub(super) own: Var,
    /// The instance's parameters (the function ones bound to the call's arguments).
    pub(super) params: Vec<Var>,
}

impl Checker<'_> {
    /// `f a1 .. an` inside the instance `k` of the recursive template `f`: each function
    /// argument must be the instance's own parameter, passed on unchanged; the call is `own`
    /// applied to the first-order arguments.
    fn recursive_call(
        &mut self,
        name: &str,
        k: usize,
        terms: &[Term],
        args: &[Expr],
        span: Span,
    ) -> Result<Term> {
        let inst = &self.active[k];
        let mut call = Term::new(TermKind::Var(inst.own.clone()), span);
        for ((p, a), e) in inst.params.iter().zip(terms).zip(args) {
            if p.ty.is_first_order() {
                call = Term::new(TermKind::App(call, a.clone()), span);
            } else if !matches!(&a.kind, TermKind::Var(v) if v.id == p.id) {
                return Err(Error::type_error(
                    e.span,
                    format!(
                        "the recursive definition `{name}` differentiates its function parameter \
                         `{}`, so its recursive calls must pass `{}` on unchanged",
                        p.name, p.name
                    ),
                )
                .with_note("it is specialised to the function each outside call gives"));
            }
        }
        let n = inst.params.len();
        self.extra_args(call, name, args, n, span)
    }
}
