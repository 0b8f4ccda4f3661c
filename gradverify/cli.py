"""The ``gradverify`` command.

    gradverify check TARGET... [--backend B] [--impl I] [--dtype D...] [--seed S]
                     [--max-examples N] [--order 1|2] [--report DIR] [--format md,json,junit,html]
                     [--scheduler ADDRESS | --workers N] [--shard K/N]
    gradverify merge FILE... [--report DIR] [--format ...]
    gradverify list
    gradverify triage junit FILE.xml... [--report DIR]
    gradverify triage rerun TARGET|NODE_ID [--seeds S] [--threads T...] [--report DIR]
    gradverify report FILE.json [--format html|md] [--output PATH]

A target is a bundled op (``bias_act``, ``bias_act:swish``, ``layer_norm``,
``all``), a built-in example (``examples``, ``example:seed-bug``) or a user's
``module:function`` with ``--strategy module:name``. Each target x backend x
impl x dtype is one case run through ``gv.verify``.

Exit status: 0 all passed, 1 a gradient check failed, 2 usage or internal error.
The last line reads ``N passed, N failed`` (plus skipped/inconclusive counts).
gradverify.ops is imported by the subcommands that use it (with the
strategies it costs ~90 ms of start-up, and Hypothesis).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import _io, ops
from ._audit import command as _audit_command
from ._errors import ArgumentValueError, UsageError
from ._sweep import cases as _sweep, distribute, reports as _reports
from ._sweep.cases import EXAMPLES, NORMS
from ._sweep.reports import FORMATS
from ._triage import junit as _triage_junit, node as _triage_node, render as _reports_triage, rerun as _triage_rerun
from ._triage.verdict import Verdict
from ._verify import MAX_SHRINKING_SECONDS
from .backends import BACKENDS


class _Usage(Exception):
    pass


def _formats(text: str) -> list[str]:

    fs = [f.strip() for f in text.split(",") if f.strip()]
    bad = [f for f in fs if f not in FORMATS]
    if bad or not fs:
        raise argparse.ArgumentTypeError(f"expected some of {','.join(FORMATS)}; found {text!r}")
    return fs


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gradverify", description="Prove gradients right, or show where they are wrong.")
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("check", help="verify bundled ops, examples, or module:function targets")
    c.add_argument(
        "targets",
        nargs="+",
        metavar="TARGET",
        help="all, bias_act[:NAME], a normalization, an example, module:fn or module:fn=module:strategy",
    )
    c.add_argument("--backend", nargs="+", choices=(*BACKENDS, "all"), default=["all"], help="default: all")
    c.add_argument("--impl", choices=("reference", "fused", "both"), default="both")
    c.add_argument("--dtype", nargs="+", choices=("float64", "float32", "float16", "bfloat16"), default=["float64"])
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--max-examples", type=int, default=10)
    c.add_argument("--order", type=int, default=1, help="1; 2 (or any N) also checks the derivatives of the rules")
    c.add_argument("--batched", action="store_true", help="also check the JVP and VJP under vmap (torch, jax)")
    c.add_argument(
        "--max-shrinking-seconds",
        type=float,
        default=MAX_SHRINKING_SECONDS,
        metavar="S",
        help=f"stop shrinking a failing case after S seconds (default {MAX_SHRINKING_SECONDS:g})",
    )
    c.add_argument(
        "--strategy",
        metavar="MODULE:NAME",
        action="append",
        default=[],
        help="the argument strategy of a module:function target (one per such target, in order; one serves all)",
    )
    c.add_argument("--report", metavar="DIR", default="reports", help="where reports go (default: reports/)")
    c.add_argument("--no-report", action="store_true", help="write no files")
    c.add_argument("--format", type=_formats, default=["md", "json", "junit", "html"], help="md,json,junit,html")
    c.add_argument("--workers", type=int, default=1, help="local worker processes (spawned; default 1: this process)")
    c.add_argument("--scheduler", metavar="tcp://HOST:PORT", help="run the cases on this Dask cluster (the dask extra)")
    c.add_argument("--shard", metavar="K/N", help="run every N-th case from the K-th (CI matrix jobs; see merge)")
    m = sub.add_parser("merge", help="join results files of shards into one report")
    m.add_argument("files", nargs="+", metavar="FILE", help="results.jsonl (or report.json) of each shard")
    m.add_argument(
        "--report", metavar="DIR", default="reports", help="where the merged report goes (default: reports/)"
    )
    m.add_argument("--format", type=_formats, default=["md", "json", "junit", "html"], help="md,json,junit,html")
    sub.add_parser("list", help="the bundled ops and activations, with their kinks and conventions")
    t = sub.add_parser("triage", help="tell a real gradient bug from a flaky test")
    tsub = t.add_subparsers(dest="mode", required=True)
    tj = tsub.add_parser("junit", help="JUnit XML from several CI runs: flip rates and separating environment fields")
    tj.add_argument("files", nargs="+", metavar="FILE.xml")
    tj.add_argument("--report", metavar="DIR", default=None, help="also write triage.md, .json and .html here")
    tr = tsub.add_parser("rerun", help="rerun a check target across seeds, thread counts and repeated calls")
    tr.add_argument(
        "target",
        metavar="TARGET",
        help="a pytest node id, bias_act:NAME, a normalization, an example, or module:function",
    )
    tr.add_argument("--backend", choices=BACKENDS, default="torch")
    tr.add_argument("--impl", choices=("reference", "fused"), default="fused")
    tr.add_argument("--dtype", default="float64")
    tr.add_argument("--seeds", type=int, default=None, help="default: 8 for a check target, 4 for a node id")
    tr.add_argument("--threads", default="1,4", help="thread counts, comma-separated (default: 1,4)")
    tr.add_argument("--max-examples", type=int, default=20)
    tr.add_argument("--strategy", metavar="MODULE:NAME")
    tr.add_argument("--report", metavar="DIR", default=None, help="write triage-rerun.md/.json/.html here")
    _audit_command.add_parser(sub)
    w = sub.add_parser(
        "write",
        help="write property-based tests from recorded checker calls, or from a package's custom rules",
        description="Write one pytest module of property-based gradient tests: from the calls a suite made "
        "(record them with pytest --gradverify-replace=record), or from the autograd.Functions, custom_jvp / "
        "custom_vjp functions and modules a package defines (shapes read from jaxtyping annotations).",
        epilog="examples:\n  pytest --gradverify-replace=record && gradverify write gradverify-records "
        "-o tests/test_gradients_properties.py\n  gradverify write mylib -o tests/test_mylib_properties.py",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    w.add_argument("target", metavar="RECORDS|PACKAGE", help="a records directory (or calls-*.jsonl), or a package")
    w.add_argument(
        "-o", "--output", metavar="FILE", default="tests/test_gradients_properties.py",
        help="the module to write (default: tests/test_gradients_properties.py)",
    )  # fmt: skip
    w.add_argument("--max-examples", type=int, default=25, help="drawn inputs per written test (default: 25)")
    w.add_argument(
        "--except", dest="except_", nargs="+", default=[], metavar="EXCEPTION",
        help="exceptions fn raises at inputs outside its contract (a builtin name or package.module.Error): "
        "the written tests reject such drawn inputs (default: none)",
    )  # fmt: skip
    r = sub.add_parser("report", help="render a saved JSON report")
    r.add_argument("file", metavar="FILE.json")
    r.add_argument("--format", choices=("html", "md"), default="html")
    r.add_argument("--output", metavar="PATH", help="default: next to FILE, report.<format>")
    return p


# -- write ------------------------------------------------------------------------------------
def _write(args: argparse.Namespace) -> int:
    from ._write import write  # (the command's other parts do not need it)

    if args.max_examples < 1:
        raise _Usage(f"--max-examples: expected an int >= 1; found {args.max_examples}. Fix: e.g. --max-examples 25")
    try:
        written = write(args.target, args.output, args.max_examples, args.except_)
    except ArgumentValueError as e:
        raise _Usage(str(e)) from None
    print(written.summary())
    return 0


# -- check ------------------------------------------------------------------------------------
def _progress(total: int) -> Any:
    """A rich progress bar on a terminal's stderr; nothing otherwise."""
    if not sys.stderr.isatty():
        return None
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    )
    bar.start()
    task = bar.add_task("verifying", total=total)
    return lambda: bar.advance(task), bar.stop


