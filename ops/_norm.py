"""Normalization layers with the signatures and conventions of
``torch.nn.functional``: normalize with the biased variance, update running
variance with the unbiased one, eps inside the square root, groups are
contiguous channels, statistics in at least float32, training and eval pinned
explicitly. Written once against the array namespace (reference: the
framework's AD derives the gradients)."""

from __future__ import annotations

import inspect
import math
from collections.abc import Sequence
from typing import Any

from gradverify._errors import ArgumentTypeError, ArgumentValueError, explain

from . import _norm_fused as nf, _xp
from ._norm_fused import Spec

IMPLS = ("reference", "fused")


#: What a layer computes, from its arguments (validated): the spec, the fixed
#: (running) statistics it normalizes with or None, and how many values each
#: batch statistic averages (None where it keeps none).
Plan = tuple[Spec, "tuple[Any, Any] | None", "int | None"]


def _impl(impl: str) -> None:
    if impl not in IMPLS:
        raise ArgumentValueError(explain("impl", "'reference' or 'fused'", repr(impl), "impl='fused'"))


def _apply(
    x: Any, weight: Any, bias: Any, spec: Spec, impl: str, fixed: tuple[Any, Any] | None = None
) -> tuple[Any, Any, Any]:
    """(y, mean, var) of one normalization, by ``impl``. The reference is the
    forward alone (the framework's AD derives the gradients); fused attaches
    the rules of :mod:`._norm_fused`."""
    xp = _xp.namespace(x)
    backend = _xp.backend_name(x)
    if impl == "fused" and backend == "torch":
        from ._norm_torch import fused  # (imports torch: only for a tensor)

        return fused(x, weight, bias, fixed, spec)
    if impl == "fused" and backend == "jax":
        y, (mean, var) = nf.jax_fused(spec)(x, weight, bias, fixed)
        return y, mean, var
    # reference on every backend; numpy's fused forward is the same
    # computation (numpy arrays carry no rules: norm_rule gives them).
    xhat, _, mean, var = nf.statistics(xp, x, spec, fixed)
    return nf.affine(xp, xhat, weight, bias, spec), mean, var


def _channel_shape(x: Any) -> tuple[int, ...]:
    return (1, x.shape[1]) + (1,) * (x.ndim - 2)


def _check_param(name: str, p: Any, expected: tuple[int, ...], what: str) -> None:
    if p is not None and tuple(p.shape) != expected:
        raise ArgumentValueError(
            explain(name, f"shape {expected} ({what})", f"shape {tuple(p.shape)}", f"pass {name} of shape {expected}")
        )


def _check_channel_params(c: int, **params: Any) -> None:
    for name, p in params.items():
        _check_param(name, p, (c,), "one per channel")


def _check_x(x: Any, min_ndim: int, fn: str) -> Any:
    xp = _xp.namespace(x)
    if x.ndim < min_ndim:
        raise ArgumentValueError(
            explain(
                f"{fn}(x)",
                f"at least {min_ndim} dimensions (N, C, ...)",
                f"shape {tuple(x.shape)}",
                "add the batch axis, e.g. x[None]",
            )
        )
    return xp


def _trailing(x: Any, normalized_shape: int | Sequence[int], fn: str) -> tuple[int, ...]:
    """The shape ``normalized_shape`` names, checked against x's trailing dimensions."""
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if not shape or tuple(x.shape[x.ndim - len(shape) :]) != shape:
        raise ArgumentValueError(
            explain(
                f"{fn}(x, normalized_shape)",
                f"x's trailing dimensions equal to {shape}",
                f"x of shape {tuple(x.shape)}",
                f"pass normalized_shape={tuple(x.shape[-1:])} (or more trailing dims)",
            )
        )
    return shape


def layer_norm(
    x: Any,
    normalized_shape: Sequence[int],
    weight: Any = None,
    bias: Any = None,
    eps: float = 1e-5,
    *,
    impl: str = "reference",
) -> Any:
    _impl(impl)
    spec, _, _ = _layer_norm_plan(x, normalized_shape, weight, bias, eps)
    return _apply(x, weight, bias, spec, impl)[0]


def _layer_norm_plan(
    x: Any, normalized_shape: Sequence[int], weight: Any = None, bias: Any = None, eps: float = 1e-5
) -> Plan:
    _xp.namespace(x)
    shape = _trailing(x, normalized_shape, "layer_norm")
    k = len(shape)
    _check_param("weight", weight, shape, "normalized_shape")
    _check_param("bias", bias, shape, "normalized_shape")
    return Spec(tuple(range(x.ndim - k, x.ndim)), eps), None, None


def rms_norm(
    x: Any,
    normalized_shape: Sequence[int],
    weight: Any = None,
    eps: float | None = None,
    *,
    impl: str = "reference",
) -> Any:
    """x / sqrt(mean(x^2) + eps) * weight; eps=None is the dtype's epsilon (as torch)."""
    _impl(impl)
    spec, _, _ = _rms_norm_plan(x, normalized_shape, weight, eps)
    return _apply(x, weight, None, spec, impl)[0]


