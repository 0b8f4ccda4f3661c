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
reads an integer argument's value in Python (``int(g)``: a static size) is
compiled with those values as constants, one program per value
(``jax_compiled``). One that cannot be traced otherwise (Python control
flow on float values, numpy calls) runs eagerly from its first failed trace
on - each of fn, its JVP and its VJP on its own - and so does every call
whose compiled run raises: the eager run then says whether fn itself raises. The two evaluations at
the point that look for mutation and nondeterminism are always eager (a
random draw inside fn is frozen by a trace); the finite differences take
their centre from the same compiled fn as their stencil, so they round
alike."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._errors import ModeUnavailable
from . import jax_sparse
from .base import Backend, HostArrays, Wrt, on_wrt
from .jax_compiled import Compiled, attempt, compiled, jvp_of, jvps_of, primals_of, run, transform, vjp_of, vjps_of
from .jax_traces import no_leaked_traces as _no_leaked_traces
from .session import compiling, compiling_primal, session_cache

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
#: Whether a check of jax arrays on the CPU works in jax (True) or in numpy
#: (False, the default). numpy reads a CPU array's buffer where it lies, and
#: its operations compile nothing, whereas each eager jax operation compiles a
#: program at its first use at a shape: a first check at 10^6 elements made
#: 85 of them. Tests set it to run the device path on a machine without an
#: accelerator.
CPU_IN_JAX = False
#: Set while a check of fn of a few operations runs eagerly (see ``checking``).
_EAGER: contextvars.ContextVar[bool] = contextvars.ContextVar("gradverify_eager", default=False)


# The complex view's conversions, one program each (exact: bit for bit their
# operations'). Run eagerly - and under jvp, vjp and vmap - their several
# operations would each compile a program at every shape and batch size.
@jax.jit
def _as_real(z: Any) -> Any:
    return jnp.stack([jnp.real(z), jnp.imag(z)], axis=-1)


@jax.jit
def _as_complex(a: Any) -> Any:
    return jax.lax.complex(a[..., 0], a[..., 1])


@jax.jit
def _concat_flat(*parts: Any) -> Any:
    # (in the widest dtype among them, cast explicitly: strict promotion
    # allows no implicit one; one program, not a ravel per part)
    widest = max((jnp.dtype(p.dtype) for p in parts), key=lambda d: d.itemsize)
    return jnp.concatenate([jnp.ravel(p).astype(widest) for p in parts])


def _cast(a: Any, dtype: Any) -> Any:
    """``a`` in ``dtype``: as it is where it has that dtype; from the host
    (``_from_host``) where it is held there; in jax otherwise."""
    if isinstance(a, jax.Array) and a.dtype == dtype:
        return a
    if isinstance(a, np.ndarray) or (isinstance(a, jax.Array) and {d.platform for d in a.devices()} == {"cpu"}):
        return _from_host(np.asarray(a), jnp.dtype(dtype).name)
    return jnp.asarray(a, dtype=dtype)


def _from_host(a: np.ndarray, dtype_name: str) -> Any:
    """A host array as a jax array of ``dtype_name``, cast in numpy where
    numpy rounds as XLA does: a cast in jax compiles a program for each
    shape and pair of dtypes."""
    if dtype_name in _NUMPY_CASTS and a.dtype.name != dtype_name:
        a = a.astype(dtype_name)
    if a.dtype.name == dtype_name and jax.dtypes.canonicalize_dtype(a.dtype) == a.dtype:
        # (placed as it is, copied: a few times faster than jnp.asarray's path on large arrays)
        return jax.device_put(a, may_alias=False)
    return jnp.asarray(a, dtype=dtype_name)


def _flat(a: Any) -> Any:
    if not isinstance(a, jax.Array):  # (a rule's own value may be a number or a numpy array)
        a = jnp.asarray(a)
    return a if a.ndim == 1 else jax.lax.reshape(a, (a.size,))


