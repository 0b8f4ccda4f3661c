"""jax jit traces that raised, released: see ``no_leaked_traces``."""

from __future__ import annotations

import contextlib
import gc
import weakref
from collections.abc import Iterator

__all__ = ["no_leaked_traces"]

#: Whether a leaked trace was released since the last collection.
_RELEASED = [False]


@contextlib.contextmanager
def no_leaked_traces(collect: bool = False) -> Iterator[None]:
    """Release the jit traces that raised during a check.

    A jit trace that raises leaves its frame alive: jax registers a
    ``weakref.finalize`` on each constant's tracer whose callback is bound to
    the trace, whose frame holds the tracer - a cycle rooted in the finalize
    registry. The frame holds fn's numpy constants as jax canonicalized them,
    and jax caches that canonicalization by the numpy array alone, not by the
    x64 mode: a constant canonicalized in a failed float64 trace (int64)
    would stay int64 in the caller's later x64-off code (an int32/int64
    promotion error under strict promotion, an int64 array elsewhere). Every
    trace of the check has ended when it does, so a trace's finalizer still
    registered then belongs to a leaked frame: detached, the cycle is garbage.
    Around each compiled call (whose trace may raise) and around the check
    (fn's eager JVP and VJP trace the jitted functions fn calls), which
    collects the garbage: until the exception that ended a trace is dropped
    its traceback still holds the frame."""
    registry = getattr(weakref.finalize, "_registry", None)
    before = set(registry) if isinstance(registry, dict) else None
    try:
        yield
    finally:
        if before is not None:
            leaked = [
                f
                for f, info in list(registry.items())
                if f not in before and type(getattr(info.func, "__self__", None)).__name__ == "DynamicJaxprTrace"
            ]
            for f in leaked:
                f.detach()
            _RELEASED[0] |= bool(leaked)
        if collect and _RELEASED[0]:
            _RELEASED[0] = False
            gc.collect()
