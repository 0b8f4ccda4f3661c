"""JAX: ``jax.jvp`` and ``jax.vjp``. float64 needs x64, which we enable only
inside ``precision('float64')`` so that the user's global setting is untouched.

Within a compiling session (``backends.compiling()``: one ``gv.verify`` run,
where the same fn is checked at shapes that repeat, or one check on small
arrays) fn, its JVP and its VJP are jit-compiled, once per shape, dtype,
precision and batch size, and kept for the session: eager jax compiles each
of fn's operations anew for every shape, so a check's vectorised calls -
the Jacobian's columns and rows, the stencil's points - would otherwise
recompile all of fn once per batch size. On large arrays worked on in place
a check compiles fn alone (its few JVPs and VJPs cost less eager than
compiled); under ``jax.disable_jit()`` nothing is compiled. A function that
cannot be traced (Python control flow on values, numpy calls, a static
argument) runs eagerly from its first failed trace on - each of fn, its JVP
and its VJP on its own - and so does every call whose compiled run raises:
the eager run then says whether fn itself raises. The two evaluations at
the point that look for mutation and nondeterminism are always eager (a
random draw inside fn is frozen by a trace); the finite differences take
their centre from the same compiled fn as their stencil, so they round
alike."""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import hashlib
import re
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import jax
import jax.extend.core as jex_core
import jax.numpy as jnp
import numpy as np
from jax._src import config as jax_config

from .._errors import ModeUnavailable
from . import jax_sparse
from .base import Backend, HostArrays, Wrt, on_wrt
from .jax_traces import no_leaked_traces as _no_leaked_traces
from .session import compiling, compiling_primal, session_cache, session_kinds

__all__ = ["Compiled", "JaxBackend", "compiled"]

_WIDE = ("float64", "int64", "uint64")
#: The kind of compiled call (whose ``Compiled.ok`` says whether it works) of each form.
_KIND = {
    "primal": "primal",
    "primal_flat": "primal",
    "primals": "primals",
    "jvp": "jvp",
    "jvps": "jvp",
    "vjp": "vjp",
    "vjps": "vjp",
}
#: Platforms where float64 arithmetic is native (TPUs emulate it, Metal lacks it).
_FLOAT64_PLATFORMS = {"cpu", "gpu", "cuda", "rocm"}
#: The caller's x64 setting while the checker works in x64 (see ``working``).
_USER_X64: contextvars.ContextVar[bool] = contextvars.ContextVar("gradverify_user_x64")


