//! Nested dual numbers with perturbation tags (Siskind & Pearlmutter), an oracle for derivatives
//! *inside* programs (`grad`, `jvp`, `vjp` nested in one another) that shares nothing with CHAD.
//!
//! A [`Num`] is either a constant or `D(e, p, t) = p + t·ε_e`, with `ε_e² = 0` and distinct
//! tags commuting. Canonical form: in `D(e, p, t)` the parts `p` and `t` mention only tags
//! `< e`, so a number is a binary tree of its perturbations, newest (largest) tag on top.
//! Every derivative instance takes a **fresh** tag ([`fresh_tag`]), so the perturbation of an
//! inner derivative can never be mistaken for an enclosing one's: in
//! `d/dx (x · d/dy (x + y))` at 2, `x = D(1, 2, 1)` and `y = D(2, 1, 1)`; `x + y` has
//! `ε₂`-part 1 (a constant), so the inner derivative is 1 and the outer one is 1. (A single
//! untagged `ε` would add the two perturbations and give 2.)
//!
//! Rules (each quoted beside its code), for `x = D(e, p, t)`, with `e` the larger top tag of
//! the operands and an operand without `e` on top read as `D(e, x, 0)`:
//!
//! ```text
//! D(e,p,t) + D(e,q,s) = D(e, p + q, t + s)          D(e,p,t) · D(e,q,s) = D(e, p·q, p·s + t·q)
//! D(e,p,t) / D(e,q,s) = D(e, p/q, t/q − (p/q)/q · s)
//! f(D(e,p,t)) = D(e, f(p), f'(p) · t)   for f in sin, cos, exp, log, sqrt, tanh
//! tangent_e(D(e,p,t)) = t;  tangent_e(D(e',p,t)) = D(e', tangent_e p, tangent_e t) if e' > e;
//! tangent_e(x) = 0 otherwise (x does not depend on ε_e)
//! ```
//!
//! [`derivative`], [`jvp`], [`grad`] and [`vjp`] are the derivative operators on functions of
//! `Num`s, written so they can be nested: `jvp` is one forward pass with one fresh tag, `grad`
//! and `vjp` one forward pass per input component, each with its own fresh tag. Tags come from
//! a thread-local counter, so they are never reused while any number carrying them is alive in
//! the same computation.
//!
//! Scope: this is the arithmetic of the nested oracle, tested on its own (`tests` below). It is
//! used on source programs by [`super::tagged_eval`] (the checker's forms recorded, the program
//! evaluated over `Num`s, each form run by [`grad`], [`jvp`] or [`vjp`]), which
//! `tests/nested_tagged.rs` compares with CHAD on random programs, and directly in
//! `tests/nested.rs` on families of programs written twice (in the source language and as Rust
//! closures over `Num`). See `theory-notes/12-nested-ad.md`.

use std::cell::Cell;
use std::rc::Rc;

/// A nested dual number: a constant or `p + t·ε_e` (see the module docs for the canonical form).
#[derive(Clone, Debug)]
pub enum Num {
    /// A constant: no perturbation.
    C(f64),
    /// `D(e, p, t) = p + t·ε_e`, with `p` and `t` mentioning only tags `< e`.
    D(u64, Rc<Num>, Rc<Num>),
}

thread_local! {
    static NEXT_TAG: Cell<u64> = const { Cell::new(1) };
}

/// A tag larger than every tag handed out before on this thread.
pub fn fresh_tag() -> u64 {
    NEXT_TAG.with(|n| {
        let e = n.get();
        n.set(e + 1);
        e
    })
}

fn d(e: u64, p: Num, t: Num) -> Num {
    // An exactly zero perturbation is no perturbation (keeps the trees small).
    match t {
        Num::C(0.0) => p,
        t => Num::D(e, Rc::new(p), Rc::new(t)),
    }
}

impl Num {
    /// The constant `c`.
    pub fn c(c: f64) -> Num {
        Num::C(c)
    }

