//! Lowering simplified target terms into the IR (`theory-notes/07-ir-and-codegen.md`).
//!
//! One [`Lowering`] builds one [`Program`]: the primal ([`Lowering::function`]), forward
//! ([`Lowering::jvp`]) and reverse ([`Lowering::vjp`]) code of a definition share its types and
//! closures; [`Lowering::finish`] adds the functions that apply closures and returns it.
//!
//! * **Cartesian terms** (`cart`) lower to straight-line code, loops (`map`, `map2`,
//!   `build`; `sum` of those fuses into one `sum` loop) and conditionals. The lowering is a
//!   small partial evaluator: a term's value is a `SVal`, either a run-time value of the IR
//!   (`Dyn`) or a *static* pair or closure. Applying a static closure inlines its body; a
//!   closure that flows into data, a branch's result or an unknown call is *materialised*:
//!   defunctionalised into a variant of its function type's enum (payload: the captured
//!   variables), applied through that enum's `apply` function.
//! * **Linear terms** (`linear`) lower in destination-passing style: `l` is lowered *into* a
//!   `linear::Dest`, a description of where its value is added (accumulator places, scaled;
//!   the elements of an array into places by index, into one running sum, or only one of them;
//!   a linear function to apply first; a copower fold). `onehot n i v` into a place becomes
//!   `place[i] += v`, `lsum` a running sum, `l1 + l2` two additions into the same place. A
//!   linear `let` whose variable is used only in straight-line positions is *sunk*: its body
//!   is lowered first, collecting the destinations of the variable, and the bound term is
//!   lowered into their merge (transposition); otherwise its value is materialised once.
//!   This one decision (`sink or materialise`) is the accumulator analysis of the note.

mod cart;
mod linear;
mod types;

pub use types::{TypeOf, lookup_source_ty, source_ty};

use super::{Arm, Atom, Block, Expr, Func, FuncId, MutVar, Program, SiteId, Stmt, Ty, TyKind, Var};
use crate::ad::Mor;
use crate::error::{Error, ErrorKind, Result, Span};
use crate::target::term::{
    Child, LTerm, LTermKind, LinPrim, Node, Pat, Term, TermKind, Var as TVar, VarId,
};
use crate::target::types::{LTy, Ty as TTy};
use rustc_hash::{FxHashMap, FxHashSet};
use std::rc::Rc;

/// A value during lowering: known at run time only, or (partly) known statically.
#[derive(Clone)]
pub(crate) enum SVal {
    /// A run-time value (an IR operand).
    Dyn(Atom),
    /// A pair whose components are known separately.
    Pair(Rc<(SVal, SVal)>),
    /// A Cartesian closure: the `λ` term and the environment it was made in.
    Lam(Rc<Closure>),
    /// A linear function: the `λ̲` term and its environment.
    LinLam(Rc<Closure>),
}

/// A static closure.
pub(crate) struct Closure {
    /// The `Lam` or `LinLam` node.
    term: Term,
    /// The environment of its free variables.
    env: Env,
}

/// Values of the Cartesian variables in scope.
pub(crate) type Env = im::HashMap<VarId, SVal>;

/// What a closure enum's functions do.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum EnumKind {
    /// Closures of a function type `A → B`: `apply(f, a) : B`.
    Fun,
    /// Linear functions `L ⊸ M`: `lapply(f, x) : M`.
    LinFun,
    /// The functions in powers `τ → L`: `papply(f, b) : L`.
    Power,
}

/// A closure enum: its apply function and the arms lowered so far.
struct ClosureEnum {
    kind: EnumKind,
    /// The apply function (its body is filled in by [`Lowering::finish`]).
    apply: FuncId,
    /// One arm per variant, `None` until lowered.
    arms: Vec<Option<Arm>>,
    /// The variants by λ node address (the node is kept alive by the free-variable cache).
    tags: FxHashMap<usize, u32>,
    /// Each variant's λ and captured variables, by tag.
    lams: Vec<(Owned, Rc<[TVar]>)>,
    /// For linear functions, once asked for ([`Lowering::acc_apply_of`]): `acc_apply(f, x,
    /// acc) = acc + f • x`, adding into the given accumulator (destination passing across
    /// the call), and its arms.
    acc_apply: Option<FuncId>,
    acc_arms: Vec<Option<Arm>>,
    /// `acc_apply`'s accumulator, moved into a mutable variable that the arm taken takes.
    acc_in: Option<MutVar>,
}

/// A variant whose arm is still to be lowered.
struct Pending {
    enum_ty: Ty,
    tag: u32,
    /// The λ (`Lam`, `LinLam`) node, or for a power the `PowLam` node.
    lam: Owned,
    /// The captured variables, in payload order.
    captured: Rc<[TVar]>,
    /// The arm of the enum's `acc_apply` (not `apply`).
    acc: bool,
}

