"""Helpers the tests of several wings share (fixtures live in conftest.py;
each wing's own helpers are in its folder's _helpers.py)."""

from __future__ import annotations

import contextlib

import numpy as np

from gradverify._sweep.examples import tanh_bias_flipped


def make(backend: str, a: np.ndarray):
    """A backend array with a's values and dtype (jax float64 made under x64)."""
    a = np.asarray(a)
    if backend == "torch":
        import torch

        return torch.from_numpy(np.array(a, copy=True))
    if backend == "jax":
        import jax
        import jax.numpy as jnp

        with jax.enable_x64(a.dtype.itemsize == 8):
            return jnp.asarray(a)
    return np.array(a, copy=True)


def precise(backend: str):
    """Context for computing on float64 arrays directly: jax needs x64 on."""
    if backend == "jax":
        import jax

        return jax.enable_x64(True)
    return contextlib.nullcontext()


def flipped_tanh_bias(backend, n_cols, flip_at, mode="vjp"):
    """tanh(x + b) whose derivative has the sign of element ``flip_at`` flipped."""
    return tanh_bias_flipped(backend, flip_at, mode)


#: A module of a downstream project: a scaled softplus as a
#: torch.autograd.Function whose backward has a planted bug (exp(x) for
#: sigmoid(x) where x < 0), and the same function written correctly.
PLANTED_TORCH_OPS = """
import torch


class ScaledSoftplus(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return 2.0 * torch.nn.functional.softplus(x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        slope = torch.where(x < 0, torch.exp(x), torch.sigmoid(x))  # the bug: exp(x) for x < 0
        return 2.0 * g * slope


def scaled_softplus(x):
    return ScaledSoftplus.apply(x)


def good_softplus(x):
    return 2.0 * torch.nn.functional.softplus(x)
"""
