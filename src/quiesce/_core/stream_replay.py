"""The durable forms of open streams: what a checkpoint keeps of an open
entry and what a replay of the log rebuilds (:mod:`.checkpoint`,
:mod:`.replay`, :mod:`.verify`).

What it keeps true: a replayed stream's text is exactly the text its
records logged, in order, each piece continuing the one before
(:func:`replay_text` refuses a gap or an overlap), and a finished entry
agrees with the hash (and, for a guarded entry, the whole entry) its close
record carries; an open entry's durable form holds only its *logged*
prefix, what a replay of the log gives. Nothing here publishes a version
or takes a lock: the callers hold the write lock or own the state.

Cancellation: nothing here awaits.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .entry import Entry, check_utf8
from .state import BufferState
from .stream import _ABORTED, _CLOSED, _REFUSED_KINDS, OpenEntry, StreamWriter, _open_entry

__all__ = [
    "durable_dict",
    "reopen",
    "reopen_entry",
    "replay_finish",
    "replay_text",
    "stream_header",
]


def durable_dict(st: Any, entry: Entry) -> dict[str, Any]:
    """The JSON form of a live entry as the log holds it: for an open
    entry, its header with the *logged* prefix as body and ``"streaming":
    true`` (what a checkpoint keeps, and what a replay of the log gives);
    any other entry's :meth:`Entry.to_dict`. O(len(body))."""
    if not entry.streaming:
        return entry.to_dict()
    streams: dict[str, StreamWriter] = st.streams
    w = streams.get(entry.id)
    if w is None:  # pragma: no cover - every open entry has its writer
        return entry.to_dict()
    out = w._header.to_dict()
    out["body"] = w._text.joined()[: w._logged]
    out["streaming"] = True
    return out


def reopen(st: BufferState, header: Entry, key: float, text: str) -> OpenEntry:
    """Register an open stream rebuilt from a log (a checkpoint's open
    entry, or a ``stream_open`` record) holding ``text``, all of it logged;
    returns its entry. O(len(text))."""
    w: StreamWriter = st.reopen_stream(header, key, text)
    return _open_entry(header, w._text)


def reopen_entry(w: StreamWriter) -> OpenEntry:
    """The open entry of ``w``'s text as it is now. O(1)."""
    return _open_entry(w._header, w._text)


def replay_text(w: StreamWriter, offset: object, text: object, writes: object) -> None:
    """Add a logged piece of text to a replayed stream, checking that it
    continues the text logged before and that the count of writes it
    covers is a count (raises ``ValueError`` else)."""
    if type(writes) is not int or writes < 0:
        raise ValueError(f"it covers {writes!r} writes")
    if type(offset) is not int or offset != w._logged:
        raise ValueError(f"its text starts at {offset!r}, not at {w._logged} (the logged length)")
    if type(text) is not str:
        raise ValueError(f"its text is a {type(text).__name__}, not a str")
    check_utf8(text, "its text")
    if text:
        w._text.add(text)
    w._logged = w._text.size


def replay_finish(w: StreamWriter, det: Mapping[str, Any], aborted: bool) -> Entry:
    """The finished entry a ``stream_close``/``stream_abort`` record gives,
    checked against the hash (and, for a guarded entry, the whole entry)
    it carries; marks the writer finished. Raises ``ValueError`` for a
    record that disagrees."""
    replay_text(w, det["offset"], det["text"], det.get("writes", 0))
    final = w._final(det.get("content"))
    if final.content_hash != det["content_hash"]:
        raise ValueError(f"the finished entry's hash is {final.content_hash}, not the record's")
    whole = det.get("entry")
    if whole is not None and Entry.from_dict(whole).to_dict() != final.to_dict():
        raise ValueError("the entry it carries is not the one its stream wrote")
    w._state = _ABORTED if aborted else _CLOSED
    return final


def stream_header(d: Mapping[str, Any]) -> Entry:
    """The header of a stream from its logged dict (body ignored), checked
    as ``open_stream`` checks it (``ValueError`` for a kind never streamed)."""
    header = Entry.from_dict({**d, "body": ""})
    if header.kind in _REFUSED_KINDS:
        raise ValueError(f"a {header.kind.name} is never streamed")
    return header
