//! Primitive operations: the generating morphisms of the free category.
//!
//! A primitive is registered once, as a [`Primitive`]: its name, its curried parameter types and
//! result type (all first-order), how it is written (a named function, an infix operator, a prefix
//! operator, or internal), its evaluation, and its [`Derivative`]. The parser, checker, both
//! evaluators, both AD modes ([`crate::ad`]) and the printers all read the [`Registry`]; nothing
//! else enumerates primitives. In the category, a primitive with parameters `A1, ..., An` and
//! result `B` is a morphism `A1 × (... × An) → B` (right-nested; `1 → B` for no parameters), and
//! its evaluation receives that tuple as one [`Value`].
//!
//! A derivative is given once, for both AD modes (DESIGN.md §5): the forward derivative
//! `Dop(x; d)`, linear in the tangent `d`, and the transposed derivative `DopT(x; v)`, linear in
//! the cotangent `v`. Scalar operations write them as target-language terms (so derivative code
//! prints readably); array kernels may supply native linear maps instead. Primitives whose
//! arguments or result are discrete (no `Real` in them) have derivative zero automatically.
//!
//! ```
//! use chad::prim::{Derivative, Primitive, Registry, op};
//! use chad::target::term::Term;
//! use chad::types::Type;
//! use chad::value::Value;
//! let mut reg = Registry::builtin();
//! // softplus x = log (1 + exp x); its derivative is sigmoid x.
//! let softplus = Primitive::function("softplus", vec![Type::Real], Type::Real, |x| {
//!     Ok(Value::Real(x.expect_real().exp().ln_1p()))
//! })
//! .with_derivative(Derivative::scalar(|x| Term::prim(&op("sigmoid"), vec![x.clone()])));
//! reg.register(softplus).unwrap();
//! assert!(reg.function("softplus").is_some());
//! ```

use crate::error::{Error, ErrorKind, Result};
use crate::target::term::{LTerm, LTermKind, LinPrim, Term, TermKind};
use crate::types::Type;
use crate::value::Value;
use std::collections::HashMap;
use std::fmt;
use std::rc::Rc;

/// How a primitive is written in source and printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fixity {
    /// Called by name, curried: `pow x y`. Can be passed as a value: `map exp xs`.
    Function,
    /// A binary operator with its symbol and precedence (higher binds tighter):
    /// `||` 1, `&&` 2, comparisons 3, `+ -` 4, `* /` 5.
    Infix(&'static str, u8),
    /// A prefix operator (unary minus).
    Prefix(&'static str),
    /// Not writable in source; introduced by elaboration (e.g. `decide` for `if`).
    Internal,
}

/// The evaluation function of a primitive: it receives the argument tuple.
pub type EvalFn = dyn Fn(&Value) -> Result<Value>;

/// A forward derivative written as a term: from the primal arguments (Cartesian terms, one per
/// parameter) and their tangents (linear terms, one per parameter), the result's tangent
/// `Dop(x; d)`, a linear term linear in the tangents.
pub type ForwardRule = dyn Fn(&[Term], &[LTerm]) -> LTerm;

/// A transposed derivative written as a term: from the primal arguments and the result's
/// cotangent `v`, one cotangent per parameter, `DopT(x; v)`, each linear in `v`.
pub type TransposeRule = dyn Fn(&[Term], &LTerm) -> Vec<LTerm>;

/// How a primitive is differentiated (in both modes; DESIGN.md §5).
#[derive(Clone)]
pub enum Derivative {
    /// No derivative registered: differentiating a program that uses the primitive is an error.
    Missing,
    /// The derivative is zero (the arguments or the result are discrete).
    Zero,
    /// `Dop` and `DopT` as target-language linear terms (see [`Derivative::terms`]).
    Terms {
        /// `Dop(x; d)`.
        forward: Rc<ForwardRule>,
        /// `DopT(x; v)`.
        transpose: Rc<TransposeRule>,
    },
    /// `Dop` and `DopT` as native kernels (see [`Derivative::native`]).
    Native {
        /// From the argument tuple `x : A`, the linear map `F2 A ⊸ F2 B`.
        forward: Rc<LinPrim>,
        /// From the argument tuple `x : A`, the linear map `R2 B ⊸ R2 A`.
        transpose: Rc<LinPrim>,
    },
}

impl Derivative {
    /// `Dop` and `DopT` as linear terms. `forward(args, tangents)` returns the result's tangent;
    /// `transpose(args, v)` returns one cotangent per parameter. The terms they receive are
    /// variables, so using one several times costs nothing extra.
    pub fn terms(
        forward: impl Fn(&[Term], &[LTerm]) -> LTerm + 'static,
        transpose: impl Fn(&[Term], &LTerm) -> Vec<LTerm> + 'static,
    ) -> Derivative {
        Derivative::Terms {
            forward: Rc::new(forward),
            transpose: Rc::new(transpose),
        }
    }

    /// Native kernels: `forward` makes `F2 A ⊸ F2 B` and `transpose` makes `R2 B ⊸ R2 A` from
    /// the argument tuple `x : A` (for first-order types, `F2 = R2`: `Real` for `Real`, `Unit`
    /// for discrete types, componentwise otherwise). Registration checks the kernels' types.
    pub fn native(forward: Rc<LinPrim>, transpose: Rc<LinPrim>) -> Derivative {
        Derivative::Native { forward, transpose }
    }

    /// The derivative of a function `Real → Real` from its derivative `f'(x)`, given as a
    /// Cartesian term in the argument: `Dop(x; d) = f'(x) * d`, `DopT(x; v) = f'(x) * v`.
    pub fn scalar(df: impl Fn(&Term) -> Term + 'static) -> Derivative {
        let df = Rc::new(df);
        let df2 = df.clone();
        Derivative::terms(
            move |x, d| LTerm::scale(df(&x[0]), d[0].clone()),
            move |x, v| vec![LTerm::scale(df2(&x[0]), v.clone())],
        )
    }

    /// The derivative of a function `Real × Real → Real` from its partial derivatives `(∂f/∂a,
    /// ∂f/∂b)`, given as Cartesian terms in the arguments: `Dop((a, b); (da, db)) = ∂a * da +
    /// ∂b * db` and `DopT((a, b); v) = (∂a * v, ∂b * v)`.
    pub fn scalar2(df: impl Fn(&Term, &Term) -> (Term, Term) + 'static) -> Derivative {
        let df = Rc::new(df);
        let df2 = df.clone();
        Derivative::terms(
            move |x, d| {
                let (da, db) = df(&x[0], &x[1]);
                LTerm::plus(
                    LTerm::scale(da, d[0].clone()),
                    LTerm::scale(db, d[1].clone()),
                )
            },
            move |x, v| {
                let (da, db) = df2(&x[0], &x[1]);
                vec![LTerm::scale(da, v.clone()), LTerm::scale(db, v.clone())]
            },
        )
    }
}

impl fmt::Debug for Derivative {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Derivative::Missing => "Missing",
            Derivative::Zero => "Zero",
            Derivative::Terms { .. } => "Terms",
            Derivative::Native { .. } => "Native",
        })
    }
}

