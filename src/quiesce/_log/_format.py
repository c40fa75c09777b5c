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
``op`` (one of :class:`~quiesce._core.wire.Op`), ``version`` (the version it
published, or ``null``), ``ids``, ``actor``, ``reason``, ``turn``,
``outcome`` and ``detail`` (JSON object: the full effect of the operation,
which is what recovery replays). What ``detail`` holds for each op is the
record schema's business, not this module's: one builder and one parser per
kind in :mod:`quiesce._core.wire` (and ``docs/design.md``, record schema).
This module only turns records into bytes and back.

Reading is strict and total. :func:`decode_json` accepts strict JSON only (no
``NaN`` literals) at any nesting depth: a document too deep for the C parser
at the current stack depth is parsed again by an iterative parser, so
recovery never raises ``RecursionError``, however deep the caller's stack or
the record. :func:`decode_record` checks every field's type and range, so a
crafted record raises :class:`LogFormatError` naming it, never
``OverflowError``, ``IndexError`` or ``TypeError``. Writing is total too:
:func:`encode_json` never raises for any value reachable from a record (too
deep for the C encoder: an iterative encoder with the same output; a dict key
JSON cannot hold, a non-finite float, a cycle or an object without a JSON
form: a documented string stand-in), so one odd value never wedges the log.

This module imports the core only; it has no event-loop import.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import re
import stat
from collections.abc import Generator, Mapping, Sequence
from enum import Enum
from json.decoder import scanstring  # type: ignore[attr-defined]
from json.encoder import encode_basestring_ascii
from typing import Any, Literal

from .._core.errors import InvalidArgument, InvalidType, LogFormatError, LogLocked
from .._core.records import FORMAT, LogRecord
from .._core.wire import OPS as _OPS

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no advisory locks
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "APPLICATION_ID",
    "FORMAT",
    "JSONL_TAG",
    "MAX_DEPTH",
    "OPS",
    "SQLITE_MAGIC",
    "check_log_format",
    "check_sequence",
    "decode_json",
    "decode_record",
    "encode_batch",
    "encode_json",
    "encode_record",
    "fsync_dir",
    "install",
    "lock_exclusive",
    "log_path",
    "records_before",
    "sniff",
    "temp_name",
]

#: ``PRAGMA application_id`` of a quiesce SQLite log (ASCII ``QUIE``).
APPLICATION_ID = int.from_bytes(b"QUIE", "big")
#: The first 16 bytes of every SQLite 3 database file.
SQLITE_MAGIC = b"SQLite format 3\x00"
#: The value of the ``"quiesce"`` key in the header line of a JSONL log.
JSONL_TAG = "edit-log"
#: Every operation a format-1 record may name (:class:`~quiesce._core.wire.Op`).
OPS = _OPS

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
    return _repr(value)


def _repr(value: object) -> str:
    try:
        return repr(value)
    except Exception:  # a hostile __repr__ must not jam the log either
        return f"<unrepresentable {type(value).__name__}>"


_ENCODER = json.JSONEncoder(
    separators=(",", ":"), ensure_ascii=True, allow_nan=False, default=_jsonable
)
_NONE = type(None)


def _scalar(value: Any) -> str | None:
    """The JSON text of a scalar (as the C encoder writes it, but with
    non-finite floats as strings), or ``None`` for a container."""
    if isinstance(value, str):
        return encode_basestring_ascii(value)
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return int.__repr__(value)
    if isinstance(value, float):
        text = float.__repr__(value)
        return text if math.isfinite(value) else encode_basestring_ascii(text)
    return None


def _key(key: Any) -> str:
    """A dict key as JSON text: what ``json`` does for str, int, float, bool
    and ``None``; any other key (a tuple, say) becomes its ``repr``."""
    if isinstance(key, str):
        return encode_basestring_ascii(key)
    if isinstance(key, bool) or key is None:
        return f'"{_scalar(key)}"'
    if isinstance(key, int | float):
        return encode_basestring_ascii(
            float.__repr__(key) if isinstance(key, float) else int.__repr__(key)
        )
    return encode_basestring_ascii(_repr(key))


#: The deepest nesting a stored record may have: SQLite's JSON functions
#: (``json_valid`` in the table's CHECK, ``json_extract`` in its columns)
#: refuse deeper documents (the limit is 1000 in SQLite >= 3.45, 2000 before).
#: A container nested deeper is stored as the string ``"<nested too deep>"``.
#: Entries are refused far earlier (:class:`~quiesce.Entry` has its own limit),
#: so only free-form data (escalation ``data``) can reach it.
MAX_DEPTH = 1000

_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_BRACKET = re.compile(r"[\[\]{}]")


