"""The gradverify pytest plugin (registered through the ``pytest11`` entry point).

* options ``--gradverify-seed``, ``--gradverify-max-examples``,
  ``--gradverify-profile``, ``--gradverify-report DIR`` and the matching ini keys;
* a marker ``@pytest.mark.gradverify(**options)`` for per-test options
  (``max_examples``, ``seed``, ``order``, ``rtol``, ``atol``, ``full``, ``directions``,
  ``batched``, ``max_shrinks``, ``max_shrinking_seconds``); ``--gradverify-batched``
  (ini ``gradverify_batched``) turns ``batched`` on for every test that does
  not set it; ``--gradverify-max-shrinking-seconds`` (ini
  ``gradverify_max_shrinking_seconds``) bounds every failing verify's shrinking;
* a fixture ``gradverify``: ``check``, ``verify``, ``assert_gradients`` and
  ``assert_verified`` bound to the test's own seed (``seed_for``: from the
  base seed and the test's file name and name, so the same whatever the
  directory pytest runs from, the order, the process or the worker);
* every ``gv.check`` / ``gv.verify`` a test makes (through the fixture or
  not) recorded: the full report of each failing one beside the test's
  failure (``assert r.ok, r`` shows it), the pair that disagrees, both values
  and how to reproduce it in the terminal summary, per-test figures in
  ``item.user_properties`` (so in JUnit XML, any family), every attempt's
  outcome where a test failed or was rerun (pytest-rerunfailures), and a
  report written once, by the controller, under pytest-xdist;
* ``--gradverify-replace`` (ini ``gradverify_replace``): the suite's own
  ``torch.autograd.gradcheck`` / ``gradgradcheck`` and
  ``jax.test_util.check_grads`` calls routed through gradverify's drop-ins
  (``=compare``: both run, the original's verdict kept, and a table of the
  calls where they disagree, with both checkers' total time, at the end;
  ``=record``: the originals run, and what each call was made with is
  written to ``calls-*.jsonl`` in the report directory - ``gradverify-records``
  by default - with its point in ``points/``, for ``gradverify write``).

Loading the plugin imports neither torch nor jax (nor Hypothesis): the
strategies (which import Hypothesis, ~90 ms) load only where a test asks
for a settings profile.
"""

from __future__ import annotations

import contextlib
import difflib
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .. import _io, _observe
from .._check.pipeline import check
from .._errors import GradientError
from .._replace import MODES, rerouted
from .._sweep import reports, session as session_report
from .._verify import MAX_SHRINKING_SECONDS, save_args, verify
from .fixture import allow_under_given, seed_for, seeded_generators
from .records import record_of, shown_by

_CHECK_OPTIONS = ("order", "rtol", "atol", "full", "directions", "wrt", "vectorise", "batched")
_SHRINK_OPTIONS = ("max_shrinks", "max_shrinking_seconds")
_MARKER_OPTIONS = ("max_examples", "seed", *_CHECK_OPTIONS, *_SHRINK_OPTIONS)
_RECORDS_ATTR = "gradverify_records"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("gradverify", "gradient verification (gradverify)")
    group.addoption("--gradverify-seed", type=int, default=None, help="base seed; each test derives its own")
    group.addoption("--gradverify-max-examples", type=int, default=None, help="examples per gradverify.verify")
    group.addoption(
        "--gradverify-profile", choices=("ci", "dev", "thorough"), default=None, help="Hypothesis settings profile"
    )
    group.addoption("--gradverify-report", metavar="DIR", default=None, help="write gradverify's report here")
    group.addoption(
        "--gradverify-max-shrinking-seconds",
        type=float,
        default=None,
        metavar="S",
        help=f"stop shrinking a failing gradverify.verify after S seconds (default {MAX_SHRINKING_SECONDS:g})",
    )
    group.addoption(
        "--gradverify-batched",
        action="store_const",
        const=True,
        default=None,
        help="also check the JVP and VJP under vmap (torch, jax) in the gradverify fixture's calls",
    )
    group.addoption(
        "--gradverify-replace",
        nargs="?",
        const="replace",
        default=None,
        choices=MODES,
        help="route the suite's gradcheck/gradgradcheck/check_grads calls through gradverify "
        "(compare: run both, keep the original's verdict, table the disagreements; "
        "record: run the original, write what each call was made with to the report directory, "
        f"{RECORDS!r} by default)",
    )
    parser.addini("gradverify_seed", "base seed (default 0)", default="0")
    parser.addini("gradverify_max_examples", "examples per gradverify.verify (default 100)", default="")
    parser.addini("gradverify_profile", "Hypothesis settings profile: ci, dev or thorough", default="")
    parser.addini("gradverify_report", "directory for gradverify's report", default="")
    parser.addini(
        "gradverify_max_shrinking_seconds",
        f"seconds a failing gradverify.verify may shrink (default {MAX_SHRINKING_SECONDS:g})",
        default="",
    )
    parser.addini("gradverify_batched", "check the JVP and VJP under vmap too (true/false)", type="bool", default=False)
    parser.addini(
        "gradverify_replace", "route gradcheck/check_grads calls through gradverify: replace, compare or record"
    )


