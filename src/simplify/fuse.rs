//! Array fusion rules: closure conversion of arrays of linear closures, and the
//! linear-algebra laws of `lsum`/`lbuild`/`onehot`.
//!
//! These rules run as a pass of their own ([`run`]), between the fixed points of the main pass
//! ([`super::pass`]), which cleans up what they produce (it inlines the bindings they introduce,
//! projects the pairs, drops the dead lets). Each rule is an identity of the target language,
//! independent of where the term came from:
//!
//! * `closureConvert` (defunctionalisation). An array of pairs whose second components are
//!   linear closures, `rs = build n (\i -> let bs in (a, λ̲v. l))` (or `map (\y -> ..) xs`, or
//!   `map2 (\y -> \z -> ..) xs ys`), every use of which is `map (\r -> fst r) rs`,
//!   `fst (rs ! j)`, `length rs`, `snd (rs ! j) • l'` or `zipWith (map (\r -> snd r) rs) w`,
//!   stores the closure's *environment* instead: the variables free in `λ̲v. l` that are bound
//!   inside the element (by `bs`, or the map's parameters) form a tuple `cs`. The index `i` of a
//!   `build` is not stored: element `j` was built with `i = j`. The uses become
//!   `snd (rs ! j) • l' ~> let i = j in let cs = snd (rs ! i) in let v = l' in l` and
//!   `zipWith (map snd rs) w ~> lbuild n (\i -> let cs = snd (rs ! i) in let v = w ! i in l)`
//!   (with `n` the build's length when it is cheap, else `length rs`; `w ! i` is the replicated
//!   element when `w = replicate m l''` of an atom `l''`, and `w` is bound once outside the
//!   `lbuild` otherwise). Meaning: a closure is its code and its environment, and applying it
//!   is running the code in the environment; the code `l` is the same for every element, so it
//!   moves to the use. A Cartesian λ̲ has no free linear variables (the checker enforces it), so
//!   `l`'s only linear variable is `v`. Building a tuple of variables cannot fail, and the
//!   language is pure. Cost: per element a tuple instead of a closure; per use the closure's
//!   body, as before. An array of *bare* closures, `rs = map (\y -> λ̲v. l) xs` (no first
//!   components), used as `rs ! j • l'` and `zipWith rs w`, is converted the same way: its
//!   elements become the environments alone, and the uses read `rs ! j` for `snd (rs ! j)`.
//!   Bindings of the element that are cheap to evaluate again (an index of an atom, up to three
//!   additions, subtractions, multiplications, negations or comparisons of atoms and such
//!   indices, and `decide` of a comparison; integer index arithmetic, up to twelve integer
//!   `+ - * /` and negations of atoms and lengths of atoms; a map's
//!   parameter, as `xs ! j`) are recomputed at the use instead of stored, when their inputs are
//!   outside the element, recomputed themselves, or stored anyway: the residual tuple of
//!   Rosenbrock's derivative shrinks from five reals to none.
//!   *Carried closures* (the tape of a loop). The array of closures may instead be bound inside
//!   the element of an outer array and returned as a component of the element's tuple,
//!   `rs = build m (\k -> let bs' in let rs1 = build n (\i -> ..) in let bs'' in (.., rs1, ..))`
//!   (or `map`/`map2`, at any depth: `rs1` may itself carry the closure array in the same way).
//!   Then its uses inside the element must be of the forms above, and every use of the outer
//!   array is `map fst rs`, `length rs`, a projection of `rs ! j` away from that component, or
//!   `let p = proj (rs ! j) in body` where `p` binds the component to a variable `r` (whose uses
//!   in `body` are of the forms above, or, one level up, of these) or to nothing. The component
//!   becomes `(rs1', ks)`: the array of environments and the variables `ks` bound in the outer
//!   element (by `bs'`, the map's parameters, the build's index) that the code (or a recomputed
//!   binding, or the cheap length) reads, since they are not in scope at the use; `p` binds
//!   `(r', ks)` there, and the uses of `r` are rewritten as above. Meaning: the component was
//!   the array of closures of element `j`; it becomes that element's environments plus what
//!   the code reads from element `j`, the same values. Cost: per outer element a tuple of
//!   `ks` (variables) more, per inner element a tuple instead of a closure. One carried array
//!   is converted per outer `let` and round ([`Nest`]); the next round takes the next. A
//!   closure array written straight into the element's tuple (a `let` used once, inlined by
//!   the main pass) is first bound to a variable again ([`hoist_closures`]).
//! * `caseSplit` (`src/simplify/split.rs`): the element of such an array whose pair is chosen by
//!   a `case` (the derivative of an `if`) becomes a pair of the chosen value and one λ̲ over a
//!   linear `case`, so that `closureConvert` applies in the next round.
//! * `sndUnused`: an array of pairs whose second components nobody reads keeps only the first
//!   (`map (\r -> fst r) (build n (\i -> let bs in (a, b))) ~> build n (\i -> let bs in a)`,
//!   and a let-bound array used only through `map fst`, `fst (rs ! j)` and `length`). What
//!   closure conversion leaves is often `(a, ())`. Likewise a component of the elements'
//!   tuples that no use reads: for `rs = build n (\i -> let bs in t)` (or `map`, `map2`) with a
//!   variable at a path of `t`, when every `let p = proj (rs ! j)` binds nothing there and
//!   every other use reads other components (as for carried closures, above), the component
//!   becomes `()` (the patterns' `_` change type; every such component is tried, since a use
//!   further out may read one that the element does not; an array of units `map (\y -> ())
//!   xs` of an atom counts as a variable here); also in the elements of an array that `rs`'s
//!   elements carry, at any depth (a [`Nest`] whose innermost step drops the component instead
//!   of converting closures). A variable cannot fail, so dropping it discards no error; a
//!   loop's tape no longer holds the arrays that closure conversion made unused (the outer
//!   closure's environment held them), and those arrays become plain arrays in turn.
//! * `caseProj`: `fst (case e of inl p -> a | inr q -> b) ~> case e of inl p -> fst a | inr q ->
//!   fst b` (and `snd`, `if`, and `let (x, _) = case ..`): a projection commutes with a
//!   branch. The derivative of a branch is a pair of the value and a linear closure; when only
//!   the value is used (comparisons inside a loop), no closure is built per evaluation.
//! * `sumBuildProj`: `fst (lsum (lbuild n (\j -> l))) ~> lsum (lbuild n (\j -> fst l))` (and
//!   `snd`): `fst` is linear, so it commutes with a sum.
//! * `sumBuildSplit`: `lsum (lbuild n (\j -> let bs in (l1, l2))) ~> (lsum (lbuild n (\j -> let
//!   bs1 in l1)), lsum (lbuild n (\j -> let bs2 in l2)))`, and the same for `l1 + l2` (when a
//!   summand is a `onehot`, so that `sumBuildOneHot` can fire on it): a sum of pairs is the pair
//!   of the sums, and the sum of a sum is the sum of the sums. `bs1` and `bs2` are the bindings
//!   each half needs. A binding both need is copied only if it is *cheap* (an atom, an index of
//!   an atom by an atom, a small scaling or sum of linear atoms), so the work per element grows
//!   by a constant at most; otherwise the rule does not fire. `n` is bound to a variable first
//!   unless it is cheap.
//! * `sumBuildOneHot`: `lsum (lbuild n (\j -> let bs in onehot m j l)) ~> lbuild n (\j -> let bs
//!   in l)` when `m` is provably `n`: syntactically equal after unfolding let-bound lengths
//!   (`let k = length xs`) and the lengths of let-bound arrays (`length rs` for
//!   `rs = build n f` is `n`, for `rs = map f xs` it is `length xs`). The index of each one-hot is
//!   the lbuild's own `j`, which ranges over `0..n`, so no one-hot is out of range and each
//!   position `j` receives exactly `l`. (If evaluating `m` would fail, the result no longer
//!   does: like `deadLet`, the rule may discard an error, never introduce one.) Through a
//!   linear `case` too: `lsum (lbuild n (\j -> case s of inl p -> onehot m j l | inr q -> 0))
//!   ~> lbuild n (\j -> case s of inl p -> l | inr q -> 0)` (each branch a one-hot at `j` or
//!   zero, after its lets): each position still receives its own branch's element.
//! * `plusOneHot`: `onehot m i a + onehot m' i' b ~> onehot m i (a + b)` when `m`, `m'` and
//!   `i`, `i'` are provably equal (as above); the one-hots of a `+`-tree with equal lengths and
//!   indices are gathered into one. `onehot` is linear in its element. The sum is reassociated,
//!   so the result can differ in the last bits of floating point.
//!
//! The pass may copy binders (the closure's body at every use, the bindings of both halves of a
//! split); the main pass renames repeated binders first ([`super::unique`]). It does not look
//! into what it has just rewritten: the next round does.

use super::Rules;
use super::occur::{Occurrences, projection};
use crate::deep::deep;
use crate::error::Span;
use crate::target::term::{LTerm, LTermKind, Lit, Pat, Rewrite, Term, TermKind, Var, VarId};
use crate::target::types::Ty;
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use std::collections::BTreeMap;

/// Runs the fusion rules once over `t`: the output, and how often each rule fired.
pub(super) fn run(t: &Term, rules: &Rules) -> (Term, BTreeMap<&'static str, usize>) {
    let mut fired = BTreeMap::new();
    if !(rules.closure_convert
        || rules.snd_unused
        || rules.case_proj
        || rules.case_split
        || rules.sum_build_proj
        || rules.sum_build_split
        || rules.sum_build_one_hot
        || rules.plus_one_hot
        || rules.map_cse
        || rules.build_proj)
    {
        return (t.clone(), fired);
    }
    // The input is a main pass's output, whose binders are unique.
    debug_assert!(!Occurrences::of(t).has_duplicates());
    let mut f = Fuse {
        rules,
        fired: &mut fired,
        lens: HashMap::default(),
        alens: HashMap::default(),
        maps: Vec::new(),
    };
    let out = f.term(t);
    (out, fired)
}

/// Whether `t` holds a `caseProj` redex: `fst`/`snd` of a `case` or an `if`, or `let (x, _) =`
/// (or `(_, x)`) of one. On a term without array forms ([`super::pass`]'s `arrays`) this is the
/// only rule [`run`] could fire, and a read-only look is much cheaper than a run that rebuilds
/// nothing (≈ 65 ms on the 10⁴-line straight-line derivative, whose `max` gives `if`s).
pub(super) fn case_proj_redex(t: &Term) -> bool {
    use crate::target::term::Child;
    let branch = |e: &Term| matches!(e.kind, TermKind::Case(..) | TermKind::If(..));
    let mut stack = vec![Child::C(t)];
    while let Some(c) = stack.pop() {
        match c {
            Child::C(t) => {
                match &t.kind {
                    TermKind::Fst(e) | TermKind::Snd(e) if branch(e) => return true,
                    TermKind::Let(Pat::Pair(p1, p2), e, _)
                        if branch(e)
                            && (matches!(**p1, Pat::Wild(_)) || matches!(**p2, Pat::Wild(_))) =>
                    {
                        return true;
                    }
                    _ => {}
                }
                stack.extend(t.children());
            }
            Child::L(l) => stack.extend(l.children()),
        }
    }
    false
}

struct Fuse<'r> {
    rules: &'r Rules,
    fired: &'r mut BTreeMap<&'static str, usize>,
    /// Int variables let-bound to a cheap length expression.
    lens: HashMap<VarId, Term>,
    /// The lengths of let-bound arrays, when cheap.
    alens: HashMap<VarId, Term>,
    /// `mapCse`: the maps of a primitive over an atom whose `let` is in scope, innermost last.
    maps: Vec<MapFact>,
}

/// `let r = map (\b -> p args) xs` in scope, with `xs` an atom and `args` atoms (`b` among
/// them, and atoms bound outside the map).
struct MapFact {
    xs: String,
    r: Var,
    op: crate::prim::Prim,
    args: Vec<Term>,
    b: Var,
}

