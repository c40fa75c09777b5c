"""The model-pruner interface: ``Pruner``, ``run_pruner`` and ``HeuristicPruner``."""

from __future__ import annotations

import anyio
import pytest

import quiesce
from quiesce import (
    Buffer,
    EditPlan,
    Entry,
    HeuristicPruner,
    InvalidArgument,
    Kind,
    Prune,
    Pruner,
    Refusal,
    Rewrite,
    Snapshot,
    open_buffer,
    run_pruner,
)


def reasoning(i: str, turn: int, words: int = 10, *refs: str) -> Entry:
    return Entry(i, Kind.REASONING, " ".join([f"w{i}"] * words), refs, turn)


class Scripted:
    """A pruner that proposes ``Prune(target)`` and, on the calls listed in
    ``clash_on``, lets ``while_thinking`` change the buffer first."""

    def __init__(self, buf: Buffer, target: str, clash_on: set[int]) -> None:
        self.buf = buf
        self.target = target
        self.clash_on = clash_on
        self.calls = 0
        self.bases: list[int] = []

    async def __call__(self, snap: Snapshot, /) -> EditPlan | None:
        self.calls += 1
        self.bases.append(snap.version)
        await anyio.lowlevel.checkpoint()
        if self.calls in self.clash_on:
            # Another writer changes the entry while the model thinks.
            body = f"{self.target} rewritten during call {self.calls}"
            self.buf.edit(EditPlan([Rewrite(self.target, body)], reason="concurrent writer"))
        return EditPlan([Prune(self.target)], reason="stale", actor="pruner")


class TestRunPruner:
    @pytest.mark.anyio
    async def test_conflict_replans_against_a_fresh_snapshot(self) -> None:
        """A plan refused as CONFLICT is re-planned from a fresh snapshot and
        then applied; each attempt's base is the version it pinned."""
        async with open_buffer() as buf:
            buf.append(reasoning("a", 1))
            pruner = Scripted(buf, "a", clash_on={1})
            report = await run_pruner(buf, pruner)
            assert report is not None and report.applied
            assert pruner.calls == 2
            assert pruner.bases[1] > pruner.bases[0]
            await buf.quiesce()
            assert "a" in buf.tombstones
            refused = [r for r in buf.log if r.op == "edit" and r.outcome == "refused"]
            assert len(refused) == 1 and refused[0].detail["refusals"] == ["conflict"]
            assert buf.stats().pinned == 0

    @pytest.mark.anyio
    async def test_conflict_retries_are_bounded(self) -> None:
        """With a conflict on every attempt, the pruner runs 1 + max_retries
        times and the last refused report is returned."""
        async with open_buffer() as buf:
            buf.append(reasoning("a", 1))
            pruner = Scripted(buf, "a", clash_on={1, 2, 3, 4, 5})
            report = await run_pruner(buf, pruner, max_retries=2)
            assert pruner.calls == 3
            assert report is not None and not report.applied
            assert report.refusals == (Refusal.CONFLICT,)
            assert "a" in buf.head().live

    @pytest.mark.anyio
    async def test_conflict_from_a_concurrent_task(self) -> None:
        """The writer is another task that runs while the model awaits."""
        async with open_buffer() as buf:
            buf.append(reasoning("a", 1))
            thinking = anyio.Event()
            written = anyio.Event()
            calls = 0

            async def model(snap: Snapshot, /) -> EditPlan | None:
                nonlocal calls
                calls += 1
                if calls == 1:
                    thinking.set()
                    await written.wait()
                    assert snap["a"].body.startswith("wa")  # the pinned view is unchanged
                return EditPlan([Prune("a")], reason="stale")

            async def writer() -> None:
                await thinking.wait()
                buf.edit(EditPlan([Rewrite("a", "a, rewritten")], reason="writer"))
                written.set()

            async with anyio.create_task_group() as tg:
                tg.start_soon(writer)
                report = await run_pruner(buf, model)
            assert calls == 2
            assert report is not None and report.applied

    @pytest.mark.anyio
    async def test_other_refusals_are_final(self) -> None:
        """A refusal other than CONFLICT is returned at once (it is escalated)."""
        async with open_buffer() as buf:
            buf.append(Entry("c", Kind.CONSTRAINT, "do not modify files under /etc"))
            calls = 0

            async def model(snap: Snapshot, /) -> EditPlan | None:
                nonlocal calls
                calls += 1
                return EditPlan([Prune("c")], reason="low relevance")

            report = await run_pruner(buf, model)
            assert calls == 1
            assert report is not None and report.refusals == (Refusal.IMMUTABLE,)
            assert report.escalation is not None

    @pytest.mark.anyio
    async def test_nothing_to_prune(self) -> None:
        """A model that proposes nothing makes ``run_pruner`` return None."""
        buf = Buffer()

        async def model(snap: Snapshot, /) -> EditPlan | None:
            return None

        assert await run_pruner(buf, model) is None
        assert buf.version == 0

    @pytest.mark.anyio
    async def test_cancelled_model_unpins_and_submits_nothing(self) -> None:
        """Cancelled while the model thinks: no pin remains, nothing changed."""
        buf = Buffer()
        buf.append(reasoning("a", 1))

        async def model(snap: Snapshot, /) -> EditPlan | None:
            await anyio.sleep_forever()
            raise AssertionError("unreachable")

        with anyio.move_on_after(0.01):
            await run_pruner(buf, model)
        assert buf.stats().pinned == 0
        assert buf.version == 1

    @pytest.mark.anyio
    async def test_bad_arguments(self) -> None:
        buf = Buffer()
        pruner = HeuristicPruner()
        with pytest.raises(InvalidArgument, match=r"^max_retries must be >= 0, got -1$"):
            await run_pruner(buf, pruner, max_retries=-1)

    def test_protocol(self) -> None:
        """HeuristicPruner is a Pruner; the names are exported from quiesce."""
        assert isinstance(HeuristicPruner(), Pruner)
        assert quiesce.Pruner is Pruner
        assert quiesce.run_pruner is run_pruner


