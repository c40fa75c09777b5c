"""Recovery refuses impossible histories (issue 11, defect 5).

Each test crafts a log whose records are well formed and correctly
checksummed but describe a history the engine cannot have written, stores it
in a real JSONL or SQLite file through the sink itself, and checks that
recovery and ``quiesce inspect`` refuse it with :class:`LogFormatError`
naming the record — where before they recovered a buffer that failed
``_check()``, or crashed with ``OverflowError``/``IndexError``/``TypeError``.
Logs the engine writes are always accepted (``TestEngineLogsPass``).
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings

from _workload import Workload, state
from quiesce import Buffer, Entry, JsonlLog, Kind, LogFormatError, LogRecord, SQLiteLog
from quiesce._log._format import encode_json
from quiesce._log.inspect import main as inspect_main
from test_log_recovery import ops_strategy

SINKS: dict[str, Callable[[Path], Any]] = {"sqlite": SQLiteLog, "jsonl": JsonlLog}


def _entry(i: str, kind: Kind = Kind.REASONING, refs: tuple[str, ...] = ()) -> dict[str, Any]:
    return Entry(i, kind, f"body of {i}", refs).to_dict()


def _rec(seq: int, op: str, version: int | None, ids: tuple[str, ...], **detail: Any) -> LogRecord:
    outcome = detail.pop("outcome", "applied")
    reason = detail.pop("reason", None)
    return LogRecord(seq, 1.0, op, version, ids, None, reason, None, outcome, detail)


def _append(seq: int, entry: dict[str, Any], key: Any = None) -> LogRecord:
    return _rec(
        seq, "append", seq + 1, (entry["id"],), entry=entry, key=float(seq) if key is None else key
    )


def _tomb(entry: dict[str, Any], version: int) -> dict[str, Any]:
    e = Entry.from_dict(entry)
    return {
        "id": e.id,
        "content_hash": e.content_hash,
        "reason": "crafted",
        "turn": None,
        "actor": None,
        "version": version,
        "kind": e.kind.value,
        "key": e.key,
    }


RULE = _entry("rule", Kind.CONSTRAINT)
NEG = _entry("neg", Kind.NEGATIVE)
CALL = _entry("call", Kind.TOOL_CALL)
OUT = _entry("out", Kind.TOOL_OUTPUT, ("call",))
A = _entry("a")

#: name -> (records, the message recovery must raise, matched in full)
CRAFTED: dict[str, tuple[list[LogRecord], str]] = {
    "tombstone for a constraint": (
        [_append(0, RULE), _rec(1, "remove", 2, ("rule",), tombstones=[_tomb(RULE, 2)])],
        r"log record 1 \(remove\): protected 'rule' is removed",
    ),
    "tombstone for a negative result": (
        [_append(0, NEG), _rec(1, "remove", 2, ("neg",), tombstones=[_tomb(NEG, 2)])],
        r"log record 1 \(remove\): protected 'neg' is removed",
    ),
    "removal while a live entry cites it": (
        [
            _append(0, CALL),
            _append(1, OUT),
            _rec(2, "remove", 3, ("call",), tombstones=[_tomb(CALL, 3)]),
        ],
        r"log record 2 \(remove\): 'call' is removed while 'out' cites it",
    ),
    "append citing a missing entry": (
        [_append(0, OUT)],
        r"log record 0 \(append\): 'out' cites 'call', which is not live",
    ),
    "rewritten constraint": (
        [
            _append(0, RULE),
            _rec(1, "edit", 2, ("rule",), rewrites=[RULE | {"body": "anything goes"}]),
        ],
        r"log record 1 \(edit\): immutable 'rule' is rewritten",
    ),
    "marked constraint (fast path)": (
        [_append(0, RULE), _rec(1, "mark", 2, ("rule",), reason="stale")],
        r"log record 1 \(mark\): immutable 'rule' is marked",
    ),
    "marked constraint (prune)": (
        [_append(0, RULE), _rec(1, "prune", 2, ("rule",), marks=[["rule", "stale", None]])],
        r"log record 1 \(prune\): immutable 'rule' is marked",
    ),
    "tombstoned id appended again": (
        [
            _append(0, A),
            _rec(1, "remove", 2, ("a",), tombstones=[_tomb(A, 2)]),
            _append(2, A),
        ],
        r"log record 2 \(append\): 'a' is added again after its tombstone",
    ),
    "id appended twice": (
        [_append(0, A), _append(1, A)],
        r"log record 1 \(append\): 'a' is added while live",
    ),
    "duplicate order keys": (
        [_append(0, A), _append(1, CALL, key=0.0)],
        r"log record 1 \(append\): order key 0\.0 of 'call' is held by 'a'",
    ),
    "duplicate order keys after a move": (
        [_append(0, A), _append(1, CALL), _rec(2, "edit", 3, ("a",), keys={"a": 1.0})],
        r"log record 2 \(edit\): order key 1\.0 of 'a' is held by 'call'",
    ),
    "NaN order key": (
        [_append(0, A, key="nan")],
        r"log record 0 \(append\): order key 'nan' is not a finite number",
    ),
    "huge order key": (
        [_append(0, A, key=2.0**53)],
        r"log record 0 \(append\): order key 9007199254740992\.0 is out of range",
    ),
    "a version that skips": (
        [_append(0, A), _rec(1, "mark", 5, ("a",), reason="stale")],
        r"log record 1 \(mark\): it publishes version 5 after 1",
    ),
    "a removal of an unknown id": (
        [_append(0, A), _rec(1, "remove", 2, ("b",), tombstones=[_tomb(A, 2) | {"id": "b"}])],
        r"log record 1 \(remove\): 'b' is removed but not live",
    ),
    "a tombstone with another hash": (
        [
            _append(0, A),
            _rec(1, "remove", 2, ("a",), tombstones=[_tomb(A, 2) | {"content_hash": "0"}]),
        ],
        r"log record 1 \(remove\): the tombstone of 'a' does not match the entry",
    ),
    "a staged removal of an unmarked entry": (
        [_append(0, A), _rec(1, "edit", 2, ("a",), staged=[[1, ["a"], 2, 2]])],
        r"log record 1 \(edit\): 'a' is staged but not live and marked",
    ),
    "a mark with no id": (
        [_append(0, A), _rec(1, "mark", 2, (), reason="stale")],
        r"log record 1 \(mark\): a mark names 0 ids, not one",
    ),
    "an unknown refusal": (
        [_rec(0, "escalate", None, (), outcome="escalated", refusals=[[1]])],
        r"log record 0 \(escalate\) is malformed: ValueError\(.*",
    ),
    "an entry that is not an object": (
        [_rec(0, "append", 1, ("a",), entry=5, key=0.0)],
        r"log record 0 \(append\) is malformed: .*",
    ),
    "a refusal that publishes a version": (
        [_rec(0, "refuse", 1, ("a",), outcome="readmission")],
        r"log record 0 \(refuse\): a refuse record publishes a version",
    ),
}


def _store(kind: str, path: Path, records: list[LogRecord]) -> None:
    sink = SINKS[kind](path)
    sink.write(records)
    sink.close()


@pytest.mark.parametrize("kind", sorted(SINKS))
@pytest.mark.parametrize("name", sorted(CRAFTED))
def test_crafted_history_is_refused(
    kind: str, name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Recovery raises LogFormatError naming the record; inspect exits 1 with
    the same message on one line; the file is unchanged."""
    records, message = CRAFTED[name]
    path = tmp_path / f"log.{kind}"
    _store(kind, path, records)
    before = path.read_bytes()
    with pytest.raises(LogFormatError, match=rf"^{message}$"):
        Buffer(log=SINKS[kind](path))
    assert inspect_main([str(path)]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("quiesce inspect: error: log record ")
    assert path.read_bytes() == before


def _jsonl(path: Path, lines: list[str]) -> None:
    """A JSONL log holding ``lines`` as one committed batch (a valid CRC)."""
    batch = "".join(line + "\n" for line in lines).encode()
    commit = {"commit": len(lines) - 1, "n": len(lines), "crc": zlib.crc32(batch)}
    header = json.dumps({"quiesce": "edit-log", "format": 1, "created": 1.0})
    path.write_bytes(header.encode() + b"\n" + batch + json.dumps(commit).encode() + b"\n")


_GOOD = (
    '{"format":1,"seq":0,"time":1.0,"op":"append","version":1,"ids":["a"],"actor":null,'
    '"reason":null,"turn":null,"outcome":"applied","detail":{"entry":{"id":"a",'
    '"kind":"reasoning","body":"x"},"key":0.0}}'
)


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ('"time":1.0', '"time":1e400', r"has an invalid time field"),
        ('"time":1.0', '"time":' + "9" * 400, r"has an invalid time field"),
        ('"version":1', '"version":1e400', r"has an invalid version field"),
        ('"version":1', '"version":true', r"has an invalid version field"),
        ('"seq":0', '"seq":1e400', r"has an invalid seq field"),
        ('"turn":null', '"turn":-1', r"has an invalid turn field"),
        ('"turn":null', '"turn":[1]', r"has an invalid turn field"),
        ('"actor":null', '"actor":{"a":1}', r"has an invalid actor field"),
        ('"ids":["a"]', '"ids":[1]', r"has a non-string id"),
        ('"key":0.0', '"key":1e400', r"order key inf is not a finite number"),
        ('"key":0.0', '"key":NaN', r"NaN is not strict JSON|is not valid JSON"),
        ('"op":"append"', '"op":["append"]', r"has unknown op"),
        ('"body":"x"', '"body":7', r"is malformed"),
        ('"kind":"reasoning"', '"kind":{}', r"is malformed"),
    ],
)
def test_crafted_fields_never_crash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], old: str, new: str, message: str
) -> None:
    """Out-of-range numbers, wrong types and non-strict JSON inside a
    committed batch: LogFormatError (before: OverflowError, TypeError), and
    inspect exits 1."""
    path = tmp_path / "log.jsonl"
    assert old in _GOOD
    _jsonl(path, [_GOOD.replace(old, new)])
    with pytest.raises(LogFormatError, match=message):
        Buffer(log=JsonlLog(path))
    assert inspect_main([str(path)]) == 1
    assert "quiesce inspect: error: " in capsys.readouterr().err


