"""The drop-ins: ``gradverify.torch.gradcheck``/``gradgradcheck`` and
``gradverify.jax.check_grads``/``check_jvp``/``check_vjp`` keep their peers'
signatures and honour each keyword (or its documented substitute)."""

from __future__ import annotations

import functools
import inspect
import sys
import warnings
from collections.abc import Callable

import numpy as np
import pytest

import gradverify as gv
from gradverify import _observe

torch = pytest.importorskip("torch")
jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

from gradverify.jax import check_grads, check_jvp, check_vjp  # noqa: E402
from gradverify.torch import GradcheckError, gradcheck, gradgradcheck  # noqa: E402

from .._helpers import sine_function, sine_with_rules  # noqa: E402

TorchGradcheckError = sys.modules["torch.autograd.gradcheck"].GradcheckError


def _same_signature(ours, theirs) -> None:
    a, b = inspect.signature(ours).parameters, inspect.signature(theirs).parameters
    assert [(p.name, p.kind, p.default) for p in a.values()] == [(p.name, p.kind, p.default) for p in b.values()]


def test_the_signatures_are_the_peers_own() -> None:
    import jax.test_util

    _same_signature(gradcheck, torch.autograd.gradcheck)
    _same_signature(gradgradcheck, torch.autograd.gradgradcheck)
    _same_signature(check_grads, jax.test_util.check_grads)
    _same_signature(check_jvp, jax.test_util.check_jvp)
    _same_signature(check_vjp, jax.test_util.check_vjp)


def _sin(scale: float = 1.0, jvp: bool = False, detach: bool = False):
    class Sin(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):  # type: ignore[no-untyped-def]
            ctx.save_for_backward(x)
            ctx.x = x
            return x.sin()

        @staticmethod
        def backward(ctx, g):  # type: ignore[no-untyped-def]
            (x,) = ctx.saved_tensors
            c = x.cos().detach() if detach else x.cos()
            return scale * g * c

    if jvp:
        Sin.jvp = staticmethod(lambda ctx, t: t * ctx.x.cos())  # type: ignore[attr-defined]
    return Sin.apply


def _x(n: int = 5, dtype=torch.float64) -> torch.Tensor:
    return torch.linspace(-1, 1, n, dtype=dtype).requires_grad_()


def test_gradcheck_returns_true_raises_torchs_error_or_returns_false() -> None:
    assert gradcheck(_sin(), (_x(),)) is True
    assert gradcheck(_sin(), _x()) is True  # (one tensor, as torch takes it)
    with pytest.raises(TorchGradcheckError) as caught:
        gradcheck(_sin(2.0), (_x(),))
    assert isinstance(caught.value, GradcheckError) and not caught.value.result.ok
    assert "gradverify FAILED: Sin.apply" in str(caught.value)
    assert gradcheck(_sin(2.0), (_x(),), raise_exception=False) is False


def test_only_tensors_requiring_grad_are_differentiated_at_any_depth() -> None:
    seen = []
    with _observe.observing(lambda kind, fn, inputs, options: seen.append(options["wrt"])):
        a, b = _x(3), torch.linspace(0, 1, 3, dtype=torch.float64)
        assert gradcheck(lambda xs, k, none: xs[0] * xs[1] * k, ([a, b.requires_grad_()], 3, None))
        assert gradcheck(lambda x, w: x * w, (_x(3), torch.ones(3, dtype=torch.float64)))
    assert seen == [["arg0[0]", "arg0[1]"], ["arg0"]]
    with pytest.raises(ValueError, match="at least one input tensor to require gradient"):
        gradcheck(lambda x: x * 2, (torch.ones(3, dtype=torch.float64),))


