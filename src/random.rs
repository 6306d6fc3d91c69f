//! Random well-typed programs with matching random inputs, as `proptest` strategies.
//!
//! Generation is type-directed: [`term`] produces a core [`Term`] of a requested type in a
//! context of typed variables, choosing among the forms that can have that type (variables,
//! literals, `let` with variable or tuple patterns, lambdas, applications including partial
//! application of context functions, pairs and projections, `if`, injections and `case`,
//! primitives, array literals, `map`/`map2` with closures, `build` with indexing, `sum`, `dot`,
//! `length`, `replicate`). Every intermediate type is drawn at random, so higher-order terms
//! arise everywhere: functions passed as arguments (`(\(f : A -> B) -> ...) g`), returned
//! (`\x -> \y -> ...`), partially applied, stored in tuples, and closures capturing closures.
//! A depth budget bounds the size; at depth zero only leaves and constructors of leaves are
//! produced, so every type is always inhabited.
//!
//! [`program`] draws input types and values and a body over them, giving a [`TestProgram`]:
//! an [`Entry`] plus arguments. The [`Config`] restricts the generator (for example to what an
//! AD mode supports) and selects which primitives may appear. Two biases weight it towards
//! parts of the language that plain random generation reaches rarely: [`Config::array_bias`]
//! (array inputs and results, `build (length xs) (\i -> ... xs ! i ...)` with in-range
//! indexing, nested for matrices, `map2` over equal lengths, closures capturing functions) and
//! [`Config::sum_bias`] (sum-typed inputs and results, `case` on them, `if` on comparisons of
//! reals). With both off the generator is exactly what it was before they existed.
//! [`features`] reports which constructs a program contains, to measure a configuration.
//!
//! Shrinking follows proptest's `Union`: a failing program shrinks towards earlier options,
//! which are the leaves.
//!
//! ```
//! use chad::internals::random::{program, Config};
//! use proptest::strategy::{Strategy, ValueTree};
//! use proptest::test_runner::TestRunner;
//! let mut runner = TestRunner::deterministic();
//! let p = program(Config::default()).new_tree(&mut runner).unwrap().current();
//! assert_eq!(p.entry.params.len(), p.inputs.len());
//! assert!(p.entry.body.ty.is_first_order());
//! ```

use crate::error::Span;
use crate::prim::{self, Fixity, Prim};
use crate::source::print::defs_to_string;
use crate::source::term::{Def, Entry, Lit, Pat, Program, Term, TermKind, Var, freshen};
use crate::types::Type;
use crate::value::Value;
use proptest::prelude::*;
use proptest::strategy::{BoxedStrategy, Just, Union};
use std::fmt;
use std::rc::Rc;

/// What the generator may produce.
#[derive(Clone, Debug)]
pub struct Config {
    /// Depth budget of terms (each nested form uses one unit).
    pub depth: u32,
    /// Depth budget of generated types.
    pub type_depth: u32,
    /// Most inputs a program takes (at least one).
    pub max_params: usize,
    /// Sum types, injections and `case`.
    pub sums: bool,
    /// `if` (and Bool-valued comparisons feeding it).
    pub conditionals: bool,
    /// Array types and operations.
    pub arrays: bool,
    /// Function types inside generated types (lambdas, application, closures). Without it the
    /// programs are first-order.
    pub functions: bool,
    /// Whether the result type may contain function types.
    pub higher_order_result: bool,
    /// A fixed result type, instead of a random one.
    pub result: Option<Type>,
    /// The primitives that may appear (operators included).
    pub prims: Vec<Prim>,
    /// Weight the generator towards array programs (needs `arrays`): more array inputs
    /// (matrices `Array (Array Real)` and arrays of pairs among them) and results, and forms
    /// whose indexing stays in range: `build (length xs) (\i -> ... xs ! i ...)` (nested, for
    /// matrices), `map2 f xs (build (length xs) ...)`, and `map` of a closure that captures a
    /// let-bound function. Off by default.
    pub array_bias: bool,
    /// Weight the generator towards sums and conditionals (needs `sums`, `conditionals`):
    /// sum-typed inputs and results, `case` on sum-typed variables in scope (inputs
    /// included), and `if` on comparisons of reals (data-dependent control flow). Off by
    /// default.
    pub sum_bias: bool,
    /// Loops (the core `loop` that `fold`, `iterate` and `while` desugar to, and the taped loop
    /// `scan` desugars to), each terminating
    /// by construction: counted (`iterate`), over an array (`fold`, capturing the array and the
    /// rest of the context) and on a real-valued condition with a step bound (`while`). Off by
    /// default.
    pub loops: bool,
    /// Recursion: `fix` (what `def rec` elaborates to) with structural fuel, an `Int` counter
    /// that every recursive call decreases, non-tail (the calls' results are used after them)
    /// and tree-shaped (two calls per level). Off by default (`fix` inside an expression has no
    /// surface syntax, and the native backend lowers the primal of recursion only).
    pub recursion: bool,
    /// Also generate near-duplicate subterms that a common-subexpression pass must keep apart:
    /// `let p = e in op (fst p) ⋆ op (snd p)` for a unary primitive `op` and a binary `⋆`,
    /// and `f (fst p) (snd p) ⋆ f (snd p) (fst p)` for a binary `f` (issue 27: random
    /// programs never applied one primitive to both components of one value, and a CSE that
    /// keyed `snd` as `fst` went unnoticed). Off by default.
    pub near_duplicates: bool,
}

impl Default for Config {
    /// Everything the language has, depth 4, up to 3 inputs, first-order results.
    fn default() -> Self {
        Config {
            depth: 4,
            type_depth: 2,
            max_params: 3,
            sums: true,
            conditionals: true,
            arrays: true,
            functions: true,
            higher_order_result: false,
            result: None,
            prims: default_prims(),
            array_bias: false,
            sum_bias: false,
            loops: false,
            recursion: false,
            near_duplicates: false,
        }
    }
}

/// All built-in primitives that can be written in source (functions and operators).
pub fn default_prims() -> Vec<Prim> {
    crate::prim::Registry::builtin()
        .all()
        .iter()
        .filter(|p| p.fixity() != Fixity::Internal)
        .cloned()
        .collect()
}

/// A generated program and inputs for it.
#[derive(Clone)]
pub struct TestProgram {
    /// The program: parameters and body.
    pub entry: Entry,
    /// One argument per parameter.
    pub inputs: Vec<Value>,
}

impl TestProgram {
    /// The program in surface syntax, as a single definition named `main`.
    pub fn source(&self) -> String {
        let def = Def {
            var: Var::fresh(
                "main",
                Type::curried(&self.entry.param_types(), self.entry.body.ty.clone()),
            ),
            params: self.entry.params.clone(),
            ret: self.entry.body.ty.clone(),
            body: self.entry.body.clone(),
            deps: vec![],
            rec: false,
            span: Span::default(),
            custom: None,
        };
        defs_to_string(
            &Program {
                defs: vec![def],
                templates: Vec::new(),
            },
            &[0],
            100,
        )
    }
}

impl fmt::Debug for TestProgram {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.source())?;
        write!(f, "# inputs:")?;
        for v in &self.inputs {
            write!(f, " {v}")?;
        }
        Ok(())
    }
}

/// Random programs with inputs.
pub fn program(cfg: Config) -> impl Strategy<Value = TestProgram> {
    let cfg = Rc::new(cfg);
    let n = cfg.max_params.max(1);
    let c1 = cfg.clone();
    prop::collection::vec(input_type(&cfg), 1..=n).prop_flat_map(move |tys| {
        let params: Vec<Var> = tys
            .iter()
            .enumerate()
            .map(|(k, t)| Var::fresh(format!("x{}", k + 1), t.clone()))
            .collect();
        let values: Vec<BoxedStrategy<Value>> = tys.iter().map(value).collect();
        let g = Gen {
            cfg: c1.clone(),
            ctx: Rc::new(params.clone()),
            safe: Rc::new(Vec::new()),
            params: Rc::new(params.clone()),
        };
        let funs = c1.higher_order_result && c1.functions;
        let result = match &c1.result {
            Some(t) => Just(t.clone()).boxed(),
            None if g.biased() => {
                Union::new_weighted(vec![(2, g.ty(c1.type_depth, funs)), (3, g.biased_result())])
                    .boxed()
            }
            None => g.ty(c1.type_depth, funs),
        };
        let body = result.prop_flat_map(move |t| g.term(&t, g.cfg.depth));
        (body, values).prop_map(move |(body, inputs)| TestProgram {
            entry: Entry {
                name: "main".into(),
                params: params.clone(),
                // Binders made while building the strategy may repeat across samples.
                body: freshen(&body),
            },
            inputs,
        })
    })
}

