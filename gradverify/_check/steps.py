"""Two measurements the sweep's report and triage share: finite differences
along one direction at chosen steps, and how near a point lies to a kink."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import _io
from .evaluate import Evaluator

__all__ = ["fd_against_step", "flat_values", "kink_distance"]


def flat_values(a: Any) -> np.ndarray:
    """An argument's values on the host, flat, in float64."""
    return np.asarray(_io.to_numpy(a), dtype=np.float64).reshape(-1)


def kink_distance(args: Sequence[Any], kinks: Sequence[float], position: Any) -> float | None:
    """How close the points ``position(*args)`` (default: the first
    argument's values) come to the nearest of ``kinks`` (None: no kinks)."""
    if not kinks:
        return None
    z = position(*args) if position is not None else flat_values(args[0])
    z = np.asarray(flat_values(z))
    return float(np.min(np.abs(z.reshape(-1, 1) - np.asarray(kinks, dtype=np.float64))))


def fd_against_step(
    ev: Evaluator, u: np.ndarray, v: Sequence[np.ndarray], ad: float, steps: Sequence[float]
) -> list[list[float]]:
    """Rows [h, FD(h), |FD(h) - ad|]: central differences of u^T f along the
    direction ``v`` (one array per wrt argument) at each step h, in float64.
    Outputs ``u`` gives no weight are left out (an infinite one among them
    does not make the sum NaN)."""
    base = [np.asarray(ev.values[i], dtype=np.float64) for i in ev.wrt]
    weighed = u != 0
    rows = []
    for h in steps:
        plus = ev.primal([b + h * vk for b, vk in zip(base, v)], "float64")
        minus = ev.primal([b - h * vk for b, vk in zip(base, v)], "float64")
        fd = float(np.sum(u[weighed] * (plus[weighed] - minus[weighed]))) / (2 * h)
        rows.append([h, fd, abs(fd - ad)])
    return rows
