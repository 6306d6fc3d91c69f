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
//! prints readably); array kernels may supply native linear maps instead. The forward
//! derivative alone is enough ([`Derivative::jvp`]): the transposed one is then derived by
//! transposition ([`crate::target::transpose`]), and the rule may call the primitive itself and
//! reuse its primal result. Registration makes both AD images of a primitive and type-checks
//! them, so a wrong rule is an error there. Primitives whose arguments or result are discrete
//! (no `Real` in them) have derivative zero automatically.
//!
//! ```
//! use chad::internals::prim::{Derivative, Primitive, Registry, op};
//! use chad::internals::target::term::Term;
//! use chad::internals::types::Type;
//! use chad::Value;
//! let mut reg = Registry::builtin();
//! // logcosh x = log (cosh x); its derivative is tanh x.
//! let logcosh = Primitive::function("logcosh", vec![Type::Real], Type::Real, |x| {
//!     Ok(Value::Real(x.expect_real().cosh().ln()))
//! })
//! .with_derivative(Derivative::scalar(|x| Term::prim(&op("tanh"), vec![x.clone()])));
//! reg.register(logcosh).unwrap();
//! assert!(reg.function("logcosh").is_some());
//! ```

use crate::error::{Error, ErrorKind, Result};
use crate::target::term::{LTerm, LTermKind, LinPrim, Term, TermKind};
use crate::types::Type;
use crate::value::Value;
use std::collections::HashMap;
use std::fmt;
use std::rc::Rc;

#[path = "prim/elementary.rs"]
pub mod elementary;
pub use elementary::{cos, exp, sigmoid, sin, tanh};

