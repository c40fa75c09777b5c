"""LangChain v1 / LangGraph end to end with ``QuiesceMiddleware`` (offline).

LangGraph runs on asyncio only (its runner uses asyncio tasks and futures), so
every async test here runs on **asyncio only**; the middleware's own code is
anyio and would run on trio. The model is LangChain's own
``FakeMessagesListChatModel`` (canned ``AIMessage`` responses with tool calls),
subclassed only to record each request and to accept ``bind_tools``.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langgraph.checkpoint.memory import InMemorySaver

from _scenario import PruneCall, Scenario
from quiesce import Buffer, InvalidArgument, SQLiteLog, open_buffer
from quiesce.integrations.langchain import QuiesceMiddleware, sync_messages

THINKING = [
    {"type": "thinking", "thinking": "Two lookups, in parallel.", "signature": "c2lnbmVkLTE="},
    {"type": "text", "text": "Looking up a and b."},
]


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


def two_turns() -> RecordingModel:
    """A model for two runs: parallel calls with thinking, then two answers."""
    model = RecordingModel(
        responses=[
            AIMessage(content=THINKING, tool_calls=calls(("c1", "a"), ("c2", "b"))),
            AIMessage(content="done"),
            AIMessage(content="done again"),
        ]
    )
    model.requests = []
    return model


def calls(*pairs: tuple[str, str]) -> list[dict[str, Any]]:
    return [{"name": "lookup", "args": {"q": q}, "id": i, "type": "tool_call"} for i, q in pairs]


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


def call_ids(request: list[BaseMessage]) -> set[str]:
    return {str(tc["id"]) for m in request if isinstance(m, AIMessage) for tc in m.tool_calls}


def make_agent(
    buf: Any,
    model: RecordingModel,
    pruner: Any,
    saver: InMemorySaver,
    scenario: Scenario,
    **kw: Any,
) -> Any:
    scenario.buf = buf

    async def lookup(q: str) -> str:
        """Look something up."""
        return await scenario.lookup(q)

    return create_agent(
        model=model,
        tools=[lookup],
        system_prompt="You are terse.",
        middleware=[QuiesceMiddleware(buf, pruner=pruner, **kw)],
        checkpointer=saver,
    )


@pytest.mark.anyio
async def test_agent_end_to_end(tmp_path: Path) -> None:
    """Two parallel calls; a pinned reader across the run defers a prune that is
    then applied; the pruned call re-runs without crashing; the thinking block
    reaches the model unchanged; a reopened SQLite log continues the thread;
    every request answers every tool call. (asyncio only: LangGraph.)"""
    path = tmp_path / "lc.sqlite"
    model = RecordingModel(
        responses=[
            AIMessage(content=THINKING, tool_calls=calls(("c1", "a"), ("c2", "b"))),
            AIMessage(content="a and b found."),
            AIMessage(content="Again.", tool_calls=calls(("c3", "a"))),
            AIMessage(content="a found again."),
            AIMessage(content="Still here."),
        ]
    )
    model.requests = []
    saver = InMemorySaver()
    cfg = {"configurable": {"thread_id": "t1"}}
    scenario = Scenario()

    async with open_buffer(log=SQLiteLog(path)) as buf:
        agent = make_agent(buf, model, scenario.pruner, saver, scenario)
        await agent.ainvoke({"messages": [HumanMessage("find a and b")]}, cfg)
        assert len(model.requests) == 2
        assert call_ids(model.requests[1]) == {"c1", "c2"}
        await scenario.run_while_pinned(
            lambda: agent.ainvoke({"messages": [HumanMessage("again")]}, cfg)
        )
        # Request 3: the prune was deferred (the reader held c1): still shown, marked stale.
        assert "c1" in call_ids(model.requests[2])
        assert "stale entries, shown unchanged]" in str(model.requests[2][0].content)
        # Request 4: applied; the re-run c3 was recorded as a re-admission.
        assert call_ids(model.requests[3]) == {"c2", "c3"}
        assert "[quiesce: removed from this context]" in str(model.requests[3][0].content)
        assert buf.stats().tombstones == 2
        assert buf.stats().readmissions_overridden == 1  # the re-run call c3
        version = buf.version

    # A new run over the reopened log continues the same thread.
    buf.sink.close()  # one writer per log file (LogLocked): close before reopening
    async with open_buffer(log=SQLiteLog(path)) as buf2:
        assert buf2.version == version
        agent2 = make_agent(buf2, model, None, saver, scenario)
        out = await agent2.ainvoke({"messages": [HumanMessage("still there?")]}, cfg)
        assert out["messages"][-1].content == "Still here."
        assert len(model.requests) == 5
        req = model.requests[-1]
        assert call_ids(req) == {"c2", "c3"}
        assert "[quiesce: removed from this context]" in str(req[0].content)
        # The full history stays in LangGraph's state (non-destructive).
        assert "c1" in call_ids(out["messages"])

    for req in model.requests:
        answered(req)
    first_turn = [
        m
        for req in model.requests
        for m in req
        if isinstance(m, AIMessage) and m.tool_calls and m.tool_calls[0]["id"] == "c1"
    ]
    assert len(first_turn) == 2 and all(m.content == THINKING for m in first_turn)


@pytest.mark.anyio
async def test_every_request_answered_and_thinking_unchanged() -> None:
    """Across a run with a pruned result whose call survives, each request's
    calls are answered (a stand-in replaces the result) and the signed
    thinking block is byte-identical. (asyncio only: LangGraph.)"""
    model = two_turns()
    saver = InMemorySaver()
    cfg = {"configurable": {"thread_id": "t2"}}
    async with open_buffer() as buf:
        agent = make_agent(buf, model, None, saver, Scenario())
        await agent.ainvoke({"messages": [HumanMessage("go")]}, cfg)
        with buf.snapshot() as snap:
            result = next(e.id for e in snap if e.meta.get("result_of") == "c2")
        report = await buf.aprune([result], reason="too long")
        assert report[result].status.name == "PRUNED"
        await agent.ainvoke({"messages": [HumanMessage("more")]}, cfg)
    for req in model.requests:
        answered(req)
        for m in req:
            if isinstance(m, AIMessage) and m.tool_calls:
                assert m.content == THINKING
    last = model.requests[-1]
    stand_in = next(m for m in last if isinstance(m, ToolMessage) and m.tool_call_id == "c2")
    assert str(stand_in.content).startswith("[quiesce: the result of")


@pytest.mark.anyio
async def test_destructive_state_holds_no_orphans() -> None:
    """``destructive=True``: after a prune, LangGraph's saved state has neither
    the pruned call nor its result, and the AI message keeps its other call.
    (asyncio only: LangGraph.)"""
    model = two_turns()
    saver = InMemorySaver()
    cfg = {"configurable": {"thread_id": "t3"}}
    pruner = PruneCall()
    async with open_buffer() as buf:
        agent = make_agent(buf, model, pruner, saver, Scenario(), destructive=True)
        await agent.ainvoke({"messages": [HumanMessage("go")]}, cfg)
        pruner.armed = True
        out = await agent.ainvoke({"messages": [HumanMessage("more")]}, cfg)
    msgs = out["messages"]
    assert call_ids(msgs) == {"c2"}
    assert not any(isinstance(m, ToolMessage) and m.tool_call_id == "c1" for m in msgs)
    answered(msgs)
    for req in model.requests:
        answered(req)


def test_sync_is_idempotent_and_refuses_unknown_types() -> None:
    """Syncing the same history twice appends nothing the second time; a
    message type the integration cannot represent is refused, nothing appended."""
    from quiesce import Buffer

    buf = Buffer()
    history = [
        HumanMessage("hi", id="h1"),
        AIMessage(content=THINKING, tool_calls=calls(("c1", "a")), id="a1"),
        ToolMessage("result for a", tool_call_id="c1", id="t1"),
    ]
    first = sync_messages(buf, history)
    assert first.appended == (0, 1, 2)
    version = buf.version
    assert sync_messages(buf, history).held == (0, 1, 2)
    assert buf.version == version
    with pytest.raises(
        InvalidArgument,
        match=r"^langchain: message 1: ChatMessage \(type='chat'\) is not supported$",
    ):
        sync_messages(buf, [HumanMessage("x", id="h2"), ChatMessage("y", role="critic", id="c")])
    assert buf.version == version
    assert SystemMessage  # the system prompt is ModelRequest.system_message, not a message


def test_missing_extra_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without LangChain installed, importing the integration names the extra."""
    monkeypatch.setitem(sys.modules, "langchain.agents.middleware.types", None)
    monkeypatch.delitem(sys.modules, "quiesce.integrations.langchain")
    with pytest.raises(ImportError, match=r'pip install "quiesce\[langchain\]"'):
        importlib.import_module("quiesce.integrations.langchain")


