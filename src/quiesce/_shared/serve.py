"""Serving: the sequencer applies forwarded requests exactly once.

What it keeps true: requests are applied in arrival order, each once; a
request's result is committed in the same transaction as the records it
produced (the flush lock is held while it is applied, and its records
carry its id: :meth:`Replication.serving`), so a crash leaves both or
neither, and a successor that finds a request's records without its
result derives the result instead of applying it again; no row can stop
the pump (a bad one gets its error as its result); a removal intent
re-checks the members' horizons inside its own transaction and is held
back, not published, when one is below its grace.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import anyio
import anyio.abc

from .._core.entry import Entry, Kind
from .._core.errors import InvalidArgument, LogWriteError, QuiesceError, StreamClosed
from .._core.records import EscalationKind
from .._core.wire import parse_intent
from .._log.postgres import PostgresLog, WriterFenced
from .._runtime import RuntimeBuffer
from .codec import (
    _decode_request,
    _derive_result,
    _error_to_dict,
    _override,
    _plan_from_dict,
    _result_to_dict,
)
from .lease import _Leases
from .member import _SEQUENCER
from .sql import _HORIZON_CHECK, _OPEN_REQUESTS, _STORE_RESULT, _STORE_RESULT_FENCED


class _Serving(_Leases):
    """Serving requests and flushing (the layer above :class:`~.lease._Leases`)."""

    def _apply_locally(self, op: str, args: dict[str, Any]) -> Any:
        """Run one operation on the local buffer (the sequencer's path)."""
        buf = self.local
        if op == "append":
            return buf.append(Entry.from_dict(args["entry"]), override=_override(args["override"]))
        if op == "mark_stale":
            return buf.mark_stale(args["id"], args["reason"], turn=args["turn"])
        if op == "prune":
            return buf.prune(
                args["ids"], reason=args["reason"], actor=args["actor"], turn=args["turn"]
            )
        if op == "edit":
            return buf.edit(_plan_from_dict(args["plan"]))
        if op == "escalate":
            return buf.escalate(EscalationKind(args["kind"]), args["detail"], data=args["data"])
        if op == "stream_open":
            h = args["entry"]
            w = buf.open_stream(
                h["id"],
                Kind(h["kind"]),
                refs=h["refs"],
                turn=h["turn"],
                key=h["key"],
                meta=h["meta"],
            )
            owner = str(args.get("member", self.member_id))
            self._streams_served[w.id] = [owner, w, 0]
            return buf.version
        if op in ("stream_write", "stream_close", "stream_abort"):
            return self._apply_stream(op, args)
        raise InvalidArgument(f"unknown operation {op!r}")

    def _apply_stream(self, op: str, args: dict[str, Any]) -> int:
        """Apply a forwarded stream request at exactly its offset (stream.py):
        a write applied already (its text ends at or before what the stream
        holds) is answered again, not applied twice; a gap is refused.
        Returns the version published (the head if none)."""
        buf = self.local
        stream_id, offset, text = args["id"], args["offset"], args["text"]
        served = self._streams_served.get(stream_id)
        if served is None or served[1].closed:
            raise StreamClosed(
                f"stream {stream_id!r} is not open on the sequencer (finished, or aborted "
                f"by a failover or its member's lease loss)"
            )
        _owner, w, size = served
        if type(offset) is not int or type(text) is not str:
            raise InvalidArgument(f"stream {stream_id!r}: a malformed {op} request")
        if op == "stream_write" and offset + len(text) <= size:
            return buf.version  # applied already (the answer was lost)
        if offset != size:
            raise InvalidArgument(
                f"stream {stream_id!r}: text at offset {offset}, but it holds {size} characters"
            )
        version = w.write(text) if text else buf.version
        served[2] = size + len(text)
        if op == "stream_close":
            version = w.close(content=args.get("content"))
        elif op == "stream_abort":
            version = w.abort(args["reason"])
        if w.closed:
            del self._streams_served[stream_id]
        return version

    def _open_sink(self) -> PostgresLog:
        sink = PostgresLog(
            self._dsn,
            self._buffer_id,
            timeout=self._timeout,
            application_name=self._app_name,
            # a batch left open by a paused process ends on the server
            idle_in_transaction_timeout=self._lease / 2,
        )
        sink.before_commit = self._before_commit
        return sink

    async def _serve(self) -> None:
        """Apply the open requests in arrival order, then commit their records
        and results in one transaction (the sink's ``before_commit``). The
        requests are read and served in one worker-thread call (one thread
        round trip per batch, :meth:`_serve_open`)."""
        if time.monotonic() > self._writer_valid_until:
            return  # not sure we still hold the lease: the heartbeat decides
        try:
            served = await anyio.to_thread.run_sync(self._serve_open)
        except WriterFenced:
            await self._demote("fenced")
            served = True
        if served:
            self._signal_applied()

    def _serve_open(self) -> bool:
        """Read the open requests and serve them (:meth:`_serve_batch`);
        returns whether there were any (worker thread). A failing read is
        :class:`LogWriteError`, nothing served."""
        rows = self._ctl.run(_OPEN_REQUESTS, {"b": self._buffer_id})
        if not rows:
            return False
        self._serve_batch(rows)
        return True

    def _serve_batch(self, rows: list[tuple[Any, ...]]) -> None:
        """Apply each open request exactly once (worker thread). A request
        whose stamped records this member's log already holds — applied by a
        sequencer that died before its result was stored, or by this one
        (rows read before its result committed) — is not applied again: its
        result is derived from those records (:func:`_derive_result`).

        One request never stops the pump: whatever decoding, checking,
        deriving or applying one raises (``RecursionError``,
        ``OverflowError``, anything but a failing sink) becomes that
        request's error result, and the next request is served."""
        with self._commit_lock:
            buf = self.local
            with self._results_lock:
                applied = {r[0] for r in self._results}  # applied, not yet committed
            for request_id, _member, op, args_text in rows:
                if request_id in applied:
                    continue
                try:
                    args = _decode_request(op, args_text)
                except QuiesceError as exc:
                    with self._results_lock:
                        self._results.append(
                            (request_id, json.dumps(_error_to_dict(exc)), len(buf.log))
                        )
                    continue
                done = self._stamped.get(request_id)
                derived = None
                if done is not None:
                    try:
                        derived = _derive_result(op, args, done, self._version_before)
                    except Exception:
                        derived = None  # malformed arguments: applied (and refused) as before
                if derived is not None:
                    assert done is not None
                    with self._results_lock:
                        self._results.append((request_id, json.dumps(derived), done[-1].seq + 1))
                    continue
                self._apply_request(buf, request_id, op, args)
                self.served += 1
            self._flush_locked()

    def _apply_request(
        self, buf: RuntimeBuffer, request_id: str, op: str, args: dict[str, Any]
    ) -> None:
        """Apply one forwarded request and queue its result, holding the
        buffer's flush lock throughout: a flush by another thread (the
        flusher, a removal's intent) waits, so it commits the request's
        records only together with its result (``_before_commit``). Only the
        request's own inline flush (a prune or edit publishing a due removal)
        can commit them first; they carry the request's id, so a successor
        derives the result instead of applying the request again."""
        repl = self._repl
        assert repl is not None
        # the fast paths append compact records: stamped at the block's end,
        # under the write lock (no other writer's record among them)
        exclusive = op in ("append", "mark_stale") or op.startswith("stream_")
        with repl.serving(self._stamp_for(request_id), exclusive=exclusive):
            try:
                value = self._apply_locally(op, args)
                text = json.dumps(_result_to_dict(op, value))
            except QuiesceError as exc:
                if isinstance(exc, LogWriteError):
                    raise
                text = json.dumps(_error_to_dict(exc))
            except Exception as exc:  # a malformed request, or the core failing on it
                text = json.dumps(
                    {
                        "error": "InvalidArgument",
                        "message": f"{op} request refused by the sequencer: "
                        f"{type(exc).__name__}: {str(exc)[:200]}",
                    }
                )
            with self._results_lock:
                self._results.append((request_id, text, len(buf.log)))

    def _version_before(self, seq: int) -> int:
        """The newest version published by a record before ``seq`` (the head
        a request that published none reported). Reads back at most 1,000
        records; past them, or where they were dropped, the current head."""
        log = self.local.log
        for s in range(seq - 1, max(-1, seq - 1_001), -1):
            try:
                version = log[s].version
            except QuiesceError:
                return self.local.version
            if version is not None:
                return version
        return self.local.version if seq > 1_000 else 0

    def _before_commit(self, cur: Any, batch: Any) -> Callable[[], None] | None:
        """The sink's ``before_commit``, inside each batch's transaction:
        (1) a removal intent in the batch re-checks the live members'
        horizons against its groups' grace versions (the authoritative
        cross-process grace test): a group held back is taken out of the
        buffer's ``_applying``, so its removal is requeued, not published;
        (2) store the results of forwarded requests whose records are all in
        this batch."""
        repl = self._repl
        if repl is not None:
            graces = repl.removals_in_flight(
                gid for rec in batch if rec.op == "tombstone" for gid in parse_intent(rec).gids
            )
            if graces:
                cur.execute(_HORIZON_CHECK, {"b": self._buffer_id, "m": self.member_id})
                row = cur.fetchone()
                floor = None if row is None or row[0] is None else int(row[0])
                held = [gid for gid, g in graces.items() if floor is not None and floor < g]
                if held:
                    # The intent itself is harmless (recovery ignores it);
                    # held back, the groups are requeued instead of published.
                    repl.hold_back(held, floor)
                    self._floor = floor
        last_seq = batch[-1].seq
        with self._results_lock:
            done = [r for r in self._results if r[2] <= last_seq + 1]
        if not done:
            return None
        for request_id, text, seq_after in done:
            cur.execute(
                _STORE_RESULT,
                {"res": text, "a": seq_after, "b": self._buffer_id, "r": request_id},
            )

        def committed() -> None:
            with self._results_lock:
                for r in done:
                    self._results.remove(r)

        return committed

    def _flush(self, checkpoint: bool = False) -> None:
        with self._commit_lock:
            self._flush_locked(checkpoint)

    def _flush_locked(self, checkpoint: bool = False) -> None:
        buf = self.local
        repl = self._repl
        assert repl is not None
        try:
            buf.flush(checkpoint=checkpoint)
        except LogWriteError as exc:
            if isinstance(exc.__cause__, WriterFenced):
                raise exc.__cause__ from None
            raise
        # Results of requests whose records an earlier flush already made
        # durable (or that made none): stored now, fenced by epoch.
        with self._results_lock:
            left = [r for r in self._results if r[2] <= repl.durable]
        for request_id, text, seq_after in left:
            self._ctl.run(
                _STORE_RESULT_FENCED,
                {
                    "res": text,
                    "a": seq_after,
                    "b": self._buffer_id,
                    "r": request_id,
                    "e": self._epoch,
                    "ch": self.request_channel,
                },
            )
            with self._results_lock:
                self._results.remove((request_id, text, seq_after))

    async def _flusher(self) -> None:
        while True:
            # a replica has nothing to flush: it only looks for a promotion
            idle = self._role != _SEQUENCER
            await anyio.sleep(self._poll if idle else self._flush_interval)
            if self._role == _SEQUENCER and (self.local.pending_records or self._results):
                try:
                    await anyio.to_thread.run_sync(self._flush)
                except WriterFenced:
                    await self._demote("fenced")
                except LogWriteError:
                    pass  # stats().local.log_failing; retried next interval
