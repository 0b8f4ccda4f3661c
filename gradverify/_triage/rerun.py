"""``gv.triage`` (``gradverify triage rerun``): rerun one gradient test across
seeds, thread counts, FD steps, dtypes and repeated identical evaluations, and
say whether it fails because of a bug, a kink, rounding or a nondeterministic
op, with the evidence for it.

The evidence is made of Records (frozen dataclasses that read as the JSON
objects they are written as). Rendering is the reports layer's
(``render``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import _io
from .._check.evaluate import Evaluator
from .._check.pipeline import check
from .._check.steps import fd_against_step, flat_values, kink_distance
from .._errors import ModeUnavailable
from .._io import Record
from .._result import CheckResult, Kind
from .._verify import generated, verify
from ..backends import backend_name_of, backend_of
from .verdict import Verdict

__all__ = [
    "DTYPES",
    "FD_STEPS",
    "KINK_MARGIN",
    "MAX_POINTS",
    "STEP_EXPLAINS",
    "DtypeRun",
    "Evidence",
    "Failure",
    "MinimalCase",
    "Nondeterminism",
    "StepSweep",
    "Triage",
    "dtype_sweep",
    "fd_step_sweep",
    "outcome",
    "region",
    "rerun",
]

KINK_MARGIN = 1e-3  # a minimal case stays this far (relative) from any declared kink
FD_STEPS = (1e-1, 1e-2, 1e-3, 1e-4, 1e-5, 1e-6, 1e-7, 1e-8)
DTYPES = ("float64", "float32")

#: An FD-step sweep whose best step brings FD within this fraction of |AD|
#: says the disagreement was the step's (or fn's rounding at it), not AD's: a
#: wrong rule stays off by the size of its mistake, 1e-4 and more, at every step.
STEP_EXPLAINS = 1e-4


# -- the evidence ------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class StepSweep(Record):
    """FD against the step along one direction: ``steps`` rows [h, FD(h),
    |FD(h) - AD|], where the error bottoms out (``floor``, relative to |AD|
    ``relative_floor``, at ``best_step``) and what that says (``trend``).
    A function it could not be computed for has the reason as its trend and
    no steps."""

    AD: float | None = None
    steps: list[list[float]] = dataclasses.field(default_factory=list)
    floor: float | None = None
    relative_floor: float | None = None
    best_step: float | None = None
    trend: str = ""

    OPTIONAL = frozenset({"AD", "floor", "relative_floor", "best_step"})

    @property
    def explains(self) -> bool:
        """Some step brings FD and AD together: the disagreement was the step's, not AD's."""
        return self.relative_floor is not None and self.relative_floor <= STEP_EXPLAINS


@dataclasses.dataclass(frozen=True)
class DtypeRun(Record):
    """The test on the failing values cast to one dtype: passed (``ok``), its
    error, or what it raised (``ok`` None)."""

    ok: bool | None
    error: float | None
    raised: str | None = None

    OPTIONAL = frozenset({"raised"})


@dataclasses.dataclass(frozen=True)
class Nondeterminism(Record):
    """Two evaluations that should be identical and are not."""

    differs_between: list[str]  # e.g. ["threads=1", "threads=4"]
    max_difference: float  # the largest |difference| of outputs or gradients


@dataclasses.dataclass(frozen=True)
class Failure(Record):
    """The first failing input of one seed, judged again."""

    seed: int
    test_error: float  # the error the test reported
    confirmed: bool  # a bug: gv.check fails there and no FD step brings AD and FD together
    check_fails: bool
    accurate_error: float
    accurate_bound: float | None
    # gv.check's worst |error| / (FD error estimate + rounding) at this input: <= 1 means the
    # derivative agrees with FD as well as FD can tell
    error_over_estimate: float
    inconclusive: bool
    kink_distance: float | None
    position: list[float]  # where the wrong element lies: its input value (or positions)
    fd_sweep: StepSweep | None
    dtypes: dict[str, DtypeRun] | None


@dataclasses.dataclass(frozen=True)
class MinimalCase(Record):
    """The failing input gv.verify shrank a bug to."""

    seed: int
    shrink_steps: int
    shapes: list[list[int]]
    kink_distance: float | None
    position: list[float]


@dataclasses.dataclass(frozen=True)
class Evidence(Record):
    """What a verdict rests on: the counts, the failing seeds, each failure,
    and the verdict's own figures (present only with that verdict)."""

    seeds: int
    examples: int
    failing_examples: int
    failing_seeds: list[int]
    nondeterminism: Nondeterminism | None
    region: list[str] | None = None  # bug in a region, bug: the pieces between kinks (or the signs) of the failures
    kink_distances: list[float | None] | None = None  # kink flake
    avoid_with: str | None = None  # kink flake
    proposed_tolerance: float | None = None  # precision flake
    failures: list[Failure] = dataclasses.field(default_factory=list)
    minimal_case: MinimalCase | None = None  # bug, bug in a region

    OPTIONAL = frozenset({"region", "kink_distances", "avoid_with", "proposed_tolerance", "minimal_case"})


