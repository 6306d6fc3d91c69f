//! The forward pass: a big-step evaluator of typed source terms on dual values, every `Real`
//! paired with a backpropagator ID.
//!
//! It mirrors the direct evaluator ([`crate::eval`]) form by form: the same evaluation order
//! (left to right, function before argument, `build n f` evaluates `n` before `f`), the same
//! checks with the same messages, and primitives evaluated by their own registered evaluation.
//! So the primal result, and any runtime error with its message and position, are the direct
//! evaluator's. Only primitive applications touch the tape ([`super::prims`]); every other form
//! (variables, `let`, λ, application, tuples, sums, `case`, `if`, arrays) moves dual values
//! around unchanged. This is the paper's observation that dual-numbers AD is structure
//! preserving outside the scalar operations (§5, §10): closures capture dual environments, so a
//! function passed, returned, stored in a tuple or mapped over an array carries the
//! backpropagators of what it captured, with no special rule.
//!
//! Iteration and recursion (when the language gets them) need no new idea either: a loop form
//! is evaluated by running its body repeatedly here, each iteration's primitive applications
//! taking fresh, increasing IDs (§10, "Recursion": `letrec` is treated like `let`). The place to
//! add them is `eval_node`, one arm per form, as in the direct evaluator.

use super::prims;
use super::tape::{Id, NONE, Tape};
use crate::deep::{Deep, deep};
use crate::error::{Error, Result, Span};
use crate::source::term::{Pat, Term, TermKind, Var, VarId};
use crate::types::Type;
use crate::value::{self, Value};
use std::fmt;
use std::rc::Rc;

/// A value of the forward pass: a `Real` carries its backpropagator's ID ([`NONE`] for
/// constants); discrete values carry nothing; closures capture dual environments.
#[derive(Clone)]
pub enum DVal {
    /// A real and the ID of its backpropagator.
    Real(f64, Id),
    /// An integer.
    Int(i64),
    /// A boolean.
    Bool(bool),
    /// `()`.
    Unit,
    /// A pair.
    Pair(Rc<Deep<(DVal, DVal)>>),
    /// A left injection.
    Inl(Rc<Deep<DVal>>),
    /// A right injection.
    Inr(Rc<Deep<DVal>>),
    /// An array (of any element type).
    Array(Rc<Vec<DVal>>),
    /// A function: a λ and the dual environment it captured.
    Fun(Rc<Deep<Lambda>>),
}

/// A closure of the forward pass.
pub struct Lambda {
    param: Var,
    body: Term,
    env: Env,
    /// For `fix f` (a recursive function): the variable the body calls itself by (bound to
    /// this closure at each call) and the position of the definition.
    fix: Option<(Var, Span)>,
}

/// An environment of dual values.
pub type Env = im::HashMap<VarId, DVal>;

impl fmt::Debug for DVal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        deep(|| match self {
            DVal::Real(x, NONE) => write!(f, "{x}"),
            DVal::Real(x, id) => write!(f, "{x}@{id}"),
            DVal::Int(i) => write!(f, "{i}"),
            DVal::Bool(b) => write!(f, "{b}"),
            DVal::Unit => f.write_str("()"),
            DVal::Pair(p) => write!(f, "({:?}, {:?})", p.0, p.1),
            DVal::Inl(x) => write!(f, "inl {:?}", **x),
            DVal::Inr(x) => write!(f, "inr {:?}", **x),
            DVal::Array(xs) => f.debug_list().entries(xs.iter()).finish(),
            DVal::Fun(_) => f.write_str("<function>"),
        })
    }
}

impl DVal {
    /// The pair `(a, b)`.
    pub fn pair(a: DVal, b: DVal) -> DVal {
        DVal::Pair(Rc::new(Deep::new((a, b))))
    }

