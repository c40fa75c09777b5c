"""One buffer per conversation: :class:`BufferPool` and :class:`ConversationMismatch`.

A quiesce buffer holds *one* conversation. A server that runs one agent for
many users (LangGraph ``thread_id``\\ s, pydantic-ai conversations, Agents SDK
sessions, AutoGen contexts) needs one buffer per conversation, opened when a
conversation is first seen and closed with the server. ``BufferPool`` is that
map; the integrations take a pool wherever they take a buffer.

What it keeps true:

* **One buffer per id.** ``await pool.get(cid)`` opens the buffer of ``cid``
  with the factory the first time and returns the same object ever after.
  Concurrent first uses of one id wait for the one opening (the factory is
  entered once per id); different ids open concurrently.
* **Opened and closed in tasks of the pool.** Each buffer's context manager
  (``open_buffer()``, ``open_shared_buffer(...)``, anything async-with-able)
  is entered and exited by a task the pool owns, not by the caller of
  ``get``: a buffer outlives the request that opened it, and its scheduler's
  task group is exited by the task that entered it (anyio and trio require
  that).
* **Closed with the pool.** Leaving ``async with pool`` closes every buffer
  the pool opened, concurrently, each through its own context manager (so a
  ``SQLiteLog`` is flushed, a shared buffer releases its lease). After that,
  ``get`` raises :class:`BufferClosed`.
* **After cancellation.** If the ``async with`` body is cancelled, the
  buffers' tasks are cancelled with it: each context manager still exits
  (``open_buffer`` flushes its log under a shielded scope), so no buffer is
  left open and no scheduler task outlives the pool. A ``get`` cancelled
  while it waits for an opening leaves the opening going (another caller may
  be waiting for it); a factory that fails, or an opening cancelled by the
  pool's exit, leaves no entry behind: a later ``get`` of that id tries again.
* A failing factory raises its error from ``get`` (in every waiting caller),
  not from the pool's ``async with``.

Costs: ``get`` of an open id is a dict lookup plus one checkpoint; ``len``
and ``in`` are O(1). The pool never evicts: it holds every conversation it
has opened until it closes (a bounded pool would need a policy for closing a
conversation another request is using; that is left to the factory's owner).

Prior art: a connection pool keyed by database (``asyncpg``'s per-DSN
pools), minus eviction; trio's "nursery owns the task" rule for where the
buffers' tasks live.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Generic, TypeVar, overload

import anyio
import anyio.abc
import anyio.from_thread
import anyio.lowlevel

from ._core.errors import BufferClosed, InvalidArgument, InvalidType, QuiesceError
from ._runtime import RuntimeBuffer, open_buffer

__all__ = ["BufferPool", "ConversationMismatch", "PoolStats"]

B = TypeVar("B")

#: What a pool's factory is: a conversation id to an async context manager
#: whose value is that conversation's buffer.
BufferFactory = Callable[[str], AbstractAsyncContextManager[B]]


class ConversationMismatch(QuiesceError):
    """A buffer that holds one conversation was handed another.

    Raised by an integration given a single buffer (not a :class:`BufferPool`)
    when a call belongs to a conversation other than the one the buffer is
    bound to, before anything is appended and before the model is called:
    the buffer is unchanged. ``bound`` is the conversation the buffer holds,
    ``seen`` the one the call belongs to; the message names both."""

    def __init__(self, message: str, *, bound: str, seen: str) -> None:
        super().__init__(message)
        self.bound = bound
        self.seen = seen


@dataclass(frozen=True)
class PoolStats:
    """A pool's statistics: buffers open, openings in progress, whether closed."""

    open: int
    opening: int
    closed: bool


class _Slot(Generic[B]):
    """One conversation's buffer: being opened, open, or failed."""

    __slots__ = ("buffer", "close", "error", "ready")

    def __init__(self) -> None:
        self.ready = anyio.Event()
        self.close = anyio.Event()
        self.buffer: B | None = None
        self.error: BaseException | None = None


def _default_factory(conversation: str) -> AbstractAsyncContextManager[RuntimeBuffer]:
    return open_buffer()


