"""A new project meets gradverify: a package ``mylib`` with a custom
torch.autograd.Function whose backward has a planted bug (a scaled softplus
whose slope uses exp(x) instead of sigmoid(x) for x < 0), the same function
written correctly, and a jax.custom_vjp log-sum-exp; tests written the way
the README teaches. pytest runs them for real, in subprocesses: plain, with
``-n 2``, with ``-W error``, and from the project root and from ``tests/``."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from .._helpers import PLANTED_TORCH_OPS as TORCH_OPS

pytest.importorskip("torch")
pytest.importorskip("jax")

pytestmark = pytest.mark.slow

JAX_OPS = """
import jax
import jax.numpy as jnp

jax.config.update("jax_enable_x64", True)


@jax.custom_vjp
def lse(x):
    m = jnp.max(x)
    return m + jnp.log(jnp.sum(jnp.exp(x - m)))


def _fwd(x):
    y = lse(x)
    return y, (x, y)


def _bwd(res, g):
    x, y = res
    return (g * jnp.exp(x - y),)


lse.defvjp(_fwd, _bwd)
"""

TESTS = """
import jax.numpy as jnp
import pytest
from hypothesis import strategies as st

import gradverify as gv
from gradverify import strategies as gst
from mylib.jax_ops import lse
from mylib.torch_ops import good_softplus, scaled_softplus


def vectors(backend):
    return gst.arrays(backend, "float64", st.tuples(st.integers(1, 4))).map(lambda a: (a,))


def test_planted_bug(gradverify):
    res = gradverify.verify(scaled_softplus, vectors("torch"))
    assert res.ok, res


def test_planted_bug_asserted(gradverify):
    gradverify.assert_verified(scaled_softplus, vectors("torch"))


def test_correct_softplus(gradverify):
    res = gradverify.verify(good_softplus, vectors("torch"))
    assert res.ok, res


def test_correct_lse():
    r = gv.check(lse, jnp.array([0.5, -1.0, 2.0]))
    assert r.ok, r


def test_planted_bug_at_one_input(gradverify):
    import torch

    gradverify.assert_gradients(scaled_softplus, torch.tensor([-1.0, 0.5], dtype=torch.float64))


def test_planted_bug_plain_check():
    import torch

    r = gv.check(scaled_softplus, torch.tensor([-2.0, 1.0], dtype=torch.float64))
    assert r.ok, r


def test_numpy_rule_order_2():
    import numpy as np

    rule = gv.Rule(np.tanh, vjp=lambda args, v: (v * (1 - np.tanh(args[0]) ** 2),))
    r = gv.check(rule, np.array([0.3, -1.2]), order=2)
    assert r.ok, r
    assert "order 2 not checked" in str(r).splitlines()[0]


@pytest.mark.gradverify(seed=1234, max_examples=20)
def test_pinned(gradverify):
    res = gradverify.verify(good_softplus, vectors("torch"))
    assert res.ok and res.seed == 1234 and res.max_examples == 20, res
