"""The record schema (``quiesce._core.wire``): every record kind's builder
and parser, through the real on-disk bytes.

Each kind round-trips builder → bytes (``_log._format``) → parser →
builder to the same bytes; each parser refuses a malformed detail field with
a :class:`LogFormatError` naming the record; a property test does the round
trip over generated records. The builders are the engine's own: a buffer's
log holds exactly what they make (checked against a live buffer too). No
event loop is involved, so there is nothing to run on asyncio or trio."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quiesce import Buffer, EditPlan, Entry, Kind, LogFormatError, LogRecord, Override, Prune
from quiesce._core.grace import Group
from quiesce._core.records import Outcome, Refusal, Status, Tombstone
from quiesce._core.wire import (
    OPS,
    Op,
    anchor_record,
    append_record,
    checkpoint_record,
    edit_record,
    edit_refused_record,
    escalate_record,
    intent_record,
    mark_record,
    parse_anchor,
    parse_append,
    parse_change,
    parse_checkpoint,
    parse_escalate,
    parse_intent,
    parse_mark,
    parse_refuse,
    parse_remove,
    parse_stream_finish,
    parse_stream_open,
    parse_stream_text,
    prune_record,
    refuse_record,
    remove_record,
    staged_rows,
    stream_finish_record,
    stream_open_record,
    stream_text_record,
)
from quiesce._log._format import OPS as FORMAT_OPS
from quiesce._log._format import decode_json, decode_record, encode_record

A = Entry("a", Kind.REASONING, "read the config", turn=2, key="k-a", meta={"n": 1})
B = Entry("b", Kind.TOOL_OUTPUT, "42 rows", ("a",), turn=3)
SUMMARY = Entry("s", Kind.SUMMARY, "a and b, in short", turn=4)
TOMB = Tombstone("a", A.content_hash, "superseded", 2, "pruner", 5, Kind.REASONING, "k-a")
PLAN = EditPlan([Prune("a")], reason="stale", actor="pruner", turn=4, base=3)


def wire_trip(rec: LogRecord) -> LogRecord:
    """``rec`` written as the sinks write it and read back as they read it."""
    return decode_record(decode_json(encode_record(rec)), "record")


def same_bytes(a: LogRecord, b: LogRecord) -> None:
    assert encode_record(a) == encode_record(b)


# -- one round trip per kind: build, bytes, parse, build again ---------------


def trip_append() -> None:
    for rec in (
        append_record(0, A, 0.0, 1, 10.0),
        append_record(1, B, 1.0, 2, 11.0, True),
        append_record(2, B, 2.0, 3, 12.0, False, Override("let it in", 3), True),
    ):
        back = wire_trip(rec)
        p = parse_append(back)
        again = append_record(
            back.seq,
            p.entry,
            p.key,
            back.version or 0,
            back.time,
            p.batch,
            None if p.override is None else Override(**p.override),
            back.outcome == "overridden",
        )
        same_bytes(rec, again)
        assert p.entry.to_dict() == rec.detail["entry"]


def trip_mark() -> None:
    rec = mark_record(3, "a", "superseded", 4, 5, 13.0)
    back = wire_trip(rec)
    i, reason, turn = parse_mark(back)
    same_bytes(rec, mark_record(back.seq, i, reason, turn, back.version or 0, back.time))


def _groups() -> list[Group]:
    return [Group(7, ("a", "b"), 5, 6, "stale", "pruner", 4, frozenset())]


def trip_prune() -> None:
    outcomes = {
        "a": Outcome(Status.DEFERRED),
        "c": Outcome(Status.MARKED, Refusal.PROTECTED),
    }
    rec = prune_record(
        4,
        14.0,
        6,
        ("a", "c"),
        actor="pruner",
        reason="stale",
        turn=4,
        outcome="staged",
        marks=[["a", "stale", 4]],
        staged=staged_rows(_groups()),
        outcomes=outcomes,
    )
    back = wire_trip(rec)
    c = parse_change(back)
    assert c.marks == [("a", "stale", 4)] and c.staged == [(7, ("a", "b"), 5, 6)]
    again = prune_record(
        back.seq,
        back.time,
        back.version,
        back.ids,
        actor=back.actor,
        reason=back.reason,
        turn=back.turn,
        outcome=back.outcome,
        marks=[list(m) for m in c.marks],
        staged=[[g, list(ids), gr, st_] for g, ids, gr, st_ in c.staged],
        outcomes=outcomes,
    )
    same_bytes(rec, again)


def trip_edit() -> None:
    rec = edit_record(
        5,
        15.0,
        7,
        ("a", "b"),
        plan=PLAN,
        rewrites=[B.replace(body="41 rows")],
        marks_kept={"b": 3},
        inserted=[{"entry": SUMMARY.to_dict(), "key": 0.5}],
        keys={"b": 2.5},
        placed={"b"},
        marks=[["a", "stale", 4]],
        staged=staged_rows(_groups()),
        rationale=[{"id": "r", "hash": None, "body": None}],
        readmission_overridden=True,
        retracted=["a"],
    )
    back = wire_trip(rec)
    c = parse_change(back)
    assert c.plan == PLAN.to_dict()
    again = edit_record(
        back.seq,
        back.time,
        back.version or 0,
        back.ids,
        plan=PLAN,
        rewrites=c.rewrites,
        marks_kept=back.detail["marks_kept"],
        inserted=[{"entry": e.to_dict(), "key": k} for e, k in c.inserted],
        keys=c.keys,
        placed=c.placed,
        marks=[list(m) for m in c.marks],
        staged=[[g, list(ids), gr, st_] for g, ids, gr, st_ in c.staged],
        rationale=back.detail["rationale"],
        readmission_overridden=bool(back.detail.get("readmission_overridden")),
        retracted=c.retracted,
    )
    same_bytes(rec, again)
    refused = edit_refused_record(
        6, 16.0, ("a",), plan=PLAN, refusals=(Refusal.CONFLICT,), why=["moved"], rationale=[]
    )
    back = wire_trip(refused)
    assert back.version is None and back.outcome == "refused"
    again = edit_refused_record(
        back.seq,
        back.time,
        back.ids,
        plan=PLAN,
        refusals=[Refusal(r) for r in back.detail["refusals"]],
        why=back.detail["why"],
        rationale=back.detail["rationale"],
    )
    same_bytes(refused, again)


def trip_tombstone() -> None:
    rec = intent_record(7, 17.0, ("a",), [7], [TOMB])
    back = wire_trip(rec)
    r = parse_intent(back)
    assert [t.version for t in r.tombstones] == [None]
    same_bytes(rec, intent_record(back.seq, back.time, back.ids, r.gids, r.tombstones))


def trip_remove() -> None:
    rec = remove_record(
        8,
        18.0,
        5,
        ("a", "b"),
        actor="pruner",
        reason="stale",
        outcome="partial",
        gids=[7],
        tombs=[TOMB],
        refused={"b": Refusal.REFERENCED},
        intent=7,
        retracted=["a"],
    )
    back = wire_trip(rec)
    r = parse_remove(back)
    assert r.tombstones == [TOMB] and r.retracted == {"a"}
    again = remove_record(
        back.seq,
        back.time,
        back.version,
        back.ids,
        actor=back.actor,
        reason=back.reason or "",
        outcome=back.outcome,
        gids=r.gids,
        tombs=r.tombstones,
        refused={i: Refusal(v) for i, v in r.refused.items()},
        intent=back.detail.get("intent"),
        retracted=sorted(r.retracted),
    )
    same_bytes(rec, again)


def trip_refuse() -> None:
    rec = refuse_record(9, 19.0, "a2", 6, TOMB)
    back = wire_trip(rec)
    r = parse_refuse(back)
    assert r.request == "append" and r.tombstone == TOMB
    same_bytes(rec, refuse_record(back.seq, back.time, back.ids[0], back.turn, r.tombstone))


def trip_escalate() -> None:
    rec = escalate_record(10, 20.0, ("a",), "backlog grows", "backlog", {"deferred": 9})
    back = wire_trip(rec)
    e = parse_escalate(back)
    again = escalate_record(back.seq, back.time, back.ids, back.reason or "", e.kind, e.data)
    same_bytes(rec, again)


def trip_checkpoint() -> None:
    anchor = anchor_record(11, 21.0, "ab" * 32)
    back = wire_trip(anchor)
    same_bytes(anchor, anchor_record(back.seq, back.time, parse_anchor(back) or ""))
    rec = checkpoint_record(12, 21.0, "ab" * 32, {"records": 12, "live": []})
    back = wire_trip(rec)
    state, digest = parse_checkpoint(back)
    same_bytes(rec, checkpoint_record(back.seq, back.time, digest, state))


def trip_streams() -> None:
    header = Entry("w", Kind.REASONING, "", turn=5)
    rec = stream_open_record(13, 22.0, 8, header, 3.0)
    back = wire_trip(rec)
    d, key = parse_stream_open(back)
    same_bytes(rec, stream_open_record(back.seq, back.time, back.version or 0, header, key))
    assert d == header.to_dict()
    rec = stream_text_record(14, 23.0, "w", 0, "partial ", 9, 3)
    back = wire_trip(rec)
    t = parse_stream_text(back)
    again = stream_text_record(back.seq, back.time, t.id, t.offset, t.text, t.through, t.writes)
    same_bytes(rec, again)
    final = Entry("w", Kind.REASONING, "partial text", turn=5)
    for aborted in (False, True):
        rec = stream_finish_record(
            15,
            24.0,
            10,
            final,
            aborted=aborted,
            reason="cut" if aborted else None,
            offset=8,
            text="text",
            writes=1,
            mark=aborted,
            refusal=Refusal.NEGATIVE.value if aborted else None,
        )
        back = wire_trip(rec)
        f = parse_stream_finish(back)
        assert (f.id, f.aborted, f.mark) == ("w", aborted, aborted)
        again = stream_finish_record(
            back.seq,
            back.time,
            back.version or 0,
            final,
            aborted=f.aborted,
            reason=back.reason,
            offset=back.detail["offset"],
            text=back.detail["text"],
            writes=back.detail["writes"],
            mark=f.mark,
            refusal=(back.detail.get("refusals") or [None])[0],
        )
        same_bytes(rec, again)


TRIPS: dict[Op, Callable[[], None]] = {
    Op.APPEND: trip_append,
    Op.MARK: trip_mark,
    Op.PRUNE: trip_prune,
    Op.EDIT: trip_edit,
    Op.TOMBSTONE: trip_tombstone,
    Op.REMOVE: trip_remove,
    Op.REFUSE: trip_refuse,
    Op.ESCALATE: trip_escalate,
    Op.CHECKPOINT: trip_checkpoint,
    Op.ANCHOR: trip_checkpoint,
    Op.STREAM_OPEN: trip_streams,
    Op.STREAM_TEXT: trip_streams,
    Op.STREAM_CLOSE: trip_streams,
    Op.STREAM_ABORT: trip_streams,
}


class TestRoundTrip:
    def test_every_op_has_a_round_trip(self) -> None:
        """Op lists every op the log format accepts, and each has a test."""
        assert set(TRIPS) == set(Op)
        assert FORMAT_OPS == OPS == tuple(op.value for op in Op)

    @pytest.mark.parametrize("op", list(Op), ids=lambda op: op.value)
    def test_builder_parser_builder(self, op: Op) -> None:
        """Built, written as bytes, read back, parsed and built again: the
        same bytes."""
        TRIPS[op]()

    def test_op_values_are_plain_strings_in_records(self) -> None:
        """A builder stores the op's plain str (so the fast encoder and the
        bytes on disk are unchanged), and it compares equal to the member."""
        rec = mark_record(0, "a", "r", None, 1, 1.0)
        assert type(rec.op) is str and rec.op == Op.MARK and Op(rec.op) is Op.MARK

    def test_the_engine_writes_what_the_builders_build(self) -> None:
        """A live buffer's records (appends, an overridden re-admission, a
        mark, a prune, a refused re-admission, an escalation) are the
        builders' output and every one parses."""
        buf = Buffer()
        buf.append(A)
        buf.append(B)
        buf.mark_stale("b", "stale", turn=3)
        buf.prune(["b"], reason="done", actor="pruner")
        buf.flush()
        log = list(buf.log)
        first = log[0]
        same_bytes(first, append_record(0, A, first.detail["key"], 1, first.time))
        for rec in log:
            parser = PARSERS[Op(rec.op)]
            parser(rec)

    def test_tombstone_codec(self) -> None:
        """Tombstone.to_dict / from_dict invert each other; a kindless one too."""
        for t in (TOMB, TOMB._replace(kind=None, key=None, turn=None, actor=None)):
            assert Tombstone.from_dict(t.to_dict()) == t


