"""Normalization layers: fused vs reference vs the native
torch.nn.functional kernels (the practical limit), float32 on torch's CPU or GPU,
forward and forward+backward (random cotangent), side by side in one run:
min and median time and bytes saved for backward. Then jax: jitted fused vs
jitted reference, forward and value-and-gradient.

    python benchmarks/bench_norm.py [--reps 50] [--threads 1] [--device cpu|cuda]

On CUDA the torch rows are timed by CUDA events; jax runs on its default backend.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import torch
import torch.nn.functional as F

from gradverify import ops

from _measure import mib, ms, saved_bytes, side_by_side, start

TOKENS = (512, 1024)  # (N * T, D): layer_norm, rms_norm
IMAGES = (32, 64, 16, 16)  # (N, C, H, W): batch, group, instance norm


def layers(x, w, b):
    """{layer: (ours(impl), native)} over the same tensors."""
    d = x.shape[-1]
    return {
        "layer_norm": (lambda impl: ops.layer_norm(x, (d,), w, b, impl=impl), lambda: F.layer_norm(x, (d,), w, b)),
        "rms_norm": (lambda impl: ops.rms_norm(x, (d,), w, impl=impl), lambda: F.rms_norm(x, (d,), w)),
    }


def image_layers(x, w, b):
    return {
        "batch_norm": (
            lambda impl: ops.batch_norm(x, None, None, w, b, True, impl=impl),
            lambda: F.batch_norm(x, None, None, w, b, True),
        ),
        "group_norm": (lambda impl: ops.group_norm(x, 8, w, b, impl=impl), lambda: F.group_norm(x, 8, w, b)),
        "instance_norm": (
            lambda impl: ops.instance_norm(x, weight=w, bias=b, impl=impl),
            lambda: F.instance_norm(x, weight=w, bias=b),
        ),
    }


def tensors(shape, grad: bool, device: str, seed: int = 0):
    rng = np.random.default_rng(seed)
    c = shape[-1] if len(shape) == 2 else shape[1]
    x = torch.from_numpy(rng.standard_normal(shape, dtype=np.float32))
    w = torch.from_numpy(1 + 0.1 * rng.standard_normal(c, dtype=np.float32))
    b = torch.from_numpy(0.1 * rng.standard_normal(c, dtype=np.float32))
    g = torch.from_numpy(rng.standard_normal(shape, dtype=np.float32))
    return [t.to(device).requires_grad_(grad) for t in (x, w, b)] + [g.to(device)]


def torch_rows(reps: int, device: str) -> list[tuple]:
    rows = []
    for shape, table in ((TOKENS, layers), (IMAGES, image_layers)):
        x, w, b, _ = tensors(shape, grad=False, device=device)
        fwd_cases = table(x, w, b)
        xg, wg, bg, g = tensors(shape, grad=True, device=device)
        grad_cases = table(xg, wg, bg)
        for name in fwd_cases:
            ours, native = fwd_cases[name]
            gours, gnative = grad_cases[name]
            fwd = side_by_side(
                {"native": native, "reference": lambda: ours("reference"), "fused": lambda: ours("fused")},
                reps,
                device=device,
            )
            bwd = {
                "native": lambda: gnative().backward(g),
                "reference": lambda: gours("reference").backward(g),
                "fused": lambda: gours("fused").backward(g),
            }
            full = side_by_side(bwd, reps, device=device)
            saved = {
                "native": saved_bytes(gnative),
                "reference": saved_bytes(lambda: gours("reference")),
                "fused": saved_bytes(lambda: gours("fused")),
            }
            for impl in ("native", "reference", "fused"):
                rows.append((name, shape, impl, fwd[impl], full[impl], saved[impl], fwd["native"], full["native"]))
    return rows


def jax_rows(reps: int) -> list[tuple]:
    rows = []
    rng = np.random.default_rng(0)
    for name, shape in (("layer_norm", TOKENS), ("rms_norm", TOKENS), ("group_norm", IMAGES)):
        c = shape[-1] if len(shape) == 2 else shape[1]
        x = jnp.asarray(rng.standard_normal(shape, dtype=np.float32))
        w = jnp.asarray(1 + 0.1 * rng.standard_normal(c, dtype=np.float32))
        b = jnp.asarray(0.1 * rng.standard_normal(c, dtype=np.float32))
        g = jnp.asarray(rng.standard_normal(shape, dtype=np.float32))

        def layer(impl, name=name):
            if name == "layer_norm":
                return lambda x, w, b: ops.layer_norm(x, x.shape[-1:], w, b, impl=impl)
            if name == "rms_norm":
                return lambda x, w, b: ops.rms_norm(x, x.shape[-1:], w, impl=impl)
            return lambda x, w, b: ops.group_norm(x, 8, w, b, impl=impl)

        fns = {}
        for impl in ("reference", "fused"):
            f = layer(impl)
            fwd = jax.jit(f)
            grad = jax.jit(jax.value_and_grad(lambda x, w, b, f=f: jnp.vdot(f(x, w, b), g), argnums=(0, 1, 2)))
            fns[f"{impl} fwd"] = lambda fwd=fwd: fwd(x, w, b).block_until_ready()
            fns[f"{impl} grad"] = lambda grad=grad: jax.block_until_ready(grad(x, w, b))
        t = side_by_side(fns, reps, warmup=3)
        for impl in ("reference", "fused"):
            rows.append((name, shape, impl, t[f"{impl} fwd"], t[f"{impl} grad"]))
    return rows


def main() -> None:
    args = start(50)
    print(
        "| layer | shape | impl | fwd min / median (ms) | fwd+bwd min / median (ms) | fwd+bwd vs native | saved (MiB) |"
    )
    print("|---|---|---|---|---|---|---|")
    for name, shape, impl, fwd, full, saved, _, full_native in torch_rows(args.reps, args.device):
        shape_s = "x".join(map(str, shape))
        print(
            f"| {name} | {shape_s} | {impl} | {ms(fwd[0])} / {ms(fwd[1])} | {ms(full[0])} / {ms(full[1])} | "
            f"{full[1] / full_native[1]:.2f}x | {mib(saved)} |"
        )
    print(f"\njax {jax.__version__} ({jax.default_backend()}), jitted, float32\n")
    print("| layer | shape | impl | fwd min / median (ms) | value+grad min / median (ms) |")
    print("|---|---|---|---|---|")
    for name, shape, impl, fwd, grad in jax_rows(args.reps):
        shape_s = "x".join(map(str, shape))
        print(f"| {name} | {shape_s} | {impl} | {ms(fwd[0])} / {ms(fwd[1])} | {ms(grad[0])} / {ms(grad[1])} |")


if __name__ == "__main__":
    main()
