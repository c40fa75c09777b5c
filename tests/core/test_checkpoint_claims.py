"""A checkpoint is a claim recovery checks (issue 21): crafted checkpoints
with a valid SHA-256 either make recovery fall back (a warning on the
``quiesce.checkpoint`` logger, then the older checkpoint or a full replay)
or cannot alter the protected content; ``verify`` names the disagreement of
every lie. The oracle is always a full replay of the same log.
Synchronous: no event loop involved."""

from __future__ import annotations

import copy
import json
import logging
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from quiesce import Buffer, EditPlan, Entry, Kind, LogFormatError, Override, Prune
from quiesce._core.checkpoint import _digest
from quiesce._core.ledger import guarded
from quiesce._core.replay import replay
from quiesce._core.verify import state_fields, verify_records
from quiesce._log import JsonlLog, SQLiteLog
from quiesce._log._format import encode_json
from quiesce._log.sqlite import record_crc

THINKING = {"type": "thinking", "thinking": "the pods first", "signature": "c2lnbmVk"}
OVERRIDE = Override("the user undid their message", 3)


def _fill(buf: Buffer) -> None:
    """A history with every kind of protected content, marks, a staged
    removal, a host retraction in flight and tombstones."""
    buf.append(Entry("sys", Kind.CONSTRAINT, "answer in English"))
    buf.append(Entry("u1", Kind.INSTRUCTION, "list the pods"))
    buf.append(Entry("u9", Kind.INSTRUCTION, "the user's second wish"))
    buf.append(Entry("no", Kind.PROHIBITION, "do not touch /etc"))
    buf.append(Entry("neg", Kind.NEGATIVE, "the deploy failed: do not retry it"))
    buf.append(Entry("th", Kind.REASONING, "thinking", content=THINKING))
    for i in range(10):
        buf.append(Entry(f"t{i}", Kind.TOOL_OUTPUT, f"output {i}"))
    buf.mark_stale("t0", "old")
    buf.prune(["t1", "t2"], reason="done")  # removed now: tombstones


def _history(path: Path, cls: type = SQLiteLog) -> Path:
    """``path``: a log with two checkpoints (the newest holds a staged
    removal and a host retraction in flight) and a tail."""
    log = cls(path)
    buf = Buffer(log=log, checkpoint_every=0)
    _fill(buf)
    buf.flush(checkpoint=True)
    # a reader the removals below wait for: never released, so the log
    # ends with them staged (the process "stops" here)
    buf.snapshot().__enter__()
    buf.prune(["t3", "t4"], reason="stale")
    assert buf.edit(EditPlan([Prune("u9")], reason="undo", actor="host", override=OVERRIDE))
    buf.mark_stale("t5", "old")
    buf.flush(checkpoint=True)
    buf.append(Entry("t10", Kind.TOOL_OUTPUT, "after the checkpoint"))
    buf.flush()
    log.close()
    return path


def _records(path: Path, cls: type = SQLiteLog) -> list[Any]:
    log = cls(path)
    try:
        return list(log.load())
    finally:
        log.close()


def _full_replay(path: Path, cls: type = SQLiteLog) -> Buffer:
    buf = Buffer()
    replay(buf, _records(path, cls))
    return buf


def _checkpoints(path: Path) -> list[tuple[int, dict[str, Any]]]:
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute(
            "SELECT seq, record FROM quiesce_log WHERE op = 'checkpoint' ORDER BY seq"
        ).fetchall()
    finally:
        conn.close()
    return [(seq, json.loads(text)) for seq, text in rows]


def _update(path: Path, seq: int, obj: dict[str, Any]) -> None:
    """Replace record ``seq`` of a SQLite log behind quiesce's back with
    ``obj``, its row CRC recomputed."""
    text = encode_json(obj)
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


def _rewrite(path: Path, seq: int, obj: dict[str, Any], *, anchor: bool = True) -> None:
    """Replace checkpoint ``seq`` behind quiesce's back with ``obj``, its
    checksum and row CRC recomputed; with ``anchor`` (the attacker who
    writes two records) the anchor before it is rewritten to announce it
    too, so only its claims can tell; without, the anchor is left as the
    engine wrote it."""
    obj["detail"]["sha256"] = _digest(obj["detail"]["state"])
    _update(path, seq, obj)
    if anchor and seq > 0:  # a compacted log's base (seq 0) has no anchor
        conn = sqlite3.connect(path)
        try:
            (text,) = conn.execute(
                "SELECT record FROM quiesce_log WHERE seq = ?", (seq - 1,)
            ).fetchone()
        finally:
            conn.close()
        before = json.loads(text)
        assert before["op"] == "anchor"
        before["detail"]["sha256"] = obj["detail"]["sha256"]
        _update(path, seq - 1, before)