class _Settings:
    def __init__(self, config: pytest.Config) -> None:
        def pick(option: str, ini: str) -> Any:
            value = config.getoption(option)
            return value if value is not None else (config.getini(ini) or None)

        self.seed = int(pick("gradverify_seed", "gradverify_seed") or 0)
        self.profile = pick("gradverify_profile", "gradverify_profile")
        max_examples = pick("gradverify_max_examples", "gradverify_max_examples")
        if max_examples is None and self.profile:
            from ..strategies import PROFILES  # (imports hypothesis: only where a profile is asked for)

            max_examples = PROFILES[self.profile]["max_examples"]
        self.max_examples = int(max_examples or 100)
        self.report = pick("gradverify_report", "gradverify_report")
        self.batched = bool(pick("gradverify_batched", "gradverify_batched"))
        shrinking = pick("gradverify_max_shrinking_seconds", "gradverify_max_shrinking_seconds")
        self.max_shrinking_seconds = MAX_SHRINKING_SECONDS if shrinking is None else float(shrinking)
        self.replace = _replace_mode(config)
        self.records: list[dict[str, Any]] = []
        self._config = config
        self._cases: Path | None = None

    def cases_dir(self) -> Path:
        """Where a failing test's inputs are saved: the report directory's
        ``cases/``, else one directory of this session under pytest's own
        temporary root (``--basetemp``; pytest keeps the last few sessions'
        and removes older ones), never a fresh directory per failure."""
        if self.report is not None:
            return Path(self.report) / "cases"
        if self._cases is None:
            factory = getattr(self._config, "_tmp_path_factory", None)  # (pytest's own, as tmp_path uses)
            if factory is not None:
                self._cases = factory.mktemp("gradverify-cases", numbered=False)
            else:
                self._cases = Path(tempfile.mkdtemp(prefix="gradverify-cases-"))
        return self._cases


_settings_key = pytest.StashKey[_Settings]()
_rerouting_key = pytest.StashKey[tuple[contextlib.ExitStack, list[str]]]()


def _replace_mode(config: pytest.Config) -> str | None:
    mode = config.known_args_namespace.gradverify_replace or config.getini("gradverify_replace") or None
    if mode is not None and mode not in MODES:
        raise pytest.UsageError(
            f"gradverify_replace: expected one of {list(MODES)}; found {mode!r}. Fix: set it to one of them"
        )
    return mode


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser, args: list[str]) -> None:
    """--gradverify-replace patches the peers before the first conftest is
    imported, so that every ``from torch.autograd import gradcheck`` of the
    suite - its conftests' and helpers' too - binds the drop-in."""
    mode = _replace_mode(early_config)
    if mode is not None:
        directory = _records_dir(early_config) if mode == "record" else None
        if directory is not None and not hasattr(early_config, "workerinput"):
            _fresh_records(directory)  # (an xdist controller starts its workers after this)
        stack = contextlib.ExitStack()
        early_config.stash[_rerouting_key] = (stack, stack.enter_context(rerouted(mode, directory)))


