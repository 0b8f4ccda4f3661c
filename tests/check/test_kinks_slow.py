"""Correct kinked ops pass with inputs exactly on each kink and a hair beside
it, on every backend and dtype: the kinks are reported, as inconclusive, not
as mismatches."""

from __future__ import annotations

import numpy as np
import pytest

import gradverify as gv

from .._helpers import make
from ._helpers import KINKED_OPS, numpy_rule

pytestmark = pytest.mark.slow


def torch_op(name):
    import torch
    import torch.nn.functional as F

    return {
        "relu": F.relu,
        "relu6": F.relu6,
        "hardtanh": F.hardtanh,
        # F.hardsigmoid's derivative is float32(1/6) even in float64 (see the
        # test in test_kinks.py): use the plain formula, whose autograd is exact.
        "hardsigmoid": lambda z: torch.clamp((z + 3) / 6, 0, 1),
        "hardswish": F.hardswish,
        "softshrink": F.softshrink,
        "leakyrelu": F.leaky_relu,
    }[name]


def jax_op(name):
    import jax
    import jax.numpy as jnp

    return {
        "relu": jax.nn.relu,
        "relu6": jax.nn.relu6,
        "hardtanh": jax.nn.hard_tanh,
        "hardsigmoid": jax.nn.hard_sigmoid,
        "hardswish": jax.nn.hard_swish,
        "softshrink": lambda z: jnp.where(z > 0.5, z - 0.5, jnp.where(z < -0.5, z + 0.5, 0.0)),
        "leakyrelu": jax.nn.leaky_relu,
    }[name]


def op_for(backend, name):
    return {"numpy": numpy_rule, "torch": torch_op, "jax": jax_op}[backend](name)


def kink_inputs(name, dtype):
    delta = 1e-9 if dtype == "float64" else 1e-6
    pts = []
    for k in KINKED_OPS[name][0]:
        pts += [k, k + delta, k - delta]
    pts += [-7.0, -2.0, 0.3, 2.5, 7.0]
    return np.array(pts, dtype=dtype)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("name", sorted(KINKED_OPS))
@pytest.mark.parametrize("backend", ["numpy", "torch", "jax"])
def test_correct_kinked_op_passes_on_and_beside_kinks(backend, name, dtype):
    x = make(backend, kink_inputs(name, dtype))
    result = gv.check(op_for(backend, name), x)
    assert result.ok, str(result)
    # Exactly on a kink: reported, as inconclusive, not as a mismatch.
    kinks = result.by_kind(gv.Kind.NONDIFFERENTIABLE)
    assert kinks and all(f.level == "info" for f in kinks)
    assert result.inconclusive
    assert "inconclusive" in str(result).splitlines()[0]
