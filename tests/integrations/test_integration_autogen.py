"""AutoGen end to end with ``QuiesceChatCompletionContext`` (offline).

AutoGen's ``AssistantAgent`` runs its tools with asyncio (under trio it fails
with "no running event loop"), so the end-to-end test runs on **asyncio
only**; the context on its own (``add_message``, ``get_messages``,
``save_state``/``load_state``) is anyio code, and its tests run on asyncio
**and** trio. The model is
AutoGen's own ``ReplayChatCompletionClient`` (canned ``CreateResult``\\ s with
parallel ``FunctionCall``\\ s and a ``thought``), whose ``create_calls``
record every request.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

import pytest
from autogen_agentchat.agents import AssistantAgent
from autogen_core import FunctionCall, Image
from autogen_core.models import (
    AssistantMessage,
    CreateResult,
    FunctionExecutionResult,
    FunctionExecutionResultMessage,
    LLMMessage,
    ModelFamily,
    ModelInfo,
    RequestUsage,
    SystemMessage,
    UserMessage,
)
from autogen_ext.models.replay import ReplayChatCompletionClient

from _scenario import Scenario
from quiesce import Buffer, Entry, InvalidArgument, Kind, SQLiteLog, open_buffer
from quiesce.integrations.autogen import QuiesceChatCompletionContext

THOUGHT = "Two lookups, in parallel."
USAGE = RequestUsage(prompt_tokens=0, completion_tokens=0)
INFO = ModelInfo(
    vision=True,
    function_calling=True,
    json_output=False,
    family=ModelFamily.UNKNOWN,
    structured_output=False,
)
PIXEL = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="  # noqa: E501 (a 1x1 PNG)


def calls(*pairs: tuple[str, str], thought: str | None = None) -> CreateResult:
    return CreateResult(
        finish_reason="function_calls",
        content=[FunctionCall(id=i, name="lookup", arguments=f'{{"q": "{q}"}}') for i, q in pairs],
        usage=USAGE,
        cached=False,
        thought=thought,
    )


def text(body: str) -> CreateResult:
    return CreateResult(finish_reason="stop", content=body, usage=USAGE, cached=False)


def requests(client: ReplayChatCompletionClient) -> list[list[LLMMessage]]:
    return [list(c["messages"]) for c in client.create_calls]


def call_ids(messages: list[LLMMessage]) -> set[str]:
    return {
        fc.id
        for m in messages
        if isinstance(m, AssistantMessage) and isinstance(m.content, list)
        for fc in m.content
    }


def answered(messages: list[LLMMessage]) -> None:
    """Each assistant call list is answered by the result message right after it."""
    open_calls: set[str] = set()
    for m in messages:
        if isinstance(m, FunctionExecutionResultMessage):
            got = {r.call_id for r in m.content}
            assert got == open_calls, f"calls {open_calls}, results {got}"
            open_calls = set()
            continue
        assert not open_calls, f"unanswered {open_calls}"
        if isinstance(m, AssistantMessage) and isinstance(m.content, list):
            open_calls = {fc.id for fc in m.content}
    assert not open_calls


def note_of(messages: list[LLMMessage]) -> str:
    return "\n".join(
        m.content for m in messages if isinstance(m, SystemMessage) and "[quiesce:" in m.content
    )


def make_agent(
    client: ReplayChatCompletionClient, buf: Any, pruner: Any, scenario: Scenario
) -> AssistantAgent:
    scenario.buf = buf

    async def lookup(q: str) -> str:
        """Look something up."""
        return await scenario.lookup(q)

    return AssistantAgent(
        "assistant",
        model_client=client,
        tools=[lookup],
        system_message="Be terse.",
        reflect_on_tool_use=True,
        model_context=QuiesceChatCompletionContext(buf, pruner=pruner),
    )


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # AssistantAgent's tool loop
async def test_agent_end_to_end(tmp_path: Path) -> None:
    """Two parallel calls with a thought; a pinned reader defers a prune that
    is then applied; the pruned call re-runs without crashing; the thought
    reaches the model unchanged; a reopened SQLite log continues the
    conversation in a new context; every request answers every call.
    (asyncio only: AssistantAgent runs its tools with asyncio.)"""
    path = tmp_path / "ag.sqlite"
    client = ReplayChatCompletionClient(
        [
            calls(("c1", "a"), ("c2", "b"), thought=THOUGHT),
            text("a and b found."),
            calls(("c3", "a")),
            text("a found again."),
            text("Still here."),
        ],
        model_info=INFO,
    )
    scenario = Scenario()
    async with open_buffer(log=SQLiteLog(path)) as buf:
        agent = make_agent(client, buf, scenario.pruner, scenario)
        await agent.run(task="find a and b")
        assert call_ids(requests(client)[1]) == {"c1", "c2"}
        await scenario.run_while_pinned(lambda: agent.run(task="again"))
        reqs = requests(client)
        assert "c1" in call_ids(reqs[2])
        assert "stale entries, shown unchanged]" in note_of(reqs[2])
        assert call_ids(reqs[3]) == {"c2", "c3"}
        assert "[quiesce: removed from this context]" in note_of(reqs[3])
        version = buf.version

    buf.sink.close()  # one writer per log file (LogLocked): close before reopening
    async with open_buffer(log=SQLiteLog(path)) as buf2:
        assert buf2.version == version
        agent2 = make_agent(client, buf2, None, scenario)
        result = await agent2.run(task="still there?")
        assert result.messages[-1].to_text() == "Still here."
        last = requests(client)[-1]
        assert call_ids(last) == {"c2", "c3"}
        users = [m.content for m in last if isinstance(m, UserMessage)]
        assert users == ["find a and b", "again", "still there?"]

    reqs = requests(client)
    for req in reqs:
        answered(req)
    thoughts = [
        m.thought
        for req in reqs
        for m in req
        if isinstance(m, AssistantMessage) and isinstance(m.content, list) and "c1" in call_ids([m])
    ]
    assert thoughts == [THOUGHT, THOUGHT]


@pytest.mark.anyio
async def test_state_image_and_stand_in() -> None:
    """An image message round-trips; ``save_state``/``load_state`` into a
    context of the same conversation over the same buffer append nothing; a result pruned while its
    call stays gets a stand-in. (asyncio and trio: no agent loop.)"""
    async with open_buffer() as buf:
        ctx = QuiesceChatCompletionContext(buf)
        image = Image.from_base64(PIXEL)
        await ctx.add_message(UserMessage(content=["look", image], source="user"))
        await ctx.add_message(
            AssistantMessage(
                content=[FunctionCall(id="c1", name="lookup", arguments="{}")],
                thought=THOUGHT,
                source="a",
            )
        )
        await ctx.add_message(
            FunctionExecutionResultMessage(
                content=[FunctionExecutionResult(content="r", name="lookup", call_id="c1")]
            )
        )
        state = await ctx.save_state()
        version = buf.version
        again = QuiesceChatCompletionContext(buf, conversation=ctx.conversation)
        await again.load_state(state)
        assert buf.version == version
        with buf.snapshot() as snap:
            result = next(e.id for e in snap if e.meta.get("result_of") == "c1")
        await buf.aprune([result], reason="too long")
        messages = await ctx.get_messages()
        answered(messages)
        user = messages[1]
        assert isinstance(user, UserMessage) and isinstance(user.content, list)
        assert user.content[1].to_base64() == image.to_base64()
        results = messages[-1]
        assert isinstance(results, FunctionExecutionResultMessage)
        assert results.content[0].content.startswith("[quiesce: the result of")


@pytest.mark.anyio
async def test_bad_message_is_refused() -> None:
    """A message the context cannot represent names its type; nothing is
    appended. (asyncio and trio.)"""
    buf = Buffer()
    ctx = QuiesceChatCompletionContext(buf)
    with pytest.raises(
        InvalidArgument, match=r"^autogen: message 0: expected an LLMMessage, not dict$"
    ):
        await ctx.add_message({"content": "hi"})  # type: ignore[arg-type]
    assert buf.version == 0


def test_missing_extra_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without AutoGen installed, importing the integration names the extra."""
    monkeypatch.setitem(sys.modules, "autogen_core.model_context", None)
    monkeypatch.delitem(sys.modules, "quiesce.integrations.autogen", raising=False)
    with pytest.raises(ImportError, match=r'pip install "quiesce\[autogen\]"'):
        importlib.import_module("quiesce.integrations.autogen")


