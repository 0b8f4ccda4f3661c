"""gv.check's options reach every stage whole, the checks of a second order
included."""

from __future__ import annotations

import numpy as np
import pytest

import gradverify as gv

torch = pytest.importorskip("torch")


def _x():
    return torch.from_numpy(np.random.default_rng(0).standard_normal((2, 3)))


def test_order_2_checks_the_derivatives_under_vmap_when_batched_is_asked():
    plain = gv.check(torch.tanh, _x(), order=2)
    batched = gv.check(torch.tanh, _x(), order=2, batched=True)
    assert plain.ok and batched.ok and batched.second_order_checked
    assert not any(k.startswith("batched") for k in plain.modes)
    assert batched.modes["batched VJP of VJP"] == "checked"
    assert batched.modes["batched VJP of JVP"] == "checked"
    # torch has no forward mode nested in forward mode: said in its words
    (nested,) = [f for f in batched.warnings if f.pair and f.pair[0] == "batched JVP of JVP"]
    assert batched.modes["batched JVP of JVP"] == "unavailable" and "Nested forward mode" in nested.message
    assert batched.evaluations["batched"] > plain.evaluations.get("batched", 0)


def test_order_2_checks_its_derivatives_with_the_callers_tolerances():
    """rtol/atol reach the second order: a huge atol passes a wrong second
    derivative that the rounding model catches."""

    class Wrong(torch.autograd.Function):
        """tanh whose backward is right at first order but whose own
        derivative is not (it is computed from a detached factor)."""

        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return torch.tanh(x)

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * (1 - torch.tanh(x).detach() ** 2)

    caught = gv.check(Wrong.apply, _x(), order=2)
    assert caught.ok is False and any(f.order == 2 for f in caught.errors)
    lenient = gv.check(Wrong.apply, _x(), order=2, atol=10.0)
    assert not any(f.order == 2 for f in lenient.errors)
