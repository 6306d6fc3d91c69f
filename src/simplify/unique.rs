//! Making binders unique. The simplifier keys its substitution and its facts about variables by
//! [`VarId`], which is sound only if no identity is bound twice. Terms built by sharing (an AD
//! rule that uses the same morphism term in two places binds that term's variables twice) are
//! copied here first: the second and later binders of an identity get fresh identities, renamed
//! within their scope. One linear traversal; a term whose binders are already unique comes back
//! unchanged in meaning and names.

use crate::deep::deep;
use crate::target::term::{LTerm, LTermKind, Pat, Term, TermKind, Var, VarId};
use rustc_hash::{FxHashMap, FxHashSet};

/// A copy of `t` in which every binder has an identity bound nowhere else.
pub fn uniquify(t: &Term) -> Term {
    let mut u = Unique::default();
    u.term(t)
}

#[derive(Default)]
struct Unique {
    seen: FxHashSet<VarId>,
    renamed: FxHashMap<VarId, Var>,
}

/// What to restore when a binder's scope ends.
type Undo = Vec<(VarId, Option<Var>)>;

impl Unique {
    fn bind(&mut self, v: &Var, undo: &mut Undo) -> Var {
        if self.seen.insert(v.id) {
            // First binding: keep it, but a renaming from an enclosing duplicate is shadowed.
            if let Some(old) = self.renamed.remove(&v.id) {
                undo.push((v.id, Some(old)));
            }
            return v.clone();
        }
        let fresh = Var::fresh(v.name.clone(), v.ty.clone());
        let old = self.renamed.insert(v.id, fresh.clone());
        undo.push((v.id, old));
        fresh
    }

    fn pat(&mut self, p: &Pat, undo: &mut Undo) -> Pat {
        deep(|| match p {
            Pat::Var(v) => Pat::Var(self.bind(v, undo)),
            Pat::Wild(t) => Pat::Wild(t.clone()),
            Pat::Pair(a, b) => Pat::Pair(Box::new(self.pat(a, undo)), Box::new(self.pat(b, undo))),
        })
    }

    fn restore(&mut self, undo: Undo) {
        for (id, old) in undo.into_iter().rev() {
            match old {
                Some(v) => self.renamed.insert(id, v),
                None => self.renamed.remove(&id),
            };
        }
    }

    fn var(&self, v: &Var) -> Var {
        self.renamed
            .get(&v.id)
            .cloned()
            .unwrap_or_else(|| v.clone())
    }

    fn term(&mut self, t: &Term) -> Term {
        deep(|| self.term_(t))
    }

    fn term_(&mut self, t: &Term) -> Term {
        use TermKind as K;
        let mut undo = Undo::new();
        let kind = match &t.kind {
            K::Var(x) => K::Var(self.var(x)),
            K::Lam(x, b) => {
                let x2 = self.bind(x, &mut undo);
                K::Lam(x2, self.term(b))
            }
            K::LinLam(v, l) => {
                let v2 = self.bind(v, &mut undo);
                K::LinLam(v2, self.linear(l))
            }
            K::Let(p, e, b) => {
                let e2 = self.term(e);
                let p2 = self.pat(p, &mut undo);
                K::Let(p2, e2, self.term(b))
            }
            K::Case(e, p, a, q, b) => {
                let e2 = self.term(e);
                let p2 = self.pat(p, &mut undo);
                let a2 = self.term(a);
                self.restore(std::mem::take(&mut undo));
                let q2 = self.pat(q, &mut undo);
                K::Case(e2, p2, a2, q2, self.term(b))
            }
            _ => return t.map_children(self),
        };
        self.restore(undo);
        Term::new(kind, t.span)
    }

    fn linear(&mut self, l: &LTerm) -> LTerm {
        deep(|| self.linear_(l))
    }

    fn linear_(&mut self, l: &LTerm) -> LTerm {
        use LTermKind as K;
        let mut undo = Undo::new();
        let kind = match &l.kind {
            K::Var(u) => K::Var(self.var(u)),
            K::Let(p, t, b) => {
                let t2 = self.term(t);
                let p2 = self.pat(p, &mut undo);
                K::Let(p2, t2, self.linear(b))
            }
            K::LinLet(u, a, b) => {
                let a2 = self.linear(a);
                let u2 = self.bind(u, &mut undo);
                K::LinLet(u2, a2, self.linear(b))
            }
            K::PowLam(b, body) => {
                let b2 = self.bind(b, &mut undo);
                K::PowLam(b2, self.linear(body))
            }
            K::Build(n, i, body) => {
                let n2 = self.term(n);
                let i2 = self.bind(i, &mut undo);
                K::Build(n2, i2, self.linear(body))
            }
            K::Case(e, p, a, q, b) => {
                let e2 = self.term(e);
                let p2 = self.pat(p, &mut undo);
                let a2 = self.linear(a);
                self.restore(std::mem::take(&mut undo));
                let q2 = self.pat(q, &mut undo);
                K::Case(e2, Box::new(p2), a2, Box::new(q2), self.linear(b))
            }
            _ => return l.map_children(self),
        };
        self.restore(undo);
        LTerm::new(kind, l.span)
    }
}

impl crate::target::term::Rewrite for Unique {
    fn term(&mut self, t: &Term) -> Term {
        Unique::term(self, t)
    }
    fn linear(&mut self, l: &LTerm) -> LTerm {
        Unique::linear(self, l)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::target::types::Ty;

    /// The binder identities of a term, in order.
    fn binders(t: &Term) -> Vec<VarId> {
        let mut out = Vec::new();
        let mut stack = vec![t.clone()];
        while let Some(t) = stack.pop() {
            match &t.kind {
                TermKind::Lam(x, _) => out.push(x.id),
                TermKind::Let(p, _, _) => out.extend(p.vars().iter().map(|v| v.id)),
                _ => {}
            }
            for c in t.children() {
                if let crate::target::term::Child::C(c) = c {
                    stack.push(c.clone());
                }
            }
        }
        out
    }

    #[test]
    fn a_shared_lambda_gets_fresh_binders_in_its_second_copy_only() {
        let x = Var::fresh("x", Ty::Real);
        let f = Term::lam(&x, Term::var(&x));
        let t = Term::pair(f.clone(), f);
        let u = uniquify(&t);
        let ids = binders(&u);
        assert_eq!(ids.len(), 2);
        assert_ne!(ids[0], ids[1]);
        assert!(ids.contains(&x.id), "the first binder keeps its identity");
        // Each copy still refers to its own binder.
        let TermKind::Pair(a, b) = &u.kind else {
            panic!()
        };
        for side in [a, b] {
            let TermKind::Lam(y, body) = &side.kind else {
                panic!()
            };
            assert!(matches!(&body.kind, TermKind::Var(z) if z.id == y.id));
        }
    }
}