class TestHeuristicPruner:
    def test_never_proposes_protected_or_immutable(self) -> None:
        """Constraints, instructions, prohibitions and negative results are
        never proposed, however old and large."""
        entries = [
            Entry("c", Kind.CONSTRAINT, "x " * 500, turn=0),
            Entry("i", Kind.INSTRUCTION, "y " * 500, turn=0),
            Entry("p", Kind.PROHIBITION, "z " * 500, turn=0),
            Entry("n", Kind.REASONING, "attempt 2 timed out " * 100, turn=0),
            reasoning("r", 0, 500),
            reasoning("late", 20, 5),
        ]
        plan = HeuristicPruner(budget=100, min_age=5).propose(entries)
        assert plan is not None
        assert [op.id for op in plan.ops if isinstance(op, Prune)] == ["r"]

    def test_tool_pairs_go_together(self) -> None:
        """Choosing a tool output brings its call, and a call brings its outputs."""
        entries = [
            Entry("call", Kind.TOOL_CALL, "kubectl describe", turn=0),
            Entry("out", Kind.TOOL_OUTPUT, "dump " * 300, refs=("call",), turn=0),
            reasoning("r", 20, 5),
        ]
        plan = HeuristicPruner(budget=50, min_age=5).propose(entries)
        assert plan is not None
        assert sorted(op.id for op in plan.ops if isinstance(op, Prune)) == ["call", "out"]

    def test_a_group_with_a_negative_member_is_kept(self) -> None:
        """A call whose result is a negative result stays, with its result."""
        entries = [
            Entry("call", Kind.TOOL_CALL, "deploy attempt 2", turn=0),
            Entry("out", Kind.TOOL_OUTPUT, "timed out", refs=("call",), turn=0),
            reasoning("r", 0, 300),
            reasoning("late", 20, 5),
        ]
        plan = HeuristicPruner(budget=50, min_age=5).propose(entries)
        assert plan is not None
        assert [op.id for op in plan.ops if isinstance(op, Prune)] == ["r"]

    def test_cited_entries_go_with_their_citers_or_not_at_all(self) -> None:
        """An old entry cited by a young one is kept."""
        entries = [reasoning("old", 0, 300), reasoning("young", 19, 5, "old"), reasoning("z", 20)]
        assert HeuristicPruner(budget=50, min_age=5).propose(entries) is None

    def test_budget_and_target(self) -> None:
        """Over budget, the oldest groups go until the total is at most the target."""
        entries = [reasoning(f"e{t}", t, 100) for t in range(10)]
        plan = HeuristicPruner(budget=700, target=500, min_age=0).propose(entries)
        assert plan is not None
        assert [op.id for op in plan.ops if isinstance(op, Prune)] == [f"e{t}" for t in range(5)]
        assert HeuristicPruner(budget=1000, min_age=0).propose(entries) is None

    def test_stale_entries_are_proposed_under_budget(self) -> None:
        """A marked entry old enough is proposed even under budget."""
        b = Buffer()
        b.append(reasoning("a", 0))
        b.append(reasoning("b", 5))
        b.mark_stale("a", "superseded")
        with b.snapshot() as snap:
            plan = HeuristicPruner(budget=10_000, stale_age=2).propose(snap.entries(), snap.marks)
        assert plan is not None and [op.id for op in plan.ops if isinstance(op, Prune)] == ["a"]
        assert plan.reason == "stale"

    def test_pluggable_token_counter(self) -> None:
        """The budget is measured with the given counter."""
        entries = [reasoning("a", 0, 10), reasoning("b", 10, 10)]  # 20 words, 58 chars
        by_chars = HeuristicPruner(budget=50, min_age=5, count_tokens=len)
        by_words = HeuristicPruner(budget=50, min_age=5)
        assert by_chars.propose(entries) is not None
        assert by_words.propose(entries) is None

    @pytest.mark.anyio
    async def test_applied_through_run_pruner(self) -> None:
        """End to end: the buffer accepts the heuristic's plan."""
        async with open_buffer() as buf:
            for t in range(10):
                buf.append(reasoning(f"e{t}", t, 100))
            report = await run_pruner(buf, HeuristicPruner(budget=500, min_age=3))
            assert report is not None and report.applied
            await buf.quiesce()
            assert len(buf.tombstones) == len(report.removed) + len(report.deferred) > 0

    def test_bad_arguments(self) -> None:
        with pytest.raises(InvalidArgument, match=r"^budget must be an int >= 0, got -1$"):
            HeuristicPruner(budget=-1)
        with pytest.raises(InvalidArgument, match=r"^target must be an int in \[0, budget\]"):
            HeuristicPruner(budget=10, target=20)


