"""``check_grads``, ``check_jvp`` and ``check_vjp`` with jax's signatures, checked by gradverify.

Switch a suite by its import line::

    from gradverify.jax import check_grads  # was: from jax.test_util import check_grads

Arguments are pytrees as in jax (numpy arrays and Python scalars among the
leaves are taken as jax arrays); a failure raises ``AssertionError`` with
gradverify's report, as jax's do. What each keyword maps to is in
docs/migrating.md.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from . import _observe
from ._check.pipeline import check
from ._check.unchecked import empty_allowed, lacking, required_failed
from ._result import CheckResult
from ._rule import Rule

__all__ = ["check_grads", "check_jvp", "check_vjp"]

#: jax's modes by gradverify's names.
_MODES = {"fwd": "JVP", "rev": "VJP"}


def check_grads(
    f: Callable[..., Any],
    args: Sequence[Any],
    order: int,
    modes: Sequence[str] = ("fwd", "rev"),
    atol: Any = None,
    rtol: Any = None,
    eps: float | None = None,
) -> None:
    """``jax.test_util.check_grads``, checked by gradverify: forward mode,
    reverse mode and finite differences cross-checked with a rounding model,
    to ``order``. ``modes`` are the modes checked, as in jax (a mode asked
    for that f does not have fails; one not asked for is not run); ``atol`` and
    ``rtol`` (numbers, or dicts by dtype, jax's defaults by dtype otherwise)
    are the suite's tolerance: an element within it of finite differences
    never fails, one beyond both it and gradverify's bound does. gradverify
    chooses its own steps (``eps``). Raises AssertionError on failure."""
    if isinstance(modes, str):  # (jax asks `"rev" in modes`: a string names its modes too)
        modes = [m for m in _MODES if m in modes] or [modes]
    unknown = [m for m in modes if m not in _MODES]
    if unknown:
        raise ValueError(f"modes must be a sequence of 'fwd' and 'rev'; found {unknown!r}")
    args = _as_jax(args)
    asked = [_MODES[m] for m in modes]
    required, deepest = list(asked), list(asked)
    for _ in range(int(order) - 1):  # (as jax recurses: each asked mode of each derivative checked)
        deepest = [f"{a} of {b}" for b in deepest for a in asked]
        required += deepest
    result, missing = _checked(
        "check_grads", f, args, required, order=int(order), suite_tol=_suite(args, atol, rtol), modes=tuple(required)
    )
    _judge(result, missing, "check_grads", "")


def check_jvp(
    f: Callable[..., Any],
    f_jvp: Callable[..., Any],
    args: Sequence[Any],
    atol: Any = None,
    rtol: Any = None,
    eps: float = 1e-4,
    err_msg: str = "",
) -> None:
    """``jax.test_util.check_jvp``: ``f_jvp(primals, tangents)`` returning
    ``(f(*primals), tangent_out)`` (e.g. ``functools.partial(jax.jvp, f)``),
    checked against finite differences of ``f`` by gradverify."""
    args = _as_jax(args)
    rule = Rule(f, jvp=lambda p, t: f_jvp(tuple(p), tuple(_zero_if_none(t, p)))[1])
    result, missing = _checked("check_jvp", rule, args, ["JVP"], suite_tol=_suite(args, atol, rtol))
    _judge(result, missing, "check_jvp", err_msg)


def check_vjp(
    f: Callable[..., Any],
    f_vjp: Callable[..., Any],
    args: Sequence[Any],
    atol: Any = None,
    rtol: Any = None,
    eps: float = 1e-4,
    err_msg: str = "",
) -> None:
    """``jax.test_util.check_vjp``: ``f_vjp(*primals)`` returning
    ``(f(*primals), vjp_fun)`` with ``vjp_fun(cotangent)`` a tuple of input
    cotangents (e.g. ``functools.partial(jax.vjp, f)``), checked against
    finite differences of ``f`` by gradverify."""
    args = _as_jax(args)
    rule = Rule(f, vjp=lambda p, g: tuple(f_vjp(*p)[1](g)))
    result, missing = _checked("check_vjp", rule, args, ["VJP"], suite_tol=_suite(args, atol, rtol))
    _judge(result, missing, "check_vjp", err_msg)


def _checked(
    peer: str, f: Any, args: tuple[Any, ...], required: Sequence[str], **options: Any
) -> tuple[CheckResult, list[str]]:
    """gv.check of f at args, offered to observers as a call of ``peer``,
    failed for the modes of ``required`` it could not check (and those modes)."""
    with _observe.call(peer, f, args, options) as outermost:
        # (jax passes an empty input or output, and an output NaN everywhere:
        # its comparison takes NaN as equal to NaN; it fails a mode it is
        # asked for that it cannot take)
        order, asked = int(options.get("order", 1)), [m for m in required if " of " not in m]
        result = empty_allowed(check(f, *args, **options), all_nan=lambda: _nan_as_in_jax(f, args, order, asked))
        result = lacking(result, required, lambda mode: _along(mode, f, args), "jax")
        result, missing = required_failed(result, required, f"this call ({peer}'s modes)")
    if outermost:
        _observe.finished(peer, result)
    return result, missing


def _nan_as_in_jax(f: Any, args: tuple[Any, ...], order: int, asked: Sequence[str]) -> bool:
    """Whether jax's check passes fn here because its output is NaN at every
    element: its comparisons take NaN as equal to NaN, so each asked mode's
    derivative must be NaN where finite differences are - the JVP at every
    element, the VJP's projection (NaN at any element), and at a higher
    order each derivative jax checks next (``_derivative_fn``) the same way;
    a finite one fails jax's check ("nan location mismatch"). A mode that
    raises is said by ``lacking``."""
    if not _all_nan(f, args):
        return False
    for mode in asked:
        try:
            d = _derivative(mode, f, args)
        except Exception:  # (jax's call raises there: ``lacking`` says so)
            continue
        nan = [jnp.isnan(jnp.asarray(leaf)) for leaf in jax.tree_util.tree_leaves(d) if _inexact(leaf)]
        if mode == "JVP" and not all(bool(jnp.all(m)) for m in nan):
            return False
        if mode == "VJP" and not any(bool(jnp.any(m)) for m in nan):
            return False
        if order > 1 and not _nan_as_in_jax(*_derivative_fn(mode, f, args), order - 1, asked):
            return False
    return True


def _derivative(mode: str, f: Any, args: tuple[Any, ...]) -> Any:
    """fn's ``mode`` at args as jax's transforms run it: the JVP along ones,
    the VJP of ones (zeros of float0 for integer arguments and outputs)."""
    if isinstance(f, Rule):
        if mode == "JVP":
            return f.jvp(tuple(args), tuple(jax.tree_util.tree_map(_ones_tangent, args)))
        return f.vjp(tuple(args), jax.tree_util.tree_map(_ones_tangent, f.fn(*args)))
    if mode == "JVP":
        return jax.jvp(f, tuple(args), tuple(jax.tree_util.tree_map(_ones_tangent, args)))[1]
    out, pullback = jax.vjp(f, *args)
    return pullback(jax.tree_util.tree_map(_ones_tangent, out))


def _derivative_fn(mode: str, f: Any, args: tuple[Any, ...]) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    """The derivative of f, and its arguments, that jax's check_grads checks
    at the next order: f's JVP at (args, args) (the arguments their own
    tangents), or f's VJP of its own output."""
    if mode == "JVP":
        return functools.partial(jax.jvp, f), (tuple(args), tuple(args))

    def f_vjp(*a: Any) -> Any:
        out, pullback = jax.vjp(f, *a)
        return pullback(out)

    return f_vjp, tuple(args)


