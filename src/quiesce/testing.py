"""Record a history of a buffer's use and check it for anomalies.

Proof by trying to break it (FoundationDB's deterministic simulation, Jepsen's
Elle): drive a buffer hard, record everything that happened, then check the
*whole history* against DESIGN.md's seven invariants and name every anomaly
with the vocabulary of Adya's isolation levels.

* :class:`Recorder` wraps a :class:`~quiesce.Buffer` (or the runtime's
  :class:`~quiesce.RuntimeBuffer`). Use its methods instead of the buffer's:
  each call is recorded with its arguments, result or exception, the head
  version before and after, and the task that made it. ``recorder.snapshot()``
  records the version a reader pinned and what it read at entry, at exit and
  in between. Every version the buffer publishes is captured as it is
  published — from a call, from the barrier scheduler, from an unpin or from a
  worker thread — by intercepting the buffer's head pointer. Versions are
  immutable, so keeping a reference to each costs nothing but memory.
* :func:`check_history` returns a list of :class:`Anomaly` (empty: the history
  is consistent).
* :func:`preloaded` builds a buffer already holding many entries, as one
  version and without log records (a 1e6-entry buffer in a second, for
  benchmarks and tests that measure or exercise the operations after it).

Anomaly kinds (:class:`AnomalyKind`; an :class:`Anomaly`'s ``kind`` compares
equal to the plain string):

``G1a`` (aborted read)
    a refused or failed (raised, cancelled) edit's effect is visible: it
    published a version, or its rewritten or summary content appears.
``G1b`` (intermediate read)
    a snapshot saw part of a batch: it pinned a version that no complete
    operation published (no log record), or its reads mix the states before
    and after one published version; or an applied edit's version lacks
    some of its writes (the batch was split).
``G-single`` (read skew)
    two versions mixed in one snapshot: a read that is not its pinned version.
``garbage-read``
    a removed entry's bytes read from a version that no longer holds them.
``early-removal``
    a removal before its grace point (invariant 5): a reader that pinned the
    entry unmarked was still pinned when the removal was published.
``lost-mark``
    a mark vanished or changed while its entry stayed live (marks are monotone
    and the first mark stands).
``protected-removed`` / ``immutable-changed``
    invariant 4. The one removal of a protected entry it accepts is the
    host's retraction: an applied edit by actor ``"host"`` with an override
    listing the id under ``retracted``, the removal record of that version
    listing it again, and a tombstone whose actor is ``"host"``.
``dangling-reference``
    a live entry cites a removed one (invariant 2).
``missing-tombstone`` / ``log-mismatch`` / ``log-rewritten``
    invariant 3: a removal without exactly one tombstone and one log record,
    a published version with no record, a log that lost or changed a record.
``undurable-removal``
    a removal published before its tombstone was durable in the sink.
``refused-change``
    invariant 6: a refused prune did more than mark.
``pin-leak``
    invariant 7.
``version-order``
    version numbers not strictly increasing.
``seq-gap`` / ``epoch-regression`` / ``lost-flush``
    the cross-process checks of :func:`check_shared_history` (one buffer
    shared by many processes): a shared log whose ``seq`` skips or repeats a
    number, a record of an old writer epoch after a newer epoch's first, and
    a ``flush()`` that returned in some member although what it made durable
    is not in the log.
``stale-snapshot``
    a snapshot pinned an older version than the head published before it
    was entered (a snapshot pins *the head*).
``lost-update``
    an applied edit with a ``base`` overwrote an entry changed after that
    base (the optimistic check let a stale plan through).
``silent-readmission``
    content whose hash or key matches a tombstone was appended or written
    back without an ``Override`` (seed 002's prune/re-admit oscillation).

The checker is deliberately independent of the core's own ``_check()``: it
recomputes everything from the recorded versions, so a bug in the core's
bookkeeping cannot hide a bug in its behaviour. Cost: O(versions · entries +
snapshots · removals) — meant for many small histories, not one huge one.

A buffer shared by many processes (``open_shared_buffer``) is checked with
:func:`check_shared_history`: the shared log merged by ``seq``, replayed
version by version into one history that must pass :func:`check_history`,
plus each member's :class:`MemberReport` (its readers, the flushes that
returned, when it lost its lease) for the cross-process checks.

It imports no event loop and no test framework; users may record and
check their own workloads::

    async with open_buffer() as buf:
        rec = Recorder(buf)
        ...  # tasks call rec.append / rec.prune / rec.edit / rec.snapshot()
    assert check_history(rec.history()) == []
"""

from __future__ import annotations

import bisect
import contextvars
import enum
import itertools
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from ._core.buffer import Buffer, Snapshot
from ._core.draft import Draft
from ._core.edit import HOST_ACTOR
from ._core.entry import Entry
from ._core.log import LogSink
from ._core.plan import EditPlan, Rewrite, Summarize
from ._core.policy import IMMUTABLE_KINDS, PROTECTED_KINDS, Policy
from ._core.records import (
    EditReport,
    LogRecord,
    Mark,
    Override,
    PruneReport,
    Status,
    Tombstone,
)
from ._core.tasks import current_task, task_name
from ._core.version import Version

__all__ = [
    "Anomaly",
    "AnomalyKind",
    "History",
    "MemberPin",
    "MemberReport",
    "OpEvent",
    "Publication",
    "Read",
    "RecordedSnapshot",
    "Recorder",
    "SnapshotEvent",
    "check_history",
    "check_shared_history",
    "preloaded",
]


class AnomalyKind(enum.StrEnum):
    """The names :func:`check_history` gives what it finds."""

    G1A = "G1a"
    G1B = "G1b"
    G_SINGLE = "G-single"
    GARBAGE_READ = "garbage-read"
    EARLY_REMOVAL = "early-removal"
    LOST_MARK = "lost-mark"
    PROTECTED_REMOVED = "protected-removed"
    IMMUTABLE_CHANGED = "immutable-changed"
    DANGLING_REFERENCE = "dangling-reference"
    MISSING_TOMBSTONE = "missing-tombstone"
    LOG_MISMATCH = "log-mismatch"
    LOG_REWRITTEN = "log-rewritten"
    UNDURABLE_REMOVAL = "undurable-removal"
    REFUSED_CHANGE = "refused-change"
    PIN_LEAK = "pin-leak"
    VERSION_ORDER = "version-order"
    SEQ_GAP = "seq-gap"
    EPOCH_REGRESSION = "epoch-regression"
    LOST_FLUSH = "lost-flush"
    STALE_SNAPSHOT = "stale-snapshot"
    SILENT_READMISSION = "silent-readmission"
    LOST_UPDATE = "lost-update"


