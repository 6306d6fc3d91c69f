//! Hand-written Rust versions of three benchmark objectives, the baselines that chad's primal
//! speed is reported against (issue 7):
//!
//! * [`rosenbrock`]: `def rosenbrock (xs : Array Real) : Real`
//!   = Σ_{i=0}^{n-2} 100 (x_{i+1} − x_i²)² + (1 − x_i)² (`benches/programs/rosenbrock.chad`);
//! * [`mlp_loss`]: `loss w1 b1 w2 b2 xs ys` of `examples/mlp.chad` (tanh hidden layer, softmax
//!   cross-entropy, mean over the batch);
//! * [`gmm`]: `gmm alphas means icf x gamma m` of `examples/gmm.chad`, ADBench's GMM objective.
//!
//! Each takes the same arguments in the same order as the chad definition, as plain slices and
//! row-major [`Matrix`]es, and computes the same function: straightforward, allocation-free
//! inner loops, no SIMD intrinsics and no `unsafe`. The MLP and the GMM shift their logsumexps
//! by an ordinary maximum where the chad programs compare every pair (the same value).
//!
//! [`Program::decode`] reads the arguments from chad's JSON argument format (`--args-file`: a
//! JSON array with one item per parameter; arrays are JSON arrays, Real and Int are numbers) and
//! checks the shapes the objectives assume (rectangular matrices whose sizes fit together,
//! classes in range), so that [`Program::eval`] never indexes out of bounds. It accepts an
//! MLP or GMM argument list only if chad evaluates it without a runtime error; for Rosenbrock
//! it accepts any array, and the native sum over fewer than two points is 0 (chad's may be an
//! error, `build` of a negative length, depending on how the program is written).
//!
//! Plain Rust, independent of the chad library: `examples/native_baselines.rs` times these,
//! `tests/native.rs` checks them against chad's evaluator, and `tests/examples.rs` uses them as
//! the independent implementations of the example programs. Include it with
//! `#[path = "../benches/native/mod.rs"] mod native;`.

use serde_json::Value as Json;

/// A dense row-major matrix: row `r` is `data[r * cols .. (r + 1) * cols]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Matrix {
    pub rows: usize,
    pub cols: usize,
    pub data: Vec<f64>,
}

impl Matrix {
    /// The matrix with the given rows, which must all have `cols` entries.
    pub fn from_rows(cols: usize, rows: &[Vec<f64>]) -> Matrix {
        assert!(rows.iter().all(|r| r.len() == cols), "ragged matrix");
        Matrix {
            rows: rows.len(),
            cols,
            data: rows.concat(),
        }
    }

    pub fn row(&self, r: usize) -> &[f64] {
        &self.data[r * self.cols..(r + 1) * self.cols]
    }

    /// The rows in order (also for a matrix with no columns, where `chunks_exact` would panic).
    pub fn iter_rows(&self) -> impl Iterator<Item = &[f64]> {
        (0..self.rows).map(move |r| self.row(r))
    }
}

/// Σ a_i b_i over equal-length slices, in four interleaved partial sums. One running sum makes
/// every addition wait for the previous one (and forbids vectorising, which would reassociate);
/// four independent ones run the 64→128→10 MLP about four times faster. The rounding differs
/// from chad's left-to-right sum only in the last bits.
fn dot(a: &[f64], b: &[f64]) -> f64 {
    debug_assert_eq!(a.len(), b.len());
    let (ca, cb) = (a.chunks_exact(4), b.chunks_exact(4));
    let tail: f64 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    let mut acc = [0.0; 4];
    for (x, y) in ca.zip(cb) {
        for ((s, p), q) in acc.iter_mut().zip(x).zip(y) {
            *s += p * q;
        }
    }
    (acc[0] + acc[1]) + (acc[2] + acc[3]) + tail
}

/// log Σ exp xs, shifted by the maximum so that no exp overflows (−∞ for no elements, like
/// the chad programs' `logsumexp`, whose `maximum` of nothing is 0: log 0 + 0).
fn logsumexp(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        return f64::NEG_INFINITY;
    }
    let mx = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    xs.iter().map(|x| (x - mx).exp()).sum::<f64>().ln() + mx
}

// ----- the objectives -----