def _along(mode: str, f: Any, args: tuple[Any, ...]) -> Any:
    """``_derivative`` of a mode as the report names it: "JVP of VJP" is the
    JVP of the derivative jax checks at order 2 for the VJP, and so on."""
    first, *inner = mode.split(" of ")
    for m in reversed(inner):
        f, args = _derivative_fn(m, f, args)
    return _derivative(first, f, args)


def _inexact(x: Any) -> bool:
    return bool(jnp.issubdtype(jnp.result_type(x), jnp.inexact))


def _ones_tangent(x: Any) -> Any:
    return jnp.ones_like(x) if _inexact(x) else _float0(x)


def _float0(x: Any) -> np.ndarray:
    """The zero tangent jax takes for an integer (or bool) array."""
    return np.zeros(np.shape(x), dtype=jax.dtypes.float0)


def _all_nan(f: Any, args: tuple[Any, ...]) -> bool:
    try:
        leaves = jax.tree_util.tree_leaves(f(*args))
    except Exception:
        return False
    return bool(leaves) and all(bool(jnp.all(jnp.isnan(jnp.asarray(leaf)))) for leaf in leaves)


def _judge(result: CheckResult, missing: Sequence[str], peer: str, err_msg: str) -> None:
    if result.ok:
        return
    head = f"{err_msg}\n" if err_msg else ""
    if missing:
        said = ", ".join(f"{m} {result.modes.get(m, 'not run')}" for m in missing)
        raise AssertionError(f"{head}gradverify ({peer}): modes required but not checked: {said}\n{result}")
    raise AssertionError(f"{head}gradverify ({peer}): the derivatives are wrong or could not be checked\n{result}")


def _as_jax(args: Sequence[Any]) -> tuple[Any, ...]:
    """The arguments with numpy arrays and Python scalars among their leaves as jax arrays."""

    def leaf(x: Any) -> Any:
        if isinstance(x, (np.ndarray, np.generic)):
            return jax.device_put(x)  # (as jnp.asarray makes it, where that compiles a cast of a wide dtype per shape)
        if isinstance(x, (float, int, complex)) and not isinstance(x, bool):
            return jnp.asarray(x)
        return x

    return tuple(jax.tree_util.tree_map(leaf, tuple(args)))


def _floating(args: tuple[Any, ...]) -> list[np.dtype]:
    return [
        np.dtype(x.dtype)
        for x in jax.tree_util.tree_leaves(args)
        if hasattr(x, "dtype") and jnp.issubdtype(x.dtype, jnp.inexact)
    ]


def _suite(args: tuple[Any, ...], atol: Any, rtol: Any) -> tuple[float, float]:
    """jax's tolerance for these arguments: a number, a dict by dtype merged
    over jax's defaults, or the defaults; the widest over the floating leaves."""
    from jax._src import public_test_util as ptu  # (jax's own defaults, by dtype)

    def resolve(tol: Any, dtype: np.dtype) -> float:
        merged = ptu._merge_tolerance(tol, ptu.default_gradient_tolerance)
        return float(ptu.tolerance(dtype, merged))

    dtypes = _floating(args) or [np.dtype(np.float32)]
    return max(resolve(atol, d) for d in dtypes), max(resolve(rtol, d) for d in dtypes)


def _zero_if_none(tangents: Sequence[Any], primals: Sequence[Any]) -> list[Any]:
    # (gradverify passes None for an argument without a tangent: jax wants a zero of float0)
    return [t if t is not None else _float0(p) for t, p in zip(tangents, primals)]
