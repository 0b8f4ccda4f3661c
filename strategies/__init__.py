"""gradverify.strategies: Hypothesis strategies that avoid kinks and degenerate
statistics, with fixed seeds. Installed as ``gradverify.strategies``.

* :func:`arrays` - dense, varied arrays of any backend and dtype, kept away
  from the kinks a user declares (``kinks=``);
* :func:`complex_arrays` - complex arrays by magnitude and phase, kept off
  the negative real axis and 0 (the branch cut of log, sqrt, angle) on request;
* :func:`bias_act_args` - ``(x, b)`` with x + b off every kink of the
  activation yet covering every piece;
* :func:`normalization_args` / :func:`normalization_call` - inputs whose
  statistics are informative, and the layer call that takes them;
* :func:`activations` - the table's names, simplest first;
* settings profiles ``ci``, ``dev``, ``thorough`` (:func:`load_profile`);
* :func:`to_backend` - a numpy array as an array of a backend and dtype.
"""

from ._arrays import (
    BACKENDS as BACKENDS,
    DTYPES as DTYPES,
    arrays as arrays,
    complex_arrays as complex_arrays,
    default_shapes as default_shapes,
    kink_margin as kink_margin,
    to_backend as to_backend,
)
from ._ops import (
    KINDS as KINDS,
    activation_names as activation_names,
    activations as activations,
    bias_act_args as bias_act_args,
    normalization_args as normalization_args,
    normalization_call as normalization_call,
)
from ._profiles import PROFILES as PROFILES, load_profile as load_profile, profile_settings as profile_settings

__all__ = [
    "BACKENDS",
    "DTYPES",
    "KINDS",
    "PROFILES",
    "activation_names",
    "activations",
    "arrays",
    "bias_act_args",
    "complex_arrays",
    "default_shapes",
    "kink_margin",
    "load_profile",
    "normalization_args",
    "normalization_call",
    "profile_settings",
    "to_backend",
]
