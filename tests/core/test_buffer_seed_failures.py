"""The seeds' five failure stories, each replayed against the buffer: the unsafe
step is refused (or made safe) and the evidence survives."""

from __future__ import annotations

import pytest

from conftest import entry, fill, window
from quiesce import (
    Buffer,
    DanglingReference,
    EditPlan,
    EscalationKind,
    Kind,
    Move,
    Outcome,
    Override,
    ProtectedEntry,
    Prune,
    ReadmissionRefused,
    Refusal,
    Rewrite,
    Status,
    Summarize,
    Tombstone,
)


class TestDanglingJustification:
    """Seed 000: the pruner deleted T ("endpoint X is read-only") while the
    verifier's rationale cited it."""

    def test_pruning_a_cited_trace_is_refused_and_marked(self, buf: Buffer) -> None:
        """T is cited by the verifier's rationale: pruning T is refused
        REFERENCED, T is only marked, and the rationale's citation resolves."""
        fill(
            buf,
            entry("T", Kind.REASONING, "endpoint X is read-only"),
            entry("write", Kind.TOOL_CALL, "PUT /x"),
            entry("V", Kind.RATIONALE, "the write is safe because X is read-only", ["T"]),
        )
        report = buf.prune(["T"], reason="no longer load-bearing", actor="pruner")
        assert dict(report) == {"T": Outcome(Status.MARKED, Refusal.REFERENCED)}
        with buf.snapshot() as snap:
            for ref in snap["V"].refs:
                assert snap.resolve(ref) == snap[ref]
            assert snap.is_stale("T")

    def test_citing_a_deleted_trace_halts_instead_of_confabulating(self, buf: Buffer) -> None:
        """If T was pruned before anything cited it, a later rationale citing T
        is rejected with T's tombstone: "deleted", not "unknown, proceed"."""
        fill(buf, entry("T", Kind.REASONING, "endpoint X is read-only"))
        buf.prune(["T"], reason="no longer load-bearing", turn=12)
        with pytest.raises(DanglingReference) as info:
            buf.append(entry("V", Kind.RATIONALE, "safe because X is read-only", ["T"]))
        assert isinstance(info.value.tombstone, Tombstone)
        assert info.value.tombstone.turn == 12
        with buf.snapshot() as snap:
            assert isinstance(snap.resolve("T"), Tombstone)


class TestSummaryDrift:
    """Seed 000: a 40-step trace summarized into 3 lines dropped "attempt 2 timed
    out, do not retry with the same parameters"; the replanner retried."""

    def test_summary_that_drops_a_negative_result_is_refused(self, buf: Buffer) -> None:
        """Summarizing the steps including the negative result is refused as a
        whole (NEGATIVE), escalated, and the negative result stays verbatim."""
        steps = [
            entry(f"s{i}", Kind.REASONING, f"step {i}: probing the service") for i in range(40)
        ]
        steps[17] = entry(
            "s17", Kind.REASONING, "attempt 2 timed out, do not retry with the same parameters"
        )
        fill(buf, *steps)
        v = buf.version
        summary = entry("sum", Kind.SUMMARY, "probed the service; attempt 2 in progress")
        report = buf.edit(
            EditPlan([Summarize(tuple(s.id for s in steps), summary)], reason="compact")
        )
        assert not report.applied
        assert report.refusals == (Refusal.NEGATIVE,)
        assert report.escalation is not None
        assert report.escalation.kind is EscalationKind.REFUSED_EDIT
        assert buf.drain_escalations() == [report.escalation]
        assert buf.version == v
        with buf.snapshot() as snap:
            assert snap["s17"].body.startswith("attempt 2 timed out")
            assert "sum" not in snap

    def test_summary_around_the_negative_result_keeps_it(self, buf: Buffer) -> None:
        """Summarizing only the positive steps is applied; the negative result
        survives next to the summary."""
        steps = [entry(f"s{i}", Kind.REASONING, f"step {i}: probing") for i in range(5)]
        steps[2] = entry("s2", Kind.NEGATIVE, "attempt 2 timed out, do not retry")
        fill(buf, *steps)
        summary = entry("sum", Kind.SUMMARY, "probed the service")
        plan = EditPlan([Summarize(("s0", "s1", "s3", "s4"), summary)], reason="compact")
        assert buf.edit(plan).applied
        assert window(buf) == ["sum", "s2"]


