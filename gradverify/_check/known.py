"""Defects of other libraries that docs/found.md records, recognised by the
function checked: where fn is that very function (by identity, read from
the modules already loaded: nothing is imported here) and its arguments are
of the kind the defect shows on, each error it could explain says it is a
known upstream defect, with the entry's link. The error stays an error: the
derivative is wrong, and a newcomer learns it is not gradverify's."""

from __future__ import annotations

import dataclasses
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .._io import dtype_name
from .._result import ERROR, CheckResult, Finding, Kind

__all__ = ["KNOWN", "FOUND_PAGE", "Known", "anchor", "said_known"]

#: Where the entries are, relative to the project's root.
FOUND_PAGE = "docs/found.md"


def _dtype(*names: str) -> Callable[[Sequence[Any]], bool]:
    """Arguments of which some floating one is of one of these dtypes."""

    def holds(args: Sequence[Any]) -> bool:
        return any(dtype_name(a) in names for a in args)

    return holds


def _on_cuda(args: Sequence[Any]) -> bool:
    return _dtype("float64")(args) and any(getattr(getattr(a, "device", None), "type", None) == "cuda" for a in args)


def _always(args: Sequence[Any]) -> bool:
    return True


@dataclass(frozen=True)
class Known:
    """One entry of docs/found.md, as the function it is a defect of."""

    module: str  # the module that holds it, e.g. "torch.nn.functional"
    name: str  # its name there (a class: any instance of it)
    heading: str  # the entry's heading in docs/found.md, as written
    summary: str  # what is wrong, in a few words
    when: Callable[[Sequence[Any]], bool] = _always  # the arguments it shows on
    #: the errors it explains: those whose pair starts with one of these
    #: modes (None: any), at this order (None: any), of these kinds
    modes: tuple[str, ...] | None = None
    order: int | None = None
    kinds: tuple[str, ...] = (Kind.MISMATCH.value, Kind.NONFINITE_GRADIENT.value)

    @property
    def link(self) -> str:
        return f"{FOUND_PAGE}#{anchor(self.heading)}"

    def of(self, fn: Any) -> bool:
        """Whether fn is the function (or an instance of the class) recorded."""
        owner = sys.modules.get(self.module)
        target = getattr(owner, self.name, None) if owner is not None else None
        if target is None:
            return False
        return fn is target or (isinstance(target, type) and isinstance(fn, target))

    def explains(self, f: Finding) -> bool:
        kind = f.kind.value if isinstance(f.kind, Kind) else str(f.kind)
        if f.level != ERROR or kind not in self.kinds or (self.order is not None and f.order != self.order):
            return False
        return self.modes is None or (f.pair is not None and f.pair[0] in self.modes)


_DTYPE_EXCEPTION = (Kind.EXCEPTION.value,)
KNOWN: tuple[Known, ...] = (
    Known(
        "torch.nn.functional",
        "hardsigmoid",
        "`F.hardsigmoid`: the float64 derivative is float32(1/6)",
        "its slope is float32(1/6) in every dtype, so its float64 derivative (which gradverify takes for "
        "float32 inputs too) is off by 3e-8",
    ),
    Known(
        "torch.nn.functional",
        "hardswish",
        "`F.hardswish`: the float64 forward mode is float32-rounded on CUDA",
        "its float64 forward mode is rounded to float32 on CUDA",
        when=_on_cuda,
        modes=("JVP",),
    ),
    Known(
        "torch",
        "logcumsumexp",
        "`torch.logcumsumexp`: forward mode loses the early prefixes",
        "its forward mode loses the early prefixes",
        modes=("JVP",),
    ),
    Known(
        "jax.numpy",
        "sinc",
        "`jnp.sinc`: the derivative near 0 is rounding noise",
        "its derivative near 0 is rounding noise",
    ),
    Known(
        "jax.scipy.special",
        "spence",
        "`jax.scipy.special.spence`: `jax.grad` is NaN on (1, 2], and both modes give 0 at 1",
        "jax.grad is NaN on (1, 2], and both modes give 0 at 1",
    ),
    Known(
        "jax.lax",
        "clamp",
        "`lax.clamp` with min > max: every gradient is 0, where the output moves with max",
        "with min > max every gradient is 0, though the output moves with max",
    ),
    Known(
        "kornia.color",
        "rgb_to_hsv",
        "`kornia.color.rgb_to_hsv`: at r = g ties the hue's gradient is halved",
        "at r = g ties the hue's gradient is halved",
    ),
    Known(
        "entmax",
        "entmax15",
        "`entmax15`: the second derivative is NaN wherever an output is 0",
        "its second derivative is NaN wherever an output is 0",
        order=2,
    ),
    Known(
        "torchkbnufft",
        "KbNufft",
        "`KbNufft`: the gradient with respect to the trajectory is silently 0",
        "its gradient with respect to the k-space trajectory is silently 0",
        modes=("VJP",),
    ),
    Known(
        "gpytorch.functions",
        "log_normal_cdf",
        "`log_normal_cdf` for z < −1: the backward is not the forward's derivative, and the second derivative is 0",
        "below z = -1 its backward is not the forward's derivative, and its second derivative is 0",
    ),
    Known(
        "optax.projections",
        "projection_simplex",
        "`projections.projection_simplex` under x64: float32 input, no derivative",
        "under x64 its rule's tangent is float32 where its output is float64, so jax refuses it",
        when=_dtype("float32"),
        kinds=_DTYPE_EXCEPTION,
    ),
    Known(
        "jaxopt.isotonic",
        "isotonic_l2_pav",
        "`isotonic_l2_pav` under x64: float32 input, no derivative",
        "under x64 its rule's tangent is float64 where its output is float32, so jax refuses it",
        when=_dtype("float32"),
        kinds=_DTYPE_EXCEPTION,
    ),
)


def anchor(heading: str) -> str:
    """A Markdown heading's anchor as GitHub writes it: lower case, spaces as
    hyphens, every other character but letters, digits, ``-`` and ``_`` dropped."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def said_known(fn: Any, args: Sequence[Any], result: CheckResult) -> CheckResult:
    """``result`` with each error a recorded defect of fn explains saying so."""
    if result.ok:
        return result
    for k in KNOWN:
        if k.of(fn) and k.when(args):
            note = f" - a known upstream defect: {k.summary} ({k.link})"
            findings = tuple(
                dataclasses.replace(f, message=f.message + note) if k.explains(f) else f for f in result.findings
            )
            return dataclasses.replace(result, findings=findings)
    return result