impl MapFact {
    /// The fact `let r = e` states, if `e` is such a map.
    fn of(p: &Pat, e: &Term) -> Option<MapFact> {
        let Pat::Var(r) = p else { return None };
        let TermKind::Map(f, xs) = &e.kind else {
            return None;
        };
        let (b, body) = lam_body(f)?;
        let TermKind::Prim(op, args) = &body.kind else {
            return None;
        };
        // Every argument an atom, and one mentioning `b` is `b` itself (so that matching an
        // argument is syntactic equality or the parameter).
        let param = |t: &Term| matches!(&t.kind, TermKind::Var(v) if v.id == b.id);
        if !args
            .iter()
            .all(|t| param(t) || (is_atomic(t) && !vars_of_term(t).contains(&b.id)))
            || !args.iter().any(param)
        {
            return None;
        }
        Some(MapFact {
            xs: key(xs)?,
            r: r.clone(),
            op: op.clone(),
            args: args.clone(),
            b: b.clone(),
        })
    }

    /// Whether `t` is `p args` with the parameter `a` for `b`.
    fn matches(&self, t: &Term, a: &Var) -> bool {
        let TermKind::Prim(op, args) = &t.kind else {
            return false;
        };
        op.name() == self.op.name()
            && args.len() == self.args.len()
            && args.iter().zip(&self.args).all(|(x, y)| match &y.kind {
                TermKind::Var(v) if v.id == self.b.id => {
                    matches!(&x.kind, TermKind::Var(u) if u.id == a.id)
                }
                _ => Term::syn_eq(x, y),
            })
    }
}

/// Replaces the applications a [`MapFact`] describes (at the parameter `a`) by `t`.
struct MapCse<'a> {
    fact: &'a MapFact,
    a: &'a Var,
    t: &'a Var,
    hit: bool,
}

impl Rewrite for MapCse<'_> {
    fn term(&mut self, t: &Term) -> Term {
        if self.fact.matches(t, self.a) {
            self.hit = true;
            return Term::new(TermKind::Var(self.t.clone()), t.span);
        }
        super::pass::map_shared(t, self)
    }

    fn linear(&mut self, l: &LTerm) -> LTerm {
        super::pass::lmap_shared(l, self)
    }
}

impl Fuse<'_> {
    fn fire(&mut self, rule: &'static str) {
        *self.fired.entry(rule).or_default() += 1;
    }

    /// `mapCse` on `map (\a -> body) xs`: with `let r = map (\b -> p b) xs` in scope (the same
    /// atom `xs`), `map2 (\a -> \t -> body[t/p a]) xs r`, or `r` itself when `body` is `p a`.
    fn map_cse(&mut self, m: &Term) -> Option<Term> {
        let TermKind::Map(f, xs) = &m.kind else {
            return None;
        };
        let (a, body) = lam_body(f)?;
        let k = key(xs)?;
        let mut out = None;
        // (The fact's own map, met as the `let`'s bound term, binds the same parameter.)
        for fact in self
            .maps
            .iter()
            .rev()
            .filter(|fact| fact.xs == k && fact.b.id != a.id)
        {
            if fact.matches(body, a) {
                out = Some(Term::new(TermKind::Var(fact.r.clone()), m.span));
                break;
            }
            let elem = fact.r.ty.as_array()?.clone();
            let t = Var::fresh("t", elem);
            let mut r = MapCse {
                fact,
                a,
                t: &t,
                hit: false,
            };
            let body2 = r.term(body);
            if r.hit {
                let r_var = Term::new(TermKind::Var(fact.r.clone()), m.span);
                let inner = Term::new(TermKind::Lam(t, body2), f.span);
                let g = Term::new(TermKind::Lam(a.clone(), inner), f.span);
                out = Some(Term::new(TermKind::Map2(g, xs.clone(), r_var), m.span));
                break;
            }
        }
        if out.is_some() {
            self.fire("mapCse");
        }
        out
    }

    /// Records what is known about the length of `x = e`.
    fn learn(&mut self, p: &Pat, e: &Term) {
        let Pat::Var(x) = p else { return };
        match &e.kind {
            TermKind::Length(_) | TermKind::Var(_) if cheap(e) && x.ty == Ty::Int => {
                self.lens.insert(x.id, e.clone());
            }
            TermKind::Build(n, _) | TermKind::Replicate(n, _) if cheap(n) => {
                self.alens.insert(x.id, n.clone());
            }
            TermKind::Map(_, xs) | TermKind::Map2(_, xs, _) if cheap(xs) => {
                self.alens
                    .insert(x.id, Term::mk(TermKind::Length(xs.clone())));
            }
            _ => {}
        }
    }

    /// The normal form of a length expression: let-bound lengths unfolded.
    fn norm(&self, t: &Term) -> Term {
        let mut t = t.clone();
        for _ in 0..64 {
            let next = match &t.kind {
                TermKind::Var(x) => self.lens.get(&x.id).cloned(),
                TermKind::Length(a) => match &a.kind {
                    TermKind::Var(x) => self.alens.get(&x.id).cloned(),
                    _ => None,
                },
                _ => None,
            };
            match next {
                Some(n) => t = n,
                None => break,
            }
        }
        t
    }

    fn same(&self, a: &Term, b: &Term) -> bool {
        Term::syn_eq(a, b) || Term::syn_eq(&self.norm(a), &self.norm(b))
    }

    /// `closureConvert` on `let rs = e in scope` (with `unread`, `sndUnused` on a component no
    /// use reads), if its rule is on and it applies: the new variable, its definition, and the
    /// [`Nest`] whose [`Nest::convert`] rewrites the scope.
    fn nest(
        &mut self,
        rs: &Var,
        e: &Term,
        scope: Scope<'_>,
        unread: bool,
    ) -> Option<(Var, Term, Nest)> {
        let (on, rule) = if unread {
            (self.rules.snd_unused, "sndUnused")
        } else {
            (self.rules.closure_convert, "closureConvert")
        };
        if !on {
            return None;
        }
        let n = Nest::analyse(rs, e, scope, unread)?;
        self.fire(rule);
        let (rs2, e2) = n.converted_array(rs, e);
        Some((rs2, e2, n))
    }
}

impl Rewrite for Fuse<'_> {
    fn term(&mut self, t: &Term) -> Term {
        deep(|| {
            let fact = match &t.kind {
                TermKind::Let(p, e, _) if self.rules.map_cse => MapFact::of(p, e),
                _ => None,
            };
            let Some(fact) = fact else {
                return self.term_(t);
            };
            // In scope in the `let`'s body only.
            let depth = self.maps.len();
            self.maps.push(fact);
            let out = self.term_(t);
            self.maps.truncate(depth);
            out
        })
    }

    fn linear(&mut self, l: &LTerm) -> LTerm {
        deep(|| {
            let fact = match &l.kind {
                LTermKind::Let(p, e, _) if self.rules.map_cse => MapFact::of(p, e),
                _ => None,
            };
            let Some(fact) = fact else {
                return self.linear_(l);
            };
            let depth = self.maps.len();
            self.maps.push(fact);
            let out = self.linear_(l);
            self.maps.truncate(depth);
            out
        })
    }
}

impl Fuse<'_> {
    fn term_(&mut self, t: &Term) -> Term {
        if self.rules.map_cse
            && !self.maps.is_empty()
            && let Some(t2) = self.map_cse(t)
        {
            return self.term(&t2);
        }
        deep(|| match &t.kind {
            TermKind::Let(p, e, body) => {
                // A projection moves into the branches first, so that `caseSplit` does not
                // split a branch whose linear map nobody uses.
                if self.rules.case_proj
                    && let Pat::Pair(p1, p2) = p
                    && let Some((first, keep)) = match (&**p1, &**p2) {
                        (_, Pat::Wild(_)) => Some((true, p1)),
                        (Pat::Wild(_), _) => Some((false, p2)),
                        _ => None,
                    }
                    && let Some(e3) = project_branches(e, first)
                {
                    self.fire("caseProj");
                    let e3 = self.term(&e3);
                    let body2 = self.term(body);
                    return Term::new(TermKind::Let((**keep).clone(), e3, body2), t.span);
                }
                let e2 = self.term(e);
                self.learn(p, &e2);
                if let Pat::Var(rs) = p
                    && let Some((rs2, e3, c)) = self.nest(rs, &e2, Scope::C(body), false)
                {
                    let body2 = self.term(&c.convert(rs, &rs2).term(body));
                    return Term::new(TermKind::Let(Pat::Var(rs2), e3, body2), t.span);
                }
                // A closure array written straight into the elements' tuples (the main pass
                // inlines a `let` used once) is carried too: bound to a variable first, it is
                // found as above.
                if self.rules.closure_convert
                    && let Pat::Var(rs) = p
                    && let Some(e2h) = hoist_closures(rs, &e2)
                    && let Some((rs2, e3, c)) = self.nest(rs, &e2h, Scope::C(body), false)
                {
                    let body2 = self.term(&c.convert(rs, &rs2).term(body));
                    return Term::new(TermKind::Let(Pat::Var(rs2), e3, body2), t.span);
                }
                if self.rules.snd_unused
                    && let Pat::Var(rs) = p
                    && let Some((rs2, e3)) = fst_only_array(rs, &e2, Scope::C(body))
                {
                    self.fire("sndUnused");
                    let body2 = FstOnly::new(rs, &rs2).term(body);
                    let body2 = self.term(&body2);
                    return Term::new(TermKind::Let(Pat::Var(rs2), e3, body2), t.span);
                }
                if let Pat::Var(rs) = p
                    && let Some((rs2, e3, c)) = self.nest(rs, &e2, Scope::C(body), true)
                {
                    let body2 = self.term(&c.convert(rs, &rs2).term(body));
                    return Term::new(TermKind::Let(Pat::Var(rs2), e3, body2), t.span);
                }
                if self.rules.case_split
                    && let Pat::Var(_) = p
                    && let Some(e3) = map_body(&e2, super::split::split_tail)
                {
                    self.fire("caseSplit");
                    let body2 = self.term(body);
                    return Term::new(TermKind::Let(p.clone(), e3, body2), t.span);
                }
                let body2 = self.term(body);
                super::pass::reuse(t, TermKind::Let(p.clone(), e2, body2))
            }
            TermKind::Map(f, xs) if self.rules.snd_unused && projection(f) == Some(true) => {
                let xs2 = self.term(xs);
                match fst_of_elements(&xs2) {
                    Some(r) => {
                        self.fire("sndUnused");
                        r
                    }
                    None => Term::new(TermKind::Map(f.clone(), xs2), t.span),
                }
            }
            TermKind::Fst(e) | TermKind::Snd(e)
                if self.rules.case_proj
                    && matches!(e.kind, TermKind::Case(..) | TermKind::If(..)) =>
            {
                self.fire("caseProj");
                let first = matches!(t.kind, TermKind::Fst(_));
                let r = project_branches(e, first).expect("a case or an if");
                self.term(&r)
            }
            TermKind::Fst(e) if self.rules.snd_unused && matches!(e.kind, TermKind::Index(..)) => {
                let TermKind::Index(xs, j) = &e.kind else {
                    unreachable!("matched above")
                };
                let (xs2, j2) = (self.term(xs), self.term(j));
                match fst_of_elements(&xs2) {
                    Some(r) => {
                        self.fire("sndUnused");
                        Term::new(TermKind::Index(r, j2), e.span)
                    }
                    None => Term::new(
                        TermKind::Fst(Term::new(TermKind::Index(xs2, j2), e.span)),
                        t.span,
                    ),
                }
            }
            _ => super::pass::map_shared(t, self),
        })
    }

    fn linear_(&mut self, l: &LTerm) -> LTerm {
        deep(|| {
            use LTermKind as K;
            if self.rules.build_proj
                && let K::LinLet(cs, e, rest) = &l.kind
                && let K::Build(n, i, body) = &e.kind
                && let Some(rest2) = build_uses(cs, n, i, body, rest)
            {
                self.fire("buildProj");
                return self.linear(&rest2);
            }
            if let K::Let(p, e, body) = &l.kind {
                let e2 = self.term(e);
                self.learn(p, &e2);
                if let Pat::Var(rs) = p
                    && let Some((rs2, e3, c)) = self.nest(rs, &e2, Scope::L(body), false)
                {
                    let body2 = self.linear(&c.convert(rs, &rs2).linear(body));
                    return LTerm::new(K::Let(Pat::Var(rs2), e3, body2), l.span);
                }
                if self.rules.snd_unused
                    && let Pat::Var(rs) = p
                    && let Some((rs2, e3)) = fst_only_array(rs, &e2, Scope::L(body))
                {
                    self.fire("sndUnused");
                    let body2 = FstOnly::new(rs, &rs2).linear(body);
                    let body2 = self.linear(&body2);
                    return LTerm::new(K::Let(Pat::Var(rs2), e3, body2), l.span);
                }
                if let Pat::Var(rs) = p
                    && let Some((rs2, e3, c)) = self.nest(rs, &e2, Scope::L(body), true)
                {
                    let body2 = self.linear(&c.convert(rs, &rs2).linear(body));
                    return LTerm::new(K::Let(Pat::Var(rs2), e3, body2), l.span);
                }
                if self.rules.case_split
                    && let Pat::Var(_) = p
                    && let Some(e3) = map_body(&e2, super::split::split_tail)
                {
                    self.fire("caseSplit");
                    let body2 = self.linear(body);
                    return LTerm::new(K::Let(p.clone(), e3, body2), l.span);
                }
                let body2 = self.linear(body);
                return super::pass::lreuse(l, K::Let(p.clone(), e2, body2));
            }
            if self.rules.plus_one_hot
                && let K::Plus(..) = &l.kind
            {
                return self.plus_one_hot(l);
            }
            let l = super::pass::lmap_shared(l, self);
            match &l.kind {
                K::Fst(s) | K::Snd(s) if self.rules.sum_build_proj => {
                    if let K::Sum(b) = &s.kind
                        && let K::Build(n, j, body) = &b.kind
                    {
                        self.fire("sumBuildProj");
                        let first = matches!(l.kind, K::Fst(_));
                        let body = LTerm::new(
                            if first {
                                K::Fst(body.clone())
                            } else {
                                K::Snd(body.clone())
                            },
                            l.span,
                        );
                        let b = LTerm::new(K::Build(n.clone(), j.clone(), body), b.span);
                        return LTerm::new(K::Sum(b), s.span);
                    }
                    l
                }
                K::Sum(b) => {
                    if let K::Build(n, j, body) = &b.kind
                        && let Some(r) = self.sum_build(n, j, body, l.span, b.span)
                    {
                        return r;
                    }
                    l
                }
                _ => l,
            }
        })
    }
}

