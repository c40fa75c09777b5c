"""The OpenAI Agents SDK end to end with ``QuiesceSession`` and
``quiesce_input_filter`` (offline).

The SDK's runner is asyncio-only (under trio it fails: its model-provider
cleanup and tool execution use asyncio), so the tests that run an agent run on
**asyncio only**; the session on its own is anyio code and its test runs on
asyncio **and** trio. The model is a
``agents.models.interface.Model`` subclass returning canned Responses output
items (reasoning with ``encrypted_content``, parallel function calls,
messages) and recording every input it receives.
"""

from __future__ import annotations

import functools
import importlib
import json
import sys
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import anyio
import pytest
from agents import (
    Agent,
    ModelResponse,
    RunConfig,
    Runner,
    Usage,
    function_tool,
    set_tracing_disabled,
)
from agents.models.interface import Model
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseReasoningItem,
)
from openai.types.responses.response_reasoning_item import Summary

from _scenario import Scenario
from quiesce import (
    Buffer,
    DuplicateEntry,
    Entry,
    InvalidType,
    Kind,
    ProtectedEntry,
    SQLiteLog,
    open_buffer,
)
from quiesce.integrations.openai_agents import QuiesceSession, quiesce_input_filter

set_tracing_disabled(True)  # offline: no trace export

REASONING = ResponseReasoningItem(
    id="rs_1",
    type="reasoning",
    summary=[Summary(type="summary_text", text="Two lookups.")],
    encrypted_content="ZW5jcnlwdGVkLXJlYXNvbmluZw==",
)


def call(call_id: str, q: str) -> ResponseFunctionToolCall:
    return ResponseFunctionToolCall(
        id=f"fc_{call_id}",
        call_id=call_id,
        name="lookup",
        arguments=json.dumps({"q": q}),
        type="function_call",
        status="completed",
    )


def text(msg_id: str, body: str) -> ResponseOutputMessage:
    return ResponseOutputMessage(
        id=msg_id,
        type="message",
        role="assistant",
        status="completed",
        content=[ResponseOutputText(type="output_text", text=body, annotations=[])],
    )


class ScriptedModel(Model):
    """Canned responses, in order; records each input list it is given."""

    def __init__(self, outputs: list[list[Any]]) -> None:
        self.outputs = outputs
        self.inputs: list[list[dict[str, Any]]] = []
        self.instructions: list[str | None] = []

    async def get_response(
        self, system_instructions: Any, input: Any, *args: Any, **kw: Any
    ) -> Any:
        self.inputs.append([dict(i) for i in input] if isinstance(input, list) else [])
        self.instructions.append(system_instructions)
        return ModelResponse(output=self.outputs.pop(0), usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kw: Any) -> Any:
        raise NotImplementedError


def answered(items: list[dict[str, Any]]) -> None:
    """Every function_call has exactly one output after it, every output a call
    before it, and every reasoning item is followed by an output item."""
    calls: set[str] = set()
    outputs: set[str] = set()
    for i, item in enumerate(items):
        if item.get("type") == "function_call":
            calls.add(item["call_id"])
        elif item.get("type") == "function_call_output":
            assert item["call_id"] in calls, f"orphaned output {item['call_id']}"
            assert item["call_id"] not in outputs
            outputs.add(item["call_id"])
        elif item.get("type") == "reasoning":
            assert items[i + 1].get("type") in ("function_call", "message")
    assert calls == outputs, f"unanswered {calls - outputs}"


def call_ids(items: list[dict[str, Any]]) -> set[str]:
    return {i["call_id"] for i in items if i.get("type") == "function_call"}


async def _append(into: list[Any], value: Awaitable[Any]) -> None:
    into.append(await value)


def adapter_c1(e: Entry) -> bool:
    """Call ``c1`` or its output, as the Responses adapter names them."""
    return e.id == "c1" or (e.kind is Kind.TOOL_OUTPUT and e.refs == ("c1",))


