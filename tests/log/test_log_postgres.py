"""PostgresLog against a real PostgreSQL server (the session's private cluster,
one schema per test): schema, append-only triggers, the epoch fence, group
commit with one NOTIFY, recovery, refusal of newer schemas and formats,
connection faults, ``quiesce inspect postgresql://``."""

from __future__ import annotations

import io
import random
import sys
import threading
import time
from contextlib import redirect_stdout
from typing import Any

import psycopg
import pytest

from _workload import Workload, random_op, state
from quiesce import (
    Buffer,
    Entry,
    InvalidArgument,
    InvalidType,
    Kind,
    LogFormatError,
    LogSink,
    LogWriteError,
    PostgresLog,
    WriterFenced,
    open_buffer,
)
from quiesce._core.records import FORMAT, LogRecord
from quiesce._log.inspect import main as inspect_main


def _filled(dsn: str, n: int = 5, buffer_id: str = "b") -> Buffer:
    buf = Buffer(log=PostgresLog(dsn, buffer_id))
    for i in range(n):
        buf.append(Entry(f"e{i}", Kind.REASONING, f"step {i}"))
    buf.mark_stale("e0", "old")
    buf.flush()
    return buf


def _raw(dsn: str) -> psycopg.Connection[Any]:
    return psycopg.connect(dsn, autocommit=True)


def _rows(dsn: str, buffer_id: str = "b") -> list[tuple[Any, ...]]:
    with _raw(dsn) as conn:
        return conn.execute(
            "SELECT seq, op, version, writer_epoch, record FROM quiesce_log "
            "WHERE buffer_id = %s ORDER BY seq",
            (buffer_id,),
        ).fetchall()


def _close(buf: Buffer) -> None:
    assert buf.sink is not None
    buf.sink.close()


