"""The fused normalization rules, written once against the array namespace.

Every layer here normalizes x over some axes of a grouped view of it and then
applies an optional affine weight and bias:

    xhat = (x - mean) * rstd,   rstd = 1 / sqrt(var + eps)     (centred)
    xhat = x * rstd,            rstd = 1 / sqrt(mean(x^2) + eps) (rms)
    y    = xhat * weight + bias

The Jacobian of xhat with respect to x, per group of M values, is

    J = rstd * (P - xhat xhat^T / M),   P = I - 1 1^T / M   (I for rms),

which is symmetric: one function, :func:`project`, is both the JVP and the
VJP of the normalization, and it needs only xhat and rstd. The rules therefore
keep just those two (plus the weight), never x, the mean or the centred input.
``fixed`` statistics (batch_norm in eval mode) make J = rstd * I.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

from gradverify._rule import Rule

from . import _xp

_LOW = ("float16", "bfloat16")


@dataclass(frozen=True)
class Spec:
    """Where the statistics are taken and how the parameters broadcast.

    ``group``: the shape of x's grouped view for the statistics (None: x's own
    shape); ``axes``: the reduced axes in that view; ``param``: the shape the
    weight and bias take to broadcast against x (None: as given); ``centred``:
    subtract the mean (False: rms_norm); ``fixed``: the statistics are given
    (running mean and variance in the channel shape ``param``), not computed.
    """

    axes: tuple[int, ...]
    eps: float
    group: tuple[int, ...] | None = None
    param: tuple[int, ...] | None = None
    centred: bool = True
    fixed: bool = False


def dtype_name(x: Any) -> str:
    return str(x.dtype).removeprefix("torch.")


def stat_dtype(xp: Any, x: Any) -> Any:
    """Statistics in at least float32 (float16/bfloat16 inputs are widened)."""
    return xp.float32 if dtype_name(x) in _LOW else x.dtype


def _grouped(xp: Any, a: Any, spec: Spec) -> Any:
    return a if spec.group is None else xp.reshape(a, spec.group)


def _mean(xp: Any, a: Any, spec: Spec) -> Any:
    return xp.mean(a, axis=spec.axes, keepdims=True)


def statistics(xp: Any, x: Any, spec: Spec, fixed: tuple[Any, Any] | None = None) -> tuple[Any, Any, Any, Any]:
    """(xhat in x's dtype and shape, rstd, mean, var) with the statistics in the
    grouped view, keepdims, in at least float32. For rms ``mean`` is None and
    ``var`` is the mean square."""
    xs = _grouped(xp, xp.astype(x, stat_dtype(xp, x)), spec)
    if fixed is not None:
        mean, var = (xp.reshape(xp.astype(s, xs.dtype), spec.param) for s in fixed)
        centred = xs - mean
    elif spec.centred:
        mean = _mean(xp, xs, spec)
        centred = xs - mean
        var = _mean(xp, centred * centred, spec)
    else:
        mean, centred = None, xs
        var = _mean(xp, xs * xs, spec)
    rstd = 1 / xp.sqrt(var + spec.eps)
    xhat = xp.astype(xp.reshape(centred * rstd, tuple(x.shape)), x.dtype)
    return xhat, rstd, mean, var


def project(xp: Any, xhat: Any, rstd: Any, t: Any, spec: Spec) -> Any:
    """J t, the derivative of xhat along t; J is symmetric, so this is also the
    VJP of a cotangent t. Computed in the statistics' dtype, returned in t's."""
    ts = _grouped(xp, xp.astype(t, rstd.dtype), spec)
    if spec.fixed:
        out = ts * rstd
    else:
        xh = _grouped(xp, xp.astype(xhat, rstd.dtype), spec)
        if spec.centred:
            ts = ts - _mean(xp, ts, spec)
        out = rstd * (ts - xh * _mean(xp, xh * ts, spec))
    return xp.astype(xp.reshape(out, tuple(t.shape)), t.dtype)


def rstd_tangent(xp: Any, xhat: Any, rstd: Any, t: Any, spec: Spec) -> Any:
    """d rstd along t: -rstd^2 * mean(xhat * t) per group (0 for fixed statistics)."""
    if spec.fixed:
        return xp.zeros_like(rstd)
    xh = _grouped(xp, xp.astype(xhat, rstd.dtype), spec)
    return -rstd * rstd * _mean(xp, xh * _grouped(xp, xp.astype(t, rstd.dtype), spec), spec)


def param_view(xp: Any, p: Any, spec: Spec) -> Any:
    return p if p is None or spec.param is None else xp.reshape(p, spec.param)


def affine(xp: Any, xhat: Any, w: Any, b: Any, spec: Spec) -> Any:
    y = xhat
    if w is not None:
        y = y * param_view(xp, w, spec)
    if b is not None:
        y = y + param_view(xp, b, spec)
    return y


def reduce_to(xp: Any, a: Any, p: Any, spec: Spec) -> Any:
    """Sum ``a`` (x's shape) over the axes the parameter ``p`` was broadcast
    along, back to ``p``'s shape and dtype."""
    view = tuple(p.shape) if spec.param is None else spec.param
    axes = _xp.broadcast_axes(tuple(a.shape), view)
    s = xp.sum(a, axis=axes) if axes else a
    return xp.astype(xp.reshape(s, tuple(p.shape)), p.dtype)


def tangent(xp: Any, xhat: Any, rstd: Any, w: Any, tx: Any, tw: Any, tb: Any, spec: Spec) -> Any:
    """The output tangent of y = xhat * w + b along (tx, tw, tb) (each may be None)."""
    parts = []
    if tx is not None:
        txh = project(xp, xhat, rstd, tx, spec)
        parts.append(txh if w is None else txh * param_view(xp, w, spec))
    if tw is not None:
        parts.append(xhat * param_view(xp, tw, spec))
    if tb is not None:
        parts.append(xp.broadcast_to(param_view(xp, tb, spec), tuple(xhat.shape)))
    if not parts:
        return xp.zeros_like(xhat)
    out = parts[0]
    for p in parts[1:]:
        out = out + p
    return out


def cotangents(xp: Any, xhat: Any, rstd: Any, w: Any, b: Any, g: Any, spec: Spec) -> tuple[Any, Any, Any]:
    """(gx, gw, gb) for the cotangent g of y = xhat * w + b (gw/gb None when absent)."""
    gxhat = g if w is None else g * param_view(xp, w, spec)
    gx = project(xp, xhat, rstd, gxhat, spec)
    gw = None if w is None else reduce_to(xp, g * xhat, w, spec)
    gb = None if b is None else reduce_to(xp, g, b, spec)
    return gx, gw, gb


# -- numpy: a gv.Rule -----------------------------------------------------------------
def numpy_rule(spec: Spec, has_w: bool, has_b: bool, fixed: tuple[Any, Any] | None = None) -> Any:
    """The fused numpy normalization as a ``gv.Rule`` of (x[, weight][, bias])."""
    xp = _xp.namespace(np.zeros(0))

    def split(args: tuple) -> tuple[Any, Any, Any]:
        x, rest = args[0], list(args[1:])
        w = rest.pop(0) if has_w else None
        b = rest.pop(0) if has_b else None
        return x, w, b

    def fn(*args: Any) -> Any:
        x, w, b = split(args)
        xhat, _, _, _ = statistics(xp, x, spec, fixed)
        return affine(xp, xhat, w, b, spec)

    def jvp(primals: tuple, tangents: tuple) -> Any:
        x, w, _ = split(primals)
        tx, tw, tb = split(tangents)
        xhat, rstd, _, _ = statistics(xp, x, spec, fixed)
        return tangent(xp, xhat, rstd, w, tx, tw, tb, spec)

    def vjp(primals: tuple, g: Any) -> tuple:
        x, w, b = split(primals)
        xhat, rstd, _, _ = statistics(xp, x, spec, fixed)
        gx, gw, gb = cotangents(xp, xhat, rstd, w, b, g, spec)
        return (gx,) + ((gw,) if has_w else ()) + ((gb,) if has_b else ())

    fn.__name__ = "normalization_fused"
    return Rule(fn, jvp=jvp, vjp=vjp)


# -- jax: custom_jvp ----------------------------------------------------------------------
@cache
def jax_fused(spec: Spec) -> Any:
    """f(x, w, b, fixed) -> (y, (mean, var)) with a custom JVP (reverse mode and
    jit follow from it); w, b and fixed may be None. Fixed statistics get no
    tangent, as torch's running statistics, which autograd does not differentiate."""
    import jax

    xp = _xp.namespace(jax.numpy.zeros(0))

    def run(x: Any, w: Any, b: Any, fixed: Any) -> tuple:
        xhat, rstd, mean, var = statistics(xp, x, spec, fixed)
        return affine(xp, xhat, w, b, spec), xhat, rstd, mean, var

    def f(x: Any, w: Any, b: Any, fixed: Any) -> tuple:
        y, _, _, mean, var = run(x, w, b, fixed)
        return y, _stats_out(xp, mean, var)

    fused = jax.custom_jvp(f)

    @fused.defjvp
    def _jvp(primals: tuple, tangents: tuple) -> tuple:
        x, w, b, fixed = primals
        tx, tw, tb, _ = tangents
        y, xhat, rstd, mean, var = run(x, w, b, fixed)
        ty = tangent(xp, xhat, rstd, w, tx, tw, tb, spec)
        return (y, _stats_out(xp, mean, var)), (ty, _stats_tangent(xp, xhat, rstd, mean, var, tx, spec))

    return fused


def _stats_out(xp: Any, mean: Any, var: Any) -> tuple[Any, Any]:
    return (xp.zeros_like(var) if mean is None else mean), var


def _stats_tangent(xp: Any, xhat: Any, rstd: Any, mean: Any, var: Any, tx: Any, spec: Spec) -> tuple:
    """Tangents of the returned (mean, var): mean(t) and 2 * mean(xhat * t) / rstd
    (the centred input is xhat / rstd); zero for fixed statistics."""
    if spec.fixed:
        return xp.zeros_like(mean), xp.zeros_like(var)
    ts = _grouped(xp, xp.astype(tx, rstd.dtype), spec)
    xh = _grouped(xp, xp.astype(xhat, rstd.dtype), spec)
    t_var = 2 * _mean(xp, xh * ts, spec) / rstd
    t_mean = _mean(xp, ts, spec) if spec.centred else xp.zeros_like(var)
    return t_mean, t_var
