"""The public contract: signatures, results, errors for bad input."""

from __future__ import annotations

import types
import warnings
from contextlib import nullcontext

import numpy as np
import pytest

import gradverify as gv

from .._helpers import make


def tanh_rule(bug=False):
    def d(p):
        return 1 - np.tanh(p[0]) ** 2

    return gv.Rule(
        np.tanh,
        jvp=lambda p, t: d(p) * t[0],
        vjp=lambda p, g: ((-1 if bug else 1) * d(p) * g,),
    )


def test_public_names():
    """``__all__`` is the public namespace exactly: every public name the
    package defines (submodules aside), and nothing it does not."""
    public = {n for n in vars(gv) if not n.startswith("_") and not isinstance(getattr(gv, n), types.ModuleType)}
    assert sorted(gv.__all__) == sorted(public)
    assert len(gv.__all__) == len(set(gv.__all__))
    assert {"check", "verify", "assert_gradients", "Rule", "CheckResult", "GradientError", "Kind"} <= public
    assert issubclass(gv.GradientError, AssertionError)
    assert issubclass(gv.ArgumentTypeError, TypeError) and issubclass(gv.ArgumentValueError, ValueError)


def test_check_signature_keywords():
    r = gv.check(tanh_rule(), np.array([0.1, 0.2]), wrt=None, order=1, seed=0, rtol=None, atol=None)
    assert isinstance(r, gv.CheckResult) and r.ok and r.seed == 0


def test_assert_gradients_raises_gradient_error_with_report():
    x = np.array([0.1, 0.2, 0.3])
    assert gv.assert_gradients(tanh_rule(), x).ok
    with pytest.raises(gv.GradientError) as info:
        gv.assert_gradients(tanh_rule(bug=True), x, seed=3)
    assert isinstance(info.value, AssertionError)
    assert not info.value.result.ok
    assert str(info.value).startswith("gradverify FAILED")
    assert "seed=3" in str(info.value)


def test_same_seed_same_result_and_seed_reported(rng):
    x = rng.standard_normal(500)
    a = gv.check(tanh_rule(bug=True), x, seed=7)
    b = gv.check(tanh_rule(bug=True), x, seed=7)
    assert a.to_dict() == b.to_dict()
    assert a.seed == 7 and "seed 7" in a.strategy and "seed=7" in a.reproduce


def test_caller_tensor_with_requires_grad_untouched():
    import torch

    x = torch.tensor([0.1, -0.4, 2.0], dtype=torch.float64, requires_grad=True)
    r = gv.check(torch.tanh, x)
    assert r.ok
    assert x.grad is None and x.requires_grad


def test_integer_arguments_are_constants(backend):
    x = make(backend, np.array([0.5, -1.0, 2.0]))
    k = make(backend, np.array([1, 2, 3]))
    xp = {"numpy": np, "torch": None, "jax": None}[backend]

    def scaled(x, k):
        return x * k if xp is None else x * k.astype(x.dtype)

    if backend == "numpy":
        fn = gv.Rule(scaled, jvp=lambda p, t: t[0] * p[1], vjp=lambda p, g: (g * p[1], None))
    else:
        fn = scaled
    # (torch and jax promote the int here; jax's strict promotion refuses fn itself)
    standard = pytest.importorskip("jax").numpy_dtype_promotion("standard") if backend == "jax" else nullcontext()
    with standard:
        r = gv.check(fn, x, k)
    assert r.ok, str(r)
    assert [s.differentiable for s in r.inputs] == [True, False]


def test_wrt_selects_arguments():
    rule = gv.Rule(
        lambda x, y: x * y, jvp=lambda p, t: p[1] * t[0] + p[0] * t[1], vjp=lambda p, g: (p[1] * g, np.zeros_like(p[0]))
    )  # wrong for y
    x, y = np.array([1.0, 2.0]), np.array([3.0, 4.0])
    assert gv.check(rule, x, y, wrt=0).ok
    assert not gv.check(rule, x, y, wrt=1).ok
    assert not gv.check(rule, x, y).ok


