//! Compilation of typed terms into combinators (Curien's categorical abstract machine
//! translation). See `theory-notes/01-free-ccc.md` for a worked example.
//!
//! A term `Γ ⊢ t : τ` becomes `⟦t⟧ : ⟦Γ⟧ → τ`, where `⟦Γ⟧` is a nested product holding the
//! values of the binders in scope. The entry point's parameters `x1 : A1, ..., xn : An` are the
//! snoc-list product `((1 × A1) × A2) × ... × An`. A binder that binds a pattern (a tuple `let`)
//! adds one component holding the whole value; its variables are projection paths into that
//! component.
//!
//! **Contexts are skew-binary random-access lists** (Okasaki), so that a variable `k` binders
//! back is a chain of O(log k) projections, not `k` (a snoc-list made the derivative code of a
//! long program whose lines mention an early variable quadratic: the chain and, in reverse
//! mode, a `k`-deep tuple of zeros for its cotangent; `theory-notes/06-performance.md`). The
//! context is a *spine* `(..((1 × t₁) × t₂) .. × tₘ)` of trees, newest outermost; a tree is a
//! leaf (one binder's value) or `((older, newer), root)` with two trees of equal size. A new
//! binder is always a leaf, `Γ × A`, so a combinator that receives its context and argument as
//! a pair (`curry`, `dist`, `map`, `build`) fits as in the snoc-list. Before that, if
//! `Γ = ((ρ × t₁) × t₂) × a` with `t₁`, `t₂` of equal size and `a` a leaf, the three are merged:
//! `σ : Γ → ρ × ((t₁ × t₂) × a)`, the tuple of projections `⟨fst³, ⟨⟨snd ∘ fst², snd ∘ fst⟩,
//! snd⟩⟩` (one [`CombKind::Tuple`] node). Trees therefore have `2ʰ - 1` binders, at most two
//! trees of the spine have the same size, and the spine has O(log n) trees. The parameters of
//! the entry point are never merged, so its domain stays the snoc-list ([`context_type`]).
//!
//! ```text
//! ⟦x⟧                   = π_x (the chain to x's binder, then the pattern path)
//! ⟦c⟧                   = c ∘ bang                                 (literals)
//! ⟦let p = s in t⟧      = ⟦t⟧ ∘ ⟨σ, ⟦s⟧⟩                     (σ = id when nothing merges)
//! ⟦\x. t⟧               = curry (⟦t⟧ ∘ ⟨σ ∘ fst, snd⟩)       (the rearrangement omitted when
//!                                                            σ = id, here and below)
//! ⟦f a⟧                 = eval ∘ ⟨⟦f⟧, ⟦a⟧⟩
//! ⟦(a, b)⟧ / fst / snd  = ⟨⟦a⟧, ⟦b⟧⟩ / fst ∘ ⟦e⟧ / snd ∘ ⟦e⟧
//! ⟦op(a1, ..., an)⟧     = op ∘ ⟨⟦a1⟧, ⟨..., ⟦an⟧⟩⟩
//! ⟦inl e⟧               = inl ∘ ⟦e⟧
//! ⟦case s of inl p → a | inr q → b⟧ = [⟦a⟧ ∘ ⟨σ ∘ fst, snd⟩, ⟦b⟧ ∘ ..] ∘ dist ∘ ⟨id, ⟦s⟧⟩
//! ⟦if c then a else b⟧  = [⟦a⟧ ∘ fst, ⟦b⟧ ∘ fst] ∘ dist ∘ ⟨id, decide ∘ ⟦c⟧⟩
//! ⟦map (\x. t) xs⟧      = map(⟦t⟧ ∘ ⟨σ ∘ fst, snd⟩) ∘ ⟨id, ⟦xs⟧⟩   (the body sees the context)
//! ⟦map f xs⟧            = map(eval) ∘ ⟨⟦f⟧, ⟦xs⟧⟩          (any other function value)
//! ⟦map2 (\a b. t) xs ys⟧= map2(⟦t⟧' ∘ ⟨⟨σ ∘ fst, fst ∘ snd⟩, snd ∘ snd⟩) ∘ ⟨id, ⟨⟦xs⟧, ⟦ys⟧⟩⟩
//! ⟦build n (\i. t)⟧     = build(⟦t⟧ ∘ ⟨σ ∘ fst, snd⟩) ∘ ⟨id, ⟦n⟧⟩
//! ⟦xs ! i⟧ / length / replicate / [e1..en] = index ∘ ⟨⟦xs⟧, ⟦i⟧⟩ / length ∘ ⟦xs⟧ / ...
//! ⟦loop (\s. t) x⟧      = it(⟦t⟧') ∘ ⟨⟨..⟨bang, π_y1⟩.., π_ym⟩, ⟦x⟧⟩  (y1..ym: the variables
//!                                           in scope that t uses; ⟦t⟧' compiled in y1..ym, s)
//!                       = it(⟦t⟧ ∘ ⟨σ ∘ fst, snd⟩) ∘ ⟨id, ⟦x⟧⟩   (when t uses every binder)
//! ⟦loopTape (\s. t) x⟧  = itTape(..), exactly as `loop` (what `scan` desugars to)
//! ```
//!
//! A loop's step captures only the variables it uses. Its derivative's environment
//! (co)tangent, carried through every step and spelled out as a tuple when derivative code is
//! concretised (`theory-notes/12-nested-ad.md`), is then as large as what the step reads,
//! not as large as everything in scope: with the whole context, a program with `k` loops one
//! after the other had second-order code of size O(k²).
//!
//! A function value passed to `map`, `map2` or `build` is evaluated once, not per element.