def test_the_modes_asked_for_are_required() -> None:
    assert gradcheck(_sin(), (_x(),))  # (backward only: torch's default checks no forward mode)
    seen = []
    with _observe.observing_results(lambda kind, result: seen.append(result)):
        with pytest.raises(GradcheckError, match="JVP required") as raised:
            gradcheck(_sin(), (_x(),), check_forward_ad=True)
    # (the report the error carries, and the one observers see, fail as the call does)
    assert "PASSED" not in str(raised.value) and "gradverify FAILED" in str(raised.value)
    (unavailable,) = raised.value.result.errors
    assert unavailable.kind == gv.Kind.MODE_UNAVAILABLE and unavailable.pair == ("JVP", "-")
    assert "JVP is required by this call" in unavailable.message
    assert [r.ok for r in seen] == [False]
    assert not gradcheck(_sin(), (_x(),), check_forward_ad=True, raise_exception=False)
    assert gradcheck(_sin(jvp=True), (_x(),), check_forward_ad=True)
    # torch's own refusals of its keywords, raised as torch raises them
    said = set()
    for checker, peer, keywords in (
        (gradcheck, torch.autograd.gradcheck, {"check_forward_ad": False, "check_backward_ad": False}),
        (gradcheck, torch.autograd.gradcheck, {"check_batched_forward_grad": True}),
        (
            gradcheck,
            torch.autograd.gradcheck,
            {"check_forward_ad": True, "check_backward_ad": False, "check_batched_grad": True},
        ),
        (gradgradcheck, torch.autograd.gradgradcheck, {"check_fwd_over_rev": False, "check_rev_over_rev": False}),
        (gradgradcheck, torch.autograd.gradgradcheck, {"check_fwd_over_rev": True, "check_rev_over_rev": False}),
        (
            gradgradcheck,
            torch.autograd.gradgradcheck,
            {
                "check_fwd_over_rev": True,
                "check_rev_over_rev": False,
                "check_undefined_grad": False,
                "check_batched_grad": True,
            },
        ),
    ):
        with pytest.raises(AssertionError) as theirs:
            peer(_sin(), (_x(),), **keywords)
        with pytest.raises(AssertionError) as ours:
            checker(_sin(), (_x(),), **keywords)
        assert str(ours.value) == str(theirs.value), keywords
        said.add(str(ours.value))
    assert len(said) == 6  # (each refusal, not the first one six times)
    with pytest.raises(GradcheckError, match="the derivatives are wrong or could not be checked"):
        gradcheck(lambda x: x * float("nan"), (_x(),))  # (reverse mode never reached: not "unavailable")


def test_a_mode_not_asked_for_is_not_run_and_is_named() -> None:
    calls: dict[str, int] = {}
    wrong_forward = sine_with_rules(jvp_scale=2.0, calls=calls)
    seen = []
    for n in (5, 300):  # (the full Jacobian, random directions)
        with _observe.observing_results(lambda kind, r: seen.append(r)):
            assert gradcheck(wrong_forward, (_x(n),))  # torch's default: reverse mode alone
        assert calls.get("jvp", 0) == 0
        assert seen[-1].modes["JVP"] == "not asked" and "JVP not asked" in str(seen[-1])
        with pytest.raises(GradcheckError, match="JVP"):
            gradcheck(wrong_forward, (_x(n),), check_forward_ad=True)
        assert calls["jvp"] > 0
        calls.clear()
    with _observe.observing_results(lambda kind, r: seen.append(r)):
        assert gradgradcheck(torch.sin, (_x(),))
        assert gradgradcheck(torch.sin, (_x(),), check_fwd_over_rev=True)
    assert seen[-2].modes["JVP of VJP"] == "not asked" and seen[-2].modes["VJP of VJP"] == "checked"
    assert seen[-1].modes["JVP of VJP"] == "checked"
    with jax.enable_x64(True), _observe.observing_results(lambda kind, r: seen.append(r)):
        check_grads(jnp.sin, (np.linspace(-1, 1, 4),), 2, modes=["rev"])
        check_grads(jnp.sin, (np.linspace(-1, 1, 4),), 2, modes="rev")  # (a string, as jax reads it)
    for r in seen[-2:]:
        assert r.modes["JVP"] == "not asked" and r.modes["VJP of VJP"] == "checked"
        assert "jvp" not in r.evaluations


