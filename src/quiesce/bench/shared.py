"""The ``shared`` section: what sharing one buffer through PostgreSQL costs.

Runs as the ``shared`` section of ``quiesce bench`` against the server at
``$QUIESCE_BENCH_DSN``, or else a private cluster it starts for the run
(:mod:`quiesce.bench.pg`: ``initdb --no-sync``, fsync off, unix socket;
Debian's PostgreSQL 15 on the project's machines). Without either, the
section reports its goals as SKIP. Every figure is a ratio or a latency
measured in this one run, side by side:

1. ``mark_stale`` on the sequencer's buffer (a ``PostgresLog`` sink, no
   flusher) / in memory — the mark path never touches the network. Timed like
   the durability section (CPU time, ``Case`` repetitions).
2. pin + unpin through a replica's ``SharedBuffer.snapshot()`` (a real
   replica, its event loop in another thread) / on a local buffer with the
   same entries.
3. ``flush()`` of 1,000 records: ``PostgresLog`` / ``SQLiteLog`` (wall time,
   paired repetitions).
4. Replica lag: the sequencer's flush returns → the replica's local version
   reaches it (two members in this process, one event loop; p99 of
   ``samples``).
5. Failover: a sequencer process (spawned) is SIGSTOPped → this process,
   a replica, holds the lease and has applied a write as sequencer; divided by
   the lease.
6. A forwarded ``mark_stale`` from a replica, round trip (p50), loopback.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import anyio

from quiesce import Buffer, Entry, Kind, LogSink, SQLiteLog

from .lib import (
    _FIXTURES,
    Case,
    CaseResult,
    Config,
    Fixtures,
    Goal,
    SectionResult,
    measure,
    ratio_goal,
    section,
)

__all__ = ["bench_shared"]

SECTION = "shared"
BATCH = 1000


@contextlib.contextmanager
def _server() -> Iterator[str | None]:
    """A DSN: ``$QUIESCE_BENCH_DSN``, a private cluster, or None."""
    dsn = os.environ.get("QUIESCE_BENCH_DSN")
    if dsn:
        yield dsn
        return
    from .pg import Cluster, find_bindir, free_port

    bindir = find_bindir()
    if bindir is None:
        yield None
        return
    cluster = Cluster.create(bindir, free_port())
    try:
        yield cluster.dsn
    finally:
        cluster.destroy()


def _schema(dsn: str) -> str:
    from .pg import new_schema

    return new_schema(dsn)


# -- 1. marks on the sequencer's buffer ----------------------------------------


def _mark_cases(dsn: str, n: int) -> tuple[list[Case], list[Any]]:
    from quiesce import PostgresLog

    entries = _FIXTURES.entries(n)
    ids = Fixtures.ids(entries)
    opened: list[Any] = []
    cases = []
    for impl in ("memory", "PostgresLog"):

        def setup(impl: str = impl) -> tuple[Buffer, list[str], list[int]]:
            sink = None
            if impl == "PostgresLog":
                sink = PostgresLog(dsn, uuid.uuid4().hex)
                opened.append(sink)
            return Fixtures.buffer(entries, log=sink), ids, [0]

        def prepare(st: tuple[Buffer, list[str], list[int]], count: int) -> Callable[[], None]:
            buf, all_ids, pos = st
            todo = all_ids[pos[0] : pos[0] + count]
            pos[0] += count
            mark = buf.mark_stale

            def run() -> None:
                for i in todo:
                    mark(i, "stale")

            return run

        result = CaseResult(SECTION, "mark", impl, n, {"flusher": "none"})
        cases.append(Case(result, setup, prepare, budget=n))
    return cases, opened


# -- 2. pins on a replica's buffer ------------------------------------------------


@contextlib.contextmanager
def _replica(dsn: str, entries: list[Entry]) -> Iterator[Any]:
    """A real replica (with its sequencer), run by an event loop in another
    thread; yields the replica's ``SharedBuffer`` once it holds ``entries``."""
    from anyio.from_thread import start_blocking_portal

    from quiesce import open_shared_buffer

    bid = uuid.uuid4().hex
    with start_blocking_portal() as portal:
        seq_cm = portal.wrap_async_context_manager(open_shared_buffer(dsn, bid, poll=1.0))
        with seq_cm as seq:
            for e in entries:
                portal.call(seq.append, e)
            portal.call(seq.flush)
            rep_cm = portal.wrap_async_context_manager(open_shared_buffer(dsn, bid, poll=1.0))
            with rep_cm as rep:
                if rep.role != "replica" or rep.version != seq.version:
                    raise RuntimeError("the benchmark's replica did not start as expected")
                yield rep


