"""The wheel, built for real, installs one top-level package: ops/ and
strategies/ live inside gradverify ("ops" is an unrelated PyPI distribution)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


ROOT = Path(__file__).resolve().parents[2]


def test_wheel_has_gradverify_as_only_top_level_package(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for pkg in ("gradverify", "ops", "strategies"):
        shutil.copytree(ROOT / pkg, src / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    out = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(tmp_path / "dist"), str(src)],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names if ".dist-info/" not in n}
    assert top == {"gradverify"}
    assert "gradverify/ops/__init__.py" in names
    assert "gradverify/strategies/__init__.py" in names
    assert "gradverify/py.typed" in names
    # every module of every wing and companion is in the wheel (a folder left
    # out of pyproject's package list would install without it)
    sources = {
        f"gradverify/{p.relative_to(ROOT / 'gradverify').as_posix()}" for p in (ROOT / "gradverify").rglob("*.py")
    }
    for companion in ("ops", "strategies"):
        sources |= {f"gradverify/{companion}/{p.name}" for p in (ROOT / companion).glob("*.py")}
    assert sources - set(names) == set()
