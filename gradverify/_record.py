"""A suite's gradient-checker call, as data: ``pytest
--gradverify-replace=record`` writes one record for each call of
``gradcheck`` / ``gradgradcheck`` / ``check_grads`` the suite makes (the
call still runs, with its own verdict), and ``gradverify write`` turns the
records into property-based tests.

A record says what was checked and how:

* ``function``: its importable path (``module:qualname``; a torch
  ``Function``'s ``apply`` as ``module:Class.apply``; an ``nn.Module`` as
  its class, with how it was built: its constructor's arguments read from
  its attributes where building it again so gives the same module, else
  its ``extra_repr``), or ``path: None`` and why not (a lambda, a closure
  in a test, a ``functools.partial``, an object the module does not hold
  under that name);
* ``arguments``: every leaf of the arguments, flattened with the
  framework's own pytree utility, by its path: kind, shape, dtype, device,
  whether the checker differentiates it (torch: a floating tensor that
  requires grad; jax: every inexact leaf), its finite range, and its value
  where it is a Python scalar;
* ``options``: the keywords the call passed (tolerances, eps, modes,
  fast_mode, ...) and its order;
* ``point``: the ``.npz`` beside the records holding every array leaf (by
  path), so that the point can be given back as an ``@example``; ``None``
  with the reason where a leaf is too large to keep.
"""

from __future__ import annotations

import inspect
import itertools
import math
import os
import sys
import threading
import warnings
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["MAX_SAVED", "described", "function_of", "leaves_of", "skeleton_of"]

#: Elements of all array leaves together above which a call's point is not saved.
MAX_SAVED = 1 << 20

_counter = itertools.count()
_lock = threading.Lock()


def described(
    peer: str, original: Any, args: tuple[Any, ...], kwargs: dict[str, Any], directory: Path | None
) -> dict[str, Any]:
    """The record of one call of ``peer`` (the original checker, whose
    signature names the arguments), its point saved under ``directory``."""
    bound = inspect.signature(original).bind(*args, **kwargs)
    given = dict(bound.arguments)
    framework = "jax" if peer == "check_grads" else "torch"
    fn = given.pop("func" if framework == "torch" else "f")
    inputs = given.pop("inputs" if framework == "torch" else "args")
    if framework == "torch" and not isinstance(inputs, (tuple, list)):
        inputs = (inputs,)  # (gradcheck takes a lone tensor too)
    options = {k: _plain(v) for k, v in given.items() if k != "grad_outputs"}
    if framework == "jax":
        options["order"] = int(given.get("order", 1))
    else:
        options["order"] = 2 if peer == "gradgradcheck" else 1
    leaves = leaves_of(framework, inputs)
    record: dict[str, Any] = {
        "peer": peer,
        "framework": framework,
        "function": function_of(fn),
        "structure": _structure(framework, inputs),
        "skeleton": skeleton_of(framework, inputs),
        "arguments": [meta for meta, _ in leaves],
        "options": options,
        "point": None,
    }
    if directory is not None:
        record["point"], record["point_missing"] = _saved(leaves, directory)
    return record


def function_of(fn: Any) -> dict[str, Any]:
    """Where ``fn`` can be imported from (``path``), or why it cannot (``why``)."""
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__
    owner = getattr(fn, "__self__", None)
    if inspect.isclass(owner) and getattr(fn, "__name__", "") == "apply" and _is_torch_function(owner):
        path = _importable(owner)
        if path is None:
            return {"path": None, "name": f"{owner.__qualname__}.apply", "why": _why_not(owner)}
        return {"path": f"{path}.apply", "name": f"{owner.__qualname__}.apply", "kind": "autograd.Function"}
    if _is_module(fn):
        cls = type(fn)
        path = _importable(cls)
        read = _constructor(fn)
        built = read if read is not None else _extra_repr(fn)
        out = {"name": cls.__qualname__, "kind": "nn.Module", "built": built}
        out["built_from"] = "attributes" if read is not None else "extra_repr"
        if not fn.training:
            out["training"] = False
        tensors = itertools.chain(fn.parameters(), fn.buffers())  # (a module of buffers alone too)
        dtypes = sorted({str(t.dtype).replace("torch.", "") for t in tensors if t.is_floating_point()})
        if dtypes:
            out["dtype"] = dtypes[0] if len(dtypes) == 1 else dtypes
        return {**out, "path": path} if path else {**out, "path": None, "why": _why_not(cls)}
    if type(fn).__name__ == "partial":
        return {"path": None, "name": f"partial({function_of(fn.func).get('name')})", "why": "a functools.partial"}
    path = _importable(fn)
    if path is not None:
        return {"path": path, "name": path.split(":", 1)[1]}
    return {"path": None, "name": name, "why": _why_not(fn)}