    /// The value with every perturbation dropped.
    pub fn primal(&self) -> f64 {
        let mut x = self;
        loop {
            match x {
                Num::C(c) => return *c,
                Num::D(_, p, _) => x = p,
            }
        }
    }

    fn top(&self) -> u64 {
        match self {
            Num::C(_) => 0,
            Num::D(e, _, _) => *e,
        }
    }

    /// `(p, t)` with `self = p + t·ε_e`, for `e` at least the top tag.
    fn split(&self, e: u64) -> (Num, Num) {
        match self {
            Num::D(f, p, t) if *f == e => ((**p).clone(), (**t).clone()),
            _ => (self.clone(), Num::C(0.0)),
        }
    }

    /// The coefficient of `ε_e`: `tangent_e` of the module docs.
    pub fn tangent(&self, e: u64) -> Num {
        match self {
            // tangent_e(D(e,p,t)) = t
            Num::D(f, _, t) if *f == e => (**t).clone(),
            // tangent_e(D(e',p,t)) = D(e', tangent_e p, tangent_e t) if e' > e
            Num::D(f, p, t) if *f > e => d(*f, p.tangent(e), t.tangent(e)),
            // tangent_e(x) = 0 otherwise
            _ => Num::C(0.0),
        }
    }

    fn binary(
        &self,
        o: &Num,
        f: fn(f64, f64) -> f64,
        rule: fn(&Num, &Num, &Num, &Num) -> (Num, Num),
    ) -> Num {
        let e = self.top().max(o.top());
        if e == 0 {
            return Num::C(f(self.primal(), o.primal()));
        }
        let (p, t) = self.split(e);
        let (q, s) = o.split(e);
        let (v, dv) = rule(&p, &t, &q, &s);
        d(e, v, dv)
    }

    fn unary(&self, f: fn(f64) -> f64, df: fn(&Num) -> Num) -> Num {
        match self {
            Num::C(a) => Num::C(f(*a)),
            // f(D(e,p,t)) = D(e, f(p), f'(p) · t)
            Num::D(e, p, t) => d(*e, p.unary(f, df), df(p).mul(t)),
        }
    }

    /// `self + o`.
    pub fn add(&self, o: &Num) -> Num {
        // D(e,p,t) + D(e,q,s) = D(e, p + q, t + s)
        self.binary(o, |a, b| a + b, |p, t, q, s| (p.add(q), t.add(s)))
    }

    /// `self − o`.
    pub fn sub(&self, o: &Num) -> Num {
        self.binary(o, |a, b| a - b, |p, t, q, s| (p.sub(q), t.sub(s)))
    }

    /// `self · o`.
    pub fn mul(&self, o: &Num) -> Num {
        // D(e,p,t) · D(e,q,s) = D(e, p·q, p·s + t·q)
        self.binary(
            o,
            |a, b| a * b,
            |p, t, q, s| (p.mul(q), p.mul(s).add(&t.mul(q))),
        )
    }

    /// `self / o`.
    pub fn div(&self, o: &Num) -> Num {
        // D(e,p,t) / D(e,q,s) = D(e, p/q, t/q − (p/q)/q · s)
        self.binary(
            o,
            |a, b| a / b,
            |p, t, q, s| {
                let r = p.div(q);
                let dr = t.div(q).sub(&r.div(q).mul(s));
                (r, dr)
            },
        )
    }

    /// `−self`.
    pub fn neg(&self) -> Num {
        Num::C(0.0).sub(self)
    }

    /// `sin self`.
    pub fn sin(&self) -> Num {
        self.unary(f64::sin, |p| p.cos())
    }

    /// `cos self`.
    pub fn cos(&self) -> Num {
        self.unary(f64::cos, |p| p.sin().neg())
    }

    /// `exp self`.
    pub fn exp(&self) -> Num {
        self.unary(f64::exp, |p| p.exp())
    }

    /// `log self`.
    pub fn log(&self) -> Num {
        self.unary(f64::ln, |p| Num::C(1.0).div(p))
    }

    /// `sqrt self`.
    pub fn sqrt(&self) -> Num {
        self.unary(f64::sqrt, |p| Num::C(0.5).div(&p.sqrt()))
    }

