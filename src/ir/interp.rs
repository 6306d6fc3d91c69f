//! The reference interpreter of the IR: the plain, obviously-right execution every other
//! backend is tested against.
//!
//! Values ([`Val`]) mirror the IR types; additive operations follow the semantics of the module
//! doc of [`super`] (arrays padded with zeros, lists concatenated, strong-zero scaling as in the
//! target language's `Lin::scale`), `sum` uses the fixed order of
//! [`crate::value::SumOrder`], and primitives run their registered evaluation, so a value
//! computed here is bit for bit the value of the reference evaluators wherever those sum in the
//! same order. Runtime errors carry the position of their operation's site.

use super::{Arm, Atom, Block, Expr, FuncId, Op, Place, Program, Step, Stmt, Ty, TyKind, Types};
use crate::deep::deep;
use crate::error::Result;
use crate::prim::Scalar;
use crate::types::Type;
use crate::value::{self, SumOrder, Value};
use rustc_hash::FxHashMap;
use std::rc::Rc;

/// A run-time value of the IR.
#[derive(Clone, Debug)]
pub enum Val {
    /// A real.
    F64(f64),
    /// An integer.
    I64(i64),
    /// A boolean.
    Bool(bool),
    /// `()`.
    Unit,
    /// A tuple.
    Tuple(Rc<[Val]>),
    /// An array, or a list (of key/value tuples).
    Array(Rc<Vec<Val>>),
    /// An enum value: tag and payload.
    Enum(u32, Rc<Val>),
}

impl Val {
    fn f64(&self) -> f64 {
        match self {
            Val::F64(x) => *x,
            other => invariant("a real", other),
        }
    }
    fn i64(&self) -> i64 {
        match self {
            Val::I64(x) => *x,
            other => invariant("an integer", other),
        }
    }
    fn bool(&self) -> bool {
        match self {
            Val::Bool(x) => *x,
            other => invariant("a boolean", other),
        }
    }
    fn items(&self) -> &Rc<Vec<Val>> {
        match self {
            Val::Array(xs) => xs,
            other => invariant("an array", other),
        }
    }
    fn fields(&self) -> &[Val] {
        match self {
            Val::Tuple(xs) => xs,
            other => invariant("a tuple", other),
        }
    }
}

#[cold]
fn invariant(what: &str, found: &Val) -> ! {
    panic!("internal error: IR value {found:?} is not {what} (the IR checker rules this out)")
}

/// Runs function `f` of `p` on `args`.
pub fn run(p: &Program, f: FuncId, args: Vec<Val>) -> Result<Val> {
    for (x, a) in p.func(f).params.iter().zip(&args) {
        check_lengths(&p.types, x.ty, a)?;
    }
    Interp { p }.call(f, args)
}

/// Checks that every array in an argument `v` of type `t` has at most
/// [`value::MAX_ARRAY_LEN`] elements, as every array a program makes has: the bound that
/// [`super::bounds`] proves integer arithmetic on lengths and indices safe with.
pub fn check_lengths(types: &Types, t: Ty, v: &Val) -> Result<()> {
    lengths_within(types, t, v, value::MAX_ARRAY_LEN as usize)
}

fn lengths_within(types: &Types, t: Ty, v: &Val, limit: usize) -> Result<()> {
    if !types.has_arrays(t) {
        return Ok(());
    }
    deep(|| match (types.kind(t), v) {
        (TyKind::Array(e), Val::Array(xs)) => {
            if xs.len() > limit {
                return Err(crate::error::Error::runtime(format!(
                    "an argument's array has {} elements, over the limit of {limit} elements",
                    xs.len(),
                )));
            }
            if !types.has_arrays(*e) {
                return Ok(());
            }
            xs.iter()
                .try_for_each(|x| lengths_within(types, *e, x, limit))
        }
        (TyKind::Tuple(cs), Val::Tuple(xs)) => cs
            .iter()
            .zip(xs.iter())
            .try_for_each(|(c, x)| lengths_within(types, *c, x, limit)),
        (TyKind::Enum(e), Val::Enum(tag, x)) => {
            let payload = types.enums()[*e as usize].variants[*tag as usize].1;
            lengths_within(types, payload, x, limit)
        }
        _ => Ok(()),
    })
}

