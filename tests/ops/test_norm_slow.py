"""Normalization references and fused rules on torch and jax: gradients
verified by gv.check to order 2 on cases that make the usual bugs visible."""

from __future__ import annotations

import pytest

import gradverify as gv

from .._helpers import make
from ._helpers import CASES, IMPLS, data

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("backend", ["torch", "jax"])
def test_gradients_verified_order_2(case, backend, impl):
    x, w, b = data((3, 4, 5))
    fn = CASES[case][0]
    r = gv.check(lambda x, w, b: fn(x, w, b, impl), make(backend, x), make(backend, w), make(backend, b), order=2)
    assert r.ok, str(r)
    if impl == "fused" and backend == "torch":  # torch cannot nest its forward mode: said, not hidden
        assert [f.kind for f in r.findings] == [gv.Kind.MODE_UNAVAILABLE]
