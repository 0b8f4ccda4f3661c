"""A fixed set of checks and verifies whose verdicts, findings and messages
are written whole, to tell whether a change of the code changed any of them.

    python benchmarks/snapshot_verdicts.py > before.jsonl   # on one checkout
    python benchmarks/snapshot_verdicts.py > after.jsonl    # on the other
    diff before.jsonl after.jsonl                            # empty: bit for bit the same

Each line is one case: its name and the result's ``to_dict()`` (every finding
with its values, bound and message; the modes, the call counts, the
reproduce line) plus the printed report. Only the public API is used, so the
script runs unchanged on any checkout. ``--only SUBSTRING`` runs the cases
whose names contain it.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

import gradverify as gv
from gradverify import ops, strategies as gst


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def _torch_cases() -> Iterator[tuple[str, Callable[[], Any]]]:
    import torch
    import torch.nn.functional as F

    def t(a: Any) -> Any:
        return torch.from_numpy(np.array(a, dtype=np.float64))

    class Softplus(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: Any) -> Any:
            ctx.save_for_backward(x)
            return F.softplus(x)

        @staticmethod
        def backward(ctx: Any, g: Any) -> Any:
            (x,) = ctx.saved_tensors
            return g * torch.sigmoid(-x)

    class Flip(torch.autograd.Function):
        """tanh whose backward flips the sign of element 7."""

        @staticmethod
        def forward(ctx: Any, x: Any) -> Any:
            y = torch.tanh(x)
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx: Any, g: Any) -> Any:
            (y,) = ctx.saved_tensors
            d = (1 - y * y).clone()
            d.view(-1)[7] *= -1
            return g * d

    class Conj(torch.autograd.Function):
        """z * z with a backward that forgets the conjugate."""

        @staticmethod
        def forward(ctx: Any, z: Any) -> Any:
            ctx.save_for_backward(z)
            return z * z

        @staticmethod
        def backward(ctx: Any, g: Any) -> Any:
            (z,) = ctx.saved_tensors
            return g * 2 * z

    x34 = t(_rng(0).standard_normal((3, 4)))
    big = t(_rng(1).standard_normal(4000))
    b4 = t(_rng(2).standard_normal(4))
    yield "torch tanh", lambda: gv.check(torch.tanh, x34)
    yield "torch softplus bug", lambda: gv.check(Softplus.apply, x34)
    yield "torch flip full", lambda: gv.check(Flip.apply, x34)
    yield "torch flip directional", lambda: gv.check(Flip.apply, big)
    yield "torch tanh directional", lambda: gv.check(torch.tanh, big)
    yield "torch relu kink", lambda: gv.check(torch.relu, t([-1.0, 0.0, 0.5, 2.0]))
    yield "torch abs kink", lambda: gv.check(torch.abs, t([0.0, 1.0, -2.0]))
    yield "torch sign jump", lambda: gv.check(lambda a: torch.floor(a) + a, t([1.0, 0.5, 2.0]))
    yield "torch logsumexp", lambda: gv.check(lambda a: torch.logsumexp(a, 1), x34)
    yield "torch layer_norm", lambda: gv.check(lambda a: F.layer_norm(a, (4,)), x34)
    yield "torch gelu bias", lambda: gv.check(lambda a, b: F.gelu(a + b), x34, b4)
    yield "torch float32 tanh", lambda: gv.check(torch.tanh, x34.float())
    yield "torch float32 softplus bug", lambda: gv.check(Softplus.apply, x34.float())
    yield "torch order 2 tanh", lambda: gv.check(torch.tanh, x34, order=2)
    yield "torch order 2 bug", lambda: gv.check(Softplus.apply, x34, order=2)
    yield "torch batched tanh", lambda: gv.check(torch.tanh, x34, batched=True)
    yield "torch wrt 1", lambda: gv.check(lambda a, b: torch.sin(a) * b, x34, b4, wrt=1)
    yield "torch rtol", lambda: gv.check(torch.exp, x34, rtol=1e-3, atol=1e-6)
    yield "torch full False", lambda: gv.check(torch.sin, x34, full=False, directions=3)
    yield "torch not vectorised", lambda: gv.check(torch.sin, x34, vectorise=False)
    yield "torch nonfinite output", lambda: gv.check(torch.log, t([-1.0, 1.0, 2.0]))
    yield "torch empty", lambda: gv.check(torch.sin, t(np.zeros((0, 3))))
    z = torch.from_numpy(_rng(3).standard_normal((2, 3)) + 1j * _rng(4).standard_normal((2, 3)))
    yield "torch complex exp", lambda: gv.check(torch.exp, z)
    yield "torch complex conj bug", lambda: gv.check(Conj.apply, z)
    yield (
        "torch complex log cut",
        lambda: gv.check(torch.log, torch.tensor([-1.0 + 0j, 2.0 + 1j], dtype=torch.complex128)),
    )
    yield "torch bias_act swish", lambda: gv.check(lambda a, b: ops.bias_act("swish", a, b, impl="fused"), x34, b4)
    yield (
        "torch bias_act hardsigmoid",
        lambda: gv.check(lambda a, b: ops.bias_act("hardsigmoid", a, b, impl="fused"), x34, b4),
    )
    yield (
        "torch layer_norm op",
        lambda: gv.check(lambda a: ops.layer_norm(a, (4,), impl="fused"), t(_rng(5).standard_normal((2, 3, 4)))),
    )
    yield (
        "torch verify swish",
        lambda: gv.verify(
            lambda a, b: ops.bias_act("swish", a, b, impl="fused"), gst.bias_act_args("swish", "torch"), max_examples=15
        ),
    )
    yield (
        "torch verify softplus bug",
        lambda: gv.verify(Softplus.apply, gst.arrays("torch", shape=(3,)).map(lambda a: (a,)), max_examples=20),
    )


def _jax_cases() -> Iterator[tuple[str, Callable[[], Any]]]:
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)

    @jax.custom_vjp
    def bad_sin(x: Any) -> Any:
        return jnp.sin(x)

    def bad_sin_fwd(x: Any) -> Any:
        return jnp.sin(x), x

    def bad_sin_bwd(x: Any, g: Any) -> Any:
        return (g * jnp.cos(x) * 1.0001,)

    bad_sin.defvjp(bad_sin_fwd, bad_sin_bwd)
    x34 = jnp.asarray(_rng(0).standard_normal((3, 4)))
    big = jnp.asarray(_rng(1).standard_normal(3000))
    yield "jax tanh", lambda: gv.check(jnp.tanh, x34)
    yield "jax bad sin", lambda: gv.check(bad_sin, x34)
    yield "jax bad sin directional", lambda: gv.check(bad_sin, big)
    yield "jax relu kink", lambda: gv.check(jax.nn.relu, jnp.asarray([-1.0, 0.0, 1.0]))
    yield "jax logsumexp", lambda: gv.check(lambda a: jax.nn.logsumexp(a, axis=1), x34)
    yield "jax float32 gelu", lambda: gv.check(jax.nn.gelu, x34.astype(jnp.float32))
    yield "jax order 2", lambda: gv.check(jnp.sin, x34, order=2)
    yield "jax order 2 bad", lambda: gv.check(bad_sin, x34, order=2)
    yield "jax batched", lambda: gv.check(jnp.tanh, x34, batched=True)
    yield "jax jit", lambda: gv.check(jax.jit(jnp.cos), x34)
    yield (
        "jax bias_act seed bug",
        lambda: gv.check(
            lambda a, b: ops.bias_act("swish", a, b, impl="fused"), x34, jnp.asarray(_rng(2).standard_normal(4))
        ),
    )
    z = jnp.asarray(_rng(3).standard_normal(3) + 1j * _rng(4).standard_normal(3))
    yield "jax complex sqrt", lambda: gv.check(jnp.sqrt, z)
    yield (
        "jax verify bad sin",
        lambda: gv.verify(bad_sin, gst.arrays("jax", shape=(2,)).map(lambda a: (a,)), max_examples=15),
    )


def _numpy_cases() -> Iterator[tuple[str, Callable[[], Any]]]:
    def sq(x: Any) -> Any:
        return x * x

    good = gv.Rule(sq, jvp=lambda p, t: 2 * p[0] * t[0], vjp=lambda p, g: (2 * p[0] * g,))
    bad = gv.Rule(sq, jvp=lambda p, t: 2 * p[0] * t[0], vjp=lambda p, g: (2.01 * p[0] * g,))
    jvp_only = gv.Rule(np.sin, jvp=lambda p, t: np.cos(p[0]) * t[0])
    x = _rng(0).standard_normal((3, 4))
    yield "numpy rule good", lambda: gv.check(good, x)
    yield "numpy rule bad", lambda: gv.check(bad, x)
    yield "numpy rule jvp only", lambda: gv.check(jvp_only, x)
    yield "numpy rule order 2", lambda: gv.check(good, x, order=2)
    yield (
        "numpy bias_act seed bug",
        lambda: gv.check(lambda a, b: ops.bias_act("swish", a, b, impl="fused"), x, _rng(2).standard_normal(4)),
    )
    yield (
        "numpy verify bad",
        lambda: gv.verify(bad, gst.arrays("numpy", shape=(3,)).map(lambda a: (a,)), max_examples=15),
    )
    yield "numpy mutation", lambda: gv.check(gv.Rule(_mutating, vjp=lambda p, g: (g,)), x)


def _mutating(x: Any) -> Any:
    x += 1.0
    return x


def _plain(value: Any) -> Any:
    """JSON-safe, exact: floats by their repr (NaN and inf included)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, float):
        return repr(value) if not math.isfinite(value) else value
    if isinstance(value, np.ndarray):
        return {"dtype": str(value.dtype), "shape": list(value.shape), "values": [repr(v) for v in value.ravel()]}
    if isinstance(value, (np.floating, np.integer)):
        return _plain(value.item())
    if isinstance(value, str) and value.startswith(("/tmp", "/var")):
        return "<path>"
    return value


def run(case: Callable[[], Any]) -> dict[str, Any]:
    try:
        result = case()
    except Exception as e:  # a case that raises is part of the snapshot
        return {"raised": type(e).__name__, "message": str(e)}
    out = {"dict": _plain(result.to_dict())}
    out["text"] = str(result) if isinstance(result, gv.CheckResult) else str(result.result)
    if isinstance(result, gv.VerifyResult):
        out["dict"]["saved"] = None if result.saved is None else "<saved>"
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="", help="run the cases whose names contain this")
    ns = parser.parse_args(argv)
    count = 0
    for source in (_numpy_cases, _torch_cases, _jax_cases):
        for name, case in source():
            if ns.only in name:
                print(json.dumps({"case": name, **run(case)}, sort_keys=True))
                sys.stdout.flush()
                count += 1
    print(f"{count} cases", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
