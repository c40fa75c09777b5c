"""A framework agent in its own process, on one conversation of a shared buffer.

Started from the forkserver of ``tests/_shared_child.py`` (``context()``: a
fresh process, as on another host, sharing nothing with the test process) by
``tests/integrations/test_integrations_shared.py``. It joins the shared buffer
``open_shared_buffer(dsn, CONVERSATION)`` and runs one agent on it, on
asyncio (the frameworks' runners are asyncio-only):

* ``"agents"`` — an OpenAI Agents SDK ``Agent`` with the SDK's own test model
  (``agents.testing.ScriptedModel``) and a ``QuiesceSession``;
* ``"langgraph"`` — a LangChain ``create_agent`` (LangGraph) with LangChain's
  fake chat model and a ``QuiesceMiddleware``, its thread checkpointed.

Both take an :class:`Armed` pruner. Commands come over a pipe, one at a
time: ``(name, args)`` → ``("ok", value)`` or ``("error", type, message)``.
"""

from __future__ import annotations

import os
import time
from multiprocessing.connection import Connection
from typing import Any

import anyio

from quiesce import EditPlan, Kind, Prune, Snapshot, open_shared_buffer
from quiesce._shared import SharedBuffer

#: the conversation both agents share (the Agents SDK session id and the
#: LangGraph thread id)
CONVERSATION = "conv-1"


class Armed:
    """A pruner that, once armed with a text, proposes removing the
    assistant entries containing it (then disarms)."""

    def __init__(self) -> None:
        self.target: str | None = None
        self.proposed: list[str] = []

    async def __call__(self, snap: Snapshot, /) -> EditPlan | None:
        await anyio.lowlevel.checkpoint()
        target = self.target
        if target is None:
            return None
        ids = [e.id for e in snap if target in e.body and e.kind is Kind.REASONING]
        if not ids:
            return None
        self.target = None
        self.proposed.extend(ids)
        return EditPlan([Prune(i) for i in ids], reason="no longer needed", actor="pruner")


class AgentsSide:
    """An Agents SDK agent whose session is the shared conversation."""

    def __init__(self, shared: SharedBuffer, pruner: Armed) -> None:
        from agents import Agent, set_tracing_disabled
        from agents.testing import ScriptedModel

        from quiesce.integrations.openai_agents import QuiesceSession

        set_tracing_disabled(True)
        self.model = ScriptedModel()
        self.agent = Agent(name="alice-agent", model=self.model, instructions="Be brief.")
        self.session = QuiesceSession(CONVERSATION, shared, pruner=pruner)
        self.turns = 0

    async def turn(self, text: str, answer: str) -> dict[str, Any]:
        from agents import Runner
        from agents.testing import assistant_message

        self.turns += 1
        self.model.enqueue([assistant_message(answer, item_id=f"msg_alice_{self.turns}")])
        result = await Runner.run(self.agent, text, session=self.session)
        call = self.model.last_call
        assert call is not None
        items = call.input if isinstance(call.input, list) else [call.input]
        return {"seen": [_item_text(i) for i in items], "output": str(result.final_output)}


def _item_text(item: Any) -> str:
    """The text of one Responses input item, as the model receives it."""
    item = dict(item) if not isinstance(item, str) else {"content": item}
    content = item.get("content", item.get("output", ""))
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content)