def make_agent(model: ScriptedModel, scenario: Scenario, buf: Any) -> Agent[Any]:
    scenario.buf = buf

    @function_tool
    async def lookup(q: str) -> str:
        """Look something up."""
        return await scenario.lookup(q)

    return Agent(name="a", instructions="Be terse.", model=model, tools=[lookup])


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # the SDK's runner
async def test_session_and_filter_end_to_end(tmp_path: Path) -> None:
    """Two parallel calls after a signed reasoning item; a pinned reader defers
    a prune that is then applied; the pruned call re-runs without crashing;
    the reasoning item reaches the model unchanged; a reopened SQLite log
    continues the session; every input answers every call. (asyncio only.)"""
    path = tmp_path / "oa.sqlite"
    model = ScriptedModel(
        [
            [REASONING, call("c1", "a"), call("c2", "b")],
            [text("m1", "a and b found.")],
            [call("c3", "a")],
            [text("m2", "a found again.")],
            [text("m3", "Still here.")],
        ]
    )
    scenario = Scenario(adapter_c1)
    async with open_buffer(log=SQLiteLog(path)) as buf:
        session = QuiesceSession("s1", buf)
        agent = make_agent(model, scenario, buf)
        cfg = RunConfig(call_model_input_filter=quiesce_input_filter(buf, pruner=scenario.pruner))
        await Runner.run(agent, "find a and b", session=session, run_config=cfg)
        assert call_ids(model.inputs[1]) == {"c1", "c2"}
        sent = model.inputs[1][1]
        assert {k: sent[k] for k in ("id", "type", "encrypted_content", "summary")} == {
            "id": "rs_1",
            "type": "reasoning",
            "encrypted_content": REASONING.encrypted_content,
            "summary": [{"type": "summary_text", "text": "Two lookups."}],
        }
        await scenario.run_while_pinned(
            lambda: Runner.run(agent, "again", session=session, run_config=cfg)
        )
        # Input 3: the prune was deferred (a reader held c1): still shown, marked stale.
        assert "c1" in call_ids(model.inputs[2])
        assert "[quiesce: stale" in json.dumps(model.inputs[2])
        # Input 4: applied; the re-run c3 was recorded, not refused.
        assert call_ids(model.inputs[3]) == {"c2", "c3"}
        assert "[quiesce: removed from this context]" in json.dumps(model.inputs[3])
        # The pruned pair is gone from the session as well.
        assert call_ids(await session.get_items()) == {"c2", "c3"}
        version = buf.version

    buf.sink.close()  # one writer per log file (LogLocked): close before reopening
    async with open_buffer(log=SQLiteLog(path)) as buf2:
        assert buf2.version == version
        session2 = QuiesceSession("s1", buf2)
        agent2 = make_agent(model, scenario, buf2)
        cfg2 = RunConfig(call_model_input_filter=quiesce_input_filter(buf2))
        result = await Runner.run(agent2, "still there?", session=session2, run_config=cfg2)
        assert result.final_output == "Still here."
        last = model.inputs[-1]
        assert call_ids(last) == {"c2", "c3"}
        # the removal note ends the window (a removal leaves the prefix as it was)
        assert last[-1]["role"] == "system" and last[-1]["content"].startswith("[quiesce:")
        assert last[-2] == {"content": "still there?", "role": "user"}
        # Nothing was appended twice by the filter over the session's items.
        texts = [i.get("content") for i in last if i.get("role") == "user"]
        assert texts == ["find a and b", "again", "still there?"]

    for items in model.inputs:
        answered(items)
    reasoning = [i for items in model.inputs for i in items if i.get("type") == "reasoning"]
    assert reasoning and all(
        r["encrypted_content"] == REASONING.encrypted_content for r in reasoning
    )
    assert all(r == reasoning[0] for r in reasoning)


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # the SDK's runner
async def test_concurrent_runs_lose_nothing() -> None:
    """Two runs on one session at once: every item of both is kept, and
    pop_item removes the newest with a tombstone naming the host — a user
    message too (the host's retraction). (asyncio only.)"""
    model = ScriptedModel([[text("x1", "one")], [text("x2", "two")]])
    async with open_buffer() as buf:
        session = QuiesceSession("s2", buf)
        agent = make_agent(model, Scenario(), buf)
        async with anyio.create_task_group() as tg:
            tg.start_soon(functools.partial(Runner.run, agent, "first", session=session))
            tg.start_soon(functools.partial(Runner.run, agent, "second", session=session))
        items = await session.get_items()
        assert len(items) == 4
        assert {i.get("content") for i in items if i.get("role") == "user"} == {"first", "second"}
        extra = [text(f"p{i}", f"extra {i}").model_dump(exclude_unset=True) for i in (1, 2)]
        await session.add_items(extra)  # type: ignore[arg-type]
        async with anyio.create_task_group() as tg:  # two pops at once: two items
            popped: list[Any] = []
            for _ in range(2):
                tg.start_soon(lambda: _append(popped, session.pop_item()))
        assert sorted(map(json.dumps, popped)) == sorted(map(json.dumps, extra))
        assert await session.get_items() == items
        # A popped item keeps its tombstone: adding it back under its own id
        # is refused whole (the SDK's rewind restore is best effort and logs it).
        version = buf.version
        with pytest.raises(DuplicateEntry):
            await session.add_items(popped)
        assert buf.version == version
        tombs = list(buf.tombstones.values())
        assert len(tombs) == 2
        assert {(t.actor, t.reason) for t in tombs} == {("host", "pop_item")}
        while (await session.get_items(limit=1))[0].get("role") == "assistant":
            await session.pop_item()
        kept = await session.get_items()
        user = await session.pop_item()
        assert user == kept[-1] and user is not None and user.get("role") == "user"
        assert await session.get_items() == kept[:-1]
        tomb = max(buf.tombstones.values(), key=lambda t: t.version)
        assert (tomb.actor, tomb.kind) == ("host", Kind.INSTRUCTION)
        buf._check()


