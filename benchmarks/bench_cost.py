"""What a check costs, beside gradcheck and check_grads on the same work, in one run.

Six parts, each printed as a table (CPU, one torch thread):

* ``counts``: what one check of tanh(x + b) at n elements asks of a device,
  counted at torch's dispatcher with the FD arithmetic in blocks as large
  as on a GPU (one block up to 2^22 elements): kernel launches (every aten
  operation that moves data; views, metadata and allocations - ``aten.empty``
  and its kind run no kernel and write nothing - left out), host reads (a
  scalar read, ``aten._local_scalar_dense``, a comparison whose answer is a
  host bool, ``aten.equal``, or a tensor handed to the host
  by ``.tolist()``/``.numpy()``: each one a device synchronisation on a
  GPU), bytes written over the bytes of x, and fn's calls; passing (a
  correct rule) and failing (one sign-flipped element of the VJP, which must
  be named), and the most full-size arrays the check holds at once
  (``live_peak``, blocks as on a GPU); beside ``gradcheck(fast_mode=True)``
  and one forward+backward pass; for jax, the programs compiled by a first check (gradverify and
  ``check_grads``). Then the host-side floor: the median time of a check
  at n = 2000, where the arithmetic is nothing and gradverify's own Python
  and dispatch are the cost.

* ``crossings``: the arrays that cross between the host and fn's device
  in one check of small inputs (held in numpy by the check): counted at
  the calls that are each a transfer on a GPU, with the scalar reads and
  fn's calls, beside torch's ``gradcheck`` on the same function.

* ``large``: one sign-flipped element of the VJP of tanh(x + b) at n
  elements (bench_detection's functions: a torch Function with a JVP, the
  same with its backward only, a jax custom_vjp): detections with the
  element named, the median time as a multiple of one forward+backward pass,
  the evaluations of fn and the AD calls of one check (its ``evaluations``),
  the full-size passes over memory inside fn and in the checker's own
  arithmetic (torch, counted at torch's dispatcher), peak memory beyond the
  inputs in arrays of x's size: resident (sampled, so it counts memory the
  allocator keeps after a release, and varies from run to run) and live
  (torch: the most full-size arrays the check holds at once, read at the
  dispatcher).
* ``passing``: a passing check of tanh(x + b) (a torch Function with a JVP,
  backward only, and a jax custom_vjp) at n elements, the median of rounds alternating with
  one forward+backward pass, as a multiple of that pass: in wall time, and
  in the process's CPU time (steadier where the machine is shared).
* ``small``: a fixed set of small functions (torch with and without forward
  rules, backward-only Functions, jax, numpy ``gv.Rule``), warm medians over
  rounds that alternate the tools (with the share of gradverify's time spent
  inside calls of fn and its derivatives, the framework's AD included: the
  rest is the checker's own): gradverify's default check against
  ``gradcheck`` (slow mode, forward AD checked where the function has it)
  and ``check_grads(order=1, modes=("fwd", "rev"))`` (or "rev" alone where
  there is no JVP); the ratios' median.
* ``first``: the first check of an eager jax library function in a fresh
  process, gradverify (and gradverify under ``jax.disable_jit()``, which
  compiles nothing) against check_grads, each in its own process, rounds
  alternating; numpyro's ``DoublyTruncatedPowerLaw.log_prob`` where numpyro
  is installed.
* ``shrink``: a failing ``gv.verify`` of a function whose single check takes
  about half a second, with the default shrink budget: its wall time and
  whether shrinking was cut.

    python benchmarks/bench_cost.py [--parts counts crossings large passing small first shrink]
                                    [--sizes 1000000] [--rounds 7]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent


def _timed(f):
    t = time.perf_counter()
    out = f()
    return out, time.perf_counter() - t


# -- what a check asks of a device ----------------------------------------------------
class Counts:
    """Launches, host reads and bytes written by torch operations while the
    block runs (see the module docstring), with fn's own calls."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.launches = self.reads = self.calls = 0
        self.bytes = 0.0

    def __enter__(self) -> Counts:
        from torch.utils._python_dispatch import TorchDispatchMode

        import gradverify._check.fd.blocks as blocks

        outer = self

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                name = str(func.overloadpacket)
                if func.is_view or name in _NO_DATA or name in _METADATA or name in _ALLOCATIONS:
                    return out
                outer.launches += 1
                outer.reads += name in _TO_HOST
                for t in torch.utils._pytree.tree_leaves(out):
                    if isinstance(t, torch.Tensor):
                        outer.bytes += t.numel() * t.element_size()
                return out

        self._saved = (blocks.CHUNK, torch.Tensor.tolist, torch.Tensor.numpy)
        blocks.CHUNK = blocks.DEVICE_CHUNK  # (the blocks of a GPU)

        def handed(method):
            def read(t, *a, **k):
                outer.reads += 1
                return method(t, *a, **k)

            return read

        torch.Tensor.tolist, torch.Tensor.numpy = handed(torch.Tensor.tolist), handed(torch.Tensor.numpy)
        self._mode = Mode()
        self._mode.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        import gradverify._check.fd.blocks as blocks

        self._mode.__exit__(*exc)
        blocks.CHUNK, torch.Tensor.tolist, torch.Tensor.numpy = self._saved

    def counted(self, fn):
        """fn, its calls counted."""

        def call(*a):
            self.calls += 1
            return fn(*a)

        return call

    def row(self, x: torch.Tensor) -> str:
        per_x = x.numel() * x.element_size()
        return f"{self.launches} | {self.reads} | {self.bytes / per_x:.0f} | {self.calls}"


