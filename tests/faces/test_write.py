"""``gradverify write`` from records made in this process (as the plugin's
record mode makes them): what is written, exactly and readably; what is
refused, with why; and ``gv.verify(examples=...)``, which replays points."""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys

import numpy as np
import pytest

import gradverify as gv
from gradverify._errors import ArgumentTypeError, ArgumentValueError
from gradverify._record import described
from gradverify._write import write
from gradverify._write.records import MAX_VARIANTS, grouped, widened
from gradverify._write.source import WIDTH, Call, laid_out, literal

torch = pytest.importorskip("torch")


class Cube(torch.autograd.Function):
    """y = x^3 * w, a right rule."""

    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x**3 * w

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        return 3 * x**2 * w * g, x**3 * g


class CubeOffByOneWhereLarge(torch.autograd.Function):
    """The same with dx wrong only where |x| > 1.2 (past the recorded points)."""

    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x**3 * w

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        return torch.where(x.abs() > 1.2, 4 * x**2 * w, 3 * x**2 * w) * g, x**3 * g


def _recorded(tmp_path, calls):
    """Records of gradcheck calls [(fn, inputs, kwargs)], as the record mode writes them."""
    directory = tmp_path / "records"
    directory.mkdir()
    lines = []
    for k, (fn, inputs, kwargs) in enumerate(calls):
        record = described("gradcheck", torch.autograd.gradcheck, (fn, inputs), kwargs, directory)
        lines.append(json.dumps({"nodeid": f"tests/test_x.py::test_{k}", **record}))
    (directory / "calls-main.jsonl").write_text("\n".join(lines) + "\n")
    return directory


def _import(path):
    spec = importlib.util.spec_from_file_location(f"written_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _x(*shape, lo=-1.0, hi=1.0, dtype=torch.float64):
    n = math.prod(shape)
    return torch.linspace(lo, hi, n, dtype=dtype).reshape(shape).requires_grad_()


def test_ranges_are_widened_to_signs_and_zeros_never_recorded():
    assert widened(0.0, 0.0) == (-1.5, 1.5)  # a bias recorded at 0 is drawn off it
    assert widened(-2.0, 2.0) == (-3.0, 3.0)
    assert widened(-0.1, 3.33) == (-5.0, 5.0)
    assert widened(0.25, 4.0) == (0.12, 8.0)  # a positive range stays positive (a log, a scale)
    assert widened(0.0042, 0.99) == (0.0021, 1.0)  # an image in [0, 1] stays there
    assert widened(0.0, 0.5) == (0.0, 1.0)
    assert widened(-4.0, -0.25) == (-8.0, -0.12)
    for lo, hi in [(1e-7, 3e-7), (-9.9e5, -2.0), (0.3, 0.3), (0.5, 3.0)]:
        a, b = widened(lo, hi)
        assert a < b and a <= lo and b >= hi and (a > 0) == (lo > 0) and (b < 0) == (hi < 0)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64"])
def test_values_are_written_exactly(dtype):
    x = torch.randn(50, generator=torch.Generator().manual_seed(1), dtype=torch.float64).to(getattr(torch, dtype))
    x[3], x[4] = math.inf, math.nan
    source = laid_out(literal(x.double().tolist()), 0)
    back = torch.tensor(eval(source, {"math": math}), dtype=getattr(torch, dtype))  # noqa: S307 -- our own output
    assert torch.equal(back.nan_to_num(0.0), x.nan_to_num(0.0)) and back[4].isnan()


def test_long_source_is_laid_out_within_the_width():
    expr = Call("st.tuples(", [Call("arrays(", [f'"torch", "float64", ({k}, 3)', "min_value=-1.5"]) for k in range(9)])
    text = laid_out(expr, 4)
    assert max(len(line) for line in text.splitlines()) + 4 <= WIDTH
    assert eval(text.replace("st.tuples", "tuple_").replace("arrays", "tuple_"), {"tuple_": lambda *a, **k: a})  # noqa: S307


def test_recorded_calls_are_written_with_their_shapes_examples_and_tolerances(tmp_path):
    calls = [
        (Cube.apply, (_x(4, 3), _x(3, lo=0.5, hi=2.0)), {"atol": 1e-6}),
        (Cube.apply, (_x(2, 5), _x(5, lo=0.5, hi=2.0)), {"rtol": 1e-2}),
        (Cube.apply, (_x(2, 5), _x(5, lo=0.5, hi=2.0)), {}),  # (the same point again: one example)
    ]
    out = tmp_path / "tests" / "test_props.py"
    written = write(_recorded(tmp_path, calls), out)
    text = out.read_text()
    assert written.tests == ["test_cube_apply: Cube.apply (3 call(s), 2 example(s))"]
    # two layouts; x symmetric and wider, w kept positive; the widest tolerances; both leaves differentiated
    assert 'arrays("torch", "float64", (4, 3), min_value=-1.5, max_value=1.5)' in text
    assert 'arrays("torch", "float64", (5,), min_value=0.25, max_value=4.0)' in text
    assert "suite_tol=(1e-05, 0.01)" in text and 'wrt=["arg0", "arg1"]' in text
    module = _import(out)
    examples = module.cube_apply_examples()
    assert [tuple(e[0].shape) for e in examples] == [(4, 3), (2, 5)]
    assert torch.equal(examples[0][0], _x(4, 3).detach()) and examples[0][0].dtype == torch.float64
    strategy = module.cube_apply_args()
    from hypothesis import find

    find(strategy, lambda a: a[0].shape == (2, 5) and (a[1] != 1).all())  # (both layouts drawn)
    lint = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--isolated", str(out)], capture_output=True, text=True
    )
    assert lint.returncode == 0, lint.stdout