def _pin_cases(replica: Any, n: int) -> list[Case]:
    entries = _FIXTURES.entries(n)
    local = Fixtures.buffer(entries)
    cases = []
    for impl, buf in (("local", local), ("replica", replica)):

        def setup(b: Any = buf) -> Any:
            return b

        def prepare(b: Any, count: int) -> Callable[[], None]:
            snapshot = b.snapshot

            def run() -> None:
                for _ in range(count):
                    with snapshot():
                        pass

            return run

        cases.append(Case(CaseResult(SECTION, "pin+unpin", impl, n), setup, prepare))
    return cases


# -- 3. group commit -------------------------------------------------------------


def _flushes(dsn: str, repeat: int) -> tuple[CaseResult, CaseResult]:
    from quiesce import PostgresLog

    results = {
        k: CaseResult(SECTION, f"flush {BATCH:,} records", k, None, {"clock": "wall"}, 1)
        for k in ("SQLiteLog", "PostgresLog")
    }
    with tempfile.TemporaryDirectory() as tmp:
        sinks: dict[str, LogSink] = {
            "SQLiteLog": SQLiteLog(os.path.join(tmp, "log.db")),
            "PostgresLog": PostgresLog(dsn, uuid.uuid4().hex),
        }
        bufs = {k: Buffer(log=s) for k, s in sinks.items()}
        try:
            for rep in range(repeat + 1):
                for kind, buf in bufs.items():
                    for i in range(BATCH):
                        buf.append(Entry(f"r{rep}-{i}", Kind.REASONING, f"step {i} " * 8))
                    t0 = time.perf_counter_ns()
                    buf.flush()
                    dt = time.perf_counter_ns() - t0
                    if rep:
                        results[kind].ns.append(float(dt))
        finally:
            for s in sinks.values():
                s.close()
    return results["PostgresLog"], results["SQLiteLog"]


# -- 4 and 6. lag and forwarded round trips, two members in one process --------------


async def _lag_and_round_trips(dsn: str, samples: int) -> tuple[list[float], list[float]]:
    from quiesce import open_shared_buffer

    lags: list[float] = []
    trips: list[float] = []
    async with (
        open_shared_buffer(dsn, "bench", lease=5.0, poll=1.0) as seq,
        open_shared_buffer(dsn, "bench", lease=5.0, poll=1.0) as rep,
    ):
        assert (seq.role, rep.role) == ("sequencer", "replica")
        for i in range(samples + 5):
            await seq.append(Entry(f"lag{i}", Kind.REASONING, f"step {i}"))
            await seq.flush()
            t0 = time.perf_counter()
            await rep.wait_applied(seq.version)
            if i >= 5:
                lags.append(time.perf_counter() - t0)
        for i in range(samples + 5):
            t0 = time.perf_counter()
            await rep.mark_stale(f"lag{i}", "old")
            if i >= 5:
                trips.append(time.perf_counter() - t0)
    return lags, trips


# -- 5. failover ------------------------------------------------------------------------


#: How long the spawned sequencer may take to start and hold the lease. Only
#: the start-up waits on it (the measured failover starts at the SIGSTOP):
#: under load the lease may not be taken on opening (its lock wait is a
#: quarter of the lease, or the last round's killed holder is still being
#: ended), and the heartbeat takes it a beat later.
_STARTUP_DEADLINE = 120.0


def _sequencer_process(dsn: str, lease: float, ready: Any) -> None:
    """A spawned sequencer that serves until it is stopped or killed.

    It reports its role once it holds the lease, or, failing that within
    ``_STARTUP_DEADLINE`` seconds, the role it has then (the parent refuses it).
    """

    async def main() -> None:
        from quiesce import open_shared_buffer

        async with open_shared_buffer(dsn, "failover", lease=lease, poll=0.2) as buf:
            with anyio.move_on_after(_STARTUP_DEADLINE):
                while buf.role != "sequencer":
                    await anyio.sleep(0.05)
            ready.send(buf.role)
            await anyio.sleep_forever()

    anyio.run(main)


async def _failover_once(dsn: str, lease: float) -> float:
    from quiesce import open_shared_buffer

    ctx = multiprocessing.get_context("spawn")
    mine, theirs = ctx.Pipe()
    proc = ctx.Process(target=_sequencer_process, args=(dsn, lease, theirs))
    proc.start()
    try:
        if not mine.poll(_STARTUP_DEADLINE + 60) or mine.recv() != "sequencer":
            raise RuntimeError("the failover benchmark's sequencer did not start")
        async with open_shared_buffer(dsn, "failover", lease=lease, poll=0.2) as rep:
            assert rep.role == "replica"
            assert proc.pid is not None
            os.kill(proc.pid, signal.SIGSTOP)
            t0 = time.perf_counter()
            with anyio.fail_after(lease * 10):
                while rep.role != "sequencer":
                    await anyio.sleep(0.005)
                await rep.append(Entry(uuid.uuid4().hex, Kind.REASONING, "served"))
            elapsed = time.perf_counter() - t0
    finally:
        if proc.pid is not None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.join(10)
    return elapsed