def test_the_good_line_recovers(tmp_path: Path) -> None:
    """The template the crafted lines come from is itself a valid log."""
    path = tmp_path / "log.jsonl"
    _jsonl(path, [_GOOD])
    buf = Buffer(log=JsonlLog(path))
    assert [e.id for e in buf.head().entries()] == ["a"]
    buf._check()


class TestEngineLogsPass:
    @settings(max_examples=60, deadline=None)
    @given(ops=ops_strategy)
    def test_random_histories_recover_exactly(self, ops: list[tuple[int, ...]]) -> None:
        """Whatever the engine writes, replay accepts: random histories (all
        operations, refusals, re-admissions, renumbering moves, staged and
        applied removals) recover to the same state and pass _check()."""
        buf = Buffer()
        work = Workload(buf)
        for op in ops:
            work.run(op)
        work.release_all()
        buf.apply_due()
        again = Buffer()
        from quiesce._core.replay import replay

        replay(again, list(buf.log))
        again._check(expect_no_pins=True)
        assert state(again) == state(buf)

    @pytest.mark.parametrize("kind", sorted(SINKS))
    def test_deep_meta_recovers_from_deep_in_the_stack(self, kind: str, tmp_path: Path) -> None:
        """Meta nested as deep as an entry may be (Entry's MAX_DEPTH), written
        by the engine and recovered with the caller 850 frames deep: no
        RecursionError."""
        import sys

        from quiesce._core.entry import MAX_DEPTH

        meta: Any = "leaf"
        for _ in range(MAX_DEPTH - 1):
            meta = {"k": meta}
        path = tmp_path / f"log.{kind}"
        buf = Buffer(log=SINKS[kind](path))
        buf.append(Entry("deep", Kind.REASONING, "x", meta={"m": meta}))
        buf.flush()
        buf.sink.close()

        def deep(n: int) -> Buffer:
            return Buffer(log=SINKS[kind](path)) if n == 0 else deep(n - 1)

        limit = sys.getrecursionlimit()
        again = deep(limit - 150)
        again._check()
        assert again.head().live["deep"].entry.to_dict() == buf.head().live["deep"].entry.to_dict()
        again.sink.close()


