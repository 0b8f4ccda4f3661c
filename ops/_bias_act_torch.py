"""The fused torch bias_act: an ``autograd.Function`` with ``backward`` and
``jvp`` in the ``setup_context`` style (so ``torch.func`` transforms work).

What it keeps for the gradient, smallest first:

* a slope with two values read from the output (relu, relu6, hardtanh,
  hardsigmoid, softshrink): one bit per element, packed (a bool per element
  where the tensor cannot go through numpy: other devices, functorch wrappers);
* a derivative that is a function of the output: the output;
* otherwise z = x + b, never x alone (NNlib's seed bug evaluated swish' at x).

The forward value comes from torch's own kernel where the table names one
with the same function and parameters (one pass, in place for ``bias_act_``),
else from the table's formula.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from gradverify._errors import ArgumentValueError, explain

from . import _xp
from ._table import Activation, activation, output_rule

# torch.nn.functional names whose function takes ``inplace=True``
_F_INPLACE = {"relu", "relu6", "hardtanh", "elu", "selu", "celu", "hardswish", "silu", "mish", "hardsigmoid"}
# Tensor methods that work in place
_METHOD_INPLACE = {"tanh": "tanh_", "sigmoid": "sigmoid_"}


def _native(act: Activation) -> Any:
    """torch's kernel for this activation, when the table names one and the
    parameters are the table's defaults (the same function); else None."""
    if act.torch is None or act.params != activation(act.name).params:
        return None
    return getattr(F, act.torch)


def _native_inplace(act: Activation) -> Any:
    if _native(act) is None:
        return None
    if act.torch in _METHOD_INPLACE:
        return lambda t: getattr(t, _METHOD_INPLACE[act.torch])()
    if act.torch in _F_INPLACE:
        f = getattr(F, act.torch)
        return lambda t: f(t, inplace=True)
    return None


def _forward(act: Activation, z: torch.Tensor) -> torch.Tensor:
    native = _native(act)
    return native(z) if native is not None else act.forward(_xp.namespace(z), z, **act.params)


def _plain(t: torch.Tensor) -> bool:
    """A tensor with storage of its own: no functorch wrapper, no autograd history to keep."""
    return type(t) is torch.Tensor and not torch._C._functorch.is_functorch_wrapped_tensor(t) and not t.requires_grad


def _plain_cpu(t: torch.Tensor) -> bool:
    return t.device.type == "cpu" and _plain(t)


# torch's kernels for g * slope(y) where the table's output rule is the same
# formula (tanh: 1 - y^2, sigmoid: y (1 - y)): one pass instead of three.
_NATIVE_TIMES_SLOPE = {"tanh": torch.ops.aten.tanh_backward, "sigmoid": torch.ops.aten.sigmoid_backward}


def _pack(mask: torch.Tensor) -> tuple[torch.Tensor, bool]:
    """(saved tensor, packed?): 8 mask elements a byte where numpy can pack them."""
    if _plain_cpu(mask):
        return torch.from_numpy(np.packbits(mask.numpy().reshape(-1))), True
    return mask, False


def _unpack(saved: torch.Tensor, packed: bool, shape: torch.Size) -> torch.Tensor:
    if not packed:
        return saved
    n = int(np.prod(shape))
    return torch.from_numpy(np.unpackbits(saved.numpy(), count=n).view(np.bool_).reshape(tuple(shape)))


