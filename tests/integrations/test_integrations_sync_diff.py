"""Sync is a faithful diff of the framework's history (``_store.sync_history``).

One class per property: what quiesce rendered is recognised when handed
back; a message changed under its id is a ``Rewrite`` through the policy; a
message gone from the history is a prune request through the policy; a
no-op sync changes nothing. The LangChain cases need no event loop; the
pydantic-ai agent runs on asyncio only (it runs its tools with asyncio tasks).
"""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from pydantic_ai import Agent
from pydantic_ai.capabilities import ProcessHistory
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from quiesce import Buffer, EscalationKind, Kind
from quiesce.integrations import langchain as lc
from quiesce.integrations.pydantic_ai import QuiesceHistoryProcessor


@pytest.fixture
def anyio_backend() -> str:
    """pydantic-ai runs its tools with asyncio tasks: asyncio only."""
    return "asyncio"


def call(call_id: str, q: str) -> dict[str, Any]:
    return {"name": "lookup", "args": {"q": q}, "id": call_id, "type": "tool_call"}


def base() -> list[BaseMessage]:
    return [
        HumanMessage("Never touch the prod database.", id="h0"),
        AIMessage(content="A first draft.", id="a1"),
        AIMessage(content="", tool_calls=[call("c1", "x")], id="a2"),
        ToolMessage("x is 1", tool_call_id="c1", id="t1"),
        AIMessage(content="Done.", id="a3"),
    ]


def shown(buf: Buffer) -> list[str]:
    with buf.snapshot() as snap:
        messages, _ = lc.render_messages(snap)
    return [str(m.text) for m in messages]


def refusals(buf: Buffer) -> list[Any]:
    return [e for e in buf.drain_escalations() if e.kind is EscalationKind.REFUSED_EDIT]


class TestRewrite:
    """A message whose content changed under the same id."""

    def test_ordinary_message_is_rewritten_and_logged(self) -> None:
        buf = Buffer()
        lc.sync_messages(buf, base())
        changed = base()
        changed[1] = AIMessage(content="The final answer.", id="a1")
        report = lc.sync_messages(buf, changed)
        assert report.appended == ()
        assert "The final answer." in shown(buf) and "A first draft." not in shown(buf)
        edits = [r for r in buf.log if r.op == "edit" and "a1" in r.ids]
        assert len(edits) == 1 and edits[0].outcome == "applied"
        assert refusals(buf) == []

    def test_immutable_message_is_refused_and_kept(self) -> None:
        """A user message is immutable: the rewrite is refused and escalated,
        and the window keeps the original; handing the changed copy back
        again is not escalated again."""
        buf = Buffer()
        lc.sync_messages(buf, base())
        changed = base()
        changed[0] = HumanMessage("Touch whatever you like.", id="h0")
        lc.sync_messages(buf, changed)
        assert shown(buf)[0] == "Never touch the prod database."
        (esc,) = refusals(buf)
        assert "'h0'" in esc.detail
        lc.sync_messages(buf, [*changed])
        assert refusals(buf) == []

    def test_a_tool_call_added_to_a_message_is_appended(self) -> None:
        """Giving an existing AI message a tool call (and the history its
        result) appends the call and result: no ``DanglingReference``."""
        buf = Buffer()
        first = base()
        lc.sync_messages(buf, first)
        later = [
            *first[:4],
            AIMessage(content="Done.", tool_calls=[call("c2", "y")], id="a3"),
            ToolMessage("y is 2", tool_call_id="c2", id="t2"),
        ]
        lc.sync_messages(buf, later)
        with buf.snapshot() as snap:
            assert snap["a3/c2"].kind is Kind.TOOL_CALL
            assert snap["t2"].refs == ("a3/c2",)  # the pair is one group
            messages, _ = lc.render_messages(snap)
        assert [m.tool_call_id for m in messages if isinstance(m, ToolMessage)] == ["c1", "c2"]


class TestDrop:
    """A message gone from the framework's history."""

    def test_ordinary_message_is_pruned_with_its_parts(self) -> None:
        buf = Buffer()
        lc.sync_messages(buf, base())
        lc.sync_messages(buf, [m for m in base() if m.id not in ("a2", "t1")])
        assert {"a2", "a2/c1", "t1"} <= set(buf.tombstones)
        t = buf.tombstones["a2"]
        assert t.actor == "quiesce.integrations.langchain"
        assert refusals(buf) == []

    def test_half_a_tool_pair_is_refused(self) -> None:
        """Dropping a call but keeping its result would split the pair: refused
        and escalated; both stay."""
        buf = Buffer()
        lc.sync_messages(buf, base())
        lc.sync_messages(buf, [m for m in base() if m.id != "a2"])
        assert "a2" not in buf.tombstones
        assert len(refusals(buf)) == 1
        assert "x is 1" in shown(buf)

    def test_protected_message_stays(self) -> None:
        """Dropping the constraint with an ordinary message: the plan is
        refused as a whole (escalated), then the ordinary one is pruned."""
        buf = Buffer()
        lc.sync_messages(buf, base())
        lc.sync_messages(buf, base()[2:])
        assert "a1" in buf.tombstones and "h0" not in buf.tombstones
        assert shown(buf)[0] == "Never touch the prod database."
        assert len(refusals(buf)) == 1


