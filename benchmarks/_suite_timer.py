"""A pytest plugin for bench_suite.py: the time each test spends inside the
gradient checkers (torch's gradcheck and gradgradcheck, jax's check_grads:
the originals, or gradverify's drop-ins where ``--gradverify-replace`` put
them), its calls, and its outcome, written as JSON to $BENCH_SUITE_OUT when
the session ends: {nodeid: [checker seconds, calls, outcome]}.

The checkers are wrapped where the suite binds them, after gradverify's
plugin has put its drop-ins there and before the first conftest is
imported; a checker's call inside another's (torch's gradgradcheck calls
gradcheck) is the outer one's time."""

from __future__ import annotations

import functools
import importlib
import importlib.util
import json
import os
import sys
import threading
import time

import pytest

_CHECKS: dict[str, list] = {}
_STATE = threading.local()


def _timed(checker):
    @functools.wraps(checker)
    def call(*args, **kwargs):
        if getattr(_STATE, "depth", 0):
            return checker(*args, **kwargs)
        _STATE.depth = 1
        start = time.perf_counter()
        try:
            return checker(*args, **kwargs)
        finally:
            _STATE.depth = 0
            held = _CHECKS.setdefault(getattr(_STATE, "test", None), [0.0, 0, None])
            held[0] += time.perf_counter() - start
            held[1] += 1

    call.__bench_suite_timed__ = True
    return call


@pytest.hookimpl(trylast=True)
def pytest_load_initial_conftests(early_config, parser, args):
    from gradverify._replace import PEERS

    for module_name, name, _ in PEERS:
        if importlib.util.find_spec(module_name.split(".")[0]) is None:
            continue
        module = sys.modules.get(module_name) or importlib.import_module(module_name)
        checker = getattr(module, name, None)
        if checker is not None and not getattr(checker, "__bench_suite_timed__", False):
            setattr(module, name, _timed(checker))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _STATE.test = item.nodeid
    yield
    _STATE.test = None


def pytest_runtest_logreport(report):
    if report.when == "call" and report.nodeid in _CHECKS:
        _CHECKS[report.nodeid][2] = report.outcome


def pytest_sessionfinish(session):
    out = os.environ.get("BENCH_SUITE_OUT")
    if out:
        with open(out + ".part", "w") as f:
            json.dump({test: held for test, held in _CHECKS.items() if test is not None}, f)
        os.replace(out + ".part", out)
