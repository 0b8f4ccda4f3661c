"""One check, ``gv.check``: its stages and its finite differences.
``pipeline`` runs the stages in turn - ``validate`` (the arguments),
``primal`` (fn twice on copies, the oracle's precision), ``probes`` (the
directions and cotangents), ``modes`` (JVP and VJP), ``oracle`` (the FD
references, from the ``fd`` sub-wing), ``compare`` (the comparisons, with
``judge``, ``bounds`` and ``worst`` shared among them, ``lowprecision`` for
low-precision AD against float64, the ``excuses`` a disagreement gets before
FD convicts AD, and the finding texts in ``messages``), ``locate`` (a failing
projection traced to its element) and ``batched`` (the derivatives under
vmap) - each adding to ``findings``; the ``views`` sub-wing meets the
caller's arguments and output (pytrees and models, sparse values, held
entries, complex parts) and ``unchecked`` keeps a check of nothing from
passing. Beneath them: ``context`` (the options and what the
stages share), ``evaluate`` with ``vectorised`` and ``calls`` (every call
into fn and its rules), ``xp`` (array arithmetic where the arguments live),
``tolerance`` (the constants, each with its reason) and ``steps`` (the
measurements the sweep's report and triage take)."""

__all__ = []
