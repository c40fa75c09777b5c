"""The frameworks' own context tools, placed before quiesce, held to the policy.

Each test runs a framework's own summarizer or trimmer in front of quiesce on
a history that opens with a user constraint, with the framework's own test
model (no network), twice: a control run without quiesce, where the
constraint is gone from the model's input (the defect), and a run with
quiesce, where it stays, the removal is escalated, and no tool call is ever
separated from its result.

LangGraph, the Agents SDK runner and AutoGen's agents run on asyncio only;
the sync LangChain runs need no event loop at all.
"""

from __future__ import annotations

from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware, SummarizationMiddleware
from langchain.agents.middleware.types import ModelRequest
from langchain_core.language_models.fake_chat_models import (
    FakeListChatModel,
    FakeMessagesListChatModel,
)
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    ToolMessage,
    trim_messages,
)
from langgraph.checkpoint.memory import InMemorySaver

from quiesce import Buffer, EscalationKind, Kind, open_buffer
from quiesce.integrations.langchain import QuiesceMiddleware

CONSTRAINT = "Constraint: never deploy to production on a Friday."


@pytest.fixture
def anyio_backend() -> str:
    """LangGraph is asyncio-only."""
    return "asyncio"


class RecordingModel(FakeMessagesListChatModel):
    """LangChain's fake list model, recording every request it receives."""

    requests: list[list[BaseMessage]] = []  # noqa: RUF012 (a pydantic field)

    def bind_tools(self, tools: Any, **kwargs: Any) -> RecordingModel:  # type: ignore[override]
        return self  # the fake model ignores tool schemas

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
        self.requests.append(list(messages))
        return super()._generate(messages, *args, **kwargs)


def recording(n: int) -> RecordingModel:
    model = RecordingModel(responses=[AIMessage(content=f"answer {i}") for i in range(n)])
    model.requests = []
    return model


def history() -> list[BaseMessage]:
    """A constraint first, then a tool round and chat (ids as LangGraph gives them)."""
    call = {"name": "lookup", "args": {"q": "calendar"}, "id": "c1", "type": "tool_call"}
    return [
        HumanMessage(CONSTRAINT, id="h0"),
        AIMessage(content="Checking the calendar.", tool_calls=[call], id="a1"),
        ToolMessage("Today is Friday.", tool_call_id="c1", id="t1"),
        AIMessage(content="It is Friday.", id="a2"),
        HumanMessage("What about the release notes?", id="h1"),
        AIMessage(content="They are drafted.", id="a3"),
        HumanMessage("Shall we deploy now?", id="h2"),
    ]


def texts(request: list[BaseMessage]) -> list[str]:
    return [str(m.text) for m in request]


def answered(request: list[BaseMessage]) -> None:
    """Every tool call in ``request`` is answered, and every result has its call."""
    open_calls: set[str] = set()
    for m in request:
        if isinstance(m, ToolMessage):
            assert m.tool_call_id in open_calls, f"orphaned result {m.tool_call_id}"
            open_calls.discard(m.tool_call_id)
            continue
        assert not open_calls, f"unanswered calls {open_calls}"
        if isinstance(m, AIMessage):
            open_calls = {str(tc["id"]) for tc in m.tool_calls}
    assert not open_calls


def summarizer() -> SummarizationMiddleware:
    """LangChain's own summarization middleware with its fake list model:
    summarize once the history reaches 6 messages, keep the newest 2."""
    return SummarizationMiddleware(
        model=FakeListChatModel(responses=["The user asked about a deployment."]),
        trigger=("messages", 6),
        keep=("messages", 2),
    )


def refused(buf: Buffer) -> list[Any]:
    return [e for e in buf.drain_escalations() if e.kind is EscalationKind.REFUSED_EDIT]


def two_invocations(agent: Any) -> None:
    """The history in two runs of one thread (5 messages and an answer, then a
    question): the summarizer triggers on the second, keeping the newest 2.
    (A message a summarizer placed before quiesce removes in the very call
    that brings it in never reached quiesce: only what quiesce holds is
    held to its policy.)"""
    cfg = {"configurable": {"thread_id": "t1"}}
    first = history()
    agent.invoke({"messages": first[:5]}, cfg)
    agent.invoke({"messages": first[6:]}, cfg)


async def two_ainvocations(agent: Any) -> None:
    cfg = {"configurable": {"thread_id": "t1"}}
    first = history()
    await agent.ainvoke({"messages": first[:5]}, cfg)
    await agent.ainvoke({"messages": first[6:]}, cfg)


