"""Points with -inf, +inf or NaN entries: the finite entries checked, the
others held fixed, and fn's derivatives at the held entries judged (finite
differences there are 0)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import gradverify as gv

torch = pytest.importorskip("torch")

INF = math.inf


def masked(dtype=torch.float64):
    return torch.tensor([0.3, -INF, 1.2, 0.1, -INF], dtype=dtype)


def held_note(r):
    return next(n for n in r.notes if n.startswith("held fixed"))


@pytest.mark.parametrize(
    "fn",
    [
        lambda t: torch.softmax(t, 0),
        lambda t: torch.log_softmax(t, 0),
        lambda t: torch.logsumexp(t, 0),
        lambda t: torch.sigmoid(t) * 2.0,
        lambda t: torch.exp(t).cumsum(0),
    ],
    ids=["softmax", "log_softmax", "logsumexp", "sigmoid", "exp_cumsum"],
)
def test_masked_torch_functions_pass(fn):
    r = gv.check(fn, masked())
    assert r.ok and not r.inconclusive, str(r)
    assert r.inputs[0].held == 2
    assert "VJP 0 at each" in held_note(r) and "JVP 0 at each" in held_note(r)
    assert r.modes["JVP"] == r.modes["VJP"] == "checked"


def test_masked_attention_scores_pass():
    """softmax(q k^T + mask) with the mask an argument: its 0 entries are
    checked with q and k, its -inf entries held."""
    g = torch.Generator().manual_seed(0)
    q, k = (torch.randn(3, 4, generator=g, dtype=torch.float64) for _ in range(2))
    mask = torch.zeros(3, 3, dtype=torch.float64)
    mask[0, 1:] = -INF
    mask[2, 0] = -INF
    r = gv.check(lambda q, k, m: torch.softmax(q @ k.T / 2.0 + m, -1), q, k, mask)
    assert r.ok and not r.inconclusive, str(r)
    assert [s.held for s in r.inputs] == [0, 0, 3]
    assert "arg2: 3 of 9 element(s) (-inf x3)" in held_note(r)


def test_safe_softmax_opinfo_samples_pass():
    """PyTorch's own _safe_softmax samples, -inf masks and fully masked rows
    included, as its gradient tests run them."""
    pytest.importorskip("expecttest")
    from torch.testing._internal.common_methods_invocations import op_db

    op = next(o for o in op_db if o.name == "torch.ops.aten._safe_softmax.default")
    held = 0
    torch.manual_seed(0)  # (the samples draw their masks from the global generator)
    samples = list(op.sample_inputs("cpu", torch.float64, requires_grad=True))
    assert samples
    for s in samples:
        x = s.input.detach()
        r = gv.check(lambda t, s=s: op(t, *s.args, **s.kwargs), x)
        assert r.ok, str(r)
        held += r.inputs[0].held
    assert held > 0  # (the samples do carry masks)


class _Softmax(torch.autograd.Function):
    """softmax with a hand-written backward; ``leak`` passes the incoming
    gradient through at the masked entries."""

    leak = False

    @staticmethod
    def forward(ctx, t):
        y = torch.softmax(t, 0)
        ctx.save_for_backward(t, y)
        return y

    @staticmethod
    def backward(ctx, g):
        t, y = ctx.saved_tensors
        grad = y * (g - (g * y).sum())
        return grad + torch.isinf(t) * g if _Softmax.leak else grad


@pytest.fixture
def leaky():
    _Softmax.leak = True
    yield _Softmax.apply
    _Softmax.leak = False


def test_a_rule_that_leaks_gradient_into_masked_entries_is_caught(leaky):
    r = gv.check(leaky, masked())
    assert not r.ok
    (f,) = r.by_kind(gv.Kind.HELD_GRADIENT)
    assert f.level == "error" and f.pair == ("VJP", "FD") and f.argument == 0 and f.input_index == (1,)
    assert f.values["FD"] == 0.0 and f.values["VJP"] != 0.0
    assert "2 of 2 held entries" in f.message
    # the finite entries' gradient is right: nothing else is flagged
    assert not r.by_kind(gv.Kind.MISMATCH), str(r)


def test_the_same_rule_without_the_leak_passes():
    r = gv.check(_Softmax.apply, masked())
    assert r.ok, str(r)
    assert "VJP 0 at each" in held_note(r)


def test_a_forward_rule_that_reads_masked_entries_is_caught():
    jax = pytest.importorskip("jax")
    jnp = jax.numpy

    def make(leak):
        @jax.custom_jvp
        def f(t):
            return jax.nn.softmax(t)

        @f.defjvp
        def f_jvp(p, ts):
            (t,), (dt,) = p, ts
            y = f(t)
            out = y * (dt - (dt * y).sum())
            return y, out + jnp.where(jnp.isinf(t), dt, 0.0).sum() if leak else out

        return f

    with jax.enable_x64(True):
        x = jnp.array([0.3, -INF, 1.2, 0.1])
        ok = gv.check(make(False), x)
        bad = gv.check(make(True), x)
    assert ok.ok, str(ok)
    assert not bad.ok
    assert any(f.pair == ("JVP", "FD") for f in bad.by_kind(gv.Kind.HELD_GRADIENT)), str(bad)


def test_indeterminate_values_at_held_entries_are_said_not_judged():
    """x * x at +inf: the output there is inf, its cotangent 0, and the rule's
    2x * 0 is NaN -- 0 x inf, no evidence of a leak."""
    r = gv.check(lambda t: t * t, torch.tensor([1.5, INF, -0.5], dtype=torch.float64))
    assert r.ok, str(r)
    assert "NaN/inf at 1 held entries" in held_note(r)


def test_nan_entries_and_float32():
    x = torch.tensor([0.3, math.nan, 1.2], dtype=torch.float64)
    r = gv.check(lambda t: torch.where(torch.isnan(t), 0.0, t).sin(), x)
    assert r.ok and "NaN x1" in held_note(r), str(r)
    r32 = gv.check(lambda t: torch.softmax(t, 0), masked(torch.float32))
    assert r32.ok and r32.inputs[0].held == 2, str(r32)


def test_float8_entries_are_found_where_torch_has_no_extremes_for_them():
    """(The entries' test reads float16..float64 arrays' extremes, one pass
    each; torch has no aminmax of float8: those take isfinite.)"""
    x = torch.tensor([0.5, INF, -1.0, 0.25]).to(torch.float8_e5m2)
    r = gv.check(lambda t: (t.float() * 2.0).to(t.dtype), x)
    assert r.inputs[0].held == 1, str(r)


def test_held_entries_at_order_2():
    r = gv.check(lambda t: torch.softmax(t, 0), masked(), order=2)
    assert r.ok, str(r)
    assert r.modes["VJP of VJP"] == "checked"


def test_large_masked_input_directional():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(200, 300, generator=g, dtype=torch.float64)
    x[x > 1.5] = -INF
    r = gv.check(lambda t: torch.softmax(t, -1), x)
    assert r.ok and r.strategy.startswith("directional"), str(r)
    assert r.inputs[0].held == int(torch.isinf(x).sum())


def test_jax_masked_softmax():
    jax = pytest.importorskip("jax")
    with jax.enable_x64(True):
        x = jax.numpy.array([0.3, -INF, 1.2, 0.1])
        r = gv.check(jax.nn.softmax, x)
    assert r.ok and r.inputs[0].held == 1, str(r)


def _np_softmax(x):
    e = np.exp(x - x.max())
    return e / e.sum()


@pytest.mark.parametrize("leak", [False, True])
def test_numpy_rule_at_masked_entries(leak):
    def vjp(p, g):
        y = _np_softmax(p[0])
        grad = y * (g - (g * y).sum())
        return (grad + np.isinf(p[0]) * 0.5 if leak else grad,)

    def jvp(p, t):
        y = _np_softmax(p[0])
        return y * (t[0] - (t[0] * y).sum())

    x = np.array([0.3, -INF, 1.2, 0.1])
    r = gv.check(gv.Rule(_np_softmax, jvp=jvp, vjp=vjp), x)
    assert r.ok is not leak, str(r)
    assert bool(r.by_kind(gv.Kind.HELD_GRADIENT)) is leak
    assert np.isneginf(x[1])  # (the caller's array untouched)


def test_complex_arguments_with_held_entries():
    z = torch.tensor([1 + 1j, complex(-INF, 0.0), 0.5j], dtype=torch.complex128)
    r = gv.check(torch.exp, z)
    assert r.ok and r.inputs[0].held == 1, str(r)


def test_verify_draws_masks_and_catches_the_leak_only(leaky):
    """gv.verify over drawn masks: the leaking rule is caught and shrunk to
    one masked entry; the right rule passes every drawn mask."""
    from gradverify import strategies as gst

    args = gst.arrays("torch", "float64", gst.default_shapes(1, 6), mask=-INF).map(lambda a: (a,))
    bad = gv.verify(leaky, args, max_examples=40, seed=3)
    assert not bad.ok
    (x,) = bad.counterexample
    assert int(torch.isinf(x).sum()) == 1
    assert bad.result.by_kind(gv.Kind.HELD_GRADIENT)
    # the report's @example line rebuilds the masked counterexample exactly
    line = next(ln.strip() for ln in str(bad).splitlines() if ln.strip().startswith("@example("))
    (again,) = eval(line.removeprefix("@example(")[:-1], {"torch": torch})
    assert torch.equal(again, x)
    _Softmax.leak = False
    good = gv.verify(_Softmax.apply, args, max_examples=40, seed=3)
    assert good.ok, str(good)
