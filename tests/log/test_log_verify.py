"""``quiesce verify`` and ``Buffer.verify()`` in bounded memory (issue 21:
"constant memory in the log's length").

A full replay that compares every checkpoint keeps, whatever the log's
length: the replayed state (a bounded live window), one chunk of records,
and the tombstone index slots a durable buffer keeps too (plus the
checkpoint's own copy of them while it is compared: a checkpoint carries
its index, so it grows with the tombstones it indexes). Nothing per
tombstone beyond those slots: not the removal records' tombstone lists
(a temporary file on the stream-only path, the log itself for
``Buffer.verify()``), not lists of every tombstone to compare (keyed
multiset digests). Measured with tracemalloc peaks on logs of growing
length, never with timings; the tombstones' ids are long, so anything
kept per tombstone beyond index slots shows. Synchronous: no event loop.
"""

from __future__ import annotations

import re
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest

import quiesce._core.tombs as tombs_mod
import quiesce._core.verify as verify_mod
import quiesce._log.sqlite as sqlite_mod
from _verify_logs import long_lived
from quiesce import Buffer, Entry, Kind, LogFormatError, Override, SQLiteLog
from quiesce._core.verify import state_fields, tomb_digests, verify_records
from quiesce._log.inspect import _open
from quiesce._log.verify import TempRemovals, verify_path

#: every tombstone's id is this long: kept per tombstone, it would show
_ID_PAD = "x" * 160
#: what the index slots cost per tombstone at most: the replay's, and the
#: compared checkpoint's (its record's text, decoded JSON and SHA-256 input
#: and the slots restored from it)
_SLOT_BYTES = 400


def _long_lived(path: Path, rounds: int) -> int:
    """The tombstone count of :func:`long_lived` (a SQLite log, a checkpoint
    every 500 records)."""
    return len(long_lived(path, rounds, pad=_ID_PAD).tombstones)