def leaves_of(framework: str, inputs: Any) -> list[tuple[dict[str, Any], Any]]:
    """(what a leaf is, the leaf itself) for every leaf of ``inputs``, by path."""
    if framework == "torch":
        from torch.utils._pytree import keystr, tree_flatten_with_path
    else:
        from jax.tree_util import keystr, tree_flatten_with_path
    out = []
    for path, leaf in tree_flatten_with_path(tuple(inputs))[0]:
        out.append((_leaf(framework, keystr(path), leaf), leaf))
    return out


def _structure(framework: str, inputs: Any) -> str:
    if framework == "torch":
        from torch.utils._pytree import tree_structure
    else:
        from jax.tree_util import tree_structure
    return str(tree_structure(tuple(inputs)))


def skeleton_of(framework: str, inputs: Any) -> list[Any]:
    """The arguments' tree as JSON, read from the framework's own tree spec:
    ``["leaf"]``, ``["none"]``, ``["tuple", children]``, ``["list",
    children]``, ``["dict", keys, children]``, ``["namedtuple", path or
    None, fields, children]``, or ``["custom", type name]`` for a node that
    cannot be written back as source."""
    if framework == "torch":
        from torch.utils._pytree import tree_structure

        spec = tree_structure(tuple(inputs))

        def node(s: Any) -> tuple[Any, Any, list[Any]]:
            if s.is_leaf():
                return None, None, []
            return s.type, s.context, [s.child(i) for i in range(s.num_children)]
    else:
        from jax.tree_util import tree_structure

        spec = tree_structure(tuple(inputs))

        def node(s: Any) -> tuple[Any, Any, list[Any]]:
            data = s.node_data()
            if data is None:
                return None, None, []
            return data[0], data[1], list(s.children())

    def walk(s: Any) -> list[Any]:
        kind, context, children = node(s)
        if kind is None:
            return ["leaf"]
        if kind is type(None):
            return ["none"]
        if kind in (tuple, list):
            return [kind.__name__, [walk(c) for c in children]]
        if kind is dict:
            return ["dict", [_plain(k) for k in context], [walk(c) for c in children]]
        cls = context if inspect.isclass(context) else kind  # (torch holds a namedtuple's class as context)
        if inspect.isclass(cls) and issubclass(cls, tuple) and hasattr(cls, "_fields"):
            return ["namedtuple", _importable(cls), list(cls._fields), [walk(c) for c in children]]
        return ["custom", getattr(cls, "__qualname__", str(cls))]

    return walk(spec)


