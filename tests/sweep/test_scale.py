"""Sweeps: a case alone gives its record in the sweep; shards of different
sweeps are refused by merge; bad sweep options get a clear error."""

from __future__ import annotations

import json

import pytest

from gradverify import cli

from ._helpers import OPTIONS, TARGETS, run


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