class JaxBackend(Backend):
    name = "jax"

    def dtype_name(self, x: Any) -> str:
        return str(x.dtype)

    def is_floating(self, x: Any) -> bool:
        return bool(jnp.issubdtype(x.dtype, jnp.floating))

    def is_complex(self, x: Any) -> bool:
        return bool(jnp.issubdtype(x.dtype, jnp.complexfloating))

    def is_sparse(self, x: Any) -> bool:
        return jax_sparse.is_sparse(x)

    def sparse(self, x: Any) -> Any:
        return jax_sparse.JaxSparse(x) if jax_sparse.is_sparse(x) else None

    def to_numpy(self, x: Any) -> np.ndarray:
        a = np.asarray(x)
        if a.dtype.name == "bfloat16":
            a = a.astype(np.float32)
        return np.array(a, copy=True)

    def readback(self, x: Any, buffer: np.ndarray) -> np.ndarray:
        return buffer  # jax arrays are immutable: fn cannot have changed x

    def from_numpy(self, a: np.ndarray, like: Any, dtype_name: str) -> Any:
        return jnp.asarray(a, dtype=dtype_name)

    def float64_on_device(self, args: Sequence[Any]) -> str | None:
        lacking = sorted({d.platform for a in args for d in a.devices()} - _FLOAT64_PLATFORMS)
        return f"jax has no float64 on {lacking[0]}" if lacking else None

    def to_working(self, x: Any, copy: bool = True) -> Any:
        if not jnp.issubdtype(x.dtype, jnp.floating):
            return x  # (immutable: no copy)
        with jax.enable_x64(True):
            return x.astype(jnp.float64)

    def from_working(self, a: Any, like: Any, dtype_name: str, copy: bool = True) -> Any:
        with jax.enable_x64(dtype_name in _WIDE or _USER_X64.get(jax.config.jax_enable_x64)):
            out = a.astype(dtype_name)
        return out if out.devices() == like.devices() else jax.device_put(out, like.sharding)

    def derivative(self, d: Any) -> Any:
        with jax.enable_x64(True):
            return d.astype(jnp.float64)

    @contextlib.contextmanager
    def working(self) -> Iterator[None]:
        # The checker's float64 arithmetic needs x64; fn keeps running under
        # the caller's own setting (``precision``). fn is compiled for the
        # check's evaluations where it traces (eager where it does not): on
        # large arrays one compiled pass costs a fraction of its eager ops.
        token = _USER_X64.set(_USER_X64.get(jax.config.jax_enable_x64))
        try:
            with jax.enable_x64(True), compiling_primal():
                yield
        finally:
            _USER_X64.reset(token)

    @contextlib.contextmanager
    def checking(self, placed: bool, small: bool) -> Iterator[None]:
        # On small arrays a check's session compiles fn, its JVP and its VJP,
        # each once per shape and batch size: eager jax compiles each of fn's
        # operations for every new shape, and a check's vectorised calls (the
        # Jacobian's columns and rows, the stencil's points) are stacked along
        # new batch sizes - one whole-function compilation costs less than
        # those. Under jax.disable_jit() nothing is compiled.
        with _no_leaked_traces(collect=True):
            if placed:
                with self.working():
                    yield
            elif small and not jax.config.jax_disable_jit:
                with compiling():
                    yield
            else:
                yield

    @contextlib.contextmanager
    def precision(self, dtype_name: str) -> Iterator[None]:
        with jax.enable_x64(dtype_name in _WIDE or _USER_X64.get(jax.config.jax_enable_x64)):
            yield

    def float64_refused(self) -> str | None:
        # jax caches the conversion of a numpy array by the array alone, not
        # by the x64 mode, for as long as a trace holds the converted value:
        # fn's numpy constants traced in float64 keep int64 in the caller's
        # x64-off runs, and the other way round. Standard promotion mixes the
        # two; strict promotion refuses them, so fn stays in its own mode.
        if _USER_X64.get(jax.config.jax_enable_x64):
            return None
        if jax.config.jax_numpy_dtype_promotion == "strict":
            return "jax runs with strict dtype promotion and x64 off: fn is not evaluated in float64"
        return None

    def reduced_precision(self, args: Sequence[Any]) -> list[tuple[str, str]]:
        if not any(a.dtype == jnp.float32 for a in args):
            return []
        level = jax.config.jax_default_matmul_precision
        on_gpu = any(d.platform == "gpu" for a in args for d in a.devices())
        if level in (None, "default", "fastest") and on_gpu:
            note = (
                "jax runs float32 matmuls and convolutions on the GPU in TF32 by default "
                "(jax_default_matmul_precision); low-precision AD is judged against its float64 run"
            )
            return [(note, "tf32")]
        if level in ("bfloat16", "tensorfloat32", "bfloat16_3x", "fastest"):
            note = f"jax_default_matmul_precision is {level!r}: float32 matmuls are computed in reduced precision"
            return [(note, "bfloat16" if level in ("bfloat16", "fastest") else "tf32")]
        return []

    def compiles(self, fn: Callable) -> bool:
        entry = compiled(fn)
        return entry is not None and entry.ok["primal"]

    def call(self, fn: Callable, args: Sequence[Any]) -> Any:
        return _run(compiled(fn), "primal", lambda: fn(*args), *args)

    def call_flat(self, fn: Callable, args: Sequence[Any]) -> Any:
        # (eager, a reshape is a copy; compiled, the flat output is fn's own)
        def eager() -> Any:
            out = fn(*args)
            return out.reshape(-1) if hasattr(out, "reshape") else out

        return _run(compiled(fn), "primal", eager, *args, attribute="primal_flat")

    takes_host_arrays = True

    def call_host(self, fn: Callable, form: str, args: HostArrays, operands: HostArrays = (), wrt: Wrt = ()) -> Any:
        # jit takes numpy arguments in its C++ dispatch: ~10x cheaper on small
        # arrays than making jax arrays of them first (jax never writes to them)
        entry = compiled(fn)
        if entry is None or not entry.ok[_KIND[form]]:
            return None
        host = tuple(np.asarray(a, dtype=jnp.dtype(d)) for a, d in args)
        ops = tuple(np.asarray(a, dtype=jnp.dtype(d)) for a, d in operands)
        try:
            with _no_leaked_traces():
                if form == "primal":
                    return entry.primal(*host)
                if form == "primal_flat":
                    # (small arrays: fn's own compiled form, flattened after - one
                    # program fewer to compile than a flat form of its own)
                    out = entry.primal(*host)
                    return out.reshape(-1) if hasattr(out, "reshape") else out
                return getattr(entry, form)(host, ops if form in ("jvp", "jvps", "primals") else ops[0], tuple(wrt))
        except Exception:
            return None

    def jvp(self, fn: Callable, args: Sequence[Any], wrt: Sequence[int], tangents: Sequence[Any]) -> Any:
        _forward_mode_refused(fn)
        try:
            return _transform(compiled(fn), fn, "jvp", _jvp, args, tuple(tangents), wrt)
        except TypeError as e:
            if "custom_vjp" in str(e):
                raise ModeUnavailable(f"jax: {e}") from e
            raise

    def vjp(self, fn: Callable, args: Sequence[Any], wrt: Sequence[int], cotangent: Any) -> list[Any]:
        return list(_transform(compiled(fn), fn, "vjp", _vjp, args, cotangent, wrt))

    def jvps(self, fn: Callable, args: Sequence[Any], wrt: Sequence[int], tangents: Sequence[Any]) -> Any:
        _forward_mode_refused(fn)
        return _transform(compiled(fn), fn, "jvp", _jvps, args, tuple(tangents), wrt, attribute="jvps")

    def vjps(self, fn: Callable, args: Sequence[Any], wrt: Sequence[int], cotangents: Any) -> list[Any]:
        return list(_transform(compiled(fn), fn, "vjp", _vjps, args, cotangents, wrt, attribute="vjps"))

    def primals(self, fn: Callable, args: Sequence[Any], wrt: Sequence[int], points: Sequence[Any]) -> Any:
        entry = compiled(fn)
        if entry is not None and entry.ok["primal"] and not entry.ok["primals"]:
            # fn's evaluations run compiled, and a vmap of its eager ops may
            # round otherwise: one compiled evaluation at a time
            raise NotImplementedError("fn is compiled alone")
        return _transform(entry, fn, "primals", _primals, args, tuple(points), wrt)

    no_batching = None

    def as_real(self, z: Any) -> Any:
        return jnp.stack([jnp.real(z), jnp.imag(z)], axis=-1)

    def as_complex(self, a: Any) -> Any:
        return jax.lax.complex(a[..., 0], a[..., 1])

    def batched_jvp(
        self, fn: Callable, args: Sequence[Any], wrt: Sequence[int], points: Sequence[Any], tangents: Sequence[Any]
    ) -> Any:
        k = len(wrt)

        def one(*parts: Any) -> Any:
            return jax.jvp(on_wrt(fn, args, wrt), tuple(parts[:k]), tuple(parts[k:]))[1]

        return jax.vmap(one)(*points, *tangents)

    def batched_vjp(
        self, fn: Callable, args: Sequence[Any], wrt: Sequence[int], points: Sequence[Any], cotangents: Any
    ) -> list[Any]:
        def one(*parts: Any) -> Any:
            out, pullback = jax.vjp(on_wrt(fn, args, wrt), *parts[:-1])
            return pullback(parts[-1].astype(out.dtype))

        return list(jax.vmap(one)(*points, cotangents))

    def vjp_function(self, fn: Callable, wrt: Sequence[int], cotangent: Any) -> Callable:
        def vjp_of_fn(*args: Any) -> Any:
            out, pullback = jax.vjp(on_wrt(fn, args, wrt), *(args[i] for i in wrt))
            return self.concat_flat(pullback(jnp.asarray(cotangent, dtype=out.dtype)))

        return vjp_of_fn

    def jvp_function(self, fn: Callable, wrt: Sequence[int], tangents: Sequence[Any]) -> Callable:
        def jvp_of_fn(*args: Any) -> Any:
            primals = tuple(args[i] for i in wrt)
            tans = tuple(jnp.asarray(t, dtype=p.dtype) for t, p in zip(tangents, primals))
            return jax.jvp(on_wrt(fn, args, wrt), primals, tans)[1]

        return jvp_of_fn

    def concat_flat(self, parts: Sequence[Any]) -> Any:
        # (in the widest dtype among them, cast explicitly: strict promotion allows no implicit one)
        widest = max((jnp.dtype(p.dtype) for p in parts), key=lambda d: d.itemsize)
        return jnp.concatenate([jnp.ravel(p).astype(widest) for p in parts])


