//! Run-time values shared by every evaluator.
//!
//! `f64`, `i64`, `bool`, unit, pairs, injections, arrays and closures. Arrays of `Real` are
//! always stored unboxed ([`Value::RealArray`], a `Vec<f64>`); every other element type uses
//! [`Value::Array`]. Constructors that know the element type ([`Value::array`]) keep that
//! invariant, so two evaluators produce identical representations.
//!
//! Closures are trait objects ([`Closure`]): each evaluator supplies its own implementation, so
//! values of function type can flow between generic code without it knowing how they run.

#[path = "value/convert.rs"]
mod convert;

use crate::deep::{Deep, deep};
use crate::error::{Error, Result};
use crate::target::linear::{Lin, LinFun};
use crate::types::Type;
use std::fmt;
use std::rc::Rc;

thread_local! {
    /// The payloads of `inl ()` and `inr ()`, shared (see [`Value::inl`]).
    static UNIT_SIDES: (Rc<Deep<Value>>, Rc<Deep<Value>>) =
        (Rc::new(Deep::new(Value::Unit)), Rc::new(Deep::new(Value::Unit)));
}

/// A run-time value.
#[derive(Clone)]
pub enum Value {
    /// A real number.
    Real(f64),
    /// An integer.
    Int(i64),
    /// A boolean.
    Bool(bool),
    /// The unit value `()`.
    Unit,
    /// A pair `(a, b)`.
    Pair(Rc<Deep<(Value, Value)>>),
    /// A left injection `inl v`.
    Inl(Rc<Deep<Value>>),
    /// A right injection `inr v`.
    Inr(Rc<Deep<Value>>),
    /// An array of `Real`, unboxed.
    RealArray(Rc<Vec<f64>>),
    /// An array of any other element type.
    Array(Rc<Vec<Value>>),
    /// A function value.
    Closure(Rc<dyn Closure>),
    /// A value of a linear type (target language only).
    Lin(Lin),
    /// A linear map `L ⊸ L'` (target language only).
    LinFun(LinFun),
}

/// A function value: something that can be applied to an argument.
pub trait Closure {
    /// Applies the function.
    fn apply(&self, arg: Value) -> Result<Value>;
}

impl Value {
    /// The pair `(a, b)`.
    pub fn pair(a: Value, b: Value) -> Value {
        Value::Pair(Rc::new(Deep::new((a, b))))
    }

    /// `inl v`.
    pub fn inl(v: Value) -> Value {
        match v {
            // `inl ()` and `inr ()` (the two Booleans of `decide`) share one allocation each.
            Value::Unit => UNIT_SIDES.with(|(l, _)| Value::Inl(l.clone())),
            v => Value::Inl(Rc::new(Deep::new(v))),
        }
    }

    /// `inr v`.
    pub fn inr(v: Value) -> Value {
        match v {
            Value::Unit => UNIT_SIDES.with(|(_, r)| Value::Inr(r.clone())),
            v => Value::Inr(Rc::new(Deep::new(v))),
        }
    }

    /// The right-nested tuple of the values (`()` for none, the value itself for one).
    pub fn tuple(vs: Vec<Value>) -> Value {
        let mut it = vs.into_iter().rev();
        match it.next() {
            None => Value::Unit,
            Some(last) => it.fold(last, |acc, v| Value::pair(v, acc)),
        }
    }

    /// An array with elements of type `elem`: unboxed when `elem` is `Real`.
    pub fn array(elem: &Type, items: Vec<Value>) -> Value {
        if matches!(elem, Type::Real) {
            Value::RealArray(Rc::new(items.iter().map(Value::expect_real).collect()))
        } else {
            Value::Array(Rc::new(items))
        }
    }

    /// An array whose element type is not at hand: unboxed when the elements are reals or
    /// there are none (an empty unboxed array stands for the empty array of any type).
    pub fn array_of(items: Vec<Value>) -> Value {
        if items.iter().all(|x| matches!(x, Value::Real(_))) {
            Value::RealArray(Rc::new(items.iter().map(Value::expect_real).collect()))
        } else {
            Value::Array(Rc::new(items))
        }
    }

