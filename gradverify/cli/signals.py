"""SIGINT and SIGTERM while the command runs: a sweep keeps the report of
what finished, and the command exits 130 wherever the signal lands."""

from __future__ import annotations

import contextlib
import sys
from typing import Any

__all__ = ["Signals", "in_finalizer"]


class Signals:
    """SIGINT and SIGTERM (a CI job's timeout, ``docker stop``) while the
    command runs: a KeyboardInterrupt where the command is, so that a sweep
    writes the report of what finished - never inside a finalizer or a
    ``__del__`` (which would print it and swallow it: the command would go
    on and exit 0), where it is put off until that code returns. Either way
    the command exits 130. ``program``: the process ends with the command;
    a signal after it (the interpreter shutting down) exits 130 at once."""

    def __init__(self, program: bool) -> None:
        self.program = program
        self.received = False
        self.done = False
        self.previous: dict[int, Any] = {}

    def __enter__(self) -> Signals:
        import signal
        import threading

        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self.previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: Any) -> None:
        import signal

        self.done = True
        if not self.program:
            for sig, handler in self.previous.items():
                signal.signal(sig, handler)

    def _handle(self, signum: int, frame: Any) -> None:
        self.received = True
        if self.done:
            import os

            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(Exception):
                    stream.flush()
            os._exit(130)
        if in_finalizer(frame):
            import _thread
            import threading

            # (delivered again shortly: by then the finalizer has returned)
            threading.Timer(0.01, _thread.interrupt_main).start()
            return
        raise KeyboardInterrupt


def in_finalizer(frame: Any) -> bool:
    """Whether ``frame`` runs inside a weakref finalizer, a ``__del__`` or a
    garbage-collector callback (Hypothesis registers one): code whose
    exceptions Python reports as ignored and drops."""
    import gc
    import weakref

    finalize = weakref.finalize.__call__.__code__
    callbacks = {getattr(cb, "__code__", None) for cb in gc.callbacks}
    while frame is not None:
        if frame.f_code is finalize or frame.f_code.co_name == "__del__" or frame.f_code in callbacks:
            return True
        frame = frame.f_back
    return False
