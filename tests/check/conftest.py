"""Fixtures the tests of the check share: watchers of full-size crossings
between a framework's arrays and numpy (test_device*)."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from ._helpers import FULL, FULL_BYTES


@pytest.fixture
def torch_crossings(monkeypatch):
    """Every full-size crossing between torch tensors and numpy arrays."""
    torch = pytest.importorskip("torch")
    seen: list[str] = []

    def out_of(name, method):
        def watched(self, *args, **kwargs):
            if self.numel() >= FULL:
                seen.append(name)
            return method(self, *args, **kwargs)

        return watched

    def into(name, function):
        def watched(obj, *args, **kwargs):
            if isinstance(obj, np.ndarray) and obj.nbytes > FULL_BYTES:
                seen.append(name)
            return function(obj, *args, **kwargs)

        return watched

    monkeypatch.setattr(torch.Tensor, "numpy", out_of("Tensor.numpy", torch.Tensor.numpy))
    monkeypatch.setattr(torch.Tensor, "__array__", out_of("Tensor.__array__", torch.Tensor.__array__))
    for name in ("from_numpy", "as_tensor", "asarray", "tensor"):
        monkeypatch.setattr(torch, name, into(f"torch.{name}", getattr(torch, name)))
    return seen


@pytest.fixture
def jax_crossings(monkeypatch, capfd):
    """Full-size crossings between jax arrays and the host: every host-to-device
    transfer, as jax's transfer guard logs it, and every read of an array's
    values through Python (``__array__``, ``_value``). (numpy reads a jax array
    on the CPU through the buffer protocol, which no hook sees; the torch test
    runs the same code, and on a GPU that read is a transfer the guard logs.
    jax says a transfer's shape the first time a shape crosses in a process
    only: a later crossing of that shape is logged without it, and not counted.)"""
    jax = pytest.importorskip("jax")
    from jax._src.array import ArrayImpl

    seen: list[str] = []

    def reads(name, method):
        def watched(self, *args, **kwargs):
            if self.size >= FULL:
                seen.append(name)
            return method(self, *args, **kwargs)

        return watched

    monkeypatch.setattr(ArrayImpl, "__array__", reads("jax.Array.__array__", ArrayImpl.__array__))
    monkeypatch.setattr(ArrayImpl, "_value", property(reads("jax.Array._value", ArrayImpl._value.fget)))

    class Crossings(list):
        def __enter__(self):
            self.guard = jax.transfer_guard_host_to_device("log")
            self.guard.__enter__()
            capfd.readouterr()
            return self

        def __exit__(self, *exc):
            self.guard.__exit__(*exc)
            for dtype, dims in re.findall(
                r"host-to-device transfer: aval=ShapedArray\((\w+)\[([\d,]*)\]", capfd.readouterr().err
            ):
                itemsize = np.dtype(dtype).itemsize if dtype in np.sctypeDict else 8
                size = math.prod(int(d) for d in dims.split(",") if d) * itemsize
                if size > FULL_BYTES:
                    seen.append(f"host-to-device {dtype}[{dims}]")
            self.extend(seen)

    return Crossings()
