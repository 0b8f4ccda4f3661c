"""Helpers shared by the tests: make arrays of each backend from numpy."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

BACKENDS = ("numpy", "torch", "jax")


def pytest_configure(config):
    """Under pytest-xdist every worker is a process with an intra-op thread
    pool as large as the machine: with as many workers as cores the pools
    oversubscribe it, and torch's small parallel kernels (F.layer_norm's)
    spin several times slower. One thread a worker (read by torch at import;
    set as well where it is already imported)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        os.environ.setdefault("OMP_NUM_THREADS", "1")
        if "torch" in sys.modules:
            sys.modules["torch"].set_num_threads(1)


def make(backend: str, a: np.ndarray):
    """A backend array with a's values and dtype (jax float64 made under x64)."""
    a = np.asarray(a)
    if backend == "torch":
        import torch

        return torch.from_numpy(np.array(a, copy=True))
    if backend == "jax":
        import jax
        import jax.numpy as jnp

        with jax.enable_x64(a.dtype.itemsize == 8):
            return jnp.asarray(a)
    return np.array(a, copy=True)


def xp_of(backend: str):
    if backend == "torch":
        import torch

        return torch
    if backend == "jax":
        import jax.numpy as jnp

        return jnp
    return np


@pytest.fixture(params=BACKENDS)
def backend(request):
    return request.param


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def precise(backend: str):
    """Context for computing on float64 arrays directly: jax needs x64 on."""
    import contextlib

    if backend == "jax":
        import jax

        return jax.enable_x64(True)
    return contextlib.nullcontext()