class LangGraphSide:
    """A LangChain agent (LangGraph) whose thread is the shared conversation."""

    def __init__(self, shared: SharedBuffer, pruner: Armed) -> None:
        from langchain.agents import create_agent
        from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
        from langchain_core.messages import BaseMessage
        from langgraph.checkpoint.memory import InMemorySaver

        from quiesce.integrations.langchain import QuiesceMiddleware

        class Recording(FakeMessagesListChatModel):
            """LangChain's fake list model, recording each request."""

            requests: list[list[BaseMessage]] = []  # noqa: RUF012 (a pydantic field)

            def _generate(self, messages: list[BaseMessage], *args: Any, **kw: Any) -> Any:
                self.requests.append(list(messages))
                return super()._generate(messages, *args, **kw)

        self.model = Recording(responses=[])
        self.model.requests = []
        self.agent = create_agent(
            model=self.model,
            system_prompt="Be brief.",
            middleware=[QuiesceMiddleware(shared, pruner=pruner)],
            checkpointer=InMemorySaver(),
        )
        self.turns = 0

    async def turn(self, text: str, answer: str) -> dict[str, Any]:
        from langchain_core.messages import AIMessage, HumanMessage

        self.turns += 1
        self.model.responses.append(AIMessage(answer))
        self.model.i = len(self.model.responses) - 1  # the fake model's cursor
        cfg = {"configurable": {"thread_id": CONVERSATION}}
        out = await self.agent.ainvoke({"messages": [HumanMessage(text)]}, cfg)
        seen = [_lc_text(m.content) for m in self.model.requests[-1]]
        return {"seen": seen, "output": _lc_text(out["messages"][-1].content)}


def _lc_text(content: Any) -> str:
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) if isinstance(p, dict) else str(p) for p in content)
    return str(content)


def summary(shared: SharedBuffer) -> dict[str, Any]:
    head = shared.head()
    return {
        "role": shared.role,
        "version": head.number,
        "entries": [[e.id, e.body] for e in head.entries()],
        "tombstones": sorted(head.tombs.by_id),
        "staged": sorted(shared.staged()),
    }


async def _serve(conn: Connection, shared: SharedBuffer, side: Any, pruner: Armed) -> None:
    pins: list[Snapshot] = []
    while True:
        name, args = await anyio.to_thread.run_sync(conn.recv, abandon_on_cancel=True)
        try:
            value: Any = None
            if name == "exit":
                for snap in pins:
                    snap.__exit__(None, None, None)
                conn.send(("ok", None))
                return
            elif name == "turn":
                value = await side.turn(*args)
            elif name == "arm":
                pruner.target = args
            elif name == "proposed":
                value = list(pruner.proposed)
            elif name == "pin":
                snap = shared.snapshot().__enter__()
                pins.append(snap)
                value = [snap.version, [[e.id, e.body] for e in snap]]
            elif name == "read_pin":
                value = [[e.id, e.body] for e in pins[-1]]
            elif name == "unpin":
                now = time.time()
                for snap in pins:
                    snap.__exit__(None, None, None)
                pins.clear()
                value = now
            elif name == "summary":
                value = summary(shared)
            elif name == "check":
                shared._check()
                value = True
            else:
                raise ValueError(f"unknown command {name!r}")
            conn.send(("ok", value))
        except Exception as exc:
            conn.send(("error", type(exc).__name__, str(exc)))


async def _main(dsn: str, framework: str, conn: Connection, options: dict[str, Any]) -> None:
    async with open_shared_buffer(dsn, CONVERSATION, **options) as shared:
        pruner = Armed()
        side = (AgentsSide if framework == "agents" else LangGraphSide)(shared, pruner)
        conn.send(("ok", (shared.role, os.getpid())))
        await _serve(conn, shared, side, pruner)


#: What each side imports, done before the event loop starts: imported inside
#: it (the sides' constructors), the several seconds a loaded machine takes
#: would block the loop, and the lease heartbeats with it, while the member
#: holds the lease (a 16 s lease was once seen lost that way: both agents
#: then reported themselves sequencer).
FRAMEWORK_MODULES = {
    "agents": ["agents", "agents.testing", "quiesce.integrations.openai_agents"],
    "langgraph": [
        "langchain.agents",
        "langchain_core.language_models.fake_chat_models",
        "langchain_core.messages",
        "langgraph.checkpoint.memory",
        "quiesce.integrations.langchain",
    ],
}


def child(dsn: str, framework: str, conn: Connection, options: dict[str, Any]) -> None:
    """The process target: one agent on the shared conversation, on asyncio
    (its framework imported first, outside the loop)."""
    import importlib

    try:
        for name in FRAMEWORK_MODULES[framework]:
            importlib.import_module(name)
        anyio.run(_main, dsn, framework, conn, options, backend="asyncio")
    except BaseException as exc:
        try:
            conn.send(("error", type(exc).__name__, str(exc)))
        except OSError:
            pass
        raise
