"""Admission: appending what an adapter read, every re-admission decided first.

What it keeps true: a batch of read messages is decided as a whole against
one head before anything is written — a duplicate id, a reference to a
pruned or unknown entry, ``readmit="refuse"`` or a bad answer from a
``readmit`` callable raises and leaves the head unchanged — and is then
appended as *one* version (``Buffer.extend``, all or nothing) on an
in-process buffer. Content matching a tombstone is appended only with an
``Override`` naming who re-admitted it, and the second prune/re-admit
cycle of one content within :data:`OSCILLATION_WINDOW` versions is
escalated. Nothing here awaits on the sync path; the async path
(:func:`aadmit`) does no disk or database I/O on the loop.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import anyio

from .._core.buffer import Buffer
from .._core.entry import Entry, check_text
from .._core.errors import (
    DanglingReference,
    DuplicateEntry,
    InvalidArgument,
    InvalidType,
    ReadmissionRefused,
)
from .._core.plan import EditPlan, Rewrite
from .._core.records import (
    EditReport,
    Escalation,
    EscalationKind,
    Override,
    Tombstone,
)
from .._core.version import Version
from .._protocol import AsyncBuffer, local_buffer
from ._keys import Keys

__all__ = [
    "OSCILLATION_WINDOW",
    "Read",
    "Reader",
    "Readmission",
    "ReadmitPolicy",
    "SyncReport",
    "aadmit",
    "admit",
    "aread_and_admit",
    "check_readmit",
    "read_and_admit",
    "read_entries",
]

#: A second prune/re-admit cycle of the same content or key within this many
#: versions is escalated as :attr:`EscalationKind.OSCILLATION`.
OSCILLATION_WINDOW = 10_000


@dataclass(slots=True)
class Read:
    """One message read: its index, key and entries (maybe none)."""

    index: int
    key: str
    entries: list[Entry] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Readmission:
    """What a ``readmit=`` callable is asked about: the entry of message
    ``index`` whose content or key matches ``tombstone``, and ``cycles``, the
    prune/re-admit cycles of that content within the window (this one
    included)."""

    index: int
    entry: Entry
    tombstone: Tombstone
    cycles: int


#: ``"refuse"``, ``"record"``, or a callable given a :class:`Readmission`
#: returning ``"refuse"``, ``"record"`` or an :class:`~quiesce.Override`.
ReadmitPolicy = Literal["refuse", "record"] | Callable[[Readmission], object]


@dataclass(frozen=True, slots=True)
class SyncReport:
    """What :func:`sync_messages` did (frozen).

    ``appended``: indices of the messages appended now; ``held``: indices of
    messages the buffer already holds (live, perhaps in part); ``tombstoned``:
    indices of messages the buffer pruned on purpose (their stale copy was not
    re-appended; a result whose call was pruned counts here too);
    ``readmitted``: ids of entries appended with an automatic ``Override``;
    ``escalations``: the escalations raised (``OSCILLATION``, and the
    ``REFUSED_EDIT`` of a removal, rewrite or summary the policy refused);
    ``version``: the head version after the call; ``rewritten``: ids whose
    changed content was applied as a ``Rewrite``; ``removed``: ids removed
    (or staged for removal) because the history dropped them or a summary
    replaced them; ``refused``: ids the policy kept against the history (a
    protected entry dropped or summarized, an immutable one rewritten).
    """

    appended: tuple[int, ...] = ()
    held: tuple[int, ...] = ()
    tombstoned: tuple[int, ...] = ()
    readmitted: tuple[str, ...] = ()
    escalations: tuple[Escalation, ...] = ()
    version: int = 0
    rewritten: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    refused: tuple[str, ...] = ()


def check_readmit(readmit: object) -> None:
    """``readmit`` must be ``"refuse"``, ``"record"`` or a callable."""
    if isinstance(readmit, str):
        if readmit not in ("refuse", "record"):
            raise InvalidArgument(
                f"readmit must be 'refuse', 'record' or a callable, not {readmit!r}"
            )
    elif not callable(readmit):
        raise InvalidType(
            f"readmit must be 'refuse', 'record' or a callable, not {type(readmit).__name__}"
        )


class Reader(Protocol):
    """An adapter's reader: its messages (bound with ``functools.partial``)
    read against ``head`` (``None``: no buffer), with message keys from
    ``keys`` and ``calls`` made earlier."""

    def __call__(
        self, *, head: Version | None, keys: Keys, calls: Collection[str]
    ) -> list[Read]: ...


def read_entries(read: Reader, calls: Collection[str]) -> list[Entry]:
    """The body of ``to_entries``: read without a buffer, deterministic keys."""
    return [e for r in read(head=None, keys=Keys(), calls=calls) for e in r.entries]


def read_and_admit(
    buf: Buffer,
    read: Reader,
    *,
    api: str,
    readmit: object,
    turn: int | None,
    sync: bool,
    actor: str | None = None,
) -> SyncReport:
    """The body of ``append_messages`` (``sync=False``: message keys avoid
    every key the buffer used) and ``sync_messages`` (``sync=True``: keys
    count identical messages in the list, so a list read again gets the same
    ids); then :func:`admit`."""
    if not isinstance(buf, Buffer):
        raise InvalidType(f"buf must be a Buffer, not {type(buf).__name__}")
    check_readmit(readmit)
    head = buf.head()
    reads = read(head=head, keys=Keys(head, sync=sync), calls=())
    return admit(buf, reads, api=api, readmit=readmit, turn=turn, sync=sync, actor=actor)


async def aread_and_admit(
    buf: AsyncBuffer,
    read: Reader,
    *,
    api: str,
    readmit: object,
    turn: int | None,
    sync: bool,
    actor: str | None = None,
) -> SyncReport:
    """:func:`read_and_admit` for code on the event loop, on any
    :class:`~quiesce.AsyncBuffer`: the messages are read against its local
    head, then :func:`aadmit`. Always a checkpoint."""
    check_readmit(readmit)
    head = buf.head()
    reads = read(head=head, keys=Keys(head, sync=sync), calls=())
    return await aadmit(buf, reads, api=api, readmit=readmit, turn=turn, sync=sync, actor=actor)


def _cycles(head: Version, e: Entry, tomb: Tombstone) -> int:
    """Prune/re-admit cycles of ``e``'s content or key within the window,
    counting this one. O(tombstones)."""
    low = head.number - OSCILLATION_WINDOW
    return sum(
        1
        for t in head.tombs.by_id.values()
        if t.version > low
        and (t.content_hash == e.content_hash or (e.key is not None and t.key == e.key))
    )


@dataclass
class _Admission:
    """What :func:`admit` decided against ``head``, before writing."""

    head: Version
    who: str
    plan: list[tuple[Entry, Override | None, int]] = field(default_factory=list)
    appended: list[int] = field(default_factory=list)
    held: list[int] = field(default_factory=list)
    tombstoned: list[int] = field(default_factory=list)
    rewrites: list[Entry] = field(default_factory=list)
    readmitted: list[str] = field(default_factory=list)
    escalations: list[Escalation] = field(default_factory=list)
    rewritten: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)

    def report(self, version: int) -> SyncReport:
        return SyncReport(
            tuple(self.appended),
            tuple(self.held),
            tuple(self.tombstoned),
            tuple(self.readmitted),
            tuple(self.escalations),
            version,
            rewritten=tuple(self.rewritten),
            refused=tuple(self.refused),
        )

    def readmitted_now(self, e: Entry, api: str) -> tuple[str, dict[str, Any]] | None:
        """Note that ``e`` was appended with an ``Override``; the detail and
        data of the ``OSCILLATION`` escalation that raises (its second cycle
        or later), or ``None``."""
        self.readmitted.append(e.id)
        tomb = self.head.tombs.matching(e.content_hash, e.key)
        assert tomb is not None
        cycles = _cycles(self.head, e, tomb)
        if cycles < 2:
            return None
        return (
            f"{e.id!r} re-admitted by {self.who}: cycle {cycles} of "
            f"pruning and re-admitting the content of {tomb.id!r}",
            {"ids": [e.id, tomb.id], "cycles": cycles, "adapter": api},
        )

    def rewrite_plan(self, e: Entry, turn: int | None) -> EditPlan:
        return EditPlan(
            [Rewrite(e.id, e.body)],
            reason=f"the history given to {self.who} changed this message",
            actor=self.who,
            turn=turn,
        )

    def rewrote(self, e: Entry, report: EditReport) -> None:
        if report.applied:
            self.rewritten.append(e.id)
        else:
            self.refused.append(e.id)
            if report.escalation is not None:
                self.escalations.append(report.escalation)


def _admission(
    head: Version,
    reads: Sequence[Read],
    api: str,
    readmit: object,
    turn: int | None,
    sync: bool,
    actor: str | None,
    rewritable: Collection[str],
) -> _Admission:
    """Decide every message of ``reads`` against ``head`` (see :func:`admit`)."""
    check_readmit(readmit)
    if actor is not None:
        check_text(actor, "actor")
    who = f"quiesce.adapters.{api}" if actor is None else actor
    live, tombs = head.live, head.tombs.by_id
    out = _Admission(head, who)
    batch: set[str] = set()
    for r in reads:
        entries = r.entries
        known = [e.id for e in entries if e.id in live or e.id in tombs]
        if known:
            if not sync:
                raise DuplicateEntry(f"message {r.index}: entry id {known[0]!r} is already used")
            for e in entries:
                slot = live.get(e.id)
                if slot is not None and e.id in rewritable and slot.entry.body != e.body:
                    out.rewrites.append(e)
            entries = [e for e in entries if e.id not in live and e.id not in tombs]
            if not entries:
                (out.held if any(i in live for i in known) else out.tombstoned).append(r.index)
                continue
        gone: list[str] = []
        mine: set[str] = set()
        for e in entries:
            for ref in e.refs:  # (most entries cite nothing)
                if ref not in live and ref not in batch and ref not in mine:
                    gone.append(ref)
            mine.add(e.id)
        if gone:
            tomb = tombs.get(gone[0])
            if sync and tomb is not None:
                out.tombstoned.append(r.index)  # answers a call pruned meanwhile
                continue
            raise DanglingReference(
                f"message {r.index}: {gone[0]!r} is "
                + ("pruned" if tomb is not None else "not in the buffer"),
                gone[0],
                tomb,
            )
        for e in entries:
            override = None
            tomb = head.tombs.matching(e.content_hash, e.key)
            if tomb is not None:
                override = _decide(readmit, r.index, e, tomb, _cycles(head, e, tomb), who, turn)
            out.plan.append((e, override, r.index))
            batch.add(e.id)
        if entries:
            out.appended.append(r.index)
    return out


def _append_planned(buf: Buffer, decided: _Admission, api: str) -> int:
    """Append ``decided.plan`` to an in-process buffer, synchronously (no
    await: atomic with respect to other coroutines; never touches a disk).
    A one-entry plan goes through ``Buffer.append`` (the same single version
    and checks, and the compact log record built when first read: no
    ``to_dict`` of the entry per append), a longer one through
    ``Buffer.extend``. Returns the head version after."""
    version = decided.head.number
    plan = decided.plan
    if len(plan) == 1:
        # one entry: Buffer.append publishes the same one version with the
        # same checks; its record is the compact form, built when first read
        version = buf.append(plan[0][0], override=plan[0][1])
    elif plan:
        # one version for the whole batch, all or nothing (Buffer.extend)
        version = buf.extend([e for e, _, _ in plan], [o for _, o, _ in plan])
    for e, override, _index in decided.plan:
        found = None if override is None else decided.readmitted_now(e, api)
        if found is not None:
            detail, data = found
            decided.escalations.append(buf.escalate(EscalationKind.OSCILLATION, detail, data=data))
    return version


def admit(
    buf: Buffer,
    reads: Sequence[Read],
    *,
    api: str,
    readmit: object,
    turn: int | None,
    sync: bool,
    actor: str | None = None,
    rewritable: Collection[str] = (),
) -> SyncReport:
    """Append what ``reads`` hold that the buffer does not, deciding every
    re-admission before the first append (so ``"refuse"`` or a bad answer
    from a callable leaves the head unchanged).

    With ``sync``, an entry the buffer already knows is held or tombstoned,
    not appended (the new entries of a message that gained some are), and a
    live entry in ``rewritable`` whose body changed is a ``Rewrite`` through
    the policy (refused and escalated for an immutable one); without it, a
    known id is a :class:`DuplicateEntry`. Each re-admission under ``"record"`` is appended
    with an ``Override`` naming the caller — ``actor``, the full name of the
    code that re-admits (an integration passes its module's), by default
    ``quiesce.adapters.<api>``; the second cycle of one content
    or key within :data:`OSCILLATION_WINDOW` versions is escalated. O(entries
    · log n), plus O(tombstones) per re-admission.

    Everything is decided against the head read at the start, and the
    batch is appended as *one* version (:meth:`Buffer.extend`, all or
    nothing): a writer in another thread that appends a conflicting id
    meanwhile makes the whole batch raise (:class:`DuplicateEntry`) and
    nothing of it is appended. Cancellation: nothing here awaits. A rewrite is
    a sync ``edit`` (it may flush a durable log): code on the event loop
    uses :func:`aadmit`.
    """
    decided = _admission(buf.head(), reads, api, readmit, turn, sync, actor, rewritable)
    version = _append_planned(buf, decided, api)
    for e in decided.rewrites:
        decided.rewrote(e, buf.edit(decided.rewrite_plan(e, turn)))
    return decided.report(version if decided.plan and not decided.rewrites else buf.version)


async def aadmit(
    buf: AsyncBuffer,
    reads: Sequence[Read],
    *,
    api: str,
    readmit: object,
    turn: int | None,
    sync: bool,
    actor: str | None = None,
    rewritable: Collection[str] = (),
) -> SyncReport:
    """:func:`admit` for code on the event loop, on any
    :class:`~quiesce.AsyncBuffer`. Always a checkpoint; no disk or database
    I/O on the loop (a rewrite goes through ``aedit``).

    On an in-process buffer (``open_buffer()``'s, or a plain one) the
    appends are :func:`admit`'s, decided and made after one checkpoint with
    no await between them: the batch is atomic with respect to other
    coroutines. On a shared buffer each entry is appended with ``aappend``
    (forwarded from a replica), in order; everything is decided against the
    local head first, so a bad message appends nothing, but a conflicting
    append by another member meanwhile makes a later one raise (the ones
    before it stay), as with a writer thread above. Cancellation between two
    writes leaves the first ones made: a later sync finds them held.
    """
    local = local_buffer(buf)
    if local is not None:
        await anyio.lowlevel.checkpoint()
    decided = _admission(buf.head(), reads, api, readmit, turn, sync, actor, rewritable)
    if local is not None:
        version = _append_planned(local, decided, api)
    else:
        version = decided.head.number
        if not decided.plan:
            await anyio.lowlevel.checkpoint()
        for e, override, _index in decided.plan:
            version = await buf.aappend(e, override=override)
            found = None if override is None else decided.readmitted_now(e, api)
            if found is not None:
                detail, data = found
                decided.escalations.append(
                    await buf.aescalate(EscalationKind.OSCILLATION, detail, data=data)
                )
    for e in decided.rewrites:
        decided.rewrote(e, await buf.aedit(decided.rewrite_plan(e, turn)))
    return decided.report(version if decided.plan and not decided.rewrites else buf.version)


def _decide(
    readmit: object,
    index: int,
    e: Entry,
    tomb: Tombstone,
    cycles: int,
    who: str,
    turn: int | None,
) -> Override:
    decision = readmit
    if callable(readmit):
        decision = readmit(Readmission(index, e, tomb, cycles))
        if isinstance(decision, Override):
            return decision
        if decision not in ("refuse", "record"):
            raise InvalidType(
                f"message {index}: the readmit callable must return 'refuse', 'record' "
                f"or an Override, not {decision!r}"
            )
    if decision == "refuse":
        raise ReadmissionRefused(
            f"message {index}: entry {e.id!r} matches the tombstone of {tomb.id!r} "
            f"(pruned at version {tomb.version}: {tomb.reason}); "
            "pass readmit='record' or an Override to re-admit it",
            tomb,
        )
    when = turn if turn is not None else (tomb.turn if tomb.turn is not None else 0)
    return Override(
        f"re-admitted by {who} (readmit='record'): the loop sent "
        f"content matching the tombstone of {tomb.id!r} again",
        when,
    )
