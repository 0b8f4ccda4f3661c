"""The findings of one check as the stages find them: each said once, in order."""

from __future__ import annotations

from typing import Any

import numpy as np

from .._result import ERROR, Finding, Kind
from .calls import CallFailed, brief

__all__ = ["Closeness", "Findings", "unravel"]


class Findings:
    """Collects the findings of one check. A mode called once per direction
    repeats its structural faults: each (kind, message) is kept once."""

    def __init__(self) -> None:
        self.items: list[Finding] = []

    def add(self, kind: str, level: str, message: str, **kw: Any) -> None:
        self.keep(Finding(kind=kind, level=level, message=message, **kw))

    def keep(self, finding: Finding) -> None:
        """Keep ``finding`` unless one of its kind says the same already."""
        if not any(f.kind == finding.kind and f.message == finding.message for f in self.items):
            self.items.append(finding)

    def append(self, finding: Finding) -> None:
        """Keep ``finding`` as it is (a sub-check's, already said once there)."""
        self.items.append(finding)

    def exception(self, e: CallFailed) -> None:
        self.add(
            Kind.EXCEPTION,
            ERROR,
            f"{type(e.exc).__name__} raised while {e.stage}: {brief(e.exc)}",
            detail=e.traceback,
            raised=raised_by(e.exc) if e.stage == "evaluating fn" else None,
        )

    def __len__(self) -> int:
        return len(self.items)


def raised_by(exc: BaseException) -> tuple[str, ...]:
    """An exception's type and its bases, as module.qualname (object left out)."""
    return tuple(f"{c.__module__}.{c.__qualname__}" for c in type(exc).__mro__[:-1])


class Closeness:
    """The largest |AD - reference| / bound over everything compared: how near
    the check came to failing (gv.verify steers Hypothesis by it). An excuse
    that sends a comparison round again restores it with ``mark``/``restore``."""

    def __init__(self) -> None:
        self.worst = 0.0

    def note(self, ratio: float) -> None:
        if np.isfinite(ratio) and ratio > self.worst:
            self.worst = float(ratio)

    def mark(self) -> float:
        return self.worst

    def restore(self, mark: float) -> None:
        self.worst = mark


def unravel(i: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    """Flat index i as an index into ``shape``."""
    return tuple(int(k) for k in np.unravel_index(i, shape)) if shape else ()
