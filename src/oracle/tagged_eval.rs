//! The second route for derivatives *inside* programs: source programs with `grad`, `jvp` and
//! `vjp` in them, evaluated over tagged nested dual numbers ([`super::tagged`]), sharing
//! nothing with CHAD (`theory-notes/12-nested-ad.md`, "A second route").
//!
//! Two parts:
//!
//! * [`Recorder`], a [`Differentiate`] for the checker that *records* each form instead of
//!   differentiating it: `grad f x` (and `jvp f x dx`, `vjp f x ct`) becomes the ordinary core
//!   term `nested#k (c1, (c2, .. (x, extra)))`, a saturated application of a fresh internal
//!   primitive `nested#k : (C1, (C2, .. (A, E))) -> R` to the entry's arguments (captured
//!   variables, then the argument) and the form's third argument, and `(form, entry)` is kept
//!   in a table ([`Forms`]). No term kind is added. (A primitive rather than a free variable of
//!   function type: an enclosing form's function may contain an inner form, and the checker
//!   refuses to differentiate through a function-typed variable it has no term for; a
//!   primitive is a closed term. Its own evaluation is an error: only this evaluator runs it.)
//! * An evaluator of core terms over [`TValue`]s, whose reals are [`Num`]s. It mirrors
//!   [`super::dual`] form by form (closures over tagged environments, arrays, sums, `if`,
//!   `case`, `map`/`map2`/`build`, loops, `fix`), with one rule per builtin primitive written
//!   on [`Num`] operations, so every rule can itself be differentiated again. Each `nested#k`
//!   is a native function: it evaluates the recorded entry's body with the tagged
//!   [`tagged::grad`], [`tagged::jvp`] or [`tagged::vjp`], which take a **fresh tag per
//!   derivative instance**, so an inner perturbation is never confused with an outer one.
//!
//! [`load`] checks a program with a [`Recorder`]; [`eval_entry`] runs a definition and
//! [`grad_entry`] takes the gradient of a `Real`-valued one with respect to every `Real` in its
//! arguments (one more [`tagged::grad`] around the whole evaluation).
//!
//! ## The primitive rules
//!
//! For `x = D(e, p, t)` (and `y = D(e, q, s)`; an operand without the top tag `e` is
//! `D(e, x, 0)`), `f(D(e,p,t)) = D(e, f p, f'(p) · t)` with `f'` written on `Num`s:
//!
//! | primitive | `f'(p)` (or the rule) |
//! | --- | --- |
//! | `+ − * / neg sin cos exp log sqrt tanh` | [`Num`]'s own operations |
//! | `tan`, `asin`, `acos`, `atan` | `1 / cos² p`, `1 / sqrt (1 − p²)`, `−1 / sqrt (1 − p²)`, `1 / (1 + p²)` |
//! | `sinh`, `cosh`, `log1p`, `expm1` | `cosh p`, `sinh p`, `1 / (1 + p)`, `exp p` |
//! | `sigmoid`, `softplus`, `erf` | `σ(p)(1 − σ(p))`, `σ(p)`, `2/√π · exp (−p²)` |
//! | `pow x y` | `D(e, p^q, cx · t + cy · s)`, `cx = q · p^(q−1)` (0 if `q = 0`), `cy = p^q · log p` (0 unless `p > 0`) |
//! | `atan2 y x` | `D(e, atan2 q p, (p/r²) · t' − (q/r²) · s')`, `r² = p² + q²` (0 if `r² = 0`) |
//! | `abs`, `relu`, `max`, `min` | the branch the primal takes (`x` if `x ≥ 0`; `x` if `x > 0` else 0; ties to the first) |
//! | `sum`, `dot` | sums of `+` and `*` |
//! | `sign`, `toReal`, and primitives without a `Real` in their parameters or result | constants |
//!
//! These are the conventions of [`super::dual`], including the strong zero: a term `c · t`
//! whose tangent `t` is exactly the constant 0 is 0 whatever `c` is. A primitive not in the
//! table that needs a derivative (a user's) is an [`ErrorKind::Unsupported`] error naming it.

use super::tagged::{self, Num};
use crate::deep::{Deep, deep};
use crate::error::{Error, ErrorKind, Result, Span};
use crate::prim::{Fixity, Prim, Primitive, Registry};
use crate::source::check::{Differentiate, Form};
use crate::source::term::{Entry, Pat, Program, Term, TermKind, Var, VarId};
use crate::types::Type;
use crate::value::{self, Value};
use std::cell::RefCell;
use std::fmt;
use std::rc::Rc;

/// One recorded form: the primitive standing for it, which form and the entry differentiated.
#[derive(Clone, Debug)]
pub struct Recorded {
    /// `nested#k`, applied to the arguments in the recorded program.
    pub prim: Prim,
    /// `grad`, `jvp` or `vjp`.
    pub form: Form,
    /// The function: captured variables, then the argument.
    pub entry: Entry,
}

/// The forms a [`Recorder`] recorded, indexed by their variables.
#[derive(Clone, Debug, Default)]
pub struct Forms {
    forms: Rc<Vec<Recorded>>,
}

impl Forms {
    /// The recorded forms, in the order the checker elaborated them.
    pub fn all(&self) -> &[Recorded] {
        &self.forms
    }
}

