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

import contextvars
import hashlib
import heapq
import json
import re
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Collection, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal, Protocol, TypeVar

import anyio

from .._core.buffer import Buffer, Snapshot
from .._core.entry import (
    MAX_DEPTH,
    Entry,
    Kind,
    canonical_json,
    check_text,
    freeze,
    result_id,
    thaw,
)
from .._core.errors import (
    DanglingReference,
    DuplicateEntry,
    InvalidArgument,
    InvalidType,
    QuiesceError,
    ReadmissionRefused,
)
from .._core.notes import escape_field
from .._core.plan import EditPlan, Rewrite, Summarize
from .._core.records import (
    EditReport,
    Escalation,
    EscalationKind,
    Mark,
    Override,
    Status,
    Tombstone,
)
from .._core.version import Version
from .._protocol import AsyncBuffer, local_buffer

__all__ = [
    "NOTE_LIMIT",
    "NOTE_NAMES",
    "NOTE_PREFIX",
    "OSCILLATION_WINDOW",
    "PLACEHOLDER_IDS",
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


#: What errors call the thing read (the Responses adapter sets ``item``).
NOUN: contextvars.ContextVar[str] = contextvars.ContextVar(
    "quiesce_adapter_noun", default="message"
)


def fail(
    index: int, message: str, *, type_error: bool = False, noun: str | None = None
) -> QuiesceError:
    """A :class:`~quiesce.InvalidArgument` (or ``InvalidType``) naming the
    message (or the ``noun`` an adapter reads, by default :data:`NOUN`'s:
    the Responses adapter says ``item``)."""
    text = f"{noun or NOUN.get()} {index}: {message}"
    return InvalidType(text) if type_error else InvalidArgument(text)


# -- SDK objects ----------------------------------------------------------------

#: Ids a framework puts on items that are not really theirs: never an
#: identity (the OpenAI Agents SDK's ``FAKE_RESPONSES_ID`` on every item it
#: converts from Chat Completions). Such an item is stored under a generated
#: id and its own ``id`` field is kept verbatim.
PLACEHOLDER_IDS = frozenset({"__fake_id__"})

_SCALARS = (str, int, float, bool, type(None))


def sdk_dump(value: object) -> Any:
    """An SDK object (anything with ``model_dump``: the OpenAI and Anthropic
    SDKs' pydantic models) as the SDK sends it in a request body —
    ``model_dump(exclude_unset=True, mode="json", by_alias=True,
    exclude=__api_exclude__)``, what openai's ``_utils/_transform.py`` and
    anthropic's ``_utils/_json.py`` do — or ``value`` itself if it is not one.
    No SDK is imported: the test is duck-typed."""
    dump = getattr(type(value), "model_dump", None)
    if dump is None or not callable(dump):
        return value
    return value.model_dump(  # type: ignore[attr-defined]
        exclude_unset=True,
        mode="json",
        by_alias=True,
        exclude=getattr(value, "__api_exclude__", None),
    )


def to_plain(value: object, depth: int = 0) -> Any:
    """``value`` with every SDK object in it (at any depth) replaced by
    :func:`sdk_dump` of it; dicts and lists that hold none come back as the
    same objects (nothing is copied). O(size); past :data:`MAX_DEPTH` levels
    values are left as they are (freezing them then refuses the nesting)."""
    t = type(value)
    if t in _SCALARS or depth > MAX_DEPTH:
        return value
    if t is dict:
        out: dict[str, Any] | None = None
        for k, v in value.items():  # type: ignore[attr-defined]
            if type(v) in _SCALARS:
                continue
            c = to_plain(v, depth + 1)
            if c is not v:
                if out is None:
                    out = dict(value)  # type: ignore[call-overload]
                out[k] = c
        return value if out is None else out
    if t is list or t is tuple:
        items: list[Any] | None = None
        for n, v in enumerate(value):  # type: ignore[arg-type]
            if type(v) in _SCALARS:
                continue
            c = to_plain(v, depth + 1)
            if c is not v:
                if items is None:
                    items = list(value)  # type: ignore[call-overload]
                items[n] = c
        return value if items is None else items
    dumped = sdk_dump(value)
    return value if dumped is value else to_plain(dumped, depth + 1)


def check_messages(
    messages: object, noun: str | None = None, start: int = 0
) -> Sequence[Mapping[str, Any]]:
    """``messages`` must be a list or tuple of dicts or SDK objects; returned
    with every SDK object in it dumped as the SDK would send it
    (:func:`to_plain`). O(size)."""
    noun = noun or NOUN.get()
    if not isinstance(messages, list | tuple):
        raise InvalidType(
            f"{noun}s must be a list of dicts or SDK objects, not {type(messages).__name__}"
        )
    out: list[Mapping[str, Any]] = []
    for i, raw in enumerate(messages, start):
        m = to_plain(raw)
        if not isinstance(m, Mapping):
            raise fail(
                i,
                f"must be a dict or an SDK object, not {type(m).__name__}",
                type_error=True,
                noun=noun,
            )
        out.append(m)
    return out


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
        found = _not_json(value, "")
        if found is not None:
            path, bad = found
            raise fail(
                index,
                f"{path or what} must be a JSON value or an SDK object, not {type(bad).__name__}",
                type_error=True,
            ) from None
        raise fail(index, str(exc), type_error=True) from None
    except InvalidArgument as exc:
        raise fail(index, str(exc)) from None


def _not_json(value: object, path: str, depth: int = 0) -> tuple[str, object] | None:
    """The path (``content[1].input``) and value of the first non-JSON value
    in ``value``, or ``None``. Only called to word an error."""
    if value is None or isinstance(value, str | int | float | bool) or depth > MAX_DEPTH:
        return None
    if isinstance(value, Mapping):
        for k, v in value.items():
            found = _not_json(v, f"{path}.{k}" if path else str(k), depth + 1)
            if found is not None:
                return found
        return None
    if isinstance(value, list | tuple):
        for n, v in enumerate(value):
            found = _not_json(v, f"{path}[{n}]", depth + 1)
            if found is not None:
                return found
        return None
    return path, value


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
    left out at every depth, and so is every field whose value is ``None``,
    ``[]`` or ``{}`` (what an SDK's ``model_dump()`` adds: ``refusal: None``,
    ``annotations: []``…): a message sent back with its dump's defaults is
    the message it was."""
    return hashlib.sha256(canonical_json(_without_noise(value)).encode("utf-8")).hexdigest()[:16]


def _empty(value: object) -> bool:
    return value is None or (isinstance(value, Mapping | list | tuple) and not value)


def _without_noise(value: object) -> object:
    if isinstance(value, Mapping):
        return {k: _without_noise(v) for k, v in value.items() if k not in HINTS and not _empty(v)}
    if isinstance(value, list | tuple):
        return [_without_noise(v) for v in value]
    return value


class Keys:
    """Keys for messages without a foreign id: ``#<fingerprint>.<n>``.

    Three modes. No buffer (a list read as a whole, as ``to_entries`` does):
    ``n`` counts identical messages earlier in the list. ``append`` (a
    ``head``): ``n`` is the first number no entry of ``head`` uses, new
    messages are always new. ``sync`` (a ``head`` and ``sync=True``): the
    identical messages of a history are the buffer's entries of that
    content, *live ones first* (in the order they were made), then pruned
    ones, then new keys — so identical messages never shift keys when an
    earlier copy disappears from the history (a framework that follows the
    rendered window drops the pruned copy); ``used`` (the keys of a
    history's prefix already matched) are skipped, and with ``gone`` (the
    keys the last history held past that prefix) only those pruned keys are
    candidates: a pruned copy the framework already dropped cannot come
    back as a new identical message.

    The numbers of one content are allocated without gaps (the first unused
    one, and ids are never reused), so the keys of a content are found by
    probing ``n = 0, 1, ...`` until one is unused: O(k log n) for k
    identical messages, never a pass over the buffer.
    """

    __slots__ = ("_counts", "_found", "_gone", "_head", "_sync", "_used")

    def __init__(
        self,
        head: Version | None = None,
        *,
        sync: bool = False,
        used: Collection[str] = (),
        gone: Collection[str] | None = None,
    ) -> None:
        self._counts: dict[str, int] = {}
        self._head = head
        self._sync = sync and head is not None
        self._used = used
        self._gone = gone
        #: per fingerprint: (live keys, pruned keys, next unused number)
        self._found: dict[str, tuple[list[str], list[str], int]] = {}

    def _state(self, key: str) -> bool | None:
        """``True``: an entry of message ``key`` is live; ``False``: only
        pruned ones; ``None``: no entry ever had it."""
        head = self._head
        assert head is not None
        live, tombs = head.live, head.tombs.by_id
        first = f"{key}{RESERVED}0"
        if key in live or first in live:
            return True
        if key in tombs or first in tombs:
            return False
        return None

    def _probe(self, fp: str) -> tuple[list[str], list[str], int]:
        found = self._found.get(fp)
        if found is None:
            live: list[str] = []
            dead: list[str] = []
            n = 0
            while True:
                key = f"{RESERVED}{fp}.{n}"
                state = self._state(key)
                if state is None:
                    break
                (live if state else dead).append(key)
                n += 1
            found = self._found[fp] = (live, dead, n)
        return found

    def __call__(self, message: object) -> str:
        fp = fingerprint(message)
        n = self._counts.get(fp, 0)
        self._counts[fp] = n + 1
        if self._head is None:
            return f"{RESERVED}{fp}.{n}"
        live, dead, free = self._probe(fp)
        if self._sync:
            if self._gone is not None:
                dead = [key for key in dead if key in self._gone]
            cands = [key for key in (*live, *dead) if key not in self._used]
            if n < len(cands):
                return cands[n]
        self._found[fp] = (live, dead, free + 1)
        return f"{RESERVED}{fp}.{free}"


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
    """A frozen value as plain JSON types: fresh objects, the caller's to
    change. The JSON text of each frozen value is remembered (by identity;
    the frozen value is immutable and kept alive with it, the last
    :data:`PLAIN_CACHE` of them), so rendering an entry again is one
    C-level ``json.loads`` instead of a Python walk."""
    if not isinstance(value, Mapping | tuple):
        return value
    hit = _PLAIN.get(id(value))
    if hit is not None and hit[0] is value:
        return json.loads(hit[1])
    out = thaw(value)
    if len(_PLAIN) >= PLAIN_CACHE:
        _PLAIN.clear()
    _PLAIN[id(value)] = (value, json.dumps(out, ensure_ascii=False))
    return out


#: How many frozen values :func:`plain` remembers the JSON text of.
PLAIN_CACHE = 200_000

_PLAIN: dict[int, tuple[object, str]] = {}


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
    ``escalations``: the escalations raised (``OSCILLATION``, and the
    ``REFUSED_EDIT`` of a removal, rewrite or summary the policy refused);
    ``version``: the head version after the call; ``rewritten``: ids whose
    changed content was applied as a ``Rewrite``; ``removed``: ids removed
    (or staged for removal) because the history dropped them or a summary
    replaced them; ``refused``: ids the policy kept against the history (a
    protected entry dropped or summarized, an immutable one rewritten).
    """

    appended: tuple[int, ...] = ()
    held: tuple[int, ...] = ()
    tombstoned: tuple[int, ...] = ()
    readmitted: tuple[str, ...] = ()
    escalations: tuple[Escalation, ...] = ()
    version: int = 0
    rewritten: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    refused: tuple[str, ...] = ()


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
    reads = read(head=head, keys=Keys(head, sync=sync), calls=())
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
    reads = read(head=head, keys=Keys(head, sync=sync), calls=())
    return await aadmit(buf, reads, api=api, readmit=readmit, turn=turn, sync=sync, actor=actor)


def render_options(
    source: object,
    render: Callable[..., _T],
    api: str,
    *,
    annotate_stale: bool,
    tombstone_notes: bool,
    note_names: int,
    note_limit: int,
) -> _T:
    """What each adapter's public ``render`` does with its options: check the
    note options, then :func:`render_with` of ``render`` bound to them,
    cached per ``api`` and options. O(n + tombstones) on a miss."""
    check_note_options(note_names, note_limit)
    options = (annotate_stale, tombstone_notes, note_names, note_limit)
    return render_with(
        source,
        partial(
            render,
            annotate_stale=annotate_stale,
            tombstone_notes=tombstone_notes,
            note_names=note_names,
            note_limit=note_limit,
        ),
        (api, *options),
    )


def render_with(
    source: object, render: Callable[[Snapshot], _T], cache: Hashable | None = None
) -> _T:
    """``render`` of a snapshot passed in, or of a new snapshot of a buffer
    (released when done, also on error).

    With ``cache`` (the adapter and its options), the window's rendering is
    remembered as JSON text for the snapshot's version (the last
    :data:`RENDER_CACHE` windows): rendering the same version again is one
    ``json.loads`` — fresh objects the caller may change, no per-entry
    work. A version is immutable, so a hit is exact."""
    snap, opened = snapshot_of(source)
    try:
        if cache is None:
            return render(snap)
        entries = snap.entries()
        if not entries:
            return render(snap)
        key = (cache, id(entries), snap.version)
        with _RENDERS_LOCK:
            hit = _RENDERS.get(key)
            if hit is not None:
                _RENDERS.move_to_end(key)
        if hit is not None and hit[0] is entries:
            return json.loads(hit[1])  # type: ignore[no-any-return]
        out = render(snap)
        text = json.dumps(out, ensure_ascii=False)
        with _RENDERS_LOCK:
            _RENDERS[key] = (entries, text)  # the entries keep id(entries) unique
            while len(_RENDERS) > RENDER_CACHE:
                _RENDERS.popitem(last=False)
        return out
    finally:
        if opened:
            snap.__exit__(None, None, None)


#: How many rendered windows :func:`render_with` remembers.
RENDER_CACHE = 16

_RENDERS: OrderedDict[Hashable, tuple[tuple[Entry, ...], str]] = OrderedDict()
_RENDERS_LOCK = threading.Lock()


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
    """What :func:`admit` decided against ``head``, before writing."""

    head: Version
    who: str
    plan: list[tuple[Entry, Override | None, int]] = field(default_factory=list)
    appended: list[int] = field(default_factory=list)
    held: list[int] = field(default_factory=list)
    tombstoned: list[int] = field(default_factory=list)
    rewrites: list[Entry] = field(default_factory=list)
    readmitted: list[str] = field(default_factory=list)
    escalations: list[Escalation] = field(default_factory=list)
    rewritten: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)

    def report(self, version: int) -> SyncReport:
        return SyncReport(
            tuple(self.appended),
            tuple(self.held),
            tuple(self.tombstoned),
            tuple(self.readmitted),
            tuple(self.escalations),
            version,
            rewritten=tuple(self.rewritten),
            refused=tuple(self.refused),
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

    def rewrite_plan(self, e: Entry, turn: int | None) -> EditPlan:
        return EditPlan(
            [Rewrite(e.id, e.body)],
            reason=f"the history given to {self.who} changed this message",
            actor=self.who,
            turn=turn,
        )

    def rewrote(self, e: Entry, report: EditReport) -> None:
        if report.applied:
            self.rewritten.append(e.id)
        else:
            self.refused.append(e.id)
            if report.escalation is not None:
                self.escalations.append(report.escalation)


def _admission(
    head: Version,
    reads: Sequence[Read],
    *,
    api: str,
    readmit: object,
    turn: int | None,
    sync: bool,
    actor: str | None,
    rewritable: Collection[str],
) -> _Admission:
    """Decide every message of ``reads`` against ``head`` (see :func:`admit`)."""
    check_readmit(readmit)
    if actor is not None:
        check_text(actor, "actor")
    who = f"quiesce.adapters.{api}" if actor is None else actor
    live, tombs = head.live, head.tombs.by_id
    out = _Admission(head, who)
    batch: set[str] = set()
    for r in reads:
        entries = r.entries
        known = [e.id for e in entries if e.id in live or e.id in tombs]
        if known:
            if not sync:
                raise DuplicateEntry(f"message {r.index}: entry id {known[0]!r} is already used")
            for e in entries:
                slot = live.get(e.id)
                if slot is not None and e.id in rewritable and slot.entry.body != e.body:
                    out.rewrites.append(e)
            entries = [e for e in entries if e.id not in live and e.id not in tombs]
            if not entries:
                (out.held if any(i in live for i in known) else out.tombstoned).append(r.index)
                continue
        gone: list[str] = []
        mine: set[str] = set()
        for e in entries:
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
        for e in entries:
            override = None
            tomb = head.tombs.matching(e.content_hash, e.key)
            if tomb is not None:
                override = _decide(readmit, r.index, e, tomb, _cycles(head, e, tomb), who, turn)
            out.plan.append((e, override, r.index))
            batch.add(e.id)
        if entries:
            out.appended.append(r.index)
    return out


def _append_planned(buf: Buffer, decided: _Admission, api: str) -> int:
    """Append ``decided.plan`` to an in-process buffer, synchronously (no
    await: atomic with respect to other coroutines; never touches a disk).
    Returns the head version after."""
    version = decided.head.number
    if decided.plan:
        # one version for the whole batch, all or nothing (Buffer.extend)
        version = buf.extend([e for e, _, _ in decided.plan], [o for _, o, _ in decided.plan])
    for e, override, _index in decided.plan:
        if override is not None:
            decided.readmitted.append(e.id)
            found = decided.oscillation(e, api)
            if found is not None:
                detail, data = found
                decided.escalations.append(
                    buf.escalate(EscalationKind.OSCILLATION, detail, data=data)
                )
    return version


def admit(
    buf: Buffer,
    reads: Sequence[Read],
    *,
    api: str,
    readmit: object,
    turn: int | None,
    sync: bool,
    actor: str | None = None,
    rewritable: Collection[str] = (),
) -> SyncReport:
    """Append what ``reads`` hold that the buffer does not, deciding every
    re-admission before the first append (so ``"refuse"`` or a bad answer
    from a callable leaves the head unchanged).

    With ``sync``, an entry the buffer already knows is held or tombstoned,
    not appended (the new entries of a message that gained some are), and a
    live entry in ``rewritable`` whose body changed is a ``Rewrite`` through
    the policy (refused and escalated for an immutable one); without it, a
    known id is a :class:`DuplicateEntry`. Each re-admission under ``"record"`` is appended
    with an ``Override`` naming the caller — ``actor``, the full name of the
    code that re-admits (an integration passes its module's), by default
    ``quiesce.adapters.<api>``; the second cycle of one content
    or key within :data:`OSCILLATION_WINDOW` versions is escalated. O(entries
    · log n), plus O(tombstones) per re-admission.

    Everything is decided against the head read at the start, and the
    batch is appended as *one* version (:meth:`Buffer.extend`, all or
    nothing): a writer in another thread that appends a conflicting id
    meanwhile makes the whole batch raise (:class:`DuplicateEntry`) and
    nothing of it is appended. Cancellation: nothing here awaits. A rewrite is
    a sync ``edit`` (it may flush a durable log): code on the event loop
    uses :func:`aadmit`.
    """
    decided = _admission(
        buf.head(),
        reads,
        api=api,
        readmit=readmit,
        turn=turn,
        sync=sync,
        actor=actor,
        rewritable=rewritable,
    )
    version = _append_planned(buf, decided, api)
    for e in decided.rewrites:
        decided.rewrote(e, buf.edit(decided.rewrite_plan(e, turn)))
    return decided.report(version if decided.plan and not decided.rewrites else buf.version)


async def aadmit(
    buf: AsyncBuffer,
    reads: Sequence[Read],
    *,
    api: str,
    readmit: object,
    turn: int | None,
    sync: bool,
    actor: str | None = None,
    rewritable: Collection[str] = (),
) -> SyncReport:
    """:func:`admit` for code on the event loop, on any
    :class:`~quiesce.AsyncBuffer`. Always a checkpoint; no disk or database
    I/O on the loop (a rewrite goes through ``aedit``).

    On an in-process buffer (``open_buffer()``'s, or a plain one) the
    appends are :func:`admit`'s, decided and made after one checkpoint with
    no await between them: the batch is atomic with respect to other
    coroutines. On a shared buffer each entry is appended with ``aappend``
    (forwarded from a replica), in order; everything is decided against the
    local head first, so a bad message appends nothing, but a conflicting
    append by another member meanwhile makes a later one raise (the ones
    before it stay), as with a writer thread above. Cancellation between two
    writes leaves the first ones made: a later sync finds them held.
    """
    local = local_buffer(buf)
    if local is not None:
        await anyio.lowlevel.checkpoint()
    decided = _admission(
        buf.head(),
        reads,
        api=api,
        readmit=readmit,
        turn=turn,
        sync=sync,
        actor=actor,
        rewritable=rewritable,
    )
    if local is not None:
        version = _append_planned(local, decided, api)
    else:
        version = decided.head.number
        if not decided.plan:
            await anyio.lowlevel.checkpoint()
        for e, override, _index in decided.plan:
            version = await buf.aappend(e, override=override)
            if override is not None:
                decided.readmitted.append(e.id)
                found = decided.oscillation(e, api)
                if found is not None:
                    detail, data = found
                    decided.escalations.append(
                        await buf.aescalate(EscalationKind.OSCILLATION, detail, data=data)
                    )
    for e in decided.rewrites:
        decided.rewrote(e, await buf.aedit(decided.rewrite_plan(e, turn)))
    return decided.report(version if decided.plan and not decided.rewrites else buf.version)


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


#: How sync finds a message ``append_stream`` stored (``_stream.streamed_ids``,
#: set when that module loads: it imports this one).
STREAMED: Callable[[Buffer, str, Version, Mapping[str, Any]], tuple[str, ...] | None] | None = None


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


# -- sync: a faithful diff of the framework's history --------------------------


@dataclass(slots=True)
class _Seen:
    """One message of the last history synced: the object given (an SDK
    object is compared by identity), a private copy of a dict, the entry
    ids it maps to (none: a note) and its message key."""

    source: object
    raw: Any
    ids: tuple[str, ...]
    key: str | None


@dataclass(slots=True)
class _SyncState:
    history: list[_Seen] = field(default_factory=list)
    system: object = None
    lock: threading.Lock = field(default_factory=threading.Lock)


_STATES: weakref.WeakKeyDictionary[Buffer, dict[str, _SyncState]] = weakref.WeakKeyDictionary()
_STATES_LOCK = threading.Lock()


def _state(buf: Buffer, api: str) -> _SyncState:
    with _STATES_LOCK:
        per = _STATES.get(buf)
        if per is None:
            per = _STATES[buf] = {}
        st = per.get(api)
        if st is None:
            st = per[api] = _SyncState()
        return st


def _copy(value: object) -> Any:
    """A private plain copy of a JSON value (C-speed: a JSON round trip)."""
    return json.loads(json.dumps(value, ensure_ascii=False))


class TailReader(Protocol):
    """An adapter's reader for part of a history: ``messages`` (plain,
    recognised) read as if they stood at index ``start``, after the message
    keyed ``prev``; ``rewritable`` are ids a changed message may keep."""

    def __call__(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        start: int,
        prev: str | None,
        head: Version | None,
        keys: Keys,
        calls: Collection[str],
        rewritable: Collection[str],
        first: bool,
    ) -> list[Read]: ...


def sync_history(
    buf: Buffer,
    messages: object,
    read: TailReader,
    *,
    api: str,
    readmit: object,
    turn: int | None,
    actor: str | None,
    noun: str = "message",
    system: object = None,
) -> SyncReport:
    """``sync_messages`` of every adapter: the framework's whole history
    ``messages`` diffed against the last one synced into ``buf`` (kept per
    buffer and adapter, weakly).

    * The common prefix is found by identity (SDK objects: one is taken as
      unchanged while it is the same object — response objects are not
      edited in place) or ``==`` (against a private copy of each dict): a
      no-op sync is one pass of C-level compares, O(n) cheap work, no
      hashing and no reading. The last history is kept (about one private
      copy of each message) for as long as the buffer lives.
    * The rest is recognised (:func:`recognise`: quiesce's notes, stand-in
      results and escapes never become entries) and read with content keys
      that match the buffer's entries live first (:class:`Keys`, sync mode:
      identical messages keep their ids when an earlier copy disappears);
      what the buffer lacks is appended.
    * A message that disappeared is a removal request through the policy
      (``buf.prune``): protected entries stay and the refusal is escalated
      (``REFUSED_EDIT``); a run of them replaced in place by one new
      message is a ``Summarize`` into it, refused as a whole for protected
      entries; a new message that keeps the foreign id of one that
      disappeared, with other content, is a ``Rewrite`` of it (immutable
      entries: refused and escalated, the window keeps the original).

    Without a last history (the first sync of a buffer in this process) the
    whole list is read with counting content keys, as before. One sync per
    buffer and adapter at a time (a lock). Cancellation: nothing awaits.
    O(n) for the prefix, plus O(size) of the rest.
    """
    if not isinstance(buf, Buffer):
        raise InvalidType(f"buf must be a Buffer, not {type(buf).__name__}")
    check_readmit(readmit)
    if actor is not None:
        check_text(actor, "actor")
    if not isinstance(messages, list | tuple):
        raise InvalidType(
            f"{noun}s must be a list of dicts or SDK objects, not {type(messages).__name__}"
        )
    state = _state(buf, api)
    with state.lock:
        return _sync(buf, state, messages, read, api, readmit, turn, actor, noun, system)


def _same(m: object, seen: _Seen) -> bool:
    if m is seen.source and type(m) is not dict:
        return True
    return type(m) is dict and m == seen.raw


def _sync(
    buf: Buffer,
    state: _SyncState,
    messages: Sequence[object],
    read: TailReader,
    api: str,
    readmit: object,
    turn: int | None,
    actor: str | None,
    noun: str,
    system: object,
) -> SyncReport:
    old = state.history
    n = len(messages)
    system = to_plain(system)
    same_system = system is state.system or system == state.system
    k = 0
    if same_system:
        limit = min(n, len(old))
        while k < limit and _same(messages[k], old[k]):
            k += 1
    head = buf.head()
    live = head.live
    if k == n == len(old) and same_system:
        held: list[int] = []
        tombstoned: list[int] = []
        for i, s in enumerate(old):
            if s.ids:
                (held if any(x in live for x in s.ids) else tombstoned).append(i)
        return SyncReport((), tuple(held), tuple(tombstoned), version=buf.version)
    # -- the rest: recognise, then read with keys matching the buffer's entries
    raws: list[Mapping[str, Any]] = []
    for i in range(k, n):
        m = to_plain(messages[i])
        if not isinstance(m, Mapping):
            raise fail(
                i,
                f"must be a dict or an SDK object, not {type(m).__name__}",
                type_error=True,
                noun=noun,
            )
        raws.append(m)
    recognised = [recognise(m) for m in raws]
    before = {i for s in old[:k] for i in s.ids}
    rest = {i for s in old[k:] for i in s.ids}
    keys = Keys(
        head,
        sync=True,
        used={s.key for s in old[:k] if s.key},
        gone={s.key for s in old[k:] if s.key} if old else None,
    )
    reads_by_t: dict[int, Read] = {}
    calls: list[str] = []
    prev = next((old[j].key for j in range(k - 1, -1, -1) if old[j].key), None)
    if system is not None and not same_system:
        for r in read(
            [], start=k, prev=None, head=head, keys=keys, calls=(), rewritable=rest, first=True
        ):
            reads_by_t[-1] = r
    run: list[int] = []

    def flush_run(prev: str | None) -> str | None:
        if not run:
            return prev
        got = read(
            [recognised[t] for t in run],  # type: ignore[misc]
            start=k + run[0],
            prev=prev,
            head=head,
            keys=keys,
            calls=calls,
            rewritable=rest,
            first=False,
        )
        for t, r in zip(run, got, strict=True):
            reads_by_t[t] = r
            calls.extend(e.id for e in r.entries if e.kind is Kind.TOOL_CALL)
        run.clear()
        return got[-1].key if got else prev

    shown: dict[int, tuple[str, ...]] = {}  # messages a renderer made of several
    for t in range(len(raws)):
        form = recognised[t]
        if form is None:
            prev = flush_run(prev)  # a note: what follows it still follows prev
            continue
        ids = rendered_ids(api, head, form)
        if ids is None and STREAMED is not None and form.get("role") == "assistant":
            ids = STREAMED(buf, api, head, form)
        if ids is not None:
            prev = flush_run(prev)
            shown[t] = ids
            last = live.get(ids[-1])
            key = last.entry.meta.get("msg") if last is not None else None
            prev = key if isinstance(key, str) else prev
        else:
            run.append(t)
    flush_run(prev)
    now = {e.id for r in reads_by_t.values() for e in r.entries}
    now.update(i for ids in shown.values() for i in ids)
    gone = [j for j in range(k, len(old)) if old[j].ids and not (set(old[j].ids) & now)]
    gone_ids = [i for j in gone for i in old[j].ids if i in live and i not in before]
    # one new message standing where gone ones were (before a message the
    # buffer holds): a summary of them
    summaries: dict[int, tuple[str, ...]] = {}
    if gone_ids:
        inserted = []
        for t, r in sorted(reads_by_t.items()):
            if t < 0:
                continue
            fresh = all(e.id not in live and e.id not in head.tombs.by_id for e in r.entries)
            if fresh:
                inserted.append(t)
            elif inserted:
                break
        else:
            inserted = []  # only new messages at the end: appended, not a summary
        if len(inserted) == 1:
            r = reads_by_t[inserted[0]]
            if len(r.entries) == 1 and r.entries[0].kind not in (Kind.TOOL_CALL, Kind.TOOL_OUTPUT):
                summaries[inserted[0]] = tuple(gone_ids)
    summarized = {i for ids in summaries.values() for i in ids}
    system_read = reads_by_t.get(-1)
    reads = [r for t, r in sorted(reads_by_t.items()) if t not in summaries]
    report = admit(
        buf,
        reads,
        api=api,
        readmit=readmit,
        turn=turn,
        sync=True,
        actor=actor,
        rewritable=rest,
    )
    who = f"quiesce.adapters.{api}" if actor is None else actor
    removed: list[str] = []
    refused: list[str] = list(report.refused)
    escalations = list(report.escalations)
    for t, ids in summaries.items():
        er = buf.edit(
            EditPlan(
                [Summarize(ids, into=reads_by_t[t].entries[0])],
                reason=f"the history given to {who} replaced these messages by one",
                actor=who,
                turn=turn,
            )
        )
        if er.applied:
            removed.extend(ids)
        else:
            refused.extend(ids)
            if er.escalation is not None:
                escalations.append(er.escalation)
    to_prune = [i for i in gone_ids if i not in summarized and i in buf.head().live]
    if to_prune:
        removed_now, kept = _remove(buf, to_prune, who, turn)
        removed.extend(removed_now)
        if kept:
            refused.extend(kept)
            escalations.append(
                buf.escalate(
                    EscalationKind.REFUSED_EDIT,
                    f"{who}: the history dropped {len(kept)} "
                    f"entr{'y' if len(kept) == 1 else 'ies'} the policy keeps: "
                    + ", ".join(repr(i) for i in kept[:10]),
                    data={"ids": kept[:100], "adapter": api, "request": "sync"},
                )
            )
    # the new last history
    new_live = buf.head().live
    appended = set(report.appended) | {k + t for t in summaries}
    held = []
    tombstoned = []
    for i in range(k):
        if old[i].ids:
            (held if any(x in new_live for x in old[i].ids) else tombstoned).append(i)
    hist = old[:k]
    for t, m in enumerate(raws):
        src = messages[k + t]
        raw = _copy(m) if type(src) is dict else None
        got = reads_by_t.get(t)
        if t in shown:
            ids = shown[t]
            hist.append(_Seen(src, raw, ids, None))
            (held if any(x in new_live for x in ids) else tombstoned).append(k + t)
            continue
        if got is None:
            hist.append(_Seen(src, raw, (), None))
            continue
        ids = tuple(e.id for e in got.entries)
        hist.append(_Seen(src, raw, ids, got.key))
        if k + t not in appended and ids:
            (held if any(x in new_live for x in ids) else tombstoned).append(k + t)
    if system_read is not None and system_read.index not in appended:
        ids = tuple(e.id for e in system_read.entries)
        (held if any(x in new_live for x in ids) else tombstoned).append(system_read.index)
    state.history = hist
    state.system = _copy(system) if system is not None else None
    return SyncReport(
        tuple(sorted(appended)),
        tuple(sorted(held)),
        tuple(sorted(tombstoned)),
        report.readmitted,
        tuple(escalations),
        buf.version,
        rewritten=report.rewritten,
        removed=tuple(removed),
        refused=tuple(refused),
    )


def _remove(buf: Buffer, ids: list[str], who: str, turn: int | None) -> tuple[list[str], list[str]]:
    """Prune ``ids`` (a removal request through the policy): ``(removed,
    kept)``, ``kept`` the ids the policy refused to remove."""
    report = buf.prune(ids, reason=f"removed from the history given to {who}", actor=who, turn=turn)
    removed: list[str] = []
    kept: list[str] = []
    for pid, outcome in report.items():
        (removed if outcome.status in (Status.PRUNED, Status.DEFERRED) else kept).append(pid)
    return removed, kept