/// Random terms of type `ty` whose free variables are among `ctx`.
pub fn term(cfg: Config, ctx: Vec<Var>, ty: Type) -> BoxedStrategy<Term> {
    let g = Gen {
        cfg: Rc::new(cfg),
        ctx: Rc::new(ctx),
        safe: Rc::new(Vec::new()),
        params: Rc::new(Vec::new()),
    };
    g.term(&ty, g.cfg.depth).prop_map(|t| freshen(&t)).boxed()
}

/// Types of program inputs: first-order, weighted towards `Real`.
pub fn input_type(cfg: &Config) -> BoxedStrategy<Type> {
    let mut opts: Vec<(u32, BoxedStrategy<Type>)> = vec![
        (6, Just(Type::Real).boxed()),
        (1, Just(Type::Int).boxed()),
        (1, Just(Type::prod(Type::Real, Type::Real)).boxed()),
    ];
    if cfg.conditionals {
        opts.push((1, Just(Type::Bool).boxed()));
    }
    if cfg.arrays {
        opts.push((3, Just(Type::array(Type::Real)).boxed()));
        opts.push((
            1,
            Just(Type::array(Type::prod(Type::Real, Type::Int))).boxed(),
        ));
    }
    if cfg.sums {
        opts.push((1, Just(Type::sum(Type::Real, Type::Unit)).boxed()));
    }
    if cfg.arrays && cfg.array_bias {
        let pair = Type::prod(Type::Real, Type::Real);
        opts.push((3, Just(Type::array(Type::Real)).boxed()));
        opts.push((2, Just(Type::array(pair)).boxed()));
        opts.push((2, Just(Type::array(Type::array(Type::Real))).boxed()));
    }
    if cfg.sums && cfg.sum_bias {
        let pair = Type::prod(Type::Real, Type::Real);
        opts.push((2, Just(Type::sum(Type::Real, Type::Real)).boxed()));
        opts.push((2, Just(Type::sum(pair, Type::Real)).boxed()));
        if cfg.arrays {
            opts.push((
                1,
                Just(Type::sum(Type::array(Type::Real), Type::Real)).boxed(),
            ));
        }
        if cfg.conditionals {
            opts.push((1, Just(Type::Bool).boxed()));
        }
    }
    Union::new_weighted(opts).boxed()
}

/// Random values of a first-order type: reals in [-2, 2], integers in [-1, 4], arrays of up to
/// four elements.
pub fn value(ty: &Type) -> BoxedStrategy<Value> {
    match ty {
        Type::Real => (-2.0f64..2.0).prop_map(Value::Real).boxed(),
        Type::Int => (-1i64..=4).prop_map(Value::Int).boxed(),
        Type::Bool => any::<bool>().prop_map(Value::Bool).boxed(),
        Type::Unit => Just(Value::Unit).boxed(),
        Type::Prod(p) => (value(&p.0), value(&p.1))
            .prop_map(|(a, b)| Value::pair(a, b))
            .boxed(),
        Type::Sum(p) => prop_oneof![
            value(&p.0).prop_map(Value::inl),
            value(&p.1).prop_map(Value::inr)
        ]
        .boxed(),
        Type::Array(e) => {
            let e2: Type = (***e).clone();
            prop::collection::vec(value(e), 0..=4)
                .prop_map(move |vs| Value::array(&e2, vs))
                .boxed()
        }
        Type::Fun(_) => panic!("random::value: function types have no random data values"),
    }
}

/// Random values of any type. First-order types use [`value`]; a function type gets a closure
/// made by evaluating a random closed term of that type (programs that fail to evaluate are
/// skipped), so higher-order arguments can be passed to functions under test.
pub fn any_value(cfg: &Config, ty: &Type) -> BoxedStrategy<Value> {
    if ty.is_first_order() {
        return value(ty);
    }
    let cfg = Config {
        depth: cfg.depth.min(3),
        ..cfg.clone()
    };
    term(cfg, Vec::new(), ty.clone())
        .prop_filter_map("closed term failed to evaluate", |t| {
            crate::eval::eval(&t, &crate::eval::Env::new()).ok()
        })
        .boxed()
}

/// The generator state: configuration and the variables in scope.
#[derive(Clone)]
struct Gen {
    cfg: Rc<Config>,
    ctx: Rc<Vec<Var>>,
    /// Pairs `(xs, i)` of variables in scope with `0 <= i < length xs` (inside
    /// `build (length xs) (\i -> ...)`), so `xs ! i` is in range.
    safe: Rc<Vec<(Var, Var)>>,
    /// The program's parameters (which biased generation prefers as leaves).
    params: Rc<Vec<Var>>,
}

type S = BoxedStrategy<Term>;

/// A term built around an array variable (see `Gen::with_array`).
type WithArray = Rc<dyn Fn(&Gen, &Var) -> S>;

fn mk(kind: TermKind) -> Term {
    Term::new(kind, Span::default())
}

/// A strategy that is only constructed when chosen (so recursive options cost nothing until
/// used).
fn lazy(f: impl Fn() -> S + 'static) -> S {
    Just(()).prop_flat_map(move |_| f()).boxed()
}

impl Gen {
    fn with(&self, vars: &[&Var]) -> Gen {
        let mut ctx = (*self.ctx).clone();
        ctx.extend(vars.iter().map(|v| (*v).clone()));
        Gen {
            cfg: self.cfg.clone(),
            ctx: Rc::new(ctx),
            safe: self.safe.clone(),
            params: self.params.clone(),
        }
    }

    /// In scope of `i`, known to be an index of `xs`.
    fn with_index(&self, xs: &Var, i: &Var) -> Gen {
        let mut g = self.with(&[i]);
        let mut safe = (*self.safe).clone();
        safe.push((xs.clone(), i.clone()));
        g.safe = Rc::new(safe);
        g
    }

    /// Whether a bias towards arrays or sums is on.
    fn biased(&self) -> bool {
        self.array_bias() || self.cfg.sum_bias
    }

    fn array_bias(&self) -> bool {
        self.cfg.arrays && self.cfg.array_bias
    }

    /// Result types for the biased configurations: arrays (of reals, pairs, arrays) and sums.
    fn biased_result(&self) -> BoxedStrategy<Type> {
        let pair = || Type::prod(Type::Real, Type::Real);
        let mut opts: Vec<(u32, BoxedStrategy<Type>)> = vec![(2, Just(Type::Real).boxed())];
        if self.array_bias() {
            opts.push((2, Just(Type::array(Type::Real)).boxed()));
            opts.push((1, Just(Type::array(pair())).boxed()));
            opts.push((1, Just(Type::array(Type::array(Type::Real))).boxed()));
        }
        if self.cfg.sums && self.cfg.sum_bias {
            opts.push((2, Just(Type::sum(Type::Real, Type::Real)).boxed()));
            opts.push((1, Just(Type::sum(pair(), Type::Unit)).boxed()));
            if self.cfg.arrays {
                opts.push((
                    1,
                    Just(Type::sum(Type::array(Type::Real), Type::Real)).boxed(),
                ));
                opts.push((
                    1,
                    Just(Type::array(Type::sum(Type::Real, Type::Real))).boxed(),
                ));
            }
        }
        Union::new_weighted(opts).boxed()
    }

    /// Element types of the arrays the array-biased forms make: mostly reals, pairs and rows.
    fn element_ty(&self) -> BoxedStrategy<Type> {
        Union::new_weighted(vec![
            (4, Just(Type::Real).boxed()),
            (2, Just(Type::prod(Type::Real, Type::Real)).boxed()),
            (2, Just(Type::array(Type::Real)).boxed()),
            (1, self.any_ty()),
        ])
        .boxed()
    }

    /// `k(g, xs)` for an array `xs`: an array variable in scope, or a new one bound by `let`
    /// around the result.
    fn with_array(&self, d: u32, k: WithArray) -> S {
        let arrays: Vec<Var> = self
            .ctx
            .iter()
            .filter(|v| matches!(v.ty, Type::Array(_)) && self.allowed(&v.ty))
            .cloned()
            .collect();
        let mut opts: Vec<(u32, S)> = Vec::new();
        if !arrays.is_empty() {
            let (g, k) = (self.clone(), k.clone());
            opts.push((
                3,
                proptest::sample::select(arrays)
                    .prop_flat_map(move |xs| k(&g, &xs))
                    .boxed(),
            ));
        }
        let g = self.clone();
        opts.push((
            2,
            self.element_ty()
                .prop_flat_map(move |a| {
                    let xs = Var::fresh("xs", Type::array(a));
                    let inner = g.with(&[&xs]);
                    (g.term(&xs.ty, d), k(&inner, &xs))
                        .prop_map(move |(e, b)| mk(TermKind::Let(Pat::Var(xs.clone()), e, b)))
                })
                .boxed(),
        ));
        Union::new_weighted(opts).boxed()
    }

