//! chad's own `sin`, `cos` and `exp`: one definition, run by every evaluator and emitted as
//! source into native modules ([`ELEMENTARY_SRC`]), so that every backend computes the same
//! bits, and written so that a loop of them runs in vector lanes.
//!
//! libm's functions are calls the Rust compiler cannot put in vector lanes: a `sum` or `map`
//! of `sin` runs one element at a time. These are straight-line arithmetic on the arguments
//! they handle themselves (the "core" range: `|x| < 2¹⁹ π/2` for `sin` and `cos`, `|x| < 512`
//! for `exp`) and take another path outside it (libm's `sin` and `cos` for huge, infinite and
//! NaN arguments; `exp`'s scaling in two steps near overflow and underflow). A loop whose
//! every argument is in the core range can therefore run the `_lane` forms, which only record
//! in a flag that an argument was outside; native code runs such loops in vector lanes and
//! computes a chunk again with the plain forms where the flag is set (note 07 §4,
//! "elementary functions in lanes"), so the result is the same bit for bit.
//!
//! `sin` and `cos`: within 1 unit in the last place of glibc's on the tests' samples (below),
//! which is within 1 of the correctly rounded value; they differ from glibc's in about 1 case
//! in 10. The method is fdlibm's (Sun Microsystems, 1993; also musl's): reduce `x` by the
//! nearest multiple `n π/2` with π/2 in three parts (exact for `|n| < 2²⁰`), keep the reduced
//! argument as a sum `y0 + y1`, and evaluate `__kernel_sin`'s and `__kernel_cos`'s polynomials
//! on it, choosing and signing by `n mod 4` with bit operations rather than branches. Below
//! π/4 the plain forms skip the reduction, which is exact there (the same bits, sooner).
//!
//! `exp`: the method of glibc's own `exp` since 2.28 (Szabolcs Nagy's, from Arm's
//! optimized-routines, also musl's): `exp x = 2^(k/128) e^r` with `k` the nearest integer to
//! `x · 128/ln 2`, `2^(k/128)` from a table of 128 doubles with their tails (computed here
//! from 60-digit values; they are glibc's) and `e^r` a degree-5 polynomial. Within 1 unit in
//! the last place of glibc's, from which it differs in about 1 case in 2000: glibc's build for
//! this machine fuses multiplies and adds, this one does not. It is no slower than glibc's in
//! scalar code (no call, no `errno` wrapper) and runs in lanes (the table lookup a gather). An
//! earlier own `exp` (fdlibm's rational form) was slower than glibc's in scalar code, which
//! cost GMM's primal 7%.
//!
//! `tanh`: `1 - 2 / (exp(2|x|) + 1)` (with this `exp`'s core) or a rational approximation
//! near 0, as before with libm's `exp`; its lane form computes both and chooses, so it never
//! flags. `sigmoid` is `1 / (1 + e)` or `e / (1 + e)` with `e` this `exp` of `-|x|`, in lanes
//! where `|x| < 512`. `softplus` still calls libm's `exp` (`prim.rs`).
//!
//! No fused multiply-add is used anywhere: the evaluator (compiled for any x86-64) and a
//! native module (compiled for its CPU) must round every operation alike.

// The constants are spelled as in fdlibm (more digits than a double holds, the same values;
// `2/π` is the double nearest it, as `FRAC_2_PI`, but written out like the others).
#![allow(clippy::excessive_precision, clippy::approx_constant)]