/// Builds one IR program.
pub struct Lowering {
    prog: Program,
    /// The blocks being built, innermost last, with their ids.
    blocks: Vec<Vec<Stmt>>,
    block_ids: Vec<u64>,
    next_block: u64,
    /// Common subexpressions (projections, lengths) of variables, with where they are bound
    /// (depth and block id) and an undo log (see [`Lowering::cse_mark`]).
    cse: FxHashMap<CseKey, CseEntry>,
    cse_log: Vec<(CseKey, Option<CseEntry>)>,
    /// Range facts: `n = len xs` (n's id to xs's id), `m = n - c` (m to (n, c)), `j = i + c`
    /// (j to (i, c)), and loop indices with their bounds (`i < n`).
    len_of: FxHashMap<u32, u32>,
    minus: FxHashMap<u32, (u32, i64)>,
    plus: FxHashMap<u32, (u32, i64)>,
    below: FxHashMap<u32, u32>,
    /// Arrays made by `build n ..` or `replicate n ..`, with their length `n`.
    count_of: FxHashMap<u32, Atom>,
    /// Types: target types already mapped (the key term keeps the pointer alive).
    ty_cache: FxHashMap<usize, (TTy, Ty)>,
    lty_cache: FxHashMap<usize, (LTy, Ty)>,
    type_of: TypeOf,
    /// Closure enums by kind and (argument, result) IR types.
    enums: FxHashMap<(EnumKind, Ty, Ty), Ty>,
    closures: FxHashMap<Ty, ClosureEnum>,
    pending: Vec<Pending>,
    /// Free variables of λ nodes, by address (the node kept alive with them).
    free_cache: FxHashMap<usize, (Owned, Rc<[TVar]>)>,
    /// Kernel expansions by kernel node address: the node, the expansion and its argument.
    expansions: FxHashMap<usize, (Term, Term, TVar)>,
    /// Linear binders' occurrence counts and whether any occurrence is nested deeper.
    occ: linear::Occurrences,
    /// Linear variables that must be materialised (a sinking attempt failed).
    must_materialise: FxHashSet<VarId>,
    sinks: linear::Sinks,
    /// Materialisations in progress (see `linear::Sink`): ids, and the sinks given a
    /// destination inside each.
    barriers: Vec<(u64, Vec<usize>)>,
    next_barrier: u64,
    /// Nodes inlined by static application so far, and the budget.
    inlined: usize,
    inline_budget: usize,
}

/// Where a common subexpression is bound: its variable, block depth and block id.
type CseEntry = (Atom, usize, u64);

/// A common subexpression: a projection or the length of a variable.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum CseKey {
    Proj(u32, u32),
    Len(u32),
}

/// An owned term of either kind (a λ node kept by the pointer-keyed maps, so that its address
/// is not reused while they hold it).
#[derive(Clone)]
enum Owned {
    C(Term),
    L(LTerm),
}

impl Owned {
    fn of(c: Child<'_>) -> Owned {
        match c {
            Child::C(t) => Owned::C(t.clone()),
            Child::L(l) => Owned::L(l.clone()),
        }
    }

    fn child(&self) -> Child<'_> {
        match self {
            Owned::C(t) => Child::C(t),
            Owned::L(l) => Child::L(l),
        }
    }
}

/// The address of a node (the key of the lowering's per-node maps).
fn addr(c: Child<'_>) -> usize {
    match c {
        Child::C(t) => std::ptr::from_ref::<Node>(t) as usize,
        Child::L(l) => std::ptr::from_ref::<crate::target::term::LNode>(l) as usize,
    }
}

impl Default for Lowering {
    fn default() -> Lowering {
        Lowering::new()
    }
}

impl Lowering {
    /// An empty program.
    pub fn new() -> Lowering {
        Lowering {
            prog: Program::default(),
            blocks: Vec::new(),
            block_ids: Vec::new(),
            next_block: 0,
            cse: FxHashMap::default(),
            cse_log: Vec::new(),
            len_of: FxHashMap::default(),
            minus: FxHashMap::default(),
            plus: FxHashMap::default(),
            below: FxHashMap::default(),
            count_of: FxHashMap::default(),
            ty_cache: FxHashMap::default(),
            lty_cache: FxHashMap::default(),
            type_of: TypeOf::default(),
            enums: FxHashMap::default(),
            closures: FxHashMap::default(),
            pending: Vec::new(),
            free_cache: FxHashMap::default(),
            expansions: FxHashMap::default(),
            occ: linear::Occurrences::default(),
            must_materialise: FxHashSet::default(),
            sinks: linear::Sinks::default(),
            barriers: Vec::new(),
            next_barrier: 0,
            inlined: 0,
            inline_budget: 0,
        }
    }

    /// The program built so far (types are needed to convert values).
    pub fn program(&self) -> &Program {
        &self.prog
    }

    /// Adds `name(params) = body`, a function of the given parameters (the primal of a
    /// definition: the embedded, optimised source program).
    pub fn function(&mut self, name: &str, params: &[TVar], body: &Term) -> Result<FuncId> {
        self.start(body.size());
        let mut env = Env::new();
        let mut ps = Vec::new();
        for p in params {
            let t = self.ty(&p.ty);
            let v = self.prog.var(&p.name, t);
            env.insert(p.id, SVal::Dyn(Atom::Var(v.clone())));
            ps.push(v);
        }
        self.push_block();
        let r = self.term(body, &env)?;
        let ret_ty = self.type_of.term(body);
        let r = self.materialise(&r, &ret_ty)?;
        let stmts = self.pop_block();
        let ret = self.ty(&ret_ty);
        Ok(self.add_func(name, ps, ret, Block { stmts, result: r }))
    }

    /// Adds `name(x, dx) = (y, dy)` for a forward derivative `x ⊢ m : F1 B × (F2 Γ ⊸ F2 B)`:
    /// the primal result and the derivative applied to the tangent `dx` (its linear
    /// representation).
    pub fn jvp(&mut self, name: &str, m: &Mor) -> Result<FuncId> {
        self.derivative(name, m)
    }

    /// Adds `name(x, ct) = (y, ctx)` for a reverse derivative `x ⊢ m : R1 B × (R2 B ⊸ R2 Γ)`:
    /// the primal result and the derivative applied to the output cotangent `ct`.
    pub fn vjp(&mut self, name: &str, m: &Mor) -> Result<FuncId> {
        self.derivative(name, m)
    }

