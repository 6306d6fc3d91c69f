//! Derivatives of functions known only at run time (LANGUAGE.md, "Derivatives inside
//! programs": `f` may be *any* expression of function type). `check::nested` differentiates a
//! function whose code the checker knows (a definition, a `let`-bound function, a template's
//! parameter specialised per call); a function taken from a lambda's parameter, a pattern, a
//! tuple, an array or a loop's state is known only when the program runs
//! (`map (\g -> grad g x) fs`). For those, function values carry their derivatives:
//!
//! * the checker elaborates such a form into a *marker* `m f x [d]` and records the function's
//!   type `τ = A -> B` ([`Dynamic`]);
//! * after the whole program is checked, [`Checker::carry`] changes the representation of
//!   every value of a recorded type `τ` to `T(τ) = (τ, D)`, with `D` the function's reverse
//!   derivative `(A, B) -> (B, A)` (what `grad` and `vjp` need), its forward one `(A, A) ->
//!   (B, B)` (`jvp`), or the pair of both, as the program's forms need; a derivative is itself
//!   a value of a function type, so where the program differentiates it again its type is
//!   carried too (`T` applies to it); every other type maps structurally (`T(Array τ) = Array
//!   T(τ)`, ...);
//! * a lambda of type `τ` in a value position (stored, passed, returned) becomes the pair of
//!   itself and its derivatives, elaborated once by the same [`Differentiate`] as a form over
//!   it would be (its captured first-order variables are inputs of the derivative code, so an
//!   enclosing derivative still sees them); a lambda in function position (`map`'s argument,
//!   applied at once) stays a plain function;
//! * an application of a value of type `T(τ)` applies its first component, and the marker
//!   applies the derivative: `grad f x = snd (rev (x, 1.0))`, `vjp f x ct = rev (x, ct)`,
//!   `jvp f x dx = fwd (x, dx)`;
//! * a form over a lambda written in place that uses a run-time function (`grad (\y -> grad
//!   f y) x`, `grad (\y -> f y * y) x`) differentiates the lambda there ([`Carry::in_place`]):
//!   the lambda is not a value, so its type carries nothing;
//! * definitions (and the recursive functions of `def rec` instances) stay plain curried
//!   functions whose parameter and result types are mapped; where one is used as a value of a
//!   type that changed (`map2 h xs ys` needs no change, `[f, g]` does), it is eta-expanded and
//!   paired with the derivatives of `\x -> h .. x`.
//!
//! The derivative code of a form the checker could resolve (`check::nested`) is left as it is
//! (it is closed but for first-order inputs), and so are derivatives built here. Programs
//! without such forms are not touched.
//!
//! Code that is differentiated here (a lambda paired with its derivatives, a lambda
//! differentiated in place, a derivative differentiated again) may apply run-time functions
//! (`\y -> g y * y` with `g` a lambda's parameter or a loop's state) and the derivatives they
//! carry (`\y -> grad g y`): each such function is a function-typed input of the derivative
//! code ([`Carry::entry`], `ad::nested::function_input`), differentiated through the
//! derivatives *its* value carries. So its type must carry what the derivative needs: the
//! rewrite finds that as it goes, records it, and starts again with the larger
//! representation ([`Checker::carry`]), to a fixpoint. Each round adds a derivative to some
//! type; a function value that differentiates a run-time function of its own type (`\y ->
//! grad g y` stored where `g` came from) would need derivatives of ever higher order and is a
//! type error after a few rounds. The other limit: everything else such code uses must have
//! code the checker knows (`check::nested`'s rules); a run-time function stored or passed on
//! as a value there is a type error naming it.

use super::nested::{entry_of, free_vars, self_tangent};
use super::{Checker, Differentiate, Form};
use crate::deep::deep;
use crate::error::{Error, Result, Span};
use crate::source::term::{Def, Entry, Lit, Node, Pat, Term, TermKind as K, Var, VarId};
use crate::types::Type;
use std::collections::{BTreeMap, HashMap, HashSet};

/// Which derivatives the values of a carried function type hold.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Needs {
    /// Reverse (`grad`, `vjp`).
    rev: bool,
    /// Forward (`jvp`).
    fwd: bool,
}

/// The forms over functions known only at run time, recorded while checking.
#[derive(Default)]
pub(super) struct Dynamic {
    /// The marker variables, with their form.
    pub(super) markers: HashMap<VarId, Form>,
    /// The carried function types and what their values hold.
    types: Vec<(Type, Needs)>,
    /// Derivative code already elaborated (left as it is), kept alive so that the addresses
    /// stay theirs.
    opaque: Vec<Term>,
    opaque_at: HashSet<*const Node>,
    /// What a rewrite found that types must carry beyond what they do, and where first
    /// ([`Checker::carry`] then adds it and starts again: the types stay fixed during one
    /// rewrite).
    grown: Option<Span>,
    pending: Vec<(Type, Needs)>,
}

