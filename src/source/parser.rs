//! Recursive-descent parser for the surface language (LANGUAGE.md).
//!
//! Expressions use precedence climbing with the levels, loosest first: `||`; `&&`;
//! `== != < <= > >=`; `+ -`; `* / %`; unary `-` and `^` (right-associative: `-x ^ 2` is
//! `-(x ^ 2)`, `a ^ b ^ c` is `a ^ (b ^ c)`, `x ^ -1` is `x ^ (-1)`); `!` (indexing);
//! application. The other binary operators are left-associative.
//!
//! A file may also define type aliases, `type Matrix = Array (Array Real)`, usable in the
//! definitions and aliases after them. `type` is not a keyword: `type NAME =` starts an alias
//! (no expression can continue with it), and `type` stays an ordinary name elsewhere. `let`, `if`, `\` and `case` extend as far right as possible and may
//! appear wherever an operand may (so `1 + let x = 2 in x` and `build n \(i : Int) -> e` parse).
//! Chains of `let`s are parsed iteratively; all other recursion runs under [`deep`], and
//! nesting beyond [`MAX_NESTING`] levels is reported as an error instead of exhausting memory.

use super::lexer::{Tok, lex};
use super::syntax::*;
use crate::deep::deep;
use crate::error::{Error, Result, Span};
use crate::types::Type;
use std::collections::HashMap;
use std::rc::Rc;

/// The deepest nesting of parentheses, brackets, operators or types the parser accepts.
pub const MAX_NESTING: usize = 100_000;

/// Parses a whole file.
pub fn parse_program(text: &str) -> Result<Program> {
    let mut p = Parser::new(text)?;
    let mut defs = Vec::new();
    while p.peek() != &Tok::Eof {
        if p.starts_alias() {
            p.alias()?;
        } else {
            defs.push(p.def()?);
        }
    }
    Ok(Program { defs })
}

/// Parses a single expression (all of `text`).
pub fn parse_expr(text: &str) -> Result<Expr> {
    let mut p = Parser::new(text)?;
    let e = p.expr()?;
    p.expect_eof("the end of the expression")?;
    Ok(e)
}

/// Parses a single type (all of `text`).
pub fn parse_type(text: &str) -> Result<Type> {
    let mut p = Parser::new(text)?;
    let t = p.ty()?;
    p.expect_eof("the end of the type")?;
    Ok(t.ty)
}

struct Parser {
    toks: Vec<(Tok, Span)>,
    pos: usize,
    depth: usize,
    /// The type aliases defined so far.
    aliases: HashMap<Rc<str>, Type>,
}

/// The built-in type names.
const TYPE_NAMES: &[&str] = &["Real", "Int", "Bool", "Unit", "Array"];

fn is_block_start(t: &Tok) -> bool {
    matches!(t, Tok::Keyword("let" | "if" | "case") | Tok::Sym("\\"))
}

fn starts_atom(t: &Tok) -> bool {
    matches!(
        t,
        Tok::Ident(_)
            | Tok::Int(_)
            | Tok::Real(_)
            | Tok::Keyword("true" | "false")
            | Tok::Sym("(" | "[")
    )
}

impl Parser {
    fn new(text: &str) -> Result<Parser> {
        Ok(Parser {
            toks: lex(text)?,
            pos: 0,
            depth: 0,
            aliases: HashMap::new(),
        })
    }

    fn peek(&self) -> &Tok {
        &self.toks[self.pos].0
    }

    fn peek_at(&self, k: usize) -> &Tok {
        &self.toks[(self.pos + k).min(self.toks.len() - 1)].0
    }

    fn span(&self) -> Span {
        self.toks[self.pos].1
    }

    /// The span of the previous token (the end of what was just parsed).
    fn prev_span(&self) -> Span {
        self.toks[self.pos.saturating_sub(1)].1
    }

    fn bump(&mut self) -> (Tok, Span) {
        let t = self.toks[self.pos].clone();
        if self.pos + 1 < self.toks.len() {
            self.pos += 1;
        }
        t
    }

    fn eat(&mut self, sym: &str) -> bool {
        if matches!(self.peek(), Tok::Sym(s) if *s == sym) {
            self.bump();
            true
        } else {
            false
        }
    }