    fn derivative(&mut self, name: &str, m: &Mor) -> Result<FuncId> {
        if let Some(at) = first_fix(&m.body) {
            return Err(unsupported_recursive_derivative(at));
        }
        self.start(m.body.size());
        self.occ.analyse(Child::C(&m.body));
        let xt = self.ty(&m.x.ty);
        let x = self.prog.var(&m.x.name, xt);
        let image = self.type_of.term(&m.body);
        let (yt, ft) = image
            .as_prod()
            .unwrap_or_else(|| panic!("internal error: a derivative's image is not a pair"));
        let (dom, cod) = ft
            .as_lin_fun()
            .unwrap_or_else(|| panic!("internal error: a derivative is not a linear map"));
        let (dom, cod) = (dom.clone(), cod.clone());
        let (yt, dt) = (yt.clone(), self.lin_ty(&dom));
        let d = self.prog.var("d", dt);
        let mut env = Env::new();
        env.insert(m.x.id, SVal::Dyn(Atom::Var(x.clone())));
        self.push_block();
        let v = self.term(&m.body, &env)?;
        let y = self.proj(&v, 0, &image)?;
        let f = self.proj(&v, 1, &image)?;
        let y = self.materialise(&y, &yt)?;
        let out = self.lin_apply_value(&f, Atom::Var(d.clone()), &dom, &cod)?;
        let yty = self.ty(&yt);
        let oty = self.lin_ty(&cod);
        let tt = self.prog.types.tuple(vec![yty, oty]);
        let r = self.let_("r", tt, Expr::Tuple(vec![y, out]));
        let stmts = self.pop_block();
        Ok(self.add_func(name, vec![x, d], tt, Block { stmts, result: r }))
    }

    fn start(&mut self, size: usize) {
        self.inlined = 0;
        self.inline_budget = 4 * size + 100_000;
    }

    fn add_func(&mut self, name: &str, params: Vec<Var>, ret: Ty, body: Block) -> FuncId {
        let mut name = sanitize(name);
        while self.prog.find(&name).is_some() {
            name.push('_');
        }
        self.prog.funcs.push(Func {
            name,
            params,
            ret,
            body,
            accumulates: false,
            rec: None,
        });
        FuncId(self.prog.funcs.len() as u32 - 1)
    }

    /// Lowers the arms of every closure that was materialised, builds the apply functions and
    /// returns the program.
    pub fn finish(mut self) -> Result<Program> {
        while let Some(p) = self.pending.pop() {
            let arm = self.arm(&p)?;
            let ce = self
                .closures
                .get_mut(&p.enum_ty)
                .expect("a pending variant's enum");
            if p.acc {
                ce.acc_arms[p.tag as usize] = Some(arm);
            } else {
                ce.arms[p.tag as usize] = Some(arm);
            }
        }
        let mut enums: Vec<(Ty, FuncId, Vec<Arm>, Option<MutVar>)> = Vec::new();
        for (t, ce) in self.closures.drain() {
            let arms = ce
                .arms
                .into_iter()
                .map(|a| a.expect("every variant's arm is lowered"))
                .collect();
            enums.push((t, ce.apply, arms, None));
            if let Some(f) = ce.acc_apply {
                let arms = ce
                    .acc_arms
                    .into_iter()
                    .map(|a| a.expect("every variant's accumulating arm is lowered"))
                    .collect();
                enums.push((t, f, arms, ce.acc_in));
            }
        }
        for (_, f, arms, acc_in) in enums {
            let func = self.prog.funcs[f.0 as usize].clone();
            let (scrutinee, ret) = (func.params[0].clone(), func.ret);
            let r = self.prog.var("r", ret);
            let mut stmts = Vec::new();
            if let Some(m) = acc_in {
                // `mut acc = acc_param`: the arm taken moves it (`take`), so an unshared
                // accumulator is updated in place.
                let p = func.params[2].clone();
                stmts.push(Stmt::Mut(m, Expr::Atom(Atom::Var(p))));
            }
            stmts.push(Stmt::Let(
                r.clone(),
                Expr::Match(Atom::Var(scrutinee), arms),
            ));
            self.prog.funcs[f.0 as usize].body = Block {
                stmts,
                result: Atom::Var(r),
            };
        }
        let prog = std::mem::take(&mut self.prog);
        if cfg!(debug_assertions)
            && let Err(e) = super::check::check(&prog)
        {
            panic!("internal error: lowered IR does not check: {e}\n{prog}");
        }
        Ok(prog)
    }

    // ----- emitting -----

    fn emit(&mut self, s: Stmt) {
        self.blocks
            .last_mut()
            .expect("lowering inside a block")
            .push(s);
    }

