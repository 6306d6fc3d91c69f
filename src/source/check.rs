//! Bidirectional type checking, elaborating surface syntax into typed core terms.
//!
//! `infer` computes a type; `check` pushes an expected type inward. Checking is what lets an
//! integer literal be a `Real` (`2 * x`, `f 3`, `[1, 2.5]`), `inl e` know its other side, and a
//! lambda omit its parameter types where they are known (`map (\x -> x * x) xs`). Binary
//! operators infer the operand that is not a bare integer literal first, then check the other
//! against it.
//!
//! Elaboration: operators become primitives (`+` on `Real` is `add`, on `Int` is `iadd`);
//! `a && b` is `if a then b else false` and `a || b` is `if a then true else b` (short-circuit);
//! builtins used without all their arguments become lambdas (`map exp xs` passes
//! `\(x : Real) -> exp x`); supplied arguments of a partial application are evaluated once, at
//! the point of partial application. The conveniences of `check::sugar` (`pi`, `mean`, `maximum`,
//! `reverse`, `zip`, `slice`, `concat`, ..., the power `^`) become the core forms they stand
//! for, so every later stage handles them with no case of its own.

mod carry;
mod custom;
mod nested;
mod sugar;

pub use nested::{Differentiate, Form};

use super::syntax::{self as ast, BinOp, Expr, ExprKind};
use super::term::*;
use crate::deep::deep;
use crate::error::{Error, Result, Span};
use crate::prim::{Prim, Registry};
use crate::types::Type;
use crate::value::tuple_components;
use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::rc::Rc;

/// Checks a parsed program against the primitives of `reg`.
pub fn check_program(prog: &ast::Program, reg: &Registry) -> Result<Program> {
    check_program_with(prog, reg, None)
}

/// [`check_program`], with `grad`, `jvp` and `vjp` inside the program elaborated by `nested`
/// (without it they are an error).
pub fn check_program_with<'a>(
    prog: &'a ast::Program,
    reg: &'a Registry,
    nested: Option<&'a dyn Differentiate>,
) -> Result<Program> {
    let mut c = Checker {
        reg: Cow::Borrowed(reg),
        nested,
        values: HashMap::new(),
        templates: HashMap::new(),
        placeholders: HashSet::new(),
        def_params: HashSet::new(),
        dynamic: carry::Dynamic::default(),
        unresolved: None,
        next_local: usize::MAX / 2,
        instances: 0,
        active: Vec::new(),
        scope: HashMap::new(),
        globals: HashMap::new(),
        customs: HashMap::new(),
        deps: BTreeSet::new(),
        current: None,
    };
    let mut defs: Vec<Def> = Vec::new();
    let mut templates = Vec::new();
    for d in &prog.defs {
        // (A definition with derivative clauses is a primitive, not a global.)
        if c.templates.contains_key(&d.name.name) {
            return Err(Error::type_error(
                d.name.span,
                format!("`{}` is defined twice", d.name.name),
            )
            .with_label("second definition"));
        }
        if let Some(i) = defs.iter().position(|x| *x.var.name == *d.name.name) {
            return Err(Error::type_error(
                d.name.span,
                format!("`{}` is defined twice", d.name.name),
            )
            .with_label("second definition")
            .with_note(format!(
                "the first definition of `{}` is definition number {}",
                d.name.name,
                i + 1
            )));
        }
        c.current = Some(d.name.name.clone());
        c.deps.clear();
        let mut params = Vec::new();
        for p in &d.params {
            let ty =
                p.ty.as_ref()
                    .expect("parser requires annotations")
                    .ty
                    .clone();
            if params.iter().any(|v: &Var| v.name == p.name.name) && &*p.name.name != "_" {
                return Err(Error::type_error(
                    p.name.span,
                    format!("parameter `{}` is bound twice", p.name.name),
                ));
            }
            params.push(Var::fresh(p.name.name.clone(), ty));
        }
        // A `def rec` is in scope in its own body, at its declared type.
        let own =
            if d.rec {
                let Some(ret) = &d.ret else {
                    return Err(Error::type_error(
                    d.name.span,
                    format!("the recursive definition `{}` needs its result type", d.name.name),
                )
                .with_note(format!(
                    "write `def rec {} (x : T) .. : R = ..`: a `def rec` is in scope in its own \
                     body, so its type must be known before the body is checked",
                    d.name.name
                )));
                };
                if params.is_empty() {
                    return Err(Error::type_error(
                        d.name.span,
                        format!(
                            "the recursive definition `{}` needs at least one parameter",
                            d.name.name
                        ),
                    )
                    .with_note("only functions can be recursive"));
                }
                let ty = Type::curried(
                    &params.iter().map(|p| p.ty.clone()).collect::<Vec<_>>(),
                    ret.ty.clone(),
                );
                let var = Var::fresh(d.name.name.clone(), ty);
                c.push(&var);
                Some(var)
            } else {
                None
            };
        for v in &params {
            c.push(v);
        }
        c.unresolved = None;
        c.def_params = params
            .iter()
            .filter(|p| !p.ty.is_first_order())
            .map(|p| p.id)
            .collect();
        let check_body = |c: &mut Checker| match &d.ret {
            Some(t) => c.check(&d.body, &t.ty),
            None => c.infer(&d.body),
        };
        let mut body = check_body(&mut c);
        // A definition that differentiates a function parameter inside is a template
        // (`check::nested`): checked here with placeholders for its type, and again at each
        // call.
        let template = body.is_err()
            && d.jvp.is_none()
            && c.unresolved
                .is_some_and(|id| params.iter().any(|p| p.id == id));
        if template {
            let functions: Vec<VarId> = params
                .iter()
                .filter(|p| !p.ty.is_first_order())
                .map(|p| p.id)
                .collect();
            c.placeholders.extend(functions.iter().copied());
            let again = check_body(&mut c);
            for id in &functions {
                c.placeholders.remove(id);
            }
            // (If this fails too, its error is the real one.)
            body = again;
        }
        c.def_params.clear();
        for v in &params {
            c.pop(v);
        }
        if let Some(v) = &own {
            c.pop(v);
        }
        let body = body?;
        let ret = body.ty.clone();
        let ty = Type::curried(
            &params.iter().map(|p| p.ty.clone()).collect::<Vec<_>>(),
            ret.clone(),
        );
        if template {
            c.templates.insert(
                d.name.name.clone(),
                nested::Template {
                    def: d,
                    params: params.clone(),
                    ret: ret.clone(),
                },
            );
            templates.push(Signature {
                name: d.name.name.clone(),
                ty,
                position: defs.len(),
            });
            continue;
        }
        let var = own.unwrap_or_else(|| Var::fresh(d.name.name.clone(), ty));
        let mut def = Def {
            var,
            params,
            ret,
            body,
            deps: c.deps.iter().copied().collect(),
            rec: d.rec,
            span: d.span,
            custom: None,
        };
        if let Some(jvp) = &d.jvp {
            def.custom = Some(c.custom(d, jvp, &def, &defs)?);
            c.customs.insert(d.name.name.clone(), defs.len());
        } else {
            c.globals
                .insert(d.name.name.clone(), (defs.len(), def.var.clone()));
            c.values.insert(def.var.id, (defs.len(), def.value()));
        }
        defs.push(def);
    }
    c.carry(&mut defs)?;
    Ok(Program { defs, templates })
}

/// The polymorphic builtins, elaborated by the checker, with their arities.
const POLY: &[(&str, usize)] = &[
    ("fst", 1),
    ("snd", 1),
    ("inl", 1),
    ("inr", 1),
    ("map", 2),
    ("map2", 3),
    ("build", 2),
    ("length", 1),
    ("replicate", 2),
    // The conveniences of `sugar`.
    ("pi", 0),
    ("mean", 1),
    ("maximum", 1),
    ("minimum", 1),
    ("reverse", 1),
    ("zip", 2),
    ("unzip", 1),
    ("slice", 3),
    ("concat", 2),
    ("loop", 2),
    ("fold", 3),
    ("scan", 3),
    ("iterate", 3),
    ("while", 3),
    // Derivatives inside programs (`nested`).
    ("grad", 2),
    ("jvp", 3),
    ("vjp", 3),
];

struct Checker<'r> {
    /// The primitives, with those the program's definitions with derivative clauses add.
    reg: Cow<'r, Registry>,
    /// What elaborates `grad`, `jvp` and `vjp` (none: they are an error).
    nested: Option<&'r dyn Differentiate>,
    /// The definitions checked so far and the local functions bound by `let`, as values (for
    /// the functions `grad` differentiates), with their order (locals after definitions).
    values: HashMap<VarId, (usize, Term)>,
    /// The definitions that differentiate a function parameter inside (`nested`), by name.
    templates: HashMap<Rc<str>, nested::Template<'r>>,
    /// The function parameters of a template being checked for its type: a form over one of
    /// them is a placeholder.
    placeholders: HashSet<VarId>,
    /// The function parameters of the definition being checked (its first check): a form
    /// over one of them makes the definition a template.
    def_params: HashSet<VarId>,
    /// The forms over functions known only at run time, for `carry`.
    dynamic: carry::Dynamic,
    /// The function variable without a known value that stopped the last form.
    unresolved: Option<VarId>,
    /// The order of the next local function in `values`.
    next_local: usize,
    /// How many calls of templates have been specialised (at most `nested::MAX_INSTANCES`).
    instances: usize,
    /// The instances of recursive templates being checked, innermost last.
    active: Vec<nested::Instance>,
    scope: HashMap<Rc<str>, Vec<Var>>,
    globals: HashMap<Rc<str>, (usize, Var)>,
    /// The definitions with derivative clauses (primitives of `reg`), by name.
    customs: HashMap<Rc<str>, usize>,
    deps: BTreeSet<usize>,
    current: Option<Rc<str>>,
}

