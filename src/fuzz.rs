//! Fuzzing the whole command line: generated and mutated programs through every command, in
//! process.
//!
//! One **input** is a program text. [`exercise`] writes it to a file and runs the command line
//! ([`crate::cli::run_args`], exactly what the binary runs) on it: `check`, then, for the last
//! definition with arguments, tangents and a cotangent drawn for its types, `eval`, `grad`,
//! `jvp`, `vjp` and `show`, each on an engine, route or stage chosen by the seed (all three
//! engines of `eval`; reverse CHAD, dual numbers and transposition for `grad`; every stage of
//! `show`, simplified or not), and for one input in two a `hessian`, `hvp` or `jacobian`. Each command may succeed or fail with an error (exit
//! status 1 or 2, a message on standard error); what must never happen is a panic (caught
//! here and returned as a [`Finding`]), or a crash, an abort or a hang (which take the process
//! down or never return: the offline driver `examples/fuzz_campaign.rs` runs inputs in a child
//! process and records those).
//!
//! Inputs come from [`input`], a pure function of a seed and an index, so every finding replays:
//!
//! * **generated** programs ([`crate::random::program`], under configurations with arrays,
//!   sums, higher-order functions, loops, recursion and near-duplicate subterms), and
//! * **mutated** programs: a [`corpus`] entry (the bundled examples and snippets of every
//!   language form) or a generated program, put through one to four token-level mutations
//!   ([`mutate`]: delete, duplicate, swap, replace by a token of the program or of a dictionary
//!   of keywords, operators and extreme numbers, insert, splice a run of tokens from another
//!   program, repeat a run, flip a byte, truncate). Most mutants fail to parse or check, which
//!   exercises the front end's error paths; the rest are well-typed programs no generator would
//!   write.
//!
//! Used by `tests/fuzz.rs` (a bounded number of inputs in CI), the offline campaign and the
//! cargo-fuzz targets under `fuzz/`.

use crate::cli::{Outcome, run_args};
use crate::random::{self, Config};
use crate::types::Type;
use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::{RngAlgorithm, TestRng, TestRunner};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;

/// The step limit every fuzzed command runs under (`--max-steps`): loops and recursion that
/// would run long stop with an error, so that a hang means chad hangs, not the program.
pub const MAX_STEPS: &str = "20000";

/// The longest program text [`input`] produces: large inputs are the deep-input tests' job
/// (`tests/reliability.rs`); the campaign wants many small ones.
pub const MAX_LEN: usize = 4096;

/// The bundled example programs and one snippet per language form, the seeds that mutation
/// starts from.
pub fn corpus() -> Vec<&'static str> {
    vec![
        include_str!("../examples/fig1a.chad"),
        include_str!("../examples/fig1b.chad"),
        include_str!("../examples/fig2a.chad"),
        include_str!("../examples/fig2b.chad"),
        include_str!("../examples/square.chad"),
        include_str!("../examples/ml.chad"),
        include_str!("../examples/mlp.chad"),
        include_str!("../examples/gmm.chad"),
        include_str!("../examples/loops.chad"),
        include_str!("../examples/recursion.chad"),
        include_str!("../examples/nested/newton.chad"),
        include_str!("../examples/native-crate/model.chad"),
        SNIPPETS,
    ]
}

/// One definition per language form the examples do not all show: sums and `case`, type
/// aliases, custom derivatives, derivatives inside programs, `while`, `iterate`, `scan`,
/// `def rec`, operators and the numeric builtins.
const SNIPPETS: &str = r#"
type Vec = Array Real

def softplus2 (x : Real) : Real = log (1.0 + exp x)
  with jvp (dx : Real) = dx * sigmoid x
  with vjp (ct : Real) = ct * sigmoid x

def pick (s : Real + Real) (y : Real) : Real =
  case s of inl a -> a * y | inr b -> b + y

def ops (x : Real) (i : Int) (xs : Vec) : Real =
  let n = length xs in
  let m = if n > 0 then maximum xs else 0.0 in
  x ^ 2 + pi * atan2 x 1.0 + log1p (abs x) + expm1 x + erf x + relu x + sign x
    + toReal (i % 3) + m + mean (concat xs (reverse xs)) + sum (slice xs 0 1)

def closures (x : Real) (xs : Vec) : Real =
  let f = \(y : Real) -> x * y + sin y in
  sum (map f xs) + sum (map2 (\a b -> a * b) xs (map f xs))

def second (x : Real) : Real =
  grad (\y -> x * y * y) x + fst (jvp (\z -> z * z) x 1.0)

def rec fact (n : Int) (x : Real) : Real =
  if n <= 0 then x else x * fact (n - 1) x

