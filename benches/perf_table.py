#!/usr/bin/env python3
"""Regenerates the README's performance table from the benchmark suite.

Builds the release binaries, writes every case of the suite (benches/programs/suite.json) to
files with `cargo run --release --example bench_suite -- write DIR` (programs, arguments and an
index; the suite is defined once, in Rust), runs

    target/release/chad bench PROGRAM --def DEF --args-file ARGS --json --repeat N --no-dual

for every case, and, for the families with a hand-written Rust baseline, the example
`native_baselines PROGRAM ARGS_FILE --repeat N` (printing {"native_s": seconds}) if it exists.
The table (program, size, primal time, forward/primal, reverse/primal, compile time,
primal / hand-written Rust) replaces the text between `<!-- perf-table:begin -->` and
`<!-- perf-table:end -->` in README.md. Rows of cases not measured in this run (see --only and
--quick) are kept from the existing table, so the suite can be measured a family at a time.

Usage:
    python3 benches/perf_table.py [--quick] [--only FAMILY]... [--repeat N] [--timeout S]
                                  [--dir DIR] [--no-readme] [--no-build]

Python 3 standard library only.
"""

import argparse
import datetime
import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")
BEGIN = "<!-- perf-table:begin -->"
END = "<!-- perf-table:end -->"
DASH = "–"
HEADER = [
    "program",
    "size",
    "primal",
    "forward / primal",
    "reverse / primal",
    "compile",
    "primal / hand-written Rust",
]


def log(*args, end="\n"):
    print(*args, file=sys.stderr, flush=True, end=end)


def build(native):
    """Builds chad and the suite writer; returns whether the native baselines built."""
    cmd = ["cargo", "build", "--release", "--bin", "chad", "--example", "bench_suite"]
    log("$", " ".join(cmd))
    subprocess.run(cmd, cwd=ROOT, check=True)
    if not native:
        return False
    if not os.path.exists(os.path.join(ROOT, "examples", "native_baselines.rs")):
        log("examples/native_baselines.rs does not exist yet: no native column")
        return False
    cmd = ["cargo", "build", "--release", "--example", "native_baselines"]
    log("$", " ".join(cmd))
    if subprocess.run(cmd, cwd=ROOT).returncode != 0:
        log("the native baselines do not build: no native column")
        return False
    return True


def target_dir():
    return os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))


def binary(*parts):
    path = os.path.join(target_dir(), "release", *parts)
    return path + (".exe" if os.name == "nt" else "")


def run_json(cmd, timeout):
    """Runs a command that prints one JSON object (on its last line); (object, error)."""
    try:
        p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, "timeout"
    if p.returncode != 0:
        return None, (p.stderr.strip().splitlines() or ["exit %d" % p.returncode])[0]
    lines = [l for l in p.stdout.splitlines() if l.strip()]
    try:
        return json.loads(lines[-1]), None
    except (IndexError, ValueError):
        return None, "unreadable output: %r" % p.stdout[:200]


def seconds(t):
    if t >= 1:
        return "%.2f s" % t
    if t >= 1e-3:
        return "%.3g ms" % (t * 1e3)
    return "%.3g µs" % (t * 1e6)


def ratio(x):
    return "%.2f" % x if x < 100 else "%.0f" % x


def measure(case, args, native_ok):
    """One table row (a list of cells) for a case of the index."""
    cmd = [
        binary("chad"),
        "bench",
        case["program"],
        "--def",
        case["def"],
        "--args-file",
        case["args"],
        "--json",
        "--repeat",
        str(args.repeat),
        "--no-dual",  # the dual-numbers baseline has its own table (examples/dual_reverse.rs)
    ]
    log("%-28s" % (case["family"] + "/" + case["label"]), end="")
    row = [case["family"], case["label"].replace("=", " = ")]
    r, err = run_json(cmd, args.timeout)
    if r is None:
        log(" chad bench failed:", err)
        return row + [err if err == "timeout" else "error", DASH, DASH, DASH, DASH]
    row += [
        seconds(r["primal_s"]),
        ratio(r["forward_over_primal"]),
        ratio(r["reverse_over_primal"]),
        seconds(r["compile_s"]),
    ]
    native = DASH
    if native_ok and case.get("native"):
        cmd = [
            binary("examples", "native_baselines"),
            case["native"],
            case["args"],
            "--repeat",
            str(args.repeat),
        ]
        n, err = run_json(cmd, args.timeout)
        if n is not None and n.get("native_s", 0) > 0:
            native = ratio(r["primal_s"] / n["native_s"])
        else:
            log(" (native baseline failed: %s)" % err, end="")
    row.append(native)
    log(
        " primal %s, forward/primal %s, reverse/primal %s, compile %s, native %s"
        % tuple(row[2:])
    )
    return row


