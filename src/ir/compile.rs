//! A definition compiled to the IR: its primal, forward and reverse code in one [`Program`],
//! with conversions between source values and IR values, run by the reference interpreter
//! ([`super::interp`]) or handed to a backend.
//!
//! The code is what the CLI differentiates: the optimised program ([`crate::optimize`]),
//! differentiated by forward and reverse CHAD, simplified, then lowered ([`super::lower`]).

use super::interp::{self, Val};
use super::lower::Lowering;
use super::{FuncId, Program};
use crate::ad::{Jvp, Vjp};
use crate::error::{Error, ErrorKind, Result};
use crate::optimize::optimize;
use crate::simplify::simplify;
use crate::source::term::Entry;
use crate::target::embed;
use crate::types::Type;
use crate::value::Value;

/// The IR functions of one definition.
#[derive(Clone, Debug)]
pub struct DefCode {
    /// The definition (its parameters and result type; the body as written).
    pub entry: Entry,
    /// `NAME(x1, .., xn)`: the primal.
    pub primal: FuncId,
    /// `NAME_jvp(ctx, dctx) = (y, dy)`, if compiled.
    pub jvp: Option<FuncId>,
    /// `NAME_vjp(ctx, ct) = (y, dctx)`, if compiled.
    pub vjp: Option<FuncId>,
}

/// Several definitions compiled into one IR program (sharing its types and closures).
pub struct Module {
    /// The program.
    pub program: Program,
    /// The definitions, in the order given.
    pub defs: Vec<DefCode>,
}

impl Module {
    /// Compiles each entry's primal and, where `parts` asks and AD supports the entry (first-
    /// order parameters and result), its derivatives; an entry AD cannot differentiate gets
    /// only its primal.
    pub fn new(entries: &[Entry], parts: Parts) -> Result<Module> {
        let mut low = Lowering::new();
        let mut defs = Vec::new();
        for entry in entries {
            let optimized = optimize(entry);
            let (params, body) = embed::entry(&optimized);
            let name = crate::ir::lower::sanitize(&entry.name);
            let primal = low.function(&name, &params, &simplify(&body))?;
            let jvp = match parts.jvp.then(|| Jvp::new(&optimized)).transpose() {
                Ok(Some(j)) => {
                    let j = j.map_body(simplify);
                    // A recursive definition's derivatives are not lowered (see
                    // `lower::unsupported_recursive_derivative`): only its primal, unless asked.
                    if !parts.required && super::lower::recursive(j.mor()) {
                        None
                    } else {
                        Some(low.jvp(&format!("{name}_jvp"), j.mor())?)
                    }
                }
                Ok(None) => None,
                Err(e) if parts.required => return Err(e),
                Err(_) => None,
            };
            let vjp = match parts.vjp.then(|| Vjp::new(&optimized)).transpose() {
                Ok(Some(v)) => {
                    let v = v.map_body(simplify);
                    // A recursive definition's derivatives are not lowered (see
                    // `lower::unsupported_recursive_derivative`): only its primal, unless asked.
                    if !parts.required && super::lower::recursive(v.mor()) {
                        None
                    } else {
                        Some(low.vjp(&format!("{name}_vjp"), v.mor())?)
                    }
                }
                Ok(None) => None,
                Err(e) if parts.required => return Err(e),
                Err(_) => None,
            };
            defs.push(DefCode {
                entry: entry.clone(),
                primal,
                jvp,
                vjp,
            });
        }
        let mut program = low.finish()?;
        crate::ir::opt::hoist_grows(&mut program);
        crate::ir::opt::fuse_sums(&mut program);
        crate::ir::opt::hoist_invariants(&mut program);
        crate::ir::opt::lone_adds(&mut program);
        crate::ir::opt::unzip_arrays(&mut program);
        crate::ir::opt::first_adds(&mut program);
        // Again: `hoist_invariants` and `unzip_arrays` make more grows loop-invariant.
        crate::ir::opt::hoist_grows(&mut program);
        crate::ir::bounds::prove(&mut program);
        // Last: rustc's time grows faster than linearly in the size of one function.
        crate::ir::split::split_long_functions(&mut program);
        Ok(Module { program, defs })
    }
}

/// A definition's primal and derivatives as one IR program.
pub struct Compiled {
    /// The program.
    pub program: Program,
    /// The definition's functions (also reachable through `Deref`).
    pub def: DefCode,
}

