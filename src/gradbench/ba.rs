//! GradBench's `ba` eval (bundle adjustment): the input's expansion, the per-observation
//! copies the Jacobian is computed on, and the sparse Jacobian's assembly.
//!
//! The eval sends one camera, point, weight and feature with counts n, m, p; like GradBench's
//! reference, the tool expands them (untimed, while converting the input) into n cameras, m
//! points, p weights and features, observation i seeing camera i mod n and point i mod m. The
//! timed `jacobian` then works on every observation: it copies each observation's camera and
//! point, runs three reverse passes of `baRows` (gradbench/ba.chad; rows 0 and 1 of every
//! observation's 2×15 block, then the weight errors' derivatives), and assembles the matrix
//! in GradBench's layout (row pointers, columns, values: the reprojection rows, observation
//! by observation, then the weight rows). Only the output is abbreviated as the eval asks
//! (the first 30 entries and the last).

use crate::error::{Error, ErrorKind, Result};
use crate::types::Type;
use crate::value::Value;
use serde_json::{Value as Json, json};

/// Parameters per camera.
const NCAM: usize = 11;

fn bad(what: String) -> Error {
    Error::new(ErrorKind::Argument, what)
}

fn count(input: &Json, field: &str) -> Result<usize> {
    input
        .get(field)
        .and_then(Json::as_u64)
        .filter(|&v| v >= 1)
        .map(|v| v as usize)
        .ok_or_else(|| bad(format!("the input needs a positive integer `{field}`")))
}

fn numbers(input: &Json, field: &str, len: usize) -> Result<Vec<f64>> {
    let xs = input
        .get(field)
        .and_then(Json::as_array)
        .ok_or_else(|| bad(format!("the input needs an array `{field}`")))?;
    let xs: Vec<f64> = xs.iter().filter_map(Json::as_f64).collect();
    if xs.len() != len {
        return Err(bad(format!("`{field}` must be {len} numbers")));
    }
    Ok(xs)
}

/// The arguments of `baObjective` (cams, xs, ws, feats, camIdx, ptIdx) from the eval's input.
pub(super) fn arguments(input: &Json) -> Result<Vec<Value>> {
    let (n, m, p) = (count(input, "n")?, count(input, "m")?, count(input, "p")?);
    let cam = Value::reals(numbers(input, "cam", NCAM)?);
    let x = Value::reals(numbers(input, "x", 3)?);
    let w = input
        .get("w")
        .and_then(Json::as_f64)
        .ok_or_else(|| bad("the input needs a number `w`".into()))?;
    let feat = Value::reals(numbers(input, "feat", 2)?);
    let rows = Type::array(Type::Real);
    let ints = |k: usize| {
        Value::array(
            &Type::Int,
            (0..p).map(|i| Value::Int((i % k) as i64)).collect(),
        )
    };
    Ok(vec![
        Value::array(&rows, vec![cam; n]),
        Value::array(&rows, vec![x; m]),
        Value::reals(vec![w; p]),
        Value::array(&rows, vec![feat; p]),
        ints(n),
        ints(m),
    ])
}

/// The elements of an array value, or an error (never a panic) for another value.
fn items(v: &Value) -> Result<Vec<Value>> {
    match v {
        Value::RealArray(_) | Value::Array(_) => Ok(v.array_items()),
        other => Err(Error::new(
            ErrorKind::Runtime,
            format!("ba: expected an array, found {other}"),
        )),
    }
}

fn reals(v: &Value) -> Result<Vec<f64>> {
    items(v)?
        .iter()
        .map(|x| match x {
            Value::Real(r) => Ok(*r),
            other => Err(Error::new(
                ErrorKind::Runtime,
                format!("ba: expected a real, found {other}"),
            )),
        })
        .collect()
}