def loopy (x : Real) (n : Int) : Real =
  let a = fold (\acc v -> acc * 0.5 + v) 0.0 (build n (\i -> x * toReal i)) in
  let b = iterate 5 (\s -> s * 0.9 + x) x in
  let c = while (\s -> s < 10.0) (\s -> s * 2.0 + 1.0) (abs x) in
  a + b + c + fact 3 x + softplus2 x + pick (inl x) x + second x
"#;

/// A small deterministic generator (SplitMix64) for the mutation choices.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// The generator for a seed.
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x9e37_79b9_7f4a_7c15)
    }

    /// The next 64 random bits.
    pub fn bits(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.bits() % n as u64) as usize
    }

    /// One of `xs` (non-empty).
    pub fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len())]
    }
}

/// Tokens a mutation may insert: keywords, types, builtins, punctuation and numbers at the
/// edges of what the language accepts.
pub const DICTIONARY: &[&str] = &[
    "def",
    "rec",
    "let",
    "in",
    "if",
    "then",
    "else",
    "case",
    "of",
    "inl",
    "inr",
    "fun",
    "\\",
    "->",
    "=",
    ":",
    "(",
    ")",
    "[",
    "]",
    ",",
    "|",
    "type",
    "with",
    "jvp",
    "vjp",
    "grad",
    "result",
    "fold",
    "scan",
    "iterate",
    "while",
    "loop",
    "map",
    "map2",
    "build",
    "sum",
    "length",
    "replicate",
    "fst",
    "snd",
    "Real",
    "Int",
    "Bool",
    "Array",
    "Unit",
    "()",
    "+",
    "-",
    "*",
    "/",
    "^",
    "%",
    "<",
    "<=",
    ">",
    ">=",
    "==",
    "!=",
    "&&",
    "||",
    "!",
    "0",
    "1",
    "-1",
    "0.0",
    "-0.0",
    "2.5",
    "1e308",
    "-1e308",
    "1e-320",
    "9223372036854775807",
    "-9223372036854775808",
    "99999999999999999999",
    "100000",
    "268435456",
    "true",
    "false",
    "sin",
    "exp",
    "log",
    "sqrt",
    "pow",
    "max",
    "abs",
    "x",
    "xs",
    "f",
    "--",
    "{-",
    "-}",
    "\"",
    "é",
    "\u{0}",
];

/// One token-level mutation site: the byte ranges of the tokens of `text` (identifiers and
/// numbers, operator runs, single punctuation, whitespace runs left out).
fn tokens(text: &str) -> Vec<(usize, usize)> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    let class = |c: u8| {
        if c.is_ascii_alphanumeric() || c == b'_' || c == b'.' || c == b'\'' || c >= 0x80 {
            0
        } else if c.is_ascii_whitespace() {
            1
        } else if b"()[],".contains(&c) {
            2
        } else {
            3
        }
    };
    while i < b.len() {
        let k = class(b[i]);
        let mut j = i + 1;
        if k != 2 {
            while j < b.len() && class(b[j]) == k {
                j += 1;
            }
        }
        if k != 1 {
            out.push((i, j));
        }
        i = j;
    }
    out
}

/// `text` with one to four token-level mutations, `other` the donor of splices. The result is
/// cut at a character boundary below [`MAX_LEN`].
pub fn mutate(text: &str, other: &str, rng: &mut Rng) -> String {
    let mut s = text.to_string();
    for _ in 0..1 + rng.below(4) {
        s = mutate_once(&s, other, rng);
    }
    truncate(s, MAX_LEN)
}

fn truncate(mut s: String, n: usize) -> String {
    if s.len() > n {
        let mut k = n;
        while !s.is_char_boundary(k) {
            k -= 1;
        }
        s.truncate(k);
    }
    s
}

