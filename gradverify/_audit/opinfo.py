"""PyTorch's operator database (``op_db``, the OpInfos that PyTorch's own
``TestGradients`` feeds to ``gradcheck``) as audit tasks.

A *task* is one operator in one dtype; its *samples* are the OpInfo's
sample inputs, taken in the order the database yields them (it seeds
itself before each one, so a sample's index names the same tensors in
every process). A sample becomes a check the way ``TestGradients`` makes
a gradcheck of it: the tensors that require grad are the arguments, every
other value is held fixed, and the differentiable outputs (those that
require grad when the inputs do) are what is checked - one output as it
is, several flattened and joined.

Importing the database needs ``expecttest`` (the ``audit`` extra) and takes
seconds; nothing here imports torch before a function is called.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .._check.validate import validate_options
from .._errors import ArgumentValueError, UsageError, explain

__all__ = [
    "DTYPES",
    "Sample",
    "Task",
    "known_failure",
    "load_database",
    "reproducer",
    "samples",
    "tasks",
]

#: The dtypes an audit checks in (the gradient tests' own: gradcheck needs double precision).
DTYPES = ("float64", "complex128")
#: The gradient tests of ``test_ops_gradients.py``, by the mode and order a finding concerns.
TESTS = {
    (1, "VJP"): ("TestBwdGradients", "test_fn_grad"),
    (1, "JVP"): ("TestFwdGradients", "test_forward_mode_AD"),
    (2, "VJP"): ("TestBwdGradients", "test_fn_gradgrad"),
    (2, "JVP"): ("TestFwdGradients", "test_fn_fwgrad_bwgrad"),
}


@dataclass(frozen=True)
class Task:
    """One operator (``name`` and ``variant``, as the OpInfo names them) in one dtype."""

    name: str
    variant: str
    dtype: str
    device: str = "cpu"
    order: int = 1
    batched: bool = False
    samples: int = 4  # how many samples within max_size
    max_size: int = 500  # elements of the differentiable arguments together
    seed: int = 0
    database: str | None = None  # MODULE:NAME of a list of OpInfos; None: torch's op_db

    @property
    def op_id(self) -> str:
        return self.name + (f".{self.variant}" if self.variant else "")

    @property
    def id(self) -> str:
        return f"{self.op_id}[{self.dtype}]"


@dataclass
class Sample:
    """A sample ready for ``gv.check``: ``fn(*args)``; or why it is left out (``skip``)."""

    index: int
    fn: Callable[..., Any] | None
    args: tuple[Any, ...]
    skip: str | None = None
    error: str | None = None  # the sample could not be built or run: why
    outputs: str = "one"  # "one", or "k of m outputs"
    shapes: list[list[int]] = field(default_factory=list)
    keep: list[int] = field(default_factory=list)  # the differentiable outputs' places among the float ones

    @property
    def counted(self) -> bool:
        """Whether it counts among the task's ``samples`` (built for a check, whatever came of it)."""
        return self.skip is None


def load_database(spec: str | None = None) -> list[Any]:
    """``op_db``, or the OpInfos ``spec`` names (``module:attribute``, a sequence
    of OpInfos: an out-of-tree backend's or a custom-op library's own database);
    a usage error saying what to install or what was found."""
    import importlib

    if spec is not None:
        module, _, attr = spec.partition(":")
        try:
            found = getattr(importlib.import_module(module), attr) if attr else None
        except Exception as e:  # (the module's own import, whatever it raises)
            raise UsageError(
                explain(
                    "--database",
                    "MODULE:NAME of an importable list of OpInfos",
                    f"{spec!r} ({type(e).__name__}: {e})",
                    "e.g. mylib.testing:op_db, importable from the current directory",
                )
            ) from e
        if not isinstance(found, (list, tuple)) or not all(hasattr(o, "sample_inputs") for o in found):
            raise UsageError(
                explain("--database", "MODULE:NAME naming a list of OpInfos", f"{spec!r}: {type(found).__name__}", "")
            )
        return list(found)
    try:
        import torch  # noqa: F401  (the database imports it anyway; its own error is clearer)
        from torch.testing._internal.common_methods_invocations import op_db
    except ImportError as e:
        raise UsageError(
            explain(
                "gradverify audit torch",
                "torch and expecttest installed (PyTorch's operator database imports expecttest)",
                str(e),
                "pip install 'gradverify[audit]'",
            )
        ) from e
    return list(op_db)


