"""Issue 13, long-lived agents: the sinks' read-back API (``read_range``), the
bounded in-memory log tail (``Records``) and ``EditLog`` reading old records
from the sink; a missing or damaged record raises ``LogFormatError``, never
returns another record. Real SQLite and JSONL files throughout."""

from __future__ import annotations

import contextlib
import sqlite3
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from _workload import Workload, state
from quiesce import (
    Buffer,
    EditLog,
    Entry,
    InvalidArgument,
    InvalidType,
    JsonlLog,
    Kind,
    LogFormatError,
    LogRecord,
    Policy,
    Refusal,
    SQLiteLog,
    Status,
    default_negative_classifier,
)
from quiesce._core.errors import LogRecordDropped, QuiesceError
from quiesce._core.log import ReadableSink, Records, check_read, materialize, materialize_range
from quiesce._log._format import encode_record

Sink = SQLiteLog | JsonlLog


def _open(kind: str, path: Path) -> Sink:
    return SQLiteLog(path) if kind == "sqlite" else JsonlLog(path)


def _churn(buf: Buffer, rounds: int, batch: int = 7, start: int = 0) -> int:
    """Rounds of appends, marks and a prune, flushing after each round (so
    the sink gets many batches). Returns the next entry number."""
    i = start
    for _ in range(rounds):
        ids = []
        for _ in range(batch):
            e = Entry(f"e{i}", Kind.REASONING, f"reasoning step {i}")
            buf.append(e)
            ids.append(e.id)
            i += 1
        for eid in ids[:3]:
            buf.mark_stale(eid, "superseded")
        buf.prune(ids[:2], reason="old")
        buf.flush()
    return i