impl Dynamic {
    /// `m f x [d]`: the form over `f`, a function known only at run time.
    pub(super) fn form(
        &mut self,
        form: Form,
        f: &Term,
        x: Term,
        extra: Option<Term>,
        span: Span,
    ) -> Term {
        let (a, b) = f.ty.as_fun().expect("a function");
        let ty = match form {
            Form::Grad => Type::fun(a.clone(), a.clone()),
            Form::Jvp => Type::curried(&[a.clone(), a.clone()], Type::prod(b.clone(), b.clone())),
            Form::Vjp => Type::curried(&[a.clone(), b.clone()], Type::prod(b.clone(), a.clone())),
        };
        let name = match form {
            Form::Grad => "grad",
            Form::Jvp => "jvp",
            Form::Vjp => "vjp",
        };
        let m = Var::fresh(name, Type::fun(f.ty.clone(), ty));
        self.markers.insert(m.id, form);
        // A lambda written at the form is differentiated where it stands
        // ([`Carry::marker`]): its type need not carry anything.
        let needs = match form {
            _ if matches!(f.kind, K::Lam(..)) => Needs::default(),
            Form::Jvp => Needs {
                rev: false,
                fwd: true,
            },
            _ => Needs {
                rev: true,
                fwd: false,
            },
        };
        if needs != Needs::default() {
            self.add_needs(&f.ty, needs);
        }
        let mk = |k| Term::new(k, span);
        let mut t = mk(K::App(mk(K::App(mk(K::Var(m)), f.clone())), x));
        if let Some(d) = extra {
            t = mk(K::App(t, d));
        }
        t
    }

    /// Marks elaborated derivative code, which [`Checker::carry`] leaves as it is.
    pub(super) fn opaque(&mut self, t: &Term) {
        self.opaque_at.insert(&**t as *const Node);
        self.opaque.push(t.clone());
    }

    /// Adds `n` to what the values of `t` carry (making `t` carried); whether that changed
    /// anything.
    fn add_needs(&mut self, t: &Type, n: Needs) -> bool {
        match self.types.iter_mut().find(|(u, _)| u == t) {
            Some((_, m)) => {
                let old = *m;
                m.rev |= n.rev;
                m.fwd |= n.fwd;
                *m != old
            }
            None => {
                self.types.push((t.clone(), n));
                true
            }
        }
    }

    /// Records that `t` must carry `n` (for the next rewrite) unless it does.
    fn demand(&mut self, t: &Type, n: Needs, span: Span) {
        let has = self.needs(t).unwrap_or_default();
        if (n.rev && !has.rev) || (n.fwd && !has.fwd) {
            self.pending.push((t.clone(), n));
            self.grown.get_or_insert(span);
        }
    }

    fn needs(&self, t: &Type) -> Option<Needs> {
        self.types.iter().find(|(u, _)| u == t).map(|(_, n)| *n)
    }

    /// `T(t)`: the representation of values of type `t`.
    fn ty(&self, t: &Type) -> Type {
        if self.types.is_empty() {
            return t.clone();
        }
        deep(|| match t {
            Type::Real | Type::Int | Type::Bool | Type::Unit => t.clone(),
            Type::Fun(p) => match self.needs(t) {
                Some(n) => Type::prod(t.clone(), self.ty(&derivatives_ty(&p.0, &p.1, n))),
                None => Type::fun(self.ty(&p.0), self.ty(&p.1)),
            },
            Type::Prod(p) => Type::prod(self.ty(&p.0), self.ty(&p.1)),
            Type::Sum(p) => Type::sum(self.ty(&p.0), self.ty(&p.1)),
            Type::Array(a) => Type::array(self.ty(a)),
        })
    }
}

/// The type of the derivatives a value of the carried type `a -> b` holds (before mapping:
/// a derivative's own type may be carried in turn, [`Dynamic::ty`]): the reverse one `(a, b)
/// -> (b, a)`, the forward one `(a, a) -> (b, b)`, uncurried so that they are functions
/// between first-order types, which can be differentiated again as run-time functions.
fn derivatives_ty(a: &Type, b: &Type, n: Needs) -> Type {
    let (rev, fwd) = derivative_fns(a, b);
    match (n.rev, n.fwd) {
        (true, true) => Type::prod(rev, fwd),
        (false, true) => fwd,
        _ => rev,
    }
}

/// How many times [`Checker::carry`] starts again with larger representations.
const MAX_ROUNDS: usize = 5;

/// The reverse and forward derivative types of `a -> b` (see [`derivatives_ty`]).
fn derivative_fns(a: &Type, b: &Type) -> (Type, Type) {
    (
        Type::fun(
            Type::prod(a.clone(), b.clone()),
            Type::prod(b.clone(), a.clone()),
        ),
        Type::fun(
            Type::prod(a.clone(), a.clone()),
            Type::prod(b.clone(), b.clone()),
        ),
    )
}

