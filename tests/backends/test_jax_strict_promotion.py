"""Under ``jax_numpy_dtype_promotion="strict"`` no implicit promotion is
allowed: every concatenation and arithmetic of mixed-precision values the
check makes itself (a derivative's parts, order 2's cotangents) casts
explicitly, so a mixed-dtype check runs at any order."""

from __future__ import annotations

import itertools

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
