"""order=2 checks the derivatives of the JVP and VJP themselves."""

from __future__ import annotations

import numpy as np
import pytest

import gradverify as gv

from ._helpers import ORDER2_X


def torch_tanh(detach_in_backward: bool):
    import torch

    class Tanh(torch.autograd.Function):
        @staticmethod
        def forward(x):
            return torch.tanh(x)

        @staticmethod
        def setup_context(ctx, inputs, out):
            ctx.save_for_backward(out)
            ctx.save_for_forward(out)

        @staticmethod
        def backward(ctx, g):
            (y,) = ctx.saved_tensors
            y = y.detach() if detach_in_backward else y  # the bug: a constant derivative
            return g * (1 - y * y)

        @staticmethod
        def jvp(ctx, t):
            (y,) = ctx.saved_tensors
            return (1 - y * y) * t

    return Tanh.apply


def test_torch_second_order_bug_caught_only_at_order_2():
    import torch

    x = torch.tensor(ORDER2_X)
    assert gv.check(torch_tanh(True), x).ok  # first derivatives are right
    r = gv.check(torch_tanh(True), x, order=2)
    assert not r.ok
    pairs = {f.pair for f in r.by_kind(gv.Kind.MISMATCH)}
    assert ("JVP of VJP", "FD") in pairs and ("VJP of VJP", "FD") in pairs
    f = r.by_kind(gv.Kind.MISMATCH)[0]
    assert f.order == 2 and f.message.startswith("derivative of the VJP")
    # d/dx of v (1 - tanh^2 x) = -2 v tanh x sech^2 x, v the cotangent drawn for order 2
    from gradverify._check.probes import random_directions

    v = random_directions(np.random.default_rng([0, 2]), np.size(ORDER2_X)).reshape(np.shape(ORDER2_X))
    t = np.tanh(ORDER2_X[f.input_index])
    assert f.values["FD"] == pytest.approx(-2 * v[f.output_index] * t * (1 - t * t), rel=1e-6)


def test_torch_correct_second_order_passes():
    import torch

    r = gv.check(torch_tanh(False), torch.tensor(ORDER2_X), order=2)
    assert r.ok, str(r)
    assert r.modes["JVP of VJP"] == "checked" and r.modes["VJP of VJP"] == "checked"
    # torch cannot nest forward mode: said, not hidden.
    assert r.modes["JVP of JVP"] == "unavailable"


def test_numpy_rule_second_order_checks_what_exists():
    rule = gv.Rule(
        np.tanh, jvp=lambda p, t: (1 - np.tanh(p[0]) ** 2) * t[0], vjp=lambda p, g: ((1 - np.tanh(p[0]) ** 2) * g,)
    )
    r = gv.check(rule, ORDER2_X, order=2)
    assert r.ok
    # The rules are numpy code: their own derivatives have no modes, and the report says so.
    assert any(f.order == 2 and f.kind == gv.Kind.MODE_UNAVAILABLE for f in r.findings)


@pytest.mark.parametrize("name", ["relu", "leakyrelu", "hardtanh"])
def test_torch_second_order_of_a_piecewise_linear_function_is_zero_not_a_crash(name):
    """torch hands back the second derivative of a piecewise-linear function
    as an efficient zero tensor (no storage): it is read as zeros, and order 2
    passes off the kinks."""
    import torch

    from gradverify import ops

    rng = np.random.default_rng(3)
    x, b = torch.tensor(2.5 * rng.standard_normal((3, 4))), torch.tensor(rng.standard_normal(4))
    r = gv.check(lambda x, b: ops.bias_act(name, x, b), x, b, order=2)
    assert r.ok, str(r)


def test_order_2_that_could_not_be_checked_says_so_in_its_verdict():
    """A numpy gv.Rule: nothing differentiates its numpy rules. The check
    passes order 1 and says order 2 was not checked, with the reason, not a
    hint to wrap what is already a gv.Rule."""
    import numpy as np

    import gradverify as gv

    rule = gv.Rule(np.tanh, vjp=lambda args, v: (v * (1 - np.tanh(args[0]) ** 2),))
    r = gv.check(rule, np.array([0.3, -1.2]), order=2)
    assert r.ok and r.second_order_checked is False
    first = str(r).splitlines()[0]
    assert first.startswith("gradverify PASSED (VJP only; JVP unavailable) (order 2 not checked"), first
    assert "wrap the function as gv.Rule" not in str(r)
    assert any("numpy has no automatic differentiation" in f.message for f in r.by_kind(gv.Kind.MODE_UNAVAILABLE))
    assert gv.check(rule, np.array([0.3, -1.2])).second_order_checked is None  # order 1: not asked


def test_order_2_checked_says_nothing_more():
    import torch

    import gradverify as gv

    r = gv.check(torch.tanh, torch.tensor([0.3, -1.2], dtype=torch.float64), order=2)
    assert r.ok and r.second_order_checked is True
    assert str(r).splitlines()[0].startswith("gradverify PASSED: "), str(r)


def torch_softmax(detach_in_backward: bool):
    """softmax with its backward; the bug holds y constant there, so the
    backward's own derivative (order 2) lacks every term through y."""
    import torch

    class Softmax(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            y = torch.softmax(x, 0)
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx, g):
            (y,) = ctx.saved_tensors
            y = y.detach() if detach_in_backward else y
            return y * (g - (g * y).sum())

    return Softmax.apply


@pytest.mark.parametrize("seed", range(8))
def test_order_2_on_outputs_that_sum_to_one_is_decided_on_every_seed(seed):
    """softmax's outputs sum to 1, so J(x)^T v vanishes for a cotangent v
    constant on them: with signs alone (seven of these eight seeds draw one
    for two outputs) the derivative of the VJP was 0 against 0, and the bug
    passed. Random magnitudes leave no seed where it can."""
    torch = pytest.importorskip("torch")
    x = torch.tensor([0.3, -0.4], dtype=torch.float64)
    wrong = gv.check(torch_softmax(True), x, order=2, seed=seed)
    assert not wrong.ok and wrong.errors[0].pair == ("VJP of VJP", "FD") and wrong.errors[0].order == 2, str(wrong)
    right = gv.check(torch_softmax(False), x, order=2, seed=seed)
    assert right.ok and right.modes["VJP of VJP"] == "checked", str(right)
    assert not right.by_kind(gv.Kind.FD_UNRELIABLE), str(right)  # (a derivative that is not 0 to decide)
