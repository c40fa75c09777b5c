"""The demo's two buffers behind one interface: quiesce, and a naive list.

What it keeps true: agents and the checker reach a buffer only through a
:class:`World` and the :class:`View` it hands a reader. On quiesce a view is
a pinned snapshot (the same version for the whole read, unpinned on exit,
also on cancellation) and every change goes through the public API; on the
naive side a view is the live list itself and every change is applied in
place, unchecked and unrecorded — which is what the checker catches. A
model's streamed answer is an open entry on quiesce (each write a new
version; a pinned reader keeps its prefix) and, on the naive side, the last
message's text extended in place.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Protocol

from quiesce import (
    DanglingReference,
    EditPlan,
    EditReport,
    Entry,
    EntryPruned,
    Kind,
    Mark,
    ProtectedEntry,
    Prune,
    ReadmissionRefused,
    Rewrite,
    RuntimeBuffer,
    Snapshot,
    StreamWriter,
    Summarize,
    Tombstone,
    run_pruner,
)

__all__ = ["NaiveView", "NaiveWorld", "QuiesceView", "QuiesceWorld", "Thinker", "View", "World"]


class View(Protocol):
    """What an agent reads: a pinned snapshot, or the naive live list."""

    def entries(self) -> Sequence[Entry]: ...

    @property
    def marks(self) -> Mapping[str, Mark]: ...

    def get(self, entry_id: str) -> Entry | None: ...

    def record(self, key: str) -> Entry | Tombstone | None: ...


class QuiesceView:
    """A pinned snapshot: the same version for the whole read."""

    def __init__(self, snap: Snapshot) -> None:
        self.snap = snap

    def entries(self) -> Sequence[Entry]:
        return self.snap.entries()

    @property
    def marks(self) -> Mapping[str, Mark]:
        return self.snap.marks

    def get(self, entry_id: str) -> Entry | None:
        got: Entry | None = self.snap.get(entry_id)
        return got

    def record(self, key: str) -> Entry | Tombstone | None:
        for e in self.snap.entries():
            if e.key == key:
                return e
        for t in self.snap.tombstones.values():
            if t.key == key:
                return t
        return None


class NaiveView:
    """A reference to the live list: every read sees whatever is there now."""

    def __init__(self, items: list[Entry]) -> None:
        self.items = items

    def entries(self) -> Sequence[Entry]:
        return list(self.items)

    @property
    def marks(self) -> Mapping[str, Mark]:
        return {}

    def get(self, entry_id: str) -> Entry | None:
        for e in self.items:
            if e.id == entry_id:
                return e
        return None

    def record(self, key: str) -> Entry | Tombstone | None:
        for e in self.items:
            if e.key == key:
                return e
        return None


class Thinker(Protocol):
    """The pruner's model as a world sees it: it reads a view (holding it
    while it thinks) and proposes a plan; ``calls`` counts its reads."""

    calls: int

    async def think(self, view: View) -> EditPlan | None: ...


class _SnapshotPruner:
    """Adapts a :class:`Thinker` to the :class:`~quiesce.Pruner` protocol."""

    def __init__(self, model: Thinker) -> None:
        self.model = model

    async def __call__(self, snap: Snapshot, /) -> EditPlan | None:
        return await self.model.think(QuiesceView(snap))


class World(Protocol):
    name: str
    events: list[str]

    def view(self) -> contextlib.AbstractContextManager[View]: ...

    def append(self, entry: Entry) -> str | None: ...

    def mark(self, entry_id: str, reason: str, turn: int) -> None: ...

    async def prune_round(self, model: Thinker) -> str: ...

    def open_text(self, entry_id: str, turn: int) -> None: ...

    def write_text(self, entry_id: str, text: str) -> None: ...

    def close_text(self, entry_id: str) -> None: ...

    async def settle(self) -> None: ...

    def head(self) -> Sequence[Entry]: ...

    def row(self) -> dict[str, Any]: ...


class QuiesceWorld:
    name = "quiesce"

    def __init__(self, buf: RuntimeBuffer) -> None:
        self.buf = buf
        self.events: list[str] = []
        self.refused_appends: Counter[str] = Counter()
        self.conflict_replans = 0
        self.peak_pins = 0
        self.peak_deferred = 0
        self.stream_writes = 0
        self._seen_log = 0
        self._writers: dict[str, StreamWriter] = {}
        self._streamed = False  #: a stream changed in this step (see settle)

    @contextlib.contextmanager
    def view(self) -> Iterator[View]:
        with self.buf.snapshot() as snap:
            yield QuiesceView(snap)

    def append(self, entry: Entry) -> str | None:
        try:
            self.buf.append(entry)
        except (ReadmissionRefused, DanglingReference) as exc:
            self.refused_appends[type(exc).__name__] += 1
            tomb = exc.tombstone
            return f"{type(exc).__name__}: {tomb.note() if tomb else exc}"
        return None

    def mark(self, entry_id: str, reason: str, turn: int) -> None:
        with contextlib.suppress(EntryPruned, ProtectedEntry):
            self.buf.mark_stale(entry_id, reason, turn=turn)

    def open_text(self, entry_id: str, turn: int) -> None:
        """A model's answer starts streaming: an open entry (sync)."""
        self._writers[entry_id] = self.buf.open_stream(entry_id, Kind.REASONING, turn=turn)
        self._streamed = True

    def write_text(self, entry_id: str, text: str) -> None:
        """More of it arrived: one sync write, a new version; a reader's pin
        keeps the prefix it pinned."""
        self._writers[entry_id].write(text)
        self.stream_writes += 1
        self._streamed = True

    def close_text(self, entry_id: str) -> None:
        self._writers.pop(entry_id).close()
        self._streamed = True

    async def prune_round(self, model: Thinker) -> str:
        calls = model.calls
        report = await run_pruner(self.buf, _SnapshotPruner(model), max_retries=2)
        self.conflict_replans += max(0, model.calls - calls - 1)
        return _describe(report)

    async def settle(self) -> None:
        await self.buf.quiesce()
        if self._streamed:
            # A stream's text is logged coalesced per flush: flushing at the
            # step that wrote it makes the log's records the same on every
            # run (and shows a step's text durable before the next step).
            self._streamed = False
            await self.buf.aflush()
        # Removals re-checked at their grace point: tell what was kept, and why.
        log = self.buf.log
        for record in log[self._seen_log :]:
            if record.op == "remove":
                for entry_id, why in record.detail.get("refused", {}).items():
                    self.events.append(
                        f"barrier: kept {entry_id} at its grace point ({why.upper()}: "
                        "a survivor cites it now)"
                        if why == "referenced"
                        else f"barrier: kept {entry_id} at its grace point ({why.upper()})"
                    )
        self._seen_log = len(log)
        st = self.buf.stats()
        self.peak_pins = max(self.peak_pins, st.pinned)
        self.peak_deferred = max(self.peak_deferred, st.deferred)

    def head(self) -> Sequence[Entry]:
        return self.buf.head().entries()

    def row(self) -> dict[str, Any]:
        st = self.buf.stats()
        return {
            "version": st.version,
            "entries": st.entries,
            "pins": st.pinned,
            "deferred": st.deferred,
            "marks": st.marks,
            "tombstones": st.tombstones,
            "escalations": st.escalations,
        }


