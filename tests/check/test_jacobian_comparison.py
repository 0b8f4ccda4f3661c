"""A full Jacobian's elements are compared all at once; the result is the
elementwise definition's, read one (column, row) at a time: each element's
excess over its bound and its ratio, the count of elements over, the worst
one (the first of the largest ratios in column-major order) and the
closeness - on random small Jacobians with NaN, infinities, ties, unusable
elements and fewer references than columns."""

from __future__ import annotations

import dataclasses
import types

import numpy as np

from gradverify._check import fd
from gradverify._check.compare import Comparisons
from gradverify._check.findings import Closeness
from gradverify._check.worst import JacobianWorst


def _elementwise(c) -> JacobianWorst | None:
    """The definition, one element at a time."""
    m, n = c.primal.values.size, c.probes.flat.n
    J = np.stack(c.modes.vjps) if c.modes.vjps else np.zeros((0, n))
    rows = [c.bounds.of_vjp(J[i]) for i in range(m)]
    worst, count = None, 0
    for j, ref in enumerate(c.oracle.refs):
        s = float(c.probes.scale[j])
        usable = np.broadcast_to(c.oracle.usable(ref), (m,))
        for i in range(m):
            if not usable[i]:
                continue
            ad, t = J[i, j], rows[i][j]
            over = max((ref.value[i] - ref.err[i]) / s - ad, ad - (ref.value[i] + ref.err[i]) / s) - t
            ratio = abs(ad - ref.value[i] / s) / (t + ref.err[i] / s + 1e-300)
            c.closeness.note(ratio)
            if over > 0:
                count += 1
                if worst is None or ratio > worst[0]:
                    kink = ref.status[i] == fd.KINK
                    worst = (ratio, i, j, ad, ref.value[i] / s, t + ref.err[i] / s, kink)
    return None if worst is None else JacobianWorst(*worst, count)


def _case(rng: np.random.Generator):
    def draw(shape):
        special = rng.choice([0.0, 1.0, -1.0, 0.5, 2.0, np.nan, np.inf, -np.inf], size=shape)
        return np.where(rng.random(shape) < 0.5, special, rng.normal(size=shape))

    m, n = int(rng.integers(0, 4)), int(rng.integers(1, 4))
    J = [draw(n) for _ in range(m)]
    bounds = np.abs(draw((m, n))) if m else np.zeros((0, n))
    refs = [
        types.SimpleNamespace(
            value=draw(m),
            err=np.abs(draw(m)),
            status=rng.integers(0, 4, m),
            all_smooth=rng.random() < 0.3,
            some=rng.random(m) < 0.7,
        )
        for _ in range(int(rng.integers(0, n + 1)))
    ]
    scale = np.where(rng.random(n) < 0.5, 1.0, rng.uniform(0.1, 3.0, n))

    def of_vjp(row):  # (the rows come as np.stack's copies: found by value)
        i = next(k for k, original in enumerate(J) if np.array_equal(original, row, equal_nan=True))
        return bounds[i]

    def of_vjp_rows(rows):  # (each row's bound as of_vjp gives it)
        return np.stack([of_vjp(r) for r in rows]) if len(rows) else bounds

    def comparisons():
        return types.SimpleNamespace(
            primal=types.SimpleNamespace(values=np.zeros(m)),
            probes=types.SimpleNamespace(flat=types.SimpleNamespace(n=n), scale=scale),
            modes=types.SimpleNamespace(vjps=J),
            bounds=types.SimpleNamespace(of_vjp=of_vjp, of_vjp_rows=of_vjp_rows),
            oracle=types.SimpleNamespace(refs=refs, usable=lambda r: True if r.all_smooth else r.some),
            closeness=Closeness(),
            beyond_suite=lambda over, *_: over,  # (no suite's tolerance: gradverify's bound alone)
        )

    return comparisons


def _fields(w: JacobianWorst | None):
    if w is None:
        return None
    return tuple(repr(float(v)) if isinstance(v, float) else v for v in dataclasses.astuple(w))


def test_the_jacobian_compared_at_once_is_the_elementwise_definition():
    rng = np.random.default_rng(0)
    flagged = 0
    for _ in range(2000):
        comparisons = _case(rng)
        one, at_once = comparisons(), comparisons()
        with np.errstate(all="ignore"):  # (inf - inf in the definition: NaN, as at once)
            expected = _elementwise(one)
        got = Comparisons._worst_jacobian_element(at_once)
        assert _fields(got) == _fields(expected)
        assert at_once.closeness.worst == one.closeness.worst
        flagged += expected is not None
    assert flagged > 200  # (the cases do reach the worst-element path)


def test_the_rows_bounds_at_once_are_each_rows_own(monkeypatch):
    """Bounds.of_vjp_rows is of_vjp of each row, bit for bit, in real checks:
    arguments of two dtypes, low precision, a caller's rtol and atol."""
    import torch

    import gradverify as gv
    from gradverify._check.bounds import Bounds

    at_once = Bounds.of_vjp_rows
    seen = []

    def both(self, J):
        out = at_once(self, J)
        rows = np.stack([np.asarray(self.of_vjp(J[i])) for i in range(J.shape[0])])
        assert np.array_equal(out, rows, equal_nan=True)
        seen.append(J.shape)
        return out

    monkeypatch.setattr(Bounds, "of_vjp_rows", both)
    rng = np.random.default_rng(1)
    x, b = rng.standard_normal((3, 4)), rng.standard_normal(4)
    for dx, db, opts in (
        (torch.float64, torch.float32, {}),
        (torch.float32, torch.float32, {}),
        (torch.float64, torch.float64, {"rtol": 1e-9, "atol": 1e-12}),
    ):
        r = gv.check(lambda x, b: torch.tanh(x * b), torch.tensor(x, dtype=dx), torch.tensor(b, dtype=db), **opts)
        assert r.ok, str(r)
    assert len(seen) >= 3
