//! Primitive applications in the forward pass: the primal by the primitive's own evaluation,
//! the backpropagator from the partial derivatives at the arguments.
//!
//! For a primitive `op` with scalar result `y = op(x_1, ..., x_n)` the backpropagator is the
//! paper's form (3), defunctionalised (§9.2): the edges `(id(x_i), ∂_i op(x)(1))`, computed now,
//! in the forward pass (§9.3). Where they come from:
//!
//! * **Builtins**: a table written out here by hand (independent of the derivatives registered
//!   in [`crate::prim`], which reverse CHAD uses, so that comparing the two catches a wrong rule
//!   on either side). It follows LANGUAGE.md's conventions, as the forward dual-number oracle
//!   ([`crate::oracle::dual`]) does: `max`/`min` follow the branch they return (ties and a NaN
//!   second argument go to the first), `abs` has derivative `+1` at `0`, `pow x y` has
//!   `∂x = y·x^(y−1)` (`0` when `y = 0`) and `∂y = x^y·ln x` (`0` when `x ≤ 0`). `sum` and `dot`
//!   are scalar-valued too: one edge per array element.
//! * **Any other primitive** (a user's registration, or every primitive with
//!   [`Options::generic_prims`](super::Options::generic_prims)): the registered transposed
//!   derivative `DopT(x; v)`, evaluated at the argument. The primitive's reverse-CHAD image
//!   `x ⊢ (op x, λ̲v. DopT(x; v))` is compiled once per primitive and run at each application,
//!   giving the linear map `R2(result) ⊸ R2(argument)` there. For a `Real` result it is applied
//!   to the cotangent `1` now, giving the partials; for a result with several scalars (a tuple
//!   or array) the map itself goes on the tape as a [`Block`] and runs once,
//!   backwards, on the cotangent of the whole result. [`Derivative::Native`] kernels work the
//!   same way.
//!
//! Primitives whose arguments or result have no `Real` in them (comparisons, integer
//! arithmetic, `floor`, `toReal`, `decide`) give constants, as does any application whose
//! arguments are all constants.

use super::eval::{DVal, Run};
use super::tape::{Block, Edge, Id, NONE, real_leaves};
use crate::ad::reverse::Reverse;
use crate::ccc::model::Primitives;
use crate::error::{Error, ErrorKind, Result};
use crate::prim::{Derivative, Prim, Registry, Scalar};
use crate::target::engine::Code;
use crate::target::linear::{Lin, LinFun};
use crate::types::Type;
use crate::value::Value;
use rustc_hash::FxHashMap;
use std::cell::RefCell;
use std::rc::Rc;

/// The edges of a scalar builtin's backpropagator, from the arguments and the result.
type Partials = fn(&[DVal], f64, &mut Vec<Edge>);

#[derive(Clone, Copy)]
enum Rule {
    /// No derivative flows: a constant result.
    Constant,
    /// A `Real` result with edges from the table.
    Table(Partials),
    /// The registered derivative.
    Registered,
}

/// How primitives are differentiated in one engine: the rule of each primitive met so far and
/// the compiled images of those differentiated through their registration.
pub struct Prims {
    generic: bool,
    rules: RefCell<FxHashMap<usize, (Prim, Rule)>>,
    images: RefCell<FxHashMap<usize, Rc<Code>>>,
}

thread_local! {
    static BUILTINS: Registry = Registry::builtin();
}

impl Prims {
    /// The table for builtins (unless `generic`), registered derivatives otherwise.
    pub fn new(generic: bool) -> Prims {
        Prims {
            generic,
            rules: RefCell::new(FxHashMap::default()),
            images: RefCell::new(FxHashMap::default()),
        }
    }

    fn rule(&self, op: &Prim) -> Rule {
        let key = Rc::as_ptr(op) as usize;
        if let Some((_, r)) = self.rules.borrow().get(&key) {
            return *r;
        }
        let r = self.make_rule(op);
        // Keeping the handle keeps the address from being reused by another primitive.
        self.rules.borrow_mut().insert(key, (op.clone(), r));
        r
    }

    fn make_rule(&self, op: &Prim) -> Rule {
        if !op.params().iter().any(has_real) || !has_real(op.result()) {
            return Rule::Constant;
        }
        let builtin = BUILTINS.with(|r| r.get(op.name()).is_some_and(|b| Rc::ptr_eq(b, op)));
        if builtin
            && !self.generic
            && let Some(p) = table(op.name())
        {
            return Rule::Table(p);
        }
        match op.derivative() {
            Derivative::Zero => Rule::Constant,
            _ => Rule::Registered,
        }
    }

