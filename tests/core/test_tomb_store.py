"""The compact tombstone store (``quiesce._core.tombs``, issue 21): never
half-written, no disk under the write lock, keyed hashes crafted ids cannot
collide, and the index a checkpoint holds checked before it is used."""

from __future__ import annotations

import copy
import sqlite3
import threading
import zlib
from array import array
from pathlib import Path

import pytest

from quiesce import (
    Buffer,
    Entry,
    EntryPruned,
    InvalidArgument,
    Kind,
    ReadmissionRefused,
    SQLiteLog,
)
from quiesce._core.entry import content_hash
from quiesce._core.records import Tombstone
from quiesce._core.tombs import EMPTY_TOMBS, Tombs, TombStore
from quiesce.bench.long_life import crc_colliding_ids


def _tomb(i: int, *, turn: int | None = 3, key: str | None = None) -> Tombstone:
    return Tombstone(
        f"e{i}", content_hash(f"body {i}"), "stale", turn, None, i + 1, Kind.REASONING, key
    )


def _fill(buf: Buffer, n: int, *, batch: int = 100) -> None:
    """Append ``n`` entries and prune them ``batch`` at a time."""
    for start in range(0, n, batch):
        ids = [f"e{i}" for i in range(start, min(n, start + batch))]
        for i in ids:
            buf.append(Entry(i, Kind.REASONING, f"body {i[1:]}"))
        buf.prune(ids, reason="stale")


# -- never half-written (defect 1) -------------------------------------------------


def test_a_turn_the_columns_cannot_hold_leaves_the_store_as_it_was() -> None:
    """Regression (issue 21, defect 1): ``turn=2**63`` overflowed the int64
    column half-way through an append; the columns were misaligned and
    later tombstones read back as ``e0``."""
    tombs = EMPTY_TOMBS
    for i in range(3):
        tombs = tombs.add(_tomb(i))
    store = tombs._store
    assert store is not None
    for bad in (2**63, -(2**63), 2**80):
        with pytest.raises(InvalidArgument, match="does not fit a 64-bit column"):
            tombs.add(_tomb(3, turn=bad))
        assert store.n == 3
    tombs = tombs.add(_tomb(3)).add(_tomb(4, key="k4"))
    assert [t.id for t in tombs.in_order()] == ["e0", "e1", "e2", "e3", "e4"]
    for i in range(5):
        assert tombs[f"e{i}"] == _tomb(i, key="k4" if i == 4 else None)
        assert tombs.by_hash[content_hash(f"body {i}")].id == f"e{i}"
    assert tombs.by_key["k4"].id == "e4"


def test_a_failing_write_half_way_rolls_the_columns_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """A ``MemoryError`` after some columns were written cuts them back."""
    tombs = EMPTY_TOMBS.add(_tomb(0)).add(_tomb(1))
    store = tombs._store
    assert store is not None
    real = store._cols.turn

    class Failing(array):  # type: ignore[type-arg]  # refuses one append, as an allocation would
        def append(self, v: int) -> None:
            raise MemoryError

    monkeypatch.setattr(store._cols, "turn", Failing("q", real))
    with pytest.raises(MemoryError):
        tombs.add(_tomb(2, key="k2"))
    monkeypatch.setattr(store._cols, "turn", real)
    assert store.n == 2
    c = store._cols
    assert len(c.id_end) == len(c.turn) == len(c.reason) == len(c.kind) == 2
    assert len(c.hash8) == 16 and not c.key_pos
    tombs = tombs.add(_tomb(2)).add(_tomb(3))
    assert [tombs[f"e{i}"] for i in range(4)] == [_tomb(i) for i in range(4)]


