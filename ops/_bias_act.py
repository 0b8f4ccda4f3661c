"""bias_act: activation(x + b), reference and fused, on numpy, torch and jax.

* reference: ``activation(x + b)`` from backend operations; the framework's AD
  derives its gradients.
* fused: one pass with its own rules for both modes (torch: an
  ``autograd.Function`` with ``backward`` and ``jvp`` in the ``setup_context``
  style; jax: ``custom_jvp``; numpy: a ``gv.Rule``). Where the derivative is a
  function of the output the rules keep only the output; otherwise they keep
  z = x + b, never x alone (NNlib's seed bug evaluated swish' at x).
"""

from __future__ import annotations

from functools import cache
from typing import Any

import numpy as np

from gradverify._errors import ArgumentTypeError, ArgumentValueError, explain
from gradverify._rule import Rule

from . import _xp
from ._table import Activation, activation, slope

IMPLS = ("reference", "fused")


def _key(act: Activation) -> tuple:
    return (act.name, tuple(sorted(act.params.items())))


def _validate(x: Any, b: Any, impl: str) -> str:
    if impl not in IMPLS:
        raise ArgumentValueError(explain("impl", "'reference' or 'fused'", repr(impl), "impl='fused'"))
    backend = _xp.backend_name(x)
    if b is not None:
        b_backend = _xp.backend_name(b)
        if b_backend != backend:
            raise ArgumentTypeError(
                explain(
                    "bias_act(x, b)", "x and b of one backend", f"x {backend}, b {b_backend}", f"convert b to {backend}"
                )
            )
        x_shape, b_shape = tuple(x.shape), tuple(b.shape)
        try:
            out = np.broadcast_shapes(x_shape, b_shape)
        except ValueError:
            out = None
        if out != x_shape:
            hint = (
                f"b of shape ({x_shape[1]},) for x of shape {x_shape}"
                if len(x_shape) == 2
                else f"b of shape ({x_shape[1]}, {', '.join('1' for _ in x_shape[2:])}) for channels on axis 1"
                if len(x_shape) > 2
                else "b of x's shape or a shape that broadcasts to it"
            )
            raise ArgumentValueError(
                explain(
                    "bias_act(x, b)",
                    f"b that broadcasts against x without changing x's shape {x_shape}",
                    f"b of shape {b_shape}",
                    f"use {hint}",
                )
            )
    return backend


def bias_act(activation_: str | Activation, x: Any, b: Any = None, *, impl: str = "reference") -> Any:
    """``activation(x + b)``; ``b`` broadcasts against ``x`` without changing
    its shape ((C,) for (N, C); (C, 1, 1) for (N, C, H, W)); ``b=None``: no bias."""
    act = activation(activation_)
    backend = _validate(x, b, impl)
    if impl == "reference":
        xp = _xp.namespace(x)
        z = x if b is None else x + b
        return act.forward(xp, z, **act.params)
    if backend == "torch":
        from ._bias_act_torch import fused  # (imports torch: only for a tensor)

        return fused(act, x, b)
    if backend == "jax":
        return _jax_fused(_key(act), b is not None)(*((x,) if b is None else (x, b)))
    return bias_act_rule(act, bias=b is not None)(*((x,) if b is None else (x, b)))


def bias_act_(activation_: str | Activation, x: Any, b: Any = None) -> Any:
    """In place: overwrites ``x`` with ``activation(x + b)`` and returns it, like
    NNlib's ``bias_act!`` (torch and numpy)."""
    act = activation(activation_)
    backend = _validate(x, b, "fused")
    if backend == "jax":
        raise ArgumentTypeError(
            explain(
                "bias_act_(x)",
                "a torch tensor or a numpy array (overwritten in place)",
                "a jax array, which is immutable",
                "use y = bias_act(activation, x, b, impl='fused')",
            )
        )
    if backend == "torch":
        from ._bias_act_torch import fused_  # (imports torch: only for a tensor)

        return fused_(act, x, b)
    if not x.flags.writeable:
        raise ArgumentValueError(
            explain(
                "bias_act_(x)", "a writeable array", "a read-only array", "pass a copy: bias_act_(act, x.copy(), b)"
            )
        )
    if not np.issubdtype(x.dtype, np.floating):
        raise ArgumentTypeError(
            explain(
                "bias_act_(x)",
                "a floating-point array",
                f"dtype {x.dtype}",
                "convert x first, e.g. x.astype(np.float32)",
            )
        )
    if b is not None:
        np.add(x, b, out=x, casting="same_kind")
    x[...] = act.forward(_xp.namespace(x), x, **act.params)
    return x


# -- numpy: a gv.Rule ----------------------------------------------------------------
def bias_act_rule(activation_: str | Activation, *, bias: bool = True) -> Any:
    """The fused numpy bias_act as a ``gv.Rule`` (numpy has no AD): the function
    of (x, b) (or of x alone with ``bias=False``) with its jvp and vjp rules."""
    act = activation(activation_)
    p = act.params
    xp = _xp.namespace(np.zeros(0))

    def z_of(primals: tuple) -> Any:
        return primals[0] if not bias else primals[0] + primals[1]

    def fn(*args: Any) -> Any:
        return act.forward(xp, z_of(args), **p)

    def slope_at(primals: tuple) -> Any:
        z = z_of(primals)
        return slope(act, xp, z, act.forward(xp, z, **p))

    def jvp(primals: tuple, tangents: tuple) -> Any:
        t = tangents[0] if not bias else tangents[0] + tangents[1]
        return (slope_at(primals) * t).astype(np.result_type(*primals), copy=False)

    def vjp(primals: tuple, g: Any) -> tuple:
        gz = slope_at(primals) * g
        gx = gz.astype(primals[0].dtype, copy=False)
        if not bias:
            return (gx,)
        b = primals[1]
        gb = gz.sum(axis=_xp.broadcast_axes(gz.shape, b.shape)).reshape(b.shape).astype(b.dtype, copy=False)
        return gx, gb

    fn.__name__ = f"bias_act_{act.name}_fused"
    return Rule(fn, jvp=jvp, vjp=vjp)


# -- jax: custom_jvp ---------------------------------------------------------------------
@cache
def _jax_fused(key: tuple, has_bias: bool) -> Any:
    import jax

    act = activation(key[0], **dict(key[1]))
    p = act.params
    xp = _xp.namespace(jax.numpy.zeros(0))

    def f(*args: Any) -> Any:
        z = args[0] if not has_bias else args[0] + args[1]
        return act.forward(xp, z, **p)

    fused = jax.custom_jvp(f)

    @fused.defjvp
    def _jvp(primals: tuple, tangents: tuple) -> tuple:
        z = primals[0] if not has_bias else primals[0] + primals[1]
        y = act.forward(xp, z, **p)
        d = slope(act, xp, z, y)
        t = tangents[0] if not has_bias else tangents[0] + tangents[1]
        return y, d * t

    fused.__name__ = f"bias_act_{act.name}_fused"
    return fused