@pytest.fixture(params=["sqlite", "jsonl"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _records(kind: str, tmp_path: Path, rounds: int = 30) -> tuple[Path, list[LogRecord]]:
    path = tmp_path / f"log.{kind}"
    buf = Buffer(log=_open(kind, path))
    _churn(buf, rounds)
    records = list(buf.log)
    buf.sink.close()  # type: ignore[union-attr]
    return path, records


def test_read_range_matches_load(kind: str, tmp_path: Path) -> None:
    path, records = _records(kind, tmp_path)
    assert len(records) > 200
    with _open(kind, path) as sink:
        assert isinstance(sink, ReadableSink)
        for start, stop in [(0, 1), (0, len(records)), (63, 65), (64, 128), (100, 101), (5, 5)]:
            got = sink.read_range(start, stop)
            assert [r.to_dict() for r in got] == [r.to_dict() for r in records[start:stop]]
        (last,) = sink.read_range(len(records) - 1, len(records))
        assert last.seq == len(records) - 1


def test_read_range_past_the_end_raises(kind: str, tmp_path: Path) -> None:
    path, records = _records(kind, tmp_path, rounds=3)
    with _open(kind, path) as sink, pytest.raises(LogFormatError, match="missing"):
        sink.read_range(len(records) - 1, len(records) + 1)


def test_read_range_sees_records_written_after_the_index(kind: str, tmp_path: Path) -> None:
    """The JSONL offset index is built on first use and extended as the log
    grows; SQLite reads by its primary key."""
    path = tmp_path / f"grow.{kind}"
    sink = _open(kind, path)
    buf = Buffer(log=sink)
    nxt = _churn(buf, 5)
    assert sink.read_range(0, 3)[0].seq == 0  # builds the JSONL index
    _churn(buf, 20, start=nxt)
    total = len(buf.log)
    got = sink.read_range(0, total)
    assert [r.seq for r in got] == list(range(total))
    assert [r.to_dict() for r in got] == [r.to_dict() for r in buf.log]
    sink.close()


def test_jsonl_damaged_record_raises_never_another(tmp_path: Path) -> None:
    """A record line changed on disk after opening (its seq altered, same
    length): reading it back raises, it is never returned as another."""
    path, _ = _records("jsonl", tmp_path, rounds=10)
    with JsonlLog(path) as sink:
        sink.read_range(0, 1)  # index built from the intact file
        data = path.read_bytes()
        needle = b'"seq":40,'
        at = data.index(needle)
        path.write_bytes(data[:at] + b'"seq":41,' + data[at + len(needle) :])
        with pytest.raises(LogFormatError, match="returned 41 where record 40 was due"):
            sink.read_range(40, 41)
        assert sink.read_range(39, 40)[0].seq == 39  # the record before is intact
        # lines cut out: every later read is refused, not shifted
        lines = path.read_bytes().split(b"\n")
        del lines[45]
        path.write_bytes(b"\n".join(lines))
        with pytest.raises(LogFormatError):
            sink.read_range(50, 60)


def test_sqlite_missing_record_raises(tmp_path: Path) -> None:
    """A row deleted behind the log's back (its triggers dropped first):
    reading the range raises LogFormatError naming the gap."""
    path, _ = _records("sqlite", tmp_path, rounds=10)
    conn = sqlite3.connect(path)
    conn.execute("DROP TRIGGER quiesce_log_no_delete")
    conn.execute("DELETE FROM quiesce_log WHERE seq = 20")
    conn.commit()
    conn.close()
    with SQLiteLog(path) as sink:
        assert [r.seq for r in sink.read_range(10, 20)] == list(range(10, 20))
        with pytest.raises(LogFormatError, match=r"gone missing|a gap or a repeat"):
            sink.read_range(15, 25)


def test_check_read_refuses_wrong_records(tmp_path: Path) -> None:
    _, records = _records("sqlite", tmp_path, rounds=3)
    assert check_read(records[3:6], 3, 6) == records[3:6]
    with pytest.raises(LogFormatError, match="record 4 was due"):
        check_read([records[3], records[5], records[5]], 3, 6)
    with pytest.raises(LogFormatError, match="returned 2 record"):
        check_read(records[3:5], 3, 6)


# -- Records: the in-memory tail ------------------------------------------------


def _tail_of(
    records: list[LogRecord], reader: Callable[[int, int], list[LogRecord]] | None
) -> Records:
    tail = Records()
    tail.reader = reader
    tail.extend(records)
    return tail


def test_records_trim_reads_old_ones_from_the_sink(kind: str, tmp_path: Path) -> None:
    path, records = _records(kind, tmp_path)
    with _open(kind, path) as sink:
        tail = _tail_of(records, sink.read_range)
        total = len(records)
        assert len(tail) == total
        assert tail.trim(durable=total, keep=64) == total - 64
        assert len(tail) == total and tail.first == total - 64 and tail.held() == 64
        assert tail.dropped == 0
        view = EditLog(tail)
        assert [r.to_dict() for r in view] == [r.to_dict() for r in records]
        assert view[3].to_dict() == records[3].to_dict()
        assert view[-1] is records[-1]  # still in memory: the same object
        assert view.first == 0 and view.in_memory == 64 and view.dropped == 0
        assert [r.seq for r in view[10:20]] == list(range(10, 20))
        assert [r.seq for r in materialize_range(tail, total - 70, total)] == list(
            range(total - 70, total)
        )
        assert materialize(tail, 0).seq == 0


def test_records_trim_is_amortized_and_keeps_what_is_not_durable(tmp_path: Path) -> None:
    _, records = _records("sqlite", tmp_path, rounds=10)
    tail = _tail_of(records, lambda a, b: records[a:b])
    total = len(records)
    assert tail.trim(durable=50, keep=1000) == 0  # fewer than `keep` would go
    assert tail.trim(durable=total - 10, keep=5) == total - 10  # never past durable
    assert tail.first == total - 10


def test_records_without_a_sink_count_what_they_drop(tmp_path: Path) -> None:
    _, records = _records("sqlite", tmp_path, rounds=10)
    tail = _tail_of(records, None)
    total = len(records)
    dropped = tail.trim(durable=total, keep=64)
    assert dropped == total - 64 == tail.dropped
    view = EditLog(tail)
    assert view.first == total - 64 and view.dropped == dropped
    assert [r.seq for r in view] == list(range(total - 64, total))  # what it still holds
    assert "dropped" in repr(view)
    with pytest.raises(LogRecordDropped, match="dropped from memory") as info:
        view[0]
    assert isinstance(info.value, QuiesceError) and isinstance(info.value, LookupError)
    assert view[0:5] == ()  # a slice gives what is still held


def test_records_builds_compact_records_with_their_absolute_seq(tmp_path: Path) -> None:
    """A compact record in the tail is built with its absolute seq, after a trim."""
    _, records = _records("sqlite", tmp_path, rounds=10)
    tail = _tail_of(records, lambda a, b: records[a:b])
    total = len(records)
    assert tail.trim(durable=total, keep=0) == total
    assert tail.held() == 0
    rec = records[-1]
    tail.append((lambda seq, r: r._replace(seq=seq), rec))
    built = materialize(tail, total)
    assert built.seq == total and materialize(tail, total) is built
    with pytest.raises(IndexError):
        materialize(tail, total + 1)


# -- classification: once per entry, a few ns per byte ---------------------------

_WORDS = [
    "do not",
    "DO  NOT",
    "don't",
    "Don’t",
    "failed",
    "FAILED",
    "avoidance",
    "unsafe",
    "timed out",
    "Timed\tOut",
    "never",
    "nevertheless",
    "knot",
    "donut",
    "unſafe",
    "ok",
]


@given(st.lists(st.one_of(st.sampled_from(_WORDS), st.text(max_size=12)), max_size=8))
def test_default_classifier_agrees_with_the_regex(parts: list[str]) -> None:
    """The str.find prefilter never changes a verdict (ASCII and not)."""
    from quiesce._core.policy import _NEGATIVE

    body = " ".join(parts)
    e = Entry("x", Kind.REASONING, body)
    assert default_negative_classifier(e) is (_NEGATIVE.search(body) is not None)


def test_a_users_classifier_is_asked_again_at_the_grace_point() -> None:
    """Classify once holds for the library's own policy (its verdict depends on
    the content alone; measured in the long_life bench). A user's classifier
    may change its mind, so the removal at the grace point asks it again."""
    calls: list[str] = []

    def classifier(e: Entry) -> bool:
        calls.append(e.id)
        return "keep" in e.body

    buf = Buffer(policy=Policy(negative=classifier))
    buf.append(Entry("a", Kind.REASONING, "x" * 16_000))
    buf.append(Entry("k", Kind.REASONING, "keep this"))
    with buf.snapshot():
        report = buf.prune(["a", "k"], reason="old")  # a is deferred: a reader holds it
        assert report["a"].status is Status.DEFERRED
        assert report["k"].refusal is Refusal.NEGATIVE
    buf.apply_due()
    assert "a" in buf.tombstones
    assert sorted(calls) == ["a", "a", "k"]  # a: when the prune decided, and when due
    buf._check(expect_no_pins=True)


# -- the ordered view, built incrementally ----------------------------------------


def _check_view(v: Any) -> None:
    """A built view's invariants: chunks non-empty and at most twice CHUNK,
    maxes their last keys, keys ascending, each entry at its slot's key."""
    import quiesce._core.version as version

    view = v.view()
    assert all(0 < len(c) <= 2 * version.CHUNK for c in view.keys)
    assert view.maxes == tuple(c[-1] for c in view.keys)
    flat = [k for c in view.keys for k in c]
    assert flat == sorted(flat) and len(flat) == len(v.live)
    for ce, ck in zip(view.entries, view.keys, strict=True):
        for e, k in zip(ce, ck, strict=True):
            assert v.live[e.id].key == k and v.live[e.id].entry is e


@contextlib.contextmanager
def _small_chunks(size: int = 3) -> Iterator[None]:
    """Chunks of 3 entries (6 before a split), so small windows split,
    empty and bisect across chunks."""
    import quiesce._core.version as version

    old = version.CHUNK
    version.CHUNK = size
    try:
        yield
    finally:
        version.CHUNK = old


@given(
    st.lists(
        st.tuples(st.sampled_from(["add", "remove", "mark", "iterate"]), st.integers(0, 50)),
        max_size=120,
    )
)
@example([("add", 0)] * 7 + [("add", 4)])  # a split ends a derivation
@example([("add", 1)] * 20 + [("remove", 4), ("add", 4), ("mark", 0), ("add", 8)])
def test_a_derived_view_equals_the_sorted_one(ops: list[tuple[str, int]]) -> None:
    with _small_chunks():
        _derived_view_equals_the_sorted_one(ops)


def _derived_view_equals_the_sorted_one(ops: list[tuple[str, int]]) -> None:
    """Versions chained by derive (appends, removals, marks; iterated at
    random points, so chains of every length occur) always have exactly the
    view a sort of their live slots gives."""
    from quiesce._core.version import ADD, MAX_CHAIN, REMOVE, Slot, Version

    v = Version.empty()
    v.entries()
    n = 0
    for op, x in ops:
        if op == "add":
            e = Entry(f"v{n}", Kind.REASONING, f"body {n}")
            key = v.next_key
            new = Version(
                v.number + 1,
                v.live.set(e.id, Slot(e, key, n)),
                v.marks,
                v.tombs,
                v.referrers,
                key + 1.0,
            )
            new.derive(v, ADD, (e, key))
            n += 1
        elif op == "remove" and len(v.live):
            ids = sorted(v.live)[x % len(v.live) :][:3]
            live = v.live
            for i in ids:
                live = live.delete(i)
            new = Version(v.number + 1, live, v.marks, v.tombs, v.referrers, v.next_key)
            new.derive(v, REMOVE, frozenset(ids))
        elif op == "mark":
            new = v.with_marks(v.number + 1, v.marks)
        else:
            v.entries()
            continue
        assert new._depth <= MAX_CHAIN
        v = new
        expect = sorted(v.live.values(), key=lambda s: s.key)
        if x % 2 == 0:
            assert v.entries() == tuple(s.entry for s in expect)
            assert v.keys() == tuple(s.key for s in expect)
            assert v._base is None  # the link is dropped once built
            _check_view(v)
    assert list(v) == [s.entry for s in sorted(v.live.values(), key=lambda s: s.key)]


# -- the buffer's bounded log ------------------------------------------------------


@pytest.fixture
def small_tail(monkeypatch: pytest.MonkeyPatch) -> int:
    """A durable tail of 16 records (the default, 1,024, needs long logs)."""
    import quiesce._core.publish as publish

    monkeypatch.setattr(publish, "DURABLE_TAIL", 16)
    return 16


def test_a_durable_log_keeps_only_a_tail_and_reads_the_rest(
    kind: str, tmp_path: Path, small_tail: int
) -> None:
    path = tmp_path / f"tail.{kind}"
    buf = Buffer(log=_open(kind, path))
    _churn(buf, 60)
    total = len(buf.log)
    assert total > 500
    assert buf.log.in_memory <= small_tail + 2 * max(small_tail, 64) + 40
    assert buf.log.first == 0 and buf.log.dropped == 0
    everything = list(buf.log)
    assert [r.seq for r in everything] == list(range(total))
    buf._check(expect_no_pins=True)
    first = buf.log[0]
    assert first.op == "append" and first.ids == ("e0",)
    assert buf.log[3].to_dict() == everything[3].to_dict()
    assert buf.log[-1] is buf.log[-1]  # the tail: the same object each time
    assert [r.seq for r in buf.log.for_id("e0")] == [r.seq for r in everything if "e0" in r.ids]
    buf.sink.close()  # type: ignore[union-attr]
    again = Buffer(log=_open(kind, path))
    assert again.log.in_memory <= small_tail + 2 * max(small_tail, 64)
    assert [r.to_dict() for r in again.log] == [r.to_dict() for r in everything]
    assert list(again.head().entries()) == list(buf.head().entries())
    again._check(expect_no_pins=True)
    again.sink.close()  # type: ignore[union-attr]


def test_without_a_sink_retention_bounds_the_log_and_counts_the_drop() -> None:
    buf = Buffer(log_retention=100)
    _churn(buf, 80)
    total = len(buf.log)
    assert total > 700
    assert 100 <= buf.log.in_memory < 100 + 2 * 100 + 20
    assert buf.log.dropped == buf.log.first == total - buf.log.in_memory
    assert [r.seq for r in buf.log] == list(range(buf.log.first, total))
    with pytest.raises(LogRecordDropped, match="no sink"):
        buf.log[0]
    assert buf.log[-1].seq == total - 1
    assert buf.stats().log_records == total
    buf._check(expect_no_pins=True)


def test_the_default_retention_is_bounded() -> None:
    from quiesce._core.log import DEFAULT_RETENTION

    buf = Buffer()
    assert buf._st.retention == DEFAULT_RETENTION == 10_000
    _churn(buf, 1800, batch=10)  # 27,000 records: a trim drops at twice the retention
    assert len(buf.log) > 2 * DEFAULT_RETENTION
    assert DEFAULT_RETENTION <= buf.log.in_memory <= 2 * DEFAULT_RETENTION
    assert buf.log.dropped == len(buf.log) - buf.log.in_memory > 0


@pytest.mark.parametrize(
    ("value", "error"), [("5", InvalidType), (1.5, InvalidType), (-1, InvalidArgument)]
)
def test_a_bad_retention_is_refused(value: object, error: type[Exception]) -> None:
    with pytest.raises(error, match="log_retention"):
        Buffer(log_retention=value)  # type: ignore[arg-type]


def test_a_record_gone_from_the_sink_raises_never_another(tmp_path: Path, small_tail: int) -> None:
    """A row deleted from the SQLite file behind the buffer's back: reading
    it back through ``buf.log`` raises LogFormatError."""
    path = tmp_path / "gone.sqlite"
    buf = Buffer(log=SQLiteLog(path))
    _churn(buf, 40)
    conn = sqlite3.connect(path)
    conn.execute("DROP TRIGGER quiesce_log_no_delete")
    conn.execute("DELETE FROM quiesce_log WHERE seq = 30")
    conn.commit()
    conn.close()
    assert buf.log[29].seq == 29
    with pytest.raises(LogFormatError, match="missing"):
        buf.log[30]
    with pytest.raises(LogFormatError):
        list(buf.log)
    assert buf.log[-1].seq == len(buf.log) - 1  # the tail is still in memory
    buf.sink.close()  # type: ignore[union-attr]


class _WriteOnly:
    """A sink without read_range: the buffer keeps its whole log."""

    def __init__(self) -> None:
        self.records: list[LogRecord] = []

    def load(self) -> list[LogRecord]:
        return []

    def write(self, records: Sequence[LogRecord]) -> None:
        self.records.extend(records)

    def close(self) -> None:
        pass


def test_a_sink_that_cannot_read_back_keeps_everything(small_tail: int) -> None:
    sink = _WriteOnly()
    buf = Buffer(log=sink)
    _churn(buf, 60)
    assert buf.log.in_memory == len(buf.log) == len(sink.records)
    assert buf.log.dropped == 0
    buf._check(expect_no_pins=True)


# -- moves and summaries place by bisection ------------------------------------------


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["move", "move_end", "summarize", "append", "prune", "iterate"]),
            st.integers(0, 1000),
            st.integers(0, 1000),
        ),
        max_size=60,
    )
)
def test_moves_and_summaries_keep_the_model_order(ops: list[tuple[str, int, int]]) -> None:
    with _small_chunks():
        _moves_and_summaries_keep_the_model_order(ops)


