"""A sweep's case records: a counterexample written into a record reads back
as the same arrays, bit for bit and dtype for dtype."""

from __future__ import annotations

import numpy as np


def test_a_complex_counterexample_round_trips_through_the_report_record():
    from gradverify import _io
    from gradverify._sweep import cases as _sweep

    a = np.array([0.1 + 1e-300j, -np.pi + np.e * 1j], dtype=np.complex128)
    b = a.astype(np.complex64)
    back = _sweep.arrays_of({"counterexample": [_io.exact(a), _io.exact(b)]})
    assert back[0].dtype == np.complex128 and np.array_equal(back[0], a)
    assert back[1].dtype == np.complex64 and np.array_equal(back[1], b)
