"""The seed bug (NNlib bias_act!): swish' evaluated at x instead of x + b,
caught on every backend and dtype with a nonzero bias, down to one element;
the jax variant here is a custom_vjp (no forward mode: a warning, and the VJP
still checked), the bundled example a custom_jvp."""

from __future__ import annotations

import numpy as np
import pytest

import gradverify as gv
from gradverify._sweep.examples import BUILDERS, example_inputs

from .._helpers import make

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("backend", ["numpy", "torch", "jax"])
def test_seed_bug_caught_with_bias(backend, dtype):
    result = gv.check(BUILDERS[backend](bug=True), *example_inputs(backend, dtype))
    assert not result.ok
    mismatches = result.by_kind(gv.Kind.MISMATCH)
    assert {f.pair for f in mismatches} == {("JVP", "FD"), ("VJP", "FD")}
    for f in mismatches:
        assert f.error > f.bound
        assert "FD" in f.values
    assert "FAILED" in str(result).splitlines()[0]


def jax_custom_vjp_swish(bug: bool):
    import jax
    import jax.numpy as jnp

    @jax.custom_vjp
    def swish(x, b):
        return jax.nn.silu(x + b)

    def fwd(x, b):
        return swish(x, b), (x, b)

    def bwd(res, g):
        x, b = res
        z = x if bug else x + b
        s = jax.nn.sigmoid(z)
        gz = g * (s + z * s * (1 - s))
        return gz, jnp.sum(gz, axis=0)

    swish.defvjp(fwd, bwd)
    return swish


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_seed_bug_jax_custom_vjp(dtype):
    x, b = example_inputs("jax", dtype)
    bad = gv.check(jax_custom_vjp_swish(bug=True), x, b)
    assert not bad.ok
    (m,) = bad.by_kind(gv.Kind.MISMATCH)
    assert m.pair == ("VJP", "FD")
    # custom_vjp has no forward mode: a warning, and the VJP check still ran.
    (w,) = bad.by_kind(gv.Kind.MODE_UNAVAILABLE)
    assert w.level == "warning" and "custom_vjp" in w.message
    assert bad.modes["JVP"] == "unavailable" and bad.modes["VJP"] == "checked"
    x0, b0 = example_inputs("jax", dtype, zero_bias=True)
    assert gv.check(jax_custom_vjp_swish(bug=True), x0, b0).ok
    assert gv.check(jax_custom_vjp_swish(bug=False), x, b).ok


@pytest.mark.parametrize("backend", ["numpy", "torch", "jax"])
def test_seed_bug_minimal_case_one_element(backend):
    """One element, nonzero bias: the minimal case of the seed."""
    x = make(backend, np.array([0.5]))
    b = make(backend, np.array([0.25]))
    result = gv.check(BUILDERS[backend](bug=True), x, b)
    assert not result.ok
    f = result.by_kind(gv.Kind.MISMATCH)[0]
    assert f.input_index == (0,)
    z = 0.75
    s = 1 / (1 + np.exp(-z))
    assert f.values["FD"] == pytest.approx(s + z * s * (1 - s), rel=1e-8)