    /// The compiled reverse-CHAD image of a primitive (its registered `DopT`).
    fn image(&self, op: &Prim) -> Result<Rc<Code>> {
        let key = Rc::as_ptr(op) as usize;
        if let Some(c) = self.images.borrow().get(&key) {
            return Ok(c.clone());
        }
        let code = Rc::new(Reverse::new().prim(op)?.compile());
        self.images.borrow_mut().insert(key, code.clone());
        Ok(code)
    }
}

fn has_real(ty: &Type) -> bool {
    crate::deep::deep(|| match ty {
        Type::Real => true,
        Type::Int | Type::Bool | Type::Unit => false,
        Type::Prod(p) | Type::Sum(p) | Type::Fun(p) => has_real(&p.0) || has_real(&p.1),
        Type::Array(e) => has_real(e),
    })
}

/// Whether a primitive can be differentiated by this engine.
pub fn supported(op: &Prim) -> bool {
    !matches!(op.derivative(), Derivative::Missing)
        || !op.params().iter().any(has_real)
        || !has_real(op.result())
}

/// Applies a primitive to dual arguments: the primal value and its backpropagator.
pub fn apply(op: &Prim, args: Vec<DVal>, run: &mut Run) -> Result<DVal> {
    let value = primal(op, &args)?;
    match run.prims.rule(op) {
        Rule::Constant => Ok(DVal::constant(&value)),
        Rule::Table(partials) => {
            let y = value.expect_real();
            run.scratch.clear();
            partials(&args, y, &mut run.scratch);
            let id = run.tape.push(run.scratch.drain(..))?;
            Ok(DVal::Real(y, id))
        }
        Rule::Registered => registered(op, &args, value, run),
    }
}

/// The primal result, by the primitive's own evaluation (on unboxed operands where it has
/// them: the same function, see [`Scalar`]).
fn primal(op: &Prim, args: &[DVal]) -> Result<Value> {
    let fast = match (op.scalar(), args) {
        (Some(Scalar::Real1(f)), [DVal::Real(x, _)]) => Some(Value::Real(f(*x))),
        (Some(Scalar::Real2(f)), [DVal::Real(x, _), DVal::Real(y, _)]) => {
            Some(Value::Real(f(*x, *y)))
        }
        (Some(Scalar::RealCmp(f)), [DVal::Real(x, _), DVal::Real(y, _)]) => {
            Some(Value::Bool(f(x, y)))
        }
        (Some(Scalar::IntCmp(f)), [DVal::Int(x), DVal::Int(y)]) => Some(Value::Bool(f(x, y))),
        // `None` is a failure: the evaluation below reports it.
        (Some(Scalar::Int2(f)), [DVal::Int(x), DVal::Int(y)]) => f(*x, *y).map(Value::Int),
        _ => None,
    };
    match fast {
        Some(v) => Ok(v),
        None => op.eval_args(
            args.iter()
                .zip(op.params())
                .map(|(a, t)| a.primal(t))
                .collect(),
        ),
    }
}

/// A primitive differentiated through its registered derivative.
fn registered(op: &Prim, args: &[DVal], value: Value, run: &mut Run) -> Result<DVal> {
    let mut ids = Vec::new();
    for a in args {
        a.ids(&mut ids);
    }
    if ids.iter().all(|&i| i == NONE) {
        return Ok(DVal::constant(&value));
    }
    let arg_ty = op.domain();
    let arg = Value::tuple(
        args.iter()
            .zip(op.params())
            .map(|(a, t)| a.primal(t))
            .collect(),
    );
    let image = run.prims.image(op)?.run(std::slice::from_ref(&arg))?;
    let derivative = match image.expect_pair().1 {
        Value::LinFun(f) => f.clone(),
        other => {
            return Err(Error::new(
                ErrorKind::Runtime,
                format!(
                    "internal error: the derivative of `{}` is not a linear map: {other}",
                    op.name()
                ),
            ));
        }
    };
    let result_ty = op.result().clone();
    if matches!(result_ty, Type::Real) {
        let partials = arg_cotangent(&derivative, &Lin::real(1.0), &arg_ty, &arg)?;
        let edges = ids
            .iter()
            .zip(partials)
            .map(|(&to, partial)| Edge { to, partial });
        let id = run.tape.push(edges)?;
        return Ok(DVal::Real(value.expect_real(), id));
    }
    let n = real_leaves(&value).len();
    if n == 0 {
        return Ok(DVal::constant(&value));
    }
    let first = run.tape.push_block(n, |first, last| Block {
        first,
        last,
        result_ty: result_ty.clone(),
        result: value.clone(),
        arg_ty,
        arg,
        inputs: ids,
        derivative,
    })?;
    let mut next = first;
    DVal::lift(&result_ty, &value, &mut || {
        let id = next;
        next += 1;
        Ok(id)
    })
}

