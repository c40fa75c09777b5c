"""The compact tombstone index (issue 13): every tombstone ever written stays
visible to the re-admission guard, "deleted" and "never existed" stay
distinguishable, each version sees exactly the tombstones written up to it,
and memory holds no Python object per tombstone."""

from __future__ import annotations

import copy
import gc
import json
import os
import sqlite3
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quiesce import (
    Buffer,
    DuplicateEntry,
    Entry,
    EntryPruned,
    JsonlLog,
    Kind,
    LogFormatError,
    LogRecord,
    ReadmissionRefused,
    SQLiteLog,
    Status,
    UnknownEntry,
)
from quiesce._core.entry import content_hash
from quiesce._core.records import Tombstone
from quiesce._core.tombs import EMPTY_TOMBS, Tombs

KINDS = ("sqlite", "jsonl")


def _tomb(i: int, body: str | None = None, key: str | None = None, version: int = 1) -> Tombstone:
    h = content_hash(body if body is not None else f"body {i}")
    return Tombstone(f"t{i}", h, "gone", i % 3 or None, None, version, Kind.REASONING, key)


def _entry(i: int, body: str | None = None, key: str | None = None) -> Entry:
    return Entry(f"e{i}", Kind.REASONING, body if body is not None else f"body {i}", key=key)


def _open(kind: str, path: Path) -> SQLiteLog | JsonlLog:
    return SQLiteLog(path) if kind == "sqlite" else JsonlLog(path)


def _fill(buf: Buffer, rounds: int, start: int = 0) -> int:
    """Append 10 entries and prune them, ``rounds`` times; entry 10*r+3 has
    key ``k<10*r+3>``."""
    i = start
    for _ in range(rounds):
        ids = []
        for _ in range(10):
            buf.append(_entry(i, key=f"k{i}" if i % 10 == 3 else None))
            ids.append(f"e{i}")
            i += 1
        report = buf.prune(ids, reason="window full")
        assert report.ids(Status.PRUNED) == tuple(ids)
    return i


