"""Sweep reports: JSON (versioned schema, see docs/report-schema.md), Markdown fit
for a CI step summary, JUnit XML, and a self-contained HTML page. Every file
is written to a temporary name and renamed into place: never half-written."""

from __future__ import annotations

import html
import json
import math
import os
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .. import _io
from .._errors import ArgumentValueError, explain
from .._io import environment
from .cases import summary

__all__ = [
    "FILES",
    "FORMATS",
    "RENDER",
    "svg_ad_vs_fd",
    "svg_fd_vs_step",
    "totals_line",
    "SCHEMA",
    "TIMING",
    "build",
    "canonical",
    "canonical_case",
    "environment",
    "load",
    "matrix",
    "to_html",
    "to_json",
    "to_junit",
    "to_markdown",
    "write",
]

SCHEMA = "gradverify-report/1"
FORMATS = ("json", "md", "junit", "html")
FILES = {"json": "report.json", "md": "report.md", "junit": "junit.xml", "html": "report.html"}
_MARK = {"passed": "pass", "failed": "FAIL", "skipped": "skip", "error": "error"}


def build(records: Sequence[dict[str, Any]], *, command: str, seed: int, interrupted: bool = False) -> dict[str, Any]:
    """The report of a sweep's records; ``interrupted``: of the cases that finished before it was stopped."""
    totals = summary(records)
    if interrupted:
        totals["interrupted"] = 1
    return {
        **_io.report_head(SCHEMA, command),
        "seed": seed,
        "environment": environment(),
        "totals": totals,
        "cases": list(records),
    }


#: What a case record may hold that depends on where and when it ran, not on its result.
TIMING = ("seconds", "path")


def canonical_case(case: dict[str, Any]) -> dict[str, Any]:
    """A case record without its timing: what must not depend on where it ran."""
    return {k: v for k, v in case.items() if k not in TIMING}


def canonical(report: dict[str, Any]) -> dict[str, Any]:
    """What two reports of one sweep share however it was run: the totals and
    every case's record in order, timings aside (and not when, where or by
    which command it was made)."""
    return {"totals": report["totals"], "cases": [canonical_case(c) for c in report["cases"]]}