/// Σ_{i=0}^{n-2} 100 (x_{i+1} − x_i²)² + (1 − x_i)²; 0 for fewer than two points.
pub fn rosenbrock(xs: &[f64]) -> f64 {
    xs.windows(2)
        .map(|w| {
            let (x, y) = (w[0], w[1]);
            let a = y - x * x;
            let b = 1.0 - x;
            100.0 * a * a + b * b
        })
        .sum()
}

/// The mean softmax cross-entropy of a one-hidden-layer tanh network (`examples/mlp.chad`):
/// `w1` is H×I, `b1` H, `w2` C×H, `b2` C, `xs` B×I, `ys` B classes in `0..C`.
///
/// (1/B) Σ_b logsumexp(z_b) − z_b[ys_b], z_b = w2 tanh(w1 xs_b + b1) + b2; NaN for B = 0
/// (0/0, as in chad).
pub fn mlp_loss(
    w1: &Matrix,
    b1: &[f64],
    w2: &Matrix,
    b2: &[f64],
    xs: &Matrix,
    ys: &[usize],
) -> f64 {
    let mut hidden = vec![0.0; w1.rows];
    let mut logits = vec![0.0; w2.rows];
    let mut total = 0.0;
    for (x, &y) in xs.iter_rows().zip(ys) {
        for ((h, row), bias) in hidden.iter_mut().zip(w1.iter_rows()).zip(b1) {
            *h = (dot(row, x) + bias).tanh();
        }
        for ((z, row), bias) in logits.iter_mut().zip(w2.iter_rows()).zip(b2) {
            *z = dot(row, &hidden) + bias;
        }
        total += logsumexp(&logits) - logits[y];
    }
    total / xs.rows as f64
}

/// log Γ(x) for x a positive multiple of 1/2, exactly by Γ(1/2) = √π, Γ(1) = 1,
/// Γ(x + 1) = x Γ(x): the Wishart constant only needs these.
pub fn lgamma_half_integer(x: f64) -> f64 {
    assert!(x > 0.0 && (2.0 * x).fract() == 0.0, "lgamma at {x}");
    let (mut z, mut out) = if x.fract() == 0.0 {
        (1.0, 0.0)
    } else {
        (0.5, 0.5 * std::f64::consts::PI.ln())
    };
    while z < x {
        out += z.ln();
        z += 1.0;
    }
    out
}

/// ADBench's GMM objective (`gmm_objective` of its reference C++, `examples/gmm.chad`): the
/// log-likelihood of the N×D points `x` under K Gaussians plus a Wishart prior.
///
/// `alphas` K, `means` K×D, `icf` K×(D + D(D−1)/2) (D log-diagonal entries of the inverse
/// Cholesky factor Q, then its strictly lower triangle column by column), `x` N×D; `gamma` and
/// `m` the Wishart prior's scale and extra degrees of freedom (m ≥ −1, so that every argument of
/// log Γ is a positive multiple of 1/2). K and D must be at least 1.
pub fn gmm(alphas: &[f64], means: &Matrix, icf: &Matrix, x: &Matrix, gamma: f64, m: i64) -> f64 {
    let (k, n, d) = (alphas.len(), x.rows, means.cols);
    let pi = std::f64::consts::PI;
    let constant = -(n as f64) * d as f64 * 0.5 * (2.0 * pi).ln();

    // Per component: Σ_j icf_kj (the log-determinant of Q_k) and the diagonal exp icf_kj.
    let sum_qs: Vec<f64> = icf.iter_rows().map(|q| q[..d].iter().sum()).collect();
    let qdiags: Vec<f64> = icf
        .iter_rows()
        .flat_map(|q| q[..d].iter().map(|v| v.exp()))
        .collect();

    let mut centred = vec![0.0; d];
    let mut qx = vec![0.0; d];
    let mut main_term = vec![0.0; k];
    let mut slse = 0.0;
    for xi in x.iter_rows() {
        for (ik, term) in main_term.iter_mut().enumerate() {
            let q = icf.row(ik);
            let qdiag = &qdiags[ik * d..(ik + 1) * d];
            for ((c, a), b) in centred.iter_mut().zip(xi).zip(means.row(ik)) {
                *c = a - b;
            }
            for ((o, qd), c) in qx.iter_mut().zip(qdiag).zip(&centred) {
                *o = qd * c;
            }
            // Column i of the strictly lower triangle holds rows i+1 .. D-1.
            let mut lower = &q[d..];
            for (i, &ci) in centred.iter().enumerate() {
                let (col, rest) = lower.split_at(d - 1 - i);
                for (o, l) in qx[i + 1..].iter_mut().zip(col) {
                    *o += l * ci;
                }
                lower = rest;
            }
            *term = alphas[ik] + sum_qs[ik] - 0.5 * dot(&qx, &qx);
        }
        slse += logsumexp(&main_term);
    }

    // The Wishart prior, with its normalising constant.
    let nn = d as i64 + m + 1;
    let log_gamma_distrib = 0.25 * (d * (d - 1)) as f64 * pi.ln()
        + (1..=d)
            .map(|j| lgamma_half_integer(0.5 * nn as f64 + 0.5 * (1.0 - j as f64)))
            .sum::<f64>();
    let c = (nn * d as i64) as f64 * (gamma.ln() - 0.5 * 2f64.ln()) - log_gamma_distrib;
    let prior: f64 = icf
        .iter_rows()
        .enumerate()
        .map(|(ik, q)| {
            let qdiag = &qdiags[ik * d..(ik + 1) * d];
            let frobenius = dot(qdiag, qdiag) + dot(&q[d..], &q[d..]);
            0.5 * gamma * gamma * frobenius - m as f64 * sum_qs[ik]
        })
        .sum::<f64>()
        - k as f64 * c;

    constant + slse - n as f64 * logsumexp(alphas) + prior
}

