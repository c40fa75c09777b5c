"""The checker must be able to fail: break the engine on purpose, get caught.

Each break is a monkeypatch that reintroduces one of the failures the seeds
describe (a grace wait skipped, a reference check skipped, a tombstone
dropped, a snapshot that reads the head, a refused edit that applies anyway,
...). For each one:

* a small deterministic scenario passes the checker on the real engine and
  fails it, with the right anomaly kind, on the broken one;
* for the five main breaks, the seeded simulation (``test_simulation``) finds
  it within a few hundred schedules on both backends, so its "0 anomalies" in
  the default run means something.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

import quiesce._core.edit as core
import quiesce._core.publish as publish
from quiesce import (
    Buffer,
    EditPlan,
    Entry,
    Kind,
    LogWriteError,
    Policy,
    Prune,
    ReadmissionRefused,
    Rewrite,
    Snapshot,
    SnapshotReleased,
    UnknownEntry,
)
from quiesce._core.draft import Draft
from quiesce._core.edit import Editor
from quiesce._core.pins import PinRegistry
from quiesce._core.publish import Publisher
from quiesce._core.version import Tombs
from quiesce.testing import AnomalyKind, Recorder, check_history
from test_simulation import FlakySink, run_schedule

# ---------------------------------------------------------------------------
# The breaks


def skip_grace_wait(mp: pytest.MonkeyPatch) -> None:
    """Every staged removal is due at once: nobody holds it back."""
    mp.setattr(PinRegistry, "oldest_locked", lambda self: None)
    mp.setattr(Buffer, "has_due", lambda self: bool(self._st.staged))


def skip_reference_check(mp: pytest.MonkeyPatch) -> None:
    """Seed 000's dangling justification: no survivor is asked about."""
    for module in (core, publish):  # prune decides, the removal re-validates
        mp.setattr(module, "cascade", lambda head, removal, refused: [])


def drop_tombstones(mp: pytest.MonkeyPatch) -> None:
    """Removals leave no tombstone in the window."""
    mp.setattr(Tombs, "add", lambda self, tomb: self)


def read_head(mp: pytest.MonkeyPatch) -> None:
    """Snapshots read whatever the head is now, not the version they pinned."""

    def _v(self: Snapshot, entry_id: object = None) -> Any:
        if self._version is None:
            raise SnapshotReleased("released")
        return self._registry.st.head

    mp.setattr(Snapshot, "_v", _v)
    mp.setattr(Snapshot, "_v_for", _v)


def refused_edit_applies(mp: pytest.MonkeyPatch) -> None:
    """A refused plan's rewrites are published anyway (then reported refused)."""
    original = Editor._refuse_edit

    def leaky(self: Editor, plan: EditPlan, refusals: Any, why: Any) -> Any:
        head = self._st.head
        draft = Draft(head)
        n = head.number + 1
        changed = False
        for op in plan.ops:
            if isinstance(op, Rewrite) and op.id in head.live:
                draft.replace(head.live[op.id].entry.replace(body=op.body), n)
                changed = True
        if changed:
            self._st.head = draft.finish(n)
        return original(self, plan, refusals, why)

    mp.setattr(Editor, "_refuse_edit", leaky)


def rewrite_drops_mark(mp: pytest.MonkeyPatch) -> None:
    """A rewrite forgets the entry's stale mark."""
    original = Draft.replace

    def replace(self: Any, entry: Entry, number: int) -> None:
        original(self, entry, number)
        if entry.id in self.marks:
            del self.marks[entry.id]

    mp.setattr(Draft, "replace", replace)


def no_protection(mp: pytest.MonkeyPatch) -> None:
    """The policy protects nothing (seed 000's condition 4 missed)."""
    mp.setattr(Policy, "protection", lambda self, entry: None)
    mp.setattr(Policy, "is_immutable", lambda self, entry: False)