fn mutate_once(text: &str, other: &str, rng: &mut Rng) -> String {
    let ts = tokens(text);
    if ts.is_empty() {
        return format!("{text} {}", rng.pick(DICTIONARY));
    }
    let (a, b) = rng.pick(&ts);
    let tok = |t: (usize, usize)| &text[t.0..t.1];
    let splice =
        |at: usize, to: usize, with: &str| format!("{}{}{}", &text[..at], with, &text[to..]);
    match rng.below(11) {
        // Delete a token.
        0 => splice(a, b, ""),
        // Duplicate it.
        1 => splice(a, b, &format!("{} {}", tok((a, b)), tok((a, b)))),
        // Replace it by another token of the program (an identifier used elsewhere, a
        // literal of another type, ...).
        2 => splice(a, b, tok(rng.pick(&ts))),
        // Replace it by a dictionary token.
        3 => splice(a, b, rng.pick(DICTIONARY)),
        // Insert a dictionary token before it.
        4 => splice(a, a, &format!("{} ", rng.pick(DICTIONARY))),
        // Swap two tokens.
        5 => {
            let (c, d) = rng.pick(&ts);
            if c >= b {
                format!(
                    "{}{}{}{}{}",
                    &text[..a],
                    tok((c, d)),
                    &text[b..c],
                    tok((a, b)),
                    &text[d..]
                )
            } else {
                splice(a, b, tok((c, d)))
            }
        }
        // Replace a run of tokens by a run from the donor.
        6 => {
            let os = tokens(other);
            if os.is_empty() {
                return splice(a, b, "");
            }
            let k = rng.below(os.len());
            let l = (k + 1 + rng.below(12)).min(os.len());
            let end = ts[(ts.iter().position(|&t| t == (a, b)).unwrap_or(0) + rng.below(6))
                .min(ts.len() - 1)]
            .1;
            splice(a, end.max(b), &other[os[k].0..os[l - 1].1])
        }
        // Repeat a run of tokens a few times (grows nesting: `sin sin sin`, `((((`).
        7 => {
            let i = ts.iter().position(|&t| t == (a, b)).unwrap_or(0);
            let j = (i + rng.below(4)).min(ts.len() - 1);
            let run = &text[a..ts[j].1];
            splice(a, a, &format!("{run} ").repeat(1 + rng.below(16)))
        }
        // Flip a byte (keeping the text UTF-8).
        8 => {
            let mut bytes = text.as_bytes().to_vec();
            let i = rng.below(bytes.len());
            bytes[i] ^= 1 << rng.below(7);
            String::from_utf8(bytes).unwrap_or_else(|_| splice(a, b, ""))
        }
        // Truncate.
        9 => text[..a].to_string(),
        // Negate or change a number's magnitude, or wrap the token in a unary builtin.
        _ => {
            let t = tok((a, b));
            if t.starts_with(|c: char| c.is_ascii_digit()) {
                splice(
                    a,
                    b,
                    rng.pick(&["0", "-1", "1e300", "0.0", "(0.0 - 1.0)", "7"]),
                )
            } else {
                splice(
                    a,
                    b,
                    &format!(
                        "({} {t})",
                        rng.pick(&["sin", "exp", "log", "sqrt", "-", "fst", "length", "sum"])
                    ),
                )
            }
        }
    }
}

/// Generator configurations the campaign cycles through.
fn config(k: usize) -> Config {
    let d = Config::default();
    match k % 7 {
        0 => d,
        1 => Config {
            array_bias: true,
            ..d
        },
        2 => Config {
            sum_bias: true,
            ..d
        },
        3 => Config { loops: true, ..d },
        4 => Config {
            recursion: true,
            ..d
        },
        5 => Config {
            near_duplicates: true,
            result: Some(Type::Real),
            ..d
        },
        _ => Config {
            higher_order_result: true,
            depth: 5,
            ..d
        },
    }
}

fn runner(seed: u64) -> TestRunner {
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    bytes[8..16].copy_from_slice(&(!seed).to_le_bytes());
    TestRunner::new_with_rng(
        proptest::test_runner::Config::default(),
        TestRng::from_seed(RngAlgorithm::ChaCha, &bytes),
    )
}

/// A generated program's text (the generator's printer).
fn generated(seed: u64) -> String {
    let mut r = runner(seed);
    let strategy = random::program(config(seed as usize));
    match strategy.new_tree(&mut r) {
        Ok(tree) => tree.current().source(),
        Err(_) => SNIPPETS.to_string(),
    }
}

/// The program text of input `index` of the campaign seeded by `seed`: a generated program
/// (one in four) or a mutant of a corpus entry or of a generated program. A pure function of
/// its arguments.
pub fn input(seed: u64, index: u64) -> String {
    let mut rng = Rng::new(seed.wrapping_mul(0x1000_0000_01b3) ^ index);
    let corpus = corpus();
    let base = |rng: &mut Rng| -> String {
        if rng.below(3) == 0 {
            generated(rng.bits())
        } else {
            rng.pick(&corpus).to_string()
        }
    };
    if rng.below(4) == 0 {
        return generated(rng.bits());
    }
    let text = base(&mut rng);
    let donor = base(&mut rng);
    mutate(&text, &donor, &mut rng)
}

/// A panic inside chad: the command line that panicked and the panic's message.
#[derive(Clone, Debug)]
pub struct Finding {
    /// The arguments after `chad`.
    pub command: Vec<String>,
    /// The panic's payload, when it is a string.
    pub message: String,
}

/// What [`exercise`] ran: each command line with its outcome, and any panics.
#[derive(Debug, Default)]
pub struct Report {
    /// Every command run, with its outcome (`None` for one that panicked).
    pub runs: Vec<(Vec<String>, Option<Outcome>)>,
    /// The panics.
    pub findings: Vec<Finding>,
    /// How long each command of `runs` took, in seconds.
    pub seconds: Vec<f64>,
}

