"""The gradverify command: targets through gv.verify, reports in four formats
(each parsed back), exit 0 all pass, 1 a gradient check failed, 2 usage."""

from __future__ import annotations

import json
import re
import shlex

import pytest

from gradverify import cli
from gradverify._sweep import cases as _sweep, distribute
from gradverify.cli.argv import walk
from gradverify.cli.sweep import Progress

from ._helpers import main, run


def test_check_examples_passes(capsys):
    code, out, _ = main(capsys, "check", "examples", "--backend", "numpy", "--no-report")
    assert code == 0, out
    assert out.splitlines()[-1] == "1 passed, 0 failed"
    assert out.splitlines()[0].startswith("PASS  examples [numpy, fused, float64]  10 example(s)")


def test_report_command_renders_a_saved_json_again(capsys, tmp_path):
    main(capsys, "check", "bias_act:relu", "--backend", "numpy", "--report", str(tmp_path), "--format", "json,md")
    before = (tmp_path / "report.md").read_text()
    (tmp_path / "report.md").unlink()
    code, out, _ = main(capsys, "report", str(tmp_path / "report.json"), "--format", "md")
    assert code == 0 and (tmp_path / "report.md").read_text() == before
    code, _, _ = main(capsys, "report", str(tmp_path / "report.json"), "--format", "html")
    assert code == 0 and (tmp_path / "report.html").exists()


def test_bundled_ops_pass_and_numpy_reference_is_skipped_with_a_reason(capsys):
    code, out, _ = main(capsys, "check", "bias_act:relu6", "layer_norm", "--backend", "numpy", "--no-report")
    assert code == 0, out
    lines = out.splitlines()
    assert lines[-1] == "2 passed, 0 failed, 2 skipped"
    assert any(ln.startswith("SKIP  bias_act:relu6 [numpy, reference, float64]  numpy has no AD") for ln in lines)


def test_list_shows_activations_kinks_and_conventions(capsys):
    code, out, _ = main(capsys, "list")
    assert code == 0
    assert "relu6" in out and "kink at 6 (left 1, right 0, chosen 0)" in out
    assert "fused rule keeps: bits" in out and "layer_norm" in out


@pytest.mark.parametrize(
    "argv,message",
    [
        (["check", "nonsense"], "target: expected all, bias_act, bias_act:NAME"),
        (["check", "bias_act:relu7"], "relu7"),
        (["check", "userops:f"], "expected a strategy for a module:function target"),
        (
            ["check", "math:sqrt", "--strategy", "math:pi"],
            "--strategy math:pi: expected a Hypothesis strategy of argument tuples; found float 3.14159",
        ),
        (["check", "math:sqrt", "--strategy", "math:floor"], "(a function: name the strategy it returns"),
        (["check", "math:pi", "--strategy", "math:tau"], "target math:pi: expected a function (module:function)"),
        (["check", "examples", "--max-examples", "0"], "--max-examples: expected an int >= 1"),
        (["report", "/nonexistent/report.json"], "a JSON report written by gradverify check"),
    ],
)
def test_usage_errors_exit_2_and_say_what_to_do(capsys, argv, message):
    code, out, err = main(capsys, *argv, *(["--no-report"] if argv[0] == "check" else []))
    assert code == 2, out + err
    assert message in err
    assert "Fix:" in err or "expected" in err
    assert "Traceback" not in err and "SearchStrategy but got" not in err  # (our words, not Hypothesis's)


def test_bad_format_and_unknown_command_exit_2():
    assert run("check", "examples", "--format", "pdf").returncode == 2
    assert run("frobnicate").returncode == 2


