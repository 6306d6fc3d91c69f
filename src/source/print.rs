//! Pretty printing of core terms and programs in the surface syntax (Wadler-style, via the
//! `pretty` crate): let-chains one binding per line, minimal parentheses by precedence,
//! `if c then b else false` shown as `c && b`.
//!
//! Names: variables are printed by name, but a binder whose name would capture a reference to
//! an outer variable of the same name is renamed (`x_1`), so the output always reads back as the
//! same program. Injections and empty arrays carry a type ascription so the output re-checks.

use super::term::*;
use crate::deep::{deep, with_large_stack};
use crate::prim::Fixity;
use crate::types::Type;
use crate::value::format_real;
use pretty::RcDoc;
use std::collections::{HashMap, HashSet};
use std::rc::Rc;

pub(crate) type Doc = RcDoc<'static, ()>;

/// The deepest indentation printed, in columns. Lines nested deeper start at this column, so
/// the output of a term nested n deep is O(n) characters, not O(n²) (a 10⁴-deep `if` would
/// otherwise print 10⁸ spaces of indentation).
pub const MAX_INDENT: usize = 60;

thread_local! {
    /// How deep the term being printed is nested (see [`Grouped`]).
    static DEPTH: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Groups (a `group` lays out flat if it fits) only in the outermost this many levels of a
/// term: the layout's fitting test walks from a group to its first text, through every level
/// of nesting in between, so a group at every level of a 10⁴-deep term costs O(n²) time. Deeper
/// groups are laid out broken.
pub const MAX_GROUP_DEPTH: usize = 200;

/// Runs `f` one level deeper in the term being printed (under [`deep`]).
pub(crate) fn nested<R>(f: impl FnOnce() -> R) -> R {
    DEPTH.with(|d| d.set(d.get() + 1));
    let r = deep(f);
    DEPTH.with(|d| d.set(d.get() - 1));
    r
}

/// `group`, in the outermost [`MAX_GROUP_DEPTH`] levels of a term only.
pub(crate) trait Grouped {
    /// The document grouped, or as it is when printed too deep.
    fn grouped(self) -> Self;
}

impl Grouped for Doc {
    fn grouped(self) -> Doc {
        if DEPTH.with(|d| d.get()) < MAX_GROUP_DEPTH {
            self.group()
        } else {
            self
        }
    }
}

/// Lays out a document at a line width, with indentation capped at [`MAX_INDENT`]. Every
/// printer renders through this.
pub(crate) fn render(doc: &Doc, width: usize) -> String {
    struct Capped {
        out: String,
        line_start: bool,
        pending: usize,
    }
    impl std::fmt::Write for Capped {
        fn write_str(&mut self, s: &str) -> std::fmt::Result {
            for c in s.chars() {
                if c == '\n' {
                    self.out.push('\n');
                    self.line_start = true;
                    self.pending = 0;
                } else if self.line_start && c == ' ' {
                    self.pending += 1;
                } else {
                    if self.line_start {
                        let n = self.pending.min(MAX_INDENT);
                        self.out.extend(std::iter::repeat_n(' ', n));
                        self.line_start = false;
                    }
                    self.out.push(c);
                }
            }
            Ok(())
        }
    }
    let mut w = Capped {
        out: String::new(),
        line_start: true,
        pending: 0,
    };
    doc.render_fmt(width, &mut w)
        .expect("writing to a String does not fail");
    w.out
}

/// Prints a term at the given line width.
pub fn term_to_string(t: &Term, width: usize) -> String {
    with_large_stack(|| {
        let mut p = Printer::new(&[]);
        p.plan(std::slice::from_ref(t), &[]);
        let doc = p.term(t, 0);
        render(&doc, width)
    })
}

/// Prints definitions of a program (`which` are indices into `prog.defs`, in order).
pub fn defs_to_string(prog: &Program, which: &[usize], width: usize) -> String {
    with_large_stack(|| {
        let globals: Vec<Var> = prog.defs.iter().map(|d| d.var.clone()).collect();
        let mut p = Printer::new(&globals);
        for &i in which {
            let d = &prog.defs[i];
            p.plan(std::slice::from_ref(&d.body), &d.params);
            if let Some(c) = &d.custom {
                let mut scope = d.params.clone();
                scope.push(c.result.clone());
                let mut jvp_scope = scope.clone();
                jvp_scope.extend(c.tangents.iter().cloned());
                p.plan(std::slice::from_ref(&c.jvp), &jvp_scope);
                if let Some((ct, body)) = &c.vjp {
                    scope.push(ct.clone());
                    p.plan(std::slice::from_ref(body), &scope);
                }
            }
        }
        let docs: Vec<Doc> = which.iter().map(|&i| p.def(&prog.defs[i])).collect();
        let doc = RcDoc::intersperse(docs, RcDoc::hardline().append(RcDoc::hardline()));
        let mut s = render(&doc, width);
        s.push('\n');
        s
    })
}

struct Printer {
    /// Display names of variables that must be renamed.
    renamed: HashMap<VarId, Rc<str>>,
    /// Every name in use (to make fresh names).
    used: HashSet<Rc<str>>,
    /// Names of globals, which are in scope everywhere.
    globals: Vec<Var>,
}

impl Printer {
    fn new(globals: &[Var]) -> Printer {
        Printer {
            renamed: HashMap::new(),
            used: globals.iter().map(|g| g.name.clone()).collect(),
            globals: globals.to_vec(),
        }
    }

    /// First pass: find binders that would capture a reference and choose new names for them.
    fn plan(&mut self, roots: &[Term], params: &[Var]) {
        let mut scope: HashMap<Rc<str>, Vec<VarId>> = HashMap::new();
        for g in self.globals.iter().chain(params) {
            scope.entry(g.name.clone()).or_default().push(g.id);
            self.used.insert(g.name.clone());
        }
        let mut capture: HashSet<VarId> = HashSet::new();
        for r in roots {
            self.scan(r, &mut scope, &mut capture);
        }
        let mut ids: Vec<VarId> = capture.into_iter().collect();
        ids.sort();
        for id in ids {
            // The binder's name is found again on the second pass; pick a fresh variant now.
            self.renamed.insert(id, Rc::from(""));
        }
    }

    fn scan(
        &mut self,
        t: &Term,
        scope: &mut HashMap<Rc<str>, Vec<VarId>>,
        capture: &mut HashSet<VarId>,
    ) {
        deep(|| {
            let bind = |vars: &[&Var],
                        scope: &mut HashMap<Rc<str>, Vec<VarId>>,
                        used: &mut HashSet<Rc<str>>,
                        capture: &mut HashSet<VarId>| {
                for (k, v) in vars.iter().enumerate() {
                    // Two variables of one pattern may not share a name in the output.
                    if vars[..k].iter().any(|w| w.name == v.name) {
                        capture.insert(v.id);
                    }
                    scope.entry(v.name.clone()).or_default().push(v.id);
                    used.insert(v.name.clone());
                }
            };
            let unbind = |vars: &[&Var], scope: &mut HashMap<Rc<str>, Vec<VarId>>| {
                for v in vars.iter().rev() {
                    if let Some(s) = scope.get_mut(&v.name) {
                        s.pop();
                    }
                }
            };
            match &t.kind {
                TermKind::Var(v) => {
                    if let Some(stack) = scope.get(&v.name) {
                        // Every binder of the same name inside the referenced one captures it.
                        let pos = stack.iter().rposition(|id| *id == v.id);
                        let from = pos.map_or(0, |p| p + 1);
                        capture.extend(stack[from..].iter().copied());
                    }
                }
                TermKind::Lam(x, b) => {
                    bind(&[x], scope, &mut self.used, capture);
                    self.scan(b, scope, capture);
                    unbind(&[x], scope);
                }
                TermKind::Let(p, e, b) => {
                    self.scan(e, scope, capture);
                    let vs = p.vars();
                    bind(&vs, scope, &mut self.used, capture);
                    self.scan(b, scope, capture);
                    unbind(&vs, scope);
                }
                TermKind::Case(e, p, a, q, b) => {
                    self.scan(e, scope, capture);
                    for (pat, body) in [(p, a), (q, b)] {
                        let vs = pat.vars();
                        bind(&vs, scope, &mut self.used, capture);
                        self.scan(body, scope, capture);
                        unbind(&vs, scope);
                    }
                }
                _ => {
                    for c in t.children() {
                        self.scan(c, scope, capture);
                    }
                }
            }
        })
    }

    fn name(&mut self, v: &Var) -> Rc<str> {
        match self.renamed.get(&v.id) {
            None => v.name.clone(),
            Some(n) if !n.is_empty() => n.clone(),
            Some(_) => {
                let mut k = 1;
                let fresh: Rc<str> = loop {
                    let cand: Rc<str> = format!("{}_{k}", v.name).into();
                    if !self.used.contains(&cand) {
                        break cand;
                    }
                    k += 1;
                };
                self.used.insert(fresh.clone());
                self.renamed.insert(v.id, fresh.clone());
                fresh
            }
        }
    }

    fn def(&mut self, d: &Def) -> Doc {
        let kw = if d.rec { "def rec " } else { "def " };
        let mut head = RcDoc::text(kw).append(RcDoc::text(d.var.name.to_string()));
        for p in &d.params {
            let n = self.name(p);
            head = head.append(RcDoc::text(format!(" ({n} : {})", p.ty)));
        }
        head = head.append(RcDoc::text(format!(" : {} =", d.ret)));
        let body = self.term(&d.body, 0);
        let mut doc = head.append(RcDoc::line().append(body).nest(2)).grouped();
        if let Some(c) = &d.custom {
            // The derivative clauses (LANGUAGE.md, "Custom derivatives").
            let mut clause = RcDoc::text("with jvp");
            for t in &c.tangents {
                let n = self.name(t);
                clause = clause.append(RcDoc::text(format!(" ({n} : {})", t.ty)));
            }
            let jvp = self.term(&c.jvp, 0);
            let clause = clause
                .append(RcDoc::text(" ="))
                .append(RcDoc::line().append(jvp).nest(2))
                .grouped();
            doc = doc.append(RcDoc::hardline().append(clause).nest(2));
            if let Some((ct, body)) = &c.vjp {
                let n = self.name(ct);
                let vjp = self.term(body, 0);
                let clause = RcDoc::text(format!("with vjp ({n} : {}) =", ct.ty))
                    .append(RcDoc::line().append(vjp).nest(2))
                    .grouped();
                doc = doc.append(RcDoc::hardline().append(clause).nest(2));
            }
        }
        doc
    }

    fn pat(&mut self, p: &Pat) -> Doc {
        match p {
            Pat::Var(v) => RcDoc::text(self.name(v).to_string()),
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
        }
    }

    /// Prints `t` in a context that needs precedence at least `prec`:
    /// 0 anything; 1 `||`; 2 `&&`; 3 comparisons; 4 `+ -`; 5 `* /`; 6 unary `-`; 7 `!`;
    /// 8 application; 9 atoms.
    fn term(&mut self, t: &Term, prec: u8) -> Doc {
        nested(|| {
            let (doc, own) = self.term_inner(t);
            if own < prec {
                RcDoc::text("(").append(doc).append(")").grouped()
            } else {
                doc
            }
        })
    }

    fn app(&mut self, head: Doc, args: &[&Term]) -> (Doc, u8) {
        let mut d = head;
        for a in args {
            d = d.append(RcDoc::line()).append(self.term(a, 9));
        }
        (d.nest(2).grouped(), 8)
    }

    fn term_inner(&mut self, t: &Term) -> (Doc, u8) {
        use TermKind as K;
        match &t.kind {
            K::Var(v) => (RcDoc::text(self.name(v).to_string()), 9),
            K::Lit(l) => match *l {
                Lit::Real(x) if x < 0.0 || (x == 0.0 && x.is_sign_negative()) => {
                    (RcDoc::text(format!("({})", format_real(x))), 9)
                }
                Lit::Real(x) => (RcDoc::text(format_real(x)), 9),
                Lit::Int(i) if i < 0 => (RcDoc::text(format!("({i})")), 9),
                Lit::Int(i) => (RcDoc::text(i.to_string()), 9),
                Lit::Bool(b) => (RcDoc::text(b.to_string()), 9),
                Lit::Unit => (RcDoc::text("()"), 9),
            },
            K::Lam(..) => {
                let mut params = Vec::new();
                let mut cur = t;
                while let K::Lam(x, b) = &cur.kind {
                    let n = self.name(x);
                    params.push(RcDoc::text(format!("({n} : {})", x.ty)));
                    cur = b;
                }
                let body = self.term(cur, 0);
                let d = RcDoc::text("\\")
                    .append(RcDoc::intersperse(params, RcDoc::text(" ")))
                    .append(RcDoc::text(" ->"))
                    .append(RcDoc::line().append(body).nest(2))
                    .grouped();
                (d, 0)
            }
            K::App(..) => {
                let (cur, args) = t.spine();
                let head = self.term(cur, 8);
                self.app(head, &args)
            }
            K::Let(..) => {
                // A chain of lets, one per line, iteratively.
                let mut lines = Vec::new();
                let mut cur = t;
                while let K::Let(p, e, b) = &cur.kind {
                    let pd = self.pat(p);
                    let ed = self.term(e, 0);
                    lines.push(
                        RcDoc::text("let ")
                            .append(pd)
                            .append(RcDoc::text(" ="))
                            .append(RcDoc::line().append(ed).nest(2))
                            .grouped()
                            .append(RcDoc::text(" in")),
                    );
                    cur = b;
                }
                lines.push(self.term(cur, 0));
                // One binding per line, as in the CHAD paper's figures.
                (RcDoc::intersperse(lines, RcDoc::hardline()), 0)
            }
            K::Pair(..) => {
                let mut items = Vec::new();
                let mut cur = t;
                while let K::Pair(a, b) = &cur.kind {
                    items.push(self.term(a, 0));
                    cur = b;
                }
                items.push(self.term(cur, 0));
                (delimited("(", items, ")"), 9)
            }
            K::Fst(e) => {
                let h = RcDoc::text("fst");
                self.app(h, &[e])
            }
            K::Snd(e) => {
                let h = RcDoc::text("snd");
                self.app(h, &[e])
            }
            K::If(c, a, b) => {
                if let K::Lit(Lit::Bool(false)) = b.kind {
                    let d = self
                        .term(c, 2)
                        .append(" &&")
                        .append(RcDoc::line())
                        .append(self.term(a, 3));
                    return (d.grouped(), 2);
                }
                if let K::Lit(Lit::Bool(true)) = a.kind {
                    let d = self
                        .term(c, 1)
                        .append(" ||")
                        .append(RcDoc::line())
                        .append(self.term(b, 2));
                    return (d.grouped(), 1);
                }
                let d = RcDoc::text("if ")
                    .append(self.term(c, 0))
                    .append(
                        RcDoc::line()
                            .append(RcDoc::text("then "))
                            .append(self.term(a, 0))
                            .nest(2),
                    )
                    .append(
                        RcDoc::line()
                            .append(RcDoc::text("else "))
                            .append(self.term(b, 0))
                            .nest(2),
                    )
                    .grouped();
                (d, 0)
            }
            K::Inl(e, _) | K::Inr(_, e) => {
                let side = if matches!(t.kind, K::Inl(..)) {
                    "inl"
                } else {
                    "inr"
                };
                let (inner, _) = self.app(RcDoc::text(side), &[e]);
                let d = RcDoc::text("(")
                    .append(inner)
                    .append(RcDoc::text(format!(" : {})", t.ty)));
                (d, 9)
            }
            K::Case(e, p, a, q, b) => {
                let ed = self.term(e, 0);
                let pd = self.pat(p);
                let ad = self.term(a, 0);
                let qd = self.pat(q);
                let bd = self.term(b, 0);
                let d = RcDoc::text("case ")
                    .append(ed)
                    .append(" of")
                    .append(
                        RcDoc::line()
                            .append("inl ")
                            .append(pd)
                            .append(" ->")
                            .append(RcDoc::line().append(ad).nest(2))
                            .grouped()
                            .nest(2),
                    )
                    .append(
                        RcDoc::line()
                            .append("| inr ")
                            .append(qd)
                            .append(" ->")
                            .append(RcDoc::line().append(bd).nest(2))
                            .grouped()
                            .nest(2),
                    )
                    .grouped();
                (d, 0)
            }
            K::Prim(op, args) => match op.fixity() {
                Fixity::Infix(sym, p) => {
                    let a = self.term(&args[0], p);
                    let b = self.term(&args[1], p + 1);
                    (
                        a.append(format!(" {sym}"))
                            .append(RcDoc::line())
                            .append(b)
                            .grouped(),
                        p,
                    )
                }
                Fixity::InfixRight(sym, p) => {
                    let a = self.term(&args[0], p + 1);
                    let b = self.term(&args[1], p);
                    (
                        a.append(format!(" {sym}"))
                            .append(RcDoc::line())
                            .append(b)
                            .group(),
                        p,
                    )
                }
                Fixity::Prefix(sym) => {
                    // `-(1.5)`, not `-1.5`, which would read back as a negative literal.
                    let operand = if matches!(args[0].kind, K::Lit(Lit::Real(_) | Lit::Int(_))) {
                        RcDoc::text("(").append(self.term(&args[0], 0)).append(")")
                    } else {
                        self.term(&args[0], 6)
                    };
                    (RcDoc::text(sym).append(operand), 6)
                }
                Fixity::Function | Fixity::Internal => {
                    let head = RcDoc::text(op.source_name().to_string());
                    let refs: Vec<&Term> = args.iter().collect();
                    if refs.is_empty() {
                        (head, 9)
                    } else {
                        self.app(head, &refs)
                    }
                }
            },
            K::Array(elem, items) => {
                if items.is_empty() {
                    return (
                        RcDoc::text(format!("([] : {})", Type::array(elem.clone()))),
                        9,
                    );
                }
                let ds: Vec<Doc> = items.iter().map(|i| self.term(i, 0)).collect();
                (delimited("[", ds, "]"), 9)
            }
            K::Map(f, xs) => self.app(RcDoc::text("map"), &[f, xs]),
            K::Map2(f, xs, ys) => self.app(RcDoc::text("map2"), &[f, xs, ys]),
            K::Build(n, f) => self.app(RcDoc::text("build"), &[n, f]),
            K::Index(xs, i) => {
                let d = self
                    .term(xs, 7)
                    .append(" !")
                    .append(RcDoc::line())
                    .append(self.term(i, 8));
                (d.grouped(), 7)
            }
            K::Length(xs) => self.app(RcDoc::text("length"), &[xs]),
            K::Replicate(n, x) => self.app(RcDoc::text("replicate"), &[n, x]),
            K::Loop(f, x, false) => self.app(RcDoc::text("loop"), &[f, x]),
            // Not surface syntax either: what `scan` and concretised derivative code become.
            K::Loop(f, x, true) => self.app(RcDoc::text("loopTape"), &[f, x]),
            // Not surface syntax: a `def rec` prints as a definition; a `fix` inside an
            // expression (a recursive definition inlined into an entry) prints as `fix F`.
            K::Fix(f) => self.app(RcDoc::text("fix"), &[f]),
        }
    }
}

/// `open item, item, ... close`, on one line if it fits, else one item per line, indented.
/// `(p1, p2, ...)`: a tuple pattern on one line.
pub(crate) fn tuple_pattern(items: Vec<Doc>) -> Doc {
    RcDoc::text("(")
        .append(RcDoc::intersperse(items, RcDoc::text(", ")))
        .append(")")
}

pub(crate) fn delimited(open: &str, items: Vec<Doc>, close: &'static str) -> Doc {
    RcDoc::text(open.to_string())
        .append(
            RcDoc::line_()
                .append(RcDoc::intersperse(
                    items,
                    RcDoc::text(",").append(RcDoc::line()),
                ))
                .nest(2),
        )
        .append(RcDoc::line_())
        .append(close)
        .grouped()
}