    /// An unboxed array of reals.
    pub fn reals(xs: Vec<f64>) -> Value {
        Value::RealArray(Rc::new(xs))
    }

    /// The components of a pair. Panics if the value is not a pair (a typing invariant).
    pub fn expect_pair(&self) -> (&Value, &Value) {
        match self {
            Value::Pair(p) => (&p.0, &p.1),
            other => invariant("a pair", other),
        }
    }

    /// The number. Panics if the value is not a real (a typing invariant).
    pub fn expect_real(&self) -> f64 {
        match self {
            Value::Real(x) => *x,
            other => invariant("a Real", other),
        }
    }

    /// The integer. Panics if the value is not an integer (a typing invariant).
    pub fn expect_int(&self) -> i64 {
        match self {
            Value::Int(x) => *x,
            other => invariant("an Int", other),
        }
    }

    /// The boolean. Panics if the value is not a boolean (a typing invariant).
    pub fn expect_bool(&self) -> bool {
        match self {
            Value::Bool(b) => *b,
            other => invariant("a Bool", other),
        }
    }

    /// The unboxed reals of an `Array Real`. Panics otherwise (a typing invariant).
    pub fn expect_reals(&self) -> &[f64] {
        match self {
            Value::RealArray(xs) => xs,
            other => invariant("an Array Real", other),
        }
    }

    /// The linear map of a target-language value of type `L ⊸ L'`. Panics otherwise (a typing
    /// invariant).
    pub fn expect_lin_fun(&self) -> &LinFun {
        match self {
            Value::LinFun(f) => f,
            other => invariant("a linear map", other),
        }
    }

    /// The linear value of a target-language value of type `Lin L`. Panics otherwise (a typing
    /// invariant).
    pub fn into_lin(self) -> Lin {
        match self {
            Value::Lin(l) => l,
            other => invariant("a linear value", &other),
        }
    }

    /// Applies a function value. Panics if the value is not a function (a typing invariant).
    pub fn apply(&self, arg: Value) -> Result<Value> {
        match self {
            Value::Closure(c) => c.apply(arg),
            other => invariant("a function", other),
        }
    }

    /// Length of an array value. Panics if the value is not an array (a typing invariant).
    pub fn array_len(&self) -> usize {
        match self {
            Value::RealArray(xs) => xs.len(),
            Value::Array(xs) => xs.len(),
            other => invariant("an array", other),
        }
    }

    /// Element `i` of an array, or a runtime error naming the index and the length.
    pub fn index(&self, i: i64) -> Result<Value> {
        let i = check_index(i, self.array_len())?;
        Ok(match self {
            Value::RealArray(xs) => Value::Real(xs[i]),
            Value::Array(xs) => xs[i].clone(),
            _ => unreachable!("array_len checked the variant"),
        })
    }

    /// The elements of an array, as values.
    pub fn array_items(&self) -> Vec<Value> {
        match self {
            Value::RealArray(xs) => xs.iter().map(|&x| Value::Real(x)).collect(),
            Value::Array(xs) => xs.as_ref().clone(),
            other => invariant("an array", other),
        }
    }

    /// Structural equality, with reals compared exactly (bit patterns aside, NaN equals NaN)
    /// and arrays compared by elements whatever their representation. Returns `None` if a
    /// closure is reached: functions cannot be compared.
    pub fn same(&self, other: &Value) -> Option<bool> {
        deep(|| {
            Some(match (self, other) {
                (Value::Real(a), Value::Real(b)) => a == b || (a.is_nan() && b.is_nan()),
                (Value::Int(a), Value::Int(b)) => a == b,
                (Value::Bool(a), Value::Bool(b)) => a == b,
                (Value::Unit, Value::Unit) => true,
                (Value::Pair(a), Value::Pair(b)) => a.0.same(&b.0)? && a.1.same(&b.1)?,
                (Value::Inl(a), Value::Inl(b)) | (Value::Inr(a), Value::Inr(b)) => a.same(b)?,
                (Value::Closure(_) | Value::Lin(_) | Value::LinFun(_), _)
                | (_, Value::Closure(_) | Value::Lin(_) | Value::LinFun(_)) => return None,
                (a, b) if is_array(a) && is_array(b) => {
                    let (xs, ys) = (a.array_items(), b.array_items());
                    if xs.len() != ys.len() {
                        return Some(false);
                    }
                    for (x, y) in xs.iter().zip(&ys) {
                        if !x.same(y)? {
                            return Some(false);
                        }
                    }
                    true
                }
                _ => false,
            })
        })
    }