def _rms_norm_plan(x: Any, normalized_shape: Sequence[int], weight: Any = None, eps: float | None = None) -> Plan:
    xp = _xp.namespace(x)
    shape = _trailing(x, normalized_shape, "rms_norm")
    k = len(shape)
    _check_param("weight", weight, shape, "normalized_shape")
    if eps is None:
        eps = float(xp.finfo(x.dtype).eps)
    return Spec(tuple(range(x.ndim - k, x.ndim)), eps, centred=False), None, None


def group_norm(
    x: Any,
    num_groups: int,
    weight: Any = None,
    bias: Any = None,
    eps: float = 1e-5,
    *,
    impl: str = "reference",
) -> Any:
    _impl(impl)
    spec, _, _ = _group_norm_plan(x, num_groups, weight, bias, eps)
    return _apply(x, weight, bias, spec, impl)[0]


def _group_norm_plan(x: Any, num_groups: int, weight: Any = None, bias: Any = None, eps: float = 1e-5) -> Plan:
    _check_x(x, 2, "group_norm")
    n, c = x.shape[0], x.shape[1]
    if not isinstance(num_groups, int) or num_groups < 1 or c % num_groups:
        divisors = [d for d in range(1, c + 1) if c % d == 0]
        raise ArgumentValueError(
            explain(
                "group_norm(num_groups)",
                f"a number of groups that divides the {c} channels",
                repr(num_groups),
                f"use one of {divisors}",
            )
        )
    _check_param("weight", weight, (c,), "one per channel")
    _check_param("bias", bias, (c,), "one per channel")
    # groups are contiguous channels
    return Spec((2,), eps, group=(n, num_groups, -1), param=_channel_shape(x)), None, None


def _statistics_count(x: Any, axes: tuple[int, ...], fn: str, expected: str, fix: str) -> int:
    """How many values each statistic averages; fewer than two is refused
    (the unbiased running variance divides by count - 1), as torch does."""
    count = math.prod(x.shape[a] for a in axes)
    if count < 2:
        raise ArgumentValueError(
            explain(fn, expected, f"input of shape {tuple(x.shape)} ({count} value per statistic)", fix)
        )
    return count


def _update(xp: Any, running: Any, stat: Any, momentum: float) -> Any:
    return (1 - momentum) * running + momentum * xp.astype(stat, running.dtype)


def _running(
    xp: Any,
    running_mean: Any,
    running_var: Any,
    mean: Any,
    var_unbiased: Any,
    momentum: float,
    return_stats: bool,
    fn: str,
) -> tuple[Any, Any] | None:
    if running_mean is None and running_var is None:
        return (None, None) if return_stats else None
    new_mean = _update(xp, running_mean, mean, momentum)
    new_var = _update(xp, running_var, var_unbiased, momentum)
    if return_stats:
        return new_mean, new_var
    if _xp.backend_name(running_mean) == "jax":
        raise ArgumentTypeError(
            explain(
                f"{fn}(training=True) with running statistics",
                "arrays updated in place",
                "jax arrays, which are immutable",
                "pass return_stats=True and keep the returned statistics",
            )
        )
    if _xp.backend_name(running_mean) == "torch":
        import torch

        with torch.no_grad():
            running_mean.copy_(new_mean)
            running_var.copy_(new_var)
    else:
        running_mean[...] = new_mean
        running_var[...] = new_var
    return None


def batch_norm(
    x: Any,
    running_mean: Any,
    running_var: Any,
    weight: Any = None,
    bias: Any = None,
    training: bool = False,
    momentum: float = 0.1,
    eps: float = 1e-5,
    *,
    impl: str = "reference",
    return_stats: bool = False,
) -> Any:
    """As torch.nn.functional.batch_norm. Training normalizes with the batch's
    biased variance and moves the running variance toward the unbiased one;
    ``return_stats=True`` returns (y, new_running_mean, new_running_var) instead
    of updating in place (the only way with jax arrays)."""
    _impl(impl)
    spec, fixed, count = _batch_norm_plan(x, running_mean, running_var, weight, bias, training, eps)
    xp = _xp.namespace(x)
    y, mean, var = _apply(x, weight, bias, spec, impl, fixed)
    if count is None:  # (eval: the running statistics, unchanged)
        stats = (running_mean, running_var) if return_stats else None
    else:
        c = x.shape[1]
        stats = _running(
            xp,
            running_mean,
            running_var,
            xp.reshape(mean, (c,)),
            xp.reshape(var, (c,)) * (count / (count - 1)),
            momentum,
            return_stats,
            "batch_norm",
        )
    return (y, *stats) if return_stats else y


