"""Framework messages ⇄ entries, by identity: what every integration keeps true.

Each framework message is read into a :class:`Unit`. A unit becomes entries:

* its **container** entry (id ``unit.id``): the message's text (for the
  policy's classifier) as body, its kind, and as structured ``content`` the
  framework's *own* JSON dump of the whole message, so rendering gives back the
  framework's object unchanged — signed thinking blocks, images, ids, provider
  fields included (nothing is re-encoded through another API's shapes). The
  dump is part of the content hash, so two messages with the same text are
  not mistaken for a re-admission; a re-run *call* is, by its key;
* one ``TOOL_CALL`` entry per tool call (id ``<unit>/<call id>``, ``key`` the
  tool name plus its arguments, so running the same call again after it was
  pruned is a re-admission), citing its container: a call goes with its turn;
* one ``TOOL_OUTPUT`` entry per tool result, citing the call it answers (and
  its container): the pair is pruned together or not at all.

A unit that *is* one result (a LangChain ``ToolMessage``) is ``bare``: that
one entry carries the dump. (The Agents SDK's Responses items go through
:mod:`quiesce.adapters.responses` instead.)

:func:`sync_units` is idempotent: a unit whose id the buffer holds, live or
tombstoned, is not appended again (a framework handing its stale copy of a
pruned message back does not resurrect it). New units are checked whole before
anything is appended; a re-run of a pruned call (its key or content matches a
tombstone) is *recorded* with an automatic ``Override`` by default
(``readmit="record"``, the adapters' policy): the call already happened.

:func:`window` reads a snapshot back into slots (native dump, live calls, live
results) in window order, and :func:`notes` the note of removals and stale
marks, in the adapters' escaped note format (no reason, id or actor can forge
a note line). Framework messages are given back byte for byte, so text in them
that imitates a note is *not* escaped: the note is a system message or
system part of its own, which no message text can reach.

Every integration renders with *pairing*: a result whose call is
gone is dropped, a call whose result was pruned gets a stand-in result carrying
the note — every request keeps every tool call answered.

**Sync is a faithful diff** (:func:`sync_history`). Besides appending what is
new, it compares the framework's history with what the buffer holds of that
framework and turns each difference into an edit *through the policy*, never
into silent agreement:

* a message quiesce rendered (a note, a stand-in result, a message it
  rendered with pruned calls left out) is recognised by the exact text or
  fingerprint this buffer rendered and never becomes an entry;
* a message whose content changed under the same id is a ``Rewrite`` (applied
  and logged for ordinary entries; refused and escalated for immutable ones,
  and the window keeps the original);
* a message that disappeared is a ``Prune`` request: a plan over every
  dropped message first, and if the policy refuses it (one escalation), the
  same plan without the protected entries; what stays is rendered as before;
* a framework summary (``Unit.summary``: LangChain's summarization message)
  is a ``Summarize`` of what it replaced, refused for protected entries the
  same way (they stay, the summary takes the place of the rest).

A difference is acted on once: the per-buffer :class:`SyncState` remembers
what each message looked like when last synced, so a refused drop or rewrite
is escalated once, not on every turn, and a no-op sync of a history whose
message objects are the ones synced last time is one pass of identity checks.
"""

from __future__ import annotations

import operator
import weakref
from collections import deque
from collections.abc import Callable, Container, Generator, Iterable, Sequence
from dataclasses import dataclass, field, replace
from itertools import compress, count, repeat
from typing import Any

import anyio.lowlevel

from .._core.buffer import Buffer, Snapshot
from .._core.entry import Entry, Kind, content_hash, thaw
from .._core.errors import InvalidArgument
from .._core.notes import escape_field
from .._core.plan import EditPlan, Prune, Rewrite, Summarize
from .._core.policy import Policy
from .._core.records import EditReport, Tombstone
from .._protocol import AsyncBuffer, local_buffer
from ..adapters._common import (
    NOTE_PREFIX,
    Read,
    ReadmitPolicy,
    SyncReport,
    aadmit,
    admit,
    removal_note,
)

__all__ = [
    "Call",
    "Changes",
    "Result",
    "Slot",
    "SyncReport",
    "SyncState",
    "Unit",
    "aapply_changes",
    "apply_changes",
    "async_sync_history",
    "async_sync_units",
    "equal",
    "notes",
    "paired",
    "rendered",
    "same_objects",
    "state_of",
    "sync_history",
    "sync_units",
    "window",
]


@dataclass(frozen=True)
class Call:
    """A tool call a unit makes: the framework's call id, tool name, arguments text."""

    call_id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class Result:
    """A tool result a unit carries, answering ``call_id``."""

    call_id: str
    text: str


@dataclass(frozen=True)
class Unit:
    """One framework message, read: see the module docstring. ``id`` is
    ``None`` when the framework gives the message no identity (it is then
    matched by content)."""

    id: str | None
    kind: Kind
    body: str
    native: Any
    calls: tuple[Call, ...] = ()
    results: tuple[Result, ...] = ()
    bare: bool = False
    #: the framework's own summary of messages it dropped (held as ``SUMMARY``)
    summary: bool = False


@dataclass
class Slot:
    """One rendered position: the framework's dump (``None`` for a text slot,
    see :func:`window`), the entry's kind and text, its live calls, and the
    call ids its live results answer."""

    unit: str
    native: Any
    kind: Kind
    text: str
    calls: list[Call] = field(default_factory=list)
    results: list[str] = field(default_factory=list)

    @property
    def call_ids(self) -> set[str]:
        return {c.call_id for c in self.calls}


_PYDANTIC_EQ: dict[type, bool] = {}


def _plain_model(t: type) -> bool:
    """``t`` is a pydantic model class whose ``==`` is pydantic's own (it
    compares the type, ``__dict__``, private and extra values). O(mro), cached."""
    fast = _PYDANTIC_EQ.get(t)
    if fast is None:
        base = next(
            (c for c in t.__mro__ if c.__name__ == "BaseModel" and c.__module__ == "pydantic.main"),
            None,
        )
        fast = _PYDANTIC_EQ[t] = base is not None and t.__eq__ is base.__eq__
    return fast


def same_objects(a: Sequence[object], b: Sequence[object]) -> bool:
    """``a`` and ``b`` hold the very same objects, in order: O(n) identity
    checks at C speed (no Python frame per element)."""
    return len(a) == len(b) and all(map(operator.is_, a, b))


