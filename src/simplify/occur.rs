//! Occurrence analysis: how often, and where, each bound variable of a target term occurs.
//!
//! The simplifier inlines a `let` only when that cannot duplicate work (`letInline`): the bound
//! term is cheap, or its variable occurs at most once and not under a λ that the binding is
//! outside of (a λ body may run many times, so moving a computation into it could multiply its
//! cost; moving a λ *value* in is fine). This module computes exactly that information for every
//! binder of a term, in one linear pass, before each simplifier pass.
//!
//! "Under a λ" counts every form whose body may run a number of times not fixed by the enclosing
//! code: Cartesian `\x ->`, linear `λ̲v.`, the power `\b -> l` and the linear `lbuild` body
//! (`map`, `map2`, `build`, `copowfold` and `zipWith` take Cartesian λs, which count as such).
//! Branches of `if` and `case` do not count: each runs at most once per run of the enclosing code.
//! They are recorded separately (`under_branch`): a computation that may fail must not move into
//! a branch, where it would run only if the branch is taken (the language is strict).

use super::table::IdTable;
use crate::target::term::{LTerm, LTermKind, Pat, Term, TermKind, VarId};

/// What is known about one bound variable's occurrences.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Occ {
    /// Number of occurrences (saturating).
    pub count: u32,
    /// Whether some occurrence is under a λ that does not also enclose the binder.
    pub under_lambda: bool,
    /// Whether some occurrence is in a branch of an `if` or `case` that does not also enclose
    /// the binder.
    pub under_branch: bool,
    /// Occurrences as the array of `map (\r -> fst r) x` or `map (\r -> snd r) x` (the only
    /// uses `mapPairSplit` can serve).
    pub map_proj: u32,
    /// Occurrences as a component of a let-bound pair, `let y = (x, b)` or `let y = (a, x)`
    /// (Cartesian or linear). `letPairSplit` binds non-atomic components of such pairs to
    /// variables; inlining one back would only be split out again, so such an occurrence does
    /// not count as "used once" for `letInline`.
    pub pair_component: u32,
    /// Occurrences as the function of an application `x a` (`letLamPairSplit` splits only
    /// functions used nowhere else, so it never has to rebuild the pair-valued function).
    pub applied: u32,
    /// The depth of the binder: λs enclosing it (high half) and branches (low half), for
    /// computing `under_lambda` and `under_branch`.
    depth: u64,
    /// Whether the variable is bound in the analysed term (a table entry exists for every
    /// identity in its window).
    bound: bool,
}

impl Occ {
    /// Whether the variable is bound in the analysed term.
    pub fn bound(&self) -> bool {
        self.bound
    }

    /// Whether inlining the bound term at its occurrences cannot duplicate work: exactly one
    /// occurrence, and that one not under a λ unless the bound term is itself a value. (No
    /// occurrence at all is `deadLet`'s business.) Nor in a branch unless `total()` says the
    /// bound term cannot fail (asked only then).
    pub fn inline_once(&self, value: bool, total: impl FnOnce() -> bool) -> bool {
        self.count == 1
            && self.pair_component == 0
            && (value || !self.under_lambda)
            && (value || !self.under_branch || total())
    }
}

/// A table entry holding an [`Occ`] (the simplifier's per-variable record holds one, so the
/// analysis fills the pass's table directly).
pub(super) trait OccEntry: Default {
    fn occ(&self) -> &Occ;
    fn occ_mut(&mut self) -> &mut Occ;
}

impl OccEntry for Occ {
    fn occ(&self) -> &Occ {
        self
    }
    fn occ_mut(&mut self) -> &mut Occ {
        self
    }
}

/// The occurrences of every variable bound in a term (variables free in it are absent).
#[allow(private_bounds)]
pub struct Occurrences<T: OccEntry = Occ> {
    map: IdTable<T>,
    binders: usize,
    duplicates: bool,
}

impl Occurrences {
    /// Analyses a Cartesian term.
    pub fn of(t: &Term) -> Occurrences {
        Occurrences::analyse(t)
    }
}

#[allow(private_bounds)]
impl<T: OccEntry> Occurrences<T> {
    /// Analyses a Cartesian term into a table of `T`s.
    pub(super) fn analyse(t: &Term) -> Occurrences<T> {
        let mut o = Occurrences {
            map: IdTable::new(),
            binders: 0,
            duplicates: false,
        };
        o.run(t);
        o
    }

    /// The table of occurrences (an entry for every identity in its window; those of variables
    /// not bound in the term read as not bound).
    pub(super) fn into_table(self) -> IdTable<T> {
        self.map
    }

    /// Whether some variable is bound twice in the analysed term (then the counts of the two
    /// binders are merged, and the simplifier must first make binders unique).
    pub fn has_duplicates(&self) -> bool {
        self.duplicates
    }

    /// The number of binders in the analysed term (for sizing tables).
    pub fn binders(&self) -> usize {
        self.binders
    }

    /// What is known about a variable bound in the analysed term; `None` for variables made
    /// after the analysis (or free in the term).
    pub fn get(&self, v: VarId) -> Option<Occ> {
        self.map.get(v).map(|e| *e.occ()).filter(|o| o.bound)
    }

