"""Arguments for the bundled ops: bias_act's (x, b) away from every kink of the
activation yet covering every piece, normalization inputs whose statistics
are informative, and the activation names ordered simplest first."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from hypothesis import strategies as st

from gradverify import ops
from gradverify._errors import ArgumentValueError, explain
from gradverify._rule import Rule
from gradverify.ops import ACTIVATIONS, Activation, activation

from ._arrays import _shape_strategy, as_drawn, check_backend_dtype, kink_margin, to_backend

# Simplest first: a shrink toward activations() ends at identity, then relu.
_FIRST = ("identity", "relu", "tanh", "sigmoid", "leakyrelu", "softplus")


def activation_names() -> list[str]:
    rest = [a.name for a in ACTIVATIONS if a.name not in _FIRST]
    return [n for n in _FIRST if any(a.name == n for a in ACTIVATIONS)] + rest


def activations() -> st.SearchStrategy:
    """The activation table's names, ordered so that shrinking ends at the simplest."""
    return st.sampled_from(activation_names())


def pieces(kinks: Sequence[float], lo: float, hi: float, margin: float) -> list[tuple[float, float]]:
    """The smooth intervals between kinks inside [lo, hi], each shrunk by the
    margin, nearest to zero first (so shrinking prefers the simplest piece)."""
    points = sorted({float(k) for k in kinks if lo < k < hi})
    edges = [lo, *points, hi]
    out = []
    for a, b in zip(edges, edges[1:]):
        a2 = a if a == lo else a + margin
        b2 = b if b == hi else b - margin
        if a2 < b2:
            out.append((a2, b2))
    return sorted(out, key=lambda p: (0.0 if p[0] <= 0 <= p[1] else min(abs(p[0]), abs(p[1])), -p[0]))


def _bias_shape(shape: tuple[int, ...]) -> tuple[int, ...]:
    """(C,) for (C,) and (N, C); (C, 1, ...) for channels on axis 1."""
    if len(shape) <= 2:
        return (shape[-1],)
    return (shape[1],) + (1,) * (len(shape) - 2)


def bias_act_args(
    activation_: str | Activation,
    backend: str,
    dtype: str = "float64",
    shape: Any = None,
    *,
    bias: bool = True,
    min_value: float = -10.0,
    max_value: float = 10.0,
    bias_range: float = 3.0,
    kinks: Sequence[float] = (),
    margin: float | None = None,
) -> st.SearchStrategy:
    """``(x, b)`` (or ``(x,)`` with ``bias=False``) for ``bias_act(activation, x, b)``.

    z = x + b is built first, piece by piece: each element picks one of the
    smooth intervals between the activation's kinks (and any extra ``kinks``)
    and a value inside it at least ``margin`` from its ends, so every piece is
    reached (relu6 above 6, hardsigmoid saturated on both sides, softshrink
    inside and outside +-lambda) and none is straddled by a finite-difference
    stencil; then x = z - b. Shrinks toward one element, b = 0 and the piece
    nearest zero. ``shape`` defaults to (N, C) up to (4, 5); b has shape (C,)
    (or (C, 1, ...) for channels on axis 1)."""
    check_backend_dtype(backend, dtype)
    act = activation(activation_)
    mag = max(abs(min_value), abs(max_value)) + bias_range
    m = kink_margin(dtype, mag) if margin is None else float(margin)
    points = [k for k, _ in act.kink_points()] + [float(k) for k in kinks]
    parts = pieces(points, min_value, max_value, m)
    if not parts:
        raise ArgumentValueError(
            explain(
                "bias_act_args",
                "room between the kinks for values",
                f"kinks {sorted(points)} with margin {m:g} in [{min_value}, {max_value}]",
                "widen [min_value, max_value] or pass a smaller margin",
            )
        )
    shapes = _shape_strategy(st.tuples(st.integers(1, 4), st.integers(1, 5)) if shape is None else shape)

    def element(piece: tuple[float, float]) -> st.SearchStrategy:
        return st.floats(piece[0], piece[1], allow_nan=False, allow_infinity=False, allow_subnormal=False)

    @st.composite
    def build(draw: Any) -> tuple:
        shp = draw(shapes)
        n = math.prod(shp)
        z = np.array([draw(st.sampled_from(parts).flatmap(element)) for _ in range(n)], dtype=np.float64)
        z = z.reshape(shp)
        if not bias:
            return (as_drawn(z, backend, dtype),)
        bshape = _bias_shape(shp)
        b = np.array(
            draw(
                st.lists(
                    st.floats(-bias_range, bias_range, allow_nan=False, allow_subnormal=False),
                    min_size=math.prod(bshape),
                    max_size=math.prod(bshape),
                )
            ),
            dtype=np.float64,
        ).reshape(bshape)
        # round b first, so that x + b in the dtype lands where z was put
        b_d = np.asarray(to_backend(b, "numpy", "float64" if dtype == "bfloat16" else dtype), dtype=np.float64)
        return as_drawn(z - b_d, backend, dtype), as_drawn(b_d, backend, dtype)

    return build()


