"""Opening and recovering a long durable log costs what the live window
costs, not what history costs (issue 13): the SQLite format check probes an
index, a JSONL open decodes no record, recovery decodes only the newest
checkpoint and its tail, and ``quiesce inspect`` streams. Structural checks
(counted SQLite VM steps, counted decodes, a memory ratio with a wide
margin), never wall-clock times. Synchronous: no event loop involved."""

from __future__ import annotations

import contextlib
import functools
import io
import json
import sqlite3
import tracemalloc
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import quiesce._log._jsonl_scan as jsonl_scan_mod
import quiesce._log.jsonl as jsonl_mod
from quiesce import (
    Buffer,
    EditPlan,
    Entry,
    JsonlLog,
    Kind,
    LogFormatError,
    LogSink,
    Prune,
    SQLiteLog,
)
from quiesce._core.records import FORMAT
from quiesce._log import _sqlite_schema as sqlite_schema
from quiesce._log import inspect as inspect_mod
from quiesce._log import sqlite as sqlite_mod
from quiesce._log._sqlite_schema import _check_schema
from quiesce._log.sqlite import record_crc


def _churn(buf: Buffer, rounds: int, start: int = 0) -> None:
    """Append, mark and prune five entries a round (a window of five)."""
    for r in range(start, start + rounds):
        ids = [f"e{r}-{k}" for k in range(5)]
        for i in ids:
            buf.append(Entry(i, Kind.REASONING, f"step {i}"))
        for i in ids:
            buf.mark_stale(i, "done")
        buf.prune(ids, reason="done")
    buf.flush()


def _written_log(sink: LogSink, fill: Callable[[Buffer], object], **options: Any) -> None:
    """A closed log: ``fill`` run on a fresh ``Buffer(log=sink, **options)``,
    flushed, then ``sink`` closed."""
    buf = Buffer(log=sink, **options)
    fill(buf)
    buf.flush()
    sink.close()


def _sqlite_log(path: Path, rounds: int) -> None:
    _written_log(SQLiteLog(path), lambda buf: _churn(buf, rounds))


def _vm_steps(path: Path) -> int:
    """SQLite VM steps the open's schema and format check takes."""
    conn = sqlite3.connect(path)
    steps = 0

    def count() -> int:
        nonlocal steps
        steps += 1
        return 0

    conn.set_progress_handler(count, 1)
    try:
        _check_schema(conn, str(path))
    finally:
        conn.close()
    return steps


class TestSQLiteFormatCheck:
    def test_format_check_does_not_scan_the_log(self, tmp_path: Path) -> None:
        """The open's newest-format check takes about the same number of VM
        steps on a log 10x longer (it probes the format index; the scan it
        replaced took ~10x)."""
        short, long = tmp_path / "short.db", tmp_path / "long.db"
        _sqlite_log(short, 10)
        _sqlite_log(long, 100)
        a, b = _vm_steps(short), _vm_steps(long)
        assert b < 1.5 * a + 50, (a, b)

    def test_newer_record_is_refused_through_the_index(self, tmp_path: Path) -> None:
        """A record of a newer format written after the index exists is found
        by it: the open refuses the file and leaves its bytes unchanged."""
        path = tmp_path / "log.db"
        _sqlite_log(path, 3)
        conn = sqlite3.connect(path, isolation_level=None)
        plan = conn.execute("EXPLAIN QUERY PLAN " + sqlite_schema._NEWEST_FORMAT).fetchall()
        assert "quiesce_log_formats" in str(plan)
        _newer_record_is_refused(path, conn)

    def test_file_without_the_index_is_scanned_then_indexed(self, tmp_path: Path) -> None:
        """A log written before the index (or with it dropped) is checked by
        a scan: a newer record is refused and the file left unchanged; an
        acceptable one gets the index on its first writable open."""
        path = tmp_path / "log.db"
        _sqlite_log(path, 3)
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("DROP INDEX quiesce_log_formats")
        conn.close()
        SQLiteLog(path).close()
        conn = sqlite3.connect(path, isolation_level=None)
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
        assert "quiesce_log_formats" in names
        conn.execute("DROP INDEX quiesce_log_formats")
        _newer_record_is_refused(path, conn)


def _newer_record_is_refused(path: Path, conn: sqlite3.Connection) -> None:
    """Append a record of a newer format through ``conn`` (then closed): the
    open refuses the file and leaves its bytes unchanged."""
    n = conn.execute("SELECT COUNT(*) FROM quiesce_log").fetchone()[0]
    text = json.dumps({"format": FORMAT + 1, "seq": n, "op": "teleport"})
    conn.execute(
        "INSERT INTO quiesce_log (seq, record, crc) VALUES (?, ?, ?)",
        (n, text, record_crc(n, text)),
    )
    conn.close()
    before = path.read_bytes()
    with pytest.raises(LogFormatError, match=rf"is a format {FORMAT + 1} log"):
        SQLiteLog(path)
    assert path.read_bytes() == before


