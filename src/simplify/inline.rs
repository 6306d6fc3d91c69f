//! Inlining let-bound functions that are only ever called: `functionInline`.
//!
//! ```text
//! let f = \x -> b in e   ~>   e[(\x -> b)/f]
//!     when every occurrence of f in e is called (the function of an application, or the
//!     function argument of map, map2 or build), and the copies fit the size budget
//! ```
//!
//! The main simplifier copies only atoms, and a λ only where its variable occurs once
//! (`letInline`), so a function called in several places stays a closure. That is the right
//! default for derivative code, but it leaves the closure machinery in the *source* program
//! when it is differentiated: each call of a let-bound function becomes, in the derivative,
//! a closure call with a tape (CHAD's `R(eval)`/`R(curry)`: an allocated linear function per
//! call and a copower entry per call in reverse mode). Copying the λ to its call sites instead
//! lets `lamAppLet` β-reduce each call, and the program becomes first-order.
//!
//! **Meaning.** A λ is a value: substituting it for its variable is β-conversion of the `let`
//! (`let f = v in e = e[v/f]` for a value `v`), sound in any pure language. Variables have
//! unique identities, so no capture is possible (the input's binders are made unique first; the
//! copies share binders, which the main simplifier's pass renames: see [`super::unique`]).
//!
//! **Cost.** Copying a λ copies code, not work: a value is not evaluated by being copied, and
//! each call still runs the body once. The *code* grows, by `(uses - 1) × size` for a λ of
//! `size` nodes with `uses` call sites; [`Budget`] bounds that growth per λ and per run, so a
//! large λ used many times stays shared.
//!
//! This rule is **off** in [`super::simplify`] (it is not one of the [`super::Rules`]): it is
//! meant for source programs before AD ([`crate::optimize`]), where it turns higher-order code
//! first-order; on derivative code it is not needed (and the primal and derivative pipelines
//! are unchanged by it).
//!
//! ```
//! use chad::internals::simplify::inline::{inline_functions, Budget};
//! use chad::internals::simplify::simplify;
//! use chad::internals::target::term::{Term, Var};
//! use chad::internals::target::types::Ty;
//! use chad::internals::prim::Registry;
//!
//! // let f = \y -> y * y in f a + f b
//! let mul = Registry::builtin().get("mul").unwrap().clone();
//! let add = Registry::builtin().get("add").unwrap().clone();
//! let (a, b, y) = (Var::fresh("a", Ty::Real), Var::fresh("b", Ty::Real), Var::fresh("y", Ty::Real));
//! let f = Var::fresh("f", Ty::fun(Ty::Real, Ty::Real));
//! let sq = Term::lam(&y, Term::prim(&mul, vec![Term::var(&y), Term::var(&y)]));
//! let call = |x: &Var| Term::app(Term::var(&f), Term::var(x));
//! let t = Term::let_(&f, sq, Term::prim(&add, vec![call(&a), call(&b)]));
//!
//! assert!(simplify(&t).to_string().contains("f a")); // the simplifier keeps the closure
//! let (inlined, n) = inline_functions(&t, &Budget::default());
//! assert_eq!(n, 1);
//! assert_eq!(simplify(&inlined).to_string(), "a * a + b * b");
//! ```

use crate::deep::deep;
use crate::target::term::{Child, LTerm, Pat, Rewrite, Term, TermKind, VarId};
use rustc_hash::FxHashMap;

/// How much code `functionInline` may add.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget {
    /// The largest λ copied, in nodes ([`Term::size`]).
    pub max_size: usize,
    /// The most nodes the copies of one λ may add: `(uses - 1) × size`.
    pub max_growth: usize,
    /// The most nodes one run ([`inline_functions`]) may add in all.
    pub max_total_growth: usize,
}

impl Default for Budget {
    /// λs of up to 200 nodes, adding at most 1000 nodes each and 20000 in all: every
    /// helper function of the examples and benchmarks fits, while a term cannot grow by more
    /// than a constant.
    fn default() -> Budget {
        Budget {
            max_size: 200,
            max_growth: 1000,
            max_total_growth: 20_000,
        }
    }
}

