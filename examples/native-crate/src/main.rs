//! Gradient descent on a logistic regression, with the gradient chad generated at build time.

mod model {
    include!(concat!(env!("OUT_DIR"), "/model.rs"));
}

fn main() -> Result<(), model::Error> {
    // A separable toy problem: the label is whether x0 + 2 x1 > 1.
    let (n, d) = (200, 2);
    let mut xs = Vec::with_capacity(n);
    let mut ys = Vec::with_capacity(n);
    let mut s: u64 = 1;
    let mut next = || {
        s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (s >> 11) as f64 / (1u64 << 53) as f64
    };
    for _ in 0..n {
        let x: Vec<f64> = (0..d).map(|_| next()).collect();
        ys.push(if x[0] + 2.0 * x[1] > 1.0 { 1.0 } else { 0.0 });
        xs.push(x);
    }
    let (mut w, mut b) = (vec![0.0; d], 0.0);
    for step in 0..=500 {
        let (l, (dw, db, _dxs, _dys)) = model::loss_grad(&w, b, &xs, &ys)?;
        if step % 100 == 0 {
            println!("step {step:3}: loss {l:.6}");
        }
        for (wi, gi) in w.iter_mut().zip(&dw) {
            *wi -= 2.0 * gi;
        }
        b -= 2.0 * db;
    }
    println!("w = {w:?}, b = {b:.4}");

    // Forward and reverse mode agree: the directional derivative along v is <grad, v>.
    let x = [0.5, 1.5, -0.3, 2.0];
    let v = [1.0, 0.0, -2.0, 0.5];
    let (_, dy) = model::rosenbrock_jvp(&x, &v)?;
    let (_, g) = model::rosenbrock_grad(&x)?;
    let dot: f64 = g.iter().zip(&v).map(|(a, b)| a * b).sum();
    println!("rosenbrock: jvp {dy:.6} = <grad, v> {dot:.6}");
    Ok(())
}
