"""One agent, many conversations: a ``BufferPool`` gives each its own buffer (offline).

A server runs one LangChain agent (with a checkpointer) for every user; each
LangGraph ``thread_id`` is a conversation. ``QuiesceMiddleware(pool)`` holds
each thread in its own durable buffer, opened on first use by the pool's
factory (here an ``open_buffer`` over a SQLite file per thread) and closed
with the pool. The model — LangChain's own ``GenericFakeChatModel`` —
prints what it receives: Bob's calls never carry Alice's messages.

The same agent over a *single* buffer refuses the second thread with
``ConversationMismatch`` before the model is called, instead of sending it
the first thread's history.

Run: ``python examples/buffer_pool.py``.
"""

from __future__ import annotations

import tempfile
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langgraph.checkpoint.memory import InMemorySaver

from quiesce import BufferPool, ConversationMismatch, RuntimeBuffer, SQLiteLog, open_buffer
from quiesce.integrations.langchain import QuiesceMiddleware


class PrintingModel(GenericFakeChatModel):
    """LangChain's fake chat model, printing each request's messages."""

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
        print(f"  model sees {[str(m.content) for m in messages]}")
        return super()._generate(messages, *args, **kwargs)


def model(n: int) -> PrintingModel:
    return PrintingModel(messages=iter([AIMessage(f"answer {i}") for i in range(n)]))


async def main() -> None:
    folder = Path(tempfile.mkdtemp())

    @asynccontextmanager
    async def durable(thread_id: str) -> Any:
        """The pool's factory: one SQLite-logged buffer per conversation."""
        log = SQLiteLog(folder / f"{thread_id}.sqlite")
        try:
            async with open_buffer(log=log) as buf:
                yield buf
        finally:
            log.close()

    print("one agent, two threads, a pool:")
    async with BufferPool(durable) as pool:
        agent = create_agent(
            model(4),
            system_prompt="Be terse.",
            middleware=[QuiesceMiddleware(pool)],
            checkpointer=InMemorySaver(),
        )
        for user, text in [
            ("alice", "my SSN is 078-05-1120"),
            ("bob", "hi"),
            ("alice", "what is my SSN?"),
            ("bob", "what did I say?"),
        ]:
            print(f" {user}: {text}")
            await agent.ainvoke(
                {"messages": [("user", text)]}, {"configurable": {"thread_id": user}}
            )
        bob: RuntimeBuffer = await pool.get("bob")
        with bob.snapshot() as snap:
            bodies = [e.body for e in snap]
        assert not any("SSN" in b for b in bodies), bodies
        print(f" conversations: {pool.conversations()}; Bob's buffer holds {bodies}")
    print(f" closed with the pool; logs on disk: {sorted(p.name for p in folder.iterdir())}")

    print("the same agent over one buffer:")
    async with open_buffer() as buf:
        agent = create_agent(
            model(2), middleware=[QuiesceMiddleware(buf)], checkpointer=InMemorySaver()
        )
        await agent.ainvoke(
            {"messages": [("user", "my SSN is 078-05-1120")]},
            {"configurable": {"thread_id": "alice"}},
        )
        try:
            await agent.ainvoke(
                {"messages": [("user", "hi")]}, {"configurable": {"thread_id": "bob"}}
            )
        except ConversationMismatch as exc:
            print(f"  refused before the model call: {exc}")


if __name__ == "__main__":
    anyio.run(main)
