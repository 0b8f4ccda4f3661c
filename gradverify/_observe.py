"""Who called gradverify, with what: the outermost ``gv.check`` or
``gv.verify`` call of a thread is offered to each registered observer.

``gradverify triage rerun NODE_ID`` runs a pytest test with an observer
registered and so learns the function and strategy the test checks, to rerun
them across seeds, steps, dtypes and thread counts; the pytest plugin
registers a result observer to show the report of every failing call a test
made. Calls made inside another call (``gv.verify`` checks every example
through ``gv.check``) are not offered.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["Observer", "ResultObserver", "call", "finished", "observing", "observing_results", "unseen"]

Observer = Callable[[str, Any, Any, dict[str, Any]], None]
ResultObserver = Callable[[str, Any], None]
_observers: list[Observer] = []
_result_observers: list[ResultObserver] = []
_depth = threading.local()


@contextlib.contextmanager
def call(kind: str, fn: Any, inputs: Any, options: dict[str, Any]) -> Iterator[bool]:
    """Mark one gradverify call: ``kind`` is "check" (``inputs`` the argument
    tuple) or "verify" (``inputs`` the strategy). Yields whether it is the
    outermost (whose result goes to ``finished``)."""
    depth = getattr(_depth, "n", 0)
    if depth == 0:
        for observer in list(_observers):
            observer(kind, fn, inputs, options)
    _depth.n = depth + 1
    try:
        yield depth == 0
    finally:
        _depth.n = depth


@contextlib.contextmanager
def unseen() -> Iterator[None]:
    """Calls made within are not offered to observers: for a caller that
    says its own call afterwards, with what it learned meanwhile."""
    depth = getattr(_depth, "n", 0)
    _depth.n = depth + 1
    try:
        yield
    finally:
        _depth.n = depth


def finished(kind: str, result: Any) -> None:
    """The result of an outermost call, offered to each result observer."""
    for observer in list(_result_observers):
        observer(kind, result)


@contextlib.contextmanager
def _registered(registry: list[Any], observer: Any) -> Iterator[None]:
    registry.append(observer)
    try:
        yield
    finally:
        registry.remove(observer)


def observing(observer: Observer) -> contextlib.AbstractContextManager[None]:
    """``observer(kind, fn, inputs, options)`` offered each outermost call, within the block."""
    return _registered(_observers, observer)


def observing_results(observer: ResultObserver) -> contextlib.AbstractContextManager[None]:
    """``observer(kind, result)`` offered each outermost call's result, within the block."""
    return _registered(_result_observers, observer)