// ----- the arguments, from chad's JSON argument format -----

/// The arguments of the MLP's `loss`, in parameter order.
#[derive(Clone, Debug)]
pub struct MlpArgs {
    pub w1: Matrix,
    pub b1: Vec<f64>,
    pub w2: Matrix,
    pub b2: Vec<f64>,
    pub xs: Matrix,
    pub ys: Vec<usize>,
}

/// The arguments of `gmm`, in parameter order.
#[derive(Clone, Debug)]
pub struct GmmArgs {
    pub alphas: Vec<f64>,
    pub means: Matrix,
    pub icf: Matrix,
    pub x: Matrix,
    pub gamma: f64,
    pub m: i64,
}

/// One of the objectives with its arguments.
#[derive(Clone, Debug)]
pub enum Program {
    Rosenbrock(Vec<f64>),
    Mlp(MlpArgs),
    Gmm(GmmArgs),
}

/// The program names [`Program::decode`] knows.
pub const PROGRAMS: &[&str] = &["rosenbrock", "mlp", "gmm"];

impl Program {
    /// The arguments of the objective `name` (one of [`PROGRAMS`]) from the JSON array `args`,
    /// or a message saying what is wrong with them.
    pub fn decode(name: &str, args: &Json) -> Result<Program, String> {
        let items = args
            .as_array()
            .ok_or("the arguments must be a JSON array, one item per parameter")?;
        let arity = |n: usize| {
            if items.len() == n {
                Ok(())
            } else {
                Err(format!(
                    "{name} takes {n} arguments, the array has {}",
                    items.len()
                ))
            }
        };
        match name {
            "rosenbrock" => {
                arity(1)?;
                Ok(Program::Rosenbrock(reals("xs", &items[0])?))
            }
            "mlp" => {
                arity(6)?;
                let w1 = matrix("w1", &items[0])?;
                let b1 = reals("b1", &items[1])?;
                let w2 = matrix("w2", &items[2])?;
                let b2 = reals("b2", &items[3])?;
                let xs = matrix("xs", &items[4])?;
                let ys = ints("ys", &items[5])?;
                let (h, c, b) = (w1.rows, w2.rows, xs.rows);
                shape("b1", b1.len(), h, "one per row of w1")?;
                shape("b2", b2.len(), c, "one per row of w2")?;
                shape("ys", ys.len(), b, "one per row of xs")?;
                if h > 0 && b > 0 {
                    shape("a row of xs", xs.cols, w1.cols, "as in the rows of w1")?;
                }
                if c > 0 {
                    shape("a row of w2", w2.cols, h, "one per row of w1")?;
                }
                let ys = ys
                    .into_iter()
                    .map(|y| {
                        usize::try_from(y)
                            .ok()
                            .filter(|&y| y < c)
                            .ok_or(format!("ys: the class {y} is not in 0..{c}"))
                    })
                    .collect::<Result<_, _>>()?;
                Ok(Program::Mlp(MlpArgs {
                    w1,
                    b1,
                    w2,
                    b2,
                    xs,
                    ys,
                }))
            }
            "gmm" => {
                arity(6)?;
                let alphas = reals("alphas", &items[0])?;
                let means = matrix("means", &items[1])?;
                let icf = matrix("icf", &items[2])?;
                let x = matrix("x", &items[3])?;
                let gamma = real("gamma", &items[4])?;
                let m = int("m", &items[5])?;
                let (k, d) = (alphas.len(), means.cols);
                if k == 0 || d == 0 {
                    return Err("gmm needs at least one component and one dimension".into());
                }
                shape("means", means.rows, k, "one row per alpha")?;
                shape("icf", icf.rows, k, "one row per alpha")?;
                let why = format!("D + D(D-1)/2 for D = {d}");
                shape("a row of icf", icf.cols, d + d * (d - 1) / 2, &why)?;
                if x.rows > 0 {
                    shape("a row of x", x.cols, d, "as in the rows of means")?;
                }
                if m < -1 {
                    return Err(format!("m = {m}: the Wishart constant needs m ≥ -1"));
                }
                Ok(Program::Gmm(GmmArgs {
                    alphas,
                    means,
                    icf,
                    x,
                    gamma,
                    m,
                }))
            }
            _ => Err(format!(
                "unknown program `{name}` (expected one of {})",
                PROGRAMS.join(", ")
            )),
        }
    }

