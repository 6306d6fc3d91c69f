//! `caseSplit`: a branch that chooses a linear map becomes a linear `case`.
//!
//! The derivative of `case s of inl p -> e1 | inr q -> e2` (and so of every `if`) pairs each
//! branch's value with its derivative, a linear closure chosen by the branch:
//!
//! ```text
//! case s of inl p -> let bs1 in (a1, λ̲v. l1) | inr q -> let bs2 in (a2, λ̲w. l2)
//! ```
//!
//! A closure chosen at run time is opaque to `closureConvert` (its code is not one term), so an
//! array of such pairs kept one closure per element. This rule splits the value from the map and
//! makes the choice *inside* one linear map, a linear `case` on the same scrutinee:
//!
//! ```text
//! ~> let s' = s in
//!    (case s' of inl p -> let bs1 in a1 | inr q -> let bs2 in a2,
//!     λ̲v. case s' of inl p -> l1 | inr q -> let w = v in l2)
//! ```
//!
//! when `l1` needs none of the variables `bs1` binds (and `l2` none of `bs2`'s), apart from
//! bindings cheap to evaluate again, which move into the map as `closureConvert` moves them
//! (a little arithmetic or a comparison of atoms, an index of an atom). Otherwise the variables
//! `E1` of `p` and `bs1` that `l1` needs (and `E2` likewise) are the *tape* of the branch,
//! carried by a sum:
//!
//! ```text
//! ~> let t = case s of inl p -> let bs1 in inl (a1, E1) | inr q -> let bs2 in inr (a2, E2) in
//!    (case t of inl (z, _) -> z | inr (z, _) -> z,
//!     λ̲v. case t of inl (_, E1) -> l1 | inr (_, E2) -> let w = v in l2)
//! ```
//!
//! Meaning: both forms evaluate the scrutinee and the chosen branch's bindings exactly as
//! before (so the same errors, in the same order), and the linear map is the one the branch
//! chose, applied to the same argument in the same environment. Cost: the scrutinee is tested
//! once more per application of the map (and a recomputed binding evaluated once more), and the
//! second form builds a sum of a tuple where the original built a closure. The payoff is that
//! the map is now one λ̲ whose environment is `s'` or `t` and ordinary variables, so
//! `closureConvert` stores that environment in an array of such pairs, and the remaining rules
//! simplify through the linear `case` (`caseProj`, `zeroProp`, `sumBuildOneHot`).
//!
//! The rule runs in the fusion pass on the element of a let-bound array (`build`, `map`,
//! `map2`) whose second components are used (else `sndUnused` drops them): the element's body
//! `let bs in case ..` or `let bs in let (z, dg) = case .. in (z, dg')`. A single `case` outside
//! a loop builds one closure either way. The copied pattern variables are renamed apart by the
//! next main pass.

use super::fuse::tuple_of;
use super::types;
use crate::error::Span;
use crate::target::term::{LTerm, LTermKind, Pat, Term, TermKind, Var, VarId};
use crate::target::types::Ty;
use rustc_hash::FxHashSet as HashSet;

/// A branch `let bs in (a, λ̲v. l)`, taken apart.
struct Branch {
    lets: Vec<(Pat, Term, Span)>,
    value: Term,
    pair_span: Span,
    v: Var,
    code: LTerm,
    /// The lets the linear map evaluates again (see [`Branch::needs`]).
    remat: Vec<(Pat, Term, Span)>,
    /// The variables of the lets the linear map needs stored.
    tape: Vec<Var>,
    /// The variables of the branch's pattern the linear map needs.
    params: Vec<Var>,
}

impl Branch {
    fn of(pat: &Pat, t: &Term) -> Option<Branch> {
        let mut lets = Vec::new();
        let mut core = t;
        while let TermKind::Let(p, e, rest) = &core.kind {
            lets.push((p.clone(), e.clone(), core.span));
            core = rest;
        }
        let TermKind::Pair(value, clo) = &core.kind else {
            return None;
        };
        let TermKind::LinLam(v, code) = &clo.kind else {
            return None;
        };
        let mut b = Branch {
            lets,
            value: value.clone(),
            pair_span: core.span,
            v: v.clone(),
            code: code.clone(),
            remat: Vec::new(),
            tape: Vec::new(),
            params: Vec::new(),
        };
        b.needs(pat);
        Some(b)
    }

    /// What the branch's linear map needs of its lets: the bindings cheap to evaluate again
    /// (as `closureConvert` recomputes them: a little arithmetic or a comparison of atoms, an
    /// index of an atom, whose inputs come from outside the branch or are recomputed too),
    /// and the variables to store (the tape), both in binding order.
    fn needs(&mut self, pat: &Pat) {
        use super::fuse::{remat_form, vars_of_lin, vars_of_term};
        let inner: HashSet<VarId> = self
            .lets
            .iter()
            .flat_map(|(p, _, _)| p.vars())
            .map(|x| x.id)
            .collect();
        let mut cheap: HashSet<VarId> = HashSet::default();
        for (p, e, _) in &self.lets {
            if let Pat::Var(x) = p
                && remat_form(x, e)
                && vars_of_term(e)
                    .iter()
                    .all(|y| !inner.contains(y) || cheap.contains(y))
            {
                cheap.insert(x.id);
            }
        }
        let mut need = vars_of_lin(&self.code);
        let mut again = vec![false; self.lets.len()];
        for (k, (p, e, _)) in self.lets.iter().enumerate().rev() {
            if let Pat::Var(x) = p
                && cheap.contains(&x.id)
                && need.contains(&x.id)
            {
                again[k] = true;
                need.extend(vars_of_term(e));
            }
        }
        self.remat = (self.lets.iter().zip(&again))
            .filter(|(_, a)| **a)
            .map(|(b, _)| b.clone())
            .collect();
        self.tape = (self.lets.iter().zip(&again))
            .filter(|(_, a)| !**a)
            .flat_map(|((p, _, _), _)| p.vars())
            .filter(|x| need.contains(&x.id))
            .cloned()
            .collect();
        self.params = pat
            .vars()
            .into_iter()
            .filter(|x| need.contains(&x.id))
            .cloned()
            .collect();
    }