    /// `xs ! i` for the in-range pairs of [`Gen::safe`] with elements of type `ty`, if any.
    fn safe_index(&self, ty: &Type) -> Option<S> {
        let pairs: Vec<(Var, Var)> = self
            .safe
            .iter()
            .filter(|(xs, _)| xs.ty.as_array() == Some(ty))
            .cloned()
            .collect();
        (!pairs.is_empty()).then(|| {
            proptest::sample::select(pairs)
                .prop_map(|(xs, i)| mk(TermKind::Index(Term::var(&xs), Term::var(&i))))
                .boxed()
        })
    }

    /// A random type. `funs` allows function types.
    fn ty(&self, depth: u32, funs: bool) -> BoxedStrategy<Type> {
        let mut opts: Vec<(u32, BoxedStrategy<Type>)> =
            vec![(8, Just(Type::Real).boxed()), (1, Just(Type::Int).boxed())];
        if self.cfg.conditionals {
            opts.push((1, Just(Type::Bool).boxed()));
        }
        if depth > 0 {
            let g = self.clone();
            opts.push((
                2,
                (g.ty(depth - 1, funs), g.ty(depth - 1, funs))
                    .prop_map(|(a, b)| Type::prod(a, b))
                    .boxed(),
            ));
            if funs {
                let g = self.clone();
                opts.push((
                    3,
                    (g.ty(depth - 1, funs), g.ty(depth - 1, funs))
                        .prop_map(|(a, b)| Type::fun(a, b))
                        .boxed(),
                ));
            }
            if self.cfg.sums {
                let g = self.clone();
                opts.push((
                    if self.cfg.sum_bias { 3 } else { 1 },
                    (g.ty(depth - 1, funs), g.ty(depth - 1, funs))
                        .prop_map(|(a, b)| Type::sum(a, b))
                        .boxed(),
                ));
            }
            if self.cfg.arrays {
                let g = self.clone();
                let w = if self.array_bias() { 4 } else { 2 };
                opts.push((w, g.ty(depth - 1, funs).prop_map(Type::array).boxed()));
            }
        }
        Union::new_weighted(opts).boxed()
    }

    /// Whether the configuration allows values of this type.
    fn allowed(&self, t: &Type) -> bool {
        match t {
            Type::Real | Type::Int | Type::Unit => true,
            Type::Bool => self.cfg.conditionals,
            Type::Prod(p) => self.allowed(&p.0) && self.allowed(&p.1),
            Type::Fun(p) => self.cfg.functions && self.allowed(&p.0) && self.allowed(&p.1),
            Type::Sum(p) => self.cfg.sums && self.allowed(&p.0) && self.allowed(&p.1),
            Type::Array(e) => self.cfg.arrays && self.allowed(e),
        }
    }

    fn any_ty(&self) -> BoxedStrategy<Type> {
        self.ty(self.cfg.type_depth.min(2), self.cfg.functions)
    }

    fn vars_of(&self, ty: &Type) -> Vec<Var> {
        self.ctx.iter().filter(|v| v.ty == *ty).cloned().collect()
    }

    /// Leaves and constructors of leaves: always possible, for every type.
    fn leaf(&self, ty: &Type) -> S {
        let vars = self.vars_of(ty);
        let mut opts: Vec<(u32, S)> = Vec::new();
        match ty {
            Type::Real => opts.push((
                2,
                prop_oneof![
                    Just(0.0),
                    Just(1.0),
                    Just(2.0),
                    Just(-1.5),
                    (-3.0f64..3.0).prop_map(|x| (x * 8.0).round() / 8.0)
                ]
                .prop_map(|x| mk(TermKind::Lit(Lit::Real(x))))
                .boxed(),
            )),
            Type::Int => opts.push((
                2,
                (0i64..=3)
                    .prop_map(|i| mk(TermKind::Lit(Lit::Int(i))))
                    .boxed(),
            )),
            Type::Bool => opts.push((
                2,
                any::<bool>()
                    .prop_map(|b| mk(TermKind::Lit(Lit::Bool(b))))
                    .boxed(),
            )),
            Type::Unit => opts.push((2, Just(mk(TermKind::Lit(Lit::Unit))).boxed())),
            Type::Prod(p) => {
                let (a, b) = (p.0.clone(), p.1.clone());
                opts.push((
                    2,
                    (self.leaf(&a), self.leaf(&b))
                        .prop_map(|(x, y)| mk(TermKind::Pair(x, y)))
                        .boxed(),
                ));
            }
            Type::Fun(p) => {
                let (a, b) = (p.0.clone(), p.1.clone());
                let x = Var::fresh(fresh_name(&a), a);
                let inner = self.with(&[&x]);
                opts.push((
                    2,
                    inner
                        .leaf(&b)
                        .prop_map(move |body| mk(TermKind::Lam(x.clone(), body)))
                        .boxed(),
                ));
            }
            Type::Sum(p) => {
                let (a, b) = (p.0.clone(), p.1.clone());
                let (a2, b2) = (a.clone(), b.clone());
                opts.push((
                    1,
                    self.leaf(&a)
                        .prop_map(move |t| mk(TermKind::Inl(t, b2.clone())))
                        .boxed(),
                ));
                opts.push((
                    1,
                    self.leaf(&b)
                        .prop_map(move |t| mk(TermKind::Inr(a2.clone(), t)))
                        .boxed(),
                ));
            }
            Type::Array(e) => {
                let e: Type = (***e).clone();
                let e2 = e.clone();
                opts.push((
                    2,
                    prop::collection::vec(self.leaf(&e), 1..=3)
                        .prop_map(move |ts| mk(TermKind::Array(e2.clone(), ts)))
                        .boxed(),
                ));
            }
        }
        if !vars.is_empty() {
            opts.push((
                3,
                proptest::sample::select(vars)
                    .prop_map(|v| Term::var(&v))
                    .boxed(),
            ));
        }
        if self.array_bias()
            && let Some(s) = self.safe_index(ty)
        {
            opts.push((4, s));
        }
        let params: Vec<Var> = self
            .params
            .iter()
            .filter(|v| v.ty == *ty)
            .cloned()
            .collect();
        if self.biased() && !params.is_empty() {
            opts.push((
                4,
                proptest::sample::select(params)
                    .prop_map(|v| Term::var(&v))
                    .boxed(),
            ));
        }
        Union::new_weighted(opts).boxed()
    }