class BufferPool(Generic[B]):
    """A map from conversation id to buffer, each opened on first use (see the
    module docstring).

    ``factory(conversation_id)`` returns an async context manager giving the
    buffer: the default is an in-memory ``open_buffer()``; for durable
    conversations e.g. ``lambda cid: open_buffer(log=SQLiteLog(f"{cid}.db"))``,
    or ``lambda cid: open_shared_buffer(dsn, cid)``. Use as
    ``async with BufferPool(factory) as pool:``; a pool is entered once.
    """

    @overload
    def __init__(self: BufferPool[RuntimeBuffer], factory: None = None) -> None: ...

    @overload
    def __init__(self, factory: Callable[[str], AbstractAsyncContextManager[B]]) -> None: ...

    def __init__(self, factory: Callable[[str], AbstractAsyncContextManager[Any]] | None = None):
        if factory is not None and not callable(factory):
            raise InvalidType(f"BufferPool: factory must be callable, not {type(factory).__name__}")
        self._factory: Callable[[str], AbstractAsyncContextManager[Any]] = (
            factory if factory is not None else _default_factory
        )
        self._slots: dict[str, _Slot[Any]] = {}
        self._tg: anyio.abc.TaskGroup | None = None
        self._entered = False
        self._closed = False
        self._token: anyio.lowlevel.EventLoopToken | None = None
        self._loop_thread: int | None = None

    # -- lifetime ------------------------------------------------------------

    async def __aenter__(self) -> BufferPool[B]:
        if self._entered:
            raise InvalidArgument("BufferPool: a pool is entered once")
        self._entered = True
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg = tg
        self._token = anyio.lowlevel.current_token()
        self._loop_thread = threading.get_ident()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        """Close every buffer the pool opened (see the module docstring). An
        exception of the body propagates as itself; cancellation goes through
        the pool's task group, which cancels the buffers' tasks (each still
        exits its context manager)."""
        tg = self._tg
        assert tg is not None
        self._closed = True
        for slot in list(self._slots.values()):
            slot.close.set()
        if exc is not None and not isinstance(exc, Exception):
            # Cancellation (or KeyboardInterrupt): the task group must see it.
            return await tg.__aexit__(exc_type, exc, tb)
        try:
            await tg.__aexit__(None, None, None)
        except BaseExceptionGroup as group:
            if exc is not None:
                raise exc from group  # the body's error first; closing errors chained
            if len(group.exceptions) == 1:
                raise group.exceptions[0] from None
            raise
        finally:
            self._slots.clear()
        return None

    async def _hold(self, conversation: str, slot: _Slot[Any]) -> None:
        """Enter the factory's context manager, publish the buffer, wait for
        the pool to close, exit it. Runs as a task of the pool."""
        try:
            async with self._factory(conversation) as buffer:
                slot.buffer = buffer
                slot.ready.set()
                await slot.close.wait()
        except Exception as exc:
            if slot.buffer is None:
                slot.error = exc  # raised by get() in every waiting caller
            else:
                raise  # closing failed: the pool's exit raises it
        finally:
            if slot.buffer is None and self._slots.get(conversation) is slot:
                del self._slots[conversation]  # a later get() tries again
            slot.ready.set()

    # -- access --------------------------------------------------------------

    async def get(self, conversation: str) -> B:
        """The buffer of ``conversation``, opened by the factory on first use.

        Always a checkpoint. Concurrent first uses of one id share one
        opening. Raises :class:`BufferClosed` outside ``async with pool``,
        :class:`InvalidArgument` / :class:`InvalidType` for an empty or
        non-str id, and the factory's own error if opening fails (then
        nothing is kept for that id). Cancellation while waiting for the
        opening leaves it going for other callers."""
        _check_id(conversation)
        await anyio.lowlevel.checkpoint()
        slot = self._slots.get(conversation)
        if slot is None:
            tg = self._live_group()
            slot = _Slot()
            self._slots[conversation] = slot
            tg.start_soon(self._hold, conversation, slot, name=f"quiesce pool: {conversation}")
        await slot.ready.wait()
        if slot.buffer is not None and not slot.close.is_set():
            buffer: B = slot.buffer
            return buffer
        if slot.error is not None:
            raise slot.error
        raise BufferClosed(f"BufferPool: closed while opening {conversation!r}")

    def get_open(self, conversation: str) -> B | None:
        """The buffer of ``conversation`` if it is open, else ``None``. Sync,
        O(1), never opens anything."""
        _check_id(conversation)
        slot = self._slots.get(conversation)
        if slot is None or slot.buffer is None or slot.close.is_set():
            return None
        buffer: B = slot.buffer
        return buffer

    def get_from_thread(self, conversation: str) -> B:
        """:meth:`get` for synchronous code in a worker thread (e.g. a
        framework's sync API run with ``anyio.to_thread.run_sync``): an open
        buffer is returned at once, else the opening runs on the pool's event
        loop while this thread waits. On the pool's own event-loop thread only
        an open buffer can be returned (waiting there would block the loop):
        otherwise :class:`InvalidArgument` says to open it with ``await
        pool.get(...)`` first or to use the framework's async API."""
        found = self.get_open(conversation)
        if found is not None:
            return found
        self._live_group()
        if threading.get_ident() == self._loop_thread:
            raise InvalidArgument(
                f"BufferPool: conversation {conversation!r} is not open and a sync call on the "
                "event loop cannot open it; await pool.get(...) first or use the async API"
            )
        return anyio.from_thread.run(self.get, conversation, token=self._token)

    def _live_group(self) -> anyio.abc.TaskGroup:
        if self._tg is None or self._closed:
            state = "closed" if self._closed else "not open (use async with)"
            raise BufferClosed(f"BufferPool: the pool is {state}")
        return self._tg

    def __contains__(self, conversation: object) -> bool:
        """Whether a buffer of ``conversation`` is open (or opening)."""
        return conversation in self._slots

    def __len__(self) -> int:
        """How many conversations are open or opening."""
        return len(self._slots)

    def conversations(self) -> tuple[str, ...]:
        """The ids of the open conversations, in the order they were first used."""
        return tuple(c for c, s in self._slots.items() if s.buffer is not None)

    def statistics(self) -> PoolStats:
        """Buffers open, openings in progress, and whether the pool is closed."""
        slots = list(self._slots.values())
        open_ = sum(1 for s in slots if s.buffer is not None)
        return PoolStats(open=open_, opening=len(slots) - open_, closed=self._closed)


def _check_id(conversation: object) -> None:
    if not isinstance(conversation, str):
        raise InvalidType(
            f"BufferPool: a conversation id must be a str, not {type(conversation).__name__}"
        )
    if not conversation:
        raise InvalidArgument("BufferPool: a conversation id must be a non-empty str")
