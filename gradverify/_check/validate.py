"""Argument validation for ``gv.check``: clear errors, never silent fixes."""

from __future__ import annotations

import functools
import math
import numbers
import sys
import types
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from .._errors import ArgumentTypeError, ArgumentValueError, explain
from ..backends import Backend
from . import xp

__all__ = [
    "function_name",
    "resolve_wrt",
    "finite_arguments",
    "validate_arrays",
    "validate_fn",
    "validate_modes",
    "validate_options",
    "validate_readable",
    "validate_tolerances",
]


def validate_fn(fn: Any, call: str = "gv.check") -> None:
    """fn is a function (``call`` names the public call in the message)."""
    if isinstance(fn, type) and any(
        c.__name__ == "Function" and c.__module__.startswith("torch.autograd") for c in fn.__mro__[1:]
    ):
        name = fn.__qualname__.rpartition("<locals>.")[2]  # (as the caller's code names it)
        raise ArgumentTypeError(
            explain(
                f"{call}(fn, ...)",
                "a function: an autograd.Function is called through its apply",
                f"the class {name} itself",
                f"pass {name}.apply: {call}({name}.apply, ...)",
            )
        )
    if not callable(fn):
        raise ArgumentTypeError(
            explain(
                f"{call}(fn, ...)",
                "a callable as the first argument",
                f"{type(fn).__name__} {fn!r:.40}",
                f"pass the function first, then its arguments: {call}(fn, ...)",
            )
        )


def validate_readable(backend: Backend, args: Sequence[Any]) -> None:
    """Arguments the checker can read the values of (before it copies them)."""
    for i, a in enumerate(args):
        bad = backend.unsupported(a)
        if bad is not None:
            what, fix = bad
            raise ArgumentTypeError(explain(f"argument {i}", "a dense array with values", what, fix))


def validate_arrays(backend: Backend, args: Sequence[Any], values: Sequence[np.ndarray]) -> dict[int, tuple]:
    """Finite floating arguments. On the host they are tested now. Of a
    floating torch array on a device (xp.device_floating), its extremes and its sum of squares (in
    float64, flat) are returned as device scalars (argument -> (min, max,
    sum of squares)), to be read with fn's first output and tested then
    (``finite_arguments``): a read of their own would cost a
    synchronisation, and the view that holds non-finite entries fixed has
    made them finite already - the test only guards."""
    asked: dict[int, tuple] = {}
    for i, (a, v) in enumerate(zip(args, values)):
        if not (xp.size(v) and backend.is_floating(a)):
            continue
        if xp.device_floating(v):
            f = xp.flat(xp.as64(v))
            asked[i] = (*v.aminmax(), f.dot(f))
        elif not xp.all_finite(v):
            _refuse(i, v)
    return asked


def finite_arguments(values: Sequence[Any], extremes: dict[int, tuple[float, float]]) -> None:
    """The arguments whose ``extremes`` were read are finite (NaN and inf reach them)."""
    for i, (lo, hi) in extremes.items():
        if not (math.isfinite(lo) and math.isfinite(hi)):
            _refuse(i, values[i])


def _refuse(i: int, v: Any) -> None:
    bad = ~xp.finite(v)
    k = int(xp.nonzero(bad, limit=1)[0])
    first = tuple(int(j) for j in np.unravel_index(k, tuple(v.shape)))
    raise ArgumentValueError(
        explain(
            f"argument {i}",
            "finite values (gradients are checked at a finite point)",
            f"{xp.count(bad)} non-finite element(s), the first {float(xp.flat(v)[k])} at index {first}",
            "replace NaN/inf before checking, e.g. np.nan_to_num, or check another point",
        )
    )


