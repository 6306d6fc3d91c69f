//! Random linear types, linear values and linear maps, and finite numeric observations of linear
//! values: the generators behind the property tests of the linear API (`tests/linear_laws.rs`)
//! and of the logical relations between source and target.
//!
//! Everything here goes through the public API of [`crate::target::linear`], so the values it
//! builds are exactly those a client can build, in every representation a client can cause:
//! the sparse zero and zeros built densely, pairs, injections, copowers as sums of singletons in
//! any bracketing (with repeated points), powers (functions and their sums and multiples), dense,
//! unboxed, sparse and replicated arrays, and sums and multiples of all of these.
//!
//! * [`lty`]: linear types using every former; [`index_ty`]: the `τ` of `!τ ⊗ L` and `τ → L`.
//! * [`lin`], [`zero_like`]: values of a linear type.
//! * [`linfun`], [`linfun_from`]: linear maps built from every constructor of [`LinFun`];
//!   [`family`]: families `τ → (L ⊸ M)` for copower folds and power introduction.
//! * [`observe`], [`approx_eq`]: a vector of reals that determines a linear value (up to
//!   probability zero), for comparing values whose representations differ; [`Probes`] fixes the
//!   sample points and hash weights it uses.
//! * [`sample_value`], [`hash_value`]: deterministic values of any Cartesian source type
//!   (closures included) and a hash-like real-valued function of them.
//!
//! Sizes are kept small: reals in [-10, 10], arrays of at most [`MAX_LEN`] elements (shorter than
//! the [`OBSERVED_LEN`] elements [`observe`] looks at), types of bounded depth.

use crate::deep::deep;
use crate::error::Result;
use crate::random;
use crate::target::linear::{Copower, Lin, LinFun};
use crate::target::types::{LTy, Ty};
use crate::types::Type;
use crate::value::{Closure, Value};
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::strategy::{BoxedStrategy, Just, Union};
use std::fmt;
use std::rc::Rc;

/// The longest array (and the largest `n` of `onehot n`, `replicate n`, `dotWith`) the
/// generators produce.
pub const MAX_LEN: usize = 5;

/// How many elements of an array [`observe`] looks at (indexing past the end gives zero, so
/// shorter arrays are padded with zeros, as the monoid says they should be).
pub const OBSERVED_LEN: usize = 7;

/// How many sample points of `τ` [`observe`] evaluates a power `τ → L` at, and how many hash
/// families it folds a copower `!τ ⊗ L` with.
pub const POINTS: u64 = 3;

// ----- deterministic pseudo-randomness -----

