"""gradverify triage junit: real JUnit files written by pytest (with the
gradverify plugin recording the environment) from ten runs, one test failing
on the runners with one thread: flagged, with the field named; hostile or
broken files get a clear error; a row is the JSON object it is written as."""

from __future__ import annotations

import json

import pytest

from gradverify import cli
from gradverify._triage import junit as _triage_junit

from ._helpers import TableCells, gv_json

pytest_plugins = ["pytester"]


SUITE = """
import os

def test_thread_sensitive():
    assert os.environ.get("OMP_NUM_THREADS") != "1"

def test_always_wrong():
    assert 1 + 1 == 3

def test_fine():
    assert True
"""


@pytest.fixture
def ten_runs(pytester, monkeypatch):
    pytester.makepyfile(test_ci=SUITE)
    files = []
    for k in range(10):
        threads = "1" if k in (2, 5, 7) else "4"
        monkeypatch.setenv("OMP_NUM_THREADS", threads)
        path = pytester.path / f"run{k}.xml"
        pytester.runpytest(f"--junitxml={path}", "-p", "no:cacheprovider", "-q")
        files.append(str(path))
    return files


def test_ten_runs_one_test_failing_on_one_thread_count(ten_runs):
    import gradverify as gv

    runs = _triage_junit.read_junit(ten_runs)
    assert len(runs) == 10 and runs[0].env["env.omp_num_threads"] in ("1", "4")
    rows = {r["test"].split("::")[-1]: r for r in gv.triage_junit(ten_runs)}
    t = rows["test_thread_sensitive"]
    assert (t["failures"], t["runs"]) == (3, 10)
    assert t["verdict"] == "environment-specific"
    assert t["separating_fields"] == {"env.omp_num_threads": {"failing": ["1"], "passing": ["4"]}}
    lo, hi = t["interval95"]
    assert lo < 0.3 < hi and 0.05 < lo and hi < 0.65
    assert rows["test_always_wrong"]["verdict"] == "fails everywhere"
    assert rows["test_always_wrong"]["separating_fields"] == {}
    assert rows["test_fine"]["verdict"] == "passes" and rows["test_fine"]["failures"] == 0


def test_cli_prints_the_table_and_writes_the_report(ten_runs, tmp_path, capsys):
    code = cli.main(["triage", "junit", *ten_runs, "--report", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 1
    assert "10 run(s); 2 test(s) failed at least once." in out
    line = next(ln for ln in out.splitlines() if "test_thread_sensitive" in ln)
    assert "| 3 / 10 |" in line and "environment-specific" in line and "env.omp_num_threads: fails on ['1']" in line
    data = json.loads((tmp_path / "triage.json").read_text())
    assert data["schema"] == "gradverify-triage-junit/1" and len(data["files"]) == 10
    cells = TableCells()
    cells.feed((tmp_path / "triage.html").read_text())
    row = next(r for r in cells.rows if r and r[0].endswith("test_thread_sensitive"))
    assert row[1] == "3 / 10" and row[3] == "environment-specific" and "env.omp_num_threads" in row[4]


def test_hostile_or_broken_files_get_a_clear_error(tmp_path, capsys):
    bomb = tmp_path / "bomb.xml"
    bomb.write_text(
        '<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;">]>'
        "<testsuite><testcase name='a'>&lol2;</testcase></testsuite>"
    )
    junk = tmp_path / "junk.xml"
    junk.write_text("not xml at all")
    for f in (bomb, junk):
        code = cli.main(["triage", "junit", str(f)])
        err = capsys.readouterr().err
        assert code == 2 and "expected a JUnit XML file" in err and str(f) in err


def test_wilson_interval():
    lo, hi = _triage_junit.wilson(0, 10)
    assert lo == 0.0 and hi == pytest.approx(0.2775, abs=1e-4)
    lo, hi = _triage_junit.wilson(10, 10)
    assert hi == pytest.approx(1.0) and lo == pytest.approx(0.7225, abs=1e-4)


def test_a_junit_row_is_the_json_object_it_is_written_as():
    from gradverify._triage.junit import JunitRow, Run, triage_junit

    runs = [
        Run("a.xml", {"host": "x"}, {"t": "failed"}, {}),
        Run("b.xml", {"host": "y"}, {"t": "passed"}, {}),
    ]
    (row,) = triage_junit(runs)
    assert isinstance(row, JunitRow) and row.verdict == row["verdict"] == "environment-specific"
    assert list(row) == [
        "test",
        "runs",
        "failures",
        "passed_on_rerun",
        "attempts",
        "failed_attempts",
        "flip_rate",
        "interval95",
        "verdict",
        "separating_fields",
        "failing_files",
    ]
    assert json.loads(gv_json([row])) == [dict(row)]
    assert row.separating_fields == {"host": {"failing": ["x"], "passing": ["y"]}}
