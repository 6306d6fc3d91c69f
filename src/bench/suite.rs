//! The benchmark suite: program families, their sizes and their arguments, read from one
//! manifest (`benches/programs/suite.json`, [`Suite::default_path`]).
//!
//! The manifest is a JSON object `{"families": [F, ...]}`; each family is
//!
//! ```json
//! {
//!   "name": "gmm",
//!   "description": "ADBench GMM objective, d = 10, K = 25",
//!   "file": "../../examples/gmm.chad",
//!   "def": "gmm",
//!   "size": "N",
//!   "sizes": [100, 300, 1000],
//!   "fixed": {"D": 10, "K": 25},
//!   "args": [{"reals": "K"}, {"reals": ["K", "D"]}, {"reals": ["K", "D*(D+1)/2"]},
//!            {"reals": ["N", "D"]}, {"value": 1.0}, {"value": 0}],
//!   "native": "gmm"
//! }
//! ```
//!
//! * `file` (relative to the manifest's directory) or `generator` (a name [`super::programs`]
//!   knows, called with the size) gives the program; `def` names the entry point (default: the
//!   last definition).
//! * `size` names the variable that varies and `sizes` its values; `fixed` gives other variables.
//!   A *case* is a family at one size.
//! * `args` describes one argument per parameter in a small shape language:
//!   - `{"reals": DIMS}`: reals uniform in `[-1, 1)`, or in `"range": [lo, hi]`;
//!   - `{"ints": DIMS, "below": DIM}`: integers uniform in `0 .. below`;
//!   - `{"value": V}`: the JSON value `V` itself (the `--args-file` format);
//!   - `{"tuple": [SPEC, ...]}`: a tuple of the components.
//!
//!   `DIMS` is one dimension or a list (`[]` is a scalar, `"n"` an array of n, `["N", "D"]` an
//!   array of N arrays of D); a dimension is an integer or an arithmetic expression over the
//!   variables (`+ - * /` on integers, `/` truncating, parentheses).
//! * `native` names the hand-written Rust baseline for this family, if there is one
//!   (`examples/native_baselines.rs`).
//! * `description` is free text.
//!
//! Arguments are deterministic: argument k of family F draws from [`Rng::from_name`]`("F/k")`,
//! elements in row-major order. So the criterion benchmark (`benches/suite.rs`), the files
//! [`Suite::write`] produces (`cargo run --release --example bench_suite -- write DIR`, used by
//! `benches/perf_table.py`) and the tests all see the same programs and inputs.