def _forward_mode_refused(fn: Callable) -> None:
    """A custom_vjp has no forward mode: say so in jax's words before tracing
    it, which would find that out at length (eager, compiled, vectorised)."""
    if isinstance(fn, jax.custom_vjp):
        raise ModeUnavailable("jax: can't apply forward-mode autodiff (jvp) to a custom_vjp function.")


def _jvp(fn: Callable, args: tuple, tangents: tuple, wrt: tuple[int, ...]) -> Any:
    return jax.jvp(on_wrt(fn, args, wrt), tuple(args[i] for i in wrt), tangents)[1]


def _vjp(fn: Callable, args: tuple, cotangent: Any, wrt: tuple[int, ...]) -> tuple:
    out, pullback = jax.vjp(on_wrt(fn, args, wrt), *(args[i] for i in wrt))
    return pullback(cotangent.astype(out.dtype))


def _primals(fn: Callable, args: tuple, points: tuple, wrt: tuple[int, ...]) -> Any:
    return jax.vmap(on_wrt(fn, args, wrt))(*points)


def _jvps(fn: Callable, args: tuple, tangents: tuple, wrt: tuple[int, ...]) -> Any:
    return jax.vmap(lambda *t: _jvp(fn, args, t, wrt))(*tangents)


def _vjps(fn: Callable, args: tuple, cotangents: Any, wrt: tuple[int, ...]) -> tuple:
    # (fn's forward pass does not depend on the cotangent: vmap runs it once)
    return jax.vmap(lambda c: _vjp(fn, args, c, wrt))(cotangents)