class TestJsonlOpen:
    def _count_decodes(self, monkeypatch: pytest.MonkeyPatch) -> list[int]:
        calls = [0]
        real = jsonl_mod.decode_record

        def counting(obj: object, where: str):  # type: ignore[no-untyped-def]
            calls[0] += 1
            return real(obj, where)

        # the sink decodes what it reads back, the scanner what opening reads
        monkeypatch.setattr(jsonl_mod, "decode_record", counting)
        monkeypatch.setattr(jsonl_scan_mod, "decode_record", counting)
        return calls

    def test_open_decodes_no_record(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """Opening a committed log decodes none of its records; reading one
        back decodes it (and the records before it in its batch at most)."""
        path = tmp_path / "log.jsonl"
        buf = Buffer(log=JsonlLog(path), checkpoint_every=0)
        _churn(buf, 40)
        total = len(buf.log)
        buf.sink.close()  # type: ignore[union-attr]
        calls = self._count_decodes(monkeypatch)
        log = JsonlLog(path)
        try:
            assert calls[0] == 0
            assert log.checkpoints() == (total, [])
            rec = log.read_range(total - 1, total)[0]
            assert rec.seq == total - 1
            assert calls[0] <= 16
        finally:
            log.close()

    def test_recovery_decodes_the_checkpoint_and_tail_only(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Recovery from a log with checkpoints decodes the newest checkpoint
        and the records after it, not history; the state equals a full
        replay, and old records still read back through ``buf.log``."""
        path = tmp_path / "log.jsonl"
        buf = Buffer(log=JsonlLog(path), checkpoint_every=100)
        _churn(buf, 100)
        total = len(buf.log)
        head = list(buf.head().entries()), buf.version, len(buf.tombstones)
        buf.sink.close()  # type: ignore[union-attr]
        log = JsonlLog(path)
        _, seqs = log.checkpoints()
        log.close()
        assert seqs and total - seqs[-1] < 200
        calls = self._count_decodes(monkeypatch)
        again = Buffer(log=JsonlLog(path))
        try:
            assert calls[0] <= total - seqs[-1] + 16, (calls[0], total)
            assert (list(again.head().entries()), again.version, len(again.tombstones)) == head
            assert again.log[0].op == "append" and again.log[0].seq == 0
        finally:
            again.sink.close()  # type: ignore[union-attr]

    def test_committed_batch_with_an_invalid_record_is_refused_on_read(
        self, tmp_path: Path
    ) -> None:
        """A batch whose CRC and shape hold but whose record is invalid (a
        crafted file): reading it raises LogFormatError (never another
        record), and so does recovering a buffer from it."""
        path = tmp_path / "log.jsonl"
        JsonlLog(path).close()
        line = (
            f'{{"format":{FORMAT},"seq":0,"time":1.0,"op":"append","version":1,"ids":5,'
            '"actor":null,"reason":null,"turn":null,"outcome":"bogus","detail":{}}'
        ).encode()
        batch = line + b"\n"
        commit = json.dumps({"commit": 0, "n": 1, "crc": zlib.crc32(batch)}).replace(" ", "")
        with open(path, "ab") as f:
            f.write(batch + commit.encode() + b"\n")
        with pytest.raises(LogFormatError):  # on open, or when the record is read
            log = JsonlLog(path)
            try:
                log.read_range(0, 1)
            finally:
                log.close()
        with pytest.raises(LogFormatError):
            Buffer(log=JsonlLog(path))


class _Null(io.TextIOBase):
    def write(self, s: str) -> int:
        return len(s)


def _refusals(buf: Buffer, n: int) -> None:
    """``n`` refused edits on one constraint: records grow, state (one
    entry, no tombstone) does not."""
    buf.append(Entry("rule", Kind.CONSTRAINT, "do not modify files under /etc"))
    for k in range(n):
        buf.edit(EditPlan([Prune("rule")], reason=f"tidy {k} " + "x" * 200, actor="editor"))
        if k % 500 == 0:
            buf.flush()


def _inspect_peak(target: str) -> int:
    tracemalloc.start()
    try:
        with contextlib.redirect_stdout(_Null()):
            assert inspect_mod.main([target]) == 0
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("kind", ["sqlite", "jsonl", "postgresql"])
def test_inspect_memory_does_not_grow_with_the_log(
    tmp_path: Path, kind: str, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    """``quiesce inspect`` streams: its peak memory on a log 10x longer (same
    state) is about the same (measured: SQLite 1.0x, JSONL 1.3x, PostgreSQL
    0.9x; before streaming, ~8x for SQLite and JSONL, 10x for PostgreSQL)."""
    monkeypatch.setattr(inspect_mod, "_CHUNK", 64, raising=False)
    monkeypatch.setattr(sqlite_mod, "_STREAM_CHUNK", 64, raising=False)
    monkeypatch.setattr(jsonl_mod, "_READ_CHUNK", 1 << 14)  # the read buffer
    targets = []
    for name, n in (("short", 300), ("long", 3000)):
        sink: LogSink
        if kind == "postgresql":
            from quiesce import PostgresLog
            from quiesce._log import postgres as postgres_mod

            monkeypatch.setattr(postgres_mod, "_STREAM_CHUNK", 64)
            dsn = request.getfixturevalue("pg_dsn")
            sink, target = PostgresLog(dsn, name), f"{dsn}&buffer_id={name}"
        else:
            path = tmp_path / f"{name}.{kind}"
            sink, target = SQLiteLog(path) if kind == "sqlite" else JsonlLog(path), str(path)
        _written_log(sink, functools.partial(_refusals, n=n), checkpoint_every=0)
        targets.append(target)
    a, b = _inspect_peak(targets[0]), _inspect_peak(targets[1])
    assert b < 2 * a, (a, b)


@pytest.mark.parametrize("kind", ["sqlite", "jsonl"])
def test_records_before_the_checkpoint_read_back_from_the_sink(tmp_path: Path, kind: str) -> None:
    """A buffer recovered from a checkpoint holds only the tail in memory;
    every older record reads back from the sink, equal to what was written,
    also after the sink is closed."""
    path = tmp_path / f"log.{kind}"
    sink = SQLiteLog(path) if kind == "sqlite" else JsonlLog(path)
    buf = Buffer(log=sink, checkpoint_every=60)
    _churn(buf, 30)
    written = list(buf.log)
    sink.close()
    again = Buffer(log=SQLiteLog(path) if kind == "sqlite" else JsonlLog(path))
    assert again.log.in_memory < len(written) // 4  # from a checkpoint: no history loaded
    assert list(again.log) == written
    again.sink.close()  # type: ignore[union-attr]
    assert list(again.log[0:10]) == written[0:10]
    assert again.log[len(written) - 1] == written[-1]


def test_stream_jsonl_beside_a_live_writer(tmp_path: Path) -> None:
    """Streaming a JSONL log another JsonlLog holds open (it may truncate a
    torn tail at any time, so the reader does not map the file) reads the
    same records; streaming leaves no lock behind (a writer opens after)."""
    from quiesce._log.jsonl import stream_jsonl

    path = tmp_path / "log.jsonl"
    buf = Buffer(log=JsonlLog(path))
    _churn(buf, 5)
    written = list(buf.log)
    _fmt, _torn, live = stream_jsonl(path)
    assert list(live) == written
    buf.sink.close()  # type: ignore[union-attr]
    _fmt, _torn, idle = stream_jsonl(path)
    assert list(idle) == written
    JsonlLog(path).close()  # the shared lock was released


@pytest.mark.parametrize("kind", ["sqlite", "jsonl"])
def test_recovery_leaves_the_collector_as_it_found_it(tmp_path: Path, kind: str) -> None:
    """Recovery pauses the cyclic collector for its bulk build and restores
    it exactly: on when it was on (also after a refused log), off when the
    caller had turned it off."""
    import gc

    path = tmp_path / f"log.{kind}"
    buf = Buffer(log=SQLiteLog(path) if kind == "sqlite" else JsonlLog(path), checkpoint_every=40)
    _churn(buf, 10)
    buf.sink.close()  # type: ignore[union-attr]
    assert gc.isenabled()
    for enabled in (True, False):
        if not enabled:
            gc.disable()
        try:
            again = Buffer(log=SQLiteLog(path) if kind == "sqlite" else JsonlLog(path))
            again.sink.close()  # type: ignore[union-attr]
            assert gc.isenabled() is enabled
        finally:
            gc.enable()
    bad = tmp_path / f"bad.{kind}"
    buf = Buffer(log=SQLiteLog(bad) if kind == "sqlite" else JsonlLog(bad), checkpoint_every=0)
    buf.append(Entry("a", Kind.REASONING, "x"))
    buf.flush()
    buf.sink.close()  # type: ignore[union-attr]
    if kind == "sqlite":
        conn = sqlite3.connect(bad, isolation_level=None)
        text = json.dumps({"format": FORMAT, "seq": 1, "op": "mark"})
        conn.execute(
            "INSERT INTO quiesce_log (seq, record, crc) VALUES (?, ?, ?)",
            (1, text, record_crc(1, text)),
        )
        conn.close()
    else:
        line = json.dumps({"format": FORMAT, "seq": 1, "op": "mark"}).encode() + b"\n"
        commit = json.dumps({"commit": 1, "n": 1, "crc": zlib.crc32(line)}).encode() + b"\n"
        with open(bad, "ab") as f:
            f.write(line + commit)
    with pytest.raises(LogFormatError):
        Buffer(log=SQLiteLog(bad) if kind == "sqlite" else JsonlLog(bad))
    assert gc.isenabled()


def test_stream_jsonl_discarded_unstarted_closes_its_descriptor(tmp_path: Path) -> None:
    """A stream dropped before its first record still closes its file."""
    import gc
    import os

    from quiesce._log.jsonl import stream_jsonl

    path = tmp_path / "log.jsonl"
    buf = Buffer(log=JsonlLog(path))
    _churn(buf, 2)
    buf.sink.close()  # type: ignore[union-attr]
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(20):
        stream_jsonl(path)
    gc.collect()
    assert len(os.listdir("/proc/self/fd")) <= before
