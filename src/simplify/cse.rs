//! `cse`: common subexpressions of primitives on atoms.
//!
//! `let x = p a b in .. p a b ..  ~>  let x = p a b in .. x ..` when `a` and `b` are atoms
//! (variables, literals, projections of atoms): the primitive has already been computed, in
//! scope, on the same arguments (binders are unique, so the same variable is the same value),
//! and the language is pure, so the variable is that value. It never adds work; it removes a
//! primitive application.
//!
//! Derivative code needs it because a primitive's derivative is written in terms of its
//! arguments: `sqrt`'s is `0.5 / sqrt x` and `exp`'s is `exp x`, so the linear map of
//! `let y = sqrt x in ..` computes `sqrt x` again, once per evaluation of the map, unless it
//! reads `y`. The same holds for a branch or loop body that repeats a computation of its
//! context.
//!
//! It runs at each fixed point of the main pass ([`super::pass`]), like the fusion rules, and
//! the next pass cleans up what it leaves (a `let z = x` it made is inlined).

use crate::deep::deep;
use crate::target::term::{LTerm, LTermKind, Lit, Pat, Rewrite, Term, TermKind, Var};
use rustc_hash::FxHashMap as HashMap;

/// Replaces every primitive application on atoms that a `let` in scope already binds by that
/// `let`'s variable. Returns the term and how often it did.
pub(super) fn run(t: &Term) -> (Term, usize) {
    let mut c = Cse {
        avail: HashMap::default(),
        fired: 0,
    };
    let out = c.term(t);
    (out, c.fired)
}

struct Cse {
    /// Keys of primitive applications bound by a `let` in scope, and their variables.
    avail: HashMap<String, Var>,
    fired: usize,
}

impl Cse {
    /// Runs `body` with `x = e` available if `e` is a primitive on atoms.
    fn with<T>(&mut self, x: &Var, e: &Term, body: impl FnOnce(&mut Cse) -> T) -> T {
        let Some(k) = key(e) else {
            return body(self);
        };
        let old = self.avail.insert(k.clone(), x.clone());
        let out = body(self);
        match old {
            Some(v) => self.avail.insert(k, v),
            None => self.avail.remove(&k),
        };
        out
    }
}

impl Rewrite for Cse {
    fn term(&mut self, t: &Term) -> Term {
        deep(|| match &t.kind {
            TermKind::Let(Pat::Var(x), e, body) => {
                let e2 = self.term(e);
                let body2 = self.with(x, &e2, |c| c.term(body));
                Term::new(TermKind::Let(Pat::Var(x.clone()), e2, body2), t.span)
            }
            TermKind::Prim(..) => {
                let t2 = t.map_children(self);
                match key(&t2).and_then(|k| self.avail.get(&k)) {
                    Some(x) => {
                        self.fired += 1;
                        Term::new(TermKind::Var(x.clone()), t.span)
                    }
                    None => t2,
                }
            }
            _ => t.map_children(self),
        })
    }

    fn linear(&mut self, l: &LTerm) -> LTerm {
        deep(|| match &l.kind {
            LTermKind::Let(Pat::Var(x), e, body) => {
                let e2 = self.term(e);
                let body2 = self.with(x, &e2, |c| c.linear(body));
                LTerm::new(LTermKind::Let(Pat::Var(x.clone()), e2, body2), l.span)
            }
            _ => l.map_children(self),
        })
    }
}

/// A key for a primitive applied to atoms, equal for syntactically equal applications.
fn key(t: &Term) -> Option<String> {
    let TermKind::Prim(op, args) = &t.kind else {
        return None;
    };
    let mut k = format!("{}(", op.name());
    for a in args {
        atom_key(a, &mut k)?;
        k.push(',');
    }
    Some(k)
}

fn atom_key(t: &Term, out: &mut String) -> Option<()> {
    use std::fmt::Write;
    match &t.kind {
        TermKind::Var(x) => write!(out, "v{}", x.id.0).ok(),
        TermKind::Lit(Lit::Real(r)) => write!(out, "r{}", r.to_bits()).ok(),
        TermKind::Lit(Lit::Int(n)) => write!(out, "i{n}").ok(),
        TermKind::Lit(Lit::Bool(b)) => write!(out, "b{b}").ok(),
        TermKind::Lit(Lit::Unit) => write!(out, "u").ok(),
        TermKind::Fst(e) => {
            out.push_str("f.");
            atom_key(e, out)
        }
        TermKind::Snd(e) => {
            out.push_str("s.");
            atom_key(e, out)
        }
        _ => None,
    }
}
