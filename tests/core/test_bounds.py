"""Bounds at the door: every integer the public API stores is checked at the call.

Turns, plan bases, counts and limits end up in records, tombstone columns and
database columns, all signed 64-bit. A value outside (``2**63``), a negative
one where negative is illegal, a ``bool`` or a ``float`` is refused at the
call with :class:`InvalidArgument` / :class:`InvalidType` — the head version
unchanged, nothing half-written — and the largest legal value round-trips
through a real SQLite log.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import reasoning
from quiesce import (
    Buffer,
    EditPlan,
    Entry,
    InvalidArgument,
    InvalidType,
    Kind,
    Override,
    Policy,
    Prune,
    SQLiteLog,
    Status,
    open_buffer,
)
from quiesce._core.entry import MAX_STORED_INT

TOO_BIG = (
    r"must be <= 2\*\*63 - 1 \(the log stores signed 64-bit integers\), "
    r"got 9223372036854775808$"
)


def _buf() -> Buffer:
    buf = Buffer()
    for i in "abc":
        buf.append(reasoning(i))
    return buf


def _entry_turn(value: Any) -> object:
    return Entry("x", Kind.REASONING, "x", turn=value)


def _mark_turn(value: Any) -> object:
    buf = _buf()
    before = buf.version
    try:
        return buf.mark_stale("a", "old", turn=value)
    finally:
        if buf.version == before:
            buf._check()


def _prune_turn(value: Any) -> object:
    return _buf().prune(["a"], reason="stale", turn=value)


def _plan_turn(value: Any) -> object:
    return EditPlan([Prune("a")], reason="tidy", turn=value)


def _plan_base(value: Any) -> object:
    return EditPlan([Prune("a")], reason="tidy", base=value)


def _override_turn(value: Any) -> object:
    return Override("on purpose", value)


def _escalation_capacity(value: Any) -> object:
    return Buffer(escalation_capacity=value)


def _log_retention(value: Any) -> object:
    return Buffer(log_retention=value)


def _checkpoint_every(value: Any) -> object:
    return Buffer(checkpoint_every=value)


def _max_backlog(value: Any) -> object:
    return Policy(max_backlog=value)


#: (argument, call, whether None is legal): every integer the API stores.
ARGUMENTS: list[tuple[str, Callable[[Any], object], bool]] = [
    ("turn", _entry_turn, True),
    ("turn", _mark_turn, True),
    ("turn", _prune_turn, True),
    ("turn", _plan_turn, True),
    ("base", _plan_base, True),
    ("override turn", _override_turn, False),
    ("escalation_capacity", _escalation_capacity, False),
    ("log_retention", _log_retention, False),
    ("checkpoint_every", _checkpoint_every, False),
    ("max_backlog", _max_backlog, False),
]


@pytest.mark.parametrize(
    ("name", "call", "none_ok"), ARGUMENTS, ids=lambda a: getattr(a, "__name__", None)
)
class TestEveryStoredInteger:
    def test_the_largest_signed_64_bit_value_is_accepted(
        self, name: str, call: Callable[[Any], object], none_ok: bool
    ) -> None:
        call(MAX_STORED_INT)
        call(0)

    def test_two_to_the_63_is_refused(
        self, name: str, call: Callable[[Any], object], none_ok: bool
    ) -> None:
        with pytest.raises(InvalidArgument, match=rf"^{name} {TOO_BIG}"):
            call(2**63)
        with pytest.raises(InvalidArgument, match=rf"^{name} must be <= 2\*\*63 - 1"):
            call(10**30)
        huge = rf"^{name} must be <= .* got an int of 16610 bits$"
        with pytest.raises(InvalidArgument, match=huge):
            call(10**5000)

    def test_a_negative_value_is_refused(
        self, name: str, call: Callable[[Any], object], none_ok: bool
    ) -> None:
        with pytest.raises(InvalidArgument, match=rf"^{name} must be >= 0, got -1$"):
            call(-1)

    @pytest.mark.parametrize("bad", [True, False, 1.0, float("nan"), "1"])
    def test_a_bool_float_or_str_is_refused(
        self, name: str, call: Callable[[Any], object], none_ok: bool, bad: object
    ) -> None:
        optional = " or None" if none_ok else ""
        pattern = rf"^{name} must be an int{optional}, not {type(bad).__name__}$"
        with pytest.raises(InvalidType, match=pattern):
            call(bad)


class TestJsonIntegers:
    @pytest.mark.parametrize("field", ["meta", "content"])
    def test_integers_in_meta_and_content_fit_in_64_bits(self, field: str) -> None:
        """``meta`` and ``content`` integers are stored as JSON in the log:
        the signed 64-bit range is accepted, one past either end refused."""
        for ok in (MAX_STORED_INT, -(2**63), 0):
            Entry("x", Kind.REASONING, "x", **{field: {"n": [ok]}})
        for bad in (2**63, -(2**63) - 1, 10**5000):
            with pytest.raises(
                InvalidArgument, match=rf"^{field} must hold integers that fit in signed 64 bits"
            ):
                Entry("x", Kind.REASONING, "x", **{field: {"n": [bad]}})


class TestRedTeamTurn:
    def test_prune_with_turn_2_63_is_refused_and_later_prunes_work(self, tmp_path: Path) -> None:
        """The red team's case: ``prune(..., turn=2**63)`` used to be accepted
        and overflow the tombstone column half-way through the removal. Now
        it is refused at the call, the version is unchanged, later prunes
        land with the right tombstones, and the durable log reopens to the
        same state."""
        path = tmp_path / "log.db"
        buf = Buffer(log=SQLiteLog(path))
        for i in range(3):
            buf.append(reasoning(f"e{i}"))
        before = buf.version
        with pytest.raises(InvalidArgument, match=rf"^turn {TOO_BIG}"):
            buf.prune(["e1", "e2"], reason="stale", turn=2**63)
        assert buf.version == before and not buf.staged()
        buf._check(expect_no_pins=True)
        report = buf.prune(["e1"], reason="stale", turn=7)
        assert report["e1"].status is Status.PRUNED
        report = buf.prune(["e2"], reason="stale", turn=MAX_STORED_INT)
        assert report["e2"].status is Status.PRUNED
        tombs = buf.tombstones
        assert (tombs["e1"].id, tombs["e1"].turn) == ("e1", 7)
        assert (tombs["e2"].id, tombs["e2"].turn) == ("e2", MAX_STORED_INT)
        with buf.snapshot() as snap:
            assert [e.id for e in snap] == ["e0"]
        buf._check(expect_no_pins=True)
        buf.flush()
        buf.sink.close()  # type: ignore[union-attr]
        again = Buffer(log=SQLiteLog(path))
        assert again.tombstones["e2"].turn == MAX_STORED_INT
        assert again.tombstones["e1"].id == "e1"
        with again.snapshot() as snap:
            assert [e.id for e in snap] == ["e0"]
        again._check(expect_no_pins=True)
        again.sink.close()  # type: ignore[union-attr]

    def test_the_largest_values_round_trip_through_sqlite(self, tmp_path: Path) -> None:
        """An entry turn, a mark turn, an edit turn and an override turn of
        ``2**63 - 1`` are written and recovered exactly."""
        path = tmp_path / "log.db"
        buf = Buffer(log=SQLiteLog(path))
        big = MAX_STORED_INT
        buf.append(Entry("a", Kind.REASONING, "a", turn=big, meta={"n": big, "m": -(2**63)}))
        buf.append(reasoning("b"))
        buf.append(reasoning("c"))
        buf.mark_stale("b", "old", turn=big)
        assert buf.edit(EditPlan([Prune("c")], reason="tidy", turn=big)).applied
        buf.prune(["b"], reason="stale", turn=big)
        buf.append(Entry("c2", Kind.REASONING, "step c"), override=Override("again", big))
        buf.flush()
        buf.sink.close()  # type: ignore[union-attr]
        again = Buffer(log=SQLiteLog(path))
        with again.snapshot() as snap:
            a = snap["a"]
            assert a.turn == big and dict(a.meta) == {"n": big, "m": -(2**63)}
        assert again.tombstones["b"].turn == big and again.tombstones["c"].turn == big
        again._check(expect_no_pins=True)
        again.sink.close()  # type: ignore[union-attr]


@pytest.mark.anyio
class TestRuntimeOptions:
    @pytest.mark.parametrize(
        ("value", "error", "message"),
        [
            (2**63, InvalidArgument, rf"^escalation_buffer {TOO_BIG}"),
            (-1, InvalidArgument, r"^escalation_buffer must be >= 0, got -1$"),
            (True, InvalidType, r"^escalation_buffer must be an int, not bool$"),
            (1.0, InvalidType, r"^escalation_buffer must be an int, not float$"),
        ],
    )
    async def test_escalation_buffer(self, value: object, error: type, message: str) -> None:
        with pytest.raises(error, match=message):
            async with open_buffer(escalation_buffer=value):  # type: ignore[arg-type]
                pass  # pragma: no cover

    @pytest.mark.parametrize("option", ["max_pin_age", "flush_interval"])
    async def test_seconds_must_be_finite(self, option: str) -> None:
        with pytest.raises(InvalidArgument, match=rf"^{option} must be a finite number"):
            async with open_buffer(**{option: float("inf")}):
                pass  # pragma: no cover

    async def test_the_largest_escalation_buffer_is_accepted(self) -> None:
        async with open_buffer(escalation_buffer=MAX_STORED_INT) as buf:
            buf.append(reasoning("a"))
