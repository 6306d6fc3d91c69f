//! The execution IR: a small, typed, first-order language with loops and accumulators, into
//! which simplified target terms (primal, forward and reverse programs) are lowered
//! ([`lower`]), and from which every backend runs: the reference interpreter ([`interp`]) and
//! the Rust code generator ([`rust`]). `theory-notes/07-ir-and-codegen.md` gives the lowering
//! rules and the accumulator analysis.
//!
//! # The language
//!
//! ```text
//! types   τ ::= f64 | i64 | bool | unit | (τ, ..., τ) | [τ] | list(κ, λ) | enum E
//! atoms   a ::= x | 1.5 | 3 | true | ()
//! exprs   e ::= a | op(a, ..) | prim p(a, ..) | (a, ..) | a.k | E::k(a) | [a, ..] | a[a] | a[a]?0
//!             | len a | build a (i -> block) | sum a (i -> block) | replicate a a
//!             | if a block block | match a { k(x) -> block, .. } | call f(a, ..)
//!             | zero τ | a + a | a * a (scale) | take m | get m
//!             | iterate[tape] x = a block
//! stmts   s ::= let x = e | mut m = e | set m = a | place += a [* a] | grow place a
//!             | for i in 0..a block | do e | loop block | break
//! places  p ::= m | p.k | p[a]
//! blocks  b ::= { s; ..; a }
//! ```
//!
//! # Invariants (checked by [`check`])
//!
//! * **First order, no closures.** Function values of the target language are
//!   defunctionalised: a closure is an enum value (one variant per λ of its type, the variant's
//!   payload the captured variables), application is a `match`. Sums are enums too.
//! * **SSA values, explicit mutation.** A `let` binds an immutable value, visible to the rest
//!   of its block. The only mutable state is `mut` variables (accumulators and loop state),
//!   changed by `set`, `+=` (at a place: a path of tuple fields and array elements into the
//!   variable) and `grow`, and read by `get` (a copy) or `take` (the last read).
//! * **Linear algebra on values.** Types built from `f64`, `unit`, tuples, arrays and lists are
//!   *additive*: `zero τ`, `a + b` and `c * a` are defined on them. Arrays add elementwise and
//!   denote finitely supported sequences: the zero array is empty, arrays of different lengths
//!   add by padding with zeros, and `a[i]?0` reads zero past the end (the target language's
//!   linear arrays, note 02). Lists (`list(κ, λ)`, pairs of a key and an additive value) add
//!   by concatenation and scale their values: the copowers `!τ ⊗ L` and the powers `τ → L`
//!   (formal sums of closures) of the target language.
//! * **Fixed summation order.** `sum` and the `sum`/`dot` primitives add in one fixed order,
//!   the same in every backend and in the reference evaluators ([`crate::value::sum_reals`]),
//!   so that results do not depend on the backend or the number of threads.
//! * **Recursion only through recursive functions.** Functions may call each other in
//!   cycles (a `fix` lowers to a closure variant whose apply calls a function that applies
//!   the functional to that very closure, note 10); a function with a [`Func::rec`] site
//!   counts its calls against the step budget and the recursion depth limit, so that every
//!   backend stops a runaway recursion with the engine's error at the `def rec`'s position.
//! * **Errors are values of the program's semantics.** Every operation that can fail (indexing,
//!   lengths, integer arithmetic, a primitive) carries a [`SiteId`]: the source position its
//!   runtime error reports.
//!
//! Types are interned ([`Types`]): a [`Ty`] is a small index, so types of any depth compare and
//! hash in O(1).

pub mod bounds;
pub mod check;
pub mod compile;
pub mod dual;
pub mod interp;
pub mod lower;
pub mod opt;
pub mod print;
pub mod reps;
pub mod rust;
pub mod split;

use crate::error::Span;
use crate::prim::Prim;
use std::collections::HashMap;
use std::fmt;
use std::rc::Rc;

/// An interned IR type.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct Ty(pub u32);

impl Ty {
    /// `f64`.
    pub const F64: Ty = Ty(0);
    /// `i64`.
    pub const I64: Ty = Ty(1);
    /// `bool`.
    pub const BOOL: Ty = Ty(2);
    /// `unit`.
    pub const UNIT: Ty = Ty(3);
}

/// The structure of a type.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub enum TyKind {
    /// Reals.
    F64,
    /// Integers.
    I64,
    /// Booleans.
    Bool,
    /// The unit type.
    Unit,
    /// A tuple (at least two components).
    Tuple(Vec<Ty>),
    /// An array.
    Array(Ty),
    /// A list of (key, additive value) pairs, added by concatenation.
    List(Ty, Ty),
    /// An enum ([`EnumDef`], by index).
    Enum(u32),
}

