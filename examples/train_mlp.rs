//! Trains the multilayer perceptron of `examples/mlp.chad` by stochastic gradient descent with
//! momentum, using reverse CHAD through the library:
//!
//! ```sh
//! cargo run --release --example train_mlp
//! ```
//!
//! The program is loaded with [`chad::internals::source::load`], its `loss` definition is differentiated
//! once ([`chad::internals::ad::Vjp::new`], simplified with [`chad::internals::simplify::simplify`]) and the derivative
//! is then run once per step ([`chad::internals::ad::Vjp::grad`]) on a batch of points; the gradients of the
//! weights, returned as [`Value`]s of the weights' shapes, update them. The data set is two
//! interleaving half-moons (two classes in the plane) from a small deterministic generator, and
//! the initial weights come from the same generator, so every run prints the same numbers. Every
//! few steps it prints the loss on the whole data set (by the evaluator, no derivative) and the
//! training accuracy; it exits with status 1 if the loss did not fall below half its initial
//! value.
//!
//! `tests/examples.rs` includes this file to test that training lowers the loss.

use chad::Source;
use chad::Value;
use chad::internals::ad::Vjp;
use chad::internals::source::term::Entry;
use chad::internals::types::Type;
use std::process::ExitCode;

/// The text of `examples/mlp.chad`.
pub const PROGRAM: &str = include_str!("mlp.chad");

/// The name the program is reported under in errors.
pub const FILE: &str = "examples/mlp.chad";

/// The deterministic pseudo-random generator for data and initial weights: the library's
/// SplitMix64 ([`chad::internals::bench::Rng`]), so a seed gives the same numbers everywhere.
pub use chad::internals::bench::Rng as SplitMix64;

/// A labelled data set: points in the plane and their classes (0 or 1).
pub struct Data {
    /// The inputs, one `[x, y]` per point.
    pub xs: Vec<[f64; 2]>,
    /// The class of each input.
    pub ys: Vec<i64>,
}

impl Data {
    /// The number of points.
    pub fn len(&self) -> usize {
        self.ys.len()
    }

    /// Whether there are no points.
    pub fn is_empty(&self) -> bool {
        self.ys.is_empty()
    }

    /// `len` consecutive points from `start` on, wrapping around at the end.
    pub fn batch(&self, start: usize, len: usize) -> Data {
        let at = |i: usize| (start + i) % self.len();
        Data {
            xs: (0..len).map(|i| self.xs[at(i)]).collect(),
            ys: (0..len).map(|i| self.ys[at(i)]).collect(),
        }
    }

    /// The inputs and classes as arguments of `loss` (`Array (Array Real)`, `Array Int`).
    pub fn args(&self) -> [Value; 2] {
        let xs = self.xs.iter().map(|p| Value::reals(p.to_vec())).collect();
        let ys = self.ys.iter().map(|&y| Value::Int(y)).collect();
        [
            Value::array(&Type::array(Type::Real), xs),
            Value::array(&Type::Int, ys),
        ]
    }
}

/// Two interleaving half-moons, `per_class` points each, alternating between the classes:
/// class 0 on the upper arc `(cos t, sin t)`, class 1 on the lower arc `(1 - cos t, 1/2 - sin t)`,
/// `t` uniform in `[0, π]`, each coordinate moved by uniform noise in `[-noise, noise)`, and
/// everything shifted so that the data is centred near the origin.
pub fn two_moons(per_class: usize, noise: f64, seed: u64) -> Data {
    let mut rng = SplitMix64::new(seed);
    let mut data = Data {
        xs: Vec::with_capacity(2 * per_class),
        ys: Vec::with_capacity(2 * per_class),
    };
    for _ in 0..per_class {
        for class in 0..2 {
            let t = rng.uniform(0.0, std::f64::consts::PI);
            let (x, y) = if class == 0 {
                (t.cos(), t.sin())
            } else {
                (1.0 - t.cos(), 0.5 - t.sin())
            };
            let (dx, dy) = (rng.uniform(-noise, noise), rng.uniform(-noise, noise));
            data.xs.push([x + dx - 0.5, y + dy - 0.25]);
            data.ys.push(class);
        }
    }
    data
}

