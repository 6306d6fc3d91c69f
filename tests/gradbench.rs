//! `chad gradbench`, the GradBench tool: the protocol as a subprocess on a scripted message
//! sequence, and the bundled programs' outputs (lse, llsq, gmm) against independent Rust
//! computations (direct formulas, and central finite differences of them for the gradients);
//! kmeans, particle and saddle (derivatives inside the programs) against transcriptions of
//! GradBench's references, their central (second) differences and the evals' expected values.
//! None of this needs GradBench itself.

use chad::internals::gradbench::{Backend, Tool};
use serde_json::{Value as Json, json};
use std::io::Write;
use std::process::{Command, Stdio};

/// Runs `chad gradbench` on these messages (one per line) and returns its answers.
fn converse(messages: &[Json]) -> Vec<Json> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_chad"))
        .arg("gradbench")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("chad runs");
    {
        let mut stdin = child.stdin.take().expect("stdin");
        for m in messages {
            writeln!(stdin, "{m}").expect("write a message");
        }
        // A line that is not JSON is answered, not fatal.
        writeln!(stdin, "this is not json").expect("write");
    }
    let out = child.wait_with_output().expect("chad finishes");
    assert!(
        out.status.success(),
        "chad gradbench failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .expect("utf-8")
        .lines()
        .map(|l| serde_json::from_str(l).expect("each answer is JSON"))
        .collect()
}

fn evaluate(id: u64, module: &str, function: &str, input: Json) -> Json {
    json!({"id": id, "kind": "evaluate", "module": module, "function": function, "input": input})
}

fn evaluate_times(answer: &Json) -> usize {
    answer["timings"]
        .as_array()
        .expect("timings")
        .iter()
        .inspect(|t| {
            assert_eq!(t["name"], "evaluate");
            assert!(t["nanoseconds"].is_u64());
        })
        .count()
}

#[test]
fn protocol_session_as_a_subprocess() {
    let answers = converse(&[
        json!({"id": 0, "kind": "start", "eval": "hello"}),
        json!({"id": 1, "kind": "define", "module": "hello"}),
        evaluate(2, "hello", "square", json!(3.0)),
        evaluate(3, "hello", "double", json!(3.0)),
        evaluate(4, "hello", "square", json!(-1.5)),
        evaluate(5, "hello", "double", json!(0.25)),
        json!({"id": 6, "kind": "define", "module": "no-such-module"}),
        evaluate(7, "no-such-module", "f", json!(1.0)),
        evaluate(8, "hello", "cube", json!(1.0)),
        evaluate(9, "hello", "square", json!("three")),
        json!({"id": 10, "kind": "analysis", "of": 2, "valid": true}),
        json!({"id": 11, "kind": "define", "module": "lse"}),
        evaluate(
            12,
            "lse",
            "primal",
            json!({"x": [0.0, 0.0], "min_runs": 3, "min_seconds": 0}),
        ),
        evaluate(13, "lse", "primal", json!({"y": [1.0]})),
        json!({"id": 14, "kind": "define", "module": "gmm"}),
        evaluate(
            15,
            "gmm",
            "objective",
            json!({"alpha": [], "mu": [], "q": [], "l": [], "x": [], "gamma": 1.0, "m": 0,
                   "min_runs": 1, "min_seconds": 0}),
        ),
    ]);
    assert_eq!(answers.len(), 17, "one answer per message: {answers:#?}");
    for (i, a) in answers.iter().take(16).enumerate() {
        assert_eq!(a["id"], json!(i), "answers in order with their ids: {a}");
    }
    assert_eq!(answers[0]["tool"], "chad");
    assert_eq!(answers[1]["success"], true);
    let ok = |a: &Json, output: Json| {
        assert_eq!(a["success"], true, "{a}");
        assert_eq!(a["output"], output, "{a}");
        assert_eq!(evaluate_times(a), 1, "hello runs once: {a}");
    };
    ok(&answers[2], json!(9.0));
    ok(&answers[3], json!(6.0));
    ok(&answers[4], json!(2.25));
    ok(&answers[5], json!(0.5));
    let failed = |a: &Json, words: &str| {
        assert_eq!(a["success"], false, "{a}");
        let e = a["error"].as_str().expect("an error message");
        assert!(e.contains(words), "`{e}` should mention `{words}`");
    };
    failed(
        &answers[6],
        "does not implement the GradBench module `no-such-module`",
    );
    failed(&answers[7], "has not been defined");
    failed(&answers[8], "no function `cube`");
    failed(&answers[9], "expected a JSON value of type Real");
    assert_eq!(answers[10], json!({"id": 10}));
    assert_eq!(answers[11]["success"], true);
    assert_eq!(answers[12]["success"], true);
    let lse2 = answers[12]["output"].as_f64().expect("a number");
    assert!((lse2 - 2f64.ln()).abs() < 1e-15, "{lse2}");
    assert_eq!(evaluate_times(&answers[12]), 3, "min_runs is honoured");
    failed(&answers[13], "no field `x`");
    assert_eq!(answers[14]["success"], true);
    // Empty arrays: a runtime error of the program, reported, not a crash.
    assert_eq!(answers[15]["success"], false, "{}", answers[15]);
    failed(&answers[16], "not JSON");
}

/// Defines `module` in-process and evaluates `function` once at `input`.
fn run(module: &str, function: &str, mut input: Json) -> Json {
    let mut tool = Tool::new(Backend::Engine);
    let d = tool.respond(&json!({"id": 0, "kind": "define", "module": module}).to_string());
    assert_eq!(d["success"], true, "{d}");
    input["min_runs"] = json!(1);
    input["min_seconds"] = json!(0);
    let a = tool.respond(&evaluate(1, module, function, input).to_string());
    assert_eq!(a["success"], true, "{a}");
    a["output"].clone()
}