use super::{Comb, CombKind, Path, Projs, Step};
use crate::deep::deep;
use crate::error::Span;
use crate::prim;
use crate::source::term::{Entry, Lit, Pat, Term, TermKind, Var, VarId};
use crate::types::Type;
use smallvec::SmallVec;
use std::collections::HashMap;
use std::rc::Rc;

/// The context object `((1 × A1) × A2) × ... × An` of the given variables.
pub fn context_type(vars: &[Var]) -> Type {
    vars.iter()
        .fold(Type::Unit, |g, v| Type::prod(g, v.ty.clone()))
}

/// Compiles an entry point: a combinator from the context of its parameters to its result.
pub fn compile_entry(entry: &Entry) -> Comb {
    compile(&entry.params, &entry.body)
}

/// Compiles `x1 : A1, ..., xn : An ⊢ t : τ` into `((1 × A1) × ... × An) → τ`.
pub fn compile(params: &[Var], t: &Term) -> Comb {
    let mut c = Compiler {
        levels: vec![Level {
            ty: Type::Unit,
            spine: None,
        }],
        vars: HashMap::new(),
    };
    for p in params {
        let ext = c.bind(&Pat::Var(p.clone()), true);
        debug_assert!(ext.is_none(), "parameters are never merged");
    }
    c.term(t)
}

/// One tree of a context's spine: the values of `size` consecutive binders (`2ʰ - 1` of them),
/// the newest, binder number `last`, at the root. A leaf is the bound value itself; a node is
/// `((older, newer), root)` with two trees of equal size.
struct Tree {
    size: usize,
    last: usize,
    /// A parameter of the entry point: never merged, so the entry's domain is the snoc-list.
    frozen: bool,
    ty: Type,
}

/// A context with at least one binder: `rest × tree` (`ty`), newest tree outermost.
struct Spine {
    tree: Tree,
    ty: Type,
    rest: Option<Rc<Spine>>,
}

/// The context after some binders: its object and its spine (`None`: the empty context `1`).
#[derive(Clone)]
struct Level {
    ty: Type,
    spine: Option<Rc<Spine>>,
}