/// An enum: a sum type, or the defunctionalised closures of one function type.
#[derive(Clone, Debug)]
pub struct EnumDef {
    /// Its name (for printing and code generation).
    pub name: String,
    /// The variants: name and payload type.
    pub variants: Vec<(String, Ty)>,
}

/// The types of a program: interned structures and the enums.
#[derive(Clone, Debug)]
pub struct Types {
    kinds: Vec<TyKind>,
    index: HashMap<TyKind, Ty>,
    enums: Vec<EnumDef>,
    /// The enum of each sum type `A + B`, by its sides.
    sums: HashMap<(Ty, Ty), Ty>,
}

impl Default for Types {
    fn default() -> Types {
        let mut t = Types {
            kinds: Vec::new(),
            index: HashMap::new(),
            enums: Vec::new(),
            sums: HashMap::new(),
        };
        for k in [TyKind::F64, TyKind::I64, TyKind::Bool, TyKind::Unit] {
            t.intern(k);
        }
        t
    }
}

impl Types {
    /// The type with this structure.
    pub fn intern(&mut self, k: TyKind) -> Ty {
        if let TyKind::Tuple(cs) = &k {
            match cs.len() {
                0 => return Ty::UNIT,
                1 => return cs[0],
                _ => {}
            }
        }
        if let Some(&t) = self.index.get(&k) {
            return t;
        }
        let t = Ty(self.kinds.len() as u32);
        self.kinds.push(k.clone());
        self.index.insert(k, t);
        t
    }

    /// The type with this structure, if it is interned.
    pub fn lookup(&self, k: &TyKind) -> Option<Ty> {
        match k {
            TyKind::Tuple(cs) if cs.is_empty() => Some(Ty::UNIT),
            TyKind::Tuple(cs) if cs.len() == 1 => Some(cs[0]),
            _ => self.index.get(k).copied(),
        }
    }

    /// The enum of the sum type `a + b` (variants `Inl(a)` and `Inr(b)`), made on first use.
    pub fn sum(&mut self, a: Ty, b: Ty) -> Ty {
        if let Some(&t) = self.sums.get(&(a, b)) {
            return t;
        }
        let t = self.new_enum(format!("Sum{}", self.sums.len()));
        self.add_variant(t, "Inl", a);
        self.add_variant(t, "Inr", b);
        self.sums.insert((a, b), t);
        t
    }

    /// The sides `(a, b)` of a sum type's enum (`None` for other types, closure enums
    /// included).
    pub fn sum_sides(&self, t: Ty) -> Option<(Ty, Ty)> {
        self.sums.iter().find(|(_, e)| **e == t).map(|(k, _)| *k)
    }

    /// The enum of the sum type `a + b`, if it was made.
    pub fn lookup_sum(&self, a: Ty, b: Ty) -> Option<Ty> {
        self.sums.get(&(a, b)).copied()
    }

    /// The structure of a type.
    pub fn kind(&self, t: Ty) -> &TyKind {
        &self.kinds[t.0 as usize]
    }

    /// A tuple type (the unit type for none, the component itself for one).
    pub fn tuple(&mut self, cs: Vec<Ty>) -> Ty {
        self.intern(TyKind::Tuple(cs))
    }

    /// An array type.
    pub fn array(&mut self, t: Ty) -> Ty {
        self.intern(TyKind::Array(t))
    }

    /// A list type.
    pub fn list(&mut self, k: Ty, v: Ty) -> Ty {
        self.intern(TyKind::List(k, v))
    }

    /// A new enum with no variants yet; variants are added with [`Types::add_variant`].
    pub fn new_enum(&mut self, name: impl Into<String>) -> Ty {
        let e = self.enums.len() as u32;
        self.enums.push(EnumDef {
            name: name.into(),
            variants: Vec::new(),
        });
        self.intern(TyKind::Enum(e))
    }

    /// Adds a variant to an enum type; returns its tag.
    pub fn add_variant(&mut self, enum_ty: Ty, name: impl Into<String>, payload: Ty) -> u32 {
        let e = self.enum_index(enum_ty);
        let def = &mut self.enums[e as usize];
        def.variants.push((name.into(), payload));
        (def.variants.len() - 1) as u32
    }

    /// The index of an enum type's definition.
    pub fn enum_index(&self, t: Ty) -> u32 {
        match self.kind(t) {
            TyKind::Enum(e) => *e,
            other => panic!("internal error: {other:?} is not an enum type"),
        }
    }

