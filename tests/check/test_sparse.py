"""Sparse torch arguments and outputs, checked as their specified values with
the pattern held fixed (gradcheck's masked semantics)."""

from __future__ import annotations

import warnings

import pytest

import gradverify as gv

torch = pytest.importorskip("torch")

LAYOUTS = [torch.sparse_coo, torch.sparse_csr, torch.sparse_csc, torch.sparse_bsr]


@pytest.fixture(autouse=True)
def _quiet_sparse_betas():
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*[Ss]parse.*", category=UserWarning)
        yield


def dense(seed=0, shape=(4, 4)):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(*shape, generator=g, dtype=torch.float64)
    a[a.abs() < 0.6] = 0
    return a


def as_layout(a, layout):
    if layout == torch.sparse_bsr:
        return a.to_sparse_bsr((2, 2))
    return a.to_sparse(layout=layout)


def sparse_note(r):
    return next(n for n in r.notes if n.startswith("sparse:"))


@pytest.mark.parametrize("layout", [torch.sparse_coo, torch.sparse_csr], ids=["coo", "csr"])
def test_sparse_mm_passes_and_names_the_layout(layout):
    s, d = as_layout(dense(), layout), dense(1, (4, 3))
    r = gv.check(torch.sparse.mm, s, d)
    assert r.ok, str(r)
    assert r.inputs[0].layout == str(layout).removeprefix("torch.") and r.inputs[0].specified == s.values().numel()
    assert r.inputs[0].shape == (4, 4)
    assert f"{s.values().numel()} specified" in sparse_note(r)
    assert r.modes["VJP"] == "checked"
    assert not r.by_kind(gv.Kind.WRONG_LAYOUT), str(r)


def test_a_dense_gradient_rule_for_a_sparse_input_is_said():
    """torch.mm differentiates a sparse argument as a dense matrix: its
    gradient has values outside the pattern, said as a layout warning; the
    specified values' gradient is right."""
    s, d = dense().to_sparse(), dense(1, (4, 3))
    r = gv.check(torch.mm, s, d)
    assert r.ok, str(r)
    (f,) = r.by_kind(gv.Kind.WRONG_LAYOUT)
    assert f.level == "warning" and f.argument == 0
    outside = int((dense() == 0).sum())
    assert f"is strided with non-zero values at {outside} unspecified element(s)" in f.message
    assert dense()[f.input_index] == 0


def test_sampled_addmm_sparse_output():
    mask = dense().to_sparse_csr()
    g = torch.Generator().manual_seed(2)
    x, y = torch.randn(4, 5, generator=g, dtype=torch.float64), torch.randn(5, 4, generator=g, dtype=torch.float64)
    r = gv.check(lambda a, b: torch.sparse.sampled_addmm(mask, a, b), x, y)
    assert r.ok, str(r)
    assert r.output.layout == "sparse_csr" and r.output.specified == mask.values().numel()
    assert "the output sparse_csr 4x4" in sparse_note(r)


class _SparseMM(torch.autograd.Function):
    """sparse @ dense with a hand-written, masked backward; ``bug`` makes the
    sparse argument's gradient transposed (right shape, wrong values)."""

    bug = False

    @staticmethod
    def forward(ctx, s, d):
        ctx.save_for_backward(s, d)
        return torch.sparse.mm(s, d)

    @staticmethod
    def backward(ctx, g):
        s, d = ctx.saved_tensors
        full = g @ d.T
        if _SparseMM.bug:
            full = full.T.contiguous()
        return full.sparse_mask(s.coalesce()), torch.sparse.mm(s.t(), g)


@pytest.mark.parametrize("bug", [False, True])
def test_a_coo_function_right_and_wrong(bug):
    _SparseMM.bug = bug
    try:
        r = gv.check(_SparseMM.apply, dense().to_sparse(), dense(1, (4, 3)))
    finally:
        _SparseMM.bug = False
    assert r.ok is not bug, str(r)
    if bug:
        f = r.by_kind(gv.Kind.MISMATCH)[0]
        assert f.argument == 0 and f.pair[0] == "VJP"
        assert dense()[f.input_index] != 0  # a dense index, at a specified element
        assert "value element" in f.where
    else:
        assert "arg0: sparse_coo" in " ".join(r.notes)


def test_the_callers_sparse_tensor_is_untouched():
    s = dense().to_sparse().requires_grad_()
    before = s.detach().to_dense().clone()
    r = gv.check(lambda t: torch.sparse.sum(t * t), s)
    assert r.ok, str(r)
    assert torch.equal(s.detach().to_dense(), before) and s.grad is None


