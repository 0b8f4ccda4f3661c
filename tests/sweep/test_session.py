"""A pytest session's report (``--gradverify-report DIR``): the set of files
the command writes for a sweep, rendered from the plugin's records, and
``gradverify report`` renders its JSON again."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET

import pytest

from gradverify import cli
from gradverify._errors import ArgumentValueError
from gradverify._sweep import reports, session

from ._helpers import LONG_NODEID, session_report


def test_the_plugin_writes_json_markdown_junit_and_html(tmp_path):
    written = session.write(session_report(), tmp_path)
    assert sorted(p.rsplit("/", 1)[1] for p in written) == sorted(session.FILES.values())
    data = json.loads((tmp_path / "gradverify-pytest.json").read_text())
    assert data["schema"] == session.SCHEMA and [r["ok"] for r in data["records"]] == [True, False]  # (by node id)
    md = (tmp_path / "gradverify-pytest.md").read_text()
    assert "**2 gradient check(s) in 2 test(s), 1 failed**" in md and f"## FAILED {LONG_NODEID}:" in md
    assert re.search(r"\| tests/test_act.py::test_right \| verify \| fused_swish \| \w* \| passed \| 0\.\d+ \|", md)
    suite = ET.parse(tmp_path / "gradverify-pytest.xml").getroot().find("testsuite")
    assert (suite.get("tests"), suite.get("failures")) == ("2", "1")
    (failure,) = suite.iter("failure")
    assert failure.get("type") == "JVP vs FD" and "gradverify.verify FAILED" in failure.text
    page = (tmp_path / "gradverify-pytest.html").read_text()
    assert page.count("<tr>") == 3 and '<td class="text">tests/test_act.py::test_right</td>' in page
    assert "<pre>gradverify.verify FAILED" in page and re.search(r"<li>\|error\| [\d.e+-]+ &gt; bound", page)


def test_gradverify_report_renders_the_sessions_json(tmp_path, capsys):
    session.write(session_report(), tmp_path)
    path = tmp_path / "gradverify-pytest.json"
    assert reports.load(path)["schema"] == session.SCHEMA
    for fmt in ("html", "md"):
        assert cli.main(["report", str(path), "--format", fmt, "--output", str(tmp_path / f"again.{fmt}")]) == 0
    assert (tmp_path / "again.html").read_text() == (tmp_path / "gradverify-pytest.html").read_text()
    assert (tmp_path / "again.md").read_text() == (tmp_path / "gradverify-pytest.md").read_text()


def test_a_session_report_without_its_records_is_refused_saying_what_is_missing(tmp_path):
    path = tmp_path / "gradverify-pytest.json"
    path.write_text(json.dumps({"schema": session.SCHEMA, "records": [{"nodeid": "t.py::a"}]}))
    with pytest.raises(ArgumentValueError, match=r"records, each with nodeid, call, function and ok.*records\[0\]"):
        reports.load(path)
    path.write_text(json.dumps({"schema": "gradverify-pytest/0"}))
    with pytest.raises(ArgumentValueError, match="'gradverify-pytest/1' \\(pytest's\\)"):
        reports.load(path)
