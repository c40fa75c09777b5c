"""The per-operation figures of the ``long_life`` section of ``quiesce
bench`` (``ll_move``, ``ll_first_iter``, ``ll_refused_edit_wait``,
``ll_per_op_aged``, ``ll_prune_big_body``, ``ll_alarm_pass``,
``ll_stats_readers``, ``ll_pin_trio``, ``ll_pin_thread``,
``ll_crafted_collisions``; :mod:`.long_life` documents each figure and runs
them).

What it keeps true: each figure times one operation against its own
reference side by side in one run (alternately, ``repeat`` times), on
buffers built by the same workload (:func:`~.long_life_workload.churn`).
"""

from __future__ import annotations

import gc
import random
import statistics
import threading
import time
import zlib
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any

from .. import Buffer, EditPlan, Entry, Kind, Move, Prune, ReaderInfo
from .lib import Goal, SectionResult
from .long_life_workload import (
    LongLifeConfig,
    _alternate,
    _cpu_timed,
    _entry,
    _fresh_like,
    _ratio_goal,
    _timed,
)

__all__ = ["crc_colliding_ids"]


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
    """Figure 9: first iteration of a snapshot after a write / a list (CPU
    time: both sides only compute)."""
    n = ll.iter_n
    buf = Buffer()
    for i in range(n):
        buf.append(_entry(i))
    counter = [n]

    def first() -> float:
        buf.append(_entry(counter[0]))
        counter[0] += 1
        with buf.snapshot() as snap:
            t0 = time.process_time()
            for _e in snap:
                pass
            return time.process_time() - t0

    lst = list(buf.head().entries())

    def plain() -> float:
        t0 = time.process_time()
        for _e in lst:
            pass
        return time.process_time() - t0

    xs, ys = _alternate(first, plain, ll.repeat * 4)
    res.goals.append(
        _ratio_goal(
            "ll_first_iter", f"first iteration after a write / a list, n = {n:g}", xs, ys, 3.0
        )
    )


def _refused_edit(ll: LongLifeConfig, res: SectionResult) -> None:
    """Figure 10: the longest mark_stale wait while a big edit is refused.

    What it measures is what the edit makes a mark in another thread wait
    (the write lock it holds, the GIL it keeps), so two waits that are not
    the edit's are kept out of the window, each measured on its own (the
    extras): the first mark after the ``edit_pool`` appends folds them into
    the mark index (``Buffer.settle()`` does it before the window; O(ids
    appended), ~10-40 ms here, once), and a full collection of the
    ~10^6-object heap the pool builds (about a second of CPU, which lands in
    whichever thread allocates when the collector's counters say so; the
    window runs with the collector off, as the suite times everything, and
    ``gc_full_seconds`` gives one such collection)."""
    m = ll.edit_m
    buf = Buffer()
    targets = [f"t{i}" for i in range(m)]
    for t in targets:
        buf.append(Entry(t, Kind.REASONING, f"target {t}: a finding"))
    for i in range(m):
        buf.append(Entry(f"r{i}", Kind.REASONING, f"referrer {i}", refs=tuple(targets)))
    pool = ll.edit_pool
    for i in range(pool):
        buf.append(_entry(i))
    plan = EditPlan([Prune(t) for t in targets], reason="bench: a refused edit")
    t_fold, _ = _timed(buf.settle)
    t_gc, _ = _timed(gc.collect)
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
    gc_was = gc.isenabled()
    gc.disable()
    try:
        th.start()
        time.sleep(0.05)
        t_edit, report = _timed(lambda: buf.edit(plan))
        time.sleep(0.05)
        stop.set()
        th.join()
    finally:
        if gc_was:
            gc.enable()
    assert not report.applied
    res.extra["refused_edit"] = {
        "m": m,
        "edit_seconds": t_edit,
        "worst_mark_seconds": worst[0],
        "marks": marked[0],
        "fold_seconds": t_fold,
        "gc_full_seconds": t_gc,
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
    grow with their number. Both figures time CPU (both sides only
    compute)."""
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
    # A pin's time is stamped by the first pass after it (pins read no
    # clock): one pass at t=0 dates every reader, as the runtime's alarm does.
    for buf, _st in (*bufs.values(), head_only):
        buf.check_reader_ages()
    now[0] = 10.0
    for n, (buf, _st) in bufs.items():
        t, escs = _cpu_timed(buf.check_reader_ages)
        assert len(escs) == n
        extra[f"first_pass_{n}_per_escalation_us"] = round(t / n * 1e6, 2)
    head_only[0].check_reader_ages()

    def one_pass(buf: RuntimeBuffer) -> Callable[[], float]:
        def run() -> float:
            t, escs = _cpu_timed(buf.check_reader_ages)
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
            t, st = _cpu_timed(buf.stats)
            assert st.pinned == n
            return t / n

        return run

    rows = [(f"Task-{i}", i, 1.5) for i in range(big)]

    def floor() -> float:
        """Building the 10,000 rows ``stats()`` returns, from ready values."""
        t, out = _cpu_timed(lambda: tuple([ReaderInfo(a, b, c) for a, b, c in rows]))
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
    count = ll.collisions
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
