"""A LangGraph agent's answer streams into a quiesce buffer; a supervisor
task reads it as it grows (offline).

``stream_messages`` wraps ``agent.astream(..., stream_mode="messages")``:
each chunk of the model's answer is written into an open entry before the
chunk reaches you, so a concurrent reader that pins a snapshot sees a whole
prefix of the answer — the same one for its whole pin — and the finished
message is the very entry ``QuiesceMiddleware`` syncs at the next turn. The
model is LangChain's own ``GenericFakeChatModel``, which streams its answer
word by word.

Run: ``python examples/langgraph_stream.py``.
"""

from __future__ import annotations

from typing import Any

import anyio
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

from quiesce import RuntimeBuffer, open_buffer
from quiesce.integrations.langchain import QuiesceMiddleware, render_messages, stream_messages

ANSWER = "disk usage is at 41 percent, the cpu is idle, nothing needs doing"


class Model(GenericFakeChatModel):
    """LangChain's streaming fake model (it ignores tool schemas)."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> Model:  # type: ignore[override]
        return self


async def supervisor(buf: RuntimeBuffer, done: anyio.Event) -> None:
    """Pin, render, print what the answer holds so far; never blocks the writer."""
    last = None
    while not done.is_set():
        with buf.snapshot() as snap:
            messages, _note = render_messages(snap)
            text = str(messages[-1].text) if messages and messages[-1].type == "ai" else None
        if text and text != last and not text.endswith(" "):
            print(f"  supervisor reads: {text!r}")
            last = text
        await anyio.sleep(0)


async def main() -> None:
    cfg = {"configurable": {"thread_id": "demo"}}
    async with open_buffer() as buf:
        agent = create_agent(
            model=Model(messages=iter([AIMessage(ANSWER)])),
            tools=[],
            middleware=[QuiesceMiddleware(buf)],
            checkpointer=InMemorySaver(),
        )
        done = anyio.Event()
        async with anyio.create_task_group() as tg:
            tg.start_soon(supervisor, buf, done)
            question = {"messages": [HumanMessage("how is the server?")]}
            async for _chunk, _meta in stream_messages(
                buf, agent.astream(question, cfg, stream_mode="messages")
            ):
                await anyio.sleep(0)  # let the supervisor look between chunks
            done.set()
        state = await agent.aget_state(cfg)
        final = state.values["messages"][-1]
        with buf.snapshot() as snap:
            held = snap[final.id]
        assert held.body == final.text == ANSWER and not held.streaming
        print(f"agent: {final.text}")
        print(f"the buffer holds it whole under its id {final.id!r}, once")


if __name__ == "__main__":
    anyio.run(main)  # LangGraph runs on asyncio
