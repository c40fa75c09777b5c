"""Two framework agents in two processes on one shared conversation.

An OpenAI Agents SDK agent (the SDK's ``ScriptedModel``, a
``QuiesceSession``) in one process and a LangChain/LangGraph agent
(LangChain's fake chat model, a ``QuiesceMiddleware``) in another join the
same conversation through ``open_shared_buffer(dsn, conversation_id)`` on the
tests' private PostgreSQL server (``tests/_integrations_shared_child.py``).
Each one's model receives the other's messages, and a removal the Agents SDK
agent's pruner asks for waits for a reader pinned in the LangGraph process
(grace across processes), then reaches both. The agents are forked from the
forkserver of ``tests/_shared_child.py`` (``process()``: a fresh process that
shares nothing with the test process, quiesce already imported; each agent
imports its framework itself).

Both frameworks' runners are asyncio-only, so the members run on **asyncio
only**. Waits are bounded polls of the members' state with generous limits
(the machine may be loaded); nothing here is timed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest

from _integrations_shared_child import child
from _shared_child import PipeChild, close_all, context, process

_T = TypeVar("_T")

#: a long lease: a member of a loaded machine must not lose it (this test has
#: no failover; with 3 s and 8 s leases a pinned, idle member under a loaded
#: full suite once counted its lease lost and voided its reader)
OPTIONS = {"lease": 16.0, "poll": 0.2, "timeout": 30.0}
#: how long the removal must stay held back: heartbeats come every lease / 8
HOLD = 4.5


class Agent(PipeChild):
    """An agent process (forked by the forkserver of ``context()``) and its command pipe."""

    noun = "agent"
    exit_wait = (30.0, 15.0)

    def __init__(self, dsn: str, framework: str) -> None:
        self.conn, theirs = context().Pipe()
        self.proc = process(child, dsn, framework, theirs, OPTIONS)
        theirs.close()
        self.role, self.pid = self._reply(120)

    def __call__(self, name: str, *args: Any, timeout: float = 90) -> Any:
        self.conn.send((name, args[0] if len(args) == 1 else args))
        return self._reply(timeout)


@pytest.fixture
def agents(pg_dsn: str) -> Iterator[list[Agent]]:
    """The agents a test starts; all are asked to exit at once when it ends
    (their shutdowns overlap), then each is waited for."""
    started: list[Agent] = []
    yield started
    close_all(started)


def wait_for(check: Callable[[], _T | None], what: str, timeout: float = 60) -> _T:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def has(seen: list[str], text: str) -> bool:
    return any(text in s for s in seen)


def test_agents_sdk_and_langgraph_share_one_conversation(pg_dsn: str, agents: list[Agent]) -> None:
    """Alice's Agents SDK agent and Bob's LangGraph agent, in two processes,
    on one shared conversation: each model call receives the other agent's
    messages; a prune asked by Alice's pruner is staged, not applied, while
    a reader in Bob's process pins a version with the entry unmarked (across
    several lease heartbeats), is applied after that reader leaves, and is
    then gone from what both models receive. (asyncio only: both runners.)"""
    # Alice joins first (Agent() waits until she has), so she is the
    # sequencer and Bob forwards to her: step 3 reads Bob's exchange at once.
    # With Bob the sequencer, Alice's next turn can run before her replica
    # has caught up (seen once when both joined at the same time).
    alice = Agent(pg_dsn, "agents")
    agents.append(alice)
    bob = Agent(pg_dsn, "langgraph")
    agents.append(bob)
    assert {alice.role, bob.role} == {"sequencer", "replica"}

    # 1. Alice speaks first: her model sees only her message.
    a1 = alice("turn", "alice: the code word is PLUM", "noted: PLUM")
    assert a1["output"] == "noted: PLUM"
    assert has(a1["seen"], "the code word is PLUM")

    # 2. Bob's model receives Alice's exchange, then his own question.
    b1 = bob("turn", "bob: what is the code word?", "bob-answer: it is PLUM")
    assert b1["output"] == "bob-answer: it is PLUM"
    assert has(b1["seen"], "alice: the code word is PLUM")
    assert has(b1["seen"], "noted: PLUM")
    assert has(b1["seen"], "bob: what is the code word?")
    order = [next(i for i, s in enumerate(b1["seen"]) if t in s) for t in ("alice:", "bob:")]
    assert order == sorted(order)

    # 3. Alice's next model call receives Bob's exchange.
    a2 = alice("turn", "alice: what did bob ask?", "he asked for the word")
    assert has(a2["seen"], "bob: what is the code word?")
    assert has(a2["seen"], "bob-answer: it is PLUM")

    # 4. Grace across processes: Bob pins a version holding "noted: PLUM".
    pinned_version, pinned = bob("pin")
    target = [i for i, body in pinned if body == "noted: PLUM"]
    assert len(target) == 1
    (target_id,) = target
    alice("arm", "noted: PLUM")
    a3 = alice("turn", "alice: forget the word", "forgotten")
    assert alice("proposed") == [target_id]
    assert not has(a3["seen"], "noted: PLUM")  # the session leaves out a staged item
    time.sleep(HOLD)  # two heartbeats and horizon refreshes at least
    for who in (alice, bob):
        s = who("summary")
        assert target_id in s["staged"] and target_id not in s["tombstones"], who.role
    assert [target_id, "noted: PLUM"] in bob("read_pin")  # the reader still reads it
    released = bob("unpin")
    assert released > 0
    wait_for(lambda: target_id in alice("summary")["tombstones"], "the removal at Alice")
    wait_for(lambda: target_id in bob("summary")["tombstones"], "the removal at Bob")

    # 5. Removed for both: neither model receives it any more.
    b2 = bob("turn", "bob: is the word still there?", "bob-answer: no")
    assert not has(b2["seen"], "noted: PLUM")
    assert has(b2["seen"], "[quiesce: removed from this context]")
    assert has(b2["seen"], "alice: forget the word")
    a4 = alice("turn", "alice: and now?", "all clear")
    assert not has(a4["seen"], "noted: PLUM")
    assert has(a4["seen"], "bob: is the word still there?")

    # Both members hold the same history and pass their invariant checks.
    sa = wait_for(
        lambda: (s := alice("summary"))["version"] == bob("summary")["version"] and s,
        "the members to converge",
    )
    sb = bob("summary")
    assert (sa["entries"], sa["tombstones"]) == (sb["entries"], sb["tombstones"])
    assert pinned_version < sa["version"]
    assert alice("check") and bob("check")


class TestInProcess:
    """The other two integrations on a shared buffer, two members in one
    process (asyncio only: pydantic-ai's runner and LangGraph)."""

    @pytest.mark.parametrize("anyio_backend", ["asyncio"])
    @pytest.mark.anyio
    async def test_pydantic_ai_and_autogen_share_a_conversation(self, pg_dsn: str) -> None:
        """An AutoGen context on the sequencer and a pydantic-ai agent on a
        replica: the pydantic-ai model receives the AutoGen messages, and the
        AutoGen context's window holds the pydantic-ai exchange."""
        from autogen_core.models import AssistantMessage, UserMessage
        from pydantic_ai import Agent as PydanticAgent
        from pydantic_ai.capabilities import ProcessHistory
        from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
        from pydantic_ai.models.function import AgentInfo, FunctionModel

        from quiesce import open_shared_buffer
        from quiesce.integrations.autogen import QuiesceChatCompletionContext
        from quiesce.integrations.pydantic_ai import QuiesceHistoryProcessor

        received: list[str] = []

        def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            received.extend(str(p.content) for m in messages for p in m.parts)
            return ModelResponse(parts=[TextPart("carol-answer: 42")])

        async with (
            open_shared_buffer(pg_dsn, "conv-2", **OPTIONS) as first,
            open_shared_buffer(pg_dsn, "conv-2", **OPTIONS) as second,
        ):
            assert (first.role, second.role) == ("sequencer", "replica")
            ctx = QuiesceChatCompletionContext(first)
            await ctx.add_message(UserMessage(content="dave: the answer is 42", source="dave"))
            await ctx.add_message(AssistantMessage(content="noted, 42", source="bot"))
            await second.wait_applied(first.version)
            agent = PydanticAgent(
                FunctionModel(script),
                capabilities=[ProcessHistory(QuiesceHistoryProcessor(second))],
            )
            result = await agent.run("carol: what is the answer?")
            assert result.output == "carol-answer: 42"
            assert has(received, "dave: the answer is 42") and has(received, "noted, 42")
            # the pydantic-ai answer is held at its next sync: run once more
            await agent.run("carol: thanks", message_history=result.all_messages())
            await first.wait_applied(second.version)
            window = [str(m.content) for m in await ctx.get_messages()]
            assert has(window, "carol: what is the answer?")
            assert has(window, "carol-answer: 42")

    @pytest.mark.parametrize("anyio_backend", ["asyncio"])
    @pytest.mark.anyio
    async def test_sync_entry_points_are_refused(self, pg_dsn: str) -> None:
        """A framework's synchronous hook cannot write to a shared buffer:
        LangGraph's ``invoke`` gets a precise ``InvalidType`` before the model
        is called, and the buffer is unchanged."""
        from langchain.agents import create_agent
        from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
        from langchain_core.messages import AIMessage, HumanMessage

        from quiesce import InvalidType, open_shared_buffer
        from quiesce.integrations.langchain import QuiesceMiddleware

        async with open_shared_buffer(pg_dsn, "conv-3", **OPTIONS) as shared:
            model = FakeMessagesListChatModel(responses=[AIMessage("never")])
            agent = create_agent(model=model, middleware=[QuiesceMiddleware(shared)])
            with pytest.raises(
                InvalidType,
                match=r"^QuiesceMiddleware\.wrap_model_call: a SharedBuffer is written "
                r"asynchronously; run the agent with its async entry point \(ainvoke, astream\)\n",
                # (pytest matches the notes too: LangGraph adds one naming the node)
            ):
                agent.invoke({"messages": [HumanMessage("hi")]})
            assert shared.version == 0
            assert model.i == 0  # the model was not called
