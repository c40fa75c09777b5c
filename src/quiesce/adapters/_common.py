"""What the chat adapters share: ids, notes, admission, sync, re-admission.

Every adapter reads a list of messages (or API items) into *messages*: each a
list of entries made from one message, validated as a whole before anything
is appended, so an error names its message index and leaves the head
unchanged. Entries carry the message's original JSON in ``content`` (the part,
block, tool call or item they were read from) and tags in ``meta``:

* ``api`` — the adapter that read it (``openai``, ``responses``, ``anthropic``);
  a renderer uses ``content`` only for entries of its own API and falls back to
  the body for the others (cross-rendering, summaries, rewrites);
* ``role`` — the message's role; ``msg`` — the message key, shared by all the
  entries of one message, so rendering can put the message back together;
* ``after`` — the key of the message that came before it when it was read,
  so rendering can tell a pruning-made neighbour from an original one.

Ids. Foreign ids (tool-call ids, Responses item ids) are kept verbatim and stay
addressable, but may not contain :data:`RESERVED` (``#``): every id the
adapters generate contains it, so no foreign id can take a generated one. A
tool result is ``"<call id>#result"``; a message without a foreign id is keyed
by its content, ``"#<16 hex digits of sha256 of its canonical JSON>.<n>"``
(``cache_control`` hints left out), ``n`` counting the identical messages
before it; the blocks of a message without an id of their own are
``"<message key>#<index>"``, the key being the content key or the message's
first foreign id (its first tool use, or the result id of its first tool
result). The same message read again gets the same ids: that is what makes
``sync_messages`` idempotent.

Notes. Everything quiesce writes into a rendered window is a *note*: one line
that starts with ``[quiesce:`` and ends with ``]``:

* ``[quiesce: stale at turn 3: <reason>]`` — in front of a stale entry's text;
* ``[quiesce: <id> pruned at turn 41 by <actor>: <reason>]`` — one per removal;
* ``[quiesce: no result recorded for <call id>]`` — a call still in flight;
* ``[quiesce: removed from this context]`` — the heading of the removal list.

Inside a note, reasons, actors and ids are escaped: a backslash, ``[``, ``]``
and every control or line-separator character become ``\\\\``, ``\\[``,
``\\]``, ``\\n``, ``\\xNN``…, so a note is always exactly one line and a
reason cannot close it early or forge another. Text that is *not* a note
(user, assistant, system and tool text) cannot imitate one: a line of it that
starts (after spaces) with ``[quiesce`` in any letter case is rendered with a
backslash before the ``[``. That is the one place a round trip is not exact.
Signed blocks are never touched.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeVar

import anyio

from .._core.buffer import Buffer, Snapshot
from .._core.entry import Entry, Kind, canonical_json, check_text, freeze, result_id, thaw
from .._core.errors import (
    DanglingReference,
    DuplicateEntry,
    InvalidArgument,
    InvalidType,
    QuiesceError,
    ReadmissionRefused,
)
from .._core.notes import escape_field
from .._core.records import Escalation, EscalationKind, Mark, Override, Tombstone
from .._core.version import Version
from .._protocol import AsyncBuffer, local_buffer

__all__ = [
    "NOTE_PREFIX",
    "OSCILLATION_WINDOW",
    "RESERVED",
    "Readmission",
    "ReadmitPolicy",
    "SyncReport",
    "result_id",
]

_T = TypeVar("_T")

#: The character no foreign id may contain; every generated id contains it.
RESERVED = "#"

#: How every quiesce note starts.
NOTE_PREFIX = "[quiesce:"

#: A second prune/re-admit cycle of the same content or key within this many
#: versions is escalated as :attr:`EscalationKind.OSCILLATION`.
OSCILLATION_WINDOW = 10_000

Message = dict[str, Any]


# -- errors and checks --------------------------------------------------------


def fail(index: int, message: str, *, type_error: bool = False) -> QuiesceError:
    """A :class:`~quiesce.InvalidArgument` (or ``InvalidType``) naming the message."""
    text = f"message {index}: {message}"
    return InvalidType(text) if type_error else InvalidArgument(text)


def check_messages(messages: object) -> Sequence[Mapping[str, Any]]:
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


def foreign_id(index: int, value: object, what: str) -> str:
    """A framework's own id: a non-empty str without :data:`RESERVED`."""
    text = check_nonempty(index, value, what)
    if RESERVED in text:
        raise fail(index, f"{what} {text!r} contains {RESERVED!r}, which quiesce reserves")
    return text