/// `buildProj` on `let lin cs = lbuild n (\i -> let bs in t) in rest`: when every use of `cs`
/// in `rest` is a projection of its sum, `P (lsum cs)`, or a map of a projection,
/// `lmap (λ̲p. P p) cs` (`P` a path of `fst`/`snd`, possibly empty), each use becomes
/// `lsum (lbuild n (\i -> let bs in P t))` or `lbuild n (\i -> let bs in P t)`, and `0` where
/// `P t` is a literal zero of `t`'s tuple. More than one use that is not zero copies `bs` and
/// `n`, so they must be cheap. `None` if the rule does not apply.
fn build_uses(cs: &Var, n: &Term, i: &Var, body: &LTerm, rest: &LTerm) -> Option<LTerm> {
    let elem = cs.lin_ty()?.as_array()?.clone();
    let (bs, core) = peel(body);
    let mut r = BuildUses {
        cs: cs.id,
        elem,
        n,
        i,
        bs: &bs,
        core: &core,
        uses: 0,
        bad: false,
    };
    let out = r.linear(rest);
    if r.bad || (r.uses > 1 && !(cheap(n) && bs.iter().all(Bind::cheap))) {
        return None;
    }
    Some(out)
}

struct BuildUses<'a> {
    cs: VarId,
    elem: crate::target::types::LTy,
    n: &'a Term,
    i: &'a Var,
    bs: &'a [Bind],
    core: &'a LTerm,
    /// Uses rewritten to a copy of the element (not to zero).
    uses: usize,
    /// A use of another form was met.
    bad: bool,
}

impl BuildUses<'_> {
    /// `P t` for the path `P` (outermost projection first), with the zero of its type where the
    /// path reaches a literal zero; `None` (a copy) or `Some(zero)`.
    fn element_at(&mut self, path: &[bool]) -> LTerm {
        let mut t = self.core.clone();
        let mut ty = self.elem.clone();
        let mut k = 0;
        while k < path.len() {
            let Some((a, b)) = ty.as_prod().map(|(a, b)| (a.clone(), b.clone())) else {
                break;
            };
            ty = if path[k] { a } else { b };
            t = match &t.kind {
                LTermKind::Pair(x, y) => {
                    if path[k] {
                        x.clone()
                    } else {
                        y.clone()
                    }
                }
                LTermKind::Zero(_) => LTerm::zero(ty.clone()),
                _ => {
                    // The rest of the path applies to the element as it is.
                    let mut t = t.clone();
                    for &first in &path[k..] {
                        t = LTerm::mk(if first {
                            LTermKind::Fst(t)
                        } else {
                            LTermKind::Snd(t)
                        });
                    }
                    return self.copy(t);
                }
            };
            k += 1;
        }
        if matches!(t.kind, LTermKind::Zero(_)) {
            return LTerm::zero(ty);
        }
        self.copy(t)
    }

    fn copy(&mut self, core: LTerm) -> LTerm {
        self.uses += 1;
        let body = wrap(self.bs, core);
        LTerm::mk(LTermKind::Build(self.n.clone(), self.i.clone(), body))
    }
}

/// The projection path of `l` down to `inner` (outermost first).
fn lpath(l: &LTerm) -> (Vec<bool>, &LTerm) {
    let mut path = Vec::new();
    let mut l = l;
    loop {
        match &l.kind {
            LTermKind::Fst(e) => {
                path.push(true);
                l = e;
            }
            LTermKind::Snd(e) => {
                path.push(false);
                l = e;
            }
            _ => return (path, l),
        }
    }
}

impl Rewrite for BuildUses<'_> {
    fn term(&mut self, t: &Term) -> Term {
        if self.bad {
            return t.clone();
        }
        deep(|| super::pass::map_shared(t, self))
    }

    fn linear(&mut self, l: &LTerm) -> LTerm {
        if self.bad {
            return l.clone();
        }
        let is_cs = |l: &LTerm| matches!(&l.kind, LTermKind::Var(u) if u.id == self.cs);
        let (path, inner) = lpath(l);
        match &inner.kind {
            LTermKind::Sum(a) if is_cs(a) => {
                // Projections outermost first; `element_at` walks from the element outwards.
                let mut inward = path.clone();
                inward.reverse();
                let e = self.element_at(&inward);
                if matches!(e.kind, LTermKind::Zero(_)) {
                    return e;
                }
                return LTerm::new(LTermKind::Sum(e), l.span);
            }
            LTermKind::Map(f, a) if is_cs(a) && path.is_empty() => {
                if let TermKind::LinLam(p, pb) = &f.kind {
                    let (mut inward, base) = lpath(pb);
                    if matches!(&base.kind, LTermKind::Var(u) if u.id == p.id) {
                        inward.reverse();
                        let e = self.element_at(&inward);
                        return match &e.kind {
                            // The zero array (`element_at` gives the element's zero).
                            LTermKind::Zero(ty) => {
                                LTerm::zero(crate::target::types::LTy::array(ty.clone()))
                            }
                            _ => e,
                        };
                    }
                }
                self.bad = true;
                return l.clone();
            }
            LTermKind::Var(u) if u.id == self.cs => {
                self.bad = true;
                return l.clone();
            }
            // A use in a loop's body would build the array once per iteration.
            LTermKind::Build(_, _, b) | LTermKind::PowLam(_, b)
                if vars_of_lin(b).contains(&self.cs) =>
            {
                self.bad = true;
                return l.clone();
            }
            _ => {}
        }
        // Under `deep`: `rest` is as deep as the let chain after the array (a long program).
        deep(|| super::pass::lmap_shared(l, self))
    }
}

/// A binding at the head of an lbuild body.
#[derive(Clone)]
enum Bind {
    Cart(Pat, Term, Span),
    Lin(Var, LTerm, Span),
}

impl Bind {
    fn wrap(&self, body: LTerm) -> LTerm {
        match self {
            Bind::Cart(p, e, s) => LTerm::new(LTermKind::Let(p.clone(), e.clone(), body), *s),
            Bind::Lin(u, e, s) => LTerm::new(LTermKind::LinLet(u.clone(), e.clone(), body), *s),
        }
    }

    fn bound(&self) -> Vec<VarId> {
        match self {
            Bind::Cart(p, ..) => p.vars().iter().map(|v| v.id).collect(),
            Bind::Lin(u, ..) => vec![u.id],
        }
    }

    fn uses(&self) -> HashSet<VarId> {
        match self {
            Bind::Cart(_, e, _) => vars_of_term(e),
            Bind::Lin(_, e, _) => vars_of_lin(e),
        }
    }

    /// Whether evaluating it twice costs only a constant.
    fn cheap(&self) -> bool {
        match self {
            Bind::Cart(_, e, _) => cheap_index(e),
            Bind::Lin(_, e, _) => e.size() <= 8 && cheap_lin(e),
        }
    }
}

fn peel(l: &LTerm) -> (Vec<Bind>, LTerm) {
    let mut bs = Vec::new();
    let mut l = l.clone();
    loop {
        let next = match &l.kind {
            LTermKind::Let(p, e, b) => {
                bs.push(Bind::Cart(p.clone(), e.clone(), l.span));
                b.clone()
            }
            LTermKind::LinLet(u, e, b) => {
                bs.push(Bind::Lin(u.clone(), e.clone(), l.span));
                b.clone()
            }
            _ => return (bs, l),
        };
        l = next;
    }
}

fn wrap(bs: &[Bind], core: LTerm) -> LTerm {
    bs.iter().rev().fold(core, |acc, b| b.wrap(acc))
}

/// The bindings of `bs` that `core` needs, transitively.
fn needed(bs: &[Bind], core: &LTerm) -> Vec<bool> {
    let mut need = vars_of_lin(core);
    let mut keep = vec![false; bs.len()];
    for (k, b) in bs.iter().enumerate().rev() {
        if b.bound().iter().any(|v| need.contains(v)) {
            keep[k] = true;
            need.extend(b.uses());
        }
    }
    keep
}

