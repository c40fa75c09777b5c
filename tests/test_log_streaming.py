"""Streamed reads of the durable logs (issue 13): a closed sink's read-back
closes its stream whatever happens, and ``quiesce inspect`` of a PostgreSQL
log reads it in bounded pages, with the output of the other logs for the
same records. Behaviour checks (open descriptors, a memory ratio with a wide
margin, equal output), never wall-clock times. Synchronous: no event loop
involved (PostgreSQL is the session's private cluster, one schema a test)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from quiesce import Buffer, EditPlan, Entry, JsonlLog, Kind, LogSink, Prune, SQLiteLog
from quiesce._log._format import records_before
from quiesce._log.jsonl import stream_jsonl
from quiesce._log.sqlite import stream_sqlite


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


def _closed_log(path: Path, kind: str, rounds: int) -> None:
    sink: LogSink = SQLiteLog(path) if kind == "sqlite" else JsonlLog(path)
    _churn(Buffer(log=sink, checkpoint_every=0), rounds)
    sink.close()


class TestRecordsBefore:
    @pytest.mark.parametrize("kind", ["sqlite", "jsonl"])
    def test_reads_up_to_stop_and_closes(self, tmp_path: Path, kind: str) -> None:
        """A closed log's records ``start .. stop - 1`` are read back, equal
        to a full read, and the stream's connection or descriptor is closed
        when they are returned."""
        path = tmp_path / f"log.{kind}"
        _closed_log(path, kind, 4)
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
        _closed_log(path, kind, 2)
        before = _open_fds()
        with pytest.raises(TypeError) as raised:
            records_before(
                stream_sqlite(path)[1] if kind == "sqlite" else stream_jsonl(path)[2],
                None,  # type: ignore[arg-type]
            )
        assert raised.traceback  # the frames (and the stream) are still referenced
        assert _open_fds() == before