def _matches(op: Any, patterns: Sequence[str] | None) -> bool:
    if not patterns:
        return True
    ids = {op.name, op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")}
    return any(fnmatch.fnmatchcase(i, p) for i in ids for p in patterns)


def tasks(
    ops: Sequence[str] | None = None,
    dtypes: Sequence[str] = DTYPES,
    *,
    device: str = "cpu",
    order: int = 1,
    batched: bool = False,
    samples: int = 4,
    max_size: int = 500,
    seed: int = 0,
    database: str | None = None,
) -> list[Task]:
    """Every operator with autograd support, in each dtype it supports on
    ``device``, in the database's order; ``ops``: names or shell patterns
    (``linalg.*``), each matching an OpInfo's name or ``name.variant``."""
    import torch

    wrong = [d for d in dtypes if not isinstance(getattr(torch, str(d), None), torch.dtype)]
    if wrong:
        raise ArgumentValueError(explain("--dtype", "torch dtype names", ", ".join(map(str, wrong)), "--dtype float64"))
    validate_options(order, seed, None, None, 2, True, batched)
    if samples < 1 or max_size < 1:
        raise ArgumentValueError(
            explain("samples, max_size", "ints >= 1", f"{samples}, {max_size}", "e.g. --samples 4")
        )
    found = load_database(database)
    unknown = [p for p in ops or () if not any(_matches(op, [p]) for op in found)]
    if unknown:
        close = sorted({op.name for op in found if any(u.split("*")[0].lower() in op.name for u in unknown)})[:8]
        raise ArgumentValueError(
            explain(
                "--ops",
                "names or patterns of OpInfos in torch's op_db",
                ", ".join(unknown) + " (matches none)",
                "e.g. --ops 'linalg.*' cholesky_inverse" + (f"; close names: {', '.join(close)}" if close else ""),
            )
        )
    out = []
    for op in found:
        if not op.supports_autograd or not _matches(op, ops):
            continue
        supported = op.supported_backward_dtypes(torch.device(device).type)  # (as TestGradients has it)
        for d in dtypes:
            if getattr(torch, d) in supported:
                out.append(
                    Task(op.name, op.variant_test_name, d, device, order, batched, samples, max_size, seed, database)
                )
    if not out:
        raise ArgumentValueError(
            explain(
                "--ops and --dtype",
                "operators with autograd support in one of the dtypes on the device",
                f"none among {list(ops) if ops else 'all'} in {list(dtypes)} on {device}",
                "list other --ops or --dtype",
            )
        )
    return out


def find(task: Task, database: Sequence[Any]) -> Any:
    for op in database:
        if op.name == task.name and op.variant_test_name == task.variant:
            return op
    raise ArgumentValueError(explain("task", "an OpInfo of op_db", task.op_id, "list them with --ops '*'"))


# -- a sample as a check ---------------------------------------------------------------------------
def _leaf(x: Any) -> bool:
    import torch

    return isinstance(x, torch.Tensor) and x.requires_grad


def _split(value: Any, flat: list[Any]) -> Any:
    """A template of ``value`` with its tensors that require grad replaced by
    their place in ``flat`` (a list of tensors counts, as TestGradients has it)."""
    import torch

    if _leaf(value):
        flat.append(value.detach().clone())
        return ("arg", len(flat) - 1)
    if isinstance(value, (list, tuple)) and value and all(isinstance(t, torch.Tensor) for t in value):
        return ("seq", type(value), [_split(t, flat) for t in value])
    return ("const", value)


def _join(template: Any, inputs: Sequence[Any]) -> Any:
    tag = template[0]
    if tag == "arg":
        return inputs[template[1]]
    if tag == "seq":
        return template[1](_join(t, inputs) for t in template[2])
    return template[1]


def _float_leaves(out: Any) -> list[Any]:
    import torch

    return [
        t
        for t in torch.utils._pytree.tree_leaves(out)
        if isinstance(t, torch.Tensor) and (t.is_floating_point() or t.is_complex())
    ]


def _make(op: Any, sample: Any, index: int, max_size: int) -> Sample:
    import torch

    flat: list[Any] = []
    head = _split(sample.input, flat)
    rest = [_split(a, flat) for a in sample.args]
    named = {k: _split(v, flat) for k, v in sample.kwargs.items()}
    shapes = [list(t.shape) for t in flat]
    if not flat:
        return Sample(index, None, (), skip="no argument requires grad", shapes=shapes)
    if any(t.numel() == 0 for t in flat):
        return Sample(index, None, (), skip="an empty argument", shapes=shapes)
    size = sum(_elements(t) for t in flat)
    if size > max_size:
        return Sample(index, None, (), skip=f"{size} elements > max_size {max_size}", shapes=shapes)

    def call(*inputs: Any) -> Any:
        out = op.gradcheck_wrapper(
            op.get_op(),
            _join(head, inputs),
            *[_join(a, inputs) for a in rest],
            **{k: _join(v, inputs) for k, v in named.items()},
        )
        return sample.output_process_fn_grad(out) if sample.output_process_fn_grad is not None else out

    # which outputs are differentiable: those that require grad when the inputs do (as gradcheck has it)
    probe = [t.detach().clone().requires_grad_(True) for t in flat]
    try:
        leaves = _float_leaves(call(*probe))
    except Exception as e:  # (the operator on copies of its sample's tensors, as gv.check calls it)
        return Sample(index, None, (), error=f"the operator raised on a copy of its sample: {type(e).__name__}: {e}")
    keep = [k for k, t in enumerate(leaves) if t.requires_grad]
    if not keep:
        return Sample(index, None, (), skip="no differentiable output", shapes=shapes)
    if len(leaves) == 1:

        def fn(*inputs: Any) -> Any:
            out = call(*inputs)
            return out if isinstance(out, torch.Tensor) else _float_leaves(out)[0]

        return Sample(index, fn, tuple(flat), shapes=shapes, keep=keep)

    def fn(*inputs: Any) -> Any:
        parts = [_float_leaves(call(*inputs))[k] for k in keep]
        if any(p.is_complex() for p in parts):
            parts = [p.to(torch.promote_types(p.dtype, torch.complex64)) for p in parts]
        return parts[0] if len(parts) == 1 else torch.cat([p.reshape(-1) for p in parts])

    return Sample(index, fn, tuple(flat), outputs=f"{len(keep)} of {len(leaves)} outputs", shapes=shapes, keep=keep)


def samples(
    task: Task,
    database: Sequence[Any],
    done: Mapping[int, bool] | None = None,
    starting: Callable[[int], None] = lambda index: None,
) -> Iterator[Sample]:
    """The task's samples: every one the database yields until ``task.samples``
    of them are checkable; those left out come with the reason. ``done``:
    indices already done (a resumed audit) and whether each was checkable,
    counted but not built again; ``starting``: told each index before its
    sample is built (building runs the operator once)."""
    done = done or {}
    import torch

    op = find(task, database)
    taken = 0
    source = iter(op.sample_inputs(task.device, getattr(torch, task.dtype), requires_grad=True))
    index = 0
    while taken < task.samples:
        try:
            sample = next(source)
        except StopIteration:
            return
        except Exception as e:  # (the database's own sample function)
            if index not in done:
                yield Sample(index, None, (), error=f"op_db's sample_inputs raised: {type(e).__name__}: {e}")
            return
        if index in done:
            taken += done[index]
        else:
            starting(index)
            made = _make(op, sample, index, task.max_size)
            taken += made.counted
            yield made
        index += 1


# -- PyTorch's own expected failures ---------------------------------------------------------------
def _kind(decorator: Any) -> tuple[str, str] | None:
    """('expected failure' | 'skip', reason) for a decorator that stops a test passing; None for others
    (a tolerance override, a device guard)."""
    name = getattr(decorator, "__qualname__", type(decorator).__name__)
    if name.startswith("expectedFailure"):
        return "expected failure", ""
    if name.startswith("skip.") or name == "skip":
        cells = [c.cell_contents for c in getattr(decorator, "__closure__", None) or () if c.cell_contents]
        return "skip", next((c for c in cells if isinstance(c, str)), "")
    return None


def known_failure(task: Task, database: Sequence[Any], mode: str, order: int = 1) -> dict[str, str] | None:
    """The OpInfo's expected failure or skip of the gradient test a finding in
    ``mode`` ("JVP" or "VJP") at ``order`` concerns (the first-order tests for a
    first-order finding of an order-2 check); None when PyTorch expects it to pass."""
    import torch

    op = find(task, database)
    cls, test = TESTS[(min(order, 2), mode)]
    dtype = getattr(torch, task.dtype)
    for info in (*op.decorators, *op.skips):
        if not hasattr(info, "is_active") or not info.is_active(cls, test, torch.device(task.device).type, dtype, {}):
            continue
        for d in info.decorators:
            kind = _kind(d)
            if kind is not None:
                return {"test": f"{cls}.{test}", "kind": kind[0], "reason": kind[1]}
    return None


def declared(task: Task, database: Sequence[Any]) -> dict[str, bool]:
    """What the OpInfo says the operator supports."""
    op = find(task, database)
    return {
        "forward_ad": bool(op.supports_forward_ad),
        "gradgrad": bool(op.supports_gradgrad),
        "fwgrad_bwgrad": bool(op.supports_fwgrad_bwgrad),
    }


# -- a reproducer --------------------------------------------------------------------------------
_SCRIPT = '''\
"""{title}

Found by `gradverify audit torch`. Runs alone: needs torch {torch}, expecttest and gradverify.
The sample is the database's own (it seeds itself before each sample).
"""
{imports}
import gradverify as gv

op = next(o for o in op_db if o.name == {name!r} and o.variant_test_name == {variant!r})
sample = list(op.sample_inputs({device!r}, torch.{dtype}, requires_grad=True))[{index}]
leaves = []


def split(v):
    if isinstance(v, torch.Tensor) and v.requires_grad:
        leaves.append(v.detach().clone())
        return ("arg", len(leaves) - 1)
    if isinstance(v, (list, tuple)) and v and all(isinstance(t, torch.Tensor) for t in v):
        return ("seq", type(v), [split(t) for t in v])
    return ("const", v)


def join(t, inputs):
    if t[0] == "arg":
        return inputs[t[1]]
    if t[0] == "seq":
        return t[1](join(s, inputs) for s in t[2])
    return t[1]


head, rest = split(sample.input), [split(a) for a in sample.args]
named = {{k: split(v) for k, v in sample.kwargs.items()}}


def outputs(out):
    leaves = torch.utils._pytree.tree_leaves(out)
    return [t for t in leaves if isinstance(t, torch.Tensor) and (t.is_floating_point() or t.is_complex())]


def fn(*inputs):
    args = [join(a, inputs) for a in rest]
    kwargs = {{k: join(v, inputs) for k, v in named.items()}}
    out = op.gradcheck_wrapper(op.get_op(), join(head, inputs), *args, **kwargs)
    if sample.output_process_fn_grad is not None:
        out = sample.output_process_fn_grad(out)
    if isinstance(out, torch.Tensor):
        return out
    parts = [outputs(out)[k] for k in {keep!r}]
    if any(p.is_complex() for p in parts):
        parts = [p.to(torch.promote_types(p.dtype, torch.complex64)) for p in parts]
    return parts[0] if len(parts) == 1 else torch.cat([p.reshape(-1) for p in parts])


result = gv.check(fn, *leaves, order={order}, batched={batched}, seed={seed}, name={title!r})
print(result)
'''


def _elements(t: Any) -> int:
    """What a check perturbs of ``t``: its elements, or a sparse tensor's specified values."""
    import torch

    if t.layout == torch.strided:
        return int(t.numel())
    values = t._values() if t.layout == torch.sparse_coo else t.values()
    return int(values.numel())


def reproducer(task: Task, sample: Sample) -> str:
    """A script that rebuilds the sample from the database and checks it again."""
    import torch

    title = f"{task.op_id} ({task.dtype}), sample {sample.index}"
    if task.database is None:
        imports = "import torch\nfrom torch.testing._internal.common_methods_invocations import op_db\n"
    else:
        import os

        module, _, attr = task.database.partition(":")
        # (where the audit ran: the database's module imports from there)
        imports = (
            f"import sys\n\nsys.path.insert(0, {os.getcwd()!r})\nimport torch\nfrom {module} import {attr} as op_db\n"
        )
    text = _SCRIPT.format(
        imports=imports,
        title=title,
        torch=torch.__version__,
        name=task.name,
        variant=task.variant,
        device=task.device,
        dtype=task.dtype,
        index=sample.index,
        keep=sample.keep,
        order=task.order,
        batched=task.batched,
        seed=task.seed,
    )
    return re.sub(r"\n{3,}(?=\S)", "\n\n\n", text)
