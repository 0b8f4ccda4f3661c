"""``gradverify check`` and ``gradverify merge``: a sweep's cases run and
printed as they finish, then one report of them written whole."""

from __future__ import annotations

import argparse
import contextlib
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .. import _io
from .._errors import UsageError, explain
from .._sweep import cases as _sweep, distribute, reports as _reports
from ..backends import BACKENDS
from .paths import shown

__all__ = ["Progress", "check", "failure_text", "finish", "line", "merge"]


class Progress:
    """A rich progress bar on a terminal's stderr (nothing elsewhere) that
    names the case running and its count: ``[3/12] bias_act:swish torch
    fused float64``. With several workers several run at once; it names the
    earliest of them in the matrix's order (a pool starts them in that order)."""

    def __init__(self, items: Sequence[tuple[int, _sweep.Case]], terminal: bool | None = None) -> None:
        self.items = items
        self.done: set[int] = set()
        self._bar: Any = None
        if sys.stderr.isatty() if terminal is None else terminal:
            from rich.console import Console  # (start-up time only a terminal pays)
            from rich.progress import BarColumn, Progress as Bar, TextColumn, TimeElapsedColumn

            self._bar = Bar(
                TextColumn("{task.description}"),
                BarColumn(),
                TimeElapsedColumn(),
                console=Console(stderr=True),
                transient=True,
            )
            self._bar.start()
            self._task = self._bar.add_task(self.label(), total=len(items))

    def label(self) -> str:
        """What the bar says: the count of the case running and its name."""
        n = len(self.items)
        running = next((case for i, case in self.items if i not in self.done), None)
        if running is None:
            return f"[{n}/{n}] done"
        words = (running.target, running.backend, running.impl, running.dtype)
        return f"[{len(self.done) + 1}/{n}] " + " ".join(w for w in words if w and w != "-")

    def advance(self, index: int) -> None:
        """The case at ``index`` in the matrix has finished."""
        self.done.add(index)
        if self._bar is not None:
            self._bar.update(self._task, advance=1, description=self.label())

    def stop(self) -> None:
        if self._bar is not None:
            self._bar.stop()


def line(rec: dict[str, Any]) -> str:
    """A finished case in one line: its status, case, examples and time (or why it was skipped)."""
    mark = {"passed": "PASS ", "failed": "FAIL ", "skipped": "SKIP ", "error": "ERROR"}[rec["status"]]
    where = f"[{rec['backend']}, {rec['impl']}, {rec['dtype']}]" if rec["backend"] != "-" else ""
    tail = (
        f"{rec['examples_run']} example(s)"
        + (f", {rec['inconclusive']} inconclusive" if rec["inconclusive"] else "")
        + (f", error/bound <= {rec['worst_ratio']:.2g}" if rec["status"] == "passed" and rec["worst_ratio"] else "")
        + f" ({rec['seconds']:.2f} s)"
        if rec["status"] in ("passed", "failed")
        else rec["reason"]
    )
    return f"{mark} {rec['target']} {where}  {tail}"


def failure_text(rec: dict[str, Any], report_dir: str | Path | None) -> str:
    """A failed case's report as printed under its line, indented. The
    record's text names the counterexample relative to the report directory
    (report.md is read there, beside it); here the reader stands in the
    current directory, so the files are named from it - and under
    ``--no-report`` there is no file to name."""
    failure = rec["failure"]
    npz = failure["npz"]
    lines = []
    if report_dir is None:
        for ln in failure["report"].splitlines():
            if npz not in ln:
                lines.append(ln)
            elif ln.lstrip().startswith("saved:"):  # (the line that loads it goes: nothing was saved)
                indent = ln[: len(ln) - len(ln.lstrip())]
                lines.append(f"{indent}saved: nothing (--no-report; a --report DIR keeps it, and a script)")
    else:
        here = shown(Path(report_dir) / npz)
        text = failure["report"].replace(npz, here)
        script = shown(Path(report_dir) / failure["script"])
        lines = [*text.splitlines(), f"  reproduce: python {script}  (exits 1 while the failure persists)"]
    return "\n".join("      " + ln for ln in lines)


