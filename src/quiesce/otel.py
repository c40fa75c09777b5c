"""OpenTelemetry for quiesce: what each context edit did, inside the user's own traces.

``QuiesceInstrumentor().instrument(tracer_provider=None, meter_provider=None)``
follows the OpenTelemetry contrib instrumentors' convention (a singleton;
``uninstrument()`` puts everything back; instrumenting twice warns and does
nothing). This module is the only one that imports ``opentelemetry`` (the
``quiesce[otel]`` extra, ``opentelemetry-api`` only): ``import quiesce``
imports none of it, and nothing is emitted until ``instrument()`` is called.

What it keeps true:

* **The fast paths cost the same.** ``mark_stale``, ``snapshot()``, pins and
  ``append`` are never wrapped. Only the operations that can wait or refuse
  are: ``prune``, ``edit``, a removal applied at its grace point
  (``apply_due``), ``flush`` (and the checkpoints it writes), recovery (a
  buffer opened on a log), a shared buffer's writes (forwarded by a
  replica) and its failovers, the reader-age alarm, and each integration's
  sync and prune round.
* **Telemetry never reaches the buffer's callers.** Every call into the
  OpenTelemetry API (starting a span, an event, a metric, a processor or
  exporter behind them that raises) is guarded: a failure is counted in
  :attr:`QuiesceInstrumentor.errors` and logged once on the ``logging``
  logger ``"quiesce.otel"``, like other untrusted callbacks, and the
  operation's own result or exception is returned untouched.
* **Bodies are never attributes.** Spans and events carry ids, content
  hashes, sizes, versions, statuses, refusals, actors, turns and reasons —
  never an entry's body, unless ``capture_content=True``.

Names. Spans follow the GenAI memory conventions where they fit:
``delete_memory`` for a prune and for a removal at its grace point,
``update_memory`` for an edit plan, each with ``gen_ai.operation.name``,
``gen_ai.memory.store.id`` (the buffer: a shared buffer's id, a log's path
or ``buffer_id``, else ``memory:<hex>``) and, for one id,
``gen_ai.memory.record.id``; the rest are ``quiesce.*`` spans
(``quiesce.flush``, ``quiesce.recover``, ``quiesce.shared.<op>``,
``quiesce.shared.failover``, ``quiesce.reader_alarm``,
``quiesce.prune_round``) with ``quiesce.*`` attributes. A failover span
(a member took the writer lease from another holder: the new and previous
epochs, the records it read to serve) runs from the take to serving.
Span events: ``quiesce.tombstone`` per removal,
``quiesce.refusal`` per refused id or plan, ``quiesce.escalation`` per
escalation (a ``READER_PINNED`` one names the reader's task and version:
the reader that holds a removal back). Spans are started as children of the
current span, so inside a framework's agent or model-call span they appear in
the user's own trace (the context follows the runtime's worker threads). A
removal applied later by the scheduler's own task is a root span that
*links* to the span that staged it.

Metrics (observable, read from each live buffer's ``stats()`` at collection
time): ``quiesce.readers.pinned``, ``quiesce.readers.oldest_pin_age``,
``quiesce.removals.deferred``, ``quiesce.tombstones``,
``quiesce.tombstone_to_edit_ratio``, ``quiesce.refusals`` (by
``quiesce.refusal``), ``quiesce.readmissions`` (by ``quiesce.outcome``:
refused, overridden), ``quiesce.log.pending``; every shared member (from
its start) adds ``quiesce.shared.failovers``, ``quiesce.shared.applied_seq``
and the gauge ``quiesce.replica.lag`` (log records the member has heard of,
through a ``NOTIFY`` or a read, and not applied yet: ``SharedStats.lag``).
A counter, ``quiesce.escalations`` (by kind: oscillations, pinned readers,
backlog), counts escalations raised outside the core; a histogram,
``quiesce.flush.duration`` (seconds), times every flush.

Threads: wrappers run on whatever thread calls the operation; the set of
live buffers is a ``WeakSet`` guarded by a lock. Cancellation: an async
wrapper ends its span (with the exception recorded) when the operation is
cancelled, and re-raises the cancellation.
"""