/// True if a (first-order) type has a `Real` in it, i.e. a non-trivial tangent.
fn has_reals(t: &Type) -> bool {
    crate::deep::deep(|| match t {
        Type::Real => true,
        Type::Int | Type::Bool | Type::Unit => false,
        Type::Prod(p) | Type::Sum(p) | Type::Fun(p) => has_reals(&p.0) || has_reals(&p.1),
        Type::Array(a) => has_reals(a),
    })
}

/// One primitive operation.
pub struct Primitive {
    name: String,
    params: Vec<Type>,
    result: Type,
    fixity: Fixity,
    eval: Box<EvalFn>,
    scalar: Option<Scalar>,
    derivative: Derivative,
    total: bool,
    rust: Option<String>,
}

/// A scalar primitive's evaluation on unboxed operands, which a compiling evaluator
/// ([`crate::target::engine`]) calls without building the argument tuple. It must agree with the
/// primitive's evaluation wherever that succeeds; `Int2` returns `None` where it fails (the
/// evaluation then gives the error).
#[derive(Clone, Copy, Debug)]
pub enum Scalar {
    /// `Real → Real`.
    Real1(fn(f64) -> f64),
    /// `Real × Real → Real`.
    Real2(fn(f64, f64) -> f64),
    /// `Real × Real → Bool`.
    RealCmp(fn(&f64, &f64) -> bool),
    /// `Int × Int → Int`, `None` on failure (overflow, division by zero).
    Int2(fn(i64, i64) -> Option<i64>),
    /// `Int × Int → Bool`.
    IntCmp(fn(&i64, &i64) -> bool),
}

/// A shared handle to a registered primitive.
pub type Prim = Rc<Primitive>;

impl Primitive {
    /// A primitive with full control over its fixity.
    pub fn new(
        name: impl Into<String>,
        params: Vec<Type>,
        result: Type,
        fixity: Fixity,
        eval: impl Fn(&Value) -> Result<Value> + 'static,
    ) -> Primitive {
        // Discrete arguments or a discrete result: the derivative is zero. Otherwise a
        // derivative must be given with `with_derivative` before AD can use the primitive.
        let derivative = if !params.iter().any(has_reals) || !has_reals(&result) {
            Derivative::Zero
        } else {
            Derivative::Missing
        };
        Primitive {
            name: name.into(),
            params,
            result,
            fixity,
            eval: Box::new(eval),
            scalar: None,
            derivative,
            total: false,
            rust: None,
        }
    }

