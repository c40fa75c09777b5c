"""Which SQLite log files this process holds, and whether another writer holds one.

What it keeps true: a file a :class:`~quiesce.SQLiteLog` of this process
holds is never opened and closed again by quiesce while it is held. On
POSIX, closing *any* descriptor of a file drops every POSIX lock the process
holds on it, SQLite's own included (and another process could then take the
log's write-ahead log for abandoned and delete it). So the holder's lock
descriptor is registered in :data:`_HELD` (keyed by ``(st_dev, st_ino)``),
readers of a held file read through that descriptor (:func:`_held_fd`), and
the descriptor is closed only after the log's SQLite connections.

The exclusive ``flock`` itself is taken by
:func:`~quiesce._log._format.lock_exclusive` (shared with ``JsonlLog``);
:func:`_writer_active` probes another process's with a shared, non-blocking
``flock`` that it drops at once. ``flock`` and SQLite's POSIX locks do not
interact. All of it is O(1) system calls; nothing here blocks.
"""

from __future__ import annotations

import os
import threading

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no advisory locks
    fcntl = None  # type: ignore[assignment]

#: Files a SQLiteLog of this process holds: (st_dev, st_ino) -> its lock
#: descriptor. Nothing here opens and closes such a file again: on POSIX,
#: closing *any* descriptor of a file drops every POSIX lock the process
#: holds on it, SQLite's included (and another process could then take the
#: log's WAL for abandoned and delete it). Re-entrant: the cyclic collector
#: can run a forgotten log's ``__del__`` (which releases its entry) inside
#: any allocation made while the lock is held, in the same thread.
_HELD: dict[tuple[int, int], int] = {}
_HELD_LOCK = threading.RLock()


def _held_fd(path: str) -> int | None:
    """The lock descriptor of this process's SQLiteLog on ``path``, if any."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return _HELD.get((st.st_dev, st.st_ino))


def _writer_active(path: str) -> bool:
    """Whether a ``SQLiteLog`` holds ``path`` open for writing now (its
    exclusive ``flock`` refuses a shared one). Takes no lock it keeps."""
    if fcntl is None:  # pragma: no cover - Windows
        return False
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # before any SQLite connection of ours opens the file
    return False