    /// Whether values of `t` contain arrays: the values whose arrays' lengths are checked on
    /// entry (at most [`crate::value::MAX_ARRAY_LEN`] elements, which [`bounds`] relies on).
    /// Lists (tapes) are internal and never arguments.
    pub fn has_arrays(&self, t: Ty) -> bool {
        fn go(ts: &Types, t: Ty, seen: &mut Vec<Ty>) -> bool {
            if seen.contains(&t) {
                return false;
            }
            seen.push(t);
            match ts.kind(t) {
                TyKind::Array(_) => true,
                TyKind::Tuple(cs) => cs.iter().any(|c| go(ts, *c, seen)),
                TyKind::Enum(e) => ts.enums[*e as usize]
                    .variants
                    .iter()
                    .any(|(_, v)| go(ts, *v, seen)),
                _ => false,
            }
        }
        crate::deep::deep(|| go(self, t, &mut Vec::new()))
    }

    /// The definition of an enum type.
    pub fn enum_def(&self, t: Ty) -> &EnumDef {
        &self.enums[self.enum_index(t) as usize]
    }

    /// All enum definitions, by index.
    pub fn enums(&self) -> &[EnumDef] {
        &self.enums
    }

    /// Number of interned types.
    pub fn len(&self) -> usize {
        self.kinds.len()
    }

    /// Never true (the four base types are always interned).
    pub fn is_empty(&self) -> bool {
        self.kinds.is_empty()
    }

    /// The components of a tuple type.
    pub fn components(&self, t: Ty) -> &[Ty] {
        match self.kind(t) {
            TyKind::Tuple(cs) => cs,
            other => panic!("internal error: {other:?} is not a tuple type"),
        }
    }

    /// The element type of an array type.
    pub fn elem(&self, t: Ty) -> Ty {
        match self.kind(t) {
            TyKind::Array(e) => *e,
            other => panic!("internal error: {other:?} is not an array type"),
        }
    }

    /// Whether values of `t` can be added and scaled (`f64`, `unit`, and tuples, arrays and
    /// lists of such).
    pub fn is_additive(&self, t: Ty) -> bool {
        let mut stack = vec![t];
        while let Some(t) = stack.pop() {
            match self.kind(t) {
                TyKind::F64 | TyKind::Unit | TyKind::List(..) => {}
                TyKind::Tuple(cs) => stack.extend(cs.iter().copied()),
                TyKind::Array(e) => stack.push(*e),
                TyKind::I64 | TyKind::Bool | TyKind::Enum(_) => return false,
            }
        }
        true
    }

    /// The type as text (`f64`, `(f64, [i64])`, `list(i64, f64)`, `Sum3`).
    pub fn show(&self, t: Ty) -> String {
        let mut s = String::new();
        self.write(t, &mut s);
        s
    }

    fn write(&self, t: Ty, out: &mut String) {
        // Types are printed iteratively: a tuple type can be nested very deeply.
        enum W {
            Ty(Ty),
            Str(&'static str),
        }
        let mut work = vec![W::Ty(t)];
        while let Some(w) = work.pop() {
            match w {
                W::Str(s) => out.push_str(s),
                W::Ty(t) => match self.kind(t) {
                    TyKind::F64 => out.push_str("f64"),
                    TyKind::I64 => out.push_str("i64"),
                    TyKind::Bool => out.push_str("bool"),
                    TyKind::Unit => out.push_str("()"),
                    TyKind::Tuple(cs) => {
                        out.push('(');
                        work.push(W::Str(")"));
                        for (k, c) in cs.iter().enumerate().rev() {
                            work.push(W::Ty(*c));
                            if k > 0 {
                                work.push(W::Str(", "));
                            }
                        }
                    }
                    TyKind::Array(e) => {
                        out.push('[');
                        work.push(W::Str("]"));
                        work.push(W::Ty(*e));
                    }
                    TyKind::List(k, v) => {
                        out.push_str("list(");
                        work.push(W::Str(")"));
                        work.push(W::Ty(*v));
                        work.push(W::Str(", "));
                        work.push(W::Ty(*k));
                    }
                    TyKind::Enum(e) => out.push_str(&self.enums[*e as usize].name),
                },
            }
        }
    }
}

/// A variable: an immutable SSA value, or (in [`MutVar`]) a mutable one.
#[derive(Clone, Debug)]
pub struct Var {
    /// Identity within the program.
    pub id: u32,
    /// Display name (not necessarily unique).
    pub name: Rc<str>,
    /// The type.
    pub ty: Ty,
}

impl PartialEq for Var {
    fn eq(&self, other: &Var) -> bool {
        self.id == other.id
    }
}

/// A mutable variable (an accumulator or loop state). Same shape as [`Var`], a separate type
/// so that only statements can change it.
#[derive(Clone, Debug, PartialEq)]
pub struct MutVar(pub Var);

/// An operand.
#[derive(Clone, Debug)]
pub enum Atom {
    /// A variable.
    Var(Var),
    /// A real constant.
    F64(f64),
    /// An integer constant.
    I64(i64),
    /// A boolean constant.
    Bool(bool),
    /// `()`.
    Unit,
}

impl Atom {
    /// The variable, if this is one.
    pub fn as_var(&self) -> Option<&Var> {
        match self {
            Atom::Var(v) => Some(v),
            _ => None,
        }
    }

