"""``quiesce.AsyncBuffer``: the one async face of ``open_buffer()``'s
``RuntimeBuffer`` and ``open_shared_buffer()``'s ``SharedBuffer``.

Both implement it (checked at run time here, statically by ``mypy --strict
src`` in ``quiesce._protocol``), and one scenario — appends, a mark, a prune
held back by a pinned reader, a refused and an applied edit, an escalation,
bad input, a flush and a reopen — gives the same reports on a runtime buffer
over a real SQLite file, on a shared sequencer and on a shared replica (the
private PostgreSQL server of the tests). ``run_pruner`` on a plain
``Buffer`` gets the same face, with its flush in a worker thread. Every test
runs on asyncio and trio.
"""

from __future__ import annotations

import inspect
import threading
import typing
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from quiesce import (
    AsyncBuffer,
    Buffer,
    DanglingReference,
    EditPlan,
    Entry,
    EscalationKind,
    InvalidType,
    Kind,
    Prune,
    Refusal,
    Rewrite,
    RuntimeBuffer,
    Snapshot,
    SQLiteLog,
    Status,
    open_buffer,
    open_shared_buffer,
    run_pruner,
)
from quiesce._protocol import async_buffer
from quiesce._shared import SharedBuffer
from quiesce.integrations._glue import check_setup

FAST = {"lease": 3.0, "poll": 0.2, "timeout": 10.0}

#: the protocol's members: properties, sync methods, async methods
PROPERTIES = ("version", "tombstones")
SYNC = ("head", "snapshot", "staged", "escalations")
#: sync members added by issue 24 (SharedBuffer gets open_stream from the
#: shared buffer's part of that issue: checked on it once it has one)
STREAMS = ("open_stream",)
ASYNC = ("aappend", "amark_stale", "aprune", "aedit", "aescalate", "aflush", "quiesce")


def _unpacked(fn: Callable[..., Any], p: inspect.Parameter) -> tuple[str, ...] | None:
    """The keys of the TypedDict a ``**p: Unpack[TD]`` parameter of ``fn``
    takes (``StreamOptions``, ``PruneOptions``), else None."""
    if p.kind is not inspect.Parameter.VAR_KEYWORD:
        return None
    hint = typing.get_type_hints(fn, include_extras=True).get(p.name)
    if typing.get_origin(hint) is not typing.Unpack:
        return None
    (options,) = typing.get_args(hint)
    return tuple(options.__annotations__)


class TestShape:
    """Both classes have every member, with the protocol's signature."""

    @pytest.mark.parametrize("cls", [RuntimeBuffer, SharedBuffer])
    def test_members_and_signatures(self, cls: type) -> None:
        """Each member exists with the protocol's kind (property, sync or
        async); every parameter of the protocol's method is accepted the same
        way (kind, default; options taken as ``**options: Unpack[TD]`` may be
        spelled out as keywords with defaults), and any extra one has a
        default."""
        for name in PROPERTIES:
            assert isinstance(inspect.getattr_static(cls, name), property), name
        streams = STREAMS if cls is RuntimeBuffer or hasattr(cls, "open_stream") else ()
        for name in SYNC + streams + ASYNC:
            want = inspect.signature(getattr(AsyncBuffer, name))
            impl = getattr(cls, name)
            assert inspect.iscoroutinefunction(impl) == (name in ASYNC), name
            have = inspect.signature(impl).parameters
            for p in want.parameters.values():
                keys = _unpacked(getattr(AsyncBuffer, name), p)
                if keys is not None and p.name not in have:
                    # the options spelled out: each a keyword with a default
                    for key in keys:
                        assert key in have, f"{cls.__name__}.{name} lacks {key}"
                        assert have[key].kind is inspect.Parameter.KEYWORD_ONLY, key
                        assert have[key].default is not inspect.Parameter.empty, key
                    continue
                assert p.name in have, f"{cls.__name__}.{name} lacks {p.name}"
                assert (have[p.name].kind, have[p.name].default) == (p.kind, p.default), (
                    f"{cls.__name__}.{name}({p.name})"
                )
            extra = [p for n, p in have.items() if n not in want.parameters]
            assert all(p.default is not inspect.Parameter.empty for p in extra), name

    @pytest.mark.anyio
    async def test_runtime_buffer_is_one(self, anyio_backend: str) -> None:
        async with open_buffer() as buf:
            assert isinstance(buf, AsyncBuffer)
            assert async_buffer(buf, "x") is buf
        assert not isinstance(Buffer(), AsyncBuffer)  # no async writes of its own

    @pytest.mark.anyio
    async def test_shared_buffer_is_one(self, pg_dsn: str, anyio_backend: str) -> None:
        async with open_shared_buffer(pg_dsn, "shape", **FAST) as shared:
            assert isinstance(shared, AsyncBuffer)
            assert check_setup(shared, None, "QuiesceMiddleware") is shared

    def test_anything_else_is_refused(self) -> None:
        with pytest.raises(
            InvalidType,
            match=r"^QuiesceMiddleware needs a Buffer or an AsyncBuffer "
            r"\(open_buffer\(\), open_shared_buffer\(\)\), not dict$",
        ):
            check_setup({}, None, "QuiesceMiddleware")
        with pytest.raises(InvalidType, match=r"^run_pruner needs a Buffer or an AsyncBuffer"):
            anyio.run(run_pruner, [], _NoPlan())