class TestSummarizationMiddleware:
    """``SummarizationMiddleware`` before ``QuiesceMiddleware``."""

    def test_control_loses_the_constraint(self) -> None:
        """Without quiesce the summarizer paraphrases the constraint away."""
        model = recording(2)
        agent = create_agent(
            model=model, tools=[], middleware=[summarizer()], checkpointer=InMemorySaver()
        )
        two_invocations(agent)
        request = model.requests[-1]
        assert CONSTRAINT not in texts(request)
        assert any("summary of the conversation" in t for t in texts(request))

    def test_constraint_stays_and_the_removal_is_escalated(self) -> None:
        """With quiesce the summary is a ``Summarize`` through the policy: the
        plan over everything it replaced is refused (user messages are
        immutable) and escalated; the summary then takes the place of the
        ordinary messages only. The model sees the constraint and the user's
        questions, byte for byte, and every call answered."""
        buf = Buffer()
        model = recording(2)
        agent = create_agent(
            model=model,
            tools=[],
            middleware=[summarizer(), QuiesceMiddleware(buf)],
            checkpointer=InMemorySaver(),
        )
        two_invocations(agent)
        request = model.requests[-1]
        shown = texts(request)
        assert CONSTRAINT in shown
        assert "What about the release notes?" in shown and "Shall we deploy now?" in shown
        assert any("summary of the conversation" in t for t in shown)
        answered(request)
        (esc,) = refused(buf)
        assert esc.plan is not None and "h0" in str(esc.plan)
        with buf.snapshot() as snap:
            kinds = {e.id: e.kind for e in snap}
        assert kinds["h0"] is Kind.INSTRUCTION
        # The ordinary messages the summary covered left with their tool pair.
        assert {"a1", "a1/c1", "t1", "a2"}.isdisjoint(kinds)
        assert sum(k is Kind.SUMMARY for k in kinds.values()) == 1
        assert {"a1", "a1/c1", "t1", "a2"} <= set(buf.tombstones)

    @pytest.mark.anyio
    async def test_async_runtime_buffer(self) -> None:
        """The same on ``open_buffer()`` with ``ainvoke``: the edits go
        through ``aedit``. (asyncio only: LangGraph.)"""
        model = recording(2)
        async with open_buffer() as buf:
            agent = create_agent(
                model=model,
                tools=[],
                middleware=[summarizer(), QuiesceMiddleware(buf)],
                checkpointer=InMemorySaver(),
            )
            await two_ainvocations(agent)
            await buf.quiesce()
            request = model.requests[-1]
            assert CONSTRAINT in texts(request)
            answered(request)
            assert buf.stats().escalations == 1
            assert "t1" in buf.tombstones


class TrimMiddleware(AgentMiddleware):  # type: ignore[type-arg]
    """``trim_messages`` as people place it: around the model call, keeping
    the newest messages that fit (LangChain's own trimmer, counting messages)."""

    def __init__(self, max_messages: int) -> None:
        super().__init__()
        self.max_messages = max_messages

    def wrap_model_call(self, request: ModelRequest[Any], handler: Any) -> Any:
        kept = trim_messages(
            request.messages,
            max_tokens=self.max_messages,
            token_counter=len,
            strategy="last",
            start_on="human",
            allow_partial=False,
        )
        return handler(request.override(messages=kept))


def trimmed_turns(agent: Any, questions: tuple[str, ...] = ()) -> None:
    """A short first turn the trimmer keeps whole (quiesce sees it), then the
    user's next question: the trimmer keeps the newest 4 messages from a
    user message on, dropping the constraint and the tool round."""
    state = agent.invoke({"messages": history()[:3]})
    for i, q in enumerate(("What about the release notes?", *questions)):
        question = HumanMessage(q, id=f"h{i + 1}")
        state = agent.invoke({"messages": [*state["messages"], question]})


