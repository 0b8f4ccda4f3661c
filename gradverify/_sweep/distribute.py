"""Running the verification matrix: in this process, on a local process pool,
or on an existing Dask distributed cluster - with the same records whichever.

Every case is independent and serializable (``cases.Case``, a frozen
dataclass of plain values) and carries its own seed, so where and in which
order it runs changes nothing but its ``seconds``. Each record is handed to
``on_record`` as it arrives (the command prints it and appends it to
``results.jsonl``) and the list comes back in the matrix's order, each record
with its ``index`` in the full matrix (so shards merge back into it).

* ``workers > 1``: ``concurrent.futures.ProcessPoolExecutor`` with the
  *spawn* start method: a forked child of a process that has started jax's
  or CUDA's threads can deadlock.
* ``scheduler="tcp://HOST:PORT"``: ``distributed.Client`` on that cluster (the
  ``dask`` extra). A worker that dies takes its running cases with it; the
  scheduler reruns them elsewhere (``distributed.scheduler.allowed-failures``
  times), so nothing is lost.
"""

from __future__ import annotations

import multiprocessing
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from .. import _io
from .._errors import ArgumentValueError, UsageError, explain
from . import cases as _sweep, reports

__all__ = [
    "RECORD_KEYS",
    "RESULTS_SCHEMA",
    "Interrupted",
    "OnRecord",
    "ResultsFile",
    "execute",
    "read_results",
    "shard",
]

RESULTS_SCHEMA = "gradverify-results/1"
OnRecord = Callable[[dict[str, Any]], None]


def shard(cases: Sequence[_sweep.Case], spec: str | None) -> list[tuple[int, _sweep.Case]]:
    """``K/N``: every N-th case from the K-th (1-based), with its index in the
    full matrix; None: all of them."""
    return _io.shard(cases, spec)


def execute(
    items: Sequence[tuple[int, _sweep.Case]],
    *,
    workers: int = 1,
    scheduler: str | None = None,
    on_record: OnRecord | None = None,
) -> list[dict[str, Any]]:
    """Run the cases; the records in matrix order."""
    if workers < 1:
        raise UsageError(explain("--workers", "an int >= 1", repr(workers), "e.g. --workers 2"))
    if scheduler is not None:
        stream = _on_dask(items, scheduler)
    elif workers > 1:
        stream = _on_pool(items, workers)
    else:
        stream = _serially(items)
    records = []
    try:
        for i, rec in stream:
            rec["index"] = i
            records.append(rec)
            if on_record is not None:
                on_record(rec)
    except KeyboardInterrupt:
        try:
            stream.close()  # (a pool cancels what has not started and waits for what runs)
        except KeyboardInterrupt:
            pass  # a second Ctrl-C: stop waiting
        raise Interrupted(sorted(records, key=lambda r: r["index"])) from None
    return sorted(records, key=lambda r: r["index"])


class Interrupted(Exception):
    """The sweep was interrupted (SIGINT): ``records`` holds the cases that finished."""

    def __init__(self, records: list[dict[str, Any]]) -> None:
        super().__init__(f"interrupted after {len(records)} case(s)")
        self.records = records


def _serially(items: Sequence[tuple[int, _sweep.Case]]) -> Iterator[tuple[int, dict[str, Any]]]:
    for i, case in items:
        yield i, _sweep.run_case(case)


def _on_pool(items: Sequence[tuple[int, _sweep.Case]], workers: int) -> Iterator[tuple[int, dict[str, Any]]]:
    context = multiprocessing.get_context("spawn")
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=context)
    try:
        futures = {pool.submit(_sweep.run_case, case): i for i, case in items}
        for future in as_completed(futures):
            yield futures[future], future.result()
    finally:
        # done, or interrupted: what has not started is cancelled, the running cases end with their workers
        pool.shutdown(wait=True, cancel_futures=True)


