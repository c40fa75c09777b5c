"""The buffer's state: every field the buffer's parts share, in one place.

:class:`~.buffer.Buffer` is a façade over parts that each do one job — the
pin registry (:mod:`.pins`), the grace queue (:mod:`.grace`), the log tail
and the removal path (:mod:`.publish`), the editor (:mod:`.edit`), the
streams (:mod:`.stream`), the checker (:mod:`.check`) — and recovery
(:mod:`.checkpoint`, :mod:`.replay`, :mod:`.verify`) rebuilds the same
fields. They all read and write one :class:`BufferState`; none of them
holds the façade. This module imports no other part, so the core's import
graph has no circle (``tests/project/test_layering.py`` asserts it).

What it keeps true:

1. **One head.** ``head`` is the only reference to the head version; a
   write publishes by one store to it, under ``write_lock`` (atomic under
   the GIL); readers read it without a lock.
2. **Written under the write lock.** Every field below except the ones
   marked otherwise is changed only by a writer holding ``write_lock``
   (the readers' fast path touches the pin registry, lock-free, and reads
   ``head``, ``staged`` and ``clock``).
3. **The mark index is exact.** ``unmarked`` ∪ ``unmarked_new`` is the set
   of live, mutable, unmarked ids of ``head`` (:meth:`markable` folds the
   second into the first, amortized O(1) per append).

A field is a plain slot: reading one costs what reading an attribute of the
buffer cost before the parts were split (the fast paths bind the state to
a local once and read its slots).

Cancellation: nothing here awaits.
"""

from __future__ import annotations

import itertools
import sys
import threading
import weakref
from collections import Counter, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from .log import EditLog, LogSink, Records
from .version import Version

if TYPE_CHECKING:
    from .callbacks import WriteGuard
    from .policy import Policy
    from .records import Escalation, LogRecord, Refusal

__all__ = ["BufferState", "Group", "HasState", "state_of", "tap_head", "weakly"]


class Hooks(Protocol):
    """What the state calls on an observer (:class:`~.observe.Observer`
    implements it; named here so the state needs no import of it)."""

    def due(self) -> None: ...

    def applied(self, removed: tuple[str, ...]) -> None: ...


@dataclass(slots=True)
class Group:
    """Ids staged for removal together (one transaction).

    ``grace`` is the version from which every reader saw all members marked:
    the group is due once no reader pinned below it remains.
    """

    gid: int
    ids: tuple[str, ...]
    grace: int
    staged: int  #: version that staged it; members changed after it are refused
    reason: str
    actor: str | None
    turn: int | None
    #: members the host retracts (a host plan with an override, :mod:`.edit`):
    #: removed at the grace point even if protected or immutable
    retracted: frozenset[str] = frozenset()
    #: the members passed the policy when staged (by this process): with the
    #: library's own policy a member unchanged since is not classified again
    #: at removal (issue 13: classify once). False for recovered groups.
    checked: bool = False