def _guard_sees(buf: Buffer, total: int) -> None:
    """Every tombstone written (ids e0 .. e<total-1>) is seen: by id, by
    content hash and by key; an id never written is unknown."""
    tombs = buf.tombstones
    assert len(tombs) == total
    for i in (0, 1, 3, total // 2, total - 1):
        assert f"e{i}" in tombs
        assert tombs[f"e{i}"].content_hash == content_hash(f"body {i}")
        with pytest.raises(DuplicateEntry):
            buf.append(_entry(i, body="other"))
        with pytest.raises(ReadmissionRefused) as exc:
            buf.append(Entry(f"new{i}", Kind.REASONING, f"body {i}"))
        assert exc.value.tombstone.id == f"e{i}"  # type: ignore[attr-defined]
    with pytest.raises(ReadmissionRefused):
        buf.append(Entry("by-key", Kind.REASONING, "fresh body", key="k3"))
    assert "never" not in tombs
    with buf.snapshot() as snap:
        assert isinstance(snap.resolve("e0"), Tombstone)
        with pytest.raises(EntryPruned):
            snap["e0"]
        with pytest.raises(UnknownEntry):
            snap.resolve("never")
    report = buf.prune(["e0", "never"], reason="again")
    assert report["e0"].refusal is None and report["e0"].status is Status.UNCHANGED
    assert report["never"].status is Status.UNCHANGED and report["never"].refusal is not None


# -- the index itself ----------------------------------------------------------


def test_deleted_and_never_existed_stay_distinct() -> None:
    buf = Buffer()
    _fill(buf, 30)
    _guard_sees(buf, 300)
    buf._check()


def test_each_version_sees_its_own_prefix() -> None:
    buf = Buffer()
    _fill(buf, 3)
    before = buf.head()  # an immutable version: what a reader pinned here sees
    _fill(buf, 3, start=30)
    assert len(before.tombs) == 30 and "e35" not in before.tombs
    assert before.tombs.matching(content_hash("body 35"), None) is None
    assert "e35" in buf.tombstones and len(buf.tombstones) == 60
    assert before.tombs == {t.id: t for t in list(buf.tombstones.values())[:30]}


def test_a_dropped_draft_is_cut_off_before_the_next_add() -> None:
    base = Tombs.of(_tomb(i) for i in range(40))  # past the first index growth
    dropped = base.add(_tomb(100, key="kx"))
    assert "t100" in dropped and dropped.matching("zz", "kx") is not None
    kept = base.add(_tomb(200))
    assert "t100" not in kept and "t200" in kept and len(kept) == 41
    assert kept.matching(content_hash("body 100"), "kx") is None
    assert base == Tombs.of(_tomb(i) for i in range(40))
    assert list(kept) == [f"t{i}" for i in range(40)] + ["t200"]


def test_the_newest_tombstone_of_a_hash_or_key_wins() -> None:
    tombs = EMPTY_TOMBS
    for i in range(5):
        tombs = tombs.add(_tomb(i, body="same", key="k", version=i))
    hit = tombs.matching(content_hash("same"), None)
    assert hit is not None and hit.id == "t4"
    assert tombs.by_key["k"].id == "t4" and len(tombs.by_hash) == 1
    assert tombs.matching("0" * 16, "k").id == "t4"  # type: ignore[union-attr]


def test_odd_content_hashes_and_non_ascii_ids_round_trip() -> None:
    odd = Tombstone("é\ud800x", "not-hex!", "r", None, "a", None, None, "ké")
    tombs = EMPTY_TOMBS.add(odd).add(_tomb(1))
    assert tombs["é\ud800x"] == odd
    assert tombs.matching("not-hex!", None) == odd
    assert tombs.matching("nope", "ké") == odd
    assert 3 not in tombs and tombs.get(3) is None  # type: ignore[call-overload]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 3), st.integers(0, 6), st.sampled_from([None, "a", "b"])),
        min_size=1,
        max_size=80,
    )
)
def test_the_index_agrees_with_a_dict_model(ops: list[tuple[int, int, str | None]]) -> None:
    """Adds along one line of versions, with forks back to an older version
    (a dropped draft): every version on the line matches a plain model."""
    line: list[tuple[Tombs, list[Tombstone]]] = [(EMPTY_TOMBS, [])]
    for uid, (back, body, key) in enumerate(ops):
        at = max(0, len(line) - 1 - (back if back == 3 else 0))
        del line[at + 1 :]  # the versions past a fork are never used again
        tombs, model = line[at]
        t = Tombstone(f"id{uid}", content_hash(f"b{body}"), "r", uid, None, uid, None, key)
        line.append((tombs.add(t), [*model, t]))
    for tombs, model in line:
        assert len(tombs) == len(model)
        assert dict(tombs.items()) == {t.id: t for t in model}
        for body in range(7):
            h = content_hash(f"b{body}")
            want = [t for t in model if t.content_hash == h]
            assert tombs.by_hash.get(h) == (want[-1] if want else None)
        for key in ("a", "b"):
            want = [t for t in model if t.key == key]
            assert tombs.by_key.get(key) == (want[-1] if want else None)
        assert "id999" not in tombs


def test_no_python_object_per_tombstone() -> None:
    """Regression (issue 13): the maps held a Tombstone and HAMT nodes per
    tombstone, so a full collection grew with history."""
    buf = Buffer(log_retention=100)
    _fill(buf, 20)
    gc.collect()
    before = len(gc.get_objects())
    _fill(buf, 400, start=200)
    gc.collect()
    grown = len(gc.get_objects()) - before
    assert len(buf.tombstones) == 4200
    assert grown < 1000, f"{grown} more objects for 4,000 more tombstones"


