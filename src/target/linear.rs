//! Run-time values of linear types, linear maps and copowers: the only module that sees how they
//! are represented.
//!
//! CHAD's (co)tangents live in linear types, which denote commutative monoids (in fact real
//! vector spaces). The paper (§9) implements the two type formers that functional languages lack
//! as abstract types, and so do we:
//!
//! * **Linear maps `L ⊸ L'` are a subtype of functions.** A [`LinFun`] is a trait object
//!   ([`LinearMap`]) that can only be obtained from the combinators here (identity, composition,
//!   pairing, projections, zero, sums, scaling, copower fold, ...), from a native implementation
//!   of the trait (a primitive's derivative kernel, e.g. [`LinFun::dot_with`]), or by evaluating a
//!   linear λ of the target language, whose body the type checker has verified to be linear. So
//!   every `LinFun` is a monoid homomorphism by construction; [`LinFun::apply`] uses that to
//!   return zero for a zero argument without running anything.
//! * **Copowers `!τ ⊗ L` are a quotient of lists.** A [`Copower`] is a list of pairs `(a, l)` that
//!   can only be made by [`Copower::empty`], [`Copower::singleton`] and [`Copower::plus`]
//!   (concatenation), and only consumed by [`Copower::fold`], which sums `f(a_i) • l_i` for a
//!   family of *linear* maps `f(a)`. Because the sum is commutative and each `f(a)` is additive,
//!   no client can observe the order of the list, how it was grouped, or whether `(a, l1), (a, l2)`
//!   was stored instead of `(a, l1 + l2)`: exactly the equations of the copower.
//!
//! A [`Lin`] is a value of any linear type. Its representation is private; notably:
//!
//! * zero is one O(1) value of every linear type (`Zero`), so `0 + x = x` costs O(1), projecting,
//!   indexing or applying a linear map to zero is O(1), and no large zero is ever built;
//! * `L ⊕ L'`, the linear sum, is represented like the biproduct `L × L'` (in commutative monoids
//!   the coproduct *is* the product): `linl a` is `(a, 0)`, `fromLeft` is `fst`, and addition is
//!   total;
//! * arrays are dense (unboxed `f64`s for `Array Real`) or sparse: a one-hot array costs O(1), and
//!   adding k one-hots costs O(k); a sparse array is densified at most once, when it must be.
//!   Arrays denote finitely supported sequences, so arrays of different lengths add by padding
//!   with zeros (the zero array has every length) and indexing past the end gives zero;
//! * a copower is a binary tree of concatenations, so `plus` is O(1) and `fold` is linear in
//!   the number of pairs (iterative, any depth).

