"""The recorder: every call, publication and snapshot of one buffer, in order.

What it keeps true: every version the buffer publishes is captured at the
moment it is published, from whichever task or thread publishes it, and is
attributed to the recorded call in progress there (a ``contextvars``
variable); the buffer's own class is restored when :meth:`Recorder.history`
ends the recording, so a recorded buffer behaves as before afterwards. A
snapshot's reads are recorded against the version it pinned, and its unpin
runs even when the reader is cancelled (plain sync code in ``__exit__``).
Cost: O(1) per call and per publication besides the call itself, plus the
memory of the versions kept (immutable, so shared).
"""

from __future__ import annotations

import contextvars
import itertools
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, Unpack

from .._core.buffer import Buffer, Snapshot
from .._core.entry import Entry
from .._core.observe import tap_publications
from .._core.pins import reader_of
from .._core.plan import EditPlan
from .._core.records import (
    EditReport,
    LogRecord,
    Mark,
    Override,
    PruneReport,
    Tombstone,
)
from .._core.stream import PruneOptions
from .._core.tasks import current_task, task_name
from .._core.version import Version
from .._core.wire import Op, parse_remove
from .checker import check_history
from .events import Anomaly, History, OpEvent, Publication, Read, SnapshotEvent

__all__ = ["RecordedSnapshot", "Recorder"]

# ---------------------------------------------------------------------------
# Intercepting publications

_current_op: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "quiesce_testing_op", default=None
)
#: The records that carry tombstones: a removal and its intent.
_TOMBSTONE_OPS = (Op.REMOVE.value, Op.TOMBSTONE.value)


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

    How publications are seen: while recording, every store of the buffer's
    head (every publication) is reported through the core's
    ``tap_publications``; :meth:`history` removes the tap.
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
        self._initial = buffer.head()
        self._last_published = self._initial
        self._closed = False
        try:
            self._untap = tap_publications(buffer, self._on_publish)
        except RuntimeError:
            raise RuntimeError("this buffer is already being recorded") from None

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
            if rec.op in _TOMBSTONE_OPS:
                for t in parse_remove(rec).tombstones:
                    self._durable_tombs.add((t.id, t.content_hash))
        self._durable_seen = len(records)

    def observe_log(self) -> None:
        """Note the log's length and last record now (the history checker
        compares them with what each version published). O(1)."""
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
        self.observe_log()

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

    def prune(self, ids: Iterable[str], **options: Unpack[PruneOptions]) -> PruneReport:
        """Record :meth:`Buffer.prune` (options: :class:`~quiesce._core.stream.PruneOptions`)."""
        if not isinstance(ids, str | bytes) and hasattr(ids, "__iter__"):
            ids = tuple(ids)
        result: PruneReport = self._call("prune", self.buffer.prune, ids, **options)
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
            self.observe_log()
            self._untap()
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
        pinned = reader_of(self._snap)[1]
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
        from .._core.errors import UnknownEntry

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
