"""The OpenAI Agents SDK: :class:`QuiesceSession`, the SDK's ``Session`` held
in a quiesce buffer (re-exported and described by
:mod:`quiesce.integrations.openai_agents`).

What it keeps true: ``add_items`` is one append (atomic with respect to
other coroutines on an in-process buffer); ``get_items`` gives the stored
items back unchanged, minus those staged for removal, every call answered,
and renders only what is new since the last call (:func:`_session_items`);
``pop_item`` is the host's retraction, applied whole or not at all;
``_atomic_replace_items`` (the compaction session's hook) is a diff held to
the policy. All methods are checkpoints.

Imported after :mod:`quiesce.integrations.openai_agents` checked that the
SDK is installed.
"""

from __future__ import annotations

import json
import operator
import weakref
from typing import Any, cast

import anyio
from agents.items import TResponseInputItem
from agents.memory.session_settings import SessionSettings, resolve_session_limit

from .._core.buffer import Buffer, Snapshot
from .._core.edit import HOST_ACTOR
from .._core.entry import Entry
from .._core.entry import thaw as plain
from .._core.errors import InvalidArgument, ProtectedEntry
from .._core.plan import EditPlan, Prune
from .._core.records import Override
from .._pool import BufferPool
from .._protocol import AsyncBuffer, local_buffer
from ..adapters import responses
from ..adapters._common import NOTE_LIMIT, NOTE_NAMES
from ..adapters._stream import renderable
from ..adapters._window import Window
from ..pruner import Pruner
from ._conversation import Target
from ._glue import prune_round
from ._openai_agents_items import WRITER, admit_items, diff_in, named_errors

__all__ = ["ACTOR", "QuiesceSession"]

ACTOR = "host:openai-agents"

_OUTPUTS = frozenset({"function_call_output", "custom_tool_call_output"})