def unpin_only_on_success(mp: pytest.MonkeyPatch) -> None:
    """A snapshot that unpins on the happy path only: cancellation leaks it."""
    original = Snapshot.__exit__

    def __exit__(self: Snapshot, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            original(self, exc_type, exc, tb)

    mp.setattr(Snapshot, "__exit__", __exit__)


def publish_before_durable(mp: pytest.MonkeyPatch) -> None:
    """A removal is published first and made durable afterwards (no intent
    record, no commit before the head moves)."""

    def apply(self: Publisher, *, blocking: bool) -> Any:
        with self._st.write_lock:
            groups = self._grace.pop_due()
            removed = self.remove_groups(groups, -1) if groups else ()
        with contextlib.suppress(LogWriteError):
            self.flush()
        return removed

    mp.setattr(Publisher, "apply_due_durable", apply)


def launder_refusals(mp: pytest.MonkeyPatch) -> None:
    """Each refused edit erases the earlier refusals from the log (seed 002's
    laundered provenance: the log of prunings rewritten)."""
    original = Editor._refuse_edit

    def forget(self: Editor, plan: EditPlan, refusals: Any, why: Any) -> Any:
        records = self._st.records
        records[:] = [r for r in self._st.log_view if r.outcome != "refused"]
        for seq, r in enumerate(records):
            records[seq] = r._replace(seq=seq)
        return original(self, plan, refusals, why)

    mp.setattr(Editor, "_refuse_edit", forget)


def unlogged_refusal(mp: pytest.MonkeyPatch) -> None:
    """A refused edit is escalated but never logged."""
    original = Editor._refuse_edit

    def forget(self: Editor, plan: EditPlan, refusals: Any, why: Any) -> Any:
        report = original(self, plan, refusals, why)
        self._st.records.pop()
        return report

    mp.setattr(Editor, "_refuse_edit", forget)


def garbage_resolve(mp: pytest.MonkeyPatch) -> None:
    """Lookups go through an unversioned id → Entry cache that outlives
    removals."""
    cache: dict[str, Entry] = {}
    original_append = Buffer.append

    def append(self: Buffer, entry: Entry, **kw: Any) -> int:
        n = original_append(self, entry, **kw)
        cache[entry.id] = entry
        return n

    def resolve(self: Snapshot, entry_id: str) -> Any:
        self._v()
        got = cache.get(entry_id)
        if got is not None:
            return got
        raise UnknownEntry(entry_id)

    mp.setattr(Buffer, "append", append)
    mp.setattr(Snapshot, "resolve", resolve)


def reuse_last_pin(mp: pytest.MonkeyPatch) -> None:
    """A "snapshot cache": a new reader reuses the version the previous reader
    pinned instead of pinning the head."""
    last: dict[int, Any] = {}
    real: dict[int, Any] = {}
    enter, leave = Snapshot.__enter__, Snapshot.__exit__

    def __enter__(self: Snapshot) -> Snapshot:
        enter(self)
        cached = last.get(id(self._registry))
        if cached is not None:
            real[id(self)] = self._version
            self._version = cached
        else:
            last[id(self._registry)] = self._version
        return self

    def __exit__(self: Snapshot, *exc: Any) -> None:
        if id(self) in real:
            self._version = real.pop(id(self))
        leave(self, *exc)

    mp.setattr(Snapshot, "__enter__", __enter__)
    mp.setattr(Snapshot, "__exit__", __exit__)


def ignore_base(mp: pytest.MonkeyPatch) -> None:
    """The optimistic check is skipped: a plan's ``base`` is ignored."""
    original = Buffer.edit

    def edit(self: Buffer, plan: EditPlan) -> Any:
        blind = EditPlan(
            plan.ops,
            reason=plan.reason,
            rationale=plan.rationale,
            actor=plan.actor,
            turn=plan.turn,
            override=plan.override,
        )
        return original(self, blind)

    mp.setattr(Buffer, "edit", edit)


def split_edit(mp: pytest.MonkeyPatch) -> None:
    """An edit with several rewrites publishes the first one on its own."""
    original = Editor._apply_edit

    def two_step(self: Editor, plan: EditPlan, head: Any, rewrites: Any, *rest: Any) -> Any:
        if len(rewrites) < 2:
            return original(self, plan, head, rewrites, *rest)
        draft = Draft(head)
        draft.replace(rewrites[0][1], head.number + 1)
        half = draft.finish(head.number + 1)
        self._st.head = half
        return original(self, plan, half, rewrites, *rest)

    mp.setattr(Editor, "_apply_edit", two_step)


def forget_tombstoned_content(mp: pytest.MonkeyPatch) -> None:
    """Re-admission checks find nothing: pruned content comes straight back."""
    mp.setattr(Tombs, "matching", lambda self, content_hash, key: None)
    # the append path's one-pass check (the id still found, the content not)
    mp.setattr(Tombs, "admission", lambda self, i, content_hash, key: (self.get(i), None))


# ---------------------------------------------------------------------------
# Scenarios: tiny, deterministic, sync (the core needs no loop)


def e(
    i: str, body: str | None = None, refs: tuple[str, ...] = (), kind: Kind = Kind.REASONING
) -> Entry:
    return Entry(i, kind, body or f"body of {i}", refs)


def early_removal_scenario(rec: Recorder) -> None:
    rec.append(e("a"))
    rec.append(e("b"))
    with rec.snapshot():
        rec.prune(["a"], reason="stale")


def dangling_scenario(rec: Recorder) -> None:
    rec.append(e("a"))
    rec.append(e("b", refs=("a",)))
    rec.prune(["a"], reason="stale")


def removal_scenario(rec: Recorder) -> None:
    rec.append(e("a"))
    rec.append(e("b"))
    rec.prune(["a"], reason="stale")


def torn_read_scenario(rec: Recorder) -> None:
    rec.append(e("a"))
    with rec.snapshot():
        rec.append(e("b"))


def refused_edit_scenario(rec: Recorder) -> None:
    rec.append(e("a"))
    rec.append(e("why", kind=Kind.RATIONALE))
    # The plan rewrites its own rationale: refused (RATIONALE).
    report = rec.edit(
        EditPlan([Rewrite("a", "shorter"), Rewrite("why", "gone")], reason="r", rationale=["why"])
    )
    assert not report.applied


def lost_mark_scenario(rec: Recorder) -> None:
    rec.append(e("a"))
    rec.mark_stale("a", "old")
    rec.edit(EditPlan([Rewrite("a", "new text")], reason="tidy"))


def protected_scenario(rec: Recorder) -> None:
    rec.append(e("rule", "do not modify /etc", kind=Kind.PROHIBITION))
    rec.append(e("c", "answer in English", kind=Kind.CONSTRAINT))
    rec.prune(["rule"], reason="uncited")
    rec.edit(EditPlan([Rewrite("c", "English")], reason="shorter"))


def leak_scenario(rec: Recorder) -> None:
    rec.append(e("a"))
    try:
        with rec.snapshot():
            raise KeyError("reader failed")
    except KeyError:
        pass


def laundering_scenario(rec: Recorder) -> None:
    rec.append(e("a"))
    rec.append(e("c", "answer in English", kind=Kind.CONSTRAINT))
    rec.edit(EditPlan([Prune("c")], reason="uncited"))  # refused: IMMUTABLE
    rec.edit(EditPlan([Prune("c")], reason="still uncited"))


def stale_pin_scenario(rec: Recorder) -> None:
    rec.append(e("a"))
    with rec.snapshot():
        pass
    rec.append(e("b"))
    with rec.snapshot():
        pass


def lost_update_scenario(rec: Recorder) -> None:
    rec.append(e("a"))
    base = rec.version
    assert rec.edit(EditPlan([Rewrite("a", "first rewrite")], reason="one")).applied
    report = rec.edit(EditPlan([Rewrite("a", "planned on stale read")], reason="two", base=base))
    assert report.applied or report.refusals


def batch_scenario(rec: Recorder) -> None:
    rec.append(e("a"))
    rec.append(e("b"))
    rec.edit(EditPlan([Rewrite("a", "A2"), Rewrite("b", "B2")], reason="both or none"))


def readmission_scenario(rec: Recorder) -> None:
    rec.append(Entry("dump", Kind.TOOL_OUTPUT, "kubectl describe pod web-1"))
    rec.append(e("keep"))
    rec.prune(["dump"], reason="stale dump")
    try:
        rec.append(Entry("dump2", Kind.TOOL_OUTPUT, "kubectl describe pod web-1"))
    except ReadmissionRefused:
        pass


def garbage_scenario(rec: Recorder) -> None:
    rec.append(e("a"))
    rec.append(e("b"))
    rec.prune(["a"], reason="stale")
    with rec.snapshot() as snap:
        snap.resolve("a")


CASES: list[tuple[str, Callable[[pytest.MonkeyPatch], None], Callable[[Recorder], None], str]] = [
    ("skip the grace wait", skip_grace_wait, early_removal_scenario, AnomalyKind.EARLY_REMOVAL),
    (
        "skip the reference check",
        skip_reference_check,
        dangling_scenario,
        AnomalyKind.DANGLING_REFERENCE,
    ),
    ("drop a tombstone", drop_tombstones, removal_scenario, AnomalyKind.MISSING_TOMBSTONE),
    ("snapshots read the head", read_head, torn_read_scenario, AnomalyKind.G_SINGLE),
    ("a refused edit applies", refused_edit_applies, refused_edit_scenario, AnomalyKind.G1A),
    ("a rewrite drops the mark", rewrite_drops_mark, lost_mark_scenario, AnomalyKind.LOST_MARK),
    ("nothing is protected", no_protection, protected_scenario, AnomalyKind.PROTECTED_REMOVED),
    ("nothing is immutable", no_protection, protected_scenario, AnomalyKind.IMMUTABLE_CHANGED),
    ("unpin only on success", unpin_only_on_success, leak_scenario, AnomalyKind.PIN_LEAK),
    (
        "refusals laundered from the log",
        launder_refusals,
        laundering_scenario,
        AnomalyKind.LOG_REWRITTEN,
    ),
    ("a refusal is not logged", unlogged_refusal, laundering_scenario, AnomalyKind.LOG_MISMATCH),
    ("an unversioned lookup cache", garbage_resolve, garbage_scenario, AnomalyKind.GARBAGE_READ),
    ("a reader reuses an old pin", reuse_last_pin, stale_pin_scenario, AnomalyKind.STALE_SNAPSHOT),
    ("the plan's base is ignored", ignore_base, lost_update_scenario, AnomalyKind.LOST_UPDATE),
    ("an edit is published in two steps", split_edit, batch_scenario, AnomalyKind.G1B),
    (
        "tombstoned content comes back",
        forget_tombstoned_content,
        readmission_scenario,
        AnomalyKind.SILENT_READMISSION,
    ),
]


def _record(scenario: Callable[[Recorder], None], buf: Buffer | None = None) -> list[Any]:
    rec = Recorder(buf if buf is not None else Buffer())
    scenario(rec)
    return check_history(rec.history())


@pytest.mark.parametrize(("name", "brk", "scenario", "kind"), CASES, ids=[c[0] for c in CASES])
def test_break_is_caught(
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    brk: Callable[[pytest.MonkeyPatch], None],
    scenario: Callable[[Recorder], None],
    kind: str,
) -> None:
    """The scenario is clean on the real engine and the break is reported with
    the right anomaly kind."""
    assert _record(scenario) == []
    with monkeypatch.context() as mp:
        brk(mp)
        found = _record(scenario)
    kinds = {a.kind for a in found}
    assert kind in kinds, f"{name}: expected {kind}, got {[str(a) for a in found]}"


def test_undurable_removal_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """A removal published before its tombstone reached the sink is reported
    (``undurable-removal``), with the sink's durable records as the witness."""
    import random

    def run() -> list[Any]:
        sink = FlakySink(random.Random(0), 0.0)
        rec = Recorder(Buffer(log=sink), durable=sink.durable)
        removal_scenario(rec)
        return check_history(rec.history())

    assert run() == []
    with monkeypatch.context() as mp:
        publish_before_durable(mp)
        kinds = {a.kind for a in run()}
    assert AnomalyKind.UNDURABLE_REMOVAL in kinds


def test_intermediate_read_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """An edit published in two steps, with a reader (a worker thread) pinning
    the state in between, is an intermediate read (``G1b``)."""
    original = Editor._apply_edit
    rec_box: list[Recorder] = []

    def two_step(self: Editor, plan: EditPlan, head: Any, rewrites: Any, *rest: Any) -> Any:
        if len(rewrites) < 2:
            return original(self, plan, head, rewrites, *rest)
        draft = Draft(head)
        _old, new = rewrites[0]
        draft.replace(new, head.number + 1)
        half = draft.finish(head.number + 1)
        self._st.head = half  # the first rewrite alone, unlogged

        def reader() -> None:
            with rec_box[0].snapshot():
                pass

        t = threading.Thread(target=reader)
        t.start()
        t.join()
        return original(self, plan, half, rewrites, *rest)

    def scenario(rec: Recorder) -> None:
        rec_box[:] = [rec]
        rec.append(e("a"))
        rec.append(e("b"))
        rec.edit(EditPlan([Rewrite("a", "A2"), Rewrite("b", "B2")], reason="both or none"))

    assert _record(scenario) == []
    with monkeypatch.context() as mp:
        mp.setattr(Editor, "_apply_edit", two_step)
        kinds = {a.kind for a in _record(scenario)}
    assert AnomalyKind.G1B in kinds


def test_torn_batch_read_is_named_g1b() -> None:
    """A read that mixes the states before and after one version's batch is
    classified G1b, not merely G-single."""
    from quiesce.testing import History, Read, SnapshotEvent

    rec = Recorder(Buffer())
    rec.append(e("a"))
    rec.append(e("b"))
    rec.edit(EditPlan([Rewrite("a", "A2"), Rewrite("b", "B2")], reason="batch"))
    h = rec.history()
    before, after = h.publications[1].version, h.publications[2].version
    torn = (after.live["a"].entry, before.live["b"].entry)
    # A reader that entered while ``before`` was the head read a torn state.
    at = h.publications[2].seq - 1
    read = Read(at, before.number, torn, before.marks, before.tombs.by_id)
    snap = SnapshotEvent(0, "reader", at, before, [read], at, True)
    forged = History(**{**{f: getattr(h, f) for f in h.__dataclass_fields__}, "snapshots": (snap,)})
    kinds = [a.kind for a in check_history(forged)]
    assert kinds == [AnomalyKind.G1B]


def test_drained_removal_is_not_the_callers_effect() -> None:
    """No false alarm: a call that fails (or is refused) while holding the
    write lock still applies removals an unpin left to it (the writer drains
    what a reader in another thread could not); that batch is not the
    failed call's effect (no G1a)."""
    buf = Buffer()
    rec = Recorder(buf)
    rec.append(e("a"))
    rec.append(e("b"))
    snap = rec.snapshot()
    snap.__enter__()
    assert rec.prune(["a"], reason="stale")["a"].status.name == "DEFERRED"
    buf._st.write_lock.acquire()  # a writer is busy...
    try:
        # ...when the last blocking reader leaves, in another thread: it
        # cannot take the lock, so it leaves the removal to the writer.
        t = threading.Thread(target=snap.__exit__, args=(None, None, None))
        t.start()
        t.join()
        assert "a" in buf.head().live
        with pytest.raises(UnknownEntry):
            rec.mark_stale("never-existed", "stale")  # fails inside the outer write
        assert "a" in buf.head().live  # never applied in the middle of a write
    finally:
        buf._pub.release()  # the outer writer's release drains what was left to it
    assert "a" in buf.tombstones
    assert check_history(rec.history()) == []


# ---------------------------------------------------------------------------
# The simulation finds the main breaks


@contextmanager
def _broken(brk: Callable[[pytest.MonkeyPatch], None]) -> Iterator[None]:
    mp = pytest.MonkeyPatch()
    try:
        brk(mp)
        yield
    finally:
        mp.undo()


SIM_CASES = [
    ("tombstoned content comes back", forget_tombstoned_content, AnomalyKind.SILENT_READMISSION),
    ("the plan's base is ignored", ignore_base, AnomalyKind.LOST_UPDATE),
    ("an edit is published in two steps", split_edit, AnomalyKind.G1B),
    ("a reader reuses an old pin", reuse_last_pin, AnomalyKind.STALE_SNAPSHOT),
    ("skip the grace wait", skip_grace_wait, AnomalyKind.EARLY_REMOVAL),
    ("skip the reference check", skip_reference_check, AnomalyKind.DANGLING_REFERENCE),
    ("drop a tombstone", drop_tombstones, AnomalyKind.MISSING_TOMBSTONE),
    ("snapshots read the head", read_head, AnomalyKind.G_SINGLE),
    ("a refused edit applies", refused_edit_applies, AnomalyKind.G1A),
]


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@pytest.mark.parametrize(("name", "brk", "kind"), SIM_CASES, ids=[c[0] for c in SIM_CASES])
def test_simulation_finds_break(
    backend: str, name: str, brk: Callable[[pytest.MonkeyPatch], None], kind: str
) -> None:
    """Seeded schedules on the broken engine report the break within 300
    seeds (usually within the first few)."""
    with _broken(brk):
        for seed in range(300):
            out = run_schedule(seed, backend)
            if kind in {a.kind for a in out.anomalies}:
                return
    pytest.fail(f"{name}: no {kind} in 300 schedules on {backend}")