/// An argument of a builtin: either source still to elaborate or an elaborated term
/// (a variable introduced by eta-expansion).
#[derive(Clone, Copy)]
enum Arg<'a> {
    Src(&'a Expr),
    Core(&'a Term),
}

impl Arg<'_> {
    fn span(&self) -> Span {
        match self {
            Arg::Src(e) => e.span,
            Arg::Core(t) => t.span,
        }
    }
}

/// Integer literals whose type is decided by context: `3`, `-3`, `2 * 3`.
fn is_flexible(e: &Expr) -> bool {
    match &e.kind {
        ExprKind::Int(_) => true,
        ExprKind::Neg(x) => is_flexible(x),
        ExprKind::Binary(BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Div | BinOp::Pow, a, b) => {
            is_flexible(a) && is_flexible(b)
        }
        _ => false,
    }
}

/// Expressions whose type cannot be inferred without context (a syntactic approximation used
/// only to choose which of two branches to infer first).
fn needs_context(e: &Expr) -> bool {
    match &e.kind {
        ExprKind::Array(items) => items.is_empty(),
        ExprKind::Lam(ps, _) => ps.iter().any(|p| p.ty.is_none()),
        ExprKind::App(h, _) => {
            matches!(&h.kind, ExprKind::Var(x) if &**x == "inl" || &**x == "inr")
        }
        ExprKind::Var(x) => POLY.iter().any(|(n, _)| **n == **x),
        ExprKind::Let(_, _, _, b) => needs_context(b),
        ExprKind::If(_, a, b) | ExprKind::Case(_, _, a, _, b) => {
            needs_context(a) && needs_context(b)
        }
        _ => false,
    }
}

/// `f a` (`what` names `f`) where an `expected` non-function was wanted and `f a` is a function
/// `found` that gives it after `k` more arguments: "`f` takes n + k arguments, but is given n".
fn too_few_arguments(
    what: &str,
    given: usize,
    found: &Type,
    expected: &Type,
    span: Span,
) -> Option<Error> {
    if found == expected || expected.as_fun().is_some() {
        return None;
    }
    let mut missing = 0;
    let mut t = found;
    while let Some((_, r)) = t.as_fun() {
        missing += 1;
        t = r;
        if t == expected {
            let takes = given + missing;
            return Some(
                Error::type_error(
                    span,
                    format!(
                        "{what} takes {takes} argument{}, but is given {given}",
                        if takes == 1 { "" } else { "s" }
                    ),
                )
                .with_label(format!(
                    "{missing} argument{} missing: this is a function `{found}`",
                    if missing == 1 { "" } else { "s" }
                ))
                .with_note(format!("a `{expected}` is expected here")),
            );
        }
    }
    None
}

/// `f x -1` is `(f x) - 1`: where that subtraction fails on a function, say so. The function
/// application is the rightmost operand of `a` (`y + pow x -1` is `(y + pow x) - 1`).
fn negative_argument_hint(op: BinOp, a: &Expr, b: &Expr, e: Error) -> Error {
    let literal = match b.kind {
        ExprKind::Int(i) => i.to_string(),
        ExprKind::Real(x) => crate::value::format_real(x),
        _ => return e,
    };
    let mut a = a;
    while let ExprKind::Binary(_, _, r) = &a.kind {
        a = r;
    }
    let ExprKind::App(f, args) = &a.kind else {
        return e;
    };
    if op != BinOp::Sub || e.span() != Some(a.span) {
        return e;
    }
    // The application as written, where it is short and simple (`pow x`), else `f x`.
    let word = |e: &Expr| match &e.kind {
        ExprKind::Var(x) => Some(x.to_string()),
        ExprKind::Int(i) if *i >= 0 => Some(i.to_string()),
        ExprKind::Real(x) if *x >= 0.0 => Some(crate::value::format_real(*x)),
        _ => None,
    };
    let call = std::iter::once(&**f)
        .chain(args)
        .map(word)
        .collect::<Option<Vec<_>>>()
        .map_or_else(|| "f x".to_string(), |w| w.join(" "));
    e.with_note(format!(
        "`{call} -{literal}` is the subtraction `({call}) - {literal}`: a negative argument \
         needs parentheses, `{call} (-{literal})`"
    ))
}

fn mismatch(span: Span, expected: &Type, found: &Type) -> Error {
    let mut e = Error::type_error(
        span,
        format!("type mismatch: expected `{expected}`, found `{found}`"),
    )
    .with_label(format!("this has type `{found}`"));
    if matches!((expected, found), (Type::Real, Type::Int)) {
        e = e.with_note("convert an Int to a Real with `toReal`");
    }
    e
}

impl<'r> Checker<'r> {
    fn push(&mut self, v: &Var) {
        self.scope
            .entry(v.name.clone())
            .or_default()
            .push(v.clone());
    }

    fn pop(&mut self, v: &Var) {
        if let Some(stack) = self.scope.get_mut(&v.name) {
            stack.pop();
        }
    }

    fn local(&self, name: &str) -> Option<&Var> {
        self.scope.get(name).and_then(|s| s.last())
    }

    /// Is `name` a builtin that is not shadowed by a local or a definition?
    fn builtin_name(&self, name: &str) -> bool {
        self.local(name).is_none()
            && !self.globals.contains_key(name)
            && !self.templates.contains_key(name)
            && (POLY.iter().any(|(n, _)| *n == name) || self.reg.function(name).is_some())
    }

    fn unknown_variable(&self, name: &str, span: Span) -> Error {
        let e = Error::type_error(span, format!("unknown variable `{name}`"))
            .with_label("not in scope");
        if self.current.as_deref() == Some(name) {
            return e.with_note(format!(
                "`{name}` is not in scope in its own body: a plain `def` cannot be recursive \
                 (write `def rec {name} (x : T) .. : R = ..`, or the repetition with `loop`, \
                 `fold`, `iterate` or `while`)"
            ));
        }
        if let Some(hint) = sugar::synonym(name) {
            return e.with_note(hint);
        }
        // Locals first, then definitions, then builtins: ties go to the nearest scope.
        let mut locals: Vec<String> = self
            .scope
            .iter()
            .filter(|(_, s)| !s.is_empty())
            .map(|(n, _)| n.to_string())
            .collect();
        locals.sort();
        let mut globals: Vec<String> = self.globals.keys().map(|n| n.to_string()).collect();
        globals.sort();
        let builtins = self
            .reg
            .all()
            .iter()
            .filter(|p| self.reg.function(p.name()).is_some())
            .map(|p| p.name().to_string())
            .chain(POLY.iter().map(|(n, _)| n.to_string()))
            .chain(["true", "false"].map(String::from));
        match super::suggest(name, locals.into_iter().chain(globals).chain(builtins)) {
            Some(c) => e.with_note(format!("did you mean `{c}`?")),
            None => e,
        }
    }

    // ----- patterns -----

    fn bind_pattern(
        &mut self,
        p: &ast::Pattern,
        ty: &Type,
        seen: &mut Vec<Rc<str>>,
    ) -> Result<Pat> {
        deep(|| {
            Ok(match p {
                ast::Pattern::Var(x) => {
                    if seen.contains(&x.name) {
                        return Err(Error::type_error(
                            x.span,
                            format!("`{}` is bound twice in the same pattern", x.name),
                        ));
                    }
                    seen.push(x.name.clone());
                    Pat::Var(Var::fresh(x.name.clone(), ty.clone()))
                }
                ast::Pattern::Wild(_) => Pat::Wild(ty.clone()),
                ast::Pattern::Tuple(items, span) => {
                    let comps = tuple_components(ty, items.len());
                    if comps.len() != items.len() || ty.as_prod().is_none() {
                        return Err(Error::type_error(
                            *span,
                            format!(
                                "this tuple pattern has {} components, but the value has type `{ty}`",
                                items.len()
                            ),
                        ));
                    }
                    let mut pats = Vec::new();
                    for (q, t) in items.iter().zip(&comps) {
                        pats.push(self.bind_pattern(q, t, seen)?);
                    }
                    let last = pats.pop().expect("at least two components");
                    pats.into_iter()
                        .rev()
                        .fold(last, |acc, q| Pat::Pair(Box::new(q), Box::new(acc)))
                }
            })
        })
    }

