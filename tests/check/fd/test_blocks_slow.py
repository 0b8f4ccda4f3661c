"""The FD reference along a basis vector, on every backend: worked out on the
outputs that move (and the non-finite ones) and filled in elsewhere, it is the
reference of the whole vector, element for element."""

from __future__ import annotations

import numpy as np
import pytest

from ._helpers import compare_column_references

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("backend", ["numpy", "torch", "jax"])
@pytest.mark.parametrize("case", ["smooth", "kinks", "not finite", "nothing moves"])
def test_a_column_worked_on_its_support_is_the_whole_reference(backend, case):
    """Along a basis vector most outputs do not move. The reference worked out
    on the ones that do (and the non-finite ones), and filled in elsewhere, is
    the reference of the whole vector: the same values, bounds and statuses,
    element for element - kinks sent down the ladder, a moved element whose
    stencil meets NaN or inf, an output that is inf at the point and stays there."""
    rng = np.random.default_rng(["smooth", "kinks", "not finite", "nothing moves"].index(case))
    n = 3000
    x = rng.standard_normal(n) * 3.0
    moved = np.sort(rng.choice(n, 0 if case == "nothing moves" else 40, replace=False))
    w = np.zeros(n)
    w[moved] = rng.standard_normal(moved.size)
    if case == "kinks":
        x[moved[:5]] = 0.0  # |x| at its kink
    if case == "not finite":
        x[moved[:3]] = [1e308, -1e308, 1e308]  # sinh overflows along the steps
        x[11] = np.inf  # (unmoved, inf at the point and everywhere)
    name = {"smooth": "sin", "kinks": "abs", "not finite": "sinh", "nothing moves": "sin"}[case]
    ad_tol = np.abs(rng.standard_normal(n)) * 1e-9
    # fn's values come from numpy on every backend (the same bits each time a
    # point is evaluated); the arrays the estimates work on are the backend's
    to = np.asarray
    if backend == "torch":
        to = pytest.importorskip("torch").from_numpy
    if backend == "jax":
        jax = pytest.importorskip("jax")
        to = jax.numpy.asarray
    fn = getattr(np, name)

    def on_backend(z):
        return to(fn(z))

    if backend == "jax":
        with jax.enable_x64(True):
            compare_column_references(x, w, to(ad_tol), on_backend, case, moved)
        return
    compare_column_references(x, w, to(ad_tol), on_backend, case, moved)
