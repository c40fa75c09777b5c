"""A LangChain v1 agent whose model sees a pruned, pinned window (offline).

``QuiesceMiddleware`` syncs the agent's messages into a durable quiesce buffer
before each model call, runs a pruner, and calls the model on the pruned
window — with a note of what was removed, every tool call still answered, and
the signed thinking block byte-for-byte. LangGraph's checkpointed state keeps
the full history. The model is LangChain's own fake chat model.

Run: ``python examples/langchain_agent.py``.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import anyio
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

from quiesce import HeuristicPruner, SQLiteLog, open_buffer
from quiesce.integrations.langchain import QuiesceMiddleware


class FakeModel(FakeMessagesListChatModel):
    """LangChain's fake model; it ignores tool schemas and prints what it sees."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> FakeModel:  # type: ignore[override]
        return self

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
        print(f"  model sees {len(messages)} messages: {[m.type for m in messages]}")
        return super()._generate(messages, *args, **kwargs)


def lookup(q: str) -> str:
    """Look something up."""
    return f"{q}: " + "lots of output " * 10


def call(call_id: str, q: str) -> dict[str, Any]:
    return {"name": "lookup", "args": {"q": q}, "id": call_id, "type": "tool_call"}


THINKING = {"type": "thinking", "thinking": "Both, in parallel.", "signature": "c2ln"}
MODEL = FakeModel(
    responses=[
        AIMessage(content=[THINKING], tool_calls=[call("c1", "disk"), call("c2", "cpu")]),
        AIMessage(content="disk and cpu are fine."),
        AIMessage(content="", tool_calls=[call("c3", "disk")]),  # re-runs a pruned call
        AIMessage(content="disk is still fine."),
    ]
)


async def main() -> None:
    path = Path(tempfile.mkdtemp()) / "agent.sqlite"
    saver = InMemorySaver()  # LangGraph's checkpointer: the full history lives here
    cfg = {"configurable": {"thread_id": "demo"}}
    async with open_buffer(log=SQLiteLog(path)) as buf:
        pruner = HeuristicPruner(budget=40, min_age=2)
        agent = create_agent(
            model=MODEL,
            tools=[lookup],
            system_prompt="You are an SRE agent.",
            middleware=[QuiesceMiddleware(buf, pruner=pruner)],
            checkpointer=saver,
        )
        for question in ["check disk and cpu", "check disk again"]:
            print(f"user: {question}")
            out = await agent.ainvoke({"messages": [HumanMessage(question)]}, cfg)
            print(f"agent: {out['messages'][-1].content}")
        stats = buf.stats()
        print(f"tombstones: {stats.tombstones}, re-runs recorded: {stats.readmissions_overridden}")
        print(f"LangGraph state still holds all {len(out['messages'])} messages")


if __name__ == "__main__":
    anyio.run(main)
