"""``gradverify write``: a real temporary project's fixed-point gradient
tests recorded (``pytest --gradverify-replace=record``), written into
property-based tests, and those run with pytest - a rule wrong only where
the recorded points never went is caught, a correct one passes, every
recorded point replays exactly; and a package's jaxtyping-annotated rules
written without a recording."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import numpy as np
import pytest

pytest_plugins = ["pytester"]

pytestmark = pytest.mark.slow

torch = pytest.importorskip("torch")
jax = pytest.importorskip("jax")

OPS = '''
import jax.numpy as jnp
import torch


def _swish(forget_bias):
    class BiasSwish(torch.autograd.Function):
        """y = z sigmoid(z) with z = x + b."""

        @staticmethod
        def forward(ctx, x, b):
            ctx.save_for_backward(x, b)
            z = x + b
            return z * torch.sigmoid(z)

        @staticmethod
        def backward(ctx, g):
            x, b = ctx.saved_tensors
            z = x if forget_bias else x + b  # (the seed bug: the bias forgotten)
            s = torch.sigmoid(z)
            d = g * (s + z * s * (1 - s))
            return d, d.sum(0)

    return BiasSwish


BiasSwish = _swish(False)
BiasSwish.__qualname__ = "BiasSwish"
WrongSwish = _swish(True)
WrongSwish.__qualname__ = WrongSwish.__name__ = "WrongSwish"


def dense(params, x):
    return jnp.tanh(x @ params["w"] + params["b"])
'''

SUITE = """
import jax.numpy as jnp
import numpy as np
import torch
from jax.test_util import check_grads
from torch.autograd import gradcheck

from mylib.ops import BiasSwish, WrongSwish, dense


def point(shape):
    x = torch.linspace(-2, 2, int(np.prod(shape)), dtype=torch.float64).reshape(shape).requires_grad_()
    return x, torch.zeros(shape[-1], dtype=torch.float64, requires_grad=True)


def test_swish():
    assert gradcheck(BiasSwish.apply, point((4, 3)))
    assert gradcheck(BiasSwish.apply, point((2, 5)))


def test_wrong_swish():  # passes: at b = 0 the wrong rule is right
    assert gradcheck(WrongSwish.apply, point((4, 3)))


def test_dense():
    params = {"w": jnp.asarray(np.linspace(-1, 1, 6).reshape(3, 2)), "b": jnp.zeros(2)}
    check_grads(dense, (params, jnp.linspace(-1, 1, 12).reshape(4, 3)), order=2, modes=["rev"])


def test_closure():
    scale = 2.0

    def f(x):
        return torch.sin(x) * scale

    assert gradcheck(f, (torch.ones(3, dtype=torch.float64, requires_grad=True),))
"""


def _project(pytester):
    pytester.mkpydir("mylib")
    (pytester.path / "mylib" / "ops.py").write_text(OPS)
    pytester.makepyfile(test_suite=SUITE)
    pytester.makeini("[pytest]\npythonpath = .\n")


def _write(pytester, target, output, *extra):
    return subprocess.run(
        [sys.executable, "-m", "gradverify.cli", "write", str(target), "-o", str(output), *extra],
        cwd=pytester.path, capture_output=True, text=True, check=False,
    )  # fmt: skip


def _module(path):
    spec = importlib.util.spec_from_file_location(f"written_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_recorded_fixed_points_become_tests_that_catch_the_bias_bug(pytester):
    _project(pytester)
    recorded = pytester.runpytest_subprocess("--gradverify-replace=record", "-p", "no:cacheprovider", "test_suite.py")
    recorded.assert_outcomes(passed=4)  # (the wrong rule passes its fixed point)
    out = pytester.path / "tests" / "test_gradients_properties.py"
    done = _write(pytester, "gradverify-records", out, "--max-examples", "8")
    assert done.returncode == 0, done.stderr
    text = out.read_text()
    # what it wrote, and what not and why
    assert "test_bias_swish_apply" in done.stdout and "test_wrong_swish_apply" in done.stdout
    assert "test_dense" in done.stdout
    assert "test_closure.<locals>.f: defined inside test_closure (a closure)" in done.stdout
    assert "Not written:\n  - test_closure.<locals>.f: defined inside test_closure (a closure)" in text
    # shapes varied where the function took several, the pytree kept, the bias drawn off 0
    assert "st.one_of(" in text and "(2, 5)" in text and "st.fixed_dictionaries(" in text
    assert 'arrays("torch", "float64", (3,), min_value=-1.5, max_value=1.5)' in text
    lint = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--isolated", str(out)], capture_output=True, text=True
    )
    assert lint.returncode == 0, lint.stdout

    # the written module's examples are the recorded points, exactly
    pytester.syspathinsert()
    module = _module(out)
    saved = sorted((pytester.path / "gradverify-records" / "points").glob("*.npz"))
    recorded_x = {np.load(f)["[0]"].tobytes() for f in saved if {"[0]", "[1]"} <= set(np.load(f).files)}
    examples = module.bias_swish_apply_examples() + module.wrong_swish_apply_examples()
    assert {e[0].numpy().tobytes() for e in examples} == recorded_x
    assert all(e[0].dtype == torch.float64 for e in examples)
    ((params, x),) = module.dense_examples()  # (the suite ran with x64 off: float32, as it called)
    assert params["w"].dtype == np.float32 and x.dtype == np.float32
    np.testing.assert_array_equal(np.asarray(params["w"]), np.linspace(-1, 1, 6, dtype=np.float32).reshape(3, 2))
    (dense_point,) = [np.load(f) for f in saved if "[0]['w']" in np.load(f).files]
    assert np.asarray(x).tobytes() == dense_point["[1]"].tobytes()

    run = pytester.runpytest_subprocess(str(out), "-p", "no:cacheprovider", "--gradverify-report", "written-report")
    run.assert_outcomes(passed=2, failed=1)
    report = json.loads((pytester.path / "written-report" / "gradverify-pytest.json").read_text())
    by_test = {r["nodeid"].split("::")[-1]: r for r in report["records"]}
    assert by_test["test_bias_swish_apply"]["ok"] and by_test["test_dense"]["ok"]
    wrong = by_test["test_wrong_swish_apply"]
    assert not wrong["ok"] and wrong["examples_run"] > 1  # (the recorded point passed first)
    shrunk = np.load(wrong["npz"])
    assert np.any(shrunk["arg1"] != 0)  # the counterexample has a bias that is not 0


FAILING_AT_THE_POINT = """
import torch
from torch.autograd import gradcheck