def resolve_wrt(wrt: Any, floating: Sequence[bool], dtypes: Sequence[str]) -> tuple[int, ...]:
    n = len(floating)
    if wrt is None:
        chosen = tuple(i for i in range(n) if floating[i])
        if not chosen:
            raise ArgumentTypeError(
                explain(
                    "gv.check arguments",
                    "at least one floating-point array to differentiate",
                    "only " + ", ".join(f"argument {i}: {d}" for i, d in enumerate(dtypes)),
                    "pass float32/float64 inputs (integer and bool arguments are constants)",
                )
            )
        return chosen
    items = (wrt,) if isinstance(wrt, numbers.Integral) else wrt
    try:
        items = tuple(items)
    except TypeError:
        raise ArgumentTypeError(
            explain("wrt", "None, an int, or a sequence of ints", repr(wrt), "e.g. wrt=0 or wrt=(0, 1)")
        ) from None
    out = []
    for w in items:
        if not isinstance(w, numbers.Integral) or isinstance(w, bool):
            raise ArgumentTypeError(explain("wrt", "positional argument indices (ints)", repr(w), "e.g. wrt=(0, 1)"))
        k = int(w) + n if w < 0 else int(w)
        if not 0 <= k < n:
            raise ArgumentValueError(
                explain("wrt", f"indices in range(-{n}, {n})", str(int(w)), f"fn has {n} argument(s)")
            )
        if not floating[k]:
            raise ArgumentTypeError(
                explain(
                    f"wrt={int(w)}",
                    "a floating-point argument",
                    f"argument {k} of dtype {dtypes[k]}",
                    "integer and bool arguments are constants; drop it from wrt",
                )
            )
        if k in out:
            raise ArgumentValueError(explain("wrt", "distinct indices", f"{k} twice", "list each once"))
        out.append(k)
    if not out:
        raise ArgumentValueError(explain("wrt", "at least one index", "an empty sequence", "use wrt=None for all"))
    return tuple(out)


def validate_options(
    order: Any, seed: Any, rtol: Any, atol: Any, directions: Any, vectorise: Any = True, batched: Any = False
) -> None:
    if not isinstance(order, numbers.Integral) or isinstance(order, bool) or order < 1:
        raise ArgumentValueError(
            explain("order", "an int >= 1", repr(order), "order=1 checks first derivatives, order=2 their derivatives")
        )
    if not isinstance(seed, numbers.Integral) or isinstance(seed, bool) or seed < 0:
        raise ArgumentValueError(explain("seed", "a non-negative int", repr(seed), "e.g. seed=0"))
    for name, value in (("rtol", rtol), ("atol", atol)):
        if value is None:
            continue
        if not isinstance(value, numbers.Real) or not np.isfinite(value) or value < 0:
            raise ArgumentValueError(
                explain(name, "None or a finite number >= 0", repr(value), f"e.g. {name}=1e-5, or None for the model")
            )
    if directions is not None and (
        not isinstance(directions, numbers.Integral) or isinstance(directions, bool) or directions < 1
    ):
        raise ArgumentValueError(
            explain("directions", "an int >= 1, or None (the default)", repr(directions), "e.g. directions=2")
        )
    if not isinstance(vectorise, bool):
        raise ArgumentValueError(explain("vectorise", "True or False", repr(vectorise), "e.g. vectorise=False"))
    if not isinstance(batched, bool):
        raise ArgumentValueError(explain("batched", "True or False", repr(batched), "e.g. batched=True"))


def function_name(fn: Callable) -> str:
    owner = getattr(fn, "__self__", None)
    if isinstance(owner, type) and not (owner.__name__.startswith("_") and isinstance(fn, types.BuiltinFunctionType)):
        # e.g. MyFunction.apply of an autograd.Function, _Private.apply too (not the
        # Function.apply it inherits); a builtin of a private class is named below
        return f"{owner.__name__}.{fn.__name__}"
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
    if name and name.startswith("_") and "." in name:
        # a builtin of a private class, as a framework exports it (torch.sin's
        # qualified name is _VariableFunctionsClass.sin): by its module's name
        module, short = getattr(fn, "__module__", None) or "", getattr(fn, "__name__", "")
        if module and not _private(module) and getattr(sys.modules.get(module), short, None) is fn:
            return f"{module}.{short}"
    if isinstance(fn, types.BuiltinFunctionType) and _private(getattr(fn, "__module__", None) or ""):
        # a builtin of a private module published under another name
        # (torch.special.expit is torch._C._special.special_expit): by where it is published
        home = _published(fn)
        if home is not None and not home.endswith(f".{fn.__name__}"):
            return home
    if name and name.count(".") == 1 and getattr(fn, "__self__", None) is None and _private(_home_module(fn)):
        # a method of a class of a private module, taken from the class (torch.Tensor.add
        # is torch._C.TensorBase's, torch.Tensor.norm torch._tensor.Tensor's): by the
        # public class it is published as
        home = _published_method(fn)
        if home is not None:
            return home
    return (name or type(fn).__name__).rpartition("<locals>.")[2]


def _home_module(fn: Callable) -> str:
    """The module fn was defined in: its class's, for a method of a builtin class."""
    owner = getattr(fn, "__objclass__", None)
    return getattr(owner, "__module__", None) or getattr(fn, "__module__", None) or ""


