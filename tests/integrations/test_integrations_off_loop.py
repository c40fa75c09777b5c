"""The integrations write through the async paths: no log I/O on the event loop.

Each framework runs two turns with its own test model and a pruner that
removes the first answer before the second model call, over an
``open_buffer()`` whose log is a real SQLite file that raises if written on
the event loop thread (``tests/_loop_guard.py``) and is slow (20 ms a
write). A heartbeat task (``quiesce.bench.stall``) runs through the turns:
every write the tombstone needed ran in a worker thread while the loop went
on beating. Before the async protocol, ``run_pruner`` called the sync
``edit``, which flushed the log on the loop.

LangGraph, pydantic-ai and the Agents SDK runner are asyncio-only (their
runners use asyncio tasks), so those tests run on **asyncio only**; the
AutoGen context is anyio code and runs on asyncio **and** trio.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import anyio
import pytest

from _loop_guard import GuardedLog
from quiesce import EditPlan, Kind, Prune, Snapshot, open_buffer
from quiesce.bench.stall import heartbeat

OLD = "the first answer, soon stale"


class DropOld:
    """A pruner: remove the entry whose text is the first answer (once it exists)."""

    def __init__(self) -> None:
        self.proposed = 0

    async def __call__(self, snap: Snapshot, /) -> EditPlan | None:
        await anyio.lowlevel.checkpoint()
        ids = [e.id for e in snap if OLD in e.body and e.kind is Kind.REASONING]
        if not ids:
            return None
        self.proposed += 1
        return EditPlan([Prune(i) for i in ids], reason="stale", actor="pruner")


def off_loop(log: GuardedLog) -> None:
    """Every write ran in a worker thread, and the loop beat during each
    write made while the heartbeat ran."""
    loop = threading.get_ident()
    assert log.writes, "nothing was written"
    assert all(w.thread != loop for w in log.writes)
    timed = [w.beats for w in log.writes if w.beats is not None]
    assert timed, "no write ran under the heartbeat"
    assert all(b > 0 for b in timed), f"the loop stood still during a write: {timed}"


def removed(buf: Any) -> list[str]:
    return [t for t in buf.tombstones]


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # LangGraph's runner
@pytest.mark.anyio
async def test_langchain_middleware(tmp_path: Path) -> None:
    from langchain.agents import create_agent
    from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
    from langchain_core.messages import AIMessage, HumanMessage
    from langgraph.checkpoint.memory import InMemorySaver

    from quiesce.integrations.langchain import QuiesceMiddleware

    log = GuardedLog(tmp_path / "lc.sqlite", threading.get_ident())
    pruner = DropOld()
    model = FakeMessagesListChatModel(responses=[AIMessage(OLD), AIMessage("second")])
    async with open_buffer(log=log) as buf:
        agent = create_agent(
            model=model,
            middleware=[QuiesceMiddleware(buf, pruner=pruner)],
            checkpointer=InMemorySaver(),
        )
        cfg = {"configurable": {"thread_id": "t"}}
        async with heartbeat() as beat:
            log.beat = beat
            await agent.ainvoke({"messages": [HumanMessage("hello")]}, cfg)
            out = await agent.ainvoke({"messages": [HumanMessage("again")]}, cfg)
            await buf.aflush()
        assert out["messages"][-1].content == "second"
        await buf.quiesce()  # the removal is applied by the scheduler, after the round
        assert pruner.proposed == 1 and len(removed(buf)) == 1
    off_loop(log)


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # pydantic-ai's runner
@pytest.mark.anyio
async def test_pydantic_ai_history_processor(tmp_path: Path) -> None:
    from pydantic_ai import Agent
    from pydantic_ai.capabilities import ProcessHistory
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from quiesce.integrations.pydantic_ai import QuiesceHistoryProcessor

    answers = [OLD, "second"]

    def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart(answers.pop(0))])

    log = GuardedLog(tmp_path / "pa.sqlite", threading.get_ident())
    pruner = DropOld()
    async with open_buffer(log=log) as buf:
        agent = Agent(
            FunctionModel(script),
            capabilities=[ProcessHistory(QuiesceHistoryProcessor(buf, pruner=pruner))],
        )
        async with heartbeat() as beat:
            log.beat = beat
            first = await agent.run("hello")
            second = await agent.run("again", message_history=first.all_messages())
            await buf.aflush()
        assert second.output == "second"
        await buf.quiesce()  # the removal is applied by the scheduler, after the round
        assert pruner.proposed == 1 and len(removed(buf)) == 1
    off_loop(log)


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # the Agents SDK's runner
@pytest.mark.anyio
async def test_openai_agents_session(tmp_path: Path) -> None:
    from agents import Agent, Runner, set_tracing_disabled
    from agents.testing import ScriptedModel, assistant_message

    from quiesce.integrations.openai_agents import QuiesceSession

    set_tracing_disabled(True)
    log = GuardedLog(tmp_path / "oa.sqlite", threading.get_ident())
    pruner = DropOld()
    model = ScriptedModel(
        [[assistant_message(OLD, item_id="msg_1")], [assistant_message("second", item_id="msg_2")]]
    )
    async with open_buffer(log=log) as buf:
        agent = Agent(name="a", model=model)
        session = QuiesceSession("s", buf, pruner=pruner)
        async with heartbeat() as beat:
            log.beat = beat
            await Runner.run(agent, "hello", session=session)
            out = await Runner.run(agent, "again", session=session)
            await buf.aflush()
        assert out.final_output == "second"
        await buf.quiesce()  # the removal is applied by the scheduler, after the round
        assert pruner.proposed == 1 and len(removed(buf)) == 1
        assert OLD not in str(model.calls[-1].input)
    off_loop(log)


@pytest.mark.anyio
async def test_autogen_context(tmp_path: Path, anyio_backend: str) -> None:
    from autogen_core.models import AssistantMessage, UserMessage

    from quiesce.integrations.autogen import QuiesceChatCompletionContext

    log = GuardedLog(tmp_path / "ag.sqlite", threading.get_ident())
    pruner = DropOld()
    async with open_buffer(log=log) as buf:
        ctx = QuiesceChatCompletionContext(buf, pruner=pruner)
        async with heartbeat() as beat:
            log.beat = beat
            await ctx.add_message(UserMessage(content="hello", source="user"))
            await ctx.add_message(AssistantMessage(content=OLD, source="a"))
            await ctx.add_message(UserMessage(content="again", source="user"))
            await ctx.get_messages()  # the round stages the removal
            await buf.quiesce()  # the scheduler applies it (no reader holds it back)
            assert pruner.proposed == 1 and len(removed(buf)) == 1
            window = await ctx.get_messages()  # the window after the removal
            assert pruner.proposed == 1
            await ctx.clear()  # aprune: the user's messages stay (protected)
            await buf.aflush()
        assert [m.content for m in window][1:] == ["hello", "again"]
        assert "pruned at version" in str(window[0].content)  # the note
    off_loop(log)