@dataclasses.dataclass(frozen=True)
class Triage:
    """The verdict on one gradient test and its evidence.

    ``verdict``: passes, bug, bug in a region, kink flake, precision flake or
    nondeterministic op (a Verdict); ``evidence`` (an Evidence) holds the
    counts, the failing seeds, per failure the kink distance, the FD-step and
    dtype sweeps, and the verdict's own figures (``region``,
    ``kink_distances`` and ``avoid_with``, ``proposed_tolerance``,
    ``nondeterminism``, and for a bug ``minimal_case``); ``example`` is the
    minimal failing input for a bug (shrunk by gv.verify), else the first
    failing one, and ``check`` gv.check's result there."""

    verdict: Verdict
    evidence: Evidence
    example: tuple[Any, ...] | None
    check: CheckResult | None

    @property
    def ok(self) -> bool:
        return self.verdict == Verdict.PASSES

    def __str__(self) -> str:
        ev = self.evidence
        lines = [
            f"verdict: {self.verdict}",
            f"  {ev.failing_examples} of {ev.examples} input(s) failed, "
            f"on seeds {ev.failing_seeds or 'none'} of {ev.seeds}",
        ]
        for key in ("region", "minimal_case", "kink_distances", "avoid_with", "proposed_tolerance", "nondeterminism"):
            if ev.get(key) is not None:
                lines.append(f"  {key}: {_io.clean(ev[key])}")
        first = ev.failures[0] if ev.failures else None
        if first is not None:
            if first.fd_sweep:
                lines.append(f"  FD step sweep: {first.fd_sweep.trend}")
            if first.dtypes:
                shown = ", ".join(f"{d} {outcome(r)}" for d, r in first.dtypes.items())
                lines.append(f"  the failing input in other dtypes: {shown}")
        if self.check is not None:
            lines.append(f"  the check at the {'minimal' if ev.minimal_case else 'first failing'} input:")
            lines += ["    " + ln for ln in str(self.check).splitlines()]
        return "\n".join(lines)


def outcome(run: DtypeRun | dict[str, Any]) -> str:
    """A dtype run in one word: passes, fails or raises."""
    return "passes" if run["ok"] else "fails" if run["ok"] is False else "raises"


# -- the probes ---------------------------------------------------------------------------------


def _gradients(fn: Any, args: Sequence[Any], cotangent_seed: int = 0) -> list[Any]:
    """VJP of fn at args for a fixed cotangent, through the checker's Evaluator."""
    ev = Evaluator.for_call(fn, args)
    out = ev.primal(None, None)
    v = np.random.default_rng(cotangent_seed).standard_normal(out.shape)
    dtype = next(d for d, f in zip(ev.dtypes, ev.floating) if f)
    try:
        return [np.asarray(d.value) for d in ev.vjp(v, dtype)]
    except ModeUnavailable:
        return []  # no reverse mode (plain numpy): outputs alone are compared