use super::{Bench, Rng, programs};
use crate::error::{Error, ErrorKind, Result};
use crate::prim::Registry;
use crate::source::term::Entry;
use crate::value::Value;
use serde_json::{Value as J, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Integer variables of a case: the family's fixed ones and its size.
pub type Vars = BTreeMap<String, i64>;

/// The whole suite.
#[derive(Clone, Debug)]
pub struct Suite {
    /// The families, in manifest order.
    pub families: Vec<Family>,
}

/// Where a family's program comes from.
#[derive(Clone, Debug)]
pub enum ProgramSource {
    /// A `.chad` file (resolved against the manifest's directory).
    File(PathBuf),
    /// A generator of [`programs`], called with the size.
    Generator(String),
}

/// A family of programs: one program (or generator) at several sizes.
#[derive(Clone, Debug)]
pub struct Family {
    /// The family's name (benchmark ids, file names, `--only`).
    pub name: String,
    /// Free text for tables.
    pub description: String,
    /// The program.
    pub source: ProgramSource,
    /// The entry point (the last definition if `None`).
    pub def: Option<String>,
    /// The name of the size variable.
    pub size: String,
    /// Its values, smallest first.
    pub sizes: Vec<usize>,
    /// The other variables.
    pub fixed: Vars,
    /// One argument description per parameter.
    pub args: Vec<Spec>,
    /// The name of the hand-written Rust baseline, if any.
    pub native: Option<String>,
}

/// The description of one argument (see the module documentation).
#[derive(Clone, Debug)]
pub enum Spec {
    /// Reals uniform in `[lo, hi)` in an array of the given dimensions (none: a scalar).
    Reals {
        /// The dimensions, outermost first.
        dims: Vec<Dim>,
        /// The lower bound.
        lo: f64,
        /// The upper bound.
        hi: f64,
    },
    /// Integers uniform in `0 .. below`.
    Ints {
        /// The dimensions, outermost first.
        dims: Vec<Dim>,
        /// The exclusive upper bound.
        below: Dim,
    },
    /// A fixed value (in the `--args-file` JSON format).
    Value(J),
    /// A tuple.
    Tuple(Vec<Spec>),
}

/// A dimension: an integer expression over the case's variables.
#[derive(Clone, Debug)]
pub struct Dim(String);

impl Dim {
    /// The value of the dimension for the given variables.
    pub fn eval(&self, vars: &Vars) -> Result<i64> {
        let tokens = tokenize(&self.0)?;
        let mut p = Expr {
            tokens: &tokens,
            pos: 0,
            vars,
            text: &self.0,
        };
        let v = p.sum()?;
        if p.pos != tokens.len() {
            return Err(p.error("unexpected text after the expression"));
        }
        Ok(v)
    }
}

fn manifest_error(msg: impl Into<String>) -> Error {
    Error::new(ErrorKind::Input, msg)
}

#[derive(Debug, PartialEq)]
enum Token {
    Num(i64),
    Name(String),
    Op(char),
}

fn tokenize(s: &str) -> Result<Vec<Token>> {
    let mut out = Vec::new();
    let cs: Vec<char> = s.chars().collect();
    let mut i = 0;
    while i < cs.len() {
        let c = cs[i];
        if c.is_whitespace() {
            i += 1;
        } else if c.is_ascii_digit() {
            let start = i;
            while i < cs.len() && cs[i].is_ascii_digit() {
                i += 1;
            }
            let text: String = cs[start..i].iter().collect();
            let n = text
                .parse()
                .map_err(|_| manifest_error(format!("number too large in dimension `{s}`")))?;
            out.push(Token::Num(n));
        } else if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < cs.len() && (cs[i].is_alphanumeric() || cs[i] == '_') {
                i += 1;
            }
            out.push(Token::Name(cs[start..i].iter().collect()));
        } else if "+-*/()".contains(c) {
            out.push(Token::Op(c));
            i += 1;
        } else {
            return Err(manifest_error(format!(
                "unexpected `{c}` in dimension `{s}`"
            )));
        }
    }
    Ok(out)
}

/// A recursive-descent evaluator of dimension expressions.
struct Expr<'a> {
    tokens: &'a [Token],
    pos: usize,
    vars: &'a Vars,
    text: &'a str,
}

impl Expr<'_> {
    fn error(&self, what: &str) -> Error {
        manifest_error(format!("{what} in dimension `{}`", self.text))
    }

    fn eat(&mut self, op: char) -> bool {
        if self.tokens.get(self.pos) == Some(&Token::Op(op)) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn arith(&self, r: Option<i64>) -> Result<i64> {
        r.ok_or_else(|| self.error("overflow or division by zero"))
    }

    fn sum(&mut self) -> Result<i64> {
        let mut v = self.product()?;
        loop {
            if self.eat('+') {
                let w = self.product()?;
                v = self.arith(v.checked_add(w))?;
            } else if self.eat('-') {
                let w = self.product()?;
                v = self.arith(v.checked_sub(w))?;
            } else {
                return Ok(v);
            }
        }
    }

    fn product(&mut self) -> Result<i64> {
        let mut v = self.atom()?;
        loop {
            if self.eat('*') {
                let w = self.atom()?;
                v = self.arith(v.checked_mul(w))?;
            } else if self.eat('/') {
                let w = self.atom()?;
                v = self.arith(v.checked_div(w))?;
            } else {
                return Ok(v);
            }
        }
    }

    fn atom(&mut self) -> Result<i64> {
        if self.eat('(') {
            let v = self.sum()?;
            if !self.eat(')') {
                return Err(self.error("missing `)`"));
            }
            return Ok(v);
        }
        if self.eat('-') {
            let v = self.atom()?;
            return self.arith(v.checked_neg());
        }
        match self.tokens.get(self.pos) {
            Some(Token::Num(n)) => {
                self.pos += 1;
                Ok(*n)
            }
            Some(Token::Name(x)) => {
                self.pos += 1;
                self.vars.get(x).copied().ok_or_else(|| {
                    self.error(&format!(
                        "unknown variable `{x}` (known: {})",
                        self.vars.keys().cloned().collect::<Vec<_>>().join(", ")
                    ))
                })
            }
            _ => Err(self.error("expected a number, a variable or `(`")),
        }
    }
}

