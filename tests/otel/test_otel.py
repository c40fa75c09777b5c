"""``quiesce.otel``: spans, events and metrics, read back from the
OpenTelemetry SDK's in-memory exporters (asyncio and trio)."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from quiesce import Buffer, EditPlan, Entry, Kind, Rewrite, SQLiteLog, open_buffer
from quiesce._core.buffer import Buffer as CoreBuffer
from quiesce.otel import QuiesceInstrumentor

SECRET = "the launch code is 0000"  # an entry body: never an attribute


@pytest.fixture
def otel() -> Iterator[tuple[InMemorySpanExporter, InMemoryMetricReader, TracerProvider]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    inst = QuiesceInstrumentor()
    inst.instrument(tracer_provider=provider, meter_provider=meters)
    try:
        yield exporter, reader, provider
    finally:
        inst.uninstrument()


def _spans(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name.startswith(name)]


def _events(span: ReadableSpan, name: str) -> list[dict[str, Any]]:
    return [dict(e.attributes or {}) for e in span.events if e.name == name]


def _all_values(exporter: InMemorySpanExporter) -> list[str]:
    out = []
    for s in exporter.get_finished_spans():
        out += [str(v) for v in (s.attributes or {}).values()]
        for e in s.events:
            out += [str(v) for v in (e.attributes or {}).values()]
    return out


@pytest.mark.anyio
async def test_a_deferred_prune_and_its_removal(otel: Any, tmp_path: Path) -> None:
    """A prune held back by a reader is a ``delete_memory`` span (DEFERRED
    for each id, a refusal event for the protected one); its removal at the
    grace point is another with one ``quiesce.tombstone`` event per id; the
    pinned reader is named by a ``READER_PINNED`` escalation event."""
    exporter, _reader, _ = otel
    now = [0.0]
    async with open_buffer(
        log=SQLiteLog(tmp_path / "a.db"), max_pin_age=0.01, clock=lambda: now[0]
    ) as buf:
        buf.append(Entry("rule", Kind.CONSTRAINT, "never touch /etc"))
        buf.append(Entry("t1", Kind.REASONING, SECRET))
        buf.append(Entry("t2", Kind.REASONING, "and so", refs=("t1",)))
        with buf.snapshot():
            await buf.aprune(["t1", "t2", "rule"], reason="stale", actor="pruner", turn=3)
            now[0] = 100.0
            with anyio.fail_after(10):
                async for esc in buf.escalations():
                    if esc.kind.value == "reader_pinned":
                        break
        await buf.quiesce()
    prune = next(
        s
        for s in _spans(exporter, "delete_memory")
        if s.attributes and s.attributes["quiesce.operation"] == "prune"
    )
    attrs = dict(prune.attributes or {})
    assert attrs["gen_ai.operation.name"] == "delete_memory"
    assert attrs["gen_ai.memory.store.id"] == str(tmp_path / "a.db")
    assert attrs["quiesce.status.deferred"] == 2
    assert attrs["quiesce.status.unchanged"] == 1
    assert attrs["quiesce.reason"] == "stale" and attrs["quiesce.actor"] == "pruner"
    refusals = _events(prune, "quiesce.refusal")
    assert refusals == [
        {
            "gen_ai.memory.record.id": "rule",
            "quiesce.refusal": "immutable",
            "quiesce.status": "unchanged",
        }
    ]
    applied = [
        s
        for s in _spans(exporter, "delete_memory")
        if s.attributes and s.attributes["quiesce.operation"] == "apply_due"
    ]
    tombs = [e for s in applied for e in _events(s, "quiesce.tombstone")]
    links = [link.context.span_id for s in applied for link in s.links]
    assert prune.context is not None and prune.context.span_id in links
    assert sorted(t["gen_ai.memory.record.id"] for t in tombs) == ["t1", "t2"]
    assert all(t["quiesce.actor"] == "pruner" and t["quiesce.reason"] == "stale" for t in tombs)
    assert all(len(str(t["quiesce.content_hash"])) == 16 for t in tombs)
    alarm = _spans(exporter, "quiesce.reader_alarm")
    pinned = [e for s in alarm for e in _events(s, "quiesce.escalation")]
    assert pinned and pinned[0]["quiesce.escalation.kind"] == "reader_pinned"
    assert pinned[0]["quiesce.reader.task"]
    assert pinned[0]["quiesce.holding_back"] == 2
    assert _spans(exporter, "quiesce.flush")
    assert SECRET not in " ".join(_all_values(exporter))


@pytest.mark.anyio
async def test_spans_are_children_of_the_callers_span(otel: Any) -> None:
    """Started inside the user's span (also through the worker thread of
    ``aprune`` and ``aedit``), quiesce's spans are its children."""
    exporter, _, provider = otel
    tracer = provider.get_tracer("app")
    async with open_buffer() as buf:
        buf.append(Entry("a", Kind.REASONING, "x"))
        buf.append(Entry("rule", Kind.CONSTRAINT, "y"))
        with tracer.start_as_current_span("invoke_agent") as parent:
            await buf.aprune(["a"], reason="r")
            report = await buf.aedit(EditPlan([Rewrite("rule", "z")], reason="shorter"))
        assert not report.applied
    parent_id = parent.get_span_context().span_id
    mine = [
        s
        for s in _spans(exporter, "delete_memory") + _spans(exporter, "update_memory")
        if s.attributes and s.attributes["quiesce.operation"] in ("prune", "edit")
    ]
    assert len(mine) == 2
    assert all(s.parent is not None and s.parent.span_id == parent_id for s in mine)
    edit = _spans(exporter, "update_memory")[0]
    assert edit.attributes is not None and edit.attributes["quiesce.applied"] is False
    assert [e["quiesce.refusal"] for e in _events(edit, "quiesce.refusal")] == ["immutable"]
    assert [e["quiesce.escalation.kind"] for e in _events(edit, "quiesce.escalation")] == [
        "refused_edit"
    ]


