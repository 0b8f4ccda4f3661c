"""Models passed as fn, called as functions of their parameters and inputs.

``gv.check(module, x)`` checks the inputs and every parameter: a torch
``nn.Module`` is called through ``torch.func.functional_call`` with its
parameters that require grad as the first argument (a dict by their dotted
names) and its buffers as fresh copies at every call, so running
statistics a call updates never reach the caller's module (the report says
which were updated and held); an equinox module is itself a pytree, its
inexact-array leaves the parameters. Either way the parameters are named
``model.<path>`` and ``wrt="inputs"`` / ``"parameters"`` narrow the check.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any

from ..._result import WARNING, CheckResult, Finding, Kind
from ...backends.trees import flatten, is_module

__all__ = ["MODEL", "Model", "model_of", "not_arguments"]

#: The name of a model's parameters in reports and ``wrt``.
MODEL = "model"


class Model:
    """A model as fn: ``call(params, *inputs)`` and its parameters."""

    framework: str
    params: Any
    call: Callable[..., Any]

    def said(self, result: CheckResult, inputs: tuple[Any, ...]) -> CheckResult:
        """The result with what the model's own call says (its buffers, its mode)."""
        return result


class _Torch(Model):
    framework = "torch"

    def __init__(self, module: Any) -> None:
        self.module = module
        self.params = {n: p for n, p in module.named_parameters() if p.requires_grad}
        self.frozen = [n for n, p in module.named_parameters() if not p.requires_grad]
        self.buffers = dict(module.named_buffers())

    def call(self, params: dict[str, Any], *inputs: Any) -> Any:
        import torch.func  # (a torch model's call: torch is loaded)

        fresh = {n: b.clone() for n, b in self.buffers.items()}
        return torch.func.functional_call(self.module, {**params, **fresh}, inputs)

    def updated(self, inputs: tuple[Any, ...]) -> list[str]:
        """The buffers one call at ``inputs`` updates (running statistics)."""
        import torch  # (a torch model's call: torch is loaded)

        fresh = {n: b.clone() for n, b in self.buffers.items()}
        with torch.no_grad():
            torch.func.functional_call(self.module, {**self.params, **fresh}, inputs)
        return [n for n, b in fresh.items() if not torch.equal(b, self.buffers[n])]

    def said(self, result: CheckResult, inputs: tuple[Any, ...]) -> CheckResult:
        notes = list(result.notes)
        if self.frozen:
            notes.append(f"parameters with requires_grad=False held as constants: {', '.join(self.frozen[:8])}")
        try:
            updated = self.updated(inputs) if self.buffers else []
        except Exception:  # noqa: BLE001 -- fn's own error is the check's to report
            updated = []
        if updated:
            notes.append(
                f"fn updates buffers ({', '.join(updated)}): each call ran on fresh copies of the module's "
                "buffers, so those updates were held and the caller's module is unchanged"
            )
        findings = result.findings
        if self.module.training:
            random = sorted({type(m).__name__ for m in self.module.modules() if "Dropout" in type(m).__name__})
            cause = f" ({', '.join(random)})" if random else ""
            findings = tuple(
                dataclasses.replace(
                    f,
                    message=f"{f.message}; the module is in training mode{cause}: call module.eval() before "
                    "checking, or fix its randomness (a seeded generator)",
                )
                if f.kind == Kind.NONDETERMINISM
                else f
                for f in findings
            )
        return dataclasses.replace(result, findings=findings, notes=tuple(notes))


class _Equinox(Model):
    framework = "equinox"

    def __init__(self, module: Any) -> None:
        self.params = module

    @staticmethod
    def call(model: Any, *inputs: Any) -> Any:
        return model(*inputs)


class _Nnx(Model):
    """A ``flax.nnx`` module: its ``nnx.Param`` variables are the parameters
    (by their dotted paths); the rest of its state (batch statistics, RNG
    counters) is held as it is, and each call merges a fresh copy of the
    module, so what a call updates never reaches the caller's module."""

    framework = "nnx"

    def __init__(self, module: Any) -> None:
        import jax
        from flax import nnx

        self.graphdef, state, self.rest = nnx.split(module, nnx.Param, ...)
        pairs, self.treedef = jax.tree_util.tree_flatten_with_path(nnx.to_pure_dict(state))
        self.state = state
        self.params = {".".join(str(getattr(k, "key", k)) for k in path): leaf for path, leaf in pairs}

    def call(self, params: dict[str, Any], *inputs: Any) -> Any:
        import jax
        from flax import nnx

        state = jax.tree_util.tree_map(lambda a: a, self.state)  # (a fresh State: the caller's is never filled)
        nnx.replace_by_pure_dict(state, jax.tree_util.tree_unflatten(self.treedef, list(params.values())))
        return nnx.merge(self.graphdef, state, self.rest, copy=True)(*inputs)