    /// The type.
    pub fn ty(&self) -> Ty {
        match self {
            Atom::Var(v) => v.ty,
            Atom::F64(_) => Ty::F64,
            Atom::I64(_) => Ty::I64,
            Atom::Bool(_) => Ty::BOOL,
            Atom::Unit => Ty::UNIT,
        }
    }
}

impl From<&Var> for Atom {
    fn from(v: &Var) -> Atom {
        Atom::Var(v.clone())
    }
}

/// Where a runtime error is reported: an index into [`Program::sites`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SiteId(pub u32);

/// Operations the lowering introduces itself (the program's own operations are [`Expr::Prim`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// `f64 + f64`.
    FAdd,
    /// `f64 * f64`.
    FMul,
    /// `-f64`.
    FNeg,
    /// `i64 as f64`.
    IToF,
    /// `i64 == i64`.
    IEq,
    /// `i64 < i64`.
    ILt,
    /// `i64 + i64` (never overflows where the lowering uses it: indices and lengths).
    IAdd,
    /// `max(i64, i64)`.
    IMax,
    /// `!bool`.
    Not,
}

impl Op {
    /// The operand types and the result type.
    pub fn signature(self) -> (&'static [Ty], Ty) {
        use Op::*;
        const FF: &[Ty] = &[Ty::F64, Ty::F64];
        const II: &[Ty] = &[Ty::I64, Ty::I64];
        match self {
            FAdd | FMul => (FF, Ty::F64),
            FNeg => (&[Ty::F64], Ty::F64),
            IToF => (&[Ty::I64], Ty::F64),
            IEq | ILt => (II, Ty::BOOL),
            IAdd | IMax => (II, Ty::I64),
            Not => (&[Ty::BOOL], Ty::BOOL),
        }
    }

    /// The name used in printed IR.
    pub fn name(self) -> &'static str {
        use Op::*;
        match self {
            FAdd => "fadd",
            FMul => "fmul",
            FNeg => "fneg",
            IToF => "itof",
            IEq => "ieq",
            ILt => "ilt",
            IAdd => "iadd",
            IMax => "imax",
            Not => "not",
        }
    }
}

/// A match arm: the payload's variable (if used) and the body.
#[derive(Clone, Debug)]
pub struct Arm {
    /// Binds the variant's payload.
    pub bind: Option<Var>,
    /// The arm's block.
    pub body: Block,
}

/// A right-hand side: computes a value.
#[derive(Clone, Debug)]
pub enum Expr {
    /// An operand.
    Atom(Atom),
    /// An operation of the lowering.
    Op(Op, Vec<Atom>),
    /// A registered primitive applied to its arguments (one per parameter).
    Prim(Prim, Vec<Atom>, SiteId),
    /// A tuple.
    Tuple(Vec<Atom>),
    /// A tuple's component.
    Proj(Atom, u32),
    /// An enum value: type, tag, payload.
    Variant(Ty, u32, Atom),
    /// An array or list literal of the given (array or list) type.
    Array(Ty, Vec<Atom>),
    /// `xs[i]`, failing out of range (an element of an array, an entry of a list).
    Index(Atom, Atom, SiteId),
    /// `xs[i]?0`: an element of an additive array, zero past the end (or before 0).
    IndexOr0(Atom, Atom),
    /// The length of an array or list.
    Len(Atom),
    /// `build n (i -> body)`: an array of `n` elements (failing for a negative or too large
    /// `n`).
    Build(Atom, Var, Block, SiteId),
    /// `sum n (i -> body)`: Σ body(i) over `i < n`, in the fixed summation order.
    Sum(Atom, Var, Block),
    /// `replicate n x` (failing for a bad `n`).
    Replicate(Atom, Atom, SiteId),
    /// A conditional.
    If(Atom, Block, Block),
    /// A match on an enum value, one arm per variant in order.
    Match(Atom, Vec<Arm>),
    /// `iterate s = init { body }`: the iteration of a `loop` (note 10). The state `s`
    /// starts at `init`; each step takes one `--max-steps` step (failing at the site past
    /// the budget) and runs the body, whose value is a sum `A + B` (an enum with two
    /// variants): variant 0 continues with the new state, variant 1 is the result `B`. With
    /// the tape flag the body's value is a pair `(A + B, T)` and the result `(B, [T])`, the
    /// `T` of every step run, in order.
    Iterate(Atom, Var, Block, bool, SiteId),
    /// A call of a function of the program.
    Call(FuncId, Vec<Atom>),
    /// The zero of an additive type.
    Zero(Ty),
    /// The sum of two additive values of one type.
    Add(Atom, Atom),
    /// `c * a` for a real `c` and an additive `a`.
    Scale(Atom, Atom),
    /// A copy of a mutable variable's value.
    Get(MutVar),
    /// The value of a mutable variable, which is not used again.
    Take(MutVar),
}

