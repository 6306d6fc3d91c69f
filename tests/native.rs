//! The hand-written Rust baselines of `benches/native/mod.rs` compute the same functions as the
//! chad programs they stand in for: at deterministic random arguments of several sizes (and at
//! the example argument files) each native objective agrees with `chad::internals::eval::eval_entry` on the
//! chad definition to 1e-10 relative, decoding rejects arguments of the wrong shape with a
//! message, and `examples/native_baselines.rs` prints the value it timed.

// The example includes `benches/native/mod.rs` itself; one copy is enough.
#[path = "../examples/native_baselines.rs"]
#[allow(dead_code)]
mod native_baselines;

use native_baselines::native;

use chad::Value;
use chad::internals::source::term::{Entry, Program};
use serde_json::{Value as Json, json};
use std::path::{Path, PathBuf};

/// The Rosenbrock benchmark program, with the formula of `benches/programs/rosenbrock.chad`.
const ROSENBROCK: &str = "
def rosenbrock (xs : Array Real) : Real =
  sum (build (length xs - 1) (\\i ->
    let x = xs ! i in
    let a = xs ! (i + 1) - x * x in
    100.0 * a * a + (1.0 - x) * (1.0 - x)))
";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

fn load_text(name: &str, text: &str) -> Program {
    chad::internals::source::load(text, &chad::internals::prim::Registry::builtin()).unwrap_or_else(
        |e| {
            let src = chad::Source::new(name, text);
            panic!("{}", e.render(Some(&src)))
        },
    )
}

fn load_example(file: &str) -> Program {
    let path = root().join("examples").join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    load_text(file, &text)
}

fn entry(prog: &Program, name: &str) -> Entry {
    prog.entry(prog.find(name).unwrap_or_else(|| panic!("no `{name}`")))
}

fn read_json(file: &str) -> Json {
    let path = root().join("examples").join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    serde_json::from_str(&text).expect("JSON")
}

/// chad's value of the definition at the JSON arguments (the `--args-file` format).
fn chad_value(entry: &Entry, args: &Json) -> f64 {
    let items = args.as_array().expect("an array of arguments");
    assert_eq!(items.len(), entry.params.len(), "arity");
    let vals: Vec<Value> = entry
        .params
        .iter()
        .zip(items)
        .map(|(p, j)| Value::from_json(j, &p.ty).expect("arguments of the right types"))
        .collect();
    chad::internals::eval::eval_entry(entry, &vals)
        .unwrap_or_else(|e| panic!("chad fails: {e:?}"))
        .expect_real()
}

fn native_value(program: &str, args: &Json) -> f64 {
    native::Program::decode(program, args)
        .unwrap_or_else(|e| panic!("{program}: {e}"))
        .eval()
}

fn close(a: f64, b: f64, rel: f64) -> bool {
    (a - b).abs() <= rel * a.abs().max(b.abs()).max(1e-300)
}

/// Native and chad agree on the definition at the arguments.
fn agree(program: &str, entry: &Entry, args: &Json, what: &str) {
    let (n, c) = (native_value(program, args), chad_value(entry, args));
    assert!(
        close(n, c, 1e-10),
        "{program} at {what}: native {n:e}, chad {c:e}"
    );
}

/// A deterministic generator of uniform reals: the library's SplitMix64.
struct Rng(chad::internals::bench::Rng);

impl Rng {
    fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        self.0.uniform(lo, hi)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.uniform(0.0, n as f64) as usize).min(n - 1)
    }

    fn vector(&mut self, n: usize, scale: f64) -> Json {
        json!(
            (0..n)
                .map(|_| self.uniform(-scale, scale))
                .collect::<Vec<_>>()
        )
    }

    fn matrix(&mut self, rows: usize, cols: usize, scale: f64) -> Json {
        json!(
            (0..rows)
                .map(|_| self.vector(cols, scale))
                .collect::<Vec<_>>()
        )
    }
}

fn mlp_args(i: usize, h: usize, c: usize, b: usize, seed: u64) -> Json {
    let mut r = Rng(chad::internals::bench::Rng::new(seed));
    let ys: Vec<usize> = (0..b).map(|_| r.below(c)).collect();
    json!([
        r.matrix(h, i, 1.0),
        r.vector(h, 0.5),
        r.matrix(c, h, 1.0),
        r.vector(c, 0.5),
        r.matrix(b, i, 2.0),
        ys
    ])
}

