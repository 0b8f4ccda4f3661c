"""What a sweep report draws of a failure, measured again at the
counterexample through the checker's own Evaluator (the same precision
contexts as the check):

* ``fd_vs_step``: central differences of the failing element at h = 1e-1 ..
  1e-10 (times its scale) and their distance from AD - on a real bug it
  levels off at the bug's size, never reaching rounding;
* ``ad_vs_fd``: the failing output element's Jacobian row, per input element
  (the first ``ROW_ELEMENTS``), by reverse mode (``AD``: one VJP), forward
  mode (``JVP``: one JVP per element; null where forward mode cannot run) and
  finite differences (``FD``);
* ``jacobian``: where the check took the full Jacobian (inputs and outputs
  no larger than the check's own ``FULL_MAX_IN`` and ``FULL_MAX_OUT``), the
  whole Jacobian by both sides of the failing comparison, and the elements
  where they differ by more than the check's bound (``over``).

FD here is the check's central difference at its own base step h (times
max(|x|, 1)), Richardson-combined with h/2; |that - FD(h/2)| is its error
estimate, allowed FD_SAFETY times as the check allows it. An element is
``over`` where |A - B| exceeds both the failure's bound (the check's at its
worst element) and that allowance, so no element is marked for the
difference's own rounding.

Every view is an extra: one that cannot be measured (a function the
Evaluator cannot call alone, a mode that raises) is None, and the others
stand."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._check import tolerance as tol
from .._check.evaluate import Evaluator
from .._check.probes import FULL_MAX_IN, FULL_MAX_OUT
from .._check.steps import fd_against_step

__all__ = ["MODES", "ROW_ELEMENTS", "failure_views"]

#: The input elements of the failing row drawn (the plot's width holds them apart).
ROW_ELEMENTS = 64
#: What the two sides of a comparison may be for the Jacobian to be drawn (a
#: second-order or batched comparison has derivatives of another function).
MODES = ("JVP", "VJP", "FD")


@dataclass(frozen=True)
class _Point:
    """The counterexample as the Evaluator holds it."""

    ev: Evaluator
    base: list[np.ndarray]  # the wrt arguments' values, float64
    out_shape: tuple[int, ...]  # fn's output's
    out_dtype: str  # the dtype a cotangent is made in (as the check's VJP takes it)

    @classmethod
    def of(cls, fn: Callable[..., Any], args: Sequence[Any]) -> _Point:
        ev = Evaluator.for_call(fn, args)
        base = [np.asarray(ev.values[i], dtype=np.float64) for i in ev.wrt]
        shape = tuple(np.shape(ev.primal(None, None)))
        return cls(ev, base, shape, ev.dtypes[0] if ev.floating[0] else "float64")

    def elements(self) -> list[tuple[int, tuple[int, ...]]]:
        """(wrt position, index) of every input element, argument by argument."""
        return [(k, idx) for k, b in enumerate(self.base) for idx in np.ndindex(b.shape)]

    def unit(self, k: int, idx: tuple[int, ...]) -> list[np.ndarray]:
        v = [np.zeros_like(b) for b in self.base]
        v[k][idx] = 1.0
        return v

    def vjp_row(self, i: tuple[int, ...]) -> np.ndarray:
        """Row ``i`` of the Jacobian by reverse mode, flat over the inputs."""
        cot = np.zeros(self.out_shape)
        cot[i] = 1.0
        rows = self.ev.vjp(cot, self.out_dtype)
        return np.concatenate(
            [np.zeros(b.size) if d.value is None else np.asarray(d.value).reshape(-1) for b, d in zip(self.base, rows)]
        )

    def jvp_column(self, k: int, idx: tuple[int, ...]) -> np.ndarray:
        """The column of input element (k, idx) by forward mode, flat over the output."""
        d = self.ev.jvp(self.unit(k, idx))
        return np.zeros(int(np.prod(self.out_shape))) if d.value is None else np.asarray(d.value).reshape(-1)

    def fd_column(self, k: int, idx: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
        """The column of input element (k, idx) by Richardson-combined central
        differences, and FD_SAFETY times its error estimate (see the module)."""
        h = tol.base_step("float64") * max(abs(float(self.base[k][idx])), 1.0)
        v = self.unit(k, idx)

        def central(step: float) -> np.ndarray:
            plus = self.ev.primal([b + step * vk for b, vk in zip(self.base, v)], "float64")
            minus = self.ev.primal([b - step * vk for b, vk in zip(self.base, v)], "float64")
            return (np.asarray(plus, dtype=np.float64) - np.asarray(minus, dtype=np.float64)).reshape(-1) / (2 * step)

        coarse, fine = central(h), central(h / 2)
        return (4 * fine - coarse) / 3, tol.FD_SAFETY * np.abs((fine - coarse) / 3)


def _step_sweep(point: _Point, err: Any, ad: float) -> list[list[float]]:
    k0, idx0 = point.ev.wrt.index(err.argument), tuple(err.input_index)
    cot = np.zeros(point.out_shape)
    cot[tuple(err.output_index)] = 1.0
    scale = max(abs(float(point.base[k0][idx0])), 1.0)
    return fd_against_step(point.ev, cot, point.unit(k0, idx0), ad, [scale * 10.0**-p for p in range(1, 11)])


def _or_none(measure: Callable[[], Any]) -> Any:
    try:
        return measure()
    except Exception:  # a view is an extra (see the module): one that cannot be measured is left out
        return None


def failure_views(fn: Callable[..., Any], res: Any, err: Any) -> dict[str, Any]:
    """``fd_vs_step``, ``ad_vs_fd`` and ``jacobian`` of a failed ``gv.verify``
    result ``res`` whose first error is ``err`` (each None where it cannot be
    measured; see the module)."""
    views: dict[str, Any] = {"fd_vs_step": None, "ad_vs_fd": None, "jacobian": None}
    ad = next((v for k, v in err.values.items() if k in ("JVP", "VJP")), None)
    if ad is None or err.argument is None or err.input_index is None or err.output_index is None:
        return views
    point = _or_none(lambda: _Point.of(fn, res.counterexample))
    if point is None or err.argument not in point.ev.wrt:
        return views
    views["fd_vs_step"] = _or_none(lambda: _step_sweep(point, err, float(ad)))
    elements = point.elements()
    full = res.result.strategy.startswith("full Jacobian") and len(elements) <= FULL_MAX_IN
    full = full and int(np.prod(point.out_shape)) <= FULL_MAX_OUT
    drawn = elements if full else elements[:ROW_ELEMENTS]
    fd = _or_none(lambda: [point.fd_column(k, idx) for k, idx in drawn])
    if fd is None:
        return views
    jvp = _or_none(lambda: [point.jvp_column(k, idx) for k, idx in drawn])
    i = tuple(err.output_index)
    flat_i = int(np.ravel_multi_index(i, point.out_shape)) if point.out_shape else 0
    row = _or_none(lambda: point.vjp_row(i))
    if row is not None:
        views["ad_vs_fd"] = [
            {
                "argument": point.ev.wrt[k],
                "index": list(idx),
                "AD": float(row[j]),
                "JVP": None if jvp is None else float(jvp[j][flat_i]),
                "FD": float(fd[j][0][flat_i]),
            }
            for j, (k, idx) in enumerate(drawn)
        ]
    if full and err.pair is not None and len(set(err.pair)) == 2 and set(err.pair) <= set(MODES):
        views["jacobian"] = _or_none(lambda: _jacobian(point, err, fd, jvp))
    return views


def _jacobian(point: _Point, err: Any, fd: list[tuple[np.ndarray, np.ndarray]], jvp: list[np.ndarray] | None) -> Any:
    """The whole Jacobian by both sides of the failing comparison, rows the
    output's elements (flat), columns the inputs' (flat, argument by argument)."""
    m = int(np.prod(point.out_shape))
    sides = {"FD": np.stack([c for c, _ in fd], axis=1).reshape(m, -1)}
    if jvp is not None:
        sides["JVP"] = np.stack(jvp, axis=1).reshape(m, -1)
    if "VJP" in err.pair:
        sides["VJP"] = np.stack([point.vjp_row(i) for i in np.ndindex(point.out_shape)]).reshape(m, -1)
    a, b = (sides[p] for p in err.pair)
    allowed = np.full(a.shape, float(err.bound) if err.bound is not None else 0.0)
    if "FD" in err.pair:
        allowed = np.maximum(allowed, np.stack([e for _, e in fd], axis=1).reshape(m, -1))
    with np.errstate(invalid="ignore"):
        over = np.argwhere(~(np.abs(a - b) <= allowed))  # (a NaN on either side is over)
    return {
        "pair": list(err.pair),
        "output_shape": list(point.out_shape),
        "arguments": [{"argument": i, "shape": list(b.shape)} for i, b in zip(point.ev.wrt, point.base)],
        err.pair[0]: a.tolist(),
        err.pair[1]: b.tolist(),
        "over": over.tolist(),
    }
