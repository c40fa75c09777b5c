"""The metrics of :mod:`quiesce.otel`: observable instruments read from each
live buffer's ``stats()`` at collection time, and the two pushed ones.

What it keeps true: a collection never raises into the SDK and never
reaches a buffer's callers. Each buffer is read in its own guard: an
exception (a closed buffer's ``stats()``, say) is handed to ``failed`` and
that buffer is skipped, the others are still reported; a shared member that
has not started (or has left) raises ``BufferClosed``, which is skipped
silently. A collection is O(live buffers); it reads ``stats()``, a frozen
picture, so it takes no buffer lock for longer than ``stats()`` does.
Imported only by :mod:`quiesce.otel` (so only with the ``otel`` extra).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from opentelemetry import metrics

from . import BufferClosed

__all__ = ["register_metrics"]

_STORE = "gen_ai.memory.store.id"

#: Per buffer: the (value, attributes) pairs it reports.
Rows = Callable[[Any], Iterable[tuple[Any, dict[str, Any]]]]


def _observer(
    buffers: Callable[[], list[Any]],
    rows: Rows,
    failed: Callable[[BaseException], None],
    skip: tuple[type[BaseException], ...] = (),
) -> Callable[[Any], Iterable[metrics.Observation]]:
    """An observable instrument's callback: ``rows(buf)`` of each of
    ``buffers()``, ``None`` values left out, each buffer guarded alone."""

    def observe(_options: Any) -> Iterable[metrics.Observation]:
        out = []
        for buf in buffers():
            try:
                for value, attrs in rows(buf):
                    if value is not None:
                        out.append(metrics.Observation(value, attrs))
            except skip:
                continue
            except Exception as exc:
                failed(exc)
        return out

    return observe


def register_metrics(
    meter: metrics.Meter,
    live: Callable[[], list[Any]],
    live_shared: Callable[[], list[Any]],
    store_id: Callable[[Any], str],
    failed: Callable[[BaseException], None],
) -> tuple[Any, Any]:
    """Create every quiesce instrument on ``meter`` (names in
    :mod:`quiesce.otel`'s docstring) over the buffers ``live()`` and the
    shared members ``live_shared()``; return the escalations counter and
    the flush-duration histogram, which the instrumentor records into."""

    def gauge(name: str, unit: str, desc: str, value: Callable[[Any], Any]) -> None:
        def rows(buf: Any) -> Iterable[tuple[Any, dict[str, Any]]]:
            return [(value(buf.stats()), {_STORE: store_id(buf)})]

        meter.create_observable_gauge(
            name, [_observer(live, rows, failed)], unit=unit, description=desc
        )

    def by(label: str, pairs: Callable[[Any], Iterable[tuple[Any, Any]]]) -> Rows:
        """Rows of one buffer, one per ``(label value, n)`` of its stats."""

        def rows(buf: Any) -> Iterable[tuple[Any, dict[str, Any]]]:
            s = buf.stats()
            store = store_id(buf)
            return [(n, {_STORE: store, label: name}) for name, n in pairs(s)]

        return rows

    gauge("quiesce.readers.pinned", "{reader}", "readers pinned now", lambda s: s.pinned)
    gauge(
        "quiesce.readers.oldest_pin_age",
        "s",
        "age of the oldest pinned reader",
        lambda s: s.oldest_pin_age,
    )
    gauge(
        "quiesce.removals.deferred",
        "{entry}",
        "removals waiting for a grace point",
        lambda s: s.deferred,
    )
    gauge("quiesce.tombstones", "{tombstone}", "tombstones", lambda s: s.tombstones)
    gauge(
        "quiesce.tombstone_to_edit_ratio",
        "1",
        "tombstones per removal edit (1 when every removal left a tombstone)",
        lambda s: s.tombstone_to_edit_ratio,
    )
    gauge("quiesce.log.pending", "{record}", "records not durable yet", lambda s: s.log_pending)
    refusals = by(
        "quiesce.refusal",
        lambda s: ((getattr(r, "value", str(r)), n) for r, n in s.refusals.items()),
    )
    meter.create_observable_counter(
        "quiesce.refusals",
        [_observer(live, refusals, failed)],
        unit="{request}",
        description="refusals by reason",
    )
    readmissions = by(
        "quiesce.outcome",
        lambda s: (("refused", s.readmissions_refused), ("overridden", s.readmissions_overridden)),
    )
    meter.create_observable_counter(
        "quiesce.readmissions",
        [_observer(live, readmissions, failed)],
        unit="{entry}",
        description="re-admissions of tombstoned content, refused or overridden",
    )
    escalations = meter.create_counter(
        "quiesce.escalations",
        unit="{escalation}",
        description="escalations raised outside the core, by kind (oscillations included)",
    )

    def shared(name: str, unit: str, desc: str, field: str, *, counter: bool = True) -> None:
        def rows(buf: Any) -> Iterable[tuple[Any, dict[str, Any]]]:
            s = buf.stats()
            attrs = {
                _STORE: buf.buffer_id,
                "quiesce.member.id": s.member_id,
                "quiesce.role": s.role,
            }
            return [(getattr(s, field), attrs)]

        observe = _observer(live_shared, rows, failed, (BufferClosed,))
        create = meter.create_observable_counter if counter else meter.create_observable_gauge
        create(name, [observe], unit=unit, description=desc)

    shared("quiesce.shared.failovers", "{failover}", "lease takeovers by this member", "failovers")
    shared(
        "quiesce.shared.applied_seq",
        "{record}",
        "log records applied by this member",
        "applied_seq",
    )
    shared(
        "quiesce.replica.lag",
        "{record}",
        "log records a member has heard of (NOTIFY or read) and not applied yet",
        "lag",
        counter=False,
    )
    flush_hist = meter.create_histogram(
        "quiesce.flush.duration", unit="s", description="time of one flush of the log"
    )
    return escalations, flush_hist
