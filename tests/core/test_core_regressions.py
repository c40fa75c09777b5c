"""Issue 11's core defects, one regression test (or a few) each.

* 11: a failing disk no longer floods the log: one removal-intent record per
  staged group, however many times the scheduler retries during the outage.
* 10: a mark made after a plan's ``base`` on an entry the plan touches is a
  ``CONFLICT``; a rewrite keeps the entry's mark, shown as a judgment of the
  earlier content (the mark's version predates the rewrite; the edit's log
  record lists it under ``marks_kept``).
* 9: a plan may not mint entries of protected or immutable kinds (a
  ``Summarize`` into a system instruction), unless the host asks with an
  explicit override.
* 13: the small ones, each a precise ``QuiesceError`` at the call (or, for
  the CLI, one line on stderr and exit status 2).

Sync tests need no event loop; the runtime one runs on asyncio and trio.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

import anyio
import pytest

from quiesce import (
    Buffer,
    EditPlan,
    Entry,
    EscalationKind,
    InvalidArgument,
    InvalidType,
    Kind,
    LogRecord,
    LogWriteError,
    Move,
    Override,
    Refusal,
    Rewrite,
    Status,
    Summarize,
    open_buffer,
)


class OutageSink:
    """An in-memory ``LogSink`` whose disk is down while ``down`` is set (a
    write then stores nothing and raises, as the ``LogSink`` contract asks)."""

    def __init__(self) -> None:
        self.records: list[LogRecord] = []
        self.down = False
        self.failed = 0

    def load(self) -> Sequence[LogRecord]:
        return list(self.records)

    def write(self, records: Sequence[LogRecord]) -> None:
        if self.down:
            self.failed += 1
            raise OSError("no space left on device")
        self.records.extend(records)

    def close(self) -> None:
        pass


def step(entry_id: str, *refs: str) -> Entry:
    return Entry(entry_id, Kind.REASONING, f"looked at {entry_id}", refs)


def intents(records: Sequence[LogRecord]) -> list[LogRecord]:
    return [r for r in records if r.op == "tombstone"]


class TestOneIntentPerGroup:
    def test_retries_during_an_outage_log_one_intent(self) -> None:
        sink = OutageSink()
        buf = Buffer(log=sink)
        for i in ("a", "b", "c"):
            buf.append(step(i))
        assert buf.prune(["a"], reason="stale")["a"].status is Status.PRUNED
        assert buf.prune(["b"], reason="stale")["b"].status is Status.PRUNED
        with buf.snapshot():
            assert buf.prune(["c"], reason="stale")["c"].status is Status.DEFERRED
            sink.down = True
        # the unpin tried once (sync mode); now the scheduler's retries
        for _ in range(30):
            with pytest.raises(LogWriteError):
                buf.apply_due()
        assert sink.failed == 31
        assert [r.ids for r in intents(buf.log)] == [("a",), ("b",), ("c",)]
        assert list(buf.staged()) == ["c"]
        sink.down = False
        assert buf.apply_due() == ("c",)
        buf.flush()
        assert [r.ids for r in intents(sink.records)] == [("a",), ("b",), ("c",)]
        buf._check(expect_no_pins=True)
        recovered = OutageSink()
        recovered.records = list(sink.records)
        again = Buffer(log=recovered)
        assert [e.id for e in again.head()] == [] and set(again.tombstones) == {"a", "b", "c"}
        again._check(expect_no_pins=True)

    def test_a_group_staged_during_the_outage_gets_its_own_intent_once(self) -> None:
        sink = OutageSink()
        buf = Buffer(log=sink)
        for i in ("a", "b"):
            buf.append(step(i))
        with buf.snapshot():
            buf.prune(["a"], reason="stale")
            sink.down = True
        for _ in range(5):
            with pytest.raises(LogWriteError):
                buf.apply_due()
        sink.down = False  # prune flushes first: let it, then fail again
        with buf.snapshot():
            buf.prune(["b"], reason="stale")
            sink.down = True
        for _ in range(5):
            with pytest.raises(LogWriteError):
                buf.apply_due()
        assert [r.ids for r in intents(buf.log)] == [("a",), ("b",)]
        sink.down = False
        buf.apply_due()
        assert not buf.head().live and not buf.staged()
        buf._check(expect_no_pins=True)


@pytest.mark.anyio
async def test_the_scheduler_retrying_through_an_outage_logs_one_intent() -> None:
    sink = OutageSink()
    async with open_buffer(log=sink) as buf:
        buf.append(step("a"))
        buf.append(step("b"))
        with buf.snapshot():
            buf.prune(["a"], reason="stale")
            sink.down = True
        while sink.failed < 5:  # the scheduler retries on its own
            await anyio.sleep(0.01)
        assert len(intents(buf.log)) == 1
        sink.down = False
        await buf.quiesce()
        assert "a" not in buf.head().live
    assert len(intents(sink.records)) == 1


class TestMarksAndRewrites:
    """Defect 10."""

    def test_a_mark_after_base_on_a_touched_entry_is_a_conflict(self) -> None:
        buf = Buffer()
        buf.append(step("a"))
        buf.append(step("b"))
        base = buf.version  # the planner looks here ...
        buf.mark_stale("a", "superseded by the new test run")  # ... then a judgment lands
        report = buf.edit(EditPlan([Rewrite("a", "looked at a, again")], reason="x", base=base))
        assert not report.applied and report.refusals == (Refusal.CONFLICT,)
        assert report.escalation is not None
        assert report.escalation.kind is EscalationKind.REFUSED_EDIT
        assert buf.head().live["a"].entry.body == "looked at a"
        # an entry the plan does not touch may be marked meanwhile
        buf.mark_stale("b", "old")
        assert not buf.edit(EditPlan([Rewrite("a", "x")], reason="x", base=base)).applied
        base2 = buf.version
        assert buf.edit(EditPlan([Rewrite("a", "x2")], reason="x", base=base2)).applied
        buf._check()

    def test_a_rewrite_keeps_the_mark_as_a_judgment_of_the_earlier_content(self) -> None:
        from conftest import ListSink

        sink = ListSink()
        buf = Buffer(log=sink)
        buf.append(step("a"))
        mark = buf.mark_stale("a", "contradicted by the tool output")
        report = buf.edit(EditPlan([Rewrite("a", "looked at a, corrected")], reason="fix"))
        assert report.applied
        with buf.snapshot() as snap:
            assert snap.mark("a") == mark  # kept, unchanged (marks are monotone) ...
            assert snap.mark("a").version < buf.head().live["a"].changed  # ... and older
        record = [r for r in buf.log if r.op == "edit"][-1]
        assert record.detail["marks_kept"] == {"a": mark.version}
        buf.flush()
        again = Buffer(log=ListSink(sink.records))
        assert again.head().marks["a"] == mark
        assert again.head().live["a"].entry.body == "looked at a, corrected"
        again._check()


class TestPlansCannotMintProtectedEntries:
    """Defect 9."""

    def system(self, entry_id: str = "s") -> Entry:
        return Entry(entry_id, Kind.INSTRUCTION, "you may delete files", meta={"role": "system"})

    def test_a_summary_into_a_system_instruction_is_refused_and_escalated(self) -> None:
        buf = Buffer()
        buf.append(step("a"))
        buf.append(step("b"))
        plan = EditPlan([Summarize(("a", "b"), self.system())], reason="tidy", actor="model")
        report = buf.edit(plan)
        assert not report.applied and report.refusals == (Refusal.IMMUTABLE,)
        assert report.escalation is not None and report.escalation.plan is plan
        assert "only the host may" in report.escalation.detail
        assert [e.id for e in buf.head()] == ["a", "b"]
        buf._check()

    @pytest.mark.parametrize(
        ("kind", "refusal"),
        [
            (Kind.CONSTRAINT, Refusal.IMMUTABLE),
            (Kind.PROHIBITION, Refusal.PROTECTED),
            (Kind.NEGATIVE, Refusal.PROTECTED),
        ],
    )
    def test_every_protected_kind_is_refused(self, kind: Kind, refusal: Refusal) -> None:
        buf = Buffer()
        buf.append(step("a"))
        into = Entry("s", kind, "never run rm -rf")
        report = buf.edit(EditPlan([Summarize(("a",), into)], reason="tidy"))
        assert report.refusals == (refusal,)

    @pytest.mark.parametrize(
        ("actor", "override", "applied"),
        [
            ("host", True, True),
            ("host", False, False),
            ("model", True, False),
            (None, True, False),
        ],
    )
    def test_only_the_host_with_an_override_may(
        self, actor: str | None, override: bool, applied: bool
    ) -> None:
        buf = Buffer()
        buf.append(step("a"))
        plan = EditPlan(
            [Summarize(("a",), self.system())],
            reason="the host installs its rule",
            actor=actor,
            override=Override("explicit", 0) if override else None,
        )
        assert buf.edit(plan).applied is applied
        assert ("s" in buf.head().live) is applied
        buf._check()


class TestSmallOnes:
    """Defect 13: each bad call is a precise QuiesceError at the call."""

    def test_escalate_with_a_bad_kind_or_data(self) -> None:
        buf = Buffer()
        with pytest.raises(InvalidType, match=r"^kind must be an EscalationKind, not str$"):
            buf.escalate("backlog", "too many")  # type: ignore[arg-type]
        with pytest.raises(InvalidType, match=r"^data must be a mapping, not int$"):
            buf.escalate(EscalationKind.BACKLOG, "too many", data=5)  # type: ignore[arg-type]
        with pytest.raises(InvalidType, match=r"^data keys must be str$"):
            buf.escalate(EscalationKind.BACKLOG, "too many", data={1: "x"})  # type: ignore[dict-item]
        with pytest.raises(InvalidArgument, match=r"^data cannot go to the log as JSON"):
            buf.escalate(EscalationKind.BACKLOG, "too many", data={"x": object()})
        with pytest.raises(InvalidArgument):
            buf.escalate(EscalationKind.BACKLOG, "")
        assert len(buf.log) == 0 and buf.version == 0
        esc = buf.escalate(EscalationKind.BACKLOG, "too many", data={"deferred": 3})
        assert esc.data == {"deferred": 3} and len(buf.log) == 1

    def test_buffer_arguments(self) -> None:
        with pytest.raises(InvalidArgument, match=r"^escalation_capacity must be >= 0, got -1$"):
            Buffer(escalation_capacity=-1)
        with pytest.raises(InvalidType, match=r"^escalation_capacity must be an int, not str$"):
            Buffer(escalation_capacity="10")  # type: ignore[arg-type]
        with pytest.raises(InvalidType, match=r"^clock must be a callable returning seconds"):
            Buffer(clock=5)  # type: ignore[arg-type]
        assert Buffer(escalation_capacity=0).stats().escalations == 0

    def test_duplicate_moves_of_one_id(self) -> None:
        with pytest.raises(InvalidArgument, match=r"^id 'a' is moved twice$"):
            EditPlan([Move("a"), Move("a", before="b")], reason="reorder")


def run_cli(*args: str) -> tuple[int, str, str]:
    import subprocess

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
    proc = subprocess.run(
        [sys.executable, "-m", "quiesce", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    return proc.returncode, proc.stdout, proc.stderr


class TestCommandLine:
    """Defect 13, the CLI ones: one line on stderr, exit status 2."""

    def test_demo_tick_nan(self) -> None:
        rc, _out, err = run_cli("demo", "--tick", "nan", "--plain")
        assert rc == 2
        assert err == "quiesce demo: error: --tick must be finite and >= 0, not nan\n"

    def test_demo_log_on_an_existing_log(self, tmp_path: Path) -> None:
        path = tmp_path / "demo.sqlite"
        demo = ("demo", "--tick", "0", "--turns", "40", "--plain", "--log", str(path))
        rc, _out, _err = run_cli(*demo)
        assert rc == 0
        rc, _out, err = run_cli(*demo)
        assert rc == 2
        assert err.count("\n") == 1
        assert err.startswith(f"quiesce demo: error: --log {path} exists already")

    @pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs a FIFO (POSIX)")
    def test_inspect_on_a_fifo(self, tmp_path: Path) -> None:
        fifo = tmp_path / "log.fifo"
        os.mkfifo(fifo)
        rc, _out, err = run_cli("inspect", str(fifo))
        assert rc == 2
        assert err == f"quiesce inspect: error: {fifo} is not a regular file\n"
