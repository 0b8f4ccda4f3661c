"""Models as fn: their parameters checked with their inputs, named by their
paths; the caller's module never changed; training-mode randomness explained."""

from __future__ import annotations

import pytest

import gradverify as gv

torch = pytest.importorskip("torch")


def _x(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _linear(scale: float) -> type:
    class Linear(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, w, b):  # type: ignore[no-untyped-def]
            ctx.save_for_backward(x, w)
            return x @ w.T + b

        @staticmethod
        def backward(ctx, g):  # type: ignore[no-untyped-def]
            x, w = ctx.saved_tensors
            return g @ w, scale * (g.T @ x), g.sum(0)

    return Linear


class _Net(torch.nn.Module):
    def __init__(self, scale: float) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc1 = torch.nn.Linear(3, 4).double()
        self.rule = _linear(scale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.rule.apply(x, self.fc1.weight, self.fc1.bias))


def test_a_module_with_a_wrong_weight_gradient_fails_and_names_the_weight() -> None:
    r = gv.check(_Net(2.0), _x(2, 3))
    assert not r.ok
    assert {f.input_name for f in r.errors} == {"model.fc1.weight"}, str(r)
    (f,) = r.errors
    assert len(f.input_index) == 2 and "d model.fc1.weight[" in f.message
    assert [s.name for s in r.inputs] == ["model.fc1.weight", "model.fc1.bias", "arg0"]


def test_the_right_module_passes_and_wrt_inputs_leaves_the_parameters_listed() -> None:
    assert gv.check(_Net(1.0), _x(2, 3)).ok
    r = gv.check(_Net(2.0), _x(2, 3), wrt="inputs")
    assert r.ok, str(r)  # (the wrong weight rule is not asked)
    unchecked = [s.name for s in r.inputs if not s.differentiable]
    assert unchecked == ["model.fc1.weight", "model.fc1.bias"]
    assert "model.fc1.weight: float64[4x3]" in str(r) and "(constant)" in str(r)
    assert not gv.check(_Net(2.0), _x(2, 3), wrt="parameters").ok
    assert not gv.check(_Net(2.0), _x(2, 3), wrt=["fc1.weight"]).ok


_GLOBAL_W = torch.randn(3, 3, generator=torch.Generator().manual_seed(1), dtype=torch.float64).requires_grad_()


def _uses_a_global(x: torch.Tensor) -> torch.Tensor:
    return torch.tanh(x @ _GLOBAL_W)


def test_tensors_fn_reaches_but_was_not_given_are_named_in_a_warning() -> None:
    """A closure over a model checks x alone: the weights its output depends
    on are listed by name (closure, bound object, globals), never passed
    silently; the wrong weight rule goes unchecked, and the warning says so."""
    model = _Net(2.0)
    closed = gv.check(lambda x: model(x), _x(2, 3))
    assert closed.ok  # (the weights were not asked: x's rule is right)
    (w,) = closed.by_kind(gv.Kind.NOT_ARGUMENTS)
    assert w.level == gv.Level.WARNING
    assert "2 tensors that require grad and are not arguments" in w.message
    assert "model.fc1.weight: float64[4x3]; model.fc1.bias: float64[4]" in w.message
    assert "gv.check(module, x)" in w.message
    bound = gv.check(model.forward, _x(2, 3))
    assert "self.fc1.weight" in bound.by_kind(gv.Kind.NOT_ARGUMENTS)[0].message
    (g,) = gv.check(_uses_a_global, _x(2, 3)).by_kind(gv.Kind.NOT_ARGUMENTS)
    assert "1 tensor that requires grad and is not an argument (_GLOBAL_W: float64[3x3])" in g.message
    # given, they are checked and the warning is gone; held constant or frozen, nothing is reached
    assert not gv.check(model, _x(2, 3)).by_kind(gv.Kind.NOT_ARGUMENTS)
    assert not gv.check(model, _x(2, 3), wrt="inputs").by_kind(gv.Kind.NOT_ARGUMENTS)
    frozen = _Net(1.0).requires_grad_(False)
    assert not gv.check(lambda x: frozen(x), _x(2, 3)).by_kind(gv.Kind.NOT_ARGUMENTS)
    # large inputs (directional, vectorised reverse mode) and order 2 see the same
    big = gv.check(lambda x: model(x), _x(40, 3))
    assert big.strategy.startswith("directional") and big.by_kind(gv.Kind.NOT_ARGUMENTS)
    two = gv.check(lambda x: torch.tanh(x) * 2, _x(2, 3), order=2)
    assert two.ok and not two.by_kind(gv.Kind.NOT_ARGUMENTS), str(two)


def test_train_mode_batch_norm_leaves_the_callers_buffers_bit_identical() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4)).double().train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    r = gv.check(model, _x(5, 3))
    assert r.ok, str(r)
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert any("running_mean" in n and "held" in n for n in r.notes), r.notes


def test_dropout_in_training_mode_is_nondeterminism_that_names_eval() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Dropout(0.5)).double()
    r = gv.check(model, _x(5, 3))
    (nd,) = r.by_kind(gv.Kind.NONDETERMINISM)
    assert "module.eval()" in nd.message and "Dropout" in nd.message
    assert gv.check(model.eval(), _x(5, 3)).ok


