"""Host retraction: the one, explicit and logged exception to invariant 4.

A ``Prune`` in an :class:`EditPlan` whose actor is ``"host"`` and which
carries an :class:`Override` removes an entry of any kind — a user message
(``INSTRUCTION``), a constraint, a prohibition, a negative result — at its
grace point, with a tombstone whose actor is ``"host"`` and the ids listed
under ``retracted`` in the edit record and in the removal record. Everything
else stays refused: a model plan, a host plan without an override, a plain
``prune()``, a retraction that would leave a dangling reference. Every
checker (``Buffer._check``, ``check_history``, recovery) accepts exactly that
exception and flags a forged one.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import anyio
import pytest

import quiesce._core.edit as edit_mod
from _settle import all_blocked
from quiesce import (
    Buffer,
    EditPlan,
    Entry,
    JsonlLog,
    Kind,
    LogFormatError,
    LogRecord,
    Move,
    Override,
    Prune,
    Refusal,
    Rewrite,
    SQLiteLog,
    Status,
    Summarize,
    open_buffer,
)
from quiesce.testing import AnomalyKind, Recorder, check_history

OVERRIDE = Override("the user undid their message", 7)


def retract(
    *ids: str, actor: str | None = "host", override: Override | None = OVERRIDE
) -> EditPlan:
    return EditPlan([Prune(i) for i in ids], reason="undo", actor=actor, override=override)


def filled(buf: Buffer) -> Buffer:
    buf.append(Entry("sys", Kind.CONSTRAINT, "answer in English"))
    buf.append(Entry("u1", Kind.INSTRUCTION, "list the pods"))
    buf.append(Entry("r1", Kind.REASONING, "I will run kubectl", refs=("u1",)))
    buf.append(Entry("no", Kind.PROHIBITION, "do not touch /etc"))
    buf.append(Entry("neg", Kind.TOOL_OUTPUT, "the deploy failed"))  # negative by the classifier
    buf.append(Entry("u2", Kind.INSTRUCTION, "now the services"))
    return buf


class TestStillRefused:
    @pytest.mark.parametrize(
        ("eid", "refusal"),
        [
            ("u2", Refusal.IMMUTABLE),
            ("sys", Refusal.IMMUTABLE),
            ("no", Refusal.PROTECTED),
            ("neg", Refusal.NEGATIVE),
        ],
    )
    @pytest.mark.parametrize(
        ("actor", "override"),
        [("model", OVERRIDE), (None, OVERRIDE), ("host", None), ("model", None)],
    )
    def test_not_a_host_override(
        self, eid: str, refusal: Refusal, actor: str | None, override: Override | None
    ) -> None:
        """A model plan (with or without an override) and a host plan without
        one are refused as before: nothing changes but the log."""
        buf = filled(Buffer())
        before = buf.version
        report = buf.edit(retract(eid, actor=actor, override=override))
        assert not report.applied and report.refusals == (refusal,)
        assert buf.version == before and eid in buf.head().live and not buf.staged()
        assert buf.log[-1].outcome == "refused" and "retracted" not in buf.log[-1].detail
        buf._check(expect_no_pins=True)

    @pytest.mark.parametrize("eid", ["u2", "sys", "no", "neg"])
    def test_prune_is_refused(self, eid: str) -> None:
        """``prune()`` has no host form: the same ids are refused there."""
        buf = filled(Buffer())
        out = buf.prune([eid], reason="undo")[eid]
        assert out.status is not Status.PRUNED and out.refusal is not None
        assert eid in buf.head().live and eid not in buf.tombstones
        buf._check(expect_no_pins=True)

    def test_a_cited_entry_needs_its_citers_in_the_plan(self) -> None:
        """No dangling reference, even for the host: ``r1`` cites ``u1``."""
        buf = filled(Buffer())
        report = buf.edit(retract("u1"))
        assert not report.applied and report.refusals == (Refusal.REFERENCED,)
        assert report.escalation is not None
        assert report.escalation.detail == "'u1' would be removed but 'r1' cites it"
        report = buf.edit(retract("u1", "r1"))
        assert report.applied and set(report.removed) == {"u1", "r1"}
        assert buf.tombstones["u1"].actor == "host" and buf.tombstones["r1"].actor == "host"
        buf._check(expect_no_pins=True)

    def test_summaries_and_rewrites_get_no_exception(self) -> None:
        """The host retracts; it does not paraphrase a protected entry."""
        buf = filled(Buffer())
        into = Entry("s", Kind.SUMMARY, "the user asked things")
        plan = EditPlan([Summarize(("u2",), into)], reason="r", actor="host", override=OVERRIDE)
        assert buf.edit(plan).refusals == (Refusal.IMMUTABLE,)
        plan = EditPlan([Rewrite("no", "x")], reason="r", actor="host", override=OVERRIDE)
        assert buf.edit(plan).refusals == (Refusal.PROTECTED,)
        assert not buf.tombstones

    def test_readmission_still_needs_its_own_override(self) -> None:
        """A retracted user message's bytes are tombstoned: appending them
        again is a re-admission like any other."""
        from quiesce import ReadmissionRefused

        buf = filled(Buffer())
        assert buf.edit(retract("u2")).applied
        with pytest.raises(ReadmissionRefused):
            buf.append(Entry("u3", Kind.INSTRUCTION, "now the services"))


class TestRetracted:
    @pytest.mark.parametrize("eid", ["u2", "sys", "no", "neg"])
    def test_removed_at_the_grace_point(self, eid: str) -> None:
        """Staged (marked) now; a reader pinned before still sees the entry,
        unmarked, until it leaves; then removed, tombstoned as the host's, and
        logged as a retraction in the edit and the removal records."""
        buf = filled(Buffer())
        entry = buf.head().live[eid].entry
        with buf.snapshot() as old:
            report = buf.edit(retract(eid))
            assert report.applied and report.deferred == (eid,) and report.removed == ()
            buf._check()
            assert eid in old and not old.is_stale(eid) and old.resolve(eid) == entry
            with buf.snapshot() as new:
                assert new.is_stale(eid)  # readers after the edit see it going
            assert eid in buf.staged() and eid in buf.head().live
        assert eid not in buf.head().live
        tomb = buf.tombstones[eid]
        assert (tomb.actor, tomb.reason, tomb.kind) == ("host", "undo", entry.kind)
        assert tomb.content_hash == entry.content_hash
        edit_rec = next(r for r in buf.log if r.op == "edit")
        assert edit_rec.actor == "host" and edit_rec.detail["retracted"] == [eid]
        assert edit_rec.detail["plan"]["override"] == {
            "reason": "the user undid their message",
            "turn": 7,
        }
        remove_rec = buf.log[-1]
        assert remove_rec.op == "remove" and remove_rec.detail["retracted"] == [eid]
        assert [t["id"] for t in remove_rec.detail["tombstones"]] == [eid]
        buf._check(expect_no_pins=True)

    def test_other_ids_of_the_plan_are_not_retractions(self) -> None:
        """A summary in the same host plan still covers only removable
        entries, and only the pruned ids are listed as retracted."""
        buf = filled(Buffer())
        buf.append(Entry("t", Kind.TOOL_OUTPUT, "pod web-1 Running"))
        into = Entry("s", Kind.SUMMARY, "one pod runs")
        plan = EditPlan(
            [Prune("u2"), Summarize(("t",), into)], reason="undo", actor="host", override=OVERRIDE
        )
        report = buf.edit(plan)
        assert report.applied and set(report.removed) == {"u2", "t"}
        remove_rec = buf.log[-1]
        assert remove_rec.detail["retracted"] == ["u2"]
        buf._check(expect_no_pins=True)

    @pytest.mark.parametrize("meanwhile", ["moved", "cited"])
    def test_refused_at_the_grace_point_keeps_the_mark(self, meanwhile: str) -> None:
        """Re-validated when due like any removal: an immutable moved since,
        or cited by a new entry, stays — refused, logged — and keeps the
        retraction's mark (marks are monotone), the one mark an immutable
        entry can carry; every checker and recovery accept it. (Found by the
        seeded simulation.)"""
        buf = filled(Buffer())
        with buf.snapshot():
            assert buf.edit(retract("sys")).deferred == ("sys",)
            if meanwhile == "moved":
                assert buf.edit(EditPlan([Move("sys")], reason="to the end")).applied
            else:
                buf.append(Entry("why", Kind.REASONING, "English, as asked", refs=("sys",)))
        assert "sys" in buf.head().live and "sys" not in buf.tombstones
        assert buf.head().marks["sys"].reason == "undo"
        refusal = Refusal.CONFLICT if meanwhile == "moved" else Refusal.REFERENCED
        assert buf.log[-1].op == "remove" and buf.log[-1].detail["refused"] == {
            "sys": refusal.value
        }
        buf._check(expect_no_pins=True)
        assert Buffer(log=MemorySink(list(buf.log))).head().marks["sys"] == buf.head().marks["sys"]  # type: ignore[arg-type]

    def test_check_history_accepts_it(self) -> None:
        rec = Recorder(filled(Buffer()))
        with rec.snapshot() as snap:
            assert rec.edit(retract("u2")).applied
            snap.resolve("u2")
        assert "u2" in rec.buffer.tombstones
        assert check_history(rec.history()) == []


@pytest.mark.anyio
async def test_under_the_runtime(anyio_backend: str) -> None:
    """On asyncio and trio: a reader in flight holds the retraction back; the
    scheduler applies it once the reader leaves (nobody calls quiesce())."""
    async with open_buffer() as buf:
        filled(buf)
        pinned, leave = anyio.Event(), anyio.Event()
        seen: list[bool] = []

        async def reader() -> None:
            with buf.snapshot() as snap:
                pinned.set()
                await leave.wait()
                seen.append("u2" in snap and not snap.is_stale("u2"))

        async with anyio.create_task_group() as tg:
            tg.start_soon(reader)
            await pinned.wait()
            report = await buf.aedit(retract("u2"))
            assert report.deferred == ("u2",)
            await all_blocked()
            assert "u2" in buf.head().live
            leave.set()
        while "u2" not in buf.tombstones:
            await anyio.sleep(0)
        assert seen == [True]
        assert buf.tombstones["u2"].actor == "host"
        buf._check(expect_no_pins=True)


SINKS = {
    "sqlite": lambda p: SQLiteLog(p / "log.db"),
    "jsonl": lambda p: JsonlLog(p / "log.jsonl"),
}


@pytest.mark.parametrize("kind", sorted(SINKS))
class TestRecovery:
    def test_applied_retraction_recovers(self, kind: str, tmp_path: Path) -> None:
        buf = filled(Buffer(log=SINKS[kind](tmp_path)))
        assert buf.edit(retract("u2", "sys")).applied
        buf.flush()
        tombs = dict(buf.tombstones)
        buf.sink.close()  # type: ignore[union-attr]
        again = Buffer(log=SINKS[kind](tmp_path))
        assert dict(again.tombstones) == tombs
        assert "u2" not in again.head().live and "sys" not in again.head().live
        again._check(expect_no_pins=True)
        # the retracted immutables are no longer tracked: new ones are
        again.append(Entry("u3", Kind.INSTRUCTION, "and the nodes"))
        again._check(expect_no_pins=True)
        again.sink.close()  # type: ignore[union-attr]

    def test_staged_retraction_recovers_staged(self, kind: str, tmp_path: Path) -> None:
        """Staged behind a reader at the crash: it comes back staged, still a
        retraction, and applies on the recovered buffer."""
        buf = filled(Buffer(log=SINKS[kind](tmp_path)))
        with buf.snapshot():
            assert buf.edit(retract("u2")).deferred == ("u2",)
            buf.flush()
            buf.sink.close()  # type: ignore[union-attr]
            again = Buffer(log=SINKS[kind](tmp_path))
        assert again.staged() == buf.staged()
        again._check(expect_no_pins=True)
        assert again.apply_due() == ("u2",)
        assert again.tombstones["u2"].actor == "host"
        assert again.log[-1].detail["retracted"] == ["u2"]
        again._check(expect_no_pins=True)
        again.sink.close()  # type: ignore[union-attr]


def _records(buf: Buffer) -> list[LogRecord]:
    return list(buf.log)


class MemorySink:
    """A sink holding records in memory: to hand recovery a forged log."""

    def __init__(self, records: list[LogRecord]) -> None:
        self.records = records

    def load(self) -> list[LogRecord]:
        return list(self.records)

    def write(self, records: list[LogRecord]) -> None:
        self.records.extend(records)

    def close(self) -> None:
        pass


def _forge(rec: LogRecord, **detail: object) -> LogRecord:
    return rec._replace(detail={**rec.detail, **detail})


class TestForgeries:
    def test_recovery_refuses_a_removal_without_the_retraction(self) -> None:
        buf = filled(Buffer())
        assert buf.edit(retract("u2")).applied
        good = _records(buf)
        Buffer(log=MemorySink(good))._check(expect_no_pins=True)  # type: ignore[arg-type]
        forged = [_forge(r, retracted=[]) if r.op == "remove" else r for r in good]
        with pytest.raises(LogFormatError, match=r"\(remove\): protected 'u2' is removed$"):
            Buffer(log=MemorySink(forged))  # type: ignore[arg-type]

    def test_recovery_refuses_a_retraction_by_another_actor(self) -> None:
        buf = filled(Buffer())
        assert buf.edit(retract("u2")).applied
        forged = []
        for r in _records(buf):
            if r.op == "remove":
                tombs = [t | {"actor": "model"} for t in r.detail["tombstones"]]
                r = _forge(r, tombstones=tombs)
            forged.append(r)
        with pytest.raises(LogFormatError, match=r"\(remove\): protected 'u2' is removed$"):
            Buffer(log=MemorySink(forged))  # type: ignore[arg-type]

    def test_recovery_refuses_an_edit_claiming_a_retraction(self) -> None:
        """An edit record listing ``retracted`` must be a host plan with an
        override: one by a model, or without its override, is refused."""
        buf = filled(Buffer())
        with buf.snapshot():
            assert buf.edit(retract("u2")).deferred == ("u2",)
        good = _records(buf)
        applied = next(r for r in good if r.op == "edit")
        for forged_edit in (
            applied._replace(actor="model"),
            _forge(applied, plan={**applied.detail["plan"], "override": None}),
        ):
            forged = [forged_edit if r.op == "edit" else r for r in good]
            with pytest.raises(LogFormatError, match="is not a host plan with an override"):
                Buffer(log=MemorySink(forged))  # type: ignore[arg-type]

    def test_check_history_flags_a_retraction_without_its_override(self) -> None:
        rec = Recorder(filled(Buffer()))
        assert rec.edit(retract("u2")).applied
        history = rec.history()
        assert check_history(history) == []
        for change in ("actor", "override"):
            log = []
            for r in history.log:
                if r.op == "edit":
                    if change == "override":
                        plan = {**r.detail["plan"], "override": None}
                        r = _forge(r, plan=plan)
                    else:
                        r = r._replace(actor="model")
                log.append(r)
            found = check_history(dataclasses.replace(history, log=tuple(log)))
            assert [a.kind for a in found] == [AnomalyKind.PROTECTED_REMOVED]
            assert found[0].detail == "protected INSTRUCTION 'u2' removed in version 8"
        # and without the removal record's list (the recorder also saw that
        # last record change: LOG_REWRITTEN besides)
        log = tuple(_forge(r, retracted=[]) if r.op == "remove" else r for r in history.log)
        found = check_history(dataclasses.replace(history, log=log))
        assert AnomalyKind.PROTECTED_REMOVED in [a.kind for a in found]

    def test_a_model_that_retracts_is_caught(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Break the engine: the model is taken for the host. Its retraction
        is applied, and every checker catches it (tombstone actor, records)."""
        monkeypatch.setattr(edit_mod, "HOST_ACTOR", "model")
        rec = Recorder(filled(Buffer()))
        assert rec.edit(retract("u2", actor="model")).applied
        found = check_history(rec.history())
        assert [a.kind for a in found] == [AnomalyKind.PROTECTED_REMOVED]
        with pytest.raises(AssertionError, match=r"protected 'u2' was removed \(invariant 4\)"):
            rec.buffer._check()
        with pytest.raises(LogFormatError):
            Buffer(log=MemorySink(list(rec.buffer.log)))  # type: ignore[arg-type]


@pytest.mark.anyio
async def test_a_pruner_may_not_speak_as_the_host(anyio_backend: str) -> None:
    """A model-driven pruner returning a host plan is refused before anything
    is submitted: the host's override is the host application's alone.
    (asyncio and trio.)"""
    from quiesce import InvalidArgument, run_pruner

    buf = filled(Buffer())

    async def impostor(snap: object) -> EditPlan:
        return retract("u2")

    version, log = buf.version, len(buf.log)
    with pytest.raises(
        InvalidArgument, match=r"^a pruner's plan may not claim the host actor 'host'; "
    ):
        await run_pruner(buf, impostor)
    assert buf.version == version and len(buf.log) == log and "u2" in buf.head().live
    buf._check(expect_no_pins=True)
