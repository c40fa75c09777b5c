"""The OpenAI Agents SDK: :class:`QuiesceSession` and :func:`quiesce_input_filter`.

Both are built on :mod:`quiesce.adapters.responses` (the SDK stores
Responses API input items): each item is one entry whose structured content
is the item itself, ``reasoning`` with ``encrypted_content`` is sealed and
cited by the items of its turn, a ``function_call_output`` cites its call.
What they keep true, for ``Runner.run(agent, ..., session=..., run_config=...)``:

* :class:`QuiesceSession` implements the SDK's ``Session`` protocol
  (``session_id``, ``session_settings``, ``get_items``, ``add_items``,
  ``pop_item``, ``clear_session``). Each ``add_items`` is one synchronous
  append (the adapter's ``append_messages``, ``readmit="record"``), so two
  runs sharing a session interleave whole batches and lose nothing.
  ``get_items`` returns the stored items unchanged (no notes: the SDK compares
  them with what it saved) — minus the ones a prune has staged for removal —
  with every ``function_call`` answered (a pruned output is replaced by a
  note output). ``limit`` keeps the newest items, then drops a leading output
  whose call was cut off.
* ``pop_item`` is the host's undo: it *retracts* the newest item whatever
  its kind — a user message (``INSTRUCTION``) too — with an edit plan of
  actor ``"host"`` carrying an :class:`~quiesce.Override` that names this
  module (the core's host retraction, the one logged exception to
  invariant 4; see :meth:`quiesce.Buffer.edit`). The item is tombstoned
  (actor ``"host"``) at its grace point, and the edit and removal records
  list it as ``retracted``. Every other rule holds: an item another one
  still cites is not removed, and ``pop_item`` raises
  :class:`~quiesce.ProtectedEntry`, removing nothing (the SDK's rewind
  treats a failing ``pop_item`` as "cannot rewind" and restores).
  A popped item keeps its tombstone: adding it back under its own ``id`` /
  ``call_id`` raises :class:`~quiesce.DuplicateEntry`, appending nothing (the
  SDK's restore after a failed rewind is best effort and logs that).
* :func:`quiesce_input_filter` is the value for
  ``RunConfig(call_model_input_filter=...)``: before each model call inside a
  run it syncs the input items into the buffer (the adapter's idempotent
  ``sync_messages``: by ``id``, ``call_id``, else a content key; a stale copy
  of a pruned item is not re-appended), runs the pruner once, and returns the
  adapter's rendering of the window: stale items annotated, removals listed
  in a ``system`` item, every call answered.

* The SDK's own context tools are held to the policy. Under the SDK's
  ``OpenAIResponsesCompactionSession``, ``QuiesceSession`` is the store its
  replacement hook (``_atomic_replace_items``) writes to: the compaction
  item is a ``Summarize`` of the items it replaced, refused for protected
  ones (a user message, a negative result and the call it answers stay; the
  refusal is escalated), the rest summarized. Before
  :func:`quiesce_input_filter` (composed in one ``call_model_input_filter``),
  ``ToolOutputTrimmer``'s previews are rewrites and a filter's dropped items
  prune requests, both through the policy — on a shared buffer too (the
  filter diffs its input against the one it synced last).

The session and the filter are anyio code (they run on trio too); the SDK's
runner is asyncio-only, so an agent run using them is.
"""

from __future__ import annotations

import functools
import inspect
import json
import operator
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any, cast

import anyio

from .._core.buffer import Buffer, Snapshot
from .._core.edit import HOST_ACTOR
from .._core.entry import Entry, Kind
from .._core.entry import thaw as plain
from .._core.errors import InvalidArgument, InvalidType, ProtectedEntry
from .._core.plan import EditPlan, Prune, Summarize
from .._core.records import EscalationKind, Override, Status
from .._core.version import Version
from .._pool import BufferPool
from .._protocol import AsyncBuffer, local_buffer
from ..adapters import _stream_responses, responses
from ..adapters._common import (
    NOTE_LIMIT,
    NOTE_NAMES,
    Keys,
    Read,
    ReadmitPolicy,
    aadmit,
    admit,
    aread_and_admit,
    fingerprint,
)
from ..adapters._stream import renderable
from ..adapters._window import Window
from ..pruner import Pruner
from . import _store
from ._conversation import Target
from ._glue import missing_extra, prune_round

