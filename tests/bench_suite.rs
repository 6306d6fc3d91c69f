//! A fast smoke test of the benchmark suite (`benches/programs/suite.json`): every family's
//! program parses and type-checks, its arguments at the smallest size have the parameters'
//! types, and at a tiny size (size 2, or the family's smallest if smaller) the primal, forward
//! and reverse code run and agree with the evaluator and with each other (the dot-product test
//! `<cotangent, J t> = <Jᵀ cotangent, t>`). The suite itself is timed by `cargo bench --bench
//! suite` and `benches/perf_table.py`, not here.

use chad::Value;
use chad::internals::bench::suite::{Case, Suite};

/// The inner product of two (co)tangent values of the same shape.
fn inner(a: &Value, b: &Value) -> f64 {
    match (a, b) {
        (Value::Real(x), Value::Real(y)) => x * y,
        (Value::Unit, Value::Unit) => 0.0,
        (Value::Pair(p), Value::Pair(q)) => inner(&p.0, &q.0) + inner(&p.1, &q.1),
        (Value::Inl(x), Value::Inl(y)) | (Value::Inr(x), Value::Inr(y)) => inner(x, y),
        (Value::RealArray(xs), Value::RealArray(ys)) => {
            assert_eq!(xs.len(), ys.len());
            xs.iter().zip(ys.iter()).map(|(x, y)| x * y).sum()
        }
        _ => {
            let (xs, ys) = (a.array_items(), b.array_items());
            assert_eq!(xs.len(), ys.len());
            xs.iter().zip(&ys).map(|(x, y)| inner(x, y)).sum()
        }
    }
}

fn close(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol * (1.0 + a.abs().max(b.abs()))
}

#[test]
fn every_family_checks_and_its_arguments_fit_at_the_smallest_size() {
    let suite = Suite::load_default().unwrap_or_else(|e| panic!("{}", e.render(None)));
    let names: Vec<&str> = suite.families.iter().map(|f| f.name.as_str()).collect();
    for want in [
        "rosenbrock",
        "gmm",
        "mlp",
        "map_closure",
        "sharing_chain",
        "straight_line",
        "nested_closures",
        "index_sum",
        "diag_trace",
    ] {
        assert!(names.contains(&want), "no family {want}: {names:?}");
    }
    for family in &suite.families {
        assert!(
            family.sizes.len() >= 3,
            "{}: fewer than 3 sizes",
            family.name
        );
        assert!(
            family.sizes.windows(2).all(|w| w[0] < w[1]),
            "{}",
            family.name
        );
        let case = family.smallest();
        let entry = case
            .entry()
            .unwrap_or_else(|e| panic!("{}", e.render(None)));
        let args = case
            .args(&entry)
            .unwrap_or_else(|e| panic!("{}", e.render(None)));
        for (a, p) in args.iter().zip(&entry.params) {
            assert!(a.has_type(&p.ty), "{}: {}", case.id(), p.name);
        }
        // Deterministic: the same case gives the same arguments.
        assert_eq!(case.args_json().unwrap(), case.args_json().unwrap());
    }
}

#[test]
fn every_family_differentiates_consistently_at_a_tiny_size() {
    let suite = Suite::load_default().unwrap_or_else(|e| panic!("{}", e.render(None)));
    for family in &suite.families {
        let case = Case {
            family,
            size: family.smallest().size.min(2),
        };
        let bench = case
            .bench()
            .unwrap_or_else(|e| panic!("{}", e.render(None)));
        let entry = case.entry().unwrap();
        let want = chad::internals::eval::eval_entry(&entry, bench.args()).unwrap();
        let got = bench.primal().unwrap();
        assert!(
            close(got.expect_real(), want.expect_real(), 1e-12),
            "{}: {got} vs {want}",
            case.id()
        );
        let (y, dy) = bench.forward().unwrap();
        let (y2, grads) = bench.reverse().unwrap();
        assert_eq!(y.same(&want), Some(true), "{}", case.id());
        assert_eq!(y2.same(&want), Some(true), "{}", case.id());
        let lhs = inner(bench.cotangent(), &dy);
        let rhs: f64 = grads
            .iter()
            .zip(bench.tangents())
            .map(|(g, t)| inner(g, t))
            .sum();
        assert!(close(lhs, rhs, 1e-9), "{}: {lhs} vs {rhs}", case.id());
        assert!(lhs != 0.0, "{}: a zero derivative tests nothing", case.id());
    }
}
