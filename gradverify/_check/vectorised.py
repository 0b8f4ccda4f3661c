"""The vectorised part of the evaluator's interface: fn, its JVP and its VJP
at many points or along many directions in one call (the backend's vmap, or
a compiled batch), each falling back to one call at a time - None - where the
backend cannot vectorise fn or any exception is raised. ``Evaluator`` is a
``Vectorised``: what a vectorised call needs of it is declared below."""

from __future__ import annotations

import contextlib
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from .._errors import ModeUnavailable
from .._rule import Rule
from ..backends import Backend, backend_name_of
from . import xp
from .calls import Derivative, fns_warnings_only

__all__ = ["UNIFORM_MAX", "Vectorised"]

#: At most this many elements in a batch padded to the check's largest (see
#: Vectorised.uniform).
UNIFORM_MAX = 1 << 16


class Vectorised:
    """fn, its JVPs and VJPs, vectorised."""

    # what an evaluator provides (see Evaluator)
    rule: Rule | None
    fn: Callable
    backend: Backend
    originals: tuple[Any, ...]
    dtypes: list[str]
    wrt: tuple[int, ...]
    counts: Counter[str]
    native_precision: str
    skip: frozenset[str]
    placed: bool
    floating: list[bool]
    #: False once fn at stacked points failed or disagreed with its plain run.
    batches: bool = True
    #: False where the backend's vmap is sure to refuse fn (Backend.vectorises).
    vmaps: bool = True
    #: The batch size vectorised calls are padded up to (0: none; see
    #: ``uniform``), with copies of their last member, whose results are
    #: dropped.
    batch_to: int = 0

    def array(self, a: Any, like: Any, dtype: str, fresh: bool = False) -> Any:
        raise NotImplementedError

    def arguments(self, points: Sequence[Any] | None, precision: str | None, keep: bool = False) -> list[Any]:
        raise NotImplementedError

    def working(self, out: Any) -> Any:
        raise NotImplementedError

    def host_or(self, form: str, precision: str | None, operands: Any, plain: Callable[[], Any]) -> Any:
        raise NotImplementedError

    def reaching(self, points: Any = None) -> contextlib.AbstractContextManager[None]:
        raise NotImplementedError

    def primal(self, points: Sequence[Any] | None, precision: str | None, flat: bool = False) -> Any:
        raise NotImplementedError

    def _sources(self, points: Sequence[Any] | None, precision: str | None) -> list[tuple[Any, str, bool]]:
        raise NotImplementedError

    def _call(self, f: Callable, args: Sequence[Any], stage: str) -> Any:
        raise NotImplementedError

    def _primal_fn(self, *args: Any, flat: bool = False) -> Any:
        raise NotImplementedError

    def _derivative(self, d: Any) -> Derivative:
        raise NotImplementedError

    def uniform(self, b: int, elements: int) -> None:
        """Pad the check's vectorised calls up to ``b`` members, its largest
        batch's (0: none), where the backend compiles per shape
        (Backend.uniform_batches): fn's operations then compile at one
        batch size, not at each. Only where ``b`` members of ``elements``
        (fn's arguments' and output's) stay within UNIFORM_MAX: there a
        padded member costs far less than a compilation; beyond it, it may
        not. Set afresh by each run of the check (a rerun's own)."""
        self.batch_to = b if self.backend.uniform_batches and b * elements <= UNIFORM_MAX else 0

    def primals(self, stacks: Sequence[Any], precision: str | None) -> list[Any] | None:
        """fn at k points in one vectorised call, each output flattened:
        ``stacks[q]``, the points' values of the q-th wrt argument (working
        arrays) along a leading axis of k. None where that call cannot be
        made - a gv.Rule, fn that the backend cannot vectorise, or any
        exception: then evaluate one point at a time, which says what went
        wrong. One call, counted as one evaluation of fn."""
        k = int(stacks[0].shape[0]) if stacks else 0
        if self.rule is not None or not (self.batches and self.vmaps) or k < 2:
            return None
        b = max(k, self.batch_to)
        with self.backend.precision(precision or self.native_precision):
            operands = [(_padded_rows(a, b), precision or self.dtypes[i]) for a, i in zip(stacks, self.wrt)]

            def plain() -> Any:
                stacked = [self.array(a, self.originals[i], d, True) for (a, d), i in zip(operands, self.wrt)]
                return self.backend.primals(self.fn, self.arguments(None, precision), self.wrt, stacked)

            self.counts["primal"] += 1
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # (fn's own warnings showed on its primal run)
                    out = self.host_or("primals", precision, operands, plain)
            except Exception:
                out = None
            if backend_name_of(out) != self.backend.name or tuple(out.shape[:1]) != (b,):
                self.batches = False
                return None
            w = self.working(out)
            return [w[j].reshape(-1) for j in range(k)]

    def jvps(self, tangents: Sequence[Sequence[Any]], precision: str | None = None) -> list[Derivative] | None:
        """``jvp`` along every tangent set of ``tangents`` in one vectorised
        call. None where that call cannot be made - a gv.Rule, or fn (or a
        rule inside it) that the backend cannot vectorise, or any exception:
        then ask one direction at a time, which says what went wrong."""
        if self.rule is None and self.vmaps and len(tangents) > 1 and "JVP" not in self.skip:
            k, tangents = len(tangents), self._padded(tangents)
            with self.backend.precision(precision or self.native_precision):
                stacks = [
                    (_stack([t[p] for t in tangents]), precision or self.dtypes[i]) for p, i in enumerate(self.wrt)
                ]

                def plain() -> Any:
                    args = self.arguments(None, precision)
                    stacked = [self.array(a, self.originals[i], d, True) for (a, d), i in zip(stacks, self.wrt)]
                    return self.backend.jvps(self.fn, args, self.wrt, stacked)

                return self._vectorised("jvp", lambda: self.host_or("jvps", precision, stacks, plain), k)
        return None

    def vjps(
        self, cotangents: Sequence[Any], out_dtype: str, precision: str | None = None
    ) -> list[list[Derivative]] | None:
        """``vjp`` for every cotangent in one vectorised call (None: ask one at a time)."""
        if self.rule is None and len(cotangents) > 1 and "VJP" not in self.skip:
            k, cotangents = len(cotangents), self._padded(cotangents)
            with self.backend.precision(precision or self.native_precision):
                stacked = _stack(cotangents)

                def plain() -> Any:
                    cot = self.array(stacked, self.originals[0], precision or out_dtype, True)
                    with self.reaching():
                        return self.backend.vjps(self.fn, self.arguments(None, precision), self.wrt, cot)

                operands = [(stacked, precision or out_dtype)]
                parts = self._vectorised("vjp", lambda: list(self.host_or("vjps", precision, operands, plain)), k)
                if parts is not None:
                    return [list(row) for row in zip(*parts)]
        return None

    def batched(self, mode: str, points: Sequence[Sequence[Any]], operands: Sequence[Any], out_dtype: str) -> list[Any]:
        """``mode`` ("JVP" or "VJP") at k points in one call under the backend's
        vmap, in fn's own dtypes: ``points[j]``, member j's wrt arguments
        (working arrays); ``operands[j]``, its tangents (one per wrt argument)
        or its cotangent (of the output's shape, in ``out_dtype``). Per member,
        the JVP's Derivative, or the VJP's list of them (one per wrt argument).
        Raises ModeUnavailable where the backend has no vmap, or fn or a rule
        inside it cannot run under it (in the framework's words)."""
        if self.rule is not None:
            raise ModeUnavailable("a gv.Rule's rules are numpy code, which nothing can vmap")
        if self.backend.no_batching:
            raise ModeUnavailable(self.backend.no_batching)
        k = len(points)
        points, operands = self._padded(points), self._padded(operands)
        b = len(points)
        self.counts["batched"] += 1
        with self.backend.precision(self.native_precision):
            stacked = [
                self.array(_stack([p[q] for p in points]), self.originals[i], self.dtypes[i], True)
                for q, i in enumerate(self.wrt)
            ]
            args = self.arguments(None, None)
            try:
                with fns_warnings_only():
                    if mode == "JVP":
                        tangents = [
                            self.array(_stack([t[q] for t in operands]), self.originals[i], self.dtypes[i], True)
                            for q, i in enumerate(self.wrt)
                        ]
                        out: Any = self.backend.batched_jvp(self.fn, args, self.wrt, stacked, tangents)
                    else:
                        cot = self.array(_stack(list(operands)), self.originals[0], out_dtype, True)
                        out = self.backend.batched_vjp(self.fn, args, self.wrt, stacked, cot)
            except ModeUnavailable:
                raise
            except Exception as e:
                words = " ".join(str(e).split())
                raise ModeUnavailable(f"{type(e).__name__} under vmap: {words[:400]}") from e

        def members(d: Any) -> list[Derivative]:
            if d is None:  # (fn ignores this argument)
                return [Derivative(None, None, None, "None")] * k
            if backend_name_of(d) != self.backend.name or tuple(d.shape[:1]) != (b,):
                got = f"shape {tuple(d.shape)}" if hasattr(d, "shape") else type(d).__name__
                raise ModeUnavailable(f"the batched {mode} came back as {got}, not a stack of {b}")
            w = self.working(d)
            return [
                Derivative(xp.copy(w[j]), self.backend.dtype_name(d), tuple(d.shape[1:]), "array") for j in range(k)
            ]

        if mode == "JVP":
            return members(out)
        per_argument = [members(d) for d in out]
        return [[part[j] for part in per_argument] for j in range(k)]

    def _padded(self, members: Sequence[Any]) -> list[Any]:
        """A batch's members, the last repeated up to ``batch_to`` (none: as they are)."""
        return [*members, *[members[-1]] * (self.batch_to - len(members))] if members else list(members)

    def _vectorised(self, mode: str, call: Callable[[], Any], k: int) -> Any:
        """Run a vectorised mode; its first k results as Derivatives (a
        list, or a list per wrt argument), or None on any trouble."""
        self.counts[mode] += 1
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # (fn's own warnings showed on its primal run)
                out = call()
        except Exception:
            return None
        stacks = out if isinstance(out, list) else [out]
        rows = []
        for d in stacks:
            if d is None:  # (fn ignores this argument)
                rows.append([Derivative(None, None, None, "None")] * k)
                continue
            if backend_name_of(d) != self.backend.name or tuple(d.shape[:1]) != (max(k, self.batch_to),):
                return None
            w = self.working(d)
            dtype = self.backend.dtype_name(d)
            rows.append([Derivative(xp.copy(w[j]), dtype, tuple(d.shape[1:]), "array") for j in range(k)])
        return rows if isinstance(out, list) else rows[0]


def _stack(arrays: Sequence[Any]) -> Any:
    return xp.ns(arrays[0]).stack(arrays)


def _padded_rows(a: Any, b: int) -> Any:
    """``a``, its last row repeated up to b rows along its leading axis."""
    pad = b - int(a.shape[0])
    return a if pad <= 0 else xp.ns(a).concatenate([a, xp.ns(a).stack([a[-1]] * pad)])