    /// `let x = e` with a fresh variable of type `t`; the variable as an operand. A
    /// projection or length of a variable already bound in scope is that binding (common
    /// subexpressions), and lengths and index arithmetic are recorded as range facts.
    fn let_(&mut self, name: &str, t: Ty, e: Expr) -> Atom {
        if let Expr::Atom(a) = e {
            return a;
        }
        // A loop index (below a checked length, so below 2^61) plus a constant in [0, 2^32]
        // cannot overflow: plain addition, no error path in the loop.
        let e = match e {
            Expr::Prim(p, args, _)
                if p.name() == "iadd"
                    && matches!(&args[..],
                        [Atom::Var(i), Atom::I64(c)] | [Atom::I64(c), Atom::Var(i)]
                            if self.below.contains_key(&i.id) && (0..=1i64 << 32).contains(c)) =>
            {
                Expr::Op(super::Op::IAdd, args)
            }
            e => e,
        };
        // The length of an array this program built is its count: no `len`, and the range
        // facts of the count apply to loops over the array.
        if let Expr::Len(Atom::Var(v)) = &e
            && let Some(n) = self.count_of.get(&v.id)
        {
            return n.clone();
        }
        let key = match &e {
            Expr::Proj(Atom::Var(v), k) => Some(CseKey::Proj(v.id, *k)),
            Expr::Len(Atom::Var(v)) => Some(CseKey::Len(v.id)),
            _ => None,
        };
        if let Some(key) = key {
            if let Some((a, depth, id)) = self.cse.get(&key)
                && self.block_ids.get(*depth) == Some(id)
            {
                return a.clone();
            }
        }
        let x = self.prog.var(name, t);
        match &e {
            Expr::Len(Atom::Var(v)) => {
                self.len_of.insert(x.id, v.id);
            }
            Expr::Build(n, ..) | Expr::Replicate(n, ..) => {
                self.count_of.insert(x.id, n.clone());
            }
            Expr::Op(super::Op::IAdd, args) => {
                if let [Atom::Var(i), Atom::I64(c)] | [Atom::I64(c), Atom::Var(i)] = &args[..] {
                    self.plus.insert(x.id, (i.id, *c));
                }
            }
            Expr::Prim(p, args, _) => match (p.name(), &args[..]) {
                ("isub", [Atom::Var(n), Atom::I64(c)]) => {
                    self.minus.insert(x.id, (n.id, *c));
                }
                ("iadd", [Atom::Var(i), Atom::I64(c)]) | ("iadd", [Atom::I64(c), Atom::Var(i)]) => {
                    self.plus.insert(x.id, (i.id, *c));
                }
                _ => {}
            },
            _ => {}
        }
        self.emit(Stmt::Let(x.clone(), e));
        let a = Atom::Var(x);
        if let Some(key) = key {
            let entry = (
                a.clone(),
                self.blocks.len() - 1,
                *self.block_ids.last().expect("a block"),
            );
            let old = self.cse.insert(key, entry);
            self.cse_log.push((key, old));
        }
        a
    }

    /// A position to undo common subexpressions to (with statements discarded).
    fn cse_mark(&self) -> usize {
        self.cse_log.len()
    }

    /// Forgets the common subexpressions recorded since `mark`.
    fn cse_undo(&mut self, mark: usize) {
        while self.cse_log.len() > mark {
            let (key, old) = self.cse_log.pop().expect("checked");
            match old {
                Some(e) => self.cse.insert(key, e),
                None => self.cse.remove(&key),
            };
        }
    }

    /// Whether indexing `xs` at `i` is in range by the range facts: `i` is a loop index below
    /// `len xs - c` (or `len xs`), plus at most `c`.
    fn in_range(&self, xs: &Atom, i: &Atom) -> bool {
        let Atom::Var(xs) = xs else {
            return false;
        };
        self.index_bound(i)
            .is_some_and(|n| self.len_of.get(&n) == Some(&xs.id))
    }

    /// `Some(m)` if `0 <= i < m` by the range facts: `i` is a loop index (plus at most `c`)
    /// below `m - c` (or below `m`, with `c = 0`).
    fn index_bound(&self, i: &Atom) -> Option<u32> {
        let Atom::Var(i) = i else {
            return None;
        };
        let (i, d) = match self.plus.get(&i.id) {
            Some(&(j, d)) => (j, d),
            None => (i.id, 0),
        };
        let &n = self.below.get(&i)?;
        let (m, c) = match self.minus.get(&n) {
            Some(&(m, c)) => (m, c),
            None => (n, 0),
        };
        (0..=c).contains(&d).then_some(m)
    }

    /// Whether `0 <= i < n` by the range facts: `i` is a loop index (plus at most `c`) below
    /// `m - c` where `m` is `n` or the length of the same array.
    fn index_below(&self, i: &Atom, n: &Atom) -> bool {
        let (Some(m), Atom::Var(n)) = (self.index_bound(i), n) else {
            return false;
        };
        m == n.id
            || matches!((self.len_of.get(&m), self.len_of.get(&n.id)), (Some(a), Some(b)) if a == b)
    }

    /// Records that loop index `i` runs below `n`.
    fn loop_bound(&mut self, i: &Var, n: &Atom) {
        if let Atom::Var(n) = n {
            self.below.insert(i.id, n.id);
        }
    }

    fn push_block(&mut self) {
        self.next_block += 1;
        self.blocks.push(Vec::new());
        self.block_ids.push(self.next_block);
    }

    fn pop_block(&mut self) -> Vec<Stmt> {
        self.block_ids.pop();
        self.blocks.pop().expect("a block pushed")
    }

    /// Runs `f` in a new block; the block with `f`'s result.
    fn block(&mut self, f: impl FnOnce(&mut Self) -> Result<Atom>) -> Result<Block> {
        self.push_block();
        let r = f(self);
        let stmts = self.pop_block();
        Ok(Block { stmts, result: r? })
    }

    fn site(&mut self, span: Span) -> SiteId {
        self.prog.site(span)
    }

    fn internal_site(&mut self) -> SiteId {
        self.prog.internal()
    }

    fn mut_(&mut self, name: &str, t: Ty, init: Expr) -> MutVar {
        let m = self.prog.mut_var(name, t);
        self.emit(Stmt::Mut(m.clone(), init));
        m
    }

    // ----- types -----