def equal(a: object, b: object) -> bool:
    """``a == b``, at C speed for two pydantic models of one plain class
    (what every framework's messages are): their field dicts, private and
    extra values compared directly, which is exactly what pydantic's own
    ``__eq__`` decides when the dicts are equal; anything else (a different
    dict, another class) falls back to ``==``. A checkpointer hands back a
    copy of every message each turn, so this runs once per message per
    turn: O(size of the message), no Python frame per field."""
    t = type(a)
    if (
        t is type(b)
        and _plain_model(t)
        and a.__dict__ == b.__dict__
        and getattr(a, "__pydantic_private__", None) == getattr(b, "__pydantic_private__", None)
        and getattr(a, "__pydantic_extra__", None) == getattr(b, "__pydantic_extra__", None)
    ):
        return True
    return a == b


def _held(snap: Snapshot, entry_id: str) -> Entry | Tombstone | None:
    """The live entry or the tombstone of ``entry_id`` in ``snap``, ``None``
    if it never existed (a new message's id: the common case, so no
    exception is raised for it). O(log n)."""
    found = snap.get(entry_id)
    return found if found is not None else snap.tombstones.get(entry_id)


def _entries(unit: Unit, framework: str, call_entry: dict[str, str]) -> list[Entry]:
    """The entries of a new unit (see the module docstring); records its
    calls in ``call_entry``, so its results (and later ones) cite them."""
    assert unit.id is not None
    meta_base = {"fw": framework, "unit": unit.id}
    out: list[Entry] = []
    if unit.bare:
        if len(unit.calls) + len(unit.results) != 1:
            raise InvalidArgument(f"{framework}: a bare unit is one call or one result")
    else:
        kind = Kind.SUMMARY if unit.summary else unit.kind
        out.append(Entry(unit.id, kind, unit.body, (), None, None, meta_base, unit.native))
    native = unit.native if unit.bare else None
    for c in unit.calls:
        eid = unit.id if unit.bare else f"{unit.id}/{c.call_id}"
        key = f"{c.name} {c.arguments}"
        meta: dict[str, Any] = {**meta_base, "call_id": c.call_id, "tool": c.name}
        refs = () if unit.bare else (unit.id,)
        out.append(Entry(eid, Kind.TOOL_CALL, key, refs, None, key, meta, native))
        call_entry[c.call_id] = eid
    for r in unit.results:
        eid = unit.id if unit.bare else f"{unit.id}/{r.call_id}/result"
        meta = {**meta_base, "result_of": r.call_id}
        refs_list = [] if unit.bare else [unit.id]
        target = call_entry.get(r.call_id)
        if target is not None:
            refs_list.insert(0, target)
        out.append(Entry(eid, Kind.TOOL_OUTPUT, r.text, tuple(refs_list), None, None, meta, native))
    return out


def _primary(unit: Unit) -> tuple[str, Any]:
    """The body and content of the entry that carries a unit's dump."""
    if unit.bare and unit.calls:
        c = unit.calls[0]
        return f"{c.name} {c.arguments}", unit.native
    if unit.bare:
        return unit.results[0].text, unit.native
    return unit.body, unit.native


def _primaries(snap: Snapshot) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """Content hash -> ids of the live entries carrying a dump, and of the tombstones."""
    live: dict[str, list[str]] = {}
    for e in snap:
        if e.content is not None and e.meta.get("unit") == e.id:
            live.setdefault(e.content_hash, []).append(e.id)
    tombs: dict[str, list[str]] = {}
    for t in sorted(snap.tombstones.values(), key=lambda t: t.version):
        tombs.setdefault(t.content_hash, []).append(t.id)
    return live, tombs


def sync_units(
    buf: Buffer,
    units: Sequence[Unit],
    *,
    framework: str,
    readmit: ReadmitPolicy = "record",
    turn: int | None = None,
    new_ids: str = "#q:",
    actor: str | None = None,
) -> SyncReport:
    """Append the units the buffer does not hold yet (see the module docstring).

    A unit with an ``id`` is matched by it. A unit without one (the framework
    gives its messages no identity) is matched by content: the content hash
    of its dump against the live entries, then against the tombstones (a
    stale copy of a pruned message is not re-appended), each held entry
    matching at most one message; an unmatched one gets the id
    ``<new_ids><head version>.<position>`` (the prefix starts with ``#``,
    the reserved character of generated ids: no framework id takes it).

    Appending is the adapters' :func:`~quiesce.adapters._common.admit`: every
    re-admission is decided before the first append (``readmit`` as in the
    adapters: ``"record"`` appends a re-run with an automatic, logged
    ``Override`` and escalates ``OSCILLATION`` on its second cycle), and the
    result is the adapters' :class:`SyncReport` (positions in ``units``).
    Synchronous and without awaits, so on one event loop it is atomic with
    respect to other coroutines. O(u log n) for u units over n entries.
    Raises :class:`InvalidArgument` (nothing appended) if two new units share
    an id or an entry cannot be built.
    """
    version = buf.version
    reads = _reads(buf, units, framework=framework, new_ids=new_ids)
    report = admit(buf, reads, **_admit_options(framework, readmit, turn, actor))
    _extend_index(buf, framework, version, reads, report)
    return report


async def async_sync_units(
    buf: AsyncBuffer,
    units: Sequence[Unit],
    *,
    framework: str,
    readmit: ReadmitPolicy = "record",
    turn: int | None = None,
    new_ids: str = "#q:",
    actor: str | None = None,
) -> SyncReport:
    """:func:`sync_units` for code on the event loop, on any
    :class:`~quiesce.AsyncBuffer` (a shared buffer included): the same
    matching against a local snapshot, then the adapters'
    :func:`~quiesce.adapters._common.aadmit` (its atomicity and cancellation
    notes hold). Always a checkpoint; never touches a disk on the loop."""
    version = buf.version
    reads = _reads(buf, units, framework=framework, new_ids=new_ids)
    report = await aadmit(buf, reads, **_admit_options(framework, readmit, turn, actor))
    _extend_index(buf, framework, version, reads, report)
    return report


