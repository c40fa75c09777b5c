"""A framework's streamed answer, fed into a buffer as it arrives.

The integrations' stream helpers (LangGraph's ``stream_mode="messages"``,
pydantic-ai's event streams, the Agents SDK's raw response events) read the
framework's own events and drive one :class:`MessageStream` per assistant
message. What it keeps true:

* **The answer grows in the buffer.** The message's text is written into an
  open entry (:meth:`~quiesce.Buffer.open_stream`) as it arrives: a reader
  that pins a snapshot sees a whole prefix of it, the same one for its whole
  pin; prefixes only grow. Each write is the core's sync fast path (no
  await, no lock a reader holds, no disk): O(1) amortized plus what
  ``mark_stale`` costs.
* **The entry is the message.** It is opened under the id and with the
  ``fw``/``unit`` meta the integration's store gives the finished message
  (:mod:`quiesce.integrations._store`), so a later sync of the framework's
  history finds it held (by id, or by content for a framework whose messages
  carry none) and never appends the message twice. While open it has no
  structured content, so the integrations render it as a plain assistant
  message of its text: a partial tool call or an unsigned thinking block is
  never rendered, because neither is written into it.
* **Tool calls are calls only when complete.** :meth:`MessageStream.finish`
  closes the entry with the framework's dump of the finished message and
  then appends its tool calls through the store's admission (a re-run of a
  pruned call is recorded with an ``Override``, as a sync would).
* **An interrupted stream poisons nothing.** :meth:`MessageStream.interrupt`
  (a cancelled run, an error, a consumer that stopped reading) aborts the
  entry: the text that arrived stays, marked stale with the reason, and no
  call, thinking block or half-read part of it is ever rendered.

A message whose id the buffer already holds when its first text arrives
(the framework's own sync ran ahead of the stream's consumer) is not opened
at all: the held message is whole already, and the stream only reads on.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any, Literal, Protocol

from .._core.entry import Kind
from .._core.errors import DuplicateEntry, InvalidType, UnknownEntry
from ..adapters._common import ReadmitPolicy, SyncReport
from . import _store

if TYPE_CHECKING:
    from .._protocol import AsyncBuffer

__all__ = ["MessageStream", "fresh_id", "interrupted_reason"]


class _Writer(Protocol):
    """What this module uses of :class:`~quiesce.StreamWriter`."""

    @property
    def text(self) -> str: ...

    @property
    def closed(self) -> bool: ...

    def write(self, text: str) -> int: ...

    def close(self, *, content: Any = None) -> int: ...

    def abort(self, reason: str) -> int: ...


def fresh_id(buffer: AsyncBuffer, base: str) -> str:
    """``base``, primed (``'`` appended) until no entry or tombstone of the
    buffer's head has it: the id of a message streamed under a generated id.
    O(log n) per try."""
    entry_id = base
    with buffer.snapshot() as snap:
        while True:
            try:
                snap.resolve(entry_id)
            except UnknownEntry:
                return entry_id
            entry_id += "'"


def interrupted_reason(framework: str, exc: BaseException | None) -> str:
    """The stale mark's reason of a stream cut short by ``exc`` (``None`` or
    ``GeneratorExit``: the consumer stopped reading): it names the framework
    and the cause."""
    if exc is None or isinstance(exc, GeneratorExit):
        return f"{framework}: stream interrupted (the consumer stopped reading)"
    return f"{framework}: stream interrupted ({type(exc).__name__})"


class MessageStream:
    """One assistant message of ``framework`` streaming into ``buffer`` under
    ``entry_id`` (see the module docstring).

    ``state`` is ``"idle"`` (nothing written yet: no entry), ``"open"`` (an
    open entry holds the text so far), ``"held"`` (the buffer held the id
    before the first write: nothing is written), ``"closed"`` or
    ``"aborted"``. :meth:`write` and :meth:`interrupt` are sync;
    :meth:`finish` is an ``async`` checkpoint (its appends go through the
    buffer's async write path, no disk on the loop). Cancelled inside
    :meth:`finish`, the entry is already closed (closing is sync) and the
    calls are appended whole or not at all; a later sync of the history
    appends what is missing. A buffer without ``open_stream`` (a shared
    buffer before it streams) is an :class:`~quiesce.InvalidType` here, at
    construction, before anything is written.
    """

    __slots__ = ("_buffer", "_framework", "_kind", "_turn", "_writer", "id", "state")

    def __init__(
        self,
        buffer: AsyncBuffer,
        *,
        framework: str,
        entry_id: str,
        kind: Kind = Kind.REASONING,
        turn: int | None = None,
    ) -> None:
        if not callable(getattr(buffer, "open_stream", None)):
            raise InvalidType(
                f"{framework}: a {type(buffer).__name__} cannot stream (it has no open_stream)"
            )
        self._buffer = buffer
        self._framework = framework
        self._kind = kind
        self._turn = turn
        self._writer: _Writer | None = None
        self.id = entry_id
        self.state: Literal["idle", "open", "held", "closed", "aborted"] = "idle"

    @property
    def text(self) -> str:
        """What was written so far (``""`` while idle or held). O(1)."""
        return self._writer.text if self._writer is not None else ""

    @property
    def done(self) -> bool:
        """True once :meth:`finish` or :meth:`interrupt` ran."""
        return self.state in ("closed", "aborted")

    def write(self, text: str) -> None:
        """Append ``text`` to the message (opening its entry on the first
        non-empty write). Sync: the core's fast path, O(1) amortized; never
        waits. After :meth:`finish` or :meth:`interrupt`, or while held, a
        write is ignored (a framework's late event cannot reopen a finished
        message)."""
        if not text or self.state not in ("idle", "open"):
            return
        if self._writer is None:
            meta = {"fw": self._framework, "unit": self.id}
            try:
                self._writer = self._buffer.open_stream(
                    self.id, self._kind, turn=self._turn, meta=meta
                )
            except DuplicateEntry:
                self.state = "held"  # synced whole before it streamed here
                return
            self.state = "open"
        self._writer.write(text)

    async def finish(self, unit: _store.Unit, *, readmit: ReadmitPolicy = "record") -> SyncReport:
        """The message is complete: ``unit`` is the integration's reading of
        the framework's finished message. Writes what of its text has not
        streamed (when the streamed text is a prefix of it), closes the entry
        with the framework's dump as its content, then appends the message's
        tool calls (or, if nothing streamed, the whole message) through the
        store's admission. Returns the admission's report. After
        :meth:`interrupt` it appends nothing (the interrupted text stays
        marked); a second call appends only what is still missing."""
        if self.state == "aborted":
            return SyncReport(version=self._buffer.version)
        unit = replace(unit, id=self.id)
        w = self._writer
        if w is not None and self.state == "open":
            done = w.text
            if len(unit.body) > len(done) and unit.body.startswith(done):
                w.write(unit.body[len(done) :])
            w.close(content=unit.native)
        self.state = "closed"
        return await _store.async_sync_units(
            self._buffer,
            [unit],
            framework=self._framework,
            readmit=readmit,
            turn=self._turn,
            actor=f"quiesce.integrations.{self._framework}",
        )

    def interrupt(self, reason: str) -> None:
        """The stream was cut short: abort the open entry (the text that
        arrived stays, marked stale with ``reason``). Sync, never waits;
        safe in a ``finally`` under cancellation. A no-op once finished."""
        if self.state == "open" and self._writer is not None:
            self._writer.abort(reason)
        if self.state != "closed":
            self.state = "aborted"
