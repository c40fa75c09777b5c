"""The history checker: a recorded history against the seven invariants.

What it keeps true: :func:`check_history` only reads the history it is given
and recomputes everything from the recorded versions, independently of the
core's own ``_check()`` (a bug in the core's bookkeeping cannot hide a bug
in its behaviour); it names every anomaly it finds, in a deterministic
order, and returns an empty list for a consistent history. Cost:
O(versions · entries + snapshots · removals), for many small histories.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Mapping
from typing import Any

from .._core.edit import HOST_ACTOR
from .._core.entry import Entry
from .._core.plan import EditPlan, Rewrite, Summarize
from .._core.policy import IMMUTABLE_KINDS, PROTECTED_KINDS, Policy
from .._core.records import (
    EditReport,
    Mark,
    PruneReport,
    Status,
    Tombstone,
)
from .._core.version import Version
from .._core.wire import Op, parse_change, parse_remove
from .events import Anomaly, AnomalyKind, History, OpEvent, Publication, Read, SnapshotEvent

__all__ = ["check_history"]

# ---------------------------------------------------------------------------
# The checker


def check_history(history: History) -> list[Anomaly]:
    """Check ``history`` against invariants 1-7 of docs/design.md and name every
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
            if r.op == Op.EDIT and r.outcome == "applied" and r.actor == HOST_ACTOR:
                change = parse_change(r)
                if change.plan.get("override") is not None:
                    self.host_retracts.update(change.retracted)
            elif r.op == Op.REMOVE and r.version is not None:
                self.retracted_at[r.version] = set(parse_remove(r).retracted)

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
            if rec.op == Op.REMOVE:
                for t in parse_remove(rec).tombstones:
                    logged_tombs[t.id] = logged_tombs.get(t.id, 0) + 1
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
                from .._core.entry import content_hash

                out.add((op.id, content_hash(op.body)))
        elif isinstance(op, Summarize):
            out.add((op.into.id, op.into.content_hash))
    return out
