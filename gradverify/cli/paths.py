"""Paths as the reader sees them: relative to the directory the command was
run from where the file is under it, absolute elsewhere - never as a module
found it (relative to a report directory) nor with a doubled separator."""

from __future__ import annotations

import os

__all__ = ["shown"]


def shown(path: str | os.PathLike[str]) -> str:
    """``path`` as one types it from the current directory."""
    full = os.path.abspath(path)  # (not resolve(): a link keeps the name the user gave it)
    try:
        relative = os.path.relpath(full, os.getcwd())
    except ValueError:  # (Windows: another drive)
        return full
    return full if relative == os.pardir or relative.startswith(os.pardir + os.sep) else relative