    /// `tanh self`.
    pub fn tanh(&self) -> Num {
        self.unary(f64::tanh, |p| {
            let y = p.tanh();
            Num::C(1.0).sub(&y.mul(&y))
        })
    }
}

/// `f'(x)` for `f : Num → Num`: one forward pass with a fresh tag.
pub fn derivative(f: impl Fn(&Num) -> Num, x: &Num) -> Num {
    let e = fresh_tag();
    f(&d(e, x.clone(), Num::C(1.0))).tangent(e)
}

/// `(f x, J_f(x) · dx)`: one forward pass with one fresh tag.
pub fn jvp(f: impl Fn(&[Num]) -> Vec<Num>, x: &[Num], dx: &[Num]) -> (Vec<Num>, Vec<Num>) {
    let e = fresh_tag();
    let xs: Vec<Num> = x
        .iter()
        .zip(dx)
        .map(|(x, t)| d(e, x.clone(), t.clone()))
        .collect();
    let ys = f(&xs);
    let prim = ys.iter().map(|y| y.tangent_free(e)).collect();
    let tan = ys.iter().map(|y| y.tangent(e)).collect();
    (prim, tan)
}

impl Num {
    /// The part of `self` without `ε_e` (`self` with `ε_e` set to 0).
    fn tangent_free(&self, e: u64) -> Num {
        match self {
            Num::D(f, p, _) if *f == e => (**p).clone(),
            Num::D(f, p, t) if *f > e => d(*f, p.tangent_free(e), t.tangent_free(e)),
            _ => self.clone(),
        }
    }
}

/// `(f x, J_f(x)ᵀ · ct)`: one forward pass per input component, each with its own fresh tag.
pub fn vjp(f: impl Fn(&[Num]) -> Vec<Num>, x: &[Num], ct: &[Num]) -> (Vec<Num>, Vec<Num>) {
    let y = f(x);
    let g = (0..x.len())
        .map(|i| {
            let mut dx = vec![Num::C(0.0); x.len()];
            dx[i] = Num::C(1.0);
            let (_, col) = jvp(&f, x, &dx);
            col.iter()
                .zip(ct)
                .fold(Num::C(0.0), |acc, (c, w)| acc.add(&c.mul(w)))
        })
        .collect();
    (y, g)
}

