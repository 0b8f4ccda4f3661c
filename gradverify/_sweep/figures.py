"""The plots of a failure on a sweep report's page, as inline SVG written
here (no plotting library). Each has ticked, labelled axes, a legend where
it has more than one kind of mark, and a caption saying what to read from it:

* ``svg_worst``: the worst element's derivative as each side of the failing
  comparison computed it, as bars;
* ``svg_fd_vs_step``: |FD(h) - AD| against the step h, log-log;
* ``svg_ad_vs_fd``: the failing output element's Jacobian row by reverse
  mode, forward mode and finite differences, the arguments parted;
* ``svg_jacobian``: the whole Jacobian by both sides of the failing
  comparison and their difference, as heat maps side by side, the elements
  over the bound outlined (after NVIDIA Warp's ``jacobian_plot``).

Every SVG carries a viewBox, so the page can shrink it to a narrow window."""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .probe import ROW_ELEMENTS

__all__ = ["COLOURS", "SIDES", "svg_ad_vs_fd", "svg_fd_vs_step", "svg_jacobian", "svg_worst"]

_e = html.escape

#: Each side of a comparison: its colour and the words a legend or caption gives it.
COLOURS = {"VJP": "#c33", "JVP": "#393", "FD": "#36c"}
_WORDS = {"VJP": "reverse mode", "JVP": "forward mode", "FD": "finite differences"}
SIDES = {name: f"{words} ({name})" for name, words in _WORDS.items()}
_OTHER = "#999"  # (a value of anything else: a batched mode's, fn's output)

_W, _H = 420, 260
_LEFT, _RIGHT, _TOP, _BOTTOM = 64, 16, 12, 44  # the plot area's margins: room for ticks and labels
_LEGEND = 20  # the legend's row, above the plot area


def _dot(colour: str) -> Callable[[float, float], str]:
    return lambda x, y: f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2.5" fill="{colour}"/>'


def _ring(colour: str) -> Callable[[float, float], str]:
    return lambda x, y: f'<circle cx="{x:.1f}" cy="{y:.1f}" r="5" fill="none" stroke="{colour}"/>'


def _cross(colour: str) -> Callable[[float, float], str]:
    return lambda x, y: (
        f'<path d="M{x - 3.5:.1f} {y - 3.5:.1f}L{x + 3.5:.1f} {y + 3.5:.1f}M{x - 3.5:.1f} {y + 3.5:.1f}'
        f'L{x + 3.5:.1f} {y - 3.5:.1f}" stroke="{colour}" stroke-width="1.5"/>'
    )


def _square(colour: str) -> Callable[[float, float], str]:
    return lambda x, y: f'<rect x="{x - 4:.1f}" y="{y - 4:.1f}" width="8" height="8" fill="{colour}"/>'


#: The mark of each side in the per-element plot, drawn in this order (rings
#: under crosses under dots, so that agreeing values show every mark).
MARKS = {"FD": _ring(COLOURS["FD"]), "JVP": _cross(COLOURS["JVP"]), "VJP": _dot(COLOURS["VJP"])}
_MARK_WORDS = {"VJP": "red dots", "JVP": "green crosses", "FD": "blue rings"}  # (the captions' words for them)


def _num(v: Any) -> float:
    """A value as the report holds it (JSON keeps NaN and inf as strings; null: no value)."""
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


def _fmt(v: float) -> str:
    return f"{v:.3g}"


@dataclass(frozen=True)
class Axis:
    """One axis of a plot."""

    span: tuple[float, float]  # the data range drawn
    ticks: list[tuple[float, str]]  # each tick's position (data) and label
    label: str  # what the axis measures


def _span(lo: float, hi: float, pad: float, least: float = 0.0) -> tuple[float, float]:
    """A range to draw ``lo .. hi`` in: widened by ``pad`` of its width, at
    least ``least`` wide (centred), and never degenerate (1 around a single value)."""
    if hi - lo < least:
        mid = (lo + hi) / 2
        return mid - least / 2, mid + least / 2
    if not hi > lo:
        return lo - 1.0, hi + 1.0
    return lo - pad * (hi - lo), hi + pad * (hi - lo)


def _nice_ticks(lo: float, hi: float, most: int = 6) -> list[float]:
    """Round values (1, 2 or 5 times a power of ten apart) within lo .. hi."""
    raw = (hi - lo) / max(most - 1, 1)
    power = 10.0 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.ceil(lo / step) * step
    return [first + k * step for k in range(int((hi - first) / step + 1e-9) + 1)]


