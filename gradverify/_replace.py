"""``pytest --gradverify-replace``: a suite's own gradient checks, rerouted.

``replace`` routes every call of ``torch.autograd.gradcheck`` and
``gradgradcheck`` (the functions in ``torch.autograd`` and in the module
``torch.autograd.gradcheck``) and of ``jax.test_util.check_grads`` (and
``jax._src.public_test_util.check_grads``, which it is) through
gradverify's drop-ins for the session. ``compare`` runs both checkers on
each call, keeps the original's verdict for the test's outcome, and offers
each pair of verdicts and times to the observers as a ``compare`` event.
``record`` runs the original alone and offers what each call was made with
(see ``_record``) as a ``record`` event, its point saved beside the records.

A name bound before the session started (``from torch.autograd import
gradcheck`` in a module imported earlier, e.g. by a conftest) keeps the
original: the switch patches the frameworks before any test module is
imported, so a suite's own imports see the drop-ins.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from . import _observe, _record

__all__ = ["MODES", "PEERS", "rerouted"]

#: The switch's modes.
MODES = ("replace", "compare", "record")

#: (the framework's module, the function's name there, the drop-in's module).
PEERS = (
    ("torch.autograd", "gradcheck", "gradverify.torch"),
    ("torch.autograd", "gradgradcheck", "gradverify.torch"),
    ("torch.autograd.gradcheck", "gradcheck", "gradverify.torch"),
    ("torch.autograd.gradcheck", "gradgradcheck", "gradverify.torch"),
    ("jax.test_util", "check_grads", "gradverify.jax"),
    ("jax._src.public_test_util", "check_grads", "gradverify.jax"),
)


@contextlib.contextmanager
def rerouted(mode: str, directory: Path | None = None) -> Iterator[list[str]]:
    """Within it, the peers' functions are the drop-ins (``replace``), run
    beside them (``compare``) or recorded (``record``: each call's point
    saved under ``directory``); yields the names patched. Frameworks that
    are not installed are left alone."""
    if mode not in MODES:
        raise ValueError(f"--gradverify-replace: expected one of {MODES}; found {mode!r}")
    patched: list[tuple[Any, str, Any]] = []
    try:
        for module_name, name, dropin_module in PEERS:
            root = module_name.split(".")[0]
            if importlib.util.find_spec(root) is None:
                continue
            module = sys.modules.get(module_name) or importlib.import_module(module_name)
            original = getattr(module, name, None)
            if original is None or getattr(original, "__gradverify_peer__", False):
                continue
            dropin = getattr(importlib.import_module(dropin_module), name)
            if mode == "record":
                replacement = _recorded(original, name, directory)
            elif mode == "compare":
                replacement = _compared(original, dropin, name)
            else:
                replacement = _replaced(dropin, name)
            setattr(module, name, replacement)
            patched.append((module, name, original))
        yield [f"{m.__name__}.{n}" for m, n, _ in patched]
    finally:
        for module, name, original in reversed(patched):
            setattr(module, name, original)


def _replaced(dropin: Callable[..., Any], name: str) -> Callable[..., Any]:
    @functools.wraps(dropin)
    def call(*args: Any, **kwargs: Any) -> Any:
        return dropin(*args, **kwargs)

    call.__gradverify_peer__ = True  # type: ignore[attr-defined]
    return call


_inside = threading.local()


def _original(original: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple:
    """The original checker on the call: (its value, what it raised, seconds).
    Calls it makes of the peers meanwhile (torch's gradgradcheck calls its
    gradcheck) are the original's own."""
    start = time.perf_counter()
    _inside.original = True
    try:
        value, raised = original(*args, **kwargs), None
    except Exception as e:  # noqa: BLE001 -- the original's verdict, raised again by the caller
        value, raised = None, e
    finally:
        _inside.original = False
    return value, raised, time.perf_counter() - start


def _compared(original: Callable[..., Any], dropin: Callable[..., Any], name: str) -> Callable[..., Any]:
    """Both checkers on the call; the original's outcome is the call's."""

    @functools.wraps(original)
    def call(*args: Any, **kwargs: Any) -> Any:
        if getattr(_inside, "original", False):  # (torch's gradgradcheck calls its gradcheck: the original's)
            return original(*args, **kwargs)
        value, raised, peer_seconds = _original(original, args, kwargs)
        start = time.perf_counter()
        try:
            ours, ours_raised = dropin(*args, **kwargs), None
        except Exception as e:  # noqa: BLE001 -- gradverify's verdict never changes the test's
            ours, ours_raised = None, e
        gv_seconds = time.perf_counter() - start
        _observe.finished(
            "compare",
            {
                "peer": name,
                "function": _name_of(args[0] if args else kwargs.get("func", kwargs.get("f"))),
                "peer_ok": raised is None and value is not False,
                "peer_said": None if raised is None else _first_line(raised),
                "gradverify_ok": ours_raised is None and ours is not False,
                "gradverify_said": None if ours_raised is None else _first_line(ours_raised),
                "peer_seconds": peer_seconds,
                "gradverify_seconds": gv_seconds,
            },
        )
        if raised is not None:
            raise raised
        return value

    call.__gradverify_peer__ = True  # type: ignore[attr-defined]
    return call


def _recorded(original: Callable[..., Any], name: str, directory: Path | None) -> Callable[..., Any]:
    """The original on the call, and what the call was made with as a ``record`` event."""

    @functools.wraps(original)
    def call(*args: Any, **kwargs: Any) -> Any:
        if getattr(_inside, "original", False):  # (torch's gradgradcheck calls its gradcheck)
            return original(*args, **kwargs)
        try:
            record = _record.described(name, original, args, kwargs, directory)
        except Exception as e:  # noqa: BLE001 -- a call that cannot be described still runs, and says why
            fn = args[0] if args else kwargs.get("func", kwargs.get("f"))
            record = {"peer": name, "function": {"path": None, "name": _name_of(fn), "why": _first_line(e)}}
        value, raised, record["seconds"] = _original(original, args, kwargs)
        record["verdict"] = "passed" if raised is None and value is not False else "failed"
        record["said"] = None if raised is None else _first_line(raised)
        _observe.finished("record", record)
        if raised is not None:
            raise raised
        return value

    call.__gradverify_peer__ = True  # type: ignore[attr-defined]
    return call


def _name_of(fn: Any) -> str:
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"[:300]