def test_fast_mode_projects_and_the_full_jacobian_decides_what_directions_leave_undecided() -> None:
    seen = []

    def record():  # type: ignore[no-untyped-def]
        return _observe.observing_results(lambda kind, r: seen.append(r))

    with record():
        assert gradcheck(_sin(), (_x(),), fast_mode=True)
    assert seen[-1].strategy.startswith("directional"), seen[-1].strategy
    flipped = _sin_flipped(3)
    with record(), pytest.raises(GradcheckError) as caught:
        gradcheck(flipped, (_x(),), fast_mode=True)
    assert caught.value.result.strategy.startswith("directional")
    assert caught.value.result.errors[0].input_index == (3,)  # (named, as the full Jacobian names it)
    # relu at an element that sits on its kink: the directions leave it undecided, the full Jacobian decides
    kinked = torch.tensor([-1.0, 0.0, 0.5, 2.0], dtype=torch.float64).requires_grad_()
    with record():
        assert gradcheck(torch.relu, (kinked,), fast_mode=True)
    assert seen[-1].strategy.startswith("full Jacobian"), seen[-1].strategy
    assert seen[-1].inconclusive
    with record():
        assert gradcheck(torch.relu, (kinked,))
    assert seen[-1].strategy.startswith("full Jacobian")


def test_fast_mode_falls_back_on_what_the_check_compares_not_on_the_dense_shape() -> None:
    # relu whose backward is 1.5x too large at one element, summed: at the
    # kink beside it one direction decides nothing about the single output
    class Relu(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):  # type: ignore[no-untyped-def]
            ctx.save_for_backward(x)
            return torch.relu(x)

        @staticmethod
        def backward(ctx, g):  # type: ignore[no-untyped-def]
            (x,) = ctx.saved_tensors
            out = g * (x > 0).to(g.dtype)
            out[1, 2] = 1.5 * out[1, 2]
            return out

    dense = torch.zeros(10, 10, dtype=torch.float64)
    dense[[0, 1, 3, 4, 9], [1, 2, 3, 5, 9]] = torch.tensor([1e-300, 0.5, -0.7, 1.2, 0.3], dtype=torch.float64)
    sparse = dense.to_sparse().requires_grad_()
    sparse.values().data[0] = 0.0  # (a specified 0: on relu's kink)
    summed = lambda s: Relu.apply(s.to_dense()).sum()  # noqa: E731
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*[Ss]parse.*", category=UserWarning)  # (torch's sparse betas)
        for fast in (True, False):  # (its 5 values, not 100 dense elements: small)
            with pytest.raises(GradcheckError, match="mismatch"):
                gradcheck(summed, (sparse,), masked=True, fast_mode=fast)
    # a failure along the directions stands as it is: located, not checked again
    flipped = _sin_flipped(3)
    x = torch.linspace(-1, 1, 12, dtype=torch.float64)
    x[2] = 0.0  # (relu's kink: partly inconclusive too)
    with pytest.raises(GradcheckError) as caught:
        gradcheck(lambda x: flipped(torch.relu(x) + x), (x.requires_grad_(),), fast_mode=True)
    assert caught.value.result.strategy.startswith("directional"), caught.value.result.strategy
    assert caught.value.result.inconclusive


def _sin_flipped(at: int):
    class Sin(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):  # type: ignore[no-untyped-def]
            ctx.save_for_backward(x)
            return x.sin()

        @staticmethod
        def backward(ctx, g):  # type: ignore[no-untyped-def]
            (x,) = ctx.saved_tensors
            out = g * x.cos()
            out[at] = -out[at]
            return out

    return Sin.apply


