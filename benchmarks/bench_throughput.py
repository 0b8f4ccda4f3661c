"""Throughput of `gradverify check all`: serial, a spawned pool of
two processes (`--workers 2`), and a two-worker Dask LocalCluster
(`--scheduler`), one after the other in one run, each a fresh `gradverify`
process. Reports wall time, cases per minute and the speed-up over serial, and
checks that the three reports agree case for case (timings aside).

    python benchmarks/bench_throughput.py [--targets all] [--max-examples 10] [--rounds 1]

Each mode runs --rounds times, interleaved; the table gives medians.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gradverify._sweep import reports as _reports


def run(argv: list[str], report: Path) -> float:
    t0 = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "gradverify.cli", "check", *argv, "--report", str(report), "--format", "json"],
        capture_output=True,
        text=True,
        check=False,
    )
    seconds = time.perf_counter() - t0
    if done.returncode not in (0, 1):
        raise SystemExit(f"gradverify check {' '.join(argv)} exited {done.returncode}:\n{done.stderr[-2000:]}")
    return seconds


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--targets", nargs="+", default=["all"])
    p.add_argument("--max-examples", type=int, default=10)
    p.add_argument("--rounds", type=int, default=1)
    args = p.parse_args()
    from distributed import LocalCluster

    base = [*args.targets, "--max-examples", str(args.max_examples)]
    times: dict[str, list[float]] = {"serial": [], "--workers 2": [], "Dask LocalCluster, 2 workers": []}
    reports: dict[str, dict] = {}
    with (
        tempfile.TemporaryDirectory() as tmp,
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None
        ) as cluster,
    ):
        extra = {
            "serial": [],
            "--workers 2": ["--workers", "2"],
            "Dask LocalCluster, 2 workers": ["--scheduler", cluster.scheduler_address],
        }
        for r in range(args.rounds):
            for k, (mode, more) in enumerate(extra.items()):
                d = Path(tmp) / f"{r}-{k}"
                times[mode].append(run(base + more, d))
                reports[mode] = _reports.canonical(json.loads((d / "report.json").read_text()))
    cases = reports["serial"]["totals"]["cases"]
    same = all(rep == reports["serial"] for rep in reports.values())
    serial = statistics.median(times["serial"])
    print(f"`gradverify check {' '.join(base)}`: {cases} cases; reports identical across modes: {same}")
    print()
    print("| mode | wall time (median) | cases / minute | speed-up |")
    print("|---|---|---|---|")
    for mode, ts in times.items():
        m = statistics.median(ts)
        print(f"| {mode} | {m:.1f} s | {60 * cases / m:.0f} | {serial / m:.2f}x |")
    if not same:
        raise SystemExit("the reports differ between modes")


if __name__ == "__main__":
    main()
