"""Forward against reverse mode where finite differences cannot resolve
their disagreement, on a full Jacobian (4 or 5 elements) and along random
directions (300): rounding of a rule whose terms cancel is a warning, a
wrong rule an error - each mode is allowed the larger of half its dtype's
digits and what fn's own values carry there (measured), no more."""

from __future__ import annotations

import numpy as np
import pytest

import gradverify as gv


def _tanh_gelu_rule(reverse: str):
    """numpy's tanh-form gelu, cast to its input's dtype, with right forward
    rule and a reverse rule that is right, negated or twice the slope."""
    c = np.sqrt(2 / np.pi)

    def d(x):
        t = np.tanh(c * (x + 0.044715 * x**3))
        return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * 0.044715 * x**2)

    scale = {"right": 1.0, "negated": -1.0, "doubled": 2.0}[reverse]
    return gv.Rule(
        lambda x: (0.5 * x * (1 + np.tanh(c * (x + 0.044715 * x**3)))).astype(x.dtype),
        jvp=lambda p, t: (d(p[0]) * t[0]).astype(p[0].dtype),
        vjp=lambda p, g: ((scale * d(p[0]) * g).astype(p[0].dtype),),
    )


@pytest.mark.parametrize("n", [4, 300])
@pytest.mark.parametrize("reverse", ["negated", "doubled"])
def test_a_reverse_rule_wrong_where_fd_decides_nothing_fails_where_fn_keeps_a_digit(reverse, n):
    """gelu in float32 at x ~ -7: FD decides nothing, but fn's float64
    values keep about one digit there (their grid is a sixth of their size),
    and a reverse rule negated or doubled is off by more than that: an error
    of the two modes. The right rule passes."""
    x = (-7.0 + np.random.default_rng(1).uniform(-0.01, 0.01, n)).astype(np.float32)
    r = gv.check(_tanh_gelu_rule(reverse), x)
    assert r.strategy.startswith("full" if n == 4 else "directional"), str(r)
    assert not r.ok and r.by_kind(gv.Kind.FD_UNRELIABLE), str(r)
    (f,) = r.errors
    assert f.pair == ("JVP", "VJP") and set(f.values) == {"JVP", "VJP"}, str(r)
    assert gv.check(_tanh_gelu_rule("right"), x).ok


@pytest.mark.parametrize("n", [5, 300])
@pytest.mark.parametrize("mode", ["forward", "reverse"])
def test_a_wrong_constant_fails_where_fd_cannot_resolve_it(mode, n):
    """G / r with one mode's G truncated (6.67e-11 for 6.6743e-11, 6e-4
    relative): below what FD resolves at values of 1e-10 against inputs of
    1, but fn computes its values to full precision: no rounding - an
    error, whichever mode carries it."""
    G, truncated = 6.6743e-11, 6.67e-11
    g_fwd, g_rev = (truncated, G) if mode == "forward" else (G, truncated)
    x = np.random.default_rng(0).uniform(0.5, 1.5, n)
    rule = gv.Rule(
        lambda r: G / r, jvp=lambda p, t: -g_fwd / p[0] ** 2 * t[0], vjp=lambda p, g: (-g_rev / p[0] ** 2 * g,)
    )
    r = gv.check(rule, x)
    assert not r.ok, str(r)
    assert all(f.kind == gv.Kind.MISMATCH for f in r.errors), str(r)