def test_the_suites_tolerance_is_never_made_stricter() -> None:
    off = _sin(1 + 1e-4)  # a rule off by 1e-4 relative: a bug to gradverify's bound
    assert not gv.check(off, _x().detach()).ok
    assert gradcheck(off, (_x(),))  # within torch's default rtol 1e-3: the suite asked for that
    with pytest.raises(GradcheckError):
        gradcheck(off, (_x(),), rtol=1e-6, atol=1e-9)
    passed = gv.check(off, _x().detach(), suite_tol=(1e-5, 1e-3))
    assert passed.ok and "within the suite's own tolerance" in str(passed)
    failed = gv.check(_sin(2.0), _x().detach(), suite_tol=(1e-5, 1e-3))
    assert "beyond the suite's own tolerance" in failed.errors[0].bound_reason
    # large inputs (random directions): judged at the element the disagreement is located at
    big = torch.linspace(-1, 1, 300, dtype=torch.float64).requires_grad_()
    assert gradcheck(off, (big,))
    with pytest.raises(GradcheckError):
        gradcheck(off, (big,), rtol=1e-6, atol=1e-9)


def test_nondet_tol_tolerates_nondeterminism_up_to_it() -> None:
    g = torch.Generator().manual_seed(0)

    def noisy(x):  # type: ignore[no-untyped-def]
        return x.sin() + 1e-10 * torch.rand(x.shape, generator=g, dtype=x.dtype)

    with pytest.raises(GradcheckError, match="nondeterminism"):
        gradcheck(noisy, (_x(),))
    seen = []
    with _observe.observing_results(lambda kind, r: seen.append(r)):
        gradcheck(noisy, (_x(),), nondet_tol=1e-6, raise_exception=False)
    assert not seen[0].by_kind(gv.Kind.NONDETERMINISM)[0].level == gv.Level.ERROR


def test_batched_keywords_check_under_vmap() -> None:
    seen = []
    with _observe.observing(lambda kind, fn, inputs, options: seen.append(options["batched"])):
        gradcheck(torch.sin, (_x(),), check_batched_grad=True)
        gradcheck(torch.sin, (_x(),), check_batched_forward_grad=True, check_forward_ad=True)
        gradcheck(torch.sin, (_x(),))
    assert seen == [True, True, False]


def test_empty_inputs_pass_as_in_torch() -> None:
    for shape, dtype in (((2, 0, 4), torch.float64), ((2, 0, 0), torch.complex128), ((0,), torch.float32)):
        assert gradcheck(lambda x: x * 2, (torch.zeros(shape, dtype=dtype, requires_grad=True),))
    # an empty output (a match set with no match) passes too; gv.check itself says it compared nothing
    assert gradcheck(lambda x: x[x > 10] * 2, (_x(),))
    assert not gv.check(lambda x: x[x > 10] * 2, _x().detach()).ok
    with jax.enable_x64(True):
        check_grads(lambda a: a[:0] * 2, (np.linspace(0.0, 1.0, 3),), 1)
    # one empty, one not: the other is checked
    assert gradcheck(lambda e, x: x.sin() + e.sum(), (torch.zeros(0, requires_grad=True, dtype=torch.float64), _x()))
    with pytest.raises(GradcheckError):
        gradcheck(lambda e, x: _sin(2.0)(x) + e.sum(), (torch.zeros(0, requires_grad=True, dtype=torch.float64), _x()))


def test_an_output_nan_everywhere_passes_check_grads_as_in_jax_and_nowhere_else() -> None:
    """jax's comparison takes NaN as equal to NaN: acos off its domain passes
    its check_grads; gv.check says nothing was compared, and so does
    gradcheck's drop-in (torch compares NaN as unequal)."""
    from jax.test_util import check_grads as jax_check_grads

    x = (np.float32(-1.083),)
    jax_check_grads(jax.lax.acos, x, 2, ["fwd", "rev"])  # (the peer passes it)
    check_grads(jax.lax.acos, x, 2, ["fwd", "rev"])
    assert not gv.check(jax.lax.acos, jnp.asarray(x[0])).ok
    # NaN at some elements only: the others are compared, a wrong rule there is caught
    partly = (np.array([-1.083, 0.25, 0.5], np.float32),)
    check_grads(jax.lax.acos, partly, 1)
    wrong = jax.custom_jvp(jax.lax.acos)
    wrong.defjvp(lambda p, t: (jax.lax.acos(p[0]), 2.0 * t[0]))
    with pytest.raises(AssertionError, match="the derivatives are wrong"):
        check_grads(wrong, partly, 1, modes=["fwd"])
    # inf everywhere is no pass: FD of inf is NaN, the derivative is not
    with pytest.raises(AssertionError):
        check_grads(jnp.log, (np.zeros(2, np.float32),), 1)
    with pytest.raises(GradcheckError):
        gradcheck(torch.acos, (torch.tensor([-1.083], dtype=torch.float64, requires_grad=True),))