struct Compiler {
    /// `levels[k]` is the context with `k` binders.
    levels: Vec<Level>,
    /// Where each variable lives: its binder's number and its path inside the bound value.
    vars: HashMap<VarId, (usize, SmallVec<[Step; 4]>)>,
}

/// The steps from the root of a tree (`size`, newest binder `last`) to binder `b`'s value.
fn tree_path(mut size: usize, mut last: usize, b: usize, steps: &mut SmallVec<[Step; 4]>) {
    while size > 1 && b != last {
        let half = (size - 1) / 2;
        steps.push(Step::Fst);
        if b + half < last {
            // The older subtree: binders `last - size + 1 ..= last - 1 - half`.
            steps.push(Step::Fst);
            last -= 1 + half;
        } else {
            steps.push(Step::Snd);
            last -= 1;
        }
        size = half;
    }
    if size > 1 {
        steps.push(Step::Snd);
    }
    debug_assert_eq!(b, last, "internal error: binder outside its tree");
}

impl Compiler {
    fn ctx(&self) -> &Type {
        &self.levels.last().expect("at least the empty context").ty
    }

    /// Binds the value of pattern `p` as the next binder, a leaf: the context `Γ` becomes
    /// `Γ' × A`, where `Γ'` is `Γ` or, when `Γ = ((ρ × t₁) × t₂) × a` with `t₁`, `t₂` trees of
    /// the same size and `a` a leaf, the merged `ρ × ((t₁ × t₂) × a)` (skew-binary merge).
    /// Returns the rearrangement `σ : Γ → Γ'` (a [`Projs`] tuple), or `None` if `Γ' = Γ`.
    fn bind(&mut self, p: &Pat, frozen: bool) -> Option<Comb> {
        let level = self.levels.len() - 1;
        fn walk(
            p: &Pat,
            path: &mut SmallVec<[Step; 4]>,
            level: usize,
            out: &mut HashMap<VarId, (usize, SmallVec<[Step; 4]>)>,
        ) {
            deep(|| match p {
                Pat::Var(v) => {
                    out.insert(v.id, (level, path.clone()));
                }
                Pat::Wild(_) => {}
                Pat::Pair(a, b) => {
                    path.push(Step::Fst);
                    walk(a, path, level, out);
                    path.pop();
                    path.push(Step::Snd);
                    walk(b, path, level, out);
                    path.pop();
                }
            })
        }
        walk(p, &mut SmallVec::new(), level, &mut self.vars);
        let top = self
            .levels
            .last()
            .expect("at least the empty context")
            .clone();
        let mergeable = |n: &Rc<Spine>| !n.tree.frozen;
        let merge = match &top.spine {
            Some(a) if !frozen && mergeable(a) => match &a.rest {
                Some(t2) if mergeable(t2) => match &t2.rest {
                    Some(t1) if mergeable(t1) && t1.tree.size == t2.tree.size => {
                        Some((t1.clone(), t2.clone(), a.clone()))
                    }
                    _ => None,
                },
                _ => None,
            },
            _ => None,
        };
        let (below, sigma) = match merge {
            None => (top.clone(), None),
            Some((t1, t2, a)) => {
                let rest = t1.rest.clone();
                let rest_ty = rest.as_ref().map_or(Type::Unit, |r| r.ty.clone());
                let tree_ty = Type::prod(
                    Type::prod(t1.tree.ty.clone(), t2.tree.ty.clone()),
                    a.tree.ty.clone(),
                );
                let ty = Type::prod(rest_ty, tree_ty.clone());
                // ⟨fst³, ⟨⟨snd ∘ fst², snd ∘ fst⟩, snd⟩⟩
                let projs = Projs::pair(
                    Projs::leaf(3, &[]),
                    Projs::pair(
                        Projs::pair(Projs::leaf(2, &[Step::Snd]), Projs::leaf(1, &[Step::Snd])),
                        Projs::leaf(0, &[Step::Snd]),
                    ),
                );
                let sigma = Comb::tuple_to(&top.ty, projs, ty.clone());
                let tree = Tree {
                    size: 2 * t1.tree.size + 1,
                    last: a.tree.last,
                    frozen: false,
                    ty: tree_ty,
                };
                let merged = Rc::new(Spine {
                    tree,
                    ty: ty.clone(),
                    rest,
                });
                let below = Level {
                    ty,
                    spine: Some(merged),
                };
                (below, Some(sigma))
            }
        };
        let a = p.ty();
        let ty = Type::prod(below.ty.clone(), a.clone());
        let tree = Tree {
            size: 1,
            last: level,
            frozen,
            ty: a,
        };
        let spine = Rc::new(Spine {
            tree,
            ty: ty.clone(),
            rest: below.spine,
        });
        self.levels.push(Level {
            ty,
            spine: Some(spine),
        });
        sigma
    }