struct Interp<'a> {
    p: &'a Program,
}

type Frame = FxHashMap<u32, Val>;

/// How a block ended.
enum Flow {
    Value(Val),
    Break,
}

impl Interp<'_> {
    fn call(&self, f: FuncId, args: Vec<Val>) -> Result<Val> {
        let func = self.p.func(f);
        if let Some(s) = func.rec {
            // One recursive call of a `def rec`: a step, a level of the depth limit, and a
            // fresh stack segment when the current one runs low (the engine's own rule).
            let at = self.p.sites[s.0 as usize].span;
            return crate::steps::recursive_call(at, || self.body(func, args));
        }
        self.body(func, args)
    }

    fn body(&self, func: &super::Func, args: Vec<Val>) -> Result<Val> {
        let mut frame = Frame::default();
        for (x, a) in func.params.iter().zip(args) {
            frame.insert(x.id, a);
        }
        match self.block(&func.body, &mut frame)? {
            Flow::Value(v) => Ok(v),
            Flow::Break => panic!("internal error: break outside a loop"),
        }
    }

    fn atom(&self, a: &Atom, frame: &Frame) -> Val {
        match a {
            Atom::Var(x) => frame
                .get(&x.id)
                .cloned()
                .unwrap_or_else(|| panic!("internal error: unbound IR variable {x:?}")),
            Atom::F64(x) => Val::F64(*x),
            Atom::I64(i) => Val::I64(*i),
            Atom::Bool(b) => Val::Bool(*b),
            Atom::Unit => Val::Unit,
        }
    }

    fn block(&self, b: &Block, frame: &mut Frame) -> Result<Flow> {
        deep(|| {
            for s in &b.stmts {
                if let Flow::Break = self.stmt(s, frame)? {
                    return Ok(Flow::Break);
                }
            }
            Ok(Flow::Value(self.atom(&b.result, frame)))
        })
    }

    /// A block that cannot break out (its value).
    fn value(&self, b: &Block, frame: &mut Frame) -> Result<Val> {
        match self.block(b, frame)? {
            Flow::Value(v) => Ok(v),
            Flow::Break => panic!("internal error: break out of a value block"),
        }
    }

    fn stmt(&self, s: &Stmt, frame: &mut Frame) -> Result<Flow> {
        match s {
            Stmt::Let(x, e) | Stmt::Mut(super::MutVar(x), e) => {
                let v = match self.expr(e, frame)? {
                    Flow::Value(v) => v,
                    Flow::Break => return Ok(Flow::Break),
                };
                frame.insert(x.id, v);
            }
            Stmt::Set(m, a) => {
                let v = self.atom(a, frame);
                frame.insert(m.0.id, v);
            }
            Stmt::AddTo {
                place,
                value,
                scale,
            } => {
                let mut x = self.atom(value, frame);
                let t = self.place_ty(place);
                if let Some(c) = scale {
                    x = scale_val(&self.p.types, t, self.atom(c, frame).f64(), &x);
                }
                let slot = self.place(place, frame);
                let cur = std::mem::replace(slot, Val::Unit);
                *slot = add(&self.p.types, t, cur, &x);
            }
            Stmt::Grow(place, n) => {
                let n = self.atom(n, frame).i64().max(0) as usize;
                let t = self.place_ty(place);
                let zero = zero(&self.p.types, self.p.types.elem(t));
                let slot = self.place(place, frame);
                if let Val::Array(xs) = slot
                    && xs.len() < n
                {
                    Rc::make_mut(xs).resize(n, zero);
                }
            }
            Stmt::For(i, n, body) => {
                let n = self.atom(n, frame).i64();
                for k in 0..n.max(0) {
                    frame.insert(i.id, Val::I64(k));
                    if let Flow::Break = self.block(body, frame)? {
                        return Ok(Flow::Break);
                    }
                }
            }
            Stmt::Do(e) => {
                if let Flow::Break = self.expr(e, frame)? {
                    return Ok(Flow::Break);
                }
            }
            Stmt::Loop(body) => loop {
                if let Flow::Break = self.block(body, frame)? {
                    break;
                }
            },
            Stmt::Break => return Ok(Flow::Break),
            Stmt::Check(c, s) => {
                let xs: Vec<i64> = c
                    .atoms()
                    .iter()
                    .map(|a| self.atom(a, frame).i64())
                    .collect();
                if let Some(e) = c.failure(&xs) {
                    return Err(e.or_span(self.p.sites[s.0 as usize].span));
                }
            }
        }
        Ok(Flow::Value(Val::Unit))
    }

    fn place_ty(&self, p: &Place) -> Ty {
        let types = &self.p.types;
        let mut t = p.root.0.ty;
        for s in &p.path {
            t = match s {
                Step::Field(k) => types.components(t)[*k as usize],
                Step::Elem(_) => types.elem(t),
            };
        }
        t
    }

    fn place<'f>(&self, p: &Place, frame: &'f mut Frame) -> &'f mut Val {
        let idx: Vec<Option<usize>> = p
            .path
            .iter()
            .map(|s| match s {
                Step::Field(_) => None,
                Step::Elem(i) => Some(self.atom(i, frame).i64() as usize),
            })
            .collect();
        let mut slot = frame
            .get_mut(&p.root.0.id)
            .unwrap_or_else(|| panic!("internal error: unbound IR mutable {:?}", p.root));
        for (s, i) in p.path.iter().zip(idx) {
            slot = match (s, slot) {
                (Step::Field(k), Val::Tuple(xs)) => {
                    let xs: &mut [Val] = Rc::make_mut(xs);
                    &mut xs[*k as usize]
                }
                (Step::Elem(_), Val::Array(xs)) => {
                    let i = i.expect("an element step");
                    let xs = Rc::make_mut(xs);
                    xs.get_mut(i).unwrap_or_else(|| {
                        panic!("internal error: IR place index {i} past the end (no grow)")
                    })
                }
                (_, other) => invariant("a place's container", other),
            };
        }
        slot
    }

    fn block_in(&self, b: &Block, frame: &mut Frame) -> Result<Flow> {
        self.block(b, frame)
    }

    fn arms(&self, v: &Val, arms: &[Arm], frame: &mut Frame) -> Result<Flow> {
        let (tag, payload) = match v {
            Val::Enum(tag, payload) => (*tag, payload),
            other => invariant("an enum value", other),
        };
        let arm = &arms[tag as usize];
        if let Some(x) = &arm.bind {
            frame.insert(x.id, (**payload).clone());
        }
        self.block_in(&arm.body, frame)
    }

    fn expr(&self, e: &Expr, frame: &mut Frame) -> Result<Flow> {
        let site = |s: &super::SiteId| self.p.sites[s.0 as usize].span;
        let v = match e {
            Expr::Atom(a) => self.atom(a, frame),
            Expr::Op(op, xs) => {
                let xs: Vec<Val> = xs.iter().map(|x| self.atom(x, frame)).collect();
                op_eval(*op, &xs)
            }
            Expr::Prim(p, xs, s) => {
                let xs: Vec<Val> = xs.iter().map(|x| self.atom(x, frame)).collect();
                self.prim(p, &xs).map_err(|e| e.or_span(site(s)))?
            }
            Expr::Tuple(xs) => Val::Tuple(xs.iter().map(|x| self.atom(x, frame)).collect()),
            Expr::Proj(a, k) => self.atom(a, frame).fields()[*k as usize].clone(),
            Expr::Variant(_, k, a) => Val::Enum(*k, Rc::new(self.atom(a, frame))),
            Expr::Array(_, xs) => {
                Val::Array(Rc::new(xs.iter().map(|x| self.atom(x, frame)).collect()))
            }
            Expr::Index(a, i, s) => {
                let xs = self.atom(a, frame);
                let i = self.atom(i, frame).i64();
                let xs = xs.items();
                let k = value::check_index(i, xs.len()).map_err(|e| e.or_span(site(s)))?;
                xs[k].clone()
            }
            Expr::IndexOr0(a, i) => {
                let xs = self.atom(a, frame);
                let i = self.atom(i, frame).i64();
                match usize::try_from(i).ok().and_then(|k| xs.items().get(k)) {
                    Some(x) => x.clone(),
                    None => zero(&self.p.types, self.p.types.elem(a.ty())),
                }
            }
            Expr::Len(a) => Val::I64(self.atom(a, frame).items().len() as i64),
            Expr::Build(n, i, b, s) => {
                let n = self.atom(n, frame).i64();
                let n = value::check_len("build", n).map_err(|e| e.or_span(site(s)))?;
                let mut out = Vec::with_capacity(n);
                for k in 0..n {
                    frame.insert(i.id, Val::I64(k as i64));
                    out.push(self.value(b, frame)?);
                }
                Val::Array(Rc::new(out))
            }
            Expr::Sum(n, i, b) => {
                let n = self.atom(n, frame).i64();
                let mut s = SumOrder::default();
                for k in 0..n.max(0) {
                    frame.insert(i.id, Val::I64(k));
                    s.push(self.value(b, frame)?.f64());
                }
                Val::F64(s.finish())
            }
            Expr::Replicate(n, x, s) => {
                let n = self.atom(n, frame).i64();
                let n = value::check_len("replicate", n).map_err(|e| e.or_span(site(s)))?;
                Val::Array(Rc::new(vec![self.atom(x, frame); n]))
            }
            Expr::If(c, a, b) => {
                let branch = if self.atom(c, frame).bool() { a } else { b };
                return self.block_in(branch, frame);
            }
            Expr::Match(a, arms) => {
                let v = self.atom(a, frame);
                return self.arms(&v, arms, frame);
            }
            Expr::Iterate(init, s, body, tape, at) => {
                let mut state = self.atom(init, frame);
                let mut entries = Vec::new();
                loop {
                    crate::steps::step(site(at))?;
                    frame.insert(s.id, state);
                    let mut r = self.value(body, frame)?;
                    if *tape {
                        let Val::Tuple(xs) = r else {
                            panic!("internal error: a taped step is not a pair")
                        };
                        entries.push(xs[1].clone());
                        r = xs[0].clone();
                    }
                    let Val::Enum(tag, v) = r else {
                        panic!("internal error: an iteration step is not a sum")
                    };
                    let v = Rc::try_unwrap(v).unwrap_or_else(|v| (*v).clone());
                    if tag == 0 {
                        state = v;
                    } else if *tape {
                        break Val::Tuple(vec![v, Val::Array(Rc::new(entries))].into());
                    } else {
                        break v;
                    }
                }
            }
            Expr::Call(f, xs) => {
                let xs: Vec<Val> = xs.iter().map(|x| self.atom(x, frame)).collect();
                self.call(*f, xs)?
            }
            Expr::Zero(t) => zero(&self.p.types, *t),
            Expr::Add(a, b) => {
                let x = self.atom(a, frame);
                let y = self.atom(b, frame);
                add(&self.p.types, a.ty(), x, &y)
            }
            Expr::Scale(c, a) => {
                let c = self.atom(c, frame).f64();
                scale_val(&self.p.types, a.ty(), c, &self.atom(a, frame))
            }
            Expr::Get(m) => frame[&m.0.id].clone(),
            Expr::Take(m) => frame
                .remove(&m.0.id)
                .unwrap_or_else(|| panic!("internal error: take of unbound {m:?}")),
        };
        Ok(Flow::Value(v))
    }

    fn prim(&self, p: &crate::prim::Prim, xs: &[Val]) -> Result<Val> {
        if let Some(s) = p.scalar() {
            match (s, xs) {
                (Scalar::Real1(f), [a]) => return Ok(Val::F64(f(a.f64()))),
                (Scalar::Real2(f), [a, b]) => return Ok(Val::F64(f(a.f64(), b.f64()))),
                (Scalar::RealCmp(f), [a, b]) => return Ok(Val::Bool(f(&a.f64(), &b.f64()))),
                (Scalar::Int2(f), [a, b]) => {
                    if let Some(r) = f(a.i64(), b.i64()) {
                        return Ok(Val::I64(r));
                    }
                }
                (Scalar::IntCmp(f), [a, b]) => return Ok(Val::Bool(f(&a.i64(), &b.i64()))),
                _ => {}
            }
        }
        let args: Vec<Value> = xs
            .iter()
            .zip(p.params())
            .map(|(x, t)| to_value(t, x))
            .collect();
        let r = p.eval_args(args)?;
        Ok(from_value(p.result(), &r))
    }
}

