"""Sweeps at scale: the same records from one process, a spawned
process pool, CI shards merged back, and a real Dask LocalCluster with worker
processes on loopback - one of which is killed mid-sweep."""

from __future__ import annotations

import filecmp
import json
import os
import signal

import pytest

from gradverify import cli
from gradverify._sweep import cases as _sweep
from gradverify._sweep import distribute, reports

TARGETS = ["bias_act:relu", "bias_act:tanh", "example:seed-bug"]
OPTIONS = ["--backend", "numpy", "torch", "--impl", "fused", "--max-examples", "3"]


def run(capsys, *argv):
    code = cli.main(list(argv))
    out = capsys.readouterr().out
    return code, out


def canonical(directory):
    return reports.canonical(json.loads((directory / "report.json").read_text()))


@pytest.fixture(scope="module")
def serial(tmp_path_factory):
    directory = tmp_path_factory.mktemp("serial")
    assert cli.main(["check", *TARGETS, *OPTIONS, "--report", str(directory)]) == 1  # the seed bug fails
    return directory


def same_files(a, b):
    """The failures' .npz and .py files, byte for byte."""
    names = sorted(p.name for p in (a / "cases").iterdir())
    assert names == sorted(p.name for p in (b / "cases").iterdir()) and any(n.endswith(".npz") for n in names)
    match, mismatch, errors = filecmp.cmpfiles(a / "cases", b / "cases", names, shallow=False)
    assert not mismatch and not errors


@pytest.mark.slow
def test_the_serial_report_is_the_reference(serial):
    report = canonical(serial)
    assert report["totals"]["failed"] == 2 and report["totals"]["passed"] == 4  # the seed bug, numpy and torch
    assert [c["index"] for c in report["cases"]] == list(range(6))
    lines = (serial / "results.jsonl").read_text().splitlines()
    assert json.loads(lines[0])["schema"] == distribute.RESULTS_SCHEMA and len(lines) == 7  # header + one per case


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


@pytest.mark.slow
def test_a_spawned_pool_gives_the_serial_report(serial, tmp_path, capsys):
    code, out = run(capsys, "check", *TARGETS, *OPTIONS, "--workers", "2", "--report", str(tmp_path))
    assert code == 1 and out.splitlines()[-1] == "4 passed, 2 failed"
    assert canonical(tmp_path) == canonical(serial)
    same_files(serial, tmp_path)


@pytest.mark.slow
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


def test_merge_refuses_shards_of_different_sweeps(serial, tmp_path, capsys):
    other = tmp_path / "other"
    run(capsys, "check", *TARGETS, *OPTIONS, "--seed", "1", "--report", str(other))
    code = cli.main(["merge", str(serial / "results.jsonl"), str(other / "results.jsonl"), "--report", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and "shards of one sweep" in err
    edited = tmp_path / "edited.jsonl"
    lines = (serial / "results.jsonl").read_text().splitlines()
    first = json.loads(lines[1])
    first["status"] = "failed" if first["status"] != "failed" else "passed"
    edited.write_text("\n".join([lines[0], json.dumps(first)]) + "\n")
    code = cli.main(["merge", str(serial / "results.jsonl"), str(edited), "--report", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and f"{first['id']} differs between" in err
    junk = tmp_path / "junk.jsonl"
    junk.write_text("not json\n")
    code = cli.main(["merge", str(junk), "--report", str(tmp_path)])
    assert code == 2 and "expected results.jsonl or report.json" in capsys.readouterr().err
    assert not (tmp_path / "report.json").exists()  # nothing half-merged


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--shard", "3/2"], "--shard: expected K/N with 1 <= K <= N"),
        (["--shard", "x"], "--shard: expected K/N"),
        (["--workers", "0"], "--workers: expected an int >= 1"),
        (["--workers", "2", "--scheduler", "tcp://127.0.0.1:1"], "expected one of them; found both"),
    ],
)
def test_bad_sweep_options_get_a_clear_error(argv, message, capsys, tmp_path):
    code = cli.main(["check", "bias_act:relu", "--backend", "numpy", "--no-report", *argv])
    assert code == 2 and message in capsys.readouterr().err


# -- a real Dask cluster ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cluster():
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None
    ) as c:
        yield c


@pytest.mark.slow
def test_a_dask_cluster_gives_the_serial_report(serial, cluster, tmp_path, capsys):
    code, out = run(
        capsys, "check", *TARGETS, *OPTIONS, "--scheduler", cluster.scheduler_address, "--report", str(tmp_path)
    )
    assert code == 1 and out.splitlines()[-1] == "4 passed, 2 failed"
    assert canonical(tmp_path) == canonical(serial)
    same_files(serial, tmp_path)
    lines = (tmp_path / "results.jsonl").read_text().splitlines()
    assert sorted(json.loads(ln)["index"] for ln in lines[1:]) == list(range(6))  # streamed, one line per case


@pytest.mark.slow
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


@pytest.mark.slow
def test_an_unreachable_scheduler_gets_a_clear_error(capsys):
    import dask

    with dask.config.set({"distributed.comm.timeouts.connect": "2s"}):  # (dask's own setting is honoured)
        code = cli.main(
            ["check", "bias_act:relu", "--backend", "numpy", "--no-report", "--scheduler", "tcp://127.0.0.1:9"]
        )
    assert code == 2 and "--scheduler: expected the address of a running Dask scheduler" in capsys.readouterr().err
