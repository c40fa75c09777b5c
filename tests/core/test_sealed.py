"""Signed reasoning in the core (issue 12): an entry whose content is a
provider-signed block (``Entry.sealed``) is never rewritten or summarized, and
leaves the window only together with its turn (the entries citing it), never
while a tool call of that turn awaits its result."""

from __future__ import annotations

from quiesce import (
    Buffer,
    EditPlan,
    Entry,
    EscalationKind,
    Kind,
    Prune,
    Refusal,
    Rewrite,
    Status,
    Summarize,
)

THINKING = {"type": "thinking", "thinking": "look at the pod first", "signature": "sig=="}


def turn(buf: Buffer, *, answered: bool = True) -> None:
    """A thinking block, a text block and a tool call that cite it, and
    (if ``answered``) the call's result."""
    buf.append(Entry("think", Kind.REASONING, THINKING["thinking"], content=THINKING))
    buf.append(Entry("text", Kind.REASONING, "checking", ("think",)))
    buf.append(Entry("call", Kind.TOOL_CALL, "kubectl get pods", ("think",), key="kubectl"))
    if answered:
        buf.append(Entry("call#result", Kind.TOOL_OUTPUT, "web-0 Running", ("call",)))


class TestSealedEdits:
    def test_a_rewrite_of_signed_reasoning_is_refused_and_escalated(self) -> None:
        """Like a paraphrased constraint: IMMUTABLE, one escalation, window unchanged."""
        buf = Buffer()
        turn(buf)
        v = buf.version
        report = buf.edit(EditPlan([Rewrite("think", "shorter")], reason="compress"))
        assert not report.applied
        assert report.refusals == (Refusal.IMMUTABLE,)
        assert report.escalation is not None
        assert report.escalation.kind is EscalationKind.REFUSED_EDIT
        assert "'think' is signed reasoning: cannot be rewritten" in report.escalation.detail
        assert buf.version == v
        with buf.snapshot() as snap:
            assert snap["think"].content == THINKING

    def test_a_summary_of_signed_reasoning_is_refused(self) -> None:
        buf = Buffer()
        turn(buf)
        plan = EditPlan(
            [Summarize(["think", "text", "call", "call#result"], Entry("s", Kind.SUMMARY, "x"))],
            reason="compress",
        )
        report = buf.edit(plan)
        assert not report.applied
        assert Refusal.IMMUTABLE in report.refusals

    def test_the_whole_turn_may_be_pruned_by_a_plan(self) -> None:
        buf = Buffer()
        turn(buf)
        plan = EditPlan([Prune(i) for i in ("think", "text", "call", "call#result")], reason="r")
        assert buf.edit(plan).applied
        assert len(buf) == 0

    def test_a_plan_may_not_leave_the_signed_block_alone(self) -> None:
        buf = Buffer()
        turn(buf)
        report = buf.edit(EditPlan([Prune(i) for i in ("text", "call", "call#result")], reason="r"))
        assert report.refusals == (Refusal.REFERENCED,)
        assert report.escalation is not None
        assert "would leave the signed reasoning 'think' without its turn" in (
            report.escalation.detail
        )


class TestSealedPrunes:
    def test_the_whole_turn_is_pruned_together(self) -> None:
        buf = Buffer()
        turn(buf)
        report = buf.prune(["think", "text", "call", "call#result"], reason="done")
        assert set(report.ids(Status.PRUNED)) == {"think", "text", "call", "call#result"}

    def test_not_while_a_tool_call_awaits_its_result(self) -> None:
        """The call has no result yet: the signed block stays (marked), and so
        does everything that cites it."""
        buf = Buffer()
        turn(buf, answered=False)
        report = buf.prune(["think", "text", "call"], reason="too long")
        assert report["think"].status is Status.MARKED
        assert report["think"].refusal is Refusal.REFERENCED
        assert report.ids(Status.PRUNED) == ()
        assert len(buf) == 3
        buf._check()

    def test_part_of_a_turn_leaves_only_what_keeps_the_block_cited(self) -> None:
        """Pruning the call and its result alone would leave the thinking
        cited by the text only: allowed. Then the text alone: refused."""
        buf = Buffer()
        turn(buf)
        report = buf.prune(["call", "call#result"], reason="noise")
        assert set(report.ids(Status.PRUNED)) == {"call", "call#result"}
        report = buf.prune(["text"], reason="noise")
        assert report["text"] == (Status.MARKED, Refusal.REFERENCED)
        assert "think" in buf.head().live
        buf._check()

    def test_unsigned_reasoning_is_unaffected(self) -> None:
        buf = Buffer()
        buf.append(Entry("r", Kind.REASONING, "plain"))
        buf.append(Entry("t", Kind.REASONING, "cites it", ("r",)))
        assert buf.prune(["t"], reason="x")["t"].status is Status.PRUNED
