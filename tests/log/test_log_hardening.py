"""Hardening of the durable sinks (issue 11): one writer per log file, whole
record comparison on a retry, per-record encoding, checks at the call.

Every test here uses real files, and the two-writer tests real processes
(``subprocess``): the lock under test is an OS lock between processes.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from quiesce import (
    Buffer,
    Entry,
    InvalidArgument,
    InvalidType,
    JsonlLog,
    Kind,
    LogFormatError,
    LogLocked,
    LogRecord,
    LogWriteError,
    QuiesceError,
    SQLiteLog,
)
from quiesce._log._format import _too_deep, decode_json, encode_json, encode_record

SRC = str(Path(__file__).resolve().parents[2] / "src")
SINKS = {"sqlite": SQLiteLog, "jsonl": JsonlLog}


def _python(code: str) -> subprocess.Popen[str]:
    """A child Python running ``code`` against this checkout's quiesce."""
    env = dict(os.environ, PYTHONPATH=SRC)
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


# A child that opens the log, appends "note" with its own body, reports
# "ready", waits for a line on stdin, then flushes (retrying once, as an
# agent loop would) and reports what happened. Exit 0: it believes its
# record is durable; 3: it could not open the log.
_WRITER = """
import sys
from quiesce import Buffer, Entry, Kind, JsonlLog, LogLocked, LogWriteError, SQLiteLog
sink_cls = {{"sqlite": SQLiteLog, "jsonl": JsonlLog}}[{kind!r}]
try:
    buf = Buffer(log=sink_cls({path!r}))
except LogLocked as exc:
    print("locked", exc, flush=True)
    sys.exit(3)
buf.append(Entry("note", Kind.REASONING, {body!r}))
print("ready", flush=True)
sys.stdin.readline()
for attempt in range(2):
    try:
        buf.flush()
        break
    except LogWriteError as exc:
        print("write failed", exc, flush=True)
else:
    sys.exit(4)
print("durable", flush=True)
"""


def _bodies(kind: str, path: Path) -> list[str]:
    buf = Buffer(log=SINKS[kind](path))
    try:
        return [e.body for e in buf.head().entries()]
    finally:
        buf.sink.close()  # type: ignore[union-attr]


@pytest.mark.parametrize("kind", sorted(SINKS))
class TestOneWriterPerFile:
    def test_second_process_is_refused_and_nothing_is_lost(self, kind: str, tmp_path: Path) -> None:
        """Two processes append to one log: the second one to open it is
        refused with LogLocked (exit 3), and every process that reports its
        record durable finds it in the log. (Before: both opened SQLite, both
        exited 0, and the second body was gone.)"""
        path = tmp_path / f"log.{kind}"
        SINKS[kind](path).close()
        first = _python(_WRITER.format(kind=kind, path=str(path), body="from the first"))
        assert first.stdout is not None and first.stdout.readline().strip() == "ready"
        second = _python(_WRITER.format(kind=kind, path=str(path), body="from the second"))
        second_out, second_err = second.communicate("go\n", timeout=60)
        _first_out, first_err = first.communicate("go\n", timeout=60)
        assert first.returncode == 0, first_err
        assert second.returncode == 3, (second_out, second_err)
        assert "is open by another" in second_out
        durable = {"from the first"}
        assert set(_bodies(kind, path)) == durable

    def test_lock_is_released_when_the_holder_exits(self, kind: str, tmp_path: Path) -> None:
        """A process killed while holding the log (SIGKILL) leaves no lock
        behind: the OS drops it with the process."""
        path = tmp_path / f"log.{kind}"
        child = _python(_WRITER.format(kind=kind, path=str(path), body="killed"))
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        with pytest.raises(LogLocked):
            SINKS[kind](path)
        child.kill()
        child.communicate(timeout=60)
        SINKS[kind](path).close()

    def test_same_process_second_sink_is_refused(self, kind: str, tmp_path: Path) -> None:
        """In one process too; the error is a QuiesceError and a
        BlockingIOError (what JsonlLog raised before), and closing the first
        sink frees the file."""
        path = tmp_path / f"log.{kind}"
        first = SINKS[kind](path)
        with pytest.raises(
            LogLocked,
            match=r"^.* is open by another \w+Log \(in this or another "
            r"process\): one writer per log file$",
        ) as info:
            SINKS[kind](path)
        assert isinstance(info.value, QuiesceError)
        assert isinstance(info.value, BlockingIOError)
        first.close()
        SINKS[kind](path).close()