def test_recovery_is_a_span(otel: Any, tmp_path: Path) -> None:
    exporter, _, _ = otel
    buf = Buffer(log=SQLiteLog(tmp_path / "r.db"))
    buf.append(Entry("a", Kind.REASONING, "x"))
    buf.flush()
    buf.sink.close()  # type: ignore[union-attr]
    again = Buffer(log=SQLiteLog(tmp_path / "r.db"))
    spans = _spans(exporter, "quiesce.recover")
    assert spans[-1].attributes is not None
    assert spans[-1].attributes["quiesce.version"] == again.version == 1
    assert spans[-1].attributes["quiesce.records"] == 1


def test_metrics_read_the_buffers_stats(otel: Any) -> None:
    _, reader, _ = otel
    buf = Buffer()
    buf.append(Entry("a", Kind.REASONING, "x"))
    buf.append(Entry("rule", Kind.CONSTRAINT, "y"))
    with buf.snapshot():
        buf.prune(["a", "rule"], reason="r")
        data = reader.get_metrics_data()
    points: dict[str, list[Any]] = {}
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                points[m.name] = [
                    (p.value if hasattr(p, "value") else p.count, dict(p.attributes or {}))
                    for p in m.data.data_points
                ]
    store = f"memory:{id(buf):x}"
    mine = {
        k: [v for v, a in pts if a.get("gen_ai.memory.store.id") == store]
        for k, pts in points.items()
    }
    assert mine["quiesce.readers.pinned"] == [1]
    assert mine["quiesce.removals.deferred"] == [1]
    assert mine["quiesce.refusals"] == [1]
    assert mine["quiesce.tombstones"] == [0]


def _points(reader: InMemoryMetricReader) -> dict[str, list[tuple[Any, dict[str, Any]]]]:
    """Every metric's data points as (value or count, attributes), by name."""
    out: dict[str, list[tuple[Any, dict[str, Any]]]] = {}
    data = reader.get_metrics_data()
    for rm in data.resource_metrics if data is not None else ():
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                out.setdefault(m.name, []).extend(
                    (p.value if hasattr(p, "value") else p.count, dict(p.attributes or {}))
                    for p in m.data.data_points
                )
    return out