impl Fuse<'_> {
    /// `x` if `l` is `onehot m j x` with `m` provably `n`; through the branches of a linear
    /// `case` (after their lets), where a branch may also be `0`.
    fn one_hot_at(&self, l: &LTerm, n: &Term, j: &Var) -> Option<LTerm> {
        use LTermKind as K;
        match &l.kind {
            K::OneHot(m, i, x)
                if matches!(&i.kind, TermKind::Var(i) if i.id == j.id) && self.same(m, n) =>
            {
                Some(x.clone())
            }
            K::Case(s, p, a, q, b) => {
                let branch = |l: &LTerm| {
                    let (bs, core) = peel(l);
                    let x = match &core.kind {
                        K::Zero(t) => LTerm::zero(t.as_array()?.clone()),
                        _ => self.one_hot_at(&core, n, j)?,
                    };
                    Some(wrap(&bs, x))
                };
                let (a, b) = (branch(a)?, branch(b)?);
                Some(LTerm::new(
                    K::Case(s.clone(), p.clone(), a, q.clone(), b),
                    l.span,
                ))
            }
            _ => None,
        }
    }

    /// The rules on `lsum (lbuild n (\j -> body))`.
    fn sum_build(
        &mut self,
        n: &Term,
        j: &Var,
        body: &LTerm,
        span: Span,
        bspan: Span,
    ) -> Option<LTerm> {
        use LTermKind as K;
        let (bs, core) = peel(body);
        if self.rules.sum_build_one_hot
            && let Some(x) = self.one_hot_at(&core, n, j)
        {
            self.fire("sumBuildOneHot");
            return Some(LTerm::new(
                K::Build(n.clone(), j.clone(), wrap(&bs, x)),
                bspan,
            ));
        }
        if !self.rules.sum_build_split {
            return None;
        }
        let (l1, l2, pair) = match &core.kind {
            K::Pair(a, b) => (a, b, true),
            K::Plus(a, b) if has_one_hot(a) || has_one_hot(b) => (a, b, false),
            _ => return None,
        };
        let (k1, k2) = (needed(&bs, l1), needed(&bs, l2));
        if bs
            .iter()
            .zip(k1.iter().zip(&k2))
            .any(|(b, (x, y))| *x && *y && !b.cheap())
        {
            return None;
        }
        self.fire("sumBuildSplit");
        let pick = |keep: &[bool]| -> Vec<Bind> {
            bs.iter()
                .zip(keep)
                .filter(|(_, k)| **k)
                .map(|(b, _)| b.clone())
                .collect()
        };
        let (bs1, bs2) = (pick(&k1), pick(&k2));
        let (n1, outer) = if cheap(n) {
            (n.clone(), None)
        } else {
            let nv = Var::fresh("n", Ty::Int);
            (Term::var(&nv), Some(nv))
        };
        let half = |bs: &[Bind], l: &LTerm| {
            LTerm::new(
                K::Sum(LTerm::new(
                    K::Build(n1.clone(), j.clone(), wrap(bs, l.clone())),
                    bspan,
                )),
                span,
            )
        };
        let (h1, h2) = (half(&bs1, l1), half(&bs2, l2));
        let r = LTerm::new(
            if pair {
                K::Pair(h1, h2)
            } else {
                K::Plus(h1, h2)
            },
            span,
        );
        Some(match outer {
            Some(nv) => LTerm::new(K::Let(Pat::Var(nv), n.clone(), r), span),
            None => r,
        })
    }

    /// Gathers the one-hots of a `+`-tree by length and index. The tree's leaves are
    /// rewritten here (once each), so nested `+` nodes are not flattened again.
    fn plus_one_hot(&mut self, l: &LTerm) -> LTerm {
        use LTermKind as K;
        let mut leaves = Vec::new();
        let mut stack = vec![l.clone()];
        while let Some(x) = stack.pop() {
            match &x.kind {
                K::Plus(a, b) => {
                    stack.push(b.clone());
                    stack.push(a.clone());
                }
                _ => leaves.push(self.linear(&x)),
            }
        }
        // Groups of one-hots with the same length and index, in order of first appearance.
        let mut index: HashMap<String, usize> = HashMap::default();
        let mut groups: Vec<(Term, Term, Vec<LTerm>, Span)> = Vec::new();
        let mut others = Vec::new();
        let mut merged = false;
        for x in &leaves {
            if let K::OneHot(m, i, e) = &x.kind
                && let (Some(km), Some(ki)) = (key(&self.norm(m)), key(i))
            {
                match index.entry(format!("{km}|{ki}")) {
                    std::collections::hash_map::Entry::Occupied(o) => {
                        groups[*o.get()].2.push(e.clone());
                        merged = true;
                    }
                    std::collections::hash_map::Entry::Vacant(v) => {
                        v.insert(groups.len());
                        groups.push((m.clone(), i.clone(), vec![e.clone()], x.span));
                    }
                }
            } else {
                others.push(x.clone());
            }
        }
        if !merged {
            let mut it = leaves.into_iter();
            return rebuild_plus(l, &mut it);
        }
        self.fire("plusOneHot");
        let span = l.span;
        let plus = |xs: Vec<LTerm>| {
            xs.into_iter()
                .reduce(|a, b| LTerm::new(K::Plus(a, b), span))
                .expect("a group is not empty")
        };
        let mut out: Vec<LTerm> = groups
            .into_iter()
            .map(|(m, i, es, s)| LTerm::new(K::OneHot(m, i, plus(es)), s))
            .collect();
        out.extend(others);
        plus(out)
    }
}

/// The `+`-tree `l` with its leaves replaced, left to right, by `leaves`.
fn rebuild_plus(l: &LTerm, leaves: &mut impl Iterator<Item = LTerm>) -> LTerm {
    deep(|| match &l.kind {
        LTermKind::Plus(a, b) => {
            let a = rebuild_plus(a, leaves);
            let b = rebuild_plus(b, leaves);
            LTerm::new(LTermKind::Plus(a, b), l.span)
        }
        _ => leaves.next().expect("as many leaves as the tree has"),
    })
}

/// A key for a cheap term, equal for syntactically equal terms.
fn key(t: &Term) -> Option<String> {
    use TermKind as K;
    Some(match &t.kind {
        K::Var(x) => format!("v{}", x.id.0),
        K::Lit(Lit::Int(n)) => format!("i{n}"),
        K::Fst(e) => format!("f({})", key(e)?),
        K::Snd(e) => format!("s({})", key(e)?),
        K::Length(e) => format!("l({})", key(e)?),
        _ => return None,
    })
}

fn has_one_hot(l: &LTerm) -> bool {
    match &l.kind {
        LTermKind::OneHot(..) => true,
        LTermKind::Plus(a, b) => has_one_hot(a) || has_one_hot(b),
        _ => false,
    }
}

fn is_atomic(t: &Term) -> bool {
    match &t.kind {
        TermKind::Var(_) | TermKind::Lit(_) => true,
        TermKind::Fst(e) | TermKind::Snd(e) => is_atomic(e),
        _ => false,
    }
}

/// An atom or the length of an atom: safe to evaluate again.
fn cheap(t: &Term) -> bool {
    match &t.kind {
        TermKind::Length(a) => is_atomic(a),
        _ => is_atomic(t),
    }
}

/// An atom, a length of an atom, or an index of an atom by an atom, under projections.
fn cheap_index(t: &Term) -> bool {
    match &t.kind {
        TermKind::Fst(e) | TermKind::Snd(e) => cheap_index(e),
        TermKind::Index(a, i) => is_atomic(a) && is_atomic(i),
        _ => cheap(t),
    }
}

/// A small linear term of atoms, their indexes by atoms, scalings by atoms and sums.
fn cheap_lin(l: &LTerm) -> bool {
    match &l.kind {
        LTermKind::Var(_) | LTermKind::Zero(_) => true,
        LTermKind::Fst(a) | LTermKind::Snd(a) => cheap_lin(a),
        LTermKind::Scale(t, a) => is_atomic(t) && cheap_lin(a),
        LTermKind::Plus(a, b) => cheap_lin(a) && cheap_lin(b),
        LTermKind::Index(a, i) => cheap_lin(a) && is_atomic(i),
        _ => false,
    }
}

pub(super) fn vars_of_term(t: &Term) -> HashSet<VarId> {
    let mut out = HashSet::default();
    collect(crate::target::term::Child::C(t), &mut out);
    out
}

pub(super) fn vars_of_lin(l: &LTerm) -> HashSet<VarId> {
    let mut out = HashSet::default();
    collect(crate::target::term::Child::L(l), &mut out);
    out
}

fn collect(root: crate::target::term::Child<'_>, out: &mut HashSet<VarId>) {
    root.each_var(|x| {
        out.insert(x.id);
    });
}

// ----- closure conversion -----