def _describe(report: EditReport | None) -> str:
    if report is None:
        return "nothing to prune"
    if report.applied:
        return f"removed {len(report.removed)} now, {len(report.deferred)} at their grace point"
    why = "/".join(r.name for r in report.refusals)
    return f"plan refused ({why}), escalated"


class NaiveWorld:
    """A plain list. Appends and plans are applied directly; nothing is
    checked, nothing is recorded, readers hold the live list itself."""

    name = "naive list"

    def __init__(self) -> None:
        self.items: list[Entry] = []
        self.events: list[str] = []
        self.mutations = 0
        self.readers = 0
        self.removals = 0

    @contextlib.contextmanager
    def view(self) -> Iterator[View]:
        self.readers += 1
        try:
            yield NaiveView(self.items)
        finally:
            self.readers -= 1

    def append(self, entry: Entry) -> str | None:
        self.items.append(entry)
        self.mutations += 1
        return None

    def mark(self, entry_id: str, reason: str, turn: int) -> None:
        return None  # a plain list has nowhere to put a mark

    def open_text(self, entry_id: str, turn: int) -> None:
        """A model's answer starts streaming: an empty message at the end."""
        self.append(Entry(entry_id, Kind.REASONING, "", turn=turn))

    def write_text(self, entry_id: str, text: str) -> None:
        """More of it arrived: the message's text is extended in place (as a
        chat list does with a streamed message), under every reader."""
        i = self._index(entry_id)
        if i is not None:  # deleted meanwhile: the rest of the answer is lost
            self.items[i] = self.items[i].replace(body=self.items[i].body + text)
            self.mutations += 1

    def close_text(self, entry_id: str) -> None:
        return None

    def _index(self, entry_id: str) -> int | None:
        for i, e in enumerate(self.items):
            if e.id == entry_id:
                return i
        return None

    def _delete(self, entry_id: str) -> None:
        i = self._index(entry_id)
        if i is not None:
            del self.items[i]
            self.removals += 1

    def apply(self, plan: EditPlan) -> None:
        for op in plan.ops:
            if isinstance(op, Prune):
                self._delete(op.id)
            elif isinstance(op, Rewrite):
                i = self._index(op.id)
                if i is not None:
                    self.items[i] = self.items[i].replace(body=op.body, refs=op.refs)
            elif isinstance(op, Summarize):
                where = [j for j in map(self._index, op.ids) if j is not None]
                if where:
                    self.items.insert(min(where), op.into)
                    for covered in op.ids:
                        self._delete(covered)
            else:
                i = self._index(op.id)
                if i is not None:
                    e = self.items.pop(i)
                    j = None if op.before is None else self._index(op.before)
                    self.items.insert(len(self.items) if j is None else j, e)
        self.mutations += 1

    async def prune_round(self, model: Thinker) -> str:
        with self.view() as view:
            plan = await model.think(view)
        if plan is None:
            return "nothing to prune"
        before = self.removals
        self.apply(plan)
        rewrites = sum(isinstance(op, Rewrite) for op in plan.ops)
        gone = self.removals - before
        what = f"deleted {gone} entr{'y' if gone == 1 else 'ies'}"
        if rewrites:
            what = f"rewrote {rewrites} entr{'y' if rewrites == 1 else 'ies'}"
        elif any(isinstance(op, Summarize) for op in plan.ops):
            what += " under a summary"
        return f"applied directly: {what}, no record kept"

    async def settle(self) -> None:
        return None

    def head(self) -> Sequence[Entry]:
        return list(self.items)

    def row(self) -> dict[str, Any]:
        return {
            "version": self.mutations,
            "entries": len(self.items),
            "pins": self.readers,
            "deferred": 0,
            "marks": 0,
            "tombstones": 0,
            "escalations": 0,
        }
