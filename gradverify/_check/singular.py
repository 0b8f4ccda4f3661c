"""AD's NaN and inf where fn's output is finite, decided by finite differences.

Forward and reverse mode leave such elements as holes (``AD.holes``: zeros in
their values), and ``resolve`` decides them once the oracle's references
exist:

* Where FD finds no derivative either (its estimates do not settle: the slope
  is unbounded or undefined - sqrt and log at 0, acos at 1, atan2 at the
  origin), fn is not differentiable at the point: inconclusive there, said,
  and not compared.
* A mode mixes the elements of a Jacobian's row (forward mode, J u) or of its
  column (reverse mode, J^T v) with its probe's zeros, and 0 x inf is NaN: a
  hole in the row or column of such a singular element is that product, not
  a fault of its own, and is not compared either.
* AD's inf may be a right derivative beyond the dtype's range where an input
  element lies nearer 0 than any step FD takes (lax.rem's d/dy =
  -trunc(x / y) at the smallest normal y): no step can check it
  (levels.beneath), inconclusive there, said, not compared.
* Any other hole is a finding: AD is NaN/inf where FD finds a finite
  derivative. The mode fails, as one that raised does.

In a full Jacobian the elements left out are set aside in the oracle's
references (fd.ASIDE), with the VJP's elements beside NaN/inf outputs
(``AD.fed``: the same 0 x inf, inside the rule). In a directional check the
projections and adjoint pairs that meet a hole are left out (``AD.apart``)."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from .._result import ERROR, WARNING, Kind
from . import xp as _xp
from .bounds import Bounds
from .context import Context
from .findings import unravel
from .levels import beneath
from .modes import AD, FAILED, Modes
from .oracle import Oracle

__all__ = ["resolve"]


def resolve(ctx: Context, ad: AD, oracle: Oracle, modes: Modes, bounds: Bounds) -> tuple[Modes, Bounds]:
    """``modes`` (and their ``bounds``) without a mode whose NaN/inf FD
    convicts (said); the rest decided and set aside (see the module's
    docstring)."""
    if not ad.holes["JVP"] and not ad.holes["VJP"] and not (ad.fed and ctx.probes.full):
        return modes, bounds
    failed = _full(ctx, ad, oracle) if ctx.probes.full else _directional(ctx, ad, oracle)
    if not failed:
        return modes, bounds
    for mode in failed:
        ad.status[mode] = FAILED
    kept = dataclasses.replace(
        modes,
        jvps=() if "JVP" in failed else modes.jvps,
        vjps=() if "VJP" in failed else modes.vjps,
        low_jvps={} if "JVP" in failed else modes.low_jvps,
        low_vjps={} if "VJP" in failed else modes.low_vjps,
        seen={k: v for k, v in modes.seen.items() if k[0] not in failed},
    )
    return kept, Bounds(oracle, kept, bounds.dtypes, bounds.rtol, bounds.atol)


def _full(ctx: Context, ad: AD, oracle: Oracle) -> set[str]:
    """A full Jacobian's holes, as (row, column) pairs."""
    probes, primal = ctx.probes, ctx.primal
    m, n = _xp.size(primal.values), probes.flat.n
    forward, reverse, fed = (np.zeros((m, n), dtype=bool) for _ in range(3))
    for b, mask in ad.holes["JVP"].items():
        forward[:, b] = _xp.host(mask)
    for a, mask in ad.holes["VJP"].items():
        reverse[a, :] = _xp.host(mask)
    for a, mask in ad.fed.items():
        fed[a, :] = _xp.host(mask)
    finite = np.broadcast_to(_xp.host(primal.finite), (m,))[:, None]
    usable = np.stack([np.broadcast_to(_xp.host(oracle.usable(r)), (m,)) for r in oracle.refs], axis=1)
    holes = (forward | reverse) & finite
    beyond = holes & _steep(ad, m, n)
    singular = holes & ~usable
    undecided = singular | beyond
    excused = holes & (undecided.any(axis=1)[:, None] | undecided.any(axis=0)[None, :])
    failed = set()
    for mode, mask in (("JVP", forward), ("VJP", reverse)):
        wrong = mask & finite & ~excused
        if wrong.any():
            j, i = (int(k[0]) for k in np.nonzero(wrong.T))  # (column-major, as the comparisons look)
            ref = oracle.refs[j]
            raw = ad.raw[mode][j if mode == "JVP" else i]
            ad_value = probes.unscale(j, float(raw[i])) if mode == "JVP" else float(raw[j])
            fd_value = probes.unscale(j, float(np.broadcast_to(_xp.host(ref.value), (m,))[i]))
            _convicted(ctx, mode, i, j, ad_value, fd_value, int(wrong.sum()))
            failed.add(mode)
    aside = excused | fed
    for b in np.flatnonzero(aside.any(axis=0)):
        oracle.refs.set_aside(int(b), _xp.like(aside[:, b], oracle.refs[int(b)].value))
    if excused.any():
        first = undecided if undecided.any() else excused
        j, i = (int(k[0]) for k in np.nonzero(first.T))
        mode = "JVP" if forward[i, j] else "VJP"
        raw = ad.raw[mode][j if mode == "JVP" else i]
        value = probes.unscale(j, float(raw[i])) if mode == "JVP" else float(raw[j])
        where, arg, idx = probes.where(j, i, primal.shape)
        left = f"{int(excused.sum())} Jacobian element(s)"
        why = (beneath(oracle, j, value) if beyond[i, j] else None) or NO_DERIVATIVE
        _singular(ctx, where, mode, value, left, arg, idx, unravel(i, primal.shape), why=why)
    return failed


