"""Open entries in the durable log (issue 24): the records, recovery, checkpoints.

A stream logs ``stream_open``, one ``stream_text`` per flush (the text that
arrived since its last record, not one record per write), and
``stream_close`` / ``stream_abort`` with the rest. Reopening a log recovers
closed streams exactly and a stream the log ends in as its durable prefix,
aborted (marked stale with a reason saying so). Every sink: the in-memory
log, SQLite and JSONL files, the tests' private PostgreSQL server.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from quiesce import (
    Buffer,
    Entry,
    JsonlLog,
    Kind,
    LogFormatError,
    LogRecord,
    LogSink,
    SQLiteLog,
)
from quiesce._log.inspect import main as inspect_main
from quiesce._log.verify import main as verify_main

Sink = Callable[[], LogSink]


def _close(buf: Buffer) -> None:
    close = getattr(buf.sink, "close", None)
    if close is not None:
        close()


@pytest.fixture(params=["sqlite", "jsonl", "postgres"])
def reopen(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Sink]:
    """A factory of sinks over one durable log (each call opens it again)."""
    kind = request.param
    if kind == "sqlite":
        yield lambda: SQLiteLog(tmp_path / "log.db")
    elif kind == "jsonl":
        yield lambda: JsonlLog(tmp_path / "log.jsonl")
    else:
        from quiesce import PostgresLog

        dsn = request.getfixturevalue("pg_dsn")
        yield lambda: PostgresLog(dsn, "streams")


def _ops(buf: Buffer) -> list[str]:
    return [r.op for r in buf.log]


class TestRecords:
    def test_text_is_coalesced_per_flush(self, tmp_path: Path) -> None:
        """Many writes between two flushes give one stream_text record."""
        buf = Buffer(log=SQLiteLog(tmp_path / "a.db"))
        w = buf.open_stream("a", Kind.REASONING)
        for i in range(500):
            w.write(f"{i} ")
        buf.flush()
        for i in range(500, 700):
            w.write(f"{i} ")
        buf.flush()
        buf.flush()  # nothing new: no record
        w.close()
        buf.flush()
        assert _ops(buf) == ["stream_open", "stream_text", "stream_text", "stream_close"]
        texts = [r.detail for r in buf.log if r.op == "stream_text"]
        assert [(d["offset"], d["writes"]) for d in texts] == [
            (0, 500),
            (len(texts[0]["text"]), 200),
        ]
        assert "".join(d["text"] for d in texts) == w.text
        buf._check()
        _close(buf)

    def test_the_flusher_sees_unlogged_text(self, tmp_path: Path) -> None:
        """Text no record holds counts as pending, so the runtime's flusher logs it."""
        buf = Buffer(log=SQLiteLog(tmp_path / "a.db"))
        w = buf.open_stream("a", Kind.REASONING)
        buf.flush()
        assert buf.pending_records == 0
        w.write("x")
        assert buf.pending_records == 1
        buf.flush()
        assert buf.pending_records == 0
        _close(buf)

    def test_in_memory_log_replays(self) -> None:
        """Without a sink the close record holds all the text: the in-memory
        log replays to the same entries."""
        buf = Buffer()
        w = buf.open_stream("a", Kind.REASONING)
        for i in range(40):
            w.write(f"w{i}")
        w.close(content={"type": "text"})
        x = buf.open_stream("b", Kind.REASONING)
        x.write("half")
        x.abort("cut off")
        copy = Buffer()
        from quiesce._core.replay import replay

        replay(copy, list(buf.log))
        with buf.snapshot() as s1, copy.snapshot() as s2:
            assert list(s1) == list(s2)
            assert s1.marks == s2.marks
        copy._check()

    @pytest.mark.parametrize("chunk", [1, 7, 40])
    def test_log_bytes_of_a_streamed_message(self, tmp_path: Path, chunk: int) -> None:
        """The log bytes of a streamed message are at most 1.3x those of the
        same message appended whole, plus a bounded amount per flush."""
        text = "".join(f"token{i} " for i in range(2000))  # ~17 KB
        whole = Buffer(log=JsonlLog(tmp_path / "whole.jsonl"))
        base = (tmp_path / "whole.jsonl").stat().st_size
        whole.append(Entry("m", Kind.REASONING, text, meta={"role": "assistant"}))
        whole.flush()
        whole_bytes = (tmp_path / "whole.jsonl").stat().st_size - base
        _close(whole)

        streamed = Buffer(log=JsonlLog(tmp_path / "streamed.jsonl"))
        base = (tmp_path / "streamed.jsonl").stat().st_size
        w = streamed.open_stream("m", Kind.REASONING, meta={"role": "assistant"})
        flushes = 0
        for i in range(0, len(text), chunk):
            w.write(text[i : i + chunk])
            if i % 2000 < chunk:
                streamed.flush()
                flushes += 1
        w.close()
        streamed.flush()
        streamed_bytes = (tmp_path / "streamed.jsonl").stat().st_size - base
        _close(streamed)
        assert flushes >= 8
        assert streamed_bytes <= 1.3 * whole_bytes + 300 * (flushes + 1), (
            streamed_bytes,
            whole_bytes,
            flushes,
        )