def test_a_removal_failing_in_the_middle_of_a_group_is_not_half_written(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A multi-id prune whose third tombstone cannot be written (injected
    below the door check): the prune raises, no tombstone is published (the
    ids are only marked), and every tombstone reads back as itself
    afterwards (not ``e0``)."""
    buf = Buffer()
    for i in range(6):
        buf.append(Entry(f"e{i}", Kind.REASONING, f"body {i}"))
    buf.prune(["e0"], reason="stale")
    real = TombStore.append
    calls = []

    def failing(self: TombStore, t: Tombstone) -> None:
        calls.append(t.id)
        if len(calls) == 3:
            real(self, t._replace(turn=2**63))  # a value the columns cannot hold
        real(self, t)

    monkeypatch.setattr(TombStore, "append", failing)
    with pytest.raises(InvalidArgument, match="64-bit column"):
        buf.prune(["e1", "e2", "e3", "e4"], reason="stale", turn=5)
    monkeypatch.setattr(TombStore, "append", real)
    assert list(buf.tombstones) == ["e0"]
    assert set(buf.head().live) == {"e1", "e2", "e3", "e4", "e5"}
    buf._check()
    assert buf.apply_due() == ("e1", "e2", "e3", "e4")  # the queued group, again
    for i in range(5):
        t = buf.tombstones[f"e{i}"]
        assert t.id == f"e{i}" and t.content_hash == content_hash(f"body {i}")
        assert t.turn == (None if i == 0 else 5)
    buf._check()


# -- no disk under the write lock (defect 6) -----------------------------------------


def test_mark_and_append_answer_while_the_database_is_locked(tmp_path: Path) -> None:
    """Regression (issue 21, defect 6): with >= 1,024 durable (spilled)
    tombstones, ``mark_stale`` of a pruned id and the re-admission guard
    read the tombstone back under the write lock, through a sink whose read
    waits on its own writer: with another connection holding the database,
    they waited for the stuck flush (seconds). Both must answer while it is
    still stuck."""
    path = tmp_path / "log.sqlite"
    buf = Buffer(log=SQLiteLog(path, timeout=30), checkpoint_every=0)
    _fill(buf, 1200)
    buf.flush()
    store = buf.head().tombs._store
    assert store is not None and store.held < 200  # spilled: read back from their records
    locker = sqlite3.connect(path, isolation_level=None)
    locker.execute("BEGIN EXCLUSIVE")
    buf.append(Entry("pending", Kind.REASONING, "not yet durable"))
    flushing = threading.Event()
    failed: list[BaseException] = []

    def flush() -> None:
        flushing.set()
        try:
            buf.flush()
        except BaseException as exc:  # the lock outlives the sink's timeout
            failed.append(exc)

    flusher = threading.Thread(target=flush, daemon=True)
    got: list[object] = []

    def client() -> None:
        try:
            buf.mark_stale("e7", "stale")
        except EntryPruned as exc:
            got.append(exc.tombstone)
        try:
            buf.append(Entry("again", Kind.REASONING, "body 11"))
        except ReadmissionRefused as exc:
            got.append(exc.tombstone)
        got.append(flusher.is_alive())

    try:
        flusher.start()
        flushing.wait()
        while not buf.pending_records or buf._st.in_sink_write is None:  # inside sink.write
            threading.Event().wait(0.01)
        worker = threading.Thread(target=client, daemon=True)
        worker.start()
        worker.join(20)
        assert not worker.is_alive(), "mark_stale / append waited for the locked database"
        assert got[-1] is True, "answered only after the stuck flush gave up"
    finally:
        locker.execute("ROLLBACK")
        locker.close()
        flusher.join(60)
    assert not failed
    t7, t11 = got[0], got[1]
    assert isinstance(t7, Tombstone) and t7.id == "e7" and t7.reason == "stale"
    assert isinstance(t11, Tombstone) and t11.id == "e11"
    buf._check()
    buf.sink.close()  # type: ignore[union-attr]


def test_growing_the_index_never_reads_a_spilled_tombstone(tmp_path: Path) -> None:
    """Growing a full index used to rehash every tombstone, reading the
    spilled ones back from the sink under the write lock. Now an index
    reaching spilled positions is kept and a new one starts: no tombstone
    is read back while the write lock is held (reads after a prune, outside
    it, are allowed)."""
    path = tmp_path / "log.sqlite"
    buf = Buffer(log=SQLiteLog(path), checkpoint_every=0)
    _fill(buf, 1500)
    buf.flush()
    store = buf.head().tombs._store
    assert store is not None and store.held < 1500
    locked_reads: list[tuple[int, int]] = []
    records = buf._st.records
    reader = records.reader
    assert reader is not None
    lock = buf._st.write_lock

    all_reads = []

    def counting(start: int, stop: int) -> object:
        all_reads.append(start)
        if lock._is_owned():  # type: ignore[attr-defined]
            locked_reads.append((start, stop))
        return reader(start, stop)

    gens = len(store._by_id)
    records.reader = counting  # type: ignore[assignment]
    try:
        for start in range(1500, 6000, 150):  # several doublings past the spilled ones
            ids = [f"e{i}" for i in range(start, start + 150)]
            for i in ids:
                buf.append(Entry(i, Kind.REASONING, f"body {i[1:]}"))
                buf.mark_stale(i, "stale")
            buf.prune(ids, reason="stale")
            with pytest.raises(EntryPruned):
                buf.mark_stale(f"e{start - 1000}", "again")
            with pytest.raises(ReadmissionRefused):
                buf.append(Entry("x", Kind.REASONING, f"body {start - 1001}"))
    finally:
        records.reader = reader
    assert len(store._by_id) > gens
    assert all_reads  # the refused appends and marks read their tombstones back...
    assert locked_reads == []  # ...never under the write lock
    for i in range(0, 6000, 97):
        assert f"e{i}" in buf.tombstones
        assert buf.head().tombs.by_hash[content_hash(f"body {i}")].id == f"e{i}"
    assert "e6000" not in buf.tombstones
    buf._check(expect_no_pins=True)
    buf.sink.close()  # type: ignore[union-attr]


# -- collisions (defect 9) ------------------------------------------------------------


def test_crafted_crc_collisions_are_looked_up_right() -> None:
    """Regression (issue 21, defect 9): ids colliding under both CRC-32s
    all probed one cluster (4,000 took 61x as long to append). With the
    store's keyed hash they spread like any ids, and every lookup is exact."""
    ids = crc_colliding_ids(2000)

    def both(i: str) -> int:
        return zlib.crc32(i.encode()) | zlib.crc32(i.encode()[::-1]) << 32

    assert len(set(ids)) == 2000 and len({both(i) for i in ids}) == 1  # crafted: one CRC pair
    tombs = EMPTY_TOMBS
    for i, eid in enumerate(ids[:1000]):
        tombs = tombs.add(Tombstone(eid, content_hash(eid), "stale", None, None, i + 1))
    store = tombs._store
    assert store is not None
    for i, eid in enumerate(ids):
        assert (eid in tombs) is (i < 1000)
    assert tombs.get(ids[999]) is not None and tombs[ids[999]].id == ids[999]
    # the longest probe sequence stays short: the slots are spread
    gens = store._by_id
    slots = (gens[0] if isinstance(gens, tuple) else gens).slots  # (one index before issue 21)
    run = longest = 0
    for v in slots:
        run = run + 1 if v else 0
        longest = max(longest, run)
    assert longest < 60, f"a cluster of {longest} slots"


def test_two_stores_hash_alike_only_with_the_same_key() -> None:
    a, b = TombStore(), TombStore()
    assert a._h("e-1") != b._h("e-1")
    assert TombStore(a._key)._h("e-1") == a._h("e-1")


# -- the index in checkpoints (defect 4) --------------------------------------------


def _index_checkpoint(
    tmp_path: Path,
) -> tuple[list[object], dict[str, object], dict[str, Tombstone]]:
    buf = Buffer(log=SQLiteLog(tmp_path / "src.sqlite"), checkpoint_every=0)
    _fill(buf, 120, batch=10)
    buf.flush(checkpoint=True)
    want = dict(buf.tombstones.items())
    records = list(buf.log)
    buf.sink.close()  # type: ignore[union-attr]
    state = copy.deepcopy(records[-1].detail["state"])
    assert "tomb_index" in state
    return records, state, want


def _reopen(tmp_path: Path, records: list[object], state: dict[str, object]) -> Buffer:
    from quiesce._core.checkpoint import _record

    dst = tmp_path / "dst.sqlite"
    out = SQLiteLog(dst)
    out.write([*records[:-1], _record(state, records[-1].time)])  # type: ignore[attr-defined]
    out.close()
    return Buffer(log=SQLiteLog(dst), checkpoint_every=0)


def _zero_slots(ix: dict[str, object], name: str, how_many: int, fix_used: bool) -> None:
    import base64
    from array import array

    gen = ix[name][0]  # type: ignore[index]
    slots = array("I", base64.b64decode(gen[4]))
    zeroed = 0
    for i, v in enumerate(slots):
        if v and zeroed < how_many:
            slots[i] = 0
            zeroed += 1
    gen[4] = base64.b64encode(slots.tobytes()).decode("ascii")
    if fix_used:
        gen[2] -= zeroed


def _old_format(ix: dict[str, object]) -> None:
    """The index as checkpoints wrote it before issue 21 (CRC-32 hashes, no
    key, one ``[size, shift, used, slots]`` per field)."""
    del ix["v"], ix["key"]
    for name in ("by_id", "by_hash", "by_key"):
        size, shift, used, _dead, raw = ix[name][0]  # type: ignore[index]
        ix[name] = [size, shift, used, raw]


def _fill_slots(ix: dict[str, object], recount: bool = True) -> None:
    import base64
    from array import array

    gen = ix["by_id"][0]  # type: ignore[index]
    slots = array("I", base64.b64decode(gen[4]))
    for i, v in enumerate(slots):
        if not v:
            slots[i] = 0xFFFF0000 | 0x7FFF
    gen[4] = base64.b64encode(slots.tobytes()).decode("ascii")
    if recount:
        gen[2] = len(slots)


def _zero_every_slot(ix: dict[str, object]) -> None:
    """Every id and content-hash slot zeroed, the counts left as written:
    before issue 21 this checkpoint was used, and all 120 pruned entries
    were appended again without an ``Override``."""
    for name in ("by_id", "by_hash"):
        _zero_slots(ix, name, 1 << 20, False)


@pytest.mark.parametrize(
    "lie",
    [
        pytest.param(lambda ix: _zero_slots(ix, "by_id", 1, False), id="zeroed-id-slot"),
        pytest.param(lambda ix: _zero_slots(ix, "by_id", 3, True), id="zeroed-and-recounted"),
        pytest.param(lambda ix: _zero_slots(ix, "by_hash", 2, True), id="zeroed-hash-slots"),
        pytest.param(_fill_slots, id="every-slot-non-zero"),
        # the two lies as they passed the checks before issue 21 (counts as
        # written): every pruned entry re-admitted, and an append probing
        # a full index forever
        pytest.param(_zero_every_slot, id="zeroed-id-and-hash-slots-counts-kept"),
        pytest.param(lambda ix: _fill_slots(ix, False), id="every-slot-non-zero-count-kept"),
        pytest.param(lambda ix: ix.__setitem__("n", ix["n"] - 10), id="fewer-tombstones"),
        pytest.param(_old_format, id="old-crc-format"),
        pytest.param(lambda ix: ix.pop("v"), id="no-format"),
        pytest.param(lambda ix: ix.__setitem__("key", "AAAA"), id="short-key"),
    ],
)
def test_a_lying_index_with_a_good_checksum_falls_back(
    lie: object, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Regression (issue 21, defect 4): an index with zeroed slots (and its
    counts rewritten to match) made a pruned id re-appendable without an
    ``Override``; one with every slot non-zero made recovery probe forever.
    Open checks the index first and falls back with a warning."""
    records, state, want = _index_checkpoint(tmp_path)
    lie(state["tomb_index"])  # type: ignore[operator]
    with caplog.at_level("WARNING", logger="quiesce.checkpoint"):
        again = _reopen(tmp_path, records, state)
    assert "skipping checkpoint" in caplog.text
    assert dict(again.tombstones.items()) == want
    for i in range(120):
        with pytest.raises(ReadmissionRefused):
            again.append(Entry(f"x{i}", Kind.REASONING, f"body {i}"))
    again.head().tombs.check_index()
    again._check(expect_no_pins=True)
    again.sink.close()  # type: ignore[union-attr]


def test_an_index_checkpoint_opens_and_every_tombstone_is_found(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A sound index checkpoint is used (no fallback: its checks, the read
    of its newest run's record included, pass during recovery)."""
    records, state, want = _index_checkpoint(tmp_path)
    with caplog.at_level("WARNING", logger="quiesce.checkpoint"):
        again = _reopen(tmp_path, records, state)
    assert "skipping checkpoint" not in caplog.text
    store = again.head().tombs._store
    assert store is not None and store.held == 0  # restored from the index, not replayed
    assert dict(again.tombstones.items()) == want
    again.head().tombs.check_index()
    again._check(expect_no_pins=True)
    again.sink.close()  # type: ignore[union-attr]


def test_check_index_finds_a_slot_moved_out_of_its_probe_sequence() -> None:
    tombs = Tombs.of([_tomb(i) for i in range(50)])
    tombs.check_index()
    store = tombs._store
    assert store is not None
    slots = store._by_id[0].slots
    i = next(i for i, v in enumerate(slots) if v)
    v = slots[i]
    slots[i] = 0
    j = next(j for j in range(len(slots)) if not slots[j] and abs(j - i) > 3)
    slots[j] = v  # the same slot, where no probe for its id looks
    with pytest.raises(Exception, match="not found through the index"):
        tombs.check_index()
