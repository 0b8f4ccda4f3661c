"""The first check of a jax function on large arrays on the CPU, each in a fresh process.

A jax ``custom_vjp`` of tanh(x + b) (bench_detection's), float64, correct and
with one sign-flipped element of its VJP, checked by gradverify as it is
(its arithmetic in numpy, which reads jax's CPU arrays where they lie) and
with ``gradverify.backends.jax.CPU_IN_JAX`` set (its arithmetic in eager
jax, as on an accelerator), beside ``check_grads(order=1, modes=("rev",))``.
Per tool: the first check's wall time and the programs jax compiled for it
(fn's own eager programs compiled before, by one call of fn), then the median
of three repeats. Rounds alternate the tools; cells are medians over rounds.

    python benchmarks/bench_jax_first.py --sizes 100000 1000000 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

ONE = r"""
import json, sys, time
import numpy as np
import jax
import gradverify as gv
import gradverify.backends.jax
from gradverify._sweep.examples import tanh_bias_flipped
n, tool, flip = int(sys.argv[1]), sys.argv[2], sys.argv[3] == "flipped"
gradverify.backends.jax.CPU_IN_JAX = tool == "in-jax"
compiles = [0]
def listen(event, duration, **kw):
    compiles[0] += event == "/jax/core/compile/backend_compile_duration"
jax.monitoring.register_event_duration_secs_listener(listen)
rng = np.random.default_rng([0, n])
with jax.enable_x64(True):
    x, b = jax.numpy.asarray(rng.standard_normal((n // 10, 10))), jax.numpy.asarray(rng.standard_normal(10))
    rule = tanh_bias_flipped("jax", n // 2 + 7 if flip else None)
    rule(x, b).block_until_ready()
    if tool == "check_grads":
        from jax.test_util import check_grads
        def once():
            try:
                check_grads(rule, (x, b), order=1, modes=("rev",))
                return not flip
            except AssertionError:
                return flip  # (it names no element)
    else:
        def once():
            r = gv.check(rule, x, b)
            named = any(f.input_index == np.unravel_index(n // 2 + 7, x.shape) for f in r.findings)
            return r.ok if not flip else (not r.ok and named)
    compiles[0] = 0
    t = time.perf_counter(); right = once(); first = time.perf_counter() - t
    programs = compiles[0]
    again = []
    for _ in range(3):
        t = time.perf_counter(); once(); again.append(time.perf_counter() - t)
print(json.dumps({"first": first, "programs": programs, "again": sorted(again)[1], "right": right}))
"""

TOOLS = ("gradverify", "in-jax", "check_grads")
LABELS = {
    "gradverify": "gradverify (numpy arithmetic, the default)",
    "in-jax": "gradverify, CPU_IN_JAX (eager jax arithmetic)",
    "check_grads": "check_grads",
}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    import jax

    print(f"jax {jax.__version__}, CPU; cells: median over {args.rounds} rounds")
    for n in args.sizes:
        print(f"\nn = {n:.0e}\n")
        print("| tool | rule | verdict right | first check (s) | programs compiled | repeat (s) |")
        print("|---|---|---|---|---|---|")
        runs: dict[tuple[str, str], list[dict]] = {}
        for _ in range(args.rounds):
            for case in ("correct", "flipped"):
                for tool in TOOLS:
                    out = subprocess.run(
                        [sys.executable, "-c", ONE, str(n), tool, case], capture_output=True, text=True, check=True
                    )
                    runs.setdefault((tool, case), []).append(json.loads(out.stdout.strip().splitlines()[-1]))
        for case in ("correct", "flipped"):
            for tool in TOOLS:
                rs = runs[(tool, case)]
                right = sum(r["right"] for r in rs)
                med = {k: statistics.median(r[k] for r in rs) for k in ("first", "programs", "again")}
                print(
                    f"| {LABELS[tool]} | {case} | {right}/{len(rs)} | {med['first']:.2f} | {med['programs']:.0f} "
                    f"| {med['again']:.3f} |"
                )


if __name__ == "__main__":
    main()