fn splitmix(z: u64) -> u64 {
    let z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    let z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A seed derived from `seed` and `salt` (different salts give independent-looking seeds).
fn mix(seed: u64, salt: u64) -> u64 {
    splitmix(seed ^ splitmix(salt.wrapping_mul(0xD6E8_FEB8_6659_FD93)))
}

/// A uniform number in [0, 1).
fn unit(seed: u64) -> f64 {
    (splitmix(seed) >> 11) as f64 / (1u64 << 53) as f64
}

/// A weight of magnitude in [0.5, 1.5) and random sign.
fn weight(seed: u64, salt: u64) -> f64 {
    let s = mix(seed, salt);
    let w = 0.5 + unit(s);
    if s & 1 == 0 { w } else { -w }
}

// ----- Cartesian values: deterministic samples and hashes -----

fn source(t: &Ty) -> Type {
    t.to_source()
        .unwrap_or_else(|| panic!("testing: {t} is not a source type"))
}

/// A deterministic value of the Cartesian source type `t` (closures included), a function of
/// `seed`: reals in [-2, 2], integers in [-1, 4], arrays of up to three elements. A function
/// value is a closure whose result is a pseudo-random function of [`hash_value`] of its argument.
///
/// Panics on `L ⊸ L'` and `Lin L`, which are not source types.
pub fn sample_value(t: &Ty, seed: u64) -> Value {
    deep(|| match t {
        Ty::Real => Value::Real(-2.0 + 4.0 * unit(seed)),
        Ty::Int => Value::Int((splitmix(seed) % 6) as i64 - 1),
        Ty::Bool => Value::Bool(splitmix(seed) & 1 == 1),
        Ty::Unit => Value::Unit,
        Ty::Prod(p) => Value::pair(
            sample_value(&p.0, mix(seed, 1)),
            sample_value(&p.1, mix(seed, 2)),
        ),
        Ty::Sum(p) => {
            if splitmix(seed) & 1 == 0 {
                Value::inl(sample_value(&p.0, mix(seed, 3)))
            } else {
                Value::inr(sample_value(&p.1, mix(seed, 4)))
            }
        }
        Ty::Array(e) => {
            let n = splitmix(mix(seed, 5)) % 4;
            let items = (0..n)
                .map(|i| sample_value(e, mix(seed, 100 + i)))
                .collect();
            Value::array(&source(e), items)
        }
        Ty::Fun(p) => Value::Closure(Rc::new(SampleFn {
            dom: p.0.clone(),
            cod: p.1.clone(),
            seed,
        })),
        Ty::LinFun(_) | Ty::Lin(_) => panic!("testing::sample_value: {t} is not a source type"),
    })
}

/// The closures made by [`sample_value`].
struct SampleFn {
    dom: Ty,
    cod: Ty,
    seed: u64,
}

impl Closure for SampleFn {
    fn apply(&self, arg: Value) -> Result<Value> {
        let h = hash_value(&self.dom, &arg, mix(self.seed, 6));
        Ok(sample_value(&self.cod, mix(self.seed, h.to_bits())))
    }
}

/// A deterministic, hash-like real-valued function of a value `v` of the Cartesian source type
/// `t`, chosen by `seed`: numbers combined with pseudo-random weights (reals through `atan`, so
/// the result stays moderate), closures applied to a fixed sample argument (a closure that fails
/// gives a fixed number). Equal values give equal hashes whatever their representation (boxed or
/// unboxed arrays); different values give different hashes with probability one over the seed
/// (closures are told apart by their value at one point).
///
/// Panics if `v` does not have type `t`.
pub fn hash_value(t: &Ty, v: &Value, seed: u64) -> f64 {
    deep(|| match (t, v) {
        (Ty::Real, Value::Real(x)) => weight(seed, 1) * if x.is_nan() { 2.0 } else { x.atan() },
        (Ty::Int, Value::Int(i)) => weight(seed, 2) * (*i as f64).atan(),
        (Ty::Bool, Value::Bool(b)) => weight(seed, if *b { 3 } else { 4 }),
        (Ty::Unit, Value::Unit) => weight(seed, 5),
        (Ty::Prod(p), Value::Pair(v)) => {
            hash_value(&p.0, &v.0, mix(seed, 6)) + hash_value(&p.1, &v.1, mix(seed, 7))
        }
        (Ty::Sum(p), Value::Inl(v)) => weight(seed, 8) + hash_value(&p.0, v, mix(seed, 9)),
        (Ty::Sum(p), Value::Inr(v)) => weight(seed, 10) + hash_value(&p.1, v, mix(seed, 11)),
        (Ty::Array(e), Value::RealArray(_) | Value::Array(_)) => {
            let items = v.array_items();
            let mut h = weight(seed, 12) * items.len() as f64;
            for (i, x) in items.iter().enumerate() {
                h += hash_value(e, x, mix(seed, 1000 + i as u64));
            }
            h
        }
        (Ty::Fun(p), Value::Closure(_)) => {
            let arg = sample_value(&p.0, mix(seed, 13));
            match v.apply(arg) {
                Ok(r) => hash_value(&p.1, &r, mix(seed, 14)),
                Err(_) => 2.5 * weight(seed, 15),
            }
        }
        _ => panic!("testing::hash_value: {v:?} is not a value of type {t}"),
    })
}

// ----- types -----

/// Random first-order source types of at most `depth` nested formers: `Real`, `Int`, `Bool`,
/// `Unit`, products, sums and arrays.
pub fn first_order_type(depth: u32) -> BoxedStrategy<Type> {
    let leaf = prop_oneof![
        3 => Just(Type::Real),
        1 => Just(Type::Int),
        1 => Just(Type::Bool),
        1 => Just(Type::Unit),
    ]
    .boxed();
    if depth == 0 {
        return leaf;
    }
    let sub = first_order_type(depth - 1);
    prop_oneof![
        4 => leaf,
        1 => (sub.clone(), sub.clone()).prop_map(|(a, b)| Type::prod(a, b)),
        1 => (sub.clone(), sub.clone()).prop_map(|(a, b)| Type::sum(a, b)),
        1 => sub.prop_map(Type::array),
    ]
    .boxed()
}

/// Random Cartesian types `τ` for copowers `!τ ⊗ L` and powers `τ → L`: the embedding
/// ([`Ty::from_source`]) of a random first-order source type of at most `depth` formers, or
/// sometimes the function type `Real -> Real`.
pub fn index_ty(depth: u32) -> BoxedStrategy<Ty> {
    prop_oneof![
        6 => first_order_type(depth).prop_map(|t| Ty::from_source(&t)),
        1 => Just(Ty::fun(Ty::Real, Ty::Real)),
    ]
    .boxed()
}

/// Random values of a Cartesian source type `t`: [`random::value`] for first-order types, and
/// for function types closures made by evaluating random closed source terms
/// ([`random::any_value`]).
pub fn ty_value(t: &Ty) -> BoxedStrategy<Value> {
    let src = source(t);
    if src.is_first_order() {
        random::value(&src)
    } else {
        let cfg = random::Config {
            depth: 2,
            ..random::Config::default()
        };
        random::any_value(&cfg, &src)
    }
}

/// Random linear types with at most `depth` nested formers, covering every former: `Real`,
/// `Unit`, `L × L'`, `!τ ⊗ L`, `τ → L` (with `τ` from [`index_ty`]), `L ⊕ L'` and `Array L`.
pub fn lty(depth: u32) -> BoxedStrategy<LTy> {
    let leaf = prop_oneof![6 => Just(LTy::Real), 1 => Just(LTy::Unit)].boxed();
    if depth == 0 {
        return leaf;
    }
    let sub = lty(depth - 1);
    let tau = index_ty(1);
    prop_oneof![
        3 => leaf,
        2 => (sub.clone(), sub.clone()).prop_map(|(a, b)| LTy::prod(a, b)),
        2 => (tau.clone(), sub.clone()).prop_map(|(t, l)| LTy::copower(t, l)),
        2 => (tau, sub.clone()).prop_map(|(t, l)| LTy::power(t, l)),
        2 => (sub.clone(), sub.clone()).prop_map(|(a, b)| LTy::sum(a, b)),
        2 => sub.prop_map(LTy::array),
    ]
    .boxed()
}

// ----- values -----

/// A strategy only constructed when it is chosen, so that recursive options cost nothing until
/// used.
fn lazy<T: fmt::Debug + 'static>(f: impl Fn() -> BoxedStrategy<T> + 'static) -> BoxedStrategy<T> {
    Just(()).prop_flat_map(move |_| f()).boxed()
}

/// Vectors of elements from `elem`, of a length drawn from `len`.
fn vec_of<T: fmt::Debug + Clone + 'static>(
    elem: BoxedStrategy<T>,
    len: impl Strategy<Value = usize> + 'static,
) -> BoxedStrategy<Vec<T>> {
    len.prop_flat_map(move |n| prop::collection::vec(elem.clone(), n))
        .boxed()
}

/// Array lengths: 0 ..= MAX_LEN, rarely 0.
fn length() -> BoxedStrategy<usize> {
    prop_oneof![1 => Just(0), 10 => 1..=MAX_LEN].boxed()
}