#: Where ``--gradverify-replace=record`` writes without ``--gradverify-report``.
RECORDS = "gradverify-records"


def _records_dir(config: pytest.Config) -> Path:
    given = config.known_args_namespace.gradverify_report or config.getini("gradverify_report") or RECORDS
    return Path(given).resolve()


def _fresh_records(directory: Path) -> None:
    """The record directory without an earlier session's calls and points."""
    for old in directory.glob("calls-*.jsonl"):
        old.unlink()
    points = directory / "points"
    if points.is_dir():
        for old in points.glob("*.npz"):
            old.unlink()


def _write_record(directory: Path, nodeid: str, record: dict[str, Any]) -> None:
    """One call's record, a line of this process's ``calls-*.jsonl`` (written
    as the call ends: a session cut short keeps what it recorded)."""
    import os

    directory.mkdir(parents=True, exist_ok=True)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with open(directory / f"calls-{worker}.jsonl", "a", encoding="utf-8") as f:
        f.write(_io.to_json({"nodeid": nodeid, **record}, indent=None) + "\n")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "gradverify(**options): per-test gradverify options "
        "(max_examples, seed, order, rtol, atol, full, directions, wrt, vectorise, batched, "
        "max_shrinks, max_shrinking_seconds)",
    )
    settings = _Settings(config)
    config.stash[_settings_key] = settings
    if settings.profile:
        from hypothesis import settings as hypothesis_settings

        from ..strategies import load_profile  # (imports hypothesis: only where a profile is asked for)

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
    env = reports.environment()
    for key in ("python", "platform", "machine", "cpu_count", "omp_num_threads"):
        xml.add_global_property(f"env.{key}", str(env[key]))
    for pkg, version in env["versions"].items():
        xml.add_global_property(f"version.{pkg}", str(version))


def pytest_unconfigure(config: pytest.Config) -> None:
    """Give Hypothesis back the settings it had before --gradverify-profile,
    and the frameworks their own checkers."""
    stack, _ = config.stash.get(_rerouting_key, (None, None))
    if stack is not None:
        stack.close()
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
        + (f", {s.replace}: {', '.join(_patched(config)) or 'no gradient checker installed'}" if s.replace else "")
    )


def _patched(config: pytest.Config) -> list[str]:
    return config.stash.get(_rerouting_key, (None, []))[1]


class Checker:
    """``gv.check`` and ``gv.verify`` bound to one test's seed and options
    (every call a test makes is recorded, through the fixture or not)."""

    def __init__(self, nodeid: str, settings: _Settings, marker_options: dict[str, Any], seed: int) -> None:
        self.nodeid = nodeid
        self.pinned = "seed" in marker_options
        self.seed = int(marker_options.get("seed", seed))
        self.max_examples = int(marker_options.get("max_examples", settings.max_examples))
        self.options = {k: v for k, v in marker_options.items() if k in _CHECK_OPTIONS}
        if settings.batched:
            self.options.setdefault("batched", True)
        self.shrinking = {"max_shrinking_seconds": settings.max_shrinking_seconds}
        self.shrinking.update({k: v for k, v in marker_options.items() if k in _SHRINK_OPTIONS})
        self.cases_dir = settings.cases_dir

    def check(self, fn: Any, *args: Any, **options: Any) -> Any:
        return check(fn, *args, **{"seed": self.seed, **self.options, **options})

    def verify(self, fn: Any, args_strategy: Any, **options: Any) -> Any:
        opts = {
            "seed": self.seed,
            "max_examples": self.max_examples,
            "report_dir": self.cases_dir(),
            **self.shrinking,
            **self.options,
            **options,
        }
        return verify(fn, args_strategy, **opts)

    def assert_gradients(self, fn: Any, *args: Any, **options: Any) -> Any:
        """``check``, raising ``gv.GradientError`` (an AssertionError) with the full report on failure."""
        return _raise_if_failed(self.check(fn, *args, **options))

    def assert_verified(self, fn: Any, args_strategy: Any, **options: Any) -> Any:
        """``verify``, raising ``gv.GradientError`` with the full report (the
        minimal failing input and its check) on failure."""
        return _raise_if_failed(self.verify(fn, args_strategy, **options))