impl<'r> Checker<'r> {
    /// Changes the representation of the carried function types in every definition (see the
    /// module doc); nothing when the program has no form over a run-time function.
    pub(super) fn carry(&mut self, defs: &mut [Def]) -> Result<()> {
        if self.dynamic.markers.is_empty() {
            return Ok(());
        }
        let Some(nested) = self.nested else {
            return Ok(());
        };
        // A rewrite may find that a type must carry more (a derivative differentiated again:
        // [`Carry::entry`]); then it starts again with the larger representation. Each round
        // adds to what some type carries; a program whose functions need derivatives of ever
        // higher order (a function value that differentiates run-time functions of its own
        // type) does not settle.
        let original: Vec<Def> = defs.to_vec();
        for _ in 0..MAX_ROUNDS {
            self.dynamic.grown = None;
            let r = self.carry_once(defs, nested);
            if self.dynamic.grown.is_none() {
                return r;
            }
            for (t, n) in std::mem::take(&mut self.dynamic.pending) {
                self.dynamic.add_needs(&t, n);
            }
            defs.clone_from_slice(&original);
        }
        let span = self.dynamic.grown.unwrap_or(defs[0].body.span);
        Err(Error::type_error(
            span,
            "this function is differentiated at run time (the program differentiates \
             functions of its type taken from lambdas' parameters, patterns, tuples or \
             arrays), and its derivative differentiates a function known only at run time \
             again: values of one type would have to carry derivatives of ever higher order"
                .to_string(),
        )
        .with_note(
            "a function value carries derivatives to a fixed order per type; a function \
             value that differentiates a run-time function of its own type would need one \
             more order than itself. Differentiate it where it is written instead (`grad (\\y \
             -> grad f y) x`), or use a definition applied to a known function",
        ))
    }

    fn carry_once(&mut self, defs: &mut [Def], nested: &'r dyn Differentiate) -> Result<()> {
        let mut c = Carry {
            c: self,
            nested,
            plain: HashMap::new(),
            def_values: HashMap::new(),
            memo: HashMap::new(),
            locals: HashSet::new(),
            spines: HashMap::new(),
        };
        for d in defs.iter() {
            spines(&d.body, &mut c.spines);
        }
        for (_, v) in c.c.values.values() {
            spines(v, &mut c.spines);
        }
        for d in defs.iter() {
            if d.custom.is_some() {
                continue;
            }
            let params: Vec<Type> = d.params.iter().map(|p| c.ty(&p.ty)).collect();
            c.plain
                .insert(d.var.id, Type::curried(&params, c.ty(&d.ret)));
        }
        for d in defs.iter_mut() {
            if d.custom.is_some() {
                continue;
            }
            let body = c.term(&d.body)?;
            d.params = d.params.iter().map(|p| c.var(p)).collect();
            d.ret = body.ty.clone();
            d.var = Var {
                ty: c.plain[&d.var.id].clone(),
                ..d.var.clone()
            };
            d.body = body;
            c.def_values.insert(d.var.id, d.value());
        }
        Ok(())
    }
}

struct Carry<'c, 'r> {
    c: &'c mut Checker<'r>,
    nested: &'r dyn Differentiate,
    /// Variables bound to plain curried functions (definitions, recursive functions), with
    /// their new types.
    plain: HashMap<VarId, Type>,
    /// The rewritten definitions' values, by variable.
    def_values: HashMap<VarId, Term>,
    /// The rewritten right-hand sides of `let`s binding a variable (by the address of the
    /// checked one, which the checker's values share), and those variables.
    memo: HashMap<*const Node, Term>,
    locals: HashSet<VarId>,
    /// For each variable, the fewest arguments it is applied to at any occurrence (0 where it
    /// occurs as a value), over all definitions ([`spines`]).
    spines: HashMap<VarId, usize>,
}

/// The fewest arguments each variable of `t` is applied to at any occurrence (0 where it
/// occurs other than as the head of an application).
fn spines(t: &Term, out: &mut HashMap<VarId, usize>) {
    let mut stack = vec![t];
    while let Some(t) = stack.pop() {
        let (head, args) = t.spine();
        let n = args.len();
        stack.extend(args);
        if let K::Var(v) = &head.kind {
            let k = out.entry(v.id).or_insert(n);
            *k = (*k).min(n);
        } else if n > 0 {
            stack.push(head);
        } else {
            stack.extend(t.children());
        }
    }
}

/// A projection out of a run-time function's value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    Fst,
    Snd,
}

/// A function held by a run-time function's value `g` ([`Carry::leaves`]).
struct Leaf {
    /// Where: `g` projected along it.
    path: Vec<Step>,
    /// Its (plain) type.
    ty: Type,
    /// Where the derivatives its value carries are, and which (none for a function whose
    /// type carries nothing).
    derivatives: Option<(Vec<Step>, Needs)>,
}

/// `t` with every projection of `g` along a leaf's path replaced by the leaf's parameter, or
/// `None` where `g` occurs otherwise.
fn replace_leaves(t: &Term, g: &Var, leaves: &[(&[Step], &Var)]) -> Option<Term> {
    // The projections from `t` down to a variable, outermost last.
    let mut path = Vec::new();
    let mut cur = t;
    loop {
        match &cur.kind {
            K::Fst(e) => {
                path.push(Step::Fst);
                cur = e;
            }
            K::Snd(e) => {
                path.push(Step::Snd);
                cur = e;
            }
            _ => break,
        }
    }
    if let K::Var(v) = &cur.kind {
        if v.id == g.id {
            path.reverse();
            let (_, p) = leaves.iter().find(|(l, _)| *l == &path[..])?;
            return Some(mk(K::Var((*p).clone()), t.span));
        }
    }
    deep(|| {
        let mut ok = true;
        let r = t.map_children(|c| match replace_leaves(c, g, leaves) {
            Some(c) => c,
            None => {
                ok = false;
                c.clone()
            }
        });
        ok.then_some(r)
    })
}

fn mk(k: K, span: Span) -> Term {
    Term::new(k, span)
}

impl Carry<'_, '_> {
    fn ty(&self, t: &Type) -> Type {
        self.c.dynamic.ty(t)
    }

