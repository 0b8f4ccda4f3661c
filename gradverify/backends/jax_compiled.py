"""jax's compiled forms of fn within a compiling session (see the jax
backend's module): fn, its JVP and VJP and their batches under jax.jit, each
argument signature traced once, executables shared between sessions by the
program they run; and the eager forms they fall back to.

An argument that is an integer array is a constant of the check. fn may
read its value in Python (a number of groups, a static size: ``int(g)``),
which a trace cannot give; the first such failed trace makes the forms take
those arguments' values as constants of the program - one program per value,
as eager jax compiles each operation per shape anyway - rather than
running fn eagerly, operation by operation."""

from __future__ import annotations

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

from .base import on_wrt
from .jax_traces import no_leaked_traces as _no_leaked_traces
from .session import session_cache, session_kinds

__all__ = [
    "Compiled",
    "attempt",
    "compiled",
    "jvp_of",
    "jvps_of",
    "primals_of",
    "run",
    "transform",
    "vjp_of",
    "vjps_of",
]


def jvp_of(fn: Callable, args: tuple, tangents: tuple, wrt: tuple[int, ...]) -> Any:
    return jax.jvp(on_wrt(fn, args, wrt), tuple(args[i] for i in wrt), tangents)[1]


def vjp_of(fn: Callable, args: tuple, cotangent: Any, wrt: tuple[int, ...]) -> tuple:
    out, pullback = jax.vjp(on_wrt(fn, args, wrt), *(args[i] for i in wrt))
    return pullback(cotangent.astype(out.dtype))


def primals_of(fn: Callable, args: tuple, points: tuple, wrt: tuple[int, ...]) -> Any:
    return jax.vmap(on_wrt(fn, args, wrt))(*points)


def jvps_of(fn: Callable, args: tuple, tangents: tuple, wrt: tuple[int, ...]) -> Any:
    return jax.vmap(lambda *t: jvp_of(fn, args, t, wrt))(*tangents)


def vjps_of(fn: Callable, args: tuple, cotangents: Any, wrt: tuple[int, ...]) -> tuple:
    # (fn's forward pass does not depend on the cotangent: vmap runs it once)
    return jax.vmap(lambda c: vjp_of(fn, args, c, wrt))(cotangents)


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

    def __init__(self, fn: Callable, fixed: dict[int, Any] | None = None, ok: dict[str, bool] | None = None) -> None:
        ref = self._ref = weakref.ref(fn)  # (the cache is keyed by fn: hold it weakly)
        kinds = session_kinds()
        self.ok = ok if ok is not None else {kind: kind in kinds for kind in ("primal", "primals", "jvp", "vjp")}
        self.ok["jvp"] &= not isinstance(fn, jax.custom_vjp)  # (no forward mode: see _forward_mode_refused)
        self.programs: dict[tuple, _Program | None] = {}
        #: integer arguments taken as the constants they are (see ``bake``):
        #: one set of forms per set of their values, each its own jitted
        #: functions (jit's trace cache knows them apart by that alone)
        self.baked = False
        self._by_values: dict[tuple, Compiled] = {}
        constants = dict(fixed or {})

        def call(*a: Any) -> Any:
            if constants:  # (arrays made before the trace: concrete inside it, not tracers)
                a = tuple(constants.get(i, x) for i, x in enumerate(a))
            return ref()(*a)

        def transform(of: Callable, name: str) -> _Form:
            # fn's (args, operand, wrt) -> of(fn, ...), wrt static
            def derive(f: Callable) -> Any:
                return jax.jit(lambda args, operand, wrt: of(f, args, operand, wrt), static_argnums=2)

            return _Form(derive(call), 2, name=name, derive=derive, owner=self)

        def flat(f: Callable) -> Any:
            return jax.jit(lambda *args: f(*args).reshape(-1))

        self.primal = _Form(jax.jit(lambda *args: call(*args)), owner=self)
        self.primal_flat = _Form(flat(call), name="primal_flat", derive=flat, owner=self)
        self.primals = transform(primals_of, "primals")
        self.jvp, self.vjp = transform(jvp_of, "jvp"), transform(vjp_of, "vjp")
        self.jvps, self.vjps = transform(jvps_of, "jvps"), transform(vjps_of, "vjps")

    def bake(self, args: tuple) -> bool:
        """After a trace at fn's ``args`` needed a value it cannot give: take
        their integer arguments as constants from now on (False: there are
        none, or they already are)."""
        if self.baked or not _integer_values(args):
            return False
        self.baked = True
        return True

    def at(self, args: tuple) -> Compiled:
        """The forms for fn's ``args``: these, or once baked, those with the
        values of ``args``' integer arguments taken in (made on first use,
        sharing ``ok``)."""
        if not self.baked:
            return self
        values = _integer_values(args)
        key = tuple((i, v.dtype.str, v.shape, v.tobytes()) for i, v in values.items())
        forms = self._by_values.get(key)
        if forms is None:
            fn = self._ref()
            if fn is None:
                return self
            forms = self._by_values[key] = Compiled(fn, {i: jnp.asarray(v) for i, v in values.items()}, self.ok)
        return forms

    def few_operations(self, args: tuple) -> bool:
        """Whether fn at ``args`` is a few operations of jax's own (at most
        EAGER_OPERATIONS, none a call of a nested program); False where it
        does not trace as it is (the forms take its integer arguments as
        constants, or fall back to eager calls). Read from fn's trace, which
        the forms then reuse. A check on small arrays compiles fn, its JVPs
        and its VJPs in each precision and its batched stencil: about six
        programs of its own, compiled afresh for every new function. Run
        eagerly, each operation compiles one small program per shape
        instead, and every later check at that shape - of any function -
        reuses it. For a few operations (the elementary functions a
        library's own tests check one by one) that is the cheaper of the
        two; for more (a composite function's first check) the six
        whole-function programs are."""
        try:
            self.program(args)
        except Exception:
            return False
        held = self.primal.traces.get(_signature(args))
        if held is None:
            return False
        eqns = held[0].jaxpr.jaxpr.eqns
        nested = any(isinstance(v, (jex_core.ClosedJaxpr, jex_core.Jaxpr)) for e in eqns for v in e.params.values())
        return len(eqns) <= EAGER_OPERATIONS and not nested

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


