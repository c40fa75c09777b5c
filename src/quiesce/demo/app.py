"""``quiesce demo``: the seeds' failures, replayed, then a live multi-agent loop.

What it shows
=============

Part 1 replays the seeds' five failure stories (dangling justification,
summary drift, torn read, prune/re-admit oscillation, paraphrased constraint)
as a short scripted scenario on the sync core, and prints what quiesce did
with each: refused, deferred, or made safe.

Part 2 runs one streaming multi-agent workload twice, side by side:

* on quiesce's embedded default — a :class:`~quiesce.RuntimeBuffer` from
  :func:`~quiesce.open_buffer` with a :class:`~quiesce.SQLiteLog` in a
  temporary folder (or ``--log PATH``), and
* on a *naive buffer*: a plain list that the pruner deletes from directly,
  with every reader holding a reference to the live list.

The agents are coroutines: a planner, two tool callers, a verifier, a
replanner, a slow summarizing sub-agent and a model-driven pruner (the
:class:`~quiesce.HeuristicPruner`, driven through :func:`~quiesce.run_pruner`
on quiesce). Readers hold their view — a pinned snapshot on quiesce, the live
list on the naive side — across simulated model calls. The pruner's model
also makes the three mistakes the seeds describe, at scripted turns: it
summarizes away a negative result, paraphrases a user constraint, and later
drops the paraphrase. A supervisor consumes ``buf.escalations()``.

Determinism. Agents run in lockstep turns under a small conductor: in each
turn, every agent due that turn runs one step, in a fixed order, until it
awaits again (a model call is "wait k turns", during which the conductor
``anyio.sleep``\\ s one tick per turn). The same seed gives the same scripted
events, the same agent decisions and the same counts on asyncio and on trio.
After every step the conductor lets quiesce's barrier apply what is due
(``await buf.quiesce()``: the turn boundary is the barrier, as in seed 000).

One :class:`Checker` observes both buffers the same way — the views readers
hold, and the head after every step — and counts torn reads, dangling
justifications, lost prohibitions, prune/re-admit cycles and paraphrased
constraints. quiesce must show zero of each; the exit status is 1 if it does
not.
"""

from __future__ import annotations

import argparse
import contextlib
import heapq
import itertools
import json
import math
import os
import random
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, TextIO

import anyio
import anyio.abc

from quiesce import (
    Buffer,
    DanglingReference,
    EditPlan,
    EditReport,
    Entry,
    EntryPruned,
    Escalation,
    HeuristicPruner,
    Kind,
    LogSink,
    Mark,
    Move,
    Override,
    Policy,
    ProtectedEntry,
    Prune,
    QuiesceError,
    ReadmissionRefused,
    Refusal,
    Rewrite,
    RuntimeBuffer,
    Snapshot,
    Status,
    Summarize,
    Tombstone,
    open_buffer,
    run_pruner,
)

__all__ = ["main"]

FAILURES = (
    "torn reads",
    "dangling justifications",
    "lost prohibitions",
    "prune/re-admit cycles",
    "paraphrased constraints",
)

#: Fewer turns do not reach the pruning pressure every scripted event needs.
MIN_TURNS = 40

CONSTRAINT_ID = "c-etc"
CONSTRAINT_TEXT = "do not modify files under /etc"


# ---------------------------------------------------------------------------
# Part 1: the seeds' five stories on the core


def _story_dangling() -> dict[str, Any]:
    b = Buffer()
    b.append(Entry("t-readonly", Kind.REASONING, "endpoint X is read-only (ACL checked)", turn=3))
    b.append(
        Entry(
            "v-write",
            Kind.RATIONALE,
            "the write to X is safe because X is read-only",
            refs=("t-readonly",),
            turn=9,
        )
    )
    out = b.prune(["t-readonly"], reason="no longer load-bearing", actor="pruner", turn=10)
    o = out["t-readonly"]
    with b.snapshot() as s:
        cited = s[s["v-write"].refs[0]]
        stale = s.is_stale("t-readonly")
    safe = o.status is Status.MARKED and o.refusal is Refusal.REFERENCED and stale
    return {
        "story": "dangling justification",
        "attempt": "prune t-readonly while v-write cites it",
        "answer": f"{o.status.name}/{o.refusal.name if o.refusal else '-'}: kept and marked "
        f"stale; v-write's citation still resolves ({cited.id!r})",
        "safe": safe,
    }


def _story_summary_drift() -> dict[str, Any]:
    b = Buffer()
    ids = []
    for i in range(40):
        body = f"step {i}: probe deployment parameters, variant {i}"
        if i == 17:
            body = "attempt 2 timed out, do not retry with the same parameters"
        b.append(Entry(f"s{i}", Kind.REASONING, body, turn=i))
        ids.append(f"s{i}")
    summary = Entry("sum", Kind.SUMMARY, "Probed deployment parameters; 40 steps; no conclusion.")
    plan = EditPlan(
        [Summarize(tuple(ids), into=summary)], reason="compact the trace", actor="pruner"
    )
    before = b.version
    rep = b.edit(plan)
    with b.snapshot() as s:
        kept = s["s17"].body
    safe = not rep.applied and b.version == before and rep.escalation is not None
    refusals = "/".join(r.name for r in rep.refusals)
    return {
        "story": "summary drift",
        "attempt": "summarize 40 steps into 3 lines that drop 'attempt 2 timed out'",
        "answer": f"refused ({refusals}) and escalated; window unchanged, {kept!r} kept verbatim",
        "safe": safe,
    }


def _story_torn_read() -> dict[str, Any]:
    b = Buffer()
    b.append(Entry("T", Kind.REASONING, "service B depends on config v3", turn=1))
    b.append(
        Entry("T2", Kind.REASONING, "so B must restart after the rollout", refs=("T",), turn=2)
    )
    with b.snapshot() as verifier:
        out = b.prune(["T", "T2"], reason="superseded by the new plan", actor="pruner", turn=5)
        statuses = {out[i].status for i in ("T", "T2")}
        # The verifier keeps reading its version while the prune is pending.
        whole = verifier["T2"].refs == ("T",) and verifier["T"].id == "T"
        seen = verifier.version
    removed = "T" in b.tombstones and "T2" in b.tombstones and len(b) == 0
    safe = statuses == {Status.DEFERRED} and whole and removed
    return {
        "story": "torn read",
        "attempt": "prune T and T2 (which cites T) while the verifier reads",
        "answer": f"DEFERRED: the verifier's version {seen} stayed whole; both removed together "
        f"at version {b.tombstones['T'].version} after it left, with tombstones",
        "safe": safe,
    }


