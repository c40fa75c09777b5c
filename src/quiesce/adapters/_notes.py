"""Notes: the one-line ``[quiesce: ...]`` texts a renderer writes, and
recognising a rendered message when a framework sends it back.

What it keeps true (the format is in :mod:`quiesce.adapters._common`): a
note is always exactly one line starting :data:`NOTE_PREFIX` — every field
in it is escaped (``escape_field``), so a reason cannot close it early or
forge another — and text that is not a note cannot pass for one
(:func:`escape_text`); :func:`recognise` undoes exactly what a renderer
added (stale notes, escapes, note parts), so a rendered message fed back
is the message it was. The removal note is bounded (``names``, ``limit``)
however long the history. Signed blocks are never touched.
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .._core.entry import result_id
from .._core.errors import InvalidArgument, InvalidType
from .._core.notes import escape_field
from .._core.records import Mark, Tombstone
from .._core.version import Version
from ._keys import fingerprint

__all__ = [
    "NOTE_LIMIT",
    "NOTE_NAMES",
    "NOTE_PREFIX",
    "annotated",
    "check_note_options",
    "escape_blocks",
    "escape_text",
    "is_note",
    "missing_result_note",
    "recognise",
    "remember_rendered",
    "removal_note",
    "rendered_ids",
    "stale_note",
    "tomb_note",
]

#: How every quiesce note starts.
NOTE_PREFIX = "[quiesce:"


_IMITATION = re.compile(r"(^|[\n\r\x0b\x0c\x85\u2028\u2029])([ \t]*)\[(?=quiesce)", re.IGNORECASE)


def escape_text(text: str) -> str:
    """Text that is not a note, made unable to pass for one (a backslash before
    a ``[quiesce`` that starts a line). O(len(text))."""
    if "[" not in text:
        return text
    return _IMITATION.sub(r"\1\2\\[", text)


def stale_note(mark: Mark) -> str:
    when = f"turn {mark.turn}" if mark.turn is not None else f"version {mark.version}"
    return f"{NOTE_PREFIX} stale at {when}: {escape_field(mark.reason)}]"


def tomb_note(t: Tombstone) -> str:
    when = f"turn {t.turn}" if t.turn is not None else f"version {t.version}"
    by = f" by {escape_field(t.actor)}" if t.actor else ""
    return f"{NOTE_PREFIX} {escape_field(t.id)} pruned at {when}{by}: {escape_field(t.reason)}]"


def missing_result_note(call_id: str, tombstones: Mapping[str, Tombstone]) -> str:
    """What stands in for a tool result that is not live: its tombstone note,
    or a note that no result was recorded (a call still in flight)."""
    tomb = tombstones.get(result_id(call_id))
    if tomb is not None:
        return tomb_note(tomb)
    return f"{NOTE_PREFIX} no result recorded for {escape_field(call_id)}]"


#: How many removals the removal note names (the newest), by default.
NOTE_NAMES = 5

#: The most characters the removal note takes, by default.
NOTE_LIMIT = 2_000


def check_note_options(names: object, limit: object) -> None:
    """``note_names`` and ``note_limit`` must be ints ≥ 0 (``InvalidArgument``
    or ``InvalidType`` otherwise)."""
    for value, what in ((names, "note_names"), (limit, "note_limit")):
        if type(value) is not int:
            raise InvalidType(f"{what} must be an int, not {type(value).__name__}")
        if value < 0:
            raise InvalidArgument(f"{what} must be >= 0, not {value!r}")


def removal_note(
    tombstones: Mapping[str, Tombstone],
    skip: Iterable[str] = (),
    *,
    names: int = NOTE_NAMES,
    limit: int = NOTE_LIMIT,
) -> str | None:
    """The removal note: a heading, then the ``names`` newest removals by
    name (oldest of them first), then a count of the others
    (``[quiesce: and 37 earlier removals]``); never longer than ``limit``
    characters (names are dropped, then the count, then the heading alone
    is cut to nothing: ``None``). ``None`` if there is nothing to list.
    O(tombstones · log names): the window it is rendered into stays bounded
    however long the history."""
    skipped = set(skip)
    total = len(tombstones) - sum(1 for i in skipped if i in tombstones)
    if total <= 0:
        return None
    shown = heapq.nlargest(
        names,
        (t for t in tombstones.values() if t.id not in skipped),
        key=lambda t: (t.version, t.id),
    )
    shown.reverse()
    heading = f"{NOTE_PREFIX} removed from this context]"
    while True:
        lines = [heading, *map(tomb_note, shown)]
        rest = total - len(shown)
        if rest:
            lines.append(f"{NOTE_PREFIX} and {rest} earlier removal{'s' if rest > 1 else ''}]")
        note = "\n".join(lines)
        if len(note) <= limit:
            return note
        if shown:
            shown.pop(0)
        else:
            return heading if len(heading) <= limit else None


def annotated(text: str, mark: Mark | None) -> str:
    """``text`` (escaped) with a stale note line in front when marked."""
    text = escape_text(text)
    return text if mark is None else f"{stale_note(mark)}\n{text}"


#: Block types whose ``text`` field is prose a note could hide in.
TEXT_TYPES = frozenset({"text", "input_text", "output_text"})


def escape_blocks(value: Any) -> Any:
    """A thawed JSON value with the ``text`` of every text part escaped
    (:func:`escape_text`); other values unchanged."""
    if isinstance(value, str):
        return escape_text(value)
    if isinstance(value, list):
        return [escape_blocks(v) for v in value]
    if isinstance(value, dict) and value.get("type") in TEXT_TYPES:
        text = value.get("text")
        if isinstance(text, str):
            return {**value, "text": escape_text(text)}
    return value



# -- recognising what quiesce rendered ----------------------------------------

_NOTE_LINE = re.compile(r"\[quiesce:(?:[^\]\\\n]|\\.)*\]")
_STALE_LINE = re.compile(r"\[quiesce: stale at (?:[^\]\\\n]|\\.)*\](?:\n|$)")
_UNESCAPE = re.compile(r"(^|[\n\r\x0b\x0c\x85\u2028\u2029])([ \t]*)\\\[(?=quiesce)", re.IGNORECASE)

#: The fields that hold text a renderer may have noted or escaped.
_TEXT_FIELDS = ("content", "text", "output")


def is_note(text: str) -> bool:
    """``text`` is quiesce's own: every line of it is a note."""
    return bool(text) and all(_NOTE_LINE.fullmatch(line) for line in text.split("\n"))


def _unnote_text(text: str) -> str | None:
    if is_note(text):
        return None
    m = _STALE_LINE.match(text)
    if m is not None:
        text = text[m.end() :]
    if text.endswith("]") and NOTE_PREFIX in text:
        # a note paragraph after the text (Anthropic's removal note)
        head, sep, tail = text.rpartition("\n\n" + NOTE_PREFIX)
        if sep and is_note(NOTE_PREFIX + tail):
            text = head
    if "\\[" in text:
        text = _UNESCAPE.sub(r"\1\2[", text)
    return text


def _unnote(value: Any) -> Any:
    """``value`` with quiesce's notes taken out and its escapes undone;
    ``None`` if it was nothing but notes."""
    if isinstance(value, str):
        return _unnote_text(value)
    if isinstance(value, list | tuple):
        parts = []
        for part in value:
            if isinstance(part, Mapping):
                part = _unnote_fields(part)
                if part is None:
                    continue
            parts.append(part)
        return parts if parts or not value else None
    return value


def _unnote_fields(part: Mapping[str, Any]) -> Mapping[str, Any] | None:
    out: dict[str, Any] | None = None
    for name in _TEXT_FIELDS:
        value = part.get(name)
        if isinstance(value, str | list | tuple):
            new = _unnote(value)
            if new is None:
                return None  # a note part (or a stand-in result)
            if new != value:
                if out is None:
                    out = dict(part)
                out[name] = new
    return part if out is None else out


def recognise(message: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """A message given back from a rendered window, as it was before quiesce
    rendered it: stale notes in front of its text removed, escaped
    ``\\[quiesce`` lines undone, note parts dropped; ``None`` for a message
    that is nothing but notes (the removal list, a stand-in tool result).
    Text a user wrote that is itself nothing but note lines is taken for one
    too: sync cannot tell it apart (append it with ``append_messages``).
    O(size of the message)."""
    return _unnote_fields(message)


#: Messages a renderer made that the framework does not know as one message
#: (Anthropic's turns merged after pruning), by adapter and fingerprint of
#: their recognised form: the entries they show. Bounded; process-wide.
_RENDERED: dict[tuple[str, str], tuple[str, ...]] = {}
RENDERED_CACHE = 10_000


def remember_rendered(api: str, message: Mapping[str, Any], ids: Sequence[str]) -> None:
    """Remember that ``message``, rendered by ``api``, shows the entries
    ``ids``: fed back to :func:`sync_history` it is those entries, not a
    new message. O(size of the message)."""
    form = recognise(message)
    if form is None or not ids:
        return
    if len(_RENDERED) >= RENDERED_CACHE:
        _RENDERED.clear()
    _RENDERED[(api, fingerprint(form))] = tuple(ids)


def rendered_ids(api: str, head: Version, form: Mapping[str, Any]) -> tuple[str, ...] | None:
    """The entries a rendered message (its recognised ``form``) shows, if
    :func:`remember_rendered` saw it and ``head`` knows them all."""
    if not _RENDERED:
        return None
    ids = _RENDERED.get((api, fingerprint(form)))
    if ids is None:
        return None
    live, tombs = head.live, head.tombs.by_id
    return ids if all(i in live or i in tombs for i in ids) else None

