"""Issue 13's state machines: the model-checked buffer of ``test_stateful``
over both durable logs (``SQLiteLog``, ``JsonlLog``) with checkpoints and
spilled tombstones, and in memory with a small retention.

Every rule of :class:`test_stateful.BufferMachine` (append, mark, prune,
edit, pin, unpin, each predicted exactly by its plain model) runs here too,
on a buffer whose state leaves memory as it would in a long-lived agent:

* durable variants: a real log file in a temp dir, an automatic checkpoint
  every 3-7 records (drawn per run), a durable tail of 4 records (records
  older than that are read back from the file) and tombstones spilled as
  soon as 2 of them are durable (test settings: ``publish.DURABLE_TAIL`` and
  ``tombs.SPILL_LEAST`` are lowered for the run and restored in teardown;
  with the defaults, 32 and 1,024, nothing would leave memory in a short
  run). Extra rules: ``flush()``, ``flush(checkpoint=True)``, reading old
  records (``buf.log[i]``, ``list(buf.log)``), reading tombstones back
  (``buf.tombstones[id]``, ``id in buf.tombstones``), and reopening the file
  (recovery from the newest checkpoint and its tail), either after the
  readers let go or abandoning them as a crash would.
* in-memory variant: no sink, ``log_retention=5``: the log counts every
  record, keeps the newest ones, counts the dropped ones and refuses to read
  them (:class:`LogRecordDropped`).

Invariants, after every step, beyond ``BufferMachine``'s (buffer equals the
model, ``_check()`` passes, pinned snapshots never change): the version
never goes backwards; every tombstone the model knows is there with its
content hash and key, and an id never used is not ("deleted" and "never
existed" stay apart); a log record, once read, reads back the same (from
memory, from the file, after a reopen); a recovered buffer equals the one
before the reopen (version, head, marks, tombstones, staged removals, log
length) and did not skip a checkpoint.
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path
from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis.stateful import initialize, invariant, precondition, rule

import quiesce._core.publish as publish_mod
import quiesce._core.tombs as tombs_mod
from conftest import ListSink
from quiesce import Buffer, Entry, JsonlLog, Kind, SQLiteLog
from quiesce._core.checkpoint import compacted_records
from quiesce._core.errors import LogRecordDropped  # not exported by quiesce
from quiesce._log._format import encode_record
from test_stateful_buffer import BufferMachine, StreamMachine

#: test settings: tombstones spill once 2 are durable, 4 durable records stay in memory
SMALL_SPILL = 2
SMALL_TAIL = 4
RETENTION = 5


class _Warnings(logging.Handler):
    """Collects the warnings of ``quiesce.checkpoint`` (a skipped checkpoint)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _picture(buf: Buffer) -> dict[str, Any]:
    """What a recovery must rebuild, as plain values."""
    head = buf.head()
    return {
        "version": buf.version,
        "entries": list(head.entries()),
        "live": dict(head.live),  # order keys and last change
        "marks": dict(head.marks),
        "tombstones": dict(buf.tombstones),
        "staged": buf.staged(),
        "log": len(buf.log),
    }


