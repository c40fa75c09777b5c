"""Transparent when idle, and one conversation per buffer, for every integration.

Each setup runs twice on the framework's own test model: once without
quiesce (the control) and once with it (no pruner, nothing marked, nothing
pruned). The model must receive exactly the same thing: the same list, the
same types, ``==`` — after only the framework's own random values (message
ids LangGraph draws with ``uuid4``, pydantic-ai's timestamps and run ids) are
renamed in order of first appearance, identically in both runs.

The setups: one conversation; many conversations on one agent (a
``BufferPool``); no conversation identity (LangGraph without a checkpointer);
concurrent invocations. LangGraph, pydantic-ai's ``Agent.run``, the Agents
SDK's ``Runner`` and AutoGen's ``AssistantAgent`` run on asyncio only, so the
end-to-end tests here run on **asyncio only** (said in each docstring).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

import anyio.to_thread
import pytest
from agents import Agent as SdkAgent
from agents import RunConfig, Runner, SQLiteSession, function_tool
from agents.models.fake_id import FAKE_RESPONSES_ID
from agents.testing import ScriptedModel, assistant_message, function_call
from autogen_agentchat.agents import AssistantAgent
from autogen_core import FunctionCall
from autogen_core.models import CreateResult, LLMMessage, ModelFamily, ModelInfo, RequestUsage
from autogen_ext.models.replay import ReplayChatCompletionClient
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from pydantic_ai import Agent
from pydantic_ai.capabilities import ProcessHistory
from pydantic_ai.messages import (
    BinaryContent,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from quiesce import BufferPool, ConversationMismatch, InvalidArgument, QuiesceError, open_buffer
from quiesce.integrations.autogen import QuiesceChatCompletionContext
from quiesce.integrations.langchain import QuiesceMiddleware
from quiesce.integrations.openai_agents import QuiesceSession, quiesce_input_filter
from quiesce.integrations.pydantic_ai import QuiesceHistoryProcessor


@pytest.fixture
def anyio_backend() -> str:
    """The frameworks' runners are asyncio-only."""
    return "asyncio"


# -- normalising the framework's own random values ---------------------------


class Renamer:
    """Renames random values in order of first appearance (``v0``, ``v1``...)."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}

    def __call__(self, value: str | None) -> str | None:
        if value is None:
            return None
        return self.names.setdefault(value, f"v{len(self.names)}")


def lc_normal(requests: Sequence[Sequence[BaseMessage]]) -> list[list[BaseMessage]]:
    """LangChain requests with LangGraph's ``uuid4`` message ids renamed."""
    rename = Renamer()
    return [[m.model_copy(update={"id": rename(m.id)}) for m in r] for r in requests]


def lc_types(requests: Sequence[Sequence[BaseMessage]]) -> list[list[type]]:
    return [[type(m) for m in r] for r in requests]


# -- LangChain / LangGraph ---------------------------------------------------


class CapturingModel(GenericFakeChatModel):
    """LangChain's ``GenericFakeChatModel``, recording the messages of every call
    (keyed by the conversation it answers, the text of the first human message)."""

    seen: list[list[BaseMessage]] = []  # noqa: RUF012 (a pydantic field)

    def bind_tools(self, tools: Any, **kwargs: Any) -> CapturingModel:  # type: ignore[override]
        return self

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
        self.seen.append(list(messages))
        return super()._generate(messages, *args, **kwargs)


def lc_model(n: int) -> CapturingModel:
    """``n`` canned answers, then a tool call, an answer (a fresh model per run)."""
    replies = [AIMessage(content=f"answer {i}", id=f"ai-{i}") for i in range(n)]
    model = CapturingModel(messages=iter(replies))
    model.seen = []
    return model


def lc_agent(model: CapturingModel, middleware: list[Any], *, saver: bool = True) -> Any:
    return create_agent(
        model=model,
        tools=[],
        system_prompt="You are terse.",
        middleware=middleware,
        checkpointer=InMemorySaver() if saver else None,
    )


def say(text: str, mid: str) -> dict[str, Any]:
    return {"messages": [HumanMessage(content=text, id=mid)]}


