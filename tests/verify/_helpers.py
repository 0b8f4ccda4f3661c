"""Helpers the tests of gv.verify share: the strategies a user writes first,
and inputs that sit on an activation's kinks."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from gradverify import strategies as gst


def naive_bias_args(backend, dtype="float64"):
    """What a user writes first: floats in [-10, 10], x of shape up to (4, 5), b per column."""
    shapes = st.tuples(st.integers(1, 4), st.integers(1, 5))
    return shapes.flatmap(
        lambda s: st.tuples(
            gst.arrays(backend, dtype, s, distinct=False), gst.arrays(backend, dtype, (s[1],), distinct=False)
        )
    )


def to_numpy(a):
    """A float64 numpy copy of a numpy, torch or jax array."""
    return np.asarray(a.detach() if hasattr(a, "detach") else a, dtype=np.float64)


def on_kinks(act, backend, dtype):
    """Naive x that contains the activation's kinks exactly (half of the elements)."""
    points = [k for k, _ in act.kink_points()] or [0.0]
    elem = st.one_of(st.sampled_from(points), st.floats(-10, 10, allow_subnormal=False))
    shapes = st.tuples(st.integers(1, 3), st.integers(1, 4))
    return shapes.flatmap(
        lambda s: st.lists(elem, min_size=s[0] * s[1], max_size=s[0] * s[1]).map(
            lambda v, s=s: (gst._arrays.to_backend(np.reshape(v, s), backend, dtype),)
        )
    )
