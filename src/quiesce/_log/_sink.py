"""What the three durable sinks (JSONL, SQLite, PostgreSQL) have alike.

What it keeps true: a sink (and anything else of this package that holds a
file or a connection, like ``quiesce verify``'s temporary removals file)
used as a context manager is closed when the block ends, however it ends
(an exception or a cancellation included: ``close`` is synchronous and
idempotent in every one); ``commits`` counts the batches a sink made
durable, one per ``write`` that returned; and every sink's ``repr`` reads
``<Name place: N records>`` or ``<Name place: closed>``. No I/O of its
own; each sink keeps its own lock.
"""

from __future__ import annotations

from types import TracebackType
from typing import ClassVar, Self

__all__ = ["ClosesOnExit", "SinkBase"]


class ClosesOnExit:
    """``with obj:`` returns ``obj`` and calls its :meth:`close` on leaving,
    however the block ends. A subclass defines ``close`` (synchronous and
    idempotent, so cancellation cannot skip it)."""

    def close(self) -> None:  # pragma: no cover - every subclass defines it
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class SinkBase(ClosesOnExit):
    """The shared face of :class:`~.jsonl.JsonlLog`, :class:`~.sqlite.SQLiteLog`
    and :class:`~.postgres.PostgresLog`: ``with`` support, ``commits`` and
    the ``repr``. A subclass names itself in ``_SINK``, sets ``_commits``
    and ``_next_seq`` in ``__init__`` and defines ``close``, ``closed`` and
    ``_place`` (where the log is, as the ``repr`` shows it)."""

    #: the sink's class name, as its ``repr`` shows it
    _SINK: ClassVar[str]
    _commits: int
    _next_seq: int

    @property
    def closed(self) -> bool:  # pragma: no cover - every sink defines it
        """Whether :meth:`close` was called."""
        raise NotImplementedError

    def _place(self) -> str:  # pragma: no cover - every sink defines it
        raise NotImplementedError

    @property
    def commits(self) -> int:
        """Batches this object made durable: one per ``write`` (one commit,
        or for JSONL one ``fsync``), however many records. O(1)."""
        return self._commits

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{self._next_seq} records"
        return f"<{self._SINK} {self._place()}: {state}>"
