"""Framework messages read into units, and units into entries: the layer
every integration's sync stands on (see :mod:`quiesce.integrations._store`
for the design).

What it keeps true: a :class:`Unit` becomes its container entry (the
framework's own dump as structured content), one ``TOOL_CALL`` entry per
call and one ``TOOL_OUTPUT`` entry per result citing the call it answers;
:func:`sync_units` appends only the units the buffer does not hold (live or
tombstoned), every new unit checked before anything is appended; the
per-buffer :class:`SyncState` (one per framework) is what the last sync saw.
Look-ups are O(log n) per message; nothing here awaits except the async
admission.
"""

from __future__ import annotations

import operator
import weakref
from collections.abc import Container, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypedDict, Unpack

import anyio

from .._core.buffer import Buffer, Snapshot
from .._core.entry import Entry, Kind, check_text, content_hash
from .._core.errors import InvalidArgument
from .._core.records import Tombstone
from .._core.version import Version
from .._protocol import AsyncBuffer, local_buffer
from ..adapters._common import (
    Read,
    ReadmitPolicy,
    SyncReport,
    aadmit,
    admit,
)


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


class UnitOptions(TypedDict, total=False):
    """The options of :func:`sync_units` and :func:`async_sync_units`:
    ``readmit`` (default ``"record"``), ``turn`` and ``actor`` as in the
    adapters' sync; ``new_ids`` the prefix of generated ids (default ``"#q:"``)."""

    readmit: ReadmitPolicy
    turn: int | None
    new_ids: str
    actor: str | None