#: The dtypes a host array is cast to in numpy before it becomes a jax array.
_NUMPY_CASTS = ("float32", "float64", "complex64", "complex128")
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

    def to_host(self, x: Any) -> np.ndarray:
        # (a jax array never changes: on the CPU numpy reads its own memory, read-only)
        a = np.asarray(x)
        return a.astype(np.float32) if a.dtype.name == "bfloat16" else a

    def readback(self, x: Any, buffer: np.ndarray) -> np.ndarray:
        return buffer  # jax arrays are immutable: fn cannot have changed x

    def from_numpy(self, a: np.ndarray, like: Any, dtype_name: str) -> Any:
        return _from_host(a, dtype_name)

    def float64_on_device(self, args: Sequence[Any]) -> str | None:
        lacking = sorted({d.platform for a in args for d in a.devices()} - _FLOAT64_PLATFORMS)
        return f"jax has no float64 on {lacking[0]}" if lacking else None

    def read_in_place(self, args: Sequence[Any]) -> bool:
        return not CPU_IN_JAX and all(d.platform == "cpu" for a in args for d in a.devices())

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
    def checking(
        self, placed: bool, small: bool, own: Callable[[], tuple[Callable | None, tuple]] | None = None
    ) -> Iterator[None]:
        # On small arrays a check's session compiles fn, its JVP and its VJP,
        # each once per shape and batch size: eager jax compiles each of fn's
        # operations for every new shape, and a check's vectorised calls (the
        # Jacobian's columns and rows, the stencil's points) are stacked along
        # new batch sizes - one whole-function compilation costs less than
        # those, except for fn of a few operations (see few_operations): it
        # runs eagerly, and so do the checks of its derivatives. The
        # operations counted are the caller's fn's (``own``), not those of
        # the views it is seen through: theirs are the same for every check
        # at a shape. Under jax.disable_jit() nothing is compiled.
        with _no_leaked_traces(collect=True), _one_mesh_context():
            if placed:
                with self.working():
                    yield
            elif jax.config.jax_disable_jit or _EAGER.get():
                yield
            elif not small:
                with compiling_primal():  # (worked on in numpy: fn's evaluations compiled, as on the device)
                    yield
            else:
                fresh = session_cache() is None
                with compiling():
                    fn, args = own() if fresh and own is not None else (None, ())
                    entry = compiled(fn) if fn is not None else None
                    wide = any(self.dtype_name(a) in (*_WIDE, "complex128") for a in args if hasattr(a, "dtype"))
                    with self.precision("float64" if wide else "native"):  # (as fn's calls at the point)
                        eager = entry is not None and entry.few_operations(tuple(args))
                    if not eager:
                        yield
                if eager:
                    token = _EAGER.set(True)
                    try:
                        yield
                    finally:
                        _EAGER.reset(token)

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
        return run(compiled(fn), "primal", lambda: fn(*args), *args)

    def call_flat(self, fn: Callable, args: Sequence[Any]) -> Any:
        # (eager, a reshape is a copy; compiled, the flat output is fn's own)
        def eager() -> Any:
            out = fn(*args)
            return out.reshape(-1) if hasattr(out, "reshape") else out

        return run(compiled(fn), "primal", eager, *args, attribute="primal_flat")

    takes_host_arrays = True

    def call_host(self, fn: Callable, form: str, args: HostArrays, operands: HostArrays = (), wrt: Wrt = ()) -> Any:
        # jit takes numpy arguments in its C++ dispatch: ~10x cheaper on small
        # arrays than making jax arrays of them first (jax never writes to them)
        entry = compiled(fn)
        if entry is None or not entry.ok[_KIND[form]]:
            return None
        host = tuple(np.asarray(a, dtype=jnp.dtype(d)) for a, d in args)
        ops = tuple(np.asarray(a, dtype=jnp.dtype(d)) for a, d in operands)

        def call(forms: Compiled) -> Any:
            if form == "primal":
                return forms.primal(*host)
            if form == "primal_flat":
                # (small arrays: fn's own compiled form, flattened after - one
                # program fewer to compile than a flat form of its own)
                out = forms.primal(*host)
                return out.reshape(-1) if hasattr(out, "reshape") else out
            return getattr(forms, form)(host, ops if form in ("jvp", "jvps", "primals") else ops[0], tuple(wrt))

        try:
            return attempt(entry, call, host)
        except Exception:
            return None

    def jvp(self, fn: Callable, args: Sequence[Any], wrt: Sequence[int], tangents: Sequence[Any]) -> Any:
        _forward_mode_refused(fn)
        try:
            return transform(compiled(fn), fn, "jvp", jvp_of, args, tuple(tangents), wrt)
        except TypeError as e:
            if "custom_vjp" in str(e):
                raise ModeUnavailable(f"jax: {e}") from e
            raise

    def vjp(self, fn: Callable, args: Sequence[Any], wrt: Sequence[int], cotangent: Any) -> list[Any]:
        return list(transform(compiled(fn), fn, "vjp", vjp_of, args, cotangent, wrt))

    def jvps(self, fn: Callable, args: Sequence[Any], wrt: Sequence[int], tangents: Sequence[Any]) -> Any:
        _forward_mode_refused(fn)
        return transform(compiled(fn), fn, "jvp", jvps_of, args, tuple(tangents), wrt, attribute="jvps")

    def vjps(self, fn: Callable, args: Sequence[Any], wrt: Sequence[int], cotangents: Any) -> list[Any]:
        return list(transform(compiled(fn), fn, "vjp", vjps_of, args, cotangents, wrt, attribute="vjps"))

    def primals(self, fn: Callable, args: Sequence[Any], wrt: Sequence[int], points: Sequence[Any]) -> Any:
        entry = compiled(fn)
        if entry is not None and entry.ok["primal"] and not entry.ok["primals"]:
            # fn's evaluations run compiled, and a vmap of its eager ops may
            # round otherwise: one compiled evaluation at a time
            raise NotImplementedError("fn is compiled alone")
        return transform(entry, fn, "primals", primals_of, args, tuple(points), wrt)

    no_batching = None
    uniform_batches = True

    def as_real(self, z: Any) -> Any:
        return _as_real(z)

    def as_complex(self, a: Any) -> Any:
        return _as_complex(a)

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
            parts = pullback(_cast(cotangent, out.dtype))
            # (one part as it is: flattened, its reshape would compile at
            # every batch size the check's vmaps run it at)
            return parts[0] if len(parts) == 1 else self.concat_flat(parts)

        return vjp_of_fn

    def jvp_function(self, fn: Callable, wrt: Sequence[int], tangents: Sequence[Any]) -> Callable:
        def jvp_of_fn(*args: Any) -> Any:
            primals = tuple(args[i] for i in wrt)
            tans = tuple(_cast(t, p.dtype) for t, p in zip(tangents, primals))
            return jax.jvp(on_wrt(fn, args, wrt), primals, tans)[1]

        return jvp_of_fn

    def concat_flat(self, parts: Sequence[Any]) -> Any:
        # (one part needs no program: a flat one is itself, another is one
        # reshape, jax's own primitive, cached per shape as fn's own are)
        return _flat(parts[0]) if len(parts) == 1 else _concat_flat(*parts)


def _one_mesh_context() -> contextlib.AbstractContextManager[Any]:
    """The abstract mesh in force, set explicitly for the check where none is.

    jax keys each compiled program by its trace context, the abstract mesh
    in force among it, and runs every operation of a VJP's backward pass
    under the mesh recorded when fn was linearized: where none is set, the
    empty mesh, set, where the same operation run outside (fn at the point,
    a JVP, the stencil) saw none. Each of those would compile twice, once
    per context (9 of the 32 programs of a first order-2 check of lax.sin).
    Set for the whole check, the context is the same for all of them. A
    mesh the caller set is left as it is: fn may depend on it."""
    get, use = getattr(jax.sharding, "get_abstract_mesh", None), getattr(jax.sharding, "use_abstract_mesh", None)
    if get is None or use is None:
        return contextlib.nullcontext()
    mesh = get()
    return use(mesh) if mesh.empty else contextlib.nullcontext()


def _forward_mode_refused(fn: Callable) -> None:
    """A custom_vjp has no forward mode: say so in jax's words before tracing
    it, which would find that out at length (eager, compiled, vectorised)."""
    if isinstance(fn, jax.custom_vjp):
        raise ModeUnavailable("jax: can't apply forward-mode autodiff (jvp) to a custom_vjp function.")
