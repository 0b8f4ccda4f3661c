"""What a check costs on a small input, where it is a full Jacobian: its
columns and rows from one vectorised (vmap) call per mode, and fn at every
column's stencil points from one vectorised call, against one call per
column, row and point (``vectorise=False``), side by side.

Functions from the naive-strategy suite (gradverify._sweep.examples.naive_cases)
at x and b of 5 elements (fn(x, b)) or one row of 5 (fn(x)), float64 and
float32, inputs drawn once from a fixed seed. Rounds alternate the two
settings; the table gives each one's median time of one check over all
rounds and their ratio.

    python benchmarks/bench_small.py [--rounds 30]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import gradverify as gv
from gradverify._sweep.examples import naive_cases
from gradverify.strategies._arrays import to_backend

CASES = (
    "bias_act:gelu (torch)",
    "bias_act:relu (torch)",
    "bias_act:gelu (jax)",
    "bias_act:relu (jax)",
    "torch.logsumexp",
    "F.layer_norm",
    "jax.nn.logsumexp",
)


def inputs(case, dtype: str) -> tuple:
    rng = np.random.default_rng(0)
    shape = (5,) if case.kind == "xb" else (1, 5)
    arrays = [rng.uniform(-10, 10, shape) for _ in range(2 if case.kind == "xb" else 1)]
    return tuple(to_backend(a, case.backend, dtype) for a in arrays)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=30)
    a = p.parse_args()
    by_label = {c.label: c for c in naive_cases()}
    print(f"median ms per check over {a.rounds} rounds (gradverify {gv.__version__})\n")
    print(
        "| function | dtype | vectorised | one call per column/row/point | ratio "
        "| JVP + VJP calls (vectorised / not) | calls of fn (vectorised / not) |"
    )
    print("|---|---|---|---|---|---|---|")
    with gv.compiling():
        for label in CASES:
            case = by_label[label]
            for dtype in ("float64", "float32"):
                args = inputs(case, dtype)
                times: dict[bool, list[float]] = {True: [], False: []}
                calls, primal = {}, {}
                for v in (True, False):  # warm up (jax compiles each form once)
                    r = gv.check(case.fn, *args, vectorise=v)
                    assert r.ok, str(r)
                    calls[v] = r.evaluations.get("jvp", 0) + r.evaluations.get("vjp", 0)
                    primal[v] = r.evaluations.get("primal", 0)
                for _ in range(a.rounds):
                    for v in (True, False):
                        t = time.perf_counter()
                        gv.check(case.fn, *args, vectorise=v)
                        times[v].append(time.perf_counter() - t)
                on, off = (1e3 * statistics.median(times[v]) for v in (True, False))
                print(
                    f"| {label} | {dtype} | {on:.2f} | {off:.2f} | {off / on:.2f}x | {calls[True]} / {calls[False]} "
                    f"| {primal[True]} / {primal[False]} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