fn op_eval(op: Op, xs: &[Val]) -> Val {
    match op {
        Op::FAdd => Val::F64(xs[0].f64() + xs[1].f64()),
        Op::FMul => Val::F64(xs[0].f64() * xs[1].f64()),
        Op::FNeg => Val::F64(-xs[0].f64()),
        Op::IToF => Val::F64(xs[0].i64() as f64),
        Op::IEq => Val::Bool(xs[0].i64() == xs[1].i64()),
        Op::ILt => Val::Bool(xs[0].i64() < xs[1].i64()),
        Op::IAdd => Val::I64(xs[0].i64().wrapping_add(xs[1].i64())),
        Op::IMax => Val::I64(xs[0].i64().max(xs[1].i64())),
        Op::Not => Val::Bool(!xs[0].bool()),
    }
}

/// The zero of an additive type.
pub fn zero(types: &Types, t: Ty) -> Val {
    deep(|| match types.kind(t) {
        TyKind::F64 => Val::F64(0.0),
        TyKind::Unit => Val::Unit,
        TyKind::Tuple(cs) => Val::Tuple(cs.iter().map(|c| zero(types, *c)).collect()),
        TyKind::Array(_) | TyKind::List(..) => Val::Array(Rc::new(Vec::new())),
        other => panic!("internal error: zero of the non-additive {other:?}"),
    })
}

