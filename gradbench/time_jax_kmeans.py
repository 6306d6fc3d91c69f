# Times GradBench's JAX tool's kmeans (its jitted `costfun` and its `dir`: forward over reverse,
# `jvp` of `grad` along ones, divided) with block_until_ready, as gradbench/time_jax.py does:
# the minimum over runs filling at least 1 s, at the inputs the kmeans eval makes (numpy seed
# 31337, the last k points as centroids). Run with the GradBench venv's python; prints and
# writes /tmp/gb-jax-kmeans.json.
import sys, time, json
sys.path.insert(0, "/root/.cache/gradbench/gradbench/python/gradbench")
import numpy as np, jax, jax.numpy as jnp
jax.config.update("jax_enable_x64", True)
from gradbench.tools.jax.kmeans import costfun
from jax import jit, grad, jvp
def t(f, *a):
    jax.block_until_ready(f(*a))
    best = float("inf"); total = 0.0; runs = 0
    while total < 1.0 or runs < 3:
        s = time.perf_counter_ns(); jax.block_until_ready(f(*a)); e = time.perf_counter_ns() - s
        best = min(best, e); total += e / 1e9; runs += 1
    return best
@jit
def cost(points, centroids):
    return costfun(points, centroids)
@jit
def direction(points, centroids):
    f_diff = grad(lambda cs: costfun(points, cs))
    d, hes = jvp(f_diff, [centroids], [jnp.ones(shape=centroids.shape)])
    return d / hes
out = {}
np.random.seed(31337)
for k, n, d in sorted([(k, n, d) for k in [10, 100] for n in [1000] for d in [8, 16]],
                      key=lambda v: v[0] * v[1] * v[2]):
    points = np.random.rand(n, d)
    centroids = points[-k:]
    p, c = jnp.array(points), jnp.array(centroids)
    out[f"kmeans cost k={k},n={n},d={d}"] = t(cost, p, c)
    out[f"kmeans dir k={k},n={n},d={d}"] = t(direction, p, c)
json.dump(out, open("/tmp/gb-jax-kmeans.json", "w"), indent=1)
print(json.dumps(out, indent=1))