impl Suite {
    /// The manifest of this repository, `benches/programs/suite.json`.
    pub fn default_path() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/programs/suite.json")
    }

    /// The suite of this repository ([`Suite::default_path`]).
    pub fn load_default() -> Result<Suite> {
        Suite::load(&Suite::default_path())
    }

    /// Reads a manifest; `file` paths are resolved against its directory.
    pub fn load(path: &Path) -> Result<Suite> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| manifest_error(format!("cannot read `{}`: {e}", path.display())))?;
        let json: J = serde_json::from_str(&text)
            .map_err(|e| manifest_error(format!("`{}` is not valid JSON: {e}", path.display())))?;
        let dir = path.parent().unwrap_or(Path::new("."));
        Suite::from_json(&json, dir).map_err(|e| e.prefixed(&format!("{}: ", path.display())))
    }

    /// Reads a manifest from JSON; `file` paths are resolved against `dir`.
    pub fn from_json(json: &J, dir: &Path) -> Result<Suite> {
        let families = json
            .get("families")
            .and_then(J::as_array)
            .ok_or_else(|| manifest_error("the manifest needs a `families` array"))?;
        let families = families
            .iter()
            .map(|f| family(f, dir))
            .collect::<Result<Vec<_>>>()?;
        for (i, f) in families.iter().enumerate() {
            if families[..i].iter().any(|g| g.name == f.name) {
                return Err(manifest_error(format!("two families named `{}`", f.name)));
            }
        }
        Ok(Suite { families })
    }

    /// The family named `name`.
    pub fn family(&self, name: &str) -> Option<&Family> {
        self.families.iter().find(|f| f.name == name)
    }

    /// Every case: each family at each of its sizes, in manifest order.
    pub fn cases(&self) -> impl Iterator<Item = Case<'_>> {
        self.families.iter().flat_map(Family::cases)
    }

    /// Writes every case whose family `select` accepts to `dir` (created if needed): the
    /// arguments as `FAMILY-SIZE.args.json` (the `--args-file` format), generated programs as
    /// `FAMILY-SIZE.chad` (programs from files are referred to where they are), and an index
    /// `index.json`, `{"cases": [{"family", "description", "size_var", "size", "label",
    /// "program", "def", "args", "native"}, ...]}` with absolute paths, which it also returns.
    /// Every program is type-checked and every argument checked against its parameter.
    pub fn write(&self, dir: &Path, select: impl Fn(&Family) -> bool) -> Result<J> {
        let io = |e: std::io::Error, p: &Path| {
            manifest_error(format!("cannot write `{}`: {e}", p.display()))
        };
        std::fs::create_dir_all(dir).map_err(|e| io(e, dir))?;
        let dir = std::fs::canonicalize(dir).map_err(|e| io(e, dir))?;
        let mut index = Vec::new();
        for case in self.cases().filter(|c| select(c.family)) {
            let f = case.family;
            let stem = format!("{}-{}", f.name, case.size);
            let program = match &f.source {
                ProgramSource::File(p) => std::fs::canonicalize(p)
                    .map_err(|e| manifest_error(format!("cannot read `{}`: {e}", p.display())))?,
                ProgramSource::Generator(_) => {
                    let p = dir.join(format!("{stem}.chad"));
                    std::fs::write(&p, case.text()?).map_err(|e| io(e, &p))?;
                    p
                }
            };
            let entry = case.entry()?;
            let json = case.args_json()?;
            case.args_of(&entry, &json)?;
            let args = dir.join(format!("{stem}.args.json"));
            std::fs::write(&args, J::Array(json).to_string()).map_err(|e| io(e, &args))?;
            index.push(json!({
                "family": f.name,
                "description": f.description,
                "size_var": f.size,
                "size": case.size,
                "label": case.label(),
                "program": program,
                "def": &*entry.name,
                "args": args,
                "native": f.native,
            }));
        }
        let index = json!({ "cases": index });
        let p = dir.join("index.json");
        std::fs::write(&p, format!("{index:#}\n")).map_err(|e| io(e, &p))?;
        Ok(index)
    }
}