/// `∇f(x)` for a `Real`-valued `f`: [`vjp`] at cotangent 1.
pub fn grad(f: impl Fn(&[Num]) -> Num, x: &[Num]) -> Vec<Num> {
    vjp(|x| vec![f(x)], x, &[Num::C(1.0)]).1
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(x: f64) -> Num {
        Num::c(x)
    }

    #[test]
    fn siskind_pearlmutter_examples() {
        // d/dx (x · d/dy (x + y)|_{y=1})|_{x=2} = 1; a confused implementation gives 2.
        let r = derivative(|x| x.mul(&derivative(|y| x.add(y), &c(1.0))), &c(2.0));
        assert_eq!(r.primal(), 1.0);
        // d/dx (d/dy (x · y)) = 1: the inner result depends on x.
        let r = derivative(|x| derivative(|y| x.mul(y), &c(1.0)), &c(2.0));
        assert_eq!(r.primal(), 1.0);
        // d/dx (x · d/dy (x · y)|_{y=2})|_{x=1} = d/dx x² = 2.
        let r = derivative(|x| x.mul(&derivative(|y| x.mul(y), &c(2.0))), &c(1.0));
        assert_eq!(r.primal(), 2.0);
        // Mixed: forward inside reverse and reverse inside forward.
        let r = grad(
            |x| x[0].mul(&jvp(|y| vec![x[0].add(&y[0])], &[c(1.0)], &[c(1.0)]).1[0]),
            &[c(2.0)],
        );
        assert_eq!(r[0].primal(), 1.0);
        let (_, t) = jvp(
            |x| {
                let (_, g) = vjp(|y| vec![x[0].mul(&y[0])], &[c(2.0)], &[c(1.0)]);
                vec![x[0].mul(&g[0])]
            },
            &[c(1.0)],
            &[c(1.0)],
        );
        assert_eq!(t[0].primal(), 2.0);
    }

    #[test]
    fn higher_derivatives() {
        // (x⁴)''' = 24x, three nested levels.
        let f = |x: &Num| x.mul(x).mul(x).mul(x);
        let r = derivative(|x| derivative(|y| derivative(f, y), x), &c(1.5));
        assert!((r.primal() - 36.0).abs() < 1e-12);
        // sin'''' = sin.
        let r = derivative(
            |a| derivative(|b| derivative(|c| derivative(|d| d.sin(), c), b), a),
            &c(0.7),
        );
        assert!((r.primal() - 0.7f64.sin()).abs() < 1e-12);
    }

    /// Each elementary function's first and second derivatives against central differences.
    #[test]
    fn elementary_functions_against_finite_differences() {
        type F = fn(&Num) -> Num;
        let fs: [(&str, F, f64); 7] = [
            ("sin", |x| x.sin(), 0.3),
            ("cos", |x| x.cos(), -1.1),
            ("exp", |x| x.exp(), 0.4),
            ("log", |x| x.log(), 1.7),
            ("sqrt", |x| x.sqrt(), 2.2),
            ("tanh", |x| x.tanh(), 0.5),
            ("x/(1+x²)", |x| x.div(&c(1.0).add(&x.mul(x))), 0.8),
        ];
        for (name, f, x0) in fs {
            let val = |x: f64| f(&c(x)).primal();
            let d1 = |x: f64| derivative(f, &c(x)).primal();
            let h = 1e-5;
            let fd1 = (val(x0 + h) - val(x0 - h)) / (2.0 * h);
            assert!((d1(x0) - fd1).abs() < 1e-8, "{name}' {} vs {fd1}", d1(x0));
            let d2 = derivative(|x| derivative(f, x), &c(x0)).primal();
            let fd2 = (d1(x0 + h) - d1(x0 - h)) / (2.0 * h);
            assert!((d2 - fd2).abs() < 1e-7, "{name}'' {d2} vs {fd2}");
        }
    }

    #[test]
    fn gradients_and_vjps_of_several_variables() {
        // f(x, y) = x² y + sin(x y): ∇f = (2xy + y cos(xy), x² + x cos(xy)).
        let f = |v: &[Num]| v[0].mul(&v[0]).mul(&v[1]).add(&v[0].mul(&v[1]).sin());
        let (x, y) = (0.7, -1.3);
        let g = grad(f, &[c(x), c(y)]);
        let want = [2.0 * x * y + y * (x * y).cos(), x * x + x * (x * y).cos()];
        for k in 0..2 {
            assert!((g[k].primal() - want[k]).abs() < 1e-12);
        }
        // Mixed partial by nesting, both orders: ∂²f/∂x∂y = 2x + cos(xy) − xy sin(xy).
        let want = 2.0 * x + (x * y).cos() - x * y * (x * y).sin();
        let dxy = grad(
            |a| grad(|b| f(&[a[0].clone(), b[0].clone()]), &[c(y)])[0].clone(),
            &[c(x)],
        );
        let dyx = grad(
            |b| grad(|a| f(&[a[0].clone(), b[0].clone()]), &[c(x)])[0].clone(),
            &[c(y)],
        );
        assert!((dxy[0].primal() - want).abs() < 1e-12);
        assert!((dyx[0].primal() - want).abs() < 1e-12);
    }

    /// Reusing one tag for two derivative instances (what fresh tags prevent) confuses them:
    /// this checks the test above can fail for the reason it is meant to.
    #[test]
    fn a_reused_tag_confuses_perturbations() {
        let e = fresh_tag();
        let x = d(e, c(2.0), c(1.0));
        let inner = x.add(&d(e, c(1.0), c(1.0))).tangent(e);
        let r = x.mul(&inner).tangent(e);
        assert_eq!(r.primal(), 2.0);
    }
}
