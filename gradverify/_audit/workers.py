"""Running audit tasks in worker processes that may hang or die.

Every task runs in a spawned worker process (never in the caller's: one
operator that hangs, aborts or exhausts memory must not stop the audit).
The worker says when it starts a sample and sends its record when the
sample is done; the supervisor gives each sample ``timeout`` seconds. A
sample past its time, or a worker that dies, gets a ``timeout`` or
``crashed`` record, the worker is replaced, and the task goes on from the
next sample. Records reach ``on_record`` as they arrive.

With ``scheduler`` (a Dask scheduler's address), each task is a Dask task
whose worker runs it the same way, in a process of its own with the same
time limits.
"""

from __future__ import annotations

import multiprocessing
import time
import traceback
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict
from multiprocessing.connection import wait
from typing import Any

from .._check import pipeline
from .._errors import ArgumentTypeError, ArgumentValueError, UsageError, explain
from . import opinfo

__all__ = ["Interrupted", "OnRecord", "check_options", "check_sample", "key", "run_tasks"]

OnRecord = Callable[[dict[str, Any]], None]
#: The refusals of gv.check that mean "gradverify does not check this kind of sample", not an error.
REFUSALS = (ArgumentTypeError, ArgumentValueError)


def key(record: dict[str, Any]) -> tuple[str, str, int]:
    """What names a sample across runs: its task and index."""
    return record["task"], record["dtype"], record["sample"]


def _finding(f: Any) -> dict[str, Any]:
    d = f.to_dict()
    keep = ("kind", "level", "message", "pair", "argument", "input_index", "output_index", "values", "error", "bound")
    return {k: d.get(k) for k in keep}


def check_sample(task: opinfo.Task, sample: opinfo.Sample, database: Sequence[Any]) -> dict[str, Any]:
    """One sample through gv.check: its record."""
    base = {**_named(task, sample.index), "shapes": sample.shapes}
    if sample.skip is not None:
        return {**base, "status": "skipped", "reason": sample.skip, "seconds": 0.0}
    if sample.error is not None:
        return {**base, "status": "error", "reason": sample.error[:2000], "seconds": 0.0}
    start = time.perf_counter()
    try:
        result = pipeline.check(
            sample.fn, *sample.args, order=task.order, batched=task.batched, seed=task.seed, name=task.id
        )
    except REFUSALS as e:
        return {**base, "status": "skipped", "reason": f"gradverify: {e}", "seconds": time.perf_counter() - start}
    except Exception as e:
        tb = traceback.format_exc(limit=-6)
        return {
            **base,
            "status": "error",
            "reason": f"{type(e).__name__}: {e}"[:2000],
            "traceback": tb,
            "seconds": time.perf_counter() - start,
        }
    seconds = time.perf_counter() - start
    status = "failed" if not result.ok else ("inconclusive" if result.inconclusive else "passed")
    rec = {**base, "status": status, "seconds": seconds, "outputs": sample.outputs, "modes": dict(result.modes)}
    rec["findings"] = [_finding(f) for f in (result.errors if not result.ok else result.warnings)]
    if not result.ok:
        rec["known"] = _known(task, database, result.errors)
        rec["declared"] = opinfo.declared(task, database)
        rec["report"] = str(result)
        rec["reproducer"] = opinfo.reproducer(task, sample)
    return rec


def _known(task: opinfo.Task, database: Sequence[Any], errors: Sequence[Any]) -> dict[str, str] | None:
    """PyTorch's expected failure that explains every error: one of each
    finding's modes (a finding of neither mode concerns the backward test)."""
    known = None
    for f in errors:
        # a second-order mode "JVP of VJP" is forward over reverse (the fwgrad_bwgrad test),
        # "VJP of ..." reverse over reverse (gradgrad)
        modes = [m.split(" ")[0] for m in (f.pair or ()) if m.split(" ")[0] in ("JVP", "VJP")] or ["VJP"]
        found = [k for k in (opinfo.known_failure(task, database, m, f.order) for m in modes) if k]
        if not found:
            return None
        known = known or found[0]
    return known


