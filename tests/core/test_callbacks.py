"""Callbacks are untrusted (issue 11, defects 3 and 4, and "beyond the list").

A user callback — the policy's negative classifier, a log sink — may raise,
or call back into the buffer it serves, at the worst moment: while the buffer
is writing. Neither may break an invariant: a write from inside a write
raises :class:`ReentrantWrite` before it changes anything (never a corrupt
log), a classifier that raises is answered fail-safe (the entry is kept,
refused ``NEGATIVE``), escalated, logged and counted in ``stats()``, and no
reader, scheduler or ``open_buffer`` body ever sees the callback's error.

Sync tests need no event loop; the runtime ones run on asyncio and trio.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import anyio
import pytest

from quiesce import (
    Buffer,
    EditPlan,
    Entry,
    EscalationKind,
    Kind,
    LogRecord,
    LogWriteError,
    Policy,
    Prune,
    ReentrantWrite,
    Refusal,
    SQLiteLog,
    Status,
    open_buffer,
)


def step(entry_id: str, body: str | None = None) -> Entry:
    return Entry(entry_id, Kind.REASONING, body or f"looked at {entry_id}")


class Classifier:
    """A negative classifier whose behaviour a test switches: ``act`` runs on
    every call (it may write to the buffer, or raise) and what it raised into
    the buffer is kept in ``inner``."""

    def __init__(self) -> None:
        self.act: Callable[[Entry], bool] | None = None
        self.inner: list[BaseException] = []

    def __call__(self, entry: Entry) -> bool:
        if self.act is None:
            return False
        return self.act(entry)


def callback_escalations(buf: Buffer) -> list[dict[str, object]]:
    return [
        dict(r.detail["data"])
        for r in buf.log
        if r.op == "escalate" and "callback" in r.detail["data"]
    ]


class TestReentrantWrite:
    """Defect 3: a classifier that writes to the buffer while it is being written."""

    @pytest.mark.parametrize(
        "write", ["mark_stale", "append", "prune", "edit", "apply_due", "escalate", "flush"]
    )
    def test_a_write_from_the_classifier_raises_and_the_log_recovers(
        self, tmp_path: Path, write: str
    ) -> None:
        path = tmp_path / "log.sqlite"
        classify = Classifier()
        log = SQLiteLog(path)
        buf = Buffer(log=log, policy=Policy(negative=classify))
        for i in ("a", "b", "c"):
            buf.append(step(i))
        calls = {
            "mark_stale": lambda: buf.mark_stale("b", "from the classifier"),
            "append": lambda: buf.append(step("x")),
            "prune": lambda: buf.prune(["b"], reason="from the classifier"),
            "edit": lambda: buf.edit(EditPlan([Prune("b")], reason="from the classifier")),
            "apply_due": buf.apply_due,
            "escalate": lambda: buf.escalate(EscalationKind.BACKLOG, "from the classifier"),
            "flush": buf.flush,
        }

        def act(entry: Entry) -> bool:
            try:
                calls[write]()
            except ReentrantWrite as exc:
                classify.inner.append(exc)
            return False

        classify.act = act
        before = buf.version
        report = buf.prune(["a"], reason="stale")
        assert report["a"].status is Status.PRUNED
        # asked twice: when the prune decides, and when the removal is re-checked
        assert len(classify.inner) == 2
        what = "flush()" if write == "flush" else "a write to the buffer"
        for exc in classify.inner:
            assert str(exc).startswith(f"{what} from inside its policy classifier")
        assert "b" not in buf.head().marks and "x" not in buf.head().live
        assert buf.version == before + 2  # the prune's mark, then its removal
        numbers = [r.version for r in buf.log if r.version is not None]
        assert numbers == sorted(set(numbers)), "two records publish one version"
        buf._check()
        buf.flush()
        log.close()
        with SQLiteLog(path) as again:
            copy = Buffer(log=again)
            assert [e.id for e in copy.head()] == [e.id for e in buf.head()]
            assert dict(copy.tombstones) == dict(buf.tombstones)
            copy._check()

    def test_a_reentrant_write_let_through_is_a_callback_failure(self) -> None:
        classify = Classifier()
        buf = Buffer(policy=Policy(negative=classify))
        buf.append(step("a"))
        buf.append(step("b"))

        def act(entry: Entry) -> bool:
            buf.mark_stale("b", "from the classifier")  # raises ReentrantWrite
            return False

        classify.act = act
        report = buf.prune(["a"], reason="stale")
        assert report["a"].status is Status.MARKED
        assert report["a"].refusal is Refusal.NEGATIVE
        assert "a" in buf.head().live and "b" not in buf.head().marks
        assert buf.stats().callback_errors == 1
        assert callback_escalations(buf) == [
            {"callback": "policy.protection", "id": "a", "error": "ReentrantWrite"}
        ]
        buf._check()

    def test_other_threads_still_wait_for_the_lock_while_a_callback_runs(self) -> None:
        """The guard refuses only the thread running the callback: a worker
        thread's write waits for the outer write and then lands."""
        classify = Classifier()
        buf = Buffer(policy=Policy(negative=classify))
        buf.append(step("a"))
        buf.append(step("b"))
        done: list[object] = []

        def worker() -> None:
            done.append(buf.mark_stale("b", "from a worker"))

        def act(entry: Entry) -> bool:
            if threads:
                return False
            t = threading.Thread(target=worker)
            t.start()
            t.join(0.2)  # it waits for the write lock the prune holds
            assert t.is_alive()
            threads.append(t)
            return False

        threads: list[threading.Thread] = []
        classify.act = act
        buf.prune(["a"], reason="stale")
        threads[0].join(10)
        assert len(done) == 1 and "b" in buf.head().marks
        buf._check()


