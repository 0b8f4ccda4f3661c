"""The gradverify command: targets through gv.verify, reports in four formats
(each parsed back), exit 0 all pass, 1 a gradient check failed, 2 usage."""

from __future__ import annotations

import pytest

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
