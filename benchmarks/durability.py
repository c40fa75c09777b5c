"""Durability benchmark: what a durable edit log costs the buffer.

Three questions, each answered side by side in one run (absolute figures
drift on shared machines; ratios measured in one run do not):

1. **mark_stale with a durable sink vs in memory.** The mark fast path never
   touches the sink (records wait for the next group commit), so its cost
   with ``SQLiteLog`` should be its in-memory cost: the target is <= 1.5x.
   Measured twice: with no flush running, and with a background flusher
   committing every 10 ms (as ``open_buffer`` does), which adds GIL
   contention from the flusher thread's JSON encoding.
2. **Group commit.** ``flush()`` of 1,000 pending records is ONE commit:
   counted by the sink (``commits``) and, for SQLite, by SQLite's own
   statement trace (``COMMIT`` statements).
3. **Sustained appends with a flush every 10 ms**: records per second, every
   one durable (one thread appends and flushes every 10 ms of wall time; the
   clock stops after the final flush), with the number of commits and the
   mean batch size; in-memory appends alongside.

Method: a warm-up, then N repetitions; min / median / max reported. The
mark comparison interleaves the in-memory and durable runs repetition by
repetition, on buffers of the same size, marking fresh entries each time
(a mark is idempotent, so re-marking would measure the early return).

Run: ``python benchmarks/durability.py [--quick] [--out results.json]``.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from quiesce import Buffer, Entry, JsonlLog, Kind, SQLiteLog

SinkFactory = Callable[[Path], Any]
SINKS: dict[str, SinkFactory] = {
    "sqlite": lambda d: SQLiteLog(d / "log.db"),
    "jsonl": lambda d: JsonlLog(d / "log.jsonl"),
}


def _summary(values: Sequence[float]) -> dict[str, float]:
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
    }


def _filled(buf: Buffer, n: int, prefix: str = "e") -> list[str]:
    ids = [f"{prefix}{i}" for i in range(n)]
    for i in ids:
        buf.append(Entry(i, Kind.REASONING, f"reasoning step {i}: the service answered 200"))
    return ids


class _Flusher:
    """Calls ``buf.flush()`` every ``interval`` seconds in a thread (the
    runtime's group commit, without an event loop)."""

    def __init__(self, buf: Buffer, interval: float) -> None:
        self.buf = buf
        self.interval = interval
        self.stop = threading.Event()
        self.flushes = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(self.interval):
            self.buf.flush()
            self.flushes += 1

    def __enter__(self) -> _Flusher:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


def bench_marks(kind: str, reps: int, warmup: int) -> dict[str, Any]:
    """ns per mark_stale: in memory vs durable sink, interleaved repetition by
    repetition; without flushes (2,000 marks a repetition), and with a
    background flusher committing every 10 ms (20,000 marks a repetition, so
    that several commits overlap every timed loop; they are counted)."""
    plan = {"no_flush": (2_000, reps), "flush_every_10ms": (20_000, max(3, reps // 3))}
    total = sum(n * (r + warmup) for n, r in plan.values())
    out: dict[str, Any] = {"buffer_size": total}
    with tempfile.TemporaryDirectory() as tmp:
        sink = SINKS[kind](Path(tmp))
        mem = Buffer()
        dur = Buffer(log=sink)
        mem_ids = _filled(mem, total)
        dur_ids = _filled(dur, total)
        dur.flush()
        start = 0
        for mode, (per_rep, mode_reps) in plan.items():
            times: dict[str, list[float]] = {"memory": [], kind: []}
            overlapping_commits = []
            for rep in range(mode_reps + warmup):
                chunk = slice(start, start + per_rep)
                start += per_rep
                for name, buf, ids in (("memory", mem, mem_ids), (kind, dur, dur_ids)):
                    todo = ids[chunk]
                    mark = buf.mark_stale
                    flusher = _Flusher(dur, 0.010) if mode != "no_flush" and buf is dur else None
                    gc.collect()
                    gc.disable()  # as timeit does: a collection is nobody's cost
                    if flusher is not None:
                        flusher.__enter__()
                    commits = sink.commits
                    t0 = time.perf_counter_ns()
                    for i in todo:
                        mark(i, "superseded")
                    dt = time.perf_counter_ns() - t0
                    commits = sink.commits - commits
                    if flusher is not None:
                        flusher.__exit__()
                    gc.enable()
                    if rep >= warmup:
                        times[name].append(dt / per_rep)
                        if flusher is not None:
                            overlapping_commits.append(commits)
                dur.flush()
            mem_s, dur_s = _summary(times["memory"]), _summary(times[kind])
            out[mode] = {
                "marks_per_rep": per_rep,
                "reps": mode_reps,
                "memory_ns": mem_s,
                f"{kind}_ns": dur_s,
                "ratio_median": dur_s["median"] / mem_s["median"],
                "ratio_min": dur_s["min"] / mem_s["min"],
            }
            if overlapping_commits:
                out[mode]["commits_during_timed_loop"] = _summary(overlapping_commits)
        sink.close()
    return out


class _null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def bench_group_commit(kind: str, batch: int, reps: int, warmup: int) -> dict[str, Any]:
    """One flush of ``batch`` pending records: commits counted, time taken."""
    commits: list[int] = []
    traced: list[int] = []
    ms: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        sink = SINKS[kind](Path(tmp))
        buf = Buffer(log=sink)
        statements: list[str] = []
        if kind == "sqlite":
            sink._conn.set_trace_callback(statements.append)
        for rep in range(reps + warmup):
            _filled(buf, batch, prefix=f"r{rep}-")
            assert buf.pending_records == batch
            before, statements[:] = sink.commits, []
            t0 = time.perf_counter()
            buf.flush()
            dt = time.perf_counter() - t0
            if rep >= warmup:
                commits.append(sink.commits - before)
                traced.append(statements.count("COMMIT"))
                ms.append(dt * 1e3)
        sink.close()
    out: dict[str, Any] = {
        "records": batch,
        "commits_per_flush": sorted(set(commits)),
        "flush_ms": _summary(ms),
    }
    if kind == "sqlite":
        out["sqlite_traced_commits_per_flush"] = sorted(set(traced))
    return out


def bench_sustained(kind: str | None, seconds: float, reps: int, warmup: int) -> dict[str, Any]:
    """Appends per second, every one durable, with a flush every 10 ms of
    wall time (``None``: in memory, no flush). One thread appends and
    flushes, so the figure is the end-to-end cost of a durable record: the
    clock stops after the final flush."""
    rates: list[float] = []
    commits: list[int] = []
    batches: list[float] = []
    for rep in range(reps + warmup):
        with tempfile.TemporaryDirectory() as tmp:
            sink = None if kind is None else SINKS[kind](Path(tmp))
            buf = Buffer(log=sink)
            n = 0
            t0 = time.perf_counter()
            next_flush = t0 + 0.010
            deadline = t0 + seconds
            while True:
                for _ in range(20):
                    buf.append(Entry(f"a{n}", Kind.TOOL_OUTPUT, f"tool output {n}: 200 OK"))
                    n += 1
                now = time.perf_counter()
                if now >= next_flush:
                    buf.flush()
                    next_flush = now + 0.010
                if now >= deadline:
                    break
            buf.flush()
            elapsed = time.perf_counter() - t0
            assert buf.pending_records == 0
            if rep >= warmup:
                rates.append(n / elapsed)
                if sink is not None:
                    commits.append(sink.commits)
                    batches.append(n / max(1, sink.commits))
            if sink is not None:
                sink.close()
    out: dict[str, Any] = {"seconds": seconds, "records_per_s": _summary(rates)}
    if kind is not None:
        out["commits"] = _summary(commits)
        out["mean_batch"] = _summary(batches)
    return out


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--out", type=Path, help="also write the results as JSON here")
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    reps, warmup = (5, 1) if args.quick else (15, 2)
    seconds = 0.3 if args.quick else 1.0
    results: dict[str, Any] = {
        "python": sys.version.split()[0],
        "method": f"{warmup} warm-up + {reps} repetitions; min/median/max",
        "mark_stale": {},
        "group_commit": {},
        "sustained_appends_flush_10ms": {
            "memory": bench_sustained(None, seconds, max(3, reps // 3), 1)
        },
    }
    for kind in SINKS:
        results["mark_stale"][kind] = bench_marks(kind, reps, warmup)
        results["group_commit"][kind] = bench_group_commit(kind, 1000, reps, warmup)
        results["sustained_appends_flush_10ms"][kind] = bench_sustained(
            kind, seconds, max(3, reps // 3), 1
        )
    _report(results)
    if args.out is not None:
        args.out.write_text(json.dumps(results, indent=2))
    return results


def _report(r: dict[str, Any]) -> None:
    print(f"quiesce durability benchmark ({r['method']}, Python {r['python']})")
    print("\nmark_stale, ns/op (median [min-max]); ratio = durable / in-memory median")
    for kind, m in r["mark_stale"].items():
        for mode in ("no_flush", "flush_every_10ms"):
            x = m[mode]
            mem, dur = x["memory_ns"], x[f"{kind}_ns"]
            during = x.get("commits_during_timed_loop")
            note = f"  ({during['median']:.0f} commits overlapped each loop)" if during else ""
            print(
                f"  {kind:6} {mode:17}"
                f" memory {mem['median']:7.0f} [{mem['min']:.0f}-{mem['max']:.0f}]"
                f"  {kind} {dur['median']:7.0f} [{dur['min']:.0f}-{dur['max']:.0f}]"
                f"  ratio {x['ratio_median']:.2f}{note}"
            )
    print("\nflush() of 1,000 pending records")
    for kind, g in r["group_commit"].items():
        extra = (
            f", SQLite traced COMMITs {g['sqlite_traced_commits_per_flush']}"
            if "sqlite_traced_commits_per_flush" in g
            else ""
        )
        f = g["flush_ms"]
        print(
            f"  {kind:6} commits per flush {g['commits_per_flush']}{extra}; "
            f"{f['median']:.2f} ms [{f['min']:.2f}-{f['max']:.2f}]"
        )
    print("\nsustained appends, flush every 10 ms: records/s, all durable (median [min-max])")
    for kind, s in r["sustained_appends_flush_10ms"].items():
        rate = s["records_per_s"]
        extra = ""
        if "commits" in s:
            extra = (
                f"; {s['commits']['median']:.0f} commits, "
                f"mean batch {s['mean_batch']['median']:.0f} records"
            )
        print(f"  {kind:6} {rate['median']:10,.0f} [{rate['min']:,.0f}-{rate['max']:,.0f}]{extra}")


if __name__ == "__main__":
    main()
