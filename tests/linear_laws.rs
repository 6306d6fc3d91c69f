//! Laws of the linear API (DESIGN.md §4): every linear type is a commutative monoid (in fact a
//! real vector space), every linear map built through the API is linear, and a copower's fold
//! cannot see the order, bracketing or splitting of its pairs. Values are compared through
//! `chad::internals::target::testing::observe`, so representations (sparse or dense zero, one-hot or dense
//! arrays, trees of copower concatenations, ...) are free to differ.
//!
//! Case counts default to `DEFAULT_CASES` per property; set `CHAD_PROPTEST_CASES` for more.

mod common;

use chad::Value;
use chad::internals::target::linear::{Copower, Lin, LinFun};
use chad::internals::target::testing::{
    OBSERVED_LEN, Probes, any_probes, approx_eq, copower_sum, family, index_ty, lin, linfun,
    linfun_from, lty, observe, probes, ty_value, zero_like,
};
use chad::internals::target::{LTy, Ty};
use common::{cases, runner};
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::TestCaseError;
use std::rc::Rc;

const DEFAULT_CASES: u32 = 200;

/// Relative tolerance: floating point addition is not associative.
const REL: f64 = 1e-9;

/// Fails with both observations unless they agree up to `REL`.
fn same(
    what: &str,
    l: &LTy,
    a: &Lin,
    b: &Lin,
    p: &Probes,
) -> std::result::Result<(), TestCaseError> {
    let (oa, ob) = (observe(l, a, p), observe(l, b, p));
    prop_assert!(
        approx_eq(&oa, &ob, REL),
        "{what} at type {l}:\n  {a:?}\n  observed {oa:?}\n  {b:?}\n  observed {ob:?}"
    );
    Ok(())
}

fn is_zero_obs(l: &LTy, a: &Lin, p: &Probes) -> bool {
    let o = observe(l, a, p);
    approx_eq(&o, &vec![0.0; o.len()], REL)
}

/// A linear type with `n` random values of it.
fn typed_values(n: usize) -> impl Strategy<Value = (LTy, Vec<Lin>)> {
    lty(3).prop_flat_map(move |l| (Just(l.clone()), prop::collection::vec(lin(&l), n)))
}

#[test]
fn every_linear_type_is_a_commutative_monoid() {
    runner(cases(DEFAULT_CASES))
        .run(&(typed_values(3), any_probes()), |((l, v), p)| {
            let (x, y, z) = (&v[0], &v[1], &v[2]);
            let before = observe(&l, x, &p);
            let zero = Lin::zero();
            same("0 + x = x", &l, &Lin::plus(zero.clone(), x.clone()), x, &p)?;
            same("x + 0 = x", &l, &Lin::plus(x.clone(), zero), x, &p)?;
            same(
                "x + y = y + x",
                &l,
                &Lin::plus(x.clone(), y.clone()),
                &Lin::plus(y.clone(), x.clone()),
                &p,
            )?;
            same(
                "(x + y) + z = x + (y + z)",
                &l,
                &Lin::plus(Lin::plus(x.clone(), y.clone()), z.clone()),
                &Lin::plus(x.clone(), Lin::plus(y.clone(), z.clone())),
                &p,
            )?;
            // The observation is itself additive, which is what makes it a faithful test.
            let sum: Vec<f64> = observe(&l, x, &p)
                .iter()
                .zip(observe(&l, y, &p))
                .map(|(a, b)| a + b)
                .collect();
            prop_assert!(approx_eq(
                &observe(&l, &Lin::plus(x.clone(), y.clone()), &p),
                &sum,
                REL
            ));
            // The operands are unchanged by the additions (shared buffers are not mutated).
            prop_assert_eq!(observe(&l, x, &p), before);
            Ok(())
        })
        .unwrap();
}

