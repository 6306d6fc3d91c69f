#!/usr/bin/env python3
"""Compares chad's primal and gradient times with JAX's on the benchmark suite, after checking
that both compute the same values.

Benchmarks, not tests: CI does not run this script (it installs JAX with pip).

For every case of the selected families (benches/programs/suite.json, written to files by
`cargo run --release --example bench_suite -- write DIR`) it

1. runs `chad eval --json` and `chad grad --json` on the case's program and arguments (with
   `--backend native` when chad has that flag and the native backend is asked for; the engine's
   gradient is checked too), and JAX's jitted value and `value_and_grad` on the same inputs
   (float64), and compares them: relative error at most 1e-9 on values and, for each argument,
   max |chad - JAX| / max |JAX| at most 1e-7 on gradients. A case that disagrees is reported as
   such and not timed;
2. times chad (`chad bench --json --repeat N`: primal, forward, reverse = the gradient, compile;
   medians) for the chosen backend and, when that is not the engine, for the engine too; then
   JAX (the jitted primal and the jitted `value_and_grad`, each compiled ahead of time with
   `jax.jit(f).lower(..).compile()`, which is JAX's compile time; then at least N timed calls,
   and more until each function has run for --jax-min-time seconds; min and median), all in the
   same run; and the hand-written Rust objective (`examples/native_baselines.rs`, median of N
   runs) where the family has one;
3. prints a Markdown table (with --markdown OUT writes it to OUT too, with --json OUT every
   number measured, with --readme replaces the table between `<!-- jax-table:begin -->` and
   `<!-- jax-table:end -->` in README.md, keeping the rows of cases not measured in this run).

The table shows medians for chad, JAX and Rust alike (JAX's minimum is in the --json output).
"gradient" is one reverse-mode run that returns the value and the gradient: `chad bench`'s
reverse_s and JAX's `value_and_grad`. "compile" is chad's compile_s (primal, forward and reverse
programs) and JAX's compile of the primal plus that of `value_and_grad`. JAX runs with its
default CPU threading; the engine runs on one thread.

JAX runs in a virtual environment outside the repository (default ~/.cache/chad-bench-venv,
created with `python3 -m venv` and `pip install jax` if it has no JAX): this script, run by any
Python 3 with the standard library alone, starts itself there with --jax-worker and talks to
that process over JSON lines.

The JAX programs are written here, one per family, each following the .chad program term by term
(the same shifted logsumexp, the GMM's Wishart prior with its sign and constant, the MLP's mean
over the batch, ...). The generated straight-line and sharing-chain programs are translated line by
line from the generated text (an unrecognised line is an error), so they unroll in JAX exactly as
they do in chad. By default the families the issue compares are run (rosenbrock, gmm, mlp,
map_closure, straight_line); --all adds nested_closures, sharing_chain, index_sum, diag_trace and
index_chain, whose JAX versions are the direct array ones (`sum(xs * xs)`, `trace(diag(x))` ...).

Usage:
    python3 benches/jax_compare.py [--chad PATH] [--backend native|engine] [--repeat N]
                                   [--only FAMILY]... [--all] [--quick] [--markdown OUT]
                                   [--json OUT] [--readme] [--dir DIR | --use-dir DIR]
                                   [--skip CASE]... [--no-build] [--no-native] [--venv DIR]
                                   [--jax-spec SPEC] [--jax-memory GIB] [--timeout S]

The JAX process's address space is capped (--jax-memory, default 8 GiB): XLA's compile of the
unrolled gradients of the 10^4-line generated programs needs more than that (a straight-line one
took 8 minutes and over 12 GB), and a case over the cap is reported without stopping the run.
"""

import argparse
import atexit
import datetime
import json
import math
import os
import platform
import re
import select
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")
BEGIN = "<!-- jax-table:begin -->"
END = "<!-- jax-table:end -->"
DASH = "–"
DEFAULT_VENV = os.path.join(os.path.expanduser("~"), ".cache", "chad-bench-venv")
# The families the issue compares with JAX, and those with a JAX version at all.
DEFAULT_FAMILIES = ["rosenbrock", "gmm", "mlp", "map_closure", "straight_line"]
JAX_FAMILIES = DEFAULT_FAMILIES + [
    "nested_closures",
    "sharing_chain",
    "index_sum",
    "diag_trace",
    "index_chain",
]
VALUE_TOL = 1e-9
GRAD_TOL = 1e-7


def log(*args, end="\n"):
    print(*args, file=sys.stderr, flush=True, end=end)


# ----- the JAX worker (runs inside the virtual environment) -----------------------------------