# -- the section ---------------------------------------------------------------------------


def _skip(res: SectionResult, why: str) -> SectionResult:
    for key, text, limit in (
        ("shared_mark_vs_memory", "mark_stale on the sequencer (PostgresLog) / in memory", 1.5),
        ("shared_pin_replica_vs_local", "pin + unpin on a replica / local buffer", 1.2),
        ("shared_flush_pg_vs_sqlite", f"flush of {BATCH:,}: PostgresLog / SQLiteLog", 3.0),
        ("shared_replica_lag_p99_ms", "replica lag p99 (ms)", 20.0),
        ("shared_failover_vs_lease", "failover after SIGSTOP / lease", 2.0),
        ("shared_forwarded_mark_p50_ms", "forwarded mark_stale round trip p50 (ms)", 5.0),
    ):
        res.goals.append(Goal(key, text, None, limit, "<=", note=why))
    return res


@section(SECTION)
def bench_shared(cfg: Config) -> SectionResult:
    """The six figures of the module docstring, against one PostgreSQL server."""
    res = SectionResult(SECTION)
    n = min(cfg.n_goal, 20_000)
    samples = 60 if n < 20_000 else 200
    lease = 1.0
    with _server() as dsn:
        if dsn is None:
            return _skip(res, "no PostgreSQL server (set QUIESCE_BENCH_DSN or install it)")
        dsn = _schema(dsn)
        cases, opened = _mark_cases(dsn, n)
        try:
            with _replica(dsn, _FIXTURES.entries(n)) as replica:
                pins = _pin_cases(replica, n)
                measure([*cases, *pins], cfg)
        finally:
            for sink in opened:
                sink.close()
        res.cases = [c.result for c in (*cases, *pins)]
        pg_flush, sqlite_flush = _flushes(dsn, cfg.repeat)
        res.cases += [pg_flush, sqlite_flush]
        lags, trips = anyio.run(_lag_and_round_trips, dsn, samples)
        failovers = [anyio.run(_failover_once, dsn, lease) for _ in range(3)]

    res.goals.append(
        ratio_goal(
            "shared_mark_vs_memory",
            "mark_stale on the sequencer's buffer (PostgresLog, no flusher) / in memory",
            res.find("PostgresLog", "mark", n, flusher="none"),
            res.find("memory", "mark", n, flusher="none"),
            "<=",
            1.5,
        )
    )
    res.goals.append(
        ratio_goal(
            "shared_pin_replica_vs_local",
            "pin + unpin on a replica's buffer / on a local buffer",
            res.find("replica", "pin+unpin", n),
            res.find("local", "pin+unpin", n),
            "<=",
            1.2,
        )
    )
    res.goals.append(
        ratio_goal(
            "shared_flush_pg_vs_sqlite",
            f"flush of {BATCH:,} records: PostgresLog / SQLiteLog",
            pg_flush,
            sqlite_flush,
            "<=",
            3.0,
        )
    )
    lag_ms = sorted(x * 1e3 for x in lags)
    p99 = lag_ms[min(len(lag_ms) - 1, round(0.99 * (len(lag_ms) - 1)))]
    res.goals.append(
        Goal(
            "shared_replica_lag_p99_ms",
            "replica lag, sequencer flush returned -> replica version, p99 (ms)",
            p99,
            20.0,
            "<=",
            (lag_ms[0], lag_ms[-1]),
            note=f"{len(lag_ms)} samples, median {statistics.median(lag_ms):.2f} ms",
        )
    )
    ratios = [f / lease for f in failovers]
    res.goals.append(
        Goal(
            "shared_failover_vs_lease",
            f"failover: sequencer SIGSTOPped -> new sequencer served a write / lease ({lease:g}s)",
            statistics.median(ratios),
            2.0,
            "<=",
            (min(ratios), max(ratios)),
            note=f"{len(ratios)} runs",
        )
    )
    trip_ms = sorted(x * 1e3 for x in trips)
    res.goals.append(
        Goal(
            "shared_forwarded_mark_p50_ms",
            "forwarded mark_stale from a replica, round trip p50 (ms)",
            statistics.median(trip_ms),
            5.0,
            "<=",
            (trip_ms[0], trip_ms[-1]),
            note=f"{len(trip_ms)} samples, p99 {trip_ms[round(0.99 * (len(trip_ms) - 1))]:.2f} ms",
        )
    )
    res.extra = {
        "lag_ms": lag_ms,
        "forwarded_mark_ms": trip_ms,
        "failover_s": failovers,
        "lease_s": lease,
        "n": n,
        "server": "QUIESCE_BENCH_DSN" if os.environ.get("QUIESCE_BENCH_DSN") else "private",
    }
    res.notes.append(
        "shared: lag and forwarded marks with both members in one process (loopback unix "
        "socket); failover with the old sequencer in a spawned process"
    )
    return res
