"""What the naive-strategy suite (test_naive_slow.py) found, each at its own
input: F.normalize of a row far below the step, hardswish beside its kink
with a tiny bias, tanhshrink on its own grid - correct functions pass or are
inconclusive, never a mismatch, and wrong rules there are still caught."""

from __future__ import annotations

import pytest

import gradverify as gv

from ._helpers import NAIVE_CASES


def test_normalize_of_a_row_far_below_the_step_is_inconclusive_not_convicted():
    """Found by this suite at 200 examples a seed: the second row's norm (1.6e-9)
    is far below the step (the input's rms, ~3.5, times ~2^-18). Down the
    ladder the one-sided derivatives wander (+-5e5 at the first level, -3e8
    near the floor), each within its own wide bound: that is no kink at the
    point, whose sides would be the same at every step, but a feature
    narrower than the step - inconclusive, not a mismatch."""
    import torch

    x = torch.tensor([[7.0, 1.1386441650594544e-09], [1.1386441650594544e-09] * 2], dtype=torch.float64)
    r = gv.check(lambda x: torch.nn.functional.normalize(x, dim=-1), x)
    assert r.ok, str(r)
    unreliable = r.by_kind(gv.Kind.FD_UNRELIABLE)
    assert unreliable and unreliable[0].input_index[0] == 1  # the tiny row, not the other
    assert not r.by_kind(gv.Kind.NONDIFFERENTIABLE)


