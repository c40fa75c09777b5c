"""The faithful diff of a framework's history (see
:mod:`quiesce.integrations._store` for the design).

What it keeps true: :func:`sync_history` appends what is new and returns the
framework's own edits (a message changed under its id, messages dropped, a
framework summary) as :class:`Changes`, which :func:`apply_changes` /
:func:`aapply_changes` settle through the policy, never silently. A no-op
sync of the same objects (or a checkpointer's equal copies) is O(n) C-level
checks; on the event loop that comparison, and the reading of new
messages, run in bounded steps with a checkpoint between them, and nothing
is changed before the last step.
"""

from __future__ import annotations

import bisect
import operator
from collections import deque
from collections.abc import Callable, Container, Generator, Sequence
from dataclasses import dataclass, field, replace
from itertools import compress, count, repeat
from typing import Any, TypedDict, Unpack

import anyio.lowlevel

from .._core.buffer import Buffer, Snapshot
from .._core.entry import Entry, Kind
from .._core.errors import InvalidArgument
from .._core.plan import EditPlan, Prune, Rewrite, Summarize
from .._core.policy import Policy
from .._core.records import EditReport
from .._protocol import AsyncBuffer, local_buffer
from ..adapters._common import (
    Read,
    ReadmitPolicy,
    SyncReport,
    aadmit,
    admit,
)
from ._units import (
    _UNIT,
    Flat,
    Seen,
    SyncState,
    Unit,
    _admit_options,
    _Calls,
    _entries,
    _held,
    _Index,
    _primaries,
    _primary,
    appended,
    digest,
    equal,
    fields_of,
    flat_of,
    local_buffer_of,
    matched,
    state_of,
)


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


class HistoryOptions(TypedDict, total=False):
    """The options of :func:`sync_history` and :func:`async_sync_history`:
    ``readmit`` (default ``"record"``), ``turn`` and ``actor`` as in the
    adapters' sync; ``new_ids`` the prefix of generated ids (default
    ``"#q:"``); ``ident(message)`` the framework's own id of a message
    (default: none)."""

    readmit: ReadmitPolicy
    turn: int | None
    new_ids: str
    actor: str | None
    ident: Callable[[object], str | None] | None


def _begin(
    buf: Buffer | AsyncBuffer,
    messages: Sequence[object],
    read: Callable[[int, object], Unit | None],
    framework: str,
    options: HistoryOptions,
    pause: bool,
) -> tuple[Generator[list[Read] | None, SyncReport | None, tuple[SyncReport, Changes]], Any]:
    """The diff of one sync, and the keyword arguments of its admission."""
    gen = _sync_history(
        buf,
        messages,
        read,
        framework=framework,
        new_ids=options.get("new_ids", "#q:"),
        ident=options.get("ident"),
        pause=pause,
    )
    admission = _admit_options(
        framework, options.get("readmit", "record"), options.get("turn"), options.get("actor")
    )
    return gen, admission


def _done(stop: StopIteration, options: HistoryOptions) -> tuple[SyncReport, Changes]:
    """The result a finished diff returned, its changes under the sync's actor."""
    done: tuple[SyncReport, Changes] = stop.value
    done[1].actor = options.get("actor")
    return done


