"""torch: fn's call at the point keeps its graph, and the VJP at the point
differentiates that call instead of calling fn again; a call that cannot
be made with inputs requiring grad is made plainly, and says what it did."""

from __future__ import annotations

import numpy as np
import pytest

import gradverify as gv

torch = pytest.importorskip("torch")


class Counted:
    """tanh(x) * 2 (its backward optionally wrong at one element), counting
    its calls and those whose input required grad."""

    def __init__(self, flip: int | None = None) -> None:
        self.calls = self.with_grad = 0
        self.forwards = self.backwards = 0
        self.flip = flip
        counted = self

        class Tanh2(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                counted.forwards += 1
                ctx.save_for_backward(x)
                return torch.tanh(x) * 2

            @staticmethod
            def backward(ctx, g):
                counted.backwards += 1
                (x,) = ctx.saved_tensors
                grad = g * 2 / torch.cosh(x) ** 2
                if counted.flip is not None:
                    grad = grad.clone()
                    grad.view(-1)[counted.flip] *= -1
                return grad

        self.function = Tanh2

    def __call__(self, x):
        self.calls += 1
        self.with_grad += bool(x.requires_grad)
        return self.function.apply(x)


@pytest.mark.parametrize("n", [5, 300, 70_000])  # (a full Jacobian, random directions, the device path)
def test_the_vjp_at_the_point_differentiates_the_points_own_call(n):
    fn = Counted()
    x = torch.linspace(-1.5, 1.5, n, dtype=torch.float64)
    r = gv.check(fn, x, modes=("VJP",))
    assert r.ok, str(r)
    assert r.modes["VJP"] == "checked" and r.evaluations["vjp"] >= 1
    # every call of fn was an evaluation of fn: the VJP called none of its own
    assert fn.calls == r.evaluations["primal"], (fn.calls, r.evaluations)
    assert fn.with_grad == 1 and fn.backwards >= 1


@pytest.mark.parametrize("n", [5, 300, 70_000])
def test_a_wrong_backward_is_caught_through_the_kept_graph(n):
    fn = Counted(flip=n // 3)
    x = torch.linspace(-1.5, 1.5, n, dtype=torch.float64)
    r = gv.check(fn, x, modes=("VJP",))
    assert not r.ok
    (f,) = [f for f in r.errors if f.pair is not None and f.pair[0].startswith("VJP")][:1]
    assert f.input_index == (n // 3,), str(r)


def test_no_graph_is_kept_where_reverse_mode_is_not_asked():
    seen = []

    def fn(x):
        seen.append(x.requires_grad)
        return torch.sin(x)

    r = gv.check(fn, torch.linspace(-1, 1, 6, dtype=torch.float64), modes=("JVP",))
    assert r.ok and r.modes["VJP"] == "not asked"
    assert seen and not any(seen)


def test_a_call_that_refuses_inputs_requiring_grad_is_made_plainly():
    """fn reads its input with .numpy(), which torch refuses on a tensor
    requiring grad: the point is evaluated plainly (no failure of fn), and
    the VJP, which cannot avoid such inputs, fails in reverse mode's words."""

    def fn(x):
        x.numpy()
        return torch.sin(x)

    r = gv.check(fn, torch.linspace(-1, 1, 4, dtype=torch.float64))
    assert r.output is not None and r.modes["JVP"] == "checked"
    (f,) = r.by_kind(gv.Kind.EXCEPTION)
    assert "reverse mode (VJP)" in f.message and "requires grad" in f.message


def test_an_in_place_write_is_said_as_fns_and_the_callers_tensor_keeps_its_flags():
    """An in-place write to an input requiring grad raises in torch: the
    point is evaluated again plainly, where the write is seen and said."""

    def fn(x):
        return x.mul_(2.0)

    t = torch.tensor([0.5, -1.5, 2.0], dtype=torch.float64, requires_grad=True)
    r = gv.check(fn, t)
    (f,) = r.by_kind(gv.Kind.MUTATION)
    assert "fn mutates argument 0: 3 element(s) changed in place" in f.message
    np.testing.assert_array_equal(t.detach().numpy(), [0.5, -1.5, 2.0])
    assert t.requires_grad and t.grad is None and t.is_leaf


def test_a_function_without_a_jvp_is_said_unavailable_without_running_its_forward_again():
    """torch says an autograd.Function has no forward-mode rule only after
    running its forward; the check knows it from the class and says it in
    torch's words: every call of the Function's forward is an evaluation of
    fn (the VJP differentiates the point's call), at both sizes."""
    for n in (5, 70_000):
        fn = Counted()
        r = gv.check(fn.function.apply, torch.linspace(-1.5, 1.5, n, dtype=torch.float64))
        assert r.ok and r.modes["JVP"] == "unavailable", str(r)
        (f,) = r.by_kind(gv.Kind.MODE_UNAVAILABLE)
        assert "You must implement the jvp function for custom autograd.Function" in f.message
        assert fn.backwards >= 1
        assert fn.forwards == r.evaluations["primal"], (fn.forwards, r.evaluations)