/// Declares an internal primitive of the concretiser ([`scatter`], [`padadd`]): a handle per
/// thread, registered once from the module's `primitive()` (which type-checks its derivative
/// rules), and the accessor `$get` returning it.
macro_rules! internal_primitive {
    ($(#[$m:meta])* $cell:ident, $get:ident) => {
        thread_local! {
            static $cell: crate::prim::Prim = crate::prim::Registry::empty()
                .register(primitive())
                .unwrap_or_else(|e| panic!("internal error: `{NAME}` does not register: {e}"));
        }

        $(#[$m])*
        pub fn $get() -> crate::prim::Prim {
            $cell.with(crate::prim::Prim::clone)
        }
    };
}

pub mod concrete;
pub mod padadd;
pub mod scatter;

use crate::deep::{Deep, deep};
use crate::error::{Error, Result};
use crate::value::Value;
use std::cell::{OnceCell, RefCell};
use std::fmt;
use std::rc::Rc;

/// A value of a linear type. Cheap to clone.
#[derive(Clone)]
pub struct Lin(Repr);

#[derive(Clone)]
enum Repr {
    /// Zero of any linear type.
    Zero,
    /// A real.
    Real(f64),
    /// A pair: biproducts `L × L'` and linear sums `L ⊕ L'`.
    Pair(Rc<Deep<(Lin, Lin)>>),
    /// A copower.
    Copower(Copower),
    /// A power: a function into a linear type.
    Power(Rc<Deep<Power>>),
    /// A dense array of reals.
    Reals(Rc<Vec<f64>>),
    /// A dense array of linear values.
    Items(Rc<Vec<Lin>>),
    /// A sparse array.
    Sparse(Rc<Sparse>),
}

/// The function inside a power value.
type PowerFn = dyn Fn(&Value) -> Result<Lin>;

enum Power {
    Fn(Rc<PowerFn>),
    /// `λb. snd (h b) • (da, 0)`: the tangent of the closure with body image `h` when its
    /// context moves by `da` ([`LinFun::closure_env_tan`]).
    Env(Value, Lin),
    Plus(Lin, Lin),
    Scale(f64, Lin),
}

/// A sparse array: `len` elements, zero except for the listed entries (an index may repeat:
/// its entries add up).
struct Sparse {
    len: usize,
    entries: Vec<(usize, Lin)>,
    dense: OnceCell<Lin>,
}

/// Above this many entries, a sparse array is indexed through its (cached) dense form.
const SCAN_LIMIT: usize = 16;

fn invariant(what: &str) -> ! {
    panic!("internal error: linear value is not {what} (the target type checker rules this out)")
}

impl Lin {
    /// Zero, of any linear type. O(1).
    pub fn zero() -> Lin {
        Lin(Repr::Zero)
    }

    /// True if this is the (sparse) zero. A value built otherwise may still equal zero; this
    /// test is O(1) and only used to skip work.
    pub fn is_zero(&self) -> bool {
        matches!(self.0, Repr::Zero)
    }

    /// A linear real.
    pub fn real(x: f64) -> Lin {
        Lin(Repr::Real(x))
    }

    /// The number held by a value of linear type `Real` (0 for zero).
    pub fn to_real(&self) -> f64 {
        match self.0 {
            Repr::Zero => 0.0,
            Repr::Real(x) => x,
            _ => invariant("a Real"),
        }
    }

    /// The pair `(a, b)` of a biproduct.
    pub fn pair(a: Lin, b: Lin) -> Lin {
        if a.is_zero() && b.is_zero() {
            return Lin::zero();
        }
        Lin(Repr::Pair(Rc::new(Deep::new((a, b)))))
    }

    /// Both components of a pair, moved out when nobody else holds it (zero gives zeros).
    pub fn split(self) -> (Lin, Lin) {
        match self.0 {
            Repr::Zero => (Lin::zero(), Lin::zero()),
            Repr::Pair(p) => components(p),
            _ => invariant("a pair"),
        }
    }

    /// The first component of a pair (linear).
    pub fn fst(&self) -> Lin {
        match &self.0 {
            Repr::Zero => Lin::zero(),
            Repr::Pair(p) => p.0.clone(),
            _ => invariant("a pair"),
        }
    }

    /// The first component of a pair, by reference; `None` for zero (whose components are
    /// zero). [`Lin::fst`] without the copy.
    pub fn fst_ref(&self) -> Option<&Lin> {
        match &self.0 {
            Repr::Zero => None,
            Repr::Pair(p) => Some(&p.0),
            _ => invariant("a pair"),
        }
    }

    /// The second component of a pair, by reference; `None` for zero.
    pub fn snd_ref(&self) -> Option<&Lin> {
        match &self.0 {
            Repr::Zero => None,
            Repr::Pair(p) => Some(&p.1),
            _ => invariant("a pair"),
        }
    }

    /// The second component of a pair (linear).
    pub fn snd(&self) -> Lin {
        match &self.0 {
            Repr::Zero => Lin::zero(),
            Repr::Pair(p) => p.1.clone(),
            _ => invariant("a pair"),
        }
    }

    /// `linl a : L ⊕ L'`.
    pub fn left(a: Lin) -> Lin {
        Lin::pair(a, Lin::zero())
    }

    /// `linr b : L ⊕ L'`.
    pub fn right(b: Lin) -> Lin {
        Lin::pair(Lin::zero(), b)
    }

    /// `fromLeft s`: the left part of a linear sum (zero if there is none).
    pub fn from_left(&self) -> Lin {
        self.fst()
    }

    /// `fromRight s`: the right part of a linear sum (zero if there is none).
    pub fn from_right(&self) -> Lin {
        self.snd()
    }

    /// The monoid operation `a + b`, for values of the same linear type. Takes its arguments by
    /// value so that a uniquely owned array accumulator is updated in place.
    pub fn plus(a: Lin, b: Lin) -> Lin {
        // Scalars first, without the stack check: the common case in scalar derivative code.
        if let (Repr::Real(x), Repr::Real(y)) = (&a.0, &b.0) {
            return Lin::real(x + y);
        }
        deep(|| match (a.0, b.0) {
            (Repr::Zero, x) | (x, Repr::Zero) => Lin(x),
            (Repr::Real(x), Repr::Real(y)) => Lin::real(x + y),
            (Repr::Pair(p), Repr::Pair(q)) => {
                // Components of a pair nobody else holds are moved, not cloned, so that an
                // array accumulator inside a pair (an environment cotangent) stays uniquely
                // owned and is updated in place.
                let ((a0, a1), (b0, b1)) = (components(p), components(q));
                Lin::pair(Lin::plus(a0, b0), Lin::plus(a1, b1))
            }
            (Repr::Copower(c), Repr::Copower(d)) => Lin(Repr::Copower(Copower::plus(c, d))),
            (Repr::Power(f), Repr::Power(g)) => {
                Lin::power_node(Power::Plus(Lin(Repr::Power(f)), Lin(Repr::Power(g))))
            }
            (x, y) if x.is_array() && y.is_array() => add_arrays(Lin(x), Lin(y)),
            _ => invariant("of the same type as the value it is added to"),
        })
    }

    /// Scalar multiplication `c · x` (every linear type here is a real vector space).
    ///
    /// Zero is a *strong* zero here: `0 · x` and `c · 0` are exactly zero even when the other
    /// factor is infinite or NaN. A derivative multiplies a partial derivative by a tangent;
    /// where the tangent is zero (an input that does not vary, the branch `max` does not take)
    /// the contribution is zero whatever the partial derivative, e.g. `sqrt'(0) = ∞` times a
    /// zero tangent. IEEE's `∞ · 0 = NaN` would poison derivatives that exist.
    pub fn scale(c: f64, x: &Lin) -> Lin {
        if c == 0.0 {
            return Lin::zero();
        }
        let mul = |y: f64| if y == 0.0 { 0.0 } else { c * y };
        if let Repr::Real(y) = &x.0 {
            return Lin::real(mul(*y));
        }
        deep(|| match &x.0 {
            Repr::Zero => Lin::zero(),
            Repr::Real(y) => Lin::real(mul(*y)),
            Repr::Pair(p) => Lin::pair(Lin::scale(c, &p.0), Lin::scale(c, &p.1)),
            Repr::Copower(cp) => Lin(Repr::Copower(cp.scale(c))),
            Repr::Power(_) => Lin::power_node(Power::Scale(c, x.clone())),
            Repr::Reals(xs) => Lin::reals(xs.iter().map(|&y| mul(y)).collect()),
            Repr::Items(xs) => Lin::array(xs.iter().map(|y| Lin::scale(c, y)).collect()),
            Repr::Sparse(s) => Lin::sparse(
                s.len,
                s.entries
                    .iter()
                    .map(|(i, y)| (*i, Lin::scale(c, y)))
                    .collect(),
            ),
        })
    }

    // ----- copowers and powers -----

    /// A copower as a linear value.
    pub fn copower(c: Copower) -> Lin {
        if c.is_empty() {
            Lin::zero()
        } else {
            Lin(Repr::Copower(c))
        }
    }

    /// The copower held by a value of type `!τ ⊗ L` (empty for zero).
    pub fn to_copower(&self) -> Copower {
        match &self.0 {
            Repr::Zero => Copower::empty(),
            Repr::Copower(c) => c.clone(),
            _ => invariant("a copower"),
        }
    }

    /// A value of the power `τ → L`: any function into `L` (powers add pointwise).
    pub fn power(f: impl Fn(&Value) -> Result<Lin> + 'static) -> Lin {
        Lin::power_node(Power::Fn(Rc::new(f)))
    }

    fn power_node(p: Power) -> Lin {
        Lin(Repr::Power(Rc::new(Deep::new(p))))
    }

    /// Power elimination `p @ b` (linear in `p`).
    pub fn apply_power(&self, b: &Value) -> Result<Lin> {
        deep(|| match &self.0 {
            Repr::Zero => Ok(Lin::zero()),
            Repr::Power(p) => match &***p {
                Power::Fn(f) => f(b),
                Power::Env(h, da) => {
                    let image = h.apply(b.clone())?;
                    let f = expect_lin_fun(image.expect_pair().1);
                    f.apply(&Lin::pair(da.clone(), Lin::zero()))
                }
                Power::Plus(f, g) => Ok(Lin::plus(f.apply_power(b)?, g.apply_power(b)?)),
                Power::Scale(c, f) => Ok(Lin::scale(*c, &f.apply_power(b)?)),
            },
            _ => invariant("a power"),
        })
    }

    // ----- arrays -----

    /// A dense linear array of reals.
    pub fn reals(xs: Vec<f64>) -> Lin {
        Lin(Repr::Reals(Rc::new(xs)))
    }

    /// A dense linear array. If every element is a real or zero, and at least one is a real (so
    /// that the elements have type `Real`: zero has every type), the array is stored unboxed.
    pub fn array(items: Vec<Lin>) -> Lin {
        if items.iter().any(|x| matches!(x.0, Repr::Real(_)))
            && items
                .iter()
                .all(|x| matches!(x.0, Repr::Real(_) | Repr::Zero))
        {
            Lin::reals(items.iter().map(Lin::to_real).collect())
        } else {
            Lin(Repr::Items(Rc::new(items)))
        }
    }

    fn sparse(len: usize, entries: Vec<(usize, Lin)>) -> Lin {
        if entries.is_empty() {
            return Lin::zero();
        }
        Lin(Repr::Sparse(Rc::new(Sparse {
            len,
            entries,
            dense: OnceCell::new(),
        })))
    }

    /// `onehot n i x`: the array of length `n` that is `x` at `i` and zero elsewhere. O(1).
    /// An error if `i` is out of range.
    pub fn onehot(n: usize, i: i64, x: Lin) -> Result<Lin> {
        if i < 0 || i as u64 >= n as u64 {
            return Err(Error::runtime(format!(
                "onehot: index {i} out of range for an array of length {n}"
            )));
        }
        if x.is_zero() {
            return Ok(Lin::zero());
        }
        Ok(Lin::sparse(n, vec![(i as usize, x)]))
    }

    /// `*self = *self + onehot n i x`, in place: the same value and the same error as
    /// [`Lin::plus`] of [`Lin::onehot`], without allocating the one-hot array. A uniquely owned
    /// sparse accumulator gains an entry (densified once it has more entries than elements),
    /// a uniquely owned dense one is updated at `i`; so summing k one-hots into an accumulator
    /// costs O(k) amortised plus one densification.
    pub fn add_one_hot_in_place(&mut self, n: usize, i: i64, x: Lin) -> Result<()> {
        if i < 0 || i as u64 >= n as u64 {
            return Err(Error::runtime(format!(
                "onehot: index {i} out of range for an array of length {n}"
            )));
        }
        if x.is_zero() {
            return Ok(());
        }
        let i = i as usize;
        match (&mut self.0, &x.0) {
            // The common case of a dense accumulator: a real added at its place, in place.
            (Repr::Reals(xs), Repr::Real(y)) if n <= xs.len() => {
                if let Some(v) = Rc::get_mut(xs) {
                    v[i] += y;
                    return Ok(());
                }
            }
            _ => {}
        }
        match &mut self.0 {
            Repr::Zero => {
                // Room for a few more: an accumulator usually gets them (a row of a triangular
                // loop, a gradient's entries), and growing from one entry reallocates often.
                let mut entries = Vec::with_capacity(n.min(16));
                entries.push((i, x));
                *self = Lin::sparse(n, entries);
                return Ok(());
            }
            Repr::Sparse(s) => {
                if let Some(sp) = Rc::get_mut(s) {
                    sp.dense = OnceCell::new();
                    sp.len = sp.len.max(n);
                    sp.entries.push((i, x));
                    if sp.entries.len() > sp.len {
                        // As in `add_arrays`: the dense form is now the smaller one.
                        let dense = sp.densified().clone();
                        *self = dense;
                    }
                    return Ok(());
                }
            }
            Repr::Reals(_) | Repr::Items(_) => {
                let acc = std::mem::replace(self, Lin::zero());
                let len = acc.stored_len().max(n);
                *self = add_at(acc, len, i, x);
                return Ok(());
            }
            _ => {}
        }
        let acc = std::mem::replace(self, Lin::zero());
        *self = Lin::plus(acc, Lin::sparse(n, vec![(i, x)]));
        Ok(())
    }

    /// `*self = *self + x` (see [`Lin::plus`]; a uniquely owned accumulator is updated in
    /// place).
    pub fn add_in_place(&mut self, x: Lin) {
        if x.is_zero() {
            return;
        }
        let acc = std::mem::replace(self, Lin::zero());
        *self = Lin::plus(acc, x);
    }

    /// `lbuild n f` for elements of type `Real` given unboxed (`None` for zero): the same
    /// array as [`Lin::build`] of the corresponding linear reals, without boxing them first.
    pub fn build_reals(n: usize, mut f: impl FnMut(usize) -> Result<Option<f64>>) -> Result<Lin> {
        let mut xs = Vec::with_capacity(n);
        let mut any = false;
        for k in 0..n {
            let x = f(k)?;
            any |= x.is_some();
            xs.push(x.unwrap_or(0.0));
        }
        if any {
            Ok(Lin::reals(xs))
        } else {
            // Every element zero: as `Lin::array` of zeros.
            Ok(Lin::array(vec![Lin::zero(); n]))
        }
    }

    /// `replicate n x`: `n` copies of `x`.
    pub fn replicate(n: usize, x: &Lin) -> Lin {
        match &x.0 {
            Repr::Zero => Lin::zero(),
            Repr::Real(y) => Lin::reals(vec![*y; n]),
            _ => Lin::array(vec![x.clone(); n]),
        }
    }

    /// `lbuild n f`: the array `[f 0, ..., f (n-1)]`.
    pub fn build(n: usize, mut f: impl FnMut(usize) -> Result<Lin>) -> Result<Lin> {
        Ok(Lin::array((0..n).map(&mut f).collect::<Result<Vec<_>>>()?))
    }

    /// Element `i` of a linear array (zero past the end, or for the zero array).
    pub fn index(&self, i: i64) -> Lin {
        if i < 0 {
            return Lin::zero();
        }
        let i = i as usize;
        match &self.0 {
            Repr::Zero => Lin::zero(),
            Repr::Reals(xs) => xs.get(i).map_or_else(Lin::zero, |&x| Lin::real(x)),
            Repr::Items(xs) => xs.get(i).cloned().unwrap_or_else(Lin::zero),
            Repr::Sparse(s) if s.entries.len() <= SCAN_LIMIT => s
                .entries
                .iter()
                .filter(|(j, _)| *j == i)
                .fold(Lin::zero(), |acc, (_, x)| Lin::plus(acc, x.clone())),
            Repr::Sparse(s) => s.densified().index(i as i64),
            _ => invariant("an array"),
        }
    }

    /// `lsum xs`: the sum of the elements of a linear array.
    pub fn sum(&self) -> Lin {
        match &self.0 {
            Repr::Zero => Lin::zero(),
            Repr::Reals(xs) => Lin::real(crate::value::sum_reals(xs.iter().copied())),
            Repr::Items(xs) => xs.iter().fold(Lin::zero(), |a, x| Lin::plus(a, x.clone())),
            Repr::Sparse(s) => s
                .entries
                .iter()
                .fold(Lin::zero(), |a, (_, x)| Lin::plus(a, x.clone())),
            _ => invariant("an array"),
        }
    }

    /// Applies `f(i)` to element `i`, for `i < n` (elementwise application of an array of linear
    /// maps, `zipWith`). Zero elements cost nothing: on a sparse array this is O(entries).
    pub fn zip_with(&self, n: usize, f: impl Fn(usize) -> Result<LinFun>) -> Result<Lin> {
        match &self.0 {
            Repr::Zero => Ok(Lin::zero()),
            Repr::Sparse(s) if s.entries.len() < n => {
                let entries = s
                    .entries
                    .iter()
                    .filter(|(i, _)| *i < n)
                    .map(|(i, x)| Ok((*i, f(*i)?.apply(x)?)))
                    .collect::<Result<Vec<_>>>()?;
                Ok(Lin::sparse(n, entries))
            }
            _ => Lin::build(n, |i| f(i)?.apply(&self.index(i as i64))),
        }
    }

    /// Applies one linear map to every element (`lmap f xs`).
    pub fn map(&self, f: &LinFun) -> Result<Lin> {
        match &self.0 {
            Repr::Zero => Ok(Lin::zero()),
            Repr::Reals(xs) => Lin::build(xs.len(), |i| f.apply(&Lin::real(xs[i]))),
            Repr::Items(xs) => Lin::build(xs.len(), |i| f.apply(&xs[i])),
            Repr::Sparse(s) => Ok(Lin::sparse(
                s.len,
                s.entries
                    .iter()
                    .map(|(i, x)| Ok((*i, f.apply(x)?)))
                    .collect::<Result<Vec<_>>>()?,
            )),
            _ => invariant("an array"),
        }
    }

    /// The number of elements an array value stores (its length; 0 for the zero array, which has
    /// every length).
    pub fn stored_len(&self) -> usize {
        match &self.0 {
            Repr::Zero => 0,
            Repr::Reals(xs) => xs.len(),
            Repr::Items(xs) => xs.len(),
            Repr::Sparse(s) => s.len,
            _ => invariant("an array"),
        }
    }
}

/// The components of a pair, moved out if the pair is uniquely owned.
fn components(p: Rc<Deep<(Lin, Lin)>>) -> (Lin, Lin) {
    match Rc::try_unwrap(p) {
        Ok(d) => d.into_inner(),
        Err(p) => (p.0.clone(), p.1.clone()),
    }
}

impl Repr {
    fn is_array(&self) -> bool {
        matches!(self, Repr::Reals(_) | Repr::Items(_) | Repr::Sparse(_))
    }
}

impl Sparse {
    /// The dense form (computed once, then cached).
    fn densified(&self) -> &Lin {
        self.dense.get_or_init(|| {
            let mut items = vec![Lin::zero(); self.len];
            for (i, x) in &self.entries {
                let old = std::mem::replace(&mut items[*i], Lin::zero());
                items[*i] = Lin::plus(old, x.clone());
            }
            Lin::array(items)
        })
    }
}

/// Of two arrays to add, the one to accumulate into (first) and the other: the longer, or of
/// equal lengths one nobody else holds (then it is updated in place).
fn accumulator<T>(a: Rc<Vec<T>>, b: Rc<Vec<T>>) -> (Rc<Vec<T>>, Rc<Vec<T>>) {
    let unique = |r: &Rc<Vec<T>>| Rc::strong_count(r) == 1 && Rc::weak_count(r) == 0;
    if a.len() > b.len() || (a.len() == b.len() && unique(&a)) {
        (a, b)
    } else {
        (b, a)
    }
}

/// Adds two array values (neither zero), reusing a uniquely owned dense buffer.
fn add_arrays(a: Lin, b: Lin) -> Lin {
    match (a.0, b.0) {
        (Repr::Sparse(s), Repr::Sparse(t)) => {
            let len = s.len.max(t.len);
            let (mut big, small) = if s.entries.len() >= t.entries.len() {
                (s, t)
            } else {
                (t, s)
            };
            let entries = match Rc::get_mut(&mut big) {
                Some(b) => {
                    b.dense = OnceCell::new();
                    b.entries.extend(small.entries.iter().cloned());
                    std::mem::take(&mut b.entries)
                }
                None => big.entries.iter().chain(&small.entries).cloned().collect(),
            };
            if entries.len() > len {
                // More entries than elements: the dense form is now the smaller one.
                let s = Sparse {
                    len,
                    entries,
                    dense: OnceCell::new(),
                };
                return s.densified().clone();
            }
            Lin::sparse(len, entries)
        }
        (Repr::Sparse(s), dense) | (dense, Repr::Sparse(s)) => {
            let mut acc = Lin(dense);
            let len = acc.stored_len().max(s.len);
            for (i, x) in &s.entries {
                acc = add_at(acc, len, *i, x.clone());
            }
            acc
        }
        (Repr::Reals(a), Repr::Reals(b)) => {
            let (mut xs, ys) = accumulator(a, b);
            let v = Rc::make_mut(&mut xs);
            for (x, y) in v.iter_mut().zip(ys.iter()) {
                *x += y;
            }
            Lin(Repr::Reals(xs))
        }
        (Repr::Items(a), Repr::Items(b)) => {
            // Elementwise into the accumulator; each element is moved out of it, so an element
            // held only there (a row of a matrix cotangent being accumulated) is updated in
            // place instead of copied.
            let (mut xs, ys) = accumulator(a, b);
            let v = Rc::make_mut(&mut xs);
            for (x, y) in v.iter_mut().zip(ys.iter()) {
                let old = std::mem::replace(x, Lin::zero());
                *x = Lin::plus(old, y.clone());
            }
            Lin(Repr::Items(xs))
        }
        (x, y) => {
            let (x, y) = (Lin(x), Lin(y));
            let n = x.stored_len().max(y.stored_len());
            let items: Vec<Lin> = (0..n as i64)
                .map(|i| Lin::plus(x.index(i), y.index(i)))
                .collect();
            Lin::array(items)
        }
    }
}

/// Adds `x` at position `i` of a dense array of (at least) length `len`, in place if unique.
fn add_at(acc: Lin, len: usize, i: usize, x: Lin) -> Lin {
    match (acc.0, &x.0) {
        (Repr::Reals(mut xs), Repr::Real(y)) => {
            let v = Rc::make_mut(&mut xs);
            if v.len() < len {
                v.resize(len, 0.0);
            }
            v[i] += y;
            Lin(Repr::Reals(xs))
        }
        (Repr::Reals(xs), _) => {
            let items = xs.iter().map(|&y| Lin::real(y)).collect();
            add_at(Lin(Repr::Items(Rc::new(items))), len, i, x)
        }
        (Repr::Items(mut xs), _) => {
            let v = Rc::make_mut(&mut xs);
            if v.len() < len {
                v.resize(len, Lin::zero());
            }
            let old = std::mem::replace(&mut v[i], Lin::zero());
            v[i] = Lin::plus(old, x);
            Lin(Repr::Items(xs))
        }
        _ => invariant("a dense array"),
    }
}

impl fmt::Debug for Lin {
    /// A readable rendering that does not reveal representation choices: arrays print densely,
    /// copowers and powers opaquely.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        deep(|| match &self.0 {
            Repr::Zero => f.write_str("0"),
            Repr::Real(x) => f.write_str(&crate::value::format_real(*x)),
            Repr::Pair(p) => write!(f, "({:?}, {:?})", p.0, p.1),
            Repr::Copower(_) => f.write_str("<copower>"),
            Repr::Power(_) => f.write_str("<power>"),
            Repr::Reals(_) | Repr::Items(_) | Repr::Sparse(_) => {
                f.write_str("[")?;
                for i in 0..self.stored_len() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{:?}", self.index(i as i64))?;
                }
                f.write_str("]")
            }
        })
    }
}