class BiasAct(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(x: torch.Tensor, b: torch.Tensor | None, act: Activation) -> torch.Tensor:
        z = x if b is None else x + b
        y = _forward(act, z)
        # identity without a bias returns its input: autograd.Function may not
        # save that as its output, and a view breaks forward mode; copy it.
        return y.clone() if y is x else y

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: torch.Tensor) -> None:
        x, b, act = inputs
        ctx.act = act
        ctx.from_y = output_rule(act)
        ctx.x_dtype = x.dtype
        ctx.b_shape = None if b is None else b.shape
        ctx.b_dtype = None if b is None else b.dtype
        ctx.shape = output.shape
        ctx.packed = None
        if act.mask is not None:
            mask = act.mask(_xp.namespace(output), output.detach(), **act.params)
            saved, ctx.packed = _pack(mask)
        elif ctx.from_y is not None:
            saved = output
        else:
            saved = x if b is None else x + b  # z, recomputed; never x alone with a bias
        ctx.save_for_backward(saved)
        ctx.save_for_forward(saved)

    @staticmethod
    def _slope(ctx: Any, saved: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        act, p = ctx.act, ctx.act.params
        if ctx.packed is not None:
            hi, lo = act.mask_slopes
            m = _unpack(saved, ctx.packed, ctx.shape).to(device=saved.device, dtype=dtype)
            if lo == 0:
                return m if hi == 1 else m * hi
            return m * (hi - lo) + lo
        xp = _xp.namespace(saved)
        if ctx.from_y is not None:
            return ctx.from_y(xp, saved, **p)
        return act.derivative(xp, saved, act.forward(xp, saved, **p), **p)

    @staticmethod
    def _times_slope(ctx: Any, saved: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """t * slope: torch's fused kernel for the same formula where there is
        one, else in the slope's own fresh buffer when autograd does not
        record (one full-size allocation fewer)."""
        native = _NATIVE_TIMES_SLOPE.get(ctx.act.name) if ctx.packed is None and ctx.from_y is not None else None
        if native is not None and t.dtype == saved.dtype:
            return native(t, saved)
        slope = BiasAct._slope(ctx, saved, t.dtype)
        if (
            not torch.is_grad_enabled()
            and _plain(slope)
            and _plain(t)
            and _plain(saved)
            and slope.shape == t.shape
            and slope.dtype == t.dtype
            and slope.untyped_storage().data_ptr() != saved.untyped_storage().data_ptr()
        ):
            return slope.mul_(t)
        return slope * t

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple:
        (saved,) = ctx.saved_tensors
        gz = BiasAct._times_slope(ctx, saved, g)
        gx = gz.to(ctx.x_dtype) if ctx.needs_input_grad[0] else None
        gb = None
        if ctx.b_shape is not None and ctx.needs_input_grad[1]:
            axes = _xp.broadcast_axes(tuple(gz.shape), tuple(ctx.b_shape))
            gb = (gz.sum(dim=axes) if axes else gz).reshape(ctx.b_shape).to(ctx.b_dtype)
        return gx, gb, None

    @staticmethod
    def jvp(ctx: Any, tx: torch.Tensor | None, tb: torch.Tensor | None, _act: Any) -> torch.Tensor:
        (saved,) = ctx.saved_tensors
        t = tx if tb is None else (tb if tx is None else tx + tb)
        return BiasAct._times_slope(ctx, saved, t)


def _untracked(t: torch.Tensor | None) -> bool:
    """No derivative of t can be asked for: a plain tensor outside autograd's
    and forward mode's view (no grad required, no tangent, no functorch wrapper)."""
    if t is None:
        return True
    return (
        type(t) is torch.Tensor
        and not torch._C._functorch.is_functorch_wrapped_tensor(t)
        and not (t.requires_grad and torch.is_grad_enabled())
        and torch.autograd.forward_ad.unpack_dual(t).tangent is None
    )


def fused(act: Activation, x: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    if _untracked(x) and _untracked(b):  # inference: nothing to save
        y = _forward(act, x if b is None else x + b)
        return y.clone() if y is x else y
    return BiasAct.apply(x, b, act)


def fused_(act: Activation, x: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    """In place, like NNlib's bias_act!; refuses a leaf that requires grad.
    Without autograd, x + b and the activation run in x's memory (torch's
    in-place kernel where there is one): nothing is allocated."""
    if x.is_leaf and x.requires_grad and torch.is_grad_enabled():
        raise ArgumentValueError(
            explain(
                "bias_act_(x)",
                "a tensor that may be overwritten",
                "a leaf tensor that requires grad (autograd needs its value)",
                "use y = bias_act(activation, x, b, impl='fused'), or run under torch.no_grad()",
            )
        )
    if torch.is_grad_enabled() and (x.requires_grad or (b is not None and b.requires_grad)):
        return x.copy_(fused(act, x, b))
    with torch.no_grad():
        if b is not None:
            x.add_(b)
        inplace = _native_inplace(act)
        if inplace is not None:
            inplace(x)
            return x
        return x.copy_(act.forward(_xp.namespace(x), x, **act.params))