@dataclass(frozen=True, slots=True)
class Anomaly:
    """One violation found in a history: what kind, and where, for a person."""

    kind: AnomalyKind
    detail: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.detail}"


# ---------------------------------------------------------------------------
# History events


@dataclass(frozen=True, slots=True)
class Publication:
    """A version the buffer published, when (``seq``) and by what (``op``: the
    index of the recorded call in progress in that task or thread, ``None``
    for the barrier scheduler or an unrecorded caller)."""

    seq: int
    version: Version
    op: int | None
    thread: int
    #: ids whose tombstones first appear in this version and were *not* durable
    #: in the sink when it was published (only checked with ``durable=``)
    undurable: tuple[str, ...] = ()


@dataclass(slots=True)
class OpEvent:
    """One recorded call: arguments, result or error, head before and after."""

    index: int
    seq: int
    task: str
    op: str
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any]
    before: int
    log_before: int = 0
    after: int = -1
    log_after: int = 0
    end: int = -1
    result: Any = None
    error: BaseException | None = None


@dataclass(frozen=True, slots=True)
class Read:
    """What a snapshot returned at one moment: the version number it reported,
    its entries, marks and tombstones, and point reads (id → Entry, Tombstone
    or ``None`` for "never existed")."""

    seq: int
    number: int
    entries: tuple[Entry, ...]
    marks: Mapping[str, Mark]
    tombstones: Mapping[str, Tombstone]
    points: tuple[tuple[str, Entry | Tombstone | None], ...] = ()


@dataclass(slots=True)
class SnapshotEvent:
    """One reader: the version it pinned, what it read, when it entered and
    left (``exit`` is ``None`` while it is pinned)."""

    index: int
    task: str
    enter: int
    pinned: Version
    reads: list[Read] = field(default_factory=list)
    exit: int | None = None
    released: bool = False
    error: str | None = None


@dataclass(frozen=True, slots=True)
class History:
    """Everything a :class:`Recorder` saw, ready for :func:`check_history`."""

    initial: Version
    publications: tuple[Publication, ...]
    ops: tuple[OpEvent, ...]
    snapshots: tuple[SnapshotEvent, ...]
    log: tuple[LogRecord, ...]
    #: (length, last record) of the log at moments during the run: the log
    #: only grows, so each must be a prefix of the final log
    log_observations: tuple[tuple[int, LogRecord | None], ...]
    policy: Policy
    pinned_at_end: int
    version_errors: tuple[str, ...] = ()


# ---------------------------------------------------------------------------
# Intercepting publications

_current_op: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "quiesce_testing_op", default=None
)
_tapped_classes: dict[type[Buffer], type[Buffer]] = {}
_tap_lock = threading.Lock()


def _tapped_class(cls: type[Buffer]) -> type[Buffer]:
    """A subclass of ``cls`` whose ``_head`` is a property: every store (every
    publication) calls the buffer's tap. Reads cost one property call."""
    with _tap_lock:
        tapped = _tapped_classes.get(cls)
        if tapped is None:

            def get_head(self: Buffer) -> Version:
                head: Version = self.__dict__["_head"]
                return head

            def set_head(self: Buffer, version: Version) -> None:
                self.__dict__["_head"] = version
                tap = self.__dict__.get("_recorder_tap")
                if tap is not None:
                    tap(version)

            tapped = type(
                f"Recorded{cls.__name__}",
                (cls,),
                {"_head": property(get_head, set_head), "__module__": cls.__module__},
            )
            _tapped_classes[cls] = tapped
        return tapped


# ---------------------------------------------------------------------------
# The recorder