def _moves_and_summaries_keep_the_model_order(ops: list[tuple[str, int, int]]) -> None:
    """Random moves (also into one gap over and over), summaries, appends and
    prunes: the window is always the order a plain list model gives, and the
    buffer's invariants hold."""
    from quiesce import EditPlan, Move, Summarize

    buf = Buffer()
    model: list[str] = []
    n = 0

    def new_entry() -> Entry:
        nonlocal n
        n += 1
        return Entry(f"m{n}", Kind.REASONING, f"step {n}")

    for _ in range(6):
        e = new_entry()
        buf.append(e)
        model.append(e.id)
    for op, a, b in ops:
        if op == "append" or len(model) < 3:
            e = new_entry()
            buf.append(e)
            model.append(e.id)
        elif op in ("move", "move_end"):
            mover = model[a % len(model)]
            rest = [i for i in model if i != mover]
            before = None if op == "move_end" else rest[b % len(rest)]
            assert buf.edit(EditPlan([Move(mover, before=before)], reason="rerank")).applied
            model = rest
            model.insert(len(model) if before is None else model.index(before), mover)
        elif op == "summarize":
            start = a % (len(model) - 1)
            covered = model[start : start + 2]
            s = new_entry()
            report = buf.edit(EditPlan([Summarize(covered, into=s)], reason="compress"))
            assert report.applied
            model.insert(model.index(covered[0]), s.id)
            for i in covered:
                model.remove(i)
        elif op == "prune":
            victim = model[a % len(model)]
            buf.prune([victim], reason="old")
            model.remove(victim)
        else:
            with buf.snapshot() as snap:
                assert [e.id for e in snap] == model
            _check_view(buf.head())
    with buf.snapshot() as snap:
        assert [e.id for e in snap] == model
    buf._check(expect_no_pins=True)


