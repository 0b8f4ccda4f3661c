"""``gv.verify``: gv.check over Hypothesis-generated inputs, every failure
shrunk to a minimal case.

The Hypothesis engine does the generating and the shrinking; this module
decides what counts as a failure (an error-level finding of gv.check, so an
input where the check is only inconclusive - a kink, a jump - is not one and
a shrink step onto a kink is rejected as "not the same failure"), steers the
search toward large relative errors (``hypothesis.target``), and writes the
report: the counterexample exactly, an ``@example`` line, a saved ``.npz``,
and how to rerun.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from . import _io, _observe
from ._check.keywords import keyword_names, options_checked
from ._check.pipeline import check
from ._check.unchecked import unchecked
from ._check.validate import validate_fn
from ._io import literal
from ._result import CheckResult, Kind
from ._verify_args import all_refused, refusals, refused, validate, yielded_tuple
from .backends import backend_name_of, compiling
from .backends.trees import flatten

__all__ = [
    "MAX_SHRINKING_SECONDS",
    "VerifyResult",
    "derive_seed",
    "exact_leaves",
    "generated",
    "literal",
    "render_verify",
    "reproducible_generation",
    "verify",
]


#: The default shrink budget, in seconds from the first failure: a failing
#: verify of a check that takes 0.3 s stays under a minute (Hypothesis's own
#: limit, MAX_SHRINKING_SECONDS, is five minutes).
MAX_SHRINKING_SECONDS = 20.0


class _Failed(Exception):
    """Raised inside the property so that Hypothesis shrinks; never escapes."""


@dataclasses.dataclass(frozen=True)
class VerifyResult:
    """What ``gv.verify`` found. ``ok`` is False iff some generated input gave
    an error-level finding; then ``counterexample`` is the shrunk input and
    ``result`` the check there."""

    ok: bool
    counterexample: tuple[Any, ...] | None
    result: CheckResult | None
    seed: int
    examples_run: int
    inconclusive: int
    max_examples: int
    function: str
    backend: str | None
    shrink_steps: int
    saved: str | None  # the .npz of the counterexample
    strategy: str
    worst_ratio: float = 0.0  # the largest error / bound over the passing examples (1 = at the bound)
    # why shrinking stopped before it had finished (the budget that ran out), or None
    shrink_cut: str | None = None
    refused: int = 0  # drawn inputs fn raised one of ``except_`` at (rejected, not examples)

    def to_dict(self) -> dict[str, Any]:
        plain = ("ok", "function", "backend", "seed", "examples_run", "inconclusive", "max_examples", "shrink_steps")
        return {
            **{name: getattr(self, name) for name in plain},
            "worst_ratio": self.worst_ratio,
            "counterexample": None if self.counterexample is None else exact_leaves(self.counterexample),
            "saved": self.saved,
            "result": None if self.result is None else self.result.to_dict(),
            "shrink_cut": self.shrink_cut,
            "refused": self.refused,
        }

    def __str__(self) -> str:
        return render_verify(self)

    def __repr__(self) -> str:
        verdict = "ok" if self.ok else "FAILED"
        return f"<VerifyResult {verdict} {self.function} seed={self.seed} examples={self.examples_run}>"


def verify(
    fn: Callable[..., Any],
    args_strategy: Any,
    *,
    max_examples: int = 100,
    seed: int = 0,
    order: int = 1,
    database: Any = None,
    report_dir: str | os.PathLike[str] | None = None,
    max_shrinks: int | None = None,
    max_shrinking_seconds: float | None = MAX_SHRINKING_SECONDS,
    examples: Sequence[tuple[Any, ...]] = (),
    except_: type[Exception] | tuple[type[Exception], ...] = (),
    **check_options: Any,
) -> VerifyResult:
    """Check ``fn``'s derivatives at inputs drawn from ``args_strategy`` and
    shrink any failure to a minimal counterexample. Same seed, same examples,
    same result.

    Args:
        fn: the function, as for :func:`gradverify.check`.
        args_strategy: a Hypothesis strategy of tuples of positional
            arguments (e.g. ``gradverify.strategies.bias_act_args``).
        max_examples: how many inputs to draw.
        seed: fixes the examples and, through gv.check, the directions.
        order: 1; 2 (or any N) also checks the derivatives of the JVP and VJP.
        database: a Hypothesis example database (default: none).
        report_dir: where a failing counterexample is saved as ``.npz``
            (default: a fresh temporary directory).
        max_shrinks: the most checks shrinking may run after the first
            failure (None: as many as Hypothesis takes).
        max_shrinking_seconds: the longest shrinking may take, from the
            first failure (None: Hypothesis's own limit, minutes). Either
            budget spent, the smallest counterexample found so far is the
            result, and the report says shrinking was cut.
        examples: argument tuples checked first, in order, before any
            generated input (Hypothesis's ``@example``; a failing one is
            reported as it is, unshrunk).
        except_: exception types that mean a drawn input is outside fn's
            contract (as ``hypothesis write --except``): where fn itself
            raises one, at the input or at the points finite differences
            step to beside it, the input is rejected, not judged, and
            counted in ``refused``. The ``examples`` are never rejected.
        **check_options: passed to :func:`gradverify.check` at every
            example: ``wrt``, ``rtol``, ``atol``, ``full``, ``directions``,
            ``name``, ``vectorise``, ``batched``, ``suite_tol``, ``nondet_tol``,
            ``modes``, ``allow_unchecked`` (else compared nothing: fails).

    Returns:
        A :class:`gradverify.VerifyResult`: ``ok``, and on failure the shrunk
        ``counterexample`` with its check (``result``) and the ``.npz``
        (``saved``); ``print(result)`` is the report.

    Raises:
        ArgumentTypeError: fn is not a function, args_strategy no strategy, or an option not gv.check's.
        ArgumentValueError: ``max_examples`` or ``seed`` out of range, or
            fn refused every drawn input (``except_``).

    Example:
        >>> import numpy as np, gradverify as gv
        >>> from hypothesis import strategies as st
        >>> from gradverify.strategies import arrays
        >>> sq = gv.Rule(lambda x: x * x, vjp=lambda p, g: (2.5 * p[0] * g,))  # wrong: 2.5 for 2
        >>> gv.verify(sq, st.tuples(arrays("numpy", shape=(3,))), max_examples=10).ok
        False
    """
    from hypothesis import example as explicit, given, reject, seed as hypothesis_seed
    from hypothesis.errors import Unsatisfiable

    _refuse_misuse(fn, check_options)
    examples = validate(fn, args_strategy, max_examples, seed, examples, max_shrinks, max_shrinking_seconds)
    refusing, given_keys = refusals(except_), {_key(args) for args in examples}
    label = check_options.get("name") or getattr(fn, "__name__", type(fn).__name__)
    state = _State(max_shrinks=max_shrinks, max_seconds=max_shrinking_seconds)

    @_settings(int(max_examples), database)
    @hypothesis_seed(int(seed))
    @given(args_strategy)
    def prop(args: Any) -> None:
        yielded_tuple(args)
        # An input seen failing fails again without a second check, so a
        # nondeterministic fn does not make Hypothesis's replay flaky; over
        # the shrink budget anything else passes unchecked. Every failure is
        # raised here, so that Hypothesis sees one bug.
        over, key = state.failing_seen and state.spent(), _key(args)
        seen = state.failing.get(key)
        if seen is not None:
            state.last = seen
        if seen is not None or (not over and _judge(args)):
            raise _Failed

    for args in reversed(examples):  # (the decorator nearest the test runs last)
        prop = explicit(args)(prop)
    allowed = bool(check_options.pop("allow_unchecked", False))

    def _judge(args: Any) -> bool:
        """Whether fn fails its check at ``args`` (a failure is remembered; see _strict)."""
        res = _strict(check(fn, *args, order=order, seed=int(seed), allow_unchecked=True, **check_options), allowed)
        if refusing and refused(res, refusing) and _key(args) not in given_keys:
            if state.failing_seen:
                state.shrink_steps += 1  # (a shrink step all the same: max_shrinks bounds it)
            else:
                state.refused += 1
            reject()  # (outside fn's contract, at the point or where FD steps to)
        return state.judged(args, res)

    options = {"max_examples": int(max_examples), "seed": int(seed), "order": order, **check_options}
    # one function at shapes that repeat: backends may compile it for the run
    with _observe.call("verify", fn, args_strategy, options) as outermost, reproducible_generation(), compiling():
        try:
            _run(prop)
        except Unsatisfiable:
            if not state.refused:
                raise
            raise all_refused(refusing, state.refused) from None
    result = state.result(label, int(seed), int(max_examples), repr(args_strategy), report_dir)
    result = _none_compared(result, state, allowed)
    if outermost:
        _observe.finished("verify", result)
    return result


#: verify's own keywords (a near miss of one is looked for among them and check's)
_OWN = keyword_names(verify)


def _refuse_misuse(fn: Any, check_options: dict[str, Any]) -> None:
    """fn not a function (an autograd.Function class), or an option check() does not take: said with the fix."""
    validate_fn(fn, "gv.verify")
    options_checked("gv.verify()", check_options, _OWN, fn, check)


def _run(prop: Callable[[], None]) -> None:
    """Run the property; its failure is the state's. An interrupt stays an
    interrupt: Hypothesis may replace a KeyboardInterrupt that lands inside
    its own bookkeeping by an internal error that chains it."""
    try:
        prop()
    except _Failed:
        pass
    except Exception as e:
        cause: BaseException | None = e
        while cause is not None and not isinstance(cause, KeyboardInterrupt):
            cause = cause.__cause__ or cause.__context__
        if cause is not None:
            raise cause from None
        raise


def _none_compared(result: VerifyResult, state: _State, allowed: bool) -> VerifyResult:
    """A passing run in which every example compared nothing is not a pass
    (the last one's check says why), unless ``allowed``."""
    if not result.ok or allowed or state.unchecked is None or state.inconclusive != state.examples:
        return result
    rest = tuple(f for f in state.unchecked.findings if f.kind != Kind.NOTHING_CHECKED)
    said = unchecked(dataclasses.replace(state.unchecked, findings=rest))
    return dataclasses.replace(result, ok=False, result=said, backend=said.backend)


def _strict(res: CheckResult, allowed: bool) -> CheckResult:
    """A check run with allow_unchecked=True, judged as verify judges it: a
    point that gave nothing to compare is inconclusive there (the run is not
    a pass if every point was so); a function with no derivative to compare
    fails at any point (unless ``allowed``)."""
    nothing = res.by_kind(Kind.NOTHING_CHECKED)
    if nothing and not allowed and not res.by_kind(Kind.NOTHING_COMPARED):
        return unchecked(dataclasses.replace(res, findings=tuple(f for f in res.findings if f not in nothing)))
    return res


def _settings(max_examples: int, database: Any) -> Any:
    """Hypothesis's settings for a verify run: quiet, no deadline, no health
    checks (a gradient check is slow by nature), one bug, no blob."""
    from hypothesis import HealthCheck, Phase, Verbosity, settings

    return settings(
        max_examples=max_examples,
        database=database,
        deadline=None,
        derandomize=False,
        phases=(Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink),
        suppress_health_check=list(HealthCheck),
        verbosity=Verbosity.quiet,
        report_multiple_bugs=False,
        print_blob=False,
    )


def _key(args: tuple[Any, ...]) -> bytes:
    """The input's exact value: dtype, shape and bytes of every argument."""
    parts = []
    for a in args:
        v = np.asarray(_io.to_numpy(a))
        parts.append(f"{v.dtype}{v.shape}".encode() + np.ascontiguousarray(v).tobytes())
    return hashlib.sha256(b"|".join(parts)).digest()


def derive_seed(base: int, key: str) -> int:
    """A seed of its own for one test or sweep case, from the base seed and
    the case's stable key (a node id, a case id) only: the same whatever the
    order, process or worker it runs in."""
    return int(hashlib.sha256(f"{base}:{key}".encode()).hexdigest()[:8], 16)


def generated(strategy: Any, seed: int, max_examples: int, body: Callable[[Any], None]) -> None:
    """``body(example)`` on the strategy's examples at ``seed``, in the order
    Hypothesis generates them (unshrunk; no database, no deadline), drawn as
    gv.verify draws (see ``reproducible_generation``)."""
    from hypothesis import HealthCheck, Phase, given, seed as hypothesis_seed, settings

    @settings(
        max_examples=max_examples,
        database=None,
        deadline=None,
        phases=(Phase.generate,),
        suppress_health_check=list(HealthCheck),
    )
    @hypothesis_seed(seed)
    @given(strategy)
    def run(example: Any) -> None:
        body(example)

    with reproducible_generation():
        run()


@contextlib.contextmanager
def reproducible_generation() -> Any:
    """Hypothesis mixes literals found in the source of every loaded local
    module into ~5% of its draws, so one seed drew different examples in a
    process that had imported one more module of ours (found when a test's
    result depended on which test ran before it). gv.verify promises same
    seed, same examples: it draws without those local constants (Hypothesis's
    global ones stay), in a constants cache of its own. Internal Hypothesis
    names, pinned in constraints.txt; without them nothing is changed."""
    try:
        from hypothesis.internal.cache import LRUCache
        from hypothesis.internal.conjecture import providers
    except ImportError:  # pragma: no cover - another Hypothesis layout
        yield
        return
    names = ("_get_local_constants", "CONSTANTS_CACHE", "Constants", "SortedSet")
    if not all(hasattr(providers, n) for n in names):  # pragma: no cover
        yield
        return
    from hypothesis.internal.floats import float_to_int

    empty = providers.Constants(
        integers=providers.SortedSet(),
        floats=providers.SortedSet(key=float_to_int),
        bytes=providers.SortedSet(),
        strings=providers.SortedSet(),
    )
    saved = providers._get_local_constants, providers.CONSTANTS_CACHE
    providers._get_local_constants = lambda: empty
    providers.CONSTANTS_CACHE = LRUCache(1024)
    try:
        yield
    finally:
        providers._get_local_constants, providers.CONSTANTS_CACHE = saved


@dataclasses.dataclass
class _State:
    examples: int = 0
    inconclusive: int = 0
    shrink_steps: int = 0
    failing_seen: bool = False
    last: tuple[tuple[Any, ...], CheckResult] | None = None
    label: str | None = None
    worst_ratio: float = 0.0
    max_shrinks: int | None = None
    max_seconds: float | None = None
    started: float = 0.0  # when the first failure was seen (time.monotonic)
    cut: str | None = None  # which budget stopped shrinking
    # the failing inputs seen (by _key), with their checks
    failing: dict[bytes, tuple[tuple[Any, ...], CheckResult]] = dataclasses.field(default_factory=dict)
    unchecked: CheckResult | None = None  # the last example that compared nothing (inconclusive there)
    refused: int = 0  # drawn inputs fn refused (verify's except_)

    def judged(self, args: tuple[Any, ...], res: CheckResult) -> bool:
        """Note the check ``res`` at ``args``; whether it failed (remembered)."""
        from hypothesis import target

        if res.by_kind(Kind.NOTHING_CHECKED) and res.ok:
            self.unchecked = res
        self.label = res.function
        if self.failing_seen:
            self.shrink_steps += 1
        if res.ok:
            if not self.failing_seen:
                self.examples += 1
                self.inconclusive += bool(res.inconclusive)
            self.worst_ratio = max(self.worst_ratio, float(res.worst_ratio))
            target(float(res.worst_ratio), label="error / bound")
            return False
        if not self.failing_seen:
            self.examples += 1
            self.started = time.monotonic()
        self.failing_seen = True
        self.last = (args, res)
        self.failing[_key(args)] = self.last
        return True

    def spent(self) -> bool:
        """Whether a shrink budget has run out (said once, in ``cut``)."""
        if self.cut is None:
            if self.max_shrinks is not None and self.shrink_steps >= self.max_shrinks:
                self.cut = f"after {self.shrink_steps} step(s): max_shrinks={self.max_shrinks}"
            elif self.max_seconds is not None and time.monotonic() - self.started >= self.max_seconds:
                self.cut = f"after {self.shrink_steps} step(s): max_shrinking_seconds={self.max_seconds:g}"
        return self.cut is not None

    def result(self, label: str, seed: int, max_examples: int, strategy: str, report_dir: Any) -> VerifyResult:
        """The run's result; a failure's counterexample saved in ``report_dir``."""
        label = self.label or label  # the check's own name for fn (e.g. Function.apply's class)
        failed = self.last is not None
        args, res = self.last if self.last is not None else ((), None)
        return VerifyResult(
            ok=not failed,
            counterexample=tuple(args) if failed else None,
            result=res,
            seed=seed,
            examples_run=self.examples,
            inconclusive=self.inconclusive,
            max_examples=max_examples,
            function=label,
            backend=res.backend if res is not None else None,
            shrink_steps=self.shrink_steps if failed else 0,
            saved=save_args(args, label, seed, report_dir) if failed else None,
            strategy=strategy,
            worst_ratio=self.worst_ratio,
            shrink_cut=self.cut if failed else None,
            refused=self.refused,
        )


# -- the counterexample, exactly ----------------------------------------------------------
def exact_leaves(args: tuple[Any, ...]) -> list[dict[str, Any]]:
    """The arguments' array leaves exactly (``_io.exact``), each with its ``name`` (``arg0['w']``)."""
    return [{"name": n, **_io.exact(np.asarray(_io.to_numpy(a)))} for n, a in _leaves(args)]


def _leaves(args: tuple[Any, ...]) -> list[tuple[str, Any]]:
    """The array leaves of the arguments, named by their paths (``arg0['w']``)."""
    out = []
    for i, a in enumerate(args):
        if backend_name_of(a) is not None:
            out.append((f"arg{i}", a))
            continue
        flat = flatten(a)
        out += [(f"arg{i}{p}", leaf) for p, leaf in zip(flat.paths, flat.leaves) if backend_name_of(leaf) is not None]
    return out


def save_args(args: tuple[Any, ...], label: str, seed: int, report_dir: Any) -> str:
    """Write the counterexample to ``<dir>/<label>-seed<seed>.npz`` atomically."""
    directory = Path(tempfile.mkdtemp(prefix="gradverify-")) if report_dir is None else Path(report_dir)
    directory.mkdir(parents=True, exist_ok=True)
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in label) or "fn"
    path = directory / f"{safe}-seed{seed}.npz"
    _io.write_npz(path, [np.asarray(_io.to_numpy(a)) for _, a in _leaves(args)])
    return str(path)


def render_verify(r: VerifyResult) -> str:
    head = (
        f"gradverify.verify {'PASSED' if r.ok else 'FAILED'}: {r.function} - seed {r.seed}, "
        f"{r.examples_run} example(s) of {r.max_examples}"
        + (f", {r.inconclusive} inconclusive (at a kink: not failures)" if r.inconclusive else "")
        + (f", {r.refused} drawn input(s) refused by fn (except_)" if r.refused else "")
    )
    if r.ok:
        return head + "\n  no generated input gave an error-level finding"
    if r.counterexample is None:
        lines = [head, "  no example compared a derivative: not a pass"]
        if r.result is not None:
            lines += ["    " + line for line in str(r.result).splitlines()]
        return "\n".join(lines)
    shrunk = f"; shrunk in {r.shrink_steps} step(s)"
    if r.shrink_cut:
        shrunk += f" - shrinking cut {r.shrink_cut}: the smallest counterexample found by then"
    lines = [head + shrunk, f"  counterexample ({r.backend}):"]
    for name, a in _leaves(tuple(r.counterexample or ())):
        ex = _io.exact(np.asarray(_io.to_numpy(a)))
        shape = "x".join(map(str, ex["shape"])) or "scalar"
        lines.append(f"    {name}: {_io.dtype_name(a)}[{shape}] = {np.asarray(_io.to_numpy(a)).tolist()!r}")
        if ex["hex"] is not None and len(ex["hex"]) <= 16:
            lines.append(f"          exact: {' '.join(ex['hex'])}")
    parts = [literal(a) for a in r.counterexample or ()]
    literals = ", ".join(parts) + ("," if len(parts) == 1 else "")
    lines += [
        "  as a Hypothesis example (paste above the @given test):",
        f"    @example(({literals}))",
        f"  saved: {r.saved}",
        "  rerun:",
        f"    gv.verify(fn, strategy, seed={r.seed}, max_examples={r.max_examples})",
        f"    gv.check(fn, *np.load({r.saved!r}).values())  # as numpy arrays; convert to {r.backend}",
        "  the check at the counterexample:",
    ]
    if r.result is not None:
        lines += ["    " + line for line in str(r.result).splitlines()]
    return "\n".join(lines)
