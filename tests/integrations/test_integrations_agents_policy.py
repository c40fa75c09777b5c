"""The OpenAI Agents SDK's own context tools, held to the policy.

``ToolOutputTrimmer`` (a ``call_model_input_filter`` that replaces old tool
outputs by a preview), the SDK's ``OpenAIResponsesCompactionSession`` (which
replaces a session's history by the user messages and one ``compaction``
item) and an input filter that drops old items all shorten what the model
sees. With quiesce in the loop (``quiesce_input_filter`` after the SDK's
tool, or a ``QuiesceSession`` under the compaction session), a negative
result or a constraint they paraphrase or drop stays in the rendered
window, the removal is escalated, and what is not protected follows the
tool (rewritten, pruned, or summarized into the compaction item). Each
setup runs against a control without quiesce, where the SDK's tool loses
the protected item.

No network: the model is a ``Model`` subclass that records its input; the
compaction API is answered by the SDK's own ``AsyncOpenAI`` client over an
``httpx`` transport serving the documented ``response.compaction`` body.
The SDK's runner is asyncio-only, so these tests run on **asyncio only**.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx
import pytest
from agents import Agent, ModelResponse, RunConfig, Runner, SQLiteSession, Usage
from agents.extensions import ToolOutputTrimmer
from agents.memory import OpenAIResponsesCompactionSession
from agents.models.interface import Model
from agents.run_config import CallModelData, ModelInputData
from openai import AsyncOpenAI
from openai.types.responses import ResponseOutputMessage, ResponseOutputText

from quiesce import Buffer, EscalationKind, open_buffer
from quiesce.integrations.openai_agents import QuiesceSession, quiesce_input_filter

NEGATIVE = "failed: the disk probe timed out; " + "trace line " * 80
ORDINARY = "disk usage report: " + "sda1 42% " * 80
CONSTRAINT = "never delete anything under /data"
#: the reason of a filter's drop, as the stale note of a deferred removal names it
DROPPED = "removed from the history given to quiesce.integrations.openai_agents"


@pytest.fixture
def anyio_backend() -> str:
    """The Agents SDK's runner is asyncio-only."""
    return "asyncio"


@pytest.fixture(autouse=True)
def _no_tracing() -> None:
    from agents import set_tracing_disabled

    set_tracing_disabled(True)


class Recorder(Model):
    """A scripted model: answers "ok", records the input of every call."""

    def __init__(self) -> None:
        self.inputs: list[list[Any]] = []

    async def get_response(self, system_instructions: Any, input: Any, *a: Any, **k: Any) -> Any:
        self.inputs.append(list(input) if isinstance(input, list) else [input])
        msg = ResponseOutputMessage(
            id=f"msg_{len(self.inputs)}",
            type="message",
            role="assistant",
            status="completed",
            content=[ResponseOutputText(type="output_text", text="ok", annotations=[])],
        )
        return ModelResponse(output=[msg], usage=Usage(), response_id=None)

    def stream_response(self, *a: Any, **k: Any) -> Any:
        raise NotImplementedError


