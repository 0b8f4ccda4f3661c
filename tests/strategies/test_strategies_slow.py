"""gradverify.strategies on the real Hypothesis engine, across backends,
dtypes and activations: arrays of the backend, dtype, shape and range asked
for; bias_act's arguments off every kink and covering every piece;
normalization arguments that reach small variances and four channels in two
groups, on torch and jax too."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import find, given, settings, strategies as st

import gradverify as gv
from gradverify import ops, strategies as gst
from gradverify.backends import require_backend_name

from .._helpers import precise
from ._helpers import FAST

pytestmark = pytest.mark.slow


def _np(a):
    if hasattr(a, "detach"):
        a = a.detach().float() if str(a.dtype) == "torch.bfloat16" else a.detach()
    return np.asarray(a, dtype=np.float64)


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16", "bfloat16"])
def test_arrays_backend_dtype_shape_range(backend, dtype):
    if backend == "numpy" and dtype == "bfloat16":
        with pytest.raises(gv.ArgumentValueError, match="use torch or jax for bfloat16"):
            gst.arrays(backend, dtype)
        return

    @FAST
    @given(gst.arrays(backend, dtype, st.tuples(st.integers(1, 3), st.integers(1, 4)), min_value=-2, max_value=5))
    def prop(a):
        assert require_backend_name(a) == backend
        assert str(a.dtype).removeprefix("torch.") == dtype
        v = _np(a)
        assert 1 <= v.shape[0] <= 3 and 1 <= v.shape[1] <= 4
        assert v.min() >= -2.01 and v.max() <= 5.01

    prop()


KINKY = [a.name for a in ops.ACTIVATIONS if a.kink_points()]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("name", KINKY)
def test_bias_act_args_keep_x_plus_b_off_every_kink(name, dtype):
    act = ops.activation(name)
    kinks = np.array([k for k, _ in act.kink_points()])
    m = gst.kink_margin(dtype, 13.0)

    @FAST
    @given(gst.bias_act_args(act, "numpy", dtype))
    def prop(args):
        x, b = args
        z = (x + b).astype(np.float64)  # as the op computes it, in the dtype
        assert np.min(np.abs(z[..., None] - kinks)) >= 0.9 * m

    prop()


@pytest.mark.parametrize(
    "name,regions",
    [
        ("relu6", [lambda z: z < 0, lambda z: (z > 0) & (z < 6), lambda z: z > 6]),
        ("hardsigmoid", [lambda z: z < -3, lambda z: np.abs(z) < 3, lambda z: z > 3]),
        ("softshrink", [lambda z: z < -0.5, lambda z: np.abs(z) < 0.5, lambda z: z > 0.5]),
    ],
)
def test_bias_act_args_cover_every_piece(name, regions):
    for k, region in enumerate(regions):
        x, b = find(
            gst.bias_act_args(name, "numpy"),
            lambda args, region=region: bool(region(args[0] + args[1]).any()),
            settings=settings(database=None, max_examples=500),
        )
        assert region(x + b).any(), (name, k)


def test_normalization_args_reach_small_variance_and_four_channels_in_two_groups():
    args = find(
        gst.normalization_args("group_norm", "numpy"),
        lambda a: a[0].shape[1] == 4 and int(a[1]) == 2,
        settings=settings(database=None, max_examples=500),
    )
    assert args[0].shape == (1, 4, 1)  # and it shrinks to the smallest such shape
    x = find(
        gst.normalization_args("layer_norm", "numpy"),
        lambda a: bool((a[0].std(axis=-1) < 0.01).any()),
        settings=settings(database=None, max_examples=500),
    )[0]
    assert (x.std(axis=-1) < 0.01).any() and (x.std(axis=-1) > 1e-4).all()


def test_normalization_args_on_torch_and_jax():
    for backend in ("torch", "jax"):
        args = find(gst.normalization_args("group_norm", backend), lambda a: True, settings=settings(database=None))
        assert all(require_backend_name(a) == backend for a in args)
        with precise(backend):  # jax float64 arrays compute under x64
            y = gst.normalization_call("group_norm", "fused")(*args)
        assert tuple(y.shape) == tuple(args[0].shape)


def test_bias_act_args_shrink_to_one_element_and_zero_bias():
    x, b = find(gst.bias_act_args("relu", "numpy"), lambda args: True, settings=settings(database=None))
    assert x.shape == (1, 1) and b.tolist() == [0.0]
    # without a bias: x alone
    (x,) = find(gst.bias_act_args("tanh", "torch", bias=False), lambda a: True, settings=settings(database=None))
    assert tuple(x.shape) == (1, 1)


def test_bias_act_args_channels_on_axis_1():
    x, b = find(
        gst.bias_act_args("tanh", "numpy", shape=st.just((2, 3, 4))), lambda a: True, settings=settings(database=None)
    )
    assert x.shape == (2, 3, 4) and b.shape == (3, 1)
