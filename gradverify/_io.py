"""What gradverify writes to disk and how: every file appears whole or not at
all (written under a temporary name beside it, then renamed), with the
permissions any file the user creates gets (0666 less the umask, not the
0600 of a temporary file); arrays as numpy copies, values exactly (float.hex)
and JSON without NaN or infinity."""

from __future__ import annotations

import dataclasses
import html
import json
import math
import os
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, ClassVar

import numpy as np

from .backends import backend_name_of


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write(path: str | os.PathLike[str], data: str | bytes | Callable[[IO[bytes]], None]) -> Path:
    """Write ``data`` (text, bytes, or a function that writes into the open
    binary file) to ``path`` atomically; its directory is made if missing."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            if callable(data):
                data(f)
            else:
                f.write(data.encode("utf-8") if isinstance(data, str) else data)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def write_npz(path: str | os.PathLike[str], arrays: Sequence[np.ndarray]) -> Path:
    """``arg0``, ``arg1``, ... into ``path``, atomically."""
    return atomic_write(path, lambda f: np.savez(f, **{f"arg{i}": a for i, a in enumerate(arrays)}))


def to_numpy(a: Any) -> Any:
    """A numpy array (or scalar) of ``a``'s values, from any backend (bfloat16
    widened to float32, which numpy lacks)."""
    if isinstance(a, np.ndarray) or np.isscalar(a):
        return a
    if backend_name_of(a) == "torch":
        t = a.detach().cpu()
        return (t.float() if str(t.dtype) == "torch.bfloat16" else t).numpy()
    return np.asarray(a.astype("float32") if "bfloat16" in str(getattr(a, "dtype", "")) else a)


def exact(a: np.ndarray) -> dict[str, Any]:
    """Values that round-trip: repr of each float (shortest exact) and float.hex."""
    flat = a.reshape(-1)
    floating = np.issubdtype(a.dtype, np.floating)
    return {
        "shape": list(a.shape),
        "dtype": str(a.dtype),
        "values": [float(v) if floating else int(v) for v in flat],
        "hex": [float(v).hex() for v in flat] if floating else None,
    }


class Record(Mapping[str, Any]):
    """A frozen dataclass that reads as the JSON object it is written as:
    ``r.field`` and ``r["field"]`` alike, its keys in field order. Fields
    named in ``OPTIONAL`` are left out while None (a verdict's own figures:
    present where that verdict was given)."""

    OPTIONAL: ClassVar[frozenset[str]] = frozenset()

    def __iter__(self) -> Iterator[str]:
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            if f.name not in self.OPTIONAL or getattr(self, f.name) is not None:
                yield f.name

    def __getitem__(self, key: str) -> Any:
        if key not in self.__dataclass_fields__ or (key in self.OPTIONAL and getattr(self, key) is None):  # type: ignore[attr-defined]
            raise KeyError(key)
        return getattr(self, key)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def to_dict(self) -> dict[str, Any]:
        """Plain dicts and lists all the way down."""
        return clean(self)


def clean(v: Any) -> Any:
    """Plain JSON values: Records and dicts as dicts, tuples as lists; no NaN
    or infinity (written as the strings Python reads back with float())."""
    if isinstance(v, float) and not math.isfinite(v):
        return repr(v)
    if isinstance(v, Mapping):
        return {k: clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [clean(x) for x in v]
    return v


def to_json(obj: Any, indent: int | None = 1) -> str:
    """``obj`` as strict JSON (see ``clean``); what JSON cannot hold is written as its str()."""
    return json.dumps(clean(obj), indent=indent, allow_nan=False, default=str)


#: What every page of gradverify's starts from (a page adds its own rules).
PAGE_CSS = (
    "body{font-family:system-ui,sans-serif;margin:2em;max-width:80em}table{border-collapse:collapse}"
    "td,th{border:1px solid #ccc;padding:.3em .6em;vertical-align:top}"
    "pre{background:#f6f6f6;padding:.6em;overflow-x:auto}"
)


def html_page(title: str, body: Sequence[str], css: str = "") -> str:
    """A whole HTML page: ``title`` as its title and heading, ``body`` (lines
    of HTML, escaped by the caller), PAGE_CSS and then ``css``."""
    head = f'<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
    style = f"<style>{PAGE_CSS}{css}</style></head><body>"
    return "\n".join(["<!doctype html>", head, style, f"<h1>{html.escape(title)}</h1>", *body, "</body></html>"]) + "\n"