def _raise_if_failed(res: Any) -> Any:
    if not res.ok:
        raise GradientError(res)
    return res


_checker_key = pytest.StashKey[Checker]()


@pytest.fixture
def gradverify(request: pytest.FixtureRequest) -> Iterator[Checker]:
    """gv.check / gv.verify bound to this test's seed and marker options; the
    global generators (Python's, numpy's, torch's) seeded from that seed
    while the test runs; safe to share between the examples of a ``@given``
    test."""
    marker = request.node.get_closest_marker("gradverify")
    options = dict(marker.kwargs) if marker else {}
    if marker and marker.args:
        raise pytest.UsageError(
            f"@pytest.mark.gradverify: expected keyword options ({', '.join(_MARKER_OPTIONS)}); found positional "
            f"{', '.join(map(repr, marker.args))}. Fix: name each, e.g. @pytest.mark.gradverify(max_examples=5)"
        )
    unknown = sorted(set(options) - set(_MARKER_OPTIONS))
    if unknown:
        near = {k: difflib.get_close_matches(k, _MARKER_OPTIONS, n=1, cutoff=0.75) for k in unknown}
        hints = "; ".join(f"did you mean {m[0]!r} for {k!r}?" for k, m in near.items() if m)
        raise pytest.UsageError(
            f"@pytest.mark.gradverify: expected options from {list(_MARKER_OPTIONS)}; found {unknown}. "
            f"Fix: {hints or 'drop or rename them'}"
        )
    settings = request.config.stash[_settings_key]
    checker = Checker(request.node.nodeid, settings, options, seed_for(settings.seed, request.node))
    request.node.stash[_checker_key] = checker
    allow_under_given(request.node)
    with seeded_generators(checker.seed):
        yield checker


_results_key = pytest.StashKey[list[dict[str, Any]]]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    """Record every outermost gv.check / gv.verify the test makes."""
    records: list[dict[str, Any]] = []  # this attempt's (a rerun starts afresh)
    item.stash[_results_key] = records

    checking: list[Any] = []  # (the arguments of the check under way)

    def inputs(kind: str, fn: Any, args: Any, options: dict[str, Any]) -> None:
        checking[:] = [args] if kind == "check" else []

    def observer(kind: str, result: Any) -> None:
        if kind == "compare":
            _compared(records, item.nodeid, result)
        elif kind == "record":
            _write_record(_records_dir(item.config), item.nodeid, result)
        else:
            records.append(record_of(item.nodeid, kind, result))
            if kind == "check" and not result.ok and checking:  # (saved if the test fails: see _save_inputs)
                item.stash.setdefault(_inputs_key, {})[id(records[-1])] = tuple(checking[0])
        checking.clear()

    with _observe.observing(inputs), _observe.observing_results(observer):
        return (yield)