/// A tool with `module` defined, evaluating functions once at given inputs.
fn session(module: &str) -> impl FnMut(&str, Json) -> Json {
    session_on(module, Backend::Engine)
}

fn session_on(module: &str, backend: Backend) -> impl FnMut(&str, Json) -> Json {
    let mut tool = Tool::new(backend);
    let d = tool.respond(&json!({"id": 0, "kind": "define", "module": module}).to_string());
    assert_eq!(d["success"], true, "{d}");
    let module = module.to_string();
    move |function, mut input| {
        input["min_runs"] = json!(1);
        input["min_seconds"] = json!(0);
        let a = tool.respond(&evaluate(1, &module, function, input).to_string());
        assert_eq!(a["success"], true, "{a}");
        a["output"].clone()
    }
}

fn reals(j: &Json) -> Vec<f64> {
    j.as_array()
        .expect("an array")
        .iter()
        .map(|v| v.as_f64().expect("a number"))
        .collect()
}

fn matrix(j: &Json) -> Vec<Vec<f64>> {
    j.as_array().expect("an array").iter().map(reals).collect()
}

fn close(a: f64, e: f64, tol: f64, what: &str) {
    assert!(
        (a - e).abs() <= tol * (1.0 + a.abs() + e.abs()),
        "{what}: chad {a}, expected {e}"
    );
}

/// Deterministic pseudo-random numbers in [-1, 1).
fn randoms(n: usize, seed: u64) -> Vec<f64> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
        })
        .collect()
}

/// The gradient of `f` at `x` by central differences.
fn fd(f: impl Fn(&[f64]) -> f64, x: &[f64]) -> Vec<f64> {
    let h = 1e-6;
    (0..x.len())
        .map(|i| {
            let mut a = x.to_vec();
            let mut b = x.to_vec();
            a[i] += h;
            b[i] -= h;
            (f(&a) - f(&b)) / (2.0 * h)
        })
        .collect()
}

#[test]
fn lse_against_the_formula() {
    let x: Vec<f64> = randoms(7, 1).iter().map(|v| 50.0 * v).collect();
    let mx = x.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let s: f64 = x.iter().map(|v| (v - mx).exp()).sum();
    let value = run("lse", "primal", json!({ "x": x }));
    close(value.as_f64().unwrap(), s.ln() + mx, 1e-14, "lse");
    let grad = reals(&run("lse", "gradient", json!({ "x": x })));
    assert_eq!(grad.len(), x.len());
    for (i, (g, v)) in grad.iter().zip(&x).enumerate() {
        close(*g, (v - mx).exp() / s, 1e-14, &format!("softmax {i}"));
    }
}

/// ½ Σ_i (sign t_i - Σ_j x_j t_i^j)² with t_i = -1 + 2i/(n-1), and its gradient
/// -Σ_i r_i t_i^j.
fn llsq(x: &[f64], n: usize) -> (f64, Vec<f64>) {
    let mut value = 0.0;
    let mut grad = vec![0.0; x.len()];
    for i in 0..n {
        let t = -1.0 + i as f64 * 2.0 / (n as f64 - 1.0);
        let sign = if t > 0.0 {
            1.0
        } else if t < 0.0 {
            -1.0
        } else {
            0.0
        };
        let mut p = 1.0;
        let mut fit = 0.0;
        let mut powers = Vec::new();
        for xj in x {
            fit += xj * p;
            powers.push(p);
            p *= t;
        }
        let r = sign - fit;
        value += 0.5 * r * r;
        for (g, p) in grad.iter_mut().zip(powers) {
            *g -= r * p;
        }
    }
    (value, grad)
}

#[test]
fn llsq_against_the_formula() {
    let x = randoms(6, 2);
    // n odd, so that t = 0 (sign 0) is one of the points.
    for n in [2, 9] {
        let (value, grad) = llsq(&x, n);
        let input = json!({ "x": x, "n": n });
        close(
            run("llsq", "primal", input.clone()).as_f64().unwrap(),
            value,
            1e-13,
            "llsq",
        );
        let g = reals(&run("llsq", "gradient", input));
        assert_eq!(g.len(), x.len());
        for (j, (a, e)) in g.iter().zip(&grad).enumerate() {
            close(*a, *e, 1e-13, &format!("llsq gradient {j}"));
        }
    }
}

/// log Γ(h/2) for a positive integer h, exactly by the recurrence Γ(x+1) = x Γ(x) from Γ(1) = 1
/// and Γ(1/2) = √π.
fn log_gamma_half(h: u32) -> f64 {
    match h {
        1 => 0.5 * std::f64::consts::PI.ln(),
        2 => 0.0,
        _ => (h as f64 / 2.0 - 1.0).ln() + log_gamma_half(h - 2),
    }
}

/// The GMM problem: dimensions and data.
struct Gmm {
    d: usize,
    k: usize,
    x: Vec<Vec<f64>>,
    gamma: f64,
    m: u32,
}

impl Gmm {
    /// The parameter counts: alpha, mu, q, l.
    fn sizes(&self) -> [usize; 4] {
        let (d, k) = (self.d, self.k);
        [k, k * d, k * d, k * d * (d - 1) / 2]
    }