class Compiled:
    """fn, its JVP and its VJP under jax.jit; ``ok[kind]`` turns False for good
    at the first compiled call of that kind that fails where the eager one
    does not.

    fn is traced once per argument signature (``program``). Its evaluations
    (flat, and batched under vmap) are that trace's, unless it holds a custom
    batching rule or a callback, whose Python the trace does not show; where
    the trace is a closed program - no custom derivative rule either - its
    JVP and VJP are jax's transformations of that program too, not new
    traces of fn. Such a form is keyed by the program, so a check whose
    program an earlier one ran takes its executables from that one trace."""

    def __init__(self, fn: Callable) -> None:
        ref = weakref.ref(fn)  # (the cache is keyed by fn: hold it weakly)
        kinds = session_kinds()
        self.ok = {kind: kind in kinds for kind in ("primal", "primals", "jvp", "vjp")}
        self.ok["jvp"] &= not isinstance(fn, jax.custom_vjp)  # (no forward mode: see _forward_mode_refused)
        self.programs: dict[tuple, _Program | None] = {}

        def transform(of: Callable, name: str) -> _Form:
            # fn's (args, operand, wrt) -> of(fn, ...), wrt static
            def derive(f: Callable) -> Any:
                return jax.jit(lambda args, operand, wrt: of(f, args, operand, wrt), static_argnums=2)

            return _Form(derive(lambda *a: ref()(*a)), 2, name=name, derive=derive, owner=self)

        def flat(f: Callable) -> Any:
            return jax.jit(lambda *args: f(*args).reshape(-1))

        self.primal = _Form(jax.jit(lambda *args: ref()(*args)), owner=self)
        self.primal_flat = _Form(flat(lambda *a: ref()(*a)), name="primal_flat", derive=flat, owner=self)
        self.primals = transform(_primals, "primals")
        self.jvp, self.vjp = transform(_jvp, "jvp"), transform(_vjp, "vjp")
        self.jvps, self.vjps = transform(_jvps, "jvps"), transform(_vjps, "vjps")

    def program(self, args: tuple) -> _Program | None:
        """fn's program at ``args`` (traced once per signature, the trace kept
        for the primal form); None where evaluating it is not closed (see
        _EVALUATION_OPEN)."""
        signature = _signature(args)
        if signature not in self.programs:
            traced = self.primal.jitted.trace(*args)
            key = _program(traced)
            if signature not in self.primal.executables:
                self.primal.traces[signature] = traced, key  # (compiled when the primal form is called)
            self.programs[signature] = (
                None
                if key is None or _EVALUATION_OPEN.search(key[0])
                else _Program(key, _as_function(traced.jaxpr, traced.out_tree), not _OPEN.search(key[0]))
            )
        return self.programs[signature]


