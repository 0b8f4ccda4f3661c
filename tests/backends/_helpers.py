"""Helpers the backend tests share."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st


def float_rows(n=30):
    """A strategy of one float64 jax vector of ``n`` values in [-3, 3]."""
    import jax.numpy as jnp

    return st.lists(st.floats(-3, 3), min_size=n, max_size=n).map(lambda v: (jnp.asarray(np.array(v)),))
