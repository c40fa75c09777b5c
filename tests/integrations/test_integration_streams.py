"""Framework streams into a buffer: the integrations' stream helpers.

Each framework streams through its own offline test model — LangChain's
``GenericFakeChatModel`` (and a subclass that streams real
``AIMessageChunk`` tool-call chunks), pydantic-ai's ``TestModel`` and
``FunctionModel`` with a stream function — into a buffer of
``open_buffer()``. A concurrent reader task pins a snapshot after every
event the consumer receives, renders it with the integration's own
``render_messages`` and checks it: the streamed answer is a prefix of the
final one, the same for the whole pin, and only grows; every tool call is
answered and no thinking block is unsigned. A control run of the same agent
without quiesce gives the same final result, and the buffer ends holding
each message once. The Agents SDK streams with its session too (the
session's items equal the SDK's own ``SQLiteSession``'s), and every stream
helper takes a ``BufferPool``: two conversations streaming at once on one
pool never mix.

LangGraph and pydantic-ai run only on asyncio, so their tests say so and run
there; the framework-free :class:`MessageStream` under them runs on asyncio
and trio.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import anyio
import pytest
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, HumanMessage
from langchain_core.outputs import ChatGenerationChunk
from langgraph.checkpoint.memory import InMemorySaver
from pydantic_ai import Agent
from pydantic_ai.capabilities import ProcessHistory
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaThinkingPart, DeltaToolCall, FunctionModel
from pydantic_ai.models.test import TestModel

from quiesce import Entry, Kind, RuntimeBuffer, Snapshot, open_buffer
from quiesce.integrations import langchain as lc
from quiesce.integrations import pydantic_ai as pa
from quiesce.integrations._stream import MessageStream, interrupted_reason

# ---------------------------------------------------------------------------
# The reader: pins after every event, renders, checks


class Reader:
    """A task that pins a snapshot each time the consumer signals an event,
    renders it, and holds the pin until the next signal (re-rendering then:
    a pin sees the same text for its whole life). ``seen`` is every streamed
    text it read, in order."""

    def __init__(
        self,
        buf: RuntimeBuffer,
        text_of: Callable[[Snapshot], str | None],
        check: Callable[[Snapshot], None],
    ) -> None:
        self.buf = buf
        self.text_of = text_of
        self.check = check
        self.seen: list[str] = []
        self.send, self.receive = anyio.create_memory_object_stream[None](math.inf)
        self.acked, self.acks = anyio.create_memory_object_stream[None](math.inf)
        self.pins = 0

    def tick(self) -> None:
        self.send.send_nowait(None)

    async def look(self) -> None:
        """Signal and wait until the reader has pinned and checked."""
        self.tick()
        await self.acks.receive()

    async def run(self) -> None:
        held: tuple[Snapshot, str | None] | None = None
        snap_cm: Any = None
        async with self.receive:
            async for _ in self.receive:
                if held is not None:
                    snap, text = held
                    assert self.text_of(snap) == text  # the same prefix for the whole pin
                    snap_cm.__exit__(None, None, None)
                snap_cm = self.buf.snapshot()
                snap = snap_cm.__enter__()
                self.pins += 1
                self.check(snap)
                text = self.text_of(snap)
                if text is not None and (not self.seen or self.seen[-1] != text):
                    self.seen.append(text)
                held = (snap, text)
                self.acked.send_nowait(None)
        if snap_cm is not None:
            snap_cm.__exit__(None, None, None)

    def assert_grew_to(self, final: str, *, at_least: int = 3) -> None:
        """Every text read is a prefix of ``final`` and of the next one."""
        assert len(self.seen) >= at_least, self.seen
        for a, b in zip(self.seen, [*self.seen[1:], final], strict=True):
            assert b.startswith(a), (a, b)


def streaming_entries(snap: Snapshot) -> list[Entry]:
    return [e for e in snap if e.streaming]


# ---------------------------------------------------------------------------
# MessageStream itself (framework-free: asyncio and trio)


@pytest.mark.anyio
class TestMessageStream:
    async def test_grows_then_closes_with_the_dump_and_the_calls(self) -> None:
        """Writes publish a growing open entry; ``finish`` closes it with the
        unit's dump and appends its calls (citing it)."""
        from quiesce.integrations._store import Call, Unit

        async with open_buffer() as buf:
            ms = MessageStream(buf, framework="test", entry_id="m1")
            assert ms.state == "idle" and "m1" not in buf.head().live
            ms.write("hel")
            with buf.snapshot() as early:
                ms.write("lo")
                assert early["m1"].body == "hel" and early["m1"].streaming
            unit = Unit(
                "m1",
                Kind.REASONING,
                "hello!",
                {"dump": 1},
                calls=(Call("c1", "lookup", "{}"),),
            )
            report = await ms.finish(unit)
            with buf.snapshot() as snap:
                e = snap["m1"]
                assert (e.body, e.streaming, e.content) == ("hello!", False, {"dump": 1})
                call = snap["m1/c1"]
                assert call.kind is Kind.TOOL_CALL and call.refs == ("m1",)
            assert report.appended == (0,) and ms.state == "closed"
            ms.write("late")  # ignored
            assert buf.head().live["m1"].entry.body == "hello!"

    async def test_interrupt_keeps_the_text_marked(self) -> None:
        """An interrupted message stays with what arrived, stale with the reason;
        a later ``finish`` appends nothing."""
        from quiesce.integrations._store import Unit

        async with open_buffer() as buf:
            ms = MessageStream(buf, framework="test", entry_id="m1")
            ms.write("half an ans")
            with anyio.CancelScope() as scope:
                try:
                    scope.cancel()
                    await anyio.sleep(0)
                except anyio.get_cancelled_exc_class() as exc:
                    ms.interrupt(interrupted_reason("test", exc))
                    raise
            with buf.snapshot() as snap:
                e = snap["m1"]
                assert e.body == "half an ans" and not e.streaming
                mark = snap.mark("m1")
                assert mark is not None
                assert re.fullmatch(r"test: stream interrupted \(\w+\)", mark.reason)
            version = buf.version
            await ms.finish(Unit("m1", Kind.REASONING, "half an answer", None))
            assert buf.version == version and ms.state == "aborted"

    async def test_a_message_held_before_it_streamed_is_not_opened(self) -> None:
        """The framework's own sync got there first: nothing is opened, nothing doubled."""
        from quiesce.integrations._store import Unit

        async with open_buffer() as buf:
            await buf.aappend(Entry("m1", Kind.REASONING, "whole", meta={"fw": "t", "unit": "m1"}))
            ms = MessageStream(buf, framework="t", entry_id="m1")
            ms.write("wh")
            assert ms.state == "held"
            with buf.snapshot() as snap:
                assert not streaming_entries(snap)
            report = await ms.finish(Unit("m1", Kind.REASONING, "whole", None))
            assert report.held == (0,) and len(buf.head().live) == 1

    async def test_a_buffer_that_cannot_stream(self) -> None:
        """A buffer without ``open_stream`` is refused at construction."""
        from quiesce import InvalidType

        class NoStreams:
            pass

        with pytest.raises(
            InvalidType, match=r"^t: a NoStreams cannot stream \(it has no open_stream\)$"
        ):
            MessageStream(NoStreams(), framework="t", entry_id="m1")  # type: ignore[arg-type]


