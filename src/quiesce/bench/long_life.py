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
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .lib import FULL, QUICK, Config, SectionResult, plot, save_figure, section
from .long_life_memory import _big_outputs, _collect_times, _memory_and_recovery, _young_buffers
from .long_life_ops import (
    _crafted_collisions,
    _first_iter,
    _move,
    _per_op,
    _pin_backends,
    _prune_body,
    _readers,
    _refused_edit,
    crc_colliding_ids,
)
from .long_life_workload import FULL_LL, QUICK_LL, LongLifeConfig, _fresh_like, _ratio_goal, churn

__all__ = ["LongLifeConfig", "bench_long_life", "churn", "crc_colliding_ids", "main"]

SECTION = "long_life"


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
    return [save_figure(plt, fig, out / "long_life.png")]


if __name__ == "__main__":
    raise SystemExit(main())
