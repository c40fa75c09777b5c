"""``Buffer.edit``: seed 002's all-or-nothing self-edit with refusal and escalation."""

from __future__ import annotations

import pytest

from conftest import ListSink, entry, fill, reasoning, window
from quiesce import (
    Buffer,
    DanglingReference,
    DuplicateEntry,
    EditPlan,
    EditReport,
    Escalation,
    EscalationKind,
    InvalidArgument,
    Kind,
    Move,
    Override,
    Prune,
    Refusal,
    Rewrite,
    Summarize,
)


def refused(buf: Buffer, plan: EditPlan) -> EditReport:
    """Apply a plan expected to be refused; assert that nothing in the window
    changed, the version did not move, and exactly one escalation was emitted
    (and logged) for exactly this plan."""
    buf.drain_escalations()
    with buf.snapshot() as before:
        entries, marks = list(before), dict(before.marks)
    v, n = buf.version, len(buf.log)
    report = buf.edit(plan)
    assert not report.applied
    assert report.refusals
    assert buf.version == v
    with buf.snapshot() as after:
        assert (list(after), dict(after.marks)) == (entries, marks)
    escalations = buf.drain_escalations()
    assert escalations == [report.escalation]
    esc = escalations[0]
    assert isinstance(esc, Escalation)
    assert esc.kind is EscalationKind.REFUSED_EDIT
    assert esc.plan is plan
    assert esc.refusals == report.refusals
    assert len(buf.log) == n + 1
    rec = buf.log[-1]
    assert (rec.op, rec.outcome, rec.version) == ("edit", "refused", None)
    assert rec.detail["refusals"] == [r.value for r in report.refusals]
    return report


class TestPruneOp:
    def test_prune_op_removes_with_a_tombstone(self, buf: Buffer) -> None:
        """With no reader, Prune(id) removes the entry at once, tombstoned with
        the plan's reason, turn and actor."""
        fill(buf, reasoning("a"), reasoning("b"))
        report = buf.edit(EditPlan([Prune("a")], reason="irrelevant", actor="editor", turn=41))
        assert report == EditReport(True, (), None, buf.version, ("a",), ())
        tomb = buf.tombstones["a"]
        assert (tomb.reason, tomb.actor, tomb.turn) == ("irrelevant", "editor", 41)
        assert window(buf) == ["b"]

    def test_prune_op_is_deferred_by_an_earlier_reader(self, buf: Buffer) -> None:
        """A reader pinned before the plan defers the removal to its grace point."""
        fill(buf, reasoning("a"), reasoning("b"))
        with buf.snapshot() as snap:
            report = buf.edit(EditPlan([Prune("a")], reason="irrelevant"))
            assert (report.applied, report.removed, report.deferred) == (True, (), ("a",))
            assert snap["a"] == reasoning("a")
            assert "a" in window(buf)
        assert window(buf) == ["b"]
        assert "a" in buf.tombstones


