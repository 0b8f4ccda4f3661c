"""Fixtures and session set-up for every wing (the helpers several wings
share are in _helpers.py; a wing's own are in its folder)."""

from __future__ import annotations

import importlib.util
import os
import sys
import tempfile

import numpy as np
import pytest

from gradverify.backends import BACKENDS


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


@pytest.fixture(autouse=True, scope="session")
def _temporary_files_under_pytests_own(tmp_path_factory):
    """A failing gv.verify run saves its counterexample in a new temporary
    directory, the caller's to keep: the suite's many failing runs would
    leave hundreds in the system's each time it runs. Here they go under
    pytest's base directory, which pytest prunes."""
    held = tempfile.tempdir
    tempfile.tempdir = str(tmp_path_factory.mktemp("tmp"))
    yield
    tempfile.tempdir = held


@pytest.fixture(autouse=True)
def _jax_x64_as_it_was():
    """Every test leaves jax's x64 setting as it found it: a test that turns
    it on for its own float64 parameters (flax's, a custom_vjp's) must not
    decide the dtypes of the tests after it on the same worker."""
    jax = sys.modules.get("jax")
    before = bool(jax.config.jax_enable_x64) if jax is not None else False
    yield
    jax = sys.modules.get("jax")
    if jax is not None and bool(jax.config.jax_enable_x64) != before:
        jax.config.update("jax_enable_x64", before)


@pytest.fixture(autouse=True)
def _standard_promotion(request):
    """Tests marked ``standard_promotion`` run jax with standard dtype
    promotion: their subject is the float64 oracle, which gradverify
    withholds under strict promotion with x64 off (see
    tests/backends/test_jax_strict_promotion.py for that mode)."""
    if request.node.get_closest_marker("standard_promotion") is None or importlib.util.find_spec("jax") is None:
        yield
        return
    import jax

    with jax.numpy_dtype_promotion("standard"):
        yield


@pytest.fixture(params=BACKENDS)
def backend(request):
    return request.param


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


#: What the suite can do without: a test that needs one of these and finds it
#: not installed is skipped (the core runs with numpy alone).
OPTIONAL = ("torch", "jax", "jaxlib", "kornia", "e3nn", "dask", "distributed")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    try:
        return (yield)
    except ModuleNotFoundError as e:
        top = (e.name or "").split(".")[0]
        if top in OPTIONAL and importlib.util.find_spec(top) is None:
            pytest.skip(f"{top} is not installed")
        raise