def sync_units(
    buf: Buffer,
    units: Sequence[Unit],
    *,
    framework: str,
    **options: Unpack[UnitOptions],
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
    version, reads, admission = _begin(buf, units, framework, options)
    return _after(buf, framework, version, reads, admit(buf, reads, **admission))


async def async_sync_units(
    buf: AsyncBuffer,
    units: Sequence[Unit],
    *,
    framework: str,
    **options: Unpack[UnitOptions],
) -> SyncReport:
    """:func:`sync_units` for code on the event loop, on any
    :class:`~quiesce.AsyncBuffer` (a shared buffer included): the same
    matching against a local snapshot, then the adapters'
    :func:`~quiesce.adapters._common.aadmit` (its atomicity and cancellation
    notes hold). Always a checkpoint; never touches a disk on the loop."""
    version, reads, admission = _begin(buf, units, framework, options)
    return _after(buf, framework, version, reads, await aadmit(buf, reads, **admission))


async def async_append_unit(
    buf: AsyncBuffer, unit: Unit, *, framework: str, actor: str | None = None
) -> tuple[str, SyncReport]:
    """Append ``unit``, a message the framework hands over as new (it has an
    ``id`` and the framework never gives the same message twice), without
    :func:`async_sync_units`' matching step: no snapshot is taken, and its
    entries are built once. Returns the id it was appended under and the
    report. O(size of the message) plus the admission's O(log n); the sync
    state's index and tail are kept as a sync keeps them.

    Its id is checked against the head's live entries and tombstones first:
    a held id (a stale head of a shared buffer) gets ``'`` appended until it
    is fresh, so the message is appended, never mistaken for a held one. A
    unit with results (they cite their calls' entries, looked up in a
    snapshot) goes through :func:`async_sync_units` under that fresh id.
    On an in-process buffer everything after the one checkpoint is one
    synchronous step (:func:`_append_local`). Always a checkpoint;
    cancelled at it, nothing is appended and the state is as before (call
    ids its entries recorded in the state's call cache are checked against
    the buffer on use)."""
    assert unit.id is not None
    local = local_buffer_of(buf)
    if local is not None and not unit.results:
        await anyio.lowlevel.checkpoint()
        return _append_local(local, unit, framework, actor)
    version = buf.version
    unit_id, unit = _fresh(buf.head(), unit)
    if unit.results:
        return unit_id, await async_sync_units(buf, [unit], framework=framework, actor=actor)
    state = state_of(buf, framework)
    reads = [Read(0, unit_id, _entries(unit, framework, state.calls))]
    report = await aadmit(buf, reads, **_admit_options(framework, "record", None, actor))
    return unit_id, _after(buf, framework, version, reads, report, state)


def _fresh(head: Version, unit: Unit) -> tuple[str, Unit]:
    """``unit``'s id, or that id with ``'`` appended until neither a live
    entry nor a tombstone of ``head`` holds it, and the unit under it (a
    copy if the id changed). O(log n) per try."""
    live, tombs = head.live, head.tombs.by_id
    unit_id = unit.id
    assert unit_id is not None
    while unit_id in live or unit_id in tombs:
        unit_id += "'"
    return unit_id, unit if unit_id == unit.id else replace(unit, id=unit_id)


def _append_local(
    local: Buffer, unit: Unit, framework: str, actor: str | None
) -> tuple[str, SyncReport]:
    """:func:`async_append_unit` on an in-process buffer, after its
    checkpoint: one synchronous step, so it sees one head and nothing moves
    the buffer between the fresh-id check, the admission check and the
    append (an id taken during the checkpoint gives a fresh id, never a
    dropped message). A unit that is one entry, whose id, content and key
    no tombstone holds, is appended with ``Buffer.append`` (the checks and
    the one version :func:`~quiesce.adapters._common.admit` would make,
    without its plan and report lists); anything else (calls, a
    re-admission) is decided by ``admit`` itself (no rewrite: nothing is
    ``rewritable``, so nothing here touches a disk). The sync state is kept
    by :func:`_after`, as for any admission. O(size of the message + log n)."""
    version = local.version
    unit_id, unit = _fresh(local.head(), unit)
    state = state_of(local, framework)
    entries = _entries(unit, framework, state.calls)
    reads = [Read(0, unit_id, entries)]
    report = _append_fresh(local, entries[0], actor) if len(entries) == 1 else None
    if report is None:
        report = admit(local, reads, **_admit_options(framework, "record", None, actor))
    return unit_id, _after(local, framework, version, reads, report, state)


def _append_fresh(local: Buffer, entry: Entry, actor: str | None) -> SyncReport | None:
    """``entry`` appended with ``Buffer.append`` and its report, when the
    head holds neither its id (live or tombstoned) nor a tombstone of its
    content or key and it cites nothing: the checks and the one version
    :func:`~quiesce.adapters._common.admit` would make, without its plan
    and report lists. ``None`` (nothing appended) otherwise: ``admit``
    decides. Synchronous. O(log n)."""
    head = local.head()
    if entry.refs or entry.id in head.live:
        return None
    gone, tomb = head.tombs.admission(entry.id, entry.content_hash, entry.key)
    if gone is not None or tomb is not None:
        return None
    if actor is not None:
        check_text(actor, "actor")
    return SyncReport(appended=(0,), version=local.append(entry))


def _begin(
    buf: Buffer | AsyncBuffer, units: Sequence[Unit], framework: str, options: UnitOptions
) -> tuple[int, list[Read], dict[str, Any]]:
    """The head version a sync of ``units`` starts at, its reads, and the
    keyword arguments of their admission."""
    version = buf.version
    reads = _reads(buf, units, framework=framework, new_ids=options.get("new_ids", "#q:"))
    admission = _admit_options(
        framework, options.get("readmit", "record"), options.get("turn"), options.get("actor")
    )
    return version, reads, admission


def _after(
    buf: Buffer | AsyncBuffer,
    framework: str,
    version: int,
    reads: list[Read],
    report: SyncReport,
    state: SyncState | None = None,
) -> SyncReport:
    """``report``, once the sync state (``state``: looked up if not given)
    knows what the admission appended."""
    if state is None:
        state = state_of(buf, framework)
    _extend_index(buf, version, reads, report, state)
    appended(buf, state, version, reads, report)
    return report


def _extend_index(
    buf: Buffer | AsyncBuffer, version: int, reads: list[Read], report: SyncReport, state: SyncState
) -> None:
    """Keep the content-hash index of the sync state ``state`` current
    after an admission of ``reads`` that began at ``version``: when the
    buffer moved by exactly the one version of this batch (no other writer
    came between) and nothing was re-admitted, the new messages' hashes are
    added (O(new)); else the index is dropped and the next sync by content
    rebuilds it (O(n)). So a context that adds one message at a time pays
    O(1) look-ups per message, not a scan of the buffer."""
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


def appended(
    buf: Buffer | AsyncBuffer, state: SyncState, version: int, reads: list[Read], report: SyncReport
) -> None:
    """Keep ``state.tail`` (what the buffer's window is since the last render)
    after an admission of ``reads`` that began at ``version``: when the tail
    was known at ``version`` and the buffer moved by exactly the one version
    of this batch (no other writer, no rewrite), the entries of the appended
    reads are added to it in order (appends go to the end of the window);
    else it is forgotten, and the next render compares the whole window.
    O(new)."""
    tail = state.tail
    state.tail = None
    if tail is None or tail[0] != version:
        return
    if not report.appended:
        if buf.version == version:
            state.tail = tail
        return
    if buf.version != version + 1:
        return
    positions = set(report.appended)
    ids = [e.id for r in reads if r.index in positions for e in r.entries]
    state.tail = (version + 1, [*tail[1], *ids])


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
                h = content_hash(*_primary(unit))
                unit = matched(unit, h, snap, live_by_hash, tombs_by_hash, new_ids, seen, position)
            assert unit.id is not None
            found = _held(snap, unit.id)
            if found is None:
                if unit.id in seen:
                    raise InvalidArgument(f"{framework}: message id {unit.id!r} appears twice")
                seen.add(unit.id)
            entries = _entries(unit, framework, call_entry)
            reads.append(Read(position, unit.id, entries))
    return reads


def matched(
    unit: Unit,
    h: str,
    snap: Snapshot,
    live_by_hash: dict[str, list[str]],
    tombs_by_hash: dict[str, list[str]],
    new_ids: str,
    taken: Container[str],
    position: int,
) -> Unit:
    """``unit`` (a message without an id, of content hash ``h``) under the
    id it is matched to: the first live entry with its content not matched
    yet, else the first such tombstone (a stale copy of a pruned message),
    else a new id ``<new_ids><version>.<position>`` that neither ``snap``
    nor ``taken`` holds. Pops the match from its index. O(log n)."""
    if live_by_hash.get(h):
        return replace(unit, id=live_by_hash[h].pop(0))
    if tombs_by_hash.get(h):
        return replace(unit, id=tombs_by_hash[h].pop(0))
    new_id = f"{new_ids}{snap.version}.{position}"
    while _held(snap, new_id) is not None or new_id in taken:
        new_id += "'"
    return replace(unit, id=new_id)


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


class Flat:
    """The last synced history of a :class:`SyncState` as flat lists, for
    the prefix checks of a sync (:mod:`quiesce.integrations._history`).

    Invariant: ``seen`` is the very list (``SyncState.seen``) these lists
    were made for, and ``objs[i]`` / ``units[i]`` are ``seen[i].obj`` /
    ``seen[i].unit`` (``objs`` as the last sync left them: a later equal
    copy replaces its object in both, or leaves the object first synced
    in both). ``fields`` is ``None`` until first needed
    (or when a message is no plain pydantic model), else the types, field
    dicts and extra values of ``objs``, in order: what an equal copy must
    match (see :func:`equal`). Reading compact lists instead of the
    ``Seen`` records and the old objects keeps a turn's check of a
    checkpointer's copies to one pass over the new objects. ``copies``:
    how many syncs in a row matched messages as equal copies rather than
    the same objects (what decides whether copies replace the objects:
    :func:`~quiesce.integrations._history._takes`). O(history) memory
    (pointers only)."""

    __slots__ = ("copies", "fields", "objs", "seen", "units")

    def __init__(
        self,
        seen: list[Seen],
        objs: list[object],
        units: list[str | None],
        fields: tuple[list[type], list[Any], list[Any]] | None = None,
        copies: int = 0,
    ) -> None:
        self.seen = seen
        self.objs = objs
        self.units = units
        self.fields = fields
        self.copies = copies


_DICT = operator.attrgetter("__dict__")
_EXTRA = operator.attrgetter("__pydantic_extra__")
_PRIVATE = operator.attrgetter("__pydantic_private__")
_OBJ = operator.attrgetter("obj")
_UNIT = operator.attrgetter("unit")


def fields_of(objs: Sequence[object]) -> tuple[list[type], list[Any], list[Any]] | None:
    """The types, field dicts and extra values of ``objs`` (``None`` unless
    every one is a plain pydantic model whose class has no private
    attributes: then these three lists decide ``==`` between two of them,
    see :func:`equal`). O(n), no Python frame per object."""
    types = list(map(type, objs))
    kinds = set(types)
    if not all(map(_plain_model, kinds)) or any(
        getattr(t, "__private_attributes__", None) for t in kinds
    ):
        return None
    try:
        return types, list(map(_DICT, objs)), list(map(_EXTRA, objs))
    except AttributeError:  # a model built without pydantic's __init__
        return None


def flat_of(state: SyncState) -> Flat:
    """``state``'s :class:`Flat`, made from ``state.seen`` if it is not the
    list the cached one was made for. O(1) when current, else O(n)."""
    flat = state.flat
    seen = state.seen
    if flat is None or flat.seen is not seen:
        flat = state.flat = Flat(seen, list(map(_OBJ, seen)), list(map(_UNIT, seen)))
    return flat


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
    object synced under each framework id; ``flat`` the last history as flat
    lists (:class:`Flat`, valid while it was made for ``seen``); ``tail`` the
    entries this state's own admissions appended since the last render
    (:func:`appended`). ``cache`` is the integration's render cache
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
        #: ``seen`` as flat lists (see :class:`Flat`; stale when ``seen`` is
        #: replaced, and then rebuilt on first use)
        self.flat: Flat | None = None
        #: (version, ids): the window at ``version`` is the last render's
        #: entries followed by the entries ``ids`` this state's syncs
        #: appended since, in order (``None``: not known; see :func:`appended`)
        self.tail: tuple[int, list[str]] | None = None

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
