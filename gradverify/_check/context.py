"""What one check's stages share: its options, taken whole from gv.check,
and the context every stage after the probes works in."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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
    k: int | None  #: random directions (None: one, and a second where the first leaves doubt)
    vectorise: bool = True  #: a full Jacobian's rows and columns in one vmap call each
    batched: bool = False  #: the modes under vmap too (see batched)
    #: a migrated suite's own (atol, rtol): an AD value within atol + rtol |FD|
    #: of finite differences is never a mismatch (see Judge.suite_floor)
    suite: tuple[float, float] | None = None
    #: two evaluations of fn differing by at most this are not nondeterminism errors
    nondet_tol: float = 0.0
    #: the modes asked for ("JVP", "VJP", and at higher orders their
    #: derivatives' modes, "JVP of VJP", ...); None: every mode fn has
    modes: frozenset[str] | None = None

    def left_out(self) -> frozenset[str]:
        """The first-order modes not to run: neither asked nor the function
        an asked derivative's mode differentiates ("VJP of VJP" runs the VJP)."""
        if self.modes is None:
            return frozenset()
        return frozenset(m for m in ("JVP", "VJP") if m not in self.modes and not self.derived(m))

    def derived(self, of: str) -> frozenset[str] | None:
        """The modes asked of the derivative ``of`` ("JVP" or "VJP"), as that
        derivative's own check names them ("JVP of VJP" is its "JVP")."""
        if self.modes is None:
            return None
        tail = f" of {of}"
        return frozenset(m[: -len(tail)] for m in self.modes if m.endswith(tail))

    def reproduce(self, code: str, argcode: str, wrt: Any, order: int, name: str | None = None) -> str:
        """The ``gv.check`` call that repeats a check with these options: fn
        as ``code``, its arguments as ``argcode``."""
        opts = [f"seed={self.seed}"]
        for key, value, default in (
            ("wrt", wrt, None),
            ("order", order, 1),
            ("rtol", self.rtol, None),
            ("atol", self.atol, None),
            ("full", self.full, None),
            ("directions", self.k, None),
            ("vectorise", self.vectorise, True),
            ("batched", self.batched, False),
            ("suite_tol", self.suite, None),
            ("nondet_tol", self.nondet_tol, 0.0),
            ("modes", None if self.modes is None else tuple(sorted(self.modes, key=_mode_order)), None),
        ):
            if value != default:
                opts.append(f"{key}={value!r}")
        if name is not None:
            opts.append(f"name={name!r}")
        return f"gv.check({code}, {argcode}, {', '.join(opts)})"


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
    #: FD along the directions from the coarse model (fd.COARSE_OFFSETS): a
    #: tiered directional check's first tier (see tiers).
    coarse: bool = False


def _mode_order(mode: str) -> tuple[int, str]:
    """Lower orders first, then by name ("JVP", "VJP", "JVP of JVP", ...)."""
    return mode.count(" of "), mode
