"""Keyword arguments a public call does not take, refused with the fix: a
near miss of one it takes, a keyword of ``torch.autograd.gradcheck`` or
``jax.test_util.check_grads`` with what gradverify does instead, or one of
fn's own keywords, which are not passed through."""

from __future__ import annotations

import difflib
import functools
import inspect
from collections.abc import Callable, Collection, Mapping
from typing import Any, TypeVar

from .._errors import ArgumentTypeError, explain

__all__ = ["PEER_KEYWORDS", "keyword_names", "keywords_checked", "options_checked", "refuse_unknown"]

F = TypeVar("F", bound=Callable[..., Any])

_MODES = (
    "every mode fn has is checked by default (JVP, VJP, FD cross-checked), a mode fn lacks named in the report; "
    "modes=('VJP',) checks reverse mode alone, modes=('JVP',) forward mode"
)
#: Keywords of gradcheck and check_grads that gradverify has no use for,
#: with what it does instead.
PEER_KEYWORDS: dict[str, str] = {
    "eps": (
        "gradverify chooses its finite-difference steps itself (a ladder of steps judged by a rounding model), "
        "so there is no eps to set: drop it"
    ),
    "raise_exception": "check() returns a CheckResult: call gv.assert_gradients(fn, ...) to raise on failure",
    "fast_mode": "large inputs are already checked along random directions: full=False forces them, full=True the "
    "full Jacobian",
    "check_forward_ad": _MODES,
    "check_backward_ad": _MODES,
    "check_batched_grad": "batched=True runs the JVP and VJP under vmap",
    "check_batched_forward_grad": "batched=True runs the JVP and VJP under vmap",
    "check_grad_dtypes": "gradient dtypes are always checked: drop it",
    "check_undefined_grad": "drop it (gradverify does not check a backward given undefined output gradients)",
    "masked": "sparse inputs are checked as their specified values: drop it",
    "check_sparse_nnz": "sparse inputs are checked as their specified values: drop it",
}
_DROP_IN = {
    "eps": "gradverify.torch.gradcheck or gradverify.jax.check_grads, which take",
}


def refuse_unknown(
    call: str, given: Collection[str], known: Collection[str], fn: Callable[..., Any] | None = None
) -> None:
    """Raise ArgumentTypeError, with the fix, for the first keyword of
    ``given`` that ``call`` (e.g. "gv.check()") does not take."""
    for key in sorted(set(given) - set(known)):
        what = f"{call} keyword {key!r}"
        expected = "one of " + ", ".join(sorted(known))
        if key in PEER_KEYWORDS:
            drop_in = _DROP_IN.get(key, "gradverify.torch.gradcheck, which takes")
            fix = f"{PEER_KEYWORDS[key]}. (To keep a suite's calls as they are, use {drop_in} them.)"
            raise ArgumentTypeError(explain(what, expected, "a keyword of another checker", fix))
        near = difflib.get_close_matches(key, known, n=1, cutoff=0.75)
        if near and not _takes(fn, key):
            raise ArgumentTypeError(explain(what, expected, f"{key!r}", f"did you mean {near[0]!r}?"))
        name = getattr(fn, "__name__", "fn")
        fix = (
            f"fn's keyword arguments are not passed through; close over them, "
            f"e.g. functools.partial({name}, {key}=...) in fn's place"
        )
        if near:
            fix += f" (or did you mean {near[0]!r}?)"
        raise ArgumentTypeError(explain(what, expected, f"{key!r}", fix))


def _takes(fn: Callable[..., Any] | None, key: str) -> bool:
    """Whether fn names ``key`` among its parameters (False where unknown)."""
    try:
        return key in inspect.signature(fn).parameters  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False


def keyword_names(f: Callable[..., Any]) -> frozenset[str]:
    """The names ``f`` takes as keywords."""
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return frozenset(k for k, p in inspect.signature(f).parameters.items() if p.kind in kinds)


def keywords_checked(call: str) -> Callable[[F], F]:
    """Wrap a public function whose keywords are fixed so that one it does
    not take is refused with the fix; its signature is unchanged."""

    def wrap(f: F) -> F:
        known = keyword_names(f)

        @functools.wraps(f)
        def checked(*args: Any, **kwargs: Any) -> Any:
            if not known.issuperset(kwargs):
                refuse_unknown(call, kwargs, known, args[0] if args else None)
            return f(*args, **kwargs)

        return checked  # type: ignore[return-value]

    return wrap


def options_checked(call: str, options: Mapping[str, Any], own: Collection[str], fn: Any, passed_to: Any) -> None:
    """``call``'s ``**options`` that it passes on to ``passed_to``: each
    must be one of ``passed_to``'s keywords; a near miss is looked for
    among both ``call``'s own and those."""
    known = keyword_names(passed_to)
    if not known.issuperset(options):
        refuse_unknown(call, options, set(known) | set(own), fn)