def model_of(fn: Any) -> Model | None:
    """fn as a model whose parameters are checked (None: fn is a function)."""
    kind = is_module(fn)
    if kind == "torch":
        return _Torch(fn)
    if kind == "equinox":
        return _Equinox(fn)
    if kind == "nnx":
        return _Nnx(fn)
    return None


# -- tensors fn reaches that are not its arguments ------------------------------------
def not_arguments(fn: Any, reached: Sequence[Any]) -> Finding | None:
    """A warning listing the tensors requiring grad that fn's output depends
    on but that were not arguments (a closed-over model's weights): no mode
    differentiated them, so their gradients went unchecked. Each is named
    where fn's closure, globals or bound object hold it (``model.fc1.weight``)."""
    if not reached:
        return None
    names = _names(fn)
    order = {k: j for j, k in enumerate(names)}  # (named ones as their holders list them, then the rest)
    ranked = sorted(reached, key=lambda t: order.get(id(t), len(order)))
    listed = [f"{names.get(id(t), 'unnamed')}: {_shape(t)}" for t in ranked]
    more = f"; and {len(listed) - 6} more" if len(listed) > 6 else ""
    one = len(reached) == 1
    what = (
        "1 tensor that requires grad and is not an argument"
        if one
        else f"{len(reached)} tensors that require grad and are not arguments"
    )
    return Finding(
        kind=Kind.NOT_ARGUMENTS,
        level=WARNING,
        message=(
            f"fn uses {what} ({'; '.join(listed[:6])}{more}): {'it was' if one else 'they were'} not checked; "
            f"pass {'it as an argument' if one else 'them as arguments (a dict of tensors is one argument)'}, "
            "or pass the module itself: gv.check(module, x) checks its inputs and its parameters"
        ),
    )


def _shape(t: Any) -> str:
    return f"{str(t.dtype).removeprefix('torch.')}[{'x'.join(str(d) for d in t.shape)}]"


def _names(fn: Any) -> dict[int, str]:
    """id -> name of every tensor fn can reach by a name: a partial's
    arguments, a bound method's object, its closure's cells, the globals
    its code names; a module's parameters and a pytree's leaves by path."""
    held: list[tuple[str, Any]] = []
    while isinstance(fn, functools.partial):
        held += [(f"partial argument {k}", a) for k, a in enumerate(fn.args)] + list(fn.keywords.items())
        fn = fn.func
    owner = getattr(fn, "__self__", None)
    if owner is not None:
        held.append(("self", owner))
        fn = getattr(fn, "__func__", fn)
    code = getattr(fn, "__code__", None)
    if code is not None:
        cells = zip(code.co_freevars, fn.__closure__ or ())
        held += [(name, value) for name, cell in cells if (value := _content(cell)) is not None]
        scope = getattr(fn, "__globals__", {})
        held += [(name, scope[name]) for name in code.co_names if name in scope]
    names: dict[int, str] = {}
    for name, value in held:
        for path, leaf in _leaves(value):
            names.setdefault(id(leaf), f"{name}{path}")
    return names


def _content(cell: Any) -> Any:
    try:
        return cell.cell_contents
    except ValueError:  # (an empty cell: a name not yet bound)
        return None


def _leaves(value: Any) -> list[tuple[str, Any]]:
    """(path, tensor) for a tensor, a module's parameters, or a container's leaves."""
    import torch  # (tensors were reached: torch is loaded)

    if isinstance(value, torch.Tensor):
        return [("", value)]
    if isinstance(value, torch.nn.Module):
        return [(f".{n}", p) for n, p in value.named_parameters()]
    if isinstance(value, (dict, list, tuple)):
        try:
            flat = flatten(value)
        except Exception:  # noqa: BLE001 -- a container no utility flattens names nothing
            return []
        return [(p, v) for p, v in zip(flat.paths, flat.leaves) if isinstance(v, torch.Tensor)]
    return []
