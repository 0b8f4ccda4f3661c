"""``gv.check``: cross-check forward mode, reverse mode and finite differences.

The check runs as stages, each a module with a typed result (see
docs/how-a-check-works.md): the primal on copies, for mutation
(``primal.evaluate``; again for nondeterminism, ``primal.repeat``: at once on
small inputs, after the comparisons on large ones and only where they leave
doubt, see ``tiers``) -> the oracle's
precision, float64 when fn accepts it (``primal.choose``) -> the probes,
directions u and cotangents v (``probes``) -> JVP J u and VJP J^T v
(``modes``) -> the FD oracle with fn's noise measured and kinks told apart
(``oracle``, ``fd``) -> the comparisons JVP/FD, VJP/FD, JVP/VJP and low
precision/float64 (``compare``, ``lowprecision``), a disagreement put to the
``excuses`` first and a surviving one localised (``locate``) -> findings
(``findings``). ``order=2`` (or any N) checks the derivatives of the JVP and VJP the
same way, with the same options.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import _observe
from .._errors import ArgumentTypeError, GradientError, ModeUnavailable, explain
from .._result import ERROR, WARNING, ArraySummary, CheckResult, Finding, Kind, second_order_mode
from .._rule import Rule
from ..backends import Backend, backend_of
from . import batched as _batched, modes as _modes, primal as _primal, probes as _probes, structure as _structure, xp
from .bounds import Bounds
from .calls import CallFailed, Unshaped
from .compare import Comparisons
from .context import Context, Options
from .evaluate import Evaluator, derivative_fn
from .findings import Closeness, Findings
from .keywords import keywords_checked, options_checked
from .known import said_known
from .missing import missing_rules as _missing_rules
from .modes import AD
from .oracle import Oracle, first_points
from .primal import Primal, summaries
from .probes import FULL_MAX_IN, FULL_MAX_OUT, Probes
from .reproduce import reproducer
from .singular import resolve as resolve_singular
from .tiers import TIERED, decisive, doubtful
from .unchecked import NOTHING_TO_DIFFERENTIATE, unchecked
from .validate import (
    function_name,
    resolve_wrt,
    validate_arrays,
    validate_fn,
    validate_modes,
    validate_options,
    validate_tolerances,
)
from .views.base import Composed, Layer, View, compose
from .views.complex import Complex
from .views.held import Held
from .views.models import MODEL, model_of, not_arguments
from .views.sparse import Sparse
from .views.tree import Tree, TreeOutput, trees_refused

__all__ = ["FULL_MAX_IN", "FULL_MAX_OUT", "assert_gradients", "check", "run"]


@keywords_checked("gv.check()")
def check(
    fn: Callable[..., Any],
    *args: Any,
    wrt: int | Sequence[int] | None = None,
    order: int = 1,
    seed: int = 0,
    rtol: float | None = None,
    atol: float | None = None,
    full: bool | None = None,
    directions: int | None = None,
    name: str | None = None,
    vectorise: bool = True,
    batched: bool = False,
    allow_unchecked: bool = False,
    suite_tol: tuple[float, float] | None = None,
    nondet_tol: float = 0.0,
    modes: Sequence[str] | None = None,
) -> CheckResult:
    """Check the derivatives of ``fn`` at ``args``: forward mode (JVP), reverse
    mode (VJP) and finite differences (FD) cross-checked, within bounds from a
    rounding model and fn's measured noise; a kink or a jump is inconclusive,
    never a failure.

    Args:
        fn: a function of positional arrays of one backend (numpy, torch or
            jax) returning one array; a torch ``autograd.Function``'s
            ``apply``, a ``jax.custom_jvp``/``custom_vjp``, or a
            :class:`gradverify.Rule` (numpy functions with hand-written rules).
        *args: the point: arrays of that backend (real or complex; integer
            and bool arrays are constants).
        wrt: the positional arguments to differentiate, an int or a
            sequence of ints (default: every floating one).
        order: 1; 2 also checks the derivatives of the JVP and the VJP; N
            checks theirs to order N - 1 (2^N - 1 first-order checks in all).
        seed: fixes the random directions and cotangents.
        rtol: replaces the rounding model for AD values, relative to |AD|
            (the finite-difference error estimate is always added).
        atol: replaces the rounding model for AD values, absolute.
        full: True forces the full Jacobian, False forbids it (default: the
            full Jacobian on small inputs, random directions otherwise).
        directions: how many random directions (and cotangents) a
            directional check takes; None (the default) takes one, and two
            where the first leaves doubt (it passed, but not decisively: see
            docs/verdicts.md, "Guards that run on doubt").
        name: the function's name in the report (default: its ``__name__``).
        vectorise: a full Jacobian's columns and rows from one vmap call per
            mode, and fn at its finite differences' points from one more,
            where fn allows (a failure is always confirmed with plain calls);
            False asks one at a time.
        batched: also run the JVP and VJP under the backend's vmap over a
            batch of points near ``args`` and compare each member with its
            plain derivative (torch and jax; docs/api.md, "Batched
            derivatives").
        allow_unchecked: a check that compared no derivative (no mode could
            be taken, or the point gave nothing to compare) is a failure with
            a ``nothing_checked`` error; True makes it a warning (an audit of
            an operator documented to have no derivative).
        suite_tol: ``(atol, rtol)`` of a suite migrated from another checker:
            an AD value within ``atol + rtol * |FD|`` of finite differences
            is never a mismatch, even beyond gradverify's bound (a warning
            says where the suite's tolerance decided); one beyond both is
            (docs/migrating.md, "Tolerances").
        nondet_tol: two evaluations of fn at the point that differ by at
            most this are a nondeterminism warning, not an error.
        modes: the modes to check, among "JVP" and "VJP" (at ``order`` 2
            also their derivatives' modes: "JVP of VJP", "VJP of VJP", "JVP
            of JVP", "VJP of JVP"; and so on at higher orders). A mode left
            out is never called and is said "not asked" in the report (None,
            the default: every mode fn has).

    Returns:
        A :class:`gradverify.CheckResult`: ``ok`` is False iff an error-level
        finding was made; ``findings`` name the pair that disagrees, the
        element, both values and the bound; ``print(result)`` is the report.

    Raises:
        ArgumentTypeError: fn is not callable, or an argument is not an
            array of a supported backend (or mixes backends).
        ArgumentValueError: an option is out of range, or an argument is
            empty. (Non-finite entries are held fixed and the finite ones
            checked; sparse arguments are checked as their specified values.)

    Example:
        >>> import numpy as np, gradverify as gv
        >>> sq = gv.Rule(lambda x: x * x, jvp=lambda p, t: 2 * p[0] * t[0], vjp=lambda p, g: (2 * p[0] * g,))
        >>> gv.check(sq, np.linspace(-1.0, 1.0, 5)).ok
        True
    """
    validate_fn(fn)
    validate_options(order, seed, rtol, atol, directions, vectorise, batched)
    if not isinstance(allow_unchecked, bool):
        raise ArgumentTypeError(
            explain("allow_unchecked", "True or False", repr(allow_unchecked), "e.g. allow_unchecked=True")
        )
    suite = validate_tolerances(suite_tol, nondet_tol)
    chosen = validate_modes(modes, order)
    asked = {"wrt": wrt, "order": order, "seed": seed, "rtol": rtol, "atol": atol, "full": full}
    k = None if directions is None else int(directions)
    options = Options(int(seed), rtol, atol, full, k, vectorise, batched, suite, float(nondet_tol), chosen)
    with _observe.call(
        "check",
        fn,
        args,
        {**asked, "directions": directions, "name": name, "vectorise": vectorise, "batched": batched}
        | ({"suite_tol": suite, "nondet_tol": nondet_tol} if suite or nondet_tol else {})
        | ({"modes": tuple(sorted(chosen))} if chosen is not None else {}),
    ) as outermost:
        result = said_known(fn, args, unchecked(run(fn, args, wrt, order, name, options), allow_unchecked))
    if outermost:
        _observe.finished("check", result)
    return result


#: The views of the boundary inside the pytrees (see views.base), outermost
#: first: sparse arguments as their values, non-finite entries held,
#: complex numbers as their real parts. Outside them all, ``Tree`` takes
#: pytrees and models to their array leaves (it decides the backend).
VIEWS: tuple[type[View], ...] = (Tree, Sparse, Held, Complex)


def run(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    wrt: Any,
    order: int,
    name: str | None,
    options: Options,
    reach: bool = True,
) -> CheckResult:
    """gv.check of validated arguments, its options whole: the views built
    in their order, the core run on what they hand inward, and its result
    said back through each, innermost first. ``reach``: say which tensors
    fn uses that are not arguments (a derivative of fn checked at a higher
    order does not: fn itself has said it)."""
    label = name or function_name(fn)
    model = model_of(fn)
    outer_fn, outer_args = (model.call, (model.params, *args)) if model is not None else (fn, args)
    outputs: frozenset[str] = frozenset()
    while True:
        layers, views, core_wrt = _boundary(outer_fn, outer_args, outputs, wrt, model, options.seed, order)
        core = compose(outer_fn, views)
        backend = layers[0].backend
        reached: list[Any] | None = [] if reach else None
        result = _check_real(backend, core, layers[-1].args, core_wrt, order, label, options, reached)
        if not isinstance(result, Unshaped):
            break
        if result.kind in outputs or not any(k.takes == result.kind for k in VIEWS):
            raise AssertionError(f"no view takes a {result.kind} output")  # (each kind is taken by one view)
        outputs |= {result.kind}
    built = getattr(core.fn if isinstance(core, Rule) else core, "views", ())
    for view, layer in zip(reversed(built), reversed(layers[: len(built)])):
        result = view.said(result, layer)
    if model is not None:
        result = model.said(result, tuple(args))
    unlisted = not_arguments(fn, reached or ())
    if unlisted is not None:
        result = dataclasses.replace(result, findings=(*result.findings, unlisted))
    return dataclasses.replace(result, reproduce=reproducer(fn, name, args, wrt, order, options))


def _boundary(
    fn: Any, args: tuple[Any, ...], outputs: frozenset[str], wrt: Any, model: Any, seed: int, order: int
) -> tuple[list[Layer], list[View], Any]:
    """The views fn at args calls for, outermost first, with the layer
    outside each (and the innermost's arguments last), and the core's wrt."""
    names = tuple(
        MODEL if (model is not None and i == 0) else f"arg{i - (model is not None)}" for i in range(len(args))
    )
    tree = Tree.build(args, outputs, names, MODEL if model is not None else None, wrt)
    if tree is not None and not tree.args:
        raise ArgumentTypeError(
            explain(
                "gv.check arguments",
                "at least one array among the arguments and their leaves",
                "; ".join(f"{n}: {type(a).__qualname__}" for n, a in zip(names, args)),
                "pass the inputs as numpy arrays, torch tensors or jax arrays (or pytrees of them)",
            )
        )
    backend = backend_of(tree.args if tree is not None else args)
    layers = [Layer(backend, fn, args, seed)]
    views: list[View] = []
    core_wrt = wrt
    if tree is not None:
        tree.backend = backend
        core_wrt = tree.wrt(wrt, backend)
        views.append(tree)
        layers.append(Layer(backend, compose(fn, views), tree.args, seed))
    for kind in VIEWS[1:]:
        view = kind.of(backend, layers[-1].args, outputs)
        if view is None:
            continue
        if isinstance(view, Sparse):
            view.for_order(order)
        views.append(view)
        layers.append(Layer(backend, compose(fn, views), view.args, seed))
    return layers, views, core_wrt


def _check_real(
    backend: Backend,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    wrt: int | Sequence[int] | None,
    order: int,
    label: str,
    options: Options,
    reached: list[Any] | None = None,
) -> CheckResult | Unshaped:
    """gv.check of fn on dense, finite, real arguments (``Unshaped`` where
    its output is not one dense real array: the boundary builds a view for it).
    ``reached`` receives the tensors fn's output depends on that are not
    arguments (see Evaluator.reached)."""
    small = sum(xp.size(a) for a in args) <= xp.HOST_MAX
    placed = not small and _placed(backend, args)
    with backend.checking(placed, small, lambda: _own(fn, args)):
        ev = Evaluator(fn, backend, args, (), placed)
        ev.skip = options.left_out()
        ev.asked = validate_arrays(backend, args, ev.values)
        wrt_t = resolve_wrt(wrt, ev.floating, ev.dtypes)
        empty = [i for i in wrt_t if xp.size(ev.values[i]) == 0]  # (nothing to check in them)
        wrt_t = tuple(i for i in wrt_t if i not in empty)
        ev.wrt = wrt_t
        outcome = _run_stages(ev, options, order) if wrt_t else _Outcome([], strategy=NOTHING_TO_DIFFERENTIATE)
        if empty:
            outcome.notes.append("an empty argument has nothing to check in it: held as a constant (see inputs)")
        if not wrt_t:
            outcome.findings.append(
                Finding(Kind.NOTHING_COMPARED, WARNING, "nothing compared: every argument to differentiate is empty")
            )
        if outcome.unshaped is not None:
            return outcome.unshaped
        if reached is not None:
            reached.extend(ev.reached or ())
        missing = _missing_rules(ev, outcome.findings, outcome.modes)
        if missing:
            outcome = _without(ev, options, order, outcome, missing)
        if _reverse_mode_failed(outcome):
            structural = _structure.findings(ev)
            if structural:
                said = {(f.kind, f.argument) for f in structural}
                refused = any(f.kind in (Kind.WRONG_SHAPE, Kind.WRONG_DEVICE) for f in structural)
                kept = [
                    f
                    for f in outcome.findings
                    if not (refused and _structure.ENGINE_REFUSAL in f.message) and (f.kind, f.argument) not in said
                ]
                outcome.findings[:] = structural + kept
        items = [(f"arg{i}", v, d, i in wrt_t) for i, (v, d) in enumerate(zip(ev.values, ev.dtypes))]
        inputs = summaries(items, ev.extremes)
    return CheckResult(
        findings=tuple(outcome.findings),
        function=label,
        backend=backend.name,
        seed=options.seed,
        order=order,
        inputs=inputs,
        output=outcome.output,
        oracle_dtype=outcome.oracle,
        strategy=outcome.strategy,
        modes=dict(outcome.modes),
        evaluations=dict(ev.counts),
        reproduce=options.reproduce(label, ", ".join(f"arg{i}" for i in range(len(args))), wrt, order),
        worst_ratio=outcome.worst_ratio,
        notes=tuple(outcome.notes),
    )


def _run_stages(ev: Evaluator, options: Options, order: int) -> _Outcome:
    outcome = _stages(ev, options, order)
    if outcome.doubt and options.k is None:
        # The first direction passed, but not decisively: the check again
        # with two (the first among them, so nothing it compared is lost).
        ratio, first = outcome.worst_ratio, outcome.findings
        outcome = _stages(ev, options, order, tier=1)
        if not any(f.kind == Kind.NONDETERMINISM for f in outcome.findings):
            # (jitter the first tier's repeat saw is said, whether or not the second's sees it again)
            outcome.findings[:0] = [f for f in first if f.kind == Kind.NONDETERMINISM]
        outcome.notes.append(
            f"one random direction left doubt (a comparison at {ratio:.2g} of its bound, or a disagreement "
            "let pass with a warning): "
            f"{TIERED[1]} were checked"
        )
    if outcome.vectorised and not outcome.ok:
        # A failure is reported from fn and its derivatives as written,
        # one point and one column at a time, never from their vectorised
        # (vmap) form.
        outcome = _stages(ev, dataclasses.replace(options, vectorise=False), order)
    return outcome


def _without(
    ev: Evaluator, options: Options, order: int, outcome: _Outcome, missing: dict[str, dict[int, str]]
) -> _Outcome:
    """The check again on the arguments every failed mode has a rule for,
    the others said to be without one; where none is left, the failed modes
    are unavailable and nothing else changes."""
    wrt = ev.wrt
    lacking = sorted({i for args in missing.values() for i in args})
    rest = tuple(i for i in wrt if i not in lacking)
    if rest:
        ev.wrt = rest
        try:
            outcome = _run_stages(ev, options, order)
        finally:
            ev.wrt = wrt
        hint = (
            f"the other argument{'s were' if len(rest) > 1 else ' was'} checked; "
            f"wrt={rest[0] if len(rest) == 1 else rest} checks {'them' if len(rest) > 1 else 'it'} alone"
        )
    else:
        # (the exceptions said in the framework's words below)
        words = {w.partition(": ")[2] for args in missing.values() for w in args.values()}
        outcome.findings = [
            f for f in outcome.findings if not (f.kind == Kind.EXCEPTION and any(f.message.endswith(w) for w in words))
        ]
        for mode in missing:
            outcome.modes[mode] = _modes.UNAVAILABLE
        hint = "no argument has one: nothing was compared"
    for k, (mode, args) in enumerate(missing.items()):
        names = ", ".join(str(i) for i in args)
        words = "; ".join(sorted(set(args.values())))
        outcome.findings.insert(
            k,
            Finding(
                kind=Kind.MODE_UNAVAILABLE,
                level=WARNING,
                message=f"{mode} is unavailable with respect to argument{'s' if len(args) > 1 else ''} {names}: "
                f"no derivative rule ({words}); {hint}",
                pair=(mode, "-"),
                argument=next(iter(args)) if len(args) == 1 else None,
            ),
        )
    return outcome


def _reverse_mode_failed(outcome: _Outcome) -> bool:
    """Whether reverse mode raised or disagreed (its rules' structure is then asked)."""
    if outcome.modes.get("VJP") == _modes.FAILED:
        return True
    return any(f.level == ERROR and f.pair is not None and "VJP" in f.pair and f.order == 1 for f in outcome.findings)


def _own(fn: Callable[..., Any], args: tuple[Any, ...]) -> tuple[Callable[..., Any] | None, tuple[Any, ...]]:
    """fn as the caller wrote it, and its arguments, where fn is seen through
    views (None where they cannot be undone: the check will say why)."""
    try:
        return (fn.fn, tuple(fn.inputs(args))) if isinstance(fn, Composed) else (fn, args)
    except Exception:
        return None, ()


def _placed(backend: Backend, args: tuple[Any, ...]) -> bool:
    """Whether the check on large arguments works on their device (see xp)."""
    return backend.name != "numpy" and not backend.read_in_place(args) and backend.float64_on_device(args) is None


def assert_gradients(fn: Callable[..., Any], *args: Any, **options: Any) -> CheckResult:
    """``check`` that raises ``GradientError`` (an AssertionError) on failure."""
    options_checked("gv.assert_gradients()", options, (), fn, check)
    result = check(fn, *args, **options)
    if not result.ok:
        raise GradientError(result)
    return result


@dataclass
class _Outcome:
    findings: list[Finding]
    output: ArraySummary | None = None
    oracle: str | None = None
    strategy: str = "not run"
    modes: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    worst_ratio: float = 0.0
    vectorised: bool = False
    unshaped: Unshaped | None = None  # fn's output needs a view first
    doubt: bool = False  # a directional check that passed, but not decisively

    @property
    def ok(self) -> bool:
        return not any(f.level == ERROR for f in self.findings)


def _stages(ev: Evaluator, options: Options, order: int, tier: int = 0) -> _Outcome:
    """primal -> precision -> probes -> modes -> oracle -> comparisons (with
    localisation) -> second order; each stage's findings go to ``report``.
    ``tier``: which of TIERED's direction counts a check of the default
    ``directions`` takes (its derivatives' checks are tiered afresh)."""
    tiered = options.k is None
    report = Findings()
    outcome = _Outcome(report.items)
    closeness = Closeness()
    oracle: Oracle | None = None
    try:
        primal = _primal.evaluate(ev, report)
        if primal is None:
            return outcome
        if trees_refused(ev.fn, primal):
            raise TreeOutput
        if isinstance(primal, Unshaped):
            outcome.unshaped = primal
            return outcome
        outcome.output = primal.summary
        # The second evaluation at the point is a guard: a full Jacobian
        # (small inputs, cheap) always takes it; a directional check only
        # where the derivatives leave doubt (see tiers.decisive).
        guarded = _probes.full_jacobian(ev, primal, options.full)
        if guarded:
            _primal.repeat(ev, primal, report, options.nondet_tol)
        if not (primal.all_finite and xp.size(primal.values)) and not xp.any_(primal.finite):
            # ok (no error was found) but inconclusive, and said so in the verdict line
            empty = xp.size(primal.values) == 0
            report.add(
                Kind.NOTHING_COMPARED,
                WARNING,
                "nothing compared: fn's output is "
                + ("empty" if empty else "NaN or inf at every element")
                + "; no derivative was checked (check fn at another point)",
            )
            return outcome
        precision = _primal.choose(ev, primal)
        outcome.oracle = precision.name
        outcome.notes = list(precision.notes)
        k = TIERED[tier] if tiered else options.k
        probes = _probes.choose(ev, primal, precision, seed=options.seed, k=k, full=options.full)
        outcome.strategy = probes.strategy
        outcome.notes += _primal.resolution(precision, probes.strategy)
        coarse = tiered and tier == 0 and not probes.full
        ctx = Context(ev, primal, precision, probes, options, report, closeness, coarse)
        ad = AD(ctx)
        outcome.modes = ad.status
        try:
            oracle = Oracle(ctx)
            modes = _modes.run(ad, probes, lambda: first_points(oracle))  # (one read for both)
            bounds = Bounds(oracle, modes, ev.dtypes, options.rtol, options.atol)
            oracle.first_order(modes.jvps, bounds.jvp)
            modes, bounds = resolve_singular(ctx, ad, oracle, modes, bounds)
            ad.status["FD"] = oracle.label
            Comparisons(ctx, ad, oracle, modes, bounds).run()
            if not guarded and not decisive(report, closeness, oracle):
                _primal.repeat(ev, primal, report, options.nondet_tol)
                report.items.sort(key=lambda f: f.kind != Kind.NONDETERMINISM)  # (said first, as it explains)
                outcome.doubt = doubtful(report, closeness)
                if outcome.doubt and tiered and tier == 0:
                    return outcome  # (checked again with two directions, the rest with them)
            if options.batched:
                _batched.run(ctx, ad)
            if not modes.jvps and not modes.vjps:
                ad.status.setdefault("JVP", _modes.UNAVAILABLE)
                ad.status.setdefault("VJP", _modes.UNAVAILABLE)
            if order >= 2:
                _higher_order(ev, options, primal, probes, ad, report, order)
        finally:
            outcome.notes += ad.notes + (oracle.notes if oracle is not None else [])
            outcome.vectorised = ad.vectorised or (oracle is not None and oracle.batched)
    except CallFailed as e:
        report.exception(e)
    finally:
        if oracle is not None:
            oracle.close()  # (its references' measure() hold fn and the point)
        outcome.worst_ratio = closeness.worst
    return outcome


# -- second order ---------------------------------------------------------------------
def _higher_order(
    ev: Evaluator, options: Options, primal: Primal, probes: Probes, ad: AD, report: Findings, order: int
) -> None:
    """The derivatives of the VJP x -> J(x)^T v and of the JVP x -> J(x) u,
    checked as functions of x at ``order - 1`` (order 2: their first
    derivatives; order N: theirs up to N - 1, nested as check_grads nests)."""
    status = ad.status
    differentiated = []  # (the modes checked whose derivatives are asked for: each, by default)
    for of in ("JVP", "VJP"):
        if status.get(of) != _modes.CHECKED:
            continue
        if options.derived(of) == frozenset():
            status.update({second_order_mode(m, of): _modes.NOT_ASKED for m in ("JVP", "VJP")})
        else:
            differentiated.append(of)
    if not differentiated:
        return
    blocked = getattr(ev.fn, "higher_order_unavailable", None)  # (a view whose own derivatives stop at one)
    if blocked or (ev.rule is not None and not ev.backend.differentiates):
        # the rules are numpy code: nothing can differentiate them
        for mode in differentiated:
            ad.unavailable(
                f"the derivative of the {mode}",
                blocked
                or f"order {order} differentiates the gv.Rule's {mode.lower()} rule, and {ev.backend.name} has "
                "no automatic differentiation: write the rules with torch or jax operations on torch or jax "
                "arrays, or check the rule itself as a function with rules of its own",
                order=2,
            )
        return
    rng = np.random.default_rng([options.seed, 2])
    # (random magnitudes, not signs alone: a cotangent constant on the outputs
    # makes J(x)^T v vanish wherever the outputs sum to a constant - softmax,
    # a normalization - and a constant tangent J(x) u wherever fn is
    # shift-invariant, and a derivative of 0 checks nothing)
    v = _probes.random_directions(rng, xp.size(primal.values), like=primal.values)
    u = _probes.random_directions(rng, probes.flat.n, like=probes.x)
    derived: list[tuple[str, str, Callable]] = []  # (what, whose derivative, the function)
    with ev.backend.precision(ev.native_precision):
        cot = ev.array(xp.ns(v).reshape(v, primal.shape), ev.originals[0], primal.dtype)
        tans = [ev.array(t, ev.originals[i], ev.dtypes[i]) for t, i in zip(probes.flat.split(u), ev.wrt)]
    for of, label in (("VJP", "the VJP x -> J(x)^T v"), ("JVP", "the JVP x -> J(x) u")):
        if of not in differentiated:
            continue
        try:
            derived.append((label, of, derivative_fn(ev, of.lower(), cot if of == "VJP" else tans)))
        except ModeUnavailable as e:
            ad.unavailable(f"second-order {of}", str(e))
    for label, of, g in derived:
        asked = dataclasses.replace(options, seed=options.seed + 1, modes=options.derived(of))
        sub = run(g, ev.originals, ev.wrt, order - 1, label, asked, reach=False)
        for f in sub.findings:
            if f.kind in (Kind.NONDETERMINISM, Kind.MUTATION):
                continue
            pair = None if f.pair is None else (second_order_mode(f.pair[0], of), f.pair[1])
            message = f"derivative of {label}: {f.message}"
            report.append(Finding(**{**f.__dict__, "order": f.order + 1, "pair": pair, "message": message}))
        for mode, st in sub.modes.items():
            # (a deeper check's own modes: "JVP of VJP" becomes "JVP of VJP of JVP")
            if mode in ("JVP", "VJP", "batched JVP", "batched VJP") or " of " in mode:
                status[second_order_mode(mode, of)] = st
        for key, count in sub.evaluations.items():
            ev.counts[key] += count
