//! Transposition of linear maps (`chad::internals::target::transpose`), tested on the random linear terms
//! of `chad::internals::target::random`, which use every linear form:
//!
//! * the dot-product test `<T(f)(c), v> = <c, f(v)>` at random inputs `v` and cotangents `c`
//!   (of the shape of `f(v)`, as the cotangent of an output is), through the reference
//!   evaluator. The terms are well-shaped (`Gen::well_shaped`: every array has the same length,
//!   indices are in range), as derivative code is; transposition assumes it;
//! * transposing twice gives back the map: `T(T(f))(v) = f(v)`;
//! * the transposed terms type-check at the transposed type (`L'* ⊸ L*`);
//! * one test per form on hand-written maps, so that a wrong rule is named by the test that
//!   fails.
//!
//! `CHAD_PROPTEST_CASES` raises the number of random terms (see `tests/common`).

mod common;

use chad::Value;
use chad::internals::target::check::check;
use chad::internals::target::eval::{Env, eval};
use chad::internals::target::linear::{Lin, LinFun, LinearMap};
use chad::internals::target::random::Gen;
use chad::internals::target::term::{LTerm, LTermKind as L, Lit, Term, TermKind as K, Var};
use chad::internals::target::testing::{hash_value, sample_value};
use chad::internals::target::transpose::{Shape, Transposer, transpose_map};
use chad::internals::target::types::{LTy, Ty};
use std::rc::Rc;