/// A [`Differentiate`] that records each form (see the module docs).
#[derive(Default)]
pub struct Recorder {
    forms: RefCell<Vec<Recorded>>,
}

impl Recorder {
    /// An empty recorder.
    pub fn new() -> Recorder {
        Recorder::default()
    }

    /// The table of what was recorded.
    pub fn finish(self) -> Forms {
        Forms {
            forms: Rc::new(self.forms.into_inner()),
        }
    }
}

impl Differentiate for Recorder {
    fn elaborate(
        &self,
        form: Form,
        entry: &Entry,
        args: &[Term],
        extra: Option<Term>,
    ) -> Result<Term> {
        let (Some(x), true) = (entry.params.last(), args.len() == entry.params.len()) else {
            panic!("internal error: a form's entry without its argument");
        };
        let a = x.ty.clone();
        let b = entry.body.ty.clone();
        let result = match form {
            Form::Grad => a,
            Form::Jvp => Type::prod(b.clone(), b),
            Form::Vjp => Type::prod(b, a),
        };
        // A function known only at run time is given as `(f, derivatives)`: the oracle
        // differentiates through `f` itself.
        let mut items: Vec<Term> = entry
            .params
            .iter()
            .zip(args)
            .map(|(p, a)| {
                if p.ty.is_first_order() {
                    a.clone()
                } else {
                    Term::new(TermKind::Fst(a.clone()), a.span)
                }
            })
            .collect();
        items.extend(extra);
        let arg = items
            .into_iter()
            .rev()
            .reduce(|rest, t| Term::new(TermKind::Pair(t, rest), Span::default()))
            .expect("at least the argument");
        let mut forms = self.forms.borrow_mut();
        let name = format!("nested#{}", forms.len());
        let message =
            format!("`{name}` is a form recorded for the tagged oracle, which alone runs it");
        let prim: Prim = Rc::new(Primitive::new(
            name,
            vec![arg.ty.clone()],
            result,
            Fixity::Internal,
            move |_| Err(Error::new(ErrorKind::Unsupported, message.clone())),
        ));
        forms.push(Recorded {
            prim: prim.clone(),
            form,
            entry: entry.clone(),
        });
        Ok(Term::new(TermKind::Prim(prim, vec![arg]), Span::default()))
    }
}

/// Checks a program with its `grad`, `jvp` and `vjp` recorded ([`Recorder`]).
pub fn load(text: &str, reg: &Registry) -> Result<(Program, Forms)> {
    let rec = Recorder::new();
    let p = crate::source::load_with(text, reg, &rec)?;
    Ok((p, rec.finish()))
}

/// A value of the tagged evaluator: reals are nested dual numbers.
#[derive(Clone, Debug)]
pub enum TValue {
    /// A real number.
    Real(Num),
    /// An integer.
    Int(i64),
    /// A boolean.
    Bool(bool),
    /// `()`.
    Unit,
    /// A pair.
    Pair(Rc<Deep<(TValue, TValue)>>),
    /// A left injection.
    Inl(Rc<Deep<TValue>>),
    /// A right injection.
    Inr(Rc<Deep<TValue>>),
    /// An array.
    Array(Rc<Vec<TValue>>),
    /// A closure.
    Fun(Rc<Deep<Closure>>),
}

/// A closure of the tagged evaluator.
pub struct Closure {
    param: Var,
    body: Term,
    env: Env,
    fix: Option<(Var, Span)>,
}

impl fmt::Debug for Closure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<function>")
    }
}

type Env = im::HashMap<VarId, TValue>;

impl TValue {
    fn pair(a: TValue, b: TValue) -> TValue {
        TValue::Pair(Rc::new(Deep::new((a, b))))
    }

    /// A first-order value, every real a constant. Panics on a function value.
    pub fn constant(v: &Value) -> TValue {
        deep(|| match v {
            Value::Real(x) => TValue::Real(Num::c(*x)),
            Value::Int(i) => TValue::Int(*i),
            Value::Bool(b) => TValue::Bool(*b),
            Value::Unit => TValue::Unit,
            Value::Pair(p) => TValue::pair(TValue::constant(&p.0), TValue::constant(&p.1)),
            Value::Inl(x) => TValue::Inl(Rc::new(Deep::new(TValue::constant(x)))),
            Value::Inr(x) => TValue::Inr(Rc::new(Deep::new(TValue::constant(x)))),
            Value::RealArray(xs) => TValue::Array(Rc::new(
                xs.iter().map(|&x| TValue::Real(Num::c(x))).collect(),
            )),
            Value::Array(xs) => TValue::Array(Rc::new(xs.iter().map(TValue::constant).collect())),
            Value::Closure(_) | Value::Lin(_) | Value::LinFun(_) => {
                panic!("internal error: TValue::constant of a non-first-order value {v}")
            }
        })
    }

