"""Reading a snapshot back into framework messages (see
:mod:`quiesce.integrations._store` for the design).

What it keeps true: :func:`window` gives the live messages in window order
as slots (the framework's own dump, its live calls and results);
:func:`rendered` rebuilds only what changed since the last render;
:func:`paired` answers every call (a stand-in for a pruned result) and drops
results whose call is gone; :func:`notes` is the note of removals and stale
marks in the adapters' escaped format. O(n) identity checks plus the
rebuilt messages.
"""

from __future__ import annotations

import operator
import types
from collections.abc import Callable, Iterable
from typing import Any

from .._core.buffer import Snapshot
from .._core.entry import Entry, Kind, thaw
from .._core.notes import escape_field
from ..adapters._common import (
    NOTE_PREFIX,
    removal_note,
)
from ._units import Call, Slot, SyncState, _held


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
    calls, results and text are the ones cached. When only ``state``'s own
    syncs appended since the last render (its tracked ``tail``), the new
    entries are taken by id and the window is not listed or compared, and
    the state's lists of entries and objects are extended in place:
    O(new log n), no O(n) copy. ``rebuild`` must give objects nobody
    mutates (or the caller copies them). Else O(n) identity checks plus the
    rebuilt slots.

    Returns ``state.last_render`` itself, not a copy: the caller reads it
    (:func:`paired` makes the list handed to the framework) and neither keeps
    nor mutates it; the next render extends or replaces it. If ``rebuild``
    raises, the state is as before the call."""
    prev = state.last_entries
    units = state.last_units
    appended = _known_tail(snap, state)
    entries: list[Entry] | None = None
    tail: list[Entry] | None
    if appended is not None:
        tail = appended
    else:
        entries = list(snap)
        fits = len(prev) <= len(entries) and all(map(operator.is_, prev, entries))  # C-level
        tail = entries[len(prev) :] if fits else None
    if tail is not None and not any(
        e.meta.get("unit") in units and e.meta.get("unit") != e.id for e in tail
    ):
        slots = window_of(tail, state, keep=False, framework=framework)
        new = [m for m in map(rebuild, slots) if m is not None]
        out = state.last_render
        state.kept = len(out)
        if entries is None:
            prev.extend(tail)  # only the state's own lists: nobody else holds them
        else:
            state.last_entries = entries
        out.extend(new)
        state.tail = (snap.version, [])
        units.update(map(_UNIT, slots))
        return out
    if entries is None:
        entries = list(snap)
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
    state.kept = 0
    state.cache = cache
    state.last_entries, state.last_render = entries, out
    state.tail = (snap.version, [])
    state.last_units = set(map(_UNIT, slots))
    return out


_UNIT = operator.attrgetter("unit")


def _known_tail(snap: Snapshot, state: SyncState) -> list[Entry] | None:
    """The entries ``snap``'s window has after the last render's, when
    ``state`` knows them (only its own syncs appended since: see
    :func:`~quiesce.integrations._units.appended`), else ``None``. Checked
    against the snapshot: each is live there, and the window is exactly as
    long as the last render's entries and these. O(new log n)."""
    tail = state.tail
    if tail is None or tail[0] != snap.version:
        return None
    get = snap.get
    got = [get(i) for i in tail[1]]
    if None in got or len(snap) != len(state.last_entries) + len(got):
        return None
    return got


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
    point inside them is reused and extended in place (the memo is the
    state's own list, never handed out): a turn pairs only its new messages.
    O(new) plus the one O(n) copy that is the list returned — a new list
    each call, which the caller may mutate. If ``pair`` raises, the memo is
    as before the call."""
    start, head = state.pair_memo
    if start > state.kept:
        start, head = 0, []
    end = start
    for i in range(len(rebuilt) - 1, start - 1, -1):
        if settled(rebuilt[i]):
            end = i + 1
            break
    if end > start:
        done = pair(rebuilt[start:end])
        rest = pair(rebuilt[end:]) if end < len(rebuilt) else []
        head.extend(done)
    else:
        rest = pair(rebuilt[end:]) if end < len(rebuilt) else []
    state.pair_memo = (end, head)
    out = head.copy()
    if rest:
        out.extend(rest)
    return out


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
            native = known[1] if known is not None and known[0] is e else _thawed(e.content)
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


_SCALARS = frozenset({str, int, float, bool, type(None)})
_FROZEN_MAP = types.MappingProxyType


def _thawed(value: object) -> Any:
    """:func:`~quiesce._core.entry.thaw` of an entry's ``content``, by exact
    type: what ``freeze`` makes (read-only mappings over dicts, tuples,
    scalars) is copied without an ABC check per node; anything else goes
    to ``thaw``. The same plain value as ``thaw``. O(size)."""
    t = type(value)
    if t in _SCALARS:
        return value
    if t is _FROZEN_MAP:
        return {k: _thawed(v) for k, v in value.items()}  # type: ignore[attr-defined]
    if t is tuple:
        return [_thawed(v) for v in value]  # type: ignore[attr-defined]
    return thaw(value)


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