# -- bad input ------------------------------------------------------------------------------
def test_mixed_backends_error():
    import torch

    with pytest.raises(gv.ArgumentTypeError) as e:
        gv.check(lambda a, b: a, np.ones(2), torch.ones(2))
    msg = str(e.value)
    assert "expected arrays of one backend" in msg and "numpy and torch mixed" in msg
    assert "argument 1: torch" in msg and "Fix:" in msg
    assert isinstance(e.value, TypeError)


@pytest.mark.parametrize(
    ("layout", "found", "fix"),
    [
        ("meta", "a tensor on the meta device", "materialise it with values"),
    ],
)
def test_tensors_without_readable_values_are_refused(layout, found, fix):
    import torch

    dense = torch.tensor([[1.0, 0.0], [0.0, 2.0]], dtype=torch.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (torch: sparse CSR support is in beta)
        x = {
            "coo": lambda: dense.to_sparse(),
            "csr": lambda: dense.to_sparse_csr(),
            "meta": lambda: torch.empty(2, 2, dtype=torch.float64, device="meta"),
        }[layout]()
    with pytest.raises(gv.ArgumentTypeError) as e:
        gv.check(lambda a: a * 2, x)
    msg = str(e.value)
    assert msg.startswith("argument 0: expected a dense array with values; found " + found) and fix in msg, msg


@pytest.mark.parametrize("layout", ["sparse_coo", "sparse_csr", "sparse_csc", "sparse_bsr"])
@pytest.mark.parametrize("dtype", ["float64", "complex128"])
def test_a_sparse_output_is_checked_as_its_values(layout, dtype):
    """fn's own sparse return value (a complex one too) is checked as its
    specified values, its layout said; a wrong derivative inside is caught
    at its dense index."""
    import torch

    convert = {
        "sparse_coo": lambda t: t.to_sparse(),
        "sparse_csr": lambda t: t.to_sparse_csr(),
        "sparse_csc": lambda t: t.to_sparse_csc(),
        "sparse_bsr": lambda t: t.to_sparse_bsr((1, 1)),
    }[layout]
    x = torch.tensor([[1.0, -0.3], [0.5, 2.0]], dtype=getattr(torch, dtype))  # (no zero: the pattern is every element)

    class Scale(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            return a * 2

        @staticmethod
        def backward(ctx, g):
            wrong = torch.ones_like(g)
            wrong[1, 0] = 1.5  # (one element's derivative off)
            return g * 2 * wrong

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (torch: sparse CSR support is in beta)
        r = gv.check(lambda a: convert(a * 2), x)
        bad = gv.check(lambda a: convert(Scale.apply(a)), x)
    if dtype == "complex128":
        # torch differentiates no complex to_sparse*: said, and not a pass
        assert not r.ok and r.by_kind(gv.Kind.NOTHING_CHECKED), str(r)
        assert r.modes["VJP"] == "unavailable" and "complex" in str(r), str(r)
    else:
        assert r.ok, str(r)
    assert r.output.layout == layout and r.output.specified == 4
    assert r.output.shape == ((2, 2) if dtype == "float64" else (2, 2, 2))  # (complex: its real view)
    assert any(n.startswith("sparse:") and f"the output {layout} 2x2, 4 specified" in n for n in r.notes)
    if dtype == "complex128":
        return
    assert not bad.ok
    f = bad.by_kind(gv.Kind.MISMATCH)[0]
    assert f.input_index == (1, 0) and f.output_index == (1, 0), str(bad)


@pytest.mark.parametrize(
    ("fn", "why"),
    [
        (lambda x: x[:0] * 2, "empty"),  # an op with an empty output
        (lambda x: (-2.0) ** x, "NaN or inf at every element"),  # negative bases: every output NaN
    ],
    ids=["empty output", "every output NaN"],
)
def test_a_check_that_compared_nothing_says_so(fn, why):
    """Not a pass: a nothing_checked error, the point's reason said; with
    allow_unchecked=True ok but inconclusive, and the verdict line says so;
    verify counts each such example inconclusive and is not a pass when all are."""
    import torch
    from hypothesis import strategies as st

    x = torch.tensor([0.5, 1.5], dtype=torch.float64)
    strict = gv.check(fn, x)
    assert not strict.ok and strict.by_kind(gv.Kind.NOTHING_CHECKED)
    r = gv.check(fn, x, allow_unchecked=True)
    assert r.ok and r.inconclusive
    (nothing,) = r.by_kind(gv.Kind.NOTHING_COMPARED)
    assert why in nothing.message
    assert str(r).startswith("gradverify PASSED (nothing compared):"), str(r)
    v = gv.verify(fn, st.just((x,)), max_examples=3)
    assert not v.ok and v.inconclusive == v.examples_run >= 1


def test_a_check_where_every_element_is_a_jump_compared_nothing():
    """floor at an integer: a jump at its one element - nothing compared; at
    [1, 2.5] the second element is compared (slope 0): partly inconclusive."""
    import torch

    alone = gv.check(torch.floor, torch.tensor([1.0], dtype=torch.float64), allow_unchecked=True)
    assert alone.ok and alone.by_kind(gv.Kind.NOTHING_COMPARED) and alone.by_kind(gv.Kind.DISCONTINUITY)
    assert str(alone).startswith("gradverify PASSED (nothing compared)")
    some = gv.check(torch.floor, torch.tensor([1.0, 2.5], dtype=torch.float64))
    assert some.inconclusive and not some.by_kind(gv.Kind.NOTHING_COMPARED), str(some)


def test_a_zero_tensor_gradient_is_a_zero_gradient():
    """torch.sgn's derivative is torch's storage-less ZeroTensor: read as zeros, it passes."""
    import torch

    r = gv.check(torch.sgn, torch.tensor([-1.5, 0.5, 2.0], dtype=torch.float64))
    assert r.ok and not r.inconclusive, str(r)
    assert r.modes["VJP"] == "checked"


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_nonfinite_entries_are_held_not_refused(backend, bad):
    """A non-finite entry is held fixed and said; the finite ones are
    checked; the caller's array keeps its values."""
    x = make(backend, np.array([1.0, bad, 2.0]))
    before = np.array(np.asarray(x.detach() if hasattr(x, "detach") else x), copy=True)
    r = gv.check(lambda a: a * a, x, allow_unchecked=backend == "numpy")  # (numpy: no AD, nothing compared)
    assert r.ok, str(r)
    assert r.inputs[0].held == 1 and (r.inputs[0].min, r.inputs[0].max) == (1.0, 2.0)
    assert "arg0: 1 of 3 element(s)" in str(r) and "(1 held fixed)" in str(r)
    np.testing.assert_array_equal(np.asarray(x.detach() if hasattr(x, "detach") else x), before)


@pytest.mark.parametrize(
    ("shape", "dtype"),
    [((0, 3), "float64"), ((2, 0, 4), "float32"), ((2, 0, 0), "complex128"), ((1000, 0, 0), "complex128")],
)
def test_an_empty_argument_has_nothing_to_check_and_the_others_are_checked(backend, shape, dtype):
    """Empty alone: nothing compared, not a pass (the caller's shape in the
    summary, whatever view the check took of it). Beside others: held as a
    constant, the others checked - a wrong rule there still caught."""
    empty = make(backend, np.zeros(shape, dtype=dtype))
    r = gv.check(lambda a: a * 2, empty)
    assert not r.ok and "every argument to differentiate is empty" in r.by_kind(gv.Kind.NOTHING_CHECKED)[0].message
    assert gv.check(lambda a: a * 2, empty, allow_unchecked=True).ok
    assert f"{'x'.join(map(str, shape))}" in str(r).split("inputs:")[1].splitlines()[0]
    sq = gv.Rule(lambda e, a: a * a, jvp=lambda p, t: 2 * p[1] * t[1], vjp=lambda p, g: (None, 2 * p[1] * g))
    wrong = gv.Rule(lambda e, a: a * a, jvp=lambda p, t: 3 * p[1] * t[1], vjp=lambda p, g: (None, 3 * p[1] * g))
    x = np.linspace(-1.0, 1.0, 4)
    held = np.zeros(shape, dtype=dtype)
    assert gv.check(sq, held, x).ok
    assert not gv.check(wrong, held, x).ok


@pytest.mark.parametrize("other", [1.5, [1.0, 2.0], None, "x"])
def test_a_non_array_argument_beside_arrays_is_a_constant_fn_gets_as_it_is(other):
    seen = []
    sq = gv.Rule(
        lambda a, b: seen.append(b) or a * a,
        jvp=lambda p, t: 2 * p[0] * t[0],
        vjp=lambda p, g: (2 * p[0] * g, None),
    )
    assert gv.check(sq, np.ones(2), other).ok
    assert seen and all(s == other for s in seen)


@pytest.mark.parametrize("bad", [1.5, [1.0, 2.0], None, "x"])
def test_no_array_among_the_arguments_is_an_error(bad):
    with pytest.raises(gv.ArgumentTypeError) as e:
        gv.check(lambda a: a, bad)
    assert "at least one array among the arguments and their leaves" in str(e.value)
    assert "numpy arrays, torch tensors or jax arrays" in str(e.value)


def test_no_arguments_error():
    with pytest.raises(gv.ArgumentTypeError, match="at least one array argument"):
        gv.check(lambda: 1.0)


def test_fn_not_callable():
    with pytest.raises(gv.ArgumentTypeError, match="a callable as the first argument"):
        gv.check(np.ones(2), np.ones(2))


def test_fn_returning_no_array_error():
    with pytest.raises(gv.ArgumentTypeError) as e:
        gv.check(lambda a: ("a", 1), np.ones(2))
    assert "fn's return value: expected one numpy array" in str(e.value) and "found builtins.tuple" in str(e.value)
    assert "a pytree (tuple, list, dict) of arrays" in str(e.value)


def test_fn_returning_integer_array_error():
    with pytest.raises(gv.ArgumentTypeError, match="expected a floating-point array"):
        gv.check(lambda a: (a > 0).astype(np.int64), np.ones(2))


@pytest.mark.parametrize(
    "kwargs,exc,text",
    [
        ({"wrt": 5}, gv.ArgumentValueError, "wrt: expected indices in range(-2, 2); found 5"),
        ({"wrt": 1}, gv.ArgumentTypeError, "argument 1 of dtype int64"),
        ({"wrt": "x"}, gv.ArgumentValueError, "wrt='x': expected the name of an argument, a leaf or a subtree"),
        ({"wrt": [1.5]}, gv.ArgumentTypeError, "wrt: expected positional argument indices"),
        ({"wrt": (0, 0)}, gv.ArgumentValueError, "wrt: expected distinct indices"),
        ({"order": 0}, gv.ArgumentValueError, "order: expected an int >= 1; found 0"),
        ({"seed": -1}, gv.ArgumentValueError, "seed: expected a non-negative int"),
        ({"rtol": -1.0}, gv.ArgumentValueError, "rtol: expected None or a finite number >= 0"),
        ({"directions": 0}, gv.ArgumentValueError, "directions: expected an int >= 1"),
    ],
)
def test_option_errors(kwargs, exc, text):
    with pytest.raises(exc) as e:
        gv.check(lambda a, k: a, np.ones(2), np.arange(2), **kwargs)
    assert text in str(e.value)


def test_only_integer_arguments_error():
    with pytest.raises(gv.ArgumentTypeError, match="at least one floating-point array to differentiate"):
        gv.check(lambda k: k * 1.0, np.arange(3))


def test_a_complex_argument_is_checked_as_its_parts_and_left_alone():
    z = np.ones(2, complex)
    r = gv.check(lambda a: a.real, z, allow_unchecked=True)  # (numpy: no AD, so no rule to judge)
    assert r.ok and r.inputs[0].shape == (2, 2) and "complex128[2]" in r.notes[-1]
    assert z.dtype == complex and (z == 1).all()


def test_rule_validates_its_parts():
    with pytest.raises(gv.ArgumentTypeError, match=r"gv.Rule\(jvp=...\): expected a callable"):
        gv.Rule(np.tanh, jvp=3)


def test_user_tolerances_replace_the_model():
    # A 1e-6 relative error in the rule: caught by the float64 model, accepted by rtol=1e-4.
    rule = gv.Rule(
        np.tanh,
        jvp=lambda p, t: (1 - np.tanh(p[0]) ** 2) * t[0] * (1 + 1e-6),
        vjp=lambda p, g: ((1 - np.tanh(p[0]) ** 2) * g * (1 + 1e-6),),
    )
    x = np.array([0.1, 0.7, -1.2])
    assert not gv.check(rule, x).ok
    assert gv.check(rule, x, rtol=1e-4).ok


def test_scalar_inputs_and_outputs(backend):
    """0-d arguments and scalar outputs (a loss) keep their shapes on every backend."""
    xp = {"numpy": np, "torch": None, "jax": None}[backend]
    x = make(backend, np.array(0.5))
    v = make(backend, np.linspace(-1.0, 1.0, 50))
    if xp is np:
        sq = gv.Rule(lambda a: a * a, jvp=lambda p, t: 2 * p[0] * t[0], vjp=lambda p, g: (2 * p[0] * g,))
        loss = gv.Rule(
            lambda a: np.sum(a * a), jvp=lambda p, t: np.sum(2 * p[0] * t[0]), vjp=lambda p, g: (2 * p[0] * g,)
        )
    else:

        def sq(a):
            return a * a

        def loss(a):
            return (a * a).sum()

    r = gv.check(sq, x)
    assert r.ok, str(r)
    assert r.inputs[0].shape == () and r.output.shape == ()
    r = gv.check(loss, v)
    assert r.ok, str(r)
    assert r.output.shape == () and r.strategy.startswith("directional")


def test_wrong_element_in_the_gradient_of_a_loss_is_located():
    import torch

    class Loss(torch.autograd.Function):
        @staticmethod
        def forward(x):
            return (x * x).sum()

        @staticmethod
        def setup_context(ctx, inputs, out):
            ctx.save_for_backward(inputs[0])

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            gx = 2 * x * g
            gx[37] *= 3
            return gx

    x = torch.from_numpy(np.random.default_rng(2).standard_normal(100))
    r = gv.check(Loss.apply, x)
    (f,) = r.by_kind(gv.Kind.MISMATCH)
    assert f.input_index == (37,)
    assert f.values["VJP"] == pytest.approx(3 * f.values["FD"], rel=1e-6)
    assert "bisection" in f.where  # a loss has no input shaped like its output


def test_the_vocabulary_is_typed_and_reads_as_its_words():
    """Kinds, levels, mode statuses and verdicts are enums of str: a finding's
    kind is gv.Kind.MISMATCH, and equal to, printed as and written to JSON as
    "mismatch" (the report formats do not change)."""
    import enum
    import json

    from gradverify._check.modes import ModeStatus

    for vocabulary in (gv.Kind, gv.Level, gv.Verdict, ModeStatus):
        assert issubclass(vocabulary, enum.Enum) and issubclass(vocabulary, str)
        for word in vocabulary:
            assert word == word.value and str(word) == f"{word}" == word.value
            assert json.dumps(word) == json.dumps(word.value)
    assert set(gv.Kind.ALL) == set(gv.Kind) and set(gv.Kind.INCONCLUSIVE) < set(gv.Kind)

    def wrong(x):
        return np.sin(x)

    rule = gv.Rule(wrong, vjp=lambda args, g: (g * 2.0 * np.cos(args[0]),))
    r = gv.check(rule, np.array([0.1, 0.2, 0.3]))
    f = r.errors[0]
    assert f.kind is gv.Kind.MISMATCH and f.level is gv.Level.ERROR
    assert (r.modes["VJP"], r.modes["JVP"]) == (ModeStatus.CHECKED, ModeStatus.UNAVAILABLE)
    assert r.modes["VJP"] is ModeStatus.CHECKED
    d = json.loads(json.dumps(r.to_dict()))
    found = {(g["kind"], g["level"]) for g in d["findings"]}
    assert found == {("mismatch", "error"), ("mode_unavailable", "warning")}
    assert "mismatch" in str(r) and "Kind." not in str(r)
