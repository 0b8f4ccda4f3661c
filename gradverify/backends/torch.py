"""PyTorch: reverse mode through ``torch.autograd.grad``, forward mode through
``torch.autograd.forward_ad`` (dual tensors), which works for old-style and
``setup_context`` ``autograd.Function``s alike."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import torch
import torch.autograd.forward_ad as fwAD

from .._errors import ModeUnavailable
from . import torch_sparse
from .base import Backend, on_wrt

__all__ = ["TorchBackend"]

#: Copy a check's arguments where they lie on the CPU too, as on a device
#: (see TorchBackend.copies_where_held): tests set it to run the device's way
#: on a machine without one.
HOLD_ON_CPU = False


class TorchBackend(Backend):
    name = "torch"

    def dtype_name(self, x: Any) -> str:
        return str(x.dtype).removeprefix("torch.")

    def is_floating(self, x: Any) -> bool:
        return bool(x.is_floating_point())

    def is_complex(self, x: Any) -> bool:
        return bool(x.is_complex())

    def is_sparse(self, x: Any) -> bool:
        return isinstance(x, torch.Tensor) and x.layout in torch_sparse.LAYOUTS

    def sparse(self, x: Any) -> Any:
        return torch_sparse.TorchSparse(x) if self.is_sparse(x) else None

    def sparse_gradients(
        self, fn: Callable, args: Sequence[Any], wrt: Sequence[int], seed: int
    ) -> list[tuple[str, np.ndarray]]:
        return torch_sparse.gradients(fn, args, wrt, seed)

    def gradient_structure(self, fn: Callable, args: Sequence[Any], wrt: Sequence[int]) -> list[dict[str, Any]]:
        return gradient_structure(fn, args, wrt)

    def unsupported(self, x: Any, output: bool = False) -> tuple[str, str] | None:
        if x.layout != torch.strided:
            if output:
                fix = (
                    "return it dense (out.to_dense()), or check its specified values alone "
                    "(out.values(); a COO tensor coalesced first)"
                )
            else:
                fix = "densify it first (x.to_dense()); fn may take it back with x.to_sparse()"
            return f"a tensor of layout {x.layout}", fix
        if x.dtype == torch.complex32:
            return (
                "a complex32 tensor (complex half: no array type to read it into)",
                "return out.to(torch.complex64) from fn" if output else "pass x.to(torch.complex64)",
            )
        if x.device.type == "meta":
            return (
                "a tensor on the meta device (a shape with no values)",
                "materialise it with values, e.g. torch.randn_like(x, device='cpu')"
                if not output
                else "compute it on a device with values (fn returned a shape without them)",
            )
        return None

    def to_numpy(self, x: Any) -> np.ndarray:
        t = x.detach()
        if t.dtype in (torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2):
            t = t.float()
        # force: a derivative may come as torch's efficient zero tensor (no
        # storage; forward mode's zero tangents), or with a lazy conjugate
        return np.array(t.numpy(force=True), copy=True)

    def readback(self, x: Any, buffer: np.ndarray) -> np.ndarray:
        if x.device.type == "cpu" and x.data_ptr() == buffer.ctypes.data and x.numel() == buffer.size:
            return buffer  # the tensor is a view of buffer: in-place writes show there
        return self.to_numpy(x)

    stages_rows = True

    def copies_where_held(self, args: Sequence[Any]) -> bool:
        # (on the CPU a tensor made from a host array shares its memory: nothing
        # crosses, and numpy's copy costs less than torch's)
        return HOLD_ON_CPU or any(a.device.type != "cpu" for a in args if isinstance(a, torch.Tensor))

    def copy_of(self, original: Any, dtype_name: str) -> Any:
        copy = original.detach().to(dtype=getattr(torch, dtype_name), copy=True, memory_format=torch.contiguous_format)
        return copy.as_subclass(torch.Tensor)  # (a plain tensor, as one made from the host's copy is)

    def from_numpy(self, a: np.ndarray, like: Any, dtype_name: str) -> Any:
        dtype = getattr(torch, dtype_name)
        # ascontiguousarray makes 0-d arrays 1-d: put the shape back.
        t = torch.from_numpy(np.ascontiguousarray(a).reshape(np.shape(a)))
        return t.to(device=like.device, dtype=dtype)

    def float64_on_device(self, args: Sequence[Any]) -> str | None:
        lacking = sorted({a.device.type for a in args if a.device.type == "mps"})
        return f"torch has no float64 on {lacking[0]}" if lacking else None

    def to_working(self, x: Any, copy: bool = True) -> Any:
        t = x.detach()
        if t.is_floating_point():
            return t.to(torch.float64, copy=copy)
        return t.clone() if copy else t

    def from_working(self, a: Any, like: Any, dtype_name: str, copy: bool = True) -> Any:
        return a.to(device=like.device, dtype=getattr(torch, dtype_name), copy=copy)

    def derivative(self, d: Any) -> Any:
        if d._is_zerotensor():  # (no storage to compute with)
            return torch.zeros(d.shape, dtype=torch.float64, device=d.device)
        return d.detach().to(torch.float64)

    def reduced_precision(self, args: Sequence[Any]) -> list[tuple[str, str]]:
        if not any(a.dtype == torch.float32 for a in args):
            return []
        notes = []
        level = torch.get_float32_matmul_precision()
        if level != "highest":
            notes.append(
                (
                    f"float32 matmuls run at precision {level!r} (torch.set_float32_matmul_precision): "
                    + ("bfloat16 passes" if level == "medium" else "TF32 where the hardware has it")
                    + "; low-precision AD is judged against its float64 run",
                    "bfloat16" if level == "medium" else "tf32",
                )
            )
        if any(a.device.type == "cuda" for a in args):
            if level == "highest" and torch.backends.cuda.matmul.allow_tf32:
                notes.append(("CUDA float32 matmuls run in TF32 (torch.backends.cuda.matmul.allow_tf32)", "tf32"))
            if torch.backends.cudnn.allow_tf32:
                notes.append(("cuDNN float32 convolutions run in TF32 (torch.backends.cudnn.allow_tf32)", "tf32"))
        return notes

    def jvp(self, fn: Callable, args: Sequence[Any], wrt: Sequence[int], tangents: Sequence[Any]) -> Any:
        try:
            with fwAD.dual_level():
                inputs = list(args)
                for i, t in zip(wrt, tangents):
                    inputs[i] = fwAD.make_dual(args[i], t)
                out = fn(*inputs)
                _require_tensor(out)
                tangent = fwAD.unpack_dual(out).tangent
                result = torch.zeros_like(out) if tangent is None else tangent.clone()
        except NotImplementedError as e:
            # torch's words for "this autograd.Function (or op) has no forward-mode rule"
            raise ModeUnavailable(f"torch forward-mode AD: {e}") from e
        except RuntimeError as e:
            # forward-over-forward (order=2): a limitation of torch, not of fn
            if "Nested forward mode AD is not supported" in str(e):
                raise ModeUnavailable(f"torch: {e}") from e
            raise
        return result

    _reached: list[Any] | None = None  # (set within ``reaching``)

    @contextlib.contextmanager
    def reaching(self, found: list[Any]) -> Iterator[None]:
        self._reached = found
        try:
            yield
        finally:
            self._reached = None

    def vjp(self, fn: Callable, args: Sequence[Any], wrt: Sequence[int], cotangent: Any) -> list[Any]:
        inputs, grads = _pullback(fn, args, wrt, cotangent, batched=False, reached=self._reached)
        if grads is None:
            # fn cut every input out of the graph: its reverse-mode gradient is zero.
            return [torch.zeros_like(inputs[i]) for i in wrt]
        return [g if g is not None else torch.zeros_like(inputs[i]) for g, i in zip(grads, wrt)]

    def forward_unavailable(self, fn: Callable) -> str | None:
        owner = _function_of(fn)
        if owner is not None and owner.jvp is torch.autograd.Function.jvp:
            # (torch's words, which it says only after running the Function's forward)
            return (
                "torch forward-mode AD: You must implement the jvp function for custom autograd.Function "
                "to use it with forward mode AD."
            )
        return None

    def vectorises(self, fn: Callable) -> bool:
        # An autograd.Function's apply runs under torch.func only with a
        # setup_context, and under vmap only with a vmap rule (its own, or
        # generate_vmap_rule=True): torch raises otherwise, whatever the inputs.
        owner = _function_of(fn)
        if owner is None:
            return True
        if owner.setup_context is torch.autograd.Function.setup_context:
            return False
        return bool(owner.generate_vmap_rule) or owner.vmap is not torch.autograd.Function.vmap

    def jvps(self, fn: Callable, args: Sequence[Any], wrt: Sequence[int], tangents: Sequence[Any]) -> Any:
        # torch.func's jvp under vmap: an autograd.Function takes part only
        # where it supports torch.func (setup_context, and a vmap rule).
        def along(*ts: Any) -> Any:
            out = torch.func.jvp(on_wrt(fn, args, wrt), tuple(args[i] for i in wrt), ts)[1]
            _require_tensor(out)
            return out

        return torch.func.vmap(along)(*tangents)

    def primals(self, fn: Callable, args: Sequence[Any], wrt: Sequence[int], points: Sequence[Any]) -> Any:
        # (randomness inside fn makes vmap raise: then one point at a time)
        def at(*w: Any) -> Any:
            out = on_wrt(fn, args, wrt)(*w)
            _require_tensor(out)
            return out

        with torch.no_grad():
            return torch.func.vmap(at)(*points)

    def vjps(self, fn: Callable, args: Sequence[Any], wrt: Sequence[int], cotangents: Any) -> list[Any]:
        inputs, grads = _pullback(fn, args, wrt, cotangents, batched=True, reached=self._reached)
        if grads is None:
            k = cotangents.shape[0]
            return [torch.zeros((k, *inputs[i].shape), dtype=inputs[i].dtype, device=inputs[i].device) for i in wrt]
        return list(grads)

    no_batching = None

    def as_real(self, z: Any) -> Any:
        # (a conjugate view's .imag is a negative view, which has no batching
        # rule: the view is resolved first, as any operation on it would)
        z = z.resolve_conj().resolve_neg()
        return torch.stack([z.real, z.imag], dim=-1)

    def as_complex(self, a: Any) -> Any:
        # (not torch.complex(re, im): its backward takes .imag of the incoming
        # gradient, a conjugate view wherever fn conjugates, which has no
        # batching rule; view_as_complex's backward resolves the view)
        return torch.view_as_complex(a.contiguous())

    def batched_jvp(
        self, fn: Callable, args: Sequence[Any], wrt: Sequence[int], points: Sequence[Any], tangents: Sequence[Any]
    ) -> Any:
        k = len(wrt)

        def one(*parts: Any) -> Any:
            out = torch.func.jvp(on_wrt(fn, args, wrt), tuple(parts[:k]), tuple(parts[k:]))[1]
            _require_tensor(out)
            return out

        return torch.func.vmap(one)(*points, *tangents)

    def batched_vjp(
        self, fn: Callable, args: Sequence[Any], wrt: Sequence[int], points: Sequence[Any], cotangents: Any
    ) -> list[Any]:
        def one(*parts: Any) -> Any:
            out, pullback = torch.func.vjp(on_wrt(fn, args, wrt), *parts[:-1])
            _require_tensor(out)
            return pullback(parts[-1].to(out.dtype))

        return list(torch.func.vmap(one)(*points, cotangents))

    def vjp_function(self, fn: Callable, wrt: Sequence[int], cotangent: Any) -> Callable:
        def vjp_of_fn(*args: Any) -> Any:
            # Differentiate through a zero offset rather than the arguments
            # themselves, so the result stays differentiable whatever the caller
            # made of args (leaves, dual tensors, plain tensors).
            with torch.enable_grad():
                offsets = [torch.zeros_like(args[i], requires_grad=True) for i in wrt]
                inputs = list(args)
                for i, z in zip(wrt, offsets):
                    inputs[i] = args[i] + z
                out = fn(*inputs)
                grads = torch.autograd.grad(out, offsets, cotangent.to(out.dtype), create_graph=True, allow_unused=True)
            return self.concat_flat([g if g is not None else torch.zeros_like(z) for g, z in zip(grads, offsets)])

        return vjp_of_fn

    def jvp_function(self, fn: Callable, wrt: Sequence[int], tangents: Sequence[Any]) -> Callable:
        def jvp_of_fn(*args: Any) -> Any:
            primals = tuple(args[i] for i in wrt)
            tans = tuple(t.to(p.dtype) for t, p in zip(tangents, primals))
            return torch.func.jvp(on_wrt(fn, args, wrt), primals, tans)[1]

        return jvp_of_fn

    def concat_flat(self, parts: Sequence[Any]) -> Any:
        return torch.cat([p.reshape(-1) for p in parts])


def _function_of(fn: Callable) -> type | None:
    """The ``autograd.Function`` whose ``apply`` fn is (None: fn is something else)."""
    owner = getattr(fn, "__self__", None)
    if not (isinstance(owner, type) and issubclass(owner, torch.autograd.Function)):
        return None
    if getattr(fn, "__func__", None) is not getattr(torch.autograd.Function.apply, "__func__", None):
        return None  # (some other classmethod)
    return owner


def _require_tensor(out: Any) -> None:
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"fn returned {type(out).__name__}, expected one torch.Tensor")


def _pullback(
    fn: Callable,
    args: Sequence[Any],
    wrt: Sequence[int],
    cotangent: Any,
    batched: bool,
    reached: list[Any] | None = None,
) -> tuple[list[Any], tuple[Any, ...] | None]:
    """fn's leaf inputs and its input cotangents for ``cotangent`` (a stack of
    them when ``batched``); None when fn cut every input out of the graph.
    ``reached`` (a list) receives the leaves of the graph that are not
    fn's arguments: tensors requiring grad that fn closes over."""
    inputs = list(args)
    for i in wrt:
        inputs[i] = args[i].detach().requires_grad_(True)
    with torch.enable_grad():
        out = fn(*inputs)
    _require_tensor(out)
    if not out.requires_grad:
        return inputs, None
    if reached is not None:
        reached.extend(_leaves_outside(out, inputs))
    grads = torch.autograd.grad(
        out,
        [inputs[i] for i in wrt],
        grad_outputs=cotangent.to(out.dtype),
        allow_unused=True,
        is_grads_batched=batched,
    )
    return inputs, grads