    /// Elaborates `body` with the pattern's variables in scope.
    fn under<T>(&mut self, pat: &Pat, f: impl FnOnce(&mut Self) -> Result<T>) -> Result<T> {
        let vars: Vec<Var> = pat.vars().into_iter().cloned().collect();
        for v in &vars {
            self.push(v);
        }
        let r = f(self);
        for v in vars.iter().rev() {
            self.pop(v);
        }
        r
    }

    // ----- inference -----

    fn infer(&mut self, e: &Expr) -> Result<Term> {
        deep(|| self.infer_inner(e))
    }

    fn infer_inner(&mut self, e: &Expr) -> Result<Term> {
        let span = e.span;
        let mk = |kind| Term::new(kind, span);
        match &e.kind {
            ExprKind::Var(x) => self.var(x, span, None),
            ExprKind::Int(i) => Ok(mk(TermKind::Lit(Lit::Int(*i)))),
            ExprKind::Real(x) => Ok(mk(TermKind::Lit(Lit::Real(*x)))),
            ExprKind::Bool(b) => Ok(mk(TermKind::Lit(Lit::Bool(*b)))),
            ExprKind::Unit => Ok(mk(TermKind::Lit(Lit::Unit))),
            ExprKind::Tuple(items) => {
                let ts = items
                    .iter()
                    .map(|i| self.infer(i))
                    .collect::<Result<Vec<_>>>()?;
                Ok(tuple_term(ts, span))
            }
            ExprKind::Array(items) => {
                let Some(pivot) = items
                    .iter()
                    .position(|i| !is_flexible(i))
                    .or(if items.is_empty() { None } else { Some(0) })
                else {
                    return Err(
                        Error::type_error(span, "cannot infer the element type of `[]`")
                            .with_note("annotate it, e.g. `([] : Array Real)`"),
                    );
                };
                let first = self.infer(&items[pivot])?;
                let elem = first.ty.clone();
                let mut ts = Vec::new();
                for (k, it) in items.iter().enumerate() {
                    ts.push(if k == pivot {
                        first.clone()
                    } else {
                        self.check(it, &elem)?
                    });
                }
                Ok(mk(TermKind::Array(elem, ts)))
            }
            ExprKind::Lam(params, body) => self.lambda(params, body, &[], None, span),
            ExprKind::App(head, args) => self.app(head, args, None, span),
            ExprKind::Let(p, ann, rhs, body) => self.let_(p, ann.as_ref(), rhs, body, None, span),
            ExprKind::If(c, a, b) => {
                let c = self.check(c, &Type::Bool)?;
                let (a, b) = self.infer_both(a, b)?;
                Ok(mk(TermKind::If(c, a, b)))
            }
            ExprKind::Case(s, p, a, q, b) => self.case(s, p, a, q, b, None, span),
            ExprKind::Binary(op, a, b) => self.binary(*op, a, b, None, span),
            ExprKind::Neg(x) => {
                let t = self.infer(x)?;
                self.negate(t, x.span, span)
            }
            ExprKind::Annot(x, t) => self.check(x, &t.ty),
        }
    }

    /// Infers one of two expressions that must have the same type and checks the other against
    /// it, choosing the order so that literals and context-dependent forms are the checked ones.
    fn infer_both(&mut self, a: &Expr, b: &Expr) -> Result<(Term, Term)> {
        if (is_flexible(a) && !is_flexible(b)) || (needs_context(a) && !needs_context(b)) {
            let tb = self.infer(b)?;
            let ta = self.check(a, &tb.ty)?;
            Ok((ta, tb))
        } else {
            let ta = self.infer(a)?;
            let tb = self.check(b, &ta.ty)?;
            Ok((ta, tb))
        }
    }

    fn var(&mut self, x: &Rc<str>, span: Span, expected: Option<&Type>) -> Result<Term> {
        if let Some(v) = self.local(x) {
            return Ok(Term::new(TermKind::Var(v.clone()), span));
        }
        if let Some((i, v)) = self.globals.get(x) {
            self.deps.insert(*i);
            return Ok(Term::new(TermKind::Var(v.clone()), span));
        }
        if let Some(t) = self.templates.get(x).cloned() {
            return self.instantiate(x, &t, &[], span);
        }
        if self.builtin_name(x) {
            return self.builtin(x, &[], expected, span);
        }
        Err(self.unknown_variable(x, span))
    }

    fn lambda(
        &mut self,
        params: &[ast::Param],
        body: &Expr,
        known: &[Type],
        expected_result: Option<&Type>,
        span: Span,
    ) -> Result<Term> {
        deep(|| {
            let Some((p, rest)) = params.split_first() else {
                // All parameters bound; more known argument types mean the body must itself be
                // a function.
                return match (known.is_empty(), &body.kind) {
                    (true, _) => match expected_result {
                        Some(t) => self.check(body, t),
                        None => self.infer(body),
                    },
                    (false, ExprKind::Lam(ps, b)) => {
                        self.lambda(ps, b, known, expected_result, body.span)
                    }
                    (false, _) => {
                        let t = self.infer(body)?;
                        match peel(&t.ty, known.len()) {
                            Some((doms, _)) if doms == known => Ok(t),
                            _ => Err(Error::type_error(
                                body.span,
                                format!(
                                    "expected a function taking `{}`, found `{}`",
                                    known
                                        .iter()
                                        .map(|k| k.to_string())
                                        .collect::<Vec<_>>()
                                        .join("`, then `"),
                                    t.ty
                                ),
                            )),
                        }
                    }
                };
            };
            let ty = match (&p.ty, known.first()) {
                (Some(ann), Some(k)) if ann.ty != *k => return Err(mismatch(ann.span, k, &ann.ty)),
                (Some(ann), _) => ann.ty.clone(),
                (None, Some(k)) => k.clone(),
                (None, None) => {
                    return Err(Error::type_error(
                        p.name.span,
                        format!("cannot infer the type of parameter `{}`", p.name.name),
                    )
                    .with_note(format!("annotate it: `\\({} : T) -> ...`", p.name.name)));
                }
            };
            let var = Var::fresh(p.name.name.clone(), ty);
            let known_rest = if known.is_empty() { known } else { &known[1..] };
            let b = self.under(&Pat::Var(var.clone()), |s| {
                s.lambda(rest, body, known_rest, expected_result, span)
            })?;
            Ok(Term::new(TermKind::Lam(var, b), span))
        })
    }

    fn let_(
        &mut self,
        p: &ast::Pattern,
        ann: Option<&ast::TypeAnn>,
        rhs: &Expr,
        body: &Expr,
        expected: Option<&Type>,
        span: Span,
    ) -> Result<Term> {
        // Iterate over a chain of lets so that the Rust stack does not grow per binding.
        let mut chain: Vec<(Pat, Term, Span)> = Vec::new();
        let mut cur = (p, ann, rhs, body, span);
        let result = loop {
            let (p, ann, rhs, body, span) = cur;
            let r = match ann {
                Some(t) => self.check(rhs, &t.ty),
                None => self.infer(rhs),
            };
            let r = match r {
                Ok(r) => r,
                Err(e) => break Err(e),
            };
            let pat = match self.bind_pattern(p, &r.ty, &mut Vec::new()) {
                Ok(p) => p,
                Err(e) => break Err(e),
            };
            for v in pat.vars() {
                let v = v.clone();
                self.push(&v);
            }
            if let Pat::Var(v) = &pat {
                self.local_value(v, &r);
            }
            chain.push((pat, r, span));
            if let ExprKind::Let(p2, ann2, rhs2, body2) = &body.kind {
                cur = (p2, ann2.as_ref(), rhs2, body2, body.span);
                continue;
            }
            break match expected {
                Some(t) => self.check(body, t),
                None => self.infer(body),
            };
        };
        for (pat, _, _) in chain.iter().rev() {
            for v in pat.vars().into_iter().rev() {
                let v = v.clone();
                self.pop(&v);
            }
        }
        let mut t = result?;
        while let Some((pat, r, span)) = chain.pop() {
            t = Term::new(TermKind::Let(pat, r, t), span);
        }
        Ok(t)
    }

    #[allow(clippy::too_many_arguments)]
    fn case(
        &mut self,
        s: &Expr,
        p: &ast::Pattern,
        a: &Expr,
        q: &ast::Pattern,
        b: &Expr,
        expected: Option<&Type>,
        span: Span,
    ) -> Result<Term> {
        let st = self.infer(s)?;
        let Some((l, r)) = st.ty.as_sum() else {
            return Err(Error::type_error(
                s.span,
                format!(
                    "`case` expects a value of a sum type `A + B`, found `{}`",
                    st.ty
                ),
            )
            .with_label(format!("this has type `{}`", st.ty)));
        };
        let (l, r) = (l.clone(), r.clone());
        let pl = self.bind_pattern(p, &l, &mut Vec::new())?;
        let pr = self.bind_pattern(q, &r, &mut Vec::new())?;
        let (ta, tb) = match expected {
            Some(t) => {
                let ta = self.under(&pl, |c| c.check(a, t))?;
                let tb = self.under(&pr, |c| c.check(b, t))?;
                (ta, tb)
            }
            None => {
                let swap =
                    (is_flexible(a) && !is_flexible(b)) || (needs_context(a) && !needs_context(b));
                if swap {
                    let tb = self.under(&pr, |c| c.infer(b))?;
                    let ta = self.under(&pl, |c| c.check(a, &tb.ty))?;
                    (ta, tb)
                } else {
                    let ta = self.under(&pl, |c| c.infer(a))?;
                    let tb = self.under(&pr, |c| c.check(b, &ta.ty))?;
                    (ta, tb)
                }
            }
        };
        Ok(Term::new(TermKind::Case(st, pl, ta, pr, tb), span))
    }