@dataclasses.dataclass(frozen=True)
class _Program:
    key: tuple  # _program's key of fn's trace
    fn: Callable  # that trace as a function of fn's arguments
    closed: bool  # no custom derivative rule: its derivatives are the program's too


def _as_function(closed: Any, out_tree: Any) -> Callable:
    """A closed jaxpr as a function of the arguments it was traced at."""
    run = jex_core.jaxpr_as_fun(closed)

    def f(*args: Any) -> Any:
        return jax.tree_util.tree_unflatten(out_tree, run(*jax.tree_util.tree_leaves(args)))

    return f


#: Executables of compiled forms by the program they run (see _Form): a
#: session traces fn anew - each check sees fn as it is now - and reuses an
#: earlier session's executable where the trace is the same program.
_EXECUTABLES: OrderedDict[tuple, Any] = OrderedDict()
_EXECUTABLES_MAX = 256
#: Constants of more bytes than this in one form: not worth hashing to share it.
_CONSTANTS_MAX = 1 << 20
#: A primitive that runs Python: pure_callback, io_callback, debug_callback.
_CALLBACK = re.compile(r"\b\w*callback\[")
#: A primitive whose transformations run Python the trace does not show:
#: custom_jvp_call, custom_vjp_call, custom_vmap_call, custom_lin, callbacks.
_OPEN = re.compile(r"\b\w*(custom|callback)\w*\[")
#: The same, for evaluating the program (batched or not): a custom derivative
#: rule plays no part there, a custom batching rule does.
_EVALUATION_OPEN = re.compile(r"\b\w*(custom_vmap|custom_batching|callback)\w*\[")
#: The forms that evaluate fn (no derivative).
_EVALUATIONS = ("primal_flat", "primals")


class _Form:
    """One compiled form of fn. Each argument signature is traced once per
    session (jit's trace: fn as it is now, its constants and the rules of its
    custom derivatives included); the executable comes from _EXECUTABLES
    where an earlier trace gave the same program, and is compiled otherwise.
    Tracing costs milliseconds where compiling costs tens of them, so a check
    that repeats an earlier one's programs compiles nothing. A form with
    ``derive`` (fn's JVP, VJP, batches of evaluations) is, where fn's program
    at these arguments is closed (``Compiled.program``), that transformation
    of the program: keyed by it, traced only when first compiled."""

    def __init__(
        self,
        jitted: Any,
        static: int | None = None,
        *,
        name: str = "primal",
        derive: Callable[[Callable], Any] | None = None,
        owner: Compiled | None = None,
    ) -> None:
        self.jitted, self.static, self.name, self.derive = jitted, static, name, derive
        self.owner = None if owner is None else weakref.ref(owner)
        self.executables: dict[tuple, Any] = {}
        self.traces: dict[tuple, tuple[Any, tuple | None]] = {}  # (fn's own, from Compiled.program)

    def __call__(self, *args: Any) -> Any:
        signature = _signature(args)
        exe = self.executables.get(signature)
        if exe is None:
            owner = None if self.owner is None else self.owner()
            program = None if owner is None else owner.program(args[0] if self.static is not None else args)
            derive = self.derive
            if program is not None and derive is not None and (program.closed or self.name in _EVALUATIONS):
                # (traced, from the program, only when first compiled)
                exe = _executable((self.name, program.key, signature), lambda: derive(program.fn).trace(*args))
            else:
                traced, key = self.traces.pop(signature, None) or _traced(self.jitted, args)
                exe = _executable(key, lambda: traced)
            self.executables[signature] = exe
        return exe(*(a for i, a in enumerate(args) if i != self.static))


def _traced(jitted: Any, args: tuple) -> tuple[Any, tuple | None]:
    traced = jitted.trace(*args)
    return traced, _program(traced)


def _executable(key: tuple | None, trace: Callable[[], Any]) -> Any:
    """The executable of the program ``key``: an earlier one, or ``trace()``
    compiled (and kept, where there is a key)."""
    exe = None if key is None else _EXECUTABLES.get(key)
    if exe is not None:
        _EXECUTABLES.move_to_end(key)
        return exe
    exe = trace().lower().compile()
    if key is not None:
        _EXECUTABLES[key] = exe
        if len(_EXECUTABLES) > _EXECUTABLES_MAX:
            _EXECUTABLES.popitem(last=False)
    return exe


