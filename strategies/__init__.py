"""gradverify.strategies: Hypothesis strategies that avoid kinks and degenerate
statistics, with fixed seeds (issue #4). Installed as ``gradverify.strategies``."""