    fn pop(&mut self, p: &Pat) {
        deep(|| {
            for v in p.vars() {
                self.vars.remove(&v.id);
            }
            self.levels.pop();
        })
    }

    /// Compiles `t` in the context extended by `p`: a combinator `Γ × A → τ`.
    fn under(&mut self, p: &Pat, t: &Term) -> Comb {
        let outer = self.ctx().clone();
        let sigma = self.bind(p, false);
        let c = self.term(t);
        self.pop(p);
        match sigma {
            // ⟨σ ∘ fst, snd⟩ : Γ × A → Γ' × A
            Some(sigma) => {
                let CombKind::Tuple(projs) = &sigma.kind else {
                    unreachable!("a rearrangement is a tuple of projections")
                };
                let projs = Projs::pair(projs.after_fst(), Projs::leaf(0, &[Step::Snd]));
                let (dom, cod) = (Type::prod(outer, p.ty()), c.dom.clone());
                Comb::compose(c, Comb::tuple_to(&dom, projs, cod))
            }
            None => c,
        }
    }

    fn var(&self, v: &Var) -> Comb {
        let (level, inner) = self
            .vars
            .get(&v.id)
            .unwrap_or_else(|| panic!("internal error: unbound variable {v:?} in compile"));
        let top = self.levels.last().expect("at least the empty context");
        // Out along the spine to the tree holding the binder, then down that tree.
        let mut skip = 0;
        let mut node = top.spine.as_ref();
        let tree = loop {
            let n = node.unwrap_or_else(|| panic!("internal error: {v:?} is not in context"));
            if n.tree.last + 1 - n.tree.size <= *level {
                break &n.tree;
            }
            skip += 1;
            node = n.rest.as_ref();
        };
        let mut steps: SmallVec<[Step; 4]> = SmallVec::new();
        steps.push(Step::Snd);
        tree_path(tree.size, tree.last, *level, &mut steps);
        steps.extend(inner.iter().copied());
        Comb::proj_to(self.ctx(), Path { skip, steps }, v.ty.clone())
    }

    /// The variables in scope that `t` uses, each once, in order of first use. (A variable
    /// bound inside `t` whose identity is also bound outside counts too: one more component
    /// than needed, never one too few.)
    fn captured(&self, t: &Term) -> Vec<Var> {
        let mut seen = std::collections::HashSet::new();
        let mut out = Vec::new();
        let mut stack = vec![t];
        while let Some(t) = stack.pop() {
            if let TermKind::Var(v) = &t.kind
                && self.vars.contains_key(&v.id)
                && seen.insert(v.id)
            {
                out.push(v.clone());
            }
            stack.extend(t.children().into_iter().rev());
        }
        out
    }

    /// `⟨c1, ⟨c2, ... cn⟩⟩`, or `bang` for none.
    fn tuple(&mut self, ts: &[Term]) -> Comb {
        deep(|| match ts {
            [] => Comb::bang(self.ctx()),
            [t] => self.term(t),
            [t, rest @ ..] => {
                let a = self.term(t);
                let b = self.tuple(rest);
                Comb::pair(a, b)
            }
        })
    }

