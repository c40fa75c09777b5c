"""Streamed reads of the durable logs (issue 13): a closed sink's read-back
closes its stream whatever happens, and ``quiesce inspect`` of a PostgreSQL
log reads it in bounded pages (its memory: ``test_log_open_cost``), with the
output of the other logs for the same records. Behaviour checks (open
descriptors, equal output, refused damage), never wall-clock times.
Synchronous: no event loop involved (PostgreSQL is the session's private
cluster, one schema a test)."""

from __future__ import annotations

import contextlib
import gc
import io
import os
import sqlite3
from pathlib import Path

import psycopg
import pytest

from quiesce import (
    Buffer,
    EditPlan,
    Entry,
    JsonlLog,
    Kind,
    LogFormatError,
    LogSink,
    PostgresLog,
    Prune,
    SQLiteLog,
)
from quiesce._core.records import LogRecord
from quiesce._log import inspect as inspect_mod
from quiesce._log import postgres as postgres_mod
from quiesce._log import sqlite as sqlite_mod
from quiesce._log._format import records_before
from quiesce._log.jsonl import stream_jsonl
from quiesce._log.sqlite import stream_sqlite


class _Null(io.TextIOBase):
    def write(self, s: str) -> int:
        return len(s)


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _churn(buf: Buffer, rounds: int) -> None:
    """Append, mark and prune five entries a round; a refused edit and a
    checkpoint every third round (every kind of row inspect shows)."""
    buf.append(Entry("rule", Kind.CONSTRAINT, "do not modify files under /etc"))
    for r in range(rounds):
        ids = [f"e{r}-{k}" for k in range(5)]
        for i in ids:
            buf.append(Entry(i, Kind.REASONING, f"step {i}"))
        for i in ids[:3]:
            buf.mark_stale(i, f"done with {i}", turn=r)
        buf.prune(ids[:3], reason="done", actor="pruner", turn=r)
        if r % 3 == 0:
            buf.edit(EditPlan([Prune("rule")], reason=f"tidy {r}", actor="editor"))
            buf.flush(checkpoint=True)
    buf.flush()


def _closed_log(sink: LogSink | Path, rounds: int, kind: str = "sqlite") -> list[LogRecord]:
    """The records of ``rounds`` of :func:`_churn` written to ``sink`` (a
    path: a new log of ``kind``), which is closed after."""
    if isinstance(sink, Path):
        sink = SQLiteLog(sink) if kind == "sqlite" else JsonlLog(sink)
    buf = Buffer(log=sink, checkpoint_every=0)
    _churn(buf, rounds)
    sink.close()
    return list(buf.log)


class TestRecordsBefore:
    @pytest.mark.parametrize("kind", ["sqlite", "jsonl"])
    def test_reads_up_to_stop_and_closes(self, tmp_path: Path, kind: str) -> None:
        """A closed log's records ``start .. stop - 1`` are read back, equal
        to a full read, and the stream's connection or descriptor is closed
        when they are returned."""
        path = tmp_path / f"log.{kind}"
        _closed_log(path, 4, kind)
        every = list(stream_sqlite(path)[1] if kind == "sqlite" else stream_jsonl(path)[2])
        before = _open_fds()
        stream = stream_sqlite(path, 3)[1] if kind == "sqlite" else stream_jsonl(path, 3)[2]
        assert records_before(stream, 9) == every[3:9]
        assert _open_fds() == before

    @pytest.mark.parametrize("kind", ["sqlite", "jsonl"])
    def test_closes_the_stream_when_the_reader_raises(self, tmp_path: Path, kind: str) -> None:
        """An exception raised by the reader while the stream is suspended
        (here a ``stop`` that does not compare, standing for any exception
        in the reader's frame: an interrupt, a MemoryError) closes the
        stream's connection or descriptor at once, although the exception's
        traceback, still held, keeps the reader's frame and the stream
        alive. (Before: they stayed open until the traceback was dropped.)"""
        path = tmp_path / f"log.{kind}"
        _closed_log(path, 2, kind)
        before = _open_fds()
        with pytest.raises(TypeError) as raised:
            records_before(
                stream_sqlite(path)[1] if kind == "sqlite" else stream_jsonl(path)[2],
                None,  # type: ignore[arg-type]
            )
        assert raised.traceback  # the frames (and the stream) are still referenced
        assert _open_fds() == before