def _thread_counts_differ(fn: Any, args: Sequence[Any], threads: Sequence[int], repeats: int) -> Nondeterminism | None:
    """Bitwise differences of outputs and gradients across repeated calls and
    torch thread counts: the evidence of a nondeterministic op (None: none)."""
    torch = None
    if any(backend_name_of(a) == "torch" for a in args):
        import torch
    seen: dict[str, list[Any]] = {}
    previous = torch.get_num_threads() if torch is not None else None
    try:
        for t in threads if torch is not None else (None,):
            if torch is not None:
                torch.set_num_threads(t)
            for _ in range(repeats):
                y = np.asarray(_io.to_numpy(fn(*args)), dtype=np.float64)
                g = _gradients(fn, args)
                seen.setdefault(f"threads={t}", []).append((y, g))
    finally:
        if torch is not None:
            torch.set_num_threads(previous)
    first_key = next(iter(seen))
    y0, g0 = seen[first_key][0]
    for key, rows in seen.items():
        for y, g in rows:
            if not np.array_equal(y, y0) or any(not np.array_equal(a, b) for a, b in zip(g, g0)):
                diff = max([float(np.max(np.abs(y - y0)))] + [float(np.max(np.abs(a - b))) for a, b in zip(g, g0)])
                return Nondeterminism(differs_between=[first_key, key], max_difference=diff)
    return None


def _located(result: Any, args: Sequence[Any], position: Any) -> list[float]:
    """Where the check located the wrong element: its input value (with
    ``position``, the positions instead)."""
    if position is not None:
        return [float(v) for v in flat_values(position(*args))[:16]]
    err = result.errors[0] if result.errors else None
    if err is not None and err.argument is not None and err.input_index is not None:
        return [float(np.asarray(_io.to_numpy(args[err.argument]), dtype=np.float64)[tuple(err.input_index)])]
    return [float(v) for v in flat_values(args[0])[:16]]


def _first_failure(
    fn: Any, strategy: Any, run_test: Any, seed: int, max_examples: int, first_args: list[Any]
) -> tuple[list[Any], dict[str, int]]:
    """The first input (in the seed's order, unshrunk) on which the test fails,
    and how many of the seed's inputs ran and failed."""
    found: list[Any] = []
    counts = {"examples": 0, "failing": 0}

    def explore(args: Any) -> None:
        if not first_args:
            first_args.append(args)
        ok, err = run_test(fn, *args)
        counts["examples"] += 1
        counts["failing"] += not ok
        if not ok and not found:
            found.append((args, err))

    generated(strategy, seed, max_examples, explore)
    return found, counts


def fd_step_sweep(fn: Any, args: Sequence[Any], steps: Sequence[float] = FD_STEPS, seed: int = 0) -> StepSweep:
    """One random directional derivative u^T J v of ``fn`` at ``args``: reverse
    mode at the arguments' own dtype against central differences in float64 at
    each step h (relative to the largest |x|).

    How |FD(h) - AD| moves with h tells the causes apart: a wrong rule levels
    off at the size of the mistake whatever the step; a stencil across a kink
    is wrong while h exceeds the distance to the kink and falls once it does
    not; rounding levels off at the AD's own precision (float32: ~1e-7)."""
    ev = Evaluator.for_call(fn, args)
    rng = np.random.default_rng(seed)
    base = [np.asarray(ev.values[i], dtype=np.float64) for i in ev.wrt]
    v = [rng.standard_normal(b.shape) for b in base]
    u = rng.standard_normal(ev.primal(None, None).shape)
    out_dtype = next(d for d, f in zip(ev.dtypes, ev.floating) if f)
    ad = 0.0
    for d, b, vk in zip(ev.vjp(u, out_dtype), base, v):
        if d.value is not None:
            ad += float(np.sum(np.asarray(d.value, dtype=np.float64).reshape(b.shape) * vk))
    scale = max([1.0] + [float(np.max(np.abs(b))) for b in base if b.size])
    rows = fd_against_step(ev, u, v, ad, [h * scale for h in steps])
    errors = [r[2] for r in rows]
    floor = min(errors)
    relative = floor / max(abs(ad), 1e-300)
    best = rows[errors.index(floor)][0]
    return StepSweep(
        AD=ad,
        steps=rows,
        floor=floor,
        relative_floor=relative,
        best_step=best,
        trend=(
            f"levels off at {relative:.2g} of |AD|: AD itself is off, whatever the step"
            if relative > STEP_EXPLAINS
            else f"falls to {relative:.2g} of |AD| at h = {best:.1e}: the step, not AD"
        ),
    )


