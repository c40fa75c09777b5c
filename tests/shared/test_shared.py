"""``open_shared_buffer``: one buffer shared by several processes through a
real PostgreSQL server (the session's private cluster, a schema per test).

Members are separate processes (``tests/_shared_child.py``, forked from a
forkserver that shares nothing with the test process), each running its
own event loop; every scenario runs with the members on asyncio and on trio.
The test process drives them over pipes and checks, after each scenario and
each fault: nothing acknowledged is lost, every member's ``_check()`` passes,
all members converge to the sequencer's head, and the log itself (read
straight from the database) has no gap in ``seq``, no record of an old epoch
after a newer epoch's first, and replays into a buffer that passes
``_check()``.
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
from collections.abc import Iterator
from typing import Any

import anyio
import psycopg
import pytest

from _shared_child import PipeChild, child, close_all, context, process
from quiesce import (
    Buffer,
    EditPlan,
    Entry,
    InvalidArgument,
    Kind,
    LeaseLost,
    LogFormatError,
    LogWriteError,
    Prune,
    SharedWriteTimeout,
    open_shared_buffer,
)
from quiesce._core.records import LogRecord
from quiesce._core.replay import replay
from quiesce._log.postgres import PostgresLog
from quiesce.testing import MemberPin, MemberReport, check_shared_history

BACKENDS = ["asyncio", "trio"]
FAST = {"lease": 3.0, "poll": 0.2, "timeout": 5.0}
#: the fault tests: a lease short enough to expire within a test
SHORT = {"lease": 1.0}
SLOW = pytest.mark.slow
#: the SIGKILL sweep: three seeds by default, 21 under -m slow
KILL_SEEDS = [1, 2, 3, *(pytest.param(s, marks=SLOW) for s in range(4, 22))]


class Member(PipeChild):
    """A member process (forked by the forkserver of :func:`context`) and its command pipe."""

    noun = "member"

    def __init__(self, dsn: str, backend: str, **options: Any) -> None:
        self.conn, theirs = context().Pipe()
        self.proc = process(child, dsn, backend, theirs, {**FAST, **options})
        theirs.close()
        self.role, self.epoch, self.pid = self._reply(60)

    def __call__(self, name: str, args: Any = None, timeout: float = 60) -> Any:
        self.conn.send((name, args))
        return self._reply(timeout)

    def kill(self, sig: int = signal.SIGKILL) -> None:
        os.kill(self.proc.pid, sig)  # type: ignore[arg-type]


@pytest.fixture
def members(pg_dsn: str) -> Iterator[list[Member]]:
    started: list[Member] = []
    yield started
    close_all(started)


def start(members: list[Member], dsn: str, backend: str, **options: Any) -> Member:
    m = Member(dsn, backend, **options)
    members.append(m)
    return m


def db_log(dsn: str) -> list[tuple[int, int, str, int | None, str]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(
            "SELECT seq, writer_epoch, op, version, record FROM quiesce_log "
            "WHERE buffer_id = 'shared' ORDER BY seq"
        ).fetchall()


def check_log(dsn: str) -> Buffer:
    """The cross-process checks on the log itself: no gap in seq, epochs
    never go back, and the whole log replays into a buffer passing _check()."""
    rows = db_log(dsn)
    assert [r[0] for r in rows] == list(range(len(rows))), "gap in seq"
    epochs = [r[1] for r in rows]
    assert epochs == sorted(epochs), "a record of an old epoch after a newer one"
    buf = Buffer()
    with PostgresLog(dsn, "shared") as log:
        replay(buf, log.load())
    buf._check()
    return buf


def check_merged(dsn: str, members: list[Member]) -> Buffer:
    """check_log, then the merged history of all processes: the log (merged
    by seq) with every live member's readers, flushes and lease losses
    through quiesce.testing.check_shared_history (check_history on the
    replayed log plus the cross-process checks)."""
    buf = check_log(dsn)
    assert merged_anomalies(dsn, members) == []
    return buf


def merged_anomalies(dsn: str, members: list[Member]) -> list[Any]:
    """What check_shared_history finds in the log and the live members' reports."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = [
            (epoch, LogRecord.from_dict(json.loads(text)))
            for epoch, text in conn.execute(
                "SELECT writer_epoch, record FROM quiesce_log "
                "WHERE buffer_id = 'shared' ORDER BY seq"
            )
        ]
    reports = []
    for m in members:
        if m.proc.is_alive():
            r = m("report")
            reports.append(
                MemberReport(
                    r["member"],
                    tuple(
                        MemberPin(r["member"], v, e, x, tuple(ids), tuple(reads))
                        for v, e, x, ids, reads in r["pins"]
                    ),
                    tuple(
                        (n, None if last is None else LogRecord.from_dict(last))
                        for n, last in r["flushes"]
                    ),
                    tuple(r["lease_lost"]),
                )
            )
    return check_shared_history(rows, reports)