class TestTornRead:
    """Seed 000: a verifier read a buffer where T was removed but T' (citing T)
    was not yet rewritten."""

    def test_reader_pinned_before_a_prune_sees_one_consistent_version(self, buf: Buffer) -> None:
        """A verifier pinned before T and T' are pruned sees both, every ref
        resolving, for its whole read; after it leaves both go in one version,
        and no version ever shows T' without T."""
        fill(
            buf,
            entry("T", Kind.REASONING, "endpoint X is read-only"),
            entry("T2", Kind.REASONING, "so writing is safe", ["T"]),
        )
        versions = []
        with buf.snapshot() as verifier:
            report = buf.prune(["T", "T2"], reason="stale")
            assert set(report.ids(Status.DEFERRED)) == {"T", "T2"}
            for _ in range(3):
                buf.append(entry(f"n{buf.version}", Kind.REASONING, f"noise {buf.version}"))
                with buf.snapshot() as other:
                    versions.append({e.id: e.refs for e in other})
                assert {e.id for e in verifier} >= {"T", "T2"}
                assert all(verifier.resolve(r) == verifier[r] for r in verifier["T2"].refs)
        with buf.snapshot() as after:
            versions.append({e.id: e.refs for e in after})
        assert buf.tombstones["T"].version == buf.tombstones["T2"].version
        for ids in versions:
            assert all(r in ids for refs in ids.values() for r in refs)

    def test_pruning_only_the_cited_half_is_refused(self, buf: Buffer) -> None:
        """Pruning T alone while T' survives is refused: no dangling window."""
        fill(buf, entry("T", Kind.REASONING, "x"), entry("T2", Kind.REASONING, "y", ["T"]))
        with buf.snapshot():
            assert buf.prune(["T"], reason="stale")["T"] == Outcome(
                Status.MARKED, Refusal.REFERENCED
            )
        assert window(buf) == ["T", "T2"]


class TestPruneReadmitOscillation:
    """Seed 002: at turn 41 the editor pruned a stale `kubectl describe` dump and
    its justification; at turn 43 the agent re-ran the same call."""

    def test_rerunning_a_pruned_tool_call_is_refused_without_override(self, buf: Buffer) -> None:
        """The re-run (same key, and same output) is refused with the tombstone
        that says when and why it was judged stale; with an Override it is
        admitted and the override is logged."""
        key = "kubectl describe pod web-0"
        fill(
            buf,
            entry("call", Kind.TOOL_CALL, "kubectl describe pod web-0", key=key, turn=40),
            entry("dump", Kind.TOOL_OUTPUT, "Status: Running ...", ["call"], turn=40),
            entry("why", Kind.RATIONALE, "the dump is noise; the pod is healthy", turn=41),
        )
        plan = EditPlan(
            [Prune("call"), Prune("dump")], reason="stale dump", turn=41, rationale=["why"]
        )
        assert buf.edit(plan).applied
        v = buf.version
        with pytest.raises(ReadmissionRefused) as info:
            buf.append(
                entry(
                    "call2",
                    Kind.TOOL_CALL,
                    "kubectl describe pod web-0 -n default",
                    key=key,
                    turn=43,
                )
            )
        assert info.value.tombstone.id == "call"
        assert info.value.tombstone.turn == 41
        assert info.value.tombstone.reason == "stale dump"
        with pytest.raises(ReadmissionRefused) as info:
            buf.append(entry("dump2", Kind.TOOL_OUTPUT, "Status: Running ...", turn=43))
        assert info.value.tombstone.id == "dump"
        assert buf.version == v
        buf.append(
            entry("call2", Kind.TOOL_CALL, "kubectl describe pod web-0", key=key, turn=50),
            override=Override("pod restarted at turn 49", turn=50),
        )
        assert buf.log[-1].outcome == "overridden"
        stats = buf.stats()
        assert (stats.readmissions_refused, stats.readmissions_overridden) == (2, 1)
        assert stats.tombstone_to_edit_ratio == 1.0

    def test_plan_pruning_its_own_justification_is_refused(self, buf: Buffer) -> None:
        """An editor that prunes the dump together with its own justification is
        refused RATIONALE: the record of why would vanish with the dump."""
        fill(
            buf,
            entry("dump", Kind.TOOL_OUTPUT, "Status: Running ..."),
            entry("why", Kind.RATIONALE, "the dump is noise"),
        )
        plan = EditPlan([Prune("dump"), Prune("why")], reason="stale", rationale=["why"])
        report = buf.edit(plan)
        assert report.refusals == (Refusal.RATIONALE,)
        assert window(buf) == ["dump", "why"]


class TestParaphrasedConstraint:
    """Seed 002: "do not modify files under /etc" was rewritten to "avoid system
    config", then pruned as low-relevance; the constraint was lost."""

    def test_constraint_cannot_be_paraphrased_pruned_or_marked(self, buf: Buffer) -> None:
        """Rewrite is refused IMMUTABLE, prune leaves it UNCHANGED, marking it is
        ProtectedEntry; only a move is allowed, and its bytes never change."""
        c = entry("c", Kind.CONSTRAINT, "do not modify files under /etc")
        fill(buf, c, entry("d", Kind.REASONING, "edit the Dockerfile"))
        report = buf.edit(EditPlan([Rewrite("c", "avoid system config")], reason="shorter"))
        assert report.refusals == (Refusal.IMMUTABLE,)
        assert buf.prune(["c"], reason="low relevance")["c"] == Outcome(
            Status.UNCHANGED, Refusal.IMMUTABLE
        )
        assert buf.edit(EditPlan([Prune("c")], reason="low relevance")).refusals == (
            Refusal.IMMUTABLE,
        )
        with pytest.raises(ProtectedEntry):
            buf.mark_stale("c", "low relevance")
        assert buf.edit(EditPlan([Move("c")], reason="keep it near the end")).applied
        assert window(buf) == ["d", "c"]
        with buf.snapshot() as snap:
            assert snap["c"] == c
            assert snap.mark("c") is None
