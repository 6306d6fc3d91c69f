//! Typed core terms: the checker's output, and the input of the compiler and the evaluator.
//!
//! Core terms are the surface language with the sugar resolved: operators and builtins are
//! saturated [`TermKind::Prim`] applications, polymorphic builtins (`map`, `fst`, `inl`, ...) are
//! their own forms, `&&`/`||` are `if`s, multi-argument lambdas are nested, partial applications
//! of builtins are lambdas, and every integer literal is an `Int` or a `Real`.
//!
//! Every variable has a unique [`VarId`] (names are kept only for printing), so there is no
//! shadowing or capture to worry about in any pass. Every node knows its type: [`Term::new`]
//! computes it from the children by the local typing rule and refuses ill-typed nodes, so a core
//! term is well-typed by construction.
//!
//! Binding structure: `Lam(x, b)` binds `x` in `b`; `Let(p, e, b)` binds the variables of `p`
//! in `b`; `Case(e, p, t1, q, t2)` binds `p` in `t1` and `q` in `t2`.

use crate::deep::{Deep, deep};
use crate::error::Span;
use crate::prim::Prim;
use crate::types::Type;
use smallvec::SmallVec;
use std::fmt;
use std::rc::Rc;
use std::sync::atomic::{AtomicU32, Ordering};

/// A unique variable identity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct VarId(pub u32);

static NEXT_VAR: AtomicU32 = AtomicU32::new(1);

impl VarId {
    /// A fresh identity, distinct from every other one made in this process.
    pub fn fresh() -> VarId {
        VarId(NEXT_VAR.fetch_add(1, Ordering::Relaxed))
    }
}

/// A variable: identity, display name, type.
#[derive(Clone)]
pub struct Var {
    /// The identity (what scoping uses).
    pub id: VarId,
    /// The name as written (for printing).
    pub name: Rc<str>,
    /// The type.
    pub ty: Type,
}

impl Var {
    /// A fresh variable.
    pub fn fresh(name: impl Into<Rc<str>>, ty: Type) -> Var {
        Var {
            id: VarId::fresh(),
            name: name.into(),
            ty,
        }
    }
}

impl fmt::Debug for Var {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}#{} : {}", self.name, self.id.0, self.ty)
    }
}

/// A binding pattern (cloned and dropped under [`crate::deep`]: it may be as deep as the
/// program).
#[derive(Debug)]
pub enum Pat {
    /// Binds a variable.
    Var(Var),
    /// Binds nothing (a value of the given type is discarded).
    Wild(Type),
    /// Destructures a pair.
    Pair(Box<Pat>, Box<Pat>),
}

impl Clone for Pat {
    fn clone(&self) -> Pat {
        crate::deep::deep(|| match self {
            Pat::Var(v) => Pat::Var(v.clone()),
            Pat::Wild(t) => Pat::Wild(t.clone()),
            Pat::Pair(a, b) => Pat::Pair(a.clone(), b.clone()),
        })
    }
}

impl Drop for Pat {
    fn drop(&mut self) {
        if let Pat::Pair(a, b) = self {
            let a = std::mem::replace(&mut **a, Pat::Wild(Type::Unit));
            let b = std::mem::replace(&mut **b, Pat::Wild(Type::Unit));
            crate::deep::deep_drop(move || drop((a, b)));
        }
    }
}

impl Pat {
    /// The type of value the pattern matches.
    pub fn ty(&self) -> Type {
        deep(|| match self {
            Pat::Var(v) => v.ty.clone(),
            Pat::Wild(t) => t.clone(),
            Pat::Pair(a, b) => Type::prod(a.ty(), b.ty()),
        })
    }

    /// The bound variables, left to right.
    pub fn vars(&self) -> Vec<&Var> {
        let mut out = Vec::new();
        fn go<'a>(p: &'a Pat, out: &mut Vec<&'a Var>) {
            deep(|| match p {
                Pat::Var(v) => out.push(v),
                Pat::Wild(_) => {}
                Pat::Pair(a, b) => {
                    go(a, out);
                    go(b, out);
                }
            })
        }
        go(self, &mut out);
        out
    }
}