class TestRewrite:
    def test_rewrite_replaces_body_and_keeps_refs(self, buf: Buffer) -> None:
        """Rewrite(id, body) changes the body and keeps the refs (refs=None)."""
        fill(buf, reasoning("a"), reasoning("b", "a"))
        assert buf.edit(EditPlan([Rewrite("b", "shorter")], reason="compact")).applied
        with buf.snapshot() as snap:
            assert (snap["b"].body, snap["b"].refs) == ("shorter", ("a",))
            assert snap["b"].content_hash != reasoning("b", "a").content_hash

    def test_rewrite_dropping_a_ref_lets_the_same_plan_prune_it(self, buf: Buffer) -> None:
        """A survivor rewritten in the same plan to no longer cite t lets t be
        pruned (seed 000: rewrite the referencing trace in the same operation)."""
        fill(buf, reasoning("t"), reasoning("v", "t"))
        report = buf.edit(
            EditPlan([Prune("t"), Rewrite("v", "self-contained", refs=())], reason="x")
        )
        assert report.applied
        assert window(buf) == ["v"]
        with buf.snapshot() as snap:
            assert snap["v"].refs == ()

    def test_rewrite_to_an_unknown_ref_raises(self, buf: Buffer) -> None:
        """New refs must exist: DanglingReference, nothing changes."""
        fill(buf, reasoning("a"))
        v = buf.version
        with pytest.raises(DanglingReference, match=r"^'a' would cite unknown entry 'zz'$"):
            buf.edit(EditPlan([Rewrite("a", "x", refs=("zz",))], reason="x"))
        assert buf.version == v

    def test_rewrite_to_a_tombstoned_ref_raises_with_the_tombstone(self, buf: Buffer) -> None:
        """A rewrite that would cite a removed entry raises DanglingReference
        carrying its tombstone; nothing changes."""
        fill(buf, reasoning("gone"), reasoning("a"))
        buf.prune(["gone"], reason="stale")
        v = buf.version
        with pytest.raises(
            DanglingReference, match=r"^'a' would cite 'gone', pruned at version \d+$"
        ) as info:
            buf.edit(EditPlan([Rewrite("a", "x", refs=("gone",))], reason="x"))
        assert info.value.tombstone == buf.tombstones["gone"]
        assert buf.version == v

    def test_rewrite_of_an_unknown_id_is_refused(self, buf: Buffer) -> None:
        """Rewriting an id that is not live is refused UNKNOWN (nothing to rewrite)."""
        fill(buf, reasoning("a"))
        assert refused(buf, EditPlan([Rewrite("zz", "x")], reason="x")).refusals == (
            Refusal.UNKNOWN,
        )


class TestSummarize:
    def test_summary_takes_the_place_of_the_first_covered_entry(self, buf: Buffer) -> None:
        """The summary sits where the first covered entry (in window order, not
        plan order) was; the covered entries are removed."""
        fill(buf, reasoning("p"), reasoning("a"), reasoning("q"), reasoning("b"), reasoning("z"))
        s = entry("s", Kind.SUMMARY, "a and b found nothing new", ["p"])
        report = buf.edit(EditPlan([Summarize(("b", "a"), s)], reason="compact"))
        assert report.applied
        assert set(report.removed) == {"a", "b"}
        assert window(buf) == ["p", "s", "q", "z"]
        with buf.snapshot() as snap:
            assert snap["s"] == s

    def test_summary_placed_before_deferred_covered_entries(self, buf: Buffer) -> None:
        """While the covered entries wait for a reader, the summary is already
        in place just before them."""
        fill(buf, reasoning("p"), reasoning("a"), reasoning("b"))
        with buf.snapshot():
            s = entry("s", Kind.SUMMARY, "summary")
            report = buf.edit(EditPlan([Summarize(("a", "b"), s)], reason="compact"))
            assert set(report.deferred) == {"a", "b"}
            assert window(buf) == ["p", "s", "a", "b"]
        assert window(buf) == ["p", "s"]

    def test_summary_of_an_immutable_kind_becomes_immutable(self, buf: Buffer) -> None:
        """A summary entry of kind CONSTRAINT is admitted (only from the host,
        with an override: issue 11, defect 9) and from then on is immutable
        like any constraint: it cannot be rewritten."""
        fill(buf, reasoning("a"), reasoning("b"))
        c = entry("c", Kind.CONSTRAINT, "keep answers under 100 words")
        plan = EditPlan(
            [Summarize(("a", "b"), c)],
            reason="consolidate",
            actor="host",
            override=Override("the host consolidates its rules", 0),
        )
        assert buf.edit(plan).applied
        assert refused(buf, EditPlan([Rewrite("c", "shorter")], reason="x")).refusals == (
            Refusal.IMMUTABLE,
        )

    def test_summary_id_in_use_raises_duplicate(self, buf: Buffer) -> None:
        """A summary whose id is live is DuplicateEntry, nothing changes."""
        fill(buf, reasoning("a"), reasoning("b"))
        with pytest.raises(DuplicateEntry, match=r"^summary id 'b' is already used$"):
            buf.edit(EditPlan([Summarize(("a",), entry("b", Kind.SUMMARY))], reason="x"))
        assert window(buf) == ["a", "b"]


