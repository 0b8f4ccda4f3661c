"""``gv.Rule``: a function that brings its own derivative rules."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ._errors import ArgumentTypeError, explain

__all__ = ["Rule"]


class Rule:
    """A function with hand-written rules.

    ``jvp(primals: tuple, tangents: tuple) -> output tangent`` and
    ``vjp(primals: tuple, cotangent) -> tuple of input cotangents`` (one per
    positional argument; ``None`` for an argument that gets no cotangent).
    Primals, tangents and cotangents are arrays of the function's backend; an
    integer or bool argument gets ``None`` as its tangent.

    Around a torch or jax function the rules *replace* the framework's AD, so
    a missing rule means that mode is unavailable, not that autograd fills in.
    """

    __slots__ = ("fn", "jvp", "vjp", "__name__")

    def __init__(
        self,
        fn: Callable[..., Any],
        jvp: Callable[[tuple, tuple], Any] | None = None,
        vjp: Callable[[tuple, Any], tuple] | None = None,
    ) -> None:
        for name, value in (("fn", fn), ("jvp", jvp), ("vjp", vjp)):
            if value is not None and not callable(value):
                raise ArgumentTypeError(
                    explain(
                        f"gv.Rule({name}=...)",
                        "a callable",
                        f"{type(value).__name__} {value!r:.60}",
                        f"pass a function as {name}= (or None when there is no such rule)",
                    )
                )
        if fn is None:
            raise ArgumentTypeError(explain("gv.Rule(fn)", "the primal function", "None", "pass the function first"))
        self.fn = fn
        self.jvp = jvp
        self.vjp = vjp
        self.__name__ = getattr(fn, "__name__", type(fn).__name__)

    def __call__(self, *args: Any) -> Any:
        return self.fn(*args)

    def __repr__(self) -> str:
        modes = [m for m in ("jvp", "vjp") if getattr(self, m) is not None]
        return f"Rule({self.__name__}, rules={'+'.join(modes) or 'none'})"