class BufferState:
    """The fields of one buffer (see the module docstring). Built by
    :class:`~.buffer.Buffer` (and by recovery's scratch buffers); each part
    is handed it. O(1) to build."""

    __slots__ = (
        "applying",
        "backlog_alarm",
        "checkpoint_due",
        "checkpoint_every",
        "checkpoints_ok",
        "clock",
        "compacted",
        "counts",
        "due_flag",
        "due_hook",
        "due_since",
        "escalation_hook",
        "escalations",
        "escalations_dropped",
        "flush_lock",
        "gids",
        "grace_floor",
        "head",
        "immutable_hashes",
        "in_sink_write",
        "intents",
        "latency_last",
        "latency_max",
        "log_failing",
        "log_view",
        "max_removed_grace",
        "observer",
        "pin_lock",
        "pin_order",
        "pin_popped",
        "pins",
        "policy",
        "protected_at",
        "record_hook",
        "records",
        "refusals",
        "reopen_stream",
        "retention",
        "sink",
        "staged",
        "staged_ids",
        "streams",
        "synced",
        "trim_above",
        "unmarked",
        "unmarked_new",
        "write_lock",
    )

    # -- the head and its writers ------------------------------------------------
    head: Version  #: the head version (one attribute store publishes)
    #: serializes writers; readers never take it (a WriteGuard while a callback runs)
    write_lock: threading.RLock | WriteGuard
    policy: Policy
    clock: Callable[[], float]
    # -- pins (pins.py): written lock-free by readers, walked under pin_lock ------
    pins: dict[int, dict[Any, None]]  #: version number -> its readers (snapshots)
    pin_order: deque[int]  #: pinned version numbers, oldest at the front
    pin_lock: threading.Lock  #: serializes the walkers of pin_order, never a reader
    #: entries popped off the front of ``pin_order`` so far (under ``pin_lock``):
    #: ``pin_popped + i`` numbers ``pin_order[i]`` for good
    pin_popped: int
    # -- staged removals (grace.py) ---------------------------------------------
    staged: list[tuple[int, int, Group]]  #: the due heap: (grace, gid, group)
    staged_ids: dict[str, Group]  #: every staged id (also those being applied)
    applying: dict[int, Group]  #: popped, being made durable
    intents: dict[int, int]  #: gid -> seq of the intent record logged for it
    gids: Iterator[int]
    backlog_alarm: bool
    #: the lowest version readers in *other processes* may still hold (a shared
    #: buffer's members), ``None`` for none; ``-1`` holds every removal back
    grace_floor: int | None
    due_hook: Callable[[], None] | None  #: the runtime's wake-up, else None
    due_flag: bool  #: a due removal waits for the writer holding the lock
    due_since: float | None
    latency_last: float | None
    latency_max: float | None
    max_removed_grace: int  #: invariant 5's witness (check.py)
    observer: Hooks | None  #: told of due signals and applied batches (an observe.Observer)
    # -- the mark index (buffer.py) ------------------------------------------------
    unmarked: set[str]  #: live, mutable, unmarked ids of the head, but ...
    unmarked_new: list[str]  #: ... the ids appended since the last fold
    # -- the log (publish.py, log.py) --------------------------------------------
    sink: LogSink | None
    flush_lock: threading.Lock  #: one sink write at a time
    records: Records  #: LogRecords and compact records (log.py)
    log_view: EditLog
    synced: int  #: records [0, synced) are durable in the sink
    retention: int  #: records kept in memory without a sink (log.py)
    #: without a sink the fast paths trim the log once it holds more than this
    trim_above: int
    log_failing: bool
    in_sink_write: int | None  #: the thread in sink.write, if any (callbacks.py)
    #: passes every record of the record path before it is appended (replication.py)
    record_hook: Callable[[LogRecord], LogRecord] | None
    checkpoint_every: int  #: records between automatic checkpoints (checkpoint.py)
    checkpoint_due: int  #: the record count at which flush() writes the next one
    checkpoints_ok: bool  #: the sink recovers from checkpoints (CheckpointSink)
    compacted: bool  #: the log starts from a compacted checkpoint
    # -- statistics and escalations ---------------------------------------------------
    counts: Counter[str]
    refusals: Counter[Refusal]
    escalation_hook: Callable[[Escalation], bool] | None  #: the runtime's, else None
    escalations: deque[Escalation]  #: queued while no runtime consumes them
    escalations_dropped: int
    # -- ledgers (invariant 4, claims.py) and open streams ---------------------------
    immutable_hashes: dict[str, str]  #: each live immutable's admitted content hash
    protected_at: dict[str, int]  #: seq of the record writing each protected entry
    streams: dict[str, Any]  #: the open streams' writers, by id (stream.py)
    #: (header, key, text) -> a writer for an open stream rebuilt from a log,
    #: registered in ``streams`` (installed by the streams part; recovery calls it)
    reopen_stream: Callable[[Any, float, str], Any]

    def __init__(
        self,
        policy: Policy,
        sink: LogSink | None,
        clock: Callable[[], float],
        *,
        escalation_capacity: int,
        log_retention: int,
        checkpoint_every: int,
        checkpoints_ok: bool,
    ) -> None:
        self.policy = policy
        self.sink = sink
        self.clock = clock
        self.write_lock = threading.RLock()
        self.pin_lock = threading.Lock()
        self.flush_lock = threading.Lock()
        self.head = Version.empty()
        self.pins = {}
        self.pin_order = deque()
        self.pin_popped = 0
        self.staged = []
        self.staged_ids = {}
        self.applying = {}
        self.intents = {}
        self.gids = itertools.count(1)
        self.backlog_alarm = False
        self.grace_floor = None
        self.due_hook = None
        self.due_flag = False
        self.due_since = None
        self.latency_last = None
        self.latency_max = None
        self.max_removed_grace = 0
        self.observer = None
        # Ids live, mutable and unmarked in the head: the mark fast path asks
        # this set (a hash lookup) instead of two persistent-map lookups.
        # Kept exact under the write lock; the checker asserts it. Ids
        # appended since the last fold wait in a list (a list append is
        # cheaper than a set insert into a large, cold table).
        self.unmarked = set()
        self.unmarked_new = []
        self.records = Records()
        self.log_view = EditLog(self.records)
        self.synced = 0
        self.retention = log_retention
        self.trim_above = log_retention + max(log_retention, 16) if sink is None else sys.maxsize
        self.log_failing = False
        self.in_sink_write = None
        self.record_hook = None
        self.checkpoint_every = checkpoint_every
        self.checkpoint_due = checkpoint_every
        self.checkpoints_ok = checkpoints_ok
        self.compacted = False
        self.counts = Counter()
        self.refusals = Counter()
        self.escalation_hook = None
        self.escalations = deque(maxlen=escalation_capacity)
        self.escalations_dropped = 0
        self.immutable_hashes = {}
        self.protected_at = {}
        self.streams = {}
        self.reopen_stream = _no_streams

    def markable(self) -> set[str]:
        """The exact index of live, mutable, unmarked ids (call under the
        write lock): folds in the ids appended since the last call. Amortized
        O(1) per append."""
        pending = self.unmarked_new
        if pending:
            self.unmarked.update(pending)
            pending.clear()
        return self.unmarked


