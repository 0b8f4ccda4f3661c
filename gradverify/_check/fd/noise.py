"""Wider noise tables: F on nine points of a spacing many steps wide, the
noise they show, and the slope error that noise can cause."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .. import tolerance as tol, xp as _xp
from .blocks import blockwise
from .records import Array
from .stencil import D4_NOISE, OFFSETS, difference, difference_noise, values_at

__all__ = ["WIDE_SPACINGS", "WIDE_SPAN", "WideTable", "wide_table", "wide_table_fits", "combination"]


#: Spacings of the wider noise tables, in units of the step h, tried one
#: after the other while AD still disagrees; their nine points span 8
#: spacings, at most WIDE_SPAN of the input's scale (2^-2: far enough to see
#: a quantised tail's steps even where the input itself is 0 and the function
#: works at another argument's scale; the sixth difference of a smooth
#: function at that spacing still tilts a slope by only ~1e-8 of its sixth
#: derivative, far below a bug).
WIDE_SPACINGS = (4.0, 64.0, 1024.0, 8192.0)


WIDE_SPAN = 2.0**-2


_D6_NOISE = difference_noise(6)


@dataclass
class WideTable:
    """F on nine points of spacing d (t = k d, k = -4..4) and, once
    ``measure`` has run, the noise sigma they show per element and the slope
    error that noise can cause over d (its tilt)."""

    d: float
    f: dict[int, Array]
    sigma: Array | None = None
    tilt: Array | None = None

    def measure(self) -> None:
        """sigma and the tilt, from the points (the table's arithmetic: a few
        dozen passes over the vector, asked for only where noise of the most
        a rounding artifact can have would explain something). A noise of
        size sigma seen at spacing d varies over about d, so it tilts a slope
        by about sigma / d: at the step's own spacing h/4 this is the usual
        6 sigma / h of the estimate, 1.5 sigma / d. sigma is the smaller of the
        fourth- and sixth-difference estimates: noise gives both the same
        value, a smooth function's curvature shows in the fourth far more than
        in the sixth."""
        f = self.f
        with _xp.quiet():
            self.sigma, self.tilt = blockwise(
                _wide_block, _xp.flat(f[0]), tuple(_xp.flat(f[k]) for k in range(-4, 5)), self.d
            )


def wide_table_fits(h: float, level: int) -> bool:
    """Whether the ``level``-th wider table fits within WIDE_SPAN at step h."""
    return level < len(WIDE_SPACINGS) and 8 * WIDE_SPACINGS[level] * h <= WIDE_SPAN


def wide_table(F: Callable[[float], Array], f0: Array, h: float, level: int) -> WideTable | None:
    """The ``level``-th wider table's points (None when it does not fit); its
    noise is measured by ``WideTable.measure``."""
    if not wide_table_fits(h, level):
        return None
    d = WIDE_SPACINGS[level] * h
    f = dict(zip(OFFSETS, values_at(F, [k * d for k in OFFSETS])))
    f[0] = f0
    return WideTable(d, f)


def _wide_block(fs: tuple[Array, ...], d: float) -> tuple[Array, Array]:
    """A wide table's noise sigma and the tilt it can cause, from F at t = k d,
    k = -4..4 (see stencil's estimate block; in place on two temporaries per block)."""
    f = dict(zip(range(-4, 5), fs))
    xp = _xp.ns(*fs)
    m = tuple(fs[0].shape)[0]
    mutable = not _xp.immutable(fs[0])
    acc, tmp = (_xp.empty(m, fs[0]), _xp.empty(m, fs[0])) if mutable else (None, None)
    d4 = d6 = None
    for j in range(-4, 1):
        w = _xp.iabs(combination(f, j, difference(4), acc, tmp))
        d4 = _xp.copy(w) if d4 is None else _xp.imaximum(d4, w)
    for j in range(-4, -1):
        w = _xp.iabs(combination(f, j, difference(6), acc, tmp))
        d6 = _xp.copy(w) if d6 is None else _xp.imaximum(d6, w)
    d4 /= D4_NOISE
    d6 /= _D6_NOISE
    sigma = _xp.iminimum(d4, d6)
    sigma = xp.where(_xp.finite(sigma), sigma, 0.0)
    return sigma, sigma * (tol.NOISE_SAFETY * 1.5 / d)


def combination(f: dict[int, Array], j: int, c: tuple[int, ...], out: Array | None, tmp: Array | None) -> Array:
    """f[j] + c1 f[j+1] + c2 f[j+2] + ..., added left to right as the written
    expression is (c0 = 1), into ``out`` with ``tmp`` for the products where given."""
    term = f[j + 1] if abs(c[1]) == 1 else _xp.mul(f[j + 1], float(abs(c[1])), tmp)
    acc = _xp.sub(f[j], term, out) if c[1] < 0 else _xp.add(f[j], term, out)
    for k in range(2, len(c)):
        term = f[j + k] if abs(c[k]) == 1 else _xp.mul(f[j + k], float(abs(c[k])), tmp)
        if c[k] < 0:
            acc -= term
        else:
            acc += term
    return acc
