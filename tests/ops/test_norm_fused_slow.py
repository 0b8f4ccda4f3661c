"""The fused normalization rules on jax, compiled: the same values, JVPs and
VJPs as the reference."""

from __future__ import annotations

import numpy as np
import pytest

import gradverify as gv
from gradverify import ops
from gradverify.ops import _norm_fused

from .._helpers import make, precise
from ._helpers import CASES, data, random_like

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("case", sorted(CASES))
def test_jax_fused_jvp_and_vjp_equal_the_reference(case):
    import jax

    x, w, b = data((3, 4, 5))
    fn = CASES[case][0]
    with precise("jax"):
        args = tuple(make("jax", a) for a in (x, w, b))
        tangents = tuple(make("jax", random_like(a.shape, k)) for k, a in enumerate(args))
        outs = {}
        for impl in ("reference", "fused"):
            f = jax.jit(lambda x, w, b, impl=impl: fn(x, w, b, impl))
            y, ty = jax.jvp(f, args, tangents)
            _, pullback = jax.vjp(f, *args)
            outs[impl] = (y, ty, pullback(make("jax", random_like(y.shape, 9))))
    (y0, t0, c0), (y1, t1, c1) = outs["reference"], outs["fused"]
    np.testing.assert_allclose(np.asarray(y1), np.asarray(y0), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(np.asarray(t1), np.asarray(t0), rtol=1e-11, atol=1e-11)
    for a, b_ in zip(c1, c0):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b_), rtol=1e-11, atol=1e-11)


def test_a_wrong_rule_is_caught_on_every_backend(monkeypatch):
    """Drop the mean-subtraction from the normalization's derivative (a classic
    hand-written-rule bug): gv.check fails on numpy, torch (forward mode) and jax."""

    def uncentred(xp, xhat, rstd, t, spec):
        ts = xp.reshape(xp.astype(t, rstd.dtype), spec.group) if spec.group else xp.astype(t, rstd.dtype)
        xh = xp.reshape(xhat, ts.shape)
        out = rstd * (ts - xh * xp.mean(xh * ts, axis=spec.axes, keepdims=True))
        return xp.reshape(out, tuple(t.shape))

    x, w, b = data((3, 4, 5))
    right = {
        "numpy": gv.check(ops.norm_rule("group_norm", x, 2, w, b), x, w, b),
        **{
            k: gv.check(lambda *a: ops.group_norm(a[0], 2, *a[1:], impl="fused"), *(make(k, v) for v in (x, w, b)))
            for k in ("torch", "jax")
        },
    }
    assert all(r.ok for r in right.values()), right
    monkeypatch.setattr(_norm_fused, "project", uncentred)
    _norm_fused.jax_fused.cache_clear()
    try:
        wrong = {
            "numpy": gv.check(ops.norm_rule("group_norm", x, 2, w, b), x, w, b),
            **{
                k: gv.check(lambda *a: ops.group_norm(a[0], 2, *a[1:], impl="fused"), *(make(k, v) for v in (x, w, b)))
                for k in ("torch", "jax")
            },
        }
    finally:
        _norm_fused.jax_fused.cache_clear()
    for backend, r in wrong.items():
        assert not r.ok, backend
        assert r.errors[0].argument == 0, (backend, str(r))