def cfg(thread: str) -> Any:
    return {"configurable": {"thread_id": thread}}


Script = Callable[[Any], Any]


async def lc_script_two_threads(agent: Any) -> None:
    """Alice and Bob on one agent, interleaved, two turns each."""
    await agent.ainvoke(say("alice: my SSN is 078-05-1120", "a1"), cfg("alice"))
    await agent.ainvoke(say("bob: hi", "b1"), cfg("bob"))
    await agent.ainvoke(say("alice: and my PIN?", "a2"), cfg("alice"))
    await agent.ainvoke(say("bob: what did I say?", "b2"), cfg("bob"))


async def lc_script_one_thread(agent: Any) -> None:
    for i in range(3):
        await agent.ainvoke(say(f"turn {i}", f"h{i}"), cfg("only"))


async def lc_script_no_checkpointer(agent: Any) -> None:
    await agent.ainvoke(say("alice: my SSN is 078-05-1120", "a1"))
    await agent.ainvoke(say("bob: hi", "b1"))


async def lc_script_concurrent(agent: Any) -> None:
    await asyncio.gather(
        *(agent.ainvoke(say(f"user {i}: hello", f"u{i}"), cfg(f"t{i}")) for i in range(4))
    )
    await asyncio.gather(
        *(agent.ainvoke(say(f"user {i}: again", f"v{i}"), cfg(f"t{i}")) for i in range(4))
    )


@asynccontextmanager
async def lc_pool() -> AsyncIterator[BufferPool[Any]]:
    async with BufferPool() as pool:
        yield pool


LC_SETUPS = {
    "one-thread": (lc_script_one_thread, 3, True),
    "two-threads": (lc_script_two_threads, 4, True),
    "no-checkpointer": (lc_script_no_checkpointer, 2, False),
    "concurrent": (lc_script_concurrent, 8, True),
}


async def lc_control(name: str) -> list[list[BaseMessage]]:
    script, n, saver = LC_SETUPS[name]
    model = lc_model(n)
    await script(lc_agent(model, [], saver=saver))
    return model.seen


@pytest.mark.anyio
@pytest.mark.parametrize("name", list(LC_SETUPS))
async def test_langchain_pool_is_transparent_when_idle(name: str) -> None:
    """With a pool (one buffer per ``thread_id``, or per first message without
    a checkpointer), each model call gets exactly what it gets without quiesce.
    Concurrent requests may reach the model in another order: compared as
    sets of normalised requests per conversation. (asyncio only: LangGraph.)"""
    script, n, saver = LC_SETUPS[name]
    control = await lc_control(name)
    model = lc_model(n)
    async with lc_pool() as pool:
        await script(lc_agent(model, [QuiesceMiddleware(pool)], saver=saver))
        opened = len(pool)
    if name == "concurrent":
        key = lambda r: str(r[1].content)  # noqa: E731 (the first human message)
        control, seen = sorted(control, key=key), sorted(model.seen, key=key)
        # the answers are handed out in arrival order: compare without them
        control = [[m for m in r if not isinstance(m, AIMessage)] for r in control]
        seen = [[m for m in r if not isinstance(m, AIMessage)] for r in seen]
    else:
        seen = model.seen
    assert lc_normal(seen) == lc_normal(control)
    assert lc_types(seen) == lc_types(control)
    assert (
        opened == {"one-thread": 1, "two-threads": 2, "no-checkpointer": 2, "concurrent": 4}[name]
    )


@pytest.mark.anyio
async def test_langchain_single_buffer_one_thread_passes_the_request_through() -> None:
    """One buffer, one thread: the model gets LangChain's own request, the very
    message objects of the state. (asyncio only: LangGraph.)"""
    control = await lc_control("one-thread")
    model = lc_model(3)
    async with open_buffer() as buf:
        await lc_script_one_thread(lc_agent(model, [QuiesceMiddleware(buf)]))
    assert lc_normal(model.seen) == lc_normal(control)
    assert lc_types(model.seen) == lc_types(control)


