"""Sweeps at scale: the same records from one process, a spawned process
pool, CI shards merged back, and a real Dask LocalCluster with worker
processes on loopback - one of which is killed mid-sweep."""

from __future__ import annotations

import json
import os
import signal

import pytest

from gradverify import cli
from gradverify._sweep import cases as _sweep, distribute, reports

from ._helpers import OPTIONS, TARGETS, canonical, run, same_files

pytestmark = pytest.mark.slow


def test_the_serial_report_is_the_reference(serial):
    report = canonical(serial)
    assert report["totals"]["failed"] == 2 and report["totals"]["passed"] == 4  # the seed bug, numpy and torch
    assert [c["index"] for c in report["cases"]] == list(range(6))
    lines = (serial / "results.jsonl").read_text().splitlines()
    assert json.loads(lines[0])["schema"] == distribute.RESULTS_SCHEMA and len(lines) == 7  # header + one per case


def test_a_spawned_pool_gives_the_serial_report(serial, tmp_path, capsys):
    code, out = run(capsys, "check", *TARGETS, *OPTIONS, "--workers", "2", "--report", str(tmp_path))
    assert code == 1 and out.splitlines()[-1] == "4 passed, 2 failed"
    assert canonical(tmp_path) == canonical(serial)
    same_files(serial, tmp_path)


def test_shards_merge_into_the_serial_report(serial, tmp_path, capsys):
    shards = []
    for k in (1, 2, 3):
        d = tmp_path / f"shard{k}"
        run(capsys, "check", *TARGETS, *OPTIONS, "--shard", f"{k}/3", "--report", str(d))
        shards.append(str(d / "results.jsonl"))
    assert sum(len(json.loads((tmp_path / f"shard{k}" / "report.json").read_text())["cases"]) for k in (1, 2, 3)) == 6
    merged = tmp_path / "merged"
    code, out = run(capsys, "merge", *shards, "--report", str(merged))
    assert code == 1 and "merged 6 case(s) from 3 file(s)" in out
    assert canonical(merged) == canonical(serial)
    same_files(serial, merged)
    # a shard given twice changes nothing; a report.json merges like its results file
    code, _ = run(
        capsys, "merge", *shards, shards[0], str(tmp_path / "shard2" / "report.json"), "--report", str(merged)
    )
    assert canonical(merged) == canonical(serial)


# -- a real Dask cluster ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cluster():
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address=":0",  # (a free port: None still binds 8787)
    ) as c:
        yield c


def test_a_dask_cluster_gives_the_serial_report(serial, cluster, tmp_path, capsys):
    code, out = run(
        capsys, "check", *TARGETS, *OPTIONS, "--scheduler", cluster.scheduler_address, "--report", str(tmp_path)
    )
    assert code == 1 and out.splitlines()[-1] == "4 passed, 2 failed"
    assert canonical(tmp_path) == canonical(serial)
    same_files(serial, tmp_path)
    lines = (tmp_path / "results.jsonl").read_text().splitlines()
    assert sorted(json.loads(ln)["index"] for ln in lines[1:]) == list(range(6))  # streamed, one line per case


def test_killing_a_worker_mid_sweep_loses_nothing(serial, cluster):
    from distributed import Client

    with Client(cluster.scheduler_address, set_as_default=False) as client:
        pids = client.run(os.getpid)
    victim = sorted(pids.values())[0]
    killed = []

    def on_record(rec):
        if not killed:  # the first result is in: the other worker is mid-case
            os.kill(victim, signal.SIGKILL)
            killed.append(rec["id"])

    cases = _sweep.cases(TARGETS, backends=("numpy", "torch"), impls=("fused",), max_examples=3)
    records = distribute.execute(
        distribute.shard(cases, None), scheduler=cluster.scheduler_address, on_record=on_record
    )
    assert killed
    with pytest.raises(ProcessLookupError):
        os.kill(victim, 0)  # it is gone
    reference = json.loads((serial / "report.json").read_text())["cases"]
    got = [reports.canonical_case(json.loads(reports.to_json(r))) for r in records]
    assert got == [reports.canonical_case(r) for r in reference]


def test_an_unreachable_scheduler_gets_a_clear_error(capsys):
    import dask

    with dask.config.set({"distributed.comm.timeouts.connect": "2s"}):  # (dask's own setting is honoured)
        code = cli.main(
            ["check", "bias_act:relu", "--backend", "numpy", "--no-report", "--scheduler", "tcp://127.0.0.1:9"]
        )
    assert code == 2 and "--scheduler: expected the address of a running Dask scheduler" in capsys.readouterr().err


def test_a_case_alone_gives_its_record_in_the_sweep(serial):
    """Serializable, self-seeded: rebuilt from its record, run on its own."""
    report = json.loads((serial / "report.json").read_text())
    failed = next(c for c in report["cases"] if c["status"] == "failed")
    case = _sweep.case_of(failed)
    assert case == _sweep.Case(**json.loads(json.dumps(_sweep.dataclasses.asdict(case))))
    alone = _sweep.run_case(case)
    alone["index"] = failed["index"]
    alone = json.loads(reports.to_json(alone))  # as the report holds it
    assert reports.canonical_case(alone) == reports.canonical_case(failed)