#[test]
fn every_linear_type_is_a_real_vector_space() {
    let coef = -3.0f64..3.0;
    runner(cases(DEFAULT_CASES))
        .run(
            &(typed_values(2), coef.clone(), coef, any_probes()),
            |((l, v), a, b, p)| {
                let (x, y) = (&v[0], &v[1]);
                same("1 · x = x", &l, &Lin::scale(1.0, x), x, &p)?;
                prop_assert!(is_zero_obs(&l, &Lin::scale(0.0, x), &p), "0 · x = 0");
                prop_assert!(
                    is_zero_obs(&l, &Lin::plus(x.clone(), Lin::scale(-1.0, x)), &p),
                    "x + (-1) · x = 0"
                );
                same(
                    "a · (b · x) = (a b) · x",
                    &l,
                    &Lin::scale(a, &Lin::scale(b, x)),
                    &Lin::scale(a * b, x),
                    &p,
                )?;
                same(
                    "(a + b) · x = a · x + b · x",
                    &l,
                    &Lin::scale(a + b, x),
                    &Lin::plus(Lin::scale(a, x), Lin::scale(b, x)),
                    &p,
                )?;
                same(
                    "a · (x + y) = a · x + a · y",
                    &l,
                    &Lin::scale(a, &Lin::plus(x.clone(), y.clone())),
                    &Lin::plus(Lin::scale(a, x), Lin::scale(a, y)),
                    &p,
                )?;
                // Observation commutes with scaling.
                let scaled: Vec<f64> = observe(&l, x, &p).iter().map(|o| a * o).collect();
                prop_assert!(approx_eq(&observe(&l, &Lin::scale(a, x), &p), &scaled, REL));
                Ok(())
            },
        )
        .unwrap();
}

/// A domain type, two values, a zero built densely, a scalar, and a random map out of it.
fn map_cases() -> impl Strategy<Value = (LTy, Lin, Lin, Lin, f64, (LinFun, LTy))> {
    lty(2).prop_flat_map(|l| {
        (
            Just(l.clone()),
            lin(&l),
            lin(&l),
            zero_like(&l),
            -3.0f64..3.0,
            linfun_from(&l),
        )
    })
}

#[test]
fn linear_maps_are_linear() {
    runner(cases(DEFAULT_CASES))
        .run(
            &(map_cases(), any_probes()),
            |((l, x, y, z, c, (f, m)), p)| {
                let ap = |v: &Lin| f.apply(v).expect("a generated linear map failed");
                prop_assert!(is_zero_obs(&l, &z, &p), "zero_like gave {z:?}");
                prop_assert!(is_zero_obs(&m, &ap(&Lin::zero()), &p), "f(0) = 0");
                prop_assert!(
                    is_zero_obs(&m, &ap(&z), &p),
                    "f(0) = 0 for the dense zero {z:?}: {:?} gives {:?}",
                    f,
                    ap(&z)
                );
                same(
                    &format!("f(x + y) = f(x) + f(y) for {f:?} : {l} ⊸ {m}"),
                    &m,
                    &ap(&Lin::plus(x.clone(), y.clone())),
                    &Lin::plus(ap(&x), ap(&y)),
                    &p,
                )?;
                same(
                    &format!("f(c · x) = c · f(x) for {f:?} : {l} ⊸ {m}, c = {c}"),
                    &m,
                    &ap(&Lin::scale(c, &x)),
                    &Lin::scale(c, &ap(&x)),
                    &p,
                )?;
                same(
                    "f(x + 0) = f(x) with a dense zero",
                    &m,
                    &ap(&Lin::plus(x.clone(), z.clone())),
                    &ap(&x),
                    &p,
                )?;
                Ok(())
            },
        )
        .unwrap();
}