def _compared(records: list[dict[str, Any]], nodeid: str, pair: dict[str, Any]) -> None:
    """Both checkers' verdicts on one call, joined to the drop-in's record
    (or a record of their own where the drop-in raised before checking)."""
    last = records[-1] if records else None
    if last is not None and last["call"] == pair["peer"] and "peer_ok" not in last:
        last.update(pair)
        last["ok"] = pair["gradverify_ok"]
        return
    records.append(
        {"nodeid": nodeid, "call": pair["peer"], "function": pair["function"], "backend": None, "seed": None,
         "ok": pair["gradverify_ok"], "inconclusive": 0, "worst_ratio": 0.0, "pair": None, "values": {},
         "where": pair["gradverify_said"], "error": None, "bound": None, "counterexample": None, "npz": None,
         "reproduce": None, "report": pair["gradverify_said"], **pair}
    )  # fmt: skip


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
    recs = item.stash.get(_results_key, []) if call.when == "call" else []
    checker = item.stash.get(_checker_key, None)
    if recs:
        failed = [r for r in recs if not r["ok"]]
        first = failed[0] if failed else max(recs, key=lambda r: r["worst_ratio"] or 0.0)
        worst = max((r["worst_ratio"] or 0.0 for r in recs), default=0.0)
        item.user_properties.append(("gradverify_nodeid", item.nodeid))  # (JUnit's ids do not paste into pytest)
        item.user_properties.append(("gradverify_verdict", "failed" if failed else "passed"))
        item.user_properties.append(("gradverify_seed", first["seed"]))
        item.user_properties.append(("gradverify_calls", len(recs)))
        # error / bound: below 1 where every call passed; a failure's own, above 1, where one failed
        item.user_properties.append(("gradverify_worst_ratio", f"{worst:.3g}"))
        if failed and failed[0]["error"] is not None:
            f = failed[0]
            item.user_properties.append(("gradverify_error", f"{f['error']:.3g} > {f['bound']:.3g}"))
            item.user_properties.append(("gradverify_bound", f"{f['bound']:.3g}"))
            item.user_properties.append(("gradverify_pair", f["pair"] or ""))
        npz = next((r["npz"] for r in failed if r["npz"]), None)
        if npz:
            item.user_properties.append(("gradverify_counterexample", npz))
        for r in (r for r in recs if "peer_ok" in r):
            verdicts = (
                f"{who} {'passed' if ok else 'failed'}"
                for who, ok in (("original", r["peer_ok"]), ("gradverify", r["gradverify_ok"]))
            )
            item.user_properties.append(("gradverify_compare", f"{r['call']} {r['function']}: {', '.join(verdicts)}"))
    outcome = yield
    if call.when in ("setup", "call"):
        report = outcome.get_result()
        if report.failed:
            item.stash[_outcome_key] = "error" if call.when == "setup" else "failed"
        elif report.skipped and call.when == "setup":
            item.stash[_outcome_key] = "skipped"
    if recs:
        report = outcome.get_result()
        for r in recs:
            r["reproduce_test"] = _reproduce_test(item, r, checker)
            r["test_failed"] = report.failed  # (a test may assert that a check fails)
        _save_inputs(item, recs if report.failed else [])
        said = shown_by(call.excinfo.value) if call.excinfo is not None else ""
        failing = [r for r in recs if not r["ok"] and r["report"] not in said]
        if report.failed and failing:
            # the full report of each failing call, beside the test's failure
            report.sections.append(("gradverify report", "\n\n".join(r["report"] for r in failing)))
        setattr(report, _RECORDS_ATTR, list(recs))  # serialized to the xdist controller


_inputs_key = pytest.StashKey[dict[int, tuple[Any, ...]]]()


def _save_inputs(item: pytest.Item, recs: list[dict[str, Any]]) -> None:
    """The inputs of each failing gv.check of a failing test saved as an
    ``.npz`` (in the report directory's ``cases/``, else the session's one),
    as a failing gv.verify saves its counterexample; the rest let go."""
    held = item.stash.get(_inputs_key, {})
    settings = item.config.stash[_settings_key]
    for r in recs:
        args = held.get(id(r))
        if args is not None:
            r["npz"] = save_args(args, r["function"], r["seed"], settings.cases_dir())
    held.clear()


def _reproduce_test(item: pytest.Item, record: dict[str, Any], checker: Checker | None) -> str:
    """The command that runs the test again with the same inputs."""
    command = f"pytest '{item.nodeid}'"
    settings = item.config.stash[_settings_key]
    if checker is not None and not checker.pinned and settings.seed:
        command += f" --gradverify-seed {settings.seed}"
    if checker is not None and not checker.pinned:
        command += f"  (or pin it: @pytest.mark.gradverify(seed={checker.seed}))"
    elif checker is None and record.get("reproduce"):
        command += f"  (the call alone: {record['reproduce']})"
    return command


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    recs = getattr(report, _RECORDS_ATTR, None)
    if recs and report.when == "call":
        _SESSION_RECORDS.extend(recs)


