"""The block engine: an elementwise kernel run block by block over long
vectors (each block's temporaries stay in cache), or compiled once by jax."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import xp as _xp
from .records import Array

__all__ = ["CHUNK", "DEVICE_CHUNK", "Scratch", "block_slices", "blockwise", "compiled"]


#: Elements per block of estimate() and model_reference() on the CPU: their
#: passes stay in cache. On an accelerator a block is larger (each costs a
#: few dozen kernel launches) and only bounds the temporaries' memory; jax
#: arrays are done in one block.
CHUNK = 1 << 15


DEVICE_CHUNK = 1 << 22


def block_slices(n: int, like: Array, chunk: int | None) -> list[slice]:
    if chunk is None:
        if _xp.immutable(like):
            chunk = max(n, 1)  # jax: a slice is a copy, and every new shape compiles
        else:
            chunk = CHUNK if _xp.device_kind(like) == "cpu" else DEVICE_CHUNK
    return [slice(k, min(k + chunk, n)) for k in range(0, n, chunk)] or [slice(0, 0)]


_KERNELS: dict[Any, Any] = {}


def blockwise(fn: Callable, like: Array, *args: Any, chunk: int | None = None) -> tuple[Array, ...]:
    """``fn`` (an elementwise kernel returning a tuple of float64 or bool
    vectors) over vectors of ``like``'s length: one compiled call for jax,
    block by block (of ``chunk`` elements, see block_slices) into whole-length
    outputs elsewhere (each block's temporaries stay in cache). An argument
    is sliced per block when it is an array of that length, or a tuple of
    them; anything else is passed as it is."""
    if _xp.immutable(like):
        return compiled(fn, like)(*args)
    n = _xp.size(like)

    def sliced(a: Any, b: slice) -> Any:
        if isinstance(a, tuple):
            return tuple(sliced(v, b) for v in a)
        if _xp.is_array(a) and len(tuple(a.shape)) == 1 and tuple(a.shape)[0] == n:
            return a[b]
        return a

    blocks = block_slices(n, like, chunk)
    if len(blocks) == 1:
        return fn(*args)
    outs: list[Array] = []
    for b in blocks:
        parts = fn(*(sliced(a, b) for a in args))
        if not outs:
            outs = [_xp.empty(n, like, "bool" if _is_bool(p) else "float64") for p in parts]
        for o, p in zip(outs, parts):
            o[b] = p
    return tuple(outs)


def _is_bool(a: Array) -> bool:
    return str(a.dtype).endswith("bool")


def compiled(fn: Callable, like: Array, static: tuple[int, ...] = ()) -> Callable:
    """``fn`` compiled by jax for jax arrays (one fused pass; numbers are traced
    arguments, so a new step compiles nothing; ``static``: the positions of
    arguments that are structure, not data), ``fn`` itself elsewhere."""
    if not _xp.immutable(like):
        return fn
    if fn not in _KERNELS:
        import jax

        _KERNELS[fn] = jax.jit(fn, static_argnums=static)
    return _KERNELS[fn]


class Scratch:
    """Reusable temporaries of a block loop (numpy and torch): each name gets one
    buffer of the largest block's length, reused by every block - a fresh
    array per operation costs more in page faults than its arithmetic. None
    for jax (compiled kernels need none)."""

    def __init__(self, like: Any, length: int) -> None:
        self.like, self.length = like, length
        self.buffers: dict[str, Any] = {}

    @classmethod
    def beside(cls, like: Any, length: int) -> Scratch | None:
        return None if _xp.immutable(like) else cls(like, length)

    def __call__(self, name: str, m: int, dtype: str = "float64") -> Any:
        buf = self.buffers.get(name)
        if buf is None:
            buf = self.buffers[name] = _xp.empty(self.length, self.like, dtype)
        return buf[:m]
