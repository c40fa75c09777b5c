"""``quiesce bench`` section ``long_life``: a long-lived agent's costs (issue 13).

What this section keeps true: every figure is a ratio of two things measured
side by side in one run (the aged buffer against a fresh buffer holding the
same live entries, a long log against a short one with the same live window,
a big body against a small one), and each figure is reported with both sides
in its note, so a reader sees the absolute numbers too.

The workload (:func:`churn`) is an agent's steady state: a window of
``live`` entries; each round appends ``batch`` new entries, marks the
``batch`` oldest stale and prunes them in one request (so a round is
``3 * batch`` operations: ``batch`` appends, ``batch`` marks, ``batch``
per-id prunes). With a durable sink every prune makes its tombstones durable
(one commit), which is what a real runtime pays.

Figures (keys of the goals; the issue's goal table, in order):

* ``ll_memory_durable``: tracemalloc bytes held by a buffer (and its sink
  object) after ``ops`` operations with a SQLite log / a fresh buffer built
  with the same live entries.
* ``ll_memory_in_memory``: the same without a sink (default retention).
* ``ll_memory_recovered``: a buffer recovered from the long log / fresh.
* ``ll_big_outputs``: bytes still held after ``cycles`` append+prune cycles
  of 100 KB tool outputs in a window of ten, with a SQLite log (absolute MB).
* ``ll_recovery_long_short``: recovery time of the long log / a short log
  (``ops_short`` operations) with the same live window.
* ``ll_recovery_vs_read``: recovery time of the long log / reading the
  records recovery needs through the log (``SQLiteLog.read_range`` of its
  newest checkpoint and the tail after it: the rows fetched and decoded, what
  any reader of the log pays; the log has one checkpoint per 10,000 records,
  the default ``checkpoint_every``). The extra ``recovery_vs_raw_rows`` gives
  the same recovery over fetching those rows without decoding them; the
  extra ``recovery_checkpoint_vs_full_replay`` gives recovery as it was
  before checkpoints (every record replayed) beside it, same run.
* ``ll_move``: one ``Move`` at n = 1e5 / at n = 1e3.
* ``ll_first_iter``: the first iteration of a snapshot after an append /
  iterating a list of the same entries, n = 1e4.
* ``ll_refused_edit_wait``: the longest ``mark_stale`` call in another thread
  while an 800-op edit with 800 referrers per target is refused (seconds).
* ``ll_per_op_aged``: per-op cost (append, mark, prune, pin) on the aged
  in-memory buffer / on a fresh one with the same live entries, run until
  its log retention has cut once (both in steady state: the cut frees old
  records, a cost of every buffer past its retention) — the worst of the four.
* ``ll_gc_pause``: a full ``gc.collect()`` with the aged buffers alive (the
  durable one and the in-memory one right after ``ops`` operations) / with
  the same two buffers early in life, their memory at its bound (the durable
  one after ``ops_short`` operations, the in-memory one once its log has
  reached the retention and been cut). The extra ``gc_pause_vs_fresh`` gives
  the aged side over a process holding only a fresh buffer of the same live
  entries.
* ``ll_sqlite_open``: ``SQLiteLog(path)`` on the long log / the short one.
* ``ll_prune_big_body``: pruning a 16 KB entry / a 160 B one (the verdict
  of the negative-result classifier is cached per content at ``append``;
  the extra ``append_big_body`` gives append's side of it, same run).
* ``ll_alarm_pass``: one reader-age alarm pass with 10,000 pinned readers /
  with 10 (incremental: O(1) beyond the readers it escalates).
* ``ll_stats_readers``: ``stats()`` with 10,000 pinned readers / building
  its 10,000 ``ReaderInfo`` rows from ready values (its floor: one row per
  reader).
* ``ll_pin_trio``, ``ll_pin_thread``: pin + unpin on trio / on asyncio, and in
  a worker thread / on asyncio.
* ``ll_crafted_collisions``: append and prune, one at a time, 4,000 ids
  crafted to collide under CRC-32 (the tombstone index's old hash, issue 21)
  / 4,000 random ids of the same length, in memory. Goal <= 2x.

Curves (no goals; ``extra["curves"]``, drawn by ``quiesce bench`` as
``long_life.png``), collected during the two long runs of figures 1-2:

* ``durable``, ``in_memory``: at ~15 points, geometric over ``ops`` (the
  durable run also at its copy points), ``{"ops", "bytes", "per_op_us"}``:
  the bytes tracemalloc holds beyond the run's start after a
  ``gc.collect()`` (the workload's own list of ids cut to the live window
  first), and the wall time per operation since the previous point — under
  tracemalloc, so slower than untraced, and with the durable sink's commits.
  Each sample's own cost (the collection, a copy) is outside the stretches.
  ``fresh_bytes`` is the fresh buffer's memory (the figures' reference).
* ``recovery``: at five points, geometric from ``ops_short`` to ``ops``, the
  durable log as it was then (flushed, copied with SQLite's backup API; the
  last point is the long log itself), ``{"ops", "records", "checkpoints",
  "tail_records", "recovery_s", "read_s"}``: the median of
  ``Buffer(log=SQLiteLog(copy))`` and of reading its newest checkpoint and
  tail (as ``ll_recovery_vs_read`` does), measured after the figures. Its
  cost follows the tail after the newest checkpoint, not the log's length.
  ``backup_s`` and ``recovery_curve_s`` give what the curves added to the
  run.

Run alone: ``python -m quiesce.bench.long_life [--quick] [--out FILE.json]``.
"""

