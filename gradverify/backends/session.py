"""Compiling sessions: where a backend may keep compiled forms of fn.

A session is one run over many checks of the same function (``gv.verify``),
or one check (a backend's ``checking``): compiling fn, its JVP and its VJP
once per shape pays off there, and the compiled forms live as long as the
session (and fn). A new session compiles fn anew, so a function edited
between two checks (a notebook, a changed global) is checked as it is now
(a backend may still reuse what compiling gave for the very same program,
see backends.jax)."""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

__all__ = ["compiling", "compiling_primal", "session_cache", "session_kinds"]

_CACHE: ContextVar[weakref.WeakKeyDictionary[Any, Any] | None] = ContextVar("gradverify_compiled", default=None)
#: What a session compiles: fn (alone, and at stacked points), its JVP and its
#: VJP ("verify"), or fn alone (one check).
_KINDS: ContextVar[tuple[str, ...]] = ContextVar(
    "gradverify_compiled_kinds", default=("primal", "primals", "jvp", "vjp")
)


@contextlib.contextmanager
def compiling() -> Iterator[None]:
    """Within the block, backends may compile the functions checked and keep
    the compiled forms until the block ends (jax: fn, its JVP and its VJP
    under ``jax.jit``, once per shape and dtype). Each ``gv.verify`` run is
    such a block; wrap several runs of the same function (seeds, a test
    module) to share one::

        with gv.compiling():
            for seed in range(10):
                gv.verify(fn, strategy, seed=seed)

    Inside, a function is taken to stay the same: one edited within the
    block (a changed global it reads) may be checked as it was. Nested
    blocks share the outermost one."""
    if _CACHE.get() is not None:
        yield
        return
    token = _CACHE.set(weakref.WeakKeyDictionary())
    try:
        yield
    finally:
        _CACHE.reset(token)


@contextlib.contextmanager
def compiling_primal() -> Iterator[None]:
    """A session of one check on large arrays that compiles fn alone: it is
    evaluated a few dozen times (the finite differences), its JVP and VJP a
    few times each, where compiling them would cost more than it saves.
    Inside a ``compiling`` block, that block's session is used."""
    if _CACHE.get() is not None:
        yield
        return
    token, kinds = _CACHE.set(weakref.WeakKeyDictionary()), _KINDS.set(("primal",))
    try:
        yield
    finally:
        _KINDS.reset(kinds)
        _CACHE.reset(token)


def session_kinds() -> tuple[str, ...]:
    """What this session compiles."""
    return _KINDS.get()


def session_cache() -> weakref.WeakKeyDictionary[Any, Any] | None:
    """The compiled forms of this session, keyed weakly by function (None: no session)."""
    return _CACHE.get()