    /// Random terms of type `ty` within the depth budget.
    fn term(&self, ty: &Type, depth: u32) -> S {
        if depth == 0 {
            return self.leaf(ty);
        }
        let d = depth - 1;
        let mut opts: Vec<(u32, S)> = vec![(2, self.leaf(ty))];
        let ty = ty.clone();
        let cfg = self.cfg.clone();

        // let x = e in body, with a variable or (for pairs) a tuple pattern.
        {
            let g = self.clone();
            let ty = ty.clone();
            opts.push((
                4,
                lazy(move || {
                    let (g, ty) = (g.clone(), ty.clone());
                    (g.any_ty(), any::<bool>())
                        .prop_flat_map(move |(a, split)| {
                            let pat = match a.as_prod() {
                                Some((l, r)) if split => Pat::Pair(
                                    Box::new(Pat::Var(Var::fresh(fresh_name(l), l.clone()))),
                                    Box::new(Pat::Var(Var::fresh(fresh_name(r), r.clone()))),
                                ),
                                _ => Pat::Var(Var::fresh(fresh_name(&a), a.clone())),
                            };
                            let inner = g.with(&pat.vars());
                            (g.term(&a, d), inner.term(&ty, d))
                                .prop_map(move |(e, b)| mk(TermKind::Let(pat.clone(), e, b)))
                        })
                        .boxed()
                }),
            ));
        }

        if cfg.functions {
            // (f a) for a random argument type.
            let g = self.clone();
            let t2 = ty.clone();
            opts.push((
                3,
                lazy(move || {
                    let (g, t2) = (g.clone(), t2.clone());
                    g.any_ty()
                        .prop_flat_map(move |a| {
                            (g.term(&Type::fun(a.clone(), t2.clone()), d), g.term(&a, d))
                                .prop_map(|(f, x)| mk(TermKind::App(f, x)))
                        })
                        .boxed()
                }),
            ));
            // A context function applied to enough arguments to produce `ty` (partial
            // application when it has more parameters).
            let callers: Vec<(Var, Vec<Type>)> = self
                .ctx
                .iter()
                .filter_map(|v| {
                    let mut args = Vec::new();
                    let mut cur = v.ty.clone();
                    while cur != ty {
                        let (a, b) = cur.as_fun()?;
                        args.push(a.clone());
                        let b = b.clone();
                        cur = b;
                    }
                    (!args.is_empty()).then(|| (v.clone(), args))
                })
                .collect();
            if !callers.is_empty() {
                let g = self.clone();
                opts.push((
                    4,
                    lazy(move || {
                        let g = g.clone();
                        proptest::sample::select(callers.clone())
                            .prop_flat_map(move |(f, args)| {
                                let arg_s: Vec<S> = args.iter().map(|a| g.term(a, d)).collect();
                                arg_s.prop_map(move |xs| {
                                    xs.into_iter()
                                        .fold(Term::var(&f), |acc, x| mk(TermKind::App(acc, x)))
                                })
                            })
                            .boxed()
                    }),
                ));
            }
        }

        // Near-duplicates (see `Config::near_duplicates`).
        if cfg.near_duplicates && ty == Type::Real {
            let real = |p: &&Prim, n: usize| {
                p.params().len() == n
                    && p.params().iter().all(|t| *t == Type::Real)
                    && *p.result() == Type::Real
            };
            let unary: Vec<Prim> = cfg.prims.iter().filter(|p| real(p, 1)).cloned().collect();
            let binary: Vec<Prim> = cfg.prims.iter().filter(|p| real(p, 2)).cloned().collect();
            if !unary.is_empty() && !binary.is_empty() {
                let g = self.clone();
                opts.push((
                    4,
                    lazy(move || {
                        let pair = Type::prod(Type::Real, Type::Real);
                        (
                            proptest::sample::select(unary.clone()),
                            proptest::sample::select(binary.clone()),
                            proptest::sample::select(binary.clone()),
                            g.term(&pair, d),
                            0u8..3,
                        )
                            .prop_map(move |(u, b, f, e, shape)| {
                                let p = Var::fresh("p", pair.clone());
                                let fst = || mk(TermKind::Fst(Term::var(&p)));
                                let snd = || mk(TermKind::Snd(Term::var(&p)));
                                let un = |x: Term| mk(TermKind::Prim(u.clone(), vec![x]));
                                let bin = |o: &Prim, x: Term, y: Term| {
                                    mk(TermKind::Prim(o.clone(), vec![x, y]))
                                };
                                let body = match shape {
                                    0 => bin(&b, un(fst()), un(snd())),
                                    1 => bin(&b, un(snd()), bin(&b, un(fst()), un(snd()))),
                                    _ => bin(&b, bin(&f, fst(), snd()), bin(&f, snd(), fst())),
                                };
                                mk(TermKind::Let(Pat::Var(p), e, body))
                            })
                            .boxed()
                    }),
                ));
            }
        }

        // fst / snd of a pair.
        {
            let g = self.clone();
            let t2 = ty.clone();
            opts.push((
                2,
                lazy(move || {
                    let (g, t2) = (g.clone(), t2.clone());
                    (g.any_ty(), any::<bool>())
                        .prop_flat_map(move |(b, first)| {
                            let pt = if first {
                                Type::prod(t2.clone(), b)
                            } else {
                                Type::prod(b, t2.clone())
                            };
                            g.term(&pt, d).prop_map(move |p| {
                                mk(if first {
                                    TermKind::Fst(p)
                                } else {
                                    TermKind::Snd(p)
                                })
                            })
                        })
                        .boxed()
                }),
            ));
        }

        if cfg.conditionals {
            let g = self.clone();
            let t2 = ty.clone();
            opts.push((
                2,
                lazy(move || {
                    (g.term(&Type::Bool, d), g.term(&t2, d), g.term(&t2, d))
                        .prop_map(|(c, a, b)| mk(TermKind::If(c, a, b)))
                        .boxed()
                }),
            ));
        }

        if cfg.sums {
            let g = self.clone();
            let t2 = ty.clone();
            opts.push((
                2,
                lazy(move || {
                    let (g, t2) = (g.clone(), t2.clone());
                    (g.any_ty(), g.any_ty())
                        .prop_flat_map(move |(a, b)| {
                            let x = Var::fresh(fresh_name(&a), a.clone());
                            let y = Var::fresh(fresh_name(&b), b.clone());
                            let s = g.term(&Type::sum(a, b), d);
                            let l = g.with(&[&x]).term(&t2, d);
                            let r = g.with(&[&y]).term(&t2, d);
                            (s, l, r).prop_map(move |(s, l, r)| {
                                mk(TermKind::Case(
                                    s,
                                    Pat::Var(x.clone()),
                                    l,
                                    Pat::Var(y.clone()),
                                    r,
                                ))
                            })
                        })
                        .boxed()
                }),
            ));
        }

        if cfg.sums && cfg.sum_bias {
            // case on a sum-typed variable in scope (an input, or let- or case-bound).
            let sums: Vec<Var> = self
                .ctx
                .iter()
                .filter(|v| matches!(v.ty, Type::Sum(_)))
                .cloned()
                .collect();
            if !sums.is_empty() {
                let g = self.clone();
                let t2 = ty.clone();
                opts.push((
                    4,
                    lazy(move || {
                        let (g, t2) = (g.clone(), t2.clone());
                        proptest::sample::select(sums.clone())
                            .prop_flat_map(move |s| {
                                let (a, b) = s.ty.as_sum().expect("a sum");
                                let x = Var::fresh(fresh_name(a), a.clone());
                                let y = Var::fresh(fresh_name(b), b.clone());
                                let l = g.with(&[&x]).term(&t2, d);
                                let r = g.with(&[&y]).term(&t2, d);
                                (l, r).prop_map(move |(l, r)| {
                                    mk(TermKind::Case(
                                        Term::var(&s),
                                        Pat::Var(x.clone()),
                                        l,
                                        Pat::Var(y.clone()),
                                        r,
                                    ))
                                })
                            })
                            .boxed()
                    }),
                ));
            }
        }

        if cfg.conditionals && cfg.sum_bias {
            // if a < b then .. else ..: control flow that depends on real data.
            let cmps: Vec<Prim> = ["lt", "le", "gt", "ge"]
                .into_iter()
                .filter_map(|n| cfg.prims.iter().find(|p| p.name() == n).cloned())
                .collect();
            if !cmps.is_empty() {
                let g = self.clone();
                let t2 = ty.clone();
                opts.push((
                    3,
                    lazy(move || {
                        let e = d.min(2);
                        (
                            proptest::sample::select(cmps.clone()),
                            g.term(&Type::Real, e),
                            g.term(&Type::Real, e),
                            g.term(&t2, d),
                            g.term(&t2, d),
                        )
                            .prop_map(|(op, a, b, t, f)| {
                                let c = mk(TermKind::Prim(op, vec![a, b]));
                                mk(TermKind::If(c, t, f))
                            })
                            .boxed()
                    }),
                ));
            }
        }

        if self.array_bias()
            && let Some(s) = self.safe_index(&ty)
        {
            opts.push((4, s));
        }

        if cfg.arrays {
            // xs ! i with a small index.
            let g = self.clone();
            let t2 = ty.clone();
            opts.push((
                if self.biased() { 1 } else { 2 },
                lazy(move || {
                    (g.term(&Type::array(t2.clone()), d), g.index())
                        .prop_map(|(xs, i)| mk(TermKind::Index(xs, i)))
                        .boxed()
                }),
            ));
        }

        // Primitives with this result type.
        // (`dot` needs equal lengths, so it only appears in the form built below.)
        let prims: Vec<Prim> = cfg
            .prims
            .iter()
            .filter(|p| *p.result() == ty && p.name() != "dot")
            .filter(|p| {
                p.params()
                    .iter()
                    .chain([p.result()])
                    .all(|t| self.allowed(t))
            })
            .cloned()
            .collect();
        if !prims.is_empty() {
            let g = self.clone();
            opts.push((
                if ty == Type::Real { 8 } else { 4 },
                lazy(move || {
                    let g = g.clone();
                    proptest::sample::select(prims.clone())
                        .prop_flat_map(move |p| {
                            let args: Vec<S> =
                                p.params().iter().map(|t| g.arg_for(&p, t, d)).collect();
                            args.prop_map(move |xs| mk(TermKind::Prim(p.clone(), xs)))
                        })
                        .boxed()
                }),
            ));
        }

        // Type-specific introduction forms and eliminations that land in `ty`.
        match &ty {
            Type::Prod(p) => {
                let (a, b) = (p.0.clone(), p.1.clone());
                let g = self.clone();
                opts.push((
                    3,
                    lazy(move || {
                        (g.term(&a, d), g.term(&b, d))
                            .prop_map(|(x, y)| mk(TermKind::Pair(x, y)))
                            .boxed()
                    }),
                ));
            }
            Type::Fun(p) => {
                let (a, b) = (p.0.clone(), p.1.clone());
                let g = self.clone();
                opts.push((
                    5,
                    lazy(move || {
                        let x = Var::fresh(fresh_name(&a), a.clone());
                        g.with(&[&x])
                            .term(&b, d)
                            .prop_map(move |body| mk(TermKind::Lam(x.clone(), body)))
                            .boxed()
                    }),
                ));
            }
            Type::Sum(p) => {
                let (a, b) = (p.0.clone(), p.1.clone());
                let g = self.clone();
                opts.push((
                    3,
                    lazy(move || {
                        let (a2, b2) = (a.clone(), b.clone());
                        prop_oneof![
                            g.term(&a, d)
                                .prop_map(move |t| mk(TermKind::Inl(t, b2.clone()))),
                            g.term(&b, d)
                                .prop_map(move |t| mk(TermKind::Inr(a2.clone(), t)))
                        ]
                        .boxed()
                    }),
                ));
            }
            Type::Array(e) => {
                let e: Type = (***e).clone();
                self.array_forms(&e, d, &mut opts);
            }
            Type::Real if cfg.arrays => {
                let g = self.clone();
                opts.push((
                    2,
                    lazy(move || {
                        g.term(&Type::array(Type::Real), d)
                            .prop_map(|xs| mk(TermKind::Prim(prim::op("sum"), vec![xs])))
                            .boxed()
                    }),
                ));
                // let xs = .. in dot xs (map f xs): equal lengths.
                let g = self.clone();
                opts.push((
                    1,
                    lazy(move || {
                        let xs = Var::fresh("xs", Type::array(Type::Real));
                        let inner = g.with(&[&xs]);
                        (
                            g.term(&Type::array(Type::Real), d),
                            inner.term(&Type::fun(Type::Real, Type::Real), d),
                        )
                            .prop_map(move |(e, f)| {
                                let v = Term::var(&xs);
                                let mapped = mk(TermKind::Map(f, v.clone()));
                                let body = mk(TermKind::Prim(prim::op("dot"), vec![v, mapped]));
                                mk(TermKind::Let(Pat::Var(xs.clone()), e, body))
                            })
                            .boxed()
                    }),
                ));
            }
            Type::Int if cfg.arrays => {
                let g = self.clone();
                opts.push((
                    2,
                    lazy(move || {
                        let g = g.clone();
                        g.any_ty()
                            .prop_flat_map(move |a| {
                                g.term(&Type::array(a), d)
                                    .prop_map(|xs| mk(TermKind::Length(xs)))
                            })
                            .boxed()
                    }),
                ));
            }
            _ => {}
        }
        if cfg.loops {
            self.loop_forms(&ty, d, &mut opts);
        }
        if cfg.recursion {
            self.rec_forms(&ty, d, &mut opts);
        }
        Union::new_weighted(opts).boxed()
    }