/// Initial weights `[w1, b1, w2, b2]` for `inputs → hidden → classes`: each weight uniform in
/// `±2/√fan_in`, biases zero.
pub fn initial_weights(inputs: usize, hidden: usize, classes: usize, seed: u64) -> Vec<Value> {
    let mut rng = SplitMix64::new(seed);
    let mut matrix = |rows: usize, cols: usize| {
        let bound = 2.0 / (cols as f64).sqrt();
        let rows = (0..rows)
            .map(|_| Value::reals((0..cols).map(|_| rng.uniform(-bound, bound)).collect()))
            .collect();
        Value::array(&Type::array(Type::Real), rows)
    };
    let w1 = matrix(hidden, inputs);
    let w2 = matrix(classes, hidden);
    vec![
        w1,
        Value::reals(vec![0.0; hidden]),
        w2,
        Value::reals(vec![0.0; classes]),
    ]
}

/// A value of the same shape as `a` and `b` (reals, arrays of reals, arrays of those) whose
/// reals are `f` of the corresponding reals of `a` and `b`.
pub fn zip_reals(a: &Value, b: &Value, f: &dyn Fn(f64, f64) -> f64) -> Value {
    match (a, b) {
        (Value::Real(x), Value::Real(y)) => Value::Real(f(*x, *y)),
        (Value::RealArray(xs), Value::RealArray(ys)) => {
            assert_eq!(xs.len(), ys.len(), "same shapes");
            Value::reals(xs.iter().zip(ys.iter()).map(|(x, y)| f(*x, *y)).collect())
        }
        (Value::Array(xs), Value::Array(ys)) => {
            assert_eq!(xs.len(), ys.len(), "same shapes");
            Value::array_of(
                xs.iter()
                    .zip(ys.iter())
                    .map(|(x, y)| zip_reals(x, y, f))
                    .collect(),
            )
        }
        _ => panic!("internal error: {a} and {b} have different shapes"),
    }
}

/// Stochastic gradient descent with momentum on `loss` of `examples/mlp.chad`.
pub struct Trainer {
    /// The simplified reverse derivative of `loss`, built once.
    vjp: Vjp,
    /// `loss`, evaluated (without derivatives) to report progress.
    loss: Entry,
    /// `logits`, for the accuracy.
    logits: Entry,
    /// The learning rate.
    pub rate: f64,
    /// The momentum coefficient (0 for plain gradient descent).
    pub momentum: f64,
    /// The weights `[w1, b1, w2, b2]`.
    pub weights: Vec<Value>,
    /// The running average of the gradients, one per weight.
    velocity: Vec<Value>,
}

impl Trainer {
    /// Loads the program, differentiates its `loss` definition, and starts from `weights`.
    /// Errors: the program does not load, lacks `loss` or `logits`, or AD does not support it.
    pub fn new(
        program: &str,
        weights: Vec<Value>,
        rate: f64,
        momentum: f64,
    ) -> chad::Result<Trainer> {
        let prog =
            chad::internals::source::load(program, &chad::internals::prim::Registry::builtin())?;
        let find = |name: &str| {
            prog.find(name).map(|i| prog.entry(i)).ok_or_else(|| {
                chad::Error::new(
                    chad::ErrorKind::Input,
                    format!("the program has no definition `{name}`"),
                )
            })
        };
        let loss = find("loss")?;
        let logits = find("logits")?;
        let vjp = Vjp::new(&loss)?.map_body(chad::internals::simplify::simplify);
        let velocity = weights
            .iter()
            .map(|w| zip_reals(w, w, &|_, _| 0.0))
            .collect();
        Ok(Trainer {
            vjp,
            loss,
            logits,
            rate,
            momentum,
            weights,
            velocity,
        })
    }