"""


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    root = tmp_path_factory.mktemp("downstream")
    (root / "mylib").mkdir()
    (root / "mylib" / "__init__.py").write_text("")
    (root / "mylib" / "torch_ops.py").write_text(TORCH_OPS)
    (root / "mylib" / "jax_ops.py").write_text(JAX_OPS)
    (root / "tests").mkdir()
    (root / "tests" / "test_ops.py").write_text(TESTS)
    return root


def _pytest(project: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(project)}  # (mylib as if installed)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly", *args],
        cwd=cwd or project,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def _seeds(out: str) -> set[str]:
    return set(re.findall(r"scaled_softplus - seed (\d+)", out))


@pytest.mark.parametrize(
    "how",
    [("plain", ()), ("xdist", ("-n", "2")), ("warnings as errors", ("-W", "error")), ("from tests/", ())],
    ids=lambda h: h[0],
)
def test_the_planted_bug_is_caught_and_correct_code_passes(project, how, tmp_path):
    name, extra = how
    xml = tmp_path / "junit.xml"
    if name == "from tests/":
        done = _pytest(project, "-rA", f"--junitxml={xml}", ".", cwd=project / "tests")
    else:
        done = _pytest(project, "-rA", f"--junitxml={xml}", *extra, "tests")
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    summary = {m[1]: m[0] for m in re.findall(r"^(PASSED|FAILED) \S*::(\w+)", out, re.M)}
    assert summary == {
        "test_planted_bug": "FAILED",
        "test_planted_bug_asserted": "FAILED",
        "test_planted_bug_at_one_input": "FAILED",
        "test_planted_bug_plain_check": "FAILED",
        "test_numpy_rule_order_2": "PASSED",
        "test_correct_softplus": "PASSED",
        "test_correct_lse": "PASSED",
        "test_pinned": "PASSED",
    }, out
    # `assert res.ok, res` shows the whole report beside the failure: the
    # minimal input, the pair that disagrees and both values (exp(-1) x 2
    # against sigmoid(-1) x 2)
    assert "gradverify report" in out and "arg0: float64[1] = [-1.0]" in out, out
    # one report section per failing test whose failure shows only the
    # result's repr, through the fixture or a plain gv.check; a GradientError
    # is the report already, and shows it once
    assert len(re.findall(r"^-+ gradverify report -+$", out, re.M)) == 2, out
    at_one_input = out.split("test_planted_bug_at_one_input ___")[1].split("___ test_planted_bug_plain_check")[0]
    assert at_one_input.count("gradverify FAILED: scaled_softplus [torch, order 1]") == 1, at_one_input
    assert "VJP = 0.735759" in out and "FD = 0.537883" in out, out
    # ... and so do the fixture's assert_verified and assert_gradients, as a GradientError
    assert "GradientError: gradverify.verify FAILED: scaled_softplus" in out, out
    assert "GradientError: gradverify FAILED: scaled_softplus [torch, order 1]" in out, out
    # the summary names the pair, both values and how to reproduce it
    assert "VJP vs FD: VJP = 0.735759  FD = 0.537883" in out, out
    assert "reproduce: pytest '" in out and "@pytest.mark.gradverify(seed=" in out, out
    # JUnit: the failing call's ratio is above 1, beside its error and bound
    props = {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        props[case.get("name")] = {p.get("name"): p.get("value") for p in case.iter("property")}
    bug = props["test_planted_bug"]
    assert bug["gradverify_verdict"] == "failed" and float(bug["gradverify_worst_ratio"]) > 1, bug
    error, bound = (float(v) for v in bug["gradverify_error"].split(" > "))
    assert float(bug["gradverify_bound"]) == bound and error / bound > 1 and bug["gradverify_pair"] == "VJP vs FD"
    good = props["test_correct_softplus"]
    assert good["gradverify_verdict"] == "passed" and float(good["gradverify_worst_ratio"]) <= 1, good
    assert props["test_correct_lse"]["gradverify_verdict"] == "passed"


def test_a_test_gets_the_same_seed_from_the_root_and_from_tests(project):
    from_root = _pytest(project, "tests", "-k", "planted_bug and not asserted")
    from_tests = _pytest(project, ".", "-k", "planted_bug and not asserted", cwd=project / "tests")
    seeds = _seeds(from_root.stdout), _seeds(from_tests.stdout)
    assert len(seeds[0]) == 1 and seeds[0] == seeds[1], (from_root.stdout, from_tests.stdout)
    other = _pytest(project, "tests", "-k", "planted_bug and not asserted", "--gradverify-seed", "7")
    assert _seeds(other.stdout) and _seeds(other.stdout) != seeds[0]
    assert "--gradverify-seed 7" in other.stdout  # the reproducing command keeps the base seed


ROOT = Path(__file__).resolve().parents[2]


def _readme_blocks() -> list[str]:
    """The README's fenced blocks, in order."""
    blocks, current = [], None
    for line in (ROOT / "README.md").read_text().splitlines():
        if line.startswith("```"):
            if current is None:
                current = []
            else:
                blocks.append("\n".join(current) + "\n")
                current = None
        elif current is not None:
            current.append(line)
    return blocks


