"""``gv.Rule``: a function that brings its own derivative rules."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ._errors import ArgumentTypeError, explain

__all__ = ["Rule"]


class Rule:
    """A function with hand-written rules, for gv.check and gv.verify.

    Around a torch or jax function the rules *replace* the framework's AD, so
    a missing rule means that mode is unavailable, not that autograd fills in.

    Args:
        fn: the function (positional arrays of one backend, one array out).
        jvp: ``jvp(primals: tuple, tangents: tuple) -> output tangent``; an
            integer or bool argument gets ``None`` as its tangent. None: no
            forward mode.
        vjp: ``vjp(primals: tuple, cotangent) -> tuple of input cotangents``,
            one per positional argument (``None`` for one that gets none).
            None: no reverse mode.

    Returns:
        A callable that computes ``fn`` and carries ``jvp`` and ``vjp``.

    Raises:
        ArgumentTypeError: fn is None, or a rule is not callable.

    Example:
        >>> import numpy as np, gradverify as gv
        >>> sq = gv.Rule(lambda x: x * x, jvp=lambda p, t: 2 * p[0] * t[0], vjp=lambda p, g: (2 * p[0] * g,))
        >>> sq(np.array([3.0]))
        array([9.])
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