def dtype_sweep(fn: Any, args: Sequence[Any], run_test: Any, dtypes: Sequence[str] = DTYPES) -> dict[str, DtypeRun]:
    """The test again on the same values cast to each of ``dtypes``; a
    failure that goes away in a wider dtype is a question of precision, one
    that stays is not."""
    backend = backend_of(args)
    out: dict[str, DtypeRun] = {}
    for d in dtypes:
        try:
            with backend.precision(d):
                cast = [
                    backend.from_numpy(np.array(backend.to_numpy(a), copy=True), a, d) if backend.is_floating(a) else a
                    for a in args
                ]
                ok, err = run_test(fn, *cast)
            out[d] = DtypeRun(ok=bool(ok), error=float(err))
        except Exception as e:  # a dtype the op does not take is a fact, not a crash
            out[d] = DtypeRun(ok=None, error=None, raised=f"{type(e).__name__}: {e}"[:200])
    return out


def _quietly_sweep(fn: Any, args: Sequence[Any], steps: Sequence[float]) -> StepSweep:
    """An extra view of a failure: a function it cannot be computed for gets none."""
    try:
        return fd_step_sweep(fn, args, steps)
    except Exception as e:
        return StepSweep(trend=f"not computed ({type(e).__name__}: {e})"[:200])


# -- the verdict --------------------------------------------------------------------------------
def _judged(
    fn: Any,
    args: Any,
    seed: int,
    err: float,
    run_test: Any,
    kinks: Sequence[float],
    position: Any,
    fd_steps: Sequence[float],
    dtypes: Sequence[str],
) -> tuple[Failure, CheckResult]:
    """A failing input judged again by gv.check, the FD-step sweep and the dtypes."""
    accurate = check(fn, *args)
    sweep = _quietly_sweep(fn, args, fd_steps) if fd_steps else None
    errors = accurate.errors
    failure = Failure(
        seed=seed,
        test_error=float(err),
        confirmed=not accurate.ok and not (sweep is not None and sweep.explains),
        check_fails=not accurate.ok,
        accurate_error=max((e.error or 0.0) for e in errors) if errors else 0.0,
        accurate_bound=max((e.bound or 0.0) for e in errors) if errors else None,
        error_over_estimate=float(accurate.worst_ratio),
        inconclusive=accurate.inconclusive,
        kink_distance=kink_distance(args, kinks, position),
        position=_located(accurate, args, position),
        fd_sweep=sweep,
        dtypes=dtype_sweep(fn, args, run_test, dtypes) if dtypes else None,
    )
    return failure, accurate