/// Moderate reals: in [-10, 10].
fn num() -> BoxedStrategy<f64> {
    prop_oneof![
        8 => -10.0f64..10.0,
        1 => Just(1.0),
        1 => Just(-0.5),
    ]
    .boxed()
}

/// Scaling constants: in [-3, 3], sometimes exactly 0, 1 or -1.
fn coefficient() -> BoxedStrategy<f64> {
    prop_oneof![
        6 => -3.0f64..3.0,
        1 => Just(0.0),
        1 => Just(1.0),
        1 => Just(-1.0),
    ]
    .boxed()
}

/// Sums a list of copowers with a bracketing chosen by `seed` (a random binary tree of
/// [`Copower::plus`], with an occasional [`Copower::empty`] thrown in).
pub fn copower_sum(parts: &[Copower], seed: u64) -> Copower {
    deep(|| match parts.len() {
        0 => Copower::empty(),
        1 if splitmix(seed) % 5 == 0 => Copower::plus(Copower::empty(), parts[0].clone()),
        1 => parts[0].clone(),
        n => {
            let k = 1 + (splitmix(seed) % (n as u64 - 1)) as usize;
            Copower::plus(
                copower_sum(&parts[..k], mix(seed, 1)),
                copower_sum(&parts[k..], mix(seed, 2)),
            )
        }
    })
}

/// Random values of the linear type `l`, built through the public API only and in every
/// representation: zero (sparse, and built densely), reals, pairs, `linl`/`linr` and their sums,
/// copowers as randomly bracketed sums of singletons (some sharing a point `a`), powers
/// (functions of the argument, sums and multiples of them), dense arrays (unboxed reals or
/// boxed), sparse arrays (sums of one-hots, sometimes many), `replicate`, `build`, and sums and
/// multiples of all of these. Arrays have at most [`MAX_LEN`] elements; the arrays inside one
/// value may have different lengths (they add by padding with zeros).
pub fn lin(l: &LTy) -> BoxedStrategy<Lin> {
    lin_sized(l, 2)
}

fn lin_sized(l: &LTy, budget: u32) -> BoxedStrategy<Lin> {
    let sub = budget.saturating_sub(1);
    let mut opts: Vec<(u32, BoxedStrategy<Lin>)> = vec![(1, Just(Lin::zero()).boxed())];
    match l {
        LTy::Real => opts.push((12, num().prop_map(Lin::real).boxed())),
        LTy::Unit => {}
        LTy::Prod(p) => {
            let (a, b) = (p.0.clone(), p.1.clone());
            opts.push((
                6,
                lazy(move || {
                    (lin_sized(&a, sub), lin_sized(&b, sub))
                        .prop_map(|(x, y)| Lin::pair(x, y))
                        .boxed()
                }),
            ));
        }
        LTy::Sum(p) => {
            let a = p.0.clone();
            opts.push((
                3,
                lazy(move || lin_sized(&a, sub).prop_map(Lin::left).boxed()),
            ));
            let b = p.1.clone();
            opts.push((
                3,
                lazy(move || lin_sized(&b, sub).prop_map(Lin::right).boxed()),
            ));
        }
        LTy::Copower(p) => {
            let (t, e) = (p.0.clone(), p.1.clone());
            opts.push((
                6,
                lazy(move || {
                    (
                        prop::collection::vec(ty_value(&t), 1..=3),
                        vec_of(
                            (any::<Index>(), lin_sized(&e, sub)).boxed(),
                            prop_oneof![1 => Just(0), 15 => 1..=4usize],
                        ),
                        any::<u64>(),
                    )
                        .prop_map(|(pool, pairs, seed)| {
                            let parts: Vec<Copower> = pairs
                                .into_iter()
                                .map(|(i, x)| Copower::singleton(i.get(&pool).clone(), x))
                                .collect();
                            Lin::copower(copower_sum(&parts, seed))
                        })
                        .boxed()
                }),
            ));
        }
        LTy::Power(p) => {
            let (t, e) = (p.0.clone(), p.1.clone());
            opts.push((
                6,
                lazy(move || {
                    let t = t.clone();
                    (
                        lin_sized(&e, sub),
                        lin_sized(&e, sub),
                        any::<u64>(),
                        any::<bool>(),
                    )
                        .prop_map(move |(x, y, seed, piecewise)| {
                            let t = t.clone();
                            if piecewise {
                                // Any function into L is a power value.
                                Lin::power(move |b| {
                                    Ok(if hash_value(&t, b, seed) > 0.0 {
                                        x.clone()
                                    } else {
                                        y.clone()
                                    })
                                })
                            } else {
                                Lin::power(move |b| Ok(Lin::scale(hash_value(&t, b, seed), &x)))
                            }
                        })
                        .boxed()
                }),
            ));
        }
        LTy::Array(e) => {
            let e = (**e).clone();
            if matches!(e, LTy::Real) {
                opts.push((3, vec_of(num(), length()).prop_map(Lin::reals).boxed()));
            }
            let e1 = e.clone();
            opts.push((
                3,
                lazy(move || {
                    vec_of(lin_sized(&e1, sub), length())
                        .prop_map(Lin::array)
                        .boxed()
                }),
            ));
            let e2 = e.clone();
            opts.push((
                3,
                lazy(move || {
                    // A sum of one-hots; sometimes more than the array has elements.
                    let e2 = e2.clone();
                    (1..=MAX_LEN, prop_oneof![3 => 1..=3usize, 1 => 4..=20usize])
                        .prop_flat_map(move |(n, k)| {
                            prop::collection::vec((0..n as i64, lin_sized(&e2, sub)), k).prop_map(
                                move |xs| {
                                    xs.into_iter().fold(Lin::zero(), |acc, (i, x)| {
                                        Lin::plus(acc, Lin::onehot(n, i, x).unwrap())
                                    })
                                },
                            )
                        })
                        .boxed()
                }),
            ));
            let e3 = e.clone();
            opts.push((
                1,
                lazy(move || {
                    (length(), lin_sized(&e3, sub))
                        .prop_map(|(n, x)| Lin::replicate(n, &x))
                        .boxed()
                }),
            ));
            let e4 = e;
            opts.push((
                1,
                lazy(move || {
                    vec_of(lin_sized(&e4, sub), length())
                        .prop_map(|xs| Lin::build(xs.len(), |i| Ok(xs[i].clone())).unwrap())
                        .boxed()
                }),
            ));
        }
    }
    // Zero (first) is an edge case: keep it rare.
    for o in &mut opts[1..] {
        o.0 *= 2;
    }
    if budget > 0 {
        let l1 = l.clone();
        opts.push((
            2,
            lazy(move || {
                (lin_sized(&l1, sub), lin_sized(&l1, sub))
                    .prop_map(|(x, y)| Lin::plus(x, y))
                    .boxed()
            }),
        ));
        let l2 = l.clone();
        opts.push((
            1,
            lazy(move || {
                (coefficient(), lin_sized(&l2, sub))
                    .prop_map(|(c, x)| Lin::scale(c, &x))
                    .boxed()
            }),
        ));
        let l3 = l.clone();
        opts.push((1, lazy(move || zero_like(&l3))));
    }
    Union::new_weighted(opts).boxed()
}