    /// The objective at the flat parameter vector (alpha, mu, q, l, row by row), written from
    /// GradBench's definition: the log-likelihood plus the log Wishart prior on the precision
    /// matrices Q_kᵀ Q_k. (Index loops, as in the formula.)
    #[allow(clippy::needless_range_loop)]
    fn objective(&self, theta: &[f64]) -> f64 {
        let (d, k) = (self.d, self.k);
        let [na, nm, nq, _] = self.sizes();
        let alpha = &theta[..na];
        let mu = |c: usize, j: usize| theta[na + c * d + j];
        let q = |c: usize, j: usize| theta[na + nm + c * d + j];
        let lsz = d * (d - 1) / 2;
        // Q_k[r][c] for r > c: l filled column by column.
        let lower = |comp: usize, r: usize, c: usize| {
            let mut idx = 0;
            for cc in 0..c {
                idx += d - 1 - cc;
            }
            theta[na + nm + nq + comp * lsz + idx + (r - c - 1)]
        };
        let lse = |v: &[f64]| {
            let mx = v.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            v.iter().map(|a| (a - mx).exp()).sum::<f64>().ln() + mx
        };
        let n = self.x.len();
        let mut total = -(n as f64) * d as f64 * 0.5 * (2.0 * std::f64::consts::PI).ln();
        for xi in &self.x {
            let terms: Vec<f64> = (0..k)
                .map(|c| {
                    let mut sq = 0.0;
                    for r in 0..d {
                        let mut y = q(c, r).exp() * (xi[r] - mu(c, r));
                        for cc in 0..r {
                            y += lower(c, r, cc) * (xi[cc] - mu(c, cc));
                        }
                        sq += y * y;
                    }
                    let logdet: f64 = (0..d).map(|j| q(c, j)).sum();
                    alpha[c] + logdet - 0.5 * sq
                })
                .collect();
            total += lse(&terms);
        }
        total -= n as f64 * lse(alpha);
        // The Wishart prior W(V = I/γ², ν = d + m + 1) on each precision matrix Λ = QᵀQ:
        //   log p = (ν-d-1)/2 log det Λ - ½ tr(γ² Λ) - ν d/2 log 2 + ν d log γ - log Γ_d(ν/2),
        // with log det Λ = 2 Σ q and tr Λ = ‖Q‖²_F.
        let nu = d as u32 + self.m + 1;
        let log_multigamma = 0.25 * (d * (d - 1)) as f64 * std::f64::consts::PI.ln()
            + (1..=d as u32)
                .map(|j| log_gamma_half(nu + 1 - j))
                .sum::<f64>();
        for c in 0..k {
            let sum_q: f64 = (0..d).map(|j| q(c, j)).sum();
            let mut frob: f64 = (0..d).map(|j| (2.0 * q(c, j)).exp()).sum();
            for r in 0..d {
                for cc in 0..r {
                    frob += lower(c, r, cc).powi(2);
                }
            }
            total += self.m as f64 * sum_q
                - 0.5 * self.gamma * self.gamma * frob
                - 0.5 * (nu * d as u32) as f64 * 2f64.ln()
                + (nu * d as u32) as f64 * self.gamma.ln()
                - log_multigamma;
        }
        total
    }
}

#[test]
fn gmm_against_the_formula_and_finite_differences() {
    let (d, k, n) = (3, 2, 4);
    let problem = Gmm {
        d,
        k,
        x: (0..n).map(|i| randoms(d, 10 + i as u64)).collect(),
        gamma: 1.3,
        m: 1,
    };
    let sizes = problem.sizes();
    let theta: Vec<f64> = randoms(sizes.iter().sum(), 3)
        .iter()
        .map(|v| 0.5 * v)
        .collect();
    let (alpha, rest) = theta.split_at(sizes[0]);
    let (mu, rest) = rest.split_at(sizes[1]);
    let (q, l) = rest.split_at(sizes[2]);
    let rows = |v: &[f64], w: usize| v.chunks(w).map(|c| c.to_vec()).collect::<Vec<_>>();
    let input = json!({
        "d": d, "k": k, "n": n,
        "alpha": alpha, "mu": rows(mu, d), "q": rows(q, d), "l": rows(l, d * (d - 1) / 2),
        "x": problem.x, "gamma": problem.gamma, "m": problem.m,
    });
    let value = run("gmm", "objective", input.clone());
    close(
        value.as_f64().unwrap(),
        problem.objective(&theta),
        1e-12,
        "gmm objective",
    );
    let grad = run("gmm", "jacobian", input);
    let obj = grad.as_object().expect("an object");
    let mut keys: Vec<&String> = obj.keys().collect();
    keys.sort();
    assert_eq!(keys, ["alpha", "l", "mu", "q"]);
    let flat: Vec<f64> = reals(&grad["alpha"])
        .into_iter()
        .chain(matrix(&grad["mu"]).concat())
        .chain(matrix(&grad["q"]).concat())
        .chain(matrix(&grad["l"]).concat())
        .collect();
    assert_eq!(matrix(&grad["mu"]).len(), k);
    assert_eq!(matrix(&grad["l"])[0].len(), d * (d - 1) / 2);
    let expected = fd(|t| problem.objective(t), &theta);
    assert_eq!(flat.len(), expected.len());
    for (i, (a, e)) in flat.iter().zip(&expected).enumerate() {
        close(*a, *e, 1e-7, &format!("gmm gradient component {i}"));
    }
}

