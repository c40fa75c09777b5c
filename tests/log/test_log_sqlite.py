"""SQLiteLog: schema, append-only triggers, group commit, refusal of foreign
and newer files, and faults of a real SQLite database."""

from __future__ import annotations

import json
import os
import random
import sqlite3
import subprocess
import threading
from pathlib import Path

import pytest

from _workload import Workload, random_op, state
from quiesce import (
    Buffer,
    Entry,
    Kind,
    LogFormatError,
    LogLocked,
    LogSink,
    LogWriteError,
    QuiesceError,
    SQLiteLog,
)
from quiesce._core.records import FORMAT, LogRecord
from quiesce._log._format import APPLICATION_ID
from quiesce._log.sqlite import SQLITE_FORMAT, record_crc


def _filled(path: Path, n: int = 5) -> Buffer:
    buf = Buffer(log=SQLiteLog(path))
    for i in range(n):
        buf.append(Entry(f"e{i}", Kind.REASONING, f"step {i}"))
    buf.mark_stale("e0", "old")
    buf.flush()
    return buf


def _raw(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path, isolation_level=None)


def _rows(path: Path) -> list[tuple[object, ...]]:
    with _raw(path) as conn:
        return conn.execute("SELECT seq, record, op FROM quiesce_log ORDER BY seq").fetchall()


class TestSchema:
    def test_new_file_is_an_identified_wal_database(self, tmp_path: Path) -> None:
        """A new log carries quiesce's application_id, the format as
        user_version, and WAL journal mode; nothing but the file is left."""
        path = tmp_path / "log.db"
        SQLiteLog(path).close()
        conn = _raw(path)
        assert conn.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SQLITE_FORMAT
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        meta = dict(conn.execute("SELECT key, value FROM quiesce_meta"))
        assert meta["format"] == str(FORMAT)
        conn.close()
        assert sorted(os.listdir(tmp_path)) == ["log.db"]

    def test_columns_repeat_the_record_for_people(self, tmp_path: Path) -> None:
        """The display columns match the authoritative JSON record."""
        path = tmp_path / "log.db"
        _filled(path, 2).sink.close()  # type: ignore[union-attr]
        with _raw(path) as conn:
            conn.row_factory = sqlite3.Row
            for row in conn.execute("SELECT * FROM quiesce_log"):
                rec = json.loads(row["record"])
                assert (row["seq"], row["op"], row["version"], row["outcome"]) == (
                    rec["seq"],
                    rec["op"],
                    rec["version"],
                    rec["outcome"],
                )
                assert json.loads(row["ids"]) == rec["ids"]

    def test_any_string_round_trips(self, tmp_path: Path) -> None:
        """Non-ASCII text is recovered exactly: the stored record is ASCII
        JSON (lone surrogates are refused before they reach a log, issue 12). (The generated
        display column holds what SQLite's json_extract makes of it.)"""
        path = tmp_path / "log.db"
        buf = Buffer(log=SQLiteLog(path))
        buf.append(Entry("u", Kind.REASONING, "naïve — 日本語 \x00", meta={"k": "\U0001f600"}))
        buf.mark_stale("u", "emoji \U0001f600 reason")
        buf.flush()
        before = state(buf)
        buf.sink.close()  # type: ignore[union-attr]
        assert state(Buffer(log=SQLiteLog(path))) == before
        with _raw(path) as conn:
            conn.text_factory = bytes
            reasons = [r[0] for r in conn.execute("SELECT reason FROM quiesce_log")]
        assert reasons == [None, "emoji \U0001f600 reason".encode()]

    def test_is_a_log_sink(self, tmp_path: Path) -> None:
        with SQLiteLog(tmp_path / "log.db") as log:
            assert isinstance(log, LogSink)
            assert repr(log).endswith(": 0 records>")
        assert log.closed
        assert repr(log).endswith(": closed>")

    def test_generated_columns_for_sql(self, tmp_path: Path) -> None:
        """The display columns are generated from the record: a person can
        query the log with plain SQL."""
        path = tmp_path / "log.db"
        buf = _filled(path, 3)
        buf.prune(["e2"], reason="low relevance", actor="pruner", turn=7)
        buf.sink.close()  # type: ignore[union-attr]
        with _raw(path) as conn:
            rows = conn.execute(
                "SELECT seq, format, op, version, ids, actor, reason, turn, outcome "
                "FROM quiesce_log WHERE op IN ('mark', 'prune', 'remove') ORDER BY seq"
            ).fetchall()
        assert rows == [
            (3, FORMAT, "mark", 4, '["e0"]', None, "old", None, "applied"),
            (4, FORMAT, "prune", 5, '["e2"]', "pruner", "low relevance", 7, "staged"),
            (6, FORMAT, "remove", 6, '["e2"]', "pruner", "low relevance", None, "applied"),
        ]

    def test_empty_file_becomes_a_log(self, tmp_path: Path) -> None:
        """An existing empty file is initialized, not refused."""
        path = tmp_path / "empty.db"
        path.touch()
        with SQLiteLog(path) as log:
            assert log.load() == []


