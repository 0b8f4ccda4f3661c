"""torch: fn at the point is called as every other point is - plainly, its
inputs not requiring grad - so its value is the one finite differences
difference against; a forward-mode rule known missing is not run for."""

from __future__ import annotations

import numpy as np
import pytest

import gradverify as gv

torch = pytest.importorskip("torch")


@pytest.fixture(params=[False, True], ids=["copied from the host", "copied where they lie"])
def held(request, monkeypatch):
    """Small torch inputs' arguments copied from the host's copies (the CPU's
    way) or where the caller's lie (a device's way, TorchBackend.copies_where_held)."""
    import gradverify.backends.torch as torch_backend

    monkeypatch.setattr(torch_backend, "HOLD_ON_CPU", request.param)
    return request.param


@pytest.mark.parametrize("n", [5, 70_000])  # (a full Jacobian; random directions on the device path)
def test_a_function_whose_arithmetic_follows_requires_grad_is_judged_at_its_plain_value(n):
    """torch's own modules take another path when an input requires grad
    (the fast path of an eval-mode attention is taken only where none
    does), which rounds differently. The point's value is the plain call's,
    as the stencil's are: no two calls at the point differ, and the
    derivatives pass."""

    def fn(x):
        return (x * 6.0) / 3.0 if x.requires_grad else x * 2.0

    x = torch.linspace(-1.3, 1.7, n, dtype=torch.float64)
    assert not torch.equal(fn(x), fn(x.clone().requires_grad_()))  # (the two paths round apart)
    r = gv.check(fn, x)
    assert r.ok and not r.by_kind(gv.Kind.NONDETERMINISM) and not r.warnings, str(r)


def test_a_call_that_refuses_inputs_requiring_grad_fails_in_reverse_modes_words():
    """fn reads its input with .numpy(), which torch refuses on a tensor
    requiring grad: fn at the point is fine; the VJP, which cannot avoid
    such inputs, fails and says where."""

    def fn(x):
        x.numpy()
        return torch.sin(x)

    r = gv.check(fn, torch.linspace(-1, 1, 4, dtype=torch.float64))
    assert r.output is not None and r.modes["JVP"] == "checked"
    (f,) = r.by_kind(gv.Kind.EXCEPTION)
    assert "reverse mode (VJP)" in f.message and "requires grad" in f.message


def test_an_in_place_write_is_said_and_the_callers_tensor_keeps_its_flags(held):
    def fn(x):
        return x.mul_(2.0)

    t = torch.tensor([0.5, -1.5, 2.0], dtype=torch.float64, requires_grad=True)
    r = gv.check(fn, t)
    (f,) = r.by_kind(gv.Kind.MUTATION)
    assert "fn mutates argument 0: 3 element(s) changed in place" in f.message
    np.testing.assert_array_equal(t.detach().numpy(), [0.5, -1.5, 2.0])
    assert t.requires_grad and t.grad is None and t.is_leaf