def _story_readmission() -> dict[str, Any]:
    b = Buffer()
    key = "kubectl describe pod web-0"
    dump = "Name: web-0 Status: Running Restarts: 0 (900 tokens of describe output)"
    b.append(Entry("call-41", Kind.TOOL_CALL, key, key=key, turn=40))
    b.append(Entry("out-41", Kind.TOOL_OUTPUT, dump, refs=("call-41",), turn=40))
    b.prune(["call-41", "out-41"], reason="dump is noise", actor="pruner", turn=41)
    note = ""
    refused = False
    try:
        b.append(Entry("call-43", Kind.TOOL_CALL, key, key=key, turn=43))
    except ReadmissionRefused as exc:
        refused = True
        note = exc.tombstone.note()
    b.append(
        Entry("call-43", Kind.TOOL_CALL, key, key=key, turn=43),
        override=Override("the pod restarted; a fresh status is needed", turn=43),
    )
    overridden = b.stats().readmissions_overridden
    return {
        "story": "prune/re-admit oscillation",
        "attempt": "re-run the pruned 'kubectl describe' at turn 43",
        "answer": f"ReadmissionRefused, carrying {note}; re-admitted only with an explicit "
        f"Override ({overridden} logged)",
        "safe": refused and overridden == 1,
    }


def _story_constraint() -> dict[str, Any]:
    b = Buffer()
    b.append(Entry("c-etc", Kind.CONSTRAINT, CONSTRAINT_TEXT, turn=1))
    b.append(Entry("r1", Kind.REASONING, "the Dockerfile needs a new base image", turn=2))
    rep = b.edit(EditPlan([Rewrite("c-etc", "avoid system config")], reason="shorten"))
    pruned = b.prune(["c-etc"], reason="no match for 'Dockerfile'")["c-etc"]
    try:
        b.mark_stale("c-etc", "low relevance")
        marked = True
    except ProtectedEntry:
        marked = False
    moved = b.edit(EditPlan([Move("c-etc")], reason="keep constraints near the end")).applied
    with b.snapshot() as s:
        verbatim = s["c-etc"].body == CONSTRAINT_TEXT
    safe = not rep.applied and pruned.status is Status.UNCHANGED and not marked and verbatim
    return {
        "story": "paraphrased constraint",
        "attempt": f"rewrite {CONSTRAINT_TEXT!r} as 'avoid system config', then prune it",
        "answer": f"rewrite refused ({'/'.join(r.name for r in rep.refusals)}) and escalated; "
        f"prune {pruned.status.name}; mark raises ProtectedEntry; move "
        f"{'allowed' if moved else 'refused'}; text verbatim",
        "safe": safe,
    }


def replay_seeds() -> list[dict[str, Any]]:
    """The seeds' five stories on a sync :class:`Buffer`; each must come out safe."""
    return [
        _story_dangling(),
        _story_summary_drift(),
        _story_torn_read(),
        _story_readmission(),
        _story_constraint(),
    ]


# ---------------------------------------------------------------------------
# The conductor: lockstep turns over real coroutines


