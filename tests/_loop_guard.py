"""A real SQLite log that tells whether its writes ran off the event loop.

``GuardedLog.write`` raises :class:`AssertionError` when called on the
thread given as ``loop_thread`` (the event loop's), and otherwise records,
for each write, the thread and how many beats a running
:class:`quiesce.bench.stall.Heartbeat` made while the write ran: a write in a
worker thread lets the loop go on beating (it is held ``hold`` seconds), one
on the loop would freeze it. Used by the integration and protocol tests.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from quiesce import LogRecord, SQLiteLog
from quiesce.bench.stall import Heartbeat


@dataclass
class Write:
    thread: int
    records: int
    beats: int | None  # beats of the heartbeat during the write (None: none ran)


class GuardedLog(SQLiteLog):
    """See the module docstring."""

    def __init__(self, path: Path, loop_thread: int, *, hold: float = 0.05) -> None:
        super().__init__(path)
        self.loop_thread = loop_thread
        self.hold = hold
        self.beat: Heartbeat | None = None
        self.writes: list[Write] = []

    def write(self, records: Sequence[LogRecord]) -> None:
        me = threading.get_ident()
        if me == self.loop_thread:
            self.writes.append(Write(me, len(records), None))
            raise AssertionError(f"{len(records)} log record(s) written on the event loop thread")
        beat = self.beat
        before = None if beat is None or beat.stopped is not None else beat.beats
        time.sleep(self.hold)  # a slow disk: the loop must not wait for it
        super().write(records)
        after = None if before is None or beat is None else beat.beats - before
        self.writes.append(Write(me, len(records), after))
