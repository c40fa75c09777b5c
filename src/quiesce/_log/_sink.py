"""What the three durable sinks (JSONL, SQLite, PostgreSQL) have alike.

What it keeps true: a sink used as a context manager is closed when the
block ends, however it ends (an exception or a cancellation included:
``close`` is synchronous and idempotent in every sink), and ``commits``
counts the batches this object made durable, one per ``write`` that
returned. No I/O of its own; each sink keeps its own lock.
"""

from __future__ import annotations

from types import TracebackType
from typing import Self

__all__ = ["SinkBase"]


class SinkBase:
    """The shared face of :class:`~.jsonl.JsonlLog`, :class:`~.sqlite.SQLiteLog`
    and :class:`~.postgres.PostgresLog`: ``with`` support and ``commits``.
    A subclass sets ``_commits`` in ``__init__`` and defines ``close``."""

    _commits: int

    def close(self) -> None:  # pragma: no cover - every sink defines it
        raise NotImplementedError

    @property
    def commits(self) -> int:
        """Batches this object made durable: one per ``write`` (one commit,
        or for JSONL one ``fsync``), however many records. O(1)."""
        return self._commits

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