# -- normalization --------------------------------------------------------------------
KINDS = ("layer_norm", "rms_norm", "group_norm", "instance_norm", "batch_norm")
# per-slice standard deviations: 3e-3 is small (variance ~ eps = 1e-5) but not degenerate
SCALES = (1.0, 0.1, 3e-3, 10.0)
OFFSETS = (0.0, 1.0, -2.0)


def normalization_call(kind: str, impl: str = "reference", *, training: bool = True, backend: str | None = None) -> Any:
    """The function of :func:`normalization_args`' arrays: e.g. for group_norm
    ``lambda x, g, w, b: ops.group_norm(x, int(g), w, b, impl=impl)``. With
    ``backend="numpy"`` and ``impl="fused"`` it is a ``gv.Rule`` whose rules are
    the layer's :func:`gradverify.ops.norm_rule` at each input (numpy has no AD)."""
    calls = {
        "layer_norm": lambda x, w, b: ops.layer_norm(x, tuple(x.shape[-1:]), w, b, impl=impl),
        "rms_norm": lambda x, w: ops.rms_norm(x, tuple(x.shape[-1:]), w, impl=impl),
        "group_norm": lambda x, g, w, b: ops.group_norm(x, int(g), w, b, impl=impl),
        "instance_norm": lambda x, w, b: ops.instance_norm(x, weight=w, bias=b, impl=impl),
        "batch_norm": (
            (lambda x, w, b: ops.batch_norm(x, None, None, w, b, True, impl=impl))
            if training
            else (lambda x, rm, rv, w, b: ops.batch_norm(x, rm, rv, w, b, False, impl=impl))
        ),
    }
    if kind not in calls:
        raise ArgumentValueError(explain("kind", f"one of {KINDS}", repr(kind), "e.g. kind='layer_norm'"))
    f = calls[kind]
    f.__name__ = f"{kind}_{impl}"
    if backend == "numpy" and impl == "fused":
        return _numpy_rule(kind, f, training)
    return f


def _numpy_rule(kind: str, f: Any, training: bool) -> Any:
    """gv.Rule over normalization_args' layout: the constants (groups, running
    statistics) pass through, the rules come from ops.norm_rule at the point."""

    def split(args: tuple) -> tuple[tuple, list[int]]:
        """(the layer's own arguments, positions of the differentiable ones)."""
        if kind == "layer_norm":
            return (args[0], args[0].shape[-1:], args[1], args[2]), [1, 2]
        if kind == "rms_norm":
            return (args[0], args[0].shape[-1:], args[1]), [1]
        if kind == "group_norm":
            return (args[0], int(args[1]), args[2], args[3]), [2, 3]
        if kind == "instance_norm":
            return (args[0], None, None, args[1], args[2]), [1, 2]
        if training:
            return (args[0], None, None, args[1], args[2], True), [1, 2]
        return (args[0], args[1], args[2], args[3], args[4], False), [3, 4]

    def rule_at(args: tuple) -> tuple[Any, list[int]]:
        layer_args, params = split(args)
        return ops.norm_rule(kind, *layer_args), params

    def jvp(p: tuple, t: tuple) -> Any:
        rule, params = rule_at(p)
        return rule.jvp((p[0], *(p[k] for k in params)), (t[0], *(t[k] for k in params)))

    def vjp(p: tuple, g: Any) -> tuple:
        rule, params = rule_at(p)
        out = rule.vjp((p[0], *(p[k] for k in params)), g)
        grads: list[Any] = [None] * len(p)
        grads[0] = out[0]
        for k, gk in zip(params, out[1:]):
            grads[k] = gk
        return tuple(grads)

    return Rule(f, jvp=jvp, vjp=vjp)