def _batch_norm_plan(
    x: Any,
    running_mean: Any,
    running_var: Any,
    weight: Any = None,
    bias: Any = None,
    training: bool = False,
    eps: float = 1e-5,
) -> Plan:
    _check_x(x, 2, "batch_norm")
    c = x.shape[1]
    _check_channel_params(c, weight=weight, bias=bias, running_mean=running_mean, running_var=running_var)
    shape = _channel_shape(x)
    if training:
        axes = (0,) + tuple(range(2, x.ndim))
        count = _statistics_count(
            x,
            axes,
            "batch_norm(training=True)",
            "more than one value per channel",
            "use a batch of at least 2, or training=False with running statistics",
        )
        return Spec(axes, eps, param=shape), None, count
    if running_mean is None or running_var is None:
        raise ArgumentValueError(
            explain(
                "batch_norm(training=False)",
                "running_mean and running_var",
                "None",
                "pass the running statistics, or training=True",
            )
        )
    return Spec((), eps, param=shape, fixed=True), (running_mean, running_var), None


def instance_norm(
    x: Any,
    running_mean: Any = None,
    running_var: Any = None,
    weight: Any = None,
    bias: Any = None,
    use_input_stats: bool = True,
    momentum: float = 0.1,
    eps: float = 1e-5,
    *,
    impl: str = "reference",
    return_stats: bool = False,
) -> Any:
    """As torch.nn.functional.instance_norm: statistics per (sample, channel)."""
    _impl(impl)
    if not use_input_stats:
        return batch_norm(
            x, running_mean, running_var, weight, bias, False, momentum, eps, impl=impl, return_stats=return_stats
        )
    spec, fixed, count = _instance_norm_plan(x, running_mean, running_var, weight, bias, use_input_stats, eps)
    xp = _xp.namespace(x)
    y, mean, var = _apply(x, weight, bias, spec, impl, fixed)
    n, c = x.shape[0], x.shape[1]
    stats = _running(
        xp,
        running_mean,
        running_var,
        xp.mean(xp.reshape(mean, (n, c)), axis=0),
        xp.mean(xp.reshape(var, (n, c)), axis=0) * (count / (count - 1)),
        momentum,
        return_stats,
        "instance_norm",
    )
    return (y, *stats) if return_stats else y


def _instance_norm_plan(
    x: Any,
    running_mean: Any = None,
    running_var: Any = None,
    weight: Any = None,
    bias: Any = None,
    use_input_stats: bool = True,
    eps: float = 1e-5,
) -> Plan:
    _check_x(x, 3, "instance_norm")
    c = x.shape[1]
    _check_channel_params(c, weight=weight, bias=bias, running_mean=running_mean, running_var=running_var)
    if not use_input_stats:
        return _batch_norm_plan(x, running_mean, running_var, weight, bias, False, eps)
    axes = tuple(range(2, x.ndim))
    count = _statistics_count(
        x,
        axes,
        "instance_norm",
        "more than one spatial value per channel",
        "give each instance at least 2 spatial positions",
    )
    return Spec(axes, eps, param=_channel_shape(x)), None, count


FUNCTIONS = {
    "batch_norm": batch_norm,
    "group_norm": group_norm,
    "instance_norm": instance_norm,
    "layer_norm": layer_norm,
    "rms_norm": rms_norm,
}
#: Each layer's plan, from the arguments it takes by the same names.
PLANS = {
    "batch_norm": _batch_norm_plan,
    "group_norm": _group_norm_plan,
    "instance_norm": _instance_norm_plan,
    "layer_norm": _layer_norm_plan,
    "rms_norm": _rms_norm_plan,
}


def norm_rule(kind: str, x: Any, *args: Any, **kwargs: Any) -> Any:
    """The fused numpy normalization as a ``gv.Rule`` (numpy has no AD).

    Called like the layer itself, ``norm_rule("layer_norm", x, (8,), w, b)``,
    it returns the function of ``(x[, weight][, bias])`` (those passed, in that
    order) with every other argument fixed, and its jvp and vjp rules, for
    arrays of x's shape. Running statistics are not updated by the rule."""
    if kind not in FUNCTIONS:
        raise ArgumentValueError(explain("norm_rule(kind)", f"one of {sorted(FUNCTIONS)}", repr(kind), "pick one"))
    if _xp.backend_name(x) != "numpy":
        raise ArgumentTypeError(
            explain(
                "norm_rule(x)",
                "a numpy array (torch and jax carry their rules: use impl='fused')",
                f"a {_xp.backend_name(x)} array",
                f"call ops.{kind}(..., impl='fused')",
            )
        )
    bound = inspect.signature(FUNCTIONS[kind]).bind(x, *args, **kwargs).arguments  # (a wrong argument: TypeError)
    plan = PLANS[kind]
    spec, fixed, _ = plan(**{k: v for k, v in bound.items() if k in inspect.signature(plan).parameters})
    return nf.numpy_rule(spec, bound.get("weight") is not None, bound.get("bias") is not None, fixed)