class TestRecovery:
    def test_closed_and_open_streams_recover(self, reopen: Sink) -> None:
        """A closed stream recovers exactly; one open when the log ends
        recovers its durable prefix, aborted and marked; the recovered log
        passes verify and _check."""
        buf = Buffer(log=reopen())
        buf.append(Entry("q", Kind.REASONING, "question"))
        done = buf.open_stream("done", Kind.REASONING, refs=("q",), turn=1)
        cut = buf.open_stream("cut", Kind.REASONING, turn=1, meta={"k": "v"})
        for i in range(30):
            done.write(f"d{i} ")
            cut.write(f"c{i} ")
        buf.flush()
        buf.mark_stale("q", "answered")
        for i in range(30, 40):
            cut.write(f"c{i} ")
        done.close(content={"type": "text", "text": done.text})
        buf.flush()
        durable = cut.text
        cut.write("never flushed")
        with buf.snapshot() as snap:
            closed = snap["done"]
        buf._check()
        _close(buf)

        again = Buffer(log=reopen(), verify=True)
        with again.snapshot() as snap:
            assert snap["done"] == closed and not snap["done"].streaming
            e = snap["cut"]
            assert (e.body, e.streaming, dict(e.meta)) == (durable, False, {"k": "v"})
            mark = snap.mark("cut")
            assert mark is not None
            assert mark.reason == (
                "stream interrupted: the log ends before its close "
                f"(recovered its durable prefix of {len(durable)} characters)"
            )
            assert snap.is_stale("q")
        again._check()
        assert again.streams() == {}
        again.flush()  # the recovery's abort record is durable too
        assert again.verify() >= 0
        _close(again)
        third = Buffer(log=reopen(), verify=True)
        with third.snapshot() as snap:
            assert snap["cut"].body == durable and snap.is_stale("cut")
        assert [r.op for r in third.log].count("stream_abort") == 1
        _close(third)

    def test_a_checkpoint_mid_stream_holds_the_durable_prefix(self, reopen: Sink) -> None:
        """A checkpoint taken while a stream is open holds its logged prefix;
        recovery from it, then the records after it, finishes the stream."""
        buf = Buffer(log=reopen())
        w = buf.open_stream("a", Kind.REASONING)
        for i in range(20):
            w.write(f"x{i} ")
        buf.flush(checkpoint=True)
        ck = [r for r in buf.log if r.op == "checkpoint"][-1]
        live = ck.detail["state"]["live"]
        assert live[0][0]["streaming"] is True and live[0][0]["body"] == w.text
        for i in range(20, 30):
            w.write(f"x{i} ")
        w.close()
        buf.flush()
        text = w.text
        _close(buf)
        again = Buffer(log=reopen(), verify=True)
        with again.snapshot() as snap:
            assert snap["a"].body == text and not snap["a"].streaming
            assert not snap.is_stale("a")
        again._check()
        _close(again)

    def test_writing_after_recovery_continues_the_versions(self, tmp_path: Path) -> None:
        buf = Buffer(log=SQLiteLog(tmp_path / "a.db"))
        w = buf.open_stream("a", Kind.REASONING)
        for i in range(10):
            w.write(str(i))
        buf.flush()
        _close(buf)
        again = Buffer(log=SQLiteLog(tmp_path / "a.db"))
        v = again.version
        w2 = again.open_stream("b", Kind.REASONING)
        w2.write("more")
        w2.close()
        assert again.version == v + 3
        again.flush()
        again._check()
        assert again.verify() >= 0
        _close(again)


class TestReplayRefuses:
    """A log is untrusted input: stream records that no engine writes are refused."""

    def _log(self) -> list[LogRecord]:
        buf = Buffer()
        w = buf.open_stream("a", Kind.REASONING)
        w.write("abc")
        w.close()
        return list(buf.log)

    def _replay(self, records: list[LogRecord]) -> None:
        from quiesce._core.replay import replay

        replay(Buffer(), records)

    def test_text_that_does_not_continue(self) -> None:
        recs = self._log()
        close = recs[1]
        bad = close._replace(detail={**close.detail, "offset": 5})
        with pytest.raises(
            LogFormatError,
            match=r"^log record 1 \(stream_close\) is malformed: "
            r"ValueError\('its text starts at 5, not at 0 \(the logged length\)'\)$",
        ):
            self._replay([recs[0], bad])

    def test_a_hash_that_does_not_match(self) -> None:
        recs = self._log()
        close = recs[1]
        bad = close._replace(detail={**close.detail, "text": "abd"})
        with pytest.raises(LogFormatError, match=r"^log record 1 \(stream_close\) is malformed"):
            self._replay([recs[0], bad])

    def test_a_close_of_no_stream(self) -> None:
        recs = self._log()
        with pytest.raises(
            LogFormatError, match=r"^log record 0 \(stream_close\): 'a' is not an open stream$"
        ):
            self._replay([recs[1]._replace(seq=0, version=1)])

    def test_a_stream_of_a_protected_kind(self) -> None:
        recs = self._log()
        op = recs[0]
        entry = {**op.detail["entry"], "kind": "constraint"}
        bad = op._replace(detail={**op.detail, "entry": entry})
        with pytest.raises(
            LogFormatError,
            match=r"^log record 0 \(stream_open\) is malformed: "
            r"ValueError\('a CONSTRAINT is never streamed'\)$",
        ):
            self._replay([bad])


class TestTools:
    def test_inspect_and_verify_read_stream_records(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        path = tmp_path / "a.db"
        buf = Buffer(log=SQLiteLog(path))
        w = buf.open_stream("a", Kind.REASONING)
        w.write("hello")
        buf.flush(checkpoint=True)
        w.write(" world")
        w.abort("user stopped")
        buf.flush()
        _close(buf)
        assert inspect_main([str(path)]) == 0
        out = capsys.readouterr().out
        for op in ("stream_open", "stream_text", "stream_abort"):
            assert op in out
        assert verify_main([str(path)]) == 0
        assert "agree with a full replay" in capsys.readouterr().out
        assert inspect_main([str(path), "--op", "stream_text"]) == 0