impl fmt::Display for Lin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self:?}")
    }
}

// ----- copowers -----

/// A value of the copower `!τ ⊗ L`: a formal sum of pairs `(a, l)`. Only [`Copower::empty`],
/// [`Copower::singleton`], [`Copower::plus`] and [`Copower::fold`] exist, so no client can tell
/// the order or grouping of the pairs. `plus` is O(1); `fold` is linear in the number of pairs.
#[derive(Clone, Default)]
pub struct Copower(Option<Rc<Deep<CopowerNode>>>);

enum CopowerNode {
    /// `!a ⊗ l`, with the tape of the call that recorded it, if any (see [`CallTape`]): the
    /// tape never changes what the pair denotes, only how fast a closure's creator folds it.
    Leaf(Value, Lin, Option<Rc<CallTape>>),
    Concat(Copower, Copower),
}

impl Copower {
    /// The empty formal sum (zero).
    pub fn empty() -> Copower {
        Copower(None)
    }

    /// `!a ⊗ l`. (Empty if `l` is zero: `!a ⊗ 0 = 0`.)
    pub fn singleton(a: Value, l: Lin) -> Copower {
        if l.is_zero() {
            return Copower::empty();
        }
        Copower::leaf(a, l, None)
    }

    fn leaf(a: Value, l: Lin, tape: Option<Rc<CallTape>>) -> Copower {
        if l.is_zero() {
            return Copower::empty();
        }
        Copower(Some(Rc::new(Deep::new(CopowerNode::Leaf(a, l, tape)))))
    }