    /// `let bs in core`.
    fn wrap(&self, core: Term) -> Term {
        self.lets.iter().rev().fold(core, |acc, (p, e, s)| {
            Term::new(TermKind::Let(p.clone(), e.clone(), acc), *s)
        })
    }

    /// The code with its linear variable renamed to `u`, under the lets it evaluates again.
    fn code_at(&self, u: &Var) -> LTerm {
        let code = if self.v.id == u.id {
            self.code.clone()
        } else {
            LTerm::lin_let(&self.v, LTerm::var(u), self.code.clone())
        };
        self.remat.iter().rev().fold(code, |acc, (p, e, s)| {
            LTerm::new(LTermKind::Let(p.clone(), e.clone(), acc), *s)
        })
    }
}

/// `caseSplit` on the body of an array's element, `let bs in case ..` or `let bs in let p =
/// case .. in (a, b)`: the same with the `case` split, if it splits.
pub(super) fn split_tail(body: &Term) -> Option<Term> {
    use super::fuse::{lets_of, wrap_lets};
    let (mut lets, core) = lets_of(body);
    let core = match &core.kind {
        TermKind::Case(..) => case_split(core)?,
        TermKind::Pair(..) => {
            let (p, e, s) = lets.pop()?;
            Term::new(TermKind::Let(p.clone(), case_split(e)?, core.clone()), s)
        }
        _ => return None,
    };
    Some(wrap_lets(&lets, core))
}

/// `caseSplit` on `t`, if it is a `case` whose branches are pairs of a value and a linear
/// closure (after lets).
pub(super) fn case_split(t: &Term) -> Option<Term> {
    let TermKind::Case(s, p, a, q, b) = &t.kind else {
        return None;
    };
    let (ba, bb) = (Branch::of(p, a)?, Branch::of(q, b)?);
    let ty = types::ty(t)?;
    let (value_ty, _) = ty.as_prod()?;
    let (ta, tb) = (&ba.tape, &bb.tape);
    let u = ba.v.clone();
    let value_case = |s: &Term, p: &Pat, q: &Pat, va: Term, vb: Term| {
        Term::new(
            TermKind::Case(s.clone(), p.clone(), va, q.clone(), vb),
            t.span,
        )
    };
    let map = |s: &Term, p: Pat, q: Pat| {
        let l = LTerm::new(
            LTermKind::Case(
                s.clone(),
                Box::new(p),
                ba.code_at(&u),
                Box::new(q),
                bb.code_at(&u),
            ),
            t.span,
        );
        Term::new(TermKind::LinLam(u.clone(), l), t.span)
    };
    let pair = |x: Term, f: Term| Term::new(TermKind::Pair(x, f), ba.pair_span);
    if ta.is_empty() && tb.is_empty() {
        // The direct form: the scrutinee is the whole tape.
        let (sv, bind) = if matches!(s.kind, TermKind::Var(_)) {
            (s.clone(), None)
        } else {
            let x = Var::fresh("s", types::ty(s)?);
            (Term::var(&x), Some(x))
        };
        let values = value_case(
            &sv,
            p,
            q,
            ba.wrap(ba.value.clone()),
            bb.wrap(bb.value.clone()),
        );
        let out = pair(values, map(&sv, p.clone(), q.clone()));
        return Some(match bind {
            Some(x) => Term::new(TermKind::Let(Pat::Var(x), s.clone(), out), t.span),
            None => out,
        });
    }
    // The tape form: the branch's value and the variables its map needs (of the pattern and
    // of the lets), in a sum.
    let stored = |b: &Branch| b.params.iter().chain(&b.tape).cloned().collect::<Vec<_>>();
    let ((ea, pa), (eb, pb)) = (tuple_of(&stored(&ba)), tuple_of(&stored(&bb)));
    let (la, lb) = (
        Ty::prod(value_ty.clone(), pa.ty()),
        Ty::prod(value_ty.clone(), pb.ty()),
    );
    let tape = Var::fresh("t", Ty::sum(la.clone(), lb.clone()));
    let inl = Term::mk(TermKind::Inl(Term::pair(ba.value.clone(), ea), lb.clone()));
    let inr = Term::mk(TermKind::Inr(la.clone(), Term::pair(bb.value.clone(), eb)));
    let made = value_case(s, p, q, ba.wrap(inl), bb.wrap(inr));
    let tv = Term::var(&tape);
    let z = |side: &Ty, tape_pat: &Pat| {
        let zv = Var::fresh("z", value_ty.clone());
        let pat = Pat::Pair(
            Box::new(Pat::Var(zv.clone())),
            Box::new(Pat::Wild(tape_pat.ty())),
        );
        debug_assert_eq!(pat.ty(), *side);
        (pat, Term::var(&zv))
    };
    let ((za, va), (zb, vb)) = (z(&la, &pa), z(&lb, &pb));
    let values = value_case(&tv, &za, &zb, va, vb);
    let rebind = |p: Pat| Pat::Pair(Box::new(Pat::Wild(value_ty.clone())), Box::new(p));
    let out = pair(values, map(&tv, rebind(pa), rebind(pb)));
    Some(Term::new(TermKind::Let(Pat::Var(tape), made, out), t.span))
}
