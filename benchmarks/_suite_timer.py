"""A pytest plugin for bench_suite.py: each test's call phase, its seconds
and outcome, written as JSON to $BENCH_SUITE_OUT when the session ends."""

from __future__ import annotations

import json
import os

_TIMES: dict[str, list] = {}


def pytest_runtest_logreport(report):
    if report.when == "call":
        _TIMES[report.nodeid] = [report.duration, report.outcome]


def pytest_sessionfinish(session):
    out = os.environ.get("BENCH_SUITE_OUT")
    if out:
        with open(out + ".part", "w") as f:
            json.dump(_TIMES, f)
        os.replace(out + ".part", out)