    /// The value with every perturbation dropped, at the first-order type `ty`.
    pub fn primal(&self, ty: &Type) -> Value {
        deep(|| match (self, ty) {
            (TValue::Real(x), Type::Real) => Value::Real(x.primal()),
            (TValue::Int(i), Type::Int) => Value::Int(*i),
            (TValue::Bool(b), Type::Bool) => Value::Bool(*b),
            (TValue::Unit, Type::Unit) => Value::Unit,
            (TValue::Pair(p), Type::Prod(t)) => Value::pair(p.0.primal(&t.0), p.1.primal(&t.1)),
            (TValue::Inl(d), Type::Sum(t)) => Value::inl(d.primal(&t.0)),
            (TValue::Inr(d), Type::Sum(t)) => Value::inr(d.primal(&t.1)),
            (TValue::Array(xs), Type::Array(e)) => {
                Value::array(e, xs.iter().map(|x| x.primal(e)).collect())
            }
            _ => panic!("internal error: tagged value {self:?} read at type {ty}"),
        })
    }

    fn expect_pair(&self) -> (&TValue, &TValue) {
        match self {
            TValue::Pair(p) => (&p.0, &p.1),
            other => panic!("internal error: expected a pair, found {other:?}"),
        }
    }

    fn expect_int(&self) -> i64 {
        match self {
            TValue::Int(i) => *i,
            other => panic!("internal error: expected an Int, found {other:?}"),
        }
    }

    fn expect_bool(&self) -> bool {
        match self {
            TValue::Bool(b) => *b,
            other => panic!("internal error: expected a Bool, found {other:?}"),
        }
    }

    fn expect_array(&self) -> &Rc<Vec<TValue>> {
        match self {
            TValue::Array(xs) => xs,
            other => panic!("internal error: expected an array, found {other:?}"),
        }
    }

    fn num(&self) -> &Num {
        match self {
            TValue::Real(x) => x,
            other => panic!("internal error: expected a Real, found {other:?}"),
        }
    }

    fn apply(&self, cx: &Forms, arg: TValue) -> Result<TValue> {
        match self {
            TValue::Fun(c) => match &c.fix {
                None => eval(cx, &c.body, &c.env.update(c.param.id, arg)),
                Some((g, at)) => crate::steps::recursive_call(*at, || {
                    let env = c
                        .env
                        .update(g.id, TValue::Fun(c.clone()))
                        .update(c.param.id, arg);
                    eval(cx, &c.body, &env)
                }),
            },
            other => panic!("internal error: applying {other:?}"),
        }
    }
}

/// The `Real` leaves of a value, depth first, arrays element by element (the order of
/// [`super::fd::leaves`]).
fn leaves(v: &TValue, out: &mut Vec<Num>) {
    deep(|| match v {
        TValue::Real(x) => out.push(x.clone()),
        TValue::Pair(p) => {
            leaves(&p.0, out);
            leaves(&p.1, out);
        }
        TValue::Inl(x) | TValue::Inr(x) => leaves(x, out),
        TValue::Array(xs) => xs.iter().for_each(|x| leaves(x, out)),
        TValue::Int(_) | TValue::Bool(_) | TValue::Unit => {}
        TValue::Fun(_) => panic!("internal error: leaves of a function"),
    })
}

fn flat(v: &TValue) -> Vec<Num> {
    let mut out = Vec::new();
    leaves(v, &mut out);
    out
}

/// `shape` with its `Real` leaves replaced, in order, by `xs`.
fn rebuild(shape: &TValue, xs: &mut std::slice::Iter<'_, Num>) -> TValue {
    deep(|| match shape {
        TValue::Real(_) => TValue::Real(xs.next().expect("one leaf per real").clone()),
        TValue::Pair(p) => {
            let a = rebuild(&p.0, xs);
            TValue::pair(a, rebuild(&p.1, xs))
        }
        TValue::Inl(x) => TValue::Inl(Rc::new(Deep::new(rebuild(x, xs)))),
        TValue::Inr(x) => TValue::Inr(Rc::new(Deep::new(rebuild(x, xs)))),
        TValue::Array(items) => {
            TValue::Array(Rc::new(items.iter().map(|x| rebuild(x, xs)).collect()))
        }
        other => other.clone(),
    })
}

fn rebuilt(shape: &TValue, xs: &[Num]) -> TValue {
    rebuild(shape, &mut xs.iter())
}

/// Whether two values of one self-tangent type have the same shape (array lengths).
fn same_shape(a: &TValue, b: &TValue) -> bool {
    deep(|| match (a, b) {
        (TValue::Real(_), TValue::Real(_)) => true,
        (TValue::Pair(p), TValue::Pair(q)) => same_shape(&p.0, &q.0) && same_shape(&p.1, &q.1),
        (TValue::Array(xs), TValue::Array(ys)) => {
            xs.len() == ys.len() && xs.iter().zip(ys.iter()).all(|(x, y)| same_shape(x, y))
        }
        _ => false,
    })
}

/// Runs `body` on `Num` leaves inside a tagged derivative operator (whose functions cannot
/// fail): the first error is kept and the remaining evaluations are skipped.
struct Guard {
    err: RefCell<Option<Error>>,
    shape: RefCell<Option<TValue>>,
}

impl Guard {
    fn new() -> Guard {
        Guard {
            err: RefCell::new(None),
            shape: RefCell::new(None),
        }
    }

