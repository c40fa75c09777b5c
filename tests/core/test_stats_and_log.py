"""``Buffer.stats()`` and the append-only edit log (seed 002: provenance separation)."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable

import pytest

from conftest import entry, fill, reasoning
from quiesce import (
    Buffer,
    EditLog,
    EditPlan,
    EscalationKind,
    Kind,
    LogRecord,
    Override,
    Policy,
    Prune,
    ReaderInfo,
    ReadmissionRefused,
    Refusal,
    Rewrite,
    Stats,
)
from quiesce._core.pins import reader_of


class FakeClock:
    """A clock the test advances by hand (no timed assertions)."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class TestStats:
    def test_fresh_buffer(self, buf: Buffer) -> None:
        """An empty buffer reports version 0 and nothing pinned, marked or removed."""
        s = buf.stats()
        assert isinstance(s, Stats)
        assert (s.version, s.entries, s.pinned, s.readers, s.oldest_pin_age) == (0, 0, 0, (), None)
        assert (s.deferred, s.marks, s.tombstones, s.escalations) == (0, 0, 0, 0)
        assert dict(s.refusals) == {}
        assert s.tombstone_to_edit_ratio == 1.0
        assert (s.readmissions_refused, s.readmissions_overridden) == (0, 0)
        assert s.retained_versions == 1

    def test_stats_are_frozen(self, buf: Buffer) -> None:
        """Stats cannot be changed, nor its refusal counts."""
        fill(buf, entry("n", Kind.NEGATIVE))
        buf.prune(["n"], reason="x")
        s = buf.stats()
        with pytest.raises(dataclasses.FrozenInstanceError):
            s.version = 5  # type: ignore[misc]
        with pytest.raises(TypeError):
            s.refusals[Refusal.PROTECTED] = 0  # type: ignore[index]
        buf.prune(["n"], reason="x")
        assert s.refusals[Refusal.PROTECTED] == 1  # a picture, not a live view

    def test_a_pin_time_is_the_first_pass_after_the_pin(self) -> None:
        """A pin reads no clock: the first pass (stats() or an alarm pass)
        after it stamps it, so an age is a lower bound, never more than the
        truth; readers pinned between two passes share the later one's
        stamp, and a pass stamps only readers pinned before it."""
        clock = FakeClock()
        buf = Buffer(clock=clock)
        fill(buf, reasoning("a"))
        with buf.snapshot() as s1:
            clock.now += 5.0  # no pass yet: s1's pin time is not known
            assert reader_of(s1)[2] is None
            assert [r.age for r in buf.stats().readers] == [0.0]  # stamped now
            assert reader_of(s1)[2] == clock.now
            with buf.snapshot() as s2, buf.snapshot() as s3:
                clock.now += 3.0
                ages = sorted(r.age for r in buf.stats().readers)
                assert ages == [0.0, 0.0, 3.0]  # s2 and s3 stamped now
                stamped = clock.now
                clock.now += 1.0
                assert sorted(r.age for r in buf.stats().readers) == [1.0, 1.0, 4.0]
                assert reader_of(s2)[2] == reader_of(s3)[2] == stamped
            assert buf.stats().oldest_pin_age == 4.0

    def test_a_staged_removal_dates_the_readers_that_hold_it_back(self) -> None:
        """Staging a removal stamps the readers pinned before it, as a pass
        does: with no pass between the pin and the prune, the reader's age
        still counts from the staging, so the alarm sees it stuck (a fake
        clock that jumps once, as the otel and page tests use, must not
        hide a stuck reader); a reader pinned after the staging is not
        dated by it."""
        clock = FakeClock()
        buf = Buffer(clock=clock)
        fill(buf, reasoning("a"), reasoning("b"))
        with buf.snapshot() as held:
            assert reader_of(held)[2] is None
            report = buf.prune(["a"], reason="stale")
            assert report["a"].status.value == "deferred"
            assert reader_of(held)[2] == clock.now  # stamped by the staging
            clock.now += 2.0
            with buf.snapshot() as later:
                assert sorted(r.age for r in buf.stats().readers) == [0.0, 2.0]
                assert reader_of(later)[2] == clock.now  # the pass dated it, not the staging
        buf._check(expect_no_pins=True)

    def test_readers_are_named_with_age_and_version(self) -> None:
        """Each pinned reader is reported with its task (thread) name, pinned
        version and age on the buffer's clock; the oldest pin is reported."""
        clock = FakeClock()
        buf = Buffer(clock=clock)
        fill(buf, reasoning("a"))
        with buf.snapshot() as s1:
            buf.stats()  # a pass stamps the pin time (lazily: see quiesce._core.pins)
            clock.now += 5.0
            buf.append(reasoning("b"))
            with buf.snapshot() as s2:
                buf.stats()
                clock.now += 2.0
                st = buf.stats()
                name = threading.current_thread().name
                assert sorted(st.readers) == sorted(
                    [ReaderInfo(name, s1.version, 7.0), ReaderInfo(name, s2.version, 2.0)]
                )
                assert st.pinned == 2
                assert st.oldest_pin_age == 7.0
                assert st.oldest_pin_version == s1.version
                assert st.retained_versions == 2
        assert buf.stats().pinned == 0
        buf._check(expect_no_pins=True)

    def test_counts_follow_the_operations(self, buf: Buffer) -> None:
        """marks, deferred, tombstones, refusals by reason, escalations and
        re-admission counters count what happened."""
        fill(
            buf,
            reasoning("a"),
            reasoning("b"),
            reasoning("c"),
            entry("n", Kind.NEGATIVE, "X failed"),
            entry("k", Kind.CONSTRAINT),
            entry("t", Kind.TOOL_OUTPUT, "dump"),
        )
        buf.mark_stale("a", "old")
        buf.prune(["t"], reason="noise")
        with pytest.raises(ReadmissionRefused):
            buf.append(entry("t2", Kind.TOOL_OUTPUT, "dump"))
        buf.append(entry("t3", Kind.TOOL_OUTPUT, "dump"), override=Override("needed", 3))
        with buf.snapshot():
            buf.prune(["b", "n", "k", "zz"], reason="stale")
            buf.edit(EditPlan([Rewrite("k", "paraphrase")], reason="x"))
            s = buf.stats()
            assert s.marks == 3  # a, b (deferred), n (refused, marked)
            assert s.deferred == 1
            assert s.tombstones == 1
            assert dict(s.refusals) == {
                Refusal.READMISSION: 1,
                Refusal.PROTECTED: 1,
                Refusal.IMMUTABLE: 2,
                Refusal.UNKNOWN: 1,
            }
            assert s.escalations == 1
            assert (s.readmissions_refused, s.readmissions_overridden) == (1, 1)
        s = buf.stats()
        assert (s.deferred, s.tombstones, s.marks) == (0, 2, 2)
        assert s.tombstone_to_edit_ratio == 1.0
        assert s.version == buf.version
        assert s.entries == len(buf)

    def test_backlog_over_its_bound_escalates(self) -> None:
        """Staged removals beyond policy.max_backlog raise one BACKLOG escalation
        (seed 000: the residual failure must be visible), logged and counted."""
        buf = Buffer(policy=Policy(max_backlog=1))
        fill(buf, reasoning("a"), reasoning("b"), reasoning("c"))
        with buf.snapshot():
            buf.prune(["a"], reason="x")
            assert buf.drain_escalations() == []
            buf.prune(["b"], reason="x")
            buf.prune(["c"], reason="x")
            escs = buf.drain_escalations()
            assert [e.kind for e in escs] == [EscalationKind.BACKLOG]
            assert escs[0].data["deferred"] == 2
            assert [r.outcome for r in buf.log if r.op == "escalate"] == ["backlog"]
            assert buf.stats().escalations == 1
        buf._check(expect_no_pins=True)