class TestAppendOnly:
    """The log table refuses UPDATE and DELETE at the database level."""

    @pytest.mark.parametrize(
        "sql",
        [
            "UPDATE quiesce_log SET record = json_set(record, '$.reason', 'forged') WHERE seq = 1",
            "UPDATE quiesce_log SET record = '{}'",
            "DELETE FROM quiesce_log WHERE seq = 0",
            "DELETE FROM quiesce_log",
            "INSERT OR REPLACE INTO quiesce_log (seq, record, crc) VALUES (0, '{}', 0)",
            "REPLACE INTO quiesce_log (seq, record, crc) VALUES (1, '{}', 0)",
            "INSERT INTO quiesce_log (seq, record, crc) VALUES (99, '{}', 0)",
            "INSERT INTO quiesce_log (record, crc) VALUES ('{}', 0)",
            "INSERT INTO quiesce_log (seq, record, crc) VALUES (0, '{}', 0) "
            "ON CONFLICT (seq) DO UPDATE SET record = excluded.record",
            "UPDATE quiesce_meta SET value = '0' WHERE key = 'format'",
            "DELETE FROM quiesce_meta",
        ],
    )
    def test_raw_sql_cannot_rewrite_history(self, tmp_path: Path, sql: str) -> None:
        """Raw sqlite3, bypassing quiesce entirely, is refused; rows are unchanged."""
        path = tmp_path / "log.db"
        _filled(path).sink.close()  # type: ignore[union-attr]
        before = _rows(path)
        conn = _raw(path)
        with pytest.raises(sqlite3.IntegrityError, match=r"quiesce_(log|meta) is"):
            conn.execute(sql)
        conn.close()
        assert _rows(path) == before

    def test_invalid_json_is_refused(self, tmp_path: Path) -> None:
        """Even at the next seq, a row whose record is not JSON is refused."""
        path = tmp_path / "log.db"
        _filled(path).sink.close()  # type: ignore[union-attr]
        conn = _raw(path)
        n = len(_rows(path))
        with pytest.raises(sqlite3.DatabaseError, match=r"malformed JSON|CHECK constraint failed"):
            conn.execute("INSERT INTO quiesce_log (seq, record, crc) VALUES (?, 'nope', 0)", (n,))
        conn.close()

    def test_a_second_writer_is_refused_on_open(self, tmp_path: Path) -> None:
        """Two sinks on one file in one process: the second one is refused at
        once with LogLocked (a QuiesceError and a BlockingIOError); the first
        keeps writing, and the file opens again once it is closed."""
        path = tmp_path / "log.db"
        first = _filled(path)
        with pytest.raises(LogLocked, match=r"is open by another SQLiteLog") as info:
            SQLiteLog(path)
        assert isinstance(info.value, QuiesceError) and isinstance(info.value, BlockingIOError)
        first.append(Entry("one", Kind.REASONING, "from the first"))
        first.flush()
        before = state(first)
        first.sink.close()  # type: ignore[union-attr]
        assert state(Buffer(log=SQLiteLog(path))) == before

    def test_the_buffers_own_connection_cannot_delete(self, tmp_path: Path) -> None:
        """Not even the sink's connection (the buffer's) can delete a record."""
        buf = _filled(tmp_path / "log.db")
        sink = buf.sink
        assert isinstance(sink, SQLiteLog)
        with pytest.raises(sqlite3.IntegrityError, match="DELETE refused"):
            sink._conn.execute("DELETE FROM quiesce_log")  # type: ignore[union-attr]
        assert len(sink.load()) == len(buf.log)


