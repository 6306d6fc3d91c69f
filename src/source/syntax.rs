//! The surface syntax tree produced by the parser, with spans everywhere.
//!
//! This is the program as written: operators, multi-argument lambdas and applications, tuple
//! patterns, integer literals not yet resolved to `Int` or `Real`, builtins referred to by name.
//! The checker ([`crate::source::check`]) turns it into typed core terms.

use crate::deep::deep;
use crate::error::Span;
use crate::types::Type;
use std::fmt::Write;
use std::rc::Rc;

/// A parsed file: definitions in order.
#[derive(Debug)]
pub struct Program {
    /// The definitions.
    pub defs: Vec<Def>,
}

/// `def name (x1 : T1) ... (xn : Tn) : T = body`, or `def rec name ...` (recursive).
#[derive(Debug)]
pub struct Def {
    /// The defined name.
    pub name: Ident,
    /// `def rec`: the body may call the definition itself.
    pub rec: bool,
    /// Parameters (always annotated).
    pub params: Vec<Param>,
    /// The optional result annotation.
    pub ret: Option<TypeAnn>,
    /// The body.
    pub body: Expr,
    /// The custom forward derivative, `with jvp (dx : T1) ... = e` (LANGUAGE.md, "Custom
    /// derivatives").
    pub jvp: Option<Clause>,
    /// The custom transposed derivative, `with vjp (ct : T) = e`.
    pub vjp: Option<Clause>,
    /// The whole definition.
    pub span: Span,
}

/// A derivative clause of a definition: `with jvp (dx : T) ... = e` or `with vjp (ct : T) = e`.
#[derive(Debug)]
pub struct Clause {
    /// The bound tangents (for `jvp`, one per parameter) or the cotangent (for `vjp`).
    pub params: Vec<Param>,
    /// The clause's expression.
    pub body: Expr,
    /// The whole clause, from `with`.
    pub span: Span,
}

/// A name with its location.
#[derive(Clone, Debug)]
pub struct Ident {
    /// The name (`_` for a wildcard).
    pub name: Rc<str>,
    /// Where it is written.
    pub span: Span,
}

/// A parameter of a definition or lambda: `(x : T)`, or a bare `x` in a lambda.
#[derive(Clone, Debug)]
pub struct Param {
    /// The bound name.
    pub name: Ident,
    /// The annotation (always present for definitions).
    pub ty: Option<TypeAnn>,
}

/// A type written in the source.
#[derive(Clone, Debug)]
pub struct TypeAnn {
    /// The type.
    pub ty: Type,
    /// Where it is written.
    pub span: Span,
}

/// A binding pattern: a name, `_`, or a tuple of patterns (right-nested like tuple types).
/// Cloned and dropped under [`deep`]: it may be as deep as the program.
#[derive(Debug)]
pub enum Pattern {
    /// Binds a name.
    Var(Ident),
    /// `_`: binds nothing.
    Wild(Span),
    /// `(p1, ..., pn)`, n ≥ 2.
    Tuple(Vec<Pattern>, Span),
}

impl Clone for Pattern {
    fn clone(&self) -> Pattern {
        deep(|| match self {
            Pattern::Var(i) => Pattern::Var(i.clone()),
            Pattern::Wild(s) => Pattern::Wild(*s),
            Pattern::Tuple(ps, s) => Pattern::Tuple(ps.clone(), *s),
        })
    }
}

impl Drop for Pattern {
    fn drop(&mut self) {
        if let Pattern::Tuple(ps, _) = self {
            let ps = std::mem::take(ps);
            crate::deep::deep_drop(move || drop(ps));
        }
    }
}

impl Pattern {
    /// Where the pattern is written.
    pub fn span(&self) -> Span {
        match self {
            Pattern::Var(i) => i.span,
            Pattern::Wild(s) | Pattern::Tuple(_, s) => *s,
        }
    }
}

/// Binary operators, including indexing `xs ! i`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinOp {
    /// `||`
    Or,
    /// `&&`
    And,
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `*`
    Mul,
    /// `/`
    Div,
    /// `%` (Int remainder)
    Rem,
    /// `^` (power; right-associative)
    Pow,
    /// `!` (array indexing)
    Index,
}

impl BinOp {
    /// The operator as written.
    pub fn symbol(self) -> &'static str {
        match self {
            BinOp::Or => "||",
            BinOp::And => "&&",
            BinOp::Eq => "==",
            BinOp::Ne => "!=",
            BinOp::Lt => "<",
            BinOp::Le => "<=",
            BinOp::Gt => ">",
            BinOp::Ge => ">=",
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::Rem => "%",
            BinOp::Pow => "^",
            BinOp::Index => "!",
        }
    }

    /// Binding strength, loosest 1 (`||`) to tightest 7 (`!`); unary minus and `^` are 6
    /// (`-x ^ 2` is `-(x ^ 2)`, `x ^ -1` is `x ^ (-1)`).
    pub fn precedence(self) -> u8 {
        match self {
            BinOp::Or => 1,
            BinOp::And => 2,
            BinOp::Eq | BinOp::Ne | BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge => 3,
            BinOp::Add | BinOp::Sub => 4,
            BinOp::Mul | BinOp::Div | BinOp::Rem => 5,
            BinOp::Pow => 6,
            BinOp::Index => 7,
        }
    }
}