/// A small deterministic generator for the tests' own random values.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let x = self.0 ^ (self.0 >> 29);
        x.wrapping_mul(0xbf58476d1ce4e5b9) ^ (x >> 32)
    }
    fn real(&mut self) -> f64 {
        ((self.next() % 2001) as f64 - 1000.0) / 250.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A random value of type `l`, with arrays of up to 3 elements (exactly 3 with `full`).
fn random_lin(l: &LTy, rng: &mut Rng, full: bool) -> Lin {
    match l {
        LTy::Real => Lin::real(rng.real()),
        LTy::Unit => Lin::zero(),
        LTy::Prod(p) | LTy::Sum(p) => {
            Lin::pair(random_lin(&p.0, rng, full), random_lin(&p.1, rng, full))
        }
        LTy::Array(e) => {
            let n = if full { 3 } else { rng.below(4) as usize };
            Lin::array((0..n).map(|_| random_lin(e, rng, full)).collect())
        }
        LTy::Copower(p) => {
            let mut c = chad::internals::target::linear::Copower::empty();
            for _ in 0..rng.below(3) {
                let a = sample_value(&p.0, rng.next());
                c = chad::internals::target::linear::Copower::plus(
                    c,
                    chad::internals::target::linear::Copower::singleton(
                        a,
                        random_lin(&p.1, rng, full),
                    ),
                );
            }
            Lin::copower(c)
        }
        LTy::Power(p) => {
            let (tau, e, seed) = (p.0.clone(), p.1.clone(), rng.next());
            Lin::power(move |b| {
                let h = hash_value(&tau, b, seed);
                Ok(random_lin(&e, &mut Rng(h.to_bits()), full))
            })
        }
    }
}

/// A random value of `l*` shaped like `y : l` (arrays of the same lengths), as the cotangent of
/// an output `y` is.
fn cotangent_like(l: &LTy, y: &Lin, rng: &mut Rng) -> Lin {
    match l {
        LTy::Real => Lin::real(rng.real()),
        LTy::Unit => Lin::zero(),
        LTy::Prod(p) => Lin::pair(
            cotangent_like(&p.0, &y.fst(), rng),
            cotangent_like(&p.1, &y.snd(), rng),
        ),
        LTy::Sum(p) => Lin::pair(
            cotangent_like(&p.0, &y.from_left(), rng),
            cotangent_like(&p.1, &y.from_right(), rng),
        ),
        LTy::Array(e) => {
            let n = if y.is_zero() { 0 } else { y.stored_len() };
            Lin::array(
                (0..n)
                    .map(|i| cotangent_like(e, &y.index(i as i64), rng))
                    .collect(),
            )
        }
        // y is a power: the cotangent is a copower at sample points.
        LTy::Power(p) => {
            let mut c = chad::internals::target::linear::Copower::empty();
            for _ in 0..2 {
                let a = sample_value(&p.0, rng.next());
                let ya = y.apply_power(&a).unwrap_or_else(|_| Lin::zero());
                let l = cotangent_like(&p.1, &ya, rng);
                c = chad::internals::target::linear::Copower::plus(
                    c,
                    chad::internals::target::linear::Copower::singleton(a, l),
                );
            }
            Lin::copower(c)
        }
        // y is a copower: the cotangent is a power; at `b` shaped like y's part at `b`.
        LTy::Copower(p) => {
            let (tau, e, y, seed) = (p.0.clone(), p.1.clone(), y.clone(), rng.next());
            Lin::power(move |b| {
                let b2 = b.clone();
                let tau2 = tau.clone();
                let at_b = y.to_copower().fold(move |a| {
                    let same = hash_value(&tau2, a, 1) == hash_value(&tau2, &b2, 1);
                    Ok(if same { LinFun::id() } else { LinFun::zero() })
                })?;
                let h = hash_value(&tau, b, seed);
                Ok(cotangent_like(&e, &at_b, &mut Rng(h.to_bits())))
            })
        }
    }
}

/// The functional `l ↦ <x, l>` on `L*`, for `x : L`.
struct Pair(LTy, Lin);

impl LinearMap for Pair {
    fn apply(&self, l: &Lin) -> chad::Result<Lin> {
        Ok(Lin::real(pairing(&self.0, &self.1, l)))
    }
}

/// The functional `l ↦ <l, y>` on `L`, for `y : L*`.
struct PairDual(LTy, Lin);

impl LinearMap for PairDual {
    fn apply(&self, l: &Lin) -> chad::Result<Lin> {
        Ok(Lin::real(pairing(&self.0, l, &self.1)))
    }
}

/// `<x, y>` for `x : l`, `y : l*`.
fn pairing(l: &LTy, x: &Lin, y: &Lin) -> f64 {
    if x.is_zero() || y.is_zero() {
        return 0.0;
    }
    match l {
        LTy::Real => x.to_real() * y.to_real(),
        LTy::Unit => 0.0,
        LTy::Prod(p) | LTy::Sum(p) => {
            pairing(&p.0, &x.fst(), &y.fst()) + pairing(&p.1, &x.snd(), &y.snd())
        }
        LTy::Array(e) => {
            let n = x.stored_len().max(y.stored_len());
            (0..n as i64)
                .map(|i| pairing(e, &x.index(i), &y.index(i)))
                .sum()
        }
        LTy::Power(p) => {
            // x a power, y a copower: Σ over y's pairs (a, l) of <x(a), l>.
            let (e, x) = (p.1.clone(), x.clone());
            y.to_copower()
                .fold(move |a| Ok(LinFun::new(Pair(e.clone(), x.apply_power(a)?))))
                .map(|s| s.to_real())
                .unwrap_or(f64::NAN)
        }
        LTy::Copower(p) => {
            let (e, y) = (p.1.clone(), y.clone());
            x.to_copower()
                .fold(move |a| Ok(LinFun::new(PairDual(e.clone(), y.apply_power(a)?))))
                .map(|s| s.to_real())
                .unwrap_or(f64::NAN)
        }
    }
}

/// The shape of every value of `l` in the well-shaped world: arrays of length 3.
fn shape_of(l: &LTy) -> Shape {
    match l {
        LTy::Prod(p) | LTy::Sum(p) => Shape::Pair(Rc::new(shape_of(&p.0)), Rc::new(shape_of(&p.1))),
        LTy::Array(e) => Shape::Array(Term::lit(Lit::Int(3)), Rc::new(shape_of(e))),
        _ => Shape::Unknown,
    }
}

fn apply(f: &Term, x: &Lin) -> chad::Result<Lin> {
    match eval(f, &Env::new())? {
        Value::LinFun(g) => g.apply(x),
        other => panic!("not a linear map: {other}"),
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * (1.0 + a.abs().max(b.abs()))
}

/// The dot-product test for `f : dom ⊸ cod` at random inputs; `Ok(false)` if the map cannot
/// be transposed (an unknown length) or fails at the input.
fn dot_product(f: &Term, dom: &LTy, cod: &LTy, seed: u64, full: bool) -> Result<bool, String> {
    let mut rng = Rng(seed);
    let v = random_lin(dom, &mut rng, full);
    let Ok(y) = apply(f, &v) else {
        return Ok(false);
    };
    let ft = match transpose_map(f, &[], shape_of(dom)) {
        Ok(t) => t,
        Err(e) if e.kind() == chad::ErrorKind::Unsupported => return Ok(false),
        Err(e) => return Err(format!("transposing {f}: {}", e.message())),
    };
    let mut tp = Transposer::new();
    let want = Ty::lin_fun(tp.dual(cod), tp.dual(dom));
    match check(&ft, &[]) {
        Ok(ty) if ty == want => {}
        Ok(ty) => return Err(format!("{ft} has type {ty}, not {want}")),
        Err(e) => return Err(format!("{ft} is ill-typed: {}", e.message())),
    }
    for k in 0..3 {
        let c = cotangent_like(cod, &y, &mut Rng(seed ^ ((k + 1) * 0x9e37)));
        let g =
            apply(&ft, &c).map_err(|e| format!("{ft} at {c:?} (v = {v:?}): {}", e.message()))?;
        let (lhs, rhs) = (pairing(dom, &v, &g), pairing(cod, &y, &c));
        if !close(lhs, rhs) {
            return Err(format!(
                "dot-product test: <v, T(f) c> = {lhs}, <f v, c> = {rhs}\n  f = {f}\n  T(f) = \
                 {ft}\n  v = {v:?}\n  c = {c:?}"
            ));
        }
    }
    Ok(true)
}

fn random_types(seed: u64) -> (LTy, LTy) {
    let mut g = Gen::new(seed ^ 0x5555);
    (g.lty(2), g.lty(2))
}

#[test]
fn dot_product_test_on_random_linear_maps() {
    let n = common::cases(400) as u64;
    let (mut done, mut skipped) = (0, 0);
    for seed in 0..n {
        let (dom, cod) = random_types(seed);
        let f = Gen::well_shaped(seed, 3).linear_map(&dom, &cod, 4);
        match dot_product(&f, &dom, &cod, seed, true) {
            Ok(true) => done += 1,
            Ok(false) => skipped += 1,
            Err(e) => panic!("seed {seed}: {e}"),
        }
    }
    eprintln!("{done} of {n} maps transposed ({skipped} skipped)");
    // Most maps transpose: only lengths of arrays read out of powers, copowers, unknown maps or
    // branches are unknown.
    assert!(
        done * 4 >= 3 * n,
        "only {done} of {n} maps transposed ({skipped} skipped)"
    );
}

#[test]
fn transposing_twice_gives_the_map_back() {
    let n = common::cases(300) as u64;
    let mut done = 0;
    for seed in 0..n {
        let (dom, cod) = random_types(seed);
        let f = Gen::well_shaped(seed, 3).linear_map(&dom, &cod, 4);
        let mut rng = Rng(seed);
        let v = random_lin(&dom, &mut rng, true);
        let Ok(y) = apply(&f, &v) else { continue };
        let Ok(ft) = transpose_map(&f, &[], shape_of(&dom)) else {
            continue;
        };
        // The transpose's input is shaped like f's output.
        let Ok(ftt) = transpose_map(&ft, &[], shape_of(&cod)) else {
            continue;
        };
        let y2 = apply(&ftt, &v).unwrap_or_else(|e| panic!("seed {seed}: {}", e.message()));
        // Compare by pairing with random cotangents shaped like y.
        for k in 0..3 {
            let c = cotangent_like(&cod, &y, &mut Rng(seed ^ ((k + 7) * 0x51)));
            let (a, b) = (pairing(&cod, &y, &c), pairing(&cod, &y2, &c));
            assert!(
                close(a, b),
                "seed {seed}: f v paired {a}, T(T(f)) v paired {b}\n{f}\n{ftt}"
            );
        }
        done += 1;
    }
    assert!(done * 2 >= n, "only {done} of {n}");
}

// ----- one map per form -----

fn real() -> LTy {
    LTy::Real
}
fn arr() -> LTy {
    LTy::array(LTy::Real)
}

/// `λ̲v. body(v)` with `v : dom`.
fn map(dom: LTy, body: impl FnOnce(LTerm) -> LTerm) -> Term {
    let v = Var::linear("v", dom);
    Term::lin_lam(&v, body(LTerm::var(&v)))
}

fn int(n: i64) -> Term {
    Term::lit(Lit::Int(n))
}

/// Checks the dot-product test for `f` at 20 inputs, and that it transposes.
fn form(name: &str, f: Term, dom: LTy, cod: LTy) {
    for seed in 0..20 {
        match dot_product(&f, &dom, &cod, seed, true) {
            Ok(true) => {}
            Ok(false) => panic!("{name}: {f} did not transpose"),
            Err(e) => panic!("{name} (seed {seed}): {e}"),
        }
    }
}

#[test]
fn each_form_transposes() {
    let p = LTy::prod(real(), arr());
    let s = LTy::sum(real(), arr());
    form("var", map(real(), |v| v), real(), real());
    form("zero", map(real(), |_| LTerm::zero(arr())), real(), arr());
    form(
        "plus (dup)",
        map(real(), |v| {
            LTerm::plus(v.clone(), LTerm::scale(Term::real(3.0), v))
        }),
        real(),
        real(),
    );
    form(
        "pair",
        map(real(), |v| {
            LTerm::pair(v.clone(), LTerm::mk(L::Replicate(int(2), v)))
        }),
        real(),
        p.clone(),
    );
    form("fst", map(p.clone(), LTerm::fst), p.clone(), real());
    form("snd", map(p.clone(), LTerm::snd), p.clone(), arr());
    form(
        "scale",
        map(real(), |v| LTerm::scale(Term::real(-1.5), v)),
        real(),
        real(),
    );
    form(
        "let (Cartesian)",
        map(real(), |v| {
            let x = Var::fresh("x", Ty::Real);
            LTerm::let_(&x, Term::real(2.0), LTerm::scale(Term::var(&x), v))
        }),
        real(),
        real(),
    );
    form(
        "let (linear)",
        map(real(), |v| {
            let u = Var::linear("u", real());
            let uu = LTerm::plus(LTerm::var(&u), LTerm::var(&u));
            LTerm::lin_let(
                &u,
                LTerm::scale(Term::real(2.0), v),
                LTerm::pair(uu, LTerm::var(&u)),
            )
        }),
        real(),
        LTy::prod(real(), real()),
    );
    form(
        "app",
        map(real(), |v| {
            let inner = map(real(), |w| LTerm::scale(Term::real(5.0), w));
            LTerm::app(inner, v)
        }),
        real(),
        real(),
    );
    form("sum", map(arr(), |v| LTerm::mk(L::Sum(v))), arr(), real());
    form(
        "index",
        map(arr(), |v| LTerm::mk(L::Index(v, int(1)))),
        arr(),
        real(),
    );
    form(
        "replicate",
        map(real(), |v| LTerm::mk(L::Replicate(int(3), v))),
        real(),
        arr(),
    );
    form(
        "onehot",
        map(real(), |v| LTerm::mk(L::OneHot(int(3), int(2), v))),
        real(),
        arr(),
    );
    form(
        "lbuild",
        map(arr(), |v| {
            let i = Var::fresh("i", Ty::Int);
            let n = Term::lit(Lit::Int(3));
            let body = LTerm::scale(
                Term::prim(&chad::internals::prim::op("toReal"), vec![Term::var(&i)]),
                LTerm::mk(L::Index(v, Term::var(&i))),
            );
            LTerm::mk(L::Build(n, i, body))
        }),
        arr(),
        arr(),
    );
    form(
        "lmap",
        map(arr(), |v| {
            LTerm::mk(L::Map(map(real(), |w| LTerm::scale(Term::real(2.0), w)), v))
        }),
        arr(),
        arr(),
    );
    form(
        "zipWith",
        map(arr(), |v| {
            let fs = (1..=2)
                .map(|k| map(real(), |w| LTerm::scale(Term::real(k as f64), w)))
                .collect();
            let fs = Term::mk(K::Array(Ty::lin_fun(real(), real()), fs));
            LTerm::mk(L::ZipWith(fs, v))
        }),
        arr(),
        arr(),
    );
    form(
        "linl / fromLeft",
        map(real(), |v| LTerm::mk(L::Inl(v, arr()))),
        real(),
        s.clone(),
    );
    form(
        "fromRight",
        map(s.clone(), |v| LTerm::mk(L::FromRight(v))),
        s.clone(),
        arr(),
    );
    form(
        "case",
        map(real(), |v| {
            let c = Term::prim(
                &chad::internals::prim::op("decide"),
                vec![Term::prim(
                    &chad::internals::prim::op("gt"),
                    vec![Term::real(1.0), Term::real(0.0)],
                )],
            );
            let (p, q) = (
                chad::internals::target::term::Pat::Wild(Ty::Unit),
                chad::internals::target::term::Pat::Wild(Ty::Unit),
            );
            LTerm::mk(L::Case(
                c,
                Box::new(p),
                LTerm::scale(Term::real(2.0), v.clone()),
                Box::new(q),
                v,
            ))
        }),
        real(),
        real(),
    );
    let pw = LTy::power(Ty::Real, real());
    form(
        "power intro",
        map(real(), |v| {
            let b = Var::fresh("b", Ty::Real);
            LTerm::mk(L::PowLam(b.clone(), LTerm::scale(Term::var(&b), v)))
        }),
        real(),
        pw.clone(),
    );
    form(
        "power elim",
        map(pw.clone(), |v| LTerm::mk(L::PowApp(v, Term::real(0.5)))),
        pw,
        real(),
    );
    let cp = LTy::copower(Ty::Real, real());
    form(
        "copower intro",
        map(real(), |v| LTerm::mk(L::Copower(Term::real(1.5), v))),
        real(),
        cp.clone(),
    );
    form(
        "copowfold",
        map(cp.clone(), |v| {
            let b = Var::fresh("b", Ty::Real);
            let f = Term::lam(&b, map(real(), |w| LTerm::scale(Term::var(&b), w)));
            LTerm::mk(L::CopowFold(f, v))
        }),
        cp,
        real(),
    );
    form(
        "dotWith",
        map(arr(), |v| {
            let ys = Term::mk(K::Array(Ty::Real, vec![Term::real(1.0), Term::real(-2.0)]));
            let k = Term::mk(K::LinPrim(
                chad::internals::target::term::LinPrim::dot_with(),
                ys,
            ));
            LTerm::app(k, v)
        }),
        arr(),
        real(),
    );
}

#[test]
fn unknown_lengths_and_bad_input_are_errors() {
    // lsum of an array read out of a power: its length is not known.
    let pw = LTy::power(Ty::Real, arr());
    let f = map(pw, |v| {
        LTerm::mk(L::Sum(LTerm::mk(L::PowApp(v, Term::real(1.0)))))
    });
    let e = transpose_map(&f, &[], Shape::Unknown).unwrap_err();
    assert!(e.message().contains("length"), "{}", e.message());
    // A term that is not linear is rejected by the checker, not transposed.
    let x = Var::fresh("x", Ty::Real);
    let bad = map(real(), |_| LTerm::var(&x));
    assert!(transpose_map(&bad, &[x], Shape::Unknown).is_err());
}