/// The scope of a let-bound array.
#[derive(Clone, Copy)]
enum Scope<'a> {
    C(&'a Term),
    L(&'a LTerm),
}

/// How the array is made.
enum Maker {
    /// `build n (\i -> body)`.
    Build(Term, Var),
    /// `map (\y -> body) xs` or `map2 (\y -> \z -> body) xs ys`: the parameters and the arrays.
    Map(Vec<Var>, Vec<Term>),
}

/// An array of `(a, λ̲v. l)` pairs that can be closure-converted.
struct Closures {
    maker: Maker,
    /// The leading lets of the element body.
    lets: Vec<(Pat, Term, Span)>,
    /// The first component.
    first: Term,
    pair_span: Span,
    /// The closure.
    v: Var,
    code: LTerm,
    /// The environment: variables bound in the element that the closure uses, other than
    /// those of `from_first`.
    env: Vec<Var>,
    /// Variables the closure uses that are leaves of the first component (at these paths):
    /// read back from it at the use rather than stored twice. A primitive whose derivative
    /// reads its result (`tanh`, `exp`) gives elements `(y, λ̲v. .. y ..)`: the converted
    /// array holds `(y, ())`, not `(y, y)`.
    from_first: Vec<(Var, Vec<bool>)>,
    /// Bindings of the element recomputed at the use, in order.
    remat: Vec<(Pat, Term, Span)>,
    /// Parameters of a map recomputed at the use as an element of their (atomic) array.
    params: Vec<(Var, Term)>,
    /// Whether the closure (or a recomputed binding) uses the build's index.
    uses_index: bool,
    /// The elements are bare closures `λ̲v. l` rather than pairs `(a, λ̲v. l)`: the converted
    /// array holds the environments alone, and the uses are `rs ! j • l'` and `zipWith rs w`.
    bare: bool,
}

impl Closures {
    fn analyse(rs: &Var, e: &Term, scope: Scope<'_>) -> Option<Closures> {
        let (params, body) = element_of(e)?;
        let maker = match &e.kind {
            TermKind::Build(n, _) => Maker::Build(n.clone(), params[0].clone()),
            TermKind::Map(_, xs) => Maker::Map(params, vec![xs.clone()]),
            TermKind::Map2(_, xs, ys) => Maker::Map(params, vec![xs.clone(), ys.clone()]),
            _ => unreachable!("element_of knows these forms"),
        };
        let (lets, core) = lets_of(body);
        let lets: Vec<(Pat, Term, Span)> = lets
            .into_iter()
            .map(|(p, e, s)| (p.clone(), e.clone(), s))
            .collect();
        let (first, clo, bare) = match &core.kind {
            TermKind::Pair(first, clo) => (first.clone(), clo, false),
            TermKind::LinLam(..) => (Term::unit(), core, true),
            _ => return None,
        };
        let TermKind::LinLam(v, code) = &clo.kind else {
            return None;
        };
        // Bindings cheap to evaluate again (an index of an atom by an atom, a little arithmetic
        // on atoms, see `remat_form`) whose inputs are not bound in the element, apart from the
        // index and other such bindings, are recomputed at the use rather than stored: the
        // element was built with the same index, so they evaluate to the same value without
        // failing. A map's parameter is such a binding too, when its array is an atom: element
        // `j` was built from `xs ! j`.
        let mut inner: HashSet<VarId> = HashSet::default();
        if let Maker::Map(ps, _) = &maker {
            inner.extend(ps.iter().map(|p| p.id));
        }
        for (p, _, _) in &lets {
            inner.extend(p.vars().iter().map(|v| v.id));
        }
        let mut remat_ok: HashSet<VarId> = HashSet::default();
        let mut params = Vec::new();
        if let Maker::Map(ps, xss) = &maker {
            for (p, xs) in ps.iter().zip(xss) {
                if is_atomic(xs) {
                    remat_ok.insert(p.id);
                    params.push((p.clone(), xs.clone()));
                }
            }
        }
        for (p, e, _) in &lets {
            if let Pat::Var(c) = p
                && remat_form(c, e)
                && vars_of_term(e)
                    .iter()
                    .all(|x| !inner.contains(x) || remat_ok.contains(x))
            {
                remat_ok.insert(c.id);
            }
        }
        let mut need = vars_of_lin(code);
        let mut chosen: HashSet<VarId> = HashSet::default();
        for (p, e, _) in lets.iter().rev() {
            if let Pat::Var(c) = p
                && remat_ok.contains(&c.id)
                && need.contains(&c.id)
            {
                chosen.insert(c.id);
                need.extend(vars_of_term(e));
            }
        }
        // A binding of the same cheap form whose inputs are stored anyway (or recomputed) is
        // recomputed from them rather than stored as well: `x1 = 100 * x2` with `x2` stored.
        // Its inputs are already needed, so storing fewer variables never needs new ones.
        let stored = |c: &VarId, chosen: &HashSet<VarId>| {
            need.contains(c) && !chosen.contains(c) && !remat_ok.contains(c)
        };
        for (p, e, _) in &lets {
            if let Pat::Var(c) = p
                && stored(&c.id, &chosen)
                && remat_form(c, e)
                && vars_of_term(e)
                    .iter()
                    .all(|x| !inner.contains(x) || chosen.contains(x) || stored(x, &chosen))
            {
                chosen.insert(c.id);
            }
        }
        let remat: Vec<(Pat, Term, Span)> = lets
            .iter()
            .filter(|(p, _, _)| matches!(p, Pat::Var(c) if chosen.contains(&c.id)))
            .cloned()
            .collect();
        let params: Vec<(Var, Term)> = params
            .into_iter()
            .filter(|(p, _)| need.contains(&p.id))
            .collect();
        let mut candidates: Vec<Var> = match &maker {
            Maker::Build(..) => Vec::new(),
            Maker::Map(ps, _) => ps.clone(),
        };
        for (p, _, _) in &lets {
            candidates.extend(p.vars().into_iter().cloned());
        }
        let env: Vec<Var> = candidates
            .into_iter()
            .filter(|c| {
                need.contains(&c.id) && !chosen.contains(&c.id) && !remat_ok.contains(&c.id)
            })
            .collect();
        let mut leaves = Vec::new();
        if !bare {
            tuple_leaves(&first, &mut Vec::new(), &mut leaves);
        }
        let mut from_first: Vec<(Var, Vec<bool>)> = Vec::new();
        let env = env
            .into_iter()
            .filter(|c| match leaves.iter().find(|(_, x)| x.id == c.id) {
                Some((path, _)) => {
                    from_first.push((c.clone(), path.clone()));
                    false
                }
                None => true,
            })
            .collect();
        let uses_index = matches!(&maker, Maker::Build(_, i) if need.contains(&i.id));
        if !uses_only(rs.id, scope, Kind::Closures) {
            return None;
        }
        Some(Closures {
            maker,
            lets,
            first,
            pair_span: core.span,
            v: v.clone(),
            code: code.clone(),
            env,
            from_first,
            remat,
            params,
            uses_index,
            bare,
        })
    }

    /// Whether the converted array holds the first components alone: no environment is left
    /// to store (the closures read only the first component, or nothing of the element).
    fn first_only(&self) -> bool {
        !self.bare && self.env.is_empty()
    }

    /// The environment as a tuple term and the pattern that rebinds it.
    fn env_tuple(&self) -> (Term, Pat) {
        tuple_of(&self.env)
    }

    /// The type of the converted array: the first components paired with the environments.
    fn converted_ty(&self, rs: &Var) -> Ty {
        if self.bare {
            return Ty::array(self.env_tuple().1.ty());
        }
        let a_ty = rs
            .ty
            .as_array()
            .and_then(Ty::as_prod)
            .map(|(a, _)| a.clone())
            .expect("an array of pairs");
        if self.first_only() {
            return Ty::array(a_ty);
        }
        Ty::array(Ty::prod(a_ty, self.env_tuple().1.ty()))
    }

    /// The new array variable and its definition.
    fn converted_array(&self, rs: &Var, e: &Term) -> (Var, Term) {
        let (tuple, _) = self.env_tuple();
        let rs2 = Var::fresh(rs.name.clone(), self.converted_ty(rs));
        let core = if self.bare {
            tuple
        } else if self.first_only() {
            self.first.clone()
        } else {
            Term::new(TermKind::Pair(self.first.clone(), tuple), self.pair_span)
        };
        let body = self.lets.iter().rev().fold(core, |acc, (p, x, s)| {
            Term::new(TermKind::Let(p.clone(), x.clone(), acc), *s)
        });
        let e2 = map_body(e, |_| Some(body)).expect("analysed as this form");
        (rs2, e2)
    }

    /// The length of the array when it is cheap to evaluate at a use (`n` of `build n f`,
    /// `length xs` of `map f xs`); `None`: `length` of the converted array.
    fn cheap_length(&self) -> Option<Term> {
        match &self.maker {
            Maker::Build(n, _) if cheap(n) => Some(n.clone()),
            Maker::Map(_, xs) if cheap(&xs[0]) => Some(Term::mk(TermKind::Length(xs[0].clone()))),
            _ => None,
        }
    }

    /// The variables that the rewritten uses read besides the converted array, the use's index
    /// and argument: those of the code, of the recomputed bindings, of the arrays of recomputed
    /// parameters and of the cheap length (plus variables bound inside these, which no one
    /// else binds).
    fn template_vars(&self) -> HashSet<VarId> {
        let mut need = vars_of_lin(&self.code);
        for (_, e, _) in &self.remat {
            need.extend(vars_of_term(e));
        }
        for (_, xs) in &self.params {
            need.extend(vars_of_term(xs));
        }
        if let Some(n) = self.cheap_length() {
            need.extend(vars_of_term(&n));
        }
        need
    }

    /// `let cs = snd (rs ! k) in let ps = xs ! k in let remat in let v = arg in code`.
    fn apply(&self, rs2: &Var, k: &Term, arg: LTerm) -> LTerm {
        if !self.params.is_empty() && !is_atomic(k) {
            let j = Var::fresh("j", Ty::Int);
            let body = self.apply(rs2, &Term::var(&j), arg);
            return LTerm::mk(LTermKind::Let(Pat::Var(j), k.clone(), body));
        }
        let (_, pat) = self.env_tuple();
        let elem = || Term::mk(TermKind::Index(Term::var(rs2), k.clone()));
        let env = if self.bare { elem() } else { Term::snd(elem()) };
        let inner = LTerm::lin_let(&self.v, arg, self.code.clone());
        let inner = self.remat.iter().rev().fold(inner, |acc, (p, e, s)| {
            LTerm::new(LTermKind::Let(p.clone(), e.clone(), acc), *s)
        });
        let inner = self.params.iter().rev().fold(inner, |acc, (p, xs)| {
            let x = Term::mk(TermKind::Index(xs.clone(), k.clone()));
            LTerm::mk(LTermKind::Let(Pat::Var(p.clone()), x, acc))
        });
        let first = || {
            if self.first_only() {
                elem()
            } else {
                Term::fst(elem())
            }
        };
        let inner = self.from_first.iter().rev().fold(inner, |acc, (c, path)| {
            let x = path.iter().fold(
                first(),
                |t, &left| if left { Term::fst(t) } else { Term::snd(t) },
            );
            LTerm::mk(LTermKind::Let(Pat::Var(c.clone()), x, acc))
        });
        if self.first_only() {
            return inner;
        }
        LTerm::mk(LTermKind::Let(pat, env, inner))
    }
}

/// The variables `vs` as a right-nested tuple (`()` for none) and the pattern that binds them.
pub(super) fn tuple_of(vs: &[Var]) -> (Term, Pat) {
    match vs {
        [] => (Term::unit(), Pat::Wild(Ty::Unit)),
        [x] => (Term::var(x), Pat::Var(x.clone())),
        [x, rest @ ..] => {
            let (t, p) = tuple_of(rest);
            (
                Term::pair(Term::var(x), t),
                Pat::Pair(Box::new(Pat::Var(x.clone())), Box::new(p)),
            )
        }
    }
}

// ----- closure arrays carried in the elements of other arrays -----

/// One array on the way from a let-bound array to a closure array that its elements carry
/// (see [`Nest`]).
struct Level {
    /// Where the element's tuple holds the next array (`true` for `fst`, from the root).
    path: Vec<bool>,
    /// The next array, bound by a `let` of the element (at its top, before the tuple).
    next: Var,
    /// The variables bound in the element (by its lets, a map's parameters, a build's index)
    /// that the closure's code reads: they are out of scope where the code moves to, so the
    /// tuple stores them next to the converted array, once per element of this array.
    keep: Vec<Var>,
}

/// A closure array to convert (or an array with a component to drop, [`Inner::Unread`]), and
/// how it is reached from the let-bound array `rs`: `rs`
/// itself (no levels), or an array `rs1` bound in `rs`'s element and returned as a component of
/// its tuple, `rs = build n (\i -> let bs in (.., rs1, ..))` (or `map`, `map2`), or deeper: an
/// array bound in `rs1`'s element and returned in its tuple, and so on. This is the *tape* of
/// a loop's reverse derivative: the loop's backward pass destructures `snd (rs ! j)` and applies
/// the closures of `rs1` there. The closure array is converted as by `closureConvert`; the
/// component holds the array of environments instead (paired with the level's `keep`), and the
/// code moves to the uses of the variable that a use `let p = proj (rs ! j) in body` binds to
/// the component (and so on, level by level).
struct Nest {
    levels: Vec<Level>,
    inner: Inner,
    /// The types of the converted arrays: one per level, then the innermost array's.
    tys: Vec<Ty>,
}

/// The deepest [`Nest`] looked for (levels of arrays carried in arrays).
const MAX_LEVELS: usize = 8;

/// What happens to the innermost array of a [`Nest`].
enum Inner {
    /// An array of closures: converted (`closureConvert`).
    Closures(Box<Closures>),
    /// An array whose elements hold a variable at this path that no use reads: it becomes `()`
    /// (`sndUnused`). Nothing moves, so no level keeps anything.
    Unread(Vec<bool>),
}

impl Inner {
    fn template_vars(&self) -> HashSet<VarId> {
        match self {
            Inner::Closures(c) => c.template_vars(),
            Inner::Unread(_) => HashSet::default(),
        }
    }
}

impl Nest {
    /// A closure array that `rs = e` is or carries, every use of which (in `scope`, in the
    /// elements that carry it, and of the variables bound to it at the uses) closure conversion
    /// can rewrite.
    /// With `unread`, instead a component that no use reads, of `rs`'s elements or of the
    /// elements of an array they carry.
    fn analyse(rs: &Var, e: &Term, scope: Scope<'_>, unread: bool) -> Option<Nest> {
        if let Some(n) = Nest::direct(rs, e, scope, unread).into_iter().next() {
            return Some(n);
        }
        Nest::carried(rs, e, unread, MAX_LEVELS)
            .into_iter()
            .find(|n| uses_only(rs.id, scope, Kind::Tape(&n.levels, &n.inner)))
    }

    /// `rs = e` itself: an array of closures, or (with `unread`) an array whose elements' tuples
    /// hold a variable at a path that no use reads (every such path, in order: a use further
    /// out may read some of them).
    fn direct(rs: &Var, e: &Term, scope: Scope<'_>, unread: bool) -> Vec<Nest> {
        let single = |ty, inner| Nest {
            tys: vec![ty],
            levels: Vec::new(),
            inner,
        };
        if unread {
            let Some((_, body)) = element_of(e) else {
                return Vec::new();
            };
            let Some(elem_ty) = rs.ty.as_array() else {
                return Vec::new();
            };
            let mut leaves = Vec::new();
            tuple_leaves(lets_of(body).1, &mut Vec::new(), &mut leaves);
            let mut paths: Vec<Vec<bool>> = leaves.into_iter().map(|(path, _)| path).collect();
            // Arrays of units (what closure conversion leaves of closures with no
            // environment), when the element writes them in place.
            let (lets, core) = lets_of(body);
            unit_arrays(core, &lets, &mut Vec::new(), &mut paths);
            paths
                .into_iter()
                .filter(|path| uses_only(rs.id, scope, Kind::Unread(path)))
                .map(|path| {
                    let ty = Ty::array(retype(elem_ty, &path, &Ty::Unit));
                    single(ty, Inner::Unread(path))
                })
                .collect()
        } else {
            Closures::analyse(rs, e, scope)
                .map(|c| single(c.converted_ty(rs), Inner::Closures(Box::new(c))))
                .into_iter()
                .collect()
        }
    }

    /// The closure arrays that the elements of `rs = e` carry in their tuples, directly or
    /// deeper, with their uses inside the elements checked (not the uses of `rs`).
    /// At most `depth` levels deep: each level re-reads the scope below it, so an unbounded
    /// search is cubic in the nesting of a program's loops (a 250-deep nest of `build`s took
    /// a minute); tapes nested deeper than [`MAX_LEVELS`] are left as they are.
    fn carried(rs: &Var, e: &Term, unread: bool, depth: usize) -> Vec<Nest> {
        if depth == 0 {
            return Vec::new();
        }
        let Some((params, body)) = element_of(e) else {
            return Vec::new();
        };
        let Some(elem_ty) = rs.ty.as_array() else {
            return Vec::new();
        };
        let (lets, core) = lets_of(body);
        let mut bound = params;
        for (p, _, _) in &lets {
            bound.extend(p.vars().into_iter().cloned());
        }
        let mut leaves = Vec::new();
        tuple_leaves(core, &mut Vec::new(), &mut leaves);
        let mut out = Vec::new();
        for (path, x) in leaves {
            let Some(k) = lets
                .iter()
                .position(|(p, _, _)| matches!(p, Pat::Var(y) if y.id == x.id))
            else {
                continue;
            };
            // The scope of `x` in the element, without the component that returns it.
            let scope = wrap_lets(&lets[k + 1..], put(core, &path, Term::unit()));
            let def = lets[k].1;
            let mut found: Vec<Nest> = Nest::direct(&x, def, Scope::C(&scope), unread);
            found.extend(
                Nest::carried(&x, def, unread, depth - 1)
                    .into_iter()
                    .filter(|n| uses_only(x.id, Scope::C(&scope), Kind::Tape(&n.levels, &n.inner))),
            );
            for mut n in found {
                let need = n.inner.template_vars();
                let keep: Vec<Var> = bound
                    .iter()
                    .filter(|v| need.contains(&v.id))
                    .cloned()
                    .collect();
                let leaf = leaf_ty(&n.tys[0], &keep);
                n.tys.insert(0, Ty::array(retype(elem_ty, &path, &leaf)));
                n.levels.insert(
                    0,
                    Level {
                        path: path.clone(),
                        next: x.clone(),
                        keep,
                    },
                );
                out.push(n);
            }
        }
        out
    }

    /// The new array variable and its definition.
    fn converted_array(&self, rs: &Var, e: &Term) -> (Var, Term) {
        self.converted_at(0, rs, e)
    }

    /// The array `x = e` of level `k` converted: at the closure array, the environments; at
    /// a level, the next array's `let` converted, its scope in the element rewritten, and the
    /// component `(next', keep)`.
    fn converted_at(&self, k: usize, x: &Var, e: &Term) -> (Var, Term) {
        let Some(lv) = self.levels.get(k) else {
            return match &self.inner {
                Inner::Closures(c) => c.converted_array(x, e),
                Inner::Unread(path) => {
                    let e2 = map_body(e, |body| {
                        let (lets, core) = lets_of(body);
                        Some(wrap_lets(&lets, put(core, path, Term::unit())))
                    });
                    let e2 = e2.expect("analysed as an array of this form");
                    (Var::fresh(x.name.clone(), self.tys[k].clone()), e2)
                }
            };
        };
        let e2 = map_body(e, |body| {
            let (lets, core) = lets_of(body);
            let at = lets
                .iter()
                .position(|(p, _, _)| matches!(p, Pat::Var(y) if y.id == lv.next.id))?;
            let (next2, def2) = self.converted_at(k + 1, &lv.next, lets[at].1);
            let rest = wrap_lets(
                &lets[at + 1..],
                put(core, &lv.path, leaf_term(&next2, &lv.keep)),
            );
            let rest = self.convert_at(k + 1, &lv.next, &next2).term(&rest);
            let tail = Term::new(TermKind::Let(Pat::Var(next2), def2, rest), lets[at].2);
            Some(wrap_lets(&lets[..at], tail))
        })
        .expect("analysed as an array of this form");
        (Var::fresh(x.name.clone(), self.tys[k].clone()), e2)
    }

    fn convert<'a>(&'a self, rs: &Var, rs2: &Var) -> Convert<'a> {
        self.convert_at(0, rs, rs2)
    }

    fn convert_at<'a>(&'a self, k: usize, old: &Var, new: &Var) -> Convert<'a> {
        Convert {
            n: self,
            k,
            old: old.id,
            new: new.clone(),
        }
    }
}