    /// The objective at the arguments.
    pub fn eval(&self) -> f64 {
        match self {
            Program::Rosenbrock(xs) => rosenbrock(xs),
            Program::Mlp(a) => mlp_loss(&a.w1, &a.b1, &a.w2, &a.b2, &a.xs, &a.ys),
            Program::Gmm(a) => gmm(&a.alphas, &a.means, &a.icf, &a.x, a.gamma, a.m),
        }
    }
}

/// `got == want`, or an error saying that `what` has `got` entries where `want` are expected.
fn shape(what: &str, got: usize, want: usize, why: &str) -> Result<(), String> {
    if got == want {
        Ok(())
    } else {
        Err(format!("{what} has {got} entries, {want} expected ({why})"))
    }
}

/// A Real: a JSON number, or one of the strings chad writes for non-finite reals.
fn real(what: &str, j: &Json) -> Result<f64, String> {
    match j {
        Json::Number(n) => n.as_f64(),
        Json::String(s) => match s.as_str() {
            "NaN" => Some(f64::NAN),
            "Infinity" => Some(f64::INFINITY),
            "-Infinity" => Some(f64::NEG_INFINITY),
            _ => None,
        },
        _ => None,
    }
    .ok_or_else(|| format!("{what}: expected a Real, found `{j}`"))
}

/// An Int: a JSON integer.
fn int(what: &str, j: &Json) -> Result<i64, String> {
    j.as_i64()
        .ok_or_else(|| format!("{what}: expected an Int, found `{j}`"))
}

fn array<'a>(what: &str, j: &'a Json) -> Result<&'a [Json], String> {
    j.as_array()
        .map(Vec::as_slice)
        .ok_or_else(|| format!("{what}: expected an array, found `{j}`"))
}

fn reals(what: &str, j: &Json) -> Result<Vec<f64>, String> {
    array(what, j)?.iter().map(|x| real(what, x)).collect()
}

fn ints(what: &str, j: &Json) -> Result<Vec<i64>, String> {
    array(what, j)?.iter().map(|x| int(what, x)).collect()
}

/// An `Array (Array Real)` whose rows all have the same length.
fn matrix(what: &str, j: &Json) -> Result<Matrix, String> {
    let rows = array(what, j)?
        .iter()
        .map(|r| reals(what, r))
        .collect::<Result<Vec<_>, _>>()?;
    let cols = rows.first().map_or(0, Vec::len);
    if let Some(i) = rows.iter().position(|r| r.len() != cols) {
        return Err(format!(
            "{what}: row {i} has {} entries, row 0 has {cols}",
            rows[i].len()
        ));
    }
    Ok(Matrix::from_rows(cols, &rows))
}