PARSERS: dict[Op, Callable[[LogRecord], object]] = {
    Op.APPEND: parse_append,
    Op.MARK: parse_mark,
    Op.PRUNE: parse_change,
    Op.EDIT: parse_change,
    Op.TOMBSTONE: parse_intent,
    Op.REMOVE: parse_remove,
    Op.REFUSE: parse_refuse,
    Op.ESCALATE: parse_escalate,
    Op.CHECKPOINT: parse_checkpoint,
    Op.ANCHOR: parse_anchor,
    Op.STREAM_OPEN: parse_stream_open,
    Op.STREAM_TEXT: parse_stream_text,
    Op.STREAM_CLOSE: parse_stream_finish,
    Op.STREAM_ABORT: parse_stream_finish,
}


# -- parsers refuse malformed detail fields ----------------------------------


def _rec(op: Op, detail: dict[str, Any], ids: tuple[str, ...] = ("a",)) -> LogRecord:
    return LogRecord(3, 1.0, op.value, 2, ids, None, "why", None, "applied", detail)


_ENTRY = A.to_dict()
_TD = TOMB.to_dict()

#: (op, detail, ids, the message, matched in full)
MALFORMED: dict[str, tuple[Op, dict[str, Any], tuple[str, ...], str]] = {
    "append without entry": (
        Op.APPEND,
        {"key": 0.0},
        ("a",),
        r"log record 3 \(append\) is malformed: KeyError\('entry'\)",
    ),
    "append entry not an object": (
        Op.APPEND,
        {"entry": 5, "key": 0.0},
        ("a",),
        r"log record 3 \(append\) is malformed: TypeError\('an entry is not an object: int'\)",
    ),
    "append entry with a bad body": (
        Op.APPEND,
        {"entry": _ENTRY | {"body": 7}, "key": 0.0},
        ("a",),
        r"log record 3 \(append\) is malformed: .*body.*",
    ),
    "append NaN key": (
        Op.APPEND,
        {"entry": _ENTRY, "key": float("nan")},
        ("a",),
        r"log record 3 \(append\): order key nan is not a finite number",
    ),
    "append string key": (
        Op.APPEND,
        {"entry": _ENTRY, "key": "1"},
        ("a",),
        r"log record 3 \(append\): order key '1' is not a finite number",
    ),
    "append key out of range": (
        Op.APPEND,
        {"entry": _ENTRY, "key": 2.0**60},
        ("a",),
        r"log record 3 \(append\): order key 1\.152921504606847e\+18 is out of range",
    ),
    "append override not an object": (
        Op.APPEND,
        {"entry": _ENTRY, "key": 0.0, "override": "yes"},
        ("a",),
        r"log record 3 \(append\): its override is not an object",
    ),
    "mark with two ids": (
        Op.MARK,
        {},
        ("a", "b"),
        r"log record 3 \(mark\): a mark names 2 ids, not one",
    ),
    "prune marks not a list": (
        Op.PRUNE,
        {"marks": {"a": 1}},
        ("a",),
        r"log record 3 \(prune\): marks is not a list",
    ),
    "prune mark of two fields": (
        Op.PRUNE,
        {"marks": [["a", "r"]]},
        ("a",),
        r"log record 3 \(prune\) is malformed: ValueError\(\"a mark is not \[id, reason, "
        r"turn\]: \['a', 'r'\]\"\)",
    ),
    "prune staged group of three fields": (
        Op.PRUNE,
        {"staged": [[1, ["a"], 2]]},
        ("a",),
        r"log record 3 \(prune\) is malformed: ValueError\(\"a staged group is not 4 "
        r"fields: \[1, \['a'\], 2\]\"\)",
    ),
    "prune staged ids not a list": (
        Op.PRUNE,
        {"staged": [[1, "a", 2, 2]]},
        ("a",),
        r"log record 3 \(prune\): a staged group's ids is not a list",
    ),
    "edit keys not an object": (
        Op.EDIT,
        {"keys": [1.0]},
        ("a",),
        r"log record 3 \(edit\): keys is not an object",
    ),
    "edit key infinite": (
        Op.EDIT,
        {"keys": {"a": float("inf")}},
        ("a",),
        r"log record 3 \(edit\): order key inf is not a finite number",
    ),
    "edit rewrites not a list": (
        Op.EDIT,
        {"rewrites": _ENTRY},
        ("a",),
        r"log record 3 \(edit\): rewrites is not a list",
    ),
    "edit inserted not an object": (
        Op.EDIT,
        {"inserted": [5]},
        ("a",),
        r"log record 3 \(edit\): an inserted entry is not an object",
    ),
    "edit inserted without entry": (
        Op.EDIT,
        {"inserted": [{"key": 1.0}]},
        ("a",),
        r"log record 3 \(edit\) is malformed: KeyError\('entry'\)",
    ),
    "edit retracted not ids": (
        Op.EDIT,
        {"retracted": [1]},
        ("a",),
        r"log record 3 \(edit\): retracted is not a list of ids",
    ),
    "edit plan not an object": (
        Op.EDIT,
        {"plan": [1]},
        ("a",),
        r"log record 3 \(edit\): its plan is not an object",
    ),
    "remove tombstones not a list": (
        Op.REMOVE,
        {"tombstones": _TD},
        ("a",),
        r"log record 3 \(remove\): tombstones is not a list",
    ),
    "remove tombstone not an object": (
        Op.REMOVE,
        {"tombstones": [1]},
        ("a",),
        r"log record 3 \(remove\): a tombstone is not an object",
    ),
    "remove tombstone without hash": (
        Op.REMOVE,
        {"tombstones": [{k: v for k, v in _TD.items() if k != "content_hash"}]},
        ("a",),
        r"log record 3 \(remove\): tombstone 'a' lacks field 'content_hash'",
    ),
    "remove tombstone with a negative turn": (
        Op.REMOVE,
        {"tombstones": [_TD | {"turn": -1}]},
        ("a",),
        r"log record 3 \(remove\): tombstone 'a' has a field of the wrong type",
    ),
    "remove tombstone of an unknown kind": (
        Op.REMOVE,
        {"tombstones": [_TD | {"kind": "gossip"}]},
        ("a",),
        r"log record 3 \(remove\): tombstone 'a' has a field of the wrong type",
    ),
    "remove group id not an int": (
        Op.REMOVE,
        {"gids": ["1"]},
        ("a",),
        r"log record 3 \(remove\): a group id is not an int",
    ),
    "remove refused not an object": (
        Op.REMOVE,
        {"refused": ["a"]},
        ("a",),
        r"log record 3 \(remove\): refused is not an object",
    ),
    "intent tombstone with a string version": (
        Op.TOMBSTONE,
        {"tombstones": [_TD | {"version": "5"}]},
        ("a",),
        r"log record 3 \(tombstone\): tombstone 'a' has a field of the wrong type",
    ),
    "refuse without tombstone": (
        Op.REFUSE,
        {"request": "append"},
        ("a",),
        r"log record 3 \(refuse\) is malformed: KeyError\('tombstone'\)",
    ),
    "refuse request not a string": (
        Op.REFUSE,
        {"request": 1, "tombstone": _TD},
        ("a",),
        r"log record 3 \(refuse\): its request is not a string",
    ),
    "escalate data not an object": (
        Op.ESCALATE,
        {"kind": "backlog", "data": [1]},
        ("a",),
        r"log record 3 \(escalate\): its kind or data has the wrong type",
    ),
    "stream_open header not an object": (
        Op.STREAM_OPEN,
        {"entry": "w", "key": 0.0},
        ("w",),
        r"log record 3 \(stream_open\) is malformed: "
        r"TypeError\('the stream header is not an object'\)",
    ),
    "stream_open with a body": (
        Op.STREAM_OPEN,
        {"entry": _ENTRY, "key": 0.0},
        ("w",),
        r"log record 3 \(stream_open\): a stream opens with a body",
    ),
    "stream_text through not an int": (
        Op.STREAM_TEXT,
        {"offset": 0, "text": "x", "through": "9"},
        ("w",),
        r"log record 3 \(stream_text\): its text is through version '9'",
    ),
    "stream_text with no id": (
        Op.STREAM_TEXT,
        {"offset": 0, "text": "x", "through": 9},
        (),
        r"log record 3 \(stream_text\): it names 0 ids, not one",
    ),
    "stream_close with two ids": (
        Op.STREAM_CLOSE,
        {},
        ("w", "v"),
        r"log record 3 \(stream_close\): it names 2 ids, not one",
    ),
    "checkpoint without state": (
        Op.CHECKPOINT,
        {"sha256": "ab"},
        (),
        r"checkpoint 3 has no state or checksum",
    ),
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_a_parser_refuses_a_malformed_field(name: str) -> None:
    """Every malformed field: LogFormatError naming the record, never a
    KeyError, TypeError or ValueError."""
    op, detail, ids, message = MALFORMED[name]
    with pytest.raises(LogFormatError, match=rf"^{message}$"):
        PARSERS[op](_rec(op, detail, ids))


def test_a_tombstone_that_is_not_one() -> None:
    with pytest.raises(LogFormatError, match=r"^a tombstone is not an object$"):
        Tombstone.from_dict([1])
    with pytest.raises(LogFormatError, match=r"^tombstone 'a' lacks field 'actor'$"):
        Tombstone.from_dict({k: v for k, v in _TD.items() if k != "actor"})


def test_replay_reports_the_parsers_message(tmp_path: Any) -> None:
    """Recovery refuses a log with a malformed field with the parser's
    message (the record named), and leaves the file as it was."""
    from quiesce import JsonlLog

    path = tmp_path / "log.jsonl"
    sink = JsonlLog(path)
    sink.write(
        [
            append_record(0, A, 0.0, 1, 1.0),
            LogRecord(1, 2.0, "remove", 2, ("a",), None, "x", None, "applied", {"gids": ["1"]}),
        ]
    )
    sink.close()
    before = path.read_bytes()
    with pytest.raises(
        LogFormatError, match=r"^log record 1 \(remove\): a group id is not an int$"
    ):
        Buffer(log=JsonlLog(path))
    assert path.read_bytes() == before


# -- a property test over generated records ----------------------------------

_text = st.text(max_size=12)
_ids = st.text(st.characters(min_codepoint=97, max_codepoint=122), min_size=1, max_size=6)
_turns = st.none() | st.integers(0, 10**6)
_kinds = st.sampled_from(list(Kind))
_keys = st.floats(-(2.0**40), 2.0**40, allow_nan=False, allow_infinity=False)
_entries = st.builds(
    lambda i, k, body, turn, key, refs: Entry(
        i, k, body, tuple(r for r in refs if r != i), turn=turn, key=key
    ),
    _ids,
    _kinds,
    _text,
    _turns,
    st.none() | _ids,
    st.lists(_ids, max_size=3, unique=True),
)
_tombs = st.builds(
    Tombstone,
    _ids,
    st.text(st.characters(min_codepoint=48, max_codepoint=102), min_size=1, max_size=16),
    _text,
    _turns,
    st.none() | _ids,
    st.integers(1, 10**6),
    st.none() | _kinds,
    st.none() | _ids,
)


@st.composite
def _records(draw: st.DrawFn) -> tuple[LogRecord, Callable[[LogRecord], LogRecord]]:
    """A record of a drawn kind and the function that rebuilds it from its
    parsed form."""
    seq = draw(st.integers(0, 10**6))
    at = draw(st.floats(0, 2e9, allow_nan=False))
    version = draw(st.integers(1, 10**6))
    kind = draw(st.sampled_from(["append", "mark", "remove", "intent", "refuse", "text"]))
    if kind == "append":
        entry, key = draw(_entries), draw(_keys)
        batch = draw(st.booleans())
        override = draw(st.none() | st.builds(Override, _text.filter(bool), st.integers(0, 99)))
        rec = append_record(seq, entry, key, version, at, batch, override, override is not None)

        def again(r: LogRecord) -> LogRecord:
            p = parse_append(r)
            o = None if p.override is None else Override(**p.override)
            return append_record(
                r.seq, p.entry, p.key, r.version or 0, r.time, p.batch, o, o is not None
            )

        return rec, again
    if kind == "mark":
        rec = mark_record(seq, draw(_ids), draw(_text), draw(_turns), version, at)
        return rec, lambda r: mark_record(r.seq, *parse_mark(r), r.version or 0, r.time)
    if kind in ("remove", "intent"):
        tombs = draw(st.lists(_tombs, max_size=4))
        gids = draw(st.lists(st.integers(0, 99), max_size=3))
        ids = tuple(t.id for t in tombs)
        if kind == "intent":
            rec = intent_record(seq, at, ids, gids, tombs)
            return rec, lambda r: intent_record(
                r.seq, r.time, r.ids, parse_intent(r).gids, parse_intent(r).tombstones
            )
        refused = {i: Refusal.CONFLICT for i in draw(st.lists(_ids, max_size=2))}
        retracted = sorted({t.id for t in tombs[:1]})
        rec = remove_record(
            seq,
            at,
            version,
            ids,
            actor=draw(st.none() | _ids),
            reason=draw(_text),
            outcome="applied",
            gids=gids,
            tombs=tombs,
            refused=refused,
            intent=draw(st.none() | st.integers(0, 99)),
            retracted=retracted,
        )

        def again_remove(r: LogRecord) -> LogRecord:
            p = parse_remove(r)
            return remove_record(
                r.seq,
                r.time,
                r.version,
                r.ids,
                actor=r.actor,
                reason=r.reason or "",
                outcome=r.outcome,
                gids=p.gids,
                tombs=p.tombstones,
                refused={i: Refusal(v) for i, v in p.refused.items()},
                intent=r.detail.get("intent"),
                retracted=sorted(p.retracted),
            )

        return rec, again_remove
    if kind == "refuse":
        rec = refuse_record(seq, at, draw(_ids), draw(_turns), draw(_tombs))
        return rec, lambda r: refuse_record(
            r.seq, r.time, r.ids[0], r.turn, parse_refuse(r).tombstone
        )
    rec = stream_text_record(
        seq, at, draw(_ids), draw(st.integers(0, 99)), draw(_text), version, draw(st.integers(0, 9))
    )

    def again_text(r: LogRecord) -> LogRecord:
        t = parse_stream_text(r)
        return stream_text_record(r.seq, r.time, t.id, t.offset, t.text, t.through, t.writes)

    return rec, again_text


@settings(max_examples=150, deadline=None)
@given(case=_records())
def test_generated_records_round_trip(
    case: tuple[LogRecord, Callable[[LogRecord], LogRecord]],
) -> None:
    """Any record a builder makes survives bytes → parse → build unchanged."""
    rec, again = case
    back = wire_trip(rec)
    assert back.to_dict() == rec.to_dict()
    same_bytes(rec, again(back))