def is_call(head: Version | None, call_id: str) -> bool:
    """``call_id`` is a tool call of ``head``, live or tombstoned (a result in
    a synced list may answer a call pruned meanwhile)."""
    if head is None:
        return False
    slot = head.live.get(call_id)
    if slot is not None:
        return slot.entry.kind is Kind.TOOL_CALL
    tomb = head.tombs.by_id.get(call_id)
    return tomb is not None and tomb.kind is Kind.TOOL_CALL


def check_kind(value: object, what: str) -> Kind:
    if not isinstance(value, Kind):
        raise InvalidType(f"{what} must be a Kind, not {type(value).__name__}")
    return value


def json_value(index: int, value: object, what: str) -> Any:
    """``value`` frozen as a JSON value, or an error naming the message."""
    try:
        return freeze(value, what)
    except InvalidType as exc:
        raise fail(index, str(exc), type_error=True) from None
    except InvalidArgument as exc:
        raise fail(index, str(exc)) from None


def entry(index: int, *args: Any, **kwargs: Any) -> Entry:
    """An :class:`Entry`, with a construction error naming the message."""
    try:
        return Entry(*args, **kwargs)
    except InvalidType as exc:
        raise fail(index, str(exc), type_error=True) from None
    except InvalidArgument as exc:
        raise fail(index, str(exc)) from None


#: Keys that are hints to the API, not content: a framework may move them
#: between turns (Anthropic prompt caching marks the latest block), so they do
#: not count in a message's fingerprint. The entry keeps them all the same.
HINTS = frozenset({"cache_control"})


def fingerprint(value: object) -> str:
    """16 hex digits of sha256 of ``value``'s canonical JSON, :data:`HINTS`
    left out at every depth."""
    return hashlib.sha256(canonical_json(_without_hints(value)).encode("utf-8")).hexdigest()[:16]


def _without_hints(value: object) -> object:
    if isinstance(value, Mapping):
        return {k: _without_hints(v) for k, v in value.items() if k not in HINTS}
    if isinstance(value, list | tuple):
        return [_without_hints(v) for v in value]
    return value


class Keys:
    """Keys for messages without a foreign id: ``#<fingerprint>.<n>``.

    ``n`` counts identical messages earlier in the list (no buffer: a list
    read as a whole, as ``to_entries`` and ``sync`` do), or is the first
    number no entry of ``head`` uses (``append``: new messages are always
    new). Building the set of used keys is O(n + tombstones), once, on the
    first key asked for.
    """

    __slots__ = ("_counts", "_head", "_taken")

    def __init__(self, head: Version | None = None) -> None:
        self._counts: dict[str, int] = {}
        self._head = head
        self._taken: set[str] | None = None

    def taken(self) -> set[str]:
        if self._taken is None:
            self._taken = set()
            if self._head is not None:
                for i in (*self._head.live.keys(), *self._head.tombs.by_id.keys()):
                    if i.startswith(RESERVED):
                        self._taken.add(RESERVED + i.split(RESERVED, 2)[1])
        return self._taken

    def __call__(self, message: object) -> str:
        fp = fingerprint(message)
        n = self._counts.get(fp, 0)
        key = f"{RESERVED}{fp}.{n}"
        if self._head is not None:
            taken = self.taken()
            while key in taken:
                n += 1
                key = f"{RESERVED}{fp}.{n}"
        self._counts[fp] = n + 1
        return key


# -- notes --------------------------------------------------------------------

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


def removal_note(tombstones: Mapping[str, Tombstone], skip: Iterable[str] = ()) -> str | None:
    """The removal list (a heading, then one note per tombstone, oldest
    first), or ``None`` if there is nothing to list."""
    skipped = set(skip)
    ordered = sorted(
        (t for t in tombstones.values() if t.id not in skipped), key=lambda t: (t.version, t.id)
    )
    if not ordered:
        return None
    return "\n".join([f"{NOTE_PREFIX} removed from this context]", *map(tomb_note, ordered)])


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