@pytest.mark.anyio
async def test_langchain_second_thread_never_sees_the_first() -> None:
    """The privacy defect: one agent with a checkpointer, one buffer, two
    ``thread_id``\\ s. Bob's call must never be sent Alice's messages: with a
    single buffer it is refused before the model is called (naming both
    threads), and the buffer is unchanged. (asyncio only: LangGraph.)"""
    model = lc_model(2)
    async with open_buffer() as buf:
        agent = lc_agent(model, [QuiesceMiddleware(buf)])
        await agent.ainvoke(say("alice: my SSN is 078-05-1120", "a1"), cfg("alice"))
        version = buf.version
        caught: QuiesceError | None = None
        try:
            await agent.ainvoke(say("bob: hi", "b1"), cfg("bob"))
        except QuiesceError as exc:
            caught = exc
        bob_calls = [r for r in model.seen if any("bob" in str(m.content) for m in r)]
        leaked = [m.content for r in bob_calls for m in r if "alice" in str(m.content)]
        assert leaked == []
        assert buf.version == version
    assert isinstance(caught, ConversationMismatch)
    assert str(caught) == (
        "QuiesceMiddleware: this buffer holds conversation 'alice', not 'bob'; "
        "use a BufferPool for many conversations"
    )
    assert (caught.bound, caught.seen) == ("alice", "bob")
    assert len(model.seen) == 1


@pytest.mark.anyio
async def test_langchain_no_checkpointer_run_never_carries_into_another() -> None:
    """Without a checkpointer a run has no ``thread_id``. A second run whose
    history does not extend the first (its first message differs) is another
    conversation: refused on a single buffer, its own buffer in a pool.
    (asyncio only: LangGraph.)"""
    model = lc_model(2)
    async with open_buffer() as buf:
        agent = lc_agent(model, [QuiesceMiddleware(buf)], saver=False)
        await agent.ainvoke(say("alice: my SSN is 078-05-1120", "a1"))
        with pytest.raises(
            ConversationMismatch,
            match=r"^QuiesceMiddleware: this buffer holds "
            r"conversation '#first:a1', not '#first:b1'; use a BufferPool",
        ):
            await agent.ainvoke(say("bob: hi", "b1"))
    assert [[str(m.content) for m in r] for r in model.seen] == [
        ["You are terse.", "alice: my SSN is 078-05-1120"]
    ]


# -- pydantic-ai -------------------------------------------------------------

EPOCH = datetime(2000, 1, 1, tzinfo=UTC)
IMAGE = BinaryContent(data=b"\x89PNG\r\n\x1a\nfake", media_type="image/png")


class PaScript:
    """A ``FunctionModel`` function: a tool call on a user's first turn, then
    answers; records every request (the conversation is its first prompt)."""

    def __init__(self) -> None:
        self.requests: list[list[ModelMessage]] = []

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.requests.append(list(messages))
        last = messages[-1]
        prompts = (
            [str(p.content) for p in last.parts if isinstance(p, UserPromptPart)]
            if isinstance(last, ModelRequest)
            else []
        )
        if prompts and "first" in prompts[0]:
            who = prompts[0].split(":")[0].replace(" ", "-")
            return ModelResponse(parts=[ToolCallPart("lookup", {"q": "x"}, f"call-{who}")])
        return ModelResponse(parts=[TextPart("ok")])


def pa_agent(script: PaScript, capabilities: list[Any]) -> Agent[None, str]:
    agent = Agent(FunctionModel(script), instructions="Be terse.", capabilities=capabilities)

    @agent.tool_plain
    def lookup(q: str) -> str:
        """Look something up."""
        return f"found {q}"

    return agent


def _normal_value(value: Any, rename: Renamer) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes: dict[str, Any] = {}
        for f in dataclasses.fields(value):
            if not f.init:
                continue
            v = getattr(value, f.name)
            if f.name == "timestamp" and v is not None:
                changes[f.name] = EPOCH
            elif f.name in ("run_id", "conversation_id"):
                changes[f.name] = rename(v)
            elif f.name == "parts":
                changes[f.name] = [_normal_value(p, rename) for p in v]
        return dataclasses.replace(value, **changes)
    return value