from mylib.ops import WrongSwish


def test_wrong_at_its_point():
    x = torch.tensor([[0.5, -1.25]], dtype=torch.float64, requires_grad=True)
    b = torch.tensor([0.75, 2.0], dtype=torch.float64, requires_grad=True)
    assert not gradcheck(WrongSwish.apply, (x, b), raise_exception=False)
"""


def test_a_recorded_point_that_fails_is_the_counterexample_exactly(pytester):
    _project(pytester)
    pytester.makepyfile(test_point=FAILING_AT_THE_POINT)
    pytester.runpytest_subprocess("--gradverify-replace=record", "-p", "no:cacheprovider", "test_point.py")
    out = pytester.path / "test_written.py"
    assert _write(pytester, "gradverify-records", out).returncode == 0
    run = pytester.runpytest_subprocess(str(out), "-p", "no:cacheprovider", "--gradverify-report", "rep")
    run.assert_outcomes(failed=1)
    record = json.loads((pytester.path / "rep" / "gradverify-pytest.json").read_text())["records"][0]
    assert record["examples_run"] == 1  # (the @example, unshrunk)
    point = np.load(record["npz"])
    np.testing.assert_array_equal(point["arg0"], [[0.5, -1.25]])
    np.testing.assert_array_equal(point["arg1"], [0.75, 2.0])


TYPED = """
import jax
import jax.numpy as jnp
import torch
from jaxtyping import Array, Float
from torch import Tensor


def _swish(forget_bias):
    class Swish(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x: Float[Tensor, "batch n"], b: Float[Tensor, "n"]) -> Float[Tensor, "batch n"]:
            ctx.save_for_backward(x, b)
            z = x + b
            return z * torch.sigmoid(z)

        @staticmethod
        def backward(ctx, g):
            x, b = ctx.saved_tensors
            z = x if forget_bias else x + b
            s = torch.sigmoid(z)
            d = g * (s + z * s * (1 - s))
            return d, d.sum(0)

    return Swish


Swish = _swish(False)
Swish.__qualname__ = "Swish"
WrongSwish = _swish(True)
WrongSwish.__qualname__ = WrongSwish.__name__ = "WrongSwish"


@jax.custom_vjp
def scaled(x: Float[Array, "*batch k"], w: Float[Array, "k"]) -> Float[Array, "*batch k"]:
    return jnp.sin(x) * w


def _fwd(x, w):
    return scaled(x, w), (x, w)


def _bwd(res, g):
    x, w = res
    return g * jnp.cos(x) * w, (g * jnp.sin(x)).reshape(-1, x.shape[-1]).sum(0)


scaled.defvjp(_fwd, _bwd)


class Plain(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return 2 * x

    @staticmethod
    def backward(ctx, g):
        return 2 * g
"""


def test_a_package_is_written_from_its_jaxtyping_annotations(pytester):
    pytester.mkpydir("typedlib")
    (pytester.path / "typedlib" / "__init__.py").write_text(TYPED)
    pytester.makeini("[pytest]\npythonpath = .\n")
    out = pytester.path / "test_typed.py"
    done = _write(pytester, "typedlib", out, "--max-examples", "6")
    assert done.returncode == 0, done.stderr
    assert "1 test(s) fail until given what their signatures do not say (TODO):\n  Plain.apply" in done.stdout
    text = out.read_text()
    # a dimension several arguments name is drawn once; *batch as a tuple
    assert 'draw(arrays("torch", "float64", (batch, n))), draw(arrays("torch", "float64", (n,)))' in text
    assert "(*batch, k)" in text and "TODO(gradverify): the shapes of x" in text
    lint = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--isolated", str(out)], capture_output=True, text=True
    )
    assert lint.returncode == 0, lint.stdout
    run = pytester.runpytest_subprocess(str(out), "-p", "no:cacheprovider", "-rA")
    run.assert_outcomes(passed=2, failed=2)
    run.stdout.fnmatch_lines(["*PASSED*test_swish_apply*", "*PASSED*test_scaled*", "*FAILED*test_wrong_swish_apply*"])
    run.stdout.fnmatch_lines(["*give the shapes of the arguments of Plain.apply in plain_apply_args()*"])