# -- window helpers -----------------------------------------------------------


def snapshot_of(source: object) -> tuple[Snapshot, bool]:
    """``(snapshot, opened)``: a snapshot passed in, or a new one of a buffer
    (which the caller must close)."""
    if isinstance(source, Snapshot):
        return source, False
    if isinstance(source, Buffer):
        return source.snapshot().__enter__(), True
    raise InvalidType(f"render takes a Snapshot or a Buffer, not {type(source).__name__}")


def own(e: Entry, api: str) -> bool:
    """The entry was read by adapter ``api`` and keeps its original content."""
    return e.content is not None and e.meta.get("api") == api


def default_role(e: Entry) -> str:
    """The role of an entry: its ``meta["role"]``, else by kind."""
    role = e.meta.get("role")
    if isinstance(role, str):
        return role
    if e.kind in (Kind.INSTRUCTION, Kind.CONSTRAINT):
        return "system"
    if e.kind is Kind.TOOL_OUTPUT:
        return "tool"
    return "assistant"


@dataclass(slots=True)
class Group:
    """The live entries of one message, in window order."""

    role: str
    key: object
    entries: list[Entry]


def groups(entries: Sequence[Entry]) -> list[Group]:
    """Consecutive entries of one message (same ``meta["msg"]`` and role) form a
    group; an entry without ``msg`` is a group of its own. O(n)."""
    out: list[Group] = []
    last: object = None
    for e in entries:
        role = default_role(e)
        msg = e.meta.get("msg")
        if out and msg is not None and msg == last and out[-1].role == role:
            out[-1].entries.append(e)
        else:
            out.append(Group(role, msg, [e]))
        last = msg
    return out


def adjacent(prev: Group, group: Group) -> bool:
    """``group`` followed ``prev`` when it was read (nothing pruned between)."""
    return bool(group.entries) and group.entries[0].meta.get("after") == prev.key


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


def tool_name(e: Entry) -> str:
    """The tool a call entry names: ``meta["tool"]``, else its key's first word."""
    name = e.meta.get("tool")
    if isinstance(name, str):
        return name
    return e.key.split(" ", 1)[0] if e.key else "tool"


def arguments_json(e: Entry) -> str:
    """A call's arguments as a JSON string: as read, else the body wrapped."""
    arguments = e.meta.get("arguments")
    if isinstance(arguments, str):
        return arguments
    return canonical_json({"input": e.body})


def plain(value: object) -> Any:
    """A frozen value as plain JSON types."""
    return thaw(value)


# -- reading and admission ----------------------------------------------------


@dataclass(slots=True)
class Read:
    """One message read: its index, key and entries (maybe none)."""

    index: int
    key: str
    entries: list[Entry] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Readmission:
    """What a ``readmit=`` callable is asked about: the entry of message
    ``index`` whose content or key matches ``tombstone``, and ``cycles``, the
    prune/re-admit cycles of that content within the window (this one
    included)."""

    index: int
    entry: Entry
    tombstone: Tombstone
    cycles: int


#: ``"refuse"``, ``"record"``, or a callable given a :class:`Readmission`
#: returning ``"refuse"``, ``"record"`` or an :class:`~quiesce.Override`.
ReadmitPolicy = Literal["refuse", "record"] | Callable[[Readmission], object]


@dataclass(frozen=True, slots=True)
class SyncReport:
    """What :func:`sync_messages` did (frozen).

    ``appended``: indices of the messages appended now; ``held``: indices of
    messages the buffer already holds (live, perhaps in part); ``tombstoned``:
    indices of messages the buffer pruned on purpose (their stale copy was not
    re-appended; a result whose call was pruned counts here too);
    ``readmitted``: ids of entries appended with an automatic ``Override``;
    ``escalations``: the ``OSCILLATION`` escalations raised; ``version``: the
    head version after the call.
    """

    appended: tuple[int, ...] = ()
    held: tuple[int, ...] = ()
    tombstoned: tuple[int, ...] = ()
    readmitted: tuple[str, ...] = ()
    escalations: tuple[Escalation, ...] = ()
    version: int = 0