def _extend_index(
    buf: Buffer | AsyncBuffer, framework: str, version: int, reads: list[Read], report: SyncReport
) -> None:
    """Keep the content-hash index of ``framework``'s sync state current
    after an admission of ``reads`` that began at ``version``: when the
    buffer moved by exactly the one version of this batch (no other writer
    came between) and nothing was re-admitted, the new messages' hashes are
    added (O(new)); else the index is dropped and the next sync by content
    rebuilds it (O(n)). So a context that adds one message at a time pays
    O(1) look-ups per message, not a scan of the buffer."""
    state = state_of(buf, framework)
    index = state.index
    if index is None or index[0] != version:
        return
    positions = set(report.appended)
    appended = [e for r in reads for e in r.entries if r.index in positions]
    if not appended:
        return
    state.index = None
    if buf.version != version + 1 or report.readmitted or local_buffer_of(buf) is None:
        return
    for e in appended:
        if e.content is not None and e.meta.get("unit") == e.id:
            index[1].setdefault(e.content_hash, []).append(e.id)
    state.index = (buf.version, index[1], index[2])


def _reads(
    buf: Buffer | AsyncBuffer, units: Sequence[Unit], *, framework: str, new_ids: str
) -> list[Read]:
    """The units matched against a snapshot of ``buf`` and read into entries
    (the first half of :func:`sync_units`). O(u log n + n) for u units."""
    reads: list[Read] = []
    state = state_of(buf, framework)
    with buf.snapshot() as snap:
        call_entry = _Calls(snap, state.calls)
        by_content = any(u.id is None for u in units)
        live_by_hash: dict[str, list[str]]
        tombs_by_hash: dict[str, list[str]]
        if not by_content:
            live_by_hash, tombs_by_hash = {}, {}
        else:
            if state.index is None or state.index[0] != snap.version:
                state.index = (snap.version, *_primaries(snap))
            live_by_hash, tombs_by_hash = _Index(state.index[1]), _Index(state.index[2])
        seen: set[str] = set()
        for position, unit in enumerate(units):
            if unit.id is None:
                body, native = _primary(unit)
                h = content_hash(body, native)
                if live_by_hash.get(h):
                    unit = replace(unit, id=live_by_hash[h].pop(0))
                elif tombs_by_hash.get(h):
                    unit = replace(unit, id=tombs_by_hash[h].pop(0))
                else:
                    new_id = f"{new_ids}{snap.version}.{position}"
                    while _held(snap, new_id) is not None or new_id in seen:
                        new_id += "'"
                    unit = replace(unit, id=new_id)
            assert unit.id is not None
            found = _held(snap, unit.id)
            if found is None:
                if unit.id in seen:
                    raise InvalidArgument(f"{framework}: message id {unit.id!r} appears twice")
                seen.add(unit.id)
            entries = _entries(unit, framework, call_entry)
            reads.append(Read(position, unit.id, entries))
    return reads


def digest(unit: Unit) -> str:
    """The fingerprint of a unit as the framework handed it: the content hash
    of the entry that carries its dump. O(size of the message)."""
    return content_hash(*_primary(unit))


@dataclass
class Seen:
    """One message of the last synced history: the framework's object, the
    unit id it was read as (``None``: a message quiesce rendered, not an
    entry), and its digest then (``None``: not computed, the object is the one
    quiesce rendered)."""

    obj: object
    unit: str | None
    digest: str | None


class SyncState:
    """What one buffer holds of one framework's history, as last synced.

    Invariants: ``seen`` is the last history synced (or rendered) in order;
    ``digests`` maps a unit id to the digest of the message as the framework
    last handed it (a difference from it is the framework's own edit);
    ``alternates`` holds, per unit id, digests of forms quiesce rendered of it
    (calls left out, a note added): handed back, they are not edits;
    ``rendered`` holds digests of messages quiesce made that are no entry
    (notes, stand-in results); ``refused`` the ids whose drop the policy
    refused (they stay, and are not requested again); ``objects`` the last
    object synced under each framework id. ``cache`` is the integration's render cache
    (entry → framework object), rebuilt on every render so it never outgrows
    the window. Memory: O(history).
    """

    def __init__(self) -> None:
        self.seen: list[Seen] = []
        self.digests: dict[str, str] = {}
        self.alternates: dict[str, set[str]] = {}
        self.rendered: set[str] = set()
        self.refused: set[str] = set()
        self.objects: dict[str, Seen] = {}
        self.calls: dict[str, str] = {}
        #: (version, live content hash → ids, tombstone hash → ids) of the
        #: last sync that matched messages by content
        self.index: tuple[int, dict[str, list[str]], dict[str, list[str]]] | None = None
        self.natives: dict[str, tuple[Entry, Any]] = {}
        self.cache: dict[str, tuple[Any, ...]] = {}
        #: the entries of the last render and its framework objects, unpaired
        self.last_entries: list[Entry] = []
        self.last_units: set[str] = set()
        self.last_render: list[Any] = []
        #: how many objects of the last render the current one kept, and the
        #: paired output up to a settled point (see :func:`paired`)
        self.kept = 0
        self.pair_memo: tuple[int, list[Any]] = (0, [])
        #: syncs (and renders recorded with :meth:`rendered_as`) so far, and
        #: how many leading messages of the last sync's history are the
        #: previous history's objects or equal copies of them, in place
        self.generation = 0
        self.prefix = 0

    def forget(self) -> None:
        """Forget what was synced (after a sync whose appends were cut short):
        the next sync reads every message again against the buffer. O(1)."""
        self.seen = []
        self.objects = {}
        self.index = None

    def rendered_as(self, items: Sequence[tuple[object, str | None]]) -> None:
        """Record the list quiesce rendered (object, unit id or ``None``) as
        the history the framework now holds: handed back unchanged, it is one
        pass of identity checks. O(len(items))."""
        old = self.seen
        n = len(old)
        self.generation += 1
        self.prefix = 0
        self.seen = [
            old[i] if i < n and old[i].obj is obj else Seen(obj, unit, None)
            for i, (obj, unit) in enumerate(items)
        ]


_STATES: weakref.WeakKeyDictionary[object, dict[str, SyncState]] = weakref.WeakKeyDictionary()


def local_buffer_of(buf: Buffer | AsyncBuffer) -> Buffer | None:
    """The in-process buffer of ``buf`` (itself, or behind an async face)."""
    return buf if isinstance(buf, Buffer) else local_buffer(buf)


