"""Checkpoints (issue 13): recovery from the newest valid checkpoint and the
tail equals a full replay; damaged checkpoints fall back with a warning on
the ``quiesce.checkpoint`` logger. Synchronous: no event loop involved."""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quiesce import Buffer, Entry, Kind
from quiesce._core.checkpoint import _digest
from quiesce._core.replay import replay
from quiesce._log import JsonlLog, SQLiteLog
from quiesce._log._format import encode_json
from quiesce._log.sqlite import record_crc

SINKS = {"sqlite": (SQLiteLog, "log.db"), "jsonl": (JsonlLog, "log.jsonl")}


def _state(buf: Buffer) -> tuple[object, ...]:
    head = buf.head()
    return (
        head.number,
        list(head.entries()),
        dict(head.marks),
        head.tombs,
        sorted((g.gid, g.ids, g.grace) for _, _, g in buf._st.staged),
        dict(buf._st.counts),
        dict(buf._st.refusals),
        dict(buf._st.immutable_hashes),
        len(buf._st.records),
    )


def _full_replay(cls: type, path: Path) -> Buffer:
    log = cls(path)
    try:
        records = log.load()
    finally:
        log.close()
    buf = Buffer()
    replay(buf, records)
    return buf


ops = st.lists(
    st.tuples(
        st.sampled_from(["append", "mark", "prune", "flush", "ckpt", "apply"]), st.integers(0, 30)
    ),
    max_size=80,
)


def _run(buf: Buffer, history: list[tuple[str, int]]) -> None:
    n = 0
    for op, k in history:
        if op == "append":
            kind = Kind.CONSTRAINT if k % 11 == 0 else Kind.TOOL_OUTPUT
            buf.append(Entry(id=f"e{n}", kind=kind, body=f"body {n} {k}"))
            n += 1
        elif op == "mark" and n:
            i = f"e{k % n}"
            if i in buf.head().live and buf.head().live[i].entry.kind is Kind.TOOL_OUTPUT:
                buf.mark_stale(i, "old")
        elif op == "prune" and n:
            buf.prune([f"e{k % n}", f"e{(k * 7) % n}"], reason="done")
        elif op == "flush":
            buf.flush()
        elif op == "ckpt":
            buf.flush(checkpoint=True)
        elif op == "apply":
            buf.apply_due()
    buf.flush()


@pytest.mark.parametrize("sink", sorted(SINKS))
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(history=ops, every=st.sampled_from([0, 3, 10]))
def test_checkpoint_recovery_equals_full_replay(
    tmp_path_factory: pytest.TempPathFactory, sink: str, history: list[tuple[str, int]], every: int
) -> None:
    cls, name = SINKS[sink]
    path = tmp_path_factory.mktemp("ck") / name
    log = cls(path)
    buf = Buffer(log=log, checkpoint_every=every)
    _run(buf, history)
    buf._check()
    want = _state(buf)
    log.close()
    log = cls(path)
    got = Buffer(log=log)
    got._check()
    assert _state(got) == want
    log.close()
    assert _state(_full_replay(cls, path)) == want


def _history(path: Path) -> Buffer:
    log = SQLiteLog(path)
    buf = Buffer(log=log, checkpoint_every=0)
    for i in range(20):
        buf.append(Entry(id=f"e{i}", kind=Kind.TOOL_OUTPUT, body=f"b{i}"))
    buf.flush(checkpoint=True)
    buf.mark_stale("e1", "old")
    buf.flush(checkpoint=True)
    buf.mark_stale("e2", "old")
    buf.prune(["e3"], reason="r")
    buf.flush()
    log.close()
    return buf


def _rewrite(path: Path, seq: int, text: str) -> None:
    """Replace a record's text behind quiesce's back, with a matching row
    CRC, so that only the checkpoint's own checksum can tell."""
    conn = sqlite3.connect(path, isolation_level=None)
    (trigger,) = conn.execute(
        "SELECT sql FROM sqlite_master WHERE name = 'quiesce_log_no_update'"
    ).fetchone()
    conn.execute("DROP TRIGGER quiesce_log_no_update")
    conn.execute(
        "UPDATE quiesce_log SET record = ?, crc = ? WHERE seq = ?",
        (text, record_crc(seq, text), seq),
    )
    conn.execute(trigger)
    conn.close()


