"""The ``durability`` section of ``quiesce bench``: what a durable edit log costs.

Runs as the ``durability`` section of ``quiesce bench`` (its cases and goals
join the suite's table, JSON and plots) and as
``python benchmarks/durability.py [--quick] [--out results.json]``, a thin
script over :func:`main`. It lives in the package because ``benchmarks/`` is
not installed.

Three questions, each answered side by side in one run (absolute figures
drift on a shared machine; ratios measured in one run drift much less):

1. **mark_stale with a durable sink vs in memory.** The mark fast path never
   touches the sink: its record waits in memory for the next group commit.
   So ``mark_stale`` on a buffer with a ``SQLiteLog`` (or ``JsonlLog``) and
   no flusher should cost what it costs in memory; the goal is <= 1.5x.
   These cases go through :func:`quiesce.bench.lib.measure` like every core
   section (calibration, warm-up, round-robin repetitions, CPU time, GC off),
   at the size the core goals are stated at (1e5; 1e4 quick), on buffers
   bulk-loaded as the core sections' are, with an empty sink attached (it
   receives every record the marks produce, on the next flush), rebuilt
   (untimed) when their unmarked entries run out: a mark is idempotent, so
   re-marking would measure the early return.
   For comparison, not a goal: the same marks while a thread flushes every
   10 ms (as ``open_buffer`` does), in loops spanning several flush
   intervals. That thread encodes records (holding the GIL) and commits them,
   so these cases are timed with the wall clock (what the marking coroutine
   lives through; CPU time of the process would bill the flusher's work to
   the marks). The commits that landed inside each timed loop, and the
   records durable when it ended, are counted: a flush encodes its whole
   batch before it commits, so against a tight loop of marks the first
   commit can land after the loop.
2. **Group commit.** ``flush()`` of 1,000 pending records is one commit:
   counted by the sink (``commits``) and, for SQLite, by SQLite's own
   statement trace (``COMMIT`` statements). Goal: exactly 1.
3. **Sustained appends with a flush every 10 ms**: records per second, every
   one durable: one thread appends (20 at a time) and flushes whenever 10 ms
   of wall time have passed; the clock stops after the final flush. In
   memory alongside. Reported, no goal. The GC is off during each run (as
   in every timed loop of the suite; ``--gc`` keeps it on): with it on, the
   in-memory rate swings by 2x with whatever else the process holds. Each
   repetition starts with the next implementation in turn.
4. **A mark while the database is locked** (issue 21): ``SQLiteLog``, 1,200
   spilled tombstones, another connection holding the database and a flush
   stuck in its commit, an agent thread whose refused re-admissions and
   marks of pruned ids read their tombstones back; the p99 of ``mark_stale``
   from another thread, wall clock. Goal: <= 1 ms
   (``durability_mark_locked_p99``).

Every timed series has one warm-up and then the suite's ``repeat``
repetitions, interleaved (each repetition runs every implementation once).
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from quiesce import Buffer, Entry, Kind, SQLiteLog

from .durability_locked import _marks_while_locked
from .durability_sinks import (
    MEMORY,
    SINKS,
    DurabilityConfig,
    Sink,
    _entries,
    _Flusher,
    _loop_mark,
    _Sinks,
    _summary,
)
from .lib import (
    _FIXTURES,
    FULL,
    QUICK,
    Case,
    CaseResult,
    Config,
    Fixtures,
    Goal,
    SectionResult,
    format_report,
    measure,
    plot,
    ratio_goal,
    run_suite,
    save_figure,
    section,
)

__all__ = ["SINKS", "DurabilityConfig", "bench_durability", "main"]

SECTION = "durability"


# ---------------------------------------------------------------------------
# 1. mark_stale: in memory vs durable, no flusher (measure()) and with one


class _MarkState:
    __slots__ = ("buf", "ids", "pos", "sink")

    def __init__(self, buf: Buffer, ids: list[str], sink: Sink | None) -> None:
        self.buf = buf
        self.ids = ids
        self.pos = 0
        self.sink = sink


def _mark_cases(cfg: Config, dcfg: DurabilityConfig, sinks: _Sinks) -> list[Case]:
    entries = _FIXTURES.entries(dcfg.mark_n)
    ids = Fixtures.ids(entries)
    cases = []
    for kind in (MEMORY, *SINKS):
        held: list[_MarkState] = []

        def setup(kind: str = kind, held: list[_MarkState] = held) -> _MarkState:
            for old in held:  # the case dropped its old state: close its file
                if old.sink is not None:
                    sinks.close(old.sink)
            held.clear()
            sink = None if kind == MEMORY else sinks.new(kind)
            state = _MarkState(Fixtures.buffer(entries, log=sink), ids, sink)
            held.append(state)
            return state

        def prepare(st: _MarkState, count: int) -> Callable[[], None]:
            todo = st.ids[st.pos : st.pos + count]
            st.pos += count
            buf = st.buf
            return lambda: _loop_mark(buf, todo)

        result = CaseResult(SECTION, "mark", kind, dcfg.mark_n, {"flusher": "none"})
        cases.append(Case(result, setup, prepare, budget=dcfg.mark_n))
    return cases


def _marks_with_flusher(
    cfg: Config, dcfg: DurabilityConfig, sinks: _Sinks
) -> tuple[list[CaseResult], dict[str, Any]]:
    """ns per ``mark_stale`` while a thread flushes every 10 ms (durable
    sides; the in-memory side has nothing to flush), wall clock, one fresh
    buffer of ``flusher_marks`` entries per side and repetition."""
    per_rep = dcfg.flusher_marks
    entries = _FIXTURES.entries(per_rep)
    ids = Fixtures.ids(entries)
    kinds = (MEMORY, *SINKS)
    results = {
        k: CaseResult(SECTION, "mark", k, per_rep, {"flusher": "10ms", "clock": "wall"}, per_rep)
        for k in kinds
    }
    overlapped: dict[str, list[int]] = {k: [] for k in SINKS}
    flushed: dict[str, list[int]] = {k: [] for k in SINKS}
    for rep in range(cfg.repeat + 1):  # the first is the warm-up
        for kind in kinds:
            sink = None if kind == MEMORY else sinks.new(kind)
            buf = Fixtures.buffer(entries, log=sink)
            gc.collect()
            gc.disable()  # as timeit does: a collection is nobody's cost
            try:
                flusher = None if sink is None else _Flusher(buf, dcfg.flush_every)
                if flusher is not None:
                    flusher.__enter__()
                commits = 0 if sink is None else sink.commits
                t0 = time.perf_counter_ns()
                _loop_mark(buf, ids)
                dt = time.perf_counter_ns() - t0
                if sink is not None:
                    commits = sink.commits - commits
                pending = buf.pending_records
                if flusher is not None:
                    flusher.__exit__()
            finally:
                gc.enable()
            buf.flush()
            if sink is not None:
                sinks.close(sink)
            if rep:
                results[kind].ns.append(dt / per_rep)
                if kind in overlapped:
                    overlapped[kind].append(commits)
                    flushed[kind].append(per_rep - pending)
    extra = {
        "marks_per_loop": per_rep,
        "commits_during_timed_loop": {k: _summary(v) for k, v in overlapped.items()},
        "records_durable_by_loop_end": {k: _summary(v) for k, v in flushed.items()},
    }
    return list(results.values()), extra


# ---------------------------------------------------------------------------
# 2. group commit


def _group_commit(
    kind: str, cfg: Config, dcfg: DurabilityConfig, sinks: _Sinks
) -> tuple[CaseResult, dict[str, Any]]:
    """``flush()`` of ``batch`` pending records: commits counted (and, for
    SQLite, ``COMMIT`` statements traced), wall time of the flush."""
    sink = sinks.new(kind)
    buf = Buffer(log=sink)
    statements: list[str] = []
    if isinstance(sink, SQLiteLog):
        conn = sink._conn
        assert conn is not None
        conn.set_trace_callback(statements.append)
    result = CaseResult(SECTION, f"flush {dcfg.batch:,} records", kind, None, {}, 1)
    commits: list[int] = []
    traced: list[int] = []
    for rep in range(cfg.repeat + 1):
        for e in _entries(dcfg.batch, f"r{rep}-"):
            buf.append(e)
        assert buf.pending_records == dcfg.batch
        before = sink.commits
        statements.clear()
        t0 = time.perf_counter_ns()
        buf.flush()
        dt = time.perf_counter_ns() - t0
        assert buf.pending_records == 0
        if rep:
            result.ns.append(float(dt))
            commits.append(sink.commits - before)
            traced.append(statements.count("COMMIT"))
    sinks.close(sink)
    extra: dict[str, Any] = {
        "records": dcfg.batch,
        "commits_per_flush": sorted(set(commits)),
        "flush_ms": _summary([x / 1e6 for x in result.ns]),
        "us_per_record": statistics.median(result.ns) / dcfg.batch / 1e3,
    }
    if isinstance(sink, SQLiteLog):
        extra["sqlite_traced_commits_per_flush"] = sorted(set(traced))
    return result, extra


# ---------------------------------------------------------------------------
# 3. sustained appends, a flush every 10 ms


def _sustained_once(kind: str, dcfg: DurabilityConfig, sinks: _Sinks) -> tuple[float, int, int]:
    """One run: (seconds, records, commits)."""
    sink = None if kind == MEMORY else sinks.new(kind)
    buf = Buffer(log=sink)
    append = buf.append
    n = 0
    t0 = time.perf_counter()
    next_flush = t0 + dcfg.flush_every
    deadline = t0 + dcfg.sustained_s
    while True:
        for _ in range(20):
            append(Entry(f"a{n}", Kind.TOOL_OUTPUT, f"tool output {n}: 200 OK"))
            n += 1
        now = time.perf_counter()
        if now >= next_flush:
            buf.flush()
            next_flush = now + dcfg.flush_every
        if now >= deadline:
            break
    buf.flush()
    elapsed = time.perf_counter() - t0
    assert buf.pending_records == 0
    commits = 0
    if sink is not None:
        commits = sink.commits
        sinks.close(sink)
    return elapsed, n, commits


def _sustained(
    cfg: Config, dcfg: DurabilityConfig, sinks: _Sinks
) -> tuple[list[CaseResult], dict[str, Any]]:
    kinds = (MEMORY, *SINKS)
    op = "durable append, flush every 10 ms"
    results = {k: CaseResult(SECTION, op, k, None, {"clock": "wall"}) for k in kinds}
    rates: dict[str, list[float]] = {k: [] for k in kinds}
    commits: dict[str, list[int]] = {k: [] for k in kinds}
    batches: dict[str, list[float]] = {k: [] for k in kinds}
    counts: list[int] = []
    for rep in range(cfg.repeat + 1):
        # each repetition starts with the next implementation, so that none
        # always runs right after another one's disk writes
        order = kinds[rep % len(kinds) :] + kinds[: rep % len(kinds)]
        for kind in order:
            gc.collect()
            if not cfg.gc:
                gc.disable()  # as timeit does: a collection is nobody's cost
            try:
                elapsed, n, c = _sustained_once(kind, dcfg, sinks)
            finally:
                gc.enable()
            if rep:
                results[kind].ns.append(elapsed * 1e9 / n)
                rates[kind].append(n / elapsed)
                commits[kind].append(c)
                batches[kind].append(n / max(1, c))
                counts.append(n)
    for r in results.values():
        r.number = int(statistics.median(counts))
    extra: dict[str, Any] = {"seconds": dcfg.sustained_s}
    for kind in kinds:
        extra[kind] = {"records_per_s": _summary(rates[kind])}
        if kind != MEMORY:
            extra[kind]["commits"] = _summary(commits[kind])
            extra[kind]["mean_batch"] = _summary(batches[kind])
    return list(results.values()), extra


# ---------------------------------------------------------------------------
# the section


@section(SECTION)
def bench_durability(cfg: Config) -> SectionResult:
    """In memory vs ``SQLiteLog`` vs ``JsonlLog``: ``mark_stale`` (no flusher,
    and with one), group commit, sustained durable appends."""
    dcfg = DurabilityConfig.for_suite(cfg)
    res = SectionResult(SECTION)
    sinks = _Sinks()
    # The suite's fixtures (up to 1e6 entries) stay alive all run: freeze
    # them, so that the collections between (and, with --gc, in) the timed
    # loops scan only what this section allocates.
    gc.collect()
    gc.freeze()
    try:
        cases = _mark_cases(cfg, dcfg, sinks)
        measure(cases, cfg)
        res.cases = [c.result for c in cases]
        flusher_cases, flusher_extra = _marks_with_flusher(cfg, dcfg, sinks)
        res.cases += flusher_cases
        commit_extra: dict[str, Any] = {}
        for kind in SINKS:
            case, commit_extra[kind] = _group_commit(kind, cfg, dcfg, sinks)
            res.cases.append(case)
        sustained_cases, sustained_extra = _sustained(cfg, dcfg, sinks)
        res.cases += sustained_cases
        locked_goal, locked_extra = _marks_while_locked(dcfg, sinks)
    finally:
        sinks.cleanup()
        gc.unfreeze()
    gc.collect()

    for kind in SINKS:
        key = kind.lower().removesuffix("log")
        res.goals.append(
            ratio_goal(
                f"durability_mark_{key}_vs_memory",
                f"mark_stale with {kind} / in memory, no flusher",
                res.find(kind, "mark", dcfg.mark_n, flusher="none"),
                res.find(MEMORY, "mark", dcfg.mark_n, flusher="none"),
                "<=",
                1.5,
            )
        )
    for kind in SINKS:
        key = kind.lower().removesuffix("log")
        g = commit_extra[kind]
        counts = g["commits_per_flush"] + g.get("sqlite_traced_commits_per_flush", [])
        if min(counts) < 1:
            raise AssertionError(f"{kind}: a flush of {dcfg.batch} records committed nothing")
        traced = g.get("sqlite_traced_commits_per_flush")
        res.goals.append(
            Goal(
                f"durability_group_commit_{key}",
                f"commits per flush of {dcfg.batch:,} records, {kind}",
                float(max(counts)),
                1.0,
                "<=",
                note=(
                    f"{g['flush_ms']['median']:.2f} ms per flush"
                    + ("" if traced is None else f"; SQLite traced COMMITs {traced}")
                ),
            )
        )

    res.goals.append(locked_goal)

    mem_flusher = res.find(MEMORY, "mark", dcfg.flusher_marks, flusher="10ms")
    flusher_ratios = {}
    for kind in SINKS:
        durable = res.find(kind, "mark", dcfg.flusher_marks, flusher="10ms")
        ratios = [a / b for a, b in zip(durable.ns, mem_flusher.ns, strict=True)]
        flusher_ratios[kind] = {"median": statistics.median(ratios), **_summary(ratios)}
    res.extra = {
        "config": {
            "mark_n": dcfg.mark_n,
            "flusher_marks": dcfg.flusher_marks,
            "batch": dcfg.batch,
            "sustained_s": dcfg.sustained_s,
            "flush_every_s": dcfg.flush_every,
        },
        "mark_with_flusher": {**flusher_extra, "ratio_vs_memory": flusher_ratios},
        "group_commit": commit_extra,
        "sustained_appends_flush_10ms": sustained_extra,
        "mark_while_locked": locked_extra,
    }
    for kind in SINKS:
        overlapped = flusher_extra["commits_during_timed_loop"][kind]["median"]
        durable = flusher_extra["records_durable_by_loop_end"][kind]["median"]
        res.notes.append(
            f"durability: mark_stale with {kind} / in memory while a thread flushes every "
            f"10 ms: {flusher_ratios[kind]['median']:.3g}x (wall clock; in each loop of "
            f"{dcfg.flusher_marks:,} marks {overlapped:.0f} commits landed, "
            f"{durable:,.0f} records durable at its end; medians)"
        )
    rates = ", ".join(
        f"{kind} {sustained_extra[kind]['records_per_s']['median']:,.0f}"
        + (
            ""
            if kind == MEMORY
            else f" ({sustained_extra[kind]['mean_batch']['median']:,.0f} records per commit)"
        )
        for kind in (MEMORY, *SINKS)
    )
    res.notes.append(f"durability: sustained appends, a flush every 10 ms, records/s: {rates}")
    res.notes.append(
        "durability: no-flusher marks timed like the core sections; flusher marks, "
        "flushes and sustained appends with the wall clock (a disk sync is wall time)"
    )
    return res


# ---------------------------------------------------------------------------
# the script (benchmarks/durability.py)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """``python benchmarks/durability.py [--quick] [--out PATH] [--gc] [--wall]``:
    run the durability section, print its cases and goals, optionally write
    the results as JSON to ``PATH``; return the JSON-ready results."""
    parser = argparse.ArgumentParser(
        prog="durability.py", description="What a durable edit log costs the buffer."
    )
    parser.add_argument("--quick", action="store_true", help="a small, fast run (seconds)")
    parser.add_argument("--out", type=Path, metavar="PATH", help="also write the results here")
    parser.add_argument("--gc", action="store_true", help="keep the GC on while timing")
    parser.add_argument("--wall", action="store_true", help="wall clock for the marks too")
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    cfg = replace(QUICK if args.quick else FULL, gc=args.gc, timer="wall" if args.wall else "cpu")
    results = run_suite(
        cfg, [SECTION], lambda name: print(f"running {name}...", file=sys.stderr, flush=True)
    )
    print(format_report(results))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {args.out}")
    return results


# -- figures ------------------------------------------------------------------


@plot("durability.png")
def _plot_durability(plt: Any, results: dict[str, Any], out: Path, stamp: str) -> list[Path]:
    """``durability.png``: mark_stale in memory vs with a durable sink (no
    flusher; with one), the cost of one group commit, sustained durable
    appends per second."""
    dur = results["sections"].get("durability")
    if dur is None or not dur["cases"]:
        return []
    colors = {"in memory": "tab:gray", "SQLiteLog": "tab:blue", "JsonlLog": "tab:green"}
    fig, (ax_mark, ax_flush, ax_rate) = plt.subplots(
        1, 3, figsize=(14, 4.2), gridspec_kw={"width_ratios": [1.5, 1, 1]}
    )

    def bars(ax: Any, cases: list[dict[str, Any]], x0: float, scale: float) -> None:
        width = 0.8 / max(1, len(cases))
        for i, c in enumerate(cases):
            ax.bar(
                x0 - 0.4 + width * (i + 0.5),
                c["median"] * scale,
                width,
                yerr=[[(c["median"] - c["min"]) * scale], [(c["max"] - c["median"]) * scale]],
                color=colors.get(c["impl"], "tab:gray"),
                capsize=3,
                label=c["impl"] if x0 == 0 else None,
            )

    marks = [c for c in dur["cases"] if c["op"] == "mark"]
    groups = [
        ("no flusher\n(CPU time)", [c for c in marks if c["param"].get("flusher") == "none"]),
        (
            "a flush every 10 ms\n(wall time)",
            [c for c in marks if c["param"].get("flusher") == "10ms"],
        ),
    ]
    for x, (_, cs) in enumerate(groups):
        bars(ax_mark, cs, x, 1.0)
    ax_mark.set_xticks(range(len(groups)), [g for g, _ in groups])
    ax_mark.set_ylabel("ns per mark_stale (median; bars: min..max)")
    ax_mark.set_title("mark_stale: in memory vs durable sink")
    ax_mark.legend(fontsize=8)
    ax_mark.grid(True, axis="y", alpha=0.3)

    flushes = [c for c in dur["cases"] if c["op"].startswith("flush")]
    bars(ax_flush, flushes, 0, 1e-6)
    commit = dur["extra"].get("group_commit", {})
    for i, c in enumerate(flushes):
        per = commit.get(c["impl"], {}).get("commits_per_flush", [])
        width = 0.8 / len(flushes)
        ax_flush.annotate(
            f"{c['impl']}\n{' or '.join(map(str, per))} commit(s)\nper flush",
            (-0.4 + width * (i + 0.5), c["median"] * 0.5e-6),
            ha="center",
            va="center",
            fontsize=8,
            color="white",
        )
    ax_flush.set_xticks([])
    ax_flush.set_ylabel("ms per flush() (median; bars: min..max)")
    title = flushes[0]["op"] if flushes else "flush"
    ax_flush.set_title(f"group commit: {title}")
    ax_flush.grid(True, axis="y", alpha=0.3)

    sustained = dur["extra"].get("sustained_appends_flush_10ms", {})
    kinds = [k for k in colors if k in sustained]
    rates = [sustained[k]["records_per_s"] for k in kinds]
    ax_rate.bar(
        range(len(kinds)),
        [r["median"] for r in rates],
        yerr=[[r["median"] - r["min"] for r in rates], [r["max"] - r["median"] for r in rates]],
        color=[colors[k] for k in kinds],
        capsize=3,
    )
    ax_rate.set_xticks(range(len(kinds)), kinds)
    ax_rate.set_ylabel("records/s, all durable (median; bars: min..max)")
    ax_rate.set_title("sustained appends, a flush every 10 ms")
    ax_rate.grid(True, axis="y", alpha=0.3)
    fig.suptitle(f"durability: in memory vs SQLiteLog vs JsonlLog — {stamp}", fontsize=10)
    return [save_figure(plt, fig, out / "durability.png")]