/// The arguments of `baRows` but its last (the row): each observation's own copy of its
/// camera and point, the weights and the features.
pub(super) fn observation_copies(args: &[Value]) -> Result<Vec<Value>> {
    let [cams, xs, ws, feats, cam_idx, pt_idx] = args else {
        return Err(bad("ba: six arguments expected".into()));
    };
    let gather = |table: &Value, idx: &Value| -> Result<Value> {
        let picked = items(idx)?
            .iter()
            .map(|i| match i {
                Value::Int(i) => table.index(*i),
                other => Err(bad(format!("ba: an index, found {other}"))),
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Value::array(&Type::array(Type::Real), picked))
    };
    Ok(vec![
        gather(cams, cam_idx)?,
        gather(xs, pt_idx)?,
        ws.clone(),
        feats.clone(),
    ])
}

/// A sparse matrix as GradBench's reference builds it: row pointers, columns, values.
#[derive(Debug, PartialEq)]
pub(super) struct Coo {
    rows: Vec<usize>,
    cols: Vec<usize>,
    vals: Vec<f64>,
}

/// The Jacobian from the three passes' gradients (each: the cameras', points' and weights'
/// gradients, per observation) and the objective's arguments (for n, m and the indices).
pub(super) fn assemble(args: &[Value], passes: &[Vec<Value>; 3]) -> Result<Coo> {
    let n = args[0].array_len();
    let m = args[1].array_len();
    let cam_idx = items(&args[4])?;
    let pt_idx = items(&args[5])?;
    let p = cam_idx.len();
    let per_obs = |pass: &Vec<Value>, k: usize| -> Result<Vec<Vec<f64>>> {
        items(&pass[k])?.iter().map(reals).collect()
    };
    let mut blocks = Vec::new();
    for pass in &passes[..2] {
        blocks.push((per_obs(pass, 0)?, per_obs(pass, 1)?, reals(&pass[2])?));
    }
    let w_d = reals(&passes[2][2])?;
    if blocks
        .iter()
        .any(|(c, x, w)| c.len() != p || x.len() != p || w.len() != p)
        || w_d.len() != p
    {
        return Err(Error::new(
            ErrorKind::Runtime,
            "ba: gradients of the wrong size",
        ));
    }
    let mut coo = Coo {
        rows: Vec::with_capacity(3 * p + 1),
        cols: Vec::with_capacity(31 * p),
        vals: Vec::with_capacity(31 * p),
    };
    coo.rows.push(0);
    for i in 0..p {
        let (Value::Int(c), Value::Int(pt)) = (&cam_idx[i], &pt_idx[i]) else {
            return Err(bad("ba: indices must be integers".into()));
        };
        let (c, pt) = (*c as usize, *pt as usize);
        for (dcam, dx, dw) in &blocks {
            coo.rows
                .push(coo.rows.last().copied().unwrap_or(0) + NCAM + 4);
            coo.cols.extend((0..NCAM).map(|j| NCAM * c + j));
            coo.vals.extend(&dcam[i]);
            coo.cols.extend((0..3).map(|j| NCAM * n + 3 * pt + j));
            coo.vals.extend(&dx[i]);
            coo.cols.push(NCAM * n + 3 * m + i);
            coo.vals.push(dw[i]);
        }
    }
    for (i, d) in w_d.iter().enumerate() {
        coo.rows.push(coo.rows.last().copied().unwrap_or(0) + 1);
        coo.cols.push(NCAM * n + 3 * m + i);
        coo.vals.push(*d);
    }
    Ok(coo)
}

/// The first 30 entries and the last of each list, as the eval expects.
pub(super) fn jacobian_json(coo: &Coo) -> Json {
    fn abbreviate<T: Clone + Into<Json>>(xs: &[T]) -> Json {
        let mut out: Vec<Json> = xs.iter().take(30).cloned().map(Into::into).collect();
        out.extend(xs.last().cloned().map(Into::into));
        Json::Array(out)
    }
    json!({
        "rows": abbreviate(&coo.rows),
        "cols": abbreviate(&coo.cols),
        "vals": abbreviate(&coo.vals),
    })
}

/// The objective's output: the first observation's errors, and how often they repeat.
pub(super) fn objective_json(value: &Value) -> Result<Json> {
    let (errs, w_errs) = match value {
        Value::Pair(_) => value.expect_pair(),
        other => {
            return Err(Error::new(
                ErrorKind::Runtime,
                format!("ba: the objective should be a pair, not {other}"),
            ));
        }
    };
    let (errs, w_errs) = (reals(errs)?, reals(w_errs)?);
    if errs.len() < 2 || w_errs.is_empty() {
        return Err(Error::new(ErrorKind::Runtime, "ba: no observations"));
    }
    Ok(json!({
        "reproj_error": {"elements": [errs[0], errs[1]], "repeated": errs.len() / 2},
        "w_err": {"element": w_errs[0], "repeated": w_errs.len()},
    }))
}
