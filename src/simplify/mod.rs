//! The simplifier: named, individually switchable rewrite rules on target terms, run to a fixed
//! point.
//!
//! The AD functors emit correct but administrative code: projections of literal pairs, additions
//! of zero, nested zero tuples from context projections, lets of variables, `(λ̲v. l) • l'`
//! redexes. This module removes them with the rules of the CHAD paper's Appendix B, Table 1, and
//! those the linear fragment needs. It knows nothing about AD: it is a meaning-preserving
//! transformation of [`crate::target`] terms, and the AD modules never call it.
//!
//! ## Meaning and cost
//!
//! Every rule preserves the value of a term (up to runtime errors in code that is discarded: a
//! dead `let x = xs ! 10` no longer fails) and never increases its cost by more than a constant
//! factor, because a rule never copies a computation: only *atoms* (variables, literals,
//! projections of atoms, linear `0`) are copied, and anything else is shared through a `let`.
//! [`Rules`] documents each rule as `lhs ~> rhs`; `theory-notes/04-simplifier.md` gives the
//! argument for each.
//!
//! ## How it runs
//!
//! One *pass* is a single traversal in the style of a shrinking-reduction simplifier: before it,
//! [`occur`] counts every bound variable's occurrences; during it, a substitution maps inlined
//! variables to their terms (ids are unique, so no capture is possible), bindings float to the
//! nearest enclosing *block* (a λ body, a branch, the whole term) on one shared stack, and a use
//! count of the *output* decides, when a block is closed, which bindings are dead and which turned
//! out to be used once and are inlined there ("late inlining"). Per-variable facts live in tables
//! indexed by variable identity, and nodes that come out unchanged are reused, not rebuilt. Each
//! node is visited once (and the bindings of a block once more when it closes with late
//! inlining), so a pass is linear in the size of the term. A pass also reports whether it left
//! anything a further pass could rewrite; passes repeat until one fires nothing or leaves nothing.
//! On the AD output of straight-line programs the first pass reaches the fixed point (see
//! `examples/simplify_scaling.rs` and `benches/simplify.rs`). At each fixed point the array
//! fusion rules (`src/simplify/fuse.rs`) run once over the term; if they fire, the passes resume.
//!
//! ```
//! use chad::internals::simplify::{simplify, simplify_with, Rules};
//! use chad::internals::target::term::{LTerm, Term, Var};
//! use chad::internals::target::types::{LTy, Ty};
//!
//! // fst (x, \v ⊸ 0 + v) ~> x
//! let x = Var::fresh("x", Ty::Real);
//! let v = Var::linear("v", LTy::Real);
//! let d = Term::lin_lam(&v, LTerm::plus(LTerm::zero(LTy::Real), LTerm::var(&v)));
//! let t = Term::fst(Term::pair(Term::var(&x), d));
//! assert_eq!(simplify(&t).to_string(), "x");
//!
//! // With pairProj off, the projection stays.
//! let (kept, stats) = simplify_with(&t, &Rules::all().without("pairProj"));
//! assert_eq!(kept.to_string(), "fst (x, \\v ⊸ v)");
//! assert_eq!(stats.fired["plusZero"], 1);
//! ```

mod fuse;
pub mod inline;
pub mod occur;
mod pass;
mod split;
pub mod strict;
mod table;
mod types;
pub mod unique;

#[cfg(test)]
mod tests;

use crate::target::term::Term;
use std::collections::BTreeMap;