    /// A first-order value with the zero backpropagator everywhere (a constant).
    pub fn constant(v: &Value) -> DVal {
        deep(|| match v {
            Value::Real(x) => DVal::Real(*x, NONE),
            Value::Int(i) => DVal::Int(*i),
            Value::Bool(b) => DVal::Bool(*b),
            Value::Pair(p) => DVal::pair(DVal::constant(&p.0), DVal::constant(&p.1)),
            Value::Inl(x) => DVal::Inl(Rc::new(Deep::new(DVal::constant(x)))),
            Value::Inr(x) => DVal::Inr(Rc::new(Deep::new(DVal::constant(x)))),
            Value::RealArray(xs) => {
                DVal::Array(Rc::new(xs.iter().map(|&x| DVal::Real(x, NONE)).collect()))
            }
            Value::Array(xs) => DVal::Array(Rc::new(xs.iter().map(DVal::constant).collect())),
            // Only first-order values are made constant (literals and primitive results).
            Value::Unit | Value::Closure(_) | Value::Lin(_) | Value::LinFun(_) => DVal::Unit,
        })
    }

    /// The value `v : ty` (first-order) with its Real leaves given IDs by `next`, in
    /// depth-first left-to-right order.
    pub fn lift(ty: &Type, v: &Value, next: &mut dyn FnMut() -> Result<Id>) -> Result<DVal> {
        deep(|| {
            Ok(match (ty, v) {
                (Type::Real, Value::Real(x)) => DVal::Real(*x, next()?),
                (Type::Prod(p), Value::Pair(q)) => {
                    let a = DVal::lift(&p.0, &q.0, next)?;
                    DVal::pair(a, DVal::lift(&p.1, &q.1, next)?)
                }
                (Type::Sum(p), Value::Inl(x)) => {
                    DVal::Inl(Rc::new(Deep::new(DVal::lift(&p.0, x, next)?)))
                }
                (Type::Sum(p), Value::Inr(x)) => {
                    DVal::Inr(Rc::new(Deep::new(DVal::lift(&p.1, x, next)?)))
                }
                (Type::Array(e), Value::RealArray(_) | Value::Array(_)) => DVal::Array(Rc::new(
                    v.array_items()
                        .iter()
                        .map(|x| DVal::lift(e, x, next))
                        .collect::<Result<Vec<_>>>()?,
                )),
                _ => DVal::constant(v),
            })
        })
    }

    /// The primal part as a value of the first-order type `ty` (arrays of reals unboxed).
    pub fn primal(&self, ty: &Type) -> Value {
        deep(|| match (self, ty) {
            (DVal::Real(x, _), _) => Value::Real(*x),
            (DVal::Int(i), _) => Value::Int(*i),
            (DVal::Bool(b), _) => Value::Bool(*b),
            (DVal::Pair(p), Type::Prod(t)) => Value::pair(p.0.primal(&t.0), p.1.primal(&t.1)),
            (DVal::Inl(x), Type::Sum(t)) => Value::inl(x.primal(&t.0)),
            (DVal::Inr(x), Type::Sum(t)) => Value::inr(x.primal(&t.1)),
            (DVal::Array(xs), Type::Array(e)) => {
                if matches!(***e, Type::Real) {
                    return Value::reals(xs.iter().map(DVal::real).collect());
                }
                Value::array(e, xs.iter().map(|x| x.primal(e)).collect())
            }
            _ => Value::Unit,
        })
    }

    /// The IDs of the Real leaves, depth first, left to right (the order of
    /// [`super::tape::real_leaves`] on the primal).
    pub fn ids(&self, out: &mut Vec<Id>) {
        deep(|| match self {
            DVal::Real(_, id) => out.push(*id),
            DVal::Pair(p) => {
                p.0.ids(out);
                p.1.ids(out);
            }
            DVal::Inl(x) | DVal::Inr(x) => x.ids(out),
            DVal::Array(xs) => xs.iter().for_each(|x| x.ids(out)),
            _ => {}
        })
    }

    /// The number. Panics if not a real (a typing invariant).
    pub fn real(&self) -> f64 {
        match self {
            DVal::Real(x, _) => *x,
            other => invariant("a Real", other),
        }
    }