def load(path: str | os.PathLike[str]) -> dict[str, Any]:
    p = Path(path)
    try:
        data = json.loads(p.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ArgumentValueError(
            explain(
                "report FILE", "a JSON report written by gradverify check", f"{p} ({e})", "pass reports/report.json"
            )
        ) from e
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        found = data.get("schema") if isinstance(data, dict) else type(data).__name__
        raise ArgumentValueError(
            explain("report FILE", f"schema {SCHEMA!r}", repr(found), "regenerate it with this gradverify version")
        )
    fields = {"command": str, "seed": int, "totals": dict, "cases": list}
    wrong = [f"{k} ({type(data.get(k)).__name__})" for k, kind in fields.items() if not isinstance(data.get(k), kind)]
    cases = data.get("cases") if isinstance(data.get("cases"), list) else []
    wrong += [f"cases[{i}]" for i, c in enumerate(cases) if not (isinstance(c, dict) and {"id", "status"} <= set(c))]
    if wrong:
        raise ArgumentValueError(
            explain(
                f"report FILE {p}",
                "a whole report: command (str), seed (int), totals (object), cases (a list of records)",
                "missing or malformed " + ", ".join(wrong[:5]),
                "write it again with gradverify check, or merge the run's results.jsonl",
            )
        )
    return data


def write(report: dict[str, Any], directory: str | os.PathLike[str], formats: Sequence[str]) -> list[str]:
    """Write the report in each format; returns the paths written."""
    bad = [f for f in formats if f not in FORMATS]
    if bad:
        raise ArgumentValueError(explain("--format", f"some of {','.join(FORMATS)}", ",".join(bad), "--format md,json"))
    rendered = {f: RENDER[f](report) for f in formats}  # render all before writing any
    out = []
    for f, text in rendered.items():
        path = Path(directory) / FILES[f]
        _io.atomic_write(path, text)
        out.append(str(path))
    return out


# -- renderers ---------------------------------------------------------------------------------
def to_json(report: dict[str, Any]) -> str:
    return _io.to_json(report) + "\n"


def _row_key(case: dict[str, Any]) -> str:
    return case["target"]


def _columns(cases: Sequence[dict[str, Any]]) -> list[tuple[str, str, str]]:
    return list(dict.fromkeys((c["backend"], c["impl"], c["dtype"]) for c in cases))


def matrix(report: dict[str, Any]) -> tuple[list[str], list[tuple[str, str, str]], dict]:
    """(rows, columns, {(row, column): case}): the pass/fail matrix of a sweep."""
    cases = report["cases"]
    rows = list(dict.fromkeys(_row_key(c) for c in cases))
    cols = _columns(cases)
    cell = {(_row_key(c), (c["backend"], c["impl"], c["dtype"])): c for c in cases}
    return rows, cols, cell


def totals_line(t: dict[str, int]) -> str:
    line = f"{t['passed']} passed, {t['failed']} failed"
    if t.get("interrupted"):
        line += " (interrupted: the cases that finished)"
    for k in ("skipped", "error"):
        if t.get(k):
            line += f", {t[k]} {k}"
    if t.get("inconclusive"):
        line += f", {t['inconclusive']} inconclusive"
    return line


def to_markdown(report: dict[str, Any]) -> str:
    t = report["totals"]
    lines = [
        "# gradverify report",
        "",
        f"**{totals_line(t)}** — `{report['command']}` (seed {report['seed']}, {report['created']})",
        "",
    ]
    rows, cols, cell = matrix(report)
    lines.append("| target | " + " | ".join("/".join(c) for c in cols) + " |")
    lines.append("|---|" + "---|" * len(cols))
    for r in rows:
        marks = []
        for c in cols:
            case = cell.get((r, c))
            marks.append("" if case is None else _MARK[case["status"]])
        lines.append(f"| {r} | " + " | ".join(marks) + " |")
    failures = [c for c in report["cases"] if c["status"] == "failed"]
    for c in failures:
        f = c["failure"]
        lines += ["", f"## FAILED {c['id']}", ""]
        lines.append(f"- {f['kind']}: {f['message']}")
        if f.get("values"):
            lines.append("- at the worst index: " + ", ".join(f"{k} = {v:.9g}" for k, v in f["values"].items()))
        if f.get("error") is not None:
            lines.append(f"- error {f['error']:.3g} > bound {f['bound']:.3g}")
        if f.get("kink_distance") is not None:
            lines.append(f"- distance of x + b to the nearest kink: {f['kink_distance']:.3g}")
        lines.append(f"- seed {c['seed']}, {c['examples_run']} example(s); op {c['op']}, impl {c['impl']}")
        if f.get("shrink_cut"):
            lines.append(f"- shrinking cut {f['shrink_cut']}: the smallest counterexample found by then")
        lines.append("- minimal counterexample:")
        for a in f["counterexample"]:
            lines.append(f"  - `{a['name']}` {a['dtype']}{a['shape']}: `{a['values']}`")
        if f.get("script"):
            lines.append(f"- reproduce: `python {f['script']}` in the report directory (inputs in `{f['npz']}`)")
    errors = [c for c in report["cases"] if c["status"] == "error"]
    for c in errors:
        lines += ["", f"## ERROR {c['id']}", "", f"{c['reason']}"]
    return "\n".join(lines) + "\n"


def to_junit(report: dict[str, Any]) -> str:
    t = report["totals"]
    suites = ET.Element("testsuites")
    suite = ET.SubElement(
        suites,
        "testsuite",
        name="gradverify",
        tests=str(t["cases"]),
        failures=str(t["failed"]),
        errors=str(t["error"]),
        skipped=str(t["skipped"]),
        time=f"{sum(float(c.get('seconds') or 0) for c in report['cases']):.3f}",
        timestamp=report["created"],
    )
    props = ET.SubElement(suite, "properties")
    ET.SubElement(props, "property", name="gradverify.seed", value=str(report["seed"]))
    for k, v in report["environment"]["versions"].items():
        ET.SubElement(props, "property", name=f"version.{k}", value=str(v))
    for c in report["cases"]:
        tc = ET.SubElement(
            suite,
            "testcase",
            classname=f"gradverify.{c['target'].replace(':', '.')}",
            name=f"{c['backend']}-{c['impl']}-{c['dtype']}",
            time=f"{float(c.get('seconds') or 0):.3f}",
        )
        cp = ET.SubElement(tc, "properties")
        for k in ("seed", "examples_run", "inconclusive", "worst_ratio"):
            ET.SubElement(cp, "property", name=f"gradverify.{k}", value=str(c.get(k)))
        if c["status"] == "failed":
            f = c["failure"]
            ET.SubElement(cp, "property", name="gradverify.counterexample", value=str(f.get("npz")))
            el = ET.SubElement(tc, "failure", message=f["message"][:500], type=f["kind"])
            el.text = f["report"]
        elif c["status"] == "skipped":
            ET.SubElement(tc, "skipped", message=c["reason"] or "")
        elif c["status"] == "error":
            ET.SubElement(tc, "error", message=(c["reason"] or "")[:500])
    ET.indent(suites)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"


_CSS = """
figure.plot{display:inline-block;vertical-align:top;margin:.5em 1.5em .5em 0;max-width:420px}
figcaption{font-size:.85em;color:#444}
td,th{padding:.2em .5em;text-align:center}
td.passed{background:#dfd}td.failed{background:#fbb;font-weight:bold}td.skipped{color:#888}td.error{background:#fd8}
pre{padding:1em}
"""


def to_html(report: dict[str, Any]) -> str:
    e = html.escape
    t = report["totals"]
    rows, cols, cell = matrix(report)
    out = [
        f"<p><b>{e(totals_line(t))}</b> &mdash; <code>{e(report['command'])}</code> "
        f"(seed {report['seed']}, {e(report['created'])})</p>",
        '<table id="matrix"><thead><tr><th>target</th>'
        + "".join(f"<th>{e('/'.join(c))}</th>" for c in cols)
        + "</tr></thead><tbody>",
    ]
    for r in rows:
        tds = []
        for c in cols:
            case = cell.get((r, c))
            if case is None:
                tds.append("<td></td>")
            else:
                anchor = f' href="#{e(case["id"])}"' if case["status"] == "failed" else ""
                label = _MARK[case["status"]]
                inner = f"<a{anchor}>{label}</a>" if anchor else label
                tds.append(f'<td class="{case["status"]}" title="{e(case["id"])}">{inner}</td>')
        out.append(f"<tr><th>{e(r)}</th>{''.join(tds)}</tr>")
    out.append("</tbody></table>")
    for c in report["cases"]:
        if c["status"] != "failed":
            continue
        f = c["failure"]
        out.append(f'<h2 id="{e(c["id"])}">FAILED {e(c["id"])}</h2>')
        for svg in (svg_fd_vs_step(f.get("fd_vs_step")), svg_ad_vs_fd(f.get("ad_vs_fd"))):
            if svg:
                out.append(svg)
        plot = _plot(f)
        if plot:
            out.append(plot)
        out.append(f"<pre>{e(f['report'])}</pre>")
    return _io.html_page("gradverify report", out, _CSS)


_W, _H = 420, 260
_LEFT, _RIGHT, _TOP, _BOTTOM = 64, 16, 12, 44  # the plot area's margins: room for ticks and labels


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


def _svg_axes(
    cls: str,
    x: tuple[float, float],
    y: tuple[float, float],
    x_ticks: list[tuple[float, str]],
    y_ticks: list[tuple[float, str]],
    x_label: str,
    y_label: str,
    marks: Any,
    caption: str,
) -> str:
    """A figure: axes with ticks and tick labels, axis labels, the marks
    (``marks(sx, sy)`` gives the SVG elements in data coordinates) and a
    caption saying what to read from it."""
    (x0, x1), (y0, y1) = x, y
    right, bottom = _W - _RIGHT, _H - _BOTTOM

    def sx(v: float) -> float:
        return _LEFT + (v - x0) / (x1 - x0) * (right - _LEFT)

    def sy(v: float) -> float:
        return bottom - (v - y0) / (y1 - y0) * (bottom - _TOP)

    e = html.escape
    parts = [
        f'<rect x="{_LEFT}" y="{_TOP}" width="{right - _LEFT}" height="{bottom - _TOP}" fill="none" stroke="#555"/>'
    ]
    for v, text in x_ticks:
        px = sx(v)
        parts.append(f'<line x1="{px:.1f}" y1="{bottom}" x2="{px:.1f}" y2="{bottom + 5}" stroke="#555"/>')
        parts.append(f'<text x="{px:.1f}" y="{bottom + 17}" text-anchor="middle" font-size="10">{e(text)}</text>')
    for v, text in y_ticks:
        py = sy(v)
        parts.append(f'<line x1="{_LEFT - 5}" y1="{py:.1f}" x2="{_LEFT}" y2="{py:.1f}" stroke="#555"/>')
        parts.append(f'<line x1="{_LEFT}" y1="{py:.1f}" x2="{right}" y2="{py:.1f}" stroke="#eee"/>')
        parts.append(f'<text x="{_LEFT - 8}" y="{py + 3.5:.1f}" text-anchor="end" font-size="10">{e(text)}</text>')
    parts.append(marks(sx, sy))
    parts.append(
        f'<text x="{(_LEFT + right) / 2:.0f}" y="{_H - 8}" text-anchor="middle" font-size="11">{e(x_label)}</text>'
    )
    mid = (_TOP + bottom) / 2
    parts.append(
        f'<text x="13" y="{mid:.0f}" font-size="11" text-anchor="middle" '
        f'transform="rotate(-90 13 {mid:.0f})">{e(y_label)}</text>'
    )
    return (
        f'<figure class="plot"><svg class="{cls}" xmlns="http://www.w3.org/2000/svg" width="{_W}" height="{_H}" '
        f'role="img" aria-label="{e(y_label)} against {e(x_label)}">{"".join(parts)}</svg>'
        f"<figcaption>{e(caption)}</figcaption></figure>"
    )


def _distinct(values: list[float]) -> list[str]:
    """The values with as few significant digits as keep their labels apart."""
    for digits in range(2, 17):
        labels = [f"{v:.{digits}g}" for v in values]
        if len(set(labels)) == len(labels):
            return labels
    return [repr(v) for v in values]


def _decades(lo: float, hi: float) -> list[tuple[float, str]]:
    """Tick positions and labels of a log10 axis: every decade (every other
    one past 8), or round values where the axis spans less than two."""
    first, last = math.ceil(lo), math.floor(hi)
    if last - first < 1:
        ticks = _nice_ticks(lo, hi, 4)
        return list(zip(ticks, _distinct([10.0**v for v in ticks])))
    every = 1 if last - first <= 8 else 2
    return [(float(k), f"1e{k}") for k in range(first, last + 1, every)]


def svg_fd_vs_step(rows: list[list[float]] | None) -> str | None:
    """|FD(h) - AD| against the step h, log-log, as inline SVG (no plotting
    library needed): a correct rule dips toward rounding; a wrong one levels
    off at the size of its error."""
    if not rows:
        return None
    pts = [(math.log10(h), math.log10(max(e, 1e-18))) for h, _, e in rows if h > 0 and math.isfinite(e)]
    if len(pts) < 2:
        return None
    x = _span(min(p[0] for p in pts), max(p[0] for p in pts), 0.04)
    # at least a decade: a difference that stays put must look flat, not show its last digits
    y = _span(min(p[1] for p in pts), max(p[1] for p in pts), 0.1, least=1.0)

    def marks(sx: Any, sy: Any) -> str:
        line = " ".join(f"{sx(a):.1f},{sy(b):.1f}" for a, b in pts)
        dots = "".join(f'<circle cx="{sx(a):.1f}" cy="{sy(b):.1f}" r="2.5" fill="#c33"/>' for a, b in pts)
        return f'<polyline points="{line}" fill="none" stroke="#c33" stroke-width="1.5"/>{dots}'

    return _svg_axes(
        "fd-vs-step",
        x,
        y,
        _decades(*x),
        _decades(*y),
        "finite-difference step h",
        "|FD(h) - AD|",
        marks,
        "|FD(h) - AD| of the failing element against the step h (log-log). Where the rule is right the "
        "difference falls with h until rounding takes over; a wrong rule levels off at the size of its "
        "error, whatever the step.",
    )


def svg_ad_vs_fd(rows: list[dict[str, Any]] | None) -> str | None:
    """AD (red dots) and FD (blue rings) per input element for the failing
    output element, as inline SVG: the wrong elements stand apart."""
    if not rows:
        return None
    vals = [v for r in rows for v in (r["AD"], r["FD"]) if math.isfinite(v)]
    if not vals:
        return None
    n = len(rows)
    y = _span(min(vals), max(vals), 0.1)
    every = max(1, math.ceil(n / 8))
    x_ticks = [(float(k), str(k + 1)) for k in range(0, n, every)]
    ticks = _nice_ticks(*y)
    y_ticks = list(zip(ticks, _distinct(ticks)))

    def marks(sx: Any, sy: Any) -> str:
        out = []
        for k, r in enumerate(rows):
            if math.isfinite(r["FD"]):
                out.append(f'<circle cx="{sx(k):.1f}" cy="{sy(r["FD"]):.1f}" r="5" fill="none" stroke="#36c"/>')
            if math.isfinite(r["AD"]):
                out.append(f'<circle cx="{sx(k):.1f}" cy="{sy(r["AD"]):.1f}" r="2.5" fill="#c33"/>')
        return "".join(out)

    return _svg_axes(
        "ad-vs-fd",
        (-0.5, n - 0.5),
        y,
        x_ticks,
        y_ticks,
        "input element",
        "d output / d input",
        marks,
        "The failing output element's derivative with respect to each input element: AD (red dots) "
        "against finite differences (blue rings). Where a dot sits outside its ring, the rule is wrong "
        "for that element.",
    )


def _plot(failure: dict[str, Any]) -> str | None:
    """AD against FD at the worst index as a small bar chart (matplotlib, an
    optional extra: without it the page has the numbers only)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    import base64
    import io

    values = failure.get("values") or {}
    if not values:
        return None
    fig, ax = plt.subplots(figsize=(4, 2.2))
    ax.bar(list(values), list(values.values()), color=["#c33", "#36c", "#999"][: len(values)])
    ax.set_title("derivative at the worst index")
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return f'<img alt="AD vs FD" src="data:image/png;base64,{base64.b64encode(buf.getvalue()).decode()}">'


RENDER = {"json": to_json, "md": to_markdown, "junit": to_junit, "html": to_html}
