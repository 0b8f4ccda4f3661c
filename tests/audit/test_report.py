"""An audit's report rendered from records as results.jsonl keeps them:
JSON has no NaN or inf, so a non-finite value comes back as a string."""

from __future__ import annotations

import json

from gradverify import _io
from gradverify._audit import report


def _record(values):
    finding = {
        "kind": "nonfinite_gradient",
        "level": "error",
        "message": "reverse mode returned nan",
        "pair": ["VJP", "output"],
        "argument": 0,
        "input_index": [0],
        "output_index": [0],
        "values": values,
        "error": None,
        "bound": None,
    }
    rec = {"task": "spence", "name": "spence", "variant": "", "dtype": "float64", "sample": 0, "index": 0}
    return {**rec, "status": "failed", "seconds": 0.1, "findings": [finding], "known": None, "report": "..."}


def test_non_finite_values_read_back_from_results_render_in_every_format():
    rec = json.loads(_io.to_json(_record({"VJP": float("nan"), "output": float("inf")}), indent=None))
    assert rec["findings"][0]["values"] == {"VJP": "nan", "output": "inf"}  # (as the results file keeps them)
    built = report.build([rec], command="gradverify audit torch", config={})
    md = report.to_markdown(built)
    assert "values: VJP = nan, output = inf" in md and "## New failures (1)" in md
    assert 'failures="1"' in report.to_junit(built) and "VJP = nan" in report.to_html(built)


def _sample(task, sample, status, **fields):
    rec = {"task": task, "name": task, "variant": "", "dtype": "float64", "sample": sample, "index": 0}
    return {**rec, "status": status, "seconds": 0.1, **fields}


def _mismatch():
    return {
        "kind": "mismatch",
        "level": "error",
        "message": "forward mode disagrees with finite differences: d output[0] / d arg0[0]",
        "pair": ["JVP", "FD"],
        "argument": 0,
        "input_index": [0],
        "output_index": [0],
        "values": {"JVP": 0.0, "FD": 1.5},
        "error": 1.5,
        "bound": 1e-9,
    }


#: Two samples skipped for one reason, one for another, one lost to a timeout.
NOT_CHECKED = [
    _sample("cumprod", 0, "skipped", reason="larger than --max-size 4096"),
    _sample("cumprod", 1, "skipped", reason="larger than --max-size 4096"),
    _sample("nonzero", 0, "skipped", reason="no differentiable floating argument"),
    _sample("slow_op", 2, "timeout", reason="no answer in 60 s"),
]


def test_the_html_renders_findings_as_html_not_markdown():
    failed = _sample("scatter_reduce.prod", 0, "failed", findings=[_mismatch()], known=None, report="...")
    page = report.to_html(report.build([failed], command="gradverify audit torch", config={}))
    body = page[page.index("<body>") :]
    assert "**" not in body and "`" not in body and "- <" not in body  # (no Markdown left)
    assert '<ul class="findings"><li><b>JVP vs FD</b> (mismatch): forward mode disagrees' in body
    assert "<li>element: <code>d output[0] / d arg0[0]</code></li>" in body
    assert "<li>values: JVP = 0, FD = 1.5</li><li>|difference| 1.5 &gt; bound 1e-09</li>" in body
    md = report.to_markdown(report.build([failed], command="gradverify audit torch", config={}))
    assert "- **JVP vs FD** (mismatch): forward mode" in md and "  - element: `d output[0] / d arg0[0]`" in md


def test_the_html_and_the_markdown_say_why_samples_were_skipped_each_reason_once():
    built = report.build(NOT_CHECKED, command="gradverify audit torch", config={})
    page = report.to_html(built)
    skipped = page[page.index('<table id="skipped">') :]
    assert skipped.count("larger than --max-size 4096") == 1 and skipped.count("no differentiable floating") == 1
    assert '<td class="text">larger than --max-size 4096</td><td>2</td>' in skipped
    assert "cumprod[float64] sample 0, cumprod[float64] sample 1" in skipped and "<h2>Skipped (3 samples)</h2>" in page
    assert "slow_op [float64] sample 2: <span" in page and "no answer in 60 s" in page  # (errors and timeouts too)
    md = report.to_markdown(built)
    assert "## Skipped (3 samples)" in md and "- larger than --max-size 4096 (2): cumprod[float64] sample 0" in md