/// s steps of RK4 from 0 to 2 for f(y)_0 = x_0, f(y)_i = x_i y_{i-1}, from y = 0.
fn ode(x: &[f64], s: usize) -> Vec<f64> {
    let f = |y: &[f64]| -> Vec<f64> {
        (0..x.len())
            .map(|i| if i == 0 { x[0] } else { x[i] * y[i - 1] })
            .collect()
    };
    let axpy = |y: &[f64], a: f64, k: &[f64]| -> Vec<f64> {
        y.iter().zip(k).map(|(u, v)| u + a * v).collect()
    };
    let h = 2.0 / s as f64;
    let mut y = vec![0.0; x.len()];
    for _ in 0..s {
        let k1 = f(&y);
        let k2 = f(&axpy(&y, h / 2.0, &k1));
        let k3 = f(&axpy(&y, h / 2.0, &k2));
        let k4 = f(&axpy(&y, h, &k3));
        y = (0..y.len())
            .map(|i| y[i] + h / 6.0 * (k1[i] + 2.0 * k2[i] + 2.0 * k3[i] + k4[i]))
            .collect();
    }
    y
}

#[test]
fn ode_against_runge_kutta_and_finite_differences() {
    let x: Vec<f64> = randoms(5, 4).iter().map(|v| 1.0 + v).collect();
    for s in [1, 7] {
        let input = json!({ "x": x, "s": s });
        let y = reals(&run("ode", "primal", input.clone()));
        let expected = ode(&x, s);
        assert_eq!(y.len(), expected.len());
        for (i, (a, e)) in y.iter().zip(&expected).enumerate() {
            close(*a, *e, 1e-13, &format!("ode state {i}"));
        }
        let g = reals(&run("ode", "gradient", input));
        let last = |x: &[f64]| *ode(x, s).last().expect("non-empty");
        for (i, (a, e)) in g.iter().zip(fd(last, &x)).enumerate() {
            close(*a, e, 1e-7, &format!("ode gradient {i}"));
        }
    }
}

/// The LSTM loss, transcribed from GradBench's reference (`lstm.hpp`): `main` is 2l rows of
/// 4b (weights, biases), `extra` 3 rows of b, `state` 2l rows of b, `seq` c rows of b.
fn lstm_loss(main: &[Vec<f64>], extra: &[Vec<f64>], state: &[Vec<f64>], seq: &[Vec<f64>]) -> f64 {
    let sigmoid = |x: f64| 1.0 / (1.0 + (-x).exp());
    let (l, b, c) = (main.len() / 2, seq[0].len(), seq.len());
    let mut st = state.to_vec();
    let mut total = 0.0;
    for t in 0..c - 1 {
        let mut input: Vec<f64> = (0..b).map(|i| seq[t][i] * extra[0][i]).collect();
        for layer in 0..l {
            let (w, u) = (&main[2 * layer], &main[2 * layer + 1]);
            for i in 0..b {
                let hidden = st[2 * layer][i];
                let forget = sigmoid(input[i] * w[i] + u[i]);
                let ingate = sigmoid(hidden * w[b + i] + u[b + i]);
                let outgate = sigmoid(input[i] * w[2 * b + i] + u[2 * b + i]);
                let change = (hidden * w[3 * b + i] + u[3 * b + i]).tanh();
                let cell = st[2 * layer + 1][i] * forget + ingate * change;
                st[2 * layer + 1][i] = cell;
                st[2 * layer][i] = outgate * cell.tanh();
            }
            input = st[2 * layer].clone();
        }
        let ypred: Vec<f64> = (0..b)
            .map(|i| input[i] * extra[1][i] + extra[2][i])
            .collect();
        let lse = (ypred.iter().map(|y| y.exp()).sum::<f64>() + 2.0).ln();
        for i in 0..b {
            total += seq[t + 1][i] * (ypred[i] - lse);
        }
    }
    -total / ((c - 1) * b) as f64
}

#[test]
fn lstm_against_the_reference_and_finite_differences() {
    let (l, b, c) = (2, 3, 5);
    let rows = |r: usize, w: usize, seed: u64| -> Vec<Vec<f64>> {
        (0..r).map(|i| randoms(w, seed + i as u64)).collect()
    };
    let main = rows(2 * l, 4 * b, 20);
    let extra = rows(3, b, 40);
    let state = rows(2 * l, b, 50);
    let seq: Vec<Vec<f64>> = rows(c, b, 60)
        .into_iter()
        .map(|r| r.iter().map(|v| if *v > 0.0 { 1.0 } else { 0.0 }).collect())
        .collect();
    let input = json!({"main_params": main, "extra_params": extra, "state": state,
                       "sequence": seq});
    close(
        run("lstm", "objective", input.clone()).as_f64().unwrap(),
        lstm_loss(&main, &extra, &state, &seq),
        1e-13,
        "lstm objective",
    );
    // The jacobian: main_params then extra_params, each row by row.
    let grad = reals(&run("lstm", "jacobian", input));
    let theta: Vec<f64> = main.concat().into_iter().chain(extra.concat()).collect();
    assert_eq!(grad.len(), 8 * l * b + 3 * b);
    let loss = |t: &[f64]| {
        let (m, e) = t.split_at(8 * l * b);
        let m: Vec<Vec<f64>> = m.chunks(4 * b).map(|r| r.to_vec()).collect();
        let e: Vec<Vec<f64>> = e.chunks(b).map(|r| r.to_vec()).collect();
        lstm_loss(&m, &e, &state, &seq)
    };
    for (i, (a, e)) in grad.iter().zip(fd(loss, &theta)).enumerate() {
        close(*a, e, 1e-7, &format!("lstm jacobian {i}"));
    }
}

