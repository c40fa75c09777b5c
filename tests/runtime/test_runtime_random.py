"""A seeded random schedule under the runtime, on asyncio and on trio.

Readers pin snapshots and hold them across random checkpoints; writers
append (some entries cite others, some are protected); a marker marks; a
pruner prunes and edits (prune, rewrite, summarize, move, and plans the policy
refuses); the barrier scheduler applies removals as readers leave. Every
version the buffer publishes — from any of them, the scheduler included — is
recorded at the moment it is published, and:

* every snapshot equals exactly one published version for its whole life
  (invariant 1): its content at entry, after every checkpoint and at exit is
  the content recorded when that version was published;
* no snapshot ever shows a live entry citing a removed one (invariant 2), and
  no entry is removed while a reader that pinned it unmarked is in flight
  (invariant 5), checked at each publication against the readers pinned then;
* at the end every removal is applied, and ``buf._check(expect_no_pins=True)``
  passes.

A failing seed is printed in the assertion message. The op sequence is fixed
by the seed; trio also shuffles its run queue on purpose, so a trio failure
may need a few runs of its seed to reproduce. ``QUIESCE_RANDOM_SEEDS=N`` runs
N seeds per backend (default 200): seeds 0-99 by default, the rest under
``-m slow``.
"""

from __future__ import annotations

import os
import random
from typing import Any

import anyio
import pytest

from _settle import all_blocked
from quiesce import (
    DanglingReference,
    EditPlan,
    Entry,
    EntryPruned,
    Kind,
    Move,
    ProtectedEntry,
    Prune,
    Rewrite,
    RuntimeBuffer,
    Snapshot,
    Summarize,
    open_buffer,
)
from quiesce._core.observe import tap_publications

pytestmark = pytest.mark.anyio

SEEDS = int(os.environ.get("QUIESCE_RANDOM_SEEDS", "200"))
#: the seeds of the default run (the others run under -m slow)
DEFAULT_SEEDS = 100
SEED_PARAMS = [
    s if s < DEFAULT_SEEDS else pytest.param(s, marks=pytest.mark.slow) for s in range(SEEDS)
]

Fingerprint = tuple[tuple[tuple[str, str, tuple[str, ...]], ...], frozenset[str], frozenset[str]]


def fingerprint_version(v: Any) -> Fingerprint:
    return (
        tuple((e.id, e.body, e.refs) for e in v.entries()),
        frozenset(v.marks),
        frozenset(v.tombs.by_id),
    )


def fingerprint_snapshot(snap: Snapshot) -> Fingerprint:
    return (
        tuple((e.id, e.body, e.refs) for e in snap),
        frozenset(snap.marks),
        frozenset(snap.tombstones),
    )


class RecordingBuffer(RuntimeBuffer):
    """A ``RuntimeBuffer`` that records every version at the moment it is
    published (the core reports each store of its head through
    ``tap_publications``) and checks the publication against the readers
    pinned at that moment."""

    published: dict[int, Fingerprint]
    violations: list[str]
    last: Any

    def on_publish(self, new: Any) -> None:
        old = self.last
        if new.number != old.number + 1:
            self.violations.append(f"version {new.number} published after {old.number}")
        if new.number in self.published:
            self.violations.append(f"version {new.number} published twice")
        live = new.live
        for i, slot in live.items():
            for ref in slot.entry.refs:
                if ref not in live:
                    self.violations.append(
                        f"version {new.number}: live {i!r} cites removed {ref!r} (invariant 2)"
                    )
        removed = [i for i in old.live if i not in live and i in new.tombs.by_id]
        if removed:
            with self._st.pin_lock:
                pinned = [s._version for s in self._registry.readers()]
            for i in removed:
                for v in pinned:
                    if v is not None and i in v.live and i not in v.marks:
                        self.violations.append(
                            f"{i!r} removed at version {new.number} while a reader of "
                            f"version {v.number} saw it unmarked (invariant 5)"
                        )
        self.published[new.number] = fingerprint_version(new)
        self.last = new


def record(buf: RuntimeBuffer) -> RecordingBuffer:
    buf.__class__ = RecordingBuffer
    assert isinstance(buf, RecordingBuffer)
    buf.published = {buf.version: fingerprint_version(buf.head())}
    buf.violations = []
    buf.last = buf.head()
    tap_publications(buf, buf.on_publish)
    return buf