def pa_normal(requests: Sequence[Sequence[ModelMessage]]) -> list[list[ModelMessage]]:
    """pydantic-ai requests with its timestamps and (UUID7) run and
    conversation ids replaced (renamed in order of first appearance)."""
    rename = Renamer()
    return [[_normal_value(m, rename) for m in r] for r in requests]


def pa_types(requests: Sequence[Sequence[ModelMessage]]) -> list[Any]:
    """The classes of every message, part and prompt item (``BinaryContent``
    is not ``BinaryImage``)."""

    def items(p: Any) -> Any:
        content = getattr(p, "content", None)
        return [type(c) for c in content] if isinstance(content, list) else type(content)

    return [[(type(m), [(type(p), items(p)) for p in m.parts]) for m in r] for r in requests]


async def pa_one(agent: Agent[None, str]) -> None:
    r1 = await agent.run(["first: look at this", IMAGE])
    r2 = await agent.run("and now?", message_history=r1.all_messages())
    await agent.run("thanks", message_history=r2.all_messages())


async def pa_two(agent: Agent[None, str]) -> None:
    a1 = await agent.run("alice first: my SSN is 078-05-1120")
    b1 = await agent.run("bob first: hi")
    await agent.run("alice: and my PIN?", message_history=a1.all_messages())
    await agent.run("bob: what did I say?", message_history=b1.all_messages())


async def pa_concurrent(agent: Agent[None, str]) -> None:
    await asyncio.gather(*(agent.run(f"user {i} first: hello") for i in range(4)))


PA_SETUPS = {"one-conversation": pa_one, "two-conversations": pa_two, "concurrent": pa_concurrent}


@pytest.mark.anyio
@pytest.mark.parametrize("name", list(PA_SETUPS))
async def test_pydantic_ai_pool_is_transparent_when_idle(name: str) -> None:
    """One module-level ``Agent`` with a processor over a pool (one buffer per
    ``ctx.conversation_id``): every request equals the control's, part
    classes included (``BinaryContent`` stays ``BinaryContent``), and no
    message carries a ``metadata`` field the control has not. Concurrent runs
    are compared sorted by their prompt. (asyncio only: pydantic-ai.)"""
    control = PaScript()
    await PA_SETUPS[name](pa_agent(control, []))
    script = PaScript()
    async with BufferPool() as pool:
        await PA_SETUPS[name](pa_agent(script, [ProcessHistory(QuiesceHistoryProcessor(pool))]))
        opened = len(pool)
    seen, expected = script.requests, control.requests
    if name == "concurrent":  # each request on its own: the runs interleave
        seen, expected = sorted(seen, key=repr_prompts), sorted(expected, key=repr_prompts)
        assert [pa_normal([r]) for r in seen] == [pa_normal([r]) for r in expected]
    assert pa_normal(seen) == pa_normal(expected) or name == "concurrent"
    assert pa_types(seen) == pa_types(expected)
    assert [m.metadata for r in seen for m in r] == [m.metadata for r in expected for m in r]
    assert opened == {"one-conversation": 1, "two-conversations": 2, "concurrent": 4}[name]


def repr_prompts(request: Sequence[ModelMessage]) -> str:
    return repr([p.content for m in request for p in m.parts if isinstance(p, UserPromptPart)])


@pytest.mark.anyio
async def test_pydantic_ai_single_buffer_keeps_the_users_part_classes() -> None:
    """One buffer, one conversation: the model gets the user's own
    ``BinaryContent`` (``==`` the control's), never the ``BinaryImage`` a JSON
    round trip makes of it, and no ``metadata``. (asyncio only: pydantic-ai.)"""
    control = PaScript()
    await pa_one(pa_agent(control, []))
    script = PaScript()
    async with open_buffer() as buf:
        await pa_one(pa_agent(script, [ProcessHistory(QuiesceHistoryProcessor(buf))]))
    assert pa_normal(script.requests) == pa_normal(control.requests)
    assert pa_types(script.requests) == pa_types(control.requests)
    image = script.requests[0][0].parts[-1].content[1]  # type: ignore[union-attr,index]
    assert type(image) is BinaryContent
    assert all(m.metadata is None for r in script.requests for m in r)