    /// The IR type of a Cartesian target type.
    fn ty(&mut self, t: &TTy) -> Ty {
        let key = match t {
            TTy::Real => return Ty::F64,
            TTy::Int => return Ty::I64,
            TTy::Bool => return Ty::BOOL,
            TTy::Unit => return Ty::UNIT,
            TTy::Prod(p) | TTy::Fun(p) | TTy::Sum(p) => Rc::as_ptr(p) as usize,
            TTy::Array(a) => Rc::as_ptr(a) as usize,
            TTy::LinFun(p) => Rc::as_ptr(p) as usize,
            TTy::Lin(l) => Rc::as_ptr(l) as usize,
        };
        if let Some((_, r)) = self.ty_cache.get(&key) {
            return *r;
        }
        let r = crate::deep::deep(|| match t {
            TTy::Prod(p) => {
                let (a, b) = (self.ty(&p.0), self.ty(&p.1));
                self.prog.types.tuple(vec![a, b])
            }
            TTy::Sum(p) => {
                let (a, b) = (self.ty(&p.0), self.ty(&p.1));
                self.prog.types.sum(a, b)
            }
            TTy::Array(a) => {
                let a = self.ty(a);
                self.prog.types.array(a)
            }
            TTy::Fun(p) => {
                let (a, b) = (self.ty(&p.0), self.ty(&p.1));
                self.closure_enum(EnumKind::Fun, a, b)
            }
            TTy::LinFun(p) => {
                let (a, b) = (self.lin_ty(&p.0), self.lin_ty(&p.1));
                self.closure_enum(EnumKind::LinFun, a, b)
            }
            TTy::Lin(l) => self.lin_ty(l),
            TTy::Real | TTy::Int | TTy::Bool | TTy::Unit => unreachable!("handled above"),
        });
        self.ty_cache.insert(key, (t.clone(), r));
        r
    }

    /// The IR type representing values of a linear type.
    fn lin_ty(&mut self, l: &LTy) -> Ty {
        let key = match l {
            LTy::Real => return Ty::F64,
            LTy::Unit => return Ty::UNIT,
            LTy::Prod(p) | LTy::Sum(p) => Rc::as_ptr(p) as usize,
            LTy::Copower(p) | LTy::Power(p) => Rc::as_ptr(p) as usize,
            LTy::Array(a) => Rc::as_ptr(a) as usize,
        };
        if let Some((_, r)) = self.lty_cache.get(&key) {
            return *r;
        }
        let r = crate::deep::deep(|| match l {
            LTy::Prod(p) | LTy::Sum(p) => {
                let (a, b) = (self.lin_ty(&p.0), self.lin_ty(&p.1));
                self.prog.types.tuple(vec![a, b])
            }
            LTy::Array(a) => {
                let a = self.lin_ty(a);
                self.prog.types.array(a)
            }
            LTy::Copower(p) => {
                let (k, v) = (self.ty(&p.0), self.lin_ty(&p.1));
                self.prog.types.list(k, v)
            }
            LTy::Power(p) => {
                let (b, v) = (self.ty(&p.0), self.lin_ty(&p.1));
                let e = self.closure_enum(EnumKind::Power, b, v);
                self.prog.types.list(e, Ty::F64)
            }
            LTy::Real | LTy::Unit => unreachable!("handled above"),
        });
        self.lty_cache.insert(key, (l.clone(), r));
        r
    }

    /// The enum of closures of one kind from `a` to `b`, with its apply function.
    fn closure_enum(&mut self, kind: EnumKind, a: Ty, b: Ty) -> Ty {
        if let Some(&t) = self.enums.get(&(kind, a, b)) {
            return t;
        }
        let prefix = match kind {
            EnumKind::Fun => "Fun",
            EnumKind::LinFun => "LinFun",
            EnumKind::Power => "Pow",
        };
        let t = self
            .prog
            .types
            .new_enum(format!("{prefix}{}", self.enums.len()));
        self.enums.insert((kind, a, b), t);
        let f = self.prog.var("f", t);
        let x = self.prog.var("x", a);
        let name = format!("{}_{}", prefix.to_lowercase(), self.enums.len() - 1);
        let apply = self.add_func(&format!("apply_{name}"), vec![f, x], b, Block::unit(vec![]));
        self.closures.insert(
            t,
            ClosureEnum {
                kind,
                apply,
                arms: Vec::new(),
                tags: FxHashMap::default(),
                lams: Vec::new(),
                acc_apply: None,
                acc_arms: Vec::new(),
                acc_in: None,
            },
        );
        t
    }

    /// The accumulating apply function of a linear-function enum `t` (`acc_apply(f, x, acc) =
    /// acc + f • x`), made on first use with an arm for every variant, present and future.
    fn acc_apply_of(&mut self, t: Ty) -> FuncId {
        if let Some(f) = self.closures[&t].acc_apply {
            return f;
        }
        let apply = self.closures[&t].apply;
        let func = self.prog.func(apply).clone();
        let f = self.prog.var("f", t);
        let x = self.prog.var("x", func.params[1].ty);
        let acc = self.prog.var("acc", func.ret);
        let name = format!("acc_{}", func.name);
        let g = self.add_func(&name, vec![f, x, acc], func.ret, Block::unit(vec![]));
        self.prog.funcs[g.0 as usize].accumulates = true;
        let m = self.prog.mut_var("acc", func.ret);
        let ce = self.closures.get_mut(&t).expect("checked");
        ce.acc_apply = Some(g);
        ce.acc_in = Some(m);
        ce.acc_arms = vec![None; ce.lams.len()];
        let lams = ce.lams.clone();
        for (tag, (lam, captured)) in lams.into_iter().enumerate() {
            self.pending.push(Pending {
                enum_ty: t,
                tag: tag as u32,
                lam,
                captured,
                acc: true,
            });
        }
        g
    }

    /// The apply function of a closure enum and its kind.
    fn apply_of(&self, t: Ty) -> (FuncId, EnumKind) {
        let ce = &self.closures[&t];
        (ce.apply, ce.kind)
    }

    // ----- closures -----