/// The Real leaves of `DopT(x; v)`.
fn arg_cotangent(d: &LinFun, v: &Lin, arg_ty: &Type, arg: &Value) -> Result<Vec<f64>> {
    let out = d.apply(v)?;
    Ok(real_leaves(&crate::ad::from_tangent(arg_ty, arg, &out)))
}

/// An edge to `to` unless it is a constant.
#[inline]
fn edge(out: &mut Vec<Edge>, to: Id, partial: f64) {
    if to != NONE {
        out.push(Edge { to, partial });
    }
}

#[inline]
fn re(d: &DVal) -> (f64, Id) {
    match d {
        DVal::Real(x, id) => (*x, *id),
        other => panic!("internal error: expected a Real, found {other:?}"),
    }
}

fn elems(d: &DVal) -> &[DVal] {
    match d {
        DVal::Array(xs) => xs,
        other => panic!("internal error: expected an array, found {other:?}"),
    }
}

/// The hand-written table of partial derivatives of the builtin scalar functions.
fn table(name: &str) -> Option<Partials> {
    fn one(a: &[DVal], out: &mut Vec<Edge>, d: impl Fn(f64) -> f64) {
        let (x, i) = re(&a[0]);
        edge(out, i, d(x));
    }
    fn two(a: &[DVal], out: &mut Vec<Edge>, d: impl Fn(f64, f64) -> (f64, f64)) {
        let ((x, i), (y, j)) = (re(&a[0]), re(&a[1]));
        let (dx, dy) = d(x, y);
        edge(out, i, dx);
        edge(out, j, dy);
    }
    Some(match name {
        "sin" => |a, _, o| one(a, o, f64::cos),
        "cos" => |a, _, o| one(a, o, |x| -x.sin()),
        "tan" => |a, _, o| {
            one(a, o, |x| {
                let c = x.cos();
                1.0 / (c * c)
            })
        },
        "exp" => |a, y, o| one(a, o, |_| y),
        "log" => |a, _, o| one(a, o, |x| 1.0 / x),
        "sqrt" => |a, y, o| one(a, o, |_| 0.5 / y),
        "tanh" => |a, y, o| one(a, o, |_| 1.0 - y * y),
        "sigmoid" => |a, y, o| one(a, o, |_| y * (1.0 - y)),
        "abs" => |a, _, o| one(a, o, |x| if x >= 0.0 { 1.0 } else { -1.0 }),
        "neg" => |a, _, o| one(a, o, |_| -1.0),
        "pow" => |a, y, o| {
            two(a, o, |b, e| {
                let db = if e == 0.0 { 0.0 } else { e * b.powf(e - 1.0) };
                let de = if b > 0.0 { y * b.ln() } else { 0.0 };
                (db, de)
            })
        },
        "max" => |a, _, o| {
            two(a, o, |x, y| {
                if x >= y || y.is_nan() {
                    (1.0, 0.0)
                } else {
                    (0.0, 1.0)
                }
            })
        },
        "min" => |a, _, o| {
            two(a, o, |x, y| {
                if x <= y || y.is_nan() {
                    (1.0, 0.0)
                } else {
                    (0.0, 1.0)
                }
            })
        },
        "add" => |a, _, o| two(a, o, |_, _| (1.0, 1.0)),
        "sub" => |a, _, o| two(a, o, |_, _| (1.0, -1.0)),
        "mul" => |a, _, o| two(a, o, |x, y| (y, x)),
        "div" => |a, _, o| two(a, o, |x, y| (1.0 / y, -(x / y) / y)),
        "sum" => |a, _, o| {
            for x in elems(&a[0]) {
                edge(o, re(x).1, 1.0);
            }
        },
        "dot" => |a, _, o| {
            for (x, y) in elems(&a[0]).iter().zip(elems(&a[1])) {
                let ((x, i), (y, j)) = (re(x), re(y));
                edge(o, i, y);
                edge(o, j, x);
            }
        },
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every builtin with a `Real` in its parameters and its result has a table entry.
    #[test]
    fn every_differentiable_builtin_is_in_the_table() {
        for p in Registry::builtin().all() {
            let differentiable = p.params().iter().any(has_real) && has_real(p.result());
            assert_eq!(table(p.name()).is_some(), differentiable, "{}", p.name());
        }
    }
}
