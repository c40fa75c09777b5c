"""``Buffer.prune``: seed 000's decision procedure, per id, with grace-period removal."""

from __future__ import annotations

import pytest

from conftest import entry, fill, reasoning, window
from quiesce import (
    Buffer,
    Entry,
    InvalidType,
    Kind,
    Outcome,
    Policy,
    PruneReport,
    Refusal,
    Status,
    Tombstone,
)

PRUNED = Outcome(Status.PRUNED)
DEFERRED = Outcome(Status.DEFERRED)


def marked(refusal: Refusal) -> Outcome:
    return Outcome(Status.MARKED, refusal)


class TestPruned:
    def test_no_reader_prunes_now_with_a_tombstone(self, buf: Buffer) -> None:
        """With no reader pinned the entry is PRUNED at once: gone from the head,
        one tombstone with id, hash, reason, turn, actor and removing version."""
        fill(buf, reasoning("a"), reasoning("b"))
        report = buf.prune(["a"], reason="stale", actor="pruner", turn=5)
        assert isinstance(report, PruneReport)
        assert dict(report) == {"a": PRUNED}
        assert report.version == buf.version
        assert window(buf) == ["b"]
        tomb = buf.tombstones["a"]
        assert tomb == Tombstone(
            "a",
            reasoning("a").content_hash,
            "stale",
            5,
            "pruner",
            buf.version,
            Kind.REASONING,
            None,
        )

    def test_a_bare_str_is_a_type_error(self, buf: Buffer) -> None:
        """prune("abc") is a TypeError (not three one-letter ids); nothing changes."""
        fill(buf, reasoning("abc"), reasoning("a"))
        v, n = buf.version, len(buf.log)
        with pytest.raises(TypeError, match=r"^prune takes a collection of ids, not a bare str$"):
            buf.prune("abc", reason="stale")
        with pytest.raises(InvalidType):
            buf.prune("a", reason="stale")
        assert (buf.version, len(buf.log)) == (v, n)
        assert window(buf) == ["abc", "a"]

    def test_report_is_in_request_order_without_duplicates(self, buf: Buffer) -> None:
        """The report maps each requested id once, in request order."""
        fill(buf, reasoning("a"), reasoning("b"))
        report = buf.prune(["b", "zz", "a", "b"], reason="stale")
        assert list(report) == ["b", "zz", "a"]
        assert report.ids(Status.PRUNED) == ("b", "a")


class TestDeferred:
    def test_reader_pinned_before_defers_until_it_leaves(self, buf: Buffer) -> None:
        """A reader pinned before the request saw the entry unmarked: the entry is
        DEFERRED (marked now, still live), and removed when that reader unpins."""
        fill(buf, reasoning("a"), reasoning("b"))
        with buf.snapshot() as snap:
            report = buf.prune(["a"], reason="stale")
            assert dict(report) == {"a": DEFERRED}
            assert "a" in window(buf)
            assert "a" not in buf.tombstones
            with buf.snapshot() as now:
                assert now.is_stale("a")
            assert buf.staged() == {"a": report.version}
            assert snap["a"] == reasoning("a")
            assert not snap.is_stale("a")
        assert window(buf) == ["b"]
        assert "a" in buf.tombstones
        assert buf.staged() == {}

    def test_removal_waits_for_the_last_blocking_reader(self, buf: Buffer) -> None:
        """With two readers pinned before the request, the removal happens only
        after both have left."""
        fill(buf, reasoning("a"))
        r1, r2 = buf.snapshot(), buf.snapshot()
        r1.__enter__()
        r2.__enter__()
        buf.prune(["a"], reason="stale")
        r1.__exit__(None, None, None)
        assert "a" not in buf.tombstones
        r2.__exit__(None, None, None)
        assert "a" in buf.tombstones

    def test_reader_pinned_after_the_mark_does_not_block(self, buf: Buffer) -> None:
        """A reader that pinned a version where the entry is already marked does
        not hold its removal back (a grace period, not a zero-readers moment)."""
        fill(buf, reasoning("a"))
        with buf.snapshot():
            assert buf.prune(["a"], reason="stale")["a"] == DEFERRED
            late = buf.snapshot()
            late.__enter__()
        # The early reader left; the late one saw the mark and does not block.
        assert "a" in buf.tombstones
        assert late["a"] == reasoning("a")  # its pinned version still has it
        late.__exit__(None, None, None)

    def test_entry_marked_before_the_pin_is_pruned_at_once(self, buf: Buffer) -> None:
        """If the entry was marked before every current reader pinned, prune
        removes it at once (PRUNED) even though readers are pinned."""
        fill(buf, reasoning("a"))
        buf.mark_stale("a", "stale")
        with buf.snapshot() as snap:
            assert dict(buf.prune(["a"], reason="stale")) == {"a": PRUNED}
            assert snap["a"] == reasoning("a")
            assert snap.is_stale("a")
        assert "a" in buf.tombstones

    def test_pruning_a_staged_id_again_stays_deferred(self, buf: Buffer) -> None:
        """Asking again for an id already staged reports DEFERRED and does not
        stage it twice; it is removed once."""
        fill(buf, reasoning("a"))
        with buf.snapshot():
            buf.prune(["a"], reason="one")
            v = buf.version
            assert dict(buf.prune(["a"], reason="two")) == {"a": DEFERRED}
            assert buf.version == v
        removals = [r for r in buf.log if r.op == "remove" and r.version is not None]
        assert len(removals) == 1
        assert buf.tombstones["a"].reason == "one"