    /// The free variables of a λ (Cartesian and linear), in a fixed order.
    fn free_vars(&mut self, c: Child<'_>) -> Rc<[TVar]> {
        let key = addr(c);
        if let Some((_, v)) = self.free_cache.get(&key) {
            return v.clone();
        }
        let mut bound = FxHashSet::default();
        let mut seen = FxHashSet::default();
        let mut out = Vec::new();
        let mut stack = vec![c];
        while let Some(c) = stack.pop() {
            match c {
                Child::C(t) => {
                    match &t.kind {
                        TermKind::Var(x) if seen.insert(x.id) => out.push(x.clone()),
                        TermKind::Lam(x, _) | TermKind::LinLam(x, _) => {
                            bound.insert(x.id);
                        }
                        TermKind::Let(p, ..) => bind_pat_ids(p, &mut bound),
                        TermKind::Case(_, p, _, q, _) => {
                            bind_pat_ids(p, &mut bound);
                            bind_pat_ids(q, &mut bound);
                        }
                        _ => {}
                    }
                    stack.extend(t.children());
                }
                Child::L(l) => {
                    match &l.kind {
                        LTermKind::Var(x) if seen.insert(x.id) => out.push(x.clone()),
                        LTermKind::LinLet(x, ..)
                        | LTermKind::PowLam(x, _)
                        | LTermKind::Build(_, x, _) => {
                            bound.insert(x.id);
                        }
                        LTermKind::Let(p, ..) => bind_pat_ids(p, &mut bound),
                        LTermKind::Case(_, p, _, q, _) => {
                            bind_pat_ids(p, &mut bound);
                            bind_pat_ids(q, &mut bound);
                        }
                        _ => {}
                    }
                    stack.extend(l.children());
                }
            }
        }
        // The λ's own binder is bound; so is every binder inside it (ids are unique).
        match c {
            Child::C(t) => {
                if let TermKind::Lam(x, _) | TermKind::LinLam(x, _) = &t.kind {
                    bound.insert(x.id);
                }
            }
            Child::L(l) => {
                if let LTermKind::PowLam(x, _) = &l.kind {
                    bound.insert(x.id);
                }
            }
        }
        out.retain(|x| !bound.contains(&x.id));
        out.sort_by_key(|x| x.id.0);
        let r: Rc<[TVar]> = out.into();
        self.free_cache.insert(key, (Owned::of(c), r.clone()));
        r
    }

    /// The tag of the variant for λ node `lam` in enum `e`, registering it (and its arm to
    /// lower) on first use; also returns the captured variables.
    fn variant(&mut self, e: Ty, lam: Child<'_>) -> (u32, Rc<[TVar]>) {
        let captured = self.free_vars(lam);
        let ce = self.closures.get_mut(&e).expect("a closure enum");
        if let Some(&tag) = ce.tags.get(&addr(lam)) {
            return (tag, captured);
        }
        let tag = ce.arms.len() as u32;
        ce.arms.push(None);
        ce.tags.insert(addr(lam), tag);
        ce.lams.push((Owned::of(lam), captured.clone()));
        let acc = ce.acc_apply.is_some();
        if acc {
            ce.acc_arms.push(None);
        }
        let payload: Vec<Ty> = captured.iter().map(|x| self.var_ty(x)).collect::<Vec<_>>();
        let payload = self.prog.types.tuple(payload);
        let name = match lam {
            Child::C(t) => match &t.kind {
                TermKind::Lam(x, _) | TermKind::LinLam(x, _) => format!("L{}", sanitize(&x.name)),
                TermKind::Fix(..) => "Rec".into(),
                _ => "K".into(),
            },
            Child::L(_) => "P".into(),
        };
        self.prog
            .types
            .add_variant(e, format!("{name}{tag}"), payload);
        self.pending.push(Pending {
            enum_ty: e,
            tag,
            lam: Owned::of(lam),
            captured: captured.clone(),
            acc: false,
        });
        if acc {
            self.pending.push(Pending {
                enum_ty: e,
                tag,
                lam: Owned::of(lam),
                captured: captured.clone(),
                acc: true,
            });
        }
        (tag, captured)
    }

    /// The IR type of a variable (Cartesian, or linear: its representation).
    fn var_ty(&mut self, x: &TVar) -> Ty {
        self.ty(&x.ty)
    }

    /// The run-time value of a static value.
    fn materialise(&mut self, v: &SVal, t: &TTy) -> Result<Atom> {
        crate::deep::deep(|| match v {
            SVal::Dyn(a) => Ok(a.clone()),
            SVal::Pair(p) => {
                let (ta, tb) = t
                    .as_prod()
                    .unwrap_or_else(|| panic!("internal error: a static pair of type {t}"));
                let a = self.materialise(&p.0, ta)?;
                let b = self.materialise(&p.1, tb)?;
                let tt = self.ty(t);
                Ok(self.let_("p", tt, Expr::Tuple(vec![a, b])))
            }
            SVal::Lam(c) | SVal::LinLam(c) => {
                let e = self.ty(t);
                let (tag, captured) = self.variant(e, Child::C(&c.term));
                let payload = self.captured(&captured, &c.env, None)?;
                Ok(self.let_("clo", e, Expr::Variant(e, tag, payload)))
            }
        })
    }

    /// The payload of a closure: its captured variables' values (linear ones from `lenv`).
    fn captured(
        &mut self,
        captured: &[TVar],
        env: &Env,
        lenv: Option<&linear::LEnv>,
    ) -> Result<Atom> {
        let mut xs = Vec::with_capacity(captured.len());
        let mut tys = Vec::with_capacity(captured.len());
        for x in captured {
            let a = match (env.get(&x.id), lenv) {
                (Some(v), _) => {
                    let v = v.clone();
                    self.materialise(&v, &x.ty)?
                }
                (None, Some(lenv)) => self.linear_var_value(x, lenv)?,
                (None, None) => panic!("internal error: captured variable {x:?} is unbound"),
            };
            tys.push(self.var_ty(x));
            xs.push(a);
        }
        if xs.len() == 1 {
            return Ok(xs.pop().expect("one"));
        }
        let t = self.prog.types.tuple(tys);
        Ok(self.let_("env", t, Expr::Tuple(xs)))
    }

