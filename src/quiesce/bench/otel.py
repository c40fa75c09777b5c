"""The ``otel`` section: the fast paths with :class:`quiesce.otel.QuiesceInstrumentor`
installed (on OpenTelemetry's no-op provider) against the same paths without it.

What it keeps true: both sides run in this process, in alternating
repetitions (CPU time, garbage collector off, the minimum of each side's
repetitions), on buffers built the same way, so the ratio is the
instrumentor's cost and not the machine's mood. The instrumentor is always
uninstrumented again, also when a measurement raises. Goals (issue 25):
``mark_stale`` and a pin + unpin with it installed ≤ 1.05× without (they are
never wrapped; the ratio shows that nothing else on the path is). A prune
(a slow path that is wrapped) is reported, without a goal.

Without ``opentelemetry-api`` installed the goals are ``SKIP``.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any

from quiesce import Buffer, Entry, Kind

__all__ = ["SECTION", "measure"]

SECTION = "otel"


def _buffer(n: int) -> Buffer:
    buf = Buffer()
    for i in range(n):
        buf.append(Entry(f"e{i}", Kind.REASONING, f"step {i}"))
    return buf


def _ops(n: int) -> dict[str, Callable[[], Callable[[], object]]]:
    """Each op as a maker of a fresh timed closure (on a fresh buffer)."""

    def mark() -> Callable[[], object]:
        buf = _buffer(n)
        ids = iter([f"e{i}" for i in range(n)] * 4)

        def op() -> object:
            return buf.mark_stale(next(ids), "stale")

        return op

    def pin() -> Callable[[], object]:
        buf = _buffer(n)

        def op() -> object:
            with buf.snapshot():
                pass
            return None

        return op

    def prune() -> Callable[[], object]:
        buf = _buffer(n)
        ids = iter([f"e{i}" for i in range(n)])

        def op() -> object:
            return buf.prune([next(ids)], reason="stale")

        return op

    return {"mark_stale": mark, "pin+unpin": pin, "prune": prune}


def _time(fn: Callable[[], object], number: int) -> float:
    t0 = time.process_time_ns()
    for _ in range(number):
        fn()
    return (time.process_time_ns() - t0) / number


def measure(n: int = 10_000, *, repeat: int = 5, number: int = 2_000) -> dict[str, Any]:
    """ns per op of each fast path without and with the instrumentor on a
    no-op provider, alternating, ``repeat`` times of ``number`` ops (at most
    ``n`` for the ops that consume an id). ``{}`` without OpenTelemetry."""
    try:
        from opentelemetry.metrics import NoOpMeterProvider
        from opentelemetry.trace import NoOpTracerProvider

        from quiesce.otel import QuiesceInstrumentor
    except ImportError:
        return {}
    inst = QuiesceInstrumentor()
    was = inst.is_instrumented_by_opentelemetry
    if was:
        inst.uninstrument()
    out: dict[str, Any] = {}
    enabled = gc.isenabled()
    gc.disable()
    try:
        for name, make in _ops(n).items():
            count = min(number, n // 2)
            without: list[float] = []
            with_: list[float] = []
            for _ in range(repeat):
                without.append(_time(make(), count))
                inst.instrument(
                    tracer_provider=NoOpTracerProvider(), meter_provider=NoOpMeterProvider()
                )
                try:
                    with_.append(_time(make(), count))
                finally:
                    inst.uninstrument()
            out[name] = {"without_ns": without, "with_ns": with_}
    finally:
        if enabled:
            gc.enable()
        if was:
            inst.instrument()
    return out


def _register() -> None:
    from .lib import Config, Goal, SectionResult, section

    @section(SECTION)
    def bench_otel(cfg: Config) -> SectionResult:
        """``mark_stale``, a pin + unpin and a prune with the OpenTelemetry
        instrumentor on a no-op provider / without it (issue 25: ≤ 1.05× for
        the fast paths)."""
        res = SectionResult(SECTION)
        figures = measure(
            1_000 if cfg.quick else 10_000,
            repeat=3 if cfg.quick else 7,
            number=300 if cfg.quick else 2_000,
        )
        res.extra["figures"] = figures
        for key, op in (("otel_mark_stale", "mark_stale"), ("otel_pin", "pin+unpin")):
            fig = figures.get(op)
            value = None if fig is None else min(fig["with_ns"]) / min(fig["without_ns"])
            res.goals.append(
                Goal(
                    key, f"{op} with the instrumentor (no-op provider) / without", value, 1.05, "<="
                )
            )
        fig = figures.get("prune")
        if fig is not None:
            res.notes.append(
                "prune (wrapped: a span and events) with the instrumentor on a no-op "
                f"provider / without: {min(fig['with_ns']) / min(fig['without_ns']):.2f}x"
            )
        return res


_register()