# -- options before or after the targets ------------------------------------------------------------
@pytest.mark.parametrize(
    "argv,expected",
    [
        (["check", "--backend", "torch", "bias_act"], {"targets": ["bias_act"], "backend": ["torch"]}),
        (["check", "bias_act", "--backend", "torch", "jax"], {"targets": ["bias_act"], "backend": ["torch", "jax"]}),
        (["check", "--backend", "torch", "jax", "bias_act"], {"targets": ["bias_act"], "backend": ["torch", "jax"]}),
        (["check", "--backend", "torch,jax", "bias_act"], {"targets": ["bias_act"], "backend": ["torch", "jax"]}),
        (["check", "--backend", "torch", "--backend", "jax", "x"], {"targets": ["x"], "backend": ["torch", "jax"]}),
        (["check", "--backend=numpy", "--back", "jax", "x"], {"targets": ["x"], "backend": ["numpy", "jax"]}),
        (["check", "--backend", "all", "bias_act"], {"targets": ["bias_act"], "backend": ["all"]}),
        (["check", "all", "--backend", "numpy"], {"targets": ["all"], "backend": ["numpy"]}),
        (
            ["check", "--dtype", "float32", "float64", "layer_norm", "rms_norm", "--seed", "3"],
            {"targets": ["layer_norm", "rms_norm"], "dtype": ["float32", "float64"], "seed": 3},
        ),
        (
            ["check", "bias_act:relu", "--seed", "1", "layer_norm", "--dtype", "float32,float64"],
            {"targets": ["bias_act:relu", "layer_norm"], "seed": 1, "dtype": ["float32", "float64"]},
        ),
        (["check", "--max-shrinking-seconds", "-1", "x"], {"targets": ["x"], "max_shrinking_seconds": -1.0}),
        (["merge", "--report", "m", "a.jsonl", "b.jsonl"], {"files": ["a.jsonl", "b.jsonl"], "report": "m"}),
        (["merge", "a.jsonl", "--format", "md", "b.jsonl"], {"files": ["a.jsonl", "b.jsonl"], "format": ["md"]}),
        (["triage", "junit", "--report", "t", "a.xml", "b.xml"], {"files": ["a.xml", "b.xml"], "report": "t"}),
        (
            ["triage", "rerun", "--backend", "numpy", "--seeds", "2", "bias_act:relu"],
            {"target": "bias_act:relu", "backend": "numpy", "seeds": 2},
        ),
        (["audit", "--ops", "sin", "cos", "torch"], {"framework": "torch", "ops": ["sin", "cos"]}),
        (
            ["audit", "--dtype", "float64", "--ops", "sin,cos", "--report", "a", "merge", "s1", "s2"],
            {"framework": "merge", "files": ["s1", "s2"], "ops": ["sin", "cos"], "dtype": ["float64"]},
        ),
        (["audit", "torch", "--ops", "sin", "--ops", "cos"], {"framework": "torch", "ops": ["sin", "cos"]}),
        (
            ["write", "--except", "ValueError", "TypeError", "mylib"],
            {"target": "mylib", "except_": ["ValueError", "TypeError"]},
        ),
        (
            ["write", "-o", "t.py", "mylib", "--max-examples", "5"],
            {"target": "mylib", "output": "t.py", "max_examples": 5},
        ),
        (["report", "--format", "md", "r.json"], {"file": "r.json", "format": "md"}),
        (["list"], {"command": "list"}),
    ],
)
def test_options_come_before_or_after_the_targets(argv, expected):
    """Today's spellings keep their meaning; an option of several values takes
    only its own values (its choices), also as a comma list or repeated, and
    an open-vocabulary one leaves the subcommand its required positionals."""
    args = cli.build_parser().parse_args(argv)
    assert {k: getattr(args, k) for k in expected} == expected


def test_an_option_before_the_target_runs_the_check(capsys):
    code, out, err = main(capsys, "check", "--backend", "numpy", "--impl", "fused", "examples", "--no-report")
    assert code == 0, out + err
    assert out.splitlines()[-1] == "1 passed, 0 failed"


