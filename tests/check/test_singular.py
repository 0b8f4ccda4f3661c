"""AD's NaN/inf where fn's output is finite: inconclusive where fn is not
differentiable (FD finds no derivative either), an error where FD finds one;
the elements beside such a point still compared."""

import numpy as np
import pytest

import gradverify as gv

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def sqrt_rule(wrong_at: float | None = None):
    """sqrt with its rules (0.5 / sqrt(x): inf at 0); ``wrong_at``: the
    forward rule off by 10% where x equals it."""

    def jvp(p, t):
        d = 0.5 / np.sqrt(p[0])
        if wrong_at is not None:
            d = np.where(p[0] == wrong_at, 1.1 * d, d)
        return d * t[0]

    return gv.Rule(np.sqrt, jvp=jvp, vjp=lambda p, g: (0.5 / np.sqrt(p[0]) * g,))


def nonfinite(r, level):
    return [f for f in r.findings if f.kind == gv.Kind.NONFINITE_GRADIENT and f.level == level]


@pytest.mark.parametrize("n", [3, 200], ids=["full", "directional"])
def test_sqrt_at_zero_is_inconclusive_there_and_says_so(n):
    x = np.linspace(0.5, 2.0, n)
    x[0] = 0.0
    r = gv.check(sqrt_rule(), x)
    assert r.ok, str(r)
    (f,) = nonfinite(r, "warning")
    assert "not differentiable" in f.message and "inf" in f.message
    if n == 3:
        assert f.input_index == (0,) and f.output_index == (0,)


@pytest.mark.parametrize("n", [3, 200], ids=["full", "directional"])
def test_a_wrong_rule_beside_the_singular_point_is_still_caught(n):
    x = np.linspace(0.5, 2.0, n)
    x[0] = 0.0
    r = gv.check(sqrt_rule(wrong_at=x[-1]), x)
    assert not r.ok
    (m,) = r.by_kind(gv.Kind.MISMATCH)
    assert m.pair[0] in ("JVP", "VJP") and m.input_index == (n - 1,)


@pytest.mark.parametrize("n", [3, 200], ids=["full", "directional"])
def test_nan_where_fd_finds_a_derivative_is_an_error_with_the_fd_value(n):
    # the classic: where(x > 0, sqrt(x), 0) has derivative 0 at x < 0, and its
    # reverse mode multiplies the zero cotangent by sqrt's NaN slope there
    rule = gv.Rule(
        lambda x: np.where(x > 0, np.sqrt(np.abs(x)), 0.0),
        jvp=lambda p, t: np.where(p[0] > 0, 0.5 / np.sqrt(np.abs(p[0])), 0.0) * t[0],
        vjp=lambda p, g: (np.where(p[0] > 0, 0.5 / np.sqrt(np.abs(p[0])), 0.0) * g + 0.0 * np.sqrt(p[0]),),
    )
    r = gv.check(rule, np.concatenate([[-1.0], np.linspace(1.0, 2.0, n - 1)]))
    assert not r.ok
    (f,) = nonfinite(r, "error")
    assert f.pair == ("VJP", "FD") and f.input_index == (0,)
    assert np.isnan(f.values["VJP"]) and f.values["FD"] == 0.0
    assert "finite differences find a derivative" in f.message
    assert r.modes["VJP"] == "failed" and r.modes["JVP"] == "checked"


def test_nan_in_forward_mode_where_fd_finds_a_derivative_is_an_error():
    rule = gv.Rule(
        lambda x: x**2,
        jvp=lambda p, t: np.where(p[0] == 1.0, np.nan, 2 * p[0]) * t[0],
        vjp=lambda p, g: (2 * p[0] * g,),
    )
    r = gv.check(rule, np.array([0.5, 1.0, 2.0]))
    (f,) = nonfinite(r, "error")
    # (NaN x a zero tangent is NaN too: the whole row, each against its own FD)
    assert f.pair == ("JVP", "FD") and f.output_index == (1,) and "(3 element(s))" in f.message
    assert f.values["FD"] == pytest.approx(2.0 if f.input_index == (1,) else 0.0, abs=1e-9)
    assert r.modes["JVP"] == "failed"


