"""The checker's arithmetic where the arguments live. Large torch and jax
arguments are worked on in their own namespace and on their own device: no
full-size array crosses through numpy, in either direction. Small ones are
worked on in numpy. The verdicts are the same either way, and the caller's
tensors stay as they were."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

import gradverify as gv
from gradverify._check import xp
from gradverify._sweep.examples import BUILDERS, example_inputs, tanh_bias_flipped

torch = pytest.importorskip("torch")

jax = pytest.importorskip("jax")
jnp = jax.numpy

N = 1_000_000
COLS = 10
#: A crossing of at least this many elements counts as full-size. The random
#: signs cross packed, N/8 bytes, from the host's generator (the same seed
#: gives the same directions on every backend).
FULL = N // 4
FLIP = 123_457  # flat index of the wrong element of x


def _big_inputs():
    rng = np.random.default_rng(7)
    return rng.standard_normal((N // COLS, COLS)), rng.standard_normal(COLS)


@pytest.fixture
def torch_crossings(monkeypatch):
    """Every full-size crossing between torch tensors and numpy arrays."""
    seen: list[str] = []

    def out_of(name, method):
        def watched(self, *args, **kwargs):
            if self.numel() >= FULL:
                seen.append(name)
            return method(self, *args, **kwargs)

        return watched

    def into(name, function):
        def watched(obj, *args, **kwargs):
            if isinstance(obj, np.ndarray) and obj.size >= FULL:
                seen.append(name)
            return function(obj, *args, **kwargs)

        return watched

    monkeypatch.setattr(torch.Tensor, "numpy", out_of("Tensor.numpy", torch.Tensor.numpy))
    monkeypatch.setattr(torch.Tensor, "__array__", out_of("Tensor.__array__", torch.Tensor.__array__))
    for name in ("from_numpy", "as_tensor", "asarray", "tensor"):
        monkeypatch.setattr(torch, name, into(f"torch.{name}", getattr(torch, name)))
    return seen


@pytest.fixture
def jax_crossings(monkeypatch, capfd):
    """Full-size crossings between jax arrays and the host: every host-to-device
    transfer, as jax's transfer guard logs it, and every read of an array's
    values through Python (``__array__``, ``_value``). (numpy reads a jax array
    on the CPU through the buffer protocol, which no hook sees; the torch test
    runs the same code, and on a GPU that read is a transfer the guard logs.)"""
    from jax._src.array import ArrayImpl

    seen: list[str] = []

    def reads(name, method):
        def watched(self, *args, **kwargs):
            if self.size >= FULL:
                seen.append(name)
            return method(self, *args, **kwargs)

        return watched

    monkeypatch.setattr(ArrayImpl, "__array__", reads("jax.Array.__array__", ArrayImpl.__array__))
    monkeypatch.setattr(ArrayImpl, "_value", property(reads("jax.Array._value", ArrayImpl._value.fget)))

    class Crossings(list):
        def __enter__(self):
            self.guard = jax.transfer_guard_host_to_device("log")
            self.guard.__enter__()
            capfd.readouterr()
            return self

        def __exit__(self, *exc):
            self.guard.__exit__(*exc)
            for dims in re.findall(
                r"host-to-device transfer: aval=ShapedArray\(\w+\[([\d,]*)\]", capfd.readouterr().err
            ):
                if math.prod(int(d) for d in dims.split(",") if d) >= FULL:
                    seen.append(f"host-to-device {dims}")
            self.extend(seen)

    return Crossings()


def test_the_watchers_see_a_crossing(torch_crossings, jax_crossings):
    """(They would catch one: a watcher that sees nothing proves nothing.)"""
    x, _ = _big_inputs()
    np.asarray(torch.zeros(N))
    torch.from_numpy(x)
    assert torch_crossings == ["Tensor.__array__", "Tensor.numpy", "torch.from_numpy"]
    with jax_crossings, jax.enable_x64(True):
        y = jnp.asarray(x)
        y.tolist()
    assert jax_crossings == ["jax.Array._value", f"host-to-device {N // COLS},{COLS}"]


@pytest.mark.slow
def test_a_torch_check_at_a_million_elements_stays_in_torch(torch_crossings):
    x, b = (torch.from_numpy(a) for a in _big_inputs())
    # (the inputs themselves were made from numpy above; count from here on)
    torch_crossings.clear()
    right = gv.check(lambda x, b: torch.tanh(x + b), x, b)
    assert right.ok, right.findings
    wrong = gv.check(tanh_bias_flipped("torch", FLIP), x, b)
    assert not wrong.ok
    assert any(f.kind == gv.Kind.MISMATCH and f.input_index == (FLIP // COLS, FLIP % COLS) for f in wrong.findings)
    assert torch_crossings == []


@pytest.mark.slow
def test_a_jax_check_at_a_million_elements_stays_in_jax(jax_crossings):
    with jax.enable_x64(True):
        x, b = (jnp.asarray(a) for a in _big_inputs())
    with jax_crossings, jax.enable_x64(True):
        right = gv.check(lambda x, b: jnp.tanh(x + b), x, b)
        wrong = gv.check(tanh_bias_flipped("jax", FLIP), x, b)
    assert right.ok, right.findings
    assert not wrong.ok
    assert any(f.kind == gv.Kind.MISMATCH and f.input_index == (FLIP // COLS, FLIP % COLS) for f in wrong.findings)
    assert jax_crossings == []


@pytest.mark.slow
def test_the_host_path_would_be_seen(torch_crossings, monkeypatch):
    """Forced onto numpy, the same check crosses: the count above is not vacuous."""
    monkeypatch.setattr(xp, "HOST_MAX", 10 * N)
    x, b = (torch.from_numpy(a) for a in _big_inputs())
    torch_crossings.clear()
    assert gv.check(lambda x, b: torch.tanh(x + b), x, b).ok
    assert torch_crossings


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


# -- the same verdicts on the device and on the host ----------------------------------------
def _cases(backend):
    x, b = example_inputs(backend, seed=1)
    cases = [
        ("seed bug", BUILDERS[backend](True), (x, b)),
        ("swish", BUILDERS[backend](False), (x, b)),
        ("flipped", tanh_bias_flipped(backend, 5), (x, b)),
        ("tanh", tanh_bias_flipped(backend, None), (x, b)),
        ("sin", torch.sin if backend == "torch" else jnp.sin, (x,)),
    ]
    if backend == "torch":
        cases += [
            ("relu float32", torch.relu, (x.float(),)),
            ("log of negatives", torch.log, (x,)),
            ("wrong abs", _wrong_abs_torch(), (x,)),
        ]
    return cases


def _wrong_abs_torch():
    class Abs(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            ctx.save_for_backward(a)
            return a.abs()

        @staticmethod
        def backward(ctx, g):
            (a,) = ctx.saved_tensors
            return g * torch.sign(a) * torch.where(a > 0, 0.5, 1.0)  # wrong where a > 0

    return Abs.apply


def _verdict(r):
    return r.ok, [(f.kind, f.level, f.argument, f.input_index, f.output_index) for f in r.findings]


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["torch", "jax"])
def test_device_and_host_give_the_same_verdicts(monkeypatch, backend):
    # (and they are verdicts: the bugs fail, the correct functions pass)
    expected = {"seed bug": False, "swish": True, "flipped": False, "tanh": True, "sin": True, "wrong abs": False}
    host_max = xp.HOST_MAX
    with jax.enable_x64(backend == "jax"):
        for label, fn, args in _cases(backend):
            host = _verdict(gv.check(fn, *args, full=False))
            monkeypatch.setattr(xp, "HOST_MAX", 0)
            device = _verdict(gv.check(fn, *args, full=False))
            monkeypatch.setattr(xp, "HOST_MAX", host_max)
            assert device == host, label
            if label in expected:
                assert device[0] == expected[label], (label, device)


# -- jax: fn compiled for the evaluations, eager where it cannot be traced -------------------
def _counted_tanh(traceable: bool):
    calls = []

    def fn(x):
        calls.append(1)  # (Python runs once per eager call, once per trace under jit)
        if not traceable and type(x).__name__ == "DynamicJaxprTracer":
            raise TypeError("this fn refuses jax.jit (it differentiates, eagerly)")
        return jnp.tanh(x) * 2.0

    return fn, calls


@pytest.mark.slow
def test_jax_evaluations_are_compiled_where_fn_traces(monkeypatch):
    """On the device path fn is jit-compiled for the finite differences' evaluations
    (its Python runs once, to trace); one that cannot be traced runs eagerly
    throughout, with the same verdict."""
    monkeypatch.setattr(xp, "HOST_MAX", 0)  # (the device path on a small input)
    x = jnp.asarray(np.random.default_rng(3).standard_normal(300))
    runs = {}
    for traceable in (True, False):
        fn, calls = _counted_tanh(traceable)
        r = gv.check(fn, x)
        assert r.ok, r.findings
        runs[traceable] = (len(calls), r.evaluations)
    (compiled, ev_compiled), (eager, ev_eager) = runs[True], runs[False]
    assert ev_compiled == ev_eager and ev_compiled["primal"] >= 8
    # every evaluation beyond the two eager ones at the point ran compiled, bar one trace
    assert eager - compiled >= ev_compiled["primal"] - 3, runs


@pytest.mark.slow
def test_jax_localises_to_an_input_that_moves_no_output(monkeypatch):
    """relu whose VJP passes the cotangent through everywhere: the wrong
    elements are the negative inputs, whose columns of the Jacobian move no
    output at all (an empty support), on the device path."""
    monkeypatch.setattr(xp, "HOST_MAX", 0)

    @jax.custom_vjp
    def relu(x):
        return jnp.maximum(x, 0.0)

    relu.defvjp(lambda x: (jnp.maximum(x, 0.0), None), lambda _, g: (g,))
    with jax.enable_x64(True):
        x = jnp.asarray(np.random.default_rng(5).standard_normal(400))
        r = gv.check(relu, x)
    wrong = [f for f in r.findings if f.kind == gv.Kind.MISMATCH]
    assert not r.ok and wrong, r.findings
    assert float(x[wrong[0].input_index]) < 0
