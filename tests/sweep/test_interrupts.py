"""Nothing lost, nothing torn: a report directory is one run's, whole, after
a real SIGKILL at any point, a real SIGINT, or a second run on it; user
mistakes get the usual message, never "internal error"."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from gradverify import cli

SWEEP = ["check", "bias_act", "--backend", "numpy", "--impl", "fused", "--max-examples", "25"]


def _start(report: Path, *extra: str, seed: int = 0, umask: int | None = None) -> subprocess.Popen[str]:
    argv = [*SWEEP, "--seed", str(seed), "--report", str(report), *extra]
    # (the umask set in the child itself: preexec_fn is unsafe in a process with threads)
    code = f"import os; os.umask({umask!r}) if {umask!r} is not None else None; "
    code += f"from gradverify.cli import main; raise SystemExit(main({argv!r}))"
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for_cases(p: subprocess.Popen[str], n: int) -> list[str]:
    """The first ``n`` case lines the run prints (it has a lock and a staging directory by then)."""
    lines = []
    while len(lines) < n:
        line = p.stdout.readline()
        assert line, p.stderr.read()
        if line.startswith(("PASS", "FAIL", "SKIP", "ERROR")):
            lines.append(line)
    return lines


def _whole(report: Path) -> dict:
    """The report directory's files, checked to be of one run; its report.json."""
    data = json.loads((report / "report.json").read_text())
    head, *records = [json.loads(ln) for ln in (report / "results.jsonl").read_text().splitlines()]
    assert head["command"] == data["command"] and head["seed"] == data["seed"]
    assert sorted(r["id"] for r in records) == sorted(c["id"] for c in data["cases"])
    assert data["command"] in (report / "report.md").read_text()
    assert data["created"] in (report / "report.html").read_text()
    suite = ET.parse(report / "junit.xml").getroot()
    assert sum(1 for _ in suite.iter("testcase")) == len(data["cases"])
    return data