    /// The sum of two copowers (concatenation). O(1).
    pub fn plus(a: Copower, b: Copower) -> Copower {
        match (a.0.is_none(), b.0.is_none()) {
            (true, _) => b,
            (_, true) => a,
            _ => Copower(Some(Rc::new(Deep::new(CopowerNode::Concat(a, b))))),
        }
    }

    fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    /// `copowfold f c`: the sum over the pairs `(a, l)` of `c` of `f(a) • l`. The result is a
    /// function of the formal sum only (not of order or grouping) because every `f(a)` is linear.
    pub fn fold(&self, f: impl Fn(&Value) -> Result<LinFun>) -> Result<Lin> {
        self.fold_pairs(|a, l, _| f(a)?.apply(l))
    }

    /// The sum over the pairs `(a, l)` (and their tapes) of `f(a, l, tape)`, for an `f` linear
    /// in `l` whose value does not depend on the tape (the tape only makes it cheaper).
    fn fold_pairs(
        &self,
        f: impl Fn(&Value, &Lin, Option<&Rc<CallTape>>) -> Result<Lin>,
    ) -> Result<Lin> {
        let mut acc = Lin::zero();
        let mut stack: Vec<&Copower> = vec![self];
        while let Some(c) = stack.pop() {
            match c.0.as_deref().map(|d| &**d) {
                None => {}
                Some(CopowerNode::Leaf(a, l, t)) => acc = Lin::plus(acc, f(a, l, t.as_ref())?),
                Some(CopowerNode::Concat(x, y)) => {
                    stack.push(y);
                    stack.push(x);
                }
            }
        }
        Ok(acc)
    }

    /// Scales every pair's linear part (internal: `c · Σ (a, l) = Σ (a, c·l)`).
    fn scale(&self, c: f64) -> Copower {
        deep(|| match self.0.as_deref().map(|d| &**d) {
            None => Copower::empty(),
            Some(CopowerNode::Leaf(a, l, t)) => {
                Copower::leaf(a.clone(), Lin::scale(c, l), t.clone())
            }
            Some(CopowerNode::Concat(x, y)) => Copower::plus(x.scale(c), y.scale(c)),
        })
    }
}

// ----- linear maps -----

/// A linear map `L ⊸ L'`: a monoid homomorphism, `f(0) = 0` and `f(a + b) = f(a) + f(b)`.
///
/// Implement it natively for a primitive's derivative kernel (the implementation is responsible
/// for being linear; `check_primitive` tests it); everything else builds linear maps with the
/// combinators of [`LinFun`] or by evaluating a linear λ.
pub trait LinearMap {
    /// Applies the map. Callers never pass the zero value ([`LinFun::apply`] answers zero
    /// itself), so implementations need not special-case it.
    fn apply(&self, x: &Lin) -> Result<Lin>;

