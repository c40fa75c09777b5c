"""Following: a replica applies the shared log as it grows.

What it keeps true: a replica applies every batch it reads (``seq`` past
what it has, no gap) as one new version with the sequencer's numbers, and
never a removal of its own; it is woken by ``NOTIFY`` and also catches up
on a slow poll and after every reconnect (a ``NOTIFY`` is never
replayed), so a lost notification delays it by at most one poll.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import anyio
import anyio.abc

from .._core.errors import LogWriteError
from .._core.records import LogRecord
from .._log.postgres import PostgresLog, connect
from .member import _REPLICA, _SEQUENCER, _Member
from .sql import _RESULTS


class _Following(_Member):
    """Catching up with the log (the layer above :class:`~.member._Member`)."""

    def _listen_once(self) -> bool:
        """Wait up to ``poll`` seconds for a notification (worker thread).
        Returns whether the pump should wake: a notification this member's
        role acts on came (a replica: a log commit; the sequencer: a new
        request, whose payload is its id; any member with forwarded requests
        waiting: a log commit or a late result, whose payload is empty), or
        the connection was (re)made. The others are ignored, so a member is
        not woken by its own commits or requests: each such wake-up was a
        round of queries competing with the round trip it serves. One
        ignored by mistake (a role changing meanwhile) costs at most one
        ``poll``, the pump's own period; a promotion wakes the pump itself.
        Reconnects and re-LISTENs after a failure."""
        import psycopg

        try:
            conn = self._listen_conn
            if conn is None or conn.closed:
                sink = self._sink
                assert sink is not None
                conn = connect(self._dsn, timeout=self._timeout, application_name=self._app_name)
                conn.execute(f'LISTEN "{sink.channel}"')
                conn.execute(f'LISTEN "{self.request_channel}"')
                self._listen_conn = conn
                return True  # (re)connected: catch up, a NOTIFY may have been missed
            got = False
            for note in conn.notifies(timeout=self._poll, stop_after=1):
                sink = self._sink
                sequencer = self._role == _SEQUENCER
                if sink is not None and note.channel == sink.channel:
                    if note.payload.isdigit():  # the last seq of the commit
                        self._log_seq = max(self._log_seq, int(note.payload) + 1)
                    got = got or not sequencer or bool(self._waiting)
                elif note.payload:  # a request queued (its id)
                    got = got or sequencer
                else:  # a result stored after its records were durable
                    got = got or bool(self._waiting)
            return got
        except (psycopg.Error, LogWriteError):
            conn, self._listen_conn = self._listen_conn, None
            if conn is not None:
                try:
                    conn.close()
                except Exception:
                    pass
            time.sleep(min(self._poll, 0.2))
            return True

    async def _catch_up(self, *, answers: bool = False) -> None:
        """Read the log past what is applied and apply it as one version.
        With ``answers``, the answers to this member's waiting forwarded
        requests are read in the same worker-thread call, right after the
        log (one thread round trip for both: :meth:`_take_answers`)."""
        if self._needs_rebuild:
            await self._rebuild()
        sink = self._sink
        repl = self._repl
        assert sink is not None and repl is not None
        ids = list(self._waiting) if answers else []
        records, rows = await self._db(self._read_tail, sink, repl.applied, ids)
        if records:
            self._log_seq = max(self._log_seq, records[-1].seq + 1)
        if records and self._role != _SEQUENCER:
            start = repl.applied
            if repl.apply_records(records):
                self._index_stamped(r for r in records if r.seq >= start)
            self._signal_applied()
        if rows:
            await self._take_answers(rows)

    def _read_tail(
        self, sink: PostgresLog, start: int, ids: list[str]
    ) -> tuple[Sequence[LogRecord], list[tuple[Any, ...]]]:
        """The log's records from ``start``, then the stored answers to the
        requests ``ids`` (none if empty), read in this order (worker thread):
        an answer read here has its records in the log read here or later."""
        records = sink.read_from(start)
        rows = self._ctl.run(_RESULTS, {"b": self._buffer_id, "ids": ids}) if ids else []
        return records, rows

    async def _collect_answers(self) -> None:
        ids = list(self._waiting)
        if not ids:
            return
        rows = await self._ctl_run(_RESULTS, {"b": self._buffer_id, "ids": ids})
        if rows:
            await self._take_answers(rows)

    async def _take_answers(self, rows: list[tuple[Any, ...]]) -> None:
        """Hand stored answers to their waiting callers (:meth:`_forward`),
        reading the log again first only if an answer's records are not
        applied yet (they are committed with or before their answer)."""
        newest = 0
        for request_id, text, applied_seq in rows:
            self._answers[request_id] = (text, int(applied_seq or 0))
            newest = max(newest, int(applied_seq or 0))
        if self._role == _REPLICA and newest > len(self.local.log):
            await self._catch_up()
        event, self._answered = self._answered, anyio.Event()
        event.set()