def _too_deep(text: str) -> bool:
    """Whether the JSON ``text`` nests deeper than :data:`MAX_DEPTH`. O(1)
    for short texts (depth needs two bytes a level), O(len) in C for texts
    with few brackets, O(len) in Python only for texts with many."""
    if len(text) < 2 * MAX_DEPTH or text.count("[") + text.count("{") <= MAX_DEPTH:
        return False
    brackets = _BRACKET.findall(_STRING.sub("", text))
    if len(brackets) < 2 * MAX_DEPTH:
        return False
    depth = 0
    for b in brackets:
        depth += 1 if b in "[{" else -1
        if depth > MAX_DEPTH:
            return True
    return False


def _encode_iterative(value: Any, max_depth: int | None = None) -> str:
    """Compact ASCII JSON of ``value`` with an explicit stack: any depth, any
    value. Same text as the C encoder for what it accepts; a non-finite
    float becomes ``"nan"``/``"inf"``/``"-inf"``, a cycle ``"<cycle>"``, an
    unknown key its ``repr``, an unknown object ``_jsonable``'s form, and a
    container nested deeper than ``max_depth`` ``"<nested too deep>"``.
    O(size)."""
    out: list[str] = []
    # Each frame: (iterator over the container's items, closing bracket, id
    # on the path, whether it is a mapping); ``first`` tracks commas.
    stack: list[tuple[Any, str, int, bool]] = []
    path: set[int] = set()
    first = True
    pending: Any = value
    have = True
    while True:
        if have:
            item, have = pending, False
            for _ in range(3):  # _jsonable may give a container or a scalar
                text = _scalar(item)
                if text is not None or isinstance(item, Mapping | list | tuple):
                    break
                item = _jsonable(item)
            if text is not None:
                out.append(text)
            elif isinstance(item, Mapping | list | tuple):
                if id(item) in path:
                    out.append('"<cycle>"')
                elif max_depth is not None and len(stack) >= max_depth:
                    out.append('"<nested too deep>"')
                else:
                    is_map = isinstance(item, Mapping)
                    out.append("{" if is_map else "[")
                    path.add(id(item))
                    it = iter(list(item.items()) if isinstance(item, Mapping) else list(item))
                    stack.append((it, "}" if is_map else "]", id(item), is_map))
                    first = True
            else:  # pragma: no cover - _jsonable always ends in a scalar or container
                out.append(encode_basestring_ascii(_repr(item)))
        if not stack:
            return "".join(out)
        it, close, ident, is_map = stack[-1]
        nxt: Any = next(it, _END)
        if nxt is _END:
            stack.pop()
            path.discard(ident)
            out.append(close)
            first = False
            continue
        if not first:
            out.append(",")
        first = False
        if is_map:
            out.append(_key(nxt[0]) + ":")
            pending = nxt[1]
        else:
            pending = nxt
        have = True


_END = object()


def encode_json(value: Any) -> str:
    """Compact, strict, ASCII JSON of any value (the general path). Never
    raises for a value a record can hold: the C encoder first, and the
    iterative encoder (:func:`_encode_iterative`) for what it refuses — NaN,
    a cycle, a key JSON cannot hold, or nesting too deep for the stack."""
    try:
        return _ENCODER.encode(value)
    except (ValueError, TypeError, RecursionError):
        return _encode_iterative(value)


def _encode_generic(record: LogRecord) -> str:
    return encode_json(record.to_dict())


def encode_record(record: LogRecord) -> str:
    """One record as one line of ASCII JSON (no newline inside), nested at
    most :data:`MAX_DEPTH` deep. O(size). Never raises for a record whose
    fields are what :class:`LogRecord` declares (see :func:`encode_json`)."""
    text = _encode_fields(record)
    if _too_deep(text):
        text = _encode_iterative(record.to_dict(), MAX_DEPTH)
    return text


def encode_batch(records: Sequence[LogRecord]) -> tuple[list[str], ValueError | None]:
    """Encode a sink's batch record by record: the lines of the longest
    prefix that encodes, and the error naming the first record that does not
    (or ``None``). A sink writes the prefix and then raises the error, so one
    record that cannot be encoded never holds back the records before it
    (and :func:`encode_json` is total, so in practice none fails). Raises
    ``ValueError`` at once for a batch that is empty or not contiguous, and
    the error itself when not even the first record encodes (the prefix is
    never empty)."""
    if not records:
        raise ValueError("empty batch")
    expected = records[0].seq
    for rec in records:
        if rec.seq != expected:
            raise ValueError(f"batch is not contiguous: seq {rec.seq} where {expected} was due")
        expected += 1
    texts: list[str] = []
    for rec in records:
        try:
            texts.append(encode_record(rec))
        except Exception as exc:
            failure = ValueError(
                f"log record {rec.seq} ({rec.op}) cannot be encoded: {exc!r}; "
                f"the {len(texts)} record(s) before it in the batch were written"
            )
            if not texts:
                raise failure from None
            return texts, failure
    return texts, None


