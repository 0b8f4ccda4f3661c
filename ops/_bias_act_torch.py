"""The fused torch bias_act: an ``autograd.Function`` with ``backward`` and
``jvp`` in the ``setup_context`` style (so ``torch.func`` transforms work).

What it keeps for the gradient, smallest first:

* a constant slope (identity): nothing;
* a slope with two values read from the output (relu, relu6, hardtanh,
  hardsigmoid, softshrink; leakyrelu, rrelu and trelu for most parameters):
  one bit per element, packed on every device (a bool per element inside
  torch.func transforms);
* a derivative that is a function of the output: the output;
* otherwise z = x + b, never x alone (NNlib's seed bug evaluated swish' at x).

The forward value comes from torch's own kernel where the table names one
with the same function and parameters (one pass, in place for ``bias_act_``),
else from the table's formula. Where that function's own autograd is the rule
(see _table.TORCH_FUNCTION_IS_RULE), and for identity, the fused op is torch's autograd itself.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from gradverify._errors import ArgumentValueError, explain

from . import _xp
from ._table import (
    GELU_C,
    SQRT_2_OVER_PI,
    TORCH_FUNCTION_IS_RULE,
    Activation,
    activation,
    constant_slope,
    derivative_reads_output,
    in_table,
    output_rule,
    two_valued,
)

# torch.nn.functional names whose function takes ``inplace=True``
_F_INPLACE = {"relu", "relu6", "hardtanh", "elu", "selu", "celu", "hardswish", "silu", "mish", "hardsigmoid"}
# Tensor methods that work in place
_METHOD_INPLACE = {"tanh": "tanh_", "sigmoid": "sigmoid_"}


def _native(act: Activation) -> Any:
    """torch's kernel for this activation, when the table names one and the
    parameters are the table's defaults (the same function); else None."""
    if act.torch is None or not in_table(act) or act.params != activation(act.name).params:
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


_aten = torch.ops.aten
# g * f'(z) in torch's kernels where the rule is not itself differentiated:
# silu and mish (one pass; torch cannot differentiate these kernels in
# forward mode), elu and celu at the parameters torch's functions lack (one
# pass), and activations torch has no function for (a few passes instead of
# the table's forward and derivative formulas: the same expressions in
# torch's kernels). Where the rule is differentiated, the formulas are.
_NATIVE_TIMES_SLOPE_Z = {
    "swish": lambda g, z, p: _aten.silu_backward(g, z),
    "mish": lambda g, z, p: _aten.mish_backward(g, z),
    "elu": lambda g, z, p: _aten.elu_backward(g, p["alpha"], 1.0, 1.0, False, z),
    "celu": lambda g, z, p: _aten.elu_backward(g, p["alpha"], 1.0, 1.0 / p["alpha"], False, z),
    "gelu": lambda g, z, p: _gelu_tanh_times_slope(g, z),
    "lisht": lambda g, z, p: _lisht_times_slope(g, z),
    "tanhshrink": lambda g, z, p: _tanhshrink_times_slope(g, z),
}