class TestMove:
    def test_move_to_the_end(self, buf: Buffer) -> None:
        """Move(id) with before=None moves it to the end of the window."""
        fill(buf, reasoning("a"), reasoning("b"), reasoning("c"))
        assert buf.edit(EditPlan([Move("a")], reason="rerank")).applied
        assert window(buf) == ["b", "c", "a"]

    def test_move_the_only_entry(self, buf: Buffer) -> None:
        """Moving the only entry of a window keeps it, alone, in the window."""
        fill(buf, reasoning("a"))
        assert buf.edit(EditPlan([Move("a")], reason="rerank")).applied
        assert window(buf) == ["a"]
        buf.append(reasoning("b"))
        assert window(buf) == ["a", "b"]

    def test_move_before(self, buf: Buffer) -> None:
        """Move(id, before=x) puts it just before x."""
        fill(buf, reasoning("a"), reasoning("b"), reasoning("c"))
        assert buf.edit(EditPlan([Move("c", before="b")], reason="rerank")).applied
        assert window(buf) == ["a", "c", "b"]
        assert buf.edit(EditPlan([Move("b", before="a")], reason="rerank")).applied
        assert window(buf) == ["b", "a", "c"]

    @pytest.mark.parametrize("kind", [Kind.CONSTRAINT, Kind.INSTRUCTION])
    def test_immutable_entries_can_be_moved(self, buf: Buffer, kind: Kind) -> None:
        """Constraints and instructions may be moved (not paraphrased): bytes kept."""
        c = entry("c", kind, "do not modify files under /etc")
        fill(buf, c, reasoning("a"))
        assert buf.edit(EditPlan([Move("c")], reason="pin to the end")).applied
        assert window(buf) == ["a", "c"]
        with buf.snapshot() as snap:
            assert snap["c"] == c

    def test_many_moves_into_one_gap_keep_the_order(self, buf: Buffer) -> None:
        """Moving entries into the same gap over and over (past float precision,
        which forces a renumbering) keeps exactly the requested order."""
        fill(buf, reasoning("p"), reasoning("a"), reasoning("x"), reasoning("y"))
        for k in range(70):
            mover, target = ("y", "x") if k % 2 == 0 else ("x", "y")
            assert buf.edit(EditPlan([Move(mover, before=target)], reason="rerank")).applied
            expected = ["p", "a", "y", "x"] if k % 2 == 0 else ["p", "a", "x", "y"]
            assert window(buf) == expected
            buf._check()

    def test_renumbering_is_not_a_change(self, buf: Buffer) -> None:
        """When a move exhausts the float gap and every order key is renumbered,
        entries the plan did not place do not count as changed: a plan based
        before the renumbering that touches them is applied, live and after
        recovery from the log."""
        fill(buf, reasoning("p"), reasoning("a"), reasoning("x"), reasoning("y"))
        base = buf.version
        for k in range(70):
            mover, target = ("y", "x") if k % 2 == 0 else ("x", "y")
            buf.edit(EditPlan([Move(mover, before=target)], reason="rerank"))
        recovered = Buffer(log=ListSink(buf.log))
        assert dict(recovered.head().live) == dict(buf.head().live)
        for b in (buf, recovered):
            assert b.edit(EditPlan([Rewrite("p", "p2")], reason="x", base=base)).applied
            assert not b.edit(EditPlan([Rewrite("x", "x2")], reason="x", base=base)).applied
        recovered._check(expect_no_pins=True)

    def test_summary_into_an_exhausted_gap_keeps_the_order(self, buf: Buffer) -> None:
        """A summary placed where no float key is left between its neighbours
        (with a move beside it in the same plan) still takes the first covered
        entry's place, and every other entry keeps its order."""
        fill(buf, reasoning("p"), reasoning("a"), reasoning("x"), reasoning("y"))

        def gap_after_a() -> bool:
            live, order = buf.head().live, window(buf)
            lo, hi = live[order[1]].key, live[order[2]].key
            return lo < (lo + hi) / 2 < hi

        k = 0
        while gap_after_a():
            mover, target = ("y", "x") if k % 2 == 0 else ("x", "y")
            buf.edit(EditPlan([Move(mover, before=target)], reason="rerank"))
            k += 1
        _, _, first, second = window(buf)
        s1 = entry("s1", Kind.SUMMARY, "s1")
        plan = EditPlan([Summarize((first,), s1), Move("p", before=first)], reason="x")
        assert buf.edit(plan).applied
        assert window(buf) == ["a", "s1", "p", second]


