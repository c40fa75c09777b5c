"""The ``streaming`` section of ``quiesce bench``: open entries and the three
SDKs' streams into them (issue 24's table), and its plot.

What it keeps true: every figure goes through the public API
(``Buffer.open_stream``, ``StreamWriter.write``, ``adapters.*.append_stream``)
and is measured the suite's way — CPU time, the collector off, each case and
its baseline timed round-robin in every repetition, a goal's ratio the median
of the per-repetition ratios; figures are reported, never asserted. The SDKs'
own accumulators (``ChatCompletionStreamState.handle_chunk``,
``accumulate_event``) are timed on the very event objects ``append_stream``
reads; without the SDKs installed those goals are ``SKIP``.

Figures (goals of issue 24):

* one ``write`` / one ``mark_stale`` on a 1e4-entry window (≤ 1.5×);
* ``write`` at 1 MB of text / at 1 KB (≤ 1.2×: flat), and the curve of
  per-write cost against the text's length (``streaming.png``);
* memory of 1 MB streamed in 10,000 writes with a reader pinned every 100
  writes, all alive, / the text (≤ 2×); the same with every reader reading
  its body is reported beside it (each read materializes that prefix);
* ``anthropic.append_stream`` per text delta / ``accumulate_event`` (≤ 2×);
* ``openai.append_stream`` per chunk / ``handle_chunk`` (≤ 0.1×);
* p99 pin latency with 10 streams writing 1,000 times a second and 50
  readers / with no streams (≤ 1.5×), on asyncio and on trio;
* scheduler passes until a reader sees a written delta (≤ 1).
"""

from __future__ import annotations

import gc
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

from quiesce import Buffer, Entry, Kind, open_buffer

from .harness import CaseResult, Config, Goal, SectionResult, paired_ratio
from .registry import plot, save_figure, section

__all__ = ["SECTION"]

SECTION = "streaming"

#: the text lengths of the per-write curve
LENGTHS = (1_000, 10_000, 100_000, 1_000_000)

CHUNK = "abcdefghij"  # 10 characters a write, about a token or two


def _reps(cfg: Config) -> int:
    """Repetitions: the run's (every case of a run has that many)."""
    return cfg.repeat


def _timed(fn: Callable[[], Any]) -> float:
    """CPU ns of ``fn()``, or what it returns when it times itself (a
    coroutine run on a loop of its own, the loop's start left out)."""
    t0 = time.process_time_ns()
    own = fn()
    spent = float(time.process_time_ns() - t0)
    return float(own) if isinstance(own, int | float) else spent


def _in_loop(stream: Callable[..., Any], buf: Buffer, events: list[Any]) -> Callable[[], int]:
    """A run of ``await stream(buf, events)`` that times only the await."""

    async def timed() -> int:
        t0 = time.process_time_ns()
        await stream(buf, events)
        return time.process_time_ns() - t0

    return lambda: anyio.run(timed)


def _round_robin(
    cases: list[tuple[CaseResult, Callable[[], tuple[Callable[[], Any], int]]]], reps: int
) -> None:
    """Time every case once per repetition, in turn: ``make()`` builds a
    fresh state (not timed) and returns ``(run, ops)``; ``ns`` gets
    ns per operation."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        for make_case in cases:  # warm-up
            run, _ = make_case[1]()
            run()
        for _ in range(reps):
            for result, make in cases:
                run, ops = make()
                result.number = ops
                result.ns.append(_timed(run) / ops)
    finally:
        if enabled:
            gc.enable()


def _window(n: int) -> Buffer:
    buf = Buffer()
    buf.extend([Entry(f"e{i}", Kind.REASONING, f"step {i} of the plan") for i in range(n)])
    return buf


# -- write vs mark_stale; write against the text's length ------------------------


def _write_case(n: int, length: int, ops: int) -> Callable[[], tuple[Callable[[], Any], int]]:
    def make() -> tuple[Callable[[], Any], int]:
        buf = _window(n)
        w = buf.open_stream("s", Kind.REASONING)
        for _ in range(length // 10_000):
            w.write(CHUNK * 1000)
        if length % 10_000:
            w.write("x" * (length % 10_000))
        write = w.write

        def run() -> None:
            for _ in range(ops):
                write(CHUNK)

        return run, ops

    return make


def _mark_case(n: int, ops: int) -> Callable[[], tuple[Callable[[], Any], int]]:
    def make() -> tuple[Callable[[], Any], int]:
        buf = _window(n)
        ids = [f"e{i}" for i in range(0, n, max(1, n // ops))][:ops]
        mark = buf.mark_stale

        def run() -> None:
            for i in ids:
                mark(i, "superseded")

        return run, len(ids)

    return make


# -- memory ----------------------------------------------------------------------


def _memory(read: bool) -> tuple[int, int]:
    """Bytes held by a buffer after 1 MB streamed in 10,000 writes with a
    reader pinned every 100 writes (all still pinned), and ``sys.getsizeof``
    of the text. ``read``: each reader also reads its entry's body."""
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        buf = Buffer()
        w = buf.open_stream("s", Kind.REASONING)
        piece = "x" * 100
        pins: list[Any] = []
        bodies: list[str] = []
        for k in range(10_000):
            w.write(piece)
            if k % 100 == 99:
                snap = buf.snapshot().__enter__()
                pins.append(snap)
                if read:
                    bodies.append(snap["s"].body)
        held = tracemalloc.get_traced_memory()[0] - base
        text = sys.getsizeof(w.text)
        for snap in pins:
            snap.__exit__(None, None, None)
        return held, text
    finally:
        tracemalloc.stop()


