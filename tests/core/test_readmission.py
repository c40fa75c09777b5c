"""Re-admission of tombstoned content (seed 002, condition 2): by content hash
and by key, on append and on edit, refused without an ``Override``."""

from __future__ import annotations

import pytest

from conftest import ListSink, entry, fill, window
from quiesce import (
    Buffer,
    EditPlan,
    Kind,
    Override,
    ReadmissionRefused,
    Refusal,
    Rewrite,
    Summarize,
)


class TestReadmission:
    def test_same_content_is_refused_and_carries_the_tombstone(self, buf: Buffer) -> None:
        """New id, same body as a tombstone: ReadmissionRefused with that tombstone."""
        fill(buf, entry("a", Kind.TOOL_OUTPUT, "kubectl describe pod: healthy"))
        buf.prune(["a"], reason="noise")
        v = buf.version
        with pytest.raises(
            ReadmissionRefused,
            match=r"^entry 'b' matches tombstone of 'a' \(pruned at version \d+: noise\); "
            r"re-admission needs an Override$",
        ) as info:
            buf.append(entry("b", Kind.TOOL_OUTPUT, "kubectl describe pod: healthy"))
        assert info.value.tombstone == buf.tombstones["a"]
        assert buf.version == v
        assert "b" not in window(buf)

    def test_same_key_is_refused(self, buf: Buffer) -> None:
        """New id and body, same key (same tool call) as a tombstone: refused."""
        fill(buf, entry("a", Kind.TOOL_CALL, "describe pod p", key="kubectl describe p"))
        buf.prune(["a"], reason="done")
        v = buf.version
        with pytest.raises(ReadmissionRefused) as info:
            buf.append(entry("b", Kind.TOOL_CALL, "describe pod p again", key="kubectl describe p"))
        assert info.value.tombstone.id == "a"
        assert buf.version == v

    def test_override_admits_and_is_logged(self, buf: Buffer) -> None:
        """With Override(reason, turn) the entry is admitted, and the log record
        names the override; stats count it."""
        fill(buf, entry("a", Kind.TOOL_OUTPUT, "dump"))
        buf.prune(["a"], reason="noise")
        v = buf.append(
            entry("b", Kind.TOOL_OUTPUT, "dump"), override=Override("pod restarted", turn=9)
        )
        assert v == buf.version
        assert "b" in window(buf)
        record = buf.log[-1]
        assert record.op == "append"
        assert record.outcome == "overridden"
        assert record.reason == "pod restarted"
        assert record.detail["override"] == {"reason": "pod restarted", "turn": 9}
        assert buf.stats().readmissions_overridden == 1

    def test_override_without_a_match_is_a_plain_append(self, buf: Buffer) -> None:
        """An Override that nothing needed admits the entry as a plain append:
        the record is 'applied' (it keeps the override) and nothing is counted."""
        fill(buf, entry("a", Kind.TOOL_OUTPUT, "dump"))
        buf.prune(["a"], reason="noise")
        buf.append(entry("b", Kind.TOOL_OUTPUT, "fresh"), override=Override("just in case", 2))
        assert buf.log[-1].outcome == "applied"
        assert buf.log[-1].detail["override"] == {"reason": "just in case", "turn": 2}
        assert buf.stats().readmissions_overridden == 0

    def test_counts_survive_recovery(self, buf: Buffer) -> None:
        """Refused and overridden re-admissions are counted again when the
        buffer is recovered from its log."""
        fill(buf, entry("a", Kind.TOOL_OUTPUT, "dump"), entry("n", body="note"))
        buf.prune(["a"], reason="noise")
        with pytest.raises(ReadmissionRefused):
            buf.append(entry("b", Kind.TOOL_OUTPUT, "dump"))
        buf.append(entry("c", Kind.TOOL_OUTPUT, "dump"), override=Override("again", 3))
        plan = EditPlan([Rewrite("n", "dump")], reason="x", override=Override("again", 4))
        assert buf.edit(plan).applied
        recovered = Buffer(log=ListSink(buf.log))
        for b in (buf, recovered):
            s = b.stats()
            assert (s.readmissions_refused, s.readmissions_overridden) == (1, 2)

    def test_refusal_is_logged_and_counted(self, buf: Buffer) -> None:
        """A refused re-admission leaves a 'refuse' record and counts in stats."""
        fill(buf, entry("a", Kind.TOOL_OUTPUT, "dump"))
        buf.prune(["a"], reason="noise")
        n = len(buf.log)
        with pytest.raises(ReadmissionRefused):
            buf.append(entry("b", Kind.TOOL_OUTPUT, "dump"))
        assert len(buf.log) == n + 1
        assert buf.log[-1].op == "refuse"
        assert buf.log[-1].version is None
        stats = buf.stats()
        assert stats.readmissions_refused == 1

    def test_unrelated_content_is_admitted(self, buf: Buffer) -> None:
        """Content that matches no tombstone (by hash or key) needs no override."""
        fill(buf, entry("a", Kind.TOOL_OUTPUT, "dump", key="k1"))
        buf.prune(["a"], reason="noise")
        buf.append(entry("b", Kind.TOOL_OUTPUT, "other dump", key="k2"))
        assert "b" in window(buf)