def _line(rec: dict[str, Any]) -> str:
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


def _check(args: argparse.Namespace) -> int:

    backends = BACKENDS if "all" in args.backend else tuple(dict.fromkeys(args.backend))
    impls = ("reference", "fused") if args.impl == "both" else (args.impl,)
    if args.max_examples < 1:
        raise _Usage(f"--max-examples: expected an int >= 1; found {args.max_examples}")
    if args.order < 1:
        raise _Usage(f"--order: expected an int >= 1; found {args.order}. Fix: --order 1 checks first derivatives")
    if not args.max_shrinking_seconds >= 0:
        raise _Usage(f"--max-shrinking-seconds: expected a number of seconds >= 0; found {args.max_shrinking_seconds}")
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
        raise _Usage(str(e)) from e
    if args.scheduler and args.workers != 1:
        raise _Usage(
            "--workers and --scheduler: expected one of them; found both. Fix: the cluster has its own workers"
        )
    items = distribute.shard(cases, args.shard)
    report_dir = None if args.no_report else args.report
    command = "gradverify check " + " ".join(sys.argv[2:] if sys.argv[1:2] == ["check"] else args.targets)
    with _io.ReportDirectory(report_dir) if report_dir is not None else contextlib.nullcontext() as out:
        staging = None if out is None else out.staging
        results = None
        if staging is not None:
            results = distribute.ResultsFile(staging / "results.jsonl", command=command, seed=args.seed)
        bar = _progress(len(items))

        def arrived(rec: dict[str, Any]) -> None:
            if staging is not None:
                _sweep.materialize(rec, staging)
                results.add(rec)
            print(_line(rec), flush=True)
            if rec["status"] == "failed":
                print("\n".join("      " + ln for ln in rec["failure"]["report"].splitlines()), flush=True)
            if bar is not None:
                bar[0]()

        interrupted, records = False, []
        try:
            try:
                records = distribute.execute(items, workers=args.workers, scheduler=args.scheduler, on_record=arrived)
            except distribute.Interrupted as e:  # SIGINT or SIGTERM: the report of what finished
                records, interrupted = e.records, True
            finally:
                if bar is not None:
                    bar[1]()
                if results is not None:
                    results.close()
            return _finish(records, out, args.format, command, args.seed, interrupted=interrupted)
        except KeyboardInterrupt:
            # (landed once the sweep was over: while its files closed or its
            # reports were written) the report of every case, said to be cut
            if out is None or out.committed:
                raise
            return _finish(records, out, args.format, command, args.seed, interrupted=True)


