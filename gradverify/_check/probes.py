"""The probes of a check: the directions u along which J u is computed (by
forward mode and by finite differences) and the cotangents v for J^T v.

Each input element's step scale is its magnitude, or the rms of its argument
where that is larger (floored so that a step of it stays a normal float64).
AD never sees those scales: a direction is handed to it divided by a power of
two c that brings its largest element to (1/2, 2), and FD runs along c u, so
subnormal, huge and zero inputs give tangents that neither underflow nor
overflow; every comparison is in the units of the normalised u.

Small inputs get the full Jacobian (u = e_j, v = e_i: n JVPs, m VJPs, which
names the exact element); large ones a few random directions: each element
a random sign times a random magnitude in (1, 2), drawn independently, so
that no structured error (two wrong elements of equal size and opposite
effect, a gradient with two entries swapped) cancels in J u or in <J^T v, u>
for a fair share of seeds, as it would with signs alone."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import tolerance as tol, xp as _xp
from .evaluate import Evaluator
from .fd import compiled
from .findings import unravel
from .primal import Precision, Primal

__all__ = [
    "FULL_MAX_IN",
    "FULL_MAX_OUT",
    "Flat",
    "Probes",
    "basis",
    "choose",
    "full_jacobian",
    "power_of_two",
    "random_directions",
    "rms",
    "signs",
]

#: Inputs with at most this many differentiable elements (and outputs with at
#: most FULL_MAX_OUT) get the full Jacobian: n JVPs, m VJPs, 4n evaluations,
#: which is cheap there and names the exact (output, input) pair.
FULL_MAX_IN = 32
FULL_MAX_OUT = 128


@dataclass(frozen=True)
class Flat:
    """The differentiable inputs as one flat vector of n elements."""

    shapes: tuple[tuple[int, ...], ...]
    sizes: tuple[int, ...]
    offsets: tuple[int, ...]
    args: tuple[int, ...]  # positional index of each segment

    @property
    def n(self) -> int:
        return self.offsets[-1] + self.sizes[-1]

    def split(self, flat: Any) -> list[Any]:
        return [flat[o : o + s].reshape(sh) for o, s, sh in zip(self.offsets, self.sizes, self.shapes)]

    def locate(self, j: int) -> tuple[int, tuple[int, ...]]:
        """Flat element j as (positional argument, index into it)."""
        seg = int(np.searchsorted(self.offsets, j, side="right") - 1)
        idx = np.unravel_index(j - self.offsets[seg], self.shapes[seg]) if self.shapes[seg] else ()
        return self.args[seg], tuple(int(k) for k in idx)


@dataclass(frozen=True)
class Probes:
    flat: Flat
    x: Any  # the point, flat float64 (working arrays, see xp)
    #: each argument's floor under its elements' step scales (see raw_scale)
    raw_floors: tuple[float, ...]
    #: each element's scale in u, |u_b| / scale in (1, 2): the full Jacobian's
    #: ones; None along random directions, where it is raw_scale / c
    #: (``element_scale``), kept by no array of its own
    scale: Any
    us: tuple[Any, ...]  # directions (normalised)
    cs: tuple[float, ...]  # FD runs along cs[b] * us[b]
    vs: tuple[Any, ...]  # cotangents (0 on non-finite outputs)
    full: bool
    strategy: str
    seed: int
    slope_scale: float  # |f| over |x|: the slope a derivative formula works at
    inputs_max: float  # the largest input magnitude
    u_tops: tuple[float, ...] = ()  # each direction's largest |u| (directional checks)
    v_tops: tuple[float, ...] = ()  # each cotangent's largest |v| (directional checks)
    #: the inputs below every FD step (below_steps) where there are any,
    #: False where there are none, None where not worked out with the probes
    below: Any = None

    @property
    def raw_scale(self) -> Any:
        """Each element's step scale, max(|x_j|, its argument's floor): made
        when asked for (rarely: a low-precision kink's sides), not held."""
        segs = [self.x[o : o + n] for o, n in zip(self.flat.offsets, self.flat.sizes)]
        return _step_scales(segs, self.raw_floors)

    def raw_at(self, j: int) -> float:
        """Element j's step scale (``raw_scale[j]``, one element read)."""
        seg = int(np.searchsorted(self.flat.offsets, j, side="right") - 1)
        return max(abs(float(self.x[j])), self.raw_floors[seg])

    def v_top(self, a: int | None) -> float:
        """The largest |v_a| (1 for a full Jacobian's e_i; None: of any cotangent)."""
        if not self.v_tops:
            return 1.0
        return max(self.v_tops) if a is None else self.v_tops[a]

    def direction_name(self, b: int) -> str:
        if self.full:
            arg, idx = self.flat.locate(b)
            return f"column for argument {arg} {idx}"
        return f"random direction {b + 1} of {len(self.us)} (seed {self.seed})"

    def where(self, b: int, i: int, out_shape: tuple[int, ...]) -> tuple[str, int | None, tuple[int, ...] | None]:
        """Output element i along direction b, in words, with the input it is for."""
        out_idx = unravel(int(i), out_shape)
        if self.full:
            arg, idx = self.flat.locate(b)
            return f"output {out_idx} w.r.t. argument {arg} {idx} (x = {float(self.x[b]):.17g})", arg, idx
        return f"output {out_idx}", None, None

    def element_scale(self, j: int) -> float:
        """Element j's scale in u (see ``scale``)."""
        return float(self.scale[j]) if self.scale is not None else self.raw_at(j) / self.cs[0]

    def unscale(self, b: int, value: float) -> float:
        """A value along direction b in real units (per unit of the input)."""
        return value / float(self.scale[b]) if self.full else value


def _step_scales(segs: list[Any], floors: list[float] | tuple[float, ...], finest: float | None = None) -> Any:
    """Each element's step scale over the flat arguments ``segs``: max(|x_j|,
    its argument's floor). Given ``finest`` (a step), (the scales, the
    mask below_steps makes with it), |x| taken once for both."""
    xp = _xp.ns(*segs)
    if _xp.immutable(segs[0]):  # (jax: its mask, where asked, made by below_steps)
        raw = [_xp.imaximum(xp.abs(s), f) for s, f in zip(segs, floors)]
        out = _xp.concat(raw) if len(raw) > 1 else raw[0]
        return out if finest is None else (out, None)
    # (|x| of each segment written in place into one array: no copy joins them)
    out = _xp.empty(sum(_xp.size(s) for s in segs), segs[0]) if len(segs) > 1 else xp.abs(segs[0])
    if len(segs) > 1:
        for a, s, _ in _at(segs, floors):
            _xp.absolute(s, out[a : a + _xp.size(s)])
    below = None if finest is None else (out > 0) & (out < finest)
    for a, s, f in _at(segs, floors):
        _xp.imaximum(out[a : a + _xp.size(s)], f)
    return out if finest is None else (out, below)


def _at(segs: list[Any], floors: Any) -> list[tuple[int, Any, float]]:
    """(offset, segment, floor) of each segment of the flat arguments."""
    offsets = np.cumsum([0] + [_xp.size(s) for s in segs[:-1]]).tolist()
    return list(zip(offsets, segs, floors))


def basis(j: int, n: int, like: Any = None) -> Any:
    """e_j of length n, beside ``like`` (numpy when None)."""
    return _xp.put(_xp.zeros(n, np.zeros(0) if like is None else like), np.array([j]), 1.0)


def _bases(n: int, like: Any) -> tuple[Any, ...]:
    """e_0 ... e_{n-1} of length n, beside ``like``: on the host the rows of
    one identity matrix (each row its own memory, none overlapping)."""
    if _xp.on_host(like):
        return tuple(np.eye(n))
    return tuple(basis(j, n, like) for j in range(n))


def full_jacobian(ev: Evaluator, primal: Primal, full: bool | None) -> bool:
    """Whether ``choose`` takes the full Jacobian (the caller's ``full``, else
    small inputs and outputs)."""
    if full is not None:
        return full
    n = sum(_xp.size(ev.values[i]) for i in ev.wrt)
    return n <= FULL_MAX_IN and _xp.size(primal.values) <= FULL_MAX_OUT


def choose(ev: Evaluator, primal: Primal, precision: Precision, *, seed: int, k: int, full: bool | None) -> Probes:
    segs = [_xp.flat(_xp.as64(ev.values[i])) for i in ev.wrt]
    # (the sums of squares validation read, of these very arrays - taken, so
    # that neither they nor a rerun's views of x are held to them)
    summed = [q if a is ev.values[i] else None for i, (a, q) in ((i, ev.squares.pop(i, (None, None))) for i in ev.wrt)]
    sizes = tuple(_xp.size(s) for s in segs)
    offsets = tuple(int(o) for o in np.cumsum((0,) + sizes[:-1]))
    flat = Flat(tuple(tuple(ev.values[i].shape) for i in ev.wrt), sizes, offsets, tuple(ev.wrt))
    # (one argument: x is its working array itself - the Evaluator's own copy,
    # or a view of an immutable array - never written, as the views below)
    x = _xp.concat(segs) if len(segs) > 1 else segs[0]
    xp = _xp.ns(x)
    if len(segs) > 1 and not _xp.immutable(x):
        # (the working arguments, float64 already, become views of x: the
        # inputs held once, not twice; neither is ever written)
        for i, o, size, shape in zip(flat.args, offsets, sizes, flat.shapes):
            if ev.values[i].dtype == x.dtype:
                ev.values[i] = xp.reshape(x[o : o + size], shape)
    floors, tops = [], []
    known = [ev.extremes.get(i) for i in ev.wrt]  # (validation's: the same values)
    seg_tops = [_xp.maxabs_of(*k) for k in known] if None not in known else _xp.absmaxes(*segs)
    # (each segment's rms, from the sums of squares validation read where it
    # did; the point's, where there are several, read with the directions' tops)
    x_top = math.nan if any(math.isnan(t) for t in seg_tops) else max(seg_tops)
    rs = _rmses(segs, seg_tops, summed)
    for r, top in zip(rs, seg_tops):
        floors.append(max(r if r > 0 else 1.0, tol.TINY_SCALE))
        tops.append(max(top, floors[-1]))
    device = all(_xp.device_floating(s) for s in segs)
    if device:  # (on a device its mask of the inputs below every step is made with it: see _tops_and_below)
        raw_scale, below = _step_scales(segs, floors, tol.finest_step(precision.u_oracle))
    else:
        raw_scale, below = _step_scales(segs, floors), None
    n, m = flat.n, _xp.size(precision.f0)
    use_full = full_jacobian(ev, primal, full)
    if use_full:
        # column j along e_j itself: J e_j is the real column
        scale = _xp.full(n, 1.0, x)
        us = _bases(n, x)
        cs = tuple(float(c) for c in _xp.host(raw_scale))
        vs = _bases(m, x)
        strategy = f"full Jacobian ({m}x{n})"
    else:
        rng = np.random.default_rng(seed)
        # (|u| / scale in (1, 2): the largest |u| in (1/2, 2), or below 4
        # where doubling c would overflow, for inputs near the largest float)
        c = power_of_two(max(tops))
        c = 2.0 * c if c < 2.0**1023 else c
        # (drawn in pairs: the first k of them are the same whatever k is)
        pairs = [
            (random_directions(rng, n, raw_scale / c, like=x), random_directions(rng, m, like=x)) for _ in range(k)
        ]
        scale = None  # (the directions hold it: raw_scale / c, not kept)
        us, vs = tuple(u for u, _ in pairs), tuple(v for _, v in pairs)
        cs = (c,) * k
        strategy = f"directional ({k} random direction{'s' if k > 1 else ''}, seed {seed})"
    if not primal.all_finite:
        # non-finite outputs are not checked: give them no weight
        vs = tuple(xp.where(primal.finite, v, 0.0) for v in vs)
    # (each direction's and cotangent's largest, on a device whether an input
    # lies below every FD step, and the point's sum of squares: one read)
    direct = len(segs) > 1 and _xp.device_floating(x) and _summed_as_they_are(x, x_top)
    ends, below, x_squares = _tops_and_below(
        () if use_full else (*us, *vs), x, precision, (x.dot(x),) if direct else (), below
    )
    if len(segs) == 1:
        x_rms = rs[0]
    else:
        x_rms = float(np.sqrt(x_squares[0] / n)) if direct else _rmses([x], [x_top])[0]
    # The slope a derivative formula works at: |f| over |x|. A rule that
    # cancels (1 - tanh^2 near saturation, elu's y + alpha) rounds relative to
    # it, not to its small result; the AD bound allows that.
    f0_scale = precision.f0_scale
    slope_scale = f0_scale / x_rms if x_rms > 0 and np.isfinite(f0_scale) else 0.0
    return Probes(
        flat=flat,
        x=x,
        raw_floors=tuple(floors),
        scale=scale,
        u_tops=tuple(ends[: len(us)]),
        v_tops=tuple(ends[len(us) :]),
        us=us,
        cs=cs,
        vs=vs,
        full=use_full,
        strategy=strategy,
        seed=seed,
        slope_scale=slope_scale,
        inputs_max=math.nan if any(math.isnan(t) for t in seg_tops) else max(seg_tops, default=0.0),
        below=below,
    )


def below_steps(x: Any, precision: Precision) -> Any:
    """The elements of ``x`` (a mask beside it) nearer 0 than any step
    finite differences take (tol.finest_step), yet not 0: every estimate
    along them reads fn on both sides of 0."""
    x = _xp.ns(x).abs(x)
    return (x > 0) & (x < tol.finest_step(precision.u_oracle))


def _tops_and_below(
    arrays: tuple[Any, ...], x: Any, precision: Precision, also: tuple[Any, ...], below: Any = None
) -> tuple[list[float], Any, list[float]]:
    """The largest |.| of each of ``arrays`` (the directions and cotangents),
    on a device ``Probes.below`` (``below``: below_steps(x), made already),
    and the values of the device scalars ``also``, read together."""
    if not arrays or not all(_xp.device_floating(a) for a in arrays):
        return _xp.absmaxes(*arrays), None, _xp.read(*also)
    below = below_steps(x, precision) if below is None else below
    ends, (some, *rest) = _xp.extremes_and(arrays, (_xp.ns(below).any(below), *also))
    return [_xp.maxabs_of(lo, hi) for lo, hi in ends], below if some else False, rest


#: The eight signs (+-1, most significant bit first, as np.unpackbits) of every byte.
_SIGN_TABLE = 1.0 - 2.0 * np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1).astype(np.float64)