def state_of(buf: Buffer | AsyncBuffer, framework: str) -> SyncState:
    """The :class:`SyncState` of ``framework`` on ``buf`` (made on first use;
    it lives as long as the buffer). Keyed by the in-process buffer behind an
    async face (a face is made per integration), else the buffer itself. O(1)."""
    local = buf if isinstance(buf, Buffer) else local_buffer(buf)
    key: object = buf if local is None else local
    per = _STATES.get(key)
    if per is None:
        per = _STATES[key] = {}
    state = per.get(framework)
    if state is None:
        state = per[framework] = SyncState()
    return state


@dataclass
class Changes:
    """The framework's own edits found by :func:`sync_history`, to settle
    through the policy (:func:`apply_changes`, :func:`aapply_changes`).

    ``rewrites``: (entry id, new body) of messages changed under their id;
    ``dropped``: unit ids gone from the history, in window order;
    ``summary``: the entry of a framework summary replacing ``dropped``
    (``None``: they were dropped without one)."""

    rewrites: list[tuple[str, str]] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    summary: Entry | None = None
    reason: str = "dropped"
    actor: str | None = None
    state: SyncState | None = None

    def __bool__(self) -> bool:
        return bool(self.rewrites or self.dropped or self.summary is not None)


def sync_history(
    buf: Buffer,
    messages: Sequence[object],
    read: Callable[[int, object], Unit | None],
    *,
    framework: str,
    readmit: ReadmitPolicy = "record",
    turn: int | None = None,
    new_ids: str = "#q:",
    actor: str | None = None,
    ident: Callable[[object], str | None] | None = None,
) -> tuple[SyncReport, Changes]:
    """Sync the framework's whole history ``messages`` (see the module
    docstring): append what is new, and return the framework's own edits.

    ``read(index, message)`` reads one message into a :class:`Unit` (``None``:
    a message quiesce rendered that is no entry; it raises on bad input).
    Messages that are the very objects of the last sync (or render), in the
    same order, are not read again: a no-op sync is O(n) identity checks,
    a sync after k new messages O(n + k · size). All messages read are
    checked before anything is appended (bad input appends nothing).
    ``ident(message)`` gives the framework's own id of a message (``None``:
    it has none); a message whose id was synced before with an equal object
    (``==``: a checkpointer's copy) is not read again either, so a reloaded
    history costs O(n) comparisons, not O(n) dumps. The
    :class:`Changes` returned are not applied: the caller settles them with
    :func:`apply_changes` (sync) or :func:`aapply_changes` (on an event loop:
    the durable part off the loop). Synchronous; nothing awaits.
    """
    gen = _sync_history(
        buf, messages, read, framework=framework, new_ids=new_ids, ident=ident, pause=False
    )
    options = _admit_options(framework, readmit, turn, actor)
    try:
        reads = next(gen)
        while True:
            reads = gen.send(None if reads is None else admit(buf, reads, **options))
    except StopIteration as stop:
        done: tuple[SyncReport, Changes] = stop.value
        done[1].actor = actor
        return done


async def async_sync_history(
    buf: AsyncBuffer,
    messages: Sequence[object],
    read: Callable[[int, object], Unit | None],
    *,
    framework: str,
    readmit: ReadmitPolicy = "record",
    turn: int | None = None,
    new_ids: str = "#q:",
    actor: str | None = None,
    ident: Callable[[object], str | None] | None = None,
) -> tuple[SyncReport, Changes]:
    """:func:`sync_history` for code on the event loop, on any
    :class:`~quiesce.AsyncBuffer`: the same diff against a local snapshot,
    the appends through :func:`~quiesce.adapters._common.aadmit` (never a
    disk write on the loop). Always a checkpoint when something is appended.
    Cancelled during the appends, the sync state is forgotten (the next sync
    reads the whole history again against what the buffer holds), so nothing
    is taken as synced that may not be."""
    gen = _sync_history(
        buf, messages, read, framework=framework, new_ids=new_ids, ident=ident, pause=True
    )
    options = _admit_options(framework, readmit, turn, actor)
    try:
        reads = next(gen)
        while True:
            if reads is None:  # a pause: nothing is changed yet
                try:
                    await anyio.lowlevel.checkpoint()
                except BaseException:
                    gen.close()
                    raise
                reads = gen.send(None)
                continue
            try:
                report = await aadmit(buf, reads, **options)
            except BaseException:
                gen.close()
                state_of(buf, framework).forget()
                raise
            reads = gen.send(report)
    except StopIteration as stop:
        done: tuple[SyncReport, Changes] = stop.value
        done[1].actor = actor
        return done


def _admit_options(
    framework: str, readmit: ReadmitPolicy, turn: int | None, actor: str | None
) -> dict[str, Any]:
    """The keyword arguments a sync passes to ``admit`` / ``aadmit``."""
    return {
        "api": f"integrations.{framework}",
        "readmit": readmit,
        "turn": turn,
        "sync": True,
        "actor": actor,
    }


#: Messages compared (or read) per step of a sync on the event loop: a
#: checkpoint between steps (well under 1 ms of work each).
SYNC_STEP = 128
#: New messages read (converted to units) per step of a sync on the loop.
_READ_STEP = 32

_DICT = operator.attrgetter("__dict__")
_OBJ = operator.attrgetter("obj")
_UNIT = operator.attrgetter("unit")
_PRIVATE = operator.attrgetter("__pydantic_private__")
_EXTRA = operator.attrgetter("__pydantic_extra__")


def _equal_prefix(
    seen: list[Seen],
    messages: Sequence[object],
    k: int,
    n: int,
) -> int:
    """``k``, or ``n`` when every message in ``messages[k:n]`` is an equal
    copy (:func:`equal`) of the one synced at its position last time — the
    common turn with a checkpointer, which hands back a new copy of every
    message. The copies then take the old objects' places (``seen[i].obj``,
    which is also the object synced under the message's id).
    All or nothing: any difference (a changed,
    moved or dropped message, another class) leaves ``k``, and the caller
    compares message by message. O(n) with no Python frame per message:
    the types, field dicts, private and extra values are compared as lists,
    in C."""
    if k >= n:
        return k
    olds = list(map(_OBJ, seen[k:n]))
    news = list(messages[k:n])
    if not _equal_copies(olds, news):
        return k
    deque(map(setattr, seen[k:n], repeat("obj"), news), maxlen=0)  # in C
    return n