impl std::ops::Deref for Compiled {
    type Target = DefCode;
    fn deref(&self) -> &DefCode {
        &self.def
    }
}

/// Which code to compile.
#[derive(Clone, Copy, Debug)]
pub struct Parts {
    /// The forward derivative.
    pub jvp: bool,
    /// The reverse derivative.
    pub vjp: bool,
    /// Whether a derivative AD cannot build is an error (else it is left out).
    pub required: bool,
}

impl Parts {
    /// The primal only.
    pub const PRIMAL: Parts = Parts {
        jvp: false,
        vjp: false,
        required: true,
    };
    /// The primal and forward mode (required).
    pub const JVP: Parts = Parts {
        jvp: true,
        vjp: false,
        required: true,
    };
    /// The primal and reverse mode (required).
    pub const VJP: Parts = Parts {
        jvp: false,
        vjp: true,
        required: true,
    };
    /// Primal, forward and reverse, all required.
    pub const ALL: Parts = Parts {
        jvp: true,
        vjp: true,
        required: true,
    };
}

impl Compiled {
    /// Compiles the primal and, for first-order entries, both derivatives.
    pub fn new(entry: &Entry) -> Result<Compiled> {
        Compiled::with_parts(entry, Parts::ALL)
    }

    /// Compiles the primal and the chosen derivatives.
    pub fn with_parts(entry: &Entry, parts: Parts) -> Result<Compiled> {
        let mut m = Module::new(std::slice::from_ref(entry), parts)?;
        let def = m.defs.pop().expect("one definition");
        Ok(Compiled {
            program: m.program,
            def,
        })
    }

    /// The primal on the reference interpreter.
    pub fn eval(&self, args: &[Value]) -> Result<Value> {
        let xs = self.args(args)?;
        let v = interp::run(&self.program, self.primal, xs)?;
        Ok(interp::to_value(&self.entry.body.ty, &v))
    }

    /// Forward mode on the reference interpreter: the value and the tangent of the result.
    pub fn jvp(&self, args: &[Value], tangents: &[Value]) -> Result<(Value, Value)> {
        let f = self.def.jvp.ok_or_else(|| not_compiled("forward mode"))?;
        let x = self.context(args)?;
        let dx = self.context_tangent(args, tangents)?;
        let r = interp::run(&self.program, f, vec![x, dx])?;
        Ok(self.jvp_result(&r))
    }

    /// Reverse mode on the reference interpreter: the value and each argument's cotangent.
    pub fn vjp(&self, args: &[Value], cotangent: &Value) -> Result<(Value, Vec<Value>)> {
        let f = self.def.vjp.ok_or_else(|| not_compiled("reverse mode"))?;
        let x = self.context(args)?;
        let ct = self.cotangent(cotangent)?;
        let r = interp::run(&self.program, f, vec![x, ct])?;
        Ok(self.vjp_result(args, &r))
    }

    /// The gradient of a `Real`-valued definition on the reference interpreter.
    pub fn grad(&self, args: &[Value]) -> Result<(Value, Vec<Value>)> {
        self.vjp(args, &Value::Real(1.0))
    }
}

/// Conversions between source values and the IR values of a definition's functions.
impl DefCode {
    /// The parameters' types.
    pub fn param_types(&self) -> Vec<Type> {
        self.entry.param_types()
    }

    /// The context type `((Unit, A1), ..) , An)` of the derivatives.
    pub fn context_type(&self) -> Type {
        self.param_types().into_iter().fold(Type::Unit, Type::prod)
    }

    /// The arguments as IR values, one per parameter (checked against the parameters).
    pub fn args(&self, args: &[Value]) -> Result<Vec<Val>> {
        crate::eval::check_args(&self.entry, args)?;
        Ok(self
            .param_types()
            .iter()
            .zip(args)
            .map(|(t, a)| interp::from_value(t, a))
            .collect())
    }

    /// The arguments as one IR context value (the derivatives' first parameter).
    pub fn context(&self, args: &[Value]) -> Result<Val> {
        crate::eval::check_args(&self.entry, args)?;
        let ctx = crate::ccc::eval::context_value(args);
        Ok(interp::from_value(&self.context_type(), &ctx))
    }

