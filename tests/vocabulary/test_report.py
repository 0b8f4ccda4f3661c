"""The human report: verdict first, the worst element, inputs, a reproduction;
it fits on a screen."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import gradverify as gv

from .._helpers import flipped_tanh_bias, sine_function


def test_failure_report_fits_a_screen_and_names_the_element():
    rng = np.random.default_rng(0)
    x, b = rng.standard_normal((500, 10)), rng.standard_normal(10)
    r = gv.check(flipped_tanh_bias("numpy", 10, 1234), x, b, seed=5)
    text = str(r)
    lines = text.splitlines()
    assert lines[0].startswith("gradverify FAILED:") and "1 error(s)" in lines[0]
    assert len(lines) <= 30 and max(map(len, lines)) <= 400
    assert "arg0[123, 4]" in text
    assert "VJP = " in text and "FD = " in text
    assert "arg0: float64[500x10] in [" in text
    assert lines[-1] == (
        "  reproduce: gv.check(fn, arg0, arg1, seed=5)  (fn: the gv.Rule checked; arg0, ...: the inputs above)"
    )
    assert "bound:" in text and "Hoeffding" in text


def test_passing_report_is_short():
    rule = gv.Rule(np.sin, jvp=lambda p, t: np.cos(p[0]) * t[0], vjp=lambda p, g: (np.cos(p[0]) * g,))
    lines = str(gv.check(rule, np.array([0.1, 0.2]))).splitlines()
    assert lines[0].startswith("gradverify PASSED: ")
    assert len(lines) <= 6


def test_traceback_is_trimmed():
    def deep(n):
        if n == 0:
            raise ValueError("bottom")
        return deep(n - 1)

    r = gv.check(lambda x: deep(30), np.ones(2))
    text = str(r)
    assert "ValueError: bottom" in text
    assert len(text.splitlines()) <= 25


def test_to_dict_is_plain_json():
    import json

    r = gv.check(
        gv.Rule(np.abs, jvp=lambda p, t: np.sign(p[0]) * t[0], vjp=lambda p, g: (np.sign(p[0]) * g,)),
        np.array([0.0, 1.0]),
    )
    d = json.loads(json.dumps(r.to_dict()))
    assert d["ok"] is True and d["inconclusive"] is True
    assert d["findings"][0]["kind"] == "nondifferentiable"


def _wrong_sine(x):
    return np.sin(x)


WRONG_SINE = gv.Rule(np.sin, jvp=lambda p, t: np.cos(p[0]) * t[0], vjp=lambda p, g: (1.5 * np.cos(p[0]) * g,))


def test_the_reproducer_runs_as_written_or_says_what_stands_in():
    import functools

    x = np.array([0.25, -0.5])
    r = gv.check(WRONG_SINE, x, seed=3, name="sine, wrong VJP (demo)")
    # small arguments are literals; name= is an option, not code
    assert r.reproduce == (
        "gv.check(fn, np.array([0.25, -0.5], dtype=np.float64), seed=3, name='sine, wrong VJP (demo)')"
        "  (fn: the gv.Rule of sin checked)"
    )
    again = eval(r.reproduce.split("  (")[0], {"gv": gv, "np": np, "fn": WRONG_SINE})  # noqa: S307
    assert not again.ok and [e.values for e in again.errors] == [e.values for e in r.errors]
    # a named function is written by its name
    assert gv.check(_wrong_sine, x).reproduce.startswith("gv.check(_wrong_sine, np.array(")
    # a lambda, a partial and large arguments are said as such
    assert gv.check(lambda a: np.sin(a), x).reproduce.endswith("  (fn: the lambda checked)")
    part = gv.check(functools.partial(np.multiply, 2.0), x).reproduce
    assert part.endswith("(fn: the functools.partial of multiply checked)")
    big = gv.check(_wrong_sine, np.linspace(0.0, 1.0, 100)).reproduce
    assert big == "gv.check(_wrong_sine, arg0, seed=0)  (arg0, ...: the inputs above)"


def test_a_frameworks_builtin_is_named_as_it_is_written():
    """torch.sin's qualified name is its private class's
    (_VariableFunctionsClass.sin): the report and the reproducer name it
    torch.sin, which runs as written."""
    torch = pytest.importorskip("torch")
    x = torch.tensor([0.25, -0.5], dtype=torch.float64)
    r = gv.check(torch.sin, x)
    assert r.function == "torch.sin" and r.reproduce.startswith("gv.check(torch.sin, torch.tensor(")
    again = eval(r.reproduce, {"gv": gv, "torch": torch})  # noqa: S307
    assert again.ok and again.function == "torch.sin"
    # a builtin of a private module is named where it is published, where
    # its own name differs (torch.special.expit is torch._C._special.special_expit)
    for fn, name in (
        (torch.special.expit, "torch.special.expit"),
        (torch.nn.functional.logsigmoid, "torch.nn.functional.logsigmoid"),
        (torch.linalg.vector_norm, "torch.linalg.vector_norm"),
        (torch.fft.fft, "torch.fft.fft"),
    ):
        r = gv.check(fn, x)
        assert r.function == name and r.reproduce.startswith(f"gv.check({name}, torch.tensor("), r.reproduce
        assert eval(r.reproduce, {"gv": gv, "torch": torch}).function == name  # noqa: S307
    # a method of a class of a private module by the public class it is
    # published as (torch._C.TensorBase.add, torch._tensor.Tensor.norm)
    for fn, args in ((torch.Tensor.add, (x, x)), (torch.Tensor.norm, (x,)), (torch.Tensor.sin, (x,))):
        r = gv.check(fn, *args)
        name = f"torch.Tensor.{fn.__name__}"
        assert r.function == name and r.reproduce.startswith(f"gv.check({name}, torch.tensor("), r.reproduce
        assert eval(r.reproduce, {"gv": gv, "torch": torch}).function == name  # noqa: S307
    # a builtin with a name of its own keeps it, as a Python builtin does
    assert gv.check(torch.nn.functional.softplus, x).function == "softplus"
    # an autograd.Function's apply by its class, a private one's too (not
    # the Function.apply it inherits, which is not what was checked)

    Sine = sine_function()

    class _Sine(Sine):
        pass

    for cls in (Sine, _Sine):
        r = gv.check(cls.apply, x)
        assert r.function == f"{cls.__name__}.apply" and r.reproduce.startswith(f"gv.check({cls.__name__}.apply, ")
        assert eval(r.reproduce, {"gv": gv, "torch": torch, cls.__name__: cls}).ok  # noqa: S307
    assert gv.check(abs, x).function == "abs"


def test_naming_a_method_runs_no_class_code_and_keeps_no_instance(monkeypatch):
    """Finding the public class a method is published as looks classes up
    statically: a module attribute that warns when asked (torch.distributed's
    deprecated reduce_op) says nothing under warnings as errors. A bound
    method (an instance's) is never looked up, so no name cache holds the
    instance: it is freed once the caller lets it go."""
    import gc
    import importlib
    import types
    import warnings
    import weakref

    torch = pytest.importorskip("torch")
    importlib.import_module("torch.distributed")  # (its deprecated attribute, among torch's modules)
    fx = importlib.import_module("torch.fx")

    from gradverify._check import validate

    validate._published_method.cache_clear()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert validate.function_name(fx.Tracer.trace) == "torch.fx.Tracer.trace"
    private = types.ModuleType("gradverify_test_lib._net")
    exec("class Net:\n    def forward(self, x):\n        return x * 2.0\n", private.__dict__)  # noqa: S102
    monkeypatch.setitem(sys.modules, private.__name__, private)
    net = private.Net()
    alive = weakref.ref(net)
    x = torch.tensor([0.25, -0.5], dtype=torch.float64)
    assert gv.check(net.forward, x).function == "Net.forward"
    del net
    gc.collect()
    assert alive() is None