def _steep(ad: AD, m: int, n: int) -> np.ndarray:
    """The holes steeper than any step can check at an input below every
    step (AD.beyond), as (row, column) pairs."""
    steep = np.zeros((m, n), dtype=bool)
    for b, mask in ad.beyond["JVP"].items():
        steep[:, b] |= _xp.host(mask)
    for a, mask in ad.beyond["VJP"].items():
        steep[a, :] |= _xp.host(mask)
    return steep


def _directional(ctx: Context, ad: AD, oracle: Oracle) -> set[str]:
    """A directional check's holes: J u_b's elements against FD along u_b,
    J^T v_a's first against FD along e_j."""
    probes, primal = ctx.probes, ctx.primal
    directions, cotangents = ad.apart
    failed: set[str] = set()
    near = np.flatnonzero(_xp.host(ad.steep[0])) if ad.steep is not None else np.zeros(0, dtype=int)
    ranged: set[tuple[str, int]] = set()  # left undecided as a derivative beyond the range
    for b, mask in sorted(ad.holes["JVP"].items()):
        ref = oracle.refs[b] if b < len(oracle.refs) else oracle.fd(probes.us[b], 0.0, probes.cs[b])
        decided = mask & primal.finite & oracle.usable(ref)
        steep = ad.beyond["JVP"].get(b)  # (every element is in a random direction's support)
        if steep is not None and _xp.any_(steep):
            ranged.add(("JVP", b))
            decided = decided & ~steep
        if _xp.any_(decided):
            i = int(_xp.nonzero(decided, limit=1)[0])
            value = _xp.ns(ref.value).broadcast_to(ref.value, tuple(mask.shape))[i]
            _convicted(ctx, "JVP", i, None, float(ad.raw["JVP"][b][i]), float(value), _xp.count(decided), b=b)
            failed.add("JVP")
            break
        directions.add(b)
    for a, mask in sorted(ad.holes["VJP"].items()):
        if "VJP" in failed:
            break
        j = int(_xp.nonzero(mask, limit=1)[0])
        value, _, complete = oracle.column(j)
        if a in ad.beyond["VJP"] and bool(ad.beyond["VJP"][a][j]):
            ranged.add(("VJP", a))
        elif complete:  # (a cotangent is 0 on NaN/inf outputs only)
            fd_value = _xp.dot(probes.vs[a], value)
            _convicted(ctx, "VJP", None, j, float(ad.raw["VJP"][a][j]), fd_value, _xp.count(mask), a=a)
            failed.add("VJP")
            break
        cotangents.add(a)
    if (directions or cotangents) and not failed:
        mode = "JVP" if directions else "VJP"
        b = min(directions) if directions else None
        if b is not None:
            i = int(_xp.nonzero(ad.holes["JVP"][b], limit=1)[0])
            value, arg, idx, out = float(ad.raw["JVP"][b][i]), None, None, unravel(i, primal.shape)
            where = f"output {out} along {probes.direction_name(b)}"
        else:
            a = min(cotangents)
            j = int(_xp.nonzero(ad.holes["VJP"][a], limit=1)[0])
            arg, idx = probes.flat.locate(j)
            value, out = float(ad.raw["VJP"][a][j]), None
            where = f"argument {arg} {idx} (x = {float(probes.x[j]):.17g}) with cotangent v {a + 1}"
        ranges = (mode, min(directions or cotangents)) in ranged
        why = NO_DERIVATIVE
        if ranges:
            at, below = probes.flat.locate(int(near[0])), beneath(oracle, int(near[0]), value)
            if below is not None:  # (a NaN hole first: FD's own reason)
                why = f"at argument {at[0]} {at[1]}, {below}"
        left = []
        if directions:
            left.append(f"{len(directions)} of {len(probes.us)} direction(s)")
        if cotangents:
            left.append(f"{len(cotangents)} of {len(probes.vs)} cotangent(s)")
        _singular(ctx, where, mode, value, " and ".join(left), arg, idx, out, projections=True, why=why)
    return failed