def _distinct(values: list[float]) -> list[str]:
    """The values with as few significant digits as keep their labels apart."""
    for digits in range(2, 17):
        labels = [f"{v:.{digits}g}" for v in values]
        if len(set(labels)) == len(labels):
            return labels
    return [repr(v) for v in values]


def _value_ticks(span: tuple[float, float]) -> list[tuple[float, str]]:
    ticks = _nice_ticks(*span)
    return list(zip(ticks, _distinct(ticks)))


def _decades(lo: float, hi: float) -> list[tuple[float, str]]:
    """Tick positions and labels of a log10 axis: every decade (every other
    one past 8), or round values where the axis spans less than two."""
    first, last = math.ceil(lo), math.floor(hi)
    if last - first < 1:
        ticks = _nice_ticks(lo, hi, 4)
        return list(zip(ticks, _distinct([10.0**v for v in ticks])))
    every = 1 if last - first <= 8 else 2
    return [(float(k), f"1e{k}") for k in range(first, last + 1, every)]


def _svg(cls: str, width: float, height: float, label: str, parts: Sequence[str]) -> str:
    return (
        f'<svg class="{cls}" xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" role="img" aria-label="{_e(label)}">{"".join(parts)}</svg>'
    )


def _legend(items: Sequence[tuple[Callable[[float, float], str], str]], x: float, y: float) -> list[str]:
    """A row of marks, each followed by what it stands for (none: no legend)."""
    parts = []
    for glyph, text in items:
        parts.append(glyph(x + 5, y))
        parts.append(f'<text x="{x + 13:.0f}" y="{y + 3.5:.0f}" font-size="10">{_e(text)}</text>')
        x += 13 + 5.8 * len(text) + 16  # (about 5.8 px a character at this size)
    return ['<g class="legend">', *parts, "</g>"] if parts else []


def _figure(
    cls: str,
    x: Axis,
    y: Axis,
    marks: Callable[[Callable[[float], float], Callable[[float], float], float], str],
    caption: str,
    legend: Sequence[tuple[Callable[[float, float], str], str]] = (),
) -> str:
    """A figure: axes with ticks and tick labels, axis labels, a legend above
    the plot area where given, the marks (``marks(sx, sy, top)``: the SVG
    elements, placed through the data-to-pixel maps) and a caption."""
    (x0, x1), (y0, y1) = x.span, y.span
    top = _TOP + (_LEGEND if legend else 0)
    right, bottom = _W - _RIGHT, _H - _BOTTOM

    def sx(v: float) -> float:
        return _LEFT + (v - x0) / (x1 - x0) * (right - _LEFT)

    def sy(v: float) -> float:
        return bottom - (v - y0) / (y1 - y0) * (bottom - top)

    parts = [f'<rect x="{_LEFT}" y="{top}" width="{right - _LEFT}" height="{bottom - top}" fill="none" stroke="#555"/>']
    parts += _legend(legend, _LEFT, _TOP + 6)
    for v, text in x.ticks:
        px = sx(v)
        parts.append(f'<line x1="{px:.1f}" y1="{bottom}" x2="{px:.1f}" y2="{bottom + 5}" stroke="#555"/>')
        parts.append(f'<text x="{px:.1f}" y="{bottom + 17}" text-anchor="middle" font-size="10">{_e(text)}</text>')
    for v, text in y.ticks:
        py = sy(v)
        parts.append(f'<line x1="{_LEFT - 5}" y1="{py:.1f}" x2="{_LEFT}" y2="{py:.1f}" stroke="#555"/>')
        parts.append(f'<line x1="{_LEFT}" y1="{py:.1f}" x2="{right}" y2="{py:.1f}" stroke="#eee"/>')
        parts.append(f'<text x="{_LEFT - 8}" y="{py + 3.5:.1f}" text-anchor="end" font-size="10">{_e(text)}</text>')
    parts.append(marks(sx, sy, top))
    parts.append(
        f'<text x="{(_LEFT + right) / 2:.0f}" y="{_H - 8}" text-anchor="middle" font-size="11">{_e(x.label)}</text>'
    )
    mid = (top + bottom) / 2
    parts.append(
        f'<text x="13" y="{mid:.0f}" font-size="11" text-anchor="middle" '
        f'transform="rotate(-90 13 {mid:.0f})">{_e(y.label)}</text>'
    )
    svg = _svg(cls, _W, _H, f"{y.label} against {x.label}", parts)
    return f'<figure class="plot">{svg}<figcaption>{_e(caption)}</figcaption></figure>'