#[test]
fn combinators_satisfy_their_equations() {
    // Equations between different combinator expressions, on random maps and values.
    let strategy = (lty(2), lty(2), lty(1), index_ty(1)).prop_flat_map(|(a, b, m, t)| {
        (
            (Just(a.clone()), Just(b.clone()), Just(m.clone())),
            (lin(&a), lin(&b), linfun(&a, &m), linfun(&b, &m)),
            (ty_value(&t), family(&t, &a, &m), -3.0f64..3.0),
            any_probes(),
        )
    });
    runner(cases(DEFAULT_CASES))
        .run(&strategy, |((a, b, m), (x, y, f, g), (v, fam, c), p)| {
            let xy = Lin::pair(x.clone(), y.clone());
            // fst ∘ ⟨f, 2·f⟩ = f, snd ∘ ⟨f, 2·f⟩ = 2·f.
            let f2 = LinFun::scale(2.0, &f);
            let ff = LinFun::pair(&f, &f2);
            same(
                "fst ∘ ⟨f, 2·f⟩ = f",
                &m,
                &LinFun::compose(&LinFun::fst(), &ff).apply(&x).unwrap(),
                &f.apply(&x).unwrap(),
                &p,
            )?;
            same(
                "snd ∘ ⟨f, 2·f⟩ = 2·f",
                &m,
                &LinFun::compose(&LinFun::snd(), &ff).apply(&x).unwrap(),
                &Lin::plus(f.apply(&x).unwrap(), f.apply(&x).unwrap()),
                &p,
            )?;
            // [f, g] ∘ inj1 = f, [f, g] ∘ inj2 = g, [f, g] (x, y) = f x + g y.
            let fg = LinFun::copair(&f, &g);
            same(
                "[f, g] ∘ inj1 = f",
                &m,
                &LinFun::compose(&fg, &LinFun::inj1()).apply(&x).unwrap(),
                &f.apply(&x).unwrap(),
                &p,
            )?;
            same(
                "[f, g] ∘ inj2 = g",
                &m,
                &LinFun::compose(&fg, &LinFun::inj2()).apply(&y).unwrap(),
                &g.apply(&y).unwrap(),
                &p,
            )?;
            same(
                "[f, g] (x, y) = f x + g y",
                &m,
                &fg.apply(&xy).unwrap(),
                &Lin::plus(f.apply(&x).unwrap(), g.apply(&y).unwrap()),
                &p,
            )?;
            // Sums and scaling of maps are pointwise.
            same(
                "(f + c·f) x = f x + c · f x",
                &m,
                &LinFun::plus(&f, &LinFun::scale(c, &f)).apply(&x).unwrap(),
                &Lin::plus(f.apply(&x).unwrap(), Lin::scale(c, &f.apply(&x).unwrap())),
                &p,
            )?;
            same(
                "sum [f, f, f] = 3 · f",
                &m,
                &LinFun::sum(&[f.clone(), f.clone(), f.clone()])
                    .apply(&x)
                    .unwrap(),
                &Lin::scale(3.0, &f.apply(&x).unwrap()),
                &p,
            )?;
            prop_assert!(is_zero_obs(&m, &LinFun::sum(&[]).apply(&x).unwrap(), &p));
            prop_assert!(is_zero_obs(&m, &LinFun::zero().apply(&x).unwrap(), &p));
            same("id x = x", &a, &LinFun::id().apply(&x).unwrap(), &x, &p)?;
            // Linear sums: fromLeft (linl x) = x, fromRight (linl x) = 0, and symmetrically.
            let s = LTy::sum(a.clone(), b.clone());
            let lx = LinFun::left().apply(&x).unwrap();
            let ry = LinFun::right().apply(&y).unwrap();
            same(
                "fromLeft (linl x) = x",
                &a,
                &LinFun::from_left().apply(&lx).unwrap(),
                &x,
                &p,
            )?;
            same(
                "fromRight (linr y) = y",
                &b,
                &LinFun::from_right().apply(&ry).unwrap(),
                &y,
                &p,
            )?;
            prop_assert!(
                is_zero_obs(&b, &lx.from_right(), &p),
                "fromRight (linl x) = 0"
            );
            prop_assert!(
                is_zero_obs(&a, &ry.from_left(), &p),
                "fromLeft (linr y) = 0"
            );
            same(
                "linl x + linr y = (x, y) as a linear sum",
                &s,
                &Lin::plus(lx.clone(), ry.clone()),
                &Lin::plus(Lin::left(x.clone()), Lin::right(y.clone())),
                &p,
            )?;
            // Copowers: copowfold F (!v ⊗ x) = F(v) x.
            let cop = LinFun::copower_singleton(v.clone()).apply(&x).unwrap();
            same(
                "copowfold F (!v ⊗ x) = F(v) x",
                &m,
                &LinFun::copower_fold(fam.to_fn()).apply(&cop).unwrap(),
                &fam.at(&v).apply(&x).unwrap(),
                &p,
            )?;
            // Powers: (λb. F(b) x) @ v = F(v) x.
            let pow = LinFun::power_intro(fam.to_fn()).apply(&x).unwrap();
            same(
                "(power_intro F x) @ v = F(v) x",
                &m,
                &LinFun::power_eval(v.clone()).apply(&pow).unwrap(),
                &fam.at(&v).apply(&x).unwrap(),
                &p,
            )?;
            Ok(())
        })
        .unwrap();
}

