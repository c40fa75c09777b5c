"""The ``frameworks`` section: what quiesce adds to one agent turn, per framework.

Each integration runs end to end with its framework's own test model, over
histories of 10, 100, 1,000 and 10,000 messages (the quick run: 10 and
100), against the framework's own default setup:

* LangChain: ``create_agent`` with ``InMemorySaver`` and a ``thread_id``,
  ``FakeMessagesListChatModel``; ``QuiesceMiddleware`` / no middleware. A
  turn is one ``invoke`` with one new user message.
* pydantic-ai: ``Agent`` with a ``FunctionModel``; ``ProcessHistory(
  QuiesceHistoryProcessor)`` / no capability. A turn is one ``run`` with the
  previous run's ``all_messages()`` as history.
* OpenAI Agents SDK: ``Runner.run`` with a scripted ``Model``;
  ``QuiesceSession`` / ``SQLiteSession`` (in memory). A turn is one run.
* AutoGen: ``AssistantAgent`` with ``ReplayChatCompletionClient``;
  ``QuiesceChatCompletionContext`` / the default unbounded context. A turn is
  one ``run``.

What it keeps true: both sides of a ratio run the same script over the same
history, alternately, repetition by repetition (paired ratios), on CPU time
of this process (the machine is shared: wall time would measure the
neighbours), the collector off while timing unless ``--gc`` (the suite's
method). The history grows by one exchange per turn on both sides alike.
The quiesce side uses an in-memory ``Buffer`` (the integrations' default);
the loop-stall figures use ``open_buffer(log=SQLiteLog(...))`` and
LangChain ``ainvoke`` turns at the goal size: quiesce's own longest stretch
on the loop (the longest step of its hook's coroutine between two yields to
the loop, the model's own steps not counted; the sum of its steps a turn is
in the note), and a heartbeat task on the same loop waking every 0.5 ms that records its
longest late wake-up with quiesce and without (LangGraph's own steps hold
the loop too: that is the floor).

Goals: per-turn ratio ≤ 1.1× at 1,000 messages for each framework (a quick run:
at 100, its largest size), and the longest stall with quiesce ≤ 2 ms. A
framework that is not installed gives ``SKIP`` rows.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import statistics
import tempfile
import time
import types
from collections.abc import Callable, Coroutine, Generator, Iterator
from pathlib import Path
from typing import Any

from .lib import CaseResult, Config, Goal, SectionResult, paired_ratio, ratio_goal, section

__all__ = ["bench_frameworks"]

SECTION = "frameworks"
SIZES_FULL = (10, 100, 1_000, 10_000)
SIZES_QUICK = (10, 100)
GOAL_N = 1_000
GOAL_RATIO = 1.1
GOAL_STALL_MS = 2.0
TICK = 0.0005
#: repetition factor for the histories up to the goal size (full runs)
SMALL_REPEAT = 4

Turn = Callable[[], None]
#: (history size, with quiesce) -> (one turn, cleanup)
Maker = Callable[[int, bool], tuple[Turn, Callable[[], None]]]


def _text(i: int, who: str) -> str:
    return f"{who} message {i}: " + "lorem ipsum dolor sit amet " * 6


# -- LangChain ----------------------------------------------------------------


def _langchain(n: int, quiesce: bool) -> tuple[Turn, Callable[[], None]]:
    from langchain.agents import create_agent
    from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
    from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
    from langgraph.checkpoint.memory import InMemorySaver

    from quiesce import Buffer
    from quiesce.integrations.langchain import QuiesceMiddleware

    class Model(FakeMessagesListChatModel):
        def bind_tools(self, tools: Any, **kwargs: Any) -> Model:
            return self

    model = Model(responses=[AIMessage(content="ok")])
    middleware = [QuiesceMiddleware(Buffer())] if quiesce else []
    agent: Any = create_agent(
        model=model, tools=[], middleware=middleware, checkpointer=InMemorySaver()
    )
    cfg: Any = {"configurable": {"thread_id": "bench"}}
    history: list[BaseMessage] = []
    for i in range(n // 2):
        history.append(HumanMessage(_text(i, "user"), id=f"h{i}"))
        history.append(AIMessage(content=_text(i, "assistant"), id=f"a{i}"))
    agent.invoke({"messages": history}, cfg)
    count = iter(range(10**9))

    def turn() -> None:
        agent.invoke({"messages": [HumanMessage(f"next {next(count)}")]}, cfg)

    return turn, lambda: None


# -- pydantic-ai --------------------------------------------------------------


def _pydantic_ai(n: int, quiesce: bool) -> tuple[Turn, Callable[[], None]]:
    from pydantic_ai import Agent
    from pydantic_ai.capabilities import ProcessHistory
    from pydantic_ai.messages import (
        ModelMessage,
        ModelRequest,
        ModelResponse,
        TextPart,
        UserPromptPart,
    )
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from quiesce import Buffer
    from quiesce.integrations.pydantic_ai import QuiesceHistoryProcessor

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart("ok")])

    caps = [ProcessHistory(QuiesceHistoryProcessor(Buffer()))] if quiesce else []
    agent = Agent(FunctionModel(reply), capabilities=caps)
    history: list[ModelMessage] = []
    for i in range(n // 2):
        history.append(ModelRequest(parts=[UserPromptPart(_text(i, "user"))]))
        history.append(ModelResponse(parts=[TextPart(_text(i, "assistant"))]))
    runner = asyncio.Runner()
    state = {"history": runner.run(agent.run("start", message_history=history)).all_messages()}

    def turn() -> None:
        result = runner.run(agent.run("next", message_history=state["history"]))
        state["history"] = result.all_messages()

    return turn, runner.close


# -- OpenAI Agents SDK --------------------------------------------------------


def _openai_agents(n: int, quiesce: bool) -> tuple[Turn, Callable[[], None]]:
    from agents import Agent, ModelResponse, Runner, SQLiteSession, Usage, set_tracing_disabled
    from agents.models.interface import Model
    from openai.types.responses import ResponseOutputMessage, ResponseOutputText

    from quiesce import Buffer
    from quiesce.integrations.openai_agents import QuiesceSession

    set_tracing_disabled(True)
    count = iter(range(10**9))

    def message(body: str) -> ResponseOutputMessage:
        return ResponseOutputMessage(
            id=f"msg_{next(count)}",
            type="message",
            role="assistant",
            status="completed",
            content=[ResponseOutputText(type="output_text", text=body, annotations=[])],
        )

    class Scripted(Model):
        async def get_response(self, *args: Any, **kw: Any) -> Any:
            return ModelResponse(output=[message("ok")], usage=Usage(), response_id=None)

        def stream_response(self, *args: Any, **kw: Any) -> Any:
            raise NotImplementedError

    agent = Agent(name="bench", model=Scripted())
    session: Any = QuiesceSession("bench", Buffer()) if quiesce else SQLiteSession("bench")
    items: list[Any] = []
    for i in range(n // 2):
        items.append({"role": "user", "content": _text(i, "user")})
        items.append(message(_text(i, "assistant")).model_dump(exclude_unset=True))
    runner = asyncio.Runner()
    runner.run(session.add_items(items))

    def turn() -> None:
        runner.run(Runner.run(agent, "next", session=session))

    def close() -> None:
        if not quiesce:
            session.close()
        runner.close()

    return turn, close


# -- AutoGen ------------------------------------------------------------------


def _autogen(n: int, quiesce: bool) -> tuple[Turn, Callable[[], None]]:
    from autogen_agentchat.agents import AssistantAgent
    from autogen_core.model_context import UnboundedChatCompletionContext
    from autogen_core.models import AssistantMessage, LLMMessage, ModelFamily, UserMessage
    from autogen_ext.models.replay import ReplayChatCompletionClient

    from quiesce import Buffer
    from quiesce.integrations.autogen import QuiesceChatCompletionContext

    info: Any = {
        "vision": False,
        "function_calling": True,
        "json_output": False,
        "family": ModelFamily.UNKNOWN,
        "structured_output": False,
    }
    client = ReplayChatCompletionClient(["ok"] * 10_000, model_info=info)
    history: list[LLMMessage] = []
    for i in range(n // 2):
        history.append(UserMessage(content=_text(i, "user"), source="user"))
        history.append(AssistantMessage(content=_text(i, "assistant"), source="assistant"))
    context: Any = (
        QuiesceChatCompletionContext(Buffer(), initial_messages=history)
        if quiesce
        else UnboundedChatCompletionContext(initial_messages=history)
    )
    agent = AssistantAgent("assistant", model_client=client, model_context=context)
    runner = asyncio.Runner()

    def turn() -> None:
        runner.run(agent.run(task="next"))

    return turn, runner.close


FRAMEWORKS: dict[str, tuple[Maker, str]] = {
    "langchain": (_langchain, "no middleware (InMemorySaver thread)"),
    "pydantic-ai": (_pydantic_ai, "no history processor"),
    "openai-agents": (_openai_agents, "SQLiteSession (in memory)"),
    "autogen": (_autogen, "the default unbounded context"),
}


def _cpu_ns(fn: Turn, keep_gc: bool) -> float:
    """CPU time of one turn; the collector off while timing unless
    ``keep_gc`` (the suite's method, as timeit does)."""
    if not keep_gc:
        gc.disable()
    try:
        t0 = time.process_time_ns()
        fn()
        return float(time.process_time_ns() - t0)
    finally:
        gc.enable()


def _measure(
    make: Maker, n: int, repeat: int, name: str, keep_gc: bool = False
) -> tuple[CaseResult, CaseResult]:
    """Paired per-turn CPU time: quiesce and the framework's default,
    alternately, ``repeat`` turns each after two warm-up turns."""
    q = CaseResult(SECTION, "turn", "quiesce", n, {"framework": name}, number=1)
    d = CaseResult(SECTION, "turn", "default", n, {"framework": name}, number=1)
    turn_q, close_q = make(n, True)
    turn_d, close_d = make(n, False)
    try:
        for _ in range(2):
            turn_q()
            turn_d()
        for i in range(repeat):
            if i % 2:
                d.ns.append(_cpu_ns(turn_d, keep_gc))
                q.ns.append(_cpu_ns(turn_q, keep_gc))
            else:
                q.ns.append(_cpu_ns(turn_q, keep_gc))
                d.ns.append(_cpu_ns(turn_d, keep_gc))
    finally:
        close_q()
        close_d()
    return q, d


# -- loop stall ----------------------------------------------------------------


async def _stall_of(agent: Any, cfg: Any, turns: int) -> float:
    """The longest late wake-up (ms) of a 0.5 ms heartbeat during ``turns``
    ``ainvoke`` turns."""
    from langchain_core.messages import HumanMessage

    worst = 0.0
    done = asyncio.Event()

    async def heartbeat() -> None:
        nonlocal worst
        loop = asyncio.get_running_loop()
        while not done.is_set():
            t0 = loop.time()
            await asyncio.sleep(TICK)
            worst = max(worst, loop.time() - t0 - TICK)

    beat = asyncio.create_task(heartbeat())
    await asyncio.sleep(TICK)
    for i in range(turns):
        await agent.ainvoke({"messages": [HumanMessage(f"next {i}")]}, cfg)
    done.set()
    await beat
    return worst * 1e3


def _stall(n: int, turns: int, quiesce: bool) -> tuple[float, float, float]:
    """The heartbeat's longest late wake-up (ms) over ``turns`` LangChain
    ``ainvoke`` turns on an ``n``-message history, the longest stretch
    (ms) quiesce's hook held the loop without yielding (one step of its
    coroutine: the sync, the pruning round, the render, and what follows
    the model's answer; the model's own steps are not counted), with a
    ``SQLiteLog``-backed runtime buffer, and the median over the turns of
    the hook's steps summed. Steps are CPU time of the loop's thread (what
    they would hold an idle machine's loop for: the shared machine preempts
    wall time); the heartbeat is wall time."""
    from langchain.agents import create_agent
    from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
    from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
    from langgraph.checkpoint.memory import InMemorySaver

    from quiesce import SQLiteLog, open_buffer
    from quiesce.integrations.langchain import QuiesceMiddleware

    class Model(FakeMessagesListChatModel):
        def bind_tools(self, tools: Any, **kwargs: Any) -> Model:
            return self

    held: list[float] = []
    totals: list[float] = []

    class Timed(QuiesceMiddleware):
        async def awrap_model_call(self, request: Any, handler: Any) -> Any:
            steps = _Steps()

            async def timed(req: Any) -> Any:
                steps.pause()  # the model's own steps are not quiesce's
                try:
                    return await handler(req)
                finally:
                    steps.resume()

            try:
                return await _stepped(super().awrap_model_call(request, timed), steps)
            finally:
                held.append(steps.longest)
                totals.append(steps.total)

    history: list[BaseMessage] = []
    for i in range(n // 2):
        history.append(HumanMessage(_text(i, "user"), id=f"h{i}"))
        history.append(AIMessage(content=_text(i, "assistant"), id=f"a{i}"))

    async def main(tmp: str) -> float:
        cfg: Any = {"configurable": {"thread_id": "stall"}}
        model = Model(responses=[AIMessage(content="ok")])
        agent: Any
        if not quiesce:
            agent = create_agent(model=model, tools=[], checkpointer=InMemorySaver())
            await agent.ainvoke({"messages": history}, cfg)
            return await _stall_of(agent, cfg, turns)
        async with open_buffer(log=SQLiteLog(Path(tmp) / "stall.sqlite")) as buf:
            agent = create_agent(
                model=model,
                tools=[],
                middleware=[Timed(buf)],
                checkpointer=InMemorySaver(),
            )
            await agent.ainvoke({"messages": history}, cfg)
            held.clear()  # the first sync of the whole history is not a turn
            return await _stall_of(agent, cfg, turns)

    with tempfile.TemporaryDirectory() as tmp:
        beat = asyncio.run(main(tmp))
    return beat, max(held, default=0.0) * 1e3, statistics.median(totals or [0.0]) * 1e3


class _Steps:
    """The steps a coroutine ran on the loop thread (between two of its
    yields to the loop), timed in CPU time of that thread while counting:
    the longest one and their sum."""

    def __init__(self) -> None:
        self.longest = 0.0
        self.total = 0.0
        self.counting = True
        self.t0 = 0.0

    def start(self) -> None:
        self.t0 = time.thread_time()

    def end(self) -> None:
        if self.counting:
            took = time.thread_time() - self.t0
            self.longest = max(self.longest, took)
            self.total += took

    def pause(self) -> None:
        self.end()
        self.counting = False

    def resume(self) -> None:
        self.counting = True
        self.start()


@types.coroutine
def _stepped(coro: Coroutine[Any, Any, Any], steps: _Steps) -> Generator[Any, Any, Any]:
    """Drive ``coro`` on the running loop, timing each step it runs
    (``steps``): the values it yields go to the loop unchanged."""
    value: Any = None
    error: BaseException | None = None
    while True:
        steps.start()
        try:
            yielded = coro.send(value) if error is None else coro.throw(error)
        except StopIteration as stop:
            steps.end()
            return stop.value
        except BaseException:
            steps.end()
            raise
        steps.end()
        try:
            value, error = (yield yielded), None
        except BaseException as exc:  # thrown in by the loop (a cancellation)
            value, error = None, exc


@contextlib.contextmanager
def _available(name: str, notes: list[str]) -> Iterator[bool]:
    try:
        yield True
    except ImportError as exc:
        notes.append(f"{name}: not installed ({exc.name}); its rows are SKIP")


@section(SECTION)
def bench_frameworks(cfg: Config) -> SectionResult:
    """Each integration's turn against its framework's default (see the
    module docstring)."""
    res = SectionResult(SECTION)
    sizes = SIZES_QUICK if cfg.quick else SIZES_FULL
    repeat = cfg.repeat
    goal_n = max(n for n in sizes if n <= GOAL_N)
    ratios: dict[str, dict[str, Any]] = {}
    for name, (make, control) in FRAMEWORKS.items():
        measured: dict[int, tuple[CaseResult, CaseResult]] = {}
        with _available(name, res.notes):
            for n in sizes:
                # turns up to the goal size are cheap: 4x the repetitions
                # there in a full run, so the paired median is stable on a
                # loaded machine (a quick run keeps one count for every case)
                small = n <= GOAL_N and not cfg.quick
                reps = repeat * SMALL_REPEAT if small else repeat
                measured[n] = _measure(make, n, reps, name, cfg.gc)
                res.cases.extend(measured[n])
        ratios[name] = {
            str(n): {
                "ratio": round(paired_ratio(q, d)[0], 3),
                "quiesce_ms": round(statistics.median(q.ns) / 1e6, 3),
                "default_ms": round(statistics.median(d.ns) / 1e6, 3),
            }
            for n, (q, d) in measured.items()
        }
        key = f"frameworks_{name.replace('-', '_')}_turn"
        text = f"{name} turn, quiesce / {control}, at {goal_n:,} messages"
        if goal_n in measured:
            q, d = measured[goal_n]
            res.goals.append(ratio_goal(key, text, q, d, "<=", GOAL_RATIO))
        else:
            res.goals.append(Goal(key, text, None, GOAL_RATIO, "<=", note="not measured"))
    res.extra["turn"] = ratios
    turns = 3 if cfg.quick else 20
    stall_n = goal_n
    with _available("langchain", res.notes):
        beat_q, own, own_median = _stall(stall_n, turns, True)
        beat_d, _, _ = _stall(stall_n, turns, False)
        res.extra["stall_ms"] = {
            "n": stall_n,
            "heartbeat_quiesce_sqlite": round(beat_q, 3),
            "heartbeat_default": round(beat_d, 3),
            "quiesce_longest_step": round(own, 3),
            "quiesce_hook_median_total": round(own_median, 3),
        }
        res.goals.append(
            Goal(
                "frameworks_loop_stall_ms",
                f"longest stretch quiesce holds the event loop in a LangChain ainvoke turn, "
                f"{stall_n:,} messages, SQLiteLog (ms)",
                own,
                GOAL_STALL_MS,
                "<=",
                note=(
                    f"longest step between yields; the hook's steps sum to "
                    f"{own_median:.2f} ms a turn (median); "
                    f"heartbeat's longest late wake-up: {beat_q:.2f} ms with quiesce, "
                    f"{beat_d:.2f} ms without (LangGraph's own steps)"
                ),
            )
        )
    res.notes.append(
        "per-turn CPU time of this process, paired repetitions; the sync/render "
        "figures of the adapters are their section's"
    )
    return res
