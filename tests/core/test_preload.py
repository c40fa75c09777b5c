"""``quiesce.testing.preloaded`` and the core's ``preload``: a new buffer's
first version built in one step behaves as after the same appends, writes no
log record for the load, and refuses any buffer that is not new. Sync: no
event loop involved."""

from __future__ import annotations

from pathlib import Path

import pytest

from quiesce import Buffer, Entry, InvalidArgument, Kind, SQLiteLog
from quiesce._core.preload import preload
from quiesce.testing import preloaded


def _entries(n: int) -> list[Entry]:
    return [Entry(f"e{i}", Kind.REASONING, f"step {i}") for i in range(n)]


def test_a_preloaded_buffer_marks_and_prunes_as_after_appends() -> None:
    """Version 1 holds the entries in order, the first ``marked`` marked; the
    mark fast path knows the rest are unmarked; the invariants hold."""
    buf = preloaded(_entries(50), marked=10)
    assert buf.head().number == 1
    with buf.snapshot() as snap:
        assert [e.id for e in snap.entries()] == [f"e{i}" for i in range(50)]
        assert snap.is_stale("e9") and not snap.is_stale("e10")
    assert len(buf.log) == 0  # the load itself writes no record
    buf.mark_stale("e10", "later")
    buf.prune(["e10"], reason="stale")
    assert "e10" not in buf.head().live
    assert [r.op for r in buf.log] == ["mark", "prune", "remove"]
    buf.check_invariants(expect_no_pins=True)


def test_its_sink_receives_only_what_comes_after_the_load(tmp_path: Path) -> None:
    """With an empty sink, the first flushed record is seq 0: the operations
    after the load, never the load."""
    sink = SQLiteLog(tmp_path / "log.db")
    buf = preloaded(_entries(20), log=sink)
    buf.mark_stale("e3", "later")
    buf.flush()
    assert [(r.seq, r.op, r.ids) for r in sink.load()] == [(0, "mark", ("e3",))]
    sink.close()


def test_preload_refuses_a_buffer_that_is_not_new() -> None:
    """A buffer with entries (or a log) is refused with InvalidArgument and
    left exactly as it was."""
    buf = Buffer()
    buf.append(Entry("a", Kind.REASONING, "x"))
    head = buf.head()
    with pytest.raises(
        InvalidArgument,
        match=r"^preload needs a new buffer: no entries, no log records, no readers$",
    ):
        preload(buf, _entries(3))
    assert buf.head() is head
    assert list(buf.head().live) == ["a"]


def test_preload_refuses_a_buffer_with_a_reader() -> None:
    """A pinned reader makes the buffer not new: refused, head unchanged."""
    buf = Buffer()
    with buf.snapshot(), pytest.raises(InvalidArgument, match=r"^preload needs a new buffer"):
        preload(buf, _entries(3))
    assert buf.head().number == 0