class TestRefusals:
    def test_op_on_a_rationale_id_is_refused(self, buf: Buffer) -> None:
        """A plan that would prune, rewrite or move its own rationale is refused
        RATIONALE (seed 002: the plan must not delete the reasoning that made it)."""
        fill(buf, reasoning("a"), reasoning("why"))
        for op in (Prune("why"), Rewrite("why", "x"), Move("why", before="a")):
            plan = EditPlan([Prune("a"), op], reason="x", rationale=["why"])
            assert refused(buf, plan).refusals == (Refusal.RATIONALE,)
        assert window(buf) == ["a", "why"]

    @pytest.mark.parametrize("kind", [Kind.CONSTRAINT, Kind.INSTRUCTION])
    def test_immutable_is_never_rewritten_pruned_or_summarized(
        self, buf: Buffer, kind: Kind
    ) -> None:
        """Rewrite, Prune or Summarize of a CONSTRAINT/INSTRUCTION is IMMUTABLE."""
        fill(buf, entry("c", kind, "do not modify files under /etc"), reasoning("a"))
        s = entry("s", Kind.SUMMARY, "summary")
        for op in (Rewrite("c", "avoid system config"), Prune("c"), Summarize(("c", "a"), s)):
            assert refused(buf, EditPlan([op], reason="x")).refusals == (Refusal.IMMUTABLE,)

    @pytest.mark.parametrize("kind", [Kind.NEGATIVE, Kind.PROHIBITION])
    def test_protected_is_never_removed_or_paraphrased(self, buf: Buffer, kind: Kind) -> None:
        """Prune, Rewrite or Summarize of a NEGATIVE/PROHIBITION is PROTECTED."""
        fill(buf, entry("n", kind, "X"), reasoning("a"))
        s = entry("s", Kind.SUMMARY, "summary")
        for op in (Prune("n"), Rewrite("n", "Y"), Summarize(("a", "n"), s)):
            assert refused(buf, EditPlan([op], reason="x")).refusals == (Refusal.PROTECTED,)

    def test_classified_negative_is_refused_negative(self, buf: Buffer) -> None:
        """A reasoning entry the classifier flags is refused NEGATIVE."""
        fill(buf, entry("r", body="attempt 2 timed out"))
        for op in (Prune("r"), Rewrite("r", "attempt 2 slow")):
            assert refused(buf, EditPlan([op], reason="x")).refusals == (Refusal.NEGATIVE,)

    def test_surviving_reference_is_refused(self, buf: Buffer) -> None:
        """Removing t while v (kept) cites it is REFERENCED; so is a rewrite or
        a summary that would cite a removed entry."""
        fill(buf, reasoning("t"), reasoning("v", "t"), reasoning("w"))
        assert refused(buf, EditPlan([Prune("t")], reason="x")).refusals == (Refusal.REFERENCED,)
        plan = EditPlan([Prune("w"), Rewrite("v", "x", refs=("t", "w"))], reason="x")
        assert refused(buf, plan).refusals == (Refusal.REFERENCED,)
        s = entry("s", Kind.SUMMARY, "summary", ["w"])
        assert refused(buf, EditPlan([Summarize(("w",), s)], reason="x")).refusals == (
            Refusal.REFERENCED,
        )

    def test_unknown_ids_are_refused(self, buf: Buffer) -> None:
        """An op on an id that is not live, or a move before one, is UNKNOWN."""
        fill(buf, reasoning("a"))
        assert refused(buf, EditPlan([Prune("zz")], reason="x")).refusals == (Refusal.UNKNOWN,)
        assert refused(buf, EditPlan([Move("a", before="zz")], reason="x")).refusals == (
            Refusal.UNKNOWN,
        )

    def test_all_or_nothing(self, buf: Buffer) -> None:
        """One bad op refuses the whole plan: the good ops are not applied either."""
        fill(buf, reasoning("a"), reasoning("b"), entry("c", Kind.CONSTRAINT, "keep /etc"))
        plan = EditPlan(
            [Prune("a"), Rewrite("b", "new b"), Move("b"), Rewrite("c", "paraphrase")],
            reason="x",
        )
        assert refused(buf, plan).refusals == (Refusal.IMMUTABLE,)
        with buf.snapshot() as snap:
            assert [e.id for e in snap] == ["a", "b", "c"]
            assert snap["b"].body == "step b"
            assert not snap.marks

    def test_every_refusal_reason_is_reported_once(self, buf: Buffer) -> None:
        """A plan that breaks several rules reports each refusal once, in order."""
        fill(buf, reasoning("a"), entry("c", Kind.CONSTRAINT, "c"), entry("n", Kind.NEGATIVE))
        plan = EditPlan(
            [Rewrite("c", "x"), Prune("n"), Prune("zz"), Prune("a")], reason="x", rationale=["a"]
        )
        report = refused(buf, plan)
        assert report.refusals == (
            Refusal.IMMUTABLE,
            Refusal.PROTECTED,
            Refusal.UNKNOWN,
            Refusal.RATIONALE,
        )

    def test_refused_plan_is_logged_with_its_rationale(self, buf: Buffer) -> None:
        """The log keeps the refused plan and its rationale's bytes (provenance
        separation): the editor cannot erase why it wanted the edit."""
        fill(buf, reasoning("why", body="A is irrelevant"), entry("c", Kind.CONSTRAINT))
        refused(buf, EditPlan([Prune("c")], reason="x", rationale=["why"]))
        rec = buf.log[-1]
        assert rec.detail["plan"]["ops"] == [{"op": "prune", "id": "c"}]
        assert rec.detail["rationale"][0]["body"] == "A is irrelevant"

    def test_missing_rationale_is_logged_as_missing(self, buf: Buffer) -> None:
        """A rationale id that is not live is recorded as such (no bytes), not
        invented."""
        fill(buf, reasoning("a"))
        assert buf.edit(EditPlan([Prune("a")], reason="x", rationale=["gone"])).applied
        rec = next(r for r in buf.log if r.op == "edit")
        assert rec.detail["rationale"] == [{"id": "gone", "hash": None, "body": None}]