/// How a primitive is written in source and printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fixity {
    /// Called by name, curried: `pow x y`. Can be passed as a value: `map exp xs`.
    Function,
    /// A binary operator with its symbol and precedence (higher binds tighter):
    /// `||` 1, `&&` 2, comparisons 3, `+ -` 4, `* / %` 5. Left-associative.
    Infix(&'static str, u8),
    /// A right-associative binary operator with its symbol and precedence: `^` 6 (that of
    /// unary minus, so `-x ^ 2` is `-(x ^ 2)` and `x ^ -1` is `x ^ (-1)`).
    InfixRight(&'static str, u8),
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

/// A forward derivative given alone ([`Derivative::jvp`]): the result's tangent from
/// [`JvpArgs`], linear in the tangents. The transposed derivative is derived from it.
pub type JvpRule = dyn Fn(&JvpArgs<'_>) -> LTerm;

/// What a [`JvpRule`] receives. The terms are variables, so using one several times costs
/// nothing extra.
pub struct JvpArgs<'a> {
    /// The primitive itself, so that its derivative may call it (`Term::prim(a.this, ..)`).
    pub this: &'a Prim,
    /// The primal arguments, one per parameter.
    pub args: &'a [Term],
    /// The primal result (computed once, for the program and the derivative).
    pub result: &'a Term,
    /// The tangents of the arguments, one per parameter.
    pub tangents: &'a [LTerm],
}

/// A transposed derivative given with a [`JvpRule`] ([`Derivative::jvp_vjp`]): one cotangent
/// per parameter from [`VjpArgs`], each linear in the result's cotangent.
pub type VjpRule = dyn Fn(&VjpArgs<'_>) -> Vec<LTerm>;

/// What a [`VjpRule`] receives. The terms are variables.
pub struct VjpArgs<'a> {
    /// The primitive itself.
    pub this: &'a Prim,
    /// The primal arguments, one per parameter.
    pub args: &'a [Term],
    /// The primal result (computed once, for the program and the derivative).
    pub result: &'a Term,
    /// The cotangent of the result.
    pub cotangent: &'a LTerm,
}

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
    /// `Dop` alone (see [`Derivative::jvp`]); `DopT` is its transpose
    /// ([`crate::target::transpose`]), made where reverse mode needs it.
    Jvp(Rc<JvpRule>),
    /// `Dop` and `DopT` both given, each receiving the primal result (see
    /// [`Derivative::jvp_vjp`]); how a definition with `with jvp` and `with vjp` clauses is
    /// differentiated.
    JvpVjp {
        /// `Dop`.
        jvp: Rc<JvpRule>,
        /// `DopT`.
        vjp: Rc<VjpRule>,
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

    /// Only the forward derivative `Dop`, which may use the primitive itself
    /// ([`JvpArgs::this`]) and its primal result ([`JvpArgs::result`]); reverse mode transposes
    /// it. Registration checks that both derivatives are well-typed and that `Dop` transposes
    /// (e.g. it must be linear in the tangents). For `hypot a b = sqrt (a² + b²)`:
    ///
    /// ```
    /// use chad::internals::prim::{Derivative, Primitive, Registry};
    /// use chad::internals::target::term::{LTerm, Term};
    /// use chad::internals::types::Type;
    /// use chad::Value;
    /// let hypot = Primitive::function("hypot", vec![Type::Real, Type::Real], Type::Real, |x| {
    ///     let (a, b) = x.expect_pair();
    ///     Ok(Value::Real(a.expect_real().hypot(b.expect_real())))
    /// })
    /// // d hypot = (a da + b db) / hypot a b, reusing the primal result.
    /// .with_derivative(Derivative::jvp(|j| {
    ///     let div = |t: &Term| Term::prim(&chad::internals::prim::op("div"), vec![t.clone(), j.result.clone()]);
    ///     LTerm::plus(
    ///         LTerm::scale(div(&j.args[0]), j.tangents[0].clone()),
    ///         LTerm::scale(div(&j.args[1]), j.tangents[1].clone()),
    ///     )
    /// }));
    /// let hypot = Registry::builtin().register(hypot).unwrap();
    /// chad::internals::ad::check_primitive(&hypot, 20, 1).unwrap();
    /// ```
    pub fn jvp(forward: impl Fn(&JvpArgs<'_>) -> LTerm + 'static) -> Derivative {
        Derivative::Jvp(Rc::new(forward))
    }

    /// `Dop` and `DopT` both as rules that receive the primal result, like [`Derivative::jvp`];
    /// reverse mode uses `vjp` rather than transposing `jvp`. Registration type-checks both;
    /// whether they are transposes of each other is not checked there (`chad check
    /// --derivatives` tests it at random points).
    pub fn jvp_vjp(
        jvp: impl Fn(&JvpArgs<'_>) -> LTerm + 'static,
        vjp: impl Fn(&VjpArgs<'_>) -> Vec<LTerm> + 'static,
    ) -> Derivative {
        Derivative::JvpVjp {
            jvp: Rc::new(jvp),
            vjp: Rc::new(vjp),
        }
    }

    /// Native kernels: `forward` makes `F2 A ⊸ F2 B` and `transpose` makes `R2 B ⊸ R2 A` from
    /// the argument tuple `x : A` (for first-order types, `F2 = R2`: `Real` for `Real`, `Unit`
    /// for discrete types, componentwise otherwise). Registration checks the kernels' types.
    pub fn native(forward: Rc<LinPrim>, transpose: Rc<LinPrim>) -> Derivative {
        LinPrim::pair_transposes(&forward, &transpose);
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
            Derivative::Jvp(_) => "Jvp",
            Derivative::JvpVjp { .. } => "JvpVjp",
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
    /// of type `f64`, `i64` or `bool` (the result's Rust type; see `chad::internals::ir::rust`) in which
    /// `{0}`, `{1}`, ... stand for the arguments, e.g. `"{0}.cosh().ln()"` for `logcosh`.
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

    /// The name as written in source: [`Primitive::name`] without the [`SHADOW_MARK`] of a
    /// primitive that shadows a builtin ([`Registry::shadow`]).
    pub fn source_name(&self) -> &str {
        self.name.strip_suffix(SHADOW_MARK).unwrap_or(&self.name)
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
    "with",
    "fst",
    "snd",
    "inl",
    "inr",
    "map",
    "map2",
    "build",
    "length",
    "replicate",
    // Elaborated by the checker into the forms above (`source::check`'s `sugar`).
    "pi",
    "mean",
    "maximum",
    "minimum",
    "reverse",
    "zip",
    "unzip",
    "slice",
    "concat",
];

/// The mark ending the name of a primitive that shadows a builtin function in a program's
/// registry ([`Registry::shadow`]): `softplus#`. No builtin and no identifier ends in it, so
/// code that recognises builtins by name never mistakes the primitive for the builtin.
pub const SHADOW_MARK: char = '#';

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

    // `Registry::register`, which also checks the primitive's derivative rules against the AD
    // modes, is implemented in `crate::ad::check`: this module does not depend on `ad`.

    /// The checks of [`Registry::register`] that need no AD: fails if the name is taken or
    /// reserved, or if a parameter or the result is not first-order.
    pub(crate) fn validate(&self, p: &Primitive) -> Result<()> {
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
        Ok(())
    }

    /// Adds a validated primitive.
    pub(crate) fn insert(&mut self, p: Prim) {
        self.by_name.insert(p.name.clone(), p.clone());
        self.prims.push(p);
    }

    /// Adds a builtin (validated; the AD images of the builtins' rules call other builtins
    /// while the builtin registry is being built, so `tests/ad.rs` checks them all instead).
    fn add_builtin(&mut self, p: Primitive) -> Result<Prim> {
        self.validate(&p)?;
        let p = Rc::new(p);
        self.insert(p.clone());
        Ok(p)
    }

    /// Makes `p` the function called `source_name` from source (see `Registry::shadow` in
    /// [`crate::ad::check`]).
    pub(crate) fn alias(&mut self, source_name: &str, p: Prim) {
        self.by_name.insert(source_name.to_string(), p);
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
            r.add_builtin(p).expect("builtin primitives are distinct");
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
    let fixity = if sym == "^" {
        Fixity::InfixRight(sym, prec)
    } else {
        Fixity::Infix(sym, prec)
    };
    Primitive::new(
        name,
        vec![Type::Int, Type::Int],
        Type::Int,
        fixity,
        move |x| {
            let (a, b) = x.expect_pair();
            let (a, b) = (a.expect_int(), b.expect_int());
            f(a, b)
                .map(Value::Int)
                .ok_or_else(|| int_failure(sym, a, b))
        },
    )
    .with_scalar(Scalar::Int2(f))
}

/// Why the integer operation `a sym b` failed.
fn int_failure(sym: &str, a: i64, b: i64) -> Error {
    match sym {
        "/" if b == 0 => Error::runtime(format!("integer division by zero ({a} / 0)")),
        "%" if b == 0 => Error::runtime(format!("integer remainder by zero ({a} % 0)")),
        "^" if b < 0 => Error::runtime(format!(
            "negative exponent in {a} ^ ({b}): an Int power needs an exponent >= 0"
        ))
        .with_note("for a Real power, make the base a Real: `toReal n ^ k`"),
        _ => Error::runtime(format!("integer overflow in {a} {sym} {b}")),
    }
}

/// `argmax`/`argmin`'s evaluation: an error on an empty array.
fn arg_extreme(name: &str, f: fn(&[f64]) -> Option<usize>, x: &Value) -> Result<Value> {
    match f(x.expect_reals()) {
        Some(i) => Ok(Value::Int(i as i64)),
        None => Err(Error::runtime(format!("{name} of an empty array"))),
    }
}

/// `1 - x * x`.
fn one_minus_square(x: &Term) -> Term {
    call("sub", &[&lit(1.0), &call("mul", &[x, x])])
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

/// Defines a function and keeps its source text as a constant, so that the native backend
/// ([`crate::ir::rust`]) emits the very code the evaluator runs: the generated Rust computes
/// bit-identical results (see [`rust_helper`]).
macro_rules! shared {
    ($(#[$m:meta])* $src:ident: $vis:vis fn $name:ident ($($a:ident : $t:ty),*) -> $r:ty $body:block) => {
        $(#[$m])*
        $vis fn $name($($a: $t),*) -> $r $body
        const $src: &str = stringify!(fn $name($($a: $t),*) -> $r $body);
    };
}

shared! {
    /// The error function `erf x = 2/√π ∫₀ˣ exp(-t²) dt`, within 3 units in the last place
    /// (1 for `|x| ≥ 0.5`). Rust's `std` has none; this one is chad's own: the Taylor series
    /// about the nearest multiple `c` of 1/4, `erf (c + h) = erf c + 2/√π exp(-c²) Σ_{k≥1}
    /// (-1)^(k-1) H_(k-1)(c) h^k / k!` (Hermite polynomials `H`, `|h| ≤ 1/8`, at most 22 terms),
    /// from a table of `erf c` and `2/√π exp(-c²)` (correctly rounded, computed with 200-bit
    /// arithmetic); `erf x = ±1` for `|x| ≥ 6`, `erf (-x) = -erf x`, `erf NaN = NaN`.
    ERF_SRC: pub fn erf(x: f64) -> f64 {
        const TABLE: [(f64, f64); 25] = [
            (0.0, std::f64::consts::FRAC_2_SQRT_PI),
            (0.27632639016823696, 1.0600141293761143),
            (0.5204998778130465, 0.8787825789354448),
            (0.7111556336535151, 0.6429310691952074),
            (0.8427007929497149, 0.4151074974205947),
            (0.9229001282564583, 0.2365211224472908),
            (0.9661051464753108, 0.11893028922362937),
            (0.9866716712191824, 0.05277499593015037),
            (0.9953222650189527, 0.020666985354092053),
            (0.9985372834133188, 0.007142319022017983),
            (0.999593047982555, 0.0021782842303527095),
            (0.9998993780778803, 0.0005862772470937923),
            (0.9999779095030014, 0.00013925305194674786),
            (0.9999956972205363, 2.9189025383581702e-05),
            (0.9999992569016276, 5.399426777384783e-06),
            (0.9999998862727434, 8.814321912318039e-07),
            (0.9999999845827421, 1.2698234671866558e-07),
            (0.9999999981494259, 1.6143993719507412e-08),
            (0.9999999998033839, 1.81130589590869e-09),
            (0.9999999999815149, 1.7934357034341337e-10),
            (0.9999999999984626, 1.5670866531017336e-11),
            (0.9999999999998869, 1.2084074716006755e-12),
            (0.9999999999999927, 8.223316045262922e-14),
            (0.9999999999999996, 4.938485140964219e-15),
            (1.0, 2.617301239249265e-16),
        ];
        if x.is_nan() {
            return x;
        }
        let a = x.abs();
        let y = if a >= 6.0 {
            1.0
        } else {
            let j = (a * 4.0 + 0.5) as usize;
            let c = j as f64 * 0.25;
            // Exact (Sterbenz): a and c are within a factor of 2, or c = 0.
            let h = a - c;
            let (erf_c, slope) = TABLE[j];
            // s = Σ (-1)^(k-1) H_(k-1)(c) h^k / k!, with H_k = 2c H_(k-1) - 2(k-1) H_(k-2).
            let (mut h1, mut h2) = (1.0f64, 0.0f64);
            let mut t = h;
            let mut s = h;
            let mut last = h;
            let mut k = 1u32;
            while k < 60 {
                let hk = 2.0 * c * h1 - 2.0 * (k - 1) as f64 * h2;
                h2 = h1;
                h1 = hk;
                k += 1;
                t = t * h / k as f64;
                let term = if k % 2 == 0 { -(t * h1) } else { t * h1 };
                s += term;
                // H_k(0) vanishes for odd k: stop after two negligible terms in a row.
                if term.abs() + last.abs() <= s.abs() * 1e-17 {
                    break;
                }
                last = term;
            }
            erf_c + slope * s
        };
        if x.is_sign_negative() { -y } else { y }
    }
}

shared! {
    /// `softplus x = log (1 + exp x)`, computed without overflow: `x + log1p (exp (-x))` for
    /// `x > 0`.
    SOFTPLUS_SRC: pub fn softplus(x: f64) -> f64 {
        if x > 0.0 { x + (-x).exp().ln_1p() } else { x.exp().ln_1p() }
    }
}

shared! {
    /// `relu x = max x 0`: `x` where `x > 0`, else `0.0` (`NaN` stays `NaN`).
    RELU_SRC: pub fn relu(x: f64) -> f64 {
        if x > 0.0 || x.is_nan() { x } else { 0.0 }
    }
}

shared! {
    /// The sign of `x`: `1.0`, `-1.0`, `0.0` for either zero, `NaN` for `NaN`.
    SIGN_SRC: pub fn sign(x: f64) -> f64 {
        if x > 0.0 {
            1.0
        } else if x < 0.0 {
            -1.0
        } else if x == 0.0 {
            0.0
        } else {
            x
        }
    }
}

shared! {
    /// `a % b`, the remainder of the truncating division `a / b` (the sign of `a`, as in Rust
    /// and C, so that `(a / b) * b + a % b == a`); `None` for `b = 0`.
    /// (`i64::MIN % -1` is 0: the remainder exists even where the quotient overflows.)
    IREM_SRC: pub fn irem(a: i64, b: i64) -> Option<i64> {
        if b == 0 { None } else { Some(a.wrapping_rem(b)) }
    }
}

shared! {
    /// `a ^ b` on integers: `None` for a negative exponent or an overflow.
    IPOW_SRC: pub fn ipow(a: i64, b: i64) -> Option<i64> {
        if b < 0 {
            None
        } else if a == 0 || a == 1 {
            Some(if b == 0 { 1 } else { a })
        } else if a == -1 {
            Some(if b % 2 == 0 { 1 } else { -1 })
        } else {
            u32::try_from(b).ok().and_then(|e| a.checked_pow(e))
        }
    }
}

shared! {
    /// The index of the largest element (the first of equal ones; a `NaN` counts as larger than
    /// everything, so the first `NaN` wins); `None` for an empty array.
    ARGMAX_SRC: pub fn argmax(xs: &[f64]) -> Option<usize> {
        let mut best = 0;
        for (i, &x) in xs.iter().enumerate().skip(1) {
            if xs[best].is_nan() {
                break;
            }
            if x > xs[best] || x.is_nan() {
                best = i;
            }
        }
        if xs.is_empty() { None } else { Some(best) }
    }
}

shared! {
    /// The index of the smallest element (the first of equal ones; the first `NaN` wins);
    /// `None` for an empty array.
    ARGMIN_SRC: pub fn argmin(xs: &[f64]) -> Option<usize> {
        let mut best = 0;
        for (i, &x) in xs.iter().enumerate().skip(1) {
            if xs[best].is_nan() {
                break;
            }
            if x < xs[best] || x.is_nan() {
                best = i;
            }
        }
        if xs.is_empty() { None } else { Some(best) }
    }
}

/// The Rust source of the helper function a builtin's native code calls (see the `prim` table of
/// [`crate::ir::rust`]), by builtin name: the very code the evaluator runs.
pub fn rust_helper(name: &str) -> Option<(&str, &'static str)> {
    if elementary::has_lane_form(name) {
        return Some(("elementary", elementary::ELEMENTARY_SRC));
    }
    Some((
        name,
        match name {
            "erf" => ERF_SRC,
            "softplus" => SOFTPLUS_SRC,
            "relu" => RELU_SRC,
            "sign" => SIGN_SRC,
            "irem" => IREM_SRC,
            "ipow" => IPOW_SRC,
            "argmax" => ARGMAX_SRC,
            "argmin" => ARGMIN_SRC,
            _ => return None,
        },
    ))
}

fn builtins() -> Vec<Primitive> {
    let real = || Type::Real;
    let arr = || Type::array(Type::Real);
    let mut v = vec![
        real1("sin", sin, |x| call("cos", &[x])),
        real1("cos", cos, |x| call("neg", &[&call("sin", &[x])])),
        real1("tan", f64::tan, |x| {
            let t = call("tan", &[x]);
            call("add", &[&lit(1.0), &call("mul", &[&t, &t])])
        }),
        real1("exp", exp, |x| call("exp", &[x])),
        real1("log", f64::ln, |x| call("div", &[&lit(1.0), x])),
        real1("sqrt", f64::sqrt, |x| {
            call("div", &[&lit(0.5), &call("sqrt", &[x])])
        }),
        real1("tanh", tanh, |x| {
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
        // Inverse trigonometric and hyperbolic functions. asin' and acos' are infinite at ±1
        // (IEEE: 1 / 0), NaN outside [-1, 1] where the functions are NaN.
        real1("asin", f64::asin, |x| {
            call("div", &[&lit(1.0), &call("sqrt", &[&one_minus_square(x)])])
        }),
        real1("acos", f64::acos, |x| {
            let d = call("div", &[&lit(1.0), &call("sqrt", &[&one_minus_square(x)])]);
            call("neg", &[&d])
        }),
        real1("atan", f64::atan, |x| {
            call(
                "div",
                &[&lit(1.0), &call("add", &[&lit(1.0), &call("mul", &[x, x])])],
            )
        }),
        real1("sinh", f64::sinh, |x| call("cosh", &[x])),
        real1("cosh", f64::cosh, |x| call("sinh", &[x])),
        // `atan2 y x`: the angle of the point (x, y), as C's and Rust's `atan2(y, x)`.
        // ∂/∂y = x / (x² + y²), ∂/∂x = -y / (x² + y²); both taken as 0 at the origin, where
        // the angle jumps.
        real2("atan2", Fixity::Function, f64::atan2, |y, x| {
            let r2 = call("add", &[&call("mul", &[x, x]), &call("mul", &[y, y])]);
            let at_origin = call("eq", &[&r2, &lit(0.0)]);
            let dy = cond(at_origin.clone(), lit(0.0), call("div", &[x, &r2]));
            let dx = cond(at_origin, lit(0.0), call("neg", &[&call("div", &[y, &r2])]));
            (dy, dx)
        }),
        // log1p x = log (1 + x) and expm1 x = exp x - 1, accurate near 0.
        real1("log1p", f64::ln_1p, |x| {
            call("div", &[&lit(1.0), &call("add", &[&lit(1.0), x])])
        }),
        real1("expm1", f64::exp_m1, |x| call("exp", &[x])),
        // erf' x = 2/√π exp (-x²).
        real1("erf", erf, |x| {
            let sq = call("mul", &[x, x]);
            call(
                "mul",
                &[
                    &lit(std::f64::consts::FRAC_2_SQRT_PI),
                    &call("exp", &[&call("neg", &[&sq])]),
                ],
            )
        }),
        // relu'(0) = 0 (as JAX): the derivative is 1 exactly where x > 0.
        real1("relu", relu, |x| {
            cond(call("gt", &[x, &lit(0.0)]), lit(1.0), lit(0.0))
        }),
        real1("softplus", softplus, |x| call("sigmoid", &[x])),
        // sign' = 0 everywhere, at 0 too (the jump is not differentiated).
        Primitive::function("sign", vec![real()], real(), |x| {
            Ok(Value::Real(sign(x.expect_real())))
        })
        .with_scalar(Scalar::Real1(sign))
        .with_derivative(Derivative::Zero),
        // The index of the largest (smallest) element, the first one on ties; `maximum xs` is
        // `xs ! argmax xs`, so its derivative flows to that element only.
        Primitive::function("argmax", vec![arr()], Type::Int, |x| {
            arg_extreme("argmax", argmax, x)
        }),
        Primitive::function("argmin", vec![arr()], Type::Int, |x| {
            arg_extreme("argmin", argmin, x)
        }),
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
        int2("irem", "%", 5, irem),
        int2("ipow", "^", 6, ipow),
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
        "%" => (None, Some("irem"), None),
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
