//! chad's own `sin` and `cos`: one definition, run by every evaluator and emitted as source
//! into native modules ([`ELEMENTARY_SRC`]), so that every backend computes the same bits, and
//! written so that a loop of them runs in vector lanes.
//!
//! libm's functions are calls the Rust compiler cannot put in vector lanes: a `sum` or `map`
//! of `sin` runs one element at a time. These are straight-line arithmetic on the arguments
//! they handle themselves (the "core" range `|x| < 2¹⁹ π/2`) and call libm outside it (huge,
//! infinite and NaN arguments), where they give libm's value. A loop whose every argument is
//! in the core range can therefore run the `_lane` forms, which never call libm and only
//! record in a flag that an argument was outside; native code runs such loops in vector lanes
//! and computes a chunk again with the plain forms where the flag is set (note 07 §4,
//! "elementary functions in lanes"), so the result is the same bit for bit.
//!
//! Accuracy: within 1 unit in the last place of glibc's on the tests' samples (below), which
//! is within 1 of the correctly rounded value; they differ from glibc's in about 1 case in 10.
//! The method is fdlibm's (Sun Microsystems, 1993; also musl's): reduce `x` by the nearest
//! multiple `n π/2` with π/2 in three parts (exact for `|n| < 2²⁰`), keep the reduced argument
//! as a sum `y0 + y1`, and evaluate `__kernel_sin`'s and `__kernel_cos`'s polynomials on it,
//! choosing and signing by `n mod 4` with bit operations rather than branches. Below π/4 the
//! plain forms skip the reduction, which is exact there (the same bits, sooner). No fused
//! multiply-add is used anywhere: the evaluator (compiled for any x86-64) and a native module
//! (compiled for its CPU) must round every operation alike.
//!
//! `exp` and `tanh` stay as they were (libm's `exp`; `tanh` through it, `prim.rs`). An own
//! `exp` (fdlibm's rational form, scaled by `2ᵏ` from its bits) was tried: in scalar code it
//! is slower than glibc's, which needs no division; GMM's primal (25 000 `exp`s a call in sums
//! of 25 terms, too short for the lanes to pay) went 7% slower, and a chain of scalar `tanh`s
//! through it (the bench's straight-line programs) 50%.

// The constants are spelled as in fdlibm (more digits than a double holds, the same values;
// `2/π` is the double nearest it, as `FRAC_2_PI`, but written out like the others).
#![allow(clippy::excessive_precision, clippy::approx_constant)]

/// Whether builtin `name` is one of these functions, with a `_lane` form native code calls
/// in vector lanes (`ir::rust`) and a source in [`ELEMENTARY_SRC`].
pub fn has_lane_form(name: &str) -> bool {
    matches!(name, "sin" | "cos")
}