@pytest.mark.parametrize("size", [(3, 5), (300, 300)])  # (the host path and the device path)
def test_a_function_that_writes_its_input_and_fails_in_reverse_mode_leaves_the_callers_tensor_alone(size, held):
    """Where reverse mode fails, the check asks what each rule returned
    before torch's engine saw it (the structure of its gradients), calling
    fn once more: there too fn gets a copy. A rule that zeroes its input
    leaves the caller's tensor as it was, and the reproducer writes its
    values, not the zeros."""

    class Zeroes(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            y = x.sin()
            x.mul_(0.0)
            return y

        @staticmethod
        def backward(ctx, g):
            return g  # (wrong: cos is missing)

    x = torch.linspace(0.1, 0.9, size[0] * size[1], dtype=torch.float64).reshape(size)
    kept = x.clone()
    r = gv.check(Zeroes.apply, x)
    assert r.by_kind(gv.Kind.MUTATION) and not r.ok
    assert torch.equal(x, kept)
    if x.numel() <= 64:  # (written as a literal)
        assert "0.1, " in r.reproduce and "0.0, 0.0" not in r.reproduce, r.reproduce


def test_a_function_without_a_jvp_is_said_unavailable_without_running_its_forward_for_it():
    """torch says an autograd.Function has no forward-mode rule only after
    running its forward; the check knows it from the class and says it in
    torch's words. Every run of the Function's forward is an evaluation of
    fn or a VJP's, at both sizes."""
    for n in (5, 70_000):
        forwards = [0]
        function = _tanh2_without_jvp(forwards)
        r = gv.check(function.apply, torch.linspace(-1.5, 1.5, n, dtype=torch.float64))
        assert r.ok and r.modes["JVP"] == "unavailable", str(r)
        (f,) = r.by_kind(gv.Kind.MODE_UNAVAILABLE)
        assert "You must implement the jvp function for custom autograd.Function" in f.message
        assert forwards[0] == r.evaluations["primal"] + r.evaluations["vjp"], (forwards, r.evaluations)


def _tanh2_without_jvp(forwards: list[int]) -> type:
    """2 tanh(x) as an autograd.Function with a backward and no jvp, counting its forwards."""

    class Tanh2(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            forwards[0] += 1
            ctx.save_for_backward(x)
            return torch.tanh(x) * 2

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * 2 / torch.cosh(x) ** 2

    return Tanh2


class _Crossings:
    """torch.from_numpy and Tensor.numpy calls while the block runs: on a
    device each is a transfer (on the CPU they share memory, and are
    counted the same)."""

    def __init__(self, monkeypatch):
        self.count = 0
        for owner, name in ((torch, "from_numpy"), (torch.Tensor, "numpy")):
            monkeypatch.setattr(owner, name, self._counted(getattr(owner, name)))

    def _counted(self, method):
        def counted(*args, **kwargs):
            self.count += 1
            return method(*args, **kwargs)

        return counted


@pytest.mark.parametrize("habit", ["none", "writes its input", "returns one buffer", "a forward rule"])
def test_a_small_checks_points_cross_to_fns_device_together(habit, monkeypatch):
    """A full Jacobian of a Function torch cannot vectorise calls fn once a
    point (6 n + 1 calls), and its forward rule once a column: the points
    (and tangents) cross to fn's device in one transfer per argument and the
    outputs come back in one (20 crossings in the whole check where one a
    call made 339; with a forward rule 19 where it was 391) - with the same
    result, element for element, as each call its own arrays. Each call's row is its own: a fn that
    zeroes its input at every call changes no other call's point; each
    output is kept as it comes: a fn that writes every output into one
    buffer of its own overwrites none kept. (Arguments copied where they
    lie, as on a device.)"""
    from gradverify._sweep.examples import tanh_bias_flipped
    from gradverify.backends.torch import TorchBackend

    monkeypatch.setattr("gradverify.backends.torch.HOLD_ON_CPU", True)
    rule = tanh_bias_flipped("torch", None, forward_rule=habit == "a forward rule")
    buffer = torch.empty(2, 6, dtype=torch.float64)

    def fn(x, b):
        y = rule(x, b)
        if habit == "writes its input":
            x.mul_(0.0)
        if habit == "returns one buffer" and not y.requires_grad:
            return buffer.copy_(y)
        return y

    rng = np.random.default_rng(5)
    x, b = torch.tensor(rng.standard_normal((2, 6))), torch.tensor(rng.standard_normal(6))
    alone = gv.check(fn, x, b)
    crossings = _Crossings(monkeypatch)
    monkeypatch.setattr(TorchBackend, "stages_rows", False)
    each = gv.check(fn, x, b)
    one_each = crossings.count
    monkeypatch.setattr(TorchBackend, "stages_rows", True)
    crossings.count = 0
    together = gv.check(fn, x, b)
    assert together.evaluations == each.evaluations and together.evaluations["primal"] >= 6 * 18 + 1
    assert together.to_dict() == each.to_dict() == alone.to_dict()
    writes = habit == "writes its input"
    assert together.ok != writes and bool(together.by_kind(gv.Kind.MUTATION)) == writes, str(together)
    assert crossings.count * 15 <= one_each, (crossings.count, one_each)


def test_every_call_gets_the_arguments_as_they_were_when_the_check_began(held):
    """fn may change the caller's tensor on its own (a training BatchNorm
    updates the running mean the caller also passes as a constant): each
    call still gets a copy of the argument as it was when the check began
    - no writes to tell, no jitter, the check passes."""
    torch.manual_seed(0)
    bn = torch.nn.BatchNorm1d(3, dtype=torch.float64).train()
    seen = set()

    def fn(x, running_mean):
        seen.add(tuple(running_mean.tolist()))
        return bn(x) + running_mean

    r = gv.check(fn, torch.randn(4, 3, dtype=torch.float64), bn.running_mean, wrt=0)
    assert r.ok and not r.by_kind(gv.Kind.MUTATION) and not r.by_kind(gv.Kind.NONDETERMINISM), str(r)
    assert len(seen) == 1


def test_a_forward_rule_that_raises_at_one_column_is_said_and_not_run_again(held):
    """The forward rule's third call raises: the check says so, as when each
    column was asked alone, and the rule is not called again to pass."""
    calls = [0]

    class F(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            ctx.save_for_forward(x)
            return x.sin()

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * x.cos()

        @staticmethod
        def jvp(ctx, t):
            calls[0] += 1
            if calls[0] == 3:
                raise RuntimeError("out of memory (transient)")
            (x,) = ctx.saved_tensors
            return t * x.cos()

    r = gv.check(F.apply, torch.tensor([0.3, 0.5, 0.7], dtype=torch.float64), modes=["JVP"])
    (f,) = r.by_kind(gv.Kind.EXCEPTION)
    assert not r.ok and "forward mode (JVP)" in f.message and "out of memory" in f.message
    assert calls[0] == r.evaluations["jvp"] == 3


def test_a_tensor_subclass_reaches_fn_as_a_plain_tensor_at_every_point(held):
    class Tagged(torch.Tensor):
        pass

    seen = set()

    def fn(x, c):
        seen.add((type(x).__name__, type(c).__name__))
        return x.sin() * (2.0 if isinstance(x, Tagged) else 1.0) * c.sum()

    x = torch.tensor([0.3, 0.5, 0.7], dtype=torch.float64).as_subclass(Tagged)
    c = torch.tensor([1.0, 2.0], dtype=torch.float64).as_subclass(Tagged)
    r = gv.check(fn, x, c, wrt=0)
    assert seen == {("Tensor", "Tensor")} and r.ok and not r.inconclusive, str(r)


def test_a_wrong_gradient_shape_for_a_constant_that_requires_grad_is_still_said(held):
    """The rules' gradients are read on copies; a constant argument that
    requires grad (a parameter) still does there, so its backward's wrong
    shape is said too."""

    class F(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, w):
            ctx.save_for_backward(x, w)
            return x.sin() * w.sum()

        @staticmethod
        def backward(ctx, g):
            x, w = ctx.saved_tensors
            return (g * x.cos() * w.sum())[:2], torch.zeros(5, dtype=w.dtype)

    w = torch.nn.Parameter(torch.tensor([1.0, 2.0], dtype=torch.float64))
    r = gv.check(F.apply, torch.linspace(0.1, 0.9, 6, dtype=torch.float64), w, wrt=0)
    said = " | ".join(f.message for f in r.by_kind(gv.Kind.WRONG_SHAPE))
    assert "for its input 0 (argument 0 of fn)" in said and "for its input 1," in said, said