def _lie(path: Path, change: Callable[[dict[str, Any]], None], *, anchor: bool = True) -> int:
    """Apply ``change`` to the newest checkpoint's state (and, with
    ``anchor``, to its anchor's checksum); returns its seq."""
    seq, obj = _checkpoints(path)[-1]
    change(obj["detail"]["state"])
    _rewrite(path, seq, obj, anchor=anchor)
    return seq


def _protected(buf: Buffer) -> list[Any]:
    """What the safety property is about: the live protected and sealed
    entries, byte for byte (not their place in the window: a key is only
    checked by a full replay), and the protected tombstones."""
    fields = state_fields(buf)
    return [
        sorted((row[0], row[1]) for row in fields["live"] if guarded(Entry.from_dict(row[1]))),
        [t for t in fields["tombstones"] if t[6] is not None and t[6].value != "tool_output"],
    ]


def _open(path: Path, caplog: pytest.LogCaptureFixture) -> tuple[Buffer, list[str]]:
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="quiesce.checkpoint"):
        log = SQLiteLog(path)
        try:
            buf = Buffer(log=log, checkpoint_every=0)
        finally:
            log.close()
    return buf, [r.getMessage() for r in caplog.records]


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _history(tmp_path_factory.mktemp("claims") / "template.db")


@pytest.fixture
def path(template: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "log.db"
    shutil.copyfile(template, dst)
    return dst


def _live(state: dict[str, Any], entry_id: str) -> list[Any]:
    return next(row for row in state["live"] if row[0]["id"] == entry_id)


def _drop_live(state: dict[str, Any], entry_id: str) -> None:
    state["live"] = [row for row in state["live"] if row[0]["id"] != entry_id]
    state["immutable"] = [row for row in state["immutable"] if row[0] != entry_id]


def _fake_host_retraction(state: dict[str, Any]) -> None:
    """The red team's worst: a protected entry queued in a removal group with
    ``actor="host"`` and ``retracted=[id]``, marked, at an existing version."""
    v = state["version"]
    state["marks"] = sorted([*state["marks"], ["no", "undo", None, v]])
    state["groups"].append([10_000, ["no"], v, v, "undo", "host", None, ["no"]])


def _rewrite_constraint(state: dict[str, Any]) -> None:
    row = _live(state, "sys")
    row[0]["body"] = "answer in any language"
    entry = Entry.from_dict(row[0])
    state["immutable"] = [
        [i, entry.content_hash if i == "sys" else h] for i, h in state["immutable"]
    ]


def _change_thinking(state: dict[str, Any]) -> None:
    _live(state, "th")[0]["content"] = {**THINKING, "thinking": "skip the pods"}


def _mark_immutable(state: dict[str, Any]) -> None:
    state["marks"] = sorted([*state["marks"], ["sys", "old", None, state["version"]]])


def _lying_removed_count(state: dict[str, Any]) -> None:
    state["counts"] = [[k, v + 1 if k == "removed" else v] for k, v in state["counts"]]


LIES_OPEN_CATCHES: dict[str, Callable[[dict[str, Any]], None]] = {
    "fake_host_retraction": _fake_host_retraction,
    "dropped_constraint": lambda s: _drop_live(s, "sys"),
    "dropped_instruction": lambda s: _drop_live(s, "u1"),
    "dropped_negative_result": lambda s: _drop_live(s, "neg"),
    "dropped_prohibition": lambda s: _drop_live(s, "no"),
    "rewritten_constraint": _rewrite_constraint,
    "changed_signed_thinking": _change_thinking,
    "marked_immutable": _mark_immutable,
    "lying_removed_counter": _lying_removed_count,
    "retraction_group_renamed": lambda s: [g.__setitem__(0, 20_000) for g in s["groups"] if g[7]],
}


class TestOpenChecksTheClaims:
    @pytest.mark.parametrize("name", sorted(LIES_OPEN_CATCHES))
    def test_a_lie_falls_back_to_the_full_replay_state(
        self, name: str, path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        """Each lie the red team found (checksum recomputed) fails a claim at
        load: recovery warns and falls back to the older checkpoint, and the
        buffer holds exactly the full replay's state."""
        want = state_fields(_full_replay(path))
        seq = _lie(path, LIES_OPEN_CATCHES[name])
        buf, warnings = _open(path, caplog)
        assert len(warnings) == 1, warnings
        assert warnings[0].startswith(f"skipping checkpoint {seq} of ")
        assert f"checkpoint {seq} claims " in warnings[0]
        assert warnings[0].endswith("falling back to an older checkpoint")
        assert state_fields(buf) == want
        buf._check()

    def test_the_fake_retraction_names_the_record(
        self, path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        """The fake retraction is refused for the record it relies on, which
        is no host retraction."""
        seq = _lie(path, _fake_host_retraction)
        _buf, warnings = _open(path, caplog)
        assert "a staged removal of protected" not in warnings[0]
        assert f"checkpoint {seq} claims group 10000 retracting ['no'], but record " in warnings[0]
        assert "is no host retraction" in warnings[0]

    def test_an_honest_log_opens_without_a_warning(
        self, path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        """The real retraction in flight, the marks, the sealed entry: every
        claim of an honest checkpoint holds (its records are read back)."""
        buf, warnings = _open(path, caplog)
        assert warnings == []
        assert buf._st.records.first == _checkpoints(path)[-1][0]
        assert state_fields(buf) == state_fields(_full_replay(path))
        assert "u9" in buf.staged()

    def test_the_engine_then_keeps_the_protected_entry(
        self, path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        """After the fake retraction is refused, applying every due removal
        removes what the host retracted and nothing protected."""
        _lie(path, _fake_host_retraction)
        log = SQLiteLog(path)
        try:
            buf = Buffer(log=log, checkpoint_every=0)
            buf.apply_due()
            assert "no" in buf.head().live and "u9" not in buf.head().live
            buf._check()
            buf.flush()
        finally:
            log.close()
        assert _cli("verify", str(path)).returncode == 1  # the lie is still in the log


LIES_ONLY_VERIFY_SEES: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    # consistent within the checkpoint, no trace in a record it reads
    "dropped_constraint_and_its_ledger_line": (
        lambda s: (
            _drop_live(s, "sys"),
            s.__setitem__("protected", [p for p in s["protected"] if p[0] != "sys"]),
        ),
        "live",
    ),
    "dropped_queued_removal": (
        lambda s: s.__setitem__("groups", [g for g in s["groups"] if not g[7]]),
        "groups",
    ),
    "dropped_mark": (
        lambda s: s.__setitem__("marks", [m for m in s["marks"] if m[0] != "t5"]),
        "marks",
    ),
    "lying_escalation_counter": (
        lambda s: s.__setitem__("counts", sorted([*s["counts"], ["escalations", 7]])),
        "counts",
    ),
}


class TestVerify:
    @pytest.mark.parametrize("name", sorted(LIES_OPEN_CATCHES) + sorted(LIES_ONLY_VERIFY_SEES))
    def test_verify_names_every_lie(self, name: str, path: Path) -> None:
        """``verify`` names the lying checkpoint and a field, whatever the lie."""
        change = LIES_OPEN_CATCHES.get(name) or LIES_ONLY_VERIFY_SEES[name][0]
        seq = _lie(path, change)
        result = verify_records(iter(_records(path)), Buffer)
        assert result.disagreement is not None
        assert result.disagreement.seq == seq
        assert result.checkpoints == 1  # the older one agrees
        if name in LIES_ONLY_VERIFY_SEES:
            assert result.disagreement.field == LIES_ONLY_VERIFY_SEES[name][1]

    @pytest.mark.parametrize("name", sorted(LIES_ONLY_VERIFY_SEES))
    def test_verify_on_open_refuses_what_open_cannot_see(self, name: str, path: Path) -> None:
        """``Buffer(log=..., verify=True)``: recovery trusts a lie consistent
        within itself; the full replay does not, and the open is refused."""
        seq = _lie(path, LIES_ONLY_VERIFY_SEES[name][0])
        field = LIES_ONLY_VERIFY_SEES[name][1]
        log = SQLiteLog(path)
        try:
            with pytest.raises(
                LogFormatError,
                match=rf"^checkpoint {seq} disagrees with the "
                rf"replay of records 0\.\.{seq - 1}: {field}: ",
            ):
                Buffer(log=log, verify=True)
        finally:
            log.close()

    def test_an_honest_log_verifies(self, path: Path) -> None:
        """Every checkpoint of an honest log agrees with the replay, and the
        buffer recovered from the newest agrees with it too."""
        log = SQLiteLog(path)
        try:
            buf = Buffer(log=log, verify=True)
            assert buf.verify() == 2
        finally:
            log.close()

    def test_the_buffer_itself_is_compared(self, path: Path) -> None:
        """``Buffer.verify()`` compares this buffer's state with the replay:
        a lie recovery trusted shows there even before a later checkpoint."""
        _lie(path, LIES_ONLY_VERIFY_SEES["dropped_mark"][0])
        log = SQLiteLog(path)
        try:
            buf = Buffer(log=log)
            seq = _checkpoints(path)[-1][0]
            with pytest.raises(LogFormatError, match=rf"^checkpoint {seq} disagrees .*: marks: "):
                buf.verify()
        finally:
            log.close()

    def test_verify_needs_a_readable_log(self) -> None:
        from quiesce import InvalidArgument, InvalidType

        needs = "needs a log that can be read back$"
        with pytest.raises(InvalidArgument, match=r"^verify\(\) " + needs):
            Buffer().verify()
        with pytest.raises(InvalidArgument, match=r"^verify=True " + needs):
            Buffer(verify=True)
        with pytest.raises(InvalidType, match=r"^verify must be a bool, not int$"):
            Buffer(verify=1)  # type: ignore[arg-type]

    def test_jsonl(self, tmp_path: Path) -> None:
        """The same proof on a JSONL log."""
        p = _history(tmp_path / "log.jsonl", JsonlLog)
        result = verify_records(iter(_records(p, JsonlLog)), Buffer)
        assert result.disagreement is None and result.checkpoints == 2


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "quiesce", *args], capture_output=True, text=True, timeout=120
    )


class TestVerifyCommand:
    def test_an_honest_log(self, path: Path) -> None:
        done = _cli("verify", str(path))
        assert done.returncode == 0, done.stderr
        assert done.stdout == (
            f"{path}: quiesce sqlite edit log, format 2: {len(_records(path))} records, "
            "2 checkpoints agree with a full replay\n"
        )
        assert done.stderr == ""

    def test_a_lie(self, path: Path) -> None:
        seq = _lie(path, LIES_ONLY_VERIFY_SEES["dropped_queued_removal"][0])
        done = _cli("verify", str(path))
        assert done.returncode == 1
        assert done.stdout == ""
        assert done.stderr.startswith(
            f"quiesce verify: error: {path}: checkpoint {seq} disagrees with the replay of "
            f"records 0..{seq - 1}: groups: the replay has "
        )

    def test_not_a_log(self, tmp_path: Path) -> None:
        (tmp_path / "x").write_text("hello\n")
        done = _cli("verify", str(tmp_path / "x"))
        assert done.returncode == 1 and done.stderr.startswith("quiesce verify: error: ")
        done = _cli("verify", str(tmp_path))
        assert done.returncode == 2
        assert done.stderr == f"quiesce verify: error: {tmp_path} is not a regular file\n"

    def test_postgresql(self, pg_dsn: str) -> None:
        """A PostgreSQL log: ``Buffer.verify()`` and ``quiesce verify URI``."""
        from quiesce._log.postgres import PostgresLog

        log = PostgresLog(pg_dsn, "b")
        try:
            buf = Buffer(log=log, checkpoint_every=0)
            _fill(buf)
            buf.flush(checkpoint=True)
            buf.mark_stale("t5", "old")
            buf.flush(checkpoint=True)
            assert buf.verify() == 2
        finally:
            log.close()
        done = _cli("verify", pg_dsn + "&buffer_id=b")
        assert done.returncode == 0, done.stderr
        assert done.stdout.endswith(" records, 2 checkpoints agree with a full replay\n")


class TestCompact:
    def test_a_lying_src_is_refused(self, path: Path, tmp_path: Path) -> None:
        """``quiesce compact`` verifies SRC first: a lying one gives no DST."""
        seq = _lie(path, LIES_ONLY_VERIFY_SEES["dropped_mark"][0])
        dst = tmp_path / "dst.db"
        done = _cli("compact", str(path), str(dst))
        assert done.returncode == 2
        assert done.stderr.startswith(
            f"quiesce compact: error: {path} does not verify: checkpoint {seq} disagrees "
        )
        assert done.stderr.endswith(f"; {dst} not written\n")
        assert not dst.exists()

    def test_an_honest_src_compacts(self, tmp_path: Path) -> None:
        """Without a retraction in flight, SRC compacts and DST verifies."""
        src = tmp_path / "src.db"
        log = SQLiteLog(src)
        buf = Buffer(log=log, checkpoint_every=0)
        _fill(buf)
        buf.flush(checkpoint=True)
        log.close()
        dst = tmp_path / "dst.db"
        done = _cli("compact", str(src), str(dst))
        assert done.returncode == 0, done.stderr
        assert _cli("verify", str(dst)).returncode == 0
        log = SQLiteLog(dst)
        try:
            again = Buffer(log=log, verify=True)
        finally:
            log.close()
        assert _protected(again) == _protected(_full_replay(src))

    def test_a_host_retraction_of_a_protected_entry_is_not_compacted(
        self, path: Path, tmp_path: Path
    ) -> None:
        """A compacted base cannot vouch for a host retraction (its record
        stays in SRC): compact refuses rather than write a DST that would
        not open."""
        dst = tmp_path / "dst.db"
        done = _cli("compact", str(path), str(dst))
        assert done.returncode == 2
        assert done.stderr.startswith(f"quiesce compact: error: cannot compact {path}: ")
        assert "no record here vouches" in done.stderr
        assert not dst.exists()

    def test_a_compacted_log_listing_a_constraint_tombstone_does_not_open(
        self, tmp_path: Path
    ) -> None:
        """A crafted compacted log whose base lists a constraint tombstone
        (as the host's, checksum recomputed) is refused at open."""
        src = tmp_path / "src.db"
        log = SQLiteLog(src)
        buf = Buffer(log=log, checkpoint_every=0)
        _fill(buf)
        buf.flush()
        log.close()
        dst = tmp_path / "dst.db"
        assert _cli("compact", str(src), str(dst)).returncode == 0
        ((seq, obj),) = _checkpoints(dst)
        state = obj["detail"]["state"]
        sys_row = _live(state, "sys")
        entry = Entry.from_dict(sys_row[0])
        _drop_live(state, "sys")
        state["protected"] = [p for p in state["protected"] if p[0] != "sys"]
        state["tombstones"].append(
            {
                "id": "sys",
                "content_hash": entry.content_hash,
                "reason": "undo",
                "turn": None,
                "actor": "host",
                "version": state["version"],
                "kind": "constraint",
                "key": None,
            }
        )
        state["by_hash"] = sorted([*state["by_hash"], [entry.content_hash, "sys"]])
        state["counts"] = [[k, v + 1 if k == "removed" else v] for k, v in state["counts"]]
        _rewrite(dst, seq, obj)
        log = SQLiteLog(dst)
        try:
            with pytest.raises(
                LogFormatError,
                match=r"the checkpoint this compacted log starts from is unusable: checkpoint 0 "
                r"claims a tombstone of protected 'sys': no record here vouches for it$",
            ):
                Buffer(log=log)
        finally:
            log.close()


# -- crafted checkpoints: every field an edge value or another checkpoint's --

EDGES = [0, -1, 1, 2**63, -(2**63), 1e300, 0.5, "", "host", "x" * 3, None, [], {}, True]


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every path into a JSON value (dict keys, list indexes), depth <= 4."""
    yield prefix
    if len(prefix) >= 4:
        return
    if isinstance(value, dict):
        for k in sorted(value):
            yield from _paths(value[k], (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value[:6]):
            yield from _paths(v, (*prefix, i))


def _get(value: Any, path: tuple[Any, ...]) -> Any:
    for p in path:
        value = value[p]
    return value


_MISSING = object()


def _lookup(value: Any, path: tuple[Any, ...]) -> Any:
    try:
        return _get(value, path)
    except (KeyError, IndexError, TypeError):
        return _MISSING


@st.composite
def crafted(draw: st.DrawFn, states: tuple[dict[str, Any], dict[str, Any]]) -> dict[str, Any]:
    """The newest checkpoint's state with one field (at any depth) replaced by
    an edge value, by the older checkpoint's value at the same place, or
    deleted; ``records`` is kept (else the checksum check alone refuses)."""
    older, newest = states
    state = copy.deepcopy(newest)
    paths = [p for p in _paths(state) if p and p[0] != "records"]
    where = draw(st.sampled_from(paths))
    how = draw(st.sampled_from(["edge", "other", "delete"]))
    parent = _get(state, where[:-1])
    if how == "delete":
        del parent[where[-1]]
    elif how == "other":
        value = _lookup(older, where)
        assume(value is not _MISSING)
        parent[where[-1]] = copy.deepcopy(value)
    else:
        parent[where[-1]] = draw(st.sampled_from(EDGES))
    assume(state != newest)
    return state


def _crafted_examples(slow: bool) -> Callable[..., Any]:
    return settings(
        max_examples=400 if slow else 40,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )


def _check_crafted(template: Path, tmp_path: Path, data: st.DataObject) -> None:
    older, newest = (obj["detail"]["state"] for _, obj in _checkpoints(template))
    state = data.draw(crafted((older, newest)))
    p = tmp_path / f"crafted-{abs(hash(json.dumps(state, sort_keys=True, default=str)))}.db"
    shutil.copyfile(template, p)
    seq, obj = _checkpoints(p)[-1]
    obj["detail"]["state"] = state
    try:
        _rewrite(p, seq, obj)
    except (TypeError, ValueError, OverflowError):
        assume(False)  # a value JSON cannot hold: not a checkpoint anyone can write
    oracle = _full_replay(p)
    handler = logging.getLogger("quiesce.checkpoint")
    seen: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    keep = Keep()
    handler.addHandler(keep)
    try:
        log = SQLiteLog(p)
        try:
            buf = Buffer(log=log, checkpoint_every=0)
        finally:
            log.close()
    finally:
        handler.removeHandler(keep)
    buf._check()
    fell_back = any(m.startswith(f"skipping checkpoint {seq} ") for m in seen)
    if fell_back:
        assert state_fields(buf) == state_fields(oracle)
    else:
        # trusted: the protected content is the full replay's, byte for byte
        assert _protected(buf) == _protected(oracle)
    result = verify_records(iter(_records(p)), Buffer)
    if state_fields(buf) != state_fields(oracle) or fell_back:
        assert result.disagreement is not None and result.disagreement.seq == seq
    p.unlink()


@given(data=st.data())
@_crafted_examples(slow=False)
def test_crafted_checkpoints(template: Path, tmp_path: Path, data: st.DataObject) -> None:
    """Recovery from a crafted, checksummed checkpoint either falls back (and
    gives the full-replay state) or keeps every protected entry exactly as
    the full replay has it; ``verify`` names the checkpoint whenever the
    state it gave differs from the full replay's, or recovery refused it."""
    _check_crafted(template, tmp_path, data)


@pytest.mark.slow
@given(data=st.data())
@_crafted_examples(slow=True)
def test_crafted_checkpoints_long(template: Path, tmp_path: Path, data: st.DataObject) -> None:
    """As :func:`test_crafted_checkpoints`, ten times the examples."""
    _check_crafted(template, tmp_path, data)


class TestOpenBufferVerify:
    @pytest.mark.anyio
    async def test_an_honest_log_opens(self, path: Path) -> None:
        """``open_buffer(log, verify=True)`` proves the log (in a worker
        thread) before the body runs; the body sees the recovered state, its
        due removals applied."""
        from quiesce import open_buffer

        version = _full_replay(path).version
        log = SQLiteLog(path)
        try:
            async with open_buffer(log, verify=True) as buf:
                # the due removals (the host's retraction of u9) were applied
                assert buf.version > version
                assert "sys" in buf.head().live and "u9" not in buf.head().live
        finally:
            log.close()

    @pytest.mark.anyio
    async def test_a_lie_refuses_the_open(self, path: Path) -> None:
        """A lie open cannot see (a dropped mark) refuses ``open_buffer``:
        ``LogFormatError`` naming the checkpoint and field; the body never runs."""
        from quiesce import open_buffer

        seq = _lie(path, LIES_ONLY_VERIFY_SEES["dropped_mark"][0])
        log = SQLiteLog(path)
        ran = False
        try:
            with pytest.raises(LogFormatError, match=rf"^checkpoint {seq} disagrees .*: marks: "):
                async with open_buffer(log, verify=True):
                    ran = True
        finally:
            log.close()
        assert not ran

    @pytest.mark.anyio
    async def test_verify_is_a_bool(self) -> None:
        from quiesce import InvalidType, open_buffer

        with pytest.raises(InvalidType, match=r"^verify must be a bool, not str$"):
            async with open_buffer(verify="yes"):  # type: ignore[arg-type]
                pass