    fn negate(&mut self, t: Term, operand: Span, span: Span) -> Result<Term> {
        let op = match t.ty {
            Type::Real => "neg",
            Type::Int => "ineg",
            _ => {
                return Err(Error::type_error(
                    operand,
                    format!("unary `-` expects a Real or an Int, found `{}`", t.ty),
                ));
            }
        };
        Ok(Term::new(
            TermKind::Prim(crate::prim::op(op), vec![t]),
            span,
        ))
    }

    fn binary(
        &mut self,
        op: BinOp,
        a: &Expr,
        b: &Expr,
        expected: Option<&Type>,
        span: Span,
    ) -> Result<Term> {
        match op {
            BinOp::And | BinOp::Or => {
                let ta = self.check(a, &Type::Bool)?;
                let tb = self.check(b, &Type::Bool)?;
                let lit = |v| Term::new(TermKind::Lit(Lit::Bool(v)), span);
                let kind = if op == BinOp::And {
                    TermKind::If(ta, tb, lit(false))
                } else {
                    TermKind::If(ta, lit(true), tb)
                };
                Ok(Term::new(kind, span))
            }
            BinOp::Pow => self.power(a, b, expected, span),
            BinOp::Rem => self.remainder(a, b, span),
            BinOp::Index => {
                let xs = self.infer(a)?;
                if xs.ty.as_array().is_none() {
                    return Err(Error::type_error(
                        a.span,
                        format!("indexing with `!` expects an array, found `{}`", xs.ty),
                    ));
                }
                let i = self.check(b, &Type::Int)?;
                Ok(Term::new(TermKind::Index(xs, i), span))
            }
            _ => {
                let sym = op.symbol();
                let (real, int, boolean) =
                    crate::prim::operator_prims(sym).expect("arithmetic or comparison");
                let arithmetic = matches!(op, BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Div);
                let allowed = |t: &Type| match t {
                    Type::Real => real,
                    Type::Int => int,
                    Type::Bool => boolean,
                    _ => None,
                };
                let describe = if boolean.is_some() {
                    "Real, Int or Bool"
                } else {
                    "Real or Int"
                };
                let (ta, tb) = match expected {
                    Some(t @ (Type::Real | Type::Int)) if arithmetic => (
                        self.check(a, t)
                            .map_err(|e| negative_argument_hint(op, a, b, e))?,
                        self.check(b, t)?,
                    ),
                    _ => {
                        let swap = is_flexible(a) && !is_flexible(b);
                        let (first, second) = if swap { (b, a) } else { (a, b) };
                        let t1 = self.infer(first)?;
                        if allowed(&t1.ty).is_none() {
                            let e = Error::type_error(
                                first.span,
                                format!(
                                    "operator `{sym}` expects {describe} operands, found `{}`",
                                    t1.ty
                                ),
                            )
                            .with_label(format!("this has type `{}`", t1.ty));
                            return Err(negative_argument_hint(op, a, b, e));
                        }
                        let t2 = self.check(second, &t1.ty)?;
                        if swap { (t2, t1) } else { (t1, t2) }
                    }
                };
                let name = allowed(&ta.ty).expect("operand type validated");
                let t = Term::new(TermKind::Prim(crate::prim::op(name), vec![ta, tb]), span);
                if let Some(exp) = expected
                    && *exp != t.ty
                {
                    return Err(mismatch(span, exp, &t.ty));
                }
                Ok(t)
            }
        }
    }

    // ----- application and builtins -----

    fn app(
        &mut self,
        head: &Expr,
        args: &[Expr],
        expected: Option<&Type>,
        span: Span,
    ) -> Result<Term> {
        if let ExprKind::Var(x) = &head.kind
            && self.builtin_name(x)
        {
            return self.builtin_app(x, args, expected, span);
        }
        if let ExprKind::Var(x) = &head.kind
            && self.local(x).is_none()
            && let Some(t) = self.templates.get(x).cloned()
        {
            return self.instantiate(x, &t, args, span);
        }
        let f = self.infer(head)?;
        let what = match &head.kind {
            ExprKind::Var(x) => format!("`{x}`"),
            _ => "this function".to_string(),
        };
        self.apply_rest(f, &what, args, 0, span)
    }

    /// Applies `f`, which has consumed `used` arguments already, to the remaining arguments.
    fn apply_rest(
        &mut self,
        mut f: Term,
        what: &str,
        args: &[Expr],
        used: usize,
        span: Span,
    ) -> Result<Term> {
        for (k, a) in args.iter().enumerate() {
            let Some((dom, _)) = f.ty.as_fun() else {
                let given = used + args.len();
                let takes = used + k;
                let msg = if takes == 0 {
                    format!(
                        "{what} has type `{}` and cannot be applied to an argument",
                        f.ty
                    )
                } else {
                    format!(
                        "{what} takes {takes} argument{}, but is given {given}",
                        if takes == 1 { "" } else { "s" }
                    )
                };
                let mut e = Error::type_error(a.span, msg).with_label("extra argument");
                if let (Some(_), ExprKind::Array(items)) = (f.ty.as_array(), &a.kind)
                    && items.len() == 1
                {
                    // `xs[i]`, as in Python or C.
                    let i = match &items[0].kind {
                        ExprKind::Var(x) => x.to_string(),
                        ExprKind::Int(k) if *k >= 0 => k.to_string(),
                        _ => "(i)".to_string(),
                    };
                    let xs = match &f.kind {
                        TermKind::Var(v) => v.name.to_string(),
                        _ => "xs".to_string(),
                    };
                    e = e.with_note(format!("arrays are indexed with `!`: `{xs} ! {i}`"));
                }
                return Err(e);
            };
            let dom = dom.clone();
            let arg = self.check(a, &dom)?;
            let s = if k + 1 == args.len() {
                span
            } else {
                f.span.to(a.span)
            };
            f = Term::new(TermKind::App(f, arg), s);
        }
        Ok(f)
    }

    fn check_arg(&mut self, a: Arg, ty: &Type) -> Result<Term> {
        match a {
            Arg::Src(e) => self.check(e, ty),
            Arg::Core(t) => {
                if t.ty == *ty {
                    Ok(t.clone())
                } else {
                    Err(mismatch(t.span, ty, &t.ty))
                }
            }
        }
    }

    fn infer_arg(&mut self, a: Arg) -> Result<Term> {
        match a {
            Arg::Src(e) => self.infer(e),
            Arg::Core(t) => Ok(t.clone()),
        }
    }

    /// Infers a function argument whose parameter types are known (`map`'s function, `build`'s
    /// generator), so that its lambda may leave them unannotated.
    fn infer_fn_arg(&mut self, a: Arg, params: &[Type]) -> Result<Term> {
        match a {
            Arg::Src(Expr {
                kind: ExprKind::Lam(ps, b),
                span,
            }) => self.lambda(ps, b, params, None, *span),
            Arg::Src(e) if self.bare_poly(e, params.len()).is_some() => {
                let name = self.bare_poly(e, params.len()).expect("checked");
                self.builtin_as_function(&name, params, e.span)
            }
            _ => self.infer_arg(a),
        }
    }

    fn arity(&self, name: &str) -> usize {
        match POLY.iter().find(|(n, _)| *n == name) {
            Some((_, k)) => *k,
            None => self
                .reg
                .function(name)
                .expect("builtin_name checked")
                .params()
                .len(),
        }
    }

    /// A builtin applied to source arguments: more arguments than its arity are applied to the
    /// result (which must then be a function).
    fn builtin_app(
        &mut self,
        name: &str,
        args: &[Expr],
        expected: Option<&Type>,
        span: Span,
    ) -> Result<Term> {
        let arity = self.arity(name);
        if args.len() <= arity {
            let args: Vec<Arg> = args.iter().map(Arg::Src).collect();
            return self.builtin(name, &args, expected, span);
        }
        let first: Vec<Arg> = args[..arity].iter().map(Arg::Src).collect();
        let head = self.builtin(name, &first, None, span)?;
        let what = format!("`{name}`");
        let t = self.apply_rest(head, &what, &args[arity..], arity, span)?;
        match expected {
            Some(e) if *e != t.ty => Err(mismatch(span, e, &t.ty)),
            _ => Ok(t),
        }
    }

