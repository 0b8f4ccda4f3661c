"""Misuse met where users meet it: each message names the call, what it
expected, what it found and the fix (an autograd.Function class, fn's own
keywords, another checker's keywords, a near-miss keyword, a framework's
hundred-line error)."""

from __future__ import annotations

import inspect
import json

import pytest
from hypothesis import strategies as st

import gradverify as gv
from gradverify.strategies import arrays

from .._helpers import sine_function

torch = pytest.importorskip("torch")


Sine = sine_function()


def scaled_sine(x, beta=1.0):
    return (beta * x).sin()


X = torch.linspace(-1.0, 1.0, 5, dtype=torch.float64)
STRATEGY = st.tuples(arrays("torch", shape=(3,)))


def test_a_function_class_is_told_to_pass_its_apply():
    with pytest.raises(gv.ArgumentTypeError, match=r"class Sine itself.*Fix: pass Sine\.apply"):
        gv.check(Sine, X)
    with pytest.raises(gv.ArgumentTypeError, match=r"gv\.verify\(fn, \.\.\.\).*pass Sine\.apply"):
        gv.verify(Sine, STRATEGY)
    assert gv.check(Sine.apply, X).ok  # (the fix works)


def test_fns_keywords_are_told_to_close_over_them():
    with pytest.raises(
        gv.ArgumentTypeError, match=r"gv\.check\(\) keyword 'beta'.*functools\.partial\(scaled_sine, beta="
    ):
        gv.check(scaled_sine, X, beta=2.0)
    import functools

    assert gv.check(functools.partial(scaled_sine, beta=2.0), X).ok  # (the fix works)


@pytest.mark.parametrize(
    ("keyword", "says"),
    [
        ("eps", r"no eps to set.*gradverify\.torch\.gradcheck or gradverify\.jax\.check_grads, which take them"),
        ("raise_exception", r"gv\.assert_gradients"),
        ("fast_mode", r"full=False"),
        ("check_batched_grad", r"batched=True"),
        ("check_forward_ad", r"every mode fn has is checked by default.*modes=\('VJP',\) checks reverse mode alone"),
    ],
)
def test_another_checkers_keyword_says_what_gradverify_does_instead(keyword, says):
    with pytest.raises(gv.ArgumentTypeError, match=rf"keyword '{keyword}'.*another checker.*{says}"):
        gv.check(torch.sin, X, **{keyword: 1e-6})


def test_near_misses_get_did_you_mean_in_the_calls_own_name():
    with pytest.raises(gv.ArgumentTypeError, match=r"gv\.check\(\) keyword 'sead'.*did you mean 'seed'\?"):
        gv.check(torch.sin, X, sead=1)
    with pytest.raises(gv.ArgumentTypeError, match=r"gv\.assert_gradients\(\) keyword 'atoll'.*did you mean 'atol'\?"):
        gv.assert_gradients(torch.sin, X, atoll=1e-3)
    with pytest.raises(gv.ArgumentTypeError) as info:
        gv.verify(torch.sin, STRATEGY, max_example=5)
    assert "gv.verify() keyword 'max_example'" in str(info.value)
    assert "did you mean 'max_examples'?" in str(info.value)
    assert "check()" not in str(info.value)
    # a keyword check() takes is still passed through verify
    assert gv.verify(torch.sin, STRATEGY, max_examples=3, directions=1).ok


def test_the_signatures_are_unchanged_by_the_keyword_check():
    names = list(inspect.signature(gv.check).parameters)
    assert names[:3] == ["fn", "args", "wrt"] and "nondet_tol" in names
    assert inspect.signature(gv.check).parameters["args"].kind is inspect.Parameter.VAR_POSITIONAL
    assert gv.check.__name__ == "check" and "rounding model" in gv.check.__doc__


def test_a_frameworks_long_error_is_quoted_to_its_first_lines():
    listing = "\n".join(f"Backend{i}: registered at kernels.cpp:{i} [kernel]" for i in range(90))

    def fails(x):
        raise NotImplementedError(f"Could not run 'aten::foo' with arguments from the 'CPU' backend.\n\n{listing}")

    r = gv.check(fails, X)
    (found,) = r.by_kind(gv.Kind.EXCEPTION)
    assert found.message.endswith("'CPU' backend. [91 more lines in the JSON record]")
    report = str(r)
    assert len(report.splitlines()) < 25 and "Backend3:" not in report
    assert "(92 lines, the first above; all in the JSON record)" in report
    assert "Backend89: registered" in json.dumps(r.to_dict())

    # a short error is quoted whole
    def short(x):
        raise ValueError("x must be positive")

    assert gv.check(short, X).by_kind(gv.Kind.EXCEPTION)[0].message.endswith("evaluating fn: x must be positive")