    fn run(&self, f: impl FnOnce() -> Result<TValue>) -> Vec<Num> {
        if self.err.borrow().is_some() {
            return Vec::new();
        }
        match f() {
            Ok(y) => {
                let out = flat(&y);
                self.shape.borrow_mut().get_or_insert(y);
                out
            }
            Err(e) => {
                *self.err.borrow_mut() = Some(e);
                Vec::new()
            }
        }
    }

    fn finish(self) -> Result<TValue> {
        match self.err.into_inner() {
            Some(e) => Err(e),
            None => Ok(self.shape.into_inner().expect("evaluated once")),
        }
    }
}

fn form_error(form: Form, msg: String) -> Error {
    let name = match form {
        Form::Grad => "grad",
        Form::Jvp => "jvp",
        Form::Vjp => "vjp",
    };
    Error::new(
        ErrorKind::Runtime,
        format!("tagged oracle: `{name}`: {msg}"),
    )
}

/// `nested#k` applied to its argument tuple.
fn apply_form(cx: &Forms, k: usize, arg: TValue) -> Result<TValue> {
    let rec = &cx.forms[k];
    let n = rec.entry.params.len();
    let m = n + usize::from(rec.form != Form::Grad);
    let mut vals = Vec::with_capacity(m);
    let mut rest = arg;
    for _ in 1..m {
        let (a, b) = rest.expect_pair();
        let (a, b) = (a.clone(), b.clone());
        vals.push(a);
        rest = b;
    }
    vals.push(rest);
    let extra = (m > n).then(|| vals.pop().expect("m values"));
    let x = vals.pop().expect("the argument");
    let mut env = Env::new();
    for (p, v) in rec.entry.params.iter().zip(vals) {
        env.insert(p.id, v);
    }
    let xv = rec.entry.params[n - 1].id;
    let body = &rec.entry.body;
    let run = |xs: &[Num]| eval(cx, body, &env.update(xv, rebuilt(&x, xs)));
    let xs = flat(&x);
    let g = Guard::new();
    match (rec.form, extra) {
        (Form::Grad, _) => {
            // One forward pass per component of x, each with its own fresh tag.
            let grad = tagged::grad(
                |xs| g.run(|| run(xs)).pop().unwrap_or_else(|| Num::c(0.0)),
                &xs,
            );
            g.finish()?;
            Ok(rebuilt(&x, &grad))
        }
        (Form::Jvp, Some(dx)) => {
            if !same_shape(&x, &dx) {
                return Err(form_error(
                    Form::Jvp,
                    "the tangent's shape differs from the argument's".into(),
                ));
            }
            let (y, t) = tagged::jvp(|xs| g.run(|| run(xs)), &xs, &flat(&dx));
            let shape = g.finish()?;
            Ok(TValue::pair(rebuilt(&shape, &y), rebuilt(&shape, &t)))
        }
        (Form::Vjp, Some(ct)) => {
            let (y, grad) = tagged::vjp(|xs| g.run(|| run(xs)), &xs, &flat(&ct));
            let shape = g.finish()?;
            if !same_shape(&shape, &ct) {
                return Err(form_error(
                    Form::Vjp,
                    "the cotangent's shape differs from the result's".into(),
                ));
            }
            Ok(TValue::pair(rebuilt(&shape, &y), rebuilt(&x, &grad)))
        }
        (form, None) => panic!("internal error: {form:?} without its third argument"),
    }
}

/// The value of a definition with recorded forms at first-order arguments.
pub fn eval_entry(forms: &Forms, entry: &Entry, args: &[Value]) -> Result<Value> {
    crate::eval::check_args(entry, args)?;
    first_order(entry)?;
    let env: Env = entry
        .params
        .iter()
        .zip(args)
        .map(|(p, a)| (p.id, TValue::constant(a)))
        .collect();
    Ok(eval(forms, &entry.body, &env)?.primal(&entry.body.ty))
}

fn first_order(entry: &Entry) -> Result<()> {
    if entry.params.iter().any(|p| !p.ty.is_first_order()) || !entry.body.ty.is_first_order() {
        return Err(Error::new(
            ErrorKind::Unsupported,
            format!("tagged oracle: `{}` is not first-order", entry.name),
        ));
    }
    Ok(())
}

/// Value and gradient of a `Real`-valued definition with recorded forms: the gradient with
/// respect to every `Real` in the arguments, flattened as [`super::fd::leaves`] does, by one
/// more [`tagged::grad`] around the evaluation.
pub fn grad_entry(forms: &Forms, entry: &Entry, args: &[Value]) -> Result<(f64, Vec<f64>)> {
    crate::eval::check_args(entry, args)?;
    first_order(entry)?;
    if entry.body.ty != Type::Real {
        return Err(Error::new(
            ErrorKind::Unsupported,
            format!(
                "tagged oracle: a gradient needs a `Real` result, not {}",
                entry.body.ty
            ),
        ));
    }
    let shape = TValue::constant(&Value::tuple(args.to_vec()));
    let xs = flat(&shape);
    let g = Guard::new();
    let grad = tagged::grad(
        |xs| {
            g.run(|| {
                let mut vals = rebuilt(&shape, xs);
                let mut env = Env::new();
                let n = entry.params.len();
                for (i, p) in entry.params.iter().enumerate() {
                    let (a, rest) = if i + 1 == n {
                        (vals.clone(), TValue::Unit)
                    } else {
                        let (a, rest) = vals.expect_pair();
                        (a.clone(), rest.clone())
                    };
                    env.insert(p.id, a);
                    vals = rest;
                }
                eval(forms, &entry.body, &env)
            })
            .pop()
            .unwrap_or_else(|| Num::c(0.0))
        },
        &xs,
    );
    let y = g.finish()?;
    Ok((y.num().primal(), grad.iter().map(Num::primal).collect()))
}