def _equal_prefix_steps(
    seen: list[Seen], messages: Sequence[object], k: int, n: int
) -> Generator[None, None, int]:
    """:func:`_equal_prefix` in steps of :data:`SYNC_STEP` messages,
    yielding (a pause) after each. A step whose copies are all equal lets
    them take the old objects' places at once (an equal copy stands for the
    message as well as the object it replaces, so a step that finds a
    difference later leaves nothing wrong behind)."""
    start = k
    while start < n:
        end = min(start + SYNC_STEP, n)
        olds, news = list(map(_OBJ, seen[start:end])), list(messages[start:end])
        if not _equal_copies(olds, news):
            return k
        deque(map(setattr, seen[start:end], repeat("obj"), news), maxlen=0)  # in C
        start = end
        yield None
    return n


def _equal_copies(olds: list[object], news: list[object]) -> bool:
    """Each of ``news`` is an equal copy of the same place's ``olds``
    (pydantic models of one plain class, compared as lists in C; see
    :func:`equal`). O(n), no Python frame per message."""
    types = list(map(type, news))
    if types != list(map(type, olds)) or not all(map(_plain_model, set(types))):
        return False
    try:
        return (
            list(map(_DICT, news)) == list(map(_DICT, olds))
            and list(map(_PRIVATE, news)) == list(map(_PRIVATE, olds))
            and list(map(_EXTRA, news)) == list(map(_EXTRA, olds))
        )
    except AttributeError:  # a model built without pydantic's __init__
        return False


def _sync_history(
    buf: Buffer | AsyncBuffer,
    messages: Sequence[object],
    read: Callable[[int, object], Unit | None],
    *,
    framework: str,
    new_ids: str,
    ident: Callable[[object], str | None] | None,
    pause: bool,
) -> Generator[list[Read] | None, SyncReport | None, tuple[SyncReport, Changes]]:
    """The body of :func:`sync_history`: yields the reads to admit (at most
    once), is sent the admission's report, returns the sync's result. With
    ``pause`` it also yields ``None`` (sent ``None`` back) between steps of
    :data:`SYNC_STEP` compared or :data:`_READ_STEP` read messages and
    before the diff, each before anything is changed; when another sync of
    the buffer ran during a pause, the diff starts again."""
    while True:
        done = yield from _sync_once(
            buf, messages, read, framework=framework, new_ids=new_ids, ident=ident, pause=pause
        )
        if done is not None:
            return done


def _sync_once(
    buf: Buffer | AsyncBuffer,
    messages: Sequence[object],
    read: Callable[[int, object], Unit | None],
    *,
    framework: str,
    new_ids: str,
    ident: Callable[[object], str | None] | None,
    pause: bool,
) -> Generator[list[Read] | None, SyncReport | None, tuple[SyncReport, Changes] | None]:
    """One try of :func:`_sync_history`: ``None`` if the sync state moved
    during a pause (nothing was changed)."""
    state = state_of(buf, framework)
    seen = state.seen
    n = min(len(seen), len(messages))
    # the first place whose message is not the object synced there, in C
    k = next(compress(count(), map(operator.is_not, messages[:n], map(_OBJ, seen))), n)
    if pause and n - k > SYNC_STEP:
        k = yield from _equal_prefix_steps(seen, messages, k, n)
        if state.seen is not seen:  # another sync of this buffer ran meanwhile
            return None
    else:
        k = _equal_prefix(seen, messages, k, n)
    state.generation += 1
    state.prefix = k
    head = buf.head()
    held: list[int] = []
    tombstoned: list[int] = []
    taken: set[str] = set()
    if k:
        units = list(map(_UNIT, seen[:k]))
        held = list(compress(range(k), map(operator.is_not, units, repeat(None))))
        tombs_by_id = head.tombs.by_id
        if tombs_by_id:  # one C-level look-up per unit, the tombstones only for the rest
            live_map = head.live
            gone = compress(range(k), map(operator.not_, map(live_map.__contains__, units)))
            tombstoned = [i for i in gone if units[i] in tombs_by_id]
            if tombstoned:
                dead = set(tombstoned)
                held = [i for i in held if i not in dead]
    if k == len(seen) == len(messages):
        report = SyncReport((), tuple(held), tuple(tombstoned), (), (), head.number)
        return report, Changes()
    pairs: list[tuple[int, object, Unit | None]] = []
    objects = state.objects
    fresh: list[Seen | None] = []
    live, tombs = head.live, head.tombs.by_id
    for i in range(k, len(messages)):
        m = messages[i]
        mid = ident(m) if ident is not None else None
        prev = objects.get(mid) if mid is not None else None
        if prev is not None and (prev.obj is m or equal(prev.obj, m)):
            # Equal to the object synced under this id before: unchanged.
            uid = prev.unit
            assert uid is not None
            if uid in taken:
                raise InvalidArgument(f"{framework}: message id {uid!r} appears twice")
            taken.add(uid)
            if uid in live:
                held.append(i)
            elif uid in tombs:
                tombstoned.append(i)
            prev.obj = m  # the next sync's identity check sees this copy
            fresh.append(prev)
            continue
        pairs.append((i, m, read(i, m)))
        fresh.append(None)
        if pause and len(pairs) % _READ_STEP == 0:
            yield None  # reading is pure: nothing is changed yet
            if state.seen is not seen:
                return None
    if pause and pairs:
        yield None  # the diff against the buffer is a step of its own
        if state.seen is not seen:
            return None
    if pairs:
        report, changes, diffed = yield from _diff(buf, state, pairs, framework, new_ids, taken)
        it = iter(diffed)
        fresh = [f if f is not None else next(it) for f in fresh]
        report = replace(
            report,
            held=tuple(sorted({*held, *report.held})),
            tombstoned=tuple(sorted({*tombstoned, *report.tombstoned})),
        )
    else:
        report = SyncReport((), tuple(held), tuple(tombstoned), (), (), head.number)
        changes = Changes(reason=_reason(framework))
    done = [f for f in fresh if f is not None]
    if ident is not None:
        for f, (_, m, _u) in zip(diffed if pairs else [], pairs, strict=True):
            mid = ident(m) if f.unit is not None else None
            if mid is not None:
                objects[mid] = f
    fresh_seen = done
    kept = {s.unit for s in fresh_seen if s.unit is not None}
    before = seen[k:] if seen else _baseline(buf, framework)
    changes.dropped = [
        s.unit
        for s in before
        if s.unit is not None and s.unit not in kept and s.unit not in state.refused
    ]
    changes.state = state
    state.seen = seen[:k] + fresh_seen
    return report, changes


