"""The records that mark, stage and change entries: ``prune`` and ``edit``.

What this module keeps true: an applied edit's record carries everything
recovery needs to rebuild its version (rewrites, summaries placed, order
keys, marks, staged groups, the rationale's bytes, the host's retractions);
a refused one carries the refusals and no version. :func:`parse_change`
reads either prune or applied edit into one :class:`Change`, every field's
shape checked. O(size of the detail).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from ..entry import Entry
from ..records import EscalationKind, LogRecord, Refusal
from .fields import APPLIED, Op, entry_field, fail, field_in, list_field, malformed, order_key

__all__ = [
    "Change",
    "edit_record",
    "edit_refused_record",
    "parse_change",
    "prune_record",
    "staged_rows",
]


class Change(NamedTuple):
    """What a ``prune`` or applied ``edit`` record changes (a prune carries
    marks and staged groups only)."""

    rewrites: list[Entry]
    #: summaries placed: (entry, order key)
    inserted: list[tuple[Entry, float]]
    #: new order keys by id
    keys: dict[str, float]
    #: after a renumbering: the ids whose place changed (None: every id in keys)
    placed: frozenset[str] | None
    #: (id, reason, turn)
    marks: list[tuple[Any, Any, Any]]
    #: (gid, ids, grace version, staged version), types checked by replay
    staged: list[tuple[Any, tuple[Any, ...], Any, Any]]
    #: ids the host retracts (any kind)
    retracted: list[str]
    #: the plan's JSON form (``EditPlan.to_dict``; empty for a prune)
    plan: Mapping[str, Any]


def staged_rows(groups: Iterable[Any]) -> list[list[Any]]:
    """The ``staged`` detail of groups (``grace.Group``): ``[[gid, ids,
    grace, staged]]``."""
    return [[g.gid, list(g.ids), g.grace, g.staged] for g in groups]


def prune_record(
    seq: int,
    at: float,
    version: int | None,
    ids: tuple[str, ...],
    *,
    actor: str | None,
    reason: str | None,
    turn: int | None,
    outcome: str,
    marks: list[list[Any]],
    staged: list[list[Any]],
    outcomes: Mapping[str, Any],
) -> LogRecord:
    """The record of a prune request: new ``marks`` ``[[id, reason,
    turn]]``, ``staged`` groups (:func:`staged_rows`) and each id's
    :class:`~.records.Outcome` (``refusals`` derived from them)."""
    detail = {
        "marks": marks,
        "staged": staged,
        "outcomes": {
            i: [o.status.value, None if o.refusal is None else o.refusal.value]
            for i, o in outcomes.items()
        },
        "refusals": [o.refusal.value for o in outcomes.values() if o.refusal is not None],
    }
    return LogRecord(seq, at, Op.PRUNE.value, version, ids, actor, reason, turn, outcome, detail)


def edit_record(
    seq: int,
    at: float,
    version: int,
    ids: tuple[str, ...],
    *,
    plan: Any,
    rewrites: list[Entry],
    marks_kept: Mapping[str, int],
    inserted: list[dict[str, Any]],
    keys: Mapping[str, float],
    placed: Iterable[str] | None,
    marks: list[list[Any]],
    staged: list[list[Any]],
    rationale: list[dict[str, Any]],
    readmission_overridden: bool,
    retracted: Iterable[str] | None,
) -> LogRecord:
    """The record of an applied :class:`~.plan.EditPlan` (``plan``): its
    rewrites, the summaries ``inserted`` (``{"entry", "key"}``), the new
    order ``keys`` (after a renumbering every live id, of which only the
    ``placed`` ones moved), new ``marks`` and ``staged`` groups, the
    rationale's bytes (kept outside the window) and the host's
    ``retracted`` ids."""
    detail: dict[str, Any] = {
        "plan": plan.to_dict(),
        "rewrites": [e.to_dict() for e in rewrites],
        # a rewrite keeps the entry's mark, which judged the earlier
        # content: the mark's version predates this one
        **({"marks_kept": dict(marks_kept)} if marks_kept else {}),
        "inserted": inserted,
        "keys": dict(keys),
        **({} if placed is None else {"placed": sorted(placed)}),
        "marks": marks,
        "staged": staged,
        "rationale": rationale,
        "refusals": [],
        # the override let content matching a tombstone back in
        **({"readmission_overridden": True} if readmission_overridden else {}),
        # the host's explicit retraction (any kind)
        **({"retracted": list(retracted)} if retracted else {}),
    }
    return LogRecord(
        seq, at, Op.EDIT.value, version, ids, plan.actor, plan.reason, plan.turn, APPLIED, detail
    )


def edit_refused_record(
    seq: int,
    at: float,
    ids: tuple[str, ...],
    *,
    plan: Any,
    refusals: Sequence[Refusal],
    why: list[str],
    rationale: list[dict[str, Any]],
) -> LogRecord:
    """The record of a refused plan (no version): the refusals, the
    distinct reasons ``why``, the rationale's bytes, the escalation kind."""
    detail = {
        "plan": plan.to_dict(),
        "refusals": [r.value for r in refusals],
        "why": why,
        "rationale": rationale,
        "escalation": EscalationKind.REFUSED_EDIT.value,
    }
    return LogRecord(
        seq, at, Op.EDIT.value, None, ids, plan.actor, plan.reason, plan.turn, "refused", detail
    )


def parse_change(rec: LogRecord) -> Change:
    """What a ``prune`` or applied ``edit`` record changes, its fields'
    shapes checked (entries through :meth:`Entry.from_dict`, keys through
    :func:`order_key`)."""
    det = rec.detail
    rewrites = [entry_field(rec, e) for e in list_field(rec, "rewrites")]
    inserted = []
    for ins in list_field(rec, "inserted"):
        if not isinstance(ins, dict):
            raise fail(rec, "an inserted entry is not an object")
        inserted.append(
            (entry_field(rec, field_in(rec, ins, "entry")), order_key(rec, ins.get("key")))
        )
    placed_list = det.get("placed")  # present after a renumbering
    placed = None if placed_list is None else frozenset(list_field(rec, "placed"))
    moved = det.get("keys", {})
    if not isinstance(moved, dict):
        raise fail(rec, "keys is not an object")
    keys = {i: order_key(rec, k) for i, k in moved.items()}
    marks = []
    for mark in list_field(rec, "marks"):
        if not isinstance(mark, list) or len(mark) != 3:
            raise malformed(rec, ValueError(f"a mark is not [id, reason, turn]: {mark!r}"))
        marks.append((mark[0], mark[1], mark[2]))
    staged = []
    for row in list_field(rec, "staged"):
        if not isinstance(row, list) or len(row) != 4:
            raise malformed(rec, ValueError(f"a staged group is not 4 fields: {row!r}"))
        gid, ids, grace, at = row
        if not isinstance(ids, list):
            raise fail(rec, "a staged group's ids is not a list")
        staged.append((gid, tuple(ids), grace, at))
    retracted = det.get("retracted") or []
    if not isinstance(retracted, list) or not all(type(i) is str for i in retracted):
        raise fail(rec, "retracted is not a list of ids")
    plan = det.get("plan") or {}
    if not isinstance(plan, dict):
        raise fail(rec, "its plan is not an object")
    return Change(rewrites, inserted, keys, placed, marks, staged, retracted, plan)
