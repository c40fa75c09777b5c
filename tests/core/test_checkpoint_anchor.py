"""A checkpoint is used only after its anchor (issue 21): the record right
before every checkpoint the engine writes carries the checkpoint's SHA-256,
so a checkpoint rewritten (or added) by anyone who did not also write the
record before it is refused at load, whatever field it changes, and
recovery gives exactly the full replay's state. Checked on the three sinks
recovery reads checkpoints from (an in-memory one, JSONL, SQLite) with a
hypothesis strategy that crafts checksummed checkpoints: every field of the
state replaced by an edge value or by the other checkpoint's value, or
deleted. The oracle is always a full replay of the same records.
Synchronous: no event loop involved."""

from __future__ import annotations

import copy
import logging
import re
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from quiesce import Buffer, EditPlan, Entry, Kind, LogFormatError, Override, Prune
from quiesce._core.checkpoint import ANCHOR_OP, CHECKPOINT_OP, _digest, _record
from quiesce._core.log import check_read
from quiesce._core.records import LogRecord
from quiesce._core.replay import replay
from quiesce._core.verify import state_fields, verify_records
from quiesce._log import JsonlLog, SQLiteLog

THINKING = {"type": "thinking", "thinking": "the pods first", "signature": "c2lnbmVk"}
OVERRIDE = Override("the user undid their message", 3)


class MemoryLog:
    """A checkpointing sink that keeps its records in a list: the in-memory
    side of the property (the protocol recovery reads, nothing more)."""

    def __init__(self, records: Sequence[LogRecord] = ()) -> None:
        self.records = list(records)

    def load(self) -> Sequence[LogRecord]:
        return list(self.records)

    def write(self, records: Sequence[LogRecord]) -> None:
        assert [r.seq for r in records] == list(
            range(len(self.records), len(self.records) + len(records))
        )
        self.records.extend(records)

    def read_range(self, start: int, stop: int) -> Sequence[LogRecord]:
        return check_read(self.records[start:stop], start, stop)

    def checkpoints(self) -> tuple[int, Sequence[int]]:
        return len(self.records), [r.seq for r in self.records if r.op == CHECKPOINT_OP]

    def close(self) -> None:
        pass


def _fill(buf: Buffer) -> None:
    """Every kind of protected content, marks, tombstones, then a staged
    removal and a host retraction in flight at the second checkpoint."""
    buf.append(Entry("sys", Kind.CONSTRAINT, "answer in English"))
    buf.append(Entry("u1", Kind.INSTRUCTION, "list the pods"))
    buf.append(Entry("u9", Kind.INSTRUCTION, "the user's second wish"))
    buf.append(Entry("no", Kind.PROHIBITION, "do not touch /etc"))
    buf.append(Entry("neg", Kind.NEGATIVE, "the deploy failed: do not retry it"))
    buf.append(Entry("th", Kind.REASONING, "thinking", content=THINKING))
    for i in range(10):
        buf.append(Entry(f"t{i}", Kind.TOOL_OUTPUT, f"output {i}"))
    buf.mark_stale("t0", "old")
    buf.prune(["t1", "t2"], reason="done")
    buf.flush(checkpoint=True)
    buf.snapshot().__enter__()  # never left: the removals below stay staged
    buf.prune(["t3", "t4"], reason="stale")
    assert buf.edit(EditPlan([Prune("u9")], reason="undo", actor="host", override=OVERRIDE))
    buf.mark_stale("t5", "old")
    buf.flush(checkpoint=True)
    buf.append(Entry("t10", Kind.TOOL_OUTPUT, "after the checkpoint"))
    buf.flush()


@pytest.fixture(scope="module")
def honest() -> list[LogRecord]:
    """The records of an honest history with two checkpoints and a tail."""
    sink = MemoryLog()
    _fill(Buffer(log=sink, checkpoint_every=0))
    return sink.records


def _states(records: Sequence[LogRecord]) -> list[dict[str, Any]]:
    return [r.detail["state"] for r in records if r.op == CHECKPOINT_OP]


def _oracle(records: Sequence[LogRecord]) -> Buffer:
    buf = Buffer()
    replay(buf, records)
    return buf


def _with_state(records: Sequence[LogRecord], state: dict[str, Any]) -> list[LogRecord]:
    """The records with the newest checkpoint's state replaced by ``state``,
    its checksum recomputed; the anchor before it is left as written."""
    out = list(records)
    seq = max(r.seq for r in records if r.op == CHECKPOINT_OP)
    old = out[seq]
    out[seq] = old._replace(detail={"sha256": _digest(state), "state": state})
    return out