def _nan_with(bwd: Callable) -> Callable:
    @jax.custom_vjp
    def nan(x):  # type: ignore[no-untyped-def]
        return jnp.full_like(x, jnp.nan)

    nan.defvjp(lambda x: (nan(x), x), bwd)
    return nan


@pytest.mark.parametrize("modes", [["fwd"], ["rev"], ["fwd", "rev"]])
def test_an_output_nan_everywhere_passes_check_grads_only_where_jax_passes_it(modes) -> None:
    """jax passes an output NaN at every element only where each mode's
    derivative is NaN too (its comparisons take NaN as equal to NaN, a
    finite one fails: "nan location mismatch"), and raises where a mode
    fn lacks is asked for: the drop-in passes and fails where jax does,
    naming the mode fn lacks."""
    from jax.test_util import check_grads as jax_check_grads

    finite_jvp = jax.custom_jvp(lambda x: jnp.full_like(x, jnp.nan))
    finite_jvp.defjvp(lambda p, t: (jnp.full_like(p[0], jnp.nan), 2.0 * t[0]))
    fns = {
        "a custom_vjp with a finite VJP": _nan_with(lambda r, g: (g,)),
        "a custom_vjp with a NaN VJP": _nan_with(lambda r, g: (g * jnp.nan,)),
        "a custom_jvp with a finite JVP": finite_jvp,
        "acos off its domain": jax.lax.acos,
    }
    x = (np.array([-1.083, -1.5], np.float32),)
    passed = {}
    for name, f in fns.items():
        try:
            jax_check_grads(f, x, 1, modes=modes)
            jax_passes = True
        except (AssertionError, TypeError):
            jax_passes = False
        try:
            check_grads(f, x, 1, modes=modes)
            passed[name] = True
        except AssertionError as e:
            passed[name] = False
            assert "PASSED" not in str(e)
            if "fwd" in modes and "custom_vjp" in name:  # (jax raises: it has no forward mode of a custom_vjp)
                assert "required but not checked: JVP" in str(e) and "custom_vjp function" in str(e)
        assert passed[name] == jax_passes, (name, modes, jax_passes)
    # (each way is taken: the cases are not all one verdict)
    assert passed["acos off its domain"] and not passed["a custom_jvp with a finite JVP"]


def test_an_output_nan_everywhere_passes_at_order_2_only_where_jax_passes_it() -> None:
    """At order 2 jax checks each derivative in turn (the VJP of f's own
    output): a NaN VJP whose own derivative is finite fails there."""
    from jax.test_util import check_grads as jax_check_grads

    x = (np.array([-1.083, -1.5], np.float32),)
    flat_vjp = _nan_with(lambda r, g: (jnp.full_like(r, jnp.nan),))  # (its VJP's derivative: 0)
    with pytest.raises(AssertionError):
        jax_check_grads(flat_vjp, x, 2, modes=["rev"])
    with pytest.raises(AssertionError):
        check_grads(flat_vjp, x, 2, modes=["rev"])
    jax_check_grads(flat_vjp, x, 1, modes=["rev"])
    check_grads(flat_vjp, x, 1, modes=["rev"])
    jax_check_grads(jax.lax.acos, x, 2, ["fwd", "rev"])
    check_grads(jax.lax.acos, x, 2, ["fwd", "rev"])