/// A literal constant.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Lit {
    /// A real.
    Real(f64),
    /// An integer.
    Int(i64),
    /// A boolean.
    Bool(bool),
    /// `()`.
    Unit,
}

impl Lit {
    /// The literal's type.
    pub fn ty(&self) -> Type {
        match self {
            Lit::Real(_) => Type::Real,
            Lit::Int(_) => Type::Int,
            Lit::Bool(_) => Type::Bool,
            Lit::Unit => Type::Unit,
        }
    }

    /// The literal's value.
    pub fn value(&self) -> crate::value::Value {
        use crate::value::Value;
        match *self {
            Lit::Real(x) => Value::Real(x),
            Lit::Int(i) => Value::Int(i),
            Lit::Bool(b) => Value::Bool(b),
            Lit::Unit => Value::Unit,
        }
    }
}

/// The forms of core terms.
#[derive(Clone)]
pub enum TermKind {
    /// A variable.
    Var(Var),
    /// A literal.
    Lit(Lit),
    /// `\(x : A) -> body`.
    Lam(Var, Term),
    /// Application `f a`.
    App(Term, Term),
    /// `let p = e in body`.
    Let(Pat, Term, Term),
    /// `(a, b)`.
    Pair(Term, Term),
    /// `fst e`.
    Fst(Term),
    /// `snd e`.
    Snd(Term),
    /// `if c then a else b`.
    If(Term, Term, Term),
    /// `inl e : A + B`, with `B` given.
    Inl(Term, Type),
    /// `inr e : A + B`, with `A` given.
    Inr(Type, Term),
    /// `case e of inl p -> a | inr q -> b`.
    Case(Term, Pat, Term, Pat, Term),
    /// A primitive applied to all its arguments.
    Prim(Prim, Vec<Term>),
    /// An array literal with its element type.
    Array(Type, Vec<Term>),
    /// `map f xs`.
    Map(Term, Term),
    /// `map2 f xs ys` (with `f : A -> B -> C`).
    Map2(Term, Term, Term),
    /// `build n f` (with `f : Int -> A`).
    Build(Term, Term),
    /// `xs ! i`.
    Index(Term, Term),
    /// `length xs`.
    Length(Term),
    /// `replicate n x`.
    Replicate(Term, Term),
    /// `loop f x` (with `f : A -> A + B`, `x : A`): the iteration combinator. `f` is applied
    /// while it returns `inl` (the next state); its first `inr` is the result. `fold`,
    /// `iterate` and `while` are desugared into it by the checker.
    ///
    /// With the tape flag (`loopTape f x`, a core form only: `scan` is desugared into it) the
    /// step is `f : A -> (A + B) × C` and the result `B × Array C`: the `C` of every step run,
    /// the one that returns `inr` included, in order. It is the target language's `loopTape`,
    /// so derivative code that records a tape concretises into it in O(steps).
    Loop(Term, Term, bool),
    /// `fix F` (with `F : (A -> B) -> (A -> B)`, result `A -> B`): the recursive function
    /// `g` with `g a = F g a` (what `def rec` elaborates to, `F = \g -> \x -> body`). Each
    /// call counts against the recursion depth limit and the step budget at the node's
    /// position ([`crate::steps::recursive_call`]).
    Fix(Term),
}

/// A typed core term: a cheap-to-clone, immutable handle.
#[derive(Clone)]
pub struct Term(Rc<Deep<Node>>);

/// A node of a core term.
pub struct Node {
    /// The form.
    pub kind: TermKind,
    /// The type (computed by [`Term::new`]).
    pub ty: Type,
    /// Where it came from in the source (default for generated terms).
    pub span: Span,
}

impl std::ops::Deref for Term {
    type Target = Node;
    fn deref(&self) -> &Node {
        &self.0
    }
}

fn expect_eq(what: &str, expected: &Type, found: &Type) -> Result<(), String> {
    if expected == found {
        Ok(())
    } else {
        Err(format!("{what}: expected {expected}, found {found}"))
    }
}

fn expect_fun<'a>(what: &str, t: &'a Type) -> Result<(&'a Type, &'a Type), String> {
    t.as_fun()
        .ok_or_else(|| format!("{what}: expected a function, found {t}"))
}