def weakly(method: Callable[..., Any]) -> Any:
    """``method`` (a bound method of a buffer or of one of its parts) called
    through a weak reference to its object: whoever is handed it keeps that
    object alive no longer. A part holding a bound method of the buffer, or
    of a part that holds it, would make every buffer cyclic garbage, freed
    (its log's file lock released) only by the cycle collector. Once the
    object is gone the call does nothing and returns ``None``. O(1)."""
    ref = weakref.WeakMethod(method)

    def call(*args: Any) -> Any:
        bound = ref()
        return None if bound is None else bound(*args)

    return call


def _no_streams(header: Any, key: float, text: str) -> Any:
    raise AssertionError("this state has no streams part to reopen a stream in")


class HasState(Protocol):
    """What holds a :class:`BufferState` (a :class:`~.buffer.Buffer`): the
    recovery and check functions take either."""

    @property
    def _st(self) -> BufferState: ...


def state_of(obj: BufferState | HasState) -> BufferState:
    """``obj`` if it is a state, else the state it holds. O(1)."""
    return obj if isinstance(obj, BufferState) else obj._st


def tap_head(st: BufferState, tap: Callable[[Version], None]) -> Callable[[], None]:
    """Make every store to ``st.head`` (every publication) call ``tap`` with
    the new version right after it, until the returned undo is called.

    The state's class is swapped for a subclass whose ``head`` is a property
    (same slots, so the swap is allowed and nothing moves): while untapped a
    publication costs what it did, nothing is checked on the fast paths.
    For test tools only (``quiesce.testing``'s recorder): a tapped head read
    costs a property call. Raises :class:`RuntimeError` if ``st`` is tapped
    already. O(1)."""
    if type(st) is not BufferState:
        raise RuntimeError("this buffer's publications are tapped already")

    def read(self: BufferState) -> Version:
        return _HEAD_SLOT.__get__(self, BufferState)  # type: ignore[no-any-return]

    def store(self: BufferState, version: Version) -> None:
        _HEAD_SLOT.__set__(self, version)
        tap(version)

    body = {"__slots__": (), "head": property(read, store)}
    tapped = type("TappedBufferState", (BufferState,), body)
    st.__class__ = tapped

    def untap() -> None:
        st.__class__ = BufferState

    return untap


#: the ``head`` slot itself (a member descriptor), for :func:`tap_head`
_HEAD_SLOT: Any = BufferState.__dict__["head"]
