"""The vocabulary of a recorded history: what happened (publications, calls,
snapshots and their reads) and what the checker calls a violation.

What it keeps true: every event is plain data, frozen where it is final
(a :class:`Publication`, a :class:`Read`, a :class:`History`), so a history
can be kept, compared and checked after the buffer is gone; nothing here
refers back to a live buffer. :class:`AnomalyKind` is the one list of names
the checkers use (see :mod:`quiesce.testing` for what each means).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .._core.entry import Entry
from .._core.policy import Policy
from .._core.records import (
    LogRecord,
    Mark,
    Tombstone,
)
from .._core.version import Version

__all__ = ["Anomaly", "AnomalyKind", "History", "OpEvent", "Publication", "Read", "SnapshotEvent"]


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