def test_flax_linen_apply_with_its_params() -> None:
    jax = pytest.importorskip("jax")
    nn = pytest.importorskip("flax.linen")
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)

    class MLP(nn.Module):
        @nn.compact
        def __call__(self, x):  # type: ignore[no-untyped-def]
            return nn.Dense(2, param_dtype=jnp.float64)(jnp.tanh(nn.Dense(3, param_dtype=jnp.float64)(x)))

    x = jnp.linspace(-1.0, 1.0, 4).reshape(1, 4)
    model = MLP()
    variables = model.init(jax.random.PRNGKey(0), x)
    r = gv.check(model.apply, variables, x)
    assert r.ok, str(r)
    assert "arg0['params']['Dense_1']['kernel']" in [s.name for s in r.inputs]

    @jax.custom_vjp
    def act(z):  # type: ignore[no-untyped-def]
        return jnp.tanh(z)

    act.defvjp(lambda z: (jnp.tanh(z), z), lambda z, g: (g * (1 - jnp.tanh(z) ** 2) * jnp.where(z > 0, 2.0, 1.0),))

    class Wrong(nn.Module):
        @nn.compact
        def __call__(self, x):  # type: ignore[no-untyped-def]
            return act(nn.Dense(3, param_dtype=jnp.float64)(x))

    wrong = Wrong()
    bad = gv.check(wrong.apply, wrong.init(jax.random.PRNGKey(1), x), x)
    assert not bad.ok
    named = {f.input_name for f in bad.errors if f.input_name}
    assert named and named <= {"arg0['params']['Dense_0']['kernel']", "arg0['params']['Dense_0']['bias']", "arg1"}


def test_an_equinox_module_as_fn_checks_its_parameters() -> None:
    jax = pytest.importorskip("jax")
    eqx = pytest.importorskip("equinox")
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)
    mlp = eqx.nn.MLP(3, 2, 4, 1, key=jax.random.PRNGKey(0), dtype=jnp.float64)
    x = jnp.linspace(-1.0, 1.0, 3)
    r = gv.check(mlp, x)
    assert r.ok, str(r)
    names = [s.name for s in r.inputs]
    assert "model.layers[0].weight" in names and names[-1] == "arg0"

    @jax.custom_vjp
    def relu_ish(z):  # type: ignore[no-untyped-def]
        return jnp.tanh(z)

    relu_ish.defvjp(lambda z: (jnp.tanh(z), z), lambda z, g: (g * (1 - jnp.tanh(z) ** 2) * 1.5,))
    bad = eqx.nn.MLP(3, 2, 4, 1, activation=relu_ish, key=jax.random.PRNGKey(0), dtype=jnp.float64)
    r = gv.check(bad, x, wrt="model.layers[0].weight")
    assert not r.ok and {f.input_name for f in r.errors} == {"model.layers[0].weight"}, str(r)


@pytest.mark.standard_promotion
# (nnx.BatchNorm keeps its statistics in float32 whatever param_dtype is; updating them
# from float64 batches is jax's scatter FutureWarning - flax's, not the check's)
@pytest.mark.filterwarnings("ignore:scatter inputs have incompatible types:FutureWarning")
def test_a_flax_nnx_module_as_fn_checks_its_params_and_leaves_its_state() -> None:
    """nnx.Param variables are the parameters, named by their paths; a
    train-mode BatchNorm's statistics are updated on a fresh copy at each
    call, never on the caller's module; a wrong rule is named by path."""
    jax = pytest.importorskip("jax")
    nnx = pytest.importorskip("flax.nnx")
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)

    @jax.custom_vjp
    def act(z):  # type: ignore[no-untyped-def]
        return jnp.tanh(z)

    def act_bwd(z, g):  # type: ignore[no-untyped-def]
        return (g * (1 - jnp.tanh(z) ** 2) * scale[0],)

    act.defvjp(lambda z: (jnp.tanh(z), z), act_bwd)
    scale = [1.0]
    f64 = {"dtype": jnp.float64, "param_dtype": jnp.float64}

    class Net(nnx.Module):
        def __init__(self, rngs):  # type: ignore[no-untyped-def]
            self.fc = nnx.Linear(3, 4, rngs=rngs, **f64)
            self.bn = nnx.BatchNorm(4, rngs=rngs, **f64)
            self.out = nnx.Linear(4, 2, rngs=rngs, **f64)

        def __call__(self, x):  # type: ignore[no-untyped-def]
            return self.out(act(self.bn(self.fc(x))))

    net = Net(nnx.Rngs(0))
    x = jax.random.normal(jax.random.key(1), (5, 3), jnp.float64)
    before = [jnp.array(a) for a in jax.tree_util.tree_leaves(nnx.state(net))]
    r = gv.check(net, x)
    assert r.ok, str(r)
    names = [s.name for s in r.inputs]
    assert {"model.fc.kernel", "model.bn.scale", "model.out.bias"} <= set(names) and names[-1] == "arg0"
    assert not any("mean" in n or "var" in n for n in names)  # (batch statistics are state, not parameters)
    after = jax.tree_util.tree_leaves(nnx.state(net))
    assert len(before) == len(after) and all(bool((a == b).all()) for a, b in zip(before, after))
    scale[0] = 1.5
    bad = gv.check(net, x, wrt="model.fc.kernel")
    assert not bad.ok and {f.input_name for f in bad.errors} == {"model.fc.kernel"}, str(bad)