    fn eat_kw(&mut self, kw: &str) -> bool {
        if matches!(self.peek(), Tok::Keyword(k) if *k == kw) {
            self.bump();
            true
        } else {
            false
        }
    }

    fn error_expected(&self, what: &str) -> Error {
        Error::syntax(
            self.span(),
            format!("expected {what}, found {}", self.peek()),
        )
        .with_label(format!("expected {what}"))
    }

    fn expect(&mut self, sym: &str, context: &str) -> Result<Span> {
        if self.eat(sym) {
            Ok(self.prev_span())
        } else {
            Err(self.error_expected(&format!("`{sym}` {context}")))
        }
    }

    fn expect_kw(&mut self, kw: &str, context: &str) -> Result<Span> {
        if self.eat_kw(kw) {
            Ok(self.prev_span())
        } else {
            Err(self.error_expected(&format!("`{kw}` {context}")))
        }
    }

    fn expect_eof(&self, what: &str) -> Result<()> {
        if self.peek() == &Tok::Eof {
            Ok(())
        } else {
            Err(self.error_expected(what))
        }
    }

    fn ident(&mut self, what: &str) -> Result<Ident> {
        match self.peek().clone() {
            Tok::Ident(name) => {
                let (_, span) = self.bump();
                Ok(Ident { name, span })
            }
            _ => Err(self.error_expected(what)),
        }
    }

    /// Runs a nested parse, bounding the nesting depth.
    fn nest<T>(&mut self, f: impl FnOnce(&mut Parser) -> Result<T>) -> Result<T> {
        if self.depth >= MAX_NESTING {
            return Err(Error::syntax(
                self.span(),
                format!("program nested too deeply (more than {MAX_NESTING} levels)"),
            ));
        }
        self.depth += 1;
        let r = deep(|| f(self));
        self.depth -= 1;
        r
    }

    // ----- definitions -----

    /// At `type NAME =`: a type alias.
    fn starts_alias(&self) -> bool {
        matches!(self.peek(), Tok::Ident(t) if &**t == "type")
            && matches!(self.peek_at(1), Tok::Ident(_))
            && self.peek_at(2) == &Tok::Sym("=")
    }

    /// `type NAME = T`: later types may use `NAME` for `T`.
    fn alias(&mut self) -> Result<()> {
        self.bump();
        let name = self.ident("the name of the type alias")?;
        if TYPE_NAMES.contains(&&*name.name) {
            return Err(Error::syntax(
                name.span,
                format!("`{}` is a built-in type and cannot be redefined", name.name),
            ));
        }
        if self.aliases.contains_key(&name.name) {
            return Err(Error::syntax(
                name.span,
                format!("type `{}` is defined twice", name.name),
            ));
        }
        self.expect("=", "after the name of the type alias")?;
        let ty = self.ty()?;
        self.aliases.insert(name.name, ty.ty);
        Ok(())
    }