def test_bytes_per_tombstone() -> None:
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tombs = Tombs.of(_tomb(i) for i in range(20_000))
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(tombs) == 20_000
    assert held / 20_000 < 100, f"{held / 20_000:.0f} bytes per tombstone"


# -- through the sinks: recovery, checkpoints, retention -----------------------------


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("checkpoint_every", [0, 150])
def test_the_guard_sees_old_tombstones_after_recovery(
    kind: str, checkpoint_every: int, tmp_path: Path
) -> None:
    path = tmp_path / f"log.{kind}"
    buf = Buffer(log=_open(kind, path), checkpoint_every=checkpoint_every)
    _fill(buf, 40)
    buf.flush()
    assert buf.log.in_memory < len(buf.log)  # the old records left memory
    _guard_sees(buf, 400)
    want = dict(buf.tombstones.items())
    buf.sink.close()  # type: ignore[union-attr]
    again = Buffer(log=_open(kind, path), checkpoint_every=checkpoint_every)
    assert dict(again.tombstones.items()) == want
    assert again.head().tombs == buf.head().tombs
    _guard_sees(again, 400)
    again._check(expect_no_pins=True)
    again.sink.close()  # type: ignore[union-attr]


def test_the_guard_sees_tombstones_whose_records_retention_dropped() -> None:
    buf = Buffer(log_retention=50)
    _fill(buf, 40)
    assert buf.log.dropped > 300  # the removal records of the first tombstones are gone
    _guard_sees(buf, 400)
    buf._check()


# -- spilling: durable tombstones leave memory, read back from their records ------


@pytest.fixture
def small_spill(monkeypatch: pytest.MonkeyPatch) -> int:
    import quiesce._core.tombs as tombs_mod

    monkeypatch.setattr(tombs_mod, "SPILL_LEAST", 16)
    return 16


def _held(buf: Buffer) -> int:
    store = buf.head().tombs._store
    assert store is not None
    return store.held


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("checkpoint_every", [0, 150])
def test_spilled_tombstones_are_read_back(
    kind: str, checkpoint_every: int, tmp_path: Path, small_spill: int
) -> None:
    path = tmp_path / f"log.{kind}"
    buf = Buffer(log=_open(kind, path), checkpoint_every=checkpoint_every)
    _fill(buf, 40)
    buf.flush()
    assert _held(buf) < 40  # the rest left memory
    want = {t.id: t for t in (_tomb_of(i) for i in range(400))}
    got = {i: t._replace(version=0) for i, t in buf.tombstones.items()}
    assert got == want
    _guard_sees(buf, 400)
    _fill(buf, 5, start=400)  # more after a spill (the index grows over spilled ones)
    buf.flush()
    assert buf.tombstones["e403"].key == "k403" and "e5" in buf.tombstones
    buf._check(expect_no_pins=True)
    everything = dict(buf.tombstones.items())
    buf.sink.close()  # type: ignore[union-attr]
    again = Buffer(log=_open(kind, path), checkpoint_every=checkpoint_every)
    assert _held(again) < 60
    assert dict(again.tombstones.items()) == everything
    assert again.head().tombs == buf.head().tombs
    _guard_sees(again, 450)
    again._check(expect_no_pins=True)
    again.sink.close()  # type: ignore[union-attr]


def _tomb_of(i: int) -> Tombstone:
    return Tombstone(
        f"e{i}",
        content_hash(f"body {i}"),
        "window full",
        None,
        None,
        0,
        Kind.REASONING,
        f"k{i}" if i % 10 == 3 else None,
    )


