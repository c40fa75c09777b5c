"""The cost of a turn's bookkeeping in the chat adapters: a no-op
``sync_messages`` + ``render`` of a framework's history, against
``json.dumps`` of the same list (the floor every request pays: the SDK
serializes the history anyway).

What it keeps true: the figures are measured the way ``quiesce bench``
measures (CPU time, garbage collector off, min of repetitions, each case
and its baseline timed side by side); they are returned, never asserted.
:func:`measure` gives the figures for the three adapters at the history
sizes asked for; the ``sync_render`` section of ``quiesce bench`` reports
them with the goal of issue 22 (≤ 3× ``json.dumps`` at 1,000 and 10,000
messages, per message flat in history length).
"""

from __future__ import annotations

import gc
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from quiesce import Buffer, adapters

__all__ = ["SyncRenderFigure", "history", "measure"]


@dataclass(frozen=True, slots=True)
class SyncRenderFigure:
    """One adapter at one history length: ns per turn of a no-op sync +
    render (``turn_ns``), of ``json.dumps`` of the history (``dumps_ns``),
    their ratio, and ns per message of the turn."""

    api: str
    messages: int
    turn_ns: float
    dumps_ns: float

    @property
    def ratio(self) -> float:
        return self.turn_ns / self.dumps_ns

    @property
    def per_message_ns(self) -> float:
        return self.turn_ns / self.messages


def history(api: str, n: int) -> tuple[list[dict[str, Any]], Any]:
    """A tool-using agent's history of ``n`` messages in ``api``'s shape
    (a user turn, a tool call, its result, an answer, ...; ~150 bytes a
    message) and its system prompt (Anthropic) or ``None``."""
    out: list[dict[str, Any]] = []
    i = 0
    while len(out) < n:
        text = f"step {i}: look at host web-{i % 17} and report its load"
        if api == "openai":
            out += [
                {"role": "user", "content": text},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": f"call_{i}",
                            "type": "function",
                            "function": {"name": "load", "arguments": json.dumps({"host": i})},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": f"call_{i}", "content": f"load {i % 7}.{i % 10}"},
                {"role": "assistant", "content": f"web-{i % 17} is at load {i % 7}"},
            ]
        elif api == "responses":
            out += [
                {"role": "user", "content": text},
                {
                    "type": "function_call",
                    "call_id": f"call_{i}",
                    "name": "load",
                    "arguments": json.dumps({"host": i}),
                },
                {"type": "function_call_output", "call_id": f"call_{i}", "output": f"load {i}"},
                {"role": "assistant", "content": f"web-{i % 17} is at load {i % 7}", "id": f"m{i}"},
            ]
        else:
            out += [
                {"role": "user", "content": text},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "text", "text": "Checking."},
                        {"type": "tool_use", "id": f"t{i}", "name": "load", "input": {"host": i}},
                    ],
                },
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": f"t{i}", "content": "1.0"}],
                },
                {"role": "assistant", "content": f"web-{i % 17} is at load {i % 7}"},
            ]
        i += 1
    del out[n:]
    while out and out[-1].get("role") == "assistant" and api != "anthropic":
        out.pop()  # end on a user turn or a result: a request the API takes
    if api == "anthropic":
        while out[-1]["role"] != "user" or isinstance(out[-1]["content"], list):
            out.pop()
    return out, ("You are an SRE agent." if api == "anthropic" else None)


def _turn(api: str, buf: Buffer, msgs: list[dict[str, Any]], system: Any) -> Callable[[], Any]:
    if api == "openai":
        return lambda: (adapters.openai.sync_messages(buf, msgs), adapters.openai.render(buf))
    if api == "responses":
        return lambda: (adapters.responses.sync_messages(buf, msgs), adapters.responses.render(buf))
    claude = adapters.anthropic
    return lambda: (claude.sync_messages(buf, msgs, system=system), claude.render(buf))


def _best(fn: Callable[[], Any], repeat: int, number: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.process_time_ns()
        for _ in range(number):
            fn()
        best = min(best, (time.process_time_ns() - t0) / number)
    return best


def measure(
    sizes: Sequence[int] = (1_000, 10_000),
    apis: Sequence[str] = ("openai", "responses", "anthropic"),
    *,
    repeat: int = 5,
    budget_s: float = 0.05,
) -> list[SyncRenderFigure]:
    """The figures, one per adapter and size: a history synced once (the
    turn that appended it is not timed), then a no-op sync + render of the
    same list timed against ``json.dumps`` of it, round-robin, ``repeat``
    times, each repetition about ``budget_s`` of CPU. O(sizes · repeat)."""
    out: list[SyncRenderFigure] = []
    enabled = gc.isenabled()
    gc.disable()
    try:
        for api in apis:
            for n in sizes:
                msgs, system = history(api, n)
                buf = Buffer()
                turn = _turn(api, buf, msgs, system)
                turn()
                turn()  # warm: the last history is remembered, the window cached
                dumps = partial(json.dumps, msgs)
                once = max(_best(dumps, 1, 1), 1.0)
                number = max(1, int(budget_s * 1e9 / once / 3))
                turn_ns = dumps_ns = float("inf")
                for _ in range(repeat):
                    turn_ns = min(turn_ns, _best(turn, 1, number))
                    dumps_ns = min(dumps_ns, _best(dumps, 1, number))
                out.append(SyncRenderFigure(api, len(msgs), turn_ns, dumps_ns))
    finally:
        if enabled:
            gc.enable()
    return out


SECTION = "sync_render"


def _register() -> None:
    from .lib import Config, Goal, SectionResult, section

    @section(SECTION)
    def bench_sync_render(cfg: Config) -> SectionResult:
        """A no-op ``sync_messages`` + ``render`` of a 1,000- and a
        10,000-message history in each adapter, against ``json.dumps`` of
        the history (issue 22: ≤ 3×, per message flat in history length)."""
        res = SectionResult(SECTION)
        figures = measure(
            (1_000, 10_000),
            repeat=2 if cfg.quick else 5,
            budget_s=0.02 if cfg.quick else 0.1,
        )
        res.extra["figures"] = [
            {
                "api": f.api,
                "messages": f.messages,
                "turn_ns": f.turn_ns,
                "dumps_ns": f.dumps_ns,
                "ratio": f.ratio,
                "per_message_ns": f.per_message_ns,
            }
            for f in figures
        ]
        by = {(f.api, round(f.messages, -3)): f for f in figures}
        for api in ("openai", "responses", "anthropic"):
            for n in (1_000, 10_000):
                f = by[(api, n)]
                res.goals.append(
                    Goal(
                        f"sync_render_{api}_{n}",
                        f"{api}: no-op sync_messages + render / json.dumps, {n:,} messages",
                        f.ratio,
                        3.0,
                        "<=",
                    )
                )
            small, big = by[(api, 1_000)], by[(api, 10_000)]
            res.goals.append(
                Goal(
                    f"sync_render_{api}_flat",
                    f"{api}: ratio at 10,000 / ratio at 1,000 messages (flat per message)",
                    big.ratio / small.ratio,
                    1.5,
                    "<=",
                )
            )
        return res


_register()
