"""gv.verify's arguments, checked: what each must be, and how to fix it."""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any

from ._errors import ArgumentTypeError, ArgumentValueError, explain
from ._result import CheckResult, Kind

__all__ = ["all_refused", "refusals", "refused", "validate", "yielded_tuple"]


def validate(
    fn: Any,
    args_strategy: Any,
    max_examples: Any,
    seed: Any,
    examples: Any,
    max_shrinks: Any,
    max_shrinking_seconds: Any,
) -> list[tuple[Any, ...]]:
    """verify's arguments checked; the examples as a list."""
    from hypothesis.strategies import SearchStrategy

    if not callable(fn):
        raise ArgumentTypeError(explain("verify(fn)", "a callable", type(fn).__name__, "pass the function first"))
    if not isinstance(args_strategy, SearchStrategy):
        raise ArgumentTypeError(
            explain(
                "verify(args_strategy)",
                "a Hypothesis strategy of argument tuples",
                f"{type(args_strategy).__name__} {args_strategy!r:.60}",
                "e.g. gradverify.strategies.bias_act_args('swish', 'torch'), or st.tuples(arrays(...), ...)",
            )
        )
    for name, value, low in (("max_examples", max_examples, 1), ("seed", seed, 0)):
        if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < low:
            raise ArgumentValueError(
                explain(f"verify({name})", f"an int >= {low}", repr(value), f"e.g. {name}={max(low, 100 * low)}")
            )
    _validate_budget(max_shrinks, max_shrinking_seconds)
    return _validate_examples(examples)


def _validate_examples(examples: Any) -> list[tuple[Any, ...]]:
    if isinstance(examples, (str, bytes)) or not isinstance(examples, Sequence):
        raise ArgumentTypeError(
            explain("verify(examples)", "a list of argument tuples", type(examples).__name__, "e.g. examples=[(x, b)]")
        )
    for k, args in enumerate(examples):
        if not isinstance(args, tuple):
            raise ArgumentTypeError(
                explain(
                    f"verify(examples[{k}])",
                    "a tuple of positional arguments, as the strategy yields",
                    type(args).__name__,
                    "wrap a lone argument: examples=[(x,)]",
                )
            )
    return list(examples)


def _validate_budget(max_shrinks: Any, max_shrinking_seconds: Any) -> None:
    if max_shrinks is not None and (
        not isinstance(max_shrinks, numbers.Integral) or isinstance(max_shrinks, bool) or max_shrinks < 0
    ):
        raise ArgumentValueError(
            explain("verify(max_shrinks)", "an int >= 0 or None", repr(max_shrinks), "e.g. max_shrinks=100")
        )
    if max_shrinking_seconds is not None and (
        not isinstance(max_shrinking_seconds, numbers.Real)
        or isinstance(max_shrinking_seconds, bool)
        or not max_shrinking_seconds >= 0
    ):
        raise ArgumentValueError(
            explain(
                "verify(max_shrinking_seconds)",
                "a number of seconds >= 0 or None",
                repr(max_shrinking_seconds),
                "e.g. max_shrinking_seconds=60 (None: Hypothesis's own limit)",
            )
        )


def refusals(except_: Any) -> tuple[type[Exception], ...]:
    """``except_`` as a tuple of exception types, checked."""
    types = except_ if isinstance(except_, tuple) else (except_,)
    for t in types:
        if not (isinstance(t, type) and issubclass(t, Exception)):
            raise ArgumentTypeError(
                explain("verify(except_)", "exception types", repr(t), "e.g. except_=(ValueError, AssertionError)")
            )
    return types


def refused(res: CheckResult, refusing: tuple[type[Exception], ...]) -> bool:
    """Whether the check ``res`` met one of ``refusing`` raised by fn itself."""
    names = {f"{t.__module__}.{t.__qualname__}" for t in refusing}
    return any(f.kind == Kind.EXCEPTION and f.raised and names.intersection(f.raised) for f in res.findings)


def all_refused(refusing: tuple[type[Exception], ...], count: int) -> ArgumentValueError:
    """The error where fn refused every drawn input (Hypothesis gave up)."""
    names = ", ".join(t.__name__ for t in refusing)
    return ArgumentValueError(
        explain(
            f"verify(except_=({names},))",
            "drawn inputs fn accepts",
            f"fn raised one of them at every drawn input ({count})",
            "draw within fn's contract (a narrower strategy), or drop the type from except_",
        )
    )


def yielded_tuple(args: Any) -> None:
    if not isinstance(args, tuple):
        raise ArgumentTypeError(
            explain(
                "verify(args_strategy)",
                "a strategy that yields a tuple of positional arguments",
                f"it yielded {type(args).__name__}",
                "wrap it: st.tuples(strategy) or strategy.map(lambda a: (a,))",
            )
        )
