"""Bad input to every public call: a clear QuiesceError (also TypeError or
ValueError, as the errors module says) and nothing changes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from conftest import entry, fill, reasoning
from quiesce import (
    Buffer,
    EditPlan,
    Entry,
    InvalidArgument,
    InvalidType,
    Kind,
    Move,
    Override,
    Policy,
    Prune,
    QuiesceError,
    Rewrite,
    Summarize,
)

S = entry("s", Kind.SUMMARY, "summary")
A: Any = "a"  # typed Any so the deliberate mistakes below type-check

# (call, expected error). Each call receives a buffer holding a, b -> a, c (CONSTRAINT).
CASES: list[tuple[str, Callable[[Buffer], object], type[QuiesceError]]] = [
    # construction
    ("buffer log", lambda b: Buffer(log=5), InvalidType),  # type: ignore[arg-type]
    ("buffer policy", lambda b: Buffer(policy="strict"), InvalidType),  # type: ignore[arg-type]
    ("policy classifier", lambda b: Policy(negative=5), InvalidType),  # type: ignore[arg-type]
    ("policy backlog negative", lambda b: Policy(max_backlog=-1), InvalidArgument),
    ("policy backlog bool", lambda b: Policy(max_backlog=True), InvalidType),
    ("entry empty id", lambda b: Entry("", Kind.REASONING, "x"), InvalidArgument),
    ("entry int id", lambda b: Entry(5, Kind.REASONING, "x"), InvalidType),  # type: ignore[arg-type]
    ("entry str kind", lambda b: Entry("x", "reasoning", "x"), InvalidType),  # type: ignore[arg-type]
    ("entry bytes body", lambda b: Entry("x", Kind.REASONING, b"x"), InvalidType),  # type: ignore[arg-type]
    ("entry bare str refs", lambda b: Entry("x", Kind.REASONING, "x", A), InvalidType),
    ("entry None refs", lambda b: Entry("x", Kind.REASONING, "x", None), InvalidType),  # type: ignore[arg-type]
    ("entry self ref", lambda b: Entry("x", Kind.REASONING, "x", ("x",)), InvalidArgument),
    ("entry empty ref", lambda b: Entry("x", Kind.REASONING, "x", ("",)), InvalidArgument),
    ("entry int ref", lambda b: Entry("x", Kind.REASONING, "x", (1,)), InvalidType),  # type: ignore[arg-type]
    ("entry ref twice", lambda b: Entry("x", Kind.REASONING, "x", ("a", "a")), InvalidArgument),
    ("entry negative turn", lambda b: Entry("x", Kind.REASONING, "x", turn=-1), InvalidArgument),
    ("entry bool turn", lambda b: Entry("x", Kind.REASONING, "x", turn=True), InvalidType),
    ("entry float turn", lambda b: Entry("x", Kind.REASONING, "x", turn=1.0), InvalidType),  # type: ignore[arg-type]
    ("entry empty key", lambda b: Entry("x", Kind.REASONING, "x", key=""), InvalidArgument),
    ("entry int key", lambda b: Entry("x", Kind.REASONING, "x", key=5), InvalidType),  # type: ignore[arg-type]
    ("entry list meta", lambda b: Entry("x", Kind.REASONING, "x", meta=[1]), InvalidType),  # type: ignore[arg-type]
    ("override empty reason", lambda b: Override("", 1), InvalidArgument),
    ("override no turn", lambda b: Override("r", None), InvalidType),  # type: ignore[arg-type]
    ("override negative turn", lambda b: Override("r", -1), InvalidArgument),
    ("override bool turn", lambda b: Override("r", True), InvalidType),
    # append
    ("append a str", lambda b: b.append(A), InvalidType),
    ("append None", lambda b: b.append(None), InvalidType),  # type: ignore[arg-type]
    ("append override str", lambda b: b.append(entry("x"), override=A), InvalidType),
    # mark_stale
    ("mark int id", lambda b: b.mark_stale(5, "r"), InvalidType),  # type: ignore[arg-type]
    ("mark empty id", lambda b: b.mark_stale("", "r"), InvalidArgument),
    ("mark empty reason", lambda b: b.mark_stale("a", ""), InvalidArgument),
    ("mark None reason", lambda b: b.mark_stale("a", None), InvalidType),  # type: ignore[arg-type]
    ("mark negative turn", lambda b: b.mark_stale("a", "r", turn=-1), InvalidArgument),
    ("mark bool turn", lambda b: b.mark_stale("a", "r", turn=True), InvalidType),
    ("mark str turn", lambda b: b.mark_stale("a", "r", turn=A), InvalidType),
    # prune
    ("prune bare str", lambda b: b.prune(A, reason="r"), InvalidType),
    ("prune int", lambda b: b.prune(5, reason="r"), InvalidType),  # type: ignore[arg-type]
    ("prune None", lambda b: b.prune(None, reason="r"), InvalidType),  # type: ignore[arg-type]
    ("prune int id", lambda b: b.prune(["a", 5], reason="r"), InvalidType),  # type: ignore[list-item]
    ("prune empty id", lambda b: b.prune(["a", ""], reason="r"), InvalidArgument),
    ("prune unhashable id", lambda b: b.prune([["a"]], reason="r"), InvalidType),  # type: ignore[list-item]
    ("prune empty reason", lambda b: b.prune(["a"], reason=""), InvalidArgument),
    ("prune int reason", lambda b: b.prune(["a"], reason=5), InvalidType),  # type: ignore[arg-type]
    ("prune empty actor", lambda b: b.prune(["a"], reason="r", actor=""), InvalidArgument),
    ("prune int actor", lambda b: b.prune(["a"], reason="r", actor=5), InvalidType),  # type: ignore[arg-type]
    ("prune negative turn", lambda b: b.prune(["a"], reason="r", turn=-1), InvalidArgument),
    ("prune bool turn", lambda b: b.prune(["a"], reason="r", turn=False), InvalidType),
    # edit and plans
    ("edit None", lambda b: b.edit(None), InvalidType),  # type: ignore[arg-type]
    ("edit list of ops", lambda b: b.edit([Prune("a")]), InvalidType),  # type: ignore[arg-type]
    ("plan no ops", lambda b: EditPlan([], reason="r"), InvalidArgument),
    ("plan str ops", lambda b: EditPlan(A, reason="r"), InvalidType),
    ("plan non-op", lambda b: EditPlan([5], reason="r"), InvalidType),  # type: ignore[list-item]
    ("plan empty reason", lambda b: EditPlan([Prune("a")], reason=""), InvalidArgument),
    ("plan None reason", lambda b: EditPlan([Prune("a")], reason=None), InvalidType),  # type: ignore[arg-type]
    ("plan str rationale", lambda b: EditPlan([Prune("a")], reason="r", rationale=A), InvalidType),
    (
        "plan empty rationale id",
        lambda b: EditPlan([Prune("a")], reason="r", rationale=[""]),
        InvalidArgument,
    ),
    ("plan empty actor", lambda b: EditPlan([Prune("a")], reason="r", actor=""), InvalidArgument),
    ("plan negative turn", lambda b: EditPlan([Prune("a")], reason="r", turn=-1), InvalidArgument),
    ("plan bool turn", lambda b: EditPlan([Prune("a")], reason="r", turn=True), InvalidType),
    ("plan negative base", lambda b: EditPlan([Prune("a")], reason="r", base=-1), InvalidArgument),
    ("plan bool base", lambda b: EditPlan([Prune("a")], reason="r", base=True), InvalidType),
    ("plan str override", lambda b: EditPlan([Prune("a")], reason="r", override=A), InvalidType),
    (
        "plan prunes twice",
        lambda b: EditPlan([Prune("a"), Prune("a")], reason="r"),
        InvalidArgument,
    ),
    (
        "plan prunes and rewrites",
        lambda b: EditPlan([Prune("a"), Rewrite("a", "x")], reason="r"),
        InvalidArgument,
    ),
    (
        "plan rewrites twice",
        lambda b: EditPlan([Rewrite("a", "x"), Rewrite("a", "y")], reason="r"),
        InvalidArgument,
    ),
    (
        "plan summarizes and moves",
        lambda b: EditPlan([Summarize(("a",), S), Move("a")], reason="r"),
        InvalidArgument,
    ),
    (
        "plan creates a summary twice",
        lambda b: EditPlan([Summarize(("a",), S), Summarize(("b",), S)], reason="r"),
        InvalidArgument,
    ),
    ("prune op empty id", lambda b: Prune(""), InvalidArgument),
    ("prune op int id", lambda b: Prune(5), InvalidType),  # type: ignore[arg-type]
    ("rewrite int body", lambda b: Rewrite("a", 5), InvalidType),  # type: ignore[arg-type]
    ("rewrite str refs", lambda b: Rewrite("a", "x", refs=A), InvalidType),
    ("rewrite self ref", lambda b: Rewrite("a", "x", refs=("a",)), InvalidArgument),
    ("summarize nothing", lambda b: Summarize((), S), InvalidArgument),
    ("summarize str ids", lambda b: Summarize(A, S), InvalidType),
    ("summarize id twice", lambda b: Summarize(("a", "a"), S), InvalidArgument),
    ("summarize into str", lambda b: Summarize(("a",), A), InvalidType),
    ("summarize into itself", lambda b: Summarize(("s",), S), InvalidArgument),
    ("move empty id", lambda b: Move(""), InvalidArgument),
    ("move before itself", lambda b: Move("a", before="a"), InvalidArgument),
    ("move before int", lambda b: Move("a", before=5), InvalidType),  # type: ignore[arg-type]
]


def _reader(call: Callable[[Any], object]) -> Callable[[Buffer], object]:
    def read(b: Buffer) -> object:
        with b.snapshot() as snap:
            return call(snap)

    return read


SNAPSHOT_CASES: list[tuple[str, Callable[[Buffer], object], type[QuiesceError]]] = [
    ("getitem int", _reader(lambda s: s[5]), InvalidType),
    ("getitem empty", _reader(lambda s: s[""]), InvalidArgument),
    ("getitem unhashable", _reader(lambda s: s[["a"]]), InvalidType),
    ("get int", _reader(lambda s: s.get(5)), InvalidType),
    ("resolve None", _reader(lambda s: s.resolve(None)), InvalidType),
    ("resolve empty", _reader(lambda s: s.resolve("")), InvalidArgument),
    ("mark int", _reader(lambda s: s.mark(5)), InvalidType),
    ("is_stale unhashable", _reader(lambda s: s.is_stale(["a"])), InvalidType),
]


@pytest.fixture
def prepared(buf: Buffer) -> Buffer:
    fill(buf, reasoning("a"), reasoning("b", "a"), entry("c", Kind.CONSTRAINT))
    buf.mark_stale("a", "old")
    return buf


@pytest.mark.parametrize(
    ("call", "error"),
    [pytest.param(c, e, id=name) for name, c, e in CASES + SNAPSHOT_CASES],
)
def test_bad_input_raises_and_changes_nothing(
    prepared: Buffer, call: Callable[[Buffer], object], error: type[QuiesceError]
) -> None:
    """Each bad call raises its QuiesceError subclass (a TypeError for a wrong
    type, a ValueError for a wrong value) and leaves version, log, window and
    marks unchanged."""
    with prepared.snapshot() as snap:
        before = (list(snap), dict(snap.marks))
    v, n = prepared.version, len(prepared.log)
    with pytest.raises(error) as info:
        call(prepared)
    assert isinstance(info.value, QuiesceError)
    if error is InvalidType:
        assert isinstance(info.value, TypeError)
    if error is InvalidArgument:
        assert isinstance(info.value, ValueError)
    assert str(info.value)
    assert (prepared.version, len(prepared.log)) == (v, n)
    with prepared.snapshot() as snap:
        assert (list(snap), dict(snap.marks)) == before


class TestMessages:
    def test_empty_id(self) -> None:
        """An empty id says what is wrong."""
        with pytest.raises(InvalidArgument, match=r"^id must be a non-empty str$"):
            Entry("", Kind.REASONING, "x")

    def test_wrong_id_type(self) -> None:
        """A wrong id type names the type it got."""
        with pytest.raises(InvalidType, match=r"^id must be a str, not int$"):
            Entry(5, Kind.REASONING, "x")  # type: ignore[arg-type]

    def test_self_reference(self) -> None:
        """A ref to itself is refused by name."""
        with pytest.raises(InvalidArgument, match=r"^entry 'x' must not reference itself$"):
            Entry("x", Kind.REASONING, "x", ("x",))

    def test_negative_turn(self) -> None:
        """A negative turn reports the value."""
        with pytest.raises(InvalidArgument, match=r"^turn must be >= 0, got -3$"):
            Entry("x", Kind.REASONING, "x", turn=-3)

    def test_bool_turn(self) -> None:
        """A bool is not a turn number."""
        with pytest.raises(InvalidType, match=r"^turn must be an int or None, not bool$"):
            Entry("x", Kind.REASONING, "x", turn=True)

    def test_append_non_entry(self, buf: Buffer) -> None:
        """append names what it got instead of an Entry."""
        with pytest.raises(InvalidType, match=r"^append takes an Entry, not dict$"):
            buf.append({"id": "a"})  # type: ignore[arg-type]