/// Defines each function and collects the source of all of them, without their visibility,
/// each allowed to be unused (a native module takes all of them when it calls one). In the
/// source each is `#[inline(always)]` (the lane loops vectorise only with everything inlined),
/// except those marked `@call`, the plain forms, which stay calls: a program with many
/// scalar `sin`s would otherwise inline the whole reduction at each (the bench's
/// straight-line program at 3000 lets took 24 s in rustc, not 1).
macro_rules! shared_fns {
    ($src:ident: $($(#[$m:meta])* $(@$call:ident)? $vis:vis fn $name:ident ($($a:ident : $t:ty),*) -> $r:ty $body:block)*) => {
        $($(#[$m])* $vis fn $name($($a: $t),*) -> $r $body)*
        /// The Rust source of these functions, for native modules.
        pub const $src: &str = concat!($(
            "\n#[allow(dead_code, clippy::all)]\n",
            emitted_inline!($($call)?),
            "\n",
            stringify!(fn $name($($a: $t),*) -> $r $body),
            "\n"
        ),*);
    };
}

/// The inlining attribute of a function in [`ELEMENTARY_SRC`].
macro_rules! emitted_inline {
    () => {
        "#[inline(always)]"
    };
    (call) => {
        "#[inline(never)]"
    };
}

shared_fns! {
    ELEMENTARY_SRC:

    /// `n` nearest `x · 2/π` and `x - n π/2` as `y0 + y1`; `n mod 4` in the low bits of the
    /// result's last component. Exact reduction for `|x| < 2¹⁹ π/2`.
    #[inline(always)]
    fn trig_reduce(x: f64) -> (f64, f64, u64) {
        // 1.5 · 2⁵²: adding it rounds to an integer, held in the low bits.
        let t = x * 6.36619772367581382433e-01 + 6755399441055744.0;
        let q = t.to_bits();
        let f = t - 6755399441055744.0;
        // π/2 in three parts of 33 bits, each with its tail (fdlibm's pio2_1.. pio2_3t).
        let r0 = x - f * 1.57079632673412561417e+00;
        let w0 = f * 6.07710050630396597660e-11;
        let r1 = r0 - w0;
        // The rounding error of `r1` (zero where the first part cancelled most of `x`).
        let e1 = (r0 - r1) - w0;
        let w1 = f * 2.02226624871116645580e-21;
        let r2 = r1 - w1;
        let u2 = (f * 8.47842766036889956997e-32 - e1) - ((r1 - r2) - w1);
        let y0 = r2 - u2;
        let y1 = (r2 - y0) - u2;
        (y0, y1, q)
    }

    /// sin(x + y) for `|x| ≤ π/4`, `|y|` below half an ulp of `x` (fdlibm's `__kernel_sin`).
    #[inline(always)]
    fn kernel_sin(x: f64, y: f64) -> f64 {
        let z = x * x;
        let w = z * z;
        let r = 8.33333333332248946124e-03
            + z * (-1.98412698298579493134e-04 + z * 2.75573137070700676789e-06)
            + z * w * (-2.50507602534068634195e-08 + z * 1.58969099521155010221e-10);
        let v = z * x;
        x - ((z * (0.5 * y - v * r) - y) - v * -1.66666666666666324348e-01)
    }

    /// cos(x + y) for `|x| ≤ π/4`, `|y|` below half an ulp of `x` (fdlibm's `__kernel_cos`).
    #[inline(always)]
    fn kernel_cos(x: f64, y: f64) -> f64 {
        let z = x * x;
        let w = z * z;
        let r = z * (4.16666666666666019037e-02
            + z * (-1.38888888888741095749e-03 + z * 2.48015872894767294178e-05))
            + w * w * (-2.75573143513906633035e-07
                + z * (2.08757232129817482790e-09 + z * -1.13596475577881948265e-11));
        let hz = 0.5 * z;
        let v = 1.0 - hz;
        v + (((1.0 - v) - hz) + (z * r - x * y))
    }

    /// For quadrant `q` (mod 4): `a`, `b`, `-a`, `-b`, chosen and signed with bit operations,
    /// which the compiler keeps as selects (with `if`s it may branch, and a loop that branches
    /// does not run in vector lanes).
    #[inline(always)]
    fn pick_signed(a: f64, b: f64, q: u64) -> f64 {
        let odd = 0u64.wrapping_sub(q & 1);
        let v = (a.to_bits() & !odd) | (b.to_bits() & odd);
        f64::from_bits(v ^ ((q & 2) << 62))
    }

    /// sin x for `|x| < 2¹⁹ π/2` (any other `x` gives some value).
    #[inline(always)]
    fn sin_core(x: f64) -> f64 {
        let (y0, y1, q) = trig_reduce(x);
        let s = kernel_sin(y0, y1);
        let c = kernel_cos(y0, y1);
        pick_signed(s, c, q)
    }

    /// cos x for `|x| < 2¹⁹ π/2` (any other `x` gives some value).
    #[inline(always)]
    fn cos_core(x: f64) -> f64 {
        let (y0, y1, q) = trig_reduce(x);
        let s = kernel_sin(y0, y1);
        let c = kernel_cos(y0, y1);
        pick_signed(s, c, q.wrapping_add(1))
    }

    /// Whether `x` is in `sin`'s and `cos`'s core range, `|x| < 2¹⁹ π/2` (false for NaN).
    #[inline(always)]
    fn in_core(x: f64) -> bool {
        x.abs() < 823549.6
    }

    /// sin x, chad's own (the module's doc).
    #[inline]
    @call pub fn sin(x: f64) -> f64 {
        // Below π/4 the reduction is exact (`n = 0`, `y0 = x`, `y1 = 0`): the kernel alone
        // gives the same bits, sooner.
        if x.abs() < 0.785 {
            kernel_sin(x, 0.0)
        } else if in_core(x) {
            sin_core(x)
        } else {
            f64::sin(x)
        }
    }

    /// cos x, chad's own (the module's doc).
    #[inline]
    @call pub fn cos(x: f64) -> f64 {
        if x.abs() < 0.785 {
            kernel_cos(x, 0.0)
        } else if in_core(x) {
            cos_core(x)
        } else {
            f64::cos(x)
        }
    }

    /// [`sin`] where `x` is in the core range; else sets `bad` (the caller then computes
    /// [`sin`] instead).
    #[inline(always)]
    pub fn sin_lane(x: f64, bad: &mut bool) -> f64 {
        *bad |= !in_core(x);
        sin_core(x)
    }

    /// [`cos`] where `x` is in the core range; else sets `bad`.
    #[inline(always)]
    pub fn cos_lane(x: f64, bad: &mut bool) -> f64 {
        *bad |= !in_core(x);
        cos_core(x)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ulps(a: f64, b: f64) -> u64 {
        if a == b || (a.is_nan() && b.is_nan()) {
            0
        } else {
            (a.to_bits() as i64)
                .wrapping_sub(b.to_bits() as i64)
                .unsigned_abs()
        }
    }

    #[test]
    fn special_values() {
        for (x, s, c) in [(0.0, 0.0, 1.0), (-0.0, -0.0, 1.0)] {
            assert_eq!(sin(x).to_bits(), f64::to_bits(s));
            assert_eq!(cos(x), c);
        }
        for f in [sin, cos] {
            assert!(f(f64::NAN).is_nan());
        }
        assert!(sin(f64::INFINITY).is_nan() && cos(f64::NEG_INFINITY).is_nan());
    }

    #[test]
    fn within_one_ulp_of_libm() {
        let mut s = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 11) as f64 / (1u64 << 53) as f64
        };
        for _ in 0..200_000 {
            let u = next();
            for x in [
                (u - 0.5) * 8.0,
                (u - 0.5) * 2e3,
                (u - 0.5) * 1.6e6,
                (u - 0.5) * 1e-3,
            ] {
                assert!(ulps(sin(x), x.sin()) <= 1, "sin {x:e}");
                assert!(ulps(cos(x), x.cos()) <= 1, "cos {x:e}");
            }
        }
        // Near multiples of π/2, where the reduction cancels most.
        for k in 1..20_000i64 {
            let x = k as f64 * std::f64::consts::FRAC_PI_2;
            for x in [
                x,
                f64::from_bits(x.to_bits() + 1),
                f64::from_bits(x.to_bits() - 1),
            ] {
                assert!(ulps(sin(x), x.sin()) <= 1, "sin {x:e}");
                assert!(ulps(cos(x), x.cos()) <= 1, "cos {x:e}");
            }
        }
        // At the edges of the core range and of the unreduced one.
        for x in [0.78499, 0.785, -0.785, 823549.5, -823549.5, 823549.7] {
            assert!(ulps(sin(x), x.sin()) <= 1, "sin {x:e}");
            assert!(ulps(cos(x), x.cos()) <= 1, "cos {x:e}");
        }
    }

    #[test]
    fn lanes_agree_with_plain_forms_and_flag_the_rest() {
        // Below π/4 the plain forms skip the reduction: the same bits.
        let mut s = 1u64;
        for _ in 0..100_000 {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let x = ((s >> 11) as f64 / (1u64 << 53) as f64 - 0.5) * 1.57;
            assert_eq!(sin(x).to_bits(), sin_core(x).to_bits(), "sin {x:e}");
            assert_eq!(cos(x).to_bits(), cos_core(x).to_bits(), "cos {x:e}");
        }
        for x in [
            0.3, -2.5, 1e5, 823549.5, -700.0, 708.0, -0.0, 0.78499, 1e-300,
        ] {
            let mut bad = false;
            assert_eq!(sin_lane(x, &mut bad).to_bits(), sin(x).to_bits());
            assert_eq!(cos_lane(x, &mut bad).to_bits(), cos(x).to_bits());
            assert!(!bad, "{x}");
        }
        for x in [823549.7, 1e300, f64::INFINITY, f64::NAN] {
            let (mut b1, mut b2) = (false, false);
            sin_lane(x, &mut b1);
            cos_lane(x, &mut b2);
            assert!(b1 && b2, "{x}");
        }
    }

    #[test]
    fn the_source_is_the_code() {
        for name in ["fn trig_reduce", "fn sin_core", "fn sin_lane"] {
            assert!(ELEMENTARY_SRC.contains(name), "{name}");
        }
        assert!(!ELEMENTARY_SRC.contains("pub fn"));
    }
}