def check(args: argparse.Namespace, command: str) -> int:
    """Run the sweep; its exit status (see ``finish``)."""
    backends = BACKENDS if "all" in args.backend else tuple(dict.fromkeys(args.backend))
    impls = ("reference", "fused") if args.impl == "both" else (args.impl,)
    if args.max_examples < 1:
        raise UsageError(explain("--max-examples", "an int >= 1", str(args.max_examples), "e.g. --max-examples 10"))
    if args.order < 1:
        raise UsageError(explain("--order", "an int >= 1", str(args.order), "--order 1 checks first derivatives"))
    if not args.max_shrinking_seconds >= 0:
        raise UsageError(
            explain(
                "--max-shrinking-seconds",
                "a number of seconds >= 0",
                str(args.max_shrinking_seconds),
                "e.g. --max-shrinking-seconds 20; 0 keeps the first failure found",
            )
        )
    try:
        cases = _sweep.cases(
            args.targets,
            backends=backends,
            impls=impls,
            dtypes=args.dtype,
            order=args.order,
            seed=args.seed,
            max_examples=args.max_examples,
            strategy=args.strategy,
            batched=args.batched,
            max_shrinking_seconds=args.max_shrinking_seconds,
        )
    except (ValueError, TypeError) as e:
        raise UsageError(str(e)) from e
    if args.scheduler and args.workers != 1:
        raise UsageError(explain("--workers and --scheduler", "one of them", "both", "the cluster has its own workers"))
    items = distribute.shard(cases, args.shard)
    report_dir = None if args.no_report else args.report
    with _io.ReportDirectory(report_dir) if report_dir is not None else contextlib.nullcontext() as out:
        staging = None if out is None else out.staging
        results = None
        if staging is not None:
            results = distribute.ResultsFile(
                staging / "results.jsonl", command=command, seed=args.seed, shard=args.shard
            )
        progress = Progress(items)

        def arrived(rec: dict[str, Any]) -> None:
            if staging is not None:
                _sweep.materialize(rec, staging)
                results.add(rec)
            print(line(rec), flush=True)
            if rec["status"] == "failed":
                print(failure_text(rec, None if out is None else out.shown), flush=True)
            progress.advance(rec["index"])

        interrupted, records = False, []
        try:
            try:
                records = distribute.execute(items, workers=args.workers, scheduler=args.scheduler, on_record=arrived)
            except distribute.Interrupted as e:  # SIGINT or SIGTERM: the report of what finished
                records, interrupted = e.records, True
            finally:
                progress.stop()
                if results is not None:
                    results.close()
            return finish(records, out, args.format, command, args.seed, interrupted=interrupted)
        except KeyboardInterrupt:
            # (landed once the sweep was over: while its files closed or its
            # reports were written) the report of every case, said to be cut
            if out is None or out.committed:
                raise
            return finish(records, out, args.format, command, args.seed, interrupted=True)


def finish(
    records: list[dict[str, Any]],
    out: _io.ReportDirectory | None,
    formats: list[str],
    command: str,
    seed: int,
    interrupted: bool = False,
) -> int:
    """Write the reports into the staging directory and put it in place;
    the summary line; the exit status: 0 all passed, 1 a gradient check
    failed, 2 a case could not run, 130 interrupted."""
    totals = _sweep.summary(records)
    if out is not None:
        report = _reports.build(records, command=command, seed=seed, interrupted=interrupted)
        written = _reports.write(report, out.staging, formats)
        out.commit()
        print("reports: " + ", ".join(shown(out.shown / Path(p).name) for p in written))
    if interrupted:
        totals["interrupted"] = 1
    print(_reports.totals_line(totals))
    if interrupted:
        return 130
    if totals["error"]:
        return 2
    return 1 if totals["failed"] else 0


def merge(args: argparse.Namespace, command: str) -> int:
    """One report of several shards' results; exit status as ``finish``'s."""
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        records, seed = distribute.read_results(args.files)
    for w in said:
        print(f"gradverify: warning: {w.message}", file=sys.stderr)
    with _io.ReportDirectory(args.report) as out:
        for rec in records:
            _sweep.materialize(rec, out.staging)
        print(f"merged {len(records)} case(s) from {len(args.files)} file(s)")
        return finish(records, out, args.format, command, seed)
