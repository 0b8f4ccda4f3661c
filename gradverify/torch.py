"""``gradcheck`` and ``gradgradcheck`` with torch's signatures, checked by gradverify.

Switch a suite by its import line::

    from gradverify.torch import gradcheck, gradgradcheck  # was: from torch.autograd import ...

As in torch, the inputs that are tensors requiring grad are differentiated
(at any depth of a list or tuple) and everything else is a constant; the
call returns ``True`` or raises :class:`GradcheckError` - an instance of
torch's own ``torch.autograd.gradcheck.GradcheckError``, so an ``except``
written for torch's catches it - carrying gradverify's report
(``error.result``), or returns ``False`` with ``raise_exception=False``.
What each keyword maps to is in docs/migrating.md.
"""

from __future__ import annotations

import functools
import math
import sys
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.autograd.forward_ad as fwAD
import torch.autograd.gradcheck  # noqa: F401  (the module: torch.autograd.gradcheck is also the function's name)
import torch.utils._pytree as pytree

from . import _observe
from ._check.pipeline import FULL_MAX_IN, FULL_MAX_OUT, check
from ._check.unchecked import empty_allowed, lacking, required_failed
from ._check.views.tree import TREES_REFUSED, TreeOutput
from ._result import CheckResult, Kind
from .backends.trees import flatten

__all__ = ["GradcheckError", "gradcheck", "gradgradcheck"]

_TorchGradcheckError: type[RuntimeError] = sys.modules["torch.autograd.gradcheck"].GradcheckError


class GradcheckError(_TorchGradcheckError):  # type: ignore[misc, valid-type]
    """torch's ``GradcheckError``, with gradverify's report as ``result``."""

    def __init__(self, message: str, result: CheckResult | None = None) -> None:
        super().__init__(message)
        self.result = result


def gradcheck(
    func: Callable[..., Any],
    inputs: Any,
    *,
    eps: float = 1e-06,
    atol: float = 1e-05,
    rtol: float = 0.001,
    raise_exception: bool = True,
    nondet_tol: float = 0.0,
    check_undefined_grad: bool = True,
    check_grad_dtypes: bool = False,
    check_batched_grad: bool = False,
    check_batched_forward_grad: bool = False,
    check_forward_ad: bool = False,
    check_backward_ad: bool = True,
    fast_mode: bool = False,
    masked: bool | None = None,
) -> bool:
    """``torch.autograd.gradcheck``, checked by gradverify: forward mode,
    reverse mode and finite differences cross-checked with a rounding model.

    ``atol``/``rtol`` are the suite's tolerance: an element within it of
    finite differences never fails, one beyond both it and gradverify's
    bound does. ``check_forward_ad`` / ``check_backward_ad`` say which modes
    are checked, as in torch (an unavailable mode asked for fails; one not
    asked for is not run). ``nondet_tol`` tolerates nondeterminism up to it;
    ``check_batched_grad`` and ``check_batched_forward_grad`` check the
    modes under vmap (``batched=True``). gradverify chooses its own steps
    (``eps``); ``fast_mode`` checks along random directions (the full
    Jacobian where they leave an element undecided on small inputs),
    otherwise it chooses by size; gradient dtypes are always checked
    (``check_grad_dtypes``); sparse inputs are checked as their specified
    values (``masked``); ``check_undefined_grad`` is not checked (torch's
    gradcheck checks a backward given undefined output gradients), but says,
    as in torch, whether forward mode is run on an empty input.
    """
    _refuse(  # (torch's own refusals of its keywords, as torch raises them)
        (
            not (check_forward_ad or check_backward_ad),
            "Expected at least one of check_forward_ad or check_backward_ad to be True",
        ),
        (
            check_batched_grad and not check_backward_ad,
            "Setting check_batched_grad=True requires check_backward_ad to be True",
        ),
        (
            check_batched_forward_grad and not check_forward_ad,
            "Setting check_batched_forward_grad=True requires check_forward_ad to be True",
        ),
    )
    required = ("JVP",) * check_forward_ad + ("VJP",) * check_backward_ad
    return _run(
        func, inputs, 1, required, atol, rtol, nondet_tol, check_batched_grad or check_batched_forward_grad,
        raise_exception, "gradcheck", fast_mode, check_undefined_grad,
    )  # fmt: skip


