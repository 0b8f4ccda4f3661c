"""Detection benchmark: one sign-flipped element of the reverse-mode
gradient of tanh(x + b) (forward mode correct), float64, n = 10^3 .. 10^6
elements of x, ten random positions each. Side by side in one run:

* gradverify's default check on a torch autograd.Function (correct jvp, wrong backward),
* gradverify's default check on the equivalent jax custom_vjp (no JVP: FD bisection),
* torch.autograd.gradcheck(fast_mode=True),
* jax.test_util.check_grads(modes=("rev",)) on the custom_vjp.

Reports detections out of ten (for gradverify: the flipped index must be the one
reported), and the median time of one check as a multiple of the median time of
one forward+backward pass of the same function on the same backend.

    python benchmarks/bench_detection.py [--sizes 1000 10000 100000 1000000] [--positions 10]
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
import torch
from jax.test_util import check_grads

import gradverify as gv
from gradverify._examples import tanh_bias_flipped

COLS = 10


def torch_fn(flip_at: int):
    return tanh_bias_flipped("torch", flip_at)


def jax_fn(flip_at: int):
    return tanh_bias_flipped("jax", flip_at)


def timed(f):
    t0 = time.perf_counter()
    out = f()
    return out, time.perf_counter() - t0


def fwd_bwd_torch(fn, x, b, reps=5):
    ts = []
    for _ in range(reps):
        xr, br = x.detach().requires_grad_(), b.detach().requires_grad_()

        def run():
            y = fn(xr, br)
            y.backward(torch.ones_like(y))

        ts.append(timed(run)[1])
    return statistics.median(ts)


def fwd_bwd_jax(fn, x, b, reps=5):
    ts = []
    for _ in range(reps):

        def run():
            y, pull = jax.vjp(fn, x, b)
            jax.block_until_ready(pull(jnp.ones_like(y)))

        ts.append(timed(run)[1])
    return statistics.median(ts[1:]) if reps > 1 else ts[0]


def bench(n: int, positions: int, seed: int = 0) -> dict:
    rng = np.random.default_rng([seed, n])
    rows = n // COLS
    xn, bn = rng.standard_normal((rows, COLS)), rng.standard_normal(COLS)
    flips = rng.choice(n, size=positions, replace=False)
    xt, bt = torch.from_numpy(xn), torch.from_numpy(bn)
    with jax.enable_x64(True):
        xj, bj = jnp.asarray(xn), jnp.asarray(bn)
    res = {k: {"hits": 0, "times": [], "base": []} for k in ("gv_torch", "gv_jax", "gradcheck", "check_grads")}
    for flip in flips:
        expected = tuple(int(k) for k in np.unravel_index(flip, (rows, COLS)))
        tf = torch_fn(int(flip))
        res["gv_torch"]["base"].append(fwd_bwd_torch(tf, xt, bt))
        r, t = timed(lambda: gv.check(tf, xt, bt))
        res["gv_torch"]["times"].append(t)
        res["gv_torch"]["hits"] += _located(r, expected)

        r, t = timed(
            lambda: torch.autograd.gradcheck(
                tf,
                (xt.clone().requires_grad_(), bt.clone().requires_grad_()),
                fast_mode=True,
                raise_exception=False,
            )
        )
        res["gradcheck"]["times"].append(t)
        res["gradcheck"]["base"].append(res["gv_torch"]["base"][-1])
        res["gradcheck"]["hits"] += int(r is False)

        with jax.enable_x64(True):
            jf = jax_fn(int(flip))
            base = fwd_bwd_jax(jf, xj, bj)
            res["gv_jax"]["base"].append(base)
            r, t = timed(lambda: gv.check(jf, xj, bj))
            res["gv_jax"]["times"].append(t)
            res["gv_jax"]["hits"] += _located(r, expected)

            def cg():
                try:
                    check_grads(jf, (xj, bj), order=1, modes=("rev",))
                    return False
                except AssertionError:
                    return True

            r, t = timed(cg)
            res["check_grads"]["times"].append(t)
            res["check_grads"]["base"].append(base)
            res["check_grads"]["hits"] += int(r)
    return res


def _located(r: gv.CheckResult, expected: tuple[int, ...]) -> int:
    return int(
        not r.ok
        and any(f.kind == gv.Kind.MISMATCH and f.argument == 0 and f.input_index == expected for f in r.findings)
    )


LABELS = {
    "gv_torch": "gradverify `check` (torch Function)",
    "gv_jax": "gradverify `check` (jax custom_vjp, no JVP)",
    "gradcheck": "torch `gradcheck(fast_mode=True)`",
    "check_grads": "jax `check_grads(modes=('rev',))`",
}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--sizes", type=int, nargs="+", default=[1000, 10_000, 100_000, 1_000_000])
    p.add_argument("--positions", type=int, default=10)
    args = p.parse_args()
    torch.set_num_threads(1)
    table = {}
    for n in args.sizes:
        table[n] = bench(n, args.positions)
        print(f"n={n} done", flush=True)
    head = "| tool | " + " | ".join(f"n = {n:.0e}".replace("e+0", "e") for n in args.sizes) + " |"
    print()
    print(head)
    print("|" + "---|" * (len(args.sizes) + 1))
    for key, label in LABELS.items():
        cells = []
        for n in args.sizes:
            r = table[n][key]
            ratio = statistics.median(t / b for t, b in zip(r["times"], r["base"]))
            cells.append(f"{r['hits']}/{args.positions}, {ratio:.1f}x")
        print(f"| {label} | " + " | ".join(cells) + " |")
    print()
    print(
        "cells: detections (gradverify: with the flipped index reported) / positions, "
        "median time of one check as a multiple of one forward+backward pass of the same function"
    )
    base = ", ".join(
        f"n={n:.0e}: torch {1e3 * statistics.median(table[n]['gv_torch']['base']):.2f} ms, "
        f"jax {1e3 * statistics.median(table[n]['gv_jax']['base']):.2f} ms"
        for n in args.sizes
    )
    print(f"one forward+backward pass (median): {base}")


if __name__ == "__main__":
    main()
