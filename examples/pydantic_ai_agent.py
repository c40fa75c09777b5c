"""A pydantic-ai agent whose history goes through quiesce (offline).

``QuiesceHistoryProcessor`` syncs the run's messages into a durable quiesce
buffer before each model request, runs a pruner, and hands the model the
pruned window: ``ThinkingPart``\\ s keep their signatures, every tool call is
answered, and the note of removals is a system prompt part. The model is
pydantic-ai's own ``FunctionModel``.

Run: ``python examples/pydantic_ai_agent.py``.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import anyio
from pydantic_ai import Agent
from pydantic_ai.capabilities import ProcessHistory
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ThinkingPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from quiesce import HeuristicPruner, SQLiteLog, open_buffer
from quiesce.integrations.pydantic_ai import QuiesceHistoryProcessor

RESPONSES = [
    ModelResponse(
        parts=[
            ThinkingPart("Both, in parallel.", signature="c2ln"),
            ToolCallPart("lookup", {"q": "disk"}, "c1"),
            ToolCallPart("lookup", {"q": "cpu"}, "c2"),
        ]
    ),
    ModelResponse(parts=[TextPart("disk and cpu are fine.")]),
    ModelResponse(parts=[ToolCallPart("lookup", {"q": "disk"}, "c3")]),  # a re-run
    ModelResponse(parts=[TextPart("disk is still fine.")]),
]


def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    kinds = [type(p).__name__ for m in messages for p in m.parts]
    print(f"  model sees {len(messages)} messages, parts {kinds}")
    return RESPONSES.pop(0)


async def main() -> None:
    path = Path(tempfile.mkdtemp()) / "history.sqlite"
    async with open_buffer(log=SQLiteLog(path)) as buf:
        processor = QuiesceHistoryProcessor(buf, pruner=HeuristicPruner(budget=40, min_age=2))
        agent = Agent(
            FunctionModel(model),
            instructions="You are an SRE agent.",
            capabilities=[ProcessHistory(processor)],
        )

        @agent.tool_plain
        def lookup(q: str) -> str:
            """Look something up."""
            return f"{q}: " + "lots of output " * 10

        history: list[ModelMessage] = []
        for question in ["check disk and cpu", "check disk again"]:
            print(f"user: {question}")
            result = await agent.run(question, message_history=history)
            history = result.all_messages()
            print(f"agent: {result.output}")
        stats = buf.stats()
        print(f"tombstones: {stats.tombstones}, re-runs recorded: {stats.readmissions_overridden}")


if __name__ == "__main__":
    anyio.run(main)