fn gmm_args(d: usize, k: usize, n: usize, gamma: f64, m: i64, seed: u64) -> Json {
    let mut r = Rng(chad::internals::bench::Rng::new(seed));
    json!([
        r.vector(k, 1.0),
        r.matrix(k, d, 1.0),
        r.matrix(k, d + d * (d - 1) / 2, 0.5),
        r.matrix(n, d, 1.5),
        gamma,
        m
    ])
}

#[test]
fn rosenbrock_agrees_with_chad() {
    let prog = load_text("rosenbrock.chad", ROSENBROCK);
    let e = entry(&prog, "rosenbrock");
    for (n, seed) in [(2, 1), (3, 2), (50, 3), (50, 4)] {
        let args = json!([Rng(chad::internals::bench::Rng::new(seed)).vector(n, 2.0)]);
        agree("rosenbrock", &e, &args, &format!("n = {n}"));
    }
    // The minimum, and a hand-computed value.
    assert_eq!(native::rosenbrock(&[1.0; 7]), 0.0);
    assert_eq!(
        native::rosenbrock(&[0.0, 1.0, 2.0]),
        100.0 + 1.0 + 100.0 + 0.0
    );
    assert_eq!(native::rosenbrock(&[3.0]), 0.0);
}

#[test]
fn mlp_agrees_with_chad() {
    let prog = load_example("mlp.chad");
    let e = entry(&prog, "loss");
    agree("mlp", &e, &read_json("mlp.args.json"), "mlp.args.json");
    for (i, (inputs, hidden, classes, batch)) in
        [(5, 7, 3, 4), (1, 1, 1, 1), (2, 3, 2, 9), (4, 6, 10, 5)]
            .into_iter()
            .enumerate()
    {
        let args = mlp_args(inputs, hidden, classes, batch, 10 + i as u64);
        let what = format!("{inputs}→{hidden}→{classes}, batch {batch}");
        agree("mlp", &e, &args, &what);
    }
    // Large logits: both shift the logsumexp and stay finite.
    let mut big = mlp_args(3, 4, 3, 2, 99);
    big[3] = json!([900.0, -900.0, 850.0]);
    big[5] = json!([1, 2]); // not the largest logit: a loss of about (1800 + 50) / 2
    let loss = native_value("mlp", &big);
    assert!(loss.is_finite() && loss > 900.0, "{loss}");
    agree("mlp", &e, &big, "large logits");
    // An empty batch: the mean is 0/0 for both.
    let empty = mlp_args(3, 4, 3, 0, 98);
    assert!(native_value("mlp", &empty).is_nan());
    assert!(chad_value(&e, &empty).is_nan());
}

#[test]
fn gmm_agrees_with_chad() {
    let prog = load_example("gmm.chad");
    let e = entry(&prog, "gmm");
    agree("gmm", &e, &read_json("gmm.args.json"), "gmm.args.json");
    for (i, (d, k, n, gamma, m)) in [
        (3, 4, 6, 1.0, 0),
        (1, 1, 1, 1.0, 0),
        (2, 3, 5, 1.3, 2),
        (4, 2, 3, 0.7, -1),
        (5, 3, 4, 1.0, 1),
    ]
    .into_iter()
    .enumerate()
    {
        let args = gmm_args(d, k, n, gamma, m, 20 + i as u64);
        let what = format!("d = {d}, K = {k}, N = {n}, gamma = {gamma}, m = {m}");
        agree("gmm", &e, &args, &what);
    }
    // No points: only the prior and the constant remain.
    agree("gmm", &e, &gmm_args(2, 3, 0, 1.0, 0, 30), "N = 0");
    // Far-apart alphas: the stable logsumexp keeps the value finite.
    let mut far = read_json("gmm.args.json");
    far[0] = json!([800.0, 790.0, -5.0]);
    assert!(native_value("gmm", &far).is_finite());
    agree("gmm", &e, &far, "far-apart alphas");
}