class _Signals:
    """SIGINT and SIGTERM (a CI job's timeout, ``docker stop``) while the
    command runs: a KeyboardInterrupt where the command is, so that a sweep
    writes the report of what finished - never inside a finalizer or a
    ``__del__`` (which would print it and swallow it: the command would go
    on and exit 0), where it is put off until that code returns. Either way
    the command exits 130. ``program``: the process ends with the command;
    a signal after it (the interpreter shutting down) exits 130 at once."""

    def __init__(self, program: bool) -> None:
        self.program = program
        self.received = False
        self.done = False
        self.previous: dict[int, Any] = {}

    def __enter__(self) -> _Signals:
        import signal
        import threading

        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self.previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: Any) -> None:
        import signal

        self.done = True
        if not self.program:
            for sig, handler in self.previous.items():
                signal.signal(sig, handler)

    def _handle(self, signum: int, frame: Any) -> None:
        self.received = True
        if self.done:
            import os

            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(Exception):
                    stream.flush()
            os._exit(130)
        if _in_finalizer(frame):
            import _thread
            import threading

            # (delivered again shortly: by then the finalizer has returned)
            threading.Timer(0.01, _thread.interrupt_main).start()
            return
        raise KeyboardInterrupt


def _in_finalizer(frame: Any) -> bool:
    """Whether ``frame`` runs inside a weakref finalizer, a ``__del__`` or a
    garbage-collector callback (Hypothesis registers one): code whose
    exceptions Python reports as ignored and drops."""
    import gc
    import weakref

    finalize = weakref.finalize.__call__.__code__
    callbacks = {getattr(cb, "__code__", None) for cb in gc.callbacks}
    while frame is not None:
        if frame.f_code is finalize or frame.f_code.co_name == "__del__" or frame.f_code in callbacks:
            return True
        frame = frame.f_back
    return False