    /// Lowers the arm of a pending variant: the payload's variables bound, the body applied to
    /// the apply function's argument.
    fn arm(&mut self, p: &Pending) -> Result<Arm> {
        if let Owned::C(t) = &p.lam
            && let TermKind::Fix(functional, at) = &t.kind
        {
            return self.fix_arm(p, functional, *at);
        }
        let (f, kind) = self.apply_of(p.enum_ty);
        let f = match (p.acc, self.closures[&p.enum_ty].acc_apply) {
            (true, Some(g)) => g,
            _ => f,
        };
        let func = self.prog.func(f).clone();
        // `acc_apply`'s accumulator: the arm adds into it instead of a zero.
        let acc_in = self.closures[&p.enum_ty].acc_in.clone();
        let acc_init = |acc_ty: Ty| match &acc_in {
            Some(m) if p.acc => Expr::Take(m.clone()),
            _ => Expr::Zero(acc_ty),
        };
        let arg = func.params[1].clone();
        let payload_ty = self.prog.types.enum_def(p.enum_ty).variants[p.tag as usize].1;
        let bind = self.prog.var("env", payload_ty);
        let captured = p.captured.clone();
        let lam = p.lam.clone();
        let saved = std::mem::take(&mut self.blocks);
        let saved_ids = std::mem::take(&mut self.block_ids);
        let saved_sinks = std::mem::take(&mut self.sinks);
        let saved_barriers = std::mem::take(&mut self.barriers);
        let body = self.block(|this| {
            let mut env = Env::new();
            let mut lenv = linear::LEnv::new();
            for (k, x) in captured.iter().enumerate() {
                let a = if captured.len() == 1 {
                    Atom::Var(bind.clone())
                } else {
                    let t = this.var_ty(x);
                    this.let_(&x.name, t, Expr::Proj(Atom::Var(bind.clone()), k as u32))
                };
                match x.ty.as_lin() {
                    Some(_) => {
                        lenv.insert(x.id, linear::LBind::Mat(a));
                    }
                    None => {
                        env.insert(x.id, SVal::Dyn(a));
                    }
                }
            }
            this.start(0);
            match (kind, lam.child()) {
                (EnumKind::Fun, Child::C(t)) => {
                    let TermKind::Lam(x, body) = &t.kind else {
                        panic!("internal error: a Fun variant of a non-λ")
                    };
                    env.insert(x.id, SVal::Dyn(Atom::Var(arg.clone())));
                    let r = this.term(body, &env)?;
                    let rt = this.type_of.term(body);
                    this.materialise(&r, &rt)
                }
                (EnumKind::LinFun, Child::C(t)) => {
                    let TermKind::LinLam(v, body) = &t.kind else {
                        panic!("internal error: a LinFun variant of a non-λ̲")
                    };
                    this.occ.analyse(Child::C(t));
                    let cod = this.type_of.linear(body);
                    let acc_ty = this.lin_ty(&cod);
                    let acc = this.mut_("acc", acc_ty, acc_init(acc_ty));
                    let mut lenv = linear::LEnv::new();
                    lenv.insert(v.id, linear::LBind::Mat(Atom::Var(arg.clone())));
                    let d = this.dest_of_place(&super::Place::of(&acc), &cod);
                    this.linear(body, &env, &lenv, d)?;
                    Ok(this.let_("r", acc_ty, Expr::Take(acc)))
                }
                (EnumKind::Power, Child::L(l)) => {
                    let LTermKind::PowLam(b, body) = &l.kind else {
                        panic!("internal error: a power variant of a non-power")
                    };
                    this.occ.analyse(Child::L(l));
                    env.insert(b.id, SVal::Dyn(Atom::Var(arg.clone())));
                    let cod = this.type_of.linear(body);
                    let acc_ty = this.lin_ty(&cod);
                    let acc = this.mut_("acc", acc_ty, Expr::Zero(acc_ty));
                    let d = this.dest_of_place(&super::Place::of(&acc), &cod);
                    this.linear(body, &env, &lenv, d)?;
                    Ok(this.let_("r", acc_ty, Expr::Take(acc)))
                }
                _ => panic!("internal error: a variant of the wrong kind"),
            }
        });
        self.blocks = saved;
        self.block_ids = saved_ids;
        self.sinks = saved_sinks;
        self.barriers = saved_barriers;
        Ok(Arm {
            bind: Some(bind),
            body: body?,
        })
    }