class FlushingSink:
    """A sink whose ``write`` calls back into the buffer it serves."""

    def __init__(self) -> None:
        self.records: list[LogRecord] = []
        self.buf: Buffer | None = None
        self.inner: list[BaseException] = []
        self.reenter = True

    def load(self) -> Sequence[LogRecord]:
        return []

    def write(self, records: Sequence[LogRecord]) -> None:
        if self.reenter and self.buf is not None:
            self.reenter = False
            try:
                self.buf.flush()
            except ReentrantWrite as exc:
                self.inner.append(exc)
                raise
        self.records.extend(records)

    def close(self) -> None:
        pass


def test_a_sink_that_flushes_from_its_write_gets_an_error_not_a_deadlock() -> None:
    sink = FlushingSink()
    buf = Buffer(log=sink)
    sink.buf = buf
    buf.append(step("a"))
    errors: list[BaseException] = []

    def flush() -> None:
        try:
            buf.flush()
        except BaseException as exc:
            errors.append(exc)

    t = threading.Thread(target=flush, daemon=True)
    t.start()
    t.join(10)
    assert not t.is_alive(), "flush() deadlocked on its own sink"
    assert len(sink.inner) == 1 and isinstance(errors[0], LogWriteError)
    assert str(sink.inner[0]).startswith("flush() from inside the log sink's write")
    assert buf.pending_records == 1  # nothing lost: the next flush writes it
    buf.flush()
    assert [r.op for r in sink.records] == ["append"] and buf.pending_records == 0


