"""The shared buffer under hostile input and faults: a request row no
sequencer can apply, a foreign client's log row, a partitioned member's
reads at its lease deadline, a sequencer paused (SIGSTOP) inside a
transaction.

In-process cases run two members in one process on asyncio and trio (the
``anyio_backend`` fixture); the multi-process cases spawn members
(``tests/_shared_child.py``) on both backends, against the session's real
PostgreSQL server.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import anyio
import psycopg
import pytest

from quiesce import Entry, InvalidArgument, Kind, open_shared_buffer
from quiesce._shared import SharedBuffer
from test_shared import (
    BACKENDS,
    Member,
    check_merged,
    close_all,
    converge,
    db_log,
    merged_anomalies,
    start,
    wait_for,
)

FAST = {"lease": 3.0, "poll": 0.2, "timeout": 5.0}


@pytest.fixture
def members(pg_dsn: str) -> Iterator[list[Member]]:
    started: list[Member] = []
    yield started
    close_all(started)


async def _raw_request(dsn: str, seq: SharedBuffer, op: str, args_text: str) -> dict[str, Any]:
    """Insert a request row as a foreign psycopg client would (below every
    client-side check), wake the sequencer, and return the stored result."""
    request_id = uuid.uuid4().hex

    def insert() -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(
                "INSERT INTO quiesce_request (buffer_id, request_id, member_id, op, args) "
                "VALUES ('b', %s, 'foreign', %s, %s)",
                (request_id, op, args_text),
            )
            conn.execute("SELECT pg_notify(%s, %s)", (seq.request_channel, request_id))

    def result() -> str | None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            row = conn.execute(
                "SELECT result FROM quiesce_request WHERE buffer_id = 'b' AND request_id = %s",
                (request_id,),
            ).fetchone()
        return None if row is None else row[0]

    await anyio.to_thread.run_sync(insert)
    with anyio.fail_after(20):
        while (text := await anyio.to_thread.run_sync(result)) is None:
            await anyio.sleep(0.05)
    out: dict[str, Any] = json.loads(text)
    return out


class TestPoisonRequests:
    """One request row must never stop the sequencer: it gets an error
    result, and the next request is served by the same sequencer."""

    @pytest.mark.anyio
    async def test_a_request_nested_100k_deep_is_refused_and_serving_goes_on(
        self, pg_dsn: str, anyio_backend: str
    ) -> None:
        async with (
            open_shared_buffer(pg_dsn, "b", **FAST) as a,
            open_shared_buffer(pg_dsn, "b", **FAST) as b,
        ):
            assert (a.role, b.role) == ("sequencer", "replica")
            deep = '{"ids": ' + "[" * 100_000 + "]" * 100_000 + ', "reason": "r"}'
            result = await _raw_request(pg_dsn, a, "prune", deep)
            assert result == {
                "error": "InvalidArgument",
                "message": "prune request: args nest deeper than 1000 levels",
            }
            not_json = await _raw_request(pg_dsn, a, "append", '{"entry": NaN}')
            assert not_json["error"] == "InvalidArgument"
            assert not_json["message"].startswith("append request: args are not strict JSON")
            unknown = await _raw_request(pg_dsn, a, "drop_table", "{}")
            assert unknown["message"] == "unknown operation 'drop_table'"
            shape = await _raw_request(pg_dsn, a, "edit", '{"plan": {"ops": 7}}')
            assert shape["error"] == "InvalidArgument"
            assert shape["message"].startswith("edit request refused by the sequencer: ")
            # the same sequencer serves the next request
            v = await b.append(Entry("next", Kind.REASONING, "served after the poison rows"))
            assert b.version >= v
            assert (a.role, a.epoch, b.role) == ("sequencer", 1, "replica")
            assert a.failovers == b.failovers == 0
            a._check()
            b._check()

    @pytest.mark.anyio
    async def test_a_forwarded_turn_beyond_64_bits_is_refused_and_serving_goes_on(
        self, pg_dsn: str, anyio_backend: str
    ) -> None:
        """A replica's prune with ``turn=2**63``, forwarded below any
        client-side check (the request as the wire carries it): the replica
        gets InvalidArgument, the head is unchanged, nothing is half-removed,
        and the sequencer keeps serving (no failover)."""
        async with (
            open_shared_buffer(pg_dsn, "b", **FAST) as a,
            open_shared_buffer(pg_dsn, "b", **FAST) as b,
        ):
            v = await b.append(Entry("x", Kind.REASONING, "x"))
            await b.mark_stale("x", "old")
            head = a.version
            args = {"ids": ["x"], "reason": "stale", "actor": None, "turn": 2**63}
            too_big = r"^prune request: integer 9223372036854775808 does not fit in 64 bits$"
            with pytest.raises(InvalidArgument, match=too_big):
                await b._forward("prune", args, 10.0, None)
            assert a.version == head
            assert "x" not in a.head().tombs.by_id and "x" not in a.staged()
            report = await b.prune(["x"], reason="stale", turn=3)
            assert report["x"].status.name in ("PRUNED", "DEFERRED")
            with anyio.fail_after(10):
                while "x" not in b.head().tombs.by_id:
                    await anyio.sleep(0.02)
            assert b.head().tombs.by_id["x"].turn == 3
            assert v < b.version
            assert (a.role, a.epoch, a.failovers, b.failovers) == ("sequencer", 1, 0, 0)
            a._check()
            b._check()

    @pytest.mark.anyio
    async def test_a_replica_prune_with_turn_2_63_through_the_public_api(
        self, pg_dsn: str, anyio_backend: str
    ) -> None:
        """Regression (issue 21, defect 2), the red team's call as a user
        makes it: ``prune(..., turn=2**63)`` on a replica. Before the bounds
        it was accepted (``DEFERRED``) and the sequencer died applying it
        (``OverflowError`` out of the serving pump); now it is refused with
        InvalidArgument, the head is unchanged, and the same sequencer goes
        on serving the replica's next writes (no failover)."""
        async with (
            open_shared_buffer(pg_dsn, "b", **FAST) as a,
            open_shared_buffer(pg_dsn, "b", **FAST) as b,
        ):
            assert (a.role, b.role) == ("sequencer", "replica")
            await b.append(Entry("x", Kind.REASONING, "x"))
            await b.append(Entry("y", Kind.REASONING, "y"))
            head = a.version
            too_big = r"^prune request: integer 9223372036854775808 does not fit in 64 bits$"
            with anyio.fail_after(15), pytest.raises(InvalidArgument, match=too_big):
                await b.prune(["x", "y"], reason="stale", turn=2**63)
            assert a.version == head and not a.staged()
            with anyio.fail_after(15):
                await b.append(Entry("next", Kind.REASONING, "served after the refusal"))
                report = await b.prune(["x"], reason="stale", turn=3)
            assert report["x"].status.name in ("PRUNED", "DEFERRED")
            with anyio.fail_after(10):
                while "x" not in b.head().tombs.by_id:
                    await anyio.sleep(0.02)
            assert b.head().tombs.by_id["x"].turn == 3 and "y" in b.head().live
            assert (a.role, a.epoch, a.failovers, b.failovers) == ("sequencer", 1, 0, 0)
            a._check()
            b._check()