def test_an_empty_check_fails_a_required_mode_fn_lacks_as_in_jax() -> None:
    from jax.test_util import check_grads as jax_check_grads, check_jvp as jax_check_jvp

    f, x = _nan_with(lambda r, g: (g,)), (np.zeros(0, np.float32),)
    with pytest.raises(TypeError, match="custom_vjp"):
        jax_check_grads(f, x, 1, modes=["rev", "fwd"])
    with pytest.raises(AssertionError, match="required but not checked: JVP"):
        check_grads(f, x, 1, modes=["rev", "fwd"])
    jax_check_grads(f, x, 1, modes=["rev"])
    check_grads(f, x, 1, modes=["rev"])
    # the user's own rule run as jax's check_jvp runs it
    with pytest.raises(TypeError, match="custom_vjp"):
        jax_check_jvp(f, functools.partial(jax.jvp, f), x)
    with pytest.raises(AssertionError, match="required but not checked: JVP"):
        check_jvp(f, functools.partial(jax.jvp, f), x)
    # a mode that fails for another reason fails the call too, as jax's raises
    callback = lambda a: jax.pure_callback(np.sin, jax.ShapeDtypeStruct(a.shape, a.dtype), a)  # noqa: E731
    with pytest.raises(ValueError, match="Pure callbacks do not support JVP"):
        jax_check_grads(callback, x, 1, modes=["fwd"])
    with pytest.raises(AssertionError, match="Pure callbacks do not support JVP"):
        check_grads(callback, x, 1, modes=["fwd"])


def test_an_empty_check_fails_a_required_mode_fn_lacks_as_in_torch() -> None:
    """torch's gradcheck runs every mode it is asked for, an empty input's
    too, and raises for one fn lacks (an autograd.Function without a jvp):
    the drop-in fails there, naming it, and passes the mode fn has."""

    Sine = sine_function()  # (a backward, no jvp)

    empty = torch.zeros(0, dtype=torch.float64, requires_grad=True)
    with pytest.raises(NotImplementedError, match="jvp"):
        torch.autograd.gradcheck(Sine.apply, (empty,), check_forward_ad=True)
    with pytest.raises(GradcheckError, match="JVP required") as raised:
        gradcheck(Sine.apply, (empty,), check_forward_ad=True)
    assert "You must implement the jvp function" in str(raised.value) and "PASSED" not in str(raised.value)
    assert torch.autograd.gradcheck(Sine.apply, (empty,)) and gradcheck(Sine.apply, (empty,))
    # torch runs forward mode on an empty input only in its fast mode or its
    # test of undefined gradients: the drop-in passes and fails where it does
    verdicts = set()
    for fast in (False, True):
        for undefined in (False, True):
            keywords = {"check_forward_ad": True, "fast_mode": fast, "check_undefined_grad": undefined}
            try:
                torch_passes = torch.autograd.gradcheck(Sine.apply, (empty,), **keywords)
            except NotImplementedError:
                torch_passes = False
            passes = gradcheck(Sine.apply, (empty,), raise_exception=False, **keywords)
            assert passes == torch_passes, keywords
            verdicts.add(passes)
    assert verdicts == {True, False}


def test_gradgradcheck_catches_a_backward_that_is_not_differentiable() -> None:
    assert gradgradcheck(_sin(), (_x(),))
    with pytest.raises(TorchGradcheckError, match="gradgradcheck"):
        gradgradcheck(_sin(detach=True), (_x(),))
    assert gradgradcheck(_sin(detach=True), (_x(),), raise_exception=False) is False


def test_check_grads_takes_pytrees_numpy_and_scalars() -> None:
    with jax.enable_x64(True):
        params = {"w": np.linspace(-1, 1, 6).reshape(2, 3), "b": np.zeros(2)}
        check_grads(lambda p, x, k: jnp.tanh(p["w"] @ x + p["b"]) * k, (params, np.linspace(0, 1, 3), 2.0), order=2)


def _wrong_vjp():
    @jax.custom_vjp
    def f(x):  # type: ignore[no-untyped-def]
        return jnp.sin(x)

    f.defvjp(lambda x: (jnp.sin(x), x), lambda x, g: (2 * g * jnp.cos(x),))
    return f


