"""``gradverify write``: property-based gradient tests, written from the
checker calls a suite made (``pytest --gradverify-replace=record``) or from
the custom rules a package defines.

The written module is plain pytest with the gradverify plugin: one test per
function, each a ``gv.verify`` over a strategy generalised from what was
recorded (or annotated), every recorded point replayed first.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Sequence
from pathlib import Path

from .module import Written, assemble, finish, header
from .recorded import written
from .records import Unwritten, grouped, load
from .scan import scanned
from .source import Source

__all__ = ["Written", "write"]

#: Examples each written test draws (the marker's max_examples).
MAX_EXAMPLES = 25


def write(
    target: str | os.PathLike[str],
    output: str | os.PathLike[str],
    max_examples: int = MAX_EXAMPLES,
    except_: Sequence[str] = (),
) -> Written:
    """Write property-based tests for ``target`` to ``output``: a records
    directory (or one of its ``calls-*.jsonl``), or an importable package
    whose custom rules are scanned. ``except_``: names of the exceptions
    fn raises at inputs outside its contract; every test rejects such
    drawn inputs (gv.verify's ``except_``, as ``hypothesis write --except``)."""
    output = Path(output)
    path = Path(target)
    recorded = path.is_file() or path.is_dir() and any(path.glob("calls-*.jsonl"))
    if not recorded and _importable(str(target)):
        return scanned(str(target), output, max_examples, except_)
    records = load(target)
    subjects, unwritten = grouped(records)
    source = Source(output)
    source.refuse(except_)
    tests = []
    for subject in subjects:
        test = written(subject, source)
        if isinstance(test, Unwritten):
            unwritten.append(test)
        else:
            tests.append(test)
    top = header(f"{len(records)} checker call(s) recorded in {target}", unwritten)
    module = assemble(top, source, [t.code for t in tests], max_examples)
    finish(output, module, source)
    said = [f"{t.name}: {t.subject.name} ({len(t.subject.calls)} call(s), {t.examples} example(s))" for t in tests]
    return Written(output, said, unwritten, len(records))


def _importable(name: str) -> bool:
    if not name.replace(".", "").replace("_", "").isalnum():
        return False
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False
