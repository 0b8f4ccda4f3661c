"""The audit's supervisor keeps every record a worker finished, whenever
a Ctrl-C comes: records already sent but not yet read, and records that
arrive while the caller's own code runs."""

import multiprocessing

import pytest

from gradverify._audit import workers


class _Pending:
    """The part of a worker slot the supervisor reads records from."""

    def __init__(self, messages):
        self.conn, child = multiprocessing.Pipe()
        for m in messages:
            child.send(m)
        child.close()


def test_records_sent_before_an_interrupt_but_not_read_are_kept():
    slots = [
        _Pending([("record", {"sample": 0}), ("start", 1)]),
        _Pending([]),
        _Pending([("record", {"sample": 4}), ("record", {"sample": 5})]),
    ]
    assert [r["sample"] for r in workers._finished(slots)] == [0, 4, 5]


def test_an_interrupt_in_the_callers_hands_keeps_what_the_stream_still_holds(monkeypatch):
    def stream(work, n, timeout):
        try:
            yield {"sample": 0}
            yield {"sample": 1}
        except KeyboardInterrupt:
            yield {"sample": 2}  # (sent before the interrupt, read after it)
            raise

    def on_record(rec):
        if rec["sample"] == 1:
            raise KeyboardInterrupt

    monkeypatch.setattr(workers, "_supervised", stream)
    with pytest.raises(workers.Interrupted) as caught:
        workers.run_tasks([], on_record=on_record)
    assert [r["sample"] for r in caught.value.records] == [0, 1, 2]