/// A step of a [`Place`]'s path.
#[derive(Clone, Debug)]
pub enum Step {
    /// A tuple component.
    Field(u32),
    /// An array element (which must exist: see [`Stmt::Grow`]).
    Elem(Atom),
}

/// A location inside a mutable variable.
#[derive(Clone, Debug)]
pub struct Place {
    /// The variable.
    pub root: MutVar,
    /// The path into it.
    pub path: Vec<Step>,
}

impl Place {
    /// The whole variable.
    pub fn of(m: &MutVar) -> Place {
        Place {
            root: m.clone(),
            path: Vec::new(),
        }
    }

    /// A component of this place.
    pub fn field(&self, k: u32) -> Place {
        let mut p = self.clone();
        p.path.push(Step::Field(k));
        p
    }

    /// An element of this (array) place.
    pub fn elem(&self, i: Atom) -> Place {
        let mut p = self.clone();
        p.path.push(Step::Elem(i));
        p
    }
}

/// A statement.
#[derive(Clone, Debug)]
pub enum Stmt {
    /// `let x = e`.
    Let(Var, Expr),
    /// `mut m = e`: declares a mutable variable.
    Mut(MutVar, Expr),
    /// `set m = a`.
    Set(MutVar, Atom),
    /// `place += value` (`place += scale * value` with a scale): additive types only.
    AddTo {
        /// Where.
        place: Place,
        /// What.
        value: Atom,
        /// A real factor, if any.
        scale: Option<Atom>,
    },
    /// `grow place n`: makes the array at `place` at least `n` long (padding with zeros).
    Grow(Place, Atom),
    /// `for i in 0..n { body }` (the body's result is unit).
    For(Var, Atom, Block),
    /// Evaluates an expression of unit type for its effects (an `if` or `match` of
    /// statements).
    Do(Expr),
    /// `loop { body }`: runs the body until a `break` (carried state lives in `mut`s).
    Loop(Block),
    /// Leaves the innermost `loop`.
    Break,
    /// Fails with a runtime error at the site unless the check holds.
    Check(Check, SiteId),
}

