"""Low-precision AD against its own float64 run, which finite differences
have just accepted: within the rounding model it is fine; beyond it but
within the low-precision limit a ``precision`` warning (rounding of the
low-precision run, measured); beyond the limit an error - a low-precision
code path that computes something else.

Only where fn itself computes the same function in both precisions: where
its low-precision output is off its float64 output beyond that limit (eig's
eigenvalues in another order, an SVD's signs, a sort's ties, an argmax),
the two runs differentiate different functions, and their derivatives are
not compared there (a ``precision`` warning says so: inconclusive, not a
bug of the rule)."""

from __future__ import annotations

import functools
from typing import Any

from .._result import WARNING, Kind
from . import tolerance as tol, xp as _xp
from .bounds import Bounds
from .context import Context
from .findings import unravel
from .messages import low_precision
from .modes import AD, Modes
from .worst import PrecisionWorst

__all__ = ["LowPrecision"]


class LowPrecision:
    """The comparison of each low-precision mode with its float64 run."""

    def __init__(self, ctx: Context, ad: AD, modes: Modes, bounds: Bounds, fd_decided: bool = True) -> None:
        self.ctx, self.ad, self.modes, self.bounds = ctx, ad, modes, bounds
        #: whether FD decided any element (the float64 runs were judged against it)
        self.fd_decided = fd_decided

    def compare(self, mode: str) -> None:
        """``mode`` ("JVP" or "VJP") in the arguments' precision against float64."""
        modes, probes, bounds, prec = self.modes, self.ctx.probes, self.bounds, self.ctx.precision
        worst: PrecisionWorst | None = None
        differ = self.differ()
        if differ is not None and (mode == "VJP" or bool(_xp.ns(differ).all(differ))):
            return  # (every cotangent mixes every output: nothing left to compare)
        for key, low, ref, dtype in self._items(mode):
            if dtype not in tol.LOW_PRECISION_LIMIT:
                continue
            xp = _xp.ns(ref)
            if mode == "JVP" and probes.full:
                scale = None if modes.jmax_jvp is None else modes.jmax_jvp * float(probes.scale[key])
            elif mode == "JVP":
                scale = max(_xp.absmax(ref), probes.slope_scale * probes.u_tops[key])
            else:
                scale = (
                    modes.jmax_vjp if probes.full else max(_xp.absmax(ref), probes.slope_scale * probes.v_top(key[0]))
                )
            model = tol.ad_bound(ref, dtype, bounds.rtol, bounds.atol, scale)
            top = _xp.absmax(ref) if scale is None else scale
            effective = prec.float32_as if dtype == "float32" else dtype
            limit = tol.LOW_PRECISION_LIMIT[effective] * (xp.abs(ref) + top) + self.terms_floor(effective)
            diff = xp.abs(low - ref)
            if not _xp.size(diff):
                continue
            if differ is not None:  # (JVP: output elements where the two precisions compute one function)
                diff = xp.where(differ, 0.0, diff)
            if _xp.any_(diff > limit):
                # A point within the low-precision rounding of a kink may take
                # either side's derivative: no error where the float64 AD just
                # beside the point (either way) brackets the low-precision value.
                for side in self.ad.beside(mode, key):
                    gap = xp.maximum(xp.minimum(ref, side) - low, low - xp.maximum(ref, side))
                    diff = xp.where(gap <= model, 0.0, diff)
            with _xp.quiet():
                over_limit = diff / xp.maximum(limit, 1e-300)
                over_model = diff / xp.maximum(model, 1e-300)
            i = _xp.argmax(over_model)
            self.ctx.closeness.note(float(over_limit[i]))
            if float(over_model[i]) <= 1:
                continue
            j = _xp.argmax(over_limit) if float(xp.max(over_limit)) > 1 else i
            candidate = PrecisionWorst(
                float(over_limit[j]),
                float(over_model[j]),
                key,
                j,
                float(low[j]),
                float(ref[j]),
                dtype,
                float(model[j]),
                float(limit[j]),
                _xp.count(diff > model),
            )
            if worst is None or candidate.rank > worst.rank:
                worst = candidate
        if worst is not None:
            self._report(mode, worst)

    @functools.cached_property
    def _differ(self) -> Any:
        primal, prec = self.ctx.primal, self.ctx.precision
        if prec.oracle != "float64" or primal.dtype not in tol.LOW_PRECISION_LIMIT:
            return None
        xp = _xp.ns(primal.values)
        effective = prec.float32_as if primal.dtype == "float32" else primal.dtype
        limit = tol.LOW_PRECISION_LIMIT[effective] * (xp.abs(prec.f0) + prec.f0_scale) + self.terms_floor(effective)
        with _xp.quiet():
            differ = (xp.abs(primal.values - prec.f0) > limit) & primal.finite
        n = _xp.count(differ)
        if not n:
            return None
        i = _xp.argmax(differ)
        self.ctx.report.add(
            Kind.PRECISION,
            WARNING,
            f"fn computes a different function in {primal.dtype} than in float64 at {n} output element(s), e.g. "
            f"output {unravel(i, primal.shape)}: {float(primal.values[i]):.6g} against {float(prec.f0[i]):.6g} "
            "(eigenvalues in another order, an SVD's signs, a sort's ties, an argmax: another code path); the "
            f"{primal.dtype} derivatives are not compared with float64's "
            + ("there" if n < _xp.size(differ) else "at all")
            + " (inconclusive there; the float64 ones were judged against finite differences)",
            output_index=unravel(i, primal.shape),
            values={primal.dtype: float(primal.values[i]), "float64": float(prec.f0[i])},
        )
        return differ

    def differ(self) -> Any:
        """The output elements where fn's low-precision output is off its
        float64 output beyond the low-precision limit (said once, as a
        warning), or None where it computes the same function everywhere."""
        return self._differ

    def _items(self, mode: str) -> list[tuple[Any, Any, Any, str]]:
        """(key, low-precision values, float64 values, dtype) per direction
        (JVP) or per cotangent and argument (VJP)."""
        modes, probes, primal = self.modes, self.ctx.probes, self.ctx.primal
        if mode == "JVP":
            return [(b, modes.low_jvps[b], modes.jvps[b], primal.dtype) for b in sorted(modes.low_jvps)]
        items = []
        for a in sorted(modes.low_vjps):
            for k, (i, lo_p, hi_p) in enumerate(
                zip(probes.flat.args, probes.flat.split(modes.low_vjps[a]), probes.flat.split(modes.vjps[a]))
            ):
                items.append(((a, k), _xp.flat(lo_p), _xp.flat(hi_p), self.bounds.dtypes[i]))
        return items

    def _report(self, mode: str, worst: PrecisionWorst) -> None:
        probes, bounds = self.ctx.probes, self.bounds
        ratio, limit_b, j, dtype = worst.over_limit, worst.limit, worst.index, worst.dtype
        if bounds.user:
            # the caller's rtol/atol are the limit they asked for
            ratio, limit_b = max(ratio, worst.over_model), worst.model
        err = abs(worst.native - worst.float64)
        ulps = err / (tol.unit_roundoff(dtype) * max(abs(worst.float64), 1e-300) * 2)
        rel = err / max(abs(worst.float64), 1e-300)
        if mode == "JVP":
            b = worst.key
            arg, idx = probes.flat.locate(b) if probes.full else (None, None)
            out_idx = unravel(j, self.ctx.primal.shape)
            what = (
                f"d output{list(out_idx)} / d arg{arg}{list(idx)}" if probes.full else f"(J u) at output{list(out_idx)}"
            )
            where = probes.direction_name(b)
        else:
            a, k = worst.key
            arg, idx = probes.flat.locate(probes.flat.offsets[k] + j)
            out_idx = None
            what = f"(J^T v) at arg{arg}{list(idx)}"
            where = f"cotangent v {a + 1}" + (f" (random, seed {probes.seed})" if not probes.full else "")
        common: dict[str, Any] = {
            "pair": (mode, f"{mode} float64"),
            "argument": arg,
            "input_index": idx,
            "output_index": out_idx,
            "values": {f"{mode} {dtype}": worst.native, f"{mode} float64": worst.float64},
            "error": err,
            "where": where,
        }
        effective = self.ctx.precision.float32_as if dtype == "float32" else dtype
        self.ctx.report.keep(
            low_precision(
                mode,
                dtype,
                what,
                common,
                ratio=ratio,
                rel=rel,
                ulps=ulps,
                count=worst.count,
                limit=tol.LOW_PRECISION_LIMIT[effective],
                limit_b=limit_b,
                model_b=worst.model,
                user_bounds=bounds.user,
                fd_decided=self.fd_decided,
            )
        )

    def terms_floor(self, dtype: str) -> float:
        """The absolute rounding a low-precision derivative may carry: u x the
        magnitude of the terms its formula combines, up to ROUNDING_TERMS x the
        largest input, output or 1 (the constants of 1 - tanh^2, 1 + erf).
        Where the derivative itself is tiny (a tail, a cancellation) this, not
        its own size, is its precision. Used only to tell a low-precision run's
        rounding from a low-precision code path that computes something else;
        the float64 run is judged without it."""
        terms = max(self.ctx.probes.inputs_max, self.ctx.precision.f0_scale, 1.0)
        return tol.ROUNDING_TERMS * tol.unit_roundoff(dtype) * terms