fn family(j: &J, dir: &Path) -> Result<Family> {
    let name = j
        .get("name")
        .and_then(J::as_str)
        .ok_or_else(|| manifest_error("every family needs a `name` string"))?
        .to_string();
    let fail = |msg: String| manifest_error(format!("family `{name}`: {msg}"));
    let string = |key: &str| -> Result<Option<String>> {
        match j.get(key) {
            None | Some(J::Null) => Ok(None),
            Some(J::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(fail(format!("`{key}` must be a string, not `{other}`"))),
        }
    };
    let source = match (string("file")?, string("generator")?) {
        (Some(f), None) => ProgramSource::File(dir.join(f)),
        (None, Some(g)) if programs::GENERATORS.contains(&g.as_str()) => {
            ProgramSource::Generator(g)
        }
        (None, Some(g)) => {
            return Err(fail(format!(
                "unknown generator `{g}` (known: {})",
                programs::GENERATORS.join(", ")
            )));
        }
        _ => return Err(fail("give exactly one of `file` and `generator`".into())),
    };
    let size = string("size")?.ok_or_else(|| fail("`size` (a variable name) is missing".into()))?;
    let sizes = j
        .get("sizes")
        .and_then(J::as_array)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| fail("`sizes` must be a non-empty array".into()))?
        .iter()
        .map(|s| {
            s.as_u64()
                .map(|n| n as usize)
                .ok_or_else(|| fail(format!("a size must be a natural number, not `{s}`")))
        })
        .collect::<Result<Vec<_>>>()?;
    let mut fixed = Vars::new();
    if let Some(obj) = j.get("fixed") {
        let obj = obj
            .as_object()
            .ok_or_else(|| fail("`fixed` must be an object".into()))?;
        for (k, v) in obj {
            let v = v
                .as_i64()
                .ok_or_else(|| fail(format!("variable `{k}` must be an integer, not `{v}`")))?;
            fixed.insert(k.clone(), v);
        }
    }
    let args = j
        .get("args")
        .and_then(J::as_array)
        .ok_or_else(|| fail("`args` must be an array (one description per parameter)".into()))?
        .iter()
        .map(spec)
        .collect::<Result<Vec<_>>>()
        .map_err(|e| e.prefixed(&format!("family `{name}`: ")))?;
    Ok(Family {
        description: string("description")?.unwrap_or_default(),
        def: string("def")?,
        native: string("native")?,
        source,
        size,
        sizes,
        fixed,
        args,
        name,
    })
}

fn dim(j: &J) -> Result<Dim> {
    match j {
        J::Number(n) if n.is_i64() => Ok(Dim(n.to_string())),
        J::String(s) => Ok(Dim(s.clone())),
        other => Err(manifest_error(format!(
            "a dimension is an integer or an expression string, not `{other}`"
        ))),
    }
}

