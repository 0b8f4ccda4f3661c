"""A derivative rule the framework (or a rule's author) does not have is not
a wrong one: a mode that raises for want of a rule with respect to some
arguments is a ``mode_unavailable`` warning in the framework's words, naming
those arguments and the ``wrt=`` that checks the others, and the others are
still checked - a wrong rule among them still caught. A rule that crashes
(any other exception) stays an error."""

from __future__ import annotations

import pytest

import gradverify as gv

torch = pytest.importorskip("torch")


def _t(*v):
    return torch.tensor(v, dtype=torch.float64)


def _unavailable(r, mode):
    return [f for f in r.by_kind(gv.Kind.MODE_UNAVAILABLE) if f.pair == (mode, "-")]


class _NoRuleForB(torch.autograd.Function):
    """x * b, whose backward has no rule for b (it says so as torch's own do)."""

    @staticmethod
    def forward(ctx, x, b):
        ctx.save_for_backward(x, b)
        return x * b

    @staticmethod
    def backward(ctx, g):
        x, b = ctx.saved_tensors
        if ctx.needs_input_grad[1]:
            raise NotImplementedError("the derivative for 'b' is not implemented")
        return g * b, None


class _WrongX(_NoRuleForB):
    @staticmethod
    def backward(ctx, g):
        x, b = ctx.saved_tensors
        if ctx.needs_input_grad[1]:
            raise NotImplementedError("the derivative for 'b' is not implemented")
        return g * b * 1.001, None


class _Crashes(_NoRuleForB):
    @staticmethod
    def backward(ctx, g):
        x, b = ctx.saved_tensors
        return g * b, g[:1] @ x  # (b's gradient has the wrong shape: a bug, not a missing rule)


def test_a_torch_op_without_a_rule_in_one_argument_is_checked_in_the_other():
    r = gv.check(torch.special.gammainc, _t(0.5, 1.5), _t(0.3, 2.0))
    assert r.ok and not r.errors, str(r)
    (f,) = _unavailable(r, "VJP")
    assert f.argument == 0 and "the derivative for 'igamma: input' is not implemented" in f.message
    assert "wrt=1 checks it alone" in f.message
    assert r.modes["VJP"] == "checked"  # (in the argument that has the rule)


def test_a_missing_rule_is_a_warning_and_a_wrong_one_beside_it_is_still_caught():
    x, b = _t(0.5, -1.5, 2.0), _t(0.3, 2.0, -0.7)
    r = gv.check(_NoRuleForB.apply, x, b)
    assert r.ok, str(r)
    (f,) = _unavailable(r, "VJP")
    assert f.argument == 1 and "no derivative rule" in f.message and "wrt=0" in f.message
    r = gv.check(_WrongX.apply, x, b)
    assert not r.ok
    (e,) = r.errors
    assert e.kind == gv.Kind.MISMATCH and e.argument == 0, str(r)
    assert [f.argument for f in _unavailable(r, "VJP")] == [1]


def test_a_rule_that_crashes_in_one_argument_is_still_an_error():
    r = gv.check(_Crashes.apply, _t(0.5, 1.5), _t(0.3, 2.0))
    assert not r.ok
    assert [f.kind for f in r.errors] == [gv.Kind.EXCEPTION]
    assert not _unavailable(r, "VJP")


def test_no_argument_with_a_rule_leaves_nothing_compared_and_no_pass():
    a = _t(0.5, 1.5)
    r = gv.check(lambda a: torch.special.gammainc(a, _t(0.3, 2.0)), a)
    assert not r.ok and [f.kind for f in r.errors] == [gv.Kind.NOTHING_CHECKED], str(r)
    (f,) = _unavailable(r, "VJP")
    assert "nothing was compared" in f.message and r.modes["VJP"] == "unavailable"


def test_jax_betainc_is_checked_in_x_and_says_a_and_b_have_no_rule():
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    with jax.enable_x64(True):
        a, b, x = jnp.array([0.5, 1.5]), jnp.array([2.0, 0.7]), jnp.array([0.3, 0.6])
        r = gv.check(jax.scipy.special.betainc, a, b, x)
        assert r.ok and not r.errors, str(r)
        assert r.modes["JVP"] == "checked" and r.modes["VJP"] == "checked"
        for mode in ("JVP", "VJP"):
            (f,) = _unavailable(r, mode)
            assert "arguments 0, 1" in f.message and "wrt=2 checks it alone" in f.message
            assert "Betainc gradient with respect to a and b not supported" in f.message
        # what it says works: the same check restricted by wrt= has nothing to say
        assert not gv.check(jax.scipy.special.betainc, a, b, x, wrt=2).findings


def test_a_mode_a_framework_refuses_in_its_own_words_is_unavailable_not_an_error():
    """Frameworks word a missing rule many ways: jax's custom_linear_solve
    without transpose_solve ("required for backwards mode"), a while_loop
    ("Reverse-mode differentiation does not work"), a pure callback ("do not
    support JVP"). Each is mode_unavailable, and the other mode is checked."""
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    with jax.enable_x64(True):
        m = jnp.array([[2.0, 0.5], [0.3, 1.5]])

        def solve(b):
            return jax.lax.custom_linear_solve(lambda v: m @ v, b, lambda mv, r: jnp.linalg.solve(m, r))

        r = gv.check(solve, jnp.array([1.0, -0.5]))
        assert r.ok and r.modes["JVP"] == "checked" and r.modes["VJP"] == "unavailable", str(r)
        assert "required for backwards mode" in _unavailable(r, "VJP")[0].message

        def loop(x):
            return jax.lax.while_loop(lambda c: c[1] < 3, lambda c: (jnp.sin(c[0]), c[1] + 1), (x, 0))[0]

        r = gv.check(loop, jnp.array([0.3, 0.9]))
        assert r.ok and r.modes["VJP"] == "unavailable", str(r)

        def callback(x):
            return jax.pure_callback(lambda a: a * a, jax.ShapeDtypeStruct(x.shape, x.dtype), x)

        r = gv.check(callback, jnp.array([0.3, 0.9]), allow_unchecked=True)
        assert r.ok and not r.errors and r.modes["JVP"] == "unavailable", str(r)
