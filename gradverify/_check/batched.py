"""Batched derivatives: fn's JVP and VJP under vmap, member by member against
their plain values (``gv.check(..., batched=True)``).

Many rules break only under vmap: a ``torch.autograd.Function`` without a
``vmap`` staticmethod or ``generate_vmap_rule``, a ``jax.custom_vjp`` whose
backward pass assumes unbatched shapes, a rule that reduces over every axis
and so mixes the members of a batch. This stage stacks BATCH members - the
point itself and the point with every element scaled by 1 +- 1/8 at random
(distinct, so that a rule mixing them up shows) - and evaluates the JVP along
a random direction and the VJP for a random cotangent at each member: once
in one call under the backend's vmap over the leading axis, and once member
by member as the rule runs unbatched. Both are the rule's own arithmetic in
fn's own dtypes; they may differ only by rounding (a batched kernel may sum
in another order), which the AD rounding model bounds for each. Beyond that
bound the member's values are a ``mismatch`` between "batched JVP" (or VJP)
and the plain one, an error; a mode that cannot run under vmap is
``mode_unavailable``, a warning in the framework's own words for what is
missing. No finite differences are involved: the first-order checks have
already judged the rule unbatched."""

from __future__ import annotations

from typing import Any

import numpy as np

from .._errors import ModeUnavailable
from .._result import ERROR, WARNING, Kind
from . import probes as _probes, tolerance as tol, xp
from .calls import CallFailed, Derivative
from .context import Context
from .evaluate import Evaluator
from .findings import unravel
from .modes import AD, CHECKED

__all__ = ["BATCH", "SPREAD", "run"]

#: Members of the batch: the point and BATCH - 1 points near it.
BATCH = 3
#: Each element of a member other than the first is the point's times 1 +- SPREAD.
SPREAD = 1.0 / 8.0


def run(ctx: Context, ad: AD) -> None:
    """Check each mode the first-order checks ran (status CHECKED) under vmap;
    its status goes to ``ad.status`` as "batched JVP" / "batched VJP"."""
    ev, primal, probes, options = ctx.ev, ctx.primal, ctx.probes, ctx.options
    rng = np.random.default_rng([options.seed, 3])
    x, flat = probes.x, probes.flat
    members = [x] + [x * (1.0 + SPREAD * _probes.signs(rng, flat.n, like=x)) for _ in range(BATCH - 1)]
    points = [flat.split(m) for m in members]
    n_out = xp.size(primal.values)
    for mode in ("JVP", "VJP"):
        if ad.status.get(mode) != CHECKED:
            continue
        key = f"batched {mode}"
        if mode == "JVP":
            operands = [flat.split(_probes.signs(rng, flat.n, like=x)) for _ in range(BATCH)]
        else:
            operands = [xp.ns(x).reshape(_probes.signs(rng, n_out, like=x), primal.shape) for _ in range(BATCH)]
        try:
            batched = ev.batched(mode, points, operands, primal.dtype)
        except ModeUnavailable as e:
            ad.unavailable(key, str(e))
            continue
        try:
            plain = [_plain(ev, mode, [xp.copy(a) for a in p], o, primal.dtype) for p, o in zip(points, operands)]
        except (CallFailed, ModeUnavailable) as e:
            # (the point's neighbours: fn or its rule may fail there unbatched too)
            ad.unavailable(key, f"the plain {mode} at a batch member failed: {e}")
            continue
        ad.status[key] = CHECKED
        for j, (got, want) in enumerate(zip(batched, plain)):
            if _compare(mode, j, got, want, ctx):
                break  # (one member says it)


def _plain(ev: Evaluator, mode: str, point: list[Any], operand: Any, out_dtype: str) -> list[Derivative]:
    if mode == "JVP":
        return [ev.jvp(operand, None, point)]
    return ev.vjp(operand, out_dtype, None, point)