/// Pairs for a copower `!τ ⊗ L`: a pool of points (so that points repeat), the pairs, one extra
/// linear value to split a pair with, and which pair to split.
type PairsCase = (Ty, LTy, LTy, Vec<(Value, Lin)>, Lin, Index);

fn pairs_case() -> impl Strategy<Value = PairsCase> {
    (index_ty(1), lty(2), lty(2)).prop_flat_map(|(t, l, m)| {
        let pairs = (
            prop::collection::vec(ty_value(&t), 1..=3),
            prop::collection::vec((any::<Index>(), lin(&l)), 1..=6),
        )
            .prop_map(|(pool, pairs)| {
                pairs
                    .into_iter()
                    .map(|(i, x)| (i.get(&pool).clone(), x))
                    .collect::<Vec<_>>()
            });
        (
            Just(t),
            Just(l.clone()),
            Just(m),
            pairs,
            lin(&l),
            any::<Index>(),
        )
    })
}

#[test]
fn copower_folds_ignore_order_bracketing_and_splitting() {
    let strategy = pairs_case().prop_flat_map(|(t, l, m, pairs, extra, which)| {
        // The list with pair j = (a, x) replaced by (a, x + extra) ...
        let j = which.index(pairs.len());
        let mut merged = pairs.clone();
        merged[j].1 = Lin::plus(merged[j].1.clone(), extra.clone());
        // ... and, shuffled, the list with (a, x) and (a, extra) separately.
        let mut split = pairs;
        split.push((split[j].0.clone(), extra));
        (
            (Just(t.clone()), Just(l.clone()), Just(m.clone())),
            (Just(merged), Just(split).prop_shuffle()),
            (any::<u64>(), any::<u64>(), any::<bool>()),
            (family(&t, &l, &m), any_probes()),
        )
    });
    runner(cases(DEFAULT_CASES))
        .run(
            &strategy,
            |((t, l, m), (merged, split), (s1, s2, via_lin), (fam, p))| {
                let singletons = |v: &[(Value, Lin)]| -> Vec<Copower> {
                    v.iter()
                        .map(|(a, x)| Copower::singleton(a.clone(), x.clone()))
                        .collect()
                };
                let c1 = Lin::copower(copower_sum(&singletons(&merged), s1));
                let c2 = if via_lin {
                    // Sum as linear values, one singleton at a time.
                    singletons(&split)
                        .into_iter()
                        .fold(Lin::zero(), |acc, c| Lin::plus(acc, Lin::copower(c)))
                } else {
                    Lin::copower(copower_sum(&singletons(&split), s2))
                };
                let fold = |c: &Lin| {
                    LinFun::copower_fold(fam.to_fn())
                        .apply(c)
                        .expect("a fold failed")
                };
                same(
                    &format!("fold {fam:?} over regrouped pairs"),
                    &m,
                    &fold(&c1),
                    &fold(&c2),
                    &p,
                )?;
                same("regrouped copowers", &LTy::copower(t, l), &c1, &c2, &p)?;
                // The fold is the sum over the list, in list order.
                let direct = merged.iter().fold(Lin::zero(), |acc, (a, x)| {
                    Lin::plus(acc, fam.at(a).apply(x).unwrap())
                });
                same("fold = Σ F(a) x", &m, &fold(&c1), &direct, &p)?;
                Ok(())
            },
        )
        .unwrap();
}

