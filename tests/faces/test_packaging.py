"""The companions install inside gradverify: gradverify.ops and
gradverify.strategies import from their own folders ("ops" is an unrelated
PyPI distribution)."""

from __future__ import annotations

from pathlib import Path


def test_installed_subpackages_import():
    import gradverify.ops
    import gradverify.strategies

    assert Path(gradverify.ops.__file__).parent.name == "ops"
    assert Path(gradverify.strategies.__file__).parent.name == "strategies"