def rerun(
    fn: Any,
    args_strategy: Any,
    *,
    test: Any = None,
    seeds: int = 8,
    max_examples: int = 50,
    kinks: Sequence[float] = (),
    position: Any = None,
    threads: Sequence[int] = (1, 2),
    repeats: int = 3,
    fd_step: float | None = None,
    fd_steps: Sequence[float] = FD_STEPS,
    dtypes: Sequence[str] = DTYPES,
) -> Triage:
    """Rerun one gradient test across seeds, thread counts, FD steps, dtypes
    and repeated identical evaluations, and give a verdict with its evidence:
    confirmed failures are a **bug** (nearly every input fails) or a **bug
    in a region** (some do; the pieces between ``kinks``, or the signs, that
    hold the failing positions are given); unconfirmed ones are a **kink
    flake** (the input lies within 2 ``fd_step`` of a kink, or gv.check finds
    one there) or else a **precision flake** with the tolerance that would
    hold; outputs or gradients that change between identical calls or thread
    counts make it a **nondeterministic op**.

    Args:
        fn: the function the test checks, as for :func:`gradverify.check`.
        args_strategy: a Hypothesis strategy of argument tuples (the test's
            inputs).
        test: ``test(fn, *args) -> (ok, error)``, the test as written
            (default: gv.check with the rounding model); each failing input
            is judged again by gv.check.
        seeds: how many seeds to rerun the test with.
        max_examples: examples drawn per seed.
        kinks: the points where fn has a kink (in the units ``position``
            gives).
        position: ``position(*args)`` gives the points to measure against
            ``kinks`` (default: the first argument).
        threads: torch thread counts to compare outputs and gradients across.
        repeats: identical evaluations compared bit for bit.
        fd_step: the test's own finite-difference step, if it has one.
        fd_steps: the steps of each failure's FD-step sweep
            (:func:`fd_step_sweep`).
        dtypes: the dtypes each failure is tried in (:func:`dtype_sweep`).

    Returns:
        A :class:`gradverify.Triage`: its ``verdict`` (a
        :class:`gradverify.Verdict`) and ``evidence``, which reads as the
        JSON it is written as.

    Raises:
        ArgumentTypeError: fn or args_strategy is not what gv.verify takes.

    Example:
        >>> import numpy as np, gradverify as gv
        >>> from hypothesis import strategies as st
        >>> from gradverify.strategies import arrays
        >>> sq = gv.Rule(lambda x: x * x, vjp=lambda p, g: (2.5 * p[0] * g,))
        >>> gv.triage(sq, st.tuples(arrays("numpy", shape=(3,))), seeds=2, max_examples=5).verdict
        <Verdict.BUG: 'bug'>
    """

    def default_test(f: Any, *args: Any) -> tuple[bool, float]:
        r = check(f, *args)
        return r.ok, max((e.error or 0.0) for e in r.errors) if r.errors else 0.0

    run_test = test or default_test
    judged: list[tuple[Failure, tuple[Any, ...], CheckResult]] = []
    first_args: list[Any] = []
    examples = failing = 0
    for s in range(seeds):
        found, counts = _first_failure(fn, args_strategy, run_test, s, max_examples, first_args)
        examples += counts["examples"]
        failing += counts["failing"]
        if found:
            args, err = found[0]
            failure, at = _judged(fn, args, s, err, run_test, kinks, position, fd_steps, dtypes)
            judged.append((failure, tuple(args), at))
    failures = [f for f, _, _ in judged]
    nondeterminism = _thread_counts_differ(fn, first_args[0], threads, repeats) if first_args else None
    verdict, figures = _verdict(failures, nondeterminism, failing, examples, kinks, fd_step)
    first = next((j for j in judged if j[0].confirmed), judged[0] if judged else None)
    example = None if first is None else first[1]
    at = None if first is None else first[2]
    if first is not None and verdict in (Verdict.BUG, Verdict.BUG_IN_A_REGION):
        example, at, figures["minimal_case"] = _shrunk(
            fn, args_strategy, first[0].seed, max_examples, kinks, position, example, at
        )
    evidence = Evidence(
        seeds=seeds,
        examples=examples,
        failing_examples=failing,
        failing_seeds=[f.seed for f in failures],
        nondeterminism=nondeterminism,
        failures=failures,
        **figures,
    )
    return Triage(verdict=verdict, evidence=evidence, example=example, check=at)


