"""One conversation per buffer, at each integration's own interface, on asyncio
and trio.

The frameworks' runners are asyncio-only (see
``integrations/test_integrations_transparent.py`` for the end-to-end runs), but the
integrations themselves are anyio code: here each is driven directly through
the interface its framework calls (a ``Session``'s methods, the input
filter, the history processor, the model context), with the frameworks' own
types (``CallModelData``, ``RunContext``, AutoGen's messages), over a
``BufferPool`` and over a single buffer. LangChain's middleware is driven by
LangGraph only (asyncio), in the end-to-end file.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from agents import Agent as SdkAgent
from agents.run_config import CallModelData, ModelInputData
from autogen_core.models import AssistantMessage, SystemMessage, UserMessage
from pydantic_ai._run_context import RunContext
from pydantic_ai.messages import (
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.test import TestModel
from pydantic_ai.usage import RunUsage

from quiesce import BufferPool, ConversationMismatch, InvalidType, open_buffer
from quiesce.integrations.autogen import QuiesceChatCompletionContext
from quiesce.integrations.openai_agents import QuiesceSession, quiesce_input_filter
from quiesce.integrations.pydantic_ai import QuiesceHistoryProcessor

pytestmark = pytest.mark.anyio


def user_item(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def call_data(items: list[dict[str, Any]], who: str) -> CallModelData[Any]:
    """What the SDK hands ``call_model_input_filter``, built from its own types."""
    return CallModelData(
        model_data=ModelInputData(input=items, instructions="Be terse."),  # type: ignore[arg-type]
        agent=SdkAgent(name="helper"),
        context={"who": who},
    )


def run_context(conversation: str) -> RunContext[None]:
    """pydantic-ai's ``RunContext`` of a run in ``conversation``."""
    return RunContext(deps=None, model=TestModel(), usage=RunUsage(), conversation_id=conversation)


class TestAgentsSession:
    async def test_pool_keeps_sessions_apart(self) -> None:
        """Two sessions over one pool each read back exactly their own items."""
        async with BufferPool() as pool:
            alice, bob = QuiesceSession("alice", pool), QuiesceSession("bob", pool)
            await alice.add_items([user_item("alice: my SSN is 078-05-1120")])  # type: ignore[list-item]
            await bob.add_items([user_item("bob: hi")])  # type: ignore[list-item]
            assert await bob.get_items() == [user_item("bob: hi")]
            assert await alice.get_items() == [user_item("alice: my SSN is 078-05-1120")]
            assert pool.conversations() == ("alice", "bob")

    async def test_single_buffer_refuses_a_second_session(self) -> None:
        """A buffer serving session ``alice`` refuses session ``bob`` on every
        method, before reading or writing anything."""
        async with open_buffer() as buf:
            await QuiesceSession("alice", buf).add_items([user_item("alice: x")])  # type: ignore[list-item]
            version = buf.version
            bob = QuiesceSession("bob", buf)
            for call in (bob.get_items, lambda: bob.add_items([user_item("bob: hi")])):  # type: ignore[list-item]
                with pytest.raises(
                    ConversationMismatch,
                    match=r"^QuiesceSession: this buffer holds conversation 'alice', not 'bob'; ",
                ):
                    await call()
            assert buf.version == version


class TestAgentsFilter:
    async def test_idle_filter_returns_the_sdks_own_input(self) -> None:
        """Idle, the filter returns the very ``ModelInputData`` it was given."""
        async with BufferPool() as pool:
            flt = quiesce_input_filter(pool, conversation=lambda d: str(d.context["who"]))  # type: ignore[index]
            data = call_data([user_item("alice: hi")], "alice")
            assert await flt(data) is data.model_data
            bob = call_data([user_item("bob: hi")], "bob")
            assert await flt(bob) is bob.model_data
            assert len(pool) == 2

    async def test_conversation_must_name_a_str(self) -> None:
        """``conversation=`` must be callable, and give a non-empty str."""
        async with BufferPool() as pool:
            with pytest.raises(
                InvalidType, match=r"^quiesce_input_filter: conversation must be a callable"
            ):
                quiesce_input_filter(pool, conversation="alice")  # type: ignore[arg-type]
            flt = quiesce_input_filter(pool, conversation=lambda d: "")
            with pytest.raises(ValueError, match=r"must give a non-empty str, not ''$"):
                await flt(call_data([user_item("x")], "x"))
            assert len(pool) == 0


