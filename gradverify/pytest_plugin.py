"""The gradverify pytest plugin (registered through the ``pytest11`` entry point).

* options ``--gradverify-seed``, ``--gradverify-max-examples``,
  ``--gradverify-profile``, ``--gradverify-report DIR`` and the matching ini keys;
* a marker ``@pytest.mark.gradverify(**options)`` for per-test options
  (``max_examples``, ``seed``, ``order``, ``rtol``, ``atol``, ``full``, ``directions``);
* a fixture ``gradverify``: ``gradverify.check(fn, *args)`` and
  ``gradverify.verify(fn, strategy)`` bound to the test's own seed (derived from
  the base seed and the node id: independent of order and worker count);
* per-test figures in ``item.user_properties`` (so in JUnit XML, any family),
  and every attempt's outcome where a test failed or was rerun (pytest-rerunfailures),
  failures with their minimal counterexample in the terminal summary, and a
  report written once, by the controller, under pytest-xdist.

Loading the plugin imports neither torch nor jax (nor Hypothesis): the
strategies (which import Hypothesis, ~90 ms) load only where a test asks
for a settings profile.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gradverify import _io, _reports
from gradverify._verify import derive_seed

_CHECK_OPTIONS = ("order", "rtol", "atol", "full", "directions", "wrt", "vectorise")
_MARKER_OPTIONS = ("max_examples", "seed", *_CHECK_OPTIONS)
_RECORDS_ATTR = "gradverify_records"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("gradverify", "gradient verification (gradverify)")
    group.addoption("--gradverify-seed", type=int, default=None, help="base seed; each test derives its own")
    group.addoption("--gradverify-max-examples", type=int, default=None, help="examples per gradverify.verify")
    group.addoption(
        "--gradverify-profile", choices=("ci", "dev", "thorough"), default=None, help="Hypothesis settings profile"
    )
    group.addoption("--gradverify-report", metavar="DIR", default=None, help="write gradverify's report here")
    parser.addini("gradverify_seed", "base seed (default 0)", default="0")
    parser.addini("gradverify_max_examples", "examples per gradverify.verify (default 100)", default="")
    parser.addini("gradverify_profile", "Hypothesis settings profile: ci, dev or thorough", default="")
    parser.addini("gradverify_report", "directory for gradverify's report", default="")


class _Settings:
    def __init__(self, config: pytest.Config) -> None:
        def pick(option: str, ini: str) -> Any:
            value = config.getoption(option)
            return value if value is not None else (config.getini(ini) or None)

        self.seed = int(pick("gradverify_seed", "gradverify_seed") or 0)
        self.profile = pick("gradverify_profile", "gradverify_profile")
        max_examples = pick("gradverify_max_examples", "gradverify_max_examples")
        if max_examples is None and self.profile:
            from gradverify.strategies._profiles import PROFILES

            max_examples = PROFILES[self.profile]["max_examples"]
        self.max_examples = int(max_examples or 100)
        self.report = pick("gradverify_report", "gradverify_report")
        self.records: list[dict[str, Any]] = []


_settings_key = pytest.StashKey[_Settings]()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "gradverify(**options): per-test gradverify options "
        "(max_examples, seed, order, rtol, atol, full, directions, wrt)",
    )
    settings = _Settings(config)
    config.stash[_settings_key] = settings
    if settings.profile:
        from hypothesis import settings as hypothesis_settings

        from gradverify.strategies import load_profile

        settings.previous_profile = hypothesis_settings.default
        load_profile(settings.profile)


def pytest_sessionstart(session: pytest.Session) -> None:
    _SESSION_RECORDS.clear()
    _record_environment(session.config)


def _record_environment(config: pytest.Config) -> None:
    """The machine, thread counts and versions as JUnit suite properties, so
    that `gradverify triage junit` can tell which of them separate failing
    CI runs from passing ones."""
    from _pytest.junitxml import xml_key

    xml = config.stash.get(xml_key, None)
    if xml is None or hasattr(config, "workerinput"):
        return
    env = _reports.environment()
    for key in ("python", "platform", "machine", "cpu_count", "omp_num_threads"):
        xml.add_global_property(f"env.{key}", str(env[key]))
    for pkg, version in env["versions"].items():
        xml.add_global_property(f"version.{pkg}", str(version))


def pytest_unconfigure(config: pytest.Config) -> None:
    """Give Hypothesis back the settings it had before --gradverify-profile."""
    settings = config.stash.get(_settings_key, None)
    previous = getattr(settings, "previous_profile", None)
    if previous is not None:
        from hypothesis import settings as hypothesis_settings

        hypothesis_settings.register_profile("_gradverify_previous", previous)
        hypothesis_settings.load_profile("_gradverify_previous")


def pytest_report_header(config: pytest.Config) -> str:
    s = config.stash[_settings_key]
    return (
        f"gradverify: seed {s.seed}, max_examples {s.max_examples}"
        + (f", profile {s.profile}" if s.profile else "")
        + (f", report {s.report}" if s.report else "")
    )


class Checker:
    """``gv.check`` and ``gv.verify`` bound to one test's seed and options;
    every call is recorded for the test's figures and the report."""

    def __init__(self, nodeid: str, settings: _Settings, marker_options: dict[str, Any]) -> None:
        self.nodeid = nodeid
        self.seed = int(marker_options.get("seed", derive_seed(settings.seed, nodeid)))
        self.max_examples = int(marker_options.get("max_examples", settings.max_examples))
        self.options = {k: v for k, v in marker_options.items() if k in _CHECK_OPTIONS}
        self.report_dir = settings.report
        self.records: list[dict[str, Any]] = []

    def check(self, fn: Any, *args: Any, **options: Any) -> Any:
        import gradverify as gv

        res = gv.check(fn, *args, **{"seed": self.seed, **self.options, **options})
        self.records.append(_check_record(self.nodeid, res))
        return res

    def verify(self, fn: Any, args_strategy: Any, **options: Any) -> Any:
        import gradverify as gv

        report_dir = None if self.report_dir is None else Path(self.report_dir) / "cases"
        opts = {
            "seed": self.seed,
            "max_examples": self.max_examples,
            "report_dir": report_dir,
            **self.options,
            **options,
        }
        res = gv.verify(fn, args_strategy, **opts)
        self.records.append(_verify_record(self.nodeid, res))
        return res