def table(rows, note):
    out = ["| " + " | ".join(HEADER) + " |", "| --- | --- |" + " ---: |" * (len(HEADER) - 2)]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out) + "\n\n" + note + "\n"


def existing_rows(text):
    """The rows of the table currently between the markers, keyed by (program, size)."""
    m = re.search(re.escape(BEGIN) + "(.*?)" + re.escape(END), text, re.S)
    rows = {}
    if not m:
        return rows
    for line in m.group(1).splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == len(HEADER) and cells[0] not in ("program", "---"):
            rows[(cells[0], cells[1])] = cells
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="each family's smallest size, 3 repeats")
    ap.add_argument("--only", action="append", default=[], metavar="FAMILY",
                    help="measure only this family (repeatable)")
    ap.add_argument("--repeat", type=int, default=None, help="timed rounds per case (default 10)")
    ap.add_argument("--timeout", type=float, default=900, help="seconds per command (default 900)")
    ap.add_argument("--dir", default=os.path.join(target_dir(), "bench-suite"),
                    help="where the suite's files are written (default target/bench-suite)")
    ap.add_argument("--no-readme", action="store_true", help="print the table only")
    ap.add_argument("--no-build", action="store_true", help="use the binaries already built")
    ap.add_argument("--no-native", action="store_true", help="skip the hand-written baselines")
    args = ap.parse_args()
    if args.repeat is None:
        args.repeat = 3 if args.quick else 10
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")

    if args.no_build:
        native_ok = not args.no_native and os.path.exists(binary("examples", "native_baselines"))
    else:
        native_ok = build(not args.no_native)
    subprocess.run([binary("examples", "bench_suite"), "write", args.dir], cwd=ROOT, check=True)
    with open(os.path.join(args.dir, "index.json")) as f:
        cases = json.load(f)["cases"]
    families = []
    for c in cases:
        if c["family"] not in families:
            families.append(c["family"])
    unknown = [f for f in args.only if f not in families]
    if unknown:
        ap.error("no family %s (families: %s)" % (", ".join(unknown), ", ".join(families)))
    selected = [c for c in cases if not args.only or c["family"] in args.only]
    if args.quick:
        smallest = {}
        for c in selected:
            if c["family"] not in smallest or c["size"] < smallest[c["family"]]["size"]:
                smallest[c["family"]] = c
        selected = [c for c in selected if smallest[c["family"]] is c]

    measured = {}
    for c in selected:
        row = measure(c, args, native_ok)
        measured[(row[0], row[1])] = row

    with open(README) as f:
        text = f.read()
    old = existing_rows(text)
    rows = []
    for c in cases:  # manifest order
        key = (c["family"], c["label"].replace("=", " = "))
        if key in measured:
            rows.append(measured[key])
        elif key in old:
            rows.append(old[key])
    flags = " ".join(
        (["--quick"] if args.quick else [])
        + ["--only %s" % f for f in args.only]
        + ["--repeat %d" % args.repeat]
    )
    note = (
        "Medians of `--repeat` rounds; last run: `python3 benches/perf_table.py %s`, %s. "
        "`–`: no hand-written baseline (or it was not available)."
        % (flags, datetime.date.today().isoformat())
    )
    out = table(rows, note)
    print(out)
    if args.no_readme:
        return
    if BEGIN not in text or END not in text:
        sys.exit("README.md has no %s ... %s markers" % (BEGIN, END))
    start = text.index(BEGIN) + len(BEGIN)
    text = text[:start] + "\n" + out + text[text.index(END):]
    with open(README, "w") as f:
        f.write(text)
    log("updated", README)


if __name__ == "__main__":
    main()
