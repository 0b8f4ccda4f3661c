"""Triage's reports: the JUnit triage table and the rerun records, as
Markdown, HTML (one page shell with the sweep report, ``_io.html_page``) and
JSON (``gradverify-triage-junit/1``, ``gradverify-triage-rerun/1``), written
whole or not at all."""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import _io
from .rerun import outcome

if TYPE_CHECKING:
    from .junit import JunitRow, Run
    from .rerun import Triage

__all__ = [
    "EVIDENCE_KEYS",
    "MAX_FILES",
    "JUNIT_SCHEMA",
    "RERUN_SCHEMA",
    "Row",
    "failing_lines",
    "junit_html",
    "junit_markdown",
    "node_text",
    "rerun_html",
    "rerun_markdown",
    "rerun_record",
    "separating_lines",
    "write_junit",
    "write_rerun",
]

JUNIT_SCHEMA = "gradverify-triage-junit/1"
RERUN_SCHEMA = "gradverify-triage-rerun/1"
_STYLE = ".verdict{font-weight:bold}td,th{text-align:left}"

Row = Mapping[str, Any]  # a JunitRow, or one read back from JSON


# -- JUnit triage ---------------------------------------------------------------------------------
def _failures_cell(r: Row) -> str:
    cell = f"{r['failures']} / {r['runs']}"
    if r.get("passed_on_rerun"):
        cell += (
            f" ({r['passed_on_rerun']} passed on a rerun; {r['failed_attempts']} of {r['attempts']} attempts failed)"
        )
    return cell


def _interval(r: Row) -> str:
    lo, hi = r["interval95"]
    return f"{lo:.2f} - {hi:.2f}"


def _flip(r: Row) -> str:
    return f"{r['flip_rate']:.2f} ({_interval(r)})"


def separating_lines(r: Row) -> list[str]:
    """Each field that separates a test's failing runs from its passing ones, in words."""
    return [f"{f}: fails on {v['failing']}, passes on {v['passing']}" for f, v in r["separating_fields"].items()]


def _worst_first(rows: Sequence[Row]) -> list[Row]:
    return sorted(rows, key=lambda r: (-r["failures"], r["test"]))


def _name(r: Row) -> str:
    """The test as pytest names it (rows from before node ids: JUnit's id)."""
    return r.get("nodeid") or r["test"]


#: At most this many failing files are listed per test.
MAX_FILES = 10


def failing_lines(r: Row) -> list[str]:
    """A failing test's seeds and files, and the commands that run it again."""
    if not r["failures"]:
        return []
    lines = []
    if r.get("failing_seeds"):
        passing = f" (passing: {', '.join(r['passing_seeds'])})" if r.get("passing_seeds") else ""
        lines.append(f"failing seeds: {', '.join(r['failing_seeds'])}{passing}")
        seed = r["failing_seeds"][0]
        if r.get("seed_field") == "triage.seed":
            lines.append(f"a failing run: pytest '{_name(r)}' --gradverify-seed {seed} --hypothesis-seed {seed}")
        else:
            lines.append(f"a failing run: pytest '{_name(r)}' with @pytest.mark.gradverify(seed={seed}) on the test")
    if r.get("failing_inputs"):
        lines.append(f"failing input: {r['failing_inputs'][0]} (arg0, ...: np.load(path))")
    files = r["failing_files"]
    lines.append(
        f"failing in: {', '.join(files[:MAX_FILES])}"
        + (f" and {len(files) - MAX_FILES} more" if len(files) > MAX_FILES else "")
    )
    lines.append(f"its gradient calls rerun: gradverify triage rerun '{_name(r)}'")
    return lines


def _failed_line(rows: Sequence[Row], files: int) -> str:
    return f"{files} run(s); {sum(r['failures'] > 0 for r in rows)} test(s) failed at least once."


def junit_markdown(rows: Sequence[Row], files: int) -> str:
    lines = [
        "# gradverify triage (JUnit)",
        "",
        _failed_line(rows, files),
        "",
        "| test | failures / runs | flip rate (95% interval) | verdict | separating fields |",
        "|---|---|---|---|---|",
    ]
    for r in _worst_first(rows):
        sep = "; ".join(separating_lines(r))
        lines.append(f"| {_name(r)} | {_failures_cell(r)} | {_flip(r)} | {r['verdict']} | {sep or '-'} |")
    for r in _worst_first(rows):
        if r["failures"]:
            lines += ["", f"## {_name(r)}: {r['verdict']}", "", *(f"- {ln}" for ln in failing_lines(r))]
    return "\n".join(lines) + "\n"