    fn def(&mut self) -> Result<Def> {
        let start = self.span();
        if !self.eat_kw("def") {
            return Err(self.error_expected("`def` (the start of a definition)"));
        }
        let rec = matches!(self.peek(), Tok::Ident(r) if &**r == "rec")
            && matches!(self.peek_at(1), Tok::Ident(_));
        if rec {
            self.bump();
        }
        let name = self.ident("the name of the definition")?;
        let mut params = Vec::new();
        while self.peek() == &Tok::Sym("(") {
            self.bump();
            let pname = self.ident("a parameter name")?;
            if !self.eat(":") {
                return Err(self
                    .error_expected("`:` and the parameter's type")
                    .with_note("parameters of a definition are annotated: `(x : Real)`"));
            }
            let ty = self.ty()?;
            self.expect(")", "to close the parameter")?;
            params.push(Param {
                name: pname,
                ty: Some(ty),
            });
        }
        if let Tok::Ident(x) = self.peek() {
            return Err(Error::syntax(
                self.span(),
                format!("parameter `{x}` of a definition needs a type annotation"),
            )
            .with_note(format!("write `({x} : T)`")));
        }
        let ret = if self.eat(":") {
            Some(self.ty()?)
        } else {
            None
        };
        self.expect("=", "before the body of the definition")?;
        let body = self.expr()?;
        let (mut jvp, mut vjp) = (None, None);
        while self.peek() == &Tok::Keyword("with") {
            let with = self.span();
            self.bump();
            let kind = self.ident("`jvp` or `vjp` after `with`")?;
            let slot = match &*kind.name {
                "jvp" if jvp.is_none() && vjp.is_none() => &mut jvp,
                "vjp" if vjp.is_none() && jvp.is_some() => &mut vjp,
                "jvp" | "vjp" => {
                    return Err(Error::syntax(
                        kind.span,
                        format!("unexpected `with {}` clause", kind.name),
                    )
                    .with_note("a definition has at most one `with jvp` clause, then at most one `with vjp` clause"));
                }
                _ => {
                    return Err(Error::syntax(
                        kind.span,
                        format!(
                            "expected `jvp` or `vjp` after `with`, found `{}`",
                            kind.name
                        ),
                    ));
                }
            };
            let mut cparams = Vec::new();
            while self.peek() == &Tok::Sym("(") {
                self.bump();
                let pname = self.ident("a tangent name")?;
                self.expect(":", "and the tangent's type")?;
                let ty = self.ty()?;
                self.expect(")", "to close the tangent")?;
                cparams.push(Param {
                    name: pname,
                    ty: Some(ty),
                });
            }
            self.expect("=", "before the body of the derivative clause")?;
            let cbody = self.expr()?;
            *slot = Some(Clause {
                params: cparams,
                body: cbody,
                span: with.to(self.prev_span()),
            });
        }
        let span = start.to(self.prev_span());
        Ok(Def {
            name,
            rec,
            params,
            ret,
            body,
            jvp,
            vjp,
            span,
        })
    }

    // ----- types -----

    fn ty(&mut self) -> Result<TypeAnn> {
        self.nest(|p| {
            let start = p.span();
            let a = p.sum_ty()?;
            if p.eat("->") {
                let b = p.ty()?;
                Ok(TypeAnn {
                    ty: Type::fun(a.ty, b.ty),
                    span: start.to(b.span),
                })
            } else {
                Ok(a)
            }
        })
    }

    fn sum_ty(&mut self) -> Result<TypeAnn> {
        let a = self.app_ty()?;
        if self.eat("+") {
            let b = self.nest(|p| p.sum_ty())?;
            Ok(TypeAnn {
                ty: Type::sum(a.ty, b.ty),
                span: a.span.to(b.span),
            })
        } else {
            Ok(a)
        }
    }

    fn app_ty(&mut self) -> Result<TypeAnn> {
        if matches!(self.peek(), Tok::Ident(x) if &**x == "Array") {
            let (_, start) = self.bump();
            let a = self.nest(|p| p.app_ty())?;
            return Ok(TypeAnn {
                ty: Type::array(a.ty),
                span: start.to(a.span),
            });
        }
        self.atom_ty()
    }

    fn atom_ty(&mut self) -> Result<TypeAnn> {
        let start = self.span();
        match self.peek().clone() {
            Tok::Ident(x) => {
                let ty = match &*x {
                    "Real" => Type::Real,
                    "Int" => Type::Int,
                    "Bool" => Type::Bool,
                    "Unit" => Type::Unit,
                    _ => match self.aliases.get(&x) {
                        Some(t) => t.clone(),
                        None => return Err(self.unknown_type(&x, start)),
                    },
                };
                self.bump();
                Ok(TypeAnn { ty, span: start })
            }
            Tok::Sym("(") => {
                self.bump();
                if self.eat(")") {
                    return Ok(TypeAnn {
                        ty: Type::Unit,
                        span: start.to(self.prev_span()),
                    });
                }
                let mut items = vec![self.ty()?.ty];
                while self.eat(",") {
                    items.push(self.ty()?.ty);
                }
                self.expect(")", "to close the type")?;
                Ok(TypeAnn {
                    ty: Type::tuple(&items),
                    span: start.to(self.prev_span()),
                })
            }
            _ => Err(self.error_expected("a type")),
        }
    }