/// `a + b` at an additive type (arrays padded, lists concatenated). Takes `a` by value so an
/// accumulator is updated in place.
pub fn add(types: &Types, t: Ty, a: Val, b: &Val) -> Val {
    deep(|| match (types.kind(t), a) {
        (TyKind::F64, Val::F64(x)) => Val::F64(x + b.f64()),
        (TyKind::Unit, _) => Val::Unit,
        (TyKind::Tuple(cs), Val::Tuple(mut xs)) => {
            let ys = b.fields();
            let xs_mut: &mut [Val] = Rc::make_mut(&mut xs);
            for ((x, y), c) in xs_mut.iter_mut().zip(ys).zip(cs) {
                let cur = std::mem::replace(x, Val::Unit);
                *x = add(types, *c, cur, y);
            }
            Val::Tuple(xs)
        }
        (TyKind::Array(e), Val::Array(mut xs)) => {
            let ys = b.items();
            if xs.is_empty() {
                return Val::Array(ys.clone());
            }
            let v = Rc::make_mut(&mut xs);
            for (k, y) in ys.iter().enumerate() {
                if k < v.len() {
                    let cur = std::mem::replace(&mut v[k], Val::Unit);
                    v[k] = add(types, *e, cur, y);
                } else {
                    v.push(y.clone());
                }
            }
            Val::Array(xs)
        }
        (TyKind::List(..), Val::Array(mut xs)) => {
            let ys = b.items();
            if xs.is_empty() {
                return Val::Array(ys.clone());
            }
            Rc::make_mut(&mut xs).extend(ys.iter().cloned());
            Val::Array(xs)
        }
        (k, a) => panic!("internal error: add at {k:?} of {a:?}"),
    })
}