def _check_record(nodeid: str, res: Any) -> dict[str, Any]:
    worst = res.errors[0] if res.errors else None
    return {
        "nodeid": nodeid,
        "call": "check",
        "function": res.function,
        "backend": res.backend,
        "seed": res.seed,
        "ok": res.ok,
        "inconclusive": int(res.inconclusive),
        "worst_ratio": res.worst_ratio,
        "error": None if worst is None else worst.error,
        "bound": None if worst is None else worst.bound,
        "counterexample": None,
        "npz": None,
        "report": None if res.ok else str(res),
    }


def _verify_record(nodeid: str, res: Any) -> dict[str, Any]:
    import numpy as np

    worst = res.result.errors[0] if res.result is not None and res.result.errors else None
    return {
        "nodeid": nodeid,
        "call": "verify",
        "function": res.function,
        "backend": res.backend,
        "seed": res.seed,
        "ok": res.ok,
        "inconclusive": res.inconclusive,
        "examples_run": res.examples_run,
        "worst_ratio": res.worst_ratio,
        "error": None if worst is None else worst.error,
        "bound": None if worst is None else worst.bound,
        "counterexample": None
        if res.counterexample is None
        else [_io.exact(np.asarray(_io.to_numpy(a))) for a in res.counterexample],
        "npz": res.saved,
        "report": None if res.ok else str(res),
    }


_checker_key = pytest.StashKey[Checker]()


@pytest.fixture
def gradverify(request: pytest.FixtureRequest) -> Checker:
    """gv.check / gv.verify bound to this test's seed and marker options."""
    marker = request.node.get_closest_marker("gradverify")
    options = dict(marker.kwargs) if marker else {}
    unknown = sorted(set(options) - set(_MARKER_OPTIONS))
    if unknown:
        raise pytest.UsageError(
            f"@pytest.mark.gradverify: expected options from {list(_MARKER_OPTIONS)}; found {unknown}. "
            "Fix: drop or rename them"
        )
    checker = Checker(request.node.nodeid, request.config.stash[_settings_key], options)
    request.node.stash[_checker_key] = checker
    return checker