def test_check_grads_modes_and_failures_raise_assertion_error() -> None:
    with jax.enable_x64(True):
        x = (np.linspace(-1, 1, 4),)

        @jax.custom_vjp
        def right(x):  # type: ignore[no-untyped-def]
            return jnp.sin(x)

        right.defvjp(lambda x: (jnp.sin(x), x), lambda x, g: (g * jnp.cos(x),))
        check_grads(right, x, 1, modes=["rev"])  # (jax has no forward mode of a custom_vjp: not asked)
        for modes in (["fwd"], ["fwd", "rev"]):  # (the second checks its VJP: the JVP it lacks fails it)
            with pytest.raises(AssertionError, match="required but not checked: JVP") as raised:
                check_grads(right, x, 1, modes=modes)
            assert "PASSED" not in str(raised.value) and "gradverify FAILED" in str(raised.value)
        with pytest.raises(AssertionError, match="the derivatives are wrong"):
            check_grads(_wrong_vjp(), x, 1, modes=["rev"])
        with pytest.raises(ValueError, match="'fwd' and 'rev'"):
            check_grads(right, x, 1, modes=["reverse"])


def test_check_grads_tolerances_by_dtype() -> None:
    with jax.enable_x64(True):

        @jax.custom_vjp
        def off(x):  # type: ignore[no-untyped-def]
            return jnp.sin(x)

        off.defvjp(lambda x: (jnp.sin(x), x), lambda x, g: (g * jnp.cos(x) * (1 + 1e-4),))
        x = (np.linspace(-1, 1, 4),)
        with pytest.raises(AssertionError):  # jax's float64 default, 1e-5: beyond it
            check_grads(off, x, 1, modes=["rev"])
        check_grads(off, x, 1, modes=["rev"], atol=1e-3, rtol=1e-3)
        check_grads(off, x, 1, modes=["rev"], atol={np.dtype(np.float64): 1e-3}, rtol={np.dtype(np.float64): 1e-3})


def test_check_jvp_and_check_vjp_judge_the_users_own_rules() -> None:
    with jax.enable_x64(True):
        x = (np.linspace(-1, 1, 4),)
        check_jvp(jnp.sin, functools.partial(jax.jvp, jnp.sin), x)
        check_vjp(jnp.sin, functools.partial(jax.vjp, jnp.sin), x)
        with pytest.raises(AssertionError, match="my rule"):
            check_jvp(jnp.sin, lambda p, t: (jnp.sin(p[0]), 2 * t[0] * jnp.cos(p[0])), x, err_msg="my rule")
        with pytest.raises(AssertionError):
            check_vjp(jnp.sin, lambda x: (jnp.sin(x), lambda g: (2 * g * jnp.cos(x),)), x)


def test_outputs_that_do_not_require_grad_are_left_out_as_torch_does() -> None:
    """torch's gradcheck checks the outputs that require grad: a threshold
    returned detached is not differentiable by declaration. gv.check itself
    compares it, and says its derivative is not 0."""

    def with_threshold(x):  # type: ignore[no-untyped-def]
        return x.sin(), (x.max() * 0.5).detach()

    assert gradcheck(with_threshold, (_x(),))
    assert not gv.check(with_threshold, _x().detach()).ok
    with pytest.raises(GradcheckError):  # (the differentiable outputs are still checked)
        gradcheck(lambda x: (_sin(2.0)(x), (x.max() * 0.5).detach()), (_x(),))