@pytest.mark.parametrize("layout", LAYOUTS, ids=["coo", "csr", "csc", "bsr"])
def test_elementwise_on_every_layout(layout):
    s = as_layout(dense(3), layout)
    r = gv.check(lambda t: t.to_dense().tanh() * 2.0, s)
    assert r.ok, str(r)
    assert r.inputs[0].layout == str(layout).removeprefix("torch.")


def test_order_2_with_respect_to_coo_values_is_unavailable_not_a_mismatch():
    """torch's COO tensors differentiate once (the gradient with respect to
    their values comes back cut from the graph): the second derivatives are
    said unavailable, never a mismatch blamed on fn."""
    d = dense(1, (4, 3))
    r = gv.check(lambda s: (s.to_dense() @ d).tanh(), dense().to_sparse(), order=2)
    assert r.ok and not r.by_kind(gv.Kind.MISMATCH), str(r)
    assert r.modes["VJP"] == "checked"
    f = [f for f in r.by_kind(gv.Kind.MODE_UNAVAILABLE) if f.order == 2]
    assert f and "differentiate once" in f[0].message


def test_a_sparse_output_is_read_at_the_points_pattern():
    """relu(a).to_sparse() at a point with exact zeros: a step up at a zero
    makes a new element, which is not one of the point's; the point's
    elements are checked (relu's kink at 0 is never one of them)."""
    a = dense(4)
    a[0, 0] = 0.0
    r = gv.check(lambda t: torch.relu(t).to_sparse(), a)
    assert r.ok and r.output.specified == int((a > 0).sum()), str(r)

    class Relu(torch.autograd.Function):
        @staticmethod
        def forward(ctx, t):
            ctx.save_for_backward(t)
            return torch.relu(t)

        @staticmethod
        def backward(ctx, g):
            (t,) = ctx.saved_tensors
            return g * (t > 0) * 1.5  # wrong slope

    bad = gv.check(lambda t: Relu.apply(t).to_sparse(), a)
    f = bad.by_kind(gv.Kind.MISMATCH)[0]
    assert a[f.output_index] > 0 and f.input_index == f.output_index, str(bad)


def test_a_complex_compressed_argument_is_refused_with_the_fix():
    """torch cannot differentiate a complex CSR tensor built from its values:
    refused, never a pass with nothing compared."""
    z = torch.complex(dense(5), dense(6)).to_sparse_csr()
    with pytest.raises(gv.ArgumentTypeError) as e:
        gv.check(lambda s: s.to_dense().abs(), z)
    msg = str(e.value)
    assert "argument 0: expected a sparse array whose values the framework differentiates" in msg
    assert "complex128 sparse_csr" in msg and "x.to_sparse()" in msg
    assert gv.check(lambda s: s.to_dense().abs(), z.to_sparse()).ok  # the fix works


def test_order_2_with_respect_to_csr_values_is_unavailable_not_an_exception():
    r = gv.check(lambda s: s.to_dense().sin(), dense().to_sparse_csr(), order=2)
    assert r.ok and not r.by_kind(gv.Kind.EXCEPTION), str(r)
    assert any(f.order == 2 and "second derivative" in f.message for f in r.by_kind(gv.Kind.MODE_UNAVAILABLE))


@pytest.mark.parametrize("layout", LAYOUTS, ids=["coo", "csr", "csc", "bsr"])
def test_opinfo_sparse_samples_that_gradcheck_passes_pass(layout):
    """PyTorch's own sparse samples of mul and sum (small ones): wherever
    gradcheck(masked=True) passes one, gv.check passes it too."""
    pytest.importorskip("expecttest")
    from torch.testing._internal.common_methods_invocations import op_db

    compared = 0
    for name in ("mul", "sum"):
        op = next(o for o in op_db if o.name == name)
        per_op = compared + 6
        for sample in op.sample_inputs_sparse(layout, "cpu", torch.float64, requires_grad=True):
            if compared >= per_op:
                break
            inputs = [sample.input, *sample.args]
            positions = [k for k, t in enumerate(inputs) if isinstance(t, torch.Tensor)]
            tensors = [inputs[k].detach() for k in positions]
            if any(t.numel() == 0 or t.numel() > 64 for t in tensors) or sample.kwargs.get("dtype"):
                continue
            if any(t.layout != torch.strided and t._nnz() == 0 for t in tensors):
                continue

            def fn(*ts, op=op, sample=sample, inputs=inputs, positions=positions):
                full = list(inputs)
                for k, t in zip(positions, ts):
                    full[k] = t
                return op(full[0], *full[1:], **sample.kwargs)

            def densified(*ts, fn=fn):
                out = fn(*ts)
                return out.to_dense() if out.layout != torch.strided else out

            try:
                torch.autograd.gradcheck(
                    densified, tuple(t.clone().requires_grad_() for t in tensors), masked=True, raise_exception=True
                )
            except Exception:  # noqa: BLE001 -- gradcheck's own verdict (or torch's missing rule): not compared
                continue
            r = gv.check(fn, *tensors)
            assert r.ok, f"{name} {sample}\n{r}"
            compared += 1
    assert compared >= 2


