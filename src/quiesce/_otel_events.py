"""The span events of :mod:`quiesce.otel`: what a log record tells a trace.

What it keeps true: events are made from the records the buffer logged,
read through the record schema's parsers (:mod:`quiesce._core.wire`), so
a span reports exactly what the log holds; and an event's attributes are
ones OpenTelemetry accepts (:func:`clean`), never an entry's body. Pure
functions: no OpenTelemetry call, no lock, no I/O (the instrumentor adds
the events to its span, guarded). O(the record's detail).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from ._core.records import LogRecord
from ._core.wire import Op, parse_change, parse_escalate, parse_remove

__all__ = ["RecordEvents", "clean", "escalation_attrs", "record_events"]


def clean(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """Attributes OpenTelemetry accepts: ``None`` dropped, sequences as
    lists of str, anything else not a str/bool/int/float as its ``str``."""
    out: dict[str, Any] = {}
    for k, v in attrs.items():
        if v is None:
            continue
        if isinstance(v, (str, bool, int, float)):
            out[k] = v
        elif isinstance(v, (list, tuple)):
            out[k] = [str(x) for x in v]
        else:
            out[k] = str(v)
    return out


def escalation_attrs(kind: object, text: object, data: object) -> dict[str, Any]:
    """The attributes of a ``quiesce.escalation`` event (a pinned reader's
    task, version and age when ``data`` names them)."""
    d: Mapping[str, Any] = data if isinstance(data, Mapping) else {}
    return clean(
        {
            "quiesce.escalation.kind": kind,
            "quiesce.detail": text,
            "quiesce.reader.task": d.get("task"),
            "quiesce.reader.version": d.get("version"),
            "quiesce.reader.age": d.get("age"),
            "quiesce.holding_back": d.get("holding_back"),
        }
    )


class RecordEvents(NamedTuple):
    """What one record adds to the span that made it."""

    #: (event name, attributes), in order
    events: list[tuple[str, dict[str, Any]]]
    #: the removal groups it staged (remembered for the link from their removal)
    staged: list[int]
    #: the removal groups it settles (linked to the spans that staged them)
    settled: list[int]


def record_events(rec: LogRecord, stages: str | None) -> RecordEvents:
    """The events of ``rec``: one per tombstone, refusal, escalation and
    checkpoint. ``stages``: the op (``prune`` or ``edit``) whose staged
    groups the span made (only the span that made the request)."""
    events: list[tuple[str, dict[str, Any]]] = []
    staged: list[int] = []
    settled: list[int] = []
    op = rec.op
    if op == stages and (op == Op.PRUNE or rec.version is not None):
        staged = [int(row[0]) for row in parse_change(rec).staged]
    if op == Op.REMOVE:
        removal = parse_remove(rec)
        settled = list(removal.gids)
        for t in removal.tombstones:
            events.append(
                (
                    "quiesce.tombstone",
                    clean(
                        {
                            "gen_ai.memory.record.id": t.id,
                            "quiesce.content_hash": t.content_hash,
                            "quiesce.kind": None if t.kind is None else t.kind.value,
                            "quiesce.actor": t.actor,
                            "quiesce.reason": t.reason,
                            "quiesce.turn": t.turn,
                            "quiesce.version": t.version,
                        }
                    ),
                )
            )
        for eid, why in removal.refused.items():
            events.append(
                ("quiesce.refusal", {"gen_ai.memory.record.id": eid, "quiesce.refusal": str(why)})
            )
    elif op == Op.EDIT and rec.version is None:
        for r in rec.detail.get("refusals", ()):
            events.append(
                ("quiesce.refusal", clean({"quiesce.refusal": r, "quiesce.ids": list(rec.ids)}))
            )
        if rec.detail.get("escalation"):
            why = "; ".join(map(str, rec.detail.get("why", ())))
            events.append(
                (
                    "quiesce.escalation",
                    clean(
                        {
                            "quiesce.escalation.kind": rec.detail["escalation"],
                            "quiesce.detail": why,
                        }
                    ),
                )
            )
    elif op == Op.ESCALATE:
        escalation = parse_escalate(rec)
        events.append(
            ("quiesce.escalation", escalation_attrs(escalation.kind, rec.reason, escalation.data))
        )
    elif op == Op.CHECKPOINT:
        events.append(("quiesce.checkpoint", {"quiesce.seq": rec.seq}))
    return RecordEvents(events, staged, settled)