def test_pin_age_ratio_readmissions_and_flush_latency(otel: Any, tmp_path: Path) -> None:
    """The oldest pin's age (on the buffer's clock), the tombstone-to-edit
    ratio, re-admissions refused and overridden, pending records and the
    flush duration histogram, read back by name for this buffer."""
    from quiesce import Override, ReadmissionRefused

    _, reader, _ = otel
    now = [10.0]
    buf = Buffer(log=SQLiteLog(tmp_path / "m.db"), clock=lambda: now[0])
    buf.append(Entry("a", Kind.REASONING, "the same words"))
    buf.prune(["a"], reason="stale")
    with pytest.raises(ReadmissionRefused):
        buf.append(Entry("b", Kind.REASONING, "the same words"))
    buf.append(Entry("c", Kind.REASONING, "the same words"), override=Override("asked", turn=2))
    store = str(tmp_path / "m.db")
    with buf.snapshot():
        buf.stats()  # a pass stamps the pin time (10.0): see quiesce._core.pins
        now[0] = 12.5
        before_flush = _points(reader)
        buf.flush()
        mine = {
            k: [(v, a) for v, a in pts if a.get("gen_ai.memory.store.id") == store]
            for k, pts in _points(reader).items()
        }
    assert [v for v, _ in mine["quiesce.readers.oldest_pin_age"]] == [2.5]
    assert [v for v, _ in mine["quiesce.tombstone_to_edit_ratio"]] == [1.0]
    assert [v for v, _ in mine["quiesce.tombstones"]] == [1]
    assert sorted((a["quiesce.outcome"], v) for v, a in mine["quiesce.readmissions"]) == [
        ("overridden", 1),
        ("refused", 1),
    ]
    pending = [
        v for v, a in before_flush["quiesce.log.pending"] if a["gen_ai.memory.store.id"] == store
    ]
    assert pending and pending[0] > 0
    assert [v for v, _ in mine["quiesce.log.pending"]] == [0]
    flushes = [
        v for v, a in before_flush["quiesce.flush.duration"] if a["gen_ai.memory.store.id"] == store
    ]
    assert [v for v, _ in mine["quiesce.flush.duration"]] == [flushes[0] + 1]
    buf.sink.close()  # type: ignore[union-attr]


def test_a_checkpoint_is_a_flush_span_with_its_event(otel: Any, tmp_path: Path) -> None:
    """``flush(checkpoint=True)`` is a ``quiesce.flush`` span marked as a
    checkpoint, with one ``quiesce.checkpoint`` event naming the seq of the
    checkpoint record; a buffer recovered from that log starts from it."""
    exporter, _, _ = otel
    buf = Buffer(log=SQLiteLog(tmp_path / "c.db"))
    for i in range(3):
        buf.append(Entry(f"e{i}", Kind.REASONING, f"step {i}"))
    buf.flush(checkpoint=True)
    buf.sink.close()  # type: ignore[union-attr]
    (span,) = [
        s
        for s in _spans(exporter, "quiesce.flush")
        if s.attributes and s.attributes["quiesce.checkpoint"] is True
    ]
    assert span.attributes is not None
    assert span.attributes["gen_ai.memory.store.id"] == str(tmp_path / "c.db")
    (event,) = _events(span, "quiesce.checkpoint")
    checkpoints = [r.seq for r in buf.log if r.op == "checkpoint"]
    assert [event["quiesce.seq"]] == checkpoints
    again = Buffer(log=SQLiteLog(tmp_path / "c.db"))
    assert [e.id for e in again.head().entries()] == ["e0", "e1", "e2"]
    assert _spans(exporter, "quiesce.recover")[-1].attributes["quiesce.records"] >= 1  # type: ignore[index]
    again.sink.close()  # type: ignore[union-attr]