def check_readmit(readmit: object) -> None:
    """``readmit`` must be ``"refuse"``, ``"record"`` or a callable."""
    if isinstance(readmit, str):
        if readmit not in ("refuse", "record"):
            raise InvalidArgument(
                f"readmit must be 'refuse', 'record' or a callable, not {readmit!r}"
            )
    elif not callable(readmit):
        raise InvalidType(
            f"readmit must be 'refuse', 'record' or a callable, not {type(readmit).__name__}"
        )


class Reader(Protocol):
    """An adapter's reader: its messages (bound with ``functools.partial``)
    read against ``head`` (``None``: no buffer), with message keys from
    ``keys`` and ``calls`` made earlier."""

    def __call__(
        self, *, head: Version | None, keys: Keys, calls: Collection[str]
    ) -> list[Read]: ...


def read_entries(read: Reader, calls: Collection[str]) -> list[Entry]:
    """The body of ``to_entries``: read without a buffer, deterministic keys."""
    return [e for r in read(head=None, keys=Keys(), calls=calls) for e in r.entries]


def read_and_admit(
    buf: Buffer,
    read: Reader,
    *,
    api: str,
    readmit: object,
    turn: int | None,
    sync: bool,
    actor: str | None = None,
) -> SyncReport:
    """The body of ``append_messages`` (``sync=False``: message keys avoid
    every key the buffer used) and ``sync_messages`` (``sync=True``: keys
    count identical messages in the list, so a list read again gets the same
    ids); then :func:`admit`."""
    if not isinstance(buf, Buffer):
        raise InvalidType(f"buf must be a Buffer, not {type(buf).__name__}")
    check_readmit(readmit)
    head = buf.head()
    reads = read(head=head, keys=Keys(None if sync else head), calls=())
    return admit(buf, reads, api=api, readmit=readmit, turn=turn, sync=sync, actor=actor)


async def aread_and_admit(
    buf: AsyncBuffer,
    read: Reader,
    *,
    api: str,
    readmit: object,
    turn: int | None,
    sync: bool,
    actor: str | None = None,
) -> SyncReport:
    """:func:`read_and_admit` for code on the event loop, on any
    :class:`~quiesce.AsyncBuffer`: the messages are read against its local
    head, then :func:`aadmit`. Always a checkpoint."""
    check_readmit(readmit)
    head = buf.head()
    reads = read(head=head, keys=Keys(None if sync else head), calls=())
    return await aadmit(buf, reads, api=api, readmit=readmit, turn=turn, sync=sync, actor=actor)


def render_with(source: object, render: Callable[[Snapshot], _T]) -> _T:
    """``render`` of a snapshot passed in, or of a new snapshot of a buffer
    (released when done, also on error)."""
    snap, opened = snapshot_of(source)
    try:
        return render(snap)
    finally:
        if opened:
            snap.__exit__(None, None, None)