/// `c * a` with a strong zero: exactly zero where `c` or the scaled real is zero (as
/// `Lin::scale`).
pub fn scale_val(types: &Types, t: Ty, c: f64, a: &Val) -> Val {
    if c == 0.0 {
        return zero(types, t);
    }
    deep(|| match (types.kind(t), a) {
        (TyKind::F64, Val::F64(y)) => Val::F64(if *y == 0.0 { 0.0 } else { c * y }),
        (TyKind::Unit, _) => Val::Unit,
        (TyKind::Tuple(cs), Val::Tuple(xs)) => Val::Tuple(
            xs.iter()
                .zip(cs)
                .map(|(x, t)| scale_val(types, *t, c, x))
                .collect(),
        ),
        (TyKind::Array(e), Val::Array(xs)) => Val::Array(Rc::new(
            xs.iter().map(|x| scale_val(types, *e, c, x)).collect(),
        )),
        (TyKind::List(_, v), Val::Array(xs)) => Val::Array(Rc::new(
            xs.iter()
                .map(|kv| {
                    let f = kv.fields();
                    Val::Tuple(Rc::from(vec![f[0].clone(), scale_val(types, *v, c, &f[1])]))
                })
                .collect(),
        )),
        (k, a) => panic!("internal error: scale at {k:?} of {a:?}"),
    })
}

