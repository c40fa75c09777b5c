"""Checkpoints in PostgresLog (issue 14 over issue 13), against the session's
private PostgreSQL server: checkpoint rows written every ``checkpoint_every``
records and on ``flush(checkpoint=True)``; recovery from the newest valid
checkpoint reads only it and the tail from the server; a damaged or
contradicted checkpoint is skipped with a warning (an older one, then a full
replay), never a wrong state; older records stay readable through
``buf.log``; a SIGKILL while a checkpoint is written loses nothing; a
hypothesis state machine over a PostgresLog with checkpoints, reopening and
damage."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import random
import signal
import tempfile
import time
from contextlib import redirect_stdout
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    rule,
    run_state_machine_as_test,
)

from _pg_ckpt_child import head_state, run
from _shared_child import process
from _workload import Workload, digest, random_op, state
from quiesce import Buffer, Entry, Kind, LogFormatError, PostgresLog
from quiesce._core.checkpoint import CheckpointSink, _digest
from quiesce._core.claims import _WINDOW
from quiesce._core.log import ReadableSink
from quiesce._core.records import FORMAT
from quiesce._core.replay import replay
from quiesce._log._format import encode_json
from quiesce._log.inspect import main as inspect_main


def _raw(dsn: str) -> psycopg.Connection[Any]:
    return psycopg.connect(dsn, autocommit=True)


def _ops(dsn: str, buffer_id: str = "b") -> list[tuple[int, str]]:
    with _raw(dsn) as conn:
        return conn.execute(
            "SELECT seq, op FROM quiesce_log WHERE buffer_id = %s ORDER BY seq", (buffer_id,)
        ).fetchall()


def _checkpoint_rows(dsn: str, buffer_id: str = "b") -> list[int]:
    return [seq for seq, op in _ops(dsn, buffer_id) if op == "checkpoint"]


def _rewrite(dsn: str, seq: int, text: str, buffer_id: str = "b") -> None:
    """Change a stored record behind quiesce's back (a superuser session with
    the append-only trigger disabled for the statement)."""
    with _raw(dsn) as conn, conn.transaction():
        conn.execute("ALTER TABLE quiesce_log DISABLE TRIGGER quiesce_log_no_change")
        conn.execute(
            "UPDATE quiesce_log SET record = %s WHERE buffer_id = %s AND seq = %s",
            (text, buffer_id, seq),
        )
        conn.execute("ALTER TABLE quiesce_log ENABLE TRIGGER quiesce_log_no_change")


def _stored(dsn: str, seq: int, buffer_id: str = "b") -> str:
    with _raw(dsn) as conn:
        row = conn.execute(
            "SELECT record FROM quiesce_log WHERE buffer_id = %s AND seq = %s", (buffer_id, seq)
        ).fetchone()
    assert row is not None
    return str(row[0])


def _full_replay(dsn: str, buffer_id: str = "b") -> Buffer:
    with PostgresLog(dsn, buffer_id) as log:
        records = log.load()
    buf = Buffer()
    replay(buf, records)
    return buf


def _history(dsn: str, buffer_id: str = "b", n: int = 20) -> Buffer:
    """Two checkpoints with records after each: 0..n-1 appends, anchor,
    ckpt, mark, anchor, ckpt, mark, prune (intent, tombstone, remove)."""
    log = PostgresLog(dsn, buffer_id)
    buf = Buffer(log=log, checkpoint_every=0)
    for i in range(n):
        buf.append(Entry(f"e{i}", Kind.TOOL_OUTPUT, f"b{i}"))
    buf.flush(checkpoint=True)
    buf.mark_stale("e1", "old")
    buf.flush(checkpoint=True)
    buf.mark_stale("e2", "old")
    buf.prune(["e3"], reason="r")
    buf.flush()
    log.close()
    return buf


class TestWritten:
    def test_is_a_checkpoint_sink(self, pg_dsn: str) -> None:
        with PostgresLog(pg_dsn, "b") as log:
            assert isinstance(log, ReadableSink)
            assert isinstance(log, CheckpointSink)
            assert log.checkpoints() == (0, [])

    def test_every_n_records_and_on_flush(self, pg_dsn: str) -> None:
        """checkpoint_every=10: a checkpoint row once 10 records were written
        since the last one (at a flush, in the same transaction); and one on
        flush(checkpoint=True). checkpoints() finds exactly those rows."""
        log = PostgresLog(pg_dsn, "b")
        buf = Buffer(log=log, checkpoint_every=10)
        for i in range(25):
            buf.append(Entry(f"e{i}", Kind.REASONING, f"step {i}"))
            if i % 4 == 3:
                buf.flush()
        buf.flush()
        auto = _checkpoint_rows(pg_dsn)
        assert auto == [13, 27]  # the flushes after records 12 and 25 were due (anchor first)
        commits = log.commits
        buf.mark_stale("e0", "old")
        buf.flush(checkpoint=True)
        assert log.commits == commits + 1  # the mark and its checkpoint: one transaction
        assert _checkpoint_rows(pg_dsn) == [13, 27, 31]
        assert log.checkpoints() == (32, [13, 27, 31])
        log.close()

    def test_default_checkpoint_every_applies(self, pg_dsn: str) -> None:
        """A plain Buffer(log=PostgresLog(...)) gets the default cadence."""
        log = PostgresLog(pg_dsn, "b")
        buf = Buffer(log=log)
        for i in range(10_001):
            buf.append(Entry(f"e{i}", Kind.REASONING, "s"))
        buf.flush()
        assert _checkpoint_rows(pg_dsn) == [10_002]  # after its anchor, 10,001
        log.close()

    def test_the_index_is_used(self, pg_dsn: str) -> None:
        """The checkpoint query is answered from the partial index and the
        tail by the primary key (the plans name them), not a scan of the log."""
        _history(pg_dsn)
        with _raw(pg_dsn) as conn:
            conn.execute("SET enable_seqscan = off")  # tiny table: make the planner show intent
            conn.execute("ANALYZE quiesce_log")
            plan = "\n".join(
                r[0]
                for r in conn.execute(
                    "EXPLAIN SELECT seq FROM quiesce_log WHERE buffer_id = 'b' "
                    "AND op = 'checkpoint'"
                )
            )
            assert "quiesce_log_checkpoints" in plan
        with _raw(pg_dsn) as conn:
            (partial,) = conn.execute(
                "SELECT pg_get_indexdef('quiesce_log_checkpoints'::regclass)"
            ).fetchone()  # type: ignore[misc]
        assert "(buffer_id, seq) WHERE (op = 'checkpoint'::text)" in partial

    def test_an_older_schema_1_database_gets_the_index(self, pg_dsn: str) -> None:
        """Tables created before the index existed: opening adds it once."""
        _history(pg_dsn)
        with _raw(pg_dsn) as conn:
            conn.execute("DROP INDEX quiesce_log_checkpoints")
        with PostgresLog(pg_dsn, "b") as log:
            assert log.checkpoints() == (29, [21, 24])
        with _raw(pg_dsn) as conn:
            row = conn.execute("SELECT to_regclass('quiesce_log_checkpoints')").fetchone()
        assert row is not None and row[0] is not None

    def test_a_newer_format_after_the_checkpoint_is_refused_on_open(self, pg_dsn: str) -> None:
        """The newer-format check reads from the newest checkpoint on: a row
        of a newer format there is refused on open, before anything is
        written."""
        _history(pg_dsn)
        with _raw(pg_dsn) as conn:
            conn.execute(
                "INSERT INTO quiesce_log VALUES ('b', 29, 0, %s, 'mark', 99, '{}')", (FORMAT + 1,)
            )
        with pytest.raises(LogFormatError, match=f"holds records of format {FORMAT + 1}"):
            PostgresLog(pg_dsn, "b")
        assert len(_ops(pg_dsn)) == 30


class TestRecovery:
    def test_recovery_reads_only_the_newest_checkpoint_and_the_tail(self, pg_dsn: str) -> None:
        """2,000 records, a checkpoint, 10 more: reopening fetches 12 log rows
        (the checkpoint's anchor, the checkpoint and the tail) instead of 2,012; the state equals a
        full replay; older records stay readable through buf.log, lazily."""
        log = PostgresLog(pg_dsn, "b")
        buf = Buffer(log=log, checkpoint_every=0)
        for i in range(2000):
            buf.append(Entry(f"e{i}", Kind.REASONING, f"step {i}"))
        buf.flush(checkpoint=True)
        for i in range(10):
            buf.mark_stale(f"e{i}", "old")
        buf.flush()
        want = state(buf)
        log.close()

        log = PostgresLog(pg_dsn, "b")
        again = Buffer(log=log)
        assert log.rows_read == 12
        assert again._st.records.first == 2001  # started at the checkpoint
        assert again.log.in_memory <= 11
        assert again.log[5].ids == ("e5",)  # an old record, fetched on demand
        assert log.rows_read == 13
        again._check(expect_no_pins=True)
        assert state(again) == want
        log.close()

        # the same log without the checkpoint's help: every row
        plain = PostgresLog(pg_dsn, "b")
        plain.load()
        assert plain.rows_read == 2012
        plain.close()

    def test_rows_before_the_checkpoint_are_not_read(self, pg_dsn: str) -> None:
        """Server-side proof: an old row made unreadable (not JSON) does not
        disturb recovery from a later checkpoint, while a full replay of the
        same log refuses it."""
        want = state(_history(pg_dsn))
        _rewrite(pg_dsn, 3, "not json")
        log = PostgresLog(pg_dsn, "b")
        buf = Buffer(log=log)
        assert buf.version == want["version"]
        assert state_without_log(buf) == state_without_log_dict(want)
        with pytest.raises(LogFormatError, match=r"record 3 is not valid JSON$"):
            log.load()
        with pytest.raises(LogFormatError, match=r"record 3 is not valid JSON$"):
            _ = buf.log[3]  # the old record is damaged: refused, never another
        log.close()

    def test_lost_connection_during_a_lazy_read_is_retried(self, pg_dsn: str) -> None:
        _history(pg_dsn)
        log = PostgresLog(pg_dsn, "b")
        buf = Buffer(log=log)
        assert log._conn is not None
        pid = log._conn.info.backend_pid
        with _raw(pg_dsn) as conn:
            conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
        assert buf.log[0].ids == ("e0",)
        log.close()
        assert buf.log[1].ids == ("e1",)  # closed: read through a connection of its own

    def test_bit_flip_falls_back_to_the_checkpoint_before(
        self, pg_dsn: str, caplog: pytest.LogCaptureFixture
    ) -> None:
        want = state(_history(pg_dsn))
        older, newest = _checkpoint_rows(pg_dsn)
        text = _stored(pg_dsn, newest)
        flipped = text.replace('"b7"', '"b6"', 1)  # one byte of an entry body
        assert flipped != text
        _rewrite(pg_dsn, newest, flipped)
        with caplog.at_level(logging.WARNING, logger="quiesce.checkpoint"):
            log = PostgresLog(pg_dsn, "b")
            buf = Buffer(log=log)
        assert buf._st.records.first == older
        buf._check()
        assert state_without_log(buf) == state_without_log_dict(want)
        assert [r.getMessage() for r in caplog.records] == [
            f"skipping checkpoint {newest} of {log!r}: checkpoint {newest} fails its checksum; "
            f"falling back to an older checkpoint"
        ]
        log.close()

    def test_undecodable_checkpoint_row_is_refused_not_skipped(
        self, pg_dsn: str, caplog: pytest.LogCaptureFixture
    ) -> None:
        """A checkpoint row that is not even JSON is damage to the log itself:
        the checkpoint is skipped, but the older checkpoint's tail and a full
        replay both hold that row, so recovery refuses the log with
        LogFormatError naming it (never a state built without a record)."""
        _history(pg_dsn)
        older, newest = _checkpoint_rows(pg_dsn)
        _rewrite(pg_dsn, newest, _stored(pg_dsn, newest)[:-40])  # a torn row
        log = PostgresLog(pg_dsn, "b")
        with (
            caplog.at_level(logging.WARNING, logger="quiesce.checkpoint"),
            pytest.raises(LogFormatError, match=f"record {newest} is not valid JSON$"),
        ):
            Buffer(log=log)
        messages = [r.getMessage() for r in caplog.records]
        assert len(messages) == 2
        assert messages[0].startswith(f"skipping checkpoint {newest} of {log!r}: ")
        assert messages[1].startswith(f"skipping checkpoint {older} of {log!r}: ")
        assert messages[1].endswith("falling back to a full replay")
        log.close()

    def test_checkpoints_contradicting_the_tail_fall_back_to_a_full_replay(
        self, pg_dsn: str, caplog: pytest.LogCaptureFixture
    ) -> None:
        """Both checkpoints rewritten with e2 dropped from the window and the
        checksum recomputed: the tail (which marks e2) does not replay onto
        them, so each is skipped, then the whole log is replayed."""
        want = state(_history(pg_dsn))
        for seq in _checkpoint_rows(pg_dsn):
            obj = json.loads(_stored(pg_dsn, seq))
            ck = obj["detail"]["state"]
            ck["live"] = [s for s in ck["live"] if s[0]["id"] != "e2"]
            obj["detail"]["sha256"] = _digest(ck)
            _rewrite(pg_dsn, seq, encode_json(obj))
        with caplog.at_level(logging.WARNING, logger="quiesce.checkpoint"):
            log = PostgresLog(pg_dsn, "b")
            buf = Buffer(log=log)
        buf._check()
        assert buf._st.records.first == 0
        assert state_without_log(buf) == state_without_log_dict(want)
        messages = [r.getMessage() for r in caplog.records]
        assert len(messages) == 2
        assert messages[0].endswith("falling back to an older checkpoint")
        assert messages[-1].endswith("falling back to a full replay")
        log.close()

    def test_two_buffers_keep_their_own_checkpoints(self, pg_dsn: str) -> None:
        a, b = _history(pg_dsn, "a", 5), _history(pg_dsn, "b", 9)
        assert _checkpoint_rows(pg_dsn, "a") == [6, 9]
        assert _checkpoint_rows(pg_dsn, "b") == [10, 13]
        for bid, buf in (("a", a), ("b", b)):
            with PostgresLog(pg_dsn, bid) as log:
                assert log.checkpoints() == (len(buf.log), _checkpoint_rows(pg_dsn, bid))
                again = Buffer(log=log)
                assert state(again) == state(buf)


def state_without_log(buf: Buffer) -> dict[str, Any]:
    """``state(buf)`` with the log's length instead of its records."""
    return head_state(buf)


def state_without_log_dict(full: dict[str, Any]) -> dict[str, Any]:
    """The same view of a ``state()`` taken earlier."""
    out = {k: v for k, v in full.items() if k != "log"}
    out["log_length"] = len(full["log"])
    return out


class TestInspect:
    def test_inspect_shows_checkpoints(self, pg_dsn: str) -> None:
        _history(pg_dsn)
        older, newest = _checkpoint_rows(pg_dsn)
        out = io.StringIO()
        with redirect_stdout(out):
            assert inspect_main([pg_dsn + "&buffer_id=b", "--op", "checkpoint"]) == 0
        lines = [ln for ln in out.getvalue().splitlines() if " checkpoint " in ln]
        assert len(lines) == 2
        assert lines[0].startswith(f"{older} ") and lines[1].startswith(f"{newest} ")
        assert "v20, 20 live, 0 marked, 0 tombstones, 0 staged, checksum ok" in lines[0]
        assert "v21, 20 live, 1 marked, 0 tombstones, 0 staged, checksum ok" in lines[1]
        _rewrite(pg_dsn, newest, _stored(pg_dsn, newest).replace('"b7"', '"b6"', 1))
        out = io.StringIO()
        with redirect_stdout(out):
            assert inspect_main([pg_dsn + "&buffer_id=b", "--op", "checkpoint"]) == 0
        assert f"DAMAGED (checkpoint {newest} fails its checksum)" in out.getvalue()


# -- crash while a checkpoint is written ------------------------------------------


def _run_and_kill(
    dsn: str, seed: int, rng: random.Random, prefill: int
) -> tuple[list[dict[str, Any]], int | None]:
    """Start the child (``_pg_ckpt_child.run``, forked from the forkserver of
    ``_shared_child``, its stdout a pipe), wait for its ``n``-th checkpoint
    announcement, let it run a seeded moment into that flush, SIGKILL it.
    Returns the complete report lines and, if the kill landed before that
    flush reported, the seq its checkpoint was to have."""
    r, w = os.pipe()
    with tempfile.TemporaryFile() as err, os.fdopen(r, "rb") as out:

        def stderr() -> str:
            err.seek(0)
            return err.read().decode(errors="replace")

        try:
            proc = process(run, dsn, "b", seed, prefill, stdout=w, stderr=err.fileno())
        finally:
            os.close(w)  # EOF on ``out`` once the child is gone
        try:
            first = out.readline()
            assert first.startswith(b'{"ready"'), (first, stderr())
            lines = [first]
            wanted = rng.randint(1, 3)
            while wanted:
                line = out.readline()
                assert line, stderr()
                lines.append(line)
                wanted -= line.startswith(b'{"ckpt"')
            time.sleep(rng.uniform(0.0, 0.02 if seed % 2 else 0.15))
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)  # type: ignore[arg-type]
            rest = out.read()
            proc.join(30)
        assert proc.exitcode == -signal.SIGKILL, stderr()
    pieces = b"".join(lines) + rest
    reports = [json.loads(ln) for ln in pieces.split(b"\n")[:-1]]
    assert not [r for r in reports if "error" in r], reports
    announced = reports[-1].get("ckpt")
    return [r for r in reports if "log" in r], announced