def _checkpoint_seqs(path: Path) -> list[int]:
    log = SQLiteLog(path)
    try:
        return list(log.checkpoints()[1])
    finally:
        log.close()


def test_bit_flip_falls_back_to_the_checkpoint_before(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "log.db"
    want = _state(_history(path))
    _, newest = _checkpoint_seqs(path)
    conn = sqlite3.connect(path)
    text = conn.execute("SELECT record FROM quiesce_log WHERE seq = ?", (newest,)).fetchone()[0]
    conn.close()
    flipped = text.replace('"b7"', '"b6"', 1)  # one byte of an entry body
    assert flipped != text
    _rewrite(path, newest, flipped)
    with caplog.at_level(logging.WARNING, logger="quiesce.checkpoint"):
        log = SQLiteLog(path)
        buf = Buffer(log=log)
    buf._check()
    assert _state(buf) == want
    assert [r.getMessage() for r in caplog.records] == [
        f"skipping checkpoint {newest} of {log!r}: checkpoint {newest} fails its checksum; "
        f"falling back to an older checkpoint"
    ]
    log.close()


def test_checkpoint_contradicting_the_tail_falls_back_to_full_replay(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "log.db"
    want = _state(_history(path))
    conn = sqlite3.connect(path)
    for seq in _checkpoint_seqs(path):
        obj = json.loads(
            conn.execute("SELECT record FROM quiesce_log WHERE seq = ?", (seq,)).fetchone()[0]
        )
        state = obj["detail"]["state"]
        # drop e2 from the window, checksum recomputed: the tail marks e2
        state["live"] = [s for s in state["live"] if s[0]["id"] != "e2"]
        obj["detail"]["sha256"] = _digest(state)
        _rewrite(path, seq, encode_json(obj))
    conn.close()
    with caplog.at_level(logging.WARNING, logger="quiesce.checkpoint"):
        log = SQLiteLog(path)
        buf = Buffer(log=log)
    buf._check()
    assert _state(buf) == want
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2
    assert messages[-1].endswith("falling back to a full replay")
    log.close()


def test_checkpoint_every_is_validated() -> None:
    from quiesce import InvalidArgument, InvalidType

    with pytest.raises(InvalidType, match=r"^checkpoint_every must be an int, not str$"):
        Buffer(checkpoint_every="5")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match=r"^checkpoint_every must be >= 0, got -1$"):
        Buffer(checkpoint_every=-1)


def test_flush_checkpoint_without_a_sink_writes_nothing() -> None:
    buf = Buffer()
    buf.append(Entry(id="a", kind=Kind.TOOL_OUTPUT, body="x"))
    buf.flush(checkpoint=True)
    assert [r.op for r in buf.log] == ["append"]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2] / "src"))
    return subprocess.run(
        [sys.executable, "-m", "quiesce", *args], capture_output=True, text=True, env=env
    )


@pytest.mark.parametrize("sink", sorted(SINKS))
def test_compact_cli(tmp_path: Path, sink: str) -> None:
    """``quiesce compact SRC DST``: DST recovers the same state from one
    checkpoint and continues; SRC is byte for byte untouched; errors are one
    line on stderr and exit 2."""
    cls, name = SINKS[sink]
    src, dst = tmp_path / name, tmp_path / f"compact-{name}"
    log = cls(src)
    buf = Buffer(log=log, checkpoint_every=9)
    _run(buf, [("append", i) for i in range(30)] + [("mark", 3), ("prune", 4), ("flush", 0)])
    want = _state(buf)[:-1]  # all but the log length
    log.close()
    before = src.read_bytes()
    done = _cli("compact", str(src), str(dst))
    assert done.returncode == 0, done.stderr
    assert src.read_bytes() == before
    log = cls(dst)
    got = Buffer(log=log)
    got._check()
    assert _state(got)[:-1] == want
    assert [r.op for r in got.log] == ["checkpoint"]
    got.append(Entry(id="after", kind=Kind.TOOL_OUTPUT, body="more"))
    got.flush()
    log.close()
    log = cls(dst)
    again = Buffer(log=log)
    again._check()
    assert [e.id for e in again.head().entries()][-1] == "after"
    log.close()
    assert _full_replay(cls, src).version == buf.version
    # errors: an existing DST, a missing SRC
    exists = _cli("compact", str(src), str(dst))
    assert (exists.returncode, exists.stdout) == (2, "")
    assert exists.stderr == (
        f"quiesce compact: error: {dst} exists: compact writes a new log and never overwrites one\n"
    )
    missing = _cli("compact", str(tmp_path / "nope"), str(tmp_path / "x"))
    assert missing.returncode == 2
    assert missing.stderr == f"quiesce compact: error: {tmp_path / 'nope'} is not a regular file\n"
    assert not (tmp_path / "x").exists()
    shown = _cli("inspect", str(dst), "--op", "checkpoint")
    assert shown.returncode == 0, shown.stderr
    assert "compacted from" in shown.stdout and "checksum ok" in shown.stdout


