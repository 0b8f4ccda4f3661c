"""Batched derivatives from the faces: the command checks under vmap with
``--batched``, and the pytest plugin turns batching on by flag, ini key and
marker; the rules of tests/_batchops.py, written into a user's project, are
right alone and wrong under vmap."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

pytest.importorskip("torch")


#: tests/_batchops.py as a module of a user's project.
BATCHOPS = (Path(__file__).parents[1] / "_batchops.py").read_text()


def _run(argv, cwd, env_path):
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(env_path)}
    return subprocess.run([sys.executable, *argv], capture_output=True, text=True, cwd=cwd, env=env)


def test_the_command_checks_under_vmap_with_batched(tmp_path):
    (tmp_path / "batchops.py").write_text(BATCHOPS)
    target = ["-m", "gradverify.cli", "check", "batchops:sin=batchops:args", "--max-examples", "10"]
    plain = _run([*target, "--no-report"], tmp_path, tmp_path)
    assert plain.returncode == 0, plain.stdout + plain.stderr
    batched = _run([*target, "--batched", "--report", str(tmp_path / "r")], tmp_path, tmp_path)
    assert batched.returncode == 1, batched.stdout + batched.stderr
    assert "batched VJP" in batched.stdout
    (script,) = (tmp_path / "r" / "cases").glob("*.py")
    assert "batched=True" in script.read_text()
    rerun = _run([str(script)], tmp_path / "r" / "cases", "")
    assert rerun.returncode == 1 and "batched VJP vs VJP" in rerun.stdout, rerun.stdout + rerun.stderr


def test_the_plugin_turns_batching_on_by_flag_ini_and_marker(tmp_path):
    (tmp_path / "batchops.py").write_text(BATCHOPS)
    (tmp_path / "test_ops.py").write_text(
        "import pytest\n"
        "import batchops\n\n\n"
        "def test_plain(gradverify):\n"
        "    assert gradverify.verify(batchops.sin, batchops.args, max_examples=5).ok\n\n\n"
        "@pytest.mark.gradverify(batched=True)\n"
        "def test_marked(gradverify):\n"
        "    assert gradverify.verify(batchops.sin, batchops.args, max_examples=5).ok\n"
    )
    base = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", "test_ops.py"]
    plain = _run(base, tmp_path, tmp_path)
    assert plain.returncode == 1 and "1 failed, 1 passed" in plain.stdout, plain.stdout
    assert "test_marked" in plain.stdout and "batched VJP" in plain.stdout
    flagged = _run([*base, "--gradverify-batched"], tmp_path, tmp_path)
    assert "2 failed" in flagged.stdout, flagged.stdout
    (tmp_path / "pytest.ini").write_text("[pytest]\ngradverify_batched = true\n")
    ini = _run(base, tmp_path, tmp_path)
    assert "2 failed" in ini.stdout, ini.stdout