def _scaled_normalize(row: int | None, factor: float):
    """F.normalize over the last axis whose backward multiplies row ``row``'s
    gradient (every row's where None) by ``factor``: a wrong rule at a chosen row."""
    import torch

    class Fn(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return torch.nn.functional.normalize(x, dim=-1)

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            with torch.enable_grad():
                xd = x.detach().requires_grad_()
                (grad,) = torch.autograd.grad(torch.nn.functional.normalize(xd, dim=-1), xd, g)
            if row is None:
                return grad * factor
            grad = grad.clone()
            grad[row] *= factor
            return grad

    return Fn.apply


#: Found by this suite (100-200 examples a seed): a row far smaller than the
#: step (the argument's rms times ~2^-18) beside rows of its size. AD is right
#: (e.g. -a b / r^3 = -0.0625 for d out[1, 1] / d x[1, 0] with a = 2^-24,
#: b = 2^-52); FD along the first step is flat, with a bound made of the
#: feature's own values. Finer steps straddle the row and are flagged until one
#: is below it: smooth there, it agrees with AD (the reference is replaced, or
#: where it moved beyond both bounds the element is inconclusive).
TINY_ROWS = [
    [[2.0, 2.0**-52], [2.0**-24, 2.0**-52]],
    [[3.0, 1.6457132038417764e-20], [5.960464477539063e-08, 1.6457132038417764e-20]],
    [[6.0, 6.0], [6.0, 6.0], [1.1386441650594544e-09, 8.189291950261085e-22]],
    [[5.0, 9.0], [9.0, 9.0], [1.1386441650594544e-09, 8.189291950261085e-22]],
    [[1.0, 2.0**-24, 2.0**-24], [2.0**-52, 2.0**-24, 2.0**-24]],
    [[7.0, 10.0, 2.0**-52], [2.0**-24, 2.0**-52, 2.0**-52]],
]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("rows", TINY_ROWS, ids=[f"rows{k}" for k in range(len(TINY_ROWS))])
def test_normalize_of_a_row_far_below_the_step_passes_and_a_wrong_rule_is_still_caught(rows, dtype):
    import torch

    x = torch.tensor(rows, dtype=getattr(torch, dtype))
    before = x.clone()
    r = gv.check(lambda x: torch.nn.functional.normalize(x, dim=-1), x)
    assert r.ok, str(r)
    assert torch.equal(x, before)
    bad = gv.check(_scaled_normalize(None, 1.01), x)  # 1% off everywhere: caught on the large rows
    assert not bad.ok
    assert bad.by_kind(gv.Kind.MISMATCH), str(bad)
    assert all(f.input_index[0] < len(rows) - 1 for f in bad.by_kind(gv.Kind.MISMATCH))


def test_a_wrong_rule_on_the_tiny_row_alone_is_caught_against_the_finer_step():
    """The tiny row's gradient doubled: the first step's flat estimate cannot
    tell, the finer one that replaces it can, and names that row."""
    import torch

    x = torch.tensor(TINY_ROWS[3], dtype=torch.float64)
    assert gv.check(_scaled_normalize(2, 1.0), x).ok
    bad = gv.check(_scaled_normalize(2, 2.0), x)
    assert not bad.ok
    assert {f.input_index for f in bad.by_kind(gv.Kind.MISMATCH)} <= {(2, 0), (2, 1)}, str(bad)
    assert any(f.output_index == (2, 1) for f in bad.by_kind(gv.Kind.MISMATCH)), str(bad)


def test_hardswish_beside_its_kink_with_a_tiny_bias_passes():
    """x + b = -3 + 1e-5 rounds at |x| = 3 whatever b's size: the column of b
    (step scale ~0.7) must bound fn's rounding at its terms, not at b."""
    import torch

    from gradverify import ops

    x, b = torch.tensor([-3.0, -3.0]), torch.tensor([-1.0, 9.999999747378752e-06])
    r = gv.check(lambda x, b: ops.bias_act("hardswish", x, b), x, b)
    assert r.ok, str(r)


def _scaled_tanhshrink(factor: float):
    """tanhshrink(x + b), z - tanh z, whose rules multiply its derivative
    tanh^2 z by ``factor`` (1: the right rule)."""
    import torch

    class Fn(torch.autograd.Function):
        @staticmethod
        def forward(x, b):
            return torch.nn.functional.tanhshrink(x + b)

        @staticmethod
        def setup_context(ctx, inputs, output):
            x, b = inputs
            ctx.save_for_backward(x, b)
            ctx.save_for_forward(x, b)

        @staticmethod
        def backward(ctx, g):
            x, b = ctx.saved_tensors
            d = g * factor * torch.tanh(x + b) ** 2
            return d, d

        @staticmethod
        def jvp(ctx, tx, tb):
            x, b = ctx.saved_tensors
            return factor * torch.tanh(x + b) ** 2 * (tx + tb)

    return Fn.apply


#: Found at small inputs (the naive suite, and a scan of x = s, b = s x
#: [0.3, 0, 1, 2, -0.5]): z - tanh z rounds both terms at u |z| and subtracts
#: exactly, so its values lie on a grid far coarser than u |F|, and rounding
#: to it can be linear across the stencil - no difference table sees it. The
#: grid is measured from the values themselves (the lowest bit of their
#: differences) and bounds the estimate.
TANHSHRINK_SMALL = [
    ("float64", [6.103515625e-05] * 5, [1e-05] * 5),
    ("float32", [0.00390625] * 5, [0.00390625, 0.0, 0.0, 0.0, 0.0]),
    ("float64", 0.0035064982365579657, None),
    ("float64", 0.00016577957054138935, None),
    ("float32", 2.7316220803097666e-05, None),
    ("float32", 1.3464823523303179e-05, None),
]


@pytest.mark.parametrize(("dtype", "x", "b"), TANHSHRINK_SMALL, ids=[f"case{k}" for k in range(len(TANHSHRINK_SMALL))])
def test_tanhshrink_on_its_own_grid_passes_and_a_wrong_rule_is_still_caught(dtype, x, b):
    import torch

    if b is None:  # x = s, b = s x [0.3, 0, 1, 2, -0.5]
        s = x
        x, b = [s] * 5, [0.3 * s, 0.0, s, 2 * s, -0.5 * s]
    t = getattr(torch, dtype)
    x, b = torch.tensor(x, dtype=t), torch.tensor(b, dtype=t)
    bundled = next(c.fn for c in NAIVE_CASES if c.label == "bias_act:tanhshrink (torch)")
    for fn in (bundled, _scaled_tanhshrink(1.0)):
        right = gv.check(fn, x, b)
        assert right.ok, str(right)
    # The grid is the resolution here: at z ~ 1e-5 a step moves F by a few
    # grid spacings, and FD may not decide (inconclusive, never verified);
    # where it decides, a rule 1.5x off is caught. Which of the two a point
    # gives depends on how this CPU's tanh kernel rounds (its vector width
    # changes the grid), and a disagreement is re-examined where an agreement
    # is not: the right rule's check being conclusive says nothing of the
    # wrong one's, so each is judged on its own.
    wrong = gv.check(_scaled_tanhshrink(1.5), x, b)
    assert not wrong.ok or wrong.by_kind(gv.Kind.FD_UNRELIABLE), str(wrong)
    if not wrong.by_kind(gv.Kind.FD_UNRELIABLE):
        assert wrong.by_kind(gv.Kind.MISMATCH), str(wrong)


def test_tanhshrink_of_a_subnormal_scale_bias_says_its_modes_rounding_as_a_warning():
    """Found by this suite: jax's tanhshrink(x + b) at x = 0, b = 1.9e-270.
    fn's value is exactly 0; its forward mode gives 0 and its reverse mode
    -1.9e-270 (tanh^2 z underflows on one path, not the other), far below
    what FD resolves. fn's value carries no digit there, so the disagreement
    can be rounding: a warning, not an error (a wrong constant where fn keeps
    its digits is one: test_adjoint.py)."""
    jax = pytest.importorskip("jax")
    (case,) = [c for c in NAIVE_CASES if c.label == "bias_act:tanhshrink (jax)"]
    with jax.enable_x64(True):
        x, b = jax.numpy.array([0.0]), jax.numpy.array([1.924230662502621e-270])
        r = gv.check(case.fn, x, b, seed=0)
    assert r.ok, str(r)
    (f,) = r.by_kind(gv.Kind.MISMATCH)
    assert f.level == gv.Level.WARNING and f.pair == ("JVP", "VJP"), str(r)
