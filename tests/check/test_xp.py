"""The array helpers the stages share, on numpy and torch: the same answers
on either, whichever path (a fast one, or the general one) gives them."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gradverify._check import xp
from gradverify._check.probes import _step_scales


@pytest.mark.parametrize("wrap", [np.asarray, torch.from_numpy], ids=["numpy", "torch"])
def test_equal_tells_nan_apart_from_a_number_and_holds_nan_equal_to_nan(wrap):
    a = np.linspace(-1.0, 1.0, 1001)
    assert xp.equal(wrap(a), wrap(a.copy()))
    moved = a.copy()
    moved[500] = np.nextafter(moved[500], 2.0)
    assert not xp.equal(wrap(a), wrap(moved))
    with_nan = a.copy()
    with_nan[7] = np.nan
    assert xp.equal(wrap(with_nan), wrap(with_nan.copy()))  # (NaN at one place in both: equal)
    assert not xp.equal(wrap(a), wrap(with_nan))
    elsewhere = a.copy()
    elsewhere[8] = np.nan
    assert not xp.equal(wrap(with_nan), wrap(elsewhere))
    zeros = np.zeros(4)
    assert xp.equal(wrap(zeros), wrap(-zeros))  # (a signed zero is the same value)
    assert not xp.equal(wrap(a), wrap(a[:-1]))


@pytest.mark.parametrize("wrap", [np.asarray, torch.from_numpy], ids=["numpy", "torch"])
def test_step_scales_of_several_arguments_are_each_arguments_own_bit_for_bit(wrap):
    rng = np.random.default_rng(3)
    parts = [rng.standard_normal(1000) * 1e-3, rng.standard_normal(7) * 50.0, np.array([0.0, -0.0, np.nan, 1e-300])]
    floors = [0.25, 1e-3, 1e-290]
    got = np.asarray(_step_scales([wrap(p.copy()) for p in parts], floors))
    want = np.concatenate([np.maximum(np.abs(p), f) for p, f in zip(parts, floors)])
    assert got.tobytes() == want.tobytes()
    one = np.asarray(_step_scales([wrap(parts[0].copy())], floors[:1]))
    assert one.tobytes() == want[:1000].tobytes()


def test_ad_bounds_of_a_jacobians_columns_at_once_are_each_columns_own_bit_for_bit():
    from gradverify._check import tolerance as tol

    rng = np.random.default_rng(5)
    J = rng.standard_normal((6, 9)) * np.logspace(-300, 300, 9)
    J[2, 4] = 0.0
    scales = rng.uniform(0.5, 3.0, 6) * 1e3
    rows = tol.ad_bound(J, "float64", None, None, scales[:, None])
    for b in range(6):
        assert rows[b].tobytes() == tol.ad_bound(J[b], "float64", None, None, scales[b]).tobytes()


def test_a_full_jacobians_column_tops_are_each_columns_own_ratio(monkeypatch):
    import gradverify as gv
    from gradverify._check import judge

    seen = []
    column_tops = judge.Judge._column_tops

    def checked(self):
        column_tops(self)
        assert self.tops, "no column's top was worked out at once"
        for b, (ref, top) in self.tops.items():
            ratio, _ = self.jvp_ratio(b, ref)
            assert top == xp.absmax(ratio) or (np.isnan(top) and np.isnan(xp.absmax(ratio)))
            seen.append(b)

    monkeypatch.setattr(judge.Judge, "_column_tops", checked)
    x = torch.linspace(-2.0, 2.0, 12, dtype=torch.float64).reshape(3, 4)
    r = gv.check(lambda x: torch.tanh(x) * x.sum(), x)
    assert r.ok and sorted(seen) == list(range(12))


def test_equal_holds_object_arrays_that_are_the_same_equal():
    a = np.array([1, "two", 3.0], dtype=object)
    assert xp.equal(a, a.copy())  # (no NaN test is needed, and none can be made, of the same values)


def test_a_wide_full_jacobian_tries_its_columns_bounds_at_once_only_once(monkeypatch):
    import gradverify as gv
    from gradverify._check import bounds

    calls = []
    columns = bounds.Bounds._columns
    monkeypatch.setattr(bounds.Bounds, "_columns", lambda self: calls.append(1) or columns(self))
    x = torch.linspace(-2.0, 2.0, 260, dtype=torch.float64)  # (260 x 260 elements: more than KEEP_BOUNDS)
    assert gv.check(torch.tanh, x, full=True).ok
    assert len(calls) == 1