def _verdict(
    failures: list[Failure],
    nondeterminism: Nondeterminism | None,
    failing: int,
    examples: int,
    kinks: Sequence[float],
    fd_step: float | None,
) -> tuple[Verdict, dict[str, Any]]:
    """The verdict on the judged failures, and the figures that back it."""
    figures: dict[str, Any] = {}

    def near_kink(f: Failure) -> bool:
        declared = fd_step is not None and f.kink_distance is not None and f.kink_distance <= 2 * fd_step
        return declared or f.inconclusive

    if nondeterminism is not None:
        return Verdict.NONDETERMINISTIC_OP, figures
    if not failures:
        return Verdict.PASSES, figures
    if any(f.confirmed for f in failures):
        # a confirmed failure is a bug, whatever else flaked; everywhere (nearly
        # every input fails) or only where inputs reach a region
        verdict = Verdict.BUG if failing >= 0.95 * examples else Verdict.BUG_IN_A_REGION
        positions = np.concatenate([np.asarray(f.position, dtype=np.float64) for f in failures if f.confirmed])
        figures["region"] = region(positions, kinks)
        return verdict, figures
    if all(near_kink(f) for f in failures if not f.confirmed):
        figures["kink_distances"] = [f.kink_distance for f in failures]
        figures["avoid_with"] = "gradverify.strategies.arrays(..., kinks=[...]) or bias_act_args: values kept off kinks"
        return Verdict.KINK_FLAKE, figures
    figures["proposed_tolerance"] = 2 * max(f.test_error for f in failures)
    return Verdict.PRECISION_FLAKE, figures


def _shrunk(
    fn: Any,
    args_strategy: Any,
    seed: int,
    max_examples: int,
    kinks: Sequence[float],
    position: Any,
    example: tuple[Any, ...],
    at: CheckResult,
) -> tuple[tuple[Any, ...], CheckResult, MinimalCase | None]:
    """gv.verify on the first confirmed seed: the minimal case of a bug, kept off
    the kinks (declared, or found by gv.check there) so that it never shrinks onto one."""
    if len(kinks):
        margin = KINK_MARGIN * max(1.0, *(abs(float(k)) for k in kinks))
        strategy = args_strategy.filter(lambda a: (kink_distance(a, kinks, position) or 0.0) > margin)
    else:
        strategy = args_strategy.filter(lambda a: not check(fn, *a).by_kind(Kind.NONDIFFERENTIABLE))
    shrunk = verify(fn, strategy, seed=seed, max_examples=max_examples)
    if shrunk.ok:
        return example, at, None
    minimal = tuple(shrunk.counterexample)
    return (
        minimal,
        shrunk.result,
        MinimalCase(
            seed=seed,
            shrink_steps=shrunk.shrink_steps,
            shapes=[list(np.shape(a)) for a in minimal],
            kink_distance=kink_distance(minimal, kinks, position),
            position=_located(shrunk.result, minimal, position),
        ),
    )


#: At most this many failing points are listed as a region.
MAX_POINTS = 8


def region(positions: Any, kinks: Sequence[float]) -> list[str]:
    """Where the confirmed failures lie: the pieces between ``kinks`` (without
    kinks, the signs) that hold them - unless the pieces are no region, and
    then the failing points themselves (``x = 3``): where the failures keep
    landing on the same few points, or where the pieces would cover the
    whole line (a region that is everywhere is none)."""
    points = np.unique(positions)
    listed = [f"x = {p:g}" for p in points[:MAX_POINTS]] + (["..."] if len(points) > MAX_POINTS else [])
    if len(points) < len(positions) and len(points) <= MAX_POINTS:
        return listed
    cuts = sorted(float(k) for k in kinks) if len(kinks) else [0.0]
    pieces = _pieces(positions, cuts)
    if sum(not p.startswith("x = ") for p in pieces) == len(cuts) + 1:
        return listed
    return pieces


def _pieces(positions: Any, kinks: Sequence[float]) -> list[str]:
    """The pieces between kinks that hold the failing positions, e.g. ["x < -3", "x > 3"]."""
    ks = sorted(float(k) for k in kinks)
    edges = [-np.inf, *ks, np.inf]
    out = []
    for lo, hi in zip(edges[:-1], edges[1:]):
        if np.any((positions > lo) & (positions < hi)):
            out.append(f"x > {lo:g}" if hi == np.inf else f"x < {hi:g}" if lo == -np.inf else f"{lo:g} < x < {hi:g}")
    out += [f"x = {k:g}" for k in ks if np.any(positions == k)]
    return out