/// A source value as an IR value (of the type [`super::lower::source_ty`] gives).
pub fn from_value(ty: &Type, v: &Value) -> Val {
    deep(|| match (ty, v) {
        (Type::Real, Value::Real(x)) => Val::F64(*x),
        (Type::Int, Value::Int(i)) => Val::I64(*i),
        (Type::Bool, Value::Bool(b)) => Val::Bool(*b),
        (Type::Unit, _) => Val::Unit,
        (Type::Prod(p), Value::Pair(q)) => Val::Tuple(Rc::from(vec![
            from_value(&p.0, &q.0),
            from_value(&p.1, &q.1),
        ])),
        (Type::Sum(p), Value::Inl(x)) => Val::Enum(0, Rc::new(from_value(&p.0, x))),
        (Type::Sum(p), Value::Inr(x)) => Val::Enum(1, Rc::new(from_value(&p.1, x))),
        (Type::Array(a), _) => Val::Array(Rc::new(
            v.array_items().iter().map(|x| from_value(a, x)).collect(),
        )),
        _ => panic!("internal error: value {v} at type {ty}"),
    })
}

/// An IR value of a first-order source type as a source value.
pub fn to_value(ty: &Type, v: &Val) -> Value {
    deep(|| match (ty, v) {
        (Type::Real, Val::F64(x)) => Value::Real(*x),
        (Type::Int, Val::I64(i)) => Value::Int(*i),
        (Type::Bool, Val::Bool(b)) => Value::Bool(*b),
        (Type::Unit, _) => Value::Unit,
        (Type::Prod(p), Val::Tuple(xs)) => {
            Value::pair(to_value(&p.0, &xs[0]), to_value(&p.1, &xs[1]))
        }
        (Type::Sum(p), Val::Enum(0, x)) => Value::inl(to_value(&p.0, x)),
        (Type::Sum(p), Val::Enum(_, x)) => Value::inr(to_value(&p.1, x)),
        (Type::Array(a), Val::Array(xs)) => {
            Value::array(a, xs.iter().map(|x| to_value(a, x)).collect())
        }
        _ => panic!("internal error: IR value {v:?} at type {ty}"),
    })
}

