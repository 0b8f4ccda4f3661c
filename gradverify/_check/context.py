"""What one check's stages share: its options, taken whole from gv.check,
and the context every stage after the probes works in."""

from __future__ import annotations

from dataclasses import dataclass

from .evaluate import Evaluator
from .findings import Closeness, Findings
from .primal import Precision, Primal
from .probes import Probes

__all__ = ["Context", "Options"]


@dataclass(frozen=True)
class Options:
    """gv.check's options, validated; passed whole to every stage and to the
    checks of a second order."""

    seed: int
    rtol: float | None
    atol: float | None
    full: bool | None
    k: int  #: random directions
    vectorise: bool = True  #: a full Jacobian's rows and columns in one vmap call each
    batched: bool = False  #: the modes under vmap too (see batched)


@dataclass(frozen=True)
class Context:
    """One check at one point: fn's evaluator, its output there, the oracle's
    precision, the probe directions, the options, and where findings and the
    closeness of every comparison go."""

    ev: Evaluator
    primal: Primal
    precision: Precision
    probes: Probes
    options: Options
    report: Findings
    closeness: Closeness
