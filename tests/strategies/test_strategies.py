"""gradverify.strategies on the real Hypothesis engine: what they draw (kept off
kinks, every piece covered, informative statistics), how they shrink
(`hypothesis.find` gives the minimal example), complex arrays kept off the
branch cut, and the settings profiles."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import find, given, settings, strategies as st

import gradverify as gv
from gradverify import ops, strategies as gst

from ._helpers import FAST


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


@pytest.mark.parametrize("backend", ["numpy", "torch", "jax"])
def test_the_complex_strategy_keeps_off_the_cut_when_asked(backend):
    from hypothesis import given, settings

    m = gst.kink_margin("float64", 10.0)

    @settings(max_examples=40, deadline=None, database=None)
    @given(gst.complex_arrays(backend, "complex128", st.tuples(st.integers(1, 6)), branch_cut=True))
    def drawn(z):
        v = np.asarray(z.numpy() if hasattr(z, "numpy") else z)
        assert v.dtype == np.complex128
        assert (np.abs(v) >= m * 0.999).all()
        assert not ((v.real < 0) & (np.abs(v.imag) < m)).any()

    drawn()


def test_bad_complex_strategy_arguments_say_what_was_expected():
    with pytest.raises(gv.ArgumentValueError, match="complex128"):
        gst.complex_arrays("torch", "float64")
    with pytest.raises(gv.ArgumentValueError, match="min_magnitude"):
        gst.complex_arrays("torch", min_magnitude=5.0, max_magnitude=1.0)


@FAST
@given(gst.arrays("numpy", "float64", st.sampled_from([(4,), (2, 3), (50,)]), large=8, mask=-np.inf))
def test_masked_arrays_never_mask_everything(a):
    held = np.isneginf(a)
    assert not held.all()
    assert np.all(np.isfinite(a[~held])) and a[~held].min() >= -10 and a[~held].max() <= 10


def test_masked_arrays_draw_masks_and_shrink_toward_fewer():
    s = gst.arrays("numpy", "float64", 3, mask=np.nan)
    a = find(s, lambda a: np.isnan(a).any(), settings=settings(database=None))
    assert np.isnan(a).sum() == 1
    # (large arrays are filled from a drawn seed: their masks too, from a seed and a fraction)
    from gradverify.strategies._arrays import masks

    big = find(masks(50, large=8), lambda m: m.sum() > 10, settings=settings(database=None, max_examples=20))
    assert 10 < big.sum() < big.size


def test_masked_empty_arrays():
    a = find(gst.arrays("numpy", "float64", (0,), mask=-np.inf), lambda a: True, settings=settings(database=None))
    assert a.shape == (0,)


@pytest.mark.parametrize("bad", [0.0, 1.5, True, "inf"])
def test_a_finite_mask_value_says_what_was_expected(bad):
    with pytest.raises(gv.ArgumentValueError, match=r"arrays\(mask=\.\.\.\): expected None, or the non-finite value"):
        gst.arrays("numpy", mask=bad)


@pytest.mark.parametrize("dtype", ["float32", "float16", "complex64"])
def test_no_drawn_value_is_subnormal_in_its_dtype(dtype):
    # values drawn in float64 and rounded to dtype: one below dtype's smallest
    # normal would be subnormal there (and processors differ on those)
    tiny = float(np.finfo(np.float16 if dtype == "float16" else np.float32).tiny)
    if dtype == "complex64":
        strategy = gst.complex_arrays("numpy", dtype, 6, max_magnitude=tiny * 4)
    else:
        strategy = gst.arrays("numpy", dtype, 6, min_value=-tiny * 4, max_value=tiny * 4)
    seen_small = []

    @FAST
    @given(strategy)
    def draws(a):
        parts = np.concatenate([a.real.ravel(), a.imag.ravel()]) if np.iscomplexobj(a) else a.ravel()
        parts = np.abs(parts.astype(np.float64))
        assert not np.any((parts > 0) & (parts < tiny)), parts
        seen_small.append(bool(np.any((parts > 0) & (parts < 2 * tiny))))

    draws()
    assert any(seen_small)  # (the range reaches down to the smallest normals)
