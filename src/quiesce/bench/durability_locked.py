"""Question 4 of the ``durability`` section of ``quiesce bench``
(:mod:`.durability`): ``mark_stale`` while the SQLite database is locked
(``durability_mark_locked_p99``, issue 21).

What it keeps true: the lock is another connection's ``BEGIN EXCLUSIVE``
on the measured log, always released (and every thread joined) before the
figure returns; the marks are timed on the wall clock in their own thread.
"""

from __future__ import annotations

import contextlib
import sqlite3
import statistics
import threading
import time
from typing import Any

from quiesce import Buffer, Entry, EntryPruned, Kind, ReadmissionRefused, SQLiteLog

from .durability_sinks import DurabilityConfig, _Sinks
from .lib import Goal

__all__: list[str] = []


def _marks_while_locked(dcfg: DurabilityConfig, sinks: _Sinks) -> tuple[Goal, dict[str, Any]]:
    """``durability_mark_locked_p99`` (issue 21, defect 6): a ``SQLiteLog``
    buffer with 1,200 durable tombstones (spilled: read back from their
    records), the database held by another connection (``BEGIN
    EXCLUSIVE``), a flush stuck in its commit; an agent thread every 2 ms
    appends a re-admission candidate (refused) and marks a pruned id
    (``EntryPruned``), both reading their tombstone back; the measured
    thread marks live entries for a second of the lock (0.5 s quick), each
    call timed (wall clock, 0.2 ms apart; a mark still waiting when the lock
    goes counts its whole wait). Goal: p99 <= 1 ms. Before issue 21 the
    agent's reads ran under the write lock and waited on the stuck writer:
    a mark waited as long as the lock was held (1.1 s of a 1 s window)."""
    path = sinks.path()
    buf = Buffer(log=SQLiteLog(path, timeout=60), checkpoint_every=0)
    pruned = 1_200
    for start in range(0, pruned, 100):
        ids = [f"p{j}" for j in range(start, start + 100)]
        for eid in ids:
            buf.append(Entry(eid, Kind.REASONING, f"pruned output {eid}"))
        buf.prune(ids, reason="stale")
    marks = 2_000 if dcfg.sustained_s < 0.5 else 5_000
    for i in range(marks):
        buf.append(Entry(f"m{i}", Kind.REASONING, f"live step {i}"))
    buf.flush()
    locker = sqlite3.connect(path, isolation_level=None)
    locker.execute("BEGIN EXCLUSIVE")
    buf.append(Entry("pending", Kind.REASONING, "waits for the stuck flush"))
    stop = threading.Event()
    agent_ops = [0]

    def flush() -> None:
        with contextlib.suppress(Exception):
            buf.flush()

    def agent() -> None:
        i = 0
        while not stop.is_set():
            with contextlib.suppress(ReadmissionRefused):
                buf.append(Entry(f"again{i}", Kind.REASONING, f"pruned output p{i % pruned}"))
            with contextlib.suppress(EntryPruned):
                buf.mark_stale(f"p{(i * 7) % pruned}", "again")
            agent_ops[0] += 1
            i += 1
            time.sleep(0.002)

    times: list[float] = []

    def marker() -> None:
        clock = time.perf_counter
        for i in range(marks):
            if stop.is_set():
                return
            t0 = clock()
            buf.mark_stale(f"m{i}", "stale")
            times.append(clock() - t0)
            time.sleep(0.0002)

    flusher = threading.Thread(target=flush, daemon=True)
    threads = [threading.Thread(target=agent, daemon=True), threading.Thread(target=marker)]
    window = 0.5 if dcfg.sustained_s < 0.5 else 1.0
    try:
        flusher.start()
        time.sleep(0.05)  # the flush is in its commit, waiting for the lock
        for t in threads:
            t.start()
        threads[1].join(window)  # marks for at most `window` seconds of the lock
        stop.set()
        still_locked = flusher.is_alive()
    finally:
        # a mark still waiting ends once the lock goes: its whole wait counts
        locker.execute("ROLLBACK")
        locker.close()
        for t in (flusher, *threads):
            t.join()
        buf.sink.close()  # type: ignore[union-attr]
    times.sort()
    p99 = times[min(len(times) - 1, int(0.99 * len(times)))]
    extra = {
        "marks": len(times),
        "p50_ms": round(statistics.median(times) * 1e3, 4),
        "p99_ms": round(p99 * 1e3, 4),
        "max_ms": round(times[-1] * 1e3, 4),
        "agent_refusals": agent_ops[0],
        "database_locked_throughout": still_locked,
    }
    goal = Goal(
        "durability_mark_locked_p99",
        "mark from another thread while the database is locked, p99, ms",
        p99 * 1e3,
        1.0,
        "<=",
        note=(
            f"{len(times):,} marks; p50 {extra['p50_ms']} ms, max {extra['max_ms']} ms; "
            f"{agent_ops[0]:,} refused re-admissions and pruned-id marks meanwhile"
            + ("" if still_locked else "; the stuck flush gave up before the window ended")
        ),
    )
    return goal, extra