/// Evaluates a term in a tagged environment.
fn eval(cx: &Forms, t: &Term, env: &Env) -> Result<TValue> {
    deep(|| {
        let mut env = env.clone();
        let mut t = t;
        while let TermKind::Let(p, e, b) = &t.kind {
            let v = eval(cx, e, &env)?;
            bind(p, v, &mut env);
            t = b;
        }
        eval_node(cx, t, &env)
    })
}

fn bind(pat: &Pat, v: TValue, env: &mut Env) {
    deep(|| match pat {
        Pat::Var(x) => {
            env.insert(x.id, v);
        }
        Pat::Wild(_) => {}
        Pat::Pair(a, b) => {
            let (x, y) = v.expect_pair();
            let (x, y) = (x.clone(), y.clone());
            bind(a, x, env);
            bind(b, y, env);
        }
    })
}

fn eval_node(cx: &Forms, t: &Term, env: &Env) -> Result<TValue> {
    use TermKind as K;
    let at = |e: Error| e.or_span(t.span);
    let ev = |t: &Term| eval(cx, t, env);
    Ok(match &t.kind {
        K::Var(x) => env
            .get(&x.id)
            .cloned()
            .unwrap_or_else(|| panic!("internal error: unbound variable {x:?}")),
        K::Lit(l) => TValue::constant(&l.value()),
        K::Lam(x, b) => TValue::Fun(Rc::new(Deep::new(Closure {
            param: x.clone(),
            body: b.clone(),
            env: env.clone(),
            fix: None,
        }))),
        K::App(f, a) => {
            let f = ev(f)?;
            let a = ev(a)?;
            f.apply(cx, a)?
        }
        K::Let(..) => ev(t)?,
        K::Pair(a, b) => TValue::pair(ev(a)?, ev(b)?),
        K::Fst(e) => ev(e)?.expect_pair().0.clone(),
        K::Snd(e) => ev(e)?.expect_pair().1.clone(),
        K::If(c, a, b) => {
            if ev(c)?.expect_bool() {
                ev(a)?
            } else {
                ev(b)?
            }
        }
        K::Inl(e, _) => TValue::Inl(Rc::new(Deep::new(ev(e)?))),
        K::Inr(_, e) => TValue::Inr(Rc::new(Deep::new(ev(e)?))),
        K::Case(e, p, a, q, b) => {
            let (pat, v, body) = match ev(e)? {
                TValue::Inl(v) => (p, (**v).clone(), a),
                TValue::Inr(v) => (q, (**v).clone(), b),
                other => panic!("internal error: case on {other:?}"),
            };
            let mut env = env.clone();
            bind(pat, v, &mut env);
            eval(cx, body, &env)?
        }
        K::Prim(op, args) => {
            let vs = args.iter().map(ev).collect::<Result<Vec<_>>>()?;
            match cx.forms.iter().position(|r| Rc::ptr_eq(&r.prim, op)) {
                Some(k) => {
                    apply_form(cx, k, vs.into_iter().next().expect("one argument")).map_err(at)?
                }
                None => apply_prim(op, &vs).map_err(at)?,
            }
        }
        K::Array(_, items) => {
            TValue::Array(Rc::new(items.iter().map(ev).collect::<Result<Vec<_>>>()?))
        }
        K::Map(f, xs) => {
            let f = ev(f)?;
            let xs = ev(xs)?;
            let out = xs
                .expect_array()
                .iter()
                .map(|x| f.apply(cx, x.clone()))
                .collect::<Result<Vec<_>>>()?;
            TValue::Array(Rc::new(out))
        }
        K::Map2(f, xs, ys) => {
            let f = ev(f)?;
            let xs = ev(xs)?;
            let ys = ev(ys)?;
            let (xs, ys) = (xs.expect_array(), ys.expect_array());
            value::check_same_len("map2", xs.len(), ys.len()).map_err(at)?;
            let out = xs
                .iter()
                .zip(ys.iter())
                .map(|(x, y)| f.apply(cx, x.clone())?.apply(cx, y.clone()))
                .collect::<Result<Vec<_>>>()?;
            TValue::Array(Rc::new(out))
        }
        K::Build(n, f) => {
            let n = ev(n)?.expect_int();
            let f = ev(f)?;
            let n = value::check_len("build", n).map_err(at)?;
            let out = (0..n as i64)
                .map(|i| f.apply(cx, TValue::Int(i)))
                .collect::<Result<Vec<_>>>()?;
            TValue::Array(Rc::new(out))
        }
        K::Index(xs, i) => {
            let xs = ev(xs)?;
            let i = ev(i)?.expect_int();
            let xs = xs.expect_array();
            let i = value::check_index(i, xs.len()).map_err(at)?;
            xs[i].clone()
        }
        K::Length(xs) => TValue::Int(ev(xs)?.expect_array().len() as i64),
        K::Replicate(n, x) => {
            let n = ev(n)?.expect_int();
            let x = ev(x)?;
            let n = value::check_len("replicate", n).map_err(at)?;
            TValue::Array(Rc::new(vec![x; n]))
        }
        K::Loop(f, x, tape) => {
            let f = ev(f)?;
            let mut state = ev(x)?;
            let mut records = Vec::new();
            loop {
                let mut next = f.apply(cx, state)?;
                if *tape {
                    let TValue::Pair(p) = next else {
                        panic!("internal error: a taped loop step returned {next:?}")
                    };
                    records.push(p.1.clone());
                    next = p.0.clone();
                }
                match next {
                    TValue::Inl(v) => {
                        crate::steps::step(t.span)?;
                        state = (*v).clone();
                    }
                    TValue::Inr(v) if *tape => {
                        break TValue::pair((*v).clone(), TValue::Array(Rc::new(records)));
                    }
                    TValue::Inr(v) => break (*v).clone(),
                    other => panic!("internal error: a loop step returned {other:?}"),
                }
            }
        }
        K::Fix(f) => {
            let (g, x, body) = crate::source::term::fix_parts(f);
            TValue::Fun(Rc::new(Deep::new(Closure {
                param: x,
                body,
                env: env.clone(),
                fix: Some((g, t.span)),
            })))
        }
    })
}