def test_a_spilled_tombstone_whose_record_is_gone_raises(tmp_path: Path, small_spill: int) -> None:
    """A record deleted behind the log's back (its trigger dropped first):
    reading a tombstone it held raises, never answers wrongly."""

    path = tmp_path / "log.sqlite"
    buf = Buffer(log=SQLiteLog(path), checkpoint_every=0)
    _fill(buf, 10)
    buf.flush()
    assert _held(buf) < 100
    seqs = [r.seq for r in buf.log if r.op == "remove"]
    sink = buf.sink
    assert isinstance(sink, SQLiteLog)
    conn = sqlite3.connect(path)
    conn.execute("DROP TRIGGER quiesce_log_no_delete")
    conn.execute("DELETE FROM quiesce_log WHERE seq = ?", (seqs[0],))
    conn.commit()
    conn.close()
    with pytest.raises(LogFormatError):
        buf.tombstones["e0"]
    with pytest.raises(LogFormatError):
        buf.append(Entry("x", Kind.REASONING, "body 1"))
    sink.close()


@pytest.mark.parametrize("kind", KINDS)
def test_spilled_tombstones_stay_readable_after_the_sink_closed(
    kind: str, tmp_path: Path, small_spill: int
) -> None:
    """A buffer's log stays readable after its sink is closed; so do the
    tombstones that left memory."""
    buf = Buffer(log=_open(kind, tmp_path / f"log.{kind}"), checkpoint_every=0)
    _fill(buf, 10)
    buf.flush()
    assert _held(buf) < 100
    buf.sink.close()  # type: ignore[union-attr]
    assert len(buf.tombstones) == 100 and "never" not in buf.tombstones
    assert buf.tombstones["e0"].content_hash == content_hash("body 0")
    with pytest.raises(ReadmissionRefused):
        buf.append(Entry("x", Kind.REASONING, "body 1"))


@pytest.mark.parametrize("shift", [16, 20, 24, 32])
def test_index_slots_hold_positions_up_to_their_limit(shift: int) -> None:
    from quiesce._core.tombs import _Index

    index = _Index(16, shift)
    top = index.limit - 1  # the largest position a slot holds
    # hashes are 64-bit, non-negative; a and b probe the same slots, other tags
    a, b, c = 5 | 1 << 63, 21 | 1 << 62, (1 << 64) - 3
    for h, pos in ((a, 0), (b, 7), (c, top)):
        index.put(h, pos)
    assert list(index.candidates(a, top + 1)) == [0]
    assert list(index.candidates(b, top + 1)) == [7]
    assert list(index.candidates(c, top + 1)) == [top]
    assert list(index.candidates(c, top)) == []  # not below this version's count
    assert list(index.candidates(5 | 1 << 61, top + 1)) == []  # another tag
    assert list(index.candidates(6, top + 1)) == []
    # the lowest tag bit counts too (the tag is every bit above the position)
    low_tag = 1 << index.tag_shift
    assert list(index.candidates(5 | 1 << 63 | low_tag, top + 1)) == []


def test_index_hashes_are_the_same_in_every_process() -> None:
    """A checkpoint keeps the index's slots and its key, so its keyed
    hashes must not depend on the process's string-hash salt."""
    import subprocess
    import sys

    code = (
        "from quiesce._core.tombs import _hasher, _keyed; "
        "print(_keyed(_hasher(bytes(range(16))), 'e-1'), _keyed(_hasher(b'k' * 16), 'x'))"
    )
    outs = {
        subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in ("1", "2")
    }
    assert len(outs) == 1


def test_bulk_building_equals_adding_one_by_one() -> None:
    """Recovery builds a store at once (Tombs.of); it must answer exactly as
    the store built by adding, keys, shared hashes and odd hashes included."""
    ts = [
        Tombstone(
            f"t{i}",
            content_hash(f"b{i % 37}") if i % 11 else f"odd-{i % 3}",
            "r",
            i % 3 or None,
            "a" if i % 5 == 0 else None,
            i,
            Kind.TOOL_OUTPUT if i % 2 else None,
            f"k{i % 13}" if i % 4 == 0 else None,
        )
        for i in range(500)
    ]
    bulk = Tombs.of(ts)
    one = EMPTY_TOMBS
    for t in ts:
        one = one.add(t)
    assert bulk == one and list(bulk.values()) == ts
    for i in range(40):
        h = content_hash(f"b{i}")
        assert bulk.matching(h, f"k{i}") == one.matching(h, f"k{i}")
    assert bulk.matching("odd-1", None) == one.matching("odd-1", None) is not None
    bigger = bulk.add(_tomb(9999, key="k1"))
    assert bigger.by_key["k1"].id == "t9999" and "t9999" in bigger and "t3" in bigger