def converge(members: list[Member]) -> dict[str, Any]:
    """Every live member reaches the sequencer's head, agrees on it and
    passes _check()."""
    live = [m for m in members if m.proc.is_alive()]
    head = max(m("summary")["version"] for m in live)
    summaries = [m("wait_applied", head) for m in live]
    for m in live:
        assert m("check") is True
    final = max(summaries, key=lambda s: s["log"])
    # the log may grow by refusals/escalations after a member's last write;
    # compare what they all have applied
    for s in summaries:
        assert {k: v for k, v in s.items() if k not in ("log", "staged")} == {
            k: v for k, v in final.items() if k not in ("log", "staged")
        }
    return final


def appended_ids(dsn: str) -> set[str]:
    return {json.loads(r[4])["ids"][0] for r in db_log(dsn) if r[2] == "append"}


def wait_for(predicate: Any, timeout: float = 20.0, interval: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(interval)


def _reads_x(buf: Any) -> None:
    """A fresh snapshot of `buf` reads the one entry "x"."""
    with buf.snapshot() as snap:
        assert [e.id for e in snap] == ["x"]


async def _rejoined(buf: Any) -> None:
    """Wait (at most 5 s) until a member that lost its lease holds one again."""
    with anyio.fail_after(5):
        while buf._lease_lost is not None:
            await anyio.sleep(0.01)


def sequencer(members: list[Member]) -> Member:
    def find() -> Member | None:
        for m in members:
            if m.proc.is_alive() and m("stats")["role"] == "sequencer":
                return m
        return None

    found = wait_for(find)
    assert isinstance(found, Member)
    return found


@pytest.mark.parametrize("backend", BACKENDS)
class TestScenarios:
    def test_replicas_converge_and_forward_writes(
        self, pg_dsn: str, members: list[Member], backend: str
    ) -> None:
        """Three processes write at once (the first holds the lease, the
        others forward): every acknowledged write is in the log once, and all
        members converge to the same head."""
        a = start(members, pg_dsn, backend)
        assert a.role == "sequencer"
        b = start(members, pg_dsn, backend)
        c = start(members, pg_dsn, backend)
        assert (b.role, c.role) == ("replica", "replica")
        for m, prefix in ((a, "a"), (b, "b"), (c, "c")):
            m.send("writes", (prefix, 25, 5.0))
        results = [m._reply(120) for m in (a, b, c)]
        for r in results:
            assert r["failed"] == [] and r["unknown"] == []
            assert len(r["acked"]) == 25
        acked = {i for r in results for i in r["acked"]}
        rows = db_log(pg_dsn)
        appended = [json.loads(r[4])["ids"][0] for r in rows if r[2] == "append"]
        assert sorted(appended) == sorted(acked)  # each exactly once
        final = converge(members)
        assert sorted(final["entries"]) == sorted(acked)
        check_merged(pg_dsn, members)
        assert b("stats")["forwarded"] == 25 + 9

    def test_a_reader_in_one_process_holds_back_a_removal_requested_in_another(
        self, pg_dsn: str, members: list[Member], backend: str
    ) -> None:
        """Process B pins a version in which x is unmarked; process C asks to
        prune x: the removal is staged (DEFERRED) and stays staged while B's
        reader is pinned, across many heartbeats; once B unpins, the
        sequencer (A) applies it, after B's unpin."""
        a = start(members, pg_dsn, backend)
        b = start(members, pg_dsn, backend)
        c = start(members, pg_dsn, backend)
        version = c("append", ("x", "the dump"))
        c("append", ("y", "kept"))
        b("wait_applied", version + 1)
        pinned_version, seen = b("pin")
        assert "x" in seen
        report = c("prune", ["x"])
        assert report == {"x": "DEFERRED"}
        time.sleep(1.5)  # > a lease: many heartbeats and horizon refreshes
        assert a("summary")["tombstones"] == []
        assert "x" in a("summary")["staged"]
        released = b("unpin")
        s = wait_for(lambda: (s := a("summary"))["tombstones"] == ["x"] and s)
        # the remove record follows the published removal in the next flush
        rows = wait_for(lambda: [r for r in db_log(pg_dsn) if r[2] == "remove"])
        removal = [json.loads(r[4]) for r in rows]
        assert len(removal) == 1
        assert removal[0]["time"] >= released  # published after B's reader left
        assert pinned_version < s["version"]
        converge(members)
        check_merged(pg_dsn, members)

    def test_readers_pinned_after_the_mark_do_not_hold_it_back(
        self, pg_dsn: str, members: list[Member], backend: str
    ) -> None:
        """A reader in another process that pinned a version where x is
        already marked does not delay x's removal (a grace period, not a
        "no readers anywhere" moment)."""
        a = start(members, pg_dsn, backend)
        b = start(members, pg_dsn, backend)
        a("append", ("x", "the dump"))
        v = a("mark", "x")
        a("flush")
        b("wait_applied", v)
        b("pin")
        # PRUNED, or DEFERRED until A has read B's newest horizon
        assert a("prune", ["x"])["x"] in ("PRUNED", "DEFERRED")
        wait_for(lambda: b("summary")["tombstones"] == ["x"])  # B still pinned
        b("unpin")
        converge(members)
        check_merged(pg_dsn, members)

    def test_a_held_back_removal_names_the_remote_process_and_task(
        self, pg_dsn: str, members: list[Member], backend: str
    ) -> None:
        """A removal held back by another member's reader for longer than
        max_pin_age is escalated (READER_PINNED) naming that member, its pid
        and the task that pins."""
        a = start(members, pg_dsn, backend, max_pin_age=0.3)
        b = start(members, pg_dsn, backend)
        v = a("append", ("x", "the dump"))
        a("flush")
        b("wait_applied", v)
        b("pin")
        assert a("prune", ["x"]) == {"x": "DEFERRED"}

        def escalated() -> list[dict[str, Any]]:
            return [e for e in a("escalations") if e["data"].get("member") is not None]

        found = wait_for(escalated, timeout=10)
        esc = found[0]
        assert esc["kind"] == "reader_pinned"
        assert esc["data"]["pid"] == b.pid
        assert esc["data"]["version"] == v
        assert "_serve" in esc["data"]["task"] or "_main" in esc["data"]["task"]
        assert f"pid {b.pid}" in esc["detail"]
        b("unpin")
        wait_for(lambda: a("summary")["tombstones"] == ["x"])
        converge(members)
        check_merged(pg_dsn, members)

    def test_forwarded_reports_and_errors_are_the_sequencers(
        self, pg_dsn: str, members: list[Member], backend: str
    ) -> None:
        """A replica's prune of a protected entry is refused exactly as on
        the sequencer; a duplicate append raises DuplicateEntry."""
        start(members, pg_dsn, backend)
        b = start(members, pg_dsn, backend)
        b("append", ("n", "attempt 2 timed out, do not retry"))
        assert b("prune", ["n"]) == {"n": "MARKED"}
        with pytest.raises(AssertionError, match="DuplicateEntry"):
            b("append", ("n", "again"))
        converge(members)
        check_merged(pg_dsn, members)


@pytest.mark.parametrize("backend", BACKENDS)
class TestFaults:
    @pytest.mark.parametrize("seed", KILL_SEEDS)
    def test_sigkill_of_the_sequencer_while_replicas_write(
        self, pg_dsn: str, members: list[Member], backend: str, seed: int, tmp_path: Any
    ) -> None:
        """SIGKILL the sequencer at a seeded moment while two replicas
        forward writes. Seeds 1, 4, ...: inside its k-th group commit, after
        the COPY, before the NOTIFY and the COMMIT; seeds 3, 6, ...: in the
        middle of a COPY, while it streams its k-th record (k seeded; a
        child-only hook holds the sequencer there and the kill lands there);
        seeds 2, 5, ...: after a seeded random delay. Another member takes
        the lease (epoch + 1) and serves. Then: nothing of the killed
        transaction became visible, nothing acknowledged is lost, no request
        was applied twice, no gap in seq, every member's _check() passes and
        the merged history passes check_shared_history. Three seeds by
        default, 21 with -m slow."""
        rng = random.Random(seed)
        held = tmp_path / "held"
        mode = ("copy", "commit", "random")[seed % 3]
        mid_commit = mode != "random"
        hold = {f"hold_{mode}": {"path": str(held), "at": rng.randint(2, 40)}} if mid_commit else {}
        a = start(members, pg_dsn, backend, **SHORT, **hold)
        b = start(members, pg_dsn, backend, **SHORT)
        c = start(members, pg_dsn, backend, **SHORT)
        a.send("writes", ("a", 200, 5.0))
        b.send("writes", ("b", 40, 5.0))
        c.send("writes", ("c", 40, 5.0))
        if mid_commit:
            wait_for(held.exists, timeout=60, interval=0.005)
            first, last = map(int, held.read_text().split())
            assert first <= last
            # the COPY is done, the transaction open: none of its rows visible
            assert [r for r in db_log(pg_dsn) if r[0] >= first] == []
        else:
            time.sleep(rng.uniform(0.05, 0.6))
        a.kill()
        a.proc.join(5)
        rb, rc = b._reply(180), c._reply(180)
        new = sequencer(members)
        assert new("stats")["epoch"] >= 2
        assert new("stats")["failovers"] >= 1
        rows = db_log(pg_dsn)
        if mid_commit:  # what the killed transaction held never appeared
            assert all(r[1] >= 2 for r in rows if r[0] >= first)
        stored = appended_ids(pg_dsn)
        for r in (rb, rc):
            assert set(r["acked"]) <= stored  # nothing acknowledged is lost
            assert not [f for f in r["failed"] if "DuplicateEntry" in f]  # applied once
        appended = [json.loads(r[4])["ids"][0] for r in rows if r[2] == "append"]
        assert len(appended) == len(set(appended))
        converge(members)
        check_merged(pg_dsn, members)

    def test_sigstop_beyond_the_lease_then_sigcont(
        self, pg_dsn: str, members: list[Member], backend: str
    ) -> None:
        """SIGSTOP the sequencer for longer than its lease: a replica takes
        over; after SIGCONT the old sequencer finds itself demoted (renewal
        refused or its flush fenced), rebuilds from the log and converges."""
        a = start(members, pg_dsn, backend, **SHORT)
        b = start(members, pg_dsn, backend, **SHORT)
        a("append", ("a0", "before"))
        a("flush")
        a.kill(signal.SIGSTOP)
        try:
            time.sleep(2.5)
            assert b("stats")["role"] == "sequencer"
            b("append", ("b0", "by the new sequencer"))
            b("flush")
        finally:
            a.kill(signal.SIGCONT)
        wait_for(lambda: a("stats")["role"] == "replica")
        final = converge(members)
        assert final["entries"] == ["a0", "b0"]
        epochs = [r[1] for r in db_log(pg_dsn)]
        assert epochs == sorted(epochs) and epochs[-1] == 2
        check_merged(pg_dsn, members)

    def test_pg_terminate_backend_of_every_connection(
        self, pg_dsn: str, members: list[Member], backend: str
    ) -> None:
        """Kill every member's database session mid-run: members reconnect
        (re-LISTEN, re-query), writes resume, nothing acknowledged is lost."""
        start(members, pg_dsn, backend, **SHORT)
        b = start(members, pg_dsn, backend, **SHORT)
        b("writes", ("w", 5, 5.0))
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            killed = conn.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE pid <> pg_backend_pid() AND datname = current_database() "
                "AND backend_type = 'client backend'"
            ).fetchone()
        assert killed is not None and killed[0] >= 6
        r = b("writes", ("v", 10, 10.0))
        assert len(r["acked"]) >= 8
        assert set(r["acked"]) <= appended_ids(pg_dsn)
        converge(members)
        check_merged(pg_dsn, members)

    def test_server_crash_and_restart(
        self, pg_cluster: Any, pg_dsn: str, members: list[Member], backend: str
    ) -> None:
        """pg_ctl stop -m immediate, then restart: members keep serving local
        reads meanwhile (stats say disconnected), writes fail with a clear
        error instead of hanging, and resume after the restart; every write
        acknowledged before the crash survives."""
        a = start(members, pg_dsn, backend, lease=2.0)
        b = start(members, pg_dsn, backend, lease=2.0)
        before = b("writes", ("p", 5, 5.0))
        pg_cluster.stop("immediate")
        try:
            time.sleep(0.5)
            r = b("writes", ("q", 2, 1.0))
            assert r["acked"] == []
            assert b("summary")["version"] >= 5  # local reads still served
        finally:
            pg_cluster.start()
        wait_for(lambda: a("stats")["connected"] or b("stats")["connected"], timeout=30)
        after = b("writes", ("r", 5, 10.0))
        assert len(after["acked"]) >= 3
        assert set(before["acked"]) | set(after["acked"]) <= appended_ids(pg_dsn)
        converge(members)
        check_merged(pg_dsn, members)