/// The determinant of the n×n row-major matrix `a` by expansion along the first row (the
/// reference's algorithm, not chad's elimination).
fn det_by_minors(a: &[f64], n: usize) -> f64 {
    if n == 1 {
        return a[0];
    }
    (0..n)
        .map(|j| {
            let minor: Vec<f64> = (1..n)
                .flat_map(|r| (0..n).filter(move |&c| c != j).map(move |c| a[r * n + c]))
                .collect();
            let sign = if j % 2 == 0 { 1.0 } else { -1.0 };
            sign * a[j] * det_by_minors(&minor, n - 1)
        })
        .collect::<Vec<_>>()
        .iter()
        .sum()
}

#[test]
fn det_against_minors_and_finite_differences() {
    for n in [1, 2, 4, 6] {
        let mut a = randoms(n * n, 70 + n as u64);
        if n == 4 {
            // A zero in the first column makes the first step swap rows.
            a[0] = 0.0;
        }
        let input = json!({ "A": a, "ell": n });
        close(
            run("det", "primal", input.clone()).as_f64().unwrap(),
            det_by_minors(&a, n),
            1e-13,
            &format!("det {n}"),
        );
        let g = reals(&run("det", "gradient", input));
        assert_eq!(g.len(), n * n);
        let f = |t: &[f64]| det_by_minors(t, n);
        for (i, (x, e)) in g.iter().zip(fd(f, &a)).enumerate() {
            close(*x, e, 1e-8, &format!("det {n} gradient {i}"));
        }
    }
}

#[test]
fn native_backend_runs_loop_programs() {
    // det is Gaussian elimination in `fold`s: loops lower to native code.
    let mut tool = Tool::new(Backend::Native);
    let d = tool.respond(&json!({"id": 0, "kind": "define", "module": "det"}).to_string());
    assert_eq!(d["success"], true, "{d}");
    assert_eq!(d["backend"], "native", "{d}");
    let input = json!({"A": [2.0, 1.0, 1.0, 3.0], "ell": 2, "min_runs": 1, "min_seconds": 0});
    let a = tool.respond(&evaluate(1, "det", "gradient", input).to_string());
    assert_eq!(a["output"], json!([3.0, -1.0, -1.0, 2.0]), "{a}");
}

/// One observation's reprojection error, transcribed from GradBench's reference (`ba.hpp`):
/// `v` is the camera (11), the point (3) and the weight (1).
fn ba_error(v: &[f64], feat: [f64; 2]) -> [f64; 2] {
    let (cam, x, w) = (&v[..11], &v[11..14], v[14]);
    let cross = |a: &[f64], b: &[f64]| {
        [
            a[1] * b[2] - a[2] * b[1],
            a[2] * b[0] - a[0] * b[2],
            a[0] * b[1] - a[1] * b[0],
        ]
    };
    let xo: Vec<f64> = (0..3).map(|i| x[i] - cam[3 + i]).collect();
    let rot = &cam[..3];
    let sqtheta: f64 = rot.iter().map(|r| r * r).sum();
    let xcam: Vec<f64> = if sqtheta != 0.0 {
        let theta = sqtheta.sqrt();
        let (c, s) = (theta.cos(), theta.sin());
        let wv: Vec<f64> = rot.iter().map(|r| r / theta).collect();
        let wxp = cross(&wv, &xo);
        let tmp = (wv[0] * xo[0] + wv[1] * xo[1] + wv[2] * xo[2]) * (1.0 - c);
        (0..3)
            .map(|i| xo[i] * c + wxp[i] * s + wv[i] * tmp)
            .collect()
    } else {
        let rxp = cross(rot, &xo);
        (0..3).map(|i| xo[i] + rxp[i]).collect()
    };
    let p = [xcam[0] / xcam[2], xcam[1] / xcam[2]];
    let rsq = p[0] * p[0] + p[1] * p[1];
    let l = 1.0 + cam[9] * rsq + cam[10] * rsq * rsq;
    [
        w * (p[0] * l * cam[6] + cam[7] - feat[0]),
        w * (p[1] * l * cam[6] + cam[8] - feat[1]),
    ]
}

#[test]
fn ba_against_the_reference_and_finite_differences() {
    let cam = [
        -0.758453, -1.109613, -0.845551, 34.556073, 39.676747, 53.881673, 419.194514, 5.864426,
        -8.518870, 0.087812, 0.002739,
    ];
    let (x, w, feat) = (
        [7.203245, 0.001144, 3.023326],
        0.417022,
        [271.760969, 834.209256],
    );
    let (n, m, p) = (2, 3, 11);
    let input = json!({"n": n, "m": m, "p": p, "cam": cam, "x": x, "w": w, "feat": feat});
    let v: Vec<f64> = cam.iter().chain(&x).chain([w].iter()).copied().collect();
    let err = ba_error(&v, feat);
    let out = run("ba", "objective", input.clone());
    close(
        out["reproj_error"]["elements"][0].as_f64().unwrap(),
        err[0],
        1e-13,
        "ba error 0",
    );
    close(
        out["reproj_error"]["elements"][1].as_f64().unwrap(),
        err[1],
        1e-13,
        "ba error 1",
    );
    assert_eq!(out["reproj_error"]["repeated"], json!(p));
    close(
        out["w_err"]["element"].as_f64().unwrap(),
        1.0 - w * w,
        1e-15,
        "w_err",
    );
    assert_eq!(out["w_err"]["repeated"], json!(p));
    let jac = run("ba", "jacobian", input);
    let (rows, cols, vals) = (
        reals(&jac["rows"]),
        reals(&jac["cols"]),
        reals(&jac["vals"]),
    );
    assert_eq!((rows.len(), cols.len(), vals.len()), (31, 31, 31));
    // Row pointers: 15 entries per reprojection row; the last is the number of entries.
    for (i, r) in rows.iter().take(30).enumerate() {
        assert_eq!(*r, (15 * i.min(2 * p) + i.saturating_sub(2 * p)) as f64);
    }
    assert_eq!(rows[30], (31 * p) as f64);
    // Observation 0 sees camera 0 and point 0; its weight's column follows the points'.
    for r in 0..2 {
        let block = &cols[15 * r..15 * r + 15];
        let expected: Vec<f64> = (0..11)
            .chain(11 * n..11 * n + 3)
            .chain([11 * n + 3 * m])
            .map(|c| c as f64)
            .collect();
        assert_eq!(block, &expected[..]);
        let d = fd(|t| ba_error(t, feat)[r], &v);
        for (k, (a, e)) in vals[15 * r..15 * r + 15].iter().zip(&d).enumerate() {
            close(*a, *e, 1e-6, &format!("ba jacobian row {r} entry {k}"));
        }
    }
    // The last entry: the last weight error's derivative -2w in the last weight's column.
    assert_eq!(cols[30], (11 * n + 3 * m + p - 1) as f64);
    close(vals[30], -2.0 * w, 1e-15, "w_err derivative");
}

