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
import platform
import re
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, ClassVar, TypeVar

import numpy as np

from ._errors import UsageError, explain
from .backends import backend_name_of

__all__ = [
    "dtype_name",
    "literal",
    "malformed",
    "environment",
    "json_lines",
    "report_head",
    "shard",
    "PAGE_CSS",
    "REPORT_NAMES",
    "Record",
    "ReportDirectory",
    "atomic_write",
    "clean",
    "exact",
    "html_page",
    "to_json",
    "to_numpy",
    "write_npz",
]


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
    """Values that round-trip: repr of each float (shortest exact) and float.hex
    (a complex array: each element's real and imaginary parts in turn)."""
    flat = a.reshape(-1)
    if np.issubdtype(a.dtype, np.complexfloating):
        flat = np.ascontiguousarray(flat).view(flat.real.dtype)
    floating = np.issubdtype(flat.dtype, np.floating)
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
#: Nothing runs past the window's right edge: text wraps (a word longer than
#: its line breaks, a report's long line in <pre> too), a figure shrinks to
#: the page (its SVG keeps a viewBox), and a box of class "scroll" (a table
#: that cannot be narrower, such as a sweep's matrix) scrolls sideways by
#: itself; a table cell of class "text" may break anywhere (node ids, paths).
PAGE_CSS = (
    "body{font-family:system-ui,sans-serif;margin:2em;max-width:80em;overflow-wrap:break-word}"
    "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.3em .6em;vertical-align:top}"
    "td.text{overflow-wrap:anywhere;text-align:left}"
    "pre{background:#f6f6f6;padding:.6em;white-space:pre-wrap}"
    ".scroll{overflow-x:auto;max-width:100%}svg,img{max-width:100%;height:auto}"
)


def html_page(title: str, body: Sequence[str], css: str = "") -> str:
    """A whole HTML page: ``title`` as its title and heading, ``body`` (lines
    of HTML, escaped by the caller), PAGE_CSS and then ``css``."""
    head = f'<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
    style = f"<style>{PAGE_CSS}{css}</style></head><body>"
    return "\n".join(["<!doctype html>", head, style, f"<h1>{html.escape(title)}</h1>", *body, "</body></html>"]) + "\n"


# -- a report directory: one run's, whole ------------------------------------------------------
#: What gradverify writes into a report directory; anything else there is the user's.
REPORT_NAMES = frozenset(
    {"report.json", "report.md", "report.html", "junit.xml", "results.jsonl", "cases", "reproducers"}
)


def _exchange(a: Path, b: Path) -> bool:
    """Swap two directories in one step (Linux renameat2 RENAME_EXCHANGE);
    False where the system cannot."""
    import ctypes
    import sys

    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)  # (the C library the interpreter runs on)
    except OSError:
        return False
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is None:
        return False
    at_fdcwd, rename_exchange = -100, 2
    return renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0


class ReportDirectory:
    """One run's report directory, replaced whole or not at all.

    The run writes into a staging directory beside it (``staging``), so the
    previous run's files stay as they were until this run has its own; on
    ``commit`` the staging directory takes the report directory's place in
    one step (where the system can swap two directories; elsewhere the old
    one is moved aside for an instant). A run killed before then leaves the
    previous report untouched, and its staging directory is removed by the
    next run. The run holds a lock (``flock``, released by the system even on
    SIGKILL): a second run on the same directory stops with a usage error."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.shown = Path(path)  # (as the user named it)
        self.path = Path(path).resolve()  # (a link's target: the directory the reports belong in)
        self._lock_file: IO[bytes] | None = None
        self.committed = False
        self.staging = self.path.parent / f".{self.path.name}.staging-{os.getpid()}"

    def __enter__(self) -> ReportDirectory:
        try:
            import fcntl
        except ImportError:  # (Windows: no flock; runs on one directory are not kept apart there)
            fcntl = None

        if self.path.exists() and not self.path.is_dir():
            raise UsageError(
                explain("--report", "a directory (made if missing)", f"the file {self.path}", "name a directory")
            )
        if Path.cwd().resolve().is_relative_to(self.path):
            raise UsageError(
                explain(
                    "--report",
                    "a directory of the reports' own (it is replaced whole by each run)",
                    f"{self.shown}, the current directory or one above it",
                    "name a subdirectory, e.g. --report reports/",
                )
            )
        if self.path.is_dir():
            foreign = sorted(p.name for p in self.path.iterdir() if p.name not in REPORT_NAMES)
            if foreign:
                raise UsageError(
                    explain(
                        "--report",
                        "a directory of gradverify's own (it is replaced whole by each run)",
                        f"{self.path} holding other files: {', '.join(foreign[:5])}",
                        "name a directory for the reports alone, e.g. --report reports/",
                    )
                )
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._lock_file = open(self.path.parent / f".{self.path.name}.lock", "ab")  # noqa: SIM115
        except OSError as e:
            raise UsageError(
                explain("--report", "a directory whose parent can be written in", f"{self.path} ({e})", "name another")
            ) from e
        try:
            if fcntl is not None:
                fcntl.flock(self._lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock_file.close()
            self._lock_file = None
            raise UsageError(
                explain(
                    "--report",
                    "a report directory no other run is writing",
                    f"{self.path} locked by another gradverify run",
                    "wait for it to finish, or pass another --report directory",
                )
            ) from None
        # what a killed run left (no run holds the lock): its staging directory, and
        # the previous report where it died between moving it aside and putting its own in
        for aside in sorted(self.path.parent.glob(f".{self.path.name}.previous-*")):
            if not self.path.exists():
                os.replace(aside, self.path)
            else:
                shutil.rmtree(aside, ignore_errors=True)
        for stale in self.path.parent.glob(f".{self.path.name}.staging-*"):
            shutil.rmtree(stale, ignore_errors=True)
        self.staging.mkdir()
        return self

    def commit(self) -> None:
        """Put the staging directory in the report directory's place."""
        os.chmod(self.staging, 0o777 & ~_umask())
        try:
            if not self.path.exists():
                os.replace(self.staging, self.path)
            elif _exchange(self.staging, self.path):
                shutil.rmtree(self.staging, ignore_errors=True)  # (now the previous run's)
            else:
                aside = self.path.parent / f".{self.path.name}.previous-{os.getpid()}"
                os.replace(self.path, aside)
                os.replace(self.staging, self.path)
                shutil.rmtree(aside, ignore_errors=True)
        except OSError:
            # a directory that cannot move (a mount point): its files are replaced one by one
            for name in REPORT_NAMES:
                old = self.path / name
                if old.is_dir():
                    shutil.rmtree(old, ignore_errors=True)
                else:
                    old.unlink(missing_ok=True)
            shutil.copytree(self.staging, self.path, dirs_exist_ok=True)
            shutil.rmtree(self.staging, ignore_errors=True)
        self.committed = True

    def __exit__(self, *exc: Any) -> None:
        import sys

        if not self.committed and exc[0] is not None and (self.staging / "results.jsonl").exists():
            # a run that failed: the cases that finished stay until the next run on the directory
            print(f"gradverify: the cases that finished are in {self.staging / 'results.jsonl'}", file=sys.stderr)
        else:
            shutil.rmtree(self.staging, ignore_errors=True)
        if self._lock_file is not None:
            self._lock_file.close()  # releases the lock
            self._lock_file = None