/// Random values of the linear type `l` that equal zero but are (mostly) not built as the sparse
/// zero: `0.0`, pairs of such, `[0.0, ...]`, arrays and one-hots and replicas of zeros,
/// singletons `!a ⊗ 0'` with `0'` such a zero, constant-zero powers, `0 · x` and `x + (-1) · x`.
/// (The last may observe as zero only up to rounding: a copower `[(a, l), (b, m), (a, -l),
/// (b, -m)]` is folded in that order.)
pub fn zero_like(l: &LTy) -> BoxedStrategy<Lin> {
    let mut opts: Vec<(u32, BoxedStrategy<Lin>)> = vec![(1, Just(Lin::zero()).boxed())];
    match l {
        LTy::Real => opts.push((
            3,
            prop_oneof![Just(0.0), Just(-0.0)]
                .prop_map(Lin::real)
                .boxed(),
        )),
        LTy::Unit => {}
        LTy::Prod(p) | LTy::Sum(p) => {
            let (a, b) = (p.0.clone(), p.1.clone());
            opts.push((
                3,
                lazy(move || {
                    (zero_like(&a), zero_like(&b))
                        .prop_map(|(x, y)| Lin::pair(x, y))
                        .boxed()
                }),
            ));
        }
        LTy::Copower(p) => {
            let (t, e) = (p.0.clone(), p.1.clone());
            opts.push((
                3,
                lazy(move || {
                    (ty_value(&t), zero_like(&e))
                        .prop_map(|(a, z)| Lin::copower(Copower::singleton(a, z)))
                        .boxed()
                }),
            ));
        }
        LTy::Power(p) => {
            let e = p.1.clone();
            opts.push((
                3,
                lazy(move || {
                    zero_like(&e)
                        .prop_map(|z| Lin::power(move |_| Ok(z.clone())))
                        .boxed()
                }),
            ));
        }
        LTy::Array(e) => {
            let e = (**e).clone();
            if matches!(e, LTy::Real) {
                opts.push((
                    2,
                    (0..=MAX_LEN).prop_map(|n| Lin::reals(vec![0.0; n])).boxed(),
                ));
            }
            let e1 = e.clone();
            opts.push((
                2,
                lazy(move || {
                    prop::collection::vec(zero_like(&e1), 0..=MAX_LEN)
                        .prop_map(Lin::array)
                        .boxed()
                }),
            ));
            let e2 = e.clone();
            opts.push((
                2,
                lazy(move || {
                    (1..=MAX_LEN)
                        .prop_flat_map({
                            let e2 = e2.clone();
                            move |n| {
                                (0..n as i64, zero_like(&e2))
                                    .prop_map(move |(i, z)| Lin::onehot(n, i, z).unwrap())
                            }
                        })
                        .boxed()
                }),
            ));
            opts.push((
                1,
                lazy(move || {
                    (0..=MAX_LEN, zero_like(&e))
                        .prop_map(|(n, z)| Lin::replicate(n, &z))
                        .boxed()
                }),
            ));
        }
    }
    let l1 = l.clone();
    opts.push((
        2,
        lazy(move || lin_sized(&l1, 1).prop_map(|x| Lin::scale(0.0, &x)).boxed()),
    ));
    let l2 = l.clone();
    opts.push((
        2,
        lazy(move || {
            lin_sized(&l2, 1)
                .prop_map(|x| Lin::plus(x.clone(), Lin::scale(-1.0, &x)))
                .boxed()
        }),
    ));
    Union::new_weighted(opts).boxed()
}

// ----- linear maps -----

/// A family of linear maps `τ → (L ⊸ M)`, as [`LinFun::copower_fold`] and
/// [`LinFun::power_intro`] take: `a ↦ h(a) · g₁`, or piecewise `a ↦ g₁` or `g₂` depending on the
/// sign of `h(a)`, where `h` is a [`hash_value`] and `g₁, g₂ : L ⊸ M` are fixed random maps.
#[derive(Clone)]
pub struct Family {
    ty: Ty,
    g1: LinFun,
    g2: LinFun,
    seed: u64,
    piecewise: bool,
}

impl Family {
    /// The linear map at `a`.
    pub fn at(&self, a: &Value) -> LinFun {
        let h = hash_value(&self.ty, a, self.seed);
        if !self.piecewise {
            LinFun::scale(h, &self.g1)
        } else if h > 0.0 {
            self.g1.clone()
        } else {
            self.g2.clone()
        }
    }

    /// The family as a closure.
    pub fn to_fn(&self) -> impl Fn(&Value) -> Result<LinFun> + 'static {
        let f = self.clone();
        move |a| Ok(f.at(a))
    }
}