@pytest.mark.parametrize("backend", BACKENDS)
def test_partition_of_a_replica_through_a_tcp_proxy(
    pg_cluster: Any, pg_dsn: str, members: list[Member], backend: str
) -> None:
    """Cut one replica off from PostgreSQL (a TCP proxy that stops relaying):
    its writes fail within their timeout instead of hanging, its local reads
    go on and stats() says it is disconnected; once its lease has expired the
    sequencer stops waiting for it (a removal its reader held back is
    applied) and the reader's snapshot is void (LeaseLost). After the
    partition heals it re-joins, catches up and converges."""
    from _proxy import Proxy

    proxy = Proxy(("127.0.0.1", pg_cluster.port))
    try:
        a = start(members, pg_dsn, backend, **SHORT)
        options = pg_dsn.split("options=", 1)[1]
        via_proxy = f"{pg_cluster.tcp_dsn(port=proxy.port)}?options={options}"
        b = start(members, via_proxy, backend, timeout=1.0, **SHORT)
        v = b("append", ("x", "before the partition"))
        b("wait_applied", v)
        b("pin")
        assert a("prune", ["x"]) == {"x": "DEFERRED"}
        proxy.partition()
        r = b("writes", ("p", 2, 0.5))
        assert r["acked"] == [] and len(r["failed"]) + len(r["unknown"]) == 2
        assert b("summary")["entries"] == ["x"]  # local reads go on
        wait_for(lambda: not b("stats")["connected"], timeout=10)
        wait_for(lambda: a("summary")["tombstones"] == ["x"], timeout=15)  # b excluded
        wait_for(lambda: isinstance(b("read_pins")[0], str), timeout=10)
        assert b("read_pins")[0].startswith("LeaseLost: this snapshot")
        proxy.heal()
        wait_for(lambda: b("stats")["connected"] and b("stats")["lease_valid"], timeout=30)
        b("unpin")
        after = b("writes", ("q", 3, 5.0))
        assert len(after["acked"]) == 3
        final = converge(members)
        assert "x" in final["tombstones"]
        check_merged(pg_dsn, members)
    finally:
        proxy.close()