def _nodes(out: Any, forward: bool = False) -> Iterator[Any]:
    """Each node of out's graph once, depth first from out (``forward``: a
    node's inputs in their own order, else the last first)."""
    seen: set[int] = set()
    stack = [out.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        yield node
        edges = [n for n, _ in node.next_functions]
        stack.extend(edges[::-1] if forward else edges)


def _leaves_outside(out: Any, inputs: Sequence[Any]) -> list[Any]:
    """The leaf tensors of out's graph (its ``AccumulateGrad`` nodes) that
    are none of ``inputs``, in the order a walk from out meets them."""
    given = {id(t) for t in inputs if isinstance(t, torch.Tensor)}
    leaves = (getattr(node, "variable", None) for node in _nodes(out, forward=True))  # (AccumulateGrad: a leaf)
    return [v for v in leaves if isinstance(v, torch.Tensor) and id(v) not in given]


def gradient_structure(fn: Callable, args: Sequence[Any], wrt: Sequence[int]) -> list[dict[str, Any]]:
    """What each ``autograd.Function`` in fn's graph returned from its backward
    before torch's engine saw it: every gradient whose dtype, device, shape
    or layout is not its input's. (The engine casts a wrong dtype silently
    and raises on a wrong shape or device in words that name neither the
    function nor fn's argument.) Each backward runs twice: once read here,
    once by the engine."""
    # (fresh copies, as every call of fn gets: fn may write its inputs; each
    # keeps whether the caller's requires grad, and its layout)
    inputs = [a.detach().clone().requires_grad_(a.requires_grad) if isinstance(a, torch.Tensor) else a for a in args]
    leaves: dict[int, int] = {}
    for i in wrt:
        inputs[i] = args[i].detach().clone().requires_grad_(True)
        leaves[id(inputs[i])] = i
    with torch.enable_grad():
        out = fn(*inputs)
    if not isinstance(out, torch.Tensor) or not out.requires_grad:
        return []
    found: list[dict[str, Any]] = []
    handles = [
        node.register_prehook(_reader(node, found, leaves))
        for node in _nodes(out)
        if isinstance(node, torch.autograd.function.BackwardCFunction)
    ]
    if not handles:
        return []
    cotangent = torch.where(torch.isfinite(out.detach()), torch.ones_like(out), 0) if out.is_floating_point() else None
    try:
        torch.autograd.grad(out, [inputs[i] for i in wrt], cotangent, allow_unused=True)
    except RuntimeError:
        pass  # (the engine's own refusal: what was read before it says more)
    finally:
        for h in handles:
            h.remove()
    return found


def _reader(node: Any, found: list[dict[str, Any]], leaves: dict[int, int]) -> Callable:
    cls = getattr(node, "_forward_cls", None)
    name = cls.__name__ if cls is not None else type(node).__name__.removesuffix("Backward")

    def read(grad_outputs: tuple[Any, ...]) -> None:
        with torch.no_grad():
            raw = node.apply(*grad_outputs)
        raw = raw if isinstance(raw, tuple) else (raw,)
        # raw has one gradient per forward input, next_functions one edge per
        # tensor input: the k-th input that needs a gradient has the k-th edge
        # with a function (the others are constants: nothing to read)
        needs = [k for k, b in enumerate(node.needs_input_grad) if b]
        edges = [e for e in node.next_functions if e[0] is not None]
        if len(needs) != len(edges) or len(raw) != len(node.needs_input_grad):
            return  # (a graph this reading cannot pair up: left to the engine's own words)
        for k, (nxt, nr) in zip(needs, edges):
            g = raw[k]
            if not isinstance(g, torch.Tensor):
                continue
            argument = None
            if type(nxt).__name__ == "AccumulateGrad":
                v = nxt.variable
                expected = (v.dtype, v.device, tuple(v.shape), v.layout)
                argument = leaves.get(id(v))
            else:
                md = nxt._input_metadata[nr]
                expected = (md.dtype, md.device, tuple(md.shape), None)
            shape = tuple(g.shape)
            reducible = _broadcasts(expected[2], shape)  # (torch sums such a gradient down: not wrong)
            for what, got, want in (
                ("dtype", g.dtype, expected[0]),
                ("device", g.device, expected[1]),
                ("shape", shape, None if reducible else expected[2]),
                ("layout", g.layout, expected[3]),
            ):
                if want is not None and got != want:
                    found.append(
                        {
                            "function": name,
                            "index": k,
                            "argument": argument,
                            "what": what,
                            "found": got,
                            "expected": want,
                        }
                    )

    return read


def _broadcasts(shape: tuple[int, ...], to: tuple[int, ...]) -> bool:
    try:
        return tuple(torch.broadcast_shapes(shape, to)) == to
    except RuntimeError:
        return False