class TestReadmissionByEdit:
    def test_rewrite_to_tombstoned_content_is_refused(self, buf: Buffer) -> None:
        """A rewrite whose new body matches a tombstone is refused READMISSION as a
        whole plan: the window is unchanged and one escalation is emitted."""
        fill(buf, entry("a", body="old dump"), entry("b", body="note"))
        buf.prune(["a"], reason="noise")
        v = buf.version
        report = buf.edit(EditPlan([Rewrite("b", "old dump")], reason="tidy"))
        assert not report.applied
        assert report.refusals == (Refusal.READMISSION,)
        assert buf.version == v
        with buf.snapshot() as snap:
            assert snap["b"].body == "note"
        assert [e.plan for e in buf.drain_escalations()] == [report.escalation.plan]  # type: ignore[union-attr]

    def test_unneeded_override_on_an_edit_is_not_counted(self, buf: Buffer) -> None:
        """A plan with an Override whose content matches no tombstone is applied
        and not counted as a re-admission."""
        fill(buf, entry("b", body="note"))
        plan = EditPlan([Rewrite("b", "fresh")], reason="x", override=Override("spare", 1))
        assert buf.edit(plan).applied
        assert buf.stats().readmissions_overridden == 0

    def test_rewrite_with_override_is_applied(self, buf: Buffer) -> None:
        """The same rewrite with an Override is applied and counted as overridden."""
        fill(buf, entry("a", body="old dump"), entry("b", body="note"))
        buf.prune(["a"], reason="noise")
        report = buf.edit(
            EditPlan(
                [Rewrite("b", "old dump")], reason="tidy", override=Override("needed again", 5)
            )
        )
        assert report.applied
        with buf.snapshot() as snap:
            assert snap["b"].body == "old dump"
        assert buf.stats().readmissions_overridden == 1

    def test_rewriting_a_readmitted_entry_needs_no_second_override(self, buf: Buffer) -> None:
        """An entry re-admitted (by Override) under a tombstoned key can later be
        rewritten to new bytes without another Override: the rewrite keeps the
        key that was already admitted, and only new content is checked."""
        key = "kubectl describe pod web-0"
        fill(buf, entry("call", Kind.TOOL_CALL, "describe web-0", key=key))
        buf.prune(["call"], reason="stale")
        buf.append(
            entry("call2", Kind.TOOL_CALL, "describe web-0 again", key=key),
            override=Override("pod restarted", 9),
        )
        assert buf.edit(EditPlan([Rewrite("call2", "describe web-0 (short)")], reason="x")).applied

    def test_summary_with_a_tombstoned_key_is_refused(self, buf: Buffer) -> None:
        """A summary is new content: its key is checked against tombstones too."""
        fill(buf, entry("a", key="tool-a"), entry("b"))
        buf.prune(["a"], reason="noise")
        into = entry("s", Kind.SUMMARY, "fresh summary", key="tool-a")
        report = buf.edit(EditPlan([Summarize(("b",), into)], reason="compact"))
        assert report.refusals == (Refusal.READMISSION,)

    def test_summary_matching_a_tombstone_is_refused(self, buf: Buffer) -> None:
        """A summary whose body matches a tombstone is refused READMISSION."""
        fill(buf, entry("a", body="the pod is healthy"), entry("b"), entry("c"))
        buf.prune(["a"], reason="noise")
        v = buf.version
        into = entry("s", Kind.SUMMARY, "the pod is healthy")
        report = buf.edit(EditPlan([Summarize(("b", "c"), into)], reason="compact"))
        assert not report.applied
        assert Refusal.READMISSION in report.refusals
        assert buf.version == v
        assert window(buf) == ["b", "c"]
