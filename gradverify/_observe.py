"""Who called gradverify, with what: the outermost ``gv.check`` or
``gv.verify`` call of a thread is offered to each registered observer.

``gradverify triage rerun NODE_ID`` runs a pytest test with an observer
registered and so learns the function and strategy the test checks, to rerun
them across seeds, steps, dtypes and thread counts. Calls made inside another
call (``gv.verify`` checks every example through ``gv.check``) are not offered.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

Observer = Callable[[str, Any, Any, dict[str, Any]], None]
_observers: list[Observer] = []
_depth = threading.local()


@contextlib.contextmanager
def call(kind: str, fn: Any, inputs: Any, options: dict[str, Any]) -> Iterator[None]:
    """Mark one gradverify call: ``kind`` is "check" (``inputs`` the argument
    tuple) or "verify" (``inputs`` the strategy)."""
    depth = getattr(_depth, "n", 0)
    if depth == 0:
        for observer in list(_observers):
            observer(kind, fn, inputs, options)
    _depth.n = depth + 1
    try:
        yield
    finally:
        _depth.n = depth


@contextlib.contextmanager
def observing(observer: Observer) -> Iterator[None]:
    _observers.append(observer)
    try:
        yield
    finally:
        _observers.remove(observer)