    /// The arm of the variant of a fixpoint `fix F` (`F : (A → B) → (A → B)`, the variant's
    /// payload `F`'s captured variables): `call rec(env, x)` for a new recursive function
    ///
    /// ```text
    /// rec fn rec(env, z) = F (Rec(env)) z        (one recursive call at the `def rec`)
    /// ```
    ///
    /// so `fix F` unfolds once per call, `(fix F) a = F (fix F) a`, and every call of the
    /// closure takes one step and one depth level at `at`, as `steps::FixClosure` does.
    fn fix_arm(&mut self, p: &Pending, functional: &Term, at: Span) -> Result<Arm> {
        let (apply, _) = self.apply_of(p.enum_ty);
        let func = self.prog.func(apply).clone();
        let (arg, ret) = (func.params[1].clone(), func.ret);
        let payload_ty = self.prog.types.enum_def(p.enum_ty).variants[p.tag as usize].1;
        let bind = self.prog.var("env", payload_ty);
        let env_p = self.prog.var("env", payload_ty);
        let z = self.prog.var("z", arg.ty);
        let site = self.site(at);
        let name = format!("rec_{}", self.prog.types.enum_def(p.enum_ty).name);
        let g = self.add_func(
            &name,
            vec![env_p.clone(), z.clone()],
            ret,
            Block::unit(vec![]),
        );
        self.prog.funcs[g.0 as usize].rec = Some(site);
        let (enum_ty, tag) = (p.enum_ty, p.tag);
        let captured = p.captured.clone();
        let saved = std::mem::take(&mut self.blocks);
        let saved_ids = std::mem::take(&mut self.block_ids);
        let saved_sinks = std::mem::take(&mut self.sinks);
        let saved_barriers = std::mem::take(&mut self.barriers);
        let body = self.block(|this| {
            let mut env = Env::new();
            for (k, x) in captured.iter().enumerate() {
                let a = if captured.len() == 1 {
                    Atom::Var(env_p.clone())
                } else {
                    let t = this.var_ty(x);
                    this.let_(&x.name, t, Expr::Proj(Atom::Var(env_p.clone()), k as u32))
                };
                env.insert(x.id, SVal::Dyn(a));
            }
            this.start(0);
            let me = this.let_(
                "me",
                enum_ty,
                Expr::Variant(enum_ty, tag, Atom::Var(env_p.clone())),
            );
            let fty = this.type_of.term(functional);
            let hty = fty
                .as_fun()
                .unwrap_or_else(|| panic!("internal error: fix of a {fty}"))
                .1
                .clone();
            let bt = hty
                .as_fun()
                .unwrap_or_else(|| panic!("internal error: fix at a {hty}"))
                .1
                .clone();
            let fv = this.term(functional, &env)?;
            let h = this.app(&fv, SVal::Dyn(me), &fty)?;
            let r = this.app(&h, SVal::Dyn(Atom::Var(z.clone())), &hty)?;
            this.materialise(&r, &bt)
        });
        self.blocks = saved;
        self.block_ids = saved_ids;
        self.sinks = saved_sinks;
        self.barriers = saved_barriers;
        self.prog.funcs[g.0 as usize].body = body?;
        let r = self.prog.var("r", ret);
        Ok(Arm {
            bind: Some(bind.clone()),
            body: Block {
                stmts: vec![Stmt::Let(
                    r.clone(),
                    Expr::Call(g, vec![Atom::Var(bind), Atom::Var(arg)]),
                )],
                result: Atom::Var(r),
            },
        })
    }

    /// The expansion of a derivative kernel `k t` as a linear λ closure (see
    /// [`LinPrim::expansion`]), or an error naming a kernel without one.
    fn kernel(&mut self, node: &Term, k: &Rc<LinPrim>, arg: SVal, env: &Env) -> Result<SVal> {
        let key = addr(Child::C(node));
        let (term, x) = match self.expansions.get(&key) {
            Some((_, t, x)) => (t.clone(), x.clone()),
            None => {
                let x = TVar::fresh("k", k.param().clone());
                let term = k.expansion(&Term::var(&x)).ok_or_else(|| {
                    Error::new(
                        ErrorKind::Unsupported,
                        format!(
                            "the derivative kernel `{}` has no definition as a term, so it cannot \
                             be compiled (register its derivative as terms, or give the kernel \
                             an expansion with `LinPrim::with_expansion`)",
                            k.name()
                        ),
                    )
                    .or_span(node.span)
                })?;
                self.occ.analyse(Child::C(&term));
                self.expansions
                    .insert(key, (node.clone(), term.clone(), x.clone()));
                (term, x)
            }
        };
        let mut env = env.clone();
        env.insert(x.id, arg);
        self.term(&term, &env)
    }
}

/// The variables a pattern binds, into `out`.
fn bind_pat_ids(p: &Pat, out: &mut FxHashSet<VarId>) {
    for x in p.vars() {
        out.insert(x.id);
    }
}

/// A name usable as a Rust identifier.
pub(crate) fn sanitize(name: &str) -> String {
    let mut s: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if s.is_empty() || s.starts_with(|c: char| c.is_ascii_digit()) {
        s.insert(0, '_');
    }
    s
}

/// The (primal) IR type of a source type, for callers converting values.
pub fn value_ty(types: &mut super::Types, t: &crate::types::Type) -> Ty {
    source_ty(types, t)
}

/// Whether the IR type is an enum.
pub fn is_enum(types: &super::Types, t: Ty) -> bool {
    matches!(types.kind(t), TyKind::Enum(_))
}

/// Whether a derivative's code contains a `fix` (so [`Lowering::jvp`] and [`Lowering::vjp`]
/// refuse it).
pub(crate) fn recursive(m: &Mor) -> bool {
    first_fix(&m.body).is_some()
}

/// The position of the first `fix` in a term (of either kind), if any.
fn first_fix(t: &Term) -> Option<Span> {
    let mut stack = vec![Child::C(t)];
    while let Some(c) = stack.pop() {
        match c {
            Child::C(t) => {
                if let TermKind::Fix(_, at) = &t.kind {
                    return Some(*at);
                }
                stack.extend(t.children());
            }
            Child::L(l) => stack.extend(l.children()),
        }
    }
    None
}

/// The error for the derivative code of a recursive definition, which the IR does not lower:
/// its closure-call derivatives (`closureArg`, `recordCall`, `closureEnv`, and forward mode's
/// powers) lower by re-running each recorded call, which a recursion nests once per level,
/// so the cost would grow exponentially with the recursion depth (note 10, "Native
/// backend"). The engine keeps a tape per call instead.
pub(crate) fn unsupported_recursive_derivative(at: Span) -> Error {
    Error::new(
        ErrorKind::Unsupported,
        "the derivatives of recursive definitions (`def rec`) are not compiled by the native \
         backend: their closure-call derivatives would re-run every recursive call at every \
         level (exponential in the recursion depth); only the primal runs natively",
    )
    .with_note("differentiate this program on the execution engine (the default backend)")
    .or_span(at)
}