class TestGroupCommit:
    def test_flushing_1000_records_is_one_commit(self, tmp_path: Path) -> None:
        """One flush of 1,000 pending records is one transaction: counted by
        the sink and by SQLite's own statement trace."""
        log = SQLiteLog(tmp_path / "log.db")
        buf = Buffer(log=log)
        for i in range(1000):
            buf.append(Entry(f"e{i}", Kind.REASONING, f"step {i}"))
        statements: list[str] = []
        log._conn.set_trace_callback(statements.append)  # type: ignore[union-attr]
        assert buf.pending_records == 1000
        buf.flush()
        assert log.commits == 1
        assert statements.count("COMMIT") == 1
        assert buf.pending_records == 0

    def test_append_and_mark_never_write(self, tmp_path: Path) -> None:
        """The fast paths leave records pending; only flush commits."""
        log = SQLiteLog(tmp_path / "log.db")
        buf = Buffer(log=log)
        buf.append(Entry("a", Kind.REASONING, "x"))
        buf.mark_stale("a", "old")
        assert log.commits == 0
        assert buf.pending_records == 2
        assert _rows(tmp_path / "log.db") == []

    def test_removal_commits_with_its_pending_records(self, tmp_path: Path) -> None:
        """A prune that removes makes the pending records and its tombstone
        (the ``tombstone`` intent) durable before the removal is published,
        then the ``remove`` record; nothing is left pending."""
        log = SQLiteLog(tmp_path / "log.db")
        buf = Buffer(log=log)
        buf.append(Entry("a", Kind.REASONING, "x"))
        report = buf.prune(["a"], reason="gone")
        assert report["a"].status.name == "PRUNED"
        assert buf.pending_records == 0
        assert [r[2] for r in _rows(tmp_path / "log.db")] == [
            "append",
            "prune",
            "tombstone",
            "remove",
        ]

    def test_batch_must_continue_the_log(self, tmp_path: Path) -> None:
        """A batch with a gap, or not starting at the next seq, is refused."""
        log = SQLiteLog(tmp_path / "log.db")
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
        with pytest.raises(ValueError, match="closed"):
            log.write([rec._replace(seq=1)])

    def test_flushes_from_threads(self, tmp_path: Path) -> None:
        """Flushes from worker threads while another thread appends: the log
        recovers to exactly the final state."""
        path = tmp_path / "log.db"
        buf = Buffer(log=SQLiteLog(path))
        stop = threading.Event()

        def flusher() -> None:
            while not stop.is_set():
                buf.flush()

        threads = [threading.Thread(target=flusher) for _ in range(2)]
        for t in threads:
            t.start()
        work = Workload(buf)
        rng = random.Random(7)
        for _ in range(300):
            work.run(random_op(rng))
        stop.set()
        for t in threads:
            t.join()
        work.release_all()
        buf.flush()
        before = state(buf)
        buf.sink.close()  # type: ignore[union-attr]
        again = Buffer(log=SQLiteLog(path))
        assert state(again) == before
        again._check()


