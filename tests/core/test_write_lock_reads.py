"""No disk under the write lock (issue 21): with the tombstones spilled to
the sink (>= 1,024 durable ones), every check that needs one back reads it
*before* the write lock is taken, never while it is held — the policy's
signed-reasoning check of a tool call's result, an edit's rewrite of an
id that is not live, and a prefetched tombstone another thread's prefetch
would have evicted meanwhile. Each test counts the sink reads made while
the calling thread holds the write lock (behaviour, not timing).
Synchronous: threads, no event loop."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from quiesce import Buffer, EditPlan, Entry, Kind, ReadmissionRefused, Rewrite, SQLiteLog
from quiesce._core.entry import result_id

THINKING = {"type": "thinking", "thinking": "the pods first", "signature": "c2lnbmVk"}


def _fill(buf: Buffer, n: int, *, batch: int = 200) -> None:
    for start in range(0, n, batch):
        ids = [f"e{i}" for i in range(start, min(n, start + batch))]
        for i in ids:
            buf.append(Entry(i, Kind.REASONING, f"body {i[1:]}"))
        buf.prune(ids, reason="stale")


@contextmanager
def _counted(buf: Buffer) -> Iterator[tuple[list[int], list[int]]]:
    """``(all reads, reads under the write lock)`` of the sink, by start seq."""
    records = buf._st.records
    reader = records.reader
    assert reader is not None
    lock = buf._st.write_lock
    every: list[int] = []
    locked: list[int] = []

    def counting(start: int, stop: int) -> Any:
        every.append(start)
        if lock._is_owned():  # type: ignore[attr-defined]
            locked.append(start)
        return reader(start, stop)

    records.reader = counting  # type: ignore[assignment]
    try:
        yield every, locked
    finally:
        records.reader = reader


def _spilled(buf: Buffer) -> None:
    buf.flush()
    store = buf.head().tombs._store
    assert store is not None and store.held < store.n  # read back from their records


@pytest.fixture
def buf(tmp_path: Path) -> Iterator[Buffer]:
    log = SQLiteLog(tmp_path / "log.db")
    b = Buffer(log=log, checkpoint_every=0)
    try:
        yield b
    finally:
        log.close()


def test_the_signed_reasoning_check_reads_the_result_tombstone_first(buf: Buffer) -> None:
    """Pruning signed thinking with its tool call asks whether the call was
    answered: a tombstone of the call's result, spilled. That lookup used to
    read the sink under the write lock; it is read before."""
    buf.append(Entry("th", Kind.REASONING, "thinking", content=THINKING))
    buf.append(Entry("c1", Kind.TOOL_CALL, "kubectl get pods", refs=("th",)))
    buf.append(Entry(result_id("c1"), Kind.TOOL_OUTPUT, "3 pods", refs=("c1",)))
    assert buf.prune([result_id("c1")], reason="read")[result_id("c1")].refusal is None
    _fill(buf, 1500)
    _spilled(buf)
    with _counted(buf) as (every, locked):
        report = buf.prune(["th", "c1"], reason="done")
    assert report["th"].refusal is None and report["c1"].refusal is None
    assert every, "the result's tombstone was read back"
    assert locked == []
    assert "th" in buf.tombstones and "c1" in buf.tombstones
    buf._check()


def test_a_rewrite_of_a_pruned_id_reads_nothing_under_the_lock(buf: Buffer) -> None:
    """A rewrite of an id that is not live (pruned long ago, spilled) is
    refused ``UNKNOWN`` (or ``CONFLICT`` after ``base``); the tombstone it
    names is read before the lock. (A guard: this one already held on the
    code before the prefetch holds.)"""
    _fill(buf, 1500)
    _spilled(buf)
    for base in (None, 1):
        with _counted(buf) as (_every, locked):
            report = buf.edit(EditPlan([Rewrite("e3", "new body")], reason="fix", base=base))
        assert not report.applied
        assert locked == []
    buf._check()


def test_a_prefetch_is_kept_until_its_lookup_ran(buf: Buffer) -> None:
    """Thread A reads back the tombstone its append will check, then waits
    for the write lock; meanwhile other threads prefetch hundreds of other
    spilled tombstones (more than the store keeps). A's prefetched one
    must still be in memory when it gets the lock: it used to be evicted,
    and A's re-admission guard read the sink under the lock."""
    _fill(buf, 1500)
    _spilled(buf)
    tombs = buf.head().tombs
    result: list[object] = []
    with _counted(buf) as (every, locked):
        buf._st.write_lock.acquire()
        try:

            def append() -> None:
                try:
                    buf.append(Entry("again", Kind.REASONING, "body 11"))
                except ReadmissionRefused as exc:
                    result.append(exc.tombstone)

            a = threading.Thread(target=append, daemon=True)
            a.start()
            _wait_for(lambda: len(every) > 0)  # A's prefetch read it, A waits for the lock

            def others() -> None:
                for k in range(0, 1200, 4):
                    tombs.prefetch([f"e{k}"])

            b = threading.Thread(target=others, daemon=True)
            b.start()
            b.join(60)
            assert not b.is_alive()
        finally:
            buf._st.write_lock.release()
        a.join(60)
        assert not a.is_alive()
    assert [getattr(t, "id", None) for t in result] == ["e11"]
    assert locked == []
    buf._check()


def _wait_for(cond: Callable[[], bool]) -> None:
    done = threading.Event()
    for _ in range(2000):
        if cond():
            return
        done.wait(0.005)
    raise AssertionError("never happened")
