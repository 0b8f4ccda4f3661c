"""What a sweep's failure carries for its plots, measured again at the
counterexample: the Jacobian's elements over the bound are exactly those the
check counted, over a scan of failing points; the row has both modes; a large
input gets the row alone."""

from __future__ import annotations

import re

import numpy as np
from hypothesis import strategies as st

import gradverify as gv
from gradverify._sweep.examples import BUILDERS
from gradverify._sweep.probe import ROW_ELEMENTS, failure_views


def _failed(x, b, seed=0):
    fn = BUILDERS["numpy"](True)  # swish'(x) where swish'(x + b) is due: wrong wherever b moves the slope
    res = gv.verify(fn, st.just((x, b)), max_examples=1, seed=seed)
    assert not res.ok
    return fn, res, res.result.errors[0]


def test_the_elements_over_the_bound_are_the_ones_the_check_counted():
    rng = np.random.default_rng(7)
    for trial in range(40):
        rows, cols = rng.integers(1, 5), rng.integers(1, 7)
        dtype = (np.float64, np.float32)[trial % 2]
        x, b = (2 * rng.normal(size=(rows, cols))).astype(dtype), rng.normal(size=cols).astype(dtype)
        fn, res, err = _failed(x, b, seed=trial)
        jac = failure_views(fn, res, err)["jacobian"]
        counted = int(re.search(r"\((\d+) (?:Jacobian )?element\(s\) over the bound\)", err.message).group(1))
        assert len(jac["over"]) == counted, (trial, err.message, jac["over"])
        worst = [int(np.ravel_multi_index(err.output_index, x.shape)), cols * rows * (err.argument == 1)]
        worst[1] += int(np.ravel_multi_index(err.input_index, (x, b)[err.argument].shape))
        assert worst in jac["over"]
        a, fd = (np.array(jac[p]) for p in err.pair)
        assert a.shape == fd.shape == (rows * cols, rows * cols + cols)


def test_the_row_has_reverse_and_forward_mode_and_finite_differences():
    fn, res, err = _failed(np.array([[-1.0, 0.5]]), np.array([1.0, -2.0]))
    views = failure_views(fn, res, err)
    rows, jac = views["ad_vs_fd"], views["jacobian"]
    assert [(r["argument"], r["index"]) for r in rows] == [(0, [0, 0]), (0, [0, 1]), (1, [0]), (1, [1])]
    flat_i = int(np.ravel_multi_index(err.output_index, jac["output_shape"]))
    assert [r["JVP"] for r in rows] == jac["JVP"][flat_i] and [r["FD"] for r in rows] == jac["FD"][flat_i]
    assert all(r["AD"] == r["JVP"] != 0 for r in rows if r["FD"] != 0)  # (the rule's modes agree: both wrong)


def test_a_large_input_gets_the_row_and_no_jacobian():
    rng = np.random.default_rng(3)
    fn, res, err = _failed(rng.normal(size=(8, 10)), rng.normal(size=10))
    assert not res.result.strategy.startswith("full Jacobian")
    views = failure_views(fn, res, err)
    assert views["jacobian"] is None and len(views["ad_vs_fd"]) == ROW_ELEMENTS and len(views["fd_vs_step"]) == 10
