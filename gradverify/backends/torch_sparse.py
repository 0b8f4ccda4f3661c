"""Sparse torch tensors (COO, CSR, CSC, BSR, BSC) as their specified values.

A sparse argument is checked as a function of its values with its pattern
held fixed (gradcheck's ``masked=True``): :class:`TorchSparse` splits a
tensor into its values and a ``rebuild`` that puts values back into the
pattern through torch's own differentiable constructors, so fn's backward
reaches the values through them. A sparse output is read the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from .base import SparseArray

__all__ = ["LAYOUTS", "TorchSparse", "gradients"]

LAYOUTS = {
    torch.sparse_coo: "sparse_coo",
    torch.sparse_csr: "sparse_csr",
    torch.sparse_csc: "sparse_csc",
    torch.sparse_bsr: "sparse_bsr",
    torch.sparse_bsc: "sparse_bsc",
}
_COMPRESSED = {
    torch.sparse_csr: ("crow_indices", "col_indices"),
    torch.sparse_csc: ("ccol_indices", "row_indices"),
    torch.sparse_bsr: ("crow_indices", "col_indices"),
    torch.sparse_bsc: ("ccol_indices", "row_indices"),
}


class TorchSparse(SparseArray):
    """A sparse tensor's values (a detached copy) and its pattern."""

    def __init__(self, x: torch.Tensor) -> None:
        x = x.detach()
        if x.layout == torch.sparse_coo:
            nnz = int(x._nnz())
            x = x.coalesce()
            self.coalesced_here = int(x._nnz()) != nnz  # (duplicate entries were summed)
            self._indices = (x.indices().clone(),)
            self.values = x.values().clone()
        else:
            self.coalesced_here = False
            compressed, plain = _COMPRESSED[x.layout]
            self._indices = (getattr(x, compressed)().clone(), getattr(x, plain)().clone())
            self.values = x.values().clone()
        self._layout = x.layout
        self.layout = LAYOUTS[x.layout]
        self.shape = tuple(int(s) for s in x.shape)
        self.nnz = int(self.values.shape[0])
        self.key = (self.layout, self.shape, tuple(i.cpu().numpy().tobytes() for i in self._indices))

    def rebuild(self, values: Any) -> torch.Tensor:
        idx = tuple(i.to(values.device) for i in self._indices)
        if self._layout == torch.sparse_coo:
            return torch.sparse_coo_tensor(idx[0], values, self.shape, is_coalesced=True)
        return torch.sparse_compressed_tensor(idx[0], idx[1], values, self.shape, layout=self._layout)

    def numbered(self) -> np.ndarray:
        n = int(self.values.numel())
        numbered = torch.arange(1, n + 1, dtype=torch.float64).reshape(self.values.shape)
        return self.rebuild(numbered).to_dense().cpu().numpy().reshape(-1)

    def read(self, out: torch.Tensor) -> torch.Tensor:
        if TorchSparse(out).key == self.key:
            if out.layout == torch.sparse_coo:
                return out.coalesce().values()
            return out.values().clone()  # (a compressed tensor's values are a view without strides of its own)
        where = torch.as_tensor(self._positions(), device=out.device)
        return out.to_dense().reshape(-1)[where].reshape(self.values.shape)

    def unusable(self) -> str | None:
        if self._layout != torch.sparse_coo and self.values.is_complex():
            return (
                f"torch differentiates no complex {self.layout} tensor with respect to its values (its "
                "sparse_compressed_tensor has no complex autograd)"
            )
        return None

    def once(self) -> str | None:
        v = self.values.detach().clone().requires_grad_(True)
        with torch.enable_grad():
            (g,) = torch.autograd.grad((self.rebuild(v).to_dense() ** 2).sum(), v, create_graph=True)
            if not g.requires_grad:
                return (
                    f"torch's {self.layout} tensors differentiate once: the gradient with respect to their values "
                    "comes back cut from the graph under create_graph, so no derivative of order 2 is taken with "
                    "respect to them"
                )
            try:
                torch.autograd.grad(g.sum(), v)
            except RuntimeError as e:
                return (
                    f"torch's second derivative with respect to a {self.layout} tensor's values raises ({e}), so "
                    "none is taken"
                )
        return None


def gradients(fn: Callable, args: Sequence[Any], wrt: Sequence[int], seed: int) -> list[tuple[str, np.ndarray]]:
    """fn's own gradients with respect to the arguments at ``wrt`` (sparse
    tensors among them, as the caller passed them) for a random cotangent on
    the output's values: per argument, its layout and its dense values."""
    inputs = list(args)
    for i in wrt:
        inputs[i] = args[i].detach().clone().requires_grad_(True)
    with torch.enable_grad():
        out = fn(*inputs)
    g = torch.Generator().manual_seed(seed)
    if out.layout in LAYOUTS:
        split = TorchSparse(out)
        signs = torch.randint(0, 2, split.values.shape, generator=g).to(split.values) * 2 - 1
        cot = split.rebuild(signs)
        out = out.coalesce() if out.layout == torch.sparse_coo else out
    else:
        cot = (torch.randint(0, 2, out.shape, generator=g) * 2 - 1).to(out)
        cot = torch.where(torch.isfinite(out.detach()), cot, 0)
    grads = torch.autograd.grad(out, [inputs[i] for i in wrt], grad_outputs=cot, allow_unused=True)
    result = []
    for i, gr in zip(wrt, grads):
        if gr is None:
            result.append(("none", np.zeros(tuple(args[i].shape))))
            continue
        layout = LAYOUTS.get(gr.layout, str(gr.layout).removeprefix("torch."))
        result.append((layout, gr.detach().to_dense().cpu().numpy()))
    return result