def _on_dask(items: Sequence[tuple[int, _sweep.Case]], address: str) -> Iterator[tuple[int, dict[str, Any]]]:
    try:
        from distributed import Client, as_completed as dask_completed
    except ImportError as e:
        raise UsageError(
            explain("--scheduler", "dask distributed installed", f"{e}", "pip install 'gradverify[dask]'")
        ) from e
    sweep = uuid.uuid4().hex[:12]
    try:
        # (how long to try: dask's distributed.comm.timeouts.connect, 30 s by default)
        client = Client(address, set_as_default=False)
    except OSError as e:
        raise UsageError(
            explain(
                "--scheduler",
                "the address of a running Dask scheduler",
                f"{address!r} ({e})",
                "e.g. tcp://10.0.0.5:8786",
            )
        ) from e
    with client:
        futures = {}
        for i, case in items:
            f = client.submit(_run_on_worker, case, key=f"gradverify-{sweep}-{i}", retries=0)
            futures[f.key] = (i, f)
        for future in dask_completed([f for _, f in futures.values()], loop=client.loop):
            yield futures[future.key][0], future.result()


def _run_on_worker(case: _sweep.Case) -> dict[str, Any]:
    """run_case on a Dask worker. The worker's own threads (heartbeats, comms)
    draw from the global ``random`` module while Hypothesis generates, which
    Hypothesis takes for a strategy using ``random`` and warns about; the draws
    come from Hypothesis's own seeded generator all the same."""
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Do not use the `random` module inside strategies")
        return _sweep.run_case(case)


# -- results files: JSON lines, one record per case ------------------------------------------------
class ResultsFile:
    """``results.jsonl``: a header line (schema, command, seed, and the shard
    ``K/N`` the run was, or null for a whole sweep), then one line per record
    as it arrives, flushed, so a sweep that dies leaves what it did."""

    def __init__(self, path: str | Path, *, command: str, seed: int, shard: str | None = None) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._f = open(self.path, "w", encoding="utf-8")  # noqa: SIM115  (closed in close())
        self._write({"schema": RESULTS_SCHEMA, "command": command, "seed": seed, "shard": shard})

    def _write(self, obj: dict[str, Any]) -> None:

        self._f.write(_io.to_json(obj, indent=None) + "\n")
        self._f.flush()

    def add(self, record: dict[str, Any]) -> None:
        self._write(record)

    def close(self) -> None:
        self._f.close()


#: What a case record must hold for merge to place it.
RECORD_KEYS = ("id", "order", "seed", "max_examples", "status")


def _json_lines(path: Path, text: str) -> tuple[dict[str, Any], list[Any]]:
    """A results file's header and records. A last line cut short (a run
    killed mid-write) is left out with a warning that names it; every
    complete record before it is kept. A bad line elsewhere is an error."""
    import warnings

    parsed, cut = _io.json_lines(text)
    if cut is not None:
        warnings.warn(
            f"{path}: line {cut} is cut short, as a killed run leaves it; "
            f"merged the {len(parsed) - 1} complete record(s) before it",
            UserWarning,
            stacklevel=3,
        )
    head = parsed[0] if parsed else {}
    if not isinstance(head, dict) or head.get("schema") != RESULTS_SCHEMA:
        raise ValueError(f"first line is not a {RESULTS_SCHEMA} header")
    return head, parsed[1:]


#: A file that does not say which shard it holds: a report.json, or a results file of an earlier version.
_UNRECORDED = object()


def _shard_of(path: str, share: Any) -> tuple[int, int]:
    """(K, N) of a results file's ``shard`` record."""
    try:
        k, n = (int(p) for p in share.split("/"))
    except (AttributeError, ValueError):
        k = n = 0
    if not 1 <= k <= n:
        raise ArgumentValueError(
            explain(f"merge FILE {path}", "a header whose shard is K/N or null", repr(share), "pass it unedited")
        )
    return k, n