@pytest.mark.anyio
async def test_pydantic_ai_second_conversation_never_sees_the_first() -> None:
    """The privacy defect on pydantic-ai: one module-level ``Agent``, one
    buffer, two conversations. Bob's run is never sent Alice's messages: it
    is refused before the model is called, naming both conversation ids.
    (asyncio only: pydantic-ai.)"""
    script = PaScript()
    async with open_buffer() as buf:
        agent = pa_agent(script, [ProcessHistory(QuiesceHistoryProcessor(buf))])
        alice = await agent.run("alice first: my SSN is 078-05-1120")
        version = buf.version
        caught: QuiesceError | None = None
        try:
            await agent.run("bob first: hi")
        except QuiesceError as exc:
            caught = exc
        bob_calls = [r for r in script.requests if "bob" in repr_prompts(r)]
        assert [r for r in bob_calls if "alice" in repr_prompts(r)] == []
        assert buf.version == version
    assert isinstance(caught, ConversationMismatch)
    assert caught.bound == alice.all_messages()[0].conversation_id
    assert str(caught) == (
        f"QuiesceHistoryProcessor: this buffer holds conversation {caught.bound!r}, "
        f"not {caught.seen!r}; use a BufferPool for many conversations"
    )
    assert caught.seen != caught.bound


# -- the OpenAI Agents SDK ---------------------------------------------------


@function_tool
def lookup_tool(q: str) -> str:
    """Look something up."""
    return f"found {q}"


def sdk_model(who: str, *, item_id: str | None = None) -> ScriptedModel:
    """The SDK's own ``ScriptedModel``: a tool call, an answer, two answers.
    Each output item has its own id, or every one ``item_id`` (the SDK's
    constant ``"scripted-message"``, or ``FAKE_RESPONSES_ID`` as on items
    converted from Chat Completions)."""

    def msg(i: int) -> Any:
        return assistant_message(f"{who} answer {i}", item_id=item_id or f"{who}-msg-{i}")

    return ScriptedModel(
        [
            [function_call("lookup_tool", {"q": who}, call_id=f"{who}-c1", item_id=item_id)],
            [msg(1)],
            [msg(2)],
            [msg(3)],
        ]
    )


def sdk_agent(model: ScriptedModel) -> SdkAgent[Any]:
    return SdkAgent(name="helper", instructions="Be terse.", model=model, tools=[lookup_tool])


async def sdk_turns(
    who: str,
    session: Any,
    run_config: RunConfig | None = None,
    *,
    item_id: str | None = None,
) -> list[Any]:
    """Three turns of ``who`` on ``session``: what the model received each call."""
    model = sdk_model(who, item_id=item_id)
    agent = sdk_agent(model)
    for text in ("first question", "second question", "third question"):
        kw: dict[str, Any] = {} if run_config is None else {"run_config": run_config}
        await Runner.run(agent, f"{who}: {text}", session=session, context={"who": who}, **kw)
    return [c.input for c in model.calls]


async def sdk_control(users: Sequence[str], item_id: str | None = None) -> dict[str, list[Any]]:
    return {u: await sdk_turns(u, SQLiteSession(u), item_id=item_id) for u in users}


@pytest.mark.anyio
@pytest.mark.parametrize("item_id", ["scripted-message", FAKE_RESPONSES_ID])
async def test_openai_agents_reused_item_ids_run_like_sqlite_session(item_id: str) -> None:
    """Every output item carrying one id (``ScriptedModel``'s default, or the
    SDK's ``FAKE_RESPONSES_ID`` placeholder of Chat-Completions-backed
    models): ``QuiesceSession`` and ``quiesce_input_filter`` run the
    three-turn script like the SDK's ``SQLiteSession`` — no crash on turn 2,
    and every model call gets exactly the control's input. (asyncio only: the
    SDK's runner.)"""
    control = await sdk_control(["alice"], item_id)
    async with open_buffer() as buf:
        seen = await sdk_turns("alice", QuiesceSession("alice", buf), item_id=item_id)
    assert seen == control["alice"]
    async with open_buffer() as buf:
        config = RunConfig(call_model_input_filter=quiesce_input_filter(buf))
        seen = await sdk_turns("alice", SQLiteSession("alice"), config, item_id=item_id)
    assert seen == control["alice"]