class Recorder:
    """Record every call, publication and snapshot of ``buffer``.

    ``durable``, if given, returns the records the sink has made durable (in
    order); the recorder then checks, at the moment each removal is published,
    that its tombstones are already durable.

    Call the recorder's methods (``append``, ``mark_stale``, ``prune``,
    ``edit``, ``apply_due``, ``flush``, ``quiesce``, ``aflush``,
    ``snapshot``) instead of the buffer's; anything else is passed through to
    the buffer. Safe to use from several tasks and from worker threads.
    :meth:`history` ends the recording and returns the :class:`History`.

    How publications are seen: while recording, the buffer's class is a
    subclass whose ``_head`` (the head pointer every publication stores) is a
    property that reports each store; :meth:`history` restores the class.
    Each publication is attributed to the recorded call in progress in the
    publishing task or thread (a ``contextvars`` variable), so the checker
    can tell a call's own changes from concurrent ones.
    """

    def __init__(
        self,
        buffer: Buffer,
        *,
        durable: Callable[[], Sequence[LogRecord]] | None = None,
    ) -> None:
        if not isinstance(buffer, Buffer):
            raise TypeError(f"Recorder wraps a Buffer, not {type(buffer).__name__}")
        if "_recorder_tap" in buffer.__dict__:
            raise RuntimeError("this buffer is already being recorded")
        self.buffer = buffer
        self._seq = itertools.count()
        self._lock = threading.Lock()
        self._durable = durable
        self._durable_seen = 0
        self._durable_tombs: set[tuple[str, str]] = set()
        self._publications: list[Publication] = []
        self._ops: list[OpEvent] = []
        self._snapshots: list[SnapshotEvent] = []
        self._log_observations: list[tuple[int, LogRecord | None]] = []
        self._version_errors: list[str] = []
        self._original_class = type(buffer)
        self._initial = buffer.head()
        self._last_published = self._initial
        self._closed = False
        buffer.__dict__["_recorder_tap"] = self._on_publish
        buffer.__class__ = _tapped_class(self._original_class)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.buffer, name)

    # -- publications --------------------------------------------------------

    def _on_publish(self, version: Version) -> None:
        # Called under the buffer's write lock, in whatever task or thread
        # published: keep it cheap.
        seq = next(self._seq)
        prev = self._last_published
        if version.number <= prev.number:
            self._version_errors.append(
                f"version {version.number} published after version {prev.number}"
            )
        undurable: tuple[str, ...] = ()
        if self._durable is not None:
            new_tombs = [t for i, t in version.tombs.by_id.items() if i not in prev.tombs.by_id]
            if new_tombs:
                self._scan_durable()
                undurable = tuple(
                    t.id for t in new_tombs if (t.id, t.content_hash) not in self._durable_tombs
                )
        self._last_published = version
        self._publications.append(
            Publication(seq, version, _current_op.get(), threading.get_ident(), undurable)
        )

    def _scan_durable(self) -> None:
        assert self._durable is not None
        records = self._durable()
        for rec in records[self._durable_seen :]:
            # The tombstone may be durable in the removal record itself or in
            # an earlier intent record (written before the version number is
            # known): match on id and content hash.
            for t in rec.detail.get("tombstones", ()):
                self._durable_tombs.add((t["id"], t["content_hash"]))
        self._durable_seen = len(records)

    def _observe_log(self) -> None:
        log = self.buffer.log
        n = len(log)
        self._log_observations.append((n, log[n - 1] if n else None))

    # -- calls -------------------------------------------------------------

    def _begin(self, op: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> OpEvent:
        with self._lock:
            ev = OpEvent(
                len(self._ops),
                next(self._seq),
                task_name(current_task()),
                op,
                args,
                dict(kwargs),
                self.buffer.version,
                len(self.buffer.log),
            )
            self._ops.append(ev)
        return ev

    def _end(self, ev: OpEvent, result: Any, error: BaseException | None) -> None:
        ev.result = result
        ev.error = error
        ev.after = self.buffer.version
        ev.log_after = len(self.buffer.log)
        ev.end = next(self._seq)
        self._observe_log()

    def _call(self, op: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        ev = self._begin(op, args, kwargs)
        token = _current_op.set(ev.index)
        try:
            result = fn(*args, **kwargs)
        except BaseException as exc:
            self._end(ev, None, exc)
            raise
        finally:
            _current_op.reset(token)
        self._end(ev, result, None)
        return result

    def append(self, entry: Entry, *, override: Override | None = None) -> int:
        """Record :meth:`Buffer.append`."""
        result: int = self._call("append", self.buffer.append, entry, override=override)
        return result

    def mark_stale(self, entry_id: str, reason: str, *, turn: int | None = None) -> Mark:
        """Record :meth:`Buffer.mark_stale` (also from a worker thread)."""
        result: Mark = self._call("mark_stale", self.buffer.mark_stale, entry_id, reason, turn=turn)
        return result

    def prune(
        self,
        ids: Iterable[str],
        *,
        reason: str,
        actor: str | None = None,
        turn: int | None = None,
    ) -> PruneReport:
        """Record :meth:`Buffer.prune`."""
        if not isinstance(ids, str | bytes) and hasattr(ids, "__iter__"):
            ids = tuple(ids)
        result: PruneReport = self._call(
            "prune", self.buffer.prune, ids, reason=reason, actor=actor, turn=turn
        )
        return result

    def edit(self, plan: EditPlan) -> EditReport:
        """Record :meth:`Buffer.edit`."""
        result: EditReport = self._call("edit", self.buffer.edit, plan)
        return result

    def apply_due(self) -> tuple[str, ...]:
        """Record :meth:`Buffer.apply_due`."""
        result: tuple[str, ...] = self._call("apply_due", self.buffer.apply_due)
        return result

    def flush(self) -> None:
        """Record :meth:`Buffer.flush`."""
        self._call("flush", self.buffer.flush)

    async def _acall(self, op: str, name: str) -> None:
        ev = self._begin(op, (), {})
        token = _current_op.set(ev.index)
        try:
            await getattr(self.buffer, name)()
        except BaseException as exc:
            self._end(ev, None, exc)
            raise
        finally:
            _current_op.reset(token)
        self._end(ev, None, None)

    async def quiesce(self) -> None:
        """Record ``RuntimeBuffer.quiesce()``."""
        await self._acall("quiesce", "quiesce")

    async def aflush(self) -> None:
        """Record ``RuntimeBuffer.aflush()``."""
        await self._acall("aflush", "aflush")

    def snapshot(self) -> RecordedSnapshot:
        """A recording snapshot: ``with recorder.snapshot() as snap:``."""
        return RecordedSnapshot(self)

    # -- the end -----------------------------------------------------------

    def history(self) -> History:
        """Stop recording (restore the buffer's class) and return the history.
        Call it after every reader has left."""
        if not self._closed:
            self._closed = True
            self._observe_log()
            buf = self.buffer
            head = buf.head()
            buf.__dict__.pop("_recorder_tap", None)
            buf.__class__ = self._original_class
            buf.__dict__["_head"] = head
        return History(
            initial=self._initial,
            publications=tuple(self._publications),
            ops=tuple(self._ops),
            snapshots=tuple(self._snapshots),
            log=tuple(self.buffer.log),
            log_observations=tuple(self._log_observations),
            policy=self.buffer.policy,
            pinned_at_end=self.buffer.stats().pinned,
            version_errors=tuple(self._version_errors),
        )

    def check(self) -> list[Anomaly]:
        """``check_history(self.history())``."""
        return check_history(self.history())


class RecordedSnapshot:
    """A :class:`~quiesce.Snapshot` that records what it pinned and read.

    Entering records the pinned version and a full read; leaving records a
    full read and the release. In between, :meth:`read`, :meth:`resolve` and
    item access are recorded too.
    """

    __slots__ = ("_event", "_recorder", "_snap")

    def __init__(self, recorder: Recorder) -> None:
        self._recorder = recorder
        self._snap: Snapshot = recorder.buffer.snapshot()
        self._event: SnapshotEvent | None = None

    @property
    def snapshot(self) -> Snapshot:
        """The underlying snapshot."""
        return self._snap

    def __enter__(self) -> RecordedSnapshot:
        rec = self._recorder
        # The sequence number is taken *before* pinning and *before*
        # unpinning (in __exit__): a publication between the two is one the
        # reader certainly overlapped, never one it merely raced with.
        seq = next(rec._seq)
        self._snap.__enter__()
        pinned = self._snap._version
        assert pinned is not None
        with rec._lock:
            ev = SnapshotEvent(len(rec._snapshots), task_name(current_task()), seq, pinned)
            rec._snapshots.append(ev)
        self._event = ev
        self.read()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        ev = self._event
        assert ev is not None
        try:
            if self._snap.pinned:
                self.read()
        finally:
            ev.exit = next(self._recorder._seq)
            ev.error = None if exc_type is None else exc_type.__name__
            self._snap.__exit__(exc_type, exc, tb)
            ev.released = not self._snap.pinned

    def _record(self, points: tuple[tuple[str, Entry | Tombstone | None], ...] = ()) -> Read:
        snap = self._snap
        read = Read(
            next(self._recorder._seq),
            snap.version,
            snap.entries(),
            snap.marks,
            snap.tombstones,
            points,
        )
        assert self._event is not None
        self._event.reads.append(read)
        return read

    def read(self) -> tuple[Entry, ...]:
        """Read (and record) every live entry, mark and tombstone."""
        return self._record().entries

    def resolve(self, entry_id: str) -> Entry | Tombstone | None:
        """``snap.resolve(id)``, recorded; ``None`` for "never existed"."""
        from ._core.errors import UnknownEntry

        try:
            got: Entry | Tombstone | None = self._snap.resolve(entry_id)
        except UnknownEntry:
            got = None
        self._record(((entry_id, got),))
        return got

    def __getitem__(self, entry_id: str) -> Entry:
        """``snap[id]``, recorded as a point read."""
        got = self.resolve(entry_id)
        if isinstance(got, Entry):
            return got
        return self._snap[entry_id]  # raises EntryPruned / UnknownEntry

    @property
    def version(self) -> int:
        """The pinned version number (not recorded: it is in every read)."""
        return self._snap.version

    def __len__(self) -> int:
        """Live entries in the pinned version."""
        return len(self._snap)

    def __contains__(self, entry_id: object) -> bool:
        """Whether ``entry_id`` is live in the pinned version."""
        return entry_id in self._snap

    def mark(self, entry_id: str) -> Mark | None:
        """``snap.mark(id)`` (marks are checked through the full reads)."""
        return self._snap.mark(entry_id)

    def is_stale(self, entry_id: str) -> bool:
        """``snap.is_stale(id)``."""
        return self._snap.is_stale(entry_id)

    @property
    def marks(self) -> Mapping[str, Mark]:
        """``snap.marks``."""
        return self._snap.marks

    @property
    def tombstones(self) -> Mapping[str, Tombstone]:
        """``snap.tombstones``."""
        return self._snap.tombstones


# ---------------------------------------------------------------------------
# The checker


def check_history(history: History) -> list[Anomaly]:
    """Check ``history`` against DESIGN.md's invariants 1-7 and name every
    anomaly found (see the module docstring). An empty list: consistent."""
    return _Checker(history).run()


def _is_protected(policy: Policy, entry: Entry) -> bool:
    # From the rule table and the (user-supplied) classifier, not from the
    # policy's methods: a bug there must not blind the checker.
    return entry.kind in PROTECTED_KINDS or bool(policy.negative(entry))


def _is_immutable(entry: Entry) -> bool:
    return entry.kind in IMMUTABLE_KINDS


class _Checker:
    def __init__(self, h: History) -> None:
        self.h = h
        self.out: list[Anomaly] = []
        self.versions: dict[int, Version] = {h.initial.number: h.initial}
        for p in h.publications:
            self.versions.setdefault(p.version.number, p.version)
        self.prev_version: dict[int, Version] = {}
        prev = h.initial
        for p in h.publications:
            self.prev_version[p.seq] = prev
            prev = p.version
        self.logged = {r.version for r in h.log if r.version is not None}
        self.record_op = {r.version: r.op for r in h.log if r.version is not None}
        # The one exception to invariant 4, the host's retraction: an applied
        # edit of actor "host" with an override names the ids under
        # ``retracted``, and the removal record of the version that removes
        # them names them again. Both are required (and a host tombstone).
        self.host_retracts: set[str] = set()
        self.retracted_at: dict[int, set[str]] = {}
        for r in h.log:
            ids = r.detail.get("retracted", ())
            if r.op == "edit" and r.outcome == "applied" and r.actor == HOST_ACTOR:
                if (r.detail.get("plan") or {}).get("override") is not None:
                    self.host_retracts.update(ids)
            elif r.op == "remove" and r.version is not None:
                self.retracted_at[r.version] = set(ids)

    def is_retraction(self, i: str, v: Version, tomb: Tombstone | None) -> bool:
        """Whether removing ``i`` in ``v`` is the host's logged retraction."""
        return (
            tomb is not None
            and tomb.actor == HOST_ACTOR
            and i in self.host_retracts
            and i in self.retracted_at.get(v.number, ())
        )

    def add(self, kind: AnomalyKind, detail: str) -> None:
        self.out.append(Anomaly(kind, detail))

    def run(self) -> list[Anomaly]:
        for msg in self.h.version_errors:
            self.add(AnomalyKind.VERSION_ORDER, msg)
        removals = self.check_versions()
        self.check_log()
        self.check_ops()
        self.check_snapshots(removals)
        self.check_pins()
        return self.out

    # -- every published version, and each transition -----------------------

    def check_versions(self) -> list[tuple[Publication, tuple[str, ...]]]:
        policy = self.h.policy
        removals: list[tuple[Publication, tuple[str, ...]]] = []
        prev = self.h.initial
        for pub in self.h.publications:
            v = pub.version
            # (2) no live entry cites a tombstoned (or missing) entry.
            for i, slot in v.live.items():
                for ref in slot.entry.refs:
                    if ref not in v.live:
                        what = "removed" if ref in v.tombs.by_id else "absent"
                        self.add(
                            AnomalyKind.DANGLING_REFERENCE,
                            f"version {v.number}: live {i!r} cites {ref!r}, which is {what}",
                        )
            if pub.version.number not in self.logged:
                self.add(
                    AnomalyKind.LOG_MISMATCH,
                    f"version {v.number} was published without a log record",
                )
            removed: list[str] = []
            for i, slot in prev.live.items():
                new_slot = v.live.get(i)
                e = slot.entry
                if new_slot is None:
                    removed.append(i)
                    tomb = v.tombs.by_id.get(i)
                    if tomb is None:
                        self.add(
                            AnomalyKind.MISSING_TOMBSTONE,
                            f"{i!r} vanished in version {v.number} without a tombstone",
                        )
                    elif tomb.content_hash != e.content_hash:
                        self.add(
                            AnomalyKind.MISSING_TOMBSTONE,
                            f"{i!r}'s tombstone in version {v.number} has the wrong hash",
                        )
                    if (_is_protected(policy, e) or _is_immutable(e)) and not (
                        self.is_retraction(i, v, tomb)
                    ):
                        self.add(
                            AnomalyKind.PROTECTED_REMOVED,
                            f"protected {e.kind.name} {i!r} removed in version {v.number}",
                        )
                    continue
                if _is_immutable(e) and new_slot.entry.content_hash != e.content_hash:
                    self.add(
                        AnomalyKind.IMMUTABLE_CHANGED,
                        f"immutable {i!r}'s bytes changed in version {v.number}",
                    )
                if _is_protected(policy, e) and not _is_protected(policy, new_slot.entry):
                    self.add(
                        AnomalyKind.PROTECTED_REMOVED,
                        f"protected {i!r} was paraphrased out of protection in version {v.number}",
                    )
                mark = prev.marks.get(i)
                if mark is not None and v.marks.get(i) != mark:
                    self.add(
                        AnomalyKind.LOST_MARK,
                        f"{i!r}'s mark (version {mark.version}) is gone or changed in "
                        f"version {v.number} while the entry is live",
                    )
            for i, tomb in prev.tombs.by_id.items():
                if v.tombs.by_id.get(i) != tomb:
                    self.add(
                        AnomalyKind.MISSING_TOMBSTONE,
                        f"{i!r}'s tombstone vanished or changed in version {v.number}",
                    )
            if pub.undurable:
                self.add(
                    AnomalyKind.UNDURABLE_REMOVAL,
                    f"version {v.number} removed {list(pub.undurable)} before their "
                    f"tombstones were durable",
                )
            if removed:
                removals.append((pub, tuple(removed)))
            prev = v
        return removals

    # -- the log (invariant 3) --------------------------------------------------

    def check_log(self) -> None:
        log = self.h.log
        for n, last in self.h.log_observations:
            if n > len(log) or (n and log[n - 1] is not last):
                self.add(
                    AnomalyKind.LOG_REWRITTEN,
                    f"the log had {n} records, and its record {n - 1} is now different or gone",
                )
        for seq, rec in enumerate(log):
            if rec.seq != seq:
                self.add(AnomalyKind.LOG_REWRITTEN, f"log record {seq} carries seq {rec.seq}")
        # Each published version has one record; each removal one tombstone
        # and one record.
        counts: dict[int, int] = {}
        for rec in log:
            if rec.version is not None:
                counts[rec.version] = counts.get(rec.version, 0) + 1
        for number, c in counts.items():
            if c > 1:
                self.add(AnomalyKind.LOG_MISMATCH, f"version {number} has {c} log records")
        logged_tombs: dict[str, int] = {}
        for rec in log:
            if rec.op == "remove":
                for t in rec.detail.get("tombstones", ()):
                    logged_tombs[t["id"]] = logged_tombs.get(t["id"], 0) + 1
        final = self.h.publications[-1].version if self.h.publications else self.h.initial
        initial_tombs = self.h.initial.tombs.by_id
        for i, c in logged_tombs.items():
            if c != 1:
                self.add(AnomalyKind.LOG_MISMATCH, f"{i!r} has {c} removal records")
            if i not in final.tombs.by_id:
                self.add(
                    AnomalyKind.MISSING_TOMBSTONE,
                    f"{i!r} has a removal record but no tombstone in version {final.number}",
                )
        for i in final.tombs.by_id:
            if i not in logged_tombs and i not in initial_tombs:
                self.add(AnomalyKind.LOG_MISMATCH, f"{i!r}'s tombstone has no removal record")

    # -- per-call checks ----------------------------------------------------------

    def check_ops(self) -> None:
        pubs_by_op: dict[int, list[Publication]] = {}
        for p in self.h.publications:
            if p.op is not None:
                pubs_by_op.setdefault(p.op, []).append(p)
        committed: set[tuple[str, str]] = set()
        aborted: dict[tuple[str, str], int] = {}
        for ev in self.h.ops:
            pubs = pubs_by_op.get(ev.index, [])
            # A call that holds the write lock also applies removals that
            # became due meanwhile (a writer drains what a reader's unpin
            # could not): those batches are logged as "remove" and are not
            # the call's own effect.
            own = [p for p in pubs if self.record_op.get(p.version.number) != "remove"]
            if ev.op == "append" and ev.error is None:
                e = ev.args[0]
                committed.add((e.id, e.content_hash))
                if ev.kwargs.get("override") is None and own:
                    self.check_readmission(ev, own[0], [(e, True)])
            elif ev.op == "mark_stale" and ev.error is None:
                self.check_mark(ev)
            elif ev.op == "prune" and ev.error is None:
                self.check_prune(ev, pubs)
            elif ev.op == "edit":
                plan: EditPlan = ev.args[0]
                content = _plan_content(self.versions, ev.before, plan)
                report = ev.result
                if ev.error is None and isinstance(report, EditReport) and report.applied:
                    committed.update(content)
                    self.check_applied_edit(ev, plan, content, own)
                    continue
                for c in content:
                    aborted.setdefault(c, ev.index)
                if ev.error is None and not self._logged_refusal(ev):
                    self.add(
                        AnomalyKind.LOG_MISMATCH,
                        f"edit #{ev.index} by {ev.task} was refused without a log record",
                    )
                if own:
                    why = "was refused" if ev.error is None else f"raised {ev.error!r}"
                    self.add(
                        AnomalyKind.G1A,
                        f"edit #{ev.index} by {ev.task} {why} but published version(s) "
                        f"{[p.version.number for p in own]}",
                    )
            if ev.error is not None and ev.op in ("append", "mark_stale") and own:
                self.add(
                    AnomalyKind.G1A,
                    f"{ev.op} #{ev.index} raised {ev.error!r} but published "
                    f"{[p.version.number for p in own]}",
                )
        bad = {c: i for c, i in aborted.items() if c not in committed}
        if bad:
            for p in self.h.publications:
                for i, slot in p.version.live.items():
                    op = bad.get((i, slot.entry.content_hash))
                    if op is not None:
                        self.add(
                            AnomalyKind.G1A,
                            f"version {p.version.number} holds {i!r} as written by the "
                            f"refused or failed edit #{op}",
                        )
                        del bad[(i, slot.entry.content_hash)]
                if not bad:
                    break

    def check_applied_edit(
        self,
        ev: OpEvent,
        plan: EditPlan,
        content: set[tuple[str, str]],
        pubs: list[Publication],
    ) -> None:
        if not pubs:
            return
        first = pubs[0].version
        if plan.override is None:
            self.check_readmission(ev, pubs[0], _plan_writes(first, plan))
        # All or nothing: the version the edit published holds all it wrote.
        missing = [
            i
            for i, h in content
            if (slot := first.live.get(i)) is None or slot.entry.content_hash != h
        ]
        if missing:
            self.add(
                AnomalyKind.G1B,
                f"edit #{ev.index} by {ev.task} published version {first.number} without "
                f"its writes to {sorted(missing)}: the batch was split",
            )
        # Optimistic concurrency: nothing the plan touches changed after base.
        if plan.base is None:
            return
        base = self.versions.get(plan.base)
        pre = self.prev_version.get(pubs[0].seq)
        if base is None or pre is None:
            return
        for i in _plan_targets(plan):
            b, p = base.live.get(i), pre.live.get(i)
            if b is None or p is None:
                continue
            if b.entry is not p.entry and b.entry != p.entry:
                self.add(
                    AnomalyKind.LOST_UPDATE,
                    f"edit #{ev.index} (base {plan.base}) overwrote {i!r}, changed after its "
                    f"base, in version {first.number}",
                )

    def check_readmission(
        self, ev: OpEvent, pub: Publication, written: list[tuple[Entry, bool]]
    ) -> None:
        """Seed 002: content matching a tombstone (by hash, or by key for a
        new entry: a rewrite keeps its entry's already admitted key) comes
        back only with an explicit override."""
        pre = self.prev_version.get(pub.seq)
        if pre is None or not pre.tombs.by_id:
            return
        hashes = {t.content_hash: t for t in pre.tombs.by_id.values()}
        keys = {t.key: t for t in pre.tombs.by_id.values() if t.key is not None}
        for e, new in written:
            tomb = hashes.get(e.content_hash) or (keys.get(e.key) if new and e.key else None)
            if tomb is not None:
                self.add(
                    AnomalyKind.SILENT_READMISSION,
                    f"{ev.op} #{ev.index} re-admitted the content of tombstoned {tomb.id!r} "
                    f"as {e.id!r} in version {pub.version.number} without an override",
                )

    def _logged_refusal(self, ev: OpEvent) -> bool:
        return any(
            r.op == "edit" and r.outcome == "refused"
            for r in self.h.log[ev.log_before : ev.log_after]
        )

    def check_mark(self, ev: OpEvent) -> None:
        mark: Mark = ev.result
        v = self.versions.get(mark.version)
        if v is None:
            self.add(
                AnomalyKind.LOST_MARK,
                f"mark of {mark.id!r} cites version {mark.version}, never published",
            )
        elif v.marks.get(mark.id) != mark and mark.id in v.live:
            self.add(
                AnomalyKind.LOST_MARK,
                f"mark of {mark.id!r} returned by mark_stale is not in version {mark.version}",
            )

    def check_prune(self, ev: OpEvent, pubs: list[Publication]) -> None:
        report: PruneReport = ev.result
        after = self.versions.get(report.version)
        # What this call itself changed (other tasks and threads may publish
        # while it runs: only publications attributed to it count).
        changed: dict[str, int] = {}
        for p in pubs:
            prev = self.prev_version.get(p.seq)
            if prev is None:
                continue
            for i, slot in prev.live.items():
                new = p.version.live.get(i)
                if new is None or new.entry is not slot.entry:
                    changed.setdefault(i, p.version.number)
        for i, outcome in report.items():
            if outcome.status is Status.MARKED:
                if i in changed:
                    self.add(
                        AnomalyKind.REFUSED_CHANGE,
                        f"prune #{ev.index} refused {i!r} ({outcome.refusal}) but changed or "
                        f"removed it in version {changed[i]}",
                    )
                elif after is not None and i in after.live and i not in after.marks:
                    self.add(
                        AnomalyKind.LOST_MARK,
                        f"prune #{ev.index} refused {i!r} and should have marked it",
                    )
            elif outcome.status is Status.UNCHANGED and i in changed:
                self.add(
                    AnomalyKind.REFUSED_CHANGE,
                    f"prune #{ev.index} left {i!r} UNCHANGED but changed it in version "
                    f"{changed[i]}",
                )
            elif (
                outcome.status is Status.PRUNED and after is not None and i not in after.tombs.by_id
            ):
                self.add(
                    AnomalyKind.MISSING_TOMBSTONE,
                    f"prune #{ev.index} reports {i!r} PRUNED but version {after.number} has "
                    f"no tombstone",
                )

    # -- snapshots (invariants 1 and 5) --------------------------------------------

    def check_snapshots(self, removals: list[tuple[Publication, tuple[str, ...]]]) -> None:
        pubs = self.h.publications
        seqs = [p.seq for p in pubs]
        running: list[int] = []
        top = self.h.initial.number
        for p in pubs:
            top = max(top, p.version.number)
            running.append(top)
        for s in self.h.snapshots:
            v = s.pinned
            # The head published before the reader entered (its publication's
            # sequence number was taken after the store, the reader's before
            # pinning) is the least the reader may pin.
            k = bisect.bisect_left(seqs, s.enter)
            floor = running[k - 1] if k else self.h.initial.number
            if v.number < floor:
                self.add(
                    AnomalyKind.STALE_SNAPSHOT,
                    f"reader {s.task} pinned version {v.number} although version {floor} "
                    f"was already the head",
                )
            published = self.versions.get(v.number)
            if published is not v and published is not None:
                self.add(
                    AnomalyKind.G1B,
                    f"reader {s.task} pinned a version {v.number} that differs from the "
                    f"one published",
                )
            elif v.number not in self.logged and v.number != self.h.initial.number:
                self.add(
                    AnomalyKind.G1B,
                    f"reader {s.task} pinned version {v.number}, an intermediate state "
                    f"that no complete operation published",
                )
            for read in s.reads:
                self.check_read(s, read)
            numbers = {r.number for r in s.reads}
            if len(numbers) > 1:
                self.add(
                    AnomalyKind.G_SINGLE,
                    f"reader {s.task} pinned version {v.number} but its reads reported "
                    f"versions {sorted(numbers)}",
                )
            # (5) no removal while a reader that saw the entry unmarked is pinned.
            end = s.exit if s.exit is not None else float("inf")
            for pub, ids in removals:
                if not s.enter < pub.seq < end:
                    continue
                for i in ids:
                    if i in v.live and i not in v.marks:
                        self.add(
                            AnomalyKind.EARLY_REMOVAL,
                            f"{i!r} removed in version {pub.version.number} while reader "
                            f"{s.task}, which pinned it unmarked in version {v.number}, was "
                            f"still pinned",
                        )

    def check_read(self, s: SnapshotEvent, read: Read) -> None:
        v = s.pinned
        for i, got in read.points:
            self.check_point(s, v, i, got)
        if (
            read.number == v.number
            and read.entries == v.entries()
            and read.marks == v.marks
            and read.tombstones == v.tombs.by_id
        ):
            return
        # Classify the inconsistency.
        for e in read.entries:
            slot = v.live.get(e.id)
            if slot is None and e.id in v.tombs.by_id:
                self.add(
                    AnomalyKind.GARBAGE_READ,
                    f"reader {s.task} pinned version {v.number}, where {e.id!r} is removed, "
                    f"yet read its bytes",
                )
                return
        other = self._equal_version(read)
        if other is not None:
            self.add(
                AnomalyKind.G_SINGLE,
                f"reader {s.task} pinned version {v.number} but read version {other}",
            )
            return
        batch = self._split_batch(read)
        if batch is not None:
            self.add(
                AnomalyKind.G1B,
                f"reader {s.task} saw part of the batch that published version {batch}",
            )
            return
        self.add(
            AnomalyKind.G_SINGLE,
            f"reader {s.task} pinned version {v.number} but read a state that mixes versions",
        )

    def check_point(
        self, s: SnapshotEvent, v: Version, i: str, got: Entry | Tombstone | None
    ) -> None:
        slot = v.live.get(i)
        want: Entry | Tombstone | None = slot.entry if slot is not None else v.tombs.by_id.get(i)
        if got == want:
            return
        if isinstance(got, Entry) and slot is None:
            self.add(
                AnomalyKind.GARBAGE_READ,
                f"reader {s.task} read {i!r}'s bytes from version {v.number}, which "
                f"{'removed it' if want is not None else 'never held it'}",
            )
        else:
            self.add(
                AnomalyKind.G_SINGLE,
                f"reader {s.task} read {i!r} as {type(got).__name__} but its pinned version "
                f"{v.number} holds {type(want).__name__}",
            )

    def _equal_version(self, read: Read) -> int | None:
        for number, v in self.versions.items():
            if read.entries == v.entries() and read.marks == v.marks:
                return number
        return None

    def _split_batch(self, read: Read) -> int | None:
        """A published version n such that the read agrees with n on some ids
        it changed and with n-1 on others: a torn batch."""
        got = {e.id: e for e in read.entries}
        numbers = sorted(self.versions)
        for a, b in itertools.pairwise(numbers):
            va, vb = self.versions[a], self.versions[b]
            changed = [
                i
                for i in set(va.live) | set(vb.live)
                if va.live.get(i, _NO_SLOT).entry is not vb.live.get(i, _NO_SLOT).entry
            ]
            if len(changed) < 2:
                continue
            new = [i for i in changed if got.get(i) is _entry_or_none(vb, i)]
            old = [i for i in changed if got.get(i) is _entry_or_none(va, i)]
            if new and old and len(new) + len(old) == len(changed):
                return b
        return None

    # -- pins (invariant 7) ---------------------------------------------------------

    def check_pins(self) -> None:
        open_readers = 0
        for s in self.h.snapshots:
            if s.exit is None:
                open_readers += 1
            elif not s.released:
                self.add(AnomalyKind.PIN_LEAK, f"reader {s.task} left but is still pinned")
        if self.h.pinned_at_end > open_readers:
            self.add(
                AnomalyKind.PIN_LEAK,
                f"{self.h.pinned_at_end} pins remain after the readers left "
                f"({open_readers} recorded readers still open)",
            )


class _NoSlot:
    entry = None


_NO_SLOT: Any = _NoSlot()


def _entry_or_none(v: Version, i: str) -> Entry | None:
    slot = v.live.get(i)
    return None if slot is None else slot.entry


def _plan_writes(version: Version, plan: EditPlan) -> list[tuple[Entry, bool]]:
    """The entries a plan wrote, as they are in ``version``, each with whether
    it is a new entry (a summary) rather than a rewritten one."""
    out: list[tuple[Entry, bool]] = []
    for op in plan.ops:
        if isinstance(op, Rewrite | Summarize):
            new = isinstance(op, Summarize)
            slot = version.live.get(op.into.id if isinstance(op, Summarize) else op.id)
            if slot is not None:
                out.append((slot.entry, new))
    return out


def _plan_targets(plan: EditPlan) -> list[str]:
    out: list[str] = []
    for op in plan.ops:
        if isinstance(op, Summarize):
            out.extend(op.ids)
        else:
            out.append(op.id)
    return out


def _plan_content(
    versions: Mapping[int, Version], before: int, plan: EditPlan
) -> set[tuple[str, str]]:
    """(id, content hash) of every entry the plan would write."""
    out: set[tuple[str, str]] = set()
    base = versions.get(before)
    for op in plan.ops:
        if isinstance(op, Rewrite):
            slot = None if base is None else base.live.get(op.id)
            if slot is not None:
                out.add((op.id, slot.entry.replace(body=op.body, refs=op.refs).content_hash))
            else:
                from ._core.entry import content_hash

                out.add((op.id, content_hash(op.body)))
        elif isinstance(op, Summarize):
            out.add((op.into.id, op.into.content_hash))
    return out


def preloaded(entries: Sequence[Entry], *, marked: int = 0, log: LogSink | None = None) -> Buffer:
    """A new :class:`~quiesce.Buffer` whose version 1 holds ``entries`` in
    order, the first ``marked`` of them marked stale (reason ``"bench:
    seeded"``).

    Bulk-loaded through the core's draft in O(n log n): building a 1e6-entry
    buffer by ``append`` would cost seconds and a log nobody reads. No log
    record is written for the load itself (so the log does not replay to
    this state): use it where only the operations *after* it matter, as the
    benchmarks do. With ``log`` (an empty sink), every record those later
    operations produce goes to it on the next ``flush()``. Ids must be
    distinct and ``entries`` must cite only entries listed before them.
    """
    buf = Buffer(log=log)
    draft = Draft(buf.head())
    for e in entries:
        draft.add(e, None, 1)
    for e in entries[:marked]:
        draft.marks[e.id] = Mark(e.id, "bench: seeded", None, 1)
    buf._head = draft.finish(1)
    buf._unmarked = {e.id for e in entries[marked:]}  # the mark fast path's index
    return buf


# ---------------------------------------------------------------------------
# Many processes: the merged history of a shared buffer


@dataclass(frozen=True, slots=True)
class MemberPin:
    """One reader in one member process of a shared buffer: the version it
    pinned, the live ids it saw there, and when (wall clock, ``time.time()``,
    the clock the log records' ``time`` uses) it was pinned: ``entered`` taken
    just *after* pinning, ``exited`` just *before* unpinning (``None``: still
    pinned at the end), so the recorded interval lies inside the real one and
    a correct run never looks early."""

    member: str
    version: int
    entered: float
    exited: float | None
    seen: tuple[str, ...] | None = None
    #: when (wall clock, taken just *before* each read) a read of this
    #: snapshot started and then succeeded: a read that began after a removal
    #: of an entry live in its version was served too late, whatever the
    #: member's recorded lease losses say
    reads: tuple[float, ...] = ()


@dataclass(frozen=True, slots=True)
class MemberReport:
    """What one member of a shared buffer recorded: its readers, the
    ``(log length, last record)`` its local log had each time a ``flush()``
    returned (everything up to there is durable, so the shared log must hold
    it), and the wall-clock moments it counted its member lease lost (its
    readers pinned at that moment stop counting: they are void)."""

    member: str
    pins: tuple[MemberPin, ...] = ()
    flushes: tuple[tuple[int, LogRecord | None], ...] = ()
    lease_lost: tuple[float, ...] = ()


def _same_record(a: LogRecord, b: LogRecord) -> bool:
    return (a.seq, a.op, a.version, tuple(a.ids), a.time) == (
        b.seq,
        b.op,
        b.version,
        tuple(b.ids),
        b.time,
    )


def check_shared_history(
    rows: Iterable[tuple[int, LogRecord]],
    members: Iterable[MemberReport] = (),
    *,
    policy: Policy | None = None,
) -> list[Anomaly]:
    """Check a buffer shared by many processes.

    ``rows`` are the shared log's ``(writer_epoch, record)`` pairs in any
    order (each process's view may be concatenated: they are merged by
    ``seq``, identical duplicates dropped); ``members`` what each process
    recorded. Finds:

    * ``seq-gap``: the merged log skips or repeats a ``seq``;
    * ``epoch-regression``: a record of an old epoch after a newer epoch's
      first record (a fenced-out sequencer wrote after its successor);
    * everything :func:`check_history` finds in the merged log replayed
      record by record into one history (each record that publishes is one
      version);
    * ``early-removal``: a removal published (its record's ``time``) while a
      reader in a live member was pinned at a version where the entry was
      live and unmarked (a member's readers pinned when it counted its lease
      lost are excluded from then on: they are void); and, lease loss or
      not, a read of such a reader (:attr:`MemberPin.reads`) that began
      after the removal (a member that served reads past the lease-loss time
      it recorded);
    * ``G1b``: a member's reader saw other ids than the log's version of that
      number (a replica diverged);
    * ``lost-flush``: a member's ``flush()`` returned with records that are
      not (or differ) in the log.

    Timestamps are compared across processes, so they must come from one
    clock (one host, or clocks known to agree). O(records · entries + pins ·
    removals).
    """
    from ._core.replay import replay

    out: list[Anomaly] = []
    by_seq: dict[int, tuple[int, LogRecord]] = {}
    for epoch, rec in rows:
        seen = by_seq.get(rec.seq)
        if seen is not None and not (seen[0] == epoch and _same_record(seen[1], rec)):
            out.append(
                Anomaly(
                    AnomalyKind.SEQ_GAP,
                    f"seq {rec.seq} holds two different records ({seen[1].op}, {rec.op})",
                )
            )
        by_seq.setdefault(rec.seq, (epoch, rec))
    merged = [by_seq[k] for k in sorted(by_seq)]
    log = [rec for _, rec in merged]
    for expected, rec in enumerate(log):
        if rec.seq != expected:
            out.append(
                Anomaly(AnomalyKind.SEQ_GAP, f"seq {expected} is missing (next is {rec.seq})")
            )
            log = log[:expected]  # replay stops at the first gap
            break
    newest = 0
    for epoch, rec in merged:
        if epoch < newest:
            out.append(
                Anomaly(
                    AnomalyKind.EPOCH_REGRESSION,
                    f"record {rec.seq} ({rec.op}) of epoch {epoch} after a record of "
                    f"epoch {newest}",
                )
            )
        newest = max(newest, epoch)

    # The merged log as one history: every version it publishes, in order.
    rec_buf = Recorder(Buffer(policy=policy))
    for rec in log:
        replay(rec_buf.buffer, [rec])
        rec_buf._observe_log()
    history = rec_buf.history()
    out.extend(check_history(history))

    versions = {history.initial.number: history.initial}
    for pub in history.publications:
        versions[pub.version.number] = pub.version
    reports = list(members)
    for m in reports:
        for pin in m.pins:
            v = versions.get(pin.version)
            if v is None:
                out.append(
                    Anomaly(
                        AnomalyKind.G1B,
                        f"member {m.member}'s reader pinned version {pin.version}, which "
                        f"the log never published",
                    )
                )
            elif pin.seen is not None and list(pin.seen) != [e.id for e in v.entries()]:
                out.append(
                    Anomaly(
                        AnomalyKind.G1B,
                        f"member {m.member}'s reader saw {list(pin.seen)} in version "
                        f"{pin.version}; the log's version {pin.version} holds "
                        f"{[e.id for e in v.entries()]}",
                    )
                )
        for n, last in m.flushes:
            if n == 0:
                continue
            if n > len(log) or last is None or not _same_record(log[n - 1], last):
                where = f"has only {len(log)}" if n > len(log) else f"differs at seq {n - 1}"
                out.append(
                    Anomaly(
                        AnomalyKind.LOST_FLUSH,
                        f"member {m.member}'s flush() returned with {n} records, but the "
                        f"log {where}",
                    )
                )

    # (5) across processes: each removal against every member's readers.
    prev = history.initial
    for pub in history.publications:
        v = pub.version
        removed = [i for i in v.tombs.by_id if i not in prev.tombs.by_id]
        if removed:
            at = next(r.time for r in log if r.version == v.number)
            for i in removed:
                for m in reports:
                    for pin in m.pins:
                        if not pin.entered <= at:
                            continue
                        pinned = versions.get(pin.version)
                        if pinned is None or i not in pinned.live or i in pinned.marks:
                            continue
                        late = [r for r in pin.reads if r >= at]
                        if late:
                            out.append(
                                Anomaly(
                                    AnomalyKind.EARLY_REMOVAL,
                                    f"{i!r} removed in version {v.number}, but a reader of "
                                    f"member {m.member}, which pinned it unmarked in version "
                                    f"{pin.version}, read it {late[-1] - at:.3f}s after the "
                                    f"removal",
                                )
                            )
                            continue
                        if pin.exited is not None and pin.exited < at:
                            continue
                        if any(pin.entered <= lost <= at for lost in m.lease_lost):
                            continue  # void since its member lost its lease
                        out.append(
                            Anomaly(
                                AnomalyKind.EARLY_REMOVAL,
                                f"{i!r} removed in version {v.number} while a reader of "
                                f"member {m.member}, which pinned it unmarked in version "
                                f"{pin.version}, was still pinned",
                            )
                        )
        prev = v
    return out
