"""Array arithmetic wherever the arguments live.

A check's whole-array work - the point and its copies, the directions, the
finite-difference stencils and their estimates, the bounds, the projections
and the localisation's masks - runs in the namespace and on the device of
fn's arguments (numpy, or torch and jax through array-api-compat), in
float64. Only scalars, the few elements a finding or the kink ladder looks
at, and the report's summaries come to the host. Arrays of at most
``HOST_MAX`` elements are worked on in numpy instead: there one transfer
costs less than the launch of the dozens of small kernels a check makes.

The helpers take arrays of any of the three kinds; on numpy arrays they are
numpy itself, so the small-array path computes exactly what numpy does.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from array_api_compat import array_namespace

__all__ = [
    "HOST_MAX",
    "Asked",
    "absmax",
    "absmaxes",
    "absolute",
    "add",
    "all_",
    "all_finite",
    "any_",
    "argmax",
    "as64",
    "changed",
    "axpy",
    "concat",
    "copy",
    "count",
    "device",
    "device_floating",
    "device_kind",
    "dot",
    "dots",
    "empty",
    "equal",
    "extremes",
    "extremes_and",
    "extremes_of",
    "fmaxes",
    "finite",
    "flat",
    "fmax",
    "full",
    "host",
    "iabs",
    "imaximum",
    "iminimum",
    "immutable",
    "index",
    "is_array",
    "is_floating",
    "like",
    "maxabs_of",
    "mul",
    "nonzero",
    "ns",
    "on_host",
    "put",
    "quiet",
    "read",
    "shifted",
    "size",
    "sub",
    "take",
    "top_of",
    "window",
    "zeros",
]

#: Inputs of at most this many elements in all are worked on in numpy.
HOST_MAX = 1 << 16


def ns(*arrays: Any) -> Any:
    """The namespace of the first array that is not numpy (numpy if none)."""
    if len(arrays) == 1 and type(arrays[0]) is np.ndarray:
        return np  # (the common case, first)
    for a in arrays:
        if a is None or isinstance(a, (np.ndarray, np.generic, float, int, bool)):
            continue
        return array_namespace(a)
    return np


def on_host(a: Any) -> bool:
    return type(a) is np.ndarray or isinstance(a, (np.ndarray, np.generic, float, int, bool))


def host(a: Any) -> np.ndarray:
    """``a`` as a numpy array (a small one: a subset, a scalar, a summary)."""
    if on_host(a):
        return np.asarray(a)
    if hasattr(a, "detach"):  # torch
        return a.detach().cpu().numpy()
    return np.array(a)  # (jax: a writable copy; numpy's view of a jax array is read-only)


def size(a: Any) -> int:
    """The number of elements (``.size`` is a method on torch tensors)."""
    if type(a) is np.ndarray:
        return a.size
    return math.prod(tuple(a.shape))


def like(values: Any, ref: Any, dtype: Any = None) -> Any:
    """Host ``values`` (an index array, a few numbers) as an array beside ``ref``."""
    if on_host(ref):
        return np.asarray(values) if dtype is None else np.asarray(values, dtype=dtype)
    xp = ns(ref)
    v = np.array(values)  # (a writable copy: torch will not wrap read-only memory)
    if dtype is None:
        dtype = xp.float64 if v.dtype.kind == "f" else (xp.bool if v.dtype.kind == "b" else xp.int64)
    return xp.asarray(v, dtype=dtype, device=device(ref))


def device(a: Any) -> Any:
    if on_host(a):
        return "cpu"
    xp = ns(a)
    return xp.__array_namespace_info__().default_device() if not hasattr(a, "device") else a.device


def device_kind(a: Any) -> str:
    """ "cpu" for host arrays and arrays on a CPU device, else the accelerator's kind."""
    if on_host(a):
        return "cpu"
    if hasattr(a, "devices"):  # jax
        return next(iter(a.devices())).platform
    return a.device.type


def is_array(a: Any) -> bool:
    return hasattr(a, "shape") and hasattr(a, "dtype")


def index(idx: Any, ref: Any) -> Any:
    """A host index array usable on ``ref`` (a tensor index for torch)."""
    if on_host(ref) or not isinstance(idx, np.ndarray):
        return idx
    return like(idx, ref, ns(ref).int64)