/// Inlines every let-bound λ all of whose occurrences are calls, within `budget`: the new term
/// and how many bindings were inlined. The copies are not β-reduced here: [`super::simplify`]
/// does that (`lamAppLet`) and renames their binders. Free variables stay free.
pub fn inline_functions(t: &Term, budget: &Budget) -> (Term, usize) {
    let t = super::unique::uniquify(t);
    let mut i = Inliner {
        uses: count_uses(&t),
        sub: FxHashMap::default(),
        budget: *budget,
        grown: 0,
        fired: 0,
    };
    let out = i.term(&t);
    (out, i.fired)
}

/// Occurrences of a variable: all of them, and those that are calls.
#[derive(Clone, Copy, Default)]
struct Uses {
    all: usize,
    calls: usize,
}

/// The head variable of a function position, if it is one.
fn var_id(f: &Term) -> Option<VarId> {
    match &f.kind {
        TermKind::Var(x) => Some(x.id),
        _ => None,
    }
}

/// Counts every Cartesian variable's occurrences and calls in `t` (iteratively).
fn count_uses(t: &Term) -> FxHashMap<VarId, Uses> {
    let mut uses: FxHashMap<VarId, Uses> = FxHashMap::default();
    let mut stack = vec![Child::C(t)];
    while let Some(c) = stack.pop() {
        match c {
            Child::C(t) => {
                let called = match &t.kind {
                    TermKind::Var(x) => {
                        uses.entry(x.id).or_default().all += 1;
                        None
                    }
                    TermKind::App(f, _)
                    | TermKind::Map(f, _)
                    | TermKind::Map2(f, _, _)
                    | TermKind::Build(_, f) => var_id(f),
                    _ => None,
                };
                if let Some(f) = called {
                    uses.entry(f).or_default().calls += 1;
                }
                stack.extend(t.children());
            }
            Child::L(l) => stack.extend(l.children()),
        }
    }
    uses
}

struct Inliner {
    uses: FxHashMap<VarId, Uses>,
    /// The inlined functions, by variable.
    sub: FxHashMap<VarId, Term>,
    budget: Budget,
    /// Nodes added so far.
    grown: usize,
    /// Bindings inlined so far.
    fired: usize,
}

impl Inliner {
    /// Whether to inline `f`, bound to the (already rewritten) λ `value`; books the growth.
    fn decide(&mut self, f: VarId, value: &Term) -> bool {
        let Some(u) = self.uses.get(&f).copied() else {
            return false; // dead: the simplifier's business
        };
        if u.all == 0 || u.calls != u.all {
            return false;
        }
        let size = value.size();
        let growth = size.saturating_mul(u.all - 1);
        if size > self.budget.max_size
            || growth > self.budget.max_growth
            || self.grown.saturating_add(growth) > self.budget.max_total_growth
        {
            return false;
        }
        self.grown += growth;
        self.fired += 1;
        true
    }

    fn term(&mut self, t: &Term) -> Term {
        deep(|| match &t.kind {
            TermKind::Var(x) => self.sub.get(&x.id).cloned().unwrap_or_else(|| t.clone()),
            TermKind::Let(Pat::Var(f), e, body) if matches!(e.kind, TermKind::Lam(..)) => {
                let e = self.term(e);
                if self.decide(f.id, &e) {
                    self.sub.insert(f.id, e);
                    self.term(body)
                } else {
                    let body = self.term(body);
                    Term::new(TermKind::Let(Pat::Var(f.clone()), e, body), t.span)
                }
            }
            _ => t.map_children(self),
        })
    }
}

impl Rewrite for Inliner {
    fn term(&mut self, t: &Term) -> Term {
        Inliner::term(self, t)
    }
    fn linear(&mut self, l: &LTerm) -> LTerm {
        deep(|| l.map_children(self))
    }
}
