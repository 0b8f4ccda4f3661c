"""What gradverify writes: whole or not at all, readable as any file the user
makes, values exact."""

from __future__ import annotations

import json
import math
import os
import stat

import numpy as np
import pytest

from gradverify import _io


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_a_written_file_has_the_permissions_the_umask_gives(tmp_path, umask):
    before = os.umask(umask)
    try:
        path = _io.atomic_write(tmp_path / "deep" / "report.md", "# report\n")
    finally:
        os.umask(before)
    assert path.read_text() == "# report\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask


def test_a_write_that_fails_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "results.json"
    _io.atomic_write(path, b'{"old": 1}')

    def half(f):
        f.write(b'{"new": ')
        raise RuntimeError("interrupted")

    with pytest.raises(RuntimeError, match="interrupted"):
        _io.atomic_write(path, half)
    assert json.loads(path.read_text()) == {"old": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.json"]


def test_arrays_round_trip_exactly(tmp_path):
    a = np.array([0.1, -0.0, 5e-324, np.nan, np.inf], dtype=np.float64)
    b = np.arange(6, dtype=np.int32).reshape(2, 3)
    path = _io.write_npz(tmp_path / "case.npz", [a, b])
    with np.load(path) as data:
        assert np.array_equal(data["arg0"], a, equal_nan=True) and np.signbit(data["arg0"][1])
        assert data["arg1"].dtype == np.int32 and np.array_equal(data["arg1"], b)
    e = _io.exact(a)
    assert [float.fromhex(h) for h in e["hex"][:3]] == [0.1, -0.0, 5e-324] and e["dtype"] == "float64"
    text = _io.to_json({"x": [1.0, math.nan, -math.inf], "e": e})
    back = json.loads(text)  # strict JSON: no NaN literal
    assert back["x"] == [1.0, "nan", "-inf"] and float(back["x"][1]) != float(back["x"][1])


def test_every_page_comes_from_one_shell():
    from gradverify._sweep import reports
    from gradverify._triage import render as _reports_triage

    page = _io.html_page("a <b> & c", ["<p>x</p>"], "td{color:red}")
    assert page.startswith("<!doctype html>\n") and page.endswith("</body></html>\n")
    assert "<title>a &lt;b&gt; &amp; c</title>" in page and "<h1>a &lt;b&gt; &amp; c</h1>" in page
    assert _io.PAGE_CSS + "td{color:red}" in page and "<p>x</p>" in page
    triage = _reports_triage.junit_html([], 0)
    report = reports.to_html(reports.build([], command="gradverify check x", seed=0))
    for html_text in (triage, report):
        assert html_text.startswith("<!doctype html>") and _io.PAGE_CSS in html_text
