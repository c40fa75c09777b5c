"""Result and record shapes: frozen values the buffer returns and logs.

The engine-made records (:class:`Mark`, :class:`Tombstone`, :class:`Outcome`,
:class:`LogRecord`) are ``NamedTuple``s: frozen, and cheap enough to build on
the mark fast path (a tuple allocation, no per-field ``object.__setattr__``).
Caller-made values (:class:`Override`) validate their fields.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from .plan import EditPlan, Override
from .tombstone import Tombstone

__all__ = [
    "FORMAT",
    "HOST_ACTOR",
    "EditReport",
    "Escalation",
    "EscalationKind",
    "LogRecord",
    "Mark",
    "Outcome",
    "Override",
    "PruneReport",
    "ReaderInfo",
    "Refusal",
    "Stats",
    "Status",
    "Tombstone",
]

#: The actor name of the host application: its edit plans (with an override)
#: may create entries of protected and immutable kinds (a summary into a
#: system instruction) and *retract* entries of any kind (a ``Prune`` of a user
#: message: the host's undo); no other actor's may
HOST_ACTOR = "host"

#: Version of the edit-log record format. Every record carries it; a sink
#: refuses to open a log whose records are newer than this.
FORMAT = 1


class Status(enum.Enum):
    """What a prune request did to one id (seed 000)."""

    PRUNED = "pruned"  #: removed now; the tombstone is written
    DEFERRED = "deferred"  #: marked now; removed at its grace point
    MARKED = "marked"  #: refused, and marked instead
    UNCHANGED = "unchanged"  #: immutable kind, unknown id, or already removed


class Refusal(enum.Enum):
    """Why a request (or part of one) was refused."""

    PROTECTED = "protected"  #: a protected kind would be removed or paraphrased
    NEGATIVE = "negative"  #: the classifier flags a negative result
    IMMUTABLE = "immutable"  #: constraints and instructions are never changed
    REFERENCED = "referenced"  #: a surviving entry still cites it
    RATIONALE = "rationale"  #: the plan touches its own rationale
    READMISSION = "readmission"  #: content or key matches a tombstone
    CONFLICT = "conflict"  #: changed since the plan's base version
    UNKNOWN = "unknown"  #: no such live entry


class Outcome(NamedTuple):
    """One id's result in a :class:`PruneReport`; ``refusal`` is ``None`` unless refused."""

    status: Status
    refusal: Refusal | None = None


class PruneReport(Mapping[str, Outcome]):
    """Read-only mapping id → :class:`Outcome`, in request order."""

    __slots__ = ("_outcomes", "version")

    def __init__(self, outcomes: Mapping[str, Outcome], version: int) -> None:
        self._outcomes = dict(outcomes)
        #: the head version after the request
        self.version = version

    def __getitem__(self, key: str) -> Outcome:
        return self._outcomes[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._outcomes)

    def __len__(self) -> int:
        return len(self._outcomes)

    def ids(self, status: Status) -> tuple[str, ...]:
        """The ids whose outcome has ``status``, in request order."""
        return tuple(i for i, o in self._outcomes.items() if o.status is status)

    def __repr__(self) -> str:
        inner = ", ".join(
            f"{k!r}: {o.status.name}" + (f"/{o.refusal.name}" if o.refusal else "")
            for k, o in self._outcomes.items()
        )
        return f"PruneReport({{{inner}}}, version={self.version})"


class Mark(NamedTuple):
    """A stale annotation: the bytes stay, the annotation is monotone (seed 000)."""

    id: str
    reason: str
    turn: int | None
    version: int  #: the first version in which the entry is marked


class EscalationKind(enum.Enum):
    """What a supervisor is told about."""

    REFUSED_EDIT = "refused_edit"
    READER_PINNED = "reader_pinned"
    BACKLOG = "backlog"
    #: the same content was pruned and re-admitted twice within a window (an
    #: agent loop re-running a call its pruner keeps removing)
    OSCILLATION = "oscillation"


@dataclass(frozen=True, slots=True)
class Escalation:
    """A condition the buffer will not resolve silently; sent to the supervisor
    and written to the log."""

    kind: EscalationKind
    detail: str
    plan: EditPlan | None = None
    refusals: tuple[Refusal, ...] = ()
    version: int = 0
    data: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class EditReport:
    """Result of :meth:`Buffer.edit`: all or nothing."""

    applied: bool
    refusals: tuple[Refusal, ...] = ()
    escalation: Escalation | None = None
    version: int = 0
    #: ids removed by this call (their tombstones are written)
    removed: tuple[str, ...] = ()
    #: ids marked now and removed at their grace point
    deferred: tuple[str, ...] = ()


class ReaderInfo(NamedTuple):
    """One pinned reader, as :meth:`Buffer.stats` reports it."""

    task: str
    version: int
    #: seconds since the pin, as of the first pass (a stats() or alarm pass)
    #: after it: a lower bound (see "Reader ages" in quiesce._core.pins)
    age: float


@dataclass(frozen=True, slots=True)
class Stats:
    """A frozen picture of a buffer (like trio's ``statistics()``)."""

    version: int
    entries: int
    retained_versions: int
    pinned: int
    readers: tuple[ReaderInfo, ...]
    oldest_pin_age: float | None
    oldest_pin_version: int | None
    deferred: int
    marks: int
    tombstones: int
    refusals: Mapping[Refusal, int]
    escalations: int
    escalations_dropped: int
    #: tombstones written per entry removed; 1.0 means every removal left one
    #: (seed 002's alarm is this ratio falling to zero)
    tombstone_to_edit_ratio: float
    readmissions_refused: int
    readmissions_overridden: int
    log_records: int
    log_pending: int
    log_failing: bool
    #: seconds from a removal's last blocking unpin to its application (last, max)
    reclamation_latency_last: float | None = None
    reclamation_latency_max: float | None = None
    #: user callbacks (policy classifier, sink) that raised or wrote back into
    #: the buffer while it was writing; each was escalated and answered fail-safe
    callback_errors: int = 0


class LogRecord(NamedTuple):
    """One record of the append-only edit log.

    ``version`` is the version the operation published, or ``None`` when it
    changed nothing (a refusal, an escalation). ``detail`` is JSON-ready and
    carries everything recovery needs (full entries, positions, tombstones).
    """

    seq: int
    time: float
    op: str
    version: int | None
    ids: tuple[str, ...]
    actor: str | None
    reason: str | None
    turn: int | None
    outcome: str
    detail: Mapping[str, Any]
    format: int = FORMAT

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (the on-disk shape of both durable sinks)."""
        return {
            "format": self.format,
            "seq": self.seq,
            "time": self.time,
            "op": self.op,
            "version": self.version,
            "ids": list(self.ids),
            "actor": self.actor,
            "reason": self.reason,
            "turn": self.turn,
            "outcome": self.outcome,
            "detail": dict(self.detail),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LogRecord:
        """Invert :meth:`to_dict`."""
        return cls(
            seq=int(data["seq"]),
            time=float(data["time"]),
            op=str(data["op"]),
            version=None if data["version"] is None else int(data["version"]),
            ids=tuple(data["ids"]),
            actor=data["actor"],
            reason=data["reason"],
            turn=data["turn"],
            outcome=str(data["outcome"]),
            detail=data["detail"],
            format=int(data["format"]),
        )