def _finish(
    records: list[dict[str, Any]],
    out: _io.ReportDirectory | None,
    formats: list[str],
    command: str,
    seed: int,
    interrupted: bool = False,
) -> int:
    """Write the reports into the staging directory and put it in place;
    the summary line; the exit status (130 when interrupted)."""
    totals = _sweep.summary(records)
    if out is not None:
        report = _reports.build(records, command=command, seed=seed, interrupted=interrupted)
        written = _reports.write(report, out.staging, formats)
        out.commit()
        print("reports: " + ", ".join(str(out.shown / Path(p).name) for p in written))
    if interrupted:
        totals["interrupted"] = 1
    print(_reports.totals_line(totals))
    if interrupted:
        return 130
    if totals["error"]:
        return 2
    return 1 if totals["failed"] else 0


def _merge(args: argparse.Namespace) -> int:
    import warnings

    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        records, seed = distribute.read_results(args.files)
    for w in said:
        print(f"gradverify: warning: {w.message}", file=sys.stderr)
    with _io.ReportDirectory(args.report) as out:
        for rec in records:
            _sweep.materialize(rec, out.staging)
        print(f"merged {len(records)} case(s) from {len(args.files)} file(s)")
        return _finish(records, out, args.format, "gradverify merge " + " ".join(map(str, args.files)), seed)


# -- list / report --------------------------------------------------------------------------------
def _fused_keeps(a: Any) -> str:
    """What the fused torch rule of activation ``a`` keeps for the gradient."""

    if ops.constant_slope(a) is not None:
        return "nothing"
    if ops.two_valued(a) is not None:
        return "bits"
    if a.saves_output:
        return "output"
    return "z = x + b (torch's own function)" if a.name in ops.TORCH_FUNCTION_IS_RULE else "x and b"


def _list() -> int:

    print("bias_act activations (bias_act:NAME):")
    for a in ops.ACTIVATIONS:
        kinks = a.kink_points()
        ks = ", ".join(
            f"{'jump' if k.jump else 'kink'} at {at:g} (left {k.left(a.params):g}, right {k.right(a.params):g}, "
            f"chosen {k.chosen(a.params):g})"
            for at, k in kinks
        )
        params = ", ".join(f"{k}={v:g}" for k, v in a.params.items())
        aliases = f" (aliases: {', '.join(a.aliases)})" if a.aliases else ""
        saves = _fused_keeps(a)
        print(f"  {a.name}{aliases}{' [' + params + ']' if params else ''}: {a.doc}")
        print(f"      kinks: {ks or 'none'}; fused rule keeps: {saves}" + ("; random per call" if a.random else ""))
    print("normalizations (torch.nn.functional conventions; fused rules keep xhat and rstd):")
    for n in NORMS:
        print(f"  {n}")
    print("examples: " + ", ".join(f"{k} ({v})" for k, v in EXAMPLES.items()))
    return 0


def _junit_command(args: argparse.Namespace) -> int:
    """Exit 0 when no test failed in any run, 1 otherwise."""
    runs = _triage_junit.read_junit(args.files)
    rows = _triage_junit.triage_junit(runs)
    print(_reports_triage.junit_markdown(rows, len(runs)), end="")
    if args.report:
        _reports_triage.write_junit(args.report, runs, rows)
    return 1 if any(r.failures for r in rows) else 0


def _threads(text: str) -> list[int]:
    try:
        ts = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        ts = []
    if not ts or min(ts) < 1:
        raise _Usage(f"--threads: expected positive integers separated by commas, e.g. 1,4; found {text!r}")
    return ts


def _write_rerun_report(directory: str, records: list[dict[str, Any]]) -> None:
    _reports_triage.write_rerun(directory, records)
    print(f"  report: {directory}/triage-rerun.md, .json, .html")


def _node_command(args: argparse.Namespace) -> int:

    seeds = 4 if args.seeds is None else args.seeds
    threads = _threads(args.threads)
    records = []
    for t in _triage_node.triage_node(args.target, seeds=seeds, threads=threads, max_examples=args.max_examples):
        reproduce = (
            f"gradverify triage rerun {t['test']} --seeds {seeds} --threads {args.threads} "
            f"--max-examples {args.max_examples}"
        )
        print(_reports_triage.node_text(t, threads, reproduce))
        records.append(
            {
                "target": t["test"],
                "verdict": t["verdict"],
                "runs": t["runs"],
                "calls": t["calls"],
                "reproduce": reproduce,
            }
        )
    if not records:
        raise _Usage(f"triage rerun {args.target}: expected a node id that collects tests; found none")
    if args.report:
        _write_rerun_report(args.report, records)
    return 0 if all(r["verdict"] == Verdict.PASSES for r in records) else 1


