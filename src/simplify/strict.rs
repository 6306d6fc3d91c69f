//! Which terms may fail when evaluated: the simplifier never discards one of those.
//!
//! The language is strict (call by value, left to right; theory-notes/11-reliability.md): a
//! program fails wherever the evaluator says, including in a `let` whose variable is never used
//! or a pair component that is projected away. A rewrite that discards a subterm (`deadLet`,
//! `pairProj`, the zero rules, ...) is therefore allowed only when the subterm *cannot fail*;
//! otherwise the simplifier keeps it (as `let _ = e` where it would have dropped a binding) or
//! does not fire. This module decides "cannot fail", conservatively and syntactically:
//!
//! * values cannot fail: variables, literals, λs (their bodies run only when applied), linear
//!   λs, powers;
//! * a primitive application cannot fail if the primitive is declared total
//!   ([`crate::prim::Primitive::total`]: real arithmetic, comparisons, `toReal`, `sum`, ...; not
//!   integer arithmetic, `floor`, `dot`) and its arguments cannot;
//! * indexing, `map2`, applications of function values, linear maps, copowers and powers, and a
//!   `build`/`replicate` of a computed length may fail; `map` and `build` of a λ may fail if
//!   its body may;
//! * everything else (pairs, projections, injections, `let`, `if`, `case`, `length`, array
//!   literals, linear sums, pairs, scaling, ...) fails only if a part does.
//!
//! Inside *linear* terms only the Cartesian computations count: a linear operation's own checks
//! (a one-hot's index, a linear array's index) test what the primal already tested, since
//! derivative code indexes only where the primal did, and the zero rules that drop them are what
//! keeps derivative code small. Running out of memory is not a failure in this sense: an
//! optimisation may make a program need less.

use crate::target::term::{Child, LTerm, LTermKind, Term, TermKind, VarId};
use smallvec::SmallVec;

/// What is known about the context of a term that makes more of it safe.
pub trait Known {
    /// Whether the variable `f` is bound to a λ whose body cannot fail (applying it cannot).
    fn total_fn(&self, f: VarId) -> bool;
    /// Whether `xs ! i` is in range (`i` is the index of an enclosing
    /// `build (length xs) (\i -> ..)`).
    fn in_range(&self, xs: VarId, i: VarId) -> bool;
    /// Whether the integer variable `n` holds the length of an array.
    fn length(&self, n: VarId) -> bool;
    /// Whether the variable `x` stands for a term that may fail (inlined where it is used).
    fn failing(&self, x: VarId) -> bool;
}

/// Nothing known.
struct Nothing;

impl Known for Nothing {
    fn total_fn(&self, _: VarId) -> bool {
        false
    }
    fn in_range(&self, _: VarId, _: VarId) -> bool {
        false
    }
    fn length(&self, _: VarId) -> bool {
        false
    }
    fn failing(&self, _: VarId) -> bool {
        false
    }
}

/// Whether evaluating `t` may fail (conservative: `false` means it cannot).
pub fn may_fail(t: &Term) -> bool {
    fails(Child::C(t), &Nothing)
}

/// Whether evaluating the Cartesian parts of the linear term `l` may fail (see the module doc).
pub fn lmay_fail(l: &LTerm) -> bool {
    fails(Child::L(l), &Nothing)
}

/// A length that cannot be negative or too long to check: a small literal, or `length xs`.
fn safe_len(n: &Term, known: &dyn Known) -> bool {
    match &n.kind {
        TermKind::Var(v) => known.length(v.id),
        TermKind::Lit(crate::target::term::Lit::Int(k)) => {
            (0..=crate::value::MAX_ARRAY_LEN).contains(k)
        }
        TermKind::Length(_) => true,
        _ => false,
    }
}

