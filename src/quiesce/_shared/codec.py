"""The shared buffer's wire codec: forwarded operations, their results and errors as JSON.

What it keeps true: every value a member sends through ``quiesce_request``
comes back as an equal value (an operation's arguments, its report, its
error with the tombstone and ref it carries); a request row is decoded
with the log's own limits (:func:`_decode_request`: size, depth, strict
JSON, 64-bit integers) and any fault in it is an :class:`InvalidArgument`,
never another exception; and a request whose records are in the log but
whose result is not gets the result derived from those records
(:func:`_derive_result`), so it is never applied twice. Pure functions:
no I/O, no lock, nothing awaits.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from .._core import errors as _errors
from .._core.entry import Entry
from .._core.errors import InvalidArgument, QuiesceError
from .._core.plan import EditPlan, Move, Op, Prune, Rewrite, Summarize
from .._core.records import (
    EditReport,
    Escalation,
    EscalationKind,
    LogRecord,
    Mark,
    Outcome,
    Override,
    PruneReport,
    Refusal,
    Status,
    Tombstone,
)
from .._core.wire import parse_change, parse_escalate, parse_refuse, parse_remove
from .._log._format import MAX_DEPTH, _too_deep, decode_json

#: The key, in a log record's ``detail``, naming the forwarded request whose
#: application appended the record (exactly-once; see ``_serve_batch``).
REQUEST_KEY = "request_id"


#: The detail fields of a stamped record that a derived result reads.
_DERIVED_FROM = frozenset(
    {"outcomes", "staged", "tombstones", "tombstone", "refusals", "why", "kind", "data"}
)


#: The records that decide a request, per operation (the first one present
#: holds what its result is derived from).
_DECIDING = {
    "append": ("append", "refuse"),
    "mark_stale": ("mark",),
    "prune": ("prune",),
    "edit": ("edit",),
    "escalate": ("escalate",),
    # a stream's (stream.py): a write has no record of its own (its text goes
    # to the log per flush); it is idempotent by its offset instead
    "stream_open": ("stream_open",),
    "stream_write": (),
    "stream_close": ("stream_close", "stream_abort"),
    "stream_abort": ("stream_abort",),
}
#: the operations whose result is the version they published
_VERSION_RESULT = frozenset(
    {"append", "stream_open", "stream_write", "stream_close", "stream_abort"}
)


def _op_from_dict(d: dict[str, Any]) -> Op:
    kind = d["op"]
    if kind == "prune":
        return Prune(d["id"])
    if kind == "rewrite":
        refs = d["refs"]
        return Rewrite(d["id"], d["body"], None if refs is None else tuple(refs))
    if kind == "summarize":
        return Summarize(tuple(d["ids"]), Entry.from_dict(d["into"]))
    if kind == "move":
        return Move(d["id"], d["before"])
    raise InvalidArgument(f"unknown edit op {kind!r}")


def _override(d: dict[str, Any] | None) -> Override | None:
    return None if d is None else Override(d["reason"], d["turn"])


def _plan_from_dict(d: dict[str, Any]) -> EditPlan:
    return EditPlan(
        [_op_from_dict(o) for o in d["ops"]],
        reason=d["reason"],
        rationale=d["rationale"],
        actor=d["actor"],
        turn=d["turn"],
        base=d["base"],
        override=_override(d["override"]),
    )


def _escalation_to_dict(e: Escalation | None) -> dict[str, Any] | None:
    if e is None:
        return None
    return {
        "kind": e.kind.value,
        "detail": e.detail,
        "refusals": [r.value for r in e.refusals],
        "version": e.version,
        "data": json.loads(json.dumps(dict(e.data), default=repr)),
    }


def _escalation_from_dict(d: dict[str, Any], plan: EditPlan | None) -> Escalation:
    """The inverse of :func:`_escalation_to_dict` (``plan``: the refused plan
    an edit's escalation carries, which the wire does not)."""
    return Escalation(
        EscalationKind(d["kind"]),
        d["detail"],
        plan,
        tuple(Refusal(r) for r in d["refusals"]),
        d["version"],
        d["data"],
    )


def _result_to_dict(op: str, value: Any) -> dict[str, Any]:
    if op in _VERSION_RESULT:
        return {"version": value}
    if op == "mark_stale":
        return {"mark": list(value)}
    if op == "prune":
        return {
            "version": value.version,
            "outcomes": [
                [i, o.status.value, None if o.refusal is None else o.refusal.value]
                for i, o in value.items()
            ],
        }
    if op == "escalate":
        out = _escalation_to_dict(value)
        assert out is not None
        return out
    assert op == "edit"
    return {
        "applied": value.applied,
        "refusals": [r.value for r in value.refusals],
        "escalation": _escalation_to_dict(value.escalation),
        "version": value.version,
        "removed": list(value.removed),
        "deferred": list(value.deferred),
    }


def _result_from_dict(op: str, d: dict[str, Any], plan: EditPlan | None) -> Any:
    if op in _VERSION_RESULT:
        return int(d["version"])
    if op == "mark_stale":
        i, reason, turn, version = d["mark"]
        return Mark(i, reason, turn, version)
    if op == "prune":
        return PruneReport(
            {i: Outcome(Status(s), None if r is None else Refusal(r)) for i, s, r in d["outcomes"]},
            d["version"],
        )
    if op == "escalate":
        return _escalation_from_dict(d, None)
    esc = d["escalation"]
    return EditReport(
        applied=d["applied"],
        refusals=tuple(Refusal(r) for r in d["refusals"]),
        escalation=None if esc is None else _escalation_from_dict(esc, plan),
        version=d["version"],
        removed=tuple(d["removed"]),
        deferred=tuple(d["deferred"]),
    )


def _stamped(record: LogRecord, request_id: str) -> LogRecord:
    """``record`` with the forwarded request's id in its detail."""
    return record._replace(detail={**record.detail, REQUEST_KEY: request_id})


def _derive_result(
    op: str, args: dict[str, Any], records: list[LogRecord], version_before: Callable[[int], int]
) -> dict[str, Any] | None:
    """The result of request ``op(args)`` from the records its application
    appended (stamped with its id, in ``seq`` order), when that application
    is in the log but its result is not (the sequencer died in between): the
    report the caller would have got, except that a ``version`` the request
    itself did not publish is the newest one before its first record. None
    if the deciding record is not among them (then nothing was decided)."""
    deciding = next((r for r in records if r.op in _DECIDING[op]), None)
    if deciding is None:
        return None
    det = deciding.detail
    versions = [r.version for r in records if r.version is not None]
    version = max(versions) if versions else version_before(deciding.seq)
    removed = {t.id for r in records if r.op == "remove" for t in parse_remove(r).tombstones}
    if op.startswith("stream_"):
        return {"version": deciding.version if deciding.version is not None else version}
    if op == "append":
        if deciding.op == "refuse":
            tomb = parse_refuse(deciding).tombstone
            refused = _errors.ReadmissionRefused.of_append(deciding.ids[0], tomb)
            return _error_to_dict(refused)
        return {"version": deciding.version}
    if op == "mark_stale":
        return {"mark": [deciding.ids[0], deciding.reason, deciding.turn, deciding.version]}
    if op == "escalate":
        escalation = parse_escalate(deciding)
        return {
            "kind": escalation.kind,
            "detail": deciding.reason,
            "refusals": [],
            "version": version,
            "data": escalation.data,
        }
    if op == "prune":
        decided = det.get("outcomes", {})
        outcomes = []
        for i in dict.fromkeys(args["ids"]):
            if i in decided:
                outcomes.append([i, *decided[i]])
            else:  # a candidate: removed by this request's own removal, or staged
                status = Status.PRUNED if i in removed else Status.DEFERRED
                outcomes.append([i, status.value, None])
        return {"version": version, "outcomes": outcomes}
    if deciding.outcome != "applied":
        refusals = list(det.get("refusals", ()))
        return {
            "applied": False,
            "refusals": refusals,
            "escalation": {
                "kind": EscalationKind.REFUSED_EDIT.value,
                "detail": "; ".join(det.get("why", ())),
                "refusals": refusals,
                "version": version,
                "data": {},
            },
            "version": version,
            "removed": [],
            "deferred": [],
        }
    plan = args["plan"]
    staged = {i for g in parse_change(deciding).staged for i in g[1]}
    taken: dict[str, None] = {}
    for o in plan["ops"]:
        for i in [o["id"]] if o["op"] == "prune" else o["ids"] if o["op"] == "summarize" else []:
            if i in staged or i in removed:
                taken[i] = None
    return {
        "applied": True,
        "refusals": [],
        "escalation": None,
        "version": version,
        "removed": [i for i in taken if i in removed],
        "deferred": [i for i in taken if i not in removed],
    }


def _error_to_dict(exc: BaseException) -> dict[str, Any]:
    """The wire form of an error, with the tombstone (and ref) that
    ``EntryPruned``, ``ReadmissionRefused`` and ``DanglingReference`` carry."""
    d: dict[str, Any] = {"error": type(exc).__name__, "message": str(exc)}
    tomb = getattr(exc, "tombstone", None)
    if isinstance(tomb, Tombstone):
        d["tombstone"] = tomb.to_dict()
    if isinstance(exc, _errors.DanglingReference):
        d["ref"] = exc.ref
    return d


def _error_from_dict(d: dict[str, Any]) -> QuiesceError:
    """Invert :func:`_error_to_dict`: the same class, message and payload."""
    cls = getattr(_errors, str(d["error"]), None)
    if not (isinstance(cls, type) and issubclass(cls, QuiesceError)):
        cls = QuiesceError
    message = str(d["message"])
    tomb = d.get("tombstone")
    tombstone = None if tomb is None else Tombstone.from_dict(tomb)
    if issubclass(cls, _errors.DanglingReference):
        return cls(message, str(d.get("ref", "")), tombstone)
    if issubclass(cls, _errors.EntryPruned | _errors.ReadmissionRefused):
        return cls(message, tombstone)
    try:
        return cls(message)
    except TypeError:  # a class this version builds differently
        return QuiesceError(message)


#: The longest request row (its ``args`` text) the sequencer decodes; a
#: longer one is refused unread. Nesting is bounded as a log record's is
#: (``_log._format.MAX_DEPTH``).
MAX_REQUEST_CHARS = 16 * 2**20


#: Every integer a request carries fits the storage's 64-bit columns.
_INT64 = (-(2**63), 2**63 - 1)


def _decode_request(op: object, text: object) -> dict[str, Any]:
    """The arguments of one ``quiesce_request`` row, decoded with the log's
    limits and checked for shape: at most :data:`MAX_REQUEST_CHARS`
    characters, nested at most ``MAX_DEPTH`` deep (checked on the text before
    parsing, so a row nested 100k deep costs O(len) and no recursion), strict
    JSON, an object for a known operation, every integer within 64 bits.
    Raises :class:`InvalidArgument` naming what is wrong; never anything
    else. O(len(text))."""
    if op not in _DECIDING:
        raise InvalidArgument(f"unknown operation {str(op)[:80]!r}")
    if not isinstance(text, str):
        raise InvalidArgument(f"{op} request: args is not text")
    if len(text) > MAX_REQUEST_CHARS:
        raise InvalidArgument(
            f"{op} request: args of {len(text)} characters (at most {MAX_REQUEST_CHARS})"
        )
    if _too_deep(text):
        raise InvalidArgument(f"{op} request: args nest deeper than {MAX_DEPTH} levels")
    try:
        args = decode_json(text)
    except (ValueError, RecursionError) as exc:
        raise InvalidArgument(f"{op} request: args are not strict JSON ({exc})"[:300]) from None
    if not isinstance(args, dict):
        raise InvalidArgument(f"{op} request: args are not a JSON object")
    stack: list[Any] = [args]
    while stack:  # iterative: the depth is bounded, the width is not
        value = stack.pop()
        if isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
        elif type(value) is int and not _INT64[0] <= value <= _INT64[1]:
            raise InvalidArgument(
                f"{op} request: integer {str(value)[:40]} does not fit in 64 bits"
            )
    return args
