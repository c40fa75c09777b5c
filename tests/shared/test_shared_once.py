"""Forwarded requests are applied exactly once, even when the sequencer is
SIGKILLed between applying a request and storing its result.

The window: the sequencer applied a replica's request on its local buffer
and its records reached the log (a concurrent flush, or the request's own
inline flush when a prune or edit publishes a due removal), but the
request's result did not. A successor used to apply the request again
(``append`` then failed with ``DuplicateEntry``; a prune reported
``UNCHANGED`` for what it had removed). Each test holds the real sequencer
process in that window (a child-only hook, ``tests/_shared_child.py``),
SIGKILLs it, and checks that the replica gets the report of the one
application, and the log holds the request's records once. Members run on
asyncio and on trio.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from test_shared import (
    SHORT,
    Member,
    check_merged,
    close_all,
    converge,
    db_log,
    sequencer,
    start,
    wait_for,
)

BACKENDS = ["asyncio", "trio"]


@pytest.fixture
def members(pg_dsn: str) -> Iterator[list[Member]]:
    started: list[Member] = []
    yield started
    close_all(started)


def _held(path: Path) -> bool:
    return path.exists()


@pytest.mark.parametrize("backend", BACKENDS)
class TestExactlyOnce:
    def test_append_committed_by_a_concurrent_flush(
        self, pg_dsn: str, members: list[Member], backend: str, tmp_path: Path
    ) -> None:
        """Another thread flushes while the sequencer is between applying a
        forwarded append and queueing its result; then the sequencer dies.
        The flush waits for the result (it holds the request's record back
        until then), so the record is not durable without it: the successor
        applies the append once and the replica gets its version."""
        held = tmp_path / "held"
        a = start(
            members,
            pg_dsn,
            backend,
            hold={"op": "append", "path": str(held), "race": True},
            **SHORT,
        )
        b = start(members, pg_dsn, backend, **SHORT)
        b.send("append", ("x", "forwarded"))
        wait_for(lambda: _held(held), timeout=30, interval=0.01)
        a.kill()
        a.proc.join(5)
        version = b._reply(60)  # DuplicateEntry if it was applied twice
        assert isinstance(version, int)
        appends = [r for r in db_log(pg_dsn) if r[2] == "append"]
        assert [(json.loads(r[4])["ids"], r[3]) for r in appends] == [(["x"], version)]
        (record,) = (json.loads(r[4]) for r in appends)
        assert record["detail"]["request_id"]  # stamped with the request
        assert sequencer(members) is b
        converge(members)
        check_merged(pg_dsn, members)

    @pytest.mark.parametrize("op", ["prune", "edit_prune"])
    def test_removal_committed_by_the_requests_own_flush(
        self, pg_dsn: str, members: list[Member], backend: str, tmp_path: Path, op: str
    ) -> None:
        """A forwarded prune (or edit) of an entry already marked and seen by
        every member is due at once: the sequencer publishes the removal
        inline, and that flush makes the request's records durable before
        its result exists. The sequencer dies right then. The successor finds
        the request's records (stamped with its id) and derives the report
        (PRUNED / removed) instead of applying it again (UNCHANGED; a second
        prune or edit record)."""
        held = tmp_path / "held"
        a = start(
            members,
            pg_dsn,
            backend,
            hold={"op": op.split("_")[0], "path": str(held), "race": False},
            **SHORT,
        )
        b = start(members, pg_dsn, backend, **SHORT)
        b("append", ("x", "the dump"))
        v = b("mark", "x")
        b("wait_applied", v)

        # the sequencer has read b's horizon at or past the mark: x is due
        wait_for(lambda: (a("stats")["grace_floor"] or -1) >= v, timeout=10)
        b.send(op, ["x"])
        wait_for(lambda: _held(held), timeout=30, interval=0.01)
        a.kill()
        a.proc.join(5)
        report = b._reply(60)
        rows = db_log(pg_dsn)
        decided = [r for r in rows if r[2] == ("prune" if op == "prune" else "edit")]
        assert len(decided) == 1, "the request was applied twice"
        stamp = json.loads(decided[0][4])["detail"]["request_id"]
        if decided[0][1] == 1:
            # committed by the killed sequencer (epoch 1), by the request's own
            # removal flush, without its result: the successor derived it
            removes = [json.loads(r[4]) for r in rows if r[2] == "remove"]
            assert [[t["id"] for t in r["detail"]["tombstones"]] for r in removes] == [["x"]]
            assert removes[0]["detail"]["request_id"] == stamp
            if op == "prune":
                assert report == {"x": "PRUNED"}
            else:
                assert report == {
                    "applied": True,
                    "version": removes[0]["version"],
                    "removed": ["x"],
                    "deferred": [],
                }
        else:
            # rarely, the runtime's scheduler took the due removal before the
            # request's inline one (then nothing of the request was durable
            # when the sequencer died): the successor applied it, once
            if op == "prune":
                assert report in ({"x": "PRUNED"}, {"x": "DEFERRED"})
            else:
                assert report["applied"] and report["removed"] + report["deferred"] == ["x"]
        wait_for(lambda: b("summary")["tombstones"] == ["x"])
        assert sequencer(members) is b
        converge(members)
        check_merged(pg_dsn, members)


@pytest.mark.anyio
async def test_rows_read_before_the_result_committed_are_not_applied_again(
    pg_dsn: str, anyio_backend: str
) -> None:
    """The sequencer's pump reads the open requests, then serves them; a
    request answered in between (its result committed by another flush) is
    served from a stale row. Replayed here deterministically: the rows of a
    forwarded prune and append that are already answered, served again. The
    sequencer finds their stamped records in its log and derives the same
    results; nothing is applied twice."""
    import anyio
    import psycopg

    from quiesce import Entry, Kind, open_shared_buffer

    fast = {"lease": 3.0, "poll": 0.2, "timeout": 5.0}
    async with (
        open_shared_buffer(pg_dsn, "b", **fast) as a,
        open_shared_buffer(pg_dsn, "b", **fast) as b,
    ):
        assert b.role == "replica"
        await b.append(Entry("x", Kind.REASONING, "x"))
        report = await b.prune(["x"], reason="stale")
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT request_id, member_id, op, args FROM quiesce_request "
                "WHERE buffer_id = 'b' ORDER BY created"
            ).fetchall()
            before = conn.execute(
                "SELECT op, result FROM quiesce_request WHERE buffer_id = 'b' ORDER BY created"
            ).fetchall()
        assert [r[2] for r in rows] == ["append", "prune"]
        n = len(a.log)
        await anyio.to_thread.run_sync(a._serve_batch, rows)
        assert len(a.log) == n  # applied again: a second prune record
        assert [r.op for r in a.log].count("prune") == 1
        assert a._results == []  # derived, stored (a no-op: already answered)
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            after = conn.execute(
                "SELECT op, result FROM quiesce_request WHERE buffer_id = 'b' ORDER BY created"
            ).fetchall()
        assert after == before
        # what the derivation gives is the report the caller got
        prune_args = json.loads(rows[1][3])
        stamped = a._stamped[rows[1][0]]
        from quiesce._shared.codec import _derive_result, _result_to_dict

        derived = _derive_result("prune", prune_args, stamped, a._version_before)
        assert derived == _result_to_dict("prune", report)
        a._check()
        b._check()


@pytest.mark.anyio
async def test_derived_results_equal_the_reports_callers_got(
    pg_dsn: str, anyio_backend: str
) -> None:
    """For every kind of forwarded request (append, mark, prune, an applied
    and a refused edit, a refused re-admission), the result derived from its
    stamped records equals the one the sequencer stored when it applied it;
    errors cross processes as themselves, with their tombstone."""
    import anyio
    import psycopg

    from quiesce import (
        EditPlan,
        Entry,
        EntryPruned,
        Kind,
        Prune,
        ReadmissionRefused,
        open_shared_buffer,
    )
    from quiesce._shared.codec import _derive_result

    fast = {"lease": 3.0, "poll": 0.2, "timeout": 5.0}
    async with (
        open_shared_buffer(pg_dsn, "d", **fast) as a,
        open_shared_buffer(pg_dsn, "d", **fast) as b,
    ):
        await b.append(Entry("x", Kind.REASONING, "the dump"))
        await b.append(Entry("y", Kind.REASONING, "kept"))
        await b.append(Entry("n", Kind.REASONING, "attempt 2 timed out, do not retry"))
        await b.mark_stale("y", "old")
        await b.prune(["x", "nope"], reason="stale")
        refused = await b.edit(EditPlan([Prune("n")], reason="drop"))
        assert not refused.applied
        await b.edit(EditPlan([Prune("y")], reason="drop"))
        with anyio.fail_after(10):
            while "x" not in b.head().tombs.by_id:
                await anyio.sleep(0.02)
        with pytest.raises(ReadmissionRefused) as readmission:
            await b.append(Entry("x2", Kind.REASONING, "the dump"))
        assert readmission.value.tombstone.id == "x"
        with pytest.raises(EntryPruned) as pruned:
            await b.mark_stale("x", "again")
        assert pruned.value.tombstone.id == "x"
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT request_id, op, args, result FROM quiesce_request "
                "WHERE buffer_id = 'd' ORDER BY created"
            ).fetchall()
        compared = []
        for request_id, op, args, result in rows:
            stamped = a._stamped.get(request_id)
            if stamped is None:  # no record (mark_stale of a pruned entry)
                assert op == "mark_stale" and "EntryPruned" in result
                continue
            derived = _derive_result(op, json.loads(args), stamped, a._version_before)
            assert derived == json.loads(result), op
            compared.append(op)
        assert compared == ["append"] * 3 + ["mark_stale", "prune", "edit", "edit", "append"]
        a._check()
        b._check()