#[test]
fn decoding_rejects_arguments_of_the_wrong_shape() {
    let bad = |program: &str, args: Json, says: &str| {
        let e = native::Program::decode(program, &args).expect_err("rejected");
        assert!(
            e.contains(says),
            "{program} {args}: `{e}` does not say `{says}`"
        );
    };
    bad("sgd", json!([]), "unknown program `sgd`");
    bad("rosenbrock", json!({"xs": [1.0]}), "JSON array");
    bad("rosenbrock", json!([[1.0], [2.0]]), "takes 1 arguments");
    bad("rosenbrock", json!([[1.0, true]]), "expected a Real");
    let mlp = mlp_args(2, 3, 2, 4, 1);
    let mut ragged = mlp.clone();
    ragged[0][1] = json!([1.0]);
    bad("mlp", ragged, "w1: row 1 has 1 entries");
    let mut class = mlp.clone();
    class[5][2] = json!(2);
    bad("mlp", class, "the class 2 is not in 0..2");
    let mut real_class = mlp.clone();
    real_class[5][0] = json!(1.0);
    bad("mlp", real_class, "expected an Int");
    let mut short = mlp.clone();
    short[5] = json!([0, 1]);
    bad("mlp", short, "ys has 2 entries, 4 expected");
    let mut inputs = mlp;
    inputs[4] = json!([[1.0], [2.0], [3.0], [4.0]]);
    bad("mlp", inputs, "a row of xs has 1 entries, 2 expected");
    let gmm = gmm_args(3, 2, 4, 1.0, 0, 1);
    let mut icf = gmm.clone();
    icf[2] = json!([vec![0.0; 5], vec![0.0; 5]]);
    bad("gmm", icf, "a row of icf has 5 entries, 6 expected");
    let mut points = gmm.clone();
    points[3] = json!([[0.0, 1.0]]);
    bad("gmm", points, "a row of x has 2 entries, 3 expected");
    let mut none = gmm.clone();
    none[0] = json!([]);
    none[1] = json!([]);
    none[2] = json!([]);
    bad("gmm", none, "at least one component");
    let mut m = gmm;
    m[5] = json!(-2);
    bad("gmm", m, "m ≥ -1");
}

/// A file under the temporary directory, removed when dropped.
struct TempFile(PathBuf);

impl TempFile {
    fn new(name: &str, contents: &str) -> TempFile {
        let path = std::env::temp_dir().join(format!("chad-native-{}-{name}", std::process::id()));
        std::fs::write(&path, contents).expect("writable temp dir");
        TempFile(path)
    }

    fn arg(&self) -> String {
        self.0.to_str().expect("UTF-8 path").to_string()
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn the_baselines_example_prints_the_value_and_a_time() {
    let run = |args: &[&str]| {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        native_baselines::run(&args)
    };
    let gmm = root().join("examples/gmm.args.json");
    let gmm = gmm.to_str().expect("UTF-8 path");
    let line = run(&["gmm", gmm, "--repeat", "3"]).expect("runs");
    let out: Json = serde_json::from_str(&line).expect("one JSON object");
    let want = native_value("gmm", &read_json("gmm.args.json"));
    assert_eq!(out["value"].as_f64(), Some(want), "{line}");
    let t = out["native_s"].as_f64().expect("a time");
    assert!(t > 0.0 && t < 1.0, "{line}");

    // A NaN value (the MLP's mean over an empty batch is 0/0) is written as chad writes it.
    let empty = TempFile::new("empty.json", "[[[1.0]], [0.0], [[1.0]], [0.0], [], []]");
    let line = run(&["mlp", &empty.arg()]).expect("runs");
    let out: Json = serde_json::from_str(&line).expect("one JSON object");
    assert_eq!(out["value"], json!("NaN"), "{line}");

    let bad_json = TempFile::new("bad.json", "[1.0,");
    for (args, says) in [
        (vec!["sgd", gmm], "unknown program"),
        (vec!["gmm"], "expected PROGRAM and ARGS_FILE"),
        (vec!["gmm", gmm, "--repeat", "0"], "positive integer"),
        (vec!["gmm", gmm, "--repeat"], "needs a number"),
        (vec!["gmm", gmm, "--fast"], "unknown option --fast"),
        (
            vec!["gmm", "/nonexistent/args.json"],
            "/nonexistent/args.json",
        ),
        (vec!["gmm", &bad_json.arg()], "EOF"),
        (vec!["rosenbrock", gmm], "takes 1 arguments"),
    ] {
        let e = run(&args).expect_err("an error");
        assert!(e.contains(says), "{args:?}: `{e}` does not say `{says}`");
    }
}
