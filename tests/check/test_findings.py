"""Every finding kind has a test that triggers it, with its message asserted."""

from __future__ import annotations

import numpy as np
import pytest

import gradverify as gv

from .._helpers import make


def square_rule(**overrides):
    rules = {"jvp": lambda p, t: 2 * p[0] * t[0], "vjp": lambda p, g: (2 * p[0] * g,)}
    rules.update(overrides)
    return gv.Rule(lambda x: x * x, **rules)


X = np.array([0.5, -1.5, 2.0])


def test_mismatch_names_pair_index_values_and_bound():
    rule = square_rule(vjp=lambda p, g: (2 * p[0] * g * np.array([1.0, -1.0, 1.0]),))
    r = gv.check(rule, X)
    (f,) = r.by_kind(gv.Kind.MISMATCH)
    assert f.level == "error" and f.pair == ("VJP", "FD")
    assert f.argument == 0 and f.input_index == (1,) and f.output_index == (1,)
    assert f.values["VJP"] == pytest.approx(3.0) and f.values["FD"] == pytest.approx(-3.0)
    assert f.error == pytest.approx(6.0) and f.error > f.bound
    assert "FD error" in f.bound_reason and "measured noise" in f.bound_reason
    assert "reverse mode disagrees with finite differences" in f.message


def test_nonfinite_gradient():
    rule = square_rule(vjp=lambda p, g: (np.where(p[0] > 1.9, np.nan, 2 * p[0] * g),))
    r = gv.check(rule, X)
    (f,) = r.by_kind(gv.Kind.NONFINITE_GRADIENT)
    assert f.level == "error" and f.input_index == (2,)
    assert "reverse mode returned nan" in f.message and "while every output is finite" in f.message
    assert r.modes["VJP"] == "failed" and r.modes["JVP"] == "checked"


def test_wrong_shape_of_cotangent():
    r = gv.check(square_rule(vjp=lambda p, g: (np.sum(2 * p[0] * g, keepdims=True),)), X)
    (f,) = r.by_kind(gv.Kind.WRONG_SHAPE)
    assert f.message == "VJP: the cotangent of argument 0 has shape (1,); expected (3,)"


def test_wrong_shape_of_tangent():
    r = gv.check(square_rule(jvp=lambda p, t: (2 * p[0] * t[0])[:2]), X)
    (f,) = r.by_kind(gv.Kind.WRONG_SHAPE)
    assert f.message == "JVP: the output tangent has shape (2,); expected (3,)"


def test_wrong_number_of_cotangents():
    rule = gv.Rule(lambda x, y: x * y, jvp=lambda p, t: p[1] * t[0] + p[0] * t[1], vjp=lambda p, g: (p[1] * g,))
    r = gv.check(rule, X, X + 1)
    (f,) = r.by_kind(gv.Kind.WRONG_SHAPE)
    assert "the vjp rule returned 1 items; expected a tuple of 2 cotangents" in f.message


def test_wrong_dtype_of_cotangent():
    r = gv.check(square_rule(vjp=lambda p, g: ((2 * p[0] * g).astype(np.float32),)), X)
    (f,) = r.by_kind(gv.Kind.WRONG_DTYPE)
    assert f.message.startswith("VJP: the cotangent of argument 0 has dtype float32; expected float64, as its argument")
    assert "astype(x.dtype)" in f.message
    assert f.level == "error"


def test_wrong_type_of_tangent_torch():
    import torch

    rule = gv.Rule(lambda x: x * x, jvp=lambda p, t: (2 * p[0] * t[0]).numpy(), vjp=lambda p, g: (2 * p[0] * g,))
    r = gv.check(rule, torch.tensor(X))
    (f,) = r.by_kind(gv.Kind.WRONG_DTYPE)
    assert f.message == "JVP: the output tangent is a numpy.ndarray; expected a torch array"


def test_nondeterminism():
    rng = np.random.default_rng(0)
    noisy = gv.Rule(lambda x: x * x + 1e-3 * rng.standard_normal(x.shape))
    r = gv.check(noisy, X)
    (f,) = r.by_kind(gv.Kind.NONDETERMINISM)
    assert f.level == "error"
    assert "two evaluations of fn at the same inputs differ" in f.message


