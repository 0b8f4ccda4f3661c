"""fn and its JVP at many points or along many directions, one plain call
each, where the backend's arrays live apart from the host (a device): the
points or tangents cross as the rows of one array, once per argument, and
the outputs come back together, not one transfer a call. ``Evaluator`` is a
``Staged``; ``Vectorised`` declares what it needs of it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from . import xp
from .calls import Derivative, check_output, fns_warnings_only
from .vectorised import Vectorised

__all__ = ["Staged"]


class Staged(Vectorised):
    """fn and its JVP at many rows, staged (see the module)."""

    inner: Any  # (fn under its views: what the backend asks for a forward rule)

    def primal_rows(self, stacks: Sequence[Any], precision: str | None) -> list[Any]:
        """fn at k points, one plain call each, as ``primal(points, precision,
        flat=True)`` gives them: ``stacks[q]``, the points' values of the q-th
        wrt argument (host arrays) along a leading axis of k. Where the
        backend stages rows (Backend.stages_rows) each argument crosses to
        fn's device once, every call gets its row (a view no other call
        sees) and fresh copies of the other arguments made there, and the
        outputs come back together: one transfer each way, not one a call.
        The rows are padded to whole 64-byte lines, so that each starts as
        a fresh array of its own would."""
        k = int(stacks[0].shape[0]) if stacks else 0
        if self.rule is not None or self.placed or not self.backend.stages_rows or k < 2:
            return [self.primal([np.array(s[j]) for s in stacks], precision, flat=True) for j in range(k)]
        with self.backend.precision(precision or self.native_precision):
            rows = {i: self._staged(s, i, precision) for s, i in zip(stacks, self.wrt)}
            held = self._held(precision, rows)
            got: list[Any] = []  # (each output copied at once into its row: fn may reuse its buffer)
            together, m = None, 0
            for j in range(k):
                args = [rows[i][j] if i in rows else xp.copy(a) for i, a in enumerate(held)]
                out = self._call(lambda *a: self._primal_fn(*a, flat=True), args, "evaluating fn")
                check_output(self.backend, out)
                if j == 0:
                    m = xp.size(out)
                    together = xp.empty(k * m, out, self.backend.dtype_name(out))
                if together is not None and xp.size(out) == m and out.dtype == together.dtype:
                    together[j * m : (j + 1) * m] = out
                    continue
                if (
                    together is not None
                ):  # (an output unlike the first: the rows so far, and each from here on, read alone)
                    got = [self.working(together[q * m : (q + 1) * m]) for q in range(j)]
                    together = None
                got.append(self.working(out))
            if together is None:
                return got
            back = self.working(together)  # (one transfer back)
            return [back[j * m : (j + 1) * m] for j in range(k)]

    def _staged(self, stack: Any, i: int, precision: str | None) -> list[Any]:
        """The rows of ``stack`` (argument i's values at k points) placed
        beside argument i in one transfer, each a view of its own padded row."""
        k, shape = int(stack.shape[0]), tuple(stack.shape[1:])
        size = int(np.prod(shape, dtype=np.int64))
        padded = np.zeros((k, -(-size // 8) * 8), dtype=stack.dtype)
        padded[:, :size] = stack.reshape(k, size)
        dtype = precision if (precision and self.floating[i]) else self.dtypes[i]
        placed = self.array(padded, self.originals[i], dtype, fresh=True)
        return [placed[j, :size].reshape(shape) for j in range(k)]

    def jvp_rows(self, tangents: Sequence[Sequence[Any]], precision: str | None = None) -> list[Derivative] | None:
        """``jvp`` along every tangent set of ``tangents`` (host arrays), one
        plain call each, staged as ``primal_rows`` stages fn's points: None
        where the backend does not stage rows, or on any trouble (then one
        call at a time says what)."""
        k = len(tangents)
        if self.rule is not None or self.placed or not self.backend.stages_rows or k < 2 or "JVP" in self.skip:
            return None
        if self.backend.forward_unavailable(self.inner) is not None:
            return None  # (known to have no forward rule: one call says so)
        counted = self.counts["jvp"]
        try:
            with self.backend.precision(precision or self.native_precision), fns_warnings_only():
                rows = {
                    i: self._staged(_host_stack([t[p] for t in tangents]), i, precision) for p, i in enumerate(self.wrt)
                }
                held = self._held(precision, ())
                together, m, shape = None, 0, ()
                for j in range(k):
                    self.counts["jvp"] += 1
                    args = [xp.copy(a) for a in held]
                    out = self.backend.jvp(self.fn, args, self.wrt, [rows[i][j] for i in self.wrt])
                    if j == 0:
                        m, shape = xp.size(out), tuple(out.shape)
                        together = xp.empty(k * m, out, self.backend.dtype_name(out))
                    if self.backend.is_sparse(out) or tuple(out.shape) != shape or out.dtype != together.dtype:
                        raise ValueError("unlike rows")  # (one call at a time says what they are)
                    together[j * m : (j + 1) * m] = xp.flat(out)
                back = self.working(together)  # (one transfer back)
        except Exception:  # (ModeUnavailable and fn's own exceptions: one call at a time says them)
            self.counts["jvp"] = counted
            return None
        dtype = self.backend.dtype_name(together)
        return [Derivative(back[j * m : (j + 1) * m].reshape(shape), dtype, shape, "array") for j in range(k)]

    def _held(self, precision: str | None, rows: Any) -> list[Any]:
        """Every argument at the point, placed beside its original once (but
        those of ``rows``, None): each call takes fresh copies made there."""
        return [None if i in rows else a for i, a in enumerate(self.arguments(None, precision))]


def _host_stack(arrays: Sequence[Any]) -> np.ndarray:
    return np.stack([np.asarray(a) for a in arrays])