class _LogMachine(BufferMachine):
    """Shared by the three variants: version monotonicity, the tombstone
    picture and the records seen (seq -> JSON line)."""

    def __init__(self) -> None:
        super().__init__()
        self.top = 0
        self.forced: list[str] = []  # ids some_ids() hands out first (churn)
        self.seen: dict[int, str] = {}

    def some_ids(self, data: st.DataObject, live_percent: int = 92) -> str:
        if self.forced:
            return self.forced.pop(0)
        return super().some_ids(data, live_percent)

    @rule(data=st.data(), count=st.integers(1, 6), key=st.booleans())
    def churn(self, data: st.DataObject, count: int, key: bool) -> None:
        """A long-lived agent's cycle: fresh tool outputs appended, then
        pruned (through ``prune``'s model), so that tombstones pile up."""
        m = self.model
        ids = []
        for _ in range(count):
            eid = self.new_id()
            e = Entry(eid, Kind.TOOL_OUTPUT, f"output of {eid}", key=f"k-{eid}" if key else None)
            assert self.buf.append(e) == m.version + 1
            m.version += 1
            m.order.append(eid)
            m.entries[eid] = e
            m.changed[eid] = m.version
            ids.append(eid)
        self.forced = ids
        while self.forced:  # each prune takes the next 1-4 of them (its drawn size)
            self.prune(data)

    def remember(self, seq: int, text: str) -> None:
        assert self.seen.setdefault(seq, text) == text, f"log record {seq} changed"

    def release_pins(self) -> None:
        m = self.model
        while m.pins:
            snap, _ = m.pins.pop()
            snap.__exit__(None, None, None)
            m.apply_due()

    @invariant()
    def version_never_goes_back(self) -> None:
        assert self.buf.version >= self.top
        self.top = self.buf.version

    @invariant()
    def tombstones_deleted_and_never_existed(self) -> None:
        tombs = self.buf.tombstones
        m = self.model
        assert len(tombs) == len(m.tombs)
        assert {i: (t.content_hash, t.key, t.kind) for i, t in tombs.items()} == {
            i: (t.entry.content_hash, t.entry.key, t.entry.kind) for i, t in m.tombs.items()
        }
        for never in ("ghost", f"e{self.fresh + 1}"):
            assert never not in tombs
            assert tombs.get(never) is None

    @invariant()
    def log_only_grows(self) -> None:
        """The newest record (in memory) is the one seen before; the log's
        length never shrinks and its last seq is its length - 1."""
        log = self.buf.log
        n = len(log)
        assert n >= max(self.seen, default=-1) + 1
        if n:
            last = log[-1]
            assert last.seq == n - 1
            self.remember(n - 1, encode_record(last))


class _DurableMachine(_LogMachine):
    kind = "sqlite"

    def __init__(self) -> None:
        super().__init__()
        self._old_spill = tombs_mod.SPILL_LEAST
        self._old_tail = publish_mod.DURABLE_TAIL
        tombs_mod.SPILL_LEAST = SMALL_SPILL
        publish_mod.DURABLE_TAIL = SMALL_TAIL
        self._dir = tempfile.TemporaryDirectory()
        self.path = Path(self._dir.name) / f"log.{self.kind}"
        self.every = 5
        self.reopened = 0
        self.warnings = _Warnings()
        logging.getLogger("quiesce.checkpoint").addHandler(self.warnings)

    def open_sink(self) -> SQLiteLog | JsonlLog:
        return SQLiteLog(self.path) if self.kind == "sqlite" else JsonlLog(self.path)

    @initialize(every=st.integers(3, 7))
    def start(self, every: int) -> None:
        self.every = every
        self.buf = Buffer(log=self.open_sink(), checkpoint_every=every)

    # -- durability ------------------------------------------------------------

    @rule()
    def flush(self) -> None:
        self.buf.flush()
        assert self.buf.pending_records == 0

    @rule()
    def checkpoint(self) -> None:
        self.buf.flush(checkpoint=True)
        assert self.buf.pending_records == 0
        last = self.buf.log[-1]
        assert last.op == "checkpoint"
        assert last.version == self.model.version or last.version is None

    def _reopen(self) -> None:
        old = self.buf
        old.flush()
        before = _picture(old)
        old.sink.close()  # type: ignore[union-attr]
        sink = self.open_sink()
        try:
            _total, checkpoints = sink.checkpoints()
            self.warnings.messages.clear()
            new = Buffer(log=sink, checkpoint_every=self.every)
            assert self.warnings.messages == [], self.warnings.messages  # none skipped
            if checkpoints:
                # recovered from the newest checkpoint: nothing before it was replayed
                assert new._st.records.first >= checkpoints[-1]
            new._check()
            event(f"reopened from checkpoint: {bool(checkpoints)}")
            assert _picture(new) == before
        except BaseException:
            # closed now: a log left to the garbage collector can deadlock the
            # next open (tests/log/test_log_gc_deadlock.py)
            sink.close()
            raise
        self.buf = new
        self.reopened += 1

    @rule()
    def reopen(self) -> None:
        """Readers let go, then the process restarts from the log file."""
        self.release_pins()
        self._reopen()

    @precondition(lambda self: bool(self.model.pins))
    @rule()
    def reopen_abandoning_readers(self) -> None:
        """A restart with readers pinned (as after a crash): the staged
        removals come back staged; with no reader left they are all due."""
        self.model.pins.clear()  # the old buffer and its snapshots are dropped
        self._reopen()
        if self.buf.staged():
            event("reopened with removals staged")
        self.buf.apply_due()
        self.model.apply_due()

    # -- reading old records and tombstones back -------------------------------

    @rule(i=st.integers(0, 10**6))
    def read_one(self, i: int) -> None:
        log = self.buf.log
        if not len(log):
            return
        seq = i % len(log)
        rec = log[seq]
        assert rec.seq == seq
        self.remember(seq, encode_record(rec))

    @rule()
    def read_all(self) -> None:
        records = list(self.buf.log)
        assert [r.seq for r in records] == list(range(len(records)))
        for r in records:
            self.remember(r.seq, encode_record(r))

    @precondition(lambda self: bool(self.model.tombs))
    @rule(data=st.data())
    def read_tombstone(self, data: st.DataObject) -> None:
        m = self.model
        tid = data.draw(st.sampled_from(sorted(m.tombs)))
        tombs = self.buf.tombstones
        assert tid in tombs
        store = self.buf.head().tombs._store
        if store is not None and store.find_id(tid, store.n) < store._cols.base:
            event("a spilled tombstone read back")
        t = tombs[tid]
        want = m.tombs[tid]
        assert (t.id, t.content_hash, t.key, t.kind, t.reason, t.version) == (
            tid,
            want.entry.content_hash,
            want.entry.key,
            want.entry.kind,
            want.reason,
            want.version,
        )
        assert tombs.get(tid) == t

    @invariant()
    def durable_log_is_whole(self) -> None:
        log = self.buf.log
        assert log.dropped == 0 and log.first == 0
        assert log.in_memory <= self.buf.pending_records + SMALL_TAIL + 2 * 16 + 1
        # what this run reached (--hypothesis-show-statistics)
        store = self.buf.head().tombs._store
        if store is not None and store.held < store.n:
            event("tombstones spilled")
        if log.in_memory < len(log):
            event("records read back from the file")
        if any(r.op == "checkpoint" for r in self.buf.log[max(0, len(log) - 8) :]):
            event("a checkpoint among the last 8 records")

    def teardown(self) -> None:
        try:
            if self.reopened < 2:
                self.release_pins()
                self._reopen()  # every run ends with a recovery
            super().teardown()  # the full-replay and checkpoint round trips
            self.buf.sink.close()  # type: ignore[union-attr]
        finally:
            logging.getLogger("quiesce.checkpoint").removeHandler(self.warnings)
            tombs_mod.SPILL_LEAST = self._old_spill
            publish_mod.DURABLE_TAIL = self._old_tail
            self._dir.cleanup()


