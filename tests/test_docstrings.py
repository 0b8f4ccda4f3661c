"""The public entry points say what they take, return and raise, with an
example that runs: every parameter of each signature is documented under
Args (gv.verify's too for the gv.check options it passes on), and each
example's output is what the code prints."""

from __future__ import annotations

import doctest
import inspect
import re

import pytest

import gradverify as gv

ENTRY_POINTS = {"check": gv.check, "verify": gv.verify, "Rule": gv.Rule, "triage": gv.triage}


def _args_section(doc: str) -> set[str]:
    section = doc.split("Args:", 1)[1].split("Returns:", 1)[0]
    return set(re.findall(r"^ {4}\*{0,2}(\w+):", section, flags=re.M))


@pytest.mark.parametrize("name", sorted(ENTRY_POINTS))
def test_every_parameter_is_documented_with_returns_raises_and_an_example(name):
    obj = ENTRY_POINTS[name]
    doc = inspect.getdoc(obj)
    assert doc and all(s in doc for s in ("Args:", "Returns:", "Raises:", "Example:")), name
    params = set(inspect.signature(obj).parameters) - {"self"}
    documented = _args_section(doc)
    assert params <= documented, f"{name}: undocumented {sorted(params - documented)}"
    assert documented <= params, f"{name}: documents parameters it does not take: {sorted(documented - params)}"


def test_verify_documents_every_check_option_it_passes_on():
    check_options = {
        p.name for p in inspect.signature(gv.check).parameters.values() if p.kind is inspect.Parameter.KEYWORD_ONLY
    }
    passed_on = check_options - set(inspect.signature(gv.verify).parameters)
    section = inspect.getdoc(gv.verify).split("**check_options:", 1)[1].split("Returns:", 1)[0]
    missing = {o for o in passed_on if f"``{o}``" not in section}
    assert passed_on and not missing, sorted(missing)


@pytest.mark.parametrize("name", sorted(ENTRY_POINTS))
def test_each_example_runs_and_prints_what_it_says(name):
    obj = ENTRY_POINTS[name]
    finder, runner = doctest.DocTestFinder(recurse=False), doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    (test,) = finder.find(obj, name, globs={})
    assert test.examples, name
    result = runner.run(test, out=lambda s: None)
    assert result.failed == 0 and result.attempted == len(test.examples), name