    /// True if the value has the given type (closures are assumed to have any function type).
    pub fn has_type(&self, ty: &Type) -> bool {
        deep(|| match (self, ty) {
            (Value::Real(_), Type::Real)
            | (Value::Int(_), Type::Int)
            | (Value::Bool(_), Type::Bool)
            | (Value::Unit, Type::Unit)
            | (Value::Closure(_), Type::Fun(_)) => true,
            (Value::Pair(p), Type::Prod(t)) => p.0.has_type(&t.0) && p.1.has_type(&t.1),
            (Value::Inl(v), Type::Sum(t)) => v.has_type(&t.0),
            (Value::Inr(v), Type::Sum(t)) => v.has_type(&t.1),
            // An empty array may be stored unboxed whatever its element type.
            (Value::RealArray(xs), Type::Array(e)) => matches!(***e, Type::Real) || xs.is_empty(),
            (Value::Array(xs), Type::Array(e)) => {
                !matches!(***e, Type::Real) && xs.iter().all(|x| x.has_type(e))
            }
            _ => false,
        })
    }

    /// The value as JSON: numbers, booleans, `null` for unit, arrays for tuples and arrays,
    /// `{"inl": v}` / `{"inr": v}` for sums, and `"<function>"` for closures. Non-finite reals
    /// become the strings `"NaN"`, `"Infinity"`, `"-Infinity"`.
    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::Value as J;
        deep(|| match self {
            Value::Real(x) => real_to_json(*x),
            Value::Int(i) => J::from(*i),
            Value::Bool(b) => J::Bool(*b),
            Value::Unit => J::Null,
            Value::Pair(_) => J::Array(self.tuple_items().iter().map(|v| v.to_json()).collect()),
            Value::Inl(v) => serde_json::json!({ "inl": v.to_json() }),
            Value::Inr(v) => serde_json::json!({ "inr": v.to_json() }),
            Value::RealArray(xs) => J::Array(xs.iter().map(|&x| real_to_json(x)).collect()),
            Value::Array(xs) => J::Array(xs.iter().map(|v| v.to_json()).collect()),
            Value::Closure(_) => J::String("<function>".into()),
            Value::Lin(l) => J::String(format!("<linear {l}>")),
            Value::LinFun(_) => J::String("<linear map>".into()),
        })
    }

    /// Reads a value of type `ty` from JSON (the format of [`Value::to_json`]).
    pub fn from_json(json: &serde_json::Value, ty: &Type) -> Result<Value> {
        use serde_json::Value as J;
        let bad = || {
            Error::new(
                crate::error::ErrorKind::Argument,
                format!("expected a JSON value of type {ty}, found `{json}`"),
            )
        };
        deep(|| {
            Ok(match ty {
                Type::Real => match json {
                    J::Number(n) => Value::Real(n.as_f64().ok_or_else(bad)?),
                    J::String(s) => match s.as_str() {
                        "NaN" => Value::Real(f64::NAN),
                        "Infinity" => Value::Real(f64::INFINITY),
                        "-Infinity" => Value::Real(f64::NEG_INFINITY),
                        _ => return Err(bad()),
                    },
                    _ => return Err(bad()),
                },
                Type::Int => Value::Int(json.as_i64().ok_or_else(bad)?),
                Type::Bool => Value::Bool(json.as_bool().ok_or_else(bad)?),
                Type::Unit => match json {
                    J::Null => Value::Unit,
                    J::Array(a) if a.is_empty() => Value::Unit,
                    _ => return Err(bad()),
                },
                Type::Prod(_) => {
                    let items = json.as_array().ok_or_else(bad)?;
                    let comps = tuple_components(ty, items.len());
                    if comps.len() != items.len() {
                        return Err(bad().with_note(format!(
                            "a tuple of type {ty} has {} components",
                            comps.len()
                        )));
                    }
                    let vs = items
                        .iter()
                        .zip(&comps)
                        .map(|(j, t)| Value::from_json(j, t))
                        .collect::<Result<Vec<_>>>()?;
                    Value::tuple(vs)
                }
                Type::Sum(p) => {
                    let obj = json.as_object().filter(|o| o.len() == 1).ok_or_else(bad)?;
                    if let Some(v) = obj.get("inl") {
                        Value::inl(Value::from_json(v, &p.0)?)
                    } else if let Some(v) = obj.get("inr") {
                        Value::inr(Value::from_json(v, &p.1)?)
                    } else {
                        return Err(bad());
                    }
                }
                Type::Array(e) => {
                    let items = json.as_array().ok_or_else(bad)?;
                    let vs = items
                        .iter()
                        .map(|j| Value::from_json(j, e))
                        .collect::<Result<Vec<_>>>()?;
                    Value::array(e, vs)
                }
                Type::Fun(_) => {
                    return Err(Error::new(
                        crate::error::ErrorKind::Argument,
                        format!("a value of function type {ty} cannot be given as data"),
                    ));
                }
            })
        })
    }

    /// The components of a right-nested tuple value `(a, (b, c))` as `[a, b, c]`.
    fn tuple_items(&self) -> Vec<&Value> {
        let mut out = Vec::new();
        let mut cur = self;
        while let Value::Pair(p) = cur {
            out.push(&p.0);
            cur = &p.1;
        }
        out.push(cur);
        out
    }
}