impl fmt::Debug for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.piecewise {
            write!(f, "<family of {:?} / {:?}>", self.g1, self.g2)
        } else {
            write!(f, "<family h(a) · {:?}>", self.g1)
        }
    }
}

/// Random families of linear maps `τ → (L ⊸ M)` with `τ = t`, `L = dom`, `M = cod`.
pub fn family(t: &Ty, dom: &LTy, cod: &LTy) -> BoxedStrategy<Family> {
    family_sized(t, dom, cod, 1)
}

fn family_sized(t: &Ty, dom: &LTy, cod: &LTy, depth: u32) -> BoxedStrategy<Family> {
    let t = t.clone();
    (
        linfun_sized(dom, cod, depth),
        linfun_sized(dom, cod, depth),
        any::<u64>(),
        any::<bool>(),
    )
        .prop_map(move |(g1, g2, seed, piecewise)| Family {
            ty: t.clone(),
            g1,
            g2,
            seed,
            piecewise,
        })
        .boxed()
}

/// Random linear maps `dom ⊸ cod`, built from every constructor of [`LinFun`] in type-correct
/// combinations: the zero map and (when `dom = cod`) the identity and its multiples; eliminations
/// of `dom` (`fst`, `snd`, `copair`, `fromLeft`, `fromRight`, `index`, `lsum`, `lmap`,
/// `dotWith`, `copowfold` of a [`family`], evaluation of powers at a point) and introductions of
/// `cod` (`pair`, `inj1`, `inj2`, `linl`, `linr`, `onehot`, `replicate`, `scaleArray`,
/// `!a ⊗ -`, power introduction from a family), composed with smaller maps; and sums (`plus`,
/// `sum`), multiples (`scale`) and compositions through random intermediate types.
pub fn linfun(dom: &LTy, cod: &LTy) -> BoxedStrategy<LinFun> {
    linfun_sized(dom, cod, 2)
}

/// A random codomain type and a random linear map into it out of `dom` (see [`linfun`]).
pub fn linfun_from(dom: &LTy) -> BoxedStrategy<(LinFun, LTy)> {
    let dom = dom.clone();
    prop_oneof![
        1 => Just(dom.clone()),
        3 => lty(2),
    ]
    .prop_flat_map(move |cod| (linfun(&dom, &cod), Just(cod)))
    .boxed()
}

fn nums(n: std::ops::RangeInclusive<usize>) -> BoxedStrategy<Rc<Vec<f64>>> {
    prop::collection::vec(num(), n).prop_map(Rc::new).boxed()
}

/// `g ∘ f`, with `f` given and `g` random.
fn after(f: LinFun, mid: LTy, cod: LTy, depth: u32) -> BoxedStrategy<LinFun> {
    lazy(move || {
        let f = f.clone();
        linfun_sized(&mid, &cod, depth)
            .prop_map(move |g| LinFun::compose(&g, &f))
            .boxed()
    })
}

/// `g ∘ f`, with `g` given and `f` random.
fn before(g: LinFun, dom: LTy, mid: LTy, depth: u32) -> BoxedStrategy<LinFun> {
    lazy(move || {
        let g = g.clone();
        linfun_sized(&dom, &mid, depth)
            .prop_map(move |f| LinFun::compose(&g, &f))
            .boxed()
    })
}

