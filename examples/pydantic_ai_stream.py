"""A pydantic-ai agent's responses stream into a quiesce buffer; a verifier
task reads the answer as it grows (offline).

``QuiesceStream`` is a pydantic-ai capability: it wraps every event stream
of a run (``run``, ``run_stream_events``, ``iter``), writes each text delta
into an open entry before the event reaches you, and closes the entry with
the response's own dump once it is complete — the entry
``QuiesceHistoryProcessor`` finds held at the next request. A thinking block
or a tool call is never written into the open entry: a reader's snapshot
always renders a valid request. The model is pydantic-ai's ``TestModel``,
which streams its text word by word.

Run: ``python examples/pydantic_ai_stream.py``.
"""

from __future__ import annotations

import anyio
from pydantic_ai import Agent
from pydantic_ai.capabilities import ProcessHistory
from pydantic_ai.models.test import TestModel

from quiesce import RuntimeBuffer, open_buffer
from quiesce.integrations.pydantic_ai import (
    QuiesceHistoryProcessor,
    QuiesceStream,
    render_messages,
)

ANSWER = "the disk has 59 percent free and the last backup finished at 03:00"


async def verifier(buf: RuntimeBuffer, done: anyio.Event) -> None:
    """Pin, render, print the streamed answer so far."""
    last = None
    while not done.is_set():
        with buf.snapshot() as snap:
            streaming = [e for e in snap if e.streaming]
            if streaming:
                text = render_messages(snap)[-1].parts[0].content
                if text != last:
                    print(f"  verifier reads: {text!r}")
                    last = text
        await anyio.sleep(0)


async def main() -> None:
    async with open_buffer() as buf:
        agent = Agent(
            TestModel(custom_output_text=ANSWER),
            capabilities=[QuiesceStream(buf), ProcessHistory(QuiesceHistoryProcessor(buf))],
        )
        done = anyio.Event()
        async with anyio.create_task_group() as tg:
            tg.start_soon(verifier, buf, done)
            async with agent.run_stream_events("how is the disk?") as events:
                async for _event in events:
                    await anyio.sleep(0)  # let the verifier look between events
            done.set()
        result = events.result
        assert result is not None and result.output == ANSWER
        with buf.snapshot() as snap:
            (answer,) = [e for e in snap if e.body == ANSWER]
        assert not answer.streaming and answer.content is not None
        print(f"agent: {result.output}")
        print(f"the buffer holds the response whole, once, as {answer.id!r}")


if __name__ == "__main__":
    anyio.run(main)  # pydantic-ai runs on asyncio