@pytest.fixture
def previous(tmp_path) -> Path:
    report = tmp_path / "reports"
    done = subprocess.run(
        [sys.executable, "-m", "gradverify.cli", *SWEEP, "--seed", "0", "--report", str(report)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    _whole(report)
    return report


def _snapshot(report: Path) -> dict[str, bytes]:
    return {str(p.relative_to(report)): p.read_bytes() for p in sorted(report.rglob("*")) if p.is_file()}


@pytest.mark.slow
@pytest.mark.parametrize("after_cases", [0, 1, 12, 26])
def test_a_killed_run_leaves_the_previous_report_or_its_own_whole(previous, after_cases):
    """SIGKILL before the first case, early, mid-sweep and once every case has
    printed (the reports being written): the directory is the previous run's,
    byte for byte, or the new run's, whole - never a mix."""
    before = _snapshot(previous)
    p = _start(previous, seed=1)
    if after_cases:
        _wait_for_cases(p, after_cases)
    else:
        time.sleep(0.3)
    p.send_signal(signal.SIGKILL)
    p.communicate()  # (and its pipes closed)
    if _snapshot(previous) != before:
        assert _whole(previous)["seed"] == 1  # the new run's, whole
    else:
        assert _whole(previous)["seed"] == 0
    # the next run cleans up what the killed one left, and replaces the report whole
    done = _start(previous, seed=2)
    out, err = done.communicate()
    assert done.returncode == 0, err
    assert _whole(previous)["seed"] == 2
    assert not [p.name for p in previous.parent.iterdir() if ".staging-" in p.name or ".previous-" in p.name]


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_an_interrupt_writes_the_report_of_what_finished_and_exits_130(previous, sig):
    """Ctrl-C, or a CI job's timeout (SIGTERM): the report of the cases that finished, said to be so."""
    p = _start(previous, seed=1)
    printed = _wait_for_cases(p, 3)
    p.send_signal(sig)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 130, err
    assert "Traceback" not in err, err
    last = out.strip().splitlines()[-1]
    assert "(interrupted: the cases that finished)" in last, out
    data = _whole(previous)  # this run's report, of the cases that finished
    assert data["seed"] == 1 and len(printed) <= len(data["cases"]) < 26 and data["totals"]["interrupted"] == 1
    assert f"{data['totals']['passed']} passed" in last
    assert "(interrupted: the cases that finished)" in (previous / "report.md").read_text()


@pytest.mark.slow
def test_a_second_run_on_the_same_directory_stops_with_a_clear_error(previous):
    first = _start(previous, seed=1)
    _wait_for_cases(first, 1)
    second = subprocess.run(
        [sys.executable, "-m", "gradverify.cli", *SWEEP, "--report", str(previous)], capture_output=True, text=True
    )
    assert second.returncode == 2 and "locked by another gradverify run" in second.stderr, second.stderr
    out, err = first.communicate(timeout=300)
    assert first.returncode == 0, err
    assert _whole(previous)["seed"] == 1  # the first run's, untouched by the second


@pytest.mark.slow
@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_report_files_follow_the_umask(tmp_path, umask):
    report = tmp_path / "r"
    p = _start(report, umask=umask)
    p.communicate()
    assert p.returncode == 0
    for f in ["report.json", "report.md", "report.html", "junit.xml", "results.jsonl"]:
        assert (report / f).stat().st_mode & 0o777 == 0o666 & ~umask, f
    assert report.stat().st_mode & 0o777 == 0o777 & ~umask


# -- user mistakes: the usual message, exit 2, never "internal error" ----------------------------
def _run(capsys, *argv: str) -> tuple[int, str]:
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.err


def test_a_target_module_with_a_syntax_error(tmp_path, monkeypatch, capsys):
    (tmp_path / "broken_mod.py").write_text("def f(x:\n    return x\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    code, err = _run(capsys, "check", "broken_mod:f", "--strategy", "broken_mod:s", "--no-report")
    assert code == 2 and "internal error" not in err
    assert "expected an importable module:name" in err and "SyntaxError" in err


@pytest.mark.parametrize(
    ("data", "found"),
    [({}, "cases (NoneType)"), ({"cases": "x"}, "cases (str)"), ({"cases": [{"status": "passed"}]}, "cases[0]")],
)
def test_report_of_a_json_that_is_not_a_whole_report(tmp_path, capsys, data, found):
    path = tmp_path / "r.json"
    base = {"schema": "gradverify-report/1", "command": "c", "seed": 0, "totals": {}}
    path.write_text(json.dumps({**base, **data}))
    code, err = _run(capsys, "report", str(path))
    assert code == 2 and "internal error" not in err and "expected a whole report" in err and found in err, err


def test_files_where_directories_belong_and_back(tmp_path, capsys):
    afile = tmp_path / "afile"
    afile.write_text("")
    code, err = _run(capsys, "check", "bias_act:relu", "--backend", "numpy", "--impl", "fused", "--report", str(afile))
    assert code == 2 and "internal error" not in err and "expected a directory" in err, err
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "notes.txt").write_text("mine")
    code, err = _run(capsys, "check", "bias_act:relu", "--backend", "numpy", "--impl", "fused", "--report", str(theirs))
    assert code == 2 and "holding other files: notes.txt" in err and (theirs / "notes.txt").read_text() == "mine"
    report = tmp_path / "r"
    assert (
        _run(capsys, "check", "bias_act:relu", "--backend", "numpy", "--impl", "fused", "--report", str(report))[0] == 0
    )
    code, err = _run(capsys, "report", str(report / "report.json"), "--output", str(tmp_path))
    assert code == 2 and "internal error" not in err and "expected a file to write" in err, err


def test_merge_keeps_the_complete_records_of_a_cut_file_and_names_the_cut(tmp_path, capsys):
    report = tmp_path / "r"
    argv = ["check", "bias_act:relu", "bias_act:tanh", "bias_act:elu", "--backend", "numpy", "--impl", "fused"]
    assert _run(capsys, *argv, "--report", str(report))[0] == 0
    lines = (report / "results.jsonl").read_text().splitlines()
    cut = tmp_path / "cut.jsonl"
    cut.write_text("\n".join(lines[:3]) + "\n" + lines[3][: len(lines[3]) // 2])  # killed mid-line
    merged = tmp_path / "merged"
    code, err = _run(capsys, "merge", str(cut), "--report", str(merged))
    assert code == 0 and "line 4 is cut short" in err and "merged the 2 complete record(s)" in err, err
    assert len(json.loads((merged / "report.json").read_text())["cases"]) == 2
    # a record without its id is refused, named
    bad = tmp_path / "bad.jsonl"
    bad.write_text(lines[0] + "\n" + json.dumps({"status": "passed"}) + "\n")
    code, err = _run(capsys, "merge", str(bad), "--report", str(tmp_path / "m2"))
    assert code == 2 and "internal error" not in err and "record 1 without id" in err, err


def test_an_internal_error_asks_for_a_report_with_its_traceback(capsys, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("a bug of gradverify's own")

    monkeypatch.setattr(cli, "_list", broken)
    code, err = _run(capsys, "list")
    assert code == 2 and "internal error: RuntimeError: a bug of gradverify's own" in err
    assert "Traceback (most recent call last)" in err and "please report it" in err


def test_the_current_directory_is_no_report_directory(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "keep.txt").write_text("mine")
    for report in (".", str(tmp_path / "sub" / "..")):
        code, err = _run(capsys, "check", "bias_act:relu", "--backend", "numpy", "--impl", "fused", "--report", report)
        assert code == 2 and "the current directory or one above it" in err, err
    assert (tmp_path / "keep.txt").read_text() == "mine" and Path.cwd() == tmp_path


def test_a_report_directory_behind_a_link_gets_the_reports(tmp_path, capsys):
    target = tmp_path / "artifacts"
    target.mkdir()
    link = tmp_path / "reports"
    link.symlink_to(target)
    argv = ["check", "bias_act:relu", "--backend", "numpy", "--impl", "fused", "--report", str(link)]
    assert _run(capsys, *argv)[0] == 0
    assert _run(capsys, *argv)[0] == 0  # (and again, replacing the first run's)
    assert link.is_symlink() and (target / "report.json").exists() and (link / "report.json").exists()
    assert not [p.name for p in tmp_path.iterdir() if ".staging-" in p.name or ".previous-" in p.name]
