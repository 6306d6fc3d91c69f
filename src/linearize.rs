//! Reverse mode from forward mode, as in JAX and Dex ("You Only Linearize Once", Radul et al.,
//! POPL 2023): **linearize** (forward CHAD), **unzip** (the primal computation apart from the
//! linear map), **transpose** (the linear map's adjoint). `theory-notes/09-transposition.md`
//! relates this route to reverse CHAD.
//!
//! * Linearize: forward CHAD's image `x ⊢ let .. in (y, λ̲d. l)` *is* an unzipped
//!   linearization: the `let`s are the primal program, the variables `λ̲d. l` captures are its
//!   residuals (YOLO's tape), and `λ̲d. l` is the linear program. It is simplified, which
//!   inlines every combinator's derivative into that one linear λ and shares the primal values
//!   it needs (`cse` makes `cos x` in `sin`'s derivative read the primal's `cos x`, ...).
//! * Transpose: [`crate::ad::transpose`] (the rules are in [`crate::target::transpose`]), then
//!   simplification again.
//!
//! Entry points: [`vjp_via_transpose`] (reverse mode by this route: `chad grad|vjp --via
//! transpose`), [`Linearization`] / [`linearize`] (the value and a [`LinearMap`] that applies
//! the derivative many times without running the primal again) and [`linear_transpose`].
//!
//! ```
//! use chad::Value;
//! # fn main() -> Result<(), chad::Error> {
//! let prog = chad::internals::source::load(
//!     "def f (x : Real) (y : Real) : Real = x * sin y",
//!     &chad::internals::prim::Registry::builtin(),
//! )?;
//! let entry = prog.entry(0);
//! let lin = chad::internals::linearize::linearize(&entry, &[Value::Real(2.0), Value::Real(0.0)])?;
//! assert_eq!(lin.value.expect_real(), 0.0);
//! // The Jacobian-vector product at two tangents: the primal is not run again.
//! let jvp = |dx, dy| lin.map.apply(&[Value::Real(dx), Value::Real(dy)]);
//! assert_eq!(jvp(1.0, 0.0)?[0].expect_real(), 0.0); // sin 0
//! assert_eq!(jvp(0.0, 1.0)?[0].expect_real(), 2.0); // x cos 0
//! // Its transpose: the gradient.
//! let grad = chad::internals::linearize::linear_transpose(&lin.map).apply(&[Value::Real(1.0)])?;
//! assert_eq!((grad[0].expect_real(), grad[1].expect_real()), (0.0, 2.0));
//! # Ok(())
//! # }
//! ```

use crate::ad::{self, Jvp, Mor, Vjp, from_tangent, to_tangent};
use crate::error::{Error, ErrorKind, Result};
use crate::simplify::simplify;
use crate::source::term::Entry;
use crate::target::engine::Code;
use crate::target::linear::LinFun;
use crate::types::Type;
use crate::value::Value;
use std::rc::Rc;

/// The simplified forward derivative of an entry point (the linearization).
fn forward(entry: &Entry) -> Result<Mor> {
    Ok(Jvp::new(entry)?.map_body(simplify).mor().clone())
}

/// Reverse CHAD's morphism for `entry`, computed the other way: the simplified transpose of the
/// simplified forward derivative.
pub fn transposed_mor(entry: &Entry) -> Result<Mor> {
    let fwd = forward(entry)?;
    Ok(ad::transpose::transpose_mor(&fwd)
        .map_err(|e| e.prefixed(&format!("`{}`: ", entry.name)))?
        .map_body(simplify))
}

/// Reverse mode for `entry` by linearize, unzip, transpose (`chad grad|vjp --via transpose`):
/// the same answers as [`Vjp::new`] (reverse CHAD; the tests check), already simplified.
pub fn vjp_via_transpose(entry: &Entry) -> Result<Vjp> {
    Vjp::from_mor(entry, transposed_mor(entry)?)
}

/// An entry point linearized once, to be evaluated at many points ([`Linearization::at`]).
pub struct Linearization {
    entry: Entry,
    /// `x ⊢ (y, (λ̲d. l, λ̲c. lᵀ))` where possible (sharing the primal), else `None` and
    /// both images separately.
    both: Option<Mor>,
    forward: Mor,
    transposed: Mor,
    codes: std::cell::OnceCell<Codes>,
}

enum Codes {
    Both(Code),
    Apart(Code, Code),
}

impl Linearization {
    /// Linearizes (forward CHAD, simplified) and transposes (simplified) `entry`. Fails on
    /// higher-order inputs or results, and where the derivative cannot be transposed.
    pub fn new(entry: &Entry) -> Result<Linearization> {
        let fwd = forward(entry)?;
        let transposed = ad::transpose::transpose_mor(&fwd)?.map_body(simplify);
        let both = ad::transpose::both(&fwd)?.map(|m| m.map_body(simplify));
        Ok(Linearization {
            entry: entry.clone(),
            both,
            forward: fwd,
            transposed,
            codes: std::cell::OnceCell::new(),
        })
    }

    /// The forward derivative (simplified).
    pub fn forward(&self) -> &Mor {
        &self.forward
    }

    /// The transposed derivative (simplified): reverse mode.
    pub fn transposed(&self) -> &Mor {
        &self.transposed
    }

