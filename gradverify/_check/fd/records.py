"""The records finite differences pass around: an element's status, the
reference for J u (an interval per element, and why), and the problem one
reference answers."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .. import xp as _xp

__all__ = ["ASIDE", "SMOOTH", "KINK", "JUMP", "UNRELIABLE", "Array", "Line", "Reference", "Problem", "UNKNOWN"]


# Status of each element's reference after the kink analysis. ASIDE: not
# compared for a reason outside FD's (AD's NaN/inf there, said by the check).
SMOOTH, KINK, JUMP, UNRELIABLE, ASIDE = 0, 1, 2, 3, 4


#: Arrays of the checker: numpy, or torch and jax arrays beside fn's arguments (see _check.xp).
Array = Any


def _one_at_a_time(ts: list[float]) -> list[Array] | None:
    return None


@dataclass(frozen=True)
class Line:
    """F(t) = fn(x + t u) along one direction, in the oracle's precision."""

    #: F at one t.
    at: Callable[[float], Array]
    #: F at several t in one vectorised evaluation of fn, or None where
    #: there is none (then each t is evaluated with ``at``).
    many: Callable[[list[float]], list[Array] | None] = _one_at_a_time

    def __call__(self, t: float) -> Array:
        return self.at(t)


@dataclass
class Reference:
    """The FD reference for J u: an interval value +- err per element, and why.

    Where F is smooth the interval is the estimate with its error bound; at a
    kink it is the hull of the one-sided derivatives (value its midpoint)."""

    value: Array
    err: Array  # half-width of the interval
    status: Array  # SMOOTH / KINK / JUMP / UNRELIABLE / ASIDE per element (int8)
    all_smooth: bool  # no element was flagged: every status is SMOOTH
    noise: Array | None = None  # measured noise of one F value, per element
    reasons: dict[int, str] | None = None  # why an element is unreliable (the first few)
    typical: float = 0.0  # the size of a derivative along this direction (|F| and slope scales)
    flagged: Array | None = None  # bool: went down the ladder (a kink, jump or feature near)
    # set while the reference is the rounding model's (AD agreed within it):
    # measures fn's noise and returns the measured reference
    measure: Callable[[], Reference] | None = None
    # with it: how far the measured value may sit from this one (|R1 - R2| at
    # most), per element, and the Hoeffding term of that in each cotangent's
    # projection (the oracle keeps the terms and lets the vector go)
    shift: Array | None = None
    shift_terms: tuple[float, ...] | None = None
    eps_f: float = 0.0  # the rounding model's error of one F value at the first step

    @property
    def lo(self) -> Array:
        return self.value - self.err

    @property
    def hi(self) -> Array:
        return self.value + self.err

    @property
    def modelled(self) -> bool:
        """Whether fn's noise is still the rounding model's, not measured."""
        return self.measure is not None

    def gave_up(self, mask: Array, reason: Callable[[int], str]) -> Reference:
        """This reference with the elements of ``mask`` unreliable; the first
        few keep ``reason(i)``."""
        reasons = dict(self.reasons or {})
        for i in _xp.nonzero(mask, limit=3):
            reasons[int(i)] = reason(int(i))
        return dataclasses.replace(
            self, status=_xp.put(_xp.copy(self.status), mask, UNRELIABLE), all_smooth=False, reasons=reasons
        )

    def gave_up_at(self, idx: Any, reason: Callable[[int], str]) -> Reference:
        """gave_up at the flat indices ``idx`` (a host array)."""
        mask = _xp.put(_xp.zeros(_xp.size(self.status), self.status, "bool"), idx, True)
        return self.gave_up(_xp.ns(self.status).reshape(mask, tuple(self.status.shape)), reason)


@dataclass(frozen=True)
class Problem:
    """F'(0) to be measured: F along the direction and its value ``f0`` at 0,
    the first step ``h`` and the finest the ladder may take (``floor``), the
    oracle's unit roundoff, the AD tolerance the estimate must settle, whether
    flagged elements go down the ladder, F(0)'s scale, the largest input
    magnitude (see ``reference``), the point's magnitude along the direction,
    and for part of the outputs the largest |F(0)| of those left out
    (``outer``: see _on_support)."""

    F: Callable[[float], Array]
    f0: Array
    h: float
    floor: float
    u_oracle: float
    ad_tol: Array | float
    ladder: bool
    f0_scale: float
    inputs: float = 0.0
    point: float = 1.0
    outer: float = 0.0

    @classmethod
    def of(
        cls,
        F: Callable[[float], Array],
        f0: Array,
        h: float,
        floor: float,
        u_oracle: float,
        ad_tol: Array | float,
        *,
        ladder: bool = True,
        f0_scale: float | None = None,
        inputs: float = 0.0,
        point: float = 1.0,
    ) -> Problem:
        """The problem with F(0)'s scale measured where not given."""
        scale = _xp.fmax(f0) if f0_scale is None else f0_scale
        return cls(F, f0, h, floor, u_oracle, ad_tol, ladder, scale, inputs, point)


#: reference()'s ``quick`` before model_reference() has run.
UNKNOWN: Any = object()