def _foreign_files(tmp_path: Path) -> dict[str, Path]:
    files = {}
    text = tmp_path / "notes.txt"
    text.write_text("hello, not a log\n")
    files["text"] = text
    other = tmp_path / "other.db"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE t (x)")
    conn.execute("INSERT INTO t VALUES (1)")
    conn.commit()
    conn.close()
    files["other sqlite"] = other
    newer = tmp_path / "newer.db"
    SQLiteLog(newer).close()
    conn = sqlite3.connect(newer)
    conn.execute(f"PRAGMA user_version = {SQLITE_FORMAT + 1}")
    conn.close()
    files["newer format"] = newer
    newer_rec = tmp_path / "newer-record.db"
    _filled(newer_rec).sink.close()  # type: ignore[union-attr]
    conn = sqlite3.connect(newer_rec, isolation_level=None)
    n = conn.execute("SELECT COUNT(*) FROM quiesce_log").fetchone()[0]
    rec = {"format": FORMAT + 1, "seq": n, "op": "teleport"}
    text = json.dumps(rec)
    conn.execute(
        "INSERT INTO quiesce_log (seq, record, crc) VALUES (?, ?, ?)",
        (n, text, record_crc(n, text)),
    )
    conn.close()
    files["newer record"] = newer_rec
    jsonl = tmp_path / "log.jsonl"
    from quiesce import JsonlLog

    JsonlLog(jsonl).close()
    files["jsonl"] = jsonl
    return files


class TestRefusedFiles:
    @pytest.mark.parametrize(
        ("which", "message"),
        [
            ("text", r"not a quiesce edit log"),
            ("other sqlite", r"is a SQLite database but not a quiesce edit log"),
            (
                "newer format",
                rf"is a format {SQLITE_FORMAT + 1} log; this quiesce reads formats up to",
            ),
            ("newer record", rf"is a format {FORMAT + 1} log; this quiesce reads formats up to"),
            ("jsonl", r"is a JSONL edit log; open it with JsonlLog"),
        ],
    )
    def test_foreign_or_newer_file_is_refused_unchanged(
        self, tmp_path: Path, which: str, message: str
    ) -> None:
        """LogFormatError on open, and the file's bytes are unchanged."""
        path = _foreign_files(tmp_path)[which]
        before = path.read_bytes()
        with pytest.raises(LogFormatError, match=message):
            SQLiteLog(path)
        assert path.read_bytes() == before


class TestFaults:
    def test_disk_full_raises_then_resumes(self, tmp_path: Path) -> None:
        """SQLITE_FULL (max_page_count reached, as on a full disk): flush raises
        LogWriteError, nothing is half-written, log_failing says so; once there
        is room, flush resumes and the log recovers to the head."""
        path = tmp_path / "log.db"
        buf = _filled(path)
        log = buf.sink
        assert isinstance(log, SQLiteLog)
        conn = log._conn
        assert conn is not None
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        conn.execute(f"PRAGMA max_page_count = {pages}")
        durable = len(log.load())
        for i in range(200):
            buf.append(Entry(f"big{i}", Kind.REASONING, "x" * 2000))
        with pytest.raises(LogWriteError, match="full"):
            buf.flush()
        assert buf.stats().log_failing
        assert len(log.load()) == durable
        # The sink reconnects after a failure: the new connection has no cap.
        buf.flush()
        assert not buf.stats().log_failing
        before = state(buf)
        log.close()
        assert state(Buffer(log=SQLiteLog(path))) == before

    def test_read_only_file(self, tmp_path: Path) -> None:
        """A file the process cannot write (immutable attribute: even root
        cannot) opens and recovers; flush raises LogWriteError; once
        writable again, flush resumes."""
        path = tmp_path / "log.db"
        buf = _filled(path)
        buf.sink.close()  # type: ignore[union-attr]
        if subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode:
            pytest.skip("chattr +i is not available here")
        try:
            log = SQLiteLog(path)
            again = Buffer(log=log)
            assert state(again) == state(buf)
            again.append(Entry("late", Kind.REASONING, "y"))
            with pytest.raises(LogWriteError, match="readonly"):
                again.flush()
            assert again.stats().log_failing
        finally:
            subprocess.run(["chattr", "-i", str(path)], check=True)
        again.flush()
        assert not again.stats().log_failing
        before = state(again)
        log.close()
        assert state(Buffer(log=SQLiteLog(path))) == before