    /// Loops of result (and state) type `ty` (see [`Config::loops`]), each terminating by
    /// construction (structural fuel): `iterate`'s shape, a `fold` over an array (bound by a
    /// `let`, so the body captures it and whatever else is in scope), and a `while` on a
    /// real-valued condition of the state with a step bound.
    fn loop_forms(&self, ty: &Type, d: u32, opts: &mut Vec<(u32, S)>) {
        let int = |k: i64| mk(TermKind::Lit(Lit::Int(k)));
        let p2 = |op: &str, a: Term, b: Term| mk(TermKind::Prim(prim::op(op), vec![a, b]));
        let pair_pat = |a: &Var, b: &Var| {
            Pat::Pair(Box::new(Pat::Var(a.clone())), Box::new(Pat::Var(b.clone())))
        };
        let st_ty = Type::prod(Type::Int, ty.clone());
        // loop (\(k, s) -> if k <= 0 then inr s else inl (k - 1, body)) (n, x0)
        {
            let g = self.clone();
            let (ty, st_ty) = (ty.clone(), st_ty.clone());
            opts.push((
                3,
                lazy(move || {
                    let st = Var::fresh("st", st_ty.clone());
                    let k = Var::fresh("k", Type::Int);
                    let s = Var::fresh(fresh_name(&ty), ty.clone());
                    let inner = g.with(&[&s]);
                    let (ty, st_ty) = (ty.clone(), st_ty.clone());
                    (0i64..=3, g.term(&ty, d), inner.term(&ty, d))
                        .prop_map(move |(n, x0, body)| {
                            let next = mk(TermKind::Pair(p2("isub", Term::var(&k), int(1)), body));
                            let step = mk(TermKind::If(
                                p2("ile", Term::var(&k), int(0)),
                                mk(TermKind::Inr(st_ty.clone(), Term::var(&s))),
                                mk(TermKind::Inl(next, ty.clone())),
                            ));
                            let step = mk(TermKind::Let(pair_pat(&k, &s), Term::var(&st), step));
                            let init = mk(TermKind::Pair(int(n), x0));
                            mk(TermKind::Loop(
                                mk(TermKind::Lam(st.clone(), step)),
                                init,
                                false,
                            ))
                        })
                        .boxed()
                }),
            ));
        }
        // let xs = .. in loop (\(i, acc) -> if i < length xs
        //   then inl (i + 1, let x = xs ! i in body) else inr acc) (0, z)
        if self.cfg.arrays {
            let g = self.clone();
            let (ty, st_ty) = (ty.clone(), st_ty.clone());
            opts.push((
                3,
                lazy(move || {
                    let g = g.clone();
                    let (ty, st_ty) = (ty.clone(), st_ty.clone());
                    g.element_ty()
                        .prop_flat_map(move |e| {
                            let xs = Var::fresh("xs", Type::array(e.clone()));
                            let st = Var::fresh("st", st_ty.clone());
                            let i = Var::fresh("i", Type::Int);
                            let acc = Var::fresh(fresh_name(&ty), ty.clone());
                            let x = Var::fresh(fresh_name(&e), e.clone());
                            let outer = g.with(&[&xs]);
                            let inner = g.with(&[&xs, &acc, &x]);
                            let (ty, st_ty) = (ty.clone(), st_ty.clone());
                            (
                                g.term(&Type::array(e.clone()), d),
                                outer.term(&ty, d),
                                inner.term(&ty, d),
                            )
                                .prop_map(move |(arr, z, body)| {
                                    let elem = mk(TermKind::Index(Term::var(&xs), Term::var(&i)));
                                    let body = mk(TermKind::Let(Pat::Var(x.clone()), elem, body));
                                    let next =
                                        mk(TermKind::Pair(p2("iadd", Term::var(&i), int(1)), body));
                                    let len = mk(TermKind::Length(Term::var(&xs)));
                                    let step = mk(TermKind::If(
                                        p2("ilt", Term::var(&i), len),
                                        mk(TermKind::Inl(next, ty.clone())),
                                        mk(TermKind::Inr(st_ty.clone(), Term::var(&acc))),
                                    ));
                                    let step =
                                        mk(TermKind::Let(pair_pat(&i, &acc), Term::var(&st), step));
                                    let init = mk(TermKind::Pair(int(0), z));
                                    let lp = mk(TermKind::Loop(
                                        mk(TermKind::Lam(st.clone(), step)),
                                        init,
                                        false,
                                    ));
                                    mk(TermKind::Let(Pat::Var(xs.clone()), arr, lp))
                                })
                        })
                        .boxed()
                }),
            ));
        }
        // snd (loopTape (\(k, s) -> (if k <= 0 then inr () else inl (k - 1, body), r)) (n, x0))
        // for an array type: the record `r` of every step (what `scan` becomes), with a
        // state of another type.
        if let (Some(c), true) = (ty.as_array(), self.cfg.arrays) {
            let g = self.clone();
            let c = c.clone();
            opts.push((
                3,
                lazy(move || {
                    let g = g.clone();
                    let c = c.clone();
                    g.element_ty()
                        .prop_flat_map(move |sty| {
                            let st_ty = Type::prod(Type::Int, sty.clone());
                            let st = Var::fresh("st", st_ty.clone());
                            let k = Var::fresh("k", Type::Int);
                            let s = Var::fresh(fresh_name(&sty), sty.clone());
                            let inner = g.with(&[&s]);
                            (
                                0i64..=3,
                                g.term(&sty, d),
                                inner.term(&sty, d),
                                inner.term(&c, d),
                            )
                                .prop_map(move |(n, x0, body, r)| {
                                    let next =
                                        mk(TermKind::Pair(p2("isub", Term::var(&k), int(1)), body));
                                    let unit = mk(TermKind::Lit(Lit::Unit));
                                    let go_on = mk(TermKind::If(
                                        p2("ile", Term::var(&k), int(0)),
                                        mk(TermKind::Inr(st_ty.clone(), unit)),
                                        mk(TermKind::Inl(next, Type::Unit)),
                                    ));
                                    let step = mk(TermKind::Pair(go_on, r));
                                    let step =
                                        mk(TermKind::Let(pair_pat(&k, &s), Term::var(&st), step));
                                    let init = mk(TermKind::Pair(int(n), x0));
                                    let lp = mk(TermKind::Loop(
                                        mk(TermKind::Lam(st.clone(), step)),
                                        init,
                                        true,
                                    ));
                                    mk(TermKind::Snd(lp))
                                })
                        })
                        .boxed()
                }),
            ));
        }
        // loop (\(k, s) -> if k < 3 && c > 0.0 then inl (k + 1, body) else inr s) (0, x0),
        // with `c` a real-valued term of the state
        if self.cfg.conditionals {
            let g = self.clone();
            let (ty, st_ty) = (ty.clone(), st_ty.clone());
            opts.push((
                3,
                lazy(move || {
                    let st = Var::fresh("st", st_ty.clone());
                    let k = Var::fresh("k", Type::Int);
                    let s = Var::fresh(fresh_name(&ty), ty.clone());
                    let inner = g.with(&[&s]);
                    let (ty, st_ty) = (ty.clone(), st_ty.clone());
                    (
                        1i64..=4,
                        g.term(&ty, d),
                        inner.term(&Type::Real, d.min(2)),
                        inner.term(&ty, d),
                    )
                        .prop_map(move |(fuel, x0, c, body)| {
                            let cond = mk(TermKind::If(
                                p2("ilt", Term::var(&k), int(fuel)),
                                p2("gt", c, mk(TermKind::Lit(Lit::Real(0.0)))),
                                mk(TermKind::Lit(Lit::Bool(false))),
                            ));
                            let next = mk(TermKind::Pair(p2("iadd", Term::var(&k), int(1)), body));
                            let step = mk(TermKind::If(
                                cond,
                                mk(TermKind::Inl(next, ty.clone())),
                                mk(TermKind::Inr(st_ty.clone(), Term::var(&s))),
                            ));
                            let step = mk(TermKind::Let(pair_pat(&k, &s), Term::var(&st), step));
                            let init = mk(TermKind::Pair(int(0), x0));
                            mk(TermKind::Loop(
                                mk(TermKind::Lam(st.clone(), step)),
                                init,
                                false,
                            ))
                        })
                        .boxed()
                }),
            ));
        }
    }

