"""Rules that subtract their inputs before exponentiating (logsumexp,
softmax, log_softmax) at inputs of 1e2 to 1e7: the derivative carries
u |x| of relative rounding, which forward and reverse mode round
differently. Right rules pass at every magnitude, real and complex; a
rule off by more than that rounding is still caught."""

from __future__ import annotations

import numpy as np
import pytest

import gradverify as gv

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.slow

OPS = {
    "logsumexp": lambda t: torch.logsumexp(t, -1, keepdim=True),
    "softmax": lambda t: torch.softmax(t, -1),
    "log_softmax": lambda t: torch.log_softmax(t, -1),
}
MAGNITUDES = (1e2, 1e4, 1e6, 1e7)


def _points(dtype, seed=0):
    rng = np.random.default_rng(seed)
    for m in MAGNITUDES:
        for shape in ((5, 5), (8, 12), (6, 40)):  # a full Jacobian, and directional checks
            x = m * (1 + rng.random(shape))  # every element in [m, 2m], as op_db's large samples
            if dtype == torch.complex128:
                x = x + 1j * m * (1 + rng.random(shape))
            yield m, torch.tensor(x, dtype=dtype)


@pytest.mark.parametrize("name", list(OPS))
def test_right_rules_pass_at_large_inputs(name):
    dtypes = (torch.float64, torch.complex128) if name == "logsumexp" else (torch.float64,)
    for dtype in dtypes:
        for m, x in _points(dtype):
            r = gv.check(OPS[name], x)
            assert r.ok, f"{name} {dtype} at |x| ~ {m:g}:\n{r}"
            assert not r.by_kind(gv.Kind.MISMATCH), str(r)


class _Softmax(torch.autograd.Function):
    """softmax whose backward is off by a relative 1e-5 in one row: far
    beyond u |x| = 2e-10 at inputs of 1e6, far below gradcheck's rtol."""

    @staticmethod
    def forward(x):
        return torch.softmax(x, -1)

    @staticmethod
    def setup_context(ctx, inputs, out):
        ctx.save_for_backward(out)
        ctx.save_for_forward(out)

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        gx = y * (g - (g * y).sum(-1, keepdim=True))
        gx[2] *= 1 + 1e-5
        return gx

    @staticmethod
    def jvp(ctx, t):
        (y,) = ctx.saved_tensors
        return y * (t - (t * y).sum(-1, keepdim=True))


def test_a_rule_off_by_more_than_the_rounding_is_caught():
    """At 1e6 finite differences resolve no better than 1e-1 (fn's values carry
    u |x| of noise): only the adjoint identity sees a 1e-5 error. Along random
    directions it is an error; on a full Jacobian's element, below FD's
    resolution, a mismatch warning (rounding or a bug below it)."""
    rng = np.random.default_rng(1)
    for m in MAGNITUDES:
        for shape in ((5, 5), (8, 12), (6, 40)):
            # rows of spread 2 around m: weights that are not one-hot at any magnitude
            x = torch.tensor(m + np.linspace(0, 2, shape[-1]) + 0.1 * rng.standard_normal(shape))
            assert gv.check(OPS["softmax"], x).ok
            r = gv.check(_Softmax.apply, x)
            if shape != (5, 5):
                assert not r.ok, f"|x| ~ {m:g}:\n{r}"
                assert all(f.kind == gv.Kind.MISMATCH for f in r.errors), str(r)
                # the report renders (a projection's JVP-vs-VJP finding holds the VJP and its reference)
                assert "[error] mismatch" in str(r)
            else:
                assert r.by_kind(gv.Kind.MISMATCH), f"|x| ~ {m:g}:\n{r}"
