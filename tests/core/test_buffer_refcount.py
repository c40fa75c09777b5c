"""A buffer's parts hold no strong reference back to it: a forgotten buffer
is freed (and its log's file lock released) when its last reference goes,
not only when the cycle collector runs."""

from __future__ import annotations

import gc
import weakref
from pathlib import Path

from quiesce import Buffer, Entry, JsonlLog, Kind


def _freed_without_gc(make: object) -> bool:
    gc.disable()
    try:
        buf = make()  # type: ignore[operator]
        ref = weakref.ref(buf)
        del buf
        return ref() is None
    finally:
        gc.enable()


def test_an_empty_buffer_is_freed_by_its_last_reference() -> None:
    assert _freed_without_gc(Buffer)


def test_a_used_buffer_with_staged_removals_is_freed_by_its_last_reference(tmp_path: Path) -> None:
    def make() -> Buffer:
        buf = Buffer(log=JsonlLog(tmp_path / "log.jsonl"))
        buf.append(Entry("a", Kind.REASONING, "one"))
        buf.append(Entry("b", Kind.REASONING, "two"))
        with buf.snapshot():
            buf.prune(["a"], reason="done")  # staged: a reader is pinned
        w = buf.open_stream("c", Kind.REASONING)
        w.write("partial")
        w.close()
        return buf

    assert _freed_without_gc(make)
    JsonlLog(tmp_path / "log.jsonl").close()  # the lock went with the buffer


def test_the_parts_go_with_the_buffer(tmp_path: Path) -> None:
    """The parts hold each other downwards only (a lower part reaches a
    higher one through a weak hook): the last reference to the buffer frees
    the parts that hooks reach weakly, with the cycle collector off."""
    gc.disable()
    try:
        buf = Buffer(log=JsonlLog(tmp_path / "log.jsonl"))
        buf.append(Entry("a", Kind.REASONING, "one"))
        with buf.snapshot():
            buf.prune(["a"], reason="done")
        buf.open_stream("s", Kind.REASONING).close()
        refs = [weakref.ref(p) for p in (buf._grace, buf._pub, buf._streams)]
        del buf
        assert [r() for r in refs] == [None, None, None]
    finally:
        gc.enable()