impl Report {
    /// How many commands ran to an outcome with the given exit status.
    pub fn count(&self, status: i32) -> usize {
        self.runs
            .iter()
            .filter(|(_, o)| o.as_ref().is_some_and(|o| o.status == status))
            .count()
    }
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(a non-string panic payload)".into())
}

/// Values for the last definition's parameters, tangents and a cotangent, in literal syntax:
/// drawn by [`random::value`] for first-order types; a function-typed parameter gets a
/// number, which the command line must reject with an error.
fn arguments(text: &str, seed: u64) -> Option<(Vec<String>, Vec<String>, Option<String>)> {
    let program = crate::Program::load(text).ok()?;
    let function = program.last().ok()?;
    let entry = function.entry().ok()?;
    let mut r = runner(seed);
    let mut draw = |ty: &Type| -> String {
        if !ty.is_first_order() {
            return "1.0".into();
        }
        match random::value(ty).new_tree(&mut r) {
            Ok(t) => t.current().to_string(),
            Err(_) => "0".into(),
        }
    };
    let args = entry.params.iter().map(|p| draw(&p.ty)).collect();
    let tangents = entry
        .params
        .iter()
        .map(|p| draw(&p.ty.tangent().unwrap_or(Type::Unit)))
        .collect();
    let cot = entry.body.ty.tangent().map(|t| draw(&t));
    Some((args, tangents, cot))
}

/// Runs the command line on `text` (written to `file`): `check`, then every command on the
/// last definition with drawn arguments (`seed`). Panics are caught and reported; a crash or
/// hang is the caller's to notice.
pub fn exercise(text: &str, file: &Path, seed: u64) -> Report {
    let mut report = Report::default();
    if std::fs::write(file, text).is_err() {
        return report;
    }
    let path = file.display().to_string();
    let run = |args: Vec<String>, report: &mut Report| -> Option<Outcome> {
        let t0 = std::time::Instant::now();
        let result = catch_unwind(AssertUnwindSafe(|| run_args(args.clone())));
        report.seconds.push(t0.elapsed().as_secs_f64());
        match result {
            Ok(o) => {
                report.runs.push((args, Some(o.clone())));
                Some(o)
            }
            Err(p) => {
                report.findings.push(Finding {
                    command: args.clone(),
                    message: panic_message(p.as_ref()),
                });
                report.runs.push((args, None));
                None
            }
        }
    };
    let checked = run(vec!["check".into(), path.clone()], &mut report);
    if checked.is_none_or(|o| o.status != 0) {
        return report;
    }
    let Some((args, tangents, cot)) = arguments(text, seed) else {
        return report;
    };
    let s = |x: &str| x.to_string();
    let with = |cmd: &[&str], extra: &[String]| -> Vec<String> {
        let mut v: Vec<String> = cmd.iter().map(|c| c.to_string()).collect();
        v.push(path.clone());
        for a in &args {
            v.push(s("--arg"));
            v.push(a.clone());
        }
        v.push(s("--max-steps"));
        v.push(s(MAX_STEPS));
        v.extend(extra.iter().cloned());
        v
    };
    let tans: Vec<String> = tangents
        .iter()
        .flat_map(|t| [s("--tangent"), t.clone()])
        .collect();
    let cots: Vec<String> = cot
        .iter()
        .flat_map(|c| [s("--cotangent"), c.clone()])
        .collect();
    // Every input runs `eval`, `grad`, `jvp`, `vjp` and `show`; which engine, route or stage
    // (and whether a second-order command follows) rotates with the seed, so that a campaign
    // covers all of them at a third of the cost of running each on every input.
    let mut pick = Rng::new(seed);
    let eval: &[&[&str]] = &[
        &["eval"],
        &["eval", "--engine", "direct"],
        &["eval", "--engine", "ccc"],
    ];
    let grad: &[&[&str]] = &[
        &["grad"],
        &["grad", "--engine", "dual"],
        &["grad", "--via", "transpose"],
    ];
    let vjp: &[&[&str]] = &[&["vjp"], &["vjp", "--via", "transpose"]];
    let mut lines = vec![
        with(pick.pick(eval), &[]),
        with(pick.pick(grad), &[]),
        with(&["jvp"], &tans),
        with(pick.pick(vjp), &cots),
    ];
    match pick.below(6) {
        0 => lines.push(with(&["hessian"], &[])),
        1 => lines.push(with(&["hvp"], &tans)),
        2 => lines.push(with(&["jacobian"], &[])),
        _ => {}
    }
    let stages = ["source", "ccc", "forward", "reverse", "transposed", "ir"];
    let mut show = vec![s("show"), path.clone(), s("--stage"), s(pick.pick(&stages))];
    if pick.below(4) == 0 {
        show.push(s("--no-simplify"));
    }
    lines.push(show);
    for line in lines {
        run(line, &mut report);
    }
    report
}
