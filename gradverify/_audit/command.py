"""The ``gradverify audit`` command: its arguments and what it prints."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from . import FRAMEWORKS, AuditInterrupted, audit, merge, opinfo, report as _report

__all__ = ["add_parser", "main"]


def _formats(text: str) -> list[str]:
    return [f.strip() for f in text.split(",") if f.strip()]


def add_parser(sub: Any) -> None:
    a = sub.add_parser(
        "audit",
        help="check a framework's whole operator database (torch's OpInfos) and report what is wrong",
        description="gradverify audit torch [options], or gradverify audit merge FILE... --report DIR",
        epilog="examples:\n"
        "  gradverify audit torch --ops sin cos --report audit\n"
        "  gradverify audit --shard 1/2 --report a1 torch   # and --shard 2/2 --report a2, then:\n"
        "  gradverify audit merge a1/results.jsonl a2/results.jsonl --report audit",
    )
    a.add_argument("framework", choices=(*FRAMEWORKS, "merge"), help="torch; or merge to join shards' results")
    a.add_argument("files", nargs="*", metavar="FILE", help="merge: the shards' results.jsonl")
    a.add_argument("--ops", nargs="+", metavar="NAME", help="OpInfo names or patterns (default: all)")
    a.add_argument("--dtype", nargs="+", default=list(opinfo.DTYPES), help="the dtypes of the samples checked")
    a.add_argument("--order", type=int, default=1, help="1; 2 (or any N) also checks the derivatives of the rules")
    a.add_argument("--batched", action="store_true", help="also check the JVP and VJP under vmap")
    a.add_argument("--device", default="cpu", help="a torch device")
    a.add_argument("--samples", type=int, default=4, help="samples checked per operator and dtype")
    a.add_argument("--max-size", type=int, default=500, help="most elements of a sample's arguments")
    a.add_argument("--timeout", type=float, default=120.0, help="seconds a sample may take")
    a.add_argument("--workers", type=int, default=1, help="worker processes")
    a.add_argument(
        "--scheduler", metavar="tcp://HOST:PORT", help="run the operators on this Dask cluster (default: none)"
    )
    a.add_argument("--shard", metavar="K/N", help="every N-th operator from the K-th; see merge (default: all)")
    a.add_argument("--seed", type=int, default=0, help="gv.check's seed: its random directions")
    a.add_argument("--database", metavar="MODULE:NAME", help="a list of OpInfos to audit (default: torch's op_db)")
    a.add_argument("--report", metavar="DIR", default="audit", help="results, reports, reproducers")
    a.add_argument("--format", type=_formats, default=list(_report.FORMATS), help="some of md,json,junit,html")
    a.add_argument("--fresh", action="store_true", help="start again instead of resuming DIR's results")
    a.add_argument("--quiet", action="store_true", help="print failures and the totals only")


def _line(rec: dict[str, Any]) -> str:
    mark = {"passed": "pass", "failed": "FAIL", "skipped": "skip"}.get(rec["status"], rec["status"])
    known = " (known)" if rec.get("known") else " (new)" if rec["status"] == "failed" else ""
    extra = f"  {rec['reason'][:100]}" if rec["status"] in ("error", "timeout", "crashed") else ""
    return f"{mark:>12}{known:8} {rec['task']} [{rec['dtype']}] sample {rec['sample']}{extra}"


def main(args: argparse.Namespace, command: str) -> int:
    """Exit status: 0 no new failure, 1 new failures, 130 interrupted (the report of what finished is written)."""
    if args.framework == "merge":
        if not args.files:
            print("gradverify: audit merge: expected the shards' results.jsonl files; found none", file=sys.stderr)
            return 2
        result = merge(args.files, args.report, args.format)
    else:
        if args.files:
            print(f"gradverify: audit {args.framework}: unexpected arguments {args.files}", file=sys.stderr)
            return 2

        def arrived(rec: dict[str, Any]) -> None:
            if not args.quiet or rec["status"] == "failed":
                print(_line(rec), flush=True)

        try:
            result = audit(
                args.framework,
                args.ops,
                dtypes=args.dtype,
                order=args.order,
                batched=args.batched,
                device=args.device,
                samples=args.samples,
                max_size=args.max_size,
                timeout=args.timeout,
                workers=args.workers,
                scheduler=args.scheduler,
                shard=args.shard,
                report=args.report,
                formats=args.format,
                fresh=args.fresh,
                seed=args.seed,
                database=args.database,
                command=command,
                on_record=arrived,
            )
        except AuditInterrupted as e:
            print(_report.totals_line(e.result.report["totals"]))
            print(
                f"gradverify: interrupted; the samples that finished are in {e.directory}/results.jsonl: "
                "the same command again resumes there",
                file=sys.stderr,
            )
            return 130
    print(f"reports: {args.report}/ (" + ", ".join(_report.FILES[f] for f in args.format) + ")")
    print(_report.totals_line(result.report["totals"]))
    for op in result.report["totals"]["new_operators"]:
        print(f"  new: {op}")
    return 0 if result.ok else 1