class _Calls(dict[str, str]):
    """Call id → its live ``TOOL_CALL`` entry, for the results a sync reads.

    Backed by the state's cache (``known``), checked against the snapshot on
    each look-up; a miss scans the snapshot once (O(n)) and refreshes the
    cache, so a sync that reads no result, or results of known calls, costs
    O(1) per look-up."""

    def __init__(self, snap: Snapshot, known: dict[str, str]) -> None:
        super().__init__()
        self.snap = snap
        self.known = known
        self.scanned = False

    def get(self, call_id: str, default: Any = None) -> Any:
        if call_id in self:
            return self[call_id]
        eid = self.known.get(call_id)
        live = eid is not None and isinstance(_held(self.snap, eid), Entry)
        if not live and not self.scanned:
            self.scanned = True
            self.known.clear()
            self.known.update(
                (str(e.meta["call_id"]), e.id)
                for e in self.snap
                if e.kind is Kind.TOOL_CALL and "call_id" in e.meta
            )
            eid = self.known.get(call_id)
        if eid is not None and isinstance(_held(self.snap, eid), Entry):
            return eid
        return default

    def __setitem__(self, call_id: str, eid: str) -> None:
        super().__setitem__(call_id, eid)
        self.known[call_id] = eid


class _Index(dict[str, list[str]]):
    """A per-sync view of a content-hash index: a key's ids are copied from
    the shared ``base`` on first use, so a sync can pop matches without
    changing the index kept for the next sync. O(1) per look-up."""

    def __init__(self, base: dict[str, list[str]]) -> None:
        super().__init__()
        self.base = base

    def __missing__(self, key: str) -> list[str]:
        ids = self[key] = list(self.base.get(key, ()))
        return ids

    def get(self, key: str, default: Any = None) -> Any:
        return self[key]


def _reason(framework: str) -> str:
    return f"{framework}: removed from the framework's history"


def _baseline(buf: Buffer | AsyncBuffer, framework: str) -> list[Seen]:
    """The history the buffer holds of ``framework`` when this process has
    synced none yet (a reopened durable buffer): its live messages. O(n)."""
    with buf.snapshot() as snap:
        return [
            Seen(None, e.id, None)
            for e in snap
            if e.meta.get("fw") == framework and e.meta.get("unit") == e.id
        ]


def _members(snap: Snapshot, units: Sequence[str]) -> list[str]:
    """The entry ids of ``units`` (each message's own entry, its calls and
    results), in window order: a message leaves with its parts. O(n)."""
    wanted = set(units)
    return [e.id for e in snap if e.id in wanted or e.meta.get("unit") in wanted]


def _diff(
    buf: Buffer | AsyncBuffer,
    state: SyncState,
    pairs: Sequence[tuple[int, object, Unit | None]],
    framework: str,
    new_ids: str,
    taken: set[str],
) -> Generator[list[Read], SyncReport, tuple[SyncReport, Changes, list[Seen]]]:
    """Read ``pairs`` (the messages not matched by identity or equality)
    against a snapshot: appends, held and tombstoned positions, and the
    framework's edits. ``taken``: ids already matched in this history."""
    changes = Changes(reason=_reason(framework))
    fresh: list[Seen] = []
    reads: list[Read] = []
    held: list[int] = []
    tombstoned: list[int] = []
    with buf.snapshot() as snap:
        call_entry = _Calls(snap, state.calls)
        by_content = any(u is not None and u.id is None for _, _, u in pairs)
        if not by_content:
            index: tuple[int, dict[str, list[str]], dict[str, list[str]]] | None = None
        elif state.index is not None and state.index[0] == snap.version:
            index = state.index
        else:
            index = (snap.version, *_primaries(snap))
        live_by_hash = _Index(index[1] if index is not None else {})
        tombs_by_hash = _Index(index[2] if index is not None else {})
        ids = taken
        for position, m, unit in pairs:
            if unit is None:
                fresh.append(Seen(m, None, None))
                continue
            d = digest(unit)
            if d in state.rendered and unit.id is None:
                fresh.append(Seen(m, None, d))  # a note or stand-in quiesce rendered
                continue
            if unit.id is None:
                if live_by_hash.get(d):
                    unit = replace(unit, id=live_by_hash[d].pop(0))
                elif tombs_by_hash.get(d):
                    unit = replace(unit, id=tombs_by_hash[d].pop(0))
                else:
                    new_id = f"{new_ids}{snap.version}.{position}"
                    while _held(snap, new_id) is not None or new_id in ids:
                        new_id += "'"
                    unit = replace(unit, id=new_id)
            uid = unit.id
            assert uid is not None
            if uid in ids:
                raise InvalidArgument(f"{framework}: message id {uid!r} appears twice")
            ids.add(uid)
            fresh.append(Seen(m, uid, d))
            found = _held(snap, uid)
            if found is None:
                reads.append(Read(position, uid, _entries(unit, framework, call_entry)))
                state.digests[uid] = d
                continue
            if not isinstance(found, Entry):
                tombstoned.append(position)
                continue  # a stale copy of a pruned message: not resurrected
            held.append(position)
            before = state.digests.get(uid)
            if before is None:
                before = found.content_hash if found.content is not None else d
            state.digests[uid] = d
            if d == before or d in state.alternates.get(uid, ()):
                continue
            # The framework changed this message under its id.
            entries = _entries(unit, framework, call_entry)
            body = _primary(unit)[0]
            if body != found.body:
                changes.rewrites.append((uid, body))
            extra = [e for e in entries if e.id != uid and _held(snap, e.id) is None]
            if extra:
                reads.append(Read(position, uid, extra))
            if unit.summary and changes.summary is None:
                changes.summary = entries[0]
    report = yield reads  # admitted by the caller (admit, or aadmit on a loop)
    state.index = None
    if index is not None:
        added = [
            e
            for r in reads
            for e in r.entries
            if e.content is not None and e.meta.get("unit") == e.id
        ]
        count = sum(len(r.entries) for r in reads)
        if buf.version == index[0] + count and not report.readmitted:
            # Only our appends since the index was read: extend it.
            for e in added:
                index[1].setdefault(e.content_hash, []).append(e.id)
            state.index = (buf.version, index[1], index[2])
    summaries = [r for r in reads if r.entries and r.entries[0].kind is Kind.SUMMARY]
    if summaries and changes.summary is None:
        changes.summary = summaries[0].entries[0]
    if held or tombstoned:
        report = replace(
            report,
            held=tuple(sorted({*report.held, *held})),
            tombstoned=tuple(sorted({*report.tombstoned, *tombstoned})),
        )
    return report, changes, fresh


