"""What a directional check spends on doubt: the guards and the second
direction that run only where the first comparisons leave the verdict in
doubt (see docs/verdicts.md, "Guards that run on doubt")."""

from __future__ import annotations

from .._result import ERROR, WARNING, Kind
from . import xp as _xp
from .findings import Closeness, Findings
from .oracle import Oracle
from .primal import repeat_noise

__all__ = ["DECISIVE", "DISAGREEING", "TIERED", "decisive", "doubtful"]

#: A directional check whose every comparison came within this fraction of
#: its bound passes decisively (correct functions come within 0.01 to 0.3).
DECISIVE = 0.25

#: Random directions (and cotangents) of a directional check by default: the
#: first tier's, and where it leaves doubt (see doubtful) the second's. The
#: first tier's pair is the second's first pair (probes draws them in pairs).
TIERED = (1, 2)


def decisive(report: Findings, closeness: Closeness, oracle: Oracle) -> bool:
    """Whether a directional check passed beyond doubt: nothing found (but a
    mode fn has no rule for), every FD reference the rounding model's (its
    elementwise kink and noise tests passed at every point of its stencil),
    and every comparison within DECISIVE of its bound. fn evaluated
    differently at the same point by more than rounding would have shown at
    those points, element by element, as noise the model does not allow or as
    a disagreement with the JVP: the second evaluation at the point is not
    needed - unless the points were fn's compiled form's and their F(0)
    lies beyond rounding of fn's eager first value (see _f0_repeats)."""
    if any(f.kind != Kind.MODE_UNAVAILABLE for f in report.items) or closeness.worst > DECISIVE or not oracle.refs:
        return False
    return all(ref.modelled for ref in oracle.refs) and _f0_repeats(oracle)


def _f0_repeats(oracle: Oracle) -> bool:
    """Whether the finite differences' points tell fn's jitter at the point:
    where they are fn's own eager calls, always (the argument above); where
    they are its compiled form's (jax compiles fn for the evaluations of a
    large check), only if their F(0) agrees with fn's eager first value
    within the rounding the second evaluation allows (primal.repeat_noise). A program traced
    once holds fixed whatever its trace drew (a random number, a global
    read), so its points agree with each other and only the eager first call
    can tell that fn is not a function; a compiled form that rounds
    otherwise, or a float64 run of a float32 fn, agrees within that."""
    ev, primal = oracle.ev, oracle.primal
    f0 = oracle.f0
    if ev.rule is not None or not ev.backend.compiles(ev.fn) or f0 is primal.values:
        return True
    centre, first = _xp.flat(f0), _xp.flat(_xp.as64(primal.values))
    if _xp.equal(centre, first):
        return True
    with _xp.quiet():  # (NaN at both, or one inf at both, is no difference)
        apart = _xp.ns(centre, first).abs(centre - first) > repeat_noise(primal.dtype, first)
    return not _xp.any_(apart)


#: The warnings a comparison makes of a disagreement it let pass (a suite's
#: tolerance decided, FD could not resolve it, rounding explains it): the
#: ones another direction could turn into an error. The others (a NaN
#: output, fn's tolerated jitter, a kink, elements FD cannot decide) say the
#: same along any direction.
DISAGREEING = (Kind.MISMATCH, Kind.PRECISION)


def doubtful(report: Findings, closeness: Closeness) -> bool:
    """Whether a directional check's first tier leaves its verdict in doubt,
    so that a second direction is worth its cost: it passed, but a comparison
    came within reach of its bound (beyond DECISIVE of it) or let a
    disagreement pass with a warning (DISAGREEING). A failure is final (more
    directions only add comparisons)."""
    if any(f.level == ERROR for f in report.items):
        return False
    warned = any(f.level == WARNING and f.kind in DISAGREEING for f in report.items)
    return warned or closeness.worst > DECISIVE