thread_local! {
    static BUILTINS: Registry = Registry::builtin();
}

fn has_real(ty: &Type) -> bool {
    deep(|| match ty {
        Type::Real => true,
        Type::Int | Type::Bool | Type::Unit => false,
        Type::Prod(p) | Type::Sum(p) | Type::Fun(p) => has_real(&p.0) || has_real(&p.1),
        Type::Array(e) => has_real(e),
    })
}

fn c(x: f64) -> Num {
    Num::c(x)
}

/// `p + t·ε_e`, with an exactly zero `t` dropped.
fn dual(e: u64, p: Num, t: Num) -> Num {
    match t {
        Num::C(0.0) => p,
        t => Num::D(e, Rc::new(p), Rc::new(t)),
    }
}

fn top(x: &Num) -> u64 {
    match x {
        Num::C(_) => 0,
        Num::D(e, _, _) => *e,
    }
}

fn split(x: &Num, e: u64) -> (Num, Num) {
    match x {
        Num::D(f, p, t) if *f == e => ((**p).clone(), (**t).clone()),
        _ => (x.clone(), c(0.0)),
    }
}

/// `c · t` with a strong zero: exactly 0 when `t` is the constant 0.
fn lin(k: &Num, t: &Num) -> Num {
    match t {
        Num::C(0.0) => c(0.0),
        _ => k.mul(t),
    }
}

/// `f(D(e,p,t)) = D(e, f p, f'(p) · t)`, recursively down the tags.
fn lift1(x: &Num, f: &dyn Fn(f64) -> f64, df: &dyn Fn(&Num) -> Num) -> Num {
    deep(|| match x {
        Num::C(a) => c(f(*a)),
        Num::D(e, p, t) => dual(*e, lift1(p, f, df), lin(&df(p), t)),
    })
}

type Rule2<'a> = &'a dyn Fn(&Num, &Num, &Num, &Num) -> (Num, Num);

/// A binary function on the top tag's parts: `rule(p, t, q, s) = (value, tangent)`.
fn lift2(x: &Num, y: &Num, f: &dyn Fn(f64, f64) -> f64, rule: Rule2<'_>) -> Num {
    let e = top(x).max(top(y));
    if e == 0 {
        return c(f(x.primal(), y.primal()));
    }
    let (p, t) = split(x, e);
    let (q, s) = split(y, e);
    let (v, dv) = rule(&p, &t, &q, &s);
    dual(e, v, dv)
}

fn pow(x: &Num, y: &Num) -> Num {
    deep(|| {
        lift2(x, y, &f64::powf, &|p, t, q, s| {
            let cx = if q.primal() == 0.0 {
                c(0.0)
            } else {
                q.mul(&pow(p, &q.sub(&c(1.0))))
            };
            let v = pow(p, q);
            let cy = if p.primal() > 0.0 {
                v.mul(&p.log())
            } else {
                c(0.0)
            };
            let dv = lin(&cx, t).add(&lin(&cy, s));
            (v, dv)
        })
    })
}

fn atan2(y: &Num, x: &Num) -> Num {
    deep(|| {
        lift2(y, x, &f64::atan2, &|q, s, p, t| {
            let r2 = p.mul(p).add(&q.mul(q));
            let dv = if r2.primal() == 0.0 {
                c(0.0)
            } else {
                lin(&p.div(&r2), s).sub(&lin(&q.div(&r2), t))
            };
            (atan2(q, p), dv)
        })
    })
}

fn sigmoid(x: &Num) -> Num {
    lift1(x, &crate::prim::sigmoid, &|p| {
        let s = sigmoid(p);
        s.mul(&c(1.0).sub(&s))
    })
}