def test_a_huge_refused_edit_logs_capped_reasons() -> None:
    """100 prunes, each target cited by the same 100 survivors: refused
    (REFERENCED), with the first WHY_KEPT reasons and a count of the rest in
    the record and the escalation; nothing changes."""
    from quiesce import EditPlan, Prune
    from quiesce._core.edit import WHY_KEPT

    buf = Buffer()
    targets = [f"t{i}" for i in range(100)]
    for t in targets:
        buf.append(Entry(t, Kind.REASONING, f"finding {t}"))
    for i in range(100):
        buf.append(Entry(f"r{i}", Kind.REASONING, f"uses all {i}", refs=tuple(targets)))
    version = buf.version
    report = buf.edit(EditPlan([Prune(t) for t in targets], reason="too much"))
    assert not report.applied and report.refusals == (Refusal.REFERENCED,)
    assert buf.version == version
    rec = buf.log[-1]
    assert rec.outcome == "refused"
    assert len(rec.detail["why"]) == WHY_KEPT + 1
    assert rec.detail["why"][-1] == f"and {100 - WHY_KEPT} more"
    assert rec.detail["why"][0].startswith("'t0' would be removed but 'r")
    assert report.escalation is not None
    assert report.escalation.detail.endswith(f"; and {100 - WHY_KEPT} more")
    buf._check(expect_no_pins=True)