# -- multi-process: a partitioned replica's reads stop at its lease deadline --


def _removal_time(dsn: str, entry_id: str) -> float:
    """The ``time`` of the remove record that tombstoned ``entry_id``."""

    def find() -> float | None:
        for _seq, _epoch, op, _version, text in db_log(dsn):
            rec = json.loads(text)
            if op == "remove" and entry_id in [t["id"] for t in rec["detail"]["tombstones"]]:
                return float(rec["time"])
        return None

    found = wait_for(find, timeout=20)
    assert isinstance(found, float)
    return found


@pytest.mark.parametrize("lease_reads", [True, False], ids=["deadline-checked", "check-disabled"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_partitioned_replica_stops_reading_at_its_lease_deadline(
    pg_cluster: Any, pg_dsn: str, members: list[Member], backend: str, lease_reads: bool
) -> None:
    """Lease 1 s, timeout 4 s: replica B pins x, A prunes x (held back by
    B's reader), then B is cut off through a TCP proxy while it reads its
    pin every 5 ms; its heartbeat is stuck in a database call for the whole
    timeout. Once B's lease has expired on the database, A removes x.

    With reads checked against the deadline: B's reads fail with LeaseLost
    before the removal is published (its last good read started before the
    remove record's time) and the merged history passes. With that check
    disabled (the child hook restores the check that waited for the
    heartbeat), B serves x after its removal and check_shared_history
    reports it as an early removal: the test can fail."""
    from _proxy import Proxy

    proxy = Proxy(("127.0.0.1", pg_cluster.port))
    try:
        a = start(members, pg_dsn, backend, lease=1.0)
        options = pg_dsn.split("options=", 1)[1]
        via_proxy = f"{pg_cluster.tcp_dsn(port=proxy.port)}?options={options}"
        b = start(members, via_proxy, backend, lease=1.0, timeout=4.0, lease_reads=lease_reads)
        v = b("append", ("x", "read by B until its lease ends"))
        b("wait_applied", v)
        b("pin")
        assert a("prune", ["x"]) == {"x": "DEFERRED"}
        proxy.partition()
        b.send("read_loop", (10.0, 0.005))
        wait_for(lambda: a("summary")["tombstones"] == ["x"], timeout=20)
        removed_at = _removal_time(pg_dsn, "x")
        reads = b._reply(60)
        assert reads["last_ok"] is not None
        if lease_reads:
            assert reads["error"].startswith("LeaseLost: this snapshot (version ")
            assert reads["last_ok"] < reads["failed_at"] < removed_at + 5
            assert reads["last_ok"] < removed_at  # never served after the removal
        else:
            assert reads["last_ok"] > removed_at  # the violation the check prevents
        proxy.heal()
        wait_for(lambda: b("stats")["connected"] and b("stats")["lease_valid"], timeout=30)
        if lease_reads:
            check_merged(pg_dsn, members)
        else:
            found = merged_anomalies(pg_dsn, members)
            assert [str(f.kind) for f in found] == ["early-removal"]
            assert "read it " in found[0].detail and "after the removal" in found[0].detail
        b("unpin")
        converge(members)
    finally:
        proxy.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_partitioned_sequencer_stops_reading_at_its_lease_deadline(
    pg_cluster: Any, pg_dsn: str, members: list[Member], backend: str
) -> None:
    """Regression (issue 21, defect 3, "same for a partitioned sequencer"):
    lease 1 s, timeout 4 s. Sequencer A pins x and is cut off through a TCP
    proxy while it reads its pin every 5 ms, its heartbeat stuck in a
    database call. Replica B takes the lease once A's has expired on the
    database and removes x. A's reads fail with LeaseLost before the remove
    record's time (before the fix they went on for seconds after it), and
    the merged history passes once A is healed and demoted."""
    from _proxy import Proxy

    proxy = Proxy(("127.0.0.1", pg_cluster.port))
    try:
        options = pg_dsn.split("options=", 1)[1]
        via_proxy = f"{pg_cluster.tcp_dsn(port=proxy.port)}?options={options}"
        a = start(members, via_proxy, backend, lease=1.0, timeout=4.0)
        b = start(members, pg_dsn, backend, lease=1.0, timeout=4.0)
        assert a("stats")["role"] == "sequencer"
        v = a("append", ("x", "read by A until its lease ends"))
        b("wait_applied", v)
        a("pin")
        proxy.partition()
        a.send("read_loop", (10.0, 0.005))
        wait_for(lambda: b("stats")["role"] == "sequencer", timeout=30)
        assert b("prune", ["x"])["x"] in ("PRUNED", "DEFERRED")
        wait_for(lambda: b("summary")["tombstones"] == ["x"], timeout=20)
        removed_at = _removal_time(pg_dsn, "x")
        reads = a._reply(60)
        assert reads["last_ok"] is not None
        assert reads["error"].startswith("LeaseLost: "), reads
        assert reads["last_ok"] < reads["failed_at"] < removed_at + 5
        assert reads["last_ok"] < removed_at  # never served after the removal
        proxy.heal()
        wait_for(lambda: a("stats")["connected"] and a("stats")["role"] == "replica", timeout=30)
        check_merged(pg_dsn, members)
        a("unpin")
        converge(members)
    finally:
        proxy.close()


# -- multi-process: a sequencer paused inside a transaction ------------------

#: (seed, backend) of the SIGSTOP sweep: in the default run two cases, the
#: group-commit mode (seed 1) on asyncio and the COPY mode (seed 3) on trio
#: (each mode and each backend once); seed 1 on trio, seed 3 on asyncio, the
#: random-delay mode and seeds 4-12 run under ``-m slow`` (24 cases in all)
STOP_DEFAULT = {(1, "asyncio"), (3, "trio")}
STOP_CASES = [
    *(
        (seed, backend)
        if (seed, backend) in STOP_DEFAULT
        else pytest.param(seed, backend, marks=pytest.mark.slow)
        for seed in range(1, 13)
        for backend in BACKENDS
    ),
]
#: the lease of the SIGSTOP sweep (failover must take at most twice this)
STOP_LEASE = 2.0
#: failover times measured by the sweep: (mode, seconds to the new epoch,
#: seconds to its first committed record), printed with -s
FAILOVERS: list[tuple[str, float, float]] = []


def _writer(dsn: str) -> tuple[int, str]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT epoch, holder FROM quiesce_writer WHERE buffer_id = 'shared'"
        ).fetchone()
    assert row is not None
    return int(row[0]), str(row[1])


def _sessions(dsn: str) -> str:
    """The lease row and every session of the test database, for a failure
    message (who waits on what)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        lease = conn.execute("SELECT epoch, holder, lease_until - now() FROM quiesce_writer")
        rows = [repr(r) for r in lease.fetchall()]
        rows.append(
            "log rows by epoch: "
            + repr(
                conn.execute(
                    "SELECT writer_epoch, count(*), max(seq) FROM quiesce_log "
                    "GROUP BY writer_epoch ORDER BY 1"
                ).fetchall()
            )
        )
        rows += [
            repr(r)
            for r in conn.execute(
                "SELECT pid, application_name, state, wait_event, xact_start IS NOT NULL, "
                "left(query, 60) FROM pg_stat_activity WHERE datname = current_database() "
                "AND pid <> pg_backend_pid()"
            )
        ]
    return "\n".join(rows)


def _first_row_of(dsn: str, epoch: int) -> int | None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT min(seq) FROM quiesce_log WHERE buffer_id = 'shared' AND writer_epoch = %s",
            (epoch,),
        ).fetchone()
    return None if row is None or row[0] is None else int(row[0])


@pytest.mark.parametrize(("seed", "backend"), STOP_CASES)
def test_sigstop_of_the_sequencer_mid_transaction(
    pg_dsn: str, members: list[Member], backend: str, seed: int, tmp_path: Any
) -> None:
    """SIGSTOP the sequencer (lease 2 s) at a seeded point while two
    replicas forward writes — seeds 1, 4, ...: inside its k-th group commit
    (after the COPY and the result updates, before the COMMIT: the session
    idle in a transaction holding row and advisory locks); seeds 3, 6, ...:
    in the middle of a COPY (the server waiting for data); seeds 2, 5, ...:
    after a seeded random delay. Nothing the paused session holds may hold
    back the takeover: a replica takes the lease (epoch + 1) and commits its
    first record within 2 leases of the stop. After SIGCONT the old
    sequencer finds itself demoted, nothing acknowledged is lost, no request
    is applied twice, and the merged history passes. The failover times are
    recorded (``FAILOVERS``)."""
    import random
    import signal

    rng = random.Random(seed)
    held, resume = tmp_path / "held", tmp_path / "resume"
    mode = ("copy", "commit", "random")[seed % 3]
    hold = (
        {f"hold_{mode}": {"path": str(held), "at": rng.randint(2, 30), "resume": str(resume)}}
        if mode != "random"
        else {}
    )
    a = start(members, pg_dsn, backend, lease=STOP_LEASE, **hold)
    b = start(members, pg_dsn, backend, lease=STOP_LEASE)
    c = start(members, pg_dsn, backend, lease=STOP_LEASE)
    a.send("writes", ("a", 200, 5.0))
    b.send("writes", ("b", 120, 5.0))  # still writing when a stops
    c.send("writes", ("c", 120, 5.0))
    if mode != "random":
        wait_for(held.exists, timeout=60, interval=0.005)
    else:
        time.sleep(rng.uniform(0.05, 0.6))
    epoch, _ = _writer(pg_dsn)
    a.kill(signal.SIGSTOP)
    stopped = time.monotonic()
    try:
        resume.write_text("go")  # the held thread goes on once a runs again
        try:
            wait_for(lambda: _writer(pg_dsn)[0] > epoch, timeout=60, interval=0.02)
            took = time.monotonic() - stopped
            wait_for(lambda: _first_row_of(pg_dsn, epoch + 1) is not None, timeout=60)
            served = time.monotonic() - stopped
        except AssertionError:
            raise AssertionError(
                f"no failover from epoch {epoch} (stopped pid {a.pid}):\n{_sessions(pg_dsn)}"
            ) from None
        FAILOVERS.append((mode, took, served))
        print(
            f"SIGSTOP {mode} seed {seed} {backend}: new epoch after {took:.2f}s, "
            f"first record after {served:.2f}s"
        )
    finally:
        a.kill(signal.SIGCONT)
    assert served <= 2 * STOP_LEASE, f"failover took {served:.2f}s (lease {STOP_LEASE}s)"
    rb, rc = b._reply(180), c._reply(180)
    ra = a._reply(180)
    stored = {json.loads(r[4])["ids"][0] for r in db_log(pg_dsn) if r[2] == "append"}
    for r in (rb, rc):
        assert set(r["acked"]) <= stored  # nothing acknowledged is lost
        assert not [f for f in r["failed"] if "DuplicateEntry" in f]  # applied once
    assert set(ra["acked"]) <= stored
    appended = [json.loads(r[4])["ids"][0] for r in db_log(pg_dsn) if r[2] == "append"]
    assert len(appended) == len(set(appended))
    converge(members)
    check_merged(pg_dsn, members)


# -- multi-process: a foreign client's log rows --------------------------------


def _foreign_row(dsn: str, entry_id: str) -> tuple[int, int, int, str]:
    """A well-formed append record of a new entry for the next seq, stamped
    with the current epoch, as a foreign client would forge it (copied from
    the last stored append): (epoch, seq, version, text)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT epoch FROM quiesce_writer WHERE buffer_id = 'shared'").fetchone()
        last = conn.execute(
            "SELECT record FROM quiesce_log WHERE buffer_id = 'shared' AND op = 'append' "
            "ORDER BY seq DESC LIMIT 1"
        ).fetchone()
        top = conn.execute(
            "SELECT max(seq) + 1, max(version) + 1 FROM quiesce_log WHERE buffer_id = 'shared'"
        ).fetchone()
    assert row is not None and last is not None and top is not None
    rec = json.loads(last[0])
    old = rec["ids"][0]
    rec.update(seq=top[0], version=top[1], ids=[entry_id])
    rec["detail"]["entry"]["id"] = entry_id
    rec["detail"]["key"] = float(rec["detail"]["key"]) + 1000.0  # a free order key
    assert old != entry_id
    return int(row[0]), int(top[0]), int(top[1]), json.dumps(rec, separators=(",", ":"))


_INSERT_ROW = (
    "INSERT INTO quiesce_log (buffer_id, seq, writer_epoch, format, op, version, record) "
    "VALUES ('shared', %s, %s, 1, 'append', %s, %s)"
)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_foreign_row_of_the_current_epoch_is_refused(
    pg_dsn: str, members: list[Member], backend: str
) -> None:
    """A foreign psycopg client inserts a well-formed record with the current
    epoch and the next seq (the fence's epoch and seq checks pass), once
    plainly and once with a guessed writer token: the trigger refuses both
    (SQLSTATE QF002), the log never holds the row, so no replica applies
    it, and the sequencer goes on serving as before (no wedge, no
    failover)."""
    a = start(members, pg_dsn, backend)
    b = start(members, pg_dsn, backend)
    assert len(b("writes", ("w", 4, 5.0))["acked"]) == 4
    a("flush")
    for guess in (None, "0" * 64):
        epoch, seq, version, text = _foreign_row(pg_dsn, "forged")
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            if guess is not None:
                conn.execute("SELECT set_config('quiesce.writer_token', %s, false)", (guess,))
            with pytest.raises(psycopg.Error, match="does not hold the writer lease") as info:
                conn.execute(_INSERT_ROW, (seq, epoch, version, text))
        assert info.value.sqlstate == "QF002"
    after = b("writes", ("v", 4, 5.0))
    assert len(after["acked"]) == 4 and after["failed"] == []
    assert "forged" not in {json.loads(r[4])["ids"][0] for r in db_log(pg_dsn) if r[2] == "append"}
    final = converge(members)
    assert "forged" not in final["entries"]
    assert a("stats")["role"] == "sequencer" and a("stats")["failovers"] == 0
    assert a("stats")["epoch"] == epoch
    check_merged(pg_dsn, members)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_row_past_the_fence_makes_the_sequencer_step_down(
    pg_dsn: str, members: list[Member], backend: str
) -> None:
    """A row that got past the fences (its owner disabled the insert trigger
    for it) sits where the sequencer's next record goes: the sequencer does
    not wedge retrying a write that can never succeed. Its next batch finds
    the stored log diverged from its own (LogDiverged, a fence), it steps
    down and rebuilds from the log, the lease passes on, and forwarded
    writes are served again; every member converges on the log as stored."""
    a = start(members, pg_dsn, backend, lease=1.0)
    b = start(members, pg_dsn, backend, lease=1.0)
    assert len(b("writes", ("w", 3, 5.0))["acked"]) == 3
    a("flush")
    epoch, seq, version, text = _foreign_row(pg_dsn, "forged")
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE quiesce_log DISABLE TRIGGER quiesce_log_insert")
        conn.execute(_INSERT_ROW, (seq, epoch, version, text))
        conn.execute("ALTER TABLE quiesce_log ENABLE TRIGGER quiesce_log_insert")
    a("append", ("mine", "written where the forged row already is"))
    with pytest.raises(AssertionError, match="LeaseLost: this member lost the writer lease"):
        a("flush")  # the write that diverged is dropped, and flush() says so
    after = b("writes", ("v", 4, 10.0))
    assert len(after["acked"]) >= 3
    final = converge(members)
    assert "forged" in final["entries"] and "mine" not in final["entries"]
    epochs = [r[1] for r in db_log(pg_dsn)]
    assert epochs == sorted(epochs) and epochs[-1] > epoch
    check_merged(pg_dsn, members)