def _rerun_command(args: argparse.Namespace) -> int:
    """Exit 0 when the target passes everywhere, 1 with any other verdict."""

    if _triage_node.is_node_id(args.target):
        return _node_command(args)
    seeds = 8 if args.seeds is None else args.seeds

    (case,) = _sweep.cases(
        [args.target],
        backends=(args.backend,),
        impls=(args.impl,),
        dtypes=(args.dtype,),
        strategy=args.strategy,
        max_examples=args.max_examples,
    )
    try:
        fn, strategy = _sweep.build(case)
    except _sweep.Skip as e:
        raise _Usage(str(e)) from e
    kinks, position = [], None
    if case.activation is not None:
        kinks = [k for k, _ in ops.activation(case.activation).kink_points()]
        position = lambda x, b=None: x if b is None else x + b  # noqa: E731  (where the activation is evaluated)
    r = _triage_rerun.rerun(
        fn,
        strategy,
        seeds=seeds,
        max_examples=args.max_examples,
        kinks=kinks,
        position=position,
        threads=_threads(args.threads),
    )
    print(f"{case.id}: {r.verdict}")
    print("\n".join(str(r).splitlines()[1:]))
    reproduce = (
        f"gradverify triage rerun {args.target} --backend {args.backend} --impl {args.impl} "
        f"--dtype {args.dtype} --seeds {seeds} --max-examples {args.max_examples} --threads {args.threads}"
        + (f" --strategy {args.strategy}" if args.strategy else "")
    )
    print(f"  reproduce: {reproduce}")
    if args.report:
        _write_rerun_report(args.report, [_reports_triage.rerun_record(case.id, r, reproduce)])
    return 0 if r.ok else 1


def _report(args: argparse.Namespace) -> int:
    from pathlib import Path

    data = _reports.load(args.file)
    out = Path(args.output) if args.output else Path(args.file).with_name(_reports.FILES[args.format])
    if out.is_dir():
        raise _Usage(f"--output: expected a file to write; found the directory {str(out)!r}. Fix: name a file in it")
    _io.atomic_write(out, _reports.RENDER[args.format](data))
    print(f"wrote {out}")
    return 0


def _current_directory_importable() -> None:
    """``module:function`` targets import from the current directory, as under
    ``python -m`` and pytest: the console script's own ``sys.path[0]`` is its
    ``bin/`` directory. Spawned ``--workers`` inherit the path; Dask workers
    need the module importable where they run."""
    import os

    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)


def run() -> None:
    """The ``gradverify`` program: ``main`` with the process's arguments, and
    its exit status - 130 for a signal that lands at any point, the
    interpreter's shutdown included."""
    raise SystemExit(main(program=True))


def main(argv: Sequence[str] | None = None, program: bool = False) -> int:
    """The command on ``argv`` (default: the process's); its exit status.
    ``program``: the process ends with it (see ``run``)."""
    with _Signals(program) as signals:
        code = _main(argv)
    return 130 if signals.received else code


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0) and 2

    _current_directory_importable()
    try:
        if args.command == "check":
            return _check(args)
        if args.command == "merge":
            return _merge(args)
        if args.command == "list":
            return _list()
        if args.command == "audit":
            return _audit_command.main(args, "gradverify " + " ".join(sys.argv[1:] if argv is None else argv))
        if args.command == "triage":
            return _junit_command(args) if args.mode == "junit" else _rerun_command(args)
        if args.command == "write":
            return _write(args)
        return _report(args)
    except (_Usage, UsageError) as e:
        print(f"gradverify: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # outside a sweep (which writes what finished): nothing to keep
        print("gradverify: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # gradverify's own bug: say so, with what to report, exit 2
        import traceback

        traceback.print_exc()
        print(
            f"gradverify: internal error: {type(e).__name__}: {e}\n"
            "This is a bug in gradverify, not in your input: please report it with the traceback above "
            "and the command that ran.",
            file=sys.stderr,
        )
        return 2


if __name__ == "__main__":
    run()