def test_a_checkpoint_listing_tombstones_by_id_restores_the_same_winners() -> None:
    """Checkpoints written before issue 13's store list tombstones sorted by
    id: restoring one reorders them so each content hash's and key's newest
    tombstone stays the one the checkpoint names."""
    from quiesce import Override
    from quiesce._core.checkpoint import checkpoint_state, restore_tombs

    buf = Buffer()
    for i, name in enumerate(["z", "a", "m"]):  # same body and key, removed in turn
        e = Entry(name, Kind.REASONING, "same body", key="same-key")
        buf.append(e, override=Override("again", turn=i) if i else None)
        buf.prune([name], reason="gone")
    _fill(buf, 2)
    state = checkpoint_state(buf)
    kept, in_order = restore_tombs(state)
    assert in_order and kept == buf.head().tombs
    state["tombstones"] = sorted(state["tombstones"], key=lambda d: d["id"])
    del state["tomb_runs"]
    again, in_order = restore_tombs(state)
    assert not in_order and again == buf.head().tombs
    assert again.matching(content_hash("same body"), None).id == "m"  # type: ignore[union-attr]
    state["by_hash"] = [
        [h, "a"] if h == content_hash("same body") else [h, i] for h, i in state["by_hash"]
    ]
    state["by_key"] = [["same-key", "z"]]
    with pytest.raises(LogFormatError):
        restore_tombs(state)  # winners no order can honour


# -- checkpoints keep the index, not the tombstones --------------------------------


def _checkpoint_states(kind: str, path: Path) -> list[dict[str, object]]:
    sink = _open(kind, path)
    try:
        _total, seqs = sink.checkpoints()
        return [sink.read_range(s, s + 1)[0].detail["state"] for s in seqs]
    finally:
        sink.close()


@pytest.mark.parametrize("kind", KINDS)
def test_a_checkpoint_keeps_the_tombstone_index_not_every_tombstone(
    kind: str, tmp_path: Path, small_spill: int
) -> None:
    """Regression (issue 13): every checkpoint listed every tombstone ever
    written (about 200 bytes each, all read back from the log), so recovery
    and each checkpoint cost O(history)."""
    path = tmp_path / f"log.{kind}"
    buf = Buffer(log=_open(kind, path), checkpoint_every=0)
    _fill(buf, 40)
    buf.flush(checkpoint=True)
    want = dict(buf.tombstones.items())
    buf.sink.close()  # type: ignore[union-attr]
    (state,) = _checkpoint_states(kind, path)
    assert "tombstones" not in state and "by_hash" not in state
    index = state["tomb_index"]
    assert isinstance(index, dict) and index["n"] == 400
    assert len(json.dumps(state["tomb_index"])) < 40 * 400  # a few bytes per tombstone
    again = Buffer(log=_open(kind, path), checkpoint_every=0)
    assert _held(again) == 0  # every tombstone is read back from its record
    assert dict(again.tombstones.items()) == want
    assert again.head().tombs == buf.head().tombs
    _guard_sees(again, 400)
    _fill(again, 5, start=400)  # the imported index takes more
    _guard_sees(again, 450)
    again._check(expect_no_pins=True)
    again.sink.close()  # type: ignore[union-attr]


_CHILD = """
import sys
sys.path.insert(0, {tests!r})
from test_tomb_index import _fill, _open
from quiesce import Buffer
buf = Buffer(log=_open({kind!r}, {path!r}), checkpoint_every=0)
_fill(buf, 30)
buf.flush(checkpoint=True)
buf.sink.close()
"""