    /// Declares the primitive's implementation in Rust for the native backend: an expression
    /// of type `f64`, `i64` or `bool` (the result's Rust type; see `chad::ir::rust`) in which
    /// `{0}`, `{1}`, ... stand for the arguments, e.g. `"{0}.exp().ln_1p()"` for `softplus`.
    /// It must compute what the evaluation computes and cannot fail. A program using a
    /// primitive without one runs everywhere but natively.
    pub fn with_rust(mut self, template: impl Into<String>) -> Primitive {
        self.rust = Some(template.into());
        self
    }

    /// The Rust implementation, if declared (see [`Primitive::with_rust`]).
    pub fn rust(&self) -> Option<&str> {
        self.rust.as_deref()
    }

    /// Declares the primitive's evaluation on unboxed operands (see [`Scalar`]). A scalar
    /// primitive other than [`Scalar::Int2`] is total (see [`Primitive::total`]).
    pub fn with_scalar(mut self, s: Scalar) -> Primitive {
        self.scalar = Some(s);
        self.total |= !matches!(s, Scalar::Int2(_));
        self
    }

    /// Declares that the evaluation never fails (on arguments of the right types). The
    /// simplifier may then drop an unused application; it keeps one that may fail, so that a
    /// program fails in every mode exactly where the evaluator says (theory-notes/09).
    /// Primitives are assumed partial unless declared total.
    pub fn total(mut self) -> Primitive {
        self.total = true;
        self
    }

    /// Whether the evaluation never fails ([`Primitive::total`]).
    pub fn is_total(&self) -> bool {
        self.total
    }

    /// The evaluation on unboxed operands, if declared.
    pub fn scalar(&self) -> Option<Scalar> {
        self.scalar
    }

    /// The same primitive with the given derivative.
    pub fn with_derivative(mut self, d: Derivative) -> Primitive {
        self.derivative = d;
        self
    }

    /// How AD differentiates it.
    pub fn derivative(&self) -> &Derivative {
        &self.derivative
    }

    /// A primitive called by name, like `sin x` or `pow x y`.
    pub fn function(
        name: impl Into<String>,
        params: Vec<Type>,
        result: Type,
        eval: impl Fn(&Value) -> Result<Value> + 'static,
    ) -> Primitive {
        Primitive::new(name, params, result, Fixity::Function, eval)
    }

    /// The name (for operators, an internal name such as `add`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The curried parameter types.
    pub fn params(&self) -> &[Type] {
        &self.params
    }

    /// The result type.
    pub fn result(&self) -> &Type {
        &self.result
    }

    /// How it is written.
    pub fn fixity(&self) -> Fixity {
        self.fixity
    }

    /// The domain as an object of the category: the right-nested tuple of the parameters.
    pub fn domain(&self) -> Type {
        Type::tuple(&self.params)
    }

    /// Evaluates on the argument tuple.
    pub fn eval(&self, arg: &Value) -> Result<Value> {
        (self.eval)(arg)
    }

    /// Evaluates on the arguments given separately.
    pub fn eval_args(&self, args: Vec<Value>) -> Result<Value> {
        self.eval(&Value::tuple(args))
    }
}

impl fmt::Debug for Primitive {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} : {}",
            self.name,
            Type::curried(&self.params, self.result.clone())
        )
    }
}

/// Words the language reserves: keywords and the polymorphic builtins, which are elaborated by
/// the checker rather than registered (their types are not fixed).
pub const RESERVED: &[&str] = &[
    "def",
    "let",
    "in",
    "if",
    "then",
    "else",
    "case",
    "of",
    "true",
    "false",
    "fst",
    "snd",
    "inl",
    "inr",
    "map",
    "map2",
    "build",
    "length",
    "replicate",
];

/// The set of primitives known to a program.
#[derive(Clone)]
pub struct Registry {
    prims: Vec<Prim>,
    by_name: HashMap<String, Prim>,
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.prims.iter()).finish()
    }
}

impl Default for Registry {
    fn default() -> Self {
        Registry::builtin()
    }
}

impl Registry {
    /// A registry with no primitives at all.
    pub fn empty() -> Registry {
        Registry {
            prims: Vec::new(),
            by_name: HashMap::new(),
        }
    }

    /// Adds a primitive. Fails if the name is taken or reserved, or if a parameter or the result
    /// is not first-order.
    pub fn register(&mut self, p: Primitive) -> Result<Prim> {
        let err = |m: String| Error::new(ErrorKind::Input, m);
        if self.by_name.contains_key(&p.name) {
            return Err(err(format!("primitive `{}` is already registered", p.name)));
        }
        if RESERVED.contains(&p.name.as_str()) {
            return Err(err(format!("`{}` is a reserved word", p.name)));
        }
        if !p.params.iter().all(Type::is_first_order) || !p.result.is_first_order() {
            return Err(err(format!(
                "primitive `{}` must have first-order parameter and result types",
                p.name
            )));
        }
        if let Derivative::Native { forward, transpose } = &p.derivative {
            crate::ad::check_kernels(&p, forward, transpose).map_err(err)?;
        }
        let p = Rc::new(p);
        self.by_name.insert(p.name.clone(), p.clone());
        self.prims.push(p.clone());
        Ok(p)
    }

