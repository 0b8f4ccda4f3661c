"""docs/found.md stays true: each reproducer whose libraries are installed
runs in a fresh interpreter (one for all), gradverify must still flag it, and the
library's derivative must still be off the exact value. A failure here
means upstream changed: the message says which entry to update."""

from __future__ import annotations

import importlib.util
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

PAGE = Path(__file__).resolve().parents[2] / "docs" / "found.md"
BLOCK = re.compile(
    r"<!-- reproducer (?P<id>[\w-]+); needs (?P<needs>[\w, ]+?)(?:; expect (?P<expect>[\w-]+))? -->\s*"
    r"```python\n(?P<code>.*?)```",
    re.S,
)
#: Runs every reproducer given on the command line (JSON: id -> code), each in
#: a namespace of its own, in one interpreter (imports are paid once); prints
#: one line per entry with what it set.
RUNNER = """
import json, sys, traceback
for name, code in json.loads(sys.argv[1]).items():
    ns = {"__name__": "__reproducer__"}
    out = {"id": name}
    try:
        exec(compile(code, name, "exec"), ns)
    except BaseException:
        out["failed"] = traceback.format_exc(limit=-4)
    else:
        out.update({k: ns.get(k) for k in ("ad", "exact", "raised")})
        if "result" in ns:
            out["flagged"] = not ns["result"].ok
            out["report"] = str(ns["result"])
    print("GRADVERIFY-FOUND " + json.dumps(out, default=str), flush=True)
"""
ENTRIES = [m.groupdict() for m in BLOCK.finditer(PAGE.read_text())]


def test_the_page_holds_every_entry():
    ids = [e["id"] for e in ENTRIES]
    assert len(ids) == len(set(ids)) >= 18, ids
    for lib in (
        "torch",
        "jax",
        "kornia",
        "numpyro",
        "pypose",
        "cuda",
        "entmax",
        "torchkbnufft",
        "gpytorch",
        "optax",
        "jaxopt",
    ):
        assert any(lib in e["needs"] for e in ENTRIES), lib


def _missing(needs: str) -> str | None:
    for lib in (n.strip() for n in needs.split(",")):
        if lib == "cuda":
            import torch

            if not torch.cuda.is_available():
                return "no CUDA device"
        elif importlib.util.find_spec(lib) is None:
            return f"{lib} is not installed"
    return None


def _differ(ad, exact) -> bool:
    ad = ad if isinstance(ad, list) else [ad]
    exact = exact if isinstance(exact, list) else [exact]
    assert len(ad) == len(exact)
    return any(not (math.isclose(float(a), e, rel_tol=1e-12, abs_tol=1e-300)) for a, e in zip(ad, exact))


@pytest.fixture(scope="module")
def outcomes():
    """Every installed reproducer, run in one fresh interpreter."""
    runnable = {e["id"]: e["code"] for e in ENTRIES if _missing(e["needs"]) is None}
    done = subprocess.run(
        [sys.executable, "-c", RUNNER, json.dumps(runnable)], capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [ln.removeprefix("GRADVERIFY-FOUND ") for ln in done.stdout.splitlines() if ln.startswith("GRADVERIFY-")]
    return {o["id"]: o for o in map(json.loads, lines)}


@pytest.mark.parametrize("entry", ENTRIES, ids=[e["id"] for e in ENTRIES])
def test_each_reproducer_is_still_flagged(entry, outcomes):
    missing = _missing(entry["needs"])
    if missing:
        pytest.skip(f"{entry['id']}: {missing}")
    out = outcomes[entry["id"]]
    assert "failed" not in out, f"{entry['id']}: the reproducer failed to run:\n{out.get('failed')}"
    if entry["expect"] == "not-reproduced":
        assert out["raised"] is None, f"{entry['id']} reproduces now ({out['raised']}): record it in docs/found.md"
        return
    assert _differ(out["ad"], out["exact"]), (
        f"{entry['id']}: the library's derivative now equals the exact value ({out['ad']}): "
        "fixed upstream? Move the entry to 'Fixed upstream' in docs/found.md with the version"
    )
    assert out["flagged"], f"{entry['id']}: gradverify no longer flags it:\n{out['report']}"