USERS = [{"content": w, "role": "user"} for w in ("first", "second", "third")]


@pytest.mark.anyio
async def test_pop_item_retracts_user_messages() -> None:
    """pop_item is the host's undo: a user message (``INSTRUCTION``, protected
    and immutable) is retracted — staged while a reader pins it, left out of
    get_items at once, tombstoned as the host's when the reader leaves, and
    logged as ``retracted``. Two concurrent pops take turns (two different
    items). (asyncio and trio: the session alone, no runner.)"""
    buf = Buffer()
    session = QuiesceSession("s4", buf)
    await session.add_items(USERS)  # type: ignore[arg-type]
    with buf.snapshot() as reader:
        popped: list[Any] = []
        async with anyio.create_task_group() as tg:
            for _ in range(2):
                tg.start_soon(lambda: _append(popped, session.pop_item()))
        assert sorted(p["content"] for p in popped) == ["second", "third"]
        assert await session.get_items() == USERS[:1]
        assert len(reader) == 3 and not buf.tombstones  # the reader still sees them
        buf._check()
    tombs = sorted(buf.tombstones.values(), key=lambda t: t.id)
    assert [(t.actor, t.reason, t.kind) for t in tombs] == [
        ("host", "pop_item", Kind.INSTRUCTION)
    ] * 2
    edits = [r for r in buf.log if r.op == "edit"]
    assert [r.actor for r in edits] == ["host", "host"]
    assert sorted(i for r in edits for i in r.detail["retracted"]) == sorted(t.id for t in tombs)
    assert all(
        r.detail["plan"]["override"]["reason"]
        == "pop_item: the host's undo, by quiesce.integrations.openai_agents"
        for r in edits
    )
    removed = [i for r in buf.log if r.op == "remove" for i in r.detail["retracted"]]
    assert sorted(removed) == sorted(t.id for t in tombs)
    assert await session.pop_item() == USERS[0]
    assert await session.pop_item() is None
    assert await session.get_items() == []
    buf._check(expect_no_pins=True)


@pytest.mark.anyio
async def test_pop_item_never_leaves_a_dangling_reference() -> None:
    """An item another entry still cites is not removed, even by the host:
    ProtectedEntry, nothing changes. (asyncio and trio: no runner.)"""
    buf = Buffer()
    session = QuiesceSession("s5", buf)
    await session.add_items(USERS[:1])  # type: ignore[arg-type]
    (item,) = buf.head().entries()
    buf.append(Entry("note", Kind.REASONING, "the user asked first", refs=(item.id,)))
    version, items = buf.version, await session.get_items()
    with pytest.raises(
        ProtectedEntry,
        match=rf"^pop_item: the buffer refuses to remove the newest item {item.id!r} "
        r"\(REFERENCED\)$",
    ):
        await session.pop_item()
    assert await session.get_items() == items
    assert not buf.tombstones and not buf.staged() and buf.version == version
    buf._check(expect_no_pins=True)


@pytest.mark.anyio
async def test_bad_item_is_refused_whole() -> None:
    """An item the adapter cannot represent names its index and field; nothing
    is appended. (asyncio and trio: no runner.)"""
    buf = Buffer()
    session = QuiesceSession("s3", buf)
    with pytest.raises(
        InvalidType, match=r"^openai-agents: item 1: call_id must be a str, not NoneType$"
    ):
        await session.add_items(
            [{"role": "user", "content": "hi"}, {"type": "function_call", "name": "f"}]  # type: ignore[list-item]
        )
    assert buf.version == 0
    assert await session.get_items() == []


def test_missing_extra_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the Agents SDK installed, importing the integration names the extra."""
    monkeypatch.setitem(sys.modules, "agents.items", None)
    monkeypatch.delitem(sys.modules, "quiesce.integrations.openai_agents", raising=False)
    with pytest.raises(ImportError, match=r'pip install "quiesce\[openai-agents\]"'):
        importlib.import_module("quiesce.integrations.openai_agents")