class TestRefused:
    @pytest.mark.parametrize("kind", [Kind.NEGATIVE, Kind.PROHIBITION])
    def test_protected_kinds_are_marked_not_pruned(self, buf: Buffer, kind: Kind) -> None:
        """NEGATIVE and PROHIBITION entries are refused PROTECTED and marked instead."""
        fill(buf, entry("n", kind, "X is fine to touch"))
        report = buf.prune(["n"], reason="stale")
        assert dict(report) == {"n": marked(Refusal.PROTECTED)}
        assert window(buf) == ["n"]
        with buf.snapshot() as snap:
            assert snap.mark("n") is not None
        assert buf.staged() == {}

    @pytest.mark.parametrize(
        "body",
        [
            "attempt 2 timed out",
            "do not retry with the same parameters",
            "don't call the billing API",
            "the migration failed",
            "avoid /etc",
            "writing to X is unsafe",
            "never force-push",
        ],
    )
    def test_classifier_flags_negative_results(self, buf: Buffer, body: str) -> None:
        """A reasoning entry whose body records a negative result is refused NEGATIVE."""
        fill(buf, entry("r", Kind.REASONING, body))
        assert dict(buf.prune(["r"], reason="stale")) == {"r": marked(Refusal.NEGATIVE)}
        assert window(buf) == ["r"]

    def test_verifier_rejection_is_negative(self, buf: Buffer) -> None:
        """An entry recording a verifier rejection (meta verdict) is refused NEGATIVE."""
        fill(buf, Entry("v", Kind.REASONING, "checked the plan", meta={"verdict": "rejected"}))
        assert buf.prune(["v"], reason="stale")["v"] == marked(Refusal.NEGATIVE)

    def test_classifier_is_pluggable(self) -> None:
        """A policy with a custom classifier decides what counts as negative."""
        b = Buffer(policy=Policy(negative=lambda e: "keep" in e.body))
        fill(b, entry("k", body="keep me"), entry("d", body="do not delete me"))
        report = b.prune(["k", "d"], reason="stale")
        assert dict(report) == {"k": marked(Refusal.NEGATIVE), "d": PRUNED}
        b._check(expect_no_pins=True)

    @pytest.mark.parametrize("kind", [Kind.CONSTRAINT, Kind.INSTRUCTION])
    def test_immutable_kinds_are_unchanged(self, buf: Buffer, kind: Kind) -> None:
        """CONSTRAINT/INSTRUCTION: UNCHANGED with IMMUTABLE, and not marked."""
        fill(buf, entry("c", kind))
        v = buf.version
        assert dict(buf.prune(["c"], reason="stale")) == {
            "c": Outcome(Status.UNCHANGED, Refusal.IMMUTABLE)
        }
        assert buf.version == v
        with buf.snapshot() as snap:
            assert snap.mark("c") is None

    def test_unknown_and_removed_ids_are_unchanged(self, buf: Buffer) -> None:
        """An id never seen is UNCHANGED/UNKNOWN; an already removed one UNCHANGED."""
        fill(buf, reasoning("a"))
        buf.prune(["a"], reason="stale")
        v = buf.version
        report = buf.prune(["a", "ghost"], reason="again")
        assert dict(report) == {
            "a": Outcome(Status.UNCHANGED),
            "ghost": Outcome(Status.UNCHANGED, Refusal.UNKNOWN),
        }
        assert buf.version == v

    def test_referenced_by_a_survivor_is_marked(self, buf: Buffer) -> None:
        """An entry cited by a surviving entry outside the request is refused
        REFERENCED and marked (seed 000: dangling justification)."""
        fill(buf, reasoning("t"), reasoning("v", "t"))
        assert dict(buf.prune(["t"], reason="stale")) == {"t": marked(Refusal.REFERENCED)}
        assert window(buf) == ["t", "v"]