# -- the worst element --------------------------------------------------------------------------
def _element_text(failure: dict[str, Any]) -> str:
    """The failing element as the check names it: d output[i] / d argK[j]."""
    out, arg, inp = failure.get("output_index"), failure.get("argument"), failure.get("input_index")
    where = "d output" + (f"[{', '.join(map(str, out))}]" if out else "")
    if arg is not None:
        where += f" / d arg{arg}" + (f"[{', '.join(map(str, inp))}]" if inp else "")
    return where


def svg_worst(failure: dict[str, Any]) -> str | None:
    """The worst element's values (AD and its reference) as bars, zero drawn."""
    values = {k: _num(v) for k, v in (failure.get("values") or {}).items()}
    shown = {k: v for k, v in values.items() if math.isfinite(v)}
    if not shown:
        return None
    names = list(shown)
    y = _span(min(0.0, *shown.values()), max(0.0, *shown.values()), 0.1)

    def marks(sx: Any, sy: Any, top: float) -> str:
        out = [
            f'<line x1="{sx(-0.5):.1f}" y1="{sy(0):.1f}" x2="{sx(len(names) - 0.5):.1f}" y2="{sy(0):.1f}" '
            'stroke="#555"/>'
        ]
        for k, name in enumerate(names):
            lo, hi = sorted((sy(0.0), sy(shown[name])))
            out.append(
                f'<rect x="{sx(k - 0.3):.1f}" y="{lo:.1f}" width="{sx(k + 0.3) - sx(k - 0.3):.1f}" '
                f'height="{max(hi - lo, 1.0):.1f}" fill="{COLOURS.get(name, _OTHER)}"/>'
            )
        return "".join(out)

    where = _element_text(failure)
    said = ", ".join(f"{k} {_fmt(v)}" for k, v in shown.items())
    left = [f"{k} = {v}" for k, v in values.items() if k not in shown]
    caption = f"The worst element's derivative, {where}, as each side of the failing comparison computed it: {said}"
    caption += f" (not finite, not drawn: {', '.join(left)})" if left else ""
    if failure.get("error") is not None and failure.get("bound") is not None:
        caption += f"; they differ by {_fmt(_num(failure['error']))}, the bound is {_fmt(_num(failure['bound']))}"
    return _figure(
        "worst",
        Axis((-0.5, len(names) - 0.5), [(float(k), n) for k, n in enumerate(names)], "computed by"),
        Axis(y, _value_ticks(y), where),
        marks,
        caption + ".",
    )


# -- FD against the step ------------------------------------------------------------------------
def svg_fd_vs_step(rows: list[list[float]] | None, ad: str = "AD") -> str | None:
    """|FD(h) - AD| against the step h, log-log (``ad``: which mode AD is): a
    correct rule dips toward rounding; a wrong one levels off at the size of its error."""
    if not rows:
        return None
    pts = [(math.log10(h), math.log10(max(d, 1e-18))) for h, _, d in rows if h > 0 and math.isfinite(d)]
    if len(pts) < 2:
        return None
    x = _span(min(p[0] for p in pts), max(p[0] for p in pts), 0.04)
    # at least a decade: a difference that stays put must look flat, not show its last digits
    y = _span(min(p[1] for p in pts), max(p[1] for p in pts), 0.1, least=1.0)
    colour = COLOURS.get(ad, COLOURS["VJP"])

    def marks(sx: Any, sy: Any, top: float) -> str:
        line = " ".join(f"{sx(a):.1f},{sy(b):.1f}" for a, b in pts)
        dots = "".join(_dot(colour)(sx(a), sy(b)) for a, b in pts)
        return f'<polyline points="{line}" fill="none" stroke="{colour}" stroke-width="1.5"/>{dots}'

    return _figure(
        "fd-vs-step",
        Axis(x, _decades(*x), "finite-difference step h"),
        Axis(y, _decades(*y), f"|FD(h) - {ad}|"),
        marks,
        f"|FD(h) - {ad}| of the failing element against the step h (log-log)"
        + (f", {ad} by {_WORDS[ad]}" if ad in _WORDS else "")
        + ". Where the rule is right the difference falls with h until rounding takes "
        "over; a wrong rule levels off at the size of its error, whatever the step.",
    )


