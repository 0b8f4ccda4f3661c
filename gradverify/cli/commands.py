"""The subcommands other than a sweep: ``list``, ``report``, ``write`` and
``triage junit`` / ``triage rerun``."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from .. import _io, ops
from .._errors import ArgumentValueError, UsageError, explain
from .._sweep import cases as _sweep, reports as _reports
from .._sweep.cases import EXAMPLES, NORMS
from .._triage import junit as _triage_junit, node as _triage_node, render as _render, rerun as _triage_rerun
from .._triage.verdict import Verdict
from .paths import shown

__all__ = ["junit", "list_", "report", "rerun", "write"]


# -- write ------------------------------------------------------------------------------------
def write(args: argparse.Namespace) -> int:
    from .._write import write as _write  # (the command's other parts do not need it)

    if args.max_examples < 1:
        raise UsageError(explain("--max-examples", "an int >= 1", str(args.max_examples), "e.g. --max-examples 25"))
    try:
        written = _write(args.target, args.output, args.max_examples, args.except_)
    except ArgumentValueError as e:
        raise UsageError(str(e)) from None
    print(written.summary())
    return 0


# -- list / report ------------------------------------------------------------------------------
def _fused_keeps(a: Any) -> str:
    """What the fused torch rule of activation ``a`` keeps for the gradient."""

    if ops.constant_slope(a) is not None:
        return "nothing"
    if ops.two_valued(a) is not None:
        return "bits"
    if a.saves_output:
        return "output"
    return "z = x + b (torch's own function)" if a.name in ops.TORCH_FUNCTION_IS_RULE else "x and b"


def list_() -> int:
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


def report(args: argparse.Namespace) -> int:
    data = _reports.load(args.file)
    out = Path(args.output) if args.output else Path(args.file).with_name(_reports.FILES[args.format])
    if out.is_dir():
        raise UsageError(explain("--output", "a file to write", f"the directory {shown(out)!r}", "name a file in it"))
    _io.atomic_write(out, _reports.RENDER[args.format](data))
    print(f"wrote {shown(out)}")
    return 0


# -- triage -------------------------------------------------------------------------------------
def junit(args: argparse.Namespace) -> int:
    """Exit 0 when no test failed in any run, 1 otherwise."""
    runs = _triage_junit.read_junit(args.files)
    rows = _triage_junit.triage_junit(runs)
    print(_render.junit_markdown(rows, len(runs)), end="")
    if args.report:
        _render.write_junit(args.report, runs, rows)
        print(f"report: {shown(Path(args.report) / 'triage.md')}, .json, .html")
    return 1 if any(r.failures for r in rows) else 0


def _threads(text: str) -> list[int]:
    try:
        ts = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        ts = []
    if not ts or min(ts) < 1:
        raise UsageError(explain("--threads", "positive integers separated by commas", repr(text), "e.g. 1,4"))
    return ts


def _write_rerun_report(directory: str, records: list[dict[str, Any]]) -> None:
    _render.write_rerun(directory, records)
    print(f"  report: {shown(Path(directory) / 'triage-rerun.md')}, .json, .html")


def _node(args: argparse.Namespace) -> int:
    seeds = 4 if args.seeds is None else args.seeds
    threads = _threads(args.threads)
    records = []
    for t in _triage_node.triage_node(args.target, seeds=seeds, threads=threads, max_examples=args.max_examples):
        reproduce = (
            f"gradverify triage rerun {t['test']} --seeds {seeds} --threads {args.threads} "
            f"--max-examples {args.max_examples}"
        )
        print(_render.node_text(t, threads, reproduce))
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
        raise UsageError(
            explain(f"triage rerun {args.target}", "a node id that collects tests", "none", "pytest --collect-only")
        )
    if args.report:
        _write_rerun_report(args.report, records)
    return 0 if all(r["verdict"] == Verdict.PASSES for r in records) else 1


def rerun(args: argparse.Namespace) -> int:
    """Exit 0 when the target passes everywhere, 1 with any other verdict."""
    if _triage_node.is_node_id(args.target):
        return _node(args)
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
        raise UsageError(str(e)) from e
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
        _write_rerun_report(args.report, [_render.rerun_record(case.id, r, reproduce)])
    return 0 if r.ok else 1