    /// Applies the map to an argument it may take over: an implementation that stores the
    /// argument (the engine's linear λ binds it in its frame) can then update it in place
    /// when it is unshared, as a loop's reverse pass does with its running cotangent.
    fn apply_owned(&self, x: Lin) -> Result<Lin> {
        self.apply(&x)
    }

    /// A short description, for debugging output.
    fn describe(&self) -> String {
        "<linear map>".to_string()
    }

    /// The call tape behind a closure's argument derivative ([`LinFun::closure_arg`]); `None`
    /// for every other map. Not for implementations outside this module.
    #[doc(hidden)]
    fn call_tape(&self) -> Option<Rc<CallTape>> {
        None
    }
}

/// A run-time value of type `L ⊸ L'`.
#[derive(Clone)]
pub struct LinFun(Rc<dyn LinearMap>);

/// A linear map made from a closure: only this module can make one.
struct Closure<F>(F, &'static str);

impl<F: Fn(&Lin) -> Result<Lin>> LinearMap for Closure<F> {
    fn apply(&self, x: &Lin) -> Result<Lin> {
        (self.0)(x)
    }
    fn describe(&self) -> String {
        self.1.to_string()
    }
}

fn closure(name: &'static str, f: impl Fn(&Lin) -> Result<Lin> + 'static) -> LinFun {
    LinFun(Rc::new(Closure(f, name)))
}

impl LinFun {
    /// Wraps a native implementation of [`LinearMap`].
    pub fn new(m: impl LinearMap + 'static) -> LinFun {
        LinFun(Rc::new(m))
    }

    /// Applies the map. A zero argument gives zero at once (linearity), whatever the map.
    pub fn apply(&self, x: &Lin) -> Result<Lin> {
        if x.is_zero() {
            Ok(Lin::zero())
        } else {
            deep(|| self.0.apply(x))
        }
    }

    /// [`LinFun::apply`] to an owned argument (see [`LinearMap::apply_owned`]).
    pub fn apply_owned(&self, x: Lin) -> Result<Lin> {
        if x.is_zero() {
            Ok(Lin::zero())
        } else {
            deep(|| self.0.apply_owned(x))
        }
    }

    /// The map's description.
    pub fn describe(&self) -> String {
        self.0.describe()
    }

    /// The identity `λ̲v. v`.
    pub fn id() -> LinFun {
        closure("id", |x| Ok(x.clone()))
    }

    /// The zero map `λ̲v. 0`.
    pub fn zero() -> LinFun {
        closure("zero", |_| Ok(Lin::zero()))
    }

    /// Composition `g ∘ f` (first `f`, then `g`).
    pub fn compose(g: &LinFun, f: &LinFun) -> LinFun {
        let (g, f) = (g.clone(), f.clone());
        closure("compose", move |x| g.apply(&f.apply(x)?))
    }

    /// Pairing `⟨f, g⟩ = λ̲v. (f v, g v)`.
    pub fn pair(f: &LinFun, g: &LinFun) -> LinFun {
        let (f, g) = (f.clone(), g.clone());
        closure("pair", move |x| Ok(Lin::pair(f.apply(x)?, g.apply(x)?)))
    }

    /// The projection `λ̲v. fst v`.
    pub fn fst() -> LinFun {
        closure("fst", |x| Ok(x.fst()))
    }

    /// The projection `λ̲v. snd v`.
    pub fn snd() -> LinFun {
        closure("snd", |x| Ok(x.snd()))
    }

    /// The injection `λ̲v. (v, 0)` into a biproduct (the transpose of [`LinFun::fst`]).
    pub fn inj1() -> LinFun {
        closure("inj1", |x| Ok(Lin::pair(x.clone(), Lin::zero())))
    }

    /// The injection `λ̲v. (0, v)` into a biproduct (the transpose of [`LinFun::snd`]).
    pub fn inj2() -> LinFun {
        closure("inj2", |x| Ok(Lin::pair(Lin::zero(), x.clone())))
    }

    /// Copairing `[f, g] = λ̲v. f (fst v) + g (snd v)` out of a biproduct.
    pub fn copair(f: &LinFun, g: &LinFun) -> LinFun {
        let (f, g) = (f.clone(), g.clone());
        closure("copair", move |x| {
            Ok(Lin::plus(f.apply(&x.fst())?, g.apply(&x.snd())?))
        })
    }

    /// The pointwise sum `f + g = λ̲v. f v + g v`.
    pub fn plus(f: &LinFun, g: &LinFun) -> LinFun {
        let (f, g) = (f.clone(), g.clone());
        closure("plus", move |x| Ok(Lin::plus(f.apply(x)?, g.apply(x)?)))
    }

    /// The sum of any number of maps (zero for none).
    pub fn sum(fs: &[LinFun]) -> LinFun {
        let fs = fs.to_vec();
        closure("sum", move |x| {
            fs.iter()
                .try_fold(Lin::zero(), |acc, f| Ok(Lin::plus(acc, f.apply(x)?)))
        })
    }

    /// Scaling `c · f = λ̲v. c · f v`.
    pub fn scale(c: f64, f: &LinFun) -> LinFun {
        let f = f.clone();
        closure("scale", move |x| Ok(Lin::scale(c, &f.apply(x)?)))
    }

    /// `λ̲v. linl v : L ⊸ L ⊕ L'`.
    pub fn left() -> LinFun {
        closure("linl", |x| Ok(Lin::left(x.clone())))
    }

    /// `λ̲v. linr v : L' ⊸ L ⊕ L'`.
    pub fn right() -> LinFun {
        closure("linr", |x| Ok(Lin::right(x.clone())))
    }

    /// `λ̲v. fromLeft v : L ⊕ L' ⊸ L`.
    pub fn from_left() -> LinFun {
        closure("fromLeft", |x| Ok(x.from_left()))
    }

    /// `λ̲v. fromRight v : L ⊕ L' ⊸ L'`.
    pub fn from_right() -> LinFun {
        closure("fromRight", |x| Ok(x.from_right()))
    }

    /// `λ̲v. !a ⊗ v : L ⊸ !τ ⊗ L`.
    pub fn copower_singleton(a: Value) -> LinFun {
        closure("singleton", move |x| {
            Ok(Lin::copower(Copower::singleton(a.clone(), x.clone())))
        })
    }

    /// `copowfold f : !τ ⊗ L ⊸ M` for `f : τ → (L ⊸ M)`.
    pub fn copower_fold(f: impl Fn(&Value) -> Result<LinFun> + 'static) -> LinFun {
        closure("copowfold", move |x| x.to_copower().fold(&f))
    }

    /// `λ̲p. p @ b : (τ → L) ⊸ L`: evaluating powers at a point.
    pub fn power_eval(b: Value) -> LinFun {
        closure("at", move |x| x.apply_power(&b))
    }

    /// `λ̲v. λb. f(b) • v : L ⊸ (τ → M)`, for a family of linear maps `f : τ → (L ⊸ M)`.
    pub fn power_intro(f: impl Fn(&Value) -> Result<LinFun> + 'static) -> LinFun {
        let f = Rc::new(f);
        closure("powerIntro", move |x| {
            let (f, x) = (f.clone(), x.clone());
            Ok(Lin::power(move |b| f(b)?.apply(&x)))
        })
    }

    /// `λ̲v. v ! i : Array L ⊸ L`.
    pub fn index(i: i64) -> LinFun {
        closure("index", move |x| Ok(x.index(i)))
    }

    /// `λ̲v. onehot n i v : L ⊸ Array L` (the transpose of [`LinFun::index`]).
    pub fn onehot(n: usize, i: i64) -> LinFun {
        closure("onehot", move |x| Lin::onehot(n, i, x.clone()))
    }

    /// `λ̲v. lsum v : Array L ⊸ L`.
    pub fn lsum() -> LinFun {
        closure("lsum", |x| Ok(x.sum()))
    }

    /// `λ̲v. replicate n v : L ⊸ Array L` (the transpose of [`LinFun::lsum`]).
    pub fn replicate(n: usize) -> LinFun {
        closure("replicate", move |x| Ok(Lin::replicate(n, x)))
    }

    /// `λ̲v. lmap f v : Array L ⊸ Array M`.
    pub fn map(f: &LinFun) -> LinFun {
        let f = f.clone();
        closure("lmap", move |x| x.map(&f))
    }

    /// Native kernel: `λ̲v. Σ_i ys[i] · v[i] : Array Real ⊸ Real`, the inner product with a fixed
    /// array (the derivative of `dot` in one argument).
    pub fn dot_with(ys: Rc<Vec<f64>>) -> LinFun {
        LinFun::new(DotWith(ys))
    }

    /// Native kernel: `λ̲v. [ys[0] · v, ..., ys[n-1] · v] : Real ⊸ Array Real`, the transpose of
    /// [`LinFun::dot_with`].
    pub fn scale_array(ys: Rc<Vec<f64>>) -> LinFun {
        LinFun::new(ScaleArray(ys))
    }
}

impl fmt::Debug for LinFun {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<linear map {}>", self.describe())
    }
}