from __future__ import annotations

import functools
import importlib
import logging
import sys
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.trace import Span, Status, StatusCode

from . import __version__ as _VERSION
from ._otel_events import clean as _clean
from ._otel_events import escalation_attrs, record_events
from ._otel_metrics import register_metrics

__all__ = ["QuiesceInstrumentor"]

_logger = logging.getLogger("quiesce.otel")

#: staged removal groups whose staging span is remembered for a link
_MAX_STAGING = 10_000

#: (module, class or None, attribute, kind of wrapper). A name that is not
#: there (an optional framework not installed) is skipped.
_TARGETS: tuple[tuple[str, str | None, str, str], ...] = (
    ("quiesce._core.buffer", "Buffer", "prune", "prune"),
    ("quiesce._core.buffer", "Buffer", "edit", "edit"),
    ("quiesce._core.buffer", "Buffer", "apply_due", "apply_due"),
    ("quiesce._core.buffer", "Buffer", "flush", "flush"),
    ("quiesce._core.buffer", "Buffer", "__init__", "init"),
    ("quiesce._core.buffer", "Buffer", "escalate", "escalate"),
    # the alarm task and check_reader_ages() both go through this one method
    ("quiesce._runtime", "RuntimeBuffer", "_check_reader_ages", "alarm"),
    ("quiesce._shared.buffer", "SharedBuffer", "append", "shared"),
    ("quiesce._shared.buffer", "SharedBuffer", "mark_stale", "shared"),
    ("quiesce._shared.buffer", "SharedBuffer", "prune", "shared"),
    ("quiesce._shared.buffer", "SharedBuffer", "edit", "shared"),
    ("quiesce._shared.buffer", "SharedBuffer", "flush", "shared"),
    # every member is measured from its start (replica lag, failovers), and
    # a member that takes the writer lease from another holder is a span
    ("quiesce._shared.member", "_Member", "__init__", "shared_init"),
    ("quiesce._shared.lease", "_Leases", "_try_take_lease", "failover"),
    ("quiesce.integrations._glue", None, "prune_round", "round"),
    # every integration syncs its framework's messages through these (a
    # history as a diff, or new messages alone)
    ("quiesce.integrations._store", None, "sync_units", "sync"),
    ("quiesce.integrations._store", None, "async_sync_units", "async_sync"),
    ("quiesce.integrations._store", None, "sync_history", "sync"),
    ("quiesce.integrations._store", None, "async_sync_history", "async_sync"),
)

#: The integrations, each wrapped where its hooks look ``prune_round`` up
#: (imported by name from ``_glue``): only those already imported when
#: ``instrument()`` runs (importing one would import its framework); one
#: imported later takes ``_glue.prune_round`` wrapped. Their syncs go through
#: ``_store``'s functions, wrapped above, whenever the module is imported.
_INTEGRATIONS = ("langchain", "pydantic_ai", "openai_agents", "autogen")