@pytest.mark.anyio
async def test_openai_agents_session_pool_is_transparent_when_idle() -> None:
    """Two sessions on one agent over a pool (one buffer per session id), run
    one after the other and concurrently: each model call gets exactly what
    it gets with the SDK's own ``SQLiteSession``. (asyncio only: the SDK's
    runner.)"""
    control = await sdk_control(["alice", "bob"])
    async with BufferPool() as pool:
        seen = {u: await sdk_turns(u, QuiesceSession(u, pool)) for u in ("alice", "bob")}
        assert pool.conversations() == ("alice", "bob")
    assert seen == control
    async with BufferPool() as pool:
        both = await asyncio.gather(
            *(sdk_turns(u, QuiesceSession(u, pool)) for u in ("alice", "bob"))
        )
    assert dict(zip(("alice", "bob"), both, strict=True)) == control


@pytest.mark.anyio
async def test_openai_agents_filter_pool_is_transparent_when_idle() -> None:
    """``quiesce_input_filter(pool, conversation=...)`` on the SDK's own
    sessions: the model's input equals the control's (no filter), for two
    conversations named from the run's context, also run concurrently.
    (asyncio only: the SDK's runner.)"""
    control = await sdk_control(["alice", "bob"])
    async with BufferPool() as pool:
        config = RunConfig(
            call_model_input_filter=quiesce_input_filter(
                pool, conversation=lambda data: str(data.context["who"])
            )
        )
        both = await asyncio.gather(
            *(sdk_turns(u, SQLiteSession(u), config) for u in ("alice", "bob"))
        )
        assert sorted(pool.conversations()) == ["alice", "bob"]
    assert dict(zip(("alice", "bob"), both, strict=True)) == control


@pytest.mark.anyio
async def test_openai_agents_second_session_never_sees_the_first() -> None:
    """One buffer, two sessions: Bob's session is refused before any model
    call (naming both session ids), and so is Bob's conversation through the
    filter (its first item differs from Alice's); the buffer is unchanged.
    (asyncio only: the SDK's runner.)"""
    async with open_buffer() as buf:
        await sdk_turns("alice", QuiesceSession("alice", buf))
        version = buf.version
        model = sdk_model("bob")
        with pytest.raises(
            ConversationMismatch,
            match=r"^QuiesceSession: this buffer holds conversation 'alice', not 'bob'; ",
        ):
            await Runner.run(sdk_agent(model), "bob: hi", session=QuiesceSession("bob", buf))
        assert model.calls == ()
        assert buf.version == version
    async with open_buffer() as buf:
        config = RunConfig(call_model_input_filter=quiesce_input_filter(buf))
        await sdk_turns("alice", SQLiteSession("alice"), config)
        version = buf.version
        model = sdk_model("bob")
        with pytest.raises(ConversationMismatch, match=r"^quiesce_input_filter: this buffer "):
            await Runner.run(sdk_agent(model), "bob: hi", run_config=config)
        assert model.calls == ()
        assert buf.version == version


def test_openai_agents_filter_pool_needs_a_conversation() -> None:
    """A pool without ``conversation=`` is refused when the filter is made."""

    async def main() -> None:
        async with BufferPool() as pool:
            with pytest.raises(
                InvalidArgument,
                match=r"^quiesce_input_filter: a BufferPool needs conversation=, a callable",
            ):
                quiesce_input_filter(pool)

    asyncio.run(main())


# -- AutoGen -----------------------------------------------------------------

AG_USAGE = RequestUsage(prompt_tokens=0, completion_tokens=0)
AG_INFO = ModelInfo(
    vision=True,
    function_calling=True,
    json_output=False,
    family=ModelFamily.UNKNOWN,
    structured_output=False,
)


