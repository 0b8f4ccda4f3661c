"""Helpers the tests of the finite differences share."""

from __future__ import annotations

import numpy as np

from gradverify._check import fd


def compare_column_references(x, w, ad_tol, fn, case=None, moved=None):
    n = tuple(x.shape)[0]

    def F(t):
        with np.errstate(over="ignore", invalid="ignore"):
            return fn(x + t * w)

    f0, h = F(0.0), 2.0**-16
    problem = fd.Problem.of(F, f0, h, 1e-12, 2.0**-53, ad_tol)
    refs = [fd.reference(problem, sparse=sparse) for sparse in (False, True)]
    whole, support = refs
    for name in ("value", "err", "status"):
        a, b = (np.asarray(getattr(r, name)) for r in refs)
        assert a.dtype == b.dtype and np.array_equal(a, b, equal_nan=True), name
        if a.dtype == np.float64:  # (bit for bit: a zero's sign too)
            assert np.array_equal(a.view(np.int64), b.view(np.int64)), name
    assert whole.all_smooth == support.all_smooth and whole.typical == support.typical
    assert whole.eps_f == support.eps_f
    if case is None:
        return
    status = np.asarray(whole.status)
    unmoved = np.setdiff1d(np.arange(n), moved)
    if case == "smooth":
        assert (status == fd.SMOOTH).all()
    if case == "kinks":
        assert (status[moved[:5]] == fd.KINK).all()
    if case == "not finite":
        assert status[11] == fd.UNRELIABLE and (status[moved[:3]] != fd.SMOOTH).all()
        unmoved = unmoved[unmoved != 11]
    assert (status[unmoved] == fd.SMOOTH).all()
