"""The FD reference along a basis vector, on every backend: worked out on the
outputs that move (and the non-finite ones) and filled in elsewhere, it is the
reference of the whole vector, element for element."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

from ._helpers import compare_column_references

pytestmark = pytest.mark.slow


CASES = ["smooth", "kinks", "not finite", "nothing moves", "signed zeros", "every output moves"]


@pytest.mark.parametrize("backend", ["numpy", "torch", "jax"])
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("streamed", [False, True], ids=["whole points", "points as they differ"])
def test_a_column_worked_on_its_support_is_the_whole_reference(backend, case, streamed, monkeypatch):
    """Along a basis vector most outputs do not move. The reference worked out
    on the ones that do (and the non-finite ones), and filled in elsewhere, is
    the reference of the whole vector: the same values, bounds and statuses,
    element for element - kinks sent down the ladder, a moved element whose
    stencil meets NaN or inf, an output that is inf at the point and stays
    there, a zero whose sign alone changes at some points, a column that
    moves every output. ``streamed``: each point of the stencil kept only
    where it differs from F(0) bit for bit, as large columns are (numpy and
    torch; jax keeps them whole)."""
    if streamed:  # (the module: fd's ``reference`` is its function)
        monkeypatch.setattr(importlib.import_module("gradverify._check.fd.reference"), "STREAM_COLUMN", 0)
    rng = np.random.default_rng(CASES.index(case))
    n = 3000
    x = rng.standard_normal(n) * 3.0
    count = {"nothing moves": 0, "every output moves": n}.get(case, 40)
    moved = np.sort(rng.choice(n, count, replace=False))
    w = np.zeros(n)
    w[moved] = rng.standard_normal(moved.size)
    if case in ("kinks", "signed zeros"):
        x[moved[:5]] = 0.0  # |x| at its kink; x (x > 0) is -0.0 on one side of 0, x on the other
    if case == "not finite":
        x[moved[:3]] = [1e308, -1e308, 1e308]  # sinh overflows along the steps
        x[11] = np.inf  # (unmoved, inf at the point and everywhere)
    name = {"kinks": "abs", "not finite": "sinh", "signed zeros": "relu"}.get(case, "sin")
    ad_tol = np.abs(rng.standard_normal(n)) * 1e-9
    # fn's values come from numpy on every backend (the same bits each time a
    # point is evaluated); the arrays the estimates work on are the backend's
    to = np.asarray
    if backend == "torch":
        to = pytest.importorskip("torch").from_numpy
    if backend == "jax":
        jax = pytest.importorskip("jax")
        to = jax.numpy.asarray
    fn = (lambda z: z * (z > 0)) if name == "relu" else getattr(np, name)

    def on_backend(z):
        return to(fn(z))

    if backend == "jax":
        with jax.enable_x64(True):
            compare_column_references(x, w, to(ad_tol), on_backend, case, moved)
        return
    compare_column_references(x, w, to(ad_tol), on_backend, case, moved)