def test_sigkill_while_a_checkpoint_is_written_loses_nothing(pg_dsn: str) -> None:
    """A child with a large window (2,000 entries, so each checkpoint is a
    ~400 KB row) writes a checkpoint every 7 records and on every third
    flush; it is SIGKILLed a seeded moment (0-20 ms or 0-150 ms) after
    announcing a checkpoint flush, 8 times over one log; at least two kills
    must land before that checkpoint's COMMIT (it is then not in the log).
    After each kill: every reported (durable) state is recovered; recovery
    from the newest checkpoint equals a full replay; the recovered buffer
    passes _check(); the next child continues the same log."""
    rng = random.Random(14)
    before_commit = after_commit = 0
    lengths = []
    for k in range(8):
        reports, announced = _run_and_kill(pg_dsn, 100 + k, rng, 2000)
        log = PostgresLog(pg_dsn, "b")
        if announced is not None:  # killed inside the checkpoint flush: before or after COMMIT
            committed = announced in log.checkpoints()[1]
            after_commit += committed
            before_commit += not committed
        buf = Buffer(log=log)
        records = list(buf.log)
        full = Buffer()
        replay(full, records)
        assert head_state(full) == head_state(buf), "checkpoint recovery differs"
        if reports:
            last = reports[-1]
            assert len(records) >= last["log"], "a flushed change was lost"
            prefix = full  # the replay of all of ``records`` (replay is deterministic)
            if last["log"] < len(records):
                prefix = Buffer()
                replay(prefix, records[: last["log"]])
            assert digest(head_state(prefix)) == last["digest"], "recovered state differs"
        buf._check(expect_no_pins=True)
        lengths.append(len(records))
        log.close()
    assert lengths == sorted(lengths)
    ckpts = _checkpoint_rows(pg_dsn)
    assert len(ckpts) >= 8, ckpts
    print(f"kills in a checkpoint flush: {before_commit} before COMMIT, {after_commit} after")
    assert before_commit >= 2, "no kill landed while a checkpoint was being written"