# -- the SDKs --------------------------------------------------------------------


def _chat_chunks(n: int) -> list[Any]:
    from openai.types.chat import ChatCompletionChunk

    def chunk(delta: dict[str, Any], finish: str | None = None) -> Any:
        return ChatCompletionChunk.model_validate(
            {
                "id": "chatcmpl-bench",
                "object": "chat.completion.chunk",
                "created": 0,
                "model": "bench",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }
        )

    return [
        chunk({"role": "assistant", "content": ""}),
        *(chunk({"content": f"word{i} "}) for i in range(n)),
        chunk({}, "stop"),
    ]


def _anthropic_events(n: int) -> list[Any]:
    from anthropic.types import RawMessageStreamEvent
    from pydantic import TypeAdapter

    adapter: TypeAdapter[Any] = TypeAdapter(RawMessageStreamEvent)
    raw: list[dict[str, Any]] = [
        {
            "type": "message_start",
            "message": {
                "id": "msg_bench",
                "type": "message",
                "role": "assistant",
                "content": [],
                "model": "bench",
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {"input_tokens": 1, "output_tokens": 1},
            },
        },
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        *(
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": f"word{i} "},
            }
            for i in range(n)
        ),
        {"type": "content_block_stop", "index": 0},
        {"type": "message_stop"},
    ]
    return [adapter.validate_python(e) for e in raw]


def _sdk_cases(cfg: Config) -> list[tuple[CaseResult, Callable[[], tuple[Callable[[], Any], int]]]]:
    """append_stream against each SDK's accumulator, on the same events."""
    from quiesce import adapters

    n = 200 if cfg.quick else 2_000
    out: list[tuple[CaseResult, Callable[[], tuple[Callable[[], Any], int]]]] = []
    try:
        chunks = _chat_chunks(n)
        from openai.lib.streaming.chat import ChatCompletionStreamState
    except ImportError:
        chunks = []
    if chunks:

        def quiesce_chat() -> tuple[Callable[[], Any], int]:
            buf = Buffer()
            return _in_loop(adapters.openai.append_stream, buf, chunks), len(chunks)

        def sdk_chat() -> tuple[Callable[[], Any], int]:
            state: Any = ChatCompletionStreamState()

            def run() -> None:
                for c in chunks:
                    state.handle_chunk(c)

            return run, len(chunks)

        out += [
            (CaseResult(SECTION, "chunk", "openai.append_stream", n), quiesce_chat),
            (CaseResult(SECTION, "chunk", "ChatCompletionStreamState.handle_chunk", n), sdk_chat),
        ]
    try:
        events = _anthropic_events(n)
        from anthropic.lib.streaming._messages import accumulate_event
    except ImportError:
        events = []
    if events:

        def quiesce_claude() -> tuple[Callable[[], Any], int]:
            buf = Buffer()
            return _in_loop(adapters.anthropic.append_stream, buf, events), n

        def sdk_claude() -> tuple[Callable[[], Any], int]:
            def run() -> None:
                snap: Any = None
                bufs: dict[int, bytes] = {}
                for e in events:
                    snap = accumulate_event(event=e, current_snapshot=snap, json_bufs=bufs)

            return run, n

        out += [
            (CaseResult(SECTION, "text delta", "anthropic.append_stream", n), quiesce_claude),
            (CaseResult(SECTION, "text delta", "accumulate_event", n), sdk_claude),
        ]
    return out


