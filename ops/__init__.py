"""gradverify.ops: reference and fused ops on numpy, PyTorch and JAX.

Installed as ``gradverify.ops`` (``ops`` is an unrelated PyPI distribution).
Importing it imports neither torch nor jax: backends load with their arrays.
"""

from ._bias_act import IMPLS as IMPLS, bias_act as bias_act, bias_act_ as bias_act_, bias_act_rule as bias_act_rule
from ._norm import (
    batch_norm as batch_norm,
    group_norm as group_norm,
    instance_norm as instance_norm,
    layer_norm as layer_norm,
    norm_rule as norm_rule,
    rms_norm as rms_norm,
)
from ._table import (
    ACTIVATIONS as ACTIVATIONS,
    TORCH_FUNCTION_IS_RULE as TORCH_FUNCTION_IS_RULE,
    Activation as Activation,
    Kink as Kink,
    activation as activation,
    constant_slope as constant_slope,
    names as names,
    output_rule as output_rule,
    two_valued as two_valued,
)

__all__ = [
    "ACTIVATIONS",
    "TORCH_FUNCTION_IS_RULE",
    "IMPLS",
    "Activation",
    "Kink",
    "activation",
    "constant_slope",
    "bias_act",
    "bias_act_",
    "bias_act_rule",
    "batch_norm",
    "group_norm",
    "instance_norm",
    "layer_norm",
    "norm_rule",
    "rms_norm",
    "names",
    "output_rule",
    "two_valued",
]