def test_the_readme_quick_start_runs_in_a_new_project_as_it_says(tmp_path):
    """The README's "check your own function" snippet, run as written, prints
    the report the README shows; the Softplus it defines, put in a package,
    and the README's pytest test beside it fail with that report. The bound
    holds fn's noise as measured on the machine that runs it (its last digits
    follow the CPU's exp and log1p kernels): the report must print what this
    machine computed, and the README's figure be of its size; every other
    figure is the same on any machine."""
    blocks = _readme_blocks()
    snippet = next(b for b in blocks if "class Softplus(torch.autograd.Function)" in b)
    shown = next(b for b in blocks if b.startswith("gradverify FAILED: Softplus.apply"))
    test = next(b for b in blocks if b.startswith("# tests/test_softplus.py"))
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    code = snippet + "\nprint('MEASURED BOUND', repr(result.errors[0].bound))"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr
    printed = run.stdout.splitlines()
    measured = float(printed.pop().removeprefix("MEASURED BOUND "))
    bound = re.compile(r"bound (\S+)$")
    for line in shown.splitlines():  # every line the README shows, as printed (the README trims one)
        said = bound.search(line)
        if said:  # the measured figure: this machine's printed, the README's of its size
            assert f"bound {measured:.3g}" in "\n".join(printed), (measured, run.stdout)
            assert 0.5 <= float(said.group(1)) / measured <= 2.0, (line, measured)
            line = line[: said.start(1)]
        assert line.rstrip(" .)") in "\n".join(printed) or "..." in line, (line, run.stdout)
    (tmp_path / "mylib").mkdir()
    (tmp_path / "mylib" / "__init__.py").write_text("")
    (tmp_path / "mylib" / "softplus.py").write_text(snippet.split("torch.manual_seed")[0])
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_softplus.py").write_text(test)
    # plain pytest, mylib not installed: the README's pyproject.toml is what lets the test import it
    config = next(b for b in blocks if b.startswith("# pyproject.toml"))
    bare = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    # (the console script: python -m pytest would put the project's root on sys.path itself)
    run = [str(Path(sys.executable).with_name("pytest")), "-p", "no:cacheprovider", "-p", "no:randomly", "tests"]
    done = subprocess.run(run, cwd=tmp_path, env=bare, capture_output=True, text=True, timeout=600)
    assert "ModuleNotFoundError: No module named 'mylib'" in done.stdout + done.stderr  # (without it)
    (tmp_path / "pyproject.toml").write_text(config)
    done = subprocess.run(run, cwd=tmp_path, env=bare, capture_output=True, text=True, timeout=600)
    out = done.stdout + done.stderr
    assert done.returncode == 1 and "1 failed" in out, out
    assert "gradverify report" in out and "mismatch (VJP vs FD)" in out, out


