"""bias_act on torch (CPU here), as in the seed, side by side in
one run (interleaved rounds: min and median time):

1. relu and tanh on (100, 10000) and (1000, 1000) float32: forward and
   forward+gradient for reference, fused and in-place (forward only); bytes
   allocated by the forward (torch.profiler) and bytes saved for backward
   (torch.autograd.graph.saved_tensors_hooks, each storage once).
2. Every activation of the table on (1000, 1000) float32: forward+gradient
   for reference, fused and, where torch has the same function, plain torch
   (``F.<name>(x + b)``); the fused/reference ratio of the medians, and the
   bytes each saves for backward.
3. A three-layer MLP 784 -> 512 -> 256 -> 10, batch 256, built from
   ``bias_act(act, x @ W, b)`` (relu, relu, identity): forward and
   forward+gradient, reference vs fused, with the same layers in plain
   torch (F.linear + F.relu) for scale.

    python benchmarks/bench_bias_act.py [--reps 30] [--threads 1] [--device cpu|cuda]

On CUDA each call is timed by CUDA events and "fwd alloc" is the rise of the
allocator's peak.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from gradverify import ops

from _measure import allocated_bytes, mib, ms, saved_bytes, side_by_side, start


def elementwise(reps: int, device: str) -> list[tuple]:
    rows = []
    for shape in [(100, 10000), (1000, 1000)]:
        rng = np.random.default_rng(0)
        x0 = torch.from_numpy(rng.standard_normal(shape, dtype=np.float32)).to(device)
        b = torch.from_numpy(rng.standard_normal(shape[1], dtype=np.float32)).to(device)
        g = torch.from_numpy(rng.standard_normal(shape, dtype=np.float32)).to(device)
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
            tf = side_by_side(fwd, reps, device=device)
            tg = side_by_side(grad, reps, device=device)
            for impl in ("reference", "fused", "in-place"):
                alloc = allocated_bytes(fwd[impl], device)
                saved = None
                if impl != "in-place":
                    saved = saved_bytes(lambda impl=impl: ops.bias_act(name, xg, bg, impl=impl))
                rows.append((shape, name, impl, tf[impl], alloc, tg.get(impl), saved))
    return rows


def every_activation(reps: int, device: str) -> list[tuple]:
    rng = np.random.default_rng(1)
    shape = (1000, 1000)
    x0 = torch.from_numpy(3 * rng.standard_normal(shape, dtype=np.float32)).to(device)
    b0 = torch.from_numpy(rng.standard_normal(shape[1], dtype=np.float32)).to(device)
    g = torch.from_numpy(rng.standard_normal(shape, dtype=np.float32)).to(device)
    rows = []
    for act in ops.ACTIVATIONS:
        x, b = x0.clone().requires_grad_(), b0.clone().requires_grad_()
        calls = {impl: (lambda impl=impl: ops.bias_act(act.name, x, b, impl=impl)) for impl in ("reference", "fused")}
        native = getattr(F, act.torch) if act.torch and act.params == ops.activation(act.name).params else None
        if native is not None:
            calls["torch"] = lambda native=native: native(x + b)
        t = side_by_side({k: (lambda f=f: f().backward(g)) for k, f in calls.items()}, reps, device=device)
        saved = {k: saved_bytes(f) for k, f in calls.items()}
        rows.append((act.name, t, saved))
    return rows


def mlp(reps: int, device: str) -> list[tuple]:
    rng = np.random.default_rng(0)
    sizes = [784, 512, 256, 10]

    def param(*shape, scale=1.0):
        return torch.from_numpy(scale * rng.standard_normal(shape, dtype=np.float32)).to(device).requires_grad_()

    ws = [param(m, n, scale=m**-0.5) for m, n in zip(sizes, sizes[1:])]
    bs = [param(n, scale=0.1) for n in sizes[1:]]
    acts = ["relu", "relu", "identity"]
    x = torch.from_numpy(rng.standard_normal((256, 784), dtype=np.float32)).to(device)
    g = torch.from_numpy(rng.standard_normal((256, 10), dtype=np.float32)).to(device)

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
        tf = side_by_side({k: lambda k=k: net(k) for k in impls}, reps, device=device)
    tg = side_by_side({k: lambda k=k: net(k).backward(g) for k in impls}, reps, device=device)
    return [(k, tf[k], tg[k], saved_bytes(lambda k=k: net(k))) for k in impls]


def main() -> None:
    args = start(30)
    print("| shape | act | impl | fwd min / median (ms) | fwd alloc (MiB) | fwd+grad min / median (ms) | saved (MiB) |")
    print("|---|---|---|---|---|---|---|")
    for shape, name, impl, tf, alloc, tg, saved in elementwise(args.reps, args.device):
        grad = "-" if tg is None else f"{ms(tg[0])} / {ms(tg[1])}"
        print(
            f"| {shape[0]}x{shape[1]} | {name} | {impl} | {ms(tf[0])} / {ms(tf[1])} | {mib(alloc)} | {grad} | "
            f"{mib(saved)} |"
        )
    print("\nEvery activation, (1000, 1000) float32, forward+gradient\n")
    print(
        "| act | reference min / median (ms) | fused min / median (ms) | fused / reference | torch (ms) "
        "| saved ref / fused (MiB) |"
    )
    print("|---|---|---|---|---|---|")
    for name, t, saved in every_activation(args.reps, args.device):
        plain = f"{ms(t['torch'][1])}" if "torch" in t else "-"
        print(
            f"| {name} | {ms(t['reference'][0])} / {ms(t['reference'][1])} "
            f"| {ms(t['fused'][0])} / {ms(t['fused'][1])} | "
            f"{t['fused'][1] / t['reference'][1]:.2f} | {plain} | {mib(saved['reference'])} / {mib(saved['fused'])} |"
        )
    print("\nMLP 784-512-256-10, batch 256 (relu, relu, identity)\n")
    print("| impl | fwd min / median (ms) | fwd+grad min / median (ms) | saved (MiB) |")
    print("|---|---|---|---|")
    for impl, tf, tg, saved in mlp(args.reps, args.device):
        print(f"| {impl} | {ms(tf[0])} / {ms(tf[1])} | {ms(tg[0])} / {ms(tg[1])} | {mib(saved)} |")


if __name__ == "__main__":
    main()