# ---------------------------------------------------------------------------
# LangGraph: stream_mode="messages" (asyncio only: LangGraph)


class StreamingModel(GenericFakeChatModel):
    """LangChain's fake chat model, streaming tool calls as real
    ``AIMessageChunk`` tool-call chunks (the arguments cut in pieces); text
    streams as ``GenericFakeChatModel`` streams it."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> StreamingModel:  # type: ignore[override]
        return self

    def _stream(self, messages: Any, stop: Any = None, run_manager: Any = None, **kw: Any) -> Any:
        message = next(self.messages)
        assert isinstance(message, AIMessage)
        if not message.tool_calls:
            text_model = GenericFakeChatModel(messages=iter([message]))
            yield from text_model._stream(messages, stop, run_manager, **kw)
            return
        for j, tc in enumerate(message.tool_calls):
            args = json.dumps(tc["args"])
            pieces = [args[i : i + 3] for i in range(0, len(args), 3)]
            for k, piece in enumerate(pieces):
                chunk = AIMessageChunk(
                    content="",
                    id=message.id,
                    tool_call_chunks=[
                        {
                            "name": tc["name"] if k == 0 else None,
                            "args": piece,
                            "id": tc["id"] if k == 0 else None,
                            "index": j,
                            "type": "tool_call_chunk",
                        }
                    ],
                )
                if run_manager:
                    run_manager.on_llm_new_token("", chunk=ChatGenerationChunk(message=chunk))
                yield ChatGenerationChunk(message=chunk)
        last = AIMessageChunk(content="", id=message.id, chunk_position="last")
        yield ChatGenerationChunk(message=last)


def lookup(q: str) -> str:
    """Look something up."""
    return f"{q}: nominal"


ANSWER = "disk and cpu are both fine, nothing to do here today"


def lc_script() -> Iterator[AIMessage]:
    call = {"name": "lookup", "args": {"q": "disk"}, "id": "c1", "type": "tool_call"}
    return iter([AIMessage(content="", tool_calls=[call]), AIMessage(ANSWER)])


def lc_check(snap: Snapshot) -> None:
    """A rendered LangChain request: every tool call answered right after."""
    messages, _note = lc.render_messages(snap)
    for i, m in enumerate(messages):
        if isinstance(m, AIMessage) and m.tool_calls:
            answered = {getattr(n, "tool_call_id", None) for n in messages[i + 1 :]}
            assert {tc["id"] for tc in m.tool_calls} <= answered
            assert all(isinstance(tc["args"], dict) for tc in m.tool_calls)


def lc_text(snap: Snapshot) -> str | None:
    open_ = streaming_entries(snap)
    if open_:
        messages, _ = lc.render_messages(snap)
        (m,) = [m for m in messages if m.id == open_[0].id]
        return str(m.text)
    return None


def lc_agent(buf: RuntimeBuffer | None) -> Any:
    middleware = [lc.QuiesceMiddleware(buf)] if buf is not None else []
    return create_agent(
        model=StreamingModel(messages=lc_script()),
        tools=[lookup],
        middleware=middleware,
        checkpointer=InMemorySaver(),
    )


def lc_plain(messages: list[BaseMessage]) -> list[tuple[str, Any, Any]]:
    return [(m.type, m.content, getattr(m, "tool_calls", None)) for m in messages]


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
class TestLangGraph:
    """(asyncio only: LangGraph.)"""

    async def test_reader_sees_the_answer_grow(self) -> None:
        """The answer streams into the buffer chunk by chunk; each pin renders
        a valid request; the result equals a run without quiesce; the buffer
        holds each message once."""
        cfg = {"configurable": {"thread_id": "t"}}
        control = lc_agent(None)
        async for _ in control.astream(
            {"messages": [HumanMessage("check")]}, cfg, stream_mode="messages"
        ):
            pass
        expected = lc_plain((await control.aget_state(cfg)).values["messages"])
        async with open_buffer() as buf:
            agent = lc_agent(buf)
            reader = Reader(buf, lc_text, lc_check)
            async with anyio.create_task_group() as tg:
                tg.start_soon(reader.run)
                stream = agent.astream(
                    {"messages": [HumanMessage("check")]}, cfg, stream_mode="messages"
                )
                async for _item in lc.stream_messages(buf, stream):
                    reader.tick()
                reader.send.close()
            state = (await agent.aget_state(cfg)).values["messages"]
            assert lc_plain(state) == expected
            reader.assert_grew_to(ANSWER)
            with buf.snapshot() as snap:
                assert not streaming_entries(snap)
                final = state[-1]
                assert snap[final.id].body == ANSWER and snap[final.id].content is not None
                units = [e.meta.get("unit") for e in snap if e.meta.get("unit") == e.id]
                assert len(units) == len(set(units)) == len(state)
                calls = [e for e in snap if e.kind is Kind.TOOL_CALL]
                assert [c.meta["call_id"] for c in calls] == ["c1"]
                assert calls[0].key == 'lookup {"q": "disk"}'
            # the next turn's sync finds everything held: nothing appended twice
            report = await lc.async_sync_messages(buf, state)
            assert report.appended == ()

    async def test_cancelled_mid_answer(self) -> None:
        """Cancelled mid-answer: the text that arrived stays, marked
        interrupted; the window renders a valid request."""
        cfg = {"configurable": {"thread_id": "t"}}
        async with open_buffer() as buf:
            agent = create_agent(
                model=StreamingModel(messages=iter([AIMessage(ANSWER)])),
                tools=[lookup],
                middleware=[lc.QuiesceMiddleware(buf)],
                checkpointer=InMemorySaver(),
            )
            got: list[str] = []
            with anyio.CancelScope() as scope:
                stream = agent.astream(
                    {"messages": [HumanMessage("check")]}, cfg, stream_mode="messages"
                )
                async for chunk, _meta in lc.stream_messages(buf, stream):
                    got.append(str(chunk.text))
                    if len(got) == 5:
                        scope.cancel()
            assert scope.cancelled_caught
            with buf.snapshot() as snap:
                (e,) = [e for e in snap if e.kind is Kind.REASONING]
                assert e.body == "".join(got) and not e.streaming
                mark = snap.mark(e.id)
                assert mark is not None and mark.reason.startswith(
                    "langchain: stream interrupted ("
                )
                lc_check(snap)
                messages, note = lc.render_messages(snap)
                assert messages[-1].content == "".join(got)
                assert note is not None and "stream interrupted" in note

    async def test_consumer_stops_reading(self) -> None:
        """A consumer that breaks out of the stream (``aclose``) interrupts the message."""
        cfg = {"configurable": {"thread_id": "t"}}
        async with open_buffer() as buf:
            agent = create_agent(
                model=StreamingModel(messages=iter([AIMessage(ANSWER)])),
                tools=[lookup],
                middleware=[lc.QuiesceMiddleware(buf)],
                checkpointer=InMemorySaver(),
            )
            stream = lc.stream_messages(
                buf, agent.astream({"messages": [HumanMessage("hi")]}, cfg, stream_mode="messages")
            )
            n = 0
            async for _ in stream:
                n += 1
                if n == 3:
                    break
            await stream.aclose()  # type: ignore[attr-defined]
            with buf.snapshot() as snap:
                (e,) = [e for e in snap if e.kind is Kind.REASONING]
                mark = snap.mark(e.id)
                assert mark is not None
                assert mark.reason == "langchain: stream interrupted (the consumer stopped reading)"


# ---------------------------------------------------------------------------
# pydantic-ai: a capability over every run's event stream (asyncio only)

THOUGHT, SIGNATURE = "check the disk first", "c2lnbmVkLTE="


async def pa_stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[Any]:
    """A FunctionModel stream: a signed thinking block and a tool call first,
    then, once the tool answered, the answer word by word."""
    if not any(isinstance(p, ToolReturnPart) for m in messages for p in m.parts):
        yield {0: DeltaThinkingPart(content=THOUGHT[:8])}
        yield {0: DeltaThinkingPart(content=THOUGHT[8:])}
        yield {0: DeltaThinkingPart(signature=SIGNATURE)}
        for piece in ('{"q":', ' "di', 'sk"}'):
            yield {
                1: DeltaToolCall(
                    name="lookup" if piece == '{"q":' else None, json_args=piece, tool_call_id="c1"
                )
            }
        return
    for word in re.split(r"(?<= )", ANSWER):
        yield word


def pa_agent(buf: RuntimeBuffer | None, model: Any) -> Agent[None, str]:
    caps: list[Any] = []
    if buf is not None:
        caps = [pa.QuiesceStream(buf), ProcessHistory(pa.QuiesceHistoryProcessor(buf))]
    agent: Agent[None, str] = Agent(model, capabilities=caps)

    @agent.tool_plain
    def lookup(q: str) -> str:
        return f"{q}: nominal"

    return agent


def pa_check(snap: Snapshot) -> None:
    """A rendered pydantic-ai request: thinking signed, every call answered."""
    messages = pa.render_messages(snap)
    for i, m in enumerate(messages):
        for p in m.parts:
            if isinstance(p, ThinkingPart):
                assert p.signature == SIGNATURE
            if isinstance(p, ToolCallPart):
                later = [q for n in messages[i + 1 :] for q in n.parts]
                assert any(getattr(q, "tool_call_id", None) == p.tool_call_id for q in later)


def pa_text(snap: Snapshot) -> str | None:
    open_ = streaming_entries(snap)
    if not open_:
        return None
    messages = pa.render_messages(snap)
    last = messages[-1]
    assert isinstance(last, ModelResponse)
    return "\n".join(p.content for p in last.parts if isinstance(p, TextPart))


def pa_plain(messages: list[ModelMessage]) -> list[Any]:
    out = []
    for m in messages:
        parts = []
        for p in m.parts:
            if isinstance(p, ThinkingPart):
                parts.append(("thinking", p.content, p.signature))
            elif isinstance(p, ToolCallPart):
                parts.append(("call", p.tool_name, p.args_as_dict(), p.tool_call_id))
            elif isinstance(p, TextPart | ToolReturnPart):
                parts.append((type(p).__name__, p.content))
            else:
                parts.append((type(p).__name__, getattr(p, "content", None)))
        out.append((type(m).__name__, parts))
    return out


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
class TestPydanticAI:
    """(asyncio only: pydantic-ai.)"""

    async def test_run_stream_events_reader_sees_the_answer_grow(self) -> None:
        """Through ``run_stream_events``: the answer grows in the buffer; each
        pin renders a valid request (the thinking block only once signed,
        the call only once complete and answered); the result equals a run
        without quiesce; every message is held once."""
        control = pa_agent(None, FunctionModel(stream_function=pa_stream))
        async with control.run_stream_events("check the disk") as events:
            async for _ev in events:
                pass
        expected = pa_plain(events.result.all_messages())  # type: ignore[union-attr]
        async with open_buffer() as buf:
            agent = pa_agent(buf, FunctionModel(stream_function=pa_stream))
            reader = Reader(buf, pa_text, pa_check)
            async with anyio.create_task_group() as tg:
                tg.start_soon(reader.run)
                async with agent.run_stream_events("check the disk") as events:
                    async for _ in events:
                        reader.tick()
                reader.send.close()
            result = events.result
            assert result is not None and result.output == ANSWER
            assert pa_plain(result.all_messages()) == expected
            reader.assert_grew_to(ANSWER)
            with buf.snapshot() as snap:
                assert not streaming_entries(snap)
                responses = [
                    e
                    for e in snap
                    if e.meta.get("unit") == e.id and e.content and e.content["kind"] == "response"
                ]
                assert [e.body for e in responses] == ["", ANSWER]  # each response once
                calls = [e for e in snap if e.kind is Kind.TOOL_CALL]
                assert [c.meta["call_id"] for c in calls] == ["c1"]
                pa_check(snap)
            # a sync of the run's whole history finds every message held
            report = pa.sync_messages(buf, result.all_messages())
            assert report.appended == ()

    async def test_iter_and_test_model(self) -> None:
        """Through ``agent.iter`` with pydantic-ai's ``TestModel``: the same
        final messages as without quiesce, the answer streamed."""
        text = "all systems nominal and the disk has room to spare"
        control = pa_agent(None, TestModel(custom_output_text=text))
        async with control.iter("check") as run:
            async for node in run:
                if Agent.is_model_request_node(node):
                    async with node.stream(run.ctx) as s:
                        async for _ in s:
                            pass
        expected = pa_plain(run.result.all_messages())  # type: ignore[union-attr]
        async with open_buffer() as buf:
            agent = pa_agent(buf, TestModel(custom_output_text=text))
            reader = Reader(buf, pa_text, pa_check)
            async with anyio.create_task_group() as tg:
                tg.start_soon(reader.run)
                async with agent.iter("check") as run:
                    async for node in run:
                        if Agent.is_model_request_node(node):
                            async with node.stream(run.ctx) as s:
                                async for _ in s:
                                    reader.tick()
                reader.send.close()
            assert run.result is not None
            assert pa_plain(run.result.all_messages()) == expected
            reader.assert_grew_to(text)

    async def test_cancelled_mid_answer(self) -> None:
        """Cancelled mid-answer: what arrived stays, marked interrupted; no
        partial part renders."""
        async with open_buffer() as buf:
            agent = pa_agent(buf, FunctionModel(stream_function=pa_stream))
            n = 0
            with anyio.CancelScope() as scope:
                async with agent.run_stream_events("check the disk") as events:
                    async for ev in events:
                        if type(ev).__name__ == "PartDeltaEvent" and isinstance(
                            getattr(ev.delta, "content_delta", None), str
                        ):
                            n += 1
                            if n == 4:
                                scope.cancel()
            assert scope.cancelled_caught
            with buf.snapshot() as snap:
                aborted = [e for e in snap if snap.mark(e.id) is not None]
                (e,) = aborted
                assert ANSWER.startswith(e.body) and 0 < len(e.body) < len(ANSWER)
                assert not e.streaming and e.content is None
                mark = snap.mark(e.id)
                assert mark is not None and mark.reason.startswith(
                    "pydantic-ai: stream interrupted ("
                )
                pa_check(snap)


# ---------------------------------------------------------------------------
# The OpenAI Agents SDK: Runner.run_streamed's raw response events (asyncio only)


def ag_step(output: list[Any]) -> Any:
    """A ``ScriptedModel`` step streaming ``output`` as the SDK's own
    Responses events, every text delta cut into words (the SDK's helper
    emits one delta per part), renumbered."""
    from agents.testing import ModelStep
    from agents.testing.model import _stream_events_for_step

    events: list[Any] = []
    for ev in _stream_events_for_step(ModelStep(output=output), preserve_raw_usage=False):
        if ev.type == "response.output_text.delta":
            events += [ev.model_copy(update={"delta": w}) for w in re.split(r"(?<= )", ev.delta)]
        else:
            events.append(ev)
    events = [ev.model_copy(update={"sequence_number": n}) for n, ev in enumerate(events)]
    return ModelStep.stream(events, output=output)


def ag_model() -> Any:
    from agents.testing import ScriptedModel, assistant_message, function_call

    return ScriptedModel(
        [
            ag_step([function_call("lookup", {"q": "disk"}, call_id="c1")]),
            ag_step([assistant_message(ANSWER, item_id="msg_2")]),
        ]
    )


def ag_agent(buf: RuntimeBuffer | None) -> tuple[Any, Any]:
    from agents import Agent, RunConfig, function_tool

    from quiesce.integrations.openai_agents import quiesce_input_filter

    @function_tool
    def lookup(q: str) -> str:
        """Look something up."""
        return f"{q}: nominal"

    config = RunConfig(tracing_disabled=True)
    if buf is not None:
        config = RunConfig(tracing_disabled=True, call_model_input_filter=quiesce_input_filter(buf))
    return Agent(name="sre", model=ag_model(), tools=[lookup]), config


def ag_check(snap: Snapshot) -> None:
    """A rendered Responses input: every function_call answered."""
    from quiesce.adapters import responses

    items = responses.render(snap)
    calls = {i["call_id"] for i in items if i.get("type") == "function_call"}
    answered = {i["call_id"] for i in items if i.get("type") == "function_call_output"}
    assert calls <= answered, items


def ag_text(snap: Snapshot) -> str | None:
    open_ = streaming_entries(snap)
    return open_[0].body if open_ else None


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
class TestAgentsSDK:
    """(asyncio only: the Agents SDK's runner.)"""

    async def test_reader_sees_the_answer_grow(self) -> None:
        """``feed_stream`` over ``Runner.run_streamed``: the answer grows in
        the buffer, each pin renders a valid input, the final output equals
        a run without quiesce, and the input filter's sync appends nothing
        twice."""
        from agents import Runner

        from quiesce.integrations.openai_agents import feed_stream

        agent, config = ag_agent(None)
        control = Runner.run_streamed(agent, "check the disk", run_config=config)
        async for _ev in control.stream_events():
            pass
        async with open_buffer() as buf:
            agent, config = ag_agent(buf)
            reader = Reader(buf, ag_text, ag_check)
            run = Runner.run_streamed(agent, "check the disk", run_config=config)
            async with anyio.create_task_group() as tg:
                tg.start_soon(reader.run)
                outputs = await feed_stream(buf, run, on_event=lambda _ev: reader.look())
                reader.send.close()
            assert run.final_output == control.final_output == ANSWER
            assert [[i["type"] for i in out] for out in outputs] == [["function_call"], ["message"]]
            reader.assert_grew_to(ANSWER)
            with buf.snapshot() as snap:
                assert not streaming_entries(snap)
                assert snap["msg_2"].body == ANSWER
                assert [e.id for e in snap if e.kind is Kind.TOOL_CALL] == ["c1"]
                ag_check(snap)
            from quiesce.adapters import responses

            report = responses.sync_messages(buf, run.to_input_list())
            assert report.appended == ()

    async def test_cancelled_mid_answer(self) -> None:
        """Cancelled mid-answer: the message's text so far stays, marked
        interrupted; the window renders a valid input."""
        from agents import Runner

        from quiesce.integrations.openai_agents import feed_stream

        async with open_buffer() as buf:
            agent, config = ag_agent(buf)
            run = Runner.run_streamed(agent, "check the disk", run_config=config)
            deltas = 0

            async def on_event(ev: Any) -> None:
                nonlocal deltas
                if getattr(getattr(ev, "data", None), "type", "") == "response.output_text.delta":
                    deltas += 1
                    if deltas == 4:
                        scope.cancel()
                await anyio.lowlevel.checkpoint()  # where a consumer's own await would be

            with anyio.CancelScope() as scope:
                await feed_stream(buf, run, on_event=on_event)
            assert scope.cancelled_caught
            run.cancel()
            with buf.snapshot() as snap:
                e = snap["msg_2"]
                assert not e.streaming and ANSWER.startswith(e.body) and e.body.count(" ") == 4
                mark = snap.mark("msg_2")
                assert mark is not None and "interrupted" in mark.reason
                ag_check(snap)


# ---------------------------------------------------------------------------
# The Agents SDK with its session: Runner.run_streamed(..., session=QuiesceSession)


def ag_session_agent() -> Any:
    from agents import Agent, function_tool

    @function_tool
    def lookup(q: str) -> str:
        """Look something up."""
        return f"{q}: nominal"

    return Agent(name="sre", model=ag_model(), tools=[lookup])


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
class TestAgentsSDKSession:
    """``feed_stream`` with a :class:`QuiesceSession` (asyncio only: the
    Agents SDK's runner)."""

    async def test_session_items_equal_the_sdks_own_session(self) -> None:
        """``Runner.run_streamed`` with a ``QuiesceSession``: a reader sees
        the answer grow and every pin renders a valid input; the session's
        items after the run equal a control run's with the SDK's own
        ``SQLiteSession`` (the streamed items are held, never added twice);
        a second run reads them back as the SDK's session would."""
        from agents import RunConfig, Runner, SQLiteSession

        from quiesce.integrations.openai_agents import QuiesceSession, feed_stream

        config = RunConfig(tracing_disabled=True)
        control_session = SQLiteSession("control")
        control = Runner.run_streamed(
            ag_session_agent(), "check the disk", run_config=config, session=control_session
        )
        async for _ev in control.stream_events():
            pass
        expected = await control_session.get_items()
        async with open_buffer() as buf:
            session = QuiesceSession("ops", buf)
            reader = Reader(buf, ag_text, ag_check)
            run = Runner.run_streamed(
                ag_session_agent(), "check the disk", run_config=config, session=session
            )
            async with anyio.create_task_group() as tg:
                tg.start_soon(reader.run)
                outputs = await feed_stream(session, run, on_event=lambda _ev: reader.look())
                reader.send.close()
            assert run.final_output == control.final_output == ANSWER
            assert [[i["type"] for i in out] for out in outputs] == [["function_call"], ["message"]]
            reader.assert_grew_to(ANSWER)
            assert await session.get_items() == expected
            with buf.snapshot() as snap:
                assert not streaming_entries(snap)
                assert [e.id for e in snap if e.kind is Kind.TOOL_CALL] == ["c1"]
                assert sum(e.body == ANSWER for e in snap) == 1
            # the SDK's restore of a popped item is still refused whole
            from quiesce import DuplicateEntry

            popped = await session.pop_item()
            assert popped == expected[-1]
            version = buf.version
            with pytest.raises(DuplicateEntry):
                await session.add_items([popped])
            assert buf.version == version

    async def test_conversation_must_match_the_session(self) -> None:
        """``conversation=`` other than the session's id, or missing with a
        pool, is refused before any event is read."""
        from agents import RunConfig, Runner

        from quiesce import BufferPool, InvalidArgument
        from quiesce.integrations.openai_agents import QuiesceSession, feed_stream

        config = RunConfig(tracing_disabled=True)
        async with BufferPool() as pool:
            session = QuiesceSession("ops", pool)
            run = Runner.run_streamed(ag_session_agent(), "x", run_config=config)
            with pytest.raises(
                InvalidArgument,
                match=r"^feed_stream: conversation 'dev' is not the session's 'ops'$",
            ):
                await feed_stream(session, run, conversation="dev")
            with pytest.raises(
                InvalidArgument, match=r"^feed_stream: a BufferPool needs conversation= "
            ):
                await feed_stream(pool, run)
            assert len(pool) == 0
            run.cancel()


# ---------------------------------------------------------------------------
# Pools: two conversations streaming at once on one BufferPool, never mixed


ANSWERS = {
    "alice": "alice: the disk is fine and has plenty of room left",
    "bob": "bob: the cpu is idle, cool and nothing needs doing",
}


class PoolWatch:
    """After every event of one conversation's stream, pins the buffer of
    each conversation of the pool: an open entry's text is a prefix of that
    conversation's own answer, and no entry of a buffer names the other
    conversation. ``seen[cid]`` is every streamed text read, in order."""

    def __init__(self, pool: Any) -> None:
        self.pool = pool
        self.seen: dict[str, list[str]] = {cid: [] for cid in ANSWERS}

    async def look(self) -> None:
        for cid in self.pool.conversations():
            buf = await self.pool.get(cid)
            other = next(c for c in ANSWERS if c != cid)
            with buf.snapshot() as snap:
                for e in snap:
                    assert other not in e.body, (cid, e)
                    if e.streaming:
                        assert ANSWERS[cid].startswith(e.body), (cid, e.body)
                        if not self.seen[cid] or self.seen[cid][-1] != e.body:
                            self.seen[cid].append(e.body)

    def assert_both_grew(self) -> None:
        for cid, texts in self.seen.items():
            assert len(texts) >= 3, (cid, texts)
            for a, b in zip(texts, [*texts[1:], ANSWERS[cid]], strict=True):
                assert b.startswith(a)


async def answers_once(pool: Any, cid: str) -> list[str]:
    """The bodies of the buffer of ``cid``, every entry closed."""
    buf = await pool.get(cid)
    with buf.snapshot() as snap:
        assert not streaming_entries(snap)
        return [e.body for e in snap]


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
class TestPools:
    """Each stream helper takes a :class:`~quiesce.BufferPool` where its
    integration does and resolves the conversation the same way: two
    conversations streaming at once on one pool never mix (asyncio only:
    the frameworks)."""

    async def test_langgraph_threads(self) -> None:
        """Two LangGraph threads (``thread_id``) stream through one pool with
        the middleware on the same pool: each buffer holds its thread's
        question and answer once."""
        from quiesce import BufferPool

        async with BufferPool() as pool:
            watch = PoolWatch(pool)

            async def run(cid: str) -> None:
                agent = create_agent(
                    model=StreamingModel(messages=iter([AIMessage(ANSWERS[cid])])),
                    tools=[],
                    middleware=[lc.QuiesceMiddleware(pool)],
                    checkpointer=InMemorySaver(),
                )
                stream = agent.astream(
                    {"messages": [HumanMessage(f"{cid}: status?")]},
                    {"configurable": {"thread_id": cid}},
                    stream_mode="messages",
                )
                async for _item in lc.stream_messages(pool, stream):
                    await watch.look()

            async with anyio.create_task_group() as tg:
                for cid in ANSWERS:
                    tg.start_soon(run, cid)
            watch.assert_both_grew()
            for cid, answer in ANSWERS.items():
                assert await answers_once(pool, cid) == [f"{cid}: status?", answer]

    async def test_langgraph_pool_needs_a_thread_id(self) -> None:
        """With a pool, a run without a ``thread_id`` (no checkpointer) is
        refused at its first message, nothing written."""
        from quiesce import BufferPool, InvalidArgument

        async with BufferPool() as pool:
            agent = create_agent(model=StreamingModel(messages=iter([AIMessage(ANSWER)])), tools=[])
            stream = agent.astream({"messages": [HumanMessage("hi")]}, stream_mode="messages")
            with pytest.raises(
                InvalidArgument,
                match=r"^langchain.stream_messages: a BufferPool picks the buffer by the run's "
                r"thread_id, and this run has none ",
            ):
                async for _item in lc.stream_messages(pool, stream):
                    pass
            assert len(pool) == 0

    async def test_pydantic_ai_conversations(self) -> None:
        """Two pydantic-ai conversations (``conversation_id``) stream through
        one ``QuiesceStream(pool)`` with the processor on the same pool."""
        from quiesce import BufferPool

        async def words(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[Any]:
            asked = next(
                p.content for m in messages for p in m.parts if type(p).__name__ == "UserPromptPart"
            )
            cid = str(asked).split(":")[0]
            for word in re.split(r"(?<= )", ANSWERS[cid]):
                yield word

        async with BufferPool() as pool:
            watch = PoolWatch(pool)
            capability = pa.QuiesceStream(pool)
            agent: Agent[None, str] = Agent(
                FunctionModel(stream_function=words),
                capabilities=[capability, ProcessHistory(pa.QuiesceHistoryProcessor(pool))],
            )

            async def run(cid: str) -> None:
                async with agent.run_stream_events(
                    f"{cid}: status?", conversation_id=cid
                ) as events:
                    async for _ev in events:
                        await watch.look()
                assert events.result is not None and events.result.output == ANSWERS[cid]

            async with anyio.create_task_group() as tg:
                for cid in ANSWERS:
                    tg.start_soon(run, cid)
            watch.assert_both_grew()
            for cid, answer in ANSWERS.items():
                assert await answers_once(pool, cid) == [f"{cid}: status?", answer]

    async def test_agents_sdk_sessions(self) -> None:
        """Two Agents SDK sessions of one pool stream at once
        (``feed_stream(session, run)``): each session's items are its own
        question and answer."""
        from agents import Agent as AgentsAgent
        from agents import RunConfig, Runner
        from agents.testing import ScriptedModel, assistant_message

        from quiesce import BufferPool
        from quiesce.integrations.openai_agents import QuiesceSession, feed_stream

        config = RunConfig(tracing_disabled=True)
        async with BufferPool() as pool:
            watch = PoolWatch(pool)

            async def run(cid: str) -> None:
                model = ScriptedModel(
                    [ag_step([assistant_message(ANSWERS[cid], item_id=f"msg_{cid}")])]
                )
                session = QuiesceSession(cid, pool)
                result = Runner.run_streamed(
                    AgentsAgent(name=cid, model=model),
                    f"{cid}: status?",
                    run_config=config,
                    session=session,
                )
                await feed_stream(session, result, on_event=lambda _ev: watch.look())
                assert result.final_output == ANSWERS[cid]
                items = await session.get_items()
                assert [i.get("role") for i in items] == ["user", "assistant"]

            async with anyio.create_task_group() as tg:
                for cid in ANSWERS:
                    tg.start_soon(run, cid)
            watch.assert_both_grew()
            for cid, answer in ANSWERS.items():
                assert await answers_once(pool, cid) == [f"{cid}: status?", answer]