def _trimmed(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The tail of a window cut at an arbitrary item: drop leading outputs
    (their call was cut off). A reasoning item is never stranded by the cut:
    the items of its turn come after it. O(n)."""
    start = 0
    while start < len(items) and items[start].get("type") in _OUTPUTS:
        start += 1
    return items[start:]


def _without(items: list[dict[str, Any]], gone: list[Any]) -> list[dict[str, Any]]:
    """``items`` minus one occurrence of each item in ``gone`` (the stored
    items of entries staged for removal), and minus outputs left without
    their call. O(n + g)."""
    if not gone:
        return items
    remaining = list(gone)
    kept: list[dict[str, Any]] = []
    dropped_calls: set[str] = set()
    for item in items:
        if item in remaining:
            remaining.remove(item)
            if item.get("type") in ("function_call", "custom_tool_call"):
                dropped_calls.add(str(item.get("call_id")))
            continue
        if item.get("type") in _OUTPUTS and item.get("call_id") in dropped_calls:
            continue
        kept.append(item)
    return kept


class QuiesceSession:
    """An Agents SDK ``Session`` held in a quiesce buffer (see the module docstring).

    ``session_id`` names the session (the conversation); ``buffer`` holds
    it: a :class:`~quiesce.Buffer` serving this one session (bound to it on
    first use: a session of another id on the same buffer raises
    :class:`~quiesce.ConversationMismatch`, changing nothing), or a
    :class:`~quiesce.BufferPool` (the buffer of ``session_id``, opened on
    first use, so one agent can serve many sessions). ``pruner`` runs once
    before each ``get_items`` (the SDK reads the history before each run).
    All methods are checkpoints.
    """

    session_settings: SessionSettings | None = None

    def __init__(
        self,
        session_id: str,
        buffer: Buffer | AsyncBuffer | BufferPool[Any],
        *,
        pruner: Pruner | None = None,
    ) -> None:
        if not isinstance(session_id, str) or not session_id:
            raise InvalidArgument("QuiesceSession: session_id must be a non-empty str")
        self._target = Target(buffer, pruner, "QuiesceSession")
        self.session_id = session_id
        self.pool = self._target.pool
        self.pruner = pruner
        self._pop_lock = anyio.Lock()

    @property
    def buffer(self) -> object:
        """The single buffer given (``None`` with a pool: see :meth:`abuffer`)."""
        return self._target.given

    async def abuffer(self) -> AsyncBuffer:
        """The buffer holding this session (opened in the pool on first use).
        Raises :class:`~quiesce.ConversationMismatch` if a single buffer
        serves another session."""
        return await self._target.buffer(self.session_id, None)

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The stored items, oldest first; the newest ``limit`` items if given
        (see the module docstring)."""
        buffer = await self.abuffer()
        await prune_round(buffer, self.pruner)
        await anyio.lowlevel.checkpoint()
        n = resolve_session_limit(limit, self.session_settings)
        with buffer.snapshot() as snap:
            items = _session_items(buffer, snap)
            staged = buffer.staged()
            gone = (
                [plain(e.content) for e in snap if e.id in staged and e.content is not None]
                if staged
                else []
            )
        items = _without(items, gone)
        if n is not None:
            items = _trimmed(items[-n:] if n > 0 else [])
        return cast(list[TResponseInputItem], items)

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append ``items`` (through the buffer's async write path; on an
        in-process buffer as one synchronous step, atomic with respect to
        other coroutines on the loop). Bad items raise :class:`InvalidArgument`
        or :class:`InvalidType` and nothing is appended.

        An item the buffer already holds as it is (same id, kind and content,
        ``None`` and empty fields aside) is held, not appended again: the
        items :func:`feed_stream` wrote while the run streamed, which the
        SDK adds when the turn ends. An item whose id is tombstoned (popped)
        still raises :class:`~quiesce.DuplicateEntry`."""
        buffer = await self.abuffer()
        await anyio.lowlevel.checkpoint()
        with named_errors():
            await admit_items(buffer, cast(list[dict[str, Any]], items), sync=False, skip_held=True)

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove and return the newest item, or ``None`` if there is none.

        The removal is the host's retraction (see the module docstring), of
        any kind of item: tombstoned at once, or staged (and already left out
        of :meth:`get_items`) while a reader still pins it. An item the buffer
        refuses to remove even so (another item cites it) raises
        :class:`ProtectedEntry` and nothing changes. Concurrent pops take
        turns (each removes a different item). Cancellation: the retraction
        is applied or not as a whole."""
        buffer = await self.abuffer()
        async with self._pop_lock:  # two pops never pick the same newest item
            with buffer.snapshot() as snap:
                staged = buffer.staged()
                live = [e for e in snap if e.id not in staged and e.content is not None]
                base = snap.version
            if not live:
                return None
            newest = live[-1]
            plan = EditPlan(
                [Prune(newest.id)],
                reason="pop_item",
                actor=HOST_ACTOR,
                base=base,
                override=Override(f"pop_item: the host's undo, by {WRITER}", base),
            )
            report = await buffer.aedit(plan)
        if not report.applied:
            why = ", ".join(r.name for r in report.refusals)
            raise ProtectedEntry(
                f"pop_item: the buffer refuses to remove the newest item {newest.id!r} ({why})"
            )
        return cast(TResponseInputItem, plain(newest.content))

    async def _atomic_replace_items(self, items: list[TResponseInputItem]) -> bool:
        """Replace the stored history by ``items``: the hook the SDK's
        ``OpenAIResponsesCompactionSession`` looks up on its underlying
        session's type (before falling back to ``clear_session`` and
        ``add_items``). Held to the policy (see :func:`diff_in`, with the
        stored items as the history before): items kept are held, the one new
        item (the compaction item) is a ``Summarize`` of the items it
        replaced, refused for protected entries — a constraint, a user
        message, a negative result and the call it answers stay in the
        window, the rest is summarized, and the refusal is escalated. Items
        that are gone with no summary are prune requests. Returns ``True``
        (the replacement is done, as far as the policy allows). Bad items
        raise :class:`InvalidArgument` / :class:`InvalidType`, nothing
        changed. Cancellation: each write is applied or not as a whole."""
        buffer = await self.abuffer()
        with buffer.snapshot() as snap:
            staged = buffer.staged()
            last = [e.id for e in snap if e.meta.get("api") == responses.API and e.id not in staged]
        with named_errors():
            await diff_in(buffer, cast(list[dict[str, Any]], items), last, anywhere=True)
        return True

    async def clear_session(self) -> None:
        """Prune every item, as ``host:openai-agents``. Protected items (user
        and system messages) stay: the buffer never removes them."""
        buffer = await self.abuffer()
        with buffer.snapshot() as snap:
            ids = [e.id for e in snap]
        if ids:
            await buffer.aprune(ids, reason="clear_session", actor=ACTOR)
        else:
            await anyio.lowlevel.checkpoint()


class _Window:
    """What :meth:`QuiesceSession.get_items` rendered last of one buffer:
    the snapshot's entries, their ids, the items as JSON text (without the
    list's brackets), and how many tombstones the snapshot had."""

    __slots__ = ("entries", "ids", "text", "tombs")

    def __init__(self, entries: tuple[Entry, ...], ids: set[str], text: str, tombs: int) -> None:
        self.entries = entries
        self.ids = ids
        self.text = text
        self.tombs = tombs


#: per buffer (the in-process one behind a face, else the buffer itself):
#: the last window ``get_items`` rendered (weak: it dies with the buffer)
_WINDOWS: weakref.WeakKeyDictionary[object, _Window] = weakref.WeakKeyDictionary()


def _session_items(buffer: AsyncBuffer, snap: Snapshot) -> list[dict[str, Any]]:
    """``responses.render(snap, annotate_stale=False, tombstone_notes=False)``
    as fresh objects the caller may change, rendering only what is new.

    When the snapshot's entries are the last window's (the same objects, in
    order) followed by new ones that cite none of them, with no tombstone
    made since, the window is the last one followed by the rendering of the
    new entries alone: each item of the session's rendering depends only on
    its entry, the entries citing it (a reasoning item, a call's output)
    and the tombstones (a pruned output's note). The result is then one
    ``json.loads`` of the kept text, no per-entry work for the old entries
    (the SDK reads the whole history before every run). Else the whole
    window is rendered. O(n) identity checks plus the new entries, or O(n)."""
    entries = snap.entries()
    tombs = len(snap.tombstones)
    local = local_buffer(buffer)
    key: object = buffer if local is None else local
    last = _WINDOWS.get(key)
    if (
        last is not None
        and last.tombs == tombs
        and len(last.entries) <= len(entries)
        and all(map(operator.is_, last.entries, entries))
    ):
        tail = entries[len(last.entries) :]
        if not any(ref in last.ids for e in tail for ref in e.refs):
            text = last.text
            if tail:
                items = responses._render(
                    Window.of(
                        snap,
                        renderable(tail),
                        annotate_stale=False,
                        tombstone_notes=False,
                        note_names=NOTE_NAMES,
                        note_limit=NOTE_LIMIT,
                    )
                )
                piece = json.dumps(items, ensure_ascii=False)[1:-1]
                text = f"{text},{piece}" if text and piece else text or piece
                last.ids.update(e.id for e in tail)
                _WINDOWS[key] = _Window(entries, last.ids, text, tombs)
            return cast(list[dict[str, Any]], json.loads(f"[{text}]"))
    items = responses.render(snap, annotate_stale=False, tombstone_notes=False)
    text = json.dumps(items, ensure_ascii=False)[1:-1]
    _WINDOWS[key] = _Window(entries, {e.id for e in entries}, text, tombs)
    return items