    fn unknown_type(&self, x: &str, at: Span) -> Error {
        let e = Error::syntax(at, format!("unknown type `{x}`"));
        let known = TYPE_NAMES
            .iter()
            .map(|t| t.to_string())
            .chain(self.aliases.keys().map(|a| a.to_string()));
        let synonym = match x {
            "Float" | "Double" | "Number" | "Num" | "F64" | "f64" => Some("Real"),
            "Integer" | "Nat" | "Index" | "I64" | "i64" | "Long" => Some("Int"),
            "Boolean" | "bool" => Some("Bool"),
            "Vector" | "Vec" | "List" => Some("Array"),
            _ => None,
        };
        match synonym
            .map(str::to_string)
            .or_else(|| super::suggest(x, known))
        {
            Some(s) => e.with_note(format!("did you mean `{s}`?")),
            None => e.with_note(
                "types are Real, Int, Bool, Unit, (A, B), A -> B, A + B and Array A, and \
                 aliases defined by `type NAME = T` before their use",
            ),
        }
    }

    // ----- expressions -----

    fn expr(&mut self) -> Result<Expr> {
        self.nest(|p| match p.peek() {
            Tok::Keyword("let") => p.let_chain(),
            Tok::Keyword("if") => p.if_expr(),
            Tok::Keyword("case") => p.case_expr(),
            Tok::Sym("\\") => p.lambda(),
            _ => p.binary(1),
        })
    }

    fn let_chain(&mut self) -> Result<Expr> {
        // `let a = e1 in let b = e2 in ... body`, collected in a loop so that a long chain does
        // not recurse once per `let`.
        let mut bindings = Vec::new();
        while self.peek() == &Tok::Keyword("let") {
            let (_, start) = self.bump();
            let pat = self.pattern()?;
            let ann = if self.eat(":") {
                Some(self.ty()?)
            } else {
                None
            };
            self.expect("=", "after the pattern of `let`")?;
            let rhs = self.expr()?;
            self.expect_kw("in", "after the bound expression of `let`")?;
            bindings.push((start, pat, ann, rhs));
        }
        let mut body = self.expr()?;
        while let Some((start, pat, ann, rhs)) = bindings.pop() {
            let span = start.to(body.span);
            body = Expr {
                kind: ExprKind::Let(pat, ann, Box::new(rhs), Box::new(body)),
                span,
            };
        }
        Ok(body)
    }

    fn pattern(&mut self) -> Result<Pattern> {
        self.nest(|p| {
            let start = p.span();
            match p.peek().clone() {
                Tok::Ident(name) => {
                    p.bump();
                    if &*name == "_" {
                        Ok(Pattern::Wild(start))
                    } else {
                        Ok(Pattern::Var(Ident { name, span: start }))
                    }
                }
                Tok::Sym("(") => {
                    p.bump();
                    let mut items = vec![p.pattern()?];
                    while p.eat(",") {
                        items.push(p.pattern()?);
                    }
                    p.expect(")", "to close the pattern")?;
                    if items.len() == 1 {
                        Ok(items.pop().expect("one item"))
                    } else {
                        Ok(Pattern::Tuple(items, start.to(p.prev_span())))
                    }
                }
                _ => Err(p.error_expected("a pattern (a name, `_`, or a tuple of patterns)")),
            }
        })
    }

    fn if_expr(&mut self) -> Result<Expr> {
        let (_, start) = self.bump();
        let c = self.expr()?;
        self.expect_kw("then", "after the condition of `if`")?;
        let a = self.expr()?;
        self.expect_kw(
            "else",
            "after the `then` branch (every `if` needs an `else`)",
        )?;
        let b = self.expr()?;
        let span = start.to(b.span);
        Ok(Expr {
            kind: ExprKind::If(Box::new(c), Box::new(a), Box::new(b)),
            span,
        })
    }

    fn case_expr(&mut self) -> Result<Expr> {
        let (_, start) = self.bump();
        let scrut = self.expr()?;
        self.expect_kw("of", "after the scrutinee of `case`")?;
        self.eat("|");
        let (side1, p1, e1) = self.branch()?;
        self.expect("|", "between the two branches of `case`")?;
        let (side2, p2, e2) = self.branch()?;
        if side1 == side2 {
            return Err(
                Error::syntax(p2.span(), format!("`case` has two `{side1}` branches"))
                    .with_note("a case has one `inl` branch and one `inr` branch"),
            );
        }
        let span = start.to(self.prev_span());
        let kind = if side1 == "inl" {
            ExprKind::Case(Box::new(scrut), p1, Box::new(e1), p2, Box::new(e2))
        } else {
            ExprKind::Case(Box::new(scrut), p2, Box::new(e2), p1, Box::new(e1))
        };
        Ok(Expr { kind, span })
    }