# -- readers under streams -------------------------------------------------------


async def _pin_latencies(streams: int, readers: int, seconds: float) -> list[float]:
    """ns of each pin (enter + exit of ``snapshot()``) taken by ``readers``
    readers, each pinning every millisecond, while ``streams`` streams write
    a delta every millisecond (wall clock)."""
    lat: list[float] = []
    async with open_buffer() as buf:
        buf.extend([Entry(f"e{i}", Kind.REASONING, f"step {i}") for i in range(1_000)])
        stop = anyio.Event()

        async def write(k: int) -> None:
            w = buf.open_stream(f"s{k}", Kind.REASONING)
            while not stop.is_set():
                w.write(CHUNK)
                await anyio.sleep(0.001)
            w.close()

        async def read() -> None:
            clock = time.perf_counter_ns
            snapshot = buf.snapshot
            while not stop.is_set():
                t0 = clock()
                with snapshot():
                    pass
                lat.append(clock() - t0)
                await anyio.sleep(0.001)

        async with anyio.create_task_group() as tg:
            for k in range(streams):
                tg.start_soon(write, k)
            for _ in range(readers):
                tg.start_soon(read)
            await anyio.sleep(seconds)
            stop.set()
    return lat


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


async def _visibility(writes: int) -> int:
    """The most scheduler passes after a write before a reader waiting on
    the loop saw it: the writer writes, then checkpoints and counts each
    pass it comes back from until the reader reports the delta; the reader
    notes the count when it first sees it (0: before the writer ran again,
    1: in the first pass after the write)."""
    async with open_buffer() as buf:
        w = buf.open_stream("s", Kind.REASONING)
        state = {"target": 0, "passes": 0, "lag": -1}
        done = False

        async def reader() -> None:
            while not done:
                with buf.snapshot() as snap:
                    if state["lag"] < 0 and len(snap["s"].body) >= state["target"] > 0:
                        state["lag"] = state["passes"]
                await anyio.lowlevel.checkpoint()

        worst = 0
        async with anyio.create_task_group() as tg:
            tg.start_soon(reader)
            await anyio.lowlevel.checkpoint()
            for _ in range(writes):
                w.write("x")
                state.update(target=len(w.text), passes=0, lag=-1)
                while state["lag"] < 0:
                    await anyio.lowlevel.checkpoint()
                    state["passes"] += 1
                worst = max(worst, state["lag"])
            done = True
        w.close()
    return worst


# -- the section -----------------------------------------------------------------


