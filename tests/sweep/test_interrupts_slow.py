"""Nothing lost, nothing torn: a report directory is one run's, whole, after
a real SIGKILL at any point, a real SIGINT or SIGTERM, or a second run on it;
its files follow the umask."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


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


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_report_files_follow_the_umask(tmp_path, umask):
    report = tmp_path / "r"
    p = _start(report, umask=umask)
    p.communicate()
    assert p.returncode == 0
    for f in ["report.json", "report.md", "report.html", "junit.xml", "results.jsonl"]:
        assert (report / f).stat().st_mode & 0o777 == 0o666 & ~umask, f
    assert report.stat().st_mode & 0o777 == 0o777 & ~umask


#: Code run in the sweep's process before the command: each makes one moment
#: of the run last long enough for the signal to land in it, and says when.
_MOMENTS = {
    # inside a weakref finalizer, mid-sweep (as the frameworks' and tempfile's run)
    "a finalizer": """
import time, weakref
import gradverify._sweep.cases as _c
_run, _n = _c.run_case, [0]
class _Obj: pass
def _slow():
    print("MOMENT", flush=True); time.sleep(3)
def run_case(case):
    _n[0] += 1
    if _n[0] == 3:
        o = _Obj(); weakref.finalize(o, _slow); del o
    return _run(case)
_c.run_case = run_case
""",
    # every case done: while the reports are written
    "the reports": """
import time
import gradverify._sweep.reports as _r
_write = _r.write
def write(*a, **k):
    print("MOMENT", flush=True); time.sleep(3); return _write(*a, **k)
_r.write = write
""",
    # the command over: the interpreter shutting down
    "the shutdown": """
import atexit, time
atexit.register(lambda: (print("MOMENT", flush=True), time.sleep(3)))
""",
}


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("moment", sorted(_MOMENTS))
def test_a_signal_exits_130_without_a_traceback_whenever_it_lands(previous, moment, sig):
    """A signal in a finalizer is not swallowed (the command would go on and
    exit 0, a killed CI job green), nor one while the reports are written or
    after the command: exit 130, no traceback, and the report directory
    whole - the cases that finished, said to be interrupted."""
    argv = [*SWEEP, "--seed", "1", "--report", str(previous)]
    code = (
        _MOMENTS[moment] + f"\nimport sys; sys.argv = ['gradverify', *{argv!r}]\nfrom gradverify.cli import run; run()"
    )
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = []
    for line in p.stdout:
        lines.append(line)
        if line.startswith("MOMENT"):
            break
    assert lines and lines[-1].startswith("MOMENT"), p.stderr.read()
    p.send_signal(sig)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 130, (p.returncode, err)
    assert "Traceback" not in err and "Exception ignored" not in err, err
    data = _whole(previous)
    assert data["seed"] == 1  # this run's report, whole
    if moment == "the shutdown":  # (every case finished, the report written before the signal)
        assert len(data["cases"]) == 26
    else:
        assert data["totals"]["interrupted"] == 1, data["totals"]
        assert "(interrupted: the cases that finished)" in (previous / "report.md").read_text()
        if moment == "a finalizer":
            assert 2 <= len(data["cases"]) < 26
