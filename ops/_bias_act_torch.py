"""The fused torch bias_act: an ``autograd.Function`` with ``backward`` and
``jvp`` in the ``setup_context`` style (so ``torch.func`` transforms work),
keeping only the output where the derivative is a function of it, else x + b."""

from __future__ import annotations

from typing import Any

import torch

from gradverify._errors import ArgumentValueError, explain

from . import _xp
from ._bias_act import _bias_axes
from ._table import Activation, output_rule


class BiasAct(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(x: torch.Tensor, b: torch.Tensor | None, act: Activation) -> torch.Tensor:
        xp = _xp.namespace(x)
        z = x if b is None else x + b
        y = act.forward(xp, z, **act.params)
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
        # Keep the output when the derivative is a function of it; otherwise
        # z = x + b (recomputed here, never x alone: that was the seed's bug).
        saved = output if ctx.from_y is not None else (x if b is None else x + b)
        ctx.save_for_backward(saved)
        ctx.save_for_forward(saved)

    @staticmethod
    def _slope(ctx: Any, saved: torch.Tensor) -> torch.Tensor:
        act, p = ctx.act, ctx.act.params
        xp = _xp.namespace(saved)
        if ctx.from_y is not None:
            return ctx.from_y(xp, saved, **p)
        return act.derivative(xp, saved, act.forward(xp, saved, **p), **p)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple:
        (saved,) = ctx.saved_tensors
        gz = g * BiasAct._slope(ctx, saved)
        gx = gz.to(ctx.x_dtype) if ctx.needs_input_grad[0] else None
        gb = None
        if ctx.b_shape is not None and ctx.needs_input_grad[1]:
            axes = _bias_axes(tuple(gz.shape), tuple(ctx.b_shape))
            gb = (gz.sum(dim=axes) if axes else gz).reshape(ctx.b_shape).to(ctx.b_dtype)
        return gx, gb, None

    @staticmethod
    def jvp(ctx: Any, tx: torch.Tensor | None, tb: torch.Tensor | None, _act: Any) -> torch.Tensor:
        (saved,) = ctx.saved_tensors
        t = tx if tb is None else (tb if tx is None else tx + tb)
        return BiasAct._slope(ctx, saved) * t


def fused(act: Activation, x: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    return BiasAct.apply(x, b, act)


def fused_(act: Activation, x: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    """In place, like NNlib's bias_act!; refuses a leaf that requires grad."""
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
        return x.copy_(act.forward(_xp.namespace(x), x, **act.params))