class TestInProcess:
    """Two members in one process (and one event loop): the API surface and
    bad input, on asyncio and trio."""

    @pytest.mark.anyio
    async def test_roles_reports_and_read_your_writes(
        self, pg_dsn: str, anyio_backend: str
    ) -> None:
        async with (
            open_shared_buffer(pg_dsn, "b", **FAST) as a,
            open_shared_buffer(pg_dsn, "b", **FAST) as b,
        ):
            assert (a.role, b.role) == ("sequencer", "replica")
            v = await b.append(Entry("x", Kind.REASONING, "x"))
            assert b.version >= v  # the forwarded write is applied locally
            mark = await b.mark_stale("x", "old")
            assert mark.version == v + 1
            report = await b.edit(EditPlan([Prune("x")], reason="drop"))
            assert report.applied and report.removed + report.deferred == ("x",)
            with anyio.fail_after(10):  # deferred while b's horizon was below the mark
                while "x" not in b.head().tombs.by_id:
                    await anyio.sleep(0.02)
            await a.append(Entry("y", Kind.REASONING, "y"))
            await a.flush()
            await b.wait_applied(a.version)
            assert [e.id for e in b.head().entries()] == ["y"]
            st = b.stats()
            assert (st.role, st.connected, st.forwarded) == ("replica", True, 3)
            assert a.stats().members == 1
            a._check()
            b._check()
            with pytest.raises(InvalidArgument) as expected:
                Buffer().prune(["nope"], reason="")
            with pytest.raises(InvalidArgument) as got:
                await b.prune(["nope"], reason="")  # raised by the sequencer, forwarded
            assert str(got.value) == str(expected.value)
        async with open_shared_buffer(pg_dsn, "b", **FAST) as c:
            # the previous sequencer released its lease on exit
            assert c.role == "sequencer" and c.epoch == 2
            assert [e.id for e in c.head().entries()] == ["y"]

    @pytest.mark.anyio
    async def test_a_write_with_no_sequencer_times_out(
        self, pg_dsn: str, anyio_backend: str
    ) -> None:
        """A replica whose sequencer is gone (lease held, not serving) gets
        SharedWriteTimeout, which says the request may still be applied."""
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            PostgresLog(pg_dsn, "b").close()
            conn.execute(
                "INSERT INTO quiesce_writer VALUES ('b', 7, 'ghost', now() + interval '1 hour')"
            )
        async with open_shared_buffer(pg_dsn, "b", **FAST) as b:
            assert b.role == "replica"
            with pytest.raises(SharedWriteTimeout, match=r"it may still be applied$"):
                await b.append(Entry("x", Kind.REASONING, "x"), timeout=0.3)

    @pytest.mark.anyio
    async def test_unreachable_database(self, pg_cluster: Any, anyio_backend: str) -> None:
        dsn = f"postgresql://quiesce@/postgres?host={pg_cluster.sockdir}&port=1"
        with pytest.raises(LogWriteError, match=r"^cannot connect to PostgreSQL: ") as info:
            async with open_shared_buffer(dsn, "b"):
                pass  # pragma: no cover
        assert info.value.__cause__ is None

    @pytest.mark.anyio
    async def test_newer_schema(self, pg_dsn: str, anyio_backend: str) -> None:
        PostgresLog(pg_dsn, "b").close()
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute("ALTER TABLE quiesce_meta DISABLE TRIGGER quiesce_meta_no_change")
            conn.execute("UPDATE quiesce_meta SET value = '9' WHERE key = 'schema'")
        with pytest.raises(LogFormatError, match="schema 9, written by a newer quiesce"):
            async with open_shared_buffer(pg_dsn, "b"):
                pass  # pragma: no cover

    @pytest.mark.anyio
    async def test_lease_lost_voids_snapshots(self, pg_dsn: str, anyio_backend: str) -> None:
        """A member that could not renew its member lease in time: the
        snapshots it held raise LeaseLost on every read, also after the
        member re-joined; snapshots taken after that work."""
        async with open_shared_buffer(pg_dsn, "b", **FAST) as a:
            await a.append(Entry("x", Kind.REASONING, "x"))
            with a.snapshot() as held:
                assert [e.id for e in held] == ["x"]
                a._member_valid_until = 0.0  # as if its renewals had stalled
                # the next read notices (no heartbeat needed), then it re-joins
                with pytest.raises(LeaseLost, match=r"^this snapshot \(version 1\) was pinned"):
                    held.entries()
                await _rejoined(a)
                with pytest.raises(LeaseLost):
                    assert held.version  # still void after the member re-joined
            _reads_x(a)

    @pytest.mark.anyio
    async def test_snapshot_refused_while_the_lease_is_lost(
        self, pg_dsn: str, anyio_backend: str
    ) -> None:
        async with open_shared_buffer(pg_dsn, "b", **FAST) as a:
            a._lease_lost = LeaseLost("member m could not renew its lease")
            with pytest.raises(LeaseLost, match=r"^member m could not renew its lease$"):
                a.snapshot()

    @pytest.mark.anyio
    async def test_snapshot_refused_past_the_lease_deadline(
        self, pg_dsn: str, anyio_backend: str
    ) -> None:
        """A pin past the member's own deadline is refused before any read
        (the installed maker reads the deadline the lease code wrote) and
        counts the loss; through the class the method refuses the same."""
        async with open_shared_buffer(pg_dsn, "b", **FAST) as a:
            await a.append(Entry("x", Kind.REASONING, "x"))
            _reads_x(a)
            a._member_valid_until = 0.0  # as if its renewals had stalled
            with pytest.raises(LeaseLost, match=r"^member \S+ could not renew its lease"):
                a.snapshot()
            assert a._lease_lost is not None  # counted by the pin itself
            with pytest.raises(LeaseLost, match=r"^member \S+ could not renew its lease"):
                type(a).snapshot(a)
            await _rejoined(a)
            with type(a).snapshot(a) as snap:
                assert snap.version == 1
            _reads_x(a)

    @pytest.mark.anyio
    async def test_a_member_joining_below_grace_vetoes_the_removal(
        self, pg_dsn: str, anyio_backend: str
    ) -> None:
        """A member that joined (horizon 0) after the sequencer last read the
        horizons: the removal's intent transaction sees it and the removal
        is requeued, not published (the prune reports DEFERRED, nothing
        raises); it is applied once that member's horizon passes its grace."""
        async with open_shared_buffer(pg_dsn, "b", **FAST) as a:
            await a.append(Entry("x", Kind.REASONING, "x"))
            await a.flush()
            with psycopg.connect(pg_dsn, autocommit=True) as conn:
                conn.execute(
                    "INSERT INTO quiesce_member VALUES "
                    "('b', 'ghost', 'i', now() + interval '1 hour', 0, 0, '{}')"
                )
                a.local._st.grace_floor = None  # the floor it read before the ghost joined
                report = await a.prune(["x"], reason="stale")
                assert report["x"].status.name == "DEFERRED"
                assert "x" in a.staged()
                await anyio.sleep(0.3)  # heartbeats, scheduler wake-ups
                assert "x" not in a.head().tombs.by_id
                ops = [r.op for r in a.log]  # the vetoed intent, if the floor was stale
                assert ops in (["append", "prune"], ["append", "prune", "tombstone"])
                conn.execute("UPDATE quiesce_member SET horizon = 99 WHERE member_id = 'ghost'")
            with anyio.fail_after(10):
                while "x" not in a.head().tombs.by_id:
                    await anyio.sleep(0.02)
            a._check()

    @pytest.mark.anyio
    async def test_flush_after_losing_undurable_writes_raises(
        self, pg_dsn: str, anyio_backend: str
    ) -> None:
        """A sequencer demoted while some of its writes were not durable drops
        them (they are not in the log) and its next flush() says so with
        LeaseLost, so a flush that returns always means durable."""
        async with open_shared_buffer(pg_dsn, "b", **FAST, flush_interval=60) as a:
            await a.append(Entry("kept", Kind.REASONING, "x"))
            await a.flush()
            await a.append(Entry("lost", Kind.REASONING, "y"))  # not flushed
            await a._demote("test")  # as when the lease was taken meanwhile
            with pytest.raises(LeaseLost, match=r"before 1 of its records were durable"):
                await a.flush()
            await a.flush()  # reported once
            assert [e.id for e in a.head().entries()] == ["kept"]
            a._check()

    @pytest.mark.anyio
    async def test_bad_arguments(self, pg_dsn: str, anyio_backend: str) -> None:
        with pytest.raises(InvalidArgument, match=r"^lease must be > 0, got 0$"):
            async with open_shared_buffer(pg_dsn, "b", lease=0):
                pass  # pragma: no cover
        async with open_shared_buffer(pg_dsn, "b", **FAST) as a:
            v = a.version
            with pytest.raises(InvalidArgument):
                await a.prune(["x"], reason="")
            assert a.version == v
            assert a.stats().local.version == v