class _JsonlMachine(_DurableMachine):
    kind = "jsonl"


class _RetentionMachine(_LogMachine):
    """No sink, the newest ``RETENTION`` records kept (a trim drops once 16
    more have come)."""

    def __init__(self) -> None:
        super().__init__()
        self.buf = Buffer(log_retention=RETENTION)
        self.dropped = 0

    @rule(i=st.integers(0, 10**6))
    def read_one(self, i: int) -> None:
        log = self.buf.log
        if not len(log):
            return
        seq = i % len(log)
        if seq < log.first:
            with pytest.raises(LogRecordDropped):
                log[seq]
            return
        rec = log[seq]
        assert rec.seq == seq
        self.remember(seq, encode_record(rec))

    @rule()
    def read_all(self) -> None:
        log = self.buf.log
        records = list(log)
        assert [r.seq for r in records] == list(range(log.first, len(log)))
        for r in records:
            self.remember(r.seq, encode_record(r))

    @rule()
    def flush(self) -> None:
        self.buf.flush(checkpoint=True)  # no sink: trims, writes no checkpoint
        assert all(r.op != "checkpoint" for r in self.buf.log)

    @invariant()
    def retention_counts_every_record(self) -> None:
        log = self.buf.log
        n = len(log)
        assert log.dropped == log.first == n - log.in_memory
        assert log.dropped >= self.dropped  # only grows
        self.dropped = log.dropped
        assert log.in_memory <= 2 * max(RETENTION, 16) + RETENTION
        if log.dropped:
            event("records dropped")
            assert log.in_memory >= RETENTION
            with pytest.raises(LogRecordDropped):
                log[log.first - 1]
            with pytest.raises(LogRecordDropped):
                log[0]
        assert self.buf.stats().log_records == n

    def teardown(self) -> None:
        # The log no longer holds history: a compacted copy (one checkpoint
        # of the current state) rebuilds the same buffer.
        buf = self.buf
        with buf._st.write_lock:
            records = compacted_records(buf, "memory", 0.0)
        again = Buffer(log=ListSink(records))
        again._check()
        want, got = _picture(buf), _picture(again)
        assert got.pop("log") == 1
        want.pop("log")
        assert got == want
        self.release_pins()
        buf._check(expect_no_pins=True)
        assert buf.staged() == {}