fn expect_array<'a>(what: &str, t: &'a Type) -> Result<&'a Type, String> {
    t.as_array()
        .ok_or_else(|| format!("{what}: expected an array, found {t}"))
}

/// The local typing rule: the type of a node given its children, or why it is ill-typed.
pub fn type_of(kind: &TermKind) -> Result<Type, String> {
    Ok(match kind {
        TermKind::Var(v) => v.ty.clone(),
        TermKind::Lit(l) => l.ty(),
        TermKind::Lam(x, b) => Type::fun(x.ty.clone(), b.ty.clone()),
        TermKind::App(f, a) => {
            let (dom, cod) = expect_fun("application", &f.ty)?;
            expect_eq("argument", dom, &a.ty)?;
            cod.clone()
        }
        TermKind::Let(p, e, b) => {
            expect_eq("let pattern", &p.ty(), &e.ty)?;
            b.ty.clone()
        }
        TermKind::Pair(a, b) => Type::prod(a.ty.clone(), b.ty.clone()),
        TermKind::Fst(e) => e.ty.as_prod().ok_or("fst of a non-pair")?.0.clone(),
        TermKind::Snd(e) => e.ty.as_prod().ok_or("snd of a non-pair")?.1.clone(),
        TermKind::If(c, a, b) => {
            expect_eq("condition", &Type::Bool, &c.ty)?;
            expect_eq("else branch", &a.ty, &b.ty)?;
            a.ty.clone()
        }
        TermKind::Inl(e, r) => Type::sum(e.ty.clone(), r.clone()),
        TermKind::Inr(l, e) => Type::sum(l.clone(), e.ty.clone()),
        TermKind::Case(e, p, a, q, b) => {
            let (l, r) = e.ty.as_sum().ok_or("case on a non-sum")?;
            expect_eq("inl pattern", l, &p.ty())?;
            expect_eq("inr pattern", r, &q.ty())?;
            expect_eq("inr branch", &a.ty, &b.ty)?;
            a.ty.clone()
        }
        TermKind::Prim(op, args) => {
            if args.len() != op.params().len() {
                return Err(format!("{} applied to {} arguments", op.name(), args.len()));
            }
            for (a, t) in args.iter().zip(op.params()) {
                expect_eq(op.name(), t, &a.ty)?;
            }
            op.result().clone()
        }
        TermKind::Array(elem, items) => {
            for it in items {
                expect_eq("array element", elem, &it.ty)?;
            }
            Type::array(elem.clone())
        }
        TermKind::Map(f, xs) => {
            let (a, b) = expect_fun("map", &f.ty)?;
            expect_eq("map array", &Type::array(a.clone()), &xs.ty)?;
            Type::array(b.clone())
        }
        TermKind::Map2(f, xs, ys) => {
            let (a, bc) = expect_fun("map2", &f.ty)?;
            let (b, c) = expect_fun("map2", bc)?;
            expect_eq("map2 first array", &Type::array(a.clone()), &xs.ty)?;
            expect_eq("map2 second array", &Type::array(b.clone()), &ys.ty)?;
            Type::array(c.clone())
        }
        TermKind::Build(n, f) => {
            expect_eq("build size", &Type::Int, &n.ty)?;
            let (i, a) = expect_fun("build", &f.ty)?;
            expect_eq("build index", &Type::Int, i)?;
            Type::array(a.clone())
        }
        TermKind::Index(xs, i) => {
            expect_eq("index", &Type::Int, &i.ty)?;
            expect_array("index", &xs.ty)?.clone()
        }
        TermKind::Length(xs) => {
            expect_array("length", &xs.ty)?;
            Type::Int
        }
        TermKind::Replicate(n, x) => {
            expect_eq("replicate count", &Type::Int, &n.ty)?;
            Type::array(x.ty.clone())
        }
        TermKind::Loop(f, x, tape) => {
            let (a, r) = expect_fun("loop", &f.ty)?;
            expect_eq("loop state", a, &x.ty)?;
            let (ab, c) = if *tape {
                let (ab, c) = r
                    .as_prod()
                    .ok_or("loopTape: the step must return a pair (A + B) × C")?;
                (ab, Some(c))
            } else {
                (r, None)
            };
            let (a2, b) = ab
                .as_sum()
                .ok_or("loop: the step must return a sum A + B")?;
            expect_eq("loop next state", a, a2)?;
            match c {
                Some(c) => Type::prod(b.clone(), Type::array(c.clone())),
                None => b.clone(),
            }
        }
        TermKind::Fix(f) => {
            let (g, g2) = expect_fun("fix", &f.ty)?;
            expect_fun("fix", g)?;
            expect_eq("fix: the functional's result", g, g2)?;
            g.clone()
        }
    })
}