def _opt_str(value: str | None) -> str:
    return "null" if value is None else encode_basestring_ascii(value)


def _encode_fields(record: LogRecord) -> str:
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


_WS = re.compile(r"[ \t\n\r]*")
_NUMBER = re.compile(r"(-?(?:0|[1-9][0-9]*))(\.[0-9]+)?([eE][-+]?[0-9]+)?")
_LITERALS = {"true": True, "false": False, "null": None}


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not strict JSON")


def _member_key(text: str, pos: int) -> tuple[str, int]:
    """An object member's key and its colon at ``pos``: the key and where
    its value starts."""
    if text[pos : pos + 1] != '"':
        raise ValueError(f"expected a key at {pos}")
    key, pos = scanstring(text, pos + 1, True)
    pos = _WS.match(text, pos).end()  # type: ignore[union-attr]
    if text[pos : pos + 1] != ":":
        raise ValueError(f"expected ':' at {pos}")
    return key, _WS.match(text, pos + 1).end()  # type: ignore[union-attr]


_DECODER = json.JSONDecoder(parse_constant=_refuse_constant)


def _loads_iterative(text: str) -> Any:
    """Parse strict JSON with an explicit stack (any nesting depth). O(size).
    Raises ``ValueError`` for anything that is not exactly one JSON value."""
    stack: list[Any] = []  # open containers; a dict frame is [dict, key or None]
    pos = _WS.match(text, 0).end()  # type: ignore[union-attr]
    n = len(text)
    while True:
        if pos >= n:
            raise ValueError("unexpected end of JSON")
        ch = text[pos]
        value: Any
        opened = False
        if ch == "{" or ch == "[":
            container: Any = {} if ch == "{" else []
            pos = _WS.match(text, pos + 1).end()  # type: ignore[union-attr]
            close = "}" if ch == "{" else "]"
            if pos < n and text[pos] == close:
                value, pos = container, pos + 1
            else:
                stack.append([container, None])
                opened = True
        elif ch == '"':
            value, pos = scanstring(text, pos + 1, True)
        else:
            m = _NUMBER.match(text, pos)
            if m is not None and m.end() > pos:
                integer, frac, exp = m.groups()
                value = float(integer + (frac or "") + (exp or "")) if frac or exp else int(integer)
                pos = m.end()
            else:
                for lit, lit_value in _LITERALS.items():
                    if text.startswith(lit, pos):
                        value, pos = lit_value, pos + len(lit)
                        break
                else:
                    raise ValueError(f"unexpected {ch!r} at {pos}")
        if opened:
            frame = stack[-1]
            if isinstance(frame[0], dict):
                frame[1], pos = _member_key(text, pos)
            continue
        # a complete value: put it in its container, then close what ends here
        while True:
            pos = _WS.match(text, pos).end()  # type: ignore[union-attr]
            if not stack:
                if pos != n:
                    raise ValueError(f"extra data at {pos}")
                return value
            frame = stack[-1]
            container = frame[0]
            if isinstance(container, dict):
                container[frame[1]] = value
                close = "}"
            else:
                container.append(value)
                close = "]"
            ch = text[pos : pos + 1]
            if ch == ",":
                pos = _WS.match(text, pos + 1).end()  # type: ignore[union-attr]
                if close == "}":
                    frame[1], pos = _member_key(text, pos)
                break
            if ch != close:
                raise ValueError(f"expected ',' or {close!r} at {pos}")
            stack.pop()
            value, pos = container, pos + 1


def decode_json(data: str | bytes) -> Any:
    """Parse one strict JSON document (no ``NaN``/``Infinity`` literals) at
    any nesting depth. Raises ``ValueError`` (``UnicodeDecodeError``
    included) for anything else; never ``RecursionError``. O(size)."""
    text = data.decode("utf-8") if isinstance(data, bytes) else data
    try:
        return _DECODER.decode(text)
    except RecursionError:
        return _loads_iterative(text)


def _int(value: object, low: int = 0) -> bool:
    return type(value) is int and value >= low


