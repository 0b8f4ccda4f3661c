"""The checker's arithmetic where the arguments live: the watchers of
full-size crossings between a framework and numpy see one, and the caller's
tensors stay as they were on the device path and on the host path (small
arguments are worked on in numpy, large ones in their own namespace)."""

from __future__ import annotations

import numpy as np
import pytest

import gradverify as gv
import gradverify.backends.jax
from gradverify._check import xp
from gradverify._sweep.examples import example_inputs

from ._helpers import COLS, N, big_inputs

torch = pytest.importorskip("torch")

jax = pytest.importorskip("jax")
jnp = jax.numpy


@pytest.fixture(autouse=True)
def _jax_cpu_in_jax(monkeypatch):
    """(jax's CPU arrays worked on in jax, as an accelerator's are: the
    device path, on a machine without one.)"""
    monkeypatch.setattr(gradverify.backends.jax, "CPU_IN_JAX", True)


def test_the_watchers_see_a_crossing(torch_crossings, jax_crossings):
    """(They would catch one: a watcher that sees nothing proves nothing.)"""
    # (a shape of its own: jax says a transfer's shape the first time only,
    # and the other tests transfer arrays of big_inputs' shapes)
    x = np.ascontiguousarray(big_inputs()[0][:, 1:])
    np.asarray(torch.zeros(N))
    torch.from_numpy(x)
    assert torch_crossings == ["Tensor.__array__", "Tensor.numpy", "torch.from_numpy"]
    with jax_crossings, jax.enable_x64(True):
        y = jnp.asarray(x)
        y.tolist()
    assert jax_crossings == ["jax.Array._value", f"host-to-device float64[{N // COLS},{COLS - 1}]"]


# -- the caller's tensors --------------------------------------------------------------------
@pytest.mark.parametrize("host_max", [0, xp.HOST_MAX], ids=["on-device", "on-host"])
def test_the_callers_tensors_and_grads_are_untouched(monkeypatch, host_max):
    monkeypatch.setattr(xp, "HOST_MAX", host_max)
    x, b = example_inputs("torch", seed=3)
    x.requires_grad_(True)
    b.requires_grad_(True)
    x.grad = torch.full_like(x, 5.0)
    grad = x.grad
    before = x.detach().clone(), b.detach().clone()
    assert gv.check(lambda x, b: torch.tanh(x + b) * b, x, b).ok
    assert torch.equal(x.detach(), before[0]) and torch.equal(b.detach(), before[1])
    assert x.grad is grad and torch.equal(grad, torch.full_like(x, 5.0)) and b.grad is None
    assert x.requires_grad and b.requires_grad and x.device.type == "cpu"


@pytest.mark.parametrize("host_max", [0, xp.HOST_MAX], ids=["on-device", "on-host"])
def test_a_mutating_fn_is_told_and_the_callers_tensor_kept(monkeypatch, host_max):
    monkeypatch.setattr(xp, "HOST_MAX", host_max)
    x, _ = example_inputs("torch", seed=4)
    before = x.clone()

    def scales_in_place(a):
        a.mul_(2.0)
        return torch.sin(a)

    r = gv.check(scales_in_place, x)
    assert [f.kind for f in r.findings if f.kind == gv.Kind.MUTATION] == [gv.Kind.MUTATION]
    assert torch.equal(x, before)


# -- the points of the finite differences ------------------------------------------------------
def _reports(monkeypatch, fn, *args):
    """fn's report with every point written into the oracle's one buffer, and
    with a fresh array per point."""
    from gradverify._check import oracle

    out = []
    for reused in (0, 1 << 60):
        monkeypatch.setattr(oracle, "REUSED_POINT", reused)
        out.append(gv.check(fn, *args).to_dict())
    return out


@pytest.mark.parametrize("host_max", [0, xp.HOST_MAX], ids=["on-device", "on-host"])
def test_points_written_into_one_buffer_judge_as_fresh_ones(monkeypatch, host_max):
    """One buffer for every point changes no verdict and no value: not for a
    function whose output is a view of its input (copied before the buffer
    is written again: two points' values would otherwise be one), not for
    one that scales its input in place (each point is written whole), and
    not for a wrong rule, caught the same way."""
    from gradverify._sweep.examples import tanh_bias_flipped

    monkeypatch.setattr(xp, "HOST_MAX", host_max)
    x, b = example_inputs("torch", seed=5)

    def scales_in_place(a):
        a.mul_(2.0)
        return torch.sin(a)

    cases = [
        (lambda a: a.reshape(-1), (x,), True),  # (a view of the point)
        (scales_in_place, (x,), False),  # (told as a mutation, judged the same)
        (tanh_bias_flipped("torch", None), (x, b), True),
        (tanh_bias_flipped("torch", 7), (x, b), False),
        (tanh_bias_flipped("torch", 7, forward_rule=False), (x, b), False),
    ]
    for fn, args, ok in cases:
        reused, fresh = _reports(monkeypatch, fn, *args)
        assert reused == fresh
        assert reused["ok"] == ok, reused


