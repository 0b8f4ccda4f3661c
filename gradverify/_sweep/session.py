"""The report of a pytest session's gradient checks: what the plugin records
of each ``gv.check`` / ``gv.verify`` a test makes (``--gradverify-report
DIR``), written as a sweep's report is - JSON, Markdown, JUnit XML and an
HTML page, each rendered before any is written, each file whole. The JSON is
the record of the session (``gradverify write --passing`` reads it);
``gradverify report DIR/gradverify-pytest.json`` renders it again."""

from __future__ import annotations

import html
import os
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .. import _io
from .._errors import ArgumentValueError, explain

__all__ = [
    "FILES",
    "RENDER",
    "SCHEMA",
    "build",
    "check",
    "to_html",
    "to_json",
    "to_junit",
    "to_markdown",
    "totals_line",
    "write",
]

SCHEMA = "gradverify-pytest/1"
#: Named for the plugin (the directory may hold the suite's own files: its --junitxml, say).
FILES = {
    "json": "gradverify-pytest.json",
    "md": "gradverify-pytest.md",
    "junit": "gradverify-pytest.xml",
    "html": "gradverify-pytest.html",
}


def build(records: Sequence[dict[str, Any]], *, seed: int, max_examples: int, profile: str | None) -> dict[str, Any]:
    """The session's report: its settings and every call's record, by test."""
    return {
        "schema": SCHEMA,
        "seed": seed,
        "max_examples": max_examples,
        "profile": profile,
        "records": sorted(records, key=lambda r: (r["nodeid"], r["call"], r["function"])),
    }


def check(data: dict[str, Any], path: str | os.PathLike[str]) -> dict[str, Any]:
    """``data`` read from ``path``, if it is a whole session report (a usage error if not)."""
    wrong = _io.malformed(data, {"records": list}, "records", {"nodeid", "call", "function", "ok"})
    if wrong:
        raise ArgumentValueError(
            explain(
                f"report FILE {path}",
                "a whole pytest session report: records, each with nodeid, call, function and ok",
                "missing or malformed " + ", ".join(wrong[:5]),
                "run pytest --gradverify-report DIR again",
            )
        )
    return data


def write(report: dict[str, Any], directory: str | os.PathLike[str]) -> list[str]:
    """Every format into ``directory``; the paths written."""
    rendered = {name: RENDER[f](report) for f, name in FILES.items()}  # render all before writing any
    return [str(_io.atomic_write(Path(directory) / name, text)) for name, text in rendered.items()]


def _failed(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in records if not r["ok"]]


def totals_line(report: dict[str, Any]) -> str:
    records = report["records"]
    failed = _failed(records)
    expected = sum(1 for r in failed if r.get("test_failed") is False)
    line = f"{len(records)} gradient check(s) in {len({r['nodeid'] for r in records})} test(s), {len(failed)} failed"
    return line + (f" ({expected} of them expected by their tests, which passed)" if expected else "")


def _settings(report: dict[str, Any]) -> str:
    said = f"seed {report['seed']}, max_examples {report['max_examples']}"
    return said + (f", profile {report['profile']}" if report.get("profile") else "")


def _verdict(r: dict[str, Any]) -> str:
    out = "passed" if r["ok"] else "failed" + (" (the test expected it)" if r.get("test_failed") is False else "")
    if "peer_ok" in r:
        out += f"; the original {r['call']} {'passed' if r['peer_ok'] else 'failed'}"
    return out


def _ratio(r: dict[str, Any]) -> str:
    return "" if r.get("worst_ratio") is None else f"{float(r['worst_ratio']):.3g}"


def _failure_lines(r: dict[str, Any]) -> list[str]:
    """What a failed call's section says above its report (plain text)."""
    lines = []
    if r.get("pair"):
        values = ", ".join(f"{k} = {_num(v)}" for k, v in (r.get("values") or {}).items())
        lines.append(f"{r['pair']}: {values}" if values else r["pair"])
    if r.get("error") is not None and r.get("bound") is not None:
        lines.append(f"|error| {_num(r['error'], 3)} > bound {_num(r['bound'], 3)}")
    if r.get("npz"):
        lines.append(f"inputs: {r['npz']}")
    if r.get("reproduce_test"):
        lines.append(f"reproduce: {r['reproduce_test']}")
    return lines