_attempts_key = pytest.StashKey[list[str]]()
_outcome_key = pytest.StashKey[str]()


def _record_attempt(item: pytest.Item) -> None:
    """At an attempt's teardown: its outcome as a ``gradverify_attempt`` property
    ("1:failed", "2:passed"). Reruns (pytest-rerunfailures) run the same item
    again, so the last attempt's JUnit entry lists every attempt, where JUnit
    itself keeps only the last outcome. Passing first attempts record nothing."""
    attempts = item.stash.setdefault(_attempts_key, [])
    outcome = item.stash.get(_outcome_key, "passed")
    item.stash[_outcome_key] = "passed"
    attempts.append(outcome)
    if outcome != "passed" or len(attempts) > 1:
        item.user_properties.append(("gradverify_attempt", f"{len(attempts)}:{outcome}"))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    if call.when == "teardown":
        _record_attempt(item)
    checker = item.stash.get(_checker_key, None)
    if call.when == "call" and checker is not None and checker.records:
        recs = checker.records
        failed = [r for r in recs if not r["ok"]]
        worst = max((r["worst_ratio"] or 0.0 for r in recs), default=0.0)
        item.user_properties.append(("gradverify_verdict", "failed" if failed else "passed"))
        item.user_properties.append(("gradverify_seed", checker.seed))
        item.user_properties.append(("gradverify_calls", len(recs)))
        item.user_properties.append(("gradverify_worst_ratio", f"{worst:.3g}"))
        if failed and failed[0]["error"] is not None:
            item.user_properties.append(("gradverify_error", f"{failed[0]['error']:.3g} > {failed[0]['bound']:.3g}"))
        npz = next((r["npz"] for r in failed if r["npz"]), None)
        if npz:
            item.user_properties.append(("gradverify_counterexample", npz))
    outcome = yield
    if call.when in ("setup", "call"):
        report = outcome.get_result()
        if report.failed:
            item.stash[_outcome_key] = "error" if call.when == "setup" else "failed"
        elif report.skipped and call.when == "setup":
            item.stash[_outcome_key] = "skipped"
    if call.when == "call" and checker is not None and checker.records:
        report = outcome.get_result()
        setattr(report, _RECORDS_ATTR, list(checker.records))  # serialized to the xdist controller


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    recs = getattr(report, _RECORDS_ATTR, None)
    if recs and report.when == "call":
        _SESSION_RECORDS.extend(recs)


_SESSION_RECORDS: list[dict[str, Any]] = []


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):
        return
    failed = [r for r in _SESSION_RECORDS if not r["ok"]]
    if not _SESSION_RECORDS:
        return
    tr = terminalreporter
    tr.section("gradverify")
    tr.write_line(
        f"{len(_SESSION_RECORDS)} gradient check(s) in {len({r['nodeid'] for r in _SESSION_RECORDS})} test(s), "
        f"{len(failed)} failed"
    )
    for r in failed:
        tr.write_line(f"FAILED {r['nodeid']}: {r['function']} [{r['backend']}] seed {r['seed']}")
        if r["counterexample"]:
            for k, a in enumerate(r["counterexample"]):
                tr.write_line(f"    arg{k}: {a['dtype']}{a['shape']} = {a['values']}")
        if r["error"] is not None:
            tr.write_line(f"    |error| {r['error']:.3g} > bound {r['bound']:.3g}")
        if r["npz"]:
            tr.write_line(f"    inputs: {r['npz']}")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    if hasattr(config, "workerinput"):  # an xdist worker: the controller writes
        return
    settings = config.stash.get(_settings_key, None)
    if settings is None or not settings.report or not _SESSION_RECORDS:
        return
    directory = Path(settings.report)
    directory.mkdir(parents=True, exist_ok=True)
    data = {
        "schema": "gradverify-pytest/1",
        "seed": settings.seed,
        "max_examples": settings.max_examples,
        "profile": settings.profile,
        "records": sorted(_SESSION_RECORDS, key=lambda r: (r["nodeid"], r["call"], r["function"])),
    }
    path = directory / "gradverify-pytest.json"
    _io.atomic_write(path, json.dumps(data, indent=1, default=str) + "\n")
