"""Sync: a framework's whole history diffed against the last one synced.

What it keeps true: ``sync_messages`` is idempotent — a history synced
again changes nothing, and a no-op sync is one pass of C-level compares
(identity for SDK objects, ``==`` against a private copy for dicts), no
hashing and no reading; a message the buffer pruned on purpose is never
re-appended; quiesce's own notes, stand-in results and escapes never
become entries (:func:`~quiesce.adapters._notes.recognise`); a message
that disappeared is a removal request through the policy, never a forced
prune. The last history is kept per buffer and adapter (weakly, one sync
of each at a time under a lock). Nothing here awaits.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from .._core.buffer import Buffer
from .._core.entry import Kind, check_text
from .._core.errors import InvalidType
from .._core.plan import EditPlan, Summarize
from .._core.records import EscalationKind, Status
from .._core.version import Version
from ._admit import Read, SyncReport, admit, check_readmit
from ._checks import check_messages
from ._keys import Keys
from ._notes import recognise, rendered_ids
from ._per_buffer import PerBuffer
from ._sdk import to_plain

__all__ = ["TailReader", "sync_history"]


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


#: How sync finds a message ``append_stream`` stored (``_stream.streamed_ids``,
#: set when that module loads: it imports this one, so this one cannot import it).
STREAMED: Callable[[Buffer, str, Version, Mapping[str, Any]], tuple[str, ...] | None] | None = None

_STATES_BY_BUFFER: PerBuffer[_SyncState] = PerBuffer(_SyncState)


def _state(buf: Buffer, api: str) -> _SyncState:
    return _STATES_BY_BUFFER.get(buf, api)


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
    raws = check_messages(messages[k:], noun, k)
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