@pytest.mark.parametrize("kind", KINDS)
def test_an_index_written_by_another_process_finds_every_tombstone(
    kind: str, tmp_path: Path
) -> None:
    """The checkpoint's slots were placed by a process with another string
    hash salt: lookups must still find every tombstone (stable hashes)."""
    import subprocess
    import sys

    path = tmp_path / f"log.{kind}"
    code = _CHILD.format(tests=str(Path(__file__).resolve().parent), kind=kind, path=str(path))
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=120)
    (state,) = _checkpoint_states(kind, path)
    assert "tomb_index" in state
    again = Buffer(log=_open(kind, path), checkpoint_every=0)
    _guard_sees(again, 300)
    for i in range(300):
        assert f"e{i}" in again.tombstones
        assert again.head().tombs.by_hash[content_hash(f"body {i}")].id == f"e{i}"
    assert again.head().tombs.by_key["k103"].id == "e103"
    again._check(expect_no_pins=True)
    again.sink.close()  # type: ignore[union-attr]


def _reverse_runs(ix: dict[str, object]) -> None:
    """The index's runs (packed, format 3) in reverse order."""
    from quiesce._core.tombs import _pack_runs, _unpack_runs

    starts, seqs = _unpack_runs(ix["runs"])
    assert len(starts) > 1
    starts.reverse()
    seqs.reverse()
    ix["runs"] = _pack_runs(starts, seqs)


def _as_format_2(ix: dict[str, object]) -> None:
    """The index as format 2 wrote it: its runs a JSON list of pairs."""
    from quiesce._core.tombs import _unpack_runs

    starts, seqs = _unpack_runs(ix["runs"])
    ix["v"] = 2
    ix["runs"] = [[a, b] for a, b in zip(starts, seqs, strict=True)]


def _checkpointed(tmp_path: Path) -> tuple[dict[str, Any], list[LogRecord]]:
    """A SQLite log of 12 filled rounds ending in a checkpoint: the buffer's
    tombstones and the log's records (the buffer closed)."""
    buf = Buffer(log=SQLiteLog(tmp_path / "src.sqlite"), checkpoint_every=0)
    _fill(buf, 12)
    buf.flush(checkpoint=True)
    want = dict(buf.tombstones.items())
    records = list(buf.log)
    buf.sink.close()  # type: ignore[union-attr]
    return want, records


