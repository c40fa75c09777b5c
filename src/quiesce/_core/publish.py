"""Publishing: the edit log, flushes, due signals, and the durable path of a removal.

What it keeps true: a tombstone is durable before the removal it records is
published (invariant 3's durability half), and ``mark_stale``/``append``
never wait for a disk — no sink write happens under the write lock.
Records are appended to the in-memory log on every change, in ``seq`` order;
the sink receives them in groups (:meth:`Publisher.flush`: one write, one
commit, for every pending record), and a failed write leaves them pending
for the next flush (``stats().log_failing`` says so meanwhile).

A due removal is applied in three phases (:meth:`Publisher.apply_due`):
(1) under the write lock, pop the due groups and log their tombstones as an
intent (a ``tombstone`` record); (2) without the lock, flush — the
tombstones are now durable; (3) under the lock, re-validate each member
against the head of that moment (:meth:`Publisher.remove_groups`: changed
since staged, immutable, protected, or cited by a survivor — the
*cascade* — refuses it), publish one version and log the ``remove`` record.
A crash between (2) and the next flush recovers the groups staged again.
Without a sink the three phases collapse into one, under the lock.

Who applies a due removal. The last reader of a version signals
(:meth:`Publisher.signal_due`, the pin registry's hook): an unpin that makes
a removal due applies it inline when nobody writes (sync mode), else leaves
the state's ``due_flag`` for the writer that holds the lock to drain on
release (:meth:`Publisher.release`); under the async runtime the signal only
calls ``due_hook``, which wakes the barrier scheduler.

The part. :class:`Publisher` is handed the buffer's state, the grace queue
and the reader registry, and three hooks the parts above it install (the
open streams' text for a flush, whether some is unlogged, and the
checkpoint writer), each through a weak reference (:func:`.state.weakly`):
it never holds, nor calls, the buffer or a part that holds it.

``count_record`` derives the statistics counters from a record, live and on
replay, so ``stats()`` after recovery equals ``stats()`` before the crash.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from .callbacks import WriteGuard
from .draft import Draft
from .entry import Entry, check_text
from .errors import (
    InvalidArgument,
    InvalidType,
    LogWriteError,
    ReadmissionRefused,
    ReentrantWrite,
)
from .grace import Grace
from .graph import cascade
from .log import DURABLE_TAIL, materialize_range
from .pins import PinRegistry
from .policy import Policy, default_negative_classifier
from .records import Escalation, EscalationKind, LogRecord, Refusal, Tombstone
from .state import BufferState, Group
from .wire import escalate_record, intent_record, refuse_record, remove_record

__all__ = ["Publisher", "count_record"]

_get_ident = threading.get_ident


def _nothing() -> None:
    """A hook no part installed: nothing to do."""


class Publisher:
    """The log tail, the due signal and the removal path of one buffer (see
    the module docstring). O(1) to build."""

    __slots__ = (
        "__weakref__",
        "_grace",
        "_registry",
        "_st",
        "append_checkpoint",
        "log_streams",
        "unlogged_text",
    )

    def __init__(self, st: BufferState, grace: Grace, registry: PinRegistry) -> None:
        self._st = st  #: the buffer's fields (state.py)
        self._grace = grace  #: the queue of staged removals (grace.py)
        self._registry = registry  #: the readers (pins.py), for the backlog alarm
        #: log the open streams' text since their last records (stream.py)
        self.log_streams: Callable[[], None] = _nothing
        #: whether an open stream has text no record holds (stream.py)
        self.unlogged_text: Callable[[], bool | None] = bool
        #: append a checkpoint of the state (checkpoint.py, installed by the buffer)
        self.append_checkpoint: Callable[[], None] = _nothing

    # -- the due signal (pins.py calls it when the last reader of a version leaves)

    def signal_due(self) -> None:
        """A staged removal is due: apply it now, leave it to the writer
        holding the lock, or wake the runtime (see the module docstring)."""
        if self._st.due_since is None:
            self._st.due_since = self._st.clock()
            if self._st.observer is not None:
                self.observe_due()
        hook = self._st.due_hook
        if hook is not None:
            hook()
            return
        self._st.due_flag = True
        self.drain_due()

    def observe_due(self) -> None:
        observer = self._st.observer
        try:
            if observer is not None:
                observer.due()
        except Exception:
            self._st.counts["callback_errors"] += 1

    def drain_due(self) -> None:
        """Apply due removals unless a writer holds the lock; that writer
        sees the flag when it releases and drains instead (no reader waits)."""
        # That writer may be this very thread (a snapshot released inside a
        # policy callback): the lock is re-entrant, so ask it, or the removal
        # would be published in the middle of the outer write.
        if self._st.write_lock._is_owned():  # type: ignore[union-attr]
            self._st.due_flag = True
            return
        while self._st.due_flag:
            if self._st.sink is not None:
                self._st.due_flag = False
                with contextlib.suppress(LogWriteError):  # stays staged; stats() tells
                    if self.apply_due_durable(blocking=False) is None:
                        return  # a writer holds the lock and drains on release
                continue
            if not self._st.write_lock.acquire(blocking=False):
                return
            try:
                self._st.due_flag = False
                with contextlib.suppress(LogWriteError):  # stays staged; stats() tells
                    self.apply_due_locked()
            finally:
                self._st.write_lock.release()

    def release(self) -> None:
        """Release the write lock and drain a due signal left meanwhile. O(1)
        unless something is due."""
        self._st.write_lock.release()
        if self._st.due_flag and self._st.due_hook is None:
            self.drain_due()

    def after_stage(self) -> None:
        """Raise the backlog alarm (logged and escalated once) when more ids
        are staged than the policy's ``max_backlog`` (under the write lock)."""
        bound = self._st.policy.max_backlog
        if len(self._st.staged_ids) > bound and not self._st.backlog_alarm:
            self._st.backlog_alarm = True
            detail = (
                f"deferred backlog {len(self._st.staged_ids)} exceeds {bound}: marked entries "
                f"accumulate faster than grace periods drain them"
            )
            with self._st.pin_lock:
                oldest = self._registry.oldest_locked()
            data = {"deferred": len(self._st.staged_ids), "bound": bound, "oldest_pin": oldest}
            esc = Escalation(EscalationKind.BACKLOG, detail, None, (), self._st.head.number, data)
            self.append_record(
                escalate_record(
                    len(self._st.records),
                    time.time(),
                    (),
                    detail,
                    EscalationKind.BACKLOG.value,
                    data,
                )
            )
            self.deliver(esc)

    # -- the removal path

    def apply_due(self) -> tuple[str, ...]:
        """Apply every staged removal that is due, as one new version (one
        batch), re-validating each against the head. Returns the removed ids.

        Raises :class:`LogWriteError` if the tombstones cannot be made durable;
        then nothing is published and the removals stay staged.

        With a durable sink the disk write happens *outside* the write lock,
        so ``mark_stale`` and ``append`` never wait for a disk: (1) under the
        lock, pop the due groups and log their tombstones as an intent
        (``tombstone`` record); (2) without it, flush the log — the tombstones
        are now durable; (3) under the lock, re-validate against the head of
        that moment, publish one version and log the ``remove`` record. A
        crash between (2) and the next flush recovers the groups staged again.
        """
        if self._st.sink is not None:
            return self.apply_due_durable(blocking=True) or ()
        self._st.write_lock.acquire()
        try:
            return self.apply_due_locked()
        finally:
            self.release()

    def apply_due_locked(self) -> tuple[str, ...]:
        """Single-phase application (no durable sink); under the write lock."""
        groups = self._grace.pop_due()
        if not groups:
            return ()
        try:
            return self.remove_groups(groups)
        except BaseException:
            self._grace.requeue(groups)
            raise

    def apply_due_durable(self, *, blocking: bool) -> tuple[str, ...] | None:
        """The three phases of :meth:`apply_due` with a durable sink. Returns
        ``None`` when ``blocking`` is false and a writer holds the lock (the
        due flag is left for it)."""
        lock = self._st.write_lock
        if not lock.acquire(blocking):
            self._st.due_flag = True
            return None
        try:
            groups = self._grace.pop_due()
            if not groups:
                return ()
            for g in groups:
                self._st.applying[g.gid] = g
            # One intent per group, however often a failing disk makes us
            # retry: a group logged already keeps the intent it has.
            fresh = [g for g in groups if g.gid not in self._st.intents]
            if fresh:
                seq = self.log_intent(fresh)
                for g in fresh:
                    self._st.intents[g.gid] = seq
            intent = max(self._st.intents[g.gid] for g in groups)
        finally:
            lock.release()
        try:
            self.flush()
        except BaseException:
            with lock:
                self._grace.requeue(groups)
            raise
        lock.acquire()
        try:
            # A group the sink took back out of ``_applying`` while making the
            # intent durable (a shared buffer whose remote readers turned out
            # to be below its grace) is requeued, not published.
            vetoed = [g for g in groups if g.gid not in self._st.applying]
            if vetoed:
                self._grace.requeue(vetoed)
                groups = [g for g in groups if g.gid in self._st.applying]
                if not groups:
                    return ()
            try:
                removed = self.remove_groups(groups, intent)
            except BaseException:
                self._grace.requeue(groups)
                raise
        finally:
            self.release()
        # Make the removal record durable too (outside the lock). If this
        # fails the tombstones are still durable in the intent; a crash before
        # the next flush recovers the groups staged again.
        with contextlib.suppress(LogWriteError):
            self.flush()
        return removed

    def log_intent(self, groups: list[Group]) -> int:
        """Log the tombstones the groups would write (version not yet known).
        Called once per group: a retry after a failed flush reuses the intent
        already logged (see ``_intents``)."""
        live = self._st.head.live
        tombs = []
        for g in groups:
            for i in g.ids:
                slot = live.get(i)
                if slot is not None:
                    e = slot.entry
                    tomb = Tombstone(i, e.content_hash, g.reason, g.turn, g.actor, 0, e.kind, e.key)
                    tombs.append(tomb)
        record = intent_record(
            len(self._st.records),
            time.time(),
            tuple(i for g in groups for i in g.ids),
            [g.gid for g in groups],
            tombs,
        )
        self.append_record(record)
        return record.seq

    def remove_groups(self, groups: list[Group], intent: int | None = None) -> tuple[str, ...]:
        head = self._st.head
        refused: dict[str, Refusal] = {}
        removal: dict[str, Group] = {}
        for g in groups:
            for i in g.ids:
                slot = head.live.get(i)
                if slot is None:
                    continue
                if slot.changed > g.staged:
                    refused[i] = Refusal.CONFLICT
                elif i in g.retracted:
                    removal[i] = g  # the host's explicit, logged retraction (edit.py)
                elif g.checked and self.own_policy():
                    # Unchanged since staged, and it passed the library's own
                    # policy then, whose verdict depends on the content alone:
                    # a big body is classified once, not at every step. A
                    # user's policy may change its mind: it is asked again.
                    removal[i] = g
                elif self.is_immutable(slot.entry):
                    refused[i] = Refusal.IMMUTABLE
                else:
                    prot = self.protection(slot.entry)
                    if prot is not None:
                        refused[i] = Refusal.PROTECTED if prot == "protected" else Refusal.NEGATIVE
                    else:
                        removal[i] = g
        for i in cascade(head, removal, refused):
            del removal[i]
        n = head.number + 1
        tombs: list[Tombstone] = []
        draft = Draft(head) if removal else None
        for i, g in removal.items():
            e = head.live[i].entry
            tomb = Tombstone(i, e.content_hash, g.reason, g.turn, g.actor, n, e.kind, e.key)
            tombs.append(tomb)
            assert draft is not None
            draft.remove(tomb)
        ids = tuple(i for g in groups for i in g.ids)
        retracted = [i for i, g in removal.items() if i in g.retracted]
        record = remove_record(
            len(self._st.records),
            time.time(),
            n if removal else None,
            ids,
            actor=groups[0].actor if len(groups) == 1 else None,
            reason=groups[0].reason if len(groups) == 1 else "batch",
            outcome="applied" if removal and not refused else ("partial" if removal else "refused"),
            gids=[g.gid for g in groups],
            tombs=tombs,
            refused=refused,
            intent=intent,
            retracted=retracted,
        )
        if removal:
            # Invariant: a tombstone is durable before the removal it records
            # is published. With a sink, the caller made it durable in the
            # intent record (apply_due_durable); without one there is no disk.
            assert intent is not None or self._st.sink is None
            self.append_record(record)
            assert draft is not None
            new = draft.finish(n)
            # the record holds the new tombstones: once it is durable they
            # can leave memory (tombs.py, spill)
            new.tombs.locate(len(head.tombs), record.seq, self._st.records)
            self._st.max_removed_grace = max(
                self._st.max_removed_grace, max(g.grace for g in groups)
            )
            self._st.head = new
            self._st.markable().difference_update(removal)
            for i in retracted:  # a retracted immutable is gone, with its tombstone
                self._st.immutable_hashes.pop(i, None)
            protected_at = self._st.protected_at
            if protected_at:
                for i in removal:  # claims.py: the ledger holds live entries only
                    protected_at.pop(i, None)
            observer = self._st.observer
            if observer is not None:
                try:
                    observer.applied(tuple(removal))
                except Exception:  # observe.py: an observer never breaks a write
                    self._st.counts["callback_errors"] += 1
        else:
            self.append_record(record)
        for g in groups:
            self._st.applying.pop(g.gid, None)
            self._st.intents.pop(g.gid, None)
            for i in g.ids:
                self._st.staged_ids.pop(i, None)
        self._grace.after_unstage()
        if self._st.due_since is not None:
            lat = max(0.0, self._st.clock() - self._st.due_since)
            self._st.latency_last = lat
            self._st.latency_max = (
                lat if self._st.latency_max is None else max(self._st.latency_max, lat)
            )
            self._st.due_since = None
        return tuple(removal)

    def refuse_readmission(self, entry: Entry, tomb: Tombstone) -> ReadmissionRefused:
        """Log the refusal of ``entry``, whose content matches ``tomb``, and
        return the error to raise (call under the write lock; the head stays
        unchanged: only the refusal is logged). O(1)."""
        self.append_record(
            refuse_record(len(self._st.records), time.time(), entry.id, entry.turn, tomb)
        )
        return ReadmissionRefused(
            f"entry {entry.id!r} matches tombstone of {tomb.id!r} (pruned at version "
            f"{tomb.version}: {tomb.reason}); re-admission needs an Override",
            tomb,
        )

    # -- the policy, called as untrusted code (callbacks.py) -------------------

    def own_policy(self) -> bool:
        """True when the policy is the library's own (``Policy`` with the
        default classifier): its verdicts depend on an entry's content alone,
        never raise and never write. O(1)."""
        policy = self._st.policy
        return type(policy) is Policy and policy.negative is default_negative_classifier

    def protection(self, entry: Entry) -> str | None:
        """``Policy.protection(entry)`` under a :class:`WriteGuard` (call under
        the write lock). If it raises, the entry counts as ``"negative"`` (kept)
        and the failure is escalated; see :mod:`.callbacks`. The library's own
        policy and classifier are called directly (they neither raise nor write)."""
        policy = self._st.policy
        if self.own_policy():
            return policy.protection(entry)
        lock = self._st.write_lock
        self._st.write_lock = WriteGuard(lock, "policy classifier")
        try:
            return policy.protection(entry)
        except Exception as exc:
            self._st.write_lock = lock
            self.callback_failed("policy.protection", entry.id, exc)
            return "negative"
        finally:
            self._st.write_lock = lock

    def is_immutable(self, entry: Entry) -> bool:
        """``Policy.is_immutable(entry)``, guarded like :meth:`_protection`; if
        it raises, the entry counts as immutable (kept). ``Policy``'s own (a
        kind lookup) is called directly."""
        policy = self._st.policy
        if type(policy) is Policy:
            return policy.is_immutable(entry)
        lock = self._st.write_lock
        self._st.write_lock = WriteGuard(lock, "policy")
        try:
            return bool(policy.is_immutable(entry))
        except Exception as exc:
            self._st.write_lock = lock
            self.callback_failed("policy.is_immutable", entry.id, exc)
            return True
        finally:
            self._st.write_lock = lock

    def callback_failed(self, callback: str, entry_id: str, exc: Exception) -> None:
        """Log, escalate and count a user callback's failure (under the write
        lock). Never raises for the callback's sake."""
        detail = (
            f"{callback} raised {type(exc).__name__} on {entry_id!r}: {exc}; "
            f"the entry is kept (refused as {Refusal.NEGATIVE.value})"
        )
        data = {"callback": callback, "id": entry_id, "error": type(exc).__name__}
        kind = EscalationKind.REFUSED_EDIT
        esc = Escalation(kind, detail, None, (Refusal.NEGATIVE,), self._st.head.number, data)
        self.append_record(
            escalate_record(
                len(self._st.records), time.time(), (entry_id,), detail, kind.value, data
            )
        )
        self.deliver(esc)

    def append_record(self, record: LogRecord) -> None:
        hook = self._st.record_hook
        if hook is not None:
            record = hook(record)
        self._st.records.append(record)
        count_record(self._st, record)
        if self._st.sink is None:
            self.trim_log()

    def trim_log(self) -> None:
        """Keep the in-memory log bounded (issue 13; see ``log.py``): with a
        readable sink, drop what is durable except the last
        :data:`~.log.DURABLE_TAIL` records; without a sink, keep the newest
        ``log_retention`` records and count the rest as dropped; a sink that
        cannot read back keeps everything. Amortized O(1) per record."""
        records = self._st.records
        if records.reader is not None:
            records.trim(self._st.synced, DURABLE_TAIL)
        elif self._st.sink is None:
            records.trim(len(records), self._st.retention)

    def flush(self, *, checkpoint: bool = False) -> None:
        """Return once every change made before the call is durable in the sink.

        One sink write (one commit) for every pending record, whatever their
        number. Raises :class:`LogWriteError` on failure; the records stay
        pending and a later successful ``flush()`` resumes.

        Checkpoints (issue 13, :mod:`.checkpoint`): with ``checkpoint=True``,
        or once ``checkpoint_every`` records were written since the last one,
        a checkpoint record of the current state is appended (under the write
        lock) and made durable in the same commit. Recovery then starts from
        it. Checkpoints are written only to a sink that recovers from them
        (``CheckpointSink``: ``SQLiteLog``, ``JsonlLog``); with any other sink,
        or none, ``checkpoint`` does nothing. If the write fails the
        checkpoint stays pending like any record (it is never half-written:
        a sink write is atomic).
        """
        sink = self._st.sink
        if sink is None:
            self.trim_log()
            return
        me = _get_ident()
        if self._st.in_sink_write == me:  # the sink's write called back (callbacks.py)
            raise ReentrantWrite(
                "flush() from inside the log sink's write: a sink must not flush, prune "
                "or edit the buffer it serves"
            )
        guard = self._st.write_lock
        if type(guard) is WriteGuard:  # a policy callback runs: refused if in this thread
            guard.refuse_owner("flush()")
        if self._st.streams:  # stream.py: the text since each stream's last record
            self.log_streams()
        if self._st.checkpoints_ok and (
            checkpoint
            or (self._st.checkpoint_every and len(self._st.records) >= self._st.checkpoint_due)
        ):
            self.append_checkpoint()
        with self._st.flush_lock:
            start = self._st.synced
            # a stable prefix; appends go on meanwhile
            batch = materialize_range(self._st.records, start, len(self._st.records))
            if not batch:
                return
            self._st.in_sink_write = me
            try:
                sink.write(batch)
            except Exception as exc:
                self._st.log_failing = True
                raise LogWriteError(f"edit log write failed: {exc}") from exc
            finally:
                self._st.in_sink_write = None
            self._st.log_failing = False
            self._st.synced = start + len(batch)
            self.trim_log()
        self.spill_tombs()

    def spill_tombs(self) -> None:
        """Let the tombstones whose records are durable leave memory
        (issue 13; tombs.py): only their index slots stay. Skipped when the
        write lock is busy (the next flush does it). O(tombstones kept)."""
        lock = self._st.write_lock
        if lock.acquire(blocking=False):
            try:
                self._st.head.tombs.spill(self._st.synced)
            finally:
                lock.release()

    @property
    def pending_records(self) -> int:
        """Records not yet durable in the sink (an open stream's text that
        no record holds yet counts as one: the next flush logs it)."""
        if self._st.sink is None:
            return 0
        n = len(self._st.records) - self._st.synced
        return n + 1 if not n and self._st.streams and self.unlogged_text() else n

    # -- escalations -------------------------------------------------------

    def deliver(self, esc: Escalation) -> None:
        """Deliver an escalation (never blocks). Undeliverable ones are counted."""
        hook = self._st.escalation_hook
        if hook is not None:
            if not hook(esc):
                self._st.escalations_dropped += 1
            return
        if len(self._st.escalations) == self._st.escalations.maxlen:
            self._st.escalations_dropped += 1
        self._st.escalations.append(esc)

    def drain_escalations(self) -> list[Escalation]:
        """Escalations queued while no runtime consumes them (oldest first)."""
        out = list(self._st.escalations)
        self._st.escalations.clear()
        return out

    def escalate(
        self,
        kind: EscalationKind,
        detail: str,
        *,
        data: Mapping[str, Any] | None = None,
    ) -> Escalation:
        """Log and deliver an escalation raised outside the core (the runtime's
        reader-age alarm). ``kind`` is an :class:`EscalationKind`, ``detail``
        a non-empty str, ``data`` a JSON-ready mapping with str keys (it goes
        to the log): else :class:`InvalidType`/:class:`InvalidArgument`, and
        nothing is logged."""
        if type(kind) is not EscalationKind:
            raise InvalidType(f"kind must be an EscalationKind, not {type(kind).__name__}")
        check_text(detail, "detail")
        if data is not None:
            if not isinstance(data, Mapping):
                raise InvalidType(f"data must be a mapping, not {type(data).__name__}")
            if any(type(k) is not str for k in data):
                raise InvalidType("data keys must be str")
            try:
                json.dumps(data, allow_nan=False)
            except (TypeError, ValueError, RecursionError) as exc:
                raise InvalidArgument(f"data cannot go to the log as JSON: {exc}") from None
        esc = Escalation(kind, detail, None, (), self._st.head.number, dict(data or {}))
        self._st.write_lock.acquire()
        try:
            self.append_record(
                escalate_record(
                    len(self._st.records),
                    time.time(),
                    tuple(str(i) for i in (data or {}).get("ids", ())),
                    detail,
                    kind.value,
                    dict(data or {}),
                )
            )
        finally:
            self.release()
        self.deliver(esc)
        return esc


def count_record(st: BufferState, record: LogRecord) -> None:
    """Derive the statistics counters from a record (used live and on replay)."""
    counts = st.counts
    detail = record.detail
    for r in detail.get("refusals", ()):
        st.refusals[Refusal(r)] += 1
    op = record.op
    if op in ("stream_text", "stream_close", "stream_abort"):
        # versions a stream's writes published with no record of their own
        # (stream.py): what bounds a checkpoint's version (claims.py)
        counts["stream_writes"] += detail.get("writes", 0)
    if op == "remove":
        counts["removed"] += len(detail.get("tombstones", ()))
    elif op == "refuse" and record.outcome == Refusal.READMISSION.value:
        counts["readmit_refused"] += 1
    elif (op == "append" and record.outcome == "overridden") or (
        op == "edit" and detail.get("readmission_overridden")
    ):
        counts["readmit_overridden"] += 1
    if op == "escalate" or (op == "edit" and record.outcome == "refused"):
        counts["escalations"] += 1
    if op == "escalate" and "callback" in detail.get("data", ()):
        counts["callback_errors"] += 1