impl Term {
    /// A node, typed by the local rule. Panics if the node is ill-typed: callers (the checker,
    /// the generators) only build well-typed terms, so this is an internal invariant.
    pub fn new(kind: TermKind, span: Span) -> Term {
        match Term::try_new(kind, span) {
            Ok(t) => t,
            Err(e) => panic!("internal error: ill-typed core term: {e}"),
        }
    }

    /// A node, typed by the local rule, or why it is ill-typed (for building terms from
    /// untrusted input, such as [`crate::target::unembed`] does from target terms).
    pub fn try_new(kind: TermKind, span: Span) -> Result<Term, String> {
        let ty = type_of(&kind)?;
        Ok(Term(Rc::new(Deep::new(Node { kind, ty, span }))))
    }

    /// A variable occurrence.
    pub fn var(v: &Var) -> Term {
        Term::new(TermKind::Var(v.clone()), Span::default())
    }

    /// A literal.
    pub fn lit(l: Lit) -> Term {
        Term::new(TermKind::Lit(l), Span::default())
    }

    /// The immediate subterms, left to right (the order of evaluation).
    pub fn children(&self) -> SmallVec<[&Term; 4]> {
        use TermKind::*;
        match &self.kind {
            Var(_) | Lit(_) => SmallVec::new(),
            Lam(_, b) | Fst(b) | Snd(b) | Inl(b, _) | Inr(_, b) | Length(b) | Fix(b) => {
                SmallVec::from_slice(&[b])
            }
            App(a, b)
            | Let(_, a, b)
            | Pair(a, b)
            | Map(a, b)
            | Build(a, b)
            | Index(a, b)
            | Replicate(a, b)
            | Loop(a, b, _) => SmallVec::from_slice(&[a, b]),
            If(a, b, c) | Case(a, _, b, _, c) | Map2(a, b, c) => SmallVec::from_slice(&[a, b, c]),
            Prim(_, args) | Array(_, args) => args.iter().collect(),
        }
    }

    /// The same node with each immediate subterm replaced by `f` of it (called in
    /// [`Term::children`]'s order); binders, literals and annotations kept. `f` must preserve
    /// types where the node's typing rule needs it (it is an internal invariant: panics
    /// otherwise, as [`Term::new`]).
    pub fn map_children(&self, mut f: impl FnMut(&Term) -> Term) -> Term {
        use TermKind::*;
        let kind = match &self.kind {
            Var(_) | Lit(_) => return self.clone(),
            Lam(x, b) => Lam(x.clone(), f(b)),
            App(a, b) => App(f(a), f(b)),
            Let(p, a, b) => Let(p.clone(), f(a), f(b)),
            Pair(a, b) => Pair(f(a), f(b)),
            Fst(a) => Fst(f(a)),
            Snd(a) => Snd(f(a)),
            If(a, b, c) => If(f(a), f(b), f(c)),
            Inl(a, t) => Inl(f(a), t.clone()),
            Inr(t, a) => Inr(t.clone(), f(a)),
            Case(a, p, b, q, c) => Case(f(a), p.clone(), f(b), q.clone(), f(c)),
            Prim(p, args) => Prim(p.clone(), args.iter().map(&mut f).collect()),
            Array(t, xs) => Array(t.clone(), xs.iter().map(&mut f).collect()),
            Map(a, b) => Map(f(a), f(b)),
            Map2(a, b, c) => Map2(f(a), f(b), f(c)),
            Build(a, b) => Build(f(a), f(b)),
            Index(a, b) => Index(f(a), f(b)),
            Length(a) => Length(f(a)),
            Replicate(a, b) => Replicate(f(a), f(b)),
            Loop(a, b, tape) => Loop(f(a), f(b), *tape),
            Fix(a) => Fix(f(a)),
        };
        Term::new(kind, self.span)
    }