    /// A builtin applied to at most its arity of arguments; missing ones are eta-expanded.
    fn builtin(
        &mut self,
        name: &str,
        args: &[Arg],
        expected: Option<&Type>,
        span: Span,
    ) -> Result<Term> {
        if let Some(&i) = self.customs.get(name) {
            self.deps.insert(i);
        }
        let t = if args.len() < self.arity(name) {
            self.eta_expand(name, args, expected, span)?
        } else {
            self.saturated(name, args, expected, span)?
        };
        match expected {
            Some(e) if *e != t.ty => {
                let what = format!("`{name}`");
                Err(too_few_arguments(&what, args.len(), &t.ty, e, span)
                    .unwrap_or_else(|| mismatch(span, e, &t.ty)))
            }
            _ => Ok(t),
        }
    }

    /// `name a1 .. ak` with k below the arity: evaluates the given arguments once, at this point
    /// (binding the non-trivial ones with `let`), and returns a lambda over the missing ones.
    fn eta_expand(
        &mut self,
        name: &str,
        args: &[Arg],
        expected: Option<&Type>,
        span: Span,
    ) -> Result<Term> {
        let arity = self.arity(name);
        // The parameter types, where they are fixed.
        let fixed: Option<Vec<Type>> = if POLY.iter().any(|(n, _)| *n == name) {
            sugar::fixed_params(name)
        } else {
            self.reg.function(name).map(|p| p.params().to_vec())
        };
        let mut given = Vec::new();
        for (k, a) in args.iter().enumerate() {
            given.push(match &fixed {
                Some(p) => self.check_arg(*a, &p[k])?,
                None => self.infer_arg(*a)?,
            });
        }
        let n_missing = arity - args.len();
        let (missing, result): (Vec<Type>, Option<Type>) = if let Some(p) = &fixed {
            (p[args.len()..].to_vec(), None)
        } else if let Some(exp) = expected {
            let (tys, rest) = peel(exp, n_missing).ok_or_else(|| {
                Error::type_error(
                    span,
                    format!("type mismatch: expected `{exp}`, found `{name}` applied to {} of its {arity} arguments", args.len()),
                )
            })?;
            (tys, Some(rest))
        } else if (name == "map" || name == "map2") && !given.is_empty() {
            let (doms, _) = peel(&given[0].ty, arity - 1).ok_or_else(|| {
                Error::type_error(
                    args[0].span(),
                    format!(
                        "`{name}` expects a function of {} argument{}, found `{}`",
                        arity - 1,
                        if arity == 2 { "" } else { "s" },
                        given[0].ty
                    ),
                )
            })?;
            (
                doms[args.len() - 1..]
                    .iter()
                    .cloned()
                    .map(Type::array)
                    .collect(),
                None,
            )
        } else {
            return Err(Error::type_error(
                span,
                format!(
                    "cannot infer the type of `{name}` applied to {} of its {arity} arguments",
                    args.len()
                ),
            )
            .with_note("apply it to all its arguments, or annotate the expected type"));
        };
        let mut lets = Vec::new();
        let mut all = Vec::new();
        for (k, t) in given.into_iter().enumerate() {
            if matches!(
                t.kind,
                TermKind::Var(_) | TermKind::Lit(_) | TermKind::Lam(..)
            ) {
                all.push(t);
            } else {
                let v = Var::fresh(format!("a{}", k + 1), t.ty.clone());
                all.push(Term::new(TermKind::Var(v.clone()), t.span));
                lets.push((v, t));
            }
        }
        let names: &[&str] = if name == "map" || name == "map2" {
            &["xs", "ys"]
        } else {
            &["x", "y", "z", "w"]
        };
        let vars: Vec<Var> = missing
            .iter()
            .enumerate()
            .map(|(k, t)| {
                // Named by position: `pow 2.0` gives `\y -> pow 2.0 y`, `map2 f xs` gives `\ys`.
                let pos = if fixed.is_some() {
                    args.len() + k
                } else {
                    (args.len() + k).saturating_sub(1)
                };
                Var::fresh(names[pos % names.len()], t.clone())
            })
            .collect();
        all.extend(
            vars.iter()
                .map(|v| Term::new(TermKind::Var(v.clone()), span)),
        );
        let refs: Vec<Arg> = all.iter().map(Arg::Core).collect();
        let body = self.saturated(name, &refs, result.as_ref(), span)?;
        let lam = vars
            .into_iter()
            .rev()
            .fold(body, |b, v| Term::new(TermKind::Lam(v, b), span));
        Ok(lets.into_iter().rev().fold(lam, |b, (v, t)| {
            Term::new(TermKind::Let(Pat::Var(v), t, b), span)
        }))
    }

    /// A builtin applied to exactly its arguments.
    fn saturated(
        &mut self,
        name: &str,
        args: &[Arg],
        expected: Option<&Type>,
        span: Span,
    ) -> Result<Term> {
        let mk = |kind| Term::new(kind, span);
        let arity_err = |what: &str, found: &Type, at: Span| {
            Error::type_error(at, format!("`{name}` expects {what}, found `{found}`"))
                .with_label(format!("this has type `{found}`"))
        };
        Ok(match name {
            "fst" | "snd" => {
                let p = self.infer_arg(args[0])?;
                if p.ty.as_prod().is_none() {
                    return Err(arity_err("a pair", &p.ty, args[0].span()));
                }
                mk(if name == "fst" {
                    TermKind::Fst(p)
                } else {
                    TermKind::Snd(p)
                })
            }
            "inl" | "inr" => {
                let Some((l, r)) = expected.and_then(Type::as_sum) else {
                    let mut e = Error::type_error(
                        span,
                        format!("cannot infer the other side of the sum type of `{name}`"),
                    )
                    .with_note(format!("annotate it, e.g. `({name} x : A + B)`"));
                    if let Some(t) = expected {
                        e = Error::type_error(
                            span,
                            format!(
                                "type mismatch: expected `{t}`, found a sum injection `{name}`"
                            ),
                        );
                    }
                    return Err(e);
                };
                let (l, r) = (l.clone(), r.clone());
                if name == "inl" {
                    mk(TermKind::Inl(self.check_arg(args[0], &l)?, r))
                } else {
                    mk(TermKind::Inr(l, self.check_arg(args[0], &r)?))
                }
            }
            "map" | "map2" => {
                let n = if name == "map" { 1 } else { 2 };
                // With an unannotated lambda, infer the arrays first to learn its parameters.
                let lam_needs = matches!(args[0], Arg::Src(Expr { kind: ExprKind::Lam(ps, _), .. }) if ps.iter().any(|p| p.ty.is_none()))
                    || matches!(args[0], Arg::Src(e) if self.bare_poly(e, n).is_some());
                let (f, arrays) = if lam_needs {
                    let arrays = args[1..]
                        .iter()
                        .map(|a| self.infer_arg(*a))
                        .collect::<Result<Vec<_>>>()?;
                    let mut elems = Vec::new();
                    for (a, t) in args[1..].iter().zip(&arrays) {
                        match t.ty.as_array() {
                            Some(e) => elems.push(e.clone()),
                            None => return Err(arity_err("an array", &t.ty, a.span())),
                        }
                    }
                    (self.infer_fn_arg(args[0], &elems)?, arrays)
                } else {
                    let f = self.infer_arg(args[0])?;
                    let mut doms = Vec::new();
                    let mut cur = f.ty.clone();
                    for _ in 0..n {
                        match cur.as_fun() {
                            Some((d, c)) => {
                                doms.push(d.clone());
                                let c = c.clone();
                                cur = c;
                            }
                            None => {
                                let what = if n == 1 {
                                    "a function"
                                } else {
                                    "a function of two arguments"
                                };
                                return Err(arity_err(what, &f.ty, args[0].span()));
                            }
                        }
                    }
                    let arrays = args[1..]
                        .iter()
                        .zip(&doms)
                        .map(|(a, d)| self.check_arg(*a, &Type::array(d.clone())))
                        .collect::<Result<Vec<_>>>()?;
                    (f, arrays)
                };
                let mut it = arrays.into_iter();
                let xs = it.next().expect("one array");
                match it.next() {
                    None => mk(TermKind::Map(f, xs)),
                    Some(ys) => {
                        // Check the function's type against the arrays (when inferred first).
                        let (a, b) = (xs.ty.as_array().cloned(), ys.ty.as_array().cloned());
                        let ok = f.ty.as_fun().is_some_and(|(d, c)| {
                            Some(d) == a.as_ref()
                                && c.as_fun().is_some_and(|(d2, _)| Some(d2) == b.as_ref())
                        });
                        if !ok {
                            return Err(arity_err(
                                "a function of two arguments matching the arrays",
                                &f.ty,
                                args[0].span(),
                            ));
                        }
                        mk(TermKind::Map2(f, xs, ys))
                    }
                }
            }
            "build" => {
                let n = self.check_arg(args[0], &Type::Int)?;
                let f = self.infer_fn_arg(args[1], &[Type::Int])?;
                match f.ty.as_fun() {
                    Some((Type::Int, _)) => {}
                    _ => return Err(arity_err("a function from Int", &f.ty, args[1].span())),
                }
                mk(TermKind::Build(n, f))
            }
            "length" => {
                let xs = self.infer_arg(args[0])?;
                if xs.ty.as_array().is_none() {
                    return Err(arity_err("an array", &xs.ty, args[0].span()));
                }
                mk(TermKind::Length(xs))
            }
            n if sugar::is_sugar(n) => self.sugar(n, args, expected, span)?,
            "loop" | "fold" | "scan" | "iterate" | "while" => self.iteration(name, args, span)?,
            "grad" | "jvp" | "vjp" => self.nested(name, args, span)?,
            "replicate" => {
                let n = self.check_arg(args[0], &Type::Int)?;
                let x = match expected.and_then(Type::as_array) {
                    Some(e) => {
                        let e = e.clone();
                        self.check_arg(args[1], &e)?
                    }
                    None => self.infer_arg(args[1])?,
                };
                mk(TermKind::Replicate(n, x))
            }
            _ => {
                let p: Prim = self
                    .reg
                    .function(name)
                    .expect("builtin_name checked")
                    .clone();
                let ts = args
                    .iter()
                    .zip(p.params())
                    .map(|(a, t)| self.check_arg(*a, t))
                    .collect::<Result<Vec<_>>>()?;
                mk(TermKind::Prim(p, ts))
            }
        })
    }