    /// Every primitive, in registration order.
    pub fn all(&self) -> &[Prim] {
        &self.prims
    }

    /// A primitive callable by name from source (fixity [`Fixity::Function`]).
    pub fn function(&self, name: &str) -> Option<&Prim> {
        self.by_name
            .get(name)
            .filter(|p| p.fixity == Fixity::Function)
    }

    /// Any primitive by its (internal) name.
    pub fn get(&self, name: &str) -> Option<&Prim> {
        self.by_name.get(name)
    }

    /// The built-in primitives of LANGUAGE.md (shared handles: the same `Rc`s every time on a
    /// given thread).
    pub fn builtin() -> Registry {
        BUILTINS.with(|r| r.clone())
    }
}

thread_local! {
    static BUILTINS: Registry = {
        let mut r = Registry::empty();
        for p in builtins() {
            r.register(p).expect("builtin primitives are distinct");
        }
        r
    };
}

/// A built-in primitive by its internal name (`add`, `iadd`, `decide`, `sin`, ...). The checker
/// and compiler use these whatever registry a program was checked against. Panics on an unknown
/// name: callers name builtins.
pub fn op(name: &str) -> Prim {
    BUILTINS.with(|r| {
        r.get(name)
            .cloned()
            .unwrap_or_else(|| panic!("internal error: no builtin primitive `{name}`"))
    })
}

/// `name t1 ... tn` with a builtin primitive (for writing derivative rules).
fn call(name: &str, args: &[&Term]) -> Term {
    Term::prim(&op(name), args.iter().map(|t| (*t).clone()).collect())
}

/// A real literal term.
fn lit(x: f64) -> Term {
    Term::real(x)
}

/// `if c then a else b`.
fn cond(c: Term, a: Term, b: Term) -> Term {
    Term::mk(TermKind::If(c, a, b))
}

/// A function `Real → Real` with its derivative `f'(x)` as a term.
fn real1(name: &str, f: fn(f64) -> f64, df: fn(&Term) -> Term) -> Primitive {
    Primitive::function(name, vec![Type::Real], Type::Real, move |x| {
        Ok(Value::Real(f(x.expect_real())))
    })
    .with_scalar(Scalar::Real1(f))
    .with_derivative(Derivative::scalar(df))
}

/// A function `Real × Real → Real` with its partial derivatives as terms.
fn real2(
    name: &str,
    fixity: Fixity,
    f: fn(f64, f64) -> f64,
    df: fn(&Term, &Term) -> (Term, Term),
) -> Primitive {
    real2_with(name, fixity, f, Derivative::scalar2(df))
}

fn real2_with(name: &str, fixity: Fixity, f: fn(f64, f64) -> f64, d: Derivative) -> Primitive {
    Primitive::new(
        name,
        vec![Type::Real, Type::Real],
        Type::Real,
        fixity,
        move |x| {
            let (a, b) = x.expect_pair();
            Ok(Value::Real(f(a.expect_real(), b.expect_real())))
        },
    )
    .with_scalar(Scalar::Real2(f))
    .with_derivative(d)
}

/// The selector of `max`/`min`: 1 where the first argument is returned (`cmp a b`, or `b` is
/// NaN), else 0. The derivative follows the branch the value takes.
fn select_first(cmp: &str, a: &Term, b: &Term) -> Term {
    cond(
        call(cmp, &[a, b]),
        lit(1.0),
        cond(call("ne", &[b, b]), lit(1.0), lit(0.0)),
    )
}

/// `-1 * l`.
fn negate(l: &LTerm) -> LTerm {
    LTerm::scale(lit(-1.0), l.clone())
}

fn int2(name: &str, sym: &'static str, prec: u8, f: fn(i64, i64) -> Option<i64>) -> Primitive {
    Primitive::new(
        name,
        vec![Type::Int, Type::Int],
        Type::Int,
        Fixity::Infix(sym, prec),
        move |x| {
            let (a, b) = x.expect_pair();
            let (a, b) = (a.expect_int(), b.expect_int());
            f(a, b).map(Value::Int).ok_or_else(|| {
                if sym == "/" && b == 0 {
                    Error::runtime(format!("integer division by zero ({a} / 0)"))
                } else {
                    Error::runtime(format!("integer overflow in {a} {sym} {b}"))
                }
            })
        },
    )
    .with_scalar(Scalar::Int2(f))
}

fn compare<T: 'static>(
    name: &str,
    ty: Type,
    sym: &'static str,
    get: fn(&Value) -> T,
    f: fn(&T, &T) -> bool,
) -> Primitive {
    Primitive::new(
        name,
        vec![ty.clone(), ty],
        Type::Bool,
        Fixity::Infix(sym, 3),
        move |x| {
            let (a, b) = x.expect_pair();
            Ok(Value::Bool(f(&get(a), &get(b))))
        },
    )
    .total()
}

