//! Evaluation: the Set model of the free category.
//!
//! A morphism `A → B` is a Rust closure from values of `A` to values of `B` (or a runtime
//! error). `curry` makes a [`Closure`] value that remembers its environment; `eval` applies one.
//! This is the second, independent route to a program's value (the first is
//! [`crate::eval`], which walks source terms).

use super::model::{Arrays, Cartesian, Category, Closed, Coproducts, Iteration, Primitives};
use super::{Comb, Path, Step, interpret};
use crate::deep::{Deep, deep};
use crate::error::{Result, Span};
use crate::prim::Prim;
use crate::source::term::Lit;
use crate::types::Type;
use crate::value::{self, Closure, Value};
use std::convert::Infallible;
use std::rc::Rc;

/// The Set model (evaluation).
#[derive(Clone, Copy, Debug, Default)]
pub struct Eval;

/// A morphism of the Set model: a function on values. (A tree of closures as deep as the
/// combinator, hence `Deep`: dropping it must not recurse on one stack.)
pub type Fun = Rc<Deep<dyn Fn(&Value) -> Result<Value>>>;

/// Evaluates a combinator at a point of its domain.
pub fn run(c: &Comb, x: &Value) -> Result<Value> {
    let f = match interpret(c, &Eval) {
        Ok(f) => f,
        Err(e) => match e {},
    };
    f(x)
}

/// The value of the context `((1 × A1) × ...) × An` holding the given values.
pub fn context_value(args: &[Value]) -> Value {
    args.iter()
        .fold(Value::Unit, |g, a| Value::pair(g, a.clone()))
}

fn fun(f: impl Fn(&Value) -> Result<Value> + 'static) -> std::result::Result<Fun, Infallible> {
    Ok(Rc::new(Deep::new(f)))
}

impl Category for Eval {
    type Mor = Fun;
    type Error = Infallible;

    fn id(&self, _: &Type) -> std::result::Result<Fun, Infallible> {
        fun(|x| Ok(x.clone()))
    }

    fn compose(&self, g: Fun, f: Fun) -> std::result::Result<Fun, Infallible> {
        fun(move |x| deep(|| g(&f(x)?)))
    }

    fn located(&self, m: Fun, at: Span) -> Fun {
        Rc::new(Deep::new(move |x: &Value| m(x).map_err(|e| e.or_span(at))))
    }
}

impl Cartesian for Eval {
    fn bang(&self, _: &Type) -> std::result::Result<Fun, Infallible> {
        fun(|_| Ok(Value::Unit))
    }

    fn fst(&self, _: &Type, _: &Type) -> std::result::Result<Fun, Infallible> {
        fun(|x| Ok(x.expect_pair().0.clone()))
    }

    fn snd(&self, _: &Type, _: &Type) -> std::result::Result<Fun, Infallible> {
        fun(|x| Ok(x.expect_pair().1.clone()))
    }

    fn pair(&self, f: Fun, g: Fun) -> std::result::Result<Fun, Infallible> {
        fun(move |x| deep(|| Ok(Value::pair(f(x)?, g(x)?))))
    }

    fn proj(&self, _: &Type, path: &Path) -> std::result::Result<Fun, Infallible> {
        let path = path.clone();
        fun(move |x| {
            let mut v = x;
            for s in path.expanded() {
                let (a, b) = v.expect_pair();
                v = if s == Step::Fst { a } else { b };
            }
            Ok(v.clone())
        })
    }
}

struct CombClosure {
    body: Fun,
    env: Value,
}

impl Closure for CombClosure {
    fn apply(&self, arg: Value) -> Result<Value> {
        (self.body)(&Value::pair(self.env.clone(), arg))
    }
}

impl Closed for Eval {
    fn curry(&self, f: Fun, _: &Type, _: &Type, _: &Type) -> std::result::Result<Fun, Infallible> {
        fun(move |x| {
            Ok(Value::Closure(Rc::new(CombClosure {
                body: f.clone(),
                env: x.clone(),
            })))
        })
    }

    fn eval(&self, _: &Type, _: &Type) -> std::result::Result<Fun, Infallible> {
        fun(|x| {
            let (g, b) = x.expect_pair();
            deep(|| g.apply(b.clone()))
        })
    }
}

impl Coproducts for Eval {
    fn inl(&self, _: &Type, _: &Type) -> std::result::Result<Fun, Infallible> {
        fun(|x| Ok(Value::inl(x.clone())))
    }

    fn inr(&self, _: &Type, _: &Type) -> std::result::Result<Fun, Infallible> {
        fun(|x| Ok(Value::inr(x.clone())))
    }

    fn copair(
        &self,
        f: Fun,
        g: Fun,
        _: &Type,
        _: &Type,
        _: &Type,
    ) -> std::result::Result<Fun, Infallible> {
        fun(move |x| {
            deep(|| match x {
                Value::Inl(v) => f(v),
                Value::Inr(v) => g(v),
                other => panic!("internal error: copair on {other}"),
            })
        })
    }

    fn dist(&self, _: &Type, _: &Type, _: &Type) -> std::result::Result<Fun, Infallible> {
        fun(|x| {
            let (a, s) = x.expect_pair();
            Ok(match s {
                Value::Inl(b) => Value::inl(Value::pair(a.clone(), (**b).clone())),
                Value::Inr(c) => Value::inr(Value::pair(a.clone(), (**c).clone())),
                other => panic!("internal error: dist on {other}"),
            })
        })
    }
}