_SESSION_RECORDS: list[dict[str, Any]] = []


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):
        return
    if config.stash[_settings_key].replace == "record":
        _recorded(terminalreporter, _records_dir(config))
    failed = [r for r in _SESSION_RECORDS if not r["ok"]]
    if not _SESSION_RECORDS:
        return
    tr = terminalreporter
    tr.section("gradverify")
    shown = [r for r in failed if r.get("test_failed", True)]
    peers = Counter(r["call"] for r in _SESSION_RECORDS if r["call"] not in ("check", "verify"))
    tr.write_line(
        f"{len(_SESSION_RECORDS)} gradient check(s) in {len({r['nodeid'] for r in _SESSION_RECORDS})} test(s), "
        f"{len(failed)} failed"
        + (f" ({len(shown)} in failing tests)" if len(shown) != len(failed) else "")
        + (f"; of them {', '.join(f'{n} {k}' for k, n in sorted(peers.items()))} through the drop-ins" if peers else "")
    )
    _comparison(tr, [r for r in _SESSION_RECORDS if "peer_ok" in r])
    for r in shown:
        tr.write_line(f"FAILED {r['nodeid']}: {r['function']} [{r['backend']}] seed {r['seed']}")
        if r["counterexample"]:
            for k, a in enumerate(r["counterexample"]):
                tr.write_line(f"    arg{k}: {a['dtype']}{a['shape']} = {a['values']}")
        if r.get("pair"):
            shown = "  ".join(f"{k} = {v:.6g}" for k, v in r["values"].items())
            tr.write_line(f"    {r['pair']}: {shown}")
        if r["error"] is not None:
            tr.write_line(f"    |error| {r['error']:.3g} > bound {r['bound']:.3g}")
        if r["npz"]:
            tr.write_line(f"    inputs: {r['npz']}")
        if r.get("reproduce_test"):
            tr.write_line(f"    reproduce: {r['reproduce_test']}")


def _recorded(tr: Any, directory: Path) -> None:
    """--gradverify-replace=record: how many calls of how many functions were written, and where."""
    import json

    calls = [json.loads(line) for f in sorted(directory.glob("calls-*.jsonl")) for line in f.read_text().splitlines()]
    tr.section("gradverify")
    functions = {(c["function"].get("path") or c["function"].get("name")) for c in calls}
    importable = {c["function"]["path"] for c in calls if c["function"].get("path")}
    tr.write_line(
        f"record: {len(calls)} checker call(s) of {len(functions)} function(s) ({len(importable)} importable) "
        f"in {directory}"
    )


def _comparison(tr: Any, pairs: list[dict[str, Any]]) -> None:
    """--gradverify-replace=compare: the calls where the two checkers disagree, and their times."""
    if not pairs:
        return
    differ = [r for r in pairs if r["peer_ok"] != r["gradverify_ok"]]
    peer_time = sum(r["peer_seconds"] for r in pairs)
    gv_time = sum(r["gradverify_seconds"] for r in pairs)
    tr.write_line(
        f"compare: {len(pairs)} call(s), {len(differ)} verdict(s) differ; time: original {peer_time:.2f} s, "
        f"gradverify {gv_time:.2f} s ({gv_time / peer_time if peer_time else float('nan'):.2f}x)"
    )
    if differ:
        tr.write_line("  test | function | original | gradverify")
    for r in differ:
        original = "passed" if r["peer_ok"] else f"failed ({r['peer_said']})"
        ours = "passed" if r["gradverify_ok"] else f"failed ({_finding_of(r)})"
        tr.write_line(f"  {r['nodeid']} | {r['call']}: {r['function']} | {original} | {ours}")


def _finding_of(record: dict[str, Any]) -> str:
    if record.get("pair") and record.get("error") is not None:
        return f"{record['pair']}: |error| {record['error']:.3g} > bound {record['bound']:.3g}"
    said = record.get("where") or record.get("gradverify_said") or ""
    return said.splitlines()[0][:200] if said else "see the report"


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    if hasattr(config, "workerinput"):  # an xdist worker: the controller writes
        return
    settings = config.stash.get(_settings_key, None)
    if settings is None or not settings.report or not _SESSION_RECORDS:
        return
    # the session's report: gradverify-pytest.json, .md, .xml (JUnit) and .html, as the command writes its own
    report = session_report.build(
        _SESSION_RECORDS, seed=settings.seed, max_examples=settings.max_examples, profile=settings.profile
    )
    session_report.write(report, settings.report)