def _worker(conn: Any) -> None:
    """A worker process: tasks in, records out, until told to stop (None)."""
    import signal
    import warnings

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # (a Ctrl-C reaches the whole process group: the supervisor decides)
    warnings.simplefilter("ignore")  # (the database's and the operators' own warnings are not the audit's)
    databases: dict[str | None, list[Any]] = {}
    conn.send(("ready", None))
    while True:
        message = conn.recv()
        if message is None:
            return
        fields, done = message
        task = opinfo.Task(**fields)
        if task.database not in databases:
            databases[task.database] = opinfo.load_database(task.database)
        database = databases[task.database]
        starting = lambda index: conn.send(("start", index))  # noqa: E731
        for sample in opinfo.samples(task, database, done, starting):
            try:
                rec = check_sample(task, sample, database)
            except Exception as e:  # (the report of a finding, not the check: say it, keep the worker)
                rec = _lost(task, sample.index, "error", f"{type(e).__name__}: {e}")
                rec["traceback"] = traceback.format_exc(limit=-6)
            rec["counted"] = sample.counted
            conn.send(("record", rec))
        conn.send(("done", None))


#: Seconds a worker may take to start (import torch) and to build a task's
#: first sample (import and walk its database) before the supervisor gives up.
STARTUP = 300.0


class _Slot:
    """One worker process and the task it runs."""

    def __init__(self, context: Any) -> None:
        self.conn, child = context.Pipe()
        self.process = context.Process(target=_worker, args=(child,), daemon=True)
        self.process.start()
        child.close()
        self.task: opinfo.Task | None = None
        self.done: dict[int, bool] = {}
        self.current: int | None = None
        self.started = False  # (whether the task has begun a sample here)
        self.deadline = time.monotonic() + STARTUP  # (to say it is ready)
        self.limit = STARTUP
        self.ready = False

    def give(self, task: opinfo.Task, done: dict[int, bool], timeout: float) -> bool:
        """Hand the task over; False when the worker is gone."""
        self.task, self.done, self.current, self.started = task, dict(done), None, False
        self.limit = max(timeout, STARTUP)  # (the database's import and the task's first sample included)
        self.deadline = time.monotonic() + self.limit
        try:
            self.conn.send((asdict(task), self.done))
        except OSError:
            return False
        return True

    def stop(self, kill: bool = False) -> None:
        try:
            if kill:
                self.process.kill()
            else:
                self.conn.send(None)
        except (OSError, ValueError):
            pass
        self.process.join(5)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        self.conn.close()


def _named(task: opinfo.Task, index: int | None) -> dict[str, Any]:
    """What every record of a sample begins with: its task and index (-1: a task lost before its first sample)."""
    name = {"task": task.op_id, "name": task.name, "variant": task.variant, "dtype": task.dtype}
    return {**name, "sample": -1 if index is None else index}


def _lost(task: opinfo.Task, index: int | None, status: str, reason: str, seconds: float = 0.0) -> dict[str, Any]:
    return {**_named(task, index), "status": status, "reason": reason, "seconds": seconds, "counted": True}


def _supervised(
    work: Sequence[tuple[opinfo.Task, dict[int, bool]]], workers: int, timeout: float
) -> Iterator[dict[str, Any]]:
    """The records of the tasks, run in ``workers`` processes. A sample past
    its time or whose worker dies is lost (a record says so) and its task goes
    on from the next one; a task whose worker dies before it begins a sample
    is given again, once; a worker that cannot start is a usage error."""
    context = multiprocessing.get_context("spawn")
    queue = deque((task, done, 0) for task, done in work)
    slots = [_Slot(context) for _ in range(min(workers, len(queue)) or 1)]
    tries: dict[opinfo.Task, int] = {}
    try:
        while queue or any(s.task is not None for s in slots):
            for i, s in enumerate(slots):
                if s.ready and s.task is None and queue:
                    task, done, tried = queue.popleft()
                    tries[task] = tried
                    if not s.give(task, done, timeout):
                        s.stop(kill=True)
                        slots[i] = _Slot(context)
                        queue.appendleft((task, done, tried))
            ready = wait([s.conn for s in slots], timeout=1.0)
            now = time.monotonic()
            for i, s in enumerate(slots):
                lost = None
                if s.conn in ready:
                    try:
                        what, value = s.conn.recv()
                    except (EOFError, OSError):
                        s.process.join(1)
                        lost = ("crashed", f"the worker process died (exit code {s.process.exitcode})")
                    else:
                        if what == "ready":
                            s.ready, s.deadline = True, float("inf")
                        elif what == "start":
                            s.current, s.started, s.deadline, s.limit = value, True, now + timeout, timeout
                        elif what == "record":
                            s.done[value["sample"]] = value.get("counted", value["status"] != "skipped")
                            # (the next sample's building runs the operator too: the same limit)
                            s.current, s.deadline, s.limit = None, now + timeout, timeout
                            yield value
                        else:
                            s.task, s.deadline = None, float("inf")
                if lost is None and now > s.deadline:
                    lost = ("timeout", f"no result within {s.limit:g} s")
                if lost is None:
                    continue
                task, done, current, started = s.task, s.done, s.current, s.started
                s.stop(kill=True)
                if task is None and not s.ready:
                    raise UsageError(
                        explain(
                            "an audit worker",
                            f"a process that starts within {STARTUP:g} s",
                            f"one that {'hung' if lost[0] == 'timeout' else 'died'} before it was ready ({lost[1]})",
                            "run `python -c 'import torch'` to see why it cannot start, then run the audit again",
                        )
                    )
                slots[i] = _Slot(context)
                if task is None:
                    continue  # (between tasks: nothing was lost)
                if current is None and not started and tries.get(task, 0) == 0:
                    queue.appendleft((task, done, 1))  # (it died before the task began: once more)
                    continue
                yield _lost(task, current, *lost)
                if current is not None:  # (the rest of the task, from the next sample)
                    queue.appendleft((task, {**done, current: True}, tries.get(task, 0)))
    except KeyboardInterrupt:
        yield from _finished(slots)  # (records sent before the interrupt are kept)
        raise
    finally:
        for s in slots:
            s.stop(kill=True)


