"""What the chat adapters share: message grouping, roles, notes, validation helpers.

An adapter turns one chat message into one or more entries (a text part, each
tool call, each tool result) and tags them in ``meta``:

* ``role`` — the message's role (``system``, ``user``, ``assistant``, ...);
* ``msg`` — the id of the message's first entry, shared by all its entries, so
  rendering can put a message back together;
* ``form`` — how the content was written (``str`` or ``blocks``), so a
  round trip gives back the same shape;
* tool calls carry ``tool`` (the tool's name) and their arguments.

Entries made without an adapter have no ``role``: rendering gives
``INSTRUCTION`` and ``CONSTRAINT`` entries the system role and every other
kind the assistant role.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from .._core.buffer import Buffer, Snapshot
from .._core.entry import Entry, Kind
from .._core.errors import DuplicateEntry, InvalidArgument, InvalidType, ReadmissionRefused
from .._core.records import Mark, Tombstone

__all__ = [
    "Group",
    "Ids",
    "Indexed",
    "Reader",
    "admit",
    "annotated",
    "answer",
    "append_read",
    "call_entry",
    "claim_result",
    "default_role",
    "fail",
    "groups",
    "missing_result_note",
    "notes",
    "read_entries",
    "removal_note",
    "result_entry",
    "result_id",
    "shown",
    "tool_name",
]

#: An entry and the index of the message it came from.
Indexed = tuple[int, Entry]


def fail(index: int, message: str, *, type_error: bool = False) -> Exception:
    """A :class:`~quiesce.InvalidArgument` (or ``InvalidType``) naming the message."""
    text = f"message {index}: {message}"
    return InvalidType(text) if type_error else InvalidArgument(text)


def result_id(call_id: str) -> str:
    """The entry id of the result of tool call ``call_id``."""
    return f"{call_id}/result"


def default_role(entry: Entry) -> str:
    """The role of an entry: its ``meta["role"]``, else by kind."""
    role = entry.meta.get("role")
    if isinstance(role, str):
        return role
    if entry.kind in (Kind.INSTRUCTION, Kind.CONSTRAINT):
        return "system"
    if entry.kind is Kind.TOOL_OUTPUT:
        return "tool"
    return "assistant"


def shown(entry: Entry, marks: Mapping[str, Mark], *, annotate: bool) -> str:
    """The entry's body as a model should read it: verbatim, or with a
    one-line stale annotation in front. Constraints and instructions can
    never be marked, so they are always verbatim."""
    return annotated(entry.body, marks.get(entry.id) if annotate else None)


def annotated(body: str, mark: Mark | None) -> str:
    """``body`` with a one-line ``[stale at turn N: reason]`` note in front."""
    if mark is None:
        return body
    when = f" at turn {mark.turn}" if mark.turn is not None else ""
    return f"[stale{when}: {mark.reason}]\n{body}"


def missing_result_note(call_id: str, tombstones: Mapping[str, Tombstone]) -> str:
    """What stands in for a tool result that is not live: its tombstone note,
    or a note that no result was recorded (a call still in flight)."""
    tomb = tombstones.get(result_id(call_id))
    if tomb is not None:
        return tomb.note()
    return f"[no result recorded for {call_id}]"


def notes(tombstones: Mapping[str, Tombstone], skip: Iterable[str] = ()) -> list[str]:
    """One line per removal, oldest first (``[x pruned at turn 41: dump is noise]``)."""
    skipped = set(skip)
    ordered = sorted(
        (t for t in tombstones.values() if t.id not in skipped), key=lambda t: (t.version, t.id)
    )
    return [t.note() for t in ordered]


def removal_note(tombstones: Mapping[str, Tombstone], skip: Iterable[str] = ()) -> str | None:
    """The note listing the removals (see :func:`notes`), or ``None`` if none."""
    lines = notes(tombstones, skip)
    if not lines:
        return None
    return "Removed from this context (tombstones):\n" + "\n".join(lines)


@dataclass(slots=True)
class Group:
    """The entries of one message, in window order."""

    role: str
    entries: list[Entry]


def groups(entries: Sequence[Entry]) -> list[Group]:
    """Consecutive entries of one message (same ``meta["msg"]`` and role) form a
    group; an entry without ``msg`` is a group of its own. O(n)."""
    out: list[Group] = []
    last_msg: object = None
    for e in entries:
        role = default_role(e)
        msg = e.meta.get("msg")
        if out and msg is not None and msg == last_msg and out[-1].role == role:
            out[-1].entries.append(e)
        else:
            out.append(Group(role, [e]))
        last_msg = msg
    return out


def outputs_by_call(entries: Sequence[Entry]) -> dict[str, Entry]:
    """Live tool results keyed by the id of the call they answer."""
    out: dict[str, Entry] = {}
    ids = {e.id: e for e in entries}
    for e in entries:
        if e.kind is Kind.TOOL_OUTPUT:
            for ref in e.refs:
                target = ids.get(ref)
                if target is not None and target.kind is Kind.TOOL_CALL:
                    out.setdefault(ref, e)
                    break
    return out


def known_calls(snap: Snapshot) -> set[str]:
    """Ids of the live tool calls in a snapshot (results may answer them)."""
    return {e.id for e in snap if e.kind is Kind.TOOL_CALL}


def admit(buf: Buffer, indexed: Sequence[Indexed]) -> int:
    """Append entries made from messages: all are checked first against the
    head (ids unused, no tombstoned content), so a refusal names its message
    and appends nothing. Returns the head version after the last append."""
    head = buf.head()
    tombs = head.tombs
    seen: set[str] = set()
    for index, e in indexed:
        if e.id in head.live or e.id in tombs.by_id or e.id in seen:
            raise DuplicateEntry(f"message {index}: entry id {e.id!r} is already used")
        seen.add(e.id)
        tomb = tombs.matching(e.content_hash, e.key)
        if tomb is not None:
            raise ReadmissionRefused(
                f"message {index}: content matches the tombstone of {tomb.id!r} "
                f"(pruned at version {tomb.version}: {tomb.reason}); "
                "append it with an Override to re-admit it",
                tomb,
            )
    version = buf.version
    for _index, e in indexed:
        version = buf.append(e)
    return version


def check_messages(messages: object) -> Sequence[Any]:
    """``messages`` must be a list or tuple of dicts."""
    if not isinstance(messages, list | tuple):
        raise InvalidType(f"messages must be a list of dicts, not {type(messages).__name__}")
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping):
            raise fail(i, f"must be a dict, not {type(m).__name__}", type_error=True)
    return messages


def check_str(index: int, value: object, what: str) -> str:
    if not isinstance(value, str):
        raise fail(index, f"{what} must be a str, not {type(value).__name__}", type_error=True)
    return value


def check_nonempty(index: int, value: object, what: str) -> str:
    text = check_str(index, value, what)
    if not text:
        raise fail(index, f"{what} must be a non-empty str")
    return text


def check_kind(value: object, what: str) -> Kind:
    if not isinstance(value, Kind):
        raise InvalidType(f"{what} must be a Kind, not {type(value).__name__}")
    return value


class Reader(Protocol):
    """Reads messages into indexed entries, given the first text id number
    and the ids of tool calls made earlier."""

    def __call__(self, *, start: int, calls: Collection[str]) -> list[Indexed]: ...


def read_entries(
    read: Reader,
    *,
    start: int,
    calls: Collection[str],
    user_kind: object,
    assistant_kind: object,
) -> list[Entry]:
    """The body of an adapter's ``to_entries``: check the kinds, then read."""
    check_kind(user_kind, "user_kind")
    check_kind(assistant_kind, "assistant_kind")
    return [e for _i, e in read(start=start, calls=calls)]


