"""Edit plans: validation as a whole, then one published version.

What it keeps true: a plan is applied all or nothing. It is refused as a
whole — the window unchanged, one escalation, the refusal logged with the
rationale's bytes — if any op breaks a rule (see :meth:`Editor.edit`);
otherwise its rewrites, moves and summaries are published in one version
and its removals are staged like a prune's (:mod:`.grace`). Window order
after an edit is the order the plan asked for; order keys stay unique
(:func:`_place` takes midpoints found by bisection, O(log n + ops) per op,
and renumbers every key in the rare case float precision runs out).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from bisect import bisect_left, insort
from collections.abc import Callable, Container, Mapping, Sequence
from typing import Any

from .draft import Draft
from .entry import Entry, Kind
from .errors import DanglingReference, DuplicateEntry, InvalidArgument, InvalidType, LogWriteError
from .grace import Group
from .graph import sealed_conflicts, sealed_lookups
from .ledger import note_written
from .plan import EditPlan, Move, Prune, Rewrite, Summarize
from .policy import IMMUTABLE_KINDS as _IMMUTABLE
from .policy import PROTECTED_KINDS
from .publish import Publisher
from .records import HOST_ACTOR, EditReport, Escalation, EscalationKind, Mark, Refusal
from .tombs import Prefetched
from .version import Slot, Version
from .wire import edit_record, edit_refused_record, staged_rows

__all__ = ["HOST_ACTOR", "WHY_KEPT", "Editor"]

#: Distinct refusal reasons a refused plan's record and escalation keep
#: (the rest are counted): a refused 800-op plan logs a bounded record.
WHY_KEPT = 10


class Editor(Publisher):
    """Edit plans on a :class:`~.buffer.Buffer` (a base class)."""

    def edit(self, plan: EditPlan) -> EditReport:
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
        if self._st.sink is not None and self.pending_records:
            self.flush()  # a failing disk refuses before anything changes
        held = _prefetch(self._st.head, plan) if self._st.head.tombs.spilled else None
        self._st.write_lock.acquire()
        try:
            report = self._edit_locked(plan)
        finally:
            self._release()
            if held is not None:
                held.release()
        if not report.deferred:
            return report
        if self.has_due():
            # Outside the write lock, like prune().
            with contextlib.suppress(LogWriteError):  # stays deferred; stats() tells
                self.apply_due()
        head = self._st.head
        tombs = head.tombs.by_id
        removed = report.deferred
        return dataclasses.replace(
            report,
            version=head.number,
            removed=tuple(i for i in removed if i in tombs),
            deferred=tuple(i for i in removed if i not in tombs),
        )

    def _edit_locked(self, plan: EditPlan) -> EditReport:
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
            if self._is_immutable(e):
                refuse(Refusal.IMMUTABLE, f"{e.id!r} is a {e.kind.name} and cannot be {verb}")
                return
            prot = self._protection(e)
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
                    for refusal, reason in _move_refusals(head, e):
                        refuse(refusal, reason)
                if op.before is not None and op.before not in head.live:
                    refuse(Refusal.UNKNOWN, f"move target {op.before!r} is not a live entry")
                moves.append(op)
        if moves and not refusals:
            for refusal, reason in _placement_refusals(head, summaries, moves, removed):
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
        self._append_record(
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
        self._escalate(esc)
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
            renumbered = _place(head, draft, summaries, moves, keys, n)
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
        self._append_record(
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
        markable = self._markable()
        markable.update(op.into.id for op, _ in summaries if op.into.kind not in _IMMUTABLE)
        markable.difference_update(i for i, _r, _t in new_marks)
        if group is not None:
            self._stage(group)
            self._after_stage()
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


def _key_between(lo: float | None, hi: float | None) -> float | None:
    """An order key strictly between ``lo`` and ``hi`` (``None``: unbounded),
    or ``None`` when float precision leaves no room (the caller renumbers)."""
    if lo is None and hi is None:
        return 0.0
    if lo is None:
        assert hi is not None
        return hi - 1.0
    if hi is None:
        return lo + 1.0
    mid = (lo + hi) / 2.0
    return mid if lo < mid < hi else None


def anchors_turn(e: Entry) -> bool:
    """Whether ``e`` is reasoning that must stay in front of the items of its
    turn: a signed block (:attr:`Entry.sealed`) or a reasoning item / thinking
    block of a chat API (the adapters keep it in ``content``, and make every
    other item of its turn cite it). O(1)."""
    if e.sealed:
        return True
    c = e.content
    return isinstance(c, Mapping) and c.get("type") in _REASONING_TYPES


_REASONING_TYPES = frozenset({"reasoning", "thinking", "redacted_thinking"})


def _move_refusals(head: Version, e: Entry) -> list[tuple[Refusal, str]]:
    """Why ``e`` itself may not be moved (before any placement is worked
    out), all ``IMMUTABLE`` (a reasoning turn's order is fixed): a signed
    block (its signature covers the turn as the provider sent it), unsigned
    reasoning, and an item of a reasoning turn (it cites the reasoning) — the
    APIs refuse reasoning that is not followed by the items of its turn.
    O(len(e.refs))."""
    if e.sealed:
        return [(Refusal.IMMUTABLE, f"{e.id!r} is signed by its provider: it cannot be moved")]
    if anchors_turn(e):
        return [(Refusal.IMMUTABLE, f"reasoning {e.id!r} must stay before the items of its turn")]
    live = head.live
    for ref in e.refs:
        slot = live.get(ref)
        if slot is not None and anchors_turn(slot.entry):
            return [
                (
                    Refusal.IMMUTABLE,
                    f"{e.id!r} belongs to the turn of reasoning {ref!r}: it cannot be moved "
                    "away from it",
                )
            ]
    return []


def _placement_refusals(
    head: Version,
    summaries: Sequence[tuple[Summarize, tuple[str, ...]]],
    moves: Sequence[Move],
    removed: Container[str] = (),
) -> list[tuple[Refusal, str]]:
    """The orders a plan's moves would break, worked out on the window order
    the plan would publish (the head's, with the summaries inserted and the
    moves applied; removals do not change the order of what survives, and
    what the plan itself removes — ``removed`` — breaks no order):

    * ``REFERENCED``: a ``TOOL_OUTPUT`` before a ``TOOL_CALL`` it cites (a
      tool result before its call), or a moved call after one of its outputs;
    * ``IMMUTABLE``: a moved entry landing inside a reasoning turn — just
      before an item that cites the turn's reasoning (it would split
      reasoning from the items it precedes).

    One move and no summary (the common plan): O(refs + citers), from the
    order keys — the moved entry lands right before its target, so any
    other entry precedes it exactly when its key is below the target's.
    Otherwise O(n + moves · n) for the window order."""
    live = head.live
    if not summaries and len(moves) == 1 and moves[0].before != moves[0].id:
        mv = moves[0]
        target = None if mv.before is None else live[mv.before].key

        def before_moved(i: str) -> bool:  # i (not the moved one) precedes it
            return target is None or live[i].key < target

        return _order_refusals(head, mv, before_moved, mv.before, removed)
    order = head.ordered_ids()
    for op, covered in summaries:
        cover = set(covered)
        at = next(idx for idx, i in enumerate(order) if i in cover)
        order.insert(at, op.into.id)
    for mv in moves:
        order.remove(mv.id)
        order.insert(len(order) if mv.before is None else order.index(mv.before), mv.id)
    pos = {i: n for n, i in enumerate(order)}
    out: list[tuple[Refusal, str]] = []
    for mv in moves:
        at = pos[mv.id]

        def precedes(i: str, at: int = at) -> bool:
            return pos.get(i, at + 1) < at

        nxt = order[at + 1] if at + 1 < len(order) else None
        out.extend(_order_refusals(head, mv, precedes, nxt, removed))
    return out


def _order_refusals(
    head: Version,
    mv: Move,
    precedes: Callable[[str], bool],
    following: str | None,
    removed: Container[str] = (),
) -> list[tuple[Refusal, str]]:
    """:func:`_placement_refusals` for one move, given whether an entry
    precedes the moved one in the new order and the id right after it; an
    entry in ``removed`` (the plan removes it) breaks no order.
    O(refs + citers)."""
    live = head.live
    out: list[tuple[Refusal, str]] = []
    if mv.id in removed:
        return out
    e = live[mv.id].entry
    if e.kind is Kind.TOOL_OUTPUT:
        for ref in e.refs:
            slot = live.get(ref)
            if slot is not None and slot.entry.kind is Kind.TOOL_CALL and not precedes(ref):
                why = f"moving {mv.id!r} would put it before its call {ref!r}"
                out.append((Refusal.REFERENCED, why))
    elif e.kind is Kind.TOOL_CALL:
        for c in head.cited_by(mv.id):
            if c not in removed and live[c].entry.kind is Kind.TOOL_OUTPUT and precedes(c):
                why = f"moving {mv.id!r} would put it after its result {c!r}"
                out.append((Refusal.REFERENCED, why))
    if following is not None:
        nxt = live.get(following)
        if nxt is not None and any(
            (s := live.get(r)) is not None and anchors_turn(s.entry) for r in nxt.entry.refs
        ):
            out.append(
                (
                    Refusal.IMMUTABLE,
                    f"moving {mv.id!r} before {nxt.entry.id!r} would split the reasoning "
                    "of that turn from its items",
                )
            )
    return out


def _place(
    head: Version,
    draft: Draft,
    summaries: Sequence[tuple[Summarize, tuple[str, ...]]],
    moves: Sequence[Move],
    keys: dict[str, float],
    n: int,
) -> set[str] | None:
    """Insert summaries and apply moves in window order, filling ``keys`` with
    every new order key. Returns ``None``, or the ids the plan placed when the
    float gap was exhausted and every key was renumbered.

    Each placement takes the midpoint between the new neighbours' keys,
    found by bisecting the head's chunked view (``Version.key_before``) and the
    keys placed earlier in the plan: O(log n + ops) per op, no other key
    changes. Only when a gap has no float left between its ends (about 50
    placements into one gap) does it fall back to :func:`_place_renumbering`,
    O(n)."""
    live = head.live
    key_of: dict[str, float] = {}
    placed_keys: list[float] = []  # sorted keys given by this plan so far
    gone: set[str] = set()  # ids whose slot in the head's view is not their place

    def current(i: str) -> float:
        got = key_of.get(i)
        return got if got is not None else live[i].key

    def key_before(hi: float) -> float | None:
        """The greatest current key below ``hi``."""
        a = head.key_before(hi, gone)
        j = bisect_left(placed_keys, hi) - 1
        b = placed_keys[j] if j >= 0 else None
        return b if a is None else a if b is None else max(a, b)

    def put(i: str, hi: float | None) -> bool:
        key = _key_between(key_before(math.inf if hi is None else hi), hi)
        if key is None:
            return False
        key_of[i] = key
        insort(placed_keys, key)
        return True

    for op, covered in summaries:
        if not put(op.into.id, min(current(i) for i in covered)):
            return _place_renumbering(head, draft, summaries, moves, keys, n)
    for mv in moves:
        old = key_of.pop(mv.id, None)
        if old is not None:
            placed_keys.remove(old)
        gone.add(mv.id)
        if not put(mv.id, None if mv.before is None else current(mv.before)):
            return _place_renumbering(head, draft, summaries, moves, keys, n)
    for op, _covered in summaries:
        draft.add(op.into, key_of[op.into.id], n)
    for i, key in key_of.items():
        draft.set_key(i, key, n)
        keys[i] = key
    return None


def _place_renumbering(
    head: Version,
    draft: Draft,
    summaries: Sequence[tuple[Summarize, tuple[str, ...]]],
    moves: Sequence[Move],
    keys: dict[str, float],
    n: int,
) -> set[str] | None:
    """:func:`_place` on a list of the whole window order, renumbering every
    key when a gap is exhausted. O(n)."""
    order = head.ordered_ids()
    key_of: dict[str, float] = {}
    placed: set[str] = set()
    ok = True

    def k(i: str) -> float:
        got = key_of.get(i)
        return got if got is not None else head.live[i].key

    def put(i: str, index: int) -> None:
        nonlocal ok
        order.insert(index, i)
        placed.add(i)
        if not ok:
            return  # every key is renumbered below; only the order matters now
        lo = k(order[index - 1]) if index > 0 else None
        hi = k(order[index + 1]) if index + 1 < len(order) else None
        key = _key_between(lo, hi)
        if key is None:
            ok = False
        else:
            key_of[i] = key

    for op, covered in summaries:
        cover = set(covered)
        first = next(idx for idx, i in enumerate(order) if i in cover)
        put(op.into.id, first)
        draft.add(op.into, key_of.get(op.into.id, 0.0), n)
    for mv in moves:
        order.remove(mv.id)
        index = len(order) if mv.before is None else order.index(mv.before)
        put(mv.id, index)
    if ok:
        for i, key in key_of.items():
            draft.set_key(i, key, n)
            keys[i] = key
        return None
    # Renumber every key in the new order (rare: ~50 halvings of one gap).
    draft.reordered = True  # slots written directly: the new view sorts
    for idx, i in enumerate(order):
        slot: Slot = draft.live[i]
        draft.live[i] = Slot(slot.entry, float(idx), n if i in placed else slot.changed)
        keys[i] = float(idx)
    draft.next_key = float(len(order))
    return placed


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
