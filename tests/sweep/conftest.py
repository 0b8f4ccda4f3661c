"""Fixtures the tests of the sweeps and their reports share."""

from __future__ import annotations

from pathlib import Path

import pytest

from gradverify import cli
from gradverify.cli import main

from ._helpers import OPTIONS, TARGETS


@pytest.fixture(scope="module")
def serial(tmp_path_factory):
    directory = tmp_path_factory.mktemp("serial")
    assert cli.main(["check", *TARGETS, *OPTIONS, "--report", str(directory)]) == 1  # the seed bug fails
    return directory


@pytest.fixture(scope="module")
def failing_report(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("report")
    code = main(["check", "example:seed-bug", "--backend", "numpy", "--report", str(out), "--format", "html,json"])
    assert code == 1
    return out
