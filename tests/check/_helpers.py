"""Helpers the tests of the check share."""

from __future__ import annotations

import numpy as np

import gradverify as gv
from gradverify._sweep.examples import naive_cases

# -- where the arguments live (test_device*) ----------------------------------------------------
N = 1_000_000
COLS = 10
#: A device-to-host crossing of at least this many elements counts as
#: full-size; a host-to-device one of more than FULL_BYTES, 2 bytes an input
#: element. The random directions' bits cross as they are, 16 an element (a
#: quarter of the inputs' bytes), from the host's generator (the same seed
#: gives the same directions on every backend); a copy of x, or of any
#: float64 array of its size, is 8 bytes an element.
FULL = N // 4
FULL_BYTES = 2 * (N + COLS)
FLIP = 123_457  # flat index of the wrong element of x


def big_inputs():
    """x of N elements in rows of COLS, and a bias per column."""
    rng = np.random.default_rng(7)
    return rng.standard_normal((N // COLS, COLS)), rng.standard_normal(COLS)


# -- kinks (test_kinks*) ------------------------------------------------------------------------
#: name: (kinks, numpy forward, numpy derivative with JAX's conventions at kinks)
KINKED_OPS = {
    "relu": ([0.0], lambda z: np.maximum(z, 0), lambda z: (z > 0) * 1.0),
    "relu6": ([0.0, 6.0], lambda z: np.clip(z, 0, 6), lambda z: ((z > 0) & (z < 6)) * 1.0),
    "hardtanh": ([-1.0, 1.0], lambda z: np.clip(z, -1, 1), lambda z: ((z > -1) & (z < 1)) * 1.0),
    "hardsigmoid": (
        [-3.0, 3.0],
        lambda z: np.clip((z + 3) / 6, 0, 1),
        lambda z: ((z > -3) & (z < 3)) / 6.0,
    ),
    "hardswish": (
        [-3.0, 3.0],
        lambda z: z * np.clip((z + 3) / 6, 0, 1),
        lambda z: np.where(z < -3, 0.0, np.where(z > 3, 1.0, z / 3 + 0.5)),
    ),
    "softshrink": (
        [-0.5, 0.5],
        lambda z: np.where(z > 0.5, z - 0.5, np.where(z < -0.5, z + 0.5, 0.0)),
        lambda z: (np.abs(z) > 0.5) * 1.0,
    ),
    "leakyrelu": ([0.0], lambda z: np.where(z > 0, z, 0.01 * z), lambda z: np.where(z > 0, 1.0, 0.01)),
}


def numpy_rule(name, derivative=None):
    """KINKED_OPS[name] as a gv.Rule, its derivative replaced by ``derivative`` if given."""
    _, fwd, der = KINKED_OPS[name]
    der = derivative or der
    return gv.Rule(
        lambda z: fwd(z),
        jvp=lambda p, t: (der(p[0]) * t[0]).astype(p[0].dtype),
        vjp=lambda p, g: ((der(p[0]) * g).astype(p[0].dtype),),
    )


# -- the naive-strategy suite (test_naive*) ------------------------------------------------------
NAIVE_CASES = naive_cases()

# -- order 2 (test_order2*) ---------------------------------------------------------------------
ORDER2_X = np.array([0.3, -0.7, 1.1, 0.05])


def jax_point(seed=0):
    """Four float64 jax values in [-2, 2] (made under x64)."""
    import jax
    import jax.numpy as jnp

    with jax.enable_x64(True):
        return jnp.asarray(np.random.default_rng(seed).uniform(-2, 2, 4))