fn linfun_sized(dom: &LTy, cod: &LTy, depth: u32) -> BoxedStrategy<LinFun> {
    let (dom, cod) = (dom.clone(), cod.clone());
    let d = depth;
    let mut opts: Vec<(u32, BoxedStrategy<LinFun>)> = vec![(1, Just(LinFun::zero()).boxed())];
    if dom == cod {
        opts.push((3, Just(LinFun::id()).boxed()));
        opts.push((
            1,
            coefficient()
                .prop_map(|c| LinFun::scale(c, &LinFun::id()))
                .boxed(),
        ));
    }
    // Eliminations of the domain, followed by a map into the codomain (the domain shrinks, so
    // this recursion ends without using depth).
    match &dom {
        LTy::Real | LTy::Unit => {}
        LTy::Prod(p) => {
            let (a, b) = (p.0.clone(), p.1.clone());
            opts.push((2, after(LinFun::fst(), a.clone(), cod.clone(), d)));
            opts.push((2, after(LinFun::snd(), b.clone(), cod.clone(), d)));
            let c = cod.clone();
            opts.push((
                3,
                lazy(move || {
                    (linfun_sized(&a, &c, d), linfun_sized(&b, &c, d))
                        .prop_map(|(f, g)| LinFun::copair(&f, &g))
                        .boxed()
                }),
            ));
        }
        LTy::Sum(p) => {
            let (a, b) = (p.0.clone(), p.1.clone());
            opts.push((2, after(LinFun::from_left(), a.clone(), cod.clone(), d)));
            opts.push((2, after(LinFun::from_right(), b.clone(), cod.clone(), d)));
            let c = cod.clone();
            opts.push((
                2,
                lazy(move || {
                    (linfun_sized(&a, &c, d), linfun_sized(&b, &c, d))
                        .prop_map(|(f, g)| {
                            LinFun::plus(
                                &LinFun::compose(&f, &LinFun::from_left()),
                                &LinFun::compose(&g, &LinFun::from_right()),
                            )
                        })
                        .boxed()
                }),
            ));
        }
        LTy::Array(a) => {
            let a = (**a).clone();
            let (a1, c1) = (a.clone(), cod.clone());
            opts.push((
                2,
                lazy(move || {
                    let i = prop_oneof![4 => 0..MAX_LEN as i64, 1 => -1..=OBSERVED_LEN as i64];
                    (i, linfun_sized(&a1, &c1, d))
                        .prop_map(|(i, g)| LinFun::compose(&g, &LinFun::index(i)))
                        .boxed()
                }),
            ));
            opts.push((2, after(LinFun::lsum(), a.clone(), cod.clone(), d)));
            if let LTy::Array(c) = &cod {
                let (a2, c2) = (a.clone(), (**c).clone());
                opts.push((
                    3,
                    lazy(move || {
                        linfun_sized(&a2, &c2, d)
                            .prop_map(|g| LinFun::map(&g))
                            .boxed()
                    }),
                ));
            }
            if matches!(a, LTy::Real) {
                let c3 = cod.clone();
                opts.push((
                    2,
                    lazy(move || {
                        (nums(0..=MAX_LEN), linfun_sized(&LTy::Real, &c3, d))
                            .prop_map(|(ys, g)| LinFun::compose(&g, &LinFun::dot_with(ys)))
                            .boxed()
                    }),
                ));
            }
        }
        LTy::Copower(p) => {
            let (t, a, c) = (p.0.clone(), p.1.clone(), cod.clone());
            opts.push((
                4,
                lazy(move || {
                    family_sized(&t, &a, &c, d)
                        .prop_map(|fam| LinFun::copower_fold(fam.to_fn()))
                        .boxed()
                }),
            ));
        }
        LTy::Power(p) => {
            let (t, a, c) = (p.0.clone(), p.1.clone(), cod.clone());
            opts.push((
                3,
                lazy(move || {
                    (ty_value(&t), linfun_sized(&a, &c, d))
                        .prop_map(|(b, g)| LinFun::compose(&g, &LinFun::power_eval(b)))
                        .boxed()
                }),
            ));
        }
    }
    // Introductions of the codomain, after a map out of the domain (the codomain shrinks).
    match &cod {
        LTy::Real | LTy::Unit => {}
        LTy::Prod(p) => {
            let (a, b) = (p.0.clone(), p.1.clone());
            let dm = dom.clone();
            opts.push((
                3,
                lazy(move || {
                    (linfun_sized(&dm, &a, d), linfun_sized(&dm, &b, d))
                        .prop_map(|(f, g)| LinFun::pair(&f, &g))
                        .boxed()
                }),
            ));
            opts.push((2, before(LinFun::inj1(), dom.clone(), p.0.clone(), d)));
            opts.push((2, before(LinFun::inj2(), dom.clone(), p.1.clone(), d)));
        }
        LTy::Sum(p) => {
            opts.push((2, before(LinFun::left(), dom.clone(), p.0.clone(), d)));
            opts.push((2, before(LinFun::right(), dom.clone(), p.1.clone(), d)));
        }
        LTy::Array(c) => {
            let c = (**c).clone();
            let (dm, c1) = (dom.clone(), c.clone());
            opts.push((
                2,
                lazy(move || {
                    (1..=MAX_LEN)
                        .prop_flat_map({
                            let (dm, c1) = (dm.clone(), c1.clone());
                            move |n| {
                                (0..n as i64, linfun_sized(&dm, &c1, d)).prop_map(move |(i, f)| {
                                    LinFun::compose(&LinFun::onehot(n, i), &f)
                                })
                            }
                        })
                        .boxed()
                }),
            ));
            let (dm, c2) = (dom.clone(), c.clone());
            opts.push((
                2,
                lazy(move || {
                    (0..=MAX_LEN, linfun_sized(&dm, &c2, d))
                        .prop_map(|(n, f)| LinFun::compose(&LinFun::replicate(n), &f))
                        .boxed()
                }),
            ));
            if matches!(c, LTy::Real) {
                let dm = dom.clone();
                opts.push((
                    2,
                    lazy(move || {
                        (nums(0..=MAX_LEN), linfun_sized(&dm, &LTy::Real, d))
                            .prop_map(|(ys, f)| LinFun::compose(&LinFun::scale_array(ys), &f))
                            .boxed()
                    }),
                ));
            }
        }
        LTy::Copower(p) => {
            let (t, c, dm) = (p.0.clone(), p.1.clone(), dom.clone());
            opts.push((
                3,
                lazy(move || {
                    (ty_value(&t), linfun_sized(&dm, &c, d))
                        .prop_map(|(a, f)| LinFun::compose(&LinFun::copower_singleton(a), &f))
                        .boxed()
                }),
            ));
        }
        LTy::Power(p) => {
            let (t, c, dm) = (p.0.clone(), p.1.clone(), dom.clone());
            opts.push((
                3,
                lazy(move || {
                    family_sized(&t, &dm, &c, d)
                        .prop_map(|fam| LinFun::power_intro(fam.to_fn()))
                        .boxed()
                }),
            ));
        }
    }
    // Sums, multiples and compositions through a random type (these use depth).
    if depth > 0 {
        let d = depth - 1;
        let (dm, c) = (dom.clone(), cod.clone());
        opts.push((
            1,
            lazy(move || {
                (linfun_sized(&dm, &c, d), linfun_sized(&dm, &c, d))
                    .prop_map(|(f, g)| LinFun::plus(&f, &g))
                    .boxed()
            }),
        ));
        let (dm, c) = (dom.clone(), cod.clone());
        opts.push((
            1,
            lazy(move || {
                let n = prop_oneof![1 => Just(0), 6 => 1..=3usize];
                vec_of(linfun_sized(&dm, &c, d), n)
                    .prop_map(|fs| LinFun::sum(&fs))
                    .boxed()
            }),
        ));
        let (dm, c) = (dom.clone(), cod.clone());
        opts.push((
            1,
            lazy(move || {
                (coefficient(), linfun_sized(&dm, &c, d))
                    .prop_map(|(k, f)| LinFun::scale(k, &f))
                    .boxed()
            }),
        ));
        opts.push((
            1,
            lazy(move || {
                let (dom, cod) = (dom.clone(), cod.clone());
                lty(1)
                    .prop_flat_map(move |mid| {
                        (linfun_sized(&dom, &mid, d), linfun_sized(&mid, &cod, d))
                            .prop_map(|(f, g)| LinFun::compose(&g, &f))
                    })
                    .boxed()
            }),
        ));
    }
    // The zero map (first) is rarely chosen when there is anything else.
    for o in &mut opts[1..] {
        o.0 *= 4;
    }
    Union::new_weighted(opts).boxed()
}

