"""The texts of the comparisons' findings, apart from the maths that finds
them: each function takes what a comparison measured and returns the
finding (or adds the oracle's inconclusive ones)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._result import ERROR, INFO, WARNING, Finding, Kind
from . import fd, tolerance as tol, xp as _xp
from .findings import Findings, unravel

if TYPE_CHECKING:  # (the oracle's module does not import this one; a type only)
    from .oracle import Oracle

__all__ = [
    "FORWARD",
    "REVERSE",
    "adjoint_mismatch",
    "fd_bound_reason",
    "fd_mismatch",
    "inconclusive",
    "low_precision",
    "projection_mismatch",
]

#: The modes' names in the texts.
FORWARD, REVERSE = "forward mode", "reverse mode"
#: Said of a VJP-vs-FD projection judged against the rounding model's noise.
MODELLED_NOISE = " (fn's noise at the rounding model)"
#: Said of a full-Jacobian JVP/VJP disagreement finite differences cannot resolve.
BELOW_FD = "within finite differences' resolution {fd_err:.3g}: rounding or a bug below it)"
FD_CANNOT_TELL = "finite differences could not tell which is wrong)"


def name_of(mode: str) -> str:
    return FORWARD if mode == "JVP" else REVERSE


def fd_bound_reason(kink: bool, ad_reason: str, oracle_name: str) -> str:
    """How the bound of an AD value against FD was made."""
    if kink:
        return f"one-sided derivatives (FD in {oracle_name}) with their error bounds + {ad_reason}"
    return (
        f"FD error: Richardson difference x{tol.FD_SAFETY:g} (steps h, h/2, h/4 in {oracle_name}) "
        f"+ fn's measured noise x{tol.NOISE_SAFETY:g} + {ad_reason}"
    )


def fd_mismatch(
    mode: str,
    out_idx: tuple[int, ...],
    arg: int,
    idx: tuple[int, ...],
    ad: float,
    fdv: float,
    bound: float,
    *,
    kink: bool,
    count: str,
    where: str,
    bound_reason: str,
) -> Finding:
    """A mismatch of ``mode`` (JVP or VJP) against FD at one Jacobian element."""
    return Finding(
        kind=Kind.MISMATCH,
        level=ERROR,
        message=f"{name_of(mode)} disagrees with finite differences: d output{list(out_idx)} / d arg{arg}{list(idx)}"
        + (" lies outside the one-sided derivatives at a kink" if kink else "")
        + f" ({count} over the bound)",
        pair=(mode, "FD"),
        argument=arg,
        input_index=idx,
        output_index=out_idx,
        values={mode: float(ad), "FD": float(fdv)},
        error=float(abs(ad - fdv)),
        bound=float(bound),
        bound_reason=bound_reason,
        where=where,
    )


def projection_mismatch(
    pair: tuple[str, str],
    arg: int,
    idx: tuple[int, ...],
    values: dict[str, float],
    located_bound: float,
    *,
    lhs: float,
    rhs: float,
    bound: float,
    modelled: bool,
    user_bounds: bool,
    ad_out: str,
    cotangent: str,
    how: str,
    terms: float | None = None,
    terms_scale: float = 0.0,
    undecided: bool = False,
) -> Finding:
    """A projection <J^T v, u> that disagrees with <v, J u> from FD or from the
    JVP, localised to one element of J^T v (``values``, ``located_bound``);
    ``terms``: the relative rounding of terms as large as the inputs, within
    which a JVP-vs-VJP disagreement is a precision warning, relative to
    ``terms_scale`` (the projection's size, see adjoint._rounding_of_terms);
    ``undecided``: a JVP-vs-VJP disagreement on output elements finite
    differences could not decide, a warning (as a full Jacobian's element
    FD cannot resolve: adjoint_mismatch)."""
    other = "JVP" if pair == ("JVP", "VJP") else "FD"
    proj = (
        f"<J^T v, u> = {lhs:.6g} vs <v, J u> = {rhs:.6g} from "
        + ("JVP" if pair == ("JVP", "VJP") else "FD" + (MODELLED_NOISE if modelled else ""))
        + f" (bound {bound:.3g}: Hoeffding {tol.HOEFFDING_K:g} sigma over random signs)"
    )
    if terms is not None:
        relative = abs(lhs - rhs) / max(terms_scale, abs(lhs), abs(rhs), 1e-300)
        said = (
            f"forward and reverse mode round differently: the adjoint identity holds to {relative:.2g} "
            "relative to the projection's size, "
            f"within the rounding of terms as large as the inputs ({terms:.2g}; a rule that subtracts its inputs "
            f"before exponentiating rounds them to u |x|): (J^T v) at arg{arg}{list(idx)}"
        )
    elif undecided:
        said = (
            "forward and reverse mode disagree (adjoint identity <v, J u> = <J^T v, u>) on output elements where "
            "finite differences cannot decide: rounding of a rule whose terms cancel there, or a bug below what "
            f"finite differences can see (not failed): (J^T v) at arg{arg}{list(idx)}"
        )
    else:
        said = (
            "reverse mode disagrees with finite differences"
            if pair == ("VJP", "FD")
            else "reverse mode disagrees with forward mode (adjoint identity <v, J u> = <J^T v, u>)"
        ) + f": (J^T v) at arg{arg}{list(idx)}"
    return Finding(
        kind=Kind.PRECISION if terms is not None else Kind.MISMATCH,
        level=ERROR if terms is None and not undecided else WARNING,
        message=said,
        pair=pair,
        argument=arg,
        input_index=idx,
        values=values,
        error=float(abs(values["VJP"] - values[other])),
        bound=float(located_bound),
        bound_reason=(
            ("user rtol/atol" if user_bounds else f"AD rounding {tol.ad_rounding(ad_out):g} u")
            + (
                " of both modes, projected on v (the adjoint identity needs no FD)"
                if other == "JVP"
                else ("" if user_bounds else f" + FD error estimate x{tol.FD_SAFETY:g}") + ", projected on v"
            )
        ),
        where=f"{cotangent}; {proj}; {how}",
    )


def adjoint_mismatch(
    out_idx: tuple[int, ...],
    arg: int,
    idx: tuple[int, ...],
    jvp: float,
    vjp: float,
    bound: float,
    *,
    count: int,
    fd_err: float,
    unresolved: bool,
    ad_out: str,
) -> Finding:
    """A full Jacobian's element where forward and reverse mode disagree
    after both agreed with FD: a warning where FD cannot resolve it."""
    return Finding(
        kind=Kind.MISMATCH,
        level=WARNING if unresolved else ERROR,
        message=f"forward and reverse mode disagree: d output{list(out_idx)} / d arg{arg}{list(idx)} "
        f"({count} Jacobian element(s) over the bound; "
        + (BELOW_FD.format(fd_err=fd_err) if unresolved else FD_CANNOT_TELL),
        pair=("JVP", "VJP"),
        argument=arg,
        input_index=idx,
        output_index=out_idx,
        values={"JVP": float(jvp), "VJP": float(vjp)},
        error=float(abs(jvp - vjp)),
        bound=float(bound),
        bound_reason=f"AD rounding {tol.ad_rounding(ad_out):g} u({ad_out}) (the adjoint identity needs no FD)",
        where="full Jacobian",
    )


def low_precision(
    mode: str,
    dtype: str,
    what: str,
    common: dict[str, Any],
    *,
    ratio: float,
    rel: float,
    ulps: float,
    count: int,
    limit: float,
    limit_b: float,
    model_b: float,
    user_bounds: bool,
    fd_decided: bool = True,
) -> Finding:
    """Low-precision AD off its float64 run: beyond the ``dtype`` limit an
    error (that code path computes something else), within it a warning.
    ``fd_decided``: FD decided some element, so the float64 run was judged
    against it (otherwise only against the other mode: said)."""
    name = name_of(mode)
    accepted = (
        "which finite differences accept"
        if fd_decided
        else "which finite differences could not judge (they decided no element)"
    )
    if ratio > 1:
        return Finding(
            kind=Kind.MISMATCH,
            level=ERROR,
            message=f"{name} in {dtype} disagrees with the same {name} in float64, {accepted}: "
            f"{what} off by {rel:.3g} relative, beyond the {dtype} limit: the {dtype} code path computes "
            f"something else ({count} element(s) over the rounding model)",
            bound=limit_b,
            bound_reason=(
                "user atol + rtol x |AD|"
                if user_bounds
                else f"{dtype} limit {limit:g} x (|AD| + max|AD|) + u x the terms"
            ),
            **common,
        )
    return Finding(
        kind=Kind.PRECISION,
        level=WARNING,
        message=f"{name} in {dtype} is off its float64 run by {rel:.3g} relative ({ulps:.3g} ulps of {dtype}) at "
        f"{what}: rounding of the {dtype} computation, beyond the rounding model but within the {dtype} "
        f"limit ({count} element(s)); "
        + (
            "the float64 AD agrees with finite differences"
            if fd_decided
            else "finite differences decided no element to judge the float64 AD by"
        ),
        bound=model_b,
        bound_reason=f"AD rounding {tol.ad_rounding(dtype):g} u({dtype}) x (|AD| + max|AD|)",
        **common,
    )


def inconclusive(oracle: Oracle, report: Findings, adjoint: bool = False) -> None:
    """One inconclusive finding per kind of non-smooth point found, and
    ``nothing_compared`` where finite differences decided no element (saying
    so when the two modes were still compared with each other: ``adjoint``)."""
    probes, primal = oracle.probes, oracle.primal
    if all(r.all_smooth for r in oracle.refs):
        return
    for status, kind, what in (
        (fd.KINK, Kind.NONDIFFERENTIABLE, "non-differentiable point (a kink)"),
        (fd.JUMP, Kind.DISCONTINUITY, "discontinuity (a jump)"),
        (fd.UNRELIABLE, Kind.FD_UNRELIABLE, "finite differences cannot decide"),
    ):
        masks = [(r.status == status) & primal.finite for r in oracle.refs]
        counts = [_xp.count(m) for m in masks]
        if not any(counts):
            continue
        b = next(k for k, c in enumerate(counts) if c)
        i = int(_xp.nonzero(masks[b], limit=1)[0])
        if status == fd.KINK:  # (a kink where several meet, if any: its reason says more)
            b, i = next(
                ((k, j) for k, r in enumerate(oracle.refs) for j in sorted(r.reasons or {}) if bool(masks[k][j])),
                (b, i),
            )
        r = oracle.refs[b]
        where, arg, idx = probes.where(b, i, primal.shape)
        values = {}
        if status == fd.KINK:  # the hull of the two one-sided derivatives (which side is which is not kept)
            values = {
                "lower": float(probes.unscale(b, float(r.lo[i]))),
                "upper": float(probes.unscale(b, float(r.hi[i]))),
            }
        if probes.full:  # (b, i) pairs: Jacobian elements
            count = sum(counts)
        else:  # output elements, whichever direction saw them
            union = masks[0]
            for m in masks[1:]:
                union = union | m
            count = _xp.count(union)
        reason = (r.reasons or {}).get(int(i)) if status == fd.KINK else None
        if status == fd.UNRELIABLE:
            reason = (r.reasons or {}).get(int(i)) or (
                "the estimates did not settle as the step shrank: a feature of fn smaller than the step "
                "(an eps, a period, a jump that is no jump), or noise as large as the slope"
            )
        report.add(
            kind,
            INFO if status == fd.KINK else WARNING,
            f"{what} at {count} element(s), e.g. {where}: inconclusive there; "
            + (
                (
                    "AD values are accepted between the derivatives of the pieces that meet there"
                    if reason
                    else "AD values are accepted between the one-sided derivatives"
                )
                if status == fd.KINK
                else "those elements are not compared"
            ),
            argument=arg,
            input_index=idx,
            output_index=unravel(int(i), primal.shape),
            values=values,
            where=probes.direction_name(b),
            detail=reason,
        )
    if not oracle.decided():
        report.add(
            Kind.NOTHING_COMPARED,
            WARNING,
            "nothing compared: at every element fn jumps, finite differences cannot decide or AD is NaN/inf; "
            + (
                "only forward and reverse mode were compared, with each other (check fn at another point)"
                if adjoint
                else "no derivative was checked (check fn at another point)"
            ),
        )
