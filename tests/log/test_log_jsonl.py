"""JsonlLog: line format with commit lines, torn tails, truncation of failed
batches, refusal of foreign and newer files, read-only files, locking."""

from __future__ import annotations

import errno
import json
import math
import os
import random
import sqlite3
import subprocess
import tempfile
import threading
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from _workload import Workload, random_op, state
from quiesce import (
    Buffer,
    Entry,
    JsonlLog,
    Kind,
    LogFormatError,
    LogSink,
    LogWriteError,
    SQLiteLog,
)
from quiesce._core.records import FORMAT, LogRecord
from quiesce._log._format import OPS


def _filled(path: Path, n: int = 5) -> Buffer:
    buf = Buffer(log=JsonlLog(path))
    for i in range(n):
        buf.append(Entry(f"e{i}", Kind.REASONING, f"step {i}"))
    buf.mark_stale("e0", "old")
    buf.flush()
    return buf


def _reopen(path: Path) -> Buffer:
    return Buffer(log=JsonlLog(path))


def _close(buf: Buffer) -> None:
    buf.sink.close()  # type: ignore[union-attr]


class TestFormat:
    def test_header_records_and_commit_lines(self, tmp_path: Path) -> None:
        """Line 1 is the header; each flush writes its records, one a line,
        then one commit line naming the last seq and the count."""
        path = tmp_path / "log.jsonl"
        buf = _filled(path, 3)
        buf.append(Entry("x", Kind.REASONING, "y\nwith a newline"))
        buf.flush()
        lines = [json.loads(line) for line in path.read_text("ascii").splitlines()]
        assert lines[0]["quiesce"] == "edit-log"
        assert lines[0]["format"] == FORMAT
        assert [sorted(x) for x in lines[1:5]] == [sorted(LogRecord._fields)] * 4
        raw = path.read_bytes().splitlines(keepends=True)
        assert lines[5] == {"commit": 3, "n": 4, "crc": zlib.crc32(b"".join(raw[1:5]))}
        assert lines[6]["seq"] == 4
        assert lines[7] == {"commit": 4, "n": 1, "crc": zlib.crc32(raw[6])}
        assert all(rec["format"] == FORMAT for rec in lines[1:5])

    def test_any_string_round_trips(self, tmp_path: Path) -> None:
        """Non-ASCII text and control characters are stored escaped (the file
        is ASCII) and recovered exactly. (Lone surrogates are refused before
        they reach a log: issue 12's one rule for text.)"""
        path = tmp_path / "log.jsonl"
        buf = Buffer(log=JsonlLog(path))
        body = "naïve — 日本語 \u2028 \x00 end"
        buf.append(Entry("u", Kind.REASONING, body, meta={"k": "\U0001f600 \u2029"}))
        buf.mark_stale("u", "emoji \U0001f600 reason")
        buf.flush()
        path.read_bytes().decode("ascii")
        _close(buf)
        again = _reopen(path)
        assert again.head().live["u"].entry.body == body
        assert state(again) == state(buf)

    def test_one_fsync_per_flush(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """Flushing 1,000 records is one write batch and one fsync."""
        log = JsonlLog(tmp_path / "log.jsonl")
        buf = Buffer(log=log)
        for i in range(1000):
            buf.append(Entry(f"e{i}", Kind.REASONING, f"step {i}"))
        fsyncs: list[int] = []
        real = os.fsync
        monkeypatch.setattr(os, "fsync", lambda fd: (fsyncs.append(fd), real(fd))[1])
        buf.flush()
        assert log.commits == 1
        assert len(fsyncs) == 1

    def test_batch_must_continue_the_log(self, tmp_path: Path) -> None:
        log = JsonlLog(tmp_path / "log.jsonl")
        rec = LogRecord(0, 0.0, "mark", 1, ("a",), None, "r", None, "applied", {})
        with pytest.raises(ValueError, match="not contiguous"):
            log.write([rec, rec._replace(seq=2)])
        with pytest.raises(ValueError, match="starts at seq 1"):
            log.write([rec._replace(seq=1)])
        log.write([rec])
        log.close()
        log.close()
        with pytest.raises(ValueError, match="closed"):
            log.write([rec._replace(seq=1)])

    def test_is_a_log_sink(self, tmp_path: Path) -> None:
        with JsonlLog(tmp_path / "log.jsonl") as log:
            assert isinstance(log, LogSink)
            assert repr(log).endswith(": 0 records>")
        assert log.closed
        assert repr(log).endswith(": closed>")

    def test_flushes_from_threads(self, tmp_path: Path) -> None:
        """Flushes from worker threads while the main thread works: the log
        recovers to exactly the final state."""
        path = tmp_path / "log.jsonl"
        buf = Buffer(log=JsonlLog(path))
        stop = threading.Event()

        def flusher() -> None:
            while not stop.is_set():
                buf.flush()

        threads = [threading.Thread(target=flusher) for _ in range(2)]
        for t in threads:
            t.start()
        work = Workload(buf)
        rng = random.Random(11)
        for _ in range(300):
            work.run(random_op(rng))
        stop.set()
        for t in threads:
            t.join()
        work.release_all()
        buf.flush()
        before = state(buf)
        _close(buf)
        again = _reopen(path)
        assert state(again) == before
        again._check()

    def test_one_writer_at_a_time(self, tmp_path: Path) -> None:
        """A second JsonlLog on an open file is refused; after close it opens."""
        path = tmp_path / "log.jsonl"
        log = JsonlLog(path)
        with pytest.raises(BlockingIOError, match="is open by another JsonlLog"):
            JsonlLog(path)
        log.close()
        JsonlLog(path).close()
        buf = Buffer(log=JsonlLog(path))
        del buf  # a forgotten log releases its lock when collected
        JsonlLog(path).close()


class TestTornTail:
    @pytest.mark.parametrize(
        "tail",
        [
            b'{"format":1,"seq":6,"time":1.0,"op":"ma',  # half a record line
            b"\x00\x00\x00\x00",  # zeroed blocks after a power cut
            b'{"commit":5,"n":1}',  # a commit line without its newline
            b"garbage line\n",
        ],
    )
    def test_torn_tail_is_ignored_and_later_records_survive(
        self, tmp_path: Path, tail: bytes
    ) -> None:
        """A torn last line is detected and ignored on recovery (never
        misread); a record appended after it is not lost."""
        path = tmp_path / "log.jsonl"
        buf = _filled(path)
        before = state(buf)
        _close(buf)
        with open(path, "ab") as f:
            f.write(tail)
        again = _reopen(path)
        assert state(again) == before
        assert again.sink.torn_bytes == len(tail)  # type: ignore[union-attr]
        again.append(Entry("after", Kind.REASONING, "written after the torn tail"))
        again.flush()
        after = state(again)
        _close(again)
        third = _reopen(path)
        assert state(third) == after
        assert third.sink.torn_bytes == 0  # type: ignore[union-attr]
        third._check()

    def test_uncommitted_batch_is_ignored(self, tmp_path: Path) -> None:
        """Complete record lines without their commit line are a torn batch:
        none of them is recovered (a batch is atomic)."""
        path = tmp_path / "log.jsonl"
        buf = _filled(path)
        before = state(buf)
        buf.append(Entry("lost", Kind.REASONING, "never committed"))
        rec = buf.log[-1]
        _close(buf)
        from quiesce._log._format import encode_record

        with open(path, "a") as f:
            f.write(encode_record(rec) + "\n")
        assert state(_reopen(path)) == before

    def _two_batches(self, path: Path) -> tuple[list[bytes], dict[str, object]]:
        buf = _filled(path)  # batch 1: lines 2-8, commit at line 8
        first = state(buf)
        buf.append(Entry("late", Kind.REASONING, "second batch"))
        buf.flush()  # batch 2: lines 9-10
        _close(buf)
        return path.read_bytes().splitlines(keepends=True), first

    @pytest.mark.parametrize(
        ("damage", "message"),
        [
            (b"garbage\n", r"line 3 is not valid JSON; committed data follows"),
            (b"\x00" * 40 + b"\n", r"line 3 is not valid JSON; committed data follows"),
            (None, r"line 8: the commit does not match the 6 record\(s\) before it; committed"),
        ],
    )
    def test_damage_before_committed_data_is_an_error(
        self, tmp_path: Path, damage: bytes | None, message: str
    ) -> None:
        """Damage followed by a later committed batch is corruption, not a torn
        tail: LogFormatError, file unchanged. A record altered into other valid
        JSON (bit rot) is caught by its batch's checksum."""
        path = tmp_path / "log.jsonl"
        lines, _ = self._two_batches(path)
        lines[2] = damage if damage is not None else lines[2].replace(b"step 1", b"step 7")
        path.write_bytes(b"".join(lines))
        before = path.read_bytes()
        with pytest.raises(LogFormatError, match=message):
            JsonlLog(path)
        assert path.read_bytes() == before

    def test_damaged_last_batch_is_a_torn_tail(self, tmp_path: Path) -> None:
        """After a power cut the last batch's commit line can reach the disk
        while a record line before it did not (no ordering inside one write
        before fsync): that batch is torn and ignored, not misread."""
        path = tmp_path / "log.jsonl"
        lines, first = self._two_batches(path)
        lines[8] = b"\x00" * (len(lines[8]) - 1) + b"\n"
        path.write_bytes(b"".join(lines))
        again = _reopen(path)
        assert state(again) == first
        assert again.sink.torn_bytes == len(lines[8]) + len(lines[9])  # type: ignore[union-attr]

    @settings(max_examples=60, deadline=None)
    @given(data=st.data())
    def test_any_cut_recovers_exactly_the_whole_batches(self, data: st.DataObject) -> None:
        """Cut the file at any byte (a crash at any moment) and optionally add
        garbage: recovery yields exactly the batches wholly before the cut."""
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "log.jsonl"
            buf = Buffer(log=JsonlLog(path))
            sizes = [(path.stat().st_size, 0)]
            for b in range(data.draw(st.integers(1, 5), label="batches")):
                for i in range(data.draw(st.integers(1, 4), label="records")):
                    buf.append(Entry(f"b{b}r{i}", Kind.REASONING, f"batch {b} record {i}"))
                buf.flush()
                sizes.append((path.stat().st_size, len(buf.log)))
            _close(buf)
            full = path.read_bytes()
            # (sizes vary with the timestamps' digits: draw an offset, not a bound)
            offset = data.draw(st.integers(0, 1 << 16), label="cut")
            cut = sizes[0][0] + offset % (len(full) - sizes[0][0] + 1)
            junk = data.draw(st.sampled_from([b"", b"\x00" * 7, b'{"seq":', b"\n\n"]))
            torn = full[:cut] + junk
            path.write_bytes(torn)
            # A batch is whole when its bytes are all there: junk may complete
            # a cut-off newline (a cut one byte short of a batch, plus "\n\n").
            expected = max(n for size, n in sizes if torn.startswith(full[:size]))
            with JsonlLog(path) as log:
                records = log.load()
            assert [r.to_dict() for r in records] == [r.to_dict() for r in buf.log[:expected]]


def _foreign(tmp_path: Path, which: str) -> Path:
    path = tmp_path / "x"
    if which == "text":
        path.write_text("hello, not a log\n")
    elif which == "json":
        path.write_text('{"some": "json"}\n')
    elif which == "sqlite":
        conn = sqlite3.connect(path)
        conn.execute("CREATE TABLE t (x)")
        conn.commit()
        conn.close()
    elif which == "sqlite log":
        SQLiteLog(path).close()
    elif which == "newer header":
        path.write_text(json.dumps({"quiesce": "edit-log", "format": FORMAT + 1}) + "\n")
    elif which == "newer record":
        _close(_filled(path))
        rec = {"format": FORMAT + 1, "seq": 6, "op": "teleport"}
        with open(path, "a") as f:
            f.write(json.dumps(rec) + "\n" + json.dumps({"commit": 6, "n": 1}) + "\n")
    return path


class TestRefusedFiles:
    @pytest.mark.parametrize(
        ("which", "message"),
        [
            ("text", r"is not a quiesce edit log"),
            ("json", r"is not a quiesce edit log"),
            ("sqlite", r"is a SQLite database; open it with SQLiteLog"),
            ("sqlite log", r"is a SQLite database; open it with SQLiteLog"),
            ("newer header", rf"is a format {FORMAT + 1} log; this quiesce reads formats up to"),
            ("newer record", rf"has record format {FORMAT + 1}; this quiesce reads formats up to"),
        ],
    )
    def test_foreign_or_newer_file_is_refused_unchanged(
        self, tmp_path: Path, which: str, message: str
    ) -> None:
        """LogFormatError on open, and the file's bytes are unchanged."""
        path = _foreign(tmp_path, which)
        before = path.read_bytes()
        with pytest.raises(LogFormatError, match=message):
            JsonlLog(path)
        assert path.read_bytes() == before

    def test_empty_file_becomes_a_log(self, tmp_path: Path) -> None:
        path = tmp_path / "empty.jsonl"
        path.touch()
        with JsonlLog(path) as log:
            assert log.load() == []
        assert json.loads(path.read_text())["quiesce"] == "edit-log"


def _failing(
    real: Callable[..., Any], *, after_bytes: int | None = None, err: int = errno.ENOSPC
) -> Callable[..., Any]:
    """A pwrite that writes ``after_bytes`` of the data, then fails."""

    def pwrite(fd: int, data: Any, offset: int) -> int:
        if after_bytes:
            real(fd, bytes(data[:after_bytes]), offset)
        raise OSError(err, os.strerror(err))

    return pwrite


class TestFaults:
    @pytest.mark.parametrize("err", [errno.ENOSPC, errno.EIO])
    def test_partial_batch_is_truncated(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, err: int
    ) -> None:
        """A write that fails halfway (disk full, I/O error) raises
        LogWriteError, the half-written batch is cut off, log_failing says so,
        and a later flush resumes with nothing behind garbage."""
        path = tmp_path / "log.jsonl"
        buf = _filled(path)
        size = path.stat().st_size
        for i in range(20):
            buf.append(Entry(f"n{i}", Kind.REASONING, f"new {i}"))
        monkeypatch.setattr(os, "pwrite", _failing(os.pwrite, after_bytes=300, err=err))
        with pytest.raises(LogWriteError, match=os.strerror(err)):
            buf.flush()
        monkeypatch.undo()
        assert path.stat().st_size == size
        assert buf.stats().log_failing
        assert buf.pending_records == 20
        buf.flush()
        assert not buf.stats().log_failing
        before = state(buf)
        _close(buf)
        assert state(_reopen(path)) == before

    def test_fsync_failure_truncates(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """If fsync fails the batch is not durable: it is truncated away."""
        path = tmp_path / "log.jsonl"
        buf = _filled(path)
        size = path.stat().st_size
        buf.append(Entry("n", Kind.REASONING, "new"))
        calls = []

        def fsync(fd: int) -> None:
            calls.append(fd)
            if len(calls) == 1:
                raise OSError(errno.EIO, "I/O error")

        monkeypatch.setattr(os, "fsync", fsync)
        with pytest.raises(LogWriteError, match="I/O error"):
            buf.flush()
        assert path.stat().st_size == size
        buf.flush()
        assert len(_reopen_records(path)) == len(buf.log)

    def test_truncation_failure_is_repaired_by_the_next_write(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """If even the truncation fails, the next write truncates first."""
        path = tmp_path / "log.jsonl"
        buf = _filled(path)
        buf.append(Entry("n", Kind.REASONING, "new"))
        monkeypatch.setattr(os, "pwrite", _failing(os.pwrite, after_bytes=50))

        def no_truncate(fd: int, size: int) -> None:
            raise OSError(errno.EIO, "cannot truncate")

        monkeypatch.setattr(os, "ftruncate", no_truncate)
        with pytest.raises(LogWriteError):
            buf.flush()
        monkeypatch.undo()
        buf.flush()
        before = state(buf)
        _close(buf)
        again = _reopen(path)
        assert state(again) == before
        assert again.sink.torn_bytes == 0  # type: ignore[union-attr]

    def test_read_only_file(self, tmp_path: Path) -> None:
        """A file the process cannot write opens read-only and recovers;
        flush raises LogWriteError; once writable again, flush resumes."""
        path = tmp_path / "log.jsonl"
        buf = _filled(path)
        _close(buf)
        if subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode:
            pytest.skip("chattr +i is not available here")
        try:
            again = _reopen(path)
            assert state(again) == state(buf)
            again.append(Entry("late", Kind.REASONING, "y"))
            with pytest.raises(LogWriteError, match="read-only"):
                again.flush()
            assert again.stats().log_failing
        finally:
            subprocess.run(["chattr", "-i", str(path)], check=True)
        again.flush()
        before = state(again)
        _close(again)
        assert state(_reopen(path)) == before


def _reopen_records(path: Path) -> list[LogRecord]:
    from quiesce._log.jsonl import read_jsonl

    return read_jsonl(path).records


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)
records = st.builds(
    LogRecord,
    seq=st.integers(0, 2**40),
    time=st.floats(allow_nan=False, allow_infinity=False),
    op=st.sampled_from(OPS),
    version=st.none() | st.integers(1, 2**40),
    ids=st.lists(st.text(), max_size=3).map(tuple),
    actor=st.none() | st.text(),
    reason=st.none() | st.text(),
    turn=st.none() | st.integers(0, 2**40),
    outcome=st.text(),
    detail=st.dictionaries(st.text(), json_values, max_size=3),
    format=st.just(FORMAT),
)


def _finite(value: object) -> object:
    """Non-finite floats as the strings the log stores them as."""
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


class TestRecordEncoding:
    @settings(max_examples=150, deadline=None)
    @given(rec=records)
    def test_fast_encoding_is_json_dumps(self, rec: LogRecord) -> None:
        """The hand-formatted record line is byte for byte the generic JSON
        encoding (ASCII, compact, strict: non-finite floats become strings),
        and it decodes back to the same record."""
        from quiesce._log._format import decode_record, encode_record

        line = encode_record(rec)
        expected = json.dumps(
            _finite(rec.to_dict()), separators=(",", ":"), ensure_ascii=True, allow_nan=False
        )
        assert line == expected
        assert encode_record(decode_record(json.loads(line), "x")) == line


class TestReadsDoNotWaitOnWrites:
    def test_read_range_answers_while_a_write_holds_the_file(self, tmp_path: Path) -> None:
        """Regression (issue 21, no disk wait under the write lock): a read
        back (a spilled tombstone, a checkpoint's records) took the lock a
        write holds through its ``pwrite`` and ``fsync``, so it waited for
        a stuck disk. Now it takes only the batch index's lock: with a
        writer holding the file, committed records are still read."""
        log = JsonlLog(tmp_path / "log.jsonl")
        buf = Buffer(log=log, checkpoint_every=0)
        for i in range(10):
            buf.append(Entry(f"e{i}", Kind.REASONING, f"step {i}"))
        buf.flush()
        got: list[list[int]] = []
        log._lock.acquire()  # what write() holds while its fsync is stuck
        try:
            reader = threading.Thread(
                target=lambda: got.append([r.seq for r in log.read_range(2, 6)]),
                daemon=True,
            )
            reader.start()
            reader.join(30)
            answered = not reader.is_alive()
        finally:
            log._lock.release()
        reader.join(30)
        assert answered, "read_range waited for the writer"
        assert got == [[2, 3, 4, 5]]
        assert log.checkpoints() == (10, [])
        log.close()
