"""Triage: is a failing gradient test a bug or a flake? ``junit`` reads
JUnit XML from several CI runs into flip rates and the environment fields
that separate failing runs (``gv.triage_junit``); ``rerun`` reruns a
function's gradient check across seeds, thread counts, FD steps and dtypes
for a verdict with its evidence (``gv.triage``); ``node`` does both for a
pytest node id (the test's CI runs, then its gradient calls rerun);
``render`` writes their reports; ``verdict`` holds ``Verdict``, what triage
says of a test."""

__all__ = []
