"""Correct float32 ops pass (FD runs in float64 where fn accepts it, and the
bound carries float32 rounding); the same bugs are still caught in float32."""

from __future__ import annotations

import numpy as np
import pytest

import gradverify as gv

from ._helpers import flipped_tanh_bias, make

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


@pytest.mark.slow
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


@pytest.mark.parametrize("backend", ["numpy", "torch", "jax"])
def test_flipped_element_caught_in_float32(backend):
    rng = np.random.default_rng(11)
    flip_at = 777
    x = make(backend, rng.standard_normal((1000, 10)).astype(np.float32))
    b = make(backend, rng.standard_normal(10).astype(np.float32))
    r = gv.check(flipped_tanh_bias(backend, 10, flip_at), x, b)
    assert not r.ok
    f = r.by_kind(gv.Kind.MISMATCH)[0]
    assert f.input_index == (77, 7)


def test_saturated_tanh_is_no_false_alarm():
    """1 - tanh(z)^2 near saturation rounds relative to 1, not to its tiny
    result: jax's forward and reverse mode differ by 1e-16 at z = -5 (found by
    `gradverify check all`), torch's float32 derivative at z = 9 is off by
    half its size. Both are rounding at the function's own scale, not bugs."""
    import jax
    import jax.numpy as jnp
    import torch

    with jax.enable_x64(True):
        r = gv.check(jnp.tanh, jnp.asarray([[-5.0]]))
    assert r.ok, str(r)
    r = gv.check(torch.tanh, torch.tensor([9.0], dtype=torch.float32))
    assert r.ok, str(r)
    # and a wrong slope at that point is still caught
    wrong = gv.Rule(np.tanh, jvp=lambda p, t: 2 * (1 - np.tanh(p[0]) ** 2) * t[0])
    assert not gv.check(wrong, np.array([-5.0])).ok