fn dims(j: &J) -> Result<Vec<Dim>> {
    match j {
        J::Array(ds) => ds.iter().map(dim).collect(),
        d => Ok(vec![dim(d)?]),
    }
}

fn spec(j: &J) -> Result<Spec> {
    let obj = j.as_object().ok_or_else(|| {
        manifest_error(format!("an argument description is an object, not `{j}`"))
    })?;
    let known = |keys: &[&str]| -> Result<()> {
        match obj.keys().find(|k| !keys.contains(&k.as_str())) {
            Some(k) => Err(manifest_error(format!(
                "unexpected key `{k}` in argument description `{j}`"
            ))),
            None => Ok(()),
        }
    };
    if let Some(d) = obj.get("reals") {
        known(&["reals", "range"])?;
        let (lo, hi) = match obj.get("range") {
            None => (-1.0, 1.0),
            Some(r) => match r.as_array().map(|r| r.as_slice()) {
                Some([lo, hi]) if lo.is_number() && hi.is_number() => {
                    (lo.as_f64().unwrap_or(0.0), hi.as_f64().unwrap_or(0.0))
                }
                _ => {
                    return Err(manifest_error(format!(
                        "`range` must be [lo, hi], not `{r}`"
                    )));
                }
            },
        };
        return Ok(Spec::Reals {
            dims: dims(d)?,
            lo,
            hi,
        });
    }
    if let Some(d) = obj.get("ints") {
        known(&["ints", "below"])?;
        let below = obj
            .get("below")
            .ok_or_else(|| manifest_error(format!("`{j}` needs `below`")))?;
        return Ok(Spec::Ints {
            dims: dims(d)?,
            below: dim(below)?,
        });
    }
    if let Some(v) = obj.get("value") {
        known(&["value"])?;
        return Ok(Spec::Value(v.clone()));
    }
    if let Some(items) = obj.get("tuple") {
        known(&["tuple"])?;
        let items = items
            .as_array()
            .ok_or_else(|| manifest_error(format!("`tuple` must be an array in `{j}`")))?;
        return Ok(Spec::Tuple(items.iter().map(spec).collect::<Result<_>>()?));
    }
    Err(manifest_error(format!(
        "an argument description has one of `reals`, `ints`, `value`, `tuple`: `{j}`"
    )))
}

impl Spec {
    /// The argument for the given variables, in the `--args-file` JSON format, drawing from
    /// `rng`.
    pub fn generate(&self, vars: &Vars, rng: &mut Rng) -> Result<J> {
        match self {
            Spec::Reals { dims, lo, hi } => {
                let shape = shape(dims, vars)?;
                Ok(fill(&shape, &mut || J::from(rng.uniform(*lo, *hi))))
            }
            Spec::Ints { dims, below } => {
                let shape = shape(dims, vars)?;
                let below = below.eval(vars)?;
                if below < 1 {
                    return Err(manifest_error(format!(
                        "`below` is {below}: it must be positive"
                    )));
                }
                Ok(fill(&shape, &mut || J::from(rng.below(below as u64))))
            }
            Spec::Value(v) => Ok(v.clone()),
            Spec::Tuple(items) => Ok(J::Array(
                items
                    .iter()
                    .map(|s| s.generate(vars, rng))
                    .collect::<Result<_>>()?,
            )),
        }
    }
}

fn shape(dims: &[Dim], vars: &Vars) -> Result<Vec<usize>> {
    dims.iter()
        .map(|d| {
            let n = d.eval(vars)?;
            usize::try_from(n)
                .map_err(|_| manifest_error(format!("dimension `{}` is {n}, negative", d.0)))
        })
        .collect()
}

fn fill(shape: &[usize], leaf: &mut dyn FnMut() -> J) -> J {
    match shape {
        [] => leaf(),
        [n, rest @ ..] => J::Array((0..*n).map(|_| fill(rest, leaf)).collect()),
    }
}

