"""Model-driven pruning: the ``Pruner`` protocol, ``run_pruner`` and a heuristic model.

A pruner is the model half of seed 000's loop: it *reads* a pinned snapshot,
*thinks* (awaits a model, for as long as it takes), and returns an
:class:`~quiesce.EditPlan` — or ``None`` when nothing should go. The buffer is
the other half: it decides whether the plan is allowed. The pruner never
deletes anything itself, so a wrong plan is refused and escalated, never
silently applied (seed 000: "the pruner must be able to refuse").

:func:`run_pruner` is the loop around one pruning round. It pins a snapshot,
awaits the model *while the snapshot is pinned* (the model's view cannot tear
under it), and submits the plan with ``base=`` the pinned version, so the
buffer's optimistic check refuses it as a ``CONFLICT`` if an entry the plan
touches changed while the model was thinking. On a ``CONFLICT`` it re-plans
against a fresh snapshot, a bounded number of times; every other refusal is
final (it is already logged and escalated by the buffer).

:class:`HeuristicPruner` is the deterministic default model (and the demo's):
it proposes removals by age, staleness marks and a token budget, never
proposes a protected or immutable entry (it asks the same :class:`Policy` the
buffer uses), and removes dependency groups whole — an entry goes only with
every entry that cites it, and a tool output only with its call, so a chat
transcript never keeps half a call/result pair. It is a *proposal*: the
buffer re-checks everything.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Protocol, runtime_checkable

import anyio

from ._core.buffer import Buffer, Snapshot
from ._core.edit import HOST_ACTOR
from ._core.entry import Entry, Kind
from ._core.errors import InvalidArgument, InvalidType
from ._core.plan import EditPlan, Move, Op, Prune, Rewrite, Summarize
from ._core.policy import Policy
from ._core.records import EditReport, Mark, Refusal
from ._protocol import AsyncBuffer, async_buffer

__all__ = ["HeuristicPruner", "Pruner", "TokenCounter", "run_pruner", "word_count"]

#: Counts the tokens of an entry body.
TokenCounter = Callable[[str], int]


def word_count(text: str) -> int:
    """The default token counter: whitespace-separated words. O(len(text))."""
    return len(text.split())


@runtime_checkable
class Pruner(Protocol):
    """An async callable: given a pinned snapshot, propose an edit plan or ``None``.

    The snapshot stays pinned for the whole call, however long the model
    takes; the pruner must not use it after returning. The plan's ``base`` is
    set by :func:`run_pruner` to the snapshot's version.
    """

    async def __call__(self, snap: Snapshot, /) -> EditPlan | None: ...


def _with_base(plan: EditPlan, base: int) -> EditPlan:
    if plan.base == base:
        return plan
    return EditPlan(
        plan.ops,
        reason=plan.reason,
        rationale=plan.rationale,
        actor=plan.actor,
        turn=plan.turn,
        base=base,
        override=plan.override,
    )


async def run_pruner(
    buf: Buffer | AsyncBuffer, pruner: Pruner, *, max_retries: int = 3
) -> EditReport | None:
    """One pruning round: pin, await the model, submit with ``base=``, re-plan on conflict.

    ``buf`` is any :class:`~quiesce.AsyncBuffer` (the buffer of
    ``open_buffer()`` or of ``open_shared_buffer()``) or a plain
    :class:`~quiesce.Buffer`. The plan is submitted with ``aedit``, so the
    flush that makes its tombstones durable runs in a worker thread (or, on a
    shared buffer, on the sequencer): no disk or database I/O on the event
    loop. The snapshot is local: on a shared buffer it pins this member's
    version, and the removal waits for every member's readers.

    Returns the buffer's :class:`~quiesce.EditReport` for the last plan
    submitted, or ``None`` if the model proposed nothing. A plan refused as a
    ``CONFLICT`` (an entry it touches changed while the model thought) is
    re-planned against a fresh snapshot at most ``max_retries`` times; the
    last refused report is returned when the bound is reached. Any other
    refusal is returned at once (the buffer has logged and escalated it).

    Open entries (``entry.streaming``: a message still streaming) are
    never edited: the ops of the plan that touch one in the pinned
    snapshot are left out before it is submitted (:func:`_without_open`),
    so a model that proposed one is not refused ``CONFLICT`` and escalated
    for it; a later round, after the stream's close, may propose it again.
    A plan with nothing left is not submitted (``None`` is returned).

    A plan whose actor is ``"host"`` raises :class:`InvalidArgument`,
    submitting nothing: the host's override (retraction of any kind, protected
    summaries) is for the host application's own ``Buffer.edit`` calls, never
    a model's. Always a checkpoint. Cancellation while the model runs unpins
    the snapshot (the ``with`` block's exit is synchronous) and submits
    nothing; cancellation during the submission leaves the plan applied or
    refused as a whole (``aedit``'s guarantee).
    """
    face = async_buffer(buf, "run_pruner")
    if type(max_retries) is not int:
        raise InvalidType(f"max_retries must be an int, not {type(max_retries).__name__}")
    if max_retries < 0:
        raise InvalidArgument(f"max_retries must be >= 0, got {max_retries}")
    await anyio.lowlevel.checkpoint()
    report: EditReport | None = None
    for _attempt in range(max_retries + 1):
        with face.snapshot() as snap:
            base = snap.version
            plan = await pruner(snap)
            if plan is None:
                return None
            if not isinstance(plan, EditPlan):
                raise InvalidType(
                    f"a pruner must return an EditPlan or None, not {type(plan).__name__}"
                )
            plan = _without_open(plan, snap)
        if plan is None:
            return None
        if plan.actor == HOST_ACTOR:
            # A pruner is model-driven: it may not speak as the host, whose
            # override retracts any kind and mints protected summaries.
            raise InvalidArgument(
                f"a pruner's plan may not claim the host actor {HOST_ACTOR!r}; "
                "submit host edits with Buffer.edit"
            )
        # The plan is checked against the head as of its submission, and
        # against ``base`` for what changed since the pinned snapshot (so
        # writes that land while ``aedit`` waits for its worker are caught).
        report = await face.aedit(_with_base(plan, base))
        if report.applied or Refusal.CONFLICT not in report.refusals:
            return report
    return report


def _touches(op: Op) -> tuple[str, ...]:
    """The ids an op needs live and settled (a ``Move``'s anchor included)."""
    if isinstance(op, Summarize):
        return op.ids
    if isinstance(op, Move):
        return (op.id,) if op.before is None else (op.id, op.before)
    if isinstance(op, Prune | Rewrite):
        return (op.id,)
    return ()  # pragma: no cover - every op type is listed above


def _without_open(plan: EditPlan, snap: Snapshot) -> EditPlan | None:
    """``plan`` without the ops that touch an open (streaming) entry of
    ``snap``, or ``None`` when none is left; ``plan`` itself when it
    touches none.

    An entry an op left out keeps must keep what it cites, so an op
    removing an entry that a kept one cites (an open entry opened with
    ``refs``, or one a dropped ``Summarize`` covers) is left out too, to a
    fixed point: the buffer would refuse the trimmed plan ``REFERENCED``
    otherwise. The ``reason``, ``rationale``, ``actor``, ``turn``, ``base``
    and ``override`` stay. O(ops x touched ids + refs of the kept), no
    await."""

    def entry(i: str) -> Entry | None:
        try:
            found = snap.resolve(i)
        except KeyError:
            return None
        return found if isinstance(found, Entry) else None

    kept: set[str] = set()
    for op in plan.ops:
        for i in _touches(op):
            e = entry(i)
            if e is not None and e.streaming:
                kept.add(i)
    if not kept:
        return plan
    ops = list(plan.ops)
    changed = True
    while changed:
        changed = False
        cited = {r for i in kept if (e := entry(i)) is not None for r in e.refs}
        for op in list(ops):
            ids = _touches(op)
            removes = (
                op.ids if isinstance(op, Summarize) else ((op.id,) if isinstance(op, Prune) else ())
            )
            if any(i in kept for i in ids) or any(i in cited for i in removes):
                ops.remove(op)
                kept.update(removes)
                changed = True
    if not ops:
        return None
    return EditPlan(
        ops,
        reason=plan.reason,
        rationale=plan.rationale,
        actor=plan.actor,
        turn=plan.turn,
        base=plan.base,
        override=plan.override,
    )


class HeuristicPruner:
    """A deterministic model: prune by staleness, age and a token budget.

    Each call proposes removing dependency groups, oldest first:

    * every group containing a *marked* (stale) entry at least ``stale_age``
      turns old;
    * while the window's tokens exceed ``budget``, further groups at least
      ``min_age`` turns old, until the total is at most ``target`` (default
      80 % of the budget, so it does not prune a little every round).

    A group is an entry plus every entry that cites it (transitively) plus,
    for a ``TOOL_OUTPUT``, the ``TOOL_CALL`` it answers and that call's other
    outputs: a call/result pair goes together or not at all, and no survivor
    is left citing a removed entry. A group is never proposed if any member is
    open (still streaming), protected or immutable under ``policy`` (the
    buffer's own rules: negative results, prohibitions, constraints,
    instructions), is younger than the
    age threshold, or is in ``keep``. Age is ``current turn - entry.turn``,
    the current turn being the largest turn in the snapshot; an entry without
    a turn is aged by its position (the number of entries after it).

    ``count_tokens`` is pluggable (default: :func:`word_count`). ``latency``
    seconds are awaited per call, to stand in for a model's thinking time.
    ``propose`` is the same decision as a plain synchronous function of a list
    of entries and their marks. O(n + refs) per call.
    """

    def __init__(
        self,
        *,
        budget: int = 4000,
        target: int | None = None,
        min_age: int = 8,
        stale_age: int = 2,
        max_ops: int = 64,
        count_tokens: TokenCounter = word_count,
        policy: Policy | None = None,
        actor: str = "pruner",
        latency: float = 0.0,
        keep: Callable[[Entry], bool] | None = None,
    ) -> None:
        if type(budget) is not int or budget < 0:
            raise InvalidArgument(f"budget must be an int >= 0, got {budget!r}")
        if target is None:
            target = budget * 4 // 5
        if type(target) is not int or not 0 <= target <= budget:
            raise InvalidArgument(f"target must be an int in [0, budget], got {target!r}")
        for name, value in (("min_age", min_age), ("stale_age", stale_age), ("max_ops", max_ops)):
            if type(value) is not int or value < 0:
                raise InvalidArgument(f"{name} must be an int >= 0, got {value!r}")
        if not callable(count_tokens):
            raise InvalidType("count_tokens must be callable")
        self.budget = budget
        self.target = target
        self.min_age = min_age
        self.stale_age = stale_age
        self.max_ops = max_ops
        self.count_tokens = count_tokens
        self.policy = Policy() if policy is None else policy
        self.actor = actor
        self.latency = latency
        self.keep = keep

    async def __call__(self, snap: Snapshot, /) -> EditPlan | None:
        """Read the pinned snapshot, "think" for ``latency`` seconds, propose."""
        entries = snap.entries()
        marks = dict(snap.marks)
        if self.latency > 0:
            await anyio.sleep(self.latency)
        else:
            await anyio.lowlevel.checkpoint()
        return self.propose(entries, marks, base=snap.version)

    # -- the decision ----------------------------------------------------------

    def _blocked(self, e: Entry) -> bool:
        """Never proposed: open (still streaming: nothing applies to it
        until its close), protected, immutable, negative, or kept by the
        caller."""
        if e.streaming:
            return True
        if self.policy.is_immutable(e) or self.policy.protection(e) is not None:
            return True
        return self.keep is not None and self.keep(e)

    def propose(
        self,
        entries: Sequence[Entry],
        marks: Mapping[str, Mark] | None = None,
        *,
        base: int | None = None,
    ) -> EditPlan | None:
        """The plan this model proposes for ``entries`` (window order) and
        their ``marks``, or ``None``. Pure: the same input gives the same plan."""
        marks = marks or {}
        n = len(entries)
        if not n:
            return None
        by_id = {e.id: e for e in entries}
        position = {e.id: i for i, e in enumerate(entries)}
        cited_by: dict[str, list[str]] = {}
        for e in entries:
            for ref in e.refs:
                cited_by.setdefault(ref, []).append(e.id)
        turns = [e.turn for e in entries if e.turn is not None]
        now = max(turns) if turns else None

        def age(e: Entry) -> int:
            if e.turn is not None and now is not None:
                return now - e.turn
            return n - 1 - position[e.id]

        def group(seed: str) -> list[str] | None:
            out: dict[str, None] = {}
            stack = [seed]
            while stack:
                i = stack.pop()
                if i in out:
                    continue
                e = by_id.get(i)
                if e is None:  # cites something outside this view: leave it be
                    return None
                out[i] = None
                stack.extend(cited_by.get(i, ()))
                if e.kind is Kind.TOOL_OUTPUT:
                    stack.extend(
                        r for r in e.refs if r in by_id and by_id[r].kind is Kind.TOOL_CALL
                    )
            return sorted(out, key=position.__getitem__)

        tokens = {e.id: self.count_tokens(e.body) for e in entries}
        total = sum(tokens.values())
        chosen: dict[str, None] = {}
        reasons: dict[str, None] = {}

        def take(seed: str, threshold: int) -> int:
            if seed in chosen:
                return 0
            members = group(seed)
            if members is None or len(chosen) + len(members) > self.max_ops:
                return 0
            for i in members:
                e = by_id[i]
                if self._blocked(e) or age(e) < threshold:
                    return 0
            freed = 0
            for i in members:
                if i not in chosen:
                    chosen[i] = None
                    freed += tokens[i]
            return freed

        # 1. stale (marked) entries, oldest first.
        for e in entries:
            if e.id in marks and take(e.id, self.stale_age):
                reasons["stale"] = None
        remaining = total - sum(tokens[i] for i in chosen)
        # 2. over budget: oldest groups first, down to the target.
        if remaining > self.budget:
            for e in entries:
                if remaining <= self.target:
                    break
                freed = take(e.id, self.min_age)
                if freed:
                    remaining -= freed
                    reasons[f"over token budget ({total}/{self.budget})"] = None
        if not chosen:
            return None
        return EditPlan(
            [Prune(i) for i in sorted(chosen, key=position.__getitem__)],
            reason=" and ".join(reasons) or "stale",
            actor=self.actor,
            turn=now,
            base=base,
        )

    def __repr__(self) -> str:
        return (
            f"HeuristicPruner(budget={self.budget}, target={self.target}, "
            f"min_age={self.min_age}, stale_age={self.stale_age})"
        )
