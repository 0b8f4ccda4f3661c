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
