"""``gradverify audit``: a framework's whole operator database through gv.check.

``audit("torch")`` takes every OpInfo of PyTorch's ``op_db`` with autograd
support, its sample inputs within a size limit, in float64 and complex128,
and checks each sample in worker processes with a time limit per sample
(see ``workers``). Each record is appended to ``results.jsonl`` in the
report directory as it arrives; an audit run again on the same directory
with the same settings takes the samples recorded there and checks only
the rest, so an interrupted audit resumes where it stopped.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import _io
from .._errors import ArgumentValueError, UsageError, explain
from . import opinfo, report as _report, workers as _workers
from .workers import Interrupted, OnRecord

__all__ = ["AuditInterrupted", "AuditResult", "RESULTS_SCHEMA", "Interrupted", "audit", "merge", "read_results"]

RESULTS_SCHEMA = "gradverify-audit-results/1"
FRAMEWORKS = ("torch",)


@dataclass(frozen=True)
class AuditResult:
    """An audit's records and its report (the dict ``report.json`` holds)."""

    report: dict[str, Any]

    @property
    def samples(self) -> list[dict[str, Any]]:
        return self.report["samples"]

    @property
    def operators(self) -> list[dict[str, Any]]:
        return self.report["operators"]

    @property
    def new(self) -> list[dict[str, Any]]:
        """Failed samples PyTorch's own tests do not expect to fail."""
        return [r for r in self.samples if r["status"] == "failed" and not r.get("known")]

    @property
    def known(self) -> list[dict[str, Any]]:
        return [r for r in self.samples if r["status"] == "failed" and r.get("known")]

    @property
    def ok(self) -> bool:
        return not self.new

    def verdict(self, op: str, dtype: str = "float64") -> str:
        """The verdict of one operator (``name`` or ``name.variant``) in ``dtype``."""
        for o in self.operators:
            if o["op"] == op and o["dtype"] == dtype:
                return o["verdict"]
        raise KeyError(f"{op} [{dtype}] is not in this audit")

    def __str__(self) -> str:
        return _report.to_markdown(self.report)


class AuditInterrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM during an audit: ``result`` holds the samples that
    finished (written to ``directory`` when the audit had one: the same audit
    run again there resumes)."""

    def __init__(self, result: AuditResult, directory: Path | None) -> None:
        super().__init__(f"audit interrupted after {len(result.samples)} sample(s)")
        self.result, self.directory = result, directory


def _config(framework: str, ops: Any, dtypes: Any, shard: str | None, **options: Any) -> dict[str, Any]:
    """What makes two runs one audit (the shard aside): resumed and merged only among equals."""
    import torch

    return {
        "framework": framework,
        "database": options.pop("database"),
        "torch": torch.__version__,
        "ops": list(ops) if ops else None,
        "dtypes": list(dtypes),
        **options,
        "shard": shard,
    }


def read_results(path: str | Path) -> tuple[dict[str, Any], list[dict[str, Any]], bool]:
    """An audit's ``results.jsonl``: its header, its records (a last line cut
    short by a killed run is left out; every complete record is kept) and
    whether the run finished (its last line says so)."""
    p = Path(path)
    try:
        parsed, _ = _io.json_lines(p.read_text())
    except ValueError as e:
        raise ArgumentValueError(
            explain("results file", "JSON lines written by gradverify audit", f"{p}: {e}", "--fresh")
        ) from e
    head = parsed[0] if parsed else {}
    if not isinstance(head, dict) or head.get("schema") != RESULTS_SCHEMA:
        raise ArgumentValueError(
            explain("results file", f"a {RESULTS_SCHEMA} header", f"{p}", "pass an audit's results.jsonl, or --fresh")
        )
    records = [r for r in parsed[1:] if isinstance(r, dict) and {"task", "dtype", "sample", "status"} <= set(r)]
    return head, records, any(isinstance(r, dict) and r.get("complete") is True for r in parsed[1:])


def _previous(directory: Path, config: dict[str, Any]) -> list[dict[str, Any]]:
    """The records an earlier run of this audit left in ``directory`` (its
    committed results, or those of a run killed before it committed)."""
    found: dict[tuple[str, str, int], dict[str, Any]] = {}
    paths = [directory / "results.jsonl", *sorted(directory.parent.glob(f".{directory.name}.staging-*/results.jsonl"))]
    for path in paths:
        if not path.is_file():
            continue
        try:
            head, records, _ = read_results(path)
        except ArgumentValueError:
            if path.parent == directory:
                raise
            continue  # (a killed run's staging file cut before its header: nothing to take)
        if head.get("config") != config:
            if path.parent == directory:
                raise UsageError(
                    explain(
                        "--report",
                        "the results of this same audit to resume (or a directory of its own)",
                        f"{path} from another audit ({head.get('command')})",
                        "pass --fresh to start again, or another --report directory",
                    )
                )
            continue
        for r in records:
            if r["sample"] >= 0:
                found.setdefault(_workers.key(r), r)
    return list(found.values())


def _counted(record: dict[str, Any]) -> bool:
    """Whether a sample's record counts among its task's ``samples``."""
    return bool(record.get("counted", record["status"] != "skipped"))


def audit(
    framework: str = "torch",
    ops: Sequence[str] | None = None,
    *,
    dtypes: Sequence[str] = opinfo.DTYPES,
    order: int = 1,
    batched: bool = False,
    device: str = "cpu",
    samples: int = 4,
    max_size: int = 500,
    timeout: float = 120.0,
    workers: int = 1,
    scheduler: str | None = None,
    shard: str | None = None,
    report: str | Path | None = None,
    formats: Sequence[str] = _report.FORMATS,
    fresh: bool = False,
    seed: int = 0,
    database: str | None = None,
    command: str | None = None,
    on_record: OnRecord | None = None,
) -> AuditResult:
    """Check every sample of a framework's operator database (``ops``: names
    or patterns) and report it; ``report``: a directory for results.jsonl,
    the reports and the reproducers (resumed unless ``fresh``); ``database``:
    ``MODULE:NAME`` of a list of OpInfos to audit instead of torch's ``op_db``."""
    if framework not in FRAMEWORKS:
        raise ArgumentValueError(explain("framework", " or ".join(FRAMEWORKS), repr(framework), "audit('torch')"))
    if scheduler and workers != 1:
        raise UsageError(explain("--workers and --scheduler", "one of them", "both", "the cluster has its own workers"))
    _workers.check_options(workers, timeout)
    _report.check_formats(formats)
    options = dict(
        device=device, order=order, batched=batched, samples=samples, max_size=max_size, seed=seed, database=database
    )
    tasks = opinfo.tasks(ops, dtypes, **options)
    items = _io.shard(tasks, shard)
    config = _config(framework, ops, dtypes, shard, **options)
    command = command or f"gv.audit({framework!r}, ops={list(ops) if ops else None})"
    if report is None:
        return _run(items, [], None, config, command, formats, workers, scheduler, timeout, on_record)
    # (read before the directory is taken: taking it removes what a killed run left beside it)
    before = [] if fresh else _previous(Path(report).resolve(), config)
    with _io.ReportDirectory(report) as out:
        return _run(items, before, out, config, command, formats, workers, scheduler, timeout, on_record)