def sync_history(
    buf: Buffer,
    messages: Sequence[object],
    read: Callable[[int, object], Unit | None],
    *,
    framework: str,
    **options: Unpack[HistoryOptions],
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
    gen, admission = _begin(buf, messages, read, framework, options, pause=False)
    try:
        reads = next(gen)
        while True:
            reads = gen.send(None if reads is None else admit(buf, reads, **admission))
    except StopIteration as stop:
        return _done(stop, options)


async def async_sync_history(
    buf: AsyncBuffer,
    messages: Sequence[object],
    read: Callable[[int, object], Unit | None],
    *,
    framework: str,
    **options: Unpack[HistoryOptions],
) -> tuple[SyncReport, Changes]:
    """:func:`sync_history` for code on the event loop, on any
    :class:`~quiesce.AsyncBuffer`: the same diff against a local snapshot,
    the appends through :func:`~quiesce.adapters._common.aadmit` (never a
    disk write on the loop). Always a checkpoint when something is appended.
    Cancelled during the appends, the sync state is forgotten (the next sync
    reads the whole history again against what the buffer holds), so nothing
    is taken as synced that may not be."""
    gen, admission = _begin(buf, messages, read, framework, options, pause=True)
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
                report = await aadmit(buf, reads, **admission)
            except BaseException:
                gen.close()
                state_of(buf, framework).forget()
                raise
            reads = gen.send(report)
    except StopIteration as stop:
        return _done(stop, options)


#: Messages compared (or read) per step of a sync on the event loop: a
#: checkpoint between steps (well under 1 ms of work each).
SYNC_STEP = 128
#: New messages read (converted to units) per step of a sync on the loop.
_READ_STEP = 32


def _equal_prefix(
    flat: Flat,
    messages: Sequence[object],
    k: int,
    n: int,
    take: bool = True,
) -> int:
    """``k``, or ``n`` when every message in ``messages[k:n]`` is an equal
    copy (:func:`equal`) of the one synced at its position last time — the
    common turn with a checkpointer, which hands back a new copy of every
    message. With ``take`` the copies then take the old objects' places
    (in ``flat`` and in ``flat.seen``, whose objects are also the ones
    synced under the messages' ids); without it the old objects stay, and
    the copies are left to the framework (see :func:`_takes`). All or nothing: any difference (a
    changed, moved or dropped message, another class) leaves ``k``, and the
    caller compares message by message. O(n) with no Python frame per
    message: the new objects' types, field dicts and extra values are
    compared, as lists in C, with the ones kept in ``flat`` (the old objects
    themselves are not read again)."""
    if k >= n:
        return k
    news = list(messages[k:n])
    got = _equal_copies(flat, news, k, n)
    if got is None:
        return k
    if take:
        _took(flat, news, k, n, got)
    return n


def _equal_prefix_steps(
    flat: Flat, messages: Sequence[object], k: int, n: int, take: bool = True
) -> Generator[None, None, int]:
    """:func:`_equal_prefix` in steps of :data:`SYNC_STEP` messages,
    yielding (a pause) after each. A step whose copies are all equal lets
    them (with ``take``) take the old objects' places at once (an equal copy stands for the
    message as well as the object it replaces, so a step that finds a
    difference later leaves nothing wrong behind)."""
    start = k
    while start < n:
        end = min(start + SYNC_STEP, n)
        news = list(messages[start:end])
        got = _equal_copies(flat, news, start, end)
        if got is None:
            return k
        if take:
            _took(flat, news, start, end, got)
        start = end
        yield None
    return n


def _takes(flat: Flat) -> bool:
    """Whether a sync's equal copies take the old objects' places: when the
    count of syncs in a row that found copies (``flat.copies``) is 0 or a
    power of two. A history copied once is then the identity pass from the
    next sync on; a checkpointer, which hands a new copy of every message
    every turn, has its copies taken O(log turns) times: in between the
    objects last taken stay, and each turn's copies are left to the
    framework, which frees them with the rest of its turn (quiesce neither
    rewrites its n records nor frees the last turn's n copies, cold in the
    cache, every turn). A history that starts handing back the same objects
    after a run of copies is the identity pass again after at most as many
    syncs as that run was long. Either way ``flat`` holds one object per
    message. O(1)."""
    copies = flat.copies
    return copies & (copies - 1) == 0


def _took(flat: Flat, news: list[object], k: int, n: int, got: list[Any]) -> None:
    """The equal copies ``news`` (of fields ``got``) take the places ``k:n``
    of the objects they copy, in ``flat`` and in its ``Seen`` records (the
    old objects are not kept alive). O(n - k), in C."""
    flat.objs[k:n] = news
    if flat.fields is not None:
        for part, more in zip(flat.fields, got, strict=True):
            part[k:n] = more
    deque(map(setattr, flat.seen[k:n], repeat("obj"), news), maxlen=0)


def _equal_copies(flat: Flat, news: list[object], k: int, n: int) -> list[Any] | None:
    """The :func:`fields_of` lists of ``news`` if each is an equal copy of
    the object at the same place ``k:n`` of ``flat`` (pydantic models of
    one plain class, compared as lists in C; see :func:`equal`), else
    ``None``. Reads the new objects once and ``flat``'s kept lists (the
    fields of the old objects are made once, on first need). O(n - k), no
    Python frame per message."""
    if flat.fields is None:
        flat.fields = fields_of(flat.objs)
        if flat.fields is None:
            return None
    got = fields_of(news)
    if got is None:
        return None
    types, dicts, extras = flat.fields
    if got[0] != types[k:n] or got[1] != dicts[k:n] or got[2] != extras[k:n]:
        return None
    return list(got)


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
    job = _Job(buf, messages, read, framework, new_ids, ident, pause)
    while True:
        done = yield from _sync_once(job)
        if done is not None:
            return done


@dataclass(frozen=True)
class _Job:
    """The arguments of one :func:`_sync_history`."""

    buf: Buffer | AsyncBuffer
    messages: Sequence[object]
    read: Callable[[int, object], Unit | None]
    framework: str
    new_ids: str
    ident: Callable[[object], str | None] | None
    pause: bool


def _sync_once(
    job: _Job,
) -> Generator[list[Read] | None, SyncReport | None, tuple[SyncReport, Changes] | None]:
    """One try of :func:`_sync_history`: ``None`` if the sync state moved
    during a pause (nothing was changed)."""
    buf, messages, read, framework = job.buf, job.messages, job.read, job.framework
    new_ids, ident, pause = job.new_ids, job.ident, job.pause
    state = state_of(buf, framework)
    seen = state.seen
    flat = flat_of(state)
    n = min(len(seen), len(messages))
    # the first place whose message is not the object synced there, in C
    k = same = next(compress(count(), map(operator.is_not, messages[:n], flat.objs)), n)
    take = _takes(flat)
    if pause and n - k > SYNC_STEP:
        k = yield from _equal_prefix_steps(flat, messages, k, n, take)
        if state.seen is not seen:  # another sync of this buffer ran meanwhile
            return None
    else:
        k = _equal_prefix(flat, messages, k, n, take)
    state.generation += 1
    state.prefix = k
    head = buf.head()
    held: list[int] = []
    tombstoned: list[int] = []
    taken: set[str] = set()
    if k:
        units = flat.units  # read up to k (``compress`` stops there): not copied
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
        flat.copies = flat.copies + 1 if k > same else 0  # the flat lists stay
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
            held=_merged(held, report.held, k),
            tombstoned=_merged(tombstoned, report.tombstoned, k),
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
    # every message now stands in ``seen`` as itself, in order; each new list
    # is one copy of the kept prefix, extended (no second pass over it)
    new_seen = seen[:k]
    new_seen.extend(fresh_seen)
    state.seen = new_seen
    fields = flat.fields
    if fields is not None:
        tail = fields_of(messages[k:])
        fields = None if tail is None else _joined(fields, tail, k)
    units = flat.units[:k]
    units.extend(map(_UNIT, fresh_seen))
    # the first k objects as the prefix checks left them (the copies, or the
    # objects first synced: see _takes), then the history's own
    objs = flat.objs[:k]
    objs.extend(messages[k:])
    state.flat = Flat(state.seen, objs, units, fields, flat.copies + 1 if k > same else 0)
    return report, changes


def _merged(prefix: list[int], more: Sequence[int], k: int) -> tuple[int, ...]:
    """Sorted positions: ``prefix`` (ascending, the first ones below ``k``
    among them) and ``more``, without repeats. O(n) to copy, O(m log m)
    for the m positions from ``k`` on."""
    cut = bisect.bisect_left(prefix, k)
    return (*prefix[:cut], *sorted({*prefix[cut:], *more}))


def _joined(
    fields: tuple[list[type], list[Any], list[Any]],
    tail: tuple[list[type], list[Any], list[Any]],
    k: int,
) -> tuple[list[type], list[Any], list[Any]]:
    joined = fields[0][:k], fields[1][:k], fields[2][:k]
    for part, more in zip(joined, tail, strict=True):
        part.extend(more)
    return joined


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
        at = snap.version
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
                unit = matched(unit, d, snap, live_by_hash, tombs_by_hash, new_ids, ids, position)
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
    appended(buf, state, at, reads, report)
    state.index = None
    if index is not None:
        added = [
            e
            for r in reads
            for e in r.entries
            if e.content is not None and e.meta.get("unit") == e.id
        ]
        if local_buffer_of(buf) is not None:
            # an in-process admission publishes its whole batch as one
            # version (``Buffer.append`` / ``Buffer.extend``), none if it
            # appended nothing
            count = 1 if report.appended else 0
        else:
            count = sum(len(r.entries) for r in reads)
        if buf.version == index[0] + count and not report.readmitted:
            # Only our appends since the index was read: extend it (so the
            # next sync by content reads no O(n) index of the window).
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
