"""pydantic-ai end to end with ``QuiesceHistoryProcessor`` (offline).

pydantic-ai runs its tools and streams with asyncio tasks, so every async test
here runs on **asyncio only**. The model is pydantic-ai's own ``FunctionModel``
(a scripted function of the messages; it records each request), used through
``capabilities=[ProcessHistory(processor)]`` — pydantic-ai 2.68 has no
``history_processors=`` argument any more.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.capabilities import ProcessHistory
from pydantic_ai.messages import (
    BinaryContent,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from _scenario import Scenario
from quiesce import (
    Buffer,
    BufferPool,
    ConversationMismatch,
    InvalidArgument,
    SQLiteLog,
    open_buffer,
)
from quiesce.integrations.pydantic_ai import QuiesceHistoryProcessor, sync_messages

THINKING = ThinkingPart(
    "Two lookups, in parallel.", signature="c2lnbmVkLTE=", provider_name="anthropic"
)
IMAGE = BinaryContent(data=b"\x89PNG\r\n\x1a\nfake", media_type="image/png")


@pytest.fixture
def anyio_backend() -> str:
    """pydantic-ai runs tools with asyncio tasks: asyncio only."""
    return "asyncio"


class Script:
    """A FunctionModel function: canned responses, recording each request."""

    def __init__(self, responses: list[ModelResponse]) -> None:
        self.responses = responses
        self.requests: list[list[ModelMessage]] = []

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.requests.append(list(messages))
        return self.responses.pop(0)


def calls(*pairs: tuple[str, str]) -> list[ToolCallPart]:
    return [ToolCallPart("lookup", {"q": q}, i) for i, q in pairs]


def call_ids(messages: list[ModelMessage]) -> set[str]:
    return {
        p.tool_call_id
        for m in messages
        if isinstance(m, ModelResponse)
        for p in m.parts
        if isinstance(p, ToolCallPart)
    }


def answered(messages: list[ModelMessage]) -> None:
    """Each response's calls are answered in the next request; no result lacks its call."""
    open_calls: set[str] = set()
    for m in messages:
        if isinstance(m, ModelRequest):
            returns = {p.tool_call_id for p in m.parts if isinstance(p, ToolReturnPart)}
            assert returns <= open_calls, f"orphaned results {returns - open_calls}"
            assert open_calls <= returns, f"unanswered {open_calls - returns}"
            open_calls = set()
        else:
            assert not open_calls
            open_calls = {p.tool_call_id for p in m.parts if isinstance(p, ToolCallPart)}


def note_of(messages: list[ModelMessage]) -> str:
    first = messages[0]
    assert isinstance(first, ModelRequest)
    return "\n".join(
        p.content for p in first.parts if isinstance(p, SystemPromptPart) and "quiesce" in p.content
    )


def make_agent(script: Script, buf: Any, pruner: Any, scenario: Scenario) -> Agent[None, str]:
    scenario.buf = buf
    agent = Agent(
        FunctionModel(script),
        instructions="Be terse.",
        capabilities=[ProcessHistory(QuiesceHistoryProcessor(buf, pruner=pruner))],
    )

    @agent.tool_plain
    async def lookup(q: str) -> str:
        """Look something up."""
        return await scenario.lookup(q)

    return agent


