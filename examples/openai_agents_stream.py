"""An OpenAI Agents SDK run streams into a quiesce buffer; a supervisor sees
the answer grow (offline).

``feed_stream`` consumes ``Runner.run_streamed(...).stream_events()``: each
model response's raw Responses events go through the Responses adapter's
``append_stream`` — a message's text is an open entry written per delta, a
function call is appended once its arguments are complete — and every event
is handed to ``on_event`` after the buffer has it. ``quiesce_input_filter``
syncs each model call's input and finds the streamed items held by id. The
same works with the SDK's session: ``feed_stream(session, run)`` with a
``QuiesceSession`` (here two users' sessions on one ``BufferPool``), whose
``add_items`` holds what already streamed in. The model is the SDK's own
``ScriptedModel``, streaming the SDK's own events.

Run: ``python examples/openai_agents_stream.py``.
"""

from __future__ import annotations

import re
from typing import Any

import anyio
from agents import Agent, RunConfig, Runner
from agents.testing import ModelStep, ScriptedModel, assistant_message
from agents.testing.model import _stream_events_for_step

from quiesce import BufferPool, open_buffer
from quiesce.integrations.openai_agents import QuiesceSession, feed_stream, quiesce_input_filter

ANSWER = "disk is at 41 percent and the cpu is idle, so nothing needs doing"


def streamed(output: list[Any]) -> ModelStep:
    """The SDK's event stream for ``output``, its text cut into words."""
    events: list[Any] = []
    for ev in _stream_events_for_step(ModelStep(output=output), preserve_raw_usage=False):
        if ev.type == "response.output_text.delta":
            events += [ev.model_copy(update={"delta": w}) for w in re.split(r"(?<= )", ev.delta)]
        else:
            events.append(ev)
    events = [ev.model_copy(update={"sequence_number": n}) for n, ev in enumerate(events)]
    return ModelStep.stream(events, output=output)


async def main() -> None:
    async with open_buffer() as buf:
        model = ScriptedModel([streamed([assistant_message(ANSWER, item_id="msg_1")])])
        agent = Agent(name="sre", model=model)
        config = RunConfig(tracing_disabled=True, call_model_input_filter=quiesce_input_filter(buf))
        run = Runner.run_streamed(agent, "how is the server?", run_config=config)

        async def supervisor(_event: Any) -> None:
            with buf.snapshot() as snap:  # what any task pinning now would see
                growing = [e.body for e in snap if e.streaming]
            if growing:
                print(f"  supervisor reads: {growing[0]!r}")
            await anyio.lowlevel.checkpoint()

        await feed_stream(buf, run, on_event=supervisor)
        with buf.snapshot() as snap:
            held = snap["msg_1"]
        assert held.body == run.final_output == ANSWER and not held.streaming
        print(f"agent: {run.final_output}")
        print("the buffer holds it whole under its item id 'msg_1'")
    await with_sessions()


async def with_sessions() -> None:
    """Two users' sessions on one pool, each run streamed into its own buffer."""
    async with BufferPool() as pool:
        for user in ("alice", "bob"):
            session = QuiesceSession(user, pool)
            answer = f"{user}, {ANSWER}"
            model = ScriptedModel([streamed([assistant_message(answer, item_id=f"msg_{user}")])])
            config = RunConfig(tracing_disabled=True)
            run = Runner.run_streamed(
                Agent(name="sre", model=model),
                "how is the server?",
                run_config=config,
                session=session,
            )
            await feed_stream(session, run)
            items = await session.get_items()
            assert [i.get("role") for i in items] == ["user", "assistant"]
            assert run.final_output == answer
            print(f"session {user!r}: {len(items)} items, the answer streamed in once")


if __name__ == "__main__":
    anyio.run(main)  # the SDK's runner is asyncio-only