class TestClassifierRaises:
    """Defect 4: a classifier that raises during the re-check of a due removal."""

    def test_an_unrelated_readers_exit_never_raises_the_classifiers_error(self) -> None:
        classify = Classifier()
        buf = Buffer(policy=Policy(negative=classify))
        buf.append(step("a"))
        buf.append(step("b"))
        reader = buf.snapshot()
        reader.__enter__()
        assert buf.prune(["a"], reason="stale")["a"].status is Status.DEFERRED

        def act(entry: Entry) -> bool:
            raise TimeoutError("classifier timed out")

        classify.act = act
        reader.__exit__(None, None, None)  # the last blocking pin: the re-check runs here
        assert "a" in buf.head().live and "a" in buf.head().marks
        assert buf.staged() == {}
        assert buf.stats().callback_errors == 1
        assert buf.stats().refusals[Refusal.NEGATIVE] == 1
        (esc,) = buf.drain_escalations()
        assert esc.kind is EscalationKind.REFUSED_EDIT
        assert esc.refusals == (Refusal.NEGATIVE,)
        assert esc.data == {"callback": "policy.protection", "id": "a", "error": "TimeoutError"}
        assert "classifier timed out" in esc.detail
        buf._check(expect_no_pins=True)

    def test_a_classifier_that_raises_in_prune_keeps_the_entry(self) -> None:
        classify = Classifier()
        buf = Buffer(policy=Policy(negative=classify))
        buf.append(step("a"))

        def act(entry: Entry) -> bool:
            raise RuntimeError("model unavailable")

        classify.act = act
        report = buf.prune(["a"], reason="stale")
        assert report["a"].status is Status.MARKED
        assert report["a"].refusal is Refusal.NEGATIVE
        report2 = buf.edit(EditPlan([Prune("a")], reason="stale"))
        assert not report2.applied and report2.refusals == (Refusal.NEGATIVE,)
        assert buf.stats().callback_errors == 2
        assert "a" in buf.head().live
        buf._check()

    def test_the_count_survives_recovery(self) -> None:
        from conftest import ListSink

        classify = Classifier()
        sink = ListSink()
        buf = Buffer(log=sink, policy=Policy(negative=classify))
        buf.append(step("a"))
        classify.act = lambda e: 1 / 0 > 0
        buf.prune(["a"], reason="stale")
        buf.flush()
        assert Buffer(log=ListSink(sink.records)).stats().callback_errors == 1


@pytest.mark.anyio
async def test_the_scheduler_and_the_body_survive_a_raising_classifier() -> None:
    """Under ``open_buffer`` the re-check runs in the barrier scheduler: the
    failure is escalated and counted, the scheduler goes on applying later
    removals, and the body ends normally (no exception group)."""
    classify = Classifier()
    async with open_buffer(policy=Policy(negative=classify)) as buf:
        for i in ("a", "b", "c"):
            buf.append(step(i))
        got = []
        with buf.snapshot():
            assert buf.prune(["a"], reason="stale")["a"].status is Status.DEFERRED

            def act(entry: Entry) -> bool:
                if entry.id == "a":
                    raise TimeoutError("classifier timed out")
                return False

            classify.act = act
        await buf.quiesce()
        assert "a" in buf.head().live and buf.stats().callback_errors == 1
        # the scheduler is alive: a later removal is still applied
        with buf.snapshot():
            assert buf.prune(["b"], reason="stale")["b"].status is Status.DEFERRED
        await buf.quiesce()
        assert "b" not in buf.head().live
        async with anyio.create_task_group() as tg:

            async def first() -> None:
                async for esc in buf.escalations():
                    got.append(esc)
                    return

            tg.start_soon(first)
        assert got[0].data["callback"] == "policy.protection"
        buf._check(expect_no_pins=True)


@pytest.mark.anyio
async def test_a_pruner_that_raises_changes_nothing() -> None:
    """``run_pruner`` with a pruner that raises: the error reaches the caller
    as itself, the snapshot it pinned is released, and nothing was submitted."""
    from quiesce import Snapshot, run_pruner

    async def pruner(snap: Snapshot) -> EditPlan | None:
        await anyio.sleep(0)
        raise TimeoutError("model timed out")

    async with open_buffer() as buf:
        buf.append(step("a"))
        before = (buf.version, len(buf.log))
        with pytest.raises(TimeoutError, match=r"^model timed out$"):
            await run_pruner(buf, pruner)
        assert (buf.version, len(buf.log)) == before
        assert buf.stats().pinned == 0
        buf._check(expect_no_pins=True)
