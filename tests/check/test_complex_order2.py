"""Order 2 of a function with complex output: the second-order findings
index the rule's output (the real view of the derivative), not fn's, so the
complex view must not read their last index as a real/imaginary part."""

from __future__ import annotations

import numpy as np
import pytest

import gradverify as gv

jax = pytest.importorskip("jax")


def test_a_second_order_finding_of_a_complex_function_keeps_its_index():
    jnp = jax.numpy
    x = jnp.asarray(np.array([[1 + 1j, 0.5 - 2j, 2.0, 0.0]], dtype=np.complex64))
    y = jnp.asarray(np.array([[2.0 + 0.5j, 1.5, 1.0, -0.5]], dtype=np.complex64))  # (0 ** -0.5: inf)
    r = gv.check(jax.lax.pow, x, y, order=2)  # (an index of 6 there raised KeyError)
    first = [f for f in r.findings if f.kind == gv.Kind.NONFINITE_OUTPUT and f.order == 1]
    second = [f for f in r.findings if f.kind == gv.Kind.NONFINITE_OUTPUT and f.order == 2]
    assert [f.output_index for f in first] == [(0, 3)]  # fn's own element, its part named
    assert (6,) in [f.output_index for f in second]  # (in the real view's terms, as computed)