# -- the failing row, per input element ---------------------------------------------------------
def _segments(rows: Sequence[dict[str, Any]]) -> list[tuple[int, int, Any]]:
    """(first, past the last, argument) of each argument's run of elements."""
    out: list[tuple[int, int, Any]] = []
    for k, r in enumerate(rows):
        if out and out[-1][2] == r["argument"]:
            out[-1] = (out[-1][0], k + 1, r["argument"])
        else:
            out.append((k, k + 1, r["argument"]))
    return out


def _index_label(index: Sequence[int]) -> str:
    return ",".join(map(str, index)) if index else "0"


def svg_ad_vs_fd(rows: list[dict[str, Any]] | None) -> str | None:
    """The failing output element's derivative with respect to each input
    element, by VJP (the row's ``AD``), JVP and FD: a wrong mode's marks
    stand apart from the rings; dashed lines part the arguments."""
    if not rows:
        return None
    key = {"FD": "FD", "JVP": "JVP", "VJP": "AD"}  # (the record's names: AD is the reverse-mode row)
    sides = [s for s in MARKS if any(math.isfinite(_num(r.get(key[s]))) for r in rows)]
    vals = [_num(r.get(key[s])) for r in rows for s in sides]
    vals = [v for v in vals if math.isfinite(v)]
    if not vals:
        return None
    n = len(rows)
    y = _span(min(vals), max(vals), 0.1)
    every = max(1, math.ceil(n / 8))
    segments = _segments(rows)
    x_ticks = [(float(k), _index_label(rows[k]["index"])) for a, b, _ in segments for k in range(a, b, every)]

    def marks(sx: Any, sy: Any, top: float) -> str:
        out = []
        for a, _, arg in segments:
            if a:
                edge = sx(a - 0.5)
                out.append(
                    f'<line x1="{edge:.1f}" y1="{top}" x2="{edge:.1f}" y2="{_H - _BOTTOM}" stroke="#555" '
                    'stroke-dasharray="4 3"/>'
                )
            out.append(
                f'<text x="{max(sx(a - 0.5), _LEFT) + 3:.1f}" y="{top + 11}" font-size="10" '
                f'font-style="italic">arg{_e(str(arg))}</text>'
            )
        for s in sides:
            for k, r in enumerate(rows):
                v = _num(r.get(key[s]))
                if math.isfinite(v):
                    out.append(MARKS[s](sx(k), sy(v)))
        return "".join(out)

    shown = ", ".join(f"{SIDES[s]}: {desc}" for s, desc in _MARK_WORDS.items() if s in sides)
    # (a report written before rows carried JVP has no such key: nothing to say of it)
    tried = any("JVP" in r for r in rows)
    missing = " Forward mode could not run here, so it has no marks." if tried and "JVP" not in sides else ""
    first = f" (the first {n})" if n >= ROW_ELEMENTS else ""
    return _figure(
        "ad-vs-fd",
        Axis((-0.5, n - 0.5), x_ticks, "input element (its index within its argument)"),
        Axis(y, _value_ticks(y), "d output / d input"),
        marks,
        f"The failing output element's derivative with respect to each input element{first}, by {shown}; "
        "dashed lines part the arguments, each named above its elements. Where a dot or a cross sits outside "
        f"its ring, that mode is wrong for that element.{missing}",
        legend=[(MARKS[s], s) for s in ("VJP", "JVP", "FD") if s in sides],
    )


# -- the whole Jacobian -------------------------------------------------------------------------
def _shade(v: float, top: float) -> str:
    """Red above zero, blue below, white at zero, full at ``top``; grey: not finite."""
    if not math.isfinite(v):
        return _OTHER
    t = 0.0 if top <= 0 else max(-1.0, min(1.0, v / top))
    end = (204, 51, 51) if t > 0 else (51, 102, 204)
    return "#" + "".join(f"{round(255 + (c - 255) * abs(t)):02x}" for c in end)


def _top(matrices: Sequence[Sequence[Sequence[float]]]) -> float:
    return max((abs(v) for m in matrices for row in m for v in row if math.isfinite(v)), default=0.0)