def test_a_rule_right_at_the_recorded_points_is_caught_at_drawn_ones(tmp_path):
    calls = [(CubeOffByOneWhereLarge.apply, (_x(3), _x(3, lo=0.5, hi=1.0)), {})]
    assert torch.autograd.gradcheck(*calls[0][:2])  # (the fixed point passes: |x| <= 1 there)
    out = tmp_path / "test_props.py"
    write(_recorded(tmp_path, calls), out)
    module = _import(out)
    args = module.cube_off_by_one_where_large_apply_args()
    res = gv.verify(
        CubeOffByOneWhereLarge.apply,
        args,
        examples=module.cube_off_by_one_where_large_apply_examples(),
        max_examples=30,
    )
    assert not res.ok and res.examples_run > 1
    assert (res.counterexample[0].abs() > 1.2).any()
    assert gv.verify(Cube.apply, args, max_examples=10).ok


def test_what_cannot_be_written_is_listed_with_why(tmp_path):
    scale = 2.0
    calls = [
        (lambda x: x * 2, (_x(3),), {}),
        (lambda x, w: Cube.apply(x, w) * scale, (_x(3), _x(3)), {}),
        (Cube.apply, (_x(3).detach(), _x(3).detach().requires_grad_(False)), {"raise_exception": False}),
    ]

    def closure(x):
        return x * scale

    calls.append((closure, (_x(3),), {}))
    records = [json.loads(line) for line in (_recorded(tmp_path, calls) / "calls-main.jsonl").read_text().splitlines()]
    subjects, unwritten = grouped(records)
    assert subjects == []
    why = sorted(u.why for u in unwritten)
    assert why == [
        "a lambda",
        "defined inside test_what_cannot_be_written_is_listed_with_why (a closure): not importable",
        "no argument is differentiated",
    ]


