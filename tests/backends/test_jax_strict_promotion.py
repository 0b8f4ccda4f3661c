"""Under ``jax_numpy_dtype_promotion="strict"`` no implicit promotion is
allowed: every concatenation and arithmetic of mixed-precision values the
check makes itself (a derivative's parts, order 2's cotangents) casts
explicitly, so a mixed-dtype check runs at any order."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import gradverify as gv

jax = pytest.importorskip("jax")
jnp = jax.numpy

FUNCTIONS = {
    "mul": lambda x, y: jax.lax.mul(x.astype(jnp.float64), y.astype(jnp.float64)),
    "tanh-sum": lambda x, y: jnp.tanh(x.astype(jnp.float64)) + y.astype(jnp.float64) ** 2,
    "outer": lambda x, y: jnp.outer(x.astype(jnp.float64), jnp.sin(y.astype(jnp.float64))),
}


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
@pytest.mark.parametrize("order", [1, 2])
def test_mixed_dtypes_check_under_strict_promotion(name, order):
    fn = FUNCTIONS[name]
    with jax.enable_x64(True), jax.numpy_dtype_promotion("strict"):
        for (dx, dy), seed in itertools.product(
            [(jnp.float32, jnp.float64), (jnp.float64, jnp.float32), (jnp.float32, jnp.float32)], range(1)
        ):
            x = jax.random.uniform(jax.random.key(seed), (3,), dx, -2.0, 2.0)
            y = jax.random.uniform(jax.random.key(seed + 10), (3,), dy, -2.0, 2.0)
            r = gv.check(fn, x, y, order=order, seed=seed)
            assert r.ok and not r.by_kind(gv.Kind.EXCEPTION), f"{name} {dx.__name__} x {dy.__name__}:\n{r}"


def test_a_check_leaves_the_callers_x64_off_jax_as_it_was():
    """The float64 evaluations run in x64; a trace of fn that raises there
    must not leave fn's numpy constants canonicalized as 64-bit for the
    caller's x64-off code (jax caches that by the array, not by the mode)."""
    from jax.test_util import check_grads

    index = np.array([0, 2, 1])
    fn = lambda s: jax.lax.index_take(s, (index,), (0,))  # noqa: E731 (a numpy constant in a closure)
    src = jax.random.normal(jax.random.key(0), (3, 4), jnp.float32)
    with jax.numpy_dtype_promotion("strict"):
        assert jax.jvp(fn, (src,), (src,))[1].dtype == jnp.float32  # (before: it works)
        r = gv.check(fn, src)
        assert r.ok, r
        assert "strict dtype promotion" in str(r), r  # (said: fn stayed in float32)
        assert jnp.asarray(index).dtype == jnp.int32
        primal, tangent = jax.jvp(fn, (src,), (src,))  # (a TypePromotionError when polluted)
        np.testing.assert_array_equal(np.asarray(tangent), np.asarray(src)[[0, 2, 1]])
        check_grads(fn, (src,), order=1, modes=("fwd", "rev"))


def test_a_trace_that_raises_in_float64_leaves_nothing_behind():
    """A jit trace that raises keeps its frame (and fn's numpy constants, as
    jax converted them in x64) alive unless the check releases it."""
    index = np.array([0, 2, 1])

    def fn(s):
        taken = s[jnp.asarray(index)]  # (index becomes a constant of the trace)
        if taken.dtype != jnp.float32:
            raise TypeError(f"float32 only, not {taken.dtype}")
        return jnp.sin(taken)

    src = jax.random.normal(jax.random.key(1), (3, 2), jnp.float32)
    with jax.numpy_dtype_promotion("standard"):  # (strict keeps fn out of float64 altogether)
        r = gv.check(fn, src)
        assert r.ok and "TypeError on float64 inputs" in str(r), r
        assert jnp.asarray(index).dtype == jnp.int32


def test_with_float32_differences_only_a_check_says_what_it_resolves_and_full_finds_the_element():
    """Under strict promotion with x64 off fn stays in float32, so FD does:
    one flipped element among 100 is below the float32 noise of a random
    direction's sum, and the report says so; full=True names the element."""
    from tests._helpers import flipped_tanh_bias

    rng = np.random.default_rng(11)
    x = jnp.asarray(rng.standard_normal((10, 10)).astype(np.float32))
    b = jnp.asarray(rng.standard_normal(10).astype(np.float32))
    fn = flipped_tanh_bias("jax", 10, 37)
    with jax.numpy_dtype_promotion("strict"):
        directional = gv.check(fn, x, b)
        full = gv.check(fn, x, b, full=True)
    assert directional.oracle_dtype == "float32"
    assert any("resolved only above the float32 noise" in n and "full=True" in n for n in directional.notes)
    assert not full.ok and full.by_kind(gv.Kind.MISMATCH)[0].input_index == (3, 7)
    assert not any("resolved only above" in n for n in full.notes)