def junit_html(rows: Sequence[Row], files: int) -> str:
    e = html.escape
    body = [
        f"<p>{e(_failed_line(rows, files))}</p>",
        '<table id="tests"><tr><th>test</th><th>failures / runs</th><th>flip rate (95% interval)</th>'
        "<th>verdict</th><th>separating fields</th></tr>",
    ]
    for r in _worst_first(rows):
        sep = "; ".join(separating_lines(r))
        name = e(_name(r))
        cell = f'<a href="#{name}">{name}</a>' if r["failures"] else name
        body.append(
            f'<tr><td class="text">{cell}</td><td>{e(_failures_cell(r))}</td><td>{_flip(r)}</td>'
            f'<td class="verdict">{e(r["verdict"])}</td><td class="text">{e(sep or "-")}</td></tr>'
        )
    body.append("</table>")
    for r in _worst_first(rows):
        if r["failures"]:
            items = []
            for ln in failing_lines(r):
                if ln.startswith("failing in: "):  # (each failing run's file, a link to it)
                    links = ", ".join(f'<a href="{e(f)}">{e(f)}</a>' for f in r["failing_files"][:MAX_FILES])
                    items.append(f"failing in: {links}")
                else:
                    items.append(e(ln))
            body.append(f'<h2 id="{e(_name(r))}">{e(_name(r))}: {e(r["verdict"])}</h2>')
            body.append("<ul>" + "".join(f"<li>{i}</li>" for i in items) + "</ul>")
    return _io.html_page("gradverify triage (JUnit)", body, _STYLE)


def write_junit(directory: str, runs: Sequence[Run], rows: Sequence[JunitRow]) -> None:
    """triage.md, triage.json and triage.html under ``directory``."""
    data = {"schema": JUNIT_SCHEMA, "files": [r.file for r in runs], "tests": rows}
    texts = {
        "triage.md": junit_markdown(rows, len(runs)),
        "triage.json": _io.to_json(data) + "\n",
        "triage.html": junit_html(rows, len(runs)),
    }
    for name, text in texts.items():
        _io.atomic_write(Path(directory) / name, text)


# -- reruns ---------------------------------------------------------------------------------------
def rerun_record(target: str, result: Triage, reproduce: str) -> dict[str, Any]:
    """A JSON-ready record of one rerun: verdict, evidence, the first failing
    input exactly, and the command that reproduces the triage."""
    example = result.example
    return {
        "target": target,
        "verdict": result.verdict,
        "evidence": result.evidence.to_dict(),
        "example": None if example is None else [_io.exact(np.asarray(_io.to_numpy(a))) for a in example],
        "check": None if result.check is None else str(result.check),
        "reproduce": reproduce,
    }


EVIDENCE_KEYS = ("region", "minimal_case", "kink_distances", "proposed_tolerance", "nondeterminism")


def _evidence_line(r: Mapping[str, Any]) -> str:
    """One line of a record's evidence: its inputs, or its CI runs and calls."""
    ev = r.get("evidence")
    parts = []
    if ev is not None:
        parts.append(
            f"{ev['failing_examples']} / {ev['examples']} inputs failed (seeds {ev['failing_seeds'] or 'none'})"
        )
        parts += [f"{k}: {ev[k]}" for k in EVIDENCE_KEYS if ev.get(k)]
    runs = r.get("runs")
    if runs is not None:
        parts.append(f"{runs['failures']} / {runs['runs']} runs failed ({_interval(runs)})")
        parts += separating_lines(runs)
    for c in r.get("calls", ()):
        parts.append(f"{c['call']} {c['function']}: {c['verdict']}")
    return "; ".join(parts) or "-"


def _failure_lines(ev: Mapping[str, Any]) -> list[str]:
    lines = []
    for f in ev.get("failures", ()):
        sweep = f.get("fd_sweep") or {}
        shown = ", ".join(f"{d}: {outcome(v)}" for d, v in (f.get("dtypes") or {}).items())
        lines.append(
            f"- seed {f['seed']}: error {f['test_error']:.3g}, confirmed by gv.check: {f['confirmed']}, "
            f"kink distance {f['kink_distance']}; FD step sweep {sweep.get('trend', '-')}; dtypes {shown or '-'}"
        )
    return lines