    fn expect_pair(&self) -> (&DVal, &DVal) {
        match self {
            DVal::Pair(p) => (&p.0, &p.1),
            other => invariant("a pair", other),
        }
    }

    fn expect_int(&self) -> i64 {
        match self {
            DVal::Int(i) => *i,
            other => invariant("an Int", other),
        }
    }

    fn expect_bool(&self) -> bool {
        match self {
            DVal::Bool(b) => *b,
            other => invariant("a Bool", other),
        }
    }

    fn expect_array(&self) -> &Rc<Vec<DVal>> {
        match self {
            DVal::Array(xs) => xs,
            other => invariant("an array", other),
        }
    }

    /// Applies a function value.
    pub fn apply(&self, arg: DVal, run: &mut Run) -> Result<DVal> {
        match self {
            DVal::Fun(c) => match &c.fix {
                None => {
                    let env = c.env.update(c.param.id, arg);
                    eval(&c.body, &env, run)
                }
                Some((g, at)) => crate::steps::recursive_call(*at, || {
                    let env = c
                        .env
                        .update(g.id, DVal::Fun(c.clone()))
                        .update(c.param.id, arg);
                    eval(&c.body, &env, run)
                }),
            },
            other => invariant("a function", other),
        }
    }
}

#[cold]
#[track_caller]
fn invariant(expected: &str, found: &DVal) -> ! {
    panic!("internal error: expected {expected}, found {found:?} (typing invariant broken)")
}

/// The state a forward pass threads through (the paper's ID-generation monad, made mutable:
/// the next ID is the tape's length).
pub struct Run<'a> {
    /// The tape being written.
    pub tape: Tape,
    /// How primitives are differentiated (and the compiled fallback derivatives).
    pub prims: &'a prims::Prims,
    /// A scratch buffer for a primitive's edges.
    pub scratch: Vec<super::tape::Edge>,
}

/// Evaluates a term in an environment binding its free variables.
pub fn eval(t: &Term, env: &Env, run: &mut Run) -> Result<DVal> {
    deep(|| {
        // Chains of lets are walked in a loop rather than by recursion.
        let mut env = env.clone();
        let mut t = t;
        while let TermKind::Let(p, e, b) = &t.kind {
            let v = eval(e, &env, run)?;
            bind(p, v, &mut env);
            t = b;
        }
        eval_node(t, &env, run)
    })
}

fn bind(pat: &Pat, v: DVal, env: &mut Env) {
    match pat {
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
    }
}