def _compare(
    mode: str,
    member: int,
    got: Derivative | list[Derivative],
    want: list[Derivative],
    ctx: Context,
) -> bool:
    """Whether member ``member``'s batched values differ from its plain ones
    beyond rounding (then said in the report)."""
    ev, primal, flat, report = ctx.ev, ctx.primal, ctx.probes.flat, ctx.report
    rtol, atol = ctx.options.rtol, ctx.options.atol
    parts = [got] if mode == "JVP" else got
    shapes = [primal.shape] if mode == "JVP" else [tuple(s) for s in flat.shapes]
    values = [(_values(g, s), _values(w, s)) for g, w, s in zip(parts, want, shapes)]
    with xp.quiet():
        # A derivative formula rounds relative to its terms, not to its result
        # (sigma(x) - y near 0 cancels terms of about 1): as in the
        # first-order bounds, the scale is the largest element of the whole
        # derivative (every argument's part) and no less than fn's own slope.
        scale = max([ctx.probes.slope_scale] + [max(xp.fmax(a), xp.fmax(b)) for a, b in values])
        # A vmapped kernel may be another approximation (jax's tanh under vmap
        # is off the scalar one by tens of ulps), which a rule that cancels
        # amplifies (0.5 (1 + tanh u) in gelu's tail: terms of 1, a result of
        # 1e-5). Beyond the model but within what rounding of fn's terms can
        # make (the terms at most its inputs and values, over the inputs'
        # scale, as the finite differences' plausibility test has them) the
        # difference is a precision warning; beyond that, an error.
        x_rms = _probes.rms(ctx.probes.x)
        terms = max(ctx.precision.f0_scale, ctx.probes.inputs_max) / x_rms if x_rms > 0 else 0.0
        terms = max(scale, terms if np.isfinite(terms) else 0.0)
    for q, (a, b) in enumerate(values):
        if mode == "JVP":
            shape, dtype, argument = primal.shape, primal.dtype, None
        else:
            i = ev.wrt[q]
            shape, dtype, argument = shapes[q], ev.dtypes[i], i
        with xp.quiet():
            bound = tol.ad_bound(b, dtype, rtol, atol, scale) + tol.ad_bound(a, dtype, rtol, atol, scale)
            error = xp.host(xp.ns(a).abs(a - b))
            same = (a == b) | (np.isnan(a) & np.isnan(b))
            bad = ~same & ~(error <= bound)
            if bad.any() and rtol is None and atol is None:
                limit = tol.ad_bound(b, dtype, None, None, terms) + tol.ad_bound(a, dtype, None, None, terms)
                within = bad & (error <= limit)
                bad = bad & ~within
                if within.any():
                    k = int(np.argmax(np.where(within, error / limit, -1.0)))
                    report.add(
                        Kind.PRECISION,
                        WARNING,
                        **_member(mode, member, argument, unravel(k, shape), a[k], b[k], error[k], bound[k], dtype),
                        message=f"batched {mode}: member {member} of a batch of {BATCH} is off its plain {mode} "
                        f"beyond the rounding model but within what rounding of fn's terms can make "
                        f"({int(within.sum())} element(s), limit {float(limit[k]):.3g}): a vmapped kernel that "
                        "rounds otherwise, amplified where the rule cancels",
                    )
        if not bad.any():
            continue
        k = int(np.argmax(np.where(bad, np.nan_to_num(error / bound, nan=np.inf, posinf=np.inf), -1.0)))
        index = unravel(k, shape)
        where = f"output {index}" if mode == "JVP" else f"argument {argument} {index}"
        report.add(
            Kind.MISMATCH,
            ERROR,
            **_member(mode, member, argument, index, a[k], b[k], error[k], bound[k], dtype),
            message=f"batched {mode}: member {member} of a batch of {BATCH} differs from its plain {mode} at "
            f"{where}: {float(a[k]):.6g} under vmap, {float(b[k]):.6g} alone ({int(bad.sum())} element(s) beyond "
            "rounding); the rule computes something else under vmap",
        )
        return True
    return False


def _member(
    mode: str,
    member: int,
    argument: int | None,
    index: tuple[int, ...],
    a: float,
    b: float,
    e: float,
    bound: float,
    dtype: str,
) -> dict[str, Any]:
    """The fields of a finding about one element of a batch member."""
    return {
        "pair": (f"batched {mode}", mode),
        "argument": argument,
        "input_index": None if mode == "JVP" else index,
        "output_index": index if mode == "JVP" else None,
        "values": {f"batched {mode}": float(a), mode: float(b)},
        "error": float(e),
        "bound": float(bound),
        "bound_reason": f"the AD rounding model in {dtype}, for each of the two",
        "where": f"batch member {member} of {BATCH}",
    }


def _values(d: Derivative, shape: tuple[int, ...]) -> np.ndarray:
    """A derivative's values on the host, flat (zeros for a None cotangent)."""
    if d.value is None:
        return np.zeros(int(np.prod(shape)))
    return np.ravel(xp.host(d.value)).astype(np.float64)