@pytest.mark.anyio
async def test_a_shared_buffers_forwarded_write_lag_and_failover(
    otel: Any, pg_dsn: str, anyio_backend: str
) -> None:
    """Two members of one shared buffer on the tests' PostgreSQL server: a
    replica's write is a ``quiesce.shared.append`` span marked forwarded; a
    replica told (a ``NOTIFY`` on the log's channel, as a sequencer's commit
    sends) of records it has not read reports them as ``quiesce.replica.lag``
    until it has applied them; when the sequencer leaves, the replica's
    takeover is a ``quiesce.shared.failover`` span with the new and previous
    epochs, and ``quiesce.shared.failovers`` counts it."""
    import psycopg

    from quiesce import open_shared_buffer

    exporter, reader, _ = otel
    fast = {"lease": 3.0, "poll": 0.2, "timeout": 5.0}
    started = anyio.Event()
    leave = anyio.Event()
    members: dict[str, Any] = {}

    async def sequencer() -> None:
        async with open_shared_buffer(pg_dsn, "obs", member_id="a", **fast) as a:
            members["a"] = a
            started.set()
            await leave.wait()

    def lag_of(member: str) -> list[Any]:
        return [
            v
            for v, attrs in _points(reader).get("quiesce.replica.lag", [])
            if attrs["quiesce.member.id"] == member
        ]

    async with anyio.create_task_group() as tg:
        tg.start_soon(sequencer)
        with anyio.fail_after(30):
            await started.wait()
        async with open_shared_buffer(pg_dsn, "obs", member_id="b", **fast) as b:
            a = members["a"]
            assert (a.role, b.role) == ("sequencer", "replica")
            await b.append(Entry("x", Kind.REASONING, "x"))
            (append,) = _spans(exporter, "quiesce.shared.append")
            assert dict(append.attributes or {}) == {
                "gen_ai.memory.store.id": "obs",
                "quiesce.operation": "append",
                "quiesce.role": "replica",
                "quiesce.member.id": "b",
                "quiesce.forwarded": True,
            }
            assert lag_of("b") == [0]
            applied = b.stats().applied_seq
            with psycopg.connect(pg_dsn, autocommit=True) as conn:
                conn.execute("SELECT pg_notify(%s, %s)", (a.local.sink.channel, str(applied + 4)))
            with anyio.fail_after(10):
                while b.stats().lag != 5:
                    await anyio.sleep(0.02)
            assert lag_of("b") == [5]
            for i in range(5):
                await a.append(Entry(f"y{i}", Kind.REASONING, f"y{i}"))
            await a.flush()
            await b.wait_applied(a.version)
            with anyio.fail_after(10):
                while b.stats().lag:
                    await anyio.sleep(0.02)
            assert lag_of("b") == [0]
            assert not _spans(exporter, "quiesce.shared.failover")
            leave.set()
            with anyio.fail_after(30):
                while not _spans(exporter, "quiesce.shared.failover"):
                    await anyio.sleep(0.02)
            assert b.role == "sequencer"
            (failover,) = _spans(exporter, "quiesce.shared.failover")
            attrs = dict(failover.attributes or {})
            assert attrs["gen_ai.memory.store.id"] == "obs"
            assert attrs["quiesce.member.id"] == "b"
            assert (attrs["quiesce.epoch.previous"], attrs["quiesce.epoch"]) == (1, 2)
            assert attrs["quiesce.applied_seq"] == b.stats().applied_seq
            assert failover.start_time is not None and failover.end_time is not None
            assert failover.start_time <= failover.end_time
            counts = [
                (v, a["quiesce.role"])
                for v, a in _points(reader)["quiesce.shared.failovers"]
                if a["quiesce.member.id"] == "b"
            ]
            assert counts == [(1, "sequencer")]
            assert [e.id for e in b.head().entries()] == ["x", *(f"y{i}" for i in range(5))]