def _leaf(framework: str, path: str, leaf: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"path": path, "type": type(leaf).__name__}
    if leaf is None:
        return {**meta, "kind": "none", "differentiated": False}
    if isinstance(leaf, str):
        return {**meta, "kind": "scalar", "value": leaf, "differentiated": False}
    if isinstance(leaf, (bool, int, float, complex)):
        inexact = isinstance(leaf, (float, complex)) and not isinstance(leaf, bool)
        value = leaf if not isinstance(leaf, complex) else [leaf.real, leaf.imag]
        return {**meta, "kind": "scalar", "value": value, "differentiated": framework == "jax" and inexact}
    shape = getattr(leaf, "shape", None)
    dtype = getattr(leaf, "dtype", None)
    if shape is None or dtype is None:
        return {**meta, "kind": "other", "differentiated": False}
    meta.update(kind="array", shape=[int(d) for d in shape], dtype=str(dtype).replace("torch.", ""))
    if framework == "torch":
        import torch

        if not isinstance(leaf, torch.Tensor):
            return {**meta, "differentiated": False, **_range(np.asarray(leaf))}
        meta["device"] = str(leaf.device)
        meta["differentiated"] = bool(leaf.requires_grad) and (leaf.is_floating_point() or leaf.is_complex())
        meta["layout"] = str(leaf.layout).replace("torch.", "")
        if leaf.layout != torch.strided:
            return meta
        return {**meta, **_range(_host(leaf))}
    import jax.numpy as jnp

    devices = getattr(leaf, "devices", None)
    meta["device"] = ",".join(sorted(str(d) for d in devices())) if callable(devices) else "cpu"
    meta["differentiated"] = bool(jnp.issubdtype(jnp.result_type(leaf), jnp.inexact))
    return {**meta, **_range(np.asarray(leaf))}


def _range(a: np.ndarray) -> dict[str, Any]:
    """The finite range of a host array (real and imaginary parts of a complex one)."""
    if a.dtype.kind == "c":
        a = np.stack([a.real, a.imag])
    if a.dtype.kind not in "fiub" or a.size == 0:
        return {}
    values = a.astype(np.float64, copy=False)
    finite = values[np.isfinite(values)]
    out: dict[str, Any] = {"nonfinite": int(values.size - finite.size)}
    if finite.size:
        out.update(min=float(finite.min()), max=float(finite.max()))
        out["zeros"] = int((finite == 0).sum())
    return out


def _saved(leaves: list[tuple[dict[str, Any], Any]], directory: Path) -> tuple[str | None, str | None]:
    """Every array leaf of the point in one ``.npz`` (keyed by leaf path),
    its name relative to ``directory``; or None and why."""
    arrays = {}
    total = 0
    for meta, leaf in leaves:
        if meta["kind"] != "array":
            continue
        if meta.get("layout", "strided") != "strided":
            return None, f"{meta['path']} is a {meta['layout']} tensor"
        host = _host(leaf)
        total += host.size
        if total > MAX_SAVED:
            return None, f"more than {MAX_SAVED} elements in all"
        arrays[meta["path"] or "()"] = host
    with _lock:
        k = next(_counter)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    name = f"points/{worker}-{os.getpid()}-{k:05d}.npz"
    target = directory / name
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target, "wb") as f:
        np.savez(f, **arrays)
    return name, None


def _host(leaf: Any) -> np.ndarray:
    if "torch" in sys.modules and isinstance(leaf, sys.modules["torch"].Tensor):
        t = leaf.detach().resolve_conj().resolve_neg().cpu()
        if str(t.dtype) == "torch.bfloat16":
            return t.float().numpy()  # (numpy has no bfloat16: the dtype is in the record)
        return t.numpy()
    return np.asarray(leaf)


def _plain(v: Any) -> Any:
    """A keyword's value as JSON can hold it (its repr otherwise)."""
    if v is None or isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, float):
        return v if math.isfinite(v) else repr(v)
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, type) or hasattr(v, "dtype") and not hasattr(v, "shape"):
        return str(getattr(v, "__name__", v))
    return repr(v)


def _importable(obj: Any) -> str | None:
    """``module:qualname`` where importing it gives ``obj`` itself."""
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None)
    if not module or not qualname or "<" in qualname:
        return None
    held = sys.modules.get(module)
    if held is None:
        return None
    found = held
    for part in qualname.split("."):
        found = getattr(found, part, None)
        if found is None:
            break
    if found is obj:
        return f"{module}:{qualname}"
    name = getattr(obj, "__name__", None)  # (a builtin's qualname may name a class it is not read from: torch.sqrt)
    return f"{module}:{name}" if name and getattr(held, name, None) is obj else None