/// The (co)tangent of a value `x : ty` given as an IR value of the linear representation of
/// its tangent type, as a source value of type `ty.tangent()` (zero-padded to `x`'s shape; a
/// sum's tangent on `x`'s side): [`crate::ad::tangent::from_tangent`] for IR values.
pub fn tangent_to_value(ty: &Type, x: &Value, t: &Val) -> Value {
    deep(|| match ty {
        Type::Real => Value::Real(t.f64()),
        Type::Int | Type::Bool | Type::Unit => Value::Unit,
        Type::Prod(p) => {
            let (xa, xb) = x.expect_pair();
            let ts = t.fields();
            Value::pair(
                tangent_to_value(&p.0, xa, &ts[0]),
                tangent_to_value(&p.1, xb, &ts[1]),
            )
        }
        Type::Sum(p) => {
            let ts = t.fields();
            match x {
                Value::Inl(a) => Value::inl(tangent_to_value(&p.0, a, &ts[0])),
                Value::Inr(b) => Value::inr(tangent_to_value(&p.1, b, &ts[1])),
                other => panic!("internal error: a value of a sum type is {other}"),
            }
        }
        Type::Array(a) => {
            let items = t.items();
            let tt = a.tangent().expect("first-order");
            let xs = x.array_items();
            let out = xs
                .iter()
                .enumerate()
                .map(|(i, xi)| match items.get(i) {
                    Some(ti) => tangent_to_value(a, xi, ti),
                    None => tangent_to_value(a, xi, &zero_tangent(a)),
                })
                .collect();
            Value::array(&tt, out)
        }
        Type::Fun(_) => panic!("internal error: tangent of a function type"),
    })
}

/// A structural zero for [`tangent_to_value`] (arrays empty, tuples of zeros).
pub fn zero_tangent(ty: &Type) -> Val {
    deep(|| match ty {
        Type::Real => Val::F64(0.0),
        Type::Int | Type::Bool | Type::Unit => Val::Unit,
        Type::Prod(p) | Type::Sum(p) => {
            Val::Tuple(Rc::from(vec![zero_tangent(&p.0), zero_tangent(&p.1)]))
        }
        Type::Array(_) => Val::Array(Rc::new(Vec::new())),
        Type::Fun(_) => panic!("internal error: tangent of a function type"),
    })
}

/// A (co)tangent value of type `ty.tangent()` (checked to fit `x`) as an IR value of the
/// linear representation.
pub fn tangent_from_value(ty: &Type, t: &Value) -> Val {
    deep(|| match (ty, t) {
        (Type::Real, Value::Real(d)) => Val::F64(*d),
        (Type::Int | Type::Bool | Type::Unit, _) => Val::Unit,
        (Type::Prod(p), Value::Pair(q)) => Val::Tuple(Rc::from(vec![
            tangent_from_value(&p.0, &q.0),
            tangent_from_value(&p.1, &q.1),
        ])),
        (Type::Sum(p), Value::Inl(d)) => Val::Tuple(Rc::from(vec![
            tangent_from_value(&p.0, d),
            zero_tangent(&p.1),
        ])),
        (Type::Sum(p), Value::Inr(d)) => Val::Tuple(Rc::from(vec![
            zero_tangent(&p.0),
            tangent_from_value(&p.1, d),
        ])),
        (Type::Array(a), _) => Val::Array(Rc::new(
            t.array_items()
                .iter()
                .map(|x| tangent_from_value(a, x))
                .collect(),
        )),
        _ => panic!("internal error: tangent {t} at type {ty}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argument_arrays_are_checked_against_the_limit_at_every_depth() {
        let mut types = Types::default();
        let row = types.array(Ty::F64);
        let rows = types.array(row);
        let pair = types.tuple(vec![Ty::F64, rows]);
        let e = types.new_enum("E");
        types.add_variant(e, "l", Ty::F64);
        types.add_variant(e, "r", pair);
        let reals = |n: usize| Val::Array(Rc::new(vec![Val::F64(1.0); n]));
        let v = |r: Vec<Val>| {
            Val::Enum(
                1,
                Rc::new(Val::Tuple(
                    vec![Val::F64(0.0), Val::Array(Rc::new(r))].into(),
                )),
            )
        };
        assert!(lengths_within(&types, e, &v(vec![reals(3), reals(2)]), 3).is_ok());
        assert!(lengths_within(&types, e, &v(vec![reals(4)]), 3).is_err());
        assert!(lengths_within(&types, e, &v(vec![reals(1); 4]), 3).is_err());
        assert!(lengths_within(&types, e, &Val::Enum(0, Rc::new(Val::F64(1.0))), 0).is_ok());
    }
}