def take(a: Any, idx: Any) -> np.ndarray:
    """a[idx] on the host (``idx``: host integers)."""
    if on_host(a):
        return a[idx]
    return host(a[index(np.asarray(idx), a)])


def put(a: Any, idx: Any, values: Any) -> Any:
    """a with a[idx] = values: in place where arrays are mutable (numpy, torch,
    our own arrays only), a new array for jax. ``idx``: host integers or a mask
    beside ``a``; ``values``: a scalar, host numbers or an array beside ``a``."""
    if on_host(a):
        a[idx] = values
        return a
    if not isinstance(idx, np.ndarray) and hasattr(a, "at"):  # a jax mask
        return ns(a).where(idx, values if not isinstance(values, np.ndarray) else like(values, a, a.dtype), a)
    if isinstance(idx, np.ndarray):
        if idx.dtype == bool:
            idx = np.flatnonzero(idx)
        idx = index(idx, a)
    if isinstance(values, np.ndarray):
        values = like(values, a, a.dtype)
    if hasattr(a, "at"):  # jax
        return a.at[idx].set(values)
    a[idx] = values
    return a


def zeros(n: Any, ref: Any, dtype: str = "float64") -> Any:
    if type(ref) is np.ndarray:
        return np.zeros(n, dtype=dtype)
    return full(n, 0, ref, dtype)


def full(n: Any, value: Any, ref: Any, dtype: str = "float64") -> Any:
    xp = ns(ref)
    if xp is np:
        return np.full(n, value, dtype=dtype)
    return xp.full(n, value, dtype=getattr(xp, dtype), device=device(ref))


def immutable(a: Any) -> bool:
    """jax arrays: no writes in place, and a new shape compiles new kernels."""
    return not on_host(a) and hasattr(a, "at")


def window(u: Any, lo: int, hi: int) -> Any:
    """``u`` on [lo, hi), zero elsewhere (a fresh array)."""
    xp = ns(u)
    if immutable(u):  # (a mask of u's own shape: no kernel per slice length)
        i = xp.arange(size(u))
        return xp.where((i >= lo) & (i < hi), u, 0.0)
    out = xp.zeros_like(u)
    out[lo:hi] = u[lo:hi]
    return out


def fmax(a: Any, where: Any = None) -> float:
    """max |a| over its finite elements (or over ``where``), 0 when there are none."""
    xp = ns(a)
    if xp is np:
        return float(np.max(np.abs(a), where=np.isfinite(a) if where is None else where, initial=0.0))
    if size(a) == 0:
        return 0.0
    if where is None:
        top = _maxabs(a)  # (one pass where every element is finite, as most are)
        if math.isfinite(top):
            return top
    keep = finite(a) if where is None else where
    return float(xp.max(xp.where(keep, xp.abs(a), 0.0)))


def empty(n: Any, ref: Any, dtype: str = "float64") -> Any:
    xp = ns(ref)
    if xp is np:
        return np.empty(n, dtype=dtype)
    return xp.empty(n, dtype=getattr(xp, dtype), device=device(ref))


def iabs(a: Any) -> Any:
    """|a|, in place where arrays are mutable (``a`` must be a temporary)."""
    if isinstance(a, np.ndarray):
        return np.abs(a, out=a)
    if hasattr(a, "abs_"):
        return a.abs_()
    return ns(a).abs(a)


def sign(a: Any) -> Any:
    """sign(a) of a real array with no NaN (torch: its own, one pass; the
    array API's adds a pass that carries NaN through)."""
    if hasattr(a, "sign") and not isinstance(a, np.ndarray):
        return a.sign()
    return ns(a).sign(a)


def imaximum(a: Any, b: Any) -> Any:
    """maximum(a, b), into ``a`` where arrays are mutable (a temporary)."""
    return _into(a, b, "maximum")


def iminimum(a: Any, b: Any) -> Any:
    """minimum(a, b), into ``a`` where arrays are mutable (a temporary)."""
    return _into(a, b, "minimum")