def append_read(buf: Buffer, read: Reader, *, user_kind: object, assistant_kind: object) -> int:
    """The body of an adapter's ``append_messages``: check the kinds, read
    against the head (its calls, text ids from its version), then admit."""
    check_kind(user_kind, "user_kind")
    check_kind(assistant_kind, "assistant_kind")
    with buf.snapshot() as snap:
        calls = known_calls(snap)
        start = snap.version
    return admit(buf, read(start=start, calls=calls))


class Ids:
    """Text entry ids: ``prefix`` plus a number counting from ``start``."""

    __slots__ = ("_counter", "_prefix")

    def __init__(self, prefix: str, start: int) -> None:
        self._prefix = prefix
        self._counter = start

    def __call__(self) -> str:
        i = f"{self._prefix}{self._counter}"
        self._counter += 1
        return i


def call_entry(
    index: int, call_id: str, name: str, arguments: str, turn: int | None, meta: Mapping[str, Any]
) -> Indexed:
    """A ``TOOL_CALL`` entry: body and key are the tool name and its arguments."""
    body = f"{name} {arguments}"
    return (index, Entry(call_id, Kind.TOOL_CALL, body, (), turn, body, meta))


def result_entry(
    index: int, call_id: str, text: str, turn: int | None, meta: Mapping[str, Any]
) -> Indexed:
    """The ``TOOL_OUTPUT`` entry answering ``call_id``; it cites the call."""
    return (index, Entry(result_id(call_id), Kind.TOOL_OUTPUT, text, (call_id,), turn, None, meta))


def claim_result(
    index: int,
    call_id: str,
    open_calls: Collection[str],
    answered: set[str],
    *,
    call: str,
    result: str,
) -> None:
    """Record that ``call_id`` is answered; it must be open and not answered
    yet (``call``/``result`` are the adapter's words for them in errors)."""
    if call_id in answered:
        raise fail(index, f"{call} {call_id!r} already has a result")
    if call_id not in open_calls:
        raise fail(index, f"{result} for {call_id!r} has no preceding {call}")
    answered.add(call_id)


def tool_name(e: Entry) -> str:
    """The tool a call entry names: ``meta["tool"]``, else its key's first word."""
    name = e.meta.get("tool")
    if isinstance(name, str):
        return name
    return e.key.split(" ", 1)[0] if e.key else "tool"


def answer(
    call: Entry,
    results: Mapping[str, Entry],
    marks: Mapping[str, Mark],
    tombstones: Mapping[str, Tombstone],
    *,
    annotate: bool,
    in_place: set[str],
) -> tuple[str, Entry | None]:
    """The text that answers tool call ``call`` when rendering, and its live
    result if any: the result (annotated if it or the call is stale), else a
    note standing in for it, whose id is then added to ``in_place``."""
    result = results.get(call.id)
    if result is not None:
        mark = marks.get(result.id) or marks.get(call.id)
        return annotated(result.body, mark if annotate else None), result
    in_place.add(result_id(call.id))
    return missing_result_note(call.id, tombstones), None