impl Arrays for Eval {
    fn map(&self, f: Fun, _: &Type, _: &Type, b: &Type) -> std::result::Result<Fun, Infallible> {
        let b = b.clone();
        fun(move |x| {
            let (g, xs) = x.expect_pair();
            let out = xs
                .array_items()
                .into_iter()
                .map(|a| f(&Value::pair(g.clone(), a)))
                .collect::<Result<Vec<_>>>()?;
            Ok(Value::array(&b, out))
        })
    }

    fn map2(
        &self,
        f: Fun,
        _: &Type,
        _: &Type,
        _: &Type,
        c: &Type,
    ) -> std::result::Result<Fun, Infallible> {
        let c = c.clone();
        fun(move |x| {
            let (g, arrays) = x.expect_pair();
            let (xs, ys) = arrays.expect_pair();
            value::check_same_len("map2", xs.array_len(), ys.array_len())?;
            let out = xs
                .array_items()
                .into_iter()
                .zip(ys.array_items())
                .map(|(a, b)| f(&Value::pair(g.clone(), Value::pair(a, b))))
                .collect::<Result<Vec<_>>>()?;
            Ok(Value::array(&c, out))
        })
    }

    fn build(&self, f: Fun, _: &Type, a: &Type) -> std::result::Result<Fun, Infallible> {
        let a = a.clone();
        fun(move |x| {
            let (g, n) = x.expect_pair();
            let n = value::check_len("build", n.expect_int())?;
            let out = (0..n as i64)
                .map(|i| f(&Value::pair(g.clone(), Value::Int(i))))
                .collect::<Result<Vec<_>>>()?;
            Ok(Value::array(&a, out))
        })
    }

    fn index(&self, _: &Type) -> std::result::Result<Fun, Infallible> {
        fun(|x| {
            let (xs, i) = x.expect_pair();
            xs.index(i.expect_int())
        })
    }

    fn length(&self, _: &Type) -> std::result::Result<Fun, Infallible> {
        fun(|x| Ok(Value::Int(x.array_len() as i64)))
    }

    fn replicate(&self, a: &Type) -> std::result::Result<Fun, Infallible> {
        let a = a.clone();
        fun(move |x| {
            let (n, v) = x.expect_pair();
            let n = value::check_len("replicate", n.expect_int())?;
            Ok(value::replicate(&a, n, v))
        })
    }

    fn array(&self, a: &Type, n: usize) -> std::result::Result<Fun, Infallible> {
        let a = a.clone();
        fun(move |x| {
            let mut items = Vec::with_capacity(n);
            let mut cur = x;
            for k in 0..n {
                if k + 1 == n {
                    items.push(cur.clone());
                } else {
                    let (h, t) = cur.expect_pair();
                    items.push(h.clone());
                    cur = t;
                }
            }
            Ok(Value::array(&a, items))
        })
    }
}

impl Iteration for Eval {
    fn iter(&self, f: Fun, _: &Type, _: &Type, _: &Type) -> std::result::Result<Fun, Infallible> {
        // A Rust loop: the step limit's error gets the loop's position from `located`.
        fun(move |x| {
            let (g, a) = x.expect_pair();
            crate::steps::run_loop(
                |s| f(&Value::pair(g.clone(), s)),
                a.clone(),
                Span::default(),
            )
        })
    }

    fn iter_tape(
        &self,
        f: Fun,
        _: &Type,
        _: &Type,
        _: &Type,
        _: &Type,
    ) -> std::result::Result<Fun, Infallible> {
        fun(move |x| {
            let (g, a) = x.expect_pair();
            crate::steps::run_loop_tape(
                |s| f(&Value::pair(g.clone(), s)),
                a.clone(),
                Span::default(),
            )
        })
    }

    fn fix(&self, h: Fun, _: &Type, _: &Type, at: Span) -> std::result::Result<Fun, Infallible> {
        // fix(h)(z) = h(g, z) with g the closed function value of fix(h) itself.
        fun(move |z| run_fix(&h, at, z.clone()))
    }
}

/// One call of `fix(h)` at `z` (counted against the depth limit at `at`).
fn run_fix(h: &Fun, at: Span, z: Value) -> Result<Value> {
    crate::steps::recursive_call(at, || {
        let me = Value::Closure(Rc::new(FixFun { h: h.clone(), at }));
        h(&Value::pair(me, z))
    })
}

/// The function value of `fix(h)`: calling it is one call of `fix(h)`.
struct FixFun {
    h: Fun,
    at: Span,
}

impl Closure for FixFun {
    fn apply(&self, arg: Value) -> Result<Value> {
        run_fix(&self.h, self.at, arg)
    }
}

impl Primitives for Eval {
    fn constant(&self, lit: &Lit) -> std::result::Result<Fun, Infallible> {
        let v = lit.value();
        fun(move |_| Ok(v.clone()))
    }

    fn prim(&self, op: &Prim) -> std::result::Result<Fun, Infallible> {
        let op = op.clone();
        fun(move |x| op.eval(x))
    }
}