class Conductor:
    """Runs agents one step at a time, in (turn, order) order.

    An agent *parks* with :meth:`until`; the conductor wakes the next due
    agent and waits until it parks again (or ends), then lets the buffer
    settle and the checker look. Between turns it sleeps one ``tick``.
    """

    def __init__(self, tick: float) -> None:
        self.tick = tick
        self.turn = 0
        self._queue: list[tuple[int, int, int, str, anyio.Event]] = []
        self._seq = itertools.count()
        self._parked: anyio.Event | None = None

    def _register(self, turn: int, order: int, name: str) -> anyio.Event:
        ev = anyio.Event()
        heapq.heappush(self._queue, (max(turn, self.turn), order, next(self._seq), name, ev))
        return ev

    def _park(self) -> None:
        if self._parked is not None:
            self._parked.set()

    async def until(self, turn: int, order: int, name: str) -> int:
        """Park until ``turn``; returns the current turn when woken."""
        ev = self._register(turn, order, name)
        self._park()
        await ev.wait()
        return self.turn

    async def spawn(
        self,
        name: str,
        order: int,
        first: int,
        body: Callable[[], Awaitable[None]],
        *,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        ev = self._register(first, order, name)
        task_status.started()
        try:
            await ev.wait()
            await body()
        finally:
            self._park()

    async def run(
        self,
        turns: int,
        after_step: Callable[[str], Awaitable[None]],
        after_turn: Callable[[int], None],
    ) -> None:
        for t in range(1, turns + 1):
            self.turn = t
            while self._queue and self._queue[0][0] <= t:
                _t, _o, _s, name, ev = heapq.heappop(self._queue)
                self._parked = anyio.Event()
                ev.set()
                await self._parked.wait()
                self._parked = None
                await after_step(name)
            after_turn(t)
            await anyio.sleep(self.tick)


# ---------------------------------------------------------------------------
# Two buffers behind one interface


class View(Protocol):
    """What an agent reads: a pinned snapshot, or the naive live list."""

    def entries(self) -> Sequence[Entry]: ...

    @property
    def marks(self) -> Mapping[str, Mark]: ...

    def get(self, entry_id: str) -> Entry | None: ...

    def record(self, key: str) -> Entry | Tombstone | None: ...


class QuiesceView:
    """A pinned snapshot: the same version for the whole read."""

    def __init__(self, snap: Snapshot) -> None:
        self.snap = snap

    def entries(self) -> Sequence[Entry]:
        return self.snap.entries()

    @property
    def marks(self) -> Mapping[str, Mark]:
        return self.snap.marks

    def get(self, entry_id: str) -> Entry | None:
        got: Entry | None = self.snap.get(entry_id)
        return got

    def record(self, key: str) -> Entry | Tombstone | None:
        for e in self.snap.entries():
            if e.key == key:
                return e
        for t in self.snap.tombstones.values():
            if t.key == key:
                return t
        return None


class NaiveView:
    """A reference to the live list: every read sees whatever is there now."""

    def __init__(self, items: list[Entry]) -> None:
        self.items = items

    def entries(self) -> Sequence[Entry]:
        return list(self.items)

    @property
    def marks(self) -> Mapping[str, Mark]:
        return {}

    def get(self, entry_id: str) -> Entry | None:
        for e in self.items:
            if e.id == entry_id:
                return e
        return None

    def record(self, key: str) -> Entry | Tombstone | None:
        for e in self.items:
            if e.key == key:
                return e
        return None


class World(Protocol):
    name: str
    events: list[str]

    def view(self) -> contextlib.AbstractContextManager[View]: ...

    def append(self, entry: Entry) -> str | None: ...

    def mark(self, entry_id: str, reason: str, turn: int) -> None: ...

    async def prune_round(self, model: DemoModel) -> str: ...

    async def settle(self) -> None: ...

    def head(self) -> Sequence[Entry]: ...

    def row(self) -> dict[str, Any]: ...


class QuiesceWorld:
    name = "quiesce"

    def __init__(self, buf: RuntimeBuffer) -> None:
        self.buf = buf
        self.events: list[str] = []
        self.refused_appends: Counter[str] = Counter()
        self.conflict_replans = 0
        self.peak_pins = 0
        self.peak_deferred = 0
        self._seen_log = 0

    @contextlib.contextmanager
    def view(self) -> Iterator[View]:
        with self.buf.snapshot() as snap:
            yield QuiesceView(snap)

    def append(self, entry: Entry) -> str | None:
        try:
            self.buf.append(entry)
        except (ReadmissionRefused, DanglingReference) as exc:
            self.refused_appends[type(exc).__name__] += 1
            tomb = exc.tombstone
            return f"{type(exc).__name__}: {tomb.note() if tomb else exc}"
        return None

    def mark(self, entry_id: str, reason: str, turn: int) -> None:
        with contextlib.suppress(EntryPruned, ProtectedEntry):
            self.buf.mark_stale(entry_id, reason, turn=turn)

    async def prune_round(self, model: DemoModel) -> str:
        calls = model.calls
        report = await run_pruner(self.buf, _SnapshotPruner(model), max_retries=2)
        self.conflict_replans += max(0, model.calls - calls - 1)
        return _describe(report)

    async def settle(self) -> None:
        await self.buf.quiesce()
        # Removals re-checked at their grace point: tell what was kept, and why.
        log = self.buf.log
        for record in log[self._seen_log :]:
            if record.op == "remove":
                for entry_id, why in record.detail.get("refused", {}).items():
                    self.events.append(
                        f"barrier: kept {entry_id} at its grace point ({why.upper()}: "
                        "a survivor cites it now)"
                        if why == "referenced"
                        else f"barrier: kept {entry_id} at its grace point ({why.upper()})"
                    )
        self._seen_log = len(log)
        st = self.buf.stats()
        self.peak_pins = max(self.peak_pins, st.pinned)
        self.peak_deferred = max(self.peak_deferred, st.deferred)

    def head(self) -> Sequence[Entry]:
        return self.buf.head().entries()

    def row(self) -> dict[str, Any]:
        st = self.buf.stats()
        return {
            "version": st.version,
            "entries": st.entries,
            "pins": st.pinned,
            "deferred": st.deferred,
            "marks": st.marks,
            "tombstones": st.tombstones,
            "escalations": st.escalations,
        }


def _describe(report: EditReport | None) -> str:
    if report is None:
        return "nothing to prune"
    if report.applied:
        return f"removed {len(report.removed)} now, {len(report.deferred)} at their grace point"
    why = "/".join(r.name for r in report.refusals)
    return f"plan refused ({why}), escalated"


class NaiveWorld:
    """A plain list. Appends and plans are applied directly; nothing is
    checked, nothing is recorded, readers hold the live list itself."""

    name = "naive list"

    def __init__(self) -> None:
        self.items: list[Entry] = []
        self.events: list[str] = []
        self.mutations = 0
        self.readers = 0
        self.removals = 0

    @contextlib.contextmanager
    def view(self) -> Iterator[View]:
        self.readers += 1
        try:
            yield NaiveView(self.items)
        finally:
            self.readers -= 1

    def append(self, entry: Entry) -> str | None:
        self.items.append(entry)
        self.mutations += 1
        return None

    def mark(self, entry_id: str, reason: str, turn: int) -> None:
        return None  # a plain list has nowhere to put a mark

    def _index(self, entry_id: str) -> int | None:
        for i, e in enumerate(self.items):
            if e.id == entry_id:
                return i
        return None

    def _delete(self, entry_id: str) -> None:
        i = self._index(entry_id)
        if i is not None:
            del self.items[i]
            self.removals += 1

    def apply(self, plan: EditPlan) -> None:
        for op in plan.ops:
            if isinstance(op, Prune):
                self._delete(op.id)
            elif isinstance(op, Rewrite):
                i = self._index(op.id)
                if i is not None:
                    self.items[i] = self.items[i].replace(body=op.body, refs=op.refs)
            elif isinstance(op, Summarize):
                where = [j for j in map(self._index, op.ids) if j is not None]
                if where:
                    self.items.insert(min(where), op.into)
                    for covered in op.ids:
                        self._delete(covered)
            else:
                i = self._index(op.id)
                if i is not None:
                    e = self.items.pop(i)
                    j = None if op.before is None else self._index(op.before)
                    self.items.insert(len(self.items) if j is None else j, e)
        self.mutations += 1

    async def prune_round(self, model: DemoModel) -> str:
        with self.view() as view:
            plan = await model.think(view)
        if plan is None:
            return "nothing to prune"
        before = self.removals
        self.apply(plan)
        rewrites = sum(isinstance(op, Rewrite) for op in plan.ops)
        gone = self.removals - before
        what = f"deleted {gone} entr{'y' if gone == 1 else 'ies'}"
        if rewrites:
            what = f"rewrote {rewrites} entr{'y' if rewrites == 1 else 'ies'}"
        elif any(isinstance(op, Summarize) for op in plan.ops):
            what += " under a summary"
        return f"applied directly: {what}, no record kept"

    async def settle(self) -> None:
        return None

    def head(self) -> Sequence[Entry]:
        return list(self.items)

    def row(self) -> dict[str, Any]:
        return {
            "version": self.mutations,
            "entries": len(self.items),
            "pins": self.readers,
            "deferred": 0,
            "marks": 0,
            "tombstones": 0,
            "escalations": 0,
        }


# ---------------------------------------------------------------------------
# The checker: the same observations, the same counts, for both buffers


class Checker:
    """Counts the seeds' five failures from what readers saw and what the head holds.

    * torn read — during one read (across a model call) an entry the reader
      had seen vanished or changed under it, or its view showed an entry
      citing something absent from that view (others' appends are allowed);
    * dangling justification — a live entry cites an entry that is not live;
    * lost prohibition — a negative result or prohibition left the window;
    * prune/re-admit cycle — content (by hash or key) that was removed came
      back into the window (a call and its result coming back count once);
    * paraphrased constraint — a constraint or instruction is no longer in
      the window verbatim.
    """

    def __init__(self, policy: Policy | None = None) -> None:
        self.policy = Policy() if policy is None else policy
        self.torn: list[str] = []
        self.dangling: dict[tuple[str, str], int] = {}
        self.lost: dict[str, int] = {}
        self.readmitted: list[tuple[str, int]] = []
        self.paraphrased: dict[str, int] = {}
        self._prohibitions: dict[str, None] = {}
        self._constraints: dict[str, str] = {}
        self._removed_hashes: dict[str, str] = {}
        self._removed_keys: dict[str, str] = {}
        self._prev: dict[str, Entry] = {}
        self.readmitted_tokens = 0

    @staticmethod
    def _fingerprint(view: View) -> dict[str, str]:
        return {e.id: e.content_hash for e in view.entries()}

    @staticmethod
    def _dangling_in(view: View) -> bool:
        entries = view.entries()
        ids = {e.id for e in entries}
        return any(r not in ids for e in entries for r in e.refs)

    def begin_read(self, who: str, turn: int, view: View) -> tuple[dict[str, str], bool]:
        """Start of a read that spans a model call: what the reader sees now."""
        return self._fingerprint(view), self._dangling_in(view)

    def end_read(self, who: str, turn: int, seen: tuple[dict[str, str], bool], view: View) -> bool:
        """End of the read: was it torn? (An entry it had read vanished or
        changed under it, or a reference in its view began to dangle.)"""
        before, dangled = seen
        now = self._fingerprint(view)
        changed = [i for i, h in before.items() if now.get(i) != h]
        if changed or (self._dangling_in(view) and not dangled):
            self.torn.append(f"t{turn} {who}: {len(changed)} entries vanished or changed mid-read")
            return True
        return False

    def after_step(self, head: Sequence[Entry], turn: int) -> None:
        cur = {e.id: e for e in head}
        prev = self._prev
        for i, e in prev.items():
            if i not in cur:
                self._removed_hashes[e.content_hash] = i
                if e.key is not None:
                    self._removed_keys[e.key] = i
        back: dict[str, Entry] = {}
        for i, e in cur.items():
            if i in prev:
                continue
            if e.content_hash in self._removed_hashes or (
                e.key is not None and e.key in self._removed_keys
            ):
                back[i] = e
                self.readmitted_tokens += len(e.body.split())
            if self.policy.is_immutable(e):
                self._constraints.setdefault(i, e.body)
            elif self.policy.protection(e) is not None:
                self._prohibitions[i] = None
        # One cycle per group that came back (a tool result comes back with its call).
        for i, e in back.items():
            if not any(r in back for r in e.refs):
                self.readmitted.append((i, turn))
        for e in cur.values():
            for r in e.refs:
                if r not in cur:
                    self.dangling.setdefault((e.id, r), turn)
        for i in self._prohibitions:
            if i not in cur:
                self.lost.setdefault(i, turn)
        for i, body in self._constraints.items():
            got = cur.get(i)
            if got is None or got.body != body:
                self.paraphrased.setdefault(i, turn)
        self._prev = cur

    def counts(self) -> dict[str, int]:
        return {
            "torn reads": len(self.torn),
            "dangling justifications": len(self.dangling),
            "lost prohibitions": len(self.lost),
            "prune/re-admit cycles": len(self.readmitted),
            "paraphrased constraints": len(self.paraphrased),
        }


# ---------------------------------------------------------------------------
# The model-driven pruner (HeuristicPruner + the seeds' three mistakes)


class DemoModel:
    """The pruner's model: reads the view, thinks for ``latency`` turns while
    holding it, then proposes — the :class:`HeuristicPruner`'s plan, or at
    scripted turns one of the seeds' mistakes."""

    def __init__(self, agents: Agents, heuristic: HeuristicPruner, latency: int) -> None:
        self.agents = agents
        self.heuristic = heuristic
        self.latency = latency
        self.slip: str | None = None
        self.calls = 0

    async def think(self, view: View) -> EditPlan | None:
        a = self.agents
        self.calls += 1
        turn = a.conductor.turn
        seen = a.checker.begin_read("pruner", turn, view)
        entries = list(view.entries())
        marks = dict(view.marks)
        await a.conductor.until(turn + self.latency, a.ORDER["pruner"], "pruner")
        a.checker.end_read("pruner", a.conductor.turn, seen, view)
        if self.slip is not None:
            return self._slip(self.slip, entries, turn)
        return self.heuristic.propose(entries, marks)

    def _slip(self, slip: str, entries: Sequence[Entry], turn: int) -> EditPlan | None:
        ids = {e.id for e in entries}
        if slip == "summary":
            calls = [e.id for e in entries if e.key is not None and e.key.startswith("deploy ")]
            covered = [e.id for e in entries if e.id in calls or any(r in calls for r in e.refs)]
            if not covered:
                return None
            into = Entry(
                f"sum-{turn}",
                Kind.SUMMARY,
                "Deployment: two attempts made so far; root cause still under investigation.",
                turn=turn,
            )
            return EditPlan(
                [Summarize(tuple(covered), into=into)],
                reason="compress the deployment attempts",
                actor="pruner",
                turn=turn,
            )
        if CONSTRAINT_ID not in ids:
            return None
        if slip == "paraphrase":
            op: Rewrite | Prune = Rewrite(CONSTRAINT_ID, "avoid system config")
            reason = "shorten long instructions"
        else:
            op = Prune(CONSTRAINT_ID)
            reason = "low relevance: no match for 'Dockerfile'"
        return EditPlan([op], reason=reason, actor="pruner", turn=turn)


class _SnapshotPruner:
    """Adapts :class:`DemoModel` to the :class:`~quiesce.Pruner` protocol."""

    def __init__(self, model: DemoModel) -> None:
        self.model = model

    async def __call__(self, snap: Snapshot, /) -> EditPlan | None:
        return await self.model.think(QuiesceView(snap))


# ---------------------------------------------------------------------------
# The agents


# The vocabulary of generated tool output (no word the negative classifier flags).
# fmt: off
_WORDS = (
    "pod", "node", "replica", "service", "ingress", "route", "latency", "p99", "request",
    "queue", "cache", "shard", "lease", "config", "rollout", "image", "tag", "probe",
    "endpoint", "header", "token", "quota", "budget", "window", "metric", "trace", "span",
    "log", "line", "event", "container", "restart", "volume", "mount", "secret", "label",
    "selector", "port",
)
# fmt: on


def _text(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(n))


@dataclass
class Script:
    """When the scripted events happen, scaled to the number of turns."""

    turns: int
    attempt1: int = 0
    attempt2: int = 0
    slip_summary: int = 0
    slip_paraphrase: int = 0
    slip_drop: int = 0
    replan: int = 0
    subagent: int = 0
    prune_every: int = 4
    verify_every: int = 8

    def __post_init__(self) -> None:
        t = self.turns
        # tool-b steps every 3-4 turns, so a 4-turn window holds one of its steps.
        self.attempt1 = round(0.2 * t)
        self.attempt2 = self.attempt1 + 4
        self.slip_summary = self._prune_turn(max(0.4 * t, self.attempt2 + 5))
        self.replan = self.slip_summary + 4
        self.slip_paraphrase = self._prune_turn(max(0.6 * t, self.slip_summary + 1))
        self.slip_drop = self._prune_turn(max(0.8 * t, self.slip_paraphrase + 1))
        self.subagent = round(0.45 * t)

    def _prune_turn(self, at: float) -> int:
        """The first pruning round at or after ``at``."""
        every = self.prune_every
        return max(2, -(-int(at + 0.999) // every)) * every

    def slips(self) -> list[tuple[int, str]]:
        return [
            (self.slip_summary, "summary"),
            (self.slip_paraphrase, "paraphrase"),
            (self.slip_drop, "drop"),
        ]


@dataclass
class Consequences:
    """What the agents did because of what they could (not) see."""

    prohibited_retries: int = 0  #: the replanner re-ran what had timed out
    verifier_halts: int = 0  #: the verifier found its citation pruned and stopped


class Agents:
    """The workload: every agent is a coroutine over one :class:`World`."""

    ORDER: ClassVar[dict[str, int]] = {
        "planner": 0,
        "tool-a": 1,
        "tool-b": 2,
        "verifier": 3,
        "replanner": 4,
        "subagent": 5,
        "pruner": 6,
    }

    def __init__(
        self, world: World, conductor: Conductor, checker: Checker, seed: int, turns: int
    ) -> None:
        self.world = world
        self.conductor = conductor
        self.checker = checker
        self.seed = seed
        self.turns = turns
        self.script = Script(turns)
        self.after = Consequences()
        self.model = DemoModel(
            self,
            HeuristicPruner(budget=600, min_age=8, stale_age=2, actor="pruner"),
            latency=2,
        )
        self.facts: list[str] = []

    def rng(self, name: str) -> random.Random:
        return random.Random(f"{self.seed}:{name}")

    def event(self, who: str, text: str) -> None:
        self.world.events.append(f"t{self.conductor.turn:>3} {who}: {text}")

    async def wait(self, who: str, turn: int) -> int:
        return await self.conductor.until(turn, self.ORDER[who], who)

    def roster(self) -> list[tuple[str, int, Callable[[], Awaitable[None]]]]:
        s = self.script
        return [
            ("planner", 1, self.planner),
            ("tool-a", 2, self.tool_a),
            ("tool-b", 3, self.tool_b),
            ("verifier", s.verify_every + s.prune_every, self.verifier),
            ("replanner", s.replan, self.replanner),
            ("subagent", s.subagent, self.subagent),
            ("pruner", s.prune_every * 2, self.pruner),
        ]

    # -- planner: plan steps, facts, and stale marks (the sync fast path) ----

    async def planner(self) -> None:
        rng = self.rng("planner")
        turn = self.conductor.turn
        self.world.append(
            Entry("sys", Kind.INSTRUCTION, "You are an SRE agent on prod-eu.", turn=0)
        )
        self.world.append(Entry(CONSTRAINT_ID, Kind.CONSTRAINT, CONSTRAINT_TEXT, turn=0))
        steps: list[tuple[str, int]] = []
        while turn <= self.turns:
            sid = f"plan-{turn}"
            self.world.append(Entry(sid, Kind.REASONING, f"plan: {_text(rng, 22)}", turn=turn))
            steps.append((sid, turn))
            if turn <= 6 or turn % 5 == 2:  # a burst of endpoint checks, then one per 5 turns
                fid = f"fact-{turn}"
                ep = f"/api/v1/{rng.choice(_WORDS)}-{turn}"
                self.world.append(
                    Entry(
                        fid, Kind.REASONING, f"endpoint {ep} is read-only (ACL checked)", turn=turn
                    )
                )
                self.facts.append(fid)
            if turn % 10 == 0:
                for old, t in steps:
                    if t <= turn - 5:
                        self.world.mark(old, f"superseded by the plan at turn {turn}", turn)
                steps = [(i, t) for i, t in steps if t > turn - 5]
            turn = await self.wait("planner", turn + 1)

    # -- tool callers: read, decide, call (holding the view), append the pair ----

    async def _tool(self, who: str, wants: Callable[[int], str | None], every: int) -> None:
        n = 0
        skipped: set[str] = set()
        turn = self.conductor.turn
        while turn <= self.turns:
            key = wants(turn)
            if key is not None:
                with self.world.view() as view:
                    seen = self.checker.begin_read(who, turn, view)
                    have = view.record(key)
                    if have is None:
                        turn = await self.wait(who, turn + 1)  # the tool call
                        self.checker.end_read(who, turn, seen, view)
                        n += 1
                        self._call(who, key, n, turn)
                    elif isinstance(have, Tombstone) and key not in skipped:
                        skipped.add(key)
                        self.event(who, f"won't re-run {key!r}: {have.note()}")
            turn = await self.wait(who, turn + every)

    def _call(self, who: str, key: str, n: int, turn: int) -> None:
        cid = f"{who}-call-{n}"
        out = _tool_output(self.seed, key)
        refused = self.world.append(Entry(cid, Kind.TOOL_CALL, key, key=key, turn=turn))
        if refused is not None:
            self.event(who, f"{key!r} refused: {refused}")
            return
        self.world.append(Entry(f"{cid}/out", Kind.TOOL_OUTPUT, out, refs=(cid,), turn=turn))

    async def tool_a(self) -> None:
        rng = self.rng("tool-a")
        pods = ["web-0", "web-1", "db-0"]

        def wants(turn: int) -> str | None:
            if turn % 2 == 0:
                return "kubectl describe pod web-0"  # the seed-002 dump, wanted again and again
            return f"kubectl logs {rng.choice(pods)} --since={turn}m"

        await self._tool("tool-a", wants, 2)

    async def tool_b(self) -> None:
        rng = self.rng("tool-b")
        s = self.script

        def wants(turn: int) -> str | None:
            if s.attempt1 <= turn < s.attempt2:
                return "deploy attempt 1 --image=web:2.4 --timeout=30s"
            if s.attempt2 <= turn < s.attempt2 + 4:
                return "deploy attempt 2 --image=web:2.4 --timeout=30s"
            return f"curl -s https://prod-eu/{rng.choice(_WORDS)}/status?t={turn}"

        await self._tool("tool-b", wants, 3)

    # -- verifier: cite the oldest read-only fact (across a model call) -------

    async def verifier(self) -> None:
        turn = self.conductor.turn
        n = 0
        while turn <= self.turns:
            with self.world.view() as view:
                seen = self.checker.begin_read("verifier", turn, view)
                # Verify the oldest fact no verdict cites yet (it falls behind,
                # so its fact drifts towards the pruning frontier).
                entries = view.entries()
                cited = {r for e in entries if e.kind is Kind.RATIONALE for r in e.refs}
                fact = next(
                    (
                        e
                        for e in entries
                        if e.id.startswith("fact-") and e.id not in cited and e.id not in view.marks
                    ),
                    None,
                )
                turn = await self.wait("verifier", turn + 3)  # the model call
                self.checker.end_read("verifier", turn, seen, view)
                if fact is not None:
                    n += 1
                    body = f"the write is safe: {fact.body} (cites {fact.id})"
                    vanished = view.get(fact.id) is None
                    refused = self.world.append(
                        Entry(f"verdict-{n}", Kind.RATIONALE, body, refs=(fact.id,), turn=turn)
                    )
                    if refused is not None:
                        self.after.verifier_halts += 1
                        self.event("verifier", f"citation unresolved, halts: {refused}")
                    elif vanished:
                        self.event(
                            "verifier",
                            f"{fact.id} was deleted mid-read; cites it anyway (unknown, proceed)",
                        )
            turn = await self.wait("verifier", turn + self.script.verify_every - 3)

    # -- replanner: must not retry what timed out ------------------------------

    async def replanner(self) -> None:
        turn = self.conductor.turn
        retry_key = "deploy attempt 2 --image=web:2.4 --timeout=30s"
        first = True
        while turn <= self.turns:
            with self.world.view() as view:
                seen = self.checker.begin_read("replanner", turn, view)
                guarded = any("do not retry" in e.body for e in view.entries())
                turn = await self.wait("replanner", turn + 2)
                self.checker.end_read("replanner", turn, seen, view)
            if first and not guarded:
                self.after.prohibited_retries += 1
                self.event("replanner", "no record of the timeout: retries attempt 2 as-is")
                self._call("replanner", retry_key, 1, turn)
            else:
                why = "attempt 2 timed out; use --timeout=120s" if guarded else "continue"
                self.world.append(
                    Entry(f"replan-{turn}", Kind.REASONING, f"replan: {why}", turn=turn)
                )
            first = False
            turn = await self.wait("replanner", turn + 8)

    # -- a slow sub-agent: one long read (the reader-age alarm's case) --------

    async def subagent(self) -> None:
        turn = self.conductor.turn
        with self.world.view() as view:
            seen = self.checker.begin_read("subagent", turn, view)
            n = len(view.entries())
            turn = await self.wait("subagent", turn + 12)
            self.checker.end_read("subagent", turn, seen, view)
        self.world.append(
            Entry(
                f"summary-{turn}",
                Kind.SUMMARY,
                f"incident summary: {n} entries reviewed; pod web-0 healthy, dump is noise",
                turn=turn,
            )
        )

    # -- the model-driven pruner ----------------------------------------------

    async def pruner(self) -> None:
        turn = self.conductor.turn
        slips = self.script.slips()
        while turn <= self.turns:
            slip = None
            if slips and slips[0][0] <= turn:
                slip = slips.pop(0)[1]
            self.model.slip = slip
            outcome = await self.world.prune_round(self.model)
            if slip is not None or "refused" in outcome:
                label = f"[model mistake: {slip}] " if slip else ""
                self.event("pruner", f"{label}{outcome}")
            turn = self.conductor.turn
            nxt = (turn // self.script.prune_every + 1) * self.script.prune_every
            turn = await self.wait("pruner", nxt)


def _tool_output(seed: int, key: str) -> str:
    """The same call always returns the same output (so a re-run re-admits it)."""
    rng = random.Random(f"{seed}:{key}")
    if key.startswith("deploy attempt 1"):
        return "attempt 1 failed: image pull back-off on web:2.4"
    if key.startswith("deploy attempt 2"):
        return "attempt 2 timed out, do not retry with the same parameters"
    if key.startswith("kubectl describe"):
        return "Name: web-0 Status: Running " + _text(rng, 150)
    return _text(rng, rng.randint(20, 60))


# ---------------------------------------------------------------------------
# Display


class Display:
    """Live progress: a rich table on a terminal, plain lines otherwise."""

    def __init__(self, out: TextIO, *, live: bool, turns: int) -> None:
        self.out = out
        self.turns = turns
        self.rows: dict[str, tuple[int, dict[str, Any]]] = {}
        self.worlds: list[World] = []
        self._live: Any = None
        self._every = max(1, turns // 6)
        self._printed: dict[str, int] = {}
        if live:
            try:
                from rich.console import Console
                from rich.live import Live

                self._console = Console(file=out)
                self._live = Live(console=self._console, refresh_per_second=12, transient=False)
            except ImportError:  # rich is optional (the ``demo`` extra)
                self._live = None

    def __enter__(self) -> Display:
        if self._live is not None:
            self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.update(self._render())
            self._live.__exit__(None, None, None)
            # The live feed showed only the latest events: list them all once.
            for w in self.worlds:
                for line in w.events:
                    self.out.write(f"  [{w.name:>10}] {line}\n")

    def add(self, world: World) -> None:
        """Show ``world`` (rows appear in the order worlds are added)."""
        self.worlds.append(world)
        self.rows[world.name] = (0, world.row())

    def update(self, world: World, turn: int) -> None:
        self.rows[world.name] = (turn, world.row())
        if self._live is not None:
            self._live.update(self._render())
            return
        if turn % self._every == 0 or turn == self.turns:
            r = self.rows[world.name][1]
            self.out.write(
                f"  [{world.name:>10}] turn {turn:>3}/{self.turns}  version {r['version']:>4}  "
                f"entries {r['entries']:>3}  pins {r['pins']}  deferred {r['deferred']:>2}  "
                f"tombstones {r['tombstones']:>3}  escalations {r['escalations']}\n"
            )
        start = self._printed.get(world.name, 0)
        for line in world.events[start:]:
            self.out.write(f"  [{world.name:>10}] {line}\n")
        self._printed[world.name] = len(world.events)

    def _render(self) -> Any:
        from rich.console import Group
        from rich.table import Table
        from rich.text import Text

        table = Table(title="quiesce demo: the same workload on two buffers", expand=False)
        for col in ("buffer", "turn", "version", "entries", "pins", "deferred", "marks"):
            table.add_column(col, justify="right")
        table.add_column("tombstones", justify="right")
        table.add_column("escalations", justify="right")
        for name, (turn, r) in self.rows.items():
            table.add_row(
                name,
                f"{turn}/{self.turns}",
                str(r["version"]),
                str(r["entries"]),
                str(r["pins"]),
                str(r["deferred"]),
                str(r["marks"]),
                str(r["tombstones"]),
                str(r["escalations"]),
            )
        feed = []
        for w in self.worlds:
            for line in w.events[-4:]:
                feed.append(Text(f"[{w.name}] {line}", overflow="ellipsis", no_wrap=True))
        return Group(table, *feed)


# ---------------------------------------------------------------------------
# Running it


@dataclass
class Outcome:
    """Everything the report needs."""

    seeds: list[dict[str, Any]]
    counts: dict[str, dict[str, int]]
    details: dict[str, dict[str, Any]]
    quiesce: dict[str, Any]
    naive: dict[str, Any]
    log: dict[str, Any]
    elapsed: float = 0.0


def _sqlite_sink(path: str) -> LogSink | None:
    try:
        from quiesce import SQLiteLog
    except ImportError:  # pragma: no cover - the durable sink is optional here
        return None
    return SQLiteLog(path)


async def _run_world(
    world: World, checker: Checker, cfg: argparse.Namespace, display: Display
) -> Agents:
    conductor = Conductor(cfg.tick)
    agents = Agents(world, conductor, checker, cfg.seed, cfg.turns)

    async def after_step(name: str) -> None:
        await world.settle()
        checker.after_step(world.head(), conductor.turn)

    def after_turn(turn: int) -> None:
        display.update(world, turn)

    async with anyio.create_task_group() as tg:
        for name, first, body in agents.roster():
            order = agents.ORDER[name]
            await tg.start(conductor.spawn, name, order, first, body, name=f"{world.name}:{name}")
        await conductor.run(cfg.turns, after_step, after_turn)
        tg.cancel_scope.cancel()
    await world.settle()
    checker.after_step(world.head(), conductor.turn)
    return agents


async def _supervisor(buf: RuntimeBuffer, seen: Counter[str], world: QuiesceWorld) -> None:
    async for esc in buf.escalations():
        seen[esc.kind.name] += 1
        world.events.append(f"supervisor: {esc.kind.name}: {_short(esc)}")


def _escalations_in_log(buf: Buffer) -> dict[str, int]:
    """Escalations by kind, as the append-only log records them."""
    kinds: Counter[str] = Counter()
    for r in buf.log:
        if r.op == "escalate":
            kinds[r.outcome.upper()] += 1
        elif r.op == "edit" and r.outcome == "refused":
            kinds["REFUSED_EDIT"] += 1
    return dict(sorted(kinds.items()))


def _short(esc: Escalation) -> str:
    text = esc.detail.split(";")[0]
    return text if len(text) <= 90 else text[:87] + "..."


async def _demo(cfg: argparse.Namespace, out: TextIO, log_path: str) -> Outcome:
    seeds = replay_seeds()
    _print_seeds(out, seeds)
    out.write("\n2. The same workload on two buffers (live)\n")
    out.flush()
    sink = _sqlite_sink(log_path)
    started = time.monotonic()
    q_checker, n_checker = Checker(), Checker()
    escalations: Counter[str] = Counter()
    naive = NaiveWorld()
    # The alarm sits above every ordinary read (at most 6 turns, the pruner
    # with its re-plans) and below the slow sub-agent's 12-turn read.
    max_pin_age = 8 * cfg.tick if cfg.tick > 0 else None
    live = not cfg.plain and out.isatty()
    with Display(out, live=live, turns=cfg.turns) as display:
        async with open_buffer(log=sink, max_pin_age=max_pin_age) as buf:
            qworld = QuiesceWorld(buf)
            display.add(qworld)
            display.add(naive)
            results: dict[str, Agents] = {}
            async with anyio.create_task_group() as tg:
                tg.start_soon(_supervisor, buf, escalations, qworld)

                async def both() -> None:
                    async with anyio.create_task_group() as worlds:

                        async def go(world: World, checker: Checker) -> None:
                            results[world.name] = await _run_world(world, checker, cfg, display)

                        worlds.start_soon(go, qworld, q_checker)
                        worlds.start_soon(go, naive, n_checker)
                    tg.cancel_scope.cancel()

                tg.start_soon(both)
            await buf.quiesce()
            buf._check(expect_no_pins=True)
            stats = buf.stats()
            logged = _escalations_in_log(buf)
            head = [(e.id, e.content_hash) for e in buf.head().entries()]
            tombs = dict(buf.tombstones)
    elapsed = time.monotonic() - started
    log_info: dict[str, Any] = {"kind": "in-memory", "path": None}
    if sink is not None:
        sink.close()
        reopened_sink = _sqlite_sink(log_path)
        assert reopened_sink is not None
        again = Buffer(log=reopened_sink)
        same = [(e.id, e.content_hash) for e in again.head().entries()] == head and set(
            again.tombstones
        ) == set(tombs)
        log_info = {
            "kind": "sqlite",
            "path": log_path,
            "records": len(again.log),
            "recovered_entries": len(again),
            "recovered_tombstones": len(again.tombstones),
            "recovery_matches": same,
        }
        reopened_sink.close()
    qa, na = results["quiesce"], results["naive list"]
    counts = {"quiesce": q_checker.counts(), "naive": n_checker.counts()}
    details = {
        "quiesce": _details(q_checker, qa),
        "naive": _details(n_checker, na),
    }
    quiesce_info = {
        "version": stats.version,
        "entries": stats.entries,
        "tombstones": stats.tombstones,
        "tombstone_to_edit_ratio": stats.tombstone_to_edit_ratio,
        "marks": stats.marks,
        "refusals": {
            r.name: n for r, n in sorted(stats.refusals.items(), key=lambda kv: kv[0].name)
        },
        "escalations": stats.escalations,
        "escalations_by_kind": logged,
        "escalations_received": sum(escalations.values()),
        "readmissions_refused": stats.readmissions_refused,
        "refused_appends": dict(qworld.refused_appends),
        "conflict_replans": qworld.conflict_replans,
        "peak_pins": qworld.peak_pins,
        "peak_deferred": qworld.peak_deferred,
        "log_records": stats.log_records,
    }
    naive_info = {
        "mutations": naive.mutations,
        "entries": len(naive.items),
        "removals": naive.removals,
        "tombstones": 0,
        "tombstone_to_edit_ratio": 0.0,
    }
    return Outcome(seeds, counts, details, quiesce_info, naive_info, log_info, elapsed)


def _details(checker: Checker, agents: Agents) -> dict[str, Any]:
    return {
        "torn_reads": checker.torn[:20],
        "dangling": [f"{a} -> {b} (turn {t})" for (a, b), t in checker.dangling.items()],
        "lost_prohibitions": [f"{i} (turn {t})" for i, t in checker.lost.items()],
        "readmitted": [f"{i} (turn {t})" for i, t in checker.readmitted],
        "paraphrased": [f"{i} (turn {t})" for i, t in checker.paraphrased.items()],
        "readmitted_tokens": checker.readmitted_tokens,
        "prohibited_retries": agents.after.prohibited_retries,
        "verifier_halts": agents.after.verifier_halts,
    }


# ---------------------------------------------------------------------------
# The report


def _print_seeds(out: TextIO, seeds: Sequence[dict[str, Any]]) -> None:
    out.write("1. The seeds' five failure stories, replayed on the core\n")
    for s in seeds:
        mark = "safe" if s["safe"] else "UNSAFE"
        out.write(f"  [{mark}] {s['story']}: {s['attempt']}\n")
        out.write(f"         -> {s['answer']}\n")


def _report(out: TextIO, o: Outcome, cfg: argparse.Namespace) -> None:
    w = out.write
    w("\nReport: the same workload, the same checker\n")
    w(f"  {'':<26}{'quiesce':>9}{'naive list':>12}\n")
    for name in FAILURES:
        w(f"  {name:<26}{o.counts['quiesce'][name]:>9}{o.counts['naive'][name]:>12}\n")
    q, n, nd = o.quiesce, o.naive, o.details["naive"]
    refusals = ", ".join(f"{k} {v}" for k, v in q["refusals"].items()) or "none"
    by_kind = ", ".join(f"{k} {v}" for k, v in q["escalations_by_kind"].items()) or "none"
    w("\n  quiesce:\n")
    w(
        f"    {q['version']} versions, {q['entries']} entries, {q['tombstones']} tombstones "
        f"(tombstone-to-edit ratio {q['tombstone_to_edit_ratio']:.2f}), peak {q['peak_pins']} "
        f"pinned readers, peak {q['peak_deferred']} removals deferred to a grace point\n"
    )
    w(f"    refusals: {refusals}\n")
    w(
        f"    escalations: {q['escalations']} ({by_kind}), "
        f"{q['escalations_received']} received by the supervisor; "
        f"{q['conflict_replans']} re-plan(s) after a CONFLICT\n"
    )
    if o.log["kind"] == "sqlite":
        ok = "matches" if o.log["recovery_matches"] else "DOES NOT MATCH"
        w(
            f"    log: {o.log['records']} records in SQLite; reopened: "
            f"{o.log['recovered_entries']} entries, {o.log['recovered_tombstones']} tombstones, "
            f"{ok} the live head\n"
        )
        keep = "" if cfg.log else " (temporary; --log PATH keeps it)"
        w(f"         {o.log['path']}{keep}\n")

    else:
        w("    log: in-memory (SQLiteLog is not available)\n")
    w("  naive list:\n")
    w(
        f"    {n['removals']} removals, 0 tombstones (tombstone-to-edit ratio 0.00: seed 002's "
        f"silent signature)\n"
    )
    w(
        f"    consequences: the replanner retried the timed-out attempt "
        f"{nd['prohibited_retries']}x; {len(nd['readmitted'])} pruned tool call(s) re-run "
        f"({nd['readmitted_tokens']} tokens)\n"
    )
    q_total = sum(o.counts["quiesce"].values())
    n_total = sum(o.counts["naive"].values())
    verdict = "OK" if q_total == 0 and all(s["safe"] for s in o.seeds) else "FAILED"
    w(
        f"\n{verdict}: quiesce {q_total} failures, naive list {n_total} "
        f"(seed {cfg.seed}, {cfg.turns} turns, {cfg.backend}, {o.elapsed:.1f} s)\n"
    )


def _json(o: Outcome, cfg: argparse.Namespace) -> dict[str, Any]:
    return {
        "seed": cfg.seed,
        "turns": cfg.turns,
        "backend": cfg.backend,
        "elapsed": round(o.elapsed, 3),
        "seeds": o.seeds,
        "counts": o.counts,
        "details": o.details,
        "quiesce": o.quiesce,
        "naive": o.naive,
        "log": o.log,
        "ok": sum(o.counts["quiesce"].values()) == 0 and all(s["safe"] for s in o.seeds),
    }


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="quiesce demo",
        description="A streaming multi-agent loop on quiesce and on a naive list, side by side.",
    )
    p.add_argument("--seed", type=int, default=7, help="random seed (default 7)")
    p.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    p.add_argument(
        "--turns", type=int, default=60, help=f"turns to run (>= {MIN_TURNS}; default 60)"
    )
    p.add_argument(
        "--tick", type=float, default=0.1, help="seconds per turn (default 0.1; 0 = flat out)"
    )
    p.add_argument("--log", metavar="PATH", help="SQLite log file (default: a temporary folder)")
    p.add_argument("--json", metavar="PATH", help="write the report as JSON")
    p.add_argument("--plain", action="store_true", help="plain lines even on a terminal")
    return p


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None) -> int:
    """``quiesce demo [--seed N] [--backend asyncio|trio] [--turns N] [--tick S]
    [--log PATH] [--json PATH] [--plain]``. Exit status 0 when quiesce shows
    no failure, 1 otherwise."""
    cfg = _parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    if cfg.turns < MIN_TURNS:
        _parser().error(f"--turns must be at least {MIN_TURNS}")
    if not math.isfinite(cfg.tick) or cfg.tick < 0:
        sys.stderr.write(f"quiesce demo: error: --tick must be finite and >= 0, not {cfg.tick}\n")
        return 2
    if cfg.log and os.path.exists(cfg.log) and os.path.getsize(cfg.log) > 0:
        sys.stderr.write(
            f"quiesce demo: error: --log {cfg.log} exists already: the demo writes a new log "
            f"(inspect that one with: quiesce inspect {cfg.log})\n"
        )
        return 2
    stream = sys.stdout if out is None else out
    stream.write(f"quiesce demo: seed {cfg.seed}, {cfg.turns} turns, {cfg.backend}\n\n")
    with contextlib.ExitStack() as stack:
        if cfg.log:
            log_path = os.path.abspath(cfg.log)
        else:
            folder = stack.enter_context(tempfile.TemporaryDirectory(prefix="quiesce-demo-"))
            log_path = os.path.join(folder, "demo.sqlite")
        try:
            outcome = anyio.run(_demo, cfg, stream, log_path, backend=cfg.backend)
        except (QuiesceError, OSError) as exc:
            stream.write(f"quiesce demo: {type(exc).__name__}: {exc}\n")
            return 1
        _report(stream, outcome, cfg)
        if cfg.log:
            stream.write(f"  inspect it: quiesce inspect {log_path}\n")
            stream.write(f"  view its history: quiesce view {log_path} -o report.html\n")
        if cfg.json:
            with open(cfg.json, "w", encoding="utf-8") as f:
                json.dump(_json(outcome, cfg), f, indent=2)
                f.write("\n")
            stream.write(f"  report written to {cfg.json}\n")
        stream.flush()
    return 0 if _json(outcome, cfg)["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
