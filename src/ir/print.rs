//! The IR as text (`chad show --stage ir`): enums, then functions, one statement per line,
//! blocks indented.
//!
//! ```text
//! fn f(x_0: f64, xs_1: [f64]) -> f64 {
//!   let n_2: i64 = len xs_1
//!   let s_3: f64 = sum n_2 (i_4 -> {
//!     let a_5: f64 = xs_1[i_4] @1
//!     let b_6: f64 = prim mul(a_5, x_0) @2
//!     b_6
//!   })
//!   s_3
//! }
//! ```
//!
//! Variables print as `name_id`; `@k` names the error site of an operation that can fail.

use super::{Arm, Atom, Block, Expr, Func, MutVar, Place, Program, Step, Stmt, Types, Var};
use crate::deep::deep;
use std::fmt::Write;

/// The whole program.
pub fn program(p: &Program) -> String {
    let mut out = String::new();
    for e in p.types.enums() {
        let _ = write!(out, "enum {} {{", e.name);
        for (k, (name, ty)) in e.variants.iter().enumerate() {
            let _ = write!(
                out,
                "{}{name}({})",
                if k == 0 { " " } else { ", " },
                p.types.show(*ty)
            );
        }
        out.push_str(" }\n");
    }
    for f in &p.funcs {
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(&func(p, f));
    }
    out
}

/// One function.
pub fn func(p: &Program, f: &Func) -> String {
    let mut pr = Printer {
        types: &p.types,
        out: String::new(),
        funcs: p.funcs.iter().map(|f| f.name.clone()).collect(),
    };
    let params: Vec<String> = f.params.iter().map(|x| pr.decl(x)).collect();
    let _ = write!(
        pr.out,
        "{}fn {}({}) -> {} ",
        if f.accumulates {
            "acc "
        } else if f.rec.is_some() {
            "rec "
        } else {
            ""
        },
        f.name,
        params.join(", "),
        p.types.show(f.ret)
    );
    pr.block(&f.body, 0);
    pr.out.push('\n');
    pr.out
}

struct Printer<'a> {
    types: &'a Types,
    out: String,
    funcs: Vec<String>,
}

fn var(x: &Var) -> String {
    format!("{}_{}", x.name, x.id)
}

fn atom(a: &Atom) -> String {
    match a {
        Atom::Var(x) => var(x),
        Atom::F64(x) => crate::value::format_real(*x),
        Atom::I64(i) => i.to_string(),
        Atom::Bool(b) => b.to_string(),
        Atom::Unit => "()".into(),
    }
}

fn atoms(xs: &[Atom]) -> String {
    xs.iter().map(atom).collect::<Vec<_>>().join(", ")
}

fn mvar(m: &MutVar) -> String {
    var(&m.0)
}

fn place(p: &Place) -> String {
    let mut s = mvar(&p.root);
    for st in &p.path {
        match st {
            Step::Field(k) => {
                let _ = write!(s, ".{k}");
            }
            Step::Elem(i) => {
                let _ = write!(s, "[{}]", atom(i));
            }
        }
    }
    s
}