class TestNoOp:
    """A sync that finds nothing new changes nothing."""

    def test_same_objects(self) -> None:
        buf = Buffer()
        messages = base()
        lc.sync_messages(buf, messages)
        version = buf.version
        report = lc.sync_messages(buf, messages)
        assert buf.version == version
        assert report.appended == () and report.held == (0, 1, 2, 3, 4)

    def test_equal_copies(self) -> None:
        """New objects with the same content (a checkpointer's reload)."""
        buf = Buffer()
        lc.sync_messages(buf, base())
        version = buf.version
        report = lc.sync_messages(buf, base())
        assert buf.version == version and report.held == (0, 1, 2, 3, 4)
        assert refusals(buf) == []


class Script:
    """A FunctionModel function: canned responses, recording each request."""

    def __init__(self, responses: list[ModelResponse]) -> None:
        self.responses = responses
        self.requests: list[list[ModelMessage]] = []

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.requests.append(list(messages))
        return self.responses.pop(0)


class TestRenderedWindowFedBack:
    """pydantic-ai's ``ProcessHistory`` writes quiesce's rendering back into
    the run's history, and ``all_messages()`` carries it to the next run."""

    @pytest.mark.anyio
    async def test_notes_and_stand_ins_never_become_entries(self) -> None:
        """Three runs over a buffer whose tool result was pruned: the note and
        the stand-in result are rendered every time and never stored; no
        message is stored twice; each request carries one note.
        (asyncio only: pydantic-ai.)"""
        buf = Buffer()
        script = Script(
            [
                ModelResponse(parts=[ToolCallPart("lookup", {"q": "x"}, "c1")]),
                ModelResponse(parts=[TextPart("x is 1")]),
                ModelResponse(parts=[TextPart("still 1")]),
                ModelResponse(parts=[TextPart("yes")]),
            ]
        )
        agent = Agent(
            FunctionModel(script),
            capabilities=[ProcessHistory(QuiesceHistoryProcessor(buf))],
        )

        @agent.tool_plain
        def lookup(q: str) -> str:
            """Look something up."""
            return f"{q} is 1"

        result = await agent.run("Never guess; find x.")
        with buf.snapshot() as snap:
            result_id = next(e.id for e in snap if e.kind is Kind.TOOL_OUTPUT)
        buf.prune([result_id], reason="stale")
        history = result.all_messages()
        for prompt in ("again?", "sure?"):
            history = (await agent.run(prompt, message_history=history)).all_messages()
        with buf.snapshot() as snap:
            entries = list(snap)
        assert not any(e.body.startswith("[quiesce:") for e in entries)
        bodies = [e.body for e in entries if e.kind is Kind.INSTRUCTION]
        assert bodies == ["Never guess; find x.", "again?", "sure?"]
        for request in script.requests[2:]:
            notes = [
                p
                for m in request
                if isinstance(m, ModelRequest)
                for p in m.parts
                if isinstance(p, SystemPromptPart) and p.content.startswith("[quiesce:")
            ]
            assert len(notes) == 1
        assert refusals(buf) == []


class TestCachedRender:
    """A render that reuses the last one's objects gives what a fresh render gives."""

    @pytest.mark.parametrize("seed", range(6))
    def test_langchain_cached_equals_fresh(self, seed: int) -> None:
        """Seeded random turns (user messages, tool rounds, prunes of calls or
        results, stale marks): after each, the cached render (and its resumed
        pairing) equals a render from scratch, message for message."""
        import random

        rng = random.Random(seed)
        buf = Buffer()
        history: list[BaseMessage] = []
        for step in range(40):
            roll = rng.random()
            if roll < 0.4:
                history.append(HumanMessage(f"q{step}", id=f"h{step}"))
            elif roll < 0.75:
                cid = f"c{step}"
                calls = [call(cid, str(step))]
                history.append(AIMessage(content="", tool_calls=calls, id=f"a{step}"))
                if rng.random() < 0.8:
                    history.append(ToolMessage(f"r{step}", tool_call_id=cid, id=f"t{step}"))
            else:
                with buf.snapshot() as snap:
                    live = [e.id for e in snap if e.kind in (Kind.TOOL_OUTPUT, Kind.TOOL_CALL)]
                if live:
                    victim = rng.choice(live)
                    if rng.random() < 0.5:
                        buf.prune([victim], reason="stale")
                    else:
                        buf.mark_stale(victim, "old")
            lc.sync_messages(buf, history)
            with buf.snapshot() as snap:
                cached, note_c = lc.render_messages(snap, buffer=buf)
                fresh, note_f = lc.render_messages(snap)
            assert note_c == note_f
            assert [m.model_dump() for m in cached] == [m.model_dump() for m in fresh], step