@pytest.mark.anyio
async def test_add_message_never_takes_a_held_id() -> None:
    """``add_message`` names a message ``#ag:<version>.0``; when the buffer
    already holds that id (live or tombstoned, as another writer may have
    made it), the message is still appended, under a fresh id, and comes
    back as the very object. (asyncio and trio.)"""
    buf = Buffer()
    ctx = QuiesceChatCompletionContext(buf, conversation="c")
    first = UserMessage(content="one", source="user")
    second = AssistantMessage(content="two", source="a")
    v = buf.version
    buf.append(Entry(f"#ag:{v + 1}.0", Kind.REASONING, "someone else's"))
    await ctx.add_message(first)  # named #ag:<v+1>.0, which is live
    w = buf.version
    buf.append(Entry(f"#ag:{w + 3}.0", Kind.REASONING, "pruned"))
    buf.prune([f"#ag:{w + 3}.0"], reason="gone")
    assert buf.version == w + 3  # the append, the prune and its record
    await ctx.add_message(second)  # named #ag:<w+3>.0, which is tombstoned
    assert buf.version == w + 4
    with buf.snapshot() as snap:
        ids = [e.id for e in snap]
    assert ids == [f"#ag:{v + 1}.0", f"#ag:{v + 1}.0'", f"#ag:{w + 3}.0'"]
    messages = await ctx.get_messages()
    assert messages[-2] is first and messages[-1] is second


def test_each_message_is_held_as_the_union_dump() -> None:
    """Every kind of message (and a subclass of one) is held as the dump
    ``ChatCompletionContextState`` gives it: the per-class serializer and the
    union's agree, image content and ``FunctionCall`` s included."""
    from pydantic import TypeAdapter

    from quiesce.integrations import autogen as ag

    class Tagged(UserMessage):
        tag: str = "t"

    union: TypeAdapter[LLMMessage] = TypeAdapter(LLMMessage)
    image = Image.from_base64(
        "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
    )
    messages: list[Any] = [
        SystemMessage(content="be brief"),
        UserMessage(content=["look", image], source="user"),
        AssistantMessage(
            content=[FunctionCall(id="c1", name="f", arguments='{"x": 1}')],
            thought="thinking",
            source="assistant",
        ),
        FunctionExecutionResultMessage(
            content=[FunctionExecutionResult(content="2", name="f", call_id="c1", is_error=False)]
        ),
        Tagged(content="sub", source="user"),
    ]
    for m in messages:
        assert ag._dump(m) == union.dump_python(m, mode="json")