def test_sync_invoke_runs_the_pruner() -> None:
    """LangGraph's sync ``invoke`` goes through ``wrap_model_call``
    (its one hook); the async pruner runs (``anyio.run``) in that thread.
    (No event loop: the sync path.)"""
    from quiesce import Buffer

    model = two_turns()
    buf = Buffer()
    pruner = PruneCall()

    def lookup(q: str) -> str:
        """Look something up."""
        return f"result for {q}"

    agent = create_agent(
        model=model,
        tools=[lookup],
        middleware=[QuiesceMiddleware(buf, pruner=pruner)],
        checkpointer=InMemorySaver(),
    )
    cfg = {"configurable": {"thread_id": "sync"}}
    agent.invoke({"messages": [HumanMessage("go")]}, cfg)
    pruner.armed = True
    agent.invoke({"messages": [HumanMessage("more")]}, cfg)
    assert call_ids(model.requests[-1]) == {"c2"}
    for req in model.requests:
        answered(req)


def test_summary_and_rewrite_render_as_plain_messages() -> None:
    """A summary a pruner made (no framework dump) renders as an ``AIMessage``
    in the place of the turn it covers; a rewritten message renders with its
    new text; every call left is still answered. (No event loop.)"""
    from quiesce import Buffer, EditPlan, Entry, Kind, Rewrite, Summarize
    from quiesce.integrations.langchain import render_messages

    buf = Buffer()
    history = [
        HumanMessage("find a", id="h1"),
        AIMessage(content=THINKING, tool_calls=calls(("c1", "a")), id="a1"),
        ToolMessage("result for a", tool_call_id="c1", id="t1"),
        AIMessage(content="a is 1.", id="a2"),
        HumanMessage("and b?", id="h2"),
        AIMessage(content="b is 2, probably.", id="a3"),
    ]
    sync_messages(buf, history)
    summary = Entry("s1", Kind.SUMMARY, "Looked up a: it is 1.")
    plan = EditPlan(
        [
            Summarize(["a1", "a1/c1", "t1", "a2"], into=summary),
            Rewrite("a3", "b is 2."),
        ],
        reason="compact",
    )
    assert buf.edit(plan).applied
    with buf.snapshot() as snap:
        messages, note = render_messages(snap)
    assert [type(m).__name__ for m in messages] == [
        "HumanMessage",
        "AIMessage",
        "HumanMessage",
        "AIMessage",
    ]
    assert messages[1].content == "Looked up a: it is 1."
    assert messages[3].content == "b is 2."
    answered(messages)
    assert note is not None and "[quiesce: removed from this context]" in note


