"""The seed bug (NNlib bias_act!): swish' evaluated at x instead of x + b.
Invisible (and passing) with b = 0 on every backend and dtype, where the
correct rule passes with no finding at all."""

from __future__ import annotations

import pytest

import gradverify as gv
from gradverify._sweep.examples import BUILDERS, example_inputs


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("backend", ["numpy", "torch", "jax"])
def test_seed_bug_invisible_without_bias(backend, dtype):
    result = gv.check(BUILDERS[backend](bug=True), *example_inputs(backend, dtype, zero_bias=True))
    assert result.ok, str(result)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("backend", ["numpy", "torch", "jax"])
def test_correct_rule_passes(backend, dtype):
    result = gv.check(BUILDERS[backend](bug=False), *example_inputs(backend, dtype))
    assert result.ok, str(result)
    assert result.modes["JVP"] == "checked" and result.modes["VJP"] == "checked"
    assert not result.findings