    /// The tangents, one per parameter, as one IR value of the context's tangent.
    pub fn context_tangent(&self, args: &[Value], tangents: &[Value]) -> Result<Val> {
        self.check_tangents(args, tangents)?;
        let mut out = Val::Unit;
        for (p, t) in self.entry.params.iter().zip(tangents) {
            out = Val::Tuple(vec![out, interp::tangent_from_value(&p.ty, t)].into());
        }
        Ok(out)
    }

    /// Checks the tangents: one per argument, each a tangent at its argument.
    pub fn check_tangents(&self, args: &[Value], tangents: &[Value]) -> Result<()> {
        if tangents.len() != args.len() {
            return Err(Error::new(
                ErrorKind::Argument,
                format!(
                    "{} tangents given for {} arguments",
                    tangents.len(),
                    args.len()
                ),
            ));
        }
        for ((p, a), t) in self.entry.params.iter().zip(args).zip(tangents) {
            // The same validation (and messages) as the engine's jvp.
            crate::ad::tangent::to_tangent(&p.ty, a, t)?;
        }
        Ok(())
    }

    /// The value and tangent in the result of `NAME_jvp`.
    pub fn jvp_result(&self, r: &Val) -> (Value, Value) {
        let (y, dy) = pair(r);
        let ty = &self.entry.body.ty;
        let y = interp::to_value(ty, y);
        let dy = interp::tangent_to_value(ty, &y, dy);
        (y, dy)
    }

    /// The output cotangent as an IR value (checked against the result type).
    pub fn cotangent(&self, cotangent: &Value) -> Result<Val> {
        self.check_cotangent(cotangent)?;
        Ok(interp::tangent_from_value(&self.entry.body.ty, cotangent))
    }

    /// Checks the output cotangent against the result type.
    pub fn check_cotangent(&self, cotangent: &Value) -> Result<()> {
        match self.entry.body.ty.tangent() {
            Some(tt) if cotangent.has_type(&tt) => Ok(()),
            Some(tt) => Err(Error::new(
                ErrorKind::Argument,
                format!("cotangent: `{cotangent}` is not a tangent: it must have type `{tt}`"),
            )),
            None => Err(not_compiled("reverse mode")),
        }
    }

    /// The value and the arguments' cotangents in the result of `NAME_vjp`.
    pub fn vjp_result(&self, args: &[Value], r: &Val) -> (Value, Vec<Value>) {
        let (y, mut ctx) = pair(r);
        let y = interp::to_value(&self.entry.body.ty, y);
        let n = args.len();
        let mut out = vec![Value::Unit; n];
        for k in (0..n).rev() {
            let (rest, c) = pair(ctx);
            out[k] = interp::tangent_to_value(&self.entry.params[k].ty, &args[k], c);
            ctx = rest;
        }
        (y, out)
    }
}

fn pair(v: &Val) -> (&Val, &Val) {
    match v {
        Val::Tuple(xs) if xs.len() == 2 => (&xs[0], &xs[1]),
        other => panic!("internal error: expected an IR pair, found {other:?}"),
    }
}

fn not_compiled(what: &str) -> Error {
    Error::new(
        ErrorKind::Unsupported,
        format!("{what} was not compiled for this definition"),
    )
}

/// A `Real`-valued definition's Hessian-vector products as one IR function (forward over
/// reverse by dual numbers on the IR, [`super::dual`]): `NAME_hvp(x, dx)` returns the
/// reverse derivative's result for the cotangent 1, `(y, ∇f)`, and the gradient's derivative
/// along `dx`, `H dx`. The program also holds the definition's primal, forward and reverse code and the
/// forward derivative of each primitive the reverse code uses.
pub struct HvpCode {
    /// The program.
    pub program: Program,
    /// The definition's functions.
    pub def: DefCode,
    /// `NAME_hvp`.
    pub hvp: FuncId,
}

