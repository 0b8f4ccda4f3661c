"""The gradverify command: exit 0 all pass, 1 a gradient check failed, 2 usage."""

from __future__ import annotations

import subprocess
import sys


def run(*args):
    return subprocess.run([sys.executable, "-m", "gradverify.cli", *args], capture_output=True, text=True)


def test_check_examples_passes():
    out = run("check", "examples", "--backend", "numpy")
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.splitlines()[-1] == "2 passed, 0 failed"
    assert "gradverify PASSED: fused_swish [numpy, order 1]" in out.stdout


def test_seed_bug_example_fails_with_exit_1():
    out = run("check", "example:seed-bug", "--backend", "torch", "--dtype", "float32")
    assert out.returncode == 1, out.stdout + out.stderr
    assert out.stdout.splitlines()[-1] == "0 passed, 1 failed"
    assert "mismatch (VJP vs FD)" in out.stdout


def test_usage_errors_exit_2():
    assert run("check", "nonsense").returncode == 2
    assert run("frobnicate").returncode == 2
    assert "unknown target 'nonsense'" in run("check", "nonsense").stderr
