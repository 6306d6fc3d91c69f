//! Compilation of typed terms into combinators (Curien's categorical abstract machine
//! translation). See `theory-notes/01-free-ccc.md` for a worked example.
//!
//! A term `Γ ⊢ t : τ` becomes `⟦t⟧ : ⟦Γ⟧ → τ`, where a context `x1 : A1, ..., xn : An` is the
//! snoc-list product `⟦Γ⟧ = ((1 × A1) × A2) × ... × An`. A binder that binds a pattern (a tuple
//! `let`) adds one component holding the whole value; its variables are projection paths into
//! that component.
//!
//! ```text
//! ⟦x⟧                   = snd ∘ fstᵏ (then the pattern path)    k = binders after x
//! ⟦c⟧                   = c ∘ bang                                 (literals)
//! ⟦let p = s in t⟧      = ⟦t⟧ ∘ ⟨id, ⟦s⟧⟩
//! ⟦\x. t⟧               = curry ⟦t⟧
//! ⟦f a⟧                 = eval ∘ ⟨⟦f⟧, ⟦a⟧⟩
//! ⟦(a, b)⟧ / fst / snd  = ⟨⟦a⟧, ⟦b⟧⟩ / fst ∘ ⟦e⟧ / snd ∘ ⟦e⟧
//! ⟦op(a1, ..., an)⟧     = op ∘ ⟨⟦a1⟧, ⟨..., ⟦an⟧⟩⟩
//! ⟦inl e⟧               = inl ∘ ⟦e⟧
//! ⟦case s of inl p → a | inr q → b⟧ = [⟦a⟧, ⟦b⟧] ∘ dist ∘ ⟨id, ⟦s⟧⟩
//! ⟦if c then a else b⟧  = [⟦a⟧ ∘ fst, ⟦b⟧ ∘ fst] ∘ dist ∘ ⟨id, decide ∘ ⟦c⟧⟩
//! ⟦map (\x. t) xs⟧      = map(⟦t⟧) ∘ ⟨id, ⟦xs⟧⟩            (the body sees the context)
//! ⟦map f xs⟧            = map(eval) ∘ ⟨⟦f⟧, ⟦xs⟧⟩          (any other function value)
//! ⟦map2 (\a b. t) xs ys⟧= map2(⟦t⟧ ∘ ⟨⟨fst, fst ∘ snd⟩, snd ∘ snd⟩) ∘ ⟨id, ⟨⟦xs⟧, ⟦ys⟧⟩⟩
//! ⟦build n (\i. t)⟧     = build(⟦t⟧) ∘ ⟨id, ⟦n⟧⟩
//! ⟦xs ! i⟧ / length / replicate / [e1..en] = index ∘ ⟨⟦xs⟧, ⟦i⟧⟩ / length ∘ ⟦xs⟧ / ...
//! ```
//!
//! A function value passed to `map`, `map2` or `build` is evaluated once, not per element.

use super::{Comb, Path, Step};
use crate::deep::deep;
use crate::error::Span;
use crate::prim;
use crate::source::term::{Entry, Lit, Pat, Term, TermKind, Var, VarId};
use crate::types::Type;
use smallvec::SmallVec;
use std::collections::HashMap;

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
        levels: vec![Type::Unit],
        vars: HashMap::new(),
    };
    for p in params {
        c.push(&Pat::Var(p.clone()));
    }
    c.term(t)
}

struct Compiler {
    /// `levels[k]` is the context object with `k` binders.
    levels: Vec<Type>,
    /// Where each variable lives: its binder's level and its path inside the bound value.
    vars: HashMap<VarId, (usize, SmallVec<[Step; 4]>)>,
}

impl Compiler {
    fn ctx(&self) -> &Type {
        self.levels.last().expect("at least the empty context")
    }

    fn push(&mut self, p: &Pat) {
        let level = self.levels.len() - 1;
        fn walk(
            p: &Pat,
            path: &mut SmallVec<[Step; 4]>,
            level: usize,
            out: &mut HashMap<VarId, (usize, SmallVec<[Step; 4]>)>,
        ) {
            match p {
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
            }
        }
        walk(p, &mut SmallVec::new(), level, &mut self.vars);
        let next = Type::prod(self.ctx().clone(), p.ty());
        self.levels.push(next);
    }

    fn pop(&mut self, p: &Pat) {
        for v in p.vars() {
            self.vars.remove(&v.id);
        }
        self.levels.pop();
    }

    /// Compiles `t` in the context extended by `p`.
    fn under(&mut self, p: &Pat, t: &Term) -> Comb {
        self.push(p);
        let c = self.term(t);
        self.pop(p);
        c
    }

    fn var(&self, v: &Var) -> Comb {
        let (level, inner) = self
            .vars
            .get(&v.id)
            .unwrap_or_else(|| panic!("internal error: unbound variable {v:?} in compile"));
        let depth = self.levels.len() - 1;
        let mut steps: SmallVec<[Step; 4]> = SmallVec::new();
        steps.push(Step::Snd);
        steps.extend(inner.iter().copied());
        let path = Path {
            skip: depth - 1 - level,
            steps,
        };
        Comb::proj_to(self.ctx(), path, v.ty.clone())
    }

    /// `⟨c1, ⟨c2, ... cn⟩⟩`, or `bang` for none.
    fn tuple(&mut self, ts: &[Term]) -> Comb {
        match ts {
            [] => Comb::bang(self.ctx()),
            [t] => self.term(t),
            [t, rest @ ..] => {
                let a = self.term(t);
                let b = self.tuple(rest);
                Comb::pair(a, b)
            }
        }
    }

    /// `⟨id, c⟩`: extends the context by the value of `c`.
    fn extend(&self, c: Comb) -> Comb {
        Comb::pair(Comb::id(self.ctx()), c)
    }

    fn term(&mut self, t: &Term) -> Comb {
        let c = deep(|| self.term_inner(t));
        // The typing judgement Γ ⊢ t : τ becomes ⟦t⟧ : Γ → τ, at every subterm. (O(1) in
        // practice: the context type is shared, so equality stops at the pointer.)
        assert!(
            c.dom == *self.ctx() && c.cod == t.ty,
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
                let ext = self.extend(ec);
                let bc = self.under(p, b);
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
        }
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
                        self.push(&px);
                        let bodyc = self.under(&Pat::Var(y.clone()), body);
                        self.pop(&px);
                        Comb::compose(bodyc, Comb::pair(Comb::pair(gf, xa), yb))
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
