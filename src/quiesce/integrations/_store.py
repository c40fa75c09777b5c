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
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from .._core.buffer import Buffer, Snapshot
from .._core.entry import Entry, Kind, content_hash, thaw
from .._core.errors import InvalidArgument, UnknownEntry
from .._core.notes import escape_field
from .._core.records import Tombstone
from .._protocol import AsyncBuffer
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
    "Result",
    "Slot",
    "SyncReport",
    "Unit",
    "async_sync_units",
    "notes",
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


def _held(snap: Snapshot, entry_id: str) -> Entry | Tombstone | None:
    try:
        return snap.resolve(entry_id)
    except UnknownEntry:
        return None


def _entries(unit: Unit, framework: str, call_entry: dict[str, str]) -> list[Entry]:
    assert unit.id is not None
    meta_base = {"fw": framework, "unit": unit.id}
    out: list[Entry] = []
    if unit.bare:
        if len(unit.calls) + len(unit.results) != 1:
            raise InvalidArgument(f"{framework}: a bare unit is one call or one result")
    else:
        out.append(Entry(unit.id, unit.kind, unit.body, (), None, None, meta_base, unit.native))
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
    reads = _reads(buf, units, framework=framework, new_ids=new_ids)
    return admit(
        buf,
        reads,
        api=f"integrations.{framework}",
        readmit=readmit,
        turn=turn,
        sync=True,
        actor=actor,
    )


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
    reads = _reads(buf, units, framework=framework, new_ids=new_ids)
    return await aadmit(
        buf,
        reads,
        api=f"integrations.{framework}",
        readmit=readmit,
        turn=turn,
        sync=True,
        actor=actor,
    )


def _reads(
    buf: Buffer | AsyncBuffer, units: Sequence[Unit], *, framework: str, new_ids: str
) -> list[Read]:
    """The units matched against a snapshot of ``buf`` and read into entries
    (the first half of :func:`sync_units`). O(u log n + n) for u units."""
    reads: list[Read] = []
    with buf.snapshot() as snap:
        call_entry = {
            str(e.meta["call_id"]): e.id
            for e in snap
            if e.kind is Kind.TOOL_CALL and "call_id" in e.meta
        }
        by_content = any(u.id is None for u in units)
        live_by_hash, tombs_by_hash = _primaries(snap) if by_content else ({}, {})
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


def window(snap: Snapshot, framework: str | None = None) -> list[Slot]:
    """The live messages of ``snap`` in window order, as slots. O(n).

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
    slots: list[Slot] = []
    by_unit: dict[str, Slot] = {}
    for e in snap:
        meta = e.meta
        unit = meta.get("unit")
        call = _call_of(e)
        result_of = meta.get("result_of")
        native = e.content is not None and (framework is None or meta.get("fw") == framework)
        if native and isinstance(unit, str):
            slot = Slot(unit, thaw(e.content), e.kind, e.body)
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
