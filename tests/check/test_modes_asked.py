"""gv.check(..., modes=...): a mode left out is never called and is named as
such; the modes asked for are judged as in any check."""

from __future__ import annotations

import pytest

import gradverify as gv

from .._helpers import sine_with_rules as _sin

torch = pytest.importorskip("torch")


SIZES = [pytest.param(5, id="full-jacobian"), pytest.param(300, id="directions")]


def _x(n: int) -> torch.Tensor:
    return torch.linspace(-1.5, 1.5, n, dtype=torch.float64)


@pytest.mark.parametrize("n", SIZES)
def test_a_mode_left_out_is_never_called_and_is_named(n: int) -> None:
    wrong_forward = _sin(jvp_scale=1.5)
    assert not gv.check(wrong_forward, _x(n)).ok  # (every mode by default: the forward rule is caught)
    calls: dict[str, int] = {}
    r = gv.check(_sin(jvp_scale=1.5, calls=calls), _x(n), modes=("VJP",))
    assert r.ok, str(r)
    assert calls.get("jvp", 0) == 0 and calls["vjp"] >= 1
    assert r.modes["JVP"] == "not asked" and r.modes["VJP"] == "checked"
    assert "jvp" not in r.evaluations
    assert str(r).splitlines()[0].startswith("gradverify PASSED (VJP only; JVP not asked)")
    assert not r.by_kind(gv.Kind.MODE_UNAVAILABLE)  # (left out is not missing)

    r = gv.check(_sin(vjp_scale=1.5), _x(n), modes=("JVP",))  # the other way round
    assert r.ok and r.modes["VJP"] == "not asked" and "vjp" not in r.evaluations, str(r)


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("mode", ["JVP", "VJP"])
def test_a_wrong_rule_of_the_mode_asked_for_is_caught_and_named(n: int, mode: str) -> None:
    bug = _sin(jvp_scale=1.001) if mode == "JVP" else _sin(vjp_scale=1.001)
    r = gv.check(bug, _x(n), modes=(mode,))
    assert not r.ok
    assert {f.pair[0] for f in r.errors if f.pair} == {mode}, str(r)
    assert r.errors[0].input_index is not None  # (located, as in any check)


def test_asking_only_for_a_mode_fn_lacks_compares_nothing_and_is_not_a_pass() -> None:
    r = gv.check(_sin(jvp_scale=None), _x(5), modes=("JVP",))
    assert not r.ok
    assert r.by_kind(gv.Kind.NOTHING_CHECKED) and r.modes["VJP"] == "not asked"
    assert r.modes["JVP"] == "unavailable"
    assert "VJP was left out by the check's modes=" in r.errors[0].message and "ask for VJP too" in r.errors[0].message


def test_at_order_2_the_derivatives_modes_are_chosen_the_same_way() -> None:
    x = _x(4)
    r = gv.check(torch.sin, x, order=2, modes=("VJP", "JVP of VJP"))
    assert r.ok, str(r)
    assert r.modes["JVP"] == "not asked" and r.modes["VJP"] == "checked"
    assert r.modes["JVP of VJP"] == "checked" and r.modes["VJP of VJP"] == "not asked"
    assert "JVP of JVP" not in r.modes or r.modes["JVP of JVP"] != "checked"
    # the VJP runs for its derivative's check even where it is not asked itself
    r = gv.check(torch.sin, x, order=2, modes=("VJP of VJP",))
    assert r.ok and r.modes["VJP of VJP"] == "checked" and r.modes["JVP"] == "not asked", str(r)
    # every mode by default
    r = gv.check(torch.sin, x, order=2)
    assert all(r.modes[m] == "checked" for m in ("JVP", "VJP", "JVP of VJP", "VJP of VJP", "JVP of JVP"))


@pytest.mark.parametrize(
    "modes, order",
    [
        ((), 1),
        (("fwd",), 1),
        (("JVP of VJP",), 1),
        (("VJP", "VJP of JVP of VJP"), 2),
        (3, 1),
        ([None], 1),
        (("VJP",), 2),
    ],
)
def test_modes_outside_the_orders_own_are_refused_with_the_list(modes: object, order: int) -> None:
    with pytest.raises(gv.ArgumentValueError, match=r"modes: expected None, or a non-empty sequence.*'JVP', 'VJP'"):
        gv.check(torch.sin, _x(3), order=order, modes=modes)


def test_one_mode_may_be_a_str_and_the_reproducer_repeats_the_choice() -> None:
    r = gv.check(_sin(jvp_scale=1.5), _x(5), modes="VJP")
    assert r.ok and r.modes["JVP"] == "not asked"
    assert "modes=('VJP',)" in r.reproduce


def test_jaxs_names_for_the_modes_are_told_apart() -> None:
    with pytest.raises(gv.ArgumentValueError, match="jax's 'fwd' is the JVP, its 'rev' the VJP"):
        gv.check(torch.sin, _x(3), modes=("rev",))


def test_order_2_asked_for_derivatives_none_could_take_is_not_a_pass() -> None:
    import numpy as np

    rule = gv.Rule(np.sin, jvp=lambda p, t: np.cos(p[0]) * t[0], vjp=lambda p, g: (np.cos(p[0]) * g,))
    r = gv.check(rule, np.linspace(-1, 1, 3), order=2, modes=("JVP", "VJP", "VJP of VJP"))
    assert r.modes["JVP of JVP"] == "not asked" and r.modes["VJP of JVP"] == "not asked", str(r)
    said = [f.message for f in r.by_kind(gv.Kind.MODE_UNAVAILABLE)]
    assert len(said) == 1 and said[0].startswith("the derivative of the VJP"), said  # (only the one asked for)
    assert not r.ok and r.errors[0].message.startswith("no derivative of order 2 was compared (not a pass)")
    assert gv.check(rule, np.linspace(-1, 1, 3), order=2).ok  # (every mode: order 2 named as not checked)