# -- results files: JSON lines, one record per line ---------------------------------------------
def json_lines(text: str) -> tuple[list[Any], int | None]:
    """The objects of a JSON-lines file, and the number of a last line cut
    short (a run killed mid-write leaves one; it is left out, every complete
    line before it kept), or None. A bad line elsewhere is a ValueError."""
    lines = [(n, ln) for n, ln in enumerate(text.splitlines(), 1) if ln.strip()]
    parsed = []
    for k, (n, ln) in enumerate(lines):
        try:
            parsed.append(json.loads(ln))
        except json.JSONDecodeError as e:
            if k == len(lines) - 1 and k > 0 and not text.endswith("\n"):
                return parsed, n
            raise ValueError(f"line {n} is not JSON ({e})") from e
    return parsed, None


# -- what every report says of its run -----------------------------------------------------------
def report_head(schema: str, command: str) -> dict[str, Any]:
    """A report's first fields: its schema, when it was made (UTC), and by which command."""
    import datetime as _dt

    created = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    return {"schema": schema, "created": created, "command": command}


_T = TypeVar("_T")


def shard(items: Sequence[_T], spec: str | None) -> list[tuple[int, _T]]:
    """``K/N``: every N-th item from the K-th (1-based), with its index in the
    whole list; None: all of them (a CI matrix job's share of a run)."""
    pairs = list(enumerate(items))
    if spec is None:
        return pairs
    try:
        k, n = (int(p) for p in spec.split("/"))
    except ValueError:
        k = n = 0
    if not (n >= 1 and 1 <= k <= n):
        raise UsageError(explain("--shard", "K/N with 1 <= K <= N", repr(spec), "e.g. --shard 2/4"))
    return [(i, c) for i, c in pairs if i % n == k - 1]


def environment() -> dict[str, Any]:
    """Versions and machine facts that can separate a failing runner from a passing one."""
    import importlib.metadata as md

    versions = {}
    for pkg in ("gradverify", "numpy", "torch", "jax", "jaxlib", "hypothesis"):
        try:
            versions[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            versions[pkg] = None
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "versions": versions,
    }


def dtype_name(a: Any) -> str:
    """An array's dtype as a name (``float64``; a Python scalar's type's)."""
    return str(getattr(a, "dtype", type(a).__name__)).removeprefix("torch.")


def literal(a: Any) -> str:
    """A Python expression that rebuilds ``a`` exactly in its own backend
    (a dict, list or tuple of arrays as such a literal of them)."""
    if backend_name_of(a) is None:
        if isinstance(a, dict) and type(a) is dict:
            return "{" + ", ".join(f"{k!r}: {literal(v)}" for k, v in a.items()) + "}"
        if type(a) in (list, tuple):
            inner = ", ".join(literal(v) for v in a) + ("," if type(a) is tuple and len(a) == 1 else "")
            return f"[{inner}]" if type(a) is list else f"({inner})"
        return repr(a)
    dt = dtype_name(a)
    # (repr writes inf and nan as names Python does not know: a mask's -inf as float("-inf"))
    body = re.sub(r"\b(inf|nan)\b", r'float("\1")', repr(np.asarray(to_numpy(a)).tolist()))
    backend = backend_name_of(a)
    if backend == "torch":
        return f"torch.tensor({body}, dtype=torch.{dt})"
    if backend == "jax":
        return f"jnp.array({body}, dtype=jnp.{dt})"
    return f"np.array({body}, dtype=np.{dt})"


def malformed(data: Mapping[str, Any], fields: Mapping[str, type], items: str, keys: set[str]) -> list[str]:
    """What a report read back lacks: each of ``fields`` not of its type, and
    each record of the list ``data[items]`` that is no object with ``keys``
    (``[]``: none; the first five are what a message names)."""
    wrong = [f"{k} ({type(data.get(k)).__name__})" for k, kind in fields.items() if not isinstance(data.get(k), kind)]
    records = data.get(items) if isinstance(data.get(items), list) else []
    return wrong + [f"{items}[{i}]" for i, r in enumerate(records) if not (isinstance(r, dict) and keys <= set(r))]