struct DotWith(Rc<Vec<f64>>);

impl LinearMap for DotWith {
    fn apply(&self, x: &Lin) -> Result<Lin> {
        // Strong zero, as in `Lin::scale`: a zero tangent entry contributes zero even where the
        // fixed array holds an infinity or NaN, and a zero entry of the array whatever the
        // tangent (the term definition, `lsum (lbuild n (\i -> ys ! i * d ! i))`, is the same).
        let mul = |a: f64, b: f64| if a == 0.0 || b == 0.0 { 0.0 } else { a * b };
        Ok(Lin::real(match &x.0 {
            Repr::Reals(xs) => self.0.iter().zip(xs.iter()).map(|(a, b)| mul(*a, *b)).sum(),
            Repr::Sparse(sp) if sp.entries.len() <= SCAN_LIMIT => sp
                .entries
                .iter()
                .filter(|(i, _)| *i < self.0.len())
                .map(|(i, b)| mul(self.0[*i], b.to_real()))
                .sum(),
            _ => (0..self.0.len())
                .map(|i| mul(self.0[i], x.index(i as i64).to_real()))
                .sum(),
        }))
    }
    fn describe(&self) -> String {
        "dotWith".into()
    }
}

struct ScaleArray(Rc<Vec<f64>>);

impl LinearMap for ScaleArray {
    fn apply(&self, x: &Lin) -> Result<Lin> {
        let c = x.to_real();
        if c == 0.0 {
            return Ok(Lin::zero());
        }
        // Strong zero on both sides, as `Lin::scale` (and the term definition).
        Ok(Lin::reals(
            self.0
                .iter()
                .map(|&y| if y == 0.0 { 0.0 } else { c * y })
                .collect(),
        ))
    }
    fn describe(&self) -> String {
        "scaleArray".into()
    }
}

// ----- closure calls: taping instead of recomputing (theory-notes/06-performance.md) -----

/// What one call of a closure made by reverse CHAD's `curry` leaves behind: the closure's body
/// image `h` (its identity tells whose call this was), the body's full transposed derivative
/// `f = snd (h b)` at the call's argument `b` (context half and argument half), and the last
/// application of `f` (a memo).
///
/// The paper's rule folds a function's copower cotangent by re-running `h b` for every recorded
/// call, and takes the argument half and the context half of `f • v` from two separate
/// applications. Both cost: nested closures re-run their callees at every level, and a closure
/// returning a closure (a curried definition applied to its arguments one at a time) applies
/// `f` twice per level, exponentially often in the depth. A tape keeps `f` from the forward
/// pass and `f • v` from the argument half for the context half. It is only a cache: a copower
/// pair `(b, l)` with a tape denotes the same as without, and the creator's fold uses the tape
/// only if it is its own (`h` is the same closure value), computing `snd (h b) • l` otherwise.
pub struct CallTape {
    h: Value,
    f: LinFun,
    memo: RefCell<Option<(Lin, Lin)>>,
}

impl CallTape {
    /// `f • l`, remembered for the next application to the same `l`.
    fn apply(&self, l: &Lin) -> Result<Lin> {
        if let Some((seen, u)) = &*self.memo.borrow()
            && same_lin(seen, l)
        {
            return Ok(u.clone());
        }
        let u = self.f.apply(l)?;
        *self.memo.borrow_mut() = Some((l.clone(), u.clone()));
        Ok(u)
    }
}

/// True only if `a` and `b` are certainly the same value (the same shared node, or the same
/// real bit for bit). O(1); `false` says nothing.
fn same_lin(a: &Lin, b: &Lin) -> bool {
    match (&a.0, &b.0) {
        (Repr::Real(x), Repr::Real(y)) => x.to_bits() == y.to_bits(),
        (Repr::Pair(p), Repr::Pair(q)) => Rc::ptr_eq(p, q),
        (Repr::Copower(c), Repr::Copower(d)) => match (&c.0, &d.0) {
            (Some(x), Some(y)) => Rc::ptr_eq(x, y),
            _ => false,
        },
        (Repr::Power(p), Repr::Power(q)) => Rc::ptr_eq(p, q),
        (Repr::Reals(x), Repr::Reals(y)) => Rc::ptr_eq(x, y),
        (Repr::Items(x), Repr::Items(y)) => Rc::ptr_eq(x, y),
        (Repr::Sparse(x), Repr::Sparse(y)) => Rc::ptr_eq(x, y),
        _ => false,
    }
}

/// True only if `a` and `b` are the same closure value.
fn same_closure(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Closure(x), Value::Closure(y)) => std::ptr::addr_eq(Rc::as_ptr(x), Rc::as_ptr(y)),
        _ => false,
    }
}

/// The argument half `λ̲v. snd (f • v)` of a closure call's derivative, with the call's tape.
struct ClosureArg(Rc<CallTape>);

impl LinearMap for ClosureArg {
    fn apply(&self, v: &Lin) -> Result<Lin> {
        Ok(self.0.apply(v)?.snd())
    }
    fn describe(&self) -> String {
        "closureArg".into()
    }
    fn call_tape(&self) -> Option<Rc<CallTape>> {
        Some(self.0.clone())
    }
}

impl LinFun {
    /// `λ̲v. snd (f • v) : L ⊸ A` for the derivative `f : L ⊸ Γ × A` of a closure body `h` at
    /// one argument (`f = snd (h b)`): the derivative a closure call returns for its argument.
    /// It keeps `f` as the call's tape, which [`LinFun::record_call`] attaches to the call's
    /// copower pair.
    pub fn closure_arg(h: Value, f: LinFun) -> LinFun {
        LinFun::new(ClosureArg(Rc::new(CallTape {
            h,
            f,
            memo: RefCell::new(None),
        })))
    }

    /// `λ̲v. !b ⊗ v : L ⊸ !τ ⊗ L`, the cotangent of a function called at `b` whose call returned
    /// the argument derivative `g`. The pair carries `g`'s tape if `g` came from
    /// [`LinFun::closure_arg`] (same denotation as [`LinFun::copower_singleton`]).
    pub fn record_call(b: Value, g: &LinFun) -> LinFun {
        let tape = g.0.call_tape();
        closure("recordCall", move |x| {
            Ok(Lin::copower(Copower::leaf(
                b.clone(),
                x.clone(),
                tape.clone(),
            )))
        })
    }

    /// `λ̲w. copowfold (λb. λ̲v. fst (snd (h b) • v)) w : !τ ⊗ L ⊸ Γ` for the body image
    /// `h : τ → C × (L ⊸ Γ × A)` of a closure: the context cotangent of all its calls. A pair
    /// recorded by a call of this very `h` is folded through its tape (no re-run of `h`, and
    /// `f • v` shared with the argument half); any other pair re-runs `h b`.
    pub fn closure_env(h: Value) -> LinFun {
        closure("closureEnv", move |w| {
            w.to_copower().fold_pairs(|b, l, tape| match tape {
                Some(t) if same_closure(&t.h, &h) => Ok(t.apply(l)?.fst()),
                _ => {
                    let image = h.apply(b.clone())?;
                    Ok(expect_lin_fun(image.expect_pair().1).apply(l)?.fst())
                }
            })
        })
    }
}