/// A runtime check ([`Stmt::Check`]); the messages are those of the reference evaluators
/// ([`Check::failure`]).
#[derive(Clone, Debug)]
pub enum Check {
    /// `0 <= i < n` for `onehot n i` (`i`, `n`).
    OneHot(Atom, Atom),
    /// Two arrays of one operation have the same length (`map2`).
    SameLen(&'static str, Atom, Atom),
    /// A valid length for an operation (`build`, `replicate`).
    Len(&'static str, Atom),
}

impl Check {
    /// The operands.
    pub fn atoms(&self) -> Vec<&Atom> {
        match self {
            Check::OneHot(a, b) | Check::SameLen(_, a, b) => vec![a, b],
            Check::Len(_, a) => vec![a],
        }
    }

    /// The error if the check fails for these operand values (integers, in the order of
    /// [`Check::atoms`]), the same as the reference evaluators report.
    pub fn failure(&self, xs: &[i64]) -> Option<crate::error::Error> {
        use crate::value;
        match self {
            Check::OneHot(..) => {
                let (i, n) = (xs[0], xs[1]);
                if i < 0 || i >= n {
                    Some(crate::error::Error::runtime(format!(
                        "onehot: index {i} out of range for an array of length {n}"
                    )))
                } else {
                    None
                }
            }
            Check::SameLen(op, ..) => {
                value::check_same_len(op, xs[0] as usize, xs[1] as usize).err()
            }
            Check::Len(op, _) => value::check_len(op, xs[0]).err(),
        }
    }
}

/// A sequence of statements and the block's value.
#[derive(Clone, Debug)]
pub struct Block {
    /// The statements, in order.
    pub stmts: Vec<Stmt>,
    /// The value.
    pub result: Atom,
}

impl Block {
    /// A block of statements with a unit result.
    pub fn unit(stmts: Vec<Stmt>) -> Block {
        Block {
            stmts,
            result: Atom::Unit,
        }
    }
}

/// A function's index in [`Program::funcs`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FuncId(pub u32);

/// A function.
#[derive(Clone, Debug)]
pub struct Func {
    /// Its name (unique in the program).
    pub name: String,
    /// Parameters.
    pub params: Vec<Var>,
    /// Result type.
    pub ret: Ty,
    /// Body.
    pub body: Block,
    /// The function threads an accumulator: its last parameter and its result have one type,
    /// and the result is that parameter with something added (`acc_apply(f, x, acc) = acc +
    /// f • x`). The meaning is the same as any other function's; backends with a separate
    /// in-place representation of additive values may pass the accumulator in it, both ways
    /// ([`reps`]).
    pub accumulates: bool,
    /// For the body of a recursive definition (a `fix` of the target language, `def rec` in
    /// the source), its site: every call of the function is one *recursive call* there, taking
    /// one `--max-steps` step and one level of the recursion depth limit
    /// ([`crate::steps::recursive_call`]), failing at the site past either.
    pub rec: Option<SiteId>,
}

/// Where a runtime error is reported.
#[derive(Clone, Debug)]
pub struct Site {
    /// The source position.
    pub span: Span,
}

/// A program: types, functions and error sites.
#[derive(Clone, Debug, Default)]
pub struct Program {
    /// The types.
    pub types: Types,
    /// The functions (callers refer to them by [`FuncId`]).
    pub funcs: Vec<Func>,
    /// The error sites.
    pub sites: Vec<Site>,
    /// Source of fresh variable ids.
    pub next_var: u32,
    /// The site of operations that cannot fail (indexing in range in a loop), if any: never
    /// reported, so backends need not check them.
    pub internal_site: Option<SiteId>,
}

impl Program {
    /// A fresh variable.
    pub fn var(&mut self, name: &str, ty: Ty) -> Var {
        let id = self.next_var;
        self.next_var += 1;
        Var {
            id,
            name: name.into(),
            ty,
        }
    }

    /// A fresh mutable variable.
    pub fn mut_var(&mut self, name: &str, ty: Ty) -> MutVar {
        MutVar(self.var(name, ty))
    }

    /// A new error site.
    pub fn site(&mut self, span: Span) -> SiteId {
        self.sites.push(Site { span });
        SiteId(self.sites.len() as u32 - 1)
    }

    /// The site of operations that cannot fail ([`Program::internal_site`]), made on first
    /// use.
    pub fn internal(&mut self) -> SiteId {
        match self.internal_site {
            Some(s) => s,
            None => {
                let s = self.site(Span::default());
                self.internal_site = Some(s);
                s
            }
        }
    }

    /// The function named `name`.
    pub fn find(&self, name: &str) -> Option<FuncId> {
        self.funcs
            .iter()
            .position(|f| f.name == name)
            .map(|i| FuncId(i as u32))
    }

    /// A function by id.
    pub fn func(&self, f: FuncId) -> &Func {
        &self.funcs[f.0 as usize]
    }
}

impl fmt::Display for Program {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&print::program(self))
    }
}

/// Whether two atoms are the same variable or the same integer (what places and lengths are
/// compared by).
pub(crate) fn same_atom(a: &Atom, b: &Atom) -> bool {
    match (a, b) {
        (Atom::Var(x), Atom::Var(y)) => x.id == y.id,
        (Atom::I64(x), Atom::I64(y)) => x == y,
        _ => false,
    }
}

/// Whether two steps of a place are the same field or the element at the same atom.
pub(crate) fn same_step(a: &Step, b: &Step) -> bool {
    match (a, b) {
        (Step::Field(x), Step::Field(y)) => x == y,
        (Step::Elem(x), Step::Elem(y)) => same_atom(x, y),
        _ => false,
    }
}