@pytest.fixture
def bcoo():
    jax = pytest.importorskip("jax")
    sparse = pytest.importorskip("jax.experimental.sparse")
    with jax.enable_x64(True):
        yield sparse.BCOO.fromdense(jax.numpy.asarray(dense().numpy())), jax.numpy.asarray(dense(1, (4, 3)).numpy())


def test_jax_bcoo_argument_and_output(bcoo):
    import jax

    s, d = bcoo
    with jax.enable_x64(True):
        r = gv.check(lambda s, d: jax.numpy.tanh(s @ d), s, d)
        out = gv.check(lambda s: s * 2.0, s)
    assert r.ok and r.inputs[0].layout == "bcoo" and r.inputs[0].specified == s.nse, str(r)
    assert r.modes["JVP"] == r.modes["VJP"] == "checked"
    assert out.ok and out.output.layout == "bcoo", str(out)


def test_jax_bcoo_with_a_wrong_rule_on_its_values(bcoo):
    import jax

    s, d = bcoo

    @jax.custom_vjp
    def f(v):
        return jax.numpy.sin(v)

    f.defvjp(lambda v: (jax.numpy.sin(v), v), lambda v, g: (jax.numpy.cos(v) * g * 1.01,))
    with jax.enable_x64(True):
        r = gv.check(lambda s: f(s.data).sum() + (s @ d).sum(), s)
    assert not r.ok
    m = r.by_kind(gv.Kind.MISMATCH)[0]
    assert dense()[m.input_index] != 0 and "value element" in m.where


@pytest.mark.parametrize("layout", [torch.sparse_coo, torch.sparse_csr], ids=["coo", "csr"])
def test_sum_of_a_sparse_tensor_passes_where_gradcheck_masked_raises(layout):
    """torch.sum's backward gives a dense gradient (ones everywhere) for a
    sparse argument. Under masked semantics the unspecified elements'
    gradients are ignored; gradcheck(masked=True) compares them anyway and
    reports a Jacobian mismatch. gv.check compares the specified values
    (right: 1 each) and says the rest as a layout warning."""
    a = torch.tensor([[1.0, 0.0, 3.0], [0.0, 2.0, 0.0]], dtype=torch.float64)
    s = as_layout(a, layout)
    with pytest.raises(RuntimeError, match="Jacobian mismatch"):  # (torch's GradcheckError)
        torch.autograd.gradcheck(torch.sum, (s.clone().requires_grad_(),), masked=True)
    r = gv.check(torch.sum, s)
    assert r.ok and not r.by_kind(gv.Kind.MISMATCH), str(r)
    (w,) = r.by_kind(gv.Kind.WRONG_LAYOUT)
    assert "non-zero values at 3 unspecified element(s)" in w.message


def test_jax_bcoo_with_duplicate_indices_names_the_dense_element():
    jax = pytest.importorskip("jax")
    sparse = pytest.importorskip("jax.experimental.sparse")
    jnp = jax.numpy
    with jax.enable_x64(True):
        dup = sparse.BCOO((jnp.array([1.0, 2.0, 3.0]), jnp.array([[3, 4], [0, 5], [3, 4]])), shape=(4, 6))

        @jax.custom_vjp
        def f(v):
            return v * 2.0

        f.defvjp(lambda v: (v * 2.0, None), lambda _, g: (g * jnp.array([2.0, 2.5]),))  # wrong at one value
        r = gv.check(lambda s: f(s.todense()[jnp.array([0, 3]), jnp.array([5, 4])]), dup)
    assert not r.ok and r.inputs[0].specified == 2  # (duplicates summed: each element once)
    assert "duplicate entries summed" in " ".join(r.notes)
    assert r.by_kind(gv.Kind.MISMATCH)[0].input_index == (3, 4)
