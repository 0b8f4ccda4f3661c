"""bias_act on torch (CPU here), as in the seed (issue #3): relu and tanh on
(100, 10000) and (1000, 1000) float32; forward and forward+gradient; reference,
fused and in-place (forward only). Side by side in one run: min and median
time, bytes allocated by the forward (torch.profiler, profile_memory) and
bytes saved for backward (torch.autograd.graph.saved_tensors_hooks, exact).

    python benchmarks/bench_bias_act.py [--reps 20]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

from gradverify import ops


def saved_bytes(f) -> int:
    total = 0

    def pack(t):
        nonlocal total
        total += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        f()
    return total


def allocated_bytes(f) -> int:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as prof:
        f()
    return sum(e.self_cpu_memory_usage for e in prof.events() if e.self_cpu_memory_usage > 0)


def times(f, reps: int) -> tuple[float, float]:
    f()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t0)
    return min(ts), statistics.median(ts)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--reps", type=int, default=20)
    args = p.parse_args()
    torch.set_num_threads(1)
    rows = []
    for shape in [(100, 10000), (1000, 1000)]:
        rng = np.random.default_rng(0)
        x0 = torch.from_numpy(rng.standard_normal(shape).astype(np.float32))
        b = torch.from_numpy(rng.standard_normal(shape[1]).astype(np.float32))
        for name in ("relu", "tanh"):
            for impl in ("reference", "fused", "in-place"):
                if impl == "in-place":
                    x = x0.clone()

                    def fwd(x=x):
                        return ops.bias_act_(name, x, b)

                    grad = None
                else:

                    def fwd(impl=impl):
                        return ops.bias_act(name, x0, b, impl=impl)

                    xg, bg = x0.clone().requires_grad_(), b.clone().requires_grad_()

                    def grad(impl=impl, xg=xg, bg=bg):
                        ops.bias_act(name, xg, bg, impl=impl).sum().backward()

                fmin, fmed = times(fwd, args.reps)
                alloc = allocated_bytes(fwd)
                if grad is not None:
                    gmin, gmed = times(grad, args.reps)
                    saved = saved_bytes(lambda impl=impl, xg=xg, bg=bg: ops.bias_act(name, xg, bg, impl=impl))
                else:
                    gmin = gmed = float("nan")
                    saved = None
                rows.append((shape, name, impl, fmin, fmed, alloc, gmin, gmed, saved))
    mib = 2.0**20
    print("| shape | act | impl | fwd min / median (ms) | fwd alloc (MiB) | fwd+grad min / median (ms) | saved (MiB) |")
    print("|---|---|---|---|---|---|---|")
    for shape, name, impl, fmin, fmed, alloc, gmin, gmed, saved in rows:
        g = "-" if saved is None else f"{gmin * 1e3:.2f} / {gmed * 1e3:.2f}"
        s = "-" if saved is None else f"{saved / mib:.2f}"
        print(
            f"| {shape[0]}x{shape[1]} | {name} | {impl} | {fmin * 1e3:.2f} / {fmed * 1e3:.2f} | "
            f"{alloc / mib:.2f} | {g} | {s} |"
        )


if __name__ == "__main__":
    main()