    // ----- checking -----

    fn check(&mut self, e: &Expr, ty: &Type) -> Result<Term> {
        deep(|| self.check_inner(e, ty))
    }

    fn check_inner(&mut self, e: &Expr, ty: &Type) -> Result<Term> {
        let span = e.span;
        match (&e.kind, ty) {
            (ExprKind::Int(i), Type::Real) => {
                Ok(Term::new(TermKind::Lit(Lit::Real(*i as f64)), span))
            }
            (ExprKind::Lam(params, body), Type::Fun(_)) => {
                let mut known = Vec::new();
                let mut cur = ty.clone();
                for _ in params {
                    match cur.as_fun() {
                        Some((d, c)) => {
                            known.push(d.clone());
                            let c = c.clone();
                            cur = c;
                        }
                        None => {
                            return Err(Error::type_error(
                                span,
                                format!(
                                    "this lambda has {} parameters, but the expected type `{ty}` takes {}",
                                    params.len(),
                                    known.len()
                                ),
                            ));
                        }
                    }
                }
                self.lambda(params, body, &known, Some(&cur), span)
            }
            (ExprKind::Tuple(items), Type::Prod(_)) => {
                let comps = tuple_components(ty, items.len());
                if comps.len() != items.len() {
                    return Err(Error::type_error(
                        span,
                        format!(
                            "type mismatch: expected `{ty}`, found a tuple of {} components",
                            items.len()
                        ),
                    ));
                }
                let ts = items
                    .iter()
                    .zip(&comps)
                    .map(|(i, t)| self.check(i, t))
                    .collect::<Result<Vec<_>>>()?;
                Ok(tuple_term(ts, span))
            }
            (ExprKind::Array(items), Type::Array(elem)) => {
                let ts = items
                    .iter()
                    .map(|i| self.check(i, elem))
                    .collect::<Result<Vec<_>>>()?;
                Ok(Term::new(TermKind::Array((***elem).clone(), ts), span))
            }
            (ExprKind::If(c, a, b), _) => {
                let c = self.check(c, &Type::Bool)?;
                let a = self.check(a, ty)?;
                let b = self.check(b, ty)?;
                Ok(Term::new(TermKind::If(c, a, b), span))
            }
            (ExprKind::Case(s, p, a, q, b), _) => self.case(s, p, a, q, b, Some(ty), span),
            (ExprKind::Let(p, ann, rhs, body), _) => {
                self.let_(p, ann.as_ref(), rhs, body, Some(ty), span)
            }
            (ExprKind::App(head, args), _) => {
                let t = self.app(head, args, Some(ty), span)?;
                let what = match &head.kind {
                    ExprKind::Var(x) => format!("`{x}`"),
                    _ => "this function".to_string(),
                };
                if let Some(e) = too_few_arguments(&what, args.len(), &t.ty, ty, span) {
                    return Err(e);
                }
                self.expect_type(t, ty, span)
            }
            (ExprKind::Var(x), _)
                if self.builtin_name(x) && POLY.iter().any(|(n, _)| **n == **x) =>
            {
                self.var(x, span, Some(ty))
            }
            (ExprKind::Binary(op, a, b), _) => {
                let t = self.binary(*op, a, b, Some(ty), span)?;
                self.expect_type(t, ty, span)
            }
            (ExprKind::Neg(x), Type::Real | Type::Int) => {
                let t = self.check(x, ty)?;
                self.negate(t, x.span, span)
            }
            (ExprKind::Annot(x, t), _) => {
                let inner = self.check(x, &t.ty)?;
                self.expect_type(inner, ty, span)
            }
            _ => {
                let t = self.infer(e)?;
                self.expect_type(t, ty, span)
            }
        }
    }

    fn expect_type(&self, t: Term, ty: &Type, span: Span) -> Result<Term> {
        if t.ty == *ty {
            Ok(t)
        } else {
            Err(mismatch(span, ty, &t.ty))
        }
    }
}