def ag_client(who: str) -> ReplayChatCompletionClient:
    """AutoGen's own replay client: a tool call, its reflection, an answer."""
    return ReplayChatCompletionClient(
        [
            CreateResult(
                finish_reason="function_calls",
                content=[FunctionCall(id=f"{who}-c1", name="lookup", arguments='{"q": "x"}')],
                usage=AG_USAGE,
                cached=False,
                thought=f"{who} thinks",
            ),
            CreateResult(finish_reason="stop", content="found", usage=AG_USAGE, cached=False),
            CreateResult(finish_reason="stop", content="again", usage=AG_USAGE, cached=False),
        ],
        model_info=AG_INFO,
    )


def ag_agent(client: ReplayChatCompletionClient, context: Any) -> AssistantAgent:
    async def lookup(q: str) -> str:
        """Look something up."""
        return f"found {q}"

    kw = {} if context is None else {"model_context": context}
    return AssistantAgent(
        "assistant",
        model_client=client,
        tools=[lookup],
        system_message="Be terse.",
        reflect_on_tool_use=True,
        **kw,
    )


async def ag_turns(who: str, context: Any) -> list[list[LLMMessage]]:
    client = ag_client(who)
    agent = ag_agent(client, context)
    await agent.run(task=f"{who}: first, my secret is {who}-secret")
    await agent.run(task=f"{who}: second")
    return [list(c["messages"]) for c in client.create_calls]


@pytest.mark.anyio
async def test_autogen_pool_is_transparent_when_idle() -> None:
    """Two contexts (Alice's, Bob's) over one pool, one after the other and
    concurrently: every model call gets exactly what it gets with AutoGen's
    default context (same list, same types, ``==``). (asyncio only:
    ``AssistantAgent`` runs its tools with asyncio.)"""
    control = {u: await ag_turns(u, None) for u in ("alice", "bob")}
    async with BufferPool() as pool:
        seen = {
            u: await ag_turns(u, QuiesceChatCompletionContext(pool, conversation=u))
            for u in ("alice", "bob")
        }
        assert pool.conversations() == ("alice", "bob")
    assert seen == control
    assert [[type(m) for m in r] for r in seen["bob"]] == [
        [type(m) for m in r] for r in control["bob"]
    ]
    async with BufferPool() as pool:
        both = await asyncio.gather(
            *(ag_turns(u, QuiesceChatCompletionContext(pool)) for u in ("alice", "bob"))
        )
        assert len(pool) == 2
    assert dict(zip(("alice", "bob"), both, strict=True)) == control


@pytest.mark.anyio
async def test_autogen_second_context_on_one_buffer_is_refused() -> None:
    """One buffer serves one context: a second context of another
    conversation is refused when it is made, naming both, and the buffer is
    unchanged; one context alone is transparent. (asyncio only:
    ``AssistantAgent``.)"""
    control = await ag_turns("alice", None)
    async with open_buffer() as buf:
        seen = await ag_turns("alice", QuiesceChatCompletionContext(buf, conversation="alice"))
        version = buf.version
        with pytest.raises(
            ConversationMismatch,
            match=r"^QuiesceChatCompletionContext: this buffer holds conversation 'alice', "
            r"not 'bob'; use a BufferPool for many conversations$",
        ):
            QuiesceChatCompletionContext(buf, conversation="bob")
        assert buf.version == version
    assert seen == control


@pytest.mark.anyio
async def test_langchain_sync_invoke_reaches_the_pool_from_a_worker_thread() -> None:
    """LangGraph's sync ``invoke`` run in a worker thread: the middleware's
    sync hooks open each thread's buffer through the pool's event loop, and
    the model gets what it gets without quiesce. (asyncio only: LangGraph.)"""
    control_model = lc_model(2)
    control_agent = lc_agent(control_model, [])
    model = lc_model(2)
    async with BufferPool() as pool:
        agent = lc_agent(model, [QuiesceMiddleware(pool)])
        for a, who in ((control_agent, "alice"), (control_agent, "bob"), (agent, "alice"),
                       (agent, "bob")):
            await anyio.to_thread.run_sync(
                lambda a=a, who=who: a.invoke(say(f"{who}: hi", f"{who}-1"), cfg(who))
            )
        assert pool.conversations() == ("alice", "bob")
        with (await pool.get("bob")).snapshot() as snap:
            assert [e.body for e in snap] == ["bob: hi"]
    assert lc_normal(model.seen) == lc_normal(control_model.seen)