@pytest.mark.parametrize("backend", BACKENDS)
def test_readme_many_processes_example(pg_dsn: str, backend: str) -> None:
    """README's "Many processes" example runs as printed, as two processes at
    once (planner and verifier), on asyncio and trio: one is the sequencer,
    both prunes are DEFERRED behind their own reader, and both entries end
    up in one log."""
    import re
    import subprocess
    import sys
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    (code,) = [b for b in re.findall(r"```python\n(.*?)```", text, flags=re.S) if "shared" in b]
    if backend == "trio":
        code = code.replace(
            'anyio.run(agent, sys.argv[1] if len(sys.argv) > 1 else "planner")',
            'anyio.run(agent, sys.argv[1] if len(sys.argv) > 1 else "planner", backend="trio")',
        )
    env = dict(os.environ, QUIESCE_DSN=pg_dsn, PYTHONPATH=os.pathsep.join(sys.path))
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, name], env=env, stdout=subprocess.PIPE, text=True
        )
        for name in ("planner", "verifier")
    ]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    roles = sorted(out.split()[1] for out in outs)
    assert roles in (["replica", "sequencer"], ["sequencer", "sequencer"])
    assert all(out.split()[2] == "DEFERRED" for out in outs)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        ids = {
            r[0]
            for r in conn.execute(
                "SELECT record::json->'ids'->>0 FROM quiesce_log "
                "WHERE buffer_id = 'conversation-42' AND op = 'append'"
            )
        }
    assert ids == {"planner-1", "verifier-1"}
