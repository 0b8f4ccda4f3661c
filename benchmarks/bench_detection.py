"""Detection benchmark: one sign-flipped element of the reverse-mode
gradient of tanh(x + b) (forward mode correct), float64, x of n elements on
the chosen device (``--device cpu`` or ``cuda``), ten random positions each.
Side by side in one run:

* gradverify's default check on a torch autograd.Function (correct jvp, wrong backward),
* the same Function with its backward only (as most are written: FD localises),
* gradverify's default check on the equivalent jax custom_vjp (no JVP: FD bisection),
* torch.autograd.gradcheck(fast_mode=True),
* jax.test_util.check_grads(modes=("rev",)) on the custom_vjp.

Reports detections out of ten (for gradverify: the flipped index must be the one
reported), the median time of one check as a multiple of the median time of
one forward+backward pass of the same function on the same backend and device
(every function warmed up first), and gradverify's peak memory beyond the
inputs in units of x's size: resident memory sampled every millisecond on the
CPU, ``torch.cuda.max_memory_allocated`` on a GPU (torch only).

    python benchmarks/bench_detection.py --device cpu [--sizes 1000000 10000000] [--positions 10]
    python benchmarks/bench_detection.py --device cuda    # n = 1e6, 1e7, 1e8
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time

import jax
import jax.numpy as jnp
import numpy as np
import torch
from jax.test_util import check_grads

import gradverify as gv
from gradverify._sweep.examples import tanh_bias_flipped

COLS = 10


def torch_fn(flip_at: int, forward_rule: bool = True):
    return tanh_bias_flipped("torch", flip_at, forward_rule=forward_rule)


def jax_fn(flip_at: int):
    return tanh_bias_flipped("jax", flip_at)


def timed(f):
    t0 = time.perf_counter()
    out = f()
    return out, time.perf_counter() - t0


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def fwd_bwd_torch(fn, x, b, reps=5):
    ts = []
    for _ in range(reps + 1):
        xr, br = x.detach().requires_grad_(), b.detach().requires_grad_()

        def run():
            y = fn(xr, br)
            y.backward(torch.ones_like(y))
            sync(x.device.type)

        ts.append(timed(run)[1])
    return statistics.median(ts[1:])


class PeakRSS:
    """The largest resident set size seen while the block runs, beyond its start
    (sampled every millisecond from /proc/self/statm)."""

    def __enter__(self):
        self.page = os.sysconf("SC_PAGE_SIZE")
        self.start = self.peak = self._rss()
        self.running = True
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()
        return self

    def _rss(self) -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * self.page

    def _watch(self) -> None:
        while self.running:
            self.peak = max(self.peak, self._rss())
            time.sleep(0.001)

    def __exit__(self, *exc):
        self.running = False
        self.thread.join()
        self.peak = max(self.peak, self._rss())
        self.used = self.peak - self.start


def peak_memory(device: str, f):
    """(f(), bytes beyond the start at f's peak)."""
    if device == "cuda":
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        out = f()
        torch.cuda.synchronize()
        return out, torch.cuda.max_memory_allocated() - base
    with PeakRSS() as m:
        out = f()
    return out, m.used


def fwd_bwd_jax(fn, x, b, reps=5):
    ts = []
    for _ in range(reps):

        def run():
            y, pull = jax.vjp(fn, x, b)
            jax.block_until_ready(pull(jnp.ones_like(y)))

        ts.append(timed(run)[1])
    return statistics.median(ts[1:]) if reps > 1 else ts[0]


def bench(n: int, positions: int, device: str, seed: int = 0, baselines: bool = True) -> dict:
    rng = np.random.default_rng([seed, n])
    rows = n // COLS
    xn, bn = rng.standard_normal((rows, COLS)), rng.standard_normal(COLS)
    flips = rng.choice(n, size=positions, replace=False)
    xt, bt = torch.from_numpy(xn).to(device), torch.from_numpy(bn).to(device)
    jdev = jax.devices("gpu" if device == "cuda" else "cpu")[0]
    with jax.enable_x64(True):
        xj, bj = jax.device_put(xn, jdev), jax.device_put(bn, jdev)
    del xn
    tools = ("gv_torch", "gv_torch_backward", "gv_jax", "gradcheck", "check_grads")
    res = {k: {"hits": 0, "times": [], "base": [], "memory": []} for k in tools}
    # warm-up at the size measured: first calls compile (jax's kernels, once
    # per shape), load forward-AD decompositions, fill caches
    gv.check(torch_fn(0), xt, bt)
    gv.check(torch_fn(0, forward_rule=False), xt, bt)
    with jax.enable_x64(True):
        gv.check(jax_fn(0), xj, bj)
    for flip in flips:
        expected = tuple(int(k) for k in np.unravel_index(flip, (rows, COLS)))
        tf = torch_fn(int(flip))
        res["gv_torch"]["base"].append(fwd_bwd_torch(tf, xt, bt))
        (r, t), used = peak_memory(device, lambda: timed(lambda: gv.check(tf, xt, bt)))
        res["gv_torch"]["times"].append(t)
        res["gv_torch"]["memory"].append(used / (8 * n))
        res["gv_torch"]["hits"] += _located(r, expected)
        backward_only = torch_fn(int(flip), forward_rule=False)
        res["gv_torch_backward"]["base"].append(fwd_bwd_torch(backward_only, xt, bt))
        (r, t), used = peak_memory(device, lambda: timed(lambda: gv.check(backward_only, xt, bt)))
        res["gv_torch_backward"]["times"].append(t)
        res["gv_torch_backward"]["memory"].append(used / (8 * n))
        res["gv_torch_backward"]["hits"] += _located(r, expected)
        if not baselines:
            continue

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
            if device == "cpu":
                (r, t), used = peak_memory(device, lambda: timed(lambda: gv.check(jf, xj, bj)))
                res["gv_jax"]["memory"].append(used / (8 * n))
            else:
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
    "gv_torch_backward": "gradverify `check` (torch Function, backward only)",
    "gv_jax": "gradverify `check` (jax custom_vjp, no JVP)",
    "gradcheck": "torch `gradcheck(fast_mode=True)`",
    "check_grads": "jax `check_grads(modes=('rev',))`",
}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--sizes", type=int, nargs="+", default=None)
    p.add_argument("--positions", type=int, default=10)
    p.add_argument("--threads", type=int, default=1, help="torch threads on the CPU")
    p.add_argument("--no-baselines", action="store_true", help="gradverify on torch only (the largest sizes on a GPU)")
    args = p.parse_args()
    if args.sizes is None:
        args.sizes = [1_000_000, 10_000_000] + ([100_000_000] if args.device == "cuda" else [])
    if args.device == "cpu":
        torch.set_num_threads(args.threads)
    table = {}
    for n in args.sizes:
        table[n] = bench(n, args.positions, args.device, baselines=not args.no_baselines)
        print(f"n={n} done", flush=True)
    head = "| tool | " + " | ".join(f"n = {n:.0e}".replace("e+0", "e") for n in args.sizes) + " |"
    print()
    print(head)
    print("|" + "---|" * (len(args.sizes) + 1))
    for key, label in LABELS.items():
        cells = []
        for n in args.sizes:
            r = table[n][key]
            if not r["times"]:
                cells.append("-")
                continue
            ratio = statistics.median(t / b for t, b in zip(r["times"], r["base"]))
            memory = f", {statistics.median(r['memory']):.1f} arrays" if r["memory"] else ""
            cells.append(f"{r['hits']}/{len(r['times'])}, {ratio:.1f}x{memory}")
        print(f"| {label} | " + " | ".join(cells) + " |")
    print()
    print(
        "cells: detections (gradverify: with the flipped index reported) / positions, "
        "median time of one check as a multiple of one forward+backward pass of the same function, "
        "gradverify's median peak memory beyond the inputs in float64 arrays of x's size"
    )
    versions = f"torch {torch.__version__}, jax {jax.__version__}"
    if args.device == "cuda":
        versions += f", CUDA {torch.version.cuda}, {torch.cuda.get_device_name()}"
    print(f"device: {args.device}; {versions}; {time.strftime('%Y-%m-%d')}")
    base = ", ".join(
        f"n={n:.0e}: torch {1e3 * statistics.median(table[n]['gv_torch']['base']):.2f} ms, "
        f"jax {1e3 * statistics.median(table[n]['gv_jax']['base']):.2f} ms"
        for n in args.sizes
    )
    print(f"one forward+backward pass (median): {base}")


if __name__ == "__main__":
    main()