#: Why AD's NaN/inf is left undecided where FD's estimates do not settle.
NO_DERIVATIVE = (
    "finite differences find no derivative there either (their estimates do not settle as the step shrinks: "
    "the slope is unbounded or undefined): fn is not differentiable at this point, inconclusive there"
)


def _convicted(
    ctx: Context,
    mode: str,
    i: int | None,
    j: int | None,
    ad_value: float,
    fd_value: float,
    count: int,
    a: int | None = None,
    b: int | None = None,
) -> None:
    """AD's NaN/inf where FD finds a finite derivative: an error."""
    probes, primal = ctx.probes, ctx.primal
    arg, idx = probes.flat.locate(j) if j is not None else (None, None)
    against = f"argument {arg} {idx}" if j is not None and probes.full or mode == "VJP" else "the direction"
    if mode == "JVP":
        out = unravel(i, primal.shape)
        message = (
            f"forward mode returned {ad_value} at output index {out} where the output is finite and finite "
            f"differences find a derivative w.r.t. {against}, FD = {fd_value:.6g} ({count} element(s))"
        )
        values = {"JVP": ad_value, "FD": fd_value, "output": float(primal.values[i])}
        kw: dict[str, Any] = {"output_index": out}
        if b is not None:
            kw["where"] = probes.direction_name(b)
    else:
        message = (
            f"reverse mode returned {ad_value} for argument {arg} at index {idx} while every output is finite, "
            f"and finite differences find a derivative there, FD = {fd_value:.6g} ({count} element(s))"
        )
        values = {"VJP": ad_value, "FD": fd_value}
        kw = {} if i is None else {"output_index": unravel(i, primal.shape)}
        if a is not None:
            kw["where"] = f"cotangent v {a + 1} (random, seed {probes.seed})"
    if arg is not None:
        kw.update(argument=arg, input_index=idx)
    ctx.report.add(Kind.NONFINITE_GRADIENT, ERROR, message, pair=(mode, "FD"), values=values, **kw)


def _singular(
    ctx: Context,
    where: str,
    mode: str,
    value: float,
    left: str,
    arg: int | None,
    idx: tuple[int, ...] | None,
    out: tuple[int, ...] | None,
    projections: bool = False,
    why: str = "",
) -> None:
    """The holes FD cannot decide (``why``: by default it finds no derivative
    there): inconclusive, said."""
    by = {"JVP": "forward mode", "VJP": "reverse mode"}[mode]
    skipped = (
        f"the projections and adjoint pairs of {left} that meet them are not compared"
        if projections
        else f"{left} not compared (in the row or column of such an element a mode's 0 x inf is NaN too)"
    )
    ctx.report.add(
        Kind.NONFINITE_GRADIENT,
        WARNING,
        f"{by} returned {value} at {where}, and {why or NO_DERIVATIVE}; {skipped}",
        pair=(mode, "FD"),
        argument=arg,
        input_index=idx,
        output_index=out,
        values={mode: value},
    )