@pytest.mark.parametrize(
    "argv,message",
    [
        # `all` after --backend is a backend, as it always was: then no target is left
        (["check", "--backend", "torch", "all"], "the following arguments are required: TARGET"),
        (["check", "--backend", "bias_act"], "argument --backend: invalid choice: 'bias_act'"),
        (["check", "x", "--backend", "torch,cuda"], "argument --backend: invalid choice: 'cuda'"),
        (["check", "x", "--dtype"], "argument --dtype: expected at least one argument"),
        (["check", "x", "--format", "pdf"], "--format: expected some of json,md,junit,html, comma-separated"),
    ],
)
def test_a_word_the_command_cannot_read_is_named_with_the_fix(capsys, argv, message):
    code, out, err = main(capsys, *argv)
    assert code == 2, out + err
    assert message in err and "Fix:" in err, err
    assert "usage: gradverify check" in err


# -- help ---------------------------------------------------------------------------------------------
def _shown_default(default):
    """A default as one types it: a list comma-separated, a float without trailing zeros."""
    if isinstance(default, (list, tuple)):
        return ",".join(map(str, default))
    return f"{default:g}" if isinstance(default, float) else str(default)


def _option_blocks(text):
    """An option's help block in ``--help``, by its first option string, whitespace folded."""
    blocks, current = {}, None
    for ln in text.splitlines():
        if ln.startswith("  -"):
            current = ln.split()[0].rstrip(",")
            blocks[current] = ln
        elif current and ln.startswith("    ") and not ln.startswith("  gradverify"):
            blocks[current] += " " + ln
        else:
            current = None
    return {k: " ".join(v.split()) for k, v in blocks.items()}


def test_every_option_of_every_subcommand_says_its_default_and_each_help_ends_with_examples():
    parsers = list(walk(cli.build_parser()))
    assert {" ".join(path) for path, _ in parsers} >= {
        "", "check", "merge", "list", "triage", "triage junit", "triage rerun", "audit", "write", "report",
    }  # fmt: skip
    for path, parser in parsers:
        text = parser.format_help()
        blocks = _option_blocks(text)
        for action in parser._actions:
            if not action.option_strings or action.dest == "help":
                continue
            assert action.help, f"gradverify {' '.join(path)} {action.option_strings[0]}: no help"
            block = blocks[action.option_strings[0]]
            d = action.default
            if d not in (None, False, []):
                assert f"(default: {_shown_default(d)})" in block, block
        head, sep, tail = text.partition("\nexamples:\n")
        lines = tail.rstrip().splitlines()
        assert sep and len(lines) >= 1 and all(ln.startswith("  gradverify ") for ln in lines), text
        for ln in lines:  # each a real command of this subcommand
            argv = shlex.split(ln.partition("#")[0])[1:]
            args = cli.build_parser().parse_args(argv)
            assert argv[: len(path)] == list(path) and args.command == (path[0] if path else args.command), ln


