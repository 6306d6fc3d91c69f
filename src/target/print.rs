//! Pretty printing of target terms (Wadler-style, via the `pretty` crate), in the notation of the
//! CHAD paper's figures.
//!
//! Cartesian terms print in the source language's surface syntax, without type annotations:
//! `let x = e in` one binding per line, `\x -> e`, `f a`, `(a, b, c)` for right-nested pairs,
//! `fst e`, `if c then a else b` (`c && a` / `c || b` for `if c then a else false` /
//! `if c then true else b`), `inl e`, `case e of inl p -> a | inr q -> b`, `[a, b]`, `map f xs`,
//! `xs ! i`, primitives by their fixity (`a * b`, `-x`, `sin x`). The linear forms print as
//!
//! ```text
//! \v ⊸ l          linear λ             f • l            linear application (also Cartesian)
//! 0               zero                 a + b            plus
//! (a, b)          pair                 fst l, snd l     projections
//! let x = t in l  Cartesian let        let lin u = l in l'   linear let
//! !t ⊗ l          copower singleton    copowfold f l    copower fold
//! \b -> l         power intro          l @ t            power elimination
//! linl l, linr l  injections           fromLeft l, fromRight l
//! replicate n l   lsum l               onehot n i l     l ! i
//! zipWith fs l    lmap f l             lbuild n (\i -> l)
//! t * l           scaling              op t             a primitive's derivative kernel
//! ```
//!
//! Parentheses are minimal by precedence, loosest to tightest: `let`/λ/`if`/`case` < `||` <
//! `&&` < comparisons < `+ -` < `* /` (and scaling, `⊗`) < unary `-` < `•` (right-associative)
//! < `!` and `@` (left-associative) < application < atoms. So `g • f • d` is `g • (f • d)`,
//! `2.0 * f • v` is `2.0 * (f • v)` and `snd (h b) • (da, 0)` needs its parentheses. A λ or
//! `let` in an argument position is always parenthesised.
//!
//! Names: variables print by name, but a binder whose name is already taken by a variable in
//! scope, or by a free variable of the printed term, is printed with a fresh suffix (`x_1`,
//! `x_2`, ...), so there is no shadowing in the output and distinct variables never read alike.
//!
//! Every recursive function runs under [`deep`] and the renderer under [`with_large_stack`], so
//! terms of any depth (e.g. a 10⁵-long let-chain) print without overflowing the stack.

use super::term::{Child, LTerm, LTermKind, Lit, Pat, Term, TermKind, Var, VarId};
use crate::deep::{deep, with_large_stack};
use crate::prim::Fixity;
use crate::source::print::{Doc, Grouped, delimited, nested, tuple_pattern};
use crate::value::format_real;
use pretty::RcDoc;
use std::collections::{HashMap, HashSet};
use std::rc::Rc;

/// Prints a Cartesian term at the given line width.
pub fn to_string(t: &Term, width: usize) -> String {
    render(&[Child::C(t)], &[], width, |p| p.term(t, prec::ANY))
}

/// Prints a linear term at the given line width. Its linear variables (and any other variables
/// it does not bind) are free and print by their own names.
pub fn linear_to_string(t: &LTerm, width: usize) -> String {
    render(&[Child::L(t)], &[], width, |p| p.lterm(t, prec::ANY))
}

/// Prints `\x -> body`: a Cartesian term with a free variable `x` (for instance a derivative
/// produced for a term in context `x`), as the function of `x` it denotes.
pub fn lambda_to_string(x: &Var, body: &Term, width: usize) -> String {
    render(&[Child::C(body)], std::slice::from_ref(x), width, |p| {
        let mark = p.mark();
        let n = p.bind(x);
        let b = p.term(body, prec::ANY);
        p.unbind_to(mark);
        lambda(format!("\\{n} ->"), b)
    })
}

/// Prints `\v ⊸ body`: a linear term in the linear variable `v`, as the linear function of `v`
/// it denotes.
pub fn linear_lambda_to_string(v: &Var, body: &LTerm, width: usize) -> String {
    render(&[Child::L(body)], std::slice::from_ref(v), width, |p| {
        let mark = p.mark();
        let n = p.bind(v);
        let b = p.lterm(body, prec::ANY);
        p.unbind_to(mark);
        lambda(format!("\\{n} ⊸"), b)
    })
}

