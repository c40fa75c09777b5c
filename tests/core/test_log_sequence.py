"""The edit log as a ``Sequence`` past its retention.

A buffer without a readable sink keeps only the newest ``log_retention``
records; reading an older one by position raises :class:`LogRecordDropped`.
That error is a :class:`LookupError` but not an :class:`IndexError`, so the
sequence protocol never mistakes a dropped record for the end of the log:
``index``, ``in``, ``count``, ``reversed`` and slices work on the records
still held, and iterating the log while another thread appends (and so trims)
never raises.
"""

from __future__ import annotations

import sys
import threading

import pytest

from conftest import reasoning
from quiesce import Buffer, LogRecordDropped, QuiesceError

RETENTION = 16


def _trimmed(count: int = 200) -> Buffer:
    buf = Buffer(log_retention=RETENTION)
    for i in range(count):
        buf.append(reasoning(f"e{i}"))
    assert buf.log.dropped > 0 and buf.log.first > 0
    return buf


class TestDroppedRecordIsNotTheEnd:
    def test_the_error_is_a_lookup_error_not_an_index_error(self) -> None:
        """``log[seq]`` of a dropped record raises LogRecordDropped, a
        QuiesceError and LookupError, and no longer an IndexError."""
        buf = _trimmed()
        with pytest.raises(LogRecordDropped, match=r"^log record 0 was dropped") as info:
            buf.log[0]
        assert isinstance(info.value, QuiesceError) and isinstance(info.value, LookupError)
        assert not isinstance(info.value, IndexError)
        with pytest.raises(IndexError, match=r"^log record index out of range$"):
            buf.log[len(buf.log)]

    def test_index_finds_every_record_that_in_finds(self) -> None:
        """Past retention, ``log.index(rec)`` is the record's seq for every
        record ``in`` finds, and ``count`` is 1."""
        buf = _trimmed()
        log = buf.log
        held = list(log)
        assert [r.seq for r in held] == list(range(log.first, len(log)))
        for rec in held:
            assert rec in log
            assert log.index(rec) == rec.seq
            assert log.count(rec) == 1
        last = held[-1]
        with pytest.raises(ValueError, match=r"is not in the log$"):
            log.index(last, 0, last.seq)  # stop excludes it
        assert log.index(last, -1) == last.seq

    def test_a_dropped_record_is_not_in_the_log(self) -> None:
        """A record seen before the retention dropped it is no longer ``in``
        the log, and ``index`` says so with ValueError."""
        buf = Buffer(log_retention=RETENTION)
        buf.append(reasoning("first"))
        old = buf.log[0]
        for i in range(200):
            buf.append(reasoning(f"e{i}"))
        assert buf.log.first > 0
        assert old not in buf.log and buf.log.count(old) == 0
        with pytest.raises(ValueError, match=r"is not in the log$"):
            buf.log.index(old)

    def test_reversed_and_negative_slices_give_the_records_held(self) -> None:
        """``reversed(log)`` and ``log[::-1]`` give the held records newest
        first; forward slices give the held part of the range."""
        buf = _trimmed()
        log = buf.log
        held = list(log)
        assert list(reversed(log)) == held[::-1]
        assert list(log[::-1]) == held[::-1]
        assert list(log[::-3]) == held[::-1][::3]
        assert log[0:5] == ()
        assert list(log[: log.first + 3]) == held[:3]
        assert list(log[::2]) == [r for r in held if r.seq % 2 == 0]


class TestIterationWhileTrimming:
    def test_iterating_while_a_thread_appends_never_raises(self) -> None:
        """Iteration, ``reversed`` and slices never raise while another thread
        appends (and each append may trim the tail); what they yield is in
        seq order, every record the one at its seq."""
        buf = Buffer(log_retention=RETENTION)
        for i in range(RETENTION * 4):
            buf.append(reasoning(f"seed{i}"))
        stop = threading.Event()
        errors: list[BaseException] = []

        def writer() -> None:
            n = 0
            try:
                while not stop.is_set():
                    buf.append(reasoning(f"w{n}"))
                    n += 1
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        old = sys.getswitchinterval()
        sys.setswitchinterval(1e-6)
        thread = threading.Thread(target=writer)
        thread.start()
        passes = 0
        try:
            while passes < 400:
                seqs = [r.seq for r in buf.log]
                assert seqs == sorted(set(seqs))
                back = [r.seq for r in reversed(buf.log)]
                assert back == sorted(set(back), reverse=True)
                part = [r.seq for r in buf.log[::-1]]
                assert part == sorted(set(part), reverse=True)
                passes += 1
        finally:
            stop.set()
            thread.join()
            sys.setswitchinterval(old)
        assert not errors
        assert buf.log.dropped > 0
        buf._check()