/// The numerically stable logistic function.
pub fn sigmoid(x: f64) -> f64 {
    if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        let e = x.exp();
        e / (1.0 + e)
    }
}

fn builtins() -> Vec<Primitive> {
    let real = || Type::Real;
    let arr = || Type::array(Type::Real);
    let mut v = vec![
        real1("sin", f64::sin, |x| call("cos", &[x])),
        real1("cos", f64::cos, |x| call("neg", &[&call("sin", &[x])])),
        real1("tan", f64::tan, |x| {
            let t = call("tan", &[x]);
            call("add", &[&lit(1.0), &call("mul", &[&t, &t])])
        }),
        real1("exp", f64::exp, |x| call("exp", &[x])),
        real1("log", f64::ln, |x| call("div", &[&lit(1.0), x])),
        real1("sqrt", f64::sqrt, |x| {
            call("div", &[&lit(0.5), &call("sqrt", &[x])])
        }),
        real1("tanh", f64::tanh, |x| {
            let t = call("tanh", &[x]);
            call("sub", &[&lit(1.0), &call("mul", &[&t, &t])])
        }),
        real1("sigmoid", sigmoid, |x| {
            let s = call("sigmoid", &[x]);
            call("mul", &[&s, &call("sub", &[&lit(1.0), &s])])
        }),
        // abs'(0) = 1: the right derivative.
        real1("abs", f64::abs, |x| {
            cond(call("ge", &[x, &lit(0.0)]), lit(1.0), lit(-1.0))
        }),
        // ∂/∂x (x^y) = y x^(y-1), exactly 0 for y = 0 (x^0 = 1 for every x, even where
        // x^(-1) is infinite). ∂/∂y (x^y) = x^y log x is taken as 0 where x <= 0 (there x^y is
        // only defined for integer y, as a function of y it is not differentiable).
        real2("pow", Fixity::Function, f64::powf, |x, y| {
            let dx = cond(
                call("eq", &[y, &lit(0.0)]),
                lit(0.0),
                call(
                    "mul",
                    &[y, &call("pow", &[x, &call("sub", &[y, &lit(1.0)])])],
                ),
            );
            let dy = cond(
                call("gt", &[x, &lit(0.0)]),
                call("mul", &[&call("pow", &[x, y]), &call("log", &[x])]),
                lit(0.0),
            );
            (dx, dy)
        }),
        // Ties and NaN go to the first argument: `max x y` is `if x >= y then x else y`
        // with NaN treated as "not smaller". The derivative follows the same branch.
        real2(
            "max",
            Fixity::Function,
            |a, b| if a >= b || b.is_nan() { a } else { b },
            |a, b| {
                let s = select_first("ge", a, b);
                (s.clone(), call("sub", &[&lit(1.0), &s]))
            },
        ),
        real2(
            "min",
            Fixity::Function,
            |a, b| if a <= b || b.is_nan() { a } else { b },
            |a, b| {
                let s = select_first("le", a, b);
                (s.clone(), call("sub", &[&lit(1.0), &s]))
            },
        ),
        Primitive::function("toReal", vec![Type::Int], real(), |x| {
            Ok(Value::Real(x.expect_int() as f64))
        })
        .total(),
        Primitive::function("floor", vec![real()], Type::Int, |x| {
            let f = x.expect_real().floor();
            // i64 range is [-2^63, 2^63); the upper bound is exactly representable.
            if !(-9.223_372_036_854_776e18..9.223_372_036_854_776e18).contains(&f) {
                Err(Error::runtime(format!(
                    "floor: {} is not in the range of Int",
                    crate::value::format_real(x.expect_real())
                )))
            } else {
                Ok(Value::Int(f as i64))
            }
        }),
        Primitive::function("sum", vec![arr()], real(), |x| {
            // The fixed summation order (from +0.0: std's `Sum` for f64 starts from -0.0).
            Ok(Value::Real(crate::value::sum_reals(
                x.expect_reals().iter().copied(),
            )))
        })
        .total()
        .with_derivative(Derivative::terms(
            |_, d| LTerm::mk(LTermKind::Sum(d[0].clone())),
            |x, v| {
                let n = Term::mk(TermKind::Length(x[0].clone()));
                vec![LTerm::mk(LTermKind::Replicate(n, v.clone()))]
            },
        )),
        Primitive::function("dot", vec![arr(), arr()], real(), |x| {
            let (a, b) = x.expect_pair();
            let (a, b) = (a.expect_reals(), b.expect_reals());
            if a.len() != b.len() {
                return Err(Error::runtime(format!(
                    "dot: arrays have different lengths ({} and {})",
                    a.len(),
                    b.len()
                )));
            }
            Ok(Value::Real(crate::value::sum_reals(
                a.iter().zip(b).map(|(x, y)| x * y),
            )))
        })
        .with_derivative(Derivative::terms(
            |x, d| {
                let with = |ys: &Term, dxs: &LTerm| {
                    let f = Term::mk(TermKind::LinPrim(LinPrim::dot_with(), ys.clone()));
                    LTerm::app(f, dxs.clone())
                };
                LTerm::plus(with(&x[1], &d[0]), with(&x[0], &d[1]))
            },
            |x, v| {
                let scaled = |ys: &Term| {
                    let f = Term::mk(TermKind::LinPrim(LinPrim::scale_array(), ys.clone()));
                    LTerm::app(f, v.clone())
                };
                vec![scaled(&x[1]), scaled(&x[0])]
            },
        )),
        Primitive::function("not", vec![Type::Bool], Type::Bool, |x| {
            Ok(Value::Bool(!x.expect_bool()))
        })
        .total(),
        real2_with(
            "add",
            Fixity::Infix("+", 4),
            |a, b| a + b,
            Derivative::terms(
                |_, d| LTerm::plus(d[0].clone(), d[1].clone()),
                |_, v| vec![v.clone(), v.clone()],
            ),
        ),
        real2_with(
            "sub",
            Fixity::Infix("-", 4),
            |a, b| a - b,
            Derivative::terms(
                |_, d| LTerm::plus(d[0].clone(), negate(&d[1])),
                |_, v| vec![v.clone(), negate(v)],
            ),
        ),
        real2(
            "mul",
            Fixity::Infix("*", 5),
            |a, b| a * b,
            |a, b| (b.clone(), a.clone()),
        ),
        real2(
            "div",
            Fixity::Infix("/", 5),
            |a, b| a / b,
            |a, b| {
                let inv = call("div", &[&lit(1.0), b]);
                let db = call("neg", &[&call("div", &[&call("div", &[a, b]), b])]);
                (inv, db)
            },
        ),
        Primitive::new("neg", vec![real()], real(), Fixity::Prefix("-"), |x| {
            Ok(Value::Real(-x.expect_real()))
        })
        .with_scalar(Scalar::Real1(|x| -x))
        .with_derivative(Derivative::terms(
            |_, d| negate(&d[0]),
            |_, v| vec![negate(v)],
        )),
        int2("iadd", "+", 4, i64::checked_add),
        int2("isub", "-", 4, i64::checked_sub),
        int2("imul", "*", 5, i64::checked_mul),
        int2("idiv", "/", 5, i64::checked_div),
        Primitive::new(
            "ineg",
            vec![Type::Int],
            Type::Int,
            Fixity::Prefix("-"),
            |x| {
                let i = x.expect_int();
                i.checked_neg()
                    .map(Value::Int)
                    .ok_or_else(|| Error::runtime(format!("integer overflow in -({i})")))
            },
        ),
        // `decide : Bool → 1 + 1` turns a condition into a coproduct so that `if` is `copair`:
        // true ↦ inl (), false ↦ inr ().
        Primitive::new(
            "decide",
            vec![Type::Bool],
            Type::sum(Type::Unit, Type::Unit),
            Fixity::Internal,
            |x| {
                Ok(if x.expect_bool() {
                    Value::inl(Value::Unit)
                } else {
                    Value::inr(Value::Unit)
                })
            },
        )
        .total(),
    ];
    type Cmp = (
        &'static str,
        &'static str,
        fn(&f64, &f64) -> bool,
        fn(&i64, &i64) -> bool,
    );
    let cmp: [Cmp; 6] = [
        ("lt", "<", f64::lt, i64::lt),
        ("le", "<=", f64::le, i64::le),
        ("gt", ">", f64::gt, i64::gt),
        ("ge", ">=", f64::ge, i64::ge),
        ("eq", "==", f64::eq, i64::eq),
        ("ne", "!=", f64::ne, i64::ne),
    ];
    for (name, sym, fr, fi) in cmp {
        v.push(compare(name, real(), sym, Value::expect_real, fr).with_scalar(Scalar::RealCmp(fr)));
        v.push(
            compare(&format!("i{name}"), Type::Int, sym, Value::expect_int, fi)
                .with_scalar(Scalar::IntCmp(fi)),
        );
    }
    v.push(compare(
        "beq",
        Type::Bool,
        "==",
        Value::expect_bool,
        bool::eq,
    ));
    v.push(compare(
        "bne",
        Type::Bool,
        "!=",
        Value::expect_bool,
        bool::ne,
    ));
    v
}