#[test]
fn array_combinators_satisfy_their_equations() {
    let strategy = lty(2).prop_flat_map(|e| {
        let arr = LTy::array(e.clone());
        (
            (Just(e.clone()), lin(&e), lin(&arr)),
            (1..=5usize).prop_flat_map(|n| (Just(n), 0..n as i64)),
            lty(1).prop_flat_map(move |m| (Just(m.clone()), linfun(&e, &m))),
            any_probes(),
        )
    });
    runner(cases(DEFAULT_CASES))
        .run(&strategy, |((e, x, w), (n, i), (m, f), p)| {
            let arr = LTy::array(e.clone());
            let oh = LinFun::onehot(n, i).apply(&x).unwrap();
            let rep = LinFun::replicate(n).apply(&x).unwrap();
            for j in -1..=n as i64 + 1 {
                let at = LinFun::index(j);
                let want = if j == i { x.clone() } else { Lin::zero() };
                same(
                    &format!("onehot {n} {i} x ! {j}"),
                    &e,
                    &at.apply(&oh).unwrap(),
                    &want,
                    &p,
                )?;
                let want = if (0..n as i64).contains(&j) {
                    x.clone()
                } else {
                    Lin::zero()
                };
                same(
                    &format!("replicate {n} x ! {j}"),
                    &e,
                    &at.apply(&rep).unwrap(),
                    &want,
                    &p,
                )?;
                // lmap f commutes with indexing.
                same(
                    &format!("lmap f w ! {j} = f (w ! {j})"),
                    &m,
                    &at.apply(&LinFun::map(&f).apply(&w).unwrap()).unwrap(),
                    &f.apply(&w.index(j)).unwrap(),
                    &p,
                )?;
            }
            let lsum = LinFun::lsum();
            same(
                "lsum (onehot n i x) = x",
                &e,
                &lsum.apply(&oh).unwrap(),
                &x,
                &p,
            )?;
            same(
                "lsum (replicate n x) = n · x",
                &e,
                &lsum.apply(&rep).unwrap(),
                &Lin::scale(n as f64, &x),
                &p,
            )?;
            same(
                "lsum (lmap f w) = f (lsum w)",
                &m,
                &lsum.apply(&LinFun::map(&f).apply(&w).unwrap()).unwrap(),
                &f.apply(&w.sum()).unwrap(),
                &p,
            )?;
            // zipWith of an array of maps is elementwise application, truncated (or padded) to
            // the length of the array of maps.
            let fi = |j: usize| {
                if j % 2 == 0 {
                    f.clone()
                } else {
                    LinFun::scale(-(j as f64), &f)
                }
            };
            let zipped = w.zip_with(n, |j| Ok(fi(j))).unwrap();
            let elementwise = Lin::build(n, |j| fi(j).apply(&w.index(j as i64))).unwrap();
            same(
                &format!("zipWith of {n} maps = elementwise application"),
                &LTy::array(m.clone()),
                &zipped,
                &elementwise,
                &p,
            )?;
            // An array is the sum of the one-hots of its elements, and build agrees with both.
            let len = w.stored_len();
            let hots = (0..len).fold(Lin::zero(), |acc, j| {
                Lin::plus(acc, Lin::onehot(len, j as i64, w.index(j as i64)).unwrap())
            });
            same("w = Σ onehot (w ! j)", &arr, &hots, &w, &p)?;
            let built = Lin::build(len, |j| Ok(w.index(j as i64))).unwrap();
            same("build (w !) = w", &arr, &built, &w, &p)?;
            Ok(())
        })
        .unwrap();
}