def test_a_function_with_one_output_is_called_only_by_the_check() -> None:
    """torch's gradcheck calls func once to learn which outputs require
    grad; a function with one output has none to leave out, so the drop-in
    calls it only as its check does (the check a plain gv.check of the same
    options makes), and so a module whose parameters are made; a lazy
    module is called first, as torch calls it: it takes its shapes there."""
    calls = [0]

    def counted(x):  # type: ignore[no-untyped-def]
        calls[0] += 1
        return x.sin()

    for fast in (True, False):
        calls[0] = 0
        assert gradcheck(counted, (_x(),), fast_mode=fast)
        by_dropin = calls[0]
        calls[0] = 0
        r = gv.check(counted, _x().detach(), modes=("VJP",), full=None if not fast else False, suite_tol=(1e-5, 1e-3))
        assert r.ok and by_dropin == calls[0], (by_dropin, calls[0], r.evaluations)

    class Sine(torch.nn.Module):
        def forward(self, x):  # type: ignore[no-untyped-def]
            calls[0] += 1
            return x.sin()

    calls[0] = 0
    assert gradcheck(Sine(), (_x(),))
    by_dropin, calls[0] = calls[0], 0
    assert gv.check(Sine(), _x().detach(), modes=("VJP",), suite_tol=(1e-5, 1e-3)).ok
    assert by_dropin == calls[0]

    def counted_lazy():  # type: ignore[no-untyped-def]
        m = torch.nn.LazyLinear(3, dtype=torch.float64)  # (a Linear once its first call has shaped it)
        m.register_forward_pre_hook(lambda module, inputs: calls.__setitem__(0, calls[0] + 1))
        return m

    lazy, checked = counted_lazy(), counted_lazy()
    calls[0] = 0
    assert gradcheck(lazy, (_x().reshape(1, 5),))
    by_dropin, calls[0] = calls[0], 0
    checked(_x().reshape(1, 5))  # (shaped, as the drop-in's first call shaped the other)
    checked.load_state_dict(lazy.state_dict())
    calls[0] = 0
    assert gv.check(checked, _x().reshape(1, 5).detach(), modes=("VJP",), wrt=["inputs"], suite_tol=(1e-5, 1e-3)).ok
    assert by_dropin == calls[0] + 1 and tuple(lazy.weight.shape) == (3, 5)  # (its first call at the caller's inputs)


def test_several_outputs_are_chosen_after_one_call_and_observers_see_the_function_checked() -> None:
    """A function of several outputs, one detached: the check stops at fn's
    first call, torch's call at the caller's inputs chooses the outputs,
    and the check of those is the only one made (no failing check of the
    detached output first). Observers (the triage's rerun) are offered the
    function with the outputs chosen, so a rerun of it passes as the call did."""
    calls = [0]

    def with_statistic(x):  # type: ignore[no-untyped-def]
        calls[0] += 1
        return x.sin(), (x.mean() * 2).detach()

    seen = []
    with _observe.observing(lambda kind, fn, inputs, options: seen.append(fn)):
        assert gradcheck(with_statistic, (_x(),))
    by_dropin, calls[0] = calls[0], 0
    (observed,) = seen
    r = gv.check(observed, _x().detach(), modes=("VJP",), suite_tol=(1e-5, 1e-3))
    assert r.ok, str(r)
    chosen, calls[0] = calls[0], 0
    assert not gv.check(with_statistic, _x().detach(), modes=("VJP",)).ok  # (the detached output compared)
    failing = calls[0]
    # (at most the check's first call and torch's beyond the chosen outputs' check; a failing check costs more)
    assert by_dropin <= chosen + 2 < failing, (by_dropin, chosen, failing)


def test_what_fn_raises_at_the_callers_inputs_reaches_the_caller_as_torchs_does() -> None:
    """As torch's gradcheck: what fn raises at the caller's inputs, which
    require grad, is raised to the caller - a ValueError of fn's own, and
    torch's refusal of an in-place write to a leaf that requires grad
    (the check itself, on copies that do not, sees a mutation)."""

    def refuses(x):  # type: ignore[no-untyped-def]
        raise ValueError("shapes do not match")

    with pytest.raises(ValueError, match="shapes do not match"):
        gradcheck(refuses, (_x(),))
    for peer in (gradcheck, torch.autograd.gradcheck):
        with pytest.raises(RuntimeError, match="leaf Variable that requires grad") as raised:
            peer(lambda x: x.add_(1).sin(), (_x(),))
        assert not isinstance(raised.value, TorchGradcheckError), peer  # (torch's own error, not a verdict)
