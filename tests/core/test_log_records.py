"""Deferred log records: ``mark_stale`` and ``append`` store a compact record
and the LogRecord is built when first read. Every reader of the log — the
view, a flush to a sink, recovery — sees exactly the record an eager build
would have made, built once."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest

from conftest import ListSink
from quiesce import Buffer, Entry, Kind, LogRecord, Override
from quiesce._core.log import Records, mark_record, materialize


def make() -> Buffer:
    buf = Buffer()
    buf.append(Entry("a", Kind.REASONING, "first", turn=1, key="k-a", meta={"tool": "x"}))
    buf.append(Entry("b", Kind.TOOL_OUTPUT, "second", ("a",)))
    buf.mark_stale("a", "superseded", turn=3)
    return buf


class TestDeferredRecords:
    def test_the_fast_paths_store_compact_records(self) -> None:
        buf = make()
        assert [type(r) for r in buf._st.records] == [tuple, tuple, tuple]

    def test_the_view_builds_full_records_with_every_field(self) -> None:
        before = time.time()
        buf = make()
        a, b, m = buf.log
        assert all(type(r) is LogRecord for r in (a, b, m))
        assert (a.seq, a.op, a.version, a.ids, a.actor, a.reason, a.turn, a.outcome) == (
            0, "append", 1, ("a",), None, None, 1, "applied",
        )
        assert a.detail == {
            "entry": {
                "id": "a", "kind": "reasoning", "body": "first", "refs": [], "turn": 1,
                "key": "k-a", "meta": {"tool": "x"},
            },
            "key": 0.0,
        }
        assert b.detail["entry"]["refs"] == ["a"] and b.detail["key"] == 1.0
        assert (m.seq, m.op, m.version, m.ids, m.reason, m.turn, m.outcome) == (
            2, "mark", 3, ("a",), "superseded", 3, "applied",
        )
        assert dict(m.detail) == {}
        # the time is the time of the change, not of the read
        assert before <= a.time <= b.time <= m.time <= time.time()
        json.dumps([r.to_dict() for r in buf.log])  # JSON-ready

    def test_a_record_is_built_once_and_stored_back(self) -> None:
        buf = make()
        first = buf.log[1]
        assert buf.log[1] is first
        assert buf._st.records[1] is first
        assert type(buf._st.records[0]) is tuple  # untouched records stay compact

    def test_indexing_slicing_and_iteration_agree(self) -> None:
        buf = make()
        whole = list(buf.log)
        assert buf.log[-1] == whole[-1] == materialize(buf._st.records, 2)
        assert buf.log[-3] == whole[0]
        assert buf.log[1:] == tuple(whole[1:])
        assert buf.log[::2] == (whole[0], whole[2])
        assert buf.log.for_id("b") == (whole[1],)
        assert [r.seq for r in whole] == [0, 1, 2]
        for bad in (3, -4):
            with pytest.raises(IndexError):
                buf.log[bad]

    def test_a_negative_index_names_one_record_while_the_log_grows(self) -> None:
        """``log[-1]`` is resolved against the length before it is read, so a
        record built for it carries its own position even if appends land
        meanwhile (the list is shared with writers in other threads)."""
        buf = make()
        records = buf._st.records

        class Growing(Records):
            def __getitem__(self, i: Any) -> Any:
                if not grown:
                    grown.append(True)
                    buf.append(Entry("late", Kind.REASONING, "appended meanwhile"))
                return list.__getitem__(self, i)

        grown: list[bool] = []
        growing = Growing()
        growing.extend(records)
        buf._st.records = growing
        rec = materialize(buf._st.records, -1)
        assert grown and rec.seq == 2 and rec.op == "mark"
        assert [materialize(buf._st.records, i).seq for i in range(4)] == [0, 1, 2, 3]

    def test_two_threads_reading_a_record_at_once_get_the_same_object(self) -> None:
        """A log record, once seen, is never replaced, not even by an equal
        one: while one thread builds a compact record, another reading it
        waits and gets that thread's object (the history checker compares
        log records by identity)."""
        buf = make()
        records = buf._st.records
        compact = records[2]  # a mark: (id, reason, turn, version, time)
        other: list[LogRecord] = []
        started = threading.Event()

        def slow_build(seq: int) -> LogRecord:
            reader = threading.Thread(
                target=lambda: (started.set(), other.append(materialize(records, 2)))
            )
            reader.start()
            started.wait(10)
            time.sleep(0.05)  # the other reader is now at the record, mid-build
            built = mark_record(seq, *compact)
            slow_build.reader = reader  # type: ignore[attr-defined]
            return built

        records[2] = (slow_build,)
        mine = materialize(records, 2)
        slow_build.reader.join(10)  # type: ignore[attr-defined]
        assert other == [mine] and other[0] is mine
        assert buf.log[2] is mine

    def test_an_override_is_recorded_at_once(self) -> None:
        buf = make()
        buf.prune(["b"], reason="noise")
        again = Entry("b2", Kind.TOOL_OUTPUT, "second")
        buf.append(again, override=Override("the user asked again", turn=4))
        rec = buf.log[-1]
        assert type(buf._st.records[-1]) is LogRecord
        assert (rec.op, rec.reason, rec.outcome) == ("append", "the user asked again", "overridden")
        assert rec.detail["override"] == {"reason": "the user asked again", "turn": 4}
        assert rec.detail["entry"]["id"] == "b2"
        assert buf.stats().readmissions_overridden == 1

    def test_a_flush_hands_the_sink_full_records_and_recovery_matches(self) -> None:
        sink = ListSink()
        buf = Buffer(sink)
        buf.append(Entry("a", Kind.REASONING, "first"))
        buf.mark_stale("a", "old")
        buf.flush()
        assert [type(r) for r in sink.records] == [LogRecord, LogRecord]
        assert list(buf.log) == sink.records
        again = Buffer(ListSink(sink.records))
        assert list(again.log) == list(buf.log)
        assert again.head().marks["a"] == buf.head().marks["a"]
        again._check(expect_no_pins=True)
