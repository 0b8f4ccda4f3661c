"""fn in float32 and in float64 may be two functions: eigenvalues returned in
another order, a sort's ties broken otherwise. Then the float32 derivatives
are not compared with float64's where the outputs differ (a precision
warning, inconclusive there); a float32 code path whose *derivative* is
wrong while its values agree is still an error."""

from __future__ import annotations

import numpy as np
import pytest

import gradverify as gv

pytestmark = pytest.mark.slow

jax = pytest.importorskip("jax")
jnp = jax.numpy


def test_jax_eigvals_in_float32_over_random_matrices_is_never_a_mismatch():
    rng = np.random.default_rng(0)
    reordered = 0
    with jax.enable_x64(True):
        for k in range(60):
            a = jnp.asarray(rng.standard_normal((5, 5)), jnp.float32)
            r = gv.check(jnp.linalg.eigvals, a, seed=k)
            assert r.ok and not r.by_kind(gv.Kind.MISMATCH), str(r)
            said = [f for f in r.by_kind(gv.Kind.PRECISION) if "different function" in f.message]
            reordered += bool(said)
    assert reordered >= 1  # (about 1 in 20 at this size: the scan meets the case it is about)


def test_a_float32_code_path_with_a_wrong_derivative_is_still_caught():
    with jax.enable_x64(True):

        @jax.custom_jvp
        def f(x):
            return jnp.sin(x)

        @f.defjvp
        def f_jvp(primals, tangents):
            (x,), (t,) = primals, tangents
            wrong = 1.5 if x.dtype == jnp.float32 else 1.0  # (float32's rule alone is wrong)
            return jnp.sin(x), wrong * jnp.cos(x) * t

        r = gv.check(f, jnp.linspace(-1, 1, 5, dtype=jnp.float32))
        assert not r.ok and r.errors[0].pair == ("JVP", "JVP float64"), str(r)