macro_rules! rules {
    ($($(#[doc = $doc:literal])* $field:ident = $name:literal,)*) => {
        /// Which rules are on. Each field documents its rule as `lhs ~> rhs`; [`Rules::NAMES`]
        /// lists the rule names (as in the paper, camelCase) in the order given here.
        #[derive(Clone, Debug, PartialEq, Eq)]
        pub struct Rules {
            $($(#[doc = $doc])* pub $field: bool,)*
        }

        impl Rules {
            /// The names of all rules.
            pub const NAMES: &'static [&'static str] = &[$($name),*];

            /// Every rule on.
            pub fn all() -> Rules {
                Rules { $($field: true,)* }
            }

            /// Every rule off (a simplifier that only rebuilds the term).
            pub fn none() -> Rules {
                Rules { $($field: false,)* }
            }

            /// Whether the rule called `name` is on; `None` for an unknown name.
            pub fn get(&self, name: &str) -> Option<bool> {
                match name {
                    $($name => Some(self.$field),)*
                    _ => None,
                }
            }

            /// Switches the rule called `name`; `false` for an unknown name.
            pub fn set(&mut self, name: &str, on: bool) -> bool {
                match name {
                    $($name => {
                        self.$field = on;
                        true
                    })*
                    _ => false,
                }
            }
        }
    };
}

rules! {
    /// `lamAppLet`: `(\x -> e) a ~> let x = a in e`.
    lam_app_let = "lamAppLet",
    /// `letRotate`: `let p = (let q = a in b) in e ~> let q = a in let p = b in e` (Cartesian
    /// and linear lets alike).
    let_rotate = "letRotate",
    /// `letPairSplit`: `let (p, q) = (a, b) in e ~> let p = a in let q = b in e`, and
    /// `let x = (a, b) in e ~> let x1 = a in let x2 = b in let x = (x1, x2) in e` for
    /// non-atomic `a`, `b` (then `pairProj` resolves `fst x` to `x1`, and `x` dies if nothing
    /// else uses it); also for linear lets.
    let_pair_split = "letPairSplit",
    /// `letInline`: `let x = a in e ~> e[a/x]` when `a` is an atom, or `x` occurs at most once
    /// in `e` and not under a λ (unless `a` is a λ); also for linear lets.
    let_inline = "letInline",
    /// `pairProj`: `fst (a, b) ~> a`, `snd (a, b) ~> b`, also when the pair is let-bound:
    /// `let x = (a, b) in .. fst x .. ~> let x = (a, b) in .. a ..` for an atom `a`; linear too.
    pair_proj = "pairProj",
    /// `pairEta`: `(fst a, snd a) ~> a` for an atom `a`; linear too.
    pair_eta = "pairEta",
    /// `letProj`: `fst (let p = a in e) ~> let p = a in fst e` (and `snd`; linear too).
    let_proj = "letProj",
    /// `letFloat`: a `let` in any other strict position floats out of it, e.g.
    /// `f (let p = a in e) ~> let p = a in f e`, `(let p = a in e, b) ~> let p = a in (e, b)`.
    /// Never out of a λ body or a branch.
    let_float = "letFloat",
    /// `plusZero`: `0 + l ~> l`, `l + 0 ~> l`.
    plus_zero = "plusZero",
    /// `plusPair`: `(a, b) + (c, d) ~> (a + c, b + d)`, also when a side is a linear variable
    /// let-bound to a pair; and projections distribute: `fst (l + l') ~> fst l + fst l'`.
    plus_pair = "plusPair",
    /// `plusLet`: `(let p = a in l) + l' ~> let p = a in l + l'` (either side, either kind of
    /// let).
    plus_let = "plusLet",
    /// `algebra`: constant folding of primitives on literals; `x * 1 ~> x`, `1 * x ~> x`,
    /// `x - 0 ~> x`, `x / 1 ~> x`, `-(-x) ~> x`; linear `1 * l ~> l`, `0 * l ~> 0`, `l + l ~> 2 * l` (for small equal `l`: atoms,
    /// their indexes and scalings; the product rule of `x * x`).
    algebra = "algebra",
    /// `letLamPairSplit`: `let f = \x -> let bs in (a, b) in e ~> let f1 = \x -> let bs_a in a
    /// in let f2 = \x -> let bs_b in b in e[\y -> (f1 y, f2 y)/f]`, when every use of `f` is an
    /// application (so `fst (f t) ~> f1 t`) and each binding of `bs` serves only one half.
    let_lam_pair_split = "letLamPairSplit",
    /// `mapPairSplit`: `let r = map (\x -> (a, b)) xs in e ~> let r1 = map (\x -> a) xs in
    /// let r2 = map (\x -> b) xs in e[r1/map fst r, r2/map snd r]`, when every use of `r` is
    /// `map (\p -> fst p) r` or `map (\p -> snd p) r` (lets in the body split as for
    /// `letLamPairSplit`).
    map_pair_split = "mapPairSplit",
    /// `mapZero`: `lmap f 0 ~> 0`, `lmap (λ̲p. 0) l ~> 0`, `zipWith fs 0 ~> 0`,
    /// `lbuild n (\i -> 0) ~> 0`, `replicate n 0 ~> 0`, `onehot n i 0 ~> 0`.
    map_zero = "mapZero",
    /// `sumZip`: `lsum (lmap f l) ~> f • lsum l` (a sum commutes with a linear map; the paper's
    /// `sum (zip a b) ~> (sum a, sum b)` is the case of a pair of projections).
    sum_zip = "sumZip",
    /// `sumZero`: `lsum 0 ~> 0`.
    sum_zero = "sumZero",
    /// `sumSingleton`: `lsum (onehot n i l) ~> l`.
    sum_singleton = "sumSingleton",
    /// `linBeta`: `(λ̲v. l) • l' ~> let v = l' in l`; for powers `(\b -> l) @ t ~> let b = t in
    /// l`.
    lin_beta = "linBeta",
    /// `linEta`: `λ̲v. f • v ~> f` for an atom `f`.
    lin_eta = "linEta",
    /// `zeroProp`: zero through linear operations: `fst 0 ~> 0`, `(0, 0) ~> 0`, `f • 0 ~> 0`,
    /// `t * 0 ~> 0`, `!t ⊗ 0 ~> 0`, `copowfold f 0 ~> 0`, `0 ! i ~> 0`, `0 @ t ~> 0`,
    /// `\b -> 0 ~> 0`, `fromLeft 0 ~> 0`, `linl 0 ~> 0`.
    zero_prop = "zeroProp",
    /// `copowSingleton`: `copowfold f (!t ⊗ l) ~> f t • l`.
    copow_singleton = "copowSingleton",
    /// `deadLet`: `let p = a in e ~> e` when no variable of `p` occurs in `e` (unused variables
    /// of a pattern become `_`); also for linear lets.
    dead_let = "deadLet",
    /// `caseKnown`: `case inl a of inl p -> e | inr q -> e' ~> let p = a in e` (and `inr`),
    /// `if true then e else e' ~> e` (and `false`), `fromLeft (linl l) ~> l`,
    /// `fromLeft (linr l) ~> 0` (and `fromRight`).
    case_known = "caseKnown",
    /// `closureConvert`: an array `rs = build n (\i -> let bs in (a, λ̲v. l))` (or a `map`,
    /// `map2`) used only as `map fst rs`, `fst (rs ! j)`, `length rs`, `snd (rs ! j) • l'`,
    /// `zipWith (map snd rs) w` stores the closure's environment `cs` (the variables of `bs` and
    /// the map's parameters that `l` uses) instead of the closure: `snd (rs ! j) • l' ~> let i =
    /// j in let cs = snd (rs ! i) in let v = l' in l`, `zipWith (map snd rs) w ~> lbuild n (\i
    /// -> let cs = snd (rs ! i) in let v = w ! i in l)` (see `src/simplify/fuse.rs`). Also when
    /// such an array is carried in the tuples of an outer array's elements (a loop's tape),
    /// at any depth, and read at the outer uses by `let (.., r, ..) = snd (outer ! j)`: the
    /// tuple holds the environments and the outer element's variables that the code reads,
    /// and the code moves to the uses of `r`.
    closure_convert = "closureConvert",
    /// `sndUnused`: an array of pairs whose second components are never used keeps only the
    /// first: `map (\r -> fst r) (build n (\i -> let bs in (a, b))) ~> build n (\i -> let bs in
    /// a)`, and for `let rs = build n (..)` whose every use is `map (\r -> fst r) rs`,
    /// `fst (rs ! j)` or `length rs`, those become `rs'`, `rs' ! j` and `length rs'` (also for
    /// `map` and `map2`; see `src/simplify/fuse.rs`). Also a component of the elements' tuples
    /// that no use reads (every `let p = proj (rs ! j)` binds nothing there) becomes `()`.
    snd_unused = "sndUnused",
    /// `cse`: `let x = p a b in .. p a b .. ~> let x = p a b in .. x ..` for a primitive `p` on
    /// atoms, when the `let` is in scope (binders are unique and the language is pure, so the
    /// application is `x`): a derivative such as `sqrt`'s `0.5 / sqrt x` or `exp`'s `exp x`
    /// reads the primal's result instead of computing it again in the linear map.
    cse = "cse",
    /// `mapCse`: `let r = map (\b -> p b) xs in .. map (\a -> .. p a ..) xs .. ~> let r = .. in
    /// .. map2 (\a -> \t -> .. t ..) xs r ..` for a primitive `p` on the parameter and atoms
    /// and the same atom `xs` (and `map (\a -> p a) xs ~> r`): element `i` of `r` is `p (xs !
    /// i)`, already computed (see `src/simplify/fuse.rs`). The MLP's `tanh'` reads the layer's
    /// `map tanh` instead of computing `tanh` twice per element.
    map_cse = "mapCse",
    /// `buildProj`: `let lin cs = lbuild n (\i -> let bs in t)` used only as `P (lsum cs)` and
    /// `lmap (λ̲p. P p) cs` (`P` a path of projections) ~> each use `lsum (lbuild n (\i -> let
    /// bs in P t))` or `lbuild n (\i -> let bs in P t)`, and `0` where `P t` is a literal zero;
    /// with more than one non-zero use only if `n` and `bs` are cheap (see
    /// `src/simplify/fuse.rs`). GMM's `lbuild (0, v, -v)` of `x - μ` becomes two arrays.
    build_proj = "buildProj",
    /// `caseProj`: a projection of a `case` (or `if`, or a linear `case`) moves into its
    /// branches, and a linear `case` of pairs on an atom (or an index of one), binding nothing,
    /// is a pair of `case`s; then `pairProj`
    /// can resolve it: `fst (case e of inl p -> a | inr q -> b) ~> case e of inl p -> fst a |
    /// inr q -> fst b`, and `let (x, _) = case .. in e ~> let x = fst (case ..) in e` first
    /// (see `src/simplify/fuse.rs`). The derivative of an `if` pairs each branch's value with its derivative;
    /// when only the value is used, no linear closure is built per evaluation.
    case_proj = "caseProj",
    /// `caseSplit`: in the element of a let-bound array, `case s of inl p -> let bs1 in (a1,
    /// λ̲v. l1) | inr q -> let bs2 in (a2, λ̲w. l2) ~> let s' = s in (case s' of inl p -> let bs1
    /// in a1 | inr q -> let bs2 in a2, λ̲v. case s' of inl p -> l1 | inr q -> l2[v/w])` when the
    /// maps need nothing the branches bind (apart from cheap bindings, evaluated again), and
    /// otherwise the same with a sum carrying each branch's value and the variables its map
    /// needs (see `src/simplify/split.rs`): the branch's choice of linear map becomes a linear
    /// `case` inside one map, which `closureConvert` can store.
    case_split = "caseSplit",
    /// `sumBuildProj`: `fst (lsum (lbuild n (\j -> l))) ~> lsum (lbuild n (\j -> fst l))` (and
    /// `snd`).
    sum_build_proj = "sumBuildProj",
    /// `sumBuildSplit`: `lsum (lbuild n (\j -> let bs in (l1, l2))) ~> (lsum (lbuild n (\j -> let
    /// bs1 in l1)), lsum (lbuild n (\j -> let bs2 in l2)))`, and the same for `l1 + l2` with a
    /// one-hot summand, when only cheap bindings are needed by both halves.
    sum_build_split = "sumBuildSplit",
    /// `sumBuildOneHot`: `lsum (lbuild n (\j -> let bs in onehot m j l)) ~> lbuild n (\j -> let
    /// bs in l)` when `m` is provably `n`.
    sum_build_one_hot = "sumBuildOneHot",
    /// `plusOneHot`: `onehot m i a + onehot m i b ~> onehot m i (a + b)` (over a `+`-tree, with
    /// lengths compared as for `sumBuildOneHot`).
    plus_one_hot = "plusOneHot",
}

impl Default for Rules {
    /// Every rule on.
    fn default() -> Rules {
        Rules::all()
    }
}

impl Rules {
    /// These rules with one switched off. Panics on an unknown name (a programming error).
    pub fn without(mut self, name: &str) -> Rules {
        assert!(self.set(name, false), "no simplifier rule `{name}`");
        self
    }

    /// Only the named rules on. Panics on an unknown name (a programming error).
    pub fn only(names: &[&str]) -> Rules {
        let mut r = Rules::none();
        for n in names {
            assert!(r.set(n, true), "no simplifier rule `{n}`");
        }
        r
    }
}

/// The most passes [`simplify_with`] runs. Every rule shrinks the term or moves a `let` outward,
/// so the fixed point comes long before this on any term we have seen; the cap only guards
/// against a rule interaction we have not.
pub const MAX_PASSES: usize = 64;

/// What a simplification did.
#[derive(Clone, Debug, Default)]
pub struct Stats {
    /// Passes run: the last one fired nothing, or left nothing another pass would rewrite
    /// (unless [`MAX_PASSES`] was reached).
    pub passes: usize,
    /// How often each rule fired, over all passes (rules that never fired are absent).
    pub fired: BTreeMap<&'static str, usize>,
}

/// Simplifies with every rule on.
pub fn simplify(t: &Term) -> Term {
    simplify_with(t, &Rules::all()).0
}

/// Simplifies with the given rules, to a fixed point. Free variables of `t` stay free.
pub fn simplify_with(t: &Term, rules: &Rules) -> (Term, Stats) {
    simplify_passes(t, rules, MAX_PASSES)
}

/// [`simplify_with`] stopping after at most `max_passes` passes (for inspecting the
/// intermediate terms).
pub fn simplify_passes(t: &Term, rules: &Rules, max_passes: usize) -> (Term, Stats) {
    let mut stats = Stats::default();
    let mut cur = t.clone();
    while stats.passes < max_passes {
        stats.passes += 1;
        let pass::Outcome {
            term,
            fired,
            dirty,
            arrays,
            branches,
        } = pass::run(&cur, rules);
        cur = term;
        let (idle, fixed) = (fired.is_empty(), fired.is_empty() || !dirty);
        for (k, n) in fired {
            *stats.fired.entry(k).or_default() += n;
        }
        if !fixed {
            continue;
        }
        // The main pass is at a fixed point (it fired nothing, or left nothing another pass
        // would rewrite: see `pass::late`; debug builds check).
        debug_assert!(
            idle || pass::run(&cur, rules).fired.is_empty(),
            "a pass reported a fixed point, but another fires {:?} on\n{cur}",
            pass::run(&cur, rules).fired
        );
        if stats.passes == max_passes || !(arrays || branches && fuse::case_proj_redex(&cur)) {
            // Without array forms, `caseProj` is the only fusion rule that could fire.
            debug_assert!(
                stats.passes == max_passes || fuse::run(&cur, rules).1.is_empty(),
                "the fusion rules fire on a term without array forms or caseProj redexes:\n{cur}"
            );
            break;
        }
        // The array fusion rules, whose output the next main pass cleans up.
        let (out, f) = fuse::run(&cur, rules);
        cur = out;
        if f.is_empty() {
            break;
        }
        for (k, n) in f {
            *stats.fired.entry(k).or_default() += n;
        }
    }
    (cur, stats)
}