    /// `⟨id, c⟩`: pairs the context with the value of `c` (for `dist`, `map`, `build`, whose
    /// combinators take `Γ × A`).
    fn extend(&self, c: Comb) -> Comb {
        Comb::pair(Comb::id(self.ctx()), c)
    }

    fn term(&mut self, t: &Term) -> Comb {
        let c = deep(|| self.term_inner(t));
        // The typing judgement Γ ⊢ t : τ becomes ⟦t⟧ : Γ → τ, at every subterm. (The domain
        // check is O(1): the context type is shared, so equality stops at the pointer. The
        // codomain is built anew by the combinators, so comparing it is O(size of τ) per
        // subterm, quadratic on a 10⁴-tuple: checked in debug builds, and by the tests' type
        // reconstruction model, `ccc::typing`.)
        assert!(
            c.dom == *self.ctx(),
            "internal error: compiled {t} to a combinator from {}, expected {}",
            c.dom,
            self.ctx()
        );
        debug_assert!(
            c.cod == t.ty,
            "internal error: compiled {t} to a combinator of type {} → {}, expected {} → {}",
            c.dom,
            c.cod,
            self.ctx(),
            t.ty
        );
        c
    }

    fn term_inner(&mut self, t: &Term) -> Comb {
        use TermKind as K;
        let span = t.span;
        match &t.kind {
            K::Var(v) => self.var(v),
            K::Lit(Lit::Unit) => Comb::bang(self.ctx()),
            K::Lit(l) => Comb::compose(Comb::constant(*l), Comb::bang(self.ctx())),
            K::Lam(x, b) => Comb::curry(self.under(&Pat::Var(x.clone()), b)),
            K::App(f, a) => {
                let (dom, cod) = f.ty.as_fun().expect("typed");
                let (dom, cod) = (dom.clone(), cod.clone());
                let fc = self.term(f);
                let ac = self.term(a);
                Comb::compose(Comb::eval(&dom, &cod), Comb::pair(fc, ac))
            }
            K::Let(p, e, b) => {
                let ec = self.term(e);
                let g = self.ctx().clone();
                // ⟨id, s⟩, or ⟨σ, s⟩ when binding rearranges the context.
                let keep = self.bind(p, false).unwrap_or_else(|| Comb::id(&g));
                let ext = Comb::pair(keep, ec);
                let bc = self.term(b);
                self.pop(p);
                Comb::compose(bc, ext)
            }
            K::Pair(a, b) => {
                let ac = self.term(a);
                let bc = self.term(b);
                Comb::pair(ac, bc)
            }
            K::Fst(e) => {
                let ec = self.term(e);
                let f = Comb::fst_of(&ec.cod);
                Comb::compose(f, ec)
            }
            K::Snd(e) => {
                let ec = self.term(e);
                let s = Comb::snd_of(&ec.cod);
                Comb::compose(s, ec)
            }
            K::If(c, a, b) => {
                let cc = Comb::compose(Comb::prim(prim::op("decide"), span), self.term(c));
                let g = self.ctx().clone();
                let ac = Comb::compose(self.term(a), Comb::fst(&g, &Type::Unit));
                let bc = Comb::compose(self.term(b), Comb::fst(&g, &Type::Unit));
                let sel = Comb::compose(Comb::dist(&g, &Type::Unit, &Type::Unit), self.extend(cc));
                Comb::compose(Comb::copair(ac, bc), sel)
            }
            K::Inl(e, r) => {
                let ec = self.term(e);
                let i = Comb::inl(&ec.cod, r);
                Comb::compose(i, ec)
            }
            K::Inr(l, e) => {
                let ec = self.term(e);
                let i = Comb::inr(l, &ec.cod);
                Comb::compose(i, ec)
            }
            K::Case(s, p, a, q, b) => {
                let sc = self.term(s);
                let g = self.ctx().clone();
                let (l, r) = s.ty.as_sum().expect("typed");
                let d = Comb::dist(&g, l, r);
                let sel = Comb::compose(d, self.extend(sc));
                let ac = self.under(p, a);
                let bc = self.under(q, b);
                Comb::compose(Comb::copair(ac, bc), sel)
            }
            K::Prim(op, args) => {
                let args = self.tuple(args);
                Comb::compose(Comb::prim(op.clone(), span), args)
            }
            K::Array(elem, items) => {
                let args = self.tuple(items);
                Comb::compose(Comb::array(elem, items.len()), args)
            }
            K::Map(f, xs) => {
                let xc = self.term(xs);
                match &f.kind {
                    K::Lam(x, body) => {
                        let bc = self.under(&Pat::Var(x.clone()), body);
                        Comb::compose(Comb::map(bc), self.extend(xc))
                    }
                    _ => {
                        let (a, b) = f.ty.as_fun().expect("typed");
                        let fc = self.term(f);
                        Comb::compose(Comb::map(Comb::eval(a, b)), Comb::pair(fc, xc))
                    }
                }
            }
            K::Map2(f, xs, ys) => self.map2(f, xs, ys, span),
            K::Build(n, f) => {
                let nc = self.term(n);
                match &f.kind {
                    K::Lam(i, body) => {
                        let bc = self.under(&Pat::Var(i.clone()), body);
                        Comb::compose(Comb::build(bc, span), self.extend(nc))
                    }
                    _ => {
                        // build(eval) ∘ ⟨snd, fst⟩ ∘ ⟨n, f⟩: n is evaluated before f.
                        let fty = f.ty.clone();
                        let (_, a) = fty.as_fun().expect("typed");
                        let fc = self.term(f);
                        let swap =
                            Comb::pair(Comb::snd(&Type::Int, &fty), Comb::fst(&Type::Int, &fty));
                        let b = Comb::build(Comb::eval(&Type::Int, a), span);
                        Comb::compose(b, Comb::compose(swap, Comb::pair(nc, fc)))
                    }
                }
            }
            K::Index(xs, i) => {
                let xc = self.term(xs);
                let ic = self.term(i);
                Comb::compose(Comb::index(&t.ty, span), Comb::pair(xc, ic))
            }
            K::Length(xs) => {
                let xc = self.term(xs);
                let elem = xs.ty.as_array().expect("typed");
                Comb::compose(Comb::length(elem), xc)
            }
            K::Replicate(n, x) => {
                let nc = self.term(n);
                let xc = self.term(x);
                Comb::compose(Comb::replicate(&x.ty, span), Comb::pair(nc, xc))
            }
            K::Loop(f, x, tape) => match &f.kind {
                // loop (\s -> body) x = it(body') ∘ ⟨id, x'⟩ (body' in the context Γ, s), or
                // it(body'') ∘ ⟨⟨π_y1, .., π_ym⟩, x'⟩ (body'' in the context y1, .., ym, s of
                // the variables the step uses) when those are fewer than Γ's binders.
                K::Lam(s, body) => {
                    let xc = self.term(x);
                    let env = self.captured(body);
                    if env.len() + 1 < self.levels.len() {
                        let tuple = env
                            .iter()
                            .fold(Comb::bang(self.ctx()), |g, y| Comb::pair(g, self.var(y)));
                        let mut params = env;
                        params.push(s.clone());
                        let bc = compile(&params, body);
                        return Comb::compose(Comb::iter(bc, span, *tape), Comb::pair(tuple, xc));
                    }
                    let bc = self.under(&Pat::Var(s.clone()), body);
                    Comb::compose(Comb::iter(bc, span, *tape), self.extend(xc))
                }
                // loop f x = it(eval) ∘ ⟨f', x'⟩ (the closure is the loop's context)
                _ => {
                    let (a, ab) = f.ty.as_fun().expect("typed");
                    let fc = self.term(f);
                    let xc = self.term(x);
                    let it = Comb::iter(Comb::eval(a, ab), span, *tape);
                    Comb::compose(it, Comb::pair(fc, xc))
                }
            },
            K::Fix(f) => self.fix(f, span),
        }
    }