/// Lanes of the fixed summation order ([`sum_reals`]).
pub const SUM_LANES: usize = 8;
/// Chunk length of the fixed summation order ([`sum_reals`]), a multiple of [`SUM_LANES`].
pub const SUM_CHUNK: usize = 4096;

/// The one summation order of the crate, used by `sum`, `dot`, the linear `lsum` of reals and
/// every backend (theory-notes/07): the terms are cut into chunks of [`SUM_CHUNK`]; within a
/// chunk, term `k` is added to lane `k mod 8`, and the eight lanes are combined as
/// `((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7))`; the chunks' sums are added left to
/// right, starting from `0.0`. Fixed, so results do not depend on the backend or on how many
/// threads share the work (each chunk can be summed alone); lanes, so compiled code can keep
/// eight independent additions in flight (and in SIMD registers).
#[derive(Clone, Debug)]
pub struct SumOrder {
    total: f64,
    lanes: [f64; SUM_LANES],
    k: usize,
}

impl Default for SumOrder {
    fn default() -> SumOrder {
        SumOrder {
            total: 0.0,
            lanes: [0.0; SUM_LANES],
            k: 0,
        }
    }
}

impl SumOrder {
    /// Adds the next term.
    #[inline]
    pub fn push(&mut self, x: f64) {
        self.lanes[self.k % SUM_LANES] += x;
        self.k += 1;
        if self.k == SUM_CHUNK {
            self.flush();
        }
    }

    fn flush(&mut self) {
        let l = &self.lanes;
        self.total += ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
        self.lanes = [0.0; SUM_LANES];
        self.k = 0;
    }

    /// The sum of the terms pushed.
    pub fn finish(mut self) -> f64 {
        if self.k > 0 {
            self.flush();
        }
        self.total
    }
}

/// Σ xs in the fixed order of [`SumOrder`].
pub fn sum_reals(xs: impl IntoIterator<Item = f64>) -> f64 {
    let mut s = SumOrder::default();
    for x in xs {
        s.push(x);
    }
    s.finish()
}

/// The longest array the evaluators will build (2^28 elements, 2 GiB of reals): larger
/// requests from `build` and `replicate` are runtime errors rather than allocation failures.
pub const MAX_ARRAY_LEN: i64 = 1 << 28;