def _peak(fn: Callable[[], object]) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _verify_through_the_log(path: Path) -> int:
    log = SQLiteLog(path)
    try:
        buf = Buffer(log=log)
        return _peak(buf.verify)
    finally:
        log.close()


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Small chunks of records (replayed, streamed from SQLite) and small
    spills of tombstones, so that the shorter log is past every chunk's
    size already and what grows with the log stands out."""
    monkeypatch.setattr(verify_mod, "CHUNK", 32)
    monkeypatch.setattr(sqlite_mod, "_STREAM_CHUNK", 16, raising=False)
    monkeypatch.setattr(tombs_mod, "SPILL_LEAST", 16)


def _growth(tmp_path: Path, path_kind: str, rounds: int) -> None:
    short, long = tmp_path / "short.db", tmp_path / "long.db"
    t_short, t_long = _long_lived(short, rounds), _long_lived(long, 10 * rounds)
    if path_kind == "stream":
        peaks = [_peak(lambda p=p: verify_path(str(p))) for p in (short, long)]
    else:
        peaks = [_verify_through_the_log(p) for p in (short, long)]
    allowed = 1.2 * peaks[0] + _SLOT_BYTES * (t_long - t_short)
    assert peaks[1] <= allowed, (
        f"peak {peaks[1]:,} B on {t_long:,} tombstones, {peaks[0]:,} B on {t_short:,}: "
        f"{(peaks[1] - peaks[0]) / (t_long - t_short):.0f} B per extra tombstone"
    )


@pytest.mark.usefixtures("small_chunks")
class TestVerifyMemory:
    def test_a_10x_longer_log_costs_only_index_slots(self, tmp_path: Path) -> None:
        """``quiesce verify``'s peak memory on a log 10x longer, same live
        window: at most 1.2x the shorter log's plus :data:`_SLOT_BYTES` per
        extra tombstone (the default-suite size: 80 and 800 tombstones)."""
        _growth(tmp_path, "stream", 8)

    @pytest.mark.slow
    @pytest.mark.parametrize("path_kind", ["stream", "log"])
    def test_a_10x_longer_log_costs_only_index_slots_long(
        self, tmp_path: Path, path_kind: str
    ) -> None:
        """The same at 300 and 3,000 tombstones, from a stream and through
        the log (``Buffer.verify()``); measured on a loaded 2-core machine:
        about 350 B and 250 B per extra tombstone (the code before: 2,420 B
        from a stream, 7.3 MB against 0.76 MB)."""
        _growth(tmp_path, path_kind, 30)

    def test_the_stream_path_keeps_removals_out_of_memory(self, tmp_path: Path) -> None:
        """``quiesce verify``'s removal records go to a temporary file: 16
        bytes of memory each, however many tombstones each lists."""
        path = tmp_path / "log.db"
        _long_lived(path, 8)
        with TempRemovals() as removals:
            _kind, _fmt, _torn, stream = _open(str(path))
            result = verify_records(stream(), Buffer, removals=removals)
            assert result.disagreement is None and result.checkpoints >= 1
            kept = removals.read_range(removals._seqs[0], removals._seqs[0] + 1)
            assert len(kept[0].detail["tombstones"]) == 10
            assert len(removals._seqs) == 8


class TestDigests:
    def test_digests_do_not_depend_on_the_order(self) -> None:
        """Two buffers with the same tombstones written in another order have
        the same digests: rows and winners are multisets."""
        a, b = Buffer(), Buffer()
        for buf, order in ((a, ["p", "q", "r"]), (b, ["r", "q", "p"])):
            for i in order:
                buf.append(Entry(i, Kind.REASONING, f"body of {i}"))
            buf.prune(order, reason="done")
        assert [t.id for t in a.head().tombs.values()] != [t.id for t in b.head().tombs.values()]
        assert tomb_digests(a.head().tombs) == tomb_digests(b.head().tombs)

    def test_a_different_tombstone_or_winner_changes_the_digest(self) -> None:
        """A changed row (the reason) changes the rows digest; which tombstone
        is the newest of a content hash changes the winners digest."""
        a, b = Buffer(), Buffer()
        for buf, reason in ((a, "done"), (b, "other")):
            buf.append(Entry("p", Kind.REASONING, "same"))
            buf.prune(["p"], reason=reason)
        assert tomb_digests(a.head().tombs)[0] != tomb_digests(b.head().tombs)[0]
        # two tombstones of one content hash: which is the newest differs
        x, y = Buffer(), Buffer()
        for buf, first, second in ((x, "p", "q"), (y, "q", "p")):
            buf.append(Entry(first, Kind.REASONING, "twice"))
            buf.prune([first], reason="done")
            buf.append(Entry(second, Kind.REASONING, "twice"), override=Override("again", 1))
            buf.prune([second], reason="done")
        assert tomb_digests(x.head().tombs)[1] != tomb_digests(y.head().tombs)[1]

    def test_a_mismatch_names_the_differing_tombstone(self, tmp_path: Path) -> None:
        """A checkpoint whose tombstone count agrees but one row differs is
        named by that row (of the first digest bucket that differs: the
        replay's or the checkpoint's)."""
        a, b = Buffer(), Buffer()
        for buf, reason in ((a, "done"), (b, "lied about")):
            for k in range(300):
                buf.append(Entry(f"e{k}", Kind.REASONING, f"body {k}"))
            buf.prune([f"e{k}" for k in range(299)], reason="done")
            buf.prune(["e299"], reason=reason)
        found = verify_mod.compare(state_fields(b), state_fields(a), 7)
        assert found is not None and found.field == "tombstones"
        assert re.match(r"^the (replay|checkpoint) has \('e299', '[0-9a-f]{16}', ", found.detail)
        assert ("'done'" in found.detail) == found.detail.startswith("the replay")


def test_verify_path_still_refuses_a_damaged_log(tmp_path: Path) -> None:
    """The temporary removal store does not hide a log that cannot be
    replayed: a removal record cut off from its tombstones is refused."""
    path = tmp_path / "bad.db"
    path.write_bytes(b"not a log at all, longer than a header" * 4)
    with pytest.raises(LogFormatError):
        verify_path(str(path))
