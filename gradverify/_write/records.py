"""The records of ``pytest --gradverify-replace=record``, read back and
grouped by the function they check.

A *subject* is one importable function (with, for an ``nn.Module``, how it
was built); its *variants* are the distinct argument layouts it was called
with (structure, kinds, shapes, dtypes, which leaves are differentiated, the
values of the constants); its *points* are the recorded arguments, each to
be replayed as an ``@example``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from .._errors import ArgumentValueError, explain

__all__ = ["Subject", "Unwritten", "grouped", "load", "range_key", "widened"]

#: Distinct argument layouts of one function drawn from (the first ones recorded).
MAX_VARIANTS = 8


@dataclasses.dataclass
class Unwritten:
    """A recorded function no test is written for, and why."""

    name: str
    why: str
    tests: list[str]


@dataclasses.dataclass
class Subject:
    """One function, every recorded call of it."""

    framework: str
    path: str  # module:qualname
    name: str
    kind: str | None
    built: str | None
    calls: list[dict[str, Any]]

    @property
    def tests(self) -> list[str]:
        return sorted({c.get("nodeid", "?") for c in self.calls})

    def variants(self) -> list[dict[str, Any]]:
        """The first call of each distinct layout (at most MAX_VARIANTS)."""
        seen: dict[str, dict[str, Any]] = {}
        for call in self.calls:
            key = _layout(call)
            if key not in seen and len(seen) < MAX_VARIANTS:
                seen[key] = call
        return list(seen.values())

    def ranges(self) -> dict[tuple[str, str], tuple[float, float]]:
        """Each differentiated leaf's recorded range (union over calls), by
        path and dtype: a function the suite calls on real and on complex
        values (a sqrt on positive reals, on complex numbers of both signs)
        keeps each range to its own."""
        out: dict[tuple[str, str], tuple[float, float]] = {}
        for call in self.calls:
            for leaf in call["arguments"]:
                if not leaf.get("differentiated"):
                    continue
                lo, hi = _extent(leaf)
                if lo is None:
                    continue
                key = (leaf["path"], _kind_of(leaf))
                old = out.get(key)
                out[key] = (lo, hi) if old is None else (min(old[0], lo), max(old[1], hi))
        return out


def range_key(leaf: dict[str, Any]) -> tuple[str, str]:
    """The key of a leaf's range in :meth:`Subject.ranges`."""
    return leaf["path"], _kind_of(leaf)


def _kind_of(leaf: dict[str, Any]) -> str:
    return leaf.get("dtype") or ("complex" if isinstance(leaf.get("value"), list) else "real")