@pytest.mark.parametrize("kind", sorted(SINKS))
def test_meta_900_deep_from_0_1_0_never_recursion_error(kind: str, tmp_path: Path) -> None:
    """quiesce 0.1.0 accepted meta nested 900 deep and wrote it (defect 7:
    recovery then raised RecursionError when it ran 100 frames deep). Such a
    record, recovered with the caller deep in its stack: the entry comes back
    exactly, or the log is refused with LogFormatError (an Entry depth limit)
    — never RecursionError."""
    import sys

    meta: Any = "leaf"
    for _ in range(900):
        meta = {"k": meta}
    entry = {
        "id": "deep",
        "kind": "reasoning",
        "body": "x",
        "refs": [],
        "turn": None,
        "key": None,
        "meta": {"m": meta},
    }
    path = tmp_path / f"log.{kind}"
    _store(kind, path, [_rec(0, "append", 1, ("deep",), entry=entry, key=0.0)])

    def deep(n: int) -> Buffer | LogFormatError:
        if n:
            return deep(n - 1)
        try:
            return Buffer(log=SINKS[kind](path))
        except LogFormatError as exc:
            return exc

    got = deep(sys.getrecursionlimit() - 200)
    if isinstance(got, Buffer):
        got._check()
        assert encode_json(got.head().live["deep"].entry.meta) == encode_json({"m": meta})
        got.sink.close()  # type: ignore[union-attr]
    else:
        assert str(got).startswith("log record 0 (append) is malformed")
