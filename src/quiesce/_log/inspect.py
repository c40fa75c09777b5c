"""``quiesce inspect PATH``: a durable edit log and its tombstones, for a person.

The file kind is detected by content (a SQLite header, or a JSONL header
line), never by name; a ``postgresql://`` URI names a PostgreSQL log. The
log is only read: SQLite through a read-only connection, JSONL with plain
reads (a torn tail is reported and ignored, as recovery would), PostgreSQL
with ``SELECT`` statements. The records are replayed into a scratch buffer, so the
summary (head version, live entries, staged removals) is exactly what
``Buffer(log=...)`` would recover, and a log that cannot be recovered is
reported as such.

Streaming (issue 13): the records are read twice, a page at a time
(:func:`~.sqlite.stream_sqlite`, :func:`~.jsonl.stream_jsonl`,
:func:`~.postgres.stream_postgres`, whatever the kind): the first
pass replays them (the scratch buffer's in-memory log is cut after each
chunk) and sizes the table's columns, the second prints them (``--json``
writes the document record by record). Memory holds the recovered state
(live entries, tombstones) and one chunk, never the whole log; time is two
reads of the log.

Output: a summary, the edit log as a table (time, turn, actor, operation,
ids, reason, outcome) and the tombstones (id, kind, content hash, version,
turn, actor, reason). ``--id ENTRY`` keeps records and tombstones that name
the entry; ``--op OP`` keeps records of one operation (and shows tombstones
only for ``--op remove``); ``--json`` prints everything, untruncated, as one
JSON document. Exit status: 0, or 1 if the file cannot be read as a log
(a damaged or crafted file, a directory, a FIFO: one line on stderr, never a
traceback, never a hang).

Terminal safety: a log is untrusted input, so every human-readable line —
the tables, the summary, the error message — shows text through
:func:`printable`: a control character (ESC, a newline, a carriage return,
any C0/C1 code, a bidi override, a lone surrogate, anything
``str.isprintable`` refuses) is written as a backslash escape (``\x1b``,
``\n``, ``\u202e``), and a backslash as ``\\``, so an id cannot move the
cursor, recolour the terminal or forge a table row. ``--json`` output is
escaped by JSON itself (ASCII only).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import UTC, datetime
from typing import Any, TextIO

from .._core.buffer import Buffer
from .._core.checkpoint import describe_checkpoint
from .._core.errors import LogFormatError
from .._core.records import LogRecord, Tombstone
from .._core.replication import Replication
from ._file_locks import _held_fd
from ._format import OPS, encode_json, log_path, sniff
from .jsonl import stream_jsonl
from .sqlite import stream_sqlite

__all__ = ["main", "not_a_regular_file", "parse_command", "printable"]

_UNSAFE = re.compile(r"[^ -~]|\\")  # anything but printable ASCII, and backslashes


_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    c = match.group()
    if c == "\\":
        return "\\\\"
    if c.isprintable():
        return c  # printable non-ASCII text (accents, CJK, emoji) stays as is
    if c in _NAMED:
        return _NAMED[c]
    o = ord(c)
    return f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}" if o < 0x10000 else f"\\U{o:08x}"


def printable(text: str) -> str:
    """``text`` safe to write to a terminal: every character ``str.isprintable``
    refuses (controls, line and paragraph separators, format characters such
    as bidi overrides, lone surrogates, unassigned code points) becomes a
    backslash escape, and a backslash becomes two. O(len(text))."""
    if text.isascii() and text.isprintable() and "\\" not in text:
        return text
    return _UNSAFE.sub(_escape, text)


def parse_command(
    parser: argparse.ArgumentParser, argv: Sequence[str] | None
) -> argparse.Namespace | int:
    """``argv`` (``None``: ``sys.argv[1:]``) parsed by ``parser``, or the exit
    status argparse chose instead of raising ``SystemExit`` (2 for a usage
    error, 0 after ``--help``): the log commands return their status."""
    try:
        return parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 2


def not_a_regular_file(command: str, path: str) -> bool:
    """Whether ``path`` exists but is not a regular file (a FIFO or a device
    would block the read; a folder is not a log either); if so, says so on
    stderr as ``command``'s error."""
    if os.path.exists(path) and not os.path.isfile(path):
        sys.stderr.write(f"{command}: error: {printable(path)} is not a regular file\n")
        return True
    return False


def _when(t: float) -> str:
    try:
        return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    except (OverflowError, ValueError, OSError):  # a time no calendar shows
        return repr(t)