def _num(v: Any, digits: int = 6) -> str:
    try:
        return f"{float(v):.{digits}g}"
    except (TypeError, ValueError):
        return str(v)


def to_markdown(report: dict[str, Any]) -> str:
    lines = ["# gradverify pytest report", "", f"**{totals_line(report)}** ({_settings(report)})", ""]
    lines += ["| test | call | function | backend | verdict | error/bound |", "|---|---|---|---|---|---|"]
    for r in report["records"]:
        cells = (r["nodeid"], r["call"], r["function"], r.get("backend") or "", _verdict(r), _ratio(r))
        lines.append("| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |")
    for r in _failed(report["records"]):
        lines += ["", f"## FAILED {r['nodeid']}: {r['function']}", ""]
        lines += [f"- {line}" for line in _failure_lines(r)]
        if r.get("report"):
            lines += ["", "```text", r["report"], "```"]
    return "\n".join(lines) + "\n"


def to_junit(report: dict[str, Any]) -> str:
    """A test case per recorded call (named by its test and function), a failed call a failure."""
    records = report["records"]
    suites = ET.Element("testsuites")
    suite = ET.SubElement(
        suites, "testsuite", name="gradverify.pytest", tests=str(len(records)), failures=str(len(_failed(records)))
    )
    props = ET.SubElement(suite, "properties")
    for k in ("seed", "max_examples", "profile"):
        ET.SubElement(props, "property", name=f"gradverify.{k}", value=str(report.get(k)))
    for r in records:
        path, _, name = r["nodeid"].partition("::")
        tc = ET.SubElement(suite, "testcase", classname=path, name=f"{name or path} {r['call']} {r['function']}")
        cp = ET.SubElement(tc, "properties")
        for k in ("seed", "backend", "worst_ratio", "npz"):
            ET.SubElement(cp, "property", name=f"gradverify.{k}", value=str(r.get(k)))
        if not r["ok"]:
            el = ET.SubElement(tc, "failure", message=str(r.get("where") or "failed")[:500], type=str(r.get("pair")))
            el.text = r.get("report") or "\n".join(_failure_lines(r))
    ET.indent(suites)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"


_CSS = """
td.passed{background:#dfd}td.failed{background:#fbb;font-weight:bold}
"""


def to_html(report: dict[str, Any]) -> str:
    e = html.escape
    out = [f"<p><b>{e(totals_line(report))}</b> ({e(_settings(report))})</p>"]
    out.append('<table id="calls"><thead><tr><th>test</th><th>call</th><th>function</th><th>backend</th>')
    out.append("<th>verdict</th><th>error/bound</th></tr></thead><tbody>")
    for k, r in enumerate(report["records"]):
        verdict = e(_verdict(r))
        if not r["ok"]:
            verdict = f'<a href="#call-{k}">{verdict}</a>'
        out.append(
            f'<tr><td class="text">{e(r["nodeid"])}</td><td>{e(r["call"])}</td><td class="text">{e(r["function"])}'
            f'</td><td>{e(r.get("backend") or "")}</td><td class="{"passed" if r["ok"] else "failed"}">{verdict}</td>'
            f"<td>{e(_ratio(r))}</td></tr>"
        )
    out.append("</tbody></table>")
    for k, r in enumerate(report["records"]):
        if r["ok"]:
            continue
        out.append(f'<h2 id="call-{k}">FAILED {e(r["nodeid"])}: {e(r["function"])}</h2>')
        out.append("<ul>" + "".join(f"<li>{e(line)}</li>" for line in _failure_lines(r)) + "</ul>")
        if r.get("report"):
            out.append(f"<pre>{e(r['report'])}</pre>")
    return _io.html_page("gradverify pytest report", out, _CSS)


def to_json(report: dict[str, Any]) -> str:
    return _io.to_json(report) + "\n"


RENDER = {"json": to_json, "md": to_markdown, "junit": to_junit, "html": to_html}
