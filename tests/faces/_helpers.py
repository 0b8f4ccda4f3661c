"""Helpers the tests of the faces share: the command run two ways."""

from __future__ import annotations

import subprocess
import sys

from gradverify import cli


def run(*args, cwd=None, env=None):
    """``python -m gradverify.cli ARGS`` in a subprocess."""
    return subprocess.run(
        [sys.executable, "-m", "gradverify.cli", *args], capture_output=True, text=True, cwd=cwd, env=env
    )


def main(capsys, *argv):
    """``cli.main(argv)`` in this process: its exit code, stdout and stderr."""
    code = cli.main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err
