"""A function docs/found.md records a defect of is recognised by identity:
its errors say "known upstream defect" with the entry's link, and stay
errors; the same computation under another name, or a correct function,
gets no such note."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import gradverify as gv
from gradverify._check.known import FOUND_PAGE, KNOWN, anchor

torch = pytest.importorskip("torch")
F = torch.nn.functional

PAGE = Path(__file__).resolve().parents[2] / FOUND_PAGE
NOTE = "a known upstream defect: its slope is float32(1/6)"


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_hardsigmoid_is_said_to_be_a_known_upstream_defect(dtype):
    x = torch.tensor([0.5, -1.0, 2.0], dtype=dtype)
    r = gv.check(F.hardsigmoid, x)
    assert not r.ok and r.errors  # still an error: the derivative is wrong
    for e in r.errors:
        assert NOTE in e.message and "(docs/found.md#fhardsigmoid-the-float64-derivative-is-float3216)" in e.message
    assert NOTE in str(r) and NOTE in r.to_dict()["findings"][0]["message"]


def test_only_the_function_itself_and_only_its_errors():
    x = torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64)
    wrapped = gv.check(lambda t: F.hardsigmoid(t), x)  # (by identity: a wrapper is another function)
    assert not wrapped.ok and not any("known upstream" in f.message for f in wrapped.findings)
    assert gv.check(F.hardswish, x).ok  # (its entry is for CUDA: on the CPU it is right)
    assert not any("known upstream" in f.message for f in gv.check(F.softplus, x).findings)


def test_every_entry_names_a_heading_of_the_page():
    headings = {anchor(h) for h in re.findall(r"^### (.+)$", PAGE.read_text(), re.M)}
    missing = [k.heading for k in KNOWN if anchor(k.heading) not in headings]
    assert not missing, f"not headings of {FOUND_PAGE}: {missing}"
    assert len({(k.module, k.name) for k in KNOWN}) == len(KNOWN)


def test_anchors_are_githubs():
    assert anchor("`F.hardsigmoid`: the float64 derivative is float32(1/6)") == (
        "fhardsigmoid-the-float64-derivative-is-float3216"
    )
    assert anchor("`lax.clamp` with min > max: every gradient is 0") == "laxclamp-with-min--max-every-gradient-is-0"


def test_a_jax_entry_too():
    jax = pytest.importorskip("jax")
    jnp, lax = jax.numpy, jax.lax
    lo, x, hi = jnp.array([2.0]), jnp.array([1e-5]), jnp.array([0.25])
    r = gv.check(lax.clamp, lo, x, hi)
    assert not r.ok and all(
        "a known upstream defect: with min > max every gradient is 0" in e.message for e in r.errors
    )


def test_the_kinds_table_holds_every_kind():
    table = (Path(__file__).resolve().parents[2] / "docs" / "verdicts.md").read_text()
    rows = " ".join(re.findall(r"^\| (`[a-z_`, ]+`) \|", table, re.M))
    missing = [k.value for k in gv.Kind if f"`{k.value}`" not in rows]
    assert not missing, f"docs/verdicts.md's table of finding kinds lacks {missing}"
