"""The fused torch normalization: one ``autograd.Function`` (``setup_context``
style, so ``torch.func`` transforms work) for every layer, keeping only the
normalized input xhat, the inverse standard deviation rstd and the weight.

xhat and rstd are returned as (hidden) outputs rather than saved as
intermediates: autograd then differentiates through them, so the backward,
written in torch operations, is itself differentiable (double backward,
forward-over-reverse). The backward therefore also takes the cotangents of
xhat and rstd, which are nonzero only inside a higher-order derivative.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from . import _norm_fused as nf, _xp


def _param(p: Any, spec: nf.Spec) -> Any:
    return p if p is None or spec.param is None else p.reshape(spec.param)


def _statistics(x: torch.Tensor, spec: nf.Spec, fixed: Any) -> tuple:
    """nf.statistics with as few full-size temporaries as torch allows: the
    centred input is the one buffer, normalized in place into xhat."""
    sd = torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype
    xs = x.to(sd)
    xg = xs if spec.group is None else xs.reshape(spec.group)
    mean = None
    if fixed is not None:
        mean, var = (s.to(sd).reshape(spec.param) for s in fixed)
        c = xg - mean
    elif spec.centred:
        mean = xg.mean(spec.axes, keepdim=True)
        c = xg - mean
        var = _mean_square(c, spec.axes)
    else:
        c = None
        var = _mean_square(xg, spec.axes)
    rstd = torch.rsqrt(var + spec.eps)
    xhat = xg * rstd if c is None else c.mul_(rstd)
    return xhat.reshape(x.shape).to(x.dtype), rstd, mean, var


def _mean_square(a: torch.Tensor, axes: tuple[int, ...]) -> torch.Tensor:
    """mean(a * a) over axes, keepdims; over trailing axes through the norm
    kernel, which needs no temporary (measured 5x faster on CPU)."""
    if axes == tuple(range(a.ndim - len(axes), a.ndim)):
        n = torch.linalg.vector_norm(a, dim=axes, keepdim=True)
        return n * n / math.prod(a.shape[k] for k in axes)
    return (a * a).mean(axes, keepdim=True)


def _affine(xhat: torch.Tensor, w: Any, b: Any, spec: nf.Spec) -> torch.Tensor:
    w, b = _param(w, spec), _param(b, spec)
    if w is not None and b is not None:
        return torch.addcmul(b, xhat, w)
    if w is not None:
        return xhat * w
    if b is not None:
        return xhat + b
    return xhat.clone()  # y is a separate output from xhat


def _group_means(
    gs: torch.Tensor, xh: torch.Tensor, pg: torch.Tensor, w: Any, spec: nf.Spec
) -> tuple[Any, torch.Tensor]:
    """(mean(g w), mean(g w xhat)) per group, from g, xhat and pg = g * xhat
    in x's shape, without forming g * w * xhat where the weight allows: constant
    within each group (batch, instance norm) it factors out; spanning the
    reduced trailing axes (layer, rms norm) it is a matrix-vector product;
    across groups of several channels (group norm) the product is formed once."""
    grouped = (lambda a: a) if spec.group is None else (lambda a: a.reshape(spec.group))
    gg, pgg = grouped(gs), grouped(pg)
    if w is None:
        return gg.mean(spec.axes, keepdim=True), pgg.mean(spec.axes, keepdim=True)
    if spec.group is None and spec.param is not None and all(spec.param[k] == 1 for k in spec.axes):
        wv = w.reshape(spec.param).to(gg.dtype)
        return wv * gg.mean(spec.axes, keepdim=True), wv * pgg.mean(spec.axes, keepdim=True)
    trailing = spec.axes == tuple(range(gg.ndim - len(spec.axes), gg.ndim))
    if spec.group is None and spec.param is None and trailing and tuple(w.shape) == tuple(gg.shape[-w.ndim :]):
        m = math.prod(gg.shape[k] for k in spec.axes)
        wf = w.reshape(-1).to(gg.dtype)
        keep = (*gg.shape[: gg.ndim - len(spec.axes)], *([1] * len(spec.axes)))
        return (gg.reshape(-1, m) @ wf).reshape(keep) / m, (pg.reshape(-1, m) @ wf).reshape(keep) / m
    weighted = gs * _param(w, spec).to(gs.dtype)
    m1 = grouped(weighted).mean(spec.axes, keepdim=True)
    return m1, grouped(weighted.mul_(xh)).mean(spec.axes, keepdim=True)


def _cotangents(xhat: torch.Tensor, rstd: torch.Tensor, w: Any, b_meta: Any, g: torch.Tensor, spec: nf.Spec) -> tuple:
    """nf.cotangents for first-order backward (grad mode off): the same
    formulas with the fewest passes: g * xhat is formed once (it gives the
    weight's gradient and the group means), the input's gradient is built in
    one buffer updated in place."""
    sd = rstd.dtype
    gs, xh = g.to(sd), xhat.to(sd)
    gw = gb = None
    pg = None if spec.fixed and w is None else gs * xh
    if w is not None:
        axes = _xp.broadcast_axes(tuple(g.shape), tuple(_param(w, spec).shape))
        gw = (pg.sum(axes) if axes else pg).reshape(w.shape).to(w.dtype)
    if b_meta is not None:
        bshape = tuple(b_meta[0]) if spec.param is None else spec.param
        axes = _xp.broadcast_axes(tuple(g.shape), bshape)
        gb = (g.sum(axes) if axes else g).reshape(b_meta[0]).to(b_meta[1])
    gx = gs * _param(w, spec).to(sd) if w is not None else gs.clone()
    gg = gx if spec.group is None else gx.reshape(spec.group)
    if spec.fixed:
        gg.mul_(rstd)
        return gx.to(xhat.dtype), gw, gb
    m1, m2 = _group_means(gs, xh, pg, w, spec)
    if spec.centred:
        gg.sub_(m1)
    gg.addcmul_(xh if spec.group is None else xh.reshape(spec.group), m2, value=-1).mul_(rstd)
    return gx.to(xhat.dtype), gw, gb


class Normalize(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(x: torch.Tensor, w: Any, b: Any, fm: Any, fv: Any, spec: nf.Spec) -> tuple:
        xhat, rstd, mean, var = _statistics(x, spec, (fm, fv) if spec.fixed else None)
        y = _affine(xhat, w, b, spec)
        empty = rstd.new_empty(0)
        stats = (empty, empty.clone()) if spec.fixed else (empty if mean is None else mean.detach(), var.detach())
        return y, xhat, rstd, *stats

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, outputs: tuple) -> None:
        x, w, b, _fm, _fv, spec = inputs
        _, xhat, rstd, mean, var = outputs
        ctx.mark_non_differentiable(mean, var)
        ctx.set_materialize_grads(False)
        ctx.spec = spec
        ctx.b_meta = None if b is None else (b.shape, b.dtype)
        ctx.save_for_backward(xhat, rstd, w)
        ctx.save_for_forward(xhat, rstd, w)

    @staticmethod
    def backward(ctx: Any, gy: Any, gxhat: Any, grstd: Any, _gm: Any, _gv: Any) -> tuple:
        xhat, rstd, w = ctx.saved_tensors
        spec = ctx.spec
        xp = _xp.namespace(xhat)
        gx = gw = gb = None
        if gy is not None and not torch.is_grad_enabled():
            gx, gw, gb = _cotangents(xhat, rstd, w, ctx.b_meta, gy, spec)
        elif gy is not None:  # create_graph: the differentiable formulas
            b = torch.empty(ctx.b_meta[0], dtype=ctx.b_meta[1], device=xhat.device) if ctx.b_meta else None
            gx, gw, gb = nf.cotangents(xp, xhat, rstd, w, b, gy, spec)
        if gxhat is not None:  # only inside higher-order derivatives
            extra = nf.project(xp, xhat, rstd, gxhat, spec)
            gx = extra if gx is None else gx + extra
        if grstd is not None and not spec.fixed:
            # d rstd / dx = -rstd^2 * xhat / M per group
            xh = nf._grouped(xp, xhat.to(rstd.dtype), spec)
            m = xh.numel() // rstd.numel()
            extra = (-(grstd * rstd * rstd) * xh / m).reshape(xhat.shape).to(xhat.dtype)
            gx = extra if gx is None else gx + extra
        need = ctx.needs_input_grad
        return (gx if need[0] else None, gw if need[1] else None, gb if need[2] else None, None, None, None)

    @staticmethod
    def jvp(ctx: Any, tx: Any, tw: Any, tb: Any, _tm: Any, _tv: Any, _spec: Any) -> tuple:
        xhat, rstd, w = ctx.saved_tensors
        spec = ctx.spec
        xp = _xp.namespace(xhat)
        ty = nf.tangent(xp, xhat, rstd, w, tx, tw, tb, spec)
        if tx is None:
            txhat, trstd = torch.zeros_like(xhat), torch.zeros_like(rstd)
        else:
            txhat = nf.project(xp, xhat, rstd, tx, spec)
            trstd = nf.rstd_tangent(xp, xhat, rstd, tx, spec)
        return ty, txhat, trstd, None, None


def fused(x: torch.Tensor, w: Any, b: Any, fixed: Any, spec: nf.Spec) -> tuple:
    """(y, mean, var): the normalized output and the batch statistics (detached)."""
    fm, fv = (None, None) if fixed is None else fixed
    y, _xhat, _rstd, mean, var = Normalize.apply(x, w, b, fm, fv, spec)
    return y, mean, var