/// The array `rs = e` (`build`, `map` or `map2` of a λ) with every closure array that its
/// elements' tuples hold as a component (rather than as a variable) bound by a `let` just before
/// the tuple; `None` if there is none. Meaning: a `let` of a term used once, where it was.
fn hoist_closures(rs: &Var, e: &Term) -> Option<Term> {
    fn leaves(t: &Term, ty: &Ty, out: &mut Vec<(Var, Term)>) -> Term {
        match (&t.kind, ty.as_prod()) {
            (TermKind::Pair(a, b), Some((ta, tb))) => {
                let (a2, b2) = (leaves(a, ta, out), leaves(b, tb, out));
                Term::new(TermKind::Pair(a2, b2), t.span)
            }
            _ if closure_array(t) => {
                let x = Var::fresh("rs", ty.clone());
                out.push((x.clone(), t.clone()));
                Term::var(&x)
            }
            _ => t.clone(),
        }
    }
    fn closure_array(t: &Term) -> bool {
        let Some((_, body)) = element_of(t) else {
            return false;
        };
        match &lets_of(body).1.kind {
            TermKind::LinLam(..) => true,
            TermKind::Pair(_, c) => matches!(c.kind, TermKind::LinLam(..)),
            _ => false,
        }
    }
    let elem_ty = rs.ty.as_array()?.clone();
    map_body(e, |body| {
        let (lets, core) = lets_of(body);
        if !matches!(core.kind, TermKind::Pair(..)) {
            return None;
        }
        let mut new = Vec::new();
        let core2 = leaves(core, &elem_ty, &mut new);
        if new.is_empty() {
            return None;
        }
        let inner = new
            .into_iter()
            .rev()
            .fold(core2, |acc, (x, d)| Term::let_(&x, d, acc));
        Some(wrap_lets(&lets, inner))
    })
}

/// The parameters (a build's index, a map's parameters) and the body of the element of a
/// `build`, `map` or `map2` of a λ.
fn element_of(e: &Term) -> Option<(Vec<Var>, &Term)> {
    match &e.kind {
        TermKind::Build(_, f) | TermKind::Map(f, _) => {
            let (x, b) = lam_body(f)?;
            Some((vec![x.clone()], b))
        }
        TermKind::Map2(f, _, _) => {
            let (y, g) = lam_body(f)?;
            let (z, b) = lam_body(g)?;
            Some((vec![y.clone(), z.clone()], b))
        }
        _ => None,
    }
}

fn lam_body(f: &Term) -> Option<(&Var, &Term)> {
    match &f.kind {
        TermKind::Lam(x, b) => Some((x, b)),
        _ => None,
    }
}

/// The leading lets of `t` and what they bind in.
pub(super) fn lets_of(t: &Term) -> (Vec<(&Pat, &Term, Span)>, &Term) {
    let mut lets = Vec::new();
    let mut core = t;
    while let TermKind::Let(p, e, rest) = &core.kind {
        lets.push((p, e, core.span));
        core = rest;
    }
    (lets, core)
}

/// `let bs in core` for the lets of [`lets_of`].
pub(super) fn wrap_lets(lets: &[(&Pat, &Term, Span)], core: Term) -> Term {
    lets.iter().rev().fold(core, |acc, (p, e, s)| {
        Term::new(TermKind::Let((*p).clone(), (*e).clone(), acc), *s)
    })
}

/// The paths of the leaves of the pair tree `t` that are `map (\y -> ()) xs` of an atom `xs`
/// (or `build` of an atomic length): arrays of units, which cannot fail.
///
/// Also `map2 (\y -> \z -> ()) xs ys` of atoms of the same length: `ys` bound by one of `lets`
/// (the element's) to a `map` over `xs` (what `mapCse` makes), so that `map2` cannot fail.
fn unit_arrays(
    t: &Term,
    lets: &[(&Pat, &Term, Span)],
    path: &mut Vec<bool>,
    out: &mut Vec<Vec<bool>>,
) {
    let unit = |b: &Term| matches!(b.kind, TermKind::Lit(Lit::Unit));
    match &t.kind {
        TermKind::Pair(a, b) => {
            for (first, c) in [(true, a), (false, b)] {
                path.push(first);
                unit_arrays(c, lets, path, out);
                path.pop();
            }
        }
        TermKind::Map(f, xs) | TermKind::Build(xs, f)
            if is_atomic(xs) && matches!(&f.kind, TermKind::Lam(_, b) if unit(b)) =>
        {
            out.push(path.clone());
        }
        TermKind::Map2(f, xs, ys)
            if is_atomic(xs)
                && matches!(lam_body(f).and_then(|(_, g)| lam_body(g)), Some((_, b)) if unit(b))
                && map_over(ys, xs, lets) =>
        {
            out.push(path.clone());
        }
        _ => {}
    }
}

/// Whether `ys` is a variable bound by one of `lets` to `map f xs` (so as long as `xs`).
fn map_over(ys: &Term, xs: &Term, lets: &[(&Pat, &Term, Span)]) -> bool {
    let TermKind::Var(y) = &ys.kind else {
        return false;
    };
    lets.iter().any(|(p, e, _)| {
        matches!(p, Pat::Var(v) if v.id == y.id)
            && matches!(&e.kind, TermKind::Map(_, xs2) if Term::syn_eq(xs2, xs))
    })
}

/// The variables at the leaves of the pair tree `t`, with their paths.
fn tuple_leaves(t: &Term, path: &mut Vec<bool>, out: &mut Vec<(Vec<bool>, Var)>) {
    match &t.kind {
        TermKind::Pair(a, b) => {
            for (first, c) in [(true, a), (false, b)] {
                path.push(first);
                tuple_leaves(c, path, out);
                path.pop();
            }
        }
        TermKind::Var(x) => out.push((path.clone(), x.clone())),
        _ => {}
    }
}

/// The pair tree `t` with the subterm at `path` replaced by `new`.
fn put(t: &Term, path: &[bool], new: Term) -> Term {
    match (path, &t.kind) {
        ([], _) => new,
        ([first, rest @ ..], TermKind::Pair(a, b)) => {
            let kind = if *first {
                TermKind::Pair(put(a, rest, new), b.clone())
            } else {
                TermKind::Pair(a.clone(), put(b, rest, new))
            };
            Term::new(kind, t.span)
        }
        _ => unreachable!("a path of the tuple"),
    }
}

/// The product type `ty` with the component at `path` replaced by `leaf`.
fn retype(ty: &Ty, path: &[bool], leaf: &Ty) -> Ty {
    match path {
        [] => leaf.clone(),
        [first, rest @ ..] => {
            let (a, b) = ty.as_prod().expect("a path of the tuple type");
            if *first {
                Ty::prod(retype(a, rest, leaf), b.clone())
            } else {
                Ty::prod(a.clone(), retype(b, rest, leaf))
            }
        }
    }
}

/// The component that replaces a carried closure array: the converted array, paired with
/// the variables the level keeps if there are any.
fn leaf_term(x: &Var, keep: &[Var]) -> Term {
    match keep {
        [] => Term::var(x),
        _ => Term::pair(Term::var(x), tuple_of(keep).0),
    }
}

fn leaf_ty(ty: &Ty, keep: &[Var]) -> Ty {
    match keep {
        [] => ty.clone(),
        _ => Ty::prod(ty.clone(), tuple_of(keep).1.ty()),
    }
}

fn leaf_pat(x: &Var, keep: &[Var]) -> Pat {
    match keep {
        [] => Pat::Var(x.clone()),
        _ => Pat::Pair(Box::new(Pat::Var(x.clone())), Box::new(tuple_of(keep).1)),
    }
}

/// The pattern `p` for a tuple whose component at `rest` now has type `leaf`: a `_` there (or
/// above) gets the new type, a variable there becomes `var` of it.
fn repattern_at(p: &Pat, rest: &[bool], leaf: &Ty, var: &mut impl FnMut(&Var) -> Pat) -> Pat {
    match (p, rest) {
        (Pat::Wild(t), _) => Pat::Wild(retype(t, rest, leaf)),
        (Pat::Var(y), []) => var(y),
        (Pat::Pair(a, b), [first, more @ ..]) => {
            if *first {
                Pat::Pair(Box::new(repattern_at(a, more, leaf, var)), b.clone())
            } else {
                Pat::Pair(a.clone(), Box::new(repattern_at(b, more, leaf, var)))
            }
        }
        _ => unreachable!("checked by uses_only"),
    }
}

