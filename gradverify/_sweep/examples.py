"""Built-in examples, shared by the command, the tests and the benchmarks:

* a fused swish(x + b) with hand-written rules on each backend, correct and with
  the seed bug of NNlib's bias_act! (the derivative evaluated at x instead of
  x + b: invisible when b = 0);
* tanh(x + b) whose rule flips the sign of one element of the x-gradient (the
  detection benchmark's injected bug; ``flip_at=None`` is the correct rule).

The bundled ops (gradverify.ops) replace the first as the command's main targets."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import ops
from .._rule import Rule

__all__ = [
    "BUILDERS",
    "NaiveCase",
    "example_inputs",
    "jax_swish",
    "naive_cases",
    "naive_strategy",
    "numpy_swish",
    "tanh_bias_flipped",
    "torch_swish",
]


def _swish_grad(xp: Any, z: Any) -> Any:
    s = 1 / (1 + xp.exp(-z))
    return s + z * s * (1 - s)


def _sum_to(g: Any, b_shape: tuple[int, ...]) -> Any:
    """Sum a gradient over the axes that broadcasting added to b."""
    lead = g.ndim - len(b_shape)
    axes = tuple(range(lead)) + tuple(lead + k for k, s in enumerate(b_shape) if s == 1)
    return g.sum(axis=axes).reshape(b_shape)


def numpy_swish(bug: bool) -> Callable:
    def f(x: np.ndarray, b: np.ndarray) -> np.ndarray:
        z = x + b
        return z / (1 + np.exp(-z))

    def slope(x: np.ndarray, b: np.ndarray) -> np.ndarray:
        return _swish_grad(np, x if bug else x + b)

    def jvp(p: tuple, t: tuple) -> np.ndarray:
        return slope(*p) * (t[0] + t[1])

    def vjp(p: tuple, g: np.ndarray) -> tuple:
        gz = g * slope(*p)
        return gz, _sum_to(gz, p[1].shape)

    f.__name__ = "fused_swish_seed_bug" if bug else "fused_swish"
    return Rule(f, jvp=jvp, vjp=vjp)


def torch_swish(bug: bool) -> Callable:
    import torch

    class FusedSwish(torch.autograd.Function):
        @staticmethod
        def forward(x: Any, b: Any) -> Any:
            return torch.nn.functional.silu(x + b)

        @staticmethod
        def setup_context(ctx: Any, inputs: tuple, output: Any) -> None:
            x, b = inputs
            ctx.save_for_backward(x, b)
            ctx.save_for_forward(x, b)
            ctx.b_shape = tuple(b.shape)

        @staticmethod
        def backward(ctx: Any, g: Any) -> tuple:
            x, b = ctx.saved_tensors
            gz = g * _swish_grad(torch, x if bug else x + b)
            lead = gz.ndim - len(ctx.b_shape)
            return gz, gz.sum(dim=tuple(range(lead))) if lead else gz

        @staticmethod
        def jvp(ctx: Any, tx: Any, tb: Any) -> Any:
            x, b = ctx.saved_tensors
            return _swish_grad(torch, x if bug else x + b) * (tx + tb)

    FusedSwish.__name__ = "FusedSwishSeedBug" if bug else "FusedSwish"
    return FusedSwish.apply


def jax_swish(bug: bool) -> Callable:
    import jax

    @jax.custom_jvp
    def fused_swish(x: Any, b: Any) -> Any:
        return jax.nn.silu(x + b)

    @fused_swish.defjvp
    def _jvp(primals: tuple, tangents: tuple) -> tuple:
        import jax.numpy as jnp

        x, b = primals
        tx, tb = tangents
        return fused_swish(x, b), _swish_grad(jnp, x if bug else x + b) * (tx + tb)

    return fused_swish


BUILDERS = {"numpy": numpy_swish, "torch": torch_swish, "jax": jax_swish}


def tanh_bias_flipped(backend: str, flip_at: int | None, mode: str = "vjp", forward_rule: bool = True) -> Callable:
    """tanh(x + b), x of shape (N, C) and b of shape (C,), with one sign-flipped
    element (flat index ``flip_at`` of x) in the reverse-mode rule (``mode="vjp"``)
    or the forward-mode rule (``mode="jvp"``, numpy only). torch: an
    autograd.Function with both rules (``forward_rule=False``: backward only,
    as most are written); jax: a custom_vjp (no forward mode)."""

    def flip_np(a: np.ndarray) -> np.ndarray:
        if flip_at is None:
            return a
        a = a.copy()
        a.reshape(-1)[flip_at] *= -1
        return a

    if backend == "numpy":

        def d(p: tuple) -> np.ndarray:
            return 1 - np.tanh(p[0] + p[1]) ** 2

        def jvp(p: tuple, t: tuple) -> np.ndarray:
            tx = flip_np(d(p) * t[0]) if mode == "jvp" else d(p) * t[0]
            return tx + d(p) * t[1]

        def vjp(p: tuple, g: np.ndarray) -> tuple:
            gz = d(p) * g
            return (flip_np(gz) if mode == "vjp" else gz), gz.sum(0)

        return Rule(lambda x, b: np.tanh(x + b), jvp=jvp, vjp=vjp)
    if mode != "vjp":
        raise ValueError("mode='jvp' is built for numpy only")
    if backend == "torch":
        import torch

        class TanhBias(torch.autograd.Function):
            @staticmethod
            def forward(x: Any, b: Any) -> Any:
                return torch.tanh(x + b)

            @staticmethod
            def setup_context(ctx: Any, inputs: tuple, out: Any) -> None:
                ctx.save_for_backward(out)
                ctx.save_for_forward(out)

            @staticmethod
            def backward(ctx: Any, g: Any) -> tuple:
                (y,) = ctx.saved_tensors
                gz = g * (1 - y * y)
                gx = gz.clone()
                if flip_at is not None:
                    gx.view(-1)[flip_at] *= -1
                return gx, gz.sum(0)

        class TanhBiasForward(TanhBias):
            @staticmethod
            def jvp(ctx: Any, tx: Any, tb: Any) -> Any:
                (y,) = ctx.saved_tensors
                return (1 - y * y) * (tx + tb)

        return TanhBiasForward.apply if forward_rule else TanhBias.apply
    import jax
    import jax.numpy as jnp

    @jax.custom_vjp
    def tanh_bias(x: Any, b: Any) -> Any:
        return jnp.tanh(x + b)

    def fwd(x: Any, b: Any) -> tuple:
        y = jnp.tanh(x + b)
        return y, y

    def bwd(y: Any, g: Any) -> tuple:
        gz = g * (1 - y * y)
        gx = gz if flip_at is None else gz.reshape(-1).at[flip_at].multiply(-1).reshape(gz.shape)
        return gx, gz.sum(0)

    tanh_bias.defvjp(fwd, bwd)
    return tanh_bias


def example_inputs(backend: str, dtype: str = "float64", seed: int = 0, zero_bias: bool = False) -> tuple:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((3, 4)).astype(dtype)
    b = np.zeros(4, dtype) if zero_bias else rng.standard_normal(4).astype(dtype)
    if backend == "torch":
        import torch

        return torch.from_numpy(x), torch.from_numpy(b)
    if backend == "jax":
        import jax
        import jax.numpy as jnp

        with jax.enable_x64(dtype == "float64"):
            return jnp.asarray(x), jnp.asarray(b)
    return x, b


# -- the naive-strategy suite -------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class NaiveCase:
    """A correct function and how a new user would feed it: plain Hypothesis
    floats in [-10, 10] (subnormals, zeros and repeats allowed), shapes 1-5.
    ``kind`` "xb": fn(x, b) with x and b of one shape; "x": fn(x), x of 1-3 rows."""

    label: str
    backend: str
    kind: str
    fn: Callable


def naive_cases() -> list[NaiveCase]:
    """Every activation of the table through its reference implementation on
    torch and jax, and library functions known to cancel, saturate or divide."""

    cases = [
        NaiveCase(f"bias_act:{name} ({backend})", backend, "xb", functools.partial(_bias_act, name))
        for name in ops.names()
        for backend in ("torch", "jax")
    ]
    return cases + [
        NaiveCase("torch.logsumexp", "torch", "x", _torch_logsumexp),
        NaiveCase("jax.nn.logsumexp", "jax", "x", _jax_logsumexp),
        NaiveCase("jax.nn.gelu", "jax", "xb", _jax_gelu),
        NaiveCase("F.layer_norm", "torch", "x", _torch_layer_norm),
        NaiveCase("F.normalize", "torch", "x", _torch_normalize),
    ]


def _bias_act(name: str, x: Any, b: Any) -> Any:

    return ops.bias_act(name, x, b)


def _torch_logsumexp(x: Any) -> Any:
    import torch

    return torch.logsumexp(x, -1)


def _jax_logsumexp(x: Any) -> Any:
    import jax

    return jax.nn.logsumexp(x, -1)


def _jax_gelu(x: Any, b: Any) -> Any:
    import jax

    return jax.nn.gelu(x + b)


def _torch_layer_norm(x: Any) -> Any:
    import torch

    return torch.nn.functional.layer_norm(x, x.shape[-1:])


def _torch_normalize(x: Any) -> Any:
    import torch

    return torch.nn.functional.normalize(x, dim=-1)


def naive_strategy(case: NaiveCase, dtype: str) -> Any:
    """What a new user writes: ``floats(-10, 10)`` elements, nothing kept off
    kinks, zeros or subnormals."""
    from hypothesis import strategies as st
    from hypothesis.extra import numpy as hnp

    from ..strategies import to_backend  # (imports hypothesis: only where a strategy is built)

    elements = st.floats(-10, 10, width=64 if dtype == "float64" else 32)

    # One strategy per shape, made once: the flatmap below asks for it at every
    # draw, and a new strategy is validated anew each time (the same draws).
    @functools.cache
    def arrays(shape: tuple[int, ...]) -> Any:
        return hnp.arrays(dtype, shape, elements=elements).map(lambda a: to_backend(a, case.backend, dtype))

    if case.kind == "xb":
        return st.integers(1, 5).flatmap(lambda n: st.tuples(arrays((n,)), arrays((n,))))
    return st.tuples(st.integers(1, 3), st.integers(1, 5)).flatmap(lambda s: st.tuples(arrays(s)))
