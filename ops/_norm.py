"""Normalization layers with the signatures and conventions of
``torch.nn.functional``: normalize with the biased variance, update running
variance with the unbiased one, eps inside the square root, groups are
contiguous channels, statistics in at least float32, training and eval pinned
explicitly. Written once against the array namespace (reference: the
framework's AD derives the gradients)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from gradverify._errors import ArgumentTypeError, ArgumentValueError, explain

from . import _xp

_LOW = ("float16", "bfloat16")


def _dtype_name(x: Any) -> str:
    return str(x.dtype).removeprefix("torch.")


def _stat_dtype(xp: Any, x: Any) -> Any:
    """Statistics in at least float32 (float16/bfloat16 inputs are widened)."""
    return xp.float32 if _dtype_name(x) in _LOW else x.dtype


def _impl(impl: str) -> None:
    if impl != "reference":
        raise ArgumentValueError(
            explain(
                "impl",
                "'reference' (the fused normalization rules are not built yet)",
                repr(impl),
                "use impl='reference'",
            )
        )


def _normalize(xp: Any, x: Any, axes: tuple[int, ...], eps: float) -> tuple[Any, Any, Any]:
    """(x - mean) / sqrt(var + eps) over ``axes`` with the biased variance;
    returns the normalized input (x's dtype), the mean and the variance."""
    xs = xp.astype(x, _stat_dtype(xp, x))
    mean = xp.mean(xs, axis=axes, keepdims=True)
    centred = xs - mean
    var = xp.mean(centred * centred, axis=axes, keepdims=True)
    xhat = centred / xp.sqrt(var + eps)
    return xp.astype(xhat, x.dtype), mean, var


def _channel_shape(x: Any) -> tuple[int, ...]:
    return (1, x.shape[1]) + (1,) * (x.ndim - 2)


def _affine(xp: Any, y: Any, weight: Any, bias: Any, shape: tuple[int, ...] | None = None) -> Any:
    if weight is not None:
        y = y * (weight if shape is None else xp.reshape(weight, shape))
    if bias is not None:
        y = y + (bias if shape is None else xp.reshape(bias, shape))
    return y


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
    xp = _xp.namespace(x)
    shape = _trailing(x, normalized_shape, "layer_norm")
    k = len(shape)
    _check_param("weight", weight, shape, "normalized_shape")
    _check_param("bias", bias, shape, "normalized_shape")
    xhat, _, _ = _normalize(xp, x, tuple(range(x.ndim - k, x.ndim)), eps)
    return _affine(xp, xhat, weight, bias)


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
    xp = _xp.namespace(x)
    shape = _trailing(x, normalized_shape, "rms_norm")
    k = len(shape)
    _check_param("weight", weight, shape, "normalized_shape")
    if eps is None:
        eps = float(xp.finfo(x.dtype).eps)
    xs = xp.astype(x, _stat_dtype(xp, x))
    ms = xp.mean(xs * xs, axis=tuple(range(x.ndim - k, x.ndim)), keepdims=True)
    y = xp.astype(xs / xp.sqrt(ms + eps), x.dtype)
    return _affine(xp, y, weight, None)


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
    xp = _check_x(x, 2, "group_norm")
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
    grouped = xp.reshape(x, (n, num_groups, -1))  # groups are contiguous channels
    xhat, _, _ = _normalize(xp, grouped, (2,), eps)
    return _affine(xp, xp.reshape(xhat, tuple(x.shape)), weight, bias, _channel_shape(x))


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
    xp = _check_x(x, 2, "batch_norm")
    c = x.shape[1]
    _check_channel_params(c, weight=weight, bias=bias, running_mean=running_mean, running_var=running_var)
    axes = (0,) + tuple(range(2, x.ndim))
    shape = _channel_shape(x)
    if training:
        count = math.prod(x.shape[a] for a in axes)
        if count < 2:
            raise ArgumentValueError(
                explain(
                    "batch_norm(training=True)",
                    "more than one value per channel",
                    f"input of shape {tuple(x.shape)} ({count} value per channel)",
                    "use a batch of at least 2, or training=False with running statistics",
                )
            )
        xhat, mean, var = _normalize(xp, x, axes, eps)
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
    else:
        if running_mean is None or running_var is None:
            raise ArgumentValueError(
                explain(
                    "batch_norm(training=False)",
                    "running_mean and running_var",
                    "None",
                    "pass the running statistics, or training=True",
                )
            )
        xs = xp.astype(x, _stat_dtype(xp, x))
        rm = xp.reshape(xp.astype(running_mean, xs.dtype), shape)
        rv = xp.reshape(xp.astype(running_var, xs.dtype), shape)
        xhat = xp.astype((xs - rm) / xp.sqrt(rv + eps), x.dtype)
        stats = (running_mean, running_var) if return_stats else None
    y = _affine(xp, xhat, weight, bias, shape)
    return (y, *stats) if return_stats else y


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
    xp = _check_x(x, 3, "instance_norm")
    n, c = x.shape[0], x.shape[1]
    _check_channel_params(c, weight=weight, bias=bias, running_mean=running_mean, running_var=running_var)
    shape = _channel_shape(x)
    if not use_input_stats:
        y = batch_norm(x, running_mean, running_var, weight, bias, False, momentum, eps, return_stats=return_stats)
        return y
    axes = tuple(range(2, x.ndim))
    count = math.prod(x.shape[2:])
    if count < 2:
        raise ArgumentValueError(
            explain(
                "instance_norm",
                "more than one spatial value per channel",
                f"input of shape {tuple(x.shape)}",
                "give each instance at least 2 spatial positions",
            )
        )
    xhat, mean, var = _normalize(xp, x, axes, eps)
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
    y = _affine(xp, xhat, weight, bias, shape)
    return (y, *stats) if return_stats else y
