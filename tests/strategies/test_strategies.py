"""gradverify.strategies on the real Hypothesis engine: what they draw (kept off
kinks, every piece covered, informative statistics), how they shrink
(`hypothesis.find` gives the minimal example), and the settings profiles."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import find, given, settings
from hypothesis import strategies as st

import gradverify as gv
from gradverify import ops
from gradverify import strategies as gst
from gradverify.ops import _xp

from ._helpers import precise

FAST = settings(max_examples=60, deadline=None, database=None)


def _np(a):
    if hasattr(a, "detach"):
        a = a.detach().float() if str(a.dtype) == "torch.bfloat16" else a.detach()
    return np.asarray(a, dtype=np.float64)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float64", "float32", "float16", "bfloat16"])
def test_arrays_backend_dtype_shape_range(backend, dtype):
    if backend == "numpy" and dtype == "bfloat16":
        with pytest.raises(gv.ArgumentValueError, match="use torch or jax for bfloat16"):
            gst.arrays(backend, dtype)
        return

    @FAST
    @given(gst.arrays(backend, dtype, st.tuples(st.integers(1, 3), st.integers(1, 4)), min_value=-2, max_value=5))
    def prop(a):
        assert _xp.backend_name(a) == backend
        assert str(a.dtype).removeprefix("torch.") == dtype
        v = _np(a)
        assert 1 <= v.shape[0] <= 3 and 1 <= v.shape[1] <= 4
        assert v.min() >= -2.01 and v.max() <= 5.01

    prop()


@FAST
@given(gst.arrays("numpy", "float64", (3, 5)))
def test_small_arrays_have_distinct_values(a):
    assert len(np.unique(a)) == a.size  # no constant rows, no repeated zeros


@FAST
@given(gst.arrays("numpy", "float64", 20000))
def test_large_arrays_are_filled_dense_and_varied(a):
    assert a.shape == (20000,)
    assert len(np.unique(a)) > 0.99 * a.size
    assert np.all(np.isfinite(a)) and a.min() >= -10 and a.max() <= 10


@FAST
@given(gst.arrays("numpy", "float32", 7, kinks=[0.0, 1.5], min_value=-3, max_value=3))
def test_user_declared_kinks_are_kept_at_the_margin(a):
    m = gst.kink_margin("float32", 3)
    for k in (0.0, 1.5):
        assert np.min(np.abs(a.astype(np.float64) - k)) >= m * (1 - 1e-6)


def test_arrays_shrink_to_one_simple_element():
    a = find(gst.arrays("numpy"), lambda a: True, settings=settings(database=None))
    assert a.shape == (1,) and a[0] == 0.0


KINKY = [a.name for a in ops.ACTIVATIONS if a.kink_points()]


@pytest.mark.slow
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


@pytest.mark.slow
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


def test_bias_act_args_without_room_say_so():
    with pytest.raises(gv.ArgumentValueError, match="room between the kinks"):
        gst.bias_act_args("relu", "numpy", min_value=-1e-5, max_value=1e-5)


def test_activations_shrink_to_the_simplest():
    assert find(gst.activations(), lambda a: True, settings=settings(database=None)) == "identity"
    assert set(gst.activation_names()) == set(ops.names())


@pytest.mark.parametrize("kind", gst.KINDS)
def test_normalization_args_have_informative_statistics(kind):
    call = gst.normalization_call(kind)

    @FAST
    @given(gst.normalization_args(kind, "numpy"))
    def prop(args):
        x = args[0]
        y = call(*args)
        assert y.shape == x.shape and np.all(np.isfinite(y))
        long = [k for k in x.shape if k > 1]
        assert len(set(long)) == len(long)  # distinct axis sizes (beyond 1)
        w = args[-1] if kind == "rms_norm" else args[-2]
        assert not np.all(w == 1.0)
        if kind == "batch_norm":
            assert x.shape[0] >= 2
        # no degenerate slice: every normalized slice has a spread
        if kind in ("layer_norm", "rms_norm"):
            spreads = x.std(axis=-1)
        elif kind == "group_norm":
            spreads = x.reshape(x.shape[0], int(args[1]), -1).std(axis=-1)
        elif kind == "instance_norm":
            spreads = x.std(axis=-1)
        else:
            spreads = x.std(axis=(0, 2))
        assert np.all(spreads > 1e-4)

    prop()


@pytest.mark.slow
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


@pytest.mark.slow
def test_normalization_args_on_torch_and_jax():
    for backend in ("torch", "jax"):
        args = find(gst.normalization_args("group_norm", backend), lambda a: True, settings=settings(database=None))
        assert all(_xp.backend_name(a) == backend for a in args)
        with precise(backend):  # jax float64 arrays compute under x64
            y = gst.normalization_call("group_norm", "fused")(*args)
        assert tuple(y.shape) == tuple(args[0].shape)


def test_profiles():
    from hypothesis import settings as hs

    before = hs.default
    try:
        gst.load_profile("ci")
        assert hs.default.derandomize and hs.default.database is None and hs.default.deadline is None
        gst.load_profile("thorough")
        assert hs.default.max_examples == 1000
    finally:
        hs.register_profile("_restore", before)
        hs.load_profile("_restore")
    with pytest.raises(gv.ArgumentValueError, match=r"one of \['ci', 'dev', 'thorough'\]"):
        gst.load_profile("fast")