fn expect_lin_fun(v: &Value) -> LinFun {
    match v {
        Value::LinFun(f) => f.clone(),
        other => panic!("internal error: a closure body's derivative is {other}"),
    }
}

/// The tangent half `λ̲db. f • (0, db)` of a closure call's derivative `f : Γ × A ⊸ C` in
/// forward mode, with the call's tape.
struct ClosureTan(Rc<CallTape>);

impl LinearMap for ClosureTan {
    fn apply(&self, db: &Lin) -> Result<Lin> {
        self.0.f.apply(&Lin::pair(Lin::zero(), db.clone()))
    }
    fn describe(&self) -> String {
        "closureTan".into()
    }
    fn call_tape(&self) -> Option<Rc<CallTape>> {
        Some(self.0.clone())
    }
}

/// `p @ b` for a power `p`, taking each part `λb. snd (h b) • (da, 0)` made by the tape's own
/// closure from the tape (`f • (da, 0)`, no re-run of `h b`).
fn power_at_call(p: &Lin, b: &Value, tape: &Option<Rc<CallTape>>) -> Result<Lin> {
    deep(|| match &p.0 {
        Repr::Power(node) => match (&***node, tape) {
            (Power::Env(h, da), Some(t)) if same_closure(h, &t.h) => {
                t.f.apply(&Lin::pair(da.clone(), Lin::zero()))
            }
            (Power::Plus(f, g), _) => Ok(Lin::plus(
                power_at_call(f, b, tape)?,
                power_at_call(g, b, tape)?,
            )),
            (Power::Scale(c, f), _) => Ok(Lin::scale(*c, &power_at_call(f, b, tape)?)),
            _ => p.apply_power(b),
        },
        _ => p.apply_power(b),
    })
}

/// Splits a power `p` into the context tangent of the parts made by the tape's own closure
/// (`Σ da`) and the value at `b` of the others.
fn split_power(p: &Lin, b: &Value, tape: &CallTape) -> Result<(Lin, Lin)> {
    deep(|| match &p.0 {
        Repr::Power(node) => match &***node {
            Power::Env(h, da) if same_closure(h, &tape.h) => Ok((da.clone(), Lin::zero())),
            Power::Plus(f, g) => {
                let ((a, x), (c, y)) = (split_power(f, b, tape)?, split_power(g, b, tape)?);
                Ok((Lin::plus(a, c), Lin::plus(x, y)))
            }
            Power::Scale(c, f) => {
                let (a, x) = split_power(f, b, tape)?;
                Ok((Lin::scale(*c, &a), Lin::scale(*c, &x)))
            }
            _ => Ok((Lin::zero(), p.apply_power(b)?)),
        },
        _ => Ok((Lin::zero(), p.apply_power(b)?)),
    })
}

impl LinFun {
    /// Forward mode: `λ̲d. (fst d) @ b + g • (snd d) : (τ → C) × A ⊸ C`, the tangent of a call
    /// at `b` that returned the argument derivative `g`, through the function's tangent and the
    /// argument's. If `g` has a tape `f`, the parts of `fst d` made by the called closure and
    /// `snd d` go through one application `f • (Σ da, snd d)` (linearity) instead of re-running
    /// the closure's body for the first and applying `f` again for the second.
    pub fn call_tan(b: Value, g: &LinFun) -> LinFun {
        let tape = g.0.call_tape();
        let g = g.clone();
        closure("callTan", move |d| match &tape {
            Some(t) => {
                let (da, rest) = split_power(&d.fst(), &b, t)?;
                Ok(Lin::plus(t.f.apply(&Lin::pair(da, d.snd()))?, rest))
            }
            None => Ok(Lin::plus(d.fst().apply_power(&b)?, g.apply(&d.snd())?)),
        })
    }

    /// Forward mode: `λ̲db. f • (0, db) : A ⊸ C` for the derivative `f : Γ × A ⊸ C` of a
    /// closure body `h` at one argument (`f = snd (h b)`), keeping `f` as the call's tape for
    /// `LinFun::power_at_call`.
    pub fn closure_tan(h: Value, f: LinFun) -> LinFun {
        LinFun::new(ClosureTan(Rc::new(CallTape {
            h,
            f,
            memo: RefCell::new(None),
        })))
    }

    /// Forward mode: `λ̲da. λb. snd (h b) • (da, 0) : Γ ⊸ (τ → C)`, the tangent of the closure
    /// with body image `h : τ → C × (Γ × A ⊸ C)` when its context moves.
    pub fn closure_env_tan(h: Value) -> LinFun {
        closure("closureEnvTan", move |da| {
            Ok(Lin::power_node(Power::Env(h.clone(), da.clone())))
        })
    }