def _signature(args: tuple) -> tuple:
    """What a trace depends on besides fn: the structure, shapes and dtypes of
    the arguments (the static one's value), and the x64 setting."""
    leaves, tree = jax.tree_util.tree_flatten(args)
    return (
        str(tree),
        jax.config.jax_enable_x64,
        tuple(
            (type(a).__name__, tuple(a.shape), str(a.dtype), bool(getattr(a, "weak_type", False)))
            if hasattr(a, "shape") and hasattr(a, "dtype")
            else (type(a).__name__, repr(a))
            for a in leaves
        ),
    )


def _program(traced: Any) -> tuple | None:
    """What a traced form computes: its jaxpr as text (every operation, its
    parameters and its literals in full), the values of its constants and of
    the constants of every jaxpr inside it (an inner jit keeps its own), its
    inputs' types (weak types included) and structure, its output structure,
    and the settings a trace depends on (jax's trace context: x64, the
    default device, the PRNG's mode, ...) and the platform. None - the form
    is then compiled for this session alone - where a constant is not an
    array of numbers or the constants are large (copying and hashing them
    would cost more than compiling), or where the program calls back into
    Python (the text names the callback function, not which one: an edited
    one would look the same)."""
    closed = traced.jaxpr
    text = str(closed.jaxpr)
    if _CALLBACK.search(text):
        return None
    digest = hashlib.blake2b(digest_size=16)
    total = 0
    for c in _constants(closed):
        total += int(getattr(c, "nbytes", 0))
        if total > _CONSTANTS_MAX:
            return None
        try:
            a = np.asarray(c)
        except Exception:
            return None
        if a.dtype == object:
            return None
        digest.update(f"{a.shape}{a.dtype}".encode())
        digest.update(np.ascontiguousarray(a).tobytes())
    inputs = tuple(
        (tuple(getattr(a, "shape", ())), str(getattr(a, "dtype", a)), bool(getattr(a, "weak_type", False)))
        for a in closed.in_avals
    )
    return (
        text,
        digest.hexdigest(),
        inputs,
        str(traced.in_tree),
        str(traced.out_tree),
        jax_config.trace_context(),
        jax.default_backend(),
    )


def _constants(closed: Any) -> Iterator[Any]:
    """The constants of a closed jaxpr and of every closed jaxpr in its
    equations' parameters, depth first."""
    yield from closed.consts
    stack = [closed.jaxpr]
    while stack:
        jaxpr = stack.pop()
        for eqn in jaxpr.eqns:
            params = list(eqn.params.values())
            while params:
                v = params.pop()
                if isinstance(v, (tuple, list)):
                    params.extend(v)
                elif isinstance(v, jex_core.ClosedJaxpr):
                    yield from v.consts
                    stack.append(v.jaxpr)
                elif isinstance(v, jex_core.Jaxpr):
                    stack.append(v)


def compiled(fn: Callable) -> Compiled | None:
    """The compiled forms of fn in this compiling session, made on first use
    (None: no session, or fn cannot be held weakly)."""
    cache = session_cache()
    if cache is None:
        return None
    try:
        entry = cache.get(fn)
        if entry is None:
            entry = cache[fn] = Compiled(fn)
        return entry
    except TypeError:
        return None


def _run(entry: Compiled | None, kind: str, eager: Callable[[], Any], *args: Any, attribute: str = "") -> Any:
    if entry is None or not entry.ok[kind]:
        return eager()
    try:
        with _no_leaked_traces():
            return getattr(entry, attribute or kind)(*args)
    except Exception:
        # either fn cannot be traced or it raises: the eager run tells which
        out = eager()
        entry.ok[kind] = False
        return out


def _transform(
    entry: Compiled | None,
    fn: Callable,
    kind: str,
    eager: Callable,
    args: Sequence[Any],
    operand: Any,
    wrt: Sequence[int],
    attribute: str = "",
) -> Any:
    """``eager(fn, args, operand, wrt)`` - fn's JVP, VJP or batch of
    evaluations - compiled where ``entry`` can."""
    a, w = tuple(args), tuple(wrt)
    return _run(entry, kind, lambda: eager(fn, a, operand, w), a, operand, w, attribute=attribute)