def _policy(buf: Buffer | AsyncBuffer) -> Policy:
    """The policy deciding ``buf``'s edits: the in-process buffer's, else the
    shared buffer's (every member runs the same one), else the default."""
    local = buf if isinstance(buf, Buffer) else local_buffer(buf)
    if local is not None:
        return local.policy
    policy = getattr(buf, "_policy", None)
    return policy if isinstance(policy, Policy) else Policy()


def _protected(buf: Buffer | AsyncBuffer, snap: Snapshot, ids: Sequence[str]) -> set[str]:
    out: set[str] = set()
    policy = _policy(buf)
    for i in ids:
        e = _held(snap, i)
        if isinstance(e, Entry) and (policy.is_immutable(e) or policy.protection(e) is not None):
            out.add(i)
    return out


def _live(snap: Snapshot, ids: Sequence[str], staged: Container[str]) -> list[str]:
    return [i for i in ids if i not in staged and isinstance(_held(snap, i), Entry)]


class _Settle:
    """The plans that settle :class:`Changes`, one after the other: each
    rewrite on its own; the drop (or summary) over every dropped message, and
    after a refusal the same without the protected ones. A generator of
    plans fed each plan's report, shared by the sync and async paths."""

    def __init__(self, buf: Buffer | AsyncBuffer, changes: Changes) -> None:
        self.buf = buf
        self.changes = changes

    def plans(self) -> Generator[EditPlan, EditReport, None]:
        c = self.changes
        for uid, body in c.rewrites:
            yield EditPlan([Rewrite(uid, body)], reason=c.reason, actor=c.actor)
        if not c.dropped:
            return
        with self.buf.snapshot() as snap:
            dropped = _live(snap, _members(snap, c.dropped), self.buf.staged())
            protected = _protected(self.buf, snap, dropped)
            summary_live = c.summary is not None and isinstance(_held(snap, c.summary.id), Entry)
        if not dropped:
            return
        tries = [dropped]
        rest = [i for i in dropped if i not in protected]
        if protected and rest:
            tries.append(rest)
        for ids in tries:
            if c.summary is not None and summary_live:
                # The summary was appended as an entry: it replaces ``ids``
                # by taking the place of the first of them.
                ops: list[Any] = [Summarize((*ids, c.summary.id), into=_into(c.summary))]
            else:
                ops = [Prune(i) for i in ids]
            report = yield EditPlan(ops, reason=c.reason, actor=c.actor)
            if report.applied:
                return
        if c.summary is not None and summary_live:
            # Nothing could be summarized: the summary message does not stay
            # beside the messages it paraphrases (unless the policy keeps it).
            why = f"{c.reason}: summary refused"
            yield EditPlan([Prune(c.summary.id)], reason=why, actor=c.actor)


def _into(summary: Entry) -> Entry:
    """The summary entry again, under a new id (the covered summary message
    leaves with what it replaced)."""
    return replace(summary, id=f"{summary.id}#summary")


def _refused(buf: Buffer | AsyncBuffer, changes: Changes) -> None:
    """Remember the dropped ids the policy kept: they are not requested again."""
    if changes.state is None or not changes.dropped:
        return
    with buf.snapshot() as snap:
        kept = _live(snap, changes.dropped, buf.staged())
    changes.state.refused.update(kept)


def apply_changes(buf: Buffer, changes: Changes) -> list[EditReport]:
    """Settle ``changes`` through the policy with the sync :meth:`Buffer.edit`
    (for code not on an event loop). Each refusal is logged and escalated by
    the buffer. O(plans · edit)."""
    gen = _Settle(buf, changes).plans()
    reports: list[EditReport] = []
    try:
        plan = next(gen)
        while True:
            reports.append(buf.edit(plan))
            plan = gen.send(reports[-1])
    except StopIteration:
        _refused(buf, changes)
        return reports


async def aapply_changes(buf: AsyncBuffer, changes: Changes) -> list[EditReport]:
    """:func:`apply_changes` for code on an event loop: each plan goes through
    the :class:`~quiesce.AsyncBuffer`'s ``aedit``, so no log write runs on
    the loop. Cancellation leaves each plan applied or refused as a whole;
    the plans after it are not submitted."""
    gen = _Settle(buf, changes).plans()
    reports: list[EditReport] = []
    try:
        plan = next(gen)
    except StopIteration:
        return reports
    while True:
        report = await buf.aedit(plan)
        reports.append(report)
        try:
            plan = gen.send(report)
        except StopIteration:
            _refused(buf, changes)
            return reports


def window(
    snap: Snapshot, framework: str | None = None, state: SyncState | None = None
) -> list[Slot]:
    """The live messages of ``snap`` in window order, as slots. O(n).

    With ``state``, an entry's dump is thawed once and reused while the entry
    is the same (entries are immutable: a change is a new entry object), so
    a render after appends costs O(n) dictionary look-ups plus the new dumps.

    An entry with its ``content`` gives a native slot (the framework's own
    dump; its live calls and results are collected into it). An entry without
    one — a summary, an entry a ``Rewrite`` changed (which drops the old
    structured form), or one appended by other code — gives a text slot:
    ``native`` is ``None`` and the framework renders ``text`` as a plain
    message of that kind, with the calls it carries rebuilt from their keys.
    With ``framework`` given, a unit another framework stored (another agent
    on the same shared conversation) is a text slot too: its dump is that
    framework's, which this one cannot read.
    """
    return window_of(snap, state, framework=framework)