    /// Recursive functions of result type `ty` (see [`Config::recursion`]), terminating by
    /// construction: the state carries an `Int` fuel `k` that every call decreases, and `k <= 0`
    /// is the base case:
    ///
    /// ```text
    /// (fix (\g -> \st -> let (k, s) = st in
    ///    if k <= 0 then base
    ///    else let r1 = g (k - 1, next1) in [let r2 = g (k - 1, next2) in] body)) (n, x0)
    /// ```
    ///
    /// with `base`, `next1`, `next2` terms of the state `s` and the context, and `body` of `s`,
    /// the calls' results and the context (so the recursion is not a tail call).
    fn rec_forms(&self, ty: &Type, d: u32, opts: &mut Vec<(u32, S)>) {
        let st_ty = Type::prod(Type::Int, ty.clone());
        let fty = Type::fun(st_ty.clone(), ty.clone());
        for tree in [false, true] {
            let g = self.clone();
            let (ty, st_ty, fty) = (ty.clone(), st_ty.clone(), fty.clone());
            opts.push((
                if tree { 1 } else { 3 },
                lazy(move || {
                    let int = |k: i64| mk(TermKind::Lit(Lit::Int(k)));
                    let p2 =
                        |op: &str, a: Term, b: Term| mk(TermKind::Prim(prim::op(op), vec![a, b]));
                    let gv = Var::fresh("rec", fty.clone());
                    let st = Var::fresh("st", st_ty.clone());
                    let k = Var::fresh("k", Type::Int);
                    let s = Var::fresh(fresh_name(&ty), ty.clone());
                    let r1 = Var::fresh("r", ty.clone());
                    let r2 = Var::fresh("r", ty.clone());
                    let inner = g.with(&[&s]);
                    let after = if tree {
                        g.with(&[&s, &r1, &r2])
                    } else {
                        g.with(&[&s, &r1])
                    };
                    (
                        0i64..=if tree { 2 } else { 4 },
                        g.term(&ty, d),
                        inner.term(&ty, d),
                        inner.term(&ty, d),
                        inner.term(&ty, d),
                        after.term(&ty, d),
                    )
                        .prop_map(move |(n, x0, base, next1, next2, body)| {
                            let call = |next: Term| {
                                let arg =
                                    mk(TermKind::Pair(p2("isub", Term::var(&k), int(1)), next));
                                mk(TermKind::App(Term::var(&gv), arg))
                            };
                            let mut rest = body;
                            if tree {
                                rest = mk(TermKind::Let(Pat::Var(r2.clone()), call(next2), rest));
                            }
                            rest = mk(TermKind::Let(Pat::Var(r1.clone()), call(next1), rest));
                            let step =
                                mk(TermKind::If(p2("ile", Term::var(&k), int(0)), base, rest));
                            let pat = Pat::Pair(
                                Box::new(Pat::Var(k.clone())),
                                Box::new(Pat::Var(s.clone())),
                            );
                            let step = mk(TermKind::Let(pat, Term::var(&st), step));
                            let f = mk(TermKind::Lam(
                                gv.clone(),
                                mk(TermKind::Lam(st.clone(), step)),
                            ));
                            let init = mk(TermKind::Pair(int(n), x0));
                            mk(TermKind::App(mk(TermKind::Fix(f)), init))
                        })
                        .boxed()
                }),
            ));
        }
    }

    /// Array-building forms for `Array e`.
    fn array_forms(&self, e: &Type, d: u32, opts: &mut Vec<(u32, S)>) {
        let e = e.clone();
        // Literal.
        {
            let g = self.clone();
            let e = e.clone();
            opts.push((
                2,
                lazy(move || {
                    let e2 = e.clone();
                    let len = prop_oneof![1 => Just(0usize), 4 => 1usize..=3];
                    let g = g.clone();
                    let e = e.clone();
                    len.prop_flat_map(move |n| prop::collection::vec(g.term(&e, d), n))
                        .prop_map(move |ts| mk(TermKind::Array(e2.clone(), ts)))
                        .boxed()
                }),
            ));
        }
        // replicate n x.
        {
            let g = self.clone();
            let e = e.clone();
            opts.push((
                1,
                lazy(move || {
                    (g.size(d), g.term(&e, d))
                        .prop_map(|(n, x)| mk(TermKind::Replicate(n, x)))
                        .boxed()
                }),
            ));
        }
        // build n (\i -> e), usually indexing an array in scope.
        {
            let g = self.clone();
            let e = e.clone();
            opts.push((
                2,
                lazy(move || {
                    let i = Var::fresh("i", Type::Int);
                    let inner = g.with(&[&i]);
                    (g.size(d), inner.term(&e, d))
                        .prop_map(move |(n, body)| {
                            mk(TermKind::Build(n, mk(TermKind::Lam(i.clone(), body))))
                        })
                        .boxed()
                }),
            ));
        }
        if self.array_bias() {
            self.indexed_array_forms(&e, d, opts);
        }
        if self.cfg.functions {
            // map f xs.
            let g = self.clone();
            let e1 = e.clone();
            opts.push((
                3,
                lazy(move || {
                    let (g, e1) = (g.clone(), e1.clone());
                    g.any_ty()
                        .prop_flat_map(move |a| {
                            (
                                g.term(&Type::fun(a.clone(), e1.clone()), d),
                                g.term(&Type::array(a), d),
                            )
                                .prop_map(|(f, xs)| mk(TermKind::Map(f, xs)))
                        })
                        .boxed()
                }),
            ));
            // let xs = .. in map2 f xs (map g xs): equal lengths.
            let g = self.clone();
            let e2 = e.clone();
            opts.push((
                2,
                lazy(move || {
                    let (g, e2) = (g.clone(), e2.clone());
                    (g.any_ty(), g.any_ty())
                        .prop_flat_map(move |(a, b)| {
                            let xs = Var::fresh("xs", Type::array(a.clone()));
                            let inner = g.with(&[&xs]);
                            (
                                g.term(&Type::array(a.clone()), d),
                                inner.term(
                                    &Type::fun(a.clone(), Type::fun(b.clone(), e2.clone())),
                                    d,
                                ),
                                inner.term(&Type::fun(a.clone(), b.clone()), d),
                            )
                                .prop_map(move |(arr, f, h)| {
                                    let v = Term::var(&xs);
                                    let ys = mk(TermKind::Map(h, v.clone()));
                                    let body = mk(TermKind::Map2(f, v, ys));
                                    mk(TermKind::Let(Pat::Var(xs.clone()), arr, body))
                                })
                        })
                        .boxed()
                }),
            ));
        }
    }