    fn var(&self, v: &Var) -> Var {
        Var {
            ty: self.ty(&v.ty),
            ..v.clone()
        }
    }

    fn pat(&self, p: &Pat) -> Pat {
        deep(|| match p {
            Pat::Var(v) => Pat::Var(self.var(v)),
            Pat::Wild(t) => Pat::Wild(self.ty(t)),
            Pat::Pair(a, b) => Pat::Pair(Box::new(self.pat(a)), Box::new(self.pat(b))),
        })
    }

    /// `t` in the new representation, of type `T(t.ty)`.
    fn term(&mut self, t: &Term) -> Result<Term> {
        let r = self.raw(t)?;
        let want = self.ty(&t.ty);
        if r.ty == want {
            Ok(r)
        } else {
            self.carried(t, r)
        }
    }

    /// `let p = e in b`, the body rewritten by `body`. A variable bound to a plain function
    /// (a `def rec` instance's fixpoint, a partial application of a definition) stays one.
    fn let_in(
        &mut self,
        p: &Pat,
        e: &Term,
        b: &Term,
        sp: Span,
        body: impl FnOnce(&mut Self, &Term) -> Result<Term>,
    ) -> Result<Term> {
        // A lambda bound to a variable that is only ever applied (to at least `k` arguments)
        // stays a plain function over them.
        let only_applied = match (p, &e.kind) {
            (Pat::Var(v), K::Lam(..)) => self.spines.get(&v.id).copied().filter(|&k| k > 0),
            _ => None,
        };
        let e2 = match only_applied {
            Some(k) => self.applied(e, k)?,
            None => self.raw(e)?,
        };
        if let Pat::Var(v) = p {
            self.memo.insert(&**e as *const Node, e2.clone());
            self.locals.insert(v.id);
        }
        Ok(match p {
            Pat::Var(v) if e2.ty != self.ty(&e.ty) => {
                self.plain.insert(v.id, e2.ty.clone());
                let v2 = Var {
                    ty: e2.ty.clone(),
                    ..v.clone()
                };
                mk(K::Let(Pat::Var(v2), e2, body(self, b)?), sp)
            }
            _ => {
                let e2 = if e2.ty == self.ty(&e.ty) {
                    e2
                } else {
                    self.carried(e, e2)?
                };
                mk(K::Let(self.pat(p), e2, body(self, b)?), sp)
            }
        })
    }

    /// `t`, to be applied to `k >= 1` arguments at once: a lambda (under `let`s) stays a
    /// plain function, over as many parameters as are given (a `def rec` instance's curried
    /// wrapper, `(\x y -> ..) a b`); otherwise as in [`Carry::fun`].
    fn applied(&mut self, t: &Term, k: usize) -> Result<Term> {
        let sp = t.span;
        match &t.kind {
            K::Lam(y, b) => {
                let b = if k > 1 {
                    self.applied(b, k - 1)?
                } else {
                    self.term(b)?
                };
                Ok(mk(K::Lam(self.var(y), b), sp))
            }
            K::Let(p, e, b) => self.let_in(p, e, b, sp, |c, b| c.applied(b, k)),
            _ => self.fun(t),
        }
    }

    /// `t` in function position: a plain function where that is cheaper (a lambda, a
    /// definition), else the function of its pair.
    fn fun(&mut self, t: &Term) -> Result<Term> {
        if let K::Lam(..) | K::Let(..) = &t.kind {
            return self.applied(t, 1);
        }
        let r = self.raw(t)?;
        if self.c.dynamic.needs(&t.ty).is_some() && r.ty == self.ty(&t.ty) {
            Ok(mk(K::Fst(r), t.span))
        } else {
            Ok(r)
        }
    }

    /// `t : A -> B -> C` in the function position of `map2`: a plain function of two
    /// arguments.
    fn fun2(&mut self, t: &Term) -> Result<Term> {
        let sp = t.span;
        let f = if let K::Lam(..) | K::Let(..) = &t.kind {
            self.applied(t, 2)?
        } else {
            self.fun(t)?
        };
        let (a, inner) = t.ty.as_fun().expect("map2 of a function");
        // A plain function of two arguments already (a lambda of two parameters), or one whose
        // partial applications are not carried values; else (a function computed under a
        // `let`, a loop's result) the pair its partial application returns is opened.
        let (_, inner2) = f.ty.as_fun().expect("map2 of a function");
        if self.c.dynamic.needs(inner).is_none() || *inner2 != self.ty(inner) {
            return Ok(f);
        }
        let v = Var::fresh("a", self.ty(a));
        let applied = mk(K::App(f, Term::var(&v)), sp);
        let applied = if applied.ty == self.ty(inner) {
            mk(K::Fst(applied), sp)
        } else {
            applied
        };
        Ok(mk(K::Lam(v, applied), sp))
    }

