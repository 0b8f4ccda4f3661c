"""Sweep reports: JSON (versioned schema, see docs/report-schema.md), Markdown fit
for a CI step summary, JUnit XML, and a self-contained HTML page. Every file
is written to a temporary name and renamed into place: never half-written."""

from __future__ import annotations

import html
import json
import os
import xml.etree.ElementTree as ET
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .. import _io
from .._errors import ArgumentValueError, explain
from .._io import environment
from . import figures, session
from .cases import summary

__all__ = [
    "FILES",
    "FORMATS",
    "MATRIX_LEGEND",
    "RENDER",
    "RENDERERS",
    "totals_line",
    "SCHEMA",
    "TIMING",
    "build",
    "canonical",
    "canonical_case",
    "environment",
    "load",
    "matrix",
    "matrix_html",
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
    if isinstance(data, dict) and data.get("schema") == session.SCHEMA:
        return session.check(data, p)  # (a pytest session's report: RENDER renders it as its own)
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        found = data.get("schema") if isinstance(data, dict) else type(data).__name__
        raise ArgumentValueError(
            explain(
                "report FILE",
                f"schema {SCHEMA!r} (gradverify check's report.json) or {session.SCHEMA!r} (pytest's)",
                repr(found),
                "pass a report.json or gradverify-pytest.json this gradverify version wrote",
            )
        )
    fields = {"command": str, "seed": int, "totals": dict, "cases": list}
    wrong = _io.malformed(data, fields, "cases", {"id", "status"})
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
figure.wide{display:block;max-width:100%}
figcaption{font-size:.85em;color:#444}
td,th{padding:.2em .5em;text-align:center}
#matrix{font-size:.9em}#matrix td,#matrix th{padding:.15em .4em}
#matrix tbody th{text-align:left;position:sticky;left:0;background:#fff}
#matrix small{display:block;font-size:.75em;font-weight:normal;color:#444;white-space:nowrap}
td.passed{background:#dfd}td.failed{background:#fbb;font-weight:bold}td.skipped{color:#888}td.error{background:#fd8}
"""

#: What the matrix's cells say, said once above it.
MATRIX_LEGEND = (
    "Each cell: the case's verdict, its time, and its error/bound ratio (the largest |AD - reference| over its "
    "bound: below 1 where every example passed; a failure's own, above 1). A failed cell links to its failure."
)


def _ratio(case: dict[str, Any]) -> float | None:
    """A case's error/bound: the failure's own where it failed, else the largest over its examples."""
    f = case.get("failure") or {}
    if f.get("error") is not None and f.get("bound"):
        try:
            return float(f["error"]) / float(f["bound"])
        except (TypeError, ValueError, ZeroDivisionError):
            return None
    return case.get("worst_ratio")


def _cell(case: dict[str, Any] | None) -> str:
    if case is None:
        return "<td></td>"
    e = html.escape
    status, label = case["status"], _MARK[case["status"]]
    if status == "failed":
        label = f'<a href="#{e(case["id"])}">{label}</a>'
    title = f"{case['id']}: {status}"
    if status in ("passed", "failed"):
        ratio = _ratio(case)
        said = [f"{float(case.get('seconds') or 0):.2f} s"] + ([] if ratio is None else [f"{ratio:.2g}"])
        label += "".join(f"<small>{e(v)}</small>" for v in said)
        title += f", {case.get('examples_run')} example(s) in {said[0]}"
        title += "" if ratio is None else f", error/bound {said[1]}"
        title += f", {case['inconclusive']} inconclusive" if case.get("inconclusive") else ""
    elif case.get("reason"):
        title += f": {case['reason']}"
    return f'<td class="{status}" title="{e(title)}">{label}</td>'


def _header(cols: list[tuple[str, str, str]]) -> list[str]:
    """The columns' header as three rows (backend, impl, dtype), a backend or
    impl spanning its run of columns: narrow columns, each named once."""
    e = html.escape
    rows = []
    for depth in range(3):
        runs: list[list[Any]] = []
        for c in cols:
            if runs and runs[-1][0] == c[: depth + 1]:
                runs[-1][1] += 1
            else:
                runs.append([c[: depth + 1], 1])
        first = '<th rowspan="3">target</th>' if depth == 0 else ""
        cells = "".join(
            f'<th colspan="{n}">{e(key[-1])}</th>' if n > 1 else f"<th>{e(key[-1])}</th>" for key, n in runs
        )
        rows.append(f"<tr>{first}{cells}</tr>")
    return rows


def _skipped_columns(rows: list[str], cols: list[tuple[str, str, str]], cell: dict) -> dict[tuple[str, ...], list]:
    """The columns whose every case was skipped, by the reasons they give: left
    out of the matrix and said once below it."""
    out: dict[tuple[str, ...], list] = {}
    for c in cols:
        column = [cell[(r, c)] for r in rows if (r, c) in cell]
        if column and all(x["status"] == "skipped" for x in column):
            out.setdefault(tuple(dict.fromkeys(x.get("reason") or "no reason given" for x in column)), []).append(c)
    return out


def matrix_html(report: dict[str, Any]) -> list[str]:
    """The pass/fail matrix: said what its cells show, in a box of its own that
    scrolls sideways where it is wider than the page; columns of nothing but
    skips left out and explained once."""
    e = html.escape
    rows, cols, cell = matrix(report)
    skipped = _skipped_columns(rows, cols, cell)
    left_out = {c for group in skipped.values() for c in group}
    shown = [c for c in cols if c not in left_out]
    out = []
    if shown:
        out.append(f'<p class="legend">{e(MATRIX_LEGEND)}</p>')
        out.append('<div class="scroll"><table id="matrix"><thead>')
        out += _header(shown)
        out.append("</thead><tbody>")
        for r in rows:
            out.append(f"<tr><th>{e(r)}</th>{''.join(_cell(cell.get((r, c))) for c in shown)}</tr>")
        out.append("</tbody></table></div>")
    if skipped:
        out.append('<div id="left-out"><p>Columns left out of the matrix, every case in them skipped:</p><ul>')
        for reasons, group in skipped.items():
            out.append(f"<li>{e(', '.join('/'.join(c) for c in group))}: {e('; '.join(reasons))}</li>")
        out.append("</ul></div>")
    return out


def _failure_html(case: dict[str, Any]) -> list[str]:
    """A failure: its heading (the matrix links here), what failed, its plots and its report."""
    e = html.escape
    f = case["failure"]
    out = [f'<h2 id="{e(case["id"])}">FAILED {e(case["id"])}</h2>', f"<p>{e(f['kind'])}: {e(f['message'])}</p>"]
    ad = next((k for k in (f.get("values") or {}) if k in ("JVP", "VJP")), "AD")
    plots = (
        figures.svg_worst(f),
        figures.svg_fd_vs_step(f.get("fd_vs_step"), ad),
        figures.svg_ad_vs_fd(f.get("ad_vs_fd")),
        figures.svg_jacobian(f.get("jacobian"), f),
    )
    out += [svg for svg in plots if svg]
    out.append(f"<pre>{e(f['report'])}</pre>")
    return out


def to_html(report: dict[str, Any]) -> str:
    e = html.escape
    t = report["totals"]
    out = [
        f"<p><b>{e(totals_line(t))}</b> &mdash; <code>{e(report['command'])}</code> "
        f"(seed {report['seed']}, {e(report['created'])})</p>",
        *matrix_html(report),
    ]
    for c in report["cases"]:
        if c["status"] == "failed":
            out += _failure_html(c)
    return _io.html_page("gradverify report", out, _CSS)


#: Each format's renderer, per schema: a sweep's report, or a pytest session's.
RENDERERS = {
    SCHEMA: {"json": to_json, "md": to_markdown, "junit": to_junit, "html": to_html},
    session.SCHEMA: session.RENDER,
}


def _renderer(fmt: str) -> Callable[[dict[str, Any]], str]:
    def render(report: dict[str, Any]) -> str:
        return RENDERERS.get(report.get("schema"), RENDERERS[SCHEMA])[fmt](report)

    return render


#: The renderer of each format (``load``'s reports, whichever schema).
RENDER = {f: _renderer(f) for f in FORMATS}