/// Whether builtin `name` is one of these functions, with a `_lane` form native code calls
/// in vector lanes (`ir::rust`) and a source in [`ELEMENTARY_SRC`].
pub fn has_lane_form(name: &str) -> bool {
    matches!(name, "sin" | "cos" | "exp" | "tanh" | "sigmoid")
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

    /// Entry `i` of `exp`'s table: for `k < 128`, entry `2k` is the bits of the tail `t` with
    /// `2^(k/128) = h (1 + t)`, `h` the double nearest `2^(k/128)`, and entry `2k + 1` is
    /// `h`'s bits less `k << 45` (added back with `exp_core`'s `ki << 45`, which also carries
    /// the integer part of `k/128` into the exponent).
    #[inline(always)]
    fn exp_table(i: usize) -> u64 {
        const T: [u64; 256] = [
            0x0000000000000000, 0x3ff0000000000000, 0x3c9b3b4f1a88bf6e, 0x3feff63da9fb3335,
            0xbc7160139cd8dc5d, 0x3fefec9a3e778061, 0xbc905e7a108766d1, 0x3fefe315e86e7f85,
            0x3c8cd2523567f613, 0x3fefd9b0d3158574, 0xbc8bce8023f98efa, 0x3fefd06b29ddf6de,
            0x3c60f74e61e6c861, 0x3fefc74518759bc8, 0x3c90a3e45b33d399, 0x3fefbe3ecac6f383,
            0x3c979aa65d837b6d, 0x3fefb5586cf9890f, 0x3c8eb51a92fdeffc, 0x3fefac922b7247f7,
            0x3c3ebe3d702f9cd1, 0x3fefa3ec32d3d1a2, 0xbc6a033489906e0b, 0x3fef9b66affed31b,
            0xbc9556522a2fbd0e, 0x3fef9301d0125b51, 0xbc5080ef8c4eea55, 0x3fef8abdc06c31cc,
            0xbc91c923b9d5f416, 0x3fef829aaea92de0, 0x3c80d3e3e95c55af, 0x3fef7a98c8a58e51,
            0xbc801b15eaa59348, 0x3fef72b83c7d517b, 0xbc8f1ff055de323d, 0x3fef6af9388c8dea,
            0x3c8b898c3f1353bf, 0x3fef635beb6fcb75, 0xbc96d99c7611eb26, 0x3fef5be084045cd4,
            0x3c9aecf73e3a2f60, 0x3fef54873168b9aa, 0xbc8fe782cb86389d, 0x3fef4d5022fcd91d,
            0x3c8a6f4144a6c38d, 0x3fef463b88628cd6, 0x3c807a05b0e4047d, 0x3fef3f49917ddc96,
            0x3c968efde3a8a894, 0x3fef387a6e756238, 0x3c875e18f274487d, 0x3fef31ce4fb2a63f,
            0x3c80472b981fe7f2, 0x3fef2b4565e27cdd, 0xbc96b87b3f71085e, 0x3fef24dfe1f56381,
            0x3c82f7e16d09ab31, 0x3fef1e9df51fdee1, 0xbc3d219b1a6fbffa, 0x3fef187fd0dad990,
            0x3c8b3782720c0ab4, 0x3fef1285a6e4030b, 0x3c6e149289cecb8f, 0x3fef0cafa93e2f56,
            0x3c834d754db0abb6, 0x3fef06fe0a31b715, 0x3c864201e2ac744c, 0x3fef0170fc4cd831,
            0x3c8fdd395dd3f84a, 0x3feefc08b26416ff, 0xbc86a3803b8e5b04, 0x3feef6c55f929ff1,
            0xbc924aedcc4b5068, 0x3feef1a7373aa9cb, 0xbc9907f81b512d8e, 0x3feeecae6d05d866,
            0xbc71d1e83e9436d2, 0x3feee7db34e59ff7, 0xbc991919b3ce1b15, 0x3feee32dc313a8e5,
            0x3c859f48a72a4c6d, 0x3feedea64c123422, 0xbc9312607a28698a, 0x3feeda4504ac801c,
            0xbc58a78f4817895b, 0x3feed60a21f72e2a, 0xbc7c2c9b67499a1b, 0x3feed1f5d950a897,
            0x3c4363ed60c2ac11, 0x3feece086061892d, 0x3c9666093b0664ef, 0x3feeca41ed1d0057,
            0x3c6ecce1daa10379, 0x3feec6a2b5c13cd0, 0x3c93ff8e3f0f1230, 0x3feec32af0d7d3de,
            0x3c7690cebb7aafb0, 0x3feebfdad5362a27, 0x3c931dbdeb54e077, 0x3feebcb299fddd0d,
            0xbc8f94340071a38e, 0x3feeb9b2769d2ca7, 0xbc87deccdc93a349, 0x3feeb6daa2cf6642,
            0xbc78dec6bd0f385f, 0x3feeb42b569d4f82, 0xbc861246ec7b5cf6, 0x3feeb1a4ca5d920f,
            0x3c93350518fdd78e, 0x3feeaf4736b527da, 0x3c7b98b72f8a9b05, 0x3feead12d497c7fd,
            0x3c9063e1e21c5409, 0x3feeab07dd485429, 0x3c34c7855019c6ea, 0x3feea9268a5946b7,
            0x3c9432e62b64c035, 0x3feea76f15ad2148, 0xbc8ce44a6199769f, 0x3feea5e1b976dc09,
            0xbc8c33c53bef4da8, 0x3feea47eb03a5585, 0xbc845378892be9ae, 0x3feea34634ccc320,
            0xbc93cedd78565858, 0x3feea23882552225, 0x3c5710aa807e1964, 0x3feea155d44ca973,
            0xbc93b3efbf5e2228, 0x3feea09e667f3bcd, 0xbc6a12ad8734b982, 0x3feea012750bdabf,
            0xbc6367efb86da9ee, 0x3fee9fb23c651a2f, 0xbc80dc3d54e08851, 0x3fee9f7df9519484,
            0xbc781f647e5a3ecf, 0x3fee9f75e8ec5f74, 0xbc86ee4ac08b7db0, 0x3fee9f9a48a58174,
            0xbc8619321e55e68a, 0x3fee9feb564267c9, 0x3c909ccb5e09d4d3, 0x3feea0694fde5d3f,
            0xbc7b32dcb94da51d, 0x3feea11473eb0187, 0x3c94ecfd5467c06b, 0x3feea1ed0130c132,
            0x3c65ebe1abd66c55, 0x3feea2f336cf4e62, 0xbc88a1c52fb3cf42, 0x3feea427543e1a12,
            0xbc9369b6f13b3734, 0x3feea589994cce13, 0xbc805e843a19ff1e, 0x3feea71a4623c7ad,
            0xbc94d450d872576e, 0x3feea8d99b4492ed, 0x3c90ad675b0e8a00, 0x3feeaac7d98a6699,
            0x3c8db72fc1f0eab4, 0x3feeace5422aa0db, 0xbc65b6609cc5e7ff, 0x3feeaf3216b5448c,
            0x3c7bf68359f35f44, 0x3feeb1ae99157736, 0xbc93091fa71e3d83, 0x3feeb45b0b91ffc6,
            0xbc5da9b88b6c1e29, 0x3feeb737b0cdc5e5, 0xbc6c23f97c90b959, 0x3feeba44cbc8520f,
            0xbc92434322f4f9aa, 0x3feebd829fde4e50, 0xbc85ca6cd7668e4b, 0x3feec0f170ca07ba,
            0x3c71affc2b91ce27, 0x3feec49182a3f090, 0x3c6dd235e10a73bb, 0x3feec86319e32323,
            0xbc87c50422622263, 0x3feecc667b5de565, 0x3c8b1c86e3e231d5, 0x3feed09bec4a2d33,
            0xbc91bbd1d3bcbb15, 0x3feed503b23e255d, 0x3c90cc319cee31d2, 0x3feed99e1330b358,
            0x3c8469846e735ab3, 0x3feede6b5579fdbf, 0xbc82dfcd978e9db4, 0x3feee36bbfd3f37a,
            0x3c8c1a7792cb3387, 0x3feee89f995ad3ad, 0xbc907b8f4ad1d9fa, 0x3feeee07298db666,
            0xbc55c3d956dcaeba, 0x3feef3a2b84f15fb, 0xbc90a40e3da6f640, 0x3feef9728de5593a,
            0xbc68d6f438ad9334, 0x3feeff76f2fb5e47, 0xbc91eee26b588a35, 0x3fef05b030a1064a,
            0x3c74ffd70a5fddcd, 0x3fef0c1e904bc1d2, 0xbc91bdfbfa9298ac, 0x3fef12c25bd71e09,
            0x3c736eae30af0cb3, 0x3fef199bdd85529c, 0x3c8ee3325c9ffd94, 0x3fef20ab5fffd07a,
            0x3c84e08fd10959ac, 0x3fef27f12e57d14b, 0x3c63cdaf384e1a67, 0x3fef2f6d9406e7b5,
            0x3c676b2c6c921968, 0x3fef3720dcef9069, 0xbc808a1883ccb5d2, 0x3fef3f0b555dc3fa,
            0xbc8fad5d3ffffa6f, 0x3fef472d4a07897c, 0xbc900dae3875a949, 0x3fef4f87080d89f2,
            0x3c74a385a63d07a7, 0x3fef5818dcfba487, 0xbc82919e2040220f, 0x3fef60e316c98398,
            0x3c8e5a50d5c192ac, 0x3fef69e603db3285, 0x3c843a59ac016b4b, 0x3fef7321f301b460,
            0xbc82d52107b43e1f, 0x3fef7c97337b9b5f, 0xbc892ab93b470dc9, 0x3fef864614f5a129,
            0x3c74b604603a88d3, 0x3fef902ee78b3ff6, 0x3c83c5ec519d7271, 0x3fef9a51fbc74c83,
            0xbc8ff7128fd391f0, 0x3fefa4afa2a490da, 0xbc8dae98e223747d, 0x3fefaf482d8e67f1,
            0x3c8ec3bc41aa2008, 0x3fefba1bee615a27, 0x3c842b94c3a9eb32, 0x3fefc52b376bba97,
            0x3c8a64a931d185ee, 0x3fefd0765b6e4540, 0xbc8e37bae43be3ed, 0x3fefdbfdad9cbe14,
            0x3c77893b4d91cd9d, 0x3fefe7c1819e90d8, 0x3c5305c14160cc89, 0x3feff3c22b8f71f1,
        ];
        T[i]
    }

    /// For `|x| < 1024`: `exp x = s (1 + m)` as `(m, s's bits, k)`, `k` the nearest integer
    /// to `x · 128/ln 2` (in the low bits of `ki`), `s = 2^(k/128)`, `m = t + p(r)`, `r = x -
    /// k ln 2/128` (ln 2/128 in two parts) and `p` the degree-5 polynomial `e^r - 1`.
    #[inline(always)]
    fn exp_core(x: f64) -> (f64, u64, u64) {
        let kd = x * 184.6649652337873 + 6755399441055744.0;
        let ki = kd.to_bits();
        let kd = kd - 6755399441055744.0;
        let r = x + kd * -0.005415212348111709 + kd * -1.2864023111638346e-14;
        let i = (2 * (ki % 128)) as usize;
        let tail = f64::from_bits(exp_table(i));
        let sbits = exp_table(i + 1).wrapping_add(ki << 45);
        let r2 = r * r;
        let m = tail
            + r
            + r2 * (0.49999999999996786 + r * 0.16666666666665886)
            + r2 * r2 * (0.0416666808410674 + r * 0.008333335853059549);
        (m, sbits, ki)
    }

    /// Whether `exp` computes `x` by [`exp_core`] alone: `|x| < 512`.
    #[inline(always)]
    fn exp_in_core(x: f64) -> bool {
        x.abs() < 512.0
    }

    /// exp x, chad's own (the module's doc).
    #[inline]
    @call pub fn exp(x: f64) -> f64 {
        if exp_in_core(x) {
            let (m, sbits, _) = exp_core(x);
            let s = f64::from_bits(sbits);
            s + s * m
        } else {
            exp_edge(x)
        }
    }

    /// exp x for `|x| >= 512`, infinite and NaN `x`: the scale `2^(k/128)` may overflow or
    /// fall below the normal range, so it is applied in two steps.
    #[inline(never)]
    @call fn exp_edge(x: f64) -> f64 {
        if x.is_nan() {
            return x;
        }
        if x.abs() >= 1024.0 {
            return if x > 0.0 { f64::INFINITY } else { 0.0 };
        }
        let (m, sbits, ki) = exp_core(x);
        if ki & 0x8000_0000 == 0 {
            // k > 0: scale by 2^1009 after.
            let s = f64::from_bits(sbits.wrapping_sub(1009u64 << 52));
            return f64::from_bits(0x7f00_0000_0000_0000) * (s + s * m);
        }
        // k < 0: scale by 2^-1022 after, rounding first to the precision the result keeps
        // below the normal range (one rounding, not two).
        let s = f64::from_bits(sbits.wrapping_add(1022u64 << 52));
        let mut y = s + s * m;
        if y < 1.0 {
            let lo = s - y + s * m;
            let hi = 1.0 + y;
            let lo = 1.0 - hi + y + lo;
            y = (hi + lo) - 1.0;
            if y == 0.0 {
                y = 0.0;
            }
        }
        f64::from_bits(0x0010_0000_0000_0000) * y
    }

    /// [`exp`] where `|x| < 512`; else sets `bad`.
    #[inline(always)]
    pub fn exp_lane(x: f64, bad: &mut bool) -> f64 {
        *bad |= !exp_in_core(x);
        let (m, sbits, _) = exp_core(x);
        let s = f64::from_bits(sbits);
        s + s * m
    }

    /// `tanh` for `0.625 <= z <= 22` (`z = |x|`, the sign applied by the caller):
    /// `1 - 2 / (exp(2z) + 1)`, with [`exp`]'s core (`2z <= 44`); no cancellation, the
    /// result is at least 0.55.
    #[inline(always)]
    fn tanh_big(z: f64) -> f64 {
        let (m, sbits, _) = exp_core(2.0 * z);
        let s = f64::from_bits(sbits);
        1.0 - 2.0 / ((s + s * m) + 1.0)
    }

    /// `tanh` for `|x| < 0.625`, `x ≠ 0`: Cephes' rational approximation
    /// `x + x³ P(x²) / Q(x²)` (Moshier, also Go's `math.Tanh`; relative error below 2.5e-16).
    #[inline(always)]
    fn tanh_small(x: f64) -> f64 {
        let s = x * x;
        let p = (-0.9643991794250523 * s - 99.28772310019185) * s - 1614.6876844170845;
        let q = ((s + 112.81167849163293) * s + 2235.4883906010045) * s + 4844.063053251255;
        x + x * s * (p / q)
    }

    /// The hyperbolic tangent, chad's own: `tanh_big` with the sign of `x` for
    /// `|x| >= 0.625`, `±1` from `|x| > 22` (`1 - 2e-44/..` rounds to 1), `tanh_small`
    /// below; `tanh ±0 = ±0`, `tanh NaN = NaN`. Within 3 units in the last place of the
    /// correctly rounded value (`tests/language.rs` checks 60-digit values). `f64::tanh`
    /// computes `expm1` and takes more than twice as long; libm's `exp` (which this used
    /// before) cannot run in vector lanes.
    #[inline]
    @call pub fn tanh(x: f64) -> f64 {
        let z = x.abs();
        if z >= 0.625 {
            if z > 22.0 {
                return 1.0f64.copysign(x);
            }
            tanh_big(z).copysign(x)
        } else if x == 0.0 {
            x
        } else {
            tanh_small(x)
        }
    }

    /// The logistic function `1 / (1 + exp(-x))`, chad's own: with `e = exp(-|x|)` (this
    /// module's [`exp`]), `1 / (1 + e)` for `x >= 0` and `e / (1 + e)` below, so nothing
    /// overflows (the formula chad used before with libm's `exp`); `sigmoid NaN = NaN`.
    #[inline]
    @call pub fn sigmoid(x: f64) -> f64 {
        let e = exp(-x.abs());
        if x >= 0.0 { 1.0 / (1.0 + e) } else { e / (1.0 + e) }
    }

    /// [`sigmoid`] where `|x| < 512` ([`exp_lane`]'s range); else sets `bad`.
    #[inline(always)]
    pub fn sigmoid_lane(x: f64, bad: &mut bool) -> f64 {
        let e = exp_lane(-x.abs(), bad);
        if x >= 0.0 { 1.0 / (1.0 + e) } else { e / (1.0 + e) }
    }

    /// [`tanh`] in vector lanes: both halves computed and one chosen, without branches (the
    /// large half's argument clamped to 22, where it is not chosen anyway); every argument is
    /// in its range, so `bad` is never set. The same bits as [`tanh`].
    #[inline(always)]
    pub fn tanh_lane(x: f64, _bad: &mut bool) -> f64 {
        let z = x.abs();
        let big = tanh_big(z.min(22.0));
        let big = if z > 22.0 { 1.0 } else { big };
        let small = tanh_small(x);
        let small = if x == 0.0 { x } else { small };
        if z >= 0.625 { big.copysign(x) } else { small }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Uniform reals in `[0, 1)` from a xorshift generator seeded with `s`.
    fn uniform(mut s: u64) -> impl FnMut() -> f64 {
        move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 11) as f64 / (1u64 << 53) as f64
        }
    }

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
        let mut next = uniform(0x2545_f491_4f6c_dd1du64);
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
    fn exp_within_one_ulp_of_libm_and_its_special_values() {
        let mut next = uniform(0x9e37_79b9_7f4a_7c15u64);
        let mut differ = 0;
        for _ in 0..100_000 {
            let u = 2.0 * next() - 1.0;
            for scale in [1e-300, 1e-17, 1e-5, 1.0, 30.0, 500.0, 709.7, 745.0, 1100.0] {
                let x = u * scale;
                assert!(ulps(exp(x), x.exp()) <= 1, "exp {x:e}");
                differ += usize::from(exp(x).to_bits() != x.exp().to_bits());
            }
        }
        // Mostly the same bits (about 1 in 2000 differ).
        assert!(differ < 2_000, "{differ} of 900000 differ");
        for x in [
            0.0,
            -0.0,
            1.0,
            -1.0,
            511.9,
            512.0,
            -512.0,
            709.78,
            709.79,
            -708.3,
            -708.4,
            -720.0,
            -744.4,
            -745.13,
            -745.14,
            1023.9,
            -1023.9,
            1024.0,
            -1024.0,
            1e300,
            -1e300,
            1e-320,
            -1e-320,
            f64::MIN_POSITIVE,
        ] {
            assert_eq!(exp(x).to_bits(), x.exp().to_bits(), "exp {x:e}");
        }
        assert_eq!(exp(f64::INFINITY), f64::INFINITY);
        assert_eq!(exp(f64::NEG_INFINITY).to_bits(), 0.0f64.to_bits());
        assert!(exp(f64::NAN).is_nan());
    }

    #[test]
    fn exp_lanes_agree_with_the_plain_form_and_flag_the_rest() {
        for x in [0.3, -2.5, -0.0, 1e-300, -511.9, 511.9, 300.0, -400.0] {
            let mut bad = false;
            assert_eq!(exp_lane(x, &mut bad).to_bits(), exp(x).to_bits(), "{x}");
            assert!(!bad, "{x}");
        }
        for x in [512.0, -512.0, 709.8, -800.0, f64::INFINITY, f64::NAN] {
            let mut bad = false;
            exp_lane(x, &mut bad);
            assert!(bad, "{x}");
        }
    }

    #[test]
    fn tanh_is_near_libm_and_its_lane_form_is_the_same_bits() {
        let mut next = uniform(0x9e37_79b9_7f4a_7c15u64);
        let mut differ = 0;
        for _ in 0..200_000 {
            let u = next();
            for x in [
                (u - 0.5) * 2.0,
                (u - 0.5) * 50.0,
                (u - 0.5) * 1e-6,
                (u - 0.5) * 1.3,
            ] {
                let t = tanh(x);
                assert!(
                    ulps(t, x.tanh()) <= 2,
                    "tanh {x:e}: {t:e} against {:e}",
                    x.tanh()
                );
                differ += usize::from(t != x.tanh());
                let mut bad = false;
                assert_eq!(tanh_lane(x, &mut bad).to_bits(), t.to_bits(), "{x:e}");
                assert!(!bad);
            }
        }
        assert!(
            differ > 0,
            "the same bits as libm's everywhere: is this libm's tanh?"
        );
        // Edges: the branch points, ±0, ±1 beyond 22, infinities, NaN, subnormals.
        let edges = [
            0.0,
            -0.0,
            0.625,
            -0.625,
            0.624_999_999_999_999_9,
            22.0,
            -22.0,
            22.000_000_000_000_004,
            1e3,
            -1e308,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
            5e-324,
            -2.2e-308,
        ];
        for x in edges {
            let mut bad = false;
            let (t, l) = (tanh(x), tanh_lane(x, &mut bad));
            assert!(!bad);
            assert_eq!(t.to_bits(), l.to_bits(), "{x:e}");
            assert!(ulps(t, x.tanh()) <= 1, "tanh {x:e}: {t:e}");
        }
        assert_eq!(tanh(-0.0).to_bits(), (-0.0f64).to_bits());
        assert_eq!(tanh(f64::NEG_INFINITY), -1.0);
    }

    #[test]
    fn sigmoid_keeps_its_formula_and_its_lane_form_is_the_same_bits() {
        // The formula chad had with libm's `exp`: the same up to `exp`'s last bit.
        let libm = |x: f64| {
            if x >= 0.0 {
                1.0 / (1.0 + (-x).exp())
            } else {
                let e = x.exp();
                e / (1.0 + e)
            }
        };
        let mut next = uniform(0x2545_f491_4f6c_dd1d);
        for _ in 0..200_000 {
            let u = next();
            for x in [(u - 0.5) * 4.0, (u - 0.5) * 80.0, (u - 0.5) * 1000.0] {
                let s = sigmoid(x);
                // (`exp`'s last bit can move `e / (1 + e)` by two.)
                assert!(
                    ulps(s, libm(x)) <= 2,
                    "sigmoid {x:e}: {s:e} against {:e}",
                    libm(x)
                );
                let mut bad = false;
                let l = sigmoid_lane(x, &mut bad);
                if x.abs() < 512.0 {
                    assert!(!bad, "{x:e}");
                    assert_eq!(l.to_bits(), s.to_bits(), "{x:e}");
                } else {
                    assert!(bad, "{x:e}");
                }
            }
        }
        for x in [0.0, -0.0, 1e-300, 36.0, -36.0, 709.0, -745.0, -800.0, 800.0] {
            assert_eq!(sigmoid(x).to_bits(), libm(x).to_bits(), "{x:e}");
        }
        for x in [f64::INFINITY, f64::NEG_INFINITY] {
            assert_eq!(sigmoid(x), libm(x));
        }
        assert!(sigmoid(f64::NAN).is_nan());
        let mut bad = false;
        sigmoid_lane(f64::NAN, &mut bad);
        assert!(bad);
    }

    #[test]
    fn the_source_is_the_code() {
        for name in [
            "fn trig_reduce",
            "fn sin_core",
            "fn sin_lane",
            "fn exp_core",
            "fn exp_lane",
            "fn tanh_lane",
            "fn sigmoid_lane",
        ] {
            assert!(ELEMENTARY_SRC.contains(name), "{name}");
        }
        assert!(!ELEMENTARY_SRC.contains("pub fn"));
    }
}
