# Times the jitted functions of GradBench's JAX tool (lse, llsq, gmm, ode) with block_until_ready: the
# minimum over runs filling at least 1 s. The tool's own timings do not block on results (JAX
# dispatches asynchronously), so they under-report. Run with the GradBench venv's python after
# ../shared/gradbench/setup.sh; prints and writes /tmp/gb-jax.json.
import sys, time, json
sys.path.insert(0, "/root/.cache/gradbench/gradbench/python/gradbench")
import numpy as np, jax, jax.numpy as jnp
jax.config.update("jax_enable_x64", True)
from gradbench.tools.jax import lse as L, llsq as Q, gmm as G, ode as O
from jax import jit, grad
def t(f, *a, **k):
    jax.block_until_ready(f(*a, **k))
    best = float("inf"); total = 0.0; runs = 0
    while total < 1.0 or runs < 3:
        s = time.perf_counter_ns(); jax.block_until_ready(f(*a, **k)); e = time.perf_counter_ns() - s
        best = min(best, e); total += e / 1e9; runs += 1
    return best
out = {}
lp = jit(L.logsumexp); lg = jit(grad(L.logsumexp))
rng = np.random.default_rng(0)
for n in [10000, 1280000]:
    x = jnp.array(rng.random(n))
    out[f"lse primal n={n}"] = t(lp, x); out[f"lse gradient n={n}"] = t(lg, x)
for n in [1024, 16392]:
    x = jnp.array(rng.random(128))
    out[f"llsq primal n={n},m=128"] = t(Q.llsq, x, n); out[f"llsq gradient n={n},m=128"] = t(Q.grad_llsq, x, n)
for d, k in [(2,5),(2,25),(10,5),(20,5),(10,25),(20,25)]:
    n = 1000
    fixed = {"d": d, "k": k, "n": n, "x": jnp.array(rng.standard_normal((n, d))), "m": 0, "gamma": 1.0}
    ind = {"alpha": jnp.array(rng.standard_normal(k)), "mu": jnp.array(rng.random((k, d))),
           "q": jnp.array(rng.standard_normal((k, d))), "l": jnp.array(rng.standard_normal((k, d*(d-1)//2)))}
    out[f"gmm objective {d}_{k}_{n}"] = t(G.obj, ind, **fixed); out[f"gmm jacobian {d}_{k}_{n}"] = t(G.jac, ind, **fixed)
for n in [1000, 10000]:
    for s in [10, 100]:
        x = jnp.array(rng.random(n))
        out[f"ode primal n={n},s={s}"] = t(O.ode, x, s); out[f"ode gradient n={n},s={s}"] = t(O.grad_ode, x, s)
json.dump(out, open("/tmp/gb-jax.json", "w"), indent=1)
print(json.dumps(out, indent=1))