@functools.lru_cache(maxsize=256)
def _published_method(fn: Callable) -> str | None:
    """``module.Class.name`` where a public class of a public module of fn's
    package (the shallowest first) holds fn as its attribute ``name``, itself
    or inherited: looked up statically, so that no class's own code runs (a
    deprecated attribute would warn). Only unbound methods come here: the
    cache holds them, never an instance."""
    short = fn.__name__
    for m, names in _public_modules(_home_module(fn).split(".")[0]):
        for attr, value in names:
            # (the class of the value, not the value's __class__: an object may warn when asked)
            if issubclass(type(value), type) and not attr.startswith("_") and _holds(value, short, fn):
                return f"{m}.{attr}.{short}"
    return None


def _holds(cls: type, name: str, fn: Callable) -> bool:
    """Whether ``cls`` or a class it inherits from has ``fn`` itself as ``name``."""
    try:
        return any(vars(k).get(name) is fn for k in cls.__mro__)
    except TypeError:  # (a class whose namespace or order is not what type gives)
        return False


def _private(module: str) -> bool:
    return any(part.startswith("_") for part in module.split("."))


@functools.lru_cache(maxsize=256)
def _published(fn: Callable) -> str | None:
    """``module.name`` where a public module of fn's package (the shallowest
    first) holds fn under a public name; None where none does."""
    for m, names in _public_modules(fn.__module__.split(".")[0]):
        for attr, value in names:
            if value is fn and not attr.startswith("_"):
                return f"{m}.{attr}"
    return None


def _public_modules(package: str) -> Iterator[tuple[str, list[tuple[str, Any]]]]:
    """The loaded public modules of ``package``, the shallowest first, each
    with its names and values (read from its namespace: no attribute of it
    is asked for)."""
    modules = sorted(
        (m for m in list(sys.modules) if (m == package or m.startswith(package + ".")) and not _private(m)),
        key=lambda m: (m.count("."), m),
    )
    for m in modules:
        yield m, list(getattr(sys.modules.get(m), "__dict__", {}).items())


def validate_tolerances(suite_tol: Any, nondet_tol: Any) -> tuple[float, float] | None:
    """A migrated suite's ``(atol, rtol)`` as floats (None where not given),
    after checking both it and ``nondet_tol``."""
    if not isinstance(nondet_tol, (int, float)) or isinstance(nondet_tol, bool) or not nondet_tol >= 0:
        raise ArgumentValueError(explain("nondet_tol", "a number >= 0", repr(nondet_tol), "e.g. nondet_tol=1e-7"))
    if suite_tol is None:
        return None
    try:
        atol, rtol = (float(t) for t in suite_tol)
        ok = atol >= 0 and rtol >= 0
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ArgumentValueError(
            explain("suite_tol", "a pair (atol, rtol) of numbers >= 0", repr(suite_tol), "e.g. suite_tol=(1e-5, 1e-3)")
        )
    return atol, rtol


def validate_modes(modes: Any, order: int) -> frozenset[str] | None:
    """The modes asked for (None where not given), after checking each is a
    mode of a check at ``order``: "JVP", "VJP", and their derivatives' modes
    up to that order ("JVP of VJP", ...; at order 2 and above at least one
    of them). One mode may be given as a str."""
    if modes is None:
        return None
    asked = (modes,) if isinstance(modes, str) else modes
    try:
        chosen = frozenset(asked)
    except TypeError:
        chosen = frozenset()
    known = all(isinstance(m, str) and 0 < len(m.split(" of ")) <= order for m in chosen) and all(
        part in ("JVP", "VJP") for m in chosen for part in m.split(" of ")
    )
    deep = order < 2 or any(" of " in m for m in chosen)
    if not (chosen and known and deep):
        expected = (
            "None, or a non-empty sequence of the modes of an order-1 check ('JVP', 'VJP')"
            if order < 2
            else f"None, or a non-empty sequence of the modes of an order-{order} check: 'JVP', 'VJP' and their "
            f"derivatives' ('JVP of VJP', 'VJP of VJP', ...: at most {order} modes joined by ' of '), one of those at "
            "least"
        )
        fix = (
            'e.g. modes=("VJP",) checks reverse mode alone'
            if order < 2
            else 'e.g. modes=("VJP", "VJP of VJP") checks reverse mode and its derivative by reverse mode (first-order '
            "modes alone: order=1)"
        )
        if order < 2 and any(isinstance(m, str) and " of " in m for m in chosen):
            fix += "; a derivative's mode needs order=2"
        if {"fwd", "rev"} & chosen:
            fix += " (jax's 'fwd' is the JVP, its 'rev' the VJP)"
        raise ArgumentValueError(explain("modes", expected, repr(modes), fix))
    return chosen