    fn args(&self, data: &Data) -> Vec<Value> {
        self.weights.iter().cloned().chain(data.args()).collect()
    }

    /// One step on the batch `data`: the gradient `g` of the loss, then
    /// `velocity = momentum · velocity + g` and `weights -= rate · velocity`. Returns the loss on
    /// the batch before the step.
    pub fn step(&mut self, data: &Data) -> chad::Result<f64> {
        let (loss, grads) = self.vjp.grad(&self.args(data))?;
        let (rate, momentum) = (self.rate, self.momentum);
        for ((w, v), g) in self.weights.iter_mut().zip(&mut self.velocity).zip(&grads) {
            *v = zip_reals(v, g, &|v, g| momentum * v + g);
            *w = zip_reals(w, v, &|w, v| w - rate * v);
        }
        Ok(loss.expect_real())
    }

    /// The loss on `data` at the current weights (evaluated, no derivative).
    pub fn loss(&self, data: &Data) -> chad::Result<f64> {
        Ok(chad::internals::eval::eval_entry(&self.loss, &self.args(data))?.expect_real())
    }

    /// The fraction of the points of `data` whose largest logit is their class (`logits` run
    /// by the evaluator).
    pub fn accuracy(&self, data: &Data) -> chad::Result<f64> {
        let mut right = 0;
        for (x, &y) in data.xs.iter().zip(&data.ys) {
            let mut args = self.weights.clone();
            args.push(Value::reals(x.to_vec()));
            let z = chad::internals::eval::eval_entry(&self.logits, &args)?;
            let z = z.expect_reals();
            let best = (0..z.len())
                .max_by(|&a, &b| z[a].total_cmp(&z[b]))
                .expect("at least one class");
            right += usize::from(best as i64 == y);
        }
        Ok(right as f64 / data.ys.len() as f64)
    }
}

/// Points per class in the data set.
pub const PER_CLASS: usize = 32;
/// Hidden units.
pub const HIDDEN: usize = 8;
/// Points per gradient step: steps cycle through the data in batches of this size.
pub const BATCH: usize = 8;
/// Gradient steps.
pub const STEPS: usize = 150;
/// The learning rate.
pub const RATE: f64 = 0.3;
/// The momentum coefficient.
pub const MOMENTUM: f64 = 0.8;

fn run() -> chad::Result<bool> {
    let data = two_moons(PER_CLASS, 0.1, 7);
    let weights = initial_weights(2, HIDDEN, 2, 42);
    let mut trainer = Trainer::new(PROGRAM, weights, RATE, MOMENTUM)?;
    println!(
        "two moons: {} points; MLP 2 → {HIDDEN} (tanh) → 2, softmax cross-entropy;\n\
         stochastic gradient descent: batches of {BATCH}, rate {RATE}, momentum {MOMENTUM}",
        data.len()
    );
    let start = std::time::Instant::now();
    let initial = trainer.loss(&data)?;
    println!("{:>5}  {:>8}  {:>8}", "step", "loss", "accuracy");
    for step in 0..=STEPS {
        if step % 15 == 0 {
            let (loss, acc) = (trainer.loss(&data)?, trainer.accuracy(&data)?);
            println!("{step:>5}  {loss:>8.5}  {:>7.1}%", 100.0 * acc);
        }
        if step < STEPS {
            trainer.step(&data.batch(step * BATCH, BATCH))?;
        }
    }
    let last = trainer.loss(&data)?;
    println!(
        "{STEPS} steps in {:.2} s; loss on all points {initial:.5} → {last:.5}",
        start.elapsed().as_secs_f64()
    );
    Ok(last < 0.5 * initial)
}

fn main() -> ExitCode {
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("error: training did not halve the loss");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("{}", e.render(Some(&Source::new(FILE, PROGRAM))));
            ExitCode::FAILURE
        }
    }
}