class TestTransactions:
    def test_tool_call_and_output_are_pruned_together(self, buf: Buffer) -> None:
        """A TOOL_OUTPUT cites its TOOL_CALL; pruning both in one request removes
        both in one version."""
        fill(
            buf,
            entry("call", Kind.TOOL_CALL, "kubectl describe pod p"),
            entry("out", Kind.TOOL_OUTPUT, "Status: Running", ["call"]),
        )
        report = buf.prune(["call", "out"], reason="noise")
        assert dict(report) == {"call": PRUNED, "out": PRUNED}
        assert buf.tombstones["call"].version == buf.tombstones["out"].version
        assert window(buf) == []

    def test_half_a_pair_is_refused(self, buf: Buffer) -> None:
        """Pruning only the TOOL_CALL of a pair is refused REFERENCED."""
        fill(
            buf,
            entry("call", Kind.TOOL_CALL, "ls"),
            entry("out", Kind.TOOL_OUTPUT, "a b c", ["call"]),
        )
        assert buf.prune(["call"], reason="noise")["call"] == marked(Refusal.REFERENCED)

    def test_deferred_transaction_is_removed_in_one_version(self, buf: Buffer) -> None:
        """Ids that cite each other, deferred by a reader, are removed together."""
        fill(buf, reasoning("a"), reasoning("b", "a"), reasoning("c", "b"))
        with buf.snapshot():
            report = buf.prune(["c", "a", "b"], reason="stale")
            assert set(report.values()) == {DEFERRED}
        versions = {buf.tombstones[i].version for i in "abc"}
        assert len(versions) == 1

    def test_refusals_cascade_down_the_chain(self, buf: Buffer) -> None:
        """c cites b cites a; pruning a and b while c survives refuses b (cited by
        c) and therefore a (cited by the surviving b)."""
        fill(buf, reasoning("a"), reasoning("b", "a"), reasoning("c", "b"))
        report = buf.prune(["a", "b"], reason="stale")
        assert dict(report) == {
            "a": marked(Refusal.REFERENCED),
            "b": marked(Refusal.REFERENCED),
        }
        assert window(buf) == ["a", "b", "c"]

    def test_a_protected_id_in_the_request_protects_what_it_cites(self, buf: Buffer) -> None:
        """The seed's sketch checks ids against the survivors known before the
        request: a negative result n citing r, both requested, would prune r and
        leave n dangling. Here n is refused, survives, and so r is refused too."""
        fill(buf, reasoning("r"), entry("n", Kind.REASONING, "r failed on retry", ["r"]))
        report = buf.prune(["r", "n"], reason="stale")
        assert dict(report) == {
            "r": marked(Refusal.REFERENCED),
            "n": marked(Refusal.NEGATIVE),
        }
        assert window(buf) == ["r", "n"]

    def test_independent_ids_are_decided_independently(self, buf: Buffer) -> None:
        """A refusal of one id does not refuse an unrelated id in the same request."""
        fill(buf, reasoning("a"), entry("n", Kind.NEGATIVE), reasoning("x"), reasoning("y", "x"))
        report = buf.prune(["a", "n", "x"], reason="stale")
        assert dict(report) == {
            "a": PRUNED,
            "n": marked(Refusal.PROTECTED),
            "x": marked(Refusal.REFERENCED),
        }


class TestRevalidation:
    def test_survivor_appended_meanwhile_keeps_the_staged_entry(self, buf: Buffer) -> None:
        """An entry staged for removal that a new survivor cites before its grace
        point is kept alive at apply time: refused REFERENCED and logged."""
        fill(buf, reasoning("t"))
        with buf.snapshot():
            assert buf.prune(["t"], reason="stale")["t"] == DEFERRED
            buf.append(reasoning("v", "t"))
            refused_before = buf.stats().refusals.get(Refusal.REFERENCED, 0)
        assert window(buf) == ["t", "v"]
        assert "t" not in buf.tombstones
        assert buf.staged() == {}
        last = buf.log[-1]
        assert (last.op, last.outcome, last.version) == ("remove", "refused", None)
        assert last.detail["refused"] == {"t": "referenced"}
        assert buf.stats().refusals[Refusal.REFERENCED] == refused_before + 1
        with buf.snapshot() as snap:
            assert snap.is_stale("t")  # refused removal leaves the mark

    def test_rewritten_staged_entry_is_not_removed(self, buf: Buffer) -> None:
        """An entry changed after it was staged is refused CONFLICT at apply time."""
        from quiesce import EditPlan, Rewrite

        fill(buf, reasoning("t"))
        with buf.snapshot():
            buf.prune(["t"], reason="stale")
            assert buf.edit(EditPlan([Rewrite("t", "refreshed")], reason="update")).applied
        assert window(buf) == ["t"]
        assert buf.log[-1].detail["refused"] == {"t": "conflict"}
