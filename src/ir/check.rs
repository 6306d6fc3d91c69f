//! The IR's type checker: every lowered program is checked in the tests (and by
//! [`super::lower`] in debug builds).
//!
//! It verifies the invariants of the module doc of [`super`]: variables are defined before use
//! and only in scope (a `let` scopes over the rest of its block; parameters, loop indices and
//! match bindings over their blocks), every expression's operands have the types it needs,
//! additive operations (`zero`, `+`, scaling, `+=`, `grow`, `?0`-indexing) are used on
//! additive types only, places follow their variable's type, calls match their callee, match
//! arms cover the enum's variants in order, and `break` is inside a `loop`.

use super::{
    Arm, Atom, Block, Expr, Func, MutVar, Place, Program, Step, Stmt, Ty, TyKind, Types, Var,
};
use crate::deep::deep;

/// Checks a program; the error says where and what.
pub fn check(p: &Program) -> Result<(), String> {
    for f in &p.funcs {
        if let Some(s) = f.rec
            && s.0 as usize >= p.sites.len()
        {
            return Err(format!(
                "fn {}: recursion site {} does not exist",
                f.name, s.0
            ));
        }
        let mut c = Checker {
            p,
            scope: Vec::new(),
            defined: Default::default(),
            loops: 0,
        };
        c.func(f).map_err(|e| format!("in fn {}: {e}", f.name))?;
    }
    Ok(())
}

struct Checker<'a> {
    p: &'a Program,
    /// Variables in scope, in order of definition (for popping at the end of a block).
    scope: Vec<u32>,
    /// Type of each variable in scope, and whether it is mutable.
    defined: rustc_hash::FxHashMap<u32, (Ty, bool)>,
    loops: usize,
}

type R<T = ()> = Result<T, String>;