def _into(a: Any, b: Any, op: str) -> Any:
    if isinstance(a, np.ndarray):
        return getattr(np, op)(a, b, out=a)
    if not hasattr(a, "abs_"):  # jax: a new array
        return getattr(ns(a), op)(a, b)
    torch = _torch()
    if not isinstance(b, torch.Tensor):  # (a number: clamp keeps NaN as maximum does)
        return torch.clamp(a, min=b, out=a) if op == "maximum" else torch.clamp(a, max=b, out=a)
    return getattr(torch, op)(a, b, out=a)


def device_floating(v: Any) -> bool:
    """A non-empty torch array of float16, bfloat16, float32 or float64
    (whose extremes ``aminmax`` gives in one pass; torch has no aminmax of
    its float8 types)."""
    return not on_host(v) and hasattr(v, "aminmax") and bool(size(v)) and str(v.dtype) in _AMINMAX


_AMINMAX = ("torch.float16", "torch.bfloat16", "torch.float32", "torch.float64")


def all_finite(a: Any) -> bool:
    """Whether every element is finite (one reduction on a device array)."""
    if size(a) == 0:
        return True
    if on_host(a):
        return bool(np.isfinite(a).all())
    return math.isfinite(_maxabs(a))


def sub(a: Any, b: Any, out: Any = None) -> Any:
    """a - b, into ``out`` when given (numpy and torch)."""
    if out is None:
        return a - b
    if isinstance(out, np.ndarray):
        return np.subtract(a, b, out=out)
    return _torch().sub(a, b, out=out)


def add(a: Any, b: Any, out: Any = None) -> Any:
    """a + b, into ``out`` when given."""
    if out is None:
        return a + b
    if isinstance(out, np.ndarray):
        return np.add(a, b, out=out)
    return _torch().add(a, b, out=out)


def mul(a: Any, b: float, out: Any = None) -> Any:
    """a * b (b a number), into ``out`` when given."""
    if out is None:
        return a * b
    if isinstance(out, np.ndarray):
        return np.multiply(a, b, out=out)
    return _torch().mul(a, b, out=out)


def absolute(a: Any, out: Any = None) -> Any:
    """|a|, into ``out`` when given."""
    if out is None:
        return ns(a).abs(a)
    if isinstance(out, np.ndarray):
        return np.abs(a, out=out)
    return _torch().abs(a, out=out)


def _torch() -> Any:
    import torch

    return torch


def finite(a: Any) -> Any:
    """isfinite(a): |a| < inf, two cheap passes (torch's isfinite makes more)."""
    xp = ns(a)
    if xp is np:
        return np.isfinite(a)
    return xp.abs(a) < math.inf


def axpy(x: Any, t: float, w: Any, out: Any = None) -> Any:
    """x + t w: a fresh array, or written into ``out`` (the same values; one
    pass on torch)."""
    if hasattr(x, "add") and hasattr(x, "detach"):  # torch
        return x.add(w, alpha=t) if out is None else _torch().add(x, w, alpha=t, out=out)
    if out is None:
        return x + t * w
    np.multiply(w, t, out=out)
    return np.add(x, out, out=out)


def shifted(x: Any, j: int, delta: float, out: Any = None) -> Any:
    """A copy of the flat array ``x`` with ``delta`` added to element ``j``
    (written into ``out`` where given)."""
    if immutable(x):
        return x.at[j].add(delta)
    if out is None:
        out = copy(x)
    elif ns(x) is np:
        np.copyto(out, x)
    else:
        out.copy_(x)
    out[j] += delta
    return out


def shares_memory(a: Any, b: Any) -> bool:
    """Whether two mutable arrays may overlap in memory (a view of the other, or the same)."""
    if ns(a) is np or ns(b) is np:
        return ns(a) is ns(b) and bool(np.may_share_memory(a, b))
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def absmax(a: Any) -> float:
    """max |a| (NaN propagates), 0 for an empty array."""
    xp = ns(a)
    if xp is np:
        return float(np.max(np.abs(a), initial=0.0))
    return 0.0 if size(a) == 0 else _maxabs(a)


def extremes(a: Any) -> tuple[float, float]:
    """(min, max) of a non-empty device array (NaN propagates; torch: one
    pass and one read)."""
    if hasattr(a, "aminmax"):
        lo, hi = read(*a.aminmax())
        return lo, hi
    xp = ns(a)
    return float(xp.min(a)), float(xp.max(a))


