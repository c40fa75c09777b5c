"""``AsyncBuffer``: the one face of a buffer that code on the event loop uses.

Two buffers live on an event loop: the :class:`~quiesce.RuntimeBuffer` that
``open_buffer()`` yields (one process, its log a local file or nothing) and
the :class:`~quiesce.SharedBuffer` of ``open_shared_buffer()`` (many
processes, through PostgreSQL). The integrations and
:func:`~quiesce.run_pruner` are written against this protocol only, so either
one can hold a framework's conversation.

What every implementation keeps true:

* **Reads are local and sync.** ``snapshot()`` pins without awaiting (never a
  network or disk access), ``head()``, ``version``, ``tombstones`` and
  ``staged()`` read the local head. O(1) or O(staged).
* **Writes are async and never block the loop.** ``aappend``,
  ``amark_stale``, ``aprune``, ``aedit``, ``aescalate`` and ``aflush`` are
  always checkpoints; any disk or database work they need runs in a worker
  thread (a local log's flush) or over the shared buffer's connections,
  never on the event loop thread. Each returns the report the buffer's own
  sync call gives (on a shared replica: the sequencer's).
* **Cancellation never splits a write.** A cancelled caller leaves its
  write applied or refused as a whole (the worker thread is not abandoned;
  a forwarded request is applied exactly once or not at all).
* ``quiesce()`` returns once every removal due on this member is applied;
  ``escalations()`` streams the escalations this member's buffer raises.

A plain :class:`~quiesce.Buffer` (no runtime) is not an ``AsyncBuffer``:
:func:`async_buffer` gives it the same face, with its durable writes in a
worker thread, so an integration handed one still never flushes on the loop.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, TypedDict, TypeVar, Unpack, runtime_checkable

import anyio

from ._core.buffer import Buffer, Snapshot
from ._core.entry import Entry, Kind
from ._core.errors import BufferClosed, InvalidType
from ._core.plan import EditPlan
from ._core.records import (
    EditReport,
    Escalation,
    EscalationKind,
    Mark,
    Override,
    PruneReport,
    Tombstone,
)
from ._core.stream import PruneOptions, StreamWriter
from ._core.version import Version
from ._runtime import RuntimeBuffer

__all__ = ["AsyncBuffer", "StreamOptions", "async_buffer", "local_buffer"]


class StreamOptions(TypedDict, total=False):
    """The keyword options of ``open_stream`` (as :meth:`Buffer.open_stream`
    takes them: ``refs=()``, ``turn=None``, ``key=None``, ``meta=None``),
    spelled once for every face that passes them on."""

    refs: Iterable[str]
    turn: int | None
    key: str | None
    meta: Mapping[str, Any] | None


_T = TypeVar("_T")


@runtime_checkable
class AsyncBuffer(Protocol):
    """What the integrations and :func:`~quiesce.run_pruner` need of a buffer
    (see the module docstring): sync local reads, async writes.

    Implemented by :class:`~quiesce.RuntimeBuffer` and
    :class:`~quiesce.SharedBuffer`; ``isinstance(x, AsyncBuffer)`` checks the
    names only, as for every runtime-checkable protocol.
    """

    @property
    def version(self) -> int:
        """The local head version number."""
        ...

    @property
    def tombstones(self) -> Mapping[str, Tombstone]:
        """The tombstones of the local head."""
        ...

    def head(self) -> Version:
        """The local head version (immutable)."""
        ...

    def snapshot(self) -> Snapshot:
        """A snapshot to pin with ``with``: sync, never touches a disk or network."""
        ...

    def staged(self) -> Mapping[str, int]:
        """Ids staged for removal → their grace version."""
        ...

    def open_stream(self, id: str, kind: Kind, **options: Unpack[StreamOptions]) -> StreamWriter:
        """:meth:`Buffer.open_stream` (its options: :class:`StreamOptions`):
        publish an entry still being written.
        Sync, like its writes (the ``mark_stale`` fast-path contract:
        durability happens later, coalesced, in the buffer's flusher)."""
        ...

    async def aappend(self, entry: Entry, *, override: Override | None = None) -> int:
        """:meth:`Buffer.append`; returns the new version."""
        ...

    async def amark_stale(self, entry_id: str, reason: str, *, turn: int | None = None) -> Mark:
        """:meth:`Buffer.mark_stale`; returns the mark (the first one stands)."""
        ...

    async def aprune(self, ids: Iterable[str], **options: Unpack[PruneOptions]) -> PruneReport:
        """:meth:`Buffer.prune` (its options: :class:`PruneOptions`); its report."""
        ...

    async def aedit(self, plan: EditPlan) -> EditReport:
        """:meth:`Buffer.edit`, all or nothing; its report."""
        ...

    async def aescalate(
        self, kind: EscalationKind, detail: str, *, data: Mapping[str, Any] | None = None
    ) -> Escalation:
        """:meth:`Buffer.escalate`: log and deliver an escalation."""
        ...

    async def aflush(self) -> None:
        """Return once every change made before the call is durable."""
        ...

    async def quiesce(self) -> None:
        """Return once every removal due here is applied (always a checkpoint)."""
        ...

    def escalations(self) -> AsyncIterator[Escalation]:
        """The escalations this buffer raises, as they happen."""
        ...


class _BufferFace:
    """The :class:`AsyncBuffer` face of a plain :class:`Buffer` (no runtime).

    Reads delegate. Writes that may wait for a disk (``aprune``, ``aedit``,
    ``aflush``, due removals in ``quiesce``) run in a worker thread when the
    buffer has a durable sink, not abandoned on cancellation (the buffer's
    write lock makes them atomic with other writers); the others (append,
    mark, escalate: they only queue log records) run inline after a
    checkpoint. A plain buffer has no escalation stream: ``escalations()``
    raises :class:`BufferClosed`.
    """

    __slots__ = ("buffer",)

    def __init__(self, buffer: Buffer) -> None:
        self.buffer = buffer

    @property
    def version(self) -> int:
        return self.buffer.version

    @property
    def tombstones(self) -> Mapping[str, Tombstone]:
        return self.buffer.tombstones

    def head(self) -> Version:
        return self.buffer.head()

    def snapshot(self) -> Snapshot:
        return self.buffer.snapshot()

    def staged(self) -> Mapping[str, int]:
        return self.buffer.staged()

    def open_stream(self, id: str, kind: Kind, **options: Unpack[StreamOptions]) -> StreamWriter:
        return self.buffer.open_stream(id, kind, **options)

    async def _inline(self, call: Callable[[], _T]) -> _T:
        await anyio.lowlevel.checkpoint()
        return call()

    async def _durable(self, call: Callable[[], _T]) -> _T:
        if self.buffer.sink is None:
            return await self._inline(call)
        return await anyio.to_thread.run_sync(call, abandon_on_cancel=False)

    async def aappend(self, entry: Entry, *, override: Override | None = None) -> int:
        return await self._inline(functools.partial(self.buffer.append, entry, override=override))

    async def amark_stale(self, entry_id: str, reason: str, *, turn: int | None = None) -> Mark:
        return await self._inline(
            functools.partial(self.buffer.mark_stale, entry_id, reason, turn=turn)
        )

    async def aprune(self, ids: Iterable[str], **options: Unpack[PruneOptions]) -> PruneReport:
        return await self._durable(functools.partial(self.buffer.prune, ids, **options))

    async def aedit(self, plan: EditPlan) -> EditReport:
        return await self._durable(functools.partial(self.buffer.edit, plan))

    async def aescalate(
        self, kind: EscalationKind, detail: str, *, data: Mapping[str, Any] | None = None
    ) -> Escalation:
        return await self._inline(functools.partial(self.buffer.escalate, kind, detail, data=data))

    async def aflush(self) -> None:
        with anyio.CancelScope(shield=True):
            await self._durable(self.buffer.flush)

    async def quiesce(self) -> None:
        await anyio.lowlevel.checkpoint()
        while self.buffer.has_due():
            await self._durable(self.buffer.apply_due)

    async def escalations(self) -> AsyncIterator[Escalation]:
        raise BufferClosed(
            "escalations() needs a running buffer (open_buffer or open_shared_buffer)"
        )
        yield  # pragma: no cover  (an async generator, as the protocol's)


def async_buffer(buffer: object, owner: str) -> AsyncBuffer:
    """``buffer`` as an :class:`AsyncBuffer`: itself if it implements the
    protocol (a ``RuntimeBuffer``, a ``SharedBuffer``), the async face of a
    plain :class:`Buffer`, else :class:`InvalidType` naming ``owner``. O(1)."""
    if type(buffer) is _BufferFace:  # already the face: no protocol check (it reads
        return buffer  # every member of the protocol, on every call)
    if isinstance(buffer, Buffer):
        return buffer if isinstance(buffer, RuntimeBuffer) else _BufferFace(buffer)
    if isinstance(buffer, AsyncBuffer):  # reads its properties (a closed shared
        # buffer raises BufferClosed here, which says what is wrong)
        return buffer
    raise InvalidType(
        f"{owner} needs a Buffer or an AsyncBuffer (open_buffer(), open_shared_buffer()), "
        f"not {type(buffer).__name__}"
    )


def local_buffer(buffer: AsyncBuffer) -> Buffer | None:
    """The in-process :class:`Buffer` behind ``buffer`` (a runtime buffer, or
    a plain one given the async face), or ``None`` for a buffer whose writes
    go elsewhere (a shared buffer). Code on the loop may run a buffer's
    *appends* on it synchronously (they never touch a disk), which keeps a
    batch atomic with respect to other coroutines."""
    if isinstance(buffer, Buffer):
        return buffer
    if isinstance(buffer, _BufferFace):
        return buffer.buffer
    return None


if TYPE_CHECKING:

    def _runtime_conforms(runtime: RuntimeBuffer) -> AsyncBuffer:
        """A static check (``mypy --strict src``): a RuntimeBuffer is an AsyncBuffer."""
        return runtime
