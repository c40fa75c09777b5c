"""Following: a replica applies the shared log as it grows.

What it keeps true: a replica applies every batch it reads (``seq`` past
what it has, no gap) as one new version with the sequencer's numbers, and
never a removal of its own; it is woken by ``NOTIFY`` and also catches up
on a slow poll and after every reconnect (a ``NOTIFY`` is never
replayed), so a lost notification delays it by at most one poll.
"""

from __future__ import annotations

import time

import anyio
import anyio.abc

from .._core.errors import LogWriteError
from .._log.postgres import connect
from .member import _REPLICA, _SEQUENCER, _Member
from .sql import _RESULTS


class _Following(_Member):
    """Catching up with the log (the layer above :class:`~.member._Member`)."""

    def _listen_once(self) -> bool:
        """Wait up to ``poll`` seconds for a notification (worker thread).
        Returns whether one came; reconnects and re-LISTENs after a failure."""
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
                got = True
                sink = self._sink  # the payload is the last seq of the commit
                if sink is not None and note.channel == sink.channel and note.payload.isdigit():
                    self._log_seq = max(self._log_seq, int(note.payload) + 1)
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

    async def _catch_up(self) -> None:
        """Read the log past what is applied and apply it as one version."""
        if self._needs_rebuild:
            await self._rebuild()
        sink = self._sink
        repl = self._repl
        assert sink is not None and repl is not None
        records = await self._db(sink.read_from, repl.applied)
        if records:
            self._log_seq = max(self._log_seq, records[-1].seq + 1)
        if not records or self._role == _SEQUENCER:
            return
        start = repl.applied
        if repl.apply_records(records):
            self._index_stamped(r for r in records if r.seq >= start)
        self._signal_applied()

    async def _collect_answers(self) -> None:
        ids = list(self._waiting)
        if not ids:
            return
        rows = await self._ctl_run(_RESULTS, {"b": self._buffer_id, "ids": ids})
        for request_id, text, applied_seq in rows:
            self._answers[request_id] = (text, int(applied_seq or 0))
        if rows:
            if self._role == _REPLICA:
                await self._catch_up()
            event, self._answered = self._answered, anyio.Event()
            event.set()
