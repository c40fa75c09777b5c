"""The records of an open entry: ``stream_open``, ``stream_text``,
``stream_close`` and ``stream_abort``.

What this module keeps true: a stream opens with an empty body; each
``stream_text`` record says from which offset its text continues and
through which version it holds the stream's writes; the closing record
carries the text not yet logged and, for a sealed entry, the whole entry
(recovery checks it byte for byte). Whether offsets and text agree with
the stream is :mod:`..stream`'s check, not this module's. O(size of the
text).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from ..entry import Entry
from ..records import LogRecord
from .fields import APPLIED, Op, fail, field, malformed, one_id, order_key

__all__ = [
    "StreamFinish",
    "StreamText",
    "parse_stream_finish",
    "parse_stream_open",
    "parse_stream_text",
    "stream_finish_record",
    "stream_open_record",
    "stream_text_record",
]


def stream_open_record(seq: int, at: float, version: int, header: Entry, key: float) -> LogRecord:
    """The record of opening a stream: its ``header`` (empty body) and key."""
    return LogRecord(
        seq,
        at,
        Op.STREAM_OPEN.value,
        version,
        (header.id,),
        None,
        None,
        header.turn,
        APPLIED,
        {"entry": header.to_dict(), "key": key},
    )


def parse_stream_open(rec: LogRecord) -> tuple[dict[str, Any], float]:
    """The header (its JSON form: :func:`.stream.stream_header` builds it)
    and the order key of a ``stream_open`` record."""
    header = field(rec, "entry")
    if not isinstance(header, dict):
        raise malformed(rec, TypeError("the stream header is not an object"))
    if header.get("body", "") != "":
        raise fail(rec, "a stream opens with a body")
    return header, order_key(rec, field(rec, "key"))


class StreamText(NamedTuple):
    """What a ``stream_text`` record says."""

    id: str
    offset: int
    text: str
    #: the version of the stream's last write it holds
    through: int
    #: versions the stream's writes published since its last record
    writes: int


def stream_text_record(
    seq: int, at: float, entry_id: str, offset: int, text: str, through: int, writes: int
) -> LogRecord:
    """The record of the text a stream received since its last record
    (``offset`` characters were logged before; ``through`` the version of
    its last write)."""
    return LogRecord(
        seq,
        at,
        Op.STREAM_TEXT.value,
        None,
        (entry_id,),
        None,
        None,
        None,
        APPLIED,
        {"offset": offset, "text": text, "through": through, "writes": writes},
    )


def parse_stream_text(rec: LogRecord) -> StreamText:
    """The id, offset, text, through and writes of a ``stream_text``
    record (offset and text are checked against the stream by
    :func:`.stream.replay_text`)."""
    i = one_id(rec)
    through = field(rec, "through")
    if type(through) is not int:
        raise fail(rec, f"its text is through version {through!r}")
    return StreamText(
        i, field(rec, "offset"), field(rec, "text"), through, rec.detail.get("writes", 0)
    )


class StreamFinish(NamedTuple):
    """What a ``stream_close`` or ``stream_abort`` record says (the rest of
    its detail is read by :func:`.stream.replay_finish`)."""

    id: str
    aborted: bool
    #: an abort that marked the entry
    mark: bool


def stream_finish_record(
    seq: int,
    at: float,
    version: int,
    final: Entry,
    *,
    aborted: bool,
    reason: str | None,
    offset: int,
    text: str,
    writes: int,
    mark: bool,
    refusal: str | None,
) -> LogRecord:
    """The record of closing (or aborting) a stream into ``final``: the text
    not yet logged (from ``offset``), the content hash, the writes since the
    last record, the content and, for a sealed entry, the whole entry."""
    detail: dict[str, Any] = {
        "offset": offset,
        "text": text,
        "content_hash": final.content_hash,
        "writes": writes,
    }
    if final.content is not None:
        detail["content"] = final.to_dict()["content"]
    if final.sealed:
        # recovery checks a sealed entry byte for byte against the record
        # that wrote it (claims.py): this one carries it whole
        detail["entry"] = final.to_dict()
    if mark:
        detail["mark"] = True
    if refusal is not None:
        detail["refusals"] = [refusal]
    op = Op.STREAM_ABORT.value if aborted else Op.STREAM_CLOSE.value
    outcome = "aborted" if aborted else APPLIED
    return LogRecord(seq, at, op, version, (final.id,), None, reason, final.turn, outcome, detail)


def parse_stream_finish(rec: LogRecord) -> StreamFinish:
    """The id, whether aborted, and whether the abort marked the entry."""
    i = one_id(rec)
    aborted = rec.op == Op.STREAM_ABORT.value
    return StreamFinish(i, aborted, aborted and bool(rec.detail.get("mark")))
