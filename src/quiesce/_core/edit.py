"""The editor: prune requests and edit plans, decided against the head.

What it keeps true: a request is decided all or nothing under the write
lock, against one head. A prune stages what the policy lets go and marks
what it refuses (:meth:`Editor.prune`); an edit plan is refused as a
whole — the window unchanged, one escalation, the refusal logged with the
rationale's bytes — if any op breaks a rule (see :meth:`Editor.edit`),
otherwise its rewrites, moves and summaries are published in one version
and its removals are staged like a prune's (:mod:`.grace`). Window order
after an edit is the order the plan asked for (:mod:`.placement`).

The part. :class:`Editor` is handed the buffer's state, the publisher (the
log tail, the policy called as untrusted code, the lock's release) and the
grace queue; a request's ``flush`` and ``apply_due`` are handed to it by
the caller (the buffer's own, so an instrumented buffer sees them), which
it calls outside the write lock. It never holds the buffer.

Cancellation: nothing here awaits; a request is sync and all or nothing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import time
from collections.abc import Callable, Iterable
from typing import Any

from .draft import Draft
from .entry import Entry, check_id, check_text, check_turn
from .errors import DanglingReference, DuplicateEntry, InvalidArgument, InvalidType, LogWriteError
from .grace import Grace
from .graph import cascade, components, sealed_conflicts, sealed_lookups
from .ledger import note_written
from .placement import move_refusals, place, placement_refusals
from .plan import EditPlan, Move, Prune, Rewrite, Summarize
from .policy import IMMUTABLE_KINDS as _IMMUTABLE
from .policy import PROTECTED_KINDS
from .publish import Publisher
from .records import (
    HOST_ACTOR,
    EditReport,
    Escalation,
    EscalationKind,
    Mark,
    Outcome,
    PruneReport,
    Refusal,
    Status,
)
from .state import BufferState, Group
from .tombs import Prefetched
from .version import Version
from .wire import edit_record, edit_refused_record, prune_record, staged_rows

__all__ = ["HOST_ACTOR", "WHY_KEPT", "Editor"]

#: Distinct refusal reasons a refused plan's record and escalation keep
#: (the rest are counted): a refused 800-op plan logs a bounded record.
WHY_KEPT = 10

#: a buffer's ``flush()`` or ``apply_due()``, handed to a request
Flush = Callable[[], object]


class Editor:
    """Prune requests and edit plans on one buffer (see the module
    docstring). O(1) to build."""

    __slots__ = ("_grace", "_pub", "_st")

    def __init__(self, st: BufferState, publisher: Publisher, grace: Grace) -> None:
        self._st = st  #: the buffer's fields (state.py)
        self._pub = publisher  #: the log tail and the policy's guards (publish.py)
        self._grace = grace  #: the queue of staged removals (grace.py)

    def prune(
        self,
        ids: Iterable[str],
        reason: str,
        actor: str | None,
        turn: int | None,
        flush: Flush,
        apply_due: Flush,
    ) -> PruneReport:
        """:meth:`Buffer.prune <quiesce.Buffer.prune>` (its docstring states
        the outcomes): the ids checked, pending records flushed through
        ``flush`` before anything changes, the request decided under the write
        lock (:meth:`prune_locked`), a due removal applied through
        ``apply_due`` after it, outside the lock (a durable removal never
        makes a concurrent mark wait for the disk). O(ids · log n) plus the
        flush and the removal."""
        if isinstance(ids, str | bytes):
            raise InvalidType("prune takes a collection of ids, not a bare str")
        if not hasattr(ids, "__iter__"):
            raise InvalidType(f"prune takes a collection of ids, not {type(ids).__name__}")
        raw = list(ids)
        for i in raw:
            check_id(i)
        id_list = list(dict.fromkeys(raw))
        check_text(reason, "reason")
        if actor is not None:
            check_id(actor, "actor")
        check_turn(turn)
        if self._st.sink is not None and self._pub.pending_records:
            flush()  # a failing disk refuses before anything changes
        head = self._st.head
        # (issue 21: no disk under the write lock) the ids, and the results of
        # the tool calls citing signed reasoning among them (policy.py)
        held = None
        if head.tombs.spilled:
            held = head.tombs.prefetch([*id_list, *sealed_lookups(head, id_list)])
        self._st.write_lock.acquire()
        try:
            outcomes, candidates, staged = self.prune_locked(id_list, reason, actor, turn)
        finally:
            self._pub.release()
            if held is not None:
                held.release()
        if staged and self._grace.has_due():
            # Outside the write lock: a durable removal never makes a
            # concurrent mark wait for the disk.
            with contextlib.suppress(LogWriteError):  # stays DEFERRED; stats() tells
                apply_due()
        head = self._st.head
        tombs = head.tombs.by_id
        for i in candidates:
            outcomes[i] = Outcome(Status.PRUNED if i in tombs else Status.DEFERRED)
        return PruneReport({i: outcomes[i] for i in id_list}, head.number)

    def prune_locked(
        self, id_list: list[str], reason: str, actor: str | None, turn: int | None
    ) -> tuple[dict[str, Outcome], list[str], bool]:
        head = self._st.head
        outcomes: dict[str, Outcome] = {}
        candidates: dict[str, None] = {}
        refused: dict[str, Refusal] = {}
        for i in id_list:
            slot = head.live.get(i)
            if slot is None:
                if i in head.tombs.by_id:
                    outcomes[i] = Outcome(Status.UNCHANGED)
                else:
                    outcomes[i] = Outcome(Status.UNCHANGED, Refusal.UNKNOWN)
                continue
            if i in self._st.staged_ids:
                outcomes[i] = Outcome(Status.DEFERRED)
                continue
            e = slot.entry
            if e.streaming:  # never while open (stream.py): nothing marked or staged
                outcomes[i] = Outcome(Status.UNCHANGED, Refusal.CONFLICT)
                continue
            if self._pub.is_immutable(e):
                outcomes[i] = Outcome(Status.UNCHANGED, Refusal.IMMUTABLE)
                continue
            prot = self._pub.protection(e)
            if prot is not None:
                refused[i] = Refusal.PROTECTED if prot == "protected" else Refusal.NEGATIVE
                continue
            candidates[i] = None
        for i in sealed_conflicts(head, candidates):
            del candidates[i]
            refused[i] = Refusal.REFERENCED
        for i in cascade(head, candidates, refused):
            del candidates[i]
        n = head.number + 1
        marks = head.marks
        new_marks: list[list[Any]] = []
        for i in itertools.chain(refused, candidates):
            if i not in marks:
                marks = marks.set(i, Mark(i, reason, turn, n))
                new_marks.append([i, reason, turn])
        changed = bool(new_marks)
        staged_at = n if changed else head.number
        groups = [
            Group(
                next(self._st.gids),
                comp,
                max(marks[i].version for i in comp),
                staged_at,
                reason,
                actor,
                turn,
                checked=True,
            )
            for comp in components(head, candidates)
        ]
        version = n if changed else None
        for i in id_list:
            if i in refused:
                outcomes[i] = Outcome(Status.MARKED, refused[i])
        self._pub.append_record(
            prune_record(
                len(self._st.records),
                time.time(),
                version,
                tuple(id_list),
                actor=actor,
                reason=reason,
                turn=turn,
                outcome="staged" if groups else ("marked" if changed else "unchanged"),
                marks=new_marks,
                staged=staged_rows(groups),
                outcomes=outcomes,
            )
        )
        if changed:
            self._st.head = head.with_marks(n, marks)
            self._st.markable().difference_update(i for i, _r, _t in new_marks)
        for g in groups:
            self._grace.stage(g)
        if groups:
            self._pub.after_stage()
        return outcomes, list(candidates), bool(groups)

    def edit(self, plan: EditPlan, flush: Flush, apply_due: Flush) -> EditReport:
        """Seed 002's all-or-nothing self-edit.

        Refused as a whole — window unchanged, one :class:`Escalation`
        emitted, the refusal logged — when an op touches a rationale id
        (``RATIONALE``); an immutable entry is rewritten, pruned or summarized
        (``IMMUTABLE``); a protected entry would be removed or paraphrased
        (``PROTECTED``/``NEGATIVE``); a surviving entry would still cite a
        removed one (``REFERENCED``); new content matches a tombstone without
        an override (``READMISSION``); an entry the plan touches changed, or
        was marked, after ``plan.base`` (``CONFLICT``: a mark is a judgment
        made after the planner looked), or is an open stream still being
        written (``CONFLICT``: refused, never deferred; retry after its
        close); an id is not live (``UNKNOWN``); a
        summary would create an entry of a protected kind (``PROTECTED``) or
        an immutable one (``IMMUTABLE``) — a model-written plan cannot mint a
        permanent instruction — unless ``plan.actor`` is ``"host"`` and the
        plan carries an ``override`` (a rewrite keeps its entry's kind, and
        protected kinds are never rewritten, so only a summary can try).

        Host retraction, the one exception to invariant 4: in a plan whose
        ``actor`` is ``"host"`` and which carries an ``override``, a
        :class:`Prune` removes its entry whatever its kind or protection —
        protected, immutable, negative. Every other rule still holds: a cited
        entry is refused ``REFERENCED`` unless its citers go in the same plan,
        rationale, ``base``, unknown ids and re-admission are checked as
        usual, and the removal is staged (the entry marked) and applied at its
        grace point like any other, with a tombstone whose actor is
        ``"host"``. The edit record and the removal record list the ids under
        ``retracted``. Re-validated when due like any removal, a retraction
        may still be refused then (the entry moved since, or gained a citer):
        the entry stays with the retraction's mark — for an immutable entry,
        the only mark it can ever carry. The invariant checkers
        (``Buffer._check``, :func:`quiesce.testing.check_history`, recovery)
        accept a protected removal only with those records. Summaries and rewrites get no such
        exception: the host retracts, it does not paraphrase.

        A rewrite keeps the entry's stale mark: the mark judged the earlier
        content, which its version (older than the rewrite's) says, and the
        edit's log record lists it under ``marks_kept``.

        Applied plans publish rewrites, moves and summaries at once and stage
        removals (pruned and summarized ids) for their grace point, like
        :meth:`prune`. A summary id that is live or tombstoned raises
        :class:`DuplicateEntry`; a ref to an unknown entry raises
        :class:`DanglingReference`; a ``base`` newer than the head raises
        :class:`InvalidArgument`. O(ops·log n), plus the first use of the
        head's ordered view (derived from its parent's, O(n) C-level copying)
        for a plan with a move or summary.
        """
        if type(plan) is not EditPlan:
            raise InvalidType(f"edit takes an EditPlan, not {type(plan).__name__}")
        if self._st.sink is not None and self._pub.pending_records:
            flush()  # a failing disk refuses before anything changes
        held = _prefetch(self._st.head, plan) if self._st.head.tombs.spilled else None
        self._st.write_lock.acquire()
        try:
            report = self.edit_locked(plan)
        finally:
            self._pub.release()
            if held is not None:
                held.release()
        if not report.deferred:
            return report
        if self._grace.has_due():
            # Outside the write lock, like prune().
            with contextlib.suppress(LogWriteError):  # stays deferred; stats() tells
                apply_due()
        head = self._st.head
        tombs = head.tombs.by_id
        removed = report.deferred
        return dataclasses.replace(
            report,
            version=head.number,
            removed=tuple(i for i in removed if i in tombs),
            deferred=tuple(i for i in removed if i not in tombs),
        )

    def edit_locked(self, plan: EditPlan) -> EditReport:
        head = self._st.head
        if plan.base is not None and plan.base > head.number:
            raise InvalidArgument(f"plan base {plan.base} is newer than the head {head.number}")
        refusals: dict[Refusal, None] = {}
        why: dict[str, None] = {}  # the first WHY_KEPT distinct reasons
        more = 0  # reasons past those

        def refuse(r: Refusal, msg: str) -> None:
            nonlocal more
            refusals[r] = None
            if len(why) < WHY_KEPT:
                why[msg] = None
            elif msg not in why:
                more += 1

        rationale = set(plan.rationale)
        host_override = plan.actor == HOST_ACTOR and plan.override is not None
        removed: dict[str, None] = {}
        retracted: dict[str, None] = {}  #: host retractions (see the docstring)
        new_refs: dict[str, tuple[str, ...]] = {}
        touched: dict[str, None] = {}

        def live_entry(i: str) -> Entry | None:
            touched[i] = None
            slot = head.live.get(i)
            if slot is None:
                tomb = head.tombs.by_id.get(i)
                if tomb is not None and plan.base is not None and tomb.version > plan.base:
                    refuse(Refusal.CONFLICT, f"{i!r} was removed after base {plan.base}")
                else:
                    refuse(Refusal.UNKNOWN, f"{i!r} is not a live entry")
                return None
            if i in rationale:
                refuse(Refusal.RATIONALE, f"{i!r} is part of the plan's own rationale")
            if slot.entry.streaming:  # never while open (stream.py): retry after its close
                refuse(Refusal.CONFLICT, f"{i!r} is an open stream (still being written)")
                return None
            return slot.entry

        def check_removable(e: Entry, verb: str) -> None:
            if e.sealed and verb != "pruned":
                refuse(Refusal.IMMUTABLE, f"{e.id!r} is signed reasoning: cannot be {verb}")
                return
            if self._pub.is_immutable(e):
                refuse(Refusal.IMMUTABLE, f"{e.id!r} is a {e.kind.name} and cannot be {verb}")
                return
            prot = self._pub.protection(e)
            if prot == "protected":
                refuse(
                    Refusal.PROTECTED, f"{e.id!r} is a {e.kind.name}: protected from being {verb}"
                )
            elif prot == "negative":
                refuse(Refusal.NEGATIVE, f"{e.id!r} records a negative result: cannot be {verb}")

        overridden: list[str] = []

        def check_content(e: Entry, key: str | None) -> None:
            # A rewrite keeps its entry's key, which was admitted already: only
            # its new bytes can re-admit anything. A summary is new on both.
            tomb = head.tombs.matching(e.content_hash, key)
            if tomb is not None and plan.override is not None:
                overridden.append(e.id)
            elif tomb is not None:
                refuse(
                    Refusal.READMISSION,
                    f"new content for {e.id!r} matches the tombstone of {tomb.id!r}",
                )

        def check_new_refs(owner: str, refs: tuple[str, ...]) -> None:
            for ref in refs:
                if ref not in head.live:
                    tomb = head.tombs.by_id.get(ref)
                    if tomb is not None:
                        raise DanglingReference(
                            f"{owner!r} would cite {ref!r}, pruned at version {tomb.version}",
                            ref,
                            tomb,
                        )
                    raise DanglingReference(
                        f"{owner!r} would cite unknown entry {ref!r}", ref, None
                    )

        rewrites: list[tuple[Entry, Entry]] = []
        summaries: list[tuple[Summarize, tuple[str, ...]]] = []
        moves: list[Move] = []
        for op in plan.ops:
            if isinstance(op, Prune):
                e = live_entry(op.id)
                if e is not None:
                    if host_override:
                        retracted[op.id] = None  # the host's undo: any kind
                    else:
                        check_removable(e, "pruned")
                    removed[op.id] = None
            elif isinstance(op, Rewrite):
                e = live_entry(op.id)
                if e is None:
                    continue
                check_removable(e, "rewritten")
                refs = e.refs if op.refs is None else op.refs
                check_new_refs(op.id, refs)
                new_entry = e.replace(body=op.body, refs=refs)
                check_content(new_entry, None)
                new_refs[op.id] = refs
                rewrites.append((e, new_entry))
            elif isinstance(op, Summarize):
                into = op.into
                if into.id in head.live or into.id in head.tombs.by_id:
                    raise DuplicateEntry(f"summary id {into.id!r} is already used")
                check_new_refs(into.id, into.refs)
                for i in op.ids:
                    e = live_entry(i)
                    if e is not None:
                        check_removable(e, "summarized")
                        removed[i] = None
                check_content(into, into.key)
                if into.kind in PROTECTED_KINDS and not host_override:
                    refuse(
                        Refusal.IMMUTABLE if into.kind in _IMMUTABLE else Refusal.PROTECTED,
                        f"summary {into.id!r} would create a {into.kind.name}: only the host "
                        f"may (actor {HOST_ACTOR!r} with an override)",
                    )
                summaries.append((op, op.ids))
            else:
                e = live_entry(op.id)
                if e is not None:
                    for refusal, reason in move_refusals(head, e):
                        refuse(refusal, reason)
                if op.before is not None and op.before not in head.live:
                    refuse(Refusal.UNKNOWN, f"move target {op.before!r} is not a live entry")
                moves.append(op)
        if moves and not refusals:
            for refusal, reason in placement_refusals(head, summaries, moves, removed):
                refuse(refusal, reason)
        for why_sealed in sealed_conflicts(head, removed).values():
            refuse(Refusal.REFERENCED, why_sealed)
        # No survivor may cite a removed entry. The referrers index is exact,
        # so only a rewritten referrer's new refs need looking at; one
        # surviving referrer per removed id is enough to refuse (O(ops + refs)).
        rewritten_refs = {r: frozenset(refs) for r, refs in new_refs.items()}
        for i in removed:
            for r in head.cited_by(i):
                if r in removed:
                    continue
                cites = rewritten_refs.get(r)
                if cites is None or i in cites:
                    refuse(Refusal.REFERENCED, f"{i!r} would be removed but {r!r} cites it")
                    break
        for r, refs in new_refs.items():
            for ref in refs:
                if ref in removed:
                    refuse(Refusal.REFERENCED, f"rewritten {r!r} cites removed {ref!r}")
        for op, _ in summaries:
            for ref in op.into.refs:
                if ref in removed:
                    refuse(Refusal.REFERENCED, f"summary {op.into.id!r} cites removed {ref!r}")
        # Optimistic check for a planner that thought while others wrote.
        if plan.base is not None:
            for i in touched:
                slot = head.live.get(i)
                if slot is not None and slot.changed > plan.base:
                    refuse(Refusal.CONFLICT, f"{i!r} changed at version {slot.changed} > base")
                # A mark is a judgment of the entry made after the planner looked.
                mark = head.marks.get(i)
                if mark is not None and mark.version > plan.base:
                    refuse(Refusal.CONFLICT, f"{i!r} was marked at version {mark.version} > base")
        if refusals:
            reasons = list(why)
            if more:
                reasons.append(f"and {more} more")
            return self._refuse_edit(plan, tuple(refusals), reasons)
        return self._apply_edit(
            plan, head, rewrites, summaries, moves, tuple(removed), bool(overridden), retracted
        )

    def _refuse_edit(
        self, plan: EditPlan, refusals: tuple[Refusal, ...], why: list[str]
    ) -> EditReport:
        """Log and escalate a refused plan. ``why`` holds the first
        :data:`WHY_KEPT` distinct reasons and, if there were more, a last
        ``"and N more"``: a huge refused plan costs a bounded record."""
        head = self._st.head
        detail = "; ".join(dict.fromkeys(why))
        esc = Escalation(EscalationKind.REFUSED_EDIT, detail, plan, refusals, head.number)
        self._pub.append_record(
            edit_refused_record(
                len(self._st.records),
                time.time(),
                _plan_ids(plan),
                plan=plan,
                refusals=refusals,
                why=list(dict.fromkeys(why)),
                rationale=self._rationale_copy(plan),
            )
        )
        self._pub.deliver(esc)
        return EditReport(False, refusals, esc, head.number)

    def _rationale_copy(self, plan: EditPlan) -> list[dict[str, Any]]:
        # Provenance separation (seed 002): the log keeps the rationale's bytes.
        out: list[dict[str, Any]] = []
        for i in plan.rationale:
            slot = self._st.head.live.get(i)
            if slot is not None:
                out.append({"id": i, "hash": slot.entry.content_hash, "body": slot.entry.body})
            else:
                out.append({"id": i, "hash": None, "body": None})
        return out

    def _apply_edit(
        self,
        plan: EditPlan,
        head: Version,
        rewrites: list[tuple[Entry, Entry]],
        summaries: list[tuple[Summarize, tuple[str, ...]]],
        moves: list[Move],
        removed: tuple[str, ...],
        overridden: bool = False,
        retracted: dict[str, None] | None = None,
    ) -> EditReport:
        n = head.number + 1
        draft = Draft(head)
        kept = {new.id: head.marks[new.id].version for _o, new in rewrites if new.id in head.marks}
        for _old, new_entry in rewrites:
            draft.replace(new_entry, n)
            if new_entry.kind in _IMMUTABLE:  # pragma: no cover - immutables refused above
                self._st.immutable_hashes[new_entry.id] = new_entry.content_hash
        keys: dict[str, float] = {}
        renumbered: set[str] | None = None
        if summaries or moves:
            renumbered = place(head, draft, summaries, moves, keys, n)
        inserted = []
        for op, _covered in summaries:
            inserted.append({"entry": op.into.to_dict(), "key": draft.live[op.into.id].key})
            if op.into.kind in _IMMUTABLE:
                self._st.immutable_hashes[op.into.id] = op.into.content_hash
        new_marks: list[list[Any]] = []
        staged_ids = [i for i in removed if i not in self._st.staged_ids]
        for i in staged_ids:
            if i not in draft.marks:
                draft.marks[i] = Mark(i, plan.reason, plan.turn, n)
                new_marks.append([i, plan.reason, plan.turn])
        group = None
        if staged_ids:
            grace = max(draft.marks[i].version for i in staged_ids)
            group = Group(
                next(self._st.gids),
                tuple(staged_ids),
                grace,
                n,
                plan.reason,
                plan.actor,
                plan.turn,
                frozenset(i for i in staged_ids if retracted and i in retracted),
                checked=True,
            )
        self._pub.append_record(
            edit_record(
                len(self._st.records),
                time.time(),
                n,
                _plan_ids(plan),
                plan=plan,
                rewrites=[new for _old, new in rewrites],
                marks_kept=kept,
                inserted=inserted,
                keys={i: draft.live[i].key for i in keys},
                placed=renumbered,
                marks=new_marks,
                staged=[] if group is None else staged_rows([group]),
                rationale=self._rationale_copy(plan),
                readmission_overridden=overridden,
                retracted=retracted,
            )
        )
        written = [new for _old, new in rewrites] + [op.into for op, _ in summaries]
        note_written(self._st.protected_at, len(self._st.records) - 1, written)  # claims.py
        self._st.head = draft.finish(n)
        markable = self._st.markable()
        markable.update(op.into.id for op, _ in summaries if op.into.kind not in _IMMUTABLE)
        markable.difference_update(i for i, _r, _t in new_marks)
        if group is not None:
            self._grace.stage(group)
            self._pub.after_stage()
        return EditReport(True, (), None, n, (), removed)


def _plan_ids(plan: EditPlan) -> tuple[str, ...]:
    out: dict[str, None] = {}
    for op in plan.ops:
        if isinstance(op, Summarize):
            out.update(dict.fromkeys(op.ids))
            out[op.into.id] = None
        else:
            out[op.id] = None
    return tuple(out)


def _prefetch(head: Version, plan: EditPlan) -> Prefetched:
    """Read back, before the write lock, the spilled tombstones the plan's
    checks will verify (its ids and refs, its new contents, the results of
    tool calls citing signed reasoning it removes; issue 21: no disk under
    the write lock), held until released. A rewrite of an entry that is
    not live prefetches nothing for its content (the plan is refused
    ``UNKNOWN`` anyway). O(ops + refs) lookups."""
    ids: list[str] = []
    values: list[str] = []
    for op in plan.ops:
        if isinstance(op, Summarize):
            into = op.into
            ids.extend(op.ids)
            ids.append(into.id)
            ids.extend(into.refs)
            values.append(into.content_hash)
            if into.key is not None:
                values.append(into.key)
        elif isinstance(op, Rewrite):
            ids.append(op.id)
            if op.refs is not None:
                ids.extend(op.refs)
            slot = head.live.get(op.id)
            if slot is not None:
                try:
                    refs = slot.entry.refs if op.refs is None else op.refs
                    e = slot.entry.replace(body=op.body, refs=refs)
                except Exception:  # refused under the lock, with its own error
                    continue
                values.append(e.content_hash)
        elif isinstance(op, Move):
            ids.append(op.id)
            if op.before is not None:
                ids.append(op.before)
        elif isinstance(op, Prune):
            ids.append(op.id)
    ids.extend(sealed_lookups(head, ids))
    return head.tombs.prefetch(ids, values)