def signs(rng: np.random.Generator, n: int, scale: Any = None, *, like: Any = None) -> Any:
    """n random signs (Rademacher) times ``scale``, float64, beside ``like``.
    The same seed gives the same signs on every backend: the bits are drawn on
    the host and cross packed (n/8 bytes), unpacked where ``like`` lives."""
    packed = np.frombuffer(rng.bytes((n + 7) // 8), dtype=np.uint8)
    if like is None or _xp.on_host(like):
        s = np.unpackbits(packed, count=n).astype(np.float64)
        s *= -2.0
        s += 1.0
    else:
        # each byte looks up its eight signs: one pass writes the n of them
        xp = _xp.ns(like)
        b = _xp.like(packed, like, xp.uint8)
        table = _xp.like(_SIGN_TABLE, like, xp.float64)
        s = xp.reshape(table[xp.astype(b, xp.int64)], (-1,))[:n]
    if scale is not None:
        s *= scale  # (our own array: in place where arrays are mutable)
    return s


def random_directions(rng: np.random.Generator, n: int, scale: Any = None, *, like: Any = None) -> Any:
    """n random elements, each a fair random sign times an independent
    magnitude in (1, 2), times ``scale``, float64, beside ``like``. The signs
    keep the Hoeffding bounds of the projections (a sum of sign-weighted
    terms, each magnitude a known weight); the magnitudes keep two equal
    errors from cancelling (with signs alone, e (u_i - u_j) vanishes for half
    the seeds; now for one in 2^16).

    Each element is 16 random bits s (a signed integer): w = (s + 1/2) / 2^15
    lies in (-1, 1), never 0, and the element is w + sign(w) - its sign w's,
    its magnitude 1 + |w| (exact in binary). The same seed gives the same
    elements on every backend: the bits are drawn on the host and cross as
    they are (2 bytes an element); the arithmetic runs where ``like`` lives."""
    drawn = np.frombuffer(rng.bytes(2 * n), dtype="<i2")
    if like is None or _xp.on_host(like):
        # (each element looked up by its bits read unsigned, one pass, as on torch below)
        out = np.take(_ELEMENTS, drawn.view("<u2"))
        if scale is not None:
            out *= scale
        return out
    if _xp.immutable(like):  # (jax: one compiled program, not one per operation)
        return compiled(_device_elements, like)(_xp.like(drawn, like, _xp.ns(like).int16), scale)
    # (torch: each element looked up by its bits read unsigned - one gather,
    # not five passes of arithmetic - in the table of all 2^16 of them,
    # bit for bit the arithmetic's)
    out = _lookup(_ELEMENTS, drawn.view("<u2"), like)
    if scale is not None:
        out *= scale
    return out


def _device_elements(drawn: Any, scale: Any) -> Any:
    xp = _xp.ns(drawn)
    return _elements(xp.astype(drawn, xp.float64), scale)


def _elements(out: Any, scale: Any) -> Any:
    """The directions' elements w + sign(w), w = (s + 1/2) / 2^15, from the
    draws s (float64: ours, in place where arrays are mutable), times ``scale``."""
    out += 0.5
    out *= 2.0**-15
    out += _xp.sign(out)
    if scale is not None:
        out *= scale
    return out


#: Every element random_directions makes, at the index of its 16 bits read unsigned.
_ELEMENTS = _elements(np.arange(1 << 16, dtype="<u2").view("<i2").astype(np.float64), None)

#: (table id, its namespace, device) -> the table placed there, for ``_lookup``
_PLACED: dict[tuple[int, Any, str], Any] = {}


def _lookup(table: np.ndarray, index: np.ndarray, ref: Any) -> Any:
    """``table[index]`` (a float64 host table of at most 2^16 entries, kept
    alive by its owner; ``index`` a host uint16 array) beside ``ref``: the
    indices cross as they are (2 bytes each), the table once per device."""
    xp = _xp.ns(ref)
    key = (id(table), xp, str(_xp.device(ref)))
    if key not in _PLACED:
        _PLACED[key] = xp.asarray(table, dtype=xp.float64, device=_xp.device(ref))
    at = xp.astype(xp.asarray(np.array(index), dtype=xp.uint16, device=_xp.device(ref)), xp.int32)
    table = _PLACED[key]
    if hasattr(table, "index_select"):  # (torch: its own, one pass; the array API's wraps negative indices first)
        return table.index_select(0, at)
    return xp.take(table, at)


def rms(a: Any) -> float:
    """Root mean square without overflow or underflow of the squares."""
    return _rms(a, _xp.absmax(a))


def _rms(a: Any, top: float) -> float:
    """The rms of ``a`` given max |a| = ``top``. On a
    device the squares are summed as they are where neither they nor their
    sum can overflow and the largest is far above the smallest normal (one
    pass); otherwise, and always on the host, ``a`` is scaled by ``top`` first."""
    return _rmses([a], [top])[0]


def _rmses(arrays: list[Any], tops: list[float], known: list[float | None] | None = None) -> list[float]:
    """``_rms`` of each array given its max |a|: the device's sums of
    squares (those not ``known`` already) come to the host in one read."""
    known = known or [None] * len(arrays)
    direct = [k for k, (a, top) in enumerate(zip(arrays, tops)) if _summed_as_they_are(a, top)]
    asked = [k for k in direct if known[k] is None]
    squares = {k: known[k] for k in direct} | dict(zip(asked, _xp.dots([(arrays[k], arrays[k]) for k in asked])))
    out = []
    for k, (a, top) in enumerate(zip(arrays, tops)):
        n = _xp.size(a)
        if k in squares:
            out.append(float(np.sqrt(squares[k] / n)))
        elif top == 0.0 or not np.isfinite(top):
            out.append(top)
        else:
            b = a / top
            out.append(top * float(np.sqrt(_xp.dot(b, b) / n)))
    return out


def _summed_as_they_are(a: Any, top: float) -> bool:
    """Whether ``_rms`` sums a's squares unscaled (see there)."""
    return not _xp.on_host(a) and 1e-140 < top < 1e140 and _xp.size(a) < 2**40


def power_of_two(x: float) -> float:
    """The power of two p with x / p in [1, 2) (x > 0, finite)."""
    return float(np.ldexp(1.0, int(np.frexp(x)[1]) - 1))
