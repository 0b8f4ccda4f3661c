"""bias_act on torch (CPU here), as in the seed, side by side in
one run (interleaved rounds: min and median time):

1. relu and tanh on (100, 10000) and (1000, 1000) float32: forward and
   forward+gradient for reference, fused and in-place (forward only); bytes
   allocated by the forward (torch.profiler) and bytes saved for backward
   (torch.autograd.graph.saved_tensors_hooks, each storage once).
2. A three-layer MLP 784 -> 512 -> 256 -> 10, batch 256, built from
   ``bias_act(act, x @ W, b)`` (relu, relu, identity): forward and
   forward+gradient, reference vs fused, with the same layers in plain
   torch (F.linear + F.relu) for scale.

    python benchmarks/bench_bias_act.py [--reps 30] [--threads 1]
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from gradverify import ops

from _measure import allocated_bytes, mib, ms, saved_bytes, side_by_side, start


def elementwise(reps: int) -> list[tuple]:
    rows = []
    for shape in [(100, 10000), (1000, 1000)]:
        rng = np.random.default_rng(0)
        x0 = torch.from_numpy(rng.standard_normal(shape, dtype=np.float32))
        b = torch.from_numpy(rng.standard_normal(shape[1], dtype=np.float32))
        g = torch.from_numpy(rng.standard_normal(shape, dtype=np.float32))
        for name in ("relu", "tanh"):
            scratch = x0.clone()
            xg, bg = x0.clone().requires_grad_(), b.clone().requires_grad_()
            fwd = {
                "reference": lambda: ops.bias_act(name, x0, b, impl="reference"),
                "fused": lambda: ops.bias_act(name, x0, b, impl="fused"),
                # overwrites its input: refilled outside the timed call would skew
                # nothing, the activations are cheap to rerun on their own output
                "in-place": lambda: ops.bias_act_(name, scratch, b),
            }
            grad = {
                impl: (lambda impl=impl: ops.bias_act(name, xg, bg, impl=impl).backward(g))
                for impl in ("reference", "fused")
            }
            tf = side_by_side(fwd, reps)
            tg = side_by_side(grad, reps)
            for impl in ("reference", "fused", "in-place"):
                alloc = allocated_bytes(fwd[impl])
                saved = None
                if impl != "in-place":
                    saved = saved_bytes(lambda impl=impl: ops.bias_act(name, xg, bg, impl=impl))
                rows.append((shape, name, impl, tf[impl], alloc, tg.get(impl), saved))
    return rows


def mlp(reps: int) -> list[tuple]:
    rng = np.random.default_rng(0)
    sizes = [784, 512, 256, 10]

    def param(*shape, scale=1.0):
        return torch.from_numpy(scale * rng.standard_normal(shape, dtype=np.float32)).requires_grad_()

    ws = [param(m, n, scale=m**-0.5) for m, n in zip(sizes, sizes[1:])]
    bs = [param(n, scale=0.1) for n in sizes[1:]]
    acts = ["relu", "relu", "identity"]
    x = torch.from_numpy(rng.standard_normal((256, 784), dtype=np.float32))
    g = torch.from_numpy(rng.standard_normal((256, 10), dtype=np.float32))

    def net(impl):
        h = x
        for w, b, act in zip(ws, bs, acts):
            if impl == "torch":
                h = F.linear(h, w.T, b)
                h = F.relu(h) if act == "relu" else h
            else:
                h = ops.bias_act(act, h @ w, b, impl=impl)
        return h

    impls = ("torch", "reference", "fused")
    with torch.no_grad():
        tf = side_by_side({k: lambda k=k: net(k) for k in impls}, reps)
    tg = side_by_side({k: lambda k=k: net(k).backward(g) for k in impls}, reps)
    return [(k, tf[k], tg[k], saved_bytes(lambda k=k: net(k))) for k in impls]


def main() -> None:
    args = start(30)
    print("| shape | act | impl | fwd min / median (ms) | fwd alloc (MiB) | fwd+grad min / median (ms) | saved (MiB) |")
    print("|---|---|---|---|---|---|---|")
    for shape, name, impl, tf, alloc, tg, saved in elementwise(args.reps):
        grad = "-" if tg is None else f"{ms(tg[0])} / {ms(tg[1])}"
        print(
            f"| {shape[0]}x{shape[1]} | {name} | {impl} | {ms(tf[0])} / {ms(tf[1])} | {mib(alloc)} | {grad} | "
            f"{mib(saved)} |"
        )
    print("\nMLP 784-512-256-10, batch 256 (relu, relu, identity)\n")
    print("| impl | fwd min / median (ms) | fwd+grad min / median (ms) | saved (MiB) |")
    print("|---|---|---|---|")
    for impl, tf, tg, saved in mlp(args.reps):
        print(f"| {impl} | {ms(tf[0])} / {ms(tf[1])} | {ms(tg[0])} / {ms(tg[1])} | {mib(saved)} |")


if __name__ == "__main__":
    main()
