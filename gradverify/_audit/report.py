"""An audit's report: per operator its verdict, per flagged sample the pair,
the element, both values, the bound and a reproducer; PyTorch's own
expected failures marked *known*, everything else *new*. Markdown, JSON,
JUnit XML and HTML, rendered whole before any file is written."""

from __future__ import annotations

import html
import json
import re
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import _io
from .._errors import ArgumentValueError, explain

__all__ = [
    "FILES",
    "FORMATS",
    "SCHEMA",
    "build",
    "check_formats",
    "load",
    "operators",
    "script_name",
    "totals_line",
    "write",
]

SCHEMA = "gradverify-audit-report/1"
FORMATS = ("json", "md", "junit", "html")
FILES = {"json": "report.json", "md": "report.md", "junit": "junit.xml", "html": "report.html"}
#: A sample's statuses, worst first: an operator's verdict is its worst sample's.
STATUSES = ("failed", "error", "timeout", "crashed", "inconclusive", "passed", "skipped")


def _worst(statuses: Sequence[str]) -> str:
    return min(statuses, key=STATUSES.index) if statuses else "skipped"


def script_name(rec: dict[str, Any]) -> str:
    """Where a flagged sample's reproducer goes in the report directory."""
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{rec['task']}-{rec['dtype']}-{rec['sample']}")
    return f"reproducers/{stem}.py"