    /// The spine of an application `h a1 .. an`: the head `h` (not an application) and the
    /// arguments in order (none for a term that is not an application).
    pub fn spine(&self) -> (&Term, Vec<&Term>) {
        let mut args = Vec::new();
        let mut head = self;
        while let TermKind::App(f, a) = &head.kind {
            args.push(a);
            head = f;
        }
        args.reverse();
        (head, args)
    }

    /// Number of nodes (iteratively, so any depth is fine).
    pub fn size(&self) -> usize {
        let mut n = 0;
        let mut stack = vec![self];
        while let Some(t) = stack.pop() {
            n += 1;
            stack.extend(t.children());
        }
        n
    }
}

impl fmt::Display for Term {
    /// Prints in the surface syntax (see [`crate::source::print`]).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&crate::source::print::term_to_string(self, 100))
    }
}

impl fmt::Debug for Term {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

/// The parts `(g, x, body)` of a fixpoint's functional seen as `\g -> \x -> body`: exactly
/// those when `f` is written so (what `def rec` elaborates to), else fresh `g`, `x` and
/// `body = f g x`. An evaluator makes `fix f` a closure over `x` with `body` that binds `g` to
/// itself when called.
pub fn fix_parts(f: &Term) -> (Var, Var, Term) {
    if let TermKind::Lam(g, inner) = &f.kind
        && let TermKind::Lam(x, body) = &inner.kind
    {
        return (g.clone(), x.clone(), body.clone());
    }
    let (gt, _) = f.ty.as_fun().expect("fix of a functional");
    let (a, _) = gt.as_fun().expect("fix of a functional on functions");
    let g = Var::fresh("rec", gt.clone());
    let x = Var::fresh("x", a.clone());
    let fg = Term::new(TermKind::App(f.clone(), Term::var(&g)), f.span);
    let body = Term::new(TermKind::App(fg, Term::var(&x)), f.span);
    (g, x, body)
}

/// A checked definition.
#[derive(Clone, Debug)]
pub struct Def {
    /// The global variable the definition binds (its type is the curried function type).
    pub var: Var,
    /// The parameters.
    pub params: Vec<Var>,
    /// The result type.
    pub ret: Type,
    /// The body, in the scope of the parameters and the definitions above.
    pub body: Term,
    /// Indices of the definitions the body refers to directly (never itself).
    pub deps: Vec<usize>,
    /// `def rec`: the body refers to `var` itself.
    pub rec: bool,
    /// The whole definition in the source.
    pub span: Span,
    /// Its custom derivative, if it has `with` clauses (LANGUAGE.md, "Custom derivatives").
    pub custom: Option<Rc<Custom>>,
}

/// A definition's checked custom derivative clauses. The definition is registered as the
/// primitive [`Custom::prim`] (evaluated by running the body, differentiated by the clauses;
/// `source::check`'s `custom` module), and every later reference to it is that primitive.
#[derive(Debug)]
pub struct Custom {
    /// The definition as a primitive.
    pub prim: Prim,
    /// `result`, bound to the primal value in the clauses.
    pub result: Var,
    /// The tangents the `jvp` clause binds, one per parameter.
    pub tangents: Vec<Var>,
    /// The `jvp` clause's body.
    pub jvp: Term,
    /// The `vjp` clause: its cotangent variable and its body.
    pub vjp: Option<(Var, Term)>,
}

impl Def {
    /// The name.
    pub fn name(&self) -> &str {
        &self.var.name
    }