def _every_shard(shares: Sequence[tuple[str, Any]]) -> None:
    """The files make a whole sweep: one of them is a whole sweep, or they
    hold every shard K/N of one N (a shard given twice is merged once). A
    missing shard is an error that names it: merged without it, the report
    would count its cases neither passed nor failed, and exit 0."""
    given = [(path, share) for path, share in shares if share is not _UNRECORDED]
    if not given or any(share is None for _, share in given):
        return
    parts = {path: _shard_of(path, share) for path, share in given}
    found = ", ".join(f"{k}/{n} ({path})" for path, (k, n) in parts.items())
    splits = {n for _, n in parts.values()}
    if len(splits) > 1:
        raise ArgumentValueError(
            explain(
                "merge FILE...",
                "the shards of one split (every --shard K/N of one N)",
                found,
                "merge the results of one sweep's shards",
            )
        )
    (n,) = splits
    missing = [f"{k}/{n}" for k in range(1, n + 1) if k not in {k for k, _ in parts.values()}]
    if missing:
        unsaid = [path for path, share in shares if share is _UNRECORDED]
        raise ArgumentValueError(
            explain(
                "merge FILE...",
                f"the results of every shard K/{n} of the sweep",
                f"shard(s) {found}; missing {', '.join(missing)}"
                + (f" ({', '.join(unsaid)} say no shard: pass the results.jsonl beside them)" if unsaid else ""),
                f"add the results.jsonl of shard {', '.join(missing)} (gradverify check ... --shard "
                f"{missing[0]} --report DIR writes DIR/results.jsonl)",
            )
        )


def read_results(paths: Sequence[str | Path]) -> tuple[list[dict[str, Any]], int]:
    """The records of several results files (``results.jsonl``, or a
    ``report.json``), each case once, in matrix order; and their base seed.

    A case found in two files must have the same result in both (its
    ``seconds`` aside): a difference means the shards were not of one sweep.
    Shards must all be there: every ``K/N`` of one ``N``, as their results
    files' headers say (see ``_every_shard``)."""

    by_key: dict[tuple[Any, ...], tuple[dict[str, Any], str]] = {}
    seeds = set()
    shares: list[tuple[str, Any]] = []
    for path in paths:
        p = Path(path)
        try:
            text = p.read_text()
            if p.suffix == ".json":
                head = reports.load(p)
                records = head["cases"]
            else:
                head, records = _json_lines(p, text)
            seeds.add(head["seed"])
            shares.append((str(p), head.get("shard", _UNRECORDED)))
        except (OSError, ValueError, KeyError) as e:
            raise ArgumentValueError(
                explain(
                    "merge FILE",
                    "results.jsonl or report.json written by gradverify check",
                    f"{p} ({e})",
                    "pass the files the shards wrote",
                )
            ) from e
        for k, rec in enumerate(records):
            missing = [f for f in RECORD_KEYS if not isinstance(rec, dict) or f not in rec]
            if missing:
                raise ArgumentValueError(
                    explain(
                        f"merge FILE {p}",
                        "records of gradverify check (" + ", ".join(RECORD_KEYS) + ", ...)",
                        f"record {k + 1} without {', '.join(missing)}",
                        "pass the files the shards wrote, unedited",
                    )
                )
            key = (rec["id"], rec["order"], rec["seed"], rec["max_examples"])
            if key in by_key and reports.canonical_case(by_key[key][0]) != reports.canonical_case(rec):
                raise ArgumentValueError(
                    explain(
                        "merge FILE...",
                        "one result per case",
                        f"{rec['id']} differs between {by_key[key][1]} and {p}",
                        "merge shards of one sweep (same command, seed and version)",
                    )
                )
            by_key.setdefault(key, (rec, str(p)))
    if len(seeds) > 1:
        raise ArgumentValueError(
            explain(
                "merge FILE...",
                "shards of one sweep (one base seed)",
                f"seeds {sorted(seeds)}",
                "rerun with one --seed",
            )
        )
    _every_shard(shares)
    records = sorted((r for r, _ in by_key.values()), key=lambda r: (r.get("index", 0), r["id"]))
    return records, seeds.pop() if seeds else 0