#[test]
fn copower_observations_tell_points_apart() {
    // The copower test above is only meaningful if observe can see where the mass sits: moving
    // one pair's linear part to another point must change the observation.
    let strategy = (index_ty(1), lty(1)).prop_flat_map(|(t, l)| {
        (
            Just(t.clone()),
            Just(l.clone()),
            ty_value(&t),
            ty_value(&t),
            lin(&l),
            any_probes(),
        )
    });
    let told_apart = std::cell::Cell::new(0u32);
    let runs = std::cell::Cell::new(0u32);
    runner(cases(DEFAULT_CASES))
        .run(&strategy, |(t, l, a, b, x, p)| {
            runs.set(runs.get() + 1);
            let cop = LTy::copower(t.clone(), l.clone());
            let at_a = Lin::copower(Copower::singleton(a.clone(), x.clone()));
            let at_b = Lin::copower(Copower::singleton(b.clone(), x.clone()));
            let (oa, ob) = (observe(&cop, &at_a, &p), observe(&cop, &at_b, &p));
            if a.same(&b) == Some(true) {
                prop_assert!(approx_eq(&oa, &ob, REL));
            } else if !approx_eq(&oa, &ob, REL) {
                told_apart.set(told_apart.get() + 1);
            }
            Ok(())
        })
        .unwrap();
    // Closures equal at the probe point and the few discrete types may coincide; most differ.
    let (told_apart, runs) = (told_apart.get(), runs.get());
    assert!(
        runs < 20 || told_apart * 4 >= runs,
        "{told_apart} of {runs}"
    );
}

// ----- deterministic facts -----

fn reals(l: &Lin, n: usize) -> Vec<f64> {
    (0..n as i64).map(|i| l.index(i).to_real()).collect()
}

#[test]
fn arrays_of_zeros_of_any_element_type_add_to_arrays() {
    // Regression: `Lin::array` stored an array whose elements were all the (typeless) zero as
    // an unboxed array of reals, so its elements came back as the real 0.0 even at type
    // `Array (Real, Real)`, and adding it to an array of pairs panicked.
    let pr = LTy::prod(LTy::Real, LTy::Real);
    let arr = LTy::array(pr.clone());
    let zeros = Lin::array(vec![Lin::zero(), Lin::zero()]);
    let pairs = Lin::array(vec![Lin::pair(Lin::real(1.0), Lin::real(2.0))]);
    let p = probes(1);
    let sum = Lin::plus(zeros.clone(), pairs.clone());
    assert_eq!(observe(&arr, &sum, &p), observe(&arr, &pairs, &p));
    assert_eq!(zeros.index(1).fst().to_real(), 0.0);
    // The same through a linear map: lmap of the zero map, then added to pairs.
    let mapped = LinFun::map(&LinFun::zero()).apply(&pairs).unwrap();
    let sum = Lin::plus(mapped, pairs.clone());
    assert_eq!(observe(&arr, &sum, &p), observe(&arr, &pairs, &p));
    // One-hots of zero, densified by adding more entries than elements.
    let mut acc = Lin::zero();
    for _ in 0..3 {
        acc = Lin::plus(acc, Lin::onehot(2, 0, Lin::zero()).unwrap());
    }
    let sum = Lin::plus(acc, pairs.clone());
    assert_eq!(observe(&arr, &sum, &p), observe(&arr, &pairs, &p));
}

#[test]
fn scaling_facts() {
    let x = Lin::pair(Lin::real(2.0), Lin::reals(vec![1.0, -3.0]));
    let l = LTy::prod(LTy::Real, LTy::array(LTy::Real));
    let p = probes(2);
    assert_eq!(observe(&l, &Lin::scale(2.0, &x), &p)[..3], [4.0, 2.0, -6.0]);
    assert_eq!(
        observe(&l, &Lin::scale(0.0, &x), &p),
        vec![0.0; 1 + OBSERVED_LEN + 1]
    );
    let f = LinFun::scale(-0.5, &LinFun::snd());
    assert_eq!(reals(&f.apply(&x).unwrap(), 3), vec![-0.5, 1.5, 0.0]);
    assert!(Lin::scale(3.0, &Lin::zero()).is_zero());
}

#[test]
fn sum_injection_facts() {
    let x = Lin::real(4.0);
    assert_eq!(Lin::left(x.clone()).from_left().to_real(), 4.0);
    assert_eq!(Lin::left(x.clone()).from_right().to_real(), 0.0);
    assert_eq!(Lin::right(x.clone()).from_right().to_real(), 4.0);
    assert_eq!(Lin::right(x.clone()).from_left().to_real(), 0.0);
    let both = Lin::plus(Lin::left(Lin::real(1.0)), Lin::right(Lin::real(2.0)));
    assert_eq!(
        (both.from_left().to_real(), both.from_right().to_real()),
        (1.0, 2.0)
    );
}