def rerun_markdown(records: Sequence[Mapping[str, Any]]) -> str:
    lines = ["# gradverify triage (rerun)", "", "| target | verdict | evidence |", "|---|---|---|"]
    for r in records:
        lines.append(f"| {r['target']} | **{r['verdict']}** | {_evidence_line(r)} |")
    for r in records:
        lines += ["", f"## {r['target']}: {r['verdict']}", "", f"reproduce: `{r['reproduce']}`"]
        if r.get("runs"):
            lines += ["", *(f"- {ln}" for ln in _run_lines(r["runs"]))]
        for c in [r, *r.get("calls", ())]:
            if c is not r:
                lines += ["", f"### {c['call']} {c['function']}: {c['verdict']}"]
            if c.get("evidence"):
                lines += ["", *_failure_lines(c["evidence"])]
            if c.get("example"):
                minimal = "minimal_case" in (c.get("evidence") or {})
                lines += ["", "minimal failing input (shrunk):" if minimal else "first failing input:"]
                lines += [f"- `arg{k}` {a['dtype']}{a['shape']}: `{a['values']}`" for k, a in enumerate(c["example"])]
            if c.get("check"):
                lines += ["", "```", c["check"], "```"]
    return "\n".join(lines) + "\n"


def rerun_html(records: Sequence[Mapping[str, Any]]) -> str:
    e = html.escape
    body = ['<table id="verdicts"><tr><th>target</th><th>verdict</th><th>evidence</th></tr>']
    for r in records:
        body.append(
            f'<tr><td class="text"><a href="#{e(r["target"])}">{e(r["target"])}</a></td>'
            f'<td class="verdict">{e(r["verdict"])}</td><td class="text">{e(_evidence_line(r))}</td></tr>'
        )
    body.append("</table>")
    for r in records:
        body.append(f'<h2 id="{e(r["target"])}">{e(r["target"])}: {e(r["verdict"])}</h2>')
        body.append(f"<p>reproduce: <code>{e(r['reproduce'])}</code></p>")
        if r.get("runs"):
            body.append("<ul>" + "".join(f"<li>{e(ln)}</li>" for ln in _run_lines(r["runs"])) + "</ul>")
        for c in [r, *r.get("calls", ())]:
            if c is not r:
                body.append(f"<h3>{e(c['call'])} {e(c['function'])}: {e(c['verdict'])}</h3>")
            if c.get("evidence"):
                body.append("<ul>" + "".join(f"<li>{e(ln[2:])}</li>" for ln in _failure_lines(c["evidence"])) + "</ul>")
            if c.get("check"):
                body.append(f"<pre>{e(c['check'])}</pre>")
    return _io.html_page("gradverify triage (rerun)", body, _STYLE)


def write_rerun(directory: str, records: Sequence[Mapping[str, Any]]) -> None:
    """triage-rerun.json, .md and .html under ``directory``."""
    texts = {
        "triage-rerun.json": _io.to_json({"schema": RERUN_SCHEMA, "records": records}) + "\n",
        "triage-rerun.md": rerun_markdown(records),
        "triage-rerun.html": rerun_html(records),
    }
    for name, text in texts.items():
        _io.atomic_write(Path(directory) / name, text)


def _run_lines(runs: Row) -> list[str]:
    """What a triaged node's own CI runs say: the fields that separate its
    failures, its failing seeds and a command that fails (its runs' files are
    triage's own, gone with it)."""
    keep = [ln for ln in failing_lines(runs) if not ln.startswith(("failing in:", "its gradient calls"))]
    return [*separating_lines(runs), *keep]


def node_text(t: Mapping[str, Any], threads: Sequence[int], reproduce: str) -> str:
    """A triaged test on the console: its verdict, its CI runs, each gradient call."""
    lines = [f"{t['test']}: {t['verdict']}"]
    runs = t["runs"]
    if runs is not None:
        failed = f"{runs['failures']} of {runs['runs']} failed ({_interval(runs)})"
        lines.append(f"  CI runs (seeds x threads {list(threads)}): {failed}")
        lines += [f"  {s}" for s in _run_lines(runs)]
    for c in t["calls"]:
        ev = c["evidence"]
        inputs = f"{ev['failing_examples']} of {ev['examples']} inputs failed"
        lines.append(f"  {c['call']} {c['function']}: {c['verdict']} ({inputs})")
        lines += [f"    {k}: {ev[k]}" for k in EVIDENCE_KEYS if ev.get(k) is not None]
    if not t["calls"]:
        lines.append("  no gv.check / gv.verify call in the test: the verdict rests on its runs alone")
    lines.append(f"  reproduce: {reproduce}")
    return "\n".join(lines)