    /// `t` rewritten; of type `T(t.ty)`, or a plain curried function's type for the uses of
    /// definitions and recursive functions (which [`Carry::term`] pairs with derivatives where
    /// a value is needed).
    fn raw(&mut self, t: &Term) -> Result<Term> {
        if self.c.dynamic.opaque_at.contains(&(&**t as *const Node)) {
            return Ok(t.clone());
        }
        deep(|| {
            let sp = t.span;
            Ok(match &t.kind {
                K::Var(v) => match self.plain.get(&v.id) {
                    Some(ty) => mk(
                        K::Var(Var {
                            ty: ty.clone(),
                            ..v.clone()
                        }),
                        sp,
                    ),
                    None => mk(K::Var(self.var(v)), sp),
                },
                K::Lit(_) => t.clone(),
                K::Lam(y, b) => {
                    let lam = mk(K::Lam(self.var(y), self.term(b)?), sp);
                    if self.c.dynamic.needs(&t.ty).is_some() {
                        self.pair(lam)?
                    } else {
                        lam
                    }
                }
                K::App(..) => {
                    if let Some(r) = self.marker(t)? {
                        return Ok(r);
                    }
                    // The spine `h a1 .. an`: `h` applied to all its arguments at once, a
                    // partial application's pair opened before the next argument.
                    let (head, args) = t.spine();
                    let mut cur = self.applied(head, args.len())?;
                    let mut ty = head.ty.clone();
                    for (i, a) in args.iter().enumerate() {
                        cur = mk(K::App(cur, self.term(a)?), sp);
                        ty = ty.as_fun().expect("applied to an argument").1.clone();
                        if i + 1 < args.len()
                            && self.c.dynamic.needs(&ty).is_some()
                            && cur.ty == self.ty(&ty)
                        {
                            cur = mk(K::Fst(cur), sp);
                        }
                    }
                    cur
                }
                K::Let(p, e, b) => self.let_in(p, e, b, sp, |c, b| c.term(b))?,
                K::Pair(a, b) => mk(K::Pair(self.term(a)?, self.term(b)?), sp),
                K::Fst(e) => mk(K::Fst(self.term(e)?), sp),
                K::Snd(e) => mk(K::Snd(self.term(e)?), sp),
                K::If(c, a, b) => mk(K::If(self.term(c)?, self.term(a)?, self.term(b)?), sp),
                K::Inl(e, r) => mk(K::Inl(self.term(e)?, self.ty(r)), sp),
                K::Inr(l, e) => mk(K::Inr(self.ty(l), self.term(e)?), sp),
                K::Case(e, p, a, q, b) => mk(
                    K::Case(
                        self.term(e)?,
                        self.pat(p),
                        self.term(a)?,
                        self.pat(q),
                        self.term(b)?,
                    ),
                    sp,
                ),
                K::Prim(p, args) => {
                    let args = args.iter().map(|a| self.term(a)).collect::<Result<_>>()?;
                    mk(K::Prim(p.clone(), args), sp)
                }
                K::Array(ty, xs) => {
                    let xs = xs.iter().map(|a| self.term(a)).collect::<Result<_>>()?;
                    mk(K::Array(self.ty(ty), xs), sp)
                }
                K::Map(f, xs) => mk(K::Map(self.fun(f)?, self.term(xs)?), sp),
                K::Map2(f, xs, ys) => {
                    mk(K::Map2(self.fun2(f)?, self.term(xs)?, self.term(ys)?), sp)
                }
                K::Build(n, f) => mk(K::Build(self.term(n)?, self.fun(f)?), sp),
                K::Index(xs, i) => mk(K::Index(self.term(xs)?, self.term(i)?), sp),
                K::Length(xs) => mk(K::Length(self.term(xs)?), sp),
                K::Replicate(n, x) => mk(K::Replicate(self.term(n)?, self.term(x)?), sp),
                K::Loop(f, x, tape) => mk(K::Loop(self.fun(f)?, self.term(x)?, *tape), sp),
                K::Fix(f) => {
                    // The recursive function stays a plain function over its mapped types.
                    let (g, x, body) = crate::source::term::fix_parts(f);
                    let (a, b) = g.ty.as_fun().expect("fix of a function");
                    let gty = Type::fun(self.ty(a), self.ty(b));
                    self.plain.insert(g.id, gty.clone());
                    let g2 = Var { ty: gty, ..g };
                    let body = self.term(&body)?;
                    let inner = mk(K::Lam(self.var(&x), body), sp);
                    mk(K::Fix(mk(K::Lam(g2, inner), sp)), sp)
                }
            })
        })
    }

    /// A form over a run-time function (`Dynamic::form`'s marker), applied to its argument
    /// (and tangent or cotangent): the derivative its value carries, applied (`grad f x =
    /// snd (rev (x, 1.0))`, `vjp f x ct = rev (x, ct)`, `jvp f x dx = fwd (x, dx)`). A form over
    /// a lambda written in place (`grad (\y -> grad f y) x`, which became a marker because the
    /// lambda uses a run-time function) differentiates the lambda where it stands
    /// ([`Carry::in_place`]).
    fn marker(&mut self, t: &Term) -> Result<Option<Term>> {
        let (head, args) = t.spine();
        let K::Var(m) = &head.kind else {
            return Ok(None);
        };
        let Some(&form) = self.c.dynamic.markers.get(&m.id) else {
            return Ok(None);
        };
        let sp = t.span;
        let f = args[0];
        if let K::Lam(..) = &f.kind {
            return self.in_place(form, f, &args[1..], sp).map(Some);
        }
        let (a, b) = f.ty.as_fun().expect("a marker's function");
        let n = self
            .c
            .dynamic
            .needs(&f.ty)
            .expect("a marker's function type is carried");
        let (rev_ty, fwd_ty) = derivative_fns(a, b);
        let pair = self.term(f)?;
        let d = mk(K::Snd(pair), sp);
        let (d, dty) = match (n.rev && n.fwd, form) {
            (false, Form::Jvp) => (d, fwd_ty),
            (false, _) => (d, rev_ty),
            (true, Form::Jvp) => (mk(K::Snd(d), sp), fwd_ty),
            (true, _) => (mk(K::Fst(d), sp), rev_ty),
        };
        let d = self.function_of(d, &dty);
        let x = self.term(args[1])?;
        Ok(Some(match form {
            Form::Grad => {
                let one = Term::lit(Lit::Real(1.0));
                mk(K::Snd(mk(K::App(d, mk(K::Pair(x, one), sp)), sp)), sp)
            }
            Form::Jvp | Form::Vjp => {
                let e = self.term(args[2])?;
                mk(K::App(d, mk(K::Pair(x, e), sp)), sp)
            }
        }))
    }

