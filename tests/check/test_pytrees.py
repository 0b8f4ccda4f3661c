"""Pytree arguments and outputs: leaves checked, findings named by path."""

from __future__ import annotations

import collections

import numpy as np
import pytest

import gradverify as gv

torch = pytest.importorskip("torch")


def _t(*shape: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64)


class _Matvec(torch.autograd.Function):
    """w @ x with a backward whose weight gradient is ``scale`` times right."""

    scale = 1.0

    @staticmethod
    def forward(ctx, w, x):  # type: ignore[no-untyped-def]
        ctx.save_for_backward(w, x)
        return w @ x

    @staticmethod
    def backward(ctx, g):  # type: ignore[no-untyped-def]
        w, x = ctx.saved_tensors
        return _Matvec.scale * torch.outer(g, x), w.T @ g


class _Twice(_Matvec):
    scale = 2.0

    @staticmethod
    def backward(ctx, g):  # type: ignore[no-untyped-def]
        w, x = ctx.saved_tensors
        return 2.0 * torch.outer(g, x), w.T @ g


def _params() -> dict[str, torch.Tensor]:
    return {"w": _t(3, 4, seed=1), "b": _t(3, seed=2), "steps": torch.tensor(3)}


@pytest.mark.parametrize("rule", [_Matvec, _Twice])
def test_a_dict_of_torch_tensors_is_checked_leaf_by_leaf(rule: type) -> None:
    def f(p: dict, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(rule.apply(p["w"], x) + p["b"]) * p["steps"]

    r = gv.check(f, _params(), _t(4, seed=3))
    names = [s.name for s in r.inputs]
    assert names == ["arg0['w']", "arg0['b']", "arg0['steps']", "arg1"] or sorted(names) == sorted(
        ["arg0['w']", "arg0['b']", "arg0['steps']", "arg1"]
    )
    steps = next(s for s in r.inputs if s.name == "arg0['steps']")
    assert not steps.differentiable  # (an integer leaf is a constant)
    if rule is _Matvec:
        assert r.ok, str(r)
        return
    assert not r.ok
    (f0,) = r.errors
    assert f0.input_name == "arg0['w']" and f0.argument == 0 and len(f0.input_index) == 2
    assert "d arg0['w'][" in f0.message, f0.message
    assert f0.to_dict()["input_name"] == "arg0['w']"
    assert "arg0['w']" in str(r) and "reproduce: gv.check(f, {'w': torch.tensor([[" in str(r)
    # the reproducer runs as written where f and torch are defined, and fails alike
    again = eval(r.reproduce, {"gv": gv, "torch": torch, "f": f})  # noqa: S307
    assert [e.input_name for e in again.errors] == [f0.input_name] and again.errors[0].values == f0.values


def test_wrt_takes_names_and_refuses_one_that_matches_nothing() -> None:
    def f(p: dict, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(_Twice.apply(p["w"], x) + p["b"])

    only_b = gv.check(f, _params(), _t(4, seed=3), wrt="arg0['b']")
    assert only_b.ok  # (the wrong weight rule is not asked)
    assert [s.name for s in only_b.inputs if s.differentiable] == ["arg0['b']"]
    whole = gv.check(f, _params(), _t(4, seed=3), wrt=["arg0"])
    assert not whole.ok and whole.errors[0].input_name == "arg0['w']"
    with pytest.raises(gv.ArgumentValueError, match="no leaf named so; the leaves are: .*arg0\\['w'\\]"):
        gv.check(f, _params(), _t(4, seed=3), wrt="weight")


def test_a_wrong_second_output_is_caught_and_named() -> None:
    w = _t(3, 4, seed=1)

    class WrongX(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):  # type: ignore[no-untyped-def]
            ctx.save_for_backward(x)
            return w @ x

        @staticmethod
        def backward(ctx, g):  # type: ignore[no-untyped-def]
            return -(w.T @ g)

    Out = collections.namedtuple("Out", "smooth linear")

    def tuple_out(x: torch.Tensor):  # type: ignore[no-untyped-def]
        return torch.sin(x), WrongX.apply(x)

    def dict_out(x: torch.Tensor):  # type: ignore[no-untyped-def]
        return {"smooth": torch.sin(x), "linear": WrongX.apply(x)}

    def named_out(x: torch.Tensor):  # type: ignore[no-untyped-def]
        return Out(torch.sin(x), WrongX.apply(x))

    for fn, name in ((tuple_out, "output[1]"), (dict_out, "output['linear']"), (named_out, "output.linear")):
        r = gv.check(fn, _t(4, seed=3))
        assert not r.ok, str(r)
        assert {f.output_name for f in r.errors} == {name}, str(r)
        assert all(len(f.output_index) == 1 and f.output_index[0] < 3 for f in r.errors if f.output_index)
        right = gv.check(lambda x: (torch.sin(x), w @ x), _t(4, seed=3))
        assert right.ok, str(right)


def test_jax_pytrees_pass_right_rules_and_name_a_wrong_leaf() -> None:
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)

    @jax.custom_vjp
    def scale(w, x):  # type: ignore[no-untyped-def]
        return w * x

    scale.defvjp(lambda w, x: (w * x, (w, x)), lambda res, g: (res[1] * g * 3.0, jnp.sum(res[0] * g, axis=0)))

    params = {"dense": {"kernel": jnp.linspace(0.5, 1.5, 6).reshape(2, 3), "bias": jnp.array([0.1, -0.2])}}
    x = jnp.linspace(-1.0, 1.0, 3)

    def right(p, x):  # type: ignore[no-untyped-def]
        return {"y": jnp.tanh(p["dense"]["kernel"] @ x + p["dense"]["bias"])}

    assert gv.check(right, params, x).ok

    def wrong(p, x):  # type: ignore[no-untyped-def]
        return jnp.sum(scale(p["dense"]["kernel"], x), axis=1) + p["dense"]["bias"]

    r = gv.check(wrong, params, x)
    assert not r.ok and {f.input_name for f in r.errors if f.input_name} == {"arg0['dense']['kernel']"}, str(r)


def test_numpy_dicts_with_a_rule() -> None:
    sq = gv.Rule(
        lambda p: p["a"] * p["b"],
        jvp=lambda ps, ts: ts[0]["a"] * ps[0]["b"] + ps[0]["a"] * ts[0]["b"],
        vjp=lambda ps, g: ({"a": g * ps[0]["b"], "b": g * ps[0]["a"] * 1.5},),
    )
    r = gv.check(sq, {"a": np.linspace(0.5, 1.0, 3), "b": np.linspace(-1.0, 2.0, 3)})
    assert not r.ok and {f.input_name for f in r.errors} == {"arg0['b']"}, str(r)


def test_verify_shrinks_a_pytree_counterexample_and_its_example_rebuilds_it() -> None:
    from hypothesis import strategies as st

    from gradverify import strategies as gst

    def f(p: dict, x: torch.Tensor) -> torch.Tensor:
        return _Twice.apply(p["w"], x)

    st_args = st.tuples(
        st.fixed_dictionaries({"w": gst.arrays("torch", shape=(2, 2))}), gst.arrays("torch", shape=(2,))
    )
    v = gv.verify(f, st_args, max_examples=20)
    assert not v.ok and isinstance(v.counterexample[0], dict)
    text = str(v)
    line = next(s for s in text.splitlines() if s.strip().startswith("@example("))
    rebuilt = eval(line.strip()[len("@example(") : -1], {"torch": torch})  # noqa: S307 -- the report's own literal
    assert torch.equal(rebuilt[0]["w"], v.counterexample[0]["w"]) and torch.equal(rebuilt[1], v.counterexample[1])
    assert "arg0['w']" in text
    assert sorted(np.load(v.saved).files) == ["arg0", "arg1"]