    fn branch(&mut self) -> Result<(&'static str, Pattern, Expr)> {
        let side = match self.peek() {
            Tok::Ident(x) if &**x == "inl" => "inl",
            Tok::Ident(x) if &**x == "inr" => "inr",
            _ => return Err(self.error_expected("a branch `inl x -> ...` or `inr y -> ...`")),
        };
        self.bump();
        let pat = self.pattern()?;
        self.expect("->", "after the pattern of the branch")?;
        let body = self.expr()?;
        Ok((side, pat, body))
    }

    fn lambda(&mut self) -> Result<Expr> {
        let (_, start) = self.bump();
        let mut params = Vec::new();
        loop {
            match self.peek().clone() {
                Tok::Ident(name) => {
                    let (_, span) = self.bump();
                    params.push(Param {
                        name: Ident { name, span },
                        ty: None,
                    });
                }
                Tok::Sym("(") => {
                    self.bump();
                    let name = self.ident("a parameter name")?;
                    let ty = if self.eat(":") {
                        Some(self.ty()?)
                    } else {
                        None
                    };
                    self.expect(")", "to close the parameter")?;
                    params.push(Param { name, ty });
                }
                _ => break,
            }
        }
        if params.is_empty() {
            return Err(self.error_expected("a parameter such as `(x : Real)` after `\\`"));
        }
        self.expect("->", "after the parameters of the lambda")?;
        let body = self.expr()?;
        let span = start.to(body.span);
        Ok(Expr {
            kind: ExprKind::Lam(params, Box::new(body)),
            span,
        })
    }

    fn peek_binop(&self) -> Option<BinOp> {
        Some(match self.peek() {
            Tok::Sym("||") => BinOp::Or,
            Tok::Sym("&&") => BinOp::And,
            Tok::Sym("==") => BinOp::Eq,
            Tok::Sym("!=") => BinOp::Ne,
            Tok::Sym("<") => BinOp::Lt,
            Tok::Sym("<=") => BinOp::Le,
            Tok::Sym(">") => BinOp::Gt,
            Tok::Sym(">=") => BinOp::Ge,
            Tok::Sym("+") => BinOp::Add,
            Tok::Sym("-") => BinOp::Sub,
            Tok::Sym("*") => BinOp::Mul,
            Tok::Sym("/") => BinOp::Div,
            Tok::Sym("%") => BinOp::Rem,
            _ => return None,
        })
    }

    fn binary(&mut self, min: u8) -> Result<Expr> {
        let mut lhs = self.unary()?;
        while let Some(op) = self.peek_binop() {
            let prec = op.precedence();
            if prec < min {
                break;
            }
            let (_, at) = self.bump();
            if op == BinOp::Mul && self.peek() == &Tok::Sym("*") {
                return Err(Error::syntax(
                    at.to(self.span()),
                    "`**` is not an operator".to_string(),
                )
                .with_label("not an operator")
                .with_note("write a power as `x ^ y` (or `pow x y`)"));
            }
            // Left-associative: the right operand only takes tighter operators. The recursion
            // depth is bounded by the number of precedence levels.
            let rhs = self.nest(|p| p.binary(prec + 1))?;
            let span = lhs.span.to(rhs.span);
            lhs = Expr {
                kind: ExprKind::Binary(op, Box::new(lhs), Box::new(rhs)),
                span,
            };
        }
        Ok(lhs)
    }