from __future__ import annotations

import gc
import inspect
import os
import random
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
import tracemalloc
import zlib
from array import array
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import Buffer, EditPlan, Entry, Kind, Move, Prune, ReaderInfo, SQLiteLog
from .lib import FULL, QUICK, Config, Goal, SectionResult, _traced, plot, section

__all__ = ["LongLifeConfig", "bench_long_life", "churn", "crc_colliding_ids", "main"]

SECTION = "long_life"


@dataclass(frozen=True)
class LongLifeConfig:
    """The sizes of one run of the section."""

    ops: int  #: operations of the long run (1e6 in the issue)
    ops_short: int  #: operations of the short log (1e4)
    live: int  #: live window (1e3)
    batch: int  #: entries appended, marked and pruned per round
    big_cycles: int  #: append+prune cycles of 100 KB outputs (2,000)
    move_n: tuple[int, int]  #: (small, large) buffer sizes for Move (1e3, 1e5)
    iter_n: int  #: buffer size for the first-iteration figure (1e4)
    edit_m: int  #: prunes in the refused edit, and referrers of each (800)
    repeat: int


FULL_LL = LongLifeConfig(
    ops=1_000_000,
    ops_short=10_000,
    live=1_000,
    batch=100,
    big_cycles=2_000,
    move_n=(1_000, 100_000),
    iter_n=10_000,
    edit_m=800,
    repeat=5,
)

QUICK_LL = LongLifeConfig(
    ops=30_000,
    ops_short=3_000,
    live=300,
    batch=50,
    big_cycles=100,
    move_n=(1_000, 10_000),
    iter_n=10_000,
    edit_m=60,
    repeat=3,
)