    fn bind(&mut self, v: VarId, depth: u64) {
        let o = self.map.slot(v).occ_mut();
        if o.bound {
            self.duplicates = true;
        } else {
            self.binders += 1;
        }
        o.bound = true;
        o.depth = depth;
    }

    /// The entry of a bound variable, to count an occurrence in.
    #[inline]
    fn entry(&mut self, v: VarId) -> Option<&mut Occ> {
        self.map.get_mut(v).map(T::occ_mut).filter(|o| o.bound)
    }

    fn bind_pat(&mut self, p: &Pat, depth: u64) {
        crate::deep::deep(|| match p {
            Pat::Var(x) => self.bind(x.id, depth),
            Pat::Wild(_) => {}
            Pat::Pair(a, b) => {
                self.bind_pat(a, depth);
                self.bind_pat(b, depth);
            }
        })
    }

    /// Counts the variables that are components of `let x = (a, b)`.
    fn let_bound_pair(&mut self, p: &Pat, e: &Term) {
        if let (Pat::Var(_), TermKind::Pair(a, b)) = (p, &e.kind) {
            for c in [a, b] {
                if let TermKind::Var(v) = &c.kind {
                    self.pair_component(v.id);
                }
            }
        }
    }

    fn pair_component(&mut self, v: VarId) {
        if let Some(o) = self.entry(v) {
            o.pair_component = o.pair_component.saturating_add(1);
        }
    }

    fn occur(&mut self, v: VarId, depth: u64) {
        if let Some(o) = self.entry(v) {
            o.count = o.count.saturating_add(1);
            o.under_lambda |= depth >> 32 > o.depth >> 32;
            o.under_branch |= depth & BRANCHES > o.depth & BRANCHES;
        }
    }

    /// The traversal: depth first, left to right, each binder registered before the scope it
    /// binds in, on an explicit stack (one push and pop per node, no recursion).
    fn run(&mut self, t: &Term) {
        let mut work = vec![Work::C(t, 0)];
        while let Some(w) = work.pop() {
            match w {
                Work::C(t, d) => self.term(t, d, &mut work),
                Work::L(l, d) => self.linear(l, d, &mut work),
                Work::Bind(p, d) => self.bind_pat(p, d),
                Work::BindVar(v, d) => self.bind(v, d),
            }
        }
    }

    fn term<'a>(&mut self, t: &'a Term, d: u64, work: &mut Vec<Work<'a>>) {
        use TermKind as K;
        use Work::{Bind, C, L};
        match &t.kind {
            K::Var(x) => self.occur(x.id, d),
            K::Lit(_) => {}
            K::Lam(x, b) => {
                self.bind(x.id, d + LAM);
                work.push(C(b, d + LAM));
            }
            K::LinLam(v, l) => {
                self.bind(v.id, d + LAM);
                work.push(L(l, d + LAM));
            }
            K::Let(p, e, b) => {
                self.let_bound_pair(p, e);
                work.extend([C(b, d), Bind(p, d), C(e, d)]);
            }
            K::Case(e, p, a, q, b) => {
                let br = d + 1;
                work.extend([C(b, br), Bind(q, br), C(a, br), Bind(p, br), C(e, d)]);
            }
            K::App(f, a) => {
                if let K::Var(x) = &f.kind
                    && let Some(o) = self.entry(x.id)
                {
                    o.applied = o.applied.saturating_add(1);
                }
                work.extend([C(a, d), C(f, d)]);
            }
            K::Map(f, xs) => {
                if let (Some(_), K::Var(x)) = (projection(f), &xs.kind)
                    && let Some(o) = self.entry(x.id)
                {
                    o.map_proj = o.map_proj.saturating_add(1);
                }
                work.extend([C(xs, d), C(f, d)]);
            }
            K::Pair(a, b)
            | K::Build(a, b)
            | K::Index(a, b)
            | K::Replicate(a, b)
            | K::Loop(a, b, _)
            | K::LinApp(a, b) => work.extend([C(b, d), C(a, d)]),
            K::Fst(a)
            | K::Snd(a)
            | K::Inl(a, _)
            | K::Inr(_, a)
            | K::Length(a)
            | K::Fix(a, _)
            | K::LinPrim(_, a) => work.push(C(a, d)),
            K::If(a, b, c) => work.extend([C(c, d + 1), C(b, d + 1), C(a, d)]),
            K::Map2(a, b, c) => work.extend([C(c, d), C(b, d), C(a, d)]),
            K::Prim(_, args) | K::Array(_, args) => {
                work.extend(args.iter().rev().map(|a| C(a, d)));
            }
        }
    }

    fn linear<'a>(&mut self, l: &'a LTerm, d: u64, work: &mut Vec<Work<'a>>) {
        use LTermKind as K;
        use Work::{Bind, BindVar, C, L};
        match &l.kind {
            K::Var(u) => self.occur(u.id, d),
            K::Zero(_) => {}
            K::Let(p, t, b) => {
                self.let_bound_pair(p, t);
                work.extend([L(b, d), Bind(p, d), C(t, d)]);
            }
            K::LinLet(u, a, b) => {
                if let K::Pair(x, y) = &a.kind {
                    for c in [x, y] {
                        if let K::Var(v) = &c.kind {
                            self.pair_component(v.id);
                        }
                    }
                }
                work.extend([L(b, d), BindVar(u.id, d), L(a, d)]);
            }
            K::PowLam(b, body) => {
                self.bind(b.id, d + LAM);
                work.push(L(body, d + LAM));
            }
            K::Build(n, i, body) => {
                work.extend([L(body, d + LAM), BindVar(i.id, d + LAM), C(n, d)]);
            }
            K::Plus(a, b) | K::Pair(a, b) => work.extend([L(b, d), L(a, d)]),
            K::Fst(a)
            | K::Snd(a)
            | K::Inl(a, _)
            | K::Inr(_, a)
            | K::FromLeft(a)
            | K::FromRight(a)
            | K::Sum(a) => work.push(L(a, d)),
            K::App(t, a)
            | K::Copower(t, a)
            | K::CopowFold(t, a)
            | K::Replicate(t, a)
            | K::ZipWith(t, a)
            | K::Map(t, a)
            | K::Chain(t, a, ..)
            | K::Scale(t, a) => work.extend([L(a, d), C(t, d)]),
            K::PowApp(a, t) | K::Index(a, t) => work.extend([C(t, d), L(a, d)]),
            K::OneHot(n, i, a) => work.extend([L(a, d), C(i, d), C(n, d)]),
            K::Case(e, p, a, q, b) => {
                let br = d + 1;
                work.extend([L(b, br), Bind(q, br), L(a, br), Bind(p, br), C(e, d)]);
            }
        }
    }
}