# -- state machines: both logs with a short durable tail, and retention ---------------


class _DurableTailMachine(RuleBasedStateMachine):
    """The shared workload (appends, marks, prunes, edits, pins, flushes) on a
    buffer whose durable log keeps a 16-record tail in memory; at any point
    the log read through ``buf.log`` (tail and sink) is the log it was, and
    reopening the file rebuilds the same state and log."""

    kind = "sqlite"

    def __init__(self) -> None:
        import quiesce._core.publish as publish

        super().__init__()
        self._publish = publish
        self._old_tail = publish.DURABLE_TAIL
        publish.DURABLE_TAIL = 16
        self._dir = tempfile.TemporaryDirectory()
        self.path = Path(self._dir.name) / f"log.{self.kind}"
        # checkpoints every 5 records (and on demand, below): reopening
        # recovers from the newest one and the tail
        self.buf = Buffer(log=_open(self.kind, self.path), checkpoint_every=5)
        self.work = Workload(self.buf)
        self.seen: dict[int, str] = {}  # seq -> the record as first read (JSON)

    @rule(op=st.tuples(*(st.integers(0, 15) for _ in range(5))))
    def operate(self, op: tuple[int, ...]) -> None:
        self.work.run(op)

    @rule(ops=st.lists(st.tuples(*(st.integers(0, 15) for _ in range(5))), max_size=30))
    def burst(self, ops: list[tuple[int, ...]]) -> None:
        for op in ops:
            self.work.run(op)
        self.buf.flush()

    @rule(i=st.integers(0, 10**6))
    def look(self, i: int) -> None:
        if not len(self.buf.log):
            return
        seq = i % len(self.buf.log)
        got = encode_record(self.buf.log[seq])
        assert self.seen.setdefault(seq, got) == got

    @rule()
    def checkpoint(self) -> None:
        self.buf.flush(checkpoint=True)
        assert self.buf.log[-1].op == "checkpoint"

    @rule()
    def reopen(self) -> None:
        self.work.release_all()
        self.buf.flush()
        before = state(self.buf)
        self.buf.sink.close()  # type: ignore[union-attr]
        self.buf = Buffer(log=_open(self.kind, self.path), checkpoint_every=5)
        self.work = Workload(self.buf, prefix=f"r{len(self.buf.log)}-")
        assert state(self.buf) == before

    @invariant()
    def bounded_and_consistent(self) -> None:
        buf = self.buf
        assert buf.log.in_memory <= buf.pending_records + 2 * 16 + 1
        assert buf.log.dropped == 0 and buf.log.first == 0
        buf._check()

    def teardown(self) -> None:
        self.work.release_all()
        self.buf.sink.close()  # type: ignore[union-attr]
        self._dir.cleanup()
        self._publish.DURABLE_TAIL = self._old_tail


