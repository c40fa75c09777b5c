"""An OpenAI Agents SDK run over a quiesce session, pruned inside the run (offline).

``QuiesceSession`` stores the run's Responses items in a durable quiesce
buffer; ``quiesce_input_filter`` prunes before each model call and adds the
removals as a ``system`` item. Every ``function_call`` the model sees
is answered and a ``reasoning`` item never arrives without its output item.
The model is a ``Model`` subclass with canned responses.

Run: ``python examples/openai_agents_session.py``.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import anyio
from agents import (
    Agent,
    ModelResponse,
    RunConfig,
    Runner,
    Usage,
    function_tool,
    set_tracing_disabled,
)
from agents.models.interface import Model
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseReasoningItem,
)

from quiesce import HeuristicPruner, SQLiteLog, open_buffer
from quiesce.integrations.openai_agents import QuiesceSession, quiesce_input_filter


def call(call_id: str, q: str) -> ResponseFunctionToolCall:
    args = json.dumps({"q": q})
    return ResponseFunctionToolCall(
        call_id=call_id, name="lookup", arguments=args, type="function_call"
    )


def say(msg_id: str, text: str) -> ResponseOutputMessage:
    part = ResponseOutputText(type="output_text", text=text, annotations=[])
    return ResponseOutputMessage(  # item ids are unique, as the API makes them
        id=msg_id, type="message", role="assistant", status="completed", content=[part]
    )


REASONING = ResponseReasoningItem(
    id="rs_1", type="reasoning", summary=[], encrypted_content="ZW5jcnlwdGVk"
)


class CannedModel(Model):
    """Canned responses; prints what each request holds."""

    def __init__(self) -> None:
        self.outputs: list[list[Any]] = [
            [REASONING, call("c1", "disk"), call("c2", "cpu")],
            [say("msg_1", "disk and cpu are fine.")],
            [call("c3", "disk")],  # re-runs a call the pruner removed
            [say("msg_2", "disk is still fine.")],
        ]

    async def get_response(
        self, system_instructions: Any, input: Any, *args: Any, **kw: Any
    ) -> Any:
        kinds = [i.get("type", i.get("role")) for i in input]
        print(f"  model sees {len(kinds)} items: {kinds}")
        return ModelResponse(output=self.outputs.pop(0), usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kw: Any) -> Any:
        raise NotImplementedError


@function_tool
def lookup(q: str) -> str:
    """Look something up."""
    return f"{q}: " + "lots of output " * 10


async def main() -> None:
    set_tracing_disabled(True)
    path = Path(tempfile.mkdtemp()) / "session.sqlite"
    agent = Agent(
        name="sre", instructions="You are an SRE agent.", model=CannedModel(), tools=[lookup]
    )
    log = SQLiteLog(path)  # one writer per log file: closed before it is reopened
    async with open_buffer(log=log) as buf:
        session = QuiesceSession("demo", buf)
        pruner = HeuristicPruner(budget=40, min_age=2)
        config = RunConfig(call_model_input_filter=quiesce_input_filter(buf, pruner=pruner))
        for question in ["check disk and cpu", "check disk again"]:
            print(f"user: {question}")
            result = await Runner.run(agent, question, session=session, run_config=config)
            print(f"agent: {result.final_output}")
        print(
            f"tombstones: {buf.stats().tombstones}; session holds "
            f"{len(await session.get_items())} items"
        )
    log.close()
    with SQLiteLog(path) as log:
        async with open_buffer(log=log) as buf:  # a new process would do the same
            print(f"reopened: {len(await QuiesceSession('demo', buf).get_items())} items")


if __name__ == "__main__":
    anyio.run(main)