    /// The value at `args` and the derivative there as a [`LinearMap`] of tangents.
    pub fn at(&self, args: &[Value]) -> Result<Linearized> {
        crate::eval::check_args(&self.entry, args)?;
        let codes = self.codes.get_or_init(|| match &self.both {
            Some(m) => Codes::Both(m.compile()),
            None => Codes::Apart(self.forward.compile(), self.transposed.compile()),
        });
        let x = ad::context(args);
        let (value, forward, transposed) = match codes {
            Codes::Both(code) => {
                let v = code.run(&[x])?;
                let (y, fs) = v.expect_pair();
                let (f, t) = fs.expect_pair();
                (y.clone(), lin_fun(f.clone()), lin_fun(t.clone()))
            }
            Codes::Apart(fc, tc) => {
                let (y, f) = ad::split_image(fc.run(std::slice::from_ref(&x))?)?;
                let (_, t) = ad::split_image(tc.run(&[x])?)?;
                (y, f, t)
            }
        };
        let map = LinearMap {
            inner: Rc::new(Inner {
                params: self.entry.param_types(),
                result: self.entry.body.ty.clone(),
                args: args.to_vec(),
                value: value.clone(),
                maps: [forward, transposed],
            }),
            transposed: false,
        };
        Ok(Linearized { value, map })
    }
}

fn lin_fun(v: Value) -> LinFun {
    match v {
        Value::LinFun(f) => f,
        other => panic!("internal error: a derivative is not a linear map: {other}"),
    }
}

/// The value of a function at a point and its derivative there ([`linearize`]).
pub struct Linearized {
    /// The value.
    pub value: Value,
    /// The derivative: tangents of the parameters to the tangent of the value.
    pub map: LinearMap,
}

struct Inner {
    params: Vec<Type>,
    result: Type,
    args: Vec<Value>,
    value: Value,
    /// The forward map and its transpose.
    maps: [LinFun; 2],
}

/// The derivative of a function at a point, as a linear map: either forward (one tangent per
/// parameter to the tangent of the result) or transposed (the cotangent of the result to one
/// cotangent per parameter). Applying it runs only the linear code: the primal computation it
/// needs was done once, by [`Linearization::at`]. Cheap to clone.
#[derive(Clone)]
pub struct LinearMap {
    inner: Rc<Inner>,
    transposed: bool,
}

impl LinearMap {
    /// Whether this is the transposed map (cotangents of the result to cotangents of the
    /// parameters).
    pub fn is_transposed(&self) -> bool {
        self.transposed
    }

    /// The types of the inputs the map takes, in order: the parameters' tangent types, or the
    /// result's (one input) for the transposed map.
    pub fn input_types(&self) -> Vec<Type> {
        let t = |ty: &Type| ty.tangent().unwrap_or(Type::Unit);
        if self.transposed {
            vec![t(&self.inner.result)]
        } else {
            self.inner.params.iter().map(t).collect()
        }
    }

    /// Applies the map: forward, `inputs` are one tangent per parameter and the output is the
    /// result's tangent (one value); transposed, `inputs` is the result's cotangent (one value)
    /// and the output one cotangent per parameter.
    pub fn apply(&self, inputs: &[Value]) -> Result<Vec<Value>> {
        let i = &self.inner;
        let arity = |want: usize| {
            if inputs.len() == want {
                Ok(())
            } else {
                Err(Error::new(
                    ErrorKind::Argument,
                    format!(
                        "the linear map takes {want} input{}, but {} {} given",
                        if want == 1 { "" } else { "s" },
                        inputs.len(),
                        if inputs.len() == 1 { "was" } else { "were" }
                    ),
                ))
            }
        };
        if self.transposed {
            arity(1)?;
            let v = to_tangent(&i.result, &i.value, &inputs[0])
                .map_err(|e| e.prefixed("cotangent: "))?;
            let g = i.maps[1].apply(&v)?;
            Ok(ad::context_components(g, i.params.len())
                .iter()
                .zip(&i.params)
                .zip(&i.args)
                .map(|((g, p), a)| from_tangent(p, a, g))
                .collect())
        } else {
            arity(i.params.len())?;
            let mut ds = Vec::with_capacity(inputs.len());
            for (k, ((p, a), t)) in i.params.iter().zip(&i.args).zip(inputs).enumerate() {
                ds.push(
                    to_tangent(p, a, t).map_err(|e| e.prefixed(&format!("tangent {}: ", k + 1)))?,
                );
            }
            let dy = i.maps[0].apply(&ad::context_linear(ds))?;
            Ok(vec![from_tangent(&i.result, &i.value, &dy)])
        }
    }
}

/// The transpose of a linear map: forward becomes transposed and back (O(1): both were made by
/// [`Linearization::at`], over the same residuals).
pub fn linear_transpose(m: &LinearMap) -> LinearMap {
    LinearMap {
        inner: m.inner.clone(),
        transposed: !m.transposed,
    }
}

/// The value of `entry` at `args` and its derivative there ([`Linearization`] for many points).
pub fn linearize(entry: &Entry, args: &[Value]) -> Result<Linearized> {
    Linearization::new(entry)?.at(args)
}