def _nan_then_raising_jvp():
    """sin whose JVP is NaN at output 5 along the first direction and raises
    along the second."""
    from .._batchops import Sin

    calls = []

    class NanThenRaising(Sin):
        @staticmethod
        def jvp(ctx, t):
            calls.append(1)
            if len(calls) > 1:
                raise RuntimeError("the second direction's JVP raises")
            out = Sin.jvp(ctx, t)
            out[5] = torch.nan
            return out

    return NanThenRaising.apply


@pytest.mark.parametrize("host_max", [xp.HOST_MAX, 0], ids=["host", "device"])
def test_a_nan_of_a_mode_that_fails_later_is_still_judged(monkeypatch, host_max):
    """The AD runs' finiteness is read once, after every run: a NaN in the
    first direction's JVP is judged by FD even where the second direction's
    raises and the mode fails."""
    monkeypatch.setattr(xp, "HOST_MAX", host_max)
    x = torch.linspace(-1.0, 1.0, 3000, dtype=torch.float64)
    r = gv.check(_nan_then_raising_jvp(), x, directions=2)
    kinds = {f.kind for f in r.findings}
    assert gv.Kind.EXCEPTION in kinds and gv.Kind.NONFINITE_GRADIENT in kinds, str(r)
    assert any(f.output_index == (5,) for f in r.findings if f.kind == gv.Kind.NONFINITE_GRADIENT), str(r)


def test_fn_raising_at_the_first_points_is_evaluated_as_often_on_a_device_as_on_the_host(monkeypatch):
    """The device path evaluates the first tier's FD points before reading
    the AD runs (one read for both); where fn raises there, first_order
    takes the exception over, not the points again."""

    def boxed(x):
        if bool((x.detach() > 1.0).any()):
            raise ValueError("outside the box")
        return torch.sin(x)

    x = torch.linspace(0.0, 0.5, 3000, dtype=torch.float64)
    x[7] = 1.0 - 1e-9
    host = gv.check(boxed, x, full=False)
    monkeypatch.setattr(xp, "HOST_MAX", 0)
    device = gv.check(boxed, x, full=False)
    assert [f.kind for f in device.findings] == [f.kind for f in host.findings] == [gv.Kind.EXCEPTION]
    assert device.evaluations == host.evaluations


# -- the wide-noise excuse ---------------------------------------------------------------------
def _tanh_gelu(scale: float = 1.0):
    """The tanh form of gelu as a backward-only Function (its backward
    autograd's, times ``scale``): in float64 at x + b ~ -7 its 1 + tanh(...)
    ~ 1e-17 is quantised, flat at the step and stepped only at wider spacings."""

    def gelu(x, b):
        z = x + b
        return 0.5 * z * (1 + torch.tanh(np.sqrt(2 / np.pi) * (z + 0.044715 * z**3)))

    class Gelu(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, b):
            ctx.save_for_backward(x, b)
            return gelu(x, b)

        @staticmethod
        def backward(ctx, g):
            with torch.enable_grad():
                x, b = (a.detach().requires_grad_() for a in ctx.saved_tensors)
                return tuple(scale * d for d in torch.autograd.grad(gelu(x, b), (x, b), g))

    return Gelu.apply


def test_the_wide_noise_excuse_explains_on_a_device_as_on_the_host(monkeypatch):
    """On a device the excuse first bounds what every wider table could
    explain, in one read, and measures the tables only where something
    could: where the quantised tail explains the disagreement the device
    path explains it too (no mismatch, as on the host), and a rule 1% off
    where finite differences can judge is still a mismatch on both paths."""
    x = torch.tensor(np.random.default_rng(0).uniform(-1e-3, 1e-3, 1000))
    verdicts = {}
    for where, host_max in (("host", xp.HOST_MAX), ("device", 0)):
        monkeypatch.setattr(xp, "HOST_MAX", host_max)
        tail = gv.check(_tanh_gelu(), x, torch.tensor([-7.0]), full=False)
        bad = gv.check(_tanh_gelu(1.01), x, torch.tensor([-1.0]), full=False)
        verdicts[where] = [f.kind for f in tail.findings]
        assert gv.Kind.MISMATCH not in verdicts[where], (where, str(tail))
        assert bad.by_kind(gv.Kind.MISMATCH), (where, str(bad))
    assert verdicts["device"] == verdicts["host"]