class TestEscalations:
    def test_refused_edits_queue_until_drained(self, buf: Buffer) -> None:
        """Without a runtime, escalations queue in order and drain once."""
        fill(buf, entry("c", Kind.CONSTRAINT))
        r1 = buf.edit(EditPlan([Prune("c")], reason="one"))
        r2 = buf.edit(EditPlan([Rewrite("c", "x")], reason="two"))
        assert buf.drain_escalations() == [r1.escalation, r2.escalation]
        assert buf.drain_escalations() == []
        assert buf.stats().escalations == 2

    def test_overflow_is_counted_not_silent(self) -> None:
        """Past escalation_capacity the oldest undrained escalation is dropped,
        and stats() counts the drop; the log keeps every refusal."""
        buf = Buffer(escalation_capacity=2)
        fill(buf, entry("c", Kind.CONSTRAINT))
        reports = [buf.edit(EditPlan([Prune("c")], reason=f"r{i}")) for i in range(3)]
        assert buf.drain_escalations() == [r.escalation for r in reports[1:]]
        s = buf.stats()
        assert (s.escalations, s.escalations_dropped) == (3, 1)
        assert sum(1 for r in buf.log if r.op == "edit" and r.outcome == "refused") == 3
        buf._check(expect_no_pins=True)


class TestLogIsAppendOnly:
    def test_no_delete_api(self, buf: Buffer) -> None:
        """The log view has no method that removes or replaces a record, and
        the buffer's log attribute cannot be replaced."""
        fill(buf, reasoning("a"))
        log = buf.log
        assert isinstance(log, EditLog)
        for name in ("__delitem__", "__setitem__", "pop", "clear", "remove", "insert", "append"):
            assert not hasattr(log, name), name
        with pytest.raises(TypeError):
            del log[0]  # type: ignore[attr-defined]
        with pytest.raises(TypeError):
            log[0] = log[0]  # type: ignore[index]
        with pytest.raises(AttributeError):
            buf.log = EditLog([])  # type: ignore[misc]
        sliced = log[:]
        assert isinstance(sliced, tuple)
        assert len(buf.log) == 1

    def test_tombstones_are_read_only(self, buf: Buffer) -> None:
        """buf.tombstones and snap.tombstones cannot be written or deleted from."""
        fill(buf, reasoning("a"))
        buf.prune(["a"], reason="x")
        with pytest.raises(TypeError):
            buf.tombstones["a"] = buf.tombstones["a"]  # type: ignore[index]
        with pytest.raises(TypeError):
            del buf.tombstones["a"]  # type: ignore[attr-defined]
        with buf.snapshot() as snap, pytest.raises(TypeError):
            del snap.tombstones["a"]  # type: ignore[attr-defined]
        with pytest.raises(AttributeError):
            buf.tombstones = {}  # type: ignore[misc]
        assert "a" in buf.tombstones

    def test_log_grows_monotonically(self, buf: Buffer) -> None:
        """After every operation (applied or refused) the old log is a prefix of
        the new one; records are numbered by position."""
        ops: list[Callable[[], object]] = [
            lambda: buf.append(reasoning("a")),
            lambda: buf.append(reasoning("b", "a")),
            lambda: buf.append(entry("n", Kind.NEGATIVE)),
            lambda: buf.mark_stale("a", "old"),
            lambda: buf.prune(["a"], reason="x"),
            lambda: buf.prune(["n"], reason="x"),
            lambda: buf.edit(EditPlan([Prune("n")], reason="x")),
            lambda: buf.prune(["b"], reason="x"),
            lambda: buf.prune(["a"], reason="x"),
        ]
        seen: tuple[LogRecord, ...] = ()
        for op in ops:
            op()
            now = tuple(buf.log)
            assert now[: len(seen)] == seen
            assert len(now) > len(seen)
            seen = now
        assert [r.seq for r in buf.log] == list(range(len(buf.log)))

    def test_every_removal_has_one_tombstone_and_one_record(self, buf: Buffer) -> None:
        """Each removed id appears in exactly one 'remove' record's tombstones,
        equal to its tombstone in the buffer; removed ids and tombstones match."""
        fill(buf, *(reasoning(f"e{i}") for i in range(6)))
        buf.prune(["e0", "e1"], reason="x")
        with buf.snapshot():
            buf.prune(["e2"], reason="y")
            buf.edit(EditPlan([Prune("e3")], reason="z"))
        buf.edit(EditPlan([Prune("e4")], reason="w"))
        per_id: dict[str, int] = {}
        for rec in buf.log:
            if rec.op == "remove":
                assert rec.version is not None
                for t in rec.detail["tombstones"]:
                    per_id[t["id"]] = per_id.get(t["id"], 0) + 1
                    tomb = buf.tombstones[t["id"]]
                    assert (t["content_hash"], t["version"]) == (tomb.content_hash, rec.version)
        assert per_id == dict.fromkeys(["e0", "e1", "e2", "e3", "e4"], 1)
        assert set(buf.tombstones) == set(per_id)

    def test_refusals_are_logged(self, buf: Buffer) -> None:
        """A refused prune and a refused edit each leave a record naming the ids."""
        fill(buf, entry("n", Kind.NEGATIVE))
        buf.prune(["n"], reason="x")
        assert buf.log[-1].op == "prune"
        assert buf.log[-1].detail["refusals"] == ["protected"]
        buf.edit(EditPlan([Prune("n")], reason="x"))
        assert (buf.log[-1].op, buf.log[-1].outcome) == ("edit", "refused")
        assert [r.op for r in buf.log.for_id("n")] == ["append", "prune", "edit"]
