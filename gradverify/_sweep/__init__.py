"""The verification matrix ``gradverify check`` runs: ``cases`` (each
target x backend x impl x dtype built into a function and a strategy and run
through ``gv.verify`` into a JSON-ready record), ``distribute`` (the cases in
this process, on a process pool or on a Dask cluster, in shards that merge
back), ``reports`` (the sweep's JSON, Markdown, JUnit XML and HTML, and the
environment the plugin records too) and ``examples`` (the built-in example
functions, which the tests and the benchmarks share)."""

__all__ = []
