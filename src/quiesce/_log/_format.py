"""The on-disk record format shared by both durable sinks.

A record is :meth:`LogRecord.to_dict` serialized as compact, ASCII-only JSON
(``ensure_ascii`` escapes every non-ASCII character, lone surrogates
included, so any ``str`` the buffer accepted can be written and read back
exactly). It is strict JSON: a non-finite float (in an entry's ``meta``, say)
is stored as the string ``"nan"``/``"inf"``/``"-inf"``, because JSON has none
and SQLite's JSON functions refuse ``NaN``. Every record carries ``format``
(:data:`FORMAT`); a reader refuses a record, or a file, from a newer format
with :class:`LogFormatError` instead of guessing at fields it does not know.

Format 1 record fields (``LogRecord``): ``format``, ``seq`` (0, 1, 2, ... with
no gap: the record's index in the log), ``time`` (UNIX seconds, float),
``op`` (``append``, ``mark``, ``prune``, ``edit``, ``remove``, ``refuse``,
``escalate``), ``version`` (the version it published, or ``null``), ``ids``,
``actor``, ``reason``, ``turn``, ``outcome`` and ``detail`` (JSON object: the
full effect of the operation — entries with their order keys, marks, staged
groups, tombstones — which is what recovery replays). The core writes
``detail`` (``_core/buffer.py``) and replays it (``_core/replay.py``); its
main keys, by ``op``:

=========  ==============================================================
append     ``entry`` (``Entry.to_dict``), ``key`` (order key), ``override``
mark       nothing: ``ids``, ``reason``, ``turn``, ``version`` say it all
prune      ``marks`` ``[[id, reason, turn]]``, ``staged``
           ``[[group, ids, grace version, staged version]]``, ``outcomes``
edit       ``plan``, ``rewrites``, ``inserted``, ``keys``, ``marks``,
           ``staged``, ``rationale`` (the rationale's bytes, kept outside
           the window); a refused edit (``version`` null): ``refusals``,
           ``why``, ``escalation``
remove     ``tombstones`` (id, content_hash, reason, turn, actor, version,
           kind, key), ``gids`` (the staged groups it settles), ``refused``
refuse     ``request``, ``tombstone`` (a refused re-admission)
escalate   ``kind``, ``data``
=========  ==============================================================

Every op may carry ``refusals`` (a list of :class:`Refusal` values) for the
counters.

This module imports the core only; it has no event-loop import.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from enum import Enum
from json.encoder import encode_basestring_ascii
from typing import Any, Literal

from .._core.errors import LogFormatError
from .._core.records import FORMAT, LogRecord

__all__ = [
    "APPLICATION_ID",
    "FORMAT",
    "JSONL_TAG",
    "OPS",
    "SQLITE_MAGIC",
    "check_log_format",
    "check_sequence",
    "decode_record",
    "encode_json",
    "encode_record",
    "fsync_dir",
    "install",
    "sniff",
    "temp_name",
]

#: ``PRAGMA application_id`` of a quiesce SQLite log (ASCII ``QUIE``).
APPLICATION_ID = int.from_bytes(b"QUIE", "big")
#: The first 16 bytes of every SQLite 3 database file.
SQLITE_MAGIC = b"SQLite format 3\x00"
#: The value of the ``"quiesce"`` key in the header line of a JSONL log.
JSONL_TAG = "edit-log"
#: Every operation a format-1 record may name.
OPS = (
    "append",
    "mark",
    "prune",
    "edit",
    "tombstone",
    "remove",
    "refuse",
    "escalate",
    "checkpoint",
)

_FIELDS = frozenset(LogRecord._fields)


def _jsonable(value: object) -> Any:
    """``json.dumps`` fallback: a record's ``detail`` is meant to be JSON-ready,
    but one odd value (a set, an enum, a custom object in escalation data)
    must not make every later write fail."""
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, set | frozenset):
        return sorted(value, key=repr)
    if isinstance(value, Enum):
        return value.value
    return repr(value)


_ENCODER = json.JSONEncoder(
    separators=(",", ":"), ensure_ascii=True, allow_nan=False, default=_jsonable
)
_NONE = type(None)


def _finite(value: Any, path: frozenset[int] = frozenset()) -> Any:
    """``value`` with non-finite floats as strings and cycles cut: JSON has no
    NaN (SQLite's JSON functions and other readers reject it), and one odd
    value must not jam the log."""
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, Mapping | list | tuple):
        if id(value) in path:
            return "<cycle>"
        inner = path | {id(value)}
        if isinstance(value, Mapping):
            return {k: _finite(v, inner) for k, v in value.items()}
        return [_finite(v, inner) for v in value]
    return value


def encode_json(value: Any) -> str:
    """Compact, strict, ASCII JSON of any value (the general path)."""
    try:
        return _ENCODER.encode(value)
    except ValueError:  # NaN or infinity, or a cycle
        return _ENCODER.encode(_finite(value))


def _encode_generic(record: LogRecord) -> str:
    return encode_json(record.to_dict())


def _opt_str(value: str | None) -> str:
    return "null" if value is None else encode_basestring_ascii(value)


def encode_record(record: LogRecord) -> str:
    """One record as one line of ASCII JSON (no newline inside). O(size).

    The output is byte-for-byte what ``json.dumps(record.to_dict(),
    separators=(",", ":"), ensure_ascii=True)`` gives (a test checks it) —
    except that JSON has no NaN or infinity: a non-finite float (say, in an
    entry's ``meta``) is stored as the string ``"nan"``, ``"inf"`` or
    ``"-inf"``, and a reference cycle as ``"<cycle>"``. Otherwise
    the fixed fields are formatted directly and ``detail`` goes through the
    encoder only when it is not empty. Why: the group-commit thread encodes
    every record the mark fast path makes, and under the GIL its cost is
    taken from the markers; a mark record has an empty ``detail``.
    """
    ids = record.ids
    version = record.version
    turn = record.turn
    t = record.time
    if (
        type(ids) is not tuple
        or type(record.seq) is not int
        or type(record.format) is not int
        or type(t) is not float
        or not math.isfinite(t)
        or type(version) not in (int, _NONE)
        or type(turn) not in (int, _NONE)
        or type(record.op) is not str
        or type(record.outcome) is not str
        or type(record.actor) not in (str, _NONE)
        or type(record.reason) not in (str, _NONE)
        or not all(type(i) is str for i in ids)
    ):
        return _encode_generic(record)
    detail = record.detail
    return (
        f'{{"format":{record.format},"seq":{record.seq},"time":{float.__repr__(t)},'
        f'"op":{encode_basestring_ascii(record.op)},'
        f'"version":{"null" if version is None else version},'
        f'"ids":[{",".join(map(encode_basestring_ascii, ids))}],'
        f'"actor":{_opt_str(record.actor)},"reason":{_opt_str(record.reason)},'
        f'"turn":{"null" if turn is None else turn},'
        f'"outcome":{encode_basestring_ascii(record.outcome)},'
        f'"detail":{encode_json(dict(detail)) if detail else "{}"}}}'
    )


def decode_record(obj: object, where: str) -> LogRecord:
    """Validate and rebuild a record; ``where`` names it in errors.

    Raises :class:`LogFormatError` for a record from a newer format (first, so
    that a newer writer's extra fields are reported as such) or a malformed one.
    """
    if not isinstance(obj, dict):
        raise LogFormatError(f"{where} is not a log record (a JSON object)")
    fmt = obj.get("format")
    if type(fmt) is not int or fmt < 1:
        raise LogFormatError(f"{where} has no valid format field")
    if fmt > FORMAT:
        raise LogFormatError(
            f"{where} has record format {fmt}; this quiesce reads formats up to {FORMAT} "
            f"(upgrade quiesce to read it)"
        )
    missing = _FIELDS - obj.keys()
    if missing:
        raise LogFormatError(f"{where} lacks field(s) {', '.join(sorted(missing))}")
    if obj["op"] not in OPS:
        raise LogFormatError(f"{where} has unknown op {obj['op']!r}")
    if not isinstance(obj["detail"], dict) or not isinstance(obj["ids"], list):
        raise LogFormatError(f"{where} has a malformed ids or detail field")
    if not all(type(i) is str for i in obj["ids"]):
        raise LogFormatError(f"{where} has a non-string id")
    try:
        return LogRecord.from_dict(obj)
    except (KeyError, TypeError, ValueError) as exc:
        raise LogFormatError(f"{where} is malformed: {exc!r}") from exc


def check_log_format(path: str, fmt: int) -> None:
    """Refuse a log whose (header) format is newer than this code reads."""
    if fmt > FORMAT:
        raise LogFormatError(
            f"{path} is a format {fmt} log; this quiesce reads formats up to {FORMAT} "
            f"(upgrade quiesce to read it)"
        )


def check_sequence(records: list[LogRecord], where: str) -> None:
    """Every record's ``seq`` is its index: the log has no gap and no repeat."""
    for index, rec in enumerate(records):
        if rec.seq != index:
            raise LogFormatError(f"{where}: record {index} has seq {rec.seq} (a gap or a repeat)")


def sniff(path: str) -> Literal["sqlite", "jsonl", "empty"]:
    """What ``path`` holds, judged by content alone: a SQLite database, a JSONL
    quiesce log, or nothing (an empty file). Raises :class:`LogFormatError`
    for anything else and ``FileNotFoundError`` if it does not exist. Reads at
    most the first line; writes nothing."""
    with open(path, "rb") as f:
        head = f.read(len(SQLITE_MAGIC))
        if not head:
            return "empty"
        if head == SQLITE_MAGIC:
            return "sqlite"
        first = head + f.readline(1 << 20)
    try:
        obj = json.loads(first)
    except ValueError:
        obj = None
    if isinstance(obj, dict) and obj.get("quiesce") == JSONL_TAG:
        return "jsonl"
    raise LogFormatError(f"{path} is not a quiesce edit log (neither SQLite nor quiesce JSONL)")


def fsync_dir(path: str) -> None:
    """Make a rename or a new file in ``path``'s directory durable (POSIX)."""
    directory = os.path.dirname(os.path.abspath(path))
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # pragma: no cover - e.g. Windows, where directories cannot be opened
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover - some filesystems refuse fsync on a directory
        pass
    finally:
        os.close(fd)


def install(tmp: str, path: str) -> None:
    """Put the fully written and synced file ``tmp`` at ``path`` atomically:
    a log file either does not exist or is complete (never half-initialized).

    A missing ``path`` is linked (so a concurrent creator's file is never
    clobbered); an existing empty file is replaced. ``tmp`` is removed.
    """
    try:
        try:
            os.link(tmp, path)
        except FileExistsError:
            if os.path.getsize(path) == 0:
                os.replace(tmp, path)
        except OSError:  # pragma: no cover - filesystems without hard links
            if not os.path.exists(path) or os.path.getsize(path) == 0:
                os.replace(tmp, path)
        fsync_dir(path)
    finally:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass


def temp_name(path: str) -> str:
    """A unique sibling of ``path`` for building a new log before installing it."""
    directory, name = os.path.split(os.path.abspath(path))
    return os.path.join(directory, f".{name}.{os.getpid()}.{os.urandom(4).hex()}.init")
