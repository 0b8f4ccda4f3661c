"""Every page gradverify writes fits a 1280-pixel window in headless
Chromium: nothing runs past the window's right edge, nothing is cut, and
only a box made to scroll sideways (a matrix too wide for any page) does.
Pages: a ``check all`` matrix, a failure's page (its plots, and its Jacobian
at the largest size a full-Jacobian check draws), an audit's and a pytest
session's. The helper is ``tests._helpers.assert_fits``, for any page."""

from __future__ import annotations

import json

import numpy as np
import pytest

from gradverify._audit import report as audit_report
from gradverify._check.probes import FULL_MAX_IN, FULL_MAX_OUT
from gradverify._sweep import reports, session

from .._helpers import assert_fits
from ._helpers import LONG_LINE, matrix_report, session_report

pytestmark = pytest.mark.slow


def test_the_check_all_matrix_fits_the_page(tmp_path):
    reports.write(matrix_report(), tmp_path, ["html"])
    assert_fits(tmp_path / "report.html")


def test_a_matrix_wider_than_the_page_scrolls_in_its_own_box(tmp_path):
    reports.write(matrix_report(dtypes=("float16", "bfloat16", "float32", "float64")), tmp_path, ["html"])
    got = assert_fits(tmp_path / "report.html")
    assert got["scrolls"] == [["div.scroll", True]], got  # the matrix's box, and nothing else


def _jacobian(m: int, n: int) -> dict:
    rng = np.random.default_rng(0)
    ad = rng.normal(size=(m, n))
    fd = ad + (rng.random((m, n)) < 0.1)
    return {"pair": ["VJP", "FD"], "output_shape": [m], "arguments": [{"argument": 0, "shape": [n]}],
            "VJP": ad.tolist(), "FD": fd.tolist(), "over": np.argwhere(fd != ad).tolist()}  # fmt: skip


@pytest.mark.parametrize("shape", [(FULL_MAX_OUT, FULL_MAX_IN), (1, FULL_MAX_IN), (FULL_MAX_OUT, 1)])
def test_a_failure_fits_the_page_with_its_jacobian_at_its_largest(failing_report, tmp_path, shape):
    assert_fits(failing_report / "report.html")  # as the command wrote it
    data = json.loads((failing_report / "report.json").read_text())
    f = data["cases"][0]["failure"]
    f.update(argument=0, input_index=[0], output_index=[0], jacobian=_jacobian(*shape))
    f["report"] += "\n" + LONG_LINE  # (a line no window holds: it wraps)
    page = tmp_path / "report.html"
    page.write_text(reports.to_html(data))
    assert_fits(page)


def test_the_audit_page_fits(tmp_path):
    long_op = "nn.functional." + "scaled_dot_product_attention_" * 8
    finding = {
        "kind": "mismatch", "level": "error", "pair": ["JVP", "FD"], "argument": 0,
        "message": "forward mode disagrees with finite differences: " + "d output[0, 1, 2] / d arg0[0, 1, 2] " * 10,
        "input_index": list(range(12)), "output_index": list(range(12)), "values": {"JVP": 0.0, "FD": 1.5},
        "error": 1.5, "bound": 1e-9,
    }  # fmt: skip
    base = {"name": long_op, "variant": "", "dtype": "float64", "index": 0, "seconds": 0.1}
    records = [
        {**base, "task": long_op, "sample": 0, "status": "failed", "findings": [finding], "known": None},
        {**base, "task": long_op, "sample": 1, "status": "skipped", "reason": "gradverify: " + LONG_LINE},
        {**base, "task": long_op, "sample": 2, "status": "error", "reason": "RuntimeError: " + LONG_LINE},
    ]
    built = audit_report.build(records, command="gradverify audit torch --ops " + long_op, config={"ops": [long_op]})
    audit_report.write(built, tmp_path, ["html"])
    assert_fits(tmp_path / "report.html")


def test_the_pytest_session_page_fits(tmp_path):
    session.write(session_report(), tmp_path)
    assert_fits(tmp_path / session.FILES["html"])


@pytest.mark.parametrize(
    ("body", "said"),
    [
        ("<table><tr><td>" + "x" * 400 + "</td></tr></table>", "px wide in a 1280 px window"),
        ('<pre style="overflow-x:auto;white-space:pre">' + "x" * 400 + "</pre>", "scroll sideways.*'pre'"),
        ('<div style="overflow:hidden;white-space:nowrap">' + "x" * 400 + "</div>", "cut their content.*'div'"),
    ],
)
def test_the_check_catches_a_page_too_wide_a_box_that_scrolls_and_one_that_cuts(tmp_path, body, said):
    page = tmp_path / "page.html"
    page.write_text(f"<!doctype html><html><body>{body}</body></html>")
    with pytest.raises(AssertionError, match=said):
        assert_fits(page)