class _NoPlan:
    async def __call__(self, snap: Snapshot, /) -> EditPlan | None:
        return None


async def _until(check: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    """Wait for ``check()`` (a replica sees the sequencer's removal once the
    batch reaches it: an event in another member, not in this task)."""
    with anyio.fail_after(timeout):
        while not check():
            await anyio.sleep(0.01)


async def scenario(buf: AsyncBuffer, settle: Callable[[], Awaitable[None]]) -> dict[str, Any]:
    """The same steps on any AsyncBuffer; returns what must agree."""
    out: dict[str, Any] = {}
    v0 = buf.version
    v1 = await buf.aappend(Entry("a", Kind.REASONING, "step a", turn=1))
    await buf.aappend(Entry("b", Kind.TOOL_CALL, "lookup x", key="lookup x", turn=1))
    v3 = await buf.aappend(Entry("c", Kind.TOOL_OUTPUT, "x is 4", refs=("b",), turn=1))
    out["appended"] = [v1 - v0, v3 - v0]
    # a reader pinned before the mark holds the removal back
    with buf.snapshot() as snap:
        mark = await buf.amark_stale("a", "superseded", turn=2)
        out["mark"] = (mark.id, mark.reason, mark.turn, mark.version - v0)
        report = await buf.aprune(["a"], reason="old", actor="tester", turn=2)
        out["prune"] = {i: o.status for i, o in report.items()}
        await settle()
        out["held"] = ("a" in buf.staged(), "a" in buf.tombstones, snap["a"].body)
    await settle()
    await buf.quiesce()
    await _until(lambda: "a" in buf.tombstones, "the removal of a")
    t = buf.tombstones["a"]
    out["tombstone"] = (t.id, t.reason, t.actor, t.turn)
    # a plan that would split the call/result pair is refused whole
    refused = await buf.aedit(EditPlan([Prune("b")], reason="half a pair", actor="tester"))
    out["refused"] = (refused.applied, refused.refusals, refused.escalation is not None)
    applied = await buf.aedit(EditPlan([Rewrite("c", "x is four")], reason="clarify"))
    out["applied"] = applied.applied
    esc = await buf.aescalate(EscalationKind.OSCILLATION, "cycle 2 of c", data={"ids": ["c"]})
    out["escalation"] = (esc.kind, esc.detail, dict(esc.data))
    # bad input: a precise error, nothing changes
    before = buf.version
    with pytest.raises(DanglingReference, match=r"^entry 'd' cites 'a', pruned at version \d+"):
        await buf.aappend(Entry("d", Kind.REASONING, "uses a", refs=("a",)))
    with pytest.raises(InvalidType, match=r"^kind must be an EscalationKind, not str$"):
        await buf.aescalate("oops", "x")  # type: ignore[arg-type]
    assert buf.version == before
    await buf.aflush()
    with buf.snapshot() as snap:
        out["window"] = [(e.id, e.body) for e in snap]
    out["tombstones"] = sorted(buf.tombstones)
    return out


EXPECTED = {
    "appended": [1, 3],
    "mark": ("a", "superseded", 2, 4),
    "prune": {"a": Status.DEFERRED},
    "held": (True, False, "step a"),
    "tombstone": ("a", "old", "tester", 2),
    "refused": (False, (Refusal.REFERENCED,), True),
    "applied": True,
    "escalation": (EscalationKind.OSCILLATION, "cycle 2 of c", {"ids": ["c"]}),
    "window": [("b", "lookup x"), ("c", "x is four")],
    "tombstones": ["a"],
}


async def _pause() -> None:
    await anyio.sleep(0.3)  # heartbeats and horizon refreshes may run meanwhile


class TestSameScenario:
    """One scenario, the same reports on every implementation."""

    @pytest.mark.anyio
    async def test_runtime_buffer_over_sqlite(self, tmp_path: Path, anyio_backend: str) -> None:
        path = tmp_path / "conv.sqlite"
        async with open_buffer(log=SQLiteLog(path)) as buf:
            assert await scenario(buf, _pause) == EXPECTED
            buf.sink.close()  # type: ignore[union-attr]  # one writer per file
        async with open_buffer(log=SQLiteLog(path)) as again:  # durable: reopen
            with again.snapshot() as snap:
                assert [(e.id, e.body) for e in snap] == EXPECTED["window"]
            assert sorted(again.tombstones) == ["a"]

    @pytest.mark.anyio
    async def test_shared_sequencer(self, pg_dsn: str, anyio_backend: str) -> None:
        async with open_shared_buffer(pg_dsn, "conv", **FAST) as shared:
            assert shared.role == "sequencer"
            assert await scenario(shared, _pause) == EXPECTED
        await self._reopened(pg_dsn)

    @pytest.mark.anyio
    async def test_shared_replica(self, pg_dsn: str, anyio_backend: str) -> None:
        """On a replica every write is forwarded; the pinned reader is the
        replica's, so the sequencer holds the removal for another member's
        grace."""
        async with (
            open_shared_buffer(pg_dsn, "conv", **FAST) as sequencer,
            open_shared_buffer(pg_dsn, "conv", **FAST) as replica,
        ):
            assert (sequencer.role, replica.role) == ("sequencer", "replica")
            assert await scenario(replica, _pause) == EXPECTED
            assert replica.stats().forwarded >= 7
        await self._reopened(pg_dsn)

    async def _reopened(self, dsn: str) -> None:
        async with open_shared_buffer(dsn, "conv", **FAST) as again:
            with again.snapshot() as snap:
                assert [(e.id, e.body) for e in snap] == EXPECTED["window"]
            assert sorted(again.tombstones) == ["a"]


class TestEscalationStream:
    """``escalations()`` streams a refused edit where it is decided."""

    @staticmethod
    async def _first_refusal(buf: AsyncBuffer) -> Any:
        got: list[Any] = []

        async def consume(task_status: anyio.abc.TaskStatus[None]) -> None:
            stream = buf.escalations()
            task_status.started()
            async for esc in stream:
                got.append(esc)
                return

        async with anyio.create_task_group() as tg:
            await tg.start(consume)
            await buf.aappend(Entry("k", Kind.CONSTRAINT, "never delete prod"))
            report = await buf.aedit(EditPlan([Prune("k")], reason="tidy", actor="tester"))
            assert not report.applied
            with anyio.fail_after(20):
                while not got:
                    await anyio.sleep(0.01)
        return got[0].kind, got[0].refusals

    @pytest.mark.anyio
    async def test_runtime(self, anyio_backend: str) -> None:
        async with open_buffer() as buf:
            assert await self._first_refusal(buf) == (
                EscalationKind.REFUSED_EDIT,
                (Refusal.IMMUTABLE,),
            )

    @pytest.mark.anyio
    async def test_shared_sequencer(self, pg_dsn: str, anyio_backend: str) -> None:
        async with open_shared_buffer(pg_dsn, "esc", **FAST) as shared:
            assert await self._first_refusal(shared) == (
                EscalationKind.REFUSED_EDIT,
                (Refusal.IMMUTABLE,),
            )


class _GuardedLog(SQLiteLog):
    """A real SQLite log whose ``write`` fails on the given thread."""

    def __init__(self, path: Path, forbidden: int) -> None:
        super().__init__(path)
        self.forbidden = forbidden
        self.threads: list[int] = []

    def write(self, records: Any) -> None:
        self.threads.append(threading.get_ident())
        if threading.get_ident() == self.forbidden:
            raise AssertionError("a log write on the event loop thread")
        super().write(records)


class _DropOne:
    """A pruner proposing to remove ``target`` once."""

    def __init__(self, target: str) -> None:
        self.target = target

    async def __call__(self, snap: Snapshot, /) -> EditPlan | None:
        await anyio.lowlevel.checkpoint()
        if self.target not in [e.id for e in snap]:
            return None
        return EditPlan([Prune(self.target)], reason="drop", actor="pruner")


class TestPlainBuffer:
    """A plain ``Buffer`` gets the async face: durable work off the loop."""

    @pytest.mark.anyio
    async def test_run_pruner_flushes_in_a_worker_thread(
        self, tmp_path: Path, anyio_backend: str
    ) -> None:
        """``run_pruner`` submits with ``aedit``: the tombstone's flush runs
        in a worker thread, never on the loop (the log's ``write`` raises
        there). Before the protocol it called the sync ``edit`` on the loop."""
        log = _GuardedLog(tmp_path / "plain.sqlite", threading.get_ident())
        buf = Buffer(log=log)
        buf.append(Entry("a", Kind.REASONING, "old step"))
        buf.append(Entry("b", Kind.REASONING, "new step"))
        report = await run_pruner(buf, _DropOne("a"))
        assert report is not None and report.applied and report.removed == ("a",)
        assert "a" in buf.tombstones
        assert log.threads and threading.get_ident() not in log.threads
        log.close()

    @pytest.mark.anyio
    async def test_face_writes_and_has_no_stream(self, anyio_backend: str) -> None:
        face = async_buffer(Buffer(), "test")
        assert isinstance(face, AsyncBuffer)
        await face.aappend(Entry("a", Kind.REASONING, "a"))
        mark = await face.amark_stale("a", "old")
        report = await face.aprune(["a"], reason="old")
        assert (mark.id, report["a"].status) == ("a", Status.PRUNED)
        await face.quiesce()
        await face.aflush()
        with pytest.raises(Exception, match=r"^escalations\(\) needs a running buffer"):
            async for _ in face.escalations():
                pass