/// Calls `f` on each block directly inside an expression (a loop's body, an `if`'s branches,
/// a `match`'s arms), in order.
pub fn for_each_block(e: &Expr, f: &mut dyn FnMut(&Block)) {
    match e {
        Expr::Build(_, _, b, _) | Expr::Sum(_, _, b) | Expr::Iterate(_, _, b, _, _) => f(b),
        Expr::If(_, a, b) => {
            f(a);
            f(b);
        }
        Expr::Match(_, arms) => arms.iter().for_each(|a| f(&a.body)),
        _ => {}
    }
}

/// Calls `f` on each operand of an expression itself (not those inside its blocks).
pub fn for_each_operand_mut(e: &mut Expr, f: &mut dyn FnMut(&mut Atom)) {
    match e {
        Expr::Atom(a)
        | Expr::Proj(a, _)
        | Expr::Variant(_, _, a)
        | Expr::Len(a)
        | Expr::Build(a, ..)
        | Expr::Sum(a, ..)
        | Expr::If(a, ..)
        | Expr::Match(a, _)
        | Expr::Iterate(a, ..) => f(a),
        Expr::Op(_, xs)
        | Expr::Prim(_, xs, _)
        | Expr::Tuple(xs)
        | Expr::Array(_, xs)
        | Expr::Call(_, xs) => xs.iter_mut().for_each(f),
        Expr::Index(a, b, _)
        | Expr::IndexOr0(a, b)
        | Expr::Replicate(a, b, _)
        | Expr::Add(a, b)
        | Expr::Scale(a, b) => {
            f(a);
            f(b);
        }
        Expr::Zero(_) | Expr::Get(_) | Expr::Take(_) => {}
    }
}

/// Calls `f` on each operand of a statement itself (not those inside its blocks or its
/// expression's blocks).
pub fn for_each_stmt_operand_mut(s: &mut Stmt, f: &mut dyn FnMut(&mut Atom)) {
    let place = |p: &mut Place, f: &mut dyn FnMut(&mut Atom)| {
        for st in &mut p.path {
            if let Step::Elem(i) = st {
                f(i);
            }
        }
    };
    match s {
        Stmt::Let(_, e) | Stmt::Mut(_, e) | Stmt::Do(e) => for_each_operand_mut(e, f),
        Stmt::Set(_, a) | Stmt::For(_, a, _) => f(a),
        Stmt::AddTo {
            place: p,
            value,
            scale,
        } => {
            place(p, f);
            f(value);
            if let Some(c) = scale {
                f(c);
            }
        }
        Stmt::Grow(p, n) => {
            place(p, f);
            f(n);
        }
        Stmt::Check(c, _) => match c {
            Check::OneHot(a, b) | Check::SameLen(_, a, b) => {
                f(a);
                f(b);
            }
            Check::Len(_, a) => f(a),
        },
        Stmt::Loop(_) | Stmt::Break => {}
    }
}

/// [`for_each_block`], for changing the blocks.
pub fn for_each_block_mut(e: &mut Expr, f: &mut dyn FnMut(&mut Block)) {
    match e {
        Expr::Build(_, _, b, _) | Expr::Sum(_, _, b) | Expr::Iterate(_, _, b, _, _) => f(b),
        Expr::If(_, a, b) => {
            f(a);
            f(b);
        }
        Expr::Match(_, arms) => arms.iter_mut().for_each(|a| f(&mut a.body)),
        _ => {}
    }
}

/// Calls `f` on each block directly inside a statement (a loop's body, the blocks of its
/// expression), in order.
pub fn for_each_stmt_block_mut(s: &mut Stmt, f: &mut dyn FnMut(&mut Block)) {
    match s {
        Stmt::Let(_, e) | Stmt::Mut(_, e) | Stmt::Do(e) => for_each_block_mut(e, f),
        Stmt::For(_, _, body) | Stmt::Loop(body) => f(body),
        _ => {}
    }
}

/// Calls `f` on every expression of a block, at any depth (statements' right-hand sides and
/// the expressions nested in their blocks), outer ones first.
pub fn for_each_expr(b: &Block, f: &mut dyn FnMut(&Expr)) {
    crate::deep::deep(|| {
        for s in &b.stmts {
            match s {
                Stmt::Let(_, e) | Stmt::Mut(_, e) | Stmt::Do(e) => {
                    f(e);
                    for_each_block(e, &mut |b| for_each_expr(b, f));
                }
                Stmt::For(_, _, body) | Stmt::Loop(body) => for_each_expr(body, f),
                Stmt::Set(..)
                | Stmt::AddTo { .. }
                | Stmt::Grow(..)
                | Stmt::Break
                | Stmt::Check(..) => {}
            }
        }
    })
}

