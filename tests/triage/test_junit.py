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
        "nodeid",
        "failing_seeds",
        "passing_seeds",
        "failing_inputs",
    ]
    assert json.loads(gv_json([row])) == [dict(row)]
    assert row.separating_fields == {"host": {"failing": ["x"], "passing": ["y"]}}


SEEDED = """
import numpy as np
import gradverify as gv

SQUARE = gv.Rule(lambda x: x * x, jvp=lambda p, t: 2 * p[0] * t[0], vjp=lambda p, g: (2 * p[0] * g,))


def test_seeded(gradverify, request):
    assert gradverify.check(SQUARE, np.array([0.5, -1.5])).ok
    # what only some seeds' inputs reach
    assert request.config.getoption("gradverify_seed") not in (1, 3)
"""


@pytest.fixture
def seeded_runs(pytester, monkeypatch):
    """Seeds 0-3, each on two 'machines' (thread counts): the test fails on
    seeds 1 and 3 wherever they run."""
    pytester.makepyfile(test_seeds=SEEDED)
    files = []
    for seed in range(4):
        for threads in ("1", "4"):
            monkeypatch.setenv("OMP_NUM_THREADS", threads)
            path = pytester.path / f"seed{seed}-threads{threads}.xml"
            pytester.runpytest(f"--junitxml={path}", f"--gradverify-seed={seed}", "-p", "no:cacheprovider", "-q")
            files.append(str(path))
    return files


def test_a_failure_that_follows_the_seed_is_a_bug_with_its_seeds(seeded_runs, capsys):
    from gradverify._verify import derive_seed

    (row,) = _triage_junit.junit_files(seeded_runs)
    seeds = {b: str(derive_seed(b, "test_seeds.py::test_seeded")) for b in range(4)}
    assert row["verdict"] == "bug", row  # a seed is no environment
    assert row["separating_fields"] == {}
    assert row["failing_seeds"] == sorted([seeds[1], seeds[3]], key=int)
    assert row["passing_seeds"] == sorted([seeds[0], seeds[2]], key=int)
    assert row["nodeid"] == "test_seeds.py::test_seeded" and row["seed_field"] == "gradverify_seed"
    code = cli.main(["triage", "junit", *seeded_runs])
    out = capsys.readouterr().out
    assert code == 1
    assert f"- failing seeds: {', '.join(row['failing_seeds'])} (passing: {', '.join(row['passing_seeds'])})" in out
    assert f"with @pytest.mark.gradverify(seed={row['failing_seeds'][0]})" in out
    assert "- failing in: " in out and "seed1-threads1.xml" in out
    assert "gradverify triage rerun 'test_seeds.py::test_seeded'" in out


def test_a_seed_seen_once_is_no_evidence(seeded_runs):
    once = [f for f in seeded_runs if "threads4" in f]  # each seed once: a flake could look the same
    (row,) = _triage_junit.junit_files(once)
    assert row["verdict"] == "flaky" and len(row["failing_seeds"]) == 2 and row["separating_fields"] == {}


def _run(name, threads, outcome, seed):
    from gradverify._triage.junit import Run

    return Run(name, {"env.omp_num_threads": threads}, {"t": outcome}, {"t": {"gradverify_seed": seed}})


def test_the_same_seed_passing_and_failing_is_the_environment_or_a_flake():
    machines = [_run(f"{k}.xml", "1" if k % 2 else "4", "failed" if k % 2 else "passed", "7") for k in range(6)]
    (row,) = _triage_junit.triage_junit(machines)
    assert row["verdict"] == "environment-specific" and list(row["separating_fields"]) == ["env.omp_num_threads"]
    flips = [_run(f"{k}.xml", "4", "failed" if k % 2 else "passed", "7") for k in range(6)]
    (row,) = _triage_junit.triage_junit(flips)
    assert row["verdict"] == "flaky" and row["failing_seeds"] == row["passing_seeds"] == ["7"]


@pytest.mark.parametrize(
    ("test", "nodeid"),
    [
        ("tests.test_flaky::test_x", "tests/test_flaky.py::test_x"),
        ("tests.sub.test_mod.TestA::test_y[a-1]", "tests/sub/test_mod.py::TestA::test_y[a-1]"),
        ("test_ci::test_fine", "test_ci.py::test_fine"),
    ],
)
def test_junit_ids_become_pytest_node_ids(test, nodeid):
    assert _triage_junit.node_id(test) == nodeid