/// What one node contributes: it may fail by itself, or it fails only if one of these parts
/// does (the bodies of values are not parts: they do not run).
pub enum Step<'a> {
    /// The node itself may fail.
    Fails,
    /// The node fails only if one of these may.
    Parts(SmallVec<[Child<'a>; 4]>),
}

/// The [`Step`] of one node (a variable counts as a value: see [`Known::failing`]).
pub fn step<'a>(c: Child<'a>, known: &dyn Known) -> Step<'a> {
    use LTermKind as L;
    use Step::{Fails, Parts};
    use TermKind as K;
    let parts = |cs: &[Child<'a>]| Parts(cs.iter().copied().collect());
    match c {
        Child::C(t) => match &t.kind {
            K::Var(x) if known.failing(x.id) => Fails,
            K::Var(_) | K::Lit(_) | K::Lam(..) | K::LinLam(..) => parts(&[]),
            K::Prim(op, args) if op.is_total() => Parts(args.iter().map(Child::C).collect()),
            K::Prim(..) => Fails,
            K::App(f, a) if matches!(&f.kind, K::Var(g) if known.total_fn(g.id)) => {
                parts(&[Child::C(a)])
            }
            K::Index(a, j)
                if matches!((&a.kind, &j.kind), (K::Var(xs), K::Var(i))
                    if known.in_range(xs.id, i.id)) =>
            {
                parts(&[])
            }
            K::App(..) | K::LinApp(..) | K::Map2(..) | K::Index(..) => Fails,
            K::LinPrim(p, a) if matches!(p.name(), "dotWith" | "scaleArray") => {
                parts(&[Child::C(a)])
            }
            K::LinPrim(..) => Fails,
            K::Map(f, xs) => match &f.kind {
                K::Lam(_, body) => parts(&[Child::C(xs), Child::C(body)]),
                K::Var(g) if known.total_fn(g.id) => parts(&[Child::C(xs)]),
                _ => Fails,
            },
            K::Build(n, f) => match &f.kind {
                K::Lam(_, body) if safe_len(n, known) => parts(&[Child::C(n), Child::C(body)]),
                _ => Fails,
            },
            K::Replicate(n, _) if !safe_len(n, known) => Fails,
            _ => Parts(t.children()),
        },
        Child::L(l) => match &l.kind {
            L::Var(_) | L::Zero(_) | L::PowLam(..) => parts(&[]),
            L::App(..) | L::CopowFold(..) | L::PowApp(..) | L::ZipWith(..) | L::Map(..) => Fails,
            L::Replicate(n, _) | L::Build(n, _, _) if !safe_len(n, known) => Fails,
            _ => Parts(l.children()),
        },
    }
}

/// Whether evaluating `root` (its Cartesian parts, for a linear term) may fail, given what is
/// `known` of its context. Walks with an explicit stack (any depth) until a node that may fail
/// by itself is found.
pub fn fails(root: Child<'_>, known: &dyn Known) -> bool {
    let mut stack = vec![root];
    while let Some(c) = stack.pop() {
        match step(c, known) {
            Step::Fails => return true,
            Step::Parts(ps) => stack.extend(ps),
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prim::op;
    use crate::target::term::{Lit, Var};
    use crate::target::types::Ty;

    #[test]
    fn values_and_total_arithmetic_cannot_fail_indexing_and_integer_division_can() {
        let x = Var::fresh("x", Ty::Real);
        let xs = Var::fresh("xs", Ty::array(Ty::Real));
        let sin_x = Term::prim(&op("sin"), vec![Term::var(&x)]);
        assert!(!may_fail(&sin_x));
        let idx = Term::mk(TermKind::Index(Term::var(&xs), Term::lit(Lit::Int(5))));
        assert!(may_fail(&idx));
        // Under a λ it is a value's body: the λ itself cannot fail.
        assert!(!may_fail(&Term::lam(&x, idx.clone())));
        let div = Term::prim(
            &op("idiv"),
            vec![Term::lit(Lit::Int(1)), Term::lit(Lit::Int(0))],
        );
        assert!(may_fail(&div));
        assert!(may_fail(&Term::pair(sin_x, div)));
    }
}