impl<'a> Checker<'a> {
    fn types(&self) -> &'a Types {
        &self.p.types
    }

    fn show(&self, t: Ty) -> String {
        self.types().show(t)
    }

    fn func(&mut self, f: &Func) -> R {
        for x in &f.params {
            self.define(x, false)?;
        }
        if f.accumulates {
            let acc = f
                .params
                .last()
                .ok_or("an accumulating function without parameters")?;
            self.same(acc.ty, f.ret, "an accumulating function's last parameter")?;
        }
        let t = self.block(&f.body)?;
        self.same(t, f.ret, "the function's result")
    }

    fn define(&mut self, x: &Var, mutable: bool) -> R {
        if x.ty.0 as usize >= self.types().len() {
            return Err(format!("variable {}_{} has an unknown type", x.name, x.id));
        }
        if self.defined.insert(x.id, (x.ty, mutable)).is_some() {
            return Err(format!("variable {}_{} is defined twice", x.name, x.id));
        }
        self.scope.push(x.id);
        Ok(())
    }

    fn same(&self, found: Ty, expected: Ty, what: &str) -> R {
        if found == expected {
            Ok(())
        } else {
            Err(format!(
                "{what} has type {}, expected {}",
                self.show(found),
                self.show(expected)
            ))
        }
    }

    fn var(&self, x: &Var, mutable: bool) -> R<Ty> {
        match self.defined.get(&x.id) {
            Some(&(t, m)) if m == mutable => {
                if t != x.ty {
                    return Err(format!("variable {}_{} used at another type", x.name, x.id));
                }
                Ok(t)
            }
            Some(_) => Err(format!(
                "variable {}_{} used as {}mutable",
                x.name,
                x.id,
                if mutable { "" } else { "im" }
            )),
            None => Err(format!("variable {}_{} is not in scope", x.name, x.id)),
        }
    }

    fn atom(&self, a: &Atom) -> R<Ty> {
        match a {
            Atom::Var(x) => self.var(x, false),
            _ => Ok(a.ty()),
        }
    }

    fn atom_is(&self, a: &Atom, t: Ty, what: &str) -> R {
        let found = self.atom(a)?;
        self.same(found, t, what)
    }

    fn additive(&self, t: Ty, what: &str) -> R {
        if self.types().is_additive(t) {
            Ok(())
        } else {
            Err(format!("{what} has the non-additive type {}", self.show(t)))
        }
    }

    fn array_elem(&self, t: Ty, what: &str) -> R<Ty> {
        match self.types().kind(t) {
            TyKind::Array(e) => Ok(*e),
            _ => Err(format!("{what} is not an array but {}", self.show(t))),
        }
    }

    /// Checks a block in a new scope; returns its result type.
    fn block(&mut self, b: &Block) -> R<Ty> {
        deep(|| {
            let mark = self.scope.len();
            let r = (|| {
                for s in &b.stmts {
                    self.stmt(s)?;
                }
                self.atom(&b.result)
            })();
            for id in self.scope.drain(mark..) {
                self.defined.remove(&id);
            }
            r
        })
    }

    /// Checks a block whose first variable is bound to `x` (a loop index, an arm's payload).
    fn block_with(&mut self, x: Option<&Var>, b: &Block) -> R<Ty> {
        let mark = self.scope.len();
        if let Some(x) = x {
            self.define(x, false)?;
        }
        let r = self.block(b);
        for id in self.scope.drain(mark..) {
            self.defined.remove(&id);
        }
        r
    }

    fn place(&self, p: &Place) -> R<Ty> {
        let mut t = self.var(&p.root.0, true)?;
        for s in &p.path {
            t = match (s, self.types().kind(t)) {
                (Step::Field(k), TyKind::Tuple(cs)) if (*k as usize) < cs.len() => cs[*k as usize],
                (Step::Elem(i), TyKind::Array(e)) => {
                    self.atom_is(i, Ty::I64, "an element index")?;
                    *e
                }
                _ => return Err(format!("a place's path does not fit {}", self.show(t))),
            };
        }
        Ok(t)
    }

    fn stmt(&mut self, s: &Stmt) -> R {
        match s {
            Stmt::Let(x, Expr::Match(a, arms)) if arms.is_empty() => {
                // A match on an empty enum (a closure type no closure of which is ever made)
                // cannot run: it has any type.
                let t = self.atom(a)?;
                match self.types().kind(t) {
                    TyKind::Enum(e) if self.types().enums()[*e as usize].variants.is_empty() => {}
                    _ => return Err(format!("an empty match on {}", self.show(t))),
                }
                self.define(x, false)
            }
            Stmt::Let(x, e) => {
                let t = self.expr(e)?;
                self.same(t, x.ty, &format!("the value of {}_{}", x.name, x.id))?;
                self.define(x, false)
            }
            Stmt::Mut(m, e) => {
                let t = self.expr(e)?;
                self.same(t, m.0.ty, "a mutable's initial value")?;
                self.define(&m.0, true)
            }
            Stmt::Set(m, a) => {
                let t = self.var(&m.0, true)?;
                self.atom_is(a, t, "a set value")
            }
            Stmt::AddTo {
                place,
                value,
                scale,
            } => {
                let t = self.place(place)?;
                self.additive(t, "an accumulated place")?;
                self.atom_is(value, t, "an accumulated value")?;
                if let Some(c) = scale {
                    self.atom_is(c, Ty::F64, "a scale")?;
                }
                Ok(())
            }
            Stmt::Grow(place, n) => {
                let t = self.place(place)?;
                self.array_elem(t, "a grown place")?;
                self.additive(t, "a grown place")?;
                self.atom_is(n, Ty::I64, "a length")
            }
            Stmt::For(i, n, body) => {
                self.same(i.ty, Ty::I64, "a loop index")?;
                self.atom_is(n, Ty::I64, "a loop count")?;
                let t = self.block_with(Some(i), body)?;
                self.same(t, Ty::UNIT, "a loop body")
            }
            Stmt::Do(e) => {
                let t = self.expr(e)?;
                self.same(t, Ty::UNIT, "a statement expression")
            }
            Stmt::Loop(body) => {
                self.loops += 1;
                let t = self.block(body);
                self.loops -= 1;
                self.same(t?, Ty::UNIT, "a loop body")
            }
            Stmt::Check(c, site) => {
                if site.0 as usize >= self.p.sites.len() {
                    return Err("unknown error site".into());
                }
                for a in c.atoms() {
                    self.atom_is(a, Ty::I64, "a checked operand")?;
                }
                Ok(())
            }
            Stmt::Break => {
                if self.loops == 0 {
                    Err("break outside a loop".into())
                } else {
                    Ok(())
                }
            }
        }
    }

    fn arms(&mut self, scrutinee: Ty, arms: &[Arm]) -> R<Ty> {
        let def = match self.types().kind(scrutinee) {
            TyKind::Enum(e) => &self.types().enums()[*e as usize],
            _ => return Err(format!("match on {}", self.show(scrutinee))),
        };
        if def.variants.len() != arms.len() {
            return Err(format!(
                "match on {} has {} arms for {} variants",
                def.name,
                arms.len(),
                def.variants.len()
            ));
        }
        let mut result = None;
        for (arm, (_, payload)) in arms.iter().zip(&def.variants) {
            if let Some(x) = &arm.bind {
                self.same(x.ty, *payload, "a match binding")?;
            }
            let t = self.block_with(arm.bind.as_ref(), &arm.body)?;
            match result {
                None => result = Some(t),
                Some(r) => self.same(t, r, "a match arm")?,
            }
        }
        result.ok_or_else(|| format!("match on the empty enum {}", def.name))
    }

    fn expr(&mut self, e: &Expr) -> R<Ty> {
        let types = self.types();
        match e {
            Expr::Atom(a) => self.atom(a),
            Expr::Op(op, xs) => {
                let (params, ret) = op.signature();
                if params.len() != xs.len() {
                    return Err(format!("{} takes {} operands", op.name(), params.len()));
                }
                for (x, t) in xs.iter().zip(params) {
                    self.atom_is(x, *t, op.name())?;
                }
                Ok(ret)
            }
            Expr::Prim(p, xs, site) => {
                if site.0 as usize >= self.p.sites.len() {
                    return Err("unknown error site".into());
                }
                let params = p.params();
                if params.len() != xs.len() {
                    return Err(format!(
                        "primitive {} takes {} arguments",
                        p.name(),
                        params.len()
                    ));
                }
                for (x, param) in xs.iter().zip(params) {
                    let t = super::lower::lookup_source_ty(types, param).ok_or_else(|| {
                        format!("a parameter type of {} is not interned", p.name())
                    })?;
                    self.atom_is(x, t, &format!("an argument of {}", p.name()))?;
                }
                self.prim_result(p)
            }
            Expr::Tuple(xs) => {
                let mut cs = Vec::with_capacity(xs.len());
                for x in xs {
                    cs.push(self.atom(x)?);
                }
                let t = types.lookup(&TyKind::Tuple(cs.clone()));
                match (cs.len(), t) {
                    (0, _) => Ok(Ty::UNIT),
                    (1, _) => Ok(cs[0]),
                    (_, Some(t)) => Ok(t),
                    _ => Err("a tuple of an uninterned type".into()),
                }
            }
            Expr::Proj(a, k) => {
                let t = self.atom(a)?;
                match types.kind(t) {
                    TyKind::Tuple(cs) if (*k as usize) < cs.len() => Ok(cs[*k as usize]),
                    _ => Err(format!("projection .{k} of {}", self.show(t))),
                }
            }
            Expr::Variant(t, k, a) => {
                let def = match types.kind(*t) {
                    TyKind::Enum(e) => &types.enums()[*e as usize],
                    _ => return Err(format!("variant of {}", self.show(*t))),
                };
                let payload = def
                    .variants
                    .get(*k as usize)
                    .ok_or_else(|| format!("{} has no variant {k}", def.name))?
                    .1;
                self.atom_is(a, payload, "a variant's payload")?;
                Ok(*t)
            }
            Expr::Array(t, xs) => {
                let elem = match types.kind(*t) {
                    TyKind::Array(e) => *e,
                    TyKind::List(k, v) => types
                        .lookup(&TyKind::Tuple(vec![*k, *v]))
                        .ok_or("a list of an uninterned entry type")?,
                    _ => return Err(format!("a literal of type {}", self.show(*t))),
                };
                for x in xs {
                    self.atom_is(x, elem, "a literal's element")?;
                }
                Ok(*t)
            }
            Expr::Index(a, i, _) => {
                let t = self.atom(a)?;
                self.atom_is(i, Ty::I64, "an index")?;
                match types.kind(t) {
                    TyKind::List(k, v) => types
                        .lookup(&TyKind::Tuple(vec![*k, *v]))
                        .ok_or_else(|| "a list of an uninterned entry type".into()),
                    _ => self.array_elem(t, "an indexed value"),
                }
            }
            Expr::IndexOr0(a, i) => {
                let t = self.atom(a)?;
                self.additive(t, "a ?0-indexed array")?;
                self.atom_is(i, Ty::I64, "an index")?;
                self.array_elem(t, "an indexed value")
            }
            Expr::Len(a) => {
                let t = self.atom(a)?;
                match types.kind(t) {
                    TyKind::Array(_) | TyKind::List(..) => Ok(Ty::I64),
                    _ => Err(format!("len of {}", self.show(t))),
                }
            }
            Expr::Build(n, i, b, _) => {
                self.atom_is(n, Ty::I64, "a length")?;
                self.same(i.ty, Ty::I64, "a build index")?;
                let t = self.block_with(Some(i), b)?;
                types
                    .lookup(&TyKind::Array(t))
                    .ok_or_else(|| "a build of an uninterned array type".into())
            }
            Expr::Sum(n, i, b) => {
                self.atom_is(n, Ty::I64, "a length")?;
                self.same(i.ty, Ty::I64, "a sum index")?;
                let t = self.block_with(Some(i), b)?;
                self.same(t, Ty::F64, "a sum's term")?;
                Ok(Ty::F64)
            }
            Expr::Replicate(n, x, _) => {
                self.atom_is(n, Ty::I64, "a length")?;
                let t = self.atom(x)?;
                types
                    .lookup(&TyKind::Array(t))
                    .ok_or_else(|| "a replicate of an uninterned array type".into())
            }
            Expr::If(c, a, b) => {
                self.atom_is(c, Ty::BOOL, "a condition")?;
                let ta = self.block(a)?;
                let tb = self.block(b)?;
                self.same(tb, ta, "an else branch")?;
                Ok(ta)
            }
            Expr::Match(a, arms) => {
                let t = self.atom(a)?;
                self.arms(t, arms)
            }
            Expr::Iterate(init, s, body, tape, _) => {
                let a = self.atom(init)?;
                self.same(s.ty, a, "an iteration's state")?;
                let t = self.block_with(Some(s), body)?;
                let (sum, entry) = if *tape {
                    match types.kind(t) {
                        TyKind::Tuple(cs) if cs.len() == 2 => (cs[0], Some(cs[1])),
                        _ => {
                            return Err(format!("a taped iteration step of type {}", self.show(t)));
                        }
                    }
                } else {
                    (t, None)
                };
                let b = match types.kind(sum) {
                    TyKind::Enum(e) => {
                        let def = &types.enums()[*e as usize];
                        if def.variants.len() != 2 {
                            return Err(format!("an iteration step of type {}", def.name));
                        }
                        self.same(def.variants[0].1, a, "an iteration's next state")?;
                        def.variants[1].1
                    }
                    _ => return Err(format!("an iteration step of type {}", self.show(sum))),
                };
                match entry {
                    None => Ok(b),
                    Some(e) => {
                        let tape = types
                            .lookup(&TyKind::Array(e))
                            .ok_or("an uninterned tape type")?;
                        types
                            .lookup(&TyKind::Tuple(vec![b, tape]))
                            .ok_or_else(|| "an uninterned taped iteration result".into())
                    }
                }
            }
            Expr::Call(f, xs) => {
                let callee = self
                    .p
                    .funcs
                    .get(f.0 as usize)
                    .ok_or_else(|| format!("call of unknown function {}", f.0))?;
                if callee.params.len() != xs.len() {
                    return Err(format!(
                        "{} takes {} arguments",
                        callee.name,
                        callee.params.len()
                    ));
                }
                for (x, param) in xs.iter().zip(&callee.params) {
                    self.atom_is(x, param.ty, &format!("an argument of {}", callee.name))?;
                }
                Ok(callee.ret)
            }
            Expr::Zero(t) => {
                self.additive(*t, "a zero")?;
                Ok(*t)
            }
            Expr::Add(a, b) => {
                let t = self.atom(a)?;
                self.additive(t, "a sum's operand")?;
                self.atom_is(b, t, "a sum's second operand")?;
                Ok(t)
            }
            Expr::Scale(c, a) => {
                self.atom_is(c, Ty::F64, "a scale")?;
                let t = self.atom(a)?;
                self.additive(t, "a scaled value")?;
                Ok(t)
            }
            Expr::Get(m) | Expr::Take(m) => self.mutable(m),
        }
    }

    fn mutable(&self, m: &MutVar) -> R<Ty> {
        self.var(&m.0, true)
    }

    /// The IR type of a primitive's result: the lowering interns it (see
    /// [`super::lower::source_ty`]); here it is looked up structurally.
    fn prim_result(&self, p: &crate::prim::Prim) -> R<Ty> {
        super::lower::lookup_source_ty(self.types(), p.result())
            .ok_or_else(|| format!("the result type of {} is not interned", p.name()))
    }
}