@pytest.mark.anyio
async def test_agent_end_to_end(tmp_path: Path) -> None:
    """Two parallel calls after a signed ThinkingPart; a pinned reader defers a
    prune that is then applied; the pruned call re-runs without crashing; the
    thinking part and an image reach the model unchanged; a reopened SQLite
    log continues the conversation; every request answers every call.
    (asyncio only: pydantic-ai.)"""
    path = tmp_path / "pa.sqlite"
    script = Script(
        [
            ModelResponse(
                parts=[THINKING, TextPart("Looking up."), *calls(("c1", "a"), ("c2", "b"))]
            ),
            ModelResponse(parts=[TextPart("a and b found.")]),
            ModelResponse(parts=calls(("c3", "a"))),
            ModelResponse(parts=[TextPart("a found again.")]),
            ModelResponse(parts=[TextPart("Still here.")]),
        ]
    )
    scenario = Scenario()
    async with open_buffer(log=SQLiteLog(path)) as buf:
        agent = make_agent(script, buf, scenario.pruner, scenario)
        r1 = await agent.run(["find a and b in this", IMAGE])
        assert call_ids(script.requests[1]) == {"c1", "c2"}
        r2 = await scenario.run_while_pinned(
            lambda: agent.run("again", message_history=r1.all_messages())
        )
        assert "c1" in call_ids(script.requests[2])
        assert "stale entries, shown unchanged]" in note_of(script.requests[2])
        assert call_ids(script.requests[3]) == {"c2", "c3"}
        assert "[quiesce: removed from this context]" in note_of(script.requests[3])
        version = buf.version
        history = r2.all_messages()

    buf.sink.close()  # one writer per log file (LogLocked): close before reopening
    async with open_buffer(log=SQLiteLog(path)) as buf2:
        assert buf2.version == version
        agent2 = make_agent(script, buf2, None, scenario)
        r3 = await agent2.run("still there?", message_history=history)
        assert r3.output == "Still here."
        last = script.requests[-1]
        assert call_ids(last) == {"c2", "c3"}
        prompts = [
            p.content
            for m in last
            if isinstance(m, ModelRequest)
            for p in m.parts
            if isinstance(p, UserPromptPart)
        ]
        assert prompts[1:] == ["again", "still there?"]
        # pydantic-ai's own ModelMessagesTypeAdapter loads BinaryContent as its
        # BinaryImage subclass: the same bytes and media type.
        text, image = prompts[0]
        assert text == "find a and b in this"
        assert isinstance(image, BinaryContent)
        assert (image.data, image.media_type) == (IMAGE.data, IMAGE.media_type)

    for req in script.requests:
        answered(req)
    thinking = [
        p for req in script.requests for m in req for p in m.parts if isinstance(p, ThinkingPart)
    ]
    assert len(thinking) == 4 and all(t == THINKING for t in thinking)


@pytest.mark.anyio
async def test_pruned_result_gets_a_stand_in() -> None:
    """A result pruned while its call stays is replaced by a stand-in return,
    so the request stays valid. (asyncio only: pydantic-ai.)"""
    script = Script(
        [
            ModelResponse(parts=calls(("c1", "a"), ("c2", "b"))),
            ModelResponse(parts=[TextPart("done")]),
            ModelResponse(parts=[TextPart("done again")]),
        ]
    )
    async with open_buffer() as buf:
        agent = make_agent(script, buf, None, Scenario())
        r1 = await agent.run("go")
        with buf.snapshot() as snap:
            result = next(e.id for e in snap if e.meta.get("result_of") == "c2")
        assert (await buf.aprune([result], reason="too long"))[result].status.name == "PRUNED"
        await agent.run("more", message_history=r1.all_messages())
    last = script.requests[-1]
    answered(last)
    (stand_in,) = [
        p for m in last for p in m.parts if isinstance(p, ToolReturnPart) and p.tool_call_id == "c2"
    ]
    assert str(stand_in.content).startswith("[quiesce: the result of")


def test_sync_is_idempotent_and_refuses_foreign_objects() -> None:
    """The same history twice appends nothing the second time; a foreign
    object is refused naming its index, and nothing is appended."""
    buf = Buffer()
    history: list[Any] = [
        ModelRequest(parts=[UserPromptPart("hi")]),
        ModelResponse(parts=[THINKING, *calls(("c1", "a"))]),
        ModelRequest(parts=[ToolReturnPart("lookup", "result for a", "c1")]),
    ]
    assert len(sync_messages(buf, history).appended) == 3
    version = buf.version
    assert len(sync_messages(buf, history).held) == 3
    assert buf.version == version
    with pytest.raises(
        InvalidArgument,
        match=r"^pydantic-ai: message 1: expected a ModelRequest or ModelResponse, not dict$",
    ):
        sync_messages(buf, [ModelRequest(parts=[UserPromptPart("x")]), {"kind": "request"}])
    assert buf.version == version