def jax_worker(memory_gb):
    """Serves requests, one JSON object a line on stdin, one answer a line on stdout, with its
    address space limited to `memory_gb` GiB (0: no limit)."""
    if memory_gb > 0:
        import resource

        limit = int(memory_gb * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    # Anything JAX or XLA prints must not end up in the protocol: keep stdout for the answers and
    # point file descriptor 1 at stderr.
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    def answer(obj):
        out.write(json.dumps(obj) + "\n")
        out.flush()

    try:
        import jax
        import jax.numpy as jnp
        import numpy as np
    except ImportError as e:
        answer({"ok": False, "error": "cannot import JAX: %s" % e})
        return
    jax.config.update("jax_enable_x64", True)
    answer(
        {
            "ok": True,
            "jax": jax.__version__,
            "numpy": np.__version__,
            "devices": [str(d) for d in jax.devices()],
        }
    )
    programs = jax_programs(jax, jnp, np)
    current = None
    for line in sys.stdin:
        if not line.strip():
            continue
        req = json.loads(line)
        try:
            if req["op"] == "prepare":
                current = None
                current = prepare(jax, jnp, np, programs, req["case"])
                answer(dict(current["check"], ok=True))
            elif req["op"] == "time":
                if current is None:
                    raise RuntimeError("no case prepared")
                answer(dict(time_case(jax, current, req["repeat"], req["min_time"]), ok=True))
            elif req["op"] == "quit":
                return
            else:
                raise RuntimeError("unknown request %r" % req["op"])
        except Exception as e:  # reported to the orchestrator, which goes on with the next case
            import traceback

            traceback.print_exc(file=sys.stderr)
            answer({"ok": False, "error": "%s: %s" % (type(e).__name__, e)})


def jax_programs(jax, jnp, np):
    """family -> build(case, args) returning (f, inputs, argnums[, positions]): JAX's version of
    the family's program, its inputs (the JSON arguments converted; fixed integers can be baked
    into f), the indices of the inputs to differentiate, and the index of chad's argument that
    each input is (default: the same index)."""
    f64 = lambda a: jnp.asarray(np.asarray(a, dtype=np.float64))

    def lse(v, axis=None):
        # logsumexp shifted by the maximum, as the .chad programs write it (the maximum is not
        # detached: its derivative cancels, as it does in chad).
        mx = jnp.max(v, axis=axis, keepdims=True)
        s = jnp.log(jnp.sum(jnp.exp(v - mx), axis=axis, keepdims=True)) + mx
        return jnp.squeeze(s, axis=axis) if axis is not None else s.reshape(())

    def rosenbrock(case, args):
        def f(xs):
            x = xs[:-1]
            d = xs[1:] - x * x
            return jnp.sum(100.0 * d * d + (1.0 - x) * (1.0 - x))

        return f, [f64(args[0])], (0,)

    def lgamma(x):
        # examples/gmm.chad's Lanczos approximation (g = 7, 9 coefficients), in float64.
        c = [0.99999999999980993, 676.5203681218851, -1259.1392167224028, 771.32342877765313,
             -176.61502916214059, 12.507343278686905, -0.13857109526572012,
             9.9843695780195716e-6, 1.5056327351493116e-7]
        z = x - 1
        a = c[0] + sum(c[i + 1] / (z + float(i + 1)) for i in range(8))
        t = z + 7.5
        return 0.5 * math.log(2 * 3.141592653589793) + (z + 0.5) * math.log(t) - t + math.log(a)

    def log_gamma_distrib(a, p):
        return 0.25 * float(p * (p - 1)) * math.log(3.141592653589793) + sum(
            lgamma(a + 0.5 * float(1 - (j + 1))) for j in range(p)
        )

    def gmm(case, args):
        alphas, means, icf, x = (f64(a) for a in args[:4])
        gamma, m = args[4], args[5]
        if not isinstance(m, int):
            raise ValueError("gmm: m must be an integer, got %r" % (m,))
        k, d = means.shape
        n = x.shape[0]
        if icf.shape != (k, d * (d + 1) // 2):
            raise ValueError("gmm: icf has shape %s, not K x D(D+1)/2" % (icf.shape,))
        # Q_k = diag(exp icf_k[:D]) + L_k, L_k[r, c] = icf_k[D + c(2D-c-1)/2 + r-c-1] for r > c.
        rows, cols = np.tril_indices(d, -1)
        packed = d + cols * (2 * d - cols - 1) // 2 + rows - cols - 1
        diag = np.arange(d)
        dof = d + m + 1
        lgd = log_gamma_distrib(0.5 * float(dof), d)
        log2pi = math.log(2 * 3.141592653589793)

        def f(alphas, means, icf, x, gamma):
            logdiag = icf[:, :d]
            q = jnp.zeros((k, d, d), dtype=icf.dtype)
            q = q.at[:, diag, diag].set(jnp.exp(logdiag))
            q = q.at[:, rows, cols].set(icf[:, packed])
            sum_qs = jnp.sum(logdiag, axis=1)
            centred = x[:, None, :] - means[None, :, :]  # N x K x D
            qx = jnp.einsum("krc,nkc->nkr", q, centred)
            main = alphas[None, :] + sum_qs[None, :] - 0.5 * jnp.sum(qx * qx, axis=2)
            slse = jnp.sum(lse(main, axis=1))
            constant = -float(n * d) * 0.5 * log2pi
            c = float(dof * d) * (jnp.log(gamma) - 0.5 * math.log(2)) - lgd
            frobenius = jnp.sum(jnp.exp(logdiag) ** 2, axis=1) + jnp.sum(icf[:, d:] ** 2, axis=1)
            prior = jnp.sum(0.5 * gamma * gamma * frobenius - float(m) * sum_qs) - float(k) * c
            return constant + slse - float(n) * lse(alphas) + prior

        # m is fixed (an Int, not differentiated): no input of f, so position 5 is left out.
        return f, [alphas, means, icf, x, f64(gamma)], (0, 1, 2, 3, 4), [0, 1, 2, 3, 4]

    def mlp(case, args):
        w1, b1, w2, b2, xs = (f64(a) for a in args[:5])
        ys = jnp.asarray(np.asarray(args[5], dtype=np.int64))
        b = xs.shape[0]

        def f(w1, b1, w2, b2, xs, ys):
            h = jnp.tanh(xs @ w1.T + b1)
            z = h @ w2.T + b2
            ce = lse(z, axis=1) - z[jnp.arange(b), ys]
            return jnp.sum(ce) / float(b)

        return f, [w1, b1, w2, b2, xs, ys], (0, 1, 2, 3, 4)

    def map_closure(case, args):
        def f(a, b, xs):
            return jnp.sum(a * xs + jnp.sin(b * xs))

        return f, [f64(a) for a in args], (0, 1, 2)

    def straight_line(case, args):
        header, ops, result = parse_lets(case["program"], "v", STRAIGHT_FORMS, "straight")
        if header != ["x", "y"]:
            raise ValueError("straight_line: expected parameters x y, got %s" % header)
        fns = {
            "sin_add": lambda a, b: jnp.sin(a) + 0.25 * b,
            "tanh_mul": lambda a, b: jnp.tanh(a * b),
            "mul_quarter": lambda a, b: a * b * 0.25,
            "cos_mul": lambda a, b: jnp.cos(a) * b,
            "half_sub": lambda a, b: 0.5 * a - 0.25 * b,
            "sigmoid_sub": lambda a, b: jax.nn.sigmoid(a - b),
            "first": lambda a, b: a * 0.5 + b,
        }

        def f(x, y):
            env = {"x": x, "y": y}
            for name, op, a, b in ops:
                env[name] = fns[op](env[a], env[b])
            return env[result]

        return f, [f64(a) for a in args], (0, 1)

    def sharing_chain(case, args):
        header, ops, result = parse_lets(case["program"], "x", CHAIN_FORMS, "chain")
        fns = {
            "copy": lambda u: u,
            "double": lambda u: u + u,
            "abs": lambda u: jnp.sqrt(u * u),
            "halve": lambda u: u * 0.25 + u * 0.25,
        }

        def f(x):
            env = {header[0]: x}
            for name, op, a, _ in ops:
                env[name] = fns[op](env[a])
            return env[result]

        return f, [f64(args[0])], (0,)

    def nested_closures(case, args):
        depth = int(case["size"])
        with open(case["program"]) as fh:
            text = fh.read()
        if "let f = mk%d a in" % depth not in text:
            raise ValueError("nested_closures: the program is not of depth %d" % depth)

        def mk(j, c):
            if j == 1:
                return lambda x: jnp.sin(c * x)
            g = mk(j - 1, c * 0.75)
            return lambda x: g(c * x) + jnp.sin(c + x)

        def f(a, xs):
            return jnp.sum(mk(depth, a)(xs))

        return f, [f64(a) for a in args], (0, 1)

    def index_sum(case, args):
        return (lambda xs: jnp.sum(xs * xs)), [f64(args[0])], (0,)

    def diag_trace(case, args):
        def f(x):
            t = jnp.trace(jnp.diag(x))
            return t + t + t + t

        return f, [f64(args[0])], (0,)

    def index_chain(case, args):
        with open(case["program"]) as fh:
            idx = np.array([int(i) for i in re.findall(r"xs ! (\d+)", fh.read())], dtype=np.int64)
        if len(idx) == 0:
            raise ValueError("index_chain: no `xs ! i` terms in the program")
        return (lambda xs: jnp.sum(xs[idx])), [f64(args[0])], (0,)

    return {
        "rosenbrock": rosenbrock,
        "gmm": gmm,
        "mlp": mlp,
        "map_closure": map_closure,
        "straight_line": straight_line,
        "sharing_chain": sharing_chain,
        "nested_closures": nested_closures,
        "index_sum": index_sum,
        "diag_trace": diag_trace,
        "index_chain": index_chain,
    }


# The expression forms of src/bench/programs.rs's generators: (regex, operation name).
STRAIGHT_FORMS = [
    (r"(\w+) \* 0\.5 \+ (\w+)", "first"),
    (r"sin (\w+) \+ 0\.25 \* (\w+)", "sin_add"),
    (r"tanh \((\w+) \* (\w+)\)", "tanh_mul"),
    (r"(\w+) \* (\w+) \* 0\.25", "mul_quarter"),
    (r"cos (\w+) \* (\w+)", "cos_mul"),
    (r"0\.5 \* (\w+) - 0\.25 \* (\w+)", "half_sub"),
    (r"sigmoid \((\w+) - (\w+)\)", "sigmoid_sub"),
]
CHAIN_FORMS = [
    (r"(\w+)", "copy"),
    (r"(\w+) \+ \1", "double"),
    (r"sqrt \((\w+) \* \1\)", "abs"),
    (r"(\w+) \* 0\.25 \+ \1 \* 0\.25", "halve"),
]


def parse_lets(path, prefix, forms, def_name):
    """Reads a generated program `def NAME (p : Real) ... : Real = let PREFIXi = EXPR in ... RESULT`
    into (parameters, [(name, op, a, b)], result); every EXPR must match one of `forms`."""
    with open(path) as fh:
        lines = [l.strip() for l in fh.read().splitlines() if l.strip()]
    m = re.fullmatch(r"def %s ((?:\(\w+ : Real\) ?)+): Real =" % re.escape(def_name), lines[0])
    if not m:
        raise ValueError("%s: unexpected first line %r" % (path, lines[0]))
    params = re.findall(r"\((\w+) : Real\)", m.group(1))
    ops = []
    known = set(params)
    for n, line in enumerate(lines[1:-1], start=2):
        m = re.fullmatch(r"let (%s\d+) = (.*) in" % prefix, line)
        if not m:
            raise ValueError("%s:%d: not a `let %sI = EXPR in` line: %r" % (path, n, prefix, line))
        name, expr = m.groups()
        for pattern, op in forms:
            e = re.fullmatch(pattern, expr)
            if e:
                a = e.group(1)
                b = e.group(2) if e.re.groups >= 2 else a
                for v in (a, b):
                    if v not in known:
                        raise ValueError("%s:%d: unknown variable %s" % (path, n, v))
                ops.append((name, op, a, b))
                known.add(name)
                break
        else:
            raise ValueError("%s:%d: unrecognised expression %r" % (path, n, expr))
    result = lines[-1]
    if result not in known:
        raise ValueError("%s: the last line %r is not a variable" % (path, result))
    return params, ops, result


def prepare(jax, jnp, np, programs, case):
    """Builds, compiles and runs JAX's version of a case: value, gradient, compile times."""
    family = case["family"]
    if family not in programs:
        raise ValueError("no JAX version of family %s" % family)
    with open(case["args"]) as fh:
        args = json.load(fh)
    built = programs[family](case, args)
    f, inputs, argnums = built[:3]
    positions = built[3] if len(built) > 3 else list(range(len(inputs)))
    if len(positions) != len(inputs) or not all(0 <= p < len(args) for p in positions):
        raise ValueError("%d JAX inputs do not map onto %d chad arguments" % (len(inputs), len(args)))
    t0 = time.perf_counter()
    primal = jax.jit(f).lower(*inputs).compile()
    t1 = time.perf_counter()
    grad = jax.jit(jax.value_and_grad(f, argnums=argnums)).lower(*inputs).compile()
    t2 = time.perf_counter()
    value = primal(*inputs)
    gvalue, gs = grad(*inputs)
    gradient = [None] * len(args)
    for i, g in zip(argnums, gs):
        gradient[positions[i]] = np.asarray(g).tolist()
    return {
        "primal": primal,
        "grad": grad,
        "inputs": inputs,
        "check": {
            "value": float(value),
            "grad_value": float(gvalue),
            "gradient": gradient,
            "compile_primal_s": t1 - t0,
            "compile_grad_s": t2 - t1,
        },
    }


def time_case(jax, current, repeat, min_time):
    def run(fn):
        inputs = current["inputs"]
        jax.block_until_ready(fn(*inputs))  # warm-up
        times = []
        start = time.perf_counter()
        while len(times) < repeat or (time.perf_counter() - start < min_time and len(times) < 100000):
            t = time.perf_counter()
            jax.block_until_ready(fn(*inputs))
            times.append(time.perf_counter() - t)
        times.sort()
        n = len(times)
        median = times[n // 2] if n % 2 else 0.5 * (times[n // 2 - 1] + times[n // 2])
        return {"min_s": times[0], "median_s": median, "rounds": n}

    return {"primal": run(current["primal"]), "grad": run(current["grad"])}


# ----- the orchestration (any Python 3) --------------------------------------------------------


class Jax:
    """The JAX worker process in the virtual environment."""

    def __init__(self, python, timeout, memory_gb):
        self.python = python
        self.timeout = timeout
        self.memory_gb = memory_gb
        self._start()
        hello = self._read(120)
        if not hello.get("ok"):
            sys.exit("the JAX worker did not start: %s" % hello.get("error"))
        self.version = hello["jax"]
        self.devices = hello["devices"]

    def _start(self):
        env = dict(os.environ, JAX_PLATFORMS="cpu", JAX_ENABLE_X64="1", PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(
            [self.python, os.path.abspath(__file__), "--jax-worker", str(self.memory_gb)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )

    def _read(self, timeout):
        """The worker's next answer; None after `timeout` seconds; {"died": status} if the
        worker exited. (The worker answers one line per request, so nothing is left in the
        pipe's buffer between answers.)"""
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            return None
        line = self.proc.stdout.readline()
        if not line:
            return {"ok": False, "died": self.proc.wait()}
        return json.loads(line)

    def _restart(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self._start()
        if not (self._read(120) or {}).get("ok"):
            sys.exit("the JAX worker did not restart")

    def ask(self, req):
        try:
            self.proc.stdin.write(json.dumps(req) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass  # the worker died: _read says so
        got = self._read(self.timeout)
        if got is None:
            # A compile or a timing that does not end: stop this worker, start a fresh one.
            self._restart()
            return {"ok": False, "error": "timeout after %g s" % self.timeout}
        if "died" in got:
            status = got["died"]
            self._restart()
            why = "exit status %s" % status
            if status in (1, -6, -9, -11, 134, 137, 139):
                why += ", out of memory? (--jax-memory %g GiB)" % self.memory_gb
            return {"ok": False, "error": "the JAX worker died (%s)" % why}
        return got

    def close(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write(json.dumps({"op": "quit"}) + "\n")
                self.proc.stdin.close()
                self.proc.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()


def ensure_venv(venv, spec):
    """The Python of a virtual environment with JAX, creating it and installing JAX if needed."""
    python = os.path.join(venv, "Scripts" if os.name == "nt" else "bin", "python")
    if not os.path.exists(python):
        log("creating a virtual environment for JAX in", venv)
        subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    probe = [python, "-c", "import jax, numpy"]
    if subprocess.run(probe, capture_output=True).returncode != 0:
        cmd = [python, "-m", "pip", "install", "--quiet", spec]
        log("$", " ".join(cmd))
        if subprocess.run(cmd).returncode != 0:
            sys.exit("pip could not install %s into %s" % (spec, venv))
        if subprocess.run(probe, capture_output=True).returncode != 0:
            sys.exit("%s still cannot import jax after pip install %s" % (python, spec))
    return python


def target_dir():
    return os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))


def binary(*parts):
    path = os.path.join(target_dir(), "release", *parts)
    return path + (".exe" if os.name == "nt" else "")


def build(args):
    """Builds what is needed; returns the path of the native baselines binary or None."""
    targets = ["--example", "bench_suite"]
    if not args.chad:
        targets = ["--bin", "chad"] + targets
    native_src = os.path.exists(os.path.join(ROOT, "examples", "native_baselines.rs"))
    if not args.no_native and native_src:
        targets += ["--example", "native_baselines"]
    if not args.no_build:
        cmd = ["cargo", "build", "--release"] + targets
        log("$", " ".join(cmd))
        if subprocess.run(cmd, cwd=ROOT).returncode != 0:
            sys.exit("cargo build failed")
    native = binary("examples", "native_baselines")
    if args.no_native or not native_src or not os.path.exists(native):
        return None
    return native


def run_json(cmd, timeout):
    """Runs a command that prints one JSON object (on its last line); (object, error)."""
    try:
        p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, "timeout after %g s" % timeout
    except OSError as e:
        return None, str(e)
    if p.returncode != 0:
        lines = [l for l in p.stderr.strip().splitlines() if l.strip()]
        return None, " ".join(lines[:2]) or "exit status %d" % p.returncode
    lines = [l for l in p.stdout.splitlines() if l.strip()]
    try:
        return json.loads(lines[-1]), None
    except (IndexError, ValueError):
        return None, "unreadable output: %r" % p.stdout[:200]


def has_backend_flag(chad):
    """Whether every chad subcommand this script uses takes --backend."""
    for sub in ("eval", "grad", "bench"):
        p = subprocess.run([chad, sub, "--help"], capture_output=True, text=True)
        if p.returncode != 0 or "--backend" not in p.stdout:
            return False
    return True


def chad_cmd(chad, sub, case, backend, *extra):
    cmd = [chad, sub, case["program"], "--def", case["def"], "--args-file", case["args"], "--json"]
    if backend != "engine":
        cmd += ["--backend", backend]
    return cmd + list(extra)


def number(x):
    """A JSON number, or chad's string spelling of a non-finite one."""
    if isinstance(x, str):
        return {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}[x]
    return float(x)


def flatten(x, out):
    if isinstance(x, list):
        for y in x:
            flatten(y, out)
    elif x is not None:
        out.append(number(x))
    return out


def rel(a, b):
    if a == b:
        return 0.0
    if math.isnan(a) or math.isnan(b) or math.isinf(a) or math.isinf(b):
        return math.inf
    return abs(a - b) / max(abs(a), abs(b))


def grad_error(chad, jax):
    """max over arguments of max |chad - JAX| / max |JAX| (inf if the shapes differ)."""
    if len(chad) != len(jax):
        return math.inf, "%d gradients vs %d" % (len(chad), len(jax))
    worst = 0.0
    for i, (c, j) in enumerate(zip(chad, jax)):
        fc, fj = flatten(c, []), flatten(j, [])
        if len(fc) != len(fj):
            return math.inf, "argument %d: %d vs %d gradient elements" % (i + 1, len(fc), len(fj))
        if not fc:
            continue
        if any(math.isnan(x) or math.isinf(x) for x in fc + fj):
            return math.inf, "argument %d: a non-finite gradient element" % (i + 1)
        scale = max(abs(x) for x in fj)
        diff = max(abs(x - y) for x, y in zip(fc, fj))
        worst = max(worst, diff / scale if scale > 0 else diff)
    return worst, None


def seconds(t):
    if t is None:
        return DASH
    if t >= 1:
        return "%.2f s" % t
    if t >= 1e-3:
        return "%.3g ms" % (t * 1e3)
    return "%.3g µs" % (t * 1e6)


def ratio(x):
    if x is None:
        return DASH
    return "%.2f" % x if x < 100 else "%.0f" % x


def measure(case, args, chad, backends, jax, native):
    """Checks and times one case; returns its record (every number, or the reason for none)."""
    name = "%s/%s" % (case["family"], case["label"])
    rec = {"family": case["family"], "size": case["label"], "status": "ok"}
    log("%-26s" % name, end="")

    # 1. values
    ev, err = run_json(chad_cmd(chad, "eval", case, backends[0]), args.timeout)
    if ev is None:
        log(" chad eval failed:", err)
        return dict(rec, status="chad eval failed: %s" % err)
    grads = {}
    for b in backends:
        g, err = run_json(chad_cmd(chad, "grad", case, b), args.timeout)
        if g is None:
            log(" chad grad (%s) failed:" % b, err)
            return dict(rec, status="chad grad (%s) failed: %s" % (b, err))
        grads[b] = g
    j = jax.ask({"op": "prepare", "case": case})
    if not j.get("ok"):
        log(" JAX failed:", j.get("error"))
        return dict(rec, status="JAX failed: %s" % j.get("error"))
    value = number(ev["value"])
    value_err = max(
        [rel(value, j["value"]), rel(value, j["grad_value"])]
        + [rel(number(grads[b]["value"]), j["value"]) for b in backends]
    )
    grad_err, why = 0.0, None
    for b in backends:
        e, w = grad_error(grads[b]["gradient"], j["gradient"])
        if e > grad_err or w:
            grad_err, why = e, w or why
    rec.update(
        value=value,
        jax_value=j["value"],
        value_rel_error=value_err,
        gradient_rel_error=grad_err,
        jax_compile_primal_s=j["compile_primal_s"],
        jax_compile_grad_s=j["compile_grad_s"],
    )
    log(" value error %.1e, gradient error %.1e" % (value_err, grad_err), end="")
    if why or not (value_err <= VALUE_TOL and grad_err <= GRAD_TOL):
        reason = "values disagree (value %.3g vs JAX %.17g, relative error %.2e; gradient error %.2e%s)" % (
            value, j["value"], value_err, grad_err, ": " + why if why else "")
        log(" DISAGREE:", reason)
        return dict(rec, status=reason)

    # 2. times, all in this run
    for b in backends:
        r, err = run_json(chad_cmd(chad, "bench", case, b, "--repeat", str(args.repeat),
                                  "--no-dual"), args.timeout)
        if r is None:
            log(" chad bench (%s) failed:" % b, err)
            return dict(rec, status="chad bench (%s) failed: %s" % (b, err))
        got = r.get("backend", "engine")
        if got != b:
            return dict(rec, status="chad bench --backend %s ran the %s backend" % (b, got))
        rec[b] = {k: r[k] for k in ("primal_s", "forward_s", "reverse_s", "compile_s") if k in r}
    t = jax.ask({"op": "time", "repeat": args.repeat, "min_time": args.jax_min_time})
    if not t.get("ok"):
        log(" JAX timing failed:", t.get("error"))
        return dict(rec, status="JAX timing failed: %s" % t.get("error"))
    rec["jax"] = {"primal": t["primal"], "grad": t["grad"]}
    if native and case.get("native"):
        cmd = [native, case["native"], case["args"], "--repeat", str(args.repeat)]
        n, err = run_json(cmd, args.timeout)
        if n is not None and n.get("native_s", 0) > 0:
            rec["rust_primal_s"] = n["native_s"]
            if "value" in n:
                rec["rust_value_rel_error"] = rel(number(n["value"]), value)
        else:
            log(" (hand-written Rust failed: %s)" % err, end="")
    b = backends[0]
    log(
        "; %s gradient %s, JAX gradient %s"
        % (b, seconds(rec[b]["reverse_s"]), seconds(rec["jax"]["grad"]["median_s"]))
    )
    return rec


def header(backends):
    h = ["program", "size"]
    for b in backends:
        h += ["%s primal" % b, "%s gradient" % b]
    h += ["JAX primal", "JAX gradient"]
    h += ["%s / JAX gradient" % b for b in backends]
    h += ["Rust primal"]
    h += ["%s compile" % b for b in backends]
    h += ["JAX compile"]
    return h


def row(rec, backends):
    cells = [rec["family"], rec["size"].replace("=", " = ")]
    width = len(header(backends))
    if rec["status"] != "ok":
        return cells + [rec["status"]] + [DASH] * (width - 3)
    jg = rec["jax"]["grad"]["median_s"]
    for b in backends:
        cells += [seconds(rec[b]["primal_s"]), seconds(rec[b]["reverse_s"])]
    cells += [seconds(rec["jax"]["primal"]["median_s"]), seconds(jg)]
    cells += [ratio(rec[b]["reverse_s"] / jg) for b in backends]
    cells += [seconds(rec.get("rust_primal_s"))]
    cells += [seconds(rec[b]["compile_s"]) for b in backends]
    cells += [seconds(rec["jax_compile_primal_s"] + rec["jax_compile_grad_s"])]
    return cells


def table(head, rows, note):
    out = ["| " + " | ".join(head) + " |", "| --- | --- |" + " ---: |" * (len(head) - 2)]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out) + "\n\n" + note + "\n"


def existing_rows(text, width):
    m = re.search(re.escape(BEGIN) + "(.*?)" + re.escape(END), text, re.S)
    rows = {}
    if not m:
        return rows
    for line in m.group(1).splitlines():
        if not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == width and cells[0] not in ("program", "---"):
            rows[(cells[0], cells[1])] = cells
    return rows


def main():
    if sys.argv[1:2] == ["--jax-worker"]:
        jax_worker(float(sys.argv[2]) if len(sys.argv) > 2 else 0)
        return
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0].replace("\n", " "),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="See the top of benches/jax_compare.py for what is measured and how.",
    )
    ap.add_argument("--chad", help="the chad binary (default: build and use target/release/chad)")
    ap.add_argument("--backend", choices=["native", "engine"], default="native",
                    help="chad's backend to compare (default native; the engine is measured too; "
                         "if chad has no --backend flag yet, the engine alone)")
    ap.add_argument("--repeat", type=int, default=None,
                    help="timed rounds for chad and Rust, and at least as many JAX calls "
                         "(default 10, 3 with --quick)")
    ap.add_argument("--jax-min-time", type=float, default=0.5, metavar="S",
                    help="time each JAX function for at least S seconds (default 0.5)")
    ap.add_argument("--only", action="append", default=[], metavar="FAMILY",
                    help="this family only (repeatable; default: %s)" % ", ".join(DEFAULT_FAMILIES))
    ap.add_argument("--all", action="store_true",
                    help="every family with a JAX version (adds %s)"
                         % ", ".join(JAX_FAMILIES[len(DEFAULT_FAMILIES):]))
    ap.add_argument("--quick", action="store_true", help="each family's smallest size only")
    ap.add_argument("--markdown", metavar="OUT", help="also write the table to OUT")
    ap.add_argument("--json", metavar="OUT", help="write every measurement to OUT")
    ap.add_argument("--readme", action="store_true",
                    help="replace the table between %s and %s in README.md" % (BEGIN, END))
    ap.add_argument("--dir", help="write the suite's files into DIR (default: a temporary directory)")
    ap.add_argument("--use-dir", metavar="DIR",
                    help="read the suite's files already written in DIR (its index.json)")
    ap.add_argument("--no-build", action="store_true", help="use the binaries already built")
    ap.add_argument("--no-native", action="store_true", help="skip the hand-written Rust baselines")
    ap.add_argument("--venv", default=DEFAULT_VENV,
                    help="the virtual environment for JAX (default %s)" % DEFAULT_VENV)
    ap.add_argument("--jax-spec", default="jax",
                    help="what pip installs there when it has no JAX (default: jax)")
    ap.add_argument("--jax-memory", type=float, default=8, metavar="GIB",
                    help="limit the JAX process's address space to GIB GiB (default 8, 0: none); "
                         "a case over it is reported, not fatal")
    ap.add_argument("--skip", action="append", default=[], metavar="CASE",
                    help="leave out a case, e.g. straight_line/lets=10000 (repeatable)")
    ap.add_argument("--timeout", type=float, default=900, help="seconds per chad command and per JAX compile or timing (default 900)")
    args = ap.parse_args()
    if args.repeat is None:
        args.repeat = 3 if args.quick else 10
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")
    if args.dir and args.use_dir:
        ap.error("--dir and --use-dir exclude each other")
    unknown = [f for f in args.only if f not in JAX_FAMILIES]
    if unknown:
        ap.error("no JAX version of %s (families: %s)" % (", ".join(unknown), ", ".join(JAX_FAMILIES)))
    if args.readme and not os.path.exists(README):
        ap.error("%s does not exist" % README)

    # chad, the suite, JAX
    native = build(args)
    chad = os.path.abspath(args.chad) if args.chad else binary("chad")
    if not os.path.exists(chad):
        sys.exit("no chad binary at %s (build it, or pass --chad)" % chad)
    backends = ["engine"]
    if args.backend == "native":
        if has_backend_flag(chad):
            backends = ["native", "engine"]
        else:
            log("note: %s has no --backend flag (the native backend has not landed): "
                "comparing the engine with JAX" % chad)
    if args.use_dir:
        suite_dir = args.use_dir
    else:
        suite_dir = args.dir or tempfile.mkdtemp(prefix="chad-jax-")
        if not args.dir:
            atexit.register(shutil.rmtree, suite_dir, ignore_errors=True)
        writer = binary("examples", "bench_suite")
        if not os.path.exists(writer):
            sys.exit("no %s (run without --no-build)" % writer)
        p = subprocess.run([writer, "write", suite_dir], cwd=ROOT, capture_output=True, text=True)
        if p.returncode != 0:
            sys.exit("bench_suite write failed:\n" + p.stderr)
    index = os.path.join(suite_dir, "index.json")
    try:
        with open(index) as f:
            cases = json.load(f)["cases"]
    except (OSError, ValueError, KeyError) as e:
        sys.exit("cannot read the suite's index %s: %s" % (index, e))
    families = args.only or (JAX_FAMILIES if args.all else DEFAULT_FAMILIES)
    selected = [c for c in cases if c["family"] in families]
    missing = [f for f in families if not any(c["family"] == f for c in cases)]
    if missing:
        sys.exit("the suite has no family %s" % ", ".join(missing))
    names = {"%s/%s" % (c["family"], c["label"]) for c in cases}
    unknown = [s for s in args.skip if s not in names]
    if unknown:
        sys.exit("no case %s (cases are named like %s)" % (", ".join(unknown), sorted(names)[0]))
    selected = [c for c in selected if "%s/%s" % (c["family"], c["label"]) not in args.skip]
    if args.quick:
        smallest = {}
        for c in selected:
            if c["family"] not in smallest or c["size"] < smallest[c["family"]]["size"]:
                smallest[c["family"]] = c
        selected = [c for c in selected if smallest[c["family"]] is c]
    python = ensure_venv(args.venv, args.jax_spec)
    jax = Jax(python, args.timeout, args.jax_memory)
    log("JAX %s on %s; chad %s (%s)" % (jax.version, ", ".join(jax.devices), chad, " and ".join(backends)))

    records = []
    try:
        for c in selected:
            records.append(measure(c, args, chad, backends, jax, native))
    finally:
        jax.close()

    # the table
    head = header(backends)
    rows = [row(r, backends) for r in records]
    flags = " ".join(
        (["--backend %s" % args.backend])
        + (["--quick"] if args.quick else [])
        + (["--all"] if args.all else [])
        + ["--only %s" % f for f in args.only]
        + ["--skip %s" % c for c in args.skip]
        + ["--repeat %d" % args.repeat]
    )
    load = "load average %.1f at the end" % os.getloadavg()[0] if hasattr(os, "getloadavg") else ""
    note = (
        "Medians; \"gradient\" is one run returning the value and the gradient (chad's reverse "
        "mode, JAX's jitted `value_and_grad`); \"Rust primal\" is the hand-written objective of "
        "`benches/native` (`–`: none); \"compile\" is chad's compile_s and JAX's ahead-of-time "
        "compile of the primal and the gradient. Values and gradients were checked against JAX "
        "first (relative %g and %g). chad: %s; JAX %s (CPU, jit, float64); last run: `python3 "
        "benches/jax_compare.py %s`, %s, %d cores, %s."
        % (VALUE_TOL, GRAD_TOL, " and ".join(backends), jax.version, flags,
           datetime.date.today().isoformat(), os.cpu_count() or 0, load)
    )
    out = table(head, rows, note)
    print(out)
    bad = [r for r in records if r["status"] != "ok"]
    if bad:
        log("%d case(s) not timed:" % len(bad))
        for r in bad:
            log("  %s/%s: %s" % (r["family"], r["size"], r["status"]))
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(out)
        log("wrote", args.markdown)
    if args.json:
        meta = {
            "date": datetime.datetime.now().isoformat(timespec="seconds"),
            "jax": jax.version,
            "backends": backends,
            "repeat": args.repeat,
            "jax_min_time": args.jax_min_time,
            "machine": platform.platform(),
            "cores": os.cpu_count(),
        }
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "cases": records}, f, indent=1)
        log("wrote", args.json)
    if args.readme:
        with open(README) as f:
            text = f.read()
        if BEGIN not in text or END not in text:
            sys.exit("README.md has no %s ... %s markers" % (BEGIN, END))
        old = existing_rows(text, len(head))
        measured = {(r[0], r[1]): r for r in rows}
        merged = []
        for c in cases:  # manifest order
            key = (c["family"], c["label"].replace("=", " = "))
            if key in measured:
                merged.append(measured[key])
            elif key in old:
                merged.append(old[key])
        start = text.index(BEGIN) + len(BEGIN)
        text = text[:start] + "\n" + table(head, merged, note) + text[text.index(END):]
        with open(README, "w") as f:
            f.write(text)
        log("updated", README)
    if bad:
        sys.exit(1)


if __name__ == "__main__":
    main()