/// Validates a requested array length for `op` (`build`, `replicate`, `lbuild`, `onehot`):
/// the gate every evaluator's array allocation of a computed length passes, so it is also
/// where the memory budget is asked ([`crate::budget::reserve`]): [`BYTES_PER_ELEMENT`] per
/// element (a one-hot, which is sparse, asks nothing).
pub fn check_len(op: &str, n: i64) -> Result<usize> {
    if n < 0 {
        Err(Error::runtime(format!("{op}: negative length {n}")))
    } else if n > MAX_ARRAY_LEN {
        Err(Error::runtime(format!(
            "{op}: length {n} exceeds the limit of {MAX_ARRAY_LEN} elements"
        )))
    } else {
        if op != "onehot" {
            crate::budget::reserve((n as usize).saturating_mul(BYTES_PER_ELEMENT))
                .map_err(|e| e.prefixed(&format!("{op} of {n} elements: ")))?;
        }
        Ok(n as usize)
    }
}

/// What [`check_len`] asks the budget for per element: a boxed [`Value`] (an array of reals
/// takes half, but is built from values in places).
pub const BYTES_PER_ELEMENT: usize = std::mem::size_of::<Value>();

/// Validates an index `i` into an array of length `n` (the check and message of
/// [`Value::index`], for evaluators with their own array representation).
pub fn check_index(i: i64, n: usize) -> Result<usize> {
    if i < 0 || i as u64 >= n as u64 {
        Err(Error::runtime(format!(
            "index {i} out of range for an array of length {n}"
        )))
    } else {
        Ok(i as usize)
    }
}

/// Validates that `map2`'s arrays have the same length.
pub fn check_same_len(op: &str, n: usize, m: usize) -> Result<usize> {
    if n == m {
        Ok(n)
    } else {
        Err(Error::runtime(format!(
            "{op}: arrays have different lengths ({n} and {m})"
        )))
    }
}

/// `replicate n v` for an element type.
pub fn replicate(elem: &Type, n: usize, v: &Value) -> Value {
    match v {
        Value::Real(x) if matches!(elem, Type::Real) => Value::reals(vec![*x; n]),
        _ => Value::Array(Rc::new(vec![v.clone(); n])),
    }
}

/// The components of a tuple type written with `n` items: `(A, B, C)` is `A × (B × C)`, so
/// the last component absorbs any further nesting.
pub fn tuple_components(ty: &Type, n: usize) -> Vec<Type> {
    let mut out = Vec::new();
    let mut cur = ty.clone();
    while out.len() + 1 < n {
        match cur.as_prod() {
            Some((a, b)) => {
                out.push(a.clone());
                let b = b.clone();
                cur = b;
            }
            None => break,
        }
    }
    out.push(cur);
    out
}

fn is_array(v: &Value) -> bool {
    matches!(v, Value::RealArray(_) | Value::Array(_))
}

fn real_to_json(x: f64) -> serde_json::Value {
    match serde_json::Number::from_f64(x) {
        Some(n) => serde_json::Value::Number(n),
        None if x.is_nan() => serde_json::Value::String("NaN".into()),
        None if x > 0.0 => serde_json::Value::String("Infinity".into()),
        None => serde_json::Value::String("-Infinity".into()),
    }
}

#[cold]
#[track_caller]
fn invariant(expected: &str, found: &Value) -> ! {
    panic!("internal error: expected {expected}, found {found} (typing invariant broken)")
}

/// Formats a real so that it reads back as a `Real` literal: `1.0`, `0.1`, `1e-7`, `-2.5`;
/// non-finite values print as `NaN`, `inf`, `-inf`.
pub fn format_real(x: f64) -> String {
    if x.is_nan() {
        "NaN".into()
    } else if x.is_infinite() {
        if x > 0.0 { "inf".into() } else { "-inf".into() }
    } else {
        // `{:?}` is the shortest representation that round-trips, and always has a `.` or `e`.
        format!("{x:?}")
    }
}

