"""Exceptions. Misuse raises a ``UsageError`` that is also a ``TypeError`` or
``ValueError``; a wrong gradient raises ``GradientError`` (an ``AssertionError``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._result import CheckResult

__all__ = ["ArgumentTypeError", "ArgumentValueError", "GradientError", "ModeUnavailable", "UsageError", "explain"]


def explain(what: str, expected: str, found: str, fix: str) -> str:
    """The one shape of every usage message: what, expected, found, how to fix."""
    return f"{what}: expected {expected}; found {found}. Fix: {fix}"


class UsageError(Exception):
    """Base of every error gradverify raises for bad input."""


class ArgumentTypeError(UsageError, TypeError):
    """An argument of the wrong type (not an array, two backends, ...)."""


class ArgumentValueError(UsageError, ValueError):
    """An argument with a bad value (NaN, empty, a wrt index out of range, ...)."""


class GradientError(AssertionError):
    """Raised by ``assert_gradients``; ``.result`` holds the full ``CheckResult``."""

    def __init__(self, result: CheckResult) -> None:
        super().__init__(str(result))
        self.result = result


class ModeUnavailable(Exception):
    """Internal: a backend cannot run a mode (JVP or VJP) for this function."""


class ModeNotAsked(ModeUnavailable):
    """Internal: the check was asked to leave this mode out (``modes=``)."""