try:
    from agents.items import TResponseInputItem
    from agents.memory.session_settings import SessionSettings, resolve_session_limit
    from agents.run_config import CallModelData, ModelInputData
except ImportError as exc:  # pragma: no cover - exercised without the extra
    raise missing_extra("the OpenAI Agents SDK", "openai-agents") from exc

__all__ = ["QuiesceSession", "feed_stream", "quiesce_input_filter"]

ACTOR = "host:openai-agents"

_OUTPUTS = frozenset({"function_call_output", "custom_tool_call_output"})


@contextmanager
def _named() -> Iterator[None]:
    """Bad input from the SDK: the adapter's error, naming the framework."""
    try:
        yield
    except (InvalidArgument, InvalidType) as exc:
        raise type(exc)(f"openai-agents: {exc}") from None


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
        with _named():
            await _admit_items(
                buffer, cast(list[dict[str, Any]], items), sync=False, skip_held=True
            )

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
                override=Override(f"pop_item: the host's undo, by {__name__}", base),
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
        ``add_items``). Held to the policy (see :func:`_diff_in`, with the
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
        with _named():
            await _diff_in(buffer, cast(list[dict[str, Any]], items), last, anywhere=True)
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


async def _admit_items(
    buffer: AsyncBuffer, items: list[dict[str, Any]], *, sync: bool, skip_held: bool = False
) -> Any:
    """The Responses adapter's ``append_messages`` (``sync=False``) or
    ``sync_messages`` (``sync=True``), through the async write path of any
    :class:`~quiesce.AsyncBuffer`; with ``skip_held``, items the head holds
    as they are (:func:`_held`) are left out of an append."""
    read = functools.partial(
        responses._read,
        items,
        turn=None,
        user_kind=Kind.INSTRUCTION,
        assistant_kind=Kind.REASONING,
    )
    if not skip_held:
        return await aread_and_admit(
            buffer, read, api=responses.API, readmit="record", turn=None, sync=sync, actor=__name__
        )
    local = local_buffer(buffer)
    if local is not None:
        # decided and appended with no await after the check (a stream's
        # task may open an item at any await)
        await anyio.lowlevel.checkpoint()
        head = local.head()
        reads = [r for r in read(head=head, keys=Keys(head), calls=()) if not _held(head, r)]
        return admit(
            local, reads, api=responses.API, readmit="record", turn=None, sync=sync, actor=__name__
        )
    head = buffer.head()
    reads = [r for r in read(head=head, keys=Keys(head), calls=()) if not _held(head, r)]
    return await aadmit(
        buffer, reads, api=responses.API, readmit="record", turn=None, sync=sync, actor=__name__
    )


def _held(head: Version, r: Read) -> bool:
    """Every entry of item ``r`` is live in ``head`` with its id, kind and
    content (compared by fingerprint: ``None`` and empty fields aside, as
    a streamed item's accumulated form and the SDK's dump of it differ), or
    is still streaming in (the SDK's runner saves a turn's items while its
    consumer may still be reading the turn's events: :func:`feed_stream`
    closes the entry with the same item). O(size of the item)."""
    if not r.entries:
        return False
    for e in r.entries:
        slot = head.live.get(e.id)
        if slot is None or slot.entry.kind is not e.kind:
            return False
        if slot.entry.streaming:
            continue  # streaming in: feed_stream closes it with this item
        if fingerprint(plain(slot.entry.content)) != fingerprint(plain(e.content)):
            return False
    return True


async def _sync_items(buffer: AsyncBuffer, items: list[dict[str, Any]]) -> Any:
    """The Responses adapter's ``sync_messages`` (a diff of the SDK's whole
    input list) on the loop without log I/O on it: inline on an in-process
    buffer without a durable log (one synchronous step), in a worker thread
    with one (a dropped or rewritten item is an edit that flushes). On a
    shared buffer, :func:`_sync_shared`: the same diff of dropped items
    through the buffer's async write paths."""
    local = local_buffer(buffer)
    if local is None:
        return await _sync_shared(buffer, items)
    call = functools.partial(responses.sync_messages, local, items, actor=__name__)
    if local.sink is None:
        await anyio.lowlevel.checkpoint()
        return call()
    return await anyio.to_thread.run_sync(call, abandon_on_cancel=False)


#: per shared buffer: the entry ids of the input the filter synced last, in
#: order (weak: it dies with the buffer)
_LAST_INPUT: weakref.WeakKeyDictionary[object, list[str]] = weakref.WeakKeyDictionary()


def _summary_read(reads: list[Read], head: Version, *, anywhere: bool) -> int | None:
    """The index (in ``reads``) of the one new item that stands for dropped
    ones, or ``None``. In an input list (``anywhere=False``) it must stand
    before an item the buffer holds — new items only at the end are
    appended, not a summary (the rule of the local sync,
    :func:`quiesce.adapters._common.sync_history`); in a replacement of the
    whole history (``anywhere=True``: the compaction session's) the one new
    item is the summary wherever it stands. Never a call or an output."""
    fresh = [
        t
        for t, r in enumerate(reads)
        if all(e.id not in head.live and e.id not in head.tombs.by_id for e in r.entries)
    ]
    if len(fresh) != 1:
        return None
    t = fresh[0]
    if not anywhere and t == len(reads) - 1:
        return None
    entries = reads[t].entries
    if len(entries) != 1 or entries[0].kind in (Kind.TOOL_CALL, Kind.TOOL_OUTPUT):
        return None
    return t


async def _sync_shared(buffer: AsyncBuffer, items: list[dict[str, Any]]) -> Any:
    """Sync the SDK's input into a shared buffer, faithfully: :func:`_diff_in`
    against the input this filter synced last (the first sync of a buffer in
    this process has none: it only appends). Cancelled midway, the writes
    made stay and the last input is not recorded (the next call diffs
    against the one before)."""
    report, now = await _diff_in(buffer, items, _LAST_INPUT.get(buffer), anywhere=False)
    _LAST_INPUT[buffer] = now
    return report


async def _diff_in(
    buffer: AsyncBuffer, items: list[dict[str, Any]], last: list[str] | None, *, anywhere: bool
) -> tuple[Any, list[str]]:
    """Bring ``buffer`` to ``items``, the SDK's new history, as a diff
    against ``last`` (the entry ids of the history before), through the
    policy and the buffer's async write paths — on any
    :class:`~quiesce.AsyncBuffer`, so no log I/O runs on the loop:

    * new items are appended (through :func:`~quiesce.adapters._common.aadmit`);
    * an item of ``last`` whose content changed under its id
      (``ToolOutputTrimmer``'s preview) is a ``Rewrite``: refused and
      escalated for protected entries, whose original stays;
    * items of ``last`` that are gone are a removal request (``aprune``):
      protected entries stay in the window and the refusal is escalated
      (``REFUSED_EDIT``), as the local diff does;
    * one new item standing for gone ones (see :func:`_summary_read`: the
      compaction item) is a ``Summarize`` of them into it (``aedit``),
      refused as a whole for protected entries — then tried again over the
      unprotected ones only, which it replaces while the protected ones
      stay (the refusal is logged and escalated by the buffer).

    Everything is read against the local head first (bad input appends
    nothing). Returns the admission's report and the entry ids ``items``
    were read as. O(n) reading, plus the writes; every write a checkpoint."""
    head = buffer.head()
    reads = responses._read(
        items,
        turn=None,
        user_kind=Kind.INSTRUCTION,
        assistant_kind=Kind.REASONING,
        head=head,
        keys=Keys(head, sync=True),
        calls=(),
    )
    now = [e.id for r in reads for e in r.entries]
    present = set(now)
    staged = buffer.staged()
    gone = (
        [i for i in last if i not in present and i in head.live and i not in staged] if last else []
    )
    summary = _summary_read(reads, head, anywhere=anywhere) if gone else None
    report = await aadmit(
        buffer,
        [r for t, r in enumerate(reads) if t != summary],
        api=responses.API,
        readmit="record",
        turn=None,
        sync=True,
        actor=__name__,
        rewritable=set(last or ()),
    )
    who = __name__
    if summary is not None:
        into = reads[summary].entries[0]
        reason = f"the history given to {who} replaced these items by one"
        edit = await buffer.aedit(
            EditPlan([Summarize(tuple(gone), into=into)], reason=reason, actor=who)
        )
        if not edit.applied:
            with buffer.snapshot() as snap:
                kept = _store._protected(buffer, snap, gone)
            rest = [i for i in gone if i not in kept]
            # the calls (and what else) the kept entries cite stay with them
            with buffer.snapshot() as snap:
                todo = list(kept)
                while todo:
                    found = snap.resolve(todo.pop())
                    for ref in getattr(found, "refs", ()):
                        if ref not in kept:
                            kept.add(ref)
                            todo.append(ref)
            rest = [i for i in gone if i not in kept]
            if kept and rest:
                await buffer.aedit(
                    EditPlan([Summarize(tuple(rest), into=into)], reason=reason, actor=who)
                )
    elif gone:
        pruned = await buffer.aprune(
            gone, reason=f"removed from the history given to {who}", actor=who
        )
        kept_ids = [
            i for i, o in pruned.items() if o.status not in (Status.PRUNED, Status.DEFERRED)
        ]
        if kept_ids:
            await buffer.aescalate(
                EscalationKind.REFUSED_EDIT,
                f"{who}: the history dropped {len(kept_ids)} "
                f"entr{'y' if len(kept_ids) == 1 else 'ies'} the policy keeps: "
                + ", ".join(repr(i) for i in kept_ids[:10]),
                data={"ids": kept_ids[:100], "adapter": responses.API, "request": "sync"},
            )
    return report, now


def quiesce_input_filter(
    buffer: Buffer | AsyncBuffer | BufferPool[Any],
    *,
    conversation: Callable[[CallModelData[Any]], str] | None = None,
    pruner: Pruner | None = None,
) -> Callable[[CallModelData[Any]], Awaitable[ModelInputData]]:
    """The value for ``RunConfig(call_model_input_filter=...)``.

    Before each model call: resolve the call's conversation, sync the input
    items into its buffer (see the module docstring), run ``pruner`` once,
    and return the window's items as :func:`quiesce.adapters.responses.render`
    gives them — or, when nothing is marked or pruned and the window is the
    input, the SDK's own ``model_data`` unchanged.

    The SDK's ``CallModelData`` carries no session id, so ``conversation``
    names it: ``conversation(data) -> str`` (e.g. from ``data.context``, the
    run's context object). With a :class:`~quiesce.BufferPool` it is
    required (:class:`InvalidArgument` otherwise). With a single buffer it
    is optional: without it a call belongs to the bound conversation only
    if its input extends the bound one (the same first item); either way a
    call of another conversation raises :class:`~quiesce.ConversationMismatch`
    before the model is called, the buffer unchanged.
    """
    target = Target(buffer, pruner, "quiesce_input_filter")
    if conversation is not None and not callable(conversation):
        raise InvalidType(
            "quiesce_input_filter: conversation must be a callable (data) -> str, "
            f"not {type(conversation).__name__}"
        )
    if target.pool is not None and conversation is None:
        raise InvalidArgument(
            "quiesce_input_filter: a BufferPool needs conversation=, a callable naming "
            "each call's conversation (CallModelData carries no session id)"
        )

    async def call_model_input_filter(data: CallModelData[Any]) -> ModelInputData:
        items = cast(list[dict[str, Any]], data.model_data.input)
        cid = None if conversation is None else conversation(data)
        if cid is not None and (not isinstance(cid, str) or not cid):
            raise InvalidArgument(
                f"quiesce_input_filter: conversation(data) must give a non-empty str, not {cid!r}"
            )
        first = fingerprint(items[0]) if items and isinstance(items[0], dict) else None
        buf = await target.buffer(cid, first)
        with _named():
            await _sync_items(buf, items)
        await prune_round(buf, pruner)
        with buf.snapshot() as snap:
            idle = not snap.tombstones and not snap.marks
            rendered = responses.render(snap)
        if idle and rendered == items:
            return data.model_data  # idle: the SDK's own input, unchanged
        return ModelInputData(
            input=cast(list[TResponseInputItem], rendered),
            instructions=data.model_data.instructions,
        )

    return call_model_input_filter


# -- streaming (``Runner.run_streamed``'s raw response events) ------------------


async def feed_stream(
    buffer: Buffer | AsyncBuffer | BufferPool[Any] | QuiesceSession,
    result: Any,
    *,
    conversation: str | None = None,
    on_event: Callable[[Any], object] | None = None,
    readmit: ReadmitPolicy = "record",
) -> list[list[dict[str, Any]]]:
    """Consume ``result.stream_events()`` of ``Runner.run_streamed(...)``,
    feeding every model response into ``buffer`` as it streams; returns each
    response's output items.

    The raw response events (``RawResponsesStreamEvent.data``: the Responses
    API's own stream events) of each response go through
    :func:`quiesce.adapters.responses.append_stream`: a message's text is an
    open entry (the item's id) written per delta, a reasoning item is never
    rendered until closed with its final form, a function call is appended
    only once its arguments are complete — so a reader pinning a snapshot
    sees the answer grow and every snapshot renders a valid input list.
    ``on_event(event)`` is called with every stream event, in order (awaited
    if it returns an awaitable), each raw one after the buffer has it.

    Use it with :func:`quiesce_input_filter` (its sync finds the streamed
    items held by id) or with a :class:`QuiesceSession` (pass the session as
    ``buffer``: its ``add_items`` holds the items already streamed rather
    than appending them again, so the session's items after the run are
    the SDK's own session's): nothing is appended twice.

    ``buffer`` is what the integration takes: one buffer, a
    :class:`~quiesce.BufferPool` (``conversation`` names the run's
    conversation: the session id, or what the input filter's
    ``conversation`` callable names it; required with a pool), or the
    run's :class:`QuiesceSession` (its buffer, of its ``session_id``). A
    single buffer is bound to ``conversation`` as the input filter binds
    it (:class:`~quiesce.ConversationMismatch` for another, before any
    event is read). Cut short — cancelled, an error event, ``on_event`` raising — the open
    entries are aborted (the text that arrived stays, marked stale with the
    reason) and the exception propagates. asyncio only, as the SDK's runner.
    O(1) amortized per event plus the adapter's cost per item.
    """
    face = await _stream_target(buffer, conversation)
    events = result.stream_events().__aiter__()
    outputs: list[list[dict[str, Any]]] = []

    async def deliver(event: Any) -> None:
        if on_event is not None:
            got = on_event(event)
            if inspect.isawaitable(got):
                await got

    async def one_response(first: Any) -> AsyncIterator[Any]:
        """The raw events of one response, each delivered once handled."""
        data = first.data
        while True:
            yield data
            await deliver(first)  # the adapter asked for the next: it has this one
            if getattr(data, "type", None) in _ENDS:
                return
            nxt = await anext(events, None)
            while nxt is not None and getattr(nxt, "type", None) != "raw_response_event":
                await deliver(nxt)
                nxt = await anext(events, None)
            if nxt is None:
                return  # the run ended mid-response: the adapter says what is missing
            first, data = nxt, nxt.data

    async for event in events:
        if getattr(event, "type", None) == "raw_response_event":
            items = await _stream_responses.append_stream(
                face, one_response(event), readmit=readmit, read=responses._read, held=True
            )
            outputs.append(items)
        else:
            await deliver(event)
    return outputs


async def _stream_target(buffer: object, conversation: str | None) -> AsyncBuffer:
    """The buffer :func:`feed_stream` writes to (see its docstring)."""
    if conversation is not None and (type(conversation) is not str or not conversation):
        raise InvalidArgument(
            f"feed_stream: conversation must be a non-empty str or None, not {conversation!r}"
        )
    if isinstance(buffer, QuiesceSession):
        if conversation is not None and conversation != buffer.session_id:
            raise InvalidArgument(
                f"feed_stream: conversation {conversation!r} is not the session's "
                f"{buffer.session_id!r}"
            )
        return await buffer.abuffer()
    if isinstance(buffer, BufferPool) and conversation is None:
        raise InvalidArgument(
            "feed_stream: a BufferPool needs conversation= (the run's session id, or the "
            "name quiesce_input_filter's conversation gives it)"
        )
    return await Target(buffer, None, "feed_stream").buffer(conversation, None)


#: The events after which a response's stream has nothing more.
_ENDS = frozenset({"response.completed", "response.failed", "response.incomplete", "error"})