def _why_not(obj: Any) -> str:
    qualname = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None) or ""
    if "<lambda>" in qualname:
        return "a lambda"
    if "<locals>" in qualname:
        return f"defined inside {qualname.split('.<locals>')[0]} (a closure): not importable"
    module = getattr(obj, "__module__", None)
    if module is None:
        return f"{type(obj).__name__} has no module"
    return f"{module} does not hold it as {qualname}"


def _is_torch_function(cls: type) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and issubclass(cls, torch.autograd.Function)


def _is_module(fn: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(fn, torch.nn.Module)


def _constructor(module: Any) -> str | None:
    """How ``module`` was built, as its class's keyword arguments: each
    constructor parameter read from the module's attribute of that name (or
    ``_name``) where it holds a literal, those at their defaults left out.
    Said only where building the class again with them gives the same
    ``extra_repr`` and the same parameter and buffer shapes (the global
    random state kept); None otherwise (a required parameter not held, a
    value that is no literal, a constructor that fails or builds another
    module)."""
    cls = type(module)
    try:
        parameters = inspect.signature(cls).parameters.values()
    except (TypeError, ValueError):
        return None
    kwargs: dict[str, Any] = {}
    for p in parameters:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if p.kind is p.POSITIONAL_ONLY:
            return None
        value = _held(module, p.name)
        if value is _NOT_HELD:
            if p.default is p.empty:
                return None
            continue
        if p.default is p.empty or not _same(value, p.default):
            kwargs[p.name] = value
    again = _rebuilt(cls, kwargs)
    if again is None or _extra_repr(again) != _extra_repr(module) or _shapes(again) != _shapes(module):
        return None
    if _literals(again) != _literals(module):  # (an attribute held transformed: 1 / temperature)
        return None
    return ", ".join(f"{k}={v!r}" for k, v in kwargs.items())


def _rebuilt(cls: type, kwargs: dict[str, Any]) -> Any:
    """``cls(**kwargs)``, built on the meta device (no memory, no random
    state used); where it cannot be built there, on the CPU with the CPU
    generator's state kept. None where it cannot be built."""
    torch = sys.modules["torch"]
    for device in ("meta", "cpu"):
        try:
            with torch.device(device), torch.random.fork_rng(devices=[]), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return cls(**kwargs)
        except Exception:  # noqa: BLE001 -- not buildable so: the next way, or not said
            continue
    return None


def _literals(module: Any) -> dict[str, Any]:
    """The literal attributes a module holds (its mode left out)."""
    return {k: v for k, v in vars(module).items() if k != "training" and _literal(v)}


_NOT_HELD = object()


def _held(module: Any, name: str) -> Any:
    """The literal ``module`` holds as ``name`` or ``_name``, else _NOT_HELD."""
    for attr in (name, f"_{name}"):
        value = module.__dict__.get(attr, _NOT_HELD)
        if value is not _NOT_HELD:
            return value if _literal(value) else _NOT_HELD
    return _NOT_HELD


def _literal(value: Any) -> bool:
    """Whether ``repr(value)`` reads back as ``value`` (exact types: an enum
    or a numpy scalar is an int or a float that does not)."""
    if value is None or type(value) in (bool, int, str):
        return True
    if type(value) is float:
        return math.isfinite(value)
    if type(value) in (tuple, list):
        return all(_literal(v) for v in value)
    return False


def _same(a: Any, b: Any) -> bool:
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:  # noqa: BLE001 -- not comparable: not the default
        return False


def _shapes(module: Any) -> list[tuple[str, tuple[int, ...]]]:
    tensors = itertools.chain(module.named_parameters(), module.named_buffers())
    return [(name, tuple(t.shape)) for name, t in tensors]


def _extra_repr(module: Any) -> str | None:
    try:
        return module.extra_repr() or None
    except Exception:  # noqa: BLE001 -- what can be read of it, or nothing
        return None