# -- hypothesis --------------------------------------------------------------------

ops = st.lists(
    st.tuples(
        st.sampled_from(["append", "mark", "prune", "flush", "ckpt", "apply"]), st.integers(0, 30)
    ),
    max_size=60,
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


_EXAMPLE = iter(range(10**9))


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(history=ops, every=st.sampled_from([0, 3, 10]))
def test_checkpoint_recovery_equals_full_replay(
    pg_dsn: str, history: list[tuple[str, int]], every: int
) -> None:
    bid = f"h{next(_EXAMPLE)}"  # one buffer per example, in the test's schema
    log = PostgresLog(pg_dsn, bid)
    buf = Buffer(log=log, checkpoint_every=every)
    _run(buf, history)
    buf._check()
    want = state(buf)
    log.close()
    log = PostgresLog(pg_dsn, bid)
    got = Buffer(log=log)
    got._check()
    assert state(got) == want
    log.close()
    assert state(_full_replay(pg_dsn, bid)) == want


def _bisection_rows(version: int, before: int) -> int:
    """The most rows ``record_of_version(read, version, before)`` reads: it
    bisects ``[version - 1, before)`` (versions grow with seqs), each step
    reading one window of at most ``_WINDOW`` rows from its midpoint up, so
    the windows sum to about the range once, plus one row a step."""
    lo = max(version - 1, 0)
    steps = (before - lo).bit_length() + 1
    return min(before - lo + steps, _WINDOW * steps)


class PostgresCheckpointMachine(RuleBasedStateMachine):
    """A buffer over a PostgresLog with checkpoints: random operations
    (the seeded workload: appends, marks, prunes, edits, pins, flushes, due
    removals), checkpoint flushes, reopening (recovery from the newest
    checkpoint + tail must rebuild the exact state and read only those rows),
    and damage to the newest checkpoint row (the next reopen falls back and
    still rebuilds the exact state)."""

    dsn = ""

    def __init__(self) -> None:
        super().__init__()
        self.bid = f"m{next(_EXAMPLE)}"
        self.log = PostgresLog(self.dsn, self.bid)
        self.buf = Buffer(log=self.log, checkpoint_every=5)
        self.work = Workload(self.buf)
        self.damaged: set[int] = set()

    @rule(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 8))
    def operate(self, seed: int, n: int) -> None:
        rng = random.Random(seed)
        for _ in range(n):
            self.work.run(random_op(rng))

    @rule(checkpoint=st.booleans())
    def flush(self, checkpoint: bool) -> None:
        self.buf.flush(checkpoint=checkpoint)
        assert self.buf.pending_records == 0

    @rule()
    def damage_newest_checkpoint(self) -> None:
        self.buf.flush()
        seqs = self.log.checkpoints()[1]
        # (a checkpoint at seq 0 may be a compacted log's base, which nothing
        # else can replace: damaging it is refused on open, by design)
        if not seqs or seqs[-1] == 0:
            return
        seq = seqs[-1]
        text = _stored(self.dsn, seq, self.bid)
        obj = json.loads(text)
        obj["detail"]["sha256"] = "0" * 64
        _rewrite(self.dsn, seq, encode_json(obj), self.bid)
        self.damaged.add(seq)

    @rule()
    def reopen(self) -> None:
        self.work.release_all()
        self.buf.flush()
        want = head_state(self.buf)
        total = len(self.buf.log)
        self.log.close()
        self.log = PostgresLog(self.dsn, self.bid)
        total_, seqs = self.log.checkpoints()
        assert total_ == total
        good = [s for s in seqs if s not in self.damaged]
        before = self.log.rows_read
        buf = Buffer(log=self.log, checkpoint_every=5)
        read = self.log.rows_read - before
        assert head_state(buf) == want
        if good and not [s for s in seqs if s > good[-1]]:
            # the newest checkpoint is intact: it, the tail, and the record of
            # each protected entry its ledger names (claims.py), nothing else
            ckpt = self.log.read_range(good[-1], good[-1] + 1)[0]
            # (the ledger reads nearby ones in one range, so at most the span
            # from the first to the last), and the records the claims and the
            # index check read back: the newest tombstone run's (tombs.py:
            # TombStore.imported) and, per group retracting a protected entry,
            # the rows its host record's bisection reads (claims.py:
            # record_of_version). Never the rest of the records before the
            # checkpoint.
            state = ckpt.detail["state"]
            index = state.get("tomb_index") or {}
            newest_run = 1 if index.get("runs") else 0
            tail = total - good[-1]
            seqs = [seq for _id, seq in state["protected"]]
            span = max(seqs) - min(seqs) + 1 if seqs else 0
            host = sum(_bisection_rows(group[3], good[-1]) for group in state["groups"] if group[7])
            assert tail + len(seqs) <= read
            assert read <= tail + span + newest_run + host + 1
            assert buf._st.records.first == good[-1]
        self.buf = buf
        self.work = Workload(buf)

    @invariant()
    def checks(self) -> None:
        self.buf._check()

    def teardown(self) -> None:
        self.work.release_all()
        self.buf.flush()
        want = head_state(self.buf)
        self.log.close()
        assert head_state(_full_replay(self.dsn, self.bid)) == want