impl fmt::Display for Value {
    /// Prints in the literal syntax of the language: `1.5`, `-2`, `true`, `()`,
    /// `[1.0, 2.0]`, `(1.0, [2.0])`, `inl 2.0`, `inr (1.0, 2.0)`; functions as `<function>`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        deep(|| match self {
            Value::Real(x) => f.write_str(&format_real(*x)),
            Value::Int(i) => write!(f, "{i}"),
            Value::Bool(b) => write!(f, "{b}"),
            Value::Unit => f.write_str("()"),
            Value::Pair(_) => {
                f.write_str("(")?;
                for (i, v) in self.tuple_items().iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{v}")?;
                }
                f.write_str(")")
            }
            Value::Inl(v) | Value::Inr(v) => {
                f.write_str(if matches!(self, Value::Inl(_)) {
                    "inl "
                } else {
                    "inr "
                })?;
                let atomic = match &***v {
                    Value::Real(x) => *x >= 0.0 || x.is_nan(),
                    Value::Int(i) => *i >= 0,
                    Value::Inl(_) | Value::Inr(_) => false,
                    _ => true,
                };
                if atomic {
                    write!(f, "{}", ***v)
                } else {
                    write!(f, "({})", ***v)
                }
            }
            Value::RealArray(xs) => {
                f.write_str("[")?;
                for (i, x) in xs.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    f.write_str(&format_real(*x))?;
                }
                f.write_str("]")
            }
            Value::Array(xs) => {
                f.write_str("[")?;
                for (i, v) in xs.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{v}")?;
                }
                f.write_str("]")
            }
            Value::Closure(_) => f.write_str("<function>"),
            Value::Lin(l) => write!(f, "{l}"),
            Value::LinFun(_) => f.write_str("<linear map>"),
        })
    }
}

impl fmt::Debug for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_is_literal_syntax() {
        let v = Value::tuple(vec![
            Value::Real(1.0),
            Value::reals(vec![2.0, -0.5]),
            Value::inl(Value::Real(-1.0)),
            Value::inr(Value::pair(Value::Int(3), Value::Bool(true))),
            Value::Unit,
        ]);
        assert_eq!(
            v.to_string(),
            "(1.0, [2.0, -0.5], inl (-1.0), inr (3, true), ())"
        );
        assert_eq!(Value::Real(1e-7).to_string(), "1e-7");
    }

    #[test]
    fn json_round_trips_by_type() {
        let ty = Type::tuple(&[
            Type::Real,
            Type::array(Type::Int),
            Type::sum(Type::Unit, Type::Real),
            Type::Bool,
        ]);
        let v = Value::tuple(vec![
            Value::Real(f64::NAN),
            Value::array(&Type::Int, vec![Value::Int(1), Value::Int(-2)]),
            Value::inr(Value::Real(2.5)),
            Value::Bool(false),
        ]);
        let j = v.to_json();
        assert_eq!(j.to_string(), r#"["NaN",[1,-2],{"inr":2.5},false]"#);
        let back = Value::from_json(&j, &ty).unwrap();
        assert_eq!(back.same(&v), Some(true));
        assert!(back.has_type(&ty));
    }

    #[test]
    fn json_errors_name_the_type() {
        let e =
            Value::from_json(&serde_json::json!([1, true]), &Type::array(Type::Real)).unwrap_err();
        assert!(e.message().contains("type Real"), "{}", e.message());
        let e = Value::from_json(
            &serde_json::json!([1, 2, 3]),
            &Type::tuple(&[Type::Real, Type::Real]),
        )
        .unwrap_err();
        assert!(e.message().contains("(Real, Real)"), "{}", e.message());
    }

    #[test]
    fn index_out_of_range_is_an_error() {
        let xs = Value::reals(vec![1.0, 2.0]);
        assert_eq!(xs.index(1).unwrap().expect_real(), 2.0);
        let e = xs.index(2).unwrap_err();
        assert_eq!(e.message(), "index 2 out of range for an array of length 2");
        assert!(xs.index(-1).is_err());
    }
}