def _finished(slots: Sequence[_Slot]) -> Iterator[dict[str, Any]]:
    """The records the workers sent that were not yet read."""
    for s in slots:
        try:
            while s.conn.poll():
                what, value = s.conn.recv()
                if what == "record":
                    yield value
        except (EOFError, OSError):
            continue


def _on_dask(
    work: Sequence[tuple[opinfo.Task, dict[int, bool]]], address: str, timeout: float
) -> Iterator[dict[str, Any]]:
    try:
        from distributed import Client, as_completed
    except ImportError as e:
        raise UsageError(
            explain("--scheduler", "dask distributed installed", str(e), "pip install 'gradverify[dask]'")
        ) from e
    try:
        client = Client(address, set_as_default=False)
    except OSError as e:
        raise UsageError(
            explain("--scheduler", "the address of a running Dask scheduler", f"{address!r} ({e})", "tcp://HOST:PORT")
        ) from e
    run = uuid.uuid4().hex[:12]
    with client:
        futures = [
            client.submit(_task_on_worker, task, done, timeout, key=f"gradverify-audit-{run}-{k}", retries=0)
            for k, (task, done) in enumerate(work)
        ]
        for future in as_completed(futures, loop=client.loop):
            yield from future.result()


def _task_on_worker(task: opinfo.Task, done: dict[int, bool], timeout: float) -> list[dict[str, Any]]:
    """One task on a Dask worker, in a process of its own with the same time
    limits. A Dask worker's process is daemonic, and multiprocessing refuses
    children to a daemonic process (lest they be orphaned when it exits); the
    supervisor kills its child whatever happens, so the flag is lifted while it runs."""
    config = multiprocessing.current_process()._config
    daemon = config.get("daemon")
    config["daemon"] = False
    try:
        return list(_supervised([(task, done)], 1, timeout))
    finally:
        config["daemon"] = daemon


def check_options(workers: int, timeout: float) -> None:
    if not isinstance(workers, int) or workers < 1:
        raise UsageError(explain("--workers", "an int >= 1", repr(workers), "e.g. --workers 2"))
    if not timeout > 0:
        raise UsageError(explain("--timeout", "seconds > 0", repr(timeout), "e.g. --timeout 120"))


def run_tasks(
    work: Sequence[tuple[opinfo.Task, dict[int, bool]]],
    *,
    workers: int = 1,
    scheduler: str | None = None,
    timeout: float = 120.0,
    on_record: OnRecord | None = None,
) -> list[dict[str, Any]]:
    """Run the tasks (each with the sample indices already done); every record, as it came."""
    check_options(workers, timeout)
    stream = _on_dask(work, scheduler, timeout) if scheduler else _supervised(work, workers, timeout)
    records: list[dict[str, Any]] = []

    def take(rec: dict[str, Any]) -> None:
        records.append(rec)
        if on_record is not None:
            on_record(rec)

    try:
        for rec in stream:
            take(rec)
    except KeyboardInterrupt:
        try:  # (what finished before the interrupt is kept, wherever the interrupt came)
            rec = stream.throw(KeyboardInterrupt)
            while True:
                take(rec)
                rec = next(stream)
        except (KeyboardInterrupt, StopIteration):
            pass
        finally:
            stream.close()
        raise Interrupted(records) from None
    return records


class Interrupted(Exception):
    """The audit was interrupted: ``records`` holds the samples that finished."""

    def __init__(self, records: list[dict[str, Any]]) -> None:
        super().__init__(f"interrupted after {len(records)} sample(s)")
        self.records = records