/// Splits `A1 -> ... -> An -> R` into `[A1, ..., An]` and `R`.
impl Checker<'_> {
    /// `loop f x`, `fold f z xs`, `iterate n f x` and `while c f x`: checked (an unannotated
    /// lambda gets its parameter types from the other arguments, as for `map`), then `fold`,
    /// `iterate` and `while` desugared into the core `loop` (`theory-notes/10-iteration.md`):
    ///
    /// ```text
    /// fold f z xs  = loop (\(i, acc) -> if i < length xs then inl (i + 1, f acc (xs ! i))
    ///                                   else inr acc) (0, z)
    /// iterate n f x = loop (\(k, s) -> if k <= 0 then inr s else inl (k - 1, f s)) (n, x)
    /// while c f x  = loop (\s -> if c s then inl (f s) else inr s) x
    /// ```
    ///
    /// with the arguments evaluated once, in order, before the loop (bound by `let` unless
    /// they are variables, literals or lambdas).
    fn iteration(&mut self, name: &str, args: &[Arg], span: Span) -> Result<Term> {
        let unannotated = |a: &Arg| {
            matches!(a, Arg::Src(Expr { kind: ExprKind::Lam(ps, _), .. })
                if ps.iter().any(|p| p.ty.is_none()))
        };
        let fn_err = |what: String, found: &Type, at: Span| {
            Error::type_error(at, format!("`{name}` expects {what}, found `{found}`"))
                .with_label(format!("this has type `{found}`"))
        };
        let mk = |kind| Term::new(kind, span);
        let var = |v: &Var| Term::new(TermKind::Var(v.clone()), span);
        let int = |k: i64| Term::new(TermKind::Lit(Lit::Int(k)), span);
        let prim = |p: &str, a: Term, b: Term| mk(TermKind::Prim(crate::prim::op(p), vec![a, b]));
        let app = |f: &Term, a: Term| mk(TermKind::App(f.clone(), a));
        let pair_pat = |a: &Var, b: &Var| {
            Pat::Pair(Box::new(Pat::Var(a.clone())), Box::new(Pat::Var(b.clone())))
        };
        // Binds a non-trivial argument with a `let` (returned), so it is evaluated once.
        let mut lets: Vec<(Var, Term)> = Vec::new();
        let mut once = |t: Term, nm: &str| {
            if matches!(
                t.kind,
                TermKind::Var(_) | TermKind::Lit(_) | TermKind::Lam(..)
            ) {
                t
            } else {
                let v = Var::fresh(nm, t.ty.clone());
                lets.push((v.clone(), t));
                Term::new(TermKind::Var(v), span)
            }
        };
        let looped = match name {
            "loop" => {
                let (f, x) = if unannotated(&args[0]) {
                    let x = self.infer_arg(args[1])?;
                    (self.infer_fn_arg(args[0], std::slice::from_ref(&x.ty))?, x)
                } else {
                    let f = self.infer_arg(args[0])?;
                    let Some((a, _)) = f.ty.as_fun() else {
                        let what = "a step function `A -> A + B`".to_string();
                        return Err(fn_err(what, &f.ty, args[0].span()));
                    };
                    let a = a.clone();
                    let x = self.check_arg(args[1], &a)?;
                    (f, x)
                };
                let ok = f
                    .ty
                    .as_fun()
                    .is_some_and(|(a, r)| *a == x.ty && r.as_sum().is_some_and(|(a2, _)| a2 == a));
                if !ok {
                    let t = &x.ty;
                    let what = format!(
                        "a step function `{t} -> {t} + B` (`inl` the next state, `inr` the result)"
                    );
                    return Err(fn_err(what, &f.ty, args[0].span()));
                }
                mk(TermKind::Loop(f, x, false))
            }
            "fold" | "scan" => {
                let (f, z, xs) = if unannotated(&args[0]) {
                    let z = self.infer_arg(args[1])?;
                    let xs = self.infer_arg(args[2])?;
                    let Some(e) = xs.ty.as_array() else {
                        return Err(fn_err("an array".into(), &xs.ty, args[2].span()));
                    };
                    let e = e.clone();
                    (self.infer_fn_arg(args[0], &[z.ty.clone(), e])?, z, xs)
                } else {
                    let f = self.infer_arg(args[0])?;
                    let Some((b, a)) =
                        f.ty.as_fun()
                            .and_then(|(b, r)| Some((b.clone(), r.as_fun()?.0.clone())))
                    else {
                        let what = "a function of two arguments `B -> A -> B`".to_string();
                        return Err(fn_err(what, &f.ty, args[0].span()));
                    };
                    let z = self.check_arg(args[1], &b)?;
                    let xs = self.check_arg(args[2], &Type::array(a))?;
                    (f, z, xs)
                };
                let elem = xs.ty.as_array().expect("checked").clone();
                let b = z.ty.clone();
                let ok = f.ty.as_fun().is_some_and(|(b1, r)| {
                    *b1 == b && r.as_fun().is_some_and(|(a1, b2)| *a1 == elem && *b2 == b)
                });
                if !ok {
                    let what = format!(
                        "a function `{b} -> {elem} -> {b}` (the accumulator, then an element)"
                    );
                    return Err(fn_err(what, &f.ty, args[0].span()));
                }
                let f = once(f, "f");
                let z = once(z, "z");
                let xs = once(xs, "xs");
                let st_ty = Type::prod(Type::Int, b.clone());
                let st = Var::fresh("st", st_ty.clone());
                let i = Var::fresh("i", Type::Int);
                let acc = Var::fresh("acc", b.clone());
                let len = mk(TermKind::Length(xs.clone()));
                let elem_i = mk(TermKind::Index(xs, var(&i)));
                let next = mk(TermKind::Pair(
                    prim("iadd", var(&i), int(1)),
                    app(&app(&f, var(&acc)), elem_i),
                ));
                let init = mk(TermKind::Pair(int(0), z));
                if name == "fold" {
                    let body = mk(TermKind::If(
                        prim("ilt", var(&i), len),
                        mk(TermKind::Inl(next, b.clone())),
                        mk(TermKind::Inr(st_ty, var(&acc))),
                    ));
                    let body = mk(TermKind::Let(pair_pat(&i, &acc), var(&st), body));
                    mk(TermKind::Loop(mk(TermKind::Lam(st, body)), init, false))
                } else {
                    // scan f z xs = snd (loopTape (\(i, acc) ->
                    //     (if i < length xs then inl (i + 1, f acc (xs ! i)) else inr (), acc))
                    //   (0, z))
                    // Every step records its accumulator, the last one (`inr`) included.
                    let unit = mk(TermKind::Lit(Lit::Unit));
                    let go_on = mk(TermKind::If(
                        prim("ilt", var(&i), len),
                        mk(TermKind::Inl(next, Type::Unit)),
                        mk(TermKind::Inr(st_ty, unit)),
                    ));
                    let body = mk(TermKind::Pair(go_on, var(&acc)));
                    let body = mk(TermKind::Let(pair_pat(&i, &acc), var(&st), body));
                    let taped = mk(TermKind::Loop(mk(TermKind::Lam(st, body)), init, true));
                    mk(TermKind::Snd(taped))
                }
            }
            "iterate" => {
                let n = self.check_arg(args[0], &Type::Int)?;
                let (f, x) = if unannotated(&args[1]) {
                    let x = self.infer_arg(args[2])?;
                    (self.infer_fn_arg(args[1], std::slice::from_ref(&x.ty))?, x)
                } else {
                    let f = self.infer_arg(args[1])?;
                    let Some((a, _)) = f.ty.as_fun() else {
                        return Err(fn_err("a function `A -> A`".into(), &f.ty, args[1].span()));
                    };
                    let a = a.clone();
                    (f.clone(), self.check_arg(args[2], &a)?)
                };
                let a = x.ty.clone();
                if !f.ty.as_fun().is_some_and(|(d, c)| *d == a && *c == a) {
                    let what = format!("a function `{a} -> {a}`");
                    return Err(fn_err(what, &f.ty, args[1].span()));
                }
                let n = once(n, "n");
                let f = once(f, "f");
                let x = once(x, "x");
                let st_ty = Type::prod(Type::Int, a.clone());
                let st = Var::fresh("st", st_ty.clone());
                let k = Var::fresh("k", Type::Int);
                let s = Var::fresh("s", a.clone());
                let next = mk(TermKind::Pair(
                    prim("isub", var(&k), int(1)),
                    app(&f, var(&s)),
                ));
                let body = mk(TermKind::If(
                    prim("ile", var(&k), int(0)),
                    mk(TermKind::Inr(st_ty, var(&s))),
                    mk(TermKind::Inl(next, a.clone())),
                ));
                let body = mk(TermKind::Let(pair_pat(&k, &s), var(&st), body));
                mk(TermKind::Loop(
                    mk(TermKind::Lam(st, body)),
                    mk(TermKind::Pair(n, x)),
                    false,
                ))
            }
            "while" => {
                let x = self.infer_arg(args[2])?;
                let a = x.ty.clone();
                let c = self.infer_fn_arg(args[0], std::slice::from_ref(&a))?;
                if !c
                    .ty
                    .as_fun()
                    .is_some_and(|(d, r)| *d == a && *r == Type::Bool)
                {
                    let what = format!("a condition `{a} -> Bool`");
                    return Err(fn_err(what, &c.ty, args[0].span()));
                }
                let f = self.infer_fn_arg(args[1], std::slice::from_ref(&a))?;
                if !f.ty.as_fun().is_some_and(|(d, r)| *d == a && *r == a) {
                    let what = format!("a step function `{a} -> {a}`");
                    return Err(fn_err(what, &f.ty, args[1].span()));
                }
                let c = once(c, "c");
                let f = once(f, "f");
                let x = once(x, "x");
                let s = Var::fresh("s", a.clone());
                let body = mk(TermKind::If(
                    app(&c, var(&s)),
                    mk(TermKind::Inl(app(&f, var(&s)), a.clone())),
                    mk(TermKind::Inr(a.clone(), var(&s))),
                ));
                mk(TermKind::Loop(mk(TermKind::Lam(s, body)), x, false))
            }
            _ => unreachable!("an iteration builtin"),
        };
        Ok(lets.into_iter().rev().fold(looped, |b, (v, t)| {
            Term::new(TermKind::Let(Pat::Var(v), t, b), span)
        }))
    }
}

fn peel(ty: &Type, n: usize) -> Option<(Vec<Type>, Type)> {
    let mut tys = Vec::new();
    let mut cur = ty.clone();
    for _ in 0..n {
        let (d, c) = cur.as_fun()?;
        tys.push(d.clone());
        let c = c.clone();
        cur = c;
    }
    Some((tys, cur))
}