def test_variants_beyond_the_limit_are_not_drawn(tmp_path):
    calls = [(Cube.apply, (_x(k + 1), _x(k + 1)), {}) for k in range(MAX_VARIANTS + 2)]
    out = tmp_path / "t.py"
    written = write(_recorded(tmp_path, calls), out)
    assert f"({MAX_VARIANTS + 2} call(s), {MAX_VARIANTS + 2} example(s))" in written.tests[0]
    text = out.read_text()
    assert f"({MAX_VARIANTS},)" in text and f"({MAX_VARIANTS + 1},)" not in text.split("def cube_apply_examples")[0]


def test_large_points_are_read_back_from_a_copy_beside_the_module(tmp_path):
    calls = [(Cube.apply, (_x(6, 7, dtype=torch.float32), _x(7, dtype=torch.float32)), {})]
    records = _recorded(tmp_path, calls)
    out = tmp_path / "out" / "test_big.py"
    write(records, out)
    assert "recorded(" in out.read_text() and (tmp_path / "out" / "test_big_points").is_dir()
    import shutil

    shutil.rmtree(records)  # (the written module needs only its own copy)
    ((x, w),) = _import(out).cube_apply_examples()
    assert torch.equal(x, _x(6, 7, dtype=torch.float32).detach()) and x.dtype == torch.float32