    /// Forward mode: `λ̲p. p @ b : (τ → C) ⊸ C`, the tangent of a call at `b` through the
    /// function's tangent `p`, where the call returned the argument derivative `g`. The parts of
    /// `p` made by the closure that was called come from `g`'s tape instead of re-running the
    /// closure's body (same value as [`LinFun::power_eval`]).
    pub fn power_at(b: Value, g: &LinFun) -> LinFun {
        let tape = g.0.call_tape();
        closure("powerAt", move |p| power_at_call(p, &b, &tape))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reals(l: &Lin, n: usize) -> Vec<f64> {
        (0..n as i64).map(|i| l.index(i).to_real()).collect()
    }

    #[test]
    fn zero_is_absorbed_everywhere_in_constant_time() {
        let z = Lin::zero();
        assert!(Lin::plus(z.clone(), z.clone()).is_zero());
        assert!(z.fst().is_zero() && z.index(7).is_zero() && z.sum().is_zero());
        assert!(Lin::pair(Lin::zero(), Lin::zero()).is_zero());
        let f = LinFun::onehot(3, 99); // would fail on a non-zero argument
        assert!(f.apply(&z).unwrap().is_zero());
        assert_eq!(Lin::plus(z, Lin::real(2.0)).to_real(), 2.0);
    }

    #[test]
    fn one_hots_accumulate_sparsely_and_densify_once() {
        let n = 1000;
        let mut acc = Lin::zero();
        for i in 0..10 {
            acc = Lin::plus(acc, Lin::onehot(n, i * 3, Lin::real(1.0)).unwrap());
        }
        assert!(matches!(&acc.0, Repr::Sparse(s) if s.entries.len() == 10));
        assert_eq!(acc.index(3).to_real(), 1.0);
        assert_eq!(acc.index(4).to_real(), 0.0);
        assert_eq!(acc.sum().to_real(), 10.0);
        let dense = Lin::plus(acc.clone(), Lin::reals(vec![1.0; n]));
        assert_eq!(dense.index(0).to_real(), 2.0);
        assert_eq!(dense.index(1).to_real(), 1.0);
        assert_eq!(dense.sum().to_real(), 1010.0);
        let small = Lin::plus(
            Lin::onehot(2, 0, Lin::real(1.0)).unwrap(),
            Lin::plus(
                Lin::onehot(2, 1, Lin::real(2.0)).unwrap(),
                Lin::onehot(2, 1, Lin::real(3.0)).unwrap(),
            ),
        );
        assert_eq!(reals(&small, 2), vec![1.0, 5.0]);
        assert!(Lin::onehot(2, 2, Lin::real(1.0)).is_err());
    }

    #[test]
    fn arrays_of_different_lengths_add_by_padding() {
        let a = Lin::reals(vec![1.0, 2.0]);
        let b = Lin::reals(vec![10.0, 20.0, 30.0]);
        assert_eq!(
            reals(&Lin::plus(a.clone(), b.clone()), 3),
            vec![11.0, 22.0, 30.0]
        );
        assert_eq!(reals(&Lin::plus(b, a), 3), vec![11.0, 22.0, 30.0]);
    }

    #[test]
    fn shared_buffers_are_not_mutated() {
        let a = Lin::reals(vec![1.0, 2.0]);
        let keep = a.clone();
        let _ = Lin::plus(a, Lin::reals(vec![1.0, 1.0]));
        assert_eq!(reals(&keep, 2), vec![1.0, 2.0]);
        let s = Lin::onehot(2, 0, Lin::real(1.0)).unwrap();
        let keep = s.clone();
        let _ = Lin::plus(s, Lin::onehot(2, 1, Lin::real(1.0)).unwrap());
        assert_eq!(reals(&keep, 2), vec![1.0, 0.0]);
    }

    #[test]
    fn arrays_of_arrays_add_elementwise_in_place_when_unique() {
        let rows = |rs: &[&[f64]]| Lin::array(rs.iter().map(|r| Lin::reals(r.to_vec())).collect());
        let a = rows(&[&[1.0, 2.0], &[3.0]]);
        let b = rows(&[&[10.0, 20.0], &[30.0, 40.0], &[50.0]]);
        let (keep_a, keep_b) = (a.clone(), b.clone());
        let get = |l: &Lin, i: i64, n: usize| reals(&l.index(i), n);
        for s in [
            Lin::plus(a.clone(), b.clone()),
            Lin::plus(b.clone(), a.clone()),
        ] {
            assert_eq!(get(&s, 0, 2), vec![11.0, 22.0]);
            assert_eq!(get(&s, 1, 2), vec![33.0, 40.0]);
            assert_eq!(get(&s, 2, 1), vec![50.0]);
            assert_eq!(s.stored_len(), 3);
        }
        // Shared operands are untouched.
        assert_eq!(get(&keep_a, 0, 2), vec![1.0, 2.0]);
        assert_eq!(get(&keep_a, 1, 1), vec![3.0]);
        assert_eq!(get(&keep_b, 1, 2), vec![30.0, 40.0]);
        // A unique accumulator keeps its row buffers: a sum of many is not a copy per step.
        let row_ptr = |l: &Lin| match &l.index(0).0 {
            Repr::Reals(r) => Rc::as_ptr(r),
            _ => panic!("a row of reals"),
        };
        let mut acc = rows(&[&[0.0, 0.0], &[0.0, 0.0]]);
        let before = row_ptr(&acc);
        for k in 0..4 {
            acc = Lin::plus(acc, rows(&[&[1.0, k as f64], &[2.0, 2.0]]));
        }
        assert_eq!(row_ptr(&acc), before);
        assert_eq!(get(&acc, 0, 2), vec![4.0, 6.0]);
        assert_eq!(get(&acc, 1, 2), vec![8.0, 8.0]);
    }

    #[test]
    fn copower_fold_sums_linear_images() {
        let c = Copower::plus(
            Copower::singleton(Value::Real(2.0), Lin::real(3.0)),
            Copower::singleton(Value::Real(5.0), Lin::real(7.0)),
        );
        let f = |a: &Value| Ok(LinFun::scale(a.expect_real(), &LinFun::id()));
        assert_eq!(c.fold(f).unwrap().to_real(), 2.0 * 3.0 + 5.0 * 7.0);
        assert!(Copower::singleton(Value::Unit, Lin::zero()).is_empty());
        // A long left-nested chain folds without recursion.
        let mut big = Copower::empty();
        for _ in 0..200_000 {
            big = Copower::plus(big, Copower::singleton(Value::Unit, Lin::real(1.0)));
        }
        let ones = |_: &Value| Ok(LinFun::id());
        assert_eq!(big.fold(ones).unwrap().to_real(), 200_000.0);
    }

    #[test]
    fn native_kernels_are_transposes() {
        let ys = Rc::new(vec![1.0, -2.0, 3.0]);
        let d = LinFun::dot_with(ys.clone());
        let t = LinFun::scale_array(ys);
        let x = Lin::reals(vec![0.5, 0.25, 2.0]);
        let v = Lin::real(1.5);
        // <t v, x> = <v, d x>
        let lhs: f64 = reals(&t.apply(&v).unwrap(), 3)
            .iter()
            .zip(reals(&x, 3))
            .map(|(a, b)| a * b)
            .sum();
        let rhs = 1.5 * d.apply(&x).unwrap().to_real();
        assert!((lhs - rhs).abs() < 1e-12);
    }

    /// `h b = (b², f)` with `f` the derivative of `(γ, b) ↦ γ·b + 2b`-like bodies: reversed
    /// (`v ↦ (b·v, 2v)`) or forward (`(dγ, db) ↦ b·dγ + 2·db`); counts its calls.
    struct Body(Rc<std::cell::Cell<usize>>, bool);

    impl crate::value::Closure for Body {
        fn apply(&self, b: Value) -> Result<Value> {
            self.0.set(self.0.get() + 1);
            let x = b.expect_real();
            let (env, arg) = (
                LinFun::scale(x, &LinFun::id()),
                LinFun::scale(2.0, &LinFun::id()),
            );
            let f = if self.1 {
                LinFun::pair(&env, &arg)
            } else {
                LinFun::copair(&env, &arg)
            };
            Ok(Value::pair(Value::Real(x * x), Value::LinFun(f)))
        }
    }

    fn body(calls: &Rc<std::cell::Cell<usize>>, reverse: bool) -> Value {
        Value::Closure(Rc::new(Body(calls.clone(), reverse)))
    }

    fn derivative(h: &Value, b: f64) -> LinFun {
        match h.apply(Value::Real(b)).unwrap().expect_pair().1 {
            Value::LinFun(f) => f.clone(),
            _ => unreachable!(),
        }
    }

    #[test]
    fn call_tapes_replace_recomputation_and_agree_with_it() {
        let calls = Rc::new(std::cell::Cell::new(0));
        // Reverse: a call at 3 with output cotangent 5.
        let h = body(&calls, true);
        let g = LinFun::closure_arg(h.clone(), derivative(&h, 3.0));
        let v = Lin::real(5.0);
        let w = LinFun::record_call(Value::Real(3.0), &g).apply(&v).unwrap();
        assert_eq!(g.apply(&v).unwrap().to_real(), 10.0);
        assert_eq!(calls.get(), 1);
        // The creator folds through the tape: no re-run.
        let env = LinFun::closure_env(h.clone());
        assert_eq!(env.apply(&w).unwrap().to_real(), 15.0);
        assert_eq!(calls.get(), 1);
        // Another closure (same behaviour) and an untaped pair re-run the body: same value.
        let other = LinFun::closure_env(body(&calls, true));
        assert_eq!(other.apply(&w).unwrap().to_real(), 15.0);
        assert_eq!(calls.get(), 2);
        let plain = Lin::copower(Copower::singleton(Value::Real(3.0), v.clone()));
        assert_eq!(env.apply(&plain).unwrap().to_real(), 15.0);
        assert_eq!(calls.get(), 3);
        // A scaled copower keeps its tape (and misses the memo): still right, still no re-run.
        let scaled = Lin::scale(2.0, &w);
        assert_eq!(env.apply(&scaled).unwrap().to_real(), 30.0);
        assert_eq!(calls.get(), 3);

        // Forward: the closure's tangent for a context tangent 7, evaluated at the call's 3.
        let calls = Rc::new(std::cell::Cell::new(0));
        let h = body(&calls, false);
        let g = LinFun::closure_tan(h.clone(), derivative(&h, 3.0));
        assert_eq!(g.apply(&Lin::real(1.0)).unwrap().to_real(), 2.0);
        let p = LinFun::closure_env_tan(h.clone())
            .apply(&Lin::real(7.0))
            .unwrap();
        let p = Lin::plus(p.clone(), Lin::scale(0.5, &p));
        let at = LinFun::power_at(Value::Real(3.0), &g);
        assert_eq!(at.apply(&p).unwrap().to_real(), 31.5);
        let call = LinFun::call_tan(Value::Real(3.0), &g);
        let d = Lin::pair(p.clone(), Lin::real(1.0));
        assert_eq!(call.apply(&d).unwrap().to_real(), 33.5);
        assert_eq!(calls.get(), 1);
        // Without the tape (the generic power evaluation) the body runs again: same value.
        let generic = LinFun::power_eval(Value::Real(3.0));
        assert_eq!(generic.apply(&p).unwrap().to_real(), 31.5);
        assert_eq!(calls.get(), 3);
    }
}