@pytest.mark.parametrize("examples", [12, pytest.param(25, marks=pytest.mark.slow)])
def test_state_machine(pg_dsn: str, examples: int) -> None:
    """The checkpointing machine over the PostgreSQL log: 12 machines by
    default, 25 under ``-m slow``."""
    PostgresCheckpointMachine.dsn = pg_dsn
    run_state_machine_as_test(
        PostgresCheckpointMachine,
        settings=settings(
            max_examples=examples,
            stateful_step_count=20,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )


def test_read_containing_filters_on_the_server(pg_dsn: str) -> None:
    """``read_containing`` returns, in order and decoded, exactly the records
    of the range whose stored text holds the literal (``%`` and ``_`` in it
    are not wildcards), counting only the rows that matched."""
    sink = PostgresLog(pg_dsn, "b")
    buf = Buffer(log=sink)
    for n in range(40):
        body = "needle_%" if n % 7 == 0 else ("needleX%" if n % 5 == 0 else f"hay {n}")
        buf.append(Entry(f"e{n}", Kind.TOOL_OUTPUT, body))
    buf.flush()
    before = sink.rows_read
    found = sink.read_containing(3, 30, "needle_%")
    assert [r.seq for r in found] == [r.seq for r in buf.log[3:30] if "needle_%" in str(r.detail)]
    assert [r.seq for r in found] == [7, 14, 21, 28]
    assert sink.rows_read - before == 4
    assert found == list(buf.log[7:29:7])
    assert sink.read_containing(5, 5, "needle") == []
    sink.close()