def test_missing_extra_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without pydantic-ai installed, importing the integration names the extra."""
    monkeypatch.setitem(sys.modules, "pydantic_ai.messages", None)
    monkeypatch.delitem(sys.modules, "quiesce.integrations.pydantic_ai", raising=False)
    with pytest.raises(ImportError, match=r'pip install "quiesce\[pydantic-ai\]"'):
        importlib.import_module("quiesce.integrations.pydantic_ai")


class TestRunWithoutHistory:
    """A run with no ``message_history`` on a buffer that holds a conversation
    is another conversation: refused before the model is called, never read
    as a request to prune what the buffer holds."""

    @staticmethod
    def _agent(script: Script, processor: QuiesceHistoryProcessor | None) -> Agent[None, str]:
        caps = [ProcessHistory(processor)] if processor is not None else []
        return Agent(FunctionModel(script), capabilities=caps)

    @pytest.mark.anyio
    async def test_control_sees_only_the_new_prompt(self) -> None:
        """Without quiesce (the control), the second run's model sees only its prompt."""
        script = Script([ModelResponse(parts=[TextPart("noted")]) for _ in range(2)])
        agent = self._agent(script, None)
        await agent.run("I am Alice; never delete /data", conversation_id="c1")
        await agent.run("hello again", conversation_id="c1")
        texts = [p.content for m in script.requests[1] for p in m.parts if hasattr(p, "content")]
        assert texts == ["hello again"]

    @pytest.mark.anyio
    async def test_single_buffer_raises_and_changes_nothing(self) -> None:
        """With quiesce: ``ConversationMismatch`` naming both histories, the
        model not called, the buffer's version, entries and tombstones
        unchanged (today's main pruned every unprotected entry instead)."""
        script = Script([ModelResponse(parts=[TextPart("noted")]) for _ in range(2)])
        async with open_buffer() as buf:
            agent = self._agent(script, QuiesceHistoryProcessor(buf))
            await agent.run("I am Alice; never delete /data", conversation_id="c1")
            version = buf.version
            with buf.snapshot() as snap:
                before = [e.id for e in snap]
            with pytest.raises(
                ConversationMismatch,
                match=r"^QuiesceHistoryProcessor: this buffer holds conversation 'c1', a history "
                r"starting with '#first:[0-9a-f]{16}'; this run's history starts with "
                r"'#first:[0-9a-f]{16}' and does not extend it \(a run without message_history",
            ) as caught:
                await agent.run("hello again", conversation_id="c1")
            assert caught.value.bound != caught.value.seen
            assert len(script.requests) == 1  # the model was not called
            assert buf.version == version and not buf.tombstones
            with buf.snapshot() as snap:
                assert [e.id for e in snap] == before

    @pytest.mark.anyio
    async def test_pool_buffer_of_the_same_id_refuses_too(self) -> None:
        """With a pool, the buffer of the same ``conversation_id`` refuses the
        same way; a run that continues the history still works after it."""
        script = Script([ModelResponse(parts=[TextPart("noted")]) for _ in range(2)])
        async with BufferPool() as pool:
            agent = self._agent(script, QuiesceHistoryProcessor(pool))
            r1 = await agent.run("I am Alice", conversation_id="c1")
            with pytest.raises(ConversationMismatch):
                await agent.run("hello again", conversation_id="c1")
            r2 = await agent.run("still me", message_history=r1.all_messages())
            assert r2.output == "noted"
            buf = await pool.get("c1")
            assert not buf.tombstones
            with buf.snapshot() as snap:
                bodies = [e.body for e in snap]
            assert bodies[0] == "I am Alice" and "still me" in bodies
