"""What a full-Jacobian check costs with its columns estimated together (one
finite-difference stencil for the columns whose outputs AD says are disjoint,
see Oracle.first_order) against every column on its own stencil, side by side.

1. One check at fixed inputs: functions of the naive-strategy suite
   (gradverify._examples.naive_cases) at x and b of 5 elements (fn(x, b)) or
   a 3 x 5 x (fn(x)), float64 and float32, drawn once from a fixed seed.
   Rounds alternate the two settings; the table gives each one's median time
   of one check and their ratio, and the evaluations of fn each made.
2. ``gv.verify`` on the naive strategy (what the naive-strategy tests run),
   seeds alternating the two settings. The columns' references are the same
   bit for bit either way, so Hypothesis draws the same examples for both.

    python benchmarks/bench_columns.py [--rounds 20] [--examples 100] [--seeds 2]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from collections.abc import Iterator

import numpy as np

import gradverify as gv
import gradverify._oracle as oracle
from gradverify._examples import naive_cases, naive_strategy
from gradverify.strategies._arrays import to_backend

CASES = (
    "bias_act:sigmoid (torch)",
    "bias_act:relu (torch)",
    "bias_act:sigmoid (jax)",
    "bias_act:gelu (jax)",
    "torch.logsumexp",
    "jax.nn.logsumexp",
    "F.layer_norm",
)
SETTINGS = ("together", "alone")


@contextlib.contextmanager
def setting(name: str) -> Iterator[None]:
    """``alone``: no two columns' steps lie far enough apart to share a stencil."""
    before = oracle.GROUP_SEPARATION
    oracle.GROUP_SEPARATION = before if name == "together" else float("inf")
    try:
        yield
    finally:
        oracle.GROUP_SEPARATION = before


def inputs(case, dtype: str) -> tuple:
    rng = np.random.default_rng(0)
    shape = (5,) if case.kind == "xb" else (3, 5)
    arrays = [rng.uniform(-10, 10, shape) for _ in range(2 if case.kind == "xb" else 1)]
    return tuple(to_backend(a, case.backend, dtype) for a in arrays)


def one_check(cases: dict, rounds: int) -> None:
    print(f"## One check: median ms over {rounds} rounds\n")
    print("| function | dtype | together | alone | ratio | evaluations of fn (together / alone) |")
    print("|---|---|---|---|---|---|")
    with gv.compiling():
        for label in CASES:
            case = cases[label]
            for dtype in ("float64", "float32"):
                args = inputs(case, dtype)
                times: dict[str, list[float]] = {s: [] for s in SETTINGS}
                calls = {}
                for s in SETTINGS:  # warm up (jax compiles each form once)
                    with setting(s):
                        r = gv.check(case.fn, *args)
                    assert r.ok, str(r)
                    calls[s] = r.evaluations.get("primal", 0)
                for _ in range(rounds):
                    for s in SETTINGS:
                        with setting(s):
                            t = time.perf_counter()
                            gv.check(case.fn, *args)
                            times[s].append(time.perf_counter() - t)
                on, off = (1e3 * statistics.median(times[s]) for s in SETTINGS)
                print(
                    f"| {label} | {dtype} | {on:.2f} | {off:.2f} | {off / on:.2f}x "
                    f"| {calls['together']} / {calls['alone']} |",
                    flush=True,
                )


def verify_runs(cases: dict, examples: int, seeds: int) -> None:
    print(f"\n## gv.verify on the naive strategy: seconds for {seeds} seed(s) x {examples} examples\n")
    print("| function | dtype | together | alone | ratio |")
    print("|---|---|---|---|---|")
    totals = dict.fromkeys(SETTINGS, 0.0)
    for label in CASES:
        case = cases[label]
        for dtype in ("float64", "float32"):
            spent = dict.fromkeys(SETTINGS, 0.0)
            with gv.compiling():
                for s in SETTINGS:  # (jax compiles for each shape, under either setting)
                    with setting(s):
                        gv.verify(case.fn, naive_strategy(case, dtype), max_examples=60, seed=99)
                for seed in range(seeds):
                    for s in SETTINGS if seed % 2 == 0 else SETTINGS[::-1]:
                        with setting(s):
                            t = time.perf_counter()
                            r = gv.verify(case.fn, naive_strategy(case, dtype), max_examples=examples, seed=seed)
                            spent[s] += time.perf_counter() - t
                        assert r.ok, str(r)
            for s in SETTINGS:
                totals[s] += spent[s]
            print(
                f"| {label} | {dtype} | {spent['together']:.2f} | {spent['alone']:.2f} "
                f"| {spent['alone'] / spent['together']:.2f}x |",
                flush=True,
            )
    print(f"| all | | {totals['together']:.1f} | {totals['alone']:.1f} | {totals['alone'] / totals['together']:.2f}x |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--examples", type=int, default=100)
    p.add_argument("--seeds", type=int, default=2)
    a = p.parse_args()
    cases = {c.label: c for c in naive_cases()}
    print(f"gradverify {gv.__version__}\n")
    one_check(cases, a.rounds)
    verify_runs(cases, a.examples, a.seeds)


if __name__ == "__main__":
    main()