/// The right-nested tuple term of the given components.
fn tuple_term(mut ts: Vec<Term>, span: Span) -> Term {
    let last = ts.pop().expect("tuples have at least two components");
    ts.into_iter()
        .rev()
        .fold(last, |acc, t| Term::new(TermKind::Pair(t, acc), span))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::load;

    /// The type of the last definition, or the error message.
    fn ty(src: &str) -> std::result::Result<String, String> {
        load(src, &Registry::builtin())
            .map(|p| p.defs.last().unwrap().var.ty.to_string())
            .map_err(|e| e.message().to_string())
    }

    fn err(src: &str) -> Error {
        load(src, &Registry::builtin()).unwrap_err()
    }

    /// Checking `src` fails with exactly `message`; returns the error for further checks.
    fn expect_error(src: &str, message: &str) -> Error {
        let e = err(src);
        assert_eq!(e.message(), message, "{src}");
        e
    }

    fn ok(src: &str, expected: &str) {
        assert_eq!(ty(src).as_deref(), Ok(expected), "{src}");
    }

    #[test]
    fn integer_literals_are_real_where_real_is_expected() {
        ok("def f (x : Real) = 2 * x", "Real -> Real");
        ok("def f (x : Real) = x * 2", "Real -> Real");
        ok("def f (x : Real) = 1 + 2 * x", "Real -> Real");
        ok("def f (x : Real) = -3 + x", "Real -> Real");
        ok("def f (x : Real) : Real = 1 + 2", "Real -> Real");
        ok("def f (n : Int) = 1 + 2 * n", "Int -> Int");
        ok("def f = [1, 2.5, 3]", "Array Real");
        ok("def f = [1, 2]", "Array Int");
        ok("def f (x : Real) = if x > 0 then 1 else x", "Real -> Real");
        ok("def f (x : Real) = max x 0", "Real -> Real");
        ok("def f (x : Real) = pow x 2", "Real -> Real");
        ok("def g (y : Real) = y\ndef f = g 3", "Real");
        ok("def f : (Real, Int) = (1, 1)", "(Real, Int)");
    }

    #[test]
    fn bidirectional_forms() {
        ok("def f = (inl 1 : Real + Int)", "Real + Int");
        ok("def f : Real + Int = inr 1", "Real + Int");
        ok(
            "def f (b : Bool) = if b then inl 1.0 else (inr 2 : Real + Int)",
            "Bool -> Real + Int",
        );
        ok("def f : Array Real = []", "Array Real");
        ok(
            "def f (xs : Array Real) = map (\\x -> x * 2) xs",
            "Array Real -> Array Real",
        );
        ok(
            "def f (xs : Array Real) = map2 (\\a b -> a * b) xs xs",
            "Array Real -> Array Real",
        );
        ok(
            "def f (xs : Array Real) = build (length xs) (\\i -> xs ! i)",
            "Array Real -> Array Real",
        );
        ok("def f : Real -> Real = \\x -> x", "Real -> Real");
        ok("def f : Array Real = replicate 3 1", "Array Real");
        ok(
            "def f : Real -> Array Real = replicate 3",
            "Real -> Array Real",
        );
    }

    #[test]
    fn builtins_are_curried_values() {
        ok(
            "def f (xs : Array Real) = map exp xs",
            "Array Real -> Array Real",
        );
        ok(
            "def f (xs : Array Real) = map (pow 2.0) xs",
            "Array Real -> Array Real",
        );
        ok("def f = sin", "Real -> Real");
        ok("def f = pow", "Real -> Real -> Real");
        ok(
            "def f (xs : Array Real) = map2 max xs xs",
            "Array Real -> Array Real",
        );
        ok("def f = map sin", "Array Real -> Array Real");
        ok("def f : (Real, Real) -> Real = fst", "(Real, Real) -> Real");
        ok("def f : Array Int -> Int = length", "Array Int -> Int");
        ok(
            "def f (xs : Array Real) = dot xs",
            "Array Real -> Array Real -> Real",
        );
        ok("def f (p : (Real, Int)) = snd p", "(Real, Int) -> Int");
    }

    #[test]
    fn locals_shadow_builtins_and_definitions() {
        ok("def f = let sum = 3 in sum + 1", "Int");
        ok("def sin = 2\ndef f = sin * 3", "Int");
        ok("def g = 1.0\ndef f (g : Int) = g", "Int -> Int");
    }

    #[test]
    fn patterns() {
        ok(
            "def f (p : (Real, (Int, Bool))) = let (a, (b, c)) = p in a",
            "(Real, Int, Bool) -> Real",
        );
        ok(
            "def f (p : (Real, Int, Bool)) = let (a, b, c) = p in b",
            "(Real, Int, Bool) -> Int",
        );
        ok(
            "def f (p : (Real, Int)) = let (_, b) = p in b",
            "(Real, Int) -> Int",
        );
        ok(
            "def f (s : (Real, Real) + Int) = case s of inl (a, b) -> a + b | inr n -> toReal n",
            "(Real, Real) + Int -> Real",
        );
    }

    #[test]
    fn unknown_variable_with_suggestion_and_position() {
        let e = expect_error("def f (xs : Real) = x + 1", "unknown variable `x`");
        assert_eq!(e.span(), Some(Span::new(20, 21)));
        assert_eq!(e.notes(), ["did you mean `xs`?"]);
        let e = err("def f (x : Real) = sn x");
        assert_eq!(e.notes(), ["did you mean `sin`?"]);
    }

    #[test]
    fn recursion_is_reported_as_such() {
        let e = expect_error("def f (x : Real) : Real = f x", "unknown variable `f`");
        assert!(
            e.notes()[0].contains("cannot be recursive"),
            "{:?}",
            e.notes()
        );
    }

    #[test]
    fn mismatch_shows_expected_and_found() {
        let e = expect_error(
            "def f (n : Int) : Real = n",
            "type mismatch: expected `Real`, found `Int`",
        );
        assert_eq!(e.notes(), ["convert an Int to a Real with `toReal`"]);
        expect_error(
            "def f (x : Real) = sin true",
            "type mismatch: expected `Real`, found `Bool`",
        );
        expect_error(
            "def f (x : Real) : Array Real = [x, (x, x)]",
            "type mismatch: expected `Real`, found `(Real, Real)`",
        );
        let e = expect_error(
            "def f (n : Int) (x : Real) = x + n",
            "type mismatch: expected `Real`, found `Int`",
        );
        assert_eq!(e.span(), Some(Span::new(33, 34)));
    }

    #[test]
    fn applying_a_non_function() {
        expect_error(
            "def f (x : Real) = x 1",
            "`x` has type `Real` and cannot be applied to an argument",
        );
        expect_error(
            "def f (x : Real) = (x + 1) 2",
            "this function has type `Real` and cannot be applied to an argument",
        );
    }

    #[test]
    fn wrong_arity() {
        expect_error(
            "def f (x : Real) = sin x x",
            "`sin` takes 1 argument, but is given 2",
        );
        expect_error(
            "def g (a : Real) (b : Real) = a\ndef f = g 1 2 3",
            "`g` takes 2 arguments, but is given 3",
        );
        expect_error(
            "def f (xs : Array Real) = length xs 1",
            "`length` takes 1 argument, but is given 2",
        );
    }

    #[test]
    fn case_and_if_errors() {
        expect_error(
            "def f (x : Real) = case x of inl a -> a | inr b -> b",
            "`case` expects a value of a sum type `A + B`, found `Real`",
        );
        expect_error(
            "def f (x : Real) = if x then 1 else 2",
            "type mismatch: expected `Bool`, found `Real`",
        );
        expect_error(
            "def f (b : Bool) = if b then 1.0 else true",
            "type mismatch: expected `Real`, found `Bool`",
        );
        expect_error(
            "def f (s : Real + Int) = case s of inl a -> a | inr n -> n",
            "type mismatch: expected `Real`, found `Int`",
        );
    }

    #[test]
    fn pattern_errors() {
        expect_error(
            "def f (p : (Real, Real)) = let (a, b, c) = p in a",
            "this tuple pattern has 3 components, but the value has type `(Real, Real)`",
        );
        expect_error(
            "def f (x : Real) = let (a, b) = x in a",
            "this tuple pattern has 2 components, but the value has type `Real`",
        );
        expect_error(
            "def f (p : (Real, Real)) = let (a, a) = p in a",
            "`a` is bound twice in the same pattern",
        );
    }

    #[test]
    fn definition_errors() {
        expect_error("def f = 1\ndef f = 2", "`f` is defined twice");
        expect_error(
            "def f (x : Real) (x : Real) = x",
            "parameter `x` is bound twice",
        );
        expect_error(
            "def f (x : Real) : Int = x",
            "type mismatch: expected `Int`, found `Real`",
        );
    }

    #[test]
    fn needs_annotation() {
        expect_error(
            "def f = inl 1.0",
            "cannot infer the other side of the sum type of `inl`",
        );
        expect_error("def f = []", "cannot infer the element type of `[]`");
        expect_error("def f = \\x -> x", "cannot infer the type of parameter `x`");
        expect_error(
            "def f = length",
            "cannot infer the type of `length` applied to 0 of its 1 arguments",
        );
        expect_error(
            "def f : Real = inl 1.0",
            "type mismatch: expected `Real`, found a sum injection `inl`",
        );
    }

    #[test]
    fn operator_and_builtin_argument_errors() {
        expect_error(
            "def f (b : Bool) = b + 1.0",
            "operator `+` expects Real or Int operands, found `Bool`",
        );
        expect_error(
            "def f (x : Real) = x ! 0",
            "indexing with `!` expects an array, found `Real`",
        );
        expect_error(
            "def f (xs : Array Real) = xs ! 1.5",
            "type mismatch: expected `Int`, found `Real`",
        );
        expect_error(
            "def f (x : Real) = map x [1.0]",
            "`map` expects a function, found `Real`",
        );
        expect_error(
            "def f (x : Real) = fst x",
            "`fst` expects a pair, found `Real`",
        );
        expect_error(
            "def f (b : Bool) = -b",
            "unary `-` expects a Real or an Int, found `Bool`",
        );
        expect_error(
            "def f (x : Real) = x && true",
            "type mismatch: expected `Bool`, found `Real`",
        );
        expect_error(
            "def f : Real -> Real = \\(x : Real) (y : Real) -> x",
            "this lambda has 2 parameters, but the expected type `Real -> Real` takes 1",
        );
        expect_error(
            "def f (xs : Array Real) = build 3 (\\(i : Real) -> i)",
            "type mismatch: expected `Int`, found `Real`",
        );
    }

    #[test]
    fn and_or_short_circuit_as_ifs() {
        let p = load(
            "def f (a : Bool) (b : Bool) = a && b || not a",
            &Registry::builtin(),
        )
        .unwrap();
        let body = &p.defs[0].body;
        assert!(matches!(body.kind, TermKind::If(..)), "{body}");
        assert_eq!(body.to_string(), "a && b || not a");
    }

    #[test]
    fn partial_application_evaluates_arguments_once() {
        let p = load(
            "def f (x : Real) = map (pow (x + 1)) [1.0]",
            &Registry::builtin(),
        )
        .unwrap();
        assert_eq!(
            p.defs[0].body.to_string(),
            "map\n  (let a1 = x + 1.0 in\n  \\(y : Real) -> pow a1 y)\n  [1.0]"
        );
    }
}