/// Whether `t` is `old` or `map f old`: a use of an array whose first components are unchanged
/// (`f` is a first projection, checked by `uses_only`).
fn renames(t: &Term, old: VarId) -> bool {
    let is_old = |a: &Term| matches!(&a.kind, TermKind::Var(x) if x.id == old);
    match &t.kind {
        TermKind::Map(_, xs) => is_old(xs),
        _ => is_old(t),
    }
}

/// `t` (see [`renames`]) for the array `new`: `new`, or `map (\r -> fst r) new` (the λ's
/// parameter has `new`'s element type).
fn renamed(t: &Term, new: &Var) -> Term {
    match &t.kind {
        TermKind::Map(f, _) => {
            let r = Var::fresh("r", new.ty.as_array().expect("an array").clone());
            let f2 = Term::new(TermKind::Lam(r.clone(), Term::fst(Term::var(&r))), f.span);
            Term::new(TermKind::Map(f2, Term::var(new)), t.span)
        }
        _ => Term::new(TermKind::Var(new.clone()), t.span),
    }
}

/// `(q, j)` if `t` is `proj (rs ! j)`, with `q` the path of projections from the element's
/// root (`true` for `fst`).
fn indexed(t: &Term, rs: VarId) -> Option<(Vec<bool>, &Term)> {
    let mut q = Vec::new();
    let mut t = t;
    loop {
        t = match &t.kind {
            TermKind::Fst(e) | TermKind::Snd(e) => {
                q.push(matches!(t.kind, TermKind::Fst(_)));
                e
            }
            TermKind::Index(a, j) if matches!(&a.kind, TermKind::Var(x) if x.id == rs) => {
                q.reverse();
                return Some((q, j));
            }
            _ => return None,
        };
    }
}

/// Whether the components at paths `p` and `q` of a tuple do not overlap (neither path is a
/// prefix of the other).
fn disjoint(p: &[bool], q: &[bool]) -> bool {
    p.iter().zip(q).any(|(a, b)| a != b)
}

/// What the uses of a let-bound array may be (see [`uses_only`]).
#[derive(Clone, Copy)]
enum Kind<'a> {
    /// Reads of first components only: `map (\r -> fst r) rs`, `fst (rs ! j)`, `length rs`.
    FstOnly,
    /// Those, and applications of the closures: `snd (rs ! j) • l`,
    /// `zipWith (map (\r -> snd r) rs) w`.
    Closures,
    /// An array whose elements carry a closure array at `levels[0].path`: `length rs`, reads
    /// of other components (`map (\r -> fst r) rs`, `proj (rs ! j)`), and `let p =
    /// proj (rs ! j) in body` where `p` binds the carried array to a variable whose uses in
    /// `body` are of the next level's kind (or binds nothing there).
    Tape(&'a [Level], &'a Inner),
    /// An array whose elements' component at the path is never read: the uses of `Tape`, with
    /// `let p = proj (rs ! j)` binding nothing at the path.
    Unread(&'a [bool]),
}

impl<'a> Kind<'a> {
    /// Where an element holds what is converted (a closure is an element's second component).
    fn path(self) -> &'a [bool] {
        match self {
            Kind::Tape(levels, _) => &levels[0].path,
            Kind::Unread(path) => path,
            _ => &[false],
        }
    }

    /// The kind of the uses of the array a level carries.
    fn next(self) -> Kind<'a> {
        match self {
            Kind::Tape([_], Inner::Closures(_)) => Kind::Closures,
            Kind::Tape([_], Inner::Unread(path)) => Kind::Unread(path),
            Kind::Tape(levels, inner) => Kind::Tape(&levels[1..], inner),
            k => k,
        }
    }
}

/// Whether every use of `rs` in its scope is one of `kind`.
///
/// One traversal of the scope: where a `let` binds the array a level carries to a variable,
/// that variable is tracked with the next level's kind from there on, alongside `rs` (checking
/// each such variable's scope separately walked a nest of `k` levels 2^k times).
fn uses_only(rs: VarId, scope: Scope<'_>, kind: Kind<'_>) -> bool {
    use crate::target::term::Child;
    struct Uses<'a> {
        /// The tracked variables and what their uses may be.
        vars: Vec<(VarId, Kind<'a>)>,
    }
    impl<'a> Uses<'a> {
        fn kind_of(&self, id: VarId) -> Option<Kind<'a>> {
            self.vars
                .iter()
                .rev()
                .find(|(v, _)| *v == id)
                .map(|&(_, k)| k)
        }
        /// The tracked variable `t` is, and its kind.
        fn tracked(&self, t: &Term) -> Option<Kind<'a>> {
            match &t.kind {
                TermKind::Var(x) => self.kind_of(x.id),
                _ => None,
            }
        }
        /// `(q, j, kind)` if `t` is `proj (v ! j)` for a tracked `v` (see [`indexed`]).
        fn indexed(&self, t: &'a Term) -> Option<(Vec<bool>, &'a Term, Kind<'a>)> {
            let mut root = t;
            while let TermKind::Fst(e) | TermKind::Snd(e) = &root.kind {
                root = e;
            }
            let TermKind::Index(a, _) = &root.kind else {
                return None;
            };
            let TermKind::Var(v) = &a.kind else {
                return None;
            };
            let k = self.kind_of(v.id)?;
            let (q, j) = indexed(t, v.id)?;
            Some((q, j, k))
        }
        /// `let p = e in body` where `e` reads the array carried at a level: `p` binds it to
        /// a variable whose uses in `body` are of the next level's kind, or binds nothing
        /// there. The whole let's verdict, body included.
        fn carried(&mut self, p: &Pat, e: &'a Term, body: Child<'a>) -> Option<bool> {
            let (q, j, k) = self.indexed(e)?;
            if !matches!(k, Kind::Tape(..) | Kind::Unread(_)) {
                return None;
            }
            let path = k.path();
            if disjoint(&q, path) {
                return None;
            }
            if !(q.len() <= path.len() && self.term(j)) {
                return Some(false);
            }
            match binds(p, &path[q.len()..], k) {
                None => Some(false),
                Some(new) => {
                    let n = self.vars.len();
                    self.vars.extend(new);
                    let ok = self.child(body);
                    self.vars.truncate(n);
                    Some(ok)
                }
            }
        }
        fn term(&mut self, t: &'a Term) -> bool {
            deep(|| {
                if let TermKind::Let(p, e, body) = &t.kind
                    && let Some(ok) = self.carried(p, e, Child::C(body))
                {
                    return ok;
                }
                if let Some((q, j, k)) = self.indexed(t) {
                    return disjoint(&q, k.path()) && self.term(j);
                }
                match &t.kind {
                    TermKind::Var(x) => self.kind_of(x.id).is_none(),
                    TermKind::Map(f, xs) if let Some(k) = self.tracked(xs) => {
                        projection(f) == Some(true) && disjoint(&[true], k.path())
                    }
                    TermKind::Length(a) if self.tracked(a).is_some() => true,
                    _ => t.children().into_iter().all(|c| self.child(c)),
                }
            })
        }
        fn linear(&mut self, l: &'a LTerm) -> bool {
            deep(|| {
                if let LTermKind::Let(p, e, body) = &l.kind
                    && let Some(ok) = self.carried(p, e, Child::L(body))
                {
                    return ok;
                }
                match &l.kind {
                    LTermKind::App(f, x) if let Some(j) = self.applied(f) => {
                        self.term(j) && self.linear(x)
                    }
                    LTermKind::ZipWith(fs, w) if self.zipped(fs) => self.linear(w),
                    _ => l.children().into_iter().all(|c| self.child(c)),
                }
            })
        }
        /// `j` if `f` is `snd (v ! j)` (or `v ! j`) for a tracked `v` whose closures may be
        /// applied.
        fn applied(&self, f: &'a Term) -> Option<&'a Term> {
            let e = match &f.kind {
                TermKind::Snd(e) => e,
                _ => f,
            };
            let TermKind::Index(a, j) = &e.kind else {
                return None;
            };
            matches!(self.tracked(a), Some(Kind::Closures)).then_some(j)
        }
        /// Whether `fs` is a tracked closure array `v` or `map (\r -> snd r) v`.
        fn zipped(&self, fs: &Term) -> bool {
            let a = match &fs.kind {
                TermKind::Map(f, a) if projection(f) == Some(false) => a,
                _ => fs,
            };
            matches!(self.tracked(a), Some(Kind::Closures))
        }
        fn child(&mut self, c: Child<'a>) -> bool {
            match c {
                Child::C(t) => self.term(t),
                Child::L(l) => self.linear(l),
            }
        }
    }
    /// The variables a pattern binds to the carried array at `rest` below its root, with their
    /// kinds (none for a wildcard), or `None` if it binds something else there.
    fn binds<'a>(p: &Pat, rest: &[bool], k: Kind<'a>) -> Option<Vec<(VarId, Kind<'a>)>> {
        match (p, rest) {
            (Pat::Wild(_), _) => Some(Vec::new()),
            (Pat::Var(y), []) if matches!(k, Kind::Tape(..)) => Some(vec![(y.id, k.next())]),
            (Pat::Pair(a, b), [first, more @ ..]) => binds(if *first { a } else { b }, more, k),
            _ => None,
        }
    }
    let mut u = Uses {
        vars: vec![(rs, kind)],
    };
    match scope {
        Scope::C(t) => u.term(t),
        Scope::L(l) => u.linear(l),
    }
}

/// `j` if `f` is `snd (rs ! j)` (or `rs ! j`, for an array of bare closures).
fn applied(f: &Term, rs: VarId) -> Option<&Term> {
    let e = match &f.kind {
        TermKind::Snd(e) => e,
        _ => f,
    };
    let TermKind::Index(a, j) = &e.kind else {
        return None;
    };
    matches!(&a.kind, TermKind::Var(x) if x.id == rs).then_some(j)
}

/// Rewrites the scope of a converted array: at level `k` of the nest, or at its closure array.
struct Convert<'a> {
    n: &'a Nest,
    k: usize,
    old: VarId,
    new: Var,
}

impl<'a> Convert<'a> {
    /// The closures, when this is the closure array.
    fn closures(&self) -> Option<&'a Closures> {
        match &self.n.inner {
            Inner::Closures(c) if self.k == self.n.levels.len() => Some(c.as_ref()),
            _ => None,
        }
    }

    /// For `let p = e in ..` where `e` reads the carried array at a level: the pattern that
    /// binds the converted array and the kept variables, and the rewrite of the scope of the
    /// variable bound to it (if `p` binds one).
    /// At the innermost array with an unread component, the pattern with `()`'s type there.
    fn repattern(&self, p: &Pat, e: &Term) -> Option<(Pat, Option<Convert<'a>>)> {
        let path = match (self.n.levels.get(self.k), &self.n.inner) {
            (Some(lv), _) => &lv.path,
            (None, Inner::Unread(path)) => path,
            (None, Inner::Closures(_)) => return None,
        };
        let (q, _) = indexed(e, self.old)?;
        if disjoint(&q, path) {
            return None;
        }
        let rest = &path[q.len()..];
        if self.k < self.n.levels.len() {
            return Some(self.pat_at(p, rest));
        }
        let unit = repattern_at(p, rest, &Ty::Unit, &mut |_| {
            unreachable!("checked by uses_only")
        });
        Some((unit, None))
    }

    /// `let p = e in body` (Cartesian or linear `body`, rewritten by `go`) where `e` reads the
    /// carried array: the new pattern, `e` and `body`, rewritten for the variable `p` binds to
    /// the converted array and for `old`; `None` for any other `let`.
    fn rebind<B: Clone>(
        &mut self,
        p: &Pat,
        e: &Term,
        body: &B,
        go: impl Fn(&mut Convert<'a>, &B) -> B,
    ) -> Option<(Pat, Term, B)> {
        let (p2, sub) = self.repattern(p, e)?;
        let e2 = self.term(e);
        let body2 = match sub {
            Some(mut c) => go(&mut c, body),
            None => body.clone(),
        };
        let body2 = go(self, &body2);
        Some((p2, e2, body2))
    }

    fn pat_at(&self, p: &Pat, rest: &[bool]) -> (Pat, Option<Convert<'a>>) {
        let lv = &self.n.levels[self.k];
        let ty = &self.n.tys[self.k + 1];
        let mut sub = None;
        let p2 = repattern_at(p, rest, &leaf_ty(ty, &lv.keep), &mut |y| {
            let y2 = Var::fresh(y.name.clone(), ty.clone());
            sub = Some(self.n.convert_at(self.k + 1, y, &y2));
            leaf_pat(&y2, &lv.keep)
        });
        (p2, sub)
    }
}

