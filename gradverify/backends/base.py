"""The protocol every backend implements. The checker works on float64 copies
of the arguments - numpy copies for small arrays, arrays of the backend on the
arguments' own device for large ones (see gradverify._check.xp) - and crosses into
the backend only to call ``fn`` and its derivatives; everything here is that
crossing."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

__all__ = ["Backend", "HostArrays", "SparseArray", "Wrt", "on_wrt"]

#: numpy arrays, each with the dtype name fn is to get it in.
HostArrays = Sequence[tuple[np.ndarray, str]]
#: Positions of the arguments derivatives are taken with respect to.
Wrt = Sequence[int]


class SparseArray:
    """A sparse array as its specified values and its pattern (held fixed)."""

    layout: str  # e.g. "sparse_coo", "sparse_csr", "bcoo"
    shape: tuple[int, ...]
    nnz: int  # specified entries (blocks, for a block layout)
    values: Any  # a dense backend array: the values, a copy
    key: Any  # equal for equal patterns
    coalesced_here: bool = False  # duplicates were summed to read the values

    def rebuild(self, values: Any) -> Any:
        """The sparse array of ``values`` in this pattern (differentiable in them)."""
        raise NotImplementedError

    def numbered(self) -> np.ndarray:
        """The dense array (flat, numpy) of ``rebuild`` of the values 1, 2, ..., n."""
        raise NotImplementedError

    def _positions(self) -> np.ndarray:
        """Per value element (flat), its flat index in the dense array."""
        where = getattr(self, "_where", None)
        if where is None:
            dense = self.numbered()
            at = np.flatnonzero(dense)
            where = np.zeros(dense.size and int(dense.max()), dtype=np.int64)
            where[dense[at].astype(np.int64) - 1] = at
            self._where = where
        return where

    def dense_index(self, k: int) -> tuple[int, ...]:
        """The dense index of the value element at flat position ``k``."""
        return tuple(int(j) for j in np.unravel_index(int(self._positions()[k]), self.shape))

    def pattern(self) -> np.ndarray:
        """The dense mask of the specified elements."""
        mask = np.zeros(int(np.prod(self.shape)), dtype=bool)
        mask[self._positions()] = True
        return mask.reshape(self.shape)

    def read(self, out: Any) -> Any:
        """The values of the sparse array ``out`` at this pattern's elements,
        differentiably (an element outside ``out``'s own pattern reads 0)."""
        raise NotImplementedError

    def unusable(self) -> str | None:
        """Why the backend cannot differentiate ``rebuild`` at all (None: it can)."""
        return None

    def once(self) -> str | None:
        """Why the backend cannot differentiate ``rebuild`` twice (None: it can)."""
        return None


class Backend:
    name: str = "?"
    #: Whether it has automatic differentiation (of fn, and of a gv.Rule's rules written in it).
    differentiates: bool = True

    # -- arrays ---------------------------------------------------------------
    def dtype_name(self, x: Any) -> str:
        raise NotImplementedError

    def is_floating(self, x: Any) -> bool:
        raise NotImplementedError

    def is_complex(self, x: Any) -> bool:
        return False

    def is_sparse(self, x: Any) -> bool:
        return False

    def sparse(self, x: Any) -> SparseArray | None:
        """``x`` as its values and pattern when it is a sparse array, else None."""
        return None

    def sparse_gradients(
        self, fn: Callable, args: Sequence[Any], wrt: Sequence[int], seed: int
    ) -> list[tuple[str, np.ndarray]] | None:
        """fn's own gradients with respect to ``args`` (sparse ones as they
        are) for a random cotangent: per argument, its layout and dense
        values; None where the backend differentiates a sparse array with
        respect to its values alone (jax's BCOO: the gradient is in the
        pattern by construction)."""
        return None

    def gradient_structure(self, fn: Callable, args: Sequence[Any], wrt: Sequence[int]) -> list[dict[str, Any]]:
        """The gradients fn's own rules returned (before the framework cast or
        refused them) whose dtype, device, shape or layout is not their
        input's: per one, ``function``, ``index`` (its input), ``argument``
        (fn's, or None), ``what``, ``found`` and ``expected``."""
        return []

    def unsupported(self, x: Any, output: bool = False) -> tuple[str, str] | None:
        """(what ``x`` is, how to make it checkable) for an array the checker
        cannot read (no values on a device, a sparse layout); None for the
        others. ``output``: ``x`` is fn's return value (the fix is fn's)."""
        return None

    def to_numpy(self, x: Any) -> np.ndarray:
        """A fresh numpy copy (low-precision floats widened to float32)."""
        raise NotImplementedError

    def to_host(self, x: Any) -> np.ndarray:
        """``x`` on the host to be read, never written: to_numpy's copy, or
        where the backend's arrays cannot change, a read-only view of x's
        own memory where it has one (no copy)."""
        return self.to_numpy(x)

    def from_numpy(self, a: np.ndarray, like: Any, dtype_name: str) -> Any:
        """A backend array with ``like``'s placement and dtype ``dtype_name``; it may
        share memory with ``a`` (the caller copies when it must)."""
        raise NotImplementedError

    def readback(self, x: Any, buffer: np.ndarray) -> np.ndarray:
        """The values of argument ``x`` after fn ran, where ``buffer`` is the numpy
        array it was made from: ``buffer`` itself when they share memory."""
        return self.to_numpy(x)

    # -- the checker's own arrays, on the arguments' device ---------------------------
    def float64_on_device(self, args: Sequence[Any]) -> str | None:
        """None when the checker can work on ``args``' own device in float64;
        otherwise why not (it then works on numpy copies)."""
        return "numpy arrays are on the host"

    def read_in_place(self, args: Sequence[Any]) -> bool:
        """Whether numpy reads ``args`` where they lie, without a transfer and
        at no cost of its own: then a check of large arguments works in numpy
        too (see xp)."""
        return False

    def to_working(self, x: Any, copy: bool = True) -> Any:
        """A fresh float64 copy of ``x`` on its device (floating ``x``; others
        keep their dtype), in this backend's arrays; ``copy=False``: ``x``
        itself where it is one already (to read, never to keep)."""
        raise NotImplementedError

    def copies_where_held(self, args: Sequence[Any]) -> bool:
        """Whether a check on the host copies ``args`` for fn where they lie
        (``copy_of``: no transfer) rather than from the host's copies."""
        return False

    def copy_of(self, original: Any, dtype_name: str) -> Any:
        """A fresh contiguous copy of the argument ``original`` in
        ``dtype_name``, made where it lies (see ``copies_where_held``)."""
        raise NotImplementedError

    def from_working(self, a: Any, like: Any, dtype_name: str, copy: bool = True) -> Any:
        """A backend array of ``dtype_name`` made from the working array ``a``,
        on ``like``'s device; it shares no memory with ``a`` unless ``copy`` is
        False (``a`` is a fresh array handed over)."""
        raise NotImplementedError

    def derivative(self, d: Any) -> Any:
        """A derivative fn's AD returned, as a working float64 array (it may
        share memory with ``d``: AD results are fresh, and the checker never
        writes into them)."""
        raise NotImplementedError

    @contextlib.contextmanager
    def working(self) -> Iterator[None]:
        """Context in which the checker's float64 working arrays can be used."""
        yield

    @contextlib.contextmanager
    def checking(
        self, placed: bool, small: bool, own: Callable[[], tuple[Callable | None, tuple]] | None = None
    ) -> Iterator[None]:
        """Context of one check: ``working`` where the check works on the
        arguments' device (``placed``), else whatever the backend does once
        per check on arguments of ``small`` total size (jax: compile fn and
        its derivatives, or run a fn of a few operations eagerly, see
        JaxBackend). ``own()``: fn as the caller wrote it, and its arguments
        (before the views it is checked through; None where there is none)."""
        if placed:
            with self.working():
                yield
        else:
            yield

    @contextlib.contextmanager
    def precision(self, dtype_name: str) -> Iterator[None]:
        """Context in which arrays of ``dtype_name`` can be made and used."""
        yield

    def float64_refused(self) -> str | None:
        """Why fn must not be evaluated in float64 here (the check then keeps
        the arguments' precision); None when it may."""
        return None

    def reduced_precision(self, args: Sequence[Any]) -> list[tuple[str, str]]:
        """Settings in force that make float32 arithmetic of ``args`` coarser than
        IEEE float32: (what, in words; the precision float32 products then
        have: "tf32" or "bfloat16"). [] when none."""
        return []

    def call(self, fn: Callable, args: Sequence[Any]) -> Any:
        """fn(*args): the primal (a backend may compile it in a compiling session)."""
        return fn(*args)

    def call_flat(self, fn: Callable, args: Sequence[Any]) -> Any:
        """fn(*args) flattened (a view where the backend has them)."""
        out = self.call(fn, args)
        return out.reshape(-1) if hasattr(out, "reshape") else out

    #: Whether ``call_host`` can ever answer (else callers skip building its arguments).
    takes_host_arrays = False

    def call_host(self, fn: Callable, form: str, args: HostArrays, operands: HostArrays = (), wrt: Wrt = ()) -> Any:
        """fn's compiled ``form`` on numpy arrays, each with its dtype name,
        where the backend can hand them to a compiled fn without building its
        own arrays first: "primal" (fn(*args)), "primal_flat" (flattened),
        "jvp"/"jvps" (along the tangent, or stacked tangents, of each wrt
        argument: ``operands``), "vjp"/"vjps" (for the cotangent, or stacked
        cotangents: one operand), "primals" (at the stacked points of each wrt
        argument: ``operands``). None where it cannot, or on any trouble (the
        caller then takes the plain path, which reports it)."""
        return None

    def compiles(self, fn: Callable) -> bool:
        """Whether ``call`` runs a compiled fn (whose rounding may differ from fn's eager run)."""
        return False

    # -- modes ----------------------------------------------------------------
    def jvp(self, fn: Callable, args: Sequence[Any], wrt: Sequence[int], tangents: Sequence[Any]) -> Any:
        """Output tangent of fn at args along ``tangents`` (one per wrt index)."""
        raise NotImplementedError

    def vjp(self, fn: Callable, args: Sequence[Any], wrt: Sequence[int], cotangent: Any) -> list[Any]:
        """Input cotangents for the wrt indices (None where fn ignores one)."""
        raise NotImplementedError

    def forward_unavailable(self, fn: Callable) -> str | None:
        """Why forward mode cannot differentiate fn, where that is known
        without calling it (in the framework's words); None otherwise."""
        return None

    @contextlib.contextmanager
    def reaching(self, found: list[Any]) -> Iterator[None]:
        """Within it, each reverse-mode call (``vjp``, ``vjps``) appends to
        ``found`` the arrays outside its arguments that fn's output depends
        on and that would be differentiated had they been arguments (torch:
        leaf tensors requiring grad that fn closes over). Nothing here: only
        a framework that keeps a graph of the call can see them."""
        yield

    def vectorises(self, fn: Callable) -> bool:
        """False where this backend's vmap is sure to refuse fn itself
        (``jvps`` and ``primals`` are then not tried; ``vjps`` batches the
        backward pass, not fn); True where it may run."""
        return True

    #: Whether fn's plain calls at many host points may take their points as
    #: rows of one array placed at once (Evaluator.primal_rows): a row is a
    #: view, each call's own, so the points cross to a device in one transfer
    #: per argument, not one a call (jax slices each row by a compiled program).
    stages_rows: bool = False

    #: Whether a check's vectorised calls are best made at one batch size:
    #: a framework that compiles each operation once per shape (jax's eager
    #: operations) compiles fn's once for all of them, not once per batch size.
    uniform_batches: bool = False

    def jvps(self, fn: Callable, args: Sequence[Any], wrt: Sequence[int], tangents: Sequence[Any]) -> Any:
        """``jvp`` along k directions in one vectorised call (the backend's vmap):
        each wrt index's tangents stacked on a new leading axis of length k, the
        output tangents returned stacked the same way. Raises where fn cannot be
        vectorised; the checker then asks one direction at a time."""
        raise NotImplementedError("this backend does not vectorise its modes")

    def vjps(self, fn: Callable, args: Sequence[Any], wrt: Sequence[int], cotangents: Any) -> list[Any]:
        """``vjp`` for k cotangents stacked on a leading axis, in one call: the
        input cotangents stacked the same way (None where fn ignores one)."""
        raise NotImplementedError("this backend does not vectorise its modes")

    def primals(self, fn: Callable, args: Sequence[Any], wrt: Sequence[int], points: Sequence[Any]) -> Any:
        """fn at k points in one vectorised call: each wrt argument's values
        stacked on a new leading axis of length k (the others fixed at
        ``args``), the outputs returned stacked the same way. Raises where fn
        cannot be vectorised; the checker then evaluates one point at a time."""
        raise NotImplementedError("this backend does not vectorise fn")

    # -- complex arrays, as their real and imaginary parts ------------------------
    def as_real(self, z: Any) -> Any:
        """A complex array as a real one with a trailing axis of 2 (real,
        imaginary), differentiably (a fresh array)."""
        return np.stack([np.real(z), np.imag(z)], axis=-1)

    def as_complex(self, a: Any) -> Any:
        """The inverse of ``as_real``, differentiably."""
        return a[..., 0] + 1j * a[..., 1]

    # -- batched derivatives, for batched=True ----------------------------------
    #: Why this backend cannot batch derivatives (None: it can).
    no_batching: str | None = "this backend has no vmap: batched derivatives need torch or jax arrays"

    def batched_jvp(
        self, fn: Callable, args: Sequence[Any], wrt: Sequence[int], points: Sequence[Any], tangents: Sequence[Any]
    ) -> Any:
        """fn's JVP under the backend's vmap: at each of k points along its own
        tangent (each wrt argument's points and tangents stacked on a new leading
        axis of length k, the other arguments fixed at ``args``), the output
        tangents stacked the same way."""
        raise NotImplementedError(self.no_batching)

    def batched_vjp(
        self, fn: Callable, args: Sequence[Any], wrt: Sequence[int], points: Sequence[Any], cotangents: Any
    ) -> list[Any]:
        """fn's VJP under the backend's vmap: at each of k stacked points for its
        own cotangent (stacked likewise), the input cotangents stacked per wrt
        argument (None where fn ignores one)."""
        raise NotImplementedError(self.no_batching)

    # -- derivative functions, for order=2 --------------------------------------
    def vjp_function(self, fn: Callable, wrt: Sequence[int], cotangent: Any) -> Callable:
        """x -> concat(flatten(J(x)^T v)) as a function this backend can
        differentiate (the VJP of one argument may keep that argument's shape)."""
        raise NotImplementedError

    def jvp_function(self, fn: Callable, wrt: Sequence[int], tangents: Sequence[Any]) -> Callable:
        """x -> J(x) u as a function this backend can differentiate."""
        raise NotImplementedError

    def concat_flat(self, parts: Sequence[Any]) -> Any:
        raise NotImplementedError


def on_wrt(fn: Callable, args: Sequence[Any], wrt: Sequence[int]) -> Callable:
    """fn as a function of its wrt arguments alone, the others fixed at ``args``."""

    def f(*w: Any) -> Any:
        inputs = list(args)
        for i, x in zip(wrt, w):
            inputs[i] = x
        return fn(*inputs)

    return f