def gradgradcheck(
    func: Callable[..., Any],
    inputs: Any,
    grad_outputs: Any = None,
    *,
    eps: float = 1e-06,
    atol: float = 1e-05,
    rtol: float = 0.001,
    gen_non_contig_grad_outputs: bool = False,
    raise_exception: bool = True,
    nondet_tol: float = 0.0,
    check_undefined_grad: bool = True,
    check_grad_dtypes: bool = False,
    check_batched_grad: bool = False,
    check_fwd_over_rev: bool = False,
    check_rev_over_rev: bool = True,
    fast_mode: bool = False,
    masked: bool = False,
) -> bool:
    """``torch.autograd.gradgradcheck``, checked by gradverify at order 2:
    the VJP, and its derivative in the modes asked for, checked like
    first-order ones, on gradverify's own random cotangents
    (``grad_outputs`` and ``gen_non_contig_grad_outputs`` are not used).
    ``check_rev_over_rev`` / ``check_fwd_over_rev`` say which modes of the
    VJP's derivative are checked; the other keywords as in :func:`gradcheck`.
    """
    _refuse(
        (
            not (check_fwd_over_rev or check_rev_over_rev),
            "Expected at least one of check_fwd_over_rev or check_rev_over_rev to be True",
        ),
        (
            check_undefined_grad and not check_rev_over_rev,
            "Setting check_undefined_grad=True requires check_rev_over_rev to be True",
        ),
        (
            check_batched_grad and not check_rev_over_rev,
            "Setting check_batched_grad=True requires check_rev_over_rev to be True",
        ),
    )
    required = ("JVP of VJP",) * check_fwd_over_rev + ("VJP of VJP",) * check_rev_over_rev
    return _run(
        func, inputs, 2, required, atol, rtol, nondet_tol, check_batched_grad, raise_exception, "gradgradcheck",
        fast_mode, check_undefined_grad,
    )  # fmt: skip


def _refuse(*rules: tuple[bool, str]) -> None:
    """torch's refusal of keywords that contradict each other: the first
    rule that holds raises its message, as torch's AssertionError."""
    for holds, message in rules:
        if holds:
            raise AssertionError(message)


def _run(
    func: Callable[..., Any],
    inputs: Any,
    order: int,
    required: Sequence[str],
    atol: float,
    rtol: float,
    nondet_tol: float,
    batched: bool,
    raise_exception: bool,
    peer: str,
    fast_mode: bool,
    undefined: bool,
) -> bool:
    args = (inputs,) if isinstance(inputs, torch.Tensor) else tuple(inputs)
    wrt = _requiring_grad(args)
    if not wrt:
        raise ValueError(
            f"{peer} expects at least one input tensor to require gradient, but none of them have requires_grad=True."
        )
    options = {
        "wrt": wrt,
        "order": order,
        "suite_tol": (float(atol), float(rtol)),
        "nondet_tol": float(nondet_tol),
        "batched": bool(batched),
        "modes": tuple(required),
    }
    if _lazy(func):
        # (called first, as torch's gradcheck calls func: a lazy module takes its shapes there)
        func, result = _differentiable_outputs(func, args), None
    else:
        with _observe.unseen():  # (observers are offered the function checked, once it is known)
            func, result = _first_check(func, args, options, fast_mode)
    with _observe.call(peer, func, args, options) as outermost:
        # (torch passes an empty input or output: nothing to check; it fails
        # a mode its check_* keywords require that it cannot take)
        result = empty_allowed(result if result is not None else _checked(func, args, options, fast_mode))
        # (torch runs a mode on an empty input too: the VJP always, the JVP in
        # its fast mode or its test of undefined gradients)
        tried = [m for m in required if m == "VJP" or (m == "JVP" and (fast_mode or undefined))]
        result = lacking(result, tried, lambda mode: _run_mode(mode, func, args), "torch")
        result, missing = required_failed(result, required, f"this call ({peer}'s check_* keywords)")
    if outermost:
        _observe.finished(peer, result)
    if result.ok:
        return True
    if not missing:
        message = f"gradverify ({peer}): the derivatives are wrong or could not be checked\n{result}"
    else:
        message = (
            f"gradverify ({peer}): {', '.join(missing)} required (the check_* keywords) but "
            + ", ".join(f"{m} {result.modes.get(m, 'not run')}" for m in missing)
            + f"\n{result}"
        )
    if raise_exception:
        raise GradcheckError(message, result)
    return False


def _run_mode(mode: str, func: Callable[..., Any], args: tuple[Any, ...]) -> None:
    """func's ``mode`` at copies of args, as torch's gradcheck runs it: a
    dual of each tensor that requires grad along zeros (JVP), or a backward
    pass from ones (VJP)."""
    leaves, spec = pytree.tree_flatten(args)
    wrt = [isinstance(a, torch.Tensor) and a.requires_grad for a in leaves]
    if mode == "JVP":
        with fwAD.dual_level():
            duals = [fwAD.make_dual(a.detach().clone(), torch.zeros_like(a)) if d else a for a, d in zip(leaves, wrt)]
            func(*pytree.tree_unflatten(duals, spec))
        return
    inputs = [a.detach().clone().requires_grad_() if d else a for a, d in zip(leaves, wrt)]
    with torch.enable_grad():
        out = func(*pytree.tree_unflatten(inputs, spec))
    outs = [o for o in pytree.tree_leaves(out) if isinstance(o, torch.Tensor) and o.requires_grad]
    if outs:
        grads = [torch.ones_like(o) for o in outs]
        torch.autograd.grad(outs, [a for a, d in zip(inputs, wrt) if d], grads, allow_unused=True)