def decode_record(obj: object, where: str) -> LogRecord:
    """Validate and rebuild a record; ``where`` names it in errors.

    Every field is checked for type and range (``seq`` and ``turn``
    non-negative ints, ``version`` a positive int or null, ``time`` a finite
    number, ids, actor, reason and outcome strings, ``detail`` an object),
    so what comes back is safe to replay and to show. Raises
    :class:`LogFormatError` for a record from a newer format (first, so that a
    newer writer's extra fields are reported as such) or a malformed one.
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
    if type(obj["op"]) is not str or obj["op"] not in OPS:
        raise LogFormatError(f"{where} has unknown op {_repr(obj['op'])[:80]}")
    if not isinstance(obj["detail"], dict) or not isinstance(obj["ids"], list):
        raise LogFormatError(f"{where} has a malformed ids or detail field")
    if not all(type(i) is str for i in obj["ids"]):
        raise LogFormatError(f"{where} has a non-string id")
    t = obj["time"]
    bad = [
        name
        for name, ok in (
            ("seq", _int(obj["seq"])),
            ("time", type(t) in (int, float) and (type(t) is int or math.isfinite(t))),
            ("version", obj["version"] is None or _int(obj["version"], 1)),
            ("turn", obj["turn"] is None or _int(obj["turn"])),
            ("actor", obj["actor"] is None or type(obj["actor"]) is str),
            ("reason", obj["reason"] is None or type(obj["reason"]) is str),
            ("outcome", type(obj["outcome"]) is str),
        )
        if not ok
    ]
    if not bad and type(t) is int:
        try:
            t = float(t)
        except OverflowError:
            bad.append("time")
    if bad:
        raise LogFormatError(f"{where} has an invalid {', '.join(bad)} field")
    return LogRecord(
        obj["seq"],
        float(t),
        obj["op"],
        obj["version"],
        tuple(obj["ids"]),
        obj["actor"],
        obj["reason"],
        obj["turn"],
        obj["outcome"],
        obj["detail"],
        fmt,
    )


def log_path(path: object, what: str) -> str:
    """``path`` as a ``str``, checked at the call: :class:`InvalidType` for
    something that is not a path, :class:`LogFormatError` for an existing
    directory, FIFO, socket or device (reading a FIFO would hang)."""
    try:
        p = os.fspath(path)  # type: ignore[call-overload]
    except TypeError:
        raise InvalidType(
            f"{what} path must be a str or os.PathLike, not {type(path).__name__}"
        ) from None
    if not isinstance(p, str):
        raise InvalidType(f"{what} path must be a str or os.PathLike[str], not bytes")
    try:
        mode = os.stat(p).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return p
    except ValueError as exc:  # an embedded NUL
        raise InvalidArgument(f"{what} path is not a valid path: {exc}") from None
    if stat.S_ISDIR(mode):
        raise LogFormatError(f"{p} is a directory, not a quiesce edit log")
    if not stat.S_ISREG(mode):
        raise LogFormatError(f"{p} is not a regular file, not a quiesce edit log")
    return p


def lock_exclusive(fd: int, path: str, what: str) -> None:
    """Take the one-writer lock of a log file (an exclusive ``flock`` held
    for the descriptor's life), or raise :class:`LogLocked` at once: never
    waits. No-op where there are no advisory locks (Windows)."""
    if fcntl is None:  # pragma: no cover - Windows
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise LogLocked(
            f"{path} is open by another {what} (in this or another process): "
            f"one writer per log file"
        ) from None


def check_log_format(path: str, fmt: int, newest: int = FORMAT) -> None:
    """Refuse a log whose (header) format is newer than ``newest``, the
    newest this code reads."""
    if fmt > newest:
        raise LogFormatError(
            f"{path} is a format {fmt} log; this quiesce reads formats up to {newest} "
            f"(upgrade quiesce to read it)"
        )


def check_sequence(records: list[LogRecord], where: str) -> None:
    """Every record's ``seq`` is its index: the log has no gap and no repeat."""
    for index, rec in enumerate(records):
        if rec.seq != index:
            raise LogFormatError(f"{where}: record {index} has seq {rec.seq} (a gap or a repeat)")


def records_before(records: Generator[LogRecord, None, None], stop: int) -> list[LogRecord]:
    """The records of ``records``, a stream in ``seq`` order (a closed
    sink's read-back through :func:`~.sqlite.stream_sqlite` or
    :func:`~.jsonl.stream_jsonl`), before the first one with ``seq >= stop``.
    The stream is closed on return and on any exception, including one
    raised here while it is suspended: it holds a connection or a file
    descriptor, which must not wait for the garbage collector (a raised
    exception's traceback keeps this frame, and so the stream, alive).
    O(records read); the first record at or past ``stop`` is read and
    dropped."""
    try:
        return list(itertools.takewhile(lambda rec: rec.seq < stop, records))
    finally:
        records.close()


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
        obj = decode_json(first)
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
