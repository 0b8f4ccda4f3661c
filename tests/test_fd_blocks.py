"""The FD estimate works block by block (so its passes stay in cache on large
vectors); element for element it does the same operations in the same order,
so its result does not depend on the block size - bit for bit, non-finite
stencil values and per-element tolerances included."""

from __future__ import annotations

import numpy as np
import pytest

from gradverify import _fd


def stencil(rng, shape, bad):
    arrays = [rng.standard_normal(shape) * 10.0 ** rng.integers(-3, 3) for _ in _fd.OFFSETS]
    if bad:
        for a in arrays[:2]:
            a.reshape(-1)[rng.integers(0, a.size, 3)] = [np.nan, np.inf, -np.inf]
    return arrays


@pytest.mark.parametrize("shape", [(1,), (7,), (3, 4), (2, 1000)])
@pytest.mark.parametrize("bad", [False, True])
@pytest.mark.parametrize("per_element_tolerance", [False, True])
def test_the_estimate_does_not_depend_on_the_block_size(shape, bad, per_element_tolerance):
    rng = np.random.default_rng(hash((shape, bad, per_element_tolerance)) % 2**32)
    f0 = rng.standard_normal(shape)
    ad_tol = np.abs(rng.standard_normal(shape)) * 1e-6 if per_element_tolerance else 1e-9
    s = _fd.Stencil(1e-3, tuple(stencil(rng, shape, bad)))
    whole = _fd.estimate(s, f0, 1.1e-16, ad_tol, None)
    assert whole.value.shape == shape and whole.kink.dtype == bool
    if bad:
        assert not whole.finite.all() and whole.kink[~whole.finite].all()
    for chunk in (1, 3, 64):
        blocks = _fd.estimate(s, f0, 1.1e-16, ad_tol, None, chunk=chunk)
        for name in ("value", "err", "kink", "finite", "noise", "eps_f"):
            a, b = getattr(whole, name), getattr(blocks, name)
            assert a.shape == b.shape and np.array_equal(a, b, equal_nan=True), (name, chunk)


def test_a_kink_is_flagged_in_whichever_block_it_falls():
    """|x| sampled along a direction: the element at 0 is the only kink."""
    n, h = 1000, 1e-3
    x = np.linspace(-1, 1, n)
    x[617] = 0.0
    f = np.abs
    s = _fd.evaluate_level(lambda t: f(x + t), h)
    for chunk in (1 << 15, 100, 7):
        est = _fd.estimate(s, f(x), 1.1e-16, 1e-12, None, chunk=chunk)
        assert np.flatnonzero(est.kink).tolist() == [617]