impl Convert<'_> {
    /// A read of first components of the closure array when the converted array holds them
    /// alone ([`Closures::first_only`]): `map (\r -> fst r) rs` is the new array itself, and
    /// `fst (rs ! j)` its element.
    fn first_read(&mut self, t: &Term) -> Option<Term> {
        let is_old = |a: &Term| matches!(&a.kind, TermKind::Var(x) if x.id == self.old);
        match &t.kind {
            TermKind::Map(_, xs) if is_old(xs) => {
                Some(Term::new(TermKind::Var(self.new.clone()), t.span))
            }
            TermKind::Fst(e) => match &e.kind {
                TermKind::Index(a, j) if is_old(a) => {
                    let j = self.term(j);
                    let a = Term::new(TermKind::Var(self.new.clone()), a.span);
                    Some(Term::new(TermKind::Index(a, j), t.span))
                }
                _ => None,
            },
            _ => None,
        }
    }
}

impl Rewrite for Convert<'_> {
    fn term(&mut self, t: &Term) -> Term {
        if self.closures().is_some_and(Closures::first_only)
            && let Some(t2) = self.first_read(t)
        {
            return t2;
        }
        deep(|| match &t.kind {
            _ if renames(t, self.old) => renamed(t, &self.new),
            TermKind::Let(p, e, body) => match self.rebind(p, e, body, |c, b| c.term(b)) {
                Some((p2, e2, body2)) => Term::new(TermKind::Let(p2, e2, body2), t.span),
                None => t.map_children(self),
            },
            _ => t.map_children(self),
        })
    }

    fn linear(&mut self, l: &LTerm) -> LTerm {
        deep(|| match &l.kind {
            LTermKind::Let(p, e, body) if self.repattern(p, e).is_some() => {
                let (p2, e2, body2) = self
                    .rebind(p, e, body, |c, b| c.linear(b))
                    .expect("checked");
                LTerm::new(LTermKind::Let(p2, e2, body2), l.span)
            }
            LTermKind::App(f, x) if self.closures().is_some() && applied(f, self.old).is_some() => {
                let c = self.closures().expect("checked");
                let j = self.term(applied(f, self.old).expect("checked"));
                let x = self.linear(x);
                match &c.maker {
                    Maker::Build(_, i) if c.uses_index => {
                        let body = c.apply(&self.new, &Term::var(i), x);
                        LTerm::new(LTermKind::Let(Pat::Var(i.clone()), j, body), l.span)
                    }
                    _ => c.apply(&self.new, &j, x),
                }
            }
            LTermKind::ZipWith(fs, w)
                if self.closures().is_some()
                    && (matches!(&fs.kind, TermKind::Var(x) if x.id == self.old)
                        || matches!(&fs.kind, TermKind::Map(_, a)
                    if matches!(&a.kind, TermKind::Var(x) if x.id == self.old))) =>
            {
                let c = self.closures().expect("checked");
                let w = self.linear(w);
                let k = match &c.maker {
                    Maker::Build(_, i) => i.clone(),
                    Maker::Map(..) => Var::fresh("i", Ty::Int),
                };
                let n = c
                    .cheap_length()
                    .unwrap_or_else(|| Term::mk(TermKind::Length(Term::var(&self.new))));
                let (arg, outer) = match &w.kind {
                    LTermKind::Replicate(_, a) if latom(a) => (a.clone(), None),
                    LTermKind::Var(_) => {
                        (LTerm::mk(LTermKind::Index(w.clone(), Term::var(&k))), None)
                    }
                    _ => {
                        let ty = w_ty(&c.v, &w);
                        let u = Var::fresh("w", ty);
                        let a = LTerm::mk(LTermKind::Index(LTerm::var(&u), Term::var(&k)));
                        (a, Some(u))
                    }
                };
                let body = c.apply(&self.new, &Term::var(&k), arg);
                let b = LTerm::new(LTermKind::Build(n, k, body), l.span);
                match outer {
                    Some(u) => LTerm::lin_let(&u, w, b),
                    None => b,
                }
            }
            _ => l.map_children(self),
        })
    }
}

/// Whether `c = e` is cheap enough to evaluate again at every use rather than store: an atom, a
/// length or an index of an atom by an atom (under projections), or at most
/// [`REMAT_OPS`] additions, subtractions, multiplications and negations of such terms (of reals
/// or integers), in a tree.
pub(super) fn remat_form(c: &Var, e: &Term) -> bool {
    fn ops(e: &Term, budget: &mut usize) -> bool {
        match &e.kind {
            TermKind::Prim(op, args)
                if matches!(
                    op.name(),
                    "add"
                        | "sub"
                        | "mul"
                        | "neg"
                        | "iadd"
                        | "isub"
                        | "imul"
                        | "ineg"
                        | "decide"
                        | "eq"
                        | "ne"
                        | "lt"
                        | "le"
                        | "gt"
                        | "ge"
                        | "ieq"
                        | "ine"
                        | "ilt"
                        | "ile"
                        | "igt"
                        | "ige"
                ) =>
            {
                if *budget == 0 {
                    return false;
                }
                *budget -= 1;
                args.iter().all(|a| ops(a, budget))
            }
            TermKind::Index(a, i) => is_atomic(a) && ops(i, budget),
            _ => cheap_index(e),
        }
    }
    let mut budget = REMAT_OPS;
    if ops(e, &mut budget) {
        return true;
    }
    // Integer index arithmetic (the offset of a packed triangle, `d + c (2d - c - 1) / 2 + r -
    // c - 1`) is cheaper to recompute than to store: stored, it costs a pair per element (and
    // keeps the array of pairs alive on the tape); recomputed, a few integer instructions.
    let mut budget = REMAT_INT_OPS;
    c.ty == Ty::Int && int_ops(e, &mut budget)
}

/// Whether `e` is at most `budget` integer additions, subtractions, multiplications,
/// divisions, remainders and negations of atoms and lengths of atoms, in a tree.
fn int_ops(e: &Term, budget: &mut usize) -> bool {
    match &e.kind {
        TermKind::Prim(op, args)
            if matches!(
                op.name(),
                "iadd" | "isub" | "imul" | "idiv" | "irem" | "ineg"
            ) =>
        {
            if *budget == 0 {
                return false;
            }
            *budget -= 1;
            args.iter().all(|a| int_ops(a, budget))
        }
        _ => cheap(e),
    }
}

/// The most integer operations a recomputed integer binding may have (see [`remat_form`]).
const REMAT_INT_OPS: usize = 12;

/// The most arithmetic operations a recomputed binding may have (see [`remat_form`]).
const REMAT_OPS: usize = 3;

fn latom(l: &LTerm) -> bool {
    match &l.kind {
        LTermKind::Var(_) | LTermKind::Zero(_) => true,
        LTermKind::Fst(a) | LTermKind::Snd(a) => latom(a),
        _ => false,
    }
}

/// The type of a linear variable for `w : Array L`, where `v : Lin L` is the closure's
/// variable.
fn w_ty(v: &Var, _w: &LTerm) -> Ty {
    let l = v.lin_ty().expect("a linear variable").clone();
    Ty::lin(crate::target::types::LTy::array(l))
}

// ----- arrays whose second components are unused -----

/// The array `e` (`build`, `map` or `map2` of a λ) with its element body replaced by `f` of
/// it; `None` for any other form, or if `f` gives `None`.
pub(super) fn map_body(e: &Term, f: impl FnOnce(&Term) -> Option<Term>) -> Option<Term> {
    let relam = |g: &Term, x: &Var, b: Term| Term::new(TermKind::Lam(x.clone(), b), g.span);
    let kind = match &e.kind {
        TermKind::Build(n, g) => {
            let (i, body) = lam_body(g)?;
            TermKind::Build(n.clone(), relam(g, i, f(body)?))
        }
        TermKind::Map(g, xs) => {
            let (y, body) = lam_body(g)?;
            TermKind::Map(relam(g, y, f(body)?), xs.clone())
        }
        TermKind::Map2(g, xs, ys) => {
            let (y, h) = lam_body(g)?;
            let (z, body) = lam_body(h)?;
            let inner = relam(h, z, f(body)?);
            TermKind::Map2(relam(g, y, inner), xs.clone(), ys.clone())
        }
        _ => return None,
    };
    Some(Term::new(kind, e.span))
}

/// `sndUnused` on an array expression used once: `map (\r -> fst r) (build n (\i -> let bs in
/// (a, b))) ~> build n (\i -> let bs in a)` (and `map`, `map2`).
fn fst_of_elements(xs: &Term) -> Option<Term> {
    map_body(xs, |body| {
        let (lets, core) = lets_of(body);
        let first = match &core.kind {
            // Strict: a second component that may fail is not dropped (theory-notes/09).
            TermKind::Pair(_, b) if super::strict::may_fail(b) => return None,
            TermKind::Pair(a, _) => a.clone(),
            // The value of each branch (`caseProj` inside the element).
            _ => project_branches(core, true)?,
        };
        Some(wrap_lets(&lets, first))
    })
}

/// `sndUnused` on a let-bound array `rs` whose every use in `scope` is `map (\r -> fst r) rs`,
/// `fst (rs ! j)` or `length rs`: the new variable and the array of first components.
fn fst_only_array(rs: &Var, e: &Term, scope: Scope<'_>) -> Option<(Var, Term)> {
    let (a_ty, _) = rs.ty.as_array().and_then(Ty::as_prod)?;
    if !uses_only(rs.id, scope, Kind::FstOnly) {
        return None;
    }
    let e2 = fst_of_elements(e)?;
    Some((Var::fresh(rs.name.clone(), Ty::array(a_ty.clone())), e2))
}

/// Rewrites the scope of an array that keeps only its first components.
struct FstOnly {
    old: VarId,
    new: Var,
}

impl FstOnly {
    fn new(rs: &Var, rs2: &Var) -> FstOnly {
        FstOnly {
            old: rs.id,
            new: rs2.clone(),
        }
    }

    fn is_old(&self, t: &Term) -> bool {
        matches!(&t.kind, TermKind::Var(x) if x.id == self.old)
    }
}

impl Rewrite for FstOnly {
    fn term(&mut self, t: &Term) -> Term {
        deep(|| match &t.kind {
            TermKind::Var(x) if x.id == self.old => {
                Term::new(TermKind::Var(self.new.clone()), t.span)
            }
            TermKind::Map(_, xs) if self.is_old(xs) => {
                Term::new(TermKind::Var(self.new.clone()), xs.span)
            }
            TermKind::Fst(e) if matches!(&e.kind, TermKind::Index(a, _) if self.is_old(a)) => {
                let TermKind::Index(a, j) = &e.kind else {
                    unreachable!("matched above")
                };
                let a2 = Term::new(TermKind::Var(self.new.clone()), a.span);
                Term::new(TermKind::Index(a2, self.term(j)), e.span)
            }
            _ => t.map_children(self),
        })
    }

    fn linear(&mut self, l: &LTerm) -> LTerm {
        deep(|| l.map_children(self))
    }
}

// ----- projections of branches -----

/// `caseProj`: `fst (case e of inl p -> a | inr q -> b) ~> case e of inl p -> fst a | inr q ->
/// fst b` (and `snd`, and `if`); `None` unless `t` is a `case` or an `if`.
fn project_branches(t: &Term, first: bool) -> Option<Term> {
    let proj = |x: &Term| {
        Term::new(
            if first {
                TermKind::Fst(x.clone())
            } else {
                TermKind::Snd(x.clone())
            },
            x.span,
        )
    };
    let kind = match &t.kind {
        TermKind::Case(e, p, a, q, b) => {
            TermKind::Case(e.clone(), p.clone(), proj(a), q.clone(), proj(b))
        }
        TermKind::If(c, a, b) => TermKind::If(c.clone(), proj(a), proj(b)),
        _ => return None,
    };
    Some(Term::new(kind, t.span))
}