def test_a_format_2_index_is_still_read(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A checkpoint written before the runs were packed (format 2: a list
    of ``[start, seq]`` pairs) is used as it is: recovery starts from it
    (no warning, none of the records before it replayed) and gives the
    same tombstones; its runs reversed, it is refused like a format 3
    one."""
    from quiesce._core.checkpoint import checkpoint_digest, checkpoint_records
    from quiesce._core.tombs import INDEX_FORMAT

    want, records = _checkpointed(tmp_path)
    assert records[-1].detail["state"]["tomb_index"]["v"] == INDEX_FORMAT == 3
    for reverse in (False, True):
        state = copy.deepcopy(records[-1].detail["state"])
        _as_format_2(state["tomb_index"])
        if reverse:
            state["tomb_index"]["runs"].reverse()
        dst = tmp_path / f"dst-{reverse}.sqlite"
        out = SQLiteLog(dst)
        # its anchor written again too (as the writer of format 2 did)
        at = records[-1].time
        out.write([*records[:-2], *checkpoint_records(state, checkpoint_digest(state), at)])
        out.close()
        caplog.clear()
        with caplog.at_level("WARNING", logger="quiesce.checkpoint"):
            again = Buffer(log=SQLiteLog(dst), checkpoint_every=0)
        assert ("skipping checkpoint" in caplog.text) is reverse
        if not reverse:  # recovered from it: the log held from the checkpoint on
            assert again._st.records.first == len(records) - 1
        assert dict(again.tombstones.items()) == want
        _guard_sees(again, 120)
        again._check(expect_no_pins=True)
        again.sink.close()  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda ix: ix["by_id"][0].__setitem__(4, ix["by_id"][0][4][:-8]), id="short"),
        pytest.param(lambda ix: ix["by_hash"][0].__setitem__(2, ix["by_hash"][0][0]), id="count"),
        pytest.param(lambda ix: ix.__setitem__("n", ix["n"] + 1), id="n"),
        pytest.param(_reverse_runs, id="runs"),
        pytest.param(lambda ix: ix.__setitem__("runs", "!!!!"), id="runs-not-base64"),
        pytest.param(lambda ix: ix.__setitem__("runs", "AAAAAAAAAAA="), id="runs-half-a-pair"),
        pytest.param(lambda ix: ix.__setitem__("runs", ""), id="runs-empty"),
        pytest.param(lambda ix: ix.__setitem__("runs", [[0, 1]]), id="runs-a-list-in-format-3"),
        pytest.param(lambda ix: ix.__setitem__("v", 2), id="packed-runs-said-format-2"),
        pytest.param(lambda ix: ix["by_key"][0].__setitem__(1, 40), id="shift"),
        pytest.param(lambda ix: ix["by_id"][0].__setitem__(4, "!!!!"), id="base64"),
    ],
)
def test_a_malformed_index_with_a_good_checksum_falls_back(
    damage: object, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A checkpoint whose index is malformed but checksummed (written by
    hand): recovery skips it with a warning and replays, never a wrong
    state."""
    from quiesce._core.checkpoint import _record

    want, records = _checkpointed(tmp_path)
    state = copy.deepcopy(records[-1].detail["state"])
    assert "tomb_index" in state
    damage(state["tomb_index"])  # type: ignore[operator]
    dst = tmp_path / "dst.sqlite"
    out = SQLiteLog(dst)
    out.write([*records[:-1], _record(state, records[-1].time)])
    out.close()
    with caplog.at_level("WARNING", logger="quiesce.checkpoint"):
        again = Buffer(log=SQLiteLog(dst), checkpoint_every=0)
    assert "skipping checkpoint" in caplog.text
    assert dict(again.tombstones.items()) == want
    _guard_sees(again, 120)
    again._check(expect_no_pins=True)
    again.sink.close()  # type: ignore[union-attr]


def test_inspect_counts_the_tombstones_of_an_index_checkpoint(tmp_path: Path) -> None:
    from quiesce._core.checkpoint import describe_checkpoint

    buf = Buffer(log=SQLiteLog(tmp_path / "log.sqlite"), checkpoint_every=0)
    _fill(buf, 3)
    buf.flush(checkpoint=True)
    assert "30 tombstones" in describe_checkpoint(buf.log[-1])
    buf.sink.close()  # type: ignore[union-attr]


def test_an_index_of_old_keys_imports_past_its_position_limit() -> None:
    """Regression: the key index is rebuilt only when a *keyed* tombstone
    passes its position limit, so after many unkeyed ones it may be
    narrower than the store; importing it was refused as malformed."""
    from array import array

    from quiesce._core.tombs import TombStore

    tombs = EMPTY_TOMBS
    for i in range(70_000):
        tombs = tombs.add(_tomb(i, key=f"k{i}" if i < 10 else None))
    store = tombs._store
    assert store is not None and store._by_key[0].limit < store.n < store._by_id[0].limit
    store._seg_start, store._seg_seq = array("q", [0]), array("q", [5])  # one record holds all
    store._located, store._records = store.n, object()
    exported = store.export()
    assert exported is not None
    again = TombStore.imported(exported, 6, object())
    assert again.n == 70_000 and again._by_key[0].limit == store._by_key[0].limit


@pytest.mark.parametrize("wide", [False, True])
@pytest.mark.parametrize("piece", [32, 96, 1 << 16])
def test_an_index_loads_back_piece_by_piece(
    wide: bool, piece: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``_Index.load`` decodes the base64 a piece at a time straight into
    the slots, counting each piece: whatever the piece size (a multiple of
    32 characters: whole 4- and 8-byte slots), the slots and counts are what
    :meth:`_Index.dump` wrote, and a piece boundary hides no bad slot count."""
    import quiesce._core.tombs as tombs_mod
    from quiesce._core.tombs import _Index

    monkeypatch.setattr(tombs_mod, "_B64_PIECE", piece)
    index = _Index(256, 32 if wide else 16)
    for pos in range(150):
        index.put((pos * 0x9E3779B97F4A7C15) & ((1 << 64) - 1), pos)
    assert index.kill((7 * 0x9E3779B97F4A7C15) & ((1 << 64) - 1), 7)
    dumped = index.dump()
    again = _Index.load(dumped, 150)
    assert again.slots == index.slots
    assert (again.used, again.dead, again.mask, again.shift) == (149, 1, 255, index.shift)
    lying = [*dumped[:2], 150, 0, dumped[4]]  # the dead slot counted as live
    with pytest.raises(LogFormatError, match="other slot counts"):
        _Index.load(lying, 150)


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda raw: raw[:-4], id="short"),
        pytest.param(lambda raw: raw + "AAAA", id="long"),
        pytest.param(lambda raw: "!" + raw[1:], id="not-base64"),
        pytest.param(lambda raw: raw[:100] + "==" + raw[102:], id="padding-inside"),
        pytest.param(lambda raw: raw[:100] + "\n" + raw[101:], id="newline"),
        pytest.param(lambda raw: raw[:100] + "é" + raw[101:], id="not-ascii"),
        pytest.param(lambda raw: raw[:-2] + "AA", id="no-padding"),
    ],
)
def test_a_damaged_index_text_is_refused(damage: object) -> None:
    """Base64 that is not exactly what ``dump`` writes (strict: the
    alphabet only, padding only at the end, the exact length) is a
    :class:`LogFormatError`, never a partly decoded index."""
    from quiesce._core.tombs import _Index

    index = _Index(64, 16)
    for pos in range(20):
        index.put(pos * 7919 + 3, pos)
    size, shift, used, dead, raw = index.dump()
    bad = damage(raw)  # type: ignore[operator]
    assert bad != raw
    with pytest.raises(LogFormatError, match="tombstone index"):
        _Index.load([size, shift, used, dead, bad], 20)


@settings(max_examples=300, deadline=None)
@given(
    width=st.sampled_from([4, 8]),
    slots=st.lists(st.sampled_from(["zero", "tomb", "tomb-shifted", "other"]), max_size=64),
    seed=st.integers(0, 2**32 - 1),
)
def test_lane_counts_are_the_exact_slot_counts(width: int, slots: list[str], seed: int) -> None:
    """``_lane_counts`` (the load's slot counts) is what counting the
    slots one by one gives: dead slots are counted, the tomb's bytes
    across two slots (no slot equals the tomb) are not, whatever else the
    slots hold."""
    import random
    from array import array

    from quiesce._core.tombs import _Index, _lane_counts

    rng = random.Random(seed)
    shift = 32 if width == 8 else rng.randint(16, 24)
    tomb = _Index(16, shift).tomb
    tomb_bytes = tomb.to_bytes(width, "little")
    out = bytearray()
    for kind in slots:
        if kind == "zero":
            out += bytes(width)
        elif kind == "tomb":
            out += tomb_bytes
        elif kind == "tomb-shifted":  # the tomb's bytes straddling two slots
            half = width // 2
            out += bytes(half) + tomb_bytes[:half]
            out += tomb_bytes[half:] + bytes(width - half)
        else:
            out += rng.randbytes(width)
    values = array("Q" if width == 8 else "I", bytes(out))
    want = (sum(1 for v in values if v), sum(1 for v in values if v == tomb))
    assert _lane_counts(bytes(out), width, tomb) == want
