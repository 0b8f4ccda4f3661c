"""User mistakes around the command's targets, reports and report
directories get the usual message and exit 2, never "internal error"; a
results file cut short merges its complete records; a report directory
behind a link gets the reports."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gradverify import cli


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


def test_an_interrupt_inside_a_gc_callback_is_delivered_again_not_dropped():
    """Python drops an exception raised in a garbage-collector callback
    (Hypothesis registers one): the handler must see it is inside one, as it
    sees finalizers and __del__, and deliver the interrupt again after."""
    import gc
    import sys

    from gradverify.cli import _in_finalizer

    seen = []

    def callback(phase, info):
        if phase == "start":
            seen.append(_in_finalizer(sys._getframe()))

    gc.callbacks.append(callback)
    try:
        gc.collect()
    finally:
        gc.callbacks.remove(callback)
    assert seen and all(seen)
    assert not _in_finalizer(sys._getframe())