def _cut(text: str, width: int) -> str:
    text = " ".join(printable(text).split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _table(headers: Sequence[str], rows: list[list[str]], out: TextIO) -> None:
    widths = [len(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    _table_head(headers, widths, out)
    for row in rows:
        _table_row(row, widths, out)


def _table_head(headers: Sequence[str], widths: Sequence[int], out: TextIO) -> None:
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))
    out.write(line.rstrip() + "\n")
    out.write("  ".join("-" * w for w in widths) + "\n")


def _table_row(row: Sequence[str], widths: Sequence[int], out: TextIO) -> None:
    out.write("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() + "\n")


def _dash(value: object) -> str:
    return "-" if value is None else printable(str(value))


def _tomb_dict(t: Tombstone) -> dict[str, Any]:
    return {
        "id": t.id,
        "kind": None if t.kind is None else t.kind.value,
        "content_hash": t.content_hash,
        "version": t.version,
        "turn": t.turn,
        "actor": t.actor,
        "reason": t.reason,
        "key": t.key,
    }


#: records replayed into the scratch buffer at a time (its in-memory log is
#: cut after each chunk, so memory does not grow with the log)
_CHUNK = 2048


def _open(path: str) -> tuple[str, int, int, Callable[[], Iterator[LogRecord]]]:
    """The kind, format and torn-tail bytes of the log at ``path``, and a
    function that streams its records (each call reads them again, one
    page at a time). Raises :class:`LogFormatError`, :class:`LogWriteError`
    (a PostgreSQL server) or ``OSError``."""
    if path.startswith(("postgresql://", "postgres://")):
        from .postgres import stream_postgres  # psycopg only when asked for

        fmt, pg_first = stream_postgres(path)
        return "postgresql", fmt, 0, _streams(pg_first, lambda: stream_postgres(path)[1])
    # A SQLite log this process writes is not opened again to sniff it.
    kind = "sqlite" if _held_fd(path) is not None else sniff(log_path(path, "inspect"))
    if kind == "sqlite":
        fmt, first = stream_sqlite(path)
        return kind, fmt, 0, _streams(first, lambda: stream_sqlite(path)[1])
    if kind == "jsonl":
        fmt, torn, jsonl_first = stream_jsonl(path)
        return kind, fmt, torn, _streams(jsonl_first, lambda: stream_jsonl(path)[2])
    raise LogFormatError(f"{path} is empty: not a quiesce edit log")


def _streams(
    first: Iterator[LogRecord], reopen: Callable[[], Iterator[LogRecord]]
) -> Callable[[], Iterator[LogRecord]]:
    """A function returning ``first`` (the stream the open checked) on its
    first call and a new stream from ``reopen`` on every later one."""
    pending = [first]

    def records() -> Iterator[LogRecord]:
        return pending.pop() if pending else reopen()

    return records


def _read(path: str) -> tuple[str, int, list[LogRecord], int]:
    """The kind, format, every record and the torn-tail bytes of the log at
    ``path``, in memory (``quiesce compact``; ``inspect`` streams)."""
    kind, fmt, torn, stream = _open(path)
    return kind, fmt, list(stream()), torn


def _recover(records: Iterable[LogRecord]) -> tuple[Buffer, int]:
    """A scratch buffer holding what ``Buffer(log=...)`` would recover from
    ``records``, and their count. Replays chunk by chunk and cuts the
    buffer's in-memory log after each, so memory is the state (live
    entries, tombstones, staged removals) plus one chunk, not the log."""
    buf = Buffer()
    repl = Replication(buf)
    count = 0
    chunk: list[LogRecord] = []
    for rec in records:
        chunk.append(rec)
        if len(chunk) == _CHUNK:
            count = _replay_chunk(repl, chunk, count)
            chunk = []
    count = _replay_chunk(repl, chunk, count)
    return buf, count


def _replay_chunk(repl: Replication, chunk: list[LogRecord], count: int) -> int:
    # a compacted log starts from its checkpoint (apply_records on a fresh buffer)
    repl.apply_records(chunk, strict=True)
    repl.forget_held_records()
    return count + len(chunk)

def _row(r: LogRecord) -> list[str]:
    return [
        str(r.seq),
        _when(r.time),
        _dash(r.turn),
        _dash(r.actor),
        printable(r.op),
        _cut(",".join(r.ids), 32) or "-",
        printable(describe_checkpoint(r)) if r.op == "checkpoint" else _cut(r.reason or "-", 48),
        printable(r.outcome),
    ]


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``quiesce inspect``; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="quiesce inspect",
        description=(
            "Show the edit log and tombstones of a quiesce log: a SQLite or JSONL "
            "file, or a postgresql:// URI (buffer_id=ID in its query)"
        ),
    )
    parser.add_argument(
        "path", metavar="PATH", help="a SQLiteLog or JsonlLog file, or a PostgresLog URI"
    )
    parser.add_argument("--id", dest="entry", metavar="ENTRY", help="only what names this entry")
    parser.add_argument(
        "--op", choices=OPS, metavar="OP", help=f"only one operation: {', '.join(OPS)}"
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    args = parse_command(parser, argv)
    if isinstance(args, int):
        return args
    out = sys.stdout
    if not_a_regular_file("quiesce inspect", args.path):
        return 2

    def wanted(r: LogRecord) -> bool:
        return (args.entry is None or args.entry in r.ids) and (args.op is None or r.op == args.op)

    # Two streaming passes: the first replays the log (the summary) and
    # sizes the table; the second prints the records. Memory holds the
    # recovered state and one chunk, never the whole log.
    headers = ("seq", "time (UTC)", "turn", "actor", "operation", "ids", "reason", "outcome")
    widths = [len(h) for h in headers]
    shown = 0

    def sized(records: Iterable[LogRecord]) -> Iterator[LogRecord]:
        nonlocal shown
        for r in records:
            if wanted(r):
                shown += 1
                if not args.json:
                    for i, cell in enumerate(_row(r)):
                        widths[i] = max(widths[i], len(cell))
            yield r

    try:
        kind, fmt, torn, stream = _open(args.path)
        buf, total = _recover(sized(stream()))
    except (OSError, LogFormatError) as exc:
        sys.stderr.write(f"quiesce inspect: error: {printable(str(exc))}\n")
        return 1
    head = buf.head()
    tombs = sorted(head.tombs.by_id.values(), key=lambda t: (t.version, t.id))
    shown_tombs = [] if args.op not in (None, "remove") else tombs
    if args.entry is not None:
        shown_tombs = [t for t in shown_tombs if t.id == args.entry]
    summary = {
        "path": args.path,
        "kind": kind,
        "format": fmt,
        "records": total,
        "version": buf.version,
        "entries": len(head.live),
        "marks": len(head.marks),
        "tombstones": len(tombs),
        "staged": len(buf.staged()),
        "torn_tail_bytes": torn,
    }
    try:
        if args.json:
            _write_json(out, summary, stream(), wanted, [_tomb_dict(t) for t in shown_tombs])
            return 0
        out.write(
            f"{printable(args.path)}: quiesce {kind} edit log, format {fmt}\n"
            f"{total} records; head version {buf.version}: {len(head.live)} live entries, "
            f"{len(head.marks)} marked, {len(tombs)} tombstones, "
            f"{len(buf.staged())} staged removals\n"
        )
        if torn:
            out.write(f"torn tail ignored: {torn} bytes after the last commit (a crash)\n")
        filters = [f"--id {printable(args.entry)}"] if args.entry else []
        filters += [f"--op {args.op}"] if args.op else []
        suffix = f" ({' '.join(filters)}: {shown} of {total})" if filters else ""
        out.write(f"\nEDIT LOG{suffix}\n")
        _table_head(headers, widths, out)
        for r in stream():
            if wanted(r):
                _table_row(_row(r), widths, out)
        if args.op in (None, "remove"):
            out.write("\nTOMBSTONES\n")
            _table(
                ("id", "kind", "content hash", "version", "turn", "actor", "reason"),
                [
                    [
                        printable(t.id),
                        _dash(None if t.kind is None else t.kind.value),
                        printable(t.content_hash),
                        str(t.version),
                        _dash(t.turn),
                        _dash(t.actor),
                        _cut(t.reason, 48),
                    ]
                    for t in shown_tombs
                ],
                out,
            )
        out.flush()
    except BrokenPipeError:  # pragma: no cover - e.g. piped into head
        return 0
    except (OSError, LogFormatError) as exc:  # the file changed between the two passes
        out.flush()
        sys.stderr.write(f"quiesce inspect: error: {printable(str(exc))}\n")
        return 1
    return 0


def _write_json(
    out: TextIO,
    summary: dict[str, Any],
    records: Iterable[LogRecord],
    wanted: Callable[[LogRecord], bool],
    tombstones: list[dict[str, Any]],
) -> None:
    """The ``--json`` document, written record by record (one JSON value:
    ``summary``, ``records``, ``tombstones``)."""

    def dump(value: Any) -> str:
        try:
            return json.dumps(value, indent=2, default=str)
        except (RecursionError, ValueError):  # a record deeper than json's stack
            return encode_json(value)  # compact and iterative: any depth

    out.write('{"summary": ' + dump(summary) + ',\n"records": [')
    sep = "\n"
    for r in records:
        if wanted(r):
            out.write(sep + dump({**r.to_dict(), "time_utc": _when(r.time)}))
            sep = ",\n"
    out.write('\n],\n"tombstones": ' + dump(tombstones) + "\n}\n")
