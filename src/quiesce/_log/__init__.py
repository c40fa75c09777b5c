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
4. One writer per file: a sink holds an exclusive OS lock on its file for
   its life; a second sink on the same file, in any process, gets
   :class:`~quiesce.LogLocked` on open.
5. A file is untrusted input: recovery recovers exactly what was committed,
   or raises :class:`~quiesce.LogFormatError` naming the damaged or
   impossible record (never another exception type); a torn tail is skipped
   whatever it holds. Every record is checked against the invariants as it
   is replayed (``_core/replay.py``).
6. Writing never jams: records are encoded one by one with a total encoder
   (``_format.encode_json``), so one odd value cannot block the batch.

The import direction is fixed: this package imports ``quiesce._core``; the
core never imports it, and nothing here imports an event loop.
"""

from .jsonl import JsonlLog as JsonlLog
from .sqlite import SQLiteLog as SQLiteLog

__all__ = ["JsonlLog", "SQLiteLog"]