impl Program {
    /// The functions on a cycle of the call graph (that can call themselves through other
    /// functions): recursive functions ([`Func::rec`]) and the apply functions of closures
    /// they reach, e.g. the backpropagators of a `def rec`, applied once per recursive call.
    pub fn cyclic_funcs(&self) -> std::collections::HashSet<FuncId> {
        let callees: Vec<Vec<FuncId>> = self
            .funcs
            .iter()
            .map(|f| {
                let mut cs = Vec::new();
                for_each_expr(&f.body, &mut |e| {
                    if let Expr::Call(g, _) = e {
                        cs.push(*g);
                    }
                });
                cs
            })
            .collect();
        let mut out = std::collections::HashSet::new();
        for start in 0..self.funcs.len() {
            // Is `start` reachable from its own callees?
            let mut seen = vec![false; self.funcs.len()];
            let mut stack: Vec<FuncId> = callees[start].clone();
            while let Some(g) = stack.pop() {
                let k = g.0 as usize;
                if k == start {
                    out.insert(FuncId(start as u32));
                    break;
                }
                if !std::mem::replace(&mut seen[k], true) {
                    stack.extend(callees[k].iter().copied());
                }
            }
        }
        out
    }
}

/// How a variable occurs ([`for_each_var_mut`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Occurrence {
    /// It is bound here (a `let`, `mut`, loop index, match payload, `iterate` state).
    pub binds: bool,
    /// It is a mutable variable (a [`MutVar`]'s).
    pub mutable: bool,
}

/// Calls `f` on every variable of a block at any depth, binders and uses, immutable ones and
/// those inside [`MutVar`]s (declarations, `set`, places, `get`, `take`), in order, with how
/// it occurs: the one traversal for finding and renaming variables.
pub fn for_each_var_mut(b: &mut Block, f: &mut dyn FnMut(&mut Var, Occurrence)) {
    const USE: Occurrence = Occurrence {
        binds: false,
        mutable: false,
    };
    const BIND: Occurrence = Occurrence {
        binds: true,
        mutable: false,
    };
    const MUT: Occurrence = Occurrence {
        binds: false,
        mutable: true,
    };
    fn atom(a: &mut Atom, f: &mut dyn FnMut(&mut Var, Occurrence)) {
        if let Atom::Var(x) = a {
            f(x, USE);
        }
    }
    fn place(p: &mut Place, f: &mut dyn FnMut(&mut Var, Occurrence)) {
        f(&mut p.root.0, MUT);
        for st in &mut p.path {
            if let Step::Elem(i) = st {
                atom(i, f);
            }
        }
    }
    fn expr(e: &mut Expr, f: &mut dyn FnMut(&mut Var, Occurrence)) {
        for_each_operand_mut(e, &mut |a| atom(a, f));
        match e {
            Expr::Build(_, i, ..) | Expr::Sum(_, i, _) | Expr::Iterate(_, i, ..) => f(i, BIND),
            Expr::Match(_, arms) => {
                for x in arms.iter_mut().filter_map(|a| a.bind.as_mut()) {
                    f(x, BIND);
                }
            }
            Expr::Get(m) | Expr::Take(m) => f(&mut m.0, MUT),
            _ => {}
        }
        for_each_block_mut(e, &mut |b| for_each_var_mut(b, f));
    }
    crate::deep::deep(|| {
        for s in &mut b.stmts {
            match s {
                Stmt::Let(x, e) => {
                    f(x, BIND);
                    expr(e, f);
                }
                Stmt::Mut(m, e) => {
                    f(
                        &mut m.0,
                        Occurrence {
                            binds: true,
                            mutable: true,
                        },
                    );
                    expr(e, f);
                }
                Stmt::Do(e) => expr(e, f),
                Stmt::Set(m, a) => {
                    f(&mut m.0, MUT);
                    atom(a, f);
                }
                Stmt::AddTo {
                    place: p,
                    value,
                    scale,
                } => {
                    place(p, f);
                    atom(value, f);
                    if let Some(c) = scale {
                        atom(c, f);
                    }
                }
                Stmt::Grow(p, n) => {
                    place(p, f);
                    atom(n, f);
                }
                Stmt::For(i, n, body) => {
                    f(i, BIND);
                    atom(n, f);
                    for_each_var_mut(body, f);
                }
                Stmt::Loop(body) => for_each_var_mut(body, f),
                Stmt::Check(..) => for_each_stmt_operand_mut(s, &mut |a| atom(a, f)),
                Stmt::Break => {}
            }
        }
        atom(&mut b.result, f);
    })
}