/// A step of the occurrence analysis's traversal.
enum Work<'a> {
    /// Visit a Cartesian term at a depth (see [`Occ::depth`]).
    C(&'a Term, u64),
    /// Visit a linear term at a depth.
    L(&'a LTerm, u64),
    /// Register the binders of a pattern.
    Bind(&'a Pat, u64),
    /// Register a binder.
    BindVar(VarId, u64),
}

/// One more λ, in a depth.
const LAM: u64 = 1 << 32;
/// The branch part of a depth (one more branch is `+ 1`).
const BRANCHES: u64 = LAM - 1;

/// Which projection a Cartesian λ is, if it is `\r -> fst r` (`Some(true)`) or `\r -> snd r`
/// (`Some(false)`).
pub fn projection(f: &Term) -> Option<bool> {
    let TermKind::Lam(r, body) = &f.kind else {
        return None;
    };
    let (first, e) = match &body.kind {
        TermKind::Fst(e) => (true, e),
        TermKind::Snd(e) => (false, e),
        _ => return None,
    };
    matches!(&e.kind, TermKind::Var(x) if x.id == r.id).then_some(first)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::target::term::Var;
    use crate::target::types::Ty;

    #[test]
    fn counts_occurrences_and_lambdas_relative_to_the_binder() {
        let x = Var::fresh("x", Ty::Real);
        let y = Var::fresh("y", Ty::Real);
        let z = Var::fresh("z", Ty::Real);
        let dead = Var::fresh("d", Ty::Real);
        // let y = x in let d = y in (\z -> (y, z), z-free) ...
        let t = Term::let_(
            &y,
            Term::var(&x),
            Term::let_(
                &dead,
                Term::var(&y),
                Term::lam(&z, Term::pair(Term::var(&y), Term::var(&z))),
            ),
        );
        let o = Occurrences::of(&t);
        assert_eq!(o.get(x.id), None, "free variables are not tracked");
        let oy = o.get(y.id).unwrap();
        assert_eq!((oy.count, oy.under_lambda), (2, true));
        let oz = o.get(z.id).unwrap();
        assert_eq!(
            (oz.count, oz.under_lambda),
            (1, false),
            "z is bound by the λ itself"
        );
        assert_eq!(o.get(dead.id).unwrap().count, 0);
        assert!(oz.inline_once(false, || true));
        let under = Occ {
            count: 1,
            under_lambda: true,
            ..Occ::default()
        };
        assert!(!under.inline_once(false, || true));
        assert!(under.inline_once(true, || true));
    }

    #[test]
    fn recognises_projection_lambdas_and_counts_map_projections() {
        let pt = Ty::prod(Ty::Real, Ty::Int);
        let r = Var::fresh("r", pt.clone());
        let xs = Var::fresh("xs", Ty::array(pt));
        let fst = Term::lam(&r, Term::fst(Term::var(&r)));
        assert_eq!(projection(&fst), Some(true));
        let t = Term::let_(
            &xs,
            Term::var(&xs),
            Term::pair(
                Term::mk(TermKind::Map(fst, Term::var(&xs))),
                Term::mk(TermKind::Length(Term::var(&xs))),
            ),
        );
        let o = Occurrences::of(&t).get(xs.id).unwrap();
        assert_eq!((o.count, o.map_proj), (2, 1));
    }
}
