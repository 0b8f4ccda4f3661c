"""The fused torch ops verified on one device, in float64: every bias_act
activation (points off the kinks to order 2, its kinks to order 1) and every
normalization layer (to order 2), with ``gv.check`` at its default bounds.
One line per case; the exit status is 1 if any case fails. Run it where the
ops are to be trusted - on the GPU machine with ``--device cuda``:

    python benchmarks/check_fused_ops.py [--device cpu|cuda]
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
import torch

import gradverify as gv
from gradverify import ops


def bias_act_cases(device: str):
    rng = np.random.default_rng(0)
    x = torch.tensor(2.5 * rng.standard_normal((3, 4)), device=device)
    b = torch.tensor(rng.standard_normal(4), device=device)
    for act in ops.ACTIVATIONS:
        fn = lambda x, b, name=act.name: ops.bias_act(name, x, b, impl="fused")  # noqa: E731
        yield f"bias_act:{act.name} order 2", fn, (x, b), 2
        kinks = [at for at, _ in act.kink_points()]
        if kinks:
            at = torch.tensor(kinks + [0.37], dtype=torch.float64, device=device)
            yield f"bias_act:{act.name} at its kinks", fn, (at - 0.25, torch.full_like(at, 0.25)), 1


def norm_cases(device: str):
    rng = np.random.default_rng(1)

    def t(*shape):
        return torch.tensor(rng.standard_normal(shape), device=device)

    tokens, images = t(3, 5), t(2, 4, 3, 3)
    d, c = tokens.shape[-1], images.shape[1]
    w_d, b_d, w_c, b_c = 1 + 0.1 * t(d), 0.1 * t(d), 1 + 0.1 * t(c), 0.1 * t(c)
    yield "layer_norm", lambda x, w, b: ops.layer_norm(x, (d,), w, b, impl="fused"), (tokens, w_d, b_d)
    yield "rms_norm", lambda x, w: ops.rms_norm(x, (d,), w, impl="fused"), (tokens, w_d)
    yield "group_norm", lambda x, w, b: ops.group_norm(x, 2, w, b, impl="fused"), (images, w_c, b_c)
    yield (
        "batch_norm",
        lambda x, w, b: ops.batch_norm(x, None, None, w, b, True, impl="fused"),
        (images, w_c, b_c),
    )
    yield (
        "instance_norm",
        lambda x, w, b: ops.instance_norm(x, weight=w, bias=b, impl="fused"),
        (images, w_c, b_c),
    )


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    args = p.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error(
            "--device cuda: expected a CUDA device, found none (torch.cuda.is_available() is False); use --device cpu"
        )
    where = torch.cuda.get_device_name() if args.device == "cuda" else "CPU"
    print(f"torch {torch.__version__} on {where}, float64, gradverify {gv.__version__}")
    cases = [*bias_act_cases(args.device), *((n, f, a, 2) for n, f, a in norm_cases(args.device))]
    failed = 0
    for name, fn, fargs, order in cases:
        r = gv.check(fn, *fargs, order=order)
        failed += not r.ok
        verdict = "ok" if r.ok else "FAILED"
        extra = "" if r.ok else " - " + "; ".join(f"{f.kind.value} {f.message[:120]}" for f in r.errors[:2])
        print(f"{verdict:6s} {name:40s} worst error/bound {float(r.worst_ratio):.3g}{extra}")
    print(f"{len(cases) - failed} of {len(cases)} cases pass")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