def test_escalations_are_events_and_counted(otel: Any) -> None:
    """An escalation raised outside the core (an adapter's OSCILLATION, the
    reader alarm) is an event on the current span and a count by kind."""
    from quiesce import EscalationKind

    exporter, reader, provider = otel
    buf = Buffer()
    with provider.get_tracer("app").start_as_current_span("invoke_agent"):
        buf.escalate(
            EscalationKind.OSCILLATION, "pruned and re-admitted twice", data={"ids": ["a"]}
        )
    (span,) = [s for s in exporter.get_finished_spans() if s.name == "invoke_agent"]
    (event,) = _events(span, "quiesce.escalation")
    assert event["quiesce.escalation.kind"] == "oscillation"
    points = [
        (p.value, dict(p.attributes or {}))
        for rm in reader.get_metrics_data().resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
        if m.name == "quiesce.escalations"
        for p in m.data.data_points
    ]
    assert (
        1,
        {"gen_ai.memory.store.id": f"memory:{id(buf):x}", "quiesce.escalation.kind": "oscillation"},
    ) in points


def test_instrumenting_twice_warns_and_uninstrument_restores(otel: Any) -> None:
    inst = QuiesceInstrumentor()
    assert inst is QuiesceInstrumentor()
    wrapped = CoreBuffer.__dict__["prune"]
    with pytest.warns(RuntimeWarning, match="already instrumented"):
        inst.instrument()
    assert CoreBuffer.__dict__["prune"] is wrapped
    inst.uninstrument()
    assert CoreBuffer.__dict__["prune"] is wrapped.__wrapped__
    assert not inst.is_instrumented_by_opentelemetry
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        inst.instrument()  # the fixture uninstruments again


class _Raising(SpanProcessor):
    def on_start(self, span: Any, parent_context: Any = None) -> None:
        raise RuntimeError("processor broke on start")

    def on_end(self, span: Any) -> None:
        raise RuntimeError("processor broke on end")


def test_a_raising_processor_never_reaches_the_caller() -> None:
    """The SDK calls a span processor inside ``start_span``/``end``: one that
    raises is counted, and ``prune`` returns its report all the same."""
    provider = TracerProvider()
    provider.add_span_processor(_Raising())
    inst = QuiesceInstrumentor()
    inst.instrument(tracer_provider=provider)
    try:
        before = inst.errors
        buf = Buffer()
        buf.append(Entry("a", Kind.REASONING, "x"))
        report = buf.prune(["a"], reason="r")
        assert report["a"].status.value == "pruned"
        assert "a" in buf.tombstones
        assert inst.errors > before
        buf._check(expect_no_pins=True)
    finally:
        inst.uninstrument()


class _RaisingExporter(InMemorySpanExporter):
    def export(self, spans: Any) -> Any:
        raise RuntimeError("exporter broke")