def read(*scalars: Any) -> list[float]:
    """Device scalars (0-d arrays of one backend) as Python floats, handed to
    the host in one read: one synchronisation on a GPU, not one each (a
    bool as 0.0 or 1.0)."""
    if not scalars:
        return []
    first = scalars[0]
    if len(scalars) == 1 or on_host(first) or not _stack_exactly(scalars):
        return [float(v) for v in scalars]
    if hasattr(first, "detach"):  # torch
        return [float(v) for v in _torch().stack(scalars).tolist()]
    return [float(v) for v in np.asarray(ns(first).stack(scalars))]


def _stack_exactly(scalars: tuple[Any, ...]) -> bool:
    """Whether stacking keeps every value: one dtype, or floats and bools
    (promoted to a float that holds each of them and 0/1 exactly: float16
    and bfloat16 to float32); never an integer beside a float, which
    promotion may round."""
    first = scalars[0].dtype
    if all(s.dtype == first for s in scalars):
        return True
    return all(str(s.dtype).removeprefix("torch.") == "bool" or is_floating(s) for s in scalars)


@dataclass
class Asked:
    """Device scalars one stage asks for, read with another stage's read
    (one synchronisation for both): ``take`` receives their values."""

    scalars: list[Any]
    take: Callable[[list[float]], None]


def changed(a: Any, b: Any) -> Any:
    """Whether ``b`` differs from ``a`` anywhere: a host bool, or for two
    device arrays of one shape a 0-d device bool to ``read`` with other
    scalars (where it holds, NaN at one place in both may be all there is:
    ``equal`` decides)."""
    if on_host(a) or on_host(b) or tuple(a.shape) != tuple(b.shape):
        return not equal(a, b)
    return ns(a, b).any(a != b)


def _maxabs(a: Any) -> float:
    """max |a| of a non-empty device array, NaN if any element is NaN (torch:
    one pass for both extremes, no |a| array, one read)."""
    return maxabs_of(*extremes(a)) if hasattr(a, "aminmax") else float(ns(a).max(ns(a).abs(a)))


def maxabs_of(lo: float, hi: float) -> float:
    """max |.| of an array of extremes (lo, hi), NaN where either is."""
    return math.nan if math.isnan(lo) or math.isnan(hi) else max(-lo, hi)


def absmaxes(*arrays: Any) -> list[float]:
    """``absmax`` of each array, read in one read where they are torch arrays."""
    if not all(hasattr(a, "aminmax") and size(a) for a in arrays):
        return [absmax(a) for a in arrays]
    return [maxabs_of(lo, hi) for lo, hi in extremes_of(*arrays)]


def extremes_of(*arrays: Any) -> list[tuple[float, float]]:
    """``extremes`` of each non-empty array, read in one read where they are torch arrays."""
    return extremes_and(arrays, ())[0]


def extremes_and(arrays: Sequence[Any], scalars: Sequence[Any]) -> tuple[list[tuple[float, float]], list[float]]:
    """``extremes`` of each non-empty array and the values of device
    ``scalars`` (floats or bools, see ``read``), read in one read where the
    arrays are torch arrays."""
    if not all(hasattr(a, "aminmax") for a in arrays):
        return [extremes(a) for a in arrays], read(*scalars)
    got = read(*(e for a in arrays for e in a.aminmax()), *scalars)
    ends = got[: 2 * len(arrays)]
    return list(zip(ends[::2], ends[1::2])), got[2 * len(arrays) :]


def fmaxes(*arrays: Any) -> list[float]:
    """``fmax`` of each array, read in one read where they are torch arrays
    (a second pass only for an array with a non-finite element)."""
    if not all(hasattr(a, "aminmax") and size(a) for a in arrays):
        return [fmax(a) for a in arrays]
    return [top if math.isfinite(top) else fmax(a) for a, top in zip(arrays, absmaxes(*arrays))]


def any_(mask: Any) -> bool:
    if isinstance(mask, (bool, np.bool_)):
        return bool(mask)
    if type(mask) is np.ndarray:
        return bool(mask.any())
    return bool(ns(mask).any(mask))


def all_(mask: Any) -> bool:
    if isinstance(mask, (bool, np.bool_)):
        return bool(mask)
    if type(mask) is np.ndarray:
        return bool(mask.all())
    return bool(ns(mask).all(mask))