def test_readmit_refuse_keeps_the_head() -> None:
    """``readmit="refuse"``: a re-run of a pruned call raises
    ``ReadmissionRefused`` and appends nothing; the default records it."""
    from quiesce import Buffer, ReadmissionRefused

    buf = Buffer()
    first = [
        HumanMessage("find a", id="h1"),
        AIMessage(content="", tool_calls=calls(("c1", "a")), id="a1"),
        ToolMessage("result for a", tool_call_id="c1", id="t1"),
    ]
    sync_messages(buf, first)
    buf.prune(["a1", "a1/c1", "t1"], reason="stale")
    rerun = [
        *first,
        AIMessage(content="", tool_calls=calls(("c2", "a")), id="a2"),
        ToolMessage("result for a", tool_call_id="c2", id="t2"),
    ]
    version = buf.version
    with pytest.raises(ReadmissionRefused):
        sync_messages(buf, rerun, readmit="refuse")
    assert buf.version == version
    report = sync_messages(buf, rerun)
    assert report.tombstoned == (1, 2) and report.appended == (3, 4)
    assert report.readmitted == ("a2/c2",)
    # the override names the integration (its module), not an adapter
    record = next(r for r in buf.log if r.op == "append" and r.ids == ("a2/c2",))
    assert record.outcome == "overridden" and record.reason is not None
    assert record.reason.startswith("re-admitted by quiesce.integrations.langchain (readmit=")


@pytest.mark.anyio
async def test_a_checkpointed_message_changed_between_turns_reaches_the_model() -> None:
    """Turn after turn the checkpointer hands back equal copies (matched
    without comparing each one again); a message changed in the saved state
    between turns (same id, new content) is not hidden by what the last
    turns found: the sync rewrites it and the model receives the new text."""
    model = RecordingModel(responses=[AIMessage(f"answer {i}") for i in range(4)])
    saver = InMemorySaver()
    agent: Any = create_agent(
        model=model, tools=[], middleware=[QuiesceMiddleware(Buffer())], checkpointer=saver
    )
    config: Any = {"configurable": {"thread_id": "t"}}
    first = AIMessage("a first draft", id="draft")
    await agent.ainvoke({"messages": [HumanMessage("hi", id="u0"), first]}, config)
    await agent.ainvoke({"messages": [HumanMessage("again", id="u1")]}, config)
    assert "a first draft" in [m.text for m in model.requests[-1]]
    agent.update_state(config, {"messages": [AIMessage("the final answer", id="draft")]})
    await agent.ainvoke({"messages": [HumanMessage("and now?", id="u2")]}, config)
    texts = [m.text for m in model.requests[-1]]
    assert "the final answer" in texts and "a first draft" not in texts