def test_sqlite_gap_at_a_page_boundary_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A SQLite log missing the last row of a page (a crafted or damaged
    file: the row deleted with the triggers set aside) is refused by the
    stream and by inspect, naming the row, instead of ending the log there
    (before: a short page read as the end, inspect showed 63 records)."""
    monkeypatch.setattr(sqlite_mod, "_STREAM_CHUNK", 64)
    path = tmp_path / "log.db"
    assert len(_closed_log(path, 20)) > 128
    conn = sqlite3.connect(path, isolation_level=None)
    triggers = conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger'").fetchall()
    for name, _sql in triggers:
        conn.execute(f"DROP TRIGGER {name}")
    conn.execute("DELETE FROM quiesce_log WHERE seq = 63")
    for _name, sql in triggers:
        conn.execute(sql)
    conn.close()
    with pytest.raises(LogFormatError, match=r"record 63 has seq 64 \(a gap or a repeat\)$"):
        list(stream_sqlite(path)[1])
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(_Null()):
        assert inspect_mod.main([str(path)]) == 1
    assert "record 63 has seq 64 (a gap or a repeat)" in err.getvalue()


# -- quiesce inspect postgresql:// -------------------------------------------


def _inspect(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = inspect_mod.main(list(argv))
    return code, out.getvalue()


@pytest.fixture
def small_pages(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pages and replay chunks of 64 records, so short logs span many."""
    monkeypatch.setattr(inspect_mod, "_CHUNK", 64)
    monkeypatch.setattr(postgres_mod, "_STREAM_CHUNK", 64)


@pytest.mark.usefixtures("small_pages")
class TestInspectPostgres:
    @pytest.mark.parametrize(
        "argv",
        [(), ("--json",), ("--id", "e2-1"), ("--op", "remove"), ("--op", "checkpoint")],
        ids=["tables", "json", "id", "op-remove", "op-checkpoint"],
    )
    def test_output_equals_a_jsonl_log_of_the_same_records(
        self, pg_dsn: str, tmp_path: Path, argv: tuple[str, ...]
    ) -> None:
        """``quiesce inspect`` of a PostgreSQL log spanning many pages prints
        what it prints for a JSONL log holding the same records (but for
        the log's name and kind): the same summary, rows, widths and
        tombstones."""
        records = _closed_log(PostgresLog(pg_dsn, "b"), 40)
        assert len(records) > 5 * 64
        copy = JsonlLog(tmp_path / "copy.jsonl")
        copy.write(records)
        copy.close()
        uri = pg_dsn + "&buffer_id=b"
        pg_code, pg_out = _inspect(uri, *argv)
        lite_code, lite_out = _inspect(str(tmp_path / "copy.jsonl"), *argv)
        assert (pg_code, lite_code) == (0, 0)
        assert pg_out.replace(uri, "LOG").replace("postgresql", "KIND") == lite_out.replace(
            str(tmp_path / "copy.jsonl"), "LOG"
        ).replace("jsonl", "KIND")
        assert f"{len(records)} records" in pg_out or f'"records": {len(records)}' in pg_out

    def test_a_gap_at_a_page_boundary_is_refused(self, pg_dsn: str) -> None:
        """A missing row is found wherever it falls, also where a page ends:
        inspect exits 1 naming it rather than showing a shorter log."""
        assert len(_closed_log(PostgresLog(pg_dsn, "b"), 20)) > 128
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute("ALTER TABLE quiesce_log DISABLE TRIGGER quiesce_log_no_change")
            conn.execute("DELETE FROM quiesce_log WHERE buffer_id = 'b' AND seq = 63")
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(_Null()):
            assert inspect_mod.main([pg_dsn + "&buffer_id=b"]) == 1
        assert "record 63 has seq 64 (a gap or a repeat)" in err.getvalue()

    def test_a_record_whose_format_column_disagrees_is_refused(self, pg_dsn: str) -> None:
        """The format inspect prints is the newest ``format`` column; a row
        whose column disagrees with its record is refused, naming it, so the
        printed format is the records' own."""
        _closed_log(PostgresLog(pg_dsn, "b"), 3)
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute("ALTER TABLE quiesce_log DISABLE TRIGGER quiesce_log_no_change")
            conn.execute("UPDATE quiesce_log SET format = 7 WHERE buffer_id = 'b' AND seq = 5")
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(_Null()):
            assert inspect_mod.main([pg_dsn + "&buffer_id=b"]) == 1
        assert "record 5 is format 1, its row says 7" in err.getvalue()

    def test_a_stream_closes_its_connection(self, pg_dsn: str) -> None:
        """A stream's connection (its socket) is closed when the stream
        ends, and when it is dropped unread (inspect opens one per pass)."""
        _closed_log(PostgresLog(pg_dsn, "b"), 3)
        uri = pg_dsn + "&buffer_id=b"
        gc.collect()  # what earlier tests left for the collector is not this stream's
        before = _open_fds()
        _fmt, records = postgres_mod.stream_postgres(uri)
        assert _open_fds() == before + 1
        assert sum(1 for _ in records) > 0
        assert _open_fds() == before
        for _ in range(5):
            postgres_mod.stream_postgres(uri)
        gc.collect()
        assert _open_fds() == before
