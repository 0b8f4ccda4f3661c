"""Helpers the tests of gradverify.ops share: bias_act's inputs and fused
calls, and the normalization cases beside torch.nn.functional's."""

from __future__ import annotations

import numpy as np

from gradverify import ops

#: Every activation of the table, by name.
ACTIVATION_NAMES = [a.name for a in ops.ACTIVATIONS]


def inputs(seed=0, shape=(3, 4), dtype=np.float64):
    rng = np.random.default_rng(seed)
    x = 2.5 * rng.standard_normal(shape)
    b = rng.standard_normal(shape[-1])
    return x.astype(dtype), b.astype(dtype)


def fused_fn(backend, name, bias=True):
    if backend == "numpy":
        return ops.bias_act_rule(name, bias=bias)
    if bias:
        return lambda x, b: ops.bias_act(name, x, b, impl="fused")
    return lambda x: ops.bias_act(name, x, impl="fused")


# -- normalization cases ---------------------------------------------------------
def data(shape=(3, 4, 5), seed=0, small_rows=True):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape)
    if small_rows:
        x[0] = 1.0 + 3e-3 * x[0]  # small but not degenerate variance
    c = shape[1]
    return x, 1.0 + 0.5 * rng.standard_normal(c), rng.standard_normal(c)


def tt(a):
    import torch

    return torch.tensor(a)


CASES = {
    "layer_norm": (
        lambda x, w, b, impl="reference": ops.layer_norm(x, x.shape[1:], None, None, impl=impl),
        lambda F, x, w, b: F.layer_norm(x, x.shape[1:]),
    ),
    "layer_norm_affine": (
        lambda x, w, b, impl="reference": ops.layer_norm(x, x.shape[-1:], w2(x), None, impl=impl),
        lambda F, x, w, b: F.layer_norm(x, x.shape[-1:], w2(x), None),
    ),
    "group_norm": (
        lambda x, w, b, impl="reference": ops.group_norm(x, 2, w, b, impl=impl),
        lambda F, x, w, b: F.group_norm(x, 2, w, b),
    ),
    "instance_norm": (
        lambda x, w, b, impl="reference": ops.instance_norm(x, weight=w, bias=b, impl=impl),
        lambda F, x, w, b: F.instance_norm(x, weight=w, bias=b),
    ),
    "batch_norm_train": (
        lambda x, w, b, impl="reference": ops.batch_norm(x, None, None, w, b, training=True, impl=impl),
        lambda F, x, w, b: F.batch_norm(x, None, None, w, b, training=True),
    ),
    "batch_norm_eval": (
        lambda x, w, b, impl="reference": ops.batch_norm(x, *running(x), w, b, impl=impl),
        lambda F, x, w, b: F.batch_norm(x, *running(x), w, b),
    ),
    "rms_norm": (
        lambda x, w, b, impl="reference": ops.rms_norm(x, x.shape[-1:], w2(x), impl=impl),
        lambda F, x, w, b: F.rms_norm(x, x.shape[-1:], w2(x)),
    ),
}


IMPLS = ["reference", "fused"]


def running(x):
    """Running statistics for x's channels, in x's backend (built from x)."""
    c = x.shape[1]
    mean, var = 0.1 * np.arange(c) - 0.2, 0.5 + 0.25 * np.arange(c)
    if hasattr(x, "new_tensor"):
        return x.new_tensor(mean), x.new_tensor(var)
    return x[0, :, 0] * 0 + mean, x[0, :, 0] * 0 + var


def w2(x):
    """A weight over the last axis, != 1, in x's backend (built from its shape)."""
    n = x.shape[-1]
    return (
        x[0, 0] * 0 + (1.5 + 0.1 * np.arange(n))
        if not hasattr(x, "new_tensor")
        else x.new_tensor(1.5 + 0.1 * np.arange(n))
    )


def random_like(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape)