def rendered(
    snap: Snapshot,
    state: SyncState,
    rebuild: Callable[[Slot], Any],
    framework: str | None = None,
) -> list[Any]:
    """The framework objects of ``snap``'s window, unpaired: ``rebuild`` of
    each slot, reusing what the last render of ``state`` built.

    When the snapshot's entries extend the last render's (the same entry
    objects, in order, then new ones: the common turn), only the new slots are
    rebuilt — unless a new entry is a part (a call or result) of a message
    shown before. Otherwise every slot is rebuilt except those whose dump,
    calls, results and text are the ones cached. ``rebuild`` must give
    objects nobody mutates (or the caller copies them). O(n) identity checks
    plus the rebuilt slots. Returns a new list."""
    entries = list(snap)
    prev = state.last_entries
    units = state.last_units
    if len(prev) <= len(entries) and all(map(operator.is_, prev, entries)):  # C-level
        tail = entries[len(prev) :]
        if not any(e.meta.get("unit") in units and e.meta.get("unit") != e.id for e in tail):
            slots = window_of(tail, state, keep=False, framework=framework)
            state.kept = len(state.last_render)
            out = [*state.last_render, *(m for m in map(rebuild, slots) if m is not None)]
            state.last_entries, state.last_render = entries, out
            units.update(s.unit for s in slots)
            return list(out)
    state.kept = 0
    old, cache = state.cache, {}
    out = []
    slots = window_of(entries, state, framework=framework)
    for slot in slots:
        key = (slot.native, tuple(slot.calls), tuple(slot.results), slot.text)
        known = old.get(slot.unit)
        if known is not None and known[0] is key[0] and known[1:4] == key[1:]:
            m = known[4]
        else:
            m = rebuild(slot)
        cache[slot.unit] = (*key, m)
        if m is not None:
            out.append(m)
    state.cache = cache
    state.last_entries, state.last_render = entries, out
    state.last_units = {s.unit for s in slots}
    return list(out)


def paired(
    state: SyncState,
    rebuilt: list[Any],
    pair: Callable[[list[Any]], list[Any]],
    settled: Callable[[Any], bool],
) -> list[Any]:
    """``pair(rebuilt)``, resumed where the last call left off.

    ``pair`` is an integration's left-to-right pairing (stand-ins for
    unanswered calls, orphaned results dropped); ``settled(m)`` is true of a
    message after which no call is open, so pairing from the next one on
    starts afresh. When :func:`rendered` kept the first ``state.kept``
    objects of the last render, the paired output up to the last settled
    point inside them is reused: a turn pairs only its new messages. O(new)."""
    start, head = state.pair_memo
    if start > state.kept:
        start, head = 0, []
    end = start
    for i in range(len(rebuilt) - 1, start - 1, -1):
        if settled(rebuilt[i]):
            end = i + 1
            break
    mid = [*head, *pair(rebuilt[start:end])] if end > start else list(head)
    state.pair_memo = (end, mid)
    return [*mid, *pair(rebuilt[end:])]


def window_of(
    entries: Iterable[Entry],
    state: SyncState | None = None,
    *,
    keep: bool = True,
    framework: str | None = None,
) -> list[Slot]:
    """:func:`window` of live ``entries`` in window order (all of a
    snapshot's, or a tail of them whose messages start in it). ``keep``
    replaces ``state.natives`` with this call's (else they are added)."""
    slots: list[Slot] = []
    by_unit: dict[str, Slot] = {}
    old = state.natives if state is not None else {}
    natives: dict[str, tuple[Entry, Any]] = {} if keep else old
    for e in entries:
        meta = e.meta
        unit = meta.get("unit")
        call = _call_of(e)
        result_of = meta.get("result_of")
        native_ok = e.content is not None and (framework is None or meta.get("fw") == framework)
        if native_ok and isinstance(unit, str):
            known = old.get(e.id)
            native = known[1] if known is not None and known[0] is e else thaw(e.content)
            natives[e.id] = (e, native)
            slot = Slot(unit, native, e.kind, e.body)
            by_unit[unit] = slot
            slots.append(slot)
        elif isinstance(unit, str) and unit in by_unit and unit != e.id:
            slot = by_unit[unit]  # a call or result of a message shown above
        else:
            slot = Slot(e.id, None, e.kind, e.body)
            slots.append(slot)
            if unit == e.id:
                by_unit[unit] = slot  # a rewritten message: its calls follow
        if call is not None:
            slot.calls.append(call)
        elif isinstance(result_of, str):
            slot.results.append(result_of)
    if state is not None and keep:
        state.natives = natives
    return slots


def _call_of(e: Entry) -> Call | None:
    call_id, name = e.meta.get("call_id"), e.meta.get("tool")
    if e.kind is not Kind.TOOL_CALL or not isinstance(call_id, str) or not isinstance(name, str):
        return None
    key = e.key or ""
    arguments = key[len(name) + 1 :] if key.startswith(f"{name} ") else "{}"
    return Call(call_id, name, arguments)


def notes(snap: Snapshot) -> str | None:
    """The note of what is gone or stale in ``snap``, or ``None`` if nothing is.

    The adapters' note format (:mod:`quiesce.adapters`), every field escaped::

        [quiesce: removed from this context]
        [quiesce: call_1#result pruned at turn 3 by pruner: stale]
        [quiesce: stale entries, shown unchanged]
        [quiesce: m4 stale at turn 5: superseded]

    Stale entries are listed rather than annotated in place, so the messages
    themselves reach the model byte for byte. O(tombstones + marks).
    """
    lines: list[str] = []
    removed = removal_note(snap.tombstones)
    if removed is not None:
        lines.append(removed)
    stale = [(i, m) for i, m in snap.marks.items() if _is_live(snap, i)]
    if stale:
        lines.append(f"{NOTE_PREFIX} stale entries, shown unchanged]")
        for i, m in stale:
            when = f"turn {m.turn}" if m.turn is not None else f"version {m.version}"
            lines.append(
                f"{NOTE_PREFIX} {escape_field(i)} stale at {when}: {escape_field(m.reason)}]"
            )
    return "\n".join(lines) if lines else None


def _is_live(snap: Snapshot, entry_id: str) -> bool:
    return isinstance(_held(snap, entry_id), Entry)


def stand_in(call_id: str) -> str:
    """The text that answers a call whose result was pruned (a note)."""
    return f"{NOTE_PREFIX} the result of {escape_field(call_id)} was pruned; see the removal list]"
