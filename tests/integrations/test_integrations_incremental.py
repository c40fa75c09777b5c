"""The integrations' cheap-turn paths give what the whole computation gives.

A turn's work is O(new) where it can be: the Agents SDK session renders only
the items added since its last ``get_items`` (the rest is the text it kept),
and LangChain's async sync compares a checkpointer's copies in steps with a
checkpoint between them (so no stretch of a long sync holds the loop). Each
test drives the fast path and checks it against the computation it stands
for: the adapter's whole rendering, the sync path's diff. A seeded random
script mixes the cases that defeat a naive cache (an output or a reasoning
item's turn arriving in a later batch, a prune, a staged removal).

The session and the LangChain sync functions are anyio code: every test runs
on asyncio **and** trio (no framework runner is involved).
"""

from __future__ import annotations

import random
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from quiesce import Buffer, open_buffer
from quiesce.adapters import responses
from quiesce.integrations import _store
from quiesce.integrations.langchain import async_sync_messages, sync_messages
from quiesce.integrations.openai_agents import QuiesceSession


def _reasoning(i: int) -> dict[str, Any]:
    return {"type": "reasoning", "id": f"rs_{i}", "summary": [], "encrypted_content": f"sig{i}"}


def _batches(seed: int) -> list[list[dict[str, Any]]]:
    """A seeded script of ``add_items`` batches: user turns, answers, calls
    whose output comes in the same or a later batch, reasoning items whose
    turn follows in the same or the next batch."""
    rng = random.Random(seed)
    out: list[list[dict[str, Any]]] = []
    pending: list[dict[str, Any]] = []  # items of a turn left for the next batch
    for t in range(40):
        batch = list(pending)
        pending = []
        batch.append({"role": "user", "content": f"user {t} [quiesce: not a note]"})
        r = rng.random()
        if r < 0.3:
            batch.append(_reasoning(t))
            answer = {
                "id": f"msg_{t}",
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": f"answer {t}", "annotations": []}],
            }
            (pending if rng.random() < 0.5 else batch).append(answer)
        elif r < 0.6:
            call = {
                "type": "function_call",
                "call_id": f"call_{t}",
                "name": "lookup",
                "arguments": f'{{"q": {t}}}',
            }
            output = {"type": "function_call_output", "call_id": f"call_{t}", "output": f"r{t}"}
            batch.append(call)
            (pending if rng.random() < 0.5 else batch).append(output)
        else:
            batch.append({"role": "assistant", "content": f"plain answer {t}"})
        out.append(batch)
    if pending:
        out.append(pending)
    return out


class TestSessionWindow:
    """``QuiesceSession.get_items`` (its kept window plus the new items) is
    the adapter's whole rendering minus staged items, after every write."""

    @pytest.mark.anyio
    @pytest.mark.parametrize("seed", [1, 2, 3])
    async def test_matches_the_whole_rendering(self, seed: int) -> None:
        buf = Buffer()
        session = QuiesceSession("s", buf)
        rng = random.Random(seed)
        for batch in _batches(seed):
            await session.add_items(batch)  # type: ignore[arg-type]
            if rng.random() < 0.2:
                with buf.snapshot() as snap:
                    ids = [e.id for e in snap]
                buf.prune([rng.choice(ids)], reason="test", actor="pruner")
            got = await session.get_items()
            with buf.snapshot() as snap:
                whole = responses.render(snap, annotate_stale=False, tombstone_notes=False)
            assert got == whole
            got[0]["mutated"] = True  # the caller's own objects: the next call is unchanged
        assert await session.get_items() == whole

    @pytest.mark.anyio
    async def test_staged_items_are_left_out(self) -> None:
        """A prune staged behind a reader's pin: the kept window does not
        bring the staged item back."""
        async with open_buffer() as buf:
            session = QuiesceSession("s", buf)
            await session.add_items([{"role": "assistant", "content": "a"}])  # type: ignore[list-item]
            await session.add_items([{"role": "assistant", "content": "b"}])  # type: ignore[list-item]
            assert [i["content"] for i in await session.get_items()] == ["a", "b"]
            with buf.snapshot() as snap:
                first = snap.entries()[0].id
                await buf.aprune([first], reason="test", actor="pruner")
                assert first in buf.staged()
                assert [i["content"] for i in await session.get_items()] == ["b"]
            assert [i["content"] for i in await session.get_items()] == ["b"]


def _history(n: int) -> list[BaseMessage]:
    out: list[BaseMessage] = []
    for i in range(n // 2):
        out.append(HumanMessage(f"user {i}", id=f"h{i}"))
        out.append(AIMessage(content=f"assistant {i}", id=f"a{i}"))
    return out


def _copies(messages: list[BaseMessage]) -> list[BaseMessage]:
    """What a checkpointer hands back each turn: equal copies, new objects."""
    return [m.model_copy(deep=True) for m in messages]


def _bodies(buf: Buffer) -> dict[str, str]:
    with buf.snapshot() as snap:
        return {e.id: e.body for e in snap}


N = 3 * _store.SYNC_STEP + 17


class TestStepwiseSync:
    """LangChain's async sync of a long history in steps: the same diff as
    the sync path, other tasks run between the steps, and a sync that ran
    during a pause makes the diff start again."""

    @pytest.mark.anyio
    async def test_a_change_deep_in_the_history_is_a_rewrite(self) -> None:
        history = _history(N)
        changed = _copies(history)
        at = 2 * _store.SYNC_STEP + 5  # in a step after the first
        changed[at] = changed[at].model_copy(update={"content": "edited in place"})
        sync_buf, async_buf = Buffer(), Buffer()
        sync_messages(sync_buf, history)
        await async_sync_messages(async_buf, history)
        sync_messages(sync_buf, changed)
        await async_sync_messages(async_buf, changed)
        assert _bodies(async_buf) == _bodies(sync_buf)
        assert _bodies(async_buf)[str(history[at].id)] == "edited in place"

    @pytest.mark.anyio
    async def test_other_tasks_run_between_the_steps(self) -> None:
        history = _history(N)
        buf = Buffer()
        await async_sync_messages(buf, history)
        ticks = 0
        done = False

        async def beat() -> None:
            nonlocal ticks
            while not done:
                ticks += 1
                await anyio.lowlevel.checkpoint()

        async with anyio.create_task_group() as tg:
            tg.start_soon(beat)
            await anyio.lowlevel.checkpoint()
            start = ticks
            report = await async_sync_messages(buf, [*_copies(history), HumanMessage("new")])
            during = ticks - start
            done = True
        assert len(report.appended) == 1
        # one step per SYNC_STEP copies compared, then the reading, the diff
        # and the admission: the other task ran between every two of them
        assert during >= N // _store.SYNC_STEP

    @pytest.mark.anyio
    async def test_a_sync_during_a_pause_restarts_the_diff(self) -> None:
        history = _history(N)
        buf = Buffer()
        await async_sync_messages(buf, history)
        first = [*_copies(history), HumanMessage("one", id="n1")]
        second = [*_copies(history), HumanMessage("one", id="n1"), HumanMessage("two", id="n2")]
        async with anyio.create_task_group() as tg:
            tg.start_soon(async_sync_messages, buf, first)
            tg.start_soon(async_sync_messages, buf, second)
        bodies = _bodies(buf)
        assert [bodies["n1"], bodies["n2"]] == ["one", "two"]
        assert len(bodies) == len(history) + 2
        # and the state is the last history: a no-op sync of it appends nothing
        again = await async_sync_messages(buf, second)
        assert again.appended == ()