/// A small hand model: `bones` bones in a chain (bone 0 the root), random 4×4 base transforms
/// (rigid rows 0-2, last row 0 0 0 1), `nverts` vertices with random weights.
fn hand_model(bones: usize, nverts: usize, seed: u64) -> Json {
    let transform = |s: u64| -> Vec<Vec<f64>> {
        let r = randoms(12, s);
        (0..4)
            .map(|i| {
                if i < 3 {
                    r[4 * i..4 * i + 4].to_vec()
                } else {
                    vec![0.0, 0.0, 0.0, 1.0]
                }
            })
            .collect()
    };
    let parents: Vec<i64> = (0..bones as i64).map(|b| b - 1).collect();
    json!({
        "bone_count": bones,
        "bone_names": (0..bones).map(|b| format!("bone{b}")).collect::<Vec<_>>(),
        "parents": parents,
        "base_relatives": (0..bones).map(|b| transform(seed + b as u64)).collect::<Vec<_>>(),
        "inverse_base_absolutes":
            (0..bones).map(|b| transform(seed + 100 + b as u64)).collect::<Vec<_>>(),
        "base_positions": (0..nverts)
            .map(|v| { let mut p = randoms(3, seed + 200 + v as u64); p.push(1.0); p })
            .collect::<Vec<_>>(),
        "weights": (0..nverts).map(|v| randoms(bones, seed + 300 + v as u64)).collect::<Vec<_>>(),
        "triangles": (0..nverts).map(|v| [v, (v + 1) % nverts, (v + 2) % nverts]).collect::<Vec<_>>(),
        "is_mirrored": seed % 2 == 1,
    })
}

#[test]
fn ht_objective_by_hand_and_jacobian_against_finite_differences() {
    // Identity transforms, weights summing to 1, no rotation: each vertex is its base position
    // moved by the translation theta[3..6] (x negated when mirrored).
    let mut ht = session("ht");
    let nverts = 4;
    let mut model = hand_model(3, nverts, 7);
    let identity = json!([
        [1.0, 0.0, 0.0, 0.0],
        [0.0, 1.0, 0.0, 0.0],
        [0.0, 0.0, 1.0, 0.0],
        [0.0, 0.0, 0.0, 1.0]
    ]);
    model["base_relatives"] = json!([identity, identity, identity]);
    model["inverse_base_absolutes"] = json!([identity, identity, identity]);
    model["weights"] = json!(vec![[0.5, 0.25, 0.25]; nverts]);
    let base = matrix(&model["base_positions"]);
    let mut theta = vec![0.0; 26];
    theta[3..6].copy_from_slice(&[0.5, -1.0, 2.0]);
    let points: Vec<Vec<f64>> = (0..3).map(|i| randoms(3, 500 + i)).collect();
    let corr = [2, 0, 3];
    let input = json!({"theta": theta, "us": [],
                       "data": {"model": model, "correspondences": corr, "points": points}});
    let residuals = reals(&ht("objective", input));
    assert_eq!(residuals.len(), 9);
    for (i, &c) in corr.iter().enumerate() {
        for j in 0..3 {
            let v = if j == 0 { -base[c][0] } else { base[c][j] } + theta[3 + j];
            close(residuals[3 * i + j], points[i][j] - v, 1e-14, "ht residual");
        }
    }

    // A random model and pose, both variants: the Jacobian's columns against central
    // differences of the objective.
    for complicated in [false, true] {
        let model = hand_model(7, 6, 11);
        let theta: Vec<f64> = randoms(26, 12).iter().map(|v| 0.7 * v).collect();
        let npts = 4;
        let us: Vec<Vec<f64>> = if complicated {
            (0..npts)
                .map(|i| randoms(2, 600 + i).iter().map(|v| 0.4 * v + 0.3).collect())
                .collect()
        } else {
            vec![]
        };
        let points: Vec<Vec<f64>> = (0..npts).map(|i| randoms(3, 700 + i)).collect();
        let input = |theta: &[f64], us: &[Vec<f64>]| {
            json!({"theta": theta, "us": us, "data": {"model": model.clone(),
                   "correspondences": [5, 1, 0, 3], "points": points}})
        };
        let jac = matrix(&ht("jacobian", input(&theta, &us)));
        let ncols = 26 + if complicated { 2 } else { 0 };
        assert_eq!(jac.len(), 3 * npts as usize);
        assert!(jac.iter().all(|r| r.len() == ncols));
        let h = 1e-6;
        for col in 0..ncols {
            let (mut tp, mut tm, mut up, mut um) =
                (theta.clone(), theta.clone(), us.clone(), us.clone());
            if complicated && col < 2 {
                // Along every point's coordinate `col` at once.
                for (a, b) in up.iter_mut().zip(um.iter_mut()) {
                    a[col] += h;
                    b[col] -= h;
                }
            } else {
                let k = col - (ncols - 26);
                tp[k] += h;
                tm[k] -= h;
            }
            let plus = reals(&ht("objective", input(&tp, &up)));
            let minus = reals(&ht("objective", input(&tm, &um)));
            for (r, row) in jac.iter().enumerate() {
                let fd = (plus[r] - minus[r]) / (2.0 * h);
                close(
                    row[col],
                    fd,
                    1e-7,
                    &format!("ht jacobian ({r}, {col}), us: {complicated}"),
                );
            }
        }
    }
}