SINKS = ["memory", "jsonl", "sqlite"]


def _open(kind: str, records: Sequence[LogRecord], where: Path) -> tuple[Buffer, list[str]]:
    """A buffer recovered from ``records`` stored in a sink of ``kind``
    (written through the sink, as any writer of the file could), and the
    warnings recovery logged."""
    seen: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    sink: Any
    if kind == "memory":
        sink = MemoryLog(records)
    else:
        path = where / ("log.jsonl" if kind == "jsonl" else "log.db")
        if path.exists():
            path.unlink()
        cls: Any = JsonlLog if kind == "jsonl" else SQLiteLog
        sink = cls(path)
        sink.write(records)
        sink.close()
        sink = cls(path)
    keep = Keep()
    logger = logging.getLogger("quiesce.checkpoint")
    logger.addHandler(keep)
    try:
        buf = Buffer(log=sink, checkpoint_every=0)
    finally:
        logger.removeHandler(keep)
        sink.close()
    return buf, seen


class TestTheAnchor:
    def test_every_checkpoint_follows_its_anchor(self, honest: list[LogRecord]) -> None:
        """The engine writes each checkpoint right after an anchor record
        carrying its checksum; the anchor publishes no version."""
        seqs = [r.seq for r in honest if r.op == CHECKPOINT_OP]
        assert len(seqs) == 2
        for seq in seqs:
            anchor = honest[seq - 1]
            assert anchor.op == ANCHOR_OP and anchor.version is None
            assert anchor.detail == {"sha256": honest[seq].detail["sha256"]}

    @pytest.mark.parametrize("kind", SINKS)
    def test_an_honest_log_starts_at_its_newest_checkpoint(
        self, kind: str, honest: list[LogRecord], tmp_path: Path
    ) -> None:
        buf, warnings = _open(kind, honest, tmp_path)
        assert warnings == []
        assert buf._st.records.first == _states(honest)[-1]["records"]
        assert state_fields(buf) == state_fields(_oracle(honest))
        buf._check()

    @pytest.mark.parametrize("kind", SINKS)
    @pytest.mark.parametrize(
        "lie",
        [
            "dropped_constraint_and_its_ledger_line",
            "dropped_negative_result_and_its_ledger_line",
            "dropped_mark",
            "dropped_queued_removal",
            "lying_escalation_counter",
            "swapped_order_keys",
        ],
    )
    def test_a_lie_consistent_within_itself_falls_back(
        self, kind: str, lie: str, honest: list[LogRecord], tmp_path: Path
    ) -> None:
        """The lies no claim of the checkpoint can catch (consistent within
        it, no trace in a record it names) are refused by the anchor at
        load: recovery falls back to the older checkpoint, and the buffer
        holds exactly the full replay's state."""
        state = copy.deepcopy(_states(honest)[-1])
        LIES[lie](state)
        records = _with_state(honest, state)
        buf, warnings = _open(kind, records, tmp_path)
        seq = state["records"]
        assert len(warnings) == 1
        assert re.fullmatch(
            rf"skipping checkpoint {seq} of <.*>: checkpoint {seq} is not the one its "
            rf"anchor \(record {seq - 1}\) announced; falling back to an older checkpoint",
            warnings[0],
        ), warnings
        assert state_fields(buf) == state_fields(_oracle(records))
        buf._check()
        result = verify_records(iter(records), Buffer)
        assert result.disagreement is not None and result.disagreement.seq == seq

    @pytest.mark.parametrize("kind", SINKS)
    def test_a_checkpoint_without_an_anchor_is_not_used(
        self, kind: str, honest: list[LogRecord], tmp_path: Path
    ) -> None:
        """A checkpoint appended at the end of the log by someone else (here:
        the true state of that moment, minus a mark), with no anchor before
        it, is refused; so would be a checkpoint written before anchors
        existed (the log then opens by a full replay)."""
        oracle = _oracle(honest)
        state = copy.deepcopy(_states(honest)[-1])
        state["marks"] = [m for m in state["marks"] if m[0] != "t5"]
        state["records"] = len(honest)
        records = [*honest, _record(state, 0.0)]
        buf, warnings = _open(kind, records, tmp_path)
        assert len(warnings) == 1
        assert f"checkpoint {len(honest)} has no anchor record before it; " in warnings[0]
        assert state_fields(buf) == state_fields(oracle)
        result = verify_records(iter(records), Buffer)
        assert result.disagreement is not None
        assert result.disagreement.seq == len(honest)

    def test_verify_names_a_wrong_anchor(self, honest: list[LogRecord]) -> None:
        """An honest checkpoint whose anchor announces another one: recovery
        would not use it, and ``verify`` says so (field ``anchor``)."""
        seq = _states(honest)[-1]["records"]
        records = list(honest)
        records[seq - 1] = records[seq - 1]._replace(detail={"sha256": "0" * 64})
        result = verify_records(iter(records), Buffer)
        assert result.disagreement is not None
        assert result.disagreement.seq == seq and result.disagreement.field == "anchor"
        assert result.disagreement.detail == (
            f"checkpoint {seq} is not the one its anchor (record {seq - 1}) announced"
        )
        assert result.checkpoints == 1

    def test_a_lone_anchor_at_the_end_is_harmless(
        self, honest: list[LogRecord], tmp_path: Path
    ) -> None:
        """An anchor whose checkpoint never followed (its batch is one
        commit, but a foreign writer may leave one) changes nothing."""
        anchor = honest[_states(honest)[-1]["records"] - 1]
        records = [*honest, anchor._replace(seq=len(honest))]
        buf, warnings = _open("sqlite", records, tmp_path)
        assert warnings == []
        assert state_fields(buf) == state_fields(_oracle(honest))
        assert verify_records(iter(records), Buffer).disagreement is None

    def test_an_anchor_publishing_a_version_is_refused(self, honest: list[LogRecord]) -> None:
        seq = _states(honest)[-1]["records"] - 1
        records = list(honest)
        records[seq] = records[seq]._replace(version=10**6)
        with pytest.raises(LogFormatError, match=rf"^log record {seq} \(anchor\): "):
            _oracle(records)