class _JsonlTailMachine(_DurableTailMachine):
    kind = "jsonl"


class _RetentionMachine(RuleBasedStateMachine):
    """The shared workload without a sink, keeping 20 records: the log
    holds the newest ones, says how many it dropped, refuses the dropped
    ones, and never changes a record it still holds."""

    def __init__(self) -> None:
        super().__init__()
        self.buf = Buffer(log_retention=20)
        self.work = Workload(self.buf)
        self.seen: dict[int, str] = {}

    @rule(ops=st.lists(st.tuples(*(st.integers(0, 15) for _ in range(5))), max_size=30))
    def burst(self, ops: list[tuple[int, ...]]) -> None:
        for op in ops:
            self.work.run(op)

    @rule(i=st.integers(0, 10**6))
    def look(self, i: int) -> None:
        log = self.buf.log
        if not len(log):
            return
        seq = i % len(log)
        if seq < log.first:
            with pytest.raises(LogRecordDropped):
                log[seq]
            return
        got = encode_record(log[seq])
        assert self.seen.setdefault(seq, got) == got

    @invariant()
    def bounded_and_counted(self) -> None:
        log = self.buf.log
        assert log.dropped == log.first == len(log) - log.in_memory
        assert log.in_memory <= 2 * 20 + 1 or not log.dropped
        assert [r.seq for r in log] == list(range(log.first, len(log)))
        self.buf._check()

    def teardown(self) -> None:
        self.work.release_all()


_machine_settings = settings(max_examples=25, stateful_step_count=25)
TestSQLiteTailMachine = _DurableTailMachine.TestCase
TestSQLiteTailMachine.settings = _machine_settings
TestJsonlTailMachine = _JsonlTailMachine.TestCase
TestJsonlTailMachine.settings = _machine_settings
TestRetentionMachine = _RetentionMachine.TestCase
TestRetentionMachine.settings = _machine_settings
