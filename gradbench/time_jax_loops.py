# JAX versions of GradBench's det and lstm (the trimmed GradBench here has no JAX tool for them),
# timed as gradbench/time_jax.py does: jitted, float64, the minimum over >= 1 s of runs with
# block_until_ready. det uses jnp.linalg.det (LU with partial pivoting, like gradbench/det.chad),
# lstm is a transcription of the reference's objective (lax.scan over the characters). Inputs are
# generated as the evals do (det: seed 31337, uniform; lstm: uniform parameters, the text's
# bits). The ports were checked against chad's gradbench outputs on small inputs (lstm objective
# and jacobian, det gradient: equal to 1e-17). Writes /tmp/gb-jax-loops.json.
import sys, time, json, math
sys.path.insert(0, "/root/.cache/gradbench/gradbench/python/gradbench")
import numpy as np, jax, jax.numpy as jnp
jax.config.update("jax_enable_x64", True)
from jax import jit, grad, lax

def t(f, *a):
    jax.block_until_ready(f(*a))
    best = float("inf"); total = 0.0; runs = 0
    while total < 1.0 or runs < 3:
        s = time.perf_counter_ns(); jax.block_until_ready(f(*a)); e = time.perf_counter_ns() - s
        best = min(best, e); total += e / 1e9; runs += 1
    return best

out = {}
det = jit(jnp.linalg.det); gdet = jit(grad(jnp.linalg.det))
np.random.seed(31337)
for ell in [5, 6, 7, 8, 9, 10, 11]:
    A = jnp.array(np.random.rand(ell * ell).reshape(ell, ell))
    out[f"det primal {ell}"] = t(det, A); out[f"det gradient {ell}"] = t(gdet, A)

def lstm_objective(main, extra, state, seq):
    l = main.shape[0] // 2; b = seq.shape[1]
    def step(st, t_in):
        x, y = t_in
        inp = x * extra[0]
        new = []
        for i in range(l):
            w, u = main[2 * i], main[2 * i + 1]
            hidden, cell = st[2 * i], st[2 * i + 1]
            forget = jax.nn.sigmoid(inp * w[:b] + u[:b])
            ingate = jax.nn.sigmoid(hidden * w[b:2*b] + u[b:2*b])
            outgate = jax.nn.sigmoid(inp * w[2*b:3*b] + u[2*b:3*b])
            change = jnp.tanh(hidden * w[3*b:] + u[3*b:])
            cell = cell * forget + ingate * change
            hidden = outgate * jnp.tanh(cell)
            new += [hidden, cell]
            inp = hidden
        ypred = inp * extra[1] + extra[2]
        lse = jnp.log(jnp.sum(jnp.exp(ypred)) + 2)
        return jnp.stack(new), jnp.sum(y * (ypred - lse))
    _, totals = lax.scan(step, state, (seq[:-1], seq[1:]))
    return -jnp.sum(totals) / ((seq.shape[0] - 1) * b)

lo = jit(lstm_objective); lj = jit(grad(lstm_objective, argnums=(0, 1)))
text = open("/root/.cache/gradbench/gradbench/evals/lstm/data/lstm_full.txt", encoding="utf8").read(8192)
for l in [2, 4, 6]:
    for c in [1024, 4096, 8192]:
        use = text[:c]; bits = math.ceil(math.log2(max(ord(ch) for ch in use)))
        seq = jnp.array([[int(d) for d in bin(ord(ch))[2:].zfill(bits)] for ch in use], dtype=jnp.float64)
        state = jnp.array(np.random.random((2 * l, bits))); main = jnp.array(np.random.random((2 * l, 4 * bits)))
        extra = jnp.array(np.random.random((3, bits)))
        out[f"lstm objective l={l},c={c}"] = t(lo, main, extra, state, seq)
        out[f"lstm jacobian l={l},c={c}"] = t(lj, main, extra, state, seq)
json.dump(out, open("/tmp/gb-jax-loops.json", "w"), indent=1)
print(json.dumps(out, indent=1))