def _lazy(func: Any) -> bool:
    """Whether func is a module with parameters or buffers not yet made
    (a lazy module's, shaped by its first call)."""
    if not isinstance(func, torch.nn.Module):
        return False
    lazy = torch.nn.parameter.is_lazy
    return any(lazy(p) for p in func.parameters()) or any(lazy(b) for b in func.buffers())


def _first_check(
    func: Callable[..., Any], args: tuple[Any, ...], options: dict[str, Any], fast: bool
) -> tuple[Callable[..., Any], CheckResult | None]:
    """A function (or a module whose parameters are made) checked before
    any call of its own. torch's gradcheck calls func once at the caller's
    inputs to learn which outputs require grad (see _differentiable_outputs);
    where func returns one array none can be left out, and its check needs
    no such call. Where it returns several, the check stops at fn's first
    call and that call is made: func with only the outputs that require
    grad is returned, to be checked (the result None). Where the check
    failed, the call is made too: it raises what fn raises at the caller's
    inputs (an in-place write to a tensor requiring grad), as torch's first
    call does."""
    token = TREES_REFUSED.set(True)
    try:
        result = _checked(func, args, options, fast)
    except TreeOutput:
        result = None
    finally:
        TREES_REFUSED.reset(token)
    if result is None:
        return _differentiable_outputs(func, args), None
    if not result.ok or result.output is None:
        _at_inputs(func, args)
    return func, result


def _checked(func: Callable[..., Any], args: tuple[Any, ...], options: dict[str, Any], fast: bool) -> CheckResult:
    """gv.check of func at args. ``fast`` (the suite's ``fast_mode``, which
    projects the Jacobian onto random directions): random directions at
    any size; where they pass but leave an element undecided (a kink, a
    jump: partly inconclusive, or finite differences decided nothing) on
    inputs small enough for the full Jacobian, the full Jacobian decides,
    as ``fast_mode=False`` would. (A failure stands: it is located.)"""
    if not fast:
        return check(func, *args, **options)
    result = check(func, *args, **options, full=False)
    if not result.ok and not result.by_kind(Kind.NOTHING_CHECKED):
        return result
    out = result.output
    if out is None or out.min is None:  # (fn's output empty, or NaN everywhere: the full Jacobian has no more)
        return result
    if not (result.inconclusive or result.by_kind(Kind.NOTHING_COMPARED)):
        return result
    if _compared_elements(result) <= FULL_MAX_IN and math.prod(out.shape) <= FULL_MAX_OUT:
        return check(func, *args, **options)
    return result


def _compared_elements(result: CheckResult) -> float:
    """How many real elements the check differentiated, as its choice of the
    full Jacobian counts them: a complex one is two, a held one none. A
    sparse argument's values are not read off its summary: it counts as
    small, and the check's own default decides."""
    n = 0.0
    for s in result.inputs:
        if not s.differentiable:
            continue
        if s.layout is not None:
            return 0.0
        n += (math.prod(s.shape) - s.held) * (2 if s.dtype.startswith("complex") else 1)
    return n


def _requiring_grad(args: tuple[Any, ...]) -> list[str]:
    """The names of the leaves torch's gradcheck differentiates: tensors
    requiring grad, at any depth of the arguments' lists and tuples."""
    names = []
    for i, a in enumerate(args):
        if isinstance(a, torch.Tensor):
            if a.requires_grad:
                names.append(f"arg{i}")
        elif isinstance(a, (list, tuple, dict)):
            flat = flatten(a)
            names += [
                f"arg{i}{p}" for p, v in zip(flat.paths, flat.leaves) if isinstance(v, torch.Tensor) and v.requires_grad
            ]
    return names


def _at_inputs(func: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    """func at the caller's own inputs, grad enabled: torch's gradcheck's
    first call (what fn raises there reaches the caller)."""
    with torch.enable_grad():
        return func(*args)


def _differentiable_outputs(func: Callable[..., Any], args: tuple[Any, ...]) -> Callable[..., Any]:
    """func, or where some of its tensor outputs do not require grad at the
    caller's inputs (an index, a threshold returned detached), func with
    those left out: torch's gradcheck checks only the differentiable outputs
    (one call of func at the inputs decides which)."""
    out = _at_inputs(func, args)
    if isinstance(out, torch.Tensor) or not isinstance(out, (tuple, list)):
        return func
    keep = [k for k, o in enumerate(out) if isinstance(o, torch.Tensor) and o.requires_grad]
    if not keep or len(keep) == len(out):
        return func  # (none differentiable: torch then expects every numerical derivative to be 0)

    @functools.wraps(func)
    def differentiable(*a: Any) -> Any:
        out = func(*a)
        return tuple(out[k] for k in keep)

    return differentiable