    /// The function of `v`, a value of type `T(ty)` for a function type `ty`: `fst v` where
    /// `ty` is carried, else `v`.
    fn function_of(&self, v: Term, ty: &Type) -> Term {
        if self.c.dynamic.needs(ty).is_some() {
            let sp = v.span;
            mk(K::Fst(v), sp)
        } else {
            v
        }
    }

    /// A form over the lambda `f` written in place, applied to `rest` (its argument, and
    /// tangent or cotangent): `f`'s rewritten code differentiated there, the run-time
    /// functions it uses (and the derivatives of them it applies) being inputs of the
    /// derivative code ([`Carry::entry`]).
    fn in_place(&mut self, form: Form, f: &Term, rest: &[&Term], sp: Span) -> Result<Term> {
        let (a, _) = f.ty.as_fun().expect("a lambda");
        let plain = self.applied(f, 1)?;
        let kind = Needs {
            rev: form != Form::Jvp,
            fwd: form == Form::Jvp,
        };
        let (entry, mut args) = self.entry(&plain, a, kind)?;
        let mut lets = Vec::new();
        for (k, r) in rest.iter().enumerate() {
            let v = Var::fresh(if k == 0 { "x" } else { "d" }, self.ty(&r.ty));
            lets.push((v.clone(), self.term(r)?));
            args.push(Term::var(&v));
        }
        let extra = (rest.len() > 1).then(|| args.pop().expect("the third argument"));
        let body = self
            .nested
            .elaborate(form, &entry, &args, extra)
            .map_err(|e| e.or_span(sp))?;
        Ok(lets
            .into_iter()
            .rev()
            .fold(body, |body, (v, t)| mk(K::Let(Pat::Var(v), t, body), sp)))
    }

    /// `(plain, derivatives of plain)`: a function value of a carried type, from its
    /// rewritten code `plain` (a plain function). The derivatives differentiate the rewritten
    /// code, so a function that itself takes derivatives of run-time functions can be
    /// differentiated too; each is a function of a pair (`(x, ct)`, `(x, dx)`), itself
    /// paired with its own derivatives where the program differentiates it again.
    fn pair(&mut self, plain: Term) -> Result<Term> {
        let sp = plain.span;
        let (a, b) = plain.ty.as_fun().expect("a carried function");
        let (a, b) = (a.clone(), b.clone());
        let n = self.c.dynamic.needs(&plain.ty).expect("a carried type");
        let (entry, captured) = self.entry(&plain, &a, n)?;
        let (rev_ty, fwd_ty) = derivative_fns(&a, &b);
        let one = |c: &mut Self, form: Form, dty: &Type, fty: &Type| -> Result<Term> {
            let p = Var::fresh("p", Type::prod(a.clone(), dty.clone()));
            let x = Var::fresh("x", a.clone());
            let d = Var::fresh(if form == Form::Jvp { "dx" } else { "ct" }, dty.clone());
            let mut args = captured.clone();
            args.push(Term::var(&x));
            let body = c
                .nested
                .elaborate(form, &entry, &args, Some(Term::var(&d)))
                .map_err(|e| e.or_span(sp))?;
            let pv = || Term::var(&p);
            let body = mk(
                K::Let(
                    Pat::Var(x.clone()),
                    mk(K::Fst(pv()), sp),
                    mk(K::Let(Pat::Var(d.clone()), mk(K::Snd(pv()), sp), body), sp),
                ),
                sp,
            );
            let lam = mk(K::Lam(p.clone(), body), sp);
            debug_assert_eq!(&lam.ty, fty);
            if c.c.dynamic.needs(fty).is_some() {
                c.pair(lam)
            } else {
                Ok(lam)
            }
        };
        let derivatives = match (n.rev, n.fwd) {
            (true, true) => {
                let r = one(self, Form::Vjp, &b, &rev_ty)?;
                let f = one(self, Form::Jvp, &a, &fwd_ty)?;
                mk(K::Pair(r, f), sp)
            }
            (false, true) => one(self, Form::Jvp, &a, &fwd_ty)?,
            _ => one(self, Form::Vjp, &b, &rev_ty)?,
        };
        Ok(mk(K::Pair(plain, derivatives), sp))
    }

