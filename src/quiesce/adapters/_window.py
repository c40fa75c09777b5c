"""Rendering helpers: a snapshot's window read back as API messages.

What it keeps true: rendering reads one snapshot and never changes a
buffer; a buffer passed in is snapshotted for the call and released when
done, also on error (:func:`render_with`). What is cached is exact: a
version is immutable, so a window rendered again for the same version
(:data:`RENDER_CACHE` of them) and a frozen value thawed again
(:data:`PLAIN_CACHE` of them) come back as the JSON text they were, as
fresh objects the caller may change.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

from .._core.buffer import Buffer, Snapshot
from .._core.entry import Entry, Kind, canonical_json, result_id, thaw
from .._core.errors import InvalidType
from .._core.records import Mark, Tombstone
from ._notes import check_note_options, missing_result_note, removal_note, stale_note

__all__ = [
    "PLAIN_CACHE",
    "RENDER_CACHE",
    "Group",
    "Window",
    "adjacent",
    "arguments_json",
    "default_role",
    "groups",
    "outputs_by_call",
    "own",
    "plain",
    "render_options",
    "render_with",
    "snapshot_of",
    "tool_name",
]

_T = TypeVar("_T")


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



@dataclass(slots=True)
class Window:
    """What one render of a snapshot works from: the entries to show (in
    window order, hidden parts already left out), the marks (none when
    stale notes are off), the tombstones, the live result of each call, the
    note options, and ``in_place``: the result ids whose tombstone note was
    rendered where the result stood (:meth:`missing`), which the removal
    note then leaves out. Built once per render; O(n) to build."""

    entries: Sequence[Entry]
    marks: Mapping[str, Mark]
    tombstones: Mapping[str, Tombstone]
    results: dict[str, Entry]
    tombstone_notes: bool
    note_names: int
    note_limit: int
    in_place: set[str]

    @classmethod
    def of(
        cls,
        snap: Snapshot,
        entries: Sequence[Entry],
        *,
        annotate_stale: bool,
        tombstone_notes: bool,
        note_names: int,
        note_limit: int,
    ) -> Window:
        """The window of ``snap`` showing ``entries`` (its renderable ones)."""
        return cls(
            entries,
            snap.marks if annotate_stale else {},
            snap.tombstones,
            outputs_by_call(entries),
            tombstone_notes,
            note_names,
            note_limit,
            set(),
        )

    def order(self) -> dict[str, int]:
        """Each entry's position in the window. O(n)."""
        return {e.id: n for n, e in enumerate(self.entries)}

    def note_of(self, e: Entry) -> str | None:
        """The stale note in front of ``e``, or ``None``."""
        mark = self.marks.get(e.id)
        return None if mark is None else stale_note(mark)

    def result_note(self, result: Entry, call_id: str) -> str | None:
        """The stale note of a tool result: its own mark, else its call's."""
        mark = self.marks.get(result.id) or self.marks.get(call_id)
        return None if mark is None else stale_note(mark)

    def missing(self, call_id: str) -> str:
        """What stands in, where it belongs, for the result of ``call_id``
        that is not live (:func:`missing_result_note`); the removal note
        then does not list it again."""
        self.in_place.add(result_id(call_id))
        return missing_result_note(call_id, self.tombstones)

    def removal_note(self) -> str | None:
        """The removal note (:func:`removal_note`) of every tombstone not
        shown in place, or ``None`` (none, or ``tombstone_notes=False``)."""
        if not self.tombstone_notes:
            return None
        return removal_note(
            self.tombstones, skip=self.in_place, names=self.note_names, limit=self.note_limit
        )

    def end_with_removals(self, out: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """``out`` with the removal note as a last ``system`` message: at the
        end, a removal changes no byte before the place it was made, and the
        next turn's request keeps this one's prefix (prompt cache)."""
        note = self.removal_note()
        if note is not None:
            out.append({"role": "system", "content": note})
        return out