def div_rule(wrong: bool = False):
    """a / b with b broadcast along rows: reverse mode sums b's column over
    the rows, and 0 x inf is NaN where a row's output is inf."""

    def vjp(p, g):
        a, b = p
        ga = g / b * (1.1 if wrong else 1.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            gb = np.sum(-g * a / b**2, axis=0)
            return ga, gb

    return gv.Rule(lambda a, b: a / b, jvp=lambda p, t: t[0] / p[1] - t[1] * p[0] / p[1] ** 2, vjp=vjp)


def test_reverse_mode_beside_infinite_outputs_is_set_aside_not_compared_with_fd():
    a = np.array([[1.0, 2.0], [3.0, 4.0]])
    b = np.array([0.0, 1.0])
    with np.errstate(divide="ignore", invalid="ignore"):
        r = gv.check(div_rule(), a, b)
        wrong = gv.check(div_rule(wrong=True), a, b)
    assert r.ok, str(r)
    assert r.by_kind(gv.Kind.NONFINITE_OUTPUT)
    assert not wrong.ok
    (m,) = wrong.by_kind(gv.Kind.MISMATCH)
    assert m.argument == 0 and m.input_index[1] == 1  # (a's column beside b = 1: finite outputs)


def fmod_of_y(x: np.ndarray, wrong: float = 1.0):
    """y -> fmod(x, y) with its rule d/dy = -trunc(x / y) (times ``wrong``
    where y > 0.5): beyond float64's range where y is the smallest normal."""

    def d(y):
        return -np.where(y > 0.5, wrong, 1.0) * np.trunc(x / y)

    return gv.Rule(lambda y: np.fmod(x, y), jvp=lambda p, t: d(p[0]) * t[0], vjp=lambda p, g: (d(p[0]) * g,))


def fmod_point(n: int, x0: float):
    # y[0] the smallest normal: -trunc(x / y) overflows at x = 5.5 and is
    # -8.4e307 at x = 1.875
    x = np.linspace(1.1, 2.3, n) + 0.013
    y = np.linspace(0.71, 0.93, n)
    x[0], y[0] = x0, 2.0**-1022
    return x, y


@pytest.mark.parametrize("x0", [5.5, 1.875], ids=["inf", "finite"])
@pytest.mark.parametrize("n", [3, 200], ids=["full", "directional"])
def test_a_derivative_beneath_every_step_is_inconclusive_and_said(n, x0):
    x, y = fmod_point(n, x0)
    r = gv.check(fmod_of_y(x), y, seed=3)
    assert r.ok, str(r)
    assert any("nearer 0 than any step" in f.message for f in r.findings), str(r)


@pytest.mark.parametrize("x0", [5.5, 1.875], ids=["inf", "finite"])
@pytest.mark.parametrize("n", [3, 200], ids=["full", "directional"])
def test_a_wrong_rule_beside_a_derivative_beneath_every_step_is_still_caught(n, x0):
    # 10% wrong at the ordinary elements: they convict it
    x, y = fmod_point(n, x0)
    r = gv.check(fmod_of_y(x, wrong=1.1), y, seed=3)
    assert not r.ok
    assert r.by_kind(gv.Kind.MISMATCH), str(r)


@pytest.mark.parametrize("wrong", [1.0, 1.1], ids=["right", "wrong"])
@pytest.mark.parametrize("x0", [1e-250, 2.0**-1022], ids=["tiny", "below-every-step"])
@pytest.mark.parametrize("n", [2, 200], ids=["full", "directional"])
def test_a_slope_fn_can_show_at_a_tiny_input_is_judged(n, x0, wrong):
    # x + x^2 at x0, its rule 10% wrong there: a slope of 1 is one fn's
    # values show over any step, even where x0 lies below every step
    x = np.linspace(0.5, 2.0, n)
    x[0] = x0

    def d(p):
        return np.where(p[0] == x0, wrong, 1.0) * (1.0 + 2.0 * p[0])

    rule = gv.Rule(lambda x: x + x * x, jvp=lambda p, t: d(p) * t[0], vjp=lambda p, g: (d(p) * g,))
    r = gv.check(rule, x, seed=3)
    assert r.ok == (wrong == 1.0), str(r)
    assert not any("nearer 0 than any step" in f.message for f in r.findings), str(r)


@pytest.mark.parametrize("x", [[1e-305, 3e-306], [1e-301], [2.0**-1022, 1e-303, 5e-302]])
def test_a_wrong_slope_at_inputs_all_below_every_step_is_still_caught(x):
    # every value tiny: an ordinary slope (3 for 2) is one finite differences show
    rule = gv.Rule(lambda x: 2.0 * x, jvp=lambda p, t: 3.0 * t[0], vjp=lambda p, g: (3.0 * g,))
    r = gv.check(rule, np.array(x), seed=3)
    assert not r.ok and r.by_kind(gv.Kind.MISMATCH), str(r)