    /// The entry `E(c1, .., ck, x) = f x` of a rewritten function (as `check::nested`'s
    /// `resolve` builds for checked ones), to be differentiated as `kind` says: its captured
    /// first-order variables and the functions known only at run time it calls, then the
    /// argument, with the (rewritten) definitions and `let`-bound functions it uses in front.
    /// The terms for the captured parameters are returned beside it: a first-order variable
    /// itself; for a run-time function `g` (a value of a carried type `(τ, D)`), one
    /// parameter per function the code applies of it (`fst g : τ`, or a derivative `D`
    /// holds, [`Carry::leaves`]), given as `(h, (rev, fwd))`, `h` that function and the
    /// derivatives its value carries (curried; `()` where it carries none), the form
    /// [`super::Differentiate`] differentiates through. Each such function's type must carry
    /// `kind`: where it does not yet, it is added and the rewrite starts again
    /// ([`Checker::carry`]).
    fn entry(&mut self, f: &Term, a: &Type, kind: Needs) -> Result<(Entry, Vec<Term>)> {
        let sp = f.span;
        let mut params: Vec<Var> = Vec::new();
        let mut globals: BTreeMap<usize, (Var, Term)> = BTreeMap::new();
        // Run-time functions: the pair variable and its leaves, each with its parameter.
        let mut runtime: Vec<(Var, Vec<(Leaf, Var)>)> = Vec::new();
        let mut pending = free_vars(f);
        while let Some(v) = pending.pop() {
            let known = self.c.values.get(&v.id).map(|(i, t)| (*i, t.clone()));
            let value = match known {
                _ if v.ty.is_first_order() => {
                    if !params.iter().any(|p| p.id == v.id) {
                        params.push(v.clone());
                    }
                    continue;
                }
                Some((index, _)) if globals.contains_key(&index) => continue,
                Some((index, value)) => match self.def_values.get(&v.id) {
                    Some(d) => Some((index, d.clone())),
                    None if self.plain.contains_key(&v.id) && !self.locals.contains(&v.id) => None,
                    None => {
                        let key = &*value as *const Node;
                        let new = match self.memo.get(&key) {
                            Some(t) => t.clone(),
                            None => self.raw(&value)?,
                        };
                        Some((index, new))
                    }
                },
                None => None,
            };
            match value {
                // A lambda paired with its derivatives, or a definition: its code.
                Some((index, value))
                    if value.ty == v.ty
                        && (self.carried_function(&v.ty).is_none()
                            || matches!(value.kind, K::Pair(..))) =>
                {
                    pending.extend(free_vars(&value));
                    globals.insert(index, (v, value));
                }
                _ => match self.carried_function(&v.ty) {
                    Some(tau) if !runtime.iter().any(|(g, _)| g.id == v.id) => {
                        let mut leaves = Vec::new();
                        self.leaves(&tau, Vec::new(), &mut leaves);
                        let leaves = leaves
                            .into_iter()
                            .map(|l| {
                                let p = Var::fresh(v.name.clone(), l.ty.clone());
                                (l, p)
                            })
                            .collect();
                        runtime.push((v.clone(), leaves));
                    }
                    Some(_) => {}
                    None => {
                        // A function known only at run time whose type carries nothing yet
                        // (`g` in `\y -> g y * y`): it must carry what this derivative
                        // needs, from the next rewrite on.
                        if let Some((a, b)) = v.ty.as_fun() {
                            if self_tangent(a) && self_tangent(b) {
                                self.c.dynamic.demand(&v.ty, kind, sp);
                            }
                        }
                        return Err(self.opaque_use(f, &v));
                    }
                },
            }
        }
        params.reverse();
        let first_order = params.len();
        let (mut entry, mut captured) = entry_of("grad", f, a, params, globals, sp);
        let x = entry.params.pop().expect("the argument");
        captured.truncate(first_order);
        for (g, leaves) in runtime {
            let by_path: Vec<(&[Step], &Var)> =
                leaves.iter().map(|(l, p)| (&l.path[..], p)).collect();
            entry.body = match replace_leaves(&entry.body, &g, &by_path) {
                Some(b) => b,
                None => return Err(self.opaque_use(f, &g)),
            };
            let used = free_vars(&entry.body);
            for (leaf, p) in leaves {
                if !used.iter().any(|u| u.id == p.id) {
                    continue;
                }
                self.c.dynamic.demand(&leaf.ty, kind, sp);
                captured.push(self.leaf_input(&g, &leaf));
                entry.params.push(p);
            }
        }
        entry.params.push(x);
        Ok((entry, captured))
    }

    /// For a carried pair type `T(τ) = (τ, D)`, `τ`.
    fn carried_function(&self, t: &Type) -> Option<Type> {
        let (tau, _) = t.as_prod()?;
        self.c.dynamic.needs(tau)?;
        (self.ty(tau) == *t).then(|| tau.clone())
    }

