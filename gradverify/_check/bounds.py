"""The AD values' rounding bounds (or the caller's rtol/atol), per direction
and per cotangent, as every comparison uses them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from . import tolerance as tol, xp as _xp
from .modes import Modes
from .oracle import Oracle

__all__ = ["Bounds", "host_rows", "one_stack"]


#: A bound of more elements than this is worked out again where it is used,
#: not kept: a few passes over the vector, against a vector of memory held
#: for the rest of the check.
KEEP_BOUNDS = 1 << 16


def one_stack(arrays: list[Any]) -> bool:
    """Whether ``arrays`` (a full Jacobian's columns, or what is compared
    with them) are host arrays of one shape, at most KEEP_BOUNDS elements in
    all: worked out as one array, not one at a time (a full Jacobian the
    caller asked for on large arrays is worked out column by column)."""
    return (
        bool(arrays)
        and all(type(a) is np.ndarray for a in arrays)
        and len({a.shape for a in arrays}) == 1
        and len(arrays) * arrays[0].size <= KEEP_BOUNDS
    )


def host_rows(items: Sequence[Any], m: int, dtype: Any = np.float64) -> np.ndarray:
    """The columns' values (each a number or m of them) as the rows of one
    host array: each row its item, broadcast."""
    out = np.empty((len(items), m), dtype)
    for k, a in enumerate(items):
        out[k] = _xp.host(a)
    return out


class Bounds:
    """The AD values' rounding bounds (or the caller's rtol/atol)."""

    def __init__(self, oracle: Oracle, modes: Modes, dtypes: list[str], rtol: float | None, atol: float | None):
        self.probes, self.modes, self.dtypes = oracle.probes, modes, dtypes
        self.rtol, self.atol = rtol, atol
        self._jvp: dict[int, np.ndarray] = {}
        self._vjp: dict[int, np.ndarray] = {}
        # the scales of bounds not kept (the values' largest magnitude: per direction, per argument)
        self._jvp_scale: dict[int, float] = {}
        self._vjp_scales: dict[int, list[float]] = {}
        self._columns_tried = False  # (a full Jacobian's columns' bounds, all at once: see _columns)

    @property
    def user(self) -> bool:
        return self.rtol is not None or self.atol is not None

    def jvp(self, b: int) -> np.ndarray:
        """Bound of J u_b (that direction's units)."""
        if b in self._jvp:
            return self._jvp[b]
        jv, probes, modes = self.modes.jvps[b], self.probes, self.modes
        if probes.full and modes.jmax_jvp is not None and not self._columns_tried and self._columns():
            return self._jvp[b]
        if probes.full:
            scale = None if modes.jmax_jvp is None else modes.jmax_jvp * probes.scale[b]
        else:
            if b not in self._jvp_scale:
                top = modes.tops("JVP", b, jv)
                self._jvp_scale[b] = max(
                    _xp.absmax(jv) if top is None else top[0], probes.slope_scale * probes.u_tops[b]
                )
            scale = self._jvp_scale[b]
        bound = tol.ad_bound(jv, modes.ad_out, self.rtol, self.atol, scale)
        if _xp.size(bound) <= KEEP_BOUNDS:
            self._jvp[b] = bound
        return bound

    def _columns(self) -> bool:
        """A full Jacobian's columns' bounds, all at once where the columns
        are host arrays of one shape (each row bit for bit ``ad_bound`` of
        its column alone: the same operations, element by element)."""
        jvps, probes, modes = self.modes.jvps, self.probes, self.modes
        self._columns_tried = True  # (once: where it cannot, each bound is worked out as it is used)
        if not one_stack(jvps):
            return False
        scales = np.array([modes.jmax_jvp * probes.scale[b] for b in range(len(jvps))])[:, None]
        rows = tol.ad_bound(np.stack(jvps), modes.ad_out, self.rtol, self.atol, scales)
        self._jvp.update(enumerate(rows))
        return True

    def vjp(self, a: int) -> np.ndarray:
        """Bound of J^T v_a (real units, per input element)."""
        if a in self._vjp:
            return self._vjp[a]
        g = self.modes.vjps[a]
        if a not in self._vjp_scales and not self.probes.full:
            self._vjp_scales[a] = self._scales_of(g, a, self.modes.tops("VJP", a, g))
        bound = self.of_vjp(g, self._vjp_scales.get(a))
        if _xp.size(bound) <= KEEP_BOUNDS:
            self._vjp[a] = bound
        return bound

    def _scales_of(self, g: np.ndarray, a: int | None = None, tops: list[float] | None = None) -> list[float]:
        """Each argument's part of ``g`` (J^T v_a; a None: of some cotangent):
        the scale of its rounding bound (``tops``: the parts' max |.|, read already)."""
        slope = self.probes.slope_scale * self.probes.v_top(a)
        return [max(top, slope) for top in tops or _xp.absmaxes(*self.probes.flat.split(g))]

    def of_vjp(self, g: np.ndarray, scales: list[float] | None = None) -> np.ndarray:
        """Bound of ``g`` (a J^T v, flat over the inputs); ``scales``: its
        arguments' scales where known (see _scales_of)."""
        probes, modes = self.probes, self.modes
        split = probes.flat.split(g)
        if probes.full:
            scales = [modes.jmax_vjp] * len(split)
        elif scales is None:
            scales = self._scales_of(g)
        dtypes = ["float64" if modes.ad64 else self.dtypes[i] for i in probes.flat.args]
        if len(split) > 1 and not self.user and _xp.device_floating(g) and not _xp.immutable(g):
            # (each argument's bound written into its part of one array: no copy joins them)
            out = _xp.empty(_xp.size(g), g)
            for p, d, s, at, size in zip(split, dtypes, scales, probes.flat.offsets, probes.flat.sizes):
                tol.ad_bound(_xp.flat(p), d, self.rtol, self.atol, s, out=out[at : at + size])
            return out
        parts = [tol.ad_bound(p, d, self.rtol, self.atol, s) for p, d, s in zip(split, dtypes, scales)]
        return _xp.concat([_xp.flat(p) for p in parts]) if len(parts) > 1 else _xp.flat(parts[0])

    def of_vjp_rows(self, J: np.ndarray) -> np.ndarray:
        """``of_vjp`` of every row of a full Jacobian J (m, n) at once: the
        same bounds (the scale of a full Jacobian's rows is one number)."""
        probes, modes = self.probes, self.modes
        assert probes.full
        out = np.empty_like(J)
        for off, size, i in zip(probes.flat.offsets, probes.flat.sizes, probes.flat.args):
            dtype = "float64" if modes.ad64 else self.dtypes[i]
            out[:, off : off + size] = tol.ad_bound(J[:, off : off + size], dtype, self.rtol, self.atol, modes.jmax_vjp)
        return out

    def ad_reason(self) -> str:
        if self.user:
            return f"user atol {self.atol or 0:g} + rtol {self.rtol or 0:g} x |AD|"
        ad_out = self.modes.ad_out
        return f"AD rounding {tol.ad_rounding(ad_out):g} u({ad_out}) x (|AD| + max|AD|)"