class TestSchema:
    def test_tables_and_columns(self, pg_dsn: str) -> None:
        """A new log creates the five tables and records the schema and format;
        the display columns repeat the authoritative record."""
        _close(_filled(pg_dsn, 2))
        with _raw(pg_dsn) as conn:
            tables = {
                r[0]
                for r in conn.execute(
                    "SELECT table_name FROM information_schema.tables "
                    "WHERE table_schema = current_schema()"
                )
            }
            meta = dict(conn.execute("SELECT key, value FROM quiesce_meta").fetchall())
        assert tables == {
            "quiesce_meta",
            "quiesce_log",
            "quiesce_writer",
            "quiesce_member",
            "quiesce_request",
        }
        assert meta == {"schema": "1", "format": str(FORMAT), "writer": "quiesce"}
        rows = _rows(pg_dsn)
        assert [(r[0], r[1], r[2], r[3]) for r in rows] == [
            (0, "append", 1, 0),
            (1, "append", 2, 0),
            (2, "mark", 3, 0),
        ]

    def test_is_a_log_sink(self, pg_dsn: str) -> None:
        with PostgresLog(pg_dsn, "b") as log:
            assert isinstance(log, LogSink)
            assert repr(log).endswith("'b': 0 records>")
        assert log.closed
        assert repr(log).endswith("'b': closed>")

    def test_any_string_round_trips(self, pg_dsn: str) -> None:
        """NUL and non-ASCII text (NUL is what jsonb would refuse) are
        recovered exactly: the record is stored as ASCII JSON text. Lone
        surrogates never reach a log: Entry and mark_stale refuse them."""
        buf = Buffer(log=PostgresLog(pg_dsn, "b"))
        buf.append(Entry("u", Kind.REASONING, "naïve — 日本語 \x00", meta={"k": "\x00€"}))
        buf.mark_stale("u", "NUL \x00 and 😀 in a reason")
        buf.flush()
        before = state(buf)
        _close(buf)
        assert state(Buffer(log=PostgresLog(pg_dsn, "b"))) == before

    def test_buffers_share_the_tables_by_id(self, pg_dsn: str) -> None:
        """Two buffer ids in one schema keep separate logs, each from seq 0."""
        a = _filled(pg_dsn, 3, "a")
        b = _filled(pg_dsn, 1, "b")
        assert [r[0] for r in _rows(pg_dsn, "a")] == [0, 1, 2, 3]
        assert [r[0] for r in _rows(pg_dsn, "b")] == [0, 1]
        sa, sb = state(a), state(b)
        _close(a)
        _close(b)
        assert state(Buffer(log=PostgresLog(pg_dsn, "a"))) == sa
        assert state(Buffer(log=PostgresLog(pg_dsn, "b"))) == sb

    def test_processes_opening_together_create_the_schema_once(self, pg_dsn: str) -> None:
        """Eight threads opening the first log at once: the advisory lock lets
        one create the tables; all open."""
        errors: list[BaseException] = []
        logs: list[PostgresLog] = []

        def open_one() -> None:
            try:
                logs.append(PostgresLog(pg_dsn, "b"))
            except BaseException as exc:  # pragma: no cover - the failure reported below
                errors.append(exc)

        threads = [threading.Thread(target=open_one) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert len(logs) == 8
        for log in logs:
            log.close()


class TestAppendOnly:
    @pytest.mark.parametrize(
        ("sql", "message"),
        [
            (
                "UPDATE quiesce_log SET record = '{}' WHERE seq = 1",
                "quiesce_log is append-only: UPDATE refused",
            ),
            ("UPDATE quiesce_log SET op = 'forged'", "quiesce_log is append-only: UPDATE refused"),
            ("DELETE FROM quiesce_log WHERE seq = 0", "quiesce_log is append-only: DELETE refused"),
            ("DELETE FROM quiesce_log", "quiesce_log is append-only: DELETE refused"),
            ("TRUNCATE quiesce_log", "quiesce_log is append-only: TRUNCATE refused"),
            (
                "INSERT INTO quiesce_log VALUES ('b', 99, 0, 1, 'mark', 9, '{}')",
                "quiesce_log is append-only: seq 99 of buffer b is not the next one (6)",
            ),
            (
                "INSERT INTO quiesce_log VALUES ('b', 0, 0, 1, 'mark', 9, '{}') "
                "ON CONFLICT (buffer_id, seq) DO UPDATE SET record = excluded.record",
                "quiesce_log is append-only: seq 0 of buffer b is not the next one (6)",
            ),
            ("UPDATE quiesce_meta SET value = '0'", "quiesce_meta is append-only: UPDATE refused"),
            ("DELETE FROM quiesce_meta", "quiesce_meta is append-only: DELETE refused"),
            ("TRUNCATE quiesce_meta", "quiesce_meta is append-only: TRUNCATE refused"),
        ],
    )
    def test_raw_sql_cannot_rewrite_history(self, pg_dsn: str, sql: str, message: str) -> None:
        """Raw SQL by any client, bypassing quiesce, is refused by the
        database; the rows are unchanged."""
        _close(_filled(pg_dsn))
        before = _rows(pg_dsn)
        with _raw(pg_dsn) as conn, pytest.raises(psycopg.errors.RaiseException) as info:
            conn.execute(sql)
        assert info.value.diag.message_primary == message
        assert _rows(pg_dsn) == before

    def test_a_second_writer_fails_loudly(self, pg_dsn: str) -> None:
        """Two buffers on one log: the second one's writes are refused
        (LogWriteError) and the records never interleave."""
        first = _filled(pg_dsn)
        second = Buffer(log=PostgresLog(pg_dsn, "b"))
        first.append(Entry("one", Kind.REASONING, "from the first"))
        first.flush()
        second.append(Entry("two", Kind.REASONING, "from the second"))
        with pytest.raises(LogWriteError, match=r"diverged|not the next one"):
            second.flush()
        before = state(first)
        _close(first)
        _close(second)
        assert state(Buffer(log=PostgresLog(pg_dsn, "b"))) == before

    def test_a_different_record_at_the_same_seq_is_not_taken_as_stored(self, pg_dsn: str) -> None:
        """Two buffers opened on one empty log each append an entry "e" (same
        seq, op, version, ids and outcome; other bodies). The second one's
        flush finds seq 0 taken (the insert trigger refuses it, and the sink
        reads where the log ends at once) and must compare the whole stored
        record, not a few fields: it is refused as a divergence
        (LogDiverged), never skipped as "already stored" (which would
        acknowledge a write the log does not hold)."""
        first = Buffer(log=PostgresLog(pg_dsn, "b"))
        second = Buffer(log=PostgresLog(pg_dsn, "b"))
        first.append(Entry("e", Kind.REASONING, "from the first"))
        first.flush()
        second.append(Entry("e", Kind.REASONING, "from the second"))
        # a retry cannot tell a lost COMMIT reply from this: it compares
        for _ in range(3):
            with pytest.raises(LogWriteError, match="diverged"):
                second.flush()
        assert second.pending_records == 1
        assert next(r[4] for r in _rows(pg_dsn)).count("from the first") == 1
        _close(first)
        _close(second)

    def test_lost_commit_reply_check_compares_whole_records(self, pg_dsn: str) -> None:
        """The retry after an unknown outcome skips a stored record only if it
        is the same record byte for byte: a record differing in any field
        (here the time and the reason) is a divergence."""
        log = PostgresLog(pg_dsn, "b")
        rec = LogRecord(0, 1.0, "mark", 1, ("a",), None, "r", None, "applied", {})
        log.write([rec])
        log.write([rec])  # the very same record: already stored
        for other in (rec._replace(reason="other"), rec._replace(time=2.0)):
            with pytest.raises(ValueError, match="diverged"):
                log.write([other])
        assert log.commits == 1
        log.close()


class TestFence:
    def _lease(self, dsn: str, epoch: int) -> None:
        with _raw(dsn) as conn:
            conn.execute(
                "INSERT INTO quiesce_writer VALUES ('b', %s, 'test', now()) "
                "ON CONFLICT (buffer_id) DO UPDATE SET epoch = excluded.epoch",
                (epoch,),
            )

    def test_a_stale_epoch_is_refused_by_the_database(self, pg_dsn: str) -> None:
        """Once a writer lease exists, only rows stamped with its epoch are
        accepted: an old writer's batch raises WriterFenced and stores nothing."""
        buf = _filled(pg_dsn, 2)
        self._lease(pg_dsn, 3)
        log = buf.sink
        assert isinstance(log, PostgresLog)
        buf.append(Entry("late", Kind.REASONING, "from the old writer"))
        with pytest.raises(LogWriteError) as info:
            buf.flush()
        assert isinstance(info.value.__cause__, WriterFenced)
        assert "writer epoch 0 of buffer b is fenced (current epoch 3)" in str(info.value)
        assert len(_rows(pg_dsn)) == 3
        log.writer_epoch = 3
        buf.flush()
        assert [r[3] for r in _rows(pg_dsn)] == [0, 0, 0, 3]

    def test_a_takeover_waits_for_a_batch_in_flight(self, pg_dsn: str) -> None:
        """The insert trigger holds a share lock on the lease row until COMMIT:
        an epoch bump issued meanwhile waits, so no old-epoch row can commit
        after the new epoch is visible."""
        _close(_filled(pg_dsn, 1))
        self._lease(pg_dsn, 1)
        writer = _raw(pg_dsn)
        writer.execute("BEGIN")
        writer.execute("INSERT INTO quiesce_log VALUES ('b', 2, 1, 1, 'mark', 9, %s)", ("{}",))
        bumped = threading.Event()

        def bump() -> None:
            with _raw(pg_dsn) as conn:
                conn.execute("UPDATE quiesce_writer SET epoch = 2 WHERE buffer_id = 'b'")
            bumped.set()

        t = threading.Thread(target=bump)
        t.start()
        assert not bumped.wait(0.3)  # blocked behind the writer's share lock
        writer.execute("COMMIT")
        t.join()
        assert bumped.is_set()
        with pytest.raises(psycopg.DatabaseError, match="fenced") as info:
            writer.execute("INSERT INTO quiesce_log VALUES ('b', 3, 1, 1, 'mark', 9, '{}')")
        assert info.value.sqlstate == "QF001"
        writer.close()


def _in_thread(fn: Any) -> tuple[threading.Thread, dict[str, Any]]:
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["value"] = fn()
        except BaseException as exc:  # reported by the test
            out["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


class TestReadConnection:
    """Reads have a connection of their own: a read never waits on the
    writer's transaction, nor a write on a read in flight."""

    def test_a_read_proceeds_while_a_flush_is_held_open(self, pg_dsn: str) -> None:
        """A batch held open inside its transaction (after its COPY, before
        COMMIT) does not delay ``read_range``, ``read_from`` or
        ``checkpoints``, and they see none of its rows."""
        buf = _filled(pg_dsn, 3)
        log = buf.sink
        assert isinstance(log, PostgresLog)
        stored = len(_rows(pg_dsn))
        entered, release = threading.Event(), threading.Event()

        def hold(cur: Any, batch: Any) -> None:
            entered.set()
            release.wait(30)

        log.before_commit = hold
        buf.append(Entry("late", Kind.REASONING, "written while a read runs"))
        flusher, flushed = _in_thread(buf.flush)
        try:
            assert entered.wait(10)
            reader, read = _in_thread(
                lambda: (log.read_range(0, stored), log.read_from(0), log.checkpoints())
            )
            reader.join(5)
            assert not reader.is_alive(), "the read waited for the writer's open transaction"
            assert "error" not in read, read
            ranged, tail, (total, _seqs) = read["value"]
            assert [r.seq for r in ranged] == list(range(stored))
            assert [r.seq for r in tail] == list(range(stored))  # nothing uncommitted
            assert total == stored
        finally:
            release.set()
            flusher.join(10)
        assert "error" not in flushed, flushed
        assert len(_rows(pg_dsn)) > stored
        _close(buf)

    def test_a_flush_proceeds_while_a_read_is_in_flight(self, pg_cluster: Any, pg_dsn: str) -> None:
        """The reader's connection is cut off mid-read (its query held in a
        TCP proxy): a flush meanwhile commits on the writer's connection;
        the read completes once its bytes flow again."""
        from _proxy import Proxy

        proxy = Proxy(("127.0.0.1", pg_cluster.port))
        options = pg_dsn.split("options=", 1)[1]
        via_proxy = f"{pg_cluster.tcp_dsn(port=proxy.port)}?options={options}"
        try:
            buf = _filled(via_proxy, 3)
            log = buf.sink
            assert isinstance(log, PostgresLog)
            stored = len(_rows(pg_dsn))
            assert len(log.read_range(0, stored)) == stored
            assert len(proxy.gates) == 2, "reads share the writer's connection"
            proxy.hold(1)
            reader, read = _in_thread(lambda: log.read_range(0, stored))
            deadline = time.monotonic() + 10
            while not proxy.holding(1) and time.monotonic() < deadline:
                time.sleep(0.01)
            assert proxy.holding(1) and reader.is_alive()
            buf.append(Entry("late", Kind.REASONING, "written while a read is stuck"))
            flusher, flushed = _in_thread(buf.flush)
            flusher.join(5)
            assert not flusher.is_alive(), "the flush waited for a read in flight"
            assert "error" not in flushed, flushed
            assert [r[0] for r in _rows(pg_dsn)] == list(range(stored + 1))
            proxy.release(1)
            reader.join(10)
            assert [r.seq for r in read["value"]] == list(range(stored))
            _close(buf)
        finally:
            proxy.close()


class TestGroupCommit:
    def test_flushing_1000_records_is_one_transaction_and_one_notify(self, pg_dsn: str) -> None:
        """One flush of 1,000 pending records is one transaction (the server's
        own commit counter moves by one) and wakes listeners once, with the
        last seq as payload."""
        log = PostgresLog(pg_dsn, "b")
        buf = Buffer(log=log)
        for i in range(1000):
            buf.append(Entry(f"e{i}", Kind.REASONING, f"step {i}"))
        listener = _raw(pg_dsn)
        listener.execute(f'LISTEN "{log.channel}"')
        assert log._conn is not None
        before = log._conn.execute(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()
        assert buf.pending_records == 1000
        buf.flush()
        assert log.commits == 1
        assert buf.pending_records == 0
        notes = list(listener.notifies(timeout=1.0, stop_after=2))
        assert [n.payload for n in notes] == ["999"]
        listener.close()
        assert len(_rows(pg_dsn)) == 1000
        assert before is not None

    def test_append_and_mark_never_write(self, pg_dsn: str) -> None:
        log = PostgresLog(pg_dsn, "b")
        buf = Buffer(log=log)
        buf.append(Entry("a", Kind.REASONING, "x"))
        buf.mark_stale("a", "old")
        assert log.commits == 0
        assert buf.pending_records == 2
        assert _rows(pg_dsn) == []

    def test_removal_commits_its_intent_first(self, pg_dsn: str) -> None:
        buf = Buffer(log=PostgresLog(pg_dsn, "b"))
        buf.append(Entry("a", Kind.REASONING, "x"))
        report = buf.prune(["a"], reason="gone")
        assert report["a"].status.name == "PRUNED"
        assert buf.pending_records == 0
        assert [r[1] for r in _rows(pg_dsn)] == ["append", "prune", "tombstone", "remove"]

    def test_batch_must_continue_the_log(self, pg_dsn: str) -> None:
        log = PostgresLog(pg_dsn, "b")
        rec = LogRecord(0, 0.0, "mark", 1, ("a",), None, "r", None, "applied", {})
        with pytest.raises(ValueError, match="not contiguous"):
            log.write([rec, rec._replace(seq=2)])
        with pytest.raises(ValueError, match="starts at seq 3"):
            log.write([rec._replace(seq=3)])
        log.write([rec])
        log.write([rec])  # the same record again: already stored, skipped
        with pytest.raises(ValueError, match="diverged"):
            log.write([rec._replace(op="append")])
        assert log.commits == 1
        log.close()
        with pytest.raises(LogWriteError, match="the log is closed"):
            log.write([rec._replace(seq=1)])

    def test_flushes_from_threads(self, pg_dsn: str) -> None:
        """Flushes from worker threads while another thread appends: the log
        recovers to exactly the final state."""
        buf = Buffer(log=PostgresLog(pg_dsn, "b"))
        stop = threading.Event()

        def flusher() -> None:
            while not stop.is_set():
                buf.flush()

        threads = [threading.Thread(target=flusher) for _ in range(2)]
        for t in threads:
            t.start()
        for i in range(300):
            buf.append(Entry(f"e{i}", Kind.REASONING, f"step {i}"))
            if i % 7 == 0:
                buf.mark_stale(f"e{i}", "old")
        stop.set()
        for t in threads:
            t.join()
        buf.flush()
        before = state(buf)
        _close(buf)
        assert state(Buffer(log=PostgresLog(pg_dsn, "b"))) == before


class TestRecovery:
    @pytest.mark.parametrize("seed", [1, 2, 3])
    def test_random_workload_recovers_exactly(self, pg_dsn: str, seed: int) -> None:
        """A seeded random workload (appends, marks, prunes, edits, pins,
        flushes, due removals): a buffer recovered from the log equals the
        original, and passes _check()."""
        rng = random.Random(seed)
        buf = Buffer(log=PostgresLog(pg_dsn, "b"))
        work = Workload(buf)
        for _ in range(200):
            work.run(random_op(rng))
        work.release_all()
        buf.apply_due()
        buf.flush()
        before = state(buf)
        _close(buf)
        again = Buffer(log=PostgresLog(pg_dsn, "b"))
        again._check(expect_no_pins=True)
        assert state(again) == before


class TestBadInput:
    def test_unreachable_server_is_a_log_write_error_without_driver_traceback(
        self, pg_cluster: Any
    ) -> None:
        """A DSN that cannot connect: LogWriteError carrying the server's (or
        libpq's) message, nothing chained."""
        dsn = f"postgresql://quiesce@/postgres?host={pg_cluster.sockdir}&port=1"
        with pytest.raises(LogWriteError) as info:
            PostgresLog(dsn, "b", timeout=2)
        assert str(info.value).startswith("cannot connect to PostgreSQL: connection ")
        assert "No such file or directory" in str(info.value)
        assert info.value.__cause__ is None
        assert info.value.__context__ is None

    def test_unknown_database_carries_the_servers_message(self, pg_cluster: Any) -> None:
        dsn = f"postgresql://quiesce@/nosuchdb?host={pg_cluster.sockdir}&port={pg_cluster.port}"
        with pytest.raises(LogWriteError, match='database "nosuchdb" does not exist') as info:
            PostgresLog(dsn, "b")
        assert info.value.__cause__ is None

    def test_malformed_dsn(self) -> None:
        with pytest.raises(InvalidArgument, match=r"^invalid PostgreSQL DSN: "):
            PostgresLog("host=x port=notaport = =", "b")

    @pytest.mark.parametrize(
        ("buffer_id", "exc", "message"),
        [
            (7, InvalidType, "buffer_id must be a str, not int"),
            ("", InvalidArgument, "buffer_id must be 1 to 200 characters, without NUL"),
            ("a\x00b", InvalidArgument, "buffer_id must be 1 to 200 characters, without NUL"),
            ("x" * 201, InvalidArgument, "buffer_id must be 1 to 200 characters, without NUL"),
        ],
    )
    def test_bad_buffer_id(
        self, pg_dsn: str, buffer_id: Any, exc: type[Exception], message: str
    ) -> None:
        with pytest.raises(exc, match=f"^{message}$"):
            PostgresLog(pg_dsn, buffer_id)

    def test_newer_schema_is_refused(self, pg_dsn: str) -> None:
        """Tables written by a newer quiesce: LogFormatError, nothing written."""
        _close(_filled(pg_dsn))
        before = _rows(pg_dsn)
        with _raw(pg_dsn) as conn:
            conn.execute("ALTER TABLE quiesce_meta DISABLE TRIGGER quiesce_meta_no_change")
            conn.execute("UPDATE quiesce_meta SET value = '2' WHERE key = 'schema'")
        with pytest.raises(
            LogFormatError,
            match=r"holds quiesce tables of schema 2, written by a newer quiesce; "
            r"this quiesce knows schema 1 \(upgrade quiesce to use it\)$",
        ):
            PostgresLog(pg_dsn, "b")
        assert _rows(pg_dsn) == before

    def test_newer_record_format_is_refused(self, pg_dsn: str) -> None:
        _close(_filled(pg_dsn, 1))
        with _raw(pg_dsn) as conn:
            conn.execute(
                "INSERT INTO quiesce_log VALUES ('b', 2, 0, %s, 'mark', 9, '{}')", (FORMAT + 1,)
            )
        with pytest.raises(LogFormatError, match=f"holds records of format {FORMAT + 1}"):
            PostgresLog(pg_dsn, "b")

    def test_corrupt_record_is_refused_on_load(self, pg_dsn: str) -> None:
        _close(_filled(pg_dsn, 1))
        with _raw(pg_dsn) as conn:
            conn.execute("INSERT INTO quiesce_log VALUES ('b', 2, 0, 1, 'mark', 9, 'nope')")
        with pytest.raises(LogFormatError, match=r"record 2 is not valid JSON$"):
            Buffer(log=PostgresLog(pg_dsn, "b"))


class TestFaults:
    def test_terminated_backend_then_reconnect(self, pg_dsn: str) -> None:
        """pg_terminate_backend of the sink's connection: the next flush fails
        with LogWriteError (records stay pending), the one after reconnects and
        stores them; nothing lost."""
        buf = _filled(pg_dsn, 2)
        log = buf.sink
        assert isinstance(log, PostgresLog) and log._conn is not None
        pid = log._conn.info.backend_pid
        with _raw(pg_dsn) as conn:
            conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
        buf.append(Entry("after", Kind.REASONING, "x"))
        with pytest.raises(LogWriteError, match="edit log write failed"):
            buf.flush()
        assert buf.pending_records == 1
        buf.flush()
        assert buf.pending_records == 0
        before = state(buf)
        _close(buf)
        assert state(Buffer(log=PostgresLog(pg_dsn, "b"))) == before

    def test_server_crash_and_restart(self, pg_cluster: Any, pg_dsn: str) -> None:
        """pg_ctl stop -m immediate (a crash, no checkpoint) and restart:
        every flush that returned is recovered; pending records are written
        after the restart."""
        buf = _filled(pg_dsn, 3)
        pg_cluster.stop("immediate")
        try:
            buf.append(Entry("during", Kind.REASONING, "x"))
            with pytest.raises(LogWriteError):
                buf.flush()
        finally:
            pg_cluster.start()
        buf.flush()
        before = state(buf)
        _close(buf)
        assert state(Buffer(log=PostgresLog(pg_dsn, "b"))) == before


@pytest.mark.anyio
async def test_open_buffer_with_postgres_log(pg_dsn: str, anyio_backend: str) -> None:
    """The runtime's group commit flushes to PostgreSQL from worker threads on
    asyncio and trio; removals go through the durable intent path."""
    async with open_buffer(PostgresLog(pg_dsn, "b"), flush_interval=0.01) as buf:
        for i in range(20):
            buf.append(Entry(f"e{i}", Kind.REASONING, f"step {i}"))
        buf.mark_stale("e3", "old")
        report = buf.prune(["e4"], reason="gone")
        assert report["e4"].status.name == "PRUNED"
        await buf.aflush()
        before = state(buf)
    assert state(Buffer(log=PostgresLog(pg_dsn, "b"))) == before


class TestInspect:
    def test_inspect_a_postgres_log(self, pg_dsn: str) -> None:
        buf = _filled(pg_dsn, 3)
        buf.prune(["e2"], reason="low relevance", actor="pruner")
        _close(buf)
        out = io.StringIO()
        with redirect_stdout(out):
            code = inspect_main([pg_dsn + "&buffer_id=b", "--op", "remove"])
        assert code == 0
        text = out.getvalue()
        assert "quiesce postgresql edit log, format 1" in text
        assert "low relevance" in text

    def test_inspect_needs_a_buffer_when_several(self, pg_dsn: str, capsys: Any) -> None:
        _close(_filled(pg_dsn, 1, "a"))
        _close(_filled(pg_dsn, 1, "b"))
        assert inspect_main([pg_dsn]) == 1
        err = capsys.readouterr().err
        assert "holds 2 buffers; name one with ?buffer_id=… (a, b)" in err
        with redirect_stdout(io.StringIO()) as out:
            assert inspect_main([pg_dsn + "&buffer_id=a", "--json"]) == 0
        assert '"records": 2' in out.getvalue()

    def test_inspect_unreachable(self, pg_cluster: Any, capsys: Any) -> None:
        dsn = f"postgresql://quiesce@/postgres?host={pg_cluster.sockdir}&port=1"
        assert inspect_main([dsn]) == 1
        assert "quiesce inspect: error: cannot connect to PostgreSQL" in capsys.readouterr().err


def test_import_quiesce_does_not_import_psycopg() -> None:
    """``import quiesce`` in a fresh interpreter does not import psycopg;
    ``quiesce.PostgresLog`` imports it on first use."""
    import subprocess

    code = (
        "import sys, quiesce; assert 'psycopg' not in sys.modules; "
        "quiesce.PostgresLog; assert 'psycopg' in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_sigkill_mid_copy_leaves_all_or_nothing(pg_dsn: str, seed: int) -> None:
    """SIGKILL of a writer (``_pg_ckpt_child.big_flush`` in a child process)
    at a seeded random moment during one large batch (20,000 records in one
    COPY): the log holds the whole batch or none of it, and a later writer
    continues it."""
    import contextlib
    import os
    import signal
    import time

    from _pg_ckpt_child import big_flush
    from _shared_child import process

    rng = random.Random(seed)
    r, w = os.pipe()
    try:
        proc = process(big_flush, pg_dsn, "b", 20000, stdout=w)
    finally:
        os.close(w)
    with os.fdopen(r) as out:
        try:
            assert out.readline().strip() == "flushing"
            time.sleep(rng.uniform(0.0, 0.4))
        finally:
            with contextlib.suppress(ProcessLookupError):  # done (and reaped) already
                os.kill(proc.pid, signal.SIGKILL)  # type: ignore[arg-type]
            proc.join(30)
    n = len(_rows(pg_dsn))
    assert n in (0, 20000)
    buf = Buffer(log=PostgresLog(pg_dsn, "b"))
    assert len(buf.log) == n
    buf.append(Entry("after", Kind.REASONING, "x"))
    buf.flush()
    assert len(_rows(pg_dsn)) == n + 1