// ----- observations -----

/// The fixed choices behind [`observe`]: sample points of each `τ` at which powers are
/// evaluated, and the weights of the hash functions copowers are folded with. Everything is a
/// deterministic function of one seed (and of the position in the type).
#[derive(Clone, Copy, Debug)]
pub struct Probes {
    seed: u64,
}

/// The probes chosen by `seed`.
pub fn probes(seed: u64) -> Probes {
    Probes { seed }
}

/// Probes with a random seed.
pub fn any_probes() -> BoxedStrategy<Probes> {
    any::<u64>().prop_map(probes).boxed()
}

/// A finite numeric observation of a value `x` of the linear type `l`, through the public API
/// only. Two values are equal elements of the monoid if and only if (with probability one over
/// the probes' seed, for the values the generators here produce) their observations agree:
///
/// * `Real`: the number; `Unit`: nothing;
/// * `L × L'`: both components (`fst`, `snd`); `L ⊕ L'`: `fromLeft` and `fromRight`;
/// * `Array L`: elements `0 .. OBSERVED_LEN` (zero past the end, so zero padding is invisible)
///   and the sum of all elements (`lsum`);
/// * `τ → L`: the values at [`POINTS`] sample points of `τ` ([`sample_value`]); a point where
///   the function fails (a partial operation such as indexing, at a sampled argument) is
///   observed as NaNs (as many as a value would give);
/// * `!τ ⊗ L`: for each of [`POINTS`] hash functions `h_k` ([`hash_value`]), the fold
///   `Σ (a, l) ↦ h_k(a) · l`, observed in `L`. Since `h_k` tells the points `a` apart, this
///   determines the formal sum.
///
/// Panics if `x` is not a value of type `l`.
pub fn observe(l: &LTy, x: &Lin, probes: &Probes) -> Vec<f64> {
    let mut out = Vec::new();
    observe_into(l, x, probes.seed, &mut out);
    out
}

fn observe_into(l: &LTy, x: &Lin, seed: u64, out: &mut Vec<f64>) {
    deep(|| match l {
        LTy::Real => out.push(x.to_real()),
        LTy::Unit => {}
        LTy::Prod(p) => {
            observe_into(&p.0, &x.fst(), mix(seed, 1), out);
            observe_into(&p.1, &x.snd(), mix(seed, 2), out);
        }
        LTy::Sum(p) => {
            observe_into(&p.0, &x.from_left(), mix(seed, 3), out);
            observe_into(&p.1, &x.from_right(), mix(seed, 4), out);
        }
        LTy::Array(e) => {
            for i in 0..OBSERVED_LEN as u64 {
                observe_into(e, &x.index(i as i64), mix(seed, 10 + i), out);
            }
            observe_into(e, &x.sum(), mix(seed, 5), out);
        }
        LTy::Power(p) => {
            for k in 0..POINTS {
                let b = sample_value(&p.0, mix(seed, 20 + k));
                match x.apply_power(&b) {
                    Ok(y) => observe_into(&p.1, &y, mix(seed, 30 + k), out),
                    // Undefined at this point (e.g. it indexes out of range there): as many
                    // NaNs as a value would give, so observations keep a type-determined shape.
                    Err(_) => out.extend(std::iter::repeat_n(f64::NAN, observed_len(&p.1))),
                }
            }
        }
        LTy::Copower(p) => {
            for k in 0..POINTS {
                let (t, s) = (p.0.clone(), mix(seed, 40 + k));
                let y = x
                    .to_copower()
                    .fold(move |a| Ok(LinFun::scale(hash_value(&t, a, s), &LinFun::id())))
                    .expect("testing::observe: a copower fold failed");
                observe_into(&p.1, &y, mix(seed, 50 + k), out);
            }
        }
    })
}

/// The number of reals [`observe`] gives for a value of type `l` (it depends only on `l`).
fn observed_len(l: &LTy) -> usize {
    deep(|| match l {
        LTy::Real => 1,
        LTy::Unit => 0,
        LTy::Prod(p) | LTy::Sum(p) => observed_len(&p.0) + observed_len(&p.1),
        LTy::Array(e) => (OBSERVED_LEN + 1) * observed_len(e),
        LTy::Power(p) | LTy::Copower(p) => POINTS as usize * observed_len(&p.1),
    })
}