def operators(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per operator and dtype, in the records' order: its verdict and sample counts;
    ``new``: a failed sample PyTorch does not expect to fail."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in records:
        groups.setdefault((r["task"], r["dtype"]), []).append(r)
    out = []
    for (op, dtype), mine in groups.items():
        failed = [r for r in mine if r["status"] == "failed"]
        out.append(
            {
                "op": op,
                "dtype": dtype,
                "verdict": _worst([r["status"] for r in mine]),
                "samples": dict(Counter(r["status"] for r in mine)),
                "new": any(r.get("known") is None for r in failed),
                "known": next((r["known"] for r in failed if r.get("known")), None),
            }
        )
    return out


def _totals(records: Sequence[dict[str, Any]], ops: Sequence[dict[str, Any]]) -> dict[str, Any]:
    failed = [r for r in records if r["status"] == "failed"]
    return {
        "samples": dict(Counter(r["status"] for r in records)),
        "operators": dict(Counter(o["verdict"] for o in ops)),
        "new": sum(r.get("known") is None for r in failed),
        "known": sum(r.get("known") is not None for r in failed),
        "new_operators": sorted({f"{o['op']}[{o['dtype']}]" for o in ops if o["new"]}),
    }


def totals_line(t: dict[str, Any]) -> str:
    ops = t["operators"]
    parts = [f"{ops.get(s, 0)} {s}" for s in STATUSES if ops.get(s)]
    n = sum(t["samples"].values())
    line = f"{sum(ops.values())} operator(s): " + ", ".join(parts) + f"; {n} sample(s)"
    line += f"; {t['new']} new failing sample(s), {t['known']} known"
    if t.get("interrupted"):
        line += " (interrupted: the samples that finished)"
    return line


def build(
    records: Sequence[dict[str, Any]], *, command: str, config: dict[str, Any], interrupted: bool = False
) -> dict[str, Any]:
    """The report of an audit's records."""
    records = sorted(records, key=lambda r: (r.get("index", 0), r["sample"]))
    ops = operators(records)
    totals = _totals(records, ops)
    if interrupted:
        totals["interrupted"] = 1
    return {
        **_io.report_head(SCHEMA, command),
        "config": config,
        "environment": _io.environment(),
        "totals": totals,
        "operators": ops,
        "samples": list(records),
    }


def load(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    try:
        data = json.loads(p.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ArgumentValueError(
            explain("FILE", "an audit's report.json", f"{p} ({e})", "pass audit/report.json")
        ) from e
    if not isinstance(data, dict) or data.get("schema") != SCHEMA or not isinstance(data.get("samples"), list):
        raise ArgumentValueError(explain("FILE", f"schema {SCHEMA!r}", str(p), "write it again with gradverify audit"))
    return data


def check_formats(formats: Sequence[str]) -> None:
    bad = [f for f in formats if f not in FORMATS]
    if bad or not formats:
        raise ArgumentValueError(
            explain("--format", f"some of {','.join(FORMATS)}", ",".join(bad) or "none", "--format md,json")
        )


def write(report: dict[str, Any], directory: str | Path, formats: Sequence[str]) -> list[str]:
    """Each format, and a reproducer per failed sample; the paths written."""
    check_formats(formats)
    rendered = {FILES[f]: RENDER[f](report) for f in formats}
    for r in report["samples"]:
        if r["status"] == "failed" and r.get("reproducer"):
            rendered[script_name(r)] = r["reproducer"]
    out = []
    for name, text in rendered.items():
        _io.atomic_write(Path(directory) / name, text)
        out.append(str(Path(directory) / name))
    return out


# -- renderers -------------------------------------------------------------------------------------
def _element(f: dict[str, Any]) -> str:
    out, arg, inp = f.get("output_index"), f.get("argument"), f.get("input_index")
    if out is None and inp is None:
        return ""
    where = f"d output{list(out) if out is not None else '[?]'}"
    if arg is not None:
        where += f" / d arg{arg}{list(inp) if inp is not None else ''}"
    return where


def _num(v: Any, digits: int = 3) -> str:
    """A value as the report writes it: JSON keeps NaN and inf as strings."""
    try:
        return f"{float(v):.{digits}g}"
    except (TypeError, ValueError):
        return str(v)


@dataclass(frozen=True)
class _Shown:
    """A finding as the reports show it, Markdown and HTML alike."""

    pair: str  # the two sides compared ("JVP vs FD"), or the finding's kind
    kind: str
    message: str
    details: list[tuple[str, str, bool]]  # (label with its joiner, text, whether the text is code)

    @classmethod
    def of(cls, f: dict[str, Any]) -> _Shown:
        details = []
        where = _element(f)
        if where:
            details.append(("element: ", where, True))
        if f.get("values"):
            details.append(("values: ", ", ".join(f"{k} = {_num(v, 12)}" for k, v in f["values"].items()), False))
        if f.get("error") is not None and f.get("bound") is not None:
            details.append(("|difference| ", f"{_num(f['error'])} > bound {_num(f['bound'])}", False))
        return cls(" vs ".join(f.get("pair") or ()) or f["kind"], f["kind"], f["message"], details)


def _finding_lines(f: dict[str, Any]) -> list[str]:
    s = _Shown.of(f)
    lines = [f"- **{s.pair}** ({s.kind}): {s.message}"]
    lines += [f"  - {label}" + (f"`{text}`" if code else text) for label, text, code in s.details]
    return lines


def _finding_html(f: dict[str, Any]) -> str:
    """A finding as HTML: the Markdown's list, marked up."""
    e = html.escape
    s = _Shown.of(f)
    items = "".join(
        f"<li>{e(label)}" + (f"<code>{e(text)}</code>" if code else e(text)) + "</li>"
        for label, text, code in s.details
    )
    return f"<li><b>{e(s.pair)}</b> ({e(s.kind)}): {e(s.message)}" + (f"<ul>{items}</ul>" if items else "") + "</li>"


def _skip_reasons(report: dict[str, Any]) -> list[tuple[str, list[str]]]:
    """The samples skipped, by reason (each said once): the reason and the
    samples it skipped (``op[dtype] sample k``), reasons in the order first met."""
    by: dict[str, list[str]] = {}
    for r in report["samples"]:
        if r["status"] == "skipped":
            by.setdefault(_one_line(r.get("reason") or "no reason given"), []).append(
                f"{r['task']}[{r['dtype']}] sample {r['sample']}"
            )
    return list(by.items())


def _some(names: list[str], most: int = 8) -> str:
    return ", ".join(names[:most]) + (f" and {len(names) - most} more" if len(names) > most else "")


def _known_text(k: dict[str, str]) -> str:
    return f"{k['kind']} of `{k['test']}`" + (f" ({k['reason']})" if k.get("reason") else "")


def to_markdown(report: dict[str, Any]) -> str:
    t = report["totals"]
    lines = ["# gradverify audit", "", f"**{totals_line(t)}**", "", f"`{report['command']}` ({report['created']})", ""]
    versions = report["environment"]["versions"]
    lines.append(f"torch {versions.get('torch')}, gradverify {versions.get('gradverify')}; " + _config_text(report))
    failed = [r for r in report["samples"] if r["status"] == "failed"]
    for title, group in (
        ("New", [r for r in failed if not r.get("known")]),
        ("Known", [r for r in failed if r.get("known")]),
    ):
        lines += ["", f"## {title} failures ({len(group)})"]
        for r in group:
            lines += ["", f"### {r['task']} [{r['dtype']}] sample {r['sample']}", ""]
            if r.get("known"):
                lines.append(f"- known to PyTorch: {_known_text(r['known'])}")
            for f in r.get("findings", []):
                lines += _finding_lines(f)
            lines.append(f"- reproduce: `python {script_name(r)}` (in the report directory)")
    problems = [r for r in report["samples"] if r["status"] in ("error", "timeout", "crashed")]
    if problems:
        lines += ["", f"## Not checked: errors, timeouts, crashes ({len(problems)})", ""]
        for r in problems:
            lines.append(f"- {r['task']} [{r['dtype']}] sample {r['sample']}: {r['status']}: {_one_line(r['reason'])}")
    skips = _skip_reasons(report)
    if skips:
        lines += ["", f"## Skipped ({sum(len(n) for _, n in skips)} samples)", ""]
        lines += [f"- {reason} ({len(names)}): {_some(names)}" for reason, names in skips]
    lines += ["", "## Operators", "", "| operator | dtype | verdict | samples |", "|---|---|---|---|"]
    for o in report["operators"]:
        verdict = o["verdict"] + (" (new)" if o["new"] else " (known)" if o["verdict"] == "failed" else "")
        counts = ", ".join(f"{n} {s}" for s, n in o["samples"].items())
        lines.append(f"| {o['op']} | {o['dtype']} | {verdict} | {counts} |")
    return "\n".join(lines) + "\n"


def _one_line(text: str, most: int = 240) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= most else text[: most - 3] + "..."


def _config_text(report: dict[str, Any]) -> str:
    c = report["config"]
    said = ("framework", "torch")  # (in the versions beside it)
    return ", ".join(f"{k} {v}" for k, v in c.items() if k not in said and v not in (None, [], ()))


def to_json(report: dict[str, Any]) -> str:
    return _io.to_json(report) + "\n"


def to_junit(report: dict[str, Any]) -> str:
    """A suite per dtype, a test case per sample: a new failure is a failure,
    a known one is skipped with PyTorch's reason, an error, timeout or crash is an error."""
    suites = ET.Element("testsuites", name="gradverify audit")
    by_dtype: dict[str, list[dict[str, Any]]] = {}
    for r in report["samples"]:
        by_dtype.setdefault(r["dtype"], []).append(r)
    for dtype, recs in by_dtype.items():
        counts = Counter(r["status"] for r in recs)
        new = sum(r["status"] == "failed" and not r.get("known") for r in recs)
        suite = ET.SubElement(
            suites,
            "testsuite",
            name=f"gradverify.audit.{dtype}",
            tests=str(len(recs)),
            failures=str(new),
            errors=str(counts["error"] + counts["timeout"] + counts["crashed"]),
            skipped=str(counts["skipped"] + counts["failed"] - new),
            time=f"{sum(float(r.get('seconds') or 0) for r in recs):.3f}",
            timestamp=report["created"],
        )
        for r in recs:
            tc = ET.SubElement(
                suite,
                "testcase",
                classname=f"gradverify.audit.{r['task']}",
                name=f"{dtype}-sample{r['sample']}",
                time=f"{float(r.get('seconds') or 0):.3f}",
            )
            if r["status"] == "failed":
                text = "\n".join(ln for f in r.get("findings", []) for ln in _finding_lines(f))
                if r.get("known"):
                    ET.SubElement(tc, "skipped", message="known: " + _known_text(r["known"])).text = text
                else:
                    first = (r.get("findings") or [{"message": "failed", "kind": "mismatch"}])[0]
                    el = ET.SubElement(tc, "failure", message=first["message"][:500], type=str(first["kind"]))
                    el.text = r.get("report", text)
            elif r["status"] in ("error", "timeout", "crashed"):
                ET.SubElement(tc, "error", message=_one_line(r["reason"], 500), type=r["status"])
            elif r["status"] == "skipped":
                ET.SubElement(tc, "skipped", message=_one_line(r["reason"], 500))
    ET.indent(suites)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"


_CSS = """
td.failed{background:#fbb;font-weight:bold}td.passed{background:#dfd}td.skipped{color:#888}
td.error,td.timeout,td.crashed{background:#fd8}td.inconclusive{background:#eee}
ul.findings{padding-left:1.2em}span.error,span.timeout,span.crashed{background:#fd8}
"""


def to_html(report: dict[str, Any]) -> str:
    e = html.escape
    t = report["totals"]
    out = [f"<p><b>{e(totals_line(t))}</b> &mdash; <code>{e(report['command'])}</code> ({e(report['created'])})</p>"]
    versions = report["environment"]["versions"]
    config = f"torch {versions.get('torch')}, gradverify {versions.get('gradverify')}; " + _config_text(report)
    out.append(f"<p>{e(config)}</p>")
    # the operators by verdict, first: what a maintainer reads before the details
    counts = {s: n for s, n in t["operators"].items() if n}
    out.append('<table id="verdicts"><tr>' + "".join(f"<th>{e(s)}</th>" for s in counts) + "</tr><tr>")
    out.append("".join(f'<td class="{e(s)}">{n}</td>' for s, n in counts.items()) + "</tr></table>")
    failed = [r for r in report["samples"] if r["status"] == "failed"]
    for title, group in (
        ("New", [r for r in failed if not r.get("known")]),
        ("Known", [r for r in failed if r.get("known")]),
    ):
        out.append(f"<h2>{title} failures ({len(group)})</h2>")
        for r in group:
            anchor = e(f"{r['task']}-{r['dtype']}-{r['sample']}")
            out.append(f'<h3 id="{anchor}">{e(r["task"])} [{e(r["dtype"])}] sample {r["sample"]}</h3>')
            if r.get("known"):
                out.append(f"<p>known to PyTorch: {e(_known_text(r['known']))}</p>")
            out.append('<ul class="findings">' + "".join(_finding_html(f) for f in r.get("findings", [])) + "</ul>")
            out.append(f'<p>reproduce: <a href="{e(script_name(r))}"><code>python {e(script_name(r))}</code></a></p>')
    out += _not_checked_html(report)
    out.append('<h2>Operators</h2><table id="operators"><thead><tr><th>operator</th><th>dtype</th><th>verdict</th>')
    out.append("<th>samples</th></tr></thead><tbody>")
    for o in report["operators"]:
        label = o["verdict"] + (" (new)" if o["new"] else " (known)" if o["verdict"] == "failed" else "")
        counts = ", ".join(f"{n} {s}" for s, n in o["samples"].items())
        out.append(
            f'<tr><td class="text">{e(o["op"])}</td><td>{e(o["dtype"])}</td>'
            f'<td class="{e(o["verdict"])}">{e(label)}</td><td>{e(counts)}</td></tr>'
        )
    out.append("</tbody></table>")
    return _io.html_page("gradverify audit", out, _CSS)


def _not_checked_html(report: dict[str, Any]) -> list[str]:
    """The samples not checked: errors, timeouts and crashes one by one, and
    the skipped ones by reason."""
    e = html.escape
    out = []
    problems = [r for r in report["samples"] if r["status"] in ("error", "timeout", "crashed")]
    if problems:
        out.append(f'<h2>Not checked: errors, timeouts, crashes ({len(problems)})</h2><ul id="problems">')
        for r in problems:
            where = f"{r['task']} [{r['dtype']}] sample {r['sample']}"
            out.append(
                f'<li>{e(where)}: <span class="{e(r["status"])}">{e(r["status"])}</span>: '
                f"{e(_one_line(r['reason']))}</li>"
            )
        out.append("</ul>")
    skips = _skip_reasons(report)
    if skips:
        out.append(f"<h2>Skipped ({sum(len(n) for _, n in skips)} samples)</h2>")
        out.append('<table id="skipped"><thead><tr><th>reason</th><th>samples</th><th>which</th></tr></thead><tbody>')
        for reason, names in skips:
            out.append(
                f'<tr><td class="text">{e(reason)}</td><td>{len(names)}</td>'
                f'<td class="text">{e(_some(names))}</td></tr>'
            )
        out.append("</tbody></table>")
    return out


RENDER = {"json": to_json, "md": to_markdown, "junit": to_junit, "html": to_html}
