"""benchmarks/bench_suite.py on a real temporary project: its tests run once
with their own gradcheck and once through gradverify, the checker's calls
in each test timed, and the tests whose outcome differs named (gradcheck's
false alarm on float32, which gradverify passes)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

pytest.importorskip("torch")

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_suite.py"

SUITE = """
import torch
from torch.autograd import gradcheck


def test_float64():
    x = torch.linspace(-1, 1, 7, dtype=torch.float64).requires_grad_()
    assert gradcheck(torch.sin, (x,))


def test_float32():
    # (gradcheck's default eps and tolerances are float64's: float32's
    # rounding makes its FD Jacobian differ - a false alarm)
    x = torch.linspace(-3, 3, 40, dtype=torch.float32).requires_grad_()
    assert gradcheck(torch.exp, (x,), fast_mode=False)
"""


def test_a_suite_is_timed_alone_with_each_checker_and_the_differences_named(tmp_path):
    (tmp_path / "test_grads.py").write_text(SUITE)
    out = tmp_path / "timings"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(out), "--", "test_grads.py", "-p", "no:cacheprovider", "-q"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    original = json.loads((out / "0-original.json").read_text())
    gradverify = json.loads((out / "0-gradverify.json").read_text())
    assert set(original) == set(gradverify) == {"test_grads.py::test_float64", "test_grads.py::test_float32"}
    assert original["test_grads.py::test_float32"][2] == "failed"  # gradcheck's false alarm
    assert gradverify["test_grads.py::test_float32"][2] == "passed"
    assert all(t[0] > 0 and t[1] == 1 for t in (*original.values(), *gradverify.values()))
    assert "2 tests, 2 checker calls" in done.stdout
    assert "outcomes differ in 1 test(s):" in done.stdout
    assert "test_grads.py::test_float32: original failed, gradverify passed" in done.stdout


def test_no_pytest_arguments_is_a_usage_error():
    done = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "expected the pytest arguments after --" in done.stderr


STRATEGY = """
import gradverify as gv
import torch


def test_strategy():
    r = gv.check(torch.sin, torch.linspace(-1, 1, 7, dtype=torch.float64))
    with open("strategies.txt", "a") as f:
        f.write(r.strategy.split(" (")[0] + "\\n")
"""


def test_directional_takes_the_full_jacobian_off_in_gradverifys_runs_alone(tmp_path):
    (tmp_path / "test_strategy.py").write_text(STRATEGY)
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--directional", "--", "test_strategy.py", "-p", "no:cacheprovider", "-q"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert "gradverify directional on small inputs" in done.stdout, done.stdout + done.stderr
    # (the project's own run first, as it is; then gradverify's, directional)
    assert (tmp_path / "strategies.txt").read_text().splitlines() == ["full Jacobian", "directional"]