/// An expression with its span.
#[derive(Debug)]
pub struct Expr {
    /// What it is.
    pub kind: ExprKind,
    /// Where it is written.
    pub span: Span,
}

/// The forms of expressions.
#[derive(Debug)]
pub enum ExprKind {
    /// A variable, definition, or builtin name.
    Var(Rc<str>),
    /// An integer literal (an `Int`, or a `Real` where a `Real` is expected).
    Int(i64),
    /// A real literal.
    Real(f64),
    /// `true` / `false`.
    Bool(bool),
    /// `()`.
    Unit,
    /// `(e1, ..., en)`, n ≥ 2.
    Tuple(Vec<Expr>),
    /// `[e1, ..., en]`.
    Array(Vec<Expr>),
    /// `\p1 ... pn -> body`.
    Lam(Vec<Param>, Box<Expr>),
    /// `f a1 ... an` (n ≥ 1).
    App(Box<Expr>, Vec<Expr>),
    /// `let p (: T)? = e1 in e2`.
    Let(Pattern, Option<TypeAnn>, Box<Expr>, Box<Expr>),
    /// `if c then a else b`.
    If(Box<Expr>, Box<Expr>, Box<Expr>),
    /// `case e of inl p -> a | inr q -> b`.
    Case(Box<Expr>, Pattern, Box<Expr>, Pattern, Box<Expr>),
    /// `a op b`.
    Binary(BinOp, Box<Expr>, Box<Expr>),
    /// `-e`.
    Neg(Box<Expr>),
    /// `(e : T)`.
    Annot(Box<Expr>, TypeAnn),
}

impl Drop for Expr {
    fn drop(&mut self) {
        // Long let-chains are deep trees; drop them without deep recursion on one stack.
        let kind = std::mem::replace(&mut self.kind, ExprKind::Unit);
        if !matches!(kind, ExprKind::Unit) {
            deep(move || drop(kind));
        }
    }
}

impl Expr {
    /// A fully parenthesised rendering, for tests of precedence and associativity:
    /// `(+ 1 (* 2 3))`, `(app f x y)`, `(let x 1 x)`.
    pub fn to_sexp(&self) -> String {
        let mut s = String::new();
        self.write_sexp(&mut s);
        s
    }

    fn write_sexp(&self, s: &mut String) {
        deep(|| match &self.kind {
            ExprKind::Var(x) => s.push_str(x),
            ExprKind::Int(i) => write!(s, "{i}").unwrap(),
            ExprKind::Real(x) => s.push_str(&crate::value::format_real(*x)),
            ExprKind::Bool(b) => write!(s, "{b}").unwrap(),
            ExprKind::Unit => s.push_str("()"),
            ExprKind::Tuple(es) => list(s, "tuple", es.iter()),
            ExprKind::Array(es) => list(s, "array", es.iter()),
            ExprKind::Lam(ps, b) => {
                s.push_str("(lam");
                for p in ps {
                    match &p.ty {
                        Some(t) => write!(s, " ({} : {})", p.name.name, t.ty).unwrap(),
                        None => write!(s, " {}", p.name.name).unwrap(),
                    }
                }
                s.push(' ');
                b.write_sexp(s);
                s.push(')');
            }
            ExprKind::App(f, args) => {
                s.push_str("(app ");
                f.write_sexp(s);
                for a in args {
                    s.push(' ');
                    a.write_sexp(s);
                }
                s.push(')');
            }
            ExprKind::Let(p, t, e1, e2) => {
                s.push_str("(let ");
                pattern_sexp(p, s);
                if let Some(t) = t {
                    write!(s, " : {}", t.ty).unwrap();
                }
                s.push(' ');
                e1.write_sexp(s);
                s.push(' ');
                e2.write_sexp(s);
                s.push(')');
            }
            ExprKind::If(c, a, b) => list(s, "if", [&**c, &**a, &**b].into_iter()),
            ExprKind::Case(e, p, a, q, b) => {
                s.push_str("(case ");
                e.write_sexp(s);
                s.push_str(" (inl ");
                pattern_sexp(p, s);
                s.push(' ');
                a.write_sexp(s);
                s.push_str(") (inr ");
                pattern_sexp(q, s);
                s.push(' ');
                b.write_sexp(s);
                s.push_str("))");
            }
            ExprKind::Binary(op, a, b) => list(s, op.symbol(), [&**a, &**b].into_iter()),
            ExprKind::Neg(e) => list(s, "neg", std::iter::once(&**e)),
            ExprKind::Annot(e, t) => {
                s.push_str("(: ");
                e.write_sexp(s);
                write!(s, " {})", t.ty).unwrap();
            }
        })
    }
}

fn list<'a>(s: &mut String, head: &str, items: impl Iterator<Item = &'a Expr>) {
    s.push('(');
    s.push_str(head);
    for e in items {
        s.push(' ');
        e.write_sexp(s);
    }
    s.push(')');
}

fn pattern_sexp(p: &Pattern, s: &mut String) {
    match p {
        Pattern::Var(i) => s.push_str(&i.name),
        Pattern::Wild(_) => s.push('_'),
        Pattern::Tuple(ps, _) => {
            s.push('(');
            for (i, p) in ps.iter().enumerate() {
                if i > 0 {
                    s.push_str(", ");
                }
                pattern_sexp(p, s);
            }
            s.push(')');
        }
    }
}
