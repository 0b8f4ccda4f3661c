"""fn and its JVP at many points or along many directions, one plain call
each, where the backend's arrays live apart from the host (a device): the
points or tangents cross as the rows of one array, once per argument (each
call a fresh copy of its row made there), and the outputs come back
together, not one transfer a call. ``Evaluator`` is a ``Staged``;
``Vectorised`` declares what it needs of it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .._errors import ModeUnavailable
from ..backends import backend_name_of
from . import xp
from .calls import CallFailed, Derivative, check_output
from .vectorised import Vectorised

__all__ = ["Staged"]


#: The most elements (rows times their size) fn's points or tangents are
#: staged in; beyond it each call takes its own from the host, as ever.
STAGED_MAX = 1 << 22


class Staged(Vectorised):
    """fn and its JVP at many rows, staged (see the module)."""

    inner: Any  # (fn under its views: what the backend asks for a forward rule)

    def _stages(self, k: int, per_call: int) -> bool:
        """Whether k calls, each of ``per_call`` elements of points or tangents, are staged."""
        return (
            self.rule is None and not self.placed and self.backend.stages_rows and k >= 2 and k * per_call <= STAGED_MAX
        )

    def primal_rows(self, stacks: Sequence[Any], precision: str | None) -> list[Any]:
        """fn at k points, one plain call each, as ``primal(points, precision,
        flat=True)`` gives them: ``stacks[q]``, the points' values of the q-th
        wrt argument (host arrays) along a leading axis of k. Where the
        backend stages rows (Backend.stages_rows) each argument's points
        cross to fn's device in one transfer, every call gets its own fresh
        copies made there (as at the point), and the outputs, each copied
        into its row of one buffer as it comes (fn may reuse its own), come
        back in one transfer, not one a call."""
        k = int(stacks[0].shape[0]) if stacks else 0
        if not self._stages(k, sum(xp.size(s[0]) for s in stacks)):
            return [self.primal([np.array(s[j]) for s in stacks], precision, flat=True) for j in range(k)]
        with self.backend.precision(precision or self.native_precision):
            rows = {i: self._staged(s, i, precision) for s, i in zip(stacks, self.wrt)}
            held = self.arguments(None, precision)
            got: list[Any] = []
            gathered = None
            for j in range(k):
                args = [_row(rows[i], j) if i in rows else xp.copy(a) for i, a in enumerate(held)]
                out = self._call(lambda *a: self._primal_fn(*a, flat=True), args, "evaluating fn")
                check_output(self.backend, out)
                if j == 0:
                    gathered = _Gathered(self, k, out)
                if gathered is not None and gathered.take(j, out):
                    continue
                if gathered is not None:  # (an output unlike the first: the rows so far, and each from here, alone)
                    got, gathered = gathered.back(j), None
                got.append(self.working(out))
            return got if gathered is None else gathered.back(k)

    def _staged(self, stack: Any, i: int, precision: str | None) -> Any:
        """``stack`` (argument i's values at k points, host) placed beside
        argument i in one transfer, in the dtype argument i takes."""
        dtype = precision if (precision and self.floating[i]) else self.dtypes[i]
        return self.array(np.ascontiguousarray(stack), self.originals[i], dtype, fresh=True)

    def jvp_rows(self, tangents: Sequence[Sequence[Any]], precision: str | None = None) -> list[Any] | None:
        """``jvp`` along every tangent set of ``tangents`` (host arrays), one
        plain call each, staged as ``primal_rows`` stages fn's points: a
        Derivative each, in order, until a call raised (its exception in its
        place: raised again where it is validated, as the call's own) or
        returned what the rest are not (that call's own Derivative), then
        None (those are asked one at a time). None where the backend does
        not stage rows, fn has no forward rule, or the first call raised."""
        k = len(tangents)
        if "JVP" in self.skip or not self._stages(k, sum(xp.size(t) for t in tangents[0]) if k else 0):
            return None
        if self.backend.forward_unavailable(self.inner) is not None:
            return None  # (known to have no forward rule: one call says so)
        out: list[Any] = [None] * k
        with self.backend.precision(precision or self.native_precision):
            rows = {
                i: self._staged(_host_stack([t[p] for t in tangents]), i, precision) for p, i in enumerate(self.wrt)
            }
            held = self.arguments(None, precision)
            gathered = None
            for j in range(k):
                self.counts["jvp"] += 1
                args, tans = [xp.copy(a) for a in held], [_row(rows[i], j) for i in self.wrt]
                try:
                    d = self._call(self._jvp_of, (args, tans), "forward mode (JVP)")
                except (ModeUnavailable, CallFailed) as e:
                    if j == 0:
                        self.counts["jvp"] -= 1  # (asked again, one at a time)
                        return None
                    out[j] = e
                    break
                if j == 0 and backend_name_of(d) == self.backend.name and not self.backend.is_sparse(d):
                    gathered = _Gathered(self, k, d)
                if gathered is None or not gathered.take(j, d):
                    out[j] = self._derivative(d)  # (unlike the rest: validated alone, the rest asked one at a time)
                    break
            filled = next((q for q, o in enumerate(out) if o is not None), k)  # (the calls before one stopped)
            if gathered is not None and filled:
                dtype, shape = self.backend.dtype_name(gathered.buffer), gathered.shape
                out[:filled] = [Derivative(r.reshape(shape), dtype, shape, "array") for r in gathered.back(filled)]
        return out

    def _jvp_of(self, args: list[Any], tangents: list[Any]) -> Any:
        return self.backend.jvp(self.fn, args, self.wrt, tangents)


class _Gathered:
    """The outputs of k calls, each copied as it comes into its row of one
    buffer beside the first's (fn may reuse its own), read back together."""

    def __init__(self, ev: Staged, k: int, first: Any) -> None:
        self.ev, self.m, self.shape = ev, xp.size(first), tuple(first.shape)
        self.buffer = xp.empty(k * self.m, first, ev.backend.dtype_name(first))

    def take(self, j: int, out: Any) -> bool:
        """Whether ``out`` is like the first (then copied into row j)."""
        if self.ev.backend.is_sparse(out) or tuple(out.shape) != self.shape or out.dtype != self.buffer.dtype:
            return False
        self.buffer[j * self.m : (j + 1) * self.m] = xp.flat(out)
        return True

    def back(self, n: int) -> list[Any]:
        """The first n rows as working arrays, in one transfer."""
        w = self.ev.working(self.buffer[: n * self.m])
        return [w[q * self.m : (q + 1) * self.m] for q in range(n)]


def _row(stack: Any, j: int) -> Any:
    """Row j of a staged stack as a fresh array of its own (its own memory, as
    a fresh copy's: nothing of another call's point reachable from it)."""
    return xp.copy(stack[j])


def _host_stack(arrays: Sequence[Any]) -> np.ndarray:
    return np.stack([np.asarray(a) for a in arrays])