def load(source: str | Path) -> list[dict[str, Any]]:
    """Every record under ``source`` (a records directory, or one of its
    ``calls-*.jsonl`` files), each with ``directory`` set to where its
    point's ``.npz`` is found."""
    source = Path(source)
    if source.is_dir():
        files = sorted(source.glob("calls-*.jsonl"))
        directory = source
    elif source.is_file():
        files, directory = [source], source.parent
    else:
        files, directory = [], source
    if not files:
        raise ArgumentValueError(
            explain(
                "gradverify write RECORDS",
                "a records directory holding calls-*.jsonl (or one such file), or an importable package",
                f"{str(source)!r}: {'no calls-*.jsonl in it' if source.is_dir() else 'no such file or package'}",
                "record a suite first: pytest --gradverify-replace=record (writes gradverify-records/)",
            )
        )
    records = []
    for file in files:
        for number, line in enumerate(file.read_text().splitlines(), 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                raise ArgumentValueError(
                    explain(
                        "gradverify write RECORDS",
                        "one JSON record per line",
                        f"{file}:{number}: {e.msg}",
                        "record the suite again with pytest --gradverify-replace=record",
                    )
                ) from None
            if "function" in record and "arguments" in record:
                records.append({**record, "directory": str(directory)})
    return records


def grouped(records: list[dict[str, Any]]) -> tuple[list[Subject], list[Unwritten]]:
    """The subjects to write, in the order first recorded, and the
    functions that cannot be written, with why."""
    subjects: dict[tuple[str, str, str | None, tuple[str, ...]], Subject] = {}
    unwritten: dict[tuple[str, str], Unwritten] = {}
    for record in records:
        fn = record["function"]
        why = _unwritable(record)
        if why is not None:
            key = (fn.get("name", "?"), why)
            entry = unwritten.setdefault(key, Unwritten(fn.get("name", "?"), why, []))
            if record.get("nodeid") not in entry.tests:
                entry.tests.append(record.get("nodeid", "?"))
            continue
        # (calls that differentiate different leaves are different tests: one wrt each)
        differentiated = tuple(a["path"] for a in record["arguments"] if a.get("differentiated"))
        key2 = (record["framework"], fn["path"], fn.get("built"), differentiated)
        if key2 not in subjects:
            subjects[key2] = Subject(record["framework"], fn["path"], fn["name"], fn.get("kind"), fn.get("built"), [])
        subjects[key2].calls.append(record)
    return list(subjects.values()), list(unwritten.values())


def _unwritable(record: dict[str, Any]) -> str | None:
    fn = record["function"]
    if not fn.get("path"):
        return fn.get("why") or "not importable"
    if "skeleton" not in record:
        return "recorded by an older gradverify (no argument structure): record the suite again"
    custom = _custom(record["skeleton"])
    if custom:
        return f"an argument holds a {custom} (a pytree node that cannot be written as source)"
    for leaf in record["arguments"]:
        if leaf["kind"] == "other":
            return f"argument {leaf['path']} is a {leaf['type']} (neither an array nor a number)"
        if leaf["kind"] == "array" and leaf.get("layout", "strided") != "strided":
            return f"argument {leaf['path']} is a {leaf['layout']} tensor"
    if not any(leaf.get("differentiated") for leaf in record["arguments"]):
        return "no argument is differentiated"
    return None


def _custom(node: list[Any]) -> str | None:
    if node[0] == "custom":
        return str(node[1])
    if node[0] == "namedtuple" and node[1] is None:
        return f"namedtuple with fields {node[2]} that is not importable"
    for child in node[-1] if node[0] in ("tuple", "list", "dict", "namedtuple") else []:
        found = _custom(child)
        if found:
            return found
    return None


def _layout(call: dict[str, Any]) -> str:
    """What makes two calls of a function different layouts: the structure,
    every leaf but a differentiated leaf's values, and the constants' values."""
    leaves = []
    for leaf in call["arguments"]:
        fixed = {k: leaf.get(k) for k in ("path", "kind", "shape", "dtype", "differentiated")}
        if not leaf.get("differentiated"):
            fixed["value"] = leaf.get("value")
            fixed["digest"] = constant_digest(call, leaf)
        leaves.append(fixed)
    return json.dumps([call["skeleton"], leaves], sort_keys=True)


def constant_digest(call: dict[str, Any], leaf: dict[str, Any]) -> str | None:
    array = point_leaf(call, leaf["path"])
    if array is None:
        return None
    return hashlib.sha256(f"{array.dtype}{array.shape}".encode() + np.ascontiguousarray(array).tobytes()).hexdigest()


def point_leaf(call: dict[str, Any], path: str) -> np.ndarray | None:
    """A leaf of the call's recorded point, as saved (None without one)."""
    if not call.get("point"):
        return None
    file = Path(call["directory"]) / call["point"]
    if not file.is_file():
        return None
    with np.load(file) as saved:
        key = path or "()"
        return saved[key] if key in saved.files else None


def _extent(leaf: dict[str, Any]) -> tuple[float | None, float | None]:
    if leaf["kind"] == "scalar":
        value = leaf.get("value")
        if isinstance(value, list):  # (complex: real and imaginary parts)
            return min(value), max(value)
        if isinstance(value, (int, float)) and math.isfinite(value):
            return float(value), float(value)
        return None, None
    if "min" in leaf:
        return float(leaf["min"]), float(leaf["max"])
    return None, None


def widened(lo: float, hi: float) -> tuple[float, float]:
    """The range values are drawn from, from the recorded ``[lo, hi]``: a
    range inside [0, 1] stays there (an image, a probability, a mask:
    [lo/2, 1]), a positive range stays positive ([lo/2, 2 hi]: the function
    may need it - a log, a scale), a negative one negative; any other becomes symmetric and
    at least [-1.5, 1.5], so that signs and zeros the recorded points never
    had (a bias that is not 0) are drawn. Bounds are rounded outward to two
    significant digits."""
    if 0 <= lo and hi <= 1 and hi > 0:
        return (_round(lo / 2, up=False) if lo > 0 else 0.0), 1.0
    if lo > 0:
        return _round(lo / 2, up=False), _round(2 * hi, up=True)
    if hi < 0:
        return -_round(-2 * lo, up=True), -_round(-hi / 2, up=False)
    m = _round(1.5 * max(abs(lo), abs(hi), 1.0), up=True)
    return -m, m


def _round(v: float, up: bool) -> float:
    """v > 0 to two significant digits, rounded up or down."""
    exponent = math.floor(math.log10(v)) - 1
    scale = 10.0**exponent
    q = v / scale
    q = math.ceil(q - 1e-9) if up else max(math.floor(q + 1e-9), 1)
    return float(f"{q * scale:.3g}")
