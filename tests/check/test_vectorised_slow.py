"""A full Jacobian's rows come from one vectorised call where fn allows it,
and a failure is always reported from the plain calls: the seed bug as a jax
custom_vjp is named at the element the plain calls found."""

from __future__ import annotations

import numpy as np
import pytest

import gradverify as gv

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

pytestmark = pytest.mark.slow


def test_a_wrong_rule_is_reported_from_the_plain_calls():
    """The seed bug (swish's gradient wrong only with a bias), vectorised: the
    report names the element the plain calls found."""

    @jax.custom_vjp
    def swish(x, b):
        z = x + b
        return z * jax.nn.sigmoid(z)

    def fwd(x, b):
        return swish(x, b), (x, b)

    def bwd(res, g):
        x, b = res
        s = jax.nn.sigmoid(x + b)
        d = s + x * s * (1 - s)  # uses x where it needs x + b
        return g * d, g * d

    swish.defvjp(fwd, bwd)
    with jax.enable_x64(True):
        x = jnp.asarray(np.linspace(-2, 2, 4))
        b = jnp.asarray([0.0, 0.5, 0.0, 0.0])
        r = gv.check(swish, x, b)
    assert not r.ok
    located = {(f.argument, f.input_index) for f in r.errors if f.input_index is not None}
    assert located and all(idx == (1,) for _, idx in located), str(r)
    assert r.evaluations["vjp"] > 1  # rechecked plainly