def test_bad_records_are_refused_with_how_to_make_them(tmp_path):
    with pytest.raises(ArgumentValueError, match="record a suite first: pytest --gradverify-replace=record"):
        write(tmp_path, tmp_path / "t.py")
    (tmp_path / "calls-main.jsonl").write_text('{"function": \n')
    with pytest.raises(ArgumentValueError, match=r"calls-main.jsonl:1: .*record the suite again"):
        write(tmp_path, tmp_path / "t.py")
    assert not (tmp_path / "t.py").exists()
    done = subprocess.run(
        [sys.executable, "-m", "gradverify.cli", "write", str(tmp_path / "nothing-here"), "-o", str(tmp_path / "t.py")],
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 2 and "no such file or package" in done.stderr


def _sq(x):
    return x * x


def test_verify_replays_examples_first_and_reports_a_failing_one_unshrunk():
    from hypothesis import strategies as st

    from gradverify.strategies import arrays

    wrong_far = gv.Rule(_sq, vjp=lambda p, g: (np.where(np.abs(p[0]) > 5, 2.5, 2.0) * p[0] * g,))
    small = st.tuples(arrays("numpy", shape=(3,), min_value=-1, max_value=1))
    point = (np.array([1.0, 2.0, 6.0]),)
    res = gv.verify(wrong_far, small, max_examples=10, examples=[(np.array([0.5, 0.5, 0.5]),), point])
    assert not res.ok and res.examples_run == 2
    assert np.array_equal(res.counterexample[0], point[0])
    assert gv.verify(wrong_far, small, max_examples=10, examples=[(np.array([1.0, 2.0, 3.0]),)]).ok
    with pytest.raises(ArgumentTypeError, match=r"verify\(examples\[0\]\).*wrap a lone argument"):
        gv.verify(wrong_far, small, examples=[np.ones(3)])
    with pytest.raises(ArgumentTypeError, match=r"verify\(examples\)"):
        gv.verify(wrong_far, small, examples=(np.ones(3),)[0])


def test_a_function_called_on_reals_and_on_complex_numbers_keeps_each_range(tmp_path):
    positive = torch.tensor([0.5, 1.0, 2.0], dtype=torch.float64, requires_grad=True)
    both = torch.tensor([-1 + 2j, 0.5 - 1j, 2 + 0j], dtype=torch.complex128, requires_grad=True)
    out = tmp_path / "t.py"
    write(_recorded(tmp_path, [(torch.sqrt, (positive,), {}), (torch.sqrt, (both,), {})]), out)
    text = out.read_text()
    # (one range over both would have been symmetric: sqrt at negative reals)
    assert 'arrays("torch", "float64", (3,), min_value=0.25, max_value=4.0)' in text
    assert 'complex_arrays("torch", "complex128", (3,), max_magnitude=3.0)' in text


def test_an_activation_of_the_table_is_drawn_off_its_kinks(tmp_path):
    x = torch.linspace(-4, 4, 6, dtype=torch.float64).requires_grad_()
    out = tmp_path / "t.py"
    write(_recorded(tmp_path, [(torch.nn.functional.hardsigmoid, (x,), {}), (torch.tanh, (x,), {})]), out)
    text = out.read_text()
    assert 'arrays("torch", "float64", (6,), min_value=-6.0, max_value=6.0, kinks=(-3.0, 3.0))' in text
    assert text.count("kinks=") == 1  # (tanh has none)


def test_check_grads_tolerances_by_dtype_are_resolved_over_jaxs_defaults():
    pytest.importorskip("jax")
    from gradverify._write.recorded import _jax_tolerances

    def call(dtype, **options):
        return {"arguments": [{"kind": "array", "dtype": dtype, "differentiated": True}], "options": options}

    # (a dict by dtype as the record keeps it: the keys' reprs; bfloat16 is not numpy's own)
    by_dtype = {"<class 'jax.numpy.bfloat16'>": 0.5, "dtype('float32')": 0.01}
    assert _jax_tolerances([call("bfloat16", atol=by_dtype)]) == (0.5, 0.1)  # (rtol: jax's bfloat16 default)
    assert _jax_tolerances([call("float32", atol=by_dtype, rtol=0.03)]) == (0.01, 0.03)
    assert _jax_tolerances([call("float32"), call("float64", atol=1e-9)]) == (0.002, 0.002)  # (the widest)


def test_a_jax_number_is_drawn_as_float32_never_subnormal_there(tmp_path):
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp
    from hypothesis import given, settings
    from jax.test_util import check_grads

    directory = tmp_path / "records"
    directory.mkdir()
    record = described("check_grads", check_grads, (jnp.sin, (0.0,), 1), {}, directory)
    (directory / "calls-main.jsonl").write_text(json.dumps({"nodeid": "tests/test_x.py::test_sin", **record}) + "\n")
    out = tmp_path / "test_written.py"
    write(directory, out)
    text = out.read_text()
    assert "width=32" in text  # (jax takes the number as float32 unless x64 is on)
    module = _import(out)
    strategy = next(getattr(module, name) for name in dir(module) if name.endswith("_args"))()
    tiny = float(np.finfo(np.float32).tiny)

    @settings(max_examples=60, database=None, deadline=None)
    @given(strategy)
    def draws(args):
        (x,) = args
        value = float(x)
        assert isinstance(x, jax.Array) and value == float(np.float32(value))
        assert value == 0.0 or abs(value) >= tiny

    draws()


class Tilted(torch.nn.Module):
    """x W times a factor, then tanh or not: its extra_repr says n alone."""

    def __init__(self, n, factor=1.0, mode="plain"):
        super().__init__()
        self.n, self.factor, self._mode = n, factor, mode
        self.weight = torch.nn.Parameter(torch.randn(n, n, dtype=torch.float64))

    def extra_repr(self):
        return f"n={self.n}"

    def forward(self, x):
        y = x @ self.weight * self.factor
        return torch.tanh(y) if self._mode == "tanh" else y


class Smoothed(torch.nn.Module):
    """A fixed kernel held as a buffer alone (no parameters)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("kernel", torch.tensor([0.25, 0.5, 0.25]))
        self.register_buffer("calls", torch.tensor(0))

    def forward(self, x):
        return x * self.kernel


class Shifted(Tilted):
    """Holds n + 1 as n: its attributes build another module."""

    def __init__(self, n):
        super().__init__(n)
        self.n = n + 1


def test_a_module_is_built_again_from_its_attributes_where_that_gives_the_same_module(tmp_path):
    tilted, shifted = Tilted(3, factor=2.5, mode="tanh").eval(), Shifted(3)
    state = torch.get_rng_state()
    out = tmp_path / "test_props.py"
    write(_recorded(tmp_path, [(tilted, (_x(2, 3),), {}), (shifted, (_x(2, 3),), {})]), out)
    assert torch.equal(torch.get_rng_state(), state)  # (reading it built one: the suite's draws are kept)
    text = out.read_text()
    # the configuration extra_repr leaves out, and the mode the suite checked it in
    assert "module = Tilted(n=3, factor=2.5, mode='tanh').to(torch.float64).eval()" in text, text
    # a module of buffers alone, checked in float64, is written in float64
    (tmp_path / "buffers").mkdir()
    write(_recorded(tmp_path / "buffers", [(Smoothed().double(), (_x(3),), {})]), tmp_path / "test_buffers.py")
    assert "module = Smoothed().to(torch.float64)" in (tmp_path / "test_buffers.py").read_text()
    # attributes that build another module (weights 4 x 4) fall back to extra_repr
    records = [json.loads(line) for line in (tmp_path / "records" / "calls-main.jsonl").read_text().splitlines()]
    assert [r["function"]["built_from"] for r in records] == ["attributes", "extra_repr"]
    assert records[1]["function"]["built"] == "n=4" and "training" not in records[1]["function"]


def test_only_values_whose_repr_reads_back_are_taken_from_a_modules_attributes():
    import enum

    from gradverify._record import _literal

    class Mode(enum.IntEnum):
        A = 1

    assert _literal((1, 2.5, "a", None, [True]))
    assert not _literal(Mode.A) and not _literal(np.float64(0.5)) and not _literal(float("nan"))


class Positive(Cube):
    """Cube, for x whose first element is positive (asserted): a right rule."""

    @staticmethod
    def forward(ctx, x, w):
        assert bool(x.reshape(-1)[0] > 0), "the first element must be positive"
        return Cube.forward(ctx, x, w)


def test_written_tests_reject_the_inputs_fn_refuses_where_told(tmp_path):
    calls = [(Positive.apply, (_x(3, lo=0.5, hi=1.0), _x(3, lo=0.5, hi=1.0)), {})]
    records = _recorded(tmp_path, calls)
    out = tmp_path / "test_props.py"
    write(records, out, max_examples=20, except_=["AssertionError", "gradverify.ArgumentValueError"])
    text = out.read_text()
    assert "REFUSED = (AssertionError, gradverify.ArgumentValueError)" in text and "except_=REFUSED" in text
    module = _import(out)
    assert module.REFUSED == (AssertionError, gv.ArgumentValueError)
    # the recorded range is positive, and so is the written one; drawn over a range with both
    # signs, the inputs fn refuses are rejected (and fail without except_)
    from hypothesis import strategies as st

    from gradverify.strategies import arrays

    both = st.tuples(arrays("torch", "float64", (3,), min_value=-1.0, max_value=1.0), module.positive_apply_args())
    args = both.map(lambda a: (a[0], a[1][1]))
    refused = gv.verify(Positive.apply, args, max_examples=20, seed=2, except_=module.REFUSED)
    assert refused.ok and refused.refused > 0, str(refused)
    assert not gv.verify(Positive.apply, args, max_examples=20, seed=2).ok
    with pytest.raises(ArgumentValueError, match="exception types by name"):
        write(records, tmp_path / "test_bad.py", except_=["NoSuchError"])


class Inverted(torch.nn.Module):
    """Holds 1 / temperature as temperature: rebuilt from it, another module."""

    def __init__(self, n, temperature=1.0):
        super().__init__()
        self.n, self.temperature = n, 1.0 / temperature

    def forward(self, x):
        return x * self.temperature


def test_a_module_whose_attributes_hold_its_arguments_transformed_is_not_built_from_them():
    from gradverify._record import function_of

    said = function_of(Inverted(3, temperature=4.0))
    assert said["built_from"] == "extra_repr", said