_FOREIGN_INSERT = """
import sqlite3, sys
from quiesce import LogRecord
from quiesce._log._format import encode_record
from quiesce._log.sqlite import record_crc
rec = LogRecord(0, 1.0, "append", 1, ("note",), None, None, None, "applied",
                {{"entry": {{"id": "note", "kind": "reasoning", "body": "foreign body"}},
                  "key": 0.0}})
text = encode_record(rec)
conn = sqlite3.connect({path!r}, isolation_level=None, timeout=30)
conn.execute("INSERT INTO quiesce_log (seq, record, crc) VALUES (0, ?, ?)",
             (text, record_crc(0, text)))
conn.close()
"""


class TestRetryComparesWholeRecords:
    def test_a_record_stored_by_someone_else_is_not_taken_for_ours(self, tmp_path: Path) -> None:
        """A foreign process (raw sqlite3, which no lock can stop) stores a
        record with our seq, op, version, ids and outcome but another body.
        Our flush fails; the retry compares the whole stored record with ours,
        finds they differ and keeps failing — it never reports our record
        durable. (Before: it compared five fields and skipped ours.)"""
        path = tmp_path / "log.db"
        buf = Buffer(log=SQLiteLog(path))
        buf.append(Entry("note", Kind.REASONING, "our body"))
        child = _python(_FOREIGN_INSERT.format(path=str(path)))
        _, err = child.communicate(timeout=60)
        assert child.returncode == 0, err
        with pytest.raises(LogWriteError, match=r"seq must be the next one"):
            buf.flush()
        with pytest.raises(
            LogWriteError,
            match=r"^edit log write failed: records 0\.\.0 are stored with different contents: "
            r"the log and the buffer diverged$",
        ):
            buf.flush()
        assert buf.pending_records == 1
        buf.sink.close()  # type: ignore[union-attr]

    def test_a_commit_that_reached_the_disk_is_not_written_twice(self, tmp_path: Path) -> None:
        """The retry's purpose still holds: a batch that is stored already,
        byte for byte, is skipped (the COMMIT reported failure but landed)."""
        path = tmp_path / "log.db"
        buf = Buffer(log=SQLiteLog(path))
        buf.append(Entry("note", Kind.REASONING, "our body"))
        sink = buf.sink
        assert isinstance(sink, SQLiteLog)
        record = buf.log[0]
        sink.write([record])
        sink._broken = True  # as after a COMMIT that raised
        sink._next_seq = 0
        buf.flush()  # the whole record matches: skipped, not refused
        assert sink.commits == 1
        sink.close()
        assert _bodies("sqlite", path) == ["our body"]


class TestChecksAtTheCall:
    @pytest.mark.parametrize("timeout", ["x", None, b"1", True, [1]])
    def test_sqlite_timeout_type(self, tmp_path: Path, timeout: object) -> None:
        with pytest.raises(InvalidType, match=r"^timeout must be a number of seconds, not \w+$"):
            SQLiteLog(tmp_path / "log.db", timeout=timeout)  # type: ignore[arg-type]
        assert not (tmp_path / "log.db").exists()

    @pytest.mark.parametrize("timeout", [-1, float("nan"), float("inf")])
    def test_sqlite_timeout_value(self, tmp_path: Path, timeout: float) -> None:
        with pytest.raises(InvalidArgument, match=r"^timeout must be finite and >= 0, not "):
            SQLiteLog(tmp_path / "log.db", timeout=timeout)
        assert not (tmp_path / "log.db").exists()

    @pytest.mark.parametrize("kind", sorted(SINKS))
    def test_a_directory_is_not_a_log(self, kind: str, tmp_path: Path) -> None:
        with pytest.raises(LogFormatError, match=r" is a directory, not a quiesce edit log$"):
            SINKS[kind](tmp_path)

    @pytest.mark.parametrize("kind", sorted(SINKS))
    def test_a_fifo_is_not_a_log(self, kind: str, tmp_path: Path) -> None:
        """Refused from its type, never opened (opening a FIFO would hang)."""
        fifo = tmp_path / "fifo"
        os.mkfifo(fifo)
        with pytest.raises(
            LogFormatError, match=r" is not a regular file, not a quiesce edit log$"
        ):
            SINKS[kind](fifo)

    @pytest.mark.parametrize("kind", sorted(SINKS))
    @pytest.mark.parametrize("path", [5, None, b"log"])
    def test_path_type(self, kind: str, path: object) -> None:
        with pytest.raises(InvalidType, match=r"path must be a str or os\.PathLike"):
            SINKS[kind](path)  # type: ignore[arg-type]