def test_mutation_is_reported_and_caller_array_untouched():
    def inplace(x):
        x *= 2.0
        return x

    x = X.copy()
    r = gv.check(inplace, x)
    (f,) = r.by_kind(gv.Kind.MUTATION)
    assert f.level == "error" and f.argument == 0
    assert "fn mutates argument 0: 3 element(s) changed in place" in f.message
    np.testing.assert_array_equal(x, X)


def test_mutation_torch_caller_tensor_untouched():
    import torch

    def inplace(x):
        return x.mul_(2.0)

    t = torch.tensor(X, requires_grad=False)
    r = gv.check(inplace, t)
    assert r.by_kind(gv.Kind.MUTATION)
    np.testing.assert_array_equal(t.numpy(), X)


def test_mode_unavailable_torch_function_without_jvp():
    import torch

    class Square(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return 2 * x * g

    r = gv.check(Square.apply, torch.tensor(X))
    assert r.ok, str(r)
    (f,) = r.by_kind(gv.Kind.MODE_UNAVAILABLE)
    assert f.level == "warning" and "JVP is unavailable" in f.message and "jvp" in f.message
    assert r.modes["VJP"] == "checked"


def test_mode_unavailable_plain_numpy_says_so():
    strict = gv.check(lambda x: x * x, X)
    assert not strict.ok and strict.by_kind(gv.Kind.NOTHING_CHECKED)
    r = gv.check(lambda x: x * x, X, allow_unchecked=True)
    assert r.ok
    msgs = [f.message for f in r.by_kind(gv.Kind.MODE_UNAVAILABLE)]
    assert len(msgs) == 2 and all("numpy has no automatic differentiation" in m for m in msgs)
    assert all("gv.Rule" in m for m in msgs)


def test_rule_without_vjp_does_not_fall_back_to_torch_autograd():
    import torch

    r = gv.check(gv.Rule(lambda x: x * x, jvp=lambda p, t: 2 * p[0] * t[0]), torch.tensor(X))
    assert r.modes["VJP"] == "unavailable" and r.modes["JVP"] == "checked"
    assert "the gv.Rule has no vjp rule" in r.by_kind(gv.Kind.MODE_UNAVAILABLE)[0].message


def test_nondifferentiable_point_is_info_and_inconclusive():
    r = gv.check(
        gv.Rule(np.abs, jvp=lambda p, t: np.sign(p[0]) * t[0], vjp=lambda p, g: (np.sign(p[0]) * g,)),
        np.array([0.0, 1.0]),
    )
    assert r.ok and r.inconclusive
    (f,) = r.by_kind(gv.Kind.NONDIFFERENTIABLE)
    assert f.level == "info" and f.input_index == (0,)
    assert f.values["lower"] == pytest.approx(-1, abs=1e-6) and f.values["upper"] == pytest.approx(1, abs=1e-6)


def test_fd_unreliable_where_fn_is_undefined_beside_the_point():
    half_sqrt = lambda x: np.where(x >= 0, np.sqrt(np.abs(x)), np.nan)  # noqa: E731
    with np.errstate(invalid="ignore"):
        r = gv.check(half_sqrt, np.array([0.0, 4.0]))
    (f,) = r.by_kind(gv.Kind.FD_UNRELIABLE)
    assert f.level == "warning" and "finite differences cannot decide" in f.message
    assert r.inconclusive


def test_nonfinite_output_is_excluded():
    with np.errstate(divide="ignore"):
        r = gv.check(
            gv.Rule(np.log, jvp=lambda p, t: t[0] / p[0], vjp=lambda p, g: (g / p[0],)), np.array([0.0, 1.0, 2.0])
        )
    (f,) = r.by_kind(gv.Kind.NONFINITE_OUTPUT)
    assert f.level == "warning" and "NaN/inf at 1 element(s)" in f.message


def test_exception_in_rule_has_traceback():
    def bad_vjp(p, g):
        raise ZeroDivisionError("oops in my rule")

    r = gv.check(square_rule(vjp=bad_vjp), X)
    (f,) = r.by_kind(gv.Kind.EXCEPTION)
    assert f.level == "error"
    assert f.message == "ZeroDivisionError raised while the vjp rule: oops in my rule"
    assert "bad_vjp" in f.detail and "ZeroDivisionError" in f.detail
    assert r.modes["JVP"] == "checked"


def test_exception_in_fn_stops_cleanly(backend):
    def broken(x):
        raise RuntimeError("fn is broken")

    r = gv.check(broken, make(backend, X))
    assert not r.ok
    (f,) = r.by_kind(gv.Kind.EXCEPTION)
    assert "RuntimeError raised while evaluating fn: fn is broken" == f.message


def _scaled_square(vjp_factor, jvp=True):
    """x^2 whose VJP is 2 x g times ``vjp_factor(x)``."""
    rules = {"vjp": lambda p, g: (2 * p[0] * g * vjp_factor(p[0]),)}
    if jvp:
        rules["jvp"] = lambda p, t: 2 * p[0] * t[0]
    return gv.Rule(lambda x: x * x, **rules)


@pytest.mark.parametrize("full", [True, False], ids=["full Jacobian", "directional"])
def test_a_mismatch_of_an_approximation_says_its_relative_size_and_the_rtol_that_accepts_it(full):
    """A rule off by 3 parts in 10^6 everywhere (an iterative solver's
    tolerance) is still an error; the report says how large it is against
    the values, and the rtol it names does accept it."""
    x = np.linspace(0.5, 2.0, 6 if full else 80)
    rule = _scaled_square(lambda x: 1 + 3e-6 * np.ones_like(x))
    r = gv.check(rule, x, full=full)
    (f,) = r.errors
    assert f.relative == pytest.approx(3e-6, rel=1e-3)
    (line,) = [s for s in str(r).splitlines() if "relative:" in s]
    assert "small enough for an approximation by design" in line and "opposite signs" not in line
    rtol = float(line.split("rtol=")[1].split()[0])
    assert 3e-6 <= rtol <= 3.1e-6
    assert gv.check(rule, x, full=full, rtol=rtol).ok


@pytest.mark.parametrize(
    ("factor", "says"),
    [
        (lambda x: -np.ones_like(x), "opposite signs (a sign error, not an approximation)"),
        (lambda x: np.where(x > 1.5, 0.0, 1.0), "one of the two is 0 (a missing term or rule"),
        (lambda x: 1.5 * np.ones_like(x), "a wrong term or factor"),
    ],
    ids=["sign", "missing", "factor"],
)
def test_a_wrong_rule_reads_as_wrong_not_as_an_approximation(factor, says):
    r = gv.check(_scaled_square(factor), np.linspace(0.5, 2.0, 6))
    assert not r.ok
    text = str(r)
    assert says in text and "rtol=" not in text, text


def test_no_relative_size_for_a_pair_that_is_no_derivative_against_its_reference():
    assert (
        gv.Finding(
            kind=gv.Kind.MISMATCH,
            level="error",
            message="",
            pair=("batched VJP", "VJP"),
            values={"batched VJP": 1.0, "VJP": 1.1},
            error=0.1,
            bound=0.0,
        ).relative
        is None
    )
    assert gv.Finding(
        kind=gv.Kind.MISMATCH,
        level="error",
        message="",
        pair=("VJP", "FD"),
        values={"VJP": 1.0, "FD": 1.1},
        error=0.1,
        bound=0.0,
    ).relative == pytest.approx(0.1 / 1.1)


def test_a_projected_adjoint_finding_says_its_size():
    """The adjoint identity's finding along random directions is located on an
    element of J^T v, whose values are the VJP and its reference (not a JVP):
    the size line reads them and the rtol it suggests is for the VJP."""
    from gradverify._result import render_finding

    f = gv.Finding(
        kind=gv.Kind.MISMATCH,
        level=gv.Level.ERROR,
        message="reverse mode disagrees with forward mode (adjoint identity <v, J u> = <J^T v, u>)",
        pair=("JVP", "VJP"),
        argument=0,
        input_index=(2, 3),
        values={"VJP": 0.2463, "FD": 0.24629754},
        error=2.46e-6,
        bound=1e-9,
    )
    text = "\n".join(render_finding(f))
    assert "relative: 9.99e-06 of the larger value" in text and "rtol=1e-05" in text