class Proposes:
    """A pruner that proposes ``ops`` as one plan, every time it is asked."""

    def __init__(self, *ops: Prune | Rewrite) -> None:
        self.ops = ops
        self.calls = 0

    async def __call__(self, snap: Snapshot, /) -> EditPlan | None:
        self.calls += 1
        await anyio.lowlevel.checkpoint()
        return EditPlan(list(self.ops), reason="old", actor="pruner")


def refused_edits(buf: Buffer) -> list[object]:
    return [r for r in buf.log if r.op == "edit" and r.outcome == "refused"]


class TestOpenEntries:
    """Nothing applies to an open (streaming) entry, so the pruner never
    proposes one and ``run_pruner`` never submits an op touching one: no
    ``CONFLICT`` refusal, no escalation, the rest of the plan applies."""

    @pytest.mark.anyio
    async def test_heuristic_pruner_skips_an_open_stale_entry(self) -> None:
        """An old, marked entry still streaming is not proposed; the other
        stale entry is pruned; nothing is refused or escalated."""
        async with open_buffer() as buf:
            buf.append(reasoning("a", 1))
            w = buf.open_stream("s", Kind.REASONING, turn=1)
            w.write("streaming text that is old and stale")
            buf.append(reasoning("b", 9))
            buf.mark_stale("a", "superseded")
            buf.mark_stale("s", "superseded")
            pruner = HeuristicPruner(stale_age=2)
            with buf.snapshot() as snap:
                plan = await pruner(snap)
            assert plan is not None and [op.id for op in plan.ops] == ["a"]  # type: ignore[union-attr]
            report = await run_pruner(buf, pruner)
            assert report is not None and report.applied
            await buf.quiesce()
            assert "a" in buf.tombstones and "s" not in buf.tombstones
            assert refused_edits(buf) == [] and buf.stats().escalations == 0
            with buf.snapshot() as snap:
                assert snap["s"].streaming and snap["s"].body.startswith("streaming")
            w.close()
            report = await run_pruner(buf, pruner)  # closed: now it may go
            assert report is not None and report.applied
            await buf.quiesce()
            assert "s" in buf.tombstones

    @pytest.mark.anyio
    async def test_run_pruner_leaves_out_ops_on_open_entries(self) -> None:
        """A model's plan that prunes an open entry and a closed one is
        submitted without the open one's op, once, and applies."""
        async with open_buffer() as buf:
            buf.append(reasoning("a", 1))
            w = buf.open_stream("s", Kind.REASONING, turn=1)
            w.write("half an answer")
            pruner = Proposes(Prune("s"), Prune("a"))
            report = await run_pruner(buf, pruner)
            assert report is not None and report.applied and report.refusals == ()
            assert pruner.calls == 1
            await buf.quiesce()
            assert "a" in buf.tombstones and "s" not in buf.tombstones
            assert refused_edits(buf) == [] and buf.stats().escalations == 0
            w.abort("cut")

    @pytest.mark.anyio
    async def test_a_plan_only_on_open_entries_is_not_submitted(self) -> None:
        """A plan whose every op touches an open entry (a prune of what an
        open entry cites included) is not submitted: ``None``, the version
        unchanged, nothing logged."""
        async with open_buffer() as buf:
            buf.append(reasoning("a", 1))
            w = buf.open_stream("s", Kind.REASONING, refs=("a",), turn=1)
            w.write("an answer citing a")
            version, records = buf.version, len(buf.log)
            pruner = Proposes(Rewrite("s", "shorter"), Prune("a"))
            assert await run_pruner(buf, pruner) is None
            assert (buf.version, len(buf.log)) == (version, records)
            assert buf.stats().escalations == 0
            w.close()
            report = await run_pruner(buf, Proposes(Prune("s"), Prune("a")))
            assert report is not None and report.applied