def _settings(examples: int) -> settings:
    return settings(
        max_examples=examples,
        stateful_step_count=50,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


# The default run draws a dozen or two machines each (the durable ones, each
# step a real commit, fifteen); the soaks (``-m slow``) draw 250 of the same
# machines.
TestSQLiteLogMachine = _DurableMachine.TestCase
TestSQLiteLogMachine.settings = _settings(15)
TestJsonlLogMachine = _JsonlMachine.TestCase
TestJsonlLogMachine.settings = _settings(15)
TestRetentionMachine = _RetentionMachine.TestCase
TestRetentionMachine.settings = _settings(25)


@pytest.mark.slow
class TestSQLiteLogMachineSoak(_DurableMachine.TestCase):  # type: ignore[misc,valid-type]
    settings = _settings(250)


@pytest.mark.slow
class TestJsonlLogMachineSoak(_JsonlMachine.TestCase):  # type: ignore[misc,valid-type]
    settings = _settings(250)


@pytest.mark.slow
class TestRetentionMachineSoak(_RetentionMachine.TestCase):  # type: ignore[misc,valid-type]
    settings = _settings(250)


# ---------------------------------------------------------------------------
# Open entries over a durable log (issue 24)


class _StreamLogMachine(StreamMachine):
    """:class:`test_stateful.StreamMachine` over a real SQLite or JSONL file
    with a checkpoint every few records. Extra rules: ``flush()`` (the model
    notes each open stream's text as logged), ``flush(checkpoint=True)``,
    and a reopen (after a flush, and sometimes more text no flush logs):
    finished streams come back as they were, each open one as its logged
    prefix, aborted and marked (unless marked before), and the recovered
    log passes ``verify()``."""

    suffix = "db"

    def make_buffer(self) -> Buffer:
        self.tmp = tempfile.TemporaryDirectory()
        self.path = Path(self.tmp.name) / f"log.{self.suffix}"
        self.logged: dict[str, str] = {}
        return Buffer(log=self.open_sink(), checkpoint_every=5)

    def open_sink(self) -> SQLiteLog | JsonlLog:
        return SQLiteLog(self.path) if self.suffix == "db" else JsonlLog(self.path)

    @rule()
    def flush(self) -> None:
        self.buf.flush()
        self.logged = {i: self.texts[i] for i in self.open}

    @rule()
    def checkpoint(self) -> None:
        self.buf.flush(checkpoint=True)
        self.logged = {i: self.texts[i] for i in self.open}

    @rule(crash=st.booleans())
    def reopen(self, crash: bool) -> None:
        """Reopen the file; with ``crash``, the open streams first get text
        that no flush logs (lost, as a crash loses it)."""
        for snap, _, _ in self.pins:
            snap.__exit__(None, None, None)
        self.pins.clear()
        self.flush()
        if crash:
            for w in self.open.values():
                w.write("lost")
        sink = self.buf.sink
        assert sink is not None
        sink.close()  # type: ignore[attr-defined]
        self.buf = Buffer(log=self.open_sink(), checkpoint_every=5)
        for i in list(self.open):
            self.texts[i] = self.logged[i]
            self.marks.setdefault(
                i,
                "stream interrupted: the log ends before its close "
                f"(recovered its durable prefix of {len(self.texts[i])} characters)",
            )
            del self.open[i]  # its writer wrote into the buffer before the reopen
        self.version = self.buf.version
        self.logged = {}
        self.buf.flush()
        assert self.buf.verify() >= 0

    def teardown(self) -> None:
        super().teardown()
        sink = self.buf.sink
        if sink is not None:
            sink.close()  # type: ignore[attr-defined]
        self.tmp.cleanup()


class _StreamJsonlMachine(_StreamLogMachine):
    suffix = "jsonl"


_StreamLogMachine.TestCase.settings = _settings(15)
_StreamJsonlMachine.TestCase.settings = _settings(15)
TestStreamSQLiteLogMachine = _StreamLogMachine.TestCase
TestStreamJsonlLogMachine = _StreamJsonlMachine.TestCase
