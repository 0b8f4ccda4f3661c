"""float16 and bfloat16: correct ops pass, the seed bug is still caught (the
rounding allowance is a few ulps there, not the float32 one)."""

from __future__ import annotations

import numpy as np
import pytest

import gradverify as gv
from gradverify._sweep.examples import BUILDERS

pytestmark = pytest.mark.slow


def arrays(backend, dtype, shape, seed):
    rng = np.random.default_rng(seed)
    x, b = rng.standard_normal(shape), rng.standard_normal(shape[-1])
    if backend == "torch":
        import torch

        dt = getattr(torch, dtype)
        return torch.tensor(x).to(dt), torch.tensor(b).to(dt)
    import jax.numpy as jnp

    return jnp.asarray(x, dtype=dtype), jnp.asarray(b, dtype=dtype)


def act(backend, name):
    if backend == "torch":
        import torch

        return {"gelu": torch.nn.functional.gelu, "tanh": torch.tanh, "silu": torch.nn.functional.silu}[name]
    import jax

    return {"gelu": jax.nn.gelu, "tanh": jax.numpy.tanh, "silu": jax.nn.silu}[name]


@pytest.mark.standard_promotion
@pytest.mark.parametrize("shape", [(3, 4), (300, 40)], ids=["full", "directional"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("backend", ["torch", "jax"])
def test_low_precision(backend, dtype, shape):
    for seed in range(3):
        x, b = arrays(backend, dtype, shape, seed)
        for name in ("gelu", "tanh", "silu"):
            f = act(backend, name)
            r = gv.check(lambda x, b, f=f: f(x + b), x, b, seed=seed)
            assert r.ok, str(r)
            assert r.oracle_dtype == "float64"
        assert gv.check(BUILDERS[backend](bug=False), x, b, seed=seed).ok
        bad = gv.check(BUILDERS[backend](bug=True), x, b, seed=seed)
        assert not bad.ok, str(bad)
