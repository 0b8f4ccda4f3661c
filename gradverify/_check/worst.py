"""The named records of a comparison's worst disagreement: what each
comparison keeps of the element or projection furthest over its bound, and
the input element localisation finds behind it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["ElementWorst", "JacobianWorst", "Located", "PrecisionWorst", "ProjectionWorst"]


@dataclass(frozen=True)
class Located:
    """The input element behind a disagreement, with FD's witness there."""

    element: int  # flat index into the inputs
    values: dict[str, float]  # labelled: {"VJP": .., "FD": ..} or {"JVP": .., "FD": ..}
    bound: float
    how: str
    undecided: str | None = None  # why FD along e_j cannot decide there, if it cannot


@dataclass(frozen=True)
class ElementWorst:
    """JVP against FD: the output element furthest over its bound."""

    ratio: float  #: |JVP - FD| / (AD bound + FD error)
    direction: int  #: the probe direction b
    element: int  #: the flat output element i
    ad_bound: float  #: the JVP's rounding bound there
    count: int  #: elements over the bound, over every direction


@dataclass(frozen=True)
class ProjectionWorst:
    """A projection <J^T v_a, u_b> furthest from <v_a, J u_b>."""

    ratio: float  #: |lhs - rhs| / bound
    cotangent: int  #: a
    direction: int  #: b
    lhs: float  #: <J^T v_a, u_b> from the VJP
    rhs: float  #: <v_a, J u_b> from FD or the JVP
    bound: float  #: both sides' rounding and FD error, Hoeffding-combined
    found: Located | None = None  #: the VJP's element FD along e_j convicts on its own, if any


@dataclass(frozen=True)
class JacobianWorst:
    """A full Jacobian's element: row i from the VJP against column j from FD."""

    ratio: float  #: |VJP - FD| / bound
    row: int  #: the output element i
    column: int  #: the input element j
    ad: float  #: the VJP's J[i, j]
    fd: float  #: FD's J[i, j]
    bound: float  #: the VJP's rounding bound + FD's error
    kink: bool  #: FD's element is the hull of one-sided derivatives at a kink
    count: int  #: Jacobian elements over the bound


@dataclass(frozen=True)
class PrecisionWorst:
    """Low-precision AD against its float64 run: the element furthest over."""

    over_limit: float  #: |difference| / the low-precision limit
    over_model: float  #: |difference| / the rounding model
    key: Any  #: the direction b (JVP), or (cotangent a, argument k) (VJP)
    index: int  #: the flat element
    native: float  #: the low-precision value
    float64: float  #: the float64 value
    dtype: str  #: the low precision
    model: float  #: the rounding model's bound there
    limit: float  #: the low-precision limit there
    count: int  #: elements over the rounding model

    @property
    def rank(self) -> tuple[float, float]:
        return (self.over_limit, self.over_model)