fn tan(x: &Num) -> Num {
    lift1(x, &f64::tan, &|p| {
        let k = p.cos();
        c(1.0).div(&k.mul(&k))
    })
}

fn sinh(x: &Num) -> Num {
    lift1(x, &f64::sinh, &cosh)
}

fn cosh(x: &Num) -> Num {
    lift1(x, &f64::cosh, &sinh)
}

fn one_minus_sq(p: &Num) -> Num {
    c(1.0).sub(&p.mul(p))
}

/// The tagged rule of a builtin with a `Real` result, or `None`.
fn real_rule(name: &str, a: &[TValue]) -> Option<Num> {
    let x = || a[0].num();
    let y = || a[1].num();
    Some(match name {
        "add" => x().add(y()),
        "sub" => x().sub(y()),
        "mul" => x().mul(y()),
        "div" => x().div(y()),
        "neg" => x().neg(),
        "sin" => x().sin(),
        "cos" => x().cos(),
        "exp" => x().exp(),
        "log" => x().log(),
        "sqrt" => x().sqrt(),
        "tanh" => x().tanh(),
        "tan" => tan(x()),
        "asin" => lift1(x(), &f64::asin, &|p| c(1.0).div(&one_minus_sq(p).sqrt())),
        "acos" => lift1(x(), &f64::acos, &|p| c(-1.0).div(&one_minus_sq(p).sqrt())),
        "atan" => lift1(x(), &f64::atan, &|p| c(1.0).div(&c(1.0).add(&p.mul(p)))),
        "sinh" => sinh(x()),
        "cosh" => cosh(x()),
        "log1p" => lift1(x(), &f64::ln_1p, &|p| c(1.0).div(&c(1.0).add(p))),
        "expm1" => lift1(x(), &f64::exp_m1, &|p| p.exp()),
        "sigmoid" => sigmoid(x()),
        "softplus" => lift1(x(), &crate::prim::softplus, &sigmoid),
        "erf" => lift1(x(), &crate::prim::erf, &|p| {
            c(std::f64::consts::FRAC_2_SQRT_PI).mul(&p.mul(p).neg().exp())
        }),
        "pow" => pow(x(), y()),
        "atan2" => atan2(x(), y()),
        "abs" => {
            if x().primal() >= 0.0 {
                x().clone()
            } else {
                x().neg()
            }
        }
        "relu" => {
            let v = x().primal();
            if v > 0.0 || v.is_nan() {
                x().clone()
            } else {
                c(0.0)
            }
        }
        "max" => {
            let (u, v) = (x().primal(), y().primal());
            if u >= v || v.is_nan() {
                x().clone()
            } else {
                y().clone()
            }
        }
        "min" => {
            let (u, v) = (x().primal(), y().primal());
            if u <= v || v.is_nan() {
                x().clone()
            } else {
                y().clone()
            }
        }
        "sum" => a[0]
            .expect_array()
            .iter()
            .fold(c(0.0), |s, v| s.add(v.num())),
        "dot" => a[0]
            .expect_array()
            .iter()
            .zip(a[1].expect_array().iter())
            .fold(c(0.0), |s, (u, v)| s.add(&u.num().mul(v.num()))),
        _ => return None,
    })
}