class TestBase:
    def test_unchanged_since_base_is_applied(self, buf: Buffer) -> None:
        """A plan whose touched entries did not change since base is applied,
        even if other entries changed."""
        fill(buf, reasoning("a"), reasoning("b"))
        base = buf.version
        buf.append(reasoning("c"))
        buf.edit(EditPlan([Rewrite("b", "b2")], reason="x"))
        assert buf.edit(EditPlan([Prune("a")], reason="x", base=base)).applied

    def test_entry_changed_since_base_is_a_conflict(self, buf: Buffer) -> None:
        """A touched entry rewritten after base makes the plan a CONFLICT."""
        fill(buf, reasoning("a"))
        base = buf.version
        buf.edit(EditPlan([Rewrite("a", "a2")], reason="x"))
        plan = EditPlan([Rewrite("a", "a3")], reason="x", base=base)
        assert refused(buf, plan).refusals == (Refusal.CONFLICT,)

    def test_entry_moved_since_base_is_a_conflict(self, buf: Buffer) -> None:
        """A touched entry moved after base makes the plan a CONFLICT."""
        fill(buf, reasoning("a"), reasoning("b"))
        base = buf.version
        buf.edit(EditPlan([Move("a")], reason="x"))
        assert refused(buf, EditPlan([Prune("a")], reason="x", base=base)).refusals == (
            Refusal.CONFLICT,
        )

    def test_entry_removed_since_base_is_a_conflict(self, buf: Buffer) -> None:
        """A touched entry removed after base is a CONFLICT, not UNKNOWN."""
        fill(buf, reasoning("a"), reasoning("b"))
        base = buf.version
        buf.prune(["a"], reason="stale")
        plan = EditPlan([Prune("a"), Prune("b")], reason="x", base=base)
        assert refused(buf, plan).refusals == (Refusal.CONFLICT,)

    def test_base_in_the_future_is_invalid(self, buf: Buffer) -> None:
        """A base newer than the head is InvalidArgument; nothing changes."""
        fill(buf, reasoning("a"))
        v = buf.version
        with pytest.raises(InvalidArgument, match=rf"^plan base 99 is newer than the head {v}$"):
            buf.edit(EditPlan([Prune("a")], reason="x", base=99))
        assert buf.version == v