class TestTrimMessages:
    """``trim_messages`` (in a model-call wrapper) before ``QuiesceMiddleware``."""

    def test_control_loses_the_constraint(self) -> None:
        model = recording(2)
        agent = create_agent(model=model, tools=[], middleware=[TrimMiddleware(4)])
        trimmed_turns(agent)
        assert CONSTRAINT not in texts(model.requests[-1])

    def test_constraint_stays_ordinary_messages_pruned(self) -> None:
        """The dropped messages are a prune request: refused as a whole (the
        user's messages are immutable) and escalated, then applied to the
        ordinary ones. The tool pair leaves together; the constraint and the
        user's question stay in the model's input."""
        buf = Buffer()
        model = recording(2)
        agent = create_agent(
            model=model, tools=[], middleware=[TrimMiddleware(4), QuiesceMiddleware(buf)]
        )
        trimmed_turns(agent)
        shown = texts(model.requests[-1])
        assert shown[1:] == [CONSTRAINT, "What about the release notes?"]
        assert "[quiesce: removed from this context]" in shown[0]  # the system note
        answered(model.requests[-1])
        assert len(refused(buf)) == 1
        assert {"a1", "a1/c1", "t1"} <= set(buf.tombstones)

    def test_a_refused_drop_is_escalated_once(self) -> None:
        """The trimmer drops the constraint again on every call: the policy's
        refusal is escalated on the turn it happens, not repeated after."""
        buf = Buffer()
        model = recording(4)
        agent = create_agent(
            model=model, tools=[], middleware=[TrimMiddleware(4), QuiesceMiddleware(buf)]
        )
        trimmed_turns(agent, ("And tomorrow?", "Thanks."))
        assert all(CONSTRAINT in texts(r) for r in model.requests)
        named = [op.id for esc in refused(buf) if esc.plan is not None for op in esc.plan.ops]
        assert named.count("h0") == 1


# -- AutoGen -------------------------------------------------------------------


class AutoGenTrimmer:
    """AutoGen's own ``BufferedChatCompletionContext`` trimming, as a quiesce
    pruner: it renders the window into AutoGen messages, lets the framework's
    context choose what to keep (its ``get_messages``), and proposes to prune
    every message it dropped — so the framework's choice goes through the
    policy instead of around it."""

    def __init__(self, buffer_size: int) -> None:
        self.buffer_size = buffer_size

    async def __call__(self, snap: Any) -> Any:
        from autogen_core.model_context import BufferedChatCompletionContext

        from quiesce import EditPlan, Prune
        from quiesce.integrations import _store
        from quiesce.integrations import autogen as ag

        pairs = [(s.unit, m) for s in _store.window(snap) if (m := ag._rebuild(s)) is not None]
        context = BufferedChatCompletionContext(
            buffer_size=self.buffer_size, initial_messages=[m for _, m in pairs]
        )
        kept = {id(m) for m in await context.get_messages()}
        dropped = {unit for unit, m in pairs if id(m) not in kept}
        ids = [e.id for e in snap if e.id in dropped or e.meta.get("unit") in dropped]
        if not ids:
            return None
        return EditPlan([Prune(i) for i in ids], reason="autogen buffered context")


class TestAutoGenBufferedContext:
    """AutoGen's buffered context (keep the newest 3 messages) against a
    constraint given first. (asyncio only: ``AssistantAgent`` runs its
    tools with asyncio.)"""

    @staticmethod
    def client() -> Any:
        from autogen_core.models import ModelFamily, ModelInfo
        from autogen_ext.models.replay import ReplayChatCompletionClient

        info = ModelInfo(
            vision=False,
            function_calling=True,
            json_output=False,
            family=ModelFamily.UNKNOWN,
            structured_output=False,
        )
        return ReplayChatCompletionClient(["noted", "drafted", "no: it is Friday"], model_info=info)

    @staticmethod
    async def converse(agent: Any) -> None:
        for task in (CONSTRAINT, "Draft the release notes.", "Shall we deploy now?"):
            await agent.run(task=task)

    @staticmethod
    def shown(client: Any) -> list[str]:
        return [str(m.content) for m in client.create_calls[-1]["messages"]]

    @pytest.mark.anyio
    async def test_control_loses_the_constraint(self) -> None:
        from autogen_agentchat.agents import AssistantAgent
        from autogen_core.model_context import BufferedChatCompletionContext

        client = self.client()
        context = BufferedChatCompletionContext(buffer_size=3)
        await self.converse(AssistantAgent("a", model_client=client, model_context=context))
        assert CONSTRAINT not in self.shown(client)

    @pytest.mark.anyio
    async def test_constraint_stays_and_the_trim_is_escalated(self) -> None:
        """The framework's trim becomes a plan the policy refuses (it would
        remove the user's constraint): escalated, nothing removed, and the
        model sees the constraint on every call."""
        from autogen_agentchat.agents import AssistantAgent

        from quiesce.integrations.autogen import QuiesceChatCompletionContext

        client = self.client()
        async with open_buffer() as buf:
            context = QuiesceChatCompletionContext(buf, pruner=AutoGenTrimmer(3))
            await self.converse(AssistantAgent("a", model_client=client, model_context=context))
            assert all(
                CONSTRAINT in [str(m.content) for m in call["messages"]]
                for call in client.create_calls
            )
            assert buf.stats().escalations >= 1
            assert len(buf.tombstones) == 0