/// The internal names of the primitives an operator symbol denotes, per operand type:
/// `(Real version, Int version, Bool version)`.
pub fn operator_prims(
    symbol: &str,
) -> Option<(
    Option<&'static str>,
    Option<&'static str>,
    Option<&'static str>,
)> {
    Some(match symbol {
        "+" => (Some("add"), Some("iadd"), None),
        "-" => (Some("sub"), Some("isub"), None),
        "*" => (Some("mul"), Some("imul"), None),
        "/" => (Some("div"), Some("idiv"), None),
        "<" => (Some("lt"), Some("ilt"), None),
        "<=" => (Some("le"), Some("ile"), None),
        ">" => (Some("gt"), Some("igt"), None),
        ">=" => (Some("ge"), Some("ige"), None),
        "==" => (Some("eq"), Some("ieq"), Some("beq")),
        "!=" => (Some("ne"), Some("ine"), Some("bne")),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(reg: &Registry, name: &str, args: Vec<Value>) -> Result<Value> {
        reg.get(name).unwrap().eval_args(args)
    }

    fn real(reg: &Registry, name: &str, args: &[f64]) -> f64 {
        run(reg, name, args.iter().map(|&x| Value::Real(x)).collect())
            .unwrap()
            .expect_real()
    }

    #[test]
    fn real_builtins_against_hand_computed_values() {
        let r = Registry::builtin();
        assert_eq!(real(&r, "sin", &[0.0]), 0.0);
        assert_eq!(real(&r, "cos", &[0.0]), 1.0);
        assert!((real(&r, "tan", &[std::f64::consts::FRAC_PI_4]) - 1.0).abs() < 1e-15);
        assert_eq!(real(&r, "exp", &[0.0]), 1.0);
        assert_eq!(real(&r, "log", &[1.0]), 0.0);
        assert_eq!(real(&r, "sqrt", &[9.0]), 3.0);
        assert_eq!(real(&r, "tanh", &[0.0]), 0.0);
        assert_eq!(real(&r, "sigmoid", &[0.0]), 0.5);
        assert!((real(&r, "sigmoid", &[-800.0])).abs() < 1e-300);
        assert_eq!(real(&r, "sigmoid", &[800.0]), 1.0);
        assert_eq!(real(&r, "abs", &[-2.5]), 2.5);
        assert_eq!(real(&r, "pow", &[2.0, 10.0]), 1024.0);
        assert_eq!(real(&r, "max", &[1.0, 2.0]), 2.0);
        assert_eq!(real(&r, "min", &[1.0, 2.0]), 1.0);
        assert_eq!(real(&r, "add", &[1.5, 2.0]), 3.5);
        assert_eq!(real(&r, "sub", &[1.5, 2.0]), -0.5);
        assert_eq!(real(&r, "mul", &[1.5, 2.0]), 3.0);
        assert_eq!(real(&r, "div", &[1.0, 4.0]), 0.25);
        assert_eq!(real(&r, "div", &[1.0, 0.0]), f64::INFINITY);
        assert_eq!(real(&r, "neg", &[3.0]), -3.0);
    }

    #[test]
    fn int_and_bool_builtins() {
        let r = Registry::builtin();
        let i = |n| Value::Int(n);
        assert_eq!(run(&r, "iadd", vec![i(2), i(3)]).unwrap().expect_int(), 5);
        assert_eq!(run(&r, "isub", vec![i(2), i(3)]).unwrap().expect_int(), -1);
        assert_eq!(run(&r, "imul", vec![i(-2), i(3)]).unwrap().expect_int(), -6);
        assert_eq!(run(&r, "idiv", vec![i(7), i(2)]).unwrap().expect_int(), 3);
        assert_eq!(run(&r, "idiv", vec![i(-7), i(2)]).unwrap().expect_int(), -3);
        assert_eq!(run(&r, "ineg", vec![i(4)]).unwrap().expect_int(), -4);
        let e = run(&r, "idiv", vec![i(1), i(0)]).unwrap_err();
        assert_eq!(e.message(), "integer division by zero (1 / 0)");
        let e = run(&r, "iadd", vec![i(i64::MAX), i(1)]).unwrap_err();
        assert!(e.message().contains("integer overflow"), "{}", e.message());
        assert!(run(&r, "idiv", vec![i(i64::MIN), i(-1)]).is_err());
        assert!(run(&r, "ineg", vec![i(i64::MIN)]).is_err());
        assert_eq!(run(&r, "toReal", vec![i(3)]).unwrap().expect_real(), 3.0);
        assert_eq!(
            run(&r, "floor", vec![Value::Real(-1.5)])
                .unwrap()
                .expect_int(),
            -2
        );
        assert!(run(&r, "floor", vec![Value::Real(f64::NAN)]).is_err());
        assert!(run(&r, "floor", vec![Value::Real(1e19)]).is_err());
        let b = Value::Bool;
        assert!(!run(&r, "not", vec![b(true)]).unwrap().expect_bool());
        assert!(
            run(&r, "beq", vec![b(true), b(true)])
                .unwrap()
                .expect_bool()
        );
        assert!(
            run(&r, "bne", vec![b(true), b(false)])
                .unwrap()
                .expect_bool()
        );
        assert!(run(&r, "ilt", vec![i(1), i(2)]).unwrap().expect_bool());
        assert!(!run(&r, "ige", vec![i(1), i(2)]).unwrap().expect_bool());
        assert!(
            run(&r, "le", vec![Value::Real(2.0), Value::Real(2.0)])
                .unwrap()
                .expect_bool()
        );
        assert!(
            !run(&r, "eq", vec![Value::Real(f64::NAN), Value::Real(f64::NAN)])
                .unwrap()
                .expect_bool()
        );
        let d = run(&r, "decide", vec![b(false)]).unwrap();
        assert!(matches!(d, Value::Inr(_)));
    }

    #[test]
    fn array_kernels() {
        let r = Registry::builtin();
        let xs = Value::reals(vec![1.0, 2.0, 3.0]);
        let ys = Value::reals(vec![4.0, 5.0, 6.0]);
        assert_eq!(run(&r, "sum", vec![xs.clone()]).unwrap().expect_real(), 6.0);
        assert_eq!(
            run(&r, "dot", vec![xs.clone(), ys]).unwrap().expect_real(),
            32.0
        );
        let e = run(&r, "dot", vec![xs, Value::reals(vec![1.0])]).unwrap_err();
        assert_eq!(e.message(), "dot: arrays have different lengths (3 and 1)");
        // Empty sums are +0.0 (printed `0.0`), not -0.0.
        let empty = Value::reals(vec![]);
        let s = run(&r, "sum", vec![empty.clone()]).unwrap().expect_real();
        assert!(s == 0.0 && s.is_sign_positive());
        let d = run(&r, "dot", vec![empty.clone(), empty])
            .unwrap()
            .expect_real();
        assert!(d == 0.0 && d.is_sign_positive());
    }

    /// Every builtin's unboxed form agrees with its evaluation, errors included.
    #[test]
    fn scalar_forms_agree_with_evaluation() {
        let r = Registry::builtin();
        let reals = [
            -2.5,
            -1.0,
            -0.0,
            0.0,
            0.5,
            1.0,
            3.0,
            f64::INFINITY,
            f64::NAN,
        ];
        let ints = [i64::MIN, -7, -1, 0, 1, 2, 7, i64::MAX];
        let same = |a: &Value, b: &Value| a.same(b) == Some(true);
        let mut checked = 0;
        for p in r.all() {
            let name = p.name();
            let Some(s) = p.scalar() else { continue };
            checked += 1;
            match s {
                Scalar::Real1(f) => {
                    for &x in &reals {
                        let v = p.eval_args(vec![Value::Real(x)]).unwrap();
                        assert!(same(&v, &Value::Real(f(x))), "{name} {x}");
                    }
                }
                Scalar::Real2(f) => {
                    for &x in &reals {
                        for &y in &reals {
                            let v = p.eval_args(vec![Value::Real(x), Value::Real(y)]).unwrap();
                            assert!(same(&v, &Value::Real(f(x, y))), "{name} {x} {y}");
                        }
                    }
                }
                Scalar::RealCmp(f) => {
                    for &x in &reals {
                        for &y in &reals {
                            let v = p.eval_args(vec![Value::Real(x), Value::Real(y)]).unwrap();
                            assert_eq!(v.expect_bool(), f(&x, &y), "{name} {x} {y}");
                        }
                    }
                }
                Scalar::Int2(f) => {
                    for &x in &ints {
                        for &y in &ints {
                            let v = p.eval_args(vec![Value::Int(x), Value::Int(y)]);
                            match f(x, y) {
                                Some(z) => assert_eq!(v.unwrap().expect_int(), z, "{name}"),
                                None => assert!(v.is_err(), "{name} {x} {y}"),
                            }
                        }
                    }
                }
                Scalar::IntCmp(f) => {
                    for &x in &ints {
                        for &y in &ints {
                            let v = p.eval_args(vec![Value::Int(x), Value::Int(y)]).unwrap();
                            assert_eq!(v.expect_bool(), f(&x, &y), "{name} {x} {y}");
                        }
                    }
                }
            }
        }
        assert!(checked >= 30, "only {checked} scalar forms");
    }

    #[test]
    fn registration_rejects_duplicates_reserved_and_higher_order() {
        let mut r = Registry::builtin();
        let id = |_: &Value| Ok(Value::Unit);
        assert!(
            r.register(Primitive::function("sin", vec![], Type::Unit, id))
                .is_err()
        );
        assert!(
            r.register(Primitive::function("map", vec![], Type::Unit, id))
                .is_err()
        );
        let f = Type::fun(Type::Real, Type::Real);
        assert!(
            r.register(Primitive::function("h", vec![f], Type::Unit, id))
                .is_err()
        );
        assert!(
            r.register(Primitive::function("h", vec![], Type::Unit, id))
                .is_ok()
        );
    }
}