#: operations that only say something about a tensor (no data moved)
_METADATA = {"aten.sym_size", "aten.sym_stride", "aten.sym_numel", "aten.sym_storage_offset", "aten.dim"}
#: operations that only reserve memory (no kernel, nothing written)
_ALLOCATIONS = {"aten.empty", "aten.empty_like", "aten.empty_strided", "aten.new_empty", "aten.new_empty_strided"}


def _jax_compiles(f) -> int:
    """Programs jax compiles while ``f`` runs."""
    import jax

    seen = [0]

    def listen(event, duration, **kw):
        if event == "/jax/core/compile/backend_compile_duration":
            seen[0] += 1

    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        f()
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)
    return seen[0]


def counts(n: int, rounds: int) -> None:
    from jax.test_util import check_grads

    import gradverify as gv
    import gradverify._check.fd.blocks as blocks
    from gradverify._sweep.examples import tanh_bias_flipped

    rng = np.random.default_rng([0, n])
    x = torch.tensor(rng.standard_normal((n // 10, 10)))
    b = torch.tensor(rng.standard_normal(10))
    flip = int(rng.integers(x.numel()))
    print(f"n = {n:.0e}, flipped element {flip}; blocks as on a GPU\n")
    print("| check | verdict | launches | host reads | bytes / bytes of x | fn calls | live arrays |")
    print("|---|---|---|---|---|---|---|")

    def live(rule, run=None) -> str:
        saved, blocks.CHUNK = blocks.CHUNK, blocks.DEVICE_CHUNK  # (the blocks of a GPU)
        try:
            return f"{live_peak(rule, (x, b), n, run):.1f}"
        finally:
            blocks.CHUNK = saved

    for label, forward_rule in (("torch Function with JVP", True), ("torch Function, backward only", False)):
        for at in (None, flip):
            rule = tanh_bias_flipped("torch", at, forward_rule=forward_rule)
            gv.check(rule, x, b)  # (warm)
            with Counts(n) as c:
                r = gv.check(c.counted(rule), x, b)
            named = [f.input_index for f in r.findings if f.input_index is not None and f.argument == 0]
            right = bool(named) and int(np.ravel_multi_index(named[0], tuple(x.shape))) == at
            verdict = "pass" if r.ok else f"fail, {'names it' if right else 'does not name it'}"
            print(
                f"| gradverify, {label}, {'correct' if at is None else 'flipped'} | {verdict} | {c.row(x)} "
                f"| {live(rule)} |"
            )
    for at in (None, flip):
        rule = tanh_bias_flipped("torch", at)
        xr, br = x.detach().requires_grad_(), b.detach().requires_grad_()
        with Counts(n) as c:
            ok = torch.autograd.gradcheck(c.counted(rule), (xr, br), fast_mode=True, raise_exception=False)
        fast = partial(torch.autograd.gradcheck, rule, (xr, br), fast_mode=True, raise_exception=False)
        label = f"gradcheck fast, {'correct' if at is None else 'flipped'}"
        print(f"| {label} | {'pass' if ok else 'fail'} | {c.row(x)} | {live(rule, fast)} |")
    rule = tanh_bias_flipped("torch", None)
    with Counts(n) as c:
        xr, br = x.detach().requires_grad_(), b.detach().requires_grad_()
        y = c.counted(rule)(xr, br)
        y.backward(torch.ones_like(y))
    print(f"| one forward+backward | - | {c.row(x)} | - |")

    import jax

    with jax.enable_x64(True):
        xj, bj = jax.numpy.asarray(x.numpy()), jax.numpy.asarray(b.numpy())
        rule = tanh_bias_flipped("jax", None)
        first = _jax_compiles(lambda: gv.check(rule, xj, bj))
        again = _jax_compiles(lambda: gv.check(rule, xj, bj))
        peer = _jax_compiles(lambda: check_grads(rule, (xj, bj), order=1, modes=("rev",)))
    print(f"\njax custom_vjp, correct: programs compiled by a first check {first} (a repeat: {again}); ", end="")
    print(f"check_grads {peer}\n")

    small = 2000
    xs, bs = x.reshape(-1)[:small].reshape(-1, 10).clone(), b.clone()
    print("| host-side floor, n = 2000 | median ms |")
    print("|---|---|")
    for label, at in (("gradverify, correct", None), ("gradverify, flipped", 7)):
        rule = tanh_bias_flipped("torch", at)
        gv.check(rule, xs, bs)
        times = [_timed(lambda: gv.check(rule, xs, bs))[1] for _ in range(rounds)]
        print(f"| {label} | {statistics.median(times) * 1e3:.1f} |")
    rule = tanh_bias_flipped("torch", None)
    xr, br = xs.detach().requires_grad_(), bs.detach().requires_grad_()
    times = [_timed(lambda: torch.autograd.gradcheck(rule, (xr, br), fast_mode=True))[1] for _ in range(rounds)]
    print(f"| gradcheck fast, correct | {statistics.median(times) * 1e3:.1f} |")


def crossings() -> None:
    """Arrays crossing between the host and fn's device in one check of
    small inputs: (2, 6) and (6,), held in numpy by the check (see
    _check.xp.HOST_MAX). Counted on the CPU at the calls that would each be
    a transfer on a GPU (torch.from_numpy, torch.as_tensor, torch.asarray,
    torch.tensor; Tensor.numpy); scalar reads (Tensor.item, Tensor.tolist)
    beside them. The arguments are copied where they lie, as on a device
    (on the CPU a check copies them from the host's copies: cheaper there)."""
    import gradverify as gv
    import gradverify.backends.torch as torch_backend
    from gradverify._sweep.examples import tanh_bias_flipped

    torch_backend.HOLD_ON_CPU = True  # (the arguments copied where they lie, as on a device)
    try:
        rng = np.random.default_rng(5)
        x, b = torch.tensor(rng.standard_normal((2, 6))), torch.tensor(rng.standard_normal(6))
        cases = [
            ("plain torch function", lambda x, b: torch.tanh(x + b)),
            ("Function, backward only", tanh_bias_flipped("torch", None, forward_rule=False)),
            ("Function with a forward rule", tanh_bias_flipped("torch", None, forward_rule=True)),
        ]
        print(
            "| small check, correct | gradverify: arrays across | scalar reads | fn calls | gradcheck: arrays across |"
        )
        print("|---|---|---|---|---|")
        for label, fn in cases:
            gv.check(fn, x, b)  # (warm)
            mine = _across(lambda: gv.check(fn, x, b))
            xr, br = x.detach().requires_grad_(), b.detach().requires_grad_()
            forward = label.endswith("rule") or label.startswith("plain")
            theirs = _across(lambda: torch.autograd.gradcheck(fn, (xr, br), check_forward_ad=forward))
            r = gv.check(fn, x, b)
            print(f"| {label} | {mine[0]} | {mine[1]} | {sum(r.evaluations.values())} | {theirs[0]} |")
    finally:
        torch_backend.HOLD_ON_CPU = False


def _across(f) -> tuple[int, int]:
    """(arrays crossing, scalar reads) while ``f`` runs (see crossings)."""
    counted = [0, 0]
    places = [(torch, n, 0) for n in ("from_numpy", "as_tensor", "asarray", "tensor")]
    places += [(torch.Tensor, "numpy", 0), (torch.Tensor, "item", 1), (torch.Tensor, "tolist", 1)]
    saved = [(owner, name, getattr(owner, name)) for owner, name, _ in places]

    def wrapped(method, k):
        def call(*a, **kw):
            counted[k] += 1
            return method(*a, **kw)

        return call

    for (owner, name, k), (_, _, method) in zip(places, saved):
        setattr(owner, name, wrapped(method, k))
    try:
        f()
    finally:
        for owner, name, method in saved:
            setattr(owner, name, method)
    return counted[0], counted[1]


# -- large arrays ---------------------------------------------------------------------
#: torch operations that move no data (views, metadata)
_NO_DATA = {
    "aten.slice", "aten.view", "aten.select", "aten.detach", "aten.alias", "aten.expand",
    "aten.is_same_size", "aten._has_same_storage_numel", "aten.lift_fresh",
}  # fmt: skip
#: torch operations whose answer is on the host: a device synchronisation each
_TO_HOST = {"aten._local_scalar_dense", "aten.equal"}


def passes(fn, args, n: int) -> tuple[float, float]:
    """Full-size passes of one torch check: every torch operation's larger of
    the elements it writes and the elements of its largest input, over n,
    summed - (inside fn and its rules, the checker's own). Read from torch's
    dispatcher, so every operation counts, not only those written as passes."""
    from torch.utils._python_dispatch import TorchDispatchMode

    import gradverify as gv

    count = {True: 0.0, False: 0.0}
    depth = [0]

    class Passes(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if not (func.is_view or str(func.overloadpacket) in _NO_DATA):
                leaves = torch.utils._pytree.tree_leaves
                written = sum(t.numel() for t in leaves(out) if isinstance(t, torch.Tensor))
                read = max([t.numel() for t in leaves((args, kwargs)) if isinstance(t, torch.Tensor)] or [0])
                count[depth[0] > 0] += max(written, read) / n
            return out

    def inside(*a):
        depth[0] += 1
        try:
            return fn(*a)
        finally:
            depth[0] -= 1

    with Passes():
        gv.check(inside, *args)
    return count[True], count[False]


def live_peak(fn, args, n: int, run=None) -> float:
    """The most full-size arrays one torch check holds at once, beyond its
    inputs: every storage of at least n/2 elements' bytes an operation
    creates, counted from its creation to its release (read at torch's
    dispatcher, so memory the allocator keeps after a release, which
    resident-memory sampling counts, is not), in float64 arrays of n. The
    arguments' own storages are not counted (a view of one is no new memory).
    ``run``: what runs instead of ``gv.check(fn, *args)`` (a peer's check)."""
    import weakref

    from torch.utils._python_dispatch import TorchDispatchMode

    import gradverify as gv

    state = {"live": 0.0, "peak": 0.0}
    seen = {a.untyped_storage().data_ptr() for a in args if isinstance(a, torch.Tensor)}

    def released(key, size):
        seen.discard(key)
        state["live"] -= size

    class Live(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in torch.utils._pytree.tree_leaves(out):
                if not isinstance(t, torch.Tensor) or t.untyped_storage().nbytes() < 4 * n:
                    continue
                storage = t.untyped_storage()
                key = storage.data_ptr()
                if key in seen:
                    continue
                size = storage.nbytes() / (8 * n)
                seen.add(key)
                state["live"] += size
                state["peak"] = max(state["peak"], state["live"])
                weakref.finalize(storage, released, key, size)
            return out

    with Live():
        (run or (lambda: gv.check(fn, *args)))()
    return state["peak"]


def large(sizes: list[int], positions: int) -> None:
    sys.path.insert(0, str(ROOT))
    import bench_detection as bd  # (its functions and measurements, shared)
    import jax

    import gradverify as gv

    print(
        "| n | tool | named | x fwd+bwd | fn | JVPs | VJPs | passes in fn / the checker's "
        "| peak memory (arrays): resident / live |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for n in sizes:
        res = bd.bench(n, positions, "cpu", baselines=True)
        rng = np.random.default_rng([0, n])
        x = torch.tensor(rng.standard_normal((n // 10, 10)))
        b = torch.tensor(rng.standard_normal(10))
        counts = {}
        for key, rule in (("gv_torch", bd.torch_fn(0)), ("gv_torch_backward", bd.torch_fn(0, forward_rule=False))):
            counts[key] = (
                gv.check(rule, x, b).evaluations,
                "{:.0f} / {:.0f}".format(*passes(rule, (x, b), n)),
                live_peak(rule, (x, b), n),
            )
        with jax.enable_x64(True):
            r = gv.check(bd.jax_fn(0), jax.numpy.asarray(x.numpy()), jax.numpy.asarray(b.numpy()))
            counts["gv_jax"] = (r.evaluations, "-", None)
        for key, label in bd.LABELS.items():
            r = res[key]
            ratio = statistics.median(t / base for t, base in zip(r["times"], r["base"]))
            c, p, live = counts.get(key, ({}, "-", None))
            memory = f"{statistics.median(r['memory']):.1f}" if r["memory"] else "-"
            memory += "" if live is None else f" / {live:.1f}"
            print(
                f"| {n:.0e} | {label} | {r['hits']}/{len(r['times'])} | {ratio:.1f}x | {c.get('primal', '-')} "
                f"| {c.get('jvp', '-')} | {c.get('vjp', '-')} | {p} | {memory} |"
            )


# -- small inputs ---------------------------------------------------------------------
def _small_cases():
    """(name, tool kind, fn, args, forward AD available) of the small set."""
    import jax
    import jax.numpy as jnp
    import torch.nn.functional as F

    from gradverify._sweep.examples import tanh_bias_flipped

    rng = np.random.default_rng(0)
    x5, b5 = rng.standard_normal((4, 5)), rng.standard_normal(5)
    xt, bt = torch.tensor(x5), torch.tensor(b5)
    cases = [
        ("torch tanh(x + b)", "torch", lambda x, b: torch.tanh(x + b), (xt, bt), True),
        ("torch logsumexp", "torch", lambda x: torch.logsumexp(x, 1), (xt,), True),
        ("torch layer_norm", "torch", lambda x: F.layer_norm(x, (5,)), (xt,), True),
        ("torch gelu(x + b)", "torch", lambda x, b: F.gelu(x + b), (xt, bt), True),
        ("torch softplus", "torch", F.softplus, (xt,), True),
        ("torch Function with JVP", "torch", tanh_bias_flipped("torch", None), (xt, bt), True),
        (
            "torch Function, backward only",
            "torch",
            tanh_bias_flipped("torch", None, forward_rule=False),
            (xt, bt),
            False,
        ),
    ]
    with jax.enable_x64(True):
        xj, bj = jnp.asarray(x5), jnp.asarray(b5)
    cases += [
        ("jax tanh(x + b)", "jax", lambda x, b: jnp.tanh(x + b), (xj, bj), True),
        ("jax logsumexp", "jax", lambda x: jax.nn.logsumexp(x, axis=1), (xj,), True),
        ("jax gelu", "jax", lambda x: jax.nn.gelu(x, approximate=False), (xj,), True),
        ("jax custom_vjp", "jax", tanh_bias_flipped("jax", None), (xj, bj), False),
        ("numpy gv.Rule tanh(x + b)", "numpy", tanh_bias_flipped("numpy", None), (x5, b5), True),
    ]
    return cases


class InFn:
    """The time a check spends inside calls of fn and of its derivatives (the
    framework's AD, vmap and compiled forms included): every way the
    evaluator calls them, and the reading of a failing reverse mode's
    gradients where its rules return them (structure.findings), timed where
    the outermost of them is entered."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._depth = 0

    def _places(self) -> list[tuple[object, str]]:
        from gradverify._check import structure
        from gradverify._check.evaluate import Evaluator

        return [(Evaluator, "_call"), (Evaluator, "_host"), (Evaluator, "host_or"), (structure, "findings")]

    def __enter__(self) -> InFn:
        self._saved = [(owner, name, getattr(owner, name)) for owner, name in self._places()]
        for owner, name, method in self._saved:
            setattr(owner, name, self._timed(method))
        return self

    def __exit__(self, *exc) -> None:
        for owner, name, method in self._saved:
            setattr(owner, name, method)

    def _timed(self, method):
        def timed(*args, **kwargs):
            self._depth += 1
            start = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                self._depth -= 1
                if self._depth == 0:
                    self.seconds += time.perf_counter() - start

        return timed


def small(rounds: int) -> None:
    import jax
    from jax.test_util import check_grads

    import gradverify as gv

    cases = _small_cases()
    times: dict[tuple[str, str], list[float]] = {}
    in_fn: dict[str, list[float]] = {}

    def peer(kind, fn, args, forward):
        if kind == "torch":
            leaves = tuple(a.detach().clone().requires_grad_() for a in args)
            return lambda: torch.autograd.gradcheck(fn, leaves, check_forward_ad=forward)
        if kind == "jax":
            return lambda: check_grads(fn, args, order=1, modes=("fwd", "rev") if forward else ("rev",))
        return None

    for r in range(rounds + 1):  # (round 0 warms every tool up)
        for name, kind, fn, args, forward in cases:
            with jax.enable_x64(True):
                _, t = _timed(lambda: gv.check(fn, *args))
                if r:
                    times.setdefault((name, "gv"), []).append(t)
                    with InFn() as clock:  # (a run of its own: the clock's wrappers are not in the times)
                        _, t = _timed(lambda: gv.check(fn, *args))
                    in_fn.setdefault(name, []).append(clock.seconds / t)
                p = peer(kind, fn, args, forward)
                if p is not None:
                    _, t = _timed(p)
                    if r:
                        times.setdefault((name, "peer"), []).append(t)
    print("| function | gradverify (ms) | of it in fn and its derivatives | peer (ms) | ratio |")
    print("|---|---|---|---|---|")
    ratios = {"torch": [], "jax": []}
    for name, kind, *_ in cases:
        g = statistics.median(times[(name, "gv")])
        share = f"{100 * statistics.median(in_fn[name]):.0f}%"
        if (name, "peer") in times:
            q = statistics.median(times[(name, "peer")])
            ratios[kind].append(g / q)
            print(f"| {name} | {1e3 * g:.1f} | {share} | {1e3 * q:.1f} | {g / q:.2f}x |")
        else:
            print(f"| {name} | {1e3 * g:.1f} | {share} | - | - |")
    for kind, peer_name in (("torch", "gradcheck"), ("jax", "check_grads")):
        print(f"median ratio to {peer_name}: {statistics.median(ratios[kind]):.2f}x over {len(ratios[kind])} functions")


# -- the first eager jax check in a fresh process ---------------------------------------
FIRST = r"""
import json, sys, time
import jax, jax.numpy as jnp
jax.config.update("jax_enable_x64", True)
which, tool = sys.argv[1], sys.argv[2]
if which == "gamma":
    from jax.scipy.special import gammaln, xlogy
    def fn(x, a, r):
        return xlogy(a - 1, x) - r * x + a * jnp.log(r) - gammaln(a)
    args = (jnp.array([0.5, 1.3, 2.2]), jnp.array([2.0, 3.5, 1.2]), jnp.array([1.5, 0.7, 2.0]))
else:
    import numpyro.distributions as d
    low, high = jnp.array([1.0, 1.2]), jnp.array([3.0, 4.0])
    def fn(x, alpha):
        return d.DoublyTruncatedPowerLaw(alpha, low, high).log_prob(x)
    args = (jnp.array([1.5, 2.5]), jnp.array([-1.7, 0.6]))
if tool in ("gv", "eager"):
    import gradverify as gv
    t1 = time.perf_counter()
    if tool == "eager":
        with jax.disable_jit():
            ok = gv.check(fn, *args).ok
    else:
        ok = gv.check(fn, *args).ok
else:
    from jax.test_util import check_grads
    t1 = time.perf_counter()
    check_grads(fn, args, order=1, modes=("fwd", "rev"))
    ok = True
print(json.dumps({"ok": ok, "check": time.perf_counter() - t1}))
"""


def first(rounds: int) -> None:
    functions = ["gamma"]
    try:
        import numpyro  # noqa: F401

        functions.append("numpyro")
    except ImportError:
        print("(numpyro is not installed: its row is left out)")
    print("| function | gradverify (s) | gradverify under disable_jit (s) | check_grads (s) | ratio |")
    print("|---|---|---|---|---|")
    for which in functions:
        t = {"gv": [], "eager": [], "cg": []}
        for _ in range(rounds):
            for tool in ("gv", "eager", "cg"):
                out = subprocess.run(
                    [sys.executable, "-c", FIRST, which, tool], capture_output=True, text=True, check=True
                )
                t[tool].append(json.loads(out.stdout.strip().splitlines()[-1])["check"])
        g, e, c = (statistics.median(t[k]) for k in ("gv", "eager", "cg"))
        print(f"| {which} | {g:.2f} | {e:.2f} | {c:.2f} | {g / c:.2f}x |")


# -- a failing verify of a slow function -------------------------------------------------
def shrink() -> None:
    from hypothesis import strategies as st

    import gradverify as gv

    def slow(x):
        time.sleep(0.008)  # about half a second a check over its evaluations
        return np.tanh(x)

    rule = gv.Rule(
        slow,
        jvp=lambda p, t: (1 - np.tanh(p[0]) ** 2) * t[0],
        vjp=lambda p, g: ((1 - np.tanh(p[0]) ** 2) * g * np.where(np.abs(p[0]) > 0.5, 1.5, 1.0),),
    )
    _, one = _timed(lambda: gv.check(rule, np.array([0.7, -0.2, 0.9])))
    r, t = _timed(
        lambda: gv.verify(
            rule, st.lists(st.floats(-3, 3), min_size=3, max_size=3).map(lambda v: (np.array(v),)), seed=0
        )
    )
    print("| one check (s) | failing verify (s) | failed | shrinking cut |")
    print("|---|---|---|---|")
    print(f"| {one:.2f} | {t:.1f} | {not r.ok} | {r.shrink_cut or 'no'} |")


def passing(sizes: list[int], rounds: int) -> None:
    import jax
    import jax.numpy as jnp

    from gradverify._sweep.examples import tanh_bias_flipped

    print(
        "| n | check | gradverify (ms) | one fwd+bwd (ms) | ratio "
        "| gradverify CPU (ms) | fwd+bwd CPU (ms) | CPU ratio |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for n in sizes:
        rng = np.random.default_rng([0, n])
        x, b = rng.standard_normal((n // 10, 10)), rng.standard_normal(10)
        for label, forward in (("torch Function with JVP", True), ("torch Function, backward only", False)):
            rule = tanh_bias_flipped("torch", None, forward_rule=forward)
            xt, bt = torch.tensor(x), torch.tensor(b)
            xr, br = xt.detach().requires_grad_(), bt.detach().requires_grad_()

            def unit():
                y = rule(xr, br)
                y.backward(torch.ones_like(y))

            _passing_row(n, label, rule, (xt, bt), unit, rounds)
        with jax.enable_x64(True):  # (one eager jax.vjp and its pullback)
            fn, xj, bj = tanh_bias_flipped("jax", None), jnp.asarray(x), jnp.asarray(b)

            def unit():
                y, pull = jax.vjp(fn, xj, bj)
                jax.block_until_ready(pull(jnp.ones_like(y)))

            _passing_row(n, "jax custom_vjp", fn, (xj, bj), unit, rounds)


def _passing_row(n: int, label: str, fn, args: tuple, unit, rounds: int) -> None:
    """One row of the passing part: a check of ``fn`` at ``args``, rounds
    alternating with ``unit`` (one forward+backward pass), both warmed up;
    wall time, and the process's CPU time (every thread's, jax's pool
    included: steadier than wall time on a shared machine)."""
    import gradverify as gv

    unit()
    assert gv.check(fn, *args).ok
    units, checks = [], []
    for _ in range(rounds):
        units.append(_clocked(unit))
        checks.append(_clocked(lambda: gv.check(fn, *args)))
    (c, c_cpu), (u, u_cpu) = ([statistics.median(t) for t in zip(*m)] for m in (checks, units))
    print(
        f"| {n:.0e} | {label}, correct | {c * 1e3:.0f} | {u * 1e3:.1f} | {c / u:.1f}x "
        f"| {c_cpu * 1e3:.0f} | {u_cpu * 1e3:.1f} | {c_cpu / u_cpu:.1f}x |"
    )


def _clocked(f) -> tuple[float, float]:
    """(wall, CPU) seconds ``f`` takes."""
    wall, cpu = time.perf_counter(), time.process_time()
    f()
    return time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--parts", nargs="+", default=["counts", "crossings", "large", "small", "first", "shrink"])
    p.add_argument("--sizes", type=int, nargs="+", default=[1_000_000])
    p.add_argument("--positions", type=int, default=5)
    p.add_argument("--rounds", type=int, default=7)
    args = p.parse_args()
    torch.set_num_threads(1)
    import jax

    print(f"torch {torch.__version__}, jax {jax.__version__}, {time.strftime('%Y-%m-%d')}, one torch thread")
    for part in args.parts:
        print(f"\n## {part}\n", flush=True)
        if part == "counts":
            for n in args.sizes:
                counts(n, args.rounds)
        elif part == "crossings":
            crossings()
        elif part == "large":
            large(args.sizes, args.positions)
        elif part == "passing":
            passing(args.sizes, args.rounds)
        elif part == "small":
            small(args.rounds)
        elif part == "first":
            first(args.rounds)
        elif part == "shrink":
            shrink()


if __name__ == "__main__":
    main()
