"""Durable edit-log sinks and recovery tooling.

* :class:`~quiesce._log.sqlite.SQLiteLog` — the embedded default for real use
  (standard-library ``sqlite3``, WAL mode, append-only enforced by triggers);
* :class:`~quiesce._log.jsonl.JsonlLog` — one record a line, ``fsync`` per
  batch, torn tails detected and ignored;
* ``quiesce inspect PATH`` (:mod:`quiesce._log.inspect`) — the log and its
  tombstones for a person, or as JSON.

Both sinks implement the core's :class:`~quiesce._core.log.LogSink` protocol:
``write(batch)`` is one atomic commit (the buffer calls it from ``flush()``
and before publishing each removal, never from ``append`` or
``mark_stale``), and ``load()`` returns the committed records for recovery
(``Buffer(log=sink)`` replays them). Invariants every sink keeps:

1. The stored log only grows: records are stored in ``seq`` order with no gap,
   and nothing stored is ever changed or removed.
2. A batch is all or nothing: after a crash at any moment, every batch whose
   ``write`` returned is recovered, and no part of any other batch is.
3. A file that is not a quiesce log, or is from a newer format, is refused
   with :class:`~quiesce.LogFormatError` on open, and nothing is written to it.

The import direction is fixed: this package imports ``quiesce._core``; the
core never imports it, and nothing here imports an event loop.
"""

from .jsonl import JsonlLog as JsonlLog
from .sqlite import SQLiteLog as SQLiteLog

__all__ = ["JsonlLog", "SQLiteLog"]
