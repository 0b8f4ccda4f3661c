"""The boundary between the caller's problem and the core's: a stack of views.

The core (the stages, from the primal on) checks fn of flat, dense, real,
finite arrays returning one such array. What a caller hands over is more:
pytrees and modules, sparse arrays, points with non-finite entries, complex
numbers. Each such transformation is a ``View``: the arguments it hands
inward (``args``), how an inward call becomes the outward one (``inputs``;
``tangents``, ``cotangents`` and ``output_cotangent`` for a ``gv.Rule``'s
rules), how fn's output comes inward (``output``), and how the core's
result is said back in the outward terms (``said``: findings renamed, the
summaries, the notes, and whatever the view must ask fn itself).

The views stand in one declared order, ``ORDER`` (outermost first), each
built from the arguments of the layer outside it; they compose into one
function the core checks (``compose``), and the result comes back out
through each ``said``, innermost first. An output the core cannot take
(a pytree, a sparse or complex array where no view of that kind was built)
is not an error: the core says what it saw (``Unshaped``) after fn's first
evaluation, and the stack is built again with a view for it -- as the
excuses loop tries interchangeable objects in order until none applies.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from ..._result import CheckResult, Finding
from ..._rule import Rule
from ...backends import Backend

__all__ = ["Composed", "Layer", "View", "compose", "relocated"]


@dataclass(frozen=True)
class Layer:
    """The problem as the layer outside a view poses it."""

    backend: Backend
    fn: Any  #: fn composed with the views outside (a function or a gv.Rule)
    args: tuple[Any, ...]
    seed: int


class View:
    """One transformation of the problem (see the module). The defaults are
    the identity, so a view says only what it changes."""

    #: the output kind this view takes in (None: none)
    takes: ClassVar[str | None] = None
    #: the arguments handed inward
    args: tuple[Any, ...]
    #: equal for views that compose into the same function (None: never cached)
    key: Any = None
    #: why derivatives through this view stop at the first (None: they do not)
    higher_order_unavailable: str | None = None

    @classmethod
    def of(cls, backend: Backend, args: tuple[Any, ...], outputs: frozenset[str]) -> View | None:
        """The view for ``args`` (the outward layer's), given the output kinds
        seen so far; None where it has nothing to do."""
        raise NotImplementedError

    def inputs(self, args: Sequence[Any]) -> list[Any]:
        """Inward arguments -> the outward call's."""
        return list(args)

    def output(self, out: Any) -> Any:
        """The outward output -> the inward one."""
        return out

    def tangents(self, tangents: Sequence[Any]) -> list[Any]:
        """Inward tangents (None for a constant) -> outward (a rule's jvp)."""
        return list(tangents)

    def cotangents(self, cotangents: Sequence[Any]) -> list[Any]:
        """A rule's outward input cotangents -> inward."""
        return list(cotangents)

    def output_cotangent(self, cotangent: Any) -> Any:
        """The inward output cotangent -> outward (a rule's vjp)."""
        return cotangent

    def said(self, result: CheckResult, layer: Layer) -> CheckResult:
        """The inward result in the outward layer's terms."""
        return result


class Composed:
    """fn seen through views (outermost first): inward arguments in, one
    inward output out."""

    def __init__(self, fn: Callable[..., Any], views: Sequence[View]) -> None:
        self.fn, self.views = fn, tuple(views)
        self.higher_order_unavailable = next(
            (v.higher_order_unavailable for v in self.views if v.higher_order_unavailable), None
        )
        self.__name__ = getattr(fn, "__name__", type(fn).__name__)
        self.__qualname__ = getattr(fn, "__qualname__", self.__name__)
        self.__module__ = getattr(fn, "__module__", None)

    def inputs(self, args: Sequence[Any]) -> list[Any]:
        out = list(args)
        for v in reversed(self.views):
            out = v.inputs(out)
        return out

    def output(self, out: Any) -> Any:
        for v in self.views:
            out = v.output(out)
        return out

    def __call__(self, *args: Any) -> Any:
        return self.output(self.fn(*self.inputs(args)))


def _rule(rule: Rule, views: Sequence[View]) -> Rule:
    primal = Composed(rule.fn, views)
    jvp = vjp = None
    if rule.jvp is not None:
        user_jvp = rule.jvp

        def jvp(primals: tuple, tangents: tuple) -> Any:
            ts = list(tangents)
            for v in reversed(primal.views):
                ts = v.tangents(ts)
            return primal.output(user_jvp(tuple(primal.inputs(primals)), tuple(ts)))

    if rule.vjp is not None:
        user_vjp = rule.vjp

        def vjp(primals: tuple, cotangent: Any) -> Any:
            ct = cotangent
            for v in reversed(primal.views):
                ct = v.output_cotangent(ct)
            outward = tuple(primal.inputs(primals))
            res = user_vjp(outward, ct)
            if not isinstance(res, (tuple, list)):
                if len(outward) != 1 or res is None:
                    return res  # (the checker says what it expected)
                res = (res,)
            cs = list(res)
            for v in primal.views:
                cs = v.cotangents(cs)
            return tuple(cs)

    return Rule(primal, jvp=jvp, vjp=vjp)


#: One composition per (fn, views): jax compiles a function once per
#: function object, so every check of one fn through equal views sees one.
_COMPOSED: dict[tuple, tuple[Any, Any]] = {}
_MAX_COMPOSED = 64


def compose(fn: Any, views: Sequence[View]) -> Any:
    """fn (a function or a gv.Rule) seen through ``views``, outermost first
    (fn itself where there are none)."""
    if not views:
        return fn
    keys = tuple(v.key for v in views)
    key = (id(fn), tuple(type(v).__name__ for v in views), keys) if all(k is not None for k in keys) else None
    held = _COMPOSED.get(key) if key is not None else None
    if held is not None and held[0] is fn:
        return held[1]
    composed = _rule(fn, views) if isinstance(fn, Rule) else Composed(fn, views)
    if key is not None:
        if len(_COMPOSED) >= _MAX_COMPOSED:
            _COMPOSED.pop(next(iter(_COMPOSED)))
        _COMPOSED[key] = (fn, composed)
    return composed


def relocated(f: Finding, changes: dict[str, Any], said: Sequence[str]) -> Finding:
    """``f`` with ``changes`` (its indices in the outward layer's terms) and
    what they mean added to its ``where``; ``f`` itself where nothing changed."""
    if not changes:
        return f
    where = ", ".join(said)
    return dataclasses.replace(f, **changes, where=f"{f.where}; {where}" if f.where else where)