/// True if `a` and `b` have the same length and agree elementwise up to relative error `rel`:
/// `|x - y| ≤ rel · (1 + max(|x|, |y|))` (so numbers near zero are compared absolutely, which
/// absorbs cancellation in sums of moderate terms). Equal infinities and two NaNs agree.
pub fn approx_eq(a: &[f64], b: &[f64], rel: f64) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(&x, &y)| {
            x == y
                || (x.is_nan() && y.is_nan())
                || (x - y).abs() <= rel * (1.0 + x.abs().max(y.abs()))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;

    fn draw<T: fmt::Debug>(s: &BoxedStrategy<T>, runner: &mut TestRunner) -> T {
        s.new_tree(runner).unwrap().current()
    }

    /// The outermost former of a linear type, as a small number.
    fn former(l: &LTy) -> usize {
        match l {
            LTy::Real => 0,
            LTy::Unit => 1,
            LTy::Prod(_) => 2,
            LTy::Copower(_) => 3,
            LTy::Power(_) => 4,
            LTy::Sum(_) => 5,
            LTy::Array(_) => 6,
        }
    }

    #[test]
    fn lty_covers_every_former_and_function_indices() {
        let mut runner = TestRunner::deterministic();
        let s = lty(2);
        let mut seen = [false; 7];
        let mut fun_index = false;
        for _ in 0..300 {
            let l = draw(&s, &mut runner);
            seen[former(&l)] = true;
            if let Some((t, _)) = l.as_copower().or(l.as_power()) {
                fun_index |= t.as_fun().is_some();
            }
        }
        assert_eq!(seen, [true; 7]);
        assert!(fun_index);
    }

    #[test]
    fn samples_and_hashes_are_deterministic_and_representation_independent() {
        let t = Ty::from_source(&Type::array(Type::prod(
            Type::Real,
            Type::fun(Type::Real, Type::sum(Type::Int, Type::Bool)),
        )));
        for seed in 0..50 {
            let v = sample_value(&t, seed);
            assert_eq!(hash_value(&t, &v, 7), hash_value(&t, &v, 7));
            let w = sample_value(&t, seed);
            assert_eq!(hash_value(&t, &v, 9), hash_value(&t, &w, 9));
        }
        // The empty array, boxed or unboxed.
        let e = Ty::from_source(&Type::array(Type::Int));
        let boxed = Value::Array(Rc::new(vec![]));
        let unboxed = Value::RealArray(Rc::new(vec![]));
        assert_eq!(hash_value(&e, &boxed, 3), hash_value(&e, &unboxed, 3));
        // Different values, different hashes.
        let r = Ty::Real;
        assert_ne!(
            hash_value(&r, &Value::Real(1.0), 3),
            hash_value(&r, &Value::Real(1.5), 3)
        );
        let p = Ty::prod(Ty::Int, Ty::Int);
        let v12 = Value::pair(Value::Int(1), Value::Int(2));
        let v21 = Value::pair(Value::Int(2), Value::Int(1));
        assert_ne!(hash_value(&p, &v12, 3), hash_value(&p, &v21, 3));
    }

    #[test]
    fn observations_tell_apart_what_differs() {
        let p = probes(11);
        let t = Ty::Real;
        let cop = LTy::copower(t.clone(), LTy::Real);
        let at = |a: f64, l: f64| Lin::copower(Copower::singleton(Value::Real(a), Lin::real(l)));
        // Same mass at different points differ; split mass at one point does not.
        assert_ne!(
            observe(&cop, &at(1.0, 2.0), &p),
            observe(&cop, &at(0.5, 2.0), &p)
        );
        let split = Lin::plus(at(1.0, 0.5), at(1.0, 1.5));
        assert!(approx_eq(
            &observe(&cop, &at(1.0, 2.0), &p),
            &observe(&cop, &split, &p),
            1e-12
        ));
        // Two points swapped between two masses differ.
        let ab = Lin::plus(at(1.0, 2.0), at(-1.0, 3.0));
        let ba = Lin::plus(at(1.0, 3.0), at(-1.0, 2.0));
        assert!(!approx_eq(
            &observe(&cop, &ab, &p),
            &observe(&cop, &ba, &p),
            1e-9
        ));
        // Powers differing at one point.
        let pow = LTy::power(Ty::Bool, LTy::Real);
        let f = Lin::power(|b| Ok(Lin::real(if b.expect_bool() { 1.0 } else { 0.0 })));
        let g = Lin::power(|b| Ok(Lin::real(if b.expect_bool() { 1.0 } else { 0.5 })));
        // With three sample points of Bool, both values are hit for most seeds.
        let differ = (0..20)
            .filter(|&s| observe(&pow, &f, &probes(s)) != observe(&pow, &g, &probes(s)))
            .count();
        assert!(differ >= 15, "{differ}");
        // Arrays: zero padding is invisible, a trailing element is not.
        let arr = LTy::array(LTy::Real);
        assert_eq!(
            observe(&arr, &Lin::reals(vec![1.0, 2.0]), &p),
            observe(&arr, &Lin::reals(vec![1.0, 2.0, 0.0]), &p)
        );
        assert_ne!(
            observe(&arr, &Lin::reals(vec![1.0, 2.0]), &p),
            observe(&arr, &Lin::reals(vec![1.0, 2.0, 3.0]), &p)
        );
        // Sums: left and right parts are both seen.
        let sum = LTy::sum(LTy::Real, LTy::Real);
        assert_eq!(
            observe(&sum, &Lin::left(Lin::real(2.0)), &p),
            vec![2.0, 0.0]
        );
        assert_eq!(
            observe(&sum, &Lin::right(Lin::real(2.0)), &p),
            vec![0.0, 2.0]
        );
    }

    #[test]
    fn generated_values_and_maps_have_their_types() {
        // Observing a value or a map's result panics on a type error, so this checks that the
        // generators are type-correct; zero_like values must observe as zero (up to rounding:
        // folding `[(a, l), (b, m), (a, -l), (b, -m)]` need not cancel exactly).
        let mut runner = TestRunner::deterministic();
        let p = probes(5);
        for _ in 0..150 {
            let l = draw(&lty(2), &mut runner);
            let x = draw(&lin(&l), &mut runner);
            observe(&l, &x, &p);
            let z = draw(&zero_like(&l), &mut runner);
            let o = observe(&l, &z, &p);
            assert!(approx_eq(&o, &vec![0.0; o.len()], 1e-9), "{l}: {z:?} {o:?}");
            let (f, m) = draw(&linfun_from(&l), &mut runner);
            observe(&m, &f.apply(&x).unwrap(), &p);
        }
    }

    #[test]
    fn approx_eq_is_relative_with_an_absolute_floor() {
        assert!(approx_eq(&[1e6, 0.0], &[1e6 + 1e-4, 1e-10], 1e-9));
        assert!(!approx_eq(&[1.0], &[1.0 + 1e-6], 1e-9));
        assert!(!approx_eq(&[1.0], &[1.0, 2.0], 1e-9));
        assert!(approx_eq(
            &[f64::NAN, f64::INFINITY],
            &[f64::NAN, f64::INFINITY],
            0.0
        ));
        assert!(!approx_eq(&[f64::NAN], &[0.0], 1.0));
    }
}