def parts_text(
    index: int,
    content: object,
    what: str,
    *,
    noun: str,
    fields: Mapping[str, str],
    only_text: bool = False,
) -> str:
    """The text of a content value: a str as is, or a list of parts/blocks
    whose text fields (``fields``: type → field) are joined by newlines, any
    other part as ``[type]`` (or an error when ``only_text``)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list | tuple):
        raise fail(
            index,
            f"{what} must be a str or a list of {noun}, not {type(content).__name__}",
            type_error=True,
        )
    texts: list[str] = []
    for n, part in enumerate(content):
        if not isinstance(part, Mapping):
            raise fail(index, f"{what}[{n}] must be a dict", type_error=True)
        kind = check_nonempty(index, part.get("type"), f"{what}[{n}].type")
        field_name = fields.get(kind)
        if field_name is not None:
            texts.append(check_str(index, part.get(field_name), f"{what}[{n}].{field_name}"))
        elif only_text:
            raise fail(index, f"{what}[{n}] must be a text part, not {kind!r}")
        else:
            texts.append(f"[{kind}]")
    return "\n".join(texts)


def _cycles(head: Version, e: Entry, tomb: Tombstone) -> int:
    """Prune/re-admit cycles of ``e``'s content or key within the window,
    counting this one. O(tombstones)."""
    low = head.number - OSCILLATION_WINDOW
    return sum(
        1
        for t in head.tombs.by_id.values()
        if t.version > low
        and (t.content_hash == e.content_hash or (e.key is not None and t.key == e.key))
    )


@dataclass
class _Admission:
    """What :func:`admit` decided against ``head``, before appending."""

    head: Version
    who: str
    plan: list[tuple[Entry, Override | None, int]]
    appended: list[int]
    held: list[int]
    tombstoned: list[int]

    def report(
        self, version: int, readmitted: list[str], escalations: list[Escalation]
    ) -> SyncReport:
        return SyncReport(
            tuple(self.appended),
            tuple(self.held),
            tuple(self.tombstoned),
            tuple(readmitted),
            tuple(escalations),
            version,
        )

    def oscillation(self, e: Entry, api: str) -> tuple[str, dict[str, Any]] | None:
        """The detail and data of the ``OSCILLATION`` escalation re-admitting
        ``e`` raises (its second cycle or later), or ``None``."""
        tomb = self.head.tombs.matching(e.content_hash, e.key)
        assert tomb is not None
        cycles = _cycles(self.head, e, tomb)
        if cycles < 2:
            return None
        return (
            f"{e.id!r} re-admitted by {self.who}: cycle {cycles} of "
            f"pruning and re-admitting the content of {tomb.id!r}",
            {"ids": [e.id, tomb.id], "cycles": cycles, "adapter": api},
        )


def _admission(
    head: Version,
    reads: Sequence[Read],
    *,
    api: str,
    readmit: object,
    turn: int | None,
    sync: bool,
    actor: str | None,
) -> _Admission:
    """Decide every message of ``reads`` against ``head`` (see :func:`admit`)."""
    check_readmit(readmit)
    if actor is not None:
        check_text(actor, "actor")
    who = f"quiesce.adapters.{api}" if actor is None else actor
    live, tombs = head.live, head.tombs.by_id
    out = _Admission(head, who, [], [], [], [])
    batch: set[str] = set()
    for r in reads:
        known = [e.id for e in r.entries if e.id in live or e.id in tombs]
        if known:
            if not sync:
                raise DuplicateEntry(f"message {r.index}: entry id {known[0]!r} is already used")
            (out.held if any(i in live for i in known) else out.tombstoned).append(r.index)
            continue
        gone: list[str] = []
        mine: set[str] = set()
        for e in r.entries:
            gone.extend(ref for ref in e.refs if ref not in live and ref not in batch | mine)
            mine.add(e.id)
        if gone:
            tomb = tombs.get(gone[0])
            if sync and tomb is not None:
                out.tombstoned.append(r.index)  # answers a call pruned meanwhile
                continue
            raise DanglingReference(
                f"message {r.index}: {gone[0]!r} is "
                + ("pruned" if tomb is not None else "not in the buffer"),
                gone[0],
                tomb,
            )
        for e in r.entries:
            override = None
            tomb = head.tombs.matching(e.content_hash, e.key)
            if tomb is not None:
                override = _decide(readmit, r.index, e, tomb, _cycles(head, e, tomb), who, turn)
            out.plan.append((e, override, r.index))
            batch.add(e.id)
        if r.entries:
            out.appended.append(r.index)
    return out


def admit(
    buf: Buffer,
    reads: Sequence[Read],
    *,
    api: str,
    readmit: object,
    turn: int | None,
    sync: bool,
    actor: str | None = None,
) -> SyncReport:
    """Append what ``reads`` hold that the buffer does not, deciding every
    re-admission before the first append (so ``"refuse"`` or a bad answer
    from a callable leaves the head unchanged).

    With ``sync``, a message whose entries the buffer already knows is held
    or tombstoned, not appended; without it, a known id is a
    :class:`DuplicateEntry`. Each re-admission under ``"record"`` is appended
    with an ``Override`` naming the caller — ``actor``, the full name of the
    code that re-admits (an integration passes its module's), by default
    ``quiesce.adapters.<api>``; the second cycle of one content
    or key within :data:`OSCILLATION_WINDOW` versions is escalated. O(entries
    · log n), plus O(tombstones) per re-admission.

    Everything is decided against the head read at the start. A writer in
    another thread that appends a conflicting id meanwhile makes a later
    append of the batch raise (:class:`DuplicateEntry`), and the messages
    appended before it stay: the adapters do not hold the buffer's write
    lock across the batch. Cancellation: nothing here awaits.
    """
    decided = _admission(
        buf.head(), reads, api=api, readmit=readmit, turn=turn, sync=sync, actor=actor
    )
    readmitted: list[str] = []
    escalations: list[Escalation] = []
    version = decided.head.number
    for e, override, _index in decided.plan:
        version = buf.append(e, override=override)
        if override is not None:
            readmitted.append(e.id)
            found = decided.oscillation(e, api)
            if found is not None:
                detail, data = found
                escalations.append(buf.escalate(EscalationKind.OSCILLATION, detail, data=data))
    return decided.report(version if decided.plan else buf.version, readmitted, escalations)


async def aadmit(
    buf: AsyncBuffer,
    reads: Sequence[Read],
    *,
    api: str,
    readmit: object,
    turn: int | None,
    sync: bool,
    actor: str | None = None,
) -> SyncReport:
    """:func:`admit` for code on the event loop, on any
    :class:`~quiesce.AsyncBuffer`. Always a checkpoint.

    On an in-process buffer (``open_buffer()``'s, or a plain one) it *is*
    :func:`admit` after one checkpoint: appends never touch a disk, and with
    no await between them the batch is atomic with respect to other
    coroutines. On a shared buffer each entry is appended with ``aappend``
    (forwarded from a replica), in order; everything is decided against the
    local head first, so a bad message appends nothing, but a conflicting
    append by another member meanwhile makes a later one raise (the ones
    before it stay), as with a writer thread above. Cancellation between two
    appends leaves the first ones appended: a later sync finds them held.
    """
    local = local_buffer(buf)
    if local is not None:
        await anyio.lowlevel.checkpoint()
        return admit(local, reads, api=api, readmit=readmit, turn=turn, sync=sync, actor=actor)
    decided = _admission(
        buf.head(), reads, api=api, readmit=readmit, turn=turn, sync=sync, actor=actor
    )
    readmitted: list[str] = []
    escalations: list[Escalation] = []
    version = decided.head.number
    if not decided.plan:
        await anyio.lowlevel.checkpoint()
    for e, override, _index in decided.plan:
        version = await buf.aappend(e, override=override)
        if override is not None:
            readmitted.append(e.id)
            found = decided.oscillation(e, api)
            if found is not None:
                detail, data = found
                escalations.append(
                    await buf.aescalate(EscalationKind.OSCILLATION, detail, data=data)
                )
    return decided.report(version if decided.plan else buf.version, readmitted, escalations)


def _decide(
    readmit: object,
    index: int,
    e: Entry,
    tomb: Tombstone,
    cycles: int,
    who: str,
    turn: int | None,
) -> Override:
    decision = readmit
    if callable(readmit):
        decision = readmit(Readmission(index, e, tomb, cycles))
        if isinstance(decision, Override):
            return decision
        if decision not in ("refuse", "record"):
            raise InvalidType(
                f"message {index}: the readmit callable must return 'refuse', 'record' "
                f"or an Override, not {decision!r}"
            )
    if decision == "refuse":
        raise ReadmissionRefused(
            f"message {index}: entry {e.id!r} matches the tombstone of {tomb.id!r} "
            f"(pruned at version {tomb.version}: {tomb.reason}); "
            "pass readmit='record' or an Override to re-admit it",
            tomb,
        )
    when = turn if turn is not None else (tomb.turn if tomb.turn is not None else 0)
    return Override(
        f"re-admitted by {who} (readmit='record'): the loop sent "
        f"content matching the tombstone of {tomb.id!r} again",
        when,
    )