#: A single check on small arrays runs fn of at most this many operations
#: eagerly (see ``Compiled.few_operations``).
EAGER_OPERATIONS = 4


#: At most this many elements in an integer argument taken as a constant.
_BAKED_MAX = 64
#: What jax raises where a trace needs a value it cannot give.
_VALUE_NEEDED = (
    jax.errors.ConcretizationTypeError,
    jax.errors.TracerIntegerConversionError,
    jax.errors.TracerArrayConversionError,
)


def _integer_values(args: tuple) -> dict[int, np.ndarray]:
    """The values of fn's small integer (and bool) array arguments, by position."""
    out = {}
    for i, a in enumerate(args):
        dtype = getattr(a, "dtype", None)
        if dtype is not None and hasattr(a, "shape") and np.dtype(dtype).kind in "iub":
            if int(np.prod(a.shape)) <= _BAKED_MAX:
                out[i] = np.asarray(a)
    return out


def run(entry: Compiled | None, kind: str, eager: Callable[[], Any], *args: Any, attribute: str = "") -> Any:
    if entry is None or not entry.ok[kind]:
        return eager()
    try:
        return attempt(
            entry, lambda forms: getattr(forms, attribute or kind)(*args), args[0] if kind in _TAKES_ARGS else args
        )
    except Exception:
        # either fn cannot be traced or it raises: the eager run tells which
        out = eager()
        entry.ok[kind] = False
        return out


#: The kinds whose forms take fn's arguments as one tuple (then the operand and wrt).
_TAKES_ARGS = ("jvp", "vjp", "primals")


def attempt(entry: Compiled, use: Callable[[Compiled], Any], args: tuple) -> Any:
    """``use(forms)`` of fn's compiled forms for fn's ``args``; where a trace
    needed an integer argument's value, again with those arguments baked in."""
    try:
        with _no_leaked_traces():
            return use(entry.at(tuple(args)))
    except _VALUE_NEEDED:
        if not entry.bake(tuple(args)):
            raise
    with _no_leaked_traces():
        return use(entry.at(tuple(args)))


def transform(
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
    return run(entry, kind, lambda: eager(fn, a, operand, w), a, operand, w, attribute=attribute)