@section(SECTION)
def bench_streaming(cfg: Config) -> SectionResult:
    """Issue 24's streaming figures (see the module docstring)."""
    res = SectionResult(SECTION)
    reps = _reps(cfg)
    ops = 500 if cfg.quick else 20_000
    n = 10_000
    write = CaseResult(SECTION, "write", "quiesce", n, {"text": 1_000})
    mark = CaseResult(SECTION, "mark_stale", "quiesce", n)
    curve = [CaseResult(SECTION, "write", "quiesce", 1_000, {"text": length}) for length in LENGTHS]
    cases = [(write, _write_case(n, 1_000, ops)), (mark, _mark_case(n, ops))]
    cases += [(c, _write_case(1_000, c.param["text"], ops)) for c in curve]
    sdk = _sdk_cases(cfg)
    cases += sdk
    _round_robin(cases, reps)
    res.cases = [c for c, _ in cases]

    def goal(key: str, text: str, a: CaseResult, b: CaseResult, limit: float) -> Goal:
        med, lo, hi = paired_ratio(a, b)
        return Goal(key, text, med, limit, "<=", (lo, hi), "", min(a.ns) / min(b.ns))

    res.goals.append(
        goal("stream_write_vs_mark", "one write / one mark_stale, window 1e4", write, mark, 1.5)
    )
    res.goals.append(
        goal("stream_write_flat", "write at 1 MB of text / at 1 KB", curve[-1], curve[0], 1.2)
    )
    held, text = _memory(read=False)
    held_read, _ = _memory(read=True)
    res.extra["memory"] = {"held": held, "text": text, "held_reading": held_read}
    res.goals.append(
        Goal(
            "stream_memory",
            "memory, 1 MB in 10,000 writes, a reader pinned every 100, all alive / the text",
            held / text,
            2.0,
            "<=",
            note=f"each reader reading its body too: {held_read / text:.3g}x",
        )
    )
    by = {(c.op, c.impl): c for c, _ in sdk}
    pairs = [
        (
            "stream_anthropic_vs_accumulate",
            "anthropic.append_stream per text delta / accumulate_event",
            ("text delta", "anthropic.append_stream"),
            ("text delta", "accumulate_event"),
            2.0,
        ),
        (
            "stream_openai_vs_handle_chunk",
            "openai.append_stream per chunk / ChatCompletionStreamState.handle_chunk",
            ("chunk", "openai.append_stream"),
            ("chunk", "ChatCompletionStreamState.handle_chunk"),
            0.1,
        ),
    ]
    for key, text_, a, b, limit in pairs:
        if a in by and b in by:
            res.goals.append(goal(key, text_, by[a], by[b], limit))
        else:
            res.goals.append(Goal(key, text_, None, limit, "<=", note="the SDK is not installed"))
    seconds = 0.1 if cfg.quick else 1.0
    rounds = 1 if cfg.quick else 3
    for backend in ("asyncio", "trio"):
        ratios = []
        p99s: dict[str, list[float]] = {"streams": [], "none": []}
        for _ in range(rounds):
            with_streams = _p99(anyio.run(_pin_latencies, 10, 50, seconds, backend=backend))
            without = _p99(anyio.run(_pin_latencies, 0, 50, seconds, backend=backend))
            p99s["streams"].append(with_streams)
            p99s["none"].append(without)
            ratios.append(with_streams / without)
        res.extra[f"pin_p99_{backend}"] = p99s
        res.goals.append(
            Goal(
                f"stream_pin_p99_{backend}",
                f"p99 pin, 10 streams x 1,000 writes/s, 50 readers / no streams ({backend})",
                statistics.median(ratios),
                1.5,
                "<=",
                (min(ratios), max(ratios)),
                f"p99 {statistics.median(p99s['streams']):.0f} ns vs "
                f"{statistics.median(p99s['none']):.0f} ns (wall clock)",
            )
        )
        passes = anyio.run(_visibility, 50 if cfg.quick else 2_000, backend=backend)
        res.goals.append(
            Goal(
                f"stream_visibility_{backend}",
                f"scheduler passes until a reader sees a written delta ({backend})",
                float(passes),
                1.0,
                "<=",
            )
        )
    return res


@plot("streaming.png")
def _plot_streaming(plt: Any, results: dict[str, Any], out: Path, stamp: str) -> list[Path]:
    """``streaming.png``: ns per ``write`` against the text's length (median,
    bars min..max), with one ``mark_stale`` on a 1e4 window for scale."""
    sec = results["sections"].get(SECTION)
    if sec is None or not sec["cases"]:
        return []
    writes = sorted(
        (c for c in sec["cases"] if c["op"] == "write" and c["n"] == 1_000),
        key=lambda c: c["param"]["text"],
    )
    marks = [c for c in sec["cases"] if c["op"] == "mark_stale"]
    if not writes:
        return []
    fig, ax = plt.subplots(figsize=(7, 4.2))
    xs = [c["param"]["text"] for c in writes]
    ax.errorbar(
        xs,
        [c["median"] for c in writes],
        yerr=[[c["median"] - c["min"] for c in writes], [c["max"] - c["median"] for c in writes]],
        marker="o",
        color="tab:blue",
        linewidth=2.2,
        capsize=3,
        label="StreamWriter.write (10 characters)",
    )
    if marks:
        ax.axhline(
            marks[0]["median"], color="tab:gray", linestyle="--", label="mark_stale, window 1e4"
        )
    ax.set_xscale("log")
    ax.set_ylim(bottom=0)
    ax.set_xlabel("characters already written to the open entry")
    ax.set_ylabel("ns per write (median; bars: min..max)")
    ax.set_title("Per-write cost against the text's length")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.text(0.01, 0.01, stamp, fontsize=6, color="gray")
    return [save_figure(plt, fig, out / "streaming.png", dpi=120)]