# -- paths as the reader sees them --------------------------------------------------------------------
def test_printed_paths_name_the_files_from_the_current_directory(capsys, tmp_path, monkeypatch):
    """A failure's counterexample, its script and the reports, named from the
    directory the command runs in (relative below it, absolute elsewhere),
    never doubled; under --no-report nothing is said to be saved."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    failing = ["check", "example:seed-bug", "--backend", "numpy", "--max-examples", "5", "--format", "json"]
    code, out, _ = main(capsys, *failing, "--report", "cli-reports/")
    assert code == 1, out
    saved = re.search(r"saved: (\S+)", out).group(1)
    script = re.search(r"reproduce: python (\S+)", out).group(1)
    assert saved.startswith("cli-reports/cases/") and (work / saved).is_file(), out
    assert f"np.load({saved!r})" in out and (work / script).is_file()
    assert "reports: cli-reports/report.json" in out and "//" not in out
    code, out, _ = main(capsys, *failing, "--report", str(tmp_path / "elsewhere" / "."))
    assert f"reports: {tmp_path / 'elsewhere' / 'report.json'}" in out
    assert f"saved: {tmp_path / 'elsewhere' / 'cases'}" in out
    code, out, _ = main(capsys, *failing, "--no-report")
    assert code == 1 and "saved: nothing (--no-report" in out and "cases/" not in out, out
    # the report command, and a report directory given with a trailing separator
    code, out, _ = main(capsys, "report", "cli-reports//report.json", "--format", "html", "--output", "./r//x.html")
    assert code == 0 and out == "wrote r/x.html\n" and (work / "r" / "x.html").is_file()


# -- merge asks for every shard -----------------------------------------------------------------------
SHARDED = ["check", "bias_act:relu", "bias_act:tanh", "bias_act:elu", "--backend", "numpy", "--impl", "fused"]


def test_merge_of_some_shards_is_an_error_that_names_the_missing_ones(capsys, tmp_path):
    for k in (1, 2, 3):
        code, out, _ = main(
            capsys, *SHARDED, "--max-examples", "2", "--shard", f"{k}/3", "--report", str(tmp_path / f"s{k}")
        )
        assert code == 0, out
    head = json.loads((tmp_path / "s2" / "results.jsonl").read_text().splitlines()[0])
    assert head["shard"] == "2/3"
    s1, s2, s3 = (str(tmp_path / f"s{k}" / "results.jsonl") for k in (1, 2, 3))
    code, out, err = main(capsys, "merge", s1, s3, "--report", str(tmp_path / "m"))
    assert code == 2 and not (tmp_path / "m").exists(), out
    assert "expected the results of every shard K/3 of the sweep" in err and "missing 2/3" in err, err
    assert f"1/3 ({s1})" in err and "Fix: add the results.jsonl of shard 2/3" in err
    # a shard's report.json says no shard: named, with where to look
    code, _, err = main(capsys, "merge", s1, s3, str(tmp_path / "s2" / "report.json"), "--report", str(tmp_path / "m"))
    assert code == 2 and "report.json say no shard: pass the results.jsonl beside them" in err, err
    code, out, _ = main(capsys, "merge", s1, s2, s3, s1, "--report", str(tmp_path / "m"))
    assert code == 0 and "merged 3 case(s) from 4 file(s)" in out and out.splitlines()[-1] == "3 passed, 0 failed"


def test_merge_refuses_shards_of_two_splits_and_an_edited_shard(capsys, tmp_path):
    code, _, _ = main(capsys, *SHARDED, "--max-examples", "2", "--shard", "1/2", "--report", str(tmp_path / "a"))
    code, _, _ = main(capsys, *SHARDED, "--max-examples", "2", "--shard", "2/3", "--report", str(tmp_path / "b"))
    files = [str(tmp_path / d / "results.jsonl") for d in ("a", "b")]
    code, _, err = main(capsys, "merge", *files, "--report", str(tmp_path / "m"))
    assert code == 2 and "expected the shards of one split (every --shard K/N of one N)" in err, err
    lines = (tmp_path / "a" / "results.jsonl").read_text().splitlines()
    edited = tmp_path / "edited.jsonl"
    edited.write_text("\n".join([json.dumps({**json.loads(lines[0]), "shard": "3/2"}), *lines[1:]]) + "\n")
    code, _, err = main(capsys, "merge", str(edited), "--report", str(tmp_path / "m"))
    assert code == 2 and "expected a header whose shard is K/N or null; found '3/2'" in err, err


# -- progress -----------------------------------------------------------------------------------------
def test_the_progress_line_names_the_running_case_and_its_count():
    cases = _sweep.cases(["bias_act:relu", "layer_norm"], backends=("numpy", "torch"), impls=("fused",))
    progress = Progress(distribute.shard(cases, None), terminal=False)
    assert progress.label() == "[1/4] bias_act:relu numpy fused float64"
    progress.advance(0)
    progress.advance(2)  # (a pool finishes out of order: the earliest still running is named)
    assert progress.label() == "[3/4] bias_act:relu torch fused float64"
    progress.advance(1)
    progress.advance(3)
    assert progress.label() == "[4/4] done"
    progress.stop()
