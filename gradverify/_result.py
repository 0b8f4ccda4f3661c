"""The vocabulary of findings, the result of one check, and its report: the
text a result prints, fitting on a screen, verdict first."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Generic, TypeVar

__all__ = [
    "ERROR",
    "INFO",
    "WARNING",
    "SECOND_ORDER_MODES",
    "ArraySummary",
    "CheckResult",
    "Finding",
    "Kind",
    "Level",
    "Word",
    "render_finding",
    "render_text",
    "second_order_mode",
]

_T = TypeVar("_T")


class _Derived(Generic[_T]):
    """A class attribute computed from the finished enum: a descriptor, so
    the enum does not take it for a member."""

    def __init__(self, make: Callable[[Any], _T]) -> None:
        self.make = make

    def __get__(self, obj: Any, cls: Any) -> _T:
        return self.make(cls)


class Word(str, Enum):
    """A word of the vocabulary: a str (equal to its value, JSON writes the
    value) that prints as its value."""

    __str__ = str.__str__
    __format__ = str.__format__


class Kind(Word):
    """Every kind of finding (stable: reports and tests match them)."""

    MISMATCH = "mismatch"  # two of JVP / VJP / FD disagree beyond the bound
    NONFINITE_GRADIENT = "nonfinite_gradient"  # NaN/inf derivative where the output is finite
    WRONG_SHAPE = "wrong_shape"  # a derivative of the wrong shape (or count)
    WRONG_DTYPE = "wrong_dtype"  # a derivative of the wrong dtype
    NONDETERMINISM = "nondeterminism"  # two identical evaluations differ
    MUTATION = "mutation"  # fn changed an argument in place
    MODE_UNAVAILABLE = "mode_unavailable"  # fn has no JVP (or no VJP)
    NONDIFFERENTIABLE = "nondifferentiable"  # a kink at the point: inconclusive
    DISCONTINUITY = "discontinuity"  # a jump at the point: inconclusive
    FD_UNRELIABLE = "fd_unreliable"  # finite differences cannot decide there: inconclusive
    NOTHING_COMPARED = "nothing_compared"  # no output element to compare (empty, or all NaN/inf): inconclusive
    PRECISION = "precision"  # low-precision AD off its float64 AD by rounding, not a wrong rule
    NONFINITE_OUTPUT = "nonfinite_output"  # fn's output itself is NaN/inf somewhere
    EXCEPTION = "exception"  # fn or one of its rules raised
    WRONG_DEVICE = "wrong_device"  # a gradient on another device than its argument
    WRONG_LAYOUT = "wrong_layout"  # a gradient of another layout (or with values outside a sparse pattern)
    HELD_GRADIENT = "held_gradient"  # a non-zero derivative at an entry held fixed (non-finite at the point)
    NOTHING_CHECKED = "nothing_checked"  # no derivative was compared at all: not a pass (unless allowed)
    NOT_ARGUMENTS = "not_arguments"  # fn reaches tensors that require grad but are not arguments: unchecked

    #: Every kind.
    ALL = _Derived(tuple)
    #: The kinds that leave a check inconclusive (FD could not decide).
    INCONCLUSIVE = _Derived(
        lambda kind: (kind.NONDIFFERENTIABLE, kind.DISCONTINUITY, kind.FD_UNRELIABLE, kind.NOTHING_COMPARED)
    )


class Level(Word):
    """How much a finding weighs: an error fails the check."""

    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


ERROR, WARNING, INFO = Level.ERROR, Level.WARNING, Level.INFO


def second_order_mode(mode: str, of: str) -> str:
    """The name of ``mode`` (JVP or VJP) applied to the derivative ``of``."""
    return f"{mode} of {of}"


#: The modes of an order-2 check: each mode of each first-order derivative.
SECOND_ORDER_MODES = tuple(second_order_mode(mode, of) for of in ("VJP", "JVP") for mode in ("JVP", "VJP"))


@dataclass(frozen=True)
class Finding:
    kind: Kind | str
    level: Level | str
    message: str
    pair: tuple[str, str] | None = None  # e.g. ("VJP", "FD"): who disagrees
    argument: int | None = None  # positional index of the input concerned
    input_index: tuple[int, ...] | None = None
    output_index: tuple[int, ...] | None = None
    values: dict[str, float] = field(default_factory=dict)  # labelled: {"VJP": .., "FD": ..}
    error: float | None = None
    bound: float | None = None
    bound_reason: str | None = None
    order: int = 1
    where: str | None = None  # e.g. "directional: direction 1 of 2"
    detail: str | None = None  # a traceback, a hint
    input_name: str | None = None  # the input's name by its path (a pytree leaf, a model's parameter)
    output_name: str | None = None  # the output's name by its path (a leaf of a pytree output)
    # the type of an exception fn itself raised, with its bases (module.qualname, most derived first)
    raised: tuple[str, ...] | None = None

    @property
    def relative(self) -> float | None:
        """A disagreement between a derivative and its reference (FD, or the
        other mode) relative to the larger of the two values: 2 for opposite
        signs, 1 where one is 0; None for findings of another kind."""
        if self.kind != Kind.MISMATCH or self.pair is None or self.pair[0].startswith("batched"):
            return None
        if self.pair[1] not in ("FD", "VJP") or len(self.values) != 2 or self.error is None:
            return None
        top = max(abs(v) for v in self.values.values())
        return self.error / top if top > 0 else None

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        for k in ("input_name", "output_name", "raised"):
            if d[k] is None:
                del d[k]  # (named where the check had pytrees or a model; raised where fn raised)
        for k in ("pair", "input_index", "output_index", "raised"):
            if d.get(k) is not None:
                d[k] = list(d[k])
        return d


@dataclass(frozen=True)
class ArraySummary:
    name: str
    shape: tuple[int, ...]
    dtype: str
    min: float | None
    max: float | None
    differentiable: bool
    held: int = 0  # entries held fixed (non-finite at the point); min and max are of the others
    layout: str | None = None  # a sparse array's layout (None: dense)
    specified: int | None = None  # a sparse array's specified values (blocks, for a block layout)

    def __str__(self) -> str:
        rng = "" if self.min is None else f" in [{self.min:.4g}, {self.max:.4g}]"
        role = "" if self.differentiable else " (constant)"
        if self.held:
            role += f" ({self.held} held fixed)"
        if self.layout is not None:
            role = f" {self.layout}, {self.specified} specified{role}"
        shape = "x".join(map(str, self.shape)) or "scalar"
        return f"{self.name}: {self.dtype}[{shape}]{rng}{role}"


@dataclass(frozen=True)
class CheckResult:
    """What ``gv.check`` found. ``ok`` is False iff an error-level finding was made."""

    findings: tuple[Finding, ...]
    function: str
    backend: str
    seed: int
    order: int
    inputs: tuple[ArraySummary, ...]
    output: ArraySummary | None
    oracle_dtype: str | None  # the precision finite differences ran in
    strategy: str  # "full Jacobian" or "directional (K directions)"
    modes: dict[str, str]  # {"JVP": "checked" | "unavailable" | ..., "VJP": ...}
    evaluations: dict[str, int]  # calls made: primal, jvp, vjp
    reproduce: str
    # The largest |AD - reference| / bound over everything compared (1 means
    # at the bound; above 1 is a mismatch): how near the check came to failing.
    worst_ratio: float = 0.0
    # What the reader should know about how this check ran: reduced-precision
    # matmuls (TF32) in force, AD that could not run in float64, ...
    notes: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not any(f.level == ERROR for f in self.findings)

    @property
    def errors(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.level == ERROR)

    @property
    def warnings(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.level == WARNING)

    @property
    def inconclusive(self) -> bool:
        """True when part of the check could not decide (a kink, a jump)."""
        return any(f.kind in Kind.INCONCLUSIVE for f in self.findings)

    @property
    def second_order_checked(self) -> bool | None:
        """order >= 2: whether any derivative of the JVP or VJP was checked (None: order 1)."""
        if self.order < 2:
            return None
        return any(self.modes.get(mode) == "checked" for mode in SECOND_ORDER_MODES)

    def by_kind(self, kind: str) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.kind == kind)

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "inconclusive": self.inconclusive,
            "function": self.function,
            "backend": self.backend,
            "seed": self.seed,
            "order": self.order,
            "inputs": [dataclasses.asdict(s) for s in self.inputs],
            "output": None if self.output is None else dataclasses.asdict(self.output),
            "oracle_dtype": self.oracle_dtype,
            "strategy": self.strategy,
            "modes": dict(self.modes),
            "evaluations": dict(self.evaluations),
            "reproduce": self.reproduce,
            "worst_ratio": self.worst_ratio,
            "notes": list(self.notes),
            "findings": [f.to_dict() for f in self.findings],
        }

    def __str__(self) -> str:
        return render_text(self)

    def __repr__(self) -> str:
        verdict = "ok" if self.ok else "FAILED"
        return f"<CheckResult {verdict} {self.function} ({self.backend}) {len(self.findings)} findings>"


# -- the report of one check -------------------------------------------------

_MAX_FINDINGS = 8
_MAX_DETAIL_LINES = 12


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.6g}"


def render_finding(f: Finding) -> list[str]:
    head = f"[{f.level}] {f.kind}"
    if f.pair:
        head += f" ({f.pair[0]} vs {f.pair[1]})" if f.pair[1] not in ("-", "output", "inputs") else f" ({f.pair[0]})"
    if f.order != 1:
        head += f" [order {f.order}]"
    lines = [f"{head}: {f.message}"]
    if f.values:
        lines.append("    " + "   ".join(f"{k} = {_fmt(v)}" for k, v in f.values.items()))
    if f.error is not None and f.bound is not None:
        verdict = ">" if f.error > f.bound else "<="
        lines.append(f"    |error| = {f.error:.3g} {verdict} bound {f.bound:.3g}")
        if f.bound_reason:
            lines.append(f"    bound: {f.bound_reason}")
        if f.level == Level.ERROR and f.error > f.bound:
            lines.extend(_relative(f))
    if f.where:
        lines.append(f"    where: {f.where}")
    if f.detail:
        lines.extend("    | " + d for d in _detail_lines(f.detail))
    return lines


def _detail_lines(detail: str) -> list[str]:
    """A finding's detail as the report shows it: at most _MAX_DETAIL_LINES
    lines. A traceback keeps its innermost frames and its exception's first
    line; the rest of a long exception text is left to the JSON record."""
    lines = detail.rstrip().splitlines()
    if len(lines) <= _MAX_DETAIL_LINES:
        return lines
    # (frames are indented; the exception's text starts at column 0)
    start = next((i for i, ln in enumerate(lines) if i and ln[:1].strip() and not ln.startswith("Traceback")), None)
    if start is None or len(lines) - start <= 2:
        return lines[-_MAX_DETAIL_LINES:]
    frames = lines[:start][-(_MAX_DETAIL_LINES - 2) :]
    said = lines[start].partition(":")[0]
    return [*frames, f"{said}: ({len(lines) - start} lines, the first above; all in the JSON record)"]


#: Below this relative disagreement a mismatch may be an approximation by
#: design (an iterative solver's tolerance, a jitter added in the forward
#: only, a stochastic estimate): the report says what rtol accepts it.
APPROXIMATE = 1e-2


def _relative(f: Finding) -> list[str]:
    """How large a mismatch is against the values themselves, so that an
    approximation by design reads apart from a wrong sign or term."""
    rel = f.relative
    if rel is None or not math.isfinite(rel):
        return []
    a, b = f.values.values()
    if a * b < 0:
        return [f"    relative: {rel:.3g} - the two have opposite signs (a sign error, not an approximation)"]
    if a == 0 or b == 0:
        return ["    relative: 1 - one of the two is 0 (a missing term or rule, not an approximation)"]
    if rel >= APPROXIMATE:
        return [
            f"    relative: {rel:.3g} of the larger value - a wrong term or factor "
            "(an approximation by design is rarely this coarse)"
        ]
    # (the AD value: the pair's first mode; a projection's JVP-vs-VJP finding holds the VJP and its reference)
    ad = abs(next((f.values[m] for m in f.pair if m in f.values), a))
    # rtol makes the bound rtol x |AD| + FD's error: this rtol covers the error alone
    accept = f"; if fn approximates by design, rtol={_up(f.error / ad)} accepts this element" if ad > 0 else ""
    return [
        f"    relative: {rel:.3g} of the larger value - small enough for an approximation by design (a solver's "
        f"tolerance, a jitter, a stochastic estimate){accept}"
    ]


def _up(x: float) -> str:
    """x rounded up to two significant digits, as written."""
    e = math.floor(math.log10(x)) - 1
    return f"{math.ceil(x / 10.0**e - 1e-9) * 10.0**e:.2g}"


def render_text(r: CheckResult) -> str:
    errors = r.errors
    if errors:
        verdict = "FAILED"
    elif any(f.kind == "nothing_compared" for f in r.findings):
        verdict = "PASSED (nothing compared)"
    elif r.inconclusive:
        verdict = "PASSED (partly inconclusive)"
    else:
        verdict = "PASSED"
    checked = [m for m in ("JVP", "VJP") if r.modes.get(m) == "checked"]
    if not errors and len(checked) == 1 and verdict == "PASSED":
        other = "VJP" if checked == ["JVP"] else "JVP"
        verdict += f" ({checked[0]} only; {other} {r.modes.get(other, 'not run')})"
    if not errors and r.second_order_checked is False:
        verdict += f" (order {r.order} not checked: no derivative of the JVP or VJP could be taken)"
    n_warn = len(r.warnings)
    lines = [
        f"gradverify {verdict}: {r.function} [{r.backend}, order {r.order}] "
        f"- {len(errors)} error(s), {n_warn} warning(s)"
    ]
    modes = ", ".join(f"{k}: {v}" for k, v in r.modes.items())
    lines.append(f"  checked: {r.strategy}" + (f"; {modes}" if modes else ""))
    lines.append("  inputs:  " + "; ".join(str(s) for s in r.inputs))
    if r.output is not None:
        lines.append(f"  output:  {r.output}")
    lines.extend(f"  note:    {note}" for note in r.notes)
    ordered = sorted(r.findings, key=lambda f: (f.level != "error", f.level != "warning"))
    for f in ordered[:_MAX_FINDINGS]:
        lines.extend("  " + line for line in render_finding(f))
    if len(ordered) > _MAX_FINDINGS:
        lines.append(f"  ... {len(ordered) - _MAX_FINDINGS} more finding(s) in result.findings")
    calls = ", ".join(f"{k} {v}" for k, v in sorted(r.evaluations.items()))
    lines.append(f"  cost:    {calls or 'no evaluation'}")
    lines.append(f"  reproduce: {r.reproduce}")
    return "\n".join(lines)