/// kmeans' cost, transcribed from GradBench's reference (`kmeans.hpp`): each point's squared
/// distance to its nearest centroid, summed.
fn kmeans_cost(points: &[Vec<f64>], centroids: &[f64], d: usize) -> f64 {
    points
        .iter()
        .map(|p| {
            centroids
                .chunks(d)
                .map(|c| p.iter().zip(c).map(|(a, b)| (a - b) * (a - b)).sum::<f64>())
                .fold(f64::INFINITY, f64::min)
        })
        .sum()
}

#[test]
fn kmeans_against_the_reference_and_finite_differences() {
    let (n, k, d) = (40, 5, 3);
    let points: Vec<Vec<f64>> = randoms(n * d, 31).chunks(d).map(|c| c.to_vec()).collect();
    // As the eval: the last k points are the centroids (so no cluster is empty).
    let centroids: Vec<Vec<f64>> = points[n - k..].to_vec();
    let flat: Vec<f64> = centroids.concat();
    let input = json!({"points": points, "centroids": centroids});
    let mut kmeans = session("kmeans");
    let cost = kmeans("cost", input.clone()).as_f64().expect("a number");
    close(cost, kmeans_cost(&points, &flat, d), 1e-13, "kmeans cost");
    let dir = matrix(&kmeans("dir", input.clone()));
    assert_eq!((dir.len(), dir[0].len()), (k, d));
    // Natively, J and H come from one Hessian-vector product of `cost` (dual numbers on the
    // compiled gradient) instead of the program's `jvp` of `grad`: the same numbers.
    let native = matrix(&session_on("kmeans", Backend::Native)("dir", input));
    for (a, b) in native.concat().iter().zip(dir.concat()) {
        close(*a, b, 1e-12, "kmeans dir natively");
    }
    // J by central differences, the Hessian's diagonal by central second differences of the
    // transcribed cost (the nearest centroids do not change within the steps).
    let f = |c: &[f64]| kmeans_cost(&points, c, d);
    let jac = fd(f, &flat);
    let h = 1e-3;
    for (i, got) in dir.concat().iter().enumerate() {
        let (mut a, mut b) = (flat.clone(), flat.clone());
        a[i] += h;
        b[i] -= h;
        let hess = (f(&a) - 2.0 * f(&flat) + f(&b)) / (h * h);
        close(*got, jac[i] / hess, 1e-6, &format!("kmeans dir {i}"));
    }
    // And the closed form of GradBench's reference tool: centroid minus its cluster's mean.
    for (j, c) in centroids.iter().enumerate() {
        let nearest = |p: &Vec<f64>| {
            (0..k)
                .map(|m| kmeans_cost(std::slice::from_ref(p), &centroids[m], d))
                .enumerate()
                .fold(
                    (0, f64::INFINITY),
                    |b, (m, v)| if v < b.1 { (m, v) } else { b },
                )
                .0
        };
        let members: Vec<&Vec<f64>> = points.iter().filter(|p| nearest(p) == j).collect();
        for l in 0..d {
            let mean = members.iter().map(|p| p[l]).sum::<f64>() / members.len() as f64;
            close(
                dir[j][l],
                c[l] - mean,
                1e-12,
                &format!("kmeans dir {j},{l}"),
            );
        }
    }
}

/// GradBench's gradient descent (`cpp/gradbench/gd.hpp`, `multivariate_argmin`).
fn gd_argmin(f: &dyn Fn(&[f64]) -> f64, g: &dyn Fn(&[f64]) -> Vec<f64>, x0: &[f64]) -> Vec<f64> {
    let norm = |v: &[f64]| v.iter().map(|a| a * a).sum::<f64>().sqrt();
    let (mut x, mut fx, mut gx) = (x0.to_vec(), f(x0), g(x0));
    let (mut i, mut eta) = (0, 1e-5);
    loop {
        if norm(&gx) <= 1e-5 {
            return x;
        } else if i == 10 {
            eta *= 2.0;
            i = 0;
        } else {
            let x2: Vec<f64> = x.iter().zip(&gx).map(|(a, b)| a - eta * b).collect();
            let step: Vec<f64> = x.iter().zip(&x2).map(|(a, b)| a - b).collect();
            if norm(&step) <= 1e-5 {
                return x;
            }
            let fx2 = f(&x2);
            if fx2 < fx {
                (x, fx, gx) = (x2.clone(), fx2, g(&x2));
                i += 1;
            } else {
                eta /= 2.0;
                i = 0;
            }
        }
    }
}