def count(mask: Any) -> int:
    xp = ns(mask)
    return int(np.count_nonzero(mask)) if xp is np else int(xp.sum(xp.astype(mask, xp.int64)))


def nonzero(mask: Any, limit: int | None = None) -> np.ndarray:
    """The flat indices where ``mask`` holds, on the host (the first ``limit``)."""
    xp = ns(mask)
    if xp is np:
        out = np.flatnonzero(mask)
    else:
        flat = xp.reshape(mask, (-1,))
        if limit is not None and not bool(xp.any(flat)):
            return np.zeros(0, dtype=np.int64)
        out = host(xp.nonzero(flat)[0]).astype(np.int64)
    return out if limit is None else out[:limit]


def argmax(a: Any) -> int:
    xp = ns(a)
    return int(np.argmax(a)) if xp is np else int(xp.argmax(xp.reshape(a, (-1,))))


def top_of(a: Any) -> tuple[Any, Any]:
    """``a``'s largest element and its flat index (the first, as ``argmax``):
    0-d tensors on torch, to hand to ``read`` with others (an index below
    2^53 is exact as a float64), host numbers elsewhere."""
    if not hasattr(a, "detach"):
        k = argmax(a)
        return float(ns(a).reshape(a, (-1,))[k]), k
    flat = a.reshape(-1)
    k = _torch().argmax(flat)
    return flat.take(k), k.double()


def dot(a: Any, b: Any) -> float:
    xp = ns(a, b)
    if xp is np:
        return float(a @ b)
    if hasattr(a, "dot") and hasattr(a, "detach"):  # torch: its own kernel (vecdot is a batched matmul)
        return float(a.dot(b))
    if len(tuple(a.shape)) == 1 and len(tuple(b.shape)) == 1:
        return float(xp.tensordot(a, b, axes=1))  # (jax: vecdot is several times slower)
    return float(xp.vecdot(a, b))


def dots(pairs: list[tuple[Any, Any]]) -> list[float]:
    """``dot`` of each pair, read in one read where they are torch arrays."""
    if not pairs or not all(hasattr(a, "dot") and hasattr(a, "detach") for pair in pairs for a in pair):
        return [dot(a, b) for a, b in pairs]
    return read(*(a.dot(b) for a, b in pairs))


def as64(a: Any) -> Any:
    """``a`` in float64 (itself when it already is)."""
    xp = ns(a)
    if xp is np:
        return np.asarray(a).astype(np.float64, copy=False)
    return a if a.dtype == xp.float64 else xp.astype(a, xp.float64)


def is_floating(a: Any) -> bool:
    xp = ns(a)
    return bool(np.issubdtype(np.asarray(a).dtype, np.floating)) if xp is np else xp.isdtype(a.dtype, "real floating")


def flat(a: Any) -> Any:
    if type(a) is np.ndarray:
        return a.ravel()
    return np.ravel(a) if on_host(a) else ns(a).reshape(a, (-1,))


def concat(parts: list[Any]) -> Any:
    xp = ns(*parts)
    return np.concatenate(parts) if xp is np else xp.concat(parts)


def copy(a: Any) -> Any:
    xp = ns(a)
    if xp is np:
        return np.array(a, copy=True)
    return a.clone() if hasattr(a, "clone") else a  # jax arrays are immutable


def equal(a: Any, b: Any) -> bool:
    """Same shape and values, NaN equal to NaN."""
    if tuple(a.shape) != tuple(b.shape):
        return False
    xp = ns(a, b)
    if xp is np:
        # (one pass where they are equal, as they mostly are; NaNs decide it otherwise)
        return bool(np.array_equal(a, b)) or bool(np.array_equal(a, b, equal_nan=True))
    if hasattr(a, "equal") and hasattr(a, "detach") and a.dtype == b.dtype and bool(a.equal(b)):
        return True  # (torch: one pass; NaNs make it False and the test below decides)
    same = (a == b) | (xp.isnan(a) & xp.isnan(b)) if xp.isdtype(a.dtype, "real floating") else a == b
    return bool(xp.all(same))


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """numpy's warnings off for arithmetic that may overflow on purpose."""
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        yield
