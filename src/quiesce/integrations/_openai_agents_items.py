"""The OpenAI Agents SDK's items into the buffer: what
:class:`~quiesce.integrations.openai_agents.QuiesceSession` and
:func:`~quiesce.integrations.openai_agents.quiesce_input_filter` write with.

What it keeps true:

* **Through the async face, no log I/O on the loop.** Every write goes
  through an :class:`~quiesce.AsyncBuffer`'s async paths (``aadmit``,
  ``aprune``, ``aedit``), or inline on an in-process buffer without a
  durable log, or in a worker thread with one (:func:`sync_items`).
* **Bad input appends nothing.** Items are read by the Responses adapter
  against the head before any write; its error names the item and, through
  :func:`named_errors`, the framework.
* **The history's edits go through the policy.** :func:`diff_in` reads a
  dropped item as a removal request, a changed one as a ``Rewrite``, the
  one new item standing for dropped ones as a ``Summarize``: protected
  entries stay and the refusal is escalated.
* **What streamed in is held, not appended twice** (:func:`admit_items`
  with ``skip_held``).

Every write names :data:`WRITER`, the integration's public module. Imported
by :mod:`quiesce.integrations.openai_agents` after its check that the SDK is
installed (nothing here imports the SDK).
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import anyio

from .._core.entry import Kind
from .._core.entry import thaw as plain
from .._core.errors import InvalidArgument, InvalidType
from .._core.plan import EditPlan, Summarize
from .._core.records import EscalationKind, Status
from .._core.version import Version
from .._protocol import AsyncBuffer, local_buffer
from ..adapters import responses
from ..adapters._common import Keys, Read, aadmit, admit, aread_and_admit, fingerprint
from . import _store

__all__ = ["WRITER", "admit_items", "diff_in", "named_errors", "sync_items"]

#: The actor the integration's writes name (and its ``pop_item`` override):
#: its public module, whichever module makes the write.
WRITER = "quiesce.integrations.openai_agents"


@contextmanager
def named_errors() -> Iterator[None]:
    """Bad input from the SDK: the adapter's error, naming the framework."""
    try:
        yield
    except (InvalidArgument, InvalidType) as exc:
        raise type(exc)(f"openai-agents: {exc}") from None


async def admit_items(
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
            buffer, read, api=responses.API, readmit="record", turn=None, sync=sync, actor=WRITER
        )
    local = local_buffer(buffer)
    if local is not None:
        # decided and appended with no await after the check (a stream's
        # task may open an item at any await)
        await anyio.lowlevel.checkpoint()
        head = local.head()
        reads = [r for r in read(head=head, keys=Keys(head), calls=()) if not _held(head, r)]
        return admit(
            local, reads, api=responses.API, readmit="record", turn=None, sync=sync, actor=WRITER
        )
    head = buffer.head()
    reads = [r for r in read(head=head, keys=Keys(head), calls=()) if not _held(head, r)]
    return await aadmit(
        buffer, reads, api=responses.API, readmit="record", turn=None, sync=sync, actor=WRITER
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


async def sync_items(buffer: AsyncBuffer, items: list[dict[str, Any]]) -> Any:
    """The Responses adapter's ``sync_messages`` (a diff of the SDK's whole
    input list) on the loop without log I/O on it: inline on an in-process
    buffer without a durable log (one synchronous step), in a worker thread
    with one (a dropped or rewritten item is an edit that flushes). On a
    shared buffer, :func:`_sync_shared`: the same diff of dropped items
    through the buffer's async write paths."""
    local = local_buffer(buffer)
    if local is None:
        return await _sync_shared(buffer, items)
    call = functools.partial(responses.sync_messages, local, items, actor=WRITER)
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
    """Sync the SDK's input into a shared buffer, faithfully: :func:`diff_in`
    against the input this filter synced last (the first sync of a buffer in
    this process has none: it only appends). Cancelled midway, the writes
    made stay and the last input is not recorded (the next call diffs
    against the one before)."""
    report, now = await diff_in(buffer, items, _LAST_INPUT.get(buffer), anywhere=False)
    _LAST_INPUT[buffer] = now
    return report


async def diff_in(
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
        actor=WRITER,
        rewritable=set(last or ()),
    )
    who = WRITER
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