impl Family {
    /// The family at each of its sizes.
    pub fn cases(&self) -> impl Iterator<Item = Case<'_>> {
        self.sizes
            .iter()
            .map(move |&size| Case { family: self, size })
    }

    /// The family at its smallest size.
    pub fn smallest(&self) -> Case<'_> {
        let size = self
            .sizes
            .iter()
            .copied()
            .min()
            .expect("sizes are non-empty");
        Case { family: self, size }
    }
}

/// A family at one size.
#[derive(Clone, Copy, Debug)]
pub struct Case<'a> {
    /// The family.
    pub family: &'a Family,
    /// The value of its size variable.
    pub size: usize,
}

impl Case<'_> {
    /// `"family/size=value"`, e.g. `"rosenbrock/n=1000"`.
    pub fn id(&self) -> String {
        format!("{}/{}", self.family.name, self.label())
    }

    /// `"size=value"`, e.g. `"n=1000"`.
    pub fn label(&self) -> String {
        format!("{}={}", self.family.size, self.size)
    }

    /// The variables: the fixed ones and the size.
    pub fn vars(&self) -> Vars {
        let mut v = self.family.fixed.clone();
        v.insert(self.family.size.clone(), self.size as i64);
        v
    }

    /// The program text.
    pub fn text(&self) -> Result<String> {
        match &self.family.source {
            ProgramSource::File(p) => std::fs::read_to_string(p)
                .map_err(|e| manifest_error(format!("cannot read `{}`: {e}", p.display()))),
            ProgramSource::Generator(g) => programs::generate(g, self.size)
                .ok_or_else(|| manifest_error(format!("unknown generator `{g}`"))),
        }
    }

    /// The checked program's entry point.
    pub fn entry(&self) -> Result<Entry> {
        let text = self.text()?;
        let prog = crate::source::load(&text, &Registry::builtin())
            .map_err(|e| e.with_note(format!("in the program of case `{}`", self.id())))?;
        let index = match &self.family.def {
            Some(name) => prog.find(name).ok_or_else(|| {
                manifest_error(format!(
                    "case `{}`: no definition named `{name}`",
                    self.id()
                ))
            })?,
            None if prog.defs.is_empty() => {
                return Err(manifest_error(format!(
                    "case `{}`: no definitions",
                    self.id()
                )));
            }
            None => prog.defs.len() - 1,
        };
        Ok(prog.entry(index))
    }

    /// The arguments in the `--args-file` JSON format (one per argument description).
    pub fn args_json(&self) -> Result<Vec<J>> {
        let vars = self.vars();
        self.family
            .args
            .iter()
            .enumerate()
            .map(|(k, s)| {
                let mut rng = Rng::from_name(&format!("{}/{k}", self.family.name));
                s.generate(&vars, &mut rng)
                    .map_err(|e| e.prefixed(&format!("case `{}`, argument {}: ", self.id(), k + 1)))
            })
            .collect()
    }

    /// The arguments as values of the entry's parameter types.
    pub fn args(&self, entry: &Entry) -> Result<Vec<Value>> {
        self.args_of(entry, &self.args_json()?)
    }

    fn args_of(&self, entry: &Entry, json: &[J]) -> Result<Vec<Value>> {
        if json.len() != entry.params.len() {
            return Err(manifest_error(format!(
                "case `{}`: {} argument descriptions for {} parameters",
                self.id(),
                json.len(),
                entry.params.len()
            )));
        }
        let args = json
            .iter()
            .zip(&entry.params)
            .enumerate()
            .map(|(k, (j, p))| {
                Value::from_json(j, &p.ty).map_err(|e| {
                    e.prefixed(&format!(
                        "case `{}`, argument {} (`{}`): ",
                        self.id(),
                        k + 1,
                        p.name
                    ))
                })
            })
            .collect::<Result<Vec<_>>>()?;
        crate::eval::check_args(entry, &args)?;
        Ok(args)
    }

    /// The case ready to time.
    pub fn bench(&self) -> Result<Bench> {
        let entry = self.entry()?;
        let args = self.args(&entry)?;
        Bench::new(&entry, args).map_err(|e| e.prefixed(&format!("case `{}`: ", self.id())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, i64)]) -> Vars {
        pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    #[test]
    fn dimension_expressions() {
        let v = vars(&[("D", 10), ("n", 3)]);
        let e = |s: &str| Dim(s.into()).eval(&v);
        assert_eq!(e("D*(D+1)/2").unwrap(), 55);
        assert_eq!(e("D + D * 2 - 1").unwrap(), 29);
        assert_eq!(e("-n + 7 / 2").unwrap(), 0);
        assert_eq!(e(" 12 ").unwrap(), 12);
        for bad in ["x", "D +", "(D", "D / 0", "D $ 2", "D D"] {
            assert!(e(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn specs_generate_shapes_deterministically() {
        let v = vars(&[("N", 3), ("D", 2)]);
        let s = spec(&json!({"reals": ["N", "D"], "range": [2.0, 3.0]})).unwrap();
        let a = s.generate(&v, &mut Rng::new(1)).unwrap();
        assert_eq!(a, s.generate(&v, &mut Rng::new(1)).unwrap());
        let rows = a.as_array().unwrap();
        assert_eq!(rows.len(), 3);
        for r in rows {
            let r = r.as_array().unwrap();
            assert_eq!(r.len(), 2);
            assert!(r.iter().all(|x| (2.0..3.0).contains(&x.as_f64().unwrap())));
        }
        let s = spec(&json!({"ints": "N", "below": "D"})).unwrap();
        let a = s.generate(&v, &mut Rng::new(1)).unwrap();
        assert!(
            a.as_array()
                .unwrap()
                .iter()
                .all(|x| x.as_u64().unwrap() < 2)
        );
        let s = spec(&json!({"tuple": [{"reals": []}, {"value": null}]})).unwrap();
        let a = s.generate(&v, &mut Rng::new(1)).unwrap();
        assert!(a[0].is_f64() && a[1].is_null());
        for bad in [
            json!({"reals": "N", "extra": 1}),
            json!({"ints": "N"}),
            json!({"nope": 1}),
            json!({"reals": [1.5]}),
            json!(3),
        ] {
            assert!(spec(&bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn bad_manifests_are_errors() {
        let fam = |f: J| Suite::from_json(&json!({ "families": [f] }), Path::new("."));
        let ok = json!({"name": "a", "generator": "index_chain", "size": "n", "sizes": [2],
                        "args": [{"reals": "n"}]});
        let suite = fam(ok.clone()).unwrap();
        let case = suite.families[0].smallest();
        assert_eq!(case.id(), "a/n=2");
        let args = case.args(&case.entry().unwrap()).unwrap();
        assert_eq!(args[0].expect_reals().len(), 2);
        let with = |k: &str, v: J| {
            let mut f = ok.clone();
            f[k] = v;
            f
        };
        for bad in [
            with("generator", json!("nope")),
            with("file", json!("x.chad")),
            with("sizes", json!([])),
            with("sizes", json!([-1])),
            with("args", json!({})),
            with("fixed", json!({"D": 1.5})),
        ] {
            assert!(fam(bad.clone()).is_err(), "{bad}");
        }
        assert!(Suite::from_json(&json!({"families": [ok.clone(), ok]}), Path::new(".")).is_err());
        // Arguments that do not fit the parameters are caught when they are made.
        let suite = fam(with("args", json!([{"reals": ["n", "n"]}]))).unwrap();
        let case = suite.families[0].smallest();
        assert!(case.args(&case.entry().unwrap()).is_err());
        let suite = fam(with("args", json!([]))).unwrap();
        let case = suite.families[0].smallest();
        assert!(case.args(&case.entry().unwrap()).is_err());
    }
}