    fn unary(&mut self) -> Result<Expr> {
        if self.peek() == &Tok::Sym("-") {
            // `-` directly before a number is a negative literal (unless indexing or a power
            // follows, which bind at least as tightly as unary minus: `-2 ^ 2` is `-(2 ^ 2)`).
            if matches!(self.peek_at(1), Tok::Int(_) | Tok::Real(_))
                && !matches!(self.peek_at(2), Tok::Sym("!" | "^"))
            {
                let (_, start) = self.bump();
                let (tok, end) = self.bump();
                let kind = match tok {
                    Tok::Int(i) => ExprKind::Int(-i),
                    Tok::Real(x) => ExprKind::Real(-x),
                    _ => unreachable!("peeked a number"),
                };
                return Ok(Expr {
                    kind,
                    span: start.to(end),
                });
            }
            let (_, start) = self.bump();
            let e = self.nest(|p| p.unary())?;
            let span = start.to(e.span);
            return Ok(Expr {
                kind: ExprKind::Neg(Box::new(e)),
                span,
            });
        }
        self.power()
    }

    /// `a ^ b`: right-associative, its exponent a unary expression (`x ^ -1`, `a ^ b ^ c`).
    fn power(&mut self) -> Result<Expr> {
        let mut lhs = self.app()?;
        while self.peek() == &Tok::Sym("!") {
            self.bump();
            let rhs = self.app()?;
            let span = lhs.span.to(rhs.span);
            lhs = Expr {
                kind: ExprKind::Binary(BinOp::Index, Box::new(lhs), Box::new(rhs)),
                span,
            };
        }
        if self.peek() == &Tok::Sym("^") {
            self.bump();
            let rhs = self.nest(|p| p.unary())?;
            let span = lhs.span.to(rhs.span);
            lhs = Expr {
                kind: ExprKind::Binary(BinOp::Pow, Box::new(lhs), Box::new(rhs)),
                span,
            };
        }
        Ok(lhs)
    }

    fn app(&mut self) -> Result<Expr> {
        let head = self.atom()?;
        let mut args = Vec::new();
        loop {
            if self.starts_alias() {
                // `type NAME = ...` after a definition's body: the next item.
                break;
            } else if starts_atom(self.peek()) {
                args.push(self.atom()?);
            } else if is_block_start(self.peek()) {
                // A trailing block argument: `build n \(i : Int) -> e`.
                args.push(self.expr()?);
                break;
            } else {
                break;
            }
        }
        if args.is_empty() {
            return Ok(head);
        }
        let span = head.span.to(args.last().expect("nonempty").span);
        Ok(Expr {
            kind: ExprKind::App(Box::new(head), args),
            span,
        })
    }

    fn atom(&mut self) -> Result<Expr> {
        let start = self.span();
        let kind = match self.peek().clone() {
            Tok::Ident(x) => {
                self.bump();
                ExprKind::Var(x)
            }
            Tok::Int(i) => {
                self.bump();
                ExprKind::Int(i)
            }
            Tok::Real(x) => {
                self.bump();
                ExprKind::Real(x)
            }
            Tok::Keyword("true") => {
                self.bump();
                ExprKind::Bool(true)
            }
            Tok::Keyword("false") => {
                self.bump();
                ExprKind::Bool(false)
            }
            Tok::Sym("(") => return self.paren(),
            Tok::Sym("[") => {
                self.bump();
                let mut items = Vec::new();
                if !self.eat("]") {
                    loop {
                        items.push(self.expr()?);
                        if self.eat("]") {
                            break;
                        }
                        self.expect(",", "or `]` in the array literal")?;
                    }
                }
                ExprKind::Array(items)
            }
            t if is_block_start(&t) => return self.expr(),
            _ => return Err(self.error_expected("an expression")),
        };
        Ok(Expr {
            kind,
            span: start.to(self.prev_span()),
        })
    }

