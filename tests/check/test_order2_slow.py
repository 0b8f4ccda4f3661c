"""order=2 on jax, in float64 and float32: a custom_jvp whose derivative
stops the gradient is caught only at order 2, the right one passes every
second-order mode."""

from __future__ import annotations

import numpy as np
import pytest

import gradverify as gv

from ._helpers import ORDER2_X

pytestmark = pytest.mark.slow


def jax_tanh(stop_gradient: bool):
    import jax
    import jax.numpy as jnp

    @jax.custom_jvp
    def f(x):
        return jnp.tanh(x)

    @f.defjvp
    def _(p, t):
        y = jnp.tanh(p[0])
        d = 1 - y * y
        return y, (jax.lax.stop_gradient(d) if stop_gradient else d) * t[0]

    return f


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_jax_second_order(dtype):
    from .._helpers import make

    x = make("jax", ORDER2_X.astype(dtype))
    assert gv.check(jax_tanh(True), x).ok
    bad = gv.check(jax_tanh(True), x, order=2)
    assert not bad.ok and all(f.order == 2 for f in bad.errors)
    good = gv.check(jax_tanh(False), x, order=2)
    assert good.ok, str(good)
    assert {"JVP of VJP", "VJP of VJP", "JVP of JVP", "VJP of JVP"} <= set(good.modes)