/// Applies a primitive: a builtin with a `Real` result by its tagged rule; a primitive whose
/// parameters or result hold no `Real` (and `sign`, piecewise constant) by its own evaluation
/// of the primals, as a constant.
fn apply_prim(op: &Prim, args: &[TValue]) -> Result<TValue> {
    let builtin = BUILTINS.with(|r| r.get(op.name()).is_some_and(|b| Rc::ptr_eq(b, op)));
    if builtin && let Some(v) = real_rule(op.name(), args) {
        return Ok(TValue::Real(v));
    }
    let constant = !op.params().iter().any(has_real)
        || !has_real(op.result())
        || (builtin && op.name() == "sign");
    if !constant {
        return Err(Error::new(
            ErrorKind::Unsupported,
            format!("tagged oracle: no derivative for primitive `{}`", op.name()),
        ));
    }
    let primals = args
        .iter()
        .zip(op.params())
        .map(|(a, ty)| a.primal(ty))
        .collect();
    Ok(TValue::constant(&op.eval_args(primals)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(src: &str, args: &[Value]) -> Value {
        let (p, forms) = load(src, &Registry::builtin()).unwrap();
        eval_entry(&forms, &p.entry(p.defs.len() - 1), args).unwrap()
    }

    #[test]
    fn siskind_pearlmutter() {
        let v = run(
            "def main : Real = grad (\\x -> x * grad (\\y -> x + y) 1.0) 2.0",
            &[],
        );
        assert_eq!(v.expect_real(), 1.0);
        let v = run(
            "def main : Real = snd (jvp (\\x -> x * snd (vjp (\\y -> x * y) 2.0 1.0)) 1.0 1.0)",
            &[],
        );
        assert_eq!(v.expect_real(), 2.0);
    }

    #[test]
    fn every_builtin_with_a_real_result_has_a_rule_or_is_constant() {
        for p in Registry::builtin().all() {
            let args: Vec<TValue> = p
                .params()
                .iter()
                .map(|t| match t {
                    Type::Real => TValue::Real(c(0.5)),
                    Type::Int => TValue::Int(1),
                    Type::Bool => TValue::Bool(true),
                    Type::Array(_) => TValue::Array(Rc::new(vec![TValue::Real(c(0.5))])),
                    _ => TValue::Unit,
                })
                .collect();
            if p.params()
                .iter()
                .all(|t| matches!(t, Type::Real | Type::Int | Type::Bool))
                || p.name() == "sum"
                || p.name() == "dot"
            {
                let want = p.eval_args(
                    args.iter()
                        .zip(p.params())
                        .map(|(a, t)| a.primal(t))
                        .collect(),
                );
                let got = apply_prim(p, &args);
                match (want, got) {
                    (Ok(w), Ok(g)) => {
                        let g = g.primal(p.result());
                        assert!(
                            w.same(&g) == Some(true)
                                || (w.expect_real() - g.expect_real()).abs() < 1e-12,
                            "{}: {w} vs {g}",
                            p.name()
                        );
                    }
                    (Err(_), Err(_)) => {}
                    (w, g) => panic!("{}: {w:?} vs {g:?}", p.name()),
                }
            }
        }
    }

    #[test]
    fn a_user_primitive_needing_a_derivative_is_an_error() {
        let mut reg = Registry::builtin();
        reg.register(crate::prim::Primitive::function(
            "logcosh",
            vec![Type::Real],
            Type::Real,
            |x| Ok(Value::Real(x.expect_real().cosh().ln())),
        ))
        .unwrap();
        let (p, forms) = load(
            "def main (a : Real) : Real = grad (\\x -> logcosh x) a",
            &reg,
        )
        .unwrap();
        let err = eval_entry(&forms, &p.entry(0), &[Value::Real(1.0)]).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unsupported);
        assert_eq!(
            err.message(),
            "tagged oracle: no derivative for primitive `logcosh`"
        );
        // Recorded forms are run by this evaluator only.
        let err = crate::eval::eval_entry(&p.entry(0), &[Value::Real(1.0)]).unwrap_err();
        assert!(err.message().contains("nested#0"), "{}", err.message());
    }

    /// Each rule's first and second derivatives against central differences of its primal.
    #[test]
    fn rules_against_finite_differences() {
        let reg = Registry::builtin();
        for (name, x0) in [
            ("tan", 0.4),
            ("asin", 0.3),
            ("acos", -0.2),
            ("atan", 1.3),
            ("sinh", 0.7),
            ("cosh", -0.6),
            ("log1p", 0.8),
            ("expm1", -0.4),
            ("sigmoid", 0.9),
            ("softplus", -0.3),
            ("erf", 0.6),
        ] {
            let op = reg.get(name).unwrap().clone();
            let f = |x: &Num| {
                apply_prim(&op, &[TValue::Real(x.clone())])
                    .unwrap()
                    .num()
                    .clone()
            };
            let val = |x: f64| f(&c(x)).primal();
            let d1 = |x: f64| tagged::derivative(f, &c(x)).primal();
            let h = 1e-5;
            let fd1 = (val(x0 + h) - val(x0 - h)) / (2.0 * h);
            assert!((d1(x0) - fd1).abs() < 1e-8, "{name}' {} vs {fd1}", d1(x0));
            let d2 = tagged::derivative(|x| tagged::derivative(f, x), &c(x0)).primal();
            let fd2 = (d1(x0 + h) - d1(x0 - h)) / (2.0 * h);
            assert!((d2 - fd2).abs() < 1e-6, "{name}'' {d2} vs {fd2}");
        }
        for (name, x0, y0) in [("pow", 1.3, 2.5), ("atan2", 0.7, -1.2)] {
            let op = reg.get(name).unwrap().clone();
            let f = |x: &Num, y: &Num| {
                apply_prim(&op, &[TValue::Real(x.clone()), TValue::Real(y.clone())])
                    .unwrap()
                    .num()
                    .clone()
            };
            let val = |x: f64, y: f64| f(&c(x), &c(y)).primal();
            let h = 1e-5;
            let dx = tagged::derivative(|x| f(x, &c(y0)), &c(x0)).primal();
            let dy = tagged::derivative(|y| f(&c(x0), y), &c(y0)).primal();
            let fx = (val(x0 + h, y0) - val(x0 - h, y0)) / (2.0 * h);
            let fy = (val(x0, y0 + h) - val(x0, y0 - h)) / (2.0 * h);
            assert!((dx - fx).abs() < 1e-8 && (dy - fy).abs() < 1e-8, "{name}");
            // The mixed second derivative, both orders.
            let dxy =
                tagged::derivative(|x| tagged::derivative(|y| f(x, y), &c(y0)), &c(x0)).primal();
            let dyx =
                tagged::derivative(|y| tagged::derivative(|x| f(x, y), &c(x0)), &c(y0)).primal();
            let dy_at = |x: f64| tagged::derivative(|y| f(&c(x), y), &c(y0)).primal();
            let fxy = (dy_at(x0 + h) - dy_at(x0 - h)) / (2.0 * h);
            assert!(
                (dxy - fxy).abs() < 1e-6 && (dyx - fxy).abs() < 1e-6,
                "{name}: {dxy} {dyx} {fxy}"
            );
        }
    }
}