/// Builds the document for `roots` (with `binders` bound around them) and lays it out, all on a
/// large stack (the `pretty` crate's layout and destructors recurse on the document).
fn render(
    roots: &[Child<'_>],
    binders: &[Var],
    width: usize,
    build: impl FnOnce(&mut Printer) -> Doc,
) -> String {
    with_large_stack(|| {
        let mut p = Printer::new(free_names(roots, binders));
        let doc = build(&mut p);
        crate::source::print::render(&doc, width)
    })
}

/// Precedence levels: a form of level `n` needs parentheses in a context that requires more.
/// Levels 1 to 5 are those of [`crate::prim::Fixity::Infix`].
mod prec {
    /// `let`, λ, `if`, `case`: anything.
    pub const ANY: u8 = 0;
    /// `||`.
    pub const OR: u8 = 1;
    /// `&&`.
    pub const AND: u8 = 2;
    /// Comparisons.
    pub const CMP: u8 = 3;
    /// `+ -` (and linear `+`).
    pub const ADD: u8 = 4;
    /// `* /`, scaling `t * l`, copower `!t ⊗ l`.
    pub const MUL: u8 = 5;
    /// Unary minus.
    pub const NEG: u8 = 6;
    /// `f • l` (right-associative).
    pub const LINAPP: u8 = 7;
    /// `xs ! i`, `l @ t` (left-associative).
    pub const INDEX: u8 = 8;
    /// Application.
    pub const APP: u8 = 9;
    /// Atoms.
    pub const ATOM: u8 = 10;
}

/// The names of the variables that occur in `roots` but are bound neither there nor by
/// `binders`: binders must not take these names.
fn free_names(roots: &[Child<'_>], binders: &[Var]) -> HashSet<Rc<str>> {
    use LTermKind as L;
    use TermKind as K;
    let mut bound: HashSet<VarId> = binders.iter().map(|v| v.id).collect();
    let mut refs: Vec<&Var> = Vec::new();
    let mut stack: Vec<Child<'_>> = roots.to_vec();
    while let Some(c) = stack.pop() {
        match c {
            Child::C(t) => {
                match &t.kind {
                    K::Var(v) => refs.push(v),
                    K::Lam(x, _) | K::LinLam(x, _) => {
                        bound.insert(x.id);
                    }
                    K::Let(p, _, _) => bound.extend(p.vars().iter().map(|v| v.id)),
                    K::Case(_, p, _, q, _) => {
                        bound.extend(p.vars().iter().chain(&q.vars()).map(|v| v.id))
                    }
                    _ => {}
                }
                stack.extend(t.children());
            }
            Child::L(l) => {
                match &l.kind {
                    L::Var(v) => refs.push(v),
                    L::LinLet(x, _, _) | L::PowLam(x, _) | L::Build(_, x, _) => {
                        bound.insert(x.id);
                    }
                    L::Let(p, _, _) => bound.extend(p.vars().iter().map(|v| v.id)),
                    L::Case(_, p, _, q, _) => {
                        bound.extend(p.vars().iter().chain(&q.vars()).map(|v| v.id))
                    }
                    _ => {}
                }
                stack.extend(l.children());
            }
        }
    }
    refs.into_iter()
        .filter(|v| !bound.contains(&v.id))
        .map(|v| v.name.clone())
        .collect()
}

/// `(d)`.
fn parens(d: Doc) -> Doc {
    RcDoc::text("(").append(d).append(")").grouped()
}

/// `head` (e.g. `\x ->`) followed by `body`, on one line if it fits, else the body indented on
/// the next line.
fn lambda(head: String, body: Doc) -> Doc {
    RcDoc::text(head)
        .append(RcDoc::line().append(body).nest(2))
        .grouped()
}

/// `let pat = e in` (`kw` is `let` or `let lin`), breaking after `=` if `e` does not fit.
fn let_line(kw: &'static str, pat: Doc, e: Doc) -> Doc {
    RcDoc::text(kw)
        .append(" ")
        .append(pat)
        .append(" =")
        .append(RcDoc::line().append(e).nest(2))
        .grouped()
        .append(" in")
}

/// `a op b` (`op` already spaced on its left, e.g. `" +"`), breaking after the operator.
fn infix(a: Doc, op: &str, b: Doc) -> Doc {
    a.append(RcDoc::text(op.to_string()))
        .append(RcDoc::line())
        .append(b)
        .grouped()
}

/// `head a1 a2 ...` (the arguments already printed as atoms), breaking with indentation.
fn app(head: &str, args: Vec<Doc>) -> (Doc, u8) {
    app_doc(RcDoc::text(head.to_string()), args)
}

fn app_doc(head: Doc, args: Vec<Doc>) -> (Doc, u8) {
    if args.is_empty() {
        return (head, prec::ATOM);
    }
    let mut d = head;
    for a in args {
        d = d.append(RcDoc::line()).append(a);
    }
    (d.nest(2).grouped(), prec::APP)
}

/// The printer's naming state.
struct Printer {
    /// Printed names of the bound variables in scope.
    names: HashMap<VarId, Rc<str>>,
    /// How many variables in scope print with each name.
    in_scope: HashMap<Rc<str>, usize>,
    /// Names of the free variables of the printed term.
    free: HashSet<Rc<str>>,
    /// The last suffix tried for each base name (suffixes only grow, so fresh names are found
    /// in amortised constant time even for long chains of binders of one name).
    suffix: HashMap<Rc<str>, usize>,
    /// Undo log of bindings: the variable and its previous printed name, if it had one.
    log: Vec<(VarId, Option<Rc<str>>, Rc<str>)>,
}

impl Printer {
    fn new(free: HashSet<Rc<str>>) -> Printer {
        Printer {
            names: HashMap::new(),
            in_scope: HashMap::new(),
            free,
            suffix: HashMap::new(),
            log: Vec::new(),
        }
    }

    fn taken(&self, name: &str) -> bool {
        self.free.contains(name) || self.in_scope.get(name).is_some_and(|&k| k > 0)
    }

    /// Brings `v` into scope and returns the name it prints as.
    fn bind(&mut self, v: &Var) -> Rc<str> {
        let name = if self.taken(&v.name) {
            let mut k = self.suffix.get(&v.name).copied().unwrap_or(0);
            let fresh: Rc<str> = loop {
                k += 1;
                let cand = format!("{}_{k}", v.name);
                if !self.taken(&cand) {
                    break cand.into();
                }
            };
            self.suffix.insert(v.name.clone(), k);
            fresh
        } else {
            v.name.clone()
        };
        let prev = self.names.insert(v.id, name.clone());
        *self.in_scope.entry(name.clone()).or_insert(0) += 1;
        self.log.push((v.id, prev, name.clone()));
        name
    }

    /// A point to return to with [`Printer::unbind_to`].
    fn mark(&self) -> usize {
        self.log.len()
    }

    /// Ends the scopes of the variables bound since `mark`.
    fn unbind_to(&mut self, mark: usize) {
        while self.log.len() > mark {
            let (id, prev, name) = self.log.pop().expect("log is longer than mark");
            match prev {
                Some(p) => self.names.insert(id, p),
                None => self.names.remove(&id),
            };
            if let Some(k) = self.in_scope.get_mut(&name) {
                *k -= 1;
            }
        }
    }

    /// The printed name of a variable occurrence.
    fn name(&self, v: &Var) -> Rc<str> {
        self.names.get(&v.id).unwrap_or(&v.name).clone()
    }

    fn var(&self, v: &Var) -> (Doc, u8) {
        (RcDoc::text(self.name(v).to_string()), prec::ATOM)
    }

    /// Prints a pattern, binding its variables (left to right).
    fn pat(&mut self, p: &Pat) -> Doc {
        deep(|| match p {
            Pat::Var(v) => RcDoc::text(self.bind(v).to_string()),
            Pat::Wild(_) => RcDoc::text("_"),
            Pat::Pair(_, _) => {
                let mut items = Vec::new();
                let mut cur = p;
                while let Pat::Pair(a, b) = cur {
                    items.push(self.pat(a));
                    cur = b;
                }
                items.push(self.pat(cur));
                tuple_pattern(items)
            }
        })
    }

    /// Prints a Cartesian term in a context that needs precedence at least `need`.
    fn term(&mut self, t: &Term, need: u8) -> Doc {
        nested(|| {
            let (d, own) = self.term_inner(t);
            if own < need { parens(d) } else { d }
        })
    }

    /// Prints a linear term in a context that needs precedence at least `need`.
    fn lterm(&mut self, l: &LTerm, need: u8) -> Doc {
        nested(|| {
            let (d, own) = self.lterm_inner(l);
            if own < need { parens(d) } else { d }
        })
    }

    fn atom(&mut self, t: &Term) -> Doc {
        self.term(t, prec::ATOM)
    }

    fn latom(&mut self, l: &LTerm) -> Doc {
        self.lterm(l, prec::ATOM)
    }

    fn term_inner(&mut self, t: &Term) -> (Doc, u8) {
        use TermKind as K;
        match &t.kind {
            K::Var(v) => self.var(v),
            K::Lit(l) => (RcDoc::text(lit(l)), prec::ATOM),
            K::Lam(..) => {
                let mark = self.mark();
                let mut heads = Vec::new();
                let mut cur = t;
                while let K::Lam(x, b) = &cur.kind {
                    heads.push(format!("\\{} ->", self.bind(x)));
                    cur = b;
                }
                let body = self.term(cur, prec::ANY);
                self.unbind_to(mark);
                (lambda(heads.join(" "), body), prec::ANY)
            }
            K::LinLam(v, body) => {
                let mark = self.mark();
                let head = format!("\\{} ⊸", self.bind(v));
                let body = self.lterm(body, prec::ANY);
                self.unbind_to(mark);
                (lambda(head, body), prec::ANY)
            }
            K::App(..) => {
                let mut args = Vec::new();
                let mut cur = t;
                while let K::App(f, a) = &cur.kind {
                    args.push(a);
                    cur = f;
                }
                let head = self.term(cur, prec::APP);
                let args = args.into_iter().rev().map(|a| self.atom(a)).collect();
                app_doc(head, args)
            }
            K::Let(..) => {
                // A chain of lets, one per line, iteratively.
                let mark = self.mark();
                let mut lines = Vec::new();
                let mut cur = t;
                while let K::Let(p, e, b) = &cur.kind {
                    let ed = self.term(e, prec::ANY);
                    let pd = self.pat(p);
                    lines.push(let_line("let", pd, ed));
                    cur = b;
                }
                lines.push(self.term(cur, prec::ANY));
                self.unbind_to(mark);
                (RcDoc::intersperse(lines, RcDoc::hardline()), prec::ANY)
            }
            K::Pair(..) => {
                let mut items = Vec::new();
                let mut cur = t;
                while let K::Pair(a, b) = &cur.kind {
                    items.push(self.term(a, prec::ANY));
                    cur = b;
                }
                items.push(self.term(cur, prec::ANY));
                (delimited("(", items, ")"), prec::ATOM)
            }
            K::Fst(e) => app("fst", vec![self.atom(e)]),
            K::Snd(e) => app("snd", vec![self.atom(e)]),
            K::If(c, a, b) => {
                if let K::Lit(Lit::Bool(false)) = b.kind {
                    let d = infix(self.term(c, prec::AND), " &&", self.term(a, prec::CMP));
                    return (d, prec::AND);
                }
                if let K::Lit(Lit::Bool(true)) = a.kind {
                    let d = infix(self.term(c, prec::OR), " ||", self.term(b, prec::AND));
                    return (d, prec::OR);
                }
                let cd = self.term(c, prec::ANY);
                let ad = self.term(a, prec::ANY);
                let bd = self.term(b, prec::ANY);
                let d = RcDoc::text("if ")
                    .append(cd)
                    .append(RcDoc::line().append("then ").append(ad).nest(2))
                    .append(RcDoc::line().append("else ").append(bd).nest(2))
                    .grouped();
                (d, prec::ANY)
            }
            K::Inl(e, _) => app("inl", vec![self.atom(e)]),
            K::Inr(_, e) => app("inr", vec![self.atom(e)]),
            K::Case(e, p, a, q, b) => (self.case(e, p, Child::C(a), q, Child::C(b)), prec::ANY),
            K::Prim(op, args) => match (op.fixity(), args.as_slice()) {
                (Fixity::Infix(sym, p), [a, b]) => {
                    let ad = self.term(a, p);
                    let bd = self.term(b, p + 1);
                    (infix(ad, &format!(" {sym}"), bd), p)
                }
                (Fixity::InfixRight(sym, p), [a, b]) => {
                    let ad = self.term(a, p + 1);
                    let bd = self.term(b, p);
                    (infix(ad, &format!(" {sym}"), bd), p)
                }
                (Fixity::Prefix(sym), [a]) => {
                    // `-(1.5)`, not `-1.5`, which would read as a negative literal.
                    let operand = if matches!(a.kind, K::Lit(Lit::Real(_) | Lit::Int(_))) {
                        parens(self.term(a, prec::ANY))
                    } else {
                        self.term(a, prec::NEG)
                    };
                    (RcDoc::text(sym).append(operand), prec::NEG)
                }
                _ => {
                    let args = args.iter().map(|a| self.atom(a)).collect();
                    app(op.name(), args)
                }
            },
            K::Array(_, items) => {
                let ds: Vec<Doc> = items.iter().map(|i| self.term(i, prec::ANY)).collect();
                if ds.is_empty() {
                    (RcDoc::text("[]"), prec::ATOM)
                } else {
                    (delimited("[", ds, "]"), prec::ATOM)
                }
            }
            K::Map(f, xs) => app("map", vec![self.atom(f), self.atom(xs)]),
            K::Map2(f, xs, ys) => app("map2", vec![self.atom(f), self.atom(xs), self.atom(ys)]),
            K::Build(n, f) => app("build", vec![self.atom(n), self.atom(f)]),
            K::Index(xs, i) => {
                let d = infix(self.term(xs, prec::INDEX), " !", self.term(i, prec::APP));
                (d, prec::INDEX)
            }
            K::Length(xs) => app("length", vec![self.atom(xs)]),
            K::Replicate(n, x) => app("replicate", vec![self.atom(n), self.atom(x)]),
            K::Loop(f, x, tape) => app(
                if *tape { "loopTape" } else { "loop" },
                vec![self.atom(f), self.atom(x)],
            ),
            K::Fix(f, _) => app("fix", vec![self.atom(f)]),
            K::LinApp(f, x) => {
                let d = infix(self.term(f, prec::INDEX), " •", self.term(x, prec::LINAPP));
                (d, prec::LINAPP)
            }
            K::LinPrim(op, x) => app(op.name(), vec![self.atom(x)]),
        }
    }

    fn lterm_inner(&mut self, l: &LTerm) -> (Doc, u8) {
        use LTermKind as L;
        match &l.kind {
            L::Var(v) => self.var(v),
            L::Zero(_) => (RcDoc::text("0"), prec::ATOM),
            L::Plus(a, b) => {
                let d = infix(self.lterm(a, prec::ADD), " +", self.lterm(b, prec::ADD + 1));
                (d, prec::ADD)
            }
            L::Pair(..) => {
                let mut items = Vec::new();
                let mut cur = l;
                while let L::Pair(a, b) = &cur.kind {
                    items.push(self.lterm(a, prec::ANY));
                    cur = b;
                }
                items.push(self.lterm(cur, prec::ANY));
                (delimited("(", items, ")"), prec::ATOM)
            }
            L::Fst(a) => app("fst", vec![self.latom(a)]),
            L::Snd(a) => app("snd", vec![self.latom(a)]),
            L::App(f, a) => {
                let d = infix(self.term(f, prec::INDEX), " •", self.lterm(a, prec::LINAPP));
                (d, prec::LINAPP)
            }
            L::Let(..) | L::LinLet(..) => {
                // A chain of Cartesian and linear lets, one per line, iteratively.
                let mark = self.mark();
                let mut lines = Vec::new();
                let mut cur = l;
                loop {
                    match &cur.kind {
                        L::Let(p, t, b) => {
                            let td = self.term(t, prec::ANY);
                            let pd = self.pat(p);
                            lines.push(let_line("let", pd, td));
                            cur = b;
                        }
                        L::LinLet(u, a, b) => {
                            let ad = self.lterm(a, prec::ANY);
                            let ud = RcDoc::text(self.bind(u).to_string());
                            lines.push(let_line("let lin", ud, ad));
                            cur = b;
                        }
                        _ => break,
                    }
                }
                lines.push(self.lterm(cur, prec::ANY));
                self.unbind_to(mark);
                (RcDoc::intersperse(lines, RcDoc::hardline()), prec::ANY)
            }
            L::Copower(t, a) => {
                let td = RcDoc::text("!").append(self.atom(t));
                let d = infix(td, " ⊗", self.lterm(a, prec::MUL + 1));
                (d, prec::MUL)
            }
            L::CopowFold(f, a) => app("copowfold", vec![self.atom(f), self.latom(a)]),
            L::PowLam(b, body) => {
                let mark = self.mark();
                let head = format!("\\{} ->", self.bind(b));
                let body = self.lterm(body, prec::ANY);
                self.unbind_to(mark);
                (lambda(head, body), prec::ANY)
            }
            L::PowApp(a, t) => {
                let d = infix(self.lterm(a, prec::INDEX), " @", self.term(t, prec::APP));
                (d, prec::INDEX)
            }
            L::Inl(a, _) => app("linl", vec![self.latom(a)]),
            L::Inr(_, a) => app("linr", vec![self.latom(a)]),
            L::FromLeft(a) => app("fromLeft", vec![self.latom(a)]),
            L::FromRight(a) => app("fromRight", vec![self.latom(a)]),
            L::Replicate(n, a) => app("replicate", vec![self.atom(n), self.latom(a)]),
            L::Sum(a) => app("lsum", vec![self.latom(a)]),
            L::OneHot(n, i, a) => app("onehot", vec![self.atom(n), self.atom(i), self.latom(a)]),
            L::Index(a, i) => {
                let d = infix(self.lterm(a, prec::INDEX), " !", self.term(i, prec::APP));
                (d, prec::INDEX)
            }
            L::ZipWith(fs, a) => app("zipWith", vec![self.atom(fs), self.latom(a)]),
            L::Map(f, a) => app("lmap", vec![self.atom(f), self.latom(a)]),
            L::Build(n, i, body) => {
                let nd = self.atom(n);
                let mark = self.mark();
                let head = format!("\\{} ->", self.bind(i));
                let body = self.lterm(body, prec::ANY);
                self.unbind_to(mark);
                app("lbuild", vec![nd, parens(lambda(head, body))])
            }
            L::Scale(t, a) => {
                let d = infix(self.term(t, prec::MUL), " *", self.lterm(a, prec::MUL + 1));
                (d, prec::MUL)
            }
            L::Case(e, p, a, q, b) => (self.case(e, p, Child::L(a), q, Child::L(b)), prec::ANY),
            L::Chain(fs, a, rev, outs) => app(
                match (*rev, *outs) {
                    (false, false) => "lchain",
                    (true, false) => "lchainRev",
                    (false, true) => "lchainScan",
                    (true, true) => "lchainScanRev",
                },
                vec![self.atom(fs), self.latom(a)],
            ),
        }
    }

    /// `case e of inl p -> a | inr q -> b`, with Cartesian or linear branches.
    fn case(&mut self, e: &Term, p: &Pat, a: Child<'_>, q: &Pat, b: Child<'_>) -> Doc {
        let ed = self.term(e, prec::ANY);
        let branch = |this: &mut Self, kw: &'static str, p: &Pat, a: Child<'_>| {
            let mark = this.mark();
            let pd = this.pat(p);
            let ad = match a {
                Child::C(a) => this.term(a, prec::ANY),
                Child::L(a) => this.lterm(a, prec::ANY),
            };
            this.unbind_to(mark);
            RcDoc::line()
                .append(kw)
                .append(pd)
                .append(" ->")
                .append(RcDoc::line().append(ad).nest(2))
                .grouped()
                .nest(2)
        };
        let left = branch(self, "inl ", p, a);
        let right = branch(self, "| inr ", q, b);
        RcDoc::text("case ")
            .append(ed)
            .append(" of")
            .append(left)
            .append(right)
            .grouped()
    }
}

/// A literal; negative numbers in parentheses, so they read as one atom.
fn lit(l: &Lit) -> String {
    match *l {
        Lit::Real(x) if x < 0.0 || (x == 0.0 && x.is_sign_negative()) => {
            format!("({})", format_real(x))
        }
        Lit::Real(x) => format_real(x),
        Lit::Int(i) if i < 0 => format!("({i})"),
        Lit::Int(i) => i.to_string(),
        Lit::Bool(b) => b.to_string(),
        Lit::Unit => "()".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prim::{Prim, op};
    use crate::target::term::{LinPrim, Var};
    use crate::target::types::{LTy, Ty};

    fn real() -> Ty {
        Ty::Real
    }
    fn lreal() -> LTy {
        LTy::Real
    }
    fn v(x: &Var) -> Term {
        Term::var(x)
    }
    fn lv(x: &Var) -> LTerm {
        LTerm::var(x)
    }
    fn p1(name: &str, a: Term) -> Term {
        Term::prim(&op(name), vec![a])
    }
    fn p2(name: &str, a: Term, b: Term) -> Term {
        Term::prim(&op(name), vec![a, b])
    }
    fn lmk(k: LTermKind) -> LTerm {
        LTerm::mk(k)
    }
    fn tmk(k: TermKind) -> Term {
        Term::mk(k)
    }
    fn lin_fun() -> Ty {
        Ty::lin_fun(lreal(), lreal())
    }

    #[test]
    fn forward_derivative() {
        let x = Var::fresh("x", real());
        let y = Var::fresh("y", real());
        let z = Var::fresh("z", real());
        let dv = Var::linear("v", lreal());
        let body = Term::let_(
            &y,
            p2("mul", Term::real(2.0), v(&x)),
            Term::let_(
                &z,
                p1("sin", v(&y)),
                Term::pair(
                    v(&z),
                    Term::lin_lam(
                        &dv,
                        LTerm::scale(p1("cos", v(&y)), LTerm::scale(Term::real(2.0), lv(&dv))),
                    ),
                ),
            ),
        );
        let expected =
            "\\x ->\n  let y = 2.0 * x in\n  let z = sin y in\n  (z, \\v ⊸ cos y * (2.0 * v))";
        assert_eq!(to_string(&Term::lam(&x, body.clone()), 100), expected);
        assert_eq!(lambda_to_string(&x, &body, 100), expected);
        assert_eq!(Term::lam(&x, body.clone()).to_string(), expected);
        // Without the lambda, `x` is free.
        assert_eq!(
            to_string(&body, 100),
            "let y = 2.0 * x in\nlet z = sin y in\n(z, \\v ⊸ cos y * (2.0 * v))"
        );
        // Short terms stay on one line.
        let short = Term::lam(&x, p2("mul", p1("sin", v(&x)), v(&x)));
        assert_eq!(to_string(&short, 100), "\\x -> sin x * x");
    }

    #[test]
    fn reverse_style_linear_forms() {
        let x = Var::fresh("x", real());
        let xs = Var::fresh("xs", Ty::array(real()));
        let n = Var::fresh("n", Ty::Int);
        let i = Var::fresh("i", Ty::Int);
        let fs = Var::fresh("fs", Ty::array(lin_fun()));
        let a = Var::fresh("a", real());
        let w = Var::linear("w", lreal());
        let b = Var::fresh("b", real());
        let s = Var::fresh("s", real());
        let j = Var::fresh("j", Ty::Int);
        let dv = Var::linear("v", lreal());
        let u = Var::linear("u", LTy::copower(real(), lreal()));
        let p = Var::linear("p", LTy::power(real(), lreal()));
        // \a -> \w ⊸ cos a * w
        let f = Term::lam(
            &a,
            Term::lin_lam(&w, LTerm::scale(p1("cos", v(&a)), lv(&w))),
        );
        let tuple = [
            lmk(LTermKind::CopowFold(f, lv(&u))),
            lmk(LTermKind::PowApp(lv(&p), v(&s))),
            lmk(LTermKind::FromLeft(lmk(LTermKind::Inl(lv(&dv), lreal())))),
            lmk(LTermKind::OneHot(v(&n), v(&i), lv(&dv))),
            lmk(LTermKind::ZipWith(
                v(&fs),
                lmk(LTermKind::Replicate(v(&n), lv(&dv))),
            )),
            lmk(LTermKind::Build(
                v(&n),
                j.clone(),
                LTerm::scale(tmk(TermKind::Index(v(&xs), v(&j))), lv(&dv)),
            )),
        ]
        .into_iter()
        .rev()
        .reduce(|acc, l| LTerm::pair(l, acc))
        .unwrap();
        let body = LTerm::lin_let(
            &u,
            lmk(LTermKind::Copower(v(&x), lv(&dv))),
            LTerm::lin_let(
                &p,
                lmk(LTermKind::PowLam(b.clone(), LTerm::scale(v(&b), lv(&dv)))),
                LTerm::let_(&s, p2("mul", v(&x), v(&x)), tuple),
            ),
        );
        assert_eq!(
            linear_lambda_to_string(&dv, &body, 100),
            "\\v ⊸
  let lin u = !x ⊗ v in
  let lin p = \\b -> b * v in
  let s = x * x in
  (
    copowfold (\\a -> \\w ⊸ cos a * w) u,
    p @ s,
    fromLeft (linl v),
    onehot n i v,
    zipWith fs (replicate n v),
    lbuild n (\\j -> xs ! j * v)
  )"
        );
        // As the body of a Cartesian linear λ.
        let t = Term::pair(v(&x), Term::lin_lam(&dv, body.clone()));
        assert!(to_string(&t, 100).starts_with("(\n  x,\n  \\v ⊸\n    let lin u = !x ⊗ v in\n"));
        // Without the binder, `v` is free.
        assert!(linear_to_string(&body, 100).starts_with("let lin u = !x ⊗ v in\n"));
    }

    #[test]
    fn single_linear_forms() {
        let t = Var::fresh("t", real());
        let n = Var::fresh("n", Ty::Int);
        let f = Var::fresh("f", lin_fun());
        let dv = Var::linear("v", lreal());
        let dw = Var::linear("w", LTy::sum(lreal(), lreal()));
        let cases: Vec<(LTerm, &str)> = vec![
            (LTerm::zero(lreal()), "0"),
            (LTerm::plus(lv(&dv), LTerm::zero(lreal())), "v + 0"),
            (LTerm::fst(LTerm::pair(lv(&dv), lv(&dv))), "fst (v, v)"),
            (LTerm::snd(lv(&dv)), "snd v"),
            (lmk(LTermKind::Inr(lreal(), lv(&dv))), "linr v"),
            (lmk(LTermKind::FromRight(lv(&dw))), "fromRight w"),
            (lmk(LTermKind::Sum(lv(&dv))), "lsum v"),
            (lmk(LTermKind::Map(v(&f), lv(&dv))), "lmap f v"),
            (lmk(LTermKind::Index(lv(&dv), v(&n))), "v ! n"),
            (
                lmk(LTermKind::Copower(Term::pair(v(&t), v(&t)), lv(&dv))),
                "!(t, t) ⊗ v",
            ),
            (
                lmk(LTermKind::Copower(p1("sin", v(&t)), lv(&dv))),
                "!(sin t) ⊗ v",
            ),
            (
                lmk(LTermKind::Copower(
                    v(&t),
                    lmk(LTermKind::Copower(v(&t), lv(&dv))),
                )),
                "!t ⊗ (!t ⊗ v)",
            ),
            (
                LTerm::app(
                    Term::mk(TermKind::LinPrim(LinPrim::dot_with(), v(&t))),
                    lv(&dv),
                ),
                "dotWith t • v",
            ),
            (
                LTerm::plus(LTerm::plus(lv(&dv), lv(&dv)), LTerm::plus(lv(&dv), lv(&dv))),
                "v + v + (v + v)",
            ),
        ];
        for (l, expected) in cases {
            assert_eq!(linear_to_string(&l, 100), expected);
        }
    }

    #[test]
    fn lin_app_associativity_and_precedence() {
        let f = Var::fresh("f", lin_fun());
        let g = Var::fresh("g", lin_fun());
        let fs = Var::fresh("fs", Ty::array(lin_fun()));
        let h = Var::fresh("h", Ty::fun(real(), Ty::prod(real(), lin_fun())));
        let b = Var::fresh("b", real());
        let c = Var::fresh("c", real());
        let i = Var::fresh("i", Ty::Int);
        let d = Var::linear("d", lreal());
        let da = Var::linear("da", lreal());
        let p = Var::linear("p", LTy::power(real(), lreal()));
        let w = Var::linear("w", lreal());
        let x = Var::fresh("x", Ty::lin(lreal()));
        let two = || Term::real(2.0);
        let cases: Vec<(LTerm, &str)> = vec![
            (LTerm::app(v(&g), LTerm::app(v(&f), lv(&d))), "g • f • d"),
            (
                LTerm::app(
                    Term::snd(Term::app(v(&h), v(&b))),
                    LTerm::pair(lv(&da), LTerm::zero(lreal())),
                ),
                "snd (h b) • (da, 0)",
            ),
            (
                LTerm::scale(two(), LTerm::app(v(&f), lv(&d))),
                "2.0 * f • d",
            ),
            (
                LTerm::app(v(&f), LTerm::scale(two(), lv(&d))),
                "f • (2.0 * d)",
            ),
            (
                LTerm::app(v(&f), LTerm::plus(lv(&d), lv(&d))),
                "f • (d + d)",
            ),
            (
                LTerm::plus(LTerm::app(v(&f), lv(&d)), LTerm::app(v(&g), lv(&d))),
                "f • d + g • d",
            ),
            (
                LTerm::app(v(&f), lmk(LTermKind::Index(lv(&d), v(&i)))),
                "f • d ! i",
            ),
            (
                lmk(LTermKind::Index(LTerm::app(v(&f), lv(&d)), v(&i))),
                "(f • d) ! i",
            ),
            (
                LTerm::app(tmk(TermKind::Index(v(&fs), v(&i))), lv(&d)),
                "fs ! i • d",
            ),
            (
                LTerm::app(Term::lin_lam(&w, lv(&w)), lv(&d)),
                "(\\w ⊸ w) • d",
            ),
            (LTerm::fst(LTerm::app(v(&f), lv(&d))), "fst (f • d)"),
            (LTerm::scale(p2("mul", v(&b), v(&c)), lv(&d)), "b * c * d"),
            (
                LTerm::scale(v(&b), LTerm::scale(v(&c), lv(&d))),
                "b * (c * d)",
            ),
            (LTerm::scale(p2("add", v(&b), v(&c)), lv(&d)), "(b + c) * d"),
            (LTerm::scale(p1("neg", v(&b)), lv(&d)), "-b * d"),
            (
                lmk(LTermKind::PowApp(
                    lmk(LTermKind::PowApp(lv(&p), v(&b))),
                    Term::app(v(&h), v(&c)),
                )),
                "p @ b @ h c",
            ),
            (
                lmk(LTermKind::PowApp(lv(&p), p2("add", v(&b), v(&c)))),
                "p @ (b + c)",
            ),
        ];
        for (l, expected) in cases {
            assert_eq!(linear_to_string(&l, 100), expected);
        }
        // Cartesian `•`, primitives and literals.
        let tcases: Vec<(Term, &str)> = vec![
            (
                Term::lin_app(v(&g), Term::lin_app(v(&f), v(&x))),
                "g • f • x",
            ),
            (
                Term::lin_app(Term::lin_app(v(&g), v(&f)), v(&x)),
                "(g • f) • x",
            ),
            (Term::app(v(&h), Term::lin_lam(&w, lv(&w))), "h (\\w ⊸ w)"),
            (p2("mul", v(&b), p2("add", v(&c), v(&b))), "b * (c + b)"),
            (p2("sub", v(&b), p2("sub", v(&c), v(&b))), "b - (c - b)"),
            (p2("sub", p2("sub", v(&b), v(&c)), v(&b)), "b - c - b"),
            (p1("neg", Term::real(1.5)), "-(1.5)"),
            (p1("neg", p1("neg", v(&b))), "--b"),
            (Term::real(-1.5), "(-1.5)"),
            (p2("pow", v(&b), Term::real(3.0)), "pow b 3.0"),
            (
                Term::app(p1("sin", v(&b)), p1("cos", v(&c))),
                // Application is left-associative: `(sin b) (cos c)`.
                "sin b (cos c)",
            ),
            (p1("sin", Term::app(v(&h), v(&b))), "sin (h b)"),
            (
                Term::fst(Term::app(Term::app(v(&h), v(&b)), v(&c))),
                "fst (h b c)",
            ),
        ];
        for (t, expected) in tcases {
            assert_eq!(to_string(&t, 100), expected);
        }
    }

    #[test]
    fn cartesian_forms() {
        let b = Var::fresh("b", Ty::Bool);
        let c = Var::fresh("c", Ty::Bool);
        let x = Var::fresh("x", real());
        let y = Var::fresh("y", real());
        let n = Var::fresh("n", Ty::Int);
        let xs = Var::fresh("xs", Ty::array(real()));
        let e = Var::fresh("e", Ty::sum(real(), Ty::prod(real(), real())));
        let z = Var::fresh("z", real());
        let q = Var::fresh("q", real());
        let lt: Prim = op("lt");
        let cases: Vec<(Term, &str)> = vec![
            (tmk(TermKind::If(v(&b), v(&x), v(&y))), "if b then x else y"),
            (
                tmk(TermKind::If(v(&b), v(&c), Term::lit(Lit::Bool(false)))),
                "b && c",
            ),
            (
                tmk(TermKind::If(
                    Term::prim(&lt, vec![v(&x), v(&y)]),
                    Term::lit(Lit::Bool(true)),
                    v(&c),
                )),
                "x < y || c",
            ),
            (tmk(TermKind::Inl(v(&x), real())), "inl x"),
            (
                tmk(TermKind::Inr(real(), Term::pair(v(&x), v(&y)))),
                "inr (x, y)",
            ),
            (
                tmk(TermKind::Case(
                    v(&e),
                    Pat::Var(z.clone()),
                    v(&z),
                    Pat::Pair(Box::new(Pat::Var(q.clone())), Box::new(Pat::Wild(real()))),
                    v(&q),
                )),
                "case e of inl z -> z | inr (q, _) -> q",
            ),
            (
                tmk(TermKind::Array(real(), vec![v(&x), Term::real(1.0)])),
                "[x, 1.0]",
            ),
            (tmk(TermKind::Array(real(), vec![])), "[]"),
            (
                tmk(TermKind::Map(Term::lam(&z, p1("exp", v(&z))), v(&xs))),
                "map (\\z -> exp z) xs",
            ),
            (
                tmk(TermKind::Map2(
                    Term::lam(&z, Term::lam(&q, p2("mul", v(&z), v(&q)))),
                    v(&xs),
                    v(&xs),
                )),
                "map2 (\\z -> \\q -> z * q) xs xs",
            ),
            (
                tmk(TermKind::Build(
                    v(&n),
                    Term::lam(&z, tmk(TermKind::Index(v(&xs), v(&z)))),
                )),
                "build n (\\z -> xs ! z)",
            ),
            (tmk(TermKind::Length(v(&xs))), "length xs"),
            (
                tmk(TermKind::Replicate(v(&n), Term::unit())),
                "replicate n ()",
            ),
            (Term::pair(v(&x), Term::pair(v(&y), v(&x))), "(x, y, x)"),
            (Term::pair(Term::pair(v(&x), v(&y)), v(&x)), "((x, y), x)"),
            (
                Term::let_pat(
                    Pat::Pair(Box::new(Pat::Var(z.clone())), Box::new(Pat::Wild(real()))),
                    Term::pair(v(&x), v(&y)),
                    v(&z),
                ),
                "let (z, _) = (x, y) in\nz",
            ),
        ];
        for (t, expected) in cases {
            assert_eq!(to_string(&t, 100), expected);
        }
    }

    #[test]
    fn name_clashes_are_renamed() {
        let x1 = Var::fresh("x", real());
        let x2 = Var::fresh("x", real());
        let x3 = Var::fresh("x", real());
        // Nested binders of one name.
        let t = Term::lam(&x1, Term::lam(&x2, p2("add", v(&x1), v(&x2))));
        assert_eq!(to_string(&t, 100), "\\x -> \\x_1 -> x + x_1");
        // A binder named like a free variable.
        let t = Term::lam(&x1, p2("add", v(&x1), v(&x2)));
        assert_eq!(to_string(&t, 100), "\\x_1 -> x_1 + x");
        // A rebinding let.
        let t = Term::let_(
            &x1,
            Term::real(1.0),
            Term::let_(&x2, p2("add", v(&x1), Term::real(1.0)), v(&x2)),
        );
        assert_eq!(
            to_string(&t, 100),
            "let x = 1.0 in\nlet x_1 = x + 1.0 in\nx_1"
        );
        // Sibling scopes may reuse a name.
        let t = Term::pair(Term::lam(&x1, v(&x1)), Term::lam(&x2, v(&x2)));
        assert_eq!(to_string(&t, 100), "(\\x -> x, \\x -> x)");
        // Two variables of one pattern.
        let t = Term::let_pat(
            Pat::Pair(
                Box::new(Pat::Var(x1.clone())),
                Box::new(Pat::Var(x2.clone())),
            ),
            v(&x3),
            p2("mul", v(&x1), v(&x2)),
        );
        assert_eq!(to_string(&t, 100), "let (x_1, x_2) = x in\nx_1 * x_2");
        // Linear variables, a linear let and a power λ.
        let d1 = Var::linear("d", lreal());
        let d2 = Var::linear("d", lreal());
        let b1 = Var::fresh("b", real());
        let b2 = Var::fresh("b", real());
        let l = LTerm::lin_let(
            &d2,
            LTerm::plus(lv(&d1), lv(&d1)),
            lmk(LTermKind::PowLam(
                b2.clone(),
                LTerm::scale(p2("mul", v(&b1), v(&b2)), lv(&d2)),
            )),
        );
        assert_eq!(
            to_string(&Term::lam(&b1, Term::lin_lam(&d1, l.clone())), 100),
            "\\b ->\n  \\d ⊸\n    let lin d_1 = d + d in\n    \\b_1 -> b * b_1 * d_1"
        );
        // The same linear term on its own: `d` and `b` are free.
        assert_eq!(
            linear_to_string(&l, 100),
            "let lin d_1 = d + d in\n\\b_1 -> b * b_1 * d_1"
        );
        // A fresh name avoids names already in use.
        let y = Var::fresh("x_1", real());
        let t = Term::lam(&x1, Term::lam(&x2, p2("add", v(&x2), v(&y))));
        assert_eq!(to_string(&t, 100), "\\x -> \\x_2 -> x_2 + x_1");
    }

    #[test]
    fn narrow_widths_break_lines() {
        let x = Var::fresh("x", real());
        let n = Var::fresh("n", Ty::Int);
        let a = Var::fresh("a", real());
        let t = Term::lam(
            &x,
            p2(
                "add",
                p2("mul", p1("sin", v(&x)), p1("cos", v(&x))),
                p2("mul", v(&x), v(&x)),
            ),
        );
        assert_eq!(to_string(&t, 100), "\\x -> sin x * cos x + x * x");
        assert_eq!(to_string(&t, 20), "\\x ->\n  sin x * cos x +\n  x * x");
        let t = tmk(TermKind::Map(
            Term::lam(&a, p2("mul", v(&a), v(&a))),
            tmk(TermKind::Replicate(v(&n), v(&x))),
        ));
        assert_eq!(to_string(&t, 100), "map (\\a -> a * a) (replicate n x)");
        assert_eq!(
            to_string(&t, 20),
            "map\n  (\\a -> a * a)\n  (replicate n x)"
        );
        let dv = Var::linear("v", lreal());
        let l = LTerm::pair(
            LTerm::scale(p1("cos", v(&x)), lv(&dv)),
            LTerm::scale(p1("sin", v(&x)), lv(&dv)),
        );
        assert_eq!(
            linear_lambda_to_string(&dv, &l, 100),
            "\\v ⊸ (cos x * v, sin x * v)"
        );
        assert_eq!(
            linear_lambda_to_string(&dv, &l, 20),
            "\\v ⊸\n  (\n    cos x * v,\n    sin x * v\n  )"
        );
        let y = Var::fresh("y", real());
        let long = Term::let_(
            &y,
            p2(
                "add",
                p2("mul", v(&x), v(&x)),
                p2("mul", p1("sin", v(&x)), p1("cos", v(&x))),
            ),
            v(&y),
        );
        assert_eq!(
            to_string(&long, 24),
            "let y =\n  x * x +\n  sin x * cos x in\ny"
        );
    }

    #[test]
    fn long_let_chains_print() {
        const N: usize = 100_000;
        // Cartesian: let x = 0.0 in let x_1 = x + 1.0 in ... (all binders named `x`).
        let xs: Vec<Var> = (0..N).map(|_| Var::fresh("x", real())).collect();
        let mut t = v(&xs[N - 1]);
        for k in (0..N).rev() {
            let rhs = if k == 0 {
                Term::real(0.0)
            } else {
                p2("add", v(&xs[k - 1]), Term::real(1.0))
            };
            t = Term::let_(&xs[k], rhs, t);
        }
        let s = to_string(&t, 100);
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(lines.len(), N + 1);
        assert_eq!(lines[0], "let x = 0.0 in");
        assert_eq!(lines[1], "let x_1 = x + 1.0 in");
        assert_eq!(lines[N - 1], "let x_99999 = x_99998 + 1.0 in");
        assert_eq!(lines[N], "x_99999");

        // Linear: alternating linear and Cartesian lets, in one block.
        let dv = Var::linear("v", lreal());
        let us: Vec<Var> = (0..N)
            .map(|k| Var::linear(format!("u{k}"), lreal()))
            .collect();
        let mut l = lv(&us[N - 1]);
        for k in (0..N).rev() {
            let prev = if k == 0 { lv(&dv) } else { lv(&us[k - 1]) };
            l = if k % 2 == 0 {
                LTerm::lin_let(&us[k], LTerm::plus(prev, lv(&dv)), l)
            } else {
                let c = Var::fresh("c", real());
                LTerm::let_(
                    &c,
                    Term::real(2.0),
                    LTerm::lin_let(&us[k], LTerm::scale(v(&c), prev), l),
                )
            };
        }
        let s = linear_lambda_to_string(&dv, &l, 100);
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(lines.len(), 1 + N + N / 2 + 1);
        assert_eq!(lines[0], "\\v ⊸");
        assert_eq!(lines[1], "  let lin u0 = v + v in");
        assert_eq!(lines[2], "  let c = 2.0 in");
        assert_eq!(lines[3], "  let lin u1 = c * u0 in");
        assert_eq!(lines[5], "  let c_1 = 2.0 in");
        assert_eq!(lines[lines.len() - 1], format!("  u{}", N - 1));
        assert!(linear_to_string(&l, 100).starts_with("let lin u0 = v + v in\n"));
    }
}
