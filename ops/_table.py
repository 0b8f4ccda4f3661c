"""The activation table: one row per activation, written once against the
array namespace (array-api-compat) and bound per backend by ``_xp``. Every
rule, strategy and kink list is derived from these rows; no code elsewhere
branches on an activation's name.

Conventions at kinks follow JAX where JAX has the function (relu'(0) = 0,
relu6/hard_sigmoid' = 0 at their kinks, leaky_relu' = 1 at 0, elu'(0) = alpha,
hard_swish' = 0 at -3 and 1 at 3) and NNlib's rules otherwise (softshrink, trelu,
rrelu, and hardtanh, where JAX's slope 1 at +-1 cannot be read from the output).
Each reference formula is written with ``where`` so that the framework's AD of
it picks the same value as the hand-written derivative.

Numerically stable forms: softplus, logsigmoid and logcosh use
log1p(exp(-|z|)) and never overflow; sigmoid uses exp(-|z|).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cache
from typing import Any

from ._xp import namespace

SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
SQRT_8_OVER_PI = math.sqrt(8.0 / math.pi)
INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
INV_SQRT_2 = 1.0 / math.sqrt(2.0)
GELU_C = 0.044715
LOG2 = math.log(2.0)
SELU_LAMBDA = 1.0507009873554804934193349852946
SELU_ALPHA = 1.6732632423543772848170429916717

Fn = Callable[..., Any]


@dataclass(frozen=True)
class Kink:
    """A non-smooth point: its location, the one-sided derivatives there, and the
    value the rules use at it (all functions of the parameters). ``jump``: the
    function itself jumps (from ``left_value`` to ``right_value``)."""

    at: Callable[[dict], float]
    left: Callable[[dict], float]
    right: Callable[[dict], float]
    chosen: Callable[[dict], float]
    jump: bool = False


@dataclass(frozen=True)
class Activation:
    name: str
    aliases: tuple[str, ...]
    forward: Fn  # (xp, z, **params) -> y
    derivative: Fn  # (xp, z, y, **params) -> dy/dz, valid everywhere
    from_output: Fn | None = None  # (xp, y, **params) -> dy/dz where that is mathematically true
    # A slope with two values read from the output: mask(xp, y, **params) is
    # where it is mask_slopes[0], elsewhere mask_slopes[1]. The fused torch
    # rule then keeps one bit per element instead of the output.
    mask: Fn | None = None
    mask_slopes: tuple[float, float] | None = None
    # The same mask as a function of z, where y cannot tell the sides apart
    # everywhere (hardsigmoid: y = (z + 3) / 6 rounds to 1 within 3 u below 3;
    # leakyrelu: a z underflows to -0).
    mask_z: Fn | None = None
    # The output rule is exact in real arithmetic but cancels in floating
    # point (elu: y + alpha for z << 0 loses ~log2(1/e^z) bits; torch's own
    # elu backward reads the input for that reason): the rules keep z.
    output_cancels: bool = False
    params: dict[str, float] = field(default_factory=dict)
    kinks: tuple[Kink, ...] = ()
    random: bool = False  # rrelu: a random slope per call; checked in its fixed-slope mode
    torch: str | None = None  # torch.nn.functional name (same function, same defaults)
    jax: str | None = None  # jax.nn name
    doc: str = ""

    def with_params(self, **params: float) -> Activation:
        unknown = set(params) - set(self.params)
        if unknown:
            raise TypeError(
                f"activation {self.name!r}: expected parameters from {sorted(self.params) or 'none'}; "
                f"found {sorted(unknown)}. Fix: pass only those, e.g. "
                + (f"{next(iter(self.params))}={next(iter(self.params.values()))}" if self.params else "no keywords")
            )
        return replace(self, params={**self.params, **params})

    def kink_points(self) -> list[tuple[float, Kink]]:
        """(location, kink) for these parameters; a kink whose one-sided
        derivatives agree (elu with alpha = 1) is no kink and is left out."""
        p = self.params
        return [(k.at(p), k) for k in self.kinks if k.jump or k.left(p) != k.right(p)]

    @property
    def saves_output(self) -> bool:
        """Whether the fused rules keep only the output (else they keep x + b)."""
        return self.from_output is not None and not self.output_cancels


def _two_valued(mask: Fn, hi: float, lo: float = 0.0) -> dict[str, Any]:
    """Table fields of a slope that is ``hi`` where ``mask(y)`` and ``lo``
    elsewhere: the mask, its two values, and the from-output rule they make."""
    return {
        "mask": mask,
        "mask_slopes": (hi, lo),
        "from_output": lambda xp, y, **p: xp.where(mask(xp, y, **p), hi + 0 * y, lo + 0 * y),
    }


def _const(v: float) -> Callable[[dict], float]:
    return lambda p: v


# The stable forms below need exp(-|z|), but AD takes |z|' = 0 at z = 0 and
# would make every one of them flat there (sigmoid'(0) = 0 instead of 1/4:
# found by `gradverify check all`). -|z| is written as a where on the same
# condition as the branch it feeds, so each branch differentiates as itself.
def _neg_abs(xp: Any, z: Any, positive: Any) -> Any:
    return xp.where(positive, -z, z)


def _sigmoid(xp: Any, z: Any) -> Any:
    pos = z >= 0
    e = xp.exp(_neg_abs(xp, z, pos))  # never overflows
    return xp.where(pos, 1 / (1 + e), e / (1 + e))


def _softplus(xp: Any, z: Any) -> Any:
    pos = z > 0
    return xp.where(pos, z, 0 * z) + xp.log1p(xp.exp(_neg_abs(xp, z, pos)))


def _tanh_d(xp: Any, z: Any, y: Any) -> Any:
    t = xp.tanh(z)
    return 1 - t * t


# (1 + tanh(u)) / 2 = sigmoid(2u): the same function without the cancellation
# of 1 + tanh(u) for u << 0, whose rounding noise (1e4 times the output's
# scale at z = -4) made finite differences of the reference unreliable.
def _gelu_tanh(xp: Any, z: Any) -> Any:
    return z * _sigmoid(xp, 2 * SQRT_2_OVER_PI * (z + GELU_C * z * z * z))


def _gelu_tanh_d(xp: Any, z: Any, y: Any) -> Any:
    w = 2 * SQRT_2_OVER_PI * (z + GELU_C * z * z * z)
    s, s_neg = _sigmoid(xp, w), _sigmoid(xp, -w)  # 1 - s without cancelling
    return s + z * s * s_neg * 2 * SQRT_2_OVER_PI * (1 + 3 * GELU_C * z * z)


# (1 + erf(z/sqrt 2)) / 2 = erfc(-z/sqrt 2) / 2, without the cancellation for
# z << 0 (found by `gradverify check all`: finite differences of the first
# form were rounding noise at z = -4).
def _gelu_erf(xp: Any, z: Any) -> Any:
    return 0.5 * z * xp.erfc(-z * INV_SQRT_2)


def _gelu_erf_d(xp: Any, z: Any, y: Any) -> Any:
    return 0.5 * xp.erfc(-z * INV_SQRT_2) + z * INV_SQRT_2PI * xp.exp(-0.5 * z * z)


def _logcosh(xp: Any, z: Any) -> Any:
    """log(cosh z): log1p(2 sinh(z/2)^2) for |z| < 20 (exact near 0, where
    |z| + log1p(exp(-2|z|)) - log 2 cancels down to z^2/2 - found by
    `gradverify check all`), the stable form beyond (no overflow)."""
    a = xp.abs(z)
    small = a < 20
    s = xp.sinh(xp.where(small, z, 0 * z) / 2)  # finite in the branch not taken
    return xp.where(small, xp.log1p(2 * s * s), a + xp.log1p(xp.exp(-a) ** 2) - LOG2)


def _gelu_sigmoid(xp: Any, z: Any) -> Any:
    return z * _sigmoid(xp, SQRT_8_OVER_PI * z * (1 + GELU_C * z * z))


def _gelu_sigmoid_d(xp: Any, z: Any, y: Any) -> Any:
    s = _sigmoid(xp, SQRT_8_OVER_PI * z * (1 + GELU_C * z * z))
    return s + z * s * (1 - s) * SQRT_8_OVER_PI * (1 + 3 * GELU_C * z * z)


def _swish_d(xp: Any, z: Any, y: Any) -> Any:
    s = _sigmoid(xp, z)
    return s + z * s * (1 - s)


def _mish(xp: Any, z: Any) -> Any:
    return z * xp.tanh(_softplus(xp, z))


def _mish_d(xp: Any, z: Any, y: Any) -> Any:
    t = xp.tanh(_softplus(xp, z))
    return t + z * _sigmoid(xp, z) * (1 - t * t)


def _elu(xp: Any, z: Any, alpha: float) -> Any:
    return xp.where(z > 0, z, alpha * xp.expm1(xp.where(z > 0, 0 * z, z)))


def _elu_d(xp: Any, z: Any, alpha: float) -> Any:
    return xp.where(z > 0, 1 + 0 * z, alpha * xp.exp(xp.where(z > 0, 0 * z, z)))


ACTIVATIONS: tuple[Activation, ...] = (
    Activation(
        "identity",
        ("id", "linear"),
        forward=lambda xp, z: z,
        derivative=lambda xp, z, y: 1 + 0 * z,
        from_output=lambda xp, y: 1 + 0 * y,
        doc="y = z",
    ),
    Activation(
        "sigmoid",
        ("σ", "logistic"),
        forward=lambda xp, z: _sigmoid(xp, z),
        derivative=lambda xp, z, y: y * (1 - y),
        from_output=lambda xp, y: y * (1 - y),
        torch="sigmoid",
        jax="sigmoid",
        doc="1 / (1 + exp(-z)), stable by sign",
    ),
    Activation(
        "hardsigmoid",
        ("hardσ", "hard_sigmoid"),
        forward=lambda xp, z: xp.where(z >= 3, 1 + 0 * z, xp.where(z <= -3, 0 * z, (z + 3) / 6)),
        derivative=lambda xp, z, y: xp.where((z > -3) & (z < 3), 1 / 6 + 0 * z, 0 * z),
        **_two_valued(lambda xp, y: (y > 0) & (y < 1), 1 / 6),
        mask_z=lambda xp, z: (z > -3) & (z < 3),
        kinks=(
            Kink(_const(-3.0), _const(0.0), _const(1 / 6), _const(0.0)),
            Kink(_const(3.0), _const(1 / 6), _const(0.0), _const(0.0)),
        ),
        jax="hard_sigmoid",
        doc="clamp((z + 3) / 6, 0, 1)",
    ),
    Activation(
        "logsigmoid",
        ("logσ", "log_sigmoid"),
        forward=lambda xp, z: xp.where(z < 0, z, 0 * z) - xp.log1p(xp.exp(_neg_abs(xp, z, z >= 0))),
        derivative=lambda xp, z, y: _sigmoid(xp, -z),
        from_output=lambda xp, y: -xp.expm1(y),
        torch="logsigmoid",
        jax="log_sigmoid",
        doc="-softplus(-z); derivative sigmoid(-z) = 1 - exp(y)",
    ),
    Activation(
        "hardtanh",
        ("hard_tanh",),
        forward=lambda xp, z: xp.where(z >= 1, 1 + 0 * z, xp.where(z <= -1, -1 + 0 * z, z)),
        derivative=lambda xp, z, y: xp.where((z > -1) & (z < 1), 1 + 0 * z, 0 * z),
        **_two_valued(lambda xp, y: (y > -1) & (y < 1), 1.0),
        kinks=(
            Kink(_const(-1.0), _const(0.0), _const(1.0), _const(0.0)),
            Kink(_const(1.0), _const(1.0), _const(0.0), _const(0.0)),
        ),
        torch="hardtanh",
        jax="hard_tanh",
        doc="clamp(z, -1, 1); slope 0 at +-1 as NNlib and torch (JAX's 1 there cannot be read "
        "from the output, which is +-1 on the whole saturated side)",
    ),
    Activation(
        "relu",
        (),
        forward=lambda xp, z: xp.where(z > 0, z, 0 * z),
        derivative=lambda xp, z, y: xp.where(z > 0, 1 + 0 * z, 0 * z),
        **_two_valued(lambda xp, y: y > 0, 1.0),
        kinks=(Kink(_const(0.0), _const(0.0), _const(1.0), _const(0.0)),),
        torch="relu",
        jax="relu",
        doc="max(z, 0); relu'(0) = 0",
    ),
    Activation(
        "leakyrelu",
        ("leaky_relu",),
        forward=lambda xp, z, a: xp.where(z >= 0, z, a * z),
        derivative=lambda xp, z, y, a: xp.where(z >= 0, 1 + 0 * z, a + 0 * z),
        from_output=None,  # set below: only for a > 0
        # (y = a z underflows to -0 for z ~ -1e-322, as y = z is -0 at z = -0)
        mask_z=lambda xp, z, a: z >= 0,
        params={"a": 0.01},
        kinks=(Kink(_const(0.0), lambda p: p["a"], _const(1.0), _const(1.0)),),
        jax="leaky_relu",
        doc="z >= 0 ? z : a z (JAX's convention: slope 1 at 0)",
    ),
    Activation(
        "relu6",
        (),
        forward=lambda xp, z: xp.where(z >= 6, 6 + 0 * z, xp.where(z <= 0, 0 * z, z)),
        derivative=lambda xp, z, y: xp.where((z > 0) & (z < 6), 1 + 0 * z, 0 * z),
        **_two_valued(lambda xp, y: (y > 0) & (y < 6), 1.0),
        kinks=(
            Kink(_const(0.0), _const(0.0), _const(1.0), _const(0.0)),
            Kink(_const(6.0), _const(1.0), _const(0.0), _const(0.0)),
        ),
        torch="relu6",
        jax="relu6",
        doc="clamp(z, 0, 6)",
    ),
    Activation(
        "rrelu",
        (),
        forward=lambda xp, z, lo, hi: xp.where(z > 0, z, 0.5 * (lo + hi) * z),
        derivative=lambda xp, z, y, lo, hi: xp.where(z > 0, 1 + 0 * z, 0.5 * (lo + hi) + 0 * z),
        params={"lo": 1 / 8, "hi": 1 / 3},
        kinks=(
            Kink(_const(0.0), lambda p: 0.5 * (p["lo"] + p["hi"]), _const(1.0), lambda p: 0.5 * (p["lo"] + p["hi"])),
        ),
        random=True,
        doc="leaky relu with a slope drawn from U(lo, hi) per call; here its fixed-slope "
        "(evaluation) mode, slope (lo + hi) / 2, so that it can be checked",
    ),
    Activation(
        "elu",
        (),
        forward=lambda xp, z, alpha: _elu(xp, z, alpha),
        derivative=lambda xp, z, y, alpha: _elu_d(xp, z, alpha),
        from_output=lambda xp, y, alpha: xp.where(y > 0, 1 + 0 * y, y + alpha),
        output_cancels=True,
        params={"alpha": 1.0},
        kinks=(Kink(_const(0.0), lambda p: p["alpha"], _const(1.0), lambda p: p["alpha"]),),
        torch="elu",
        jax="elu",
        doc="z > 0 ? z : alpha (exp(z) - 1); a kink at 0 unless alpha = 1",
    ),
    Activation(
        "gelu",
        ("gelu_tanh",),
        forward=lambda xp, z: _gelu_tanh(xp, z),
        derivative=lambda xp, z, y: _gelu_tanh_d(xp, z, y),
        jax="gelu",
        doc="z/2 (1 + tanh(sqrt(2/pi) (z + 0.044715 z^3)))",
    ),
    Activation(
        "gelu_erf",
        ("gelu_exact",),
        forward=lambda xp, z: _gelu_erf(xp, z),
        derivative=lambda xp, z, y: _gelu_erf_d(xp, z, y),
        torch="gelu",
        doc="z Phi(z)",
    ),
    Activation(
        "gelu_sigmoid",
        (),
        forward=lambda xp, z: _gelu_sigmoid(xp, z),
        derivative=lambda xp, z, y: _gelu_sigmoid_d(xp, z, y),
        doc="z sigmoid(sqrt(8/pi) z (1 + 0.044715 z^2))",
    ),
    Activation(
        "swish",
        ("silu",),
        forward=lambda xp, z: z * _sigmoid(xp, z),
        derivative=lambda xp, z, y: _swish_d(xp, z, y),
        torch="silu",
        jax="silu",
        doc="z sigmoid(z); its derivative needs z (the seed bug evaluated it at x, not x + b)",
    ),
    Activation(
        "hardswish",
        ("hard_swish",),
        forward=lambda xp, z: z * xp.where(z >= 3, 1 + 0 * z, xp.where(z <= -3, 0 * z, (z + 3) / 6)),
        derivative=lambda xp, z, y: xp.where(z <= -3, 0 * z, xp.where(z >= 3, 1 + 0 * z, z / 3 + 0.5)),
        kinks=(
            Kink(_const(-3.0), _const(0.0), _const(-0.5), _const(0.0)),
            Kink(_const(3.0), _const(1.5), _const(1.0), _const(1.0)),
        ),
        torch="hardswish",
        jax="hard_swish",
        doc="z hardsigmoid(z); JAX's convention at +-3",
    ),
    Activation(
        "lisht",
        (),
        forward=lambda xp, z: z * xp.tanh(z),
        derivative=lambda xp, z, y: xp.tanh(z) + z * _tanh_d(xp, z, y),
        doc="z tanh(z)",
    ),
    Activation(
        "selu",
        (),
        forward=lambda xp, z: SELU_LAMBDA * _elu(xp, z, SELU_ALPHA),
        derivative=lambda xp, z, y: SELU_LAMBDA * _elu_d(xp, z, SELU_ALPHA),
        from_output=lambda xp, y: xp.where(y > 0, SELU_LAMBDA + 0 * y, y + SELU_LAMBDA * SELU_ALPHA),
        output_cancels=True,
        kinks=(
            Kink(_const(0.0), _const(SELU_LAMBDA * SELU_ALPHA), _const(SELU_LAMBDA), _const(SELU_LAMBDA * SELU_ALPHA)),
        ),
        torch="selu",
        jax="selu",
        doc="lambda elu(z, alpha) with the self-normalising constants",
    ),
    Activation(
        "celu",
        (),
        forward=lambda xp, z, alpha: xp.where(z > 0, z, alpha * xp.expm1(xp.where(z > 0, 0 * z, z) / alpha)),
        derivative=lambda xp, z, y, alpha: xp.where(z > 0, 1 + 0 * z, xp.exp(xp.where(z > 0, 0 * z, z) / alpha)),
        from_output=lambda xp, y, alpha: xp.where(y > 0, 1 + 0 * y, y / alpha + 1),
        output_cancels=True,
        params={"alpha": 1.0},
        torch="celu",
        jax="celu",
        doc="z > 0 ? z : alpha (exp(z/alpha) - 1); C1 for every alpha",
    ),
    Activation(
        "softplus",
        (),
        forward=lambda xp, z: _softplus(xp, z),
        derivative=lambda xp, z, y: _sigmoid(xp, z),
        from_output=lambda xp, y: -xp.expm1(-y),
        torch="softplus",
        jax="softplus",
        doc="log(1 + exp(z)), stable: max(z, 0) + log1p(exp(-|z|))",
    ),
    Activation(
        "softsign",
        ("soft_sign",),
        forward=lambda xp, z: z / (1 + xp.abs(z)),
        derivative=lambda xp, z, y: 1 / ((1 + xp.abs(z)) * (1 + xp.abs(z))),
        from_output=lambda xp, y: (1 - xp.abs(y)) * (1 - xp.abs(y)),
        torch="softsign",
        jax="soft_sign",
        doc="z / (1 + |z|)",
    ),
    Activation(
        "logcosh",
        (),
        forward=lambda xp, z: _logcosh(xp, z),
        derivative=lambda xp, z, y: xp.tanh(z),
        doc="log(cosh(z)): log1p(2 sinh(z/2)^2) below |z| = 20, |z| + log1p(exp(-|z|)^2) - log 2 above",
    ),
    Activation(
        "mish",
        (),
        forward=lambda xp, z: _mish(xp, z),
        derivative=lambda xp, z, y: _mish_d(xp, z, y),
        torch="mish",
        jax="mish",
        doc="z tanh(softplus(z))",
    ),
    Activation(
        "tanhshrink",
        (),
        forward=lambda xp, z: z - xp.tanh(z),
        derivative=lambda xp, z, y: xp.tanh(z) * xp.tanh(z),
        torch="tanhshrink",
        doc="z - tanh(z); monotone, but its derivative tanh(z)^2 has no closed form in y",
    ),
    Activation(
        "softshrink",
        (),
        forward=lambda xp, z, lambd: xp.where(z > lambd, z - lambd, xp.where(z < -lambd, z + lambd, 0 * z)),
        derivative=lambda xp, z, y, lambd: xp.where(xp.abs(z) > lambd, 1 + 0 * z, 0 * z),
        **_two_valued(lambda xp, y, lambd: y != 0, 1.0),
        params={"lambd": 0.5},
        kinks=(
            Kink(lambda p: -p["lambd"], _const(1.0), _const(0.0), _const(0.0)),
            Kink(lambda p: p["lambd"], _const(0.0), _const(1.0), _const(0.0)),
        ),
        torch="softshrink",
        doc="z > l ? z - l : z < -l ? z + l : 0",
    ),
    Activation(
        "trelu",
        ("threshold", "thresholded_relu"),
        forward=lambda xp, z, theta: xp.where(z > theta, z, 0 * z),
        derivative=lambda xp, z, y, theta: xp.where(z > theta, 1 + 0 * z, 0 * z),
        from_output=None,  # set below: only for theta >= 0
        params={"theta": 1.0},
        kinks=(Kink(lambda p: p["theta"], _const(0.0), _const(1.0), _const(0.0), jump=True),),
        doc="z > theta ? z : 0; a jump from 0 to theta at theta",
    ),
    Activation(
        "tanh",
        (),
        forward=lambda xp, z: xp.tanh(z),
        derivative=lambda xp, z, y: 1 - y * y,
        from_output=lambda xp, y: 1 - y * y,
        torch="tanh",
        jax="tanh",
        doc="tanh(z)",
    ),
)

# Slopes with two values read from the output for some parameters: (where
# that holds, the mask, the two values). Each mask picks the derivative's own
# value at the kink (leakyrelu' = 1 at 0 from y >= 0; rrelu' = its negative
# slope at 0 and trelu' = 0 at theta from y > 0).
_TWO_VALUED_FOR: dict[str, tuple[Callable[[dict], bool], Fn, Callable[[dict], tuple[float, float]]]] = {
    "leakyrelu": (lambda p: p["a"] > 0, lambda xp, y, a: y >= 0, lambda p: (1.0, p["a"])),
    "rrelu": (lambda p: p["lo"] + p["hi"] > 0, lambda xp, y, lo, hi: y > 0, lambda p: (1.0, 0.5 * (p["lo"] + p["hi"]))),
    "trelu": (lambda p: p["theta"] >= 0, lambda xp, y, theta: y > 0, lambda p: (1.0, 0.0)),
}


def _from_two_values(mask: Fn, slopes: Callable[[dict], tuple[float, float]]) -> Fn:
    """The derivative from the output that a two-valued slope makes."""

    def rule(xp: Any, y: Any, **p: float) -> Any:
        hi, lo = slopes(p)
        return xp.where(mask(xp, y, **p), hi + 0 * y, lo + 0 * y)

    return rule


# Derivatives from the output that hold only for some parameters (none for
# rrelu: the numpy and jax rules read its slope from z).
_CONDITIONAL_FROM_OUTPUT: dict[str, tuple[Callable[[dict], bool], Fn]] = {
    name: (when, _from_two_values(mask, slopes))
    for name, (when, mask, slopes) in _TWO_VALUED_FOR.items()
    if name != "rrelu"
}

# Activations whose torch function (at the table's parameters) is the rule
# itself: its autograd keeps what the rule would (tanh, sigmoid: the output;
# the others z), runs one kernel a direction (tanh_backward, sigmoid_backward,
# gelu_backward, elu_backward) and differentiates that kernel in both modes
# (order 2, forward over reverse), with the table's conventions at kinks
# (elu'(0) = alpha) and as exact in float64 as its formulas (within 2 u for
# the elu family; within a few hundred u, like the formulas, where gelu'
# passes through zero). The fused op is then that function, without a Python
# rule's overhead. (silu and mish are not: torch has no forward-mode
# derivative of silu_backward or mish_backward.)
TORCH_FUNCTION_IS_RULE = frozenset({"tanh", "sigmoid", "gelu_erf", "elu", "selu", "celu"})

#: Slopes that are one constant everywhere: the fused rules keep nothing.
_CONSTANT_SLOPE = {"identity": 1.0}


def two_valued(act: Activation) -> tuple[Fn, float, float] | None:
    """(mask, hi, lo) where the slope is ``hi`` on ``mask(xp, y, **params)``
    and ``lo`` elsewhere for these parameters (one bit per element is then
    all the fused rules keep); None where it is not."""
    if act.mask is not None:
        return act.mask, *act.mask_slopes
    rule = _TWO_VALUED_FOR.get(act.name) if in_table(act) else None
    if rule is None or not rule[0](act.params):
        return None
    return rule[1], *rule[2](act.params)


def constant_slope(act: Activation) -> float | None:
    """The slope where it is the same everywhere (nothing to keep), else None."""
    return _CONSTANT_SLOPE.get(act.name) if in_table(act) else None


def derivative_reads_output(act: Activation) -> bool:
    """Whether ``act.derivative(xp, z, y)`` reads y (else a rule that keeps z
    need not compute the forward again): asked of the formula itself, on one
    numpy element with y missing."""
    return _reads_output(act.derivative, tuple(sorted(act.params.items())))


@cache
def _reads_output(derivative: Fn, params: tuple) -> bool:
    import numpy as np

    try:
        out = derivative(namespace(np.zeros(1)), np.full(1, 0.5), None, **dict(params))
    except TypeError:
        return True
    return not (isinstance(out, np.ndarray) and out.dtype.kind == "f")  # (y in a where: an object array)


def in_table(act: Activation) -> bool:
    """Whether ``act`` is a row of the table (at any parameters): the facts
    kept by name here and in the fused rules hold for it, and for no row a
    caller built, whatever its name."""
    row = _BY_NAME.get(act.name.lower())
    return row is not None and row.forward is act.forward and row.derivative is act.derivative


def output_rule(act: Activation) -> Fn | None:
    """The derivative as a function of the output, as the fused rules use it:
    where that is true for these parameters (leakyrelu needs a > 0, trelu
    theta >= 0) and does not cancel in floating point (not elu, selu, celu)."""
    if act.output_cancels:
        return None
    cond = _CONDITIONAL_FROM_OUTPUT.get(act.name) if in_table(act) else None
    if cond is not None:
        return cond[1] if cond[0](act.params) else None
    return act.from_output


def slope(act: Activation, xp: Any, z: Any, y: Any) -> Any:
    """dy/dz as the fused rules compute it: from the output where that is
    valid (the only thing they keep then), else from z = x + b."""
    rule = output_rule(act)
    return rule(xp, y, **act.params) if rule is not None else act.derivative(xp, z, y, **act.params)


_BY_NAME: dict[str, Activation] = {}
for _a in ACTIVATIONS:
    for _n in (_a.name, *_a.aliases):
        _BY_NAME[_n.lower()] = _a


def activation(name: str | Activation, **params: float) -> Activation:
    """The table row for ``name`` (any alias, case-insensitive), with ``params``
    replacing its defaults."""
    if isinstance(name, Activation):
        return name.with_params(**params) if params else name
    if not isinstance(name, str):
        raise TypeError(
            f"activation: expected a name such as 'relu' or an Activation; found {type(name).__name__}. "
            "Fix: pass the name as a string (see gradverify.ops.names())"
        )
    act = _BY_NAME.get(name.lower())
    if act is None:
        import difflib

        close = difflib.get_close_matches(name.lower(), _BY_NAME, n=3)
        raise ValueError(
            f"activation: expected one of the table's names; found {name!r}. Fix: "
            + (f"did you mean {', '.join(map(repr, close))}? " if close else "")
            + "gradverify.ops.names() lists them all"
        )
    return act.with_params(**params) if params else act


def names() -> list[str]:
    """The canonical names, in table order."""
    return [a.name for a in ACTIVATIONS]