    /// The array-biased forms for `Array e` (see [`Config::array_bias`]).
    fn indexed_array_forms(&self, e: &Type, d: u32, opts: &mut Vec<(u32, S)>) {
        // build (length xs) (\i -> ... xs ! i ...).
        {
            let g = self.clone();
            let e = e.clone();
            opts.push((
                5,
                lazy(move || {
                    let e = e.clone();
                    g.with_array(
                        d,
                        Rc::new(move |g: &Gen, xs: &Var| {
                            let i = Var::fresh("i", Type::Int);
                            let xs2 = xs.clone();
                            g.with_index(xs, &i)
                                .term(&e, d)
                                .prop_map(move |body| {
                                    let n = mk(TermKind::Length(Term::var(&xs2)));
                                    mk(TermKind::Build(n, mk(TermKind::Lam(i.clone(), body))))
                                })
                                .boxed()
                        }),
                    )
                }),
            ));
        }
        if !self.cfg.functions {
            return;
        }
        // map2 f xs (build (length xs) (\i -> ... xs ! i ...)): equal lengths.
        {
            let g = self.clone();
            let e = e.clone();
            opts.push((
                3,
                lazy(move || {
                    let e = e.clone();
                    g.with_array(
                        d,
                        Rc::new(move |g: &Gen, xs: &Var| {
                            let (g, e, xs) = (g.clone(), e.clone(), xs.clone());
                            let a = xs.ty.as_array().expect("an array").clone();
                            g.element_ty()
                                .prop_flat_map(move |b| {
                                    let i = Var::fresh("i", Type::Int);
                                    let f = Type::fun(a.clone(), Type::fun(b.clone(), e.clone()));
                                    let xs = xs.clone();
                                    (g.term(&f, d), g.with_index(&xs, &i).term(&b, d)).prop_map(
                                        move |(f, body)| {
                                            let v = Term::var(&xs);
                                            let n = mk(TermKind::Length(v.clone()));
                                            let lam = mk(TermKind::Lam(i.clone(), body));
                                            let ys = mk(TermKind::Build(n, lam));
                                            mk(TermKind::Map2(f, v, ys))
                                        },
                                    )
                                })
                                .boxed()
                        }),
                    )
                }),
            ));
        }
        // let f = .. in map (\x -> let y = f x in ..) xs: a closure capturing a function.
        {
            let g = self.clone();
            let e = e.clone();
            opts.push((
                3,
                lazy(move || {
                    let e = e.clone();
                    g.with_array(
                        d,
                        Rc::new(move |g: &Gen, xs: &Var| {
                            let (g, e, xs) = (g.clone(), e.clone(), xs.clone());
                            let a = xs.ty.as_array().expect("an array").clone();
                            g.element_ty()
                                .prop_flat_map(move |c| {
                                    let f = Var::fresh("f", Type::fun(a.clone(), c.clone()));
                                    let x = Var::fresh(fresh_name(&a), a.clone());
                                    let y = Var::fresh(fresh_name(&c), c.clone());
                                    let inner = g.with(&[&f, &x, &y]);
                                    let xs = xs.clone();
                                    (g.term(&f.ty, d), inner.term(&e, d)).prop_map(
                                        move |(fun, body)| {
                                            let fx =
                                                mk(TermKind::App(Term::var(&f), Term::var(&x)));
                                            let body =
                                                mk(TermKind::Let(Pat::Var(y.clone()), fx, body));
                                            let lam = mk(TermKind::Lam(x.clone(), body));
                                            let m = mk(TermKind::Map(lam, Term::var(&xs)));
                                            mk(TermKind::Let(Pat::Var(f.clone()), fun, m))
                                        },
                                    )
                                })
                                .boxed()
                        }),
                    )
                }),
            ));
        }
    }

    /// A small array length: a literal, or the length of an array.
    fn size(&self, d: u32) -> S {
        let g = self.clone();
        prop_oneof![
            1 => Just(mk(TermKind::Lit(Lit::Int(0)))),
            4 => (1i64..=3).prop_map(|i| mk(TermKind::Lit(Lit::Int(i)))),
            1 => lazy(move || {
                g.term(&Type::array(Type::Real), d.saturating_sub(1))
                    .prop_map(|xs| mk(TermKind::Length(xs)))
                    .boxed()
            })
        ]
        .boxed()
    }

    /// An index: mostly a small literal, sometimes an Int variable in scope.
    fn index(&self) -> S {
        if self.biased() {
            // Runtime errors are to be rare: in-range indexing has its own forms (with
            // `array_bias`); this one mostly takes the first element.
            return prop_oneof![6 => Just(0i64), 1 => Just(1)]
                .prop_map(|i| mk(TermKind::Lit(Lit::Int(i))))
                .boxed();
        }
        let ints = self.vars_of(&Type::Int);
        let lit = prop_oneof![4 => Just(0i64), 2 => Just(1), 1 => Just(2)]
            .prop_map(|i| mk(TermKind::Lit(Lit::Int(i))))
            .boxed();
        if ints.is_empty() {
            lit
        } else {
            prop_oneof![2 => lit, 1 => proptest::sample::select(ints).prop_map(|v| Term::var(&v))]
                .boxed()
        }
    }

    /// An argument for a primitive; integer division and remainder get a nonzero literal
    /// most of the time, integer powers a small one (a non-negative exponent that does not
    /// overflow), and the functions defined on part of the line (`asin`, `acos`: [-1, 1];
    /// `log1p`: (-1, ∞)) an argument squashed into it by `tanh` or `sigmoid` most of the time.
    fn arg_for(&self, p: &Prim, t: &Type, d: u32) -> S {
        let small = |lo: i64| (lo..=3i64).prop_map(|i| mk(TermKind::Lit(Lit::Int(i))));
        match p.name() {
            "idiv" | "irem" => prop_oneof![3 => small(1), 1 => self.term(t, d)].boxed(),
            "ipow" => prop_oneof![3 => small(0), 1 => self.term(t, d)].boxed(),
            "asin" | "acos" | "log1p" => {
                let squash = prim::op(if p.name() == "log1p" {
                    "sigmoid"
                } else {
                    "tanh"
                });
                prop_oneof![
                    3 => self
                        .term(t, d)
                        .prop_map(move |x| mk(TermKind::Prim(squash.clone(), vec![x]))),
                    1 => self.term(t, d)
                ]
                .boxed()
            }
            _ => self.term(t, d),
        }
    }
}

/// A readable name for a variable of a type.
fn fresh_name(t: &Type) -> &'static str {
    match t {
        Type::Real => "x",
        Type::Int => "n",
        Type::Bool => "b",
        Type::Unit => "u",
        Type::Prod(_) => "p",
        Type::Fun(_) => "f",
        Type::Sum(_) => "s",
        Type::Array(_) => "xs",
    }
}

/// A deterministic straight-line program of `n` `let`s (about `n` lines), for benchmarks:
///
/// ```text
/// def main (x : Real) (ys : Array Real) : Real =
///   let v0 = x * 1.5 in
///   let v1 = sin v0 + x * v0 in
///   ...
///   vN
/// ```
///
/// Each line combines earlier variables chosen by `seed`: mostly the last few, sometimes
/// far-back ones and the parameters, with scalar arithmetic, unary builtins, conditionals,
/// and every 50th line a `map` of a closure over `ys` followed by a `sum`.
pub fn straight_line_source(n: usize, seed: u64) -> String {
    straight_line(n, seed, true, true, true)
}

/// Like [`straight_line_source`] but differentiable by every AD mode today: no conditionals
/// (`max` in their place), and every line uses the one before, so none is dead code. With
/// `far_back`, the other operand is the parameter `x` one time in ten and a variable from
/// anywhere earlier two times in ten; without, it is one of the last four variables, so each
/// variable's uses stay near its definition. With `maps`, every 50th line maps a closure over
/// `ys`; without, every line is scalar.
pub fn straight_line_ad_source(n: usize, seed: u64, far_back: bool, maps: bool) -> String {
    straight_line(n, seed, false, far_back, maps)
}

fn straight_line(n: usize, seed: u64, conditionals: bool, far_back: bool, maps: bool) -> String {
    let mut state = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let mut next = move |m: usize| {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((state >> 33) as usize) % m.max(1)
    };
    let mut s = String::with_capacity(n * 40);
    s.push_str("def main (x : Real) (ys : Array Real) : Real =\n  let v0 = x * 1.5 in\n");
    for i in 1..n.max(1) {
        let pick = |next: &mut dyn FnMut(usize) -> usize| -> String {
            match next(10) {
                0 if far_back => "x".to_string(),
                1 | 2 if far_back => format!("v{}", next(i)),
                _ => format!("v{}", i - 1 - next(i.min(4))),
            }
        };
        // With conditionals (the front-end benchmark's shape) both operands are picked; without
        // (the AD shape), the first is always the previous line, so no line is dead code.
        let a = if conditionals {
            pick(&mut next)
        } else {
            format!("v{}", i - 1)
        };
        let b = pick(&mut next);
        let line = if maps && i % 50 == 0 {
            format!("sum (map (\\(y : Real) -> y * {a} + {b}) ys)")
        } else {
            match next(6) {
                0 => format!("{a} * {b} + 0.5"),
                1 => format!("sin {a} + {b} * 0.25"),
                2 if conditionals => format!("if {a} > {b} then {a} - {b} else {b} * 0.5"),
                2 => format!("max ({a} - {b}) ({b} * 0.5)"),
                3 => format!("tanh ({a} * {b})"),
                4 => format!("{a} - 0.125 * {b}"),
                _ => format!("max {a} {b} / 2"),
            }
        };
        s.push_str(&format!("  let v{i} = {line} in\n"));
    }
    s.push_str(&format!("  v{}\n", n.max(1) - 1));
    s
}