    /// The functions a value of type `T(τ)` holds, at `path` inside the run-time function's
    /// value: `τ` itself (at `path ++ [fst]` where `τ` is carried, `path` where not), and
    /// those of each derivative it carries.
    fn leaves(&self, tau: &Type, path: Vec<Step>, out: &mut Vec<Leaf>) {
        let Some(n) = self.c.dynamic.needs(tau) else {
            out.push(Leaf {
                path,
                ty: tau.clone(),
                derivatives: None,
            });
            return;
        };
        let at = |step: Step| {
            let mut p = path.clone();
            p.push(step);
            p
        };
        out.push(Leaf {
            path: at(Step::Fst),
            ty: tau.clone(),
            derivatives: Some((at(Step::Snd), n)),
        });
        let (a, b) = tau.as_fun().expect("a carried function");
        let (rev, fwd) = derivative_fns(a, b);
        let d = at(Step::Snd);
        let with = |step: Step| {
            let mut p = d.clone();
            p.push(step);
            p
        };
        match (n.rev, n.fwd) {
            (true, true) => {
                self.leaves(&rev, with(Step::Fst), out);
                self.leaves(&fwd, with(Step::Snd), out);
            }
            (false, true) => self.leaves(&fwd, d, out),
            _ => self.leaves(&rev, d, out),
        }
    }

    /// The term given for a leaf of the run-time function `g`: `(h, (rev, fwd))`, `h` the
    /// leaf's function and `rev`, `fwd` the curried derivatives its value carries (`()`
    /// where none).
    fn leaf_input(&self, g: &Var, leaf: &Leaf) -> Term {
        let sp = Span::default();
        let at = |path: &[Step]| {
            path.iter().fold(Term::var(g), |t, s| match s {
                Step::Fst => mk(K::Fst(t), sp),
                Step::Snd => mk(K::Snd(t), sp),
            })
        };
        let unit = || Term::lit(Lit::Unit);
        let (rev, fwd) = match &leaf.derivatives {
            None => (unit(), unit()),
            Some((d, n)) => {
                let (a, b) = leaf.ty.as_fun().expect("a function");
                let (rev_ty, fwd_ty) = derivative_fns(a, b);
                let curried = |path: Vec<Step>, ty: &Type| {
                    let fun = self.function_of(at(&path), ty);
                    let (pa, _) = ty.as_fun().expect("a derivative");
                    let (x_ty, d_ty) = pa.as_prod().expect("a pair argument");
                    let x = Var::fresh("x", x_ty.clone());
                    let c = Var::fresh("c", d_ty.clone());
                    let app = mk(
                        K::App(fun, mk(K::Pair(Term::var(&x), Term::var(&c)), sp)),
                        sp,
                    );
                    mk(K::Lam(x, mk(K::Lam(c, app), sp)), sp)
                };
                let with = |step: Step| {
                    let mut p = d.clone();
                    p.push(step);
                    p
                };
                match (n.rev, n.fwd) {
                    (true, true) => (
                        curried(with(Step::Fst), &rev_ty),
                        curried(with(Step::Snd), &fwd_ty),
                    ),
                    (true, false) => (curried(d.clone(), &rev_ty), unit()),
                    (false, _) => (unit(), curried(d.clone(), &fwd_ty)),
                }
            }
        };
        mk(K::Pair(at(&leaf.path), mk(K::Pair(rev, fwd), sp)), sp)
    }

    /// Why the derivative of `f` (of a carried type) cannot be built: it uses `v`, a function
    /// known only at run time, other than by applying it.
    fn opaque_use(&self, f: &Term, v: &Var) -> Error {
        Error::type_error(
            f.span,
            format!(
                "this function of type `{}` may be differentiated at run time (this program \
                 differentiates functions of that type taken from lambdas' parameters, \
                 patterns, tuples or arrays), but it uses `{}`, which holds a function known \
                 only at run time, other than by applying it or a derivative it carries (it \
                 stores it or passes it on), so its derivative cannot be built",
                f.ty, v.name
            ),
        )
        .with_note(
            "a function known only at run time is differentiated through where it, or a \
             derivative it carries, is applied; to pass it on, use code known where it is \
             differentiated: a definition applied to a known function (`d2 tanh x`), or a \
             function bound by `let`",
        )
    }

    /// `orig` (whose rewritten code `plain` is a plain curried function, a use of a definition
    /// or recursive function) as a value of type `T(orig.ty)`: eta-expanded over the
    /// parameters before the carried function type, and paired there.
    fn carried(&mut self, orig: &Term, plain: Term) -> Result<Term> {
        let sp = orig.span;
        if self.c.dynamic.needs(&orig.ty).is_some() {
            let (a, _) = orig.ty.as_fun().expect("a function");
            let p = Var::fresh("y", self.ty(a));
            let plain_lam = mk(K::Lam(p.clone(), mk(K::App(plain, Term::var(&p)), sp)), sp);
            return self.pair(plain_lam);
        }
        match orig.ty.as_fun() {
            Some((a, _)) if a.is_first_order() => {
                let y = Var::fresh("y", a.clone());
                let applied = mk(K::App(orig.clone(), Term::var(&y)), sp);
                let inner = mk(K::App(plain, Term::var(&y)), sp);
                let body = if inner.ty == self.ty(&applied.ty) {
                    inner
                } else {
                    self.carried(&applied, inner)?
                };
                Ok(mk(K::Lam(y, body), sp))
            }
            _ => Err(Error::type_error(
                sp,
                format!(
                    "this function (of type `{}`) is used as a value where the program \
                     differentiates functions at run time, and its parameter of type `{}` \
                     is not first-order, which that does not support",
                    orig.ty,
                    orig.ty
                        .as_fun()
                        .map(|p| p.0.to_string())
                        .unwrap_or_default()
                ),
            )),
        }
    }
}