def _drop_guarded(state: dict[str, Any], entry_id: str) -> None:
    state["live"] = [row for row in state["live"] if row[0]["id"] != entry_id]
    for name in ("immutable", "protected"):
        state[name] = [row for row in state[name] if row[0] != entry_id]


def _swap_keys(state: dict[str, Any]) -> None:
    a, b = state["live"][-2], state["live"][-1]
    a[1], b[1] = b[1], a[1]
    state["live"].sort(key=lambda row: row[1])


LIES: dict[str, Callable[[dict[str, Any]], None]] = {
    "dropped_constraint_and_its_ledger_line": lambda s: _drop_guarded(s, "sys"),
    "dropped_negative_result_and_its_ledger_line": lambda s: _drop_guarded(s, "neg"),
    "dropped_mark": lambda s: s.__setitem__("marks", [m for m in s["marks"] if m[0] != "t5"]),
    "dropped_queued_removal": lambda s: s.__setitem__(
        "groups", [g for g in s["groups"] if not g[7]]
    ),
    "lying_escalation_counter": lambda s: s.__setitem__(
        "counts", sorted([*s["counts"], ["escalations", 7]])
    ),
    "swapped_order_keys": _swap_keys,
}


# -- the property: every field an edge value or another checkpoint's --

EDGES = [0, -1, 1, 2**63, -(2**63), 1e300, 0.5, "", "host", "x" * 3, None, [], {}, True]
_MISSING = object()


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every path into a JSON value (dict keys, list indexes), depth <= 4,
    the first six items of a list."""
    yield prefix
    if len(prefix) >= 4:
        return
    if isinstance(value, dict):
        for k in sorted(value):
            yield from _paths(value[k], (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value[:6]):
            yield from _paths(v, (*prefix, i))


def _lookup(value: Any, path: tuple[Any, ...]) -> Any:
    try:
        for p in path:
            value = value[p]
    except (KeyError, IndexError, TypeError):
        return _MISSING
    return value


def _set(state: dict[str, Any], where: tuple[Any, ...], how: str, value: Any) -> None:
    parent = state
    for p in where[:-1]:
        parent = parent[p]
    if how == "delete":
        del parent[where[-1]]
    else:
        parent[where[-1]] = copy.deepcopy(value)


@st.composite
def crafted(draw: st.DrawFn, states: list[dict[str, Any]]) -> dict[str, Any]:
    """The newest checkpoint's state with one field, at any depth, replaced
    by an edge value or by the older checkpoint's value at the same place,
    or deleted. The top-level field is drawn first (each as likely), then a
    place inside it."""
    older, newest = states
    state = copy.deepcopy(newest)
    field = draw(st.sampled_from(sorted(state)))
    where = draw(st.sampled_from(list(_paths(state[field], (field,)))))
    how = draw(st.sampled_from(["edge", "other", "delete"]))
    value = None
    if how == "other":
        value = _lookup(older, where)
        assume(value is not _MISSING)
    elif how == "edge":
        value = draw(st.sampled_from(EDGES))
    _set(state, where, how, value)
    assume(state != newest)
    return state


def _check(kind: str, honest: list[LogRecord], state: dict[str, Any], where: Path) -> None:
    """Recovery from the log with the newest checkpoint's state replaced by
    ``state`` gives the full replay's state; it trusted the checkpoint only
    if it is the honest one; ``verify`` names the checkpoint whenever it
    is not."""
    try:
        records = _with_state(honest, state)
    except (TypeError, ValueError, OverflowError):
        assume(False)  # a value JSON cannot hold: not a checkpoint anyone can write
    oracle = _oracle(records)
    try:
        buf, warnings = _open(kind, records, where)
    except (TypeError, ValueError, OverflowError):
        # the sink's encoder refused the crafted record: nothing was written
        assume(False)
    assert state_fields(buf) == state_fields(oracle)
    buf._check()
    seq = _states(honest)[-1]["records"]
    assert any(w.startswith(f"skipping checkpoint {seq} ") for w in warnings), warnings
    result = verify_records(iter(records), Buffer)
    assert result.disagreement is not None and result.disagreement.seq == seq


def _examples(n: int) -> Callable[..., Any]:
    return settings(
        max_examples=n,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )


@pytest.mark.parametrize("kind", SINKS)
@given(data=st.data())
@_examples(20)
def test_crafted_checkpoints_fall_back_or_give_the_full_replay_state(
    kind: str, honest: list[LogRecord], tmp_path: Path, data: st.DataObject
) -> None:
    """A crafted, checksummed checkpoint (any field an edge value or the
    other checkpoint's, or deleted) written over the engine's: recovery
    falls back and gives exactly the full replay's state."""
    _check(kind, honest, data.draw(crafted(_states(honest))), tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("kind", SINKS)
@given(data=st.data())
@_examples(400)
def test_crafted_checkpoints_long(
    kind: str, honest: list[LogRecord], tmp_path: Path, data: st.DataObject
) -> None:
    """As the test above, with more examples."""
    _check(kind, honest, data.draw(crafted(_states(honest))), tmp_path)


def _top_fields(honest: list[LogRecord]) -> list[str]:
    return sorted(_states(honest)[-1])


def _every_field(kind: str, honest: list[LogRecord], where: Path, edges: list[Any]) -> None:
    older, newest = _states(honest)
    tried = 0
    for field in _top_fields(honest):
        for value in [*edges, older.get(field, _MISSING)]:
            if value is _MISSING:
                continue
            state = copy.deepcopy(newest)
            state[field] = copy.deepcopy(value)
            if state == newest:
                continue
            try:
                _digest(state)
            except (TypeError, ValueError, OverflowError):
                continue  # a value JSON cannot hold
            _check(kind, honest, state, where)
            tried += 1
    assert tried >= len(edges) * len(_top_fields(honest))


#: a few edge values of each JSON type, for the file sinks' default run
FEW_EDGES = [None, -1, 2**63, "", [], {}]


@pytest.mark.parametrize("kind", SINKS)
def test_every_field_edge_and_other(kind: str, honest: list[LogRecord], tmp_path: Path) -> None:
    """Not left to chance: every top-level field of the state, replaced by
    edge values (all of them in memory, one of each JSON type on JSONL, two
    on SQLite, whose opens cost most) and
    by the older checkpoint's value, falls back to the full replay's state."""
    edges = {"memory": EDGES, "jsonl": FEW_EDGES, "sqlite": FEW_EDGES[:2]}[kind]
    _every_field(kind, honest, tmp_path, edges)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
def test_every_field_every_edge(kind: str, honest: list[LogRecord], tmp_path: Path) -> None:
    """As above, every edge value on the file sinks too."""
    _every_field(kind, honest, tmp_path, EDGES)