@dataclass(frozen=True)
class _Grid:
    """Where the heat maps go: cell size, panels and margins (pixels)."""

    m: int  # rows (output elements)
    n: int  # columns (input elements)
    cell: float
    left: float = 58
    top: float = 50
    gap: float = 26

    @property
    def slot(self) -> float:  # a panel's width: its grid, or room for its title
        return max(self.n * self.cell, 130)

    def x(self, panel: int, col: float) -> float:
        return self.left + panel * (self.slot + self.gap) + col * self.cell

    def y(self, row: float) -> float:
        return self.top + row * self.cell

    @property
    def width(self) -> float:
        return self.x(3, 0) - self.gap + 12

    @property
    def height(self) -> float:
        return max(self.y(self.m) + 70, 2 * self.label_centre)

    @property
    def label_centre(self) -> float:
        """Where the rows' axis label is centred: beside the rows, and low
        enough that the whole label stays inside the figure over a short grid."""
        return max((self.y(0) + self.y(self.m)) / 2, _ROWS_LABEL_HALF + 4)


#: Half the rows' axis label's length (pixels, at its size): room kept for it.
_ROWS_LABEL_HALF = 80


def _panel(g: _Grid, p: int, title: str, values: list[list[float]], top: float) -> list[str]:
    """One heat map: its title, cells and colour bar (±top)."""
    parts = [f'<text x="{g.x(p, 0):.1f}" y="{g.top - 30}" font-size="11" font-weight="bold">{_e(title)}</text>']
    for i, row in enumerate(values):
        for j, v in enumerate(row):
            parts.append(
                f'<rect x="{g.x(p, j):.1f}" y="{g.y(i):.1f}" width="{g.cell:.1f}" height="{g.cell:.1f}" '
                f'fill="{_shade(v, top)}"/>'
            )
    parts.append(
        f'<rect x="{g.x(p, 0):.1f}" y="{g.y(0):.1f}" width="{g.n * g.cell:.1f}" '
        f'height="{g.m * g.cell:.1f}" fill="none" stroke="#555"/>'
    )
    bar, steps = g.y(g.m) + 24, 21
    width = g.slot / steps
    for k in range(steps):
        v = top * (2 * k / (steps - 1) - 1)
        parts.append(
            f'<rect x="{g.x(p, 0) + k * width:.1f}" y="{bar}" width="{width + 0.3:.1f}" height="8" '
            f'fill="{_shade(v, top)}"/>'
        )
    for v, anchor, at in ((-top, "start", 0.0), (0.0, "middle", g.slot / 2), (top, "end", g.slot)):
        parts.append(
            f'<text x="{g.x(p, 0) + at:.1f}" y="{bar + 19}" text-anchor="{anchor}" font-size="9">{_e(_fmt(v))}</text>'
        )
    return parts


def _worst_cell(jac: dict[str, Any], failure: dict[str, Any]) -> tuple[int, int] | None:
    """The failing element's (row, column) in the Jacobian, where the failure names it."""
    out, arg, inp = failure.get("output_index"), failure.get("argument"), failure.get("input_index")
    if out is None or arg is None or inp is None:
        return None
    row, strides = 0, 1
    for i, s in zip(reversed(out), reversed(jac["output_shape"])):
        row, strides = row + i * strides, strides * s
    col = 0
    for a in jac["arguments"]:
        if a["argument"] == arg:
            flat, strides = 0, 1
            for i, s in zip(reversed(inp), reversed(a["shape"])):
                flat, strides = flat + i * strides, strides * s
            return row, col + flat
        col += math.prod(a["shape"])
    return None