    /// `fix F` (`F : (A → B) → (A → B)`) in the context `Γ`, lambda-lifted: `curry(fix(h))`
    /// with `h : ((Γ × A) ⇒ B) × (Γ × A) → B` and `Z = Γ × A`, where `h (s, (γ, a))` runs the
    /// body with the recursive function bound to `λa'. s (γ, a')` (a closure over `s` and
    /// `γ`). So the fixpoint itself is closed, and the context reaches the recursive calls
    /// as part of their argument. For `F = \g -> \x -> body`, `h` is `body` compiled in
    /// `Γ, g, x`; for any other `F`, `h = eval ∘ ⟨eval ∘ ⟨F' ∘ γ, g⟩, a⟩`.
    fn fix(&mut self, f: &Term, span: Span) -> Comb {
        use TermKind as K;
        let (gt, _) = f.ty.as_fun().expect("typed");
        let (a, b) = gt.as_fun().expect("typed");
        let (a, b) = (a.clone(), b.clone());
        let g = self.ctx().clone();
        let z = Type::prod(g.clone(), a.clone());
        let zb = Type::fun(z.clone(), b.clone());
        let d = Type::prod(zb.clone(), z.clone());
        let s = Comb::fst_of(&d);
        let zz = Comb::snd_of(&d);
        let gamma = Comb::compose(Comb::fst_of(&z), zz.clone());
        let arg = Comb::compose(Comb::snd_of(&z), zz);
        // k : ((Z ⇒ B) × Γ) × A → B = eval ∘ ⟨fst ∘ fst, ⟨snd ∘ fst, snd⟩⟩
        let sg = Type::prod(zb.clone(), g.clone());
        let k_dom = Type::prod(sg.clone(), a.clone());
        let k_fst = Comb::fst_of(&k_dom);
        let k = Comb::compose(
            Comb::eval(&z, &b),
            Comb::pair(
                Comb::compose(Comb::fst_of(&sg), k_fst.clone()),
                Comb::pair(
                    Comb::compose(Comb::snd_of(&sg), k_fst),
                    Comb::snd_of(&k_dom),
                ),
            ),
        );
        let rec = Comb::compose(Comb::curry(k), Comb::pair(s, gamma.clone()));
        let h = match &f.kind {
            K::Lam(gv, inner) if matches!(inner.kind, K::Lam(..)) => {
                let K::Lam(x, body) = &inner.kind else {
                    unreachable!("matched above")
                };
                let pg = Pat::Var(gv.clone());
                let sigma = self.bind(&pg, false);
                let bodyc = self.under(&Pat::Var(x.clone()), body);
                self.pop(&pg);
                // σ : Γ → Γ' rearranges the context before `g` is bound (skew-binary merge).
                let gamma = match sigma {
                    Some(sigma) => Comb::compose(sigma, gamma),
                    None => gamma,
                };
                let ctx = Comb::pair(gamma, rec);
                Comb::compose(bodyc, Comb::pair(ctx, arg))
            }
            _ => {
                let fc = self.term(f);
                let inner = Comb::compose(
                    Comb::eval(gt, gt),
                    Comb::pair(Comb::compose(fc, gamma), rec),
                );
                Comb::compose(Comb::eval(&a, &b), Comb::pair(inner, arg))
            }
        };
        Comb::curry(Comb::fix(h, span))
    }