impl HvpCode {
    /// Compiles the Hessian-vector product of `entry` (an [`ErrorKind::Unsupported`] error
    /// where the dual transformation does not apply, see [`super::dual`]).
    pub fn new(entry: &Entry) -> Result<HvpCode> {
        let first = Module::new(std::slice::from_ref(entry), Parts::ALL)?;
        let vjp = first.defs[0]
            .vjp
            .ok_or_else(|| not_compiled("reverse mode"))?;
        let prims = prims_reached(&first.program, vjp);
        let mut entries = vec![entry.clone()];
        entries.extend(prims.iter().map(prim_entry));
        let mut m = Module::new(&entries, Parts::ALL)?;
        let mut jvps = super::dual::PrimJvps::new();
        for (p, d) in prims.iter().zip(&m.defs[1..]) {
            let j = d.jvp.ok_or_else(|| not_compiled("forward mode"))?;
            jvps.insert(p.name().to_string(), j);
        }
        let def = m.defs.swap_remove(0);
        let (jvp, vjp) = match (def.jvp, def.vjp) {
            (Some(j), Some(v)) => (j, v),
            _ => return Err(not_compiled("forward and reverse mode")),
        };
        let dxt = m.program.func(jvp).params[1].ty;
        let hvp = super::dual::Dual::new(&mut m.program, &jvps).hvp(vjp, dxt)?;
        crate::ir::opt::unzip_arrays(&mut m.program);
        crate::ir::opt::hoist_invariants(&mut m.program);
        crate::ir::opt::first_adds(&mut m.program);
        crate::ir::opt::hoist_grows(&mut m.program);
        crate::ir::bounds::prove(&mut m.program);
        Ok(HvpCode {
            program: m.program,
            def,
            hvp,
        })
    }

    /// The value, gradient and Hessian-vector product on the reference interpreter (as
    /// [`DefCode::hvp_result`]).
    pub fn run(&self, args: &[Value], tangents: &[Value]) -> Result<(Value, Value)> {
        let xs = self.def.hvp_args(args, tangents)?;
        let r = interp::run(&self.program, self.hvp, xs)?;
        Ok(self.def.hvp_result(args, &r))
    }
}

/// The arguments and result of [`HvpCode::hvp`].
impl DefCode {
    /// The arguments of `NAME_hvp`: the context and its tangent (one tangent per parameter).
    pub fn hvp_args(&self, args: &[Value], tangents: &[Value]) -> Result<Vec<Val>> {
        Ok(vec![
            self.context(args)?,
            self.context_tangent(args, tangents)?,
        ])
    }

    /// `NAME_hvp`'s result `((y, g), h)` as `((y, g), ((), h))`: the gradient `g` and the
    /// Hessian-vector product `h` tuples of one value per parameter (right-nested, a single
    /// one bare), the shape [`crate::ad::nested::Backend::hvp`] asks for (the derivative of
    /// `y` is not computed: `()`).
    pub fn hvp_result(&self, args: &[Value], r: &Val) -> (Value, Value) {
        let (r0, h) = pair(r);
        let (y, gs) = self.vjp_result(args, r0);
        let (_, hs) = self.vjp_result(args, &Val::Tuple(vec![Val::F64(0.0), h.clone()].into()));
        (
            Value::pair(y, right_nested(gs)),
            Value::pair(Value::Unit, right_nested(hs)),
        )
    }
}

fn right_nested(mut vs: Vec<Value>) -> Value {
    let mut out = match vs.pop() {
        Some(v) => v,
        None => return Value::Unit,
    };
    while let Some(v) = vs.pop() {
        out = Value::pair(v, out);
    }
    out
}

/// The primitives with reals in their result called by `f` and the functions it reaches.
fn prims_reached(p: &Program, f: FuncId) -> Vec<crate::prim::Prim> {
    let mut seen = std::collections::HashSet::new();
    let mut names = std::collections::HashSet::new();
    let mut out = Vec::new();
    let mut stack = vec![f];
    while let Some(g) = stack.pop() {
        if !seen.insert(g) {
            continue;
        }
        super::for_each_expr(&p.func(g).body, &mut |e| match e {
            super::Expr::Call(h, _) => stack.push(*h),
            super::Expr::Prim(q, ..)
                if crate::ir::dual::prim_has_real_result(q)
                    && names.insert(q.name().to_string()) =>
            {
                out.push(q.clone())
            }
            _ => {}
        });
    }
    out
}

/// `def p (x1 : A1) .. (xn : An) = p x1 .. xn`: a primitive as an entry, whose forward
/// derivative is the primitive's registered rule.
fn prim_entry(p: &crate::prim::Prim) -> Entry {
    use crate::source::term::{Term, TermKind, Var};
    let params: Vec<Var> = p
        .params()
        .iter()
        .enumerate()
        .map(|(k, t)| Var::fresh(format!("x{k}"), t.clone()))
        .collect();
    let body = Term::new(
        TermKind::Prim(p.clone(), params.iter().map(Term::var).collect()),
        crate::error::Span::default(),
    );
    Entry {
        name: format!("prim_{}", p.name()).into(),
        params,
        body,
    }
}