def svg_jacobian(jac: dict[str, Any] | None, failure: dict[str, Any]) -> str | None:
    """The whole Jacobian by both sides of the failing comparison and their
    difference, side by side; the elements over the bound outlined, the
    worst thickest; dashed lines part the arguments."""
    if not jac:
        return None
    a_name, b_name = jac["pair"]
    a = [[_num(v) for v in row] for row in jac[a_name]]
    b = [[_num(v) for v in row] for row in jac[b_name]]
    m, n = len(a), len(a[0]) if a else 0
    if not m or not n:
        return None
    diff = [[x - y for x, y in zip(ra, rb)] for ra, rb in zip(a, b)]
    g = _Grid(m, n, max(3.0, min(36.0, 330 // n, 360 // m)))
    shared, own = _top([a, b]), _top([diff])
    parts = []
    for p, (title, values, top) in enumerate(
        (
            (SIDES.get(a_name, a_name), a, shared),
            (SIDES.get(b_name, b_name), b, shared),
            (f"{a_name} - {b_name}", diff, own),
        )
    ):
        parts += _panel(g, p, title, values, top)
    over = [tuple(c) for c in jac.get("over", [])]
    worst = _worst_cell(jac, failure)
    marked = [(c, 1.0) for c in over if c != worst] + ([(worst, 2.5)] if worst is not None else [])
    for p in range(3):
        for (i, j), stroke in marked:
            parts.append(
                f'<rect x="{g.x(p, j):.1f}" y="{g.y(i):.1f}" width="{g.cell:.1f}" height="{g.cell:.1f}" '
                f'fill="none" stroke="#000" stroke-width="{stroke}"/>'
            )
    parts += _jacobian_axes(g, jac)
    return (
        f'<figure class="plot wide">{_svg("jacobian", g.width, g.height, "the Jacobian, AD against FD", parts)}'
        f"<figcaption>{_e(_jacobian_caption(jac, failure, m, n, (shared, own), len(over)))}</figcaption></figure>"
    )


def _jacobian_axes(g: _Grid, jac: dict[str, Any]) -> list[str]:
    """Row ticks, the arguments' boundaries and names, column ticks, axis labels."""
    parts = []
    every = max(1, math.ceil(g.m / max(1, int(g.m * g.cell // 14))))
    for i in range(0, g.m, every):
        y = g.y(i + 0.5)
        parts.append(f'<text x="{g.left - 6}" y="{y + 3:.1f}" text-anchor="end" font-size="9">{i}</text>')
    col = 0
    col_every = max(1, math.ceil(g.n / max(1, int(g.n * g.cell // 26))))
    for a in jac["arguments"]:
        size = math.prod(a["shape"])
        for p in range(3):
            if col:
                x = g.x(p, col)
                parts.append(
                    f'<line x1="{x:.1f}" y1="{g.top - 16}" x2="{x:.1f}" y2="{g.y(g.m) + 4:.1f}" '
                    'stroke="#000" stroke-dasharray="3 2"/>'
                )
            parts.append(
                f'<text x="{g.x(p, col) + 2:.1f}" y="{g.top - 6}" font-size="9" font-style="italic">'
                f"arg{a['argument']}</text>"
            )
            for k in range(0, size, col_every):
                x = g.x(p, col + k + 0.5)
                parts.append(f'<text x="{x:.1f}" y="{g.y(g.m) + 13:.1f}" text-anchor="middle" font-size="9">{k}</text>')
        col += size
    mid = g.label_centre
    parts.append(
        f'<text x="12" y="{mid:.0f}" font-size="11" text-anchor="middle" '
        f'transform="rotate(-90 12 {mid:.0f})">output element (flat index)</text>'
    )
    parts.append(
        f'<text x="{g.width / 2:.0f}" y="{g.height - 6:.0f}" font-size="11" text-anchor="middle">'
        "input element (flat index within its argument)</text>"
    )
    return parts


def _jacobian_caption(
    jac: dict[str, Any], failure: dict[str, Any], m: int, n: int, tops: tuple[float, float], over: int
) -> str:
    a, b = jac["pair"]
    shared, own = tops
    columns, col = [], 0
    for arg in jac["arguments"]:
        size = math.prod(arg["shape"])
        shape = "x".join(map(str, arg["shape"])) or "scalar"
        columns.append(f"arg{arg['argument']} [{shape}] in columns {col}-{col + size - 1}")
        col += size
    allowance = " and the finite differences' own error allowance" if "FD" in (a, b) else ""
    bound = failure.get("bound")
    return (
        f"The Jacobian d output / d input at the counterexample ({m} x {n}: a row per output element, a column "
        f"per input element) by {SIDES.get(a, a)} and by {SIDES.get(b, b)}, and their difference {a} - {b}. "
        f"Colour: red above zero, blue below, white at zero; {a} and {b} share one scale (±{_fmt(shared)}), "
        f"the difference has its own (±{_fmt(own)}); grey: not finite. Outlined: the {over} element(s) where "
        f"|{a} - {b}| exceeds the check's bound at its worst element"
        + (f" ({_fmt(_num(bound))})" if bound is not None else "")
        + f"{allowance}; outlined thickest: that worst element, {_element_text(failure)}. "
        + "; ".join(columns)
        + "."
    )
