"""An AutoGen assistant whose model context is a quiesce buffer (offline).

``QuiesceChatCompletionContext`` holds the agent's messages in a durable
quiesce buffer; before each model call it runs a pruner and returns the
pruned window, with ``AssistantMessage.thought`` kept, every function call
answered, and a note of removals. The model is AutoGen's own
``ReplayChatCompletionClient``.

Run: ``python examples/autogen_agent.py``.
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path

import anyio
from autogen_agentchat.agents import AssistantAgent
from autogen_core import FunctionCall
from autogen_core.models import CreateResult, ModelFamily, ModelInfo, RequestUsage
from autogen_ext.models.replay import ReplayChatCompletionClient

from quiesce import HeuristicPruner, SQLiteLog, open_buffer
from quiesce.integrations.autogen import QuiesceChatCompletionContext

USAGE = RequestUsage(prompt_tokens=0, completion_tokens=0)


def calls(*qs: tuple[str, str], thought: str | None = None) -> CreateResult:
    fcs = [FunctionCall(id=i, name="lookup", arguments=f'{{"q": "{q}"}}') for i, q in qs]
    return CreateResult(
        finish_reason="function_calls", content=fcs, usage=USAGE, cached=False, thought=thought
    )


def say(text: str) -> CreateResult:
    return CreateResult(finish_reason="stop", content=text, usage=USAGE, cached=False)


async def lookup(q: str) -> str:
    """Look something up."""
    return f"{q}: " + "lots of output " * 10


async def main() -> None:
    logging.disable(logging.WARNING)  # the replay client warns about token counts
    client = ReplayChatCompletionClient(
        [
            calls(("c1", "disk"), ("c2", "cpu"), thought="Both, in parallel."),
            say("disk and cpu are fine."),
            calls(("c3", "disk")),  # re-runs a call the pruner removed
            say("disk is still fine."),
        ],
        model_info=ModelInfo(
            vision=False,
            function_calling=True,
            json_output=False,
            family=ModelFamily.UNKNOWN,
            structured_output=False,
        ),
    )
    path = Path(tempfile.mkdtemp()) / "context.sqlite"
    async with open_buffer(log=SQLiteLog(path)) as buf:
        context = QuiesceChatCompletionContext(buf, pruner=HeuristicPruner(budget=40, min_age=2))
        agent = AssistantAgent(
            "sre",
            model_client=client,
            tools=[lookup],
            reflect_on_tool_use=True,
            system_message="You are an SRE agent.",
            model_context=context,
        )
        for question in ["check disk and cpu", "check disk again"]:
            print(f"user: {question}")
            result = await agent.run(task=question)
            print(f"agent: {result.messages[-1].to_text()}")
        for i, call in enumerate(client.create_calls):
            print(f"  request {i}: {[type(m).__name__ for m in call['messages']]}")
        stats = buf.stats()
        print(f"tombstones: {stats.tombstones}, re-runs recorded: {stats.readmissions_overridden}")


if __name__ == "__main__":
    anyio.run(main)
