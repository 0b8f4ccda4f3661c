"""What a call into fn or its rules returns or raises, and the warnings
filter every derivative call runs under."""

from __future__ import annotations

import contextlib
import traceback
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .._errors import ArgumentTypeError, explain
from ..backends import Backend, backend_name_of

__all__ = [
    "FRAMEWORKS",
    "BadStructure",
    "CallFailed",
    "Derivative",
    "Unshaped",
    "brief",
    "check_output",
    "fns_warnings_only",
]

#: Packages whose own warnings, raised while gradverify takes a derivative,
#: are the machinery's and not fn's.
FRAMEWORKS = ("torch", "functorch", "jax", "jaxlib", "numpy", "gradverify")
_FRAMEWORK_MODULES = r"(" + "|".join(FRAMEWORKS) + r")(\..*)?$"


@contextlib.contextmanager
def fns_warnings_only() -> Iterator[None]:
    """Run a derivative with the warnings the frameworks raise from their own
    modules ignored (torch's forward mode, loading its decompositions on first
    use, warns that torch.jit.script is deprecated: under ``-W error`` a
    correct fn would fail). Warnings from any other module - fn's and its
    rules' - meet the caller's filters as they are. (Like every
    ``warnings.catch_warnings``, this sets the process's filters while the
    call runs.)"""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", module=_FRAMEWORK_MODULES)
        yield


#: An exception's text in a finding: its first lines, at most this many
#: characters (the whole text is in the finding's detail, kept in the JSON record).
BRIEF_LINES, BRIEF_CHARS = 3, 400


def brief(exc: BaseException) -> str:
    """The first meaningful lines of an exception's text: its first paragraph,
    at most BRIEF_LINES lines and BRIEF_CHARS characters, with how much was
    left out (a framework's error can run to a hundred lines: torch's
    dispatcher lists every backend)."""
    text = str(exc).strip()
    lines = [ln.rstrip() for ln in text.splitlines()]
    kept: list[str] = []
    for ln in lines:
        if not ln.strip():
            if kept:
                break  # (the first paragraph)
            continue
        kept.append(ln)
        if len(kept) == BRIEF_LINES:
            break
    short = "\n".join(kept)
    if len(short) > BRIEF_CHARS:
        cut = short[:BRIEF_CHARS]
        end = cut.rfind(". ")
        short = cut[: end + 1] if end > BRIEF_CHARS // 2 else cut.rstrip() + "..."
    left = len(lines) - len(short.splitlines())
    if left > 0:
        short += f" [{left} more line{'s' if left != 1 else ''} in the JSON record]"
    return short


class CallFailed(Exception):
    """User code (fn or a rule) raised. ``stage`` says where."""

    def __init__(self, stage: str, exc: BaseException) -> None:
        super().__init__(f"{stage}: {type(exc).__name__}: {exc}")
        self.stage = stage
        self.exc = exc
        tb = traceback.format_exception(type(exc), exc, exc.__traceback__)
        # Keep the user's frames: drop gradverify's own plumbing from the top.
        self.traceback = "".join(tb[-8:])


@dataclass(frozen=True)
class Derivative:
    """A derivative as returned by a mode: float64 values plus what it came as."""

    value: Any  # float64 working array; None: the rule returned None (a zero cotangent)
    dtype: str | None
    shape: tuple[int, ...] | None
    kind: str  # "array" or the foreign type's name


class BadStructure(Exception):
    """A rule returned the wrong number of cotangents."""


@dataclass(frozen=True)
class Unshaped:
    """fn's output at the point is not one dense real array: what it is,
    for the boundary to build a view of it (see views)."""

    kind: str  #: "pytree", "sparse" or "complex"


def check_output(backend: Backend, out: Any) -> None:
    """Refuse an output that is not one dense array of fn's backend, in words that say how to fix it."""
    if backend_name_of(out) != backend.name:
        raise ArgumentTypeError(
            explain(
                "fn's return value",
                f"one {backend.name} array (the backend of its arguments)",
                f"{type(out).__module__}.{type(out).__qualname__}",
                "return an array, or a pytree (tuple, list, dict) of arrays",
            )
        )
    bad = backend.unsupported(out, output=True)
    if bad is not None:
        what, fix = bad
        raise ArgumentTypeError(explain("fn's return value", "a dense array with values", what, fix))