@pytest.mark.anyio
async def test_a_raising_exporter_never_reaches_the_caller(
    anyio_backend: str, tmp_path: Path
) -> None:
    """An exporter that raises on every span (behind the SDK's own
    processor) changes nothing for the buffer: the prune's report, its
    removal at the grace point, the flush and the log are what they are
    without telemetry."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(_RaisingExporter()))
    inst = QuiesceInstrumentor()
    inst.instrument(tracer_provider=provider)
    try:
        async with open_buffer(log=SQLiteLog(tmp_path / "x.db")) as buf:
            buf.append(Entry("a", Kind.REASONING, "x"))
            with buf.snapshot():
                report = await buf.aprune(["a"], reason="r")
            await buf.quiesce()
            await buf.aflush()
            assert report["a"].status.value == "deferred"
            assert "a" in buf.tombstones
            version = buf.version
        buf.sink.close()  # type: ignore[union-attr]
    finally:
        inst.uninstrument()
    again = Buffer(log=SQLiteLog(tmp_path / "x.db"))
    assert again.version == version
    assert "a" in again.tombstones
    again.sink.close()  # type: ignore[union-attr]


def test_nothing_is_imported_or_emitted_without_it() -> None:
    code = (
        "import sys, quiesce\n"
        "b = quiesce.Buffer(); b.append(quiesce.Entry('a', quiesce.Kind.REASONING, 'x'))\n"
        "b.prune(['a'], reason='r')\n"
        "print(any(m.startswith('opentelemetry') for m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
    assert trace.get_tracer_provider() is not None


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_inside_pydantic_ai_instrumentation(anyio_backend: str) -> None:
    """pydantic-ai with its own OpenTelemetry instrumentation on, quiesce's
    history processor and a pruner: the sync and prune-round spans are
    descendants of pydantic-ai's agent-run span, in one trace. (asyncio
    only: pydantic-ai.)"""
    from pydantic_ai import Agent
    from pydantic_ai.capabilities import Instrumentation, ProcessHistory
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel
    from pydantic_ai.models.instrumented import InstrumentationSettings

    import quiesce.integrations.pydantic_ai as qpa
    from quiesce import HeuristicPruner

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    inst = QuiesceInstrumentor()
    inst.instrument(tracer_provider=provider)
    try:

        def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            return ModelResponse(parts=[TextPart("ok")])

        async with open_buffer() as buf:
            agent = Agent(
                FunctionModel(model),
                capabilities=[
                    Instrumentation(InstrumentationSettings(tracer_provider=provider)),
                    ProcessHistory(qpa.QuiesceHistoryProcessor(buf, pruner=HeuristicPruner())),
                ],
            )
            result = await agent.run("hello")
            assert result.output == "ok"
    finally:
        inst.uninstrument()
    spans = exporter.get_finished_spans()
    by_id = {s.context.span_id: s for s in spans}

    def ancestors(s: ReadableSpan) -> list[str]:
        out = []
        while s.parent is not None and s.parent.span_id in by_id:
            s = by_id[s.parent.span_id]
            out.append(s.name)
        return out

    mine = [s for s in spans if s.name.startswith(("update_memory", "quiesce.prune_round"))]
    assert {s.name.split(" ")[0] for s in mine} >= {"update_memory", "quiesce.prune_round"}
    runs = [s for s in spans if "agent run" in s.name or s.name.startswith("invoke_agent")]
    assert runs, [s.name for s in spans]
    for s in mine:
        assert s.context.trace_id == runs[0].context.trace_id
        assert runs[0].name in ancestors(s), (s.name, ancestors(s))


_AUTOGEN_CHILD = r"""
import asyncio, json
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from autogen_agentchat.agents import AssistantAgent
from autogen_ext.models.replay import ReplayChatCompletionClient
import quiesce.integrations.autogen as qag
from quiesce import HeuristicPruner, open_buffer
from quiesce.otel import QuiesceInstrumentor

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)  # AutoGen traces through the global provider
QuiesceInstrumentor().instrument()

async def main():
    async with open_buffer() as buf:
        agent = AssistantAgent(
            "assistant",
            model_client=ReplayChatCompletionClient(["ok"]),
            model_context=qag.QuiesceChatCompletionContext(buf, pruner=HeuristicPruner()),
        )
        result = await agent.run(task="hello")
        assert result.messages[-1].content == "ok"

asyncio.run(main())
print(json.dumps([
    {"name": s.name, "id": s.context.span_id, "trace": s.context.trace_id,
     "parent": s.parent.span_id if s.parent else None}
    for s in exporter.get_finished_spans()
]))
"""


def test_inside_autogen_instrumentation() -> None:
    """AutoGen's own GenAI tracing (``invoke_agent`` spans, through the global
    tracer provider: hence a child process) with quiesce's model context and a
    pruner: quiesce's prune-round span is a descendant of AutoGen's
    ``invoke_agent`` span. (asyncio only: AutoGen's agent.)"""
    out = subprocess.run(
        [sys.executable, "-c", _AUTOGEN_CHILD], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-3000:]
    spans = json.loads(out.stdout.strip().splitlines()[-1])
    by_id = {s["id"]: s for s in spans}

    def ancestors(s: dict[str, Any]) -> list[str]:
        names = []
        while s["parent"] in by_id:
            s = by_id[s["parent"]]
            names.append(s["name"])
        return names

    rounds = [s for s in spans if s["name"] == "quiesce.prune_round"]
    assert rounds, [s["name"] for s in spans]
    for s in rounds:
        assert any(n.startswith("invoke_agent") for n in ancestors(s)), ancestors(s)