    /// The definition as a value: its body under lambdas for the parameters; for a `def rec`,
    /// `fix (\var -> \x1 -> .. body)`.
    pub fn value(&self) -> Term {
        let lam = self.params.iter().rev().fold(self.body.clone(), |body, p| {
            Term::new(TermKind::Lam(p.clone(), body), self.span)
        });
        if !self.rec {
            return lam;
        }
        let sp = self.span;
        let mk = |k| Term::new(k, sp);
        // Fresh binders: the entry of the definition itself binds the parameters too.
        if self.params.len() == 1 {
            let f = mk(TermKind::Lam(self.var.clone(), lam));
            return freshen(&mk(TermKind::Fix(f)));
        }
        // Several parameters: the fixpoint is over their tuple, so that every recursive call is
        // one call of the fixpoint (the depth limit counts calls, and a call's work happens
        // inside it), and the definition is its curried wrapper:
        //   let u = fix (\u' -> \p -> let f = \y1 .. yk -> u' (y1, .., yk) in
        //                             let (x1, .., xk) = p in body)
        //   in \y1 .. yk -> u (y1, .., yk)
        let tys: Vec<Type> = self.params.iter().map(|p| p.ty.clone()).collect();
        let tuple_ty = tys
            .iter()
            .rev()
            .skip(1)
            .fold(tys[tys.len() - 1].clone(), |acc, t| {
                Type::prod(t.clone(), acc)
            });
        let uty = Type::fun(tuple_ty.clone(), self.ret.clone());
        let wrapper = |u: &Var| {
            let ys: Vec<Var> = self
                .params
                .iter()
                .map(|p| Var::fresh(p.name.clone(), p.ty.clone()))
                .collect();
            let mut items: Vec<Term> = ys.iter().map(Term::var).collect();
            let last = items.pop().expect("several parameters");
            let tuple = items
                .into_iter()
                .rev()
                .fold(last, |acc, t| mk(TermKind::Pair(t, acc)));
            let call = mk(TermKind::App(Term::var(u), tuple));
            ys.iter()
                .rev()
                .fold(call, |b, y| mk(TermKind::Lam(y.clone(), b)))
        };
        let rec_name = format!("{}_rec", self.var.name);
        let inner_u = Var::fresh(rec_name.as_str(), uty.clone());
        let p = Var::fresh("args", tuple_ty);
        let mut pats: Vec<Pat> = self.params.iter().map(|v| Pat::Var(v.clone())).collect();
        let last = pats.pop().expect("several parameters");
        let pat = pats
            .into_iter()
            .rev()
            .fold(last, |acc, q| Pat::Pair(Box::new(q), Box::new(acc)));
        let unpack = mk(TermKind::Let(pat, Term::var(&p), self.body.clone()));
        let with_f = mk(TermKind::Let(
            Pat::Var(self.var.clone()),
            wrapper(&inner_u),
            unpack,
        ));
        let functional = mk(TermKind::Lam(inner_u, mk(TermKind::Lam(p, with_f))));
        let u = Var::fresh(rec_name.as_str(), uty);
        let whole = mk(TermKind::Let(
            Pat::Var(u.clone()),
            mk(TermKind::Fix(functional)),
            wrapper(&u),
        ));
        freshen(&whole)
    }
}

/// A checked program.
#[derive(Clone, Debug)]
pub struct Program {
    /// The definitions in order.
    pub defs: Vec<Def>,
    /// The definitions that differentiate a function parameter inside (`grad f x` with `f` a
    /// parameter): they have no term of their own, each call is checked with its function
    /// arguments (`check::nested`).
    pub templates: Vec<Signature>,
}

/// A definition's name and type.
#[derive(Clone, Debug)]
pub struct Signature {
    /// The name.
    pub name: Rc<str>,
    /// The curried type.
    pub ty: Type,
    /// How many of [`Program::defs`] come before it in the source.
    pub position: usize,
}

/// A definition prepared to run: its parameters are the inputs, and its body has the
/// definitions it depends on (transitively) bound by `let`s in front.
#[derive(Clone, Debug)]
pub struct Entry {
    /// The definition's name.
    pub name: Rc<str>,
    /// The inputs.
    pub params: Vec<Var>,
    /// The closed-over body: `let d1 = .. in .. let dk = .. in body`.
    pub body: Term,
}

impl Entry {
    /// The types of the inputs.
    pub fn param_types(&self) -> Vec<Type> {
        self.params.iter().map(|p| p.ty.clone()).collect()
    }
}

impl Program {
    /// The index of a definition by name.
    pub fn find(&self, name: &str) -> Option<usize> {
        self.defs.iter().position(|d| d.name() == name)
    }