impl Printer<'_> {
    fn decl(&self, x: &Var) -> String {
        format!("{}: {}", var(x), self.types.show(x.ty))
    }

    fn indent(&mut self, depth: usize) {
        for _ in 0..depth {
            self.out.push_str("  ");
        }
    }

    /// `{ stmts; result }` starting at the current position, closing at `depth`.
    fn block(&mut self, b: &Block, depth: usize) {
        deep(|| {
            self.out.push_str("{\n");
            for s in &b.stmts {
                self.indent(depth + 1);
                self.stmt(s, depth + 1);
                self.out.push('\n');
            }
            if !matches!(b.result, Atom::Unit) {
                self.indent(depth + 1);
                self.out.push_str(&atom(&b.result));
                self.out.push('\n');
            }
            self.indent(depth);
            self.out.push('}');
        })
    }

    fn stmt(&mut self, s: &Stmt, depth: usize) {
        match s {
            Stmt::Let(x, e) => {
                let _ = write!(self.out, "let {} = ", self.decl(x));
                self.expr(e, depth);
            }
            Stmt::Mut(m, e) => {
                let _ = write!(self.out, "mut {} = ", self.decl(&m.0));
                self.expr(e, depth);
            }
            Stmt::Set(m, a) => {
                let _ = write!(self.out, "set {} = {}", mvar(m), atom(a));
            }
            Stmt::AddTo {
                place: p,
                value,
                scale,
            } => {
                let _ = match scale {
                    Some(c) => write!(self.out, "{} += {} * {}", place(p), atom(c), atom(value)),
                    None => write!(self.out, "{} += {}", place(p), atom(value)),
                };
            }
            Stmt::Grow(p, n) => {
                let _ = write!(self.out, "grow {} {}", place(p), atom(n));
            }
            Stmt::For(i, n, body) => {
                let _ = write!(self.out, "for {} in 0..{} ", var(i), atom(n));
                self.block(body, depth);
            }
            Stmt::Do(e) => {
                self.out.push_str("do ");
                self.expr(e, depth);
            }
            Stmt::Loop(body) => {
                self.out.push_str("loop ");
                self.block(body, depth);
            }
            Stmt::Break => self.out.push_str("break"),
            Stmt::Check(c, s) => {
                let what = match c {
                    super::Check::OneHot(..) => "onehot",
                    super::Check::SameLen(op, ..) | super::Check::Len(op, _) => op,
                };
                let args: Vec<Atom> = c.atoms().into_iter().cloned().collect();
                let _ = write!(self.out, "check {what}({}) @{}", atoms(&args), s.0);
            }
        }
    }

    fn arms(&mut self, arms: &[Arm], depth: usize) {
        self.out.push_str("{\n");
        for (k, arm) in arms.iter().enumerate() {
            self.indent(depth + 1);
            let bind = arm.bind.as_ref().map_or("_".to_string(), var);
            let _ = write!(self.out, "{k}({bind}) -> ");
            self.block(&arm.body, depth + 1);
            self.out.push('\n');
        }
        self.indent(depth);
        self.out.push('}');
    }

    fn expr(&mut self, e: &Expr, depth: usize) {
        let o = &mut self.out;
        let _ = match e {
            Expr::Atom(a) => write!(o, "{}", atom(a)),
            Expr::Op(op, xs) => write!(o, "{}({})", op.name(), atoms(xs)),
            Expr::Prim(p, xs, s) => write!(o, "prim {}({}) @{}", p.name(), atoms(xs), s.0),
            Expr::Tuple(xs) => write!(o, "({})", atoms(xs)),
            Expr::Proj(a, k) => write!(o, "{}.{k}", atom(a)),
            Expr::Variant(t, k, a) => {
                let def = self.types.enum_def(*t);
                write!(
                    o,
                    "{}::{}({})",
                    def.name,
                    def.variants[*k as usize].0,
                    atom(a)
                )
            }
            Expr::Array(t, xs) => write!(o, "[{}] : {}", atoms(xs), self.types.show(*t)),
            Expr::Index(a, i, s) => write!(o, "{}[{}] @{}", atom(a), atom(i), s.0),
            Expr::IndexOr0(a, i) => write!(o, "{}[{}]?0", atom(a), atom(i)),
            Expr::Len(a) => write!(o, "len {}", atom(a)),
            Expr::Build(n, i, b, s) => {
                let _ = write!(o, "build {} @{} ({} -> ", atom(n), s.0, var(i));
                self.block(b, depth);
                write!(self.out, ")")
            }
            Expr::Sum(n, i, b) => {
                let _ = write!(o, "sum {} ({} -> ", atom(n), var(i));
                self.block(b, depth);
                write!(self.out, ")")
            }
            Expr::Iterate(init, s, b, tape, site) => {
                let kw = if *tape { "iterateTape" } else { "iterate" };
                let _ = write!(o, "{kw} {} = {} @{} ", var(s), atom(init), site.0);
                self.block(b, depth);
                Ok(())
            }
            Expr::Replicate(n, x, s) => write!(o, "replicate {} {} @{}", atom(n), atom(x), s.0),
            Expr::If(c, a, b) => {
                let _ = write!(o, "if {} ", atom(c));
                self.block(a, depth);
                self.out.push_str(" else ");
                self.block(b, depth);
                Ok(())
            }
            Expr::Match(a, arms) => {
                let _ = write!(o, "match {} ", atom(a));
                self.arms(arms, depth);
                Ok(())
            }
            Expr::Call(f, xs) => write!(o, "call {}({})", self.funcs[f.0 as usize], atoms(xs)),
            Expr::Zero(t) => write!(o, "zero {}", self.types.show(*t)),
            Expr::Add(a, b) => write!(o, "{} + {}", atom(a), atom(b)),
            Expr::Scale(c, a) => write!(o, "{} * {}", atom(c), atom(a)),
            Expr::Get(m) => write!(o, "get {}", mvar(m)),
            Expr::Take(m) => write!(o, "take {}", mvar(m)),
        };
    }
}