/// The names of the constructs [`features`] reports, in a fixed order (for tables).
pub const FEATURES: &[&str] = &[
    "case",
    "case on an input",
    "if",
    "if on a comparison",
    "inl",
    "inr",
    "sum input",
    "sum result",
    "map",
    "map2",
    "build",
    "index",
    "index by a build's index",
    "array literal",
    "replicate",
    "length",
    "nested array",
    "array of tuples",
    "array input",
    "array result",
    "lambda",
    "closure in map/build",
    "captured function in map/build",
];

/// Which constructs of [`FEATURES`] a generated program contains, for measuring what a
/// [`Config`] produces (and for tests to require that it keeps producing them):
///
/// * one per syntactic form (`case`, `if`, `inl`, `inr`, `map`, `map2`, `build`, `index`,
///   `array literal`, `replicate`, `length`, `lambda`);
/// * `case on an input`: a `case` whose scrutinee is a parameter;
/// * `if on a comparison`: an `if` whose condition compares two reals (data-dependent);
/// * `index by a build's index`: `xs ! e` where `e` mentions the index of an enclosing `build`;
/// * `sum input`, `array input`, `sum result`, `array result`: a parameter's or the result's
///   type contains a sum or an array;
/// * `nested array`, `array of tuples`: a parameter or subterm has a type containing
///   `Array (Array _)` or `Array (_ × _)`;
/// * `closure in map/build`: the function given to `map`, `map2` or `build` has free
///   variables; `captured function in map/build`: one of them has a function type.
pub fn features(p: &TestProgram) -> std::collections::BTreeSet<&'static str> {
    use std::collections::BTreeSet;
    let mut out = BTreeSet::new();
    let contains = |t: &Type, pred: &dyn Fn(&Type) -> bool| {
        let mut stack = vec![t];
        while let Some(t) = stack.pop() {
            if pred(t) {
                return true;
            }
            match t {
                Type::Prod(p) | Type::Fun(p) | Type::Sum(p) => stack.extend([&p.0, &p.1]),
                Type::Array(e) => stack.push(e),
                _ => {}
            }
        }
        false
    };
    let nested = |t: &Type| matches!(t.as_array(), Some(Type::Array(_)));
    let tuples = |t: &Type| matches!(t.as_array(), Some(Type::Prod(_)));
    let is_sum = |t: &Type| matches!(t, Type::Sum(_));
    let is_array = |t: &Type| matches!(t, Type::Array(_));
    for q in &p.entry.params {
        if contains(&q.ty, &is_sum) {
            out.insert("sum input");
        }
        if contains(&q.ty, &is_array) {
            out.insert("array input");
        }
        if contains(&q.ty, &nested) {
            out.insert("nested array");
        }
        if contains(&q.ty, &tuples) {
            out.insert("array of tuples");
        }
    }
    let body = &p.entry.body;
    if contains(&body.ty, &is_sum) {
        out.insert("sum result");
    }
    if contains(&body.ty, &is_array) {
        out.insert("array result");
    }
    // Each node with the indices of the builds around it.
    let mut stack: Vec<(&Term, Rc<Vec<crate::source::term::VarId>>)> =
        vec![(body, Rc::new(Vec::new()))];
    while let Some((t, builds)) = stack.pop() {
        if contains(&t.ty, &nested) {
            out.insert("nested array");
        }
        if contains(&t.ty, &tuples) {
            out.insert("array of tuples");
        }
        let mut funs: Vec<&Term> = Vec::new();
        match &t.kind {
            TermKind::Case(e, ..) => {
                out.insert("case");
                if matches!(&e.kind, TermKind::Var(v) if p.entry.params.iter().any(|q| q.id == v.id))
                {
                    out.insert("case on an input");
                }
            }
            TermKind::If(c, _, _) => {
                out.insert("if");
                if mentions(c, &|t| {
                    matches!(&t.kind, TermKind::Prim(op, args)
                        if args.len() == 2 && args[0].ty == Type::Real
                            && *op.result() == Type::Bool)
                }) {
                    out.insert("if on a comparison");
                }
            }
            TermKind::Inl(..) => _ = out.insert("inl"),
            TermKind::Inr(..) => _ = out.insert("inr"),
            TermKind::Lam(..) => _ = out.insert("lambda"),
            TermKind::Array(..) => _ = out.insert("array literal"),
            TermKind::Replicate(..) => _ = out.insert("replicate"),
            TermKind::Loop(f, x, tape) => {
                out.insert(if *tape { "taped loop" } else { "loop" });
                if matches!(x.ty.as_prod(), Some((_, Type::Fun(_)))) {
                    out.insert("loop with a function state");
                }
                if mentions(
                    f,
                    &|t| matches!(&t.kind, TermKind::Prim(p, _) if p.name() == "gt"),
                ) {
                    out.insert("loop on a real condition");
                }
                if mentions(f, &|t| matches!(&t.kind, TermKind::Length(_))) {
                    out.insert("loop over an array");
                }
                if free_vars(f).iter().any(|v| !matches!(v.ty, Type::Array(_))) {
                    out.insert("loop capturing a variable");
                }
            }
            TermKind::Fix(f) => {
                out.insert("recursion");
                let (g, _, body) = crate::source::term::fix_parts(f);
                let mut calls = 0;
                let mut stack = vec![&body];
                while let Some(t) = stack.pop() {
                    if matches!(&t.kind, TermKind::App(h, _) if matches!(&h.kind, TermKind::Var(v) if v.id == g.id))
                    {
                        calls += 1;
                    }
                    stack.extend(t.children());
                }
                if calls >= 2 {
                    out.insert("tree recursion");
                }
                if !free_vars(f).is_empty() {
                    out.insert("recursion capturing a variable");
                }
            }
            TermKind::Length(..) => _ = out.insert("length"),
            TermKind::Map(f, _) => {
                out.insert("map");
                funs.push(f);
            }
            TermKind::Map2(f, _, _) => {
                out.insert("map2");
                funs.push(f);
            }
            TermKind::Build(_, f) => {
                out.insert("build");
                funs.push(f);
            }
            TermKind::Index(_, i) => {
                out.insert("index");
                if mentions(
                    i,
                    &|t| matches!(&t.kind, TermKind::Var(v) if builds.contains(&v.id)),
                ) {
                    out.insert("index by a build's index");
                }
            }
            _ => {}
        }
        for f in funs {
            let free = free_vars(f);
            if !free.is_empty() {
                out.insert("closure in map/build");
            }
            if free.iter().any(|v| matches!(v.ty, Type::Fun(_))) {
                out.insert("captured function in map/build");
            }
        }
        for c in t.children() {
            let inner = match (&t.kind, &c.kind) {
                (TermKind::Build(_, f), TermKind::Lam(i, _)) if std::ptr::eq(f, c) => {
                    let mut b = (*builds).clone();
                    b.push(i.id);
                    Rc::new(b)
                }
                _ => builds.clone(),
            };
            stack.push((c, inner));
        }
    }
    out
}

/// Whether some subterm of `t` satisfies `pred`.
fn mentions(t: &Term, pred: &dyn Fn(&Term) -> bool) -> bool {
    let mut stack = vec![t];
    while let Some(t) = stack.pop() {
        if pred(t) {
            return true;
        }
        stack.extend(t.children());
    }
    false
}

/// The free variables of `t` (variables are unique, so a variable is free iff no binder inside
/// `t` binds it).
fn free_vars(t: &Term) -> Vec<Var> {
    use std::collections::{BTreeMap, BTreeSet};
    let mut used: BTreeMap<crate::source::term::VarId, Var> = BTreeMap::new();
    let mut bound = BTreeSet::new();
    let mut stack = vec![t];
    while let Some(t) = stack.pop() {
        match &t.kind {
            TermKind::Var(v) => {
                used.insert(v.id, v.clone());
            }
            TermKind::Lam(x, _) => {
                bound.insert(x.id);
            }
            TermKind::Let(p, _, _) => bound.extend(p.vars().iter().map(|v| v.id)),
            TermKind::Case(_, p, _, q, _) => {
                bound.extend(p.vars().iter().chain(q.vars().iter()).map(|v| v.id))
            }
            _ => {}
        }
        stack.extend(t.children());
    }
    used.into_iter()
        .filter(|(id, _)| !bound.contains(id))
        .map(|(_, v)| v)
        .collect()
}