class QuiesceInstrumentor:
    """Instruments quiesce with OpenTelemetry (see the module docstring).

    A singleton, like the contrib instrumentors: every
    ``QuiesceInstrumentor()`` is the same object."""

    _instance: QuiesceInstrumentor | None = None
    _lock = threading.Lock()

    def __new__(cls) -> QuiesceInstrumentor:
        with cls._lock:
            if cls._instance is None:
                inst = super().__new__(cls)
                inst._init()
                cls._instance = inst
            return cls._instance

    def _init(self) -> None:
        self._patched: list[tuple[Any, str, Any]] = []
        self._tracer: trace.Tracer | None = None
        self._meter: metrics.Meter | None = None
        self._flush_hist: Any = None
        self._buffers: weakref.WeakSet[Any] = weakref.WeakSet()
        self._buffers_lock = threading.Lock()
        self._staging: dict[tuple[int, int], Any] = {}
        self._escalations: Any = None
        self._shared: weakref.WeakSet[Any] = weakref.WeakSet()
        self._capture = False
        self._warned = False
        #: telemetry calls that raised and were swallowed
        self.errors = 0

    # -- the contrib convention -------------------------------------------------

    @property
    def is_instrumented_by_opentelemetry(self) -> bool:
        return bool(self._patched)

    def instrument(
        self,
        *,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: metrics.MeterProvider | None = None,
        capture_content: bool = False,
    ) -> None:
        """Start emitting. ``None`` providers mean the global ones. Called
        again while instrumented: a warning, and nothing changes."""
        with self._lock:
            if self._patched:
                warnings.warn(
                    "QuiesceInstrumentor is already instrumented; call uninstrument() first",
                    RuntimeWarning,
                    stacklevel=2,
                )
                return
            self._tracer = trace.get_tracer("quiesce", _VERSION, tracer_provider=tracer_provider)
            self._meter = metrics.get_meter("quiesce", _VERSION, meter_provider=meter_provider)
            self._capture = capture_content
            self._escalations, self._flush_hist = register_metrics(
                self._meter, self._live, self._live_shared, self._store_id, self._failed
            )
            for module, owner, name, kind in _TARGETS:
                self._patch(module, owner, name, kind)
            for short in _INTEGRATIONS:
                module = "quiesce.integrations." + short
                if module in sys.modules:
                    self._patch(module, None, "prune_round", "round")

    def uninstrument(self) -> None:
        """Put every wrapped function back; stop emitting. Idempotent."""
        with self._lock:
            for owner, name, original in reversed(self._patched):
                setattr(owner, name, original)
            self._patched.clear()
            self._tracer = None
            with self._buffers_lock:
                self._buffers = weakref.WeakSet()
                self._shared = weakref.WeakSet()

    # -- patching ---------------------------------------------------------------

    def _patch(self, module: str, owner_name: str | None, name: str, kind: str) -> None:
        try:
            mod = importlib.import_module(module)
        except ImportError:  # an optional extra that is not installed
            return
        owner = mod if owner_name is None else getattr(mod, owner_name, None)
        original = None if owner is None else owner.__dict__.get(name)
        if original is None:
            return
        wrapper = getattr(self, "_wrap_" + kind)(original)
        functools.update_wrapper(wrapper, original)
        setattr(owner, name, wrapper)
        self._patched.append((owner, name, original))

    # -- guarded telemetry --------------------------------------------------------

    def _failed(self, exc: BaseException) -> None:
        self.errors += 1
        if not self._warned:
            self._warned = True
            _logger.warning("telemetry failed and was ignored: %r", exc)

    @contextmanager
    def _span(self, name: str, attrs: Mapping[str, Any]) -> Iterator[Span | None]:
        """A span around the body; a telemetry failure yields ``None``
        (the body runs all the same) and never escapes."""
        tracer = self._tracer
        span: Span | None = None
        current: Any = None
        if tracer is not None:
            try:
                span = tracer.start_span(name, attributes=_clean(attrs))
                current = trace.use_span(span, end_on_exit=False)
                current.__enter__()
            except Exception as exc:
                self._failed(exc)
                if span is not None:
                    self._guard(span.end)
                span = current = None
        try:
            yield span
        except BaseException as exc:
            if span is not None:
                try:
                    span.record_exception(exc)
                    span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
                except Exception as tel:
                    self._failed(tel)
            raise
        finally:
            if span is not None:
                try:
                    current.__exit__(None, None, None)
                    span.end()
                except Exception as exc:
                    self._failed(exc)

    def _read(self, fn: Callable[[], Any], default: Any) -> Any:
        """``fn()``, or ``default`` if it raises (counted): what a wrapper
        reads before the call must not stop the call."""
        try:
            return fn()
        except Exception as exc:
            self._failed(exc)
            return default

    def _guard(self, fn: Callable[[], None]) -> None:
        try:
            fn()
        except Exception as exc:
            self._failed(exc)

    # -- what each operation reports ------------------------------------------------

    def _store_id(self, buf: Any) -> str:
        for source in (buf, getattr(buf, "sink", None)):
            for attr in ("buffer_id", "path"):
                value = getattr(source, attr, None)
                if isinstance(value, str):
                    return value
        return f"memory:{id(buf):x}"

    def _log_events(
        self, span: Span | None, buf: Any, start: int, *, stages: str | None = None
    ) -> None:
        """Events for the records ``buf`` logged from ``start`` on: one per
        tombstone, refusal and escalation. ``stages``: the op (``prune`` or
        ``edit``) whose staged groups this span made, remembered for the link
        from their removal (only the span that made the request, never one
        that merely saw its record: a scheduler pass that started meanwhile)."""
        if span is None:
            return
        log = buf.log
        for rec in log[start:] if len(log) > start else ():
            events, staged, settled = record_events(rec, stages)
            if staged:
                self._remember_staging(buf, staged, span)
            if settled:
                self._link_staging(buf, settled, span)
            for name, attrs in events:
                span.add_event(name, attrs)

    def _remember_staging(self, buf: Any, staged: Iterable[Any], span: Span) -> None:
        """Remember which span staged each removal group, so the span that
        applies it at its grace point (often in the scheduler's task, outside
        the caller's trace) links back to it. Bounded: the oldest are dropped."""
        context = span.get_span_context()
        with self._buffers_lock:
            for gid in staged:
                self._staging[(id(buf), int(gid))] = context
            while len(self._staging) > _MAX_STAGING:
                self._staging.pop(next(iter(self._staging)))

    def _link_staging(self, buf: Any, gids: Iterable[Any], span: Span) -> None:
        add_link = getattr(span, "add_link", None)
        with self._buffers_lock:
            contexts = [self._staging.pop((id(buf), int(g)), None) for g in gids]
        if add_link is not None:
            for context in contexts:
                if context is not None:
                    add_link(context, {"quiesce.link": "staged by"})

    def _escalation_event(
        self, span: Span, kind: object, text: object, detail: Mapping[str, Any]
    ) -> None:
        span.add_event("quiesce.escalation", escalation_attrs(kind, text, detail.get("data")))

    # -- the wrappers -------------------------------------------------------------

    def _wrap_prune(self, original: Callable[..., Any]) -> Callable[..., Any]:
        inst = self

        def prune(buf: Any, ids: Any, *args: Any, **kwargs: Any) -> Any:
            if isinstance(ids, str) or not isinstance(ids, Iterable):
                return original(buf, ids, *args, **kwargs)  # the core's own TypeError
            listed = list(ids)
            attrs = {
                "gen_ai.operation.name": "delete_memory",
                "gen_ai.memory.store.id": inst._store_id(buf),
                "quiesce.operation": "prune",
                "quiesce.ids.count": len(listed),
                "quiesce.reason": kwargs.get("reason"),
                "quiesce.actor": kwargs.get("actor"),
                "quiesce.turn": kwargs.get("turn"),
            }
            if len(listed) == 1:
                attrs["gen_ai.memory.record.id"] = listed[0]
            start = len(buf.log)
            with inst._span("delete_memory " + inst._store_id(buf), attrs) as span:
                report = original(buf, listed, *args, **kwargs)
                if span is not None:
                    inst._guard(lambda: inst._prune_report(span, buf, report, start))
                return report

        return prune

    def _prune_report(self, span: Span, buf: Any, report: Any, start: int) -> None:
        statuses: dict[str, int] = {}
        for eid, outcome in report.items():
            status = outcome.status.value
            statuses[status] = statuses.get(status, 0) + 1
            if outcome.refusal is not None:
                span.add_event(
                    "quiesce.refusal",
                    {
                        "gen_ai.memory.record.id": eid,
                        "quiesce.refusal": outcome.refusal.value,
                        "quiesce.status": status,
                    },
                )
        for status, n in statuses.items():
            span.set_attribute(f"quiesce.status.{status}", n)
        span.set_attribute("quiesce.version", buf.version)
        self._log_events(span, buf, start, stages="prune")

    def _wrap_edit(self, original: Callable[..., Any]) -> Callable[..., Any]:
        inst = self

        def edit(buf: Any, plan: Any, *args: Any, **kwargs: Any) -> Any:
            ops = getattr(plan, "ops", ())
            attrs = {
                "gen_ai.operation.name": "update_memory",
                "gen_ai.memory.store.id": inst._store_id(buf),
                "quiesce.operation": "edit",
                "quiesce.ops": [type(op).__name__ for op in ops],
                "quiesce.reason": getattr(plan, "reason", None),
                "quiesce.actor": getattr(plan, "actor", None),
                "quiesce.turn": getattr(plan, "turn", None),
                "quiesce.base": getattr(plan, "base", None),
            }
            start = len(buf.log)
            with inst._span("update_memory " + inst._store_id(buf), attrs) as span:
                report = original(buf, plan, *args, **kwargs)
                if span is not None:

                    def done() -> None:
                        span.set_attribute("quiesce.applied", bool(report.applied))
                        span.set_attribute("quiesce.version", buf.version)
                        inst._log_events(span, buf, start, stages="edit")

                    inst._guard(done)
                return report

        return edit

    def _wrap_apply_due(self, original: Callable[..., Any]) -> Callable[..., Any]:
        inst = self

        def apply_due(buf: Any, *args: Any, **kwargs: Any) -> Any:
            if not inst._read(buf.staged, True):  # nothing staged: no span for an idle wake-up
                return original(buf, *args, **kwargs)
            start = len(buf.log)
            attrs = {
                "gen_ai.operation.name": "delete_memory",
                "gen_ai.memory.store.id": inst._store_id(buf),
                "quiesce.operation": "apply_due",
            }
            with inst._span("delete_memory " + inst._store_id(buf), attrs) as span:
                removed = original(buf, *args, **kwargs)
                if span is not None:

                    def done() -> None:
                        span.set_attribute("quiesce.removed.count", len(removed))
                        span.set_attribute("quiesce.version", buf.version)
                        inst._log_events(span, buf, start)

                    inst._guard(done)
                return removed

        return apply_due

    def _wrap_flush(self, original: Callable[..., Any]) -> Callable[..., Any]:
        inst = self

        def flush(buf: Any, *args: Any, **kwargs: Any) -> Any:
            pending = inst._read(lambda: buf.pending_records, 1)
            if not pending and not kwargs.get("checkpoint"):
                return original(buf, *args, **kwargs)
            attrs = {
                "gen_ai.memory.store.id": inst._store_id(buf),
                "quiesce.records.pending": pending,
                "quiesce.checkpoint": bool(kwargs.get("checkpoint")),
            }
            start = len(buf.log)
            t0 = time.perf_counter()
            try:
                with inst._span("quiesce.flush", attrs) as span:
                    result = original(buf, *args, **kwargs)
                    if span is not None:
                        inst._guard(lambda: inst._log_events(span, buf, start))
                    return result
            finally:
                elapsed = time.perf_counter() - t0
                hist = inst._flush_hist
                if hist is not None:
                    store = inst._store_id(buf)
                    inst._guard(lambda: hist.record(elapsed, {"gen_ai.memory.store.id": store}))

        return flush

    def _wrap_init(self, original: Callable[..., Any]) -> Callable[..., Any]:
        inst = self

        def __init__(buf: Any, *args: Any, **kwargs: Any) -> None:
            log = kwargs.get("log", args[0] if args else None)
            if log is None:
                original(buf, *args, **kwargs)
            else:
                attrs = {"quiesce.operation": "recover", "quiesce.sink": type(log).__name__}
                with inst._span("quiesce.recover", attrs) as span:
                    original(buf, *args, **kwargs)
                    if span is not None:

                        def done() -> None:
                            span.set_attribute("gen_ai.memory.store.id", inst._store_id(buf))
                            span.set_attribute("quiesce.version", buf.version)
                            span.set_attribute("quiesce.records", len(buf.log))

                        inst._guard(done)
            with inst._buffers_lock:
                inst._buffers.add(buf)

        return __init__

    def _wrap_alarm(self, original: Callable[..., Any]) -> Callable[..., Any]:
        inst = self

        def _check_reader_ages(buf: Any, *args: Any, **kwargs: Any) -> Any:
            escalations = original(buf, *args, **kwargs)
            if escalations and inst._tracer is not None:

                def report() -> None:
                    attrs = {"gen_ai.memory.store.id": inst._store_id(buf)}
                    with inst._span("quiesce.reader_alarm", attrs) as span:
                        if span is not None:
                            for esc in escalations:
                                detail = {"data": dict(esc.data or {})}
                                inst._escalation_event(span, esc.kind.value, esc.detail, detail)

                inst._guard(report)
            return escalations

        return _check_reader_ages

    def _wrap_escalate(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """Escalations raised outside the core (the reader-age alarm, an
        adapter's ``OSCILLATION``): an event on the current span and one
        count of ``quiesce.escalations`` by kind."""
        inst = self

        def escalate(buf: Any, kind: Any, detail: Any, *args: Any, **kwargs: Any) -> Any:
            esc = original(buf, kind, detail, *args, **kwargs)
            if inst._tracer is not None:

                def report() -> None:
                    name = getattr(kind, "value", str(kind))
                    counter = inst._escalations
                    if counter is not None:
                        counter.add(
                            1,
                            {
                                "gen_ai.memory.store.id": inst._store_id(buf),
                                "quiesce.escalation.kind": name,
                            },
                        )
                    span = trace.get_current_span()
                    if span.is_recording():
                        inst._escalation_event(span, name, detail, {"data": kwargs.get("data")})

                inst._guard(report)
            return esc

        return escalate

    def _wrap_shared(self, original: Callable[..., Any]) -> Callable[..., Any]:
        inst = self
        op = original.__name__

        async def shared(sb: Any, *args: Any, **kwargs: Any) -> Any:
            with inst._buffers_lock:
                inst._shared.add(sb)
            attrs = {
                "gen_ai.memory.store.id": inst._store_id(sb),
                "quiesce.operation": op,
                "quiesce.role": getattr(sb, "role", None),
                "quiesce.member.id": getattr(sb, "member_id", None),
                "quiesce.forwarded": getattr(sb, "role", None) != "sequencer",
            }
            with inst._span("quiesce.shared." + op, attrs):
                return await original(sb, *args, **kwargs)

        return shared

    def _wrap_shared_init(self, original: Callable[..., Any]) -> Callable[..., Any]:
        inst = self

        def __init__(sb: Any, *args: Any, **kwargs: Any) -> None:
            original(sb, *args, **kwargs)
            with inst._buffers_lock:
                inst._shared.add(sb)

        return __init__

    def _wrap_failover(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """A member that took the writer lease from another holder (its
        ``failovers`` count rose) is a ``quiesce.shared.failover`` span from
        the attempt's start to when it serves: the take, reading the log to
        its end, attaching the sink. An attempt that finds the lease held (every
        heartbeat of a replica) or the first take of a new buffer is no span."""
        inst = self

        async def _try_take_lease(sb: Any, *args: Any, **kwargs: Any) -> Any:
            before = inst._read(lambda: sb.failovers, None)
            started = time.time_ns()
            took = await original(sb, *args, **kwargs)
            tracer = inst._tracer
            if took and tracer is not None and before is not None and sb.failovers > before:

                def report() -> None:
                    stats = sb.stats()
                    attrs = {
                        "gen_ai.memory.store.id": sb.buffer_id,
                        "quiesce.operation": "failover",
                        "quiesce.member.id": sb.member_id,
                        "quiesce.role": stats.role,
                        "quiesce.epoch": stats.epoch,
                        # a take is epoch + 1 of the holder it replaced
                        "quiesce.epoch.previous": stats.epoch - 1,
                        "quiesce.applied_seq": stats.applied_seq,
                        "quiesce.version": sb.version,
                    }
                    span = tracer.start_span(
                        "quiesce.shared.failover", attributes=_clean(attrs), start_time=started
                    )
                    span.end()

                inst._guard(report)
            return took

        return _try_take_lease

    def _wrap_round(self, original: Callable[..., Any]) -> Callable[..., Any]:
        inst = self

        async def prune_round(buffer: Any, pruner: Any, *args: Any, **kwargs: Any) -> Any:
            attrs = {
                "gen_ai.memory.store.id": inst._store_id(buffer),
                "quiesce.pruner": type(pruner).__name__ if pruner is not None else None,
            }
            with inst._span("quiesce.prune_round", attrs) as span:
                report = await original(buffer, pruner, *args, **kwargs)
                if span is not None and report is not None:
                    inst._guard(lambda: span.set_attribute("quiesce.applied", bool(report.applied)))
                return report

        return prune_round

    def _sync_attrs(self, buffer: Any, units: Any, kwargs: Mapping[str, Any]) -> dict[str, Any]:
        return {
            "gen_ai.operation.name": "update_memory",
            "gen_ai.memory.store.id": self._read(lambda: self._store_id(buffer), None),
            "quiesce.operation": "sync",
            "quiesce.framework": kwargs.get("framework"),
            "quiesce.messages.count": self._read(lambda: len(units), None),
        }

    def _sync_done(self, span: Span | None, buffer: Any, start: int | None) -> None:
        if span is not None and start is not None:

            def done() -> None:
                span.set_attribute("quiesce.version", buffer.version)
                span.set_attribute("quiesce.records", len(buffer.log) - start)

            self._guard(done)

    def _wrap_sync(self, original: Callable[..., Any]) -> Callable[..., Any]:
        inst = self

        def sync_units(buffer: Any, units: Any, *args: Any, **kwargs: Any) -> Any:
            attrs = inst._sync_attrs(buffer, units, kwargs)
            start = inst._read(lambda: len(buffer.log), None)
            with inst._span(f"update_memory {attrs['gen_ai.memory.store.id']}", attrs) as span:
                result = original(buffer, units, *args, **kwargs)
                inst._sync_done(span, buffer, start)
                return result

        return sync_units

    def _wrap_async_sync(self, original: Callable[..., Any]) -> Callable[..., Any]:
        inst = self

        async def async_sync_units(buffer: Any, units: Any, *args: Any, **kwargs: Any) -> Any:
            attrs = inst._sync_attrs(buffer, units, kwargs)
            start = inst._read(lambda: len(buffer.log), None)
            with inst._span(f"update_memory {attrs['gen_ai.memory.store.id']}", attrs) as span:
                result = await original(buffer, units, *args, **kwargs)
                inst._sync_done(span, buffer, start)
                return result

        return async_sync_units

    # -- metrics ----------------------------------------------------------------

    def _live_shared(self) -> list[Any]:
        with self._buffers_lock:
            return list(self._shared)

    def _live(self) -> list[Any]:
        with self._buffers_lock:
            return list(self._buffers)