/// The particle's cost x_f² at control w (the Euler steps of GradBench's particle eval), with
/// the potential's gradient by its formula: ∇ 1/|x - c| = -(x - c)/|x - c|³.
fn particle_cost(w: f64) -> f64 {
    let charges = [[10.0, 10.0 - w], [10.0, 0.0]];
    let (mut x, mut v) = ([0.0, 8.0], [0.75, 0.0]);
    let dt = 0.1;
    loop {
        let mut acc = [0.0, 0.0];
        for c in &charges {
            let r = ((x[0] - c[0]) * (x[0] - c[0]) + (x[1] - c[1]) * (x[1] - c[1])).sqrt();
            for l in 0..2 {
                acc[l] += (x[l] - c[l]) / (r * r * r);
            }
        }
        x = [x[0] + dt * v[0], x[1] + dt * v[1]];
        if x[1] <= 0.0 {
            let xf = x[0] + (-x[1] / v[1]) * v[0];
            return xf * xf;
        }
        v = [v[0] + dt * acc[0], v[1] + dt * acc[1]];
    }
}

/// The loop steps one solve of particle or saddle may take: they need 30 000 to 100 000
/// (`--max-steps`), so a planted bug that keeps gradient descent from converging fails here
/// instead of running forever.
const SOLVE_STEPS: u64 = 1_000_000;

/// A definition of a bundled program, evaluated at `args` by the library.
fn bundled(module: &str, def: &str, args: &[chad::Value]) -> Vec<f64> {
    let (_, text) = chad::internals::gradbench::program(module).expect("bundled");
    let program = chad::Program::load(text).expect("loads");
    let _budget = chad::internals::steps::Budget::new(SOLVE_STEPS);
    let v = program
        .function(def)
        .expect("defined")
        .eval(args)
        .expect("runs");
    chad::internals::oracle::fd::leaves(&v)
}

#[test]
fn particle_against_a_transcription_and_finite_differences() {
    // The in-program derivative of the cost (through the Euler loop, each step taking the
    // potential's gradient), in all four mode combinations, against central differences.
    for w in [0.0, 0.15, -0.3] {
        let h = 1e-6;
        let expected = (particle_cost(w + h) - particle_cost(w - h)) / (2.0 * h);
        for def in ["dRR", "dRF", "dFR", "dFF"] {
            let got = bundled("particle", def, &[chad::Value::reals(vec![w])]);
            close(got[0], expected, 1e-6, &format!("particle {def} at {w}"));
        }
        let c = bundled("particle", "costR", &[chad::Value::reals(vec![w])]);
        close(c[0], particle_cost(w), 1e-13, "particle cost");
    }
    // The whole eval: gradient descent on the transcription (outer derivative by central
    // differences) and GradBench's expected value.
    let f = |w: &[f64]| particle_cost(w[0]);
    let g = |w: &[f64]| vec![(particle_cost(w[0] + 1e-7) - particle_cost(w[0] - 1e-7)) / 2e-7];
    let reference = gd_argmin(&f, &g, &[0.0])[0];
    let mut particle = session("particle");
    for function in ["rr", "rf", "fr", "ff"] {
        let w = {
            let _budget = chad::internals::steps::Budget::new(SOLVE_STEPS);
            particle(function, json!({"w": 0.0}))
                .as_f64()
                .expect("a number")
        };
        close(w, reference, 1e-6, &format!("particle {function}"));
        close(w, 0.2071918746486116, 1e-9, &format!("particle {function}"));
    }
}

/// saddle's function.
fn saddle_f(x: &[f64], y: &[f64]) -> f64 {
    (x[0] * x[0] + x[1] * x[1]) - (y[0] * y[0] + y[1] * y[1])
}

#[test]
fn saddle_against_a_transcription_and_finite_differences() {
    let start = [1.0, 1.0];
    // max over y of f(x, ·) by gradient descent with the formula -2y for the y-gradient.
    let gy = |y: &[f64]| vec![-2.0 * y[0], -2.0 * y[1]];
    let argmax_y = |x: &[f64]| {
        let x = x.to_vec();
        gd_argmin(
            &|y: &[f64]| -saddle_f(&x, y),
            &|y: &[f64]| gy(y).iter().map(|a| -a).collect(),
            &start,
        )
    };
    let maxf = |x: &[f64]| saddle_f(x, &argmax_y(x));
    // The in-program gradients of x ↦ max f(x, ·) (a loop taking gradients, differentiated)
    // against central differences of the transcription.
    let starts = chad::Value::reals(start.to_vec());
    for x in [[0.5, -0.25], [1.0, 1.0]] {
        let expected = fd(maxf, &x);
        for def in ["gradRR", "gradRF", "gradFR", "gradFF"] {
            let got = bundled(
                "saddle",
                def,
                &[starts.clone(), chad::Value::reals(x.to_vec())],
            );
            for l in 0..2 {
                close(got[l], expected[l], 1e-6, &format!("saddle {def} at {x:?}"));
            }
        }
    }
    // The whole eval against the transcription (outer gradient by central differences) and
    // GradBench's expected value.
    let gx = |x: &[f64]| fd(maxf, x);
    let xs = gd_argmin(&maxf, &gx, &start);
    let ys = argmax_y(&xs);
    let mut saddle = session("saddle");
    for function in ["rr", "rf", "fr", "ff"] {
        let out = {
            let _budget = chad::internals::steps::Budget::new(SOLVE_STEPS);
            reals(&saddle(function, json!({"start": start})))
        };
        assert_eq!(out.len(), 4);
        for (l, e) in xs.iter().chain(&ys).enumerate() {
            close(out[l], *e, 1e-6, &format!("saddle {function} {l}"));
            close(
                out[l],
                8.246324826140356e-06,
                1e-9,
                &format!("saddle {function} {l}"),
            );
        }
    }
}
