"""Helpers the tests of the sweeps and their reports share."""

from __future__ import annotations

import filecmp
import json

from gradverify import cli
from gradverify._sweep import reports

#: The sweep of test_scale*: two targets that pass and one that fails, on two backends.
TARGETS = ["bias_act:relu", "bias_act:tanh", "example:seed-bug"]


OPTIONS = ["--backend", "numpy", "torch", "--impl", "fused", "--max-examples", "3"]


def run(capsys, *argv):
    """``cli.main(argv)`` in this process: its exit code and stdout."""
    code = cli.main(list(argv))
    out = capsys.readouterr().out
    return code, out


def canonical(directory):
    """The report.json in ``directory``, without what differs from run to run."""
    return reports.canonical(json.loads((directory / "report.json").read_text()))


def same_files(a, b):
    """The failures' .npz and .py files, byte for byte."""
    names = sorted(p.name for p in (a / "cases").iterdir())
    assert names == sorted(p.name for p in (b / "cases").iterdir()) and any(n.endswith(".npz") for n in names)
    match, mismatch, errors = filecmp.cmpfiles(a / "cases", b / "cases", names, shallow=False)
    assert not mismatch and not errors