async def run_schedule(seed: int) -> None:
    rng = random.Random(seed)
    n_readers = rng.randint(2, 6)
    rounds = rng.randint(15, 40)
    counter = iter(range(10**9))
    async with open_buffer(max_pin_age=None, escalation_buffer=10_000) as raw:
        buf = record(raw)
        # a few protected entries the pruner keeps trying to remove
        buf.append(Entry("rule", Kind.CONSTRAINT, "do not modify files under /etc"))
        buf.append(Entry("neg", Kind.NEGATIVE, "attempt 2 timed out"))

        def live_ids() -> list[str]:
            return list(buf.head().live)

        def fresh(prefix: str) -> str:
            return f"{prefix}{next(counter)}"

        async def pause() -> None:
            for _ in range(rng.randint(0, 3)):
                if rng.random() < 0.5:
                    await anyio.sleep(0)
                else:
                    await anyio.lowlevel.checkpoint()

        async def reader(r: int) -> None:
            for _ in range(rounds):
                with buf.snapshot() as snap:
                    v = snap.version
                    first = fingerprint_snapshot(snap)
                    assert first == buf.published[v], f"reader {r}: v{v} is not as published"
                    for _ in range(rng.randint(0, 4)):
                        await pause()
                        assert fingerprint_snapshot(snap) == first, (
                            f"reader {r}: snapshot of v{v} changed while pinned"
                        )
                        ids = [e.id for e in snap]
                        for e in snap:
                            for ref in e.refs:
                                assert ref in snap, (
                                    f"reader {r}: v{v} shows {e.id!r} citing removed {ref!r}"
                                )
                        if ids:
                            i = rng.choice(ids)
                            assert snap[i].id == i
                        for i in first[2]:
                            with pytest.raises(EntryPruned):
                                snap[i]
                    assert fingerprint_snapshot(snap) == buf.published[v]
                await pause()

        async def writer(w: int) -> None:
            for _ in range(rounds):
                eid = fresh(f"w{w}-")
                live = live_ids()
                refs = tuple(rng.sample(live, k=min(len(live), rng.randint(0, 2))))
                refs = tuple(x for x in refs if x not in ("rule", "neg")) or ()
                kind = rng.choice(
                    [Kind.REASONING] * 6 + [Kind.TOOL_OUTPUT, Kind.NEGATIVE, Kind.RATIONALE]
                )
                body = f"note {eid}" if kind is not Kind.NEGATIVE else f"{eid} failed"
                try:
                    buf.append(Entry(eid, kind, body, refs))
                except DanglingReference:  # pragma: no cover - refs are live above
                    raise
                await pause()

        async def marker() -> None:
            for _ in range(rounds):
                live = live_ids()
                if live:
                    i = rng.choice(live)
                    try:
                        buf.mark_stale(i, "superseded")
                    except ProtectedEntry:
                        assert i == "rule"
                await pause()

        async def pruner() -> None:
            for _ in range(rounds):
                live = [i for i in live_ids()]
                choice = rng.random()
                if live and choice < 0.45:
                    ids = rng.sample(live, k=min(len(live), rng.randint(1, 3)))
                    report = buf.prune(ids, reason="stale")
                    assert list(report) == list(dict.fromkeys(ids))
                elif live and choice < 0.9:
                    buf.edit(random_plan(live))
                elif live:
                    # a plan that must be refused: it touches its own rationale
                    i = rng.choice(live)
                    report = buf.edit(EditPlan([Prune(i)], reason="self", rationale=[i]))
                    assert not report.applied
                buf._check()
                await pause()

        def random_plan(live: list[str]) -> EditPlan:
            kind = rng.choice(["prune", "rewrite", "summarize", "move"])
            if kind == "prune":
                ops: list[Any] = [Prune(i) for i in rng.sample(live, k=min(2, len(live)))]
            elif kind == "rewrite":
                ops = [Rewrite(rng.choice(live), f"rewritten {next(counter)}")]
            elif kind == "summarize":
                covered = rng.sample(live, k=min(len(live), rng.randint(1, 3)))
                sid = fresh("s")
                ops = [Summarize(covered, Entry(sid, Kind.SUMMARY, f"summary {sid}"))]
            else:
                i = rng.choice(live)
                others = [x for x in live if x != i]
                ops = [Move(i, rng.choice(others) if others and rng.random() < 0.7 else None)]
            return EditPlan(ops, reason="pruner plan", actor="pruner", base=buf.version)

        async def drain() -> None:
            async for _ in buf.escalations():
                pass

        async with anyio.create_task_group() as outer:
            outer.start_soon(drain)
            async with anyio.create_task_group() as tg:
                for r in range(n_readers):
                    tg.start_soon(reader, r)
                for w in range(rng.randint(1, 2)):
                    tg.start_soon(writer, w)
                tg.start_soon(marker)
                tg.start_soon(pruner)
            await all_blocked()
            # every reader is gone: the scheduler applied every removal
            assert buf.staged() == {}, f"removals left staged: {sorted(buf.staged())}"
            assert not buf.has_due()
            outer.cancel_scope.cancel()
        assert buf.violations == []
        buf._check(expect_no_pins=True)
        assert buf.stats().pinned == 0
        assert buf.stats().tombstone_to_edit_ratio == 1.0
        assert set(buf.published) == set(range(buf.version + 1))


@pytest.mark.parametrize("seed", SEED_PARAMS)
async def test_random_schedule(seed: int, anyio_backend: str) -> None:
    try:
        await run_schedule(seed)
    except Exception as exc:  # AssertionError, or one inside an ExceptionGroup
        raise AssertionError(
            f"random schedule failed: seed={seed} backend={anyio_backend} "
            f"(rerun: pytest 'tests/runtime/test_runtime_random.py::test_random_schedule"
            f"[{anyio_backend}-{seed}]'): {exc!r}"
        ) from exc


async def test_the_recorder_catches_a_changed_snapshot() -> None:
    """The harness is not vacuous: a version whose recorded content differs
    from what a reader sees is reported."""
    async with open_buffer(max_pin_age=None) as raw:
        buf = record(raw)
        buf.append(Entry("a", Kind.REASONING, "note a"))
        buf.published[buf.version] = ((), frozenset(), frozenset())  # tamper
        with buf.snapshot() as snap:
            assert fingerprint_snapshot(snap) != buf.published[snap.version]


async def test_the_recorder_catches_a_removal_under_a_reader() -> None:
    """The harness is not vacuous: forcing a removal past its grace point
    while a reader that saw the entry unmarked is pinned is reported."""
    async with open_buffer(max_pin_age=None) as raw:
        buf = record(raw)
        buf.append(Entry("a", Kind.REASONING, "note a"))
        with buf.snapshot():
            buf.prune(["a"], reason="stale")
            group = buf._st.staged_ids["a"]
            buf._st.staged.clear()  # bypass the grace rule
            buf._st.write_lock.acquire()
            try:
                buf._pub.remove_groups([group])
            finally:
                buf._st.write_lock.release()
        assert any("invariant 5" in v for v in buf.violations), buf.violations
