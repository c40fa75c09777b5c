"""The memory, recovery and gc-pause figures of the ``long_life`` section
of ``quiesce bench`` (``ll_memory_*``, ``ll_recovery_*``, ``ll_sqlite_open``,
``ll_big_outputs``, the sides of ``ll_gc_pause``, and the curves drawn as
``long_life.png``; :mod:`.long_life` documents each figure and runs them).

What it keeps true: the long runs are traced by tracemalloc and sampled
without allocating anything that outlives a sample (:class:`_Curve`), and
each figure compares the aged buffer or log with a fresh or short one built
from the same live window in the same run.
"""

from __future__ import annotations

import gc
import os
import sqlite3
import statistics
import time
from array import array
from collections.abc import Callable
from typing import Any

from .. import Buffer, Entry, Kind, SQLiteLog
from .lib import Goal, SectionResult, _traced
from .long_life_workload import (
    CHECKPOINT_EVERY,
    LongLifeConfig,
    _alternate,
    _Curve,
    _fresh_like,
    _geometric,
    _LoadOnly,
    _ratio_goal,
    _timed,
    churn,
)

__all__: list[str] = []


def _memory_and_recovery(
    ll: LongLifeConfig, tmp: str, res: SectionResult, keep: list[Any]
) -> tuple[str, str]:
    """Figures 1-3, 5, 6, 13. Returns the long and short log paths."""
    long_path = os.path.join(tmp, "long.sqlite")
    short_path = os.path.join(tmp, "short.sqlite")

    # the curves: memory and per-op cost at ~15 points of each long run, and
    # copies of the long log at a few points (recovery against log length)
    samples = _geometric(max(ll.live * 3, ll.ops // 300), ll.ops, 15)
    copy_at = _geometric(ll.ops_short, ll.ops, 5)[:-1]  # the last is the long log
    # made before the traced runs, so what the samples and copies keep is
    # not counted in the runs' memory: the copies' paths and done counts
    copy_paths = [os.path.join(tmp, f"copy-{k}.sqlite") for k in range(len(copy_at))]
    copy_done = array("q", bytes(8 * len(copy_at)))
    copied = [0, 0.0]  # copies taken, seconds spent taking them
    current: list[Buffer | None] = [None]

    def backup(done: int) -> None:
        """Flush the durable buffer and copy its log (SQLite backup API, a
        connection of its own) when ``done`` reached the next copy point."""
        k = int(copied[0])
        if k >= len(copy_at) or done < copy_at[k]:
            return
        t0 = time.perf_counter()
        buf = current[0]
        assert buf is not None
        buf.flush()
        src, dst = sqlite3.connect(long_path), sqlite3.connect(copy_paths[k])
        try:
            src.backup(dst)
        finally:
            dst.close()
            src.close()
        copy_done[k] = done
        copied[0] = k + 1
        copied[1] += time.perf_counter() - t0

    curves: dict[str, Any] = {
        "note": "bytes: tracemalloc, beyond the start of the run, after a gc.collect(); "
        "per_op_us: wall time per operation since the previous point, under "
        "tracemalloc (slower than untraced); recovery: Buffer(log=SQLiteLog(copy)) "
        "of copies of the durable log taken during the run, median, and reading "
        "its newest checkpoint and tail (read_range); durable.seconds_traced "
        "includes the samples and the copies (backup_s)",
    }

    durable_at = sorted({*samples, *copy_at})
    durable_curve = _Curve(len(durable_at), after=backup)

    def durable() -> Buffer:
        durable_curve.start()
        buf = Buffer(log=SQLiteLog(long_path))
        current[0] = buf
        churn(buf, ll.ops, ll.live, ll.batch, sample_at=durable_at, on_sample=durable_curve)
        buf.flush()
        current[0] = None
        return buf

    t_durable, (durable_bytes, dbuf) = _timed(lambda: _traced(durable))
    fresh_bytes, _fresh = _traced(_fresh_like(dbuf))
    records_long = len(dbuf.log)
    res.extra["durable"] = {
        "ops": ll.ops,
        "records": records_long,
        "seconds_traced": round(t_durable, 2),
        "bytes": durable_bytes,
        "fresh_bytes": fresh_bytes,
        "live": len(dbuf),
        "tombstones": len(dbuf.tombstones),
        "file_bytes": os.path.getsize(long_path),
    }
    res.goals.append(
        Goal(
            "ll_memory_durable",
            f"memory after {ll.ops:,} ops, {ll.live:,} live, SQLite log / fresh buffer",
            durable_bytes / fresh_bytes,
            10.0,
            "<=",
            note=f"{durable_bytes / 1e6:.1f} MB / {fresh_bytes / 1e6:.2f} MB",
        )
    )
    keep.append(dbuf)
    keep.append(_fresh)

    memory_curve = _Curve(len(samples))

    def in_memory() -> Buffer:
        memory_curve.start()
        buf = Buffer()
        churn(buf, ll.ops, ll.live, ll.batch, sample_at=samples, on_sample=memory_curve)
        return buf

    mem_bytes, mbuf = _traced(in_memory)
    tombs = len(mbuf.tombstones)
    limit = 10.0 + 100.0 * tombs / fresh_bytes
    res.extra["in_memory"] = {"bytes": mem_bytes, "tombstones": tombs, "records": len(mbuf.log)}
    res.goals.append(
        Goal(
            "ll_memory_in_memory",
            f"memory after {ll.ops:,} ops, {ll.live:,} live, no sink / fresh "
            f"(limit: 10x + 100 B per tombstone)",
            mem_bytes / fresh_bytes,
            round(limit, 2),
            "<=",
            note=f"{mem_bytes / 1e6:.1f} MB / {fresh_bytes / 1e6:.2f} MB, {tombs:,} tombstones",
        )
    )
    keep.append(mbuf)
    dbuf.sink.close()

    # the short log: same live window, ops_short operations
    short_sink = SQLiteLog(short_path)
    sbuf = Buffer(log=short_sink)
    churn(sbuf, ll.ops_short, ll.live, ll.batch)
    sbuf.flush()
    short_sink.close()
    res.extra["short_records"] = len(sbuf.log)
    del sbuf

    def recover(path: str) -> Callable[[], float]:
        def run() -> float:
            gc.collect()
            t, buf = _timed(lambda: Buffer(log=SQLiteLog(path)))
            buf.sink.close()
            return t

        return run

    rec_long, rec_short = _alternate(recover(long_path), recover(short_path), max(2, ll.repeat - 2))
    res.goals.append(
        _ratio_goal(
            "ll_recovery_long_short",
            f"recovery of a {records_long:,}-record log / a {res.extra['short_records']:,}-record "
            f"log, same live window",
            rec_long,
            rec_short,
            2.0,
        )
    )

    def read_log(path: str) -> Callable[[], float]:
        def run() -> float:
            gc.collect()
            t0 = time.perf_counter()
            read_newest_checkpoint(path)
            return time.perf_counter() - t0

        return run

    read_records = read_log(long_path)

    def read_rows() -> float:
        """Fetch the rows recovery needs, not decoded: the newest checkpoint
        and its tail (the whole log when it has no checkpoint)."""
        gc.collect()
        t0 = time.perf_counter()
        conn = sqlite3.connect(long_path)
        try:
            newest = conn.execute(
                "SELECT COALESCE(MAX(seq), 0) FROM quiesce_log WHERE op = 'checkpoint'"
            ).fetchone()[0]
            for _row in conn.execute(
                "SELECT seq, record FROM quiesce_log WHERE seq >= ? ORDER BY seq", (newest,)
            ):
                pass
        finally:
            conn.close()
        return time.perf_counter() - t0

    rec_long2, reads = _alternate(recover(long_path), read_records, max(2, ll.repeat - 2))
    rec_raw, raw_reads = _alternate(recover(long_path), read_rows, max(2, ll.repeat - 2))
    res.extra["recovery_vs_raw_rows"] = {
        "recovery_s": round(statistics.median(rec_raw), 4),
        "raw_rows_s": round(statistics.median(raw_reads), 4),
        "ratio": round(statistics.median(rec_raw) / statistics.median(raw_reads), 1),
    }
    probe = SQLiteLog(long_path)
    total, checkpoints = probe.checkpoints()
    probe.close()
    res.extra["checkpoints"] = {
        "every": CHECKPOINT_EVERY,
        "count": len(checkpoints),
        "tail_records": total - (checkpoints[-1] if checkpoints else 0),
    }
    res.goals.append(
        _ratio_goal(
            "ll_recovery_vs_read",
            f"recovery of a {records_long:,}-record log / reading its newest checkpoint and "
            f"tail through the log ({len(checkpoints)} checkpoints, one per "
            f"{CHECKPOINT_EVERY:,} records; over the raw rows: "
            f"{res.extra['recovery_vs_raw_rows']['ratio']}x)",
            rec_long2,
            reads,
            3.0,
        )
    )

    def full_replay() -> float:
        """Recovery as it was before checkpoints: every record replayed (a
        sink that only loads and writes, so the buffer cannot use them)."""
        gc.collect()
        t0 = time.perf_counter()
        log = _LoadOnly(SQLiteLog(long_path))
        Buffer(log=log)
        log.close()
        return time.perf_counter() - t0

    rec_long3, replays = _alternate(recover(long_path), full_replay, max(2, ll.repeat - 2))
    res.extra["recovery_checkpoint_vs_full_replay"] = {
        "checkpoint_s": round(statistics.median(rec_long3), 4),
        "full_replay_s": round(statistics.median(replays), 4),
        "ratio": round(statistics.median(replays) / statistics.median(rec_long3), 1),
    }

    rec_bytes, rbuf = _traced(lambda: Buffer(log=SQLiteLog(long_path)))
    res.goals.append(
        Goal(
            "ll_memory_recovered",
            f"memory of a buffer recovered from a {records_long:,}-record log / fresh",
            rec_bytes / fresh_bytes,
            10.0,
            "<=",
            note=f"{rec_bytes / 1e6:.1f} MB / {fresh_bytes / 1e6:.2f} MB",
        )
    )
    rbuf.sink.close()
    del rbuf

    def open_log(path: str) -> Callable[[], float]:
        def run() -> float:
            t, log = _timed(lambda: SQLiteLog(path))
            log.close()
            return t

        return run

    o_long, o_short = _alternate(open_log(long_path), open_log(short_path), ll.repeat * 2)
    res.goals.append(
        _ratio_goal(
            "ll_sqlite_open",
            f"SQLiteLog open, {records_long:,} records / {res.extra['short_records']:,}",
            o_long,
            o_short,
            2.0,
        )
    )

    # recovery against log length: the copies taken during the run, and the
    # long log itself (after the goals above, so it does not disturb them)
    t0 = time.perf_counter()
    recovery = []
    curves["durable"] = durable_curve.points()
    curves["in_memory"] = memory_curve.points()
    copies = [(int(copy_done[k]), copy_paths[k]) for k in range(int(copied[0]))]
    for done, path in [*copies, (durable_curve.points()[-1]["ops"], long_path)]:
        probe = SQLiteLog(path)
        total, checkpoints = probe.checkpoints()
        probe.close()
        recs, reads = _alternate(recover(path), read_log(path), max(2, ll.repeat - 2))
        recovery.append(
            {
                "ops": done,
                "records": total,
                "checkpoints": len(checkpoints),
                "tail_records": total - (checkpoints[-1] if checkpoints else 0),
                "recovery_s": round(statistics.median(recs), 5),
                "read_s": round(statistics.median(reads), 5),
            }
        )
    curves["recovery"] = recovery
    curves["fresh_bytes"] = fresh_bytes
    curves["backup_s"] = round(copied[1], 3)
    curves["recovery_curve_s"] = round(time.perf_counter() - t0, 3)
    res.extra["curves"] = curves
    return long_path, short_path


def _big_outputs(ll: LongLifeConfig, tmp: str, res: SectionResult) -> None:
    """Figure 4: 100 KB tool outputs in a window of ten, with a SQLite log."""
    path = os.path.join(tmp, "big.sqlite")
    size = 100_000
    filler = "tool output line with some data " * (size // 32 + 1)

    def run() -> Buffer:
        buf = Buffer(log=SQLiteLog(path))
        window: list[str] = []
        for i in range(ll.big_cycles + 10):
            e = Entry(f"out{i}", Kind.TOOL_OUTPUT, f"output {i}\n" + filler[:size])
            buf.append(e)
            window.append(e.id)
            if len(window) > 10:
                buf.prune([window.pop(0)], reason="old output")
        buf.flush()
        return buf

    grown, buf = _traced(run)
    buf.sink.close()
    res.goals.append(
        Goal(
            "ll_big_outputs",
            f"memory held after {ll.big_cycles:,} append+prune cycles of 100 KB outputs "
            f"(window of 10, SQLite log), MB",
            grown / 1e6,
            10.0,
            "<=",
            note=f"{grown / 1e6:.1f} MB",
        )
    )


def _young_buffers(ll: LongLifeConfig, tmp: str) -> list[Buffer]:
    """The gc-pause figure's other side: the same workload with memory at
    its bound, early in life. A durable buffer after ``ops_short``
    operations, and an in-memory one after the fewest operations (doubling
    from ``ops_short``, at most ``ops``) that filled its log to the
    retention bound and cut it once."""
    dbuf = Buffer(log=SQLiteLog(os.path.join(tmp, "young.sqlite")))
    churn(dbuf, ll.ops_short, ll.live, ll.batch)
    dbuf.flush()
    ops = ll.ops_short
    while True:
        mbuf = Buffer()
        churn(mbuf, ops, ll.live, ll.batch)
        if mbuf.log.dropped or ops >= ll.ops:
            return [dbuf, mbuf]
        del mbuf
        ops = min(2 * ops, ll.ops)


def _collect_times(repeat: int) -> list[float]:
    """Seconds of ``repeat`` full collections (figure 12)."""
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        gc.collect()
        out.append(time.perf_counter() - t0)
    return out


def read_newest_checkpoint(path: str) -> None:
    """Read the records recovery needs through the log at ``path``: the
    newest checkpoint and its tail (the whole log when it has no
    checkpoint), fetched and decoded (``read_range``). What recovery's
    ratio is measured against."""
    log = SQLiteLog(path)
    try:
        total, checkpoints = log.checkpoints()
        log.read_range(checkpoints[-1] if checkpoints else 0, total)
    finally:
        log.close()