def _slices(kind: str, shape: tuple[int, ...], groups: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(view, axes): the view of x in which each normalized slice is the
    reduced ``axes`` (the same grouping the layer uses)."""
    if kind in ("layer_norm", "rms_norm"):
        return shape, (len(shape) - 1,)
    if kind == "group_norm":
        return (shape[0], groups, -1), (2,)
    if kind == "instance_norm":
        return shape, tuple(range(2, len(shape)))
    return shape, (0, *range(2, len(shape)))


def normalization_args(
    kind: str,
    backend: str,
    dtype: str = "float64",
    *,
    training: bool = True,
    max_side: int = 4,
) -> st.SearchStrategy:
    """Arguments for :func:`normalization_call` ``(kind)``: arrays only
    (group_norm's number of groups as a 0-d integer array, a constant).

    x's axes longer than 1 have distinct sizes (a transposed axis shows);
    every normalized slice holds at least two values; each slice gets its own scale (from
    1e1 down to 3e-3, small but never degenerate: a constant slice is
    impossible by construction) and offset; the weight is != 1 and varied;
    training batch_norm gets a batch of at least 2; group_norm draws groups
    and channels per group from 1..3, so C = 4 with 2 groups is among the
    cases. Shrinks toward the smallest shape and plain values."""
    check_backend_dtype(backend, dtype)
    if kind not in KINDS:
        raise ArgumentValueError(explain("kind", f"one of {KINDS}", repr(kind), "e.g. kind='layer_norm'"))

    @st.composite
    def build(draw: Any) -> tuple:
        groups = 1
        if kind in ("layer_norm", "rms_norm"):
            n = draw(st.integers(1, max_side))
            d = draw(st.integers(2, max_side + 1).filter(lambda d: d != n))
            shape: tuple[int, ...] = (n, d)
            channels = d
        else:
            n = draw(st.integers(2 if kind == "batch_norm" and training else 1, max_side))
            per = 1
            if kind == "group_norm":
                groups, per = draw(
                    st.tuples(st.integers(1, 3), st.integers(1, 3)).filter(
                        lambda t: t[0] * t[1] == 1 or t[0] * t[1] != n
                    )
                )
                channels = groups * per
            else:
                channels = draw(st.integers(1, max_side).filter(lambda c: c == 1 or c != n))
            # every normalized slice holds at least two values
            one_value = kind == "instance_norm" or (kind == "group_norm" and per == 1)
            taken = {k for k in (n, channels) if k > 1}
            length = draw(st.integers(2 if one_value else 1, max_side + 2).filter(lambda k: k == 1 or k not in taken))
            shape = (n, channels, length)
        size = math.prod(shape)
        u = np.array(
            draw(st.lists(st.floats(-1, 1, allow_subnormal=False), min_size=size, max_size=size)), dtype=np.float64
        )
        view, axes = _slices(kind, shape, groups)
        grouped = np.moveaxis(u.reshape(view), axes, tuple(range(-len(axes), 0)))
        lead = grouped.shape[: grouped.ndim - len(axes)]
        slices = grouped.reshape(*lead, -1)
        k = slices.shape[-1]
        pattern = np.linspace(-1.0, 1.0, k) if k > 1 else np.zeros(1)
        v = slices + 0.5 * pattern
        flat = v.reshape(-1, k)
        weak = flat.std(axis=1) < 0.1 * (pattern.std() or 1.0)
        flat[weak] = pattern  # never degenerate: fall back to the fixed pattern
        count = flat.shape[0]
        scale = np.array(draw(st.lists(st.sampled_from(SCALES), min_size=count, max_size=count)))
        offset = np.array(draw(st.lists(st.sampled_from(OFFSETS), min_size=count, max_size=count)))
        flat = offset[:, None] + scale[:, None] * flat
        x = np.moveaxis(flat.reshape(grouped.shape), tuple(range(-len(axes), 0)), axes).reshape(shape)
        wshape = (shape[-1],) if kind in ("layer_norm", "rms_norm") else (channels,)
        c = wshape[0]
        u = np.array(draw(st.lists(st.floats(-1, 1), min_size=c, max_size=c)))
        w = (1.25 + 0.5 * np.abs(u)) ** np.where(u < 0, -1.0, 1.0)  # in [0.57, 0.8] or [1.25, 1.75]: never 1
        b = np.array(draw(st.lists(st.floats(-1, 1), min_size=c, max_size=c)))
        arr = lambda a: to_backend(a, backend, dtype)  # noqa: E731
        if kind == "rms_norm":
            return arr(x), arr(w)
        if kind == "group_norm":
            return arr(x), _int(groups, backend), arr(w), arr(b)
        if kind == "batch_norm" and not training:
            rm = np.array(draw(st.lists(st.floats(-1, 1), min_size=c, max_size=c)))
            rv = np.array(draw(st.lists(st.floats(0.25, 4), min_size=c, max_size=c)))
            return arr(x), arr(rm), arr(rv), arr(w), arr(b)
        return arr(x), arr(w), arr(b)

    return build()


def _int(k: int, backend: str) -> Any:
    if backend == "numpy":
        return np.array(k, dtype=np.int64)
    if backend == "torch":
        import torch

        return torch.tensor(k, dtype=torch.int64)
    import jax.numpy as jnp

    return jnp.asarray(k, dtype=jnp.int32)