def test_the_readmes_install_lines_build_and_install_a_wheel(tmp_path):
    """The README's wheel line, run as written in a copy of the project, makes
    a wheel that pip installs with the torch extra (dependencies already here)."""
    line = next(b for b in _readme_blocks() if b.startswith("pip wheel")).strip()
    assert line.startswith("pip wheel --no-deps -w dist . && pip install ")
    project = tmp_path / "project"
    shutil.copytree(
        ROOT, project, ignore=shutil.ignore_patterns(".venv", ".git", "dist", "build", "*.egg-info", "__pycache__")
    )
    target = tmp_path / "site"
    pip = f"{sys.executable} -m pip"
    command = line.replace("pip wheel", f"{pip} wheel").replace(
        "&& pip install", f"&& {pip} install --no-deps --target {target}"
    )
    done = subprocess.run(command, shell=True, cwd=project, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (target / "gradverify" / "pytest_plugin" / "__init__.py").is_file() and (
        target / "gradverify" / "ops"
    ).is_dir()


STRATEGIES = """
from hypothesis import strategies as st

from gradverify import strategies as gst

torch_vectors = gst.arrays("torch", "float64", st.tuples(st.integers(1, 4))).map(lambda a: (a,))
jax_vectors = gst.arrays("jax", "float64", st.tuples(st.integers(1, 4))).map(lambda a: (a,))
"""


def _command(project: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # (the command imports from its directory)
    return subprocess.run(
        [sys.executable, "-m", "gradverify.cli", *args],
        cwd=cwd or project,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_the_command_on_a_projects_functions(tmp_path):
    """``gradverify check MODULE:FN=MODULE:STRATEGY ...``: each target its own
    strategy and a label of its backend and dtype; a strategy of the wrong
    backend is a usage error; the reproducer it writes runs from the report
    directory, exits 1 while the bug is there and 0 once it is fixed."""
    project = tmp_path / "project"
    (project / "mylib").mkdir(parents=True)
    (project / "mylib" / "__init__.py").write_text("")
    (project / "mylib" / "torch_ops.py").write_text(TORCH_OPS)
    (project / "mylib" / "jax_ops.py").write_text(JAX_OPS)
    (project / "mylib" / "strategies.py").write_text(STRATEGIES)
    softplus, lse = "mylib.torch_ops:scaled_softplus", "mylib.jax_ops:lse"

    done = _command(
        project,
        "check",
        f"{softplus}=mylib.strategies:torch_vectors",
        f"{lse}=mylib.strategies:jax_vectors",
        "--report",
        "rep",
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"FAIL  {softplus} [torch, user, float64]" in done.stdout, done.stdout
    assert f"PASS  {lse} [jax, user, float64]" in done.stdout, done.stdout
    report = (project / "rep" / "report.md").read_text()
    assert "[-,-,-]" not in report and "-/-/-" not in report and f"{softplus}[torch,user,float64]" in report

    # --strategy once per target, in their order, does the same
    strategies = ["--strategy", "mylib.strategies:torch_vectors", "--strategy", "mylib.strategies:jax_vectors"]
    aligned = _command(project, "check", softplus, lse, *strategies, "--no-report")
    assert aligned.returncode == 1 and f"PASS  {lse} [jax, user, float64]" in aligned.stdout, aligned.stderr
    # a jax function given torch arrays, or strategies that do not match the targets: usage errors
    wrong = _command(project, "check", lse, "--strategy", "mylib.strategies:torch_vectors", "--no-report")
    assert wrong.returncode == 2 and "expected jax arrays" in wrong.stderr and "found torch arrays" in wrong.stderr
    counted = _command(project, "check", softplus, lse, *strategies, "--strategy", "mylib.strategies:jax_vectors")
    assert counted.returncode == 2 and "--strategy: expected one per module:function target" in counted.stderr

    (script,) = (project / "rep" / "cases").glob("*.py")

    def reproduce() -> subprocess.CompletedProcess[str]:  # from the report directory, nothing on the path
        rel = str(script.relative_to(project / "rep"))
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        return subprocess.run([sys.executable, rel], cwd=project / "rep", env=env, capture_output=True, text=True)

    run = reproduce()
    assert run.returncode == 1 and "gradverify FAILED: scaled_softplus" in run.stdout, run.stdout + run.stderr
    fixed = TORCH_OPS.replace("torch.where(x < 0, torch.exp(x), torch.sigmoid(x))", "torch.sigmoid(x)")
    assert fixed != TORCH_OPS
    (project / "mylib" / "torch_ops.py").write_text(fixed)
    run = reproduce()
    passed = "gradverify PASSED (VJP only; JVP unavailable): scaled_softplus"
    assert run.returncode == 0 and passed in run.stdout, run.stdout + run.stderr


def test_triage_of_the_projects_failing_test_names_the_bugs_region(project):
    """``gradverify triage rerun NODE`` on the planted bug: a bug (in a region)
    on x < 0, named by sign - not by the span of the elements it located."""
    env = {**os.environ, "PYTHONPATH": str(project)}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "gradverify.cli",
            "triage",
            "rerun",
            "tests/test_ops.py::test_planted_bug",
            "--seeds",
            "1",
            "--threads",
            "1",
            "--max-examples",
            "5",
        ],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert re.search(r"verify scaled_softplus: bug( in a region)? ", out), out
    assert "region: ['x < 0']" in out, out