def _deep(depth: int) -> object:
    value: object = "bottom"
    for i in range(depth):
        value = {"level": i, "inner": [value]} if i % 2 else [value, i]
    return value


class TestPerRecordEncoding:
    @pytest.mark.parametrize("kind", sorted(SINKS))
    def test_an_odd_record_never_blocks_the_others(self, kind: str, tmp_path: Path) -> None:
        """A record whose detail JSON cannot hold as is (a tuple key, NaN, a
        cycle, nesting too deep for the C encoder or for SQLite) sits between valid ones:
        the whole batch is written in one commit, every record reads back, and
        the odd values come back as their documented stand-ins. (Before: the
        encoder raised, the batch — valid records included — failed on every
        flush for good.)"""
        path = tmp_path / f"log.{kind}"
        cyclic: list[object] = []
        cyclic.append(cyclic)
        odd = {
            "tuple key": {(1, 2): "x"},
            "nan": float("nan"),
            "cycle": cyclic,
            "deep": _deep(600),  # 900 levels: too deep for the C encoder here, stored exactly
            "deeper": _deep(3000),  # beyond MAX_DEPTH: cut
        }
        records = [
            LogRecord(i, 1.0, "escalate", None, (), None, "why", None, "escalated", detail)
            for i, detail in enumerate([{"n": 0}, odd, {"n": 2}])
        ]
        sink = SINKS[kind](path)
        sink.write(records)
        assert sink.commits == 1
        sink.close()
        sink = SINKS[kind](path)
        loaded = list(sink.load())
        sink.close()
        assert [r.seq for r in loaded] == [0, 1, 2]
        assert loaded[0].detail == {"n": 0} and loaded[2].detail == {"n": 2}
        back = loaded[1].detail
        assert back["tuple key"] == {"(1, 2)": "x"}
        assert back["nan"] == "nan"
        assert back["cycle"] == ["<cycle>"]
        assert encode_json(back["deep"]) == encode_json(_deep(600))
        assert '"<nested too deep>"' in encode_json(back["deeper"])

    @pytest.mark.parametrize("kind", sorted(SINKS))
    def test_a_record_that_cannot_be_encoded_at_all(self, kind: str, tmp_path: Path) -> None:
        """A record that fails to encode (its detail raises when read) is
        named in the error; the records before it in the batch are durable."""

        class Hostile(Mapping[str, Any]):
            def __getitem__(self, key: str) -> Any:
                raise RuntimeError("boom")

            def __iter__(self) -> Iterator[str]:
                raise RuntimeError("boom")

            def __len__(self) -> int:
                return 1

        good = LogRecord(0, 1.0, "escalate", None, (), None, "why", None, "escalated", {"n": 0})
        bad = LogRecord(1, 1.0, "escalate", None, (), None, "why", None, "escalated", Hostile())
        sink = SINKS[kind](path := tmp_path / f"log.{kind}")
        with pytest.raises(ValueError, match=r"^log record 1 \(escalate\) cannot be encoded: "):
            sink.write([good, bad])
        sink.close()
        sink = SINKS[kind](path)
        assert [r.seq for r in sink.load()] == [0]
        sink.close()

    def test_encoders_agree(self) -> None:
        """The iterative encoder writes what the C encoder writes."""
        from quiesce._log._format import _encode_iterative

        value = {"a": [1, 2.5, -0.0, 1e300, None, True, False, "é\ud83d\n"], 3: {"x": []}, "": {}}
        import json

        assert _encode_iterative(value) == json.dumps(
            value, separators=(",", ":"), ensure_ascii=True
        )
        assert decode_json(_encode_iterative(value)) == json.loads(json.dumps(value))

    def test_encode_record_round_trips_deep_detail(self) -> None:
        """Up to MAX_DEPTH levels a record is stored exactly, whatever the
        caller's stack depth; the line is then readable at any stack depth."""
        rec = LogRecord(0, 1.0, "escalate", None, (), None, None, None, "x", {"d": _deep(650)})
        line = _at_stack_depth(sys.getrecursionlimit() - 60, encode_record, rec)
        back = _at_stack_depth(sys.getrecursionlimit() - 60, decode_json, line)
        assert encode_json(back["detail"]["d"]) == encode_json(_deep(650))
        assert not _too_deep(line)