def test_a_write_while_the_checksum_is_computed_gets_a_checkpoint_of_the_head(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The checksum is computed outside the write lock; an append that lands
    meanwhile must not leave a checkpoint of the state before it (seq and
    state would disagree: recovery would skip it, or worse)."""
    import quiesce._core.checkpoint as checkpoint_mod

    buf = Buffer(log=SQLiteLog(tmp_path / "log.sqlite"), checkpoint_every=0)
    for i in range(5):
        buf.append(Entry(f"e{i}", Kind.REASONING, f"body {i}"))
    real = checkpoint_mod.checkpoint_digest
    calls = []

    def digest_and_write(state: dict[str, object]) -> str:
        calls.append(state["records"])
        if len(calls) == 1:  # the lock is free now: another writer gets in
            buf.append(Entry("late", Kind.REASONING, "late body"))
        return real(state)

    monkeypatch.setattr(checkpoint_mod, "checkpoint_digest", digest_and_write)
    buf.flush(checkpoint=True)
    ck = buf.log[-1]
    assert ck.op == "checkpoint" and ck.seq == len(buf.log) - 1
    assert [e["id"] for e, _, _ in ck.detail["state"]["live"]][-1] == "late"
    buf.sink.close()  # type: ignore[union-attr]
    again = Buffer(log=SQLiteLog(tmp_path / "log.sqlite"), checkpoint_every=0)
    assert again._st.records.first == ck.seq  # recovered from that checkpoint
    assert again.head().entries() == buf.head().entries()
    again.sink.close()  # type: ignore[union-attr]


_JSON_LEAVES = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=40)
    | st.text(alphabet='AB+/= "\\\x01\x7f', min_size=30, max_size=120)  # ASCII, some escaped
    | st.text(alphabet="AB+/=", min_size=30, max_size=120)  # base64-like: verbatim
    | st.text(alphabet='AB"\\é\U0001f600', min_size=30, max_size=120)  # not ASCII
)
_JSON = st.recursive(
    _JSON_LEAVES,
    lambda inner: (
        st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=8), inner, max_size=6)
    ),
    max_leaves=40,
)


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(value=st.dictionaries(st.text(max_size=8), _JSON, max_size=8))
def test_the_digest_fed_in_pieces_is_the_sha256_of_the_canonical_json(
    value: dict[str, object], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``_digest`` walks the state and feeds long strings a piece at a time
    (issue 21: no whole text); with the thresholds patched down so every
    branch runs (walked containers, long strings cut mid-escape, strings
    JSON must escape), it is exactly the SHA-256 of the canonical JSON a
    checkpoint's checksum is defined over."""
    import hashlib

    import quiesce._core.checkpoint as checkpoint_mod

    monkeypatch.setattr(checkpoint_mod, "_BIG", 30)
    monkeypatch.setattr(checkpoint_mod, "_PIECE", 7)
    monkeypatch.setattr(checkpoint_mod, "_WALK_ITEMS", 4)
    want = hashlib.sha256(checkpoint_mod._canonical(value)).hexdigest()
    assert _digest(value) == want


def test_the_digest_refuses_what_json_refuses() -> None:
    """A value canonical JSON cannot encode raises as ``json.dumps`` does,
    wherever it sits (walked or encoded whole): verify_checkpoint names it."""
    for bad in ({"a": [float("nan")]}, {"a": {"b": {1, 2}}}, {"a": [[[[[float("inf")]]]]]}):
        with pytest.raises((TypeError, ValueError)):
            _digest(bad)
