"""The ``reproduce:`` line of a report: a ``gv.check`` call that runs as
written where it can - fn by the name it is defined under, small arguments as
literals of their own backend - and that says what stands in for each part
where it cannot (a lambda, a ``functools.partial``, a model instance, large
arrays)."""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable
from typing import Any

from .._io import literal
from .._rule import Rule
from ..backends import backend_name_of
from .context import Options
from .validate import function_name

__all__ = ["LITERAL_MAX", "reproducer"]

#: Arguments of at most this many elements in all are written as literals.
LITERAL_MAX = 64

_DOTTED = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")


def reproducer(
    fn: Callable[..., Any], name: str | None, args: tuple[Any, ...], wrt: Any, order: int, o: Options
) -> str:
    """The gv.check call that repeats this check (see the module)."""
    code, fn_note = _fn_code(fn)
    literals = _literals(args)
    argcode = ", ".join(literals) if literals is not None else ", ".join(f"arg{i}" for i in range(len(args)))
    line = o.reproduce(code, argcode, wrt, order, name)
    notes = [fn_note] if fn_note else []
    if literals is None:
        notes.append("arg0, ...: the inputs above")
    return line + (f"  ({'; '.join(notes)})" if notes else "")


def _fn_code(fn: Callable[..., Any]) -> tuple[str, str | None]:
    """fn as code: its name where it has one a caller can write, else ``fn``
    and what it stands for."""
    if isinstance(fn, functools.partial):
        return "fn", f"fn: the functools.partial of {function_name(fn.func)} checked"
    if getattr(fn, "__name__", None) is None:  # an instance: a model, a callable object
        return "fn", f"fn: the {type(fn).__qualname__} instance checked"
    code = function_name(fn)
    if isinstance(fn, Rule):  # (its name is its primal's, which has no rules of its own)
        return "fn", "fn: the gv.Rule checked" if code == "<lambda>" else f"fn: the gv.Rule of {code} checked"
    if code == "<lambda>":
        return "fn", "fn: the lambda checked"
    if not _DOTTED.fullmatch(code):
        return "fn", f"fn: {code}"
    return code, None


def _literals(args: tuple[Any, ...]) -> list[str] | None:
    """Each argument as a literal of its backend, or None where one is not
    an array, a number or a container of them, or all are too large."""
    total = 0
    for a in args:
        size = _size(a)
        if size is None:
            return None
        total += size
    if total > LITERAL_MAX:
        return None
    try:
        return [literal(a) for a in args]
    except (TypeError, ValueError, RuntimeError):  # (an array numpy cannot hold: a sparse one)
        return None


def _size(a: Any) -> int | None:
    """How many elements ``a`` writes out as a literal (None: not writable;
    read from its shape: nothing is copied)."""
    if backend_name_of(a) is not None:
        if str(getattr(a, "layout", "torch.strided")) != "torch.strided" or type(a).__name__ == "BCOO":
            return None  # (sparse)
        return math.prod(getattr(a, "shape", ()))
    if type(a) in (int, float, bool, complex):
        return 1
    if type(a) in (list, tuple):
        sizes = [_size(v) for v in a]
    elif type(a) is dict and all(type(k) in (str, int) for k in a):
        sizes = [_size(v) for v in a.values()]
    else:
        return None
    return None if any(s is None for s in sizes) else sum(sizes)  # type: ignore[misc]