def history() -> list[dict[str, Any]]:
    """A constraint, two old tool exchanges (a negative result and an
    ordinary one), then two more user turns (the trimmer keeps the last two)."""
    return [
        {"role": "user", "content": CONSTRAINT},
        {"type": "function_call", "call_id": "c1", "name": "probe", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": NEGATIVE},
        {"type": "function_call", "call_id": "c2", "name": "usage", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c2", "output": ORDINARY},
        {"role": "user", "content": "what happened?"},
        {"role": "assistant", "content": "it was slow"},
        {"role": "user", "content": "and now?"},
    ]


def output_of(items: list[Any], call_id: str) -> str | None:
    for item in items:
        output = isinstance(item, dict) and item.get("type") == "function_call_output"
        if output and item.get("call_id") == call_id:
            return str(item["output"])
    return None


def texts(items: list[Any]) -> list[str]:
    out = []
    for item in items:
        if isinstance(item, dict) and isinstance(item.get("content"), str):
            out.append(item["content"])
    return out


def refused(buf: Buffer) -> list[Any]:
    return [e for e in buf.drain_escalations() if e.kind is EscalationKind.REFUSED_EDIT]


def after(first: Any, then: Any) -> Any:
    """``then`` run on what ``first`` (the SDK's tool) made of the input."""

    async def composed(data: CallModelData[Any]) -> ModelInputData:
        shortened = first(data)
        return await then(CallModelData(model_data=shortened, agent=data.agent, context=None))

    return composed


class TestToolOutputTrimmer:
    """The SDK's ``ToolOutputTrimmer`` placed before ``quiesce_input_filter``."""

    @pytest.mark.anyio
    async def test_control_trims_the_negative_result(self) -> None:
        """Without quiesce the model gets a preview of the negative result."""
        model = Recorder()
        config = RunConfig(call_model_input_filter=ToolOutputTrimmer())
        await Runner.run(Agent(name="a", model=model), history(), run_config=config)
        sent = output_of(model.inputs[0], "c1")
        assert sent is not None and sent.startswith("[Trimmed: probe output")

    @pytest.mark.anyio
    async def test_negative_result_stays_whole_and_the_rewrite_is_escalated(self) -> None:
        """With quiesce after the trimmer, the negative result reaches the
        model whole (its rewrite refused and escalated), the ordinary output
        follows the trimmer (a logged ``Rewrite``), every call is answered."""
        buf = Buffer()
        model = Recorder()
        # the first call syncs the history as the SDK holds it, the second
        # call's input comes through the trimmer
        await Runner.run(
            Agent(name="a", model=model),
            history(),
            run_config=RunConfig(call_model_input_filter=quiesce_input_filter(buf)),
        )
        trimmed = after(ToolOutputTrimmer(), quiesce_input_filter(buf))
        config = RunConfig(call_model_input_filter=trimmed)
        await Runner.run(Agent(name="a", model=model), history(), run_config=config)
        sent = model.inputs[-1]
        assert output_of(sent, "c1") == NEGATIVE
        ordinary = output_of(sent, "c2")
        assert ordinary is not None and ordinary.startswith("[Trimmed: usage output")
        assert CONSTRAINT in texts(sent)
        escalations = refused(buf)
        assert escalations, "the refused rewrite of the negative result is escalated"


class TestDroppingFilter:
    """An input filter that keeps only the newest items, before quiesce, on
    an in-process buffer and on a shared one: the same diff."""

    @staticmethod
    def newest(n: int) -> Any:
        def keep(data: CallModelData[Any]) -> ModelInputData:
            return ModelInputData(input=data.model_data.input[-n:], instructions=None)

        return keep

    @pytest.mark.anyio
    async def test_control_loses_the_constraint(self) -> None:
        model = Recorder()
        config = RunConfig(call_model_input_filter=self.newest(3))
        await Runner.run(Agent(name="a", model=model), history(), run_config=config)
        assert CONSTRAINT not in texts(model.inputs[0])

    @pytest.mark.anyio
    async def test_local_buffer_keeps_the_protected_items(self) -> None:
        async with open_buffer() as buf:
            kept = await self._run(buf)
        assert CONSTRAINT in kept

    @pytest.mark.anyio
    async def test_a_drop_deferred_by_a_reader_is_shown_stale_then_removed(self) -> None:
        """A reader pinning the version before the drop defers its prune (as
        it defers a pruner's: ``test_session_and_filter_end_to_end``): that
        turn the ordinary exchange is shown with the stale note naming the
        drop, and once the reader left and the removal landed, the next turn
        leaves it out and lists the removal."""
        async with open_buffer() as buf:
            model = Recorder()
            agent = Agent(name="a", model=model)
            quiesce = quiesce_input_filter(buf, conversation=lambda data: "c")
            await Runner.run(
                agent, history(), run_config=RunConfig(call_model_input_filter=quiesce)
            )
            config = RunConfig(call_model_input_filter=after(self.newest(3), quiesce))
            with buf.snapshot():  # a reader in flight
                await Runner.run(agent, history(), run_config=config)
                assert buf.staged(), "the drop waits for the reader"
            deferred = output_of(model.inputs[-1], "c2")
            assert deferred is not None and deferred.startswith("[quiesce: stale at version")
            assert DROPPED in deferred and deferred.endswith(ORDINARY)
            await buf.quiesce()  # the reader left: the removal lands
            assert not buf.staged()
            await Runner.run(agent, history(), run_config=config)
            sent = model.inputs[-1]
        assert output_of(sent, "c2") is None
        assert not any(i.get("call_id") == "c2" for i in sent if isinstance(i, dict))
        assert "[quiesce: removed from this context]" in json.dumps(sent)
        assert CONSTRAINT in texts(sent) and output_of(sent, "c1") is not None

    async def _run(self, buf: Any, *, deferrable: bool = False) -> list[str]:
        """The filter names the conversation (``conversation=``): without it,
        an input whose first item was dropped would be another conversation.
        ``deferrable``: readers this test does not control may hold the
        buffer (a shared one's grace floor), so the drop may be deferred."""
        model = Recorder()
        agent = Agent(name="a", model=model)
        quiesce = quiesce_input_filter(buf, conversation=lambda data: "c")
        await Runner.run(agent, history(), run_config=RunConfig(call_model_input_filter=quiesce))
        config = RunConfig(call_model_input_filter=after(self.newest(3), quiesce))
        await Runner.run(agent, history(), run_config=config)
        sent = model.inputs[-1]
        # a negative result and its call stay (the refused removal marks it stale)
        negative = output_of(sent, "c1")
        assert negative is not None and negative.endswith(NEGATIVE)
        assert any(i.get("call_id") == "c1" and i.get("type") == "function_call" for i in sent)
        # the ordinary exchange follows the filter: its prune is applied at
        # once, or deferred while a reader may still hold the version before
        # it, and that turn the exchange is shown with the stale note naming
        # the drop. On a shared buffer "a reader" includes every member's
        # horizon as its last lease heartbeat published it (the grace floor):
        # a heartbeat late under load defers the removal to the next one.
        ordinary = output_of(sent, "c2")
        if ordinary is not None and deferrable:
            assert ordinary.startswith("[quiesce: stale at version") and DROPPED in ordinary
            with buf.snapshot() as snap:
                live = any(e.body == ORDINARY for e in snap)
            assert not live or buf.staged(), "shown only while its removal is staged"
        else:
            assert ordinary is None
        return texts(sent)

    @pytest.mark.anyio
    async def test_shared_buffer_diffs_dropped_items_like_the_local_one(self, pg_dsn: str) -> None:
        """On a ``SharedBuffer`` the filter diffs the dropped items too (it
        only appended before): the same window as on the local buffer, the
        removal escalated. The grace floor may defer the removal (see
        ``_run``): it lands once a heartbeat moved the floor past it."""
        from quiesce import open_shared_buffer

        async with open_shared_buffer(pg_dsn, "agents-drop", lease=16.0, timeout=30.0) as shared:
            kept = await self._run(shared, deferrable=True)
            assert CONSTRAINT in kept
            with anyio.fail_after(30):  # bounded: the next heartbeats move the floor
                while shared.staged():
                    await shared.quiesce()
                    await anyio.sleep(0.01)
            assert shared.tombstones  # the dropped answer was pruned
            assert shared.stats().local.escalations >= 1  # the kept ones' refusal


COMPACTED_ID = "cmp_1"


def compaction_api(requests: list[dict[str, Any]]) -> AsyncOpenAI:
    """The SDK's client, its ``responses.compact`` answered offline with the
    documented body: every user message of the input, then one compaction item."""

    def answer(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        requests.append(body)
        users = [
            {
                "type": "message",
                "id": f"msg_u{i}",
                "role": "user",
                "status": "completed",
                "content": [{"type": "input_text", "text": item["content"]}],
            }
            for i, item in enumerate(body["input"])
            if item.get("role") == "user" and isinstance(item.get("content"), str)
        ]
        compaction = {"type": "compaction", "id": COMPACTED_ID, "encrypted_content": "b3BhcXVl"}
        usage = {
            "input_tokens": 10,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 2,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 12,
        }
        return httpx.Response(
            200,
            json={
                "id": "resp_c",
                "created_at": 0,
                "object": "response.compaction",
                "output": [*users, compaction],
                "usage": usage,
            },
        )

    transport = httpx.MockTransport(answer)
    return AsyncOpenAI(api_key="offline", http_client=httpx.AsyncClient(transport=transport))


class TestCompactionSession:
    """``OpenAIResponsesCompactionSession`` over a ``QuiesceSession``: the
    compaction item is a ``Summarize`` of what it replaced, refused for the
    protected items, which stay."""

    async def _compact(self, underlying: Any) -> tuple[list[Any], list[dict[str, Any]]]:
        requests: list[dict[str, Any]] = []
        session = OpenAIResponsesCompactionSession(
            "s1", underlying, client=compaction_api(requests)
        )
        await session.add_items(history())  # type: ignore[arg-type]
        await session.run_compaction({"force": True})
        return list(await session.get_items()), requests

    @pytest.mark.anyio
    async def test_control_loses_the_negative_result(self) -> None:
        """Over the SDK's ``SQLiteSession``, the history is the user messages
        and the compaction item: the negative result is gone."""
        underlying = SQLiteSession("s1")
        items, requests = await self._compact(underlying)
        assert len(requests) == 1
        assert output_of(items, "c1") is None
        assert [i.get("type") for i in items][-1] == "compaction"

    @pytest.mark.anyio
    async def test_protected_items_stay_and_the_rest_is_summarized(self) -> None:
        buf = Buffer()
        items, requests = await self._compact(QuiesceSession("s1", buf))
        assert len(requests) == 1
        # the negative result and the call it answers stay; the constraint too
        assert output_of(items, "c1") == NEGATIVE
        assert any(i.get("type") == "function_call" and i.get("call_id") == "c1" for i in items)
        assert CONSTRAINT in [
            p["text"] if isinstance(p, dict) else p
            for i in items
            if i.get("role") == "user"
            for p in (i["content"] if isinstance(i["content"], list) else [i["content"]])
        ]
        # the ordinary exchange and the answer are summarized into the compaction item
        assert output_of(items, "c2") is None
        assert "it was slow" not in texts(items)
        assert [i.get("id") for i in items if i.get("type") == "compaction"] == [COMPACTED_ID]
        with buf.snapshot() as snap:
            assert snap[COMPACTED_ID].content["type"] == "compaction"
            assert snap.tombstones  # what the compaction item replaced is removed
        assert refused(buf), "the refused summary of the protected items is escalated"