class TestPydanticAiProcessor:
    async def test_pool_is_keyed_by_conversation_id(self) -> None:
        """Two conversations' histories go to two buffers; idle, each call gets
        back the very list it passed."""
        async with BufferPool() as pool:
            processor = QuiesceHistoryProcessor(pool)
            alice = [ModelRequest(parts=[UserPromptPart("alice: my SSN is 078-05-1120")])]
            bob = [ModelRequest(parts=[UserPromptPart("bob: hi")])]
            assert await processor(run_context("conv-a"), alice) is alice
            assert await processor(run_context("conv-b"), bob) is bob
            with (await pool.get("conv-b")).snapshot() as snap:
                assert [e.body for e in snap] == ["bob: hi"]

    async def test_single_buffer_refuses_another_conversation(self) -> None:
        """A buffer bound to ``conv-a`` refuses ``conv-b``, appending nothing."""
        async with open_buffer() as buf:
            processor = QuiesceHistoryProcessor(buf)
            history = [
                ModelRequest(parts=[UserPromptPart("alice: hi")]),
                ModelResponse(parts=[TextPart("hello")]),
            ]
            assert await processor(run_context("conv-a"), history) is history
            version = buf.version
            with pytest.raises(
                ConversationMismatch,
                match=r"^QuiesceHistoryProcessor: this buffer holds conversation 'conv-a', "
                r"not 'conv-b'; use a BufferPool for many conversations$",
            ):
                await processor(run_context("conv-b"), [ModelRequest(parts=[UserPromptPart("b")])])
            assert buf.version == version


class TestAutogenContext:
    async def test_pool_contexts_are_apart_and_transparent(self) -> None:
        """Two contexts over one pool: each gives back exactly the message
        objects added to it, in order, and nothing of the other's."""
        async with BufferPool() as pool:
            alice = QuiesceChatCompletionContext(
                pool, [SystemMessage(content="Be terse.")], conversation="alice"
            )
            bob = QuiesceChatCompletionContext(pool)
            added = [
                UserMessage(content="alice: my SSN is 078-05-1120", source="user"),
                AssistantMessage(content="noted", source="assistant"),
            ]
            for m in added:
                await alice.add_message(m)
            hi = UserMessage(content="bob: hi", source="user")
            await bob.add_message(hi)
            got = await alice.get_messages()
            assert got == [SystemMessage(content="Be terse."), *added]
            assert all(a is b for a, b in zip(got[1:], added, strict=True))
            assert (await bob.get_messages())[0] is hi
            assert len(await bob.get_messages()) == 1
            assert bob.conversation.startswith("autogen:") and len(pool) == 2

    async def test_a_second_context_on_one_buffer_is_refused(self) -> None:
        """One buffer, one context: another context is refused when made."""
        async with open_buffer() as buf:
            first = QuiesceChatCompletionContext(buf)
            await first.add_message(UserMessage(content="hi", source="user"))
            with pytest.raises(ConversationMismatch) as caught:
                QuiesceChatCompletionContext(buf, [UserMessage(content="x", source="user")])
            assert caught.value.bound == first.conversation
            assert buf.version == 1


class TestPydanticAiHandedBack:
    async def test_trimmed_window_handed_back_adds_nothing(self) -> None:
        """After a prune the processor returns trimmed copies and a note
        (never mutating the run's objects); pydantic-ai writes that list back
        into the history, and handing it back — the same objects, or a JSON
        copy in a new processor as after a restart — appends only the new
        message: quiesce's note, stand-ins and trimmed copies never become
        entries."""
        call = ModelResponse(
            parts=[
                ToolCallPart("lookup", {"q": "a"}, "c1"),
                ToolCallPart("lookup", {"q": "b"}, "c2"),
            ]
        )
        results = ModelRequest(
            parts=[
                ToolReturnPart("lookup", "a is 1", "c1"),
                ToolReturnPart("lookup", "b is 2", "c2"),
            ]
        )
        history = [ModelRequest(parts=[UserPromptPart("find a and b")]), call, results]
        async with open_buffer() as buf:
            processor = QuiesceHistoryProcessor(buf)
            assert await processor(run_context("c"), history) is history
            with buf.snapshot() as snap:
                pair = [
                    e.id for e in snap if "c1" in (e.meta.get("call_id"), e.meta.get("result_of"))
                ]
                held = len(snap)
            await buf.aprune(pair, reason="stale lookup")
            rendered = await processor(run_context("c"), history)
            assert len(call.parts) == 2 and len(results.parts) == 2  # the run's objects unchanged
            assert "[quiesce: removed from this context]" in str(rendered[0].parts[0].content)
            version = buf.version
            follow_up = ModelRequest(parts=[UserPromptPart("and c?")])
            again = await processor(run_context("c"), [*rendered, follow_up])
            assert buf.version == version + 1
            with buf.snapshot() as snap:
                assert len(snap) == held - len(pair) + 1
            dumped = ModelMessagesTypeAdapter.dump_json(again)
            copied = ModelMessagesTypeAdapter.validate_json(dumped)
            fresh = QuiesceHistoryProcessor(buf)
            await fresh(run_context("c"), [*copied, ModelRequest(parts=[UserPromptPart("more")])])
            assert buf.version == version + 2


async def test_a_pool_of_non_buffers_is_refused_by_the_integration() -> None:
    """A factory that yields something no integration can hold is refused
    naming the integration, before anything else happens."""

    @asynccontextmanager
    async def not_a_buffer(cid: str) -> AsyncIterator[object]:
        yield {"conversation": cid}

    async with BufferPool(not_a_buffer) as pool:
        with pytest.raises(
            InvalidType,
            match=r"^QuiesceSession \(a buffer of the pool\) needs a Buffer or an AsyncBuffer "
            r"\(open_buffer\(\), open_shared_buffer\(\)\), not dict$",
        ):
            await QuiesceSession("alice", pool).get_items()