def _gelu_tanh_times_slope(g: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """g (s + z s (1 - s) k (1 + 3 c z^2)), s = sigmoid(w), w = k z (1 + c z^2),
    k = 2 sqrt(2/pi): the table's formula with torch's sigmoid (1 - s as
    sigmoid(-w), no cancelling), in its own buffers (within 2 u of mpmath
    where the table's is)."""
    z2 = z * z
    w = (z2 * GELU_C).add_(1).mul_(z).mul_(2 * SQRT_2_OVER_PI)
    s = torch.sigmoid(w)
    s_neg = torch.sigmoid(w.neg_())
    return z2.mul_(3 * GELU_C).add_(1).mul_(2 * SQRT_2_OVER_PI).mul_(z).mul_(s_neg).mul_(s).add_(s).mul_(g)


def _lisht_times_slope(g: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """g (tanh z + z (1 - tanh^2 z)) in four passes (the formula's eight)."""
    t = torch.tanh(z)
    return torch.addcmul(_aten.tanh_backward(g * z, t), g, t)


def _tanhshrink_times_slope(g: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """g tanh^2 z in three passes."""
    t = torch.tanh(z)
    return t.mul_(t).mul_(g)


def _pack(mask: torch.Tensor) -> tuple[torch.Tensor, bool]:
    """(saved tensor, packed?): 8 mask elements a byte, first element in the
    high bit as numpy's packbits - by numpy on the CPU, by torch's bit
    operations on other devices; bools inside torch.func transforms, whose
    wrapped tensors change shape under vmap."""
    if _plain_cpu(mask):
        return torch.from_numpy(np.packbits(mask.numpy().reshape(-1))), True
    if _plain(mask):
        return pack_bits(mask), True
    return mask, False


def _unpack(saved: torch.Tensor, packed: bool, shape: torch.Size) -> torch.Tensor:
    if not packed:
        return saved
    n = int(np.prod(shape))
    if saved.device.type == "cpu":
        return torch.from_numpy(np.unpackbits(saved.numpy(), count=n).view(np.bool_).reshape(tuple(shape)))
    return unpack_bits(saved, n).reshape(tuple(shape))


def pack_bits(mask: torch.Tensor) -> torch.Tensor:
    """numpy.packbits of a bool tensor in torch operations (any device): uint8,
    ceil(n / 8) bytes, the first element in the high bit, zeros padding the
    last byte."""
    flat = mask.reshape(-1).to(torch.uint8)
    pad = (-flat.numel()) % 8
    if pad:
        flat = torch.cat([flat, flat.new_zeros(pad)])
    weights = torch.tensor([128, 64, 32, 16, 8, 4, 2, 1], dtype=torch.uint8, device=mask.device)
    return (flat.view(-1, 8) * weights).sum(dim=1, dtype=torch.uint8)


def unpack_bits(packed: torch.Tensor, n: int) -> torch.Tensor:
    """The first ``n`` bits of ``packed`` (see pack_bits) as a flat bool tensor."""
    shifts = torch.arange(7, -1, -1, dtype=torch.uint8, device=packed.device)
    return ((packed.unsqueeze(1) >> shifts) & 1).reshape(-1)[:n].to(torch.bool)


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
        ctx.constant = constant_slope(act)
        bits = two_valued(act)
        if ctx.constant is not None:
            return  # nothing to keep
        if bits is not None:
            mask_of, *ctx.slopes = bits
            if act.mask_z is not None:  # (y rounds onto a side: read z)
                with torch.no_grad():
                    z = x if b is None else x + b
                mask = act.mask_z(_xp.namespace(z), z, **act.params)
            else:
                mask = mask_of(_xp.namespace(output), output.detach(), **act.params)
            saved, ctx.packed = _pack(mask)
        elif ctx.from_y is not None:
            saved = output
        else:
            # x and b, z recomputed from them (never x alone with a bias): as
            # inputs, autograd and torch.func carry their derivatives into the
            # rule's own (order 2); a z made here would be a constant to them
            ctx.save_for_backward(x, b)
            ctx.save_for_forward(x, b)
            return
        ctx.save_for_backward(saved)
        ctx.save_for_forward(saved)

    @staticmethod
    def _kept(ctx: Any) -> torch.Tensor | None:
        """What the rule reads: the bits, the output, or z = x + b."""
        kept = ctx.saved_tensors
        if not kept:
            return None
        if len(kept) == 1:
            return kept[0]
        x, b = kept
        return x if b is None else x + b

    @staticmethod
    def _slope(ctx: Any, saved: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        act, p = ctx.act, ctx.act.params
        if ctx.packed is not None:
            hi, lo = ctx.slopes
            m = _unpack(saved, ctx.packed, ctx.shape).to(device=saved.device, dtype=dtype)
            if lo == 0:
                return m if hi == 1 else m * hi
            return m * (hi - lo) + lo
        xp = _xp.namespace(saved)
        if ctx.from_y is not None:
            return ctx.from_y(xp, saved, **p)
        y = act.forward(xp, saved, **p) if derivative_reads_output(act) else None
        return act.derivative(xp, saved, y, **p)

    @staticmethod
    def _times_slope(ctx: Any, saved: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """t * slope: torch's fused kernel for the same formula where there is
        one, else in the slope's own fresh buffer when autograd does not
        record (one full-size allocation fewer)."""
        if ctx.constant is not None:
            return t if ctx.constant == 1 else t * ctx.constant
        if ctx.packed is None and t.dtype == saved.dtype:
            # (where the rule is itself differentiated, the table's formulas are)
            if (
                ctx.from_y is None
                and ctx.act.name in _NATIVE_TIMES_SLOPE_Z
                and in_table(ctx.act)
                and not _differentiated(t, saved)
            ):
                return _NATIVE_TIMES_SLOPE_Z[ctx.act.name](t, saved, ctx.act.params)
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
        saved = BiasAct._kept(ctx)
        gz = BiasAct._times_slope(ctx, saved, g)
        gx = gz.to(ctx.x_dtype) if ctx.needs_input_grad[0] else None
        gb = None
        if ctx.b_shape is not None and ctx.needs_input_grad[1]:
            axes = _xp.broadcast_axes(tuple(gz.shape), tuple(ctx.b_shape))
            gb = (gz.sum(dim=axes) if axes else gz).reshape(ctx.b_shape).to(ctx.b_dtype)
        return gx, gb, None

    @staticmethod
    def jvp(ctx: Any, tx: torch.Tensor | None, tb: torch.Tensor | None, _act: Any) -> torch.Tensor:
        saved = BiasAct._kept(ctx)
        t = tx if tb is None else (tb if tx is None else tx + tb)
        return BiasAct._times_slope(ctx, saved, t)


def _differentiated(*ts: torch.Tensor) -> bool:
    """Whether what is computed from ``ts`` may itself be differentiated:
    autograd records, or one of them is tracked (see _untracked)."""
    return torch.is_grad_enabled() or not all(_untracked(t) for t in ts)


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
    if constant_slope(act) == 1:  # identity: x + b under autograd keeps nothing
        return x.clone() if b is None else x + b
    if act.name in TORCH_FUNCTION_IS_RULE and _native(act) is not None:  # (a table row: see _native)
        return _native(act)(x if b is None else x + b)
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
        # the rule keeps its input, and x is overwritten: hand it z out of place
        return x.copy_(fused(act, x.clone() if b is None else x + b, None))
    with torch.no_grad():
        if b is not None:
            x.add_(b)
        inplace = _native_inplace(act)
        if inplace is not None:
            inplace(x)
            return x
        return x.copy_(act.forward(_xp.namespace(x), x, **act.params))