fn eval_node(t: &Term, env: &Env, run: &mut Run) -> Result<DVal> {
    use TermKind as K;
    let at = |e: Error| e.or_span(t.span);
    Ok(match &t.kind {
        K::Var(x) => env
            .get(&x.id)
            .cloned()
            .unwrap_or_else(|| panic!("internal error: unbound variable {x:?}")),
        K::Lit(l) => DVal::constant(&l.value()),
        K::Lam(x, b) => DVal::Fun(Rc::new(Deep::new(Lambda {
            param: x.clone(),
            body: b.clone(),
            env: env.clone(),
            fix: None,
        }))),
        K::App(f, a) => {
            let f = eval(f, env, run)?;
            let a = eval(a, env, run)?;
            f.apply(a, run)?
        }
        K::Let(..) => eval(t, env, run)?,
        K::Pair(a, b) => {
            let a = eval(a, env, run)?;
            DVal::pair(a, eval(b, env, run)?)
        }
        K::Fst(e) => eval(e, env, run)?.expect_pair().0.clone(),
        K::Snd(e) => eval(e, env, run)?.expect_pair().1.clone(),
        K::If(c, a, b) => {
            if eval(c, env, run)?.expect_bool() {
                eval(a, env, run)?
            } else {
                eval(b, env, run)?
            }
        }
        K::Inl(e, _) => DVal::Inl(Rc::new(Deep::new(eval(e, env, run)?))),
        K::Inr(_, e) => DVal::Inr(Rc::new(Deep::new(eval(e, env, run)?))),
        K::Case(e, p, a, q, b) => {
            let (pat, v, body) = match eval(e, env, run)? {
                DVal::Inl(v) => (p, (**v).clone(), a),
                DVal::Inr(v) => (q, (**v).clone(), b),
                other => invariant("a sum", &other),
            };
            let mut env = env.clone();
            bind(pat, v, &mut env);
            eval(body, &env, run)?
        }
        K::Prim(op, args) => {
            let ds = args
                .iter()
                .map(|a| eval(a, env, run))
                .collect::<Result<Vec<_>>>()?;
            prims::apply(op, ds, run).map_err(at)?
        }
        K::Array(_, items) => DVal::Array(Rc::new(
            items
                .iter()
                .map(|a| eval(a, env, run))
                .collect::<Result<Vec<_>>>()?,
        )),
        K::Map(f, xs) => {
            let f = eval(f, env, run)?;
            let xs = eval(xs, env, run)?;
            let out = xs
                .expect_array()
                .iter()
                .map(|x| f.apply(x.clone(), run))
                .collect::<Result<Vec<_>>>()?;
            DVal::Array(Rc::new(out))
        }
        K::Map2(f, xs, ys) => {
            let f = eval(f, env, run)?;
            let xs = eval(xs, env, run)?;
            let ys = eval(ys, env, run)?;
            let (xs, ys) = (xs.expect_array(), ys.expect_array());
            value::check_same_len("map2", xs.len(), ys.len()).map_err(at)?;
            let out = xs
                .iter()
                .zip(ys.iter())
                .map(|(x, y)| f.apply(x.clone(), run)?.apply(y.clone(), run))
                .collect::<Result<Vec<_>>>()?;
            DVal::Array(Rc::new(out))
        }
        K::Build(n, f) => {
            let n = eval(n, env, run)?.expect_int();
            let f = eval(f, env, run)?;
            let n = value::check_len("build", n).map_err(at)?;
            let out = (0..n as i64)
                .map(|i| f.apply(DVal::Int(i), run))
                .collect::<Result<Vec<_>>>()?;
            DVal::Array(Rc::new(out))
        }
        K::Index(xs, i) => {
            let xs = eval(xs, env, run)?;
            let i = eval(i, env, run)?.expect_int();
            let xs = xs.expect_array();
            let i = value::check_index(i, xs.len()).map_err(at)?;
            xs[i].clone()
        }
        K::Length(xs) => DVal::Int(eval(xs, env, run)?.expect_array().len() as i64),
        K::Replicate(n, x) => {
            let n = eval(n, env, run)?.expect_int();
            let x = eval(x, env, run)?;
            let n = value::check_len("replicate", n).map_err(at)?;
            DVal::Array(Rc::new(vec![x; n]))
        }
        K::Loop(f, x, tape) => {
            // Each iteration's operations go on the tape like any others (a Rust loop); a
            // taped loop keeps each step's record, in order.
            let f = eval(f, env, run)?;
            let mut state = eval(x, env, run)?;
            let mut records = Vec::new();
            loop {
                let mut next = f.apply(state, run)?;
                if *tape {
                    let DVal::Pair(p) = next else {
                        invariant("a pair", &next)
                    };
                    records.push(p.1.clone());
                    next = p.0.clone();
                }
                match next {
                    DVal::Inl(v) => {
                        crate::steps::step(t.span)?;
                        state = (*v).clone();
                    }
                    DVal::Inr(v) if *tape => {
                        break DVal::pair((*v).clone(), DVal::Array(Rc::new(records)));
                    }
                    DVal::Inr(v) => break (*v).clone(),
                    other => invariant("a sum", &other),
                }
            }
        }
        K::Fix(f) => {
            let (g, x, body) = crate::source::term::fix_parts(f);
            DVal::Fun(Rc::new(Deep::new(Lambda {
                param: x,
                body,
                env: env.clone(),
                fix: Some((g, t.span)),
            })))
        }
    })
}