    fn paren(&mut self) -> Result<Expr> {
        let (_, start) = self.bump();
        if self.eat(")") {
            return Ok(Expr {
                kind: ExprKind::Unit,
                span: start.to(self.prev_span()),
            });
        }
        let first = self.expr()?;
        if self.eat(":") {
            let t = self.ty()?;
            self.expect(")", "to close the type ascription")?;
            return Ok(Expr {
                kind: ExprKind::Annot(Box::new(first), t),
                span: start.to(self.prev_span()),
            });
        }
        if self.peek() == &Tok::Sym(",") {
            let mut items = vec![first];
            while self.eat(",") {
                items.push(self.expr()?);
            }
            self.expect(")", "to close the tuple")?;
            return Ok(Expr {
                kind: ExprKind::Tuple(items),
                span: start.to(self.prev_span()),
            });
        }
        if self.peek() != &Tok::Sym(")") {
            // A common slip: `f (x y` or an operator with no right operand.
            let hint = if matches!(self.peek_at(0), Tok::Keyword("in" | "then" | "else" | "of")) {
                " (is a `let`, `if` or `case` missing a part?)"
            } else {
                ""
            };
            return Err(self.error_expected(&format!("`)`, `,` or `:`{hint}")));
        }
        self.bump();
        let mut e = first;
        e.span = start.to(self.prev_span());
        Ok(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sx(s: &str) -> String {
        parse_expr(s)
            .unwrap_or_else(|e| panic!("{s}: {e:?}"))
            .to_sexp()
    }

    fn err(s: &str) -> String {
        parse_expr(s).unwrap_err().message().to_string()
    }

    #[test]
    fn precedence_loosest_to_tightest() {
        assert_eq!(sx("a || b && c"), "(|| a (&& b c))");
        assert_eq!(sx("a && b == c"), "(&& a (== b c))");
        assert_eq!(sx("a < b + c"), "(< a (+ b c))");
        assert_eq!(sx("a + b * c"), "(+ a (* b c))");
        assert_eq!(sx("a * -b"), "(* a (neg b))");
        assert_eq!(sx("-a * b"), "(* (neg a) b)");
        assert_eq!(sx("-xs ! i"), "(neg (! xs i))");
        assert_eq!(sx("-1.5 * x"), "(* -1.5 x)");
        assert_eq!(sx("- 2"), "-2");
        assert_eq!(sx("-(2)"), "(neg 2)");
        assert_eq!(sx("-2 ! i"), "(neg (! 2 i))");
        assert_eq!(sx("a - 1"), "(- a 1)");
        assert_eq!(sx("f xs ! g i"), "(! (app f xs) (app g i))");
        assert_eq!(sx("f x y + g z"), "(+ (app f x y) (app g z))");
    }

    #[test]
    fn binary_operators_are_left_associative() {
        assert_eq!(sx("a - b - c"), "(- (- a b) c)");
        assert_eq!(sx("a / b * c"), "(* (/ a b) c)");
        assert_eq!(sx("m ! i ! j"), "(! (! m i) j)");
        assert_eq!(sx("a || b || c"), "(|| (|| a b) c)");
        assert_eq!(sx("a < b < c"), "(< (< a b) c)");
        assert_eq!(sx("f - 1"), "(- f 1)");
    }

    #[test]
    fn every_construct() {
        assert_eq!(sx("let x = 1 in x"), "(let x 1 x)");
        assert_eq!(sx("let x : Real = 1 in x"), "(let x : Real 1 x)");
        assert_eq!(sx("let (a, (b, _)) = p in a"), "(let (a, (b, _)) p a)");
        assert_eq!(sx("let (a, b, c) = p in a"), "(let (a, b, c) p a)");
        assert_eq!(
            sx("\\(x : Real) (y : Array Real) -> x"),
            "(lam (x : Real) (y : Array Real) x)"
        );
        assert_eq!(sx("\\x _ -> x"), "(lam x _ x)");
        assert_eq!(sx("if a then b else c + 1"), "(if a b (+ c 1))");
        assert_eq!(
            sx("case e of inl x -> x | inr (y, z) -> y"),
            "(case e (inl x x) (inr (y, z) y))"
        );
        assert_eq!(
            sx("case e of | inr y -> y | inl x -> x"),
            "(case e (inl x x) (inr y y))"
        );
        assert_eq!(sx("(1, 2.5, true)"), "(tuple 1 2.5 true)");
        assert_eq!(sx("[1.0, 2e-3]"), "(array 1.0 0.002)");
        assert_eq!(sx("[]"), "(array)");
        assert_eq!(sx("()"), "()");
        assert_eq!(sx("(inl 1.0 : Real + Int)"), "(: (app inl 1.0) Real + Int)");
        assert_eq!(sx("fst p + snd p"), "(+ (app fst p) (app snd p))");
        assert_eq!(sx("xs ! (i + 1)"), "(! xs (+ i 1))");
        assert_eq!(sx("1 + let x = 2 in x * 3"), "(+ 1 (let x 2 (* x 3)))");
        assert_eq!(
            sx("build n \\(i : Int) -> xs ! i"),
            "(app build n (lam (i : Int) (! xs i)))"
        );
        assert_eq!(sx("a != b && c >= d"), "(&& (!= a b) (>= c d))");
        assert_eq!(sx("a <= b || c > d"), "(|| (<= a b) (> c d))");
    }

    #[test]
    fn case_branches_extend_and_nest() {
        assert_eq!(
            sx("case a of inl x -> case x of inl y -> 1 | inr z -> 2 | inr w -> 3"),
            // The inner case takes the first `|`; the outer case's second branch follows.
            "(case a (inl x (case x (inl y 1) (inr z 2))) (inr w 3))"
        );
    }

    #[test]
    fn types() {
        let t = |s: &str| parse_type(s).unwrap().to_string();
        assert_eq!(t("Real -> Real -> Real"), "Real -> Real -> Real");
        assert_eq!(t("(Real -> Real) -> Real"), "(Real -> Real) -> Real");
        assert_eq!(t("Array Real + Int -> ()"), "Array Real + Int -> Unit");
        assert_eq!(t("Real + Int + Bool"), "Real + Int + Bool");
        assert_eq!(t("(Real, Int, Bool)"), "(Real, Int, Bool)");
        assert_eq!(t("Array Array Real"), "Array (Array Real)");
        assert_eq!(t("Array (Real, Real)"), "Array (Real, Real)");
        assert_eq!(t("(Real)"), "Real");
        assert!(
            parse_type("Float")
                .unwrap_err()
                .message()
                .contains("unknown type `Float`")
        );
    }

    #[test]
    fn programs() {
        let p = parse_program(
            "# squares\ndef square (x : Real) : Real = x * x\n\ndef f (x : Real) (ys : Array Real) =\n  sum (map square ys)\n",
        )
        .unwrap();
        assert_eq!(p.defs.len(), 2);
        assert_eq!(&*p.defs[1].name.name, "f");
        assert_eq!(p.defs[1].params.len(), 2);
        assert!(p.defs[1].ret.is_none());
        assert_eq!(p.defs[0].body.to_sexp(), "(* x x)");
    }

    #[test]
    fn errors_say_what_was_expected() {
        assert_eq!(
            err("let x = 1 x"),
            "expected `in` after the bound expression of `let`, found end of input"
        );
        assert_eq!(
            err("if a then b"),
            "expected `else` after the `then` branch (every `if` needs an `else`), found end of input"
        );
        assert_eq!(
            err("(1, 2"),
            "expected `)` to close the tuple, found end of input"
        );
        assert_eq!(err("1 +"), "expected an expression, found end of input");
        assert_eq!(
            err("\\ -> x"),
            "expected a parameter such as `(x : Real)` after `\\`, found `->`"
        );
        assert_eq!(
            err("case x of inl a -> 1 | inl b -> 2"),
            "`case` has two `inl` branches"
        );
        assert_eq!(err("x y)"), "expected the end of the expression, found `)`");
        assert_eq!(
            err("[1, 2"),
            "expected `,` or `]` in the array literal, found end of input"
        );
        let e = parse_program("def f x = x").unwrap_err();
        assert_eq!(
            e.message(),
            "parameter `x` of a definition needs a type annotation"
        );
        let e = parse_program("let x = 1").unwrap_err();
        assert_eq!(
            e.message(),
            "expected `def` (the start of a definition), found keyword `let`"
        );
    }

    #[test]
    fn deep_nesting_parses_or_errors_without_crashing() {
        let n = 20_000;
        let s = format!("{}x{}", "(".repeat(n), ")".repeat(n));
        assert_eq!(sx(&s), "x");
        let s = format!("{}x", "-".repeat(n));
        assert!(parse_expr(&s).is_ok());
        let mut lets = String::new();
        for i in 0..50_000 {
            lets.push_str(&format!("let x{i} = {i} in\n"));
        }
        lets.push('x');
        assert!(parse_expr(&lets).is_ok());
        let too_deep = format!(
            "{}x{}",
            "[".repeat(MAX_NESTING + 1),
            "]".repeat(MAX_NESTING + 1)
        );
        let e = parse_expr(&too_deep).unwrap_err();
        assert!(e.message().contains("nested too deeply"), "{}", e.message());
    }
}
