"""The checker of one buffer shared by many processes.

What it keeps true: :func:`check_shared_history` merges the shared log's rows
by ``seq`` (identical duplicates dropped, different ones reported), replays
it version by version into one :class:`~quiesce.testing.History` that must
pass :func:`~quiesce.testing.check_history`, and checks each member's
:class:`MemberReport` against it (its readers, the flushes that returned,
its lease losses). It only reads what it is given.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .._core.buffer import Buffer
from .._core.policy import Policy
from .._core.records import (
    LogRecord,
)
from .checker import check_history
from .events import Anomaly, AnomalyKind
from .recorder import Recorder

__all__ = ["MemberPin", "MemberReport", "check_shared_history"]

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
    from .._core.replay import replay

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
        rec_buf.observe_log()
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
