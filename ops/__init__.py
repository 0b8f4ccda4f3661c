"""gradverify.ops: reference and fused bias_act and normalization layers on
numpy, PyTorch and JAX (issue #3). Installed as ``gradverify.ops``."""