    /// `map2 f xs ys`. The mapped combinator `h : Γ' × (A × B) → C` is built from the lambda
    /// body when `f` is a two-argument lambda (Γ' = Γ), from the inner function when it is a
    /// one-argument lambda, and from `eval` twice otherwise (Γ' = A ⇒ B ⇒ C).
    fn map2(&mut self, f: &Term, xs: &Term, ys: &Term, span: Span) -> Comb {
        use TermKind as K;
        let (a, bc) = f.ty.as_fun().expect("typed");
        let (b, c) = bc.as_fun().expect("typed");
        let (a, b, c) = (a.clone(), b.clone(), c.clone());
        let ab = Type::prod(a.clone(), b.clone());
        // Rearranges Γ' × (A × B) into (Γ' × A) × B, or feeds it to a curried function.
        let split = |g: &Type| {
            let dom = Type::prod(g.clone(), ab.clone());
            let fst = Comb::fst_of(&dom);
            let snd = Comb::snd_of(&dom);
            let x = Comb::compose(Comb::fst_of(&ab), snd.clone());
            let y = Comb::compose(Comb::snd_of(&ab), snd);
            (fst, x, y)
        };
        let xc = self.term(xs);
        let yc = self.term(ys);
        let arrays = Comb::pair(xc, yc);
        match &f.kind {
            K::Lam(x, inner) => {
                let g = self.ctx().clone();
                let (gf, xa, yb) = split(&g);
                let px = Pat::Var(x.clone());
                let h = match &inner.kind {
                    K::Lam(y, body) => {
                        let sigma = self.bind(&px, false);
                        let bodyc = self.under(&Pat::Var(y.clone()), body);
                        self.pop(&px);
                        let gf = match sigma {
                            Some(sigma) => Comb::compose(sigma, gf),
                            None => gf,
                        };
                        let gx = Comb::pair(gf, xa);
                        Comb::compose(bodyc, Comb::pair(gx, yb))
                    }
                    _ => {
                        let gc = self.under(&px, inner);
                        let partial = Comb::compose(gc, Comb::pair(gf, xa));
                        Comb::compose(Comb::eval(&b, &c), Comb::pair(partial, yb))
                    }
                };
                Comb::compose(Comb::map2(h, span), self.extend(arrays))
            }
            _ => {
                let fty = f.ty.clone();
                let (gf, xa, yb) = split(&fty);
                let partial = Comb::compose(Comb::eval(&a, bc), Comb::pair(gf, xa));
                let h = Comb::compose(Comb::eval(&b, &c), Comb::pair(partial, yb));
                let fc = self.term(f);
                Comb::compose(Comb::map2(h, span), Comb::pair(fc, arrays))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prim::Registry;

    /// The domains of the steps of the `it` nodes of the last definition's combinator.
    fn step_domains(src: &str) -> Vec<String> {
        let program = crate::source::load(src, &Registry::builtin()).unwrap();
        let c = compile_entry(&program.entry(program.defs.len() - 1));
        let mut out = Vec::new();
        let mut stack = vec![&c];
        while let Some(c) = stack.pop() {
            if let CombKind::Iter(f, _, _) = &c.kind {
                out.push(f.dom.to_string());
            }
            stack.extend(c.children());
        }
        out
    }

    /// A loop's step sees the variables it uses and its state, not the whole context: its
    /// derivative's environment (co)tangent is then as small as what it reads, not as large as
    /// everything in scope.
    #[test]
    fn a_loop_captures_only_what_its_step_uses() {
        let src = "def g (a : Real) (xs : Array Real) (c : Real) : Real =
                     let d = a * c in
                     let e = sum xs in
                     while (\\(s : Real) -> s < e) (\\(s : Real) -> s * d) 1.0";
        assert_eq!(step_domains(src), ["(((Unit, Real), Real), Real)"]);
        // A step that uses every binder in scope keeps the context as it is.
        let src = "def g (a : Real) : Real =
                     while (\\(s : Real) -> s < a) (\\(s : Real) -> s * 2.0) 1.0";
        assert_eq!(step_domains(src), ["((Unit, Real), Real)"]);
    }
}