#[test]
fn onehot_index_lsum_replicate_facts() {
    let x = Lin::pair(Lin::real(1.5), Lin::real(-2.0));
    let l = LTy::prod(LTy::Real, LTy::Real);
    let p = probes(3);
    let oh = Lin::onehot(4, 2, x.clone()).unwrap();
    for j in -1..6 {
        let want = if j == 2 { x.clone() } else { Lin::zero() };
        assert_eq!(
            observe(&l, &oh.index(j), &p),
            observe(&l, &want, &p),
            "index {j}"
        );
    }
    assert_eq!(observe(&l, &oh.sum(), &p), observe(&l, &x, &p));
    assert_eq!(oh.stored_len(), 4);
    assert!(Lin::onehot(4, 4, x.clone()).is_err());
    assert!(Lin::onehot(4, -1, x.clone()).is_err());
    assert!(LinFun::onehot(0, 0).apply(&x).is_err());
    // index is the transpose of onehot: index j ∘ onehot n i = [i = j].
    let back = LinFun::compose(&LinFun::index(2), &LinFun::onehot(4, 2));
    assert_eq!(
        observe(&l, &back.apply(&x).unwrap(), &p),
        observe(&l, &x, &p)
    );
    // lsum ∘ replicate n = n ·, and replicate's elements are copies.
    let r = LinFun::replicate(3).apply(&x).unwrap();
    assert_eq!(r.stored_len(), 3);
    assert_eq!(
        observe(&l, &LinFun::lsum().apply(&r).unwrap(), &p),
        observe(&l, &Lin::scale(3.0, &x), &p)
    );
    for j in 0..3 {
        assert_eq!(observe(&l, &r.index(j), &p), observe(&l, &x, &p));
    }
    assert!(r.index(3).is_zero());
    assert_eq!(Lin::replicate(0, &x).stored_len(), 0);
    // Many one-hots at a few indices: scanned, then densified.
    let mut acc = Lin::zero();
    for k in 0..40 {
        acc = Lin::plus(acc, Lin::onehot(3, k % 3, Lin::real(1.0)).unwrap());
    }
    assert_eq!(reals(&acc, 4), vec![14.0, 13.0, 13.0, 0.0]);
    assert_eq!(acc.sum().to_real(), 40.0);
    // lmap over a sparse array keeps it sparse and maps each entry.
    let doubled = LinFun::map(&LinFun::scale(2.0, &LinFun::id()))
        .apply(&Lin::onehot(5, 1, Lin::real(3.0)).unwrap())
        .unwrap();
    assert_eq!(reals(&doubled, 5), vec![0.0, 6.0, 0.0, 0.0, 0.0]);
}

#[test]
fn dot_with_and_scale_array_are_transposes() {
    // <scale_array(ys) v, x> = v · dot_with(ys) x, for x of any representation and length.
    let strategy = (
        prop::collection::vec(-10.0f64..10.0, 0..=5),
        lin(&LTy::array(LTy::Real)),
        -10.0f64..10.0,
    );
    runner(cases(DEFAULT_CASES))
        .run(&strategy, |(ys, x, v)| {
            let ys = Rc::new(ys);
            let t = LinFun::scale_array(ys.clone())
                .apply(&Lin::real(v))
                .unwrap();
            let d = LinFun::dot_with(ys.clone()).apply(&x).unwrap().to_real();
            let n = ys.len().max(x.stored_len()) + 1;
            let lhs: f64 = reals(&t, n)
                .iter()
                .zip(reals(&x, n))
                .map(|(a, b)| a * b)
                .sum();
            // And both against the definition.
            let def: f64 = ys.iter().zip(reals(&x, ys.len())).map(|(a, b)| a * b).sum();
            prop_assert!(approx_eq(&[lhs], &[v * d], REL), "{lhs} vs {}", v * d);
            prop_assert!(approx_eq(&[d], &[def], REL), "{d} vs {def}");
            prop_assert_eq!(t.stored_len(), ys.len());
            Ok(())
        })
        .unwrap();
}