def _run(
    items: list[tuple[int, opinfo.Task]],
    before: list[dict[str, Any]],
    out: _io.ReportDirectory | None,
    config: dict[str, Any],
    command: str,
    formats: Sequence[str],
    n_workers: int,
    scheduler: str | None,
    timeout: float,
    on_record: OnRecord | None,
) -> AuditResult:
    index = {(t.op_id, t.dtype): i for i, t in items}
    done: dict[tuple[str, str], dict[int, bool]] = {}
    for r in before:
        done.setdefault((r["task"], r["dtype"]), {})[r["sample"]] = _counted(r)
    results = None
    if out is not None:
        results = open(out.staging / "results.jsonl", "w", encoding="utf-8")  # noqa: SIM115  (closed below)
        results.write(_io.to_json({"schema": RESULTS_SCHEMA, "command": command, "config": config}, indent=None) + "\n")
        for r in before:
            results.write(_io.to_json(r, indent=None) + "\n")
        results.flush()

    def arrived(rec: dict[str, Any]) -> None:
        rec["index"] = index.get((rec["task"], rec["dtype"]), -1)
        if results is not None:
            results.write(_io.to_json(rec, indent=None) + "\n")
            results.flush()
        if on_record is not None:
            on_record(rec)

    work = [(t, done.get((t.op_id, t.dtype), {})) for _, t in items]
    interrupted = False
    try:
        records = _workers.run_tasks(work, workers=n_workers, scheduler=scheduler, timeout=timeout, on_record=arrived)
    except Interrupted as e:
        records, interrupted = e.records, True
    finally:
        if results is not None:
            if not interrupted and not results.closed and sys.exc_info()[0] is None:
                results.write(_io.to_json({"complete": True}, indent=None) + "\n")  # (merge asks for it)
            results.close()
    built = _report.build([*before, *records], command=command, config=config, interrupted=interrupted)
    if out is not None:
        _report.write(built, out.staging, formats)
        out.commit()
    if interrupted:
        raise AuditInterrupted(AuditResult(built), out.shown if out is not None else None)
    return AuditResult(built)


def merge(paths: Sequence[str | Path], report: str | Path, formats: Sequence[str] = _report.FORMATS) -> AuditResult:
    """One report of several shards' results files: every shard of one audit
    (the same settings), each finished."""
    _report.check_formats(formats)
    configs, records, shards = [], {}, []
    for p in paths:
        try:
            head, recs, complete = read_results(p)
        except OSError as e:
            raise ArgumentValueError(
                explain("merge FILE", "an audit's results.jsonl", f"{p} ({e})", "the shards' files")
            ) from e
        if not complete:
            raise ArgumentValueError(
                explain(
                    "merge FILE",
                    "the results of finished shards",
                    f"{p}, whose run did not finish (interrupted or killed)",
                    "run its command again on its report directory (it resumes), then merge",
                )
            )
        config = dict(head.get("config", {}))
        shards.append(config.pop("shard", None))
        configs.append(config)
        for r in recs:
            records.setdefault(_workers.key(r), r)
    if any(c != configs[0] for c in configs):
        raise ArgumentValueError(
            explain("merge FILE...", "shards of one audit (the same settings)", "results of different audits", "rerun")
        )
    _whole(shards)
    config = {**(configs[0] if configs else {}), "shard": None}
    built = _report.build(
        list(records.values()), command="gradverify audit merge " + " ".join(map(str, paths)), config=config
    )
    with _io.ReportDirectory(report) as out:
        with open(out.staging / "results.jsonl", "w", encoding="utf-8") as f:
            f.write(_io.to_json({"schema": RESULTS_SCHEMA, "command": built["command"], "config": config}, indent=None))
            f.write("\n")
            for r in built["samples"]:
                f.write(_io.to_json(r, indent=None) + "\n")
            f.write(_io.to_json({"complete": True}, indent=None) + "\n")
        _report.write(built, out.staging, formats)
        out.commit()
    return AuditResult(built)


def _whole(shards: Sequence[str | None]) -> None:
    """The shards given make one whole audit: every K of one N (or whole runs)."""
    parts = {tuple(int(x) for x in s.split("/")) for s in shards if s is not None}
    if not parts:
        return
    counts = {n for _, n in parts}
    missing = sorted(set(range(1, max(counts) + 1)) - {k for k, _ in parts}) if len(counts) == 1 else []
    if len(counts) > 1 or missing or len(parts) < len(shards):
        found = ", ".join(s or "the whole audit" for s in shards)
        raise ArgumentValueError(
            explain(
                "merge FILE...",
                "every shard K/N of one N, once each",
                found + (f" (missing {', '.join(f'{k}/{max(counts)}' for k in missing)})" if missing else ""),
                "pass the results.jsonl of every shard",
            )
        )