    /// The indices of the definitions `index` depends on, transitively, in file order
    /// (excluding `index` itself).
    pub fn dependencies(&self, index: usize) -> Vec<usize> {
        let mut needed = vec![false; self.defs.len()];
        let mut stack = self.defs[index].deps.clone();
        while let Some(d) = stack.pop() {
            if !needed[d] {
                needed[d] = true;
                stack.extend(self.defs[d].deps.iter().copied());
            }
        }
        (0..self.defs.len()).filter(|&d| needed[d]).collect()
    }

    /// The entry point for definition `index`.
    pub fn entry(&self, index: usize) -> Entry {
        let def = &self.defs[index];
        if let Some(c) = &def.custom {
            // The definition is its primitive, so that differentiating it uses its clauses.
            let args = def.params.iter().map(Term::var).collect();
            return Entry {
                name: def.var.name.clone(),
                params: def.params.clone(),
                body: Term::new(TermKind::Prim(c.prim.clone(), args), def.span),
            };
        }
        self.body_entry(index)
    }

    /// The entry point for definition `index` running its body as written (for a definition
    /// with custom derivative clauses, [`Program::entry`] calls its primitive instead).
    pub fn body_entry(&self, index: usize) -> Entry {
        let def = &self.defs[index];
        // (A definition with derivative clauses is called as its primitive: not bound.)
        // A `def rec` sees itself: `let var = fix (..) in body`.
        let own = if def.rec {
            Term::new(
                TermKind::Let(Pat::Var(def.var.clone()), def.value(), def.body.clone()),
                def.span,
            )
        } else {
            def.body.clone()
        };
        let body = self
            .dependencies(index)
            .into_iter()
            .filter(|&d| self.defs[d].custom.is_none())
            .rev()
            .fold(own, |body, d| {
                let dep = &self.defs[d];
                Term::new(
                    TermKind::Let(Pat::Var(dep.var.clone()), dep.value(), body),
                    dep.span,
                )
            });
        Entry {
            name: def.var.name.clone(),
            params: def.params.clone(),
            body,
        }
    }
}

/// Deep equality test helper: do two terms have the same shape, literals, primitives, and
/// binding structure (variables compared up to renaming)?
pub fn alpha_eq(a: &Term, b: &Term) -> bool {
    use std::collections::HashMap;
    fn pat(p: &Pat, q: &Pat, m: &mut HashMap<VarId, VarId>) -> bool {
        deep(|| match (p, q) {
            (Pat::Var(x), Pat::Var(y)) => {
                m.insert(x.id, y.id);
                x.ty == y.ty
            }
            (Pat::Wild(s), Pat::Wild(t)) => s == t,
            (Pat::Pair(a, b), Pat::Pair(c, d)) => pat(a, c, m) && pat(b, d, m),
            _ => false,
        })
    }
    fn go(a: &Term, b: &Term, m: &mut HashMap<VarId, VarId>) -> bool {
        use TermKind::*;
        deep(|| {
            if a.ty != b.ty {
                return false;
            }
            match (&a.kind, &b.kind) {
                (Var(x), Var(y)) => m.get(&x.id).copied().unwrap_or(x.id) == y.id,
                (Lit(x), Lit(y)) => match (x, y) {
                    (self::Lit::Real(p), self::Lit::Real(q)) => p.to_bits() == q.to_bits(),
                    _ => x == y,
                },
                (Lam(x, s), Lam(y, t)) => {
                    m.insert(x.id, y.id);
                    x.ty == y.ty && go(s, t, m)
                }
                (Let(p, e1, b1), Let(q, e2, b2)) => go(e1, e2, m) && pat(p, q, m) && go(b1, b2, m),
                (Case(e1, p1, a1, q1, b1), Case(e2, p2, a2, q2, b2)) => {
                    go(e1, e2, m)
                        && pat(p1, p2, m)
                        && go(a1, a2, m)
                        && pat(q1, q2, m)
                        && go(b1, b2, m)
                }
                (Prim(o1, x1), Prim(o2, x2)) => {
                    Rc::ptr_eq(o1, o2)
                        && x1.len() == x2.len()
                        && x1.iter().zip(x2).all(|(s, t)| go(s, t, m))
                }
                (ka, kb) if std::mem::discriminant(ka) == std::mem::discriminant(kb) => {
                    let (ca, cb) = (a.children(), b.children());
                    ca.len() == cb.len() && ca.iter().zip(cb.iter()).all(|(s, t)| go(s, t, m))
                }
                _ => false,
            }
        })
    }
    go(a, b, &mut HashMap::new())
}

/// Renames every bound variable of `t` to a fresh identity (free variables are unchanged).
/// The result is alpha-equivalent to `t` and every binder in it is distinct from every other
/// binder anywhere, which passes that duplicate or move code (inlining, generators) rely on.
pub fn freshen(t: &Term) -> Term {
    use std::collections::HashMap;
    fn fresh_var(v: &Var, sub: &mut HashMap<VarId, Var>) -> Var {
        let nv = Var::fresh(v.name.clone(), v.ty.clone());
        sub.insert(v.id, nv.clone());
        nv
    }
    fn pat(p: &Pat, sub: &mut HashMap<VarId, Var>) -> Pat {
        deep(|| match p {
            Pat::Var(v) => Pat::Var(fresh_var(v, sub)),
            Pat::Wild(t) => Pat::Wild(t.clone()),
            Pat::Pair(a, b) => Pat::Pair(Box::new(pat(a, sub)), Box::new(pat(b, sub))),
        })
    }
    fn go(t: &Term, sub: &mut HashMap<VarId, Var>) -> Term {
        use TermKind as K;
        deep(|| {
            let kind = match &t.kind {
                K::Var(v) => K::Var(sub.get(&v.id).cloned().unwrap_or_else(|| v.clone())),
                K::Lit(l) => K::Lit(*l),
                K::Lam(x, b) => {
                    let x = fresh_var(x, sub);
                    K::Lam(x, go(b, sub))
                }
                K::Let(p, e, b) => {
                    let e = go(e, sub);
                    let p = pat(p, sub);
                    K::Let(p, e, go(b, sub))
                }
                K::Case(e, p, a, q, b) => {
                    let e = go(e, sub);
                    let p = pat(p, sub);
                    let a = go(a, sub);
                    let q = pat(q, sub);
                    K::Case(e, p, a, q, go(b, sub))
                }
                K::App(a, b) => K::App(go(a, sub), go(b, sub)),
                K::Pair(a, b) => K::Pair(go(a, sub), go(b, sub)),
                K::Fst(e) => K::Fst(go(e, sub)),
                K::Snd(e) => K::Snd(go(e, sub)),
                K::If(c, a, b) => K::If(go(c, sub), go(a, sub), go(b, sub)),
                K::Inl(e, r) => K::Inl(go(e, sub), r.clone()),
                K::Inr(l, e) => K::Inr(l.clone(), go(e, sub)),
                K::Prim(op, args) => K::Prim(op.clone(), args.iter().map(|a| go(a, sub)).collect()),
                K::Array(e, items) => {
                    K::Array(e.clone(), items.iter().map(|a| go(a, sub)).collect())
                }
                K::Map(f, xs) => K::Map(go(f, sub), go(xs, sub)),
                K::Map2(f, xs, ys) => K::Map2(go(f, sub), go(xs, sub), go(ys, sub)),
                K::Build(n, f) => K::Build(go(n, sub), go(f, sub)),
                K::Index(xs, i) => K::Index(go(xs, sub), go(i, sub)),
                K::Length(xs) => K::Length(go(xs, sub)),
                K::Replicate(n, x) => K::Replicate(go(n, sub), go(x, sub)),
                K::Loop(f, x, t) => K::Loop(go(f, sub), go(x, sub), *t),
                K::Fix(f) => K::Fix(go(f, sub)),
            };
            Term::new(kind, t.span)
        })
    }
    go(t, &mut HashMap::new())
}
