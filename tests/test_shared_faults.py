"""The shared buffer under hostile input and faults: a request row no
sequencer can apply, a foreign client's log row, a partitioned member's
reads at its lease deadline, a sequencer paused (SIGSTOP) inside a
transaction.

In-process cases run two members in one process on asyncio and trio (the
``anyio_backend`` fixture); the multi-process cases spawn members
(``tests/_shared_child.py``) on both backends, against the session's real
PostgreSQL server.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import anyio
import psycopg
import pytest

from quiesce import Entry, InvalidArgument, Kind, open_shared_buffer
from quiesce._shared import SharedBuffer

FAST = {"lease": 3.0, "poll": 0.2, "timeout": 5.0}


async def _raw_request(dsn: str, seq: SharedBuffer, op: str, args_text: str) -> dict[str, Any]:
    """Insert a request row as a foreign psycopg client would (below every
    client-side check), wake the sequencer, and return the stored result."""
    request_id = uuid.uuid4().hex

    def insert() -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(
                "INSERT INTO quiesce_request (buffer_id, request_id, member_id, op, args) "
                "VALUES ('b', %s, 'foreign', %s, %s)",
                (request_id, op, args_text),
            )
            conn.execute("SELECT pg_notify(%s, %s)", (seq.request_channel, request_id))

    def result() -> str | None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            row = conn.execute(
                "SELECT result FROM quiesce_request WHERE buffer_id = 'b' AND request_id = %s",
                (request_id,),
            ).fetchone()
        return None if row is None else row[0]

    await anyio.to_thread.run_sync(insert)
    with anyio.fail_after(20):
        while (text := await anyio.to_thread.run_sync(result)) is None:
            await anyio.sleep(0.05)
    out: dict[str, Any] = json.loads(text)
    return out


class TestPoisonRequests:
    """One request row must never stop the sequencer: it gets an error
    result, and the next request is served by the same sequencer."""

    @pytest.mark.anyio
    async def test_a_request_nested_100k_deep_is_refused_and_serving_goes_on(
        self, pg_dsn: str, anyio_backend: str
    ) -> None:
        async with (
            open_shared_buffer(pg_dsn, "b", **FAST) as a,
            open_shared_buffer(pg_dsn, "b", **FAST) as b,
        ):
            assert (a.role, b.role) == ("sequencer", "replica")
            deep = '{"ids": ' + "[" * 100_000 + "]" * 100_000 + ', "reason": "r"}'
            result = await _raw_request(pg_dsn, a, "prune", deep)
            assert result == {
                "error": "InvalidArgument",
                "message": "prune request: args nest deeper than 1000 levels",
            }
            not_json = await _raw_request(pg_dsn, a, "append", '{"entry": NaN}')
            assert not_json["error"] == "InvalidArgument"
            assert not_json["message"].startswith("append request: args are not strict JSON")
            unknown = await _raw_request(pg_dsn, a, "drop_table", "{}")
            assert unknown["message"] == "unknown operation 'drop_table'"
            shape = await _raw_request(pg_dsn, a, "edit", '{"plan": {"ops": 7}}')
            assert shape["error"] == "InvalidArgument"
            assert shape["message"].startswith("edit request refused by the sequencer: ")
            # the same sequencer serves the next request
            v = await b.append(Entry("next", Kind.REASONING, "served after the poison rows"))
            assert b.version >= v
            assert (a.role, a.epoch, b.role) == ("sequencer", 1, "replica")
            assert a.failovers == b.failovers == 0
            a._check()
            b._check()

    @pytest.mark.anyio
    async def test_a_forwarded_turn_beyond_64_bits_is_refused_and_serving_goes_on(
        self, pg_dsn: str, anyio_backend: str
    ) -> None:
        """A replica's prune with ``turn=2**63``, forwarded below any
        client-side check (the request as the wire carries it): the replica
        gets InvalidArgument, the head is unchanged, nothing is half-removed,
        and the sequencer keeps serving (no failover)."""
        async with (
            open_shared_buffer(pg_dsn, "b", **FAST) as a,
            open_shared_buffer(pg_dsn, "b", **FAST) as b,
        ):
            v = await b.append(Entry("x", Kind.REASONING, "x"))
            await b.mark_stale("x", "old")
            head = a.version
            args = {"ids": ["x"], "reason": "stale", "actor": None, "turn": 2**63}
            too_big = r"^prune request: integer 9223372036854775808 does not fit in 64 bits$"
            with pytest.raises(InvalidArgument, match=too_big):
                await b._forward("prune", args, 10.0, None)
            assert a.version == head
            assert "x" not in a.head().tombs.by_id and "x" not in a.staged()
            report = await b.prune(["x"], reason="stale", turn=3)
            assert report["x"].status.name in ("PRUNED", "DEFERRED")
            with anyio.fail_after(10):
                while "x" not in b.head().tombs.by_id:
                    await anyio.sleep(0.02)
            assert b.head().tombs.by_id["x"].turn == 3
            assert v < b.version
            assert (a.role, a.epoch, a.failovers, b.failovers) == ("sequencer", 1, 0, 0)
            a._check()
            b._check()
