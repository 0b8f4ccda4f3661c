"""Correct float32 activations of x + b pass on torch and jax, on the full
Jacobian and along directions (FD runs in float64 where fn accepts it, and
the bound carries float32 rounding)."""

from __future__ import annotations

import numpy as np
import pytest

import gradverify as gv

from .._helpers import make

pytestmark = pytest.mark.slow


TORCH = [
    "tanh",
    "sigmoid",
    "gelu",
    "gelu_tanh",
    "silu",
    "softplus",
    "elu",
    "mish",
    "logsigmoid",
    "softsign",
    "selu",
    "celu",
    "tanhshrink",
]


JAX = ["tanh", "sigmoid", "gelu", "gelu_erf", "silu", "softplus", "elu", "log_sigmoid", "soft_sign", "selu", "celu"]


def torch_act(name):
    import torch
    import torch.nn.functional as F

    return {
        "tanh": torch.tanh,
        "sigmoid": torch.sigmoid,
        "gelu": F.gelu,
        "gelu_tanh": lambda z: F.gelu(z, approximate="tanh"),
        "silu": F.silu,
        "softplus": F.softplus,
        "elu": F.elu,
        "mish": F.mish,
        "logsigmoid": F.logsigmoid,
        "softsign": F.softsign,
        "selu": F.selu,
        "celu": F.celu,
        "tanhshrink": F.tanhshrink,
    }[name]


def jax_act(name):
    import jax

    return {
        "tanh": jax.numpy.tanh,
        "sigmoid": jax.nn.sigmoid,
        "gelu": jax.nn.gelu,
        "gelu_erf": lambda z: jax.nn.gelu(z, approximate=False),
        "silu": jax.nn.silu,
        "softplus": jax.nn.softplus,
        "elu": jax.nn.elu,
        "log_sigmoid": jax.nn.log_sigmoid,
        "soft_sign": jax.nn.soft_sign,
        "selu": jax.nn.selu,
        "celu": jax.nn.celu,
    }[name]


def cases():
    for name in TORCH:
        yield "torch", name
    for name in JAX:
        yield "jax", name


@pytest.mark.standard_promotion
@pytest.mark.parametrize("shape", [(4, 5), (64, 32)], ids=["full", "directional"])
@pytest.mark.parametrize("backend,name", list(cases()))
def test_correct_float32_activation_of_x_plus_b_passes(backend, name, shape):
    act = torch_act(name) if backend == "torch" else jax_act(name)
    for seed in range(4):
        rng = np.random.default_rng(seed)
        x = make(backend, (2 * rng.standard_normal(shape)).astype(np.float32))
        b = make(backend, rng.standard_normal(shape[-1]).astype(np.float32))
        r = gv.check(lambda x, b: act(x + b), x, b, seed=seed)
        assert r.ok, str(r)
        assert r.oracle_dtype == "float64"