def _entry(i: int, size: int = 0) -> Entry:
    body = f"reasoning step {i}: looked at the input and kept the relevant part"
    if size > len(body):
        body = (body + " " + "lorem ipsum dolor sit amet " * (size // 27 + 1))[:size]
    return Entry(f"e{i}", Kind.REASONING, body)


def churn(
    buf: Buffer,
    ops: int,
    live: int,
    batch: int,
    start: int = 0,
    sample_at: Sequence[int] = (),
    on_sample: Callable[[int], None] | None = None,
) -> int:
    """Run the steady-state workload on ``buf``: fill the window to ``live``
    entries (``live`` appends), then rounds of ``batch`` appends, ``batch``
    marks and one prune of the ``batch`` oldest, until ``ops`` operations
    are done. Returns the next entry number.

    ``on_sample(done)`` is called at the end of the first round that brings
    the operations done to at least each of ``sample_at`` (ascending; one
    call per round at most, so thresholds closer than a round share a call),
    after the workload's own list of ids is cut to the live window (so a
    memory sample counts the buffer, not that list); without ``on_sample``
    the rounds pay one integer comparison more, nothing else."""
    i = start
    window: list[str] = []
    done = 0
    points = [p for p in sorted(sample_at) if p > 0] if on_sample is not None else []
    k = 0
    next_at = points[0] if points else ops + 3 * batch + 1  # beyond the last round
    for _ in range(live):
        e = _entry(i)
        buf.append(e)
        window.append(e.id)
        i += 1
        done += 1
    pos = 0  # window[pos:] is live
    while done < ops:
        for _ in range(batch):
            e = _entry(i)
            buf.append(e)
            window.append(e.id)
            i += 1
        old = window[pos : pos + batch]
        for eid in old:
            buf.mark_stale(eid, "superseded")
        buf.prune(old, reason="window full")
        pos += batch
        done += 3 * batch
        if pos > 4096:
            del window[:pos]
            pos = 0
        if done >= next_at:
            while k < len(points) and points[k] <= done:
                k += 1
            next_at = points[k] if k < len(points) else ops + 3 * batch + 1
            del window[:pos]  # the sample sees only the live ids (the buffer's)
            pos = 0
            assert on_sample is not None
            on_sample(done)
    return i


def _geometric(lo: int, hi: int, n: int) -> list[int]:
    """``n`` integers from ``lo`` to ``hi`` (both kept), evenly spaced on a
    log scale, ascending, no repeats."""
    if n < 2 or hi <= lo:
        return [hi]
    r = (hi / lo) ** (1 / (n - 1))
    return sorted({round(lo * r**j) for j in range(n - 1)} | {hi})


class _Curve:
    """Samples of one churn run (a ``churn`` ``on_sample`` callback): bytes
    tracemalloc holds beyond those at :meth:`start`, after a
    ``gc.collect()``, and the wall time per operation since the previous
    sample (the sample's own cost, and whatever ``after`` does, are kept out:
    the stretch timer restarts after them). Timings are under tracemalloc,
    so slower than untraced.

    Built before the traced run, with room for ``n`` samples (an array of
    floats), so a sample allocates nothing that outlives it: the run's
    traced bytes are what they were without the curve."""

    def __init__(self, n: int, after: Callable[[int], None] | None = None) -> None:
        self._data = array("d", bytes(8 * 3 * n))
        self._n = 0
        self._after = after
        self._base = 0
        self._done = 0
        self._t = 0.0

    def start(self) -> None:
        """Call first thing inside the traced run."""
        self._base = tracemalloc.get_traced_memory()[0]
        self._t = time.perf_counter()

    def __call__(self, done: int) -> None:
        dt = time.perf_counter() - self._t
        gc.collect()
        if 3 * self._n < len(self._data):
            k = 3 * self._n
            self._data[k] = done
            self._data[k + 1] = tracemalloc.get_traced_memory()[0] - self._base
            self._data[k + 2] = dt / max(1, done - self._done)
            self._n += 1
        if self._after is not None:
            self._after(done)
        self._done = done
        self._t = time.perf_counter()

    def points(self) -> list[dict[str, float]]:
        """The samples, ``{"ops", "bytes", "per_op_us"}`` each, in order."""
        d = self._data
        return [
            {"ops": int(d[k]), "bytes": int(d[k + 1]), "per_op_us": round(d[k + 2] * 1e6, 3)}
            for k in range(0, 3 * self._n, 3)
        ]


def _fresh_like(buf: Buffer) -> Callable[[], Buffer]:
    """A builder of a fresh in-memory buffer with ``buf``'s live entries
    (entries rebuilt inside, so their bytes count, as they do in ``buf``)."""
    dicts = [e.to_dict() for e in buf.head().entries()]

    def build() -> Buffer:
        fresh = Buffer()
        for d in dicts:
            fresh.append(Entry.from_dict(d))
        return fresh

    return build


def _timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def _alternate(
    a: Callable[[], float], b: Callable[[], float], repeat: int
) -> tuple[list[float], list[float]]:
    """Seconds of ``a`` and ``b``, run alternately ``repeat`` times each."""
    xs, ys = [], []
    for _ in range(repeat):
        xs.append(a())
        ys.append(b())
    return xs, ys


def _ratio_goal(
    key: str, text: str, xs: Sequence[float], ys: Sequence[float], limit: float, unit: str = "s"
) -> Goal:
    """A ``<=`` goal on median(xs) / median(ys) (spread: per-pair ratios)."""
    pairs = [x / y for x, y in zip(xs, ys, strict=True) if y > 0]
    mx, my = statistics.median(xs), statistics.median(ys)
    value = mx / my if my > 0 else None
    spread = (min(pairs), max(pairs)) if pairs else None
    return Goal(
        key,
        text,
        value,
        limit,
        "<=",
        spread,
        note=f"{_fmt(mx, unit)} / {_fmt(my, unit)}",
        of_mins=min(xs) / min(ys) if min(ys) > 0 else None,
    )


def _fmt(x: float, unit: str) -> str:
    if unit == "s":
        if x < 1e-3:
            return f"{x * 1e6:.2f} us"
        return f"{x * 1e3:.2f} ms" if x < 1 else f"{x:.2f} s"
    if unit == "B":
        return f"{x / 1e6:.2f} MB"
    return f"{x:g} {unit}"


#: the Buffer's default ``checkpoint_every`` (the long log is written with
#: it), read from ``Buffer``'s own signature so it cannot drift from the core
CHECKPOINT_EVERY: int = inspect.signature(Buffer).parameters["checkpoint_every"].default


class _LoadOnly:
    """A sink that only loads and writes (no read-back, no checkpoints): the
    buffer replays the whole log, as before checkpoints existed."""

    def __init__(self, sink: SQLiteLog) -> None:
        self._sink = sink

    def load(self) -> Sequence[Any]:
        return self._sink.load()

    def write(self, records: Sequence[Any]) -> None:
        self._sink.write(records)

    def close(self) -> None:
        self._sink.close()


# -- the figures -------------------------------------------------------------


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
            """Read the records recovery needs through the log: the newest
            checkpoint and its tail (the whole log when it has no
            checkpoint), fetched and decoded (``read_range``)."""
            gc.collect()
            t0 = time.perf_counter()
            log = SQLiteLog(path)
            try:
                total, checkpoints = log.checkpoints()
                log.read_range(checkpoints[-1] if checkpoints else 0, total)
            finally:
                log.close()
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


def _move(ll: LongLifeConfig, res: SectionResult) -> None:
    """Figure 8: one Move at the large n / at the small n."""
    rng = random.Random(7)

    def build(n: int) -> tuple[Buffer, list[str]]:
        buf = Buffer()
        for i in range(n):
            buf.append(_entry(i))
        return buf, [f"e{i}" for i in range(n)]

    small, large = (build(n) for n in ll.move_n)
    k = 20

    def moves(b: tuple[Buffer, list[str]]) -> Callable[[], float]:
        buf, ids = b

        def run() -> float:
            pairs = [tuple(rng.sample(ids, 2)) for _ in range(k)]
            t0 = time.perf_counter()
            for a, before in pairs:
                buf.edit(EditPlan([Move(a, before=before)], reason="bench move"))
            return (time.perf_counter() - t0) / k

        return run

    moves(large)()  # warm-up: the first edit builds caches
    moves(small)()
    xs, ys = _alternate(moves(large), moves(small), ll.repeat * 2)
    res.goals.append(
        _ratio_goal(
            "ll_move",
            f"one Move at n = {ll.move_n[1]:g} / at n = {ll.move_n[0]:g}",
            xs,
            ys,
            3.0,
        )
    )


def _first_iter(ll: LongLifeConfig, res: SectionResult) -> None:
    """Figure 9: first iteration of a snapshot after a write / a list."""
    n = ll.iter_n
    buf = Buffer()
    for i in range(n):
        buf.append(_entry(i))
    counter = [n]

    def first() -> float:
        buf.append(_entry(counter[0]))
        counter[0] += 1
        with buf.snapshot() as snap:
            t0 = time.perf_counter()
            for _e in snap:
                pass
            return time.perf_counter() - t0

    lst = list(buf.head().entries())

    def plain() -> float:
        t0 = time.perf_counter()
        for _e in lst:
            pass
        return time.perf_counter() - t0

    xs, ys = _alternate(first, plain, ll.repeat * 4)
    res.goals.append(
        _ratio_goal(
            "ll_first_iter", f"first iteration after a write / a list, n = {n:g}", xs, ys, 3.0
        )
    )


def _refused_edit(ll: LongLifeConfig, res: SectionResult) -> None:
    """Figure 10: the longest mark_stale wait while a big edit is refused."""
    m = ll.edit_m
    buf = Buffer()
    targets = [f"t{i}" for i in range(m)]
    for t in targets:
        buf.append(Entry(t, Kind.REASONING, f"target {t}: a finding"))
    for i in range(m):
        buf.append(Entry(f"r{i}", Kind.REASONING, f"referrer {i}", refs=tuple(targets)))
    pool = 200_000
    for i in range(pool):
        buf.append(_entry(i))
    plan = EditPlan([Prune(t) for t in targets], reason="bench: a refused edit")
    stop = threading.Event()
    worst = [0.0]
    marked = [0]

    def marker() -> None:
        i = 0
        while not stop.is_set() and i < pool:
            t0 = time.perf_counter()
            buf.mark_stale(f"e{i}", "bench")
            dt = time.perf_counter() - t0
            if dt > worst[0]:
                worst[0] = dt
            i += 1
            time.sleep(0)  # let the editor run between marks
        marked[0] = i

    th = threading.Thread(target=marker)
    th.start()
    time.sleep(0.05)
    t_edit, report = _timed(lambda: buf.edit(plan))
    time.sleep(0.05)
    stop.set()
    th.join()
    assert not report.applied
    res.extra["refused_edit"] = {
        "m": m,
        "edit_seconds": t_edit,
        "worst_mark_seconds": worst[0],
        "marks": marked[0],
    }
    res.goals.append(
        Goal(
            "ll_refused_edit_wait",
            f"refused {m}-op edit, {m} referrers: longest mark_stale in another thread, ms",
            worst[0] * 1e3,
            50.0,
            "<=",
            note=f"edit took {t_edit * 1e3:.0f} ms",
        )
    )


def _per_op(ll: LongLifeConfig, aged: Buffer, res: SectionResult) -> None:
    """Figure 11: per-op cost on the aged in-memory buffer / a fresh one."""
    fresh = _fresh_like(aged)()
    k = 300
    counters = {id(aged): 10**9, id(fresh): 2 * 10**9}

    def op_runs(buf: Buffer) -> dict[str, float]:
        start = counters[id(buf)]
        counters[id(buf)] += k
        new = [_entry(start + j) for j in range(k)]
        out = {}
        t0 = time.perf_counter()
        for e in new:
            buf.append(e)
        out["append"] = (time.perf_counter() - t0) / k
        ids = [e.id for e in new]
        t0 = time.perf_counter()
        for i in ids:
            buf.mark_stale(i, "bench")
        out["mark"] = (time.perf_counter() - t0) / k
        t0 = time.perf_counter()
        for i in ids:
            buf.prune([i], reason="bench")
        out["prune"] = (time.perf_counter() - t0) / k
        t0 = time.perf_counter()
        for _ in range(k):
            with buf.snapshot():
                pass
        out["pin"] = (time.perf_counter() - t0) / k
        return out

    gc_was = gc.isenabled()
    gc.disable()
    try:
        op_runs(aged)
        op_runs(fresh)
        # Steady state on both sides: the fresh buffer runs until its log has
        # reached the retention and been cut once, as the aged one's is at
        # every ~retention records (the cut frees the records and the pruned
        # entries they hold: a cost of every buffer past its retention, not
        # one that grows with history).
        for _ in range(1_000):
            if fresh.log.dropped:
                break
            op_runs(fresh)
        runs_a, runs_f = [], []
        for _ in range(ll.repeat * 6):  # ~10 ms each: many, for a stable median
            runs_a.append(op_runs(aged))
            runs_f.append(op_runs(fresh))
    finally:
        if gc_was:
            gc.enable()
    ratios = {}
    for op in ("append", "mark", "prune", "pin"):
        xs = [r[op] for r in runs_a]
        ys = [r[op] for r in runs_f]
        ratios[op] = statistics.median(xs) / statistics.median(ys)
    worst = max(ratios, key=lambda o: ratios[o])
    res.extra["per_op_ratios"] = ratios
    res.goals.append(
        Goal(
            "ll_per_op_aged",
            f"per-op cost after {ll.ops:,} ops / fresh, past its log retention (worst of "
            f"append, mark, prune, pin)",
            ratios[worst],
            1.2,
            "<=",
            note=", ".join(f"{o} {r:.2f}x" for o, r in ratios.items()),
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


def _prune_body(ll: LongLifeConfig, res: SectionResult) -> None:
    """Figure 14: pruning a 16 KB entry / a 160 B one (no sink)."""
    k = 300
    counter = [0]
    appends: dict[int, list[float]] = {16_000: [], 160: []}

    def run(size: int) -> Callable[[], float]:
        def go() -> float:
            buf = Buffer()
            start = counter[0]
            counter[0] += k
            entries = [_entry(start + j, size) for j in range(k)]
            t0 = time.perf_counter()
            for e in entries:
                buf.append(e)
            appends[size].append((time.perf_counter() - t0) / k)
            ids = [e.id for e in entries]
            t0 = time.perf_counter()
            for i in ids:
                buf.prune([i], reason="bench")
            return (time.perf_counter() - t0) / k

        return go

    run(16_000)()
    appends[16_000].clear()
    xs, ys = _alternate(run(16_000), run(160), ll.repeat * 2)
    res.goals.append(
        _ratio_goal("ll_prune_big_body", "prune of a 16 KB entry / of a 160 B entry", xs, ys, 2.0)
    )
    big, small = statistics.median(appends[16_000]), statistics.median(appends[160])
    res.extra["append_big_body"] = {
        "append_16KB_us": round(big * 1e6, 2),
        "append_160B_us": round(small * 1e6, 2),
        "ratio": round(big / small, 2),
        "note": "append classifies a big body once (the verdict a prune then reads)",
    }


def _readers(ll: LongLifeConfig, res: SectionResult) -> None:
    """Figures ``ll_alarm_pass`` and ``ll_stats_readers``: the reader-age
    alarm and ``stats()`` with many pinned readers.

    The readers are pinned as an agent's are, between writes (a write every
    ten pins), with removals staged behind them; a fake clock makes them all
    old, and a first pass escalates every one (its cost per escalation is in
    the extras). ``ll_alarm_pass``: one later pass (nothing new to escalate)
    with 10,000 readers / with 10 — incremental, so about equal; the worst
    case, 10,000 readers all pinned at the head version, is in the extras.
    ``ll_stats_readers``: ``stats()`` with 10,000 pinned readers / building
    the 10,000 ``ReaderInfo`` rows it returns from ready values — the floor
    of any ``stats()`` (one row per reader); finding the readers, their
    names and ages may add at most 1.5x that (goal 2.5x). The extra
    ``stats_per_reader_10000_vs_100`` shows the cost per reader does not
    grow with their number."""
    from quiesce import RuntimeBuffer

    now = [0.0]

    def pinned(n: int, write_every: int) -> tuple[RuntimeBuffer, ExitStack]:
        buf = RuntimeBuffer(clock=lambda: now[0], max_pin_age=1.0)
        stack = ExitStack()
        for i in range(n):
            if i % write_every == 0:  # a write, then readers pin its version
                buf.append(_entry(i))
                if i:  # staged: the readers before it hold it back
                    buf.prune([f"e{i - write_every}"], reason="bench: behind readers")
            stack.enter_context(buf.snapshot())
        return buf, stack

    repeat = ll.repeat * 4
    big, small = 10_000, 10
    extra: dict[str, Any] = {}
    now[0] = 0.0
    bufs = {n: pinned(n, 10) for n in (big, small)}
    head_only = pinned(big, big + 1)
    now[0] = 10.0
    for n, (buf, _st) in bufs.items():
        t, escs = _timed(buf.check_reader_ages)
        assert len(escs) == n
        extra[f"first_pass_{n}_per_escalation_us"] = round(t / n * 1e6, 2)
    head_only[0].check_reader_ages()

    def one_pass(buf: RuntimeBuffer) -> Callable[[], float]:
        def run() -> float:
            t, escs = _timed(buf.check_reader_ages)
            assert not escs
            return t

        return run

    xs, ys = _alternate(one_pass(bufs[big][0]), one_pass(bufs[small][0]), repeat)
    res.goals.append(
        _ratio_goal(
            "ll_alarm_pass",
            f"one reader-age alarm pass, {big:,} pinned readers / {small} (all escalated "
            f"before; a write every 10 pins)",
            xs,
            ys,
            3.0,
        )
    )
    hs, _ = _alternate(one_pass(head_only[0]), one_pass(bufs[small][0]), repeat)
    extra["alarm_pass_all_at_head_10000_ms"] = round(statistics.median(hs) * 1e3, 4)

    def stats_per_reader(buf: RuntimeBuffer, n: int) -> Callable[[], float]:
        def run() -> float:
            t, st = _timed(buf.stats)
            assert st.pinned == n
            return t / n

        return run

    rows = [(f"Task-{i}", i, 1.5) for i in range(big)]

    def floor() -> float:
        """Building the 10,000 rows ``stats()`` returns, from ready values."""
        t, out = _timed(lambda: tuple([ReaderInfo(a, b, c) for a, b, c in rows]))
        assert len(out) == big
        return t / big

    xs, ys = _alternate(stats_per_reader(bufs[big][0], big), floor, repeat)
    res.goals.append(
        _ratio_goal(
            "ll_stats_readers",
            f"stats() with {big:,} pinned readers / building its {big:,} ReaderInfo rows",
            xs,
            ys,
            2.5,
        )
    )
    extra["stats_10000_ms"] = round(statistics.median(xs) * big * 1e3, 3)
    mid, _mid_stack = pinned(100, 10)
    xs2, ys2 = _alternate(stats_per_reader(bufs[big][0], big), stats_per_reader(mid, 100), repeat)
    extra["stats_per_reader_10000_vs_100"] = round(
        statistics.median(xs2) / statistics.median(ys2), 3
    )
    for _buf, stack in (*bufs.values(), head_only, (mid, _mid_stack)):
        stack.close()
    res.extra["readers"] = extra


def _pin_backends(ll: LongLifeConfig, res: SectionResult) -> None:
    """Figures ``ll_pin_trio`` and ``ll_pin_thread``: the same pin + unpin
    loop (``with buf.snapshot(): pass``, the public API) run inside
    ``asyncio.run``, ``trio.run`` and a worker thread, side by side. What
    differs is only how the pin finds its task (asyncio task, trio task or
    thread)."""
    import asyncio

    buf = Buffer()
    for i in range(100):
        buf.append(_entry(i))
    k = 5_000

    def loop() -> float:
        """Seconds per pin + unpin: the best of three runs of ``k`` (the
        same on every backend; a run hit by another process is dropped)."""
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            for _ in range(k):
                with buf.snapshot():
                    pass
            best = min(best, (time.perf_counter() - t0) / k)
        return best

    async def in_task() -> float:
        return loop()

    def on_asyncio() -> float:
        return asyncio.run(in_task())

    def in_thread() -> float:
        out: list[float] = []
        th = threading.Thread(target=lambda: out.append(loop()))
        th.start()
        th.join()
        return out[0]

    trio: Any
    try:
        import trio
    except ImportError:  # pragma: no cover - trio is a test dependency
        trio = None

    def on_trio() -> float:
        assert trio is not None
        return float(trio.run(in_task))

    repeat = ll.repeat * 6
    aio, tr, th = [], [], []
    for _ in range(repeat):
        aio.append(on_asyncio())
        if trio is not None:
            tr.append(on_trio())
        th.append(in_thread())
    if trio is not None:
        res.goals.append(
            _ratio_goal("ll_pin_trio", "pin + unpin on trio / on asyncio", tr, aio, 1.1)
        )
    else:
        res.goals.append(Goal("ll_pin_trio", "pin + unpin on trio / on asyncio", None, 1.1, "<="))
    res.goals.append(
        _ratio_goal("ll_pin_thread", "pin + unpin in a worker thread / on asyncio", th, aio, 1.3)
    )


@section(SECTION)
def bench_long_life(cfg: Config) -> SectionResult:
    """The long-life figures (see the module docstring)."""
    ll = QUICK_LL if cfg.quick else FULL_LL
    res = SectionResult(SECTION)
    res.extra["config"] = ll.__dict__.copy()
    res.extra["config"]["move_n"] = list(ll.move_n)
    with tempfile.TemporaryDirectory(prefix="quiesce-long-life-") as tmp:
        keep: list[Any] = []
        _memory_and_recovery(ll, tmp, res, keep)
        dbuf, fresh, mbuf = keep
        del keep, fresh
        gc.collect()
        with_aged = _collect_times(ll.repeat)
        _per_op(ll, mbuf, res)
        del dbuf, mbuf
        gc.collect()
        young = _young_buffers(ll, tmp)
        with_young = _collect_times(ll.repeat)
        fresh = _fresh_like(young[0])()
        young[0].sink.close()  # type: ignore[union-attr]
        del young
        gc.collect()
        with_fresh = _collect_times(ll.repeat)
        del fresh
        res.extra["gc_pause_vs_fresh"] = {
            "aged_ms": round(statistics.median(with_aged) * 1e3, 2),
            "fresh_ms": round(statistics.median(with_fresh) * 1e3, 2),
            "ratio": round(statistics.median(with_aged) / statistics.median(with_fresh), 2),
        }
        res.goals.append(
            _ratio_goal(
                "ll_gc_pause",
                f"full gc.collect() with a durable and an in-memory buffer after {ll.ops:,} "
                f"ops / early in life, memory at its bound (over a fresh buffer alone: "
                f"{res.extra['gc_pause_vs_fresh']['ratio']}x)",
                with_aged,
                with_young,
                2.0,
            )
        )
        _big_outputs(ll, tmp, res)
    _move(ll, res)
    _first_iter(ll, res)
    _refused_edit(ll, res)
    _prune_body(ll, res)
    _readers(ll, res)
    _pin_backends(ll, res)
    _crafted_collisions(ll, res)
    res.notes.append(
        "workload: rounds of `batch` appends, `batch` marks and one prune of the `batch` "
        "oldest, a window of `live` entries; memory by tracemalloc (bytes still held); "
        "SQLite commits are real (synchronous=FULL)"
    )
    return res


def crc_colliding_ids(count: int, prefix: bytes = b"call_") -> list[str]:
    """``count`` distinct ids of one length whose ``crc32(id)`` and
    ``crc32(reversed id)`` are all equal (the red team's construction,
    issue 21: the tombstone index once hashed ids with those two CRCs).

    CRC-32 is affine over GF(2) for a fixed length: flipping a set of bits
    changes the CRC by the XOR of what each flip alone changes it by. Each
    of 96 letters after ``prefix`` may be ``a`` or ``b`` (one bit, ``0x03``);
    the 64 x 96 map from those bits to both CRCs is linear, and its kernel
    (Gaussian elimination, at least 32 vectors) gives ids colliding with the
    all-``a`` id under both. O(count * 96)."""
    free = 96
    base = bytearray(prefix + b"a" * free)

    def both(b: bytes) -> int:
        return zlib.crc32(b) | zlib.crc32(b[::-1]) << 32

    zero = both(bytes(base))
    cols = []
    for j in range(len(prefix), len(base)):
        b = bytearray(base)
        b[j] ^= 0x03
        cols.append(both(bytes(b)) ^ zero)
    rows: list[tuple[int, int]] = []  # reduced (value, combination), highest bit first
    kernel: list[int] = []
    for j, v in enumerate(cols):
        comb = 1 << j
        for rv, rc in rows:
            if v ^ rv < v:
                v, comb = v ^ rv, comb ^ rc
        if v:
            rows.append((v, comb))
            rows.sort(reverse=True)
        else:
            kernel.append(comb)
    if count > 1 << len(kernel):  # pragma: no cover - 2**32 ids
        raise ValueError(f"at most {1 << len(kernel)} colliding ids")
    ids = []
    for m in range(count):
        comb = 0
        for k, kv in enumerate(kernel):
            if m >> k & 1:
                comb ^= kv
        b = bytearray(base)
        for j in range(free):
            if comb >> j & 1:
                b[len(prefix) + j] ^= 0x03
        ids.append(b.decode("ascii"))
    return ids


def _crafted_collisions(ll: LongLifeConfig, res: SectionResult) -> None:
    """``ll_crafted_collisions`` (issue 21, defect 9): append and prune, one
    at a time, 4,000 ids crafted to collide under CRC-32 (see
    :func:`crc_colliding_ids`) / 4,000 random ids of the same length, each
    on a fresh in-memory buffer. Under CRC-32 the crafted ids all probed
    one cluster of the tombstone index (61x); the keyed hash spreads them."""
    count = 4_000
    crafted = crc_colliding_ids(count)
    rng = random.Random(21)
    width = len(crafted[0]) - len("call_")
    plain = ["call_" + "".join(rng.choice("ab") for _ in range(width)) for _ in range(count)]

    def run(ids: list[str]) -> Callable[[], float]:
        def once() -> float:
            buf = Buffer()
            gc.collect()
            t0 = time.perf_counter()
            for i, eid in enumerate(ids):
                buf.append(Entry(eid, Kind.REASONING, f"output {i}"))
                buf.prune([eid], reason="stale")
            return time.perf_counter() - t0

        return once

    xs, ys = _alternate(run(crafted), run(plain), ll.repeat)
    res.goals.append(
        _ratio_goal(
            "ll_crafted_collisions",
            f"{count:,} crafted-collision ids / {count:,} random ids, append (and prune)",
            xs,
            ys,
            2.0,
        )
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the section alone and print its goals."""
    args = list(sys.argv[1:] if argv is None else argv)
    cfg = QUICK if "--quick" in args else FULL
    t0 = time.perf_counter()
    res = bench_long_life(cfg)
    for g in res.goals:
        print(f"{g.status:4}  {g.key:24} {g.value!s:>24} (<= {g.limit})  {g.text}  [{g.note}]")
    print(f"{time.perf_counter() - t0:.1f} s")
    if "--out" in args:
        import json

        with open(args[args.index("--out") + 1], "w") as f:
            json.dump(res.to_dict(), f, indent=1, default=str)
    return 0


# -- figures ------------------------------------------------------------------


@plot("long_life.png")
def _plot_long_life(plt: Any, results: dict[str, Any], out: Path, stamp: str) -> list[Path]:
    """``long_life.png``: over one long run (the ``long_life`` section's
    workload), the memory held and the per-op cost against operations done,
    durable (SQLite log) vs in memory, and recovery time (and the time to
    read the newest checkpoint and tail) against log length."""
    sec = results["sections"].get("long_life")
    curves = sec["extra"].get("curves") if sec is not None else None
    if not curves or not curves.get("durable"):
        return []
    fig, (ax_mem, ax_op, ax_rec) = plt.subplots(1, 3, figsize=(15, 4.4))
    series = (
        ("durable (SQLite log)", "durable", "tab:blue"),
        ("in memory", "in_memory", "tab:red"),
    )
    for label, key, color in series:
        pts = curves.get(key, [])
        ops = [p["ops"] for p in pts]
        ax_mem.plot(ops, [p["bytes"] / 1e6 for p in pts], "o-", color=color, ms=3, label=label)
        ax_op.plot(ops, [p["per_op_us"] for p in pts], "o-", color=color, ms=3, label=label)
    fresh = curves.get("fresh_bytes")
    if fresh:
        ax_mem.axhline(
            fresh / 1e6, color="black", linestyle="--", linewidth=1, label="fresh buffer, same live"
        )
    ax_mem.set_xscale("log")
    ax_mem.set_xlabel("operations done")
    ax_mem.set_ylabel("MB held (tracemalloc, after gc)")
    ax_mem.set_title("memory against operations done")
    ax_mem.legend(fontsize=8)
    ax_mem.grid(True, which="both", alpha=0.3)
    ax_op.set_xscale("log")
    top = max([p["per_op_us"] for _, key, _ in series for p in curves.get(key, [])], default=1.0)
    ax_op.set_ylim(0, 1.3 * top)
    ax_op.set_xlabel("operations done")
    ax_op.set_ylabel("µs per operation since the previous point")
    ax_op.set_title("per-op cost (wall time, under tracemalloc)")
    ax_op.legend(fontsize=8, loc="upper left")
    ax_op.grid(True, which="both", alpha=0.3)
    rec = curves.get("recovery", [])
    recs = [r["records"] for r in rec]
    ax_rec.plot(
        recs,
        [r["recovery_s"] * 1e3 for r in rec],
        "o-",
        color="tab:blue",
        label="recovery: Buffer(log=SQLiteLog(path))",
    )
    ax_rec.plot(
        recs,
        [r["read_s"] * 1e3 for r in rec],
        "s--",
        color="tab:gray",
        label="read newest checkpoint + tail (read_range)",
    )
    for r in rec:
        ax_rec.annotate(
            f"tail {r['tail_records']:,}",
            (r["records"], r["recovery_s"] * 1e3),
            textcoords="offset points",
            xytext=(0, 6),
            ha="center",
            fontsize=7,
        )
    ax_rec.set_xscale("log")
    ax_rec.xaxis.set_minor_formatter(plt.NullFormatter())
    top = max([r["recovery_s"] * 1e3 for r in rec], default=1.0)
    ax_rec.set_ylim(0, 1.45 * top)  # room above the data for the legend
    ax_rec.set_xlabel("log length, records (tail: records after the newest checkpoint)")
    ax_rec.set_ylabel("ms (median)")
    ax_rec.set_title("recovery against log length")
    ax_rec.legend(fontsize=8, loc="upper left")
    ax_rec.grid(True, which="both", alpha=0.3)
    cfg = sec["extra"].get("config", {})
    fig.suptitle(
        f"long life: {cfg.get('live', '?'):,} live entries, rounds of {cfg.get('batch', '?')} "
        f"appends + marks + one prune — {stamp}",
        fontsize=10,
    )
    fig.tight_layout()
    path = out / "long_life.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [path]


if __name__ == "__main__":
    raise SystemExit(main())