def _at_stack_depth(depth: int, fn: Any, *args: Any) -> Any:
    """``fn(*args)`` called ``depth`` Python frames deep."""
    if depth <= 0:
        return fn(*args)
    return _at_stack_depth(depth - 1, fn, *args)


class TestInspectIsTerminalSafe:
    """``quiesce inspect`` escapes control characters in every human-readable
    line (defect 12): before, ESC sequences from ids and reasons reached the
    terminal and a newline in an id forged table rows."""

    EVIL_ID = "evil\x1b[2J\nrow 99  append  forged"
    EVIL_REASON = "gone\x1b]0;pwned\x07\r\u202eeman\x85"

    def _log(self, tmp_path: Path) -> Path:
        path = tmp_path / "log.db"
        buf = Buffer(log=SQLiteLog(path))
        buf.append(Entry(self.EVIL_ID, Kind.REASONING, "body"))
        buf.append(Entry("plain", Kind.REASONING, "other"))
        buf.prune([self.EVIL_ID], reason=self.EVIL_REASON, actor="a\x1bctor", turn=1)
        buf.apply_due()
        buf.flush()
        buf.sink.close()  # type: ignore[union-attr]
        return path

    def test_tables(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        from quiesce._log.inspect import main

        path = self._log(tmp_path)
        assert main([str(path)]) == 0
        out = capsys.readouterr().out
        assert not any(c in out for c in "\x1b\x07\r\x85\u202e")
        assert "evil\\x1b[2J\\nrow" in out
        # one line per record: the newline in the id forged no row
        lines = out.splitlines()
        start = lines.index("EDIT LOG") + 3
        end = lines.index("TOMBSTONES") - 1
        assert len(lines[start:end]) == 5  # append, append, prune, tombstone, remove
        tomb_rows = [line for line in lines[lines.index("TOMBSTONES") :] if "evil" in line]
        assert len(tomb_rows) == 1 and "\\x1b" in tomb_rows[0]
        assert main([str(path), "--id", self.EVIL_ID]) == 0
        out = capsys.readouterr().out
        assert "\x1b" not in out and "--id evil\\x1b[2J\\nrow" in out

    def test_json_is_ascii(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        import json

        from quiesce._log.inspect import main

        path = self._log(tmp_path)
        assert main([str(path), "--json"]) == 0
        out = capsys.readouterr().out
        assert out.isascii() and "\x1b" not in out
        doc = json.loads(out)
        assert doc["tombstones"][0]["id"] == self.EVIL_ID  # exact in JSON

    def test_error_message(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        from quiesce._log.inspect import main

        missing = tmp_path / "no\x1b[31msuch\nfile"
        assert main([str(missing)]) == 1
        err = capsys.readouterr().err
        assert "\x1b" not in err and err.count("\n") == 1
        assert "x1b[31msuch" in err

    def test_printable(self) -> None:
        from quiesce._log.inspect import printable

        assert printable("plain text, é 日本 🙂") == "plain text, é 日本 🙂"
        assert printable("a\\b") == "a\\\\b"
        assert printable("\x00\x1b\x7f\x9b\n\r\t\u2028\u202e\ud83d") == (
            "\\x00\\x1b\\x7f\\x9b\\n\\r\\t\\u2028\\u202e\\ud83d"
        )

    def test_inspect_a_fifo_with_an_escape_in_its_name(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Refused without reading it (exit 2, the CLI's bad-argument status),
        the name escaped."""
        from quiesce._log.inspect import main

        fifo = tmp_path / "fi\x1b[2Jfo"
        os.mkfifo(fifo)
        assert main([str(fifo)]) == 2
        err = capsys.readouterr().err
        assert "\x1b" not in err and err.endswith("fi\\x1b[2Jfo is not a regular file\n")

    def test_deep_record_json(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """--json of a record nested deeper than json's own encoder can go
        (crafted: the engine cuts at MAX_DEPTH) prints compact JSON instead
        of a RecursionError."""
        import json

        from quiesce._log.inspect import main
        from test_replay_checks import _jsonl

        deep = "[" * 20_000 + "]" * 20_000
        line = (
            '{"format":1,"seq":0,"time":1.0,"op":"escalate","version":null,"ids":[],'
            '"actor":null,"reason":null,"turn":null,"outcome":"x","detail":{"d":' + deep + "}}"
        )
        path = tmp_path / "log.jsonl"
        _jsonl(path, [line])
        assert main([str(path), "--json"]) == 0
        out = capsys.readouterr().out
        assert out.startswith('{"summary":') and deep in out
        assert main([str(path)]) == 0
        assert "escalate" in capsys.readouterr().out
        del json


DATA = Path(__file__).resolve().parents[1].joinpath("data")


class TestLayout1Files:
    """Files written by quiesce 0.1.0 (SQLite layout 1, no checksums) are read
    and appended to as layout 1 (``tests/data/log-0.1.0.db`` was written by
    0.1.0 itself)."""

    def test_recovers_and_appends(self, tmp_path: Path) -> None:
        import shutil
        import sqlite3

        path = tmp_path / "old.db"
        shutil.copy(DATA / "log-0.1.0.db", path)
        buf = Buffer(log=SQLiteLog(path))
        buf._check()
        assert buf.version == 7
        assert [e.id for e in buf.head().entries()] == ["rule", "step"]
        assert sorted(buf.tombstones) == ["call", "out"]
        assert buf.head().live["step"].entry.body == "the pod is healthy"
        buf.append(Entry("new", Kind.REASONING, "after the upgrade"))
        buf.flush()
        buf.sink.close()  # type: ignore[union-attr]
        conn = sqlite3.connect(path)
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 1
        columns = [r[1] for r in conn.execute("PRAGMA table_info(quiesce_log)")]
        conn.close()
        assert "crc" not in columns
        again = Buffer(log=SQLiteLog(path))
        assert [e.id for e in again.head().entries()] == ["rule", "step", "new"]
        again.sink.close()  # type: ignore[union-attr]

    def test_a_flipped_schema_is_refused(self, tmp_path: Path) -> None:
        """A bit flip in the stored schema text that turns ``seq INTEGER
        PRIMARY KEY`` into an ordinary column made every seq NULL and the log
        recover empty (a flip found by the bit-flip fuzzer); the schema is now
        compared with quiesce's own."""
        path = tmp_path / "log.db"
        buf = Buffer(log=SQLiteLog(path))
        buf.append(Entry("a", Kind.REASONING, "x"))
        buf.flush()
        buf.sink.close()  # type: ignore[union-attr]
        data = bytearray(path.read_bytes())
        at = data.index(b"seq     INTEGER PRIMARY KEY") + len(b"seq     INTEGER P")
        data[at] ^= 0x01  # "INTEGER PSIMARY KEY" is a type name: seq is no longer the rowid
        path.write_bytes(bytes(data))
        with pytest.raises(LogFormatError, match=r"its schema is not a quiesce log's$"):
            Buffer(log=SQLiteLog(path))


class TestUnderOpenBuffer:
    """The same guarantees under the async runtime, on asyncio and trio."""

    @pytest.mark.anyio
    @pytest.mark.parametrize("kind", sorted(SINKS))
    async def test_deep_escalation_data_round_trips(
        self, kind: str, tmp_path: Path, anyio_backend: str
    ) -> None:
        """Escalation data nested 750 deep (accepted at the call, deeper than
        some stacks' JSON encoder goes) between valid appends, under
        open_buffer's group commit: every record is durable and recovers
        exactly. (Odd values ``escalate`` refuses at the call now; the sink's
        own per-record encoding is tested in TestPerRecordEncoding.)"""
        from quiesce import EscalationKind, open_buffer

        path = tmp_path / f"log.{kind}"
        sink = SINKS[kind](path)
        async with open_buffer(log=sink, flush_interval=0.001) as buf:
            buf.append(Entry("before", Kind.REASONING, "valid"))
            buf.escalate(EscalationKind.BACKLOG, "deep data", data={"deep": _deep(500)})
            buf.append(Entry("after", Kind.REASONING, "valid too"))
            await buf.aflush()
            assert buf.pending_records == 0
            assert not buf.stats().log_failing
        sink.close()
        again = Buffer(log=SINKS[kind](path))
        assert [e.id for e in again.head().entries()] == ["before", "after"]
        assert [r.op for r in again.log] == ["append", "escalate", "append"]
        assert encode_json(again.log[1].detail["data"]) == encode_json({"deep": _deep(500)})
        again._check()
        again.sink.close()  # type: ignore[union-attr]

    @pytest.mark.anyio
    @pytest.mark.parametrize("kind", sorted(SINKS))
    async def test_a_crafted_log_is_refused_at_open(
        self, kind: str, tmp_path: Path, anyio_backend: str
    ) -> None:
        """open_buffer on a log describing an impossible history raises the
        LogFormatError itself (no ExceptionGroup), naming the record."""
        from quiesce import open_buffer
        from test_replay_checks import CRAFTED

        records, message = CRAFTED["tombstone for a constraint"]
        path = tmp_path / f"log.{kind}"
        sink = SINKS[kind](path)
        sink.write(records)
        sink.close()
        sink = SINKS[kind](path)
        with pytest.raises(LogFormatError, match=rf"^{message}$"):
            async with open_buffer(log=sink):
                pass  # pragma: no cover - never entered
        sink.close()

    @pytest.mark.anyio
    @pytest.mark.parametrize("kind", sorted(SINKS))
    async def test_a_log_held_by_another_process(
        self, kind: str, tmp_path: Path, anyio_backend: str
    ) -> None:
        """A second agent process cannot open the log an open_buffer session
        is writing; the session carries on and everything it wrote is there."""
        from quiesce import open_buffer

        path = tmp_path / f"log.{kind}"
        sink = SINKS[kind](path)
        async with open_buffer(log=sink, flush_interval=0.001) as buf:
            buf.append(Entry("mine", Kind.REASONING, "from the session"))
            await buf.aflush()
            child = _python(_WRITER.format(kind=kind, path=str(path), body="intruder"))
            out, err = child.communicate("go\n", timeout=60)
            assert child.returncode == 3, (out, err)
            buf.append(Entry("more", Kind.REASONING, "still writing"))
        sink.close()
        assert _bodies(kind, path) == ["from the session", "still writing"]


_PROBE = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
try:
    # SQLite's SHARED lock range on the database file (PENDING_BYTE + 2, 510 bytes)
    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 510, 0x40000002)
    print("free")
except OSError:
    print("locked")
"""


def _sqlite_lock_held(path: Path) -> bool:
    """Whether another process sees SQLite's POSIX SHARED lock on ``path``."""
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, str(path)], capture_output=True, text=True, timeout=60
    ).stdout.strip()
    assert out in ("free", "locked"), out
    return out == "locked"


class TestSQLiteLocksSurvive:
    """Closing any descriptor of a file drops every POSIX lock the process
    holds on it, SQLite's included; a process whose SQLite lock is gone can
    have its WAL checkpointed and deleted by another process's last close.
    Refusing a second sink, or inspecting the log, in the process that
    writes it must therefore never open and close the file."""

    def test_a_refused_second_sink(self, tmp_path: Path) -> None:
        path = tmp_path / "log.db"
        buf = Buffer(log=SQLiteLog(path))
        buf.append(Entry("a", Kind.REASONING, "x"))
        buf.flush()
        assert _sqlite_lock_held(path)
        with pytest.raises(LogLocked):
            SQLiteLog(path)
        assert _sqlite_lock_held(path)  # before: dropped by the refused opener
        buf.sink.close()  # type: ignore[union-attr]

    def test_inspect_in_the_writing_process(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        from quiesce._log.inspect import main

        path = tmp_path / "log.db"
        buf = Buffer(log=SQLiteLog(path))
        buf.append(Entry("a", Kind.REASONING, "x"))
        buf.flush()
        assert main([str(path)]) == 0
        assert "1 records" in capsys.readouterr().out
        assert _sqlite_lock_held(path)
        buf.append(Entry("b", Kind.REASONING, "y"))
        buf.flush()
        buf.sink.close()  # type: ignore[union-attr]
        assert _bodies("sqlite", path) == ["x", "y"]
