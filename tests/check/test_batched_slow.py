"""Batched derivatives (``batched=True``): the JVP and VJP under torch.func.vmap
and jax.vmap, member by member against their plain values. A rule right
alone and wrong under vmap is an error; one that cannot run under vmap is a
warning in the framework's words; a right one passes, in float64 and float32.
(The command's --batched and the plugin's switches: faces/test_batched_options_slow.py.)

The slow ones (over a second, or compiling with jax)."""

from __future__ import annotations

import numpy as np
import pytest

import gradverify as gv

from ._helpers import jax_point

pytestmark = pytest.mark.slow


jax = pytest.importorskip("jax")

jnp = jax.numpy


def _log_softmax_with_a_host_kernel():
    """log_softmax whose backward runs a numpy kernel written for one vector but
    declared to take batches (vmap_method="broadcast_all"): under vmap it sums
    the cotangent over every member, not each one's."""

    @jax.custom_vjp
    def log_softmax(x):
        return x - jax.nn.logsumexp(x)

    def fwd(x):
        y = log_softmax(x)
        return y, y

    def bwd(y, g):
        def kernel(y, g):
            return g - np.exp(y) * g.sum()

        out = jax.ShapeDtypeStruct(g.shape, g.dtype)
        return (jax.pure_callback(kernel, out, y, g, vmap_method="broadcast_all"),)

    log_softmax.defvjp(fwd, bwd)
    return log_softmax


def test_a_right_jax_function_passes_batched():
    with jax.enable_x64(True):
        r = gv.check(lambda x: jnp.tanh(x) * jax.nn.logsumexp(x), jax_point(), batched=True)
    assert r.ok and not r.findings, str(r)
    assert r.modes["batched JVP"] == "checked" and r.modes["batched VJP"] == "checked"


def test_a_jax_custom_vjp_wrong_only_under_vmap_is_an_error():
    fn = _log_softmax_with_a_host_kernel()
    with jax.enable_x64(True):
        assert gv.check(fn, jax_point()).ok
        r = gv.check(fn, jax_point(), batched=True)
    assert not r.ok
    assert [f.pair for f in r.errors] == [("batched VJP", "VJP")]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_gelu_s_tail_under_vmap_is_at_most_a_precision_warning(dtype):
    """jax's tanh-form gelu at x + b = -4.5 (drawn by the naive strategy):
    vmap's tanh kernel is off the scalar one by tens of ulps, and the
    derivative 0.5 (1 + tanh u) ... cancels terms of 1 down to 3e-5, so the
    batched and plain VJPs differ by 4e-15 (float64) and 2% (float32) -
    beyond the rounding model of the result, within that of fn's terms: a
    warning, not an error. A rule wrong under vmap stays an error (above)."""
    with jax.enable_x64(True):
        x = jnp.full(5, -2.2625936676941123, dtype=dtype)
        r = gv.check(lambda x, b: jax.nn.gelu(x + b), x, x, batched=True)
    assert r.ok, str(r)
    assert r.modes["batched JVP"] == "checked" and r.modes["batched VJP"] == "checked"
    assert all(f.level == "warning" for f in r.findings if f.pair and f.pair[0].startswith("batched")), str(r)
