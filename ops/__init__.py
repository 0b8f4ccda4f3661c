"""gradverify.ops: reference and fused ops on numpy, PyTorch and JAX (issue #3).

Installed as ``gradverify.ops`` (``ops`` is an unrelated PyPI distribution).
Importing it imports neither torch nor jax: backends load with their arrays.
"""

from ._bias_act import IMPLS as IMPLS
from ._bias_act import bias_act as bias_act
from ._bias_act import bias_act_ as bias_act_
from ._bias_act import bias_act_rule as bias_act_rule
from ._table import ACTIVATIONS as ACTIVATIONS
from ._table import Activation as Activation
from ._table import Kink as Kink
from ._table import activation as activation
from ._table import names as names
from ._table import output_rule as output_rule

__all__ = [
    "ACTIVATIONS",
    "IMPLS",
    "Activation",
    "Kink",
    "activation",
    "bias_act",
    "bias_act_",
    "bias_act_rule",
    "names",
    "output_rule",
]
